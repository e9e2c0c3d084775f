/*
 * chief: worker 0's extra duties (TF's Supervisor / MonitoredTrainingSession).
 *
 * Start-up: wait for every ps; then, in this order of preference,
 *   1. use the model a live ps already holds (a restarted chief never
 *      re-initializes a running job);
 *   2. restore the latest checkpoint in log_dir, global step included;
 *   3. initialize (seeded normal weights, zero biases) at global step 0.
 * Training: like any worker, plus a checkpoint every save_model_secs (keeping
 * max_to_keep) and TensorBoard summaries every summary_secs (at its first
 * and last step too; every summary_steps local steps when that is set): loss,
 * global_step/sec, learning_rate, a histogram of every variable and of the
 * model's output on the batch ("output"), staleness (docs/files.md lists them). A ps that comes
 * back empty mid-job is restored from the latest checkpoint.
 * End: final checkpoint, then every ps is told the job is done.
 * Storage faults: see chief.c's opening comment.
 */
#ifndef DT_CHIEF_H
#define DT_CHIEF_H

#include <stdatomic.h>

#include "err.h"
#include "worker.h"

/* The chief role. On a signal it finishes the step, saves a checkpoint and
 * returns DT_ECANCELLED (the ps tasks keep running for a restart). When the
 * final checkpoint cannot be written within the job's final_save_secs (a
 * full disk), it tells the ps tasks the job ended and returns DT_ESTORAGE:
 * a restart of the job once the log dir has room completes it from the
 * latest checkpoint. Summary and periodic checkpoint failures never end it.
 * Any other failure of its own that is permanent (exit 1 or 2: a missing
 * eval_data, a log dir holding another model's checkpoint, ...) is sent to
 * every ps task as the job's failure, bounded in time, before it returns. */
int dt_chief_run(const dt_worker_params *params, const atomic_int *stop, dt_err *err);

#endif
