/*
 * job: one dtrain job run by real processes in a test's temp dir (see
 * job.h), built on proc's spawning, waiting and temp dirs.
 *
 * Every failure is a Check assertion, so it ends the test's process at
 * once; what the test started then dies with it (proc) and the suite's
 * temp dir is removed by the runner. Messages about the roles print their
 * logs on stderr and carry only a short pointer to them: Check refuses a
 * message longer than a few KiB.
 *
 * Single-threaded: a test drives its job from one thread.
 */
#include "testjob.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "data.h"
#include "lstsq.h"
#include "model.h"
#include "proc.h"

#define MAX_ARGS 32     /* of one command */
#define MAX_STDERR 2000 /* of a command's stderr quoted in a message */

/* ---- fixtures ---------------------------------------------------------------- */

/* The suite's temp dir, made in the runner's process: an unchecked fixture. */
static void suite_begin(void) {
    if (dt_test_tmp_begin() != 0) {
        const char *tmp = getenv("TMPDIR");
        fprintf(stderr, "test: cannot make the suite's temp dir in %s: %s\n",
                tmp && *tmp ? tmp : "/tmp", strerror(errno));
    }
}

TCase *dt_test_job_tcase(Suite *s, const char *name, int timeout_s, void (*setup)(void),
                         void (*teardown)(void)) {
    TCase *tc = tcase_create(name);
    tcase_add_unchecked_fixture(tc, suite_begin, dt_test_tmp_end);
    if (setup || teardown) tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, timeout_s);
    suite_add_tcase(s, tc);
    return tc;
}

void dt_test_job_setup(dt_test_job *j) {
    memset(j, 0, sizeof *j);
    j->dir = dt_test_tempdir();
    ck_assert_msg(j->dir != NULL, "cannot make a temp dir");
    ck_assert_msg(access(dt_test_bin(), X_OK) == 0,
                  "no executable dtrain at %s (set DTRAIN_BIN, or run `make test`)", dt_test_bin());
    snprintf(j->cluster, sizeof j->cluster, "%s/cluster.json", j->dir);
    snprintf(j->log_dir, sizeof j->log_dir, "%s/logs", j->dir);
}

void dt_test_job_teardown(dt_test_job *j) {
    dt_test_kill_all();
    dt_test_spawn_cwd(NULL);
    dt_test_tempdir_free(j->dir);
    j->dir = NULL;
    free(j->out);
    free(j->err);
    j->out = j->err = NULL;
}

void dt_test_job_cluster(dt_test_job *j, int num_ps, int num_workers) {
    ck_assert(num_ps >= 0 && num_workers >= 0 && num_ps + num_workers <= DT_TEST_JOB_MAX_ROLES);
    j->num_ps = num_ps;
    j->num_workers = num_workers;
    ck_assert_msg(dt_test_write_cluster(j->cluster, num_ps, num_workers, j->ports) == 0,
                  "cannot write %s", j->cluster);
}

void dt_test_job_set(dt_test_job *j, const char *const *sets, int n) {
    j->num_sets = 0;
    for (int i = 0; i < n; i++)
        dt_test_job_add_set(j, sets[i]);
}

void dt_test_job_add_set(dt_test_job *j, const char *set) {
    ck_assert_msg(j->num_sets < DT_TEST_JOB_MAX_SETS, "more than %d --set overrides",
                  DT_TEST_JOB_MAX_SETS);
    j->sets[j->num_sets++] = set;
}

/* ---- roles --------------------------------------------------------------------- */

/* " (<note>)" for a message, or "" without one. */
static const char *note_text(const dt_test_job *j) {
    static char text[128];
    if (!j->note || !*j->note) return "";
    snprintf(text, sizeof text, " (%s)", j->note);
    return text;
}

const char *dt_test_job_report(const dt_test_job *j) {
    static char text[192];
    if (!j->note || !*j->note) return dt_test_report_logs(j->dir);
    fprintf(stderr, "test: %s\n", j->note);
    snprintf(text, sizeof text, "%s%s", note_text(j), dt_test_report_logs(j->dir));
    return text;
}

void dt_test_job_log_path(const dt_test_job *j, const char *log_name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s.log", j->dir, log_name);
}

static pid_t start(dt_test_job *j, const char *job_name, int task, const char *log_name,
                   int keep_serving) {
    char task_text[16], path[1200];
    char *argv[16 + 2 * DT_TEST_JOB_MAX_SETS + DT_TEST_JOB_MAX_ARGS];
    int n = 0;
    snprintf(task_text, sizeof task_text, "%d", task);
    dt_test_job_log_path(j, log_name, path, sizeof path);
    argv[n++] = (char *)dt_test_bin();
    if (job_name) { /* else TF_CONFIG says who it is */
        argv[n++] = "--cluster";
        argv[n++] = j->cluster;
        argv[n++] = "--job-name";
        argv[n++] = (char *)job_name;
        argv[n++] = "--task-index";
        argv[n++] = task_text;
    }
    if (j->config) {
        argv[n++] = "--config";
        argv[n++] = (char *)j->config;
    }
    argv[n++] = "--log-dir";
    argv[n++] = j->log_dir;
    for (int i = 0; i < j->num_sets; i++) {
        argv[n++] = "--set";
        argv[n++] = (char *)j->sets[i];
    }
    for (int i = 0; i < j->num_args && i < DT_TEST_JOB_MAX_ARGS; i++)
        argv[n++] = (char *)j->args[i];
    if (keep_serving) argv[n++] = "--keep-serving";
    if (job_name && strcmp(job_name, "ps") == 0 && j->ps_flags)
        for (int i = 0; j->ps_flags[i] && n < (int)(sizeof argv / sizeof argv[0]) - 1; i++)
            argv[n++] = (char *)j->ps_flags[i];
    argv[n] = NULL;
    pid_t pid = dt_test_spawn(argv, path);
    ck_assert_msg(pid > 0, "cannot start %s %d", job_name ? job_name : log_name, task);
    return pid;
}

pid_t dt_test_job_start_tf(dt_test_job *j, const char *tf_config, const char *log_name) {
    ck_assert_int_eq(setenv("TF_CONFIG", tf_config, 1), 0);
    pid_t pid = start(j, NULL, 0, log_name, 0);
    unsetenv("TF_CONFIG");
    return pid;
}

pid_t dt_test_job_start(dt_test_job *j, const char *job_name, int task, const char *log_name) {
    return start(j, job_name, task, log_name, 0);
}

pid_t dt_test_job_start_serving(dt_test_job *j, const char *job_name, int task,
                                const char *log_name) {
    return start(j, job_name, task, log_name, 1);
}

void dt_test_job_run(dt_test_job *j, const char *tag, int timeout_ms) {
    pid_t pids[DT_TEST_JOB_MAX_ROLES];
    char name_text[DT_TEST_JOB_MAX_ROLES][32];
    const char *names[DT_TEST_JOB_MAX_ROLES];
    int n = 0;
    for (int p = 0; p < j->num_ps; p++, n++) {
        char log_name[64];
        snprintf(log_name, sizeof log_name, "ps%d%s", p, tag);
        snprintf(name_text[n], sizeof name_text[n], "ps %d", p);
        pids[n] = dt_test_job_start(j, "ps", p, log_name);
    }
    for (int k = 0; k < j->num_workers; k++, n++) {
        char log_name[64];
        if (k == 0) {
            snprintf(log_name, sizeof log_name, "chief%s", tag);
            snprintf(name_text[n], sizeof name_text[n], "chief");
        } else {
            snprintf(log_name, sizeof log_name, "worker%d%s", k, tag);
            snprintf(name_text[n], sizeof name_text[n], "worker %d", k);
        }
        pids[n] = dt_test_job_start(j, "worker", k, log_name);
    }
    for (int i = 0; i < n; i++)
        names[i] = name_text[i];
    dt_test_job_expect_done(j, pids, names, n, timeout_ms);
}

#define HOLD_MS 30000 /* for a stop to take: the kernel's, not the job's, speed */

void dt_test_job_hold(const dt_test_job *j, pid_t pid, const char *name) {
    ck_assert_msg(dt_test_kill(pid, SIGSTOP) == 0, "cannot stop %s (gone?); logs:%s", name,
                  dt_test_job_report(j));
    ck_assert_msg(dt_test_wait_stopped(pid, HOLD_MS), "%s did not stop; logs:%s", name,
                  dt_test_job_report(j));
}

void dt_test_job_release(const dt_test_job *j, pid_t pid, const char *name) {
    ck_assert_msg(dt_test_kill(pid, SIGCONT) == 0, "cannot continue %s (gone?); logs:%s", name,
                  dt_test_job_report(j));
}

/* Asserts that a role named name ended with status want (dt_test_wait's
 * result after `waited`, which says how long: "after 20 s"). */
static void check_status(const dt_test_job *j, const char *name, int status, int want,
                         const char *waited) {
    if (status == DT_TEST_TIMEOUT)
        ck_abort_msg("%s still running %s (killed); logs:%s", name, waited, dt_test_job_report(j));
    ck_assert_msg(status == want, "%s exited with %d, want %d (negative: signal); logs:%s", name,
                  status, want, dt_test_job_report(j));
}

void dt_test_job_expect_exit(const dt_test_job *j, pid_t pid, const char *name, int timeout_ms,
                             int want) {
    char waited[64];
    snprintf(waited, sizeof waited, "after %d s", timeout_ms / 1000);
    check_status(j, name, dt_test_wait(pid, timeout_ms), want, waited);
}

void dt_test_job_expect_done(const dt_test_job *j, const pid_t *pids, const char *const *names,
                             int n, int timeout_ms) {
    dt_test_job_expect_all(j, pids, names, n, 0, timeout_ms);
}

void dt_test_job_expect_all(const dt_test_job *j, const pid_t *pids, const char *const *names,
                            int n, int want, int timeout_ms) {
    long long deadline = dt_test_now_ms() + timeout_ms;
    int done[DT_TEST_JOB_MAX_ROLES] = {0}, left = n;
    int64_t newest = dt_test_ckpt_max(j->log_dir);
    char waited[64];
    snprintf(waited, sizeof waited, "%d s after the last new checkpoint", timeout_ms / 1000);
    ck_assert(n <= DT_TEST_JOB_MAX_ROLES);
    while (left > 0) {
        if (j->poll) j->poll(j->poll_arg);
        int64_t step = dt_test_ckpt_max(j->log_dir);
        if (step > newest) {
            newest = step;
            deadline = dt_test_now_ms() + timeout_ms;
        }
        /* Past the deadline dt_test_wait kills what still runs. */
        int late = dt_test_now_ms() >= deadline;
        for (int i = 0; i < n; i++) {
            if (done[i] || (!late && dt_test_alive(pids[i]))) continue;
            check_status(j, names[i], dt_test_wait(pids[i], 0), want, waited);
            done[i] = 1;
            left--;
        }
        if (left > 0) dt_test_sleep_ms(50);
    }
    if (j->poll) j->poll(j->poll_arg);
}

char *dt_test_job_read_log(const dt_test_job *j, const char *log_name) {
    char path[1200];
    dt_test_job_log_path(j, log_name, path, sizeof path);
    char *text = dt_test_read_file(path, NULL);
    ck_assert_msg(text != NULL, "no log %s", path);
    return text;
}

int dt_test_job_log_has(const dt_test_job *j, const char *log_name, const char *needle) {
    char *text = dt_test_job_read_log(j, log_name);
    int found = strstr(text, needle) != NULL;
    free(text);
    return found;
}

size_t dt_test_job_log_length(const dt_test_job *j, const char *log_name) {
    char *text = dt_test_job_read_log(j, log_name);
    size_t n = strlen(text);
    free(text);
    return n;
}

long long dt_test_job_local_steps(const dt_test_job *j, const char *log_name) {
    char *log = dt_test_job_read_log(j, log_name);
    const char *hit = strstr(log, "training done after ");
    long long n = -1;
    if (hit && sscanf(hit, "training done after %lld local steps", &n) != 1) n = -1;
    free(log);
    return n;
}

size_t dt_test_job_wait_log_after(const dt_test_job *j, const char *log_name, size_t from,
                                  const char *needle, pid_t pid, int timeout_ms) {
    long long deadline = dt_test_now_ms() + timeout_ms;
    for (;;) {
        int gone = !dt_test_alive(pid); /* before reading: a last line is still seen */
        char *text = dt_test_job_read_log(j, log_name);
        char *hit = strlen(text) > from ? strstr(text + from, needle) : NULL;
        char *eol = hit ? strchr(hit, '\n') : NULL;
        size_t past = eol ? (size_t)(eol + 1 - text) : 0;
        free(text);
        if (past) return past;
        if (gone || dt_test_now_ms() >= deadline) return 0;
        dt_test_sleep_ms(50); /* the poll interval of a bounded wait */
    }
}

int dt_test_job_wait_log(const dt_test_job *j, const char *log_name, const char *needle,
                         int timeout_ms, pid_t pid) {
    char path[1200];
    dt_test_job_log_path(j, log_name, path, sizeof path);
    return dt_test_wait_log(path, needle, timeout_ms, pid);
}

/* ---- commands ---------------------------------------------------------------------- */

/* The last MAX_STDERR bytes of text, to quote in a message. */
static const char *quote_tail(const char *text) {
    size_t n = strlen(text);
    return n > MAX_STDERR ? text + n - MAX_STDERR : text;
}

static char *read_or_empty(const char *path) {
    char *text = dt_test_read_file(path, NULL);
    if (!text) text = calloc(1, 1);
    ck_assert_msg(text != NULL, "out of memory");
    return text;
}

int dt_test_job_command(dt_test_job *j, const char *const *args, int timeout_ms) {
    char *argv[MAX_ARGS + 2];
    char out_path[1200], err_path[1200], line[512];
    int n = 0;
    size_t used = 0;
    line[0] = '\0';
    argv[n++] = (char *)dt_test_bin();
    for (; args[n - 1]; n++) {
        ck_assert_msg(n <= MAX_ARGS, "more than %d arguments", MAX_ARGS);
        argv[n] = (char *)args[n - 1];
        /* The command line for messages; a long one is cut short. */
        int k = snprintf(line + used, sizeof line - used, " %s", args[n - 1]);
        if (k > 0) used += (size_t)k < sizeof line - used ? (size_t)k : sizeof line - used - 1;
    }
    argv[n] = NULL;
    j->num_commands++;
    snprintf(out_path, sizeof out_path, "%s/cmd%d.out", j->dir, j->num_commands);
    snprintf(err_path, sizeof err_path, "%s/cmd%d.err", j->dir, j->num_commands);
    pid_t pid = dt_test_spawn_split(argv, out_path, err_path);
    ck_assert_msg(pid > 0, "cannot start dtrain%s", line);
    int status = dt_test_wait(pid, timeout_ms);
    free(j->out);
    free(j->err);
    j->out = read_or_empty(out_path);
    j->err = read_or_empty(err_path);
    ck_assert_msg(status != DT_TEST_TIMEOUT, "dtrain%s did not exit within %d s; stderr:\n%s", line,
                  timeout_ms / 1000, quote_tail(j->err));
    return status;
}

static const char *or_empty(const char *s) {
    return s ? s : "";
}

void dt_test_job_expect_error(const dt_test_job *j, int status, int want, const char *n1,
                              const char *n2, const char *n3) {
    ck_assert_msg(status == want, "exit status %d, want %d; stderr:\n%s", status, want,
                  quote_tail(j->err));
    ck_assert_msg(dt_test_line_has(j->err, n1, n2, n3, NULL),
                  "no stderr line naming [%s] [%s] [%s]; stderr:\n%s", or_empty(n1), or_empty(n2),
                  or_empty(n3), quote_tail(j->err));
}

/* ---- checkpoints in a log dir ------------------------------------------------------- */

int64_t dt_test_ckpt_step(const char *name) {
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

int64_t dt_test_ckpt_max(const char *log_dir) {
    int64_t best = -1;
    DIR *d = opendir(log_dir);
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t step = dt_test_ckpt_step(e->d_name);
        if (step > best) best = step;
    }
    closedir(d);
    return best;
}

int64_t dt_test_ckpt_wait_after(const char *log_dir, int64_t after, pid_t pid, int timeout_ms) {
    long long deadline = dt_test_now_ms() + timeout_ms;
    for (;;) {
        int64_t step = dt_test_ckpt_max(log_dir);
        if (step > after) return step;
        if (!dt_test_alive(pid) || dt_test_now_ms() >= deadline) return -1;
        dt_test_sleep_ms(50);
    }
}

int64_t dt_test_job_expect_ckpt_after(const dt_test_job *j, int64_t after, pid_t chief,
                                      int timeout_ms) {
    int64_t step = dt_test_ckpt_wait_after(j->log_dir, after, chief, timeout_ms);
    ck_assert_msg(step > after, "no checkpoint past step %" PRId64 " while the chief ran; logs:%s",
                  after, dt_test_job_report(j));
    return step;
}

/* ---- what the job learns --------------------------------------------------------------- */

void dt_test_job_config(const dt_test_job *j, dt_job *out) {
    dt_err err;
    dt_err_clear(&err);
    dt_job_defaults(out);
    if (j->config) ck_assert_msg(dt_job_load(j->config, out, &err) == 0, "%s", err.msg);
    for (int i = 0; i < j->num_sets; i++)
        ck_assert_msg(dt_job_set(out, j->sets[i], &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_job_finish(out, &err) == 0, "%s", err.msg);
}

int64_t dt_test_job_max_steps(const dt_test_job *j) {
    dt_job job;
    dt_test_job_config(j, &job);
    return job.max_steps;
}

void dt_test_job_closed_form(const dt_test_job *j, double *weight, double *bias) {
    dt_job job;
    dt_err err;
    dt_dataset *ds = NULL;
    dt_batch all;
    dt_err_clear(&err);
    dt_test_job_config(j, &job);
    ck_assert_msg(dt_job_open_data(&job, 0, 1, &ds, &err) == 0, "%s", err.msg);
    int rc = dt_data_all(ds, &all, &err);
    if (rc == 0) rc = dt_test_lstsq_line(&all, weight, bias, &err);
    dt_data_free(ds);
    ck_assert_msg(rc == 0, "%s", err.msg);
}

double dt_test_scalar(const dt_tensors *ts, const char *name, const char *path) {
    const dt_tensor *t = dt_tensors_find(ts, name);
    ck_assert_msg(t != NULL, "%s has no %s", path, name);
    ck_assert_msg(t->dtype == DT_DTYPE_F32 && dt_tensor_numel(t) == 1,
                  "%s: %s: dtype %d with %" PRId64 " elements, want one F32", path, name, t->dtype,
                  dt_tensor_numel(t));
    float v;
    memcpy(&v, t->data, sizeof v);
    return v;
}

int64_t dt_test_job_load_latest(const dt_test_job *j, int64_t min_step, dt_tensors *ts, char *path,
                                size_t path_cap) {
    dt_safetensors_meta meta;
    dt_err err;
    char where[2048];
    memset(ts, 0, sizeof *ts);
    dt_err_clear(&err);
    int rc = dt_ckpt_restore_latest(j->log_dir, ts, &meta, where, sizeof where, &err);
    ck_assert_msg(rc == 1, "no loadable checkpoint in %s (rc %d: %s); logs:%s", j->log_dir, rc,
                  err.msg, dt_test_job_report(j));
    dt_safetensors_meta_deinit(&meta);
    ck_assert_msg(meta.global_step >= min_step,
                  "latest checkpoint %s: global_step %" PRId64 " < %" PRId64 "; logs:%s", where,
                  meta.global_step, min_step, dt_test_job_report(j));
    if (path) snprintf(path, path_cap, "%s", where);
    return meta.global_step;
}

int64_t dt_test_job_check_latest(const dt_test_job *j, int64_t min_step, int check_fit) {
    dt_tensors ts;
    char path[2048];
    int64_t step = dt_test_job_load_latest(j, min_step, &ts, path, sizeof path);
    const dt_tensor *weight = dt_tensors_find(&ts, "linear/weight");
    ck_assert_msg(weight && weight->ndim == 2 && weight->shape[0] == 1 && weight->shape[1] == 1,
                  "%s: linear/weight missing or not [1,1]", path);
    double got_w = dt_test_scalar(&ts, "linear/weight", path),
           got_b = dt_test_scalar(&ts, "linear/bias", path);
    dt_tensors_deinit(&ts);
    if (check_fit) {
        double want_w, want_b;
        dt_test_job_closed_form(j, &want_w, &want_b);
        ck_assert_msg(got_w - want_w < DT_TEST_FIT_TOL && want_w - got_w < DT_TEST_FIT_TOL,
                      "%s: weight %.5f, closed form %.5f (step %" PRId64 ")%s", path, got_w, want_w,
                      step, note_text(j));
        ck_assert_msg(got_b - want_b < DT_TEST_FIT_TOL && want_b - got_b < DT_TEST_FIT_TOL,
                      "%s: bias %.5f, closed form %.5f (step %" PRId64 ")%s", path, got_b, want_b,
                      step, note_text(j));
    }
    return step;
}

/* ---- a Status client of the test's own ------------------------------------------------------ */

void dt_test_probe_open(dt_test_probe *p, const char *cluster_path, int timeout_ms) {
    dt_err err;
    dt_err_clear(&err);
    memset(p, 0, sizeof *p);
    ck_assert_msg(dt_cluster_load(cluster_path, &p->cluster, &err) == 0, "%s", err.msg);
    dt_tensors none; /* Status does not look at the model */
    memset(&none, 0, sizeof none);
    dt_ps_client_params params;
    memset(&params, 0, sizeof params);
    params.cluster = &p->cluster;
    params.worker = -1; /* a tool, not a worker */
    params.timeout_ms = timeout_ms;
    ck_assert_msg(dt_ps_client_new(&params, &none, &p->client, &err) == 0, "%s", err.msg);
}

void dt_test_probe_close(dt_test_probe *p) {
    dt_ps_client_free(p->client);
    p->client = NULL;
    dt_cluster_deinit(&p->cluster);
}

void dt_test_loopback_addr(dt_addr *a, int port) {
    memset(a, 0, sizeof *a);
    snprintf(a->host, sizeof a->host, "127.0.0.1");
    a->port = port;
    snprintf(a->addr, sizeof a->addr, "127.0.0.1:%d", port);
}
