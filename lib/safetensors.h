/*
 * safetensors: dtrain's checkpoint file, one tensor set and its metadata in
 * a standard safetensors file.
 *
 * The layout is safetensors' own (8-byte little-endian header length, JSON
 * header with dtype/shape/data_offsets per tensor and a "__metadata__" map
 * of strings, then the raw little-endian data), so numpy, PyTorch and the
 * Hugging Face tools open it. dtrain's metadata keys:
 *   "global_step"  decimal int64
 *   "model"        the model description
 *   "crc32c"       decimal CRC-32C of the data section (checked on load)
 *   "format"       "dtrain.checkpoint.v1"
 *   "max_steps"    decimal int64: the step at which the job that wrote it
 *                  ends (omitted when 0, unknown), so a reader knows the
 *                  final checkpoint when it sees it (the evaluator)
 *   "job"          the job config it was trained with, as a JSON object of
 *                  every job field (dt_job_to_json; omitted by older files
 *                  and by callers that give none), so eval, predict and a
 *                  resuming chief know the model, its input and its
 *                  hyperparameters without the job file
 *   "feature_names"  csv training data: the names of its feature columns,
 *                  in order, joined by commas (a csv name holds none), so
 *                  eval and predict can refuse a file whose columns are in
 *                  another order (omitted for other data)
 *   "eval_loss"    the held-out loss of these values, "%.17g" (the best
 *                  model's, checkpoint.h; omitted by other saves)
 *   "stopped_early"  "true" in the final checkpoint of a job that early
 *                  stopping ended: its max_steps is then its global_step,
 *                  and no restarted role trains the job again
 *   "evals_without_gain"  with patience, the evaluations in a row that had
 *                  not improved the eval loss when it was saved (decimal,
 *                  omitted when 0), so a restarted chief counts on
 * What the tensors are (variables, slots, the scaling statistics) is the
 * writer's business (checkpoint.h); this module reads and writes any valid
 * set. A save is atomic: temporary file, fsync, rename, fsync of the dir
 * (fileio.h).
 */
#ifndef DT_SAFETENSORS_H
#define DT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "tensor.h"

#define DT_SAFETENSORS_MODEL_MAX 256
#define DT_SAFETENSORS_JOB_ID_MAX 33 /* 32 lowercase hex digits and the NUL */

typedef struct {
    int64_t global_step;
    char model[DT_SAFETENSORS_MODEL_MAX];
    int64_t max_steps;   /* 0: unknown (not written, or an older file) */
    char *job;           /* the "job" key, JSON, or NULL: borrowed by dt_safetensors_save,
                            malloc'd by the loads (free it with dt_safetensors_meta_deinit) */
    char *feature_names; /* the "feature_names" key, UTF-8, or NULL: owned as job */
    /* The "job_id" key: the job's identity (chief.c), 32 lowercase hex
     * digits; empty: not written (a file from before job ids). */
    char job_id[DT_SAFETENSORS_JOB_ID_MAX];
    /* The "eval_loss" key: the held-out loss of these values, written for
     * the best model (checkpoint.h); has_eval_loss 0: none. */
    int has_eval_loss;
    double eval_loss;
    /* The "stopped_early" key ("true"): the final checkpoint of a job that
     * early stopping ended (then max_steps is its global_step); 0: not. */
    int stopped_early;
    /* The "evals_without_gain" key: early stopping's count at the save; 0:
     * none (not written). */
    int evals_without_gain;
} dt_safetensors_meta;

/* 1 when text is a job id: exactly 32 lowercase hex digits. */
int dt_safetensors_job_id_ok(const char *text);

/* Frees meta->job and meta->feature_names and sets them NULL. NULL is a
 * no-op. */
void dt_safetensors_meta_deinit(dt_safetensors_meta *meta);

/* Writes ts and meta to path atomically. DT_EINVAL for a negative step, a
 * model string that is not NUL-terminated UTF-8, or tensors that are not a
 * valid set; DT_EIO when a write, fsync or rename fails (the temporary file
 * is removed and path keeps its old content). */
int dt_safetensors_save(const char *path, const dt_tensors *ts, const dt_safetensors_meta *meta,
                        dt_err *err) DT_WARN_UNUSED;

/*
 * Rows streamed to a checkpoint. A sparse table's tensors ("<t>/ids",
 * "<t>/values", its slots) share their first dimension, the rows held, and
 * come from the ps tasks a page at a time; holding all of them before the
 * save would double the saver's memory. A rows writer takes the pages as
 * they come: each part (one future tensor) is appended to its own
 * temporary file in dir, created and unlinked at once so a process that
 * dies leaves nothing behind, and its CRC-32C kept as it grows.
 * dt_safetensors_save_rows then writes the file dt_safetensors_save would
 * write for ts followed by the parts (each with its first dimension the
 * rows appended; no part at all when no row was), byte for byte, copying
 * the parts from their files: memory is one copy buffer, whatever the
 * table; the table's bytes go to disk twice.
 */
#define DT_SAFETENSORS_MAX_ROW_PARTS 8

typedef struct dt_safetensors_rows dt_safetensors_rows; /* opaque; owns its files */

/* A writer of nparts (1..DT_SAFETENSORS_MAX_ROW_PARTS) parts shaped as
 * specs[i] (name, dtype, ndim >= 1, shape[1..ndim-1]; shape[0] ignored;
 * copied), its files in the existing directory dir. Errors (*out stays
 * NULL): a bad spec (DT_EINVAL), no file (DT_EIO naming dir), DT_ENOMEM. */
int dt_safetensors_rows_new(const char *dir, const dt_tensor *specs, int nparts,
                            dt_safetensors_rows **out, dt_err *err) DT_WARN_UNUSED;

/* Appends n (>= 0) rows: parts[i] holds n rows of part i (borrowed). DT_EIO
 * when a write fails, DT_EINVAL when the rows would exceed a tensor's
 * limits; the writer is then unusable (free it). */
int dt_safetensors_rows_append(dt_safetensors_rows *r, int64_t n, const void *const *parts,
                               dt_err *err) DT_WARN_UNUSED;

/* Rows appended so far. */
int64_t dt_safetensors_rows_count(const dt_safetensors_rows *r);

/* As dt_safetensors_save(path, ts + the parts of rs[0..nrs), meta), atomic
 * the same way: one writer a table (at most DT_SAFETENSORS_MAX_ROW_SETS),
 * each left as it was (free them after). Errors as dt_safetensors_save's,
 * and DT_EIO when a part's file cannot be read back whole. */
#define DT_SAFETENSORS_MAX_ROW_SETS 16
int dt_safetensors_save_rows(const char *path, const dt_tensors *ts, dt_safetensors_rows *const *rs,
                             int nrs, const dt_safetensors_meta *meta, dt_err *err) DT_WARN_UNUSED;

void dt_safetensors_rows_free(dt_safetensors_rows *r); /* NULL is a no-op; closes its files */

/* Reads a whole checkpoint into a new set *out (caller deinits). Refuses,
 * with DT_ECORRUPT and nothing allocated, a file that is truncated, has a bad
 * header, offsets that overlap or leave gaps, sizes that do not match the
 * shapes, or a crc32c that does not match. Tensors come back in file (data
 * offset) order. meta may be NULL; it is written only on success. A missing
 * file is DT_ENOTFOUND. Files from other tools load if they hold only F32,
 * F64, I32, I64 tensors of at most 4 dims, each dim >= 1; without a
 * "global_step" the step reads as 0. A "job" that is not a JSON object is
 * DT_ECORRUPT; its fields are the job module's to check. */
int dt_safetensors_load(const char *path, dt_tensors *out, dt_safetensors_meta *meta,
                        dt_err *err) DT_WARN_UNUSED;

/* Reads only path's header into *meta (caller deinits): the same checks of
 * the header as dt_safetensors_load, none of the data (its crc32c is not
 * checked). Written only on success. */
int dt_safetensors_load_meta(const char *path, dt_safetensors_meta *meta,
                             dt_err *err) DT_WARN_UNUSED;

#endif
