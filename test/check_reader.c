/*
 * reader suite: csv, libsvm and idx parsed from the fixtures in
 * test/data/readers with every value checked; gzip copies read alike; every
 * kind of bad input gives its code and a message naming the file and the
 * line (or record); skip_bad_rows counts and logs; the memory bound; and,
 * when the Fashion-MNIST files are installed, the real 10k test set. Files
 * without labels (DT_LABELS_NONE) read to the same features as with them,
 * with y NULL; their bad layouts and rows are named; dt_reader_detect_labels
 * tells the two layouts apart, or says why it cannot; dt_reader_infer reads
 * F and K from a training file, or says why the labels do not tell K.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "log.h"
#include "proc.h"
#include "reader.h"
#include "suites.h"

/* ---- helpers -------------------------------------------------------------- */

/* A fixture's path: $DT_TEST_DATA (default test/data, from the repository's
 * top, where the runner starts) + "/readers/" + name. */
static void fixture(char *buf, size_t cap, const char *name) {
    const char *root = getenv("DT_TEST_DATA");
    snprintf(buf, cap, "%s/readers/%s", root && *root ? root : "test/data", name);
    struct stat st;
    ck_assert_msg(stat(buf, &st) == 0, "fixture %s: %s (run from the repository's top)", buf,
                  strerror(errno));
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static void write_text(const char *path, const char *text) {
    write_bytes(path, text, strlen(text));
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    size_t len = 0;
    char *data = dt_test_read_file(path, &len);
    ck_assert_msg(data != NULL, "read %s", path);
    *n = len;
    return (unsigned char *)data;
}

/* Writes a gzip copy of src to dst with zlib. */
static void gzip_copy(const char *src, const char *dst) {
    size_t n;
    unsigned char *data = read_bytes(src, &n);
    gzFile gz = gzopen(dst, "wb9");
    ck_assert_ptr_nonnull(gz);
    if (n > 0) ck_assert_int_eq(gzwrite(gz, data, (unsigned)n), (int)n);
    ck_assert_int_eq(gzclose(gz), Z_OK);
    free(data);
}

static void path_in(char *buf, size_t cap, const char *dir, const char *name) {
    snprintf(buf, cap, "%s/%s", dir, name);
}

static dt_reader_params params(int F, dt_label_kind kind, int K, const char *label_column) {
    dt_reader_params p;
    memset(&p, 0, sizeof p);
    p.num_features = F;
    p.label_kind = kind;
    p.num_classes = K;
    p.label_column = label_column;
    return p;
}

static void expect_err(int rc, const dt_err *err, int code, const char *want) {
    ck_assert_msg(rc == code, "rc %d (%s), want %d (%s); msg \"%s\"", rc, dt_err_name(rc), code,
                  dt_err_name(code), err->msg);
    ck_assert_int_eq(err->code, code);
    ck_assert_msg(strstr(err->msg, want) != NULL, "want \"%s\" in \"%s\"", want, err->msg);
}

static void assert_same_table(const dt_reader_table *a, const dt_reader_table *b) {
    ck_assert_int_eq(a->rows, b->rows);
    ck_assert_int_eq(a->cols, b->cols);
    ck_assert_int_eq(a->skipped, b->skipped);
    ck_assert_int_eq(memcmp(a->x, b->x, (size_t)a->rows * (size_t)a->cols * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(a->y, b->y, (size_t)a->rows * sizeof(float)), 0);
}

/* ---- good files ----------------------------------------------------------- */

/* small.csv: header "x1", y ,x2,x3 with CRLF endings, a quoted field, spaces
 * around fields and an empty line. */
START_TEST(test_csv_values) {
    char path[1024];
    fixture(path, sizeof path, "small.csv");
    dt_reader_params p = params(3, DT_LABEL_CLASS, 3, "y");
    dt_reader_table t;
    dt_err err = {0};
    ck_assert_msg(dt_reader_csv(path, &p, &t, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(t.rows, 3);
    ck_assert_int_eq(t.cols, 3);
    ck_assert_int_eq(t.skipped, 0);
    static const float want_x[9] = {1.5f, 2, -3, 0.25f, 4, 0.5f, -1, 0, 1000};
    static const float want_y[3] = {0, 1, 2};
    for (int k = 0; k < 9; k++)
        ck_assert_float_eq(t.x[k], want_x[k]);
    for (int k = 0; k < 3; k++)
        ck_assert_float_eq(t.y[k], want_y[k]);

    /* The same column by index. */
    dt_reader_table by_index;
    p.label_column = "1";
    ck_assert_msg(dt_reader_csv(path, &p, &by_index, &err) == 0, "%s", err.msg);
    assert_same_table(&t, &by_index);
    dt_reader_table_deinit(&by_index);

    /* Column 0 as a regression target: the features are the other three. */
    p = params(3, DT_LABEL_REAL, 0, "0");
    dt_reader_table reg;
    ck_assert_msg(dt_reader_csv(path, &p, &reg, &err) == 0, "%s", err.msg);
    static const float reg_x[9] = {0, 2, -3, 1, 4, 0.5f, 2, 0, 1000};
    static const float reg_y[3] = {1.5f, 0.25f, -1};
    for (int k = 0; k < 9; k++)
        ck_assert_float_eq(reg.x[k], reg_x[k]);
    for (int k = 0; k < 3; k++)
        ck_assert_float_eq(reg.y[k], reg_y[k]);
    dt_reader_table_deinit(&reg);
    dt_reader_table_deinit(&t);
    ck_assert_ptr_null(t.x);
    dt_reader_table_deinit(NULL);
}
END_TEST

/* small.libsvm: comments, a qid, -1/+1 labels, a tab, an empty line. */
START_TEST(test_libsvm_values) {
    char path[1024];
    fixture(path, sizeof path, "small.libsvm");
    dt_reader_params p = params(4, DT_LABEL_CLASS, 2, NULL);
    p.svm_signed_labels = 1; /* the logistic model */
    dt_reader_table t;
    dt_err err = {0};
    ck_assert_msg(dt_reader_libsvm(path, &p, &t, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(t.rows, 4);
    ck_assert_int_eq(t.cols, 4);
    static const float want_x[16] = {0.5f, 0, -2, 0, 0, 1.25f, 0, 0, 1, 2, 3, 4, 0, 0, 0, 7};
    static const float want_y[4] = {1, 0, 1, 0};
    for (int k = 0; k < 16; k++)
        ck_assert_float_eq(t.x[k], want_x[k]);
    for (int k = 0; k < 4; k++)
        ck_assert_float_eq(t.y[k], want_y[k]);
    dt_reader_table_deinit(&t);

    /* Without the svmlight convention (softmax), -1 is not a class. */
    p.svm_signed_labels = 0;
    memset(&err, 0, sizeof err);
    int rc = dt_reader_libsvm(path, &p, &t, &err);
    expect_err(rc, &err, DT_ECONFIG, "small.libsvm:3: label -1 is not a class of 0..1");
    ck_assert_ptr_null(t.x);

    /* Regression: labels are taken as they are. */
    p = params(4, DT_LABEL_REAL, 0, NULL);
    dt_err_clear(&err);
    ck_assert_msg(dt_reader_libsvm(path, &p, &t, &err) == 0, "%s", err.msg);
    ck_assert_float_eq(t.y[1], -1.0f);
    ck_assert_float_eq(t.y[2], 1.0f);
    dt_reader_table_deinit(&t);
}
END_TEST

/* small-*-idx*-ubyte: 3 images of 2 x 3, pixel j of image i is 40 i + j
 * (image 2: 250..255); labels 7, 0, 9. */
START_TEST(test_idx_values) {
    char images[1024], labels[1024];
    fixture(images, sizeof images, "small-images-idx3-ubyte");
    fixture(labels, sizeof labels, "small-labels-idx1-ubyte");
    dt_reader_params p = params(6, DT_LABEL_CLASS, 10, NULL);
    dt_reader_table t;
    dt_err err = {0};
    ck_assert_msg(dt_reader_idx(images, labels, &p, &t, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(t.rows, 3);
    ck_assert_int_eq(t.cols, 6);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 6; j++)
            ck_assert_float_eq(t.x[i * 6 + j], (float)(40 * i + j));
    for (int j = 0; j < 6; j++)
        ck_assert_float_eq(t.x[12 + j], (float)(250 + j));
    ck_assert_float_eq(t.y[0], 7);
    ck_assert_float_eq(t.y[1], 0);
    ck_assert_float_eq(t.y[2], 9);
    dt_reader_table_deinit(&t);

    /* By format, as the data module calls it. */
    ck_assert_msg(dt_reader_load(DT_READER_IDX, images, labels, &p, &t, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(t.rows, 3);
    dt_reader_table_deinit(&t);
    expect_err(dt_reader_load(DT_READER_IDX, images, "", &p, &t, &err), &err, DT_EINVAL,
               "idx images need a labels file");
    dt_err_clear(&err);
    expect_err(dt_reader_load((dt_reader_format)7, images, NULL, &p, &t, &err), &err, DT_EINVAL,
               "reader: unknown format 7");
}
END_TEST

/* Every fixture gzipped with zlib reads to the very same table. */
START_TEST(test_gzip_same) {
    char *dir = dt_test_tempdir();
    ck_assert_ptr_nonnull(dir);
    char src[1024], gz[1024], src2[1024], gz2[1024];
    dt_err err = {0};
    dt_reader_table plain, packed;

    fixture(src, sizeof src, "small.csv");
    path_in(gz, sizeof gz, dir, "small.csv.gz");
    gzip_copy(src, gz);
    dt_reader_params p = params(3, DT_LABEL_CLASS, 3, "y");
    ck_assert_msg(dt_reader_csv(src, &p, &plain, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_reader_csv(gz, &p, &packed, &err) == 0, "%s", err.msg);
    assert_same_table(&plain, &packed);
    dt_reader_table_deinit(&plain);
    dt_reader_table_deinit(&packed);

    fixture(src, sizeof src, "small.libsvm");
    path_in(gz, sizeof gz, dir, "small.libsvm.gz");
    gzip_copy(src, gz);
    p = params(4, DT_LABEL_CLASS, 2, NULL);
    p.svm_signed_labels = 1;
    ck_assert_msg(dt_reader_libsvm(src, &p, &plain, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_reader_libsvm(gz, &p, &packed, &err) == 0, "%s", err.msg);
    assert_same_table(&plain, &packed);
    dt_reader_table_deinit(&plain);
    dt_reader_table_deinit(&packed);

    fixture(src, sizeof src, "small-images-idx3-ubyte");
    fixture(src2, sizeof src2, "small-labels-idx1-ubyte");
    path_in(gz, sizeof gz, dir, "images.gz");
    path_in(gz2, sizeof gz2, dir, "labels.gz");
    gzip_copy(src, gz);
    gzip_copy(src2, gz2);
    p = params(6, DT_LABEL_CLASS, 10, NULL);
    ck_assert_msg(dt_reader_idx(src, src2, &p, &plain, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_reader_idx(gz, gz2, &p, &packed, &err) == 0, "%s", err.msg);
    assert_same_table(&plain, &packed);
    /* A gzip and a plain file mixed. */
    dt_reader_table mixed;
    ck_assert_msg(dt_reader_idx(gz, src2, &p, &mixed, &err) == 0, "%s", err.msg);
    assert_same_table(&plain, &mixed);
    dt_reader_table_deinit(&mixed);
    dt_reader_table_deinit(&plain);
    dt_reader_table_deinit(&packed);
    dt_test_tempdir_free(dir);
}
END_TEST

/* A csv row far longer than the reader's first line buffer, and a file
 * without a final newline. */
START_TEST(test_csv_long_lines) {
    enum { F = 30000, ROWS = 3 };
    char *dir = dt_test_tempdir();
    ck_assert_ptr_nonnull(dir);
    char path[1024];
    path_in(path, sizeof path, dir, "wide.csv");
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "label");
    for (int j = 0; j < F; j++)
        fprintf(f, ",f%d", j);
    for (int i = 0; i < ROWS; i++) {
        fprintf(f, "\n%d", i);
        for (int j = 0; j < F; j++)
            fprintf(f, ",%d.25", (i * 7 + j) % 1000);
    }
    ck_assert_int_eq(fclose(f), 0);
    dt_reader_params p = params(F, DT_LABEL_REAL, 0, "label");
    dt_reader_table t;
    dt_err err = {0};
    ck_assert_msg(dt_reader_csv(path, &p, &t, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(t.rows, ROWS);
    for (int i = 0; i < ROWS; i++) {
        ck_assert_float_eq(t.y[i], (float)i);
        for (int j = 0; j < F; j += 997)
            ck_assert_float_eq(t.x[(size_t)i * F + j], (float)((i * 7 + j) % 1000) + 0.25f);
        ck_assert_float_eq(t.x[(size_t)i * F + F - 1], (float)((i * 7 + F - 1) % 1000) + 0.25f);
    }
    dt_reader_table_deinit(&t);
    dt_test_tempdir_free(dir);
}
END_TEST

/* ---- bad input ------------------------------------------------------------ */

typedef struct {
    const char *text;
    int code;
    const char *want; /* in the message, after the file's directory */
} bad_case;

static void run_text_cases(dt_reader_format format, const bad_case *cases, int count,
                           const dt_reader_params *p) {
    char *dir = dt_test_tempdir();
    ck_assert_ptr_nonnull(dir);
    for (int c = 0; c < count; c++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/bad.%s", dir, format == DT_READER_CSV ? "csv" : "libsvm");
        write_text(path, cases[c].text);
        dt_reader_table t = {.rows = 99};
        dt_err err = {0};
        int rc = dt_reader_load(format, path, NULL, p, &t, &err);
        ck_assert_msg(rc == cases[c].code, "case %d (%s): rc %d, msg \"%s\"", c, cases[c].want, rc,
                      err.msg);
        ck_assert_msg(strstr(err.msg, cases[c].want) != NULL, "case %d: want \"%s\" in \"%s\"", c,
                      cases[c].want, err.msg);
        ck_assert_msg(strncmp(err.msg, path, strlen(path)) == 0, "case %d: no path in \"%s\"", c,
                      err.msg);
        ck_assert_int_eq(t.rows, 0);
        ck_assert_ptr_null(t.x);
        ck_assert_ptr_null(t.y);
    }
    dt_test_tempdir_free(dir);
}

START_TEST(test_csv_errors) {
    static const bad_case cases[] = {
        {"", DT_EINVAL, "bad.csv: empty file: a header row is required"},
        {"\n  \n", DT_EINVAL, "bad.csv: empty file: a header row is required"},
        {"y,a,b,c\n", DT_EINVAL, "bad.csv: no examples"},
        {"y,a,b\n0,1,2\n", DT_ECONFIG,
         "bad.csv:1: the header has 2 feature columns (3 columns less the label), but "
         "\"features\" is 3"},
        {"y,a,b,c,d\n", DT_ECONFIG, "bad.csv:1: the header has 4 feature columns"},
        {"z,a,b,c\n0,1,2,3\n", DT_ECONFIG, "bad.csv:1: no column named \"y\" in the header"},
        {"y,a,y,c\n0,1,2,3\n", DT_EINVAL,
         "bad.csv:1: label column \"y\" appears twice in the header (columns 0 and 2)"},
        {"y,\"a,b\",c\n", DT_EINVAL, "bad.csv:1: header column 1: quotes inside a field"},
        {"a,y,b,c\n1,0,2,3\n4,1,abc,6\n", DT_EINVAL,
         "bad.csv:3: column \"b\": not a number: \"abc\""},
        {"a,y,b,c\n1,0,2,3\n4,1,5,nan\n", DT_EINVAL,
         "bad.csv:3: column \"c\": not a finite number: \"nan\""},
        {"a,y,b,c\ninf,0,2,3\n", DT_EINVAL,
         "bad.csv:2: column \"a\": not a finite number: \"inf\""},
        {"a,y,b,c\n1,0,-1e999,3\n", DT_EINVAL, "bad.csv:2: column \"b\": not a finite number"},
        {"a,y,b,c\n1,0,2,1e39\n", DT_EINVAL, "bad.csv:2: column \"c\": out of float range"},
        {"a,y,b,c\n1,0,,3\n", DT_EINVAL, "bad.csv:2: column \"b\": empty field"},
        {"a,y,b,c\n1,0,2 3,3\n", DT_EINVAL, "bad.csv:2: column \"b\": not a number: \"2 3\""},
        {"a,y,b,c\n1,0,2,3\n\n1,0,2\n", DT_EINVAL,
         "bad.csv:4: 3 fields, but the header has 4: column \"c\" is missing"},
        {"a,y,b,c\n1,0,2,3,4\n", DT_EINVAL,
         "bad.csv:2: 5 fields, but the header has 4: extra fields after column \"c\""},
        {"a,y,b,c\n1,3,2,3\n", DT_ECONFIG,
         "bad.csv:2: column \"y\": label 3 is not a class of 0..2: \"classes\" is 3"},
        {"a,y,b,c\n1,-1,2,3\n", DT_ECONFIG, "bad.csv:2: column \"y\": label -1 is not a class"},
        {"a,y,b,c\n1,1.5,2,3\n", DT_ECONFIG,
         "bad.csv:2: column \"y\": label 1.5 is not a whole number"},
        {"a,y,b,c\n1,0,\"2,3\n", DT_EINVAL, "bad.csv:2: column \"b\": quotes inside a field"},
        {"a,y,b,c\n1,0,2\"\"x,3\n", DT_EINVAL, "bad.csv:2: column \"b\": quotes inside a field"},
    };
    dt_reader_params p = params(3, DT_LABEL_CLASS, 3, "y");
    run_text_cases(DT_READER_CSV, cases, (int)(sizeof cases / sizeof cases[0]), &p);

    /* The label column by index. */
    static const bad_case by_index[] = {
        {"a,b,c,d\n1,2,3,4\n", DT_ECONFIG,
         "bad.csv:1: label column 4 is out of range: the header has 4 columns (0..3)"},
    };
    p.label_column = "4";
    run_text_cases(DT_READER_CSV, by_index, 1, &p);
    static const bad_case huge_index[] = {
        {"a,b,c,d\n1,2,3,4\n", DT_ECONFIG, "bad.csv:1: label column 99999999999999999999 is out"},
    };
    p.label_column = "99999999999999999999";
    run_text_cases(DT_READER_CSV, huge_index, 1, &p);
    p.label_column = "";
    static const bad_case empty_label[] = {
        {"a,b,c,d\n1,2,3,4\n", DT_EINVAL, "bad.csv: \"label_column\" is empty"},
    };
    run_text_cases(DT_READER_CSV, empty_label, 1, &p);

    /* The NUL case's text stops at the NUL for strlen: write it by hand. */
    char *dir = dt_test_tempdir();
    char path[1024];
    path_in(path, sizeof path, dir, "nul.csv");
    static const char nul[] = "a,y,b,c\n1,1,2,3\n1,1,2\0,3\n";
    write_bytes(path, nul, sizeof nul - 1);
    p.label_column = "y";
    dt_reader_table t;
    dt_err err = {0};
    expect_err(dt_reader_csv(path, &p, &t, &err), &err, DT_EINVAL,
               "nul.csv:3: NUL byte in a text line");
    dt_test_tempdir_free(dir);
}
END_TEST

START_TEST(test_libsvm_errors) {
    static const bad_case cases[] = {
        {"", DT_EINVAL, "bad.libsvm: no examples"},
        {"# only a comment\n\n", DT_EINVAL, "bad.libsvm: no examples"},
        {"1 1:1\n0 0:1\n", DT_EINVAL, "bad.libsvm:2: feature index 0 is out of range 1..4"},
        {"1 5:1\n", DT_ECONFIG,
         "bad.libsvm:1: feature index 5 is out of range 1..4: \"features\" is 4"},
        {"1 -2:1\n", DT_EINVAL, "bad.libsvm:1: feature index -2 is out of range 1..4"},
        {"1 3:1 2:1\n", DT_EINVAL, "bad.libsvm:1: feature index 2 after 3: indices must increase"},
        {"1 2:1 2:1\n", DT_EINVAL, "bad.libsvm:1: feature index 2 after 2: indices must increase"},
        {"1 x:1\n", DT_EINVAL, "bad.libsvm:1: feature index \"x\" is not an integer"},
        {"1 2.5:1\n", DT_EINVAL, "bad.libsvm:1: feature index \"2.5\" is not an integer"},
        {"1 2:abc\n", DT_EINVAL, "bad.libsvm:1: feature 2: not a number: \"abc\""},
        {"1 2:\n", DT_EINVAL, "bad.libsvm:1: feature 2: empty field"},
        {"1 2:nan\n", DT_EINVAL, "bad.libsvm:1: feature 2: not a finite number"},
        {"1 2:1e40\n", DT_EINVAL, "bad.libsvm:1: feature 2: out of float range"},
        {"1 2\n", DT_EINVAL, "bad.libsvm:1: \"2\" is not index:value"},
        {"1 2:1 qid:4\n", DT_EINVAL, "bad.libsvm:1: feature index \"qid\" is not an integer"},
        {"1 qid:x 2:1\n", DT_EINVAL, "bad.libsvm:1: bad query id \"qid:x\""},
        {"yes 1:1\n", DT_EINVAL, "bad.libsvm:1: label: not a number: \"yes\""},
        {"inf 1:1\n", DT_EINVAL, "bad.libsvm:1: label: not a finite number"},
        {"0 1:1\n\n# c\n2 1:1\n", DT_ECONFIG,
         "bad.libsvm:4: label 2 is not a class of 0..1 (or -1): \"classes\" is 2"},
        {"-2 1:1\n", DT_ECONFIG, "bad.libsvm:1: label -2 is not a class of 0..1 (or -1)"},
        {"0.5 1:1\n", DT_ECONFIG, "bad.libsvm:1: label 0.5 is not a whole number"},
    };
    dt_reader_params p = params(4, DT_LABEL_CLASS, 2, NULL);
    p.svm_signed_labels = 1;
    run_text_cases(DT_READER_LIBSVM, cases, (int)(sizeof cases / sizeof cases[0]), &p);

    /* Regression takes any finite label, still not a NaN. */
    static const bad_case real[] = {
        {"nan 1:1\n", DT_EINVAL, "bad.libsvm:1: label: not a finite number: \"nan\""},
    };
    p = params(4, DT_LABEL_REAL, 0, NULL);
    run_text_cases(DT_READER_LIBSVM, real, 1, &p);
    char *dir = dt_test_tempdir();
    char path[1024];
    path_in(path, sizeof path, dir, "real.libsvm");
    write_text(path, "-3.25 4:1\n1e30\n");
    dt_reader_table t;
    dt_err err = {0};
    ck_assert_msg(dt_reader_libsvm(path, &p, &t, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(t.rows, 2);
    ck_assert_float_eq(t.y[0], -3.25f);
    ck_assert_float_eq(t.y[1], 1e30f);
    ck_assert_float_eq(t.x[3], 1.0f);
    for (int j = 4; j < 8; j++)
        ck_assert_float_eq(t.x[j], 0.0f); /* a row of no features */
    dt_reader_table_deinit(&t);
    dt_test_tempdir_free(dir);
}
END_TEST

/* Missing files, directories, and parameters the reader cannot work with. */
START_TEST(test_files_and_params) {
    char *dir = dt_test_tempdir();
    char path[1024], labels[1024];
    path_in(path, sizeof path, dir, "missing.csv");
    dt_reader_params p = params(3, DT_LABEL_CLASS, 3, "y");
    dt_reader_table t;
    dt_err err = {0};
    expect_err(dt_reader_csv(path, &p, &t, &err), &err, DT_ENOTFOUND, "missing.csv: open:");
    dt_err_clear(&err);
    expect_err(dt_reader_libsvm(path, &p, &t, &err), &err, DT_ENOTFOUND, "missing.csv: open:");
    dt_err_clear(&err);
    fixture(labels, sizeof labels, "small-labels-idx1-ubyte");
    p = params(6, DT_LABEL_CLASS, 10, NULL);
    expect_err(dt_reader_idx(path, labels, &p, &t, &err), &err, DT_ENOTFOUND, "missing.csv: open:");
    dt_err_clear(&err);
    char images[1024];
    fixture(images, sizeof images, "small-images-idx3-ubyte");
    expect_err(dt_reader_idx(images, path, &p, &t, &err), &err, DT_ENOTFOUND, "missing.csv: open:");
    dt_err_clear(&err);
    expect_err(dt_reader_csv(dir, &p, &t, &err), &err, DT_EINVAL, "is a directory");
    dt_err_clear(&err);

    p = params(0, DT_LABEL_REAL, 0, "y");
    expect_err(dt_reader_csv(images, &p, &t, &err), &err, DT_EINVAL,
               "\"features\" must be >= 1 (got 0)");
    dt_err_clear(&err);
    p = params(6, DT_LABEL_CLASS, 1, NULL);
    expect_err(dt_reader_idx(images, labels, &p, &t, &err), &err, DT_EINVAL,
               "\"classes\" must be >= 2 (got 1)");
    dt_test_tempdir_free(dir);
}
END_TEST

/* An idx file from its header fields and payload. */
static void write_idx(const char *path, uint32_t magic, const uint32_t *dims, int ndims,
                      const unsigned char *data, size_t n) {
    unsigned char head[16];
    uint32_t words[4] = {magic, 0, 0, 0};
    for (int d = 0; d < ndims; d++)
        words[1 + d] = dims[d];
    for (int w = 0; w < 1 + ndims; w++) {
        head[4 * w] = (unsigned char)(words[w] >> 24);
        head[4 * w + 1] = (unsigned char)(words[w] >> 16);
        head[4 * w + 2] = (unsigned char)(words[w] >> 8);
        head[4 * w + 3] = (unsigned char)words[w];
    }
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(head, 1, 4 + 4 * (size_t)ndims, f), 4 + 4 * (size_t)ndims);
    if (n) ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static void expect_idx_err(const char *images, const char *labels, const dt_reader_params *p,
                           int code, const char *want) {
    dt_reader_table t = {.rows = 5};
    dt_err err = {0};
    expect_err(dt_reader_idx(images, labels, p, &t, &err), &err, code, want);
    ck_assert_int_eq(t.rows, 0);
    ck_assert_ptr_null(t.x);
}

START_TEST(test_idx_errors) {
    char *dir = dt_test_tempdir();
    char img[1024], lab[1024], good_img[1024], good_lab[1024];
    path_in(img, sizeof img, dir, "img");
    path_in(lab, sizeof lab, dir, "lab");
    fixture(good_img, sizeof good_img, "small-images-idx3-ubyte");
    fixture(good_lab, sizeof good_lab, "small-labels-idx1-ubyte");
    dt_reader_params p = params(6, DT_LABEL_CLASS, 10, NULL);
    unsigned char pixels[18], labels[3] = {7, 0, 9};
    for (int k = 0; k < 18; k++)
        pixels[k] = (unsigned char)k;
    const uint32_t dims[3] = {3, 2, 3}, ldims[1] = {3};

    /* The two files swapped: each magic names what was expected. */
    expect_idx_err(good_lab, good_img, &p, DT_ECORRUPT,
                   "small-labels-idx1-ubyte: bad magic number: expected 0x00000803 (images: "
                   "unsigned bytes, 3 dimensions), got 0x00000801");
    expect_idx_err(good_img, good_img, &p, DT_ECORRUPT,
                   "small-images-idx3-ubyte: bad magic number: expected 0x00000801 (labels: "
                   "unsigned bytes, 1 dimensions), got 0x00000803");
    /* float data (type 0x0d) is not read. */
    write_idx(img, 0x00000d03, dims, 3, pixels, 18);
    expect_idx_err(img, good_lab, &p, DT_ECORRUPT, "expected 0x00000803");
    expect_idx_err(img, good_lab, &p, DT_ECORRUPT, "got 0x00000d03");

    /* Truncated: the header, the pixels, the labels. */
    write_bytes(img, "\0\0\x08", 3);
    expect_idx_err(img, good_lab, &p, DT_ECORRUPT,
                   "img: truncated header: expected 16 bytes, got 3");
    write_idx(img, 0x803, dims, 2, NULL, 0);
    expect_idx_err(img, good_lab, &p, DT_ECORRUPT,
                   "img: truncated header: expected 16 bytes, got 12");
    write_idx(img, 0x803, dims, 3, pixels, 15);
    expect_idx_err(img, good_lab, &p, DT_ECORRUPT, "img: truncated: expected 34 bytes, got 31");
    write_idx(img, 0x803, dims, 3, pixels, 0);
    expect_idx_err(img, good_lab, &p, DT_ECORRUPT, "img: truncated: expected 34 bytes, got 16");
    write_idx(lab, 0x801, ldims, 1, labels, 2);
    expect_idx_err(good_img, lab, &p, DT_ECORRUPT, "lab: truncated: expected 11 bytes, got 10");
    /* Trailing bytes. */
    write_idx(img, 0x803, dims, 3, (const unsigned char *)"0123456789abcdefghij", 20);
    expect_idx_err(img, good_lab, &p, DT_ECORRUPT,
                   "img: some bytes after the last record: "
                   "expected 34 bytes in all");
    write_idx(lab, 0x801, ldims, 1, (const unsigned char *)"\1\2\3\4", 4);
    expect_idx_err(good_img, lab, &p, DT_ECORRUPT, "lab: some bytes after the last record");

    /* Dimensions. */
    const uint32_t zero_rows[3] = {3, 0, 3};
    write_idx(img, 0x803, zero_rows, 3, NULL, 0);
    expect_idx_err(img, good_lab, &p, DT_ECORRUPT, "img: bad dimensions 3 x 0 x 3");
    p.num_features = 784;
    expect_idx_err(good_img, good_lab, &p, DT_ECONFIG,
                   "images of 2 x 3 = 6 features, but \"features\" is 784");
    p.num_features = 6;
    const uint32_t four[1] = {4};
    write_idx(lab, 0x801, four, 1, (const unsigned char *)"\1\2\3\4", 4);
    expect_idx_err(good_img, lab, &p, DT_EINVAL, "lab: 4 labels, but");
    expect_idx_err(good_img, lab, &p, DT_EINVAL, "small-images-idx3-ubyte has 3 images");
    const uint32_t none[3] = {0, 2, 3}, no_labels[1] = {0};
    write_idx(img, 0x803, none, 3, NULL, 0);
    write_idx(lab, 0x801, no_labels, 1, NULL, 0);
    expect_idx_err(img, lab, &p, DT_EINVAL, "img: no examples");

    /* Labels out of range name the record (0-based). */
    p.num_classes = 9;
    expect_idx_err(good_img, good_lab, &p, DT_ECONFIG,
                   "small-labels-idx1-ubyte: record 2: label 9 is not a class of 0..8: "
                   "\"classes\" is 9");

    /* A file claiming more than the bound is refused from its header alone:
     * 3,000,000 images of 28 x 28 are 2.35e9 values. */
    const uint32_t huge[3] = {3000000, 28, 28}, huge_n[1] = {3000000};
    write_idx(img, 0x803, huge, 3, pixels, 18);
    write_idx(lab, 0x801, huge_n, 1, labels, 3);
    p = params(784, DT_LABEL_CLASS, 10, NULL);
    expect_idx_err(img, lab, &p, DT_EINVAL,
                   "img: 3000000 images of 784 values pass the bound of 2147483648 values");

    /* A gzip stream cut short, and one damaged in the middle. */
    char gz[1024];
    path_in(gz, sizeof gz, dir, "img.gz");
    unsigned char big[16 + 600 * 6];
    for (size_t k = 0; k < sizeof big; k++)
        big[k] = (unsigned char)((k * 2654435761u) >> 13);
    const uint32_t many[3] = {600, 2, 3}, many_n[1] = {600};
    write_idx(img, 0x803, many, 3, big, 600 * 6);
    unsigned char many_labels[600] = {0};
    write_idx(lab, 0x801, many_n, 1, many_labels, 600);
    gzip_copy(img, gz);
    p = params(6, DT_LABEL_CLASS, 10, NULL);
    dt_reader_table t;
    dt_err err = {0};
    ck_assert_msg(dt_reader_idx(gz, lab, &p, &t, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(t.rows, 600);
    dt_reader_table_deinit(&t);
    size_t n;
    unsigned char *packed = read_bytes(gz, &n);
    ck_assert_uint_gt(n, 100);
    write_bytes(gz, packed, n / 2);
    expect_idx_err(gz, lab, &p, DT_ECORRUPT, "img.gz: truncated gzip stream");
    for (size_t k = 20; k < n - 10; k++)
        packed[k] ^= 0x5a;
    write_bytes(gz, packed, n);
    expect_idx_err(gz, lab, &p, DT_ECORRUPT, "img.gz: damaged gzip stream: ");
    dt_err err2 = {0};
    expect_err(dt_reader_idx(gz, lab, &p, &t, &err2), &err2, DT_ECORRUPT, "gzip");
    ck_assert_msg(strstr(err2.msg, "<fd") == NULL, "%s", err2.msg);
    free(packed);
    dt_test_tempdir_free(dir);
}
END_TEST

/* ---- skipping ------------------------------------------------------------- */

/* Runs fn with stderr going to a file, and returns what was written there. */
static char *capture_stderr(const char *dir, int (*fn)(void *), void *arg, int *rc) {
    char log[1024];
    path_in(log, sizeof log, dir, "stderr.log");
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    ck_assert_int_ge(saved, 0);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_ge(dup2(fd, STDERR_FILENO), 0);
    close(fd);
    *rc = fn(arg);
    fflush(stderr);
    ck_assert_int_ge(dup2(saved, STDERR_FILENO), 0);
    close(saved);
    char *text = dt_test_read_file(log, NULL);
    ck_assert_ptr_nonnull(text);
    return text;
}

typedef struct {
    dt_reader_format format;
    const char *path, *labels;
    dt_reader_params p;
    dt_reader_table t;
    dt_err err;
} load_call;

static int do_load(void *arg) {
    load_call *c = arg;
    return dt_reader_load(c->format, c->path, c->labels, &c->p, &c->t, &c->err);
}

static int count_of(const char *text, const char *needle) {
    int n = 0;
    for (const char *s = text; (s = strstr(s, needle)) != NULL; s += strlen(needle))
        n++;
    return n;
}

START_TEST(test_skip_bad_rows) {
    dt_log_set_level(DT_LOG_WARN);
    char *dir = dt_test_tempdir();
    char path[1024];

    /* csv: two bad rows of five, both counted and logged once. */
    path_in(path, sizeof path, dir, "skip.csv");
    write_text(path, "a,y,b\n1,0,2\n3,1,x\n5,0,6\n7,0\n9,1,10\n");
    load_call c = {.format = DT_READER_CSV, .path = path, .p = params(2, DT_LABEL_CLASS, 2, "y")};
    c.p.skip_bad_rows = 1;
    int rc;
    char *log = capture_stderr(dir, do_load, &c, &rc);
    ck_assert_msg(rc == 0, "%s", c.err.msg);
    ck_assert_int_eq(c.t.rows, 3);
    ck_assert_int_eq(c.t.skipped, 2);
    static const float want_x[6] = {1, 2, 5, 6, 9, 10}, want_y[3] = {0, 0, 1};
    for (int k = 0; k < 6; k++)
        ck_assert_float_eq(c.t.x[k], want_x[k]);
    for (int k = 0; k < 3; k++)
        ck_assert_float_eq(c.t.y[k], want_y[k]);
    ck_assert_int_eq(count_of(log, "skipped"), 1);
    ck_assert_msg(strstr(log, "skip.csv: skipped 2 malformed rows") != NULL, "log: %s", log);
    ck_assert_msg(strstr(log, "skip.csv:3: column \"b\": not a number") != NULL, "log: %s", log);
    dt_reader_table_deinit(&c.t);
    free(log);

    /* Without skipping the first bad row fails the read. */
    c.p.skip_bad_rows = 0;
    dt_err_clear(&c.err);
    expect_err(do_load(&c), &c.err, DT_EINVAL, "skip.csv:3:");

    /* A clean file logs nothing. */
    char clean[1024];
    fixture(clean, sizeof clean, "small.csv");
    load_call ok = {.format = DT_READER_CSV, .path = clean, .p = params(3, DT_LABEL_CLASS, 3, "y")};
    ok.p.skip_bad_rows = 1;
    log = capture_stderr(dir, do_load, &ok, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(ok.t.skipped, 0);
    ck_assert_msg(strstr(log, "skipped") == NULL, "log: %s", log);
    dt_reader_table_deinit(&ok.t);
    free(log);

    /* libsvm. */
    path_in(path, sizeof path, dir, "skip.libsvm");
    write_text(path, "1 1:1\n1 3:1\n0 2:2\n7 1:1\n");
    load_call s = {
        .format = DT_READER_LIBSVM, .path = path, .p = params(2, DT_LABEL_CLASS, 2, NULL)};
    s.p.skip_bad_rows = 1;
    log = capture_stderr(dir, do_load, &s, &rc);
    ck_assert_msg(rc == 0, "%s", s.err.msg);
    ck_assert_int_eq(s.t.rows, 2);
    ck_assert_int_eq(s.t.skipped, 2);
    ck_assert_float_eq(s.t.x[0], 1);
    ck_assert_float_eq(s.t.x[1], 0);
    ck_assert_float_eq(s.t.x[3], 2);
    ck_assert_msg(strstr(log, "skip.libsvm: skipped 2 malformed rows") != NULL, "log: %s", log);
    ck_assert_msg(strstr(log, "skip.libsvm:2: feature index 3 is out of range 1..2") != NULL,
                  "log: %s", log);
    dt_reader_table_deinit(&s.t);
    free(log);

    /* idx: a label out of range drops its image with it. */
    char img[1024], lab[1024];
    fixture(img, sizeof img, "small-images-idx3-ubyte");
    fixture(lab, sizeof lab, "small-labels-idx1-ubyte");
    load_call i = {.format = DT_READER_IDX,
                   .path = img,
                   .labels = lab,
                   .p = params(6, DT_LABEL_CLASS, 8, NULL)}; /* label 9 is out */
    i.p.skip_bad_rows = 1;
    log = capture_stderr(dir, do_load, &i, &rc);
    ck_assert_msg(rc == 0, "%s", i.err.msg);
    ck_assert_int_eq(i.t.rows, 2);
    ck_assert_int_eq(i.t.skipped, 1);
    ck_assert_float_eq(i.t.y[0], 7);
    ck_assert_float_eq(i.t.y[1], 0);
    ck_assert_float_eq(i.t.x[6], 40);
    ck_assert_msg(strstr(log, "small-images-idx3-ubyte: skipped 1 malformed rows") != NULL,
                  "log: %s", log);
    ck_assert_msg(strstr(log, "record 2: label 9") != NULL, "log: %s", log);
    dt_reader_table_deinit(&i.t);
    free(log);

    /* Nothing left: an error that says so. */
    path_in(path, sizeof path, dir, "allbad.csv");
    write_text(path, "a,y,b\n1,0,q\n1,5,2\n");
    load_call a = {.format = DT_READER_CSV, .path = path, .p = params(2, DT_LABEL_CLASS, 2, "y")};
    a.p.skip_bad_rows = 1;
    log = capture_stderr(dir, do_load, &a, &rc);
    expect_err(rc, &a.err, DT_EINVAL, "allbad.csv: no examples: all 2 rows were malformed");
    ck_assert_ptr_null(a.t.x);
    free(log);

    /* A bad header is not a row: it fails even with skipping. */
    write_text(path, "a,y\n1,0\n");
    dt_err_clear(&a.err);
    log = capture_stderr(dir, do_load, &a, &rc);
    expect_err(rc, &a.err, DT_ECONFIG, "allbad.csv:1: the header has 1 feature columns");
    free(log);
    dt_test_tempdir_free(dir);
}
END_TEST

/* N * F beyond max_values is refused while reading, before the memory. */
START_TEST(test_memory_bound) {
    char *dir = dt_test_tempdir();
    char path[1024];
    path_in(path, sizeof path, dir, "rows.csv");
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "y,a,b\n");
    for (int i = 0; i < 1000; i++)
        fprintf(f, "%d,%d,%d\n", i, i, -i);
    ck_assert_int_eq(fclose(f), 0);
    dt_reader_params p = params(2, DT_LABEL_REAL, 0, "y");
    dt_reader_table t;
    dt_err err = {0};
    p.max_values = 2000; /* exactly enough */
    ck_assert_msg(dt_reader_csv(path, &p, &t, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(t.rows, 1000);
    ck_assert_float_eq(t.x[2 * 999 + 1], -999.0f);
    dt_reader_table_deinit(&t);
    p.max_values = 1999;
    expect_err(dt_reader_csv(path, &p, &t, &err), &err, DT_EINVAL,
               "rows.csv: more than 999 examples of 2 features pass the bound of 1999 values");
    ck_assert_ptr_null(t.x);

    path_in(path, sizeof path, dir, "rows.libsvm");
    write_text(path, "1 1:1\n2 2:2\n3 1:3\n");
    p.max_values = 5;
    dt_err_clear(&err);
    expect_err(dt_reader_libsvm(path, &p, &t, &err), &err, DT_EINVAL,
               "rows.libsvm: more than 2 examples of 2 features pass the bound of 5 values");
    dt_test_tempdir_free(dir);
}
END_TEST

/* ---- the real thing ------------------------------------------------------- */

/* Fashion-MNIST's 10k test set, when it is installed. The directory is
 * $DT_FASHION_MNIST, else where the machines keep their data sets. */
START_TEST(test_fashion_mnist) {
    const char *root = getenv("DT_FASHION_MNIST");
    if (!root || !*root) root = "/usr/share/datasets/fashion-mnist";
    char train[1024], images[1024], labels[1024];
    snprintf(train, sizeof train, "%s/train-images-idx3-ubyte.gz", root);
    snprintf(images, sizeof images, "%s/t10k-images-idx3-ubyte.gz", root);
    snprintf(labels, sizeof labels, "%s/t10k-labels-idx1-ubyte.gz", root);
    struct stat st;
    if (stat(train, &st) != 0) {
        fprintf(stderr,
                "reader: Fashion-MNIST not found in %s; test_fashion_mnist passes "
                "without checking it\n",
                root);
        return;
    }
    dt_reader_params p = params(784, DT_LABEL_CLASS, 10, NULL);
    dt_reader_table t;
    dt_err err = {0};
    ck_assert_msg(dt_reader_idx(images, labels, &p, &t, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(t.rows, 10000);
    ck_assert_int_eq(t.cols, 784);
    int per_class[10] = {0};
    for (int i = 0; i < 10000; i++) {
        float y = t.y[i];
        ck_assert(y >= 0 && y <= 9 && y == floorf(y));
        per_class[(int)y]++;
    }
    for (int k = 0; k < 10; k++)
        ck_assert_int_eq(per_class[k], 1000);
    double sum = 0;
    float hi = 0, lo = 255;
    for (size_t k = 0; k < (size_t)10000 * 784; k++) {
        sum += t.x[k];
        hi = t.x[k] > hi ? t.x[k] : hi;
        lo = t.x[k] < lo ? t.x[k] : lo;
    }
    ck_assert_float_eq(lo, 0);
    ck_assert_float_eq(hi, 255);
    /* Fashion-MNIST's mean pixel is about 73 of 255 (0.286 scaled). */
    double mean = sum / (10000.0 * 784);
    ck_assert_msg(mean > 60 && mean < 85, "mean pixel %g", mean);
    dt_reader_table_deinit(&t);
}
END_TEST

/* ---- files without labels ------------------------------------------------ */

/* Reads text written to dir/name with p (labels as given). */
static void read_text(const char *dir, const char *name, const char *text, dt_reader_format format,
                      const dt_reader_params *p, dt_reader_table *t) {
    char path[1024];
    path_in(path, sizeof path, dir, name);
    write_text(path, text);
    dt_err err = {0};
    ck_assert_msg(dt_reader_load(format, path, NULL, p, t, &err) == 0, "%s: %s", name, err.msg);
}

static void assert_same_x(const dt_reader_table *labeled, const dt_reader_table *bare) {
    ck_assert_int_eq(labeled->labeled, 1);
    ck_assert_ptr_nonnull(labeled->y);
    ck_assert_int_eq(bare->labeled, 0);
    ck_assert_ptr_null(bare->y);
    ck_assert_int_eq(bare->rows, labeled->rows);
    ck_assert_int_eq(bare->cols, labeled->cols);
    ck_assert_int_eq(
        memcmp(bare->x, labeled->x, (size_t)bare->rows * (size_t)bare->cols * sizeof(float)), 0);
}

START_TEST(test_without_labels_values) {
    char *dir = dt_test_tempdir();
    ck_assert_ptr_nonnull(dir);
    dt_reader_table with, without;

    /* csv: the label column left out; its name or index no longer matters. */
    dt_reader_params p = params(3, DT_LABEL_CLASS, 3, "y");
    read_text(dir, "with.csv", "a,y,b,c\n1,0,2,3\n\n4,2,5.5,-6\n", DT_READER_CSV, &p, &with);
    p.labels = DT_LABELS_NONE;
    read_text(dir, "without.csv", "a, b ,c\r\n1,2,3\r\n\r\n4,\"5.5\",-6\r\n", DT_READER_CSV, &p,
              &without);
    assert_same_x(&with, &without);
    ck_assert_float_eq(without.x[4], 5.5f);
    dt_reader_table_deinit(&without);
    p.label_column = "";
    read_text(dir, "nolabel.csv", "a,b,c\n1,2,3\n4,5.5,-6\n", DT_READER_CSV, &p, &without);
    assert_same_x(&with, &without);
    dt_reader_table_deinit(&without);
    dt_reader_table_deinit(&with);

    /* libsvm: index:value first; a qid may lead; comments and empty lines. */
    p = params(4, DT_LABEL_CLASS, 2, NULL);
    read_text(dir, "with.libsvm", "1 qid:3 1:0.5 3:-2\n0 2:1.25\n1 4:7 # c\n", DT_READER_LIBSVM, &p,
              &with);
    p.labels = DT_LABELS_NONE;
    read_text(dir, "without.libsvm", "# none\nqid:3 1:0.5 3:-2\n\n\t2:1.25\n4:7 # c\n",
              DT_READER_LIBSVM, &p, &without);
    assert_same_x(&with, &without);
    dt_reader_table_deinit(&without);
    dt_reader_table_deinit(&with);

    /* idx: the images alone, with no labels file ("" or NULL). */
    char images[1024], labels[1024];
    fixture(images, sizeof images, "small-images-idx3-ubyte");
    fixture(labels, sizeof labels, "small-labels-idx1-ubyte");
    p = params(6, DT_LABEL_CLASS, 10, NULL);
    dt_err err = {0};
    ck_assert_msg(dt_reader_load(DT_READER_IDX, images, labels, &p, &with, &err) == 0, "%s",
                  err.msg);
    p.labels = DT_LABELS_NONE;
    ck_assert_msg(dt_reader_load(DT_READER_IDX, images, "", &p, &without, &err) == 0, "%s",
                  err.msg);
    assert_same_x(&with, &without);
    dt_reader_table_deinit(&without);
    ck_assert_msg(dt_reader_idx(images, NULL, &p, &without, &err) == 0, "%s", err.msg);
    assert_same_x(&with, &without);
    dt_reader_table_deinit(&without);
    dt_reader_table_deinit(&with);

    /* Gzip reads alike without labels too. */
    char plain[1024], gz[1024];
    path_in(plain, sizeof plain, dir, "without.csv");
    path_in(gz, sizeof gz, dir, "without.csv.gz");
    gzip_copy(plain, gz);
    p = params(3, DT_LABEL_CLASS, 3, "y");
    p.labels = DT_LABELS_NONE;
    ck_assert_msg(dt_reader_csv(plain, &p, &with, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_reader_csv(gz, &p, &without, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(without.rows, 2);
    ck_assert_ptr_null(without.y);
    ck_assert_int_eq(memcmp(with.x, without.x, 6 * sizeof(float)), 0);
    dt_reader_table_deinit(&without);
    dt_reader_table_deinit(&with);
    dt_test_tempdir_free(dir);
}
END_TEST

START_TEST(test_without_labels_errors) {
    static const bad_case csv[] = {
        {"a,y,b\n1,2,3\n", DT_EINVAL,
         "bad.csv:1: column 1 is \"y\", the label column, but the file is read without labels"},
        {"a,b,c,d\n1,2,3,4\n", DT_ECONFIG,
         "bad.csv:1: the header has 4 columns, but without labels there is one per feature and "
         "\"features\" is 3 (one more: a label column?)"},
        {"a,b\n1,2\n", DT_ECONFIG, "bad.csv:1: the header has 2 columns, but without labels"},
        {"a,b,c\n1,2,3\n1,2\n", DT_EINVAL,
         "bad.csv:3: 2 fields, but the header has 3: column \"c\" is missing"},
        {"a,b,c\n1,2,3,4\n", DT_EINVAL,
         "bad.csv:2: 4 fields, but the header has 3: extra fields after column \"c\""},
        {"a,b,c\n1,x,3\n", DT_EINVAL, "bad.csv:2: column \"b\": not a number: \"x\""},
        {"a,b,c\n1,,3\n", DT_EINVAL, "bad.csv:2: column \"b\": empty field"},
        {"a,b,c\n", DT_EINVAL, "bad.csv: no examples"},
    };
    dt_reader_params p = params(3, DT_LABEL_CLASS, 3, "y");
    p.labels = DT_LABELS_NONE;
    run_text_cases(DT_READER_CSV, csv, (int)(sizeof csv / sizeof csv[0]), &p);

    static const bad_case svm[] = {
        {"1:1\n1 2:1\n", DT_EINVAL,
         "bad.libsvm:2: \"1\" is not index:value (a label? the file is read without labels)"},
        {"1:1 qid:3\n", DT_EINVAL, "bad.libsvm:1: feature index \"qid\" is not an integer"},
        {"qid:x 1:1\n", DT_EINVAL, "bad.libsvm:1: bad query id \"qid:x\""},
        {"2:1 1:1\n", DT_EINVAL, "bad.libsvm:1: feature index 1 after 2: indices must increase"},
        {"5:1\n", DT_ECONFIG, "bad.libsvm:1: feature index 5 is out of range 1..4: \"features\""},
        {"1:z\n", DT_EINVAL, "bad.libsvm:1: feature 1: not a number: \"z\""},
    };
    p = params(4, DT_LABEL_CLASS, 2, NULL);
    p.labels = DT_LABELS_NONE;
    run_text_cases(DT_READER_LIBSVM, svm, (int)(sizeof svm / sizeof svm[0]), &p);

    /* With labels required, the layout without them is named as such. */
    static const bad_case svm_required[] = {
        {"1 1:1\n2:1 3:1\n", DT_EINVAL,
         "bad.libsvm:2: no label: the row starts with \"2:1\", not a label"},
        {"qid:1 1:1\n", DT_EINVAL, "bad.libsvm:1: no label: the row starts with \"qid:1\""},
    };
    p.labels = DT_LABELS_REQUIRED;
    run_text_cases(DT_READER_LIBSVM, svm_required, 2, &p);
    static const bad_case csv_required[] = {
        {"a,b,c\n1,2,3\n", DT_ECONFIG,
         "bad.csv:1: no column named \"y\" in the header (3 columns; a \"label_column\" of digits "
         "is an index; as many columns as features: a file without labels?)"},
    };
    p = params(3, DT_LABEL_CLASS, 3, "y");
    run_text_cases(DT_READER_CSV, csv_required, 1, &p);
    static const bad_case csv_index_required[] = {
        {"a,b,c\n1,2,3\n", DT_ECONFIG,
         "but \"features\" is 3; as many columns as features: a file without labels?"},
    };
    p.label_column = "0";
    run_text_cases(DT_READER_CSV, csv_index_required, 1, &p);

    /* idx: no labels file may come with images read without labels; one
     * must come with labels required. */
    char images[1024], labels[1024];
    fixture(images, sizeof images, "small-images-idx3-ubyte");
    fixture(labels, sizeof labels, "small-labels-idx1-ubyte");
    p = params(6, DT_LABEL_CLASS, 10, NULL);
    p.labels = DT_LABELS_NONE;
    expect_idx_err(images, labels, &p, DT_EINVAL,
                   "-labels-idx1-ubyte given, but the images are read without labels");
    p.labels = DT_LABELS_REQUIRED;
    expect_idx_err(images, NULL, &p, DT_EINVAL, "idx images need a labels file");
    expect_idx_err(images, "", &p, DT_EINVAL, "idx images need a labels file");
    /* A truncated image file without labels is still found out. */
    char *dir = dt_test_tempdir();
    char cut[1024];
    path_in(cut, sizeof cut, dir, "cut");
    static const unsigned char px[5] = {1, 2, 3, 4, 5};
    write_idx(cut, 0x803, (const uint32_t[]){1, 2, 3}, 3, px, sizeof px);
    p.labels = DT_LABELS_NONE;
    expect_idx_err(cut, NULL, &p, DT_ECORRUPT, "cut: truncated: expected 22 bytes, got 21");
    dt_test_tempdir_free(dir);
}
END_TEST

/* skip_bad_rows works alike without labels. */
START_TEST(test_without_labels_skip) {
    dt_log_set_level(DT_LOG_ERROR);
    char *dir = dt_test_tempdir();
    dt_reader_params p = params(2, DT_LABEL_CLASS, 2, "y");
    p.labels = DT_LABELS_NONE;
    p.skip_bad_rows = 1;
    dt_reader_table t;
    read_text(dir, "skip.csv", "a,b\n1,2\n3,x\n5,6\n7\n", DT_READER_CSV, &p, &t);
    ck_assert_int_eq(t.rows, 2);
    ck_assert_int_eq(t.skipped, 2);
    static const float want[4] = {1, 2, 5, 6};
    for (int k = 0; k < 4; k++)
        ck_assert_float_eq(t.x[k], want[k]);
    ck_assert_ptr_null(t.y);
    dt_reader_table_deinit(&t);
    read_text(dir, "skip.libsvm", "1:1\n0 2:1\n2:3\n", DT_READER_LIBSVM, &p, &t);
    ck_assert_int_eq(t.rows, 2);
    ck_assert_int_eq(t.skipped, 1);
    ck_assert_float_eq(t.x[3], 3);
    dt_reader_table_deinit(&t);
    dt_test_tempdir_free(dir);
    dt_log_set_level(DT_LOG_INFO);
}
END_TEST

/* Detects labels in dir/name holding text; returns how, checks *labeled. */
static void detect_ok(const char *dir, const char *name, const char *text, dt_reader_format format,
                      const dt_reader_params *p, int want, const char *how_part) {
    char path[1024], how[256];
    path_in(path, sizeof path, dir, name);
    write_text(path, text);
    int labeled = -1;
    dt_err err = {0};
    ck_assert_msg(dt_reader_detect_labels(format, path, NULL, p, &labeled, how, sizeof how, &err) ==
                      0,
                  "%s: %s", name, err.msg);
    ck_assert_msg(labeled == want, "%s: labeled %d, want %d (%s)", name, labeled, want, how);
    ck_assert_msg(strstr(how, how_part) != NULL, "%s: want \"%s\" in \"%s\"", name, how_part, how);
    ck_assert_msg(strncmp(how, path, strlen(path)) == 0, "%s: no path in \"%s\"", name, how);
}

START_TEST(test_detect_labels) {
    char *dir = dt_test_tempdir();
    dt_reader_params p = params(3, DT_LABEL_CLASS, 3, "y");
    detect_ok(dir, "l.csv", "\n a ,y,b,c\n1,0,2,3\n", DT_READER_CSV, &p, 1,
              ": 4 columns: 3 features and the label column \"y\"");
    detect_ok(dir, "u.csv", "a,b,c\n1,2,3\n", DT_READER_CSV, &p, 0,
              "u.csv: 3 columns for 3 features, none of them the label column \"y\"");
    /* The label named in a header of F columns: labeled, short a feature
     * (the read says so). */
    detect_ok(dir, "short.csv", "a,y,c\n", DT_READER_CSV, &p, 1, "3 columns: 2 features");
    p.label_column = "2";
    detect_ok(dir, "i.csv", "a,b,c\n", DT_READER_CSV, &p, 0,
              "none of them a label column (column 2)");
    detect_ok(dir, "il.csv", "a,b,c,d\n", DT_READER_CSV, &p, 1,
              "3 features and a label column (column 2)");

    char path[1024];
    int labeled = -1;
    dt_err err = {0};
    path_in(path, sizeof path, dir, "neither.csv");
    write_text(path, "a,b\n1,2\n");
    p.label_column = "y";
    expect_err(dt_reader_detect_labels(DT_READER_CSV, path, NULL, &p, &labeled, NULL, 0, &err),
               &err, DT_ECONFIG,
               "neither.csv:1: the header has 2 columns, but the job's 3 features make 4 with the "
               "label column \"y\" or 3 without labels");
    dt_err_clear(&err);
    write_text(path, "\n\n");
    expect_err(dt_reader_detect_labels(DT_READER_CSV, path, NULL, &p, &labeled, NULL, 0, &err),
               &err, DT_EINVAL, "neither.csv: empty file");
    dt_err_clear(&err);
    path_in(path, sizeof path, dir, "missing.csv");
    expect_err(dt_reader_detect_labels(DT_READER_CSV, path, NULL, &p, &labeled, NULL, 0, &err),
               &err, DT_ENOTFOUND, "missing.csv: open:");
    dt_err_clear(&err);
    expect_err(
        dt_reader_detect_labels((dt_reader_format)-1, path, NULL, &p, &labeled, NULL, 0, &err),
        &err, DT_EINVAL, "unknown format -1");
    dt_err_clear(&err);

    p = params(4, DT_LABEL_CLASS, 2, NULL);
    detect_ok(dir, "l.libsvm", "# c\n\n1 qid:2 1:1\n2:1\n", DT_READER_LIBSVM, &p, 1,
              "l.libsvm:3: the first row starts with the label \"1\"");
    detect_ok(dir, "u.libsvm", "  # c\n \t 1:0.5 2:1\n", DT_READER_LIBSVM, &p, 0,
              "u.libsvm:2: the first row starts with the index:value pair \"1:0.5\"");
    detect_ok(dir, "q.libsvm", "qid:4 3:1\n", DT_READER_LIBSVM, &p, 0, "pair \"qid:4\"");
    detect_ok(dir, "e.libsvm", "# nothing\n", DT_READER_LIBSVM, &p, 1, "e.libsvm: no rows");
    /* A line the read refuses is passed over: the next row tells. */
    path_in(path, sizeof path, dir, "nul.libsvm");
    static const char nul[] = "1 1\0:1\n3:1\n";
    write_bytes(path, nul, sizeof nul - 1);
    ck_assert_msg(
        dt_reader_detect_labels(DT_READER_LIBSVM, path, NULL, &p, &labeled, NULL, 0, &err) == 0,
        "%s", err.msg);
    ck_assert_int_eq(labeled, 0);

    char images[1024], labels[1024], how[256];
    fixture(images, sizeof images, "small-images-idx3-ubyte");
    fixture(labels, sizeof labels, "small-labels-idx1-ubyte");
    p = params(6, DT_LABEL_CLASS, 10, NULL);
    ck_assert_int_eq(
        dt_reader_detect_labels(DT_READER_IDX, images, labels, &p, &labeled, how, sizeof how, &err),
        0);
    ck_assert_int_eq(labeled, 1);
    ck_assert_int_eq(
        dt_reader_detect_labels(DT_READER_IDX, images, "", &p, &labeled, how, sizeof how, &err), 0);
    ck_assert_int_eq(labeled, 0);
    ck_assert_msg(strstr(how, "no labels file") != NULL, "%s", how);
    dt_test_tempdir_free(dir);
}
END_TEST

/* dt_reader_infer on text written to dir/name: F (and K when want_classes
 * is set) as given, and how F (or K) was told holding how. */
static void infer_ok(const char *dir, const char *name, const char *text, dt_reader_format format,
                     const dt_reader_params *p, int want_classes, int F, int K, const char *how) {
    char path[1024];
    path_in(path, sizeof path, dir, name);
    write_text(path, text);
    dt_reader_shape shape;
    dt_err err = {0};
    ck_assert_msg(dt_reader_infer(format, path, NULL, p, want_classes, &shape, &err) == 0, "%s: %s",
                  name, err.msg);
    ck_assert_int_eq(shape.num_features, F);
    ck_assert_int_eq(shape.num_classes, K);
    ck_assert_msg(strstr(shape.features_how, path) != NULL, "%s", shape.features_how);
    ck_assert_msg(strstr(shape.features_how, how) || strstr(shape.classes_how, how),
                  "%s: no \"%s\" in \"%s\" / \"%s\"", name, how, shape.features_how,
                  shape.classes_how);
}

static void infer_fails(const char *dir, const char *name, const char *text,
                        dt_reader_format format, const dt_reader_params *p, int code,
                        const char *want) {
    char path[1024];
    path_in(path, sizeof path, dir, name);
    write_text(path, text);
    dt_reader_shape shape;
    dt_err err = {0};
    expect_err(dt_reader_infer(format, path, NULL, p, 1, &shape, &err), &err, code, want);
    ck_assert_msg(strstr(err.msg, name) != NULL, "the message names no file: %s", err.msg);
}

/* A training file says its own F, and K when its labels are 0..K-1. */
START_TEST(test_infer_shape) {
    char *dir = dt_test_tempdir();
    dt_reader_params p = params(0, DT_LABEL_CLASS, 0, "y"); /* F and K not read */
    /* csv: the header's columns less the label's, wherever it is. */
    infer_ok(dir, "a.csv", "a, y ,b,c\n1,2,0,0\n1,0,0,0\n\n1,1,0,0\n", DT_READER_CSV, &p, 1, 3, 3,
             "4 columns less the label column \"y\"");
    infer_ok(dir, "a.csv", "a, y ,b,c\n1,2,0,0\n1,0,0,0\n\n1,1,0,0\n", DT_READER_CSV, &p, 1, 3, 3,
             "a.csv: labels 0..2");
    /* Without classes only the header is read: a bad row further on is
     * the read's to report. */
    infer_ok(dir, "h.csv", "y,a\n0,1\nnot,a,row\n", DT_READER_CSV, &p, 0, 1, 0, "2 columns less");
    p.label_column = "0";
    infer_ok(dir, "i.csv", "t,a,b\n1,0,0\n0,0,0\n", DT_READER_CSV, &p, 1, 2, 2,
             "less the label column \"t\"");
    /* What cannot be a class index is passed over (the read refuses or
     * skips those rows); the classes are those that are. */
    infer_ok(dir, "skip.csv", "t,a\n0,1\nx,1\n1.5,1\n-1,1\n1,1\n1,2,3\n", DT_READER_CSV, &p, 1, 1,
             2, "labels 0..1");
    infer_fails(dir, "gap.csv", "t,a\n1,0\n3,0\n2,0\n", DT_READER_CSV, &p, DT_ECONFIG,
                "the labels run up to 3, but no row has class 0");
    infer_fails(dir, "gap.csv", "t,a\n1,0\n3,0\n2,0\n", DT_READER_CSV, &p, DT_ECONFIG,
                "set \"classes\" (labels are class indices 0..K-1)");
    infer_fails(dir, "one.csv", "t,a\n0,0\n0,1\n", DT_READER_CSV, &p, DT_ECONFIG,
                "every label is 0: one class");
    infer_fails(dir, "real.csv", "t,a\n0.5,0\n-2,1\n", DT_READER_CSV, &p, DT_ECONFIG,
                "no label is a class index");
    infer_fails(dir, "big.csv", "t,a\n0,0\n70000,1\n", DT_READER_CSV, &p, DT_ECONFIG,
                "label 70000: more than 65536 classes are not inferred");
    p.label_column = "y";
    infer_fails(dir, "nolabel.csv", "a,b\n0,0\n", DT_READER_CSV, &p, DT_ECONFIG,
                "nolabel.csv:1: no column named \"y\" in the header");
    infer_fails(dir, "alone.csv", "y\n0\n1\n", DT_READER_CSV, &p, DT_EINVAL,
                "alone.csv:1: the header has no column besides the label");

    /* libsvm: the largest index of any row, not the first row's. */
    dt_reader_params s = params(0, DT_LABEL_CLASS, 0, NULL);
    infer_ok(dir, "a.libsvm", "# c\n1 qid:4 1:1 3:2\n0 2:1 9:1 # 12:1\n2 4:1\n\n", DT_READER_LIBSVM,
             &s, 1, 9, 3, "the largest feature index of 3 rows");
    infer_ok(dir, "a.libsvm", "# c\n1 qid:4 1:1 3:2\n0 2:1 9:1 # 12:1\n2 4:1\n\n", DT_READER_LIBSVM,
             &s, 1, 9, 3, "labels 0..2");
    infer_ok(dir, "b.libsvm", "1 1:1\n0 5:1\n", DT_READER_LIBSVM, &s, 0, 5, 0, "of 2 rows");
    /* svmlight's -1/+1 say two classes only to a binary model: not here. */
    infer_fails(dir, "pm.libsvm", "-1 1:1\n+1 2:1\n", DT_READER_LIBSVM, &s, DT_ECONFIG,
                "pm.libsvm: the labels run up to 1, but no row has class 0");
    infer_fails(dir, "noidx.libsvm", "1\n0 # 3:1\n", DT_READER_LIBSVM, &s, DT_EINVAL,
                "noidx.libsvm: no feature index in 2 rows");

    /* idx: rows x cols from the header, the classes from the labels file
     * (3 labels: 7, 0, 9, so classes 1..6 and 8 are missing). */
    char images[1024], labels[1024], path[1024];
    fixture(images, sizeof images, "small-images-idx3-ubyte");
    fixture(labels, sizeof labels, "small-labels-idx1-ubyte");
    dt_reader_shape shape;
    dt_err err = {0};
    ck_assert_msg(dt_reader_infer(DT_READER_IDX, images, labels, &s, 0, &shape, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(shape.num_features, 6);
    ck_assert_msg(strstr(shape.features_how, "images of 2 x 3") != NULL, "%s", shape.features_how);
    expect_err(dt_reader_infer(DT_READER_IDX, images, labels, &s, 1, &shape, &err), &err,
               DT_ECONFIG,
               "small-labels-idx1-ubyte: the labels run up to 9, but no row has class 1");
    path_in(path, sizeof path, dir, "labels");
    write_bytes(path, "\0\0\x08\x01\0\0\0\x03\x01\x00\x02", 11);
    dt_err_clear(&err);
    ck_assert_msg(dt_reader_infer(DT_READER_IDX, images, path, &s, 1, &shape, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(shape.num_classes, 3);
    ck_assert_msg(strstr(shape.classes_how, "labels 0..2") != NULL, "%s", shape.classes_how);

    /* A gzip copy says the same; a missing file is the reader's error. */
    char gz[1024];
    path_in(path, sizeof path, dir, "a.csv");
    path_in(gz, sizeof gz, dir, "a.csv.gz");
    gzip_copy(path, gz);
    p.label_column = "y";
    ck_assert_msg(dt_reader_infer(DT_READER_CSV, gz, NULL, &p, 1, &shape, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(shape.num_features, 3);
    ck_assert_int_eq(shape.num_classes, 3);
    path_in(path, sizeof path, dir, "missing.csv");
    expect_err(dt_reader_infer(DT_READER_CSV, path, NULL, &p, 1, &shape, &err), &err, DT_ENOTFOUND,
               "missing.csv: open:");
    dt_err_clear(&err);
    expect_err(dt_reader_infer((dt_reader_format)-1, path, NULL, &p, 1, &shape, &err), &err,
               DT_EINVAL, "unknown format -1");
    dt_test_tempdir_free(dir);
}
END_TEST

/* A csv's feature names, in order, as the read takes them: trimmed and
 * unquoted, the label column out unless the file is read without labels. */
START_TEST(test_csv_names) {
    char *dir = dt_test_tempdir();
    char path[1024], *names = NULL;
    path_in(path, sizeof path, dir, "n.csv");
    write_text(path, "\n a ,\"y\",\"b c\",d\n1,0,2,3\n");
    dt_reader_params p = params(3, DT_LABEL_CLASS, 3, "y");
    dt_err err = {0};
    ck_assert_msg(dt_reader_csv_names(path, &p, &names, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(names, "a,b c,d");
    free(names);
    p.label_column = "3";
    ck_assert_msg(dt_reader_csv_names(path, &p, &names, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(names, "a,y,b c");
    free(names);
    p.labels = DT_LABELS_NONE;
    ck_assert_msg(dt_reader_csv_names(path, &p, &names, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(names, "a,y,b c,d");
    free(names);
    p.labels = DT_LABELS_REQUIRED;
    p.label_column = "z";
    expect_err(dt_reader_csv_names(path, &p, &names, &err), &err, DT_ECONFIG,
               "n.csv:2: no column named \"z\"");
    ck_assert_ptr_null(names);
    dt_test_tempdir_free(dir);
}
END_TEST

static void suite_setup(void) {
    if (dt_test_tmp_begin() != 0) fprintf(stderr, "reader: no suite temp dir; using $TMPDIR\n");
}

Suite *reader_suite(void) {
    Suite *s = suite_create("reader");
    TCase *tc = tcase_create("reader");
    tcase_add_unchecked_fixture(tc, suite_setup, dt_test_tmp_end);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_csv_values);
    tcase_add_test(tc, test_libsvm_values);
    tcase_add_test(tc, test_idx_values);
    tcase_add_test(tc, test_gzip_same);
    tcase_add_test(tc, test_csv_long_lines);
    tcase_add_test(tc, test_csv_errors);
    tcase_add_test(tc, test_libsvm_errors);
    tcase_add_test(tc, test_files_and_params);
    tcase_add_test(tc, test_idx_errors);
    tcase_add_test(tc, test_skip_bad_rows);
    tcase_add_test(tc, test_memory_bound);
    tcase_add_test(tc, test_fashion_mnist);
    tcase_add_test(tc, test_without_labels_values);
    tcase_add_test(tc, test_without_labels_errors);
    tcase_add_test(tc, test_without_labels_skip);
    tcase_add_test(tc, test_detect_labels);
    tcase_add_test(tc, test_infer_shape);
    tcase_add_test(tc, test_csv_names);
    suite_add_tcase(s, tc);
    return s;
}
