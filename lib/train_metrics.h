/*
 * train_metrics: the /metrics families of the training tasks (workers,
 * the chief) and the evaluator: steps, examples, the step's time split
 * (compute, round trips to the ps tasks, waiting), retries by cause, the
 * loss, the chief's checkpoints and storage faults, the evaluator's
 * scores. The training loop calls the dt_train_metrics_* hooks; each is a
 * few relaxed atomic updates (metrics.h), whether /metrics is served or
 * not. Process-wide: one role a process.
 *
 * Threading: every hook may run on any thread (the pipelined worker's
 * sender makes round trips beside the loop's compute).
 */
#ifndef DT_TRAIN_METRICS_H
#define DT_TRAIN_METRICS_H

#include <stdint.h>

#include "err.h"

typedef enum { DT_PHASE_COMPUTE = 0, DT_PHASE_ROUND_TRIP, DT_PHASE_WAIT, DT_NUM_PHASES } dt_phase;

/* Registers the collector. evaluator: the evaluator's families; else the
 * training task's (the chief's too when chief). */
int dt_train_metrics_register(int evaluator, int chief, dt_err *err) DT_WARN_UNUSED;

/* A step was pushed: global_step as the ps answered, the batch's loss and
 * examples. Its wall time is the time since the last call. */
void dt_train_metrics_step(int64_t global_step, double loss, int examples);
/* secs spent in phase. */
void dt_train_metrics_phase(dt_phase phase, double secs);
/* A round of calls to the ps tasks (method "/dtrain.ParameterServer/Push")
 * took secs. Counted in the round-trip phase too. */
void dt_train_metrics_call(const char *method, double secs);
/* A ps call failed with code (a dt_err_code) and is retried. */
void dt_train_metrics_retry(int code);
/* The chief saved the checkpoint of step in secs. */
void dt_train_metrics_saved(int64_t step, double secs);
/* A checkpoint (checkpoint 1) or a batch of summaries (0) could not be
 * written; why says why (a full disk counts as such). */
void dt_train_metrics_storage_failed(int checkpoint, const dt_err *why);
/* The evaluator (or the chief's own evaluation) scored step. accuracy: NaN
 * for a regression. */
void dt_train_metrics_scored(int64_t step, double loss, double accuracy);

#endif
