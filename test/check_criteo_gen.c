/*
 * criteo_gen suite: the generator of Criteo-layout click logs. The same
 * seed gives the same bytes (plain, gzip, any row alone); the file is what
 * the Criteo reader reads; labels are drawn from the hidden model (the
 * click rate and the log loss agree with the model's probabilities within
 * sampling error); errors leave no file; and `dtrain gen-criteo` as a
 * user runs it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "criteo_gen.h"
#include "proc.h"
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

static const char *path_in(const char *name) {
    static char path[2][256];
    static int k;
    k ^= 1;
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    return path[k];
}

static dt_criteo_gen_params params(int64_t rows, uint64_t seed) {
    dt_criteo_gen_params p;
    dt_criteo_gen_defaults(&p);
    p.rows = rows;
    p.seed = seed;
    p.vocab_scale = 0.001;
    return p;
}

START_TEST(test_deterministic) {
    dt_criteo_gen_params p = params(3000, 11);
    dt_criteo_gen_report r1, r2;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_criteo_gen_write(&p, path_in("a.txt"), &r1, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_criteo_gen_write(&p, path_in("b.txt"), &r2, &err) == 0, "%s", err.msg);
    size_t la, lb;
    char *a = dt_test_read_file(path_in("a.txt"), &la),
         *b = dt_test_read_file(path_in("b.txt"), &lb);
    ck_assert(la == lb && memcmp(a, b, la) == 0);
    ck_assert(r1.log_loss == r2.log_loss && r1.positives == r2.positives);
    /* Any row alone is the file's row: nothing depends on rows before it. */
    dt_criteo_gen_model m;
    ck_assert_int_eq(dt_criteo_gen_init(&p, &m, NULL), 0);
    ck_assert(m.bias == r1.bias);
    char line[1024], *at = a;
    for (int64_t i = 0; i < 2000; i++) {
        double p1;
        int y;
        dt_criteo_gen_row(&m, i, line, sizeof line, &p1, &y);
        size_t n = strlen(line);
        ck_assert_msg(strncmp(at, line, n) == 0, "row %lld differs", (long long)i);
        ck_assert_int_eq(at[0] - '0', y);
        at += n;
    }
    /* A row far out costs the same as row 0. */
    double p1;
    int y;
    dt_criteo_gen_row(&m, (int64_t)1 << 40, line, sizeof line, &p1, &y);
    ck_assert(p1 > 0 && p1 < 1);
    /* Another seed, another file. */
    p.seed = 12;
    ck_assert_int_eq(dt_criteo_gen_write(&p, path_in("b.txt"), NULL, NULL), 0);
    free(b);
    b = dt_test_read_file(path_in("b.txt"), &lb);
    ck_assert(la != lb || memcmp(a, b, la) != 0);
    free(a);
    free(b);
}
END_TEST

START_TEST(test_reads_back) {
    /* gzip or plain, the reader gets the same rows; without labels, the
     * same features. */
    dt_criteo_gen_params p = params(4000, 5);
    dt_criteo_gen_report rep;
    ck_assert_int_eq(dt_criteo_gen_write(&p, path_in("c.txt"), &rep, NULL), 0);
    ck_assert_int_eq(dt_criteo_gen_write(&p, path_in("c.txt.gz"), NULL, NULL), 0);
    p.labels = 0;
    ck_assert_int_eq(dt_criteo_gen_write(&p, path_in("u.txt"), NULL, NULL), 0);
    dt_sparse_read_params rp;
    memset(&rp, 0, sizeof rp);
    rp.hash_bits = 24;
    dt_sparse_set plain, gz, unlabeled;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_sparse_read_criteo(path_in("c.txt"), &rp, &plain, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_sparse_read_criteo(path_in("c.txt.gz"), &rp, &gz, &err) == 0, "%s", err.msg);
    rp.labels = DT_LABELS_NONE;
    ck_assert_msg(dt_sparse_read_criteo(path_in("u.txt"), &rp, &unlabeled, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(plain.rows, 4000);
    ck_assert_int_eq(plain.skipped, 0);
    const int64_t nnz = plain.offsets[plain.rows];
    ck_assert_int_eq(gz.offsets[gz.rows], nnz);
    ck_assert(memcmp(plain.ids, gz.ids, (size_t)nnz * sizeof *plain.ids) == 0);
    ck_assert(memcmp(plain.ids, unlabeled.ids, (size_t)nnz * sizeof *plain.ids) == 0);
    ck_assert(memcmp(plain.dense, unlabeled.dense, 4000 * 13 * sizeof(float)) == 0);
    int64_t positives = 0;
    for (int64_t i = 0; i < plain.rows; i++)
        positives += plain.y[i] == 1;
    ck_assert_int_eq(positives, rep.positives);
    /* Most rows have most categoricals; some dense features are missing. */
    ck_assert_int_gt(nnz, 4000 * 20);
    ck_assert_int_lt(nnz, 4000 * 26);
    dt_sparse_set_deinit(&plain);
    dt_sparse_set_deinit(&gz);
    dt_sparse_set_deinit(&unlabeled);
}
END_TEST

START_TEST(test_labels_follow_the_model) {
    /* Over 20000 rows: positives are the sum of Bernoulli(p_i) draws, and
     * the log loss the mean of -log P(y_i): each within 5 standard
     * deviations of what the probabilities say. */
    dt_criteo_gen_params p = params(20000, 3);
    dt_criteo_gen_model m;
    ck_assert_int_eq(dt_criteo_gen_init(&p, &m, NULL), 0);
    double sum_p = 0, var_p = 0, entropy = 0, var_loss = 0, loss = 0;
    int64_t positives = 0;
    char line[1024];
    for (int64_t i = 0; i < p.rows; i++) {
        double p1;
        int y;
        dt_criteo_gen_row(&m, i, line, sizeof line, &p1, &y);
        positives += y;
        sum_p += p1;
        var_p += p1 * (1 - p1);
        const double l1 = -log(p1), l0 = -log(1 - p1), h = p1 * l1 + (1 - p1) * l0;
        entropy += h;
        var_loss += p1 * l1 * l1 + (1 - p1) * l0 * l0 - h * h;
        loss += y ? l1 : l0;
    }
    ck_assert_msg(fabs((double)positives - sum_p) < 5 * sqrt(var_p), "%lld positives, %g expected",
                  (long long)positives, sum_p);
    ck_assert_msg(fabs(loss - entropy) < 5 * sqrt(var_loss), "log loss %g, %g expected",
                  loss / p.rows, entropy / p.rows);
    /* The bias makes about a quarter clicks, and the features carry signal:
     * the model beats a constant rate by a wide margin. */
    const double rate = sum_p / p.rows;
    ck_assert_msg(rate > 0.23 && rate < 0.27, "click rate %g", rate);
    const double base = -(rate * log(rate) + (1 - rate) * log(1 - rate));
    ck_assert_msg(entropy / p.rows < 0.9 * base, "model %g, constant %g", entropy / p.rows, base);
    dt_criteo_gen_report rep;
    ck_assert_int_eq(dt_criteo_gen_write(&p, path_in("d.txt"), &rep, NULL), 0);
    ck_assert_int_eq(rep.positives, positives);
    ck_assert_double_eq_tol(rep.log_loss, loss / p.rows, 1e-12);
    ck_assert_double_eq_tol(dt_criteo_gen_log_loss(&m, 0, p.rows), loss / p.rows, 1e-12);
    /* A range of rows: the same rows' losses, not the file's first ones. */
    double tail = 0;
    for (int64_t i = p.rows / 2; i < p.rows; i++) {
        double p1;
        int y;
        dt_criteo_gen_row(&m, i, line, sizeof line, &p1, &y);
        tail -= log(y ? p1 : 1 - p1);
    }
    const int64_t half = p.rows - p.rows / 2;
    ck_assert_double_eq_tol(dt_criteo_gen_log_loss(&m, p.rows / 2, half), tail / half, 1e-12);
}
END_TEST

START_TEST(test_errors) {
    dt_criteo_gen_params p = params(0, 1);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_criteo_gen_write(&p, path_in("e.txt"), NULL, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "gen-criteo: --rows must be >= 1 (got 0)");
    p = params(10, 1);
    p.vocab_scale = 1.5;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_criteo_gen_write(&p, path_in("e.txt"), NULL, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "--vocab-scale must be in (0, 1]"));
    ck_assert_int_ne(access(path_in("e.txt"), F_OK), 0);
    /* An unwritable place: DT_EIO naming it, nothing left behind. */
    p.vocab_scale = 0.01;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_criteo_gen_write(&p, path_in("no/such/dir.txt"), NULL, &err), DT_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, "no/such/dir.txt"));
    /* A device is written in place, never replaced: /dev/full takes the
     * open and fails the writes, /dev/null takes everything. */
    struct stat before, after;
    if (stat("/dev/full", &before) == 0 && S_ISCHR(before.st_mode) &&
        access("/dev/full", W_OK) == 0) {
        p.rows = 100000;
        dt_err_clear(&err);
        ck_assert_int_eq(dt_criteo_gen_write(&p, "/dev/full", NULL, &err), DT_EIO);
        ck_assert_ptr_nonnull(strstr(err.msg, "gen-criteo: /dev/full: "));
        ck_assert_int_eq(stat("/dev/full", &after), 0);
        ck_assert(S_ISCHR(after.st_mode));
    }
    p.rows = 1000;
    ck_assert_int_eq(dt_criteo_gen_write(&p, "/dev/null", NULL, NULL), 0);
    ck_assert_int_eq(stat("/dev/null", &after), 0);
    ck_assert(S_ISCHR(after.st_mode));
}
END_TEST

/* Runs dtrain with args; returns its status, stderr in *err_text. */
static int run_dtrain(const char *const *args, char **err_text) {
    char *argv[16];
    int n = 0;
    argv[n++] = (char *)dt_test_bin();
    for (; args[n - 1] && n < 15; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    const char *out = path_in("out.log"), *errp = path_in("err.log");
    char out_path[256], err_path[256];
    snprintf(out_path, sizeof out_path, "%s", out);
    snprintf(err_path, sizeof err_path, "%s", errp);
    pid_t pid = dt_test_spawn_split(argv, out_path, err_path);
    ck_assert_int_gt(pid, 0);
    int status = dt_test_wait(pid, 60000);
    *err_text = dt_test_read_file(err_path, NULL);
    unlink(out_path);
    unlink(err_path);
    return status;
}

START_TEST(test_cli) {
    char out[256];
    snprintf(out, sizeof out, "%s", path_in("cli.txt"));
    const char *args[] = {"gen-criteo", "--rows", "500",           "--seed", "9",
                          "--out",      out,      "--vocab-scale", "0.05",   NULL};
    char *text = NULL;
    ck_assert_int_eq(run_dtrain(args, &text), 0);
    ck_assert_msg(dt_test_line_has(text, "gen-criteo: 500 rows to", "seed 9",
                                   "hidden model log loss", "positives"),
                  "%s", text);
    free(text);
    /* The same rows as the library makes. */
    dt_criteo_gen_params p = params(500, 9);
    p.vocab_scale = 0.05;
    ck_assert_int_eq(dt_criteo_gen_write(&p, path_in("lib.txt"), NULL, NULL), 0);
    size_t la, lb;
    char *a = dt_test_read_file(out, &la), *b = dt_test_read_file(path_in("lib.txt"), &lb);
    ck_assert(a && b && la == lb && memcmp(a, b, la) == 0);
    free(a);
    free(b);

    static const struct {
        const char *args[6];
        const char *want;
    } bad[] = {
        {{"gen-criteo", "--rows", "10", NULL}, "gen-criteo: missing --out FILE"},
        {{"gen-criteo", "--out", "x", "--rows", "-5", NULL},
         "--rows: \"-5\" is not a whole number"},
        {{"gen-criteo", "--out", "x", "--vocab-scale", "2", NULL}, "--vocab-scale: \"2\""},
        {{"gen-criteo", "--out", "x", "--seed", "abc", NULL}, "--seed: \"abc\""},
        {{"gen-criteo", "--out", "x", "--bogus", NULL}, "gen-criteo: unknown flag --bogus"},
        {{"gen-criteo", "--out", NULL}, "flag --out needs a value"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        ck_assert_int_eq(run_dtrain(bad[k].args, &text), 2);
        ck_assert_msg(text && strstr(text, bad[k].want), "%zu: %s", k, text ? text : "");
        free(text);
    }
}
END_TEST

Suite *criteo_gen_suite(void) {
    Suite *s = suite_create("criteo_gen");
    TCase *tc = tcase_create("criteo_gen");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, dt_test_tmp_fixture, dt_test_tmp_end);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_deterministic);
    tcase_add_test(tc, test_reads_back);
    tcase_add_test(tc, test_labels_follow_the_model);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_cli);
    suite_add_tcase(s, tc);
    return s;
}
