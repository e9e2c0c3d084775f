/*
 * dtrain.h: the public C API of dtrain, a parameter-server training runtime.
 *
 * A program declares its own model (named float32 variables) and trains it
 * on dtrain's parameter servers, the same program in every role, as a TF1
 * program does with ClusterSpec, Server.join() and a Supervisor:
 *
 *   dtrain_cluster  who is where (a cluster file or TF_CONFIG) and which
 *                   task this process is (flags or TF_CONFIG's "task");
 *   dtrain_config   the job (optimizer, mode, staleness, log_dir, max_steps,
 *                   save_model_secs, summaries), a JSON file and
 *                   "field=value" overrides, checked as the dtrain binary
 *                   checks them (conf/README.md lists the fields);
 *   dtrain_model    the variables: name, shape, initial values or an
 *                   initializer; their values live in the program's buffers;
 *   dtrain_server   the ps: serves until the job is done (join);
 *   dtrain_session  a worker (task 0 is the chief): start waits for the
 *                   model (the chief creates it, or restores it from the
 *                   latest checkpoint in log_dir); each step pushes the
 *                   program's gradients with the batch's loss and brings the
 *                   fresh values back into its buffers, in one round trip.
 *
 * A session trains on the dtrain binary's own worker and chief: retries
 * that never apply a push twice, sync and bounded modes, heartbeats, the
 * chief's checkpoint and summary timers, a restarted ps restored, a signal
 * making the chief save, TLS and tokens.
 *
 * Conventions (those of sqlite3.h):
 *   - Every handle is opaque. dtrain_X_new(&h) makes one (it fails only with
 *     DTRAIN_ENOMEM, *h NULL then); dtrain_X_free(h) releases it, and
 *     dtrain_X_free(NULL) does nothing.
 *   - Every call returns DTRAIN_OK (0) or a negative dtrain_code; the handle
 *     keeps the message of its last failure, dtrain_errmsg(h), in the form
 *     "object: step: reason" (e.g. `conf/job.json:3:7: "learning_rate" must
 *     be a positive number`). A call that succeeds clears it.
 *   - Strings and arrays passed in are copied unless a comment says
 *     "kept": then they must stay valid for the handle's life.
 *   - A handle is used by one thread at a time.
 */
#ifndef DTRAIN_H
#define DTRAIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ------------------------------------------------------------ */

#define DTRAIN_VERSION_MAJOR 0
#define DTRAIN_VERSION_MINOR 1
#define DTRAIN_VERSION_PATCH 0
#define DTRAIN_VERSION "0.1.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH, for compile-time checks. */
#define DTRAIN_VERSION_NUMBER                                                                      \
    (DTRAIN_VERSION_MAJOR * 10000 + DTRAIN_VERSION_MINOR * 100 + DTRAIN_VERSION_PATCH)

/* The library's version ("0.1.0") and number, which may be newer than the
 * header a program was built with (same major: same ABI). */
const char *dtrain_version(void);
int dtrain_version_number(void);

/* ---- results ------------------------------------------------------------ */

typedef enum {
    DTRAIN_OK = 0,
    DTRAIN_EINVAL = -1,       /* a bad argument, file, flag or field */
    DTRAIN_ENOTFOUND = -2,    /* a named thing (file, variable) does not exist */
    DTRAIN_EIO = -3,          /* a read or write failed */
    DTRAIN_EUNAVAILABLE = -4, /* a peer stayed unreachable past the retry budget */
    DTRAIN_EDEADLINE = -5,    /* a deadline passed */
    DTRAIN_EPRECOND = -6,     /* the handle's state does not allow the call */
    DTRAIN_ECORRUPT = -7,     /* a file or message fails its integrity checks */
    DTRAIN_ENOMEM = -8,       /* out of memory */
    DTRAIN_EEXIST = -9,       /* already exists (a variable's name, a log dir's lock) */
    DTRAIN_ECANCELLED = -10,  /* stopped (a signal, dtrain_session_stop) */
    DTRAIN_EINTERNAL = -11,   /* a bug or an unexpected library failure */
    DTRAIN_ESTORAGE = -12,    /* the final checkpoint could not be written (disk full) */
    DTRAIN_EPERM = -13,       /* not this role's to do */
    DTRAIN_ECONFIG = -14,     /* the job config does not fit (the model, the checkpoint) */
    DTRAIN_EABORTED = -15,    /* the job failed (its chief said so) */
} dtrain_code;

/* A short stable name of a code ("invalid argument", ...). Never NULL. */
const char *dtrain_strerror(int code);

/* The exit status the dtrain binary gives for code, for a program that
 * ends its process as the binary would (cluster managers read it):
 * 0 done; 1 a permanent failure; 2 a usage or config error; 75 the final
 * checkpoint could not be written (retryable); 200 a peer unreachable
 * (retryable); 128 + N stopped by signal N (143 when no signal was taken). */
int dtrain_exit_code(int code);

/* The message of handle's last failure ("" when none). handle is any
 * dtrain handle; NULL gives the calling thread's last failure of a _new
 * call. Borrowed: valid until the next call on the handle. */
const char *dtrain_errmsg(const void *handle);

/* ---- cluster and role --------------------------------------------------- */

typedef struct dtrain_cluster dtrain_cluster;

typedef enum { DTRAIN_ROLE_NONE = 0, DTRAIN_ROLE_PS, DTRAIN_ROLE_WORKER } dtrain_role;

int dtrain_cluster_new(dtrain_cluster **out);
void dtrain_cluster_free(dtrain_cluster *c);

/* The cluster from a file ({"cluster": {"ps": [...], "worker": [...]}},
 * the dtrain binary's --cluster), from text (source names it in messages),
 * or from the TF_CONFIG environment variable (DTRAIN_ENOTFOUND when it is
 * unset). A file or TF_CONFIG that says "task" also sets the role. */
int dtrain_cluster_load(dtrain_cluster *c, const char *path);
int dtrain_cluster_parse(dtrain_cluster *c, const char *text, const char *source);
int dtrain_cluster_from_env(dtrain_cluster *c);

/* This process's task: job "ps", "worker", "chief" or "master" (TF_CONFIG's
 * numbering: with a chief job, worker 0 is training task 1) and its index.
 * DTRAIN_EINVAL for a job or index the cluster does not have. */
int dtrain_cluster_set_task(dtrain_cluster *c, const char *job_name, int task_index);

/* The resolved task: DTRAIN_ROLE_PS or _WORKER (the chief is worker 0) and
 * its index in dtrain's numbering; DTRAIN_ROLE_NONE before one is set. */
dtrain_role dtrain_cluster_role(const dtrain_cluster *c, int *task_index);
int dtrain_cluster_is_chief(const dtrain_cluster *c);
int dtrain_cluster_num_ps(const dtrain_cluster *c);
int dtrain_cluster_num_workers(const dtrain_cluster *c);

/* ---- job config --------------------------------------------------------- */

typedef struct dtrain_config dtrain_config;

/* A config at the binary's defaults (conf/README.md). */
int dtrain_config_new(dtrain_config **out);
void dtrain_config_free(dtrain_config *cfg);

/* The job fields of a file (top level, or under "job") over the current
 * ones; one "field=value" override, as the binary's --set. Checked as the
 * binary checks them; a failed call leaves the config as it was. */
int dtrain_config_load(dtrain_config *cfg, const char *path);
int dtrain_config_set(dtrain_config *cfg, const char *assignment);

/* A few fields a program reads back (after the checks across fields,
 * which the session and server make again). */
int64_t dtrain_config_max_steps(const dtrain_config *cfg);
int dtrain_config_batch_size(const dtrain_config *cfg);
uint64_t dtrain_config_seed(const dtrain_config *cfg);
const char *dtrain_config_log_dir(const dtrain_config *cfg); /* borrowed */

/* ---- the command line --------------------------------------------------- */

/*
 * The dtrain binary's role flags, taken out of argv (the others stay, in
 * order; *argc is updated, argv[*argc] = NULL), so one program runs as
 * every role:
 *   --cluster FILE (else TF_CONFIG)   --job-name ps|worker|chief  --task-index N
 *   --config FILE  --set field=value (repeatable)  --log-dir DIR
 *   --tls-cert FILE --tls-key FILE --tls-ca FILE --token-file FILE
 *       (else DTRAIN_TLS_CERT, DTRAIN_TLS_KEY, DTRAIN_TLS_CA, DTRAIN_TOKEN_FILE)
 *   --log-level debug|info|warn|error
 * Fills c (cluster, role, security) and cfg (a cluster file's "job", then
 * --config, --log-dir, --set). Errors go to c's message.
 */
int dtrain_parse_args(dtrain_cluster *c, dtrain_config *cfg, int *argc, char **argv);

/* ---- variables ---------------------------------------------------------- */

typedef struct dtrain_model dtrain_model;

typedef enum {
    DTRAIN_INIT_GIVEN = 0,        /* the values in the buffer when the session starts */
    DTRAIN_INIT_ZEROS,            /* 0 */
    DTRAIN_INIT_CONSTANT,         /* value */
    DTRAIN_INIT_NORMAL,           /* N(0, stddev^2) */
    DTRAIN_INIT_TRUNCATED_NORMAL, /* N(0, stddev^2) redrawn beyond 2 stddev */
    DTRAIN_INIT_UNIFORM,          /* U(low, high) */
    DTRAIN_INIT_GLOROT_UNIFORM,   /* U(-l, l), l = sqrt(6 / (fan_in + fan_out)) */
    DTRAIN_INIT_GLOROT_NORMAL,    /* truncated N(0, 2 / (fan_in + fan_out)) */
    DTRAIN_INIT_HE_NORMAL,        /* truncated N(0, 2 / fan_in) */
    DTRAIN_INIT_HE_UNIFORM,       /* U(-l, l), l = sqrt(6 / fan_in) */
} dtrain_init;

/* fan_in and fan_out as Keras takes them: a (in, out) matrix has in and
 * out; a convolution kernel (out, in, kh, kw) (PyTorch's layout) has
 * in*kh*kw and out*kh*kw; a vector of n has n and n. */

#define DTRAIN_MAX_DIMS 4
#define DTRAIN_NAME_MAX 127

typedef struct {
    const char *name;     /* unique in the model, 1..127 bytes: the checkpoint's name */
    int ndim;             /* 0 (a scalar) .. DTRAIN_MAX_DIMS */
    const int64_t *shape; /* (ndim) each >= 1 */
    /* Where the variable's values live (numel floats, kept): the session
     * writes the fresh values there at start and after every step. With
     * DTRAIN_INIT_GIVEN the chief's first values are those in it then. */
    float *values;
    dtrain_init init;
    double value;     /* DTRAIN_INIT_CONSTANT */
    double stddev;    /* DTRAIN_INIT_NORMAL, _TRUNCATED_NORMAL: > 0 */
    double low, high; /* DTRAIN_INIT_UNIFORM: low < high */
} dtrain_var_params;

int dtrain_model_new(dtrain_model **out);
void dtrain_model_free(dtrain_model *m);

/* Declares a variable, the next in order (index dtrain_model_count - 1).
 * DTRAIN_EINVAL for a bad name, shape, buffer or initializer;
 * DTRAIN_EEXIST for a name declared already; DTRAIN_EPRECOND once a
 * session or server uses the model. */
int dtrain_model_add(dtrain_model *m, const dtrain_var_params *p);
int dtrain_model_count(const dtrain_model *m);
/* Elements of variable i (0 when there is none). */
int64_t dtrain_model_numel(const dtrain_model *m, int i);
/* Variable i's initial values by its initializer, seeded by seed and its
 * name (what the chief writes for a model no checkpoint holds), into out
 * (numel floats). DTRAIN_EINVAL for GIVEN or an index out of range. */
int dtrain_model_initial_values(dtrain_model *m, int i, uint64_t seed, float *out);

/* ---- tables of rows ------------------------------------------------------ */

/*
 * A table: R rows of D floats on the ps tasks (an embedding, a wide
 * model's weights), as dtrain's sparse jobs hold theirs. Only the rows a
 * batch names travel: each step the program looks up the batch's ids
 * (dtrain_session_lookup: their rows as the ps tasks hold them now) and
 * pushes their gradient with the dense one (dtrain_session_step_rows, the
 * same round trip). A row never pushed reads as its initializer's value
 * (of the job's seed, the table's name and the id). The checkpoint holds
 * the rows pushed to as "<name>/ids" (I64, n), "<name>/values" (F32,
 * (n, D)) and the optimizer's slots "<name>/<slot>"; the optimizer
 * updates only the rows pushed (lazily, as TF's LazyAdam).
 */

#define DTRAIN_MAX_TABLES 8
#define DTRAIN_TABLE_NAME_MAX 95
#define DTRAIN_TABLE_MAX_ROWS ((int64_t)1 << 40)
#define DTRAIN_TABLE_MAX_DIM 65536

typedef struct {
    const char *name; /* 1..95 bytes; no variable is named it or "<name>/..." */
    int64_t rows;     /* R: ids 0..R-1, 1..DTRAIN_TABLE_MAX_ROWS */
    int dim;          /* D: floats a row, 1..DTRAIN_TABLE_MAX_DIM */
    dtrain_init init; /* DTRAIN_INIT_ZEROS, _NORMAL (N(0, scale^2)), _UNIFORM (U(-scale, scale)) */
    double scale;     /* _NORMAL, _UNIFORM: > 0 */
} dtrain_table_params;

/* Declares a table, index dtrain_model_table_count - 1 (at most
 * DTRAIN_MAX_TABLES a model: a recommender's user and item embeddings,
 * a wide part beside them). DTRAIN_EINVAL for a bad name, size or
 * initializer, or one table too many; DTRAIN_EEXIST for a name a
 * variable or table has, or one under the other's ("<name>/..."; their
 * checkpoint names would collide); DTRAIN_EPRECOND once a session or
 * server uses the model. A variable declared after it may not be named
 * "<name>/..." either. */
int dtrain_model_add_table(dtrain_model *m, const dtrain_table_params *p);
int dtrain_model_table_count(const dtrain_model *m);

/* ---- the ps ------------------------------------------------------------- */

typedef struct dtrain_server dtrain_server;

typedef struct {
    const dtrain_cluster *cluster; /* its role a ps task; borrowed until free */
    const dtrain_config *config;   /* borrowed for the call */
    /* The model the workers train (may be NULL): sizes the largest message
     * a ps takes; without it 256 MiB. */
    const dtrain_model *model;
    int keep_serving;   /* 1: go on serving after the job is done */
    int handle_signals; /* 1: SIGINT and SIGTERM stop join (DTRAIN_ECANCELLED) */
} dtrain_server_params;

int dtrain_server_new(dtrain_server **out);
void dtrain_server_free(dtrain_server *s); /* stops serving */

/* Binds the task's address and serves (threads of its own). */
int dtrain_server_start(dtrain_server *s, const dtrain_server_params *p);
/* Blocks until the job is done (DTRAIN_OK), failed (DTRAIN_EABORTED with
 * the chief's reason) or was stopped (DTRAIN_ECANCELLED). */
int dtrain_server_join(dtrain_server *s);
/* Makes join return DTRAIN_ECANCELLED; safe from another thread and from a
 * signal handler. */
void dtrain_server_stop(dtrain_server *s);

/* ---- the training session ---------------------------------------------- */

typedef struct dtrain_session dtrain_session;

typedef struct {
    const dtrain_cluster *cluster; /* its role a worker task; borrowed until free */
    const dtrain_config *config;   /* copied; must set max_steps */
    const dtrain_model *model;     /* borrowed until free, its buffers too */
    /* 1: SIGINT and SIGTERM stop the session as they stop the binary (the
     * chief saves a checkpoint; step returns DTRAIN_ECANCELLED). */
    int handle_signals;
} dtrain_session_params;

typedef struct {
    int64_t global_step; /* of the values now in the buffers */
    int64_t local_step;  /* steps this session has pushed */
    int done;            /* the job is done: the buffers hold the last values pulled */
} dtrain_step_result;

int dtrain_session_new(dtrain_session **out);
/* Closes (dtrain_session_close) when not yet closed, then frees. */
void dtrain_session_free(dtrain_session *s);

/* Joins the job as the cluster's worker task: waits for every ps; the
 * chief (task 0) then puts the model on them (the one they hold, else the
 * latest checkpoint in log_dir, else the initializers), the others wait
 * for it. Returns once the first values are in the model's buffers, or the
 * job is already done (then should_stop is 1). A checkpoint of another
 * model (names, shapes) is DTRAIN_EINVAL or DTRAIN_ECONFIG. */
int dtrain_session_start(dtrain_session *s, const dtrain_session_params *p);

/* One training step: grads[i] (numel of variable i floats, in declaration
 * order; borrowed for the call) is the gradient at the values the buffers
 * hold, loss the batch's. Pushed to the ps tasks, which apply it once
 * (retried on failure, never twice), and the fresh values come back into
 * the buffers in the same round trip (sync mode: once the step is
 * applied). *r may be NULL. DTRAIN_EPRECOND before start succeeded or
 * after the job is done; the training's failure otherwise. */
int dtrain_session_step(dtrain_session *s, const float *const *grads, double loss,
                        dtrain_step_result *r);

/* A model with tables: the rows of ids (n >= 1 ids, strictly increasing,
 * each in [0, R)) of table (its index, from 0) into rows (n * dim floats,
 * row k for ids[k]), as the ps tasks hold them now: the batch's rows of
 * each table, looked up once before each step (a step pushes the
 * gradient of each table's last lookup's rows). Retried as a step is. When the job ends meanwhile
 * it returns DTRAIN_OK with should_stop 1 (rows unspecified). DTRAIN_EINVAL for bad ids (the
 * message names the position), DTRAIN_EPRECOND before start or for a model without that table. */
int dtrain_session_lookup(dtrain_session *s, int table, const int64_t *ids, int64_t n, float *rows);

/* dtrain_session_step for a model with tables: row_grads[t] (n * dim
 * floats, borrowed for the call) is the gradient of table t's rows of the
 * last lookup, pushed with grads and loss in the same round trip.
 * DTRAIN_EPRECOND when a table had no lookup since the last step;
 * dtrain_session_step itself refuses a model with a table. */
int dtrain_session_step_rows(dtrain_session *s, const float *const *grads,
                             const float *const *row_grads, double loss, dtrain_step_result *r);

/* 1 once the job is done, failed or stopped: no more steps. */
int dtrain_session_should_stop(const dtrain_session *s);
/* The global step of the values in the buffers. */
int64_t dtrain_session_global_step(const dtrain_session *s);

/* A scalar the chief writes to TensorBoard under name (beside "loss",
 * "global_step/sec" and the histograms of every variable) at its next
 * summary step, and every one after until set again. On workers other than
 * the chief it is kept and not written. At most 64 names. */
int dtrain_session_summary(dtrain_session *s, const char *name, double value);

/* A histogram the chief writes under name (as tf.summary.histogram) at its
 * next summary step, and every one after until set again: n values,
 * copied. Same rules as dtrain_session_summary. */
int dtrain_session_histogram(dtrain_session *s, const char *name, const float *values, int64_t n);

/* Asks the session to stop as a signal does: the chief saves a checkpoint;
 * the ps tasks wait for a restart. Safe from another thread. */
void dtrain_session_stop(dtrain_session *s);

/* Ends the session: after should_stop, the chief's final checkpoint is
 * written and the ps tasks told the job is done (already, by the last
 * step); before it, as dtrain_session_stop. Returns the training's outcome
 * (DTRAIN_OK: the job is done). */
int dtrain_session_close(dtrain_session *s);

#ifdef __cplusplus
}
#endif

#endif
