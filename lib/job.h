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

#include "consistency.h"
#include "data.h"
#include "err.h"
#include "model.h"
#include "optim.h"
#include "placement.h"
#include "sparse.h"
#include "sparse_model.h"
#include "table.h"

/* Every field of a job. Each module owns the config of its part (model,
 * data, optimizer, placement, consistency) and the job embeds them; every
 * choice is an enum, parsed once when the file is read. */
typedef struct {
    dt_model_config model;             /* "model", "features", "classes", "hidden", "l2" */
    dt_data_config data;               /* "data", "examples", "noise", "train_data", ..., "scale" */
    int data_named;                    /* 1 once a file or --set named "data"; without it,
                                          dt_job_finish takes it from "train_data" */
    int validation_named;              /* 1 once "validation_fraction" was given; without it,
                                          patience with no eval_data holds out a tenth */
    uint64_t seed;                     /* data, shuffling and initialisation */
    int eval_steps;                    /* chief evaluates eval_data every this many local steps
                                          (0: at the end only) */
    int patience;                      /* > 0: the chief ends the job once this many
                                          evaluations in a row have not improved the best
                                          eval loss (early stopping); 0: never */
    dt_optim_config optim;             /* "optimizer", "learning_rate", ... */
    dt_lr_schedule schedule;           /* "lr_schedule", "decay_steps", ..., "lr_values" */
    int num_lr_values;                 /* piecewise: entries of schedule.values given */
    int schedule_chosen;               /* "lr_schedule" was "auto": dt_job_finish chose it */
    dt_placement_config placement;     /* "placement", "partition_min_bytes" */
    dt_consistency_config consistency; /* "mode", ..., "sync_timeout_secs", "nonfinite" */
    dt_sparse_mode sparse;             /* "sparse": the weight as a table of rows on the ps */
    int hash_bits;                     /* "hash_bits": ids hashed into 2^hash_bits rows; 0: libsvm
                                          indices as written */
    dt_table_evict_policy eviction;    /* "evict_idle_steps", "evict_min_touches",
                                          "evict_touch_window_steps": all 0 (off) by default */
    int embedding_dim;                 /* "embedding_dim": floats per embedding row, a sparse
                                          mlp's (1..DT_JOB_MAX_EMBEDDING_DIM) */
    dt_sparse_combiner embedding_combiner; /* "embedding_combiner": how a row's embeddings
                                              meet the mlp (sum or concat by field) */

    /* training */
    int batch_size;    /* B >= 1 */
    int64_t max_steps; /* global steps; 0 means epochs * N / B */
    int epochs;        /* used when max_steps is 0 */
    int epochs_named;  /* 1 once a file or --set gave "epochs" */
    int lr_named;      /* 1 once a file or --set gave "learning_rate" */
    int epochs_chosen; /* dt_job_choose_epochs set it from the training file's rows */

    /* chief */
    char log_dir[DT_PATH_MAX]; /* checkpoints, the checkpoint state file, event files */
    int save_model_secs;       /* >= 1 */
    int final_save_secs;       /* >= 1: how long the final checkpoint is retried */
    int max_to_keep;           /* >= 1 */
    int summary_steps;         /* >= 0: summaries every this many local steps; 0: by time */
    int summary_secs;          /* >= 1: with summary_steps 0, summaries this often (and at
                                  the chief's first and last step) */

    /* all roles */
    int log_steps;         /* progress line every this many local steps, >= 1 */
    int fuse_push_pull;    /* 1: a push also returns the next step's variables (one round
                              trip per step); 0: Pull then Push */
    int pipeline_push;     /* 1: the next gradient is computed while the push is in
                              flight (one more step stale); not in sync mode */
    int ready_wait_secs;   /* how long a worker waits for the model to be ready */
    int rpc_timeout_secs;  /* deadline of one RPC */
    int pull_copy_threads; /* 1..4: threads that copy a pulled tensor of 1 MiB or more
                              into the variables (dt_ps_client_params.copy_threads) */

    /* ps */
    int ps_linger_secs; /* after the job's end, longest wait for every worker to be told */
} dt_job;

/* The widest embedding row a job may ask for: a concat of Criteo's 26
 * fields is then an mlp input of 26,637 features, and every row a batch
 * touches moves 4 KiB each way a step. */
#define DT_JOB_MAX_EMBEDDING_DIM 1024

/* The demo's defaults (documented in conf/README.md). "features" and
 * "classes" start not set (0): dt_job_finish gives the synthetic sources
 * their 1 feature and 2 classes, a binary or linear model its 2 classes,
 * and leaves the rest to dt_job_infer. */
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
/* Takes "data" from "train_data" when no file or --set named it (the
 * source still the default "line") and train_data is set:
 * dt_data_source_of_file, logged in one INFO line; its errors (DT_ECONFIG)
 * prefixed "job: ". Then checks every field again (so values set in the
 * struct obey the file rules), then across fields, then dt_optim_check;
 * warns of each field set off its default that the data source does not
 * use (label_column but csv, examples with file data, ...); sets max_steps to
 * epochs * ceil(examples / batch_size) when it is 0, and "features" and
 * "classes" when they are not set and the data cannot say them (see
 * dt_job_defaults). Call once after all files and overrides are applied.
 * Errors read "job: ...". */
int dt_job_finish(dt_job *job, dt_err *err) DT_WARN_UNUSED;

/* The job's learning-rate schedule (job->schedule), checked. */
int dt_job_schedule(const dt_job *job, dt_lr_schedule *out, dt_err *err) DT_WARN_UNUSED;

/* 1 when the job's data comes from files (csv, libsvm, idx). For those,
 * dt_job_finish leaves max_steps 0 when epochs are given: the size of the
 * data is known only once it is read. */
int dt_job_reads_files(const dt_job *job);
/* The likely fix of a diverging job, as a phrase for a warning: `set
 * "scale": "standardize" (the features are not scaled) or a lower
 * "learning_rate" (now 0.05)` for dense file data left unscaled, else the
 * lower learning_rate alone. Writes at most cap bytes, NUL-terminated. */
void dt_job_divergence_hint(const dt_job *job, char *buf, size_t cap);
/* A loss no sane model of the job reaches (loss_watch.h's ceiling): a
 * classifier's 100 log K, 100x the cross-entropy of a uniform guess; 0 for
 * a regression, whose loss has the labels' scale. */
double dt_job_loss_ceiling(const dt_job *job);
/* The job's data opened as its model needs it: dt_data_open and
 * dt_data_open_eval with job->data, the model's dt_data_needs and
 * job->seed. */
int dt_job_open_data(const dt_job *job, int shard, int num_shards, dt_dataset **out,
                     dt_err *err) DT_WARN_UNUSED;
int dt_job_open_eval(const dt_job *job, dt_dataset **out, dt_err *err) DT_WARN_UNUSED;

/* 1 while "features" or "classes" is not set (0): a job of file data that
 * leaves them to the data, after dt_job_finish, until dt_job_infer. A ps,
 * which reads no data, runs with them unset (the chief's Create brings the
 * shapes). */
int dt_job_shape_unset(const dt_job *job);
/* Sets "features" and "classes" that are not set from the training file
 * (dt_data_infer: the csv header less the label column, the largest libsvm
 * index, the idx header; the classes when the labels are 0..K-1, each
 * present) and logs what it took and from where. Every role that reads
 * data calls it before opening it: they read the same file, so they agree.
 * Does nothing when both are set; a set value the data disagrees with is
 * refused by the read (DT_ECONFIG naming the file and both numbers).
 * Errors: dt_data_infer's, prefixed "job: taking \"features\" from the
 * training data" (or "classes"). */
int dt_job_infer(dt_job *job, dt_err *err) DT_WARN_UNUSED;

/* The job as a JSON object holding every field, in conf/README.md's order
 * (*out malloc'd, the caller frees it): a job file that dt_job_parse reads
 * back to an equal job. Checkpoints carry it (the "job" metadata key), so
 * a model can be scored and resumed without its config file. */
int dt_job_to_json(const dt_job *job, char **out, dt_err *err) DT_WARN_UNUSED;

/* The fields that fix the model's variables (their names and shapes), and
 * the fields that say how a data file becomes the model's input. Each list
 * is NULL-terminated, for dt_job_diff. */
extern const char *const dt_job_model_fields[];
extern const char *const dt_job_input_fields[];

/* Compares the fields of was and now named in names (NULL: every field).
 * Returns how many differ, and lists them in buf as
 *   "learning_rate" 0.1 -> 0.05, "optimizer" "sgd" -> "adam"
 * (was's value first), cut to cap - 1 bytes. */
int dt_job_diff(const dt_job *was, const dt_job *now, const char *const *names, char *buf,
                size_t cap);

/* 1 when the job trains a sparse model, its weight a table of rows on the
 * ps: "sparse" on, or auto with Criteo data, hashed libsvm indices
 * ("hash_bits" > 0) or more than DT_SPARSE_AUTO_FEATURES features. (With
 * "features" not yet taken from the data, auto decides once it is.) */
int dt_job_is_sparse(const dt_job *job);

/* The sparse model of a job that is sparse and its table: the wide form of
 * its linear, logistic or softmax model (a table of one float a class a
 * row), or for "mlp" the embedding model (a table of "embedding_dim" floats
 * a row, combined by "embedding_combiner" into the mlp's input; concat
 * takes Criteo's 26 categorical columns as its fields). Rows 2^hash_bits,
 * or "features" for libsvm indices as written; seeded by "seed", with the
 * optimizer's slots. Errors (DT_EINVAL, naming the field): a job whose
 * model, data, mode or options a sparse model does not take. */
int dt_job_sparse_model(const dt_job *job, dt_sparse_model_config *model, dt_table_config *table,
                        dt_err *err) DT_WARN_UNUSED;
/* The same, and the model's dense variables' specs into specs (room for
 * DT_SPARSE_MODEL_MAX_VARS), *count of them: one reading of the job for
 * the roles and tools that make or check those variables. */
int dt_job_sparse_vars(const dt_job *job, dt_sparse_model_config *model, dt_table_config *table,
                       dt_tensor *specs, int *count, dt_err *err) DT_WARN_UNUSED;

/* What a sparse job moves in its largest messages, for the ps's message
 * cap: *dense the bytes of its dense variables (the Create carries them
 * with their slots), *step_rows the most a step's SparsePull reply or
 * row gradient carries (batch_size rows of at most 26 entries for Criteo,
 * an assumed DT_JOB_LIBSVM_ROW_ENTRIES for libsvm; each entry an id and
 * a row of its table's floats). Errors: dt_job_sparse_model's. */
#define DT_JOB_LIBSVM_ROW_ENTRIES 256
int dt_job_sparse_bytes(const dt_job *job, long long *dense, long long *step_rows,
                        dt_err *err) DT_WARN_UNUSED;

/* The training data (eval: "eval_data") of a sparse job, shard `shard` of
 * num_shards, read into *out (lib/sparse_reader; the caller deinits it). */
int dt_job_open_sparse(const dt_job *job, int eval, int shard, int num_shards, dt_sparse_set *out,
                       dt_err *err) DT_WARN_UNUSED;
/* The same for any file of the job's format: path (eval's --data, say),
 * with labels (labeled 1) or without them (0: features only, for
 * predictions). */
int dt_job_read_sparse(const dt_job *job, const char *path, int labeled, int shard, int num_shards,
                       dt_sparse_set *out, dt_err *err) DT_WARN_UNUSED;

/* "epochs" left out on file data (max_steps 0): about dt_job_epoch_examples
 * examples' worth of passes over rows (the training file's, every
 * shard's together), 1 (a dense mlp: 3) to DT_JOB_MAX_AUTO_EPOCHS; else
 * as given. */
#define DT_JOB_MAX_AUTO_EPOCHS 200
/* The share of the training rows "patience" holds out when the job gives
 * neither "eval_data" nor "validation_fraction" (scikit-learn's). */
#define DT_JOB_VALIDATION_FRACTION 0.1
void dt_job_choose_epochs(dt_job *job, int64_t rows);
/* The examples' worth dt_job_choose_epochs aims at: 150,000, or 40,000
 * for a dense mlp. */
int64_t dt_job_epoch_examples(const dt_job *job);

/* epochs * ceil(num_examples / batch_size), checked for overflow. */
int dt_job_steps_for(const dt_job *job, int64_t num_examples, int64_t *steps,
                     dt_err *err) DT_WARN_UNUSED;
/* The steps of `epochs` passes of every one of num_shards workers over its
 * shard of num_examples rows: the sum of each shard's dt_job_steps_for. Not
 * epochs * ceil(N / B): each shard's last batch of a pass may be short, so
 * the shards together make up to one step a pass more per shard. */
int dt_job_steps_for_shards(const dt_job *job, int64_t num_examples, int num_shards, int64_t *steps,
                            dt_err *err) DT_WARN_UNUSED;

#endif
