/*
 * Suites "lifecycle" and "restart": how dtrain's processes start, stop and
 * come back, one case per test, with real processes ($DTRAIN_BIN) on free
 * loopback ports and a temp log dir. Two suites so that the runner can run
 * them side by side (DT_JOBS): "restart" holds the roles killed and
 * restarted mid-job, whose jobs run long enough to be mid-job when killed;
 * "lifecycle" the rest:
 *  - a clean job: every role exits 0, the log-dir lock is released;
 *  - a first SIGTERM/SIGINT: the chief saves and exits 143, a worker exits
 *    130, a ps exits 143; a second signal exits at once even while the role
 *    is stuck in an RPC to a frozen (SIGSTOPped) ps;
 *  - a peer that never comes up: exit 200 after ready_wait_secs;
 *  - a second chief on the same log dir is refused, naming the first's pid;
 *  - a ps killed and restarted: the chief restores it, the step does not go
 *    back, the job completes (also with two shards, killing ps 0);
 *  - a worker killed and restarted rejoins; a chief restarted after the
 *    other workers finished the job closes it (final checkpoint, ps stop);
 *  - a chief SIGKILLed in a save after its state update, before its
 *    deletions (DT_TEST_CKPT_KILL), mid-job or in the final save: once the
 *    job is done (or rerun), the log dir holds exactly max_to_keep
 *    checkpoints, the newest, all listed;
 *  - a ps whose descriptors a stranger exhausted listens again;
 *  - a ps's message cap follows its job's model.
 *
 * Signals go to the pid only (kill(pid)), not to the process group as
 * dt_test_kill does (group, then pid): that would be two signals, and the
 * second one means "exit at once" to dtrain.
 *
 * Every wait is bounded; the teardown SIGKILLs whatever is left (stopped
 * processes included). Nothing asserts speed except "promptly" after a
 * second signal, with a bound far above what it needs.
 */
#define _GNU_SOURCE /* prlimit */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "checkpoint.h"
#include "proc.h"
#include "ps_client.h"
#include "suites.h"
#include "testjob.h"

#define JOB_TIMEOUT_MS 90000  /* one short job, 2 cores, maybe under ASan */
#define EXIT_TIMEOUT_MS 20000 /* a role asked to stop */
#define PROMPT_MS 3000        /* "at once": after a second signal */
#define TEST_TIMEOUT_S 300
#define FOREVER "max_steps=100000000" /* a job that outlives the test */
/* For the tests whose ps waits its linger out by design (a worker that is
 * never told, a ps restarted after the end): what they test is that it
 * ends, not the default's 10 s. */
#define SHORT_LINGER "ps_linger_secs=1"

/* As in the e2e suite: checkpoints every second, a data set whose two
 * shards agree closely, and a rate that keeps SGD's jitter small. */
#define QUICK_SETS                                                                                 \
    "save_model_secs=1", "log_steps=500", "summary_steps=100", "examples=1000", "learning_rate=0.01"

static dt_test_job w;

static void setup(void) {
    dt_test_job_setup(&w);
}

static void teardown(void) {
    dt_test_job_teardown(&w);
}

/* A cluster of num_ps ps and num_workers workers running the demo job with
 * QUICK_SETS and the given extra overrides (NULL-terminated). */
static void world_init(int num_ps, int num_workers, const char *const *extra) {
    static const char *const quick[] = {QUICK_SETS};
    dt_test_job_cluster(&w, num_ps, num_workers);
    dt_test_job_set(&w, quick, (int)(sizeof quick / sizeof quick[0]));
    for (int i = 0; extra && extra[i]; i++)
        dt_test_job_add_set(&w, extra[i]);
}

/* One signal to the process itself (see the top of the file). */
static void send_signal(pid_t pid, int sig) {
    ck_assert_msg(dt_test_alive(pid), "pid %d is gone before signal %d; logs:%s", (int)pid, sig,
                  dt_test_job_report(&w));
    ck_assert_msg(kill(pid, sig) == 0, "kill(%d, %d) failed", (int)pid, sig);
}

/* Asserts that a request reaches the (frozen) server on port unread: the
 * roles train on, so one comes at once. */
static void expect_call_waiting(int port) {
    ck_assert_msg(dt_test_wait_tcp_unread(port, EXIT_TIMEOUT_MS),
                  "no call reached the frozen ps on port %d (unread bytes: %ld); logs:%s", port,
                  dt_test_tcp_unread(port), dt_test_job_report(&w));
}

/* Asserts that pid takes signal sig (sent with send_signal) promptly. */
static void expect_signal_taken(pid_t pid, const char *name, int sig) {
    ck_assert_msg(dt_test_wait_signal_taken(pid, sig, EXIT_TIMEOUT_MS),
                  "%s never took signal %d; logs:%s", name, sig, dt_test_job_report(&w));
}

/* A job that outlives the test (1 ps, the chief, worker 1, logs "ps",
 * "chief", "worker1"), once the chief has saved a checkpoint. */
static void start_training(pid_t *ps, pid_t *chief, pid_t *worker) {
    static const char *const extra[] = {FOREVER, NULL};
    world_init(1, 2, extra);
    *ps = dt_test_job_start(&w, "ps", 0, "ps");
    *chief = dt_test_job_start(&w, "worker", 0, "chief");
    *worker = dt_test_job_start(&w, "worker", 1, "worker1");
    dt_test_job_expect_ckpt_after(&w, 0, *chief, JOB_TIMEOUT_MS);
}

/* ---- reading what the roles logged ------------------------------------------- */

/* The number after the first "<key> " that follows `anchor` on one line of
 * the log, or -1. */
static int64_t logged_number(const char *log_name, const char *anchor, const char *key) {
    char *text = dt_test_job_read_log(&w, log_name);
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

/* Global step of ps p (it must answer and be ready). */
static int64_t probe_step(dt_test_probe *sp, int p) {
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
static int64_t probe_wait_step(dt_test_probe *sp, int p, int64_t above, int timeout_ms) {
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
                      above, timeout_ms / 1000, err.msg, dt_test_job_report(&w));
        dt_test_sleep_ms(50);
    }
}

/* ---- the tests ------------------------------------------------------------- */

/* A whole job: every role exits 0, the last checkpoint is the fit, the log
 * dir is unlocked and holds no temporary files. */
START_TEST(clean_exit) {
    static const char *const extra[] = {"max_steps=1500", NULL};
    world_init(1, 2, extra);
    dt_test_job_run(&w, "", JOB_TIMEOUT_MS);
    dt_test_job_check_latest(&w, dt_test_job_max_steps(&w), 1);
    ck_assert_msg(dt_test_job_log_has(&w, "ps0", "job done at global_step"),
                  "ps did not log the end; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(dt_test_job_log_has(&w, "chief", "chief: job done"),
                  "chief did not log the end; logs:%s", dt_test_job_report(&w));

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
    pid_t ps, chief, worker;
    start_training(&ps, &chief, &worker);
    /* Training on past the last save: 100 steps beyond it. */
    int64_t before = dt_test_ckpt_max(w.log_dir);
    dt_test_probe sp;
    dt_test_probe_open(&sp, w.cluster, 2000);
    probe_wait_step(&sp, 0, before + 100, JOB_TIMEOUT_MS);
    dt_test_probe_close(&sp);
    before = dt_test_ckpt_max(w.log_dir);

    send_signal(chief, SIGTERM);
    dt_test_job_expect_exit(&w, chief, "chief after SIGTERM", EXIT_TIMEOUT_MS, 128 + SIGTERM);
    int64_t saved = dt_test_job_check_latest(&w, before + 1, 0);
    char step_text[32];
    snprintf(step_text, sizeof step_text, "(global_step %" PRId64 ")", saved);
    char *log = dt_test_job_read_log(&w, "chief");
    int logged = dt_test_line_has(log, "chief: saved", step_text, NULL, NULL);
    free(log);
    ck_assert_msg(logged, "chief did not log saving step %" PRId64 "; logs:%s", saved,
                  dt_test_job_report(&w));
    ck_assert_msg(dt_test_alive(ps) && dt_test_alive(worker),
                  "the chief's stop ended another role; logs:%s", dt_test_job_report(&w));
}
END_TEST

/* First SIGINT to a worker: it exits 130; the job still completes without
 * it (the ps stops after its linger). */
START_TEST(sigint_worker) {
    static const char *const extra[] = {"max_steps=8000", SHORT_LINGER, NULL};
    world_init(1, 2, extra);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1");
    ck_assert_msg(dt_test_job_wait_log(&w, "worker1", ": step ", JOB_TIMEOUT_MS, worker),
                  "worker 1 never trained; logs:%s", dt_test_job_report(&w));
    /* Both held while the signal is sent: the job cannot end first (a
     * worker that finds it done exits 0, not 130). */
    dt_test_job_hold(&w, chief, "chief");
    dt_test_job_hold(&w, worker, "worker 1");
    send_signal(worker, SIGINT);
    dt_test_job_release(&w, worker, "worker 1");
    dt_test_job_expect_exit(&w, worker, "worker 1 after SIGINT", EXIT_TIMEOUT_MS, 128 + SIGINT);
    ck_assert_msg(dt_test_job_log_has(&w, "worker1", "stopped by signal"),
                  "worker 1 does not say why it stopped; "
                  "logs:%s",
                  dt_test_job_report(&w));
    dt_test_job_release(&w, chief, "chief");
    pid_t rest[2] = {chief, ps};
    const char *names[2] = {"chief", "ps"};
    dt_test_job_expect_done(&w, rest, names, 2, JOB_TIMEOUT_MS);
    dt_test_job_check_latest(&w, dt_test_job_max_steps(&w), 1);
}
END_TEST

/* First SIGTERM to the ps: it exits 143; the workers wait for it (they do
 * not crash or give up within their budget). */
START_TEST(sigterm_ps) {
    static const char *const extra[] = {FOREVER, NULL};
    world_init(1, 2, extra);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps0");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1");
    dt_test_job_expect_ckpt_after(&w, 0, chief, JOB_TIMEOUT_MS);
    dt_test_probe sp;
    dt_test_probe_open(&sp, w.cluster, 2000);
    /* The ps stops with calls in flight: it is frozen first, and stopped
     * once a request has reached it unread. */
    for (int round = 0; round < 3; round++) {
        char name[16];
        snprintf(name, sizeof name, "ps%d", round);
        size_t seen = dt_test_job_log_length(&w, "chief");
        send_signal(ps, SIGSTOP);
        expect_call_waiting(w.ports[0]);
        send_signal(ps, SIGTERM);
        send_signal(ps, SIGCONT);
        dt_test_job_expect_exit(&w, ps, "ps after SIGTERM", EXIT_TIMEOUT_MS, 128 + SIGTERM);
        ck_assert_msg(dt_test_job_log_has(&w, name, "stopped by signal"),
                      "ps does not say why it stopped; logs:%s", dt_test_job_report(&w));
        /* A ps that stops is a peer gone away (retryable), not a signal to
         * the workers: they wait for it, not exit as if stopped themselves.
         * The chief says so once its call has failed. */
        ck_assert_msg(
            dt_test_job_wait_log_after(&w, "chief", seen, "waiting for", chief, JOB_TIMEOUT_MS),
            "the chief does not say it waits for the ps (round %d); logs:%s", round,
            dt_test_job_report(&w));
        ck_assert_msg(dt_test_alive(chief),
                      "the chief exited (%d) when the ps stopped (round %d); logs:%s",
                      dt_test_wait(chief, 0), round, dt_test_job_report(&w));
        ck_assert_msg(dt_test_alive(worker),
                      "worker 1 exited (%d) when the ps stopped (round %d); logs:%s",
                      dt_test_wait(worker, 0), round, dt_test_job_report(&w));
        /* Back: the chief restores it and training goes on. */
        snprintf(name, sizeof name, "ps%d", round + 1);
        ps = dt_test_job_start(&w, "ps", 0, name);
        int64_t restored = probe_wait_step(&sp, 0, 0, JOB_TIMEOUT_MS);
        probe_wait_step(&sp, 0, restored + 100, JOB_TIMEOUT_MS);
    }
    dt_test_probe_close(&sp);
}
END_TEST

/* A second signal exits at once. The ps is frozen (SIGSTOP), so the chief
 * and the worker sit inside an RPC with a long deadline: the first signal
 * waits for that step, the second does not. */
START_TEST(second_signal_exits_at_once) {
    static const char *const extra[] = {FOREVER, "rpc_timeout_secs=120", NULL};
    world_init(1, 2, extra);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1");
    dt_test_job_expect_ckpt_after(&w, 0, chief, JOB_TIMEOUT_MS);
    ck_assert_msg(dt_test_job_wait_log(&w, "worker1", ": step ", JOB_TIMEOUT_MS, worker),
                  "worker 1 never trained; logs:%s", dt_test_job_report(&w));

    send_signal(ps, SIGSTOP);
    expect_call_waiting(w.ports[0]);
    send_signal(chief, SIGTERM);
    send_signal(worker, SIGINT);
    expect_signal_taken(chief, "the chief", SIGTERM);
    expect_signal_taken(worker, "worker 1", SIGINT);
    ck_assert_msg(dt_test_alive(chief) && dt_test_alive(worker),
                  "a first signal cut an RPC short (chief %d, worker %d): it should finish the "
                  "step",
                  dt_test_alive(chief), dt_test_alive(worker));

    /* The RPCs have 120 s deadlines and the ps is still frozen: exiting
     * within PROMPT_MS can only be the second signal cutting them short. */
    send_signal(chief, SIGTERM);
    send_signal(worker, SIGINT);
    dt_test_job_expect_exit(&w, chief, "chief after a second SIGTERM", PROMPT_MS, 128 + SIGTERM);
    dt_test_job_expect_exit(&w, worker, "worker 1 after a second SIGINT", PROMPT_MS, 128 + SIGINT);
    /* Both exits were the second signal's, at once: a role that acted on
     * the first one (its RPC cut short) would have stopped cleanly and
     * said so. */
    static const char *const stopped[] = {"chief", "worker1"};
    for (int i = 0; i < 2; i++)
        ck_assert_msg(!dt_test_job_log_has(&w, stopped[i], "stopped by signal"),
                      "%s stopped on the first signal, cutting its RPC short; logs:%s", stopped[i],
                      dt_test_job_report(&w));

    /* The ps too: two SIGTERMs in a row. */
    send_signal(ps, SIGCONT);
    send_signal(ps, SIGTERM);
    send_signal(ps, SIGTERM);
    dt_test_job_expect_exit(&w, ps, "ps after two SIGTERMs", PROMPT_MS, 128 + SIGTERM);
}
END_TEST

/* No ps ever listens: the chief and the worker give up after
 * ready_wait_secs with 200 (retryable), naming the budget. */
START_TEST(ps_never_up) {
    static const char *const extra[] = {"ready_wait_secs=2", NULL};
    world_init(1, 2, extra);
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1");
    dt_test_job_expect_exit(&w, worker, "worker 1 without a ps", EXIT_TIMEOUT_MS, 200);
    dt_test_job_expect_exit(&w, chief, "chief without a ps", EXIT_TIMEOUT_MS, 200);
    ck_assert_msg(dt_test_job_log_has(&w, "worker1", "gave up after 2 s"),
                  "worker 1 does not name its budget; "
                  "logs:%s",
                  dt_test_job_report(&w));
    ck_assert_msg(dt_test_job_log_has(&w, "chief", "gave up after 2 s"),
                  "the chief does not name its budget; "
                  "logs:%s",
                  dt_test_job_report(&w));
    /* Every wait says whom it waits for, and how long it has. */
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", w.ports[0]);
    char *log = dt_test_job_read_log(&w, "worker1");
    int named = dt_test_line_has(log, "waiting for", " s: ps:0", addr, NULL);
    free(log);
    ck_assert_msg(named, "worker 1's wait does not name ps:0 %s; logs:%s", addr,
                  dt_test_job_report(&w));
}
END_TEST

/* A second chief on the same log dir is refused with the first's pid; the
 * first trains on and finishes the job. The first chief and the worker are
 * stopped (SIGSTOP) while the second one tries, so that a fast machine
 * cannot finish the job first: a chief that finds the job done rightly
 * saves the final model and exits 0. A stopped process keeps its lock. */
START_TEST(second_chief_refused) {
    static const char *const extra[] = {"max_steps=10000", NULL};
    world_init(1, 2, extra);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1");
    ck_assert_msg(
        dt_test_job_wait_log(&w, "chief", "chief: writing summaries", JOB_TIMEOUT_MS, chief),
        "the first chief never started training; logs:%s", dt_test_job_report(&w));
    send_signal(chief, SIGSTOP);
    send_signal(worker, SIGSTOP);

    pid_t second = dt_test_job_start(&w, "worker", 0, "chief2");
    int status = dt_test_wait(second, EXIT_TIMEOUT_MS);
    send_signal(chief, SIGCONT);
    send_signal(worker, SIGCONT);
    ck_assert_msg(status > 0 && status != 200,
                  "second chief: status %d, want a permanent failure "
                  "(negative: signal, %d: still running); logs:%s",
                  status, DT_TEST_TIMEOUT, dt_test_job_report(&w));
    char pid_text[64];
    snprintf(pid_text, sizeof pid_text, "pid %d", (int)chief);
    char *log = dt_test_job_read_log(&w, "chief2");
    int named = dt_test_line_has(log, "locked by another chief", pid_text, NULL, NULL);
    free(log);
    ck_assert_msg(named, "second chief's refusal does not name %s; logs:%s", pid_text,
                  dt_test_job_report(&w));

    int64_t at_refusal = dt_test_ckpt_max(w.log_dir);
    ck_assert_msg(
        dt_test_ckpt_wait_after(w.log_dir, at_refusal, chief, JOB_TIMEOUT_MS) > at_refusal,
        "the first chief saved nothing after the refusal; logs:%s", dt_test_job_report(&w));
    pid_t pids[3] = {chief, worker, ps};
    const char *names[3] = {"chief", "worker 1", "ps"};
    dt_test_job_expect_done(&w, pids, names, 3, JOB_TIMEOUT_MS);
    dt_test_job_check_latest(&w, dt_test_job_max_steps(&w), 1);
}
END_TEST

/* A chief that finds a live model its job did not create (here: the same
 * cluster, another learning rate) refuses it with exit 1 and a message
 * naming the ps and both jobs, and leaves the model untouched. */
START_TEST(foreign_model_refused) {
    static const char *const extra[] = {FOREVER, NULL};
    world_init(1, 1, extra);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    dt_test_job_expect_ckpt_after(&w, 0, chief, JOB_TIMEOUT_MS);
    dt_test_kill(chief, SIGKILL);
    dt_test_wait(chief, EXIT_TIMEOUT_MS);

    dt_test_probe sp;
    dt_test_probe_open(&sp, w.cluster, 5000);
    int64_t before = probe_step(&sp, 0);
    dt_test_job_add_set(&w, "learning_rate=0.02");
    pid_t other = dt_test_job_start(&w, "worker", 0, "other");
    int status = dt_test_wait(other, EXIT_TIMEOUT_MS);
    ck_assert_msg(status == 1, "chief of another job: status %d, want 1; logs:%s", status,
                  dt_test_job_report(&w));
    char *log = dt_test_job_read_log(&w, "other");
    int named = dt_test_line_has(log, "ps:0", "holds a model this job did not create", "lr=0.01",
                                 "lr=0.02");
    free(log);
    ck_assert_msg(named, "the refusal does not name the ps and both jobs; logs:%s",
                  dt_test_job_report(&w));
    /* Not re-created, not trained, not reset. */
    dt_msg_status_resp st;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_ps_client_status(sp.client, 0, &st, &err) == 0, "status: %s", err.msg);
    ck_assert_msg(st.ready && st.global_step == before && strstr(st.model, "lr=0.01"),
                  "the ps changed: ready %d step %lld (was %lld) model \"%s\"", st.ready,
                  (long long)st.global_step, (long long)before, st.model);
    dt_test_probe_close(&sp);
    dt_test_kill(ps, SIGKILL);
    dt_test_wait(ps, EXIT_TIMEOUT_MS);
}
END_TEST

/* A stranger opens connections until the ps runs out of descriptors, then
 * closes them. gRPC 1.51's listener stops accepting for good when accept()
 * fails (EMFILE); the ps must listen again, so that a worker restarted
 * afterwards (a new connection) trains, while the job goes on. The ps's
 * descriptor limit is lowered from outside (prlimit) once it is up, as
 * its own start raises the soft limit to the hard one. */
START_TEST(ps_accepts_after_fds_run_out) {
    pid_t ps, chief, worker;
    start_training(&ps, &chief, &worker);
    struct rlimit low = {64, 64};
    ck_assert_msg(prlimit(ps, RLIMIT_NOFILE, &low, NULL) == 0, "prlimit: %s", strerror(errno));

    enum { MAX_CONNS = 200 };
    int conns[MAX_CONNS], n = 0;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)w.ports[0]);
    for (; n < MAX_CONNS; n++) {
        conns[n] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(conns[n], 0);
        ck_assert_msg(connect(conns[n], (struct sockaddr *)&sa, sizeof sa) == 0,
                      "connection %d to the ps: %s", n, strerror(errno));
    }
    int noticed = dt_test_job_wait_log(&w, "ps", "stopped accepting connections", 10000, ps);
    for (int i = 0; i < n; i++)
        close(conns[i]);
    ck_assert_msg(noticed,
                  "%d connections to a ps limited to 64 descriptors: it did not say "
                  "it stopped accepting; logs:%s",
                  n, dt_test_job_report(&w));
    ck_assert_msg(dt_test_job_wait_log(&w, "ps", "listening again after", 30000, ps),
                  "the ps never listened again; logs:%s", dt_test_job_report(&w));

    dt_test_kill(worker, SIGKILL);
    dt_test_wait(worker, EXIT_TIMEOUT_MS);
    pid_t again = dt_test_job_start(&w, "worker", 1, "worker1-again");
    ck_assert_msg(dt_test_job_wait_log(&w, "worker1-again", ": step ", JOB_TIMEOUT_MS, again),
                  "a worker started after the descriptors ran out never trained; logs:%s",
                  dt_test_job_report(&w));
    int64_t now = dt_test_ckpt_max(w.log_dir);
    ck_assert_msg(dt_test_ckpt_wait_after(w.log_dir, now, chief, JOB_TIMEOUT_MS) > now,
                  "the chief saved nothing after the ps listened again; logs:%s",
                  dt_test_job_report(&w));
    ck_assert_msg(dt_test_alive(ps), "the ps died; logs:%s", dt_test_job_report(&w));
}
END_TEST

/* A ps sizes its message cap from its job's model: with a job of 1,000
 * features it takes 4 MiB, so a chief whose job has 2,000,000 (8 MB of
 * variables) is refused, exit 1, with a message that names the settings
 * that disagree; a ps given the chief's job takes the model and the job
 * completes (a few steps: each one moves 8 MB each way, slow under the
 * sanitizers). */
START_TEST(ps_message_cap_from_job) {
    static const char *const extra[] = {"data=wide", "features=1000", "max_steps=3", NULL};
    world_init(1, 1, extra);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps");
    ck_assert_msg(
        dt_test_job_wait_log(&w, "ps", "largest message 4194304 bytes", EXIT_TIMEOUT_MS, ps),
        "the ps did not log its cap; logs:%s", dt_test_job_report(&w));
    dt_test_job_add_set(&w, "features=2000000");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    dt_test_job_expect_exit(&w, chief, "chief of a larger model", JOB_TIMEOUT_MS, 1);
    char *log = dt_test_job_read_log(&w, "chief");
    int named = dt_test_line_has(log, "larger than a ps accepts", "--config", "--max-message-mb",
                                 "RESOURCE_EXHAUSTED");
    free(log);
    ck_assert_msg(named, "the refusal does not say why; logs:%s", dt_test_job_report(&w));
    dt_test_kill(ps, SIGKILL);
    dt_test_wait(ps, EXIT_TIMEOUT_MS);

    pid_t ps2 = dt_test_job_start(&w, "ps", 0, "ps2");
    pid_t chief2 = dt_test_job_start(&w, "worker", 0, "chief2");
    pid_t pids[2] = {chief2, ps2};
    const char *names[2] = {"chief", "ps"};
    dt_test_job_expect_done(&w, pids, names, 2, JOB_TIMEOUT_MS);
    /* 8,000,004 bytes of variables + 1 MiB */
    ck_assert_msg(dt_test_job_log_has(&w, "ps2", "largest message 9048580 bytes"),
                  "the ps's cap is not the model plus 1 MiB; logs:%s", dt_test_job_report(&w));
}
END_TEST

/* A job that leaves "features" and "classes" to a training file the ps
 * cannot read (here: not there; in a cluster: on the workers' machines
 * only): the ps cannot size the model, so it takes 256 MiB, not gRPC's
 * 2 GiB, and says why and what to set. (A ps that can read the file sizes
 * its cap from it: models_e2e's shapes_from_data.) */
START_TEST(ps_message_cap_without_the_data) {
    char job[1200], text[1400];
    snprintf(job, sizeof job, "%s/unshaped.json", w.dir);
    snprintf(text, sizeof text,
             "{\"model\": \"logistic\", \"data\": \"csv\", \"train_data\": \"%s/absent.csv\"}\n",
             w.dir);
    ck_assert_int_eq(dt_test_write_file(job, text), 0);
    w.config = job;
    world_init(1, 1, NULL);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps");
    ck_assert_msg(dt_test_job_wait_log(&w, "ps", "largest message 268435456 bytes (256 MiB)",
                                       EXIT_TIMEOUT_MS, ps),
                  "the ps did not take 256 MiB; logs:%s", dt_test_job_report(&w));
    char *log = dt_test_job_read_log(&w, "ps");
    int named = dt_test_line_has(log, "which this ps cannot read", "absent.csv", "--max-message-mb",
                                 "set them in the job");
    free(log);
    ck_assert_msg(named, "the ps did not say why or what to set; logs:%s", dt_test_job_report(&w));
    dt_test_kill(ps, SIGKILL);
    dt_test_wait(ps, EXIT_TIMEOUT_MS);
}
END_TEST

/* Starts ps `task` again after the job's end, logging to log_name: it
 * must exit 0 by itself (after its linger) and say, with `how`, how it
 * knew. */
static void expect_late_ps_exits(int task, const char *log_name, const char *how) {
    pid_t late = dt_test_job_start(&w, "ps", task, log_name);
    dt_test_job_expect_exit(&w, late, "a ps started after the end", EXIT_TIMEOUT_MS, 0);
    ck_assert_msg(dt_test_job_log_has(&w, log_name, how),
                  "the late ps did not say how it knew (\"%s\"); logs:%s", how,
                  dt_test_job_report(&w));
}

/* A ps (re)started after the job is done, that cannot see the log dir,
 * learns it from another ps task and exits 0 within its linger, instead of
 * waiting for a chief that will never come. ps 0 keeps serving after the
 * end, so it is there to ask. */
START_TEST(ps_started_after_done) {
    static const char *const extra[] = {"max_steps=3000", SHORT_LINGER, NULL};
    world_init(2, 1, extra);
    pid_t ps0 = dt_test_job_start_serving(&w, "ps", 0, "ps0");
    pid_t ps1 = dt_test_job_start(&w, "ps", 1, "ps1");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    pid_t pids[2] = {chief, ps1};
    const char *names[2] = {"chief", "ps 1"};
    dt_test_job_expect_done(&w, pids, names, 2, JOB_TIMEOUT_MS);

    /* On a host that does not share the log dir, only ps 0 can tell it. */
    static char elsewhere[DT_PATH_MAX + 32];
    snprintf(elsewhere, sizeof elsewhere, "log_dir=%s/elsewhere", w.dir);
    dt_test_job_add_set(&w, elsewhere);
    expect_late_ps_exits(1, "ps1-late", "ps:0 says the job is done");
    dt_test_kill(ps0, SIGKILL);
    dt_test_wait(ps0, EXIT_TIMEOUT_MS);
}
END_TEST

/* The only ps task, restarted after the job is done, has no other task to
 * ask: it learns the end from the log dir's final checkpoint (at
 * max_steps) and exits 0 once its linger since start is up. */
START_TEST(lone_ps_started_after_done) {
    static const char *const extra[] = {"max_steps=3000", SHORT_LINGER, NULL};
    world_init(1, 1, extra);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps0");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    pid_t pids[2] = {chief, ps};
    const char *names[2] = {"chief", "ps"};
    dt_test_job_expect_done(&w, pids, names, 2, JOB_TIMEOUT_MS);

    expect_late_ps_exits(0, "ps0-late", "max_steps 3000) says the job is done (global_step 3000)");
}
END_TEST

/* SIGKILL the ps mid-job and restart it: it comes back empty, the chief
 * restores it no earlier than its latest checkpoint, and the job completes
 * without restarting anyone else. */
START_TEST(ps_restart) {
    /* Long enough to be mid-job a checkpoint interval in at one round trip
     * per step (~10,000 steps/s here). */
    static const char *const extra[] = {"max_steps=60000", NULL};
    world_init(1, 2, extra);
    const int64_t max_steps = dt_test_job_max_steps(&w);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1");
    dt_test_job_expect_ckpt_after(&w, 0, chief, JOB_TIMEOUT_MS);
    /* Killed 100 steps past the last save, so steps are lost with it. */
    dt_test_probe sp;
    dt_test_probe_open(&sp, w.cluster, 2000);
    probe_wait_step(&sp, 0, dt_test_ckpt_max(w.log_dir) + 100, JOB_TIMEOUT_MS);
    dt_test_probe_close(&sp);

    /* The workers held while the ps dies: the job cannot end first. */
    dt_test_job_hold(&w, chief, "chief");
    dt_test_job_hold(&w, worker, "worker 1");
    size_t seen = dt_test_job_log_length(&w, "chief");
    send_signal(ps, SIGKILL);
    dt_test_job_expect_exit(&w, ps, "killed ps", EXIT_TIMEOUT_MS, -SIGKILL);
    int64_t before = dt_test_ckpt_max(w.log_dir);
    ck_assert_msg(before < max_steps, "the job ended (step %" PRId64 ") before the kill", before);
    dt_test_job_release(&w, chief, "chief");
    dt_test_job_release(&w, worker, "worker 1");
    /* Restarted once the chief has seen it gone. */
    ck_assert_msg(
        dt_test_job_wait_log_after(&w, "chief", seen, "waiting for", chief, JOB_TIMEOUT_MS),
        "the chief does not say it waits for the ps; logs:%s", dt_test_job_report(&w));
    pid_t ps2 = dt_test_job_start(&w, "ps", 0, "ps2");

    pid_t pids[3] = {ps2, chief, worker};
    const char *names[3] = {"restarted ps", "chief", "worker 1"};
    dt_test_job_expect_done(&w, pids, names, 3, JOB_TIMEOUT_MS);
    ck_assert_msg(dt_test_job_log_has(&w, "chief", "lost its model; restoring it"),
                  "the chief did not log restoring the ps; logs:%s", dt_test_job_report(&w));
    int64_t restored = logged_number("ps2", "created", "global_step");
    ck_assert_msg(restored >= before,
                  "the ps was restored at global_step %" PRId64 ", behind checkpoint %" PRId64
                  "; logs:%s",
                  restored, before, dt_test_job_report(&w));
    dt_test_job_check_latest(&w, max_steps, 1);
}
END_TEST

/* Two shards; ps 0 is killed while the chief is paused (a slow chief: it
 * has not seen the last steps and saved nothing lately). ps 1 holds the
 * true global step: ps 0 must come back at it, not behind, or the shards
 * disagree on the step and the job ends short of max_steps. */
START_TEST(ps_restart_two_shards) {
    static const char *const extra[] = {"max_steps=60000", NULL}; /* see ps_restart */
    world_init(2, 2, extra);
    const int64_t max_steps = dt_test_job_max_steps(&w);
    pid_t ps0 = dt_test_job_start(&w, "ps", 0, "ps0");
    pid_t ps1 = dt_test_job_start(&w, "ps", 1, "ps1");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1");
    dt_test_job_expect_ckpt_after(&w, 0, chief, JOB_TIMEOUT_MS);

    dt_test_probe sp;
    dt_test_probe_open(&sp, w.cluster, 2000);
    send_signal(chief, SIGSTOP);
    /* Worker 1 trains on alone: 100 steps past the chief's pause. */
    probe_wait_step(&sp, 1, probe_step(&sp, 1) + 100, JOB_TIMEOUT_MS);
    /* Worker 1 held too while ps 0 dies: the job cannot end first. */
    dt_test_job_hold(&w, worker, "worker 1");
    int64_t live = probe_step(&sp, 1);
    size_t seen = dt_test_job_log_length(&w, "worker1");
    send_signal(ps0, SIGKILL);
    dt_test_job_expect_exit(&w, ps0, "killed ps 0", EXIT_TIMEOUT_MS, -SIGKILL);
    dt_test_probe_close(&sp);
    ck_assert_msg(live < max_steps, "the job ended (step %" PRId64 ") before the kill", live);
    dt_test_job_release(&w, worker, "worker 1");
    /* Restarted once worker 1 has found it gone. */
    ck_assert_msg(
        dt_test_job_wait_log_after(&w, "worker1", seen, "waiting for", worker, JOB_TIMEOUT_MS),
        "worker 1 does not say it waits for ps 0; logs:%s", dt_test_job_report(&w));
    pid_t ps0b = dt_test_job_start(&w, "ps", 0, "ps0b");
    send_signal(chief, SIGCONT);

    pid_t pids[4] = {ps0b, ps1, chief, worker};
    const char *names[4] = {"restarted ps 0", "ps 1", "chief", "worker 1"};
    dt_test_job_expect_done(&w, pids, names, 4, JOB_TIMEOUT_MS);
    int64_t restored = logged_number("ps0b", "created", "global_step");
    ck_assert_msg(restored >= live,
                  "ps 0 was restored at global_step %" PRId64 ", behind ps 1's %" PRId64
                  " (the live shard's step was ignored); logs:%s",
                  restored, live, dt_test_job_report(&w));
    /* The end does not hang on the two counters being equal: the final
     * checkpoint is max_steps exactly, and no ps waited out its linger for
     * a worker that another ps had told. */
    int64_t final = dt_test_job_check_latest(&w, max_steps, 1);
    ck_assert_msg(final == max_steps, "final checkpoint at %" PRId64 ", want %" PRId64 "; logs:%s",
                  final, max_steps, dt_test_job_report(&w));
    static const char *const ps_logs[] = {"ps0b", "ps1"};
    for (int i = 0; i < 2; i++)
        ck_assert_msg(!dt_test_job_log_has(&w, ps_logs[i], "not every worker was told"),
                      "%s waited out its linger; logs:%s", ps_logs[i], dt_test_job_report(&w));
}
END_TEST

/* SIGKILL worker 1 mid-job and restart it: it rejoins and trains, and the
 * job completes. */
START_TEST(worker_restart) {
    static const char *const extra[] = {"max_steps=10000", NULL};
    world_init(1, 2, extra);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1");
    ck_assert_msg(dt_test_job_wait_log(&w, "worker1", ": step ", JOB_TIMEOUT_MS, worker),
                  "worker 1 never trained; logs:%s", dt_test_job_report(&w));
    /* The chief is held whenever the job must not end yet: while worker 1
     * dies, and from 50 steps without it until the restarted one trains
     * (a worker that finds the job done exits 0 without a step). */
    dt_test_job_hold(&w, chief, "chief");
    send_signal(worker, SIGKILL);
    dt_test_job_expect_exit(&w, worker, "killed worker 1", EXIT_TIMEOUT_MS, -SIGKILL);
    dt_test_probe sp;
    dt_test_probe_open(&sp, w.cluster, 2000);
    int64_t at_kill = probe_wait_step(&sp, 0, 0, JOB_TIMEOUT_MS);
    dt_test_job_release(&w, chief, "chief");
    /* The job goes on without it (50 more steps) before it comes back. */
    probe_wait_step(&sp, 0, at_kill + 50, JOB_TIMEOUT_MS);
    dt_test_job_hold(&w, chief, "chief");
    dt_test_probe_close(&sp);
    pid_t worker2 = dt_test_job_start(&w, "worker", 1, "worker1b");
    ck_assert_msg(dt_test_job_wait_log(&w, "worker1b", ": step ", JOB_TIMEOUT_MS, worker2),
                  "restarted worker 1 did not train; logs:%s", dt_test_job_report(&w));
    dt_test_job_release(&w, chief, "chief");
    pid_t pids[3] = {worker2, chief, ps};
    const char *names[3] = {"restarted worker 1", "chief", "ps"};
    dt_test_job_expect_done(&w, pids, names, 3, JOB_TIMEOUT_MS);
    dt_test_job_check_latest(&w, dt_test_job_max_steps(&w), 1);
}
END_TEST

/* The chief dies; worker 1 finishes the job alone. A restarted chief must
 * still close the job: save the final checkpoint and stop the ps (which
 * otherwise waits for a Shutdown forever). */
START_TEST(chief_restart_after_job_end) {
    static const char *const extra[] = {"max_steps=6000", NULL};
    world_init(1, 2, extra);
    const int64_t max_steps = dt_test_job_max_steps(&w);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1");
    ck_assert_msg(dt_test_job_wait_log(&w, "chief", ": step ", JOB_TIMEOUT_MS, chief),
                  "the chief never trained; logs:%s", dt_test_job_report(&w));
    /* Both held while the chief dies: it cannot finish the job first. */
    dt_test_job_hold(&w, worker, "worker 1");
    dt_test_job_hold(&w, chief, "chief");
    send_signal(chief, SIGKILL);
    dt_test_job_expect_exit(&w, chief, "killed chief", EXIT_TIMEOUT_MS, -SIGKILL);
    dt_test_job_release(&w, worker, "worker 1");
    dt_test_job_expect_exit(&w, worker, "worker 1 finishing alone", JOB_TIMEOUT_MS, 0);
    ck_assert_msg(dt_test_alive(ps), "ps exited before any chief told it to; logs:%s",
                  dt_test_job_report(&w));

    pid_t chief2 = dt_test_job_start(&w, "worker", 0, "chief2");
    dt_test_job_expect_exit(&w, chief2, "restarted chief", EXIT_TIMEOUT_MS, 0);
    dt_test_job_check_latest(&w, max_steps, 1);
    dt_test_job_expect_exit(&w, ps, "ps after the restarted chief", EXIT_TIMEOUT_MS, 0);
}
END_TEST

/* The whole job started again on its finished log dir (a re-applied
 * TFJob, a requeued batch job): every role exits 0 at once, the chief says
 * there is nothing to train, and no checkpoint is added or changed. Once
 * with a ps that reads the log dir (it knows the job ended), once with one
 * that does not (it waits for a chief). */
START_TEST(rerun_finished_job) {
    static const char *const extra[] = {"max_steps=1500", NULL};
    world_init(1, 2, extra);
    dt_test_job_run(&w, "", JOB_TIMEOUT_MS);
    int64_t last = dt_test_ckpt_max(w.log_dir);
    ck_assert_int_eq(last, dt_test_job_max_steps(&w));
    dt_test_job_run(&w, "-again", JOB_TIMEOUT_MS);
    static const char said[] = "the checkpoint is at max_steps 1500: nothing to train; raise "
                               "max_steps or use a new log_dir";
    ck_assert_msg(dt_test_job_log_has(&w, "chief-again", said),
                  "the chief did not say the job was complete; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(!dt_test_job_log_has(&w, "chief-again", "final pull"),
                  "the chief waited for a final pull; logs:%s", dt_test_job_report(&w));
    ck_assert_int_eq(dt_test_ckpt_max(w.log_dir), last);

    /* A ps with another log dir cannot tell; the chief's checkpoint can. */
    char job_dir[sizeof w.log_dir];
    snprintf(job_dir, sizeof job_dir, "%s", w.log_dir);
    snprintf(w.log_dir, sizeof w.log_dir, "%s/elsewhere", w.dir);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps-blind");
    snprintf(w.log_dir, sizeof w.log_dir, "%s", job_dir);
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief-blind");
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1-blind");
    const pid_t pids[] = {ps, chief, worker};
    const char *const names[] = {"ps", "chief", "worker 1"};
    dt_test_job_expect_done(&w, pids, names, 3, JOB_TIMEOUT_MS);
    ck_assert_msg(dt_test_job_log_has(&w, "chief-blind", said),
                  "the chief did not say the job was complete; logs:%s", dt_test_job_report(&w));
    ck_assert_int_eq(dt_test_ckpt_max(w.log_dir), last);
}
END_TEST

/* Asserts that the log dir holds exactly the checkpoints of steps (n,
 * ascending) and that the state file lists exactly those, the last as
 * latest. */
static void expect_ckpts(const int64_t *steps, int n, const char *when) {
    char want[2048], state[1200];
    int len =
        snprintf(want, sizeof want,
                 "model_checkpoint_path: \"model.ckpt-%" PRId64 ".safetensors\"\n", steps[n - 1]);
    for (int i = 0; i < n; i++)
        len += snprintf(want + len, sizeof want - (size_t)len,
                        "all_model_checkpoint_paths: \"model.ckpt-%" PRId64 ".safetensors\"\n",
                        steps[i]);
    snprintf(state, sizeof state, "%s/checkpoint", w.log_dir);
    size_t size = 0;
    char *text = dt_test_read_file(state, &size);
    ck_assert_msg(text && strcmp(text, want) == 0, "%s: the state file holds\n%s\nnot\n%s\nlogs:%s",
                  when, text ? text : "(none)", want, dt_test_job_report(&w));
    free(text);
    DIR *d = opendir(w.log_dir);
    ck_assert(d != NULL);
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t step = dt_test_ckpt_step(e->d_name);
        if (step < 0) continue;
        int listed = 0;
        for (int i = 0; i < n; i++)
            listed |= steps[i] == step;
        ck_assert_msg(listed, "%s: %s is in the log dir, not in the state file; logs:%s", when,
                      e->d_name, dt_test_job_report(&w));
        found++;
    }
    closedir(d);
    ck_assert_msg(found == n, "%s: %d checkpoints in the log dir, want %d; logs:%s", when, found, n,
                  dt_test_job_report(&w));
}

/* Starts a chief (logs log_name), lets it train (its first step line),
 * SIGTERMs it and waits for it to end with want (its save is the last
 * thing it does). Returns the latest checkpoint's step after. */
static int64_t chief_saves_on_term(const char *log_name, int want) {
    pid_t chief = dt_test_job_start(&w, "worker", 0, log_name);
    ck_assert_msg(dt_test_job_wait_log(&w, log_name, ": step ", JOB_TIMEOUT_MS, chief),
                  "%s never trained; logs:%s", log_name, dt_test_job_report(&w));
    /* Held while signalled: it cannot reach max_steps first. */
    dt_test_job_hold(&w, chief, log_name);
    send_signal(chief, SIGTERM);
    dt_test_job_release(&w, chief, log_name);
    dt_test_job_expect_exit(&w, chief, log_name, EXIT_TIMEOUT_MS, want);
    return dt_test_ckpt_max(w.log_dir);
}

/* A chief SIGKILLed mid-save, after its state update and before deleting
 * what it drops (DT_TEST_CKPT_KILL=before_delete), leaves a checkpoint the
 * state file no longer lists. Restarted, the chief finishes the job, and
 * its final save leaves exactly max_to_keep checkpoints, the newest by
 * step, all listed: the orphan is ranked by its step, not kept as new.
 * Every save here is deterministic: one per SIGTERM (the periodic timer
 * is an hour), then the final one; the chief is the only worker, so the
 * step moves only while one runs. */
START_TEST(chief_killed_mid_save_leaves_no_orphan) {
    static const char *const extra[] = {"max_steps=20000", "save_model_secs=3600", "max_to_keep=2",
                                        NULL};
    world_init(1, 1, extra);
    const int64_t max_steps = dt_test_job_max_steps(&w);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps");
    int64_t s1 = chief_saves_on_term("chief1", 128 + SIGTERM);
    int64_t s2 = chief_saves_on_term("chief2", 128 + SIGTERM);
    ck_assert_int_eq(setenv("DT_TEST_CKPT_KILL", "before_delete", 1), 0);
    int64_t s3 = chief_saves_on_term("chief3", -SIGKILL);
    ck_assert_int_eq(unsetenv("DT_TEST_CKPT_KILL"), 0);
    ck_assert_msg(0 < s1 && s1 < s2 && s2 < s3 && s3 < max_steps,
                  "saves at %" PRId64 ", %" PRId64 ", %" PRId64 " (max_steps %" PRId64 "); logs:%s",
                  s1, s2, s3, max_steps, dt_test_job_report(&w));
    /* The orphan is there: the state file names 2, the dir holds 3. */
    char orphan[1200];
    snprintf(orphan, sizeof orphan, "%s/model.ckpt-%" PRId64 ".safetensors", w.log_dir, s1);
    ck_assert_msg(access(orphan, F_OK) == 0, "the kill left no orphan %s; logs:%s", orphan,
                  dt_test_job_report(&w));

    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief4");
    pid_t pids[2] = {chief, ps};
    const char *names[2] = {"restarted chief", "ps"};
    dt_test_job_expect_done(&w, pids, names, 2, JOB_TIMEOUT_MS);
    expect_ckpts((int64_t[]){s3, max_steps}, 2, "after the job");
    dt_test_job_check_latest(&w, max_steps, 0);
}
END_TEST

/* The same kill in the final save: the job is complete in the log dir, so
 * the rerun (the ps killed too, everything started again) saves nothing.
 * Its chief still applies retention once: max_to_keep checkpoints remain,
 * all listed, the final one latest. */
START_TEST(rerun_after_kill_in_final_save) {
    static const char *const extra[] = {"max_steps=6000", "save_model_secs=3600", "max_to_keep=2",
                                        NULL};
    world_init(1, 1, extra);
    const int64_t max_steps = dt_test_job_max_steps(&w);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps");
    int64_t s1 = chief_saves_on_term("chief1", 128 + SIGTERM);
    int64_t s2 = chief_saves_on_term("chief2", 128 + SIGTERM);
    ck_assert_int_eq(setenv("DT_TEST_CKPT_KILL", "before_delete", 1), 0);
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief3");
    ck_assert_int_eq(unsetenv("DT_TEST_CKPT_KILL"), 0);
    dt_test_job_expect_exit(&w, chief, "chief killed in its final save", JOB_TIMEOUT_MS, -SIGKILL);
    ck_assert_msg(s1 < s2 && dt_test_ckpt_max(w.log_dir) == max_steps,
                  "saves at %" PRId64 ", %" PRId64 ", then %" PRId64 " (max_steps %" PRId64
                  "); logs:%s",
                  s1, s2, dt_test_ckpt_max(w.log_dir), max_steps, dt_test_job_report(&w));
    char orphan[1200];
    snprintf(orphan, sizeof orphan, "%s/model.ckpt-%" PRId64 ".safetensors", w.log_dir, s1);
    ck_assert_msg(access(orphan, F_OK) == 0, "the kill left no orphan %s; logs:%s", orphan,
                  dt_test_job_report(&w));
    send_signal(ps, SIGKILL);
    dt_test_job_expect_exit(&w, ps, "ps", EXIT_TIMEOUT_MS, -SIGKILL);

    dt_test_job_run(&w, "-again", JOB_TIMEOUT_MS);
    ck_assert_msg(dt_test_job_log_has(&w, "chief-again", "nothing to train"),
                  "the rerun's chief did not find the job complete; logs:%s",
                  dt_test_job_report(&w));
    expect_ckpts((int64_t[]){s2, max_steps}, 2, "after the rerun");
}
END_TEST

/* ---- one job, one identity ---------------------------------------------------- */

/* Starts a role as the README's by-hand flow does, in the test's temp dir
 * (its cwd): --cluster, --job-name and --task-index, then the rest of
 * args (NULL-terminated; no --log-dir unless given there). */
static pid_t start_by_hand(const char *job_name, int task, const char *log_name,
                           const char *const *args) {
    char task_text[16], path[1200];
    char *argv[16 + 2 * DT_TEST_JOB_MAX_SETS];
    int n = 0;
    snprintf(task_text, sizeof task_text, "%d", task);
    dt_test_job_log_path(&w, log_name, path, sizeof path);
    argv[n++] = (char *)dt_test_bin();
    argv[n++] = "--cluster";
    argv[n++] = w.cluster;
    argv[n++] = "--job-name";
    argv[n++] = (char *)job_name;
    argv[n++] = "--task-index";
    argv[n++] = task_text;
    for (int i = 0; args && args[i] && n < (int)(sizeof argv / sizeof argv[0]) - 1; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    dt_test_spawn_cwd(w.dir);
    pid_t pid = dt_test_spawn(argv, path);
    dt_test_spawn_cwd(NULL);
    ck_assert_msg(pid > 0, "cannot start %s %d", job_name, task);
    return pid;
}

/* A finished linear job's checkpoint in dir, as the demo leaves logs/linear:
 * step and max_steps 2000, job id `job_id` ("" : one from before job ids). */
static void write_finished_job(const char *dir, const char *job_id) {
    float weight = 2.0f, bias = 1.0f;
    dt_tensor items[2] = {
        {.name = "linear/weight",
         .dtype = DT_DTYPE_F32,
         .ndim = 2,
         .shape = {1, 1},
         .data = &weight,
         .nbytes = 4},
        {.name = "linear/bias",
         .dtype = DT_DTYPE_F32,
         .ndim = 1,
         .shape = {1},
         .data = &bias,
         .nbytes = 4},
    };
    dt_tensors ts = {.items = items, .count = 2};
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.global_step = 2000;
    meta.max_steps = 2000;
    snprintf(meta.model, sizeof meta.model, "linear");
    snprintf(meta.job_id, sizeof meta.job_id, "%s", job_id);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_ckpt_save_in_dir(dir, &ts, &meta, 5, NULL, 0, &err) == 0, "%s", err.msg);
}

/* The job id in a log dir's job id file; asserts it has one. */
static void read_job_id(const char *log_dir, char *out) {
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_ckpt_job_id_load(log_dir, out, &err) == 1, "no job id in %s: %s; logs:%s",
                  log_dir, err.msg, dt_test_job_report(&w));
}

/* Asserts that the job ended with a final checkpoint at exactly max_steps,
 * recording the log dir's job id, and none at step 0. */
static void expect_final_at_max_steps(int64_t max_steps) {
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    char path[1300];
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_ckpt_latest_meta(w.log_dir, &meta, path, sizeof path, &err) == 1,
                  "no checkpoint in %s: %s; logs:%s", w.log_dir, err.msg, dt_test_job_report(&w));
    dt_safetensors_meta_deinit(&meta);
    ck_assert_msg(meta.global_step == max_steps,
                  "the job ended at global_step %lld, not its max_steps %lld; logs:%s",
                  (long long)meta.global_step, (long long)max_steps, dt_test_job_report(&w));
    char id[DT_SAFETENSORS_JOB_ID_MAX];
    read_job_id(w.log_dir, id);
    ck_assert_msg(strcmp(meta.job_id, id) == 0, "%s records job id \"%s\", the log dir says %s",
                  path, meta.job_id, id);
    char zero[1300];
    snprintf(zero, sizeof zero, "%s/model.ckpt-0.safetensors", w.log_dir);
    ck_assert_msg(access(zero, F_OK) != 0, "a step-0 model was saved; logs:%s",
                  dt_test_job_report(&w));
}

/* Defect 1: the README's by-hand flow after the demo. The ps's cwd holds a
 * finished logs/linear (step 2000); the ps has no --config (so no log dir
 * of its own), chief and worker a config naming another log_dir. The new
 * job trains to exactly its max_steps, every role exits 0; with
 * --keep-serving the ps serves on and the chief saves no step-0 model. */
static void new_job_beside_finished_demo(int keep_serving) {
    dt_test_job_cluster(&w, 1, 2);
    char old[1200], config[1200], text[1600];
    snprintf(old, sizeof old, "%s/logs/linear", w.dir);
    write_finished_job(old, "");
    snprintf(w.log_dir, sizeof w.log_dir, "%s/new_job", w.dir);
    snprintf(config, sizeof config, "%s/job.json", w.dir);
    snprintf(text, sizeof text,
             "{\"log_dir\": \"%s\", \"max_steps\": 1500, \"save_model_secs\": 1, "
             "\"examples\": 1000, \"ready_wait_secs\": 20}\n",
             w.log_dir);
    ck_assert_int_eq(dt_test_write_file(config, text), 0);
    static const char *const serving[] = {"--keep-serving", NULL};
    pid_t ps = start_by_hand("ps", 0, "ps0", keep_serving ? serving : NULL);
    const char *const job[] = {"--config", config, NULL};
    pid_t chief = start_by_hand("worker", 0, "chief", job);
    pid_t worker = start_by_hand("worker", 1, "worker1", job);
    pid_t all[3] = {chief, worker, ps};
    const char *names[3] = {"chief", "worker 1", "ps"};
    dt_test_job_expect_done(&w, all, names, keep_serving ? 2 : 3, JOB_TIMEOUT_MS);
    expect_final_at_max_steps(1500);
    ck_assert_msg(!dt_test_job_log_has(&w, "ps0", "says the job is done"),
                  "the ps took another job's checkpoint for this one's end; logs:%s",
                  dt_test_job_report(&w));
    char id[DT_SAFETENSORS_JOB_ID_MAX], line[96];
    read_job_id(w.log_dir, id);
    snprintf(line, sizeof line, "job id %s", id);
    ck_assert_msg(dt_test_job_log_has(&w, "ps0", line) && dt_test_job_log_has(&w, "chief", line) &&
                      dt_test_job_log_has(&w, "worker1", line),
                  "not every role logs the job id %s; logs:%s", id, dt_test_job_report(&w));
    if (keep_serving) {
        ck_assert_msg(dt_test_alive(ps), "the --keep-serving ps exited; logs:%s",
                      dt_test_job_report(&w));
        ck_assert_int_eq(kill(ps, SIGTERM), 0);
        dt_test_job_expect_exit(&w, ps, "ps", EXIT_TIMEOUT_MS, 128 + SIGTERM);
    }
}

START_TEST(new_job_beside_finished_demo_job) {
    new_job_beside_finished_demo(0);
}
END_TEST

START_TEST(new_job_beside_finished_demo_job_keep_serving) {
    new_job_beside_finished_demo(1);
}
END_TEST

/* A chief whose ps says the job is done, but for another job id (the ps's
 * own config names a finished log dir of job A; the chief's log dir is new,
 * job B): exit 1 naming both ids, no checkpoint written, nothing created. */
START_TEST(done_of_another_job_refused) {
    static const char job_a[] = "0123456789abcdef0123456789abcdef";
    dt_test_job_cluster(&w, 1, 1);
    char old[1200];
    snprintf(old, sizeof old, "%s/job_a", w.dir);
    write_finished_job(old, job_a);
    const char *const ps_args[] = {"--log-dir", old, "--keep-serving", NULL};
    pid_t ps = start_by_hand("ps", 0, "ps0", ps_args);
    ck_assert_msg(dt_test_job_wait_log(&w, "ps0", "says the job is done", JOB_TIMEOUT_MS, ps),
                  "the ps did not learn job A's end from its log dir; logs:%s",
                  dt_test_job_report(&w));
    const char *const chief_args[] = {"--log-dir", w.log_dir, "--set", "ready_wait_secs=20", NULL};
    pid_t chief = start_by_hand("worker", 0, "chief", chief_args);
    int status = dt_test_wait(chief, JOB_TIMEOUT_MS);
    ck_assert_msg(status == 1, "chief told \"done\" of another job: status %d, want 1; logs:%s",
                  status, dt_test_job_report(&w));
    char job_b[DT_SAFETENSORS_JOB_ID_MAX];
    read_job_id(w.log_dir, job_b);
    ck_assert_msg(strcmp(job_b, job_a) != 0, "the new job took job A's id");
    char *log = dt_test_job_read_log(&w, "chief");
    int named = dt_test_line_has(log, "says the job is done", job_a, job_b, "refusing");
    free(log);
    ck_assert_msg(named, "the refusal does not name the ps and both job ids; logs:%s",
                  dt_test_job_report(&w));
    ck_assert_msg(dt_test_ckpt_max(w.log_dir) < 0, "the refused chief wrote a checkpoint; logs:%s",
                  dt_test_job_report(&w));
    dt_test_probe sp;
    dt_test_probe_open(&sp, w.cluster, 5000);
    dt_msg_status_resp st;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_ps_client_status(sp.client, 0, &st, &err) == 0, "status: %s", err.msg);
    dt_test_probe_close(&sp);
    ck_assert_msg(!st.ready && strcmp(st.job_id, job_a) == 0,
                  "the ps changed: ready %d, job id \"%s\" (want %s)", st.ready, st.job_id, job_a);
    ck_assert_int_eq(kill(ps, SIGTERM), 0);
    dt_test_job_expect_exit(&w, ps, "ps", EXIT_TIMEOUT_MS, 128 + SIGTERM);
}
END_TEST

/* The job id is made once per log dir, kept in its job id file before the
 * first Create: a chief killed before its first save comes back with the
 * same id, finds the ps's model its own, and its checkpoints record it. */
START_TEST(job_id_survives_chief_restart) {
    static const char *const extra[] = {FOREVER, "save_model_secs=3600", NULL};
    world_init(1, 1, extra);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps0");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    dt_test_probe sp;
    dt_test_probe_open(&sp, w.cluster, 5000);
    probe_wait_step(&sp, 0, 100, JOB_TIMEOUT_MS);
    char id[DT_SAFETENSORS_JOB_ID_MAX];
    read_job_id(w.log_dir, id);
    dt_msg_status_resp st;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_ps_client_status(sp.client, 0, &st, &err) == 0, "status: %s", err.msg);
    ck_assert_msg(strcmp(st.job_id, id) == 0, "the ps holds job id \"%s\", the log dir %s",
                  st.job_id, id);
    ck_assert_msg(dt_test_ckpt_max(w.log_dir) < 0, "a checkpoint before the kill");
    send_signal(chief, SIGKILL);
    dt_test_job_expect_exit(&w, chief, "chief", EXIT_TIMEOUT_MS, -SIGKILL);

    int64_t before = probe_step(&sp, 0);
    chief = dt_test_job_start(&w, "worker", 0, "chief-again");
    probe_wait_step(&sp, 0, before + 100, JOB_TIMEOUT_MS);
    char line[96];
    snprintf(line, sizeof line, "job id %s (from job_id", id);
    ck_assert_msg(dt_test_job_log_has(&w, "chief-again", line),
                  "the restarted chief does not take the job id %s from the log dir; logs:%s", id,
                  dt_test_job_report(&w));
    send_signal(chief, SIGTERM);
    dt_test_job_expect_exit(&w, chief, "chief after SIGTERM", EXIT_TIMEOUT_MS, 128 + SIGTERM);
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    ck_assert_msg(dt_ckpt_latest_meta(w.log_dir, &meta, NULL, 0, &err) == 1, "no checkpoint: %s",
                  err.msg);
    dt_safetensors_meta_deinit(&meta);
    ck_assert_msg(strcmp(meta.job_id, id) == 0, "the checkpoint records job id \"%s\", not %s",
                  meta.job_id, id);
    dt_err_clear(&err);
    ck_assert_msg(dt_ps_client_status(sp.client, 0, &st, &err) == 0, "status: %s", err.msg);
    ck_assert_msg(strcmp(st.job_id, id) == 0, "the ps holds job id \"%s\", not %s", st.job_id, id);
    dt_test_probe_close(&sp);
    send_signal(ps, SIGTERM);
    dt_test_job_expect_exit(&w, ps, "ps", EXIT_TIMEOUT_MS, 128 + SIGTERM);
}
END_TEST

/* A log dir whose checkpoint is from before job ids: the chief resuming it
 * makes the job an id, says so, and records it from then on. */
START_TEST(job_id_for_a_checkpoint_from_before_ids) {
    static const char *const extra[] = {"max_steps=3000", NULL};
    world_init(1, 1, extra);
    write_finished_job(w.log_dir, "");
    dt_test_job_run(&w, "", JOB_TIMEOUT_MS);
    expect_final_at_max_steps(3000);
    char id[DT_SAFETENSORS_JOB_ID_MAX], line[96];
    read_job_id(w.log_dir, id);
    snprintf(line, sizeof line, "job id %s (new: its checkpoints are from before job ids", id);
    ck_assert_msg(dt_test_job_log_has(&w, "chief", line),
                  "the chief does not say it gave the old checkpoint's job id %s; logs:%s", id,
                  dt_test_job_report(&w));
}
END_TEST

/* Defect 2: two ps tasks without a config and a chief with a max_steps
 * above the default's 2000, all in the default log dir (logs/linear under
 * their cwd). ps:1 is SIGKILLed once a checkpoint past step 2000 is saved
 * and restarted the same way; the chief is held stopped meanwhile, so the
 * job is still open while the restarted ps looks around (more than one of
 * its asks, by its Status uptime). The job ends at exactly max_steps. */
START_TEST(ps_restart_without_config) {
    static const char *const extra[] = {"max_steps=40000", NULL};
    world_init(2, 1, extra);
    snprintf(w.log_dir, sizeof w.log_dir, "%s/logs/linear", w.dir);
    const char *chief_args[2 * DT_TEST_JOB_MAX_SETS + 1];
    int n = 0;
    for (int i = 0; i < w.num_sets; i++) {
        chief_args[n++] = "--set";
        chief_args[n++] = w.sets[i];
    }
    chief_args[n] = NULL;
    pid_t ps0 = start_by_hand("ps", 0, "ps0", NULL);
    pid_t ps1 = start_by_hand("ps", 1, "ps1", NULL);
    pid_t chief = start_by_hand("worker", 0, "chief", chief_args);
    int64_t saved = dt_test_ckpt_wait_after(w.log_dir, 2000, chief, JOB_TIMEOUT_MS);
    ck_assert_msg(saved > 2000, "no checkpoint past step 2000; logs:%s", dt_test_job_report(&w));
    dt_test_probe sp;
    dt_test_probe_open(&sp, w.cluster, 2000);
    probe_wait_step(&sp, 1, saved, JOB_TIMEOUT_MS);
    send_signal(chief, SIGSTOP);
    send_signal(ps1, SIGKILL);
    dt_test_job_expect_exit(&w, ps1, "ps 1", EXIT_TIMEOUT_MS, -SIGKILL);
    ps1 = start_by_hand("ps", 1, "ps1-again", NULL);
    long long deadline = dt_test_now_ms() + JOB_TIMEOUT_MS;
    for (;;) {
        dt_msg_status_resp st;
        dt_err err;
        dt_err_clear(&err);
        if (dt_ps_client_status(sp.client, 1, &st, &err) == 0 && st.uptime_ms > 2500) break;
        ck_assert_msg(dt_test_now_ms() < deadline && dt_test_alive(ps1),
                      "the restarted ps 1 did not come up: %s; logs:%s", err.msg,
                      dt_test_job_report(&w));
        dt_test_sleep_ms(50);
    }
    dt_test_probe_close(&sp);
    send_signal(chief, SIGCONT);
    pid_t all[3] = {chief, ps0, ps1};
    const char *names[3] = {"chief", "ps 0", "ps 1 (restarted)"};
    dt_test_job_expect_done(&w, all, names, 3, JOB_TIMEOUT_MS);
    expect_final_at_max_steps(40000);
}
END_TEST

/* One case per test, named like it, so one can be run alone
 * (CK_RUN_CASE=sigterm_ps). */
static void add_case(Suite *s, const char *name, const TTest *test) {
    tcase_add_test(dt_test_job_tcase(s, name, TEST_TIMEOUT_S, setup, teardown), test);
}

Suite *lifecycle_suite(void) {
    Suite *s = suite_create("lifecycle");
    add_case(s, "clean_exit", clean_exit);
    add_case(s, "rerun_finished_job", rerun_finished_job);
    add_case(s, "sigterm_chief_saves", sigterm_chief_saves);
    add_case(s, "sigint_worker", sigint_worker);
    add_case(s, "sigterm_ps", sigterm_ps);
    add_case(s, "second_signal_exits_at_once", second_signal_exits_at_once);
    add_case(s, "ps_never_up", ps_never_up);
    add_case(s, "second_chief_refused", second_chief_refused);
    add_case(s, "ps_started_after_done", ps_started_after_done);
    add_case(s, "lone_ps_started_after_done", lone_ps_started_after_done);
    add_case(s, "foreign_model_refused", foreign_model_refused);
    add_case(s, "new_job_beside_finished_demo_job", new_job_beside_finished_demo_job);
    add_case(s, "new_job_beside_finished_demo_job_keep_serving",
             new_job_beside_finished_demo_job_keep_serving);
    add_case(s, "done_of_another_job_refused", done_of_another_job_refused);
    add_case(s, "job_id_survives_chief_restart", job_id_survives_chief_restart);
    add_case(s, "job_id_for_a_checkpoint_from_before_ids", job_id_for_a_checkpoint_from_before_ids);
    add_case(s, "ps_accepts_after_fds_run_out", ps_accepts_after_fds_run_out);
    add_case(s, "ps_message_cap_from_job", ps_message_cap_from_job);
    add_case(s, "ps_message_cap_without_the_data", ps_message_cap_without_the_data);
    return s;
}

Suite *restart_suite(void) {
    Suite *s = suite_create("restart");
    add_case(s, "ps_restart", ps_restart);
    add_case(s, "ps_restart_two_shards", ps_restart_two_shards);
    add_case(s, "ps_restart_without_config", ps_restart_without_config);
    add_case(s, "worker_restart", worker_restart);
    add_case(s, "chief_restart_after_job_end", chief_restart_after_job_end);
    add_case(s, "chief_killed_mid_save_leaves_no_orphan", chief_killed_mid_save_leaves_no_orphan);
    add_case(s, "rerun_after_kill_in_final_save", rerun_after_kill_in_final_save);
    return s;
}
