/*
 * sparse suite: CSR batches (checks, distinct ids, slices, gathers), the
 * shuffled feed of a worker's shard (every row once an epoch, reshuffled
 * each epoch, per shard and seed, the same on every run and as a dense
 * data set's order, gathered rows equal to the rows they name, no
 * allocation a step once warm, out-of-memory at every allocation) and
 * the sparse readers: the Criteo layout (dense transform, hashed ids and
 * fields, missing values, files without labels, gzip, sharding, every
 * malformed row named by file, line and column, skip_bad_rows) and libsvm
 * with indices up to 2^40, as they are or hashed.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "alloc.h"
#include "data.h"
#include "hash.h"
#include "proc.h"
#include "sparse.h"
#include "sparse_reader.h"
#include "suites.h"

static char *dir;

static void setup(void) {
    dir = dt_test_tempdir();
    ck_assert_ptr_nonnull(dir);
}

static void teardown(void) {
    dt_test_tempdir_free(dir);
}

/* Writes text to dir/name and returns the path (static storage). */
static const char *file_of(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (strstr(name, ".gz")) {
        gzFile gz = gzopen(path, "wb");
        ck_assert_ptr_nonnull(gz);
        ck_assert_int_eq(gzputs(gz, text), (int)strlen(text));
        gzclose(gz);
    } else {
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(text, f);
        fclose(f);
    }
    return path;
}

/* ---- batches ---- */

START_TEST(test_batch_check_and_index) {
    /* 3 rows: {5, 2, 5}, {}, {9, 2}; a view starting at entry 10 of a
     * larger set (offsets from 10). */
    int64_t offsets[4] = {10, 13, 13, 15};
    int64_t ids[5] = {5, 2, 5, 9, 2};
    float values[5] = {1, 2, 3, 4, 5};
    int32_t fields[5] = {0, 1, 0, 2, 1};
    dt_sparse_batch b = {.rows = 3,
                         .offsets = offsets,
                         .ids = ids,
                         .values = values,
                         .fields = fields,
                         .num_ids = 10,
                         .num_fields = 3};
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_sparse_check(&b, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(dt_sparse_nnz(&b), 5);
    dt_sparse_index ix = {0};
    ck_assert_int_eq(dt_sparse_index_build(&ix, &b, &err), 0);
    ck_assert_int_eq(ix.n, 3);
    ck_assert(ix.ids[0] == 2 && ix.ids[1] == 5 && ix.ids[2] == 9);
    const int64_t want_pos[5] = {1, 0, 1, 2, 0};
    for (int e = 0; e < 5; e++)
        ck_assert_int_eq(ix.pos[e], want_pos[e]);
    /* Reused for a bigger batch. */
    int64_t offsets2[2] = {0, 5};
    int64_t ids2[5] = {4, 3, 2, 1, 0};
    dt_sparse_batch b2 = {.rows = 1, .offsets = offsets2, .ids = ids2, .num_ids = 5};
    ck_assert_int_eq(dt_sparse_index_build(&ix, &b2, &err), 0);
    ck_assert_int_eq(ix.n, 5);
    for (int e = 0; e < 5; e++)
        ck_assert_int_eq(ix.pos[e], 4 - e);
    dt_sparse_index_deinit(&ix);

    /* Each rule of the check. */
    ids[4] = 10;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_sparse_check(&b, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "sparse: row 2 entry 4: id 10 is out of range [0, 10)");
    ids[4] = 2;
    fields[1] = 3;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_sparse_check(&b, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "field 3 is out of range [0, 3)"));
    fields[1] = 1;
    values[3] = NAN;
    ck_assert_int_eq(dt_sparse_check(&b, NULL), DT_EINVAL);
    values[3] = 4;
    offsets[2] = 12;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_sparse_check(&b, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "row 1: offsets go back"));
    offsets[2] = 13;
    b.dense_cols = 2;
    ck_assert_int_eq(dt_sparse_check(&b, NULL), DT_EINVAL);
    b.rows = 0;
    ck_assert_int_eq(dt_sparse_check(&b, NULL), DT_EINVAL);
}
END_TEST

/* ---- criteo ---- */

/* Three good rows: every kind of field, missing ones, a negative integer. */
static const char criteo3[] =
    "1\t5\t\t-1\t0\t100\t1\t2\t3\t4\t5\t6\t7\t8\t68fd1e64\t80e26c9b\tfb936136\t7b4723c4\t25c83c98\t"
    "7e0ccccf\tde7995b8\t1f89b562\ta73ee510\ta8cd5504\tb2cb9c98\t37c9c164\t2824a5f6\t1adce6ef\t"
    "8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\tb1252a9d\t07b5194c\t\t3a171ecb\tc5c50484\t"
    "e8b83407\t9727dd16\n"
    "0\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\n"
    "0\t2\t0\t44\t1\t102\t8\t2\t2\t4\t4\t1\t\t4\t68fd1e64\tf0cf0024\t6f67f7e5\t41274cd7\t25c83c98\t"
    "fe6b92e5\t922afcc0\t0b153874\ta73ee510\t2b53e5fb\t4f1b46f3\t623049e6\td7020589\tb28479f6\t"
    "e6c5b5cd\tc92f3b61\t07c540c4\tb04e4670\t21ddcdc9\t5840adea\t60f6221e\t\t3a171ecb\t43f13e8b\t"
    "e8b83407\t731c3655\n";

static dt_sparse_read_params criteo_params(void) {
    dt_sparse_read_params p;
    memset(&p, 0, sizeof p);
    p.hash_bits = 20;
    return p;
}

START_TEST(test_criteo_read) {
    const char *path = file_of("a.txt", criteo3);
    dt_sparse_read_params p = criteo_params();
    dt_sparse_set s;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_sparse_read_criteo(path, &p, &s, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(s.rows, 3);
    ck_assert_int_eq(s.file_rows, 3);
    ck_assert_int_eq(s.dense_cols, 13);
    ck_assert_int_eq(s.num_ids, 1 << 20);
    ck_assert_int_eq(s.num_fields, 26);
    ck_assert_ptr_null(s.values);
    ck_assert(s.y[0] == 1 && s.y[1] == 0 && s.y[2] == 0);
    /* Row 0: I1 = 5, I2 missing, I3 = -1 (clipped), I4 = 0, I5 = 100. */
    ck_assert_float_eq(s.dense[0], (float)log1p(5.0));
    ck_assert_float_eq(s.dense[1], 0.0f);
    ck_assert_float_eq(s.dense[2], 0.0f);
    ck_assert_float_eq(s.dense[3], 0.0f);
    ck_assert_float_eq(s.dense[4], (float)log(101.0));
    /* Row 0 has 25 categoricals (C22 is empty), row 1 none, row 2 25. */
    ck_assert_int_eq(s.offsets[1], 25);
    ck_assert_int_eq(s.offsets[2], 25);
    ck_assert_int_eq(s.offsets[3], 50);
    ck_assert_int_eq(s.fields[0], 0);
    ck_assert_int_eq(s.fields[20], 20);
    ck_assert_int_eq(s.fields[21], 22); /* C22 (field 21) skipped */
    ck_assert_int_eq(s.ids[0], dt_hash_feature(14, "68fd1e64", 8, 20));
    ck_assert_int_eq(s.ids[24], dt_hash_feature(39, "9727dd16", 8, 20));
    /* The same string in the same column: the same id in every row. */
    ck_assert_int_eq(s.ids[0], s.ids[25]);
    for (int i = 0; i < 13; i++)
        ck_assert_float_eq(s.dense[13 + i], 0.0f);

    /* gzip reads alike; so does a second read. */
    dt_sparse_set z;
    const char *gz = file_of("c.txt.gz", criteo3);
    ck_assert_msg(dt_sparse_read_criteo(gz, &p, &z, &err) == 0, "%s", err.msg);
    ck_assert(memcmp(z.ids, s.ids, 50 * sizeof *s.ids) == 0);
    ck_assert(memcmp(z.dense, s.dense, 39 * sizeof *s.dense) == 0);
    dt_sparse_set_deinit(&z);

    /* Slices and gathers of the set. */
    dt_sparse_batch b;
    dt_sparse_set_slice(&s, 2, 1, &b);
    ck_assert_int_eq(dt_sparse_nnz(&b), 25);
    ck_assert_int_eq(b.ids[0], s.ids[25]);
    ck_assert_float_eq(b.dense[0], (float)log1p(2.0));
    ck_assert_int_eq(dt_sparse_check(&b, &err), 0);
    dt_sparse_buffer buf = {0};
    int64_t rows[3] = {2, 0, 1};
    ck_assert_int_eq(dt_sparse_gather(&s, rows, 3, &buf, &b, &err), 0);
    ck_assert_int_eq(b.rows, 3);
    ck_assert_int_eq(b.offsets[1], 25);
    ck_assert_int_eq(b.offsets[3], 50);
    ck_assert_int_eq(b.ids[25], s.ids[0]);
    ck_assert(b.y[0] == 0 && b.y[1] == 1);
    ck_assert_int_eq(b.fields[25 + 21], 22);
    ck_assert_int_eq(dt_sparse_check(&b, &err), 0);
    rows[1] = 3;
    ck_assert_int_eq(dt_sparse_gather(&s, rows, 3, &buf, &b, NULL), DT_EINVAL);
    dt_sparse_buffer_deinit(&buf);
    dt_sparse_set_deinit(&s);
    dt_sparse_set_deinit(NULL);
}
END_TEST

START_TEST(test_criteo_unlabeled_and_shards) {
    /* The same rows without their labels: the same ids and features. */
    dt_sparse_read_params p = criteo_params();
    dt_sparse_set a, u;
    const char *path = file_of("a.txt", criteo3);
    ck_assert_int_eq(dt_sparse_read_criteo(path, &p, &a, NULL), 0);
    char unlabeled[sizeof criteo3];
    const char *src = criteo3;
    char *dst = unlabeled;
    while (*src) { /* drop "label\t" at each line start */
        src = strchr(src, '\t') + 1;
        const char *nl = strchr(src, '\n');
        memcpy(dst, src, (size_t)(nl - src + 1));
        dst += nl - src + 1;
        src = nl + 1;
    }
    *dst = '\0';
    path = file_of("b.txt", unlabeled);
    p.labels = DT_LABELS_NONE;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_sparse_read_criteo(path, &p, &u, &err) == 0, "%s", err.msg);
    ck_assert_ptr_null(u.y);
    ck_assert_int_eq(u.offsets[3], a.offsets[3]);
    ck_assert(memcmp(u.ids, a.ids, 50 * sizeof *u.ids) == 0);
    ck_assert(memcmp(u.dense, a.dense, 39 * sizeof *u.dense) == 0);
    dt_sparse_set_deinit(&u);
    /* Told apart by their first line's fields: 40 with labels, 39 without;
     * another count is refused naming the line. */
    int labeled = -1;
    char how[256];
    ck_assert_int_eq(dt_sparse_detect_criteo_labels(path, &labeled, how, sizeof how, NULL), 0);
    ck_assert_int_eq(labeled, 0);
    ck_assert_ptr_nonnull(strstr(how, ":1: 39 tab-separated fields"));
    ck_assert_int_eq(
        dt_sparse_detect_criteo_labels(file_of("a.txt", criteo3), &labeled, how, sizeof how, NULL),
        0);
    ck_assert_int_eq(labeled, 1);
    ck_assert_int_eq(dt_sparse_detect_criteo_labels(file_of("c.txt", "1\t2\t3\n"), &labeled, how,
                                                    sizeof how, &err),
                     DT_EINVAL);
    ck_assert_ptr_nonnull(
        strstr(err.msg, "c.txt:1: 3 tab-separated fields: the Criteo layout has 40"));
    ck_assert_int_eq(
        dt_sparse_detect_criteo_labels(file_of("d.txt", ""), &labeled, how, sizeof how, NULL), 0);
    ck_assert_int_eq(labeled, 1);

    /* Two shards: rows 0 and 2, then row 1; together the file. */
    p = criteo_params();
    path = file_of("a.txt", criteo3);
    dt_sparse_set s0, s1;
    p.num_shards = 2;
    ck_assert_int_eq(dt_sparse_read_criteo(path, &p, &s0, NULL), 0);
    p.shard = 1;
    ck_assert_int_eq(dt_sparse_read_criteo(path, &p, &s1, NULL), 0);
    ck_assert_int_eq(s0.rows, 2);
    ck_assert_int_eq(s1.rows, 1);
    ck_assert_int_eq(s0.file_rows, 3);
    ck_assert(memcmp(s0.ids + 25, a.ids + 25, 25 * sizeof *a.ids) == 0);
    ck_assert_int_eq(s1.offsets[1], 0);
    ck_assert(s0.y[0] == 1 && s0.y[1] == 0 && s1.y[0] == 0);
    dt_sparse_set_deinit(&s0);
    dt_sparse_set_deinit(&s1);
    p.shard = 2;
    ck_assert_int_eq(dt_sparse_read_criteo(path, &p, &s1, &err), DT_EINVAL);
    dt_sparse_set_deinit(&a);
}
END_TEST

/* The second row of criteo3 (all missing) with one field replaced. */
static void criteo_row_with(char *out, size_t cap, int field, const char *value) {
    size_t n = 0;
    for (int f = 0; f < DT_CRITEO_FIELDS; f++) {
        const char *v = f == field ? value : f == 0 ? "0" : "";
        n += (size_t)snprintf(out + n, cap - n, "%s%s", f ? "\t" : "", v);
    }
    snprintf(out + n, cap - n, "\n");
}

START_TEST(test_criteo_errors) {
    static const struct {
        int field;
        const char *value;
        const char *want;
    } cases[] = {
        {0, "2", ":2: column \"label\": \"2\" is not 0 or 1"},
        {0, "", ":2: column \"label\": \"\" is not 0 or 1"},
        {5, "1.5", ":2: column \"I5\": not an integer: \"1.5\""},
        {13, "abc", ":2: column \"I13\": not an integer: \"abc\""},
        {1, "99999999999999999999", "column \"I1\": not an integer"},
    };
    char row[512], text[1024];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        criteo_row_with(row, sizeof row, 14, "aa");
        snprintf(text, sizeof text, "%s", row);
        criteo_row_with(row, sizeof row, cases[k].field, cases[k].value);
        strncat(text, row, sizeof text - strlen(text) - 1);
        const char *path = file_of("d.txt", text);
        dt_sparse_read_params p = criteo_params();
        dt_sparse_set s;
        dt_err err;
        dt_err_clear(&err);
        ck_assert_int_eq(dt_sparse_read_criteo(path, &p, &s, &err), DT_EINVAL);
        ck_assert_msg(strstr(err.msg, cases[k].want) && strstr(err.msg, "d.txt:2:"), "%zu: %s", k,
                      err.msg);
        /* skip_bad_rows keeps the good row and counts the bad one. */
        p.skip_bad_rows = 1;
        ck_assert_int_eq(dt_sparse_read_criteo(path, &p, &s, &err), 0);
        ck_assert_int_eq(s.rows, 1);
        ck_assert_int_eq(s.skipped, 1);
        dt_sparse_set_deinit(&s);
    }
    /* Field counts name the column that is missing, or say what is extra. */
    dt_sparse_read_params p = criteo_params();
    dt_sparse_set s;
    dt_err err;
    dt_err_clear(&err);
    const char *path = file_of("d.txt", "1\t2\t3\n");
    ck_assert_int_eq(dt_sparse_read_criteo(path, &p, &s, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "d.txt:1: 3 fields, but the Criteo layout has 40 (label, "
                                  "I1-I13, C1-C26): column I3 is missing"),
                  "%s", err.msg);
    criteo_row_with(row, sizeof row, 14, "aa");
    row[strlen(row) - 1] = '\0';
    snprintf(text, sizeof text, "%s\tx\n", row);
    path = file_of("d.txt", text);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_sparse_read_criteo(path, &p, &s, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "41 fields, but the Criteo layout has 40 (label, I1-I13, "
                                  "C1-C26): extra fields after column C26"),
                  "%s", err.msg);
    /* Every row bad: no examples. hash_bits out of range. A missing file. */
    p.skip_bad_rows = 1;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_sparse_read_criteo(path, &p, &s, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "no examples: every row was malformed"));
    p.hash_bits = 41;
    ck_assert_int_eq(dt_sparse_read_criteo(path, &p, &s, NULL), DT_EINVAL);
    p.hash_bits = 20;
    ck_assert_int_eq(dt_sparse_read_criteo("/nonexistent/x.txt", &p, &s, NULL), DT_ENOTFOUND);
    /* A bound on values the file passes. */
    p.max_values = 20;
    path = file_of("a.txt", criteo3);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_sparse_read_criteo(path, &p, &s, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "more than 20 values"));
}
END_TEST

/* ---- libsvm ---- */

START_TEST(test_libsvm_large_indices) {
    const char *path = file_of("a.txt", "1 3:0.5 1099511627776:2\n"
                                        "-1 qid:4 1:1 7:0 # a comment\n"
                                        "\n"
                                        "+1\n");
    dt_sparse_read_params p;
    memset(&p, 0, sizeof p);
    p.num_features = (int64_t)1 << 40;
    p.label_kind = DT_LABEL_CLASS;
    p.num_classes = 2;
    p.svm_signed_labels = 1;
    dt_sparse_set s;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_sparse_read_libsvm(path, &p, &s, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(s.rows, 3);
    ck_assert_int_eq(s.num_ids, (int64_t)1 << 40);
    ck_assert_int_eq(s.dense_cols, 0);
    ck_assert_ptr_null(s.fields);
    ck_assert(s.y[0] == 1 && s.y[1] == 0 && s.y[2] == 1);
    ck_assert(s.offsets[1] == 2 && s.offsets[2] == 4 && s.offsets[3] == 4);
    ck_assert_int_eq(s.ids[0], 2);
    ck_assert_int_eq(s.ids[1], ((int64_t)1 << 40) - 1);
    ck_assert_int_eq(s.ids[2], 0);
    ck_assert_int_eq(s.ids[3], 6);
    ck_assert(s.values[0] == 0.5f && s.values[1] == 2.0f && s.values[3] == 0.0f);
    dt_sparse_set_deinit(&s);

    /* Hashed into 2^12 buckets: the same index, the same id. */
    p.hash_bits = 12;
    ck_assert_int_eq(dt_sparse_read_libsvm(path, &p, &s, &err), 0);
    ck_assert_int_eq(s.num_ids, 4096);
    ck_assert_int_eq(s.ids[0], dt_hash_index(3, 12));
    ck_assert_int_eq(s.ids[1], dt_hash_index((int64_t)1 << 40, 12));
    dt_sparse_set_deinit(&s);

    /* Errors name the line. */
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"1 1:1\n0 5:1 4:1\n", "a.txt:2: feature index 4 after 5: indices must increase"},
        {"1 0:1\n", "a.txt:1: feature index 0 is out of range 1..1099511627776"},
        {"1 1099511627777:1\n", "feature index 1099511627777 is out of range"},
        {"2 1:1\n", "a.txt:1: label 2 is not a class of 0..1 (or -1)"},
        {"1 1:nan\n", "feature 1: not a finite float: \"nan\""},
        {"1 x:1\n", "feature index \"x\" is not an integer"},
        {"1:1 2:1\n", "no label: the row starts with \"1:1\""},
    };
    p.hash_bits = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        path = file_of("a.txt", cases[k].text);
        dt_err_clear(&err);
        ck_assert_int_eq(dt_sparse_read_libsvm(path, &p, &s, &err), DT_EINVAL);
        ck_assert_msg(strstr(err.msg, cases[k].want) != NULL, "%zu: %s", k, err.msg);
    }
    /* Without labels: index:value first; real targets for regression. */
    path = file_of("a.txt", "1:1 9:2.5\nqid:3 2:1\n");
    p.labels = DT_LABELS_NONE;
    ck_assert_int_eq(dt_sparse_read_libsvm(path, &p, &s, &err), 0);
    ck_assert_ptr_null(s.y);
    ck_assert_int_eq(s.offsets[2], 3);
    dt_sparse_set_deinit(&s);
    /* Rows without a single entry (found by fuzzing: a slice of a set
     * with no entry arrays offset a NULL pointer). */
    path = file_of("a.txt", "1\n-1 qid:2\n");
    p.labels = DT_LABELS_REQUIRED;
    p.label_kind = DT_LABEL_CLASS;
    ck_assert_int_eq(dt_sparse_read_libsvm(path, &p, &s, &err), 0);
    ck_assert_int_eq(s.rows, 2);
    ck_assert_int_eq(s.offsets[2], 0);
    dt_sparse_batch empty;
    dt_sparse_set_slice(&s, 0, 2, &empty);
    ck_assert_int_eq(dt_sparse_check(&empty, NULL), 0);
    dt_sparse_index ix = {0};
    ck_assert_int_eq(dt_sparse_index_build(&ix, &empty, NULL), 0);
    ck_assert_int_eq(ix.n, 0);
    dt_sparse_index_deinit(&ix);
    dt_sparse_set_deinit(&s);
    path = file_of("a.txt", "-2.5 1:1\n");
    p.label_kind = DT_LABEL_REAL;
    ck_assert_int_eq(dt_sparse_read_libsvm(path, &p, &s, &err), 0);
    ck_assert_float_eq(s.y[0], -2.5f);
    dt_sparse_set_deinit(&s);
}
END_TEST

/* ---- shuffled feeds ---- */

/* A set of n rows whose row i is recognisable: label i, dense (i, -i),
 * entries(i) entries e with id 10 i + e, value i + e / 8, field e. */
static void feed_set(dt_sparse_set *s, int64_t n, int (*entries)(int64_t)) {
    memset(s, 0, sizeof *s);
    int64_t nnz = 0;
    for (int64_t i = 0; i < n; i++)
        nnz += entries(i);
    s->rows = n;
    s->dense_cols = 2;
    s->dense = malloc((size_t)n * 2 * sizeof *s->dense);
    s->y = malloc((size_t)n * sizeof *s->y);
    s->offsets = malloc((size_t)(n + 1) * sizeof *s->offsets);
    s->ids = malloc((size_t)nnz * sizeof *s->ids);
    s->values = malloc((size_t)nnz * sizeof *s->values);
    s->fields = malloc((size_t)nnz * sizeof *s->fields);
    ck_assert(s->dense && s->y && s->offsets && s->ids && s->values && s->fields);
    s->num_ids = 10 * n + 10;
    s->num_fields = 4;
    s->offsets[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        s->y[i] = (float)i;
        s->dense[2 * i] = (float)i;
        s->dense[2 * i + 1] = -(float)i;
        int64_t e0 = s->offsets[i];
        for (int e = 0; e < entries(i); e++) {
            s->ids[e0 + e] = 10 * i + e;
            s->values[e0 + e] = (float)i + (float)e / 8;
            s->fields[e0 + e] = e;
        }
        s->offsets[i + 1] = e0 + entries(i);
    }
}

static int entries_varied(int64_t i) {
    return (int)(i % 4); /* 0 to 3: rows without entries too */
}

static int entries_three(int64_t i) {
    (void)i;
    return 3;
}

/* Row r of batch b is, in every array, row `row` of s. */
static void assert_row_is(const dt_sparse_batch *b, int r, const dt_sparse_set *s, int64_t row) {
    ck_assert_int_eq(b->dense_cols, s->dense_cols);
    ck_assert_float_eq(b->y[r], s->y[row]);
    for (int j = 0; j < s->dense_cols; j++)
        ck_assert_float_eq(b->dense[r * b->dense_cols + j], s->dense[row * s->dense_cols + j]);
    const int64_t n = b->offsets[r + 1] - b->offsets[r], e0 = s->offsets[row];
    ck_assert_int_eq(n, s->offsets[row + 1] - e0);
    for (int64_t e = 0; e < n; e++) {
        const int64_t be = b->offsets[r] - b->offsets[0] + e;
        ck_assert_int_eq(b->ids[be], s->ids[e0 + e]);
        ck_assert_float_eq(b->values[be], s->values[e0 + e]);
        ck_assert_int_eq(b->fields[be], s->fields[e0 + e]);
    }
}

/* One epoch of f in batches of bs: the rows in the order drawn (out, n of
 * them), each batch's rows checked against the set; the batches are full
 * but for the last. */
static void feed_epoch(dt_sparse_feed *f, int bs, int64_t *out) {
    const int start = f->epoch;
    const int64_t n = f->set->rows;
    int64_t k = 0;
    while (f->epoch == start) {
        dt_sparse_batch b;
        dt_err err;
        dt_err_clear(&err);
        ck_assert_msg(dt_sparse_feed_next(f, bs, &b, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(b.rows, n - k < bs ? n - k : bs);
        ck_assert_int_eq(dt_sparse_check(&b, &err), 0);
        for (int r = 0; r < b.rows; r++) {
            const int64_t row = (int64_t)b.y[r];
            ck_assert(row >= 0 && row < n);
            assert_row_is(&b, r, f->set, row);
            out[k++] = row;
        }
    }
    ck_assert_int_eq(k, n);
}

/* order is a permutation of 0..n-1, and not 0..n-1 itself. */
static void assert_shuffled(const int64_t *order, int64_t n) {
    int seen[64] = {0}, in_order = 1;
    ck_assert_int_le(n, 64);
    for (int64_t k = 0; k < n; k++) {
        ck_assert(order[k] >= 0 && order[k] < n);
        seen[order[k]]++;
        in_order &= order[k] == k;
    }
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(seen[i] == 1, "row %lld drawn %d times in an epoch", (long long)i, seen[i]);
    ck_assert_int_eq(in_order, 0);
}

START_TEST(test_feed_epochs) {
    enum { N = 50 };
    dt_sparse_set s;
    feed_set(&s, N, entries_varied);
    dt_sparse_feed a, b, c, d;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_sparse_feed_init(&a, &s, 11, 1, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(dt_sparse_feed_init(&b, &s, 11, 1, NULL), 0);
    ck_assert_int_eq(dt_sparse_feed_init(&c, &s, 11, 0, NULL), 0);
    ck_assert_int_eq(dt_sparse_feed_init(&d, &s, 12, 1, NULL), 0);
    int64_t a0[N], a1[N], a2[N], b0[N], b1[N], b2[N], c0[N], d0[N];
    feed_epoch(&a, 7, a0); /* 7 x 7 and a short batch of 1 */
    feed_epoch(&a, 7, a1);
    feed_epoch(&a, 7, a2);
    ck_assert_int_eq(a.epoch, 3);
    assert_shuffled(a0, N);
    assert_shuffled(a1, N);
    assert_shuffled(a2, N);
    /* Reshuffled each epoch. */
    ck_assert_int_ne(memcmp(a0, a1, sizeof a0), 0);
    ck_assert_int_ne(memcmp(a1, a2, sizeof a1), 0);
    /* A feed started again (a worker restarted, another run) draws the
     * same epochs, whatever its batch size. */
    feed_epoch(&b, 50, b0);
    feed_epoch(&b, 3, b1);
    feed_epoch(&b, 64, b2);
    ck_assert_int_eq(memcmp(a0, b0, sizeof a0), 0);
    ck_assert_int_eq(memcmp(a1, b1, sizeof a1), 0);
    ck_assert_int_eq(memcmp(a2, b2, sizeof a2), 0);
    /* Another shard, another seed: another order. */
    feed_epoch(&c, 7, c0);
    feed_epoch(&d, 7, d0);
    assert_shuffled(c0, N);
    assert_shuffled(d0, N);
    ck_assert_int_ne(memcmp(a0, c0, sizeof a0), 0);
    ck_assert_int_ne(memcmp(a0, d0, sizeof a0), 0);
    /* Errors leave the feed where it was. */
    dt_sparse_batch batch;
    ck_assert_int_eq(dt_sparse_feed_next(&a, 0, &batch, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "batch size must be >= 1"));
    ck_assert_int_eq(a.pos, 0);
    dt_sparse_feed_deinit(&a);
    dt_sparse_feed_deinit(&b);
    dt_sparse_feed_deinit(&c);
    dt_sparse_feed_deinit(&d);
    dt_sparse_feed_deinit(&a); /* zeroed: again is harmless */
    dt_sparse_feed_deinit(NULL);
    dt_sparse_set_deinit(&s);
}
END_TEST

/* A worker restarted at local step k (dt_sparse_feed_seek) gathers the
 * batches a feed that drew k batches gathers next, in every epoch and at
 * the short last batch of a pass; a feed that moved on seeks too, back to
 * an earlier epoch as well. Errors leave the feed where it was. */
START_TEST(test_feed_seek) {
    enum { N = 50, BS = 7, PER_EPOCH = 8 };
    dt_sparse_set s;
    feed_set(&s, N, entries_varied);
    dt_sparse_feed moved;
    ck_assert_int_eq(dt_sparse_feed_init(&moved, &s, 11, 1, NULL), 0);
    for (int64_t k = 0; k <= 3 * PER_EPOCH + 1; k++) {
        dt_sparse_feed drawn, sought;
        ck_assert_int_eq(dt_sparse_feed_init(&drawn, &s, 11, 1, NULL), 0);
        ck_assert_int_eq(dt_sparse_feed_init(&sought, &s, 11, 1, NULL), 0);
        dt_sparse_batch a, b;
        for (int64_t i = 0; i < k; i++)
            ck_assert_int_eq(dt_sparse_feed_next(&drawn, BS, &a, NULL), 0);
        dt_err err;
        dt_err_clear(&err);
        ck_assert_msg(dt_sparse_feed_seek(&sought, BS, k, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(sought.epoch, k / PER_EPOCH);
        ck_assert_int_eq(dt_sparse_feed_seek(&moved, BS, k, NULL), 0);
        for (int next = 0; next < PER_EPOCH + 2; next++) { /* past the next epoch's start */
            ck_assert_int_eq(dt_sparse_feed_next(&drawn, BS, &a, NULL), 0);
            ck_assert_int_eq(dt_sparse_feed_next(&sought, BS, &b, NULL), 0);
            ck_assert_int_eq(a.rows, b.rows);
            for (int r = 0; r < a.rows; r++) {
                ck_assert_msg(a.y[r] == b.y[r], "step %lld row %d: drawn %g, sought %g",
                              (long long)(k + next), r, (double)a.y[r], (double)b.y[r]);
                assert_row_is(&b, r, &s, (int64_t)a.y[r]);
            }
            ck_assert_int_eq(dt_sparse_feed_next(&moved, BS, &b, NULL), 0);
            for (int r = 0; r < a.rows; r++)
                assert_row_is(&b, r, &s, (int64_t)a.y[r]);
        }
        dt_sparse_feed_deinit(&drawn);
        dt_sparse_feed_deinit(&sought);
    }
    const int64_t pos = moved.pos;
    const int epoch = moved.epoch;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_sparse_feed_seek(&moved, 0, 3, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "seek"));
    ck_assert_int_eq(dt_sparse_feed_seek(&moved, BS, -1, NULL), DT_EINVAL);
    ck_assert_int_eq(
        dt_sparse_feed_seek(&moved, BS, (int64_t)PER_EPOCH * INT_MAX + PER_EPOCH, NULL), DT_EINVAL);
    ck_assert_int_eq(moved.pos, pos);
    ck_assert_int_eq(moved.epoch, epoch);
    dt_sparse_feed_deinit(&moved);
    dt_sparse_set_deinit(&s);
}
END_TEST

/* The order of a sparse shard is the order of a dense data set's shard of
 * as many examples (lib/data.h's rule): a dense and a sparse job on one
 * file take the same batches. The dense "line" source's example i has x_i
 * = -1 + 2 i / (n - 1), which names it. */
START_TEST(test_feed_order_is_dense_order) {
    enum { N = 40, SHARDS = 3 };
    for (int shard = 0; shard < SHARDS; shard++) {
        dt_data_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.source = DT_DATA_LINE;
        cfg.num_examples = N;
        dt_data_needs needs = {.num_features = 1, .label_kind = DT_LABEL_REAL};
        dt_dataset *ds = NULL;
        dt_err err;
        dt_err_clear(&err);
        ck_assert_msg(dt_data_open(&cfg, &needs, 5, shard, SHARDS, &ds, &err) == 0, "%s", err.msg);
        const int64_t size = dt_data_size(ds);
        dt_sparse_set s;
        feed_set(&s, size, entries_varied);
        dt_sparse_feed f;
        ck_assert_int_eq(dt_sparse_feed_init(&f, &s, 5, shard, NULL), 0);
        for (int epoch = 0; epoch < 3; epoch++) {
            int64_t sparse[N];
            feed_epoch(&f, 4, sparse);
            for (int64_t k = 0; k < size;) {
                dt_batch b;
                ck_assert_int_eq(dt_data_next(ds, 4, &b, NULL), 0);
                for (int r = 0; r < b.rows; r++, k++) {
                    const int64_t i = llround(((double)b.x[r] + 1.0) * (N - 1) / 2.0);
                    ck_assert_int_eq(i % SHARDS, shard);
                    ck_assert_msg(sparse[k] == i / SHARDS,
                                  "shard %d epoch %d position %lld: sparse row %lld, dense %lld",
                                  shard, epoch, (long long)k, (long long)sparse[k],
                                  (long long)(i / SHARDS));
                }
            }
            ck_assert_int_eq(dt_data_epoch(ds), epoch + 1);
        }
        dt_sparse_feed_deinit(&f);
        dt_sparse_set_deinit(&s);
        dt_data_free(ds);
    }
}
END_TEST

START_TEST(test_feed_memory) {
    dt_sparse_set s;
    feed_set(&s, 30, entries_three);
    dt_sparse_feed f;
    dt_sparse_batch b;
    dt_err err;
    /* Out of memory at each allocation of the start and of a first batch:
     * an error, the feed usable afterwards, and nothing leaked (ASan). */
    for (long n = 1;; n++) {
        dt_err_clear(&err);
        dt_alloc_fail_at(n, 0);
        int rc = dt_sparse_feed_init(&f, &s, 3, 0, &err);
        if (rc == 0) rc = dt_sparse_feed_next(&f, 8, &b, &err);
        const long failed = dt_alloc_failed();
        dt_alloc_fail_at(0, 0);
        if (failed == 0) {
            ck_assert_int_eq(rc, 0);
            dt_sparse_feed_deinit(&f);
            break;
        }
        ck_assert_int_eq(rc, DT_ENOMEM);
        ck_assert_ptr_nonnull(strstr(err.msg, "no memory"));
        if (f.set) { /* the start went through: the batch failed */
            ck_assert_int_eq(f.pos, 0);
            ck_assert_int_eq(dt_sparse_feed_next(&f, 8, &b, NULL), 0);
            ck_assert_int_eq(f.pos, 8);
        }
        dt_sparse_feed_deinit(&f);
    }
    /* Rows of one size: once the first batch has sized the buffers, no
     * step allocates, the short last batch and the reshuffles included. */
    ck_assert_int_eq(dt_sparse_feed_init(&f, &s, 3, 0, NULL), 0);
    ck_assert_int_eq(dt_sparse_feed_next(&f, 8, &b, NULL), 0);
    dt_alloc_fail_at(0, 0);
    for (int step = 0; step < 20; step++) /* 5 epochs of 8 + 8 + 8 + 6 rows */
        ck_assert_int_eq(dt_sparse_feed_next(&f, 8, &b, NULL), 0);
    ck_assert_int_eq(dt_alloc_count(), 0);
    ck_assert_int_eq(f.epoch, 5);
    ck_assert_int_eq(f.pos, 8);
    dt_sparse_feed_deinit(&f);
    /* An empty set has no order; one past 2^32 - 1 rows is refused before
     * its arrays are read. */
    dt_sparse_set empty = {0}, huge = {.rows = (int64_t)1 << 32};
    ck_assert_int_eq(dt_sparse_feed_init(&f, &empty, 3, 0, &err), DT_EINVAL);
    ck_assert_ptr_null(f.order);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_sparse_feed_init(&f, &huge, 3, 0, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "4294967296 rows"));
    dt_sparse_set_deinit(&s);
}
END_TEST

Suite *sparse_suite(void) {
    Suite *s = suite_create("sparse");
    TCase *tc = tcase_create("sparse");
    tcase_add_unchecked_fixture(tc, dt_test_tmp_fixture, dt_test_tmp_end);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_batch_check_and_index);
    tcase_add_test(tc, test_criteo_read);
    tcase_add_test(tc, test_criteo_unlabeled_and_shards);
    tcase_add_test(tc, test_criteo_errors);
    tcase_add_test(tc, test_libsvm_large_indices);
    tcase_add_test(tc, test_feed_epochs);
    tcase_add_test(tc, test_feed_seek);
    tcase_add_test(tc, test_feed_order_is_dense_order);
    tcase_add_test(tc, test_feed_memory);
    suite_add_tcase(s, tc);
    return s;
}
