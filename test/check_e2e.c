/*
 * Suite "e2e": whole jobs on loopback. Each test starts real dtrain processes
 * ($DTRAIN_BIN) on free ports with a temp log dir: 1 ps, the chief (worker 0)
 * and worker 1. It checks exit statuses, the files the chief leaves (the
 * final checkpoint, compared with the closed-form least-squares fit of the
 * same data; the event file, read back with its CRCs), and the restart
 * semantics: a killed chief rejoins the live ps without re-initializing, and
 * a fresh cluster on an old log dir resumes from its latest checkpoint.
 *
 * Every wait is bounded and every process is stopped by the teardown (or,
 * when an assertion ends the test, by dying with it). Nothing asserts speed.
 */
#include <check.h>
#include <dirent.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "checkpoint.h"
#include "cluster.h"
#include "data.h"
#include "model.h"
#include "proc.h"
#include "suites.h"
#include "summary.h"

#define JOB_TIMEOUT_MS 60000 /* one short job (a few s), 2 cores, maybe under ASan */
#define LONG_JOB_TIMEOUT_MS 180000
#define EXIT_TIMEOUT_MS 20000 /* a role asked to stop */
#define TEST_TIMEOUT_S 420
#define WEIGHT_TOL 0.05
#define MAX_SETS 8
#define MAX_ROLES 3

/* The demo job shortened: checkpoints every second, summaries and progress
 * lines often enough to see. Two overrides keep the fit check honest rather
 * than lucky. Async workers pull the model toward their own shard's optimum,
 * and on 2 cores one worker may do most of the last steps: with the demo's
 * 100 examples the two shards' best biases differ by ~0.06, so examples=1000
 * (shards ~0.02 apart). And SGD's jitter around the optimum grows with the
 * rate; learning_rate=0.01 keeps it far inside WEIGHT_TOL while 1500 steps
 * are still ten time constants of the slowest direction. */
#define QUICK_SETS                                                             \
    "save_model_secs=1", "log_steps=100", "summary_steps=50", "examples=1000",  \
        "learning_rate=0.01"
#define NUM_QUICK 5

typedef struct {
    char dir[1024];     /* the test's temp dir: cluster file and role logs */
    char cluster[1100]; /* cluster file: 1 ps, 2 workers */
    char log_dir[1100]; /* the job's log_dir */
    int ports[3];       /* ps, chief, worker 1 */
    const char *sets[MAX_SETS]; /* --set overrides of the demo job */
    int num_sets;
} world;

static char *tmp;
static world w;
static char report_buf[16384];

static void suite_setup(void) {
    if (dt_test_tmp_begin() != 0) fprintf(stderr, "e2e: cannot make the suite's temp dir\n");
}

static void setup(void) {
    tmp = dt_test_tempdir();
    ck_assert_msg(tmp != NULL, "cannot make a temp dir");
    ck_assert_msg(access(dt_test_bin(), X_OK) == 0,
                  "no executable dtrain at %s (set DTRAIN_BIN, or run `make test`)",
                  dt_test_bin());
    memset(&w, 0, sizeof w);
    snprintf(w.dir, sizeof w.dir, "%s", tmp);
    snprintf(w.cluster, sizeof w.cluster, "%s/cluster.json", tmp);
    snprintf(w.log_dir, sizeof w.log_dir, "%s/logs", tmp);
    ck_assert_int_eq(dt_test_write_cluster(w.cluster, 1, 2, w.ports), 0);
}

static void teardown(void) {
    dt_test_kill_all();
    dt_test_tempdir_free(tmp);
    tmp = NULL;
}

static void set_job(const char *const *sets, int n) {
    ck_assert(n <= MAX_SETS);
    for (int i = 0; i < n; i++) w.sets[i] = sets[i];
    w.num_sets = n;
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
        char *tail = dt_test_tail(path, 1200);
        int k = snprintf(report_buf + used, sizeof report_buf - used, "\n== %s ==\n%s",
                         e->d_name, tail);
        free(tail);
        if (k < 0 || (size_t)k >= sizeof report_buf - used) break;
        used += (size_t)k;
    }
    closedir(d);
    return report_buf;
}

/* Starts a role of the current job; its output goes to dir/<log_name>.log. */
static pid_t start_role(const char *job_name, int task, const char *log_name, int keep_serving) {
    char task_text[16], log_path[1200];
    char *argv[16 + 2 * MAX_SETS];
    int n = 0;
    snprintf(task_text, sizeof task_text, "%d", task);
    snprintf(log_path, sizeof log_path, "%s/%s.log", w.dir, log_name);
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
    if (keep_serving) argv[n++] = "--keep-serving";
    argv[n] = NULL;
    pid_t pid = dt_test_spawn(argv, log_path);
    ck_assert_msg(pid > 0, "cannot start %s %d", job_name, task);
    return pid;
}

static char *read_log(const char *log_name) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.log", w.dir, log_name);
    char *text = dt_test_read_file(path, NULL);
    ck_assert_msg(text != NULL, "no log %s", path);
    return text;
}

/* Checks every line of a role's log against the contract's format,
 * "<pid> <role> hh:mm:ss.mmm <D|I|W|E> message", with the role's letter
 * ('-' is allowed too: lines written before the role is known). */
static void check_log_format(const char *log_name, char role) {
    char *log = read_log(log_name);
    int lines = 0;
    for (char *line = log, *end; *line; line = end + (*end == '\n')) {
        end = strchr(line, '\n');
        if (!end) end = line + strlen(line);
        if (end == line) continue;
        lines++;
        const char *p = line;
        int ok = *p >= '1' && *p <= '9';
        while (ok && *p >= '0' && *p <= '9') p++;
        ok = ok && p[0] == ' ' && (p[1] == role || p[1] == '-') && p[2] == ' ';
        /* "hh:mm:ss.mmm" */
        static const char shape[] = "00:00:00.000";
        for (int i = 0; ok && shape[i]; i++)
            ok = shape[i] == '0' ? (p[3 + i] >= '0' && p[3 + i] <= '9') : p[3 + i] == shape[i];
        p += ok ? 3 + (int)sizeof shape - 1 : 0;
        ok = ok && p[0] == ' ' && strchr("DIWE", p[1]) && p[1] && p[2] == ' ' && p + 3 < end;
        ck_assert_msg(ok, "%s.log line %d is not \"<pid> %c hh:mm:ss.mmm <level> message\": %.*s",
                      log_name, lines, role, (int)(end - line), line);
    }
    free(log);
    ck_assert_msg(lines > 0, "%s.log is empty", log_name);
}

/* 1 when needle occurs within the first max_lines lines of text. */
static int in_first_lines(const char *text, const char *needle, int max_lines) {
    const char *hit = strstr(text, needle);
    if (!hit) return 0;
    int newlines = 0;
    for (const char *p = text; p < hit; p++) newlines += *p == '\n';
    return newlines < max_lines;
}

/* ---- checkpoints in the log dir ---------------------------------------- */

#define MAX_SEEN 4096

/* The checkpoint steps ever seen in the log dir, and the smallest one that
 * was not there when the watch began (INT64_MAX while none). */
typedef struct {
    int64_t seen[MAX_SEEN];
    int num_seen;
    int64_t min_new;
    int64_t max_seen;
} ckpt_watch;

/* Parses "model.ckpt-<step>.safetensors"; -1 for any other name (temporary
 * files included). */
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

/* Adds the log dir's current checkpoints; new ones count toward min_new
 * unless this is the baseline scan. */
static void watch_scan(ckpt_watch *cw, int baseline) {
    DIR *d = opendir(w.log_dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t step = ckpt_step(e->d_name);
        if (step < 0) continue;
        int known = 0;
        for (int i = 0; i < cw->num_seen && !known; i++) known = cw->seen[i] == step;
        if (known || cw->num_seen == MAX_SEEN) continue;
        cw->seen[cw->num_seen++] = step;
        if (step > cw->max_seen) cw->max_seen = step;
        if (!baseline && step < cw->min_new) cw->min_new = step;
    }
    closedir(d);
}

static void watch_begin(ckpt_watch *cw) {
    memset(cw, 0, sizeof *cw);
    cw->min_new = INT64_MAX;
    cw->max_seen = -1;
    watch_scan(cw, 1);
}

/* Waits for every pid to exit, scanning checkpoints meanwhile (cw may be
 * NULL). status[i] gets dt_test_wait's result; on the deadline the rest are
 * killed and get DT_TEST_TIMEOUT. */
static void wait_all(const pid_t *pids, int n, int *status, int timeout_ms, ckpt_watch *cw) {
    long long deadline = dt_test_now_ms() + timeout_ms;
    int done[MAX_ROLES] = {0}, left = n;
    ck_assert(n <= MAX_ROLES);
    while (left > 0) {
        if (cw) watch_scan(cw, 0);
        for (int i = 0; i < n; i++) {
            if (done[i] || dt_test_alive(pids[i])) continue;
            status[i] = dt_test_wait(pids[i], 0);
            done[i] = 1;
            left--;
        }
        if (left == 0) break;
        if (dt_test_now_ms() >= deadline) {
            for (int i = 0; i < n; i++)
                if (!done[i]) status[i] = dt_test_wait(pids[i], 0);
            break;
        }
        dt_test_sleep_ms(50);
    }
    if (cw) watch_scan(cw, 0);
}

static void expect_all_exit(const pid_t *pids, const char *const *names, int n, int timeout_ms,
                            ckpt_watch *cw, int want) {
    int status[MAX_ROLES];
    wait_all(pids, n, status, timeout_ms, cw);
    for (int i = 0; i < n; i++) {
        if (status[i] == DT_TEST_TIMEOUT)
            ck_abort_msg("%s still running after %d s; logs:%s", names[i], timeout_ms / 1000,
                         report());
        ck_assert_msg(status[i] == want, "%s exited with %d, want %d (negative: signal); logs:%s",
                      names[i], status[i], want, report());
    }
}

/* Waits until a checkpoint with a step > after exists or pid exits. Returns
 * the newest step seen, or -1. */
static int64_t wait_ckpt_after(int64_t after, pid_t pid, int timeout_ms) {
    long long deadline = dt_test_now_ms() + timeout_ms;
    ckpt_watch cw;
    for (;;) {
        watch_begin(&cw);
        if (cw.max_seen > after) return cw.max_seen;
        if (!dt_test_alive(pid) || dt_test_now_ms() >= deadline) return -1;
        dt_test_sleep_ms(50);
    }
}

/* ---- what the job should have learned ------------------------------------ */

/* The job the roles run: the demo defaults and the same overrides. */
static void load_job(dt_job *job) {
    dt_err err;
    dt_err_clear(&err);
    dt_job_defaults(job);
    for (int i = 0; i < w.num_sets; i++)
        ck_assert_msg(dt_job_set(job, w.sets[i], &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_job_finish(job, &err) == 0, "%s", err.msg);
}

/* Closed-form least squares on the whole data set of the current job. */
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

static int64_t max_steps_of_job(void) {
    dt_job job;
    load_job(&job);
    return job.max_steps;
}

static float scalar_of(const dt_tensors *ts, const char *name) {
    const dt_tensor *t = dt_tensors_find(ts, name);
    ck_assert_msg(t != NULL, "checkpoint has no %s", name);
    ck_assert_msg(t->dtype == DT_DTYPE_F32 && dt_tensor_numel(t) == 1,
                  "%s: dtype %d with %" PRId64 " elements, want one F32", name, t->dtype,
                  dt_tensor_numel(t));
    float v;
    memcpy(&v, t->data, sizeof v);
    return v;
}

/* Loads the latest checkpoint of the log dir; asserts its step reaches
 * min_step and, when check_fit, that the line matches the closed form.
 * Returns its global step. */
static int64_t check_final_ckpt(int64_t min_step, int check_fit) {
    dt_tensors ts;
    dt_ckpt_meta meta;
    dt_err err;
    char path[2048];
    memset(&ts, 0, sizeof ts);
    dt_err_clear(&err);
    int rc = dt_ckpt_restore_latest(w.log_dir, &ts, &meta, path, sizeof path, &err);
    ck_assert_msg(rc == 1, "no loadable checkpoint in %s (rc %d: %s); logs:%s", w.log_dir, rc,
                  err.msg, report());
    ck_assert_msg(meta.global_step >= min_step, "%s: global_step %" PRId64 " < %" PRId64, path,
                  meta.global_step, min_step);
    const dt_tensor *weight = dt_tensors_find(&ts, "linear/weight");
    ck_assert_msg(weight && weight->ndim == 2 && weight->shape[0] == 1 && weight->shape[1] == 1,
                  "%s: linear/weight missing or not [1,1]", path);
    if (check_fit) {
        double want_w, want_b;
        closed_form(&want_w, &want_b);
        double got_w = scalar_of(&ts, "linear/weight"), got_b = scalar_of(&ts, "linear/bias");
        ck_assert_msg(got_w - want_w < WEIGHT_TOL && want_w - got_w < WEIGHT_TOL,
                      "weight %.5f, closed form %.5f (step %" PRId64 ")", got_w, want_w,
                      meta.global_step);
        ck_assert_msg(got_b - want_b < WEIGHT_TOL && want_b - got_b < WEIGHT_TOL,
                      "bias %.5f, closed form %.5f (step %" PRId64 ")", got_b, want_b,
                      meta.global_step);
    }
    dt_tensors_deinit(&ts);
    return meta.global_step;
}

/* Reads every event file of the log dir back, CRCs checked. Returns the
 * number of records. */
static int check_event_files(void) {
    int files = 0, records = 0;
    DIR *d = opendir(w.log_dir);
    ck_assert_msg(d != NULL, "no log dir %s", w.log_dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20) != 0) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", w.log_dir, e->d_name);
        FILE *f = fopen(path, "rb");
        ck_assert_msg(f != NULL, "cannot open %s", path);
        uint8_t *data = NULL;
        size_t len = 0;
        dt_err err;
        dt_err_clear(&err);
        int rc;
        while ((rc = dt_tfrecord_read(f, &data, &len, &err)) == 1) records++;
        free(data);
        fclose(f);
        ck_assert_msg(rc == 0, "%s: record %d: %s", path, records, err.msg);
        files++;
    }
    closedir(d);
    ck_assert_msg(files >= 1, "no events.out.tfevents.* in %s", w.log_dir);
    return records;
}

/* Runs a whole cluster to the end: ps, chief, worker 1, all exit 0. */
static void run_cluster(const char *tag, ckpt_watch *cw) {
    char ps_log[64], chief_log[64], worker_log[64];
    snprintf(ps_log, sizeof ps_log, "ps%s", tag);
    snprintf(chief_log, sizeof chief_log, "chief%s", tag);
    snprintf(worker_log, sizeof worker_log, "worker1%s", tag);
    pid_t pids[3] = {start_role("ps", 0, ps_log, 0), start_role("worker", 0, chief_log, 0),
                     start_role("worker", 1, worker_log, 0)};
    const char *names[3] = {"ps", "chief", "worker 1"};
    expect_all_exit(pids, names, 3, JOB_TIMEOUT_MS, cw, 0);
}

/* ---- the tests ----------------------------------------------------------- */

/* The demo: the job runs to its end, every role exits 0, and the model the
 * chief saved is the least-squares line. */
START_TEST(demo) {
    static const char *const sets[] = {"max_steps=1500", QUICK_SETS};
    set_job(sets, 1 + NUM_QUICK);
    run_cluster("", NULL);
    check_final_ckpt(max_steps_of_job(), 1);
    int records = check_event_files();
    ck_assert_msg(records >= 3, "only %d event records", records);
    check_log_format("ps", 'P');
    check_log_format("chief", 'C');
    check_log_format("worker1", 'W');
}
END_TEST

/* SIGKILL the chief mid-job and restart it: it rejoins the live ps, does not
 * re-initialize, and the job completes with a good model. */
START_TEST(restart_chief) {
    static const char *const sets[] = {"max_steps=20000", QUICK_SETS};
    set_job(sets, 1 + NUM_QUICK);
    const int64_t max_steps = max_steps_of_job();
    pid_t ps = start_role("ps", 0, "ps", 0);
    pid_t chief = start_role("worker", 0, "chief", 0);
    pid_t worker = start_role("worker", 1, "worker1", 0);

    /* A checkpoint past step 0 proves training is under way. */
    int64_t before = wait_ckpt_after(0, chief, JOB_TIMEOUT_MS);
    ck_assert_msg(before > 0, "no checkpoint past step 0 while the chief ran; logs:%s", report());
    ck_assert_msg(before < max_steps, "the job ended (step %" PRId64 ") before the kill; "
                  "raise max_steps", before);
    ck_assert_int_eq(dt_test_kill(chief, SIGKILL), 0);
    int killed = dt_test_wait(chief, EXIT_TIMEOUT_MS);
    ck_assert_msg(killed == -SIGKILL, "chief ended with %d, want -SIGKILL", killed);

    ckpt_watch cw;
    watch_begin(&cw);
    before = cw.max_seen;
    pid_t chief2 = start_role("worker", 0, "chief2", 0);
    pid_t pids[3] = {ps, chief2, worker};
    const char *names[3] = {"ps", "restarted chief", "worker 1"};
    expect_all_exit(pids, names, 3, LONG_JOB_TIMEOUT_MS, &cw, 0);

    char *log = read_log("chief2");
    int live = in_first_lines(log, "ps already holds the model", 3);
    free(log);
    ck_assert_msg(live,
                  "restarted chief does not open with \"ps already holds the model\"; logs:%s",
                  report());
    /* Re-initializing would have reset the step: every checkpoint of the
     * restarted chief must be at or past the last one before the kill. */
    ck_assert_msg(cw.min_new != INT64_MAX, "restarted chief wrote no checkpoint");
    ck_assert_msg(cw.min_new >= before,
                  "restarted chief saved step %" PRId64 " < %" PRId64 " saved before the kill",
                  cw.min_new, before);
    int64_t final_step = check_final_ckpt(max_steps, 1);
    ck_assert_msg(final_step >= before, "final step %" PRId64 " < %" PRId64, final_step, before);
}
END_TEST

/* A new cluster on a finished job's log dir restores its latest checkpoint
 * and trains on from there. */
START_TEST(fresh_cluster_restores) {
    static const char *const first[] = {"max_steps=1500", QUICK_SETS};
    static const char *const second[] = {"max_steps=3000", QUICK_SETS};
    set_job(first, 1 + NUM_QUICK);
    run_cluster("", NULL);
    int64_t first_final = check_final_ckpt(max_steps_of_job(), 0);

    /* New ports too: a new cluster, only the log dir is shared. */
    ck_assert_int_eq(dt_test_write_cluster(w.cluster, 1, 2, w.ports), 0);
    set_job(second, 1 + NUM_QUICK);
    ckpt_watch cw;
    watch_begin(&cw);
    run_cluster("2", &cw);

    char *log = read_log("chief2");
    char step_text[32];
    snprintf(step_text, sizeof step_text, "%" PRId64, first_final);
    int restored = dt_test_line_has(log, "restored", step_text, NULL, NULL);
    free(log);
    ck_assert_msg(restored, "second chief has no line with \"restored\" and %s; logs:%s",
                  step_text, report());
    ck_assert_msg(cw.min_new != INT64_MAX, "second run wrote no new checkpoint");
    ck_assert_msg(cw.min_new > first_final,
                  "second run's first checkpoint is step %" PRId64 ", not past %" PRId64,
                  cw.min_new, first_final);
    check_final_ckpt(max_steps_of_job(), 1);
}
END_TEST

/* 1 when something accepts TCP connections on 127.0.0.1:port. */
static int port_open(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)port);
    int ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

/* With --keep-serving the ps outlives the job until a signal stops it; the
 * contract's status for a role stopped by SIGTERM is 128 + 15. */
START_TEST(keep_serving) {
    static const char *const sets[] = {"max_steps=500", QUICK_SETS};
    set_job(sets, 1 + NUM_QUICK);
    pid_t ps = start_role("ps", 0, "ps", 1);
    pid_t pids[2] = {start_role("worker", 0, "chief", 0), start_role("worker", 1, "worker1", 0)};
    const char *names[2] = {"chief", "worker 1"};
    expect_all_exit(pids, names, 2, JOB_TIMEOUT_MS, NULL, 0);
    check_final_ckpt(max_steps_of_job(), 0);

    dt_test_sleep_ms(1500);
    ck_assert_msg(dt_test_alive(ps), "ps with --keep-serving exited (%d) after the job; logs:%s",
                  dt_test_wait(ps, 0), report());
    ck_assert_msg(port_open(w.ports[0]), "ps with --keep-serving no longer listens on %d",
                  w.ports[0]);
    ck_assert_int_eq(dt_test_kill(ps, SIGTERM), 0);
    int status = dt_test_wait(ps, EXIT_TIMEOUT_MS);
    ck_assert_msg(status == 128 + SIGTERM,
                  "ps after SIGTERM: status %d, want %d (negative: died of the signal); logs:%s",
                  status, 128 + SIGTERM, report());
}
END_TEST

/* Workers started before the chief wait for it (and for the model). */
START_TEST(worker_waits_for_chief) {
    static const char *const sets[] = {"max_steps=1500", QUICK_SETS};
    set_job(sets, 1 + NUM_QUICK);
    pid_t ps = start_role("ps", 0, "ps", 0);
    pid_t worker = start_role("worker", 1, "worker1", 0);
    dt_test_sleep_ms(2000);
    ck_assert_msg(dt_test_alive(worker), "worker 1 gave up (%d) before the chief came; logs:%s",
                  dt_test_wait(worker, 0), report());
    ck_assert_msg(dt_test_alive(ps), "ps exited (%d) before the chief came; logs:%s",
                  dt_test_wait(ps, 0), report());
    pid_t chief = start_role("worker", 0, "chief", 0);
    pid_t pids[3] = {ps, chief, worker};
    const char *names[3] = {"ps", "chief", "worker 1"};
    expect_all_exit(pids, names, 3, JOB_TIMEOUT_MS, NULL, 0);
    check_final_ckpt(max_steps_of_job(), 1);
}
END_TEST

Suite *e2e_suite(void) {
    Suite *s = suite_create("e2e");
    TCase *tc = tcase_create("jobs");
    tcase_add_unchecked_fixture(tc, suite_setup, dt_test_tmp_end);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_test(tc, demo);
    tcase_add_test(tc, restart_chief);
    tcase_add_test(tc, fresh_cluster_restores);
    tcase_add_test(tc, keep_serving);
    tcase_add_test(tc, worker_waits_for_chief);
    suite_add_tcase(s, tc);
    return s;
}
