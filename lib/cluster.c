/*
 * cluster: the cluster file and the job config, both JSON, parsed with cJSON.
 *
 * cJSON builds the tree but keeps no positions, so this file also scans the
 * raw text itself, for two things:
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
 * Invariants: a dt_cluster is either empty (counts 0, arrays NULL) or fully
 * checked; a failed dt_job_parse or dt_job_set leaves the job unchanged.
 * Threading: no state of its own, but cJSON records its last parse error in
 * a global (never read here), so parse from one thread at a time.
 */
#include "cluster.h"

#include <cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

#define MAX_FILE_BYTES (16L << 20)
#define MAX_NESTING 1000                 /* cJSON's CJSON_NESTING_LIMIT */
#define MAX_TASKS 4096                   /* per job; keeps the duplicate check cheap */
#define MAX_EXACT_INT 9007199254740992.0 /* 2^53: JSON numbers are doubles */
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

/* ---- documents and errors that point into them ---- */

typedef struct {
    const char *text;
    const char *source; /* file name, for messages */
} doc;

static int fail_at(const doc *d, const int *path, int n, int want_key, dt_err *err, const char *fmt,
                   ...) __attribute__((format(printf, 6, 7)));
static int fail_at(const doc *d, const int *path, int n, int want_key, dt_err *err, const char *fmt,
                   ...) {
    char why[WHY_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    int line, col;
    line_col(d->text, locate(d->text, path, n, want_key), &line, &col);
    return dt_err_set(err, DT_EINVAL, "%s:%d:%d: %s", d->source, line, col, why);
}

static void where(const doc *d, const int *path, int n, int want_key, char *buf, size_t cap) {
    int line, col;
    line_col(d->text, locate(d->text, path, n, want_key), &line, &col);
    snprintf(buf, cap, "%d:%d", line, col);
}

/* Our scanner judges the syntax first: it is strict JSON (cJSON lets "1."
 * and "\u12G4" through) and says what is wrong where. cJSON then builds the
 * tree; should it still fail, it ran out of memory. */
static int parse_json(const doc *d, cJSON **out, dt_err *err) {
    size_t at = 0;
    char why[200];
    int line, col;
    *out = NULL;
    if (!diagnose(d->text, &at, why, sizeof why)) {
        const char *end = NULL;
        *out = cJSON_ParseWithOpts(d->text, &end, 1);
        if (*out) return 0;
        at = end ? (size_t)(end - d->text) : 0;
        snprintf(why, sizeof why, "cannot parse (out of memory?)");
    }
    line_col(d->text, at, &line, &col);
    return dt_err_set(err, DT_EINVAL, "%s:%d:%d: invalid JSON: %s", d->source, line, col, why);
}

/* Reads a whole file as a C string; *out is the caller's to free. */
static int read_text(const char *path, char **out, dt_err *err) {
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
            char *grown = realloc(buf, want + 1);
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
static const char *shown(const char *s, char buf[48]) {
    size_t n = 0;
    for (; n < 40 && s[n] != '\0'; n++)
        buf[n] = (unsigned char)s[n] < 32 || s[n] == 127 ? '?' : s[n];
    snprintf(buf + n, 48 - n, "%s", s[n] ? "..." : "");
    return buf;
}

/* A short, printable rendering of a JSON value for "(got ...)". */
static void describe_json(const cJSON *v, char *buf, size_t cap) {
    char text[48];
    if (cJSON_IsString(v)) {
        snprintf(buf, cap, "\"%s\"", shown(v->valuestring, text));
    } else if (cJSON_IsNumber(v)) {
        double x = v->valuedouble;
        if (!isfinite(x))
            snprintf(buf, cap, "a number too large for a double");
        else if (x == floor(x) && fabs(x) < 1e18)
            snprintf(buf, cap, "%.0f", x);
        else
            snprintf(buf, cap, "%.10g", x);
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
static const cJSON *member(const cJSON *obj, const char *key, int *index) {
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
static int earlier_twin(const cJSON *obj, const cJSON *m, int k) {
    int j = 0;
    for (const cJSON *e = obj->child; e && j < k; e = e->next, j++)
        if (strcmp(e->string, m->string) == 0) return j;
    return -1;
}

/* Top level of a file that holds "cluster" or "job": only those and "task"
 * (TF_CONFIG's, read by the command line, not here). */
static int check_top_keys(const doc *d, const cJSON *root, dt_err *err) {
    int k = 0;
    for (const cJSON *m = root->child; m; m = m->next, k++) {
        char key[48];
        shown(m->string, key);
        int path[1] = {k};
        int twin = earlier_twin(root, m, k);
        if (twin >= 0) {
            char first[32];
            path[0] = twin;
            where(d, path, 1, 1, first, sizeof first);
            path[0] = k;
            return fail_at(d, path, 1, 1, err, "duplicate field \"%s\" (first at %s)", key, first);
        }
        const char *name = m->string;
        if (strcmp(name, "cluster") == 0 || strcmp(name, "job") == 0 || strcmp(name, "task") == 0)
            continue;
        if (strcmp(name, "ps") == 0 || strcmp(name, "worker") == 0 || strcmp(name, "chief") == 0)
            return fail_at(d, path, 1, 1, err,
                           "\"%s\" belongs under \"cluster\": {\"cluster\": {\"ps\": [...], "
                           "\"worker\": [...]}}",
                           key);
        return fail_at(d, path, 1, 1, err,
                       "unknown field \"%s\" (next to \"cluster\" a file may hold only \"job\" "
                       "and \"task\")",
                       key);
    }
    return 0;
}

/* ---- cluster ---- */

/* Parses "host:port" or "[ipv6]:port" into a; on failure why says what is wrong. */
static int parse_addr(const char *s, dt_addr *a, char *why, size_t cap) {
    const char *host, *host_end, *p;
    int ipv6 = 0;
    if (*s == '\0') return snprintf(why, cap, "empty address (want host:port)"), -1;
    for (const char *q = s; *q; q++)
        if ((unsigned char)*q <= 32 || *q == 127)
            return snprintf(why, cap, "contains a space or control character"), -1;
    if (*s == '[') {
        const char *close = strchr(s, ']');
        if (!close) return snprintf(why, cap, "'[' without ']' (want [ipv6]:port)"), -1;
        host = s + 1;
        host_end = close;
        if (host == host_end) return snprintf(why, cap, "empty host"), -1;
        for (const char *q = host; q < host_end; q++)
            if (!isxdigit((unsigned char)*q) && *q != ':' && *q != '.')
                return snprintf(why, cap, "bad character '%c' in an IPv6 address", *q), -1;
        if (!memchr(host, ':', (size_t)(host_end - host)))
            return snprintf(why, cap, "brackets are for IPv6 addresses only"), -1;
        ipv6 = 1;
        p = close + 1;
        if (*p == '\0') return snprintf(why, cap, "missing port (want [ipv6]:port)"), -1;
        if (*p != ':') return snprintf(why, cap, "expected ':' after ']'"), -1;
        p++;
    } else {
        const char *colon = strchr(s, ':');
        if (!colon) return snprintf(why, cap, "missing port (want host:port)"), -1;
        if (strchr(colon + 1, ':'))
            return snprintf(why, cap, "IPv6 addresses take brackets, e.g. [::1]:1681"), -1;
        host = s;
        host_end = colon;
        if (host == host_end) return snprintf(why, cap, "empty host (want host:port)"), -1;
        for (const char *q = host; q < host_end; q++)
            if (!isalnum((unsigned char)*q) && *q != '-' && *q != '.' && *q != '_')
                return snprintf(why, cap, "bad character '%c' in the host", *q), -1;
        p = colon + 1;
    }
    if (host_end - host >= DT_HOST_MAX)
        return snprintf(why, cap, "host longer than %d bytes", DT_HOST_MAX - 1), -1;
    if (*p == '\0') return snprintf(why, cap, "missing port after ':'"), -1;
    if (!isdigit((unsigned char)*p))
        return snprintf(why, cap, "port must be a number from 1 to 65535"), -1;
    long port = 0;
    const char *q = p;
    for (; isdigit((unsigned char)*q); q++)
        if (port <= 65535) port = port * 10 + (*q - '0'); /* stops growing once too big */
    if (*q != '\0') return snprintf(why, cap, "junk \"%s\" after the port", q), -1;
    if (port < 1 || port > 65535)
        return snprintf(why, cap, "port %.*s is not in 1..65535", (int)(q - p), p), -1;

    memset(a, 0, sizeof *a);
    memcpy(a->host, host, (size_t)(host_end - host));
    a->port = (int)port;
    snprintf(a->addr, sizeof a->addr, ipv6 ? "[%s]:%d" : "%s:%d", a->host, a->port);
    return 0;
}

/* Parses the list cluster[job]; the cluster object is member ci of the root. */
static int parse_list(const doc *d, const cJSON *cl, int ci, const char *job, dt_addr **out,
                      int *num, dt_err *err) {
    int li;
    const cJSON *list = member(cl, job, &li);
    int path[3] = {ci, li, 0};
    char got[80], why[160];
    if (!list) return fail_at(d, path, 1, 0, err, "\"cluster\" has no \"%s\" list", job);
    if (!cJSON_IsArray(list)) {
        describe_json(list, got, sizeof got);
        return fail_at(d, path, 2, 0, err,
                       "\"%s\" must be a list of \"host:port\" strings (got %s)", job, got);
    }
    int n = cJSON_GetArraySize(list);
    if (n == 0)
        return fail_at(d, path, 2, 0, err, "\"%s\" must list at least one \"host:port\" address",
                       job);
    if (n > MAX_TASKS)
        return fail_at(d, path, 2, 0, err, "\"%s\" lists %d addresses; at most %d are supported",
                       job, n, MAX_TASKS);
    dt_addr *addrs = calloc((size_t)n, sizeof *addrs);
    if (!addrs) return dt_err_set(err, DT_ENOMEM, "%s: \"%s\": out of memory", d->source, job);
    int k = 0;
    for (const cJSON *e = list->child; e; e = e->next, k++) {
        path[2] = k;
        if (!cJSON_IsString(e)) {
            describe_json(e, got, sizeof got);
            free(addrs);
            return fail_at(d, path, 3, 0, err, "\"%s\"[%d] must be a \"host:port\" string (got %s)",
                           job, k, got);
        }
        if (parse_addr(e->valuestring, &addrs[k], why, sizeof why)) {
            describe_json(e, got, sizeof got);
            free(addrs);
            return fail_at(d, path, 3, 0, err, "\"%s\"[%d] %s: %s", job, k, got, why);
        }
    }
    *out = addrs;
    *num = n;
    return 0;
}

int dt_cluster_parse(const char *text, const char *source, dt_cluster *c, dt_err *err) {
    DT_ASSERT(text && c);
    doc d = {text, source ? source : "cluster"};
    dt_cluster out = {0};
    cJSON *root = NULL;
    char got[80];
    int rc;
    memset(c, 0, sizeof *c);

    if ((rc = parse_json(&d, &root, err))) goto fail;
    if (!cJSON_IsObject(root)) {
        describe_json(root, got, sizeof got);
        rc = fail_at(&d, NULL, 0, 0, err,
                     "a cluster file holds an object, {\"cluster\": {\"ps\": [...], "
                     "\"worker\": [...]}} (got %s)",
                     got);
        goto fail;
    }
    if ((rc = check_top_keys(&d, root, err))) goto fail;
    int ci;
    const cJSON *cl = member(root, "cluster", &ci);
    if (!cl) {
        rc = fail_at(&d, NULL, 0, 0, err,
                     "missing \"cluster\" (want {\"cluster\": {\"ps\": [...], \"worker\": "
                     "[...]}})");
        goto fail;
    }
    int path[2] = {ci, 0};
    if (!cJSON_IsObject(cl)) {
        describe_json(cl, got, sizeof got);
        rc = fail_at(&d, path, 1, 0, err,
                     "\"cluster\" must be an object, {\"ps\": [...], \"worker\": [...]} (got %s)",
                     got);
        goto fail;
    }
    int k = 0;
    char name[48];
    for (const cJSON *m = cl->child; m; m = m->next, k++) {
        path[1] = k;
        int twin = earlier_twin(cl, m, k);
        if (twin >= 0) {
            char first[32];
            path[1] = twin;
            where(&d, path, 2, 1, first, sizeof first);
            path[1] = k;
            rc = fail_at(&d, path, 2, 1, err, "duplicate job \"%s\" (first at %s)",
                         shown(m->string, name), first);
            goto fail;
        }
        if (strcmp(m->string, "ps") == 0 || strcmp(m->string, "worker") == 0) continue;
        if (strcmp(m->string, "chief") == 0)
            rc = fail_at(&d, path, 2, 1, err,
                         "a \"chief\" job is not supported: worker 0 is the chief, so list its "
                         "address first under \"worker\"");
        else
            rc = fail_at(&d, path, 2, 1, err,
                         "unknown job \"%s\": only \"ps\" and \"worker\" are supported",
                         shown(m->string, name));
        goto fail;
    }
    if ((rc = parse_list(&d, cl, ci, "ps", &out.ps, &out.num_ps, err))) goto fail;
    if ((rc = parse_list(&d, cl, ci, "worker", &out.workers, &out.num_workers, err))) goto fail;

    /* One address, one task: two tasks cannot both listen on it. Hosts
     * compare without case; names are not resolved ("localhost" and
     * "127.0.0.1" differ). Task t counts the ps first, then the workers. */
    int pi, wi;
    member(cl, "ps", &pi);
    member(cl, "worker", &wi);
    int total = out.num_ps + out.num_workers;
    for (int t = 1; t < total; t++) {
        int t_ps = t < out.num_ps;
        int pa[3] = {ci, t_ps ? pi : wi, t_ps ? t : t - out.num_ps};
        const dt_addr *a = t_ps ? &out.ps[pa[2]] : &out.workers[pa[2]];
        for (int u = 0; u < t; u++) {
            int u_ps = u < out.num_ps;
            int pb[3] = {ci, u_ps ? pi : wi, u_ps ? u : u - out.num_ps};
            const dt_addr *b = u_ps ? &out.ps[pb[2]] : &out.workers[pb[2]];
            if (a->port != b->port || strcasecmp(a->host, b->host) != 0) continue;
            char other[32];
            where(&d, pb, 3, 0, other, sizeof other);
            rc = fail_at(
                &d, pa, 3, 0, err, "\"%s\"[%d] \"%s\" is listed twice: also as \"%s\"[%d] at %s",
                t_ps ? "ps" : "worker", pa[2], a->addr, u_ps ? "ps" : "worker", pb[2], other);
            goto fail;
        }
    }
    cJSON_Delete(root);
    *c = out;
    return 0;
fail:
    free(out.ps);
    free(out.workers);
    cJSON_Delete(root);
    return rc;
}

int dt_cluster_load(const char *path, dt_cluster *c, dt_err *err) {
    DT_ASSERT(path && c);
    char *text = NULL;
    memset(c, 0, sizeof *c);
    int rc = read_text(path, &text, err);
    if (rc) return rc;
    rc = dt_cluster_parse(text, path, c, err);
    free(text);
    return rc;
}

void dt_cluster_deinit(dt_cluster *c) {
    if (!c) return;
    free(c->ps);
    free(c->workers);
    memset(c, 0, sizeof *c);
}

/* ---- job ---- */

typedef enum {
    F_ENUM, F_PATH, F_OPT_PATH, F_INT, F_INT64, F_SEED, F_NUM, F_BOOL, F_INT_LIST, F_INT64_LIST,
    F_NUM_LIST
} field_type;
typedef enum { NUM_POSITIVE, NUM_NONNEG, NUM_UNIT } num_rule;

/* One job field: its JSON name, where it lives in dt_job, and its rule. */
typedef struct {
    const char *name;
    size_t offset;
    size_t size;                /* F_ENUM, F_PATH: the buffer */
    const char *const *choices; /* F_ENUM: NULL-terminated */
    double min, max;            /* F_INT, F_INT64, F_SEED: inclusive */
    field_type type;
    num_rule rule;       /* F_NUM, F_NUM_LIST */
    size_t count_offset; /* lists: the int that holds the count */
    int max_count;       /* lists */
} field;

#define AT(m) .offset = offsetof(dt_job, m), .size = sizeof(((dt_job *)0)->m)
#define INT_FIELD(n, m, lo)                                                                        \
    { .name = n, .type = F_INT, AT(m), .min = lo, .max = INT_MAX }

static const char *const models[] = {"linear", "logistic", "softmax", "mlp", NULL};
static const char *const datas[] = {"line", "wide", "csv", "libsvm", "idx", NULL};
static const char *const scales[] = {"none", "standardize", "divide", NULL};
static const char *const schedules[] = {"constant", "exponential", "piecewise", NULL};
static const char *const placements[] = {"greedy", "round_robin", NULL};
static const char *const modes[] = {"async", "sync", "bounded", NULL};
static const char *const nonfinites[] = {"reject", "skip", NULL};
static const char *const optimizers[] = {"sgd", "momentum", "adagrad", "adam", NULL};

/* The job fields, in the order conf/README.md lists them. */
static const field fields[] = {
    {.name = "model", .type = F_ENUM, AT(model), .choices = models},
    INT_FIELD("features", num_features, 1),
    INT_FIELD("classes", num_classes, 2),
    {.name = "hidden", .type = F_INT_LIST, AT(hidden), .min = 1, .max = 1 << 20,
     .count_offset = offsetof(dt_job, num_hidden), .max_count = DT_MAX_HIDDEN},
    {.name = "l2", .type = F_NUM, AT(l2), .rule = NUM_NONNEG},
    {.name = "data", .type = F_ENUM, AT(data), .choices = datas},
    {.name = "examples", .type = F_INT64, AT(num_examples), .min = 1, .max = MAX_EXACT_INT},
    {.name = "noise", .type = F_NUM, AT(noise), .rule = NUM_NONNEG},
    {.name = "seed", .type = F_SEED, AT(seed), .min = 0, .max = MAX_EXACT_INT},
    {.name = "train_data", .type = F_OPT_PATH, AT(train_data)},
    {.name = "train_labels", .type = F_OPT_PATH, AT(train_labels)},
    {.name = "eval_data", .type = F_OPT_PATH, AT(eval_data)},
    {.name = "eval_labels", .type = F_OPT_PATH, AT(eval_labels)},
    {.name = "label_column", .type = F_PATH, AT(label_column)},
    {.name = "scale", .type = F_ENUM, AT(scale), .choices = scales},
    {.name = "scale_divisor", .type = F_NUM, AT(scale_divisor), .rule = NUM_POSITIVE},
    {.name = "skip_bad_rows", .type = F_BOOL, AT(skip_bad_rows)},
    INT_FIELD("eval_steps", eval_steps, 0),
    {.name = "optimizer", .type = F_ENUM, AT(optim.name), .choices = optimizers},
    {.name = "learning_rate", .type = F_NUM, AT(optim.learning_rate), .rule = NUM_POSITIVE},
    {.name = "momentum", .type = F_NUM, AT(optim.momentum), .rule = NUM_UNIT},
    {.name = "nesterov", .type = F_BOOL, AT(optim.nesterov)},
    {.name = "beta1", .type = F_NUM, AT(optim.beta1), .rule = NUM_UNIT},
    {.name = "beta2", .type = F_NUM, AT(optim.beta2), .rule = NUM_UNIT},
    {.name = "epsilon", .type = F_NUM, AT(optim.epsilon), .rule = NUM_POSITIVE},
    {.name = "initial_accumulator",
     .type = F_NUM,
     AT(optim.initial_accumulator),
     .rule = NUM_NONNEG},
    {.name = "lr_schedule", .type = F_ENUM, AT(lr_schedule), .choices = schedules},
    {.name = "decay_steps", .type = F_INT64, AT(decay_steps), .min = 1, .max = MAX_EXACT_INT},
    {.name = "decay_rate", .type = F_NUM, AT(decay_rate), .rule = NUM_POSITIVE},
    {.name = "staircase", .type = F_BOOL, AT(staircase)},
    {.name = "boundaries", .type = F_INT64_LIST, AT(boundaries), .min = 0, .max = MAX_EXACT_INT,
     .count_offset = offsetof(dt_job, num_boundaries), .max_count = DT_LR_MAX_BOUNDARIES},
    {.name = "lr_values", .type = F_NUM_LIST, AT(lr_values), .rule = NUM_POSITIVE,
     .count_offset = offsetof(dt_job, num_lr_values), .max_count = DT_LR_MAX_BOUNDARIES + 1},
    {.name = "placement", .type = F_ENUM, AT(placement), .choices = placements},
    {.name = "partition_min_bytes",
     .type = F_INT64,
     AT(partition_min_bytes),
     .min = 1,
     .max = MAX_EXACT_INT},
    {.name = "mode", .type = F_ENUM, AT(mode), .choices = modes},
    INT_FIELD("replicas_to_aggregate", replicas_to_aggregate, 0),
    INT_FIELD("total_num_replicas", total_num_replicas, 0),
    INT_FIELD("staleness", staleness, 0),
    INT_FIELD("sync_timeout_secs", sync_timeout_secs, 1),
    {.name = "nonfinite", .type = F_ENUM, AT(nonfinite), .choices = nonfinites},
    INT_FIELD("batch_size", batch_size, 1),
    {.name = "max_steps", .type = F_INT64, AT(max_steps), .min = 0, .max = MAX_EXACT_INT},
    INT_FIELD("epochs", epochs, 0),
    {.name = "log_dir", .type = F_PATH, AT(log_dir)},
    INT_FIELD("save_model_secs", save_model_secs, 1),
    INT_FIELD("final_save_secs", final_save_secs, 1),
    INT_FIELD("max_to_keep", max_to_keep, 1),
    INT_FIELD("summary_steps", summary_steps, 1),
    INT_FIELD("log_steps", log_steps, 1),
    INT_FIELD("ready_wait_secs", ready_wait_secs, 1),
    INT_FIELD("rpc_timeout_secs", rpc_timeout_secs, 1),
};
#define NUM_FIELDS ((int)(sizeof fields / sizeof fields[0]))

static const field *find_field(const char *name) {
    for (int i = 0; i < NUM_FIELDS; i++)
        if (strcmp(fields[i].name, name) == 0) return &fields[i];
    return NULL;
}

/* Edit distance ignoring case, for "did you mean"; large for long names. */
static int distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 40 || lb > 40) return INT_MAX;
    int prev[41], cur[41];
    for (int j = 0; j <= lb; j++)
        prev[j] = j;
    for (int i = 1; i <= la; i++) {
        cur[0] = i;
        for (int j = 1; j <= lb; j++) {
            int same = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]);
            int best = prev[j - 1] + !same;
            if (prev[j] + 1 < best) best = prev[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            cur[j] = best;
        }
        memcpy(prev, cur, sizeof cur);
    }
    return prev[lb];
}

/* "unknown field "x"", with the closest name or, if none is close, all. */
static void unknown_field(const char *key, char *why, size_t cap) {
    /* Names other tools use for the same thing. */
    static const char *const aliases[][2] = {
        {"lr", "learning_rate"},       {"num_features", "features"}, {"num_examples", "examples"},
        {"steps", "max_steps"},        {"train_steps", "max_steps"}, {"model_dir", "log_dir"},
        {"checkpoint_dir", "log_dir"}, {"optim", "optimizer"},
    };
    const char *best = NULL;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(key, aliases[i][0]) == 0) best = aliases[i][1];
    if (!best) {
        int best_d = INT_MAX, limit = (int)strlen(key) / 3;
        if (limit < 1) limit = 1;
        if (limit > 2) limit = 2;
        for (int i = 0; i < NUM_FIELDS; i++) {
            int dist = distance(key, fields[i].name);
            if (dist <= limit && dist < best_d) {
                best_d = dist;
                best = fields[i].name;
            }
        }
    }
    if (best) {
        snprintf(why, cap, "unknown field \"%s\" (did you mean \"%s\"?)", key, best);
        return;
    }
    size_t n = (size_t)snprintf(why, cap, "unknown field \"%s\"; the fields are", key);
    for (int i = 0; i < NUM_FIELDS && n < cap; i++)
        n += (size_t)snprintf(why + n, cap - n, "%s %s", i ? "," : "", fields[i].name);
}

/* Stores v into the job field f, or says in why what f must be. */
static int apply_value(dt_job *job, const field *f, const cJSON *v, char *why, size_t cap) {
    char *slot = (char *)job + f->offset;
    char got[80];
    int is_num = cJSON_IsNumber(v);
    double x = is_num ? v->valuedouble : 0;
    describe_json(v, got, sizeof got);
    switch (f->type) {
    case F_ENUM: {
        if (cJSON_IsString(v))
            for (const char *const *c = f->choices; *c; c++)
                if (strcmp(v->valuestring, *c) == 0) {
                    DT_ASSERT(strlen(*c) < f->size);
                    memcpy(slot, *c, strlen(*c) + 1);
                    return 0;
                }
        size_t n = (size_t)snprintf(why, cap, "\"%s\" must be", f->name);
        for (const char *const *c = f->choices; *c && n < cap; c++)
            n += (size_t)snprintf(why + n, cap - n, "%s\"%s\"",
                                  c == f->choices ? " "
                                  : c[1]          ? ", "
                                                  : " or ",
                                  *c);
        if (n < cap) snprintf(why + n, cap - n, " (got %s)", got);
        return -1;
    }
    case F_PATH:
        if (cJSON_IsString(v) && v->valuestring[0] != '\0' && strlen(v->valuestring) < f->size) {
            memcpy(slot, v->valuestring, strlen(v->valuestring) + 1);
            return 0;
        }
        snprintf(why, cap, "\"%s\" must be a non-empty string shorter than %zu bytes (got %s)",
                 f->name, f->size, got);
        return -1;
    case F_OPT_PATH:
        if (cJSON_IsString(v) && strlen(v->valuestring) < f->size) {
            memcpy(slot, v->valuestring, strlen(v->valuestring) + 1);
            return 0;
        }
        snprintf(why, cap, "\"%s\" must be a string shorter than %zu bytes (\"\" for none) (got %s)",
                 f->name, f->size, got);
        return -1;
    case F_INT_LIST:
    case F_INT64_LIST:
    case F_NUM_LIST: {
        /* [256, 128]: the values, and their number in the count field. */
        /* hidden needs a layer; the schedule's lists may be empty (unused). */
        int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
        int ok = n >= (f->type == F_INT_LIST ? 1 : 0) && n <= f->max_count;
        double values[32];
        DT_ASSERT(f->max_count <= 32);
        for (int i = 0; ok && i < n; i++) {
            const cJSON *e = cJSON_GetArrayItem(v, i);
            double u = cJSON_IsNumber(e) ? e->valuedouble : NAN;
            if (f->type == F_NUM_LIST)
                ok = isfinite(u) && (f->rule == NUM_POSITIVE ? u > 0 : u >= 0);
            else
                ok = isfinite(u) && u == floor(u) && u >= f->min && u <= f->max;
            values[i] = u;
        }
        if (ok) {
            for (int i = 0; i < n; i++) {
                if (f->type == F_INT_LIST) {
                    int x32 = (int)values[i];
                    memcpy(slot + sizeof(int) * (size_t)i, &x32, sizeof x32);
                } else if (f->type == F_INT64_LIST) {
                    int64_t x64 = (int64_t)values[i];
                    memcpy(slot + sizeof(int64_t) * (size_t)i, &x64, sizeof x64);
                } else {
                    memcpy(slot + sizeof(double) * (size_t)i, &values[i], sizeof(double));
                }
            }
            memcpy((char *)job + f->count_offset, &n, sizeof n);
            return 0;
        }
        if (f->type == F_NUM_LIST)
            snprintf(why, cap, "\"%s\" must be a list of up to %d positive numbers (got %s)",
                     f->name, f->max_count, got);
        else
            snprintf(why, cap, "\"%s\" must be a list of %s%d integers from %.0f to %.0f (got %s)",
                     f->name, f->type == F_INT_LIST ? "1 to " : "up to ", f->max_count, f->min,
                     f->max, got);
        return -1;
    }
    case F_BOOL:
        if (cJSON_IsBool(v)) {
            int b = cJSON_IsTrue(v) ? 1 : 0;
            memcpy(slot, &b, sizeof b);
            return 0;
        }
        snprintf(why, cap, "\"%s\" must be true or false (got %s)", f->name, got);
        return -1;
    case F_NUM: {
        static const char *const rules[] = {
            [NUM_POSITIVE] = "a positive number",
            [NUM_NONNEG] = "a number >= 0",
            [NUM_UNIT] = "a number in [0, 1)",
        };
        int ok = is_num && isfinite(x) &&
                 (f->rule == NUM_POSITIVE ? x > 0
                  : f->rule == NUM_NONNEG ? x >= 0
                                          : x >= 0 && x < 1);
        if (ok) {
            memcpy(slot, &x, sizeof x);
            return 0;
        }
        snprintf(why, cap, "\"%s\" must be %s (got %s)", f->name, rules[f->rule], got);
        return -1;
    }
    case F_INT:
    case F_INT64:
    case F_SEED:
        if (is_num && isfinite(x) && x == floor(x) && x >= f->min && x <= f->max) {
            if (f->type == F_INT) {
                int i = (int)x;
                memcpy(slot, &i, sizeof i);
            } else if (f->type == F_INT64) {
                int64_t i = (int64_t)x;
                memcpy(slot, &i, sizeof i);
            } else {
                uint64_t u = (uint64_t)x;
                memcpy(slot, &u, sizeof u);
            }
            return 0;
        }
        if (is_num && isfinite(x) && x > f->max)
            snprintf(why, cap, "\"%s\" must be an integer from %.0f to %.0f (got %s)", f->name,
                     f->min, f->max, got);
        else
            snprintf(why, cap, "\"%s\" must be an integer >= %.0f (got %s)", f->name, f->min, got);
        return -1;
    }
    DT_ASSERT(0);
    return -1;
}

/* Applies the members of obj (reached from the root by path, depth n). */
static int apply_object(const doc *d, const cJSON *obj, int *path, int n, dt_job *job,
                        dt_err *err) {
    char why[WHY_MAX], name[48];
    int k = 0;
    for (const cJSON *m = obj->child; m; m = m->next, k++) {
        path[n] = k;
        const field *f = find_field(m->string);
        if (!f) {
            unknown_field(shown(m->string, name), why, sizeof why);
            return fail_at(d, path, n + 1, 1, err, "%s", why);
        }
        int twin = earlier_twin(obj, m, k);
        if (twin >= 0) {
            char first[32];
            path[n] = twin;
            where(d, path, n + 1, 1, first, sizeof first);
            path[n] = k;
            return fail_at(d, path, n + 1, 1, err, "duplicate field \"%s\" (first at %s)",
                           m->string, first); /* a known field's name */
        }
        if (apply_value(job, f, m, why, sizeof why))
            return fail_at(d, path, n + 1, 0, err, "%s", why);
    }
    return 0;
}

void dt_job_defaults(dt_job *job) {
    memset(job, 0, sizeof *job);
    snprintf(job->model, sizeof job->model, "linear");
    job->num_features = 1;
    job->num_classes = 2;
    job->hidden[0] = 128;
    job->num_hidden = 1;
    snprintf(job->data, sizeof job->data, "line");
    snprintf(job->label_column, sizeof job->label_column, "0");
    snprintf(job->scale, sizeof job->scale, "none");
    job->scale_divisor = 255;
    job->num_examples = 100;
    job->noise = 0.3;
    job->seed = 1;
    dt_optim_defaults(&job->optim);
    snprintf(job->optim.name, sizeof job->optim.name, "sgd");
    job->optim.learning_rate = 0.05;
    snprintf(job->lr_schedule, sizeof job->lr_schedule, "constant");
    job->decay_steps = 1000;
    job->decay_rate = 0.96;
    snprintf(job->placement, sizeof job->placement, "greedy");
    job->partition_min_bytes = 256 * 1024; /* TF's min_max_variable_partitioner */
    snprintf(job->mode, sizeof job->mode, "async");
    job->sync_timeout_secs = 30;
    snprintf(job->nonfinite, sizeof job->nonfinite, "reject");
    job->batch_size = 10;
    job->max_steps = 0;
    job->epochs = 200; /* 200 * 100 / 10 = 2000 global steps */
    snprintf(job->log_dir, sizeof job->log_dir, "logs/linear");
    job->save_model_secs = 5;
    job->final_save_secs = 60;
    job->max_to_keep = 5;
    job->summary_steps = 10;
    job->log_steps = 100;
    job->ready_wait_secs = 120;
    job->rpc_timeout_secs = 10;
}

int dt_job_parse(const char *text, const char *source, dt_job *job, dt_err *err) {
    DT_ASSERT(text && job);
    doc d = {text, source ? source : "job"};
    cJSON *root = NULL;
    dt_job next = *job; /* committed only when every field is good */
    int path[2] = {0, 0};
    char got[80];
    int rc;

    if ((rc = parse_json(&d, &root, err))) goto fail;
    if (!cJSON_IsObject(root)) {
        describe_json(root, got, sizeof got);
        rc = fail_at(&d, NULL, 0, 0, err,
                     "a job file holds an object of fields, {\"learning_rate\": 0.05, ...} "
                     "(got %s)",
                     got);
        goto fail;
    }
    int ci, ji;
    const cJSON *cl = member(root, "cluster", &ci);
    const cJSON *jb = member(root, "job", &ji);
    if (!cl && !jb) {
        rc = apply_object(&d, root, path, 0, &next, err);
    } else {
        /* A cluster file: its job fields, if any, sit under "job". */
        if ((rc = check_top_keys(&d, root, err))) goto fail;
        if (jb && !cJSON_IsObject(jb)) {
            describe_json(jb, got, sizeof got);
            path[0] = ji;
            rc = fail_at(&d, path, 1, 0, err, "\"job\" must be an object of job fields (got %s)",
                         got);
            goto fail;
        }
        path[0] = ji;
        if (jb) rc = apply_object(&d, jb, path, 1, &next, err);
    }
    if (rc) goto fail;
    cJSON_Delete(root);
    *job = next;
    return 0;
fail:
    cJSON_Delete(root);
    return rc;
}

int dt_job_load(const char *path, dt_job *job, dt_err *err) {
    DT_ASSERT(path && job);
    char *text = NULL;
    int rc = read_text(path, &text, err);
    if (rc) return rc;
    rc = dt_job_parse(text, path, job, err);
    free(text);
    return rc;
}

int dt_job_set(dt_job *job, const char *assignment, dt_err *err) {
    DT_ASSERT(job && assignment);
    const char *eq = strchr(assignment, '=');
    char name[64], why[WHY_MAX];
    if (!eq || eq == assignment)
        return dt_err_set(err, DT_EINVAL, "--set %s: want field=value, e.g. learning_rate=0.1",
                          assignment);
    size_t n = (size_t)(eq - assignment);
    const field *f = NULL;
    if (n < sizeof name) {
        memcpy(name, assignment, n);
        name[n] = '\0';
        f = find_field(name);
    } else {
        snprintf(name, sizeof name, "%.*s", (int)sizeof name - 1, assignment);
    }
    if (!f) {
        char text[48];
        unknown_field(shown(name, text), why, sizeof why);
        return dt_err_set(err, DT_EINVAL, "--set %s: %s", assignment, why);
    }
    /* A string field takes the bare text (log_dir=runs/a); anything else, or
     * a quoted string, is a JSON scalar. Text that is not JSON goes on as a
     * string, so the field's own rule names what it wants. */
    const char *value = eq + 1;
    cJSON *v = NULL;
    if ((f->type != F_ENUM && f->type != F_PATH && f->type != F_OPT_PATH) || value[0] == '"')
        v = cJSON_ParseWithOpts(value, NULL, 1);
    if (!v) v = cJSON_CreateString(value);
    if (!v) return dt_err_set(err, DT_ENOMEM, "--set %s: out of memory", assignment);
    dt_job next = *job;
    int rc = 0;
    if (apply_value(&next, f, v, why, sizeof why))
        rc = dt_err_set(err, DT_EINVAL, "--set %s: %s", assignment, why);
    else
        *job = next;
    cJSON_Delete(v);
    return rc;
}

/* Runs every field of job through the same rules as a file, so fields set
 * directly in the struct are held to them too. */
static int check_fields(const dt_job *job, dt_err *err) {
    char why[WHY_MAX];
    for (int i = 0; i < NUM_FIELDS; i++) {
        const field *f = &fields[i];
        const char *slot = (const char *)job + f->offset;
        cJSON *v = NULL;
        int i32;
        int64_t i64;
        uint64_t u64;
        double num;
        switch (f->type) {
        case F_INT_LIST:
        case F_INT64_LIST:
        case F_NUM_LIST: {
            int n;
            memcpy(&n, (const char *)job + f->count_offset, sizeof n);
            if (n < (f->type == F_INT_LIST ? 1 : 0) || n > f->max_count)
                return dt_err_set(err, DT_EINVAL, "job: \"%s\" has %d entries (1 to %d)", f->name,
                                  n, f->max_count);
            v = cJSON_CreateArray();
            for (int k = 0; v && k < n; k++) {
                double x;
                if (f->type == F_INT_LIST) {
                    int x32;
                    memcpy(&x32, slot + sizeof(int) * (size_t)k, sizeof x32);
                    x = x32;
                } else if (f->type == F_INT64_LIST) {
                    int64_t x64;
                    memcpy(&x64, slot + sizeof(int64_t) * (size_t)k, sizeof x64);
                    x = (double)x64;
                } else {
                    memcpy(&x, slot + sizeof(double) * (size_t)k, sizeof x);
                }
                cJSON_AddItemToArray(v, cJSON_CreateNumber(x));
            }
            break;
        }
        case F_ENUM:
        case F_PATH:
        case F_OPT_PATH:
            if (strnlen(slot, f->size) == f->size)
                return dt_err_set(err, DT_EINVAL, "job: \"%s\" is not a terminated string",
                                  f->name);
            v = cJSON_CreateString(slot);
            break;
        case F_BOOL:
            memcpy(&i32, slot, sizeof i32);
            v = i32 == 0 || i32 == 1 ? cJSON_CreateBool(i32) : cJSON_CreateNumber(i32);
            break;
        case F_NUM:
            memcpy(&num, slot, sizeof num);
            v = cJSON_CreateNumber(num);
            break;
        case F_INT:
            memcpy(&i32, slot, sizeof i32);
            v = cJSON_CreateNumber(i32);
            break;
        case F_INT64:
            memcpy(&i64, slot, sizeof i64);
            v = cJSON_CreateNumber((double)i64);
            break;
        case F_SEED:
            memcpy(&u64, slot, sizeof u64);
            v = cJSON_CreateNumber((double)u64);
            break;
        }
        if (!v) return dt_err_set(err, DT_ENOMEM, "job: check: out of memory");
        dt_job scratch = *job;
        int bad = apply_value(&scratch, f, v, why, sizeof why);
        cJSON_Delete(v);
        if (bad) return dt_err_set(err, DT_EINVAL, "job: %s", why);
    }
    return 0;
}

int dt_job_schedule(const dt_job *job, dt_lr_schedule *out, dt_err *err) {
    memset(out, 0, sizeof *out);
    out->kind = dt_lr_kind_from_name(job->lr_schedule);
    out->decay_steps = job->decay_steps;
    out->decay_rate = job->decay_rate;
    out->staircase = job->staircase;
    if (out->kind == DT_LR_PIECEWISE && job->num_lr_values != job->num_boundaries + 1)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"lr_values\" needs one more entry than \"boundaries\" (%d and %d)",
                          job->num_lr_values, job->num_boundaries);
    out->num_boundaries = job->num_boundaries;
    memcpy(out->boundaries, job->boundaries, sizeof out->boundaries);
    memcpy(out->values, job->lr_values, sizeof out->values);
    int rc = dt_lr_check(out, err);
    return rc < 0 ? dt_err_wrap(err, rc, "job") : 0;
}

int dt_job_reads_files(const dt_job *job) {
    return strcmp(job->data, "csv") == 0 || strcmp(job->data, "libsvm") == 0 ||
           strcmp(job->data, "idx") == 0;
}

int dt_job_steps_for(const dt_job *job, int64_t num_examples, int64_t *steps, dt_err *err) {
    if (job->epochs == 0)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"max_steps\" and \"epochs\" are both 0; set one of them");
    /* max_steps = epochs * ceil(N / B): a last short batch is a step. */
    int64_t per_epoch = num_examples / job->batch_size + (num_examples % job->batch_size != 0);
    if (per_epoch > INT64_MAX / job->epochs)
        return dt_err_set(err, DT_EINVAL, "job: \"epochs\" %d of %lld steps each is too many steps",
                          job->epochs, (long long)per_epoch);
    *steps = job->epochs * per_epoch;
    return 0;
}

int dt_job_finish(dt_job *job, dt_err *err) {
    DT_ASSERT(job);
    int rc = check_fields(job, err);
    if (rc) return rc;
    if ((rc = dt_optim_check(&job->optim, err))) return rc;
    if (strcmp(job->data, "line") == 0 && job->num_features != 1)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"data\": \"line\" has 1 feature, but \"features\" is %d (use "
                          "\"features\": 1, or \"data\": \"wide\")",
                          job->num_features);
    dt_lr_schedule schedule;
    if ((rc = dt_job_schedule(job, &schedule, err))) return rc;
    int from_file = dt_job_reads_files(job);
    if (from_file && job->train_data[0] == '\0')
        return dt_err_set(err, DT_EINVAL, "job: \"data\": \"%s\" needs \"train_data\" (a file)",
                          job->data);
    if (strcmp(job->data, "idx") == 0 && job->train_labels[0] == '\0')
        return dt_err_set(err, DT_EINVAL, "job: \"data\": \"idx\" needs \"train_labels\" (the "
                                          "labels file beside the images)");
    if (strcmp(job->data, "idx") == 0 && job->eval_data[0] && !job->eval_labels[0])
        return dt_err_set(err, DT_EINVAL, "job: \"eval_data\" in idx format needs \"eval_labels\"");
    if (!from_file && job->eval_data[0])
        return dt_err_set(err, DT_EINVAL, "job: \"eval_data\" needs a file data source (\"data\": "
                                          "\"csv\", \"libsvm\" or \"idx\")");
    if (strcmp(job->model, "logistic") == 0 && job->num_classes != 2)
        return dt_err_set(err, DT_EINVAL, "job: \"model\": \"logistic\" is binary: \"classes\" "
                                          "must be 2 (got %d); use \"softmax\" for more",
                          job->num_classes);
    if (!from_file && job->batch_size > job->num_examples)
        return dt_err_set(err, DT_EINVAL, "job: \"batch_size\" %d is larger than \"examples\" %lld",
                          job->batch_size, (long long)job->num_examples);
    /* A file's size is known only once it is read: the chief derives
     * max_steps from epochs then (dt_job_steps_for). */
    if (job->max_steps == 0 && from_file && job->epochs == 0)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"max_steps\" and \"epochs\" are both 0; set one of them");
    if (job->max_steps == 0 && !from_file) {
        int64_t steps = 0;
        if ((rc = dt_job_steps_for(job, job->num_examples, &steps, err))) return rc;
        job->max_steps = steps;
    }
    return 0;
}
