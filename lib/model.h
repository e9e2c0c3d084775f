/*
 * model: the variables a job trains, their initial values, and the loss, its
 * gradient, evaluation and prediction on a batch. Every role derives the
 * variables from the same config, so all agree on names, dtypes and shapes.
 *
 * Letters: B examples in a batch, F features, H hidden units, K classes.
 * Every variable is float32. Weights multiply from the right: a layer maps
 * (B, in) to (B, out) as Z = A W + b with W (in, out), b (out).
 *
 * Models (cfg->kind, the job's "model"):
 *   linear    pred = X W + b; loss = mean_i (pred_i - y_i)^2 (y: targets).
 *             "linear/weight" (F, 1), "linear/bias" (1).
 *   logistic  binary; z = X W + b; loss = mean_i of the sigmoid cross-entropy
 *             softplus(z_i) - y_i z_i (y: 0 or 1; "classes" must be 2).
 *             "logistic/weight" (F, 1), "logistic/bias" (1).
 *   softmax   K classes; Z = X W + b; loss = mean_i (logsumexp(Z_i) - Z_i,y_i)
 *             (y: class index 0..K-1). "softmax/weight" (F, K), "softmax/bias" (K).
 *   mlp       num_hidden ReLU layers of hidden[0..] units, then a softmax
 *             layer: "layer0/weight" (F, H0), "layer0/bias" (H0), ...,
 *             "layer<num_hidden>/weight" (H_last, K), "layer<num_hidden>/bias" (K).
 * Every model adds the L2 penalty l2 * 0.5 * sum(w^2) over its weights (not
 * its biases) to the training loss and gradient.
 *
 * Errors name the job field: an unknown "model", "num_features" < 1,
 * "classes" < 2 (or != 2 for logistic), "hidden" empty or with a size < 1,
 * a variable too large for BLAS's int sizes.
 *
 * dt_model_specs, _init and _describe keep no state. A dt_model
 * handle owns the scratch buffers of one thread's steps and is used by one
 * thread at a time.
 */
#ifndef DT_MODEL_H
#define DT_MODEL_H

#include <stdint.h>

#include "data.h"
#include "err.h"
#include "tensor.h"

#define DT_MAX_HIDDEN 8

typedef enum {
    DT_MODEL_LINEAR = 0,
    DT_MODEL_LOGISTIC,
    DT_MODEL_SOFTMAX,
    DT_MODEL_MLP
} dt_model_kind;
/* The job's names of the models, indexed by dt_model_kind, NULL-terminated. */
extern const char *const dt_model_kind_names[];

/* The job's model fields (conf/README.md), owned here; dt_job embeds them. */
typedef struct {
    dt_model_kind kind;
    int64_t num_features;      /* F >= 1 (the job's "features"); a dense model's <= INT_MAX */
    int num_classes;           /* K: 2 for logistic, >= 2 for softmax and mlp; unused by linear */
    int hidden[DT_MAX_HIDDEN]; /* mlp: units per hidden layer */
    int num_hidden;            /* mlp: number of hidden layers, >= 1 */
    double l2;                 /* L2 penalty on weights (not biases), >= 0 */
    double dropout;            /* mlp: share of hidden units dropped while training, [0, 1) */
} dt_model_config;

/* A weight and a bias per layer, for up to DT_MAX_HIDDEN hidden layers plus
 * the output layer. */
#define DT_MODEL_MAX_VARS (2 * (DT_MAX_HIDDEN + 1))

/* Writes the variable specs (name, dtype, shape; data NULL) into specs,
 * which has room for DT_MODEL_MAX_VARS, and their number into *count. */
int dt_model_specs(const dt_model_config *cfg, dt_tensor *specs, int *count,
                   dt_err *err) DT_WARN_UNUSED;

/* The bytes of all the job's variables together (*bytes), the model's
 * size on the wire without optimizer slots. */
int dt_model_bytes(const dt_model_config *cfg, long long *bytes, dt_err *err) DT_WARN_UNUSED;

/* Fills vars (laid out by dt_model_specs) with initial values: each weight
 * from a normal distribution of its own stream, seeded by seed and the
 * variable's name (not the data's streams), with stddev sqrt(2/fan_in) for
 * layers followed by a ReLU (He) and 1/sqrt(fan_in) otherwise; biases 0. A
 * config or layout that dt_model_specs would refuse is a bug here and aborts. */
void dt_model_init(const dt_model_config *cfg, uint64_t seed, dt_tensors *vars);

/* The generator state a variable's initial values start from (seed and
 * its name): dt_model_init's, and the library's initializers' (lib/api),
 * so a program's variable of a built-in model's name, shape and
 * initializer starts where the built-in one does. */
uint64_t dt_model_init_state(uint64_t seed, const char *name);

/* One-line description for checkpoint metadata, e.g. "linear features=1
 * l2=0" or "mlp features=784 hidden=256,128 classes=10 l2=0". Truncated to
 * cap - 1 bytes, always terminated when cap > 0. */
void dt_model_describe(const dt_model_config *cfg, char *buf, int cap);

/* What the model asks of its data: F, and labels as real targets (linear)
 * or class indices (the others; libsvm's -1/+1 accepted for logistic). */
void dt_model_data_needs(const dt_model_config *cfg, dt_data_needs *out);

typedef struct dt_model dt_model; /* opaque; owns its scratch buffers */

/* A handle for cfg's model: its shape (copied from cfg, which may go
 * away) and scratch buffers that grow to the largest batch seen and are then
 * reused, so steps allocate nothing once the batch size is steady. Also
 * sets OpenBLAS to one thread for the whole process, unless
 * OPENBLAS_NUM_THREADS or OMP_NUM_THREADS is set (workers are processes
 * sharing a few cores). Errors (*out stays NULL): those of dt_model_specs,
 * DT_ENOMEM. */
int dt_model_new(const dt_model_config *cfg, dt_model **out, dt_err *err) DT_WARN_UNUSED;
void dt_model_free(dt_model *m); /* NULL is a no-op */

/* Seeds the stream of m's dropout masks (a training step's, with grads;
 * evaluation and prediction drop nothing). Each worker seeds its own, so
 * a sync run repeats bit for bit. The stream starts at 0 otherwise. */
void dt_model_seed_dropout(dt_model *m, uint64_t seed);

/* Values per example that dt_model_predict writes: 1 for linear and
 * logistic, K for softmax and mlp. */
int dt_model_out_cols(const dt_model *m);

/* Training loss on batch b at vars (mean over the batch plus the L2 term),
 * and its gradient into grads (same layout as vars) when grads is not NULL.
 * Errors (*loss NaN, grads unspecified): DT_EINVAL for vars or grads not laid
 * out as dt_model_specs says, b->cols != num_features, an empty batch, or a
 * label that is not a class of the model (the message names the batch row);
 * DT_ENOMEM when the scratch buffers cannot grow. */
int dt_model_loss_grad(dt_model *m, const dt_tensors *vars, const dt_batch *b, dt_tensors *grads,
                       double *loss, dt_err *err) DT_WARN_UNUSED;

/* As dt_model_loss_grad (grads required), and also the gradient of the
 * loss with respect to the batch's features into dx (B, F) row-major:
 * dloss/dX = dZ_0 W_0^T, for models whose input is itself trained
 * (embedding rows, lib/sparse_model). dx is unspecified on failure. */
int dt_model_loss_grad_input(dt_model *m, const dt_tensors *vars, const dt_batch *b,
                             dt_tensors *grads, float *dx, double *loss,
                             dt_err *err) DT_WARN_UNUSED;

/* The loss heads on their own, for models that make their outputs another
 * way (lib/sparse_model): the head of kind (linear mse, logistic sigmoid,
 * softmax or mlp softmax of num_classes) on B rows of outputs z (B, O),
 * O = dt_model_head_outputs(kind, num_classes). Labels go through
 * dt_model_head_check_labels first (its errors name the kind and the batch
 * row, as dt_model_loss_grad's). dt_model_head_loss adds the rows' losses
 * to *loss_sum and the rows classified right to *correct, and with
 * grad_scale > 0 writes grad_scale * dloss/dz into dz (B, O) (dz unused
 * otherwise, may be NULL). dt_model_head_predict writes what
 * dt_model_predict would for those outputs. A kind out of range is a bug
 * (aborts). */
int dt_model_head_outputs(dt_model_kind kind, int num_classes);
int dt_model_head_check_labels(dt_model_kind kind, int num_classes, const float *y, int B,
                               dt_err *err) DT_WARN_UNUSED;
void dt_model_head_loss(dt_model_kind kind, int num_classes, const float *z, const float *y, int B,
                        double grad_scale, float *dz, double *loss_sum, int64_t *correct);
void dt_model_head_predict(dt_model_kind kind, int num_classes, const float *z, int B, float *out);

/* The last layer's outputs Z (rows, O) row-major, O = dt_model_out_cols(m),
 * that the last dt_model_loss_grad on m computed for its batch, before the
 * loss head: linear the predictions, logistic the logit z (P(y=1) =
 * sigmoid(z)), softmax and mlp the K logits of each row (not the
 * probabilities). Kept apart from the gradient's scratch, so no pass is
 * redone to see them (the chief's "output" histogram). Borrowed; valid
 * until the next call on m. NULL and *rows 0 when the last call on m was
 * not a dt_model_loss_grad that succeeded (evaluate and predict reuse the
 * buffer). */
const float *dt_model_output(const dt_model *m, int *rows);

/* Evaluation on b at vars: *loss is the mean data loss (no L2 term), and
 * *accuracy the fraction of rows whose most likely class is the label
 * (logistic: P(y=1) > 0.5 means class 1); NaN for linear. Large batches are
 * processed in chunks, so the scratch stays a few hundred rows whatever
 * b->rows is. Errors as dt_model_loss_grad; *loss and *accuracy NaN then. */
int dt_model_evaluate(dt_model *m, const dt_tensors *vars, const dt_batch *b, double *loss,
                      double *accuracy, dt_err *err) DT_WARN_UNUSED;

/* Predictions for the rows of b (b->y is not read and may be NULL) into out,
 * laid out (b->rows, out_cols) row-major, out_cols = dt_model_out_cols(m):
 * linear the prediction, logistic P(y=1), softmax and mlp the K class
 * probabilities (each row sums to 1). *out_cols (may be NULL) is set on
 * success. Errors as dt_model_loss_grad, without the label checks; out is
 * unspecified then. */
int dt_model_predict(dt_model *m, const dt_tensors *vars, const dt_batch *b, float *out,
                     int *out_cols, dt_err *err) DT_WARN_UNUSED;

#endif
