/*
 * Suite "chaos": one job (1 ps, the chief, worker 1) during which the test
 * SIGKILLs the chief, the worker and the ps (each at least once, in an
 * order and at moments drawn from a seed) and restarts each after a short
 * random pause. Then it checks what must survive any of that:
 *  - the job completes: the last instance of every role exits 0;
 *  - the model is right: the final checkpoint is at or past max_steps and
 *    its line is within WEIGHT_TOL of the closed-form least-squares fit;
 *  - the global step never goes backwards: every Status sample of one ps
 *    incarnation is >= the one before; a restarted ps comes back no lower
 *    than the latest checkpoint written before the kill; the checkpoints,
 *    in the order they were written, and the chief logs' "saved" lines, in
 *    order, have non-decreasing steps;
 *  - every checkpoint left in the log dir loads, with the step its name says;
 *  - recovery is what the contract says: the chief logs restoring the ps
 *    after each ps kill, and a restarted chief rejoins the live model.
 *
 * Faults do not overlap: the next kill waits until the last victim is back
 * and training has moved on. (Two at once, e.g. a ps killed before a
 * restarted chief has rejoined, restore from the checkpoint alone, which may
 * be behind the last step the dead chief saw.)
 *
 * Repeatable: DT_CHAOS_SEED (decimal; default below) picks the schedule; it
 * is printed, and named in every failure. The job's length adapts to the
 * machine: a short calibration run measures steps/s, and max_steps is set
 * to about JOB_SECS of training, so the test takes about a minute on 2 cores
 * and stays bounded under the sanitizers.
 */
#include <check.h>
#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "cluster.h"
#include "data.h"
#include "model.h"
#include "proc.h"
#include "ps_client.h"
#include "suites.h"

#define DEFAULT_SEED 20240917ull
#define JOB_SECS 22            /* undisturbed length of the chaos job */
#define CALIBRATE_MS 2000      /* rate measured over this long */
#define START_TIMEOUT_MS 60000 /* a role coming up, or back */
#define END_TIMEOUT_MS 120000  /* the rest of the job after the last fault */
#define EXIT_TIMEOUT_MS 20000
#define TEST_TIMEOUT_S 300
#define WEIGHT_TOL 0.05
#define MAX_EVENTS 6
#define CUTOFF 0.7 /* no kill past this fraction of max_steps */
#define MAX_WRITES 4096
#define MAX_LOGS 32

enum { ROLE_PS, ROLE_CHIEF, ROLE_WORKER, NUM_ROLES };
static const char *const role_names[NUM_ROLES] = {"ps", "chief", "worker1"};

typedef struct {
    char dir[1024];     /* the test's temp dir: cluster file and role logs */
    char cluster[1100]; /* 1 ps, 2 workers */
    char log_dir[1100]; /* the chaos job's log dir */
    char max_steps_set[64];
    uint64_t seed;
    uint64_t rng;

    pid_t pid[NUM_ROLES];    /* current instance of each role */
    int instance[NUM_ROLES]; /* 1, 2, ...: its log is <role>-<instance>.log */
    int kills[NUM_ROLES];
    int64_t max_steps;

    /* Status samples of ps 0. */
    dt_cluster cl;
    dt_ps_client *probe;
    uint64_t incarnation; /* of the samples so far; 0 none */
    int64_t last_step;    /* last sample of that incarnation; -1 none */
    int64_t max_sampled;  /* over all samples */
    int num_samples;
    int64_t ckpt_at_ps_kill;    /* latest checkpoint when the ps was last killed */
    int64_t sampled_at_ps_kill; /* last sample before that kill */
    int ps_restarts_seen;       /* new incarnations met (after the first) */
    int64_t worst_regress;      /* largest drop of a restored ps below its last sample */

    /* Checkpoint files in order of appearance (a rewrite counts again). */
    struct ckpt_write {
        int64_t step;
        struct timespec mtime;
        char name[96];
    } writes[MAX_WRITES];
    int num_writes;
} chaos;

static char *tmp;
static chaos c;
static char report_buf[96];

/* ---- fixture ----------------------------------------------------------- */

static void suite_setup(void) {
    if (dt_test_tmp_begin() != 0) fprintf(stderr, "chaos: cannot make the suite's temp dir\n");
}

static void setup(void) {
    tmp = dt_test_tempdir();
    ck_assert_msg(tmp != NULL, "cannot make a temp dir");
    ck_assert_msg(access(dt_test_bin(), X_OK) == 0,
                  "no executable dtrain at %s (set DTRAIN_BIN, or run `make test`)", dt_test_bin());
    memset(&c, 0, sizeof c);
    snprintf(c.dir, sizeof c.dir, "%s", tmp);
    snprintf(c.cluster, sizeof c.cluster, "%s/cluster.json", tmp);
    c.last_step = -1;
}

static void teardown(void) {
    dt_test_kill_all();
    dt_ps_client_free(c.probe);
    c.probe = NULL;
    dt_cluster_deinit(&c.cl);
    dt_test_tempdir_free(tmp);
    tmp = NULL;
}

/* ---- seeded randomness --------------------------------------------------- */

static uint64_t env_seed(void) {
    const char *text = getenv("DT_CHAOS_SEED");
    if (!text || !*text) return DEFAULT_SEED;
    char *end = NULL;
    unsigned long long v = strtoull(text, &end, 10);
    ck_assert_msg(*end == '\0', "DT_CHAOS_SEED=\"%s\" is not a decimal number", text);
    return (uint64_t)v;
}

/* splitmix64: every draw depends only on the seed and the draws before. */
static uint64_t next_random(void) {
    uint64_t z = (c.rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static int random_between(int lo, int hi) {
    return lo + (int)(next_random() % (uint64_t)(hi - lo + 1));
}

/* ---- roles ----------------------------------------------------------------- */

/* Prints the end of every role log to stderr and returns a short pointer
 * to it for a failure message: Check's message channel refuses long text. */
static const char *report(void) {
    fprintf(stderr, "chaos: seed %" PRIu64 "; the role logs end:\n", c.seed);
    DIR *d = opendir(c.dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            size_t n = strlen(e->d_name);
            if (n < 5 || strcmp(e->d_name + n - 4, ".log") != 0) continue;
            char path[2048];
            snprintf(path, sizeof path, "%s/%s", c.dir, e->d_name);
            char *tail = dt_test_tail(path, 3000);
            fprintf(stderr, "== %s ==\n%s\n", e->d_name, tail ? tail : "(unreadable)");
            free(tail);
        }
        closedir(d);
    }
    snprintf(report_buf, sizeof report_buf, " (seed %" PRIu64 "; printed on stderr)", c.seed);
    return report_buf;
}

static void role_log(int role, int instance, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s-%d.log", c.dir, role_names[role], instance);
}

/* Starts the next instance of a role of the job in log_dir. */
static void start(int role, const char *log_dir, const char *max_steps_set) {
    static const char *const sets[] = {"save_model_secs=1", "log_steps=500", "summary_steps=100",
                                       "examples=1000", "learning_rate=0.01"};
    char path[1200];
    char *argv[32];
    int n = 0;
    c.instance[role]++;
    role_log(role, c.instance[role], path, sizeof path);
    argv[n++] = (char *)dt_test_bin();
    argv[n++] = "--cluster";
    argv[n++] = c.cluster;
    argv[n++] = "--job-name";
    argv[n++] = role == ROLE_PS ? "ps" : "worker";
    argv[n++] = "--task-index";
    argv[n++] = role == ROLE_WORKER ? "1" : "0";
    argv[n++] = "--log-dir";
    argv[n++] = (char *)log_dir;
    argv[n++] = "--set";
    argv[n++] = "data=line";
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        argv[n++] = "--set";
        argv[n++] = (char *)sets[i];
    }
    argv[n++] = "--set";
    argv[n++] = (char *)max_steps_set;
    argv[n] = NULL;
    c.pid[role] = dt_test_spawn(argv, path);
    ck_assert_msg(c.pid[role] > 0, "cannot start %s", role_names[role]);
}

static char *read_role_log(int role, int instance) {
    char path[1200];
    role_log(role, instance, path, sizeof path);
    char *text = dt_test_read_file(path, NULL);
    ck_assert_msg(text != NULL, "no log %s", path);
    return text;
}

static int role_log_has(int role, int instance, const char *needle) {
    char *text = read_role_log(role, instance);
    int found = strstr(text, needle) != NULL;
    free(text);
    return found;
}

/* ---- watching the job -------------------------------------------------- */

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

static int ts_before(const struct timespec *a, const struct timespec *b) {
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* Highest checkpoint step in the log dir now, or -1. */
static int64_t latest_ckpt(void) {
    int64_t best = -1;
    DIR *d = opendir(c.log_dir);
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t step = ckpt_step(e->d_name);
        if (step > best) best = step;
    }
    closedir(d);
    return best;
}

/* Orders the writes seen as they were made: by mtime, then step (two saves
 * can share a timestamp tick). The scans' order is not it: readdir's order
 * is arbitrary, and one scan can find several new files. */
static int write_cmp(const void *pa, const void *pb) {
    const struct ckpt_write *a = pa, *b = pb;
    if (ts_before(&a->mtime, &b->mtime)) return -1;
    if (ts_before(&b->mtime, &a->mtime)) return 1;
    return (a->step > b->step) - (a->step < b->step);
}

/* Records checkpoint files that are new, or rewritten since last seen. */
static void scan_ckpts(void) {
    DIR *d = opendir(c.log_dir);
    if (!d) return;
    int first = c.num_writes;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t step = ckpt_step(e->d_name);
        if (step < 0 || strlen(e->d_name) >= sizeof c.writes[0].name) continue;
        char path[2048];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", c.log_dir, e->d_name);
        if (stat(path, &st) != 0) continue; /* rotated away meanwhile */
        int known = 0;
        for (int i = first - 1; i >= 0 && !known; i--)
            if (strcmp(c.writes[i].name, e->d_name) == 0)
                known = !ts_before(&c.writes[i].mtime, &st.st_mtim);
        if (known || c.num_writes == MAX_WRITES) continue;
        c.writes[c.num_writes].step = step;
        c.writes[c.num_writes].mtime = st.st_mtim;
        memcpy(c.writes[c.num_writes].name, e->d_name, strlen(e->d_name) + 1); /* fits: checked */
        c.num_writes++;
    }
    closedir(d);
}

/* One Status sample of ps 0 (none while it is down or not ready). Within
 * one incarnation the step must never drop; a new incarnation must start
 * no lower than the checkpoint that existed when the ps was killed. */
static void sample(void) {
    dt_msg_status_resp st;
    dt_err err;
    dt_err_clear(&err);
    if (dt_ps_client_status(c.probe, 0, &st, &err) < 0 || !st.ready) return;
    c.num_samples++;
    if (st.incarnation != c.incarnation) {
        if (c.incarnation != 0) {
            c.ps_restarts_seen++;
            ck_assert_msg(st.global_step >= c.ckpt_at_ps_kill,
                          "restarted ps came back at global_step %" PRId64 ", behind checkpoint "
                          "%" PRId64 " written before the kill; logs:%s",
                          st.global_step, c.ckpt_at_ps_kill, report());
            int64_t drop = c.sampled_at_ps_kill - st.global_step;
            if (drop > c.worst_regress) c.worst_regress = drop;
        }
        c.incarnation = st.incarnation;
        c.last_step = -1;
    }
    ck_assert_msg(st.global_step >= c.last_step,
                  "global_step went back from %" PRId64 " to %" PRId64 " on one ps incarnation; "
                  "logs:%s",
                  c.last_step, st.global_step, report());
    c.last_step = st.global_step;
    if (st.global_step > c.max_sampled) c.max_sampled = st.global_step;
}

static void tick(void) {
    sample();
    scan_ckpts();
}

/* Sleeps ms while watching. */
static void watch_for(int ms) {
    long long deadline = dt_test_now_ms() + ms;
    for (;;) {
        tick();
        long long left = deadline - dt_test_now_ms();
        if (left <= 0) return;
        dt_test_sleep_ms(left < 50 ? (int)left : 50);
    }
}

/* Fails when a role that is not being killed has exited. */
static void expect_running(void) {
    for (int r = 0; r < NUM_ROLES; r++)
        ck_assert_msg(dt_test_alive(c.pid[r]),
                      "%s-%d exited (%d) in the middle of the job; "
                      "logs:%s",
                      role_names[r], c.instance[r], dt_test_wait(c.pid[r], 0), report());
}

/* Watches until the ps answers ready with a step past `past` (returns it). */
static int64_t wait_step_past(int64_t past, int timeout_ms) {
    long long deadline = dt_test_now_ms() + timeout_ms;
    for (;;) {
        tick();
        if (c.last_step > past) return c.last_step;
        ck_assert_msg(dt_test_now_ms() < deadline,
                      "global step did not pass %" PRId64 " within %d s (last sample %" PRId64
                      "); logs:%s",
                      past, timeout_ms / 1000, c.last_step, report());
        expect_running();
        dt_test_sleep_ms(50);
    }
}

/* Watches until the role's current log contains needle. */
static void wait_role_log(int role, const char *needle) {
    char path[1200];
    role_log(role, c.instance[role], path, sizeof path);
    long long deadline = dt_test_now_ms() + START_TIMEOUT_MS;
    for (;;) {
        tick();
        char *text = dt_test_read_file(path, NULL);
        int found = text && strstr(text, needle);
        free(text);
        if (found) return;
        ck_assert_msg(dt_test_now_ms() < deadline, "%s-%d never logged \"%s\"; logs:%s",
                      role_names[role], c.instance[role], needle, report());
        expect_running();
        dt_test_sleep_ms(50);
    }
}

/* ---- the job's numbers ------------------------------------------------- */

static void load_job(dt_job *job) {
    static const char *const sets[] = {"data=line", "examples=1000", "learning_rate=0.01"};
    dt_err err;
    dt_err_clear(&err);
    dt_job_defaults(job);
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        ck_assert_msg(dt_job_set(job, sets[i], &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_job_set(job, c.max_steps_set, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_job_finish(job, &err) == 0, "%s", err.msg);
}

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

static double scalar_of(const dt_tensors *ts, const char *name, const char *path) {
    const dt_tensor *t = dt_tensors_find(ts, name);
    ck_assert_msg(t && t->dtype == DT_DTYPE_F32 && dt_tensor_numel(t) == 1,
                  "%s: %s missing or not one F32 value", path, name);
    float v;
    memcpy(&v, t->data, sizeof v);
    return v;
}

/* Steps/s of this machine on this job: a short undisturbed run. */
static double calibrate(void) {
    char log_dir[1100];
    snprintf(log_dir, sizeof log_dir, "%s/calibration", c.dir);
    const char *forever = "max_steps=100000000";
    for (int r = 0; r < NUM_ROLES; r++)
        start(r, log_dir, forever);
    wait_step_past(0, START_TIMEOUT_MS);
    watch_for(500);
    int64_t s1 = c.last_step;
    long long t1 = dt_test_now_ms();
    watch_for(CALIBRATE_MS);
    int64_t s2 = c.last_step;
    long long t2 = dt_test_now_ms();
    dt_test_kill_all();
    for (int r = 0; r < NUM_ROLES; r++)
        c.instance[r] = 0;
    /* Remove the calibration's logs: the chaos run's names start at 1. */
    for (int r = 0; r < NUM_ROLES; r++) {
        char path[1200];
        role_log(r, 1, path, sizeof path);
        unlink(path);
    }
    c.incarnation = 0;
    c.last_step = -1;
    c.max_sampled = 0;
    c.num_samples = 0;
    ck_assert_msg(s2 > s1, "no progress while calibrating (%" PRId64 " -> %" PRId64 ")", s1, s2);
    return (double)(s2 - s1) * 1000.0 / (double)(t2 - t1);
}

/* ---- the test -------------------------------------------------------------- */

static void kill_and_restart(int role) {
    int64_t step_before = c.last_step;
    if (role == ROLE_PS) {
        c.ckpt_at_ps_kill = latest_ckpt();
        c.sampled_at_ps_kill = c.last_step;
    }
    ck_assert_msg(kill(c.pid[role], SIGKILL) == 0, "cannot kill %s", role_names[role]);
    int status = dt_test_wait(c.pid[role], EXIT_TIMEOUT_MS);
    ck_assert_msg(status == -SIGKILL, "%s-%d ended with %d, not by SIGKILL; logs:%s",
                  role_names[role], c.instance[role], status, report());
    c.kills[role]++;
    int pause = random_between(100, 1500);
    fprintf(stderr, "chaos: killed %s-%d at step ~%" PRId64 "; restart in %d ms\n",
            role_names[role], c.instance[role], step_before, pause);
    watch_for(pause);
    if (role == ROLE_PS) {
        int64_t ckpt = latest_ckpt();
        if (ckpt > c.ckpt_at_ps_kill) c.ckpt_at_ps_kill = ckpt; /* written meanwhile */
    }
    start(role, c.log_dir, c.max_steps_set);

    /* Back, and training on: only then may the next fault come. */
    if (role == ROLE_PS) {
        uint64_t old = c.incarnation;
        long long deadline = dt_test_now_ms() + START_TIMEOUT_MS;
        while (c.incarnation == old) {
            ck_assert_msg(dt_test_now_ms() < deadline, "restarted ps never became ready; logs:%s",
                          report());
            expect_running();
            tick();
            dt_test_sleep_ms(50);
        }
    } else if (role == ROLE_CHIEF) {
        wait_role_log(role, "writing summaries to");
    } else {
        wait_role_log(role, ": step ");
    }
    wait_step_past(c.last_step + 200, START_TIMEOUT_MS);
}

/* The "saved" steps of every chief instance, in order, never drop. */
static void check_chief_saves(int *num_saves) {
    int64_t last = -1;
    char where[64] = "";
    *num_saves = 0;
    for (int i = 1; i <= c.instance[ROLE_CHIEF]; i++) {
        char *log = read_role_log(ROLE_CHIEF, i);
        for (char *p = log; (p = strstr(p, "chief: saved ")) != NULL; p++) {
            char *g = strstr(p, "(global_step ");
            ck_assert_msg(g != NULL, "chief-%d: a \"saved\" line without its step", i);
            int64_t step = strtoll(g + strlen("(global_step "), NULL, 10);
            ck_assert_msg(step >= last,
                          "chief-%d saved step %" PRId64 " after %s saved %" PRId64 "; logs:%s", i,
                          step, where, last, report());
            last = step;
            snprintf(where, sizeof where, "chief-%d", i);
            (*num_saves)++;
        }
        free(log);
    }
}

/* Every checkpoint left loads, with its name's step; and every one seen
 * written, in the order of writing, has a step no lower than the last. */
static void check_ckpt_files(void) {
    qsort(c.writes, (size_t)c.num_writes, sizeof c.writes[0], write_cmp);
    for (int i = 1; i < c.num_writes; i++)
        ck_assert_msg(c.writes[i].step >= c.writes[i - 1].step,
                      "%s (mtime %lld.%09ld) was written after %s (mtime %lld.%09ld); logs:%s",
                      c.writes[i].name, (long long)c.writes[i].mtime.tv_sec,
                      c.writes[i].mtime.tv_nsec, c.writes[i - 1].name,
                      (long long)c.writes[i - 1].mtime.tv_sec, c.writes[i - 1].mtime.tv_nsec,
                      report());
    struct {
        int64_t step;
        struct timespec mtime;
    } left[64];
    int n = 0;
    DIR *d = opendir(c.log_dir);
    ck_assert_msg(d != NULL, "no log dir %s", c.log_dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        /* A chief killed mid-save leaves a temporary file; the next one
         * removes it once it holds the lock. */
        ck_assert_msg(!strstr(e->d_name, ".tmp."), "temporary file %s left in the log dir",
                      e->d_name);
        int64_t step = ckpt_step(e->d_name);
        if (step < 0) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", c.log_dir, e->d_name);
        dt_tensors ts;
        dt_ckpt_meta meta;
        dt_err err;
        dt_err_clear(&err);
        memset(&ts, 0, sizeof ts);
        int rc = dt_ckpt_load(path, &ts, &meta, &err);
        ck_assert_msg(rc == 0, "%s does not load: %s", path, err.msg);
        dt_tensors_deinit(&ts);
        ck_assert_msg(meta.global_step == step, "%s holds global_step %" PRId64, path,
                      meta.global_step);
        struct stat st;
        ck_assert_msg(stat(path, &st) == 0, "cannot stat %s", path);
        ck_assert(n < 64);
        left[n].step = step;
        left[n].mtime = st.st_mtim;
        n++;
    }
    closedir(d);
    ck_assert_msg(n >= 1, "no checkpoint left in %s", c.log_dir);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            ck_assert_msg(
                !(ts_before(&left[i].mtime, &left[j].mtime) && left[i].step > left[j].step),
                "checkpoint %" PRId64 " was written before checkpoint %" PRId64, left[i].step,
                left[j].step);
}

START_TEST(kill_everyone) {
    c.seed = env_seed();
    c.rng = c.seed;
    fprintf(stderr, "chaos: seed %" PRIu64 " (set DT_CHAOS_SEED to repeat)\n", c.seed);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_test_write_cluster(c.cluster, 1, 2, NULL), 0);
    ck_assert_msg(dt_cluster_load(c.cluster, &c.cl, &err) == 0, "%s", err.msg);
    dt_tensors none;
    memset(&none, 0, sizeof none);
    dt_ps_client_params params;
    memset(&params, 0, sizeof params);
    params.cluster = &c.cl;
    params.worker = -1; /* a tool, not a worker */
    params.timeout_ms = 2000;
    ck_assert_msg(dt_ps_client_new(&params, &none, &c.probe, &err) == 0, "%s", err.msg);

    double rate = calibrate();
    c.max_steps = (int64_t)(rate * JOB_SECS);
    if (c.max_steps < 5000) c.max_steps = 5000;
    snprintf(c.max_steps_set, sizeof c.max_steps_set, "max_steps=%" PRId64, c.max_steps);
    fprintf(stderr, "chaos: %.0f steps/s; %s\n", rate, c.max_steps_set);

    snprintf(c.log_dir, sizeof c.log_dir, "%s/logs", c.dir);
    for (int r = 0; r < NUM_ROLES; r++)
        start(r, c.log_dir, c.max_steps_set);
    wait_step_past(0, START_TIMEOUT_MS);

    /* Every role once, in a seeded order; then seeded victims while the
     * job is far enough from its end for a victim to come back. */
    int order[NUM_ROLES] = {ROLE_PS, ROLE_CHIEF, ROLE_WORKER};
    for (int i = NUM_ROLES - 1; i > 0; i--) {
        int j = random_between(0, i);
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int event = 0; event < MAX_EVENTS; event++) {
        int role = event < NUM_ROLES ? order[event] : random_between(0, NUM_ROLES - 1);
        watch_for(random_between(500, 2500));
        /* Near the end (or past it: the roles may be exiting) no one is
         * killed: a victim must have time to come back. */
        if (c.last_step >= (int64_t)(CUTOFF * (double)c.max_steps)) {
            ck_assert_msg(event >= NUM_ROLES,
                          "the job neared its end (step %" PRId64 " of %" PRId64
                          ") before every role was killed; logs:%s",
                          c.last_step, c.max_steps, report());
            break;
        }
        expect_running();
        kill_and_restart(role);
    }

    /* The rest of the job: every last instance exits 0. */
    long long deadline = dt_test_now_ms() + END_TIMEOUT_MS;
    for (int r = 0; r < NUM_ROLES; r++) {
        while (dt_test_alive(c.pid[r]) && dt_test_now_ms() < deadline) {
            tick();
            dt_test_sleep_ms(50);
        }
        int status = dt_test_wait(c.pid[r], 0);
        ck_assert_msg(status == 0, "%s-%d: status %d at the end (%d: still running); logs:%s",
                      role_names[r], c.instance[r], status, DT_TEST_TIMEOUT, report());
    }
    scan_ckpts();
    fprintf(stderr,
            "chaos: done; %d samples, %d ps restarts seen, worst restore %" PRId64
            " steps below the last sample; %d checkpoint writes seen\n",
            c.num_samples, c.ps_restarts_seen, c.worst_regress, c.num_writes);

    for (int r = 0; r < NUM_ROLES; r++)
        ck_assert_msg(c.kills[r] >= 1, "%s was never killed", role_names[r]);
    ck_assert_msg(c.ps_restarts_seen == c.kills[ROLE_PS],
                  "%d ps kills but %d restored incarnations seen", c.kills[ROLE_PS],
                  c.ps_restarts_seen);

    /* Recovery as the contract says. */
    int restores = 0;
    for (int i = 1; i <= c.instance[ROLE_CHIEF]; i++) {
        char *log = read_role_log(ROLE_CHIEF, i);
        for (char *p = log; (p = strstr(p, "lost its model; restoring it")) != NULL; p++)
            restores++;
        if (i > 1)
            ck_assert_msg(strstr(log, "ps already holds the model") != NULL,
                          "chief-%d did not rejoin the live model; logs:%s", i, report());
        free(log);
    }
    ck_assert_msg(restores >= c.kills[ROLE_PS], "%d ps kills, %d restores logged by the chief",
                  c.kills[ROLE_PS], restores);
    ck_assert_msg(role_log_has(ROLE_CHIEF, c.instance[ROLE_CHIEF], "chief: job done"),
                  "the last chief did not log the end; logs:%s", report());

    int saves = 0;
    check_chief_saves(&saves);
    ck_assert_msg(saves >= 3, "only %d checkpoints saved", saves);
    check_ckpt_files();

    /* The model. */
    dt_tensors ts;
    dt_ckpt_meta meta;
    char path[2048];
    memset(&ts, 0, sizeof ts);
    dt_err_clear(&err);
    int rc = dt_ckpt_restore_latest(c.log_dir, &ts, &meta, path, sizeof path, &err);
    ck_assert_msg(rc == 1, "no loadable checkpoint (rc %d: %s); logs:%s", rc, err.msg, report());
    ck_assert_msg(meta.global_step >= c.max_steps,
                  "final checkpoint %s at global_step %" PRId64 " < max_steps %" PRId64, path,
                  meta.global_step, c.max_steps);
    ck_assert_msg(meta.global_step >= c.max_sampled,
                  "final checkpoint at %" PRId64 " behind a sampled step %" PRId64,
                  meta.global_step, c.max_sampled);
    double got_w = scalar_of(&ts, "linear/weight", path),
           got_b = scalar_of(&ts, "linear/bias", path);
    dt_tensors_deinit(&ts);
    double want_w, want_b;
    closed_form(&want_w, &want_b);
    ck_assert_msg(got_w - want_w < WEIGHT_TOL && want_w - got_w < WEIGHT_TOL,
                  "weight %.5f, closed form %.5f (seed %" PRIu64 ")", got_w, want_w, c.seed);
    ck_assert_msg(got_b - want_b < WEIGHT_TOL && want_b - got_b < WEIGHT_TOL,
                  "bias %.5f, closed form %.5f (seed %" PRIu64 ")", got_b, want_b, c.seed);
}
END_TEST

Suite *chaos_suite(void) {
    Suite *s = suite_create("chaos");
    TCase *tc = tcase_create("kills");
    tcase_add_unchecked_fixture(tc, suite_setup, dt_test_tmp_end);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_test(tc, kill_everyone);
    suite_add_tcase(s, tc);
    return s;
}
