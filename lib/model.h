/*
 * model: the variables a job trains and the loss and gradient on a batch.
 * Every role calls these with the same dt_job, so all agree on names, dtypes
 * and shapes.
 *
 * Models (job->model):
 *   linear: pred = X W + b; loss = mean over the batch of (pred - y)^2.
 *     variables "linear/weight" (F, 1) and "linear/bias" (1), float32; the
 *     weight is a column so that X (B, F) times W (F, 1) gives one output.
 *
 * Errors name the job field: an unknown model ("model"), num_features < 1.
 * No state: safe to call from several threads on separate tensors.
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
 * normal distribution (stddev 1/sqrt(fan_in)) seeded by job->seed but drawn
 * from a stream of their own (not the data's), biases 0. A job or layout that
 * dt_model_specs would refuse is a bug here and aborts. */
void dt_model_init(const dt_job *job, dt_tensors *vars);

/* Loss on batch b at vars, and its gradient into grads (same layout as vars)
 * when grads is not NULL. Errors (DT_EINVAL, *loss NaN, grads unspecified):
 * bad job, vars or grads not laid out as dt_model_specs says, b->cols !=
 * num_features, an empty batch. DT_ENOMEM when a B-float scratch fails. */
int dt_model_loss_grad(const dt_job *job, const dt_tensors *vars, const dt_batch *b,
                       dt_tensors *grads, double *loss, dt_err *err) DT_WARN_UNUSED;

/* One-line description for checkpoint metadata, e.g. "linear features=1". */
void dt_model_describe(const dt_job *job, char *buf, int cap);

/* Ordinary least squares y = w x + b over a one-feature batch (e.g. the
 * "line" source's dt_data_all), in double: the closed form tests compare a
 * trained model with. Errors (DT_EINVAL, *w and *b NaN): cols != 1, fewer
 * than 2 rows, every x equal. */
int dt_model_lstsq_line(const dt_batch *all, double *w, double *b, dt_err *err) DT_WARN_UNUSED;

#endif
