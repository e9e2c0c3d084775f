/*
 * checkpoint: a log dir's checkpoints, its "checkpoint" state file,
 * retention and restore. Each checkpoint is a safetensors file
 * (safetensors.h) holding the model's variables and optimizer slots.
 *
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
 *   best_model_checkpoint_path: "model.best.safetensors"  (when there is one)
 * Every write is atomic: temporary file, fsync, rename, fsync of the dir. The
 * state file is rewritten only after the new checkpoint is durable.
 *
 * Retention. A dtrain checkpoint is a regular file named as a save names it
 * (model.ckpt-<step>.safetensors, the step without leading zeros); no other
 * file is ever deleted, whatever the state file lists. After each save the
 * dir holds exactly the newest max_to_keep checkpoints of this run's
 * history, by step, and the state file lists exactly those: the list is
 * rebuilt from the files present, so a file an old list lost (a chief
 * killed after a state update, before its deletions) is ranked by its step,
 * not kept as if new. A step goes back only when a restart restores an
 * older checkpoint than the newest on disk (the newest corrupt, or the state
 * file edited to roll back); the files above the restored step are then
 * stale futures of the dead incarnation, and the first save after the
 * restore deletes them. Restore itself deletes nothing, so a chief killed
 * between its restore and its first save restores the same checkpoint
 * again. Every deletion comes after a newer checkpoint and the state file
 * that drops the deleted ones are durable; the checkpoint just restored
 * from is only deleted once a newer save is. To drop a checkpoint by hand,
 * delete its file: an edited list is not kept.
 *
 * Test-only fault injection: DT_TEST_CKPT_KILL makes dt_ckpt_save_in_dir
 * SIGKILL its own process, as a crash there would: "before_state" once the
 * new checkpoint is durable, before the state file names it;
 * "before_delete" once the new state file is durable, before retention
 * deletes what it drops (only on a save that drops something). Tests set it
 * for one process; nothing else should. DT_TEST_CKPT_STOP=after_save makes
 * the process SIGSTOP itself once, after its first save past step 0.
 */
#ifndef DT_CHECKPOINT_H
#define DT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "safetensors.h"
#include "tensor.h"

/* The names of the scaling statistics' tensors (see above). */
#define DT_CKPT_SCALE_MEAN "scale/mean"
#define DT_CKPT_SCALE_STD "scale/std"

/* Saves model.ckpt-<step>.safetensors in log_dir (created if missing), then
 * applies retention (above): the state file names it as latest and lists
 * the newest max_to_keep (<= 0: all) checkpoints present with a step no
 * higher, by step; once that is durable, the others are deleted (those
 * above its step too: stale futures). path_out (may be NULL) receives the
 * file's path. Saving a step again replaces that file. The old state file
 * is not needed (an unparseable one is logged as a warning and replaced).
 * On failure (a full disk, say: DT_EIO naming the file and errno) nothing
 * is deleted, no temporary file is left, the old state file stands, and the
 * new checkpoint is removed again unless a file of its step was there
 * before (the rename replaced it). */
int dt_ckpt_save_in_dir(const char *log_dir, const dt_tensors *ts, const dt_safetensors_meta *meta,
                        int max_to_keep, char *path_out, size_t path_cap,
                        dt_err *err) DT_WARN_UNUSED;

/* dt_ckpt_save_in_dir of ts followed by the parts of rows[0..nrows)
 * (safetensors.h's rows writers, one a table, made in log_dir; borrowed):
 * a sparse model's save that never holds a table in memory. Same file,
 * same rules, same errors. */
int dt_ckpt_save_rows_in_dir(const char *log_dir, const dt_tensors *ts,
                             dt_safetensors_rows *const *rows, int nrows,
                             const dt_safetensors_meta *meta, int max_to_keep, char *path_out,
                             size_t path_cap, dt_err *err) DT_WARN_UNUSED;

/*
 * Retention without a save, for a chief that finds its job already complete
 * (it saves nothing more, so no save would tidy the dir): takes the
 * checkpoint dt_ckpt_restore_latest picks (loading it, so only a good one
 * anchors), names it latest in the state file with the newest max_to_keep
 * checkpoints up to its step, and deletes the older rest. Files above its
 * step stay (no newer checkpoint was made). Returns 1 when done, 0 when
 * there is no checkpoint or the one picked is not named as dtrain names
 * them (nothing is deleted), negative as restore fails or when the state
 * file cannot be written (nothing deleted either).
 */
int dt_ckpt_retain(const char *log_dir, int max_to_keep, dt_err *err) DT_WARN_UNUSED;

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
 * Files that fail to load are skipped; restore never deletes anything (the
 * first save after it drops what retention drops, above).
 */
int dt_ckpt_restore_latest(const char *log_dir, dt_tensors *out, dt_safetensors_meta *meta,
                           char *path_out, size_t path_cap, dt_err *err) DT_WARN_UNUSED;

/*
 * The step of log_dir's latest checkpoint, by name (nothing is loaded): the
 * state file's model_checkpoint_path when it names a file that exists, else
 * the highest model.ckpt-<step>.safetensors present. -1 when there is none
 * or the dir cannot be read. For a ps, which has no model of its own to
 * compare: a latest step at max_steps means the job already ended.
 */
int64_t dt_ckpt_latest_step(const char *log_dir);

/*
 * The header of log_dir's latest checkpoint (dt_ckpt_latest_step's file;
 * nothing else is loaded): 1 with *meta filled (caller deinits) and its
 * path in path_out, 0 when there is none, negative when it cannot be read.
 */
int dt_ckpt_latest_meta(const char *log_dir, dt_safetensors_meta *meta, char *path_out,
                        size_t path_cap, dt_err *err) DT_WARN_UNUSED;

/*
 * The best model: with eval_data, the chief keeps apart the values of its
 * evaluation with the lowest eval loss so far, as a scikit-learn or TF
 * estimator's early stopping does, since the last step is not always the
 * best (an async job's noise, a set it begins to overfit). It is
 * log_dir/model.best.safetensors: the variables and the scaling
 * statistics, the step evaluated as global_step, the loss as "eval_loss",
 * no optimizer slots (a model to serve, not one to resume from). eval and
 * predict take it by default. The state file names it
 * (best_model_checkpoint_path: "model.best.safetensors") from its first
 * save on; retention never deletes it.
 * dt_ckpt_save_best: writes it atomically (meta->has_eval_loss set), a
 * sparse model's tables (nrows writers, rows NULL when 0) streamed after
 * ts as dt_ckpt_save_rows_in_dir writes a checkpoint's, then names it in
 * the state file when there is one (else the next checkpoint save does).
 * Errors as dt_safetensors_save's; the old best stands.
 * dt_ckpt_best_meta: its header, as dt_ckpt_latest_meta gives the latest's:
 * 1 with *meta filled (caller deinits) and its path in path_out, 0 when
 * log_dir holds none (a regular file), negative when it cannot be read or
 * records no eval_loss (DT_ECORRUPT).
 */
#define DT_CKPT_BEST_FILE "model.best.safetensors"
int dt_ckpt_save_best(const char *log_dir, const dt_tensors *ts, dt_safetensors_rows *const *rows,
                      int nrows, const dt_safetensors_meta *meta, dt_err *err) DT_WARN_UNUSED;
int dt_ckpt_best_meta(const char *log_dir, dt_safetensors_meta *meta, char *path_out,
                      size_t path_cap, dt_err *err) DT_WARN_UNUSED;

/*
 * The job id file, log_dir/job_id: one line, the job's id (32 lowercase
 * hex digits, as the checkpoints' "job_id" metadata). The chief writes it
 * (atomically, under the log dir's lock) before its first Create, so a
 * chief killed before its first save comes back with the same id; a ps
 * reads it only in a log dir its own config names.
 * dt_ckpt_job_id_load: 1 with the id in out (DT_SAFETENSORS_JOB_ID_MAX
 * bytes), 0 when there is no such file, DT_ECORRUPT naming the file when
 * it holds anything else, DT_EIO when it cannot be read.
 */
#define DT_CKPT_JOB_ID_FILE "job_id"
int dt_ckpt_job_id_load(const char *log_dir, char *out, dt_err *err) DT_WARN_UNUSED;
int dt_ckpt_job_id_save(const char *log_dir, const char *job_id, dt_err *err) DT_WARN_UNUSED;

/*
 * Locks log_dir (creating it) for one writer, the chief: the directory lock
 * of dirlock.h, a flock on log_dir/dtrain.lock that holds the owner's pid.
 * A second chief gets DT_EEXIST naming that pid (and removes nothing). The
 * lock dies with the process, so a killed chief never leaves it stale.
 * Once locked, temporary files left by a writer that died mid-save
 * ("checkpoint.tmp.<pid>", "model.ckpt-<step>.safetensors.tmp.<pid>",
 * "model.best.safetensors.tmp.<pid>"; no
 * other name) are removed. *fd_out is the lock's descriptor (-1 on
 * failure).
 */
int dt_ckpt_lock_dir(const char *log_dir, int *fd_out, dt_err *err) DT_WARN_UNUSED;
/* Releases the lock; -1 is a no-op. */
void dt_ckpt_unlock_dir(int fd);

#endif
