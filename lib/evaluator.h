/*
 * evaluator: TF's "evaluator" job. Not part of training: it never talks to
 * a ps and never blocks a worker. It watches the job's log_dir for new
 * checkpoints, scores each on the job's eval_data (scaled as the chief
 * scales it), and writes "eval/loss" (and "eval/accuracy" for classifiers)
 * to its own event file in log_dir/eval/, as TF's Estimator does, so
 * TensorBoard shows training and evaluation as two runs side by side.
 *
 * Like TF's checkpoints_iterator it evaluates the latest checkpoint each
 * time it looks, skipping any saved in between, and it starts from the
 * latest one (a restarted evaluator does not redo the past). A checkpoint
 * deleted, damaged or half-written under it is logged and skipped; only a
 * checkpoint written for another model ends it (DT_EINVAL). It is done
 * (returns 0) once it has scored the final checkpoint: the one whose step
 * reaches the max_steps its metadata records (the job's max_steps for
 * older files without it).
 *
 * Storage faults (the event file cannot be written) drop summaries, logged,
 * never end it. *stop (a signal) ends it with DT_ECANCELLED.
 */
#ifndef DT_EVALUATOR_H
#define DT_EVALUATOR_H

#include <stdatomic.h>

#include "err.h"
#include "job.h"

/* How often log_dir is looked at, in milliseconds. */
#define DT_EVAL_POLL_MS 500

/* The evaluator's loop. The job needs "eval_data" (DT_EINVAL without); a
 * job that leaves "features" or "classes" unset takes them from its
 * training file first (dt_job_infer), as the chief does. */
int dt_evaluator_run(const dt_job *job, const atomic_int *stop, dt_err *err) DT_WARN_UNUSED;

#endif
