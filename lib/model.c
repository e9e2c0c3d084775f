/*
 * model: variable layouts, initialisation, and loss and gradient per model.
 *
 * Each model is one row of `models` (name plus four functions); the public
 * functions look the row up by job->model, check what every model shares
 * (known name, variable layout, batch shape) and dispatch. Adding a model is
 * adding a row.
 *
 * Letters: B examples in the batch, F features.
 *
 * linear: pred = X W + b, loss = mean_i (pred_i - y_i)^2;
 *   dL/dW = (2/B) X^T (pred - y), dL/db = (2/B) sum_i (pred_i - y_i).
 * The two matrix-vector products go to CBLAS (sgemv), which keeps batches of
 * millions of features fast; sums over the batch are taken in double.
 *
 * Invariants: vars and grads are laid out exactly as dt_model_specs says.
 * Threading: no state; callers may run several models concurrently on
 * separate tensors.
 */
#include "model.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Keeps the initial weights apart from the data set's random streams, which
 * hash the same seed with other constants. */
#define INIT_STREAM 0x6d6f64656c696e69ULL

typedef struct {
    const char *name;
    /* Fills specs (data NULL) and *count; may check fields of its own. */
    int (*specs)(const dt_job *job, dt_tensor *specs, int *count, dt_err *err);
    void (*init)(const dt_job *job, dt_tensors *vars);
    int (*loss_grad)(const dt_job *job, const dt_tensors *vars, const dt_batch *b,
                     dt_tensors *grads, double *loss, dt_err *err);
} model_ops;

/* ---- linear ---------------------------------------------------------- */

static int linear_specs(const dt_job *job, dt_tensor *specs, int *count, dt_err *err) {
    (void)err; /* num_features is checked for every model */
    dt_tensor *w = &specs[0], *b = &specs[1];
    memset(specs, 0, 2 * sizeof *specs);
    strcpy(w->name, "linear/weight");
    w->dtype = DT_DTYPE_F32;
    w->ndim = 2;
    w->shape[0] = job->num_features; /* (F, 1) */
    w->shape[1] = 1;
    strcpy(b->name, "linear/bias");
    b->dtype = DT_DTYPE_F32;
    b->ndim = 1;
    b->shape[0] = 1; /* (1) */
    *count = 2;
    return 0;
}

static void linear_init(const dt_job *job, dt_tensors *vars) {
    float *w = vars->items[0].data; /* (F, 1) */
    float *b = vars->items[1].data; /* (1) */
    const int F = job->num_features;
    /* W ~ N(0, 1/sqrt(F)): keeps the initial pred of order |x| whatever F. */
    uint64_t state = job->seed ^ INIT_STREAM;
    dt_data_normals(&state, w, F, 1.0 / sqrt((double)F));
    b[0] = 0.0f;
}

static int linear_loss_grad(const dt_job *job, const dt_tensors *vars, const dt_batch *bt,
                            dt_tensors *grads, double *loss, dt_err *err) {
    const int B = bt->rows, F = job->num_features;
    const float *w = vars->items[0].data; /* (F, 1) */
    const float bias = *(const float *)vars->items[1].data;
    float *r = malloc((size_t)B * sizeof *r); /* (B) residual pred - y */
    if (!r) return dt_err_set(err, DT_ENOMEM, "model: linear: no memory for %d residuals", B);

    /* r = X W - y, then + b */
    memcpy(r, bt->y, (size_t)B * sizeof *r);
    cblas_sgemv(CblasRowMajor, CblasNoTrans, B, F, 1.0f, bt->x, F, w, 1, -1.0f, r, 1);
    double sum_sq = 0, sum_r = 0;
    for (int i = 0; i < B; i++) {
        r[i] += bias;
        sum_sq += (double)r[i] * r[i];
        sum_r += r[i];
    }
    *loss = sum_sq / B; /* mean_i (pred_i - y_i)^2 */
    if (grads) {
        float *gw = grads->items[0].data; /* (F, 1) */
        float *gb = grads->items[1].data; /* (1) */
        /* dL/dW = (2/B) X^T r */
        cblas_sgemv(CblasRowMajor, CblasTrans, B, F, (float)(2.0 / B), bt->x, F, r, 1, 0.0f, gw, 1);
        gb[0] = (float)(2.0 * sum_r / B); /* dL/db = (2/B) sum_i r_i */
    }
    free(r);
    return 0;
}

/* ---- table and dispatch ------------------------------------------------ */

static const model_ops models[] = {
    {"linear", linear_specs, linear_init, linear_loss_grad},
};

/* Finds the job's model and checks the fields every model reads. */
static int lookup(const dt_job *job, const model_ops **out, dt_err *err) {
    *out = NULL;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        if (strncmp(job->model, models[i].name, sizeof job->model) == 0) *out = &models[i];
    if (!*out)
        return dt_err_set(err, DT_EINVAL, "model: \"model\": unknown model \"%.*s\" (want linear)",
                          (int)sizeof job->model, job->model);
    if (job->num_features < 1)
        return dt_err_set(err, DT_EINVAL, "model: \"num_features\" must be >= 1 (got %d)",
                          job->num_features);
    return 0;
}

int dt_model_specs(const dt_job *job, dt_tensor *specs, int *count, dt_err *err) {
    *count = 0;
    const model_ops *m;
    int rc = lookup(job, &m, err);
    if (rc < 0) return rc;
    int n = 0;
    if ((rc = m->specs(job, specs, &n, err)) < 0) return rc;
    DT_ASSERT(n <= DT_MODEL_MAX_VARS);
    for (int i = 0; i < n; i++)
        if ((rc = dt_tensor_check_spec(&specs[i], err)) < 0)
            return dt_err_wrap(err, rc, "model: %s", m->name);
    *count = n;
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

/* 0 when ts is laid out as the job's model says; what names the set in the
 * message ("variables", "gradients"). */
static int check_layout(const dt_job *job, const model_ops *m, const dt_tensors *ts,
                        const char *what, dt_err *err) {
    dt_tensor specs[DT_MODEL_MAX_VARS];
    int n = 0;
    int rc = m->specs(job, specs, &n, err);
    if (rc < 0) return rc;
    if (ts->count != n)
        return dt_err_set(err, DT_EINVAL, "model: %s: %d %s, want %d", m->name, ts->count, what, n);
    for (int i = 0; i < n; i++) {
        const dt_tensor *t = &ts->items[i], *s = &specs[i];
        int same = strncmp(t->name, s->name, DT_TENSOR_NAME_MAX) == 0 && t->dtype == s->dtype &&
                   t->ndim == s->ndim;
        for (int d = 0; same && d < s->ndim; d++) same = t->shape[d] == s->shape[d];
        if (!same) {
            char got[DT_TENSOR_NAME_MAX + 64], want[DT_TENSOR_NAME_MAX + 64];
            format_tensor(t, got, sizeof got);
            format_tensor(s, want, sizeof want);
            return dt_err_set(err, DT_EINVAL, "model: %s: %s %d: want %s, got %s", m->name, what, i,
                              want, got);
        }
        if (!t->data)
            return dt_err_set(err, DT_EINVAL, "model: %s: %s %d (%s) has no data", m->name, what, i,
                              t->name);
    }
    return 0;
}

void dt_model_init(const dt_job *job, dt_tensors *vars) {
    dt_err err = {0};
    const model_ops *m;
    /* vars came from dt_model_specs with this job, which already said no to a
     * bad job: a mismatch here is a bug. */
    int rc = lookup(job, &m, &err);
    DT_ASSERT(rc == 0);
    rc = check_layout(job, m, vars, "variables", &err);
    DT_ASSERT(rc == 0);
    m->init(job, vars);
}

int dt_model_loss_grad(const dt_job *job, const dt_tensors *vars, const dt_batch *b,
                       dt_tensors *grads, double *loss, dt_err *err) {
    int rc;
    *loss = NAN;
    const model_ops *m;
    if ((rc = lookup(job, &m, err)) < 0) return rc;
    if ((rc = check_layout(job, m, vars, "variables", err)) < 0) return rc;
    if (grads && (rc = check_layout(job, m, grads, "gradients", err)) < 0) return rc;
    if (b->cols != job->num_features)
        return dt_err_set(err, DT_EINVAL,
                          "model: %s: batch has %d features, \"num_features\" is %d", m->name,
                          b->cols, job->num_features);
    if (b->rows < 1 || !b->x || !b->y)
        return dt_err_set(err, DT_EINVAL, "model: %s: empty batch (%d rows)", m->name, b->rows);
    return m->loss_grad(job, vars, b, grads, loss, err);
}

void dt_model_describe(const dt_job *job, char *buf, int cap) {
    if (cap <= 0) return;
    snprintf(buf, (size_t)cap, "%.*s features=%d", (int)sizeof job->model, job->model,
             job->num_features);
}

int dt_model_lstsq_line(const dt_batch *all, double *w, double *b, dt_err *err) {
    *w = *b = NAN;
    if (all->cols != 1)
        return dt_err_set(err, DT_EINVAL, "model: lstsq: batch has %d features, want 1", all->cols);
    if (all->rows < 2 || !all->x || !all->y)
        return dt_err_set(err, DT_EINVAL, "model: lstsq: need at least 2 examples (got %d)",
                          all->rows);
    const int n = all->rows;
    /* Two passes (means, then centred sums) so large offsets do not cancel. */
    double mean_x = 0, mean_y = 0;
    for (int i = 0; i < n; i++) {
        mean_x += all->x[i];
        mean_y += all->y[i];
    }
    mean_x /= n;
    mean_y /= n;
    double sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        double dx = all->x[i] - mean_x;
        sxx += dx * dx;
        sxy += dx * (all->y[i] - mean_y);
    }
    if (!(sxx > 0))
        return dt_err_set(err, DT_EINVAL,
                          "model: lstsq: every x is the same, the fit is undefined");
    *w = sxy / sxx; /* w = cov(x, y) / var(x) */
    *b = mean_y - *w * mean_x;
    return 0;
}
