/*
 * jsonpos: JSON text with positions. cJSON builds the tree but keeps no
 * positions, so this module also scans the raw text itself, for two things:
 *   - checking the syntax before cJSON does, to say what was expected at
 *     which line:col (cJSON's error pointer is only roughly placed);
 *   - finding the line:col of a value for errors about its content: a value
 *     is named by its path of indices (the 3rd member of the root, then the
 *     1st member of that object, then the 2nd element of that list), not by
 *     keys, so the scanner never has to decode escapes to agree with cJSON
 *     about which member is meant.
 * Lines count from 1 at '\n'; columns count characters (UTF-8 sequences) from
 * 1, a tab being one column.
 *
 * Threading: no state of its own, but cJSON records its last parse error in
 * a global (never read here), so parse from one thread at a time.
 */
#include "jsonpos.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

#define MAX_FILE_BYTES (16L << 20)
#define MAX_NESTING 1000 /* cJSON's CJSON_NESTING_LIMIT */
#define WHY_MAX 400

/* ---- positions in the raw text ---- */

static size_t skip_bom(const char *t) {
    return strncmp(t, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0; /* cJSON skips it too */
}

/* cJSON takes every byte <= 32 as whitespace; so do we. */
static size_t skip_ws(const char *t, size_t i) {
    while (t[i] != '\0' && (unsigned char)t[i] <= 32)
        i++;
    return i;
}

static void line_col(const char *t, size_t off, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = skip_bom(t); i < off && t[i] != '\0'; i++) {
        if (t[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)t[i] & 0xC0) != 0x80) {
            c++; /* continuation bytes belong to the character before */
        }
    }
    *line = l;
    *col = c;
}

/* Past the string starting at t[i] == '"' (or i itself if it does not). */
static size_t skip_string(const char *t, size_t i) {
    if (t[i] != '"') return i;
    for (i++; t[i] != '\0' && t[i] != '"'; i++)
        if (t[i] == '\\' && t[i + 1] != '\0') i++;
    return t[i] == '"' ? i + 1 : i;
}

/* Past the value starting at t[i]; assumes text that passed the syntax
 * check, and stops at the end of the text if it did not. */
static size_t skip_value(const char *t, size_t i) {
    if (t[i] == '"') return skip_string(t, i);
    if (t[i] == '{' || t[i] == '[') {
        int depth = 0;
        while (t[i] != '\0') {
            if (t[i] == '"') {
                i = skip_string(t, i);
                continue;
            }
            if (t[i] == '{' || t[i] == '[') depth++;
            if ((t[i] == '}' || t[i] == ']') && --depth == 0) return i + 1;
            i++;
        }
        return i;
    }
    while ((unsigned char)t[i] > 32 && t[i] != ',' && t[i] != '}' && t[i] != ']')
        i++;
    return i;
}

/*
 * Offset of the value reached by following path (n indices, each the index of
 * a member of an object or of an element of a list), or of its key when
 * want_key and the last step is into an object. For text that passed the
 * syntax check every step exists; should one not, the offset of the
 * container is returned.
 */
static size_t locate(const char *t, const int *path, int n, int want_key) {
    size_t i = skip_ws(t, skip_bom(t));
    for (int k = 0; k < n; k++) {
        char open = t[i];
        if (open != '{' && open != '[') return i;
        size_t container = i;
        i = skip_ws(t, i + 1);
        for (int m = 0;; m++) {
            if (t[i] == '\0' || t[i] == '}' || t[i] == ']') return container;
            size_t key = i;
            if (open == '{') {
                i = skip_ws(t, skip_string(t, i));
                if (t[i] == ':') i++;
                i = skip_ws(t, i);
            }
            if (m == path[k]) {
                if (want_key && k == n - 1 && open == '{') return key;
                break;
            }
            i = skip_ws(t, skip_value(t, i));
            if (t[i] == ',') i = skip_ws(t, i + 1);
        }
    }
    return i;
}

/* ---- explaining syntax errors ---- */

typedef struct {
    const char *t;
    size_t i;
    int failed;
    size_t at;
    char why[160];
} scan;

static int scan_fail(scan *s, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int scan_fail(scan *s, size_t at, const char *fmt, ...) {
    if (s->failed) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->why, sizeof s->why, fmt, ap);
    va_end(ap);
    s->failed = 1;
    s->at = at;
    return -1;
}

/* Names what sits at p for "found ..." messages. */
static void describe_text(const char *p, char *buf, size_t cap) {
    unsigned char ch = (unsigned char)*p;
    if (ch == '\0') {
        snprintf(buf, cap, "the end of the input");
    } else if (ch == '"') {
        snprintf(buf, cap, "a string");
    } else if (isalnum(ch) || ch == '_' || ch == '-' || ch == '.') {
        int n = 0;
        while (n < 24 && (isalnum((unsigned char)p[n]) || p[n] == '_' || p[n] == '-' ||
                          p[n] == '.' || p[n] == '+'))
            n++;
        snprintf(buf, cap, "'%.*s'", n, p);
    } else if (ch < 32 || ch >= 127) {
        snprintf(buf, cap, "byte 0x%02x", ch);
    } else {
        snprintf(buf, cap, "'%c'", ch);
    }
}

static int scan_value(scan *s, int depth);

/* The scanner takes only JSON's four whitespace bytes. */
static size_t json_ws(const char *t, size_t i) {
    while (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r')
        i++;
    return i;
}

/* The value of 4 hex digits at p, or -1. */
static long hex4(const char *p) {
    long v = 0;
    for (int k = 0; k < 4; k++) {
        int ch = (unsigned char)p[k];
        if (!isxdigit(ch)) return -1;
        v = v * 16 + (isdigit(ch) ? ch - '0' : tolower(ch) - 'a' + 10);
    }
    return v;
}

static int scan_string(scan *s) {
    const char *t = s->t;
    size_t start = s->i;
    for (s->i++;; s->i++) {
        char ch = t[s->i];
        if (ch == '\0') return scan_fail(s, start, "unterminated string");
        if (ch == '\n' || ch == '\r')
            return scan_fail(s, start, "string not closed before the end of the line");
        if ((unsigned char)ch < 0x20)
            return scan_fail(s, s->i, "raw control character 0x%02x in a string (escape it)",
                             (unsigned char)ch);
        if (ch == '"') {
            s->i++;
            return 0;
        }
        if (ch != '\\') continue;
        char e = t[s->i + 1];
        if (e == '\0') return scan_fail(s, start, "unterminated string");
        if (e == 'u') {
            long code = hex4(t + s->i + 2);
            if (code < 0) return scan_fail(s, s->i, "bad \\u escape: want 4 hex digits");
            if (code == 0) /* C strings end there */
                return scan_fail(s, s->i, "\\u0000 (NUL) cannot be in a string");
            /* UTF-16 surrogates come in pairs, high then low. */
            if (code >= 0xDC00 && code <= 0xDFFF)
                return scan_fail(s, s->i, "\\u%.4s is half a surrogate pair", t + s->i + 2);
            if (code >= 0xD800 && code <= 0xDBFF) {
                long low = t[s->i + 6] == '\\' && t[s->i + 7] == 'u' ? hex4(t + s->i + 8) : -1;
                if (low < 0xDC00 || low > 0xDFFF)
                    return scan_fail(s, s->i, "\\u%.4s is half a surrogate pair", t + s->i + 2);
                s->i += 6;
            }
            s->i += 5;
        } else if (strchr("\"\\/bfnrt", e)) {
            s->i++;
        } else {
            return scan_fail(s, s->i, "bad escape '\\%c' in a string", e);
        }
    }
}

static int scan_number(scan *s) {
    const char *t = s->t;
    size_t start = s->i;
    if (t[s->i] == '-') s->i++;
    if (!isdigit((unsigned char)t[s->i])) return scan_fail(s, start, "bad number");
    if (t[s->i] == '0' && isdigit((unsigned char)t[s->i + 1]))
        return scan_fail(s, start, "bad number (a leading zero)");
    while (isdigit((unsigned char)t[s->i]))
        s->i++;
    if (t[s->i] == '.') {
        s->i++;
        if (!isdigit((unsigned char)t[s->i])) return scan_fail(s, start, "bad number");
        while (isdigit((unsigned char)t[s->i]))
            s->i++;
    }
    if (t[s->i] == 'e' || t[s->i] == 'E') {
        s->i++;
        if (t[s->i] == '+' || t[s->i] == '-') s->i++;
        if (!isdigit((unsigned char)t[s->i])) return scan_fail(s, start, "bad number");
        while (isdigit((unsigned char)t[s->i]))
            s->i++;
    }
    return 0;
}

static int scan_end(scan *s, size_t open) {
    int line, col;
    line_col(s->t, open, &line, &col);
    return scan_fail(s, s->i, "unexpected end of the input ('%c' at %d:%d is not closed)",
                     s->t[open], line, col);
}

static int scan_container(scan *s, int depth) {
    const char *t = s->t;
    size_t open = s->i;
    int is_object = t[open] == '{';
    char close = is_object ? '}' : ']';
    char found[48];
    if (depth > MAX_NESTING) return scan_fail(s, open, "nested deeper than %d levels", MAX_NESTING);
    s->i = json_ws(t, s->i + 1);
    if (t[s->i] == close) {
        s->i++;
        return 0;
    }
    for (int first = 1;; first = 0) {
        s->i = json_ws(t, s->i);
        if (t[s->i] == '\0') return scan_end(s, open);
        if (!first && t[s->i] == close)
            return scan_fail(s, s->i, "trailing comma before '%c'", close);
        if (is_object) {
            if (t[s->i] == '\'') return scan_fail(s, s->i, "keys take double quotes");
            if (t[s->i] != '"') {
                describe_text(t + s->i, found, sizeof found);
                return scan_fail(s, s->i, "expected a \"key\", found %s", found);
            }
            if (scan_string(s)) return -1;
            s->i = json_ws(t, s->i);
            if (t[s->i] == '\0') return scan_end(s, open);
            if (t[s->i] != ':') {
                describe_text(t + s->i, found, sizeof found);
                return scan_fail(s, s->i, "expected ':' after the key, found %s", found);
            }
            s->i++;
        }
        if (scan_value(s, depth)) return -1;
        s->i = json_ws(t, s->i);
        if (t[s->i] == ',') {
            s->i++;
            continue;
        }
        if (t[s->i] == close) {
            s->i++;
            return 0;
        }
        if (t[s->i] == '\0') return scan_end(s, open);
        describe_text(t + s->i, found, sizeof found);
        return scan_fail(s, s->i, "expected ',' or '%c' after %s, found %s", close,
                         is_object ? "a member" : "an element", found);
    }
}

static int scan_value(scan *s, int depth) {
    const char *t = s->t;
    char found[48];
    s->i = json_ws(t, s->i);
    char ch = t[s->i];
    if (ch == '{' || ch == '[') return scan_container(s, depth + 1);
    if (ch == '"') return scan_string(s);
    if (ch == '-' || isdigit((unsigned char)ch)) return scan_number(s);
    if (ch == '\'') return scan_fail(s, s->i, "strings take double quotes");
    static const char *const words[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(words[k]);
        if (strncmp(t + s->i, words[k], n) == 0 && !isalnum((unsigned char)t[s->i + n])) {
            s->i += n;
            return 0;
        }
    }
    describe_text(t + s->i, found, sizeof found);
    return scan_fail(s, s->i, "expected a value, found %s", found);
}

/* Finds the first syntax error in t: returns 1 and sets *at and why, or 0. */
static int diagnose(const char *t, size_t *at, char *why, size_t cap) {
    scan s = {.t = t, .i = skip_bom(t)};
    s.i = json_ws(t, s.i);
    if (t[s.i] == '\0') {
        scan_fail(&s, s.i, "no JSON value (the input is empty)");
    } else if (scan_value(&s, 0) == 0) {
        s.i = json_ws(t, s.i);
        if (t[s.i] != '\0') {
            char found[48];
            describe_text(t + s.i, found, sizeof found);
            scan_fail(&s, s.i, "unexpected %s after the JSON value", found);
        }
    }
    if (!s.failed) return 0;
    *at = s.at;
    snprintf(why, cap, "%s", s.why);
    return 1;
}

/* ---- errors that point into a document ---- */

int dt_json_fail_at(const dt_json_doc *d, const int *path, int n, int want_key, dt_err *err,
                    const char *fmt, ...) {
    char why[WHY_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    int line, col;
    line_col(d->text, locate(d->text, path, n, want_key), &line, &col);
    return dt_err_set(err, DT_EINVAL, "%s:%d:%d: %s", d->source, line, col, why);
}

void dt_json_where(const dt_json_doc *d, const int *path, int n, int want_key, char *buf,
                   size_t cap) {
    int line, col;
    line_col(d->text, locate(d->text, path, n, want_key), &line, &col);
    snprintf(buf, cap, "%d:%d", line, col);
}

/* Our scanner judges the syntax first: it is strict JSON (cJSON lets "1."
 * and "\u12G4" through) and says what is wrong where. cJSON then builds the
 * tree; should it still fail, it ran out of memory (what it accepts is a
 * superset of what the scanner does, nesting limit included). */
int dt_json_parse(const dt_json_doc *d, cJSON **out, dt_err *err) {
    size_t at = 0;
    char why[200];
    int line, col;
    *out = NULL;
    if (!diagnose(d->text, &at, why, sizeof why)) {
        *out = cJSON_ParseWithOpts(d->text, NULL, 1);
        if (*out) return 0;
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory parsing its JSON", d->source);
    }
    line_col(d->text, at, &line, &col);
    return dt_err_set(err, DT_EINVAL, "%s:%d:%d: invalid JSON: %s", d->source, line, col, why);
}

int dt_json_valid(const char *text) {
    size_t at;
    char why[8];
    return !diagnose(text, &at, why, sizeof why);
}

int dt_json_parse_object(const dt_json_doc *d, const char *kind, const char *shape, cJSON **out,
                         dt_err *err) {
    int rc = dt_json_parse(d, out, err);
    if (rc || cJSON_IsObject(*out)) return rc;
    char got[80];
    dt_json_describe(*out, got, sizeof got);
    cJSON_Delete(*out);
    *out = NULL;
    return dt_json_fail_at(d, NULL, 0, 0, err, "a %s file holds an object%s (got %s)", kind, shape,
                           got);
}

/* Reads a whole file as a C string; *out is the caller's to free. */
int dt_json_read_file(const char *path, char **out, dt_err *err) {
    char *buf = NULL;
    size_t len = 0, cap = 0;
    char msg[128];
    int rc;
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        if (strerror_r(e, msg, sizeof msg) != 0) snprintf(msg, sizeof msg, "errno %d", e);
        return dt_err_set(err, e == ENOENT ? DT_ENOTFOUND : DT_EIO, "%s: cannot open: %s", path,
                          msg);
    }
    for (;;) {
        if (cap - len < 4096) {
            size_t want = cap ? cap * 2 : 8192;
            char *grown = dt_realloc(buf, want + 1);
            if (!grown) {
                rc = dt_err_set(err, DT_ENOMEM, "%s: read: out of memory", path);
                goto fail;
            }
            buf = grown;
            cap = want;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len > (size_t)MAX_FILE_BYTES) {
            rc = dt_err_set(err, DT_EINVAL, "%s: larger than %ld bytes; not a config file", path,
                            MAX_FILE_BYTES);
            goto fail;
        }
        if (got == 0) break;
    }
    if (ferror(f)) {
        int e = errno;
        if (strerror_r(e, msg, sizeof msg) != 0) snprintf(msg, sizeof msg, "errno %d", e);
        rc = dt_err_set(err, DT_EIO, "%s: read: %s", path, msg);
        goto fail;
    }
    buf[len] = '\0';
    const char *nul = memchr(buf, '\0', len);
    if (nul) {
        int line, col;
        line_col(buf, (size_t)(nul - buf), &line, &col);
        rc = dt_err_set(err, DT_EINVAL, "%s:%d:%d: a NUL byte: not a text file", path, line, col);
        goto fail;
    }
    fclose(f);
    *out = buf;
    return 0;
fail:
    fclose(f);
    free(buf);
    return rc;
}

/* At most 40 bytes of s for a message, control characters as '?'. */
const char *dt_json_shown(const char *s, char buf[48]) {
    size_t n = 0;
    for (; n < 40 && s[n] != '\0'; n++)
        buf[n] = (unsigned char)s[n] < 32 || s[n] == 127 ? '?' : s[n];
    snprintf(buf + n, 48 - n, "%s", s[n] ? "..." : "");
    return buf;
}

void dt_json_describe_number(double x, char *buf, size_t cap) {
    if (!isfinite(x))
        snprintf(buf, cap, "a number too large for a double"); /* how cJSON reads 1e999 */
    else if (x == floor(x) && fabs(x) < 1e18)
        snprintf(buf, cap, "%.0f", x);
    else
        snprintf(buf, cap, "%.10g", x);
}

/* A short, printable rendering of a JSON value for "(got ...)". */
void dt_json_describe(const cJSON *v, char *buf, size_t cap) {
    char text[48];
    if (cJSON_IsString(v)) {
        snprintf(buf, cap, "\"%s\"", dt_json_shown(v->valuestring, text));
    } else if (cJSON_IsNumber(v)) {
        dt_json_describe_number(v->valuedouble, buf, cap);
    } else if (cJSON_IsBool(v)) {
        snprintf(buf, cap, "%s", cJSON_IsTrue(v) ? "true" : "false");
    } else if (cJSON_IsNull(v)) {
        snprintf(buf, cap, "null");
    } else if (cJSON_IsArray(v)) {
        snprintf(buf, cap, "a list");
    } else {
        snprintf(buf, cap, "an object");
    }
}

/* The first member named key (case-sensitive, unlike cJSON_GetObjectItem),
 * and its index among the members; NULL when there is none. */
const cJSON *dt_json_member(const cJSON *obj, const char *key, int *index) {
    int k = 0;
    for (const cJSON *m = obj->child; m; m = m->next, k++) {
        if (m->string && strcmp(m->string, key) == 0) {
            *index = k;
            return m;
        }
    }
    *index = -1;
    return NULL;
}

/* Index of an earlier member of obj named like member k, or -1. */
int dt_json_earlier_twin(const cJSON *obj, const cJSON *m, int k) {
    int j = 0;
    for (const cJSON *e = obj->child; e && j < k; e = e->next, j++)
        if (strcmp(e->string, m->string) == 0) return j;
    return -1;
}
