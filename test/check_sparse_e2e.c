/*
 * sparse_e2e: sparse models trained by real dtrain processes (ps, chief,
 * workers on loopback ports): the weight a table of rows on the ps tasks.
 *
 *  - the same logistic model on the same libsvm file, dense ("sparse":
 *    "off") and sparse ("on"), one worker, full batches: the weights agree
 *    within rounding (the sums run in another order), not to the bit;
 *  - a checkpoint of three ps tasks restored onto two (a re-shard): every
 *    row the step after the restore did not touch reads back to the bit;
 *  - a ps SIGKILLed mid-job and restarted: the chief restores its table
 *    rows from the latest checkpoint and the job completes;
 *  - the embedding model ("model": "mlp") on `dtrain gen-criteo` data, 2
 *    ps and 2 workers: its held-out log loss falls clearly below the
 *    base rate's, the checkpoint holds the table's ids, rows and slot, and
 *    a new chief (on 1 ps: a re-shard) restores every row of it; rows
 *    of 64 floats, a table over a ps's smallest message cap, saved and
 *    restored in pages.
 * Every wait is on an event (an exit, a log line, a checkpoint) with a
 * deadline.
 */
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "hash.h"
#include "model.h"
#include "proc.h"
#include "sparse.h"
#include "sparse_model.h"
#include "suites.h"
#include "table.h"
#include "testjob.h"

#define JOB_TIMEOUT_MS 120000
#define EXIT_TIMEOUT_MS 20000
#define N_ROWS 64
#define N_FEATURES 8     /* sparse_matches_dense's */
#define WIDE_FEATURES 60 /* the other tests': hashed into a table of 2^20 rows */

static dt_test_job J;

static void setup(void) {
    dt_test_job_setup(&J);
}

static void teardown(void) {
    dt_test_job_teardown(&J);
}

/* Whether row i of the test files holds feature j (0-based). */
static int row_has(int i, int j) {
    return (i + j) % 3 != 0;
}

/* A libsvm file of N_ROWS rows over `features` features, row i holding
 * feature j when row_has(i, j), labels -1/+1 from a fixed linear rule;
 * into path. */
static void write_libsvm(int features, char *path, size_t cap) {
    snprintf(path, cap, "%s/train.svm", J.dir);
    enum { CAP = 256 * 1024 };
    char *text = malloc(CAP);
    ck_assert_ptr_nonnull(text);
    size_t off = 0;
    for (int i = 0; i < N_ROWS; i++) {
        char row[4096];
        size_t r = 0;
        double z = 0.1;
        for (int j = 0; j < features; j++) {
            if (!row_has(i, j)) continue;
            double x = (double)((i * 7 + j * 3) % 11) / 10.0 - 0.5;
            z += (double)((j * 5) % 9 - 4) / 2.0 * x;
            r += (size_t)snprintf(row + r, sizeof row - r, " %d:%.1f", j + 1, x);
        }
        off += (size_t)snprintf(text + off, CAP - off, "%s%s\n", z > 0 ? "+1" : "-1", row);
    }
    ck_assert_int_eq(dt_test_write_file(path, text), 0);
    free(text);
}

/* The job's --set overrides, with train_data and the given extras. */
static void job_sets(const char *train, const char *const *extra) {
    static char data_set[1200];
    snprintf(data_set, sizeof data_set, "train_data=%s", train);
    static const char *const common[] = {
        "model=logistic",       "data=libsvm",  "optimizer=sgd",    "learning_rate=0.5",
        "save_model_secs=3600", "log_steps=10", "ps_linger_secs=2", "seed=5"};
    J.num_sets = 0;
    for (size_t i = 0; i < sizeof common / sizeof *common; i++)
        dt_test_job_add_set(&J, common[i]);
    dt_test_job_add_set(&J, data_set);
    for (int i = 0; extra && extra[i]; i++)
        dt_test_job_add_set(&J, extra[i]);
}

/* Row id's weight in a loaded checkpoint's table "logistic/weight", or
 * NAN when the table holds no such row. */
static double table_weight(const dt_tensors *ts, int64_t id) {
    const dt_tensor *ids = dt_tensors_find(ts, "logistic/weight/ids");
    const dt_tensor *values = dt_tensors_find(ts, "logistic/weight/values");
    if (!ids || !values) return NAN;
    for (int64_t k = 0; k < ids->shape[0]; k++)
        if (((const int64_t *)ids->data)[k] == id) return ((const float *)values->data)[k];
    return NAN;
}

/* A checkpoint at step 0 in log_dir with the dense logistic model all
 * zeros: the sparse model's start (its table's rows start at 0), which the
 * dense model's own init (normal draws) is not. */
static void zero_start(const char *log_dir) {
    dt_model_config mc;
    memset(&mc, 0, sizeof mc);
    mc.kind = DT_MODEL_LOGISTIC;
    mc.num_features = N_FEATURES;
    mc.num_classes = 2;
    dt_tensor specs[DT_MODEL_MAX_VARS];
    int count = 0;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_specs(&mc, specs, &count, &err), 0);
    dt_tensors ts;
    ck_assert_int_eq(dt_tensors_init(&ts, specs, count, &err), 0);
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    ck_assert_msg(dt_ckpt_save_in_dir(log_dir, &ts, &meta, 5, NULL, 0, &err) == 0, "%s", err.msg);
    dt_tensors_deinit(&ts);
}

/* Dense and sparse, one worker, the whole file a batch, both from zeros:
 * the same gradients each step, so the same weights within rounding. */
START_TEST(sparse_matches_dense) {
    char train[1100];
    write_libsvm(N_FEATURES, train, sizeof train);
    double dense_w[N_FEATURES], dense_b;
    for (int pass = 0; pass < 2; pass++) {
        static char log_dir[1200];
        snprintf(log_dir, sizeof log_dir, "log_dir=%s/%s", J.dir, pass ? "sparse" : "dense");
        snprintf(J.log_dir, sizeof J.log_dir, "%s/%s", J.dir, pass ? "sparse" : "dense");
        const char *extra[] = {pass ? "sparse=on" : "sparse=off",
                               "features=8",
                               "batch_size=64",
                               "max_steps=40",
                               log_dir,
                               NULL};
        if (pass == 0) zero_start(J.log_dir);
        job_sets(train, extra);
        dt_test_job_cluster(&J, 1, 1);
        dt_test_job_run(&J, pass ? "-sparse" : "-dense", JOB_TIMEOUT_MS);
        dt_tensors ts;
        char path[2048];
        int64_t step = dt_test_job_load_latest(&J, 40, &ts, path, sizeof path);
        ck_assert_int_eq(step, 40);
        double b = dt_test_scalar(&ts, "logistic/bias", path);
        if (pass == 0) {
            const dt_tensor *w = dt_tensors_find(&ts, "logistic/weight");
            ck_assert_msg(w && dt_tensor_numel(w) == N_FEATURES, "%s: no dense weight", path);
            for (int j = 0; j < N_FEATURES; j++)
                dense_w[j] = ((const float *)w->data)[j];
            dense_b = b;
        } else {
            ck_assert_ptr_null(dt_tensors_find(&ts, "logistic/weight"));
            ck_assert_msg(dt_test_job_log_has(&J, "chief-sparse", "sparse: table logistic/weight"),
                          "the chief does not say the model is sparse; logs:%s",
                          dt_test_job_report(&J));
            /* Within rounding: float sums in another order, 40 steps. */
            ck_assert_msg(fabs(b - dense_b) <= 1e-5 * (1 + fabs(dense_b)), "bias %.9g vs %.9g", b,
                          dense_b);
            double worst = fabs(b - dense_b);
            int same = b == dense_b;
            for (int j = 0; j < N_FEATURES; j++) {
                double sw = table_weight(&ts, j);
                if (fabs(sw - dense_w[j]) > worst) worst = fabs(sw - dense_w[j]);
                same += sw == dense_w[j];
                ck_assert_msg(fabs(sw - dense_w[j]) <= 1e-5 * (1 + fabs(dense_w[j])),
                              "weight %d: sparse %.9g, dense %.9g", j, sw, dense_w[j]);
            }
            ck_assert(fabs(dense_w[0]) > 0.01); /* it learned something */
            fprintf(stderr,
                    "sparse_e2e: sparse vs dense after 40 steps: %d of %d values equal to the "
                    "bit, largest difference %.3g\n",
                    same, N_FEATURES + 1, worst);
        }
        dt_tensors_deinit(&ts);
    }
}
END_TEST

/* The rows (ids, values, slot) of table "logistic/weight" in a loaded
 * checkpoint; n 0 when it holds none. */
typedef struct {
    int64_t n;
    const int64_t *ids;
    const float *values, *acc;
} table_rows;

static table_rows rows_of(const dt_tensors *ts) {
    table_rows r = {0, NULL, NULL, NULL};
    const dt_tensor *ids = dt_tensors_find(ts, "logistic/weight/ids");
    const dt_tensor *v = dt_tensors_find(ts, "logistic/weight/values");
    const dt_tensor *a = dt_tensors_find(ts, "logistic/weight/accumulator");
    ck_assert_msg(ids && v && a, "the checkpoint lacks the table's ids, values or accumulator");
    r.n = ids->shape[0];
    r.ids = ids->data;
    r.values = v->data;
    r.acc = a->data;
    return r;
}

/* A table saved by three ps tasks restores onto two: the chief sends the
 * rows, each task keeps its own, with adagrad's accumulator. One step
 * later (a batch of file row 0) every row that step did not touch is the
 * saved one to the bit, slot included, and the touched ones moved. */
START_TEST(reshard_three_to_two) {
    char train[1100];
    write_libsvm(WIDE_FEATURES, train, sizeof train);
    const char *first[] = {"hash_bits=20", "batch_size=1", "optimizer=adagrad", "max_steps=20",
                           NULL};
    job_sets(train, first);
    dt_test_job_cluster(&J, 3, 1);
    dt_test_job_run(&J, "-three", JOB_TIMEOUT_MS);
    dt_tensors a, b;
    char pa[2048], pb[2048];
    ck_assert_int_eq(dt_test_job_load_latest(&J, 20, &a, pa, sizeof pa), 20);
    table_rows ra = rows_of(&a);
    ck_assert_int_eq(ra.n, WIDE_FEATURES); /* every feature seen in 20 rows */

    const char *second[] = {"hash_bits=20", "batch_size=1", "optimizer=adagrad", "max_steps=21",
                            NULL};
    job_sets(train, second);
    dt_test_job_cluster(&J, 2, 1);
    dt_test_job_run(&J, "-two", JOB_TIMEOUT_MS);
    char want[96];
    snprintf(want, sizeof want, "restored %d rows of table logistic/weight", WIDE_FEATURES);
    ck_assert_msg(dt_test_job_log_has(&J, "chief-two", want), "no \"%s\"; logs:%s", want,
                  dt_test_job_report(&J));
    ck_assert_int_eq(dt_test_job_load_latest(&J, 21, &b, pb, sizeof pb), 21);
    table_rows rb = rows_of(&b);
    ck_assert_int_eq(rb.n, ra.n);
    int touched = 0, kept = 0;
    for (int j = 0; j < WIDE_FEATURES; j++) {
        int64_t id = (int64_t)dt_hash_index(j + 1, 20);
        int64_t ka = -1, kb = -1;
        for (int64_t k = 0; k < ra.n; k++) {
            if (ra.ids[k] == id) ka = k;
            if (rb.ids[k] == id) kb = k;
        }
        ck_assert_msg(ka >= 0 && kb >= 0, "feature %d (id %lld) missing", j + 1, (long long)id);
        int same = ra.values[ka] == rb.values[kb] && ra.acc[ka] == rb.acc[kb];
        if (row_has(0, j)) {
            touched += !same;
        } else {
            ck_assert_msg(same, "feature %d, untouched by step 21, changed: %.9g -> %.9g", j + 1,
                          ra.values[ka], rb.values[kb]);
            kept++;
        }
    }
    ck_assert_int_eq(kept, WIDE_FEATURES / 3);
    ck_assert_int_gt(touched, 0);
    dt_tensors_deinit(&a);
    dt_tensors_deinit(&b);
}
END_TEST

/* A ps SIGKILLed mid-job comes back empty; the chief restores its rows
 * from the latest checkpoint and the job completes. */
START_TEST(ps_killed_restored) {
    char train[1100];
    write_libsvm(WIDE_FEATURES, train, sizeof train);
    const char *sets[] = {"hash_bits=20",    "batch_size=4",      "optimizer=adagrad",
                          "max_steps=15000", "save_model_secs=1", NULL};
    job_sets(train, sets);
    dt_test_job_cluster(&J, 2, 2);
    pid_t ps0 = dt_test_job_start(&J, "ps", 0, "ps0");
    pid_t ps1 = dt_test_job_start(&J, "ps", 1, "ps1");
    pid_t chief = dt_test_job_start(&J, "worker", 0, "chief");
    pid_t worker = dt_test_job_start(&J, "worker", 1, "worker1");
    int64_t saved = dt_test_job_expect_ckpt_after(&J, 0, chief, JOB_TIMEOUT_MS);
    ck_assert_msg(saved < 15000, "the job ended before the kill; logs:%s", dt_test_job_report(&J));
    size_t seen = dt_test_job_log_length(&J, "chief");
    ck_assert_int_eq(kill(ps1, SIGKILL), 0);
    dt_test_job_expect_exit(&J, ps1, "killed ps 1", EXIT_TIMEOUT_MS, -SIGKILL);
    ck_assert_msg(
        dt_test_job_wait_log_after(&J, "chief", seen, "waiting for", chief, JOB_TIMEOUT_MS),
        "the chief does not say it waits for ps 1; logs:%s", dt_test_job_report(&J));
    pid_t ps1b = dt_test_job_start(&J, "ps", 1, "ps1b");
    pid_t pids[4] = {ps0, ps1b, chief, worker};
    const char *names[4] = {"ps 0", "restarted ps 1", "chief", "worker 1"};
    dt_test_job_expect_done(&J, pids, names, 4, JOB_TIMEOUT_MS);
    ck_assert_msg(dt_test_job_log_has(&J, "chief", "lost its model; restoring it") &&
                      dt_test_job_log_has(&J, "chief", "rows of table logistic/weight"),
                  "the chief did not restore ps 1's rows; logs:%s", dt_test_job_report(&J));
    ck_assert_msg(dt_test_job_log_has(&J, "ps1b", "tables restored; serving"),
                  "ps 1 did not take its rows back; logs:%s", dt_test_job_report(&J));
    dt_tensors ts;
    char path[2048];
    ck_assert_int_eq(dt_test_job_load_latest(&J, 15000, &ts, path, sizeof path), 15000);
    ck_assert_int_eq(rows_of(&ts).n, WIDE_FEATURES);
    dt_tensors_deinit(&ts);
}
END_TEST

/* The embedding job's data: rows 0..EMB_TRAIN-1 of the generator to train
 * on, the next EMB_EVAL held out. A small vocabulary (vocab-scale 0.001:
 * 3,376 values) so that 20k rows see most values many times. */
#define EMB_TRAIN 20000
#define EMB_EVAL 4000
#define EMB_DIM 4

/* Splits the generator's file at path into train and eval (train_rows
 * rows, the rest), returning the training rows' share of clicks. */
static double split_criteo(const char *path, int train_rows, const char *train, const char *eval) {
    size_t len = 0;
    char *text = dt_test_read_file(path, &len);
    ck_assert_ptr_nonnull(text);
    size_t cut = 0;
    int64_t rows = 0, clicks = 0;
    for (; cut < len && rows < train_rows; cut++) {
        if (cut == 0 || text[cut - 1] == '\n') clicks += text[cut] == '1';
        rows += text[cut] == '\n';
    }
    ck_assert_int_eq(rows, train_rows);
    ck_assert_int_eq(dt_test_write_file(eval, text + cut), 0);
    text[cut] = '\0';
    ck_assert_int_eq(dt_test_write_file(train, text), 0);
    free(text);
    return (double)clicks / train_rows;
}

/* The held-out log loss of the embedding job's checkpoint ts: its mlp and
 * table rows put back as bench_sparse_eval does, scored on eval. */
static double embedding_loss(const dt_tensors *ts, const char *eval) {
    dt_job job;
    dt_test_job_config(&J, &job);
    dt_err err;
    dt_err_clear(&err);
    dt_sparse_model_config mc;
    dt_table_config tc;
    ck_assert_msg(dt_job_sparse_model(&job, &mc, &tc, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(mc.kind, DT_SPARSE_EMBEDDING);
    dt_tensor specs[DT_SPARSE_MODEL_MAX_VARS];
    int count = 0;
    dt_table_config unused;
    ck_assert_msg(dt_sparse_model_specs(&mc, specs, &count, &unused, &err) == 0, "%s", err.msg);
    dt_tensors vars;
    ck_assert_msg(dt_tensors_init(&vars, specs, count, &err) == 0, "%s", err.msg);
    for (int i = 0; i < vars.count; i++) {
        const dt_tensor *x = dt_tensors_find(ts, vars.items[i].name);
        ck_assert_msg(x && x->nbytes == vars.items[i].nbytes, "no %s of its shape",
                      vars.items[i].name);
        memcpy(vars.items[i].data, x->data, x->nbytes);
    }
    dt_table *t = NULL;
    dt_sparse_model *m = NULL;
    dt_sparse_set set;
    memset(&set, 0, sizeof set);
    int64_t held = 0;
    double loss = NAN, accuracy = NAN;
    snprintf(job.data.eval_data, sizeof job.data.eval_data, "%s", eval);
    int rc = dt_table_new(&tc, &t, &err);
    if (rc == 0) rc = dt_table_import(t, ts, 0, 1, 0, &held, &err);
    if (rc == 0) rc = dt_sparse_model_new(&mc, &m, &err);
    if (rc == 0) rc = dt_job_open_sparse(&job, 1, 0, 1, &set, &err);
    if (rc == 0) rc = dt_sparse_model_score(m, &vars, t, &set, 512, &loss, &accuracy, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    ck_assert_int_eq(set.rows, EMB_EVAL);
    dt_sparse_set_deinit(&set);
    dt_sparse_model_free(m);
    dt_table_free(t);
    dt_tensors_deinit(&vars);
    return loss;
}

/* Generated Criteo rows, train_rows then eval_rows, into train and eval
 * in the job's dir, by `dtrain gen-criteo`; returns the training rows'
 * share of clicks. */
static double gen_criteo(int train_rows, int eval_rows, char *train, char *eval, size_t cap) {
    char all[1100], rows_arg[32];
    snprintf(all, sizeof all, "%s/all.txt", J.dir);
    snprintf(train, cap, "%s/train.txt", J.dir);
    snprintf(eval, cap, "%s/eval.txt", J.dir);
    snprintf(rows_arg, sizeof rows_arg, "%d", train_rows + eval_rows);
    const char *gen[] = {"gen-criteo", "--out",         all,     "--rows", rows_arg, "--seed",
                         "3",          "--vocab-scale", "0.001", NULL};
    ck_assert_msg(dt_test_job_command(&J, gen, JOB_TIMEOUT_MS) == 0, "gen-criteo failed: %s",
                  J.err);
    return split_criteo(all, train_rows, train, eval);
}

/* The embedding model's job: common sets, train_data, then extra. */
static void embedding_sets(const char *train, const char *const *extra) {
    static char data_set[1200];
    snprintf(data_set, sizeof data_set, "train_data=%s", train);
    const char *common[] = {
        "model=mlp",           "data=criteo",   "hash_bits=18",  "optimizer=adam",
        "learning_rate=0.005", "batch_size=64", "log_steps=100", "save_model_secs=3600",
        "ps_linger_secs=2",    "seed=5",        data_set};
    J.num_sets = 0;
    for (size_t i = 0; i < sizeof common / sizeof *common; i++)
        dt_test_job_add_set(&J, common[i]);
    for (int i = 0; extra[i]; i++)
        dt_test_job_add_set(&J, extra[i]);
}

/* The embedding model trained by real processes on generated Criteo rows:
 * it learns (held-out log loss well under the base rate's), its checkpoint
 * holds the table, and a new chief restores every row of it. */
START_TEST(embedding_criteo) {
    char train[1100], eval[1100];
    const double rate = gen_criteo(EMB_TRAIN, EMB_EVAL, train, eval, sizeof train);
    ck_assert(rate > 0.1 && rate < 0.4);
    /* ~3 epochs of 20k rows in batches of 64 */
    const char *first[] = {"embedding_dim=4", "hidden=[16]", "max_steps=900", NULL};
    embedding_sets(train, first);
    dt_test_job_cluster(&J, 2, 2);
    dt_test_job_run(&J, "-train", JOB_TIMEOUT_MS);

    dt_tensors a;
    char pa[2048];
    ck_assert_int_eq(dt_test_job_load_latest(&J, 900, &a, pa, sizeof pa), 900);
    const dt_tensor *ids = dt_tensors_find(&a, "embedding/table/ids");
    const dt_tensor *values = dt_tensors_find(&a, "embedding/table/values");
    const dt_tensor *acc = dt_tensors_find(&a, "embedding/table/m");
    ck_assert_msg(ids && values && acc && dt_tensors_find(&a, "embedding/table/v"),
                  "%s lacks the table's ids, values or Adam's slots", pa);
    const int64_t n = ids->shape[0];
    ck_assert_int_gt(n, 1000); /* most of the 3,376 values were pushed */
    ck_assert_int_le(n, 1 << 18);
    ck_assert(values->ndim == 2 && values->shape[0] == n && values->shape[1] == EMB_DIM);
    ck_assert(acc->ndim == 2 && acc->shape[0] == n && acc->shape[1] == EMB_DIM);
    for (int64_t k = 1; k < n; k++)
        ck_assert(((const int64_t *)ids->data)[k - 1] < ((const int64_t *)ids->data)[k]);
    const dt_tensor *w0 = dt_tensors_find(&a, "layer0/weight");
    ck_assert_msg(w0 && w0->shape[0] == 13 + 26 * EMB_DIM && w0->shape[1] == 16,
                  "%s: no layer0/weight (117, 16)", pa);

    /* The constant rate's log loss on the held-out rows is what a model
     * that learned nothing scores (adagrad's, which did not learn here,
     * scored 0.559 to 0.579 against 0.562); the trained one must be
     * clearly under. Measured: 0.499 to 0.52 (asynchronous workers: another
     * order of pushes each run; 0.542 once on the generator before its
     * integer columns were centred on every row). */
    const double base = -(rate * log(rate) + (1 - rate) * log(1 - rate));
    const double loss = embedding_loss(&a, eval);
    fprintf(stderr,
            "sparse_e2e: embedding model, 900 steps on %d rows: held-out log loss %.4f, the "
            "base rate's %.4f; %lld rows held\n",
            EMB_TRAIN, loss, base, (long long)n);
    ck_assert_msg(loss < base - 0.01, "held-out log loss %.4f, base rate's %.4f", loss, base);

    /* A new chief, on 1 ps: every row comes back from the checkpoint. */
    const char *again[] = {"embedding_dim=4", "hidden=[16]", "max_steps=920", NULL};
    embedding_sets(train, again);
    dt_test_job_cluster(&J, 1, 2);
    dt_test_job_run(&J, "-again", JOB_TIMEOUT_MS);
    char want[96];
    snprintf(want, sizeof want, "restored %lld rows of table embedding/table", (long long)n);
    ck_assert_msg(dt_test_job_log_has(&J, "chief-again", want), "no \"%s\"; logs:%s", want,
                  dt_test_job_report(&J));
    dt_tensors b;
    char pb[2048];
    ck_assert_int_eq(dt_test_job_load_latest(&J, 920, &b, pb, sizeof pb), 920);
    ck_assert_int_ge(dt_tensors_find(&b, "embedding/table/ids")->shape[0], n);
    /* 20 more steps do not undo what 900 learned. */
    ck_assert_double_lt(embedding_loss(&b, eval), base - 0.01);
    dt_tensors_deinit(&a);
    dt_tensors_deinit(&b);
}
END_TEST

/* Rows of 64 floats with Adam's two slots are 776 bytes: a table of more
 * than 5,405 of them is over the 4 MiB a ps's message cap can be, so the
 * chief's save and restore must page it by bytes (one page of 64k rows
 * failed every save). */
START_TEST(embedding_wide_rows) {
    char train[1100], eval[1100];
    gen_criteo(4000, 100, train, eval, sizeof train);
    const char *first[] = {"embedding_dim=64", "hidden=[8]", "max_steps=40", NULL};
    embedding_sets(train, first);
    dt_test_job_cluster(&J, 1, 1);
    dt_test_job_run(&J, "-first", JOB_TIMEOUT_MS);
    dt_tensors a;
    char pa[2048];
    ck_assert_int_eq(dt_test_job_load_latest(&J, 40, &a, pa, sizeof pa), 40);
    const dt_tensor *values = dt_tensors_find(&a, "embedding/table/values");
    ck_assert_msg(values && values->ndim == 2 && values->shape[1] == 64, "%s: no (n, 64) rows", pa);
    const int64_t n = values->shape[0];
    ck_assert_msg(n * (8 + 64 * 4 * 3) > (4 << 20), "%lld rows: under 4 MiB, proving nothing",
                  (long long)n);
    const char *again[] = {"embedding_dim=64", "hidden=[8]", "max_steps=41", NULL};
    embedding_sets(train, again);
    dt_test_job_cluster(&J, 1, 1);
    dt_test_job_run(&J, "-again", JOB_TIMEOUT_MS);
    char want[96];
    snprintf(want, sizeof want, "restored %lld rows of table embedding/table", (long long)n);
    ck_assert_msg(dt_test_job_log_has(&J, "chief-again", want), "no \"%s\"; logs:%s", want,
                  dt_test_job_report(&J));
    ck_assert_int_eq(dt_test_ckpt_max(J.log_dir), 41);
    dt_tensors_deinit(&a);
}
END_TEST

Suite *sparse_e2e_suite(void) {
    Suite *s = suite_create("sparse_e2e");
    TCase *tc = dt_test_job_tcase(s, "jobs", 300, setup, teardown);
    tcase_add_test(tc, sparse_matches_dense);
    tcase_add_test(tc, reshard_three_to_two);
    tcase_add_test(tc, ps_killed_restored);
    tcase_add_test(tc, embedding_criteo);
    tcase_add_test(tc, embedding_wide_rows);
    return s;
}
