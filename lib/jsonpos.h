/*
 * jsonpos: config files as JSON, with errors that point into the text.
 *
 * dt_json_parse checks strict JSON syntax first (saying what was expected
 * where), then builds a cJSON tree. A value in that tree is named for
 * messages by its path of member/element indices from the root, so
 * dt_json_fail_at can say "conf/job.json:12:7: why" about it.
 *
 * Errors: DT_EINVAL for bad text (the message has file:line:col), DT_EIO and
 * DT_ENOTFOUND for files, DT_ENOMEM. Threading: parse from one thread at a
 * time (cJSON keeps its last error in a global).
 */
#ifndef DT_JSONPOS_H
#define DT_JSONPOS_H

#include <cJSON.h>
#include <stddef.h>

#include "err.h"

/* A document: its text and the name messages give it. */
typedef struct dt_json_doc {
    const char *text;   /* NUL-terminated; borrowed */
    const char *source; /* file name, for messages; borrowed */
} dt_json_doc;

/* Reads a whole file (at most 16 MiB, no NUL bytes) as a C string; *out is
 * the caller's to free. */
int dt_json_read_file(const char *path, char **out, dt_err *err) DT_WARN_UNUSED;
/* Parses d->text; *out is the caller's to cJSON_Delete. On bad text err
 * reads "source:line:col: invalid JSON: what" (DT_EINVAL); DT_ENOMEM when
 * memory runs out. */
int dt_json_parse(const dt_json_doc *d, cJSON **out, dt_err *err) DT_WARN_UNUSED;

/* 1 when text (NUL-terminated) is one strict JSON value, as dt_json_parse
 * wants it (a BOM and whitespace around it allowed), else 0. For a caller
 * of cJSON's parser to tell a failure for want of memory (the text passes)
 * from one on the text. */
int dt_json_valid(const char *text);

/* dt_json_parse for a file whose root must be an object; otherwise err
 * reads "source:1:1: a <kind> file holds an object<shape> (got ...)". */
int dt_json_parse_object(const dt_json_doc *d, const char *kind, const char *shape, cJSON **out,
                         dt_err *err) DT_WARN_UNUSED;

/* Sets err to "source:line:col: <fmt>" for the value reached by path (n
 * indices; n = 0 is the root), or its key when want_key; returns DT_EINVAL. */
int dt_json_fail_at(const dt_json_doc *d, const int *path, int n, int want_key, dt_err *err,
                    const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* "line:col" of the same, for "(first at ...)". */
void dt_json_where(const dt_json_doc *d, const int *path, int n, int want_key, char *buf,
                   size_t cap);

/* At most 40 bytes of s for a message, control characters as '?'. */
const char *dt_json_shown(const char *s, char buf[48]);
/* A number as dt_json_describe shows it: integers whole, others to 10
 * digits. */
void dt_json_describe_number(double x, char *buf, size_t cap);
/* A short, printable rendering of a JSON value for "(got ...)". */
void dt_json_describe(const cJSON *v, char *buf, size_t cap);
/* The first member named key (case-sensitive, unlike cJSON_GetObjectItem),
 * and its index among the members; NULL (index -1) when there is none. */
const cJSON *dt_json_member(const cJSON *obj, const char *key, int *index);
/* Index of an earlier member of obj with the name of member m (index k), or -1. */
int dt_json_earlier_twin(const cJSON *obj, const cJSON *m, int k);

#endif
