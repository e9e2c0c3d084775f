/*
 * sparse_e2e: sparse models trained by real dtrain processes (ps, chief,
 * workers on loopback ports): the weight a table of rows on the ps tasks.
 *
 *  - the same logistic model on the same libsvm file, dense ("sparse":
 *    "off") and sparse ("on"), one worker async and two workers sync,
 *    full batches, and batches smaller than a shard (both forms draw the
 *    same shuffled order each epoch): the weights agree within rounding
 *    (each worker sums a batch in another order), not to the bit;
 *  - a checkpoint of three ps tasks restored onto two (a re-shard): every
 *    row the step after the restore did not touch reads back to the bit;
 *  - a ps SIGKILLed mid-job and restarted: the chief restores its table
 *    rows from the latest checkpoint and the job completes;
 *  - eval_data, the evaluator, dtrain eval and dtrain predict on a sparse
 *    model's checkpoint agree with the model computed here from its rows,
 *    and broken checkpoints are refused naming the file and the tensor;
 *  - the embedding model ("model": "mlp") on `dtrain gen-criteo` data, 2
 *    ps and 2 workers: its held-out log loss falls clearly below the
 *    base rate's, the checkpoint holds the table's ids, rows and slot, and
 *    a new chief (on 1 ps: a re-shard) restores every row of it; rows
 *    of 64 floats, a table over a ps's smallest message cap, saved and
 *    restored in pages;
 *  - pipeline_push (the next batch's rows pulled and its gradient made
 *    while the push is in flight): the same embedding job learns as well
 *    with it as without, every push but a worker's first one step staler;
 *    a pipelined worker SIGKILLed mid-job restarts and the job ends, as
 *    does a job whose ps is SIGKILLed and restarted under pipelined
 *    workers.
 * Every wait is on an event (an exit, a log line, a checkpoint) with a
 * deadline.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "hash.h"
#include "model.h"
#include "proc.h"
#include "ps_client.h"
#include "safetensors.h"
#include "sparse.h"
#include "sparse_eval.h"
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

/* The same logistic model trained dense ("sparse": "off") and sparse
 * ("on") on the same file from zeros, by `workers` workers, each step a
 * batch of batch_size rows of each worker's shard (the whole shard, so
 * every step's gradients are the same in both), with the extra --set
 * (mode); the final weights must agree within rounding: each worker sums
 * a batch's gradient in another order in the two forms, so not to the bit.
 * The ps's sums agree to the bit (sparse_acc), and with two workers the
 * order their pushes come in does not matter (a + b is b + a). */
static void matches_dense(int num_ps, int workers, const char *batch, const char *mode,
                          const char *tag) {
    char train[1100];
    write_libsvm(N_FEATURES, train, sizeof train);
    double dense_w[N_FEATURES], dense_b = 0;
    for (int pass = 0; pass < 2; pass++) {
        static char log_dir[1200];
        snprintf(log_dir, sizeof log_dir, "log_dir=%s/%s", J.dir, pass ? "sparse" : "dense");
        snprintf(J.log_dir, sizeof J.log_dir, "%s/%s", J.dir, pass ? "sparse" : "dense");
        const char *extra[] = {pass ? "sparse=on" : "sparse=off",
                               "features=8",
                               batch,
                               "max_steps=40",
                               log_dir,
                               mode,
                               NULL};
        if (pass == 0) zero_start(J.log_dir);
        job_sets(train, extra);
        dt_test_job_cluster(&J, num_ps, workers);
        char run_tag[64];
        snprintf(run_tag, sizeof run_tag, "%s-%s", tag, pass ? "sparse" : "dense");
        dt_test_job_run(&J, run_tag, JOB_TIMEOUT_MS);
        char ps_log[80], created[64];
        snprintf(ps_log, sizeof ps_log, "ps0%s", run_tag);
        snprintf(created, sizeof created, "optimizer sgd, %s", strchr(mode, '=') + 1);
        ck_assert_msg(dt_test_job_log_has(&J, ps_log, created),
                      "the ps did not run \"%s\"; logs:%s", created, dt_test_job_report(&J));
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
            char chief_log[80];
            snprintf(chief_log, sizeof chief_log, "chief%s", run_tag);
            ck_assert_msg(dt_test_job_log_has(&J, chief_log, "sparse: table logistic/weight"),
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
            fprintf(
                stderr,
                "sparse_e2e: %s %d ps: sparse vs dense after 40 steps: %d of %d values equal to "
                "the bit, largest difference %.3g\n",
                mode, num_ps, same, N_FEATURES + 1, worst);
        }
        dt_tensors_deinit(&ts);
    }
}

/* One worker, async, the whole file a batch. */
START_TEST(sparse_matches_dense) {
    matches_dense(1, 1, "batch_size=64", "mode=async", "");
}
END_TEST

/* Sync, two workers: each step the ps averages the two workers' pushes,
 * dense tensors and table rows alike (rows summed by id). */
START_TEST(sparse_matches_dense_sync) {
    matches_dense(1, 2, "batch_size=32", "mode=sync", "-sync");
}
END_TEST

/* The same on two ps tasks: ps 0 decides each step's pushes, ps 1 holds
 * each worker's rows until it is told, then sums them in worker order. */
START_TEST(sparse_matches_dense_sync_two_ps) {
    matches_dense(2, 2, "batch_size=32", "mode=sync", "-sync2");
}
END_TEST

/* Batches smaller than a shard (64 = 6 x 10 + 4 rows): each epoch both
 * forms draw the shard's rows in the same shuffled order (lib/data.h's
 * rule), so they take the same batches step by step and still agree. */
START_TEST(sparse_matches_dense_shuffled) {
    matches_dense(1, 1, "batch_size=10", "mode=async", "-shuffled");
}
END_TEST

/* The same with two shards (32 = 2 x 12 + 8 rows each), sync: each
 * worker's order is its shard's. */
START_TEST(sparse_matches_dense_shuffled_sync) {
    matches_dense(1, 2, "batch_size=12", "mode=sync", "-shuffled-sync");
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
 * later every row that step did not touch is the saved one to the bit,
 * slot included, and the touched ones moved. That step's batch is the
 * first row of epoch 0's order: the worker, started again, starts there
 * (a feed of the job's seed and shard 0 over the file's rows says which). */
START_TEST(reshard_three_to_two) {
    char train[1100];
    write_libsvm(WIDE_FEATURES, train, sizeof train);
    const char *first[] = {"hash_bits=20", "batch_size=1", "optimizer=adagrad", "max_steps=20",
                           NULL};
    job_sets(train, first);
    dt_test_job_cluster(&J, 3, 1);
    dt_test_job_run(&J, "-three", JOB_TIMEOUT_MS);
    /* A libsvm row's width is its file's: the ps's cap does not guess it. */
    ck_assert_msg(dt_test_job_log_has(&J, "ps0-three", "largest message 268435456 bytes (256 MiB)"),
                  "the ps's cap is not 256 MiB for a libsvm sparse job; logs:%s",
                  dt_test_job_report(&J));
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
    const dt_sparse_set shard = {.rows = N_ROWS}; /* the order needs the count alone */
    dt_sparse_feed feed;
    ck_assert_int_eq(dt_sparse_feed_init(&feed, &shard, 5, 0, NULL), 0);
    const int first_row = (int)feed.order[0];
    dt_sparse_feed_deinit(&feed);
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
        if (row_has(first_row, j)) {
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

/* The logistic model on WIDE_FEATURES features, 15000 steps of 4 rows,
 * with the extra --set (and extra2, when not NULL), started on 2 ps and 2
 * workers: pids get ps 0, ps 1, the chief and worker 1 (logs ps0, ps1,
 * chief, worker1). chief_stop and worker_stop, when not NULL, are their
 * DT_TEST_WORKER_STOP_AT (lib/worker.h): the local step after which each
 * stops itself. */
static void start_wide_job_stopping(const char *extra, const char *extra2, pid_t pids[4],
                                    const char *chief_stop, const char *worker_stop) {
    char train[1100];
    write_libsvm(WIDE_FEATURES, train, sizeof train);
    const char *sets[] = {"hash_bits=20",
                          "batch_size=4",
                          "optimizer=adagrad",
                          "max_steps=15000",
                          extra,
                          extra2,
                          NULL};
    job_sets(train, sets);
    dt_test_job_cluster(&J, 2, 2);
    pids[0] = dt_test_job_start(&J, "ps", 0, "ps0");
    pids[1] = dt_test_job_start(&J, "ps", 1, "ps1");
    const char *stops[2] = {chief_stop, worker_stop};
    for (int t = 0; t < 2; t++) {
        if (stops[t]) ck_assert_int_eq(setenv("DT_TEST_WORKER_STOP_AT", stops[t], 1), 0);
        pids[2 + t] = dt_test_job_start(&J, "worker", t, t ? "worker1" : "chief");
        ck_assert_int_eq(unsetenv("DT_TEST_WORKER_STOP_AT"), 0);
    }
}

/* start_wide_job's job ends (the 4 roles in pids, named) with its last
 * step's checkpoint holding a row for every feature. */
static void expect_wide_done(const pid_t pids[4], const char *const names[4]) {
    dt_test_job_expect_done(&J, pids, names, 4, JOB_TIMEOUT_MS);
    dt_tensors ts;
    char path[2048];
    ck_assert_int_eq(dt_test_job_load_latest(&J, 15000, &ts, path, sizeof path), 15000);
    ck_assert_int_eq(rows_of(&ts).n, WIDE_FEATURES);
    dt_tensors_deinit(&ts);
}

/* A ps SIGKILLed mid-job comes back empty; the chief restores its rows
 * from the latest checkpoint and the job completes. extra: a --set more,
 * or NULL. */
static void ps_killed(const char *extra) {
    pid_t started[4];
    /* The chief stops itself right after its first checkpoint past step 0
     * (DT_TEST_CKPT_STOP, lib/checkpoint.h), worker 1 at its local step 50
     * (DT_TEST_WORKER_STOP_AT, lib/worker.h): the job is held from a
     * moment a checkpoint of trained rows exists until ps 1 is dead,
     * however fast the machine runs it. Only the chief saves. */
    ck_assert_int_eq(setenv("DT_TEST_CKPT_STOP", "after_save", 1), 0);
    start_wide_job_stopping("save_model_secs=1", extra, started, NULL, "50");
    ck_assert_int_eq(unsetenv("DT_TEST_CKPT_STOP"), 0);
    pid_t ps0 = started[0], ps1 = started[1], chief = started[2], worker = started[3];
    ck_assert_msg(
        dt_test_wait_stopped(chief, JOB_TIMEOUT_MS) && dt_test_wait_stopped(worker, JOB_TIMEOUT_MS),
        "the chief and worker 1 did not stop themselves; logs:%s", dt_test_job_report(&J));
    int64_t saved = dt_test_ckpt_max(J.log_dir);
    ck_assert_msg(saved > 0 && saved < 15000, "checkpoint at step %lld when held; logs:%s",
                  (long long)saved, dt_test_job_report(&J));
    size_t seen = dt_test_job_log_length(&J, "chief");
    ck_assert_int_eq(kill(ps1, SIGKILL), 0);
    dt_test_job_expect_exit(&J, ps1, "killed ps 1", EXIT_TIMEOUT_MS, -SIGKILL);
    dt_test_job_release(&J, chief, "chief");
    dt_test_job_release(&J, worker, "worker 1");
    ck_assert_msg(
        dt_test_job_wait_log_after(&J, "chief", seen, "waiting for", chief, JOB_TIMEOUT_MS),
        "the chief does not say it waits for ps 1; logs:%s", dt_test_job_report(&J));
    pid_t ps1b = dt_test_job_start(&J, "ps", 1, "ps1b");
    pid_t pids[4] = {ps0, ps1b, chief, worker};
    const char *names[4] = {"ps 0", "restarted ps 1", "chief", "worker 1"};
    expect_wide_done(pids, names);
    ck_assert_msg(dt_test_job_log_has(&J, "chief", "lost its model; restoring it") &&
                      dt_test_job_log_has(&J, "chief", "rows of table logistic/weight"),
                  "the chief did not restore ps 1's rows; logs:%s", dt_test_job_report(&J));
    ck_assert_msg(dt_test_job_log_has(&J, "ps1b", "tables restored; serving"),
                  "ps 1 did not take its rows back; logs:%s", dt_test_job_report(&J));
}

START_TEST(ps_killed_restored) {
    ps_killed(NULL);
}
END_TEST

/* ---- eval, predict and eval_data on a sparse model's checkpoint --------- */

/* Held-out rows: the training file's features and one (99) no training
 * row has, whose row the checkpoint does not hold (it reads as 0). With
 * labeled 0 the same rows without their labels. */
static void write_held_out(const char *path, int labeled) {
    static const char *const rows[] = {"+1 1:0.5 2:-0.3 99:1.0", "-1 3:0.2 4:0.4 7:-0.1",
                                       "+1 2:0.9 5:0.1",         "-1 6:-0.6 8:0.3 99:-2",
                                       "+1 1:-0.2 3:0.7 60:0.5", "-1 10:0.4 20:0.1 30:-0.9"};
    char text[1024];
    size_t off = 0;
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        const char *row = labeled ? rows[i] : strchr(rows[i], ' ') + 1;
        off += (size_t)snprintf(text + off, sizeof text - off, "%s\n", row);
    }
    ck_assert_int_eq(dt_test_write_file(path, text), 0);
}

/* The model of a loaded checkpoint computed in this process from its rows
 * (lib/sparse_model): the held-out file's loss and accuracy, and each
 * row's P(y = 1) into p1 (room for the file's rows). */
static void expected_scores(const dt_job *job, const dt_tensors *ts, const char *held_out,
                            double *loss, double *accuracy, float *p1, int64_t *rows) {
    dt_err err;
    dt_err_clear(&err);
    dt_sparse_model_config mc;
    dt_table_config tc;
    ck_assert_msg(dt_job_sparse_model(job, &mc, &tc, &err) == 0, "%s", err.msg);
    dt_tensor specs[DT_SPARSE_MODEL_MAX_VARS];
    int count = 0;
    ck_assert_int_eq(dt_sparse_model_specs(&mc, specs, &count, &tc, &err), 0);
    dt_tensors vars;
    ck_assert_int_eq(dt_tensors_init(&vars, specs, count, &err), 0);
    for (int i = 0; i < count; i++) {
        const dt_tensor *x = dt_tensors_find(ts, vars.items[i].name);
        ck_assert_msg(x && x->nbytes == vars.items[i].nbytes, "no %s", vars.items[i].name);
        memcpy(vars.items[i].data, x->data, x->nbytes);
    }
    dt_sparse_set set;
    memset(&set, 0, sizeof set);
    ck_assert_msg(dt_job_read_sparse(job, held_out, 1, 0, 1, &set, &err) == 0, "%s", err.msg);
    dt_sparse_batch b;
    dt_sparse_set_slice(&set, 0, (int)set.rows, &b);
    dt_sparse_index ix;
    memset(&ix, 0, sizeof ix);
    ck_assert_int_eq(dt_sparse_index_build(&ix, &b, &err), 0);
    float *rows_of_ids = calloc((size_t)ix.n, sizeof *rows_of_ids);
    ck_assert_ptr_nonnull(rows_of_ids);
    for (int64_t k = 0; k < ix.n; k++) {
        double w = table_weight(ts, ix.ids[k]);
        rows_of_ids[k] = isnan(w) ? 0.0f : (float)w; /* a row never pushed: zeros */
    }
    dt_sparse_model *m = NULL;
    ck_assert_int_eq(dt_sparse_model_new(&mc, &m, &err), 0);
    ck_assert_msg(dt_sparse_model_evaluate(m, &vars, &b, &ix, rows_of_ids, loss, accuracy, &err) ==
                      0,
                  "%s", err.msg);
    ck_assert_int_eq(dt_sparse_model_predict(m, &vars, &b, &ix, rows_of_ids, p1, &err), 0);
    *rows = set.rows;
    dt_sparse_model_free(m);
    free(rows_of_ids);
    dt_sparse_index_deinit(&ix);
    dt_sparse_set_deinit(&set);
    dt_tensors_deinit(&vars);
}

/* predict's CSV "class,p0,p1" lines: each row's p1 into p1; returns the
 * rows read. */
static int64_t read_predictions(const char *path, float *p1, int64_t cap) {
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "no %s", path);
    char line[256];
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    ck_assert_str_eq(line, "class,p0,p1\n");
    int64_t n = 0;
    while (fgets(line, sizeof line, f)) {
        int cls;
        float p0, q;
        ck_assert_msg(sscanf(line, "%d,%g,%g", &cls, &p0, &q) == 3, "%s: %s", path, line);
        ck_assert_int_lt(n, cap);
        ck_assert_int_eq(cls, q > 0.5f);
        p1[n++] = q;
    }
    fclose(f);
    return n;
}

/* A copy of ts into path (with meta), tensor `name` replaced by count
 * elements of data (shape (count) or (count, dim)); name NULL: unchanged. */
static void save_edited(const dt_tensors *ts, const dt_safetensors_meta *meta, const char *path,
                        const char *name, const void *data, int64_t count) {
    dt_tensor specs[32];
    ck_assert_int_le(ts->count, 32);
    for (int i = 0; i < ts->count; i++) {
        specs[i] = ts->items[i];
        specs[i].data = NULL;
        if (name && strcmp(specs[i].name, name) == 0) {
            specs[i].shape[0] = count;
            specs[i].nbytes = (size_t)dt_tensor_numel(&specs[i]) * 8; /* I64 ids */
        }
    }
    dt_err err;
    dt_err_clear(&err);
    dt_tensors out;
    ck_assert_int_eq(dt_tensors_init(&out, specs, ts->count, &err), 0);
    for (int i = 0; i < ts->count; i++) {
        int edited = name && strcmp(specs[i].name, name) == 0;
        memcpy(out.items[i].data, edited ? data : ts->items[i].data, out.items[i].nbytes);
    }
    ck_assert_msg(dt_safetensors_save(path, &out, meta, &err) == 0, "%s", err.msg);
    dt_tensors_deinit(&out);
}

/* Runs `dtrain eval --checkpoint path` and expects exit status want_status
 * with a line of stderr naming the file and each needle. */
static void expect_eval_fails(const char *path, const char *held_out, const char *n1,
                              const char *n2) {
    const char *args[] = {"eval", "--checkpoint", path, "--data", held_out, NULL};
    int status = dt_test_job_command(&J, args, JOB_TIMEOUT_MS);
    ck_assert_msg(status != 0, "eval of %s exited 0: %s", path, J.out);
    dt_test_job_expect_error(&J, status, status, path, n1, n2);
}

/* Issue 32's best model, for a sparse model: the chief's lowest
 * evaluation is kept in model.best.safetensors with its table's rows (the
 * chief is the only worker, so the rows are the ones it scored), and
 * `dtrain eval` takes it by default, to the chief's loss and accuracy. */
static void check_best_model(void) {
    char *log = dt_test_job_read_log(&J, "chief");
    const char *needle = "chief: eval at global_step ";
    long long best_step = -1;
    double best_loss = 0, best_acc = 0;
    for (const char *p = log; p && (p = strstr(p, needle)) != NULL; p += strlen(needle)) {
        long long st;
        double l, a;
        if (sscanf(p + strlen(needle), "%lld: loss %lf accuracy %lf", &st, &l, &a) != 3) continue;
        if (best_step < 0 || l < best_loss) best_step = st, best_loss = l, best_acc = a;
    }
    free(log);
    ck_assert_msg(best_step >= 0, "no chief evaluation; logs:%s", dt_test_job_report(&J));
    char best[1300];
    snprintf(best, sizeof best, "%s/model.best.safetensors", J.log_dir);
    dt_tensors ts;
    dt_safetensors_meta m;
    memset(&m, 0, sizeof m);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_safetensors_load(best, &ts, &m, &err) == 0, "%s", err.msg);
    ck_assert_msg(m.global_step == best_step && m.has_eval_loss &&
                      fabs(m.eval_loss - best_loss) <= 1e-5 * fabs(best_loss),
                  "best model: step %lld loss %.9g; the chief's lowest: %lld %.6g",
                  (long long)m.global_step, m.eval_loss, best_step, best_loss);
    ck_assert_msg(dt_tensors_find(&ts, "logistic/weight/ids") &&
                      dt_tensors_find(&ts, "logistic/weight/values"),
                  "the best model has no table rows");
    ck_assert_msg(!dt_tensors_find(&ts, "logistic/weight/accumulator"),
                  "the best model holds the table's slot: a model to serve has none");
    dt_tensors_deinit(&ts);
    dt_safetensors_meta_deinit(&m);
    const char *args[] = {"eval", "--log-dir", J.log_dir, NULL};
    ck_assert_msg(dt_test_job_command(&J, args, JOB_TIMEOUT_MS) == 0, "eval: %s", J.err);
    char want[160];
    snprintf(want, sizeof want, "loss %.6g accuracy %.4f examples 6 global_step %lld", best_loss,
             best_acc, best_step);
    ck_assert_msg(strstr(J.out, want) && strstr(J.err, "the best model, "),
                  "eval printed \"%s\", not \"%s\"; stderr: %s", J.out, want, J.err);
}

/* A sparse job trained by real processes (2 ps tasks, hashed ids, adagrad
 * so the file carries slots too) with eval_data: the chief's evaluations,
 * dtrain eval and dtrain predict on its final checkpoint give the loss and
 * predictions this process computes from the checkpoint's rows; broken
 * checkpoints are refused naming the file and the tensor. */
START_TEST(eval_predict_checkpoint) {
    char train[1100], held_out[1200], unlabeled[1200], eval_set[1300];
    write_libsvm(WIDE_FEATURES, train, sizeof train);
    snprintf(held_out, sizeof held_out, "%s/held_out.svm", J.dir);
    snprintf(unlabeled, sizeof unlabeled, "%s/unlabeled.svm", J.dir);
    write_held_out(held_out, 1);
    write_held_out(unlabeled, 0);
    snprintf(eval_set, sizeof eval_set, "eval_data=%s", held_out);
    const char *sets[] = {"hash_bits=20",
                          "batch_size=4",
                          "optimizer=adagrad",
                          "max_steps=30",
                          "eval_steps=10",
                          eval_set,
                          NULL};
    job_sets(train, sets);
    dt_test_job_cluster(&J, 2, 1);
    pid_t ev = dt_test_job_start(&J, "evaluator", 0, "evaluator");
    ck_assert_msg(dt_test_job_wait_log(&J, "evaluator", "watching", JOB_TIMEOUT_MS, ev),
                  "the evaluator did not start; logs:%s", dt_test_job_report(&J));
    dt_test_job_run(&J, "", JOB_TIMEOUT_MS);
    dt_test_job_expect_exit(&J, ev, "evaluator", JOB_TIMEOUT_MS, 0);
    dt_tensors ts;
    char path[2048];
    ck_assert_int_eq(dt_test_job_load_latest(&J, 30, &ts, path, sizeof path), 30);
    dt_job job;
    dt_test_job_config(&J, &job);
    double loss = NAN, accuracy = NAN;
    float p1[16], got[16];
    int64_t n = 0;
    expected_scores(&job, &ts, held_out, &loss, &accuracy, p1, &n);
    ck_assert_int_eq(n, 6);
    ck_assert(loss > 0.01 && loss < 5); /* a model, not zeros: log 2 would be 0.693147 */
    ck_assert(fabs(loss - log(2.0)) > 1e-3);

    /* The chief scored the same model at the end (its pull of the final step). */
    char want[160];
    snprintf(want, sizeof want,
             "chief: eval at global_step 30: loss %.6g accuracy %.4f on 6 examples", loss,
             accuracy);
    ck_assert_msg(dt_test_job_log_has(&J, "chief", want), "no \"%s\"; logs:%s", want,
                  dt_test_job_report(&J));
    ck_assert_msg(dt_test_job_log_has(&J, "chief", "chief: eval at global_step 10: loss"),
                  "no evaluation at step 10; logs:%s", dt_test_job_report(&J));
    /* So did the evaluator, from the checkpoint. */
    snprintf(want, sizeof want, "evaluator: global_step 30: loss %.6g accuracy %.4f on 6 examples",
             loss, accuracy);
    ck_assert_msg(dt_test_job_log_has(&J, "evaluator", want), "no \"%s\"; logs:%s", want,
                  dt_test_job_report(&J));

    /* dtrain eval, with the job from the checkpoint. */
    const char *eval_args[] = {"eval", "--log-dir", J.log_dir, "--latest", NULL};
    ck_assert_msg(dt_test_job_command(&J, eval_args, JOB_TIMEOUT_MS) == 0, "eval: %s", J.err);
    snprintf(want, sizeof want, "loss %.6g accuracy %.4f examples 6 global_step 30", loss,
             accuracy);
    ck_assert_msg(strstr(J.out, want), "eval printed \"%s\", not \"%s\"", J.out, want);
    check_best_model();

    /* dtrain predict, with labels and without: the model's P(y = 1) to the bit. */
    for (int pass = 0; pass < 2; pass++) {
        char out[1300];
        snprintf(out, sizeof out, "%s/pred%d.csv", J.dir, pass);
        const char *args[] = {
            "predict", "--checkpoint", path, "--data", pass ? unlabeled : held_out, "--out", out,
            NULL};
        ck_assert_msg(dt_test_job_command(&J, args, JOB_TIMEOUT_MS) == 0, "predict: %s", J.err);
        ck_assert_int_eq(read_predictions(out, got, 16), 6);
        for (int i = 0; i < 6; i++)
            ck_assert_msg(got[i] == p1[i], "row %d: predict %.9g, in-process %.9g", i, got[i],
                          p1[i]);
    }

    /* Broken checkpoints, each refused naming the file and the tensor. */
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    dt_tensors again;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_safetensors_load(path, &again, &meta, &err), 0);
    dt_tensors_deinit(&again);
    const dt_tensor *ids = dt_tensors_find(&ts, "logistic/weight/ids");
    ck_assert_ptr_nonnull(ids);
    const int64_t held = ids->shape[0];
    int64_t *edited = malloc((size_t)held * sizeof *edited);
    ck_assert_ptr_nonnull(edited);
    char bad[1300];

    snprintf(bad, sizeof bad, "%s/truncated.safetensors", J.dir);
    save_edited(&ts, &meta, bad, "logistic/weight/ids", ids->data, held - 1);
    expect_eval_fails(bad, held_out, "logistic/weight/values", "but logistic/weight/ids has");

    memcpy(edited, ids->data, (size_t)held * sizeof *edited);
    edited[held - 1] = (int64_t)1 << 20; /* the table has 2^20 rows */
    snprintf(bad, sizeof bad, "%s/range.safetensors", J.dir);
    save_edited(&ts, &meta, bad, "logistic/weight/ids", edited, held);
    expect_eval_fails(bad, held_out, "logistic/weight/ids", "out of range");

    memcpy(edited, ids->data, (size_t)held * sizeof *edited);
    edited[1] = edited[0]; /* a duplicate */
    snprintf(bad, sizeof bad, "%s/duplicate.safetensors", J.dir);
    save_edited(&ts, &meta, bad, "logistic/weight/ids", edited, held);
    expect_eval_fails(bad, held_out, "logistic/weight/ids", "must increase");

    memcpy(edited, ids->data, (size_t)held * sizeof *edited);
    int64_t first = edited[0];
    edited[0] = edited[2];
    edited[2] = first; /* unsorted */
    snprintf(bad, sizeof bad, "%s/unsorted.safetensors", J.dir);
    save_edited(&ts, &meta, bad, "logistic/weight/ids", edited, held);
    expect_eval_fails(bad, held_out, "logistic/weight/ids", "must increase");
    free(edited);

    /* A dense job's checkpoint given to the sparse job, and the sparse
     * checkpoint to a dense job. */
    char dense_dir[1300], sparse_cfg[1300];
    snprintf(dense_dir, sizeof dense_dir, "%s/dense", J.dir);
    ck_assert_int_eq(mkdir(dense_dir, 0755), 0);
    zero_start(dense_dir);
    char dense_ckpt[1400];
    snprintf(dense_ckpt, sizeof dense_ckpt, "%s/model.ckpt-0.safetensors", dense_dir);
    snprintf(sparse_cfg, sizeof sparse_cfg, "%s/sparse.json", J.dir);
    char cfg_text[1600];
    snprintf(cfg_text, sizeof cfg_text,
             "{\"model\": \"logistic\", \"data\": \"libsvm\", \"sparse\": \"on\", \"hash_bits\": "
             "20, \"train_data\": \"%s\", \"max_steps\": 30}",
             train);
    ck_assert_int_eq(dt_test_write_file(sparse_cfg, cfg_text), 0);
    const char *dense_args[] = {"eval",     "--config", sparse_cfg, "--checkpoint",
                                dense_ckpt, "--data",   held_out,   NULL};
    int status = dt_test_job_command(&J, dense_args, JOB_TIMEOUT_MS);
    dt_test_job_expect_error(&J, status, status, dense_ckpt, "\"logistic/weight\" is a dense",
                             "sparse");
    ck_assert_int_ne(status, 0);

    const char *to_dense[] = {"eval",        "--checkpoint", path,          "--set",
                              "sparse=off",  "--set",        "hash_bits=0", "--set",
                              "features=60", "--data",       train,         NULL};
    status = dt_test_job_command(&J, to_dense, JOB_TIMEOUT_MS);
    dt_test_job_expect_error(&J, status, status, path, "logistic/weight/ids",
                             "the job's model is dense");
    ck_assert_int_ne(status, 0);
    dt_safetensors_meta_deinit(&meta);
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
    dt_sparse_ckpt *ck = NULL;
    dt_sparse_set set;
    memset(&set, 0, sizeof set);
    double loss = NAN, accuracy = NAN;
    int rc = dt_sparse_ckpt_open("sparse_e2e", &job, ts, "the checkpoint", &ck, &err);
    if (rc == 0) rc = dt_job_read_sparse(&job, eval, 1, 0, 1, &set, &err);
    if (rc == 0)
        rc = dt_sparse_scorer_evaluate(dt_sparse_ckpt_scorer(ck), &set, &loss, &accuracy, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    ck_assert_int_eq(set.rows, EMB_EVAL);
    dt_sparse_set_deinit(&set);
    dt_sparse_ckpt_free(ck);
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

/* dtrain predict on Criteo rows with their labels and without (39 fields,
 * the label dropped from each line): the same predictions, byte for byte,
 * a line per row. */
static void expect_same_predictions(const char *ckpt, const char *eval) {
    size_t len = 0;
    char *text = dt_test_read_file(eval, &len);
    ck_assert_ptr_nonnull(text);
    char *bare = malloc(len + 1);
    ck_assert_ptr_nonnull(bare);
    size_t n = 0, rows = 0;
    for (const char *line = text; *line; rows++) {
        const char *tab = strchr(line, '\t'), *nl = strchr(line, '\n');
        ck_assert(tab && nl && tab < nl);
        memcpy(bare + n, tab + 1, (size_t)(nl - tab));
        n += (size_t)(nl - tab);
        line = nl + 1;
    }
    bare[n] = '\0';
    char unlabeled[1200], out[2][1200];
    snprintf(unlabeled, sizeof unlabeled, "%s/eval-unlabeled.txt", J.dir);
    ck_assert_int_eq(dt_test_write_file(unlabeled, bare), 0);
    char *got[2];
    for (int k = 0; k < 2; k++) {
        snprintf(out[k], sizeof out[k], "%s/pred%d.csv", J.dir, k);
        const char *args[] = {"predict", "--checkpoint", ckpt, "--data", k ? unlabeled : eval,
                              "--out",   out[k],         NULL};
        ck_assert_msg(dt_test_job_command(&J, args, JOB_TIMEOUT_MS) == 0, "predict: %s", J.err);
        ck_assert_msg(strstr(J.err, k ? "no labels in the data" : "labels in the data"),
                      "predict did not say what it read: %s", J.err);
        size_t got_len = 0;
        got[k] = dt_test_read_file(out[k], &got_len);
        ck_assert_ptr_nonnull(got[k]);
    }
    ck_assert_str_eq(got[0], got[1]);
    size_t lines = 0;
    for (const char *c = got[0]; *c; c++)
        lines += *c == '\n';
    ck_assert_uint_eq(lines, rows + 1); /* the header, then a line per row */
    free(got[0]);
    free(got[1]);
    free(bare);
    free(text);
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
    expect_same_predictions(pa, eval);

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
    /* 60 batches of 64 of the 4,000 rows, shuffled: about 7,000 rows
     * pushed (40 gave 5,396, short of the mark). */
    const char *first[] = {"embedding_dim=64", "hidden=[8]", "max_steps=60", NULL};
    embedding_sets(train, first);
    dt_test_job_cluster(&J, 1, 1);
    dt_test_job_run(&J, "-first", JOB_TIMEOUT_MS);
    dt_tensors a;
    char pa[2048];
    ck_assert_int_eq(dt_test_job_load_latest(&J, 60, &a, pa, sizeof pa), 60);
    const dt_tensor *values = dt_tensors_find(&a, "embedding/table/values");
    ck_assert_msg(values && values->ndim == 2 && values->shape[1] == 64, "%s: no (n, 64) rows", pa);
    const int64_t n = values->shape[0];
    ck_assert_msg(n * (8 + 64 * 4 * 3) > (4 << 20), "%lld rows: under 4 MiB, proving nothing",
                  (long long)n);
    const char *again[] = {"embedding_dim=64", "hidden=[8]", "max_steps=61", NULL};
    embedding_sets(train, again);
    dt_test_job_cluster(&J, 1, 1);
    dt_test_job_run(&J, "-again", JOB_TIMEOUT_MS);
    char want[96];
    snprintf(want, sizeof want, "restored %lld rows of table embedding/table", (long long)n);
    ck_assert_msg(dt_test_job_log_has(&J, "chief-again", want), "no \"%s\"; logs:%s", want,
                  dt_test_job_report(&J));
    ck_assert_int_eq(dt_test_ckpt_max(J.log_dir), 61);
    dt_tensors_deinit(&a);
}
END_TEST

/* libsvm indices as written, past what an int holds: "features" 2^36, a
 * table of that many rows (sparse by "auto": more than 2^20 features),
 * rows made for the indices the file uses, saved under their ids (index -
 * 1), and dtrain eval scores the checkpoint. */
START_TEST(feature_ids_past_int) {
    static const int64_t idx[4] = {1, 3000000000LL, ((int64_t)1 << 33) + 7, (int64_t)1 << 36};
    char train[1100];
    snprintf(train, sizeof train, "%s/huge.svm", J.dir);
    char text[2048];
    size_t off = 0;
    for (int i = 0; i < 8; i++)
        off += (size_t)snprintf(text + off, sizeof text - off, "%s %lld:1 %lld:0.5 %lld:-1\n",
                                i % 2 ? "+1" : "-1", (long long)idx[i % 2], (long long)idx[2],
                                (long long)idx[3]);
    ck_assert_int_eq(dt_test_write_file(train, text), 0);
    const char *sets[] = {"features=68719476736", "batch_size=4", "optimizer=adagrad",
                          "max_steps=6", NULL};
    job_sets(train, sets);
    dt_test_job_cluster(&J, 2, 1);
    dt_test_job_run(&J, "", JOB_TIMEOUT_MS);
    dt_tensors ts;
    char path[2048];
    ck_assert_int_eq(dt_test_job_load_latest(&J, 6, &ts, path, sizeof path), 6);
    const dt_tensor *ids = dt_tensors_find(&ts, "logistic/weight/ids");
    ck_assert_msg(ids && ids->shape[0] == 4, "%s: want the 4 rows the file uses", path);
    for (int k = 0; k < 4; k++)
        ck_assert_int_eq(((const int64_t *)ids->data)[k], idx[k] - 1);
    dt_tensors_deinit(&ts);
    const char *eval[] = {"eval", "--log-dir", J.log_dir, "--data", train, NULL};
    ck_assert_msg(dt_test_job_command(&J, eval, JOB_TIMEOUT_MS) == 0, "eval: %s", J.err);
    ck_assert_msg(strstr(J.out, "examples 8 global_step 6"), "eval printed \"%s\"", J.out);
}
END_TEST

/* ---- pipeline_push ------------------------------------------------------------ */

/* ps `ps`'s Status, through a client of the test's own. */
static void ps_status(int ps, dt_msg_status_resp *st) {
    dt_test_probe probe;
    dt_err err;
    dt_err_clear(&err);
    dt_test_probe_open(&probe, J.cluster, 10000);
    int rc = dt_ps_client_status(probe.client, ps, st, &err);
    dt_test_probe_close(&probe);
    ck_assert_msg(rc == 0, "status of ps %d: %s", ps, err.msg);
}

/* The embedding job of embedding_criteo (900 steps on train, 2 ps, 1 or
 * 2 workers) with pipeline_push on or off, in a log dir of its own; ps 0
 * keeps serving after the job, so st gets its Status (the staleness
 * histogram). Returns the held-out log loss of the final checkpoint, which
 * must hold the table's rows (*rows of them). */
static double pipelined_run(int pipeline, int workers, const char *train, const char *eval,
                            dt_msg_status_resp *st, int64_t *rows) {
    char tag[32];
    snprintf(tag, sizeof tag, "%s%d", pipeline ? "piped" : "plain", workers);
    static char log_dir[1200];
    snprintf(J.log_dir, sizeof J.log_dir, "%s/%s", J.dir, tag);
    snprintf(log_dir, sizeof log_dir, "log_dir=%s", J.log_dir);
    const char *sets[] = {
        "embedding_dim=4", "hidden=[16]",
        "max_steps=900",   pipeline ? "pipeline_push=true" : "pipeline_push=false",
        log_dir,           NULL};
    embedding_sets(train, sets);
    dt_test_job_cluster(&J, 2, workers);
    static const char *const roles[4] = {"ps0", "ps1", "chief", "worker1"};
    static const char *const who[3] = {"ps 1", "chief", "worker 1"};
    char names[4][48];
    for (int k = 0; k < 4; k++)
        snprintf(names[k], sizeof names[k], "%s-%s", roles[k], tag);
    pid_t ps0 = dt_test_job_start_serving(&J, "ps", 0, names[0]);
    pid_t pids[3] = {dt_test_job_start(&J, "ps", 1, names[1]),
                     dt_test_job_start(&J, "worker", 0, names[2]), 0};
    if (workers > 1) pids[2] = dt_test_job_start(&J, "worker", 1, names[3]);
    dt_test_job_expect_done(&J, pids, who, 1 + workers, JOB_TIMEOUT_MS);
    ck_assert_msg(dt_test_alive(ps0), "--keep-serving ps 0 exited; logs:%s",
                  dt_test_job_report(&J));
    ps_status(0, st);
    ck_assert_int_eq(dt_test_kill(ps0, SIGTERM), 0);
    dt_test_job_expect_exit(&J, ps0, "ps 0 after SIGTERM", EXIT_TIMEOUT_MS, 128 + SIGTERM);
    /* Every worker trained: else the job was one worker's. */
    for (int k = 2; k < 2 + workers; k++)
        ck_assert_msg(dt_test_job_log_has(&J, names[k], ": step "), "%s took no step; logs:%s",
                      names[k], dt_test_job_report(&J));
    dt_tensors ts;
    char path[2048];
    ck_assert_int_eq(dt_test_job_load_latest(&J, 900, &ts, path, sizeof path), 900);
    const dt_tensor *ids = dt_tensors_find(&ts, "embedding/table/ids");
    const dt_tensor *values = dt_tensors_find(&ts, "embedding/table/values");
    ck_assert_msg(ids && values && dt_tensors_find(&ts, "embedding/table/m"),
                  "%s lacks the table's ids, values or Adam's slots", path);
    *rows = ids->shape[0];
    ck_assert(values->ndim == 2 && values->shape[0] == *rows && values->shape[1] == EMB_DIM);
    const double loss = embedding_loss(&ts, eval);
    dt_tensors_deinit(&ts);
    return loss;
}

/* Sum of a Status's staleness histogram and its mean. */
static int64_t pushes_in(const dt_msg_status_resp *st, double *mean) {
    int64_t n = 0, sum = 0;
    for (int k = 0; k < st->num_staleness_counts; k++) {
        n += st->staleness_counts[k];
        sum += (int64_t)k * st->staleness_counts[k];
    }
    *mean = n > 0 ? (double)sum / (double)n : 0;
    return n;
}

/* pipeline_push on a sparse model (2 ps, 2 workers): each worker's next
 * batch pulls its rows and makes its gradient while its push is in flight.
 * Every push but a worker's first is then at least one step stale (the
 * push before it landed after the values it began on); the model learns
 * as well as without (held-out log loss under the base rate's, and close
 * to the unpipelined run's), and the checkpoint holds the table's rows. */
START_TEST(sparse_pipelined) {
    char train[1100], eval[1100];
    const double rate = gen_criteo(EMB_TRAIN, EMB_EVAL, train, eval, sizeof train);
    const double base = -(rate * log(rate) + (1 - rate) * log(1 - rate));
    dt_msg_status_resp plain, piped;
    int64_t plain_rows = 0, piped_rows = 0;
    const double plain_loss = pipelined_run(0, 2, train, eval, &plain, &plain_rows);
    const double piped_loss = pipelined_run(1, 2, train, eval, &piped, &piped_rows);
    double plain_mean = 0, piped_mean = 0;
    const int64_t plain_n = pushes_in(&plain, &plain_mean);
    const int64_t piped_n = pushes_in(&piped, &piped_mean);
    fprintf(stderr,
            "sparse_e2e: embedding model, 2 ps, 2 workers, 900 steps: held-out log loss %.4f "
            "pipelined, %.4f not (base rate's %.4f); %lld / %lld rows held; staleness 0: %lld of "
            "%lld pushes pipelined, %lld of %lld not; mean %.2f against %.2f\n",
            piped_loss, plain_loss, base, (long long)piped_rows, (long long)plain_rows,
            (long long)piped.staleness_counts[0], (long long)piped_n,
            (long long)plain.staleness_counts[0], (long long)plain_n, piped_mean, plain_mean);
    /* Every push counted once: exactly the job's steps (async: a push a
     * step), pipelined or not. */
    ck_assert_int_eq(plain.global_step, 900);
    ck_assert_int_eq(piped.global_step, 900);
    ck_assert_int_eq(plain_n, 900);
    ck_assert_int_eq(piped_n, 900);
    ck_assert_int_eq(piped.pushes_applied, 900);
    /* Only a worker's first push can be fresh (nothing of its own in
     * flight before it; no ps restarted, so no pull in between). */
    ck_assert_msg(piped.staleness_counts[0] <= 2,
                  "%lld pipelined pushes 0 steps stale, at most one a worker",
                  (long long)piped.staleness_counts[0]);
    ck_assert_int_gt(piped_rows, 1000); /* most of the 3,376 values were pushed */
    ck_assert_int_gt(plain_rows, 1000);
    /* Both learn. Asynchronous runs differ in the order of pushes: in file
     * order, measured 0.496 to 0.529 unpipelined and 0.503 to 0.534
     * pipelined; with shuffled batches, 0.500 to 0.519 and 0.501 to 0.555
     * over six runs each (a mean staleness of 3 against 1 on Adam costs
     * up to 0.04 in 900 steps), so the pipelined run is held under the base
     * rate, not 0.01 below it; sparse_pipelined_one_worker holds the sharper
     * bound. */
    ck_assert_msg(plain_loss < base - 0.01 && piped_loss < base,
                  "held-out log loss %.4f (pipelined) and %.4f, base rate's %.4f", piped_loss,
                  plain_loss, base);
    ck_assert_msg(piped_loss < plain_loss + 0.05, "pipelined log loss %.4f against %.4f",
                  piped_loss, plain_loss);
}
END_TEST

/* One worker: pipelined, every push but its first exactly one step stale
 * (its previous push landed between the values it began on and it), none
 * unpipelined; the two learn alike: a batch's rows' gradient pushed with
 * another batch's ids would not. How alike depends on the order the
 * batches come in: over the shuffle seeds 1, 2, 3 and 5 the pipelined loss
 * was 0.0005, 0.020, 0.0013 and 0.013 above the unpipelined one (Adam,
 * 900 steps, each gradient one step staler), so the bound is 0.03, where
 * a mismatched push ends near the base rate's 0.56. */
START_TEST(sparse_pipelined_one_worker) {
    char train[1100], eval[1100];
    gen_criteo(EMB_TRAIN, EMB_EVAL, train, eval, sizeof train);
    dt_msg_status_resp plain, piped;
    int64_t plain_rows = 0, piped_rows = 0;
    const double plain_loss = pipelined_run(0, 1, train, eval, &plain, &plain_rows);
    const double piped_loss = pipelined_run(1, 1, train, eval, &piped, &piped_rows);
    fprintf(stderr,
            "sparse_e2e: embedding model, 2 ps, 1 worker, 900 steps: held-out log loss %.4f "
            "pipelined, %.4f not; staleness 0/1: %lld/%lld pipelined, %lld/%lld not\n",
            piped_loss, plain_loss, (long long)piped.staleness_counts[0],
            (long long)piped.staleness_counts[1], (long long)plain.staleness_counts[0],
            (long long)plain.staleness_counts[1]);
    ck_assert_int_eq(plain.staleness_counts[0], 900);
    ck_assert_int_eq(piped.staleness_counts[0], 1);
    ck_assert_int_eq(piped.staleness_counts[1], 899);
    ck_assert_int_eq(piped.pushes_applied, 900);
    ck_assert_int_eq(piped_rows, plain_rows); /* the same batches' ids */
    ck_assert_msg(fabs(piped_loss - plain_loss) < 0.03, "pipelined log loss %.4f against %.4f",
                  piped_loss, plain_loss);
}
END_TEST

/* ps_killed_restored with pipelined workers: a row pull made while a push
 * is in flight may meet the dead or restarted ps (its new incarnation),
 * and is made again, with retries, once the push is back. */
START_TEST(sparse_pipelined_ps_killed) {
    ps_killed("pipeline_push=true");
}
END_TEST

/* A pipelined worker SIGKILLed mid-job (maybe with a push in flight)
 * restarts, rejoins and trains, and the job ends with every step and the
 * table's rows. */
START_TEST(sparse_pipelined_worker_killed) {
    pid_t started[4];
    /* The chief stops itself at its local step 20 and worker 1 at its 10th
     * (DT_TEST_WORKER_STOP_AT, lib/worker.h): neither can end the job
     * before worker 1 dies, however fast the machine runs it. */
    start_wide_job_stopping("pipeline_push=true", NULL, started, "20", "10");
    pid_t chief = started[2], worker = started[3];
    ck_assert_msg(
        dt_test_wait_stopped(worker, JOB_TIMEOUT_MS) && dt_test_wait_stopped(chief, JOB_TIMEOUT_MS),
        "the chief and worker 1 did not stop themselves; logs:%s", dt_test_job_report(&J));
    ck_assert_msg(dt_test_job_log_has(&J, "worker1", ": step 10 "),
                  "worker 1 never trained; logs:%s", dt_test_job_report(&J));
    /* The chief is held while worker 1 dies, and from its next step line
     * until the restarted worker trains: alone it could end the job first
     * (a worker that finds the job done exits 0 without a step). */
    ck_assert_int_eq(kill(worker, SIGKILL), 0);
    dt_test_job_expect_exit(&J, worker, "killed worker 1", EXIT_TIMEOUT_MS, -SIGKILL);
    /* The job goes on without it before it comes back. */
    size_t seen = dt_test_job_log_length(&J, "chief");
    dt_test_job_release(&J, chief, "chief");
    ck_assert_msg(dt_test_job_wait_log_after(&J, "chief", seen, ": step ", chief, JOB_TIMEOUT_MS),
                  "the chief stopped training after worker 1 died; logs:%s",
                  dt_test_job_report(&J));
    dt_test_job_hold(&J, chief, "chief");
    pid_t worker2 = dt_test_job_start(&J, "worker", 1, "worker1b");
    ck_assert_msg(dt_test_job_wait_log(&J, "worker1b", ": step ", JOB_TIMEOUT_MS, worker2),
                  "restarted worker 1 did not train; logs:%s", dt_test_job_report(&J));
    dt_test_job_release(&J, chief, "chief");
    pid_t pids[4] = {started[0], started[1], chief, worker2};
    const char *names[4] = {"ps 0", "ps 1", "chief", "restarted worker 1"};
    expect_wide_done(pids, names);
}
END_TEST

/* ---- epochs: each worker's shard, each row `epochs` times ------------------ */

/* The local steps a worker's log says it pushed ("training done after N
 * local steps"); asserts the line is there. */
static int64_t local_steps_of(const char *log_name) {
    char *log = dt_test_job_read_log(&J, log_name);
    const char *at = strstr(log, "training done after ");
    long long n = -1;
    if (at) sscanf(at, "training done after %lld local steps", &n);
    free(log);
    ck_assert_msg(n >= 0, "%s: no \"training done after\" line; logs:%s", log_name,
                  dt_test_job_report(&J));
    return n;
}

/* The sets of the epochs tests on training file train: batches of 8 for
 * 2 epochs. */
static void epoch_job(const char *train, const char *const *extra) {
    const char *sets[10] = {"sparse=on", "features=8", "batch_size=8", "epochs=2"};
    int n = 4;
    for (int i = 0; extra && extra[i] && n < 9; i++)
        sets[n++] = extra[i];
    sets[n] = NULL;
    job_sets(train, sets);
}

/* The 64-row file in batches of 8 for 2 epochs, 2 workers of 32 rows each:
 * max_steps 16, 4 batches a pass over a shard; num_ps ps tasks. */
static void epoch_sets_ps(int num_ps, const char *const *extra) {
    static char train[1100];
    write_libsvm(N_FEATURES, train, sizeof train);
    epoch_job(train, extra);
    dt_test_job_cluster(&J, num_ps, 2);
}

static void epoch_sets(const char *const *extra) {
    epoch_sets_ps(1, extra);
}

/* async with "epochs": the chief, started alone, makes its shard's 2
 * passes (8 steps) and waits instead of making all 16 global steps on its
 * own rows; worker 1, started only then, makes its 8. Before, the first
 * worker to start trained on its shard again and again, and the other's
 * rows were seen less or never (2 workers on 2M generated Criteo rows:
 * 1.6% to 3% worse held-out log loss, by how far apart they started). */
static void per_shard_run(const char *pipeline) {
    const char *extra[] = {"sync_timeout_secs=120", pipeline, NULL};
    epoch_sets(extra);
    pid_t ps = dt_test_job_start(&J, "ps", 0, "ps0");
    pid_t chief = dt_test_job_start(&J, "worker", 0, "chief");
    ck_assert_msg(
        dt_test_job_wait_log(&J, "chief", "waiting for the other workers to finish theirs",
                             JOB_TIMEOUT_MS, chief),
        "the chief did not stop after its shard's epochs; logs:%s", dt_test_job_report(&J));
    pid_t worker = dt_test_job_start(&J, "worker", 1, "worker1");
    pid_t pids[3] = {ps, chief, worker};
    const char *names[3] = {"ps 0", "chief", "worker 1"};
    dt_test_job_expect_done(&J, pids, names, 3, JOB_TIMEOUT_MS);
    ck_assert_int_eq(local_steps_of("chief"), 8);
    ck_assert_int_eq(local_steps_of("worker1"), 8);
    dt_tensors ts;
    ck_assert_int_eq(dt_test_job_load_latest(&J, 16, &ts, NULL, 0), 16);
    dt_tensors_deinit(&ts);
}

START_TEST(epochs_per_shard) {
    per_shard_run("pipeline_push=false");
}
END_TEST

/* The same with pipeline_push: the shard's last push goes with nothing
 * computed beside it, and the worker waits as an unpipelined one does. */
START_TEST(epochs_per_shard_pipelined) {
    per_shard_run("pipeline_push=true");
}
END_TEST

/* A chief whose passes are done keeps its clock while it waits for the
 * others: a checkpoint is saved during the wait, and a ps SIGKILLed then
 * and restarted empty is restored by the chief, so the other worker, come
 * only then, trains on it and the job ends. */
START_TEST(epochs_chief_waits_on_duty) {
    const char *extra[] = {"sync_timeout_secs=120", "save_model_secs=1", NULL};
    epoch_sets(extra);
    pid_t ps = dt_test_job_start(&J, "ps", 0, "ps0");
    pid_t chief = dt_test_job_start(&J, "worker", 0, "chief");
    size_t waited =
        dt_test_job_wait_log(&J, "chief", "waiting for the other workers to finish theirs",
                             JOB_TIMEOUT_MS, chief)
            ? dt_test_job_log_length(&J, "chief")
            : 0;
    ck_assert_msg(waited, "the chief did not stop after its shard's epochs; logs:%s",
                  dt_test_job_report(&J));
    size_t seen =
        dt_test_job_wait_log_after(&J, "chief", waited, "chief: saved", chief, JOB_TIMEOUT_MS);
    ck_assert_msg(seen, "the chief saved no checkpoint while it waited; logs:%s",
                  dt_test_job_report(&J));
    ck_assert_int_eq(kill(ps, SIGKILL), 0);
    dt_test_job_expect_exit(&J, ps, "killed ps 0", EXIT_TIMEOUT_MS, -SIGKILL);
    pid_t ps_b = dt_test_job_start(&J, "ps", 0, "ps0b");
    ck_assert_msg(dt_test_job_wait_log_after(&J, "chief", seen, "lost its model; restoring it",
                                             chief, JOB_TIMEOUT_MS),
                  "the chief did not restore the restarted ps while it waited; logs:%s",
                  dt_test_job_report(&J));
    pid_t worker = dt_test_job_start(&J, "worker", 1, "worker1");
    pid_t pids[3] = {ps_b, chief, worker};
    const char *names[3] = {"restarted ps 0", "chief", "worker 1"};
    dt_test_job_expect_done(&J, pids, names, 3, JOB_TIMEOUT_MS);
    ck_assert_int_eq(local_steps_of("chief"), 8);
    ck_assert_int_eq(local_steps_of("worker1"), 8);
}
END_TEST

/* A worker that never comes does not hold the job: once no ps task has
 * heard of it, and the global step has stood still, for sync_timeout_secs,
 * the chief trains on its shard again until max_steps. */
static void worker_missing_run(const char *pipeline) {
    const char *extra[] = {"sync_timeout_secs=1", pipeline, NULL};
    epoch_sets(extra);
    pid_t ps = dt_test_job_start(&J, "ps", 0, "ps0");
    pid_t chief = dt_test_job_start(&J, "worker", 0, "chief");
    pid_t pids[2] = {ps, chief};
    const char *names[2] = {"ps 0", "chief"};
    dt_test_job_expect_done(&J, pids, names, 2, JOB_TIMEOUT_MS);
    ck_assert_msg(dt_test_job_log_has(&J, "chief", "the other workers are gone"),
                  "the chief does not say it went on alone; logs:%s", dt_test_job_report(&J));
    ck_assert_int_eq(local_steps_of("chief"), 16);
}

START_TEST(epochs_worker_missing) {
    worker_missing_run("pipeline_push=false");
}
END_TEST

/* Pipelined, the chief starts again from values it pulls after the wait. */
START_TEST(epochs_worker_missing_pipelined) {
    worker_missing_run("pipeline_push=true");
}
END_TEST

/* Worker `task` as ps 0 sees it (Status as a tool); pushes -1 when ps 0
 * does not answer (not up yet) or lists no such worker. */
static dt_worker_activity activity_of(int task) {
    dt_worker_activity a = {.worker = task, .pushes = -1, .last_push_ms = -1, .last_seen_ms = -1};
    dt_test_probe probe;
    dt_err err;
    dt_err_clear(&err);
    dt_test_probe_open(&probe, J.cluster, 10000);
    dt_msg_status_resp st;
    if (dt_ps_client_status(probe.client, 0, &st, &err) == 0)
        for (int i = 0; i < st.num_workers; i++)
            if (st.workers[i].worker == task) a = st.workers[i];
    dt_test_probe_close(&probe);
    return a;
}

/* Starts task (worker 0 is the chief; log log_name) with
 * DT_TEST_WORKER_STOP_AT=at (lib/worker.h): it stops itself once it has
 * made its local step `at`, so a fault made then lands mid-shard (at is
 * short of its shard's steps) however fast the machine runs the job.
 * Before, the test polled Status for a first push and then signalled the
 * worker, and a job that ran faster than the poll ended first. */
static pid_t start_stopping_at(int task, const char *log_name, int64_t at) {
    char value[32];
    snprintf(value, sizeof value, "%lld", (long long)at);
    ck_assert_int_eq(setenv("DT_TEST_WORKER_STOP_AT", value, 1), 0);
    pid_t pid = dt_test_job_start(&J, "worker", task, log_name);
    ck_assert_int_eq(unsetenv("DT_TEST_WORKER_STOP_AT"), 0);
    return pid;
}

/* Waits until task's process pid, started by start_stopping_at(at), has
 * stopped itself (up to JOB_TIMEOUT_MS; asserts it did) and asserts that
 * ps 0 took exactly its `at` pushes; then, with SIGKILL, kills it and
 * waits for it to go (what stands for it: "killed worker 1"). With
 * SIGSTOP it stays stopped. */
static void signal_once_stopped(int task, pid_t pid, int64_t at, int sig, const char *what) {
    ck_assert_msg(dt_test_wait_stopped(pid, JOB_TIMEOUT_MS),
                  "task %d did not stop itself at local step %lld; logs:%s", task, (long long)at,
                  dt_test_job_report(&J));
    const int64_t taken = activity_of(task).pushes;
    ck_assert_msg(taken == at, "task %d stopped at local step %lld, ps 0 took %lld; logs:%s", task,
                  (long long)at, (long long)taken, dt_test_job_report(&J));
    if (sig == SIGKILL) {
        ck_assert_int_eq(kill(pid, SIGKILL), 0);
        dt_test_job_expect_exit(&J, pid, what, EXIT_TIMEOUT_MS, -SIGKILL);
    }
}

/* Writes text into the FIFO at path once a reader has it open (waiting up
 * to JOB_TIMEOUT_MS for one), then closes it: the reader's end of file. */
static void feed_fifo(const char *path, const char *text) {
    long long deadline = dt_test_now_ms() + JOB_TIMEOUT_MS;
    int fd;
    /* Non-blocking, a FIFO opens for writing only once it has a reader. */
    while ((fd = open(path, O_WRONLY | O_NONBLOCK)) < 0 && errno == ENXIO &&
           dt_test_now_ms() < deadline)
        dt_test_sleep_ms(20);
    ck_assert_msg(fd >= 0, "%s: no reader came (%s); logs:%s", path, strerror(errno),
                  dt_test_job_report(&J));
    ck_assert_int_eq(fcntl(fd, F_SETFL, 0), 0); /* the writes block again */
    size_t len = strlen(text);
    ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
    close(fd);
}

/* Waits until ps 0 last took a push of the waiting task's (whose log is
 * `log_name`) 3 timeouts (2 s) ago, or its log says the others are gone,
 * and asserts the former: one that went on alone would have pushed since.
 * Returns how long ago that push was. */
static int64_t expect_waited(int task, const char *log_name) {
    long long deadline = dt_test_now_ms() + JOB_TIMEOUT_MS;
    dt_worker_activity a = activity_of(task);
    while (a.last_push_ms < 6000 && dt_test_now_ms() < deadline &&
           !dt_test_job_log_has(&J, log_name, "are gone")) {
        dt_test_sleep_ms(50);
        a = activity_of(task);
    }
    ck_assert_msg(!dt_test_job_log_has(&J, log_name, "are gone"),
                  "%s took the other, alive and reading its data, for gone; logs:%s", log_name,
                  dt_test_job_report(&J));
    ck_assert_msg(a.last_push_ms >= 6000, "%s pushed %lld ms ago; logs:%s", log_name,
                  (long long)a.last_push_ms, dt_test_job_report(&J));
    return a.last_push_ms;
}

/* A live worker that does not push for longer than sync_timeout_secs is
 * waited for: worker 1 reads its training file (the same rows) from a FIFO
 * the test fills only once the chief, its passes done and waiting, has
 * gone 3 timeouts without a push. Meanwhile worker 1's heartbeat says it
 * is alive (a timeout of 2 s, a beat every 0.5 s: a loaded machine that
 * delays a few beats does not make it look gone). Before, the chief took
 * the still global step for the others gone after 2 s and made all 16
 * steps, its rows twice as often as worker 1's (the time a 2M-row Criteo
 * file takes to read did it too). */
static void slow_reader_run(int num_ps, const char *pipeline) {
    const char *extra[] = {"sync_timeout_secs=2", pipeline, NULL};
    epoch_sets_ps(num_ps, extra);
    pid_t pids[4];
    const char *names[4] = {"ps 0", "ps 1", "chief", "worker 1"};
    for (int p = 0; p < num_ps; p++)
        pids[p] = dt_test_job_start(&J, "ps", p, p ? "ps1" : "ps0");
    pid_t chief = pids[num_ps] = dt_test_job_start(&J, "worker", 0, "chief");
    names[num_ps] = "chief";
    ck_assert_msg(
        dt_test_job_wait_log(&J, "chief", "waiting for the other workers to finish theirs",
                             JOB_TIMEOUT_MS, chief),
        "the chief did not stop after its shard's epochs; logs:%s", dt_test_job_report(&J));
    char fifo[1200], train[1200];
    snprintf(fifo, sizeof fifo, "%s/slow.svm", J.dir);
    snprintf(train, sizeof train, "%s/train.svm", J.dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    char *rows = dt_test_read_file(train, NULL);
    ck_assert_ptr_nonnull(rows);
    epoch_job(fifo, extra);
    pids[num_ps + 1] = dt_test_job_start(&J, "worker", 1, "worker1");
    names[num_ps + 1] = "worker 1";
    expect_waited(0, "chief");
    /* Worker 1, still reading, is known alive (its heartbeat), and has
     * not pushed. */
    dt_worker_activity reader = activity_of(1);
    ck_assert_msg(reader.last_seen_ms >= 0 && reader.pushes == 0,
                  "worker 1: last seen %lld ms ago, %lld pushes; logs:%s",
                  (long long)reader.last_seen_ms, (long long)reader.pushes, dt_test_job_report(&J));
    feed_fifo(fifo, rows);
    free(rows);
    dt_test_job_expect_done(&J, pids, names, num_ps + 2, JOB_TIMEOUT_MS);
    ck_assert_int_eq(local_steps_of("chief"), 8);
    ck_assert_int_eq(local_steps_of("worker1"), 8);
    ck_assert_msg(!dt_test_job_log_has(&J, "chief", "are gone"), "logs:%s", dt_test_job_report(&J));
}

START_TEST(epochs_slow_reader_waited_for) {
    slow_reader_run(1, "pipeline_push=false");
}
END_TEST

/* The same over 2 ps tasks with pipelined pushes: the waiting chief hears
 * of worker 1 from either. */
START_TEST(epochs_slow_reader_two_ps_pipelined) {
    slow_reader_run(2, "pipeline_push=true");
}
END_TEST

/* The test file 32 times over, 2048 rows, at path (cap bytes): with the
 * epochs tests' batches of 8 for 2 epochs, 256 steps a shard of 2. */
static void write_many_rows(char *path, size_t cap) {
    write_libsvm(N_FEATURES, path, cap);
    char *rows = dt_test_read_file(path, NULL);
    ck_assert_ptr_nonnull(rows);
    size_t len = strlen(rows);
    char *many = malloc(32 * len + 1);
    ck_assert_ptr_nonnull(many);
    for (int k = 0; k < 32; k++)
        memcpy(many + (size_t)k * len, rows, len);
    many[32 * len] = '\0';
    ck_assert_int_eq(dt_test_write_file(path, many), 0);
    free(many);
    free(rows);
}

/* An epochs job (epoch_job, with extra) of num_ps ps tasks and 2 workers
 * on the test file 32 times over (write_many_rows). */
static void many_rows_job(int num_ps, const char *const *extra) {
    static char train[1100];
    write_many_rows(train, sizeof train);
    epoch_job(train, extra);
    dt_test_job_cluster(&J, num_ps, 2);
}

/* A worker stopped mid-shard (SIGSTOP: its connections stay open) or
 * killed is still taken for gone: the chief, its passes done, hears from
 * it on no ps task for sync_timeout_secs and makes the rest of the job.
 * 2048 rows (the test file 32 times) in batches of 8 for 2 epochs: 256
 * steps a shard, 512 in all; worker 1 stops itself once a ps took its
 * 10th push (start_stopping_at), long before its 256th, and is killed
 * then or left stopped. */
static void stopped_mid_shard_run(int sig) {
    const char *extra[] = {"sync_timeout_secs=1", NULL};
    many_rows_job(1, extra);
    pid_t ps = dt_test_job_start(&J, "ps", 0, "ps0");
    pid_t worker = start_stopping_at(1, "worker1", 10);
    pid_t chief = dt_test_job_start(&J, "worker", 0, "chief");
    signal_once_stopped(1, worker, 10, sig, "killed worker 1");
    pid_t pids[2] = {ps, chief};
    const char *names[2] = {"ps 0", "chief"};
    dt_test_job_expect_done(&J, pids, names, 2, JOB_TIMEOUT_MS);
    ck_assert_msg(
        dt_test_job_log_has(&J, "chief", "waiting for the other workers to finish theirs"),
        "the chief did not wait after its shard's epochs; logs:%s", dt_test_job_report(&J));
    ck_assert_msg(dt_test_job_log_has(&J, "chief", "the other workers are gone"),
                  "the chief does not say it went on alone; logs:%s", dt_test_job_report(&J));
    /* Its own 256, and some of worker 1's share. */
    ck_assert_int_gt(local_steps_of("chief"), 256);
    dt_tensors ts;
    ck_assert_int_eq(dt_test_job_load_latest(&J, 512, &ts, NULL, 0), 512);
    dt_tensors_deinit(&ts);
    if (sig != SIGKILL) {
        ck_assert_int_eq(kill(worker, SIGKILL), 0);
        dt_test_job_expect_exit(&J, worker, "stopped worker 1", EXIT_TIMEOUT_MS, -SIGKILL);
    }
}

START_TEST(epochs_worker_stopped_mid_shard) {
    stopped_mid_shard_run(SIGSTOP);
}
END_TEST

START_TEST(epochs_worker_killed_mid_shard) {
    stopped_mid_shard_run(SIGKILL);
}
END_TEST

/* A worker SIGKILLed mid-shard and restarted resumes its passes where
 * the ps counted its pushes, and makes, over both runs, exactly its
 * shard's steps: 2048 rows (the test file 32 times) in batches of 1 for 2
 * epochs, 1024 steps a pass over a shard of 2, 2048 its passes, 4096 in
 * all. Worker 1 is killed once it
 * stopped itself at its local step 300 (start_stopping_at: long before
 * its 2048th, however fast the job runs); the ps's count then is
 * where the restarted worker must say it resumes, and its "training done"
 * counts both runs. The chief makes its own 2048, never takes worker 1
 * for gone (it is back long before sync_timeout_secs), and the job ends
 * at max_steps. Before, the restarted worker started at step 0 and made
 * its passes again: no "resuming" line, and the job ended at 4096 with
 * worker 1's second run cut short by "done" after 2048 - P steps, its
 * shard's first P batches seen twice. */
static void restarted_mid_shard_run(const char *sparse, const char *pipeline) {
    const char *extra[] = {"sync_timeout_secs=120", "batch_size=1", sparse, pipeline, NULL};
    many_rows_job(1, extra);
    pid_t ps = dt_test_job_start(&J, "ps", 0, "ps0");
    pid_t chief = dt_test_job_start(&J, "worker", 0, "chief");
    pid_t worker = start_stopping_at(1, "worker1", 300);
    signal_once_stopped(1, worker, 300, SIGKILL, "killed worker 1");
    const int64_t taken = activity_of(1).pushes;
    ck_assert_msg(taken >= 1 && taken < 2048,
                  "worker 1 was not killed mid-shard: ps 0 took %lld of its pushes; logs:%s",
                  (long long)taken, dt_test_job_report(&J));
    pid_t worker_b = dt_test_job_start(&J, "worker", 1, "worker1b");
    pid_t pids[3] = {ps, chief, worker_b};
    const char *names[3] = {"ps 0", "chief", "restarted worker 1"};
    dt_test_job_expect_done(&J, pids, names, 3, JOB_TIMEOUT_MS);
    /* Its shard's passes over both runs: the rest of them in the second. */
    ck_assert_int_eq(local_steps_of("worker1b"), 2048);
    char resumed[160];
    snprintf(resumed, sizeof resumed,
             "resuming at local step %lld (epoch %lld, batch %lld of 1024): ps:0 ",
             (long long)taken, (long long)(taken / 1024), (long long)(taken % 1024));
    ck_assert_msg(dt_test_job_log_has(&J, "worker1b", resumed),
                  "the restarted worker 1 does not say \"%s\"; logs:%s", resumed,
                  dt_test_job_report(&J));
    char before[96];
    snprintf(before, sizeof before, "(%lld of them before a restart)", (long long)taken);
    ck_assert_msg(dt_test_job_log_has(&J, "worker1b", before), "no \"%s\"; logs:%s", before,
                  dt_test_job_report(&J));
    ck_assert_int_eq(local_steps_of("chief"), 2048);
    ck_assert_msg(!dt_test_job_log_has(&J, "chief", "are gone"), "logs:%s", dt_test_job_report(&J));
    dt_tensors ts;
    ck_assert_int_eq(dt_test_job_load_latest(&J, 4096, &ts, NULL, 0), 4096);
    dt_tensors_deinit(&ts);
}

START_TEST(epochs_worker_restarted_resumes) {
    restarted_mid_shard_run("sparse=on", "pipeline_push=false");
}
END_TEST

/* Pipelined: a push in flight when it died counts if a ps took it; the
 * gradient computed beside it was never pushed, and its batch is made
 * again. */
START_TEST(epochs_worker_restarted_resumes_pipelined) {
    restarted_mid_shard_run("sparse=on", "pipeline_push=true");
}
END_TEST

/* The same dense (the file read as a dense data set, dt_data_seek). */
START_TEST(epochs_worker_restarted_resumes_dense) {
    restarted_mid_shard_run("sparse=off", "pipeline_push=false");
}
END_TEST

START_TEST(epochs_worker_restarted_resumes_dense_pipelined) {
    restarted_mid_shard_run("sparse=off", "pipeline_push=true");
}
END_TEST

/* A ps restarted since counts a worker's pushes from its own start: the
 * worker, restarted after ps 1 was killed and restored, resumes from the
 * largest count (ps 0's, the one it had when killed) and says the other
 * counts fewer. The job ends. */
START_TEST(epochs_worker_resumes_from_largest_count) {
    const char *extra[] = {"sync_timeout_secs=5", "batch_size=1", "save_model_secs=1", NULL};
    many_rows_job(2, extra);
    pid_t ps0 = dt_test_job_start(&J, "ps", 0, "ps0");
    pid_t ps1 = dt_test_job_start(&J, "ps", 1, "ps1");
    pid_t chief = dt_test_job_start(&J, "worker", 0, "chief");
    pid_t worker = start_stopping_at(1, "worker1", 300);
    signal_once_stopped(1, worker, 300, SIGKILL, "killed worker 1");
    const int64_t taken = activity_of(1).pushes;
    dt_test_job_expect_ckpt_after(&J, 0, chief, JOB_TIMEOUT_MS);
    size_t seen = dt_test_job_log_length(&J, "chief");
    ck_assert_int_eq(kill(ps1, SIGKILL), 0);
    dt_test_job_expect_exit(&J, ps1, "killed ps 1", EXIT_TIMEOUT_MS, -SIGKILL);
    pid_t ps1b = dt_test_job_start(&J, "ps", 1, "ps1b");
    ck_assert_msg(dt_test_job_wait_log_after(&J, "chief", seen, "lost its model; restoring it",
                                             chief, JOB_TIMEOUT_MS),
                  "the chief did not restore ps 1; logs:%s", dt_test_job_report(&J));
    pid_t worker_b = dt_test_job_start(&J, "worker", 1, "worker1b");
    pid_t pids[4] = {ps0, ps1b, chief, worker_b};
    const char *names[4] = {"ps 0", "restarted ps 1", "chief", "restarted worker 1"};
    dt_test_job_expect_done(&J, pids, names, 4, JOB_TIMEOUT_MS);
    char resumed[96];
    snprintf(resumed, sizeof resumed, "resuming at local step %lld ", (long long)taken);
    ck_assert_msg(dt_test_job_log_has(&J, "worker1b", resumed) &&
                      dt_test_job_log_has(&J, "worker1b", "another ps task counts only"),
                  "the restarted worker 1 does not say it resumes at %lld, past a smaller "
                  "count; logs:%s",
                  (long long)taken, dt_test_job_report(&J));
}
END_TEST

/* The chief as the slow one, a worker as the waiting one: the chief,
 * killed mid-shard, is restarted on a training file (the same rows) that
 * comes through a FIFO only once worker 1, its 2048 steps made (batches
 * of 1; the chief stops itself at its local step 300, start_stopping_at,
 * and is killed then: mid-shard however fast the job runs), has waited 3
 * timeouts (2 s)
 * without a push from anyone; meanwhile the restarted chief, reading, is
 * alive by its heartbeat. Worker 1 makes exactly its own passes; the
 * restarted chief finds the model on the ps, resumes its passes where the
 * ps counted its pushes, and the job ends at 4096. Before, worker 1 took
 * the still global step for the chief gone and trained on its shard
 * again. */
START_TEST(epochs_restarted_chief_reading_waited_for) {
    static char train[1100];
    write_many_rows(train, sizeof train);
    const char *extra[] = {"sync_timeout_secs=2", "batch_size=1", NULL};
    epoch_job(train, extra);
    dt_test_job_cluster(&J, 1, 2);
    pid_t ps = dt_test_job_start(&J, "ps", 0, "ps0");
    pid_t chief = start_stopping_at(0, "chief", 300);
    signal_once_stopped(0, chief, 300, SIGKILL, "killed chief");
    char fifo[1200];
    snprintf(fifo, sizeof fifo, "%s/slow.svm", J.dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    char *rows = dt_test_read_file(train, NULL);
    ck_assert_ptr_nonnull(rows);
    epoch_job(fifo, extra);
    pid_t chief_b = dt_test_job_start(&J, "worker", 0, "chiefb");
    epoch_job(train, extra);
    pid_t worker = dt_test_job_start(&J, "worker", 1, "worker1");
    ck_assert_msg(
        dt_test_job_wait_log(&J, "worker1", "waiting for the other workers to finish theirs",
                             JOB_TIMEOUT_MS, worker),
        "worker 1 did not stop after its shard's epochs; logs:%s", dt_test_job_report(&J));
    int64_t waited_ms = expect_waited(1, "worker1");
    ck_assert_msg(activity_of(0).last_push_ms >= waited_ms,
                  "the chief pushed after worker 1's passes; logs:%s", dt_test_job_report(&J));
    feed_fifo(fifo, rows);
    free(rows);
    pid_t pids[3] = {ps, chief_b, worker};
    const char *names[3] = {"ps 0", "restarted chief", "worker 1"};
    dt_test_job_expect_done(&J, pids, names, 3, JOB_TIMEOUT_MS);
    ck_assert_int_eq(local_steps_of("worker1"), 2048);
    ck_assert_int_eq(local_steps_of("chiefb"), 2048);
    ck_assert_msg(dt_test_job_log_has(&J, "chiefb", "resuming at local step"),
                  "the restarted chief did not resume its passes; logs:%s", dt_test_job_report(&J));
    ck_assert_msg(!dt_test_job_log_has(&J, "worker1", "are gone"), "logs:%s",
                  dt_test_job_report(&J));
    dt_tensors ts;
    ck_assert_int_eq(dt_test_job_load_latest(&J, 4096, &ts, NULL, 0), 4096);
    dt_tensors_deinit(&ts);
}
END_TEST

/* sync with "epochs": a step takes a batch from each of the 2 workers, so
 * 2 epochs are 8 steps, not the 16 that made each worker pass over its
 * shard 4 times. */
START_TEST(epochs_sync) {
    const char *extra[] = {"mode=sync", NULL};
    epoch_sets(extra);
    dt_test_job_run(&J, "", JOB_TIMEOUT_MS);
    ck_assert_msg(dt_test_job_log_has(&J, "chief", "2 batch(es) a step: max_steps 8"),
                  "the chief did not count 2 batches a step; logs:%s", dt_test_job_report(&J));
    ck_assert_int_eq(local_steps_of("chief"), 8);
    ck_assert_int_eq(local_steps_of("worker1"), 8);
}
END_TEST

Suite *sparse_e2e_suite(void) {
    Suite *s = suite_create("sparse_e2e");
    TCase *tc = dt_test_job_tcase(s, "jobs", 300, setup, teardown);
    tcase_add_test(tc, sparse_matches_dense);
    tcase_add_test(tc, sparse_matches_dense_sync);
    tcase_add_test(tc, sparse_matches_dense_sync_two_ps);
    tcase_add_test(tc, sparse_matches_dense_shuffled);
    tcase_add_test(tc, sparse_matches_dense_shuffled_sync);
    tcase_add_test(tc, reshard_three_to_two);
    tcase_add_test(tc, ps_killed_restored);
    tcase_add_test(tc, eval_predict_checkpoint);
    tcase_add_test(tc, embedding_criteo);
    tcase_add_test(tc, embedding_wide_rows);
    tcase_add_test(tc, feature_ids_past_int);
    tcase_add_test(tc, epochs_per_shard);
    tcase_add_test(tc, epochs_per_shard_pipelined);
    tcase_add_test(tc, epochs_worker_missing);
    tcase_add_test(tc, epochs_worker_missing_pipelined);
    tcase_add_test(tc, epochs_chief_waits_on_duty);
    tcase_add_test(tc, epochs_slow_reader_waited_for);
    tcase_add_test(tc, epochs_slow_reader_two_ps_pipelined);
    tcase_add_test(tc, epochs_worker_stopped_mid_shard);
    tcase_add_test(tc, epochs_worker_killed_mid_shard);
    tcase_add_test(tc, epochs_sync);
    TCase *resume = dt_test_job_tcase(s, "resume", 300, setup, teardown);
    tcase_add_test(resume, epochs_restarted_chief_reading_waited_for);
    tcase_add_test(resume, epochs_worker_restarted_resumes);
    tcase_add_test(resume, epochs_worker_resumes_from_largest_count);
    tcase_add_test(resume, epochs_worker_restarted_resumes_pipelined);
    tcase_add_test(resume, epochs_worker_restarted_resumes_dense);
    tcase_add_test(resume, epochs_worker_restarted_resumes_dense_pipelined);
    TCase *piped = dt_test_job_tcase(s, "pipeline", 300, setup, teardown);
    tcase_add_test(piped, sparse_pipelined);
    tcase_add_test(piped, sparse_pipelined_one_worker);
    tcase_add_test(piped, sparse_pipelined_ps_killed);
    tcase_add_test(piped, sparse_pipelined_worker_killed);
    return s;
}
