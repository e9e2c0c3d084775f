/*
 * optim: TensorFlow 1.x update rules on float arrays.
 *
 * Each rule is the one TF's training ops apply (ApplyGradientDescent,
 * ApplyMomentum, ApplyAdagradV2, ApplyAdam, ApplyFtrl), element by element, in float
 * arithmetic like TF's float32 kernels; only the per-call scalars (Adam's
 * bias-corrected step) are worked out in double. The loops carry no
 * dependence between elements so the compiler can vectorise them.
 *
 * Invariants: the config has passed dt_optim_check (an unknown kind here is a
 * bug and aborts); slots are as long as w and hold dt_optim_num_slots arrays.
 * Threading: no state of its own; the caller serialises updates of one
 * variable (the ps holds its lock).
 */
#include "optim.h"

#include <math.h>
#include <string.h>

#include "text.h"

const char *const dt_optim_names[] = {"sgd", "momentum", "adagrad", "adam", "ftrl", NULL};

#define NUM_KINDS ((int)(sizeof dt_optim_names / sizeof dt_optim_names[0]) - 1)
_Static_assert(NUM_KINDS == DT_OPTIM_FTRL + 1, "dt_optim_names: one name per dt_optim_kind");

const char *dt_optim_name(int kind) {
    return kind >= 0 && kind < NUM_KINDS ? dt_optim_names[kind] : NULL;
}

int dt_optim_from_name(const char *name) {
    for (int k = 0; name && k < NUM_KINDS; k++)
        if (strcmp(name, dt_optim_names[k]) == 0) return k;
    return -1;
}

static dt_optim_kind known_kind(const dt_optim_config *cfg) {
    DT_ASSERT(dt_optim_name(cfg->kind)); /* dt_optim_check rejects it first */
    return cfg->kind;
}

void dt_optim_defaults(dt_optim_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->kind = DT_OPTIM_SGD;
    cfg->learning_rate = 0.01;
    cfg->momentum = 0.9;
    cfg->nesterov = 0;
    cfg->beta1 = 0.9;
    cfg->beta2 = 0.999;
    cfg->epsilon = 1e-7;
    cfg->initial_accumulator = 0.1;
    cfg->ftrl_l1 = 0;
    cfg->ftrl_l2 = 0;
    cfg->ftrl_beta = 0;
}

/* 1 when v lies in [lo, hi) (hi_open) or [lo, hi]; NaN fails both. */
static int in_range(double v, double lo, double hi, int hi_open) {
    return v >= lo && (hi_open ? v < hi : v <= hi);
}

int dt_optim_check(const dt_optim_config *cfg, dt_err *err) {
    /* The name was parsed where it entered; a kind out of range here is a
     * caller's config built by hand. */
    if (!dt_optim_name(cfg->kind)) {
        char names[128];
        return dt_err_set(err, DT_EINVAL, "optimizer: unknown kind %d (want %s)", (int)cfg->kind,
                          dt_text_choices(names, sizeof names, dt_optim_names, 0));
    }
    if (!(cfg->learning_rate > 0 && isfinite(cfg->learning_rate)))
        return dt_err_set(err, DT_EINVAL,
                          "optimizer: \"learning_rate\" must be a positive number (got %g)",
                          cfg->learning_rate);
    /* Every field is checked whatever the kind, so a bad value never waits
     * silently for the day someone switches optimizers. */
    if (!in_range(cfg->momentum, 0, 1, 1))
        return dt_err_set(err, DT_EINVAL, "optimizer: \"momentum\" must be in [0, 1) (got %g)",
                          cfg->momentum);
    if (cfg->nesterov != 0 && cfg->nesterov != 1)
        return dt_err_set(err, DT_EINVAL, "optimizer: \"nesterov\" must be 0 or 1 (got %d)",
                          cfg->nesterov);
    if (!in_range(cfg->beta1, 0, 1, 1))
        return dt_err_set(err, DT_EINVAL, "optimizer: \"beta1\" must be in [0, 1) (got %g)",
                          cfg->beta1);
    if (!in_range(cfg->beta2, 0, 1, 1))
        return dt_err_set(err, DT_EINVAL, "optimizer: \"beta2\" must be in [0, 1) (got %g)",
                          cfg->beta2);
    if (!(cfg->epsilon > 0 && isfinite(cfg->epsilon)))
        return dt_err_set(err, DT_EINVAL,
                          "optimizer: \"epsilon\" must be a positive number (got %g)",
                          cfg->epsilon);
    if (!(cfg->initial_accumulator >= 0 && isfinite(cfg->initial_accumulator)))
        return dt_err_set(err, DT_EINVAL,
                          "optimizer: \"initial_accumulator\" must be a number >= 0 (got %g)",
                          cfg->initial_accumulator);
    const struct {
        const char *name;
        double value;
    } ftrl[] = {{"l1_regularization_strength", cfg->ftrl_l1},
                {"l2_regularization_strength", cfg->ftrl_l2},
                {"ftrl_beta", cfg->ftrl_beta}};
    for (size_t i = 0; i < sizeof ftrl / sizeof ftrl[0]; i++)
        if (!(ftrl[i].value >= 0 && isfinite(ftrl[i].value)))
            return dt_err_set(err, DT_EINVAL, "optimizer: \"%s\" must be a number >= 0 (got %g)",
                              ftrl[i].name, ftrl[i].value);
    return 0;
}

static int slots_of(dt_optim_kind k) {
    switch (k) {
    case DT_OPTIM_SGD: return 0;
    case DT_OPTIM_MOMENTUM: return 1;
    case DT_OPTIM_ADAGRAD: return 1;
    case DT_OPTIM_ADAM: return 2;
    case DT_OPTIM_FTRL: return 2;
    default: return 0;
    }
}

int dt_optim_num_slots(const dt_optim_config *cfg) {
    return slots_of(known_kind(cfg));
}

const char *dt_optim_slot_name(const dt_optim_config *cfg, int i) {
    DT_ASSERT(i >= 0 && i < dt_optim_num_slots(cfg));
    switch (known_kind(cfg)) {
    case DT_OPTIM_MOMENTUM: return "momentum";
    case DT_OPTIM_ADAGRAD: return "accumulator";
    case DT_OPTIM_ADAM: return i == 0 ? "m" : "v";
    case DT_OPTIM_FTRL: return i == 0 ? "accumulator" : "linear";
    default: return NULL;
    }
}

float dt_optim_slot_init(const dt_optim_config *cfg, int i) {
    DT_ASSERT(i >= 0 && i < dt_optim_num_slots(cfg));
    dt_optim_kind k = known_kind(cfg);
    int accumulator = k == DT_OPTIM_ADAGRAD || (k == DT_OPTIM_FTRL && i == 0);
    return accumulator ? (float)cfg->initial_accumulator : 0.0f;
}

/* Gradient element i of bytes at any alignment: a memcpy load, which the
 * compiler turns into a plain (vector) load. */
static inline float grad_at(const uint8_t *g, int64_t i) {
    float x;
    memcpy(&x, g + 4 * i, sizeof x);
    return x;
}

/* The simple rules run in blocks of BLOCK elements, then the rest one by
 * one: GCC at -O2 vectorizes only loops whose length it knows, so the inner
 * loop of 8 becomes SIMD loads, multiplies and stores (the same IEEE
 * operations per element, so the same bits). The square roots of adagrad
 * and adam stay scalar: without -fno-math-errno GCC keeps a libm call
 * beside each one. */
#define BLOCK 8

/* Each rule reads w and writes out, which is w or does not overlap it. The
 * vectorized ones come twice (SIMD_RULES): in place, and to another array,
 * each with restrict pointers, which is what lets GCC vectorize them; one
 * macro body keeps the two the same arithmetic. */

/* out = w - lr * g */
#define SGD_BODY(i) out[i] = w[i] - lr * grad_at(g, i)
/* a = mu*a + g; out = w - lr*a */
#define MOMENTUM_BODY(i)                                                                           \
    a[i] = mu * a[i] + grad_at(g, i);                                                              \
    out[i] = w[i] - lr * a[i]
/* a = mu*a + g; out = w - (lr*g + lr*mu*a) */
#define NESTEROV_BODY(i)                                                                           \
    const float gi = grad_at(g, i);                                                                \
    a[i] = mu * a[i] + gi;                                                                         \
    out[i] = w[i] - (lr * gi + lr * mu * a[i])

#define BLOCKED(BODY)                                                                              \
    int64_t i = 0;                                                                                 \
    for (; i + BLOCK <= n; i += BLOCK)                                                             \
        for (int k = 0; k < BLOCK; k++) {                                                          \
            BODY(i + k);                                                                           \
        }                                                                                          \
    for (; i < n; i++) {                                                                           \
        BODY(i);                                                                                   \
    }

static void sgd_in_place(float *restrict w, const uint8_t *restrict g, int64_t n, float lr) {
    float *out = w;
    BLOCKED(SGD_BODY)
}

static void sgd_to(const float *restrict w, float *restrict out, const uint8_t *restrict g,
                   int64_t n, float lr) {
    BLOCKED(SGD_BODY)
}

static void momentum_in_place(float *restrict w, float *restrict a, const uint8_t *restrict g,
                              int64_t n, float lr, float mu) {
    float *out = w;
    BLOCKED(MOMENTUM_BODY)
}

static void momentum_to(const float *restrict w, float *restrict out, float *restrict a,
                        const uint8_t *restrict g, int64_t n, float lr, float mu) {
    BLOCKED(MOMENTUM_BODY)
}

static void nesterov_in_place(float *restrict w, float *restrict a, const uint8_t *restrict g,
                              int64_t n, float lr, float mu) {
    float *out = w;
    BLOCKED(NESTEROV_BODY)
}

static void nesterov_to(const float *restrict w, float *restrict out, float *restrict a,
                        const uint8_t *restrict g, int64_t n, float lr, float mu) {
    BLOCKED(NESTEROV_BODY)
}

/* The scalars of one update, worked out once per call (in double, then
 * rounded to float like TF's float32 kernels), so dt_optim_apply_rows pays
 * for them once and not per row. */
typedef struct {
    dt_optim_kind kind;
    float lr;
    float mu;                           /* momentum */
    float eps;                          /* adagrad, adam */
    float b1, b2, one_b1, one_b2, lr_t; /* adam */
    float l1, l2_twice;                 /* ftrl: l1, 2*l2 + beta/lr */
    int nesterov;
} step;

static step step_of(const dt_optim_config *cfg, double lr, int64_t t) {
    DT_ASSERT(t >= 1);
    step st = {.kind = known_kind(cfg), .lr = (float)lr};
    st.mu = (float)cfg->momentum;
    st.nesterov = cfg->nesterov;
    st.eps = (float)cfg->epsilon;
    const double b1 = cfg->beta1, b2 = cfg->beta2;
    st.b1 = (float)b1;
    st.b2 = (float)b2;
    st.one_b1 = (float)(1.0 - b1);
    st.one_b2 = (float)(1.0 - b2);
    /* Only Adam reads lr_t; the two pow calls cost more than an sgd update
     * of a run of a few thousand elements (a ps applies a gradient run by
     * run, each as the message's slices hold it). */
    if (st.kind == DT_OPTIM_ADAM)
        st.lr_t = (float)(lr * sqrt(1.0 - pow(b2, (double)t)) / (1.0 - pow(b1, (double)t)));
    st.l1 = (float)cfg->ftrl_l1;
    /* Keras folds beta into TF's l2 as l2 + beta/(2*lr); the kernel's
     * quadratic term is sqrt(n)/lr + 2*l2. */
    st.l2_twice = (float)(2.0 * cfg->ftrl_l2 + cfg->ftrl_beta / lr);
    return st;
}

/* One update of n elements: w read, the new values written to out (w, or
 * not overlapping it), slots in place; g is n floats at any alignment. */
static void apply_step(const step *st, const float *w, float *out, float *const *slots,
                       const uint8_t *g, int64_t n) {
    const float lr_f = st->lr;
    const int in_place = out == w;
    switch (st->kind) {
    case DT_OPTIM_SGD:
        /* ApplyGradientDescent: w -= lr * g */
        if (in_place)
            sgd_in_place(out, g, n, lr_f);
        else
            sgd_to(w, out, g, n, lr_f);
        break;
    case DT_OPTIM_MOMENTUM: {
        /* ApplyMomentum: accum = mu*accum + g; w -= lr*accum; with
         * use_nesterov: w -= lr*g + lr*mu*accum */
        const float mu = st->mu;
        if (st->nesterov && in_place)
            nesterov_in_place(out, slots[0], g, n, lr_f, mu);
        else if (st->nesterov)
            nesterov_to(w, out, slots[0], g, n, lr_f, mu);
        else if (in_place)
            momentum_in_place(out, slots[0], g, n, lr_f, mu);
        else
            momentum_to(w, out, slots[0], g, n, lr_f, mu);
        break;
    }
    case DT_OPTIM_ADAGRAD: {
        /* ApplyAdagradV2: accum += g^2; w -= lr * g / (sqrt(accum) + eps).
         * TF1's AdagradOptimizer uses ApplyAdagrad, the same rule without
         * eps; the tiny eps (1e-7 by default) only matters when accum is 0,
         * where it turns a 0/0 NaN into no step. */
        float *accum = slots[0];
        const float eps = st->eps;
        for (int64_t i = 0; i < n; i++) {
            const float gi = grad_at(g, i);
            accum[i] += gi * gi;
            out[i] = w[i] - lr_f * gi / (sqrtf(accum[i]) + eps);
        }
        break;
    }
    case DT_OPTIM_ADAM: {
        /* ApplyAdam: lr_t = lr*sqrt(1-b2^t)/(1-b1^t); m = b1*m + (1-b1)*g;
         * v = b2*v + (1-b2)*g^2; w -= lr_t * m / (sqrt(v) + eps) */
        float *m = slots[0], *v = slots[1];
        const float b1_f = st->b1, b2_f = st->b2, eps = st->eps, lr_t = st->lr_t;
        const float one_b1 = st->one_b1, one_b2 = st->one_b2;
        for (int64_t i = 0; i < n; i++) {
            const float gi = grad_at(g, i);
            m[i] = b1_f * m[i] + one_b1 * gi;
            v[i] = b2_f * v[i] + one_b2 * gi * gi;
            out[i] = w[i] - lr_t * m[i] / (sqrtf(v[i]) + eps);
        }
        break;
    }
    case DT_OPTIM_FTRL: {
        /* ApplyFtrl, lr_power -0.5: n' = n + g^2;
         * z += g - (sqrt(n') - sqrt(n))/lr * w;
         * w = |z| > l1 ? (sign(z)*l1 - z) / (sqrt(n')/lr + 2*l2) : 0; n = n' */
        float *accum = slots[0], *linear = slots[1];
        const float l1 = st->l1, l2_twice = st->l2_twice;
        for (int64_t i = 0; i < n; i++) {
            const float gi = grad_at(g, i);
            const float n_new = accum[i] + gi * gi, root = sqrtf(n_new);
            linear[i] += gi - (root - sqrtf(accum[i])) / lr_f * w[i];
            const float z = linear[i];
            out[i] = fabsf(z) > l1 ? (copysignf(l1, z) - z) / (root / lr_f + l2_twice) : 0.0f;
            accum[i] = n_new;
        }
        break;
    }
    default: break;
    }
}

/* ---- finiteness of an update, before it is made ------------------------ */

/* x - x is 0 for a finite x and NaN for an Inf or a NaN; a block's sum of
 * them is NaN exactly when one of the block's values is not finite. */
#define NONFINITE(x) ((x) - (x))

/* Runs BODY(i), which adds NONFINITE of every value element i would get to
 * `acc`, over [0, n) in blocks of BLOCK (vectorised like BLOCKED above);
 * returns the first element whose acc is NaN, or n. Nothing is written. */
#define FIRST_BAD(BODY)                                                                            \
    for (int64_t i0 = 0; i0 < n; i0 += BLOCK) {                                                    \
        const int64_t end = i0 + BLOCK <= n ? i0 + BLOCK : n;                                      \
        float acc = 0.0f;                                                                          \
        if (end - i0 == BLOCK) {                                                                   \
            for (int k = 0; k < BLOCK; k++) {                                                      \
                BODY(i0 + k);                                                                      \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = i0; i < end; i++) {                                                   \
                BODY(i);                                                                           \
            }                                                                                      \
        }                                                                                          \
        if (acc == acc) continue;                                                                  \
        for (int64_t i = i0; i < end; i++) {                                                       \
            acc = 0.0f;                                                                            \
            BODY(i);                                                                               \
            if (acc != acc) return i;                                                              \
        }                                                                                          \
    }                                                                                              \
    return n;

/* The same arithmetic as apply_step's, into locals. */
#define SGD_CHECK(i) acc += NONFINITE(w[i] - lr * grad_at(g, i))
#define MOMENTUM_CHECK(i)                                                                          \
    {                                                                                              \
        const float ai = mu * a[i] + grad_at(g, i);                                                \
        acc += NONFINITE(ai) + NONFINITE(w[i] - lr * ai);                                          \
    }
#define NESTEROV_CHECK(i)                                                                          \
    {                                                                                              \
        const float gi = grad_at(g, i), ai = mu * a[i] + gi;                                       \
        acc += NONFINITE(ai) + NONFINITE(w[i] - (lr * gi + lr * mu * ai));                         \
    }
#define ADAGRAD_CHECK(i)                                                                           \
    {                                                                                              \
        const float gi = grad_at(g, i), ai = a[i] + gi * gi;                                       \
        acc += NONFINITE(ai) + NONFINITE(w[i] - lr * gi / (sqrtf(ai) + eps));                      \
    }
#define ADAM_CHECK(i)                                                                              \
    {                                                                                              \
        const float gi = grad_at(g, i), mi = b1 * m[i] + one_b1 * gi;                              \
        const float vi = b2 * v[i] + one_b2 * gi * gi;                                             \
        acc += NONFINITE(mi) + NONFINITE(vi) + NONFINITE(w[i] - lr_t * mi / (sqrtf(vi) + eps));    \
    }
#define FTRL_CHECK(i)                                                                              \
    {                                                                                              \
        const float gi = grad_at(g, i), n_new = a[i] + gi * gi, root = sqrtf(n_new);               \
        const float z = z_old[i] + (gi - (root - sqrtf(a[i])) / lr * w[i]);                        \
        const float wi = fabsf(z) > l1 ? (copysignf(l1, z) - z) / (root / lr + l2_twice) : 0.0f;   \
        acc += NONFINITE(n_new) + NONFINITE(z) + NONFINITE(wi);                                    \
    }

static int64_t sgd_first_bad(const float *restrict w, const uint8_t *restrict g, int64_t n,
                             float lr) {
    FIRST_BAD(SGD_CHECK)
}

static int64_t momentum_first_bad(const float *restrict w, const float *restrict a,
                                  const uint8_t *restrict g, int64_t n, float lr, float mu) {
    FIRST_BAD(MOMENTUM_CHECK)
}

static int64_t nesterov_first_bad(const float *restrict w, const float *restrict a,
                                  const uint8_t *restrict g, int64_t n, float lr, float mu) {
    FIRST_BAD(NESTEROV_CHECK)
}

static int64_t first_bad_step(const step *st, const float *w, float *const *slots, const uint8_t *g,
                              int64_t n) {
    const float lr = st->lr;
    switch (st->kind) {
    case DT_OPTIM_SGD: return sgd_first_bad(w, g, n, lr);
    case DT_OPTIM_MOMENTUM:
        return st->nesterov ? nesterov_first_bad(w, slots[0], g, n, lr, st->mu)
                            : momentum_first_bad(w, slots[0], g, n, lr, st->mu);
    case DT_OPTIM_ADAGRAD: {
        const float *a = slots[0];
        const float eps = st->eps;
        FIRST_BAD(ADAGRAD_CHECK)
    }
    case DT_OPTIM_ADAM: {
        const float *m = slots[0], *v = slots[1];
        const float b1 = st->b1, b2 = st->b2, eps = st->eps, lr_t = st->lr_t;
        const float one_b1 = st->one_b1, one_b2 = st->one_b2;
        FIRST_BAD(ADAM_CHECK)
    }
    case DT_OPTIM_FTRL: {
        const float *a = slots[0], *z_old = slots[1];
        const float l1 = st->l1, l2_twice = st->l2_twice;
        FIRST_BAD(FTRL_CHECK)
    }
    default: return n;
    }
}

int64_t dt_optim_first_nonfinite(const dt_optim_config *cfg, double lr, int64_t t, const float *w,
                                 float *const *slots, const void *g, int64_t n) {
    DT_ASSERT(n >= 0);
    step st = step_of(cfg, lr, t);
    return first_bad_step(&st, w, slots, g, n);
}

int64_t dt_optim_rows_first_nonfinite(const dt_optim_config *cfg, double lr, int64_t t,
                                      float *const *rows, const void *const *grads, int64_t n,
                                      int dim, int *elem) {
    DT_ASSERT(n >= 0 && dim >= 1);
    step st = step_of(cfg, lr, t);
    const int nslots = slots_of(st.kind);
    for (int64_t k = 0; k < n; k++) {
        float *w = rows[k], *slots[DT_OPTIM_MAX_SLOTS] = {NULL};
        for (int s = 0; s < nslots; s++)
            slots[s] = w + (size_t)(s + 1) * (size_t)dim;
        int64_t bad = first_bad_step(&st, w, slots, grads[k], dim);
        if (bad < dim) {
            if (elem) *elem = (int)bad;
            return k;
        }
    }
    return n;
}

void dt_optim_apply(const dt_optim_config *cfg, double lr, int64_t t, float *w, float *const *slots,
                    const void *g, int64_t n) {
    dt_optim_apply_to(cfg, lr, t, w, w, slots, g, n);
}

void dt_optim_apply_to(const dt_optim_config *cfg, double lr, int64_t t, const float *w, float *out,
                       float *const *slots, const void *g, int64_t n) {
    DT_ASSERT(n >= 0);
    step st = step_of(cfg, lr, t);
    apply_step(&st, w, out, slots, g, n);
}

void dt_optim_apply_rows(const dt_optim_config *cfg, double lr, int64_t t, float *const *rows,
                         const void *const *grads, int64_t n, int dim) {
    DT_ASSERT(n >= 0 && dim >= 1);
    step st = step_of(cfg, lr, t);
    /* From the step's own kind, so the static analyzer sees the slots
     * apply_step reads for that kind set here. */
    const int nslots = slots_of(st.kind);
    for (int64_t k = 0; k < n; k++) {
        /* The record: dim weights, then each slot's dim values. */
        float *w = rows[k], *slots[DT_OPTIM_MAX_SLOTS] = {NULL};
        for (int s = 0; s < nslots; s++)
            slots[s] = w + (size_t)(s + 1) * (size_t)dim;
        apply_step(&st, w, w, slots, grads[k], dim);
    }
}

/* ---- learning-rate schedules ------------------------------------------- */

const char *const dt_lr_kind_names[] = {"constant", "exponential", "piecewise",
                                        "cosine",   "auto",        NULL};
const char *const dt_lr_wire_kind_names[] = {"constant", "exponential", "piecewise", "cosine",
                                             NULL};

const char *dt_lr_kind_name(int kind) {
    if (kind < 0 || kind > DT_LR_AUTO) return NULL;
    return dt_lr_kind_names[kind];
}

int dt_lr_kind_from_name(const char *name) {
    for (int k = 0; k <= DT_LR_AUTO; k++)
        if (strcmp(name, dt_lr_kind_names[k]) == 0) return k;
    return -1;
}

int dt_lr_check(const dt_lr_schedule *s, dt_err *err) {
    switch (s->kind) {
    case DT_LR_CONSTANT: return 0;
    case DT_LR_EXPONENTIAL:
        if (s->decay_steps < 1)
            return dt_err_set(err, DT_EINVAL, "schedule: \"decay_steps\" must be >= 1 (got %lld)",
                              (long long)s->decay_steps);
        if (!(s->decay_rate > 0) || !isfinite(s->decay_rate))
            return dt_err_set(err, DT_EINVAL, "schedule: \"decay_rate\" must be > 0 (got %g)",
                              s->decay_rate);
        return 0;
    case DT_LR_COSINE:
        if (s->decay_steps < 1)
            return dt_err_set(err, DT_EINVAL,
                              "schedule: cosine decays over max_steps, which must be >= 1 (got "
                              "%lld)",
                              (long long)s->decay_steps);
        if (!(s->alpha >= 0 && s->alpha < 1))
            return dt_err_set(err, DT_EINVAL,
                              "schedule: \"cosine_alpha\" must be in [0, 1) (got %g)", s->alpha);
        return 0;
    case DT_LR_PIECEWISE:
        if (s->num_boundaries < 1 || s->num_boundaries > DT_LR_MAX_BOUNDARIES)
            return dt_err_set(err, DT_EINVAL,
                              "schedule: piecewise needs 1 to %d \"boundaries\" (got %d)",
                              DT_LR_MAX_BOUNDARIES, s->num_boundaries);
        for (int i = 1; i < s->num_boundaries; i++)
            if (s->boundaries[i] <= s->boundaries[i - 1])
                return dt_err_set(err, DT_EINVAL,
                                  "schedule: \"boundaries\" must increase (%lld then %lld)",
                                  (long long)s->boundaries[i - 1], (long long)s->boundaries[i]);
        for (int i = 0; i <= s->num_boundaries; i++)
            if (!(s->values[i] > 0) || !isfinite(s->values[i]))
                return dt_err_set(err, DT_EINVAL,
                                  "schedule: \"lr_values\"[%d] must be > 0 (got %g)", i,
                                  s->values[i]);
        return 0;
    case DT_LR_AUTO:
        return dt_err_set(err, DT_EINVAL,
                          "schedule: \"auto\" is a job config's word (dt_job_finish chooses "
                          "the schedule), not one a ps applies");
    default: return dt_err_set(err, DT_EINVAL, "schedule: unknown kind %d", s->kind);
    }
}

double dt_lr_at(const dt_lr_schedule *s, double lr, int64_t global_step) {
    switch (s->kind) {
    case DT_LR_EXPONENTIAL: {
        /* lr * rate^(step / decay_steps), TF's exponential_decay */
        double e = (double)global_step / (double)s->decay_steps;
        if (s->staircase) e = floor(e);
        return lr * pow(s->decay_rate, e);
    }
    case DT_LR_PIECEWISE: {
        /* TF's piecewise_constant: values[i] while step <= boundaries[i]. */
        int i = 0;
        while (i < s->num_boundaries && global_step > s->boundaries[i])
            i++;
        return s->values[i];
    }
    case DT_LR_COSINE: {
        double t = global_step < s->decay_steps ? (double)global_step : (double)s->decay_steps;
        double c = 0.5 * (1 + cos(M_PI * t / (double)s->decay_steps));
        return lr * (s->alpha + (1 - s->alpha) * c);
    }
    default: return lr;
    }
}
