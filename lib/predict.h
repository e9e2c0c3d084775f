/*
 * predict: evaluation and prediction from a checkpoint, without a cluster.
 *
 * `dtrain eval` and `dtrain predict` run here: the job config says the model
 * (so the variables' names and shapes), the data format and the scaling; a
 * checkpoint written by the chief says the values. The examples are read as
 * the chief reads its held-out set (dt_data_open_eval, or
 * dt_data_open_unlabeled for data without labels): whole, in file order,
 * scaled with the statistics of the job's TRAINING file, so a model scores
 * here exactly as it did in training's evaluations.
 *
 * Labels: eval needs them (a csv label column, a libsvm label first on each
 * row, an idx labels file) and refuses data without them, saying so.
 * Predict takes data with or without them and tells which from the file
 * (dt_reader_detect_labels): a csv by its header, F + 1 columns with the
 * label column or F without; a libsvm file by its first row, a label or an
 * index:value pair first; idx by whether a labels file is given. It logs
 * what it found. Labels it reads are checked, left out of the output and
 * give the loss and accuracy; without them those are NaN. Every row of a
 * file has the layout the file started with; a row that differs is an
 * error naming file:line (or record).
 *
 * Errors read "eval: ..." (from dt_predict_eval) or "predict: ..." (the
 * others), or carry the failing module's prefix (data:, the checkpoint's
 * path): a missing checkpoint or data file is DT_ENOTFOUND,
 * a checkpoint written for another model DT_EINVAL naming the variable and
 * both model descriptions, a damaged file DT_ECORRUPT, an unwritable output
 * DT_EIO.
 *
 * Stateless; each call owns what it allocates and frees it before returning.
 */
#ifndef DT_PREDICT_H
#define DT_PREDICT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "job.h"
#include "safetensors.h"
#include "sparse_eval.h"
#include "tensor.h"

typedef struct {
    const dt_job *job;      /* borrowed: model, data format, scaling, log_dir, eval set */
    const char *checkpoint; /* a checkpoint file; NULL or "": the latest in job->log_dir */
    const char *data;       /* examples in job->data's format; NULL or "": job->eval_data */
    const char *labels;     /* idx labels of data; NULL or "": job->eval_labels when data
                               is not given, none otherwise */
    const char *out;        /* dt_predict_write's CSV; NULL, "" or "-": stdout */
    int output;             /* dt_predict_output: which columns a classifier writes */
    int no_header;          /* 1: no header line */
} dt_predict_params;

/* What dt_predict_write writes for a classifier (logistic, softmax, mlp):
 * the most likely class and each class's probability (the default), the
 * class alone, or the probabilities alone. A linear model writes its value
 * whichever is asked. */
typedef enum { DT_PREDICT_BOTH = 0, DT_PREDICT_CLASS, DT_PREDICT_PROBA } dt_predict_output;
/* "both", "class", "proba"; indexed by dt_predict_output, NULL-terminated. */
extern const char *const dt_predict_output_names[];

typedef struct {
    int64_t global_step;                  /* the checkpoint's */
    int64_t examples;                     /* N: rows read (and written by predict) */
    int labeled;                          /* 1: the data carried labels; 0: loss and accuracy NaN */
    double loss;                          /* mean data loss over the N rows, no L2 term */
    double accuracy;                      /* fraction classified right; NaN for linear */
    char checkpoint[DT_PATH_MAX + 64];    /* the file that was read */
    char model[DT_SAFETENSORS_MODEL_MAX]; /* the checkpoint's model description */
} dt_predict_result;

/* Loads a checkpoint into *vars, a new set laid out by dt_model_specs(job)
 * (the caller deinits it on success; on failure it is left empty). path
 * NULL or "" takes the latest loadable checkpoint of job->log_dir. Every
 * variable of the model must be in the file with its dtype and shape, and
 * every tensor of the file must be a variable of the model, one of its
 * optimizer slots ("<variable>/<slot>", ignored) or the scaling statistics:
 * otherwise DT_EINVAL naming the variable, its two shapes and the two model
 * descriptions. When the checkpoint carries the job it was trained with,
 * the job's model and input fields (dt_job_model_fields,
 * dt_job_input_fields) must equal its: otherwise DT_ECONFIG naming each
 * field and both values. meta and path_out (path_cap bytes) may be NULL;
 * meta->job is the caller's to free (dt_safetensors_meta_deinit). Messages start
 * "<what>: ". */
int dt_predict_load(const char *what, const dt_job *job, const char *path, dt_tensors *vars,
                    dt_safetensors_meta *meta, char *path_out, size_t path_cap,
                    dt_err *err) DT_WARN_UNUSED;

/* dt_predict_load for a sparse job (dt_job_is_sparse): the dense
 * variables and the table's rows into *out (lib/sparse_eval; the caller
 * frees it), checked as dt_sparse_ckpt_open checks them, then the job as
 * dt_predict_load compares it. *out is NULL on failure. */
int dt_predict_load_sparse(const char *what, const dt_job *job, const char *path,
                           dt_sparse_ckpt **out, dt_safetensors_meta *meta, char *path_out,
                           size_t path_cap, dt_err *err) DT_WARN_UNUSED;

/* The checkpoint eval and predict take when none is named: log_dir's best
 * model (checkpoint.h) when it holds one that reads, logged with its step
 * and eval loss; its path goes to out (cap bytes) and 1 is returned. 0
 * with out "" when there is none (the latest checkpoint is then taken); a
 * best model whose header cannot be read is passed over with a warning. */
int dt_predict_pick_best(const char *what, const char *log_dir, char *out, size_t cap);

/* The job a checkpoint was trained with, from its "job" metadata (the
 * defaults, then its fields, then dt_job_finish), for eval and predict with
 * no job file: path, or NULL or "" for the latest checkpoint of log_dir;
 * path_out (path_cap bytes; may be NULL) gets the file read, so the
 * variables are then read from the same one. A checkpoint without a job
 * (an older dtrain's), or one whose job this build refuses, is DT_ECONFIG
 * saying so. Messages start "<what>: ". */
int dt_predict_job_of(const char *what, const char *path, const char *log_dir, dt_job *job,
                      char *path_out, size_t path_cap, dt_err *err) DT_WARN_UNUSED;

/* For a job config given to eval or predict that leaves "features" or
 * "classes" unset: takes them from the job the checkpoint (path, or NULL
 * or "" for the latest of job->log_dir) was trained with, so the training
 * file need not exist; from the training file (dt_job_infer) when the
 * checkpoint carries no job or cannot be read (its own error comes when
 * the command loads it). Nothing to do when both are set. Errors:
 * dt_job_infer's, prefixed "<what>: ". */
int dt_predict_fill_shape(const char *what, const char *path, dt_job *job,
                          dt_err *err) DT_WARN_UNUSED;

/* Loss and accuracy of the checkpoint's model on the data, into *out
 * (zeroed first; loss and accuracy NaN on failure). Data without labels is
 * DT_EINVAL, saying what showed it. */
int dt_predict_eval(const dt_predict_params *p, dt_predict_result *out, dt_err *err) DT_WARN_UNUSED;

/* Writes the model's predictions for every row of the data to p->out as
 * CSV with a header line (unless p->no_header), one line per row, in file
 * order:
 *   linear            "prediction"         the predicted value
 *   logistic, softmax, mlp (K classes, logistic K = 2)
 *     both (default)  "class,p0,...,pK-1"  the most likely class (logistic:
 *                                          1 when P(y = 1) > 0.5; else the
 *                                          first of equals), then each
 *                                          class's probability
 *     class           "class"
 *     proba           "p0,...,pK-1"
 * Values print with 9 significant digits (a float's round trip). *out (may
 * be NULL) gets the figures dt_predict_eval would give (loss and accuracy
 * NaN and labeled 0 for data without labels). On failure a file at p->out
 * may hold part of the rows. */
int dt_predict_write(const dt_predict_params *p, dt_predict_result *out,
                     dt_err *err) DT_WARN_UNUSED;

/* The eval line, "loss L accuracy A examples N global_step S" (no accuracy
 * for linear; loss with 6 decimals, accuracy with 4, as the chief logs them),
 * without a newline, truncated to cap - 1 bytes. Returns its untruncated
 * length, as snprintf does. */
int dt_predict_format(const dt_predict_result *r, char *buf, size_t cap);

#endif
