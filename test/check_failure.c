/*
 * Suite "failure": a permanent failure is an event of the job, not a wait.
 *  - the chief fails for good (eval_data names a missing file: a config
 *    error, exit 2; the log dir holds a checkpoint of another model: exit
 *    1) with 1 ps and 2 workers: every process exits long before
 *    ready_wait_secs (120 s), the ps and worker 1 with 1, and the ps's and
 *    worker 1's logs carry the chief's reason;
 *  - worker 1 fails for good (its train_data is missing: exit 2): the
 *    chief logs that worker 1 is gone, and the chief and the ps exit 0;
 *  - `dtrain status` (text and --json) against a ps whose job failed says
 *    failed, with the reason, and which worker failed;
 *  - with tokens on, a failure Shutdown from worker:1 is refused and leaves
 *    the ps as it was; the chief's ends the job;
 *  - in process (dt_ps_call, no network): who may say what failed, text
 *    with control bytes refused, and what a failed ps answers;
 *  - a learning rate that makes the model overflow: the ps refuses the
 *    update, the chief says what to change, no checkpoint is non-finite.
 *
 * Real processes ($DTRAIN_BIN) on free loopback ports; every wait is on an
 * exit or a log line, with a deadline. The bounds are generous for 2 cores
 * under ASan and still far below ready_wait_secs, so a role that waited for
 * it (the old behaviour) fails the test.
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "codec.h"
#include "proc.h"
#include "ps.h"
#include "ps_client.h"
#include "safetensors.h"
#include "suites.h"
#include "testjob.h"

#define TEST_TIMEOUT_S 240
#define READY_WAIT "ready_wait_secs=120"
#define FAIL_BOUND_MS 60000 /* every role gone: half of ready_wait_secs */
#define JOB_TIMEOUT_MS 90000
#define CALL_TIMEOUT_MS 5000

static dt_test_job w;
static char train_set[1200], eval_set[1200];

static void setup(void) {
    dt_test_job_setup(&w);
}

static void teardown(void) {
    dt_test_job_teardown(&w);
}

/* y = 2x on n rows, as csv with the label first, at <dir>/<name>. */
static void write_line(const char *name, int n, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", w.dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    fprintf(f, "y,x\n");
    for (int i = 0; i < n; i++) {
        double x = -1 + 2.0 * i / n;
        fprintf(f, "%.6f,%.6f\n", 2 * x + 0.1 * sin(7.0 * i), x);
    }
    ck_assert_int_eq(fclose(f), 0);
}

/* A cluster of 1 ps and num_workers workers training a csv line, with
 * ready_wait_secs at 120 s. */
static void world_init(int num_workers, const char *max_steps) {
    char train[1100];
    write_line("train.csv", 200, train, sizeof train);
    snprintf(train_set, sizeof train_set, "train_data=%s", train);
    dt_test_job_cluster(&w, 1, num_workers);
    const char *sets[] = {"data=csv", train_set,       max_steps,
                          READY_WAIT, "log_steps=500", "save_model_secs=60"};
    dt_test_job_set(&w, sets, (int)(sizeof sets / sizeof sets[0]));
}

static void expect_log(const char *log_name, const char *n1, const char *n2) {
    char *text = dt_test_job_read_log(&w, log_name);
    int found = dt_test_line_has(text, n1, n2, NULL, NULL);
    free(text);
    ck_assert_msg(found, "no line with \"%s\" and \"%s\" in %s's log; logs:%s", n1, n2 ? n2 : "",
                  log_name, dt_test_job_report(&w));
}

/* The ps and worker 1 (waiting for the model) are up, then the chief,
 * which fails for good: it exits chief_exit, the other two 1, all within
 * FAIL_BOUND_MS, and the ps and worker 1 say "job failed" with `reason` (a
 * piece of the chief's). */
static void expect_chief_failure_ends_job(const char *reason, int chief_exit) {
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps");
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1");
    /* The chief tells the ps tasks once, failing fast on one that is down:
     * it starts once the ps serves (worker 1 says it waits for the model
     * even while the ps is not up yet). */
    ck_assert_msg(dt_test_job_wait_log(&w, "ps", "serving on", JOB_TIMEOUT_MS, ps),
                  "the ps never served; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(
        dt_test_job_wait_log(&w, "worker1", "waiting for the model", JOB_TIMEOUT_MS, worker),
        "worker 1 never waited for the model; logs:%s", dt_test_job_report(&w));
    /* The chief's word to the ps is best effort and fails fast on a ps not
     * yet listening (dt_worker_report_failure), and worker 1 waits for the
     * model whether or not the ps is up: the ps must be serving first. */
    ck_assert_msg(dt_test_job_wait_log(&w, "ps", "serving on", JOB_TIMEOUT_MS, ps),
                  "ps 0 never served; logs:%s", dt_test_job_report(&w));
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    dt_test_job_expect_exit(&w, chief, "chief", FAIL_BOUND_MS, chief_exit);
    const pid_t pids[] = {ps, worker};
    const char *const names[] = {"ps 0", "worker 1"};
    dt_test_job_expect_all(&w, pids, names, 2, 1, FAIL_BOUND_MS);
    expect_log("chief", reason, NULL);
    expect_log("ps", "job failed: ", reason);
    expect_log("worker1", "job failed: ", reason);
}

/* ---- the chief fails ------------------------------------------------------------ */

START_TEST(chief_bad_eval_data) {
    world_init(2, "max_steps=100000");
    char missing[1200];
    snprintf(eval_set, sizeof eval_set, "eval_data=%s/missing.csv", w.dir);
    snprintf(missing, sizeof missing, "%s/missing.csv", w.dir);
    dt_test_job_add_set(&w, eval_set);
    /* A missing file is a config error, named by the field that gives it. */
    expect_chief_failure_ends_job(missing, 2);
    expect_log("chief", "chief: data: \"eval_data\": no such file: ", missing);
}
END_TEST

START_TEST(chief_foreign_checkpoint) {
    world_init(2, "max_steps=100000");
    /* A checkpoint of some other model, as the log dir's latest. */
    dt_tensor spec;
    memset(&spec, 0, sizeof spec);
    snprintf(spec.name, sizeof spec.name, "other/weight");
    spec.dtype = DT_DTYPE_F32;
    spec.ndim = 1;
    spec.shape[0] = 3;
    dt_tensors ts;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_tensors_init(&ts, &spec, 1, &err) == 0, "%s", err.msg);
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.global_step = 7;
    snprintf(meta.model, sizeof meta.model, "some other model");
    char path[1300];
    int rc = dt_ckpt_save_in_dir(w.log_dir, &ts, &meta, 5, path, sizeof path, &err);
    dt_tensors_deinit(&ts);
    ck_assert_msg(rc == 0, "saving the foreign checkpoint: %s", err.msg);
    expect_chief_failure_ends_job("was it written for another model?", 1);
}
END_TEST

/* ---- a worker fails ----------------------------------------------------------------- */

START_TEST(worker_failure_job_goes_on) {
    world_init(2, "max_steps=2000");
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps");
    ck_assert_msg(dt_test_job_wait_log(&w, "ps", "serving on", JOB_TIMEOUT_MS, ps),
                  "the ps never served; logs:%s", dt_test_job_report(&w));
    /* Worker 1 alone gets a training file that is not there. */
    char bad[1300], missing[1200];
    snprintf(missing, sizeof missing, "%s/missing.csv", w.dir);
    snprintf(bad, sizeof bad, "train_data=%s", missing);
    dt_test_job_add_set(&w, bad);
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1");
    dt_test_job_expect_exit(&w, worker, "worker 1", FAIL_BOUND_MS, 2);
    expect_log("ps", "worker 1 failed and left", missing);
    expect_log("worker1", "\"train_data\": no such file: ", missing);
    /* The chief, with the good file (the bad one was the last --set),
     * trains alone and ends the job. */
    w.num_sets--;
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    const pid_t pids[] = {ps, chief};
    const char *const names[] = {"ps 0", "chief"};
    dt_test_job_expect_done(&w, pids, names, 2, JOB_TIMEOUT_MS);
    expect_log("chief", "worker 1 is gone: ", missing);
    expect_log("chief", "job done at global_step 2000", NULL);
}
END_TEST

/* ---- dtrain status ---------------------------------------------------------------------- */

START_TEST(status_shows_failed) {
    world_init(2, "max_steps=100000");
    snprintf(eval_set, sizeof eval_set, "eval_data=%s/missing.csv", w.dir);
    pid_t ps = dt_test_job_start_serving(&w, "ps", 0, "ps");
    ck_assert_msg(dt_test_job_wait_log(&w, "ps", "serving on", JOB_TIMEOUT_MS, ps),
                  "the ps never served; logs:%s", dt_test_job_report(&w));
    char bad[1200];
    snprintf(bad, sizeof bad, "train_data=%s/nothing.csv", w.dir);
    dt_test_job_add_set(&w, bad);
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1");
    dt_test_job_expect_exit(&w, worker, "worker 1", FAIL_BOUND_MS, 2);
    w.num_sets--;
    dt_test_job_add_set(&w, eval_set);
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    dt_test_job_expect_exit(&w, chief, "chief", FAIL_BOUND_MS, 2);
    /* --keep-serving: the ps stays to be asked. */
    ck_assert_msg(dt_test_job_wait_log(&w, "ps", "job failed; --keep-serving", FAIL_BOUND_MS, ps),
                  "the ps did not take the failure; logs:%s", dt_test_job_report(&w));

    const char *text[] = {"status", "--cluster", w.cluster, NULL};
    ck_assert_int_eq(dt_test_job_command(&w, text, 30000), 0);
    ck_assert_msg(strstr(w.out, "job: failed"), "no \"job: failed\" in: %s", w.out);
    ck_assert_msg(dt_test_line_has(w.out, "failure: ", "missing.csv", NULL, NULL),
                  "no failure line with the reason in: %s", w.out);
    ck_assert_msg(dt_test_line_has(w.out, "worker 1: failed: ", "nothing.csv", NULL, NULL),
                  "worker 1's failure not shown in: %s", w.out);
    const char *json[] = {"status", "--cluster", w.cluster, "--json", NULL};
    ck_assert_int_eq(dt_test_job_command(&w, json, 30000), 0);
    ck_assert_msg(strstr(w.out, "\"state\":\"failed\""), "not failed in: %s", w.out);
    ck_assert_msg(dt_test_line_has(w.out,
                                   "\"failure\":\"chief: data: \\\"eval_data\\\": no such file: ",
                                   "missing.csv", NULL, NULL),
                  "no failure with the reason in: %s", w.out);
    ck_assert_msg(dt_test_line_has(w.out, "\"task\":1", "nothing.csv", NULL, NULL),
                  "worker 1's failure not in: %s", w.out);
}
END_TEST

/* ---- authority ------------------------------------------------------------------------------ */

/* A client of the cluster as `worker` (its identity: the token's), with no
 * variables: enough for failure reports. */
static dt_ps_client *client_as(dt_cluster *cl, int worker, const dt_rpc_security *sec) {
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_cluster_load(w.cluster, cl, &err) == 0, "%s", err.msg);
    dt_tensors none;
    memset(&none, 0, sizeof none);
    dt_ps_client_params p;
    memset(&p, 0, sizeof p);
    p.cluster = cl;
    p.worker = worker;
    p.timeout_ms = CALL_TIMEOUT_MS;
    p.security = sec;
    dt_ps_client *c = NULL;
    ck_assert_msg(dt_ps_client_new(&p, &none, &c, &err) == 0, "%s", err.msg);
    return c;
}

/* ps 0's Status as a tool; asserts that it answers. */
static void status_of(const dt_rpc_security *tool, dt_msg_status_resp *st) {
    dt_cluster cl;
    dt_ps_client *c = client_as(&cl, -1, tool);
    dt_err err;
    dt_err_clear(&err);
    long long deadline = dt_test_now_ms() + JOB_TIMEOUT_MS;
    int rc;
    while ((rc = dt_ps_client_status(c, 0, st, &err)) != 0 && dt_test_now_ms() < deadline) {
        dt_err_clear(&err);
        dt_test_sleep_ms(100);
    }
    dt_ps_client_free(c);
    dt_cluster_deinit(&cl);
    ck_assert_msg(rc == 0, "Status as a tool: %s; logs:%s", err.msg, dt_test_job_report(&w));
}

START_TEST(failure_needs_authority) {
    dt_test_job_cluster(&w, 1, 2);
    char tokens[1200];
    snprintf(tokens, sizeof tokens, "%s/tokens", w.dir);
    ck_assert_int_eq(dt_test_write_file(tokens, "chief c-1\nworker:1 w-1\ntool t-1\n"), 0);
    setenv("DTRAIN_TOKEN_FILE", tokens, 1);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps");
    unsetenv("DTRAIN_TOKEN_FILE");
    dt_rpc_security tool = {NULL, NULL, NULL, tokens, "tool"};
    dt_msg_status_resp st;
    status_of(&tool, &st);

    /* worker:1 (its own token) says the job failed: refused. */
    dt_rpc_security w1 = {NULL, NULL, NULL, tokens, "worker:1"};
    dt_cluster cl;
    dt_ps_client *c = client_as(&cl, 1, &w1);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_ps_client_fail_job(c, "forged by worker 1", &err), DT_EPERM);
    ck_assert_msg(strstr(err.msg, "PERMISSION_DENIED") && strstr(err.msg, "worker:1 may not call"),
                  "%s", err.msg);
    dt_ps_client_free(c);
    dt_cluster_deinit(&cl);
    /* ... nor may it say that worker 0 failed, as worker 0. */
    c = client_as(&cl, 0, &w1);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_ps_client_leave(c, "forged for the chief", &err), DT_EPERM);
    dt_ps_client_free(c);
    dt_cluster_deinit(&cl);
    /* Nothing changed. */
    ck_assert_msg(dt_test_alive(ps), "the ps died; logs:%s", dt_test_job_report(&w));
    status_of(&tool, &st);
    ck_assert_str_eq(st.failure, "");
    ck_assert_int_eq(st.num_workers, 0);
    ck_assert_msg(!dt_test_job_log_has(&w, "ps", "forged"), "a forged failure was taken; logs:%s",
                  dt_test_job_report(&w));

    /* The chief's is taken: the ps exits 1 with the reason, after its
     * linger (no worker comes to hear it). */
    dt_rpc_security chief = {NULL, NULL, NULL, tokens, "chief"};
    c = client_as(&cl, 0, &chief);
    dt_err_clear(&err);
    ck_assert_msg(dt_ps_client_fail_job(c, "chief: a real failure\n(two lines)", &err) == 0,
                  "the chief's failure Shutdown: %s", err.msg);
    dt_ps_client_free(c);
    dt_cluster_deinit(&cl);
    status_of(&tool, &st);
    /* Sent as one line: the newline escaped. */
    ck_assert_str_eq(st.failure, "chief: a real failure\\n(two lines)");
    dt_test_job_expect_exit(&w, ps, "ps 0", FAIL_BOUND_MS, 1);
    expect_log("ps", "job failed: chief: a real failure", "exiting");
}
END_TEST

/* ---- the ps's rules, in process ---------------------------------------------------------------
 */

static dt_rpc_peer peer_of(int role, int task, const char *name) {
    dt_rpc_peer p;
    memset(&p, 0, sizeof p);
    p.role = role;
    p.task = task;
    p.authenticated = 1;
    snprintf(p.name, sizeof p.name, "%s", name);
    return p;
}

/* One request through the ps's handler as peer; the reply, when there is
 * one, decoded into out (NULL: dropped). Returns the handler's code. */
static int call(dt_ps *ps, dt_msg_type type, const void *msg, const dt_rpc_peer *peer,
                dt_msg_type out_type, void *out, dt_err *err) {
    dt_err local;
    dt_err_clear(&local);
    int64_t size = dt_codec_size(type, msg, &local);
    ck_assert_msg(size >= 0, "%s", local.msg);
    dt_rpc_buf req = {0}, reply = {0};
    ck_assert_int_eq(dt_rpc_buf_alloc(&req, (size_t)size, &local), 0);
    ck_assert_msg(dt_codec_encode(type, msg, req.data, req.len, &local) == 0, "%s", local.msg);
    int rc = dt_ps_call(ps, dt_codec_method(type), peer, &req, &reply, err);
    if (rc == 0 && out) /* out zeroed by the caller, as the codec asks */
        ck_assert_int_eq(dt_codec_decode(out_type, reply.data, reply.len, out, &local), 0);
    dt_rpc_buf_release(&req);
    dt_rpc_buf_release(&reply);
    return rc;
}

/* Shutdown with `failure` as peer. */
static int fail_as(dt_ps *ps, const dt_rpc_peer *peer, const char *failure, dt_err *err) {
    dt_msg_shutdown_req req;
    memset(&req, 0, sizeof req);
    snprintf(req.reason, sizeof req.reason, "test");
    snprintf(req.failure, sizeof req.failure, "%s", failure);
    dt_err_clear(err);
    return call(ps, DT_MSG_SHUTDOWN_REQ, &req, peer, DT_MSG_SHUTDOWN_RESP, NULL, err);
}

/* Status claiming to be `worker`, saying it failed with `failure`. */
static int leave_as(dt_ps *ps, const dt_rpc_peer *peer, int worker, const char *failure,
                    dt_err *err) {
    dt_msg_status_req req;
    memset(&req, 0, sizeof req);
    req.worker = worker;
    snprintf(req.failure, sizeof req.failure, "%s", failure);
    dt_err_clear(err);
    return call(ps, DT_MSG_STATUS_REQ, &req, peer, DT_MSG_STATUS_RESP, NULL, err);
}

static void status_in(dt_ps *ps, const dt_rpc_peer *tool, dt_msg_status_resp *st) {
    dt_msg_status_req req = {.worker = -1};
    dt_err err;
    dt_err_clear(&err);
    memset(st, 0, sizeof *st);
    ck_assert_msg(call(ps, DT_MSG_STATUS_REQ, &req, tool, DT_MSG_STATUS_RESP, st, &err) == 0, "%s",
                  err.msg);
}

/* A ps of its own cluster (1 ps, 3 workers at cl's addresses), with no
 * server: the tests call its handlers. */
typedef struct {
    dt_addr ps_addr[1], workers[3];
    dt_cluster cl;
} three_workers;

static dt_ps *ps_of_three(three_workers *t, int linger_ms) {
    for (int i = 0; i < 4; i++)
        dt_test_loopback_addr(i ? &t->workers[i - 1] : &t->ps_addr[0], 20000 + i);
    memset(&t->cl, 0, sizeof t->cl);
    t->cl.num_ps = 1;
    t->cl.ps = t->ps_addr;
    t->cl.num_workers = 3;
    t->cl.workers = t->workers;
    dt_ps_params p = {.cluster = &t->cl, .task_index = 0, .no_server = 1, .linger_ms = linger_ms};
    dt_ps *ps = NULL;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_ps_start(&p, &ps, &err) == 0, "%s", err.msg);
    return ps;
}

START_TEST(ps_failure_rules) {
    /* A linger far above the test's bound: the wait below must end because
     * every worker heard the failure, not because the linger ran out. */
    three_workers t;
    dt_ps *ps = ps_of_three(&t, 600000);
    dt_err err;
    dt_err_clear(&err);
    dt_rpc_peer chief = peer_of(DT_PEER_CHIEF, 0, "chief");
    dt_rpc_peer w1 = peer_of(DT_PEER_WORKER, 1, "worker:1");
    dt_rpc_peer w2 = peer_of(DT_PEER_WORKER, 2, "worker:2");
    dt_rpc_peer tool = peer_of(DT_PEER_TOOL, -1, "tool");
    dt_msg_status_resp st;

    /* Only the chief ends the job. */
    ck_assert_int_eq(fail_as(ps, &w1, "forged", &err), DT_EPERM);
    ck_assert_int_eq(fail_as(ps, &tool, "forged", &err), DT_EPERM);
    /* A worker speaks only for itself, tools for no one, the chief not this way. */
    ck_assert_int_eq(leave_as(ps, &w1, 2, "forged", &err), DT_EPERM);
    ck_assert_int_eq(leave_as(ps, &tool, 1, "forged", &err), DT_EPERM);
    ck_assert_int_eq(leave_as(ps, &chief, 0, "forged", &err), DT_EINVAL);
    /* Text that would forge a log line, or is not UTF-8, is refused. */
    ck_assert_int_eq(fail_as(ps, &chief, "bad\nps:0: job done", &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "failure") && strstr(err.msg, "control byte 0x0a"), "%s",
                  err.msg);
    ck_assert_int_eq(leave_as(ps, &w1, 1, "bad\xff", &err), DT_EINVAL);
    status_in(ps, &tool, &st);
    ck_assert_str_eq(st.failure, "");
    ck_assert_int_eq(st.num_workers, 0);

    /* Worker 1's own failure: listed, the job goes on. */
    ck_assert_msg(leave_as(ps, &w1, 1, "worker:1: data: x.csv: open: gone", &err) == 0, "%s",
                  err.msg);
    status_in(ps, &tool, &st);
    ck_assert_str_eq(st.failure, "");
    ck_assert_int_eq(st.num_workers, 1);
    ck_assert_int_eq(st.workers[0].worker, 1);
    ck_assert_int_eq(st.workers[0].last_push_ms, -1);
    ck_assert_str_eq(st.workers[0].failure, "worker:1: data: x.csv: open: gone");

    /* The chief's failure: every later call of the job says so. */
    ck_assert_msg(fail_as(ps, &chief, "chief: eval_data: e.csv: open: gone", &err) == 0, "%s",
                  err.msg);
    status_in(ps, &tool, &st);
    ck_assert_str_eq(st.failure, "chief: eval_data: e.csv: open: gone");
    ck_assert(!st.done);
    dt_msg_pull_req pull;
    memset(&pull, 0, sizeof pull);
    pull.worker = 2;
    dt_err_clear(&err);
    ck_assert_int_eq(call(ps, DT_MSG_PULL_REQ, &pull, &w2, DT_MSG_PULL_RESP, NULL, &err),
                     DT_EABORTED);
    ck_assert_msg(strstr(err.msg, "job failed: chief: eval_data: e.csv: open: gone"), "%s",
                  err.msg);
    dt_msg_create_req create;
    memset(&create, 0, sizeof create);
    create.optim.kind = DT_OPTIM_SGD;
    dt_err_clear(&err);
    ck_assert_int_eq(call(ps, DT_MSG_CREATE_REQ, &create, &chief, DT_MSG_CREATE_RESP, NULL, &err),
                     DT_EABORTED);
    /* A second Shutdown changes nothing. */
    ck_assert_int_eq(fail_as(ps, &chief, "another reason", &err), 0);
    status_in(ps, &tool, &st);
    ck_assert_str_eq(st.failure, "chief: eval_data: e.csv: open: gone");

    /* The chief asked, worker 1 left, worker 2 heard: the ps is done with
     * the job, and returns its failure. */
    atomic_int stop = 0;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_ps_wait(ps, &stop, &err), DT_EABORTED);
    ck_assert_msg(strstr(err.msg, "job failed: chief: eval_data: e.csv"), "%s", err.msg);
    dt_ps_free(ps);
}
END_TEST

/* Worker `task`'s entry in st, or NULL when st lists none. */
static const dt_worker_activity *listed(const dt_msg_status_resp *st, int task) {
    for (int i = 0; i < st->num_workers; i++)
        if (st->workers[i].worker == task) return &st->workers[i];
    return NULL;
}

/* What a waiting worker reads of the others (Status's workers): a call of
 * a worker's for itself says it is alive, and a Status of its that its
 * passes are done, which later ones without the flag (its heartbeat) keep.
 * A tool, or one worker's identity claiming another, speaks for no one;
 * such a Status is answered all the same. */
START_TEST(ps_liveness_rules) {
    three_workers t;
    dt_ps *ps = ps_of_three(&t, 0);
    dt_err err;
    dt_err_clear(&err);
    dt_rpc_peer w1 = peer_of(DT_PEER_WORKER, 1, "worker:1");
    dt_rpc_peer w2 = peer_of(DT_PEER_WORKER, 2, "worker:2");
    dt_rpc_peer tool = peer_of(DT_PEER_TOOL, -1, "tool");
    dt_msg_status_resp st;

    dt_msg_status_req req = {.worker = 2, .passes_done = true};
    ck_assert_msg(call(ps, DT_MSG_STATUS_REQ, &req, &tool, DT_MSG_STATUS_RESP, NULL, &err) == 0,
                  "%s", err.msg);
    ck_assert_msg(call(ps, DT_MSG_STATUS_REQ, &req, &w1, DT_MSG_STATUS_RESP, NULL, &err) == 0, "%s",
                  err.msg);
    status_in(ps, &tool, &st);
    ck_assert_int_eq(st.num_workers, 0);

    /* Worker 2 for itself: alive, its passes done, no push yet. */
    ck_assert_msg(call(ps, DT_MSG_STATUS_REQ, &req, &w2, DT_MSG_STATUS_RESP, NULL, &err) == 0, "%s",
                  err.msg);
    status_in(ps, &tool, &st);
    ck_assert_int_eq(st.num_workers, 1);
    const dt_worker_activity *a = listed(&st, 2);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_ge(a->last_seen_ms, 0);
    ck_assert(a->passes_done);
    ck_assert_int_eq(a->pushes, 0);
    ck_assert_int_eq(a->last_push_ms, -1);
    /* Its heartbeat does not take the flag back; its reply is the job's
     * state alone (no workers listed). */
    req = (dt_msg_status_req){.worker = 2, .heartbeat = true};
    memset(&st, 0, sizeof st);
    ck_assert_msg(call(ps, DT_MSG_STATUS_REQ, &req, &w2, DT_MSG_STATUS_RESP, &st, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(st.num_workers, 0);
    ck_assert(st.incarnation != 0);
    status_in(ps, &tool, &st);
    ck_assert((a = listed(&st, 2)) && a->passes_done);

    /* Any call counts: a Pull of worker 1's, though the model is not
     * there yet, makes it heard of, its passes not done. */
    dt_msg_pull_req pull;
    memset(&pull, 0, sizeof pull);
    pull.worker = 1;
    dt_err_clear(&err);
    (void)call(ps, DT_MSG_PULL_REQ, &pull, &w1, DT_MSG_PULL_RESP, NULL, &err);
    status_in(ps, &tool, &st);
    ck_assert_int_eq(st.num_workers, 2);
    ck_assert((a = listed(&st, 1)) && a->last_seen_ms >= 0 && !a->passes_done);
    ck_assert_ptr_null(listed(&st, 0));
    dt_ps_free(ps);
}
END_TEST

/* ---- a model that diverges ------------------------------------------------------ */

/* Every model.ckpt-*.safetensors in the job's log dir holds only finite
 * floats; returns how many there are. */
static int assert_checkpoints_finite(void) {
    DIR *d = opendir(w.log_dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "model.ckpt-", 11) != 0 || len < 12 ||
            strcmp(e->d_name + len - 12, ".safetensors") != 0)
            continue;
        char path[2400];
        snprintf(path, sizeof path, "%s/%s", w.log_dir, e->d_name);
        dt_tensors ts;
        dt_safetensors_meta meta;
        dt_err err;
        dt_err_clear(&err);
        ck_assert_msg(dt_safetensors_load(path, &ts, &meta, &err) == 0, "%s: %s", path, err.msg);
        for (int t = 0; t < ts.count; t++) {
            if (ts.items[t].dtype != DT_DTYPE_F32) continue;
            const float *v = ts.items[t].data;
            for (size_t i = 0; i < ts.items[t].nbytes / 4; i++)
                ck_assert_msg(isfinite(v[i]), "%s: %s[%zu] = %g", path, ts.items[t].name, i,
                              (double)v[i]);
        }
        dt_tensors_deinit(&ts);
        n++;
    }
    closedir(d);
    return n;
}

/* A learning rate of 1e30 drives the line to overflow at its second or
 * third step: the ps refuses that update (naming the variable and the
 * index), the chief fails with a log line saying what to change, the job
 * ends failed, and no checkpoint ever holds an Inf or a NaN. */
START_TEST(diverging_job_refused) {
    world_init(1, "max_steps=100000");
    dt_test_job_add_set(&w, "learning_rate=1e30");
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps");
    ck_assert_msg(dt_test_job_wait_log(&w, "ps", "serving on", JOB_TIMEOUT_MS, ps),
                  "the ps never served; logs:%s", dt_test_job_report(&w));
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    dt_test_job_expect_exit(&w, chief, "chief", FAIL_BOUND_MS, 1);
    dt_test_job_expect_exit(&w, ps, "ps 0", FAIL_BOUND_MS, 1);
    expect_log("ps", "would not be finite", "linear/");
    expect_log("chief", "the model diverges: lower \"learning_rate\"", "clip");
    assert_checkpoints_finite();
}
END_TEST

static void add_case(Suite *s, const char *name, const TTest *test) {
    tcase_add_test(dt_test_job_tcase(s, name, TEST_TIMEOUT_S, setup, teardown), test);
}

Suite *failure_suite(void) {
    Suite *s = suite_create("failure");
    add_case(s, "ps_failure_rules", ps_failure_rules);
    add_case(s, "ps_liveness_rules", ps_liveness_rules);
    add_case(s, "chief_bad_eval_data", chief_bad_eval_data);
    add_case(s, "chief_foreign_checkpoint", chief_foreign_checkpoint);
    add_case(s, "worker_failure_job_goes_on", worker_failure_job_goes_on);
    add_case(s, "status_shows_failed", status_shows_failed);
    add_case(s, "failure_needs_authority", failure_needs_authority);
    add_case(s, "diverging_job_refused", diverging_job_refused);
    return s;
}
