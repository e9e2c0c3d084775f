/*
 * sparse_reader: Criteo-layout and libsvm files into CSR sets (the formats
 * and their rules are in sparse_reader.h).
 *
 * A row is parsed straight onto the end of the set's arrays and counts
 * only once it is complete and belongs to this shard; a malformed row or
 * another shard's row is rolled back by moving the ends back. Arrays grow
 * by doubling within the max_values bound, checked before every
 * allocation.
 *
 * Invariants: set.offsets[set.rows] is the number of committed entries;
 * every committed id is in [0, num_ids), every field in [0, num_fields),
 * every value and dense feature finite and within float range.
 * Threading: no shared state.
 */
#include "sparse_reader.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "hash.h"
#include "libsvm.h"
#include "log.h"

#define DEFAULT_MAX_VALUES ((int64_t)1 << 31)
#define MAX_INDEX ((int64_t)1 << 62) /* hashed libsvm indices */
#define WHY_MAX 256

float dt_criteo_dense(int64_t x) {
    return x > 0 ? (float)log1p((double)x) : 0.0f;
}

/* ---- the set being built ---------------------------------------------------- */

typedef struct {
    const char *path;
    dt_sparse_set set;
    int64_t cap_rows, cap_entries, max_values;
    int labeled, has_values, has_fields;
} builder;

static int grow(void **p, int64_t n, size_t size) {
    if ((uint64_t)n > SIZE_MAX / size) return -1;
    void *q = dt_realloc(*p, (size_t)n * size);
    if (!q) return -1;
    *p = q;
    return 0;
}

static int too_many(const builder *b, dt_err *err) {
    return dt_err_set(err, DT_EINVAL,
                      "%s: more than %lld values (entries and dense features) in this shard",
                      b->path, (long long)b->max_values);
}

/* Room for one more row. */
static int reserve_row(builder *b, dt_err *err) {
    dt_sparse_set *s = &b->set;
    const int64_t Dd = s->dense_cols;
    if ((s->rows + 1) * Dd + s->offsets[s->rows] > b->max_values) return too_many(b, err);
    if (s->rows + 1 <= b->cap_rows) return 0; /* offsets hold cap_rows + 1 */
    int64_t cap = b->cap_rows ? b->cap_rows * 2 : 1024;
    int ok = grow((void **)&s->offsets, cap + 1, sizeof *s->offsets) == 0 &&
             (!b->labeled || grow((void **)&s->y, cap, sizeof *s->y) == 0) &&
             (Dd == 0 || grow((void **)&s->dense, cap * Dd, sizeof *s->dense) == 0);
    if (!ok)
        return dt_err_set(err, DT_ENOMEM, "%s: no memory for %lld rows", b->path, (long long)cap);
    b->cap_rows = cap;
    return 0;
}

/* Appends an entry to the row being parsed. */
static int add_entry(builder *b, int64_t id, int32_t field, float value, dt_err *err) {
    dt_sparse_set *s = &b->set;
    int64_t *end = &s->offsets[s->rows + 1];
    if (*end + (s->rows + 1) * (int64_t)s->dense_cols >= b->max_values) return too_many(b, err);
    if (*end >= b->cap_entries || !s->ids) {
        int64_t cap = b->cap_entries ? b->cap_entries * 2 : 16384;
        int ok = grow((void **)&s->ids, cap, sizeof *s->ids) == 0 &&
                 (!b->has_values || grow((void **)&s->values, cap, sizeof *s->values) == 0) &&
                 (!b->has_fields || grow((void **)&s->fields, cap, sizeof *s->fields) == 0);
        if (!ok)
            return dt_err_set(err, DT_ENOMEM, "%s: no memory for %lld entries", b->path,
                              (long long)cap);
        b->cap_entries = cap;
    }
    s->ids[*end] = id;
    if (b->has_values) s->values[*end] = value;
    if (b->has_fields) s->fields[*end] = field;
    (*end)++;
    return 0;
}

/* Starts a row: no entries yet. */
static void begin_row(builder *b) {
    b->set.offsets[b->set.rows + 1] = b->set.offsets[b->set.rows];
}

/* ---- malformed rows ------------------------------------------------------- */

typedef struct {
    const char *path;
    int skip;
    int64_t skipped;
    char first[DT_ERR_MSG_MAX];
} bad_rows;

/* Skipped and counted (0) with skip_bad_rows, else the error. */
static int bad_row(bad_rows *bad, int64_t line_no, const char *why, dt_err *err) {
    if (!bad->skip)
        return dt_err_set(err, DT_EINVAL, "%s:%lld: %s", bad->path, (long long)line_no, why);
    if (bad->skipped++ == 0)
        snprintf(bad->first, sizeof bad->first, "%s:%lld: %s", bad->path, (long long)line_no, why);
    return 0;
}

/* ---- fields --------------------------------------------------------------- */

/* A finite number within float range. */
static int parse_value(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v) || fabs(v) > FLT_MAX) return -1;
    *out = v;
    return 0;
}

/* ---- shared reading loop -------------------------------------------------- */

typedef int (*row_fn)(builder *b, char *line, const dt_sparse_read_params *p, char *why,
                      dt_err *err);

static int check_shards(const char *path, const dt_sparse_read_params *p, int *shard, int *shards,
                        dt_err *err) {
    *shards = p->num_shards > 0 ? p->num_shards : 1;
    *shard = p->shard;
    if (*shard < 0 || *shard >= *shards)
        return dt_err_set(err, DT_EINVAL, "%s: shard %d of %d is out of range", path, p->shard,
                          *shards);
    return 0;
}

/* Reads every line of path through parse (a row's parser: 0 for a good
 * row, 1 with why set for a malformed one, negative for an error) into b. */
static int read_rows(const char *path, const dt_sparse_read_params *p, builder *b, row_fn parse,
                     dt_err *err) {
    int shard, shards;
    int rc = check_shards(path, p, &shard, &shards, err);
    if (rc < 0) return rc;
    dt_reader_lines *lines = NULL;
    bad_rows bad = {.path = path, .skip = p->skip_bad_rows};
    b->max_values = p->max_values > 0 ? p->max_values : DEFAULT_MAX_VALUES;
    if ((rc = dt_reader_lines_open(path, &lines, err)) < 0) return rc;
    int64_t kept = 0;
    for (;;) {
        char *line, why[WHY_MAX];
        size_t len;
        int64_t line_no;
        const char *nul;
        rc = dt_reader_lines_next(lines, &line, &len, &line_no, &nul, err);
        if (rc <= 0) break;
        if (nul) {
            if ((rc = bad_row(&bad, line_no, nul, err)) < 0) break;
            continue;
        }
        if ((rc = reserve_row(b, err)) < 0) break;
        begin_row(b);
        why[0] = '\0';
        rc = parse(b, line, p, why, err);
        if (rc < 0) break;
        if (rc == 2) continue; /* not a row: a blank or comment line */
        if (rc == 1) {
            if ((rc = bad_row(&bad, line_no, why, err)) < 0) break;
            continue;
        }
        if (kept++ % shards == shard) b->set.rows++; /* commit; else the row is dropped */
    }
    dt_reader_lines_close(lines);
    if (rc < 0) return rc;
    b->set.skipped = bad.skipped;
    b->set.file_rows = kept;
    if (bad.skipped > 0)
        dt_log(DT_LOG_WARN, "%s: skipped %lld malformed rows (skip_bad_rows); the first: %s", path,
               (long long)bad.skipped, bad.first);
    if (kept == 0)
        return dt_err_set(err, DT_EINVAL, "%s: no examples%s", path,
                          bad.skipped ? ": every row was malformed" : "");
    if (b->set.rows == 0)
        return dt_err_set(err, DT_EINVAL, "%s: shard %d of %d is empty: only %lld examples", path,
                          shard, shards, (long long)kept);
    return 0;
}

static int start(builder *b, const char *path, int64_t num_ids, int dense_cols, int num_fields,
                 const dt_sparse_read_params *p, dt_err *err) {
    memset(b, 0, sizeof *b);
    b->path = path;
    b->labeled = p->labels != DT_LABELS_NONE;
    b->has_fields = num_fields > 0;
    b->set.num_ids = num_ids;
    b->set.dense_cols = dense_cols;
    b->set.num_fields = num_fields;
    if (grow((void **)&b->set.offsets, 1, sizeof *b->set.offsets) < 0)
        return dt_err_set(err, DT_ENOMEM, "%s: no memory", path);
    b->set.offsets[0] = 0;
    return 0;
}

/* Hands the set over, its arrays cut to size (a failed shrink keeps the
 * larger ones). */
static void finish(builder *b, dt_sparse_set *out) {
    dt_sparse_set *s = &b->set;
    const int64_t n = s->rows, nnz = s->offsets[n];
    grow((void **)&s->offsets, n + 1, sizeof *s->offsets);
    if (s->y) grow((void **)&s->y, n, sizeof *s->y);
    if (s->dense) grow((void **)&s->dense, n * s->dense_cols, sizeof *s->dense);
    if (s->ids && nnz) grow((void **)&s->ids, nnz, sizeof *s->ids);
    if (s->values && nnz) grow((void **)&s->values, nnz, sizeof *s->values);
    if (s->fields && nnz) grow((void **)&s->fields, nnz, sizeof *s->fields);
    *out = *s;
    memset(s, 0, sizeof *s);
}

/* ---- criteo --------------------------------------------------------------- */

static void column_name(int field, char *buf, size_t cap) {
    if (field == 0)
        snprintf(buf, cap, "label");
    else if (field <= DT_CRITEO_INT_COLUMNS)
        snprintf(buf, cap, "I%d", field);
    else
        snprintf(buf, cap, "C%d", field - DT_CRITEO_INT_COLUMNS);
}

static int criteo_row(builder *b, char *line, const dt_sparse_read_params *p, char *why,
                      dt_err *err) {
    dt_sparse_set *s = &b->set;
    const int first = b->labeled ? 0 : 1; /* the labeled layout's field of the first one */
    char *fields[DT_CRITEO_FIELDS + 1];
    int count = 0;
    for (char *f = line;; count++) {
        char *tab = strchr(f, '\t');
        if (count < DT_CRITEO_FIELDS) fields[count] = f;
        if (!tab) {
            count++;
            break;
        }
        *tab = '\0';
        f = tab + 1;
    }
    if (count == 1 && fields[0][0] == '\0') return 2; /* an empty line */
    const int want = DT_CRITEO_FIELDS - first;
    char col[8];
    if (count != want) {
        const char *layout = first ? "I1-I13, C1-C26, no label" : "label, I1-I13, C1-C26";
        if (count < want) {
            column_name(first + count, col, sizeof col);
            snprintf(why, WHY_MAX,
                     "%d fields, but the Criteo layout has %d (%s): column %s is missing", count,
                     want, layout, col);
        } else {
            snprintf(why, WHY_MAX,
                     "%d fields, but the Criteo layout has %d (%s): extra fields after column C26",
                     count, want, layout);
        }
        return 1;
    }
    float *dense = s->dense + (size_t)s->rows * DT_CRITEO_INT_COLUMNS;
    for (int k = 0; k < want; k++) {
        const int field = first + k;
        const char *v = fields[k];
        int64_t x = 0;
        if (field == 0) {
            if (dt_reader_parse_int64(v, &x) < 0 || (x != 0 && x != 1)) {
                snprintf(why, WHY_MAX, "column \"label\": \"%.40s\" is not 0 or 1", v);
                return 1;
            }
            s->y[s->rows] = (float)x;
        } else if (field <= DT_CRITEO_INT_COLUMNS) {
            if (*v && dt_reader_parse_int64(v, &x) < 0) {
                column_name(field, col, sizeof col); /* only here: snprintf is most of a row */
                snprintf(why, WHY_MAX, "column \"%s\": not an integer: \"%.40s\"", col, v);
                return 1;
            }
            dense[field - 1] = dt_criteo_dense(x); /* missing: x = 0 */
        } else if (*v) {
            int64_t id = dt_hash_feature(field, v, strlen(v), p->hash_bits);
            int rc = add_entry(b, id, field - 1 - DT_CRITEO_INT_COLUMNS, 1.0f, err);
            if (rc < 0) return rc;
        }
    }
    return 0;
}

int dt_sparse_detect_criteo_labels(const char *path, int *labeled, char *how, size_t cap,
                                   dt_err *err) {
    *labeled = 1;
    snprintf(how, cap, "%s: no rows", path);
    dt_reader_lines *lines = NULL;
    int rc = dt_reader_lines_open(path, &lines, err);
    if (rc < 0) return rc;
    char *line;
    size_t len;
    int64_t line_no;
    const char *nul;
    rc = dt_reader_lines_next(lines, &line, &len, &line_no, &nul, err);
    if (rc == 1) {
        int fields = 1;
        for (size_t k = 0; k < len; k++)
            fields += line[k] == '\t';
        rc = 0;
        if (fields == DT_CRITEO_FIELDS || fields == DT_CRITEO_FIELDS - 1) {
            *labeled = fields == DT_CRITEO_FIELDS;
            snprintf(how, cap, "%s:%lld: %d tab-separated fields", path, (long long)line_no,
                     fields);
        } else {
            rc = dt_err_set(err, DT_EINVAL,
                            "%s:%lld: %d tab-separated fields: the Criteo layout has %d (a label, "
                            "then the features) or %d (the features alone)",
                            path, (long long)line_no, fields, DT_CRITEO_FIELDS,
                            DT_CRITEO_FIELDS - 1);
        }
    }
    dt_reader_lines_close(lines);
    return rc < 0 ? rc : 0;
}

int dt_sparse_read_criteo(const char *path, const dt_sparse_read_params *p, dt_sparse_set *out,
                          dt_err *err) {
    memset(out, 0, sizeof *out);
    if (p->hash_bits < 1 || p->hash_bits > DT_HASH_MAX_BITS)
        return dt_err_set(err, DT_EINVAL,
                          "%s: \"hash_bits\" must be 1 to %d for Criteo data (got %d)", path,
                          DT_HASH_MAX_BITS, p->hash_bits);
    builder b;
    int rc = start(&b, path, (int64_t)1 << p->hash_bits, DT_CRITEO_INT_COLUMNS,
                   DT_CRITEO_CAT_COLUMNS, p, err);
    if (rc == 0) rc = read_rows(path, p, &b, criteo_row, err);
    if (rc == 0) finish(&b, out);
    dt_sparse_set_deinit(&b.set);
    return rc;
}

/* ---- libsvm --------------------------------------------------------------- */

static int libsvm_row(builder *b, char *line, const dt_sparse_read_params *p, char *why,
                      dt_err *err) {
    dt_sparse_set *s = &b->set;
    /* Any index up to MAX_INDEX when hashed; every bad row is skipped or
     * refused alike here (no misfit of "features"). */
    const dt_libsvm_rules rules = {.labeled = b->labeled,
                                   .classes = p->label_kind == DT_LABEL_CLASS ? p->num_classes : 0,
                                   .signed_labels = p->svm_signed_labels,
                                   .max_index = p->hash_bits ? MAX_INDEX : p->num_features,
                                   .features = 0};
    dt_libsvm_row row;
    dt_libsvm_row_begin(&row, line, &rules);
    float *label = b->labeled ? &s->y[s->rows] : NULL;
    for (;;) {
        int64_t idx;
        const char *text;
        int rc = dt_libsvm_row_next(&row, &idx, &text, label, why, WHY_MAX);
        if (rc < 0) return 1;
        if (rc == 0) break;
        if (rc == 2) continue; /* the label */
        double v;
        if (parse_value(text, &v) < 0) {
            snprintf(why, WHY_MAX, "feature %lld: not a finite float: \"%.40s\"", (long long)idx,
                     text);
            return 1;
        }
        int64_t id = p->hash_bits ? dt_hash_index(idx, p->hash_bits) : idx - 1;
        int arc = add_entry(b, id, 0, (float)v, err);
        if (arc < 0) return arc;
    }
    return row.ntok == 0 ? 2 : 0;
}

int dt_sparse_read_libsvm(const char *path, const dt_sparse_read_params *p, dt_sparse_set *out,
                          dt_err *err) {
    memset(out, 0, sizeof *out);
    if (p->hash_bits < 0 || p->hash_bits > DT_HASH_MAX_BITS)
        return dt_err_set(err, DT_EINVAL, "%s: \"hash_bits\" must be 0 to %d (got %d)", path,
                          DT_HASH_MAX_BITS, p->hash_bits);
    if (!p->hash_bits && (p->num_features < 1 || p->num_features > ((int64_t)1 << 40)))
        return dt_err_set(err, DT_EINVAL, "%s: \"features\" must be 1 to 2^40 (got %lld)", path,
                          (long long)p->num_features);
    if (p->labels != DT_LABELS_NONE && p->label_kind == DT_LABEL_CLASS && p->num_classes < 2)
        return dt_err_set(err, DT_EINVAL, "%s: \"classes\" must be >= 2 (got %d)", path,
                          p->num_classes);
    builder b;
    int64_t num_ids = p->hash_bits ? (int64_t)1 << p->hash_bits : p->num_features;
    int rc = start(&b, path, num_ids, 0, 0, p, err);
    b.has_values = 1;
    if (rc == 0) rc = read_rows(path, p, &b, libsvm_row, err);
    if (rc == 0) finish(&b, out);
    dt_sparse_set_deinit(&b.set);
    return rc;
}
