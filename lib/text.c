/*
 * text: name validation, UTF-8 and decimal checks, log escaping. Pure
 * functions, no state.
 */
#include "text.h"

#include <stdio.h>
#include <string.h>

size_t dt_text_utf8_seq(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned min; /* smallest code point of that length: shorter is overlong */
    unsigned cp;
    if ((c & 0xE0) == 0xC0) {
        len = 2, min = 0x80, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, min = 0x800, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4, min = 0x10000, cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

size_t dt_text_utf8_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t k = s[i] < 0x80 ? 1 : dt_text_utf8_seq(s + i, n - i);
        if (k == 0) break;
        i += k;
    }
    return i;
}

int dt_text_parse_decimal(const char *s, uint64_t max, uint64_t *out) {
    if (!*s) return -1;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        unsigned d = (unsigned)(*s - '0');
        if (v > (max - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* Every byte of s valid UTF-8 and no control byte; `kind` says what s is
 * in the message ("name", "text"). */
static int check_bytes(const char *s, size_t len, const char *what, const char *kind, dt_err *err) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        if (u[i] == 0)
            return dt_err_set(err, DT_EINVAL, "%s: %s contains a NUL byte at %zu", what, kind, i);
        if (u[i] < 0x20 || u[i] == 0x7F)
            return dt_err_set(err, DT_EINVAL, "%s: %s contains control byte 0x%02x at %zu", what,
                              kind, u[i], i);
        size_t k = dt_text_utf8_seq(u + i, len - i);
        if (k == 0)
            return dt_err_set(err, DT_EINVAL, "%s: %s is not valid UTF-8 at byte %zu", what, kind,
                              i);
        i += k;
    }
    return 0;
}

int dt_text_check_name(const char *s, size_t len, size_t max_len, const char *what, dt_err *err) {
    if (len == 0) return dt_err_set(err, DT_EINVAL, "%s: empty name", what);
    if (len > max_len)
        return dt_err_set(err, DT_EINVAL, "%s: name of %zu bytes (at most %zu)", what, len,
                          max_len);
    return check_bytes(s, len, what, "name", err);
}

int dt_text_check_line(const char *s, size_t len, size_t max_len, const char *what, dt_err *err) {
    if (len > max_len)
        return dt_err_set(err, DT_EINVAL, "%s: text of %zu bytes (at most %zu)", what, len,
                          max_len);
    return check_bytes(s, len, what, "text", err);
}

/* The escape of one byte, or NULL when it is written as it is. */
static const char *short_escape(unsigned char c) {
    switch (c) {
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\\': return "\\\\";
    default: return NULL;
    }
}

size_t dt_text_escape(char *dst, size_t cap, const char *src, size_t n) {
    if (cap == 0) return 0;
    const unsigned char *u = (const unsigned char *)src;
    size_t out = 0;
    for (size_t i = 0; i < n;) {
        char esc[5];
        const char *piece = short_escape(u[i]);
        size_t take = 1; /* input bytes this piece stands for */
        if (!piece && (u[i] < 0x20 || u[i] == 0x7F)) {
            snprintf(esc, sizeof esc, "\\x%02x", u[i]);
            piece = esc;
        } else if (!piece && u[i] >= 0x80) {
            take = dt_text_utf8_seq(u + i, n - i);
            if (take == 0) {
                snprintf(esc, sizeof esc, "\\x%02x", u[i]);
                piece = esc;
                take = 1;
            }
        }
        size_t plen = piece ? strlen(piece) : take;
        if (out + plen >= cap) break;
        memcpy(dst + out, piece ? piece : (const char *)u + i, plen);
        out += plen;
        i += take;
    }
    dst[out] = '\0';
    return out;
}

size_t dt_text_json_escape(char *dst, size_t cap, const char *src, size_t n) {
    if (cap == 0) return 0;
    const unsigned char *u = (const unsigned char *)src;
    size_t out = 0;
    for (size_t i = 0; i < n;) {
        char esc[8];
        const char *piece = NULL;
        size_t take = 1; /* input bytes this piece stands for */
        if (u[i] == '"')
            piece = "\\\"";
        else if (u[i] == '\\')
            piece = "\\\\";
        else if (u[i] == '\n')
            piece = "\\n";
        else if (u[i] == '\t')
            piece = "\\t";
        else if (u[i] < 0x20 || u[i] == 0x7F) {
            snprintf(esc, sizeof esc, "\\u%04x", u[i]);
            piece = esc;
        } else if (u[i] >= 0x80) {
            take = dt_text_utf8_seq(u + i, n - i);
            if (take == 0) { /* "\\xHH" in the JSON text: a backslash, then xHH */
                snprintf(esc, sizeof esc, "\\\\x%02x", u[i]);
                piece = esc;
                take = 1;
            }
        }
        size_t plen = piece ? strlen(piece) : take;
        if (out + plen >= cap) break;
        memcpy(dst + out, piece ? piece : (const char *)u + i, plen);
        out += plen;
        i += take;
    }
    dst[out] = '\0';
    return out;
}

const char *dt_text_choices(char *buf, size_t cap, const char *const *names, int quote) {
    if (cap == 0) return buf;
    buf[0] = '\0';
    const char *q = quote ? "\"" : "";
    size_t n = 0;
    for (const char *const *c = names; *c && n < cap; c++) {
        const char *sep = c == names ? "" : c[1] ? ", " : " or ";
        int w = snprintf(buf + n, cap - n, "%s%s%s%s", sep, q, *c, q);
        if (w < 0) break;
        n += (size_t)w;
    }
    return buf;
}
