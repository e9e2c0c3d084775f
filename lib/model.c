/*
 * model: variable layouts, initialisation, and the loss, gradient,
 * evaluation and prediction of every model.
 *
 * Every model is a stack of dense layers topped by a loss head; the table
 * `kinds` says which head and whether the job's hidden layers are used, so
 * adding a model of that form is adding a row. Letters: B rows in the batch
 * (or chunk), F features, H hidden units, K classes, O outputs of the last
 * layer (1 for linear and logistic, K otherwise), L hidden layers.
 *
 * Forward, layer l = 0..L (A_0 = X, the last Z is the output (B, O)):
 *   Z_l = A_l W_l + b_l;  A_{l+1} = relu(Z_l) for l < L
 * Heads, per row with output z and label y (dz = dloss/dz):
 *   mse      loss = (z - y)^2                              dz = 2 (z - y)
 *   sigmoid  loss = max(z, 0) - y z + log1p(exp(-|z|))     dz = sigmoid(z) - y
 *   softmax  loss = lse(z) - z_y, lse = m + log sum_k exp(z_k - m), m = max_k z_k
 *                                                          dz_k = p_k - [k = y]
 * Backward, with dZ_L = dz / B (the loss is the batch mean):
 *   dW_l = A_l^T dZ_l;  db_l = sum_rows dZ_l;  dZ_{l-1} = (dZ_l W_l^T) * [A_l > 0]
 * L2 on weights only: loss += l2/2 sum W^2;  dW += l2 W.
 * The matrix products go to CBLAS (sgemm, or sgemv when O is 1); per-row
 * losses are summed in double.
 *
 * Invariants: vars and grads are laid out exactly as dt_model_specs says (the
 * public functions check it before any math). A handle's buffers hold `cap`
 * rows of every layer's activations, so a call never writes past them.
 * Threading: specs, init and describe keep no state. A handle is used by one
 * thread at a time; separate handles share nothing. dt_model_new sets
 * OpenBLAS to one thread per process unless the environment says otherwise.
 */
#include "model.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "hash.h"

/* Keeps the initial weights apart from the data set's random streams, which
 * hash the same seed with other constants. */
#define INIT_STREAM 0x6d6f64656c696e69ULL
#define MAX_LAYERS (DT_MAX_HIDDEN + 1)
/* Rows per forward pass in evaluate and predict: small enough that a 10,000
 * row eval set needs no 10,000 x H buffer, large enough for BLAS to be fast. */
#define EVAL_CHUNK 256

typedef enum { HEAD_MSE, HEAD_SIGMOID, HEAD_SOFTMAX } head_kind;

typedef struct {
    head_kind head;
    int has_hidden; /* 1: the job's hidden layers come before the output layer */
} model_kind;

const char *const dt_model_kind_names[] = {"linear", "logistic", "softmax", "mlp", NULL};

/* Indexed by dt_model_kind. */
static const model_kind kinds[] = {
    [DT_MODEL_LINEAR] = {HEAD_MSE, 0},
    [DT_MODEL_LOGISTIC] = {HEAD_SIGMOID, 0},
    [DT_MODEL_SOFTMAX] = {HEAD_SOFTMAX, 0},
    [DT_MODEL_MLP] = {HEAD_SOFTMAX, 1},
};

/* The shape of a job's network, checked. */
typedef struct {
    const model_kind *kind;
    const char *name;         /* the kind's name, e.g. "softmax" */
    int num_layers;           /* L + 1 */
    int dims[MAX_LAYERS + 1]; /* dims[0] = F, dims[l + 1] = outputs of layer l, last = O */
    double l2;
    double dropout; /* share of each hidden layer's units dropped in a training step */
} net_shape;

/* Finds cfg's model and checks the fields it reads. */
static int plan(const dt_model_config *cfg, net_shape *net, dt_err *err) {
    memset(net, 0, sizeof *net);
    if ((unsigned)cfg->kind >= sizeof kinds / sizeof kinds[0])
        return dt_err_set(err, DT_EINVAL, "model: \"model\": unknown model kind %d",
                          (int)cfg->kind);
    const model_kind *kind = &kinds[cfg->kind];
    const char *name = dt_model_kind_names[cfg->kind];
    if (cfg->num_features < 1 || cfg->num_features > INT_MAX)
        return dt_err_set(err, DT_EINVAL,
                          "model: \"features\" must be 1 to %d for a dense model (got %lld)",
                          INT_MAX, (long long)cfg->num_features);
    if (kind->head == HEAD_SIGMOID && cfg->num_classes != 2)
        return dt_err_set(err, DT_EINVAL,
                          "model: logistic: \"classes\" must be 2, logistic regression is "
                          "binary (got %d); use softmax for more",
                          cfg->num_classes);
    if (kind->head == HEAD_SOFTMAX && cfg->num_classes < 2)
        return dt_err_set(err, DT_EINVAL, "model: %s: \"classes\" must be >= 2 (got %d)", name,
                          cfg->num_classes);
    if (!(cfg->l2 >= 0) || !isfinite(cfg->l2))
        return dt_err_set(err, DT_EINVAL, "model: \"l2\" must be a finite number >= 0 (got %g)",
                          cfg->l2);
    if (!(cfg->dropout >= 0 && cfg->dropout < 1))
        return dt_err_set(err, DT_EINVAL, "model: \"dropout\" must be in [0, 1) (got %g)",
                          cfg->dropout);
    if (cfg->dropout > 0 && !kind->has_hidden)
        return dt_err_set(err, DT_EINVAL,
                          "model: %s: \"dropout\" %g: it drops hidden units, and only \"mlp\" "
                          "has hidden layers",
                          name, cfg->dropout);
    int num_hidden = 0;
    if (kind->has_hidden) {
        if (cfg->num_hidden < 1 || cfg->num_hidden > DT_MAX_HIDDEN)
            return dt_err_set(err, DT_EINVAL,
                              "model: %s: \"hidden\" must list 1 to %d layer sizes (got %d)", name,
                              DT_MAX_HIDDEN, cfg->num_hidden);
        for (int i = 0; i < cfg->num_hidden; i++)
            if (cfg->hidden[i] < 1)
                return dt_err_set(err, DT_EINVAL, "model: %s: \"hidden\"[%d] must be >= 1 (got %d)",
                                  name, i, cfg->hidden[i]);
        num_hidden = cfg->num_hidden;
    }
    net->kind = kind;
    net->name = name;
    net->num_layers = num_hidden + 1;
    net->dims[0] = cfg->num_features;
    for (int i = 0; i < num_hidden; i++)
        net->dims[i + 1] = cfg->hidden[i];
    net->dims[num_hidden + 1] = kind->head == HEAD_SOFTMAX ? cfg->num_classes : 1;
    net->l2 = cfg->l2;
    net->dropout = cfg->dropout;
    /* BLAS counts elements in int. */
    for (int l = 0; l < net->num_layers; l++)
        if ((int64_t)net->dims[l] * net->dims[l + 1] > INT_MAX)
            return dt_err_set(err, DT_EINVAL,
                              "model: %s: layer %d's weight (%d, %d) has more than %d elements",
                              name, l, net->dims[l], net->dims[l + 1], INT_MAX);
    return 0;
}

static int out_dim(const net_shape *net) {
    return net->dims[net->num_layers];
}

/* Specs of layer l's weight (in, out) and bias (out), named as the header says. */
static void layer_specs(const net_shape *net, int l, dt_tensor *w, dt_tensor *b) {
    memset(w, 0, sizeof *w);
    memset(b, 0, sizeof *b);
    if (net->kind->has_hidden) {
        snprintf(w->name, sizeof w->name, "layer%d/weight", l);
        snprintf(b->name, sizeof b->name, "layer%d/bias", l);
    } else {
        snprintf(w->name, sizeof w->name, "%s/weight", net->name);
        snprintf(b->name, sizeof b->name, "%s/bias", net->name);
    }
    w->dtype = b->dtype = DT_DTYPE_F32;
    w->ndim = 2;
    w->shape[0] = net->dims[l];
    w->shape[1] = net->dims[l + 1];
    b->ndim = 1;
    b->shape[0] = net->dims[l + 1];
}

/* All specs of net, checked (sets nbytes); 2 per layer, weight first. */
static int net_specs(const net_shape *net, dt_tensor *specs, int *count, dt_err *err) {
    int n = 2 * net->num_layers, rc;
    DT_ASSERT(n <= DT_MODEL_MAX_VARS);
    for (int l = 0; l < net->num_layers; l++)
        layer_specs(net, l, &specs[2 * l], &specs[2 * l + 1]);
    for (int i = 0; i < n; i++)
        if ((rc = dt_tensor_check_spec(&specs[i], err)) < 0)
            return dt_err_wrap(err, rc, "model: %s", net->name);
    *count = n;
    return 0;
}

int dt_model_specs(const dt_model_config *cfg, dt_tensor *specs, int *count, dt_err *err) {
    *count = 0;
    net_shape net;
    int rc = plan(cfg, &net, err);
    if (rc < 0) return rc;
    int n = 0;
    if ((rc = net_specs(&net, specs, &n, err)) < 0) return rc;
    *count = n;
    return 0;
}

int dt_model_bytes(const dt_model_config *cfg, long long *bytes, dt_err *err) {
    *bytes = 0;
    dt_tensor specs[DT_MODEL_MAX_VARS];
    int n = 0, rc = dt_model_specs(cfg, specs, &n, err);
    if (rc < 0) return rc;
    long long total = 0;
    for (int i = 0; i < n; i++) {
        if ((rc = dt_tensor_check_spec(&specs[i], err)) < 0) return rc;
        total += (long long)specs[i].nbytes; /* each at most 2^40 */
    }
    *bytes = total;
    return 0;
}

/* "name F32 (3, 1)" for messages; the name may lack a NUL, so bound it. */
static void format_tensor(const dt_tensor *t, char *buf, size_t cap) {
    const char *dtype = dt_dtype_name(t->dtype);
    int n = snprintf(buf, cap, "%.*s %s (", DT_TENSOR_NAME_MAX - 1, t->name, dtype ? dtype : "?");
    for (int d = 0; d < t->ndim && d < DT_TENSOR_MAX_DIMS && n > 0 && (size_t)n < cap; d++)
        n += snprintf(buf + n, cap - (size_t)n, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, ")");
}

/* 0 when ts is laid out as specs (n of them) say; what names the set in the
 * message ("variables", "gradients"). */
static int check_layout(const char *model, const dt_tensor *specs, int n, const dt_tensors *ts,
                        const char *what, dt_err *err) {
    if (ts->count != n)
        return dt_err_set(err, DT_EINVAL, "model: %s: %d %s, want %d", model, ts->count, what, n);
    for (int i = 0; i < n; i++) {
        const dt_tensor *t = &ts->items[i], *s = &specs[i];
        int same = strncmp(t->name, s->name, DT_TENSOR_NAME_MAX) == 0 && t->dtype == s->dtype &&
                   t->ndim == s->ndim;
        for (int d = 0; same && d < s->ndim; d++)
            same = t->shape[d] == s->shape[d];
        if (!same) {
            char got[DT_TENSOR_NAME_MAX + 64], want[DT_TENSOR_NAME_MAX + 64];
            format_tensor(t, got, sizeof got);
            format_tensor(s, want, sizeof want);
            return dt_err_set(err, DT_EINVAL, "model: %s: %s %d: want %s, got %s", model, what, i,
                              want, got);
        }
        if (!t->data)
            return dt_err_set(err, DT_EINVAL, "model: %s: %s %d (%s) has no data", model, what, i,
                              s->name);
    }
    return 0;
}

/* ---- initialisation ---------------------------------------------------- */

/* splitmix64's finaliser: a bijective 64-bit mix. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A stream per (seed, variable name): a layer's values do not depend on the
 * order or the sizes of the others. */
uint64_t dt_model_init_state(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a of the name */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ULL;
    }
    return mix64(mix64(seed ^ INIT_STREAM) ^ h);
}

void dt_model_init(const dt_model_config *cfg, uint64_t seed, dt_tensors *vars) {
    dt_err err = {0};
    net_shape net;
    dt_tensor specs[DT_MODEL_MAX_VARS];
    int n = 0;
    /* vars came from dt_model_specs with this config, which already said no
     * to a bad one: a mismatch here is a bug. */
    int rc = plan(cfg, &net, &err);
    DT_ASSERT(rc == 0);
    rc = net_specs(&net, specs, &n, &err);
    DT_ASSERT(rc == 0);
    rc = check_layout(net.name, specs, n, vars, "variables", &err);
    DT_ASSERT(rc == 0);
    for (int l = 0; l < net.num_layers; l++) {
        dt_tensor *w = &vars->items[2 * l], *b = &vars->items[2 * l + 1];
        const double fan_in = net.dims[l];
        /* He for layers feeding a ReLU keeps the activations' scale through
         * depth; 1/sqrt(fan_in) keeps the outputs of order |x| otherwise. */
        const int relu_next = l < net.num_layers - 1;
        const double stddev = relu_next ? sqrt(2.0 / fan_in) : 1.0 / sqrt(fan_in);
        uint64_t state = dt_model_init_state(seed, specs[2 * l].name);
        dt_data_normals(&state, w->data, dt_tensor_numel(w), stddev);
        memset(b->data, 0, b->nbytes);
    }
}

/* ---- description ------------------------------------------------------- */

/* snprintf at *off, never past cap; stops quietly once the buffer is full. */
static void append(char *buf, size_t cap, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t cap, size_t *off, const char *fmt, ...) {
    if (*off >= cap - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *off, cap - *off, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    *off = (size_t)n < cap - *off ? *off + (size_t)n : cap - 1;
}

void dt_model_describe(const dt_model_config *cfg, char *buf, int cap) {
    if (cap <= 0) return;
    const size_t c = (size_t)cap;
    size_t off = 0;
    buf[0] = '\0';
    const char *name = (unsigned)cfg->kind < sizeof kinds / sizeof kinds[0]
                           ? dt_model_kind_names[cfg->kind]
                           : "unknown";
    append(buf, c, &off, "%s features=%lld", name, (long long)cfg->num_features);
    if (cfg->kind == DT_MODEL_MLP) {
        int nh = cfg->num_hidden < 0               ? 0
                 : cfg->num_hidden > DT_MAX_HIDDEN ? DT_MAX_HIDDEN
                                                   : cfg->num_hidden;
        append(buf, c, &off, " hidden=");
        for (int i = 0; i < nh; i++)
            append(buf, c, &off, i ? ",%d" : "%d", cfg->hidden[i]);
    }
    if (cfg->kind != DT_MODEL_LINEAR) append(buf, c, &off, " classes=%d", cfg->num_classes);
    append(buf, c, &off, " l2=%g", cfg->l2);
}

void dt_model_data_needs(const dt_model_config *cfg, dt_data_needs *out) {
    memset(out, 0, sizeof *out);
    /* A dense model's F fits an int (plan). A sparse job's may not: its
     * rows are read with F from the job (dt_job_read_sparse), never by the
     * dense readers, which see it only to tell whether a file has labels. */
    out->num_features = cfg->num_features <= INT_MAX ? (int)cfg->num_features : INT_MAX;
    out->label_kind = cfg->kind == DT_MODEL_LINEAR ? DT_LABEL_REAL : DT_LABEL_CLASS;
    out->num_classes = cfg->kind == DT_MODEL_LINEAR ? 0 : cfg->num_classes;
    out->svm_signed_labels = cfg->kind == DT_MODEL_LOGISTIC;
}

/* ---- handle ------------------------------------------------------------ */

struct dt_model {
    net_shape net;
    int num_vars;
    dt_tensor specs[DT_MODEL_MAX_VARS];
    int cap;                /* rows every buffer below holds */
    float *act[MAX_LAYERS]; /* act[l] (cap, dims[l]) for 1 <= l < num_layers: ReLU outputs A_l */
    float *out;             /* (cap, O): last layer's outputs Z_L */
    float *dout;            /* (cap, O): dloss/dZ_L, apart so Z_L outlives the step */
    int out_rows;           /* rows of out from the last dt_model_loss_grad; 0: none */
    float *delta[2];        /* (cap, max H): dloss/dZ of hidden layers, used in turn */
    uint64_t drop_state;    /* the dropout masks' splitmix64 stream */
};

static void free_buffers(dt_model *m) {
    for (int l = 0; l < MAX_LAYERS; l++) {
        free(m->act[l]);
        m->act[l] = NULL;
    }
    free(m->out);
    free(m->dout);
    free(m->delta[0]);
    free(m->delta[1]);
    m->out = m->dout = m->delta[0] = m->delta[1] = NULL;
    m->cap = 0;
    m->out_rows = 0;
}

/* rows x cols floats, or NULL when that overflows or fails. */
/* Zeroed: the passes write every row they read, but the static analyzer
 * cannot follow that through the BLAS calls; buffers grow rarely, so
 * the zeroing costs nothing per step. */
static float *alloc_floats(int rows, int cols) {
    if (cols == 0) return NULL;
    if ((size_t)rows > SIZE_MAX / sizeof(float) / (size_t)cols) return NULL;
    return dt_calloc((size_t)rows * (size_t)cols, sizeof(float));
}

/* Grows every buffer to hold rows rows; contents are not kept. */
static int grow(dt_model *m, int rows, dt_err *err) {
    if (rows <= m->cap) return 0;
    free_buffers(m);
    const net_shape *n = &m->net;
    int max_hidden = 0, ok = 1;
    for (int l = 1; l < n->num_layers; l++) {
        if (n->dims[l] > max_hidden) max_hidden = n->dims[l];
        ok = ok && (m->act[l] = alloc_floats(rows, n->dims[l])) != NULL;
    }
    ok = ok && (m->out = alloc_floats(rows, out_dim(n))) != NULL;
    ok = ok && (m->dout = alloc_floats(rows, out_dim(n))) != NULL;
    if (max_hidden > 0) {
        ok = ok && (m->delta[0] = alloc_floats(rows, max_hidden)) != NULL;
        ok = ok && (m->delta[1] = alloc_floats(rows, max_hidden)) != NULL;
    }
    if (!ok) {
        free_buffers(m);
        return dt_err_set(err, DT_ENOMEM, "model: %s: no memory for the activations of %d rows",
                          n->name, rows);
    }
    m->cap = rows;
    return 0;
}

/* Whether to let OpenBLAS start threads: see the comment in dt_model_new. */
static void set_blas_threads(void) {
    if (getenv("OPENBLAS_NUM_THREADS") || getenv("OMP_NUM_THREADS")) return;
    openblas_set_num_threads(1);
}

int dt_model_new(const dt_model_config *cfg, dt_model **out, dt_err *err) {
    *out = NULL;
    dt_model *m = dt_calloc(1, sizeof *m);
    if (!m) return dt_err_set(err, DT_ENOMEM, "model: no memory for a handle");
    int rc = plan(cfg, &m->net, err);
    if (rc == 0) rc = net_specs(&m->net, m->specs, &m->num_vars, err);
    if (rc < 0) {
        free(m);
        return rc;
    }
    /* The workers are processes, often several to a machine, and one
     * step's matrices are small: OpenBLAS's threads then cost more in
     * hand-offs and spinning than they give. Measured on a 2-core box for
     * the 784-256-128-10 mlp at batch 64 (examples/s, best of 12-15 runs):
     * two worker processes 100k in all with 1 thread each, 79k with 2; one
     * process 51k with 1, 53k with 2 (72k vs 56k at batch 100 on an idle
     * box, but 2 threads fall to 2/3 of 1 thread's rate as soon as other
     * processes compete for the cores). A user's OPENBLAS_NUM_THREADS or
     * OMP_NUM_THREADS wins. */
    set_blas_threads();
    *out = m;
    return 0;
}

void dt_model_free(dt_model *m) {
    if (!m) return;
    free_buffers(m);
    free(m);
}

int dt_model_out_cols(const dt_model *m) {
    return out_dim(&m->net);
}

const float *dt_model_output(const dt_model *m, int *rows) {
    *rows = m->out_rows;
    return m->out_rows ? m->out : NULL;
}

/* ---- math -------------------------------------------------------------- */

static const float *weight_of(const dt_tensors *ts, int l) {
    return ts->items[2 * l].data;
}
static const float *bias_of(const dt_tensors *ts, int l) {
    return ts->items[2 * l + 1].data;
}

void dt_model_seed_dropout(dt_model *m, uint64_t seed) {
    m->drop_state = dt_hash_mix64(seed ^ 0x64726f706f7574ULL); /* "dropout" */
}

/* Inverted dropout on a training step's ReLU outputs a (count): each unit
 * is kept with probability 1 - p and then scaled by 1 / (1 - p), so a
 * layer's expected output is the same as at evaluation, which drops
 * nothing. A dropped unit reads 0, which backward's ReLU mask (A > 0)
 * then stops as well. */
static void drop_units(dt_model *m, float *a, size_t count) {
    const double p = m->net.dropout;
    const float scale = (float)(1.0 / (1.0 - p));
    const uint64_t cut = (uint64_t)(p * 18446744073709551616.0); /* p 2^64; p < 1 */
    uint64_t s = m->drop_state;
    for (size_t i = 0; i < count; i++) {
        s += 0x9E3779B97F4A7C15ULL;
        a[i] = dt_hash_mix64(s) < cut ? 0.0f : a[i] * scale;
    }
    m->drop_state = s;
}

/* Z_l = A_l W_l + b_l for every layer, ReLU between (and with train and
 * "dropout", its masks): x (B, F) to m->out (B, O). */
static void forward(dt_model *m, const dt_tensors *vars, const float *x, int B, int train) {
    const net_shape *n = &m->net;
    const float *a = x; /* (B, in) */
    for (int l = 0; l < n->num_layers; l++) {
        const int in = n->dims[l], out = n->dims[l + 1];
        const float *w = weight_of(vars, l);  /* (in, out) */
        const float *bias = bias_of(vars, l); /* (out) */
        const int last = l == n->num_layers - 1;
        float *z = last ? m->out : m->act[l + 1]; /* (B, out) */
        for (int i = 0; i < B; i++)
            memcpy(z + (size_t)i * out, bias, (size_t)out * sizeof *z);
        if (out == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, B, in, 1.0f, a, in, w, 1, 1.0f, z, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, out, in, 1.0f, a, in, w, out,
                        1.0f, z, out);
        if (!last) {
            const size_t count = (size_t)B * (size_t)out;
            for (size_t i = 0; i < count; i++)
                z[i] = z[i] > 0 ? z[i] : 0.0f;
            if (train && n->dropout > 0) drop_units(m, z, count);
        }
        a = z;
    }
}

/* log(1 + exp(z)) without overflow. */
static double softplus(double z) {
    return (z > 0 ? z : 0) + log1p(exp(-fabs(z)));
}

/* 1 / (1 + exp(-z)) without overflow: exp of a non-positive number only. */
static double sigmoid(double z) {
    if (z >= 0) return 1.0 / (1.0 + exp(-z));
    double e = exp(z);
    return e / (1.0 + e);
}

/* Row z (K): its log-sum-exp, and the index of its largest entry (the first
 * one on ties). */
static double log_sum_exp(const float *z, int K, int *argmax) {
    int best = 0;
    for (int k = 1; k < K; k++)
        if (z[k] > z[best]) best = k;
    double mx = z[best], s = 1; /* the largest entry's term, exp(0): s >= 1 */
    for (int k = 0; k < K; k++)
        if (k != best) s += exp((double)z[k] - mx);
    *argmax = best;
    return mx + log(s);
}

/* The head h on B rows of outputs z (B, O) with labels y (checked): adds
 * the row losses to *loss_sum and the rows classified right to *correct.
 * With grad_scale > 0, writes grad_scale * dloss/dz into dz (B, O). */
static void head_rows(head_kind h, int O, const float *zs, float *dzs, int B, const float *y,
                      double grad_scale, double *loss_sum, int64_t *correct) {
    double sum = 0;
    int64_t right = 0;
    for (int i = 0; i < B; i++) {
        const float *z = zs + (size_t)i * O;                     /* (O) */
        float *dz = grad_scale > 0 ? dzs + (size_t)i * O : NULL; /* (O) */
        switch (h) {
        case HEAD_MSE: {
            double r = (double)z[0] - y[i];
            sum += r * r;
            if (dz) dz[0] = (float)(grad_scale * 2 * r);
            break;
        }
        case HEAD_SIGMOID: {
            double zi = z[0], yi = y[i];
            sum += softplus(zi) - yi * zi;
            right += (zi > 0) == (yi == 1);
            if (dz) dz[0] = (float)(grad_scale * (sigmoid(zi) - yi));
            break;
        }
        case HEAD_SOFTMAX: {
            int label = (int)y[i], best;
            double lse = log_sum_exp(z, O, &best);
            sum += lse - z[label];
            right += best == label;
            if (dz)
                for (int k = 0; k < O; k++)
                    dz[k] = (float)(grad_scale * (exp((double)z[k] - lse) - (k == label)));
            break;
        }
        }
    }
    *loss_sum += sum;
    *correct += right;
}

/* The head on the B rows of m->out, gradients into m->dout. */
static void head(dt_model *m, int B, const float *y, double grad_scale, double *loss_sum,
                 int64_t *correct) {
    head_rows(m->net.kind->head, out_dim(&m->net), m->out, m->dout, B, y, grad_scale, loss_sum,
              correct);
}

/* Predictions of head h for B rows of outputs z (B, O) into out (B, O). */
static void predict_rows(head_kind h, int O, const float *zs, int B, float *out) {
    for (int i = 0; i < B; i++) {
        const float *z = zs + (size_t)i * O;
        float *p = out + (size_t)i * O;
        switch (h) {
        case HEAD_MSE: p[0] = z[0]; break;
        case HEAD_SIGMOID: p[0] = (float)sigmoid(z[0]); break;
        case HEAD_SOFTMAX: {
            int best;
            double lse = log_sum_exp(z, O, &best);
            for (int k = 0; k < O; k++)
                p[k] = (float)exp((double)z[k] - lse);
            break;
        }
        }
    }
}

static void head_predict(const dt_model *m, int B, float *out) {
    predict_rows(m->net.kind->head, out_dim(&m->net), m->out, B, out);
}

/* Gradients of every layer from dZ_L in m->dout, after forward on the same
 * x; with dx, also dloss/dx = dZ_0 W_0^T (B, F). */
static void backward(dt_model *m, const dt_tensors *vars, const float *x, int B, dt_tensors *grads,
                     float *dx) {
    const net_shape *n = &m->net;
    float *dz = m->dout; /* (B, out) */
    int next = 0;
    for (int l = n->num_layers - 1; l >= 0; l--) {
        const int in = n->dims[l], out = n->dims[l + 1];
        const float *a = l ? m->act[l] : x;       /* (B, in) */
        float *gw = grads->items[2 * l].data;     /* (in, out) */
        float *gb = grads->items[2 * l + 1].data; /* (out) */
        /* dW = A^T dZ */
        if (out == 1)
            cblas_sgemv(CblasRowMajor, CblasTrans, B, in, 1.0f, a, in, dz, 1, 0.0f, gw, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, out, B, 1.0f, a, in, dz, out,
                        0.0f, gw, out);
        /* db = sum over rows of dZ */
        memset(gb, 0, (size_t)out * sizeof *gb);
        for (int i = 0; i < B; i++)
            for (int j = 0; j < out; j++)
                gb[j] += dz[(size_t)i * out + j];
        if (l == 0) {
            /* dX = dZ_0 W_0^T: the input is not a ReLU output, no mask */
            if (dx)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, in, out, 1.0f, dz, out,
                            weight_of(vars, 0), out, 0.0f, dx, in);
            break;
        }
        /* dZ_{l-1} = (dZ W^T) * [A_l > 0] */
        float *da = m->delta[next]; /* (B, in) */
        next ^= 1;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, in, out, 1.0f, dz, out,
                    weight_of(vars, l), out, 0.0f, da, in);
        const size_t count = (size_t)B * (size_t)in;
        for (size_t i = 0; i < count; i++)
            if (!(a[i] > 0)) da[i] = 0.0f;
        /* A kept unit's output was scaled by 1 / (1 - p) (drop_units). */
        if (n->dropout > 0) cblas_sscal((int)count, (float)(1.0 / (1.0 - n->dropout)), da, 1);
        dz = da;
    }
}

/* l2/2 sum W^2 over the weights; adds l2 W to their gradients when grads. */
static double l2_term(const dt_model *m, const dt_tensors *vars, dt_tensors *grads) {
    const double l2 = m->net.l2;
    if (l2 == 0) return 0;
    double sum = 0;
    for (int l = 0; l < m->net.num_layers; l++) {
        const int count = (int)dt_tensor_numel(&vars->items[2 * l]); /* <= INT_MAX, see plan */
        const float *w = weight_of(vars, l);
        sum += cblas_dsdot(count, w, 1, w, 1);
        if (grads) cblas_saxpy(count, (float)l2, w, 1, grads->items[2 * l].data, 1);
    }
    return 0.5 * l2 * sum;
}

/* ---- checks and entry points ------------------------------------------- */

/* Row i's label is one the head can take: a finite target (mse), 0 or 1
 * (sigmoid), an integer class in 0..K-1 (softmax). */
static int labels_ok(head_kind h, int K, const float *ys, int B, const char *name, dt_err *err) {
    for (int i = 0; i < B; i++) {
        const float y = ys[i];
        switch (h) {
        case HEAD_MSE:
            if (!isfinite(y))
                return dt_err_set(err, DT_EINVAL,
                                  "model: %s: batch row %d: target %g is not a finite number", name,
                                  i, (double)y);
            break;
        case HEAD_SIGMOID:
            if (y != 0 && y != 1)
                return dt_err_set(err, DT_EINVAL, "model: %s: batch row %d: label %g is not 0 or 1",
                                  name, i, (double)y);
            break;
        case HEAD_SOFTMAX:
            if (!(y >= 0 && y < K && y == floorf(y)))
                return dt_err_set(err, DT_EINVAL,
                                  "model: %s: batch row %d: label %g is not a class (want an "
                                  "integer in 0..%d)",
                                  name, i, (double)y, K - 1);
            break;
        }
    }
    return 0;
}

static int check_labels(const dt_model *m, const dt_batch *b, dt_err *err) {
    return labels_ok(m->net.kind->head, out_dim(&m->net), b->y, b->rows, m->net.name, err);
}

/* What every entry point checks before any math. */
static int check_call(const dt_model *m, const dt_tensors *vars, const dt_batch *b,
                      const dt_tensors *grads, int labels, dt_err *err) {
    const char *name = m->net.name;
    int rc;
    if ((rc = check_layout(name, m->specs, m->num_vars, vars, "variables", err)) < 0) return rc;
    if (grads && (rc = check_layout(name, m->specs, m->num_vars, grads, "gradients", err)) < 0)
        return rc;
    if (b->cols != m->net.dims[0])
        return dt_err_set(err, DT_EINVAL, "model: %s: batch has %d features, \"features\" is %d",
                          name, b->cols, m->net.dims[0]);
    if (b->rows < 1 || !b->x || (labels && !b->y))
        return dt_err_set(err, DT_EINVAL, "model: %s: empty batch (%d rows)", name, b->rows);
    return labels ? check_labels(m, b, err) : 0;
}

static int loss_grad(dt_model *m, const dt_tensors *vars, const dt_batch *b, dt_tensors *grads,
                     float *dx, double *loss, dt_err *err) {
    *loss = NAN;
    m->out_rows = 0;
    int rc;
    if ((rc = check_call(m, vars, b, grads, 1, err)) < 0) return rc;
    if ((rc = grow(m, b->rows, err)) < 0) return rc;
    const int B = b->rows;
    double sum = 0;
    int64_t correct = 0;
    forward(m, vars, b->x, B, grads != NULL);
    head(m, B, b->y, grads ? 1.0 / B : 0, &sum, &correct);
    if (grads) backward(m, vars, b->x, B, grads, dx);
    *loss = sum / B + l2_term(m, vars, grads);
    m->out_rows = B;
    return 0;
}

int dt_model_loss_grad(dt_model *m, const dt_tensors *vars, const dt_batch *b, dt_tensors *grads,
                       double *loss, dt_err *err) {
    return loss_grad(m, vars, b, grads, NULL, loss, err);
}

int dt_model_loss_grad_input(dt_model *m, const dt_tensors *vars, const dt_batch *b,
                             dt_tensors *grads, float *dx, double *loss, dt_err *err) {
    DT_ASSERT(grads && dx);
    return loss_grad(m, vars, b, grads, dx, loss, err);
}

/* ---- heads for other models (lib/sparse_model) -------------------------- */

static head_kind head_of(dt_model_kind kind) {
    DT_ASSERT((unsigned)kind < sizeof kinds / sizeof kinds[0]);
    return kinds[kind].head;
}

int dt_model_head_outputs(dt_model_kind kind, int num_classes) {
    return head_of(kind) == HEAD_SOFTMAX ? num_classes : 1;
}

int dt_model_head_check_labels(dt_model_kind kind, int num_classes, const float *y, int B,
                               dt_err *err) {
    return labels_ok(head_of(kind), dt_model_head_outputs(kind, num_classes), y, B,
                     dt_model_kind_names[kind], err);
}

void dt_model_head_loss(dt_model_kind kind, int num_classes, const float *z, const float *y, int B,
                        double grad_scale, float *dz, double *loss_sum, int64_t *correct) {
    head_rows(head_of(kind), dt_model_head_outputs(kind, num_classes), z, dz, B, y, grad_scale,
              loss_sum, correct);
}

void dt_model_head_predict(dt_model_kind kind, int num_classes, const float *z, int B, float *out) {
    predict_rows(head_of(kind), dt_model_head_outputs(kind, num_classes), z, B, out);
}

/* Rows per forward pass for a call on B rows: the whole batch when the
 * buffers already hold it, else chunks of at least EVAL_CHUNK. */
static int chunk_rows(const dt_model *m, int B) {
    int chunk = m->cap > EVAL_CHUNK ? m->cap : EVAL_CHUNK;
    return B < chunk ? B : chunk;
}

int dt_model_evaluate(dt_model *m, const dt_tensors *vars, const dt_batch *b, double *loss,
                      double *accuracy, dt_err *err) {
    *loss = *accuracy = NAN;
    m->out_rows = 0; /* its chunks overwrite the step's outputs */
    int rc;
    if ((rc = check_call(m, vars, b, NULL, 1, err)) < 0) return rc;
    const int B = b->rows, chunk = chunk_rows(m, B), F = m->net.dims[0];
    if ((rc = grow(m, chunk, err)) < 0) return rc;
    double sum = 0;
    int64_t correct = 0;
    for (int64_t start = 0; start < B; start += chunk) {
        const int rows = B - start < chunk ? (int)(B - start) : chunk;
        forward(m, vars, b->x + (size_t)start * F, rows, 0);
        head(m, rows, b->y + start, 0, &sum, &correct);
    }
    *loss = sum / B;
    *accuracy = m->net.kind->head == HEAD_MSE ? NAN : (double)correct / B;
    return 0;
}

int dt_model_predict(dt_model *m, const dt_tensors *vars, const dt_batch *b, float *out,
                     int *out_cols, dt_err *err) {
    m->out_rows = 0; /* as in evaluate */
    int rc;
    if ((rc = check_call(m, vars, b, NULL, 0, err)) < 0) return rc;
    const int B = b->rows, chunk = chunk_rows(m, B), F = m->net.dims[0], O = out_dim(&m->net);
    if ((rc = grow(m, chunk, err)) < 0) return rc;
    for (int64_t start = 0; start < B; start += chunk) {
        const int rows = B - start < chunk ? (int)(B - start) : chunk;
        forward(m, vars, b->x + (size_t)start * F, rows, 0);
        head_predict(m, rows, out + (size_t)start * O);
    }
    if (out_cols) *out_cols = O;
    return 0;
}
