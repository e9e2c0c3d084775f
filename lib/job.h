/*
 * job: the job config (what to train and how), JSON. Every role parses the
 * same files, so every role agrees on the model, data and schedule.
 *
 * A job file (--config) holds the job fields at its top level (or under
 * "job"); a cluster file may hold them under "job". conf/README.md lists the
 * fields, their defaults and their rules.
 *
 * Errors name the file, line and column and the offending field, e.g.
 *   conf/job.json:12:7: "learning_rate" must be a positive number
 */
#ifndef DT_JOB_H
#define DT_JOB_H

#include <stdint.h>

#include "err.h"
#include "optim.h"

#define DT_PATH_MAX 1024
#define DT_MAX_HIDDEN 8

typedef struct {
    /* model */
    char model[32];            /* "linear" (MSE), "logistic" (binary, sigmoid cross-entropy),
                                  "softmax" (K classes), "mlp" (hidden ReLU layers, softmax) */
    int num_features;          /* F >= 1 */
    int num_classes;           /* K: 2 for logistic, >= 2 for softmax and mlp; unused by linear */
    int hidden[DT_MAX_HIDDEN]; /* mlp: units per hidden layer */
    int num_hidden;            /* mlp: number of hidden layers, >= 1 */
    double l2;                 /* L2 penalty on weights (not biases), >= 0 */

    /* data */
    char data[32];                  /* "line": tutorial's x = linspace(-1,1,N), y = 2x + noise;
                                       "wide": F features, y = X w* + noise, made on the fly;
                                       "csv", "libsvm", "idx": read from train_data */
    int64_t num_examples;           /* N >= 1 (synthetic sources; files say their own) */
    double noise;                   /* stddev of the label noise, >= 0 */
    uint64_t seed;                  /* data, shuffling and initialisation */
    char train_data[DT_PATH_MAX];   /* csv / libsvm file, or idx images; .gz is read too */
    char train_labels[DT_PATH_MAX]; /* idx labels; "" for csv and libsvm */
    char eval_data[DT_PATH_MAX];    /* held-out set, same format; "" for none */
    char eval_labels[DT_PATH_MAX];  /* idx labels of the held-out set */
    char label_column[64];          /* csv: the label column's header name, or its 0-based index */
    char scale[16];                 /* "none", "standardize" (per feature, over the training file),
                                       or "divide" (by scale_divisor) */
    double scale_divisor;           /* > 0; 255 for 8-bit images */
    int skip_bad_rows;              /* 1: skip and count malformed rows instead of failing */
    int eval_steps;                 /* chief evaluates eval_data every this many local steps (0: at
                                       the end only) */

    dt_optim_config optim;                    /* "optimizer", "learning_rate", ... */
    char lr_schedule[16];                     /* "constant", "exponential", "piecewise" */
    int64_t decay_steps;                      /* exponential */
    double decay_rate;                        /* exponential */
    int staircase;                            /* exponential */
    int64_t boundaries[DT_LR_MAX_BOUNDARIES]; /* piecewise */
    int num_boundaries;
    double lr_values[DT_LR_MAX_BOUNDARIES + 1]; /* piecewise: one more than boundaries */
    int num_lr_values;

    /* placement and consistency */
    char placement[16];          /* "greedy" (by bytes; default) or "round_robin" */
    int64_t partition_min_bytes; /* variables of at least 2x this are split by rows */
    char mode[16];               /* "async", "sync" or "bounded" */
    int replicas_to_aggregate;   /* sync: gradients per step; 0 = number of workers */
    int total_num_replicas;      /* sync: workers pushing; 0 = number of workers */
    int staleness;               /* bounded: most steps ahead of the slowest worker */
    int sync_timeout_secs;       /* sync: partial step after this long; bounded: a
                                    worker silent this long is not waited for */
    char nonfinite[16];          /* a NaN/Inf gradient: "reject" (an error to the
                                    worker) or "skip" (dropped and counted) */

    /* training */
    int batch_size;    /* B >= 1 */
    int64_t max_steps; /* global steps; 0 means epochs * N / B */
    int epochs;        /* used when max_steps is 0 */

    /* chief */
    char log_dir[DT_PATH_MAX]; /* checkpoints, the checkpoint state file, event files */
    int save_model_secs;       /* >= 1 */
    int final_save_secs;       /* >= 1: how long the final checkpoint is retried */
    int max_to_keep;           /* >= 1 */
    int summary_steps;         /* write summaries every this many local steps, >= 1 */

    /* all roles */
    int log_steps;        /* progress line every this many local steps, >= 1 */
    int ready_wait_secs;  /* how long a worker waits for the model to be ready */
    int rpc_timeout_secs; /* deadline of one RPC */
} dt_job;

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

/* The job's learning-rate schedule, checked. */
int dt_job_schedule(const dt_job *job, dt_lr_schedule *out, dt_err *err) DT_WARN_UNUSED;

/* 1 when the job's data comes from files (csv, libsvm, idx). For those,
 * dt_job_finish leaves max_steps 0 when epochs are given: the size of the
 * data is known only once it is read. */
int dt_job_reads_files(const dt_job *job);
/* epochs * ceil(num_examples / batch_size), checked for overflow. */
int dt_job_steps_for(const dt_job *job, int64_t num_examples, int64_t *steps,
                     dt_err *err) DT_WARN_UNUSED;

#endif
