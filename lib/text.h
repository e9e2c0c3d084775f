/*
 * text: the one rule for names that come from the wire or from files, the
 * UTF-8 and plain-decimal checks of text read from files, and the escaping
 * that keeps every log record on one line.
 *
 * A tensor name crosses C strings, log lines, checkpoint headers and file
 * names, so it must be a non-empty, valid UTF-8 string without NUL or other
 * control bytes. Pull, Push, Create and the checkpoint reader all apply
 * dt_text_check_name, so a name refused by one is refused by all.
 */
#ifndef DT_TEXT_H
#define DT_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Checks the len bytes at s (not NUL-terminated) as a tensor name of at most
 * max_len bytes. The message names `what` ("push: gradients[2]"). */
int dt_text_check_name(const char *s, size_t len, size_t max_len, const char *what,
                       dt_err *err) DT_WARN_UNUSED;

/* Checks the len bytes at s as one line of free text that a ps keeps and
 * echoes to its callers (a failure's reason): at most max_len bytes of
 * valid UTF-8 without NUL or other control bytes, so no client that decodes
 * proto3 strings strictly, or prints them, is broken by it. Empty is fine.
 * The message names `what` ("ShutdownRequest: failure"). */
int dt_text_check_line(const char *s, size_t len, size_t max_len, const char *what,
                       dt_err *err) DT_WARN_UNUSED;

/* Length of the valid UTF-8 sequence starting at s (1-4), or 0 when the
 * bytes there are not one (bad lead, bad continuation, overlong form,
 * surrogate, above U+10FFFF, or cut short by n). */
size_t dt_text_utf8_seq(const unsigned char *s, size_t n);

/* Length of the longest prefix of s[0..n) that is valid UTF-8 by
 * dt_text_utf8_seq's rules (control bytes count as valid): the index of the
 * first bad byte, or n when there is none. */
size_t dt_text_utf8_prefix(const unsigned char *s, size_t n);

/* Parses a plain decimal ("0", "1200": digits only, no sign, space or
 * exponent; leading zeros allowed) no larger than max into *out. 0, or -1
 * with *out untouched when s is empty, holds anything else or exceeds max. */
int dt_text_parse_decimal(const char *s, uint64_t max, uint64_t *out);

/* Copies the n bytes of src into dst (cap bytes, always NUL-terminated),
 * writing control bytes, backslashes and bytes that are not valid UTF-8 as
 * \n, \r, \t, \\ or \xHH. Stops at a whole escape when dst is full. Returns
 * the length written. */
size_t dt_text_escape(char *dst, size_t cap, const char *src, size_t n);

/* Copies the n bytes of src into dst (cap bytes, always NUL-terminated) as
 * the inside of a JSON string (RFC 8259): '"' and '\\' escaped, control
 * bytes (and DEL) as \u00XX, valid UTF-8 kept, and each byte that is not
 * valid UTF-8 written as the six characters \\xHH (a backslash, then xHH:
 * the byte stays readable and the output stays valid UTF-8). Stops at a
 * whole escape when dst is full. Returns the length written. */
size_t dt_text_json_escape(char *dst, size_t cap, const char *src, size_t n);

/* Writes the NULL-terminated names into buf (cap bytes, always
 * NUL-terminated) as `a, b or c`, each in double quotes when quote is set:
 * the list a message refusing a name offers instead, written from the names
 * table itself so the two never disagree. Returns buf. */
const char *dt_text_choices(char *buf, size_t cap, const char *const *names, int quote);

#endif
