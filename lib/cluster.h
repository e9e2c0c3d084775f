/*
 * cluster: the cluster file (who is where) and the job config (what to train
 * and how), both JSON. Every role parses the same files, so every role agrees
 * on the model, data and schedule.
 *
 * Cluster file:  {"cluster": {"ps": ["host:port", ...], "worker": [...]}}
 * It may also hold the job config under "job", and TF_CONFIG's "task" (read
 * by the command line, ignored here). A separate job file (--config) holds
 * the job fields at its top level (or under "job"). conf/README.md lists the
 * fields, their defaults and their rules.
 *
 * Errors name the file, line and column and the offending field, e.g.
 *   conf/job.json:12:7: "learning_rate" must be a positive number
 */
#ifndef DT_CLUSTER_H
#define DT_CLUSTER_H

#include <stdint.h>

#include "err.h"
#include "optim.h"

#define DT_PATH_MAX 1024
#define DT_HOST_MAX 256

typedef struct {
    char host[DT_HOST_MAX];      /* "localhost", "10.0.0.2", "::1" (no brackets) */
    int port;                    /* 1..65535 */
    char addr[DT_HOST_MAX + 16]; /* "host:port" as gRPC takes it ("[::1]:1681") */
} dt_addr;

typedef struct {
    int num_ps;
    dt_addr *ps; /* (num_ps) owned */
    int num_workers;
    dt_addr *workers; /* (num_workers) owned; worker 0 is the chief */
} dt_cluster;

typedef struct {
    /* model */
    char model[32];   /* "linear": y = X w + b, MSE loss */
    int num_features; /* F >= 1 */

    /* data */
    char data[32];        /* "line": tutorial's x = linspace(-1,1,N), y = 2x + noise;
                             "wide": F features, y = X w* + noise, made on the fly */
    int64_t num_examples; /* N >= 1 */
    double noise;         /* stddev of the label noise, >= 0 */
    uint64_t seed;        /* data, shuffling and initialisation */

    dt_optim_config optim; /* "optimizer", "learning_rate", ... */

    /* training */
    int batch_size;    /* B >= 1 */
    int64_t max_steps; /* global steps; 0 means epochs * N / B */
    int epochs;        /* used when max_steps is 0 */

    /* chief */
    char log_dir[DT_PATH_MAX]; /* checkpoints, the checkpoint state file, event files */
    int save_model_secs;       /* >= 1 */
    int max_to_keep;           /* >= 1 */
    int summary_steps;         /* write summaries every this many local steps, >= 1 */

    /* all roles */
    int log_steps;        /* progress line every this many local steps, >= 1 */
    int ready_wait_secs;  /* how long a worker waits for the model to be ready */
    int rpc_timeout_secs; /* deadline of one RPC */
} dt_job;

/* Parses a cluster file. On failure c is left empty and err says
 * "path:line:col: what". */
int dt_cluster_load(const char *path, dt_cluster *c, dt_err *err) DT_WARN_UNUSED;
/* Same from text; source names it in messages. */
int dt_cluster_parse(const char *text, const char *source, dt_cluster *c,
                     dt_err *err) DT_WARN_UNUSED;
void dt_cluster_deinit(dt_cluster *c);

/* The demo's defaults (documented in README and conf/). */
void dt_job_defaults(dt_job *job);
/* Applies the job fields found in a file (top level, or under "job") on top
 * of job's current values. Unknown fields are errors. On failure job is
 * unchanged. */
int dt_job_load(const char *path, dt_job *job, dt_err *err) DT_WARN_UNUSED;
int dt_job_parse(const char *text, const char *source, dt_job *job, dt_err *err) DT_WARN_UNUSED;
/* Applies one "field=value" override (the --set flag), checked like a file;
 * string fields take the bare text. On failure job is unchanged and err reads
 * "--set field=value: why". */
int dt_job_set(dt_job *job, const char *assignment, dt_err *err) DT_WARN_UNUSED;
/* Checks every field again (so values set in the struct obey the file
 * rules), then across fields, then dt_optim_check; and sets max_steps to
 * epochs * ceil(examples / batch_size) when it is 0. Call once after all
 * files and overrides are applied. Errors read "job: ...". */
int dt_job_finish(dt_job *job, dt_err *err) DT_WARN_UNUSED;

#endif
