/*
 * Suite "api": include/dtrain.h, the public C API. Unit cases call it in
 * the test's process (results, messages, lifecycles, initializers, flags);
 * the job cases run build/example_linear (the seed's program on the
 * library) as a ps and two workers, real processes on free loopback ports
 * in the test's temp dir, then a session of the test's own against a model
 * that does not match the job's checkpoint, and jobs over mutual TLS and
 * with per-identity tokens (a chief with a wrong one refused); the python case runs the
 * module's unittest tests (python/tests) with Debian's python3.
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../include/dtrain.h"
#include "checkpoint.h"
#include "data.h"
#include "job.h"
#include "model.h"
#include "proc.h"
#include "safetensors.h"
#include "suites.h"
#include "tensor.h"
#include "testjob.h"

#define JOB_TIMEOUT_MS 120000
#define TEST_TIMEOUT_S 300

/* ---- results, lifecycles ------------------------------------------------ */

START_TEST(version_and_codes) {
    ck_assert_str_eq(dtrain_version(), DTRAIN_VERSION);
    ck_assert_int_eq(dtrain_version_number(), DTRAIN_VERSION_NUMBER);
    ck_assert_str_eq(dtrain_strerror(DTRAIN_OK), "ok");
    ck_assert_ptr_nonnull(dtrain_strerror(DTRAIN_EEXIST));
    ck_assert_ptr_nonnull(dtrain_strerror(-999));
    ck_assert_int_eq(dtrain_exit_code(DTRAIN_OK), 0);
    ck_assert_int_eq(dtrain_exit_code(DTRAIN_ECONFIG), 2);
    ck_assert_int_eq(dtrain_exit_code(DTRAIN_EUNAVAILABLE), 200);
    ck_assert_int_eq(dtrain_exit_code(DTRAIN_ESTORAGE), 75);
    ck_assert_int_eq(dtrain_exit_code(DTRAIN_EIO), 1);
    int x = 0;
    ck_assert_str_eq(dtrain_errmsg(&x), "not a dtrain handle");
    ck_assert_str_eq(dtrain_errmsg(NULL), "");
    /* _free(NULL) is a no-op for every handle. */
    dtrain_cluster_free(NULL);
    dtrain_config_free(NULL);
    dtrain_model_free(NULL);
    dtrain_server_free(NULL);
    dtrain_session_free(NULL);
}
END_TEST

START_TEST(cluster_errors) {
    dtrain_cluster *c = NULL;
    ck_assert_int_eq(dtrain_cluster_new(&c), 0);
    ck_assert_int_eq(dtrain_cluster_role(c, NULL), DTRAIN_ROLE_NONE);
    ck_assert_int_eq(dtrain_cluster_set_task(c, "worker", 0), DTRAIN_EPRECOND);
    ck_assert_int_eq(
        dtrain_cluster_parse(c, "{\"cluster\": {\"ps\": [\"localhost:0\"]}}", "c.json"),
        DTRAIN_EINVAL);
    ck_assert_msg(strstr(dtrain_errmsg(c), "c.json:") != NULL, "message: %s", dtrain_errmsg(c));
    ck_assert_int_eq(dtrain_cluster_load(c, "/nonexistent/cluster.json"), DTRAIN_ENOTFOUND);
    ck_assert_msg(strstr(dtrain_errmsg(c), "/nonexistent/cluster.json") != NULL, "message: %s",
                  dtrain_errmsg(c));
    const char *text = "{\"cluster\": {\"ps\": [\"localhost:2001\"], \"worker\": "
                       "[\"localhost:2002\", \"localhost:2003\"]}}";
    ck_assert_int_eq(dtrain_cluster_parse(c, text, "c.json"), 0);
    ck_assert_str_eq(dtrain_errmsg(c), ""); /* a call that succeeds clears it */
    ck_assert_int_eq(dtrain_cluster_num_ps(c), 1);
    ck_assert_int_eq(dtrain_cluster_num_workers(c), 2);
    ck_assert_int_eq(dtrain_cluster_set_task(c, "worker", 2), DTRAIN_EINVAL);
    ck_assert_int_eq(dtrain_cluster_set_task(c, "trainer", 0), DTRAIN_EINVAL);
    ck_assert_msg(strstr(dtrain_errmsg(c), "trainer") != NULL, "message: %s", dtrain_errmsg(c));
    ck_assert_int_eq(dtrain_cluster_set_task(c, "worker", 1), 0);
    int task = -1;
    ck_assert_int_eq(dtrain_cluster_role(c, &task), DTRAIN_ROLE_WORKER);
    ck_assert_int_eq(task, 1);
    ck_assert(!dtrain_cluster_is_chief(c));
    /* TF_CONFIG's "task" sets the role; a chief job makes worker 0 task 1. */
    setenv("TF_CONFIG",
           "{\"cluster\": {\"chief\": [\"localhost:2001\"], \"ps\": [\"localhost:2002\"], "
           "\"worker\": [\"localhost:2003\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}",
           1);
    ck_assert_int_eq(dtrain_cluster_from_env(c), 0);
    ck_assert_int_eq(dtrain_cluster_role(c, &task), DTRAIN_ROLE_WORKER);
    ck_assert_int_eq(task, 1);
    unsetenv("TF_CONFIG");
    ck_assert_int_eq(dtrain_cluster_from_env(c), DTRAIN_ENOTFOUND);
    dtrain_cluster_free(c);
}
END_TEST

START_TEST(config_errors) {
    dtrain_config *cfg = NULL;
    ck_assert_int_eq(dtrain_config_new(&cfg), 0);
    ck_assert_int_eq(dtrain_config_batch_size(cfg), 10); /* conf/linear.json's */
    ck_assert_int_eq(dtrain_config_set(cfg, "learning_rate=-1"), DTRAIN_EINVAL);
    ck_assert_msg(strstr(dtrain_errmsg(cfg), "learning_rate") != NULL, "message: %s",
                  dtrain_errmsg(cfg));
    ck_assert_int_eq(dtrain_config_set(cfg, "no_such_field=1"), DTRAIN_EINVAL);
    ck_assert_int_eq(dtrain_config_set(cfg, "batch_size=4"), 0);
    ck_assert_int_eq(dtrain_config_batch_size(cfg), 4);
    ck_assert_int_eq(dtrain_config_set(cfg, "max_steps=77"), 0);
    ck_assert_int_eq(dtrain_config_max_steps(cfg), 77);
    ck_assert_int_ne(dtrain_config_load(cfg, "/nonexistent/job.json"), 0);
    ck_assert_int_eq(dtrain_config_batch_size(cfg), 4); /* unchanged */
    dtrain_config_free(cfg);
}
END_TEST

START_TEST(parse_args_takes_role_flags) {
    char *dir = dt_test_tempdir();
    ck_assert_ptr_nonnull(dir);
    char path[1100];
    snprintf(path, sizeof path, "%s/cluster.json", dir);
    ck_assert_int_eq(dt_test_write_cluster(path, 1, 2, NULL), 0);
    dtrain_cluster *c = NULL;
    dtrain_config *cfg = NULL;
    ck_assert_int_eq(dtrain_cluster_new(&c), 0);
    ck_assert_int_eq(dtrain_config_new(&cfg), 0);
    char *argv[] = {"prog",       "--cluster",    path,           "--epochs-of-mine",
                    "--job-name", "worker",       "--task-index", "1",
                    "--set",      "batch_size=3", "mine",         "--log-dir=/tmp/x",
                    NULL};
    int argc = 12;
    ck_assert_int_eq(dtrain_parse_args(c, cfg, &argc, argv), 0);
    ck_assert_int_eq(argc, 3); /* the program's own flags stay, in order */
    ck_assert_str_eq(argv[1], "--epochs-of-mine");
    ck_assert_str_eq(argv[2], "mine");
    ck_assert_ptr_null(argv[3]);
    int task = -1;
    ck_assert_int_eq(dtrain_cluster_role(c, &task), DTRAIN_ROLE_WORKER);
    ck_assert_int_eq(task, 1);
    ck_assert_int_eq(dtrain_config_batch_size(cfg), 3);
    ck_assert_str_eq(dtrain_config_log_dir(cfg), "/tmp/x");

    /* The binary's errors: no task, a bad index, a --set that fails. */
    char *no_task[] = {"prog", "--cluster", path, "--job-name", "ps", NULL};
    argc = 5;
    ck_assert_int_eq(dtrain_parse_args(c, cfg, &argc, no_task), DTRAIN_EINVAL);
    ck_assert_msg(strstr(dtrain_errmsg(c), "--task-index") != NULL, "message: %s",
                  dtrain_errmsg(c));
    char *bad_set[] = {"prog",         "--cluster", path,    "--job-name", "ps",
                       "--task-index", "0",         "--set", "mode=fast",  NULL};
    argc = 9;
    ck_assert_int_eq(dtrain_parse_args(c, cfg, &argc, bad_set), DTRAIN_EINVAL);
    ck_assert_msg(strstr(dtrain_errmsg(c), "mode") != NULL, "message: %s", dtrain_errmsg(c));
    char *no_value[] = {"prog", "--cluster", NULL};
    argc = 2;
    ck_assert_int_eq(dtrain_parse_args(c, cfg, &argc, no_value), DTRAIN_EINVAL);
    dtrain_config_free(cfg);
    dtrain_cluster_free(c);
    dt_test_tempdir_free(dir);
}
END_TEST

/* ---- variables ---------------------------------------------------------- */

START_TEST(model_errors) {
    dtrain_model *m = NULL;
    ck_assert_int_eq(dtrain_model_new(&m), 0);
    float buf[64];
    const int64_t shape[2] = {4, 8}, zero[2] = {4, 0};
    dtrain_var_params p = {.name = "dense/w",
                           .ndim = 2,
                           .shape = shape,
                           .values = buf,
                           .init = DTRAIN_INIT_GLOROT_UNIFORM};
    ck_assert_int_eq(dtrain_model_add(m, &p), 0);
    /* A name used twice. */
    ck_assert_int_eq(dtrain_model_add(m, &p), DTRAIN_EEXIST);
    ck_assert_msg(strstr(dtrain_errmsg(m), "dense/w") != NULL, "message: %s", dtrain_errmsg(m));
    /* Bad shapes. */
    dtrain_var_params bad = p;
    bad.name = "b";
    bad.shape = zero;
    ck_assert_int_eq(dtrain_model_add(m, &bad), DTRAIN_EINVAL);
    ck_assert_msg(strstr(dtrain_errmsg(m), "dim 1 is 0") != NULL, "message: %s", dtrain_errmsg(m));
    bad.shape = shape;
    bad.ndim = 5;
    ck_assert_int_eq(dtrain_model_add(m, &bad), DTRAIN_EINVAL);
    bad.ndim = 2;
    bad.shape = NULL;
    ck_assert_int_eq(dtrain_model_add(m, &bad), DTRAIN_EINVAL);
    /* No buffer, no name, a bad initializer. */
    bad.shape = shape;
    bad.values = NULL;
    ck_assert_int_eq(dtrain_model_add(m, &bad), DTRAIN_EINVAL);
    bad.values = buf;
    bad.name = "";
    ck_assert_int_eq(dtrain_model_add(m, &bad), DTRAIN_EINVAL);
    bad.name = "b";
    bad.init = DTRAIN_INIT_NORMAL;
    bad.stddev = 0;
    ck_assert_int_eq(dtrain_model_add(m, &bad), DTRAIN_EINVAL);
    ck_assert_msg(strstr(dtrain_errmsg(m), "stddev") != NULL, "message: %s", dtrain_errmsg(m));
    bad.init = DTRAIN_INIT_UNIFORM;
    bad.low = 1;
    bad.high = 1;
    ck_assert_int_eq(dtrain_model_add(m, &bad), DTRAIN_EINVAL);
    bad.init = (dtrain_init)99;
    ck_assert_int_eq(dtrain_model_add(m, &bad), DTRAIN_EINVAL);
    ck_assert_int_eq(dtrain_model_count(m), 1); /* none of those was declared */
    ck_assert_int_eq(dtrain_model_numel(m, 0), 32);
    ck_assert_int_eq(dtrain_model_numel(m, 1), 0);
    dtrain_model_free(m);
}
END_TEST

/* Tables: bad sizes and initializers, names that clash with a variable's
 * (either declared first), one table too many. */
START_TEST(table_errors) {
    dtrain_model *m = NULL;
    ck_assert_int_eq(dtrain_model_new(&m), 0);
    float buf[8];
    const int64_t shape[1] = {8};
    dtrain_var_params v = {
        .name = "emb", .ndim = 1, .shape = shape, .values = buf, .init = DTRAIN_INIT_ZEROS};
    ck_assert_int_eq(dtrain_model_add(m, &v), 0);
    dtrain_table_params t = {
        .name = "emb", .rows = 1000, .dim = 4, .init = DTRAIN_INIT_NORMAL, .scale = 0.1};
    /* A dense variable's name. */
    ck_assert_int_eq(dtrain_model_add_table(m, &t), DTRAIN_EEXIST);
    ck_assert_msg(strstr(dtrain_errmsg(m), "table \"emb\"") != NULL, "message: %s",
                  dtrain_errmsg(m));
    t.name = "tower";
    t.dim = 0;
    ck_assert_int_eq(dtrain_model_add_table(m, &t), DTRAIN_EINVAL);
    ck_assert_msg(strstr(dtrain_errmsg(m), "dim 0") != NULL, "message: %s", dtrain_errmsg(m));
    t.dim = DTRAIN_TABLE_MAX_DIM + 1;
    ck_assert_int_eq(dtrain_model_add_table(m, &t), DTRAIN_EINVAL);
    t.dim = 4;
    t.rows = 0;
    ck_assert_int_eq(dtrain_model_add_table(m, &t), DTRAIN_EINVAL);
    ck_assert_msg(strstr(dtrain_errmsg(m), "rows 0") != NULL, "message: %s", dtrain_errmsg(m));
    t.rows = DTRAIN_TABLE_MAX_ROWS + 1;
    ck_assert_int_eq(dtrain_model_add_table(m, &t), DTRAIN_EINVAL);
    t.rows = 1000;
    t.scale = 0;
    ck_assert_int_eq(dtrain_model_add_table(m, &t), DTRAIN_EINVAL);
    ck_assert_msg(strstr(dtrain_errmsg(m), "scale") != NULL, "message: %s", dtrain_errmsg(m));
    t.scale = 0.1;
    t.init = DTRAIN_INIT_GLOROT_UNIFORM;
    ck_assert_int_eq(dtrain_model_add_table(m, &t), DTRAIN_EINVAL);
    t.init = DTRAIN_INIT_NORMAL;
    t.name = "";
    ck_assert_int_eq(dtrain_model_add_table(m, &t), DTRAIN_EINVAL);
    t.name = "tower";
    ck_assert_int_eq(dtrain_model_table_count(m), 0); /* none of those was declared */
    ck_assert_int_eq(dtrain_model_add_table(m, &t), 0);
    ck_assert_int_eq(dtrain_model_table_count(m), 1);
    /* A variable under the table's checkpoint names, the table's own name. */
    v.name = "tower/values";
    ck_assert_int_eq(dtrain_model_add(m, &v), DTRAIN_EEXIST);
    ck_assert_msg(strstr(dtrain_errmsg(m), "table \"tower\"") != NULL, "message: %s",
                  dtrain_errmsg(m));
    v.name = "tower";
    ck_assert_int_eq(dtrain_model_add(m, &v), DTRAIN_EEXIST);
    v.name = "towers"; /* another name, only a prefix of the text */
    ck_assert_int_eq(dtrain_model_add(m, &v), 0);
    /* A table under another's name, or over it; then one table too many. */
    t.name = "tower/user";
    ck_assert_int_eq(dtrain_model_add_table(m, &t), DTRAIN_EEXIST);
    ck_assert_msg(strstr(dtrain_errmsg(m), "collide") != NULL, "message: %s", dtrain_errmsg(m));
    char names[DTRAIN_MAX_TABLES][16];
    for (int k = 1; k < DTRAIN_MAX_TABLES; k++) {
        snprintf(names[k], sizeof names[k], "t%d", k);
        t.name = names[k];
        ck_assert_msg(dtrain_model_add_table(m, &t) == 0, "%s", dtrain_errmsg(m));
    }
    ck_assert_int_eq(dtrain_model_table_count(m), DTRAIN_MAX_TABLES);
    t.name = "other";
    ck_assert_int_eq(dtrain_model_add_table(m, &t), DTRAIN_EINVAL);
    ck_assert_msg(strstr(dtrain_errmsg(m), "at most 8") != NULL, "message: %s", dtrain_errmsg(m));
    /* Lookups before a session. */
    dtrain_session *s = NULL;
    ck_assert_int_eq(dtrain_session_new(&s), 0);
    int64_t ids[1] = {0};
    float rows[4];
    ck_assert_int_eq(dtrain_session_lookup(s, 0, ids, 1, rows), DTRAIN_EPRECOND);
    ck_assert_msg(strstr(dtrain_errmsg(s), "not ready") != NULL, "message: %s", dtrain_errmsg(s));
    const float *g[2] = {buf, buf}, *rg[1] = {rows};
    ck_assert_int_eq(dtrain_session_step_rows(s, g, rg, 0, NULL), DTRAIN_EPRECOND);
    ck_assert_int_eq(dtrain_session_step_rows(s, g, NULL, 0, NULL), DTRAIN_EINVAL);
    dtrain_session_free(s);
    dtrain_model_free(m);
}
END_TEST

/* Each initializer's values: in its bounds, with about its spread, the
 * same for the same seed and another for another. */
START_TEST(initializers) {
    dtrain_model *m = NULL;
    ck_assert_int_eq(dtrain_model_new(&m), 0);
    enum { IN = 100, OUT = 50, N = IN * OUT };
    static float buf[10][N], out[N], again[N];
    const int64_t shape[2] = {IN, OUT};
    dtrain_var_params ps[] = {
        {.name = "zeros", .init = DTRAIN_INIT_ZEROS},
        {.name = "constant", .init = DTRAIN_INIT_CONSTANT, .value = 0.5},
        {.name = "normal", .init = DTRAIN_INIT_NORMAL, .stddev = 0.1},
        {.name = "truncated", .init = DTRAIN_INIT_TRUNCATED_NORMAL, .stddev = 0.1},
        {.name = "uniform", .init = DTRAIN_INIT_UNIFORM, .low = -0.2, .high = 0.3},
        {.name = "glorot_uniform", .init = DTRAIN_INIT_GLOROT_UNIFORM},
        {.name = "he_uniform", .init = DTRAIN_INIT_HE_UNIFORM},
        {.name = "he_normal", .init = DTRAIN_INIT_HE_NORMAL},
        {.name = "given", .init = DTRAIN_INIT_GIVEN},
    };
    const int n = (int)(sizeof ps / sizeof ps[0]);
    for (int i = 0; i < n; i++) {
        ps[i].ndim = 2;
        ps[i].shape = shape;
        ps[i].values = buf[i];
        ck_assert_int_eq(dtrain_model_add(m, &ps[i]), 0);
    }
    const double lo[] = {0, 0.5, -1, -0.2, -0.2, -sqrt(6.0 / (IN + OUT)), -sqrt(6.0 / IN), -1};
    const double hi[] = {0, 0.5, 1, 0.2, 0.3, sqrt(6.0 / (IN + OUT)), sqrt(6.0 / IN), 1};
    const double sd[] = {0,
                         0,
                         0.1,
                         0.1 * .8796,
                         0.5 / sqrt(12),
                         sqrt(2.0 / (IN + OUT)),
                         sqrt(2.0 / IN),
                         sqrt(2.0 / IN)};
    for (int i = 0; i < n - 1; i++) {
        ck_assert_int_eq(dtrain_model_initial_values(m, i, 7, out), 0);
        double sum = 0, sq = 0;
        for (int k = 0; k < N; k++) {
            ck_assert_msg(out[k] >= lo[i] - 1e-6 && out[k] <= hi[i] + 1e-6, "%s[%d] = %g",
                          ps[i].name, k, (double)out[k]);
            sum += out[k];
            sq += (double)out[k] * out[k];
        }
        double mean = sum / N, stddev = sqrt(sq / N - mean * mean);
        ck_assert_msg(fabs(stddev - sd[i]) <= 0.05 * sd[i] + 1e-9, "%s: stddev %g, want %g",
                      ps[i].name, stddev, sd[i]);
        ck_assert_int_eq(dtrain_model_initial_values(m, i, 7, again), 0);
        ck_assert(memcmp(out, again, sizeof out) == 0);
        if (sd[i] > 0) {
            ck_assert_int_eq(dtrain_model_initial_values(m, i, 8, again), 0);
            ck_assert(memcmp(out, again, sizeof out) != 0);
        }
    }
    ck_assert_int_eq(dtrain_model_initial_values(m, n - 1, 7, out), DTRAIN_EINVAL);
    ck_assert_int_eq(dtrain_model_initial_values(m, n, 7, out), DTRAIN_EINVAL);
    dtrain_model_free(m);
}
END_TEST

/* ---- sessions without a job -------------------------------------------- */

START_TEST(session_errors) {
    dtrain_session *s = NULL;
    ck_assert_int_eq(dtrain_session_new(&s), 0);
    float g = 0;
    const float *grads[1] = {&g};
    /* A step before the session is ready. */
    ck_assert_int_eq(dtrain_session_step(s, grads, 0, NULL), DTRAIN_EPRECOND);
    ck_assert_msg(strstr(dtrain_errmsg(s), "not ready") != NULL, "message: %s", dtrain_errmsg(s));
    ck_assert(dtrain_session_should_stop(s));
    ck_assert_int_eq(dtrain_session_summary(s, "x", 1), DTRAIN_EPRECOND);
    ck_assert_int_eq(dtrain_session_start(s, NULL), DTRAIN_EINVAL);

    dtrain_cluster *c = NULL;
    dtrain_config *cfg = NULL;
    dtrain_model *m = NULL;
    ck_assert_int_eq(dtrain_cluster_new(&c), 0);
    ck_assert_int_eq(dtrain_config_new(&cfg), 0);
    ck_assert_int_eq(dtrain_model_new(&m), 0);
    ck_assert_int_eq(
        dtrain_cluster_parse(
            c, "{\"cluster\": {\"ps\": [\"127.0.0.1:9\"], \"worker\": [\"127.0.0.1:10\"]}}", "c"),
        0);
    dtrain_session_params p = {.cluster = c, .config = cfg, .model = m};
    ck_assert_int_eq(dtrain_session_start(s, &p), DTRAIN_EPERM); /* no role yet */
    ck_assert_int_eq(dtrain_cluster_set_task(c, "ps", 0), 0);
    ck_assert_int_eq(dtrain_session_start(s, &p), DTRAIN_EPERM); /* a ps */
    ck_assert_msg(strstr(dtrain_errmsg(s), "not a worker") != NULL, "message: %s",
                  dtrain_errmsg(s));
    ck_assert_int_eq(dtrain_cluster_set_task(c, "worker", 0), 0);
    ck_assert_int_eq(dtrain_session_start(s, &p), DTRAIN_EINVAL); /* no variables */
    /* A server on a worker's task. */
    dtrain_server *srv = NULL;
    ck_assert_int_eq(dtrain_server_new(&srv), 0);
    dtrain_server_params sp = {.cluster = c, .config = cfg};
    ck_assert_int_eq(dtrain_server_start(srv, &sp), DTRAIN_EPERM);
    ck_assert_int_eq(dtrain_server_join(srv), DTRAIN_EPRECOND);
    dtrain_server_free(srv);
    ck_assert_int_eq(dtrain_session_close(s), 0); /* never started: nothing to close */
    dtrain_session_free(s);
    dtrain_model_free(m);
    dtrain_config_free(cfg);
    dtrain_cluster_free(c);
}
END_TEST

/* ---- jobs --------------------------------------------------------------- */

static dt_test_job j; /* 1 ps, 2 library workers */

static void job_setup(void) {
    dt_test_job_setup(&j);
    dt_test_job_cluster(&j, 1, 2);
}

static void job_teardown(void) {
    dt_test_job_teardown(&j);
}

/* build/example_linear, beside the binary under test. */
static void example_path(char *buf, size_t cap) {
    const char *bin = dt_test_bin();
    const char *slash = strrchr(bin, '/');
    int dir = slash ? (int)(slash - bin) : 1;
    snprintf(buf, cap, "%.*s/example_linear", dir, slash ? bin : ".");
}

static pid_t start_example(const char *job_name, int task, const char *max_steps, const char *log) {
    char exe[1100], index[16], log_path[1200], set[64];
    example_path(exe, sizeof exe);
    ck_assert_msg(access(exe, X_OK) == 0, "%s is not built", exe);
    snprintf(index, sizeof index, "%d", task);
    snprintf(set, sizeof set, "max_steps=%s", max_steps);
    dt_test_job_log_path(&j, log, log_path, sizeof log_path);
    char *argv[] = {exe,
                    "--cluster",
                    j.cluster,
                    "--job-name",
                    (char *)job_name,
                    "--task-index",
                    index,
                    "--log-dir",
                    j.log_dir,
                    "--set",
                    set,
                    "--set",
                    "save_model_secs=1",
                    NULL};
    pid_t pid = dt_test_spawn(argv, log_path);
    ck_assert_int_gt(pid, 0);
    return pid;
}

/* 1 when the len bytes at data hold the string s. */
static int has_bytes(const char *data, size_t len, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(data + i, s, n) == 0) return 1;
    return 0;
}

/* The seed's program on the library, as 1 ps and 2 workers, trains to
 * max_steps; the chief's final checkpoint holds the program's names and
 * the line y = 2x. Worker 1 never spins (DTRAIN_SPIN_US=0); the chief's
 * budget is no number, which it says, and it spins with the default.
 * Then a chief of the test's own, declaring a weight of another shape, is
 * refused by the checkpoint it would restore. */
START_TEST(library_job) {
    pid_t pids[3];
    pids[0] = start_example("ps", 0, "300", "ps");
    setenv("DTRAIN_SPIN_US", "lots", 1);
    pids[1] = start_example("worker", 0, "300", "chief");
    setenv("DTRAIN_SPIN_US", "0", 1);
    pids[2] = start_example("worker", 1, "300", "worker1");
    unsetenv("DTRAIN_SPIN_US");
    const char *names[3] = {"ps", "chief", "worker 1"};
    dt_test_job_expect_done(&j, pids, names, 3, JOB_TIMEOUT_MS);
    ck_assert_msg(dt_test_job_log_has(&j, "chief", "worker 0: done"), "%s", dt_test_job_report(&j));
    ck_assert_msg(dt_test_job_log_has(&j, "chief", "DTRAIN_SPIN_US \"lots\" is not 0..100000"),
                  "%s", dt_test_job_report(&j));
    ck_assert_msg(!dt_test_job_log_has(&j, "worker1", "DTRAIN_SPIN_US"), "%s",
                  dt_test_job_report(&j));

    dt_tensors ts;
    memset(&ts, 0, sizeof ts);
    char path[1200];
    ck_assert_int_eq(dt_test_job_load_latest(&j, 300, &ts, path, sizeof path), 300);
    double w = dt_test_scalar(&ts, "linear/weight", path);
    double b = dt_test_scalar(&ts, "linear/bias", path);
    ck_assert_msg(fabs(w - 2.0) < 0.2 && fabs(b) < 0.2, "%s: w=%g b=%g", path, w, b);
    dt_tensors_deinit(&ts);
    /* The program's summaries are in the chief's event file. */
    char *events = NULL;
    DIR *d = opendir(j.log_dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; !events && (e = readdir(d));)
        if (strncmp(e->d_name, "events.out.tfevents", 19) == 0) {
            char p[1400];
            snprintf(p, sizeof p, "%s/%s", j.log_dir, e->d_name);
            size_t len = 0;
            events = dt_test_read_file(p, &len);
            ck_assert_ptr_nonnull(events);
            ck_assert(has_bytes(events, len, "linear/residual"));
            ck_assert(has_bytes(events, len, "linear/abs_error"));
        }
    closedir(d);
    ck_assert_msg(events != NULL, "no event file in %s", j.log_dir);
    free(events);

    /* A ps again, and a chief whose weight is (2, 1): not the checkpoint's. */
    pid_t ps = start_example("ps", 0, "400", "ps2");
    dtrain_cluster *c = NULL;
    dtrain_config *cfg = NULL;
    dtrain_model *m = NULL;
    dtrain_session *s = NULL;
    ck_assert_int_eq(dtrain_cluster_new(&c), 0);
    ck_assert_int_eq(dtrain_config_new(&cfg), 0);
    ck_assert_int_eq(dtrain_model_new(&m), 0);
    ck_assert_int_eq(dtrain_session_new(&s), 0);
    ck_assert_int_eq(dtrain_cluster_load(c, j.cluster), 0);
    ck_assert_int_eq(dtrain_cluster_set_task(c, "worker", 0), 0);
    char set[1200];
    snprintf(set, sizeof set, "log_dir=%s", j.log_dir);
    ck_assert_int_eq(dtrain_config_set(cfg, set), 0);
    ck_assert_int_eq(dtrain_config_set(cfg, "max_steps=400"), 0);
    static float wv[2], bv[1];
    const int64_t ws[2] = {2, 1}, bs[1] = {1};
    dtrain_var_params vw = {
        .name = "linear/weight", .ndim = 2, .shape = ws, .values = wv, .init = DTRAIN_INIT_ZEROS};
    dtrain_var_params vb = {
        .name = "linear/bias", .ndim = 1, .shape = bs, .values = bv, .init = DTRAIN_INIT_ZEROS};
    ck_assert_int_eq(dtrain_model_add(m, &vw), 0);
    ck_assert_int_eq(dtrain_model_add(m, &vb), 0);
    dtrain_session_params p = {.cluster = c, .config = cfg, .model = m};
    int rc = dtrain_session_start(s, &p);
    ck_assert_msg(rc == DTRAIN_EINVAL, "start: %d %s", rc, dtrain_errmsg(s));
    ck_assert_msg(strstr(dtrain_errmsg(s), "linear/weight has another dtype or shape") != NULL,
                  "message: %s", dtrain_errmsg(s));
    ck_assert(dtrain_session_should_stop(s));
    /* The model is in use until the session closes. */
    ck_assert_int_eq(dtrain_model_add(m, &vb), DTRAIN_EPRECOND);
    ck_assert_int_eq(dtrain_session_close(s), DTRAIN_EINVAL);
    float g = 0;
    const float *grads[2] = {&g, &g};
    ck_assert_int_eq(dtrain_session_step(s, grads, 0, NULL), DTRAIN_EPRECOND);
    dtrain_session_free(s);
    dtrain_model_free(m);
    dtrain_config_free(cfg);
    dtrain_cluster_free(c);
    /* The chief's failure is the job's: the ps says so and exits 1. */
    ck_assert_int_eq(dt_test_wait(ps, JOB_TIMEOUT_MS), 1);
}
END_TEST

/* A signal stops a library chief as it stops the binary's: it saves a
 * checkpoint and exits 128 + N while the ps serves on; the job started
 * again with a later max_steps restores that checkpoint and trains on. */
START_TEST(library_chief_signal_and_restart) {
    pid_t ps = start_example("ps", 0, "200000", "ps");
    pid_t chief = start_example("worker", 0, "200000", "chief");
    ck_assert_msg(dt_test_job_wait_log(&j, "chief", "worker 0: step 100 ", JOB_TIMEOUT_MS, chief),
                  "%s", dt_test_job_report(&j));
    ck_assert_int_eq(dt_test_kill(chief, SIGTERM), 0);
    ck_assert_int_eq(dt_test_wait(chief, JOB_TIMEOUT_MS), 128 + SIGTERM);
    int64_t saved = dt_test_ckpt_max(j.log_dir);
    ck_assert_msg(saved >= 100, "checkpoint after the signal: %lld\n%s", (long long)saved,
                  dt_test_job_report(&j));
    ck_assert(dt_test_alive(ps));
    /* Again, with an end in reach: the checkpoint, not a fresh model. */
    char target[32];
    snprintf(target, sizeof target, "%lld", (long long)saved + 300);
    dt_test_kill(ps, SIGKILL);
    dt_test_wait(ps, JOB_TIMEOUT_MS);
    ps = start_example("ps", 0, target, "ps2");
    chief = start_example("worker", 0, target, "chief2");
    ck_assert_int_eq(dt_test_wait(chief, JOB_TIMEOUT_MS), 0);
    ck_assert_msg(dt_test_job_log_has(&j, "chief2", "chief: restored"), "%s",
                  dt_test_job_report(&j));
    ck_assert_int_eq(dt_test_ckpt_max(j.log_dir), saved + 300);
}
END_TEST

/* A ps killed mid-job and started again empty is restored by the library
 * chief from its latest checkpoint, as the binary's chief does, and the
 * job trains on past it: a checkpoint after the restore is at a later step. */
START_TEST(library_ps_restarted) {
    pid_t ps = start_example("ps", 0, "200000", "ps");
    pid_t chief = start_example("worker", 0, "200000", "chief");
    ck_assert_msg(dt_test_job_wait_log(&j, "chief", "chief: saved ", JOB_TIMEOUT_MS, chief), "%s",
                  dt_test_job_report(&j));
    ck_assert_int_eq(dt_test_kill(ps, SIGKILL), 0);
    dt_test_wait(ps, JOB_TIMEOUT_MS);
    int64_t before = dt_test_ckpt_max(j.log_dir);
    ps = start_example("ps", 0, "200000", "ps2");
    ck_assert_msg(
        dt_test_job_wait_log(&j, "chief", "lost its model; restoring it", JOB_TIMEOUT_MS, chief),
        "%s", dt_test_job_report(&j));
    ck_assert_msg(dt_test_ckpt_wait_after(j.log_dir, before, chief, JOB_TIMEOUT_MS) > before, "%s",
                  dt_test_job_report(&j));
    ck_assert_int_eq(dt_test_kill(chief, SIGTERM), 0);
    ck_assert_int_eq(dt_test_wait(chief, JOB_TIMEOUT_MS), 128 + SIGTERM);
    ck_assert(dt_test_alive(ps));
}
END_TEST

/* ---- one training loop --------------------------------------------------- */

/* The sets both runs of same_loop_bit_for_bit take: sync, 1 ps + 1 worker,
 * the built-in linear model's data, seed and steps. */
static const char *const same_loop_sets[] = {"mode=sync",          "max_steps=150",
                                             "epochs=0",           "seed=7",
                                             "learning_rate=0.05", "save_model_secs=3600"};

/* Points DTRAIN_TLS_* at the files of identity id ("worker-1") in certs,
 * for the next role started (they inherit the environment). */
static void tls_env(const char *certs, const char *id) {
    char path[1300];
    snprintf(path, sizeof path, "%s/%s.pem", certs, id);
    setenv("DTRAIN_TLS_CERT", path, 1);
    snprintf(path, sizeof path, "%s/%s-key.pem", certs, id);
    setenv("DTRAIN_TLS_KEY", path, 1);
    snprintf(path, sizeof path, "%s/ca.pem", certs);
    setenv("DTRAIN_TLS_CA", path, 1);
}

/* The library's roles take the binary's security as it does: a job of
 * library programs over mutual TLS trains to max_steps with no refusal;
 * one with per-identity tokens too, and a library chief holding a wrong
 * token is refused, says so naming its identity, and exits 1. */
START_TEST(library_secure_jobs) {
    char certs[1100], cmd[1300];
    snprintf(certs, sizeof certs, "%s/certs", j.dir);
    snprintf(cmd, sizeof cmd, "WORKERS=2 PS=1 sh scripts/make_certs.sh '%s' >/dev/null 2>&1",
             certs);
    ck_assert_int_eq(system(cmd), 0);
    tls_env(certs, "ps-0");
    pid_t pids[3];
    pids[0] = start_example("ps", 0, "300", "ps");
    tls_env(certs, "chief");
    pids[1] = start_example("worker", 0, "300", "chief");
    tls_env(certs, "worker-1");
    pids[2] = start_example("worker", 1, "300", "worker1");
    const char *names[3] = {"ps", "chief", "worker 1"};
    dt_test_job_expect_done(&j, pids, names, 3, JOB_TIMEOUT_MS);
    ck_assert_msg(dt_test_job_log_has(&j, "ps", "client certificates of CA"),
                  "the library ps did not serve mTLS; logs:%s", dt_test_job_report(&j));
    ck_assert_msg(!dt_test_job_log_has(&j, "ps", "refused"), "the ps refused a call; logs:%s",
                  dt_test_job_report(&j));
    ck_assert_int_ge(dt_test_job_check_latest(&j, 300, 0), 300);
    unsetenv("DTRAIN_TLS_CERT");
    unsetenv("DTRAIN_TLS_KEY");
    unsetenv("DTRAIN_TLS_CA");

    /* Tokens, in a log dir of their own; the wrong chief in another, so
     * that nothing it may leave there meets the job. */
    char tokens[1200], bad[1200], job_dir[1100];
    snprintf(tokens, sizeof tokens, "%s/tokens", j.dir);
    snprintf(bad, sizeof bad, "%s/tokens-bad", j.dir);
    ck_assert_int_eq(
        dt_test_write_file(tokens, "chief c-5e1f07\nworker:1 w1-88ab3c\nps:0 p0-1d2e\n"), 0);
    ck_assert_int_eq(dt_test_write_file(bad, "chief c-not-it\nps:0 p0-1d2e\n"), 0);
    memcpy(job_dir, j.log_dir, sizeof job_dir);
    ck_assert_int_lt(snprintf(j.log_dir, sizeof j.log_dir, "%s-tokens", job_dir),
                     (int)sizeof j.log_dir);
    setenv("DTRAIN_TOKEN_FILE", tokens, 1);
    pids[0] = start_example("ps", 0, "300", "ps-token");
    ck_assert_int_lt(snprintf(j.log_dir, sizeof j.log_dir, "%s-wrong", job_dir),
                     (int)sizeof j.log_dir);
    setenv("DTRAIN_TOKEN_FILE", bad, 1);
    pid_t wrong = start_example("worker", 0, "300", "chief-wrong");
    dt_test_job_expect_exit(&j, wrong, "the chief with a wrong token", JOB_TIMEOUT_MS, 1);
    ck_assert_msg(dt_test_job_log_has(&j, "chief-wrong", "wrong token for chief"),
                  "the refusal does not say which token; logs:%s", dt_test_job_report(&j));
    /* The ps serves on, unharmed, for the right chief and worker. */
    ck_assert_msg(dt_test_alive(pids[0]), "the ps ended; logs:%s", dt_test_job_report(&j));
    ck_assert_int_lt(snprintf(j.log_dir, sizeof j.log_dir, "%s-tokens", job_dir),
                     (int)sizeof j.log_dir);
    setenv("DTRAIN_TOKEN_FILE", tokens, 1);
    pids[1] = start_example("worker", 0, "300", "chief-token");
    pids[2] = start_example("worker", 1, "300", "worker1-token");
    dt_test_job_expect_done(&j, pids, names, 3, JOB_TIMEOUT_MS);
    ck_assert_msg(dt_test_job_log_has(&j, "ps-token", "tokens and tensors cross the network"),
                  "no plaintext warning; logs:%s", dt_test_job_report(&j));
    ck_assert_msg(dt_test_job_log_has(&j, "ps-token", "wrong token for chief"),
                  "the ps did not log the refusal; logs:%s", dt_test_job_report(&j));
    ck_assert_int_ge(dt_test_job_check_latest(&j, 300, 0), 300);
    unsetenv("DTRAIN_TOKEN_FILE");
}
END_TEST

/* The binary's chief and a library chief of the test's own (in this
 * process) train the same linear model, sync, 1 ps + 1 worker: the
 * library program declares the built-in's variables with the public
 * initializers (the weight normal with stddev 1/sqrt(fan_in), the bias
 * zeros: the built-in's rule, and its streams), reads the job's own data
 * set (dt_job_open_data, the same shuffled batches) and computes the
 * gradient with the built-in model's code (dt_model_loss_grad); the
 * session, the push, the ps's update and the checkpoint are the
 * library's. Both final checkpoints hold the same variables, bit for bit:
 * one training loop. */
START_TEST(same_loop_bit_for_bit) {
    dt_test_job_set(&j, same_loop_sets, (int)(sizeof same_loop_sets / sizeof *same_loop_sets));
    dt_test_job_cluster(&j, 1, 1);
    pid_t pids[2] = {dt_test_job_start(&j, "ps", 0, "ps"),
                     dt_test_job_start(&j, "worker", 0, "chief")};
    const char *names[2] = {"ps", "chief"};
    dt_test_job_expect_done(&j, pids, names, 2, JOB_TIMEOUT_MS);
    dt_tensors builtin;
    memset(&builtin, 0, sizeof builtin);
    char builtin_path[1200];
    ck_assert_int_eq(dt_test_job_load_latest(&j, 150, &builtin, builtin_path, sizeof builtin_path),
                     150);

    /* The library run: a new cluster and log dir, the binary's ps. */
    dt_job job;
    dt_test_job_config(&j, &job);
    snprintf(j.log_dir, sizeof j.log_dir, "%s/logs-library", j.dir);
    dt_test_job_cluster(&j, 1, 1);
    pid_t ps = dt_test_job_start(&j, "ps", 0, "ps-library");

    dt_tensor specs[DT_MODEL_MAX_VARS];
    int count = 0;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_specs(&job.model, specs, &count, &err), 0);
    ck_assert_int_eq(count, 2);
    dt_tensors vars, grads;
    ck_assert_int_eq(dt_tensors_init(&vars, specs, count, &err), 0);
    ck_assert_int_eq(dt_tensors_init(&grads, specs, count, &err), 0);
    dt_model *model = NULL;
    dt_dataset *data = NULL;
    ck_assert_msg(dt_model_new(&job.model, &model, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_job_open_data(&job, 0, 1, &data, &err) == 0, "%s", err.msg);

    dtrain_cluster *c = NULL;
    dtrain_config *cfg = NULL;
    dtrain_model *m = NULL;
    dtrain_session *s = NULL;
    ck_assert_int_eq(dtrain_cluster_new(&c), 0);
    ck_assert_int_eq(dtrain_config_new(&cfg), 0);
    ck_assert_int_eq(dtrain_model_new(&m), 0);
    ck_assert_int_eq(dtrain_session_new(&s), 0);
    ck_assert_int_eq(dtrain_cluster_load(c, j.cluster), 0);
    ck_assert_int_eq(dtrain_cluster_set_task(c, "worker", 0), 0);
    char set[1200];
    snprintf(set, sizeof set, "log_dir=%s", j.log_dir);
    ck_assert_int_eq(dtrain_config_set(cfg, set), 0);
    for (size_t k = 0; k < sizeof same_loop_sets / sizeof *same_loop_sets; k++)
        ck_assert_int_eq(dtrain_config_set(cfg, same_loop_sets[k]), 0);
    for (int i = 0; i < count; i++) {
        int64_t shape[DT_TENSOR_MAX_DIMS];
        for (int d = 0; d < specs[i].ndim; d++)
            shape[d] = specs[i].shape[d];
        /* linear: weight (F, 1) feeding no ReLU, bias (1). */
        dtrain_var_params vp = {.name = specs[i].name,
                                .ndim = specs[i].ndim,
                                .shape = shape,
                                .values = vars.items[i].data,
                                .init = i == 0 ? DTRAIN_INIT_NORMAL : DTRAIN_INIT_ZEROS,
                                .stddev = 1.0 / sqrt((double)shape[0])};
        ck_assert_int_eq(dtrain_model_add(m, &vp), 0);
    }
    dtrain_session_params p = {.cluster = c, .config = cfg, .model = m};
    int rc = dtrain_session_start(s, &p);
    ck_assert_msg(rc == 0, "start: %s", dtrain_errmsg(s));
    const float *g[2] = {grads.items[0].data, grads.items[1].data};
    int64_t steps = 0;
    while (rc == 0 && !dtrain_session_should_stop(s)) {
        dt_batch batch;
        double loss = 0;
        ck_assert_msg(dt_data_next(data, job.batch_size, &batch, &err) == 0, "%s", err.msg);
        ck_assert_msg(dt_model_loss_grad(model, &vars, &batch, &grads, &loss, &err) == 0, "%s",
                      err.msg);
        rc = dtrain_session_step(s, g, loss, NULL);
        steps++;
    }
    ck_assert_msg(rc == 0, "step: %s", dtrain_errmsg(s));
    ck_assert_msg(dtrain_session_close(s) == 0, "close: %s", dtrain_errmsg(s));
    ck_assert_int_eq(steps, 150);
    dt_test_job_expect_exit(&j, ps, "ps-library", JOB_TIMEOUT_MS, 0);

    dt_tensors library;
    memset(&library, 0, sizeof library);
    char library_path[1200];
    ck_assert_int_eq(dt_test_job_load_latest(&j, 150, &library, library_path, sizeof library_path),
                     150);
    for (int i = 0; i < count; i++) {
        const dt_tensor *a = dt_tensors_find(&builtin, specs[i].name);
        const dt_tensor *b = dt_tensors_find(&library, specs[i].name);
        ck_assert_msg(a && b, "%s: in %s and %s", specs[i].name, builtin_path, library_path);
        ck_assert_int_eq(a->nbytes, b->nbytes);
        const float *av = a->data, *bv = b->data;
        ck_assert_msg(memcmp(a->data, b->data, a->nbytes) == 0,
                      "%s differs: %.9g (%s) vs %.9g (%s)", specs[i].name, av[0], builtin_path,
                      bv[0], library_path);
    }
    dt_tensors_deinit(&builtin);
    dt_tensors_deinit(&library);
    dtrain_session_free(s);
    dtrain_model_free(m);
    dtrain_config_free(cfg);
    dtrain_cluster_free(c);
    dt_data_free(data);
    dt_model_free(model);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&grads);
}
END_TEST

/* ---- tables ------------------------------------------------------------ */

#define TABLE_ROWS 1000 /* the table's R; the batches use ids below 100 */
#define TABLE_DIM 4
#define TABLE_BATCH 8
#define WIDE_ROWS 500 /* the second table, "wide": one float a row, id 3k for emb's k */

/* Row id's target: the sum of its row plus the bias is to learn it. */
static float table_target(int64_t id) {
    return (float)((id % 5) - 2) * 0.5f;
}

/* A library chief in this process of the table model: a bias and the
 * table "emb" (TABLE_ROWS x TABLE_DIM), with ntables 2 the table "wide"
 * (WIDE_ROWS x 1) too, its session started on the job. */
typedef struct {
    dtrain_cluster *c;
    dtrain_config *cfg;
    dtrain_model *m;
    dtrain_session *s;
    int ntables;
    float bias[1];
    int64_t ids[TABLE_BATCH], wide_ids[TABLE_BATCH];
    float rows[TABLE_BATCH * TABLE_DIM], row_grads[TABLE_BATCH * TABLE_DIM], gb;
    float wide[TABLE_BATCH], wide_grads[TABLE_BATCH];
} table_prog;

/* The job of sets (1 ps, the binary's, and this process's chief): starts
 * the ps, then t's session of ntables tables, emb's rows from init.
 * Returns the ps's pid. */
static pid_t table_prog_start(table_prog *t, int ntables, dtrain_init init, const char *const *sets,
                              int n) {
    dt_test_job_set(&j, sets, n);
    dt_test_job_cluster(&j, 1, 1);
    pid_t ps = dt_test_job_start(&j, "ps", 0, "ps");
    memset(t, 0, sizeof *t);
    t->ntables = ntables;
    ck_assert_int_eq(dtrain_cluster_new(&t->c), 0);
    ck_assert_int_eq(dtrain_config_new(&t->cfg), 0);
    ck_assert_int_eq(dtrain_model_new(&t->m), 0);
    ck_assert_int_eq(dtrain_session_new(&t->s), 0);
    ck_assert_int_eq(dtrain_cluster_load(t->c, j.cluster), 0);
    ck_assert_int_eq(dtrain_cluster_set_task(t->c, "worker", 0), 0);
    char set[1200];
    snprintf(set, sizeof set, "log_dir=%s", j.log_dir);
    ck_assert_int_eq(dtrain_config_set(t->cfg, set), 0);
    for (int k = 0; k < n; k++)
        ck_assert_int_eq(dtrain_config_set(t->cfg, sets[k]), 0);
    const int64_t bias_shape[1] = {1};
    dtrain_var_params vb = {.name = "bias",
                            .ndim = 1,
                            .shape = bias_shape,
                            .values = t->bias,
                            .init = DTRAIN_INIT_ZEROS};
    dtrain_table_params tp = {
        .name = "emb", .rows = TABLE_ROWS, .dim = TABLE_DIM, .init = init, .scale = 0.1};
    ck_assert_int_eq(dtrain_model_add(t->m, &vb), 0);
    ck_assert_int_eq(dtrain_model_add_table(t->m, &tp), 0);
    dtrain_table_params wp = {
        .name = "wide", .rows = WIDE_ROWS, .dim = 1, .init = DTRAIN_INIT_ZEROS};
    if (ntables == 2) ck_assert_int_eq(dtrain_model_add_table(t->m, &wp), 0);
    dtrain_session_params p = {.cluster = t->c, .config = t->cfg, .model = t->m};
    int rc = dtrain_session_start(t->s, &p);
    ck_assert_msg(rc == 0, "start: %s", dtrain_errmsg(t->s));
    return ps;
}

/* Step `step`'s batch, 8 distinct ids below 100, sorted: (7 step + 13 k)
 * mod 100, into t->ids; then their rows into t->rows (and "wide"'s rows
 * 3 id into t->wide). */
static int table_prog_lookup(table_prog *t, int64_t step) {
    for (int k = 0; k < TABLE_BATCH; k++)
        t->ids[k] = (7 * step + 13 * k) % 100;
    for (int a = 1; a < TABLE_BATCH; a++)
        for (int b = a; b > 0 && t->ids[b - 1] > t->ids[b]; b--) {
            int64_t x = t->ids[b];
            t->ids[b] = t->ids[b - 1];
            t->ids[b - 1] = x;
        }
    for (int k = 0; k < TABLE_BATCH; k++)
        t->wide_ids[k] = 3 * t->ids[k];
    int rc = dtrain_session_lookup(t->s, 0, t->ids, TABLE_BATCH, t->rows);
    if (rc == 0 && t->ntables == 2)
        rc = dtrain_session_lookup(t->s, 1, t->wide_ids, TABLE_BATCH, t->wide);
    return rc;
}

/* A prediction of the model from its parts: bias, emb's row, wide's. */
static double table_pred(float bias, const float *row, const float *wide) {
    double pred = bias;
    for (int d = 0; d < TABLE_DIM; d++)
        pred += row[d];
    return wide ? pred + wide[0] : pred;
}

/* After a lookup: p = sum(row) + bias, loss = mean (p - y)^2, both
 * gradients pushed. */
static int table_prog_push(table_prog *t, double *loss, dtrain_step_result *r) {
    double l = 0;
    t->gb = 0;
    for (int k = 0; k < TABLE_BATCH; k++) {
        double pred =
            table_pred(t->bias[0], &t->rows[k * TABLE_DIM], t->ntables == 2 ? &t->wide[k] : NULL);
        double e = pred - table_target(t->ids[k]);
        l += e * e / TABLE_BATCH;
        t->gb += (float)(2 * e / TABLE_BATCH);
        for (int d = 0; d < TABLE_DIM; d++)
            t->row_grads[k * TABLE_DIM + d] = (float)(2 * e / TABLE_BATCH);
        t->wide_grads[k] = (float)(2 * e / TABLE_BATCH);
    }
    *loss = l;
    const float *grads[1] = {&t->gb}, *rgrads[2] = {t->row_grads, t->wide_grads};
    return dtrain_session_step_rows(t->s, grads, rgrads, l, r);
}

/* After the training loop (rc its outcome): the session closed, the ps
 * exited 0, and the checkpoint of step `steps` into *ts (path its file). */
static void table_prog_end(table_prog *t, int rc, pid_t ps, int64_t steps, dt_tensors *ts,
                           char *path, size_t cap) {
    ck_assert_msg(rc == 0, "training: %s", dtrain_errmsg(t->s));
    ck_assert_msg(dtrain_session_close(t->s) == 0, "close: %s", dtrain_errmsg(t->s));
    dt_test_job_expect_exit(&j, ps, "ps", JOB_TIMEOUT_MS, 0);
    memset(ts, 0, sizeof *ts);
    ck_assert_int_eq(dt_test_job_load_latest(&j, steps, ts, path, cap), steps);
}

static void table_prog_free(table_prog *t) {
    dtrain_session_free(t->s);
    dtrain_model_free(t->m);
    dtrain_config_free(t->cfg);
    dtrain_cluster_free(t->c);
}

/* wide's row for emb's id in a checkpoint's "wide/ids" and
 * "wide/values", or NULL when it holds none. */
static const float *wide_row(const dt_tensor *ids, const dt_tensor *values, int64_t id) {
    for (int64_t h = 0; ids && h < ids->shape[0]; h++)
        if (((const int64_t *)ids->data)[h] == 3 * id) return (const float *)values->data + h;
    return NULL;
}

/* A library chief (this process) of a model with _i tables (emb; then
 * wide too) trains on the binary's ps: each step looks up its batch's
 * rows of each, computes p = sum(row) + wide + bias against table_target,
 * and pushes every gradient. Bad lookups and a step without one are
 * refused on the way; the final checkpoint holds each table's rows under
 * the program's names ("emb/ids", "emb/values", "wide/...") and they fit
 * the targets. */
START_TEST(library_table_job) {
    static const char *const sets[] = {"max_steps=400", "learning_rate=0.1",
                                       "save_model_secs=3600"};
    table_prog t;
    pid_t ps = table_prog_start(&t, _i, DTRAIN_INIT_NORMAL, sets, 3);
    dtrain_session *s = t.s;

    float rows[TABLE_BATCH * TABLE_DIM], gb = 0;
    const float *grads[1] = {&gb}, *rgrads[2] = {t.row_grads, t.wide_grads};
    /* Refused: a step before a lookup, the plain step, ids out of range
     * or out of order, a table the model has not. */
    ck_assert_int_eq(dtrain_session_step_rows(s, grads, rgrads, 0, NULL), DTRAIN_EPRECOND);
    ck_assert_msg(strstr(dtrain_errmsg(s), "look up") != NULL, "message: %s", dtrain_errmsg(s));
    ck_assert_int_eq(dtrain_session_step(s, grads, 0, NULL), DTRAIN_EINVAL);
    int64_t bad[2] = {3, TABLE_ROWS};
    ck_assert_int_eq(dtrain_session_lookup(s, 0, bad, 2, rows), DTRAIN_EINVAL);
    ck_assert_msg(strstr(dtrain_errmsg(s), "ids[1] = 1000 is not in [0, 1000)") != NULL,
                  "message: %s", dtrain_errmsg(s));
    bad[1] = 3;
    ck_assert_int_eq(dtrain_session_lookup(s, 0, bad, 2, rows), DTRAIN_EINVAL);
    ck_assert_msg(strstr(dtrain_errmsg(s), "strictly increasing") != NULL, "message: %s",
                  dtrain_errmsg(s));
    ck_assert_int_eq(dtrain_session_lookup(s, _i, bad, 1, rows), DTRAIN_EPRECOND);
    ck_assert_msg(strstr(dtrain_errmsg(s), "no table") != NULL, "message: %s", dtrain_errmsg(s));
    if (_i == 2) { /* a lookup of emb alone: the step wants wide's too */
        ck_assert_int_eq(dtrain_session_lookup(s, 0, bad, 1, rows), 0);
        ck_assert_int_eq(dtrain_session_step_rows(s, grads, rgrads, 0, NULL), DTRAIN_EPRECOND);
        ck_assert_msg(strstr(dtrain_errmsg(s), "table \"wide\"") != NULL, "message: %s",
                      dtrain_errmsg(s));
    }

    double first_loss = -1, loss = 0;
    int rc = 0;
    for (int64_t step = 0; rc == 0 && !dtrain_session_should_stop(s); step++) {
        rc = table_prog_lookup(&t, step);
        if (rc != 0 || dtrain_session_should_stop(s)) break;
        rc = table_prog_push(&t, &loss, NULL);
        if (first_loss < 0) first_loss = loss;
    }
    dt_tensors ts;
    char path[1200];
    table_prog_end(&t, rc, ps, 400, &ts, path, sizeof path);
    ck_assert_msg(loss < first_loss / 4, "loss %g, first %g", loss, first_loss);
    const dt_tensor *held = dt_tensors_find(&ts, "emb/ids");
    const dt_tensor *values = dt_tensors_find(&ts, "emb/values");
    const dt_tensor *b = dt_tensors_find(&ts, "bias");
    ck_assert_msg(held && values && b, "%s: no emb/ids, emb/values or bias", path);
    const dt_tensor *wide_ids = dt_tensors_find(&ts, "wide/ids");
    const dt_tensor *wide = dt_tensors_find(&ts, "wide/values");
    ck_assert_msg(_i == 2 ? wide_ids && wide : !wide_ids && !wide, "%s: wide/ids %s", path,
                  wide_ids ? "held" : "missing");
    if (wide) { /* every emb id k of a batch had wide's row 3k pushed */
        ck_assert_int_eq(wide_ids->shape[0], held->shape[0]);
        ck_assert_int_eq(wide->ndim, 2);
        ck_assert_int_eq(wide->shape[1], 1);
    }
    ck_assert_int_eq(held->dtype, DT_DTYPE_I64);
    const int64_t n = held->shape[0];
    ck_assert_msg(n > 50 && n <= 100, "%s: %lld rows held", path, (long long)n);
    ck_assert_int_eq(values->ndim, 2);
    ck_assert_int_eq(values->shape[0], n);
    ck_assert_int_eq(values->shape[1], TABLE_DIM);
    const int64_t *hid = held->data;
    const float *hv = values->data;
    double sq = 0;
    for (int64_t k = 0; k < n; k++) {
        ck_assert_msg(hid[k] >= 0 && hid[k] < 100, "%s: id %lld", path, (long long)hid[k]);
        const float *wr = wide_row(wide_ids, wide, hid[k]);
        ck_assert_msg(_i == 1 || wr, "%s: no wide row %lld", path, (long long)(3 * hid[k]));
        double pred = table_pred(((const float *)b->data)[0], &hv[k * TABLE_DIM], wr);
        sq += (pred - table_target(hid[k])) * (pred - table_target(hid[k]));
    }
    ck_assert_msg(sq / (double)n < 0.05, "%s: mean squared error %g over %lld rows", path,
                  sq / (double)n, (long long)n);
    dt_tensors_deinit(&ts);
    table_prog_free(&t);
}
END_TEST

/* The ps of a library table job is SIGKILLed between two steps, once a
 * checkpoint holds trained rows, and started again empty. The library
 * chief restores it from that checkpoint, rows included: the next lookup
 * reads the checkpoint's rows exactly (a fresh table would read its
 * initializer's), the global step goes on from the checkpoint's, and a
 * later checkpoint follows; a stop then ends the session as a signal. */
START_TEST(library_table_ps_restarted) {
    static const char *const sets[] = {"max_steps=1000000", "learning_rate=0.1",
                                       "save_model_secs=1"};
    table_prog t;
    pid_t ps = table_prog_start(&t, _i, DTRAIN_INIT_NORMAL, sets, 3);
    double loss = 0;
    int64_t step = 0;
    int rc = 0;
    /* Train until a checkpoint of step 100 or later is on disk. */
    while (rc == 0 && (step < 100 || dt_test_ckpt_max(j.log_dir) < 100)) {
        rc = table_prog_lookup(&t, step);
        if (rc == 0) rc = table_prog_push(&t, &loss, NULL);
        step++;
        ck_assert_msg(step < 5000000, "no checkpoint after %lld steps", (long long)step);
    }
    ck_assert_msg(rc == 0, "training: %s", dtrain_errmsg(t.s));
    ck_assert_int_eq(dt_test_kill(ps, SIGKILL), 0);
    dt_test_wait(ps, JOB_TIMEOUT_MS);
    dt_tensors ts;
    memset(&ts, 0, sizeof ts);
    char path[1200];
    int64_t saved = dt_test_job_load_latest(&j, 100, &ts, path, sizeof path);
    ck_assert_int_ge(saved, 100);
    ps = dt_test_job_start(&j, "ps", 0, "ps2");

    rc = table_prog_lookup(&t, 0);
    ck_assert_msg(rc == 0, "lookup after the restart: %s", dtrain_errmsg(t.s));
    const dt_tensor *held = dt_tensors_find(&ts, "emb/ids");
    const dt_tensor *values = dt_tensors_find(&ts, "emb/values");
    ck_assert_msg(held && values, "%s: no emb/ids or emb/values", path);
    int found = 0;
    for (int k = 0; k < TABLE_BATCH; k++)
        for (int64_t h = 0; h < held->shape[0]; h++)
            if (((const int64_t *)held->data)[h] == t.ids[k]) {
                found++;
                const float *want = (const float *)values->data + h * TABLE_DIM;
                for (int d = 0; d < TABLE_DIM; d++)
                    ck_assert_msg(t.rows[k * TABLE_DIM + d] == want[d],
                                  "row %lld [%d]: %g after the restart, %g in %s",
                                  (long long)t.ids[k], d, t.rows[k * TABLE_DIM + d], want[d], path);
            }
    ck_assert_msg(found == TABLE_BATCH, "%d of the batch's ids in %s", found, path);
    const dt_tensor *wide_ids = dt_tensors_find(&ts, "wide/ids");
    const dt_tensor *wide = dt_tensors_find(&ts, "wide/values");
    for (int k = 0; _i == 2 && k < TABLE_BATCH; k++) {
        const float *want = wide_row(wide_ids, wide, t.ids[k]);
        ck_assert_msg(want, "%s: no wide row %lld", path, (long long)t.wide_ids[k]);
        ck_assert_msg(t.wide[k] == *want, "wide row %lld: %g after the restart, %g in %s",
                      (long long)t.wide_ids[k], t.wide[k], *want, path);
    }
    dtrain_step_result r;
    rc = table_prog_push(&t, &loss, &r);
    ck_assert_msg(rc == 0, "step after the restart: %s", dtrain_errmsg(t.s));
    ck_assert_msg(r.global_step >= saved, "global_step %lld after restoring step %lld",
                  (long long)r.global_step, (long long)saved);
    dt_tensors_deinit(&ts);
    /* And on: a checkpoint after the restore, at a later step. */
    int64_t after = saved;
    for (step = 1; rc == 0 && after <= saved; step++) {
        rc = table_prog_lookup(&t, step);
        if (rc == 0) rc = table_prog_push(&t, &loss, NULL);
        after = dt_test_ckpt_max(j.log_dir);
        ck_assert_msg(step < 5000000, "no checkpoint after the restore");
    }
    ck_assert_msg(rc == 0, "training after the restart: %s", dtrain_errmsg(t.s));
    dtrain_session_stop(t.s);
    ck_assert_int_eq(dtrain_session_close(t.s), DTRAIN_ECANCELLED);
    ck_assert(dt_test_alive(ps));
    table_prog_free(&t);
}
END_TEST

/* A table's row r in a checkpoint's "<name>/ids" and "<name>/values", or
 * NULL when it holds none. */
static const float *held_row(const dt_tensors *ts, const char *table, int64_t r, int dim) {
    char name[64];
    snprintf(name, sizeof name, "%s/ids", table);
    const dt_tensor *ids = dt_tensors_find(ts, name);
    snprintf(name, sizeof name, "%s/values", table);
    const dt_tensor *values = dt_tensors_find(ts, name);
    for (int64_t h = 0; ids && values && h < ids->shape[0]; h++)
        if (((const int64_t *)ids->data)[h] == r) return (const float *)values->data + h * dim;
    return NULL;
}

/*
 * A library chief with both tables and pipeline_push: each step's lookups
 * and row gradients fill the session's buffers while the last step's push
 * is still reading its own. Every gradient is 1 (SGD at 0.5, rows from 0),
 * so a row ends at exactly -0.5 x the pushes that carried its id: the
 * checkpoint's rows must count step k's ids for every pushed step k (a
 * push that read the next step's ids, or lost one, would not), and its
 * bias -150 (a pipelined chief once saved the other of the worker's two
 * slabs of values, two pushes old). The program's bias at step j >= 1 is
 * -0.5 (j - 1): its values came while the push before was in flight, so
 * the pushes did overlap.
 */
START_TEST(library_table_pipelined) {
    static const char *const sets[] = {"max_steps=300",        "optimizer=sgd",
                                       "learning_rate=0.5",    "lr_schedule=constant",
                                       "save_model_secs=3600", "pipeline_push=true"};
    table_prog t;
    pid_t ps = table_prog_start(&t, 2, DTRAIN_INIT_ZEROS, sets, 6);
    static int count[100];
    memset(count, 0, sizeof count);
    int rc = 0;
    int64_t step = 0;
    for (; rc == 0 && !dtrain_session_should_stop(t.s); step++) {
        ck_assert_msg(t.bias[0] == (step == 0 ? 0.0f : -0.5f * (float)(step - 1)),
                      "step %lld: bias %g (pushes not overlapped?)", (long long)step, t.bias[0]);
        if ((rc = table_prog_lookup(&t, step)) != 0 || dtrain_session_should_stop(t.s)) break;
        for (int k = 0; k < TABLE_BATCH * TABLE_DIM; k++)
            t.row_grads[k] = 1.0f;
        for (int k = 0; k < TABLE_BATCH; k++)
            t.wide_grads[k] = 1.0f;
        t.gb = 1.0f;
        const float *grads[1] = {&t.gb}, *rgrads[2] = {t.row_grads, t.wide_grads};
        if (step < 300) /* pushed: the job ends at 300, the gradient beside the last is not */
            for (int k = 0; k < TABLE_BATCH; k++)
                count[t.ids[k]]++;
        rc = dtrain_session_step_rows(t.s, grads, rgrads, 1.0, NULL);
    }
    dt_tensors ts;
    char path[1200];
    table_prog_end(&t, rc, ps, 300, &ts, path, sizeof path);
    ck_assert_msg(step >= 300, "%lld steps", (long long)step);
    const dt_tensor *b = dt_tensors_find(&ts, "bias");
    ck_assert_msg(b && ((const float *)b->data)[0] == -150.0f, "%s: bias %g", path,
                  b ? ((const float *)b->data)[0] : 0.0f);
    for (int64_t id = 0; id < 100; id++) {
        const float *row = held_row(&ts, "emb", id, TABLE_DIM);
        const float *wide = held_row(&ts, "wide", 3 * id, 1);
        ck_assert_msg(count[id] == 0 ? !row && !wide : row && wide, "%s: row %lld: %d pushes", path,
                      (long long)id, count[id]);
        for (int d = 0; row && d < TABLE_DIM; d++)
            ck_assert_msg(row[d] == -0.5f * (float)count[id],
                          "%s: emb row %lld [%d] = %g after %d pushes", path, (long long)id, d,
                          row[d], count[id]);
        if (wide)
            ck_assert_msg(*wide == -0.5f * (float)count[id], "%s: wide row %lld = %g, %d pushes",
                          path, (long long)(3 * id), *wide, count[id]);
    }
    dt_tensors_deinit(&ts);
    table_prog_free(&t);
}
END_TEST

/* The Python module's tests (python/tests), with Debian's python3 and the
 * library of this build (DTRAIN_LIBRARY). */
START_TEST(python_module) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* A sanitized library cannot load into an interpreter that was not
     * started with its runtime; the plain build runs these. */
    fprintf(stderr, "api: python_module: not run in a sanitized build\n");
    return;
#endif
    const char *py = "/usr/bin/python3";
    if (access(py, X_OK) != 0) {
        fprintf(stderr, "api: %s missing; the module's tests are not run\n", py);
        ck_assert_msg(0, "%s missing", py);
    }
    char lib[1100], bin_dir[1100];
    example_path(lib, sizeof lib);
    char *slash = strrchr(lib, '/');
    *slash = '\0';
    snprintf(bin_dir, sizeof bin_dir, "%s", lib);
    snprintf(slash, sizeof lib - (size_t)(slash - lib), "/libdtrain.so.0");
    setenv("DTRAIN_LIBRARY", lib, 1);
    setenv("DTRAIN_BUILD", bin_dir, 1);
    setenv("DTRAIN_TEST_TMP", j.dir, 1);
    char log[1200];
    dt_test_job_log_path(&j, "python", log, sizeof log);
    /* Absolute: the module's tests run with their cwd in the test's temp
     * dir, as every process a test starts does. */
    char src[1024], python_dir[1100], tests_dir[1100];
    ck_assert_ptr_nonnull(getcwd(src, sizeof src));
    snprintf(python_dir, sizeof python_dir, "%s/python", src);
    snprintf(tests_dir, sizeof tests_dir, "%s/python/tests", src);
    setenv("PYTHONPATH", python_dir, 1);
    char *argv[] = {(char *)py, "-m", "unittest", "discover", "-v", "-s", tests_dir, NULL};
    pid_t pid = dt_test_spawn(argv, log);
    ck_assert_int_gt(pid, 0);
    int status = dt_test_wait(pid, JOB_TIMEOUT_MS * 2);
    char *tail = dt_test_tail(log, 4000);
    ck_assert_msg(status == 0, "python unittest exited %d:\n%s", status, tail);
    /* A skip is a test that did not run: the torch helper's need Debian's
     * python3-torch, which scripts/install_deps.sh installs. */
    ck_assert_msg(strstr(tail, "skipped") == NULL,
                  "python unittest skipped tests (python3-torch missing?):\n%s", tail);
    free(tail);
}
END_TEST

/* The sanitizer a program linking this build's library needs too. */
#if defined(__SANITIZE_ADDRESS__)
#define PROGRAM_SANITIZE "-fsanitize=address,undefined"
#elif defined(__SANITIZE_THREAD__)
#define PROGRAM_SANITIZE "-fsanitize=thread"
#else
#define PROGRAM_SANITIZE ""
#endif

/* make install's tree is enough to build a program: the header, the
 * library and dtrain.pc, nothing of the source tree but the example. */
START_TEST(installed_program_builds) {
    char build[1100], script[6000], log[1200], src[1024];
    example_path(build, sizeof build);
    *strrchr(build, '/') = '\0';
    ck_assert_ptr_nonnull(getcwd(src, sizeof src)); /* the checkout; the shell runs elsewhere */
    snprintf(script, sizeof script,
             "set -e; cd '%s'; sh scripts/install.sh --build '%s' --prefix '%s/prefix' >/dev/null; "
             "cp examples/linear.c '%s/prog.c'; cd '%s'; "
             "PKG_CONFIG_PATH='%s/prefix/lib/pkgconfig'; export PKG_CONFIG_PATH; "
             "cc -std=c11 -D_POSIX_C_SOURCE=200809L " PROGRAM_SANITIZE
             " prog.c $(pkg-config --cflags --libs dtrain) "
             "-lm -o prog; ./prog --cluster /nonexistent/c.json",
             src, build, j.dir, j.dir, j.dir, j.dir);
    dt_test_job_log_path(&j, "install", log, sizeof log);
    char *argv[] = {"/bin/sh", "-c", script, NULL};
    pid_t pid = dt_test_spawn(argv, log);
    ck_assert_int_gt(pid, 0);
    int status = dt_test_wait(pid, JOB_TIMEOUT_MS);
    char *tail = dt_test_tail(log, 4000);
    /* Built and run: the program's own usage error (2), the library's message. */
    ck_assert_msg(status == 2 && strstr(tail, "linear: /nonexistent/c.json") != NULL,
                  "exit %d:\n%s", status, tail);
    free(tail);
}
END_TEST

Suite *api_suite(void) {
    Suite *s = suite_create("api");
    TCase *unit = tcase_create("unit");
    tcase_add_test(unit, version_and_codes);
    tcase_add_test(unit, cluster_errors);
    tcase_add_test(unit, config_errors);
    tcase_add_test(unit, model_errors);
    tcase_add_test(unit, initializers);
    tcase_add_test(unit, table_errors);
    tcase_add_test(unit, session_errors);
    suite_add_tcase(s, unit);
    TCase *jobs = dt_test_job_tcase(s, "jobs", TEST_TIMEOUT_S, job_setup, job_teardown);
    tcase_add_test(jobs, parse_args_takes_role_flags);
    tcase_add_test(jobs, library_job);
    tcase_add_test(jobs, library_chief_signal_and_restart);
    tcase_add_test(jobs, library_ps_restarted);
    tcase_add_test(jobs, library_secure_jobs);
    tcase_add_test(jobs, same_loop_bit_for_bit);
    tcase_add_loop_test(jobs, library_table_job, 1, 3); /* 1 table, then 2 */
    tcase_add_loop_test(jobs, library_table_ps_restarted, 1, 3);
    tcase_add_test(jobs, library_table_pipelined);
    tcase_add_test(jobs, python_module);
    tcase_add_test(jobs, installed_program_builds);
    return s;
}
