/*
 * testjob: a dtrain job run by real processes in a test's temp dir, for the
 * integration suites. A dt_test_job holds the temp dir, a cluster file on
 * free loopback ports, the job's log dir, its --set overrides and an
 * optional --config file; every role or command it starts logs to
 * <dir>/<name>.log (commands: <dir>/cmd<N>.out and .err).
 *
 * Around that: the Check boilerplate of such a suite, waiting for roles to
 * exit with a status, the checkpoints in a log dir, the job config the
 * roles run and the least-squares line of its data, and a Status client of
 * the test's own. Failures are Check assertions; each one that concerns
 * the roles prints their logs' ends on stderr (dt_test_report_logs) and
 * says so in its message.
 *
 * Single-threaded, like proc: one test process drives its job.
 */
#ifndef DT_TEST_JOB_H
#define DT_TEST_JOB_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cluster.h"
#include "job.h"
#include "ps_client.h"
#include "tensor.h"

#define DT_TEST_JOB_MAX_ROLES 8 /* ps tasks + workers of one cluster */
#define DT_TEST_JOB_MAX_SETS 24
#define DT_TEST_JOB_MAX_ARGS 8
/* How far a trained line may be from the closed-form fit of its data. */
#define DT_TEST_FIT_TOL 0.05

typedef struct {
    char *dir;          /* the test's temp dir (dt_test_tempdir); NULL before setup */
    char cluster[1100]; /* <dir>/cluster.json, written by dt_test_job_cluster */
    char log_dir[1100]; /* <dir>/logs: every role's --log-dir */
    const char *config; /* --config for every role, or NULL (borrowed) */
    int num_ps, num_workers;
    int ports[DT_TEST_JOB_MAX_ROLES];       /* the cluster's: ps first, then workers */
    const char *sets[DT_TEST_JOB_MAX_SETS]; /* --set overrides (borrowed) */
    int num_sets;
    /* Flags every role is started with after the --set overrides, e.g.
     * "--log-format", "json" (borrowed). */
    const char *args[DT_TEST_JOB_MAX_ARGS];
    int num_args;
    /* When set, called between polls while dt_test_job_expect_done (and
     * so dt_test_job_run) waits, and once after: e.g. to watch the log dir
     * while the roles run. */
    void (*poll)(void *arg);
    void *poll_arg;
    /* When set, a short text (e.g. "seed 42") that dt_test_job_report prints
     * first and that the failure messages about the roles and the fit name:
     * what a reader needs to repeat a run (borrowed). */
    const char *note;
    /* When set, more flags for every ps started (NULL-terminated, borrowed). */
    const char *const *ps_flags;
    /* The last dt_test_job_command: what it printed (heap, "" when nothing). */
    char *out, *err;
    int num_commands;
} dt_test_job;

/* ---- fixtures -------------------------------------------------------------- */

/* A TCase added to s for tests that run jobs: the suite's temp dir made and
 * removed around it (dt_test_tmp_begin/end), setup and teardown as its
 * checked fixture (either may be NULL), and a timeout. */
TCase *dt_test_job_tcase(Suite *s, const char *name, int timeout_s, void (*setup)(void),
                         void (*teardown)(void));
/* Makes the test's temp dir and sets j up in it, without a cluster file;
 * asserts that dt_test_bin() is an executable. */
void dt_test_job_setup(dt_test_job *j);
/* Stops every process the test started, removes the temp dir, frees j's
 * command output. */
void dt_test_job_teardown(dt_test_job *j);

/* Writes a new cluster file on new free ports: num_ps ps tasks and
 * num_workers workers. */
void dt_test_job_cluster(dt_test_job *j, int num_ps, int num_workers);
/* Replaces the --set overrides with the n of sets (borrowed). */
void dt_test_job_set(dt_test_job *j, const char *const *sets, int n);
/* Appends one --set override (borrowed). */
void dt_test_job_add_set(dt_test_job *j, const char *set);

/* ---- roles ------------------------------------------------------------------ */

/* Starts a role of the job (job_name "ps" or "worker", task index) with its
 * output in <dir>/<log_name>.log; asserts it started. Returns its pid. */
pid_t dt_test_job_start(dt_test_job *j, const char *job_name, int task, const char *log_name);
/* The same with --keep-serving. */
pid_t dt_test_job_start_serving(dt_test_job *j, const char *job_name, int task,
                                const char *log_name);
/* Starts a role told who it is by TF_CONFIG (the text given), with no
 * --cluster, --job-name or --task-index; the rest as dt_test_job_start. */
pid_t dt_test_job_start_tf(dt_test_job *j, const char *tf_config, const char *log_name);
/* Runs the whole job on the cluster: every ps (logs ps<k><tag>), the chief
 * (chief<tag>) and the other workers (worker<k><tag>); asserts that all exit
 * 0 within timeout_ms. */
void dt_test_job_run(dt_test_job *j, const char *tag, int timeout_ms);

/* Holds a running role: SIGSTOP to its process group, then waits until it
 * is stopped (asserts it is, within 30 s). A held role makes no step and no
 * call, so a job cannot end, or move past the point where the test acts,
 * however fast the machine runs it: a fault that must land mid-job is made
 * while the workers are held. Its clocks run on; a signal sent to it is
 * taken once it is released. */
void dt_test_job_hold(const dt_test_job *j, pid_t pid, const char *name);
/* SIGCONT to a held role's process group (asserts it was sent). */
void dt_test_job_release(const dt_test_job *j, pid_t pid, const char *name);

/* Waits up to timeout_ms for pid and asserts its exit status is want
 * (negative: killed by that signal). name says who it is in the message. */
void dt_test_job_expect_exit(const dt_test_job *j, pid_t pid, const char *name, int timeout_ms,
                             int want);
/* Waits for every pid to exit 0 within one deadline of timeout_ms; fails as
 * soon as one exits otherwise, or at the deadline naming the first one still
 * running (all left are then killed). A new checkpoint in the job's log dir
 * moves the deadline to timeout_ms from then: a job still saving newer
 * steps is training, however slowly the machine runs it (a sanitizer build
 * under load); one that stops making them is what the deadline catches. The
 * test case's own timeout bounds the whole. */
void dt_test_job_expect_done(const dt_test_job *j, const pid_t *pids, const char *const *names,
                             int n, int timeout_ms);
/* The same, each one exiting with status want. */
void dt_test_job_expect_all(const dt_test_job *j, const pid_t *pids, const char *const *names,
                            int n, int want, int timeout_ms);

/* Prints j->note (when set) and the end of every role log on stderr;
 * returns a short text for a failure message that names the note (see
 * dt_test_report_logs). */
const char *dt_test_job_report(const dt_test_job *j);
/* <dir>/<log_name>.log into buf. */
void dt_test_job_log_path(const dt_test_job *j, const char *log_name, char *buf, size_t cap);
/* A role's whole log (heap, caller frees); asserts it exists. */
char *dt_test_job_read_log(const dt_test_job *j, const char *log_name);
/* 1 when a role's log holds needle (asserts the log exists). */
int dt_test_job_log_has(const dt_test_job *j, const char *log_name, const char *needle);
/* dt_test_wait_log on a role's log: 1 once it holds needle; 0 after
 * timeout_ms, or once pid (when > 0) has exited without writing it. */
int dt_test_job_wait_log(const dt_test_job *j, const char *log_name, const char *needle,
                         int timeout_ms, pid_t pid);

/* Bytes in a role's log now (asserts the log exists). */
size_t dt_test_job_log_length(const dt_test_job *j, const char *log_name);
/* The local steps a worker's log says it made ("training done after N
 * local steps"), or -1. */
long long dt_test_job_local_steps(const dt_test_job *j, const char *log_name);
/* Waits up to timeout_ms for needle in a role's log past its first `from`
 * bytes (what was there before an event). Returns the offset just past the
 * line that holds it, or 0 after the deadline or once pid has exited
 * without writing it. */
size_t dt_test_job_wait_log_after(const dt_test_job *j, const char *log_name, size_t from,
                                  const char *needle, pid_t pid, int timeout_ms);

/* ---- commands ----------------------------------------------------------------- */

/* Runs dt_test_bin() with args (NULL-terminated, without argv[0]) in the
 * foreground and returns its exit status; j->out and j->err get what it
 * printed. Asserts that it started and exited within timeout_ms. */
int dt_test_job_command(dt_test_job *j, const char *const *args, int timeout_ms);
/* Asserts that the last command's status is want and that one line of its
 * stderr holds every non-NULL needle. */
void dt_test_job_expect_error(const dt_test_job *j, int status, int want, const char *n1,
                              const char *n2, const char *n3);

/* ---- checkpoints in a log dir ----------------------------------------------------- */

/* "model.ckpt-<step>.safetensors" -> step; -1 for any other name (temporary
 * files included). */
int64_t dt_test_ckpt_step(const char *name);
/* The highest checkpoint step in log_dir now, or -1. */
int64_t dt_test_ckpt_max(const char *log_dir);
/* Waits until log_dir holds a checkpoint past `after` and returns its step;
 * -1 once pid has exited or timeout_ms passed first. */
int64_t dt_test_ckpt_wait_after(const char *log_dir, int64_t after, pid_t pid, int timeout_ms);

/* dt_test_ckpt_wait_after on the job's log dir, asserting that a
 * checkpoint past `after` comes while the chief (pid) runs. Returns its
 * step. */
int64_t dt_test_job_expect_ckpt_after(const dt_test_job *j, int64_t after, pid_t chief,
                                      int timeout_ms);

/* ---- what the job learns ------------------------------------------------------------ */

/* The job the roles run: the defaults, then j->config, then the --set
 * overrides; asserts that it is valid. */
void dt_test_job_config(const dt_test_job *j, dt_job *out);
int64_t dt_test_job_max_steps(const dt_test_job *j);
/* The closed-form least-squares line of the job's whole data set. */
void dt_test_job_closed_form(const dt_test_job *j, double *weight, double *bias);
/* The value of a one-element F32 tensor; asserts that it is one. path names
 * where ts came from in the message. */
double dt_test_scalar(const dt_tensors *ts, const char *name, const char *path);
/* Loads the latest checkpoint of the log dir into ts (caller deinits; path
 * gets its file, may be NULL) and asserts that it loads and that its step
 * reaches min_step. Returns its step. */
int64_t dt_test_job_load_latest(const dt_test_job *j, int64_t min_step, dt_tensors *ts, char *path,
                                size_t path_cap);
/* The same for a linear model: linear/weight [1, 1] and linear/bias are
 * one F32 each and, with check_fit, within DT_TEST_FIT_TOL of the closed
 * form. Returns the checkpoint's step. */
int64_t dt_test_job_check_latest(const dt_test_job *j, int64_t min_step, int check_fit);

/* ---- a Status client of the test's own ------------------------------------------------- */

typedef struct {
    dt_cluster cluster;
    dt_ps_client *client;
} dt_test_probe;

/* Loads the cluster file and makes a client that is a tool, not a worker:
 * its calls (dt_ps_client_status) have a deadline of timeout_ms. */
void dt_test_probe_open(dt_test_probe *p, const char *cluster_path, int timeout_ms);
/* Frees what open made; a zeroed probe is a no-op. */
void dt_test_probe_close(dt_test_probe *p);

/* a = "127.0.0.1:<port>", for clusters built in memory. */
void dt_test_loopback_addr(dt_addr *a, int port);

#endif
