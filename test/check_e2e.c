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
#include <cJSON.h>
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

#include "proc.h"
#include "suites.h"
#include "testjob.h"
#include "tfrecord.h"

#define JOB_TIMEOUT_MS 60000 /* one short job (a few s), 2 cores, maybe under ASan */
#define LONG_JOB_TIMEOUT_MS 180000
#define EXIT_TIMEOUT_MS 20000 /* a role asked to stop */
#define TEST_TIMEOUT_S 420

/* The demo job shortened: checkpoints every second, summaries and progress
 * lines often enough to see. Two overrides keep the fit check honest rather
 * than lucky. Async workers pull the model toward their own shard's optimum,
 * and on 2 cores one worker may do most of the last steps: with the demo's
 * 100 examples the two shards' best biases differ by ~0.06, so examples=1000
 * (shards ~0.02 apart). And SGD's jitter around the optimum grows with the
 * rate; learning_rate=0.01 keeps it far inside DT_TEST_FIT_TOL while 1500 steps
 * are still ten time constants of the slowest direction. */
#define QUICK_SETS                                                                                 \
    "save_model_secs=1", "log_steps=100", "summary_steps=50", "examples=1000", "learning_rate=0.01"
#define NUM_QUICK 5

static dt_test_job w; /* 1 ps, the chief, worker 1 */

static void setup(void) {
    dt_test_job_setup(&w);
    dt_test_job_cluster(&w, 1, 2);
}

static void teardown(void) {
    dt_test_job_teardown(&w);
}

/* Checks every line of a role's log against the contract's format,
 * "<pid> <role> hh:mm:ss.mmm <D|I|W|E> message", with the role's letter
 * ('-' is allowed too: lines written before the role is known). */
static void check_log_format(const char *log_name, char role) {
    char *log = dt_test_job_read_log(&w, log_name);
    int lines = 0;
    for (char *line = log, *end; *line; line = end + (*end == '\n')) {
        end = strchr(line, '\n');
        if (!end) end = line + strlen(line);
        if (end == line) continue;
        lines++;
        const char *p = line;
        int ok = *p >= '1' && *p <= '9';
        while (ok && *p >= '0' && *p <= '9')
            p++;
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
/* 1 when text holds needle before any of the NULL-terminated others. */
static int comes_first(const char *text, const char *needle, const char *const *others) {
    const char *hit = strstr(text, needle);
    if (!hit) return 0;
    for (int i = 0; others[i]; i++) {
        const char *o = strstr(text, others[i]);
        if (o && o < hit) return 0;
    }
    return 1;
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

/* Adds the log dir's current checkpoints; new ones count toward min_new
 * unless this is the baseline scan. */
static void watch_scan(ckpt_watch *cw, int baseline) {
    DIR *d = opendir(w.log_dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t step = dt_test_ckpt_step(e->d_name);
        if (step < 0) continue;
        int known = 0;
        for (int i = 0; i < cw->num_seen && !known; i++)
            known = cw->seen[i] == step;
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

/* dt_test_job's poll hook while the roles run. */
static void watch_poll(void *arg) {
    watch_scan(arg, 0);
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
        while ((rc = dt_test_tfrecord_read(f, &data, &len, &err)) == 1)
            records++;
        free(data);
        fclose(f);
        ck_assert_msg(rc == 0, "%s: record %d: %s", path, records, err.msg);
        files++;
    }
    closedir(d);
    ck_assert_msg(files >= 1, "no events.out.tfevents.* in %s", w.log_dir);
    return records;
}

/* Has the waits for the roles scan the log dir into cw (NULL: stop). */
static void watch_during_waits(ckpt_watch *cw) {
    w.poll = cw ? watch_poll : NULL;
    w.poll_arg = cw;
}

/* Runs the job to its end (dt_test_job_run), watching its checkpoints
 * meanwhile when cw is not NULL. */
static void run_job(const char *tag, ckpt_watch *cw) {
    watch_during_waits(cw);
    dt_test_job_run(&w, tag, JOB_TIMEOUT_MS);
    watch_during_waits(NULL);
}

/* ---- the tests ----------------------------------------------------------- */

/* The demo: the job runs to its end, every role exits 0, and the model the
 * chief saved is the least-squares line. */
START_TEST(demo) {
    static const char *const sets[] = {"max_steps=1500", QUICK_SETS};
    dt_test_job_set(&w, sets, 1 + NUM_QUICK);
    run_job("", NULL);
    dt_test_job_check_latest(&w, dt_test_job_max_steps(&w), 1);
    int records = check_event_files();
    ck_assert_msg(records >= 3, "only %d event records", records);
    check_log_format("ps0", 'P');
    check_log_format("chief", 'C');
    check_log_format("worker1", 'W');
}
END_TEST

/* A Kubeflow-shaped cluster told only by TF_CONFIG: a "chief" job, one
 * "worker" (training task 1), one ps; no cluster file, no role flags. */
START_TEST(tf_config_chief_job) {
    static const char *const sets[] = {"max_steps=1500", QUICK_SETS};
    dt_test_job_set(&w, sets, 1 + NUM_QUICK);
    static const char *const roles[3][3] = {
        {"ps", "0", "ps0"}, {"chief", "0", "chief"}, {"worker", "0", "worker1"}};
    static const char *const names[3] = {"ps", "chief", "worker 0"};
    pid_t pids[3];
    for (int i = 0; i < 3; i++) {
        char tf[512];
        snprintf(tf, sizeof tf,
                 "{\"cluster\": {\"chief\": [\"127.0.0.1:%d\"], \"worker\": [\"127.0.0.1:%d\"], "
                 "\"ps\": [\"127.0.0.1:%d\"]}, \"task\": {\"type\": \"%s\", \"index\": %s}, "
                 "\"environment\": \"cloud\"}",
                 w.ports[1], w.ports[2], w.ports[0], roles[i][0], roles[i][1]);
        pids[i] = dt_test_job_start_tf(&w, tf, roles[i][2]);
    }
    dt_test_job_expect_done(&w, pids, names, 3, JOB_TIMEOUT_MS);
    dt_test_job_check_latest(&w, dt_test_job_max_steps(&w), 1);
    check_log_format("chief", 'C');
    check_log_format("worker1", 'W');
    ck_assert_msg(dt_test_job_log_has(&w, "worker1", "worker:1 "),
                  "TF's worker 0 is not training task 1; logs:%s", dt_test_job_report(&w));
}
END_TEST

/* Runs `dtrain args...` (NULL-terminated) and returns its status; w.out and
 * w.err get what it printed. */
static int command(const char *const *args) {
    return dt_test_job_command(&w, args, EXIT_TIMEOUT_MS);
}

/* `dtrain status --json` parsed (caller deletes); asserts its exit status. */
static cJSON *status_json(int want_status) {
    const char *args[] = {"status", "--cluster", w.cluster, "--json", NULL};
    int status = command(args);
    ck_assert_msg(status == want_status, "dtrain status exited %d, want %d; stderr: %s", status,
                  want_status, w.err);
    cJSON *j = cJSON_Parse(w.out);
    ck_assert_msg(j != NULL, "dtrain status --json printed no JSON: %s", w.out);
    return j;
}

static const char *json_str(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    ck_assert_msg(cJSON_IsString(v), "no string \"%s\"", key);
    return v->valuestring;
}

/* The ps's health and `dtrain status` through a job's life: NOT_SERVING and
 * "waiting for chief" before the chief, SERVING and "training" with both
 * workers seen while it trains, "unreachable" (exit 200) once it is over. */
START_TEST(health_and_status) {
    static const char *const sets[] = {"max_steps=60000", QUICK_SETS};
    dt_test_job_set(&w, sets, 1 + NUM_QUICK);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", w.ports[0]);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps0");
    ck_assert_msg(dt_test_job_wait_log(&w, "ps0", "serving", JOB_TIMEOUT_MS, ps),
                  "the ps did not start; logs:%s", dt_test_job_report(&w));
    const char *health[] = {"health", "--address", addr, NULL};
    ck_assert_int_eq(command(health), 0);
    ck_assert_msg(strstr(w.out, "NOT_SERVING"), "health before the chief: %s", w.out);
    const char *serving[] = {"health", "--address", addr, "--serving", NULL};
    ck_assert_int_eq(command(serving), 1);
    const char *unknown[] = {"health", "--address", addr, "--service", "x.Y", NULL};
    dt_test_job_expect_error(&w, command(unknown), 1, "NOT_FOUND", "unknown service \"x.Y\"", NULL);
    cJSON *j = status_json(0);
    ck_assert_str_eq(json_str(j, "state"), "waiting for chief");
    cJSON_Delete(j);

    /* Both workers stop themselves after their step 200 (their second
     * progress line, the first with a rate to make an ETA from;
     * DT_TEST_WORKER_STOP_AT, lib/worker.h) and are held so while
     * the ps is asked: the job is mid-training until they are let go,
     * however fast it runs. Before, they were held once worker 1's line
     * was seen, and a job faster than that wait could end first. */
    ck_assert_int_eq(setenv("DT_TEST_WORKER_STOP_AT", "200", 1), 0);
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1");
    ck_assert_int_eq(unsetenv("DT_TEST_WORKER_STOP_AT"), 0);
    ck_assert_msg(
        dt_test_wait_stopped(chief, JOB_TIMEOUT_MS) && dt_test_wait_stopped(worker, JOB_TIMEOUT_MS),
        "the chief and worker 1 did not stop at their step 200; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(dt_test_job_log_has(&w, "worker1", "% ETA "),
                  "no progress line with percent and ETA; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(command(serving) == 0 && strstr(w.out, " SERVING"),
                  "health while training: %s %s", w.out, w.err);
    j = status_json(0);
    ck_assert_str_eq(json_str(j, "state"), "training");
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(j, "workers");
    ck_assert_int_eq(cJSON_GetArraySize(ws), 2);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(j, "max_steps")->valuedouble, 60000);
    ck_assert(cJSON_GetObjectItemCaseSensitive(j, "global_step")->valuedouble > 0);
    cJSON_Delete(j);
    const char *text[] = {"status", "--cluster", w.cluster, NULL};
    ck_assert_int_eq(command(text), 0);
    ck_assert_msg(strstr(w.out, "job: training, global_step ") && strstr(w.out, " of 60000 (") &&
                      strstr(w.out, "workers seen: 2 of 2") && strstr(w.out, "  chief: "),
                  "dtrain status printed:\n%s", w.out);
    dt_test_job_release(&w, chief, "chief");
    dt_test_job_release(&w, worker, "worker 1");

    const pid_t pids[] = {ps, chief, worker};
    const char *const names[] = {"ps", "chief", "worker 1"};
    dt_test_job_expect_done(&w, pids, names, 3, LONG_JOB_TIMEOUT_MS);
    j = status_json(200);
    ck_assert_str_eq(json_str(j, "state"), "unreachable");
    cJSON_Delete(j);
    ck_assert_int_eq(command(health), 200);
    const char *bad[] = {"status", "--cluster", w.cluster, "--watch", "0", NULL};
    dt_test_job_expect_error(&w, command(bad), 2, "--watch", "\"0\"", NULL);
}
END_TEST

/* The pulls the ps of run `tag` served, from its exit line. */
static long long ps_pulls(const char *tag) {
    char log_name[64];
    snprintf(log_name, sizeof log_name, "ps0%s", tag);
    char *log = dt_test_job_read_log(&w, log_name);
    const char *p = strstr(log, " pulls; exiting");
    long long pulls = -1;
    if (p) {
        while (p > log && p[-1] >= '0' && p[-1] <= '9')
            p--;
        pulls = atoll(p);
    }
    free(log);
    ck_assert_msg(pulls >= 0, "no pull count in %s.log", log_name);
    return pulls;
}

/* Trains the one-worker job of sets in log dir `name` and loads its final
 * checkpoint into ts. */
static void train_one_worker(const char *name, const char *const *sets, int n, dt_tensors *ts) {
    snprintf(w.log_dir, sizeof w.log_dir, "%s/%s", w.dir, name);
    dt_test_job_set(&w, sets, n);
    dt_test_job_run(&w, name, JOB_TIMEOUT_MS);
    dt_test_job_load_latest(&w, dt_test_job_max_steps(&w), ts, NULL, 0);
}

/* With one worker the job is one sequence of steps, so the fused call (a
 * push that brings back the next step's variables) and Pull + Push must
 * give bit-identical models, in sync, async and bounded modes. */
START_TEST(fused_matches_separate) {
    static const char *const modes[] = {"mode=sync", "mode=async", "mode=bounded"};
    dt_test_job_cluster(&w, 1, 1);
    for (int m = 0; m < 3; m++) {
        const char *fused[] = {"max_steps=1200", modes[m], "fuse_push_pull=true",
                               "save_model_secs=30", "learning_rate=0.01"};
        const char *separate[] = {"max_steps=1200", modes[m], "fuse_push_pull=false",
                                  "save_model_secs=30", "learning_rate=0.01"};
        char a_name[32], b_name[32];
        snprintf(a_name, sizeof a_name, "fused%d", m);
        snprintf(b_name, sizeof b_name, "separate%d", m);
        dt_tensors a, b;
        train_one_worker(a_name, fused, 5, &a);
        train_one_worker(b_name, separate, 5, &b);
        ck_assert_int_eq(a.count, b.count);
        for (int i = 0; i < a.count; i++) {
            const dt_tensor *tb = dt_tensors_find(&b, a.items[i].name);
            ck_assert_msg(tb && tb->nbytes == a.items[i].nbytes, "%s: no twin", a.items[i].name);
            ck_assert_msg(memcmp(tb->data, a.items[i].data, tb->nbytes) == 0,
                          "%s: %s differs between fused and separate calls (%.9g vs %.9g)",
                          modes[m], a.items[i].name, (double)*(const float *)a.items[i].data,
                          (double)*(const float *)tb->data);
        }
        /* The fused run pulled once (its first step), the other every step. */
        long long pulls_a = ps_pulls(a_name), pulls_b = ps_pulls(b_name);
        ck_assert_msg(pulls_a >= 1 && pulls_a < 10, "%s: the fused run made %lld pulls", modes[m],
                      pulls_a);
        ck_assert_msg(pulls_b >= 1200, "%s: the separate run made %lld pulls", modes[m], pulls_b);
        dt_tensors_deinit(&a);
        dt_tensors_deinit(&b);
    }
}
END_TEST

/* The ps listens on every interface at its port: a cluster name that does
 * not resolve from the ps's own host (a Kubernetes service before its pod
 * is ready) does not keep it from serving, and probes reach it on
 * 127.0.0.1. --listen narrows it; it is for the ps only. */
START_TEST(ps_listens_everywhere) {
    char text[512], addr[64];
    snprintf(text, sizeof text,
             "{\"cluster\": {\"ps\": [\"ps-0.job.invalid:%d\"], \"worker\": [\"127.0.0.1:%d\"]}}\n",
             w.ports[0], w.ports[1]);
    ck_assert_int_eq(dt_test_write_file(w.cluster, text), 0);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps0");
    ck_assert_msg(dt_test_job_wait_log(&w, "ps0", "serving on 0.0.0.0:", JOB_TIMEOUT_MS, ps),
                  "the ps did not serve; logs:%s", dt_test_job_report(&w));
    snprintf(addr, sizeof addr, "127.0.0.1:%d", w.ports[0]);
    const char *health[] = {"health", "--address", addr, NULL};
    ck_assert_msg(command(health) == 0 && strstr(w.out, "NOT_SERVING"), "health: %s %s", w.out,
                  w.err);
    ck_assert_int_eq(dt_test_kill(ps, SIGTERM), 0);
    dt_test_job_expect_exit(&w, ps, "ps", EXIT_TIMEOUT_MS, 128 + SIGTERM);
    const char *worker_listen[] = {"--cluster", w.cluster,  "--job", "worker", "--task",
                                   "0",         "--listen", addr,    NULL};
    dt_test_job_expect_error(&w, command(worker_listen), 2, "--listen is for the ps", NULL, NULL);
    const char *bad_listen[] = {"--cluster", w.cluster,  "--job",   "ps", "--task",
                                "0",         "--listen", "nowhere", NULL};
    dt_test_job_expect_error(&w, command(bad_listen), 2, "--listen", "\"nowhere\"", NULL);
}
END_TEST

/* SIGKILL the chief mid-job and restart it: it rejoins the live ps, does not
 * re-initialize, and the job completes with a good model. */
START_TEST(restart_chief) {
    /* Long enough that the first timed checkpoint (1 s) comes mid-job at
     * one round trip per step (~10,000 steps/s here). */
    static const char *const sets[] = {"max_steps=60000", QUICK_SETS};
    dt_test_job_set(&w, sets, 1 + NUM_QUICK);
    const int64_t max_steps = dt_test_job_max_steps(&w);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1");

    /* A checkpoint past step 0 proves training is under way. */
    int64_t before = dt_test_job_expect_ckpt_after(&w, 0, chief, JOB_TIMEOUT_MS);
    /* Worker 1 is held from before the kill until the restarted chief has
     * rejoined: alone it could finish the job in between. */
    dt_test_job_hold(&w, worker, "worker 1");
    dt_test_job_hold(&w, chief, "chief");
    ck_assert_msg(before < max_steps,
                  "the job ended (step %" PRId64 ") before the kill; "
                  "raise max_steps",
                  before);
    ck_assert_int_eq(dt_test_kill(chief, SIGKILL), 0);
    dt_test_job_expect_exit(&w, chief, "killed chief", EXIT_TIMEOUT_MS, -SIGKILL);

    /* What a chief killed mid-save leaves: its next checkpoint's temp
     * file, named by its pid. The restarted chief removes it, and says so,
     * before it rejoins. */
    char stale[2048];
    snprintf(stale, sizeof stale, "%s/model.ckpt-%" PRId64 ".safetensors.tmp.%d", w.log_dir,
             before + 1, (int)chief);
    ck_assert_int_eq(dt_test_write_file(stale, "cut short"), 0);
    ckpt_watch cw;
    watch_begin(&cw);
    before = cw.max_seen;
    pid_t chief2 = dt_test_job_start(&w, "worker", 0, "chief2");
    ck_assert_msg(
        dt_test_job_wait_log(&w, "chief2", "ps already holds the model", JOB_TIMEOUT_MS, chief2),
        "the restarted chief did not rejoin the live ps; logs:%s", dt_test_job_report(&w));
    dt_test_job_release(&w, worker, "worker 1");
    pid_t pids[3] = {ps, chief2, worker};
    const char *names[3] = {"ps", "restarted chief", "worker 1"};
    watch_during_waits(&cw);
    dt_test_job_expect_done(&w, pids, names, 3, LONG_JOB_TIMEOUT_MS);
    watch_during_waits(NULL);

    char *log = dt_test_job_read_log(&w, "chief2");
    /* It rejoins the live model before it creates, restores or trains one. */
    static const char *const model_lines[] = {"initialized", "chief: restored", " step ", NULL};
    int live = comes_first(log, "ps already holds the model", model_lines);
    int removed = strstr(log, "checkpoint: removed stale ") != NULL;
    free(log);
    ck_assert_msg(live,
                  "restarted chief does not rejoin with \"ps already holds the model\" before "
                  "it makes a model; logs:%s",
                  dt_test_job_report(&w));
    ck_assert_msg(removed && access(stale, F_OK) != 0,
                  "the killed chief's temp file was not removed; logs:%s", dt_test_job_report(&w));
    /* Re-initializing would have reset the step: every checkpoint of the
     * restarted chief must be at or past the last one before the kill. */
    ck_assert_msg(cw.min_new != INT64_MAX, "restarted chief wrote no checkpoint");
    ck_assert_msg(cw.min_new >= before,
                  "restarted chief saved step %" PRId64 " < %" PRId64 " saved before the kill",
                  cw.min_new, before);
    int64_t final_step = dt_test_job_check_latest(&w, max_steps, 1);
    ck_assert_msg(final_step >= before, "final step %" PRId64 " < %" PRId64, final_step, before);
}
END_TEST

/* A new cluster on a finished job's log dir restores its latest checkpoint
 * and trains on from there. */
START_TEST(fresh_cluster_restores) {
    static const char *const first[] = {"max_steps=1500", QUICK_SETS};
    static const char *const second[] = {"max_steps=3000", QUICK_SETS};
    dt_test_job_set(&w, first, 1 + NUM_QUICK);
    run_job("", NULL);
    int64_t first_final = dt_test_job_check_latest(&w, dt_test_job_max_steps(&w), 0);

    /* New ports too: a new cluster, only the log dir is shared. */
    dt_test_job_cluster(&w, 1, 2);
    dt_test_job_set(&w, second, 1 + NUM_QUICK);
    ckpt_watch cw;
    watch_begin(&cw);
    run_job("2", &cw);

    char *log = dt_test_job_read_log(&w, "chief2");
    char step_text[32];
    snprintf(step_text, sizeof step_text, "%" PRId64, first_final);
    int restored = dt_test_line_has(log, "restored", step_text, NULL, NULL);
    free(log);
    ck_assert_msg(restored, "second chief has no line with \"restored\" and %s; logs:%s", step_text,
                  dt_test_job_report(&w));
    ck_assert_msg(cw.min_new != INT64_MAX, "second run wrote no new checkpoint");
    ck_assert_msg(cw.min_new > first_final,
                  "second run's first checkpoint is step %" PRId64 ", not past %" PRId64,
                  cw.min_new, first_final);
    dt_test_job_check_latest(&w, dt_test_job_max_steps(&w), 1);
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
    dt_test_job_set(&w, sets, 1 + NUM_QUICK);
    pid_t ps = dt_test_job_start_serving(&w, "ps", 0, "ps");
    pid_t pids[2] = {dt_test_job_start(&w, "worker", 0, "chief"),
                     dt_test_job_start(&w, "worker", 1, "worker1")};
    const char *names[2] = {"chief", "worker 1"};
    dt_test_job_expect_done(&w, pids, names, 2, JOB_TIMEOUT_MS);
    dt_test_job_check_latest(&w, dt_test_job_max_steps(&w), 0);

    /* Where a ps without the flag would exit, this one says it serves on. */
    ck_assert_msg(
        dt_test_job_wait_log(&w, "ps", "--keep-serving: still serving", JOB_TIMEOUT_MS, ps),
        "ps never said it keeps serving; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(dt_test_alive(ps), "ps with --keep-serving exited (%d) after the job; logs:%s",
                  dt_test_wait(ps, 0), dt_test_job_report(&w));
    ck_assert_msg(port_open(w.ports[0]), "ps with --keep-serving no longer listens on %d",
                  w.ports[0]);
    ck_assert_int_eq(dt_test_kill(ps, SIGTERM), 0);
    dt_test_job_expect_exit(&w, ps, "ps after SIGTERM", EXIT_TIMEOUT_MS, 128 + SIGTERM);
}
END_TEST

/* Workers started before the chief wait for it (and for the model). */
START_TEST(worker_waits_for_chief) {
    static const char *const sets[] = {"max_steps=1500", QUICK_SETS};
    dt_test_job_set(&w, sets, 1 + NUM_QUICK);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps");
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1");
    /* Told "not ready" by the ps, it says it waits (and goes on asking). */
    ck_assert_msg(dt_test_job_wait_log(&w, "worker1", ": waiting for ", JOB_TIMEOUT_MS, worker),
                  "worker 1 never said it waits for the model; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(dt_test_alive(worker), "worker 1 gave up (%d) before the chief came; logs:%s",
                  dt_test_wait(worker, 0), dt_test_job_report(&w));
    ck_assert_msg(dt_test_alive(ps), "ps exited (%d) before the chief came; logs:%s",
                  dt_test_wait(ps, 0), dt_test_job_report(&w));
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    pid_t pids[3] = {ps, chief, worker};
    const char *names[3] = {"ps", "chief", "worker 1"};
    dt_test_job_expect_done(&w, pids, names, 3, JOB_TIMEOUT_MS);
    dt_test_job_check_latest(&w, dt_test_job_max_steps(&w), 1);
}
END_TEST

/* 1 when a progress line of the log ("step S global_step G") has G > S:
 * another worker's pushes came between this one's. */
static int shares_global_step(const char *log_name) {
    char *log = dt_test_job_read_log(&w, log_name);
    int shared = 0;
    for (const char *p = log; !shared && (p = strstr(p, ": step ")) != NULL; p++) {
        long long step = 0, global = 0;
        if (sscanf(p, ": step %lld global_step %lld", &step, &global) == 2) shared = global > step;
    }
    free(log);
    return shared;
}

/* The demo as it is (its job, its 2000 steps, all three roles started at
 * once): both workers train and share the global step. Worker 1 used to
 * find the job over: its first retry came 0.6 s after the ps refused it,
 * and the chief makes 2000 steps in a fifth of that. The share each makes
 * is printed, not asserted (the machine decides it). */
START_TEST(demo_both_workers_train) {
    dt_test_job_set(&w, NULL, 0);
    dt_test_job_run(&w, "", JOB_TIMEOUT_MS);
    const int64_t max_steps = dt_test_job_max_steps(&w);
    ck_assert_int_eq(dt_test_job_check_latest(&w, max_steps, 0), max_steps);
    long long chief = dt_test_job_local_steps(&w, "chief"),
              worker = dt_test_job_local_steps(&w, "worker1");
    fprintf(stderr, "demo_both_workers_train: chief %lld, worker 1 %lld of %lld steps\n", chief,
            worker, (long long)max_steps);
    ck_assert_msg(worker >= 1, "worker 1 made %lld steps of %lld (the chief %lld); logs:%s", worker,
                  (long long)max_steps, chief, dt_test_job_report(&w));
    ck_assert_msg(chief >= 1 && chief < max_steps, "the chief made %lld steps of %lld; logs:%s",
                  chief, (long long)max_steps, dt_test_job_report(&w));
    ck_assert_msg(shares_global_step("worker1") && shares_global_step("chief"),
                  "the progress lines do not interleave global steps; logs:%s",
                  dt_test_job_report(&w));
}
END_TEST

Suite *e2e_suite(void) {
    Suite *s = suite_create("e2e");
    TCase *tc = dt_test_job_tcase(s, "jobs", TEST_TIMEOUT_S, setup, teardown);
    tcase_add_test(tc, demo);
    tcase_add_test(tc, demo_both_workers_train);
    tcase_add_test(tc, tf_config_chief_job);
    tcase_add_test(tc, health_and_status);
    tcase_add_test(tc, fused_matches_separate);
    tcase_add_test(tc, ps_listens_everywhere);
    tcase_add_test(tc, restart_chief);
    tcase_add_test(tc, fresh_cluster_restores);
    tcase_add_test(tc, keep_serving);
    tcase_add_test(tc, worker_waits_for_chief);
    return s;
}
