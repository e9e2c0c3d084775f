/*
 * optim: the update rules a ps applies to a variable when a gradient arrives.
 *
 * Pure math on float arrays; the caller (ps) holds the variable's lock, owns
 * the slot arrays (one per dt_optim_num_slots, each as long as the variable,
 * zero-initialised unless dt_optim_slot_init says otherwise) and counts the
 * updates applied to the variable (for Adam's bias correction).
 *
 * Sparse variables (tables of rows, lib/table.h) are updated lazily, as
 * TF's sparse apply ops and LazyAdam do: dt_optim_apply_rows changes the
 * rows a gradient names and no other. A row's weights and its slots are one
 * record (below). For sgd, adagrad and ftrl a row the gradient does not
 * name would not move under the dense rule either (its gradient is 0: sgd
 * and adagrad subtract 0, ftrl's n and z stay, and w = f(z, n) with them),
 * so lazy and dense updates agree to the bit on every row (for ftrl, on
 * every row updated once: the first dense update sets every weight to
 * w = f(z, n), 0 for a row never seen, while a lazy one leaves a row's
 * initial weights until its first gradient; with the usual zero init both
 * read 0). Momentum and
 * adam differ: dense, a row with g = 0 still moves by its momentum (m, v
 * decay and w -= lr_t m / (sqrt(v) + eps)); lazy, it stays put, m and v
 * keep their values until the row's next gradient, and the bias correction
 * of that step uses t, the count of updates of the whole variable (TF's
 * beta1_power and beta2_power), not the count of updates of the row.
 */
#ifndef DT_OPTIM_H
#define DT_OPTIM_H

#include <stdint.h>

#include "err.h"

#define DT_OPTIM_MAX_SLOTS 2
/* Room for a slot's name with its NUL (table.h keeps them per table). */
#define DT_OPTIM_NAME_MAX 16

/* The update rules. A config holds one of these; the name is parsed where it
 * enters (a job file, a CreateRequest) and only turned back into text (logs,
 * the wire, a checkpoint's recipe) through dt_optim_name. */
typedef enum {
    DT_OPTIM_SGD = 0,
    DT_OPTIM_MOMENTUM,
    DT_OPTIM_ADAGRAD,
    DT_OPTIM_ADAM,
    DT_OPTIM_FTRL
} dt_optim_kind;

/* The rules' names, indexed by dt_optim_kind, NULL-terminated: the one
 * table for both directions. */
extern const char *const dt_optim_names[];
/* "sgd", "momentum", "adagrad", "adam", "ftrl"; NULL for an unknown kind. */
const char *dt_optim_name(int kind);
/* Inverse of dt_optim_name; -1 when unknown (also for "" and NULL). */
int dt_optim_from_name(const char *name);

typedef struct {
    dt_optim_kind kind;         /* DT_OPTIM_SGD, ... (dt_optim_names) */
    double learning_rate;       /* > 0; ftrl: alpha */
    double momentum;            /* momentum: in [0, 1) */
    int nesterov;               /* momentum: 0 or 1 */
    double beta1, beta2;        /* adam: in [0, 1) */
    double epsilon;             /* adam, adagrad: > 0 */
    double initial_accumulator; /* adagrad, ftrl (n's start): >= 0 */
    double ftrl_l1;             /* ftrl: l1_regularization_strength, >= 0 */
    double ftrl_l2;             /* ftrl: l2_regularization_strength, >= 0 */
    double ftrl_beta;           /* ftrl: beta, >= 0 */
} dt_optim_config;

/* Defaults: sgd, learning_rate 0.01, momentum 0.9, nesterov 0, beta1 0.9,
 * beta2 0.999, epsilon 1e-7, initial_accumulator 0.1, ftrl_l1, ftrl_l2 and
 * ftrl_beta 0. These are TF1's, except epsilon: TF1's AdamOptimizer defaults
 * to 1e-8 and its AdagradOptimizer has none; 1e-7 is the later Keras default
 * for both. */
void dt_optim_defaults(dt_optim_config *cfg);

/* Checks the kind and the ranges above (every field, whatever the kind);
 * errors read "optimizer: \"field\" must be ... (got v)". */
int dt_optim_check(const dt_optim_config *cfg, dt_err *err) DT_WARN_UNUSED;

/* The functions below take a config that passed dt_optim_check; an unknown
 * kind or a slot index out of range is a bug and aborts. */

/* Slots per variable: sgd 0, momentum 1, adagrad 1, adam 2, ftrl 2. */
int dt_optim_num_slots(const dt_optim_config *cfg);
/* Slot i's name as saved in checkpoints ("momentum", "accumulator", "m",
 * "v"; ftrl: "accumulator" (n), "linear" (z), TF's names). */
const char *dt_optim_slot_name(const dt_optim_config *cfg, int i);
/* Initial value of every element of slot i (adagrad and ftrl's n:
 * initial_accumulator). */
float dt_optim_slot_init(const dt_optim_config *cfg, int i);

/*
 * Applies one update to w (n floats) from gradient g with learning rate lr
 * (already scheduled by the caller; cfg->learning_rate is not read). g is n
 * float32 values at any alignment (a received message's bytes are read in
 * place). `t` is the 1-based count of updates to this variable including
 * this one. slots has dt_optim_num_slots arrays. Element i depends only on
 * element i, so applying a variable in runs (w + k, slots + k, g + k) gives
 * the same bits as in one call. The rules are TF's training ops:
 *   sgd       w -= lr*g
 *   momentum  a = mu*a + g; w -= lr*a   (nesterov: w -= lr*g + lr*mu*a)
 *   adagrad   a += g^2; w -= lr*g / (sqrt(a) + eps)   (ApplyAdagradV2)
 *   adam      lr_t = lr*sqrt(1-b2^t)/(1-b1^t); m = b1*m + (1-b1)*g;
 *             v = b2*v + (1-b2)*g^2; w -= lr_t*m / (sqrt(v) + eps)
 *   ftrl      FTRL-Proximal (McMahan et al., "Ad Click Prediction: a View
 *             from the Trenches", KDD 2013, Algorithm 1) as TF's ApplyFtrl
 *             computes it with learning_rate_power -0.5:
 *             n' = n + g^2; z += g - (sqrt(n') - sqrt(n))/lr * w; n = n';
 *             w = |z| <= l1 ? 0 : (sign(z)*l1 - z) / ((beta + sqrt(n))/lr + 2*l2)
 *             (the paper's alpha = lr, beta = beta, lambda1 = l1,
 *             lambda2 = 2*l2: TF's l2_regularization_strength, beta folded
 *             into it as Keras does, l2 + beta/(2*lr)). w is a function of
 *             z and n; it is stored so pulls read it without the slots.
 */
void dt_optim_apply(const dt_optim_config *cfg, double lr, int64_t t, float *w, float *const *slots,
                    const void *g, int64_t n);
/* The same update with the new values written to `out` (n floats) instead
 * of over w: the same bits. out is w, or does not overlap it; slots are
 * updated in place either way. (A ps writes a variable elsewhere while a
 * message being sent still reads its current values.) */
void dt_optim_apply_to(const dt_optim_config *cfg, double lr, int64_t t, const float *w, float *out,
                       float *const *slots, const void *g, int64_t n);

/*
 * The lazy update of rows of a sparse variable: rows[k] is row k's record,
 * its dim weights followed by dt_optim_num_slots slots of dim floats each
 * (slot 0 first), and grads[k] its gradient (dim floats at any alignment,
 * as they lie in a received message), for k < n. Each
 * record is updated by the rule above as a variable of dim floats, with the
 * same lr and t for all of them; no other row changes. Records must not
 * overlap (one row named twice would be updated twice: a caller sums
 * duplicate ids first).
 */
void dt_optim_apply_rows(const dt_optim_config *cfg, double lr, int64_t t, float *const *rows,
                         const void *const *grads, int64_t n, int dim);

/*
 * The update dt_optim_apply would make, tried without writing anything:
 * the first element i (0-based) for which the new w[i] or a new slot value
 * would be NaN or +-Inf (a non-finite gradient element makes one, so this
 * also finds the first non-finite gradient), or n when every value would be
 * finite. The same float arithmetic as the update, so "finite here" is
 * "finite there" to the bit. One pass over w, the slots and g.
 */
int64_t dt_optim_first_nonfinite(const dt_optim_config *cfg, double lr, int64_t t, const float *w,
                                 float *const *slots, const void *g, int64_t n);
/* The same for dt_optim_apply_rows' records: the first row k whose update
 * would give a non-finite weight or slot (*elem, when not NULL, gets the
 * element in the row), or n. */
int64_t dt_optim_rows_first_nonfinite(const dt_optim_config *cfg, double lr, int64_t t,
                                      float *const *rows, const void *const *grads, int64_t n,
                                      int dim, int *elem);

/* ---- learning-rate schedules (TF1's tf.train.*_decay) ----------------- */

#define DT_LR_MAX_BOUNDARIES 16

/* AUTO, the job's default, is resolved by dt_job_finish (lib/job.c) to
 * one of the others; dt_lr_check refuses it. */
typedef enum {
    DT_LR_CONSTANT = 0,
    DT_LR_EXPONENTIAL,
    DT_LR_PIECEWISE,
    DT_LR_COSINE,
    DT_LR_AUTO
} dt_lr_kind;

typedef struct {
    int kind;                                 /* dt_lr_kind */
    int64_t decay_steps;                      /* exponential, cosine: >= 1 */
    double decay_rate;                        /* exponential: > 0 */
    int staircase;                            /* exponential: floor the exponent */
    double alpha;                             /* cosine: the end's fraction of lr, [0, 1) */
    int num_boundaries;                       /* piecewise: 1..DT_LR_MAX_BOUNDARIES */
    int64_t boundaries[DT_LR_MAX_BOUNDARIES]; /* strictly increasing */
    double values[DT_LR_MAX_BOUNDARIES + 1];  /* > 0; one more than boundaries */
} dt_lr_schedule;

/* The schedules' names, indexed by dt_lr_kind, NULL-terminated; the
 * wire's are the same without "auto". */
extern const char *const dt_lr_kind_names[];
extern const char *const dt_lr_wire_kind_names[];
/* "constant", "exponential", "piecewise", "cosine", "auto"; NULL for an
 * unknown kind. */
const char *dt_lr_kind_name(int kind);
/* Inverse of dt_lr_kind_name; -1 when unknown. */
int dt_lr_kind_from_name(const char *name);

/* Checks a schedule's fields; errors read "schedule: ...". */
int dt_lr_check(const dt_lr_schedule *s, dt_err *err) DT_WARN_UNUSED;

/*
 * The learning rate at global_step:
 *   constant     lr
 *   exponential  lr * decay_rate^(step / decay_steps)   (staircase: floor it)
 *   piecewise    values[i] for the first i with step <= boundaries[i],
 *                values[num_boundaries] past the last boundary (lr unused)
 *   cosine       lr * (alpha + (1 - alpha) * (1 + cos(pi * t / T)) / 2),
 *                t = min(step, T), T = decay_steps (TF's cosine_decay)
 */
double dt_lr_at(const dt_lr_schedule *s, double lr, int64_t global_step);

#endif
