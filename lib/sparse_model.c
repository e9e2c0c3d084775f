/*
 * sparse_model: the wide (linear, logistic, softmax) and embedding models
 * over sparse batches (sparse_model.h has the models and their variables).
 *
 * Letters as the header's; e runs over a batch's entries (counted from
 * offsets[0]), k = ix->pos[e] is entry e's row among the batch's U rows.
 *
 * wide, per row i (O outputs):
 *   z_i = b + x_i Wd + sum_e v_e W_k
 *   dz_i = head'(z_i) / B;  db = sum_i dz_i;  dWd = X^T dZ;
 *   dW_k = sum_{e: pos e = k} v_e dz_i(e)          (duplicates summed)
 * embedding, per row i:
 *   a_i = [x_i | sum_e v_e E_k]        (sum)
 *   a_i = [x_i | ..., sum_{e in field c} v_e E_k at slot c, ...] (concat)
 *   the mlp on A gives the loss and dA (lib/model's
 *   dt_model_loss_grad_input); dE_k = sum_{e: pos e = k} v_e dA_i(e)[slot]
 * l2: loss += l2/2 (sum Wd^2 + sum over the U rows W_k^2); the mlp adds
 * its own weights' term.
 *
 * Invariants: the scratch holds cap rows; every public function checks the
 * variables' layout, the batch's shape against the config and the index
 * against the batch before any math.
 * Threading: a handle is used by one thread at a time.
 */
#include "sparse_model.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

#define EVAL_CHUNK 1024 /* rows of the embedding's input built at a time */

const char *const dt_sparse_mode_names[] = {"auto", "on", "off", NULL};
const char *const dt_sparse_model_kind_names[] = {"wide", "embedding", NULL};
const char *const dt_sparse_combiner_names[] = {"sum", "concat", NULL};

struct dt_sparse_model {
    dt_sparse_model_config cfg;
    const char *name; /* the head's name (wide) or "embedding" */
    int O;            /* outputs */
    int D;            /* floats per table row */
    int in;           /* embedding: the mlp's input width, Dd + E or Dd + C E */
    dt_tensor specs[DT_SPARSE_MODEL_MAX_VARS];
    int num_vars;
    dt_model *mlp; /* embedding */
    int cap;       /* rows the scratch holds */
    float *z, *dz; /* wide: (cap, O) */
    float *a, *da; /* embedding: (cap, in) */
};

/* ---- config ----------------------------------------------------------------- */

/* The mlp of an embedding model, its input a_i. */
static void mlp_config(const dt_sparse_model_config *cfg, int in, dt_model_config *out) {
    memset(out, 0, sizeof *out);
    out->kind = DT_MODEL_MLP;
    out->num_features = in;
    out->num_classes = cfg->num_classes;
    out->num_hidden = cfg->num_hidden;
    memcpy(out->hidden, cfg->hidden, sizeof out->hidden);
    out->l2 = cfg->l2;
}

/* Checks cfg; sets the outputs O, the table's row size D and (embedding)
 * the mlp's input width. */
static int shape_of(const dt_sparse_model_config *cfg, int *O, int *D, int *in, dt_err *err) {
    *O = *D = *in = 0;
    if (cfg->num_ids < 1 || cfg->num_ids > DT_TABLE_MAX_ROWS)
        return dt_err_set(err, DT_EINVAL, "sparse model: \"features\" must be 1 to 2^40 (got %lld)",
                          (long long)cfg->num_ids);
    if (cfg->dense_features < 0)
        return dt_err_set(err, DT_EINVAL, "sparse model: %d dense features", cfg->dense_features);
    if (!(cfg->l2 >= 0) || !isfinite(cfg->l2))
        return dt_err_set(err, DT_EINVAL,
                          "sparse model: \"l2\" must be a finite number >= 0 (got %g)", cfg->l2);
    if (cfg->kind == DT_SPARSE_WIDE) {
        const dt_model_kind h = cfg->head;
        if (h != DT_MODEL_LINEAR && h != DT_MODEL_LOGISTIC && h != DT_MODEL_SOFTMAX)
            return dt_err_set(err, DT_EINVAL,
                              "sparse model: wide: the head must be linear, logistic or softmax");
        if (h == DT_MODEL_LOGISTIC && cfg->num_classes != 2)
            return dt_err_set(err, DT_EINVAL,
                              "sparse model: logistic: \"classes\" must be 2 (got %d)",
                              cfg->num_classes);
        if (h == DT_MODEL_SOFTMAX && (cfg->num_classes < 2 || cfg->num_classes > DT_TABLE_MAX_DIM))
            return dt_err_set(err, DT_EINVAL,
                              "sparse model: softmax: \"classes\" must be 2 to %d (got %d)",
                              DT_TABLE_MAX_DIM, cfg->num_classes);
        *O = *D = dt_model_head_outputs(h, cfg->num_classes);
        if ((int64_t)cfg->dense_features * *O > INT_MAX)
            return dt_err_set(err, DT_EINVAL, "sparse model: %d dense features of %d outputs",
                              cfg->dense_features, *O);
        return 0;
    }
    if (cfg->kind != DT_SPARSE_EMBEDDING)
        return dt_err_set(err, DT_EINVAL, "sparse model: unknown kind %d", (int)cfg->kind);
    if (cfg->dim < 1 || cfg->dim > DT_TABLE_MAX_DIM)
        return dt_err_set(err, DT_EINVAL,
                          "sparse model: embedding: \"dim\" must be 1 to %d (got %d)",
                          DT_TABLE_MAX_DIM, cfg->dim);
    if ((unsigned)cfg->combiner > DT_COMBINE_CONCAT)
        return dt_err_set(err, DT_EINVAL, "sparse model: embedding: unknown combiner %d",
                          (int)cfg->combiner);
    if (cfg->combiner == DT_COMBINE_CONCAT && cfg->num_fields < 1)
        return dt_err_set(err, DT_EINVAL,
                          "sparse model: embedding: concat needs the fields' count (got %d)",
                          cfg->num_fields);
    const int64_t slots = cfg->combiner == DT_COMBINE_CONCAT ? cfg->num_fields : 1;
    const int64_t width = cfg->dense_features + slots * cfg->dim;
    if (width > INT_MAX)
        return dt_err_set(err, DT_EINVAL, "sparse model: embedding: an input of %lld features",
                          (long long)width);
    *in = (int)width;
    *D = cfg->dim;
    *O = cfg->num_classes;
    return 0;
}

int dt_sparse_model_specs(const dt_sparse_model_config *cfg, dt_tensor *specs, int *count,
                          dt_table_config *table, dt_err *err) {
    *count = 0;
    memset(table, 0, sizeof *table);
    int O, D, in, rc = shape_of(cfg, &O, &D, &in, err);
    if (rc < 0) return rc;
    table->rows = cfg->num_ids;
    table->dim = D;
    if (cfg->kind == DT_SPARSE_EMBEDDING) {
        dt_model_config mc;
        mlp_config(cfg, in, &mc);
        if ((rc = dt_model_specs(&mc, specs, count, err)) < 0)
            return dt_err_wrap(err, rc, "sparse model: embedding");
        snprintf(table->name, sizeof table->name, "embedding/table");
        table->init = DT_TABLE_INIT_NORMAL;
        table->init_scale = 1.0 / sqrt((double)D);
        return 0;
    }
    const char *head = dt_model_kind_names[cfg->head];
    snprintf(table->name, sizeof table->name, "%s/weight", head);
    table->init = DT_TABLE_INIT_ZEROS;
    int n = 0;
    memset(specs, 0, 2 * sizeof *specs);
    if (cfg->dense_features > 0) {
        snprintf(specs[n].name, sizeof specs[n].name, "%s/dense_weight", head);
        specs[n].ndim = 2;
        specs[n].shape[0] = cfg->dense_features;
        specs[n++].shape[1] = O;
    }
    snprintf(specs[n].name, sizeof specs[n].name, "%s/bias", head);
    specs[n].ndim = 1;
    specs[n++].shape[0] = O;
    for (int i = 0; i < n; i++) {
        specs[i].dtype = DT_DTYPE_F32;
        if ((rc = dt_tensor_check_spec(&specs[i], err)) < 0) return rc;
    }
    *count = n;
    return 0;
}

void dt_sparse_model_init(const dt_sparse_model_config *cfg, uint64_t seed, dt_tensors *vars) {
    int O, D, in;
    DT_ASSERT(shape_of(cfg, &O, &D, &in, NULL) == 0);
    if (cfg->kind == DT_SPARSE_EMBEDDING) {
        dt_model_config mc;
        mlp_config(cfg, in, &mc);
        dt_model_init(&mc, seed, vars);
        return;
    }
    for (int i = 0; i < vars->count; i++)
        memset(vars->items[i].data, 0, vars->items[i].nbytes);
}

/* ---- handle ----------------------------------------------------------------- */

static void free_scratch(dt_sparse_model *m) {
    free(m->z);
    free(m->dz);
    free(m->a);
    free(m->da);
    m->z = m->dz = m->a = m->da = NULL;
    m->cap = 0;
}

int dt_sparse_model_new(const dt_sparse_model_config *cfg, dt_sparse_model **out, dt_err *err) {
    *out = NULL;
    dt_sparse_model *m = dt_calloc(1, sizeof *m);
    if (!m) return dt_err_set(err, DT_ENOMEM, "sparse model: no memory for a handle");
    m->cfg = *cfg;
    dt_table_config table;
    int rc = shape_of(cfg, &m->O, &m->D, &m->in, err);
    if (rc == 0) rc = dt_sparse_model_specs(cfg, m->specs, &m->num_vars, &table, err);
    if (rc == 0 && cfg->kind == DT_SPARSE_EMBEDDING) {
        dt_model_config mc;
        mlp_config(cfg, m->in, &mc);
        rc = dt_model_new(&mc, &m->mlp, err);
    }
    if (rc < 0) {
        dt_sparse_model_free(m);
        return rc;
    }
    m->name = cfg->kind == DT_SPARSE_WIDE ? dt_model_kind_names[cfg->head] : "embedding";
    *out = m;
    return 0;
}

void dt_sparse_model_free(dt_sparse_model *m) {
    if (!m) return;
    free_scratch(m);
    dt_model_free(m->mlp);
    free(m);
}

int dt_sparse_model_out_cols(const dt_sparse_model *m) {
    return m->O;
}

/* Scratch for rows rows: (rows, O) for wide, (rows, in) for embedding. */
static int grow(dt_sparse_model *m, int rows, dt_err *err) {
    if (rows <= m->cap) return 0;
    free_scratch(m);
    const int wide = m->cfg.kind == DT_SPARSE_WIDE;
    const size_t width = (size_t)(wide ? m->O : m->in);
    int ok = 1;
    if ((size_t)rows > SIZE_MAX / sizeof(float) / width) ok = 0;
    const size_t bytes = ok ? (size_t)rows * width * sizeof(float) : 0;
    if (ok && wide) ok = (m->z = dt_malloc(bytes)) && (m->dz = dt_malloc(bytes));
    if (ok && !wide) ok = (m->a = dt_malloc(bytes)) && (m->da = dt_malloc(bytes));
    if (!ok) {
        free_scratch(m);
        return dt_err_set(err, DT_ENOMEM, "sparse model: %s: no memory for %d rows", m->name, rows);
    }
    m->cap = rows;
    return 0;
}

/* ---- checks ----------------------------------------------------------------- */

static int check_layout(const dt_sparse_model *m, const dt_tensors *ts, const char *what,
                        dt_err *err) {
    if (ts->count != m->num_vars)
        return dt_err_set(err, DT_EINVAL, "sparse model: %s: %d %s, want %d", m->name, ts->count,
                          what, m->num_vars);
    for (int i = 0; i < m->num_vars; i++) {
        const dt_tensor *t = &ts->items[i], *s = &m->specs[i];
        if (strcmp(t->name, s->name) != 0 || t->dtype != s->dtype || t->ndim != s->ndim ||
            memcmp(t->shape, s->shape, sizeof t->shape) != 0 || !t->data)
            return dt_err_set(err, DT_EINVAL,
                              "sparse model: %s: %s[%d] is not %s as the model has it", m->name,
                              what, i, s->name);
    }
    return 0;
}

/* What every entry point checks before any math. */
static int check_call(const dt_sparse_model *m, const dt_tensors *vars, const dt_sparse_batch *b,
                      const dt_sparse_index *ix, const float *rows, const dt_tensors *grads,
                      const float *row_grads, int labels, dt_err *err) {
    const dt_sparse_model_config *cfg = &m->cfg;
    int rc = check_layout(m, vars, "variables", err);
    if (rc == 0 && grads) rc = check_layout(m, grads, "gradients", err);
    if (rc < 0) return rc;
    if (b->rows < 1 || !b->offsets || (labels && !b->y))
        return dt_err_set(err, DT_EINVAL, "sparse model: %s: empty batch (%d rows)", m->name,
                          b->rows);
    if (b->dense_cols != cfg->dense_features || (b->dense_cols > 0 && !b->dense))
        return dt_err_set(err, DT_EINVAL,
                          "sparse model: %s: the batch has %d dense features, the model %d",
                          m->name, b->dense_cols, cfg->dense_features);
    if (ix->nnz != dt_sparse_nnz(b) || ix->n < 0 || ix->n > ix->nnz)
        return dt_err_set(err, DT_EINVAL,
                          "sparse model: %s: the index is of another batch (%lld entries, the "
                          "batch %lld)",
                          m->name, (long long)ix->nnz, (long long)dt_sparse_nnz(b));
    if (ix->n > 0 && ix->ids[ix->n - 1] >= cfg->num_ids)
        return dt_err_set(err, DT_EINVAL,
                          "sparse model: %s: id %lld is not below \"features\" %lld", m->name,
                          (long long)ix->ids[ix->n - 1], (long long)cfg->num_ids);
    if (ix->n > 0 && (!rows || (grads && !row_grads)))
        return dt_err_set(err, DT_EINVAL, "sparse model: %s: no table rows", m->name);
    if (cfg->kind == DT_SPARSE_EMBEDDING && cfg->combiner == DT_COMBINE_CONCAT) {
        if (!b->fields && ix->nnz > 0)
            return dt_err_set(err, DT_EINVAL,
                              "sparse model: embedding: concat needs each entry's field");
        for (int64_t e = 0; e < ix->nnz; e++)
            if (b->fields[e] < 0 || b->fields[e] >= cfg->num_fields)
                return dt_err_set(err, DT_EINVAL,
                                  "sparse model: embedding: entry %lld: field %d is out of range "
                                  "[0, %d)",
                                  (long long)e, (int)b->fields[e], cfg->num_fields);
    }
    if (labels && cfg->kind == DT_SPARSE_WIDE)
        return dt_model_head_check_labels(cfg->head, cfg->num_classes, b->y, b->rows, err);
    return 0;
}

/* ---- wide ------------------------------------------------------------------- */

static float value_of(const dt_sparse_batch *b, int64_t e) {
    return b->values ? b->values[e] : 1.0f;
}

/* z (rows, O) of rows [first, first + rows) of b. */
static void wide_forward(const dt_sparse_model *m, const dt_tensors *vars, const dt_sparse_batch *b,
                         const dt_sparse_index *ix, const float *table_rows, int first, int rows,
                         float *z) {
    const int O = m->O, Dd = m->cfg.dense_features;
    const float *wd = Dd ? vars->items[0].data : NULL; /* (Dd, O) */
    const float *bias = vars->items[Dd ? 1 : 0].data;  /* (O) */
    const int64_t base = b->offsets[0];
    for (int r = 0; r < rows; r++) {
        const int i = first + r;
        float *zi = z + (size_t)r * O;
        memcpy(zi, bias, (size_t)O * sizeof *zi);
        const float *x = Dd ? b->dense + (size_t)i * Dd : NULL;
        for (int d = 0; d < Dd; d++)
            for (int o = 0; o < O; o++)
                zi[o] += x[d] * wd[(size_t)d * O + o];
        for (int64_t e = b->offsets[i] - base; e < b->offsets[i + 1] - base; e++) {
            const float v = value_of(b, e), *w = table_rows + (size_t)ix->pos[e] * O;
            for (int o = 0; o < O; o++)
                zi[o] += v * w[o];
        }
    }
}

/* l2/2 sum w^2 over the dense weights (not biases) and the batch's rows,
 * adding l2 w to their gradients when given. */
static double l2_rows(const dt_sparse_model *m, const float *rows, int64_t U, float *row_grads) {
    const double l2 = m->cfg.l2;
    if (l2 == 0) return 0;
    double sum = 0;
    const int64_t n = U * m->D;
    for (int64_t j = 0; j < n; j++) {
        sum += (double)rows[j] * rows[j];
        if (row_grads) row_grads[j] += (float)l2 * rows[j];
    }
    return 0.5 * l2 * sum;
}

/* l2/2 sum Wd^2 of the wide model's dense weight, adding l2 Wd to its
 * gradient when given. */
static double l2_dense(const dt_sparse_model *m, const dt_tensors *vars, dt_tensors *grads) {
    const int Dd = m->cfg.dense_features;
    if (m->cfg.l2 == 0 || Dd == 0) return 0;
    const float *wd = vars->items[0].data;
    float *g = grads ? grads->items[0].data : NULL;
    double sq = 0;
    for (int64_t j = 0; j < (int64_t)Dd * m->O; j++) {
        sq += (double)wd[j] * wd[j];
        if (g) g[j] += (float)m->cfg.l2 * wd[j];
    }
    return 0.5 * m->cfg.l2 * sq;
}

static double wide_loss_grad(dt_sparse_model *m, const dt_tensors *vars, const dt_sparse_batch *b,
                             const dt_sparse_index *ix, const float *rows, dt_tensors *grads,
                             float *row_grads) {
    const int B = b->rows, O = m->O, Dd = m->cfg.dense_features;
    double sum = 0;
    int64_t correct = 0;
    wide_forward(m, vars, b, ix, rows, 0, B, m->z);
    dt_model_head_loss(m->cfg.head, m->cfg.num_classes, m->z, b->y, B, grads ? 1.0 / B : 0, m->dz,
                       &sum, &correct);
    if (grads) {
        float *gwd = Dd ? grads->items[0].data : NULL, *gb = grads->items[Dd ? 1 : 0].data;
        memset(gb, 0, (size_t)O * sizeof *gb);
        if (gwd) memset(gwd, 0, (size_t)Dd * O * sizeof *gwd);
        memset(row_grads, 0, (size_t)ix->n * O * sizeof *row_grads);
        const int64_t base = b->offsets[0];
        for (int i = 0; i < B; i++) {
            const float *dz = m->dz + (size_t)i * O;
            for (int o = 0; o < O; o++)
                gb[o] += dz[o];
            for (int d = 0; gwd && d < Dd; d++)
                for (int o = 0; o < O; o++)
                    gwd[(size_t)d * O + o] += b->dense[(size_t)i * Dd + d] * dz[o];
            for (int64_t e = b->offsets[i] - base; e < b->offsets[i + 1] - base; e++) {
                const float v = value_of(b, e);
                float *g = row_grads + (size_t)ix->pos[e] * O;
                for (int o = 0; o < O; o++)
                    g[o] += v * dz[o];
            }
        }
    }
    return sum / B + l2_dense(m, vars, grads) + l2_rows(m, rows, ix->n, row_grads);
}

/* ---- embedding -------------------------------------------------------------- */

/* Where entry e's row goes in a: the start of its slot. */
static int slot_of(const dt_sparse_model *m, const dt_sparse_batch *b, int64_t e) {
    const int Dd = m->cfg.dense_features;
    return m->cfg.combiner == DT_COMBINE_CONCAT ? Dd + b->fields[e] * m->D : Dd;
}

/* The mlp's input a (rows, in) for rows [first, first + rows) of b. */
static void embed(const dt_sparse_model *m, const dt_sparse_batch *b, const dt_sparse_index *ix,
                  const float *table_rows, int first, int rows, float *a) {
    const int in = m->in, Dd = m->cfg.dense_features, E = m->D;
    const int64_t base = b->offsets[0];
    memset(a, 0, (size_t)rows * in * sizeof *a);
    for (int r = 0; r < rows; r++) {
        const int i = first + r;
        float *ai = a + (size_t)r * in;
        if (Dd) memcpy(ai, b->dense + (size_t)i * Dd, (size_t)Dd * sizeof *ai);
        for (int64_t e = b->offsets[i] - base; e < b->offsets[i + 1] - base; e++) {
            const float v = value_of(b, e), *row = table_rows + (size_t)ix->pos[e] * E;
            float *slot = ai + slot_of(m, b, e);
            for (int j = 0; j < E; j++)
                slot[j] += v * row[j];
        }
    }
}

static int embedding_loss_grad(dt_sparse_model *m, const dt_tensors *vars, const dt_sparse_batch *b,
                               const dt_sparse_index *ix, const float *rows, dt_tensors *grads,
                               float *row_grads, double *loss, dt_err *err) {
    const int B = b->rows, E = m->D, in = m->in;
    embed(m, b, ix, rows, 0, B, m->a);
    const dt_batch mb = {.rows = B, .cols = in, .x = m->a, .y = b->y};
    int rc = grads ? dt_model_loss_grad_input(m->mlp, vars, &mb, grads, m->da, loss, err)
                   : dt_model_loss_grad(m->mlp, vars, &mb, NULL, loss, err);
    if (rc < 0) return dt_err_wrap(err, rc, "sparse model: embedding");
    if (!grads) {
        *loss += l2_rows(m, rows, ix->n, NULL);
        return 0;
    }
    memset(row_grads, 0, (size_t)ix->n * E * sizeof *row_grads);
    const int64_t base = b->offsets[0];
    for (int i = 0; i < B; i++)
        for (int64_t e = b->offsets[i] - base; e < b->offsets[i + 1] - base; e++) {
            const float v = value_of(b, e);
            const float *da = m->da + (size_t)i * in + slot_of(m, b, e);
            float *g = row_grads + (size_t)ix->pos[e] * E;
            for (int j = 0; j < E; j++)
                g[j] += v * da[j];
        }
    *loss += l2_rows(m, rows, ix->n, row_grads);
    return 0;
}

/* ---- entry points ----------------------------------------------------------- */

int dt_sparse_model_loss_grad(dt_sparse_model *m, const dt_tensors *vars, const dt_sparse_batch *b,
                              const dt_sparse_index *ix, const float *rows, dt_tensors *grads,
                              float *row_grads, double *loss, dt_err *err) {
    *loss = NAN;
    int rc = check_call(m, vars, b, ix, rows, grads, row_grads, 1, err);
    if (rc == 0) rc = grow(m, b->rows, err);
    if (rc < 0) return rc;
    if (m->cfg.kind == DT_SPARSE_WIDE) {
        *loss = wide_loss_grad(m, vars, b, ix, rows, grads, row_grads);
        return 0;
    }
    return embedding_loss_grad(m, vars, b, ix, rows, grads, row_grads, loss, err);
}

/* Rows per pass of evaluate and predict. */
static int chunk_of(const dt_sparse_model *m, int B) {
    const int chunk = m->cfg.kind == DT_SPARSE_WIDE ? B : EVAL_CHUNK;
    return B < chunk ? B : chunk;
}

int dt_sparse_model_evaluate(dt_sparse_model *m, const dt_tensors *vars, const dt_sparse_batch *b,
                             const dt_sparse_index *ix, const float *rows, double *loss,
                             double *accuracy, dt_err *err) {
    *loss = *accuracy = NAN;
    int rc = check_call(m, vars, b, ix, rows, NULL, NULL, 1, err);
    const int B = b->rows, chunk = chunk_of(m, B);
    if (rc == 0) rc = grow(m, chunk, err);
    if (rc < 0) return rc;
    double sum = 0;
    int64_t correct = 0;
    for (int first = 0; first < B; first += chunk) {
        const int n = B - first < chunk ? B - first : chunk;
        if (m->cfg.kind == DT_SPARSE_WIDE) {
            wide_forward(m, vars, b, ix, rows, first, n, m->z);
            dt_model_head_loss(m->cfg.head, m->cfg.num_classes, m->z, b->y + first, n, 0, NULL,
                               &sum, &correct);
            continue;
        }
        embed(m, b, ix, rows, first, n, m->a);
        const dt_batch mb = {.rows = n, .cols = m->in, .x = m->a, .y = b->y + first};
        double l, acc;
        if ((rc = dt_model_evaluate(m->mlp, vars, &mb, &l, &acc, err)) < 0)
            return dt_err_wrap(err, rc, "sparse model: embedding");
        sum += l * n;
        correct += (int64_t)llround(acc * n);
    }
    *loss = sum / B;
    const int regression = m->cfg.kind == DT_SPARSE_WIDE && m->cfg.head == DT_MODEL_LINEAR;
    *accuracy = regression ? NAN : (double)correct / B;
    return 0;
}

int dt_sparse_model_predict(dt_sparse_model *m, const dt_tensors *vars, const dt_sparse_batch *b,
                            const dt_sparse_index *ix, const float *rows, float *out, dt_err *err) {
    int rc = check_call(m, vars, b, ix, rows, NULL, NULL, 0, err);
    const int B = b->rows, chunk = chunk_of(m, B), O = m->O;
    if (rc == 0) rc = grow(m, chunk, err);
    if (rc < 0) return rc;
    for (int first = 0; first < B; first += chunk) {
        const int n = B - first < chunk ? B - first : chunk;
        float *dst = out + (size_t)first * O;
        if (m->cfg.kind == DT_SPARSE_WIDE) {
            wide_forward(m, vars, b, ix, rows, first, n, m->z);
            dt_model_head_predict(m->cfg.head, m->cfg.num_classes, m->z, n, dst);
            continue;
        }
        embed(m, b, ix, rows, first, n, m->a);
        const dt_batch mb = {.rows = n, .cols = m->in, .x = m->a, .y = NULL};
        if ((rc = dt_model_predict(m->mlp, vars, &mb, dst, NULL, err)) < 0)
            return dt_err_wrap(err, rc, "sparse model: embedding");
    }
    return 0;
}

int dt_sparse_model_score(dt_sparse_model *m, const dt_tensors *vars, dt_table *t,
                          const dt_sparse_set *set, int batch_rows, double *loss, double *accuracy,
                          dt_err *err) {
    *loss = *accuracy = NAN;
    DT_ASSERT(batch_rows >= 1);
    const int D = dt_table_config_of(t)->dim;
    if (D != m->D)
        return dt_err_set(err, DT_EINVAL,
                          "sparse model: %s: the table's rows are %d floats, not %d", m->name, D,
                          m->D);
    if (set->rows == 0) return 0;
    dt_sparse_index ix;
    memset(&ix, 0, sizeof ix);
    dt_table_batch tb;
    memset(&tb, 0, sizeof tb);
    float *rows = NULL;
    int64_t cap = 0;
    double sum_loss = 0, sum_acc = 0;
    int rc = 0;
    for (int64_t first = 0; first < set->rows && rc == 0; first += batch_rows) {
        const int count = set->rows - first < batch_rows ? (int)(set->rows - first) : batch_rows;
        dt_sparse_batch b;
        dt_sparse_set_slice(set, first, count, &b);
        if ((rc = dt_sparse_index_build(&ix, &b, err)) < 0) break;
        /* U <= entries of a batch < 2^31, D <= 2^16; at least one row, so
         * rows is never NULL (a batch of no entries reads none). */
        if (ix.n * D > cap || !rows) {
            const int64_t want = ix.n > 1 ? ix.n * D : D;
            float *grown = dt_realloc(rows, (size_t)want * sizeof *rows);
            if (!grown) {
                rc = dt_err_set(err, DT_ENOMEM, "sparse model: %s: out of memory", m->name);
                break;
            }
            rows = grown;
            cap = want;
        }
        if ((rc = dt_table_plan(t, ix.ids, ix.n, &tb, err)) < 0) break;
        dt_table_read(t, &tb, rows, NULL);
        double l = 0, a = 0;
        if ((rc = dt_sparse_model_evaluate(m, vars, &b, &ix, rows, &l, &a, err)) < 0) break;
        sum_loss += l * count;
        sum_acc += a * count;
    }
    if (rc == 0) {
        *loss = sum_loss / (double)set->rows;
        *accuracy = sum_acc / (double)set->rows;
    }
    free(rows);
    dt_table_batch_deinit(&tb);
    dt_sparse_index_deinit(&ix);
    return rc;
}
