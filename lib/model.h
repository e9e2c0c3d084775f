/*
 * model: the variables a job trains and the loss and gradient on a batch.
 * Every role calls these with the same dt_job, so all agree on names, dtypes
 * and shapes.
 *
 * linear: pred = x . w + b; loss = mean over the batch of (pred - y)^2.
 *   variables "linear/weight" (F) and "linear/bias" (1), float32.
 */
#ifndef DT_MODEL_H
#define DT_MODEL_H

#include "cluster.h"
#include "data.h"
#include "err.h"
#include "tensor.h"

#define DT_MODEL_MAX_VARS 16

/* Writes the variable specs (name, dtype, shape; data NULL) into specs,
 * which has room for DT_MODEL_MAX_VARS, and their number into *count. */
int dt_model_specs(const dt_job *job, dt_tensor *specs, int *count, dt_err *err) DT_WARN_UNUSED;

/* Fills vars (laid out by dt_model_specs) with initial values: weights from a
 * normal distribution (stddev 1/sqrt(fan_in)) seeded by job->seed, biases 0. */
void dt_model_init(const dt_job *job, dt_tensors *vars);

/* Loss on batch b at vars, and its gradient into grads (same layout as vars)
 * when grads is not NULL. */
int dt_model_loss_grad(const dt_job *job, const dt_tensors *vars, const dt_batch *b,
                       dt_tensors *grads, double *loss, dt_err *err) DT_WARN_UNUSED;

/* One-line description for checkpoint metadata, e.g. "linear features=1". */
void dt_model_describe(const dt_job *job, char *buf, int cap);

#endif
