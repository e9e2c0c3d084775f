/*
 * checkpoint: safetensors files and the log dir's "checkpoint" state file.
 *
 * A checkpoint is a standard safetensors file (8-byte little-endian header
 * length, JSON header with dtype/shape/data_offsets per tensor and a
 * "__metadata__" map of strings, then the raw little-endian data), so numpy,
 * PyTorch and the Hugging Face tools open it. dtrain's metadata keys:
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
 * A chief's checkpoint also carries the statistics its input was scaled
 * with, as tensors beside the variables (for "scale": "standardize"):
 *   "scale/mean"   F64 (F) per-feature mean over the training file
 *   "scale/std"    F64 (F) per-feature population standard deviation (a
 *                  constant feature's is 1)
 * so predictions never read the training file again. numpy reads them as
 * any tensor: (x - mean) / std is the model's input.
 *
 * In a log dir, checkpoints are named model.ckpt-<global_step>.safetensors.
 * The state file "checkpoint" is text in TF's style:
 *   model_checkpoint_path: "model.ckpt-1200.safetensors"
 *   all_model_checkpoint_paths: "model.ckpt-1000.safetensors"
 *   all_model_checkpoint_paths: "model.ckpt-1200.safetensors"
 * Every write is atomic: temporary file, fsync, rename, fsync of the dir. The
 * state file is rewritten only after the new checkpoint is durable.
 */
#ifndef DT_CHECKPOINT_H
#define DT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "tensor.h"

#define DT_CKPT_MODEL_MAX 256

typedef struct {
    int64_t global_step;
    char model[DT_CKPT_MODEL_MAX];
    int64_t max_steps; /* 0: unknown (not written, or an older file) */
    char *job;         /* the "job" key, JSON, or NULL: borrowed by dt_ckpt_save, malloc'd by
                          the loads (free it with dt_ckpt_meta_deinit) */
} dt_ckpt_meta;

/* The names of the scaling statistics' tensors (see above). */
#define DT_CKPT_SCALE_MEAN "scale/mean"
#define DT_CKPT_SCALE_STD "scale/std"

/* Frees meta->job and sets it NULL. NULL is a no-op. */
void dt_ckpt_meta_deinit(dt_ckpt_meta *meta);

/* Writes ts and meta to path atomically. DT_EINVAL for a negative step, a
 * model string that is not NUL-terminated UTF-8, or tensors that are not a
 * valid set; DT_EIO when a write, fsync or rename fails (the temporary file
 * is removed and path keeps its old content). */
int dt_ckpt_save(const char *path, const dt_tensors *ts, const dt_ckpt_meta *meta,
                 dt_err *err) DT_WARN_UNUSED;

/* Reads a whole checkpoint into a new set *out (caller deinits). Refuses,
 * with DT_ECORRUPT and nothing allocated, a file that is truncated, has a bad
 * header, offsets that overlap or leave gaps, sizes that do not match the
 * shapes, or a crc32c that does not match. Tensors come back in file (data
 * offset) order. meta may be NULL; it is written only on success. A missing
 * file is DT_ENOTFOUND. Files from other tools load if they hold only F32,
 * F64, I32, I64 tensors of at most 4 dims, each dim >= 1; without a
 * "global_step" the step reads as 0. A "job" that is not a JSON object is
 * DT_ECORRUPT; its fields are the job module's to check. */
int dt_ckpt_load(const char *path, dt_tensors *out, dt_ckpt_meta *meta, dt_err *err) DT_WARN_UNUSED;

/* Saves model.ckpt-<step>.safetensors in log_dir (created if missing), then
 * updates the state file, then deletes the oldest checkpoints beyond
 * max_to_keep (<= 0 keeps all). path_out (may be NULL) receives the file's
 * path. Saving a step again replaces that file and its entry. A missing or
 * unparseable state file (the latter logged as a warning) is rebuilt from
 * the model.ckpt-*.safetensors files present, oldest step first. The new
 * list names what the dir holds: entries whose file is gone are dropped and
 * checkpoint files it does not name are added. On failure (a full disk, say:
 * DT_EIO naming the file and errno) no temporary file is left, the old state
 * file stands with all its entries, and the new checkpoint is removed again
 * unless the old state file already named its step. */
int dt_ckpt_save_in_dir(const char *log_dir, const dt_tensors *ts, const dt_ckpt_meta *meta,
                        int max_to_keep, char *path_out, size_t path_cap,
                        dt_err *err) DT_WARN_UNUSED;

/*
 * Restores the newest loadable checkpoint named by log_dir's state file: on a
 * corrupt latest it logs the reason and falls back to the previous one. A
 * checkpoint file with a higher step than the state file's latest, written
 * after the state file (a save killed between its rename and the state
 * update), comes first, with a warning; one older than the state file does
 * not (the state file was edited since: it is obeyed).
 * Returns 1 when one was loaded (into *out and *meta, path into path_out), 0
 * when the dir holds no checkpoint, negative on error (including: checkpoints
 * listed but none loadable). Without a state file, the file with the highest
 * step is taken. A malformed state file is DT_ECORRUPT naming its line.
 * Files that fail to load are skipped, never deleted.
 */
int dt_ckpt_restore_latest(const char *log_dir, dt_tensors *out, dt_ckpt_meta *meta, char *path_out,
                           size_t path_cap, dt_err *err) DT_WARN_UNUSED;

/*
 * The step of log_dir's latest checkpoint, by name (nothing is loaded): the
 * state file's model_checkpoint_path when it names a file that exists, else
 * the highest model.ckpt-<step>.safetensors present. -1 when there is none
 * or the dir cannot be read. For a ps, which has no model of its own to
 * compare: a latest step at max_steps means the job already ended.
 */
int64_t dt_ckpt_latest_step(const char *log_dir);

/*
 * Locks log_dir (creating it) for one writer: a flock on
 * log_dir/dtrain.lock, which holds the owner's pid. A second chief gets
 * DT_EEXIST naming that pid. The lock dies with the process, so a killed
 * chief never leaves it stale. While locked, temporary files left by a
 * writer that died mid-save are removed. *fd_out is the lock's descriptor.
 */
int dt_ckpt_lock_dir(const char *log_dir, int *fd_out, dt_err *err) DT_WARN_UNUSED;
/* Releases the lock; -1 is a no-op. */
void dt_ckpt_unlock_dir(int fd);

#endif
