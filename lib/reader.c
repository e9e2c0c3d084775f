/*
 * reader: csv, libsvm and idx files parsed whole into a dense table.
 *
 * Every file goes through zlib's gz* calls on a descriptor we opened
 * ourselves (so a missing file is told apart from an unreadable one), which
 * read gzip and plain files alike. Text formats are cut into lines by a
 * growing buffer (a line may be as long as MAX_LINE); idx is read in chunks
 * of whole records.
 *
 * Table growth: rows double until N * F would pass max_values, which is
 * checked before every allocation, so no file can make us allocate more
 * than the bound. A row is parsed straight into the next free slot and
 * counts only once it is complete, which is how a skipped row disappears.
 *
 * Files without labels (DT_LABELS_NONE) go through the same code with the
 * label's column, token or file left out and y never allocated;
 * dt_reader_detect_labels reads only a file's header (csv) or first row
 * (libsvm) to say which layout a file has.
 *
 * Invariants: table.rows <= row capacity; every kept value is finite and
 * fits a float; every kept class label is integral in [0, K); y is NULL
 * exactly when the table is not labeled.
 * Threading: no shared state.
 */
#include "reader.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "alloc.h"
#include "libsvm.h"
#include "log.h"

#define MAX_LINE ((size_t)1 << 28) /* 256 MiB: a csv row of ~20M features */
#define FIRST_LINE_CAP ((size_t)1 << 16)
#define IDX_CHUNK_BYTES ((size_t)1 << 20)

/* ---- files ---------------------------------------------------------------- */

static int open_gz(const char *path, gzFile *out, dt_err *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dt_err_set(err, errno == ENOENT ? DT_ENOTFOUND : DT_EIO, "%s: open: %s", path,
                          strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return dt_err_set(err, DT_EIO, "%s: stat: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return dt_err_set(err, DT_EINVAL, "%s: is a directory, not a data file", path);
    }
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        close(fd);
        return dt_err_set(err, DT_ENOMEM, "%s: cannot set up the reader", path);
    }
    gzbuffer(gz, 1u << 17); /* fewer read(2) calls than the 8 KiB default */
    *out = gz;
    return 0;
}

/* The error of a gz handle after gzread returned n (< 0, or 0 at the end).
 * Returns 0 at a clean end of file. */
static int gz_status(gzFile gz, const char *path, int n, dt_err *err) {
    int errnum = Z_OK;
    const char *msg = gzerror(gz, &errnum);
    if (n < 0 && errnum == Z_ERRNO)
        return dt_err_set(err, DT_EIO, "%s: read: %s", path, strerror(errno));
    /* Z_BUF_ERROR: the input ended inside a gzip stream. */
    if (errnum == Z_BUF_ERROR)
        return dt_err_set(err, DT_ECORRUPT, "%s: truncated gzip stream", path);
    /* zlib names the file "<fd:N>" for a descriptor; we name it ourselves. */
    if (msg && msg[0] == '<' && strstr(msg, ">: ")) msg = strstr(msg, ">: ") + 3;
    if (n < 0 || (errnum != Z_OK && errnum != Z_STREAM_END))
        return dt_err_set(err, DT_ECORRUPT, "%s: damaged gzip stream: %s", path,
                          msg ? msg : "unknown error");
    return 0;
}

/* Reads up to n bytes; *got says how many arrived (fewer only at the end of
 * the file). */
static int read_full(gzFile gz, const char *path, void *dst, size_t n, size_t *got, dt_err *err) {
    *got = 0;
    while (*got < n) {
        size_t want = n - *got;
        if (want > (1u << 30)) want = 1u << 30; /* gzread's length is an unsigned, result an int */
        int r = gzread(gz, (char *)dst + *got, (unsigned)want);
        if (r <= 0) {
            int rc = gz_status(gz, path, r, err);
            if (rc < 0) return rc;
            break;
        }
        *got += (size_t)r;
    }
    return 0;
}

/* ---- lines ---------------------------------------------------------------- */

typedef struct {
    gzFile gz;
    const char *path;
    char *buf; /* (cap) bytes; buf[start..len) not yet returned */
    size_t cap, start, len;
    size_t scanned; /* bytes after start known to hold no newline */
    int eof;
    int64_t line_no; /* 1-based number of the line last returned */
} line_src;

/* Makes more bytes available after buf[len), moving the unread part to the
 * front and growing the buffer when the current line fills it. */
static int fill(line_src *s, dt_err *err) {
    if (s->start > 0) {
        memmove(s->buf, s->buf + s->start, s->len - s->start);
        s->len -= s->start;
        s->start = 0;
    }
    if (s->len + 1 >= s->cap) { /* keep one byte for the terminator */
        if (s->cap >= MAX_LINE)
            return dt_err_set(err, DT_EINVAL, "%s:%lld: line longer than %zu MiB", s->path,
                              (long long)s->line_no + 1, MAX_LINE >> 20);
        size_t cap = s->cap ? s->cap * 2 : FIRST_LINE_CAP;
        char *grown = dt_realloc(s->buf, cap);
        if (!grown)
            return dt_err_set(err, DT_ENOMEM, "%s:%lld: no memory for a line of %zu bytes", s->path,
                              (long long)s->line_no + 1, cap);
        s->buf = grown;
        s->cap = cap;
    }
    size_t room = s->cap - 1 - s->len;
    if (room > (1u << 30)) room = 1u << 30;
    int r = gzread(s->gz, s->buf + s->len, (unsigned)room);
    if (r <= 0) {
        int rc = gz_status(s->gz, s->path, r, err);
        if (rc < 0) return rc;
        s->eof = 1;
        return 0;
    }
    s->len += (size_t)r;
    return 0;
}

/* The next line without its "\n" (and "\r"), NUL-terminated, in *line
 * (borrowed until the next call), its length in *n. Returns 1 for a line, 0
 * at the end of the file, or an error. A line holding a NUL byte is an error
 * (*bad set) the caller may skip. */
static int next_line(line_src *s, char **line, size_t *n, const char **bad, dt_err *err) {
    *bad = NULL;
    for (;;) {
        size_t avail = s->len - s->start;
        char *nl = avail > s->scanned
                       ? memchr(s->buf + s->start + s->scanned, '\n', avail - s->scanned)
                       : NULL;
        size_t end; /* line length from start */
        if (nl) {
            end = (size_t)(nl - (s->buf + s->start));
        } else if (s->eof) {
            if (avail == 0) return 0;
            end = avail;
        } else {
            s->scanned = avail;
            int rc = fill(s, err);
            if (rc < 0) return rc;
            continue;
        }
        char *text = s->buf + s->start;
        s->start += end + (nl ? 1 : 0);
        s->scanned = 0;
        s->line_no++;
        text[end] = '\0'; /* the newline's byte, or the reserved byte at the end */
        if (end > 0 && text[end - 1] == '\r') text[--end] = '\0';
        if (memchr(text, '\0', end)) *bad = "NUL byte in a text line (a binary file?)";
        *line = text;
        *n = end;
        return 1;
    }
}

static int blank(const char *s) {
    for (; *s; s++)
        if (*s != ' ' && *s != '\t') return 0;
    return 1;
}

/* ---- numbers and labels --------------------------------------------------- */

/* The readers' number rule and its words live with the libsvm tokenizer
 * (libsvm.h), which the csv and idx paths share. */
#define NUM_OK DT_NUM_OK
#define parse_num dt_libsvm_number
#define num_problem dt_libsvm_number_problem

/* What check_label and parse_svm_row return for a row that is well formed
 * but does not fit the job's config: a class past "classes", a feature
 * index past "features". Without skip_bad_rows that is the config's fault
 * (DT_ECONFIG), not the data's. */
#define MISFIT DT_LIBSVM_MISFIT

/* The error code of a row refused with r (-1 or MISFIT). */
static int row_code(int r) {
    return r == MISFIT ? DT_ECONFIG : DT_EINVAL;
}

/* A label's stored value, or a reason in why (returns 0 when good; -1 for
 * a label that is no class index, MISFIT for a class past "classes"): the
 * one label rule (dt_libsvm_check_label), svm saying whether -1 may stand
 * for class 0. */
static int check_label(const dt_reader_params *p, int svm, double v, float *out, char *why,
                       size_t cap) {
    int classes = p->label_kind == DT_LABEL_CLASS ? p->num_classes : 0;
    return dt_libsvm_check_label(classes, svm && p->svm_signed_labels, v, out, why, cap);
}

/* ---- table ---------------------------------------------------------------- */

static int64_t limit_of(const dt_reader_params *p) {
    return p->max_values > 0 ? p->max_values : DT_READER_MAX_VALUES;
}

static int check_params(const char *path, const dt_reader_params *p, dt_err *err) {
    if (p->num_features < 1)
        return dt_err_set(err, DT_EINVAL, "%s: \"features\" must be >= 1 (got %d)", path,
                          p->num_features);
    if (p->label_kind == DT_LABEL_CLASS && p->num_classes < 2)
        return dt_err_set(err, DT_EINVAL, "%s: \"classes\" must be >= 2 (got %d)", path,
                          p->num_classes);
    return 0;
}

/* Room for one more row, growing by doubling within the value bound. */
static int reserve_row(dt_reader_table *t, int64_t *cap, const dt_reader_params *p,
                       const char *where, dt_err *err) {
    if (t->rows < *cap) return 0;
    const int64_t F = t->cols, max_rows = limit_of(p) / F;
    if (t->rows >= max_rows)
        return dt_err_set(err, DT_EINVAL,
                          "%s: more than %lld examples of %lld features pass the bound of %lld "
                          "values",
                          where, (long long)max_rows, (long long)F, (long long)limit_of(p));
    int64_t grow = *cap ? *cap * 2 : 256;
    if (grow > max_rows) grow = max_rows;
    float *x = dt_realloc(t->x, (size_t)grow * (size_t)F * sizeof(float));
    if (!x)
        return dt_err_set(err, DT_ENOMEM, "%s: no memory for %lld examples", where,
                          (long long)grow);
    t->x = x;
    if (t->labeled) {
        float *y = dt_realloc(t->y, (size_t)grow * sizeof(float));
        if (!y)
            return dt_err_set(err, DT_ENOMEM, "%s: no memory for %lld examples", where,
                              (long long)grow);
        t->y = y;
    }
    *cap = grow;
    return 0;
}

/* Gives back the capacity beyond the rows kept; a failed shrink keeps the
 * larger (valid) buffers. */
static void shrink(dt_reader_table *t) {
    if (t->rows == 0) return;
    float *x = dt_realloc(t->x, (size_t)t->rows * (size_t)t->cols * sizeof(float));
    if (x) t->x = x;
    if (!t->labeled) return;
    float *y = dt_realloc(t->y, (size_t)t->rows * sizeof(float));
    if (y) t->y = y;
}

void dt_reader_table_deinit(dt_reader_table *t) {
    if (!t) return;
    free(t->x);
    free(t->y);
    memset(t, 0, sizeof *t);
}

/* ---- malformed rows ------------------------------------------------------- */

typedef struct {
    int skip;
    int64_t skipped;
    char first[DT_ERR_MSG_MAX]; /* the first skipped row's reason */
} bad_rows;

/* A malformed row, or one that does not fit the config (MISFIT): skipped
 * and counted (returns 0) with skip_bad_rows, otherwise the error, with
 * code (DT_EINVAL, or DT_ECONFIG for a misfit). */
__attribute__((format(printf, 4, 5))) static int bad_row(bad_rows *b, int code, dt_err *err,
                                                         const char *fmt, ...) {
    char msg[DT_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!b->skip) return dt_err_set(err, code, "%s", msg);
    if (b->skipped++ == 0) snprintf(b->first, sizeof b->first, "%s", msg);
    return 0;
}

/* The end of a file: logs the skipped rows once and refuses an empty table. */
static int finish(const char *path, bad_rows *b, dt_reader_table *t, dt_err *err) {
    t->skipped = b->skipped;
    if (b->skipped > 0)
        dt_log(DT_LOG_WARN, "%s: skipped %lld malformed rows (skip_bad_rows); the first: %s", path,
               (long long)b->skipped, b->first);
    if (t->rows == 0) {
        if (b->skipped > 0)
            return dt_err_set(err, DT_EINVAL, "%s: no examples: all %lld rows were malformed", path,
                              (long long)b->skipped);
        return dt_err_set(err, DT_EINVAL, "%s: no examples", path);
    }
    shrink(t);
    return 0;
}

/* ---- csv ------------------------------------------------------------------ */

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    return s;
}

/* Cuts line (src's last) at commas into (*fields)[0..*count), trimmed and
 * unquoted. Returns the index of a field with unsupported quoting, or -1. */
static int split_csv(const line_src *src, char *line, char ***fields, int *cap, int *count,
                     dt_err *err, int *rc) {
    *count = 0;
    *rc = 0;
    int bad = -1;
    char *p = line;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        if (*count == *cap) {
            int grow = *cap ? *cap * 2 : 64;
            char **f = dt_realloc(*fields, (size_t)grow * sizeof *f);
            if (!f) {
                *rc = dt_err_set(err, DT_ENOMEM, "%s:%lld: no memory for %d fields", src->path,
                                 (long long)src->line_no, grow);
                return -1;
            }
            *fields = f;
            *cap = grow;
        }
        char *field = trim(p);
        size_t n = strlen(field);
        if (n >= 2 && field[0] == '"' && field[n - 1] == '"') {
            field[n - 1] = '\0';
            field++;
            n -= 2;
        }
        if (memchr(field, '"', n) && bad < 0) bad = *count;
        (*fields)[(*count)++] = field;
        if (!comma) break;
        p = comma + 1;
    }
    return bad;
}

typedef struct {
    int ncols;   /* columns in the header */
    int label;   /* the label's column */
    char **name; /* (ncols) owned copies of the header names */
} csv_header;

static void header_deinit(csv_header *h) {
    if (h->name)
        for (int c = 0; c < h->ncols; c++)
            free(h->name[c]);
    free(h->name);
    memset(h, 0, sizeof *h);
}

static int all_digits(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s)) return 0;
    return 1;
}

/* The first column of fields named name, or -1. */
static int column_named(char *const *fields, int count, const char *name) {
    for (int c = 0; c < count; c++)
        if (strcmp(fields[c], name) == 0) return c;
    return -1;
}

/* The column a header names as the label column, or -1 (also when the label
 * column is given by index: a header cannot say it). */
static int label_named(char *const *fields, int count, const dt_reader_params *p) {
    const char *want = p->label_column ? p->label_column : "";
    return *want && !all_digits(want) ? column_named(fields, count, want) : -1;
}

/* The label's column in a header of count fields (*label), as
 * p->label_column names it: all digits an index, anything else a name that
 * must appear once. hint ends the message of a name not found. */
static int find_label(const char *path, int64_t line_no, char *const *fields, int count,
                      const dt_reader_params *p, const char *hint, int *label, dt_err *err) {
    const char *want = p->label_column ? p->label_column : "";
    *label = -1;
    if (!*want)
        return dt_err_set(err, DT_EINVAL, "%s: \"label_column\" is empty: name the label column",
                          path);
    if (all_digits(want)) {
        errno = 0;
        long long idx = strtoll(want, NULL, 10);
        if (errno || idx >= count)
            return dt_err_set(err, DT_ECONFIG,
                              "%s:%lld: label column %s is out of range: the header has %d "
                              "columns (0..%d)",
                              path, (long long)line_no, want, count, count - 1);
        *label = (int)idx;
        return 0;
    }
    for (int c = 0; c < count; c++) {
        if (strcmp(fields[c], want) != 0) continue;
        if (*label >= 0)
            return dt_err_set(err, DT_EINVAL,
                              "%s:%lld: label column \"%s\" appears twice in the header "
                              "(columns %d and %d)",
                              path, (long long)line_no, want, *label, c);
        *label = c;
    }
    if (*label < 0)
        return dt_err_set(err, DT_ECONFIG,
                          "%s:%lld: no column named \"%s\" in the header (%d columns; a "
                          "\"label_column\" of digits is an index%s)",
                          path, (long long)line_no, want, count, hint);
    return 0;
}

static int parse_header(const char *path, int64_t line_no, char **fields, int count,
                        const dt_reader_params *p, csv_header *h, dt_err *err) {
    h->ncols = count;
    h->name = dt_calloc((size_t)count, sizeof *h->name);
    if (!h->name) return dt_err_set(err, DT_ENOMEM, "%s: no memory for the header", path);
    for (int c = 0; c < count; c++)
        if (!(h->name[c] = dt_strdup(fields[c])))
            return dt_err_set(err, DT_ENOMEM, "%s: no memory for the header", path);
    const char *want = p->label_column ? p->label_column : "";
    const int F = p->num_features;
    if (p->labels == DT_LABELS_NONE) {
        h->label = -1;
        int named = label_named(fields, count, p);
        if (named >= 0)
            return dt_err_set(err, DT_EINVAL,
                              "%s:%lld: column %d is \"%s\", the label column, but the file is "
                              "read without labels",
                              path, (long long)line_no, named, want);
        if (count != F)
            return dt_err_set(err, DT_ECONFIG,
                              "%s:%lld: the header has %d columns, but without labels there is "
                              "one per feature and \"features\" is %d%s",
                              path, (long long)line_no, count, F,
                              count == F + 1 ? " (one more: a label column?)" : "");
        return 0;
    }
    /* One column per feature is the layout of a file without labels: say so,
     * since the usual cause is a file meant for predictions. */
    const char *unlabeled =
        count == F ? "; as many columns as features: a file without labels?" : "";
    int rc = find_label(path, line_no, fields, count, p, unlabeled, &h->label, err);
    if (rc < 0) return rc;
    if (count - 1 != F)
        return dt_err_set(err, DT_ECONFIG,
                          "%s:%lld: the header has %d feature columns (%d columns less the "
                          "label), but \"features\" is %d%s",
                          path, (long long)line_no, count - 1, count, F,
                          all_digits(want) ? unlabeled : "");
    return 0;
}

/* Opens a csv file and cuts its header, the first line that is not empty,
 * into (*fields)[0..*count). The caller closes src. */
static int csv_open(const char *path, line_src *src, char ***fields, int *fields_cap, int *count,
                    dt_err *err) {
    int rc = open_gz(path, &src->gz, err);
    if (rc < 0) return rc;
    char *line;
    size_t len;
    const char *why;
    for (;;) {
        rc = next_line(src, &line, &len, &why, err);
        if (rc < 0) return rc;
        if (rc == 0)
            return dt_err_set(err, DT_EINVAL, "%s: empty file: a header row is required", path);
        if (why)
            return dt_err_set(err, DT_EINVAL, "%s:%lld: header: %s", path, (long long)src->line_no,
                              why);
        if (!blank(line)) break;
    }
    int quoting = split_csv(src, line, fields, fields_cap, count, err, &rc);
    if (rc < 0) return rc;
    if (quoting >= 0)
        return dt_err_set(err, DT_EINVAL,
                          "%s:%lld: header column %d: quotes inside a field are not supported",
                          path, (long long)src->line_no, quoting);
    return 0;
}

int dt_reader_csv(const char *path, const dt_reader_params *p, dt_reader_table *out, dt_err *err) {
    memset(out, 0, sizeof *out);
    int rc = check_params(path, p, err);
    if (rc < 0) return rc;
    line_src src = {.path = path};
    csv_header head = {0};
    char **fields = NULL;
    int fields_cap = 0, count = 0;
    int64_t row_cap = 0;
    bad_rows bad = {.skip = p->skip_bad_rows};
    dt_reader_table t = {.cols = p->num_features, .labeled = p->labels != DT_LABELS_NONE};
    char *line;
    size_t len;
    const char *why;
    int quoting;
    if ((rc = csv_open(path, &src, &fields, &fields_cap, &count, err)) < 0) goto fail;
    if ((rc = parse_header(path, src.line_no, fields, count, p, &head, err)) < 0) goto fail;

    const int F = p->num_features;
    for (;;) {
        rc = next_line(&src, &line, &len, &why, err);
        if (rc < 0) goto fail;
        if (rc == 0) break;
        const long long ln = (long long)src.line_no;
        if (why) {
            if ((rc = bad_row(&bad, DT_EINVAL, err, "%s:%lld: %s", path, ln, why)) < 0) goto fail;
            continue;
        }
        if (blank(line)) continue;
        quoting = split_csv(&src, line, &fields, &fields_cap, &count, err, &rc);
        if (rc < 0) goto fail;
        if (count != head.ncols) {
            if (count < head.ncols)
                rc = bad_row(&bad, DT_EINVAL, err,
                             "%s:%lld: %d fields, but the header has %d: column \"%s\" is missing",
                             path, ln, count, head.ncols, head.name[count]);
            else
                rc = bad_row(
                    &bad, DT_EINVAL, err,
                    "%s:%lld: %d fields, but the header has %d: extra fields after column \"%s\"",
                    path, ln, count, head.ncols, head.name[head.ncols - 1]);
            if (rc < 0) goto fail;
            continue;
        }
        if (quoting >= 0) {
            if ((rc = bad_row(&bad, DT_EINVAL, err,
                              "%s:%lld: column \"%s\": quotes inside a field are not supported",
                              path, ln, head.name[quoting])) < 0)
                goto fail;
            continue;
        }
        if ((rc = reserve_row(&t, &row_cap, p, path, err)) < 0) goto fail;
        float *x = t.x + (size_t)t.rows * (size_t)F;
        int ok = 1;
        for (int c = 0; c < count && ok; c++) {
            double v = 0;
            int status = parse_num(fields[c], &v);
            if (status != NUM_OK) {
                rc = bad_row(&bad, DT_EINVAL, err, "%s:%lld: column \"%s\": %s: \"%.40s\"", path,
                             ln, head.name[c], num_problem(status), fields[c]);
                ok = 0;
            } else if (c == head.label) {
                char reason[192];
                int lr = check_label(p, 0, v, &t.y[t.rows], reason, sizeof reason);
                if (lr < 0) {
                    rc = bad_row(&bad, row_code(lr), err, "%s:%lld: column \"%s\": %s", path, ln,
                                 head.name[c], reason);
                    ok = 0;
                }
            } else {
                x[c - (head.label >= 0 && c > head.label)] = (float)v; /* the label's gap */
            }
        }
        if (rc < 0) goto fail;
        if (ok) t.rows++;
    }
    if ((rc = finish(path, &bad, &t, err)) < 0) goto fail;
    *out = t;
    t = (dt_reader_table){0};
    rc = 0;
fail:
    if (src.gz) gzclose_r(src.gz);
    free(src.buf);
    free(fields);
    header_deinit(&head);
    dt_reader_table_deinit(&t);
    return rc;
}

/* ---- libsvm --------------------------------------------------------------- */

/* A whole token of decimal digits (an optional leading '-' or '+' allowed,
 * so that a negative index is reported as out of range). */
static int parse_int(const char *s, long long *out) {
    const char *d = (*s == '-' || *s == '+') ? s + 1 : s;
    if (!isdigit((unsigned char)*d)) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end || errno) return -1;
    *out = v;
    return 0;
}

/* The next libsvm row: a line with its comment cut off that is not blank.
 * Returns 1, 0 at the end of the file, or an error; *bad as next_line. */
static int next_svm_row(line_src *s, char **line, const char **bad, dt_err *err) {
    size_t len;
    for (;;) {
        int rc = next_line(s, line, &len, bad, err);
        if (rc <= 0 || *bad) return rc;
        char *hash = strchr(*line, '#');
        if (hash) *hash = '\0';
        if (!blank(*line)) return 1;
    }
}

/* Parses one non-empty libsvm line into x (F, zeroed here) and *y (y NULL:
 * the row has no label), with the tokenizer both readers share. Returns 0,
 * or -1 (malformed) or MISFIT (a class or feature index past the config's)
 * with the reason in why. */
static int parse_svm_row(char *line, const dt_reader_params *p, float *x, float *y, char *why,
                         size_t cap) {
    const int F = p->num_features;
    memset(x, 0, (size_t)F * sizeof *x);
    const dt_libsvm_rules rules = {.labeled = y != NULL,
                                   .classes = p->label_kind == DT_LABEL_CLASS ? p->num_classes : 0,
                                   .signed_labels = p->svm_signed_labels,
                                   .max_index = F,
                                   .features = F};
    dt_libsvm_row row;
    dt_libsvm_row_begin(&row, line, &rules);
    for (;;) {
        int64_t idx;
        const char *text;
        int rc = dt_libsvm_row_next(&row, &idx, &text, y, why, cap);
        if (rc <= 0) return rc;
        if (rc == 2) continue; /* the label, in *y */
        double v;
        int status = parse_num(text, &v);
        if (status != NUM_OK) {
            snprintf(why, cap, "feature %lld: %s: \"%.40s\"", (long long)idx, num_problem(status),
                     text);
            return -1;
        }
        x[idx - 1] = (float)v;
    }
}

int dt_reader_libsvm(const char *path, const dt_reader_params *p, dt_reader_table *out,
                     dt_err *err) {
    memset(out, 0, sizeof *out);
    int rc = check_params(path, p, err);
    if (rc < 0) return rc;
    line_src src = {.path = path};
    int64_t row_cap = 0;
    bad_rows bad = {.skip = p->skip_bad_rows};
    dt_reader_table t = {.cols = p->num_features, .labeled = p->labels != DT_LABELS_NONE};
    if ((rc = open_gz(path, &src.gz, err)) < 0) goto fail;
    for (;;) {
        char *line;
        const char *why;
        rc = next_svm_row(&src, &line, &why, err);
        if (rc < 0) goto fail;
        if (rc == 0) break;
        const long long ln = (long long)src.line_no;
        if (why) {
            if ((rc = bad_row(&bad, DT_EINVAL, err, "%s:%lld: %s", path, ln, why)) < 0) goto fail;
            continue;
        }
        if ((rc = reserve_row(&t, &row_cap, p, path, err)) < 0) goto fail;
        char reason[DT_ERR_MSG_MAX / 2];
        int pr = parse_svm_row(line, p, t.x + (size_t)t.rows * (size_t)t.cols,
                               t.labeled ? &t.y[t.rows] : NULL, reason, sizeof reason);
        if (pr < 0) {
            if ((rc = bad_row(&bad, row_code(pr), err, "%s:%lld: %s", path, ln, reason)) < 0)
                goto fail;
            continue;
        }
        t.rows++;
    }
    if ((rc = finish(path, &bad, &t, err)) < 0) goto fail;
    *out = t;
    t = (dt_reader_table){0};
    rc = 0;
fail:
    if (src.gz) gzclose_r(src.gz);
    free(src.buf);
    dt_reader_table_deinit(&t);
    return rc;
}

/* ---- idx ------------------------------------------------------------------ */

static uint32_t be32(const unsigned char *b) {
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

int dt_reader_magic(const char *path, uint32_t *magic, dt_err *err) {
    *magic = 0;
    gzFile gz = NULL;
    int rc = open_gz(path, &gz, err);
    if (rc < 0) return rc;
    unsigned char head[4];
    size_t got = 0;
    rc = read_full(gz, path, head, sizeof head, &got, err);
    if (rc == 0 && got == sizeof head) *magic = be32(head);
    gzclose_r(gz);
    return rc;
}

/* Reads an idx header of ubyte data with `ndims` dimensions into dims. */
static int idx_header(gzFile gz, const char *path, int ndims, uint32_t *dims, const char *what,
                      dt_err *err) {
    unsigned char head[4 + 4 * 3];
    size_t want = 4 + 4 * (size_t)ndims, got;
    int rc = read_full(gz, path, head, want, &got, err);
    if (rc < 0) return rc;
    uint32_t expect = 0x00000800u | (uint32_t)ndims;
    if (got >= 4 && be32(head) != expect)
        return dt_err_set(err, DT_ECORRUPT,
                          "%s: bad magic number: expected 0x%08x (%s: unsigned bytes, %d "
                          "dimensions), got 0x%08x",
                          path, expect, what, ndims, be32(head));
    if (got < want)
        return dt_err_set(err, DT_ECORRUPT, "%s: truncated header: expected %zu bytes, got %zu",
                          path, want, got);
    for (int d = 0; d < ndims; d++)
        dims[d] = be32(head + 4 + 4 * d);
    return 0;
}

/* The end of an idx file: nothing may follow the last record. */
static int idx_trailing(gzFile gz, const char *path, uint64_t expect, dt_err *err) {
    unsigned char extra[64];
    size_t got;
    int rc = read_full(gz, path, extra, sizeof extra, &got, err);
    if (rc < 0) return rc;
    if (got > 0)
        return dt_err_set(err, DT_ECORRUPT,
                          "%s: %s bytes after the last record: expected %llu bytes in all", path,
                          got == sizeof extra ? "64 or more" : "some", (unsigned long long)expect);
    return 0;
}

/* Checks the dimensions of the headers: images N x R x C with R * C the
 * job's features, as many labels as images (ldims NULL: no labels file),
 * at least one image, and N * R * C within the reader's bound. *n and *f
 * get N and R * C. */
static int idx_shape(const char *images_path, const char *labels_path, const dt_reader_params *p,
                     const uint32_t idims[3], const uint32_t *ldims, uint64_t *n, uint64_t *f,
                     dt_err *err) {
    const uint64_t N = idims[0], R = idims[1], C = idims[2];
    if (R == 0 || C == 0)
        return dt_err_set(err, DT_ECORRUPT, "%s: bad dimensions %llu x %llu x %llu", images_path,
                          (unsigned long long)N, (unsigned long long)R, (unsigned long long)C);
    if (R * C != (uint64_t)p->num_features)
        return dt_err_set(err, DT_ECONFIG,
                          "%s: images of %llu x %llu = %llu features, but \"features\" is %d",
                          images_path, (unsigned long long)R, (unsigned long long)C,
                          (unsigned long long)(R * C), p->num_features);
    if (ldims && ldims[0] != N)
        return dt_err_set(err, DT_EINVAL, "%s: %llu labels, but %s has %llu images", labels_path,
                          (unsigned long long)ldims[0], images_path, (unsigned long long)N);
    if (N == 0) return dt_err_set(err, DT_EINVAL, "%s: no examples", images_path);
    /* N, R, C < 2^32, so N * R * C needs the division to stay exact. */
    const uint64_t F = R * C;
    if (N > (uint64_t)limit_of(p) / F)
        return dt_err_set(
            err, DT_EINVAL, "%s: %llu images of %llu values pass the bound of %lld values",
            images_path, (unsigned long long)N, (unsigned long long)F, (long long)limit_of(p));
    *n = N;
    *f = F;
    return 0;
}

/* Reads the N label bytes after the labels file's header into *out
 * (malloc'd), and checks that nothing follows them. */
static int idx_labels(gzFile gz, const char *path, uint64_t N, unsigned char **out, dt_err *err) {
    unsigned char *bytes = dt_malloc((size_t)N);
    if (!bytes)
        return dt_err_set(err, DT_ENOMEM, "%s: no memory for %llu labels", path,
                          (unsigned long long)N);
    size_t got;
    int rc = read_full(gz, path, bytes, (size_t)N, &got, err);
    if (rc == 0 && got < N)
        rc = dt_err_set(err, DT_ECORRUPT, "%s: truncated: expected %llu bytes, got %llu", path,
                        (unsigned long long)(8 + N), (unsigned long long)(8 + got));
    if (rc == 0) rc = idx_trailing(gz, path, 8 + N, err);
    if (rc < 0) {
        free(bytes);
        return rc;
    }
    *out = bytes;
    return 0;
}

/* Reads the N images of F bytes after the images file's header into t (x,
 * and y from label_bytes when t->labeled), a chunk of images at a time; a
 * record whose label the params refuse is a bad row. Checks that nothing
 * follows the last image. */
static int idx_images(gzFile gz, const char *path, const char *labels_path,
                      const dt_reader_params *p, uint64_t N, uint64_t F,
                      const unsigned char *label_bytes, bad_rows *bad, dt_reader_table *t,
                      dt_err *err) {
    int rc = 0;
    t->x = dt_malloc((size_t)N * (size_t)F * sizeof(float));
    if (t->labeled) t->y = dt_malloc((size_t)N * sizeof(float));
    uint64_t per_chunk = IDX_CHUNK_BYTES / F ? IDX_CHUNK_BYTES / F : 1;
    if (per_chunk > N) per_chunk = N;
    unsigned char *chunk = dt_malloc((size_t)(per_chunk * F));
    if (!t->x || (t->labeled && !t->y) || !chunk) {
        rc = dt_err_set(err, DT_ENOMEM, "%s: no memory for %llu images of %llu values", path,
                        (unsigned long long)N, (unsigned long long)F);
        goto fail;
    }
    const uint64_t expect = 16 + N * F;
    for (uint64_t first = 0; first < N; first += per_chunk) {
        uint64_t count = N - first < per_chunk ? N - first : per_chunk;
        size_t got;
        if ((rc = read_full(gz, path, chunk, (size_t)(count * F), &got, err)) < 0) goto fail;
        if (got < count * F) {
            rc = dt_err_set(err, DT_ECORRUPT, "%s: truncated: expected %llu bytes, got %llu", path,
                            (unsigned long long)expect, (unsigned long long)(16 + first * F + got));
            goto fail;
        }
        for (uint64_t r = 0; r < count; r++) {
            uint64_t i = first + r;
            char reason[192];
            int lr = t->labeled
                         ? check_label(p, 0, label_bytes[i], &t->y[t->rows], reason, sizeof reason)
                         : 0;
            if (lr < 0) {
                if ((rc = bad_row(bad, row_code(lr), err, "%s: record %llu: %s", labels_path,
                                  (unsigned long long)i, reason)) < 0)
                    goto fail;
                continue;
            }
            float *x = t->x + (size_t)t->rows * F;
            const unsigned char *px = chunk + r * F;
            for (uint64_t j = 0; j < F; j++)
                x[j] = (float)px[j];
            t->rows++;
        }
    }
    rc = idx_trailing(gz, path, expect, err);
fail:
    free(chunk);
    return rc;
}

int dt_reader_idx(const char *images_path, const char *labels_path, const dt_reader_params *p,
                  dt_reader_table *out, dt_err *err) {
    memset(out, 0, sizeof *out);
    int rc = check_params(images_path, p, err);
    if (rc < 0) return rc;
    const int labeled = p->labels != DT_LABELS_NONE;
    if (labeled && (!labels_path || !*labels_path))
        return dt_err_set(err, DT_EINVAL, "%s: idx images need a labels file", images_path);
    if (!labeled && labels_path && *labels_path)
        return dt_err_set(err, DT_EINVAL,
                          "%s: labels file %s given, but the images are read without labels",
                          images_path, labels_path);
    gzFile images = NULL, labels = NULL;
    unsigned char *label_bytes = NULL;
    bad_rows bad = {.skip = p->skip_bad_rows};
    dt_reader_table t = {.cols = p->num_features, .labeled = labeled};

    uint32_t idims[3], ldims[1];
    uint64_t N = 0, F = 0;
    if ((rc = open_gz(images_path, &images, err)) < 0) goto fail;
    if (labeled && (rc = open_gz(labels_path, &labels, err)) < 0) goto fail;
    if ((rc = idx_header(images, images_path, 3, idims, "images", err)) < 0) goto fail;
    if (labeled && (rc = idx_header(labels, labels_path, 1, ldims, "labels", err)) < 0) goto fail;
    if ((rc = idx_shape(images_path, labels_path, p, idims, labeled ? ldims : NULL, &N, &F, err)) <
        0)
        goto fail;
    /* Labels first, so images of bad records can be passed over. */
    if (labeled && (rc = idx_labels(labels, labels_path, N, &label_bytes, err)) < 0) goto fail;
    if ((rc = idx_images(images, images_path, labels_path, p, N, F, label_bytes, &bad, &t, err)) <
            0 ||
        (rc = finish(images_path, &bad, &t, err)) < 0)
        goto fail;
    *out = t;
    t = (dt_reader_table){0};
    rc = 0;
fail:
    if (images) gzclose_r(images);
    if (labels) gzclose_r(labels);
    free(label_bytes);
    dt_reader_table_deinit(&t);
    return rc;
}

/* ---- by name -------------------------------------------------------------- */

static int unknown_format(dt_reader_format format, dt_err *err) {
    return dt_err_set(err, DT_EINVAL, "reader: unknown format %d (want csv, libsvm or idx)",
                      (int)format);
}

int dt_reader_load(dt_reader_format format, const char *data_path, const char *labels_path,
                   const dt_reader_params *p, dt_reader_table *out, dt_err *err) {
    memset(out, 0, sizeof *out);
    switch (format) {
    case DT_READER_CSV: return dt_reader_csv(data_path, p, out, err);
    case DT_READER_LIBSVM: return dt_reader_libsvm(data_path, p, out, err);
    case DT_READER_IDX: return dt_reader_idx(data_path, labels_path, p, out, err);
    }
    return unknown_format(format, err);
}

/* ---- telling labeled files from unlabeled ones ----------------------------- */

/* A csv file by its header: F + 1 columns (or the label column named) has
 * labels, F columns has none. */
static int detect_csv(const char *path, const dt_reader_params *p, int *labeled, char *how,
                      size_t cap, dt_err *err) {
    line_src src = {.path = path};
    char **fields = NULL;
    int fields_cap = 0, count = 0, rc;
    const int F = p->num_features;
    const char *want = p->label_column ? p->label_column : "";
    char label[96];
    if (*want && !all_digits(want))
        snprintf(label, sizeof label, "the label column \"%.64s\"", want);
    else
        snprintf(label, sizeof label, "a label column (column %.20s)", *want ? want : "?");
    if ((rc = csv_open(path, &src, &fields, &fields_cap, &count, err)) < 0) goto fail;
    int named = label_named(fields, count, p);
    if (count == F + 1 || named >= 0) {
        *labeled = 1;
        snprintf(how, cap, "%s: %d columns: %d features and %s", path, count, count - 1, label);
    } else if (count == F) {
        *labeled = 0;
        snprintf(how, cap, "%s: %d columns for %d features, none of them %s", path, count, F,
                 label);
    } else {
        rc = dt_err_set(err, DT_ECONFIG,
                        "%s:%lld: the header has %d columns, but the job's %d features make %d "
                        "with %s or %d without labels",
                        path, (long long)src.line_no, count, F, F + 1, label, F);
    }
fail:
    if (src.gz) gzclose_r(src.gz);
    free(src.buf);
    free(fields);
    return rc;
}

/* A libsvm file by its first row: a label first, or an index:value pair. A
 * line the read would refuse (a NUL byte) is passed over here. */
static int detect_libsvm(const char *path, int *labeled, char *how, size_t cap, dt_err *err) {
    line_src src = {.path = path};
    char *line;
    const char *why;
    int rc = open_gz(path, &src.gz, err);
    *labeled = 1;
    snprintf(how, cap, "%s: no rows", path);
    while (rc == 0 && (rc = next_svm_row(&src, &line, &why, err)) == 1) {
        if (why) {
            rc = 0;
            continue;
        }
        char *first = line + strspn(line, " \t");
        first[strcspn(first, " \t")] = '\0';
        *labeled = strchr(first, ':') == NULL;
        snprintf(how, cap, "%s:%lld: the first row starts with %s \"%.40s\"", path,
                 (long long)src.line_no, *labeled ? "the label" : "the index:value pair", first);
        rc = 0;
        break;
    }
    if (src.gz) gzclose_r(src.gz);
    free(src.buf);
    return rc;
}

int dt_reader_detect_labels(dt_reader_format format, const char *data_path, const char *labels_path,
                            const dt_reader_params *p, int *labeled, char *how, size_t cap,
                            dt_err *err) {
    char scratch[8];
    if (!how || !cap) {
        how = scratch;
        cap = sizeof scratch;
    }
    how[0] = '\0';
    *labeled = 1;
    int rc = check_params(data_path, p, err);
    if (rc < 0) return rc;
    switch (format) {
    case DT_READER_CSV: return detect_csv(data_path, p, labeled, how, cap, err);
    case DT_READER_LIBSVM: return detect_libsvm(data_path, labeled, how, cap, err);
    case DT_READER_IDX:
        *labeled = labels_path && *labels_path;
        if (*labeled)
            snprintf(how, cap, "%s: with the labels file %s", data_path, labels_path);
        else
            snprintf(how, cap, "%s: no labels file", data_path);
        return 0;
    }
    return unknown_format(format, err);
}

/* ---- a csv file's feature names -------------------------------------------- */

int dt_reader_csv_names(const char *path, const dt_reader_params *p, char **out, dt_err *err) {
    *out = NULL;
    line_src src = {.path = path};
    char **fields = NULL;
    int fields_cap = 0, count = 0, label = -1, rc;
    if ((rc = csv_open(path, &src, &fields, &fields_cap, &count, err)) < 0) goto fail;
    if (p->labels != DT_LABELS_NONE &&
        (rc = find_label(path, src.line_no, fields, count, p, "", &label, err)) < 0)
        goto fail;
    size_t n = 1;
    for (int c = 0; c < count; c++)
        n += strlen(fields[c]) + 1;
    char *names = dt_malloc(n);
    if (!names) {
        rc = dt_err_set(err, DT_ENOMEM, "%s: no memory for the header", path);
        goto fail;
    }
    size_t at = 0;
    for (int c = 0; c < count; c++) {
        if (c == label) continue;
        at += (size_t)snprintf(names + at, n - at, "%s%s", at ? "," : "", fields[c]);
    }
    names[at] = '\0';
    *out = names;
fail:
    if (src.gz) gzclose_r(src.gz);
    free(src.buf);
    free(fields);
    return rc;
}

/* ---- a training file's own shape ------------------------------------------- */

/* The labels seen while inferring "classes": which whole numbers in
 * [0, DT_READER_MAX_CLASSES) occur, and the largest. */
typedef struct {
    unsigned char *seen; /* (DT_READER_MAX_CLASSES) */
    int max;             /* the largest class seen, or -1 */
    double beyond;       /* a whole label >= DT_READER_MAX_CLASSES, or -1 */
    const char *where;   /* the labels' file, for messages */
} class_tally;

static int tally_init(class_tally *c, const char *where, dt_err *err) {
    memset(c, 0, sizeof *c);
    c->max = -1;
    c->beyond = -1;
    c->where = where;
    c->seen = dt_calloc(DT_READER_MAX_CLASSES, 1);
    return c->seen ? 0 : dt_err_set(err, DT_ENOMEM, "%s: no memory to count classes", where);
}

/* Counts a label. What is no class index (not a number, a fraction, a
 * negative) is passed over: the read that follows refuses or skips it. */
static void tally(class_tally *c, double v) {
    if (!(v >= 0) || v != floor(v)) return;
    if (v >= DT_READER_MAX_CLASSES) {
        if (v > c->beyond) c->beyond = v;
        return;
    }
    c->seen[(int)v] = 1;
    if ((int)v > c->max) c->max = (int)v;
}

/* K = the largest label + 1 when every class 0..K-1 occurs and K >= 2;
 * otherwise the labels do not say K, and the config must (DT_ECONFIG). */
static int tally_classes(const class_tally *c, int *classes, char *how, size_t cap, dt_err *err) {
    static const char fix[] = "set \"classes\" (labels are class indices 0..K-1)";
    if (c->beyond >= 0)
        return dt_err_set(err, DT_ECONFIG,
                          "%s: label %.0f: more than %d classes are not inferred; %s", c->where,
                          c->beyond, DT_READER_MAX_CLASSES, fix);
    if (c->max < 0)
        return dt_err_set(err, DT_ECONFIG, "%s: no label is a class index 0, 1, ...; %s", c->where,
                          fix);
    if (c->max == 0)
        return dt_err_set(err, DT_ECONFIG, "%s: every label is 0: one class; %s", c->where, fix);
    for (int k = 0; k <= c->max; k++)
        if (!c->seen[k])
            return dt_err_set(err, DT_ECONFIG,
                              "%s: the labels run up to %d, but no row has class %d, so the "
                              "number of classes is not clear; %s",
                              c->where, c->max, k, fix);
    *classes = c->max + 1;
    snprintf(how, cap, "%s: labels 0..%d", c->where, c->max);
    return 0;
}

/* csv: the header's columns less the label column; the label column of
 * every row when classes are wanted. */
static int infer_csv(const char *path, const dt_reader_params *p, class_tally *ct,
                     dt_reader_shape *out, dt_err *err) {
    line_src src = {.path = path};
    char **fields = NULL;
    int fields_cap = 0, count = 0, label = -1, rc;
    if ((rc = csv_open(path, &src, &fields, &fields_cap, &count, err)) < 0) goto fail;
    if ((rc = find_label(path, src.line_no, fields, count, p, "", &label, err)) < 0) goto fail;
    if (count < 2) {
        rc = dt_err_set(err, DT_EINVAL, "%s:%lld: the header has no column besides the label", path,
                        (long long)src.line_no);
        goto fail;
    }
    out->num_features = count - 1;
    snprintf(out->features_how, sizeof out->features_how,
             "%s: %d columns less the label column \"%.64s\"", path, count, fields[label]);
    const int ncols = count;
    while (ct) {
        char *line;
        size_t len;
        const char *why;
        if ((rc = next_line(&src, &line, &len, &why, err)) < 0) goto fail;
        if (rc == 0) break;
        if (why || blank(line)) continue;
        split_csv(&src, line, &fields, &fields_cap, &count, err, &rc);
        if (rc < 0) goto fail;
        double v;
        if (count == ncols && parse_num(fields[label], &v) == NUM_OK) tally(ct, v);
    }
    rc = 0;
fail:
    if (src.gz) gzclose_r(src.gz);
    free(src.buf);
    free(fields);
    return rc;
}

/* libsvm: the largest feature index of any row, and the first token of
 * each row as its label. */
static int infer_libsvm(const char *path, class_tally *ct, dt_reader_shape *out, dt_err *err) {
    line_src src = {.path = path};
    long long largest = 0;
    int64_t rows = 0;
    int rc = open_gz(path, &src.gz, err);
    while (rc == 0) {
        char *line;
        const char *why;
        if ((rc = next_svm_row(&src, &line, &why, err)) <= 0) break;
        rc = 0;
        if (why) continue;
        rows++;
        char *save = NULL;
        int first = 1;
        for (char *tok = strtok_r(line, " \t", &save); tok;
             tok = strtok_r(NULL, " \t", &save), first = 0) {
            char *colon = strchr(tok, ':');
            double v;
            long long idx;
            if (first && !colon && ct && parse_num(tok, &v) == NUM_OK) tally(ct, v);
            if (!colon || strncmp(tok, "qid:", 4) == 0) continue;
            *colon = '\0';
            if (parse_int(tok, &idx) == 0 && idx > largest) largest = idx;
        }
    }
    if (src.gz) gzclose_r(src.gz);
    free(src.buf);
    if (rc < 0) return rc;
    if (largest < 1)
        return dt_err_set(err, DT_EINVAL, "%s: no feature index in %lld rows", path,
                          (long long)rows);
    if (largest > INT_MAX)
        return dt_err_set(err, DT_EINVAL, "%s: feature index %lld is past the largest model", path,
                          largest);
    out->num_features = (int)largest;
    snprintf(out->features_how, sizeof out->features_how,
             "%s: the largest feature index of %lld rows", path, (long long)rows);
    return 0;
}

/* idx: rows x cols from the images' header; every byte of the labels file
 * when classes are wanted. */
static int infer_idx(const char *images_path, const char *labels_path, class_tally *ct,
                     dt_reader_shape *out, dt_err *err) {
    gzFile gz = NULL;
    unsigned char *chunk = NULL;
    uint32_t dims[3];
    int rc = open_gz(images_path, &gz, err);
    if (rc == 0) rc = idx_header(gz, images_path, 3, dims, "images", err);
    if (gz) gzclose_r(gz);
    gz = NULL;
    if (rc < 0) return rc;
    const uint64_t F = (uint64_t)dims[1] * dims[2];
    if (F == 0 || F > INT_MAX)
        return dt_err_set(err, DT_ECORRUPT, "%s: bad dimensions %u x %u x %u", images_path, dims[0],
                          dims[1], dims[2]);
    out->num_features = (int)F;
    snprintf(out->features_how, sizeof out->features_how, "%s: images of %u x %u", images_path,
             dims[1], dims[2]);
    if (!ct) return 0;
    if (!labels_path || !*labels_path)
        return dt_err_set(err, DT_EINVAL, "%s: idx images need a labels file", images_path);
    uint32_t n;
    if ((rc = open_gz(labels_path, &gz, err)) < 0) return rc;
    if ((rc = idx_header(gz, labels_path, 1, &n, "labels", err)) < 0) goto fail;
    if (!(chunk = dt_malloc(IDX_CHUNK_BYTES))) {
        rc = dt_err_set(err, DT_ENOMEM, "%s: out of memory", labels_path);
        goto fail;
    }
    for (uint64_t done = 0; done < n;) {
        size_t want = n - done < IDX_CHUNK_BYTES ? (size_t)(n - done) : IDX_CHUNK_BYTES, got;
        if ((rc = read_full(gz, labels_path, chunk, want, &got, err)) < 0) goto fail;
        for (size_t i = 0; i < got; i++)
            tally(ct, chunk[i]);
        done += got;
        if (got < want) break; /* truncated: the read says so */
    }
fail:
    if (gz) gzclose_r(gz);
    free(chunk);
    return rc;
}

int dt_reader_infer(dt_reader_format format, const char *data_path, const char *labels_path,
                    const dt_reader_params *p, int want_classes, dt_reader_shape *out,
                    dt_err *err) {
    memset(out, 0, sizeof *out);
    class_tally ct;
    memset(&ct, 0, sizeof ct);
    if (format != DT_READER_CSV && format != DT_READER_LIBSVM && format != DT_READER_IDX)
        return unknown_format(format, err);
    int is_idx = format == DT_READER_IDX, rc;
    if (want_classes &&
        (rc = tally_init(&ct, is_idx && labels_path && *labels_path ? labels_path : data_path,
                         err)) < 0)
        return rc;
    class_tally *classes = want_classes ? &ct : NULL;
    if (is_idx)
        rc = infer_idx(data_path, labels_path, classes, out, err);
    else if (format == DT_READER_CSV)
        rc = infer_csv(data_path, p, classes, out, err);
    else
        rc = infer_libsvm(data_path, classes, out, err);
    if (rc == 0 && want_classes)
        rc = tally_classes(&ct, &out->num_classes, out->classes_how, sizeof out->classes_how, err);
    free(ct.seen);
    return rc;
}

/* ---- lines, for the readers of other text formats ------------------------- */

struct dt_reader_lines {
    line_src src;
};

int dt_reader_lines_open(const char *path, dt_reader_lines **out, dt_err *err) {
    *out = NULL;
    dt_reader_lines *l = dt_calloc(1, sizeof *l);
    if (!l) return dt_err_set(err, DT_ENOMEM, "%s: no memory for a reader", path);
    l->src.path = path;
    int rc = open_gz(path, &l->src.gz, err);
    if (rc < 0) {
        free(l);
        return rc;
    }
    *out = l;
    return 0;
}

int dt_reader_lines_next(dt_reader_lines *l, char **line, size_t *len, int64_t *line_no,
                         const char **bad, dt_err *err) {
    int rc = next_line(&l->src, line, len, bad, err);
    *line_no = l->src.line_no;
    return rc;
}

int dt_reader_parse_int64(const char *s, int64_t *out) {
    long long v;
    if (parse_int(s, &v) < 0) return -1;
    *out = v;
    return 0;
}

void dt_reader_lines_close(dt_reader_lines *l) {
    if (!l) return;
    if (l->src.gz) gzclose_r(l->src.gz);
    free(l->src.buf);
    free(l);
}
