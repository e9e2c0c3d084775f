/*
 * Suite "lifecycle": how dtrain's processes start, stop and come back, one
 * case per test, with real processes ($DTRAIN_BIN) on free loopback ports
 * and a temp log dir:
 *  - a clean job: every role exits 0, the log-dir lock is released;
 *  - a first SIGTERM/SIGINT: the chief saves and exits 143, a worker exits
 *    130, a ps exits 143; a second signal exits at once even while the role
 *    is stuck in an RPC to a frozen (SIGSTOPped) ps;
 *  - a peer that never comes up: exit 200 after ready_wait_secs;
 *  - a second chief on the same log dir is refused, naming the first's pid;
 *  - a ps killed and restarted: the chief restores it, the step does not go
 *    back, the job completes (also with two shards, killing ps 0);
 *  - a worker killed and restarted rejoins; a chief restarted after the
 *    other workers finished the job closes it (final checkpoint, ps stop).
 *
 * Signals go to the pid only (kill(pid)), not to the process group as
 * dt_test_kill does (group, then pid): that would be two signals, and the
 * second one means "exit at once" to dtrain.
 *
 * Every wait is bounded; the teardown SIGKILLs whatever is left (stopped
 * processes included). Nothing asserts speed except "promptly" after a
 * second signal, with a bound far above what it needs.
 */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "checkpoint.h"
#include "cluster.h"
#include "data.h"
#include "model.h"
#include "proc.h"
#include "ps_client.h"
#include "suites.h"

#define JOB_TIMEOUT_MS 90000  /* one short job, 2 cores, maybe under ASan */
#define EXIT_TIMEOUT_MS 20000 /* a role asked to stop */
#define PROMPT_MS 3000        /* "at once": after a second signal */
#define TEST_TIMEOUT_S 300
#define WEIGHT_TOL 0.05
#define MAX_SETS 12
#define MAX_PS 2
#define MAX_WORKERS 2
#define FOREVER "max_steps=100000000" /* a job that outlives the test */

/* As in the e2e suite: checkpoints every second, a data set whose two
 * shards agree closely, and a rate that keeps SGD's jitter small. */
#define QUICK_SETS                                                                                 \
    "save_model_secs=1", "log_steps=500", "summary_steps=100", "examples=1000", "learning_rate=0.01"

typedef struct {
    char dir[1024];     /* the test's temp dir: cluster file and role logs */
    char cluster[1100]; /* the cluster file */
    char log_dir[1100]; /* the job's log_dir */
    int num_ps, num_workers;
    int ports[MAX_PS + MAX_WORKERS]; /* ps first, then workers */
    const char *sets[MAX_SETS];      /* --set overrides of the demo job */
    int num_sets;
} world;

static char *tmp;
static world w;
static char report_buf[16384];

static void suite_setup(void) {
    if (dt_test_tmp_begin() != 0) fprintf(stderr, "lifecycle: cannot make the suite's temp dir\n");
}

static void setup(void) {
    tmp = dt_test_tempdir();
    ck_assert_msg(tmp != NULL, "cannot make a temp dir");
    ck_assert_msg(access(dt_test_bin(), X_OK) == 0,
                  "no executable dtrain at %s (set DTRAIN_BIN, or run `make test`)", dt_test_bin());
    memset(&w, 0, sizeof w);
    snprintf(w.dir, sizeof w.dir, "%s", tmp);
    snprintf(w.cluster, sizeof w.cluster, "%s/cluster.json", tmp);
    snprintf(w.log_dir, sizeof w.log_dir, "%s/logs", tmp);
}

static void teardown(void) {
    dt_test_kill_all();
    dt_test_tempdir_free(tmp);
    tmp = NULL;
}

/* A cluster of num_ps ps and num_workers workers running the demo job with
 * QUICK_SETS and the given extra overrides (NULL-terminated). */
static void world_init(int num_ps, int num_workers, const char *const *extra) {
    static const char *const quick[] = {QUICK_SETS};
    ck_assert(num_ps <= MAX_PS && num_workers <= MAX_WORKERS);
    w.num_ps = num_ps;
    w.num_workers = num_workers;
    ck_assert_int_eq(dt_test_write_cluster(w.cluster, num_ps, num_workers, w.ports), 0);
    w.num_sets = 0;
    for (size_t i = 0; i < sizeof quick / sizeof quick[0]; i++)
        w.sets[w.num_sets++] = quick[i];
    for (int i = 0; extra && extra[i]; i++) {
        ck_assert(w.num_sets < MAX_SETS);
        w.sets[w.num_sets++] = extra[i];
    }
}

/* The last lines of every role's log, for failure messages. */
static const char *report(void) {
    size_t used = 0;
    report_buf[0] = '\0';
    DIR *d = opendir(w.dir);
    if (!d) return "(no logs)";
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 4, ".log") != 0) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", w.dir, e->d_name);
        char *tail = dt_test_tail(path, 900);
        int k = snprintf(report_buf + used, sizeof report_buf - used, "\n== %s ==\n%s", e->d_name,
                         tail);
        free(tail);
        if (k < 0 || (size_t)k >= sizeof report_buf - used) break;
        used += (size_t)k;
    }
    closedir(d);
    return report_buf;
}

static void log_path(const char *log_name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s.log", w.dir, log_name);
}

/* Starts a role of the current job; its output goes to dir/<log_name>.log. */
static pid_t start_role(const char *job_name, int task, const char *log_name) {
    char task_text[16], path[1200];
    char *argv[16 + 2 * MAX_SETS];
    int n = 0;
    snprintf(task_text, sizeof task_text, "%d", task);
    log_path(log_name, path, sizeof path);
    argv[n++] = (char *)dt_test_bin();
    argv[n++] = "--cluster";
    argv[n++] = w.cluster;
    argv[n++] = "--job-name";
    argv[n++] = (char *)job_name;
    argv[n++] = "--task-index";
    argv[n++] = task_text;
    argv[n++] = "--log-dir";
    argv[n++] = w.log_dir;
    for (int i = 0; i < w.num_sets; i++) {
        argv[n++] = "--set";
        argv[n++] = (char *)w.sets[i];
    }
    argv[n] = NULL;
    pid_t pid = dt_test_spawn(argv, path);
    ck_assert_msg(pid > 0, "cannot start %s %d", job_name, task);
    return pid;
}

static char *read_log(const char *log_name) {
    char path[1200];
    log_path(log_name, path, sizeof path);
    char *text = dt_test_read_file(path, NULL);
    ck_assert_msg(text != NULL, "no log %s", path);
    return text;
}

static int log_has(const char *log_name, const char *needle) {
    char *text = read_log(log_name);
    int found = strstr(text, needle) != NULL;
    free(text);
    return found;
}

static int wait_log(const char *log_name, const char *needle, int timeout_ms, pid_t pid) {
    char path[1200];
    log_path(log_name, path, sizeof path);
    return dt_test_wait_log(path, needle, timeout_ms, pid);
}

/* One signal to the process itself (see the top of the file). */
static void send_signal(pid_t pid, int sig) {
    ck_assert_msg(dt_test_alive(pid), "pid %d is gone before signal %d; logs:%s", (int)pid, sig,
                  report());
    ck_assert_msg(kill(pid, sig) == 0, "kill(%d, %d) failed", (int)pid, sig);
}

/* Waits for pid and asserts its status. */
static void expect_exit(pid_t pid, const char *name, int timeout_ms, int want) {
    int status = dt_test_wait(pid, timeout_ms);
    if (status == DT_TEST_TIMEOUT)
        ck_abort_msg("%s still running after %d s (killed); logs:%s", name, timeout_ms / 1000,
                     report());
    ck_assert_msg(status == want, "%s exited with %d, want %d (negative: signal); logs:%s", name,
                  status, want, report());
}

/* Waits for every pid (same deadline) and asserts each exits 0. */
static void expect_all_done(const pid_t *pids, const char *const *names, int n, int timeout_ms) {
    long long deadline = dt_test_now_ms() + timeout_ms;
    for (int i = 0; i < n; i++) {
        long long left = deadline - dt_test_now_ms();
        expect_exit(pids[i], names[i], left > 0 ? (int)left : 0, 0);
    }
}

/* ---- checkpoints ----------------------------------------------------------- */

/* "model.ckpt-<step>.safetensors" -> step; -1 for any other name. */
static int64_t ckpt_step(const char *name) {
    const char *prefix = "model.ckpt-", *suffix = ".safetensors";
    size_t np = strlen(prefix), ns = strlen(suffix), n = strlen(name);
    if (n <= np + ns || strncmp(name, prefix, np) != 0 || strcmp(name + n - ns, suffix) != 0)
        return -1;
    int64_t step = 0;
    for (const char *p = name + np; p < name + n - ns; p++) {
        if (*p < '0' || *p > '9' || step > INT64_MAX / 10 - 10) return -1;
        step = step * 10 + (*p - '0');
    }
    return step;
}

/* Highest checkpoint step in the log dir, or -1. */
static int64_t max_ckpt_step(void) {
    int64_t best = -1;
    DIR *d = opendir(w.log_dir);
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t step = ckpt_step(e->d_name);
        if (step > best) best = step;
    }
    closedir(d);
    return best;
}

/* Waits until a checkpoint past `after` exists (returns its step) or pid
 * exits or the time is up (-1). */
static int64_t wait_ckpt_after(int64_t after, pid_t pid, int timeout_ms) {
    long long deadline = dt_test_now_ms() + timeout_ms;
    for (;;) {
        int64_t step = max_ckpt_step();
        if (step > after) return step;
        if (!dt_test_alive(pid) || dt_test_now_ms() >= deadline) return -1;
        dt_test_sleep_ms(50);
    }
}

static void load_job(dt_job *job) {
    dt_err err;
    dt_err_clear(&err);
    dt_job_defaults(job);
    for (int i = 0; i < w.num_sets; i++)
        ck_assert_msg(dt_job_set(job, w.sets[i], &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_job_finish(job, &err) == 0, "%s", err.msg);
}

static int64_t max_steps_of_job(void) {
    dt_job job;
    load_job(&job);
    return job.max_steps;
}

/* Closed-form least squares on the job's whole data set. */
static void closed_form(double *weight, double *bias) {
    dt_job job;
    dt_err err;
    dt_dataset *ds = NULL;
    dt_batch all;
    dt_err_clear(&err);
    load_job(&job);
    ck_assert_msg(dt_data_open(&job, 0, 1, &ds, &err) == 0, "%s", err.msg);
    int rc = dt_data_all(ds, &all, &err);
    if (rc == 0) rc = dt_model_lstsq_line(&all, weight, bias, &err);
    dt_data_free(ds);
    ck_assert_msg(rc == 0, "%s", err.msg);
}

static float scalar_of(const dt_tensors *ts, const char *name, const char *path) {
    const dt_tensor *t = dt_tensors_find(ts, name);
    ck_assert_msg(t != NULL, "%s has no %s", path, name);
    ck_assert_msg(t->dtype == DT_DTYPE_F32 && dt_tensor_numel(t) == 1,
                  "%s: %s is not one F32 value", path, name);
    float v;
    memcpy(&v, t->data, sizeof v);
    return v;
}

/* Loads the latest checkpoint (it must load), asserts its step reaches
 * min_step and, with check_fit, that the line is the closed form's. Returns
 * its step. */
static int64_t check_latest_ckpt(int64_t min_step, int check_fit) {
    dt_tensors ts;
    dt_ckpt_meta meta;
    dt_err err;
    char path[2048];
    memset(&ts, 0, sizeof ts);
    dt_err_clear(&err);
    int rc = dt_ckpt_restore_latest(w.log_dir, &ts, &meta, path, sizeof path, &err);
    ck_assert_msg(rc == 1, "no loadable checkpoint in %s (rc %d: %s); logs:%s", w.log_dir, rc,
                  err.msg, report());
    ck_assert_msg(meta.global_step >= min_step,
                  "latest checkpoint %s: global_step %" PRId64 " < %" PRId64 "; logs:%s", path,
                  meta.global_step, min_step, report());
    double got_w = scalar_of(&ts, "linear/weight", path),
           got_b = scalar_of(&ts, "linear/bias", path);
    dt_tensors_deinit(&ts);
    if (check_fit) {
        double want_w, want_b;
        closed_form(&want_w, &want_b);
        ck_assert_msg(got_w - want_w < WEIGHT_TOL && want_w - got_w < WEIGHT_TOL,
                      "weight %.5f, closed form %.5f (step %" PRId64 ")", got_w, want_w,
                      meta.global_step);
        ck_assert_msg(got_b - want_b < WEIGHT_TOL && want_b - got_b < WEIGHT_TOL,
                      "bias %.5f, closed form %.5f (step %" PRId64 ")", got_b, want_b,
                      meta.global_step);
    }
    return meta.global_step;
}

/* ---- reading what the roles logged ------------------------------------------- */

/* The number after the first "<key> " that follows `anchor` on one line of
 * the log, or -1. */
static int64_t logged_number(const char *log_name, const char *anchor, const char *key) {
    char *text = read_log(log_name);
    int64_t value = -1;
    for (char *line = text; line && *line && value < 0;) {
        char *end = strchr(line, '\n');
        if (end) *end = '\0';
        char *a = strstr(line, anchor);
        char *k = a ? strstr(a, key) : NULL;
        if (k) {
            char *num = k + strlen(key);
            if (*num == ' ') num++;
            char *stop = NULL;
            long long v = strtoll(num, &stop, 10);
            if (stop != num) value = v;
        }
        line = end ? end + 1 : NULL;
    }
    free(text);
    return value;
}

/* ---- a Status client of the test's own --------------------------------------- */

typedef struct {
    dt_cluster cluster;
    dt_ps_client *client;
} status_probe;

static void probe_open(status_probe *sp) {
    dt_err err;
    dt_err_clear(&err);
    memset(sp, 0, sizeof *sp);
    ck_assert_msg(dt_cluster_load(w.cluster, &sp->cluster, &err) == 0, "%s", err.msg);
    dt_tensors none;
    memset(&none, 0, sizeof none);
    dt_ps_client_params params;
    memset(&params, 0, sizeof params);
    params.cluster = &sp->cluster;
    params.worker = -1; /* a tool, not a worker */
    params.timeout_ms = 2000;
    ck_assert_msg(dt_ps_client_new(&params, &none, &sp->client, &err) == 0, "%s", err.msg);
}

static void probe_close(status_probe *sp) {
    dt_ps_client_free(sp->client);
    dt_cluster_deinit(&sp->cluster);
}

/* Global step of ps p (it must answer and be ready). */
static int64_t probe_step(status_probe *sp, int p) {
    dt_msg_status_resp st;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_ps_client_status(sp->client, p, &st, &err);
    ck_assert_msg(rc == 0, "status of ps %d: %s", p, err.msg);
    ck_assert_msg(st.ready, "ps %d is not ready", p);
    return st.global_step;
}

/* Polls ps p until it is ready with a global step above `above` (it may be
 * down or empty meanwhile). Returns that step. */
static int64_t probe_wait_step(status_probe *sp, int p, int64_t above, int timeout_ms) {
    long long deadline = dt_test_now_ms() + timeout_ms;
    for (;;) {
        dt_msg_status_resp st;
        dt_err err;
        dt_err_clear(&err);
        if (dt_ps_client_status(sp->client, p, &st, &err) == 0 && st.ready &&
            st.global_step > above)
            return st.global_step;
        ck_assert_msg(dt_test_now_ms() < deadline,
                      "ps %d not ready past global_step %" PRId64 " after %d s (%s); logs:%s", p,
                      above, timeout_ms / 1000, err.msg, report());
        dt_test_sleep_ms(50);
    }
}

/* ---- the tests ------------------------------------------------------------- */

/* A whole job: every role exits 0, the last checkpoint is the fit, the log
 * dir is unlocked and holds no temporary files. */
START_TEST(clean_exit) {
    static const char *const extra[] = {"max_steps=1500", NULL};
    world_init(1, 2, extra);
    pid_t pids[3] = {start_role("ps", 0, "ps"), start_role("worker", 0, "chief"),
                     start_role("worker", 1, "worker1")};
    const char *names[3] = {"ps", "chief", "worker 1"};
    expect_all_done(pids, names, 3, JOB_TIMEOUT_MS);
    check_latest_ckpt(max_steps_of_job(), 1);
    ck_assert_msg(log_has("ps", "job done at global_step"), "ps did not log the end; logs:%s",
                  report());
    ck_assert_msg(log_has("chief", "chief: job done"), "chief did not log the end; logs:%s",
                  report());

    /* The lock died with the chief: the next one may take it. */
    char lock[1200];
    snprintf(lock, sizeof lock, "%s/dtrain.lock", w.log_dir);
    int fd = open(lock, O_RDWR);
    ck_assert_msg(fd >= 0, "no %s", lock);
    int locked = flock(fd, LOCK_EX | LOCK_NB);
    close(fd);
    ck_assert_msg(locked == 0, "%s is still locked after the chief exited", lock);

    DIR *d = opendir(w.log_dir);
    ck_assert(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        ck_assert_msg(!strstr(e->d_name, ".tmp."), "temporary file %s left in the log dir",
                      e->d_name);
    closedir(d);
}
END_TEST

/* First SIGTERM to the chief: it finishes its step, saves and exits 143;
 * the checkpoint is newer than any before and loads; the others go on. */
START_TEST(sigterm_chief_saves) {
    static const char *const extra[] = {FOREVER, NULL};
    world_init(1, 2, extra);
    pid_t ps = start_role("ps", 0, "ps");
    pid_t chief = start_role("worker", 0, "chief");
    pid_t worker = start_role("worker", 1, "worker1");
    ck_assert_msg(wait_ckpt_after(0, chief, JOB_TIMEOUT_MS) > 0,
                  "no checkpoint past step 0 while the chief ran; logs:%s", report());
    dt_test_sleep_ms(300); /* training on past the last save */
    int64_t before = max_ckpt_step();

    send_signal(chief, SIGTERM);
    expect_exit(chief, "chief after SIGTERM", EXIT_TIMEOUT_MS, 128 + SIGTERM);
    int64_t saved = check_latest_ckpt(before + 1, 0);
    char step_text[32];
    snprintf(step_text, sizeof step_text, "(global_step %" PRId64 ")", saved);
    char *log = read_log("chief");
    int logged = dt_test_line_has(log, "chief: saved", step_text, NULL, NULL);
    free(log);
    ck_assert_msg(logged, "chief did not log saving step %" PRId64 "; logs:%s", saved, report());
    ck_assert_msg(dt_test_alive(ps) && dt_test_alive(worker),
                  "the chief's stop ended another role; logs:%s", report());
}
END_TEST

/* First SIGINT to a worker: it exits 130; the job still completes without
 * it (the ps stops after its linger). */
START_TEST(sigint_worker) {
    static const char *const extra[] = {"max_steps=20000", NULL};
    world_init(1, 2, extra);
    pid_t ps = start_role("ps", 0, "ps");
    pid_t chief = start_role("worker", 0, "chief");
    pid_t worker = start_role("worker", 1, "worker1");
    ck_assert_msg(wait_log("worker1", ": step ", JOB_TIMEOUT_MS, worker),
                  "worker 1 never trained; logs:%s", report());
    send_signal(worker, SIGINT);
    expect_exit(worker, "worker 1 after SIGINT", EXIT_TIMEOUT_MS, 128 + SIGINT);
    ck_assert_msg(log_has("worker1", "stopped by signal"),
                  "worker 1 does not say why it stopped; "
                  "logs:%s",
                  report());
    pid_t rest[2] = {chief, ps};
    const char *names[2] = {"chief", "ps"};
    expect_all_done(rest, names, 2, JOB_TIMEOUT_MS);
    check_latest_ckpt(max_steps_of_job(), 1);
}
END_TEST

/* First SIGTERM to the ps: it exits 143; the workers wait for it (they do
 * not crash or give up within their budget). */
START_TEST(sigterm_ps) {
    static const char *const extra[] = {FOREVER, NULL};
    world_init(1, 2, extra);
    pid_t ps = start_role("ps", 0, "ps0");
    pid_t chief = start_role("worker", 0, "chief");
    pid_t worker = start_role("worker", 1, "worker1");
    ck_assert_msg(wait_ckpt_after(0, chief, JOB_TIMEOUT_MS) > 0,
                  "no checkpoint past step 0 while the chief ran; logs:%s", report());
    status_probe sp;
    probe_open(&sp);
    /* Whether a worker has a call in flight when the ps stops is a race;
     * freezing the ps first piles calls up, and three rounds make missing
     * them all unlikely. */
    for (int round = 0; round < 3; round++) {
        char name[16];
        snprintf(name, sizeof name, "ps%d", round);
        send_signal(ps, SIGSTOP);
        dt_test_sleep_ms(300);
        send_signal(ps, SIGTERM);
        send_signal(ps, SIGCONT);
        expect_exit(ps, "ps after SIGTERM", EXIT_TIMEOUT_MS, 128 + SIGTERM);
        ck_assert_msg(log_has(name, "stopped by signal"), "ps does not say why it stopped; logs:%s",
                      report());
        /* A ps that stops is a peer gone away (retryable), not a signal to
         * the workers: they wait for it, not exit as if stopped themselves. */
        dt_test_sleep_ms(1000);
        ck_assert_msg(dt_test_alive(chief),
                      "the chief exited (%d) when the ps stopped (round %d); logs:%s",
                      dt_test_wait(chief, 0), round, report());
        ck_assert_msg(dt_test_alive(worker),
                      "worker 1 exited (%d) when the ps stopped (round %d); logs:%s",
                      dt_test_wait(worker, 0), round, report());
        ck_assert_msg(log_has("chief", "waiting for"),
                      "the chief does not say it waits for the ps; logs:%s", report());
        /* Back: the chief restores it and training goes on. */
        snprintf(name, sizeof name, "ps%d", round + 1);
        ps = start_role("ps", 0, name);
        int64_t restored = probe_wait_step(&sp, 0, 0, JOB_TIMEOUT_MS);
        probe_wait_step(&sp, 0, restored + 100, JOB_TIMEOUT_MS);
    }
    probe_close(&sp);
}
END_TEST

/* A second signal exits at once. The ps is frozen (SIGSTOP), so the chief
 * and the worker sit inside an RPC with a long deadline: the first signal
 * waits for that step, the second does not. */
START_TEST(second_signal_exits_at_once) {
    static const char *const extra[] = {FOREVER, "rpc_timeout_secs=120", NULL};
    world_init(1, 2, extra);
    pid_t ps = start_role("ps", 0, "ps");
    pid_t chief = start_role("worker", 0, "chief");
    pid_t worker = start_role("worker", 1, "worker1");
    ck_assert_msg(wait_ckpt_after(0, chief, JOB_TIMEOUT_MS) > 0,
                  "no checkpoint past step 0 while the chief ran; logs:%s", report());
    ck_assert_msg(wait_log("worker1", ": step ", JOB_TIMEOUT_MS, worker),
                  "worker 1 never trained; logs:%s", report());

    send_signal(ps, SIGSTOP);
    dt_test_sleep_ms(500);
    send_signal(chief, SIGTERM);
    send_signal(worker, SIGINT);
    dt_test_sleep_ms(1000);
    ck_assert_msg(dt_test_alive(chief) && dt_test_alive(worker),
                  "a first signal cut an RPC short (chief %d, worker %d): it should finish the "
                  "step",
                  dt_test_alive(chief), dt_test_alive(worker));

    long long t0 = dt_test_now_ms();
    send_signal(chief, SIGTERM);
    send_signal(worker, SIGINT);
    expect_exit(chief, "chief after a second SIGTERM", PROMPT_MS, 128 + SIGTERM);
    expect_exit(worker, "worker 1 after a second SIGINT", PROMPT_MS, 128 + SIGINT);
    long long took = dt_test_now_ms() - t0;
    ck_assert_msg(took < PROMPT_MS, "second signals took %lld ms to end the roles", took);

    /* The ps too: two SIGTERMs in a row. */
    send_signal(ps, SIGCONT);
    send_signal(ps, SIGTERM);
    send_signal(ps, SIGTERM);
    expect_exit(ps, "ps after two SIGTERMs", PROMPT_MS, 128 + SIGTERM);
}
END_TEST

/* No ps ever listens: the chief and the worker give up after
 * ready_wait_secs with 200 (retryable), naming the budget. */
START_TEST(ps_never_up) {
    static const char *const extra[] = {"ready_wait_secs=2", NULL};
    world_init(1, 2, extra);
    long long t0 = dt_test_now_ms();
    pid_t chief = start_role("worker", 0, "chief");
    pid_t worker = start_role("worker", 1, "worker1");
    expect_exit(worker, "worker 1 without a ps", EXIT_TIMEOUT_MS, 200);
    expect_exit(chief, "chief without a ps", EXIT_TIMEOUT_MS, 200);
    long long took = dt_test_now_ms() - t0;
    ck_assert_msg(took >= 1800, "gave up after %lld ms, before the 2 s budget", took);
    ck_assert_msg(log_has("worker1", "gave up after 2 s"),
                  "worker 1 does not name its budget; "
                  "logs:%s",
                  report());
    ck_assert_msg(log_has("chief", "gave up after 2 s"),
                  "the chief does not name its budget; "
                  "logs:%s",
                  report());
}
END_TEST

/* A second chief on the same log dir is refused with the first's pid; the
 * first trains on and finishes the job. */
START_TEST(second_chief_refused) {
    static const char *const extra[] = {"max_steps=20000", NULL};
    world_init(1, 2, extra);
    pid_t ps = start_role("ps", 0, "ps");
    pid_t chief = start_role("worker", 0, "chief");
    pid_t worker = start_role("worker", 1, "worker1");
    ck_assert_msg(wait_ckpt_after(0, chief, JOB_TIMEOUT_MS) > 0,
                  "no checkpoint past step 0 while the chief ran; logs:%s", report());

    pid_t second = start_role("worker", 0, "chief2");
    int status = dt_test_wait(second, EXIT_TIMEOUT_MS);
    ck_assert_msg(status > 0 && status != 200,
                  "second chief: status %d, want a permanent failure "
                  "(negative: signal, %d: still running); logs:%s",
                  status, DT_TEST_TIMEOUT, report());
    char pid_text[64];
    snprintf(pid_text, sizeof pid_text, "pid %d", (int)chief);
    char *log = read_log("chief2");
    int named = dt_test_line_has(log, "locked by another chief", pid_text, NULL, NULL);
    free(log);
    ck_assert_msg(named, "second chief's refusal does not name %s; logs:%s", pid_text, report());

    int64_t at_refusal = max_ckpt_step();
    ck_assert_msg(wait_ckpt_after(at_refusal, chief, JOB_TIMEOUT_MS) > at_refusal,
                  "the first chief saved nothing after the refusal; logs:%s", report());
    pid_t pids[3] = {chief, worker, ps};
    const char *names[3] = {"chief", "worker 1", "ps"};
    expect_all_done(pids, names, 3, JOB_TIMEOUT_MS);
    check_latest_ckpt(max_steps_of_job(), 1);
}
END_TEST

/* SIGKILL the ps mid-job and restart it: it comes back empty, the chief
 * restores it no earlier than its latest checkpoint, and the job completes
 * without restarting anyone else. */
START_TEST(ps_restart) {
    static const char *const extra[] = {"max_steps=30000", NULL};
    world_init(1, 2, extra);
    const int64_t max_steps = max_steps_of_job();
    pid_t ps = start_role("ps", 0, "ps");
    pid_t chief = start_role("worker", 0, "chief");
    pid_t worker = start_role("worker", 1, "worker1");
    ck_assert_msg(wait_ckpt_after(0, chief, JOB_TIMEOUT_MS) > 0,
                  "no checkpoint past step 0 while the chief ran; logs:%s", report());
    dt_test_sleep_ms(300);

    send_signal(ps, SIGKILL);
    expect_exit(ps, "killed ps", EXIT_TIMEOUT_MS, -SIGKILL);
    int64_t before = max_ckpt_step();
    ck_assert_msg(before < max_steps, "the job ended (step %" PRId64 ") before the kill", before);
    dt_test_sleep_ms(500);
    pid_t ps2 = start_role("ps", 0, "ps2");

    pid_t pids[3] = {ps2, chief, worker};
    const char *names[3] = {"restarted ps", "chief", "worker 1"};
    expect_all_done(pids, names, 3, JOB_TIMEOUT_MS);
    ck_assert_msg(log_has("chief", "lost its model; restoring it"),
                  "the chief did not log restoring the ps; logs:%s", report());
    int64_t restored = logged_number("ps2", "created", "global_step");
    ck_assert_msg(restored >= before,
                  "the ps was restored at global_step %" PRId64 ", behind checkpoint %" PRId64
                  "; logs:%s",
                  restored, before, report());
    check_latest_ckpt(max_steps, 1);
}
END_TEST

/* Two shards; ps 0 is killed while the chief is paused (a slow chief: it
 * has not seen the last steps and saved nothing lately). ps 1 holds the
 * true global step: ps 0 must come back at it, not behind, or the shards
 * disagree on the step and the job ends short of max_steps. */
START_TEST(ps_restart_two_shards) {
    static const char *const extra[] = {"max_steps=30000", NULL};
    world_init(2, 2, extra);
    const int64_t max_steps = max_steps_of_job();
    pid_t ps0 = start_role("ps", 0, "ps0");
    pid_t ps1 = start_role("ps", 1, "ps1");
    pid_t chief = start_role("worker", 0, "chief");
    pid_t worker = start_role("worker", 1, "worker1");
    ck_assert_msg(wait_ckpt_after(0, chief, JOB_TIMEOUT_MS) > 0,
                  "no checkpoint past step 0 while the chief ran; logs:%s", report());

    status_probe sp;
    probe_open(&sp);
    send_signal(chief, SIGSTOP);
    dt_test_sleep_ms(1000); /* worker 1 trains on alone */
    int64_t live = probe_step(&sp, 1);
    send_signal(ps0, SIGKILL);
    expect_exit(ps0, "killed ps 0", EXIT_TIMEOUT_MS, -SIGKILL);
    probe_close(&sp);
    ck_assert_msg(live < max_steps, "the job ended (step %" PRId64 ") before the kill", live);
    dt_test_sleep_ms(300);
    pid_t ps0b = start_role("ps", 0, "ps0b");
    send_signal(chief, SIGCONT);

    pid_t pids[4] = {ps0b, ps1, chief, worker};
    const char *names[4] = {"restarted ps 0", "ps 1", "chief", "worker 1"};
    expect_all_done(pids, names, 4, JOB_TIMEOUT_MS);
    int64_t restored = logged_number("ps0b", "created", "global_step");
    ck_assert_msg(restored >= live,
                  "ps 0 was restored at global_step %" PRId64 ", behind ps 1's %" PRId64
                  " (the live shard's step was ignored); logs:%s",
                  restored, live, report());
    check_latest_ckpt(max_steps, 1);
}
END_TEST

/* SIGKILL worker 1 mid-job and restart it: it rejoins and trains, and the
 * job completes. */
START_TEST(worker_restart) {
    static const char *const extra[] = {"max_steps=20000", NULL};
    world_init(1, 2, extra);
    pid_t ps = start_role("ps", 0, "ps");
    pid_t chief = start_role("worker", 0, "chief");
    pid_t worker = start_role("worker", 1, "worker1");
    ck_assert_msg(wait_log("worker1", ": step ", JOB_TIMEOUT_MS, worker),
                  "worker 1 never trained; logs:%s", report());
    send_signal(worker, SIGKILL);
    expect_exit(worker, "killed worker 1", EXIT_TIMEOUT_MS, -SIGKILL);
    dt_test_sleep_ms(300);
    pid_t worker2 = start_role("worker", 1, "worker1b");
    ck_assert_msg(wait_log("worker1b", ": step ", JOB_TIMEOUT_MS, worker2),
                  "restarted worker 1 did not train; logs:%s", report());
    pid_t pids[3] = {worker2, chief, ps};
    const char *names[3] = {"restarted worker 1", "chief", "ps"};
    expect_all_done(pids, names, 3, JOB_TIMEOUT_MS);
    check_latest_ckpt(max_steps_of_job(), 1);
}
END_TEST

/* The chief dies; worker 1 finishes the job alone. A restarted chief must
 * still close the job: save the final checkpoint and stop the ps (which
 * otherwise waits for a Shutdown forever). */
START_TEST(chief_restart_after_job_end) {
    static const char *const extra[] = {"max_steps=6000", NULL};
    world_init(1, 2, extra);
    const int64_t max_steps = max_steps_of_job();
    pid_t ps = start_role("ps", 0, "ps");
    pid_t chief = start_role("worker", 0, "chief");
    pid_t worker = start_role("worker", 1, "worker1");
    ck_assert_msg(wait_log("chief", ": step ", JOB_TIMEOUT_MS, chief),
                  "the chief never trained; logs:%s", report());
    send_signal(chief, SIGKILL);
    expect_exit(chief, "killed chief", EXIT_TIMEOUT_MS, -SIGKILL);
    expect_exit(worker, "worker 1 finishing alone", JOB_TIMEOUT_MS, 0);
    ck_assert_msg(dt_test_alive(ps), "ps exited before any chief told it to; logs:%s", report());

    pid_t chief2 = start_role("worker", 0, "chief2");
    expect_exit(chief2, "restarted chief", EXIT_TIMEOUT_MS, 0);
    check_latest_ckpt(max_steps, 1);
    expect_exit(ps, "ps after the restarted chief", EXIT_TIMEOUT_MS, 0);
}
END_TEST

/* One case per test, named like it, so one can be run alone
 * (CK_RUN_CASE=sigterm_ps). */
static void add_case(Suite *s, const char *name, const TTest *test) {
    TCase *tc = tcase_create(name);
    tcase_add_unchecked_fixture(tc, suite_setup, dt_test_tmp_end);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_test(tc, test);
    suite_add_tcase(s, tc);
}

Suite *lifecycle_suite(void) {
    Suite *s = suite_create("lifecycle");
    add_case(s, "clean_exit", clean_exit);
    add_case(s, "sigterm_chief_saves", sigterm_chief_saves);
    add_case(s, "sigint_worker", sigint_worker);
    add_case(s, "sigterm_ps", sigterm_ps);
    add_case(s, "second_signal_exits_at_once", second_signal_exits_at_once);
    add_case(s, "ps_never_up", ps_never_up);
    add_case(s, "second_chief_refused", second_chief_refused);
    add_case(s, "ps_restart", ps_restart);
    add_case(s, "ps_restart_two_shards", ps_restart_two_shards);
    add_case(s, "worker_restart", worker_restart);
    add_case(s, "chief_restart_after_job_end", chief_restart_after_job_end);
    return s;
}
