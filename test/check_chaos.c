/*
 * Suite "chaos": one job (1 ps, the chief, worker 1) during which the test
 * SIGKILLs the chief, the worker and the ps (each at least once, in an
 * order and at moments drawn from a seed) and restarts each after a short
 * random pause. Then it checks what must survive any of that:
 *  - the job completes: the last instance of every role exits 0;
 *  - the model is right: the final checkpoint is at max_steps exactly and
 *    its line is within DT_TEST_FIT_TOL of the closed-form least-squares
 *    fit;
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
 *
 * At the job's end, passed or failed, one line sums it up for
 * scripts/chaos.sh, which runs the suite many times:
 *   chaos summary: seed=S kills=N faults=F max_steps=M final_step=X
 *   kills_ps=A kills_chief=B kills_worker=C double_kills=D mid_save_kills=E
 *   temp_left=T result=pass|fail
 * (kills: DT_CHAOS_KILLS; faults: how many were made before the job neared
 * its end; final_step: the final checkpoint's, or on a failure the latest
 * checkpoint seen written, -1 none).
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proc.h"
#include "ps_client.h"
#include "safetensors.h"
#include "suites.h"
#include "testjob.h"

#define DEFAULT_SEED 20240917ull
#define JOB_SECS 30            /* undisturbed length of the chaos job (DT_CHAOS_JOB_SECS) */
#define MIN_JOB_SECS 20        /* shorter, the job may near its end before the MUST faults */
#define CALIBRATE_MS 2000      /* rate measured over this long */
#define START_TIMEOUT_MS 60000 /* a role coming up, or back */
#define END_TIMEOUT_MS 120000  /* the rest of the job after the last fault */
#define EXIT_TIMEOUT_MS 20000
#define TEST_TIMEOUT_S 300 /* scripts/chaos.sh scales it for longer jobs */
#define DEFAULT_EVENTS 6   /* DT_CHAOS_KILLS overrides */
#define MAX_EVENTS 64
#define MAX_INSTANCES (MAX_EVENTS + 2)
#define TEMP_WAIT_MS 10000 /* a save's temporary file must appear by then */
#define CUTOFF 0.7         /* no kill past this fraction of max_steps */
#define MAX_WRITES 4096

enum { ROLE_PS, ROLE_CHIEF, ROLE_WORKER, NUM_ROLES };
static const char *const role_names[NUM_ROLES] = {"ps", "chief", "worker1"};

typedef struct {
    char max_steps_set[64]; /* the job's last --set */
    char seed_text[48];     /* "seed <n>": the job's note, named in failures */
    uint64_t seed;
    uint64_t rng;

    pid_t pid[NUM_ROLES];    /* current instance of each role */
    int instance[NUM_ROLES]; /* 1, 2, ...: its log is <role>-<instance>.log */
    int kills[NUM_ROLES];
    int64_t max_steps;
    int64_t final_step; /* the final checkpoint's, once checked; -1 before */
    int faults;         /* made so far */
    int double_kills;   /* the ps and the chief at once */
    int mid_save_kills; /* the chief as a save's temporary file appeared */
    int temp_left;      /* ... and that file was still there after the kill */
    /* Per chief instance: 0 when it started with the ps also down, so it
     * restores from the checkpoint instead of rejoining a live model. */
    int chief_rejoins[MAX_INSTANCES + 1];

    /* Status samples of ps 0. */
    dt_test_probe probe;
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

/* The job: temp dir, cluster file (1 ps, 2 workers), log dir, --sets. */
static dt_test_job job;
static chaos c;

/* The summary line's figures, in memory shared with the runner's process:
 * Check runs the test in a forked process that a failed assertion (or the
 * timeout) ends at once, so the runner prints the line after the test. */
typedef struct {
    int started; /* the knobs were read: the figures are this job's */
    int passed;  /* every check passed */
    uint64_t seed;
    int kills_asked, faults;
    int64_t max_steps, final_step;
    int kills[NUM_ROLES];
    int double_kills, mid_save_kills, temp_left;
} chaos_summary;
static chaos_summary *summary; /* NULL when it could not be mapped */

/* ---- fixture ----------------------------------------------------------- */

static void setup(void) {
    dt_test_job_setup(&job);
    memset(&c, 0, sizeof c);
    c.last_step = -1;
    c.final_step = -1;
}

static void teardown(void) {
    dt_test_job_teardown(&job);
    dt_test_probe_close(&c.probe);
}

/* Runner side, around the test (an unchecked fixture): maps the summary. */
static void summary_begin(void) {
    if (!summary) {
        void *p =
            mmap(NULL, sizeof *summary, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            fprintf(stderr, "chaos: no summary line: mmap: %s\n", strerror(errno));
        else
            summary = p;
    }
    if (summary) memset(summary, 0, sizeof *summary);
}

/* ... and prints the line once the test has ended, however it ended. */
static void summary_end(void) {
    if (!summary || !summary->started) return;
    const chaos_summary *s = summary;
    fprintf(stderr,
            "chaos summary: seed=%" PRIu64 " kills=%d faults=%d max_steps=%" PRId64
            " final_step=%" PRId64 " kills_ps=%d kills_chief=%d kills_worker=%d double_kills=%d"
            " mid_save_kills=%d temp_left=%d result=%s\n",
            s->seed, s->kills_asked, s->faults, s->max_steps, s->final_step, s->kills[ROLE_PS],
            s->kills[ROLE_CHIEF], s->kills[ROLE_WORKER], s->double_kills, s->mid_save_kills,
            s->temp_left, s->passed ? "pass" : "fail");
}

/* Test side: copies the figures so far into the summary. */
static void publish(void) {
    if (!summary || !summary->started) return;
    summary->faults = c.faults;
    summary->max_steps = c.max_steps;
    for (int r = 0; r < NUM_ROLES; r++)
        summary->kills[r] = c.kills[r];
    summary->double_kills = c.double_kills;
    summary->mid_save_kills = c.mid_save_kills;
    summary->temp_left = c.temp_left;
    int64_t latest = c.final_step;
    if (latest < 0 && c.max_steps > 0) /* the job's own writes, not calibration's */
        for (int i = 0; i < c.num_writes; i++)
            if (c.writes[i].step > latest) latest = c.writes[i].step;
    summary->final_step = latest;
}

/* ---- seeded randomness --------------------------------------------------- */

/* A decimal environment variable in [lo, hi], else fallback when unset. */
static uint64_t env_number(const char *name, uint64_t fallback, uint64_t lo, uint64_t hi) {
    const char *text = getenv(name);
    if (!text || !*text) return fallback;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    /* strtoull alone would take " 7", "+7", "-1" (as 2^64-1) and, clamped,
     * a number past 2^64. */
    int decimal = text[0] >= '0' && text[0] <= '9' && *end == '\0' && errno == 0;
    ck_assert_msg(decimal && v >= lo && v <= hi,
                  "%s=\"%s\" is not a decimal number from %llu to %llu", name, text,
                  (unsigned long long)lo, (unsigned long long)hi);
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

/* Prints the seed and the end of every role log to stderr and returns a
 * short pointer to it, naming the seed, for a failure message: Check's
 * message channel refuses long text. */
static const char *report(void) {
    return dt_test_job_report(&job); /* the job's note is the seed */
}

/* "<role>-<instance>": the log name of one instance of a role. Static. */
static const char *log_name(int role, int instance) {
    static char name[32];
    snprintf(name, sizeof name, "%s-%d", role_names[role], instance);
    return name;
}

/* The job's --sets, ending in max_steps_set (borrowed, like the others). */
static void set_job(const char *max_steps_set) {
    static const char *const sets[] = {"data=line",     "save_model_secs=1",
                                       "log_steps=500", "summary_steps=100",
                                       "examples=1000", "learning_rate=0.01"};
    dt_test_job_set(&job, sets, (int)(sizeof sets / sizeof sets[0]));
    dt_test_job_add_set(&job, max_steps_set);
}

/* Starts the next instance of a role of the job. */
static void start(int role) {
    c.instance[role]++;
    c.pid[role] = dt_test_job_start(&job, role == ROLE_PS ? "ps" : "worker",
                                    role == ROLE_WORKER ? 1 : 0, log_name(role, c.instance[role]));
}

/* ---- watching the job -------------------------------------------------- */

static int ts_before(const struct timespec *a, const struct timespec *b) {
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
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
    DIR *d = opendir(job.log_dir);
    if (!d) return;
    int first = c.num_writes;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t step = dt_test_ckpt_step(e->d_name);
        if (step < 0 || strlen(e->d_name) >= sizeof c.writes[0].name) continue;
        char path[2048];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", job.log_dir, e->d_name);
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
    if (dt_ps_client_status(c.probe.client, 0, &st, &err) < 0 || !st.ready) return;
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
    publish();
}

/* tick as the job's poll hook, while its end is awaited. */
static void tick_hook(void *arg) {
    (void)arg;
    tick();
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
    dt_test_job_log_path(&job, log_name(role, c.instance[role]), path, sizeof path);
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

/* Steps/s of this machine on this job: a short undisturbed run. */
static double calibrate(void) {
    /* Its own log dir, so the job starts from nothing. */
    snprintf(job.log_dir, sizeof job.log_dir, "%s/calibration", job.dir);
    set_job("max_steps=100000000");
    for (int r = 0; r < NUM_ROLES; r++)
        start(r);
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
        dt_test_job_log_path(&job, log_name(r, 1), path, sizeof path);
        unlink(path);
    }
    /* Forget what was seen of it: its checkpoints (tick scanned its log
     * dir) and its samples; the job's own log dir is next. */
    snprintf(job.log_dir, sizeof job.log_dir, "%s/logs", job.dir);
    c.num_writes = 0;
    c.incarnation = 0;
    c.last_step = -1;
    c.max_sampled = 0;
    c.num_samples = 0;
    ck_assert_msg(s2 > s1, "no progress while calibrating (%" PRId64 " -> %" PRId64 ")", s1, s2);
    return (double)(s2 - s1) * 1000.0 / (double)(t2 - t1);
}

/* ---- the test -------------------------------------------------------------- */

/* SIGKILLs the current instance of a role and reaps it. */
static void kill_role(int role) {
    if (role == ROLE_PS) {
        c.ckpt_at_ps_kill = dt_test_ckpt_max(job.log_dir);
        c.sampled_at_ps_kill = c.last_step;
    }
    ck_assert_msg(dt_test_kill(c.pid[role], SIGKILL) == 0, "cannot kill %s (seed %" PRIu64 ")",
                  role_names[role], c.seed);
    dt_test_job_expect_exit(&job, c.pid[role], log_name(role, c.instance[role]), EXIT_TIMEOUT_MS,
                            -SIGKILL);
    c.kills[role]++;
    publish();
}

/* Waits a seeded pause, as an operator's restart would, and returns it. */
static int pause_before_restart(void) {
    int pause = random_between(100, 1500);
    watch_for(pause);
    int64_t ckpt = dt_test_ckpt_max(job.log_dir);
    if (ckpt > c.ckpt_at_ps_kill) c.ckpt_at_ps_kill = ckpt; /* written meanwhile */
    return pause;
}

/* After restarts: each restarted role is back, and training goes on; only
 * then may the next fault come. */
static void wait_back(const int *restarted, uint64_t old_incarnation) {
    if (restarted[ROLE_PS]) {
        long long deadline = dt_test_now_ms() + START_TIMEOUT_MS;
        while (c.incarnation == old_incarnation) {
            ck_assert_msg(dt_test_now_ms() < deadline, "restarted ps never became ready; logs:%s",
                          report());
            expect_running();
            tick();
            dt_test_sleep_ms(50);
        }
    }
    if (restarted[ROLE_CHIEF]) wait_role_log(ROLE_CHIEF, "writing summaries to");
    if (restarted[ROLE_WORKER]) wait_role_log(ROLE_WORKER, ": step ");
    wait_step_past(c.last_step + 200, START_TIMEOUT_MS);
}

/* One role killed and restarted. */
static void kill_one(int role) {
    int64_t step_before = c.last_step;
    uint64_t old = c.incarnation;
    kill_role(role);
    int pause = pause_before_restart();
    fprintf(stderr, "chaos: killed %s-%d at step ~%" PRId64 "; restarted after %d ms\n",
            role_names[role], c.instance[role], step_before, pause);
    start(role);
    int restarted[NUM_ROLES] = {0};
    restarted[role] = 1;
    wait_back(restarted, old);
}

/* The ps and the chief at once: the restarted chief finds no live model and
 * restores the restarted ps from the latest checkpoint. */
static void kill_two(void) {
    int64_t step_before = c.last_step;
    uint64_t old = c.incarnation;
    kill_role(ROLE_PS);
    kill_role(ROLE_CHIEF);
    c.double_kills++;
    int pause = pause_before_restart();
    fprintf(stderr,
            "chaos: killed ps-%d and chief-%d at once at step ~%" PRId64
            "; restarted after %d ms\n",
            c.instance[ROLE_PS], c.instance[ROLE_CHIEF], step_before, pause);
    start(ROLE_PS);
    start(ROLE_CHIEF);
    c.chief_rejoins[c.instance[ROLE_CHIEF]] = 0;
    int restarted[NUM_ROLES] = {1, 1, 0};
    wait_back(restarted, old);
}

/* The chief, the moment a save creates its temporary file (a checkpoint's
 * or the state file's, as the seed picks): inotify reports the creation,
 * and the kill follows at once, so the chief dies mid-save or just after. */
static void kill_chief_mid_save(void) {
    const char *prefix = random_between(0, 1) ? "model.ckpt-" : "checkpoint.tmp.";
    int fd = inotify_init1(IN_CLOEXEC);
    ck_assert_msg(fd >= 0, "inotify_init1: %s", strerror(errno));
    ck_assert_msg(inotify_add_watch(fd, job.log_dir, IN_CREATE) >= 0, "inotify on %s: %s",
                  job.log_dir, strerror(errno));
    char temp[256] = "";
    long long deadline = dt_test_now_ms() + TEMP_WAIT_MS;
    while (!temp[0]) {
        long long left = deadline - dt_test_now_ms();
        ck_assert_msg(left > 0, "no %s*.tmp.* file in %s within %d ms; logs:%s", prefix,
                      job.log_dir, TEMP_WAIT_MS, report());
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, (int)left) <= 0) continue;
        char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
        ssize_t n = read(fd, buf, sizeof buf);
        for (ssize_t off = 0; off < n && !temp[0];) {
            const struct inotify_event *e = (const struct inotify_event *)(buf + off);
            if (e->len && strncmp(e->name, prefix, strlen(prefix)) == 0 &&
                strstr(e->name, ".tmp.") && strlen(e->name) < sizeof temp)
                memcpy(temp, e->name, strlen(e->name) + 1);
            off += (ssize_t)(sizeof *e + e->len);
        }
    }
    kill(c.pid[ROLE_CHIEF], SIGKILL); /* before anything else: the file may be half-written */
    close(fd);
    int64_t step_before = c.last_step;
    uint64_t old = c.incarnation;
    kill_role(ROLE_CHIEF); /* reaps it; a second SIGKILL is harmless */
    c.mid_save_kills++;
    char path[1500];
    snprintf(path, sizeof path, "%s/%s", job.log_dir, temp);
    struct stat st;
    int left_behind = stat(path, &st) == 0;
    c.temp_left += left_behind;
    int pause = pause_before_restart();
    fprintf(stderr,
            "chaos: killed chief-%d as it created %s (%s after the kill) at step ~%" PRId64
            "; restarted after %d ms\n",
            c.instance[ROLE_CHIEF], temp, left_behind ? "still there" : "gone", step_before, pause);
    start(ROLE_CHIEF);
    int restarted[NUM_ROLES] = {0, 1, 0};
    wait_back(restarted, old);
}

/* The "saved" steps of every chief instance, in order, never drop. */
static void check_chief_saves(int *num_saves) {
    int64_t last = -1;
    char where[64] = "";
    *num_saves = 0;
    for (int i = 1; i <= c.instance[ROLE_CHIEF]; i++) {
        char *log = dt_test_job_read_log(&job, log_name(ROLE_CHIEF, i));
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

/* Every checkpoint left loads, with its name's step, and is listed in the
 * state file, and there are no more than max_to_keep (retention leaves no
 * orphan behind the chiefs it killed); and every one seen written, in the
 * order of writing, has a step no lower than the last. */
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
    char state_path[1200];
    snprintf(state_path, sizeof state_path, "%s/checkpoint", job.log_dir);
    size_t state_len = 0;
    char *state = dt_test_read_file(state_path, &state_len);
    ck_assert_msg(state != NULL, "no state file %s", state_path);
    DIR *d = opendir(job.log_dir);
    ck_assert_msg(d != NULL, "no log dir %s", job.log_dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        /* A chief killed mid-save leaves a temporary file; the next one
         * removes it once it holds the lock. */
        ck_assert_msg(!strstr(e->d_name, ".tmp."), "temporary file %s left in the log dir",
                      e->d_name);
        int64_t step = dt_test_ckpt_step(e->d_name);
        if (step < 0) continue;
        char quoted[300];
        snprintf(quoted, sizeof quoted, "\"%s\"", e->d_name);
        ck_assert_msg(strstr(state, quoted), "%s is in the log dir, not in the state file:\n%s",
                      e->d_name, state);
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", job.log_dir, e->d_name);
        dt_tensors ts;
        dt_safetensors_meta meta;
        dt_err err;
        dt_err_clear(&err);
        memset(&ts, 0, sizeof ts);
        int rc = dt_safetensors_load(path, &ts, &meta, &err);
        ck_assert_msg(rc == 0, "%s does not load: %s", path, err.msg);
        dt_tensors_deinit(&ts);
        dt_safetensors_meta_deinit(&meta);
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
    free(state);
    ck_assert_msg(n >= 1, "no checkpoint left in %s", job.log_dir);
    dt_job config;
    dt_test_job_config(&job, &config);
    ck_assert_msg(n <= config.max_to_keep, "%d checkpoints left in %s, max_to_keep is %d", n,
                  job.log_dir, config.max_to_keep);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            ck_assert_msg(
                !(ts_before(&left[i].mtime, &left[j].mtime) && left[i].step > left[j].step),
                "checkpoint %" PRId64 " was written before checkpoint %" PRId64, left[i].step,
                left[j].step);
}

START_TEST(kill_everyone) {
    c.seed = env_number("DT_CHAOS_SEED", DEFAULT_SEED, 0, UINT64_MAX);
    int num_events = (int)env_number("DT_CHAOS_KILLS", DEFAULT_EVENTS, 5, MAX_EVENTS);
    int job_secs = (int)env_number("DT_CHAOS_JOB_SECS", JOB_SECS, MIN_JOB_SECS, 3600);
    c.rng = c.seed;
    snprintf(c.seed_text, sizeof c.seed_text, "seed %" PRIu64, c.seed);
    job.note = c.seed_text;
    fprintf(stderr,
            "chaos: seed %" PRIu64 " (set DT_CHAOS_SEED to repeat), %d faults, a job of %d s\n",
            c.seed, num_events, job_secs);
    if (summary) {
        summary->seed = c.seed;
        summary->kills_asked = num_events;
        summary->started = 1;
    }
    dt_test_job_cluster(&job, 1, 2);
    dt_test_probe_open(&c.probe, job.cluster, 2000);

    double rate = calibrate();
    c.max_steps = (int64_t)(rate * job_secs);
    if (c.max_steps < 5000) c.max_steps = 5000;
    snprintf(c.max_steps_set, sizeof c.max_steps_set, "max_steps=%" PRId64, c.max_steps);
    fprintf(stderr, "chaos: %.0f steps/s; %s\n", rate, c.max_steps_set);

    set_job(c.max_steps_set);
    for (int r = 0; r < NUM_ROLES; r++)
        start(r);
    wait_step_past(0, START_TIMEOUT_MS);

    /* Five faults that must all happen, in a seeded order of the roles:
     * each role killed alone, the chief mid-save, and the ps with the chief
     * at once; then seeded faults of any kind, while the job is far enough
     * from its end for a victim to come back. */
    int order[NUM_ROLES] = {ROLE_PS, ROLE_CHIEF, ROLE_WORKER};
    for (int i = NUM_ROLES - 1; i > 0; i--) {
        int j = random_between(0, i);
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = 0; i <= MAX_INSTANCES; i++)
        c.chief_rejoins[i] = 1;
    enum { KIND_PS, KIND_CHIEF, KIND_WORKER, KIND_MID_SAVE, KIND_TWO, NUM_KINDS, MUST = 5 };
    const int must[MUST] = {order[0], KIND_MID_SAVE, order[1], KIND_TWO, order[2]};
    for (int event = 0; event < num_events; event++) {
        watch_for(random_between(500, 2500));
        /* Near the end (or past it: the roles may be exiting) no one is
         * killed: a victim must have time to come back. */
        if (c.last_step >= (int64_t)(CUTOFF * (double)c.max_steps)) {
            ck_assert_msg(event >= MUST,
                          "the job neared its end (step %" PRId64 " of %" PRId64
                          ") before the %d faults that must happen; logs:%s",
                          c.last_step, c.max_steps, MUST, report());
            break;
        }
        expect_running();
        c.faults = event + 1; /* this one, from its first kill */
        int kind = event < MUST ? must[event] : random_between(0, NUM_KINDS - 1);
        if (kind == KIND_MID_SAVE)
            kill_chief_mid_save();
        else if (kind == KIND_TWO)
            kill_two();
        else
            kill_one(kind); /* the role kinds are the roles */
    }

    /* The rest of the job: every last instance exits 0, watched. */
    char names[NUM_ROLES][32];
    const char *name_of[NUM_ROLES];
    for (int r = 0; r < NUM_ROLES; r++) {
        snprintf(names[r], sizeof names[r], "%s", log_name(r, c.instance[r]));
        name_of[r] = names[r];
    }
    job.poll = tick_hook;
    /* A long job (DT_CHAOS_JOB_SECS) may have most of it left after the
     * last fault. */
    dt_test_job_expect_done(&job, c.pid, name_of, NUM_ROLES, END_TIMEOUT_MS + 2000 * job_secs);
    job.poll = NULL;
    fprintf(stderr,
            "chaos: done; kills: ps %d, chief %d (%d mid-save, %d of them with the temporary "
            "file left), worker %d, %d of the ps and the chief at once; %d samples, %d ps "
            "restarts seen, worst restore %" PRId64
            " steps below the last sample; %d checkpoint writes seen\n",
            c.kills[ROLE_PS], c.kills[ROLE_CHIEF], c.mid_save_kills, c.temp_left,
            c.kills[ROLE_WORKER], c.double_kills, c.num_samples, c.ps_restarts_seen,
            c.worst_regress, c.num_writes);

    for (int r = 0; r < NUM_ROLES; r++)
        ck_assert_msg(c.kills[r] >= 1, "%s was never killed", role_names[r]);
    ck_assert_msg(c.ps_restarts_seen == c.kills[ROLE_PS],
                  "%d ps kills but %d restored incarnations seen", c.kills[ROLE_PS],
                  c.ps_restarts_seen);

    /* Recovery as the contract says. */
    int restores = 0;
    for (int i = 1; i <= c.instance[ROLE_CHIEF]; i++) {
        char *log = dt_test_job_read_log(&job, log_name(ROLE_CHIEF, i));
        for (char *p = log; (p = strstr(p, "lost its model; restoring it")) != NULL; p++)
            restores++;
        if (i > 1 && c.chief_rejoins[i])
            ck_assert_msg(strstr(log, "ps already holds the model") != NULL,
                          "chief-%d did not rejoin the live model; logs:%s", i, report());
        free(log);
    }
    /* A ps killed with the chief is restored by the next chief's start,
     * not by a running chief noticing it. */
    ck_assert_msg(restores >= c.kills[ROLE_PS] - c.double_kills,
                  "%d ps kills (%d with the chief), %d restores logged by a running chief",
                  c.kills[ROLE_PS], c.double_kills, restores);
    ck_assert_msg(c.mid_save_kills >= 1 && c.double_kills >= 1,
                  "%d mid-save kills, %d double kills", c.mid_save_kills, c.double_kills);
    ck_assert_msg(
        dt_test_job_log_has(&job, log_name(ROLE_CHIEF, c.instance[ROLE_CHIEF]), "chief: job done"),
        "the last chief did not log the end; logs:%s", report());

    int saves = 0;
    check_chief_saves(&saves);
    ck_assert_msg(saves >= 3, "only %d checkpoints saved", saves);
    check_ckpt_files();

    /* The model: at max_steps exactly, fitting the data's line, and not
     * behind any step the ps answered. */
    int64_t final_step = dt_test_job_check_latest(&job, c.max_steps, 1);
    c.final_step = final_step;
    publish();
    ck_assert_msg(final_step == c.max_steps,
                  "final checkpoint at %" PRId64 ", the job's max_steps is %" PRId64 " (%s)",
                  final_step, c.max_steps, c.seed_text);
    ck_assert_msg(final_step >= c.max_sampled,
                  "final checkpoint at %" PRId64 " behind a sampled step %" PRId64 " (%s)",
                  final_step, c.max_sampled, c.seed_text);
    if (summary) summary->passed = 1;
}
END_TEST

Suite *chaos_suite(void) {
    Suite *s = suite_create("chaos");
    TCase *tc = dt_test_job_tcase(s, "kills", TEST_TIMEOUT_S, setup, teardown);
    tcase_add_unchecked_fixture(tc, summary_begin, summary_end);
    tcase_add_test(tc, kill_everyone);
    return s;
}
