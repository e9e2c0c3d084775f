/*
 * sparse_model suite: the wide and embedding models over sparse batches.
 * Specs and their errors; every model's loss against a double-precision
 * reference written here, and every partial derivative (dense variables
 * and table rows, duplicate ids included) against central finite
 * differences of that reference; the wide logistic model against the
 * dense one of lib/model on the same data; evaluate and predict; bad
 * calls refused; and training on generated Criteo-layout data through a
 * table, to within a few percent of the hidden model's log loss.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "criteo_gen.h"
#include "hash.h"
#include "model.h"
#include "proc.h"
#include "sparse_model.h"
#include "sparse_reader.h"
#include "suites.h"
#include "table.h"

static double uniform(uint64_t *st) { /* [-1, 1) */
    *st = dt_hash_mix64(*st + 0x9e3779b97f4a7c15ULL);
    return (double)(*st >> 11) * 0x1.0p-52 - 1.0;
}

/* A batch of B rows with n[i] entries each over F ids (some repeated
 * within and across rows), values when with_values, C fields, Dd dense. */
typedef struct {
    dt_sparse_batch b;
    int64_t offsets[17], ids[128];
    float values[128], dense[16 * 4], y[16];
    int32_t fields[128];
} toy;

static void toy_batch(toy *t, int B, int64_t F, int Dd, int C, int with_values, uint64_t seed) {
    memset(t, 0, sizeof *t);
    uint64_t st = seed;
    int64_t e = 0;
    t->offsets[0] = 0;
    for (int i = 0; i < B; i++) {
        int n = (int)((uniform(&st) + 1) * 3); /* 0..5 entries */
        for (int k = 0; k < n; k++, e++) {
            /* ids from a small range so they repeat */
            t->ids[e] = (int64_t)((uniform(&st) + 1) / 2 * (double)(F < 6 ? F : 6));
            t->values[e] = (float)(uniform(&st) * 2);
            t->fields[e] = C ? (int32_t)((uniform(&st) + 1) / 2 * C) : 0;
        }
        t->offsets[i + 1] = e;
        for (int d = 0; d < Dd; d++)
            t->dense[i * Dd + d] = (float)uniform(&st);
    }
    t->b.rows = B;
    t->b.dense_cols = Dd;
    t->b.dense = Dd ? t->dense : NULL;
    t->b.y = t->y;
    t->b.offsets = t->offsets;
    t->b.ids = t->ids;
    t->b.values = with_values ? t->values : NULL;
    t->b.fields = C ? t->fields : NULL;
    t->b.num_ids = F;
    t->b.num_fields = C;
}

/* ---- a double-precision reference of both models ---- */

#define RMAX 64
typedef struct {
    const dt_sparse_model_config *cfg;
    int O, D, in, num_layers;
    int dims[DT_MAX_HIDDEN + 2];
    /* theta: the dense variables in their order, then the U rows */
    double *theta;
    int64_t var_off[DT_SPARSE_MODEL_MAX_VARS + 1], rows_off, total;
    int num_vars;
} ref_model;

static double ref_head(dt_model_kind head, const double *z, int K, float y) {
    if (head == DT_MODEL_LINEAR) return (z[0] - y) * (z[0] - y);
    if (head == DT_MODEL_LOGISTIC) return fmax(z[0], 0) + log1p(exp(-fabs(z[0]))) - y * z[0];
    double mx = z[0], s = 0;
    for (int k = 1; k < K; k++)
        mx = fmax(mx, z[k]);
    for (int k = 0; k < K; k++)
        s += exp(z[k] - mx);
    return mx + log(s) - z[(int)y];
}

/* The training loss at theta: per-row forward in double, then l2. */
static double ref_loss(const ref_model *r, const dt_sparse_batch *b, const dt_sparse_index *ix) {
    const dt_sparse_model_config *cfg = r->cfg;
    const double *th = r->theta, *rows = th + r->rows_off;
    const int Dd = cfg->dense_features, O = r->O, D = r->D;
    double sum = 0;
    for (int i = 0; i < b->rows; i++) {
        double z[RMAX] = {0}, a[RMAX] = {0};
        if (cfg->kind == DT_SPARSE_WIDE) {
            const double *wd = Dd ? th + r->var_off[0] : NULL, *bias = th + r->var_off[Dd ? 1 : 0];
            for (int o = 0; o < O; o++) {
                z[o] = bias[o];
                for (int d = 0; d < Dd; d++)
                    z[o] += b->dense[i * Dd + d] * wd[d * O + o];
            }
            for (int64_t e = b->offsets[i]; e < b->offsets[i + 1]; e++)
                for (int o = 0; o < O; o++)
                    z[o] += (b->values ? b->values[e] : 1.0) * rows[ix->pos[e] * D + o];
            sum += ref_head(cfg->head, z, O, b->y[i]);
            continue;
        }
        for (int d = 0; d < Dd; d++)
            a[d] = b->dense[i * Dd + d];
        for (int64_t e = b->offsets[i]; e < b->offsets[i + 1]; e++) {
            int slot = Dd + (cfg->combiner == DT_COMBINE_CONCAT ? b->fields[e] * D : 0);
            for (int j = 0; j < D; j++)
                a[slot + j] += (b->values ? b->values[e] : 1.0) * rows[ix->pos[e] * D + j];
        }
        for (int l = 0; l < r->num_layers; l++) {
            const int in = r->dims[l], out = r->dims[l + 1];
            const double *w = th + r->var_off[2 * l], *bias = th + r->var_off[2 * l + 1];
            for (int j = 0; j < out; j++) {
                z[j] = bias[j];
                for (int k = 0; k < in; k++)
                    z[j] += a[k] * w[k * out + j];
            }
            if (l < r->num_layers - 1)
                for (int j = 0; j < out; j++)
                    a[j] = z[j] > 0 ? z[j] : 0;
        }
        sum += ref_head(DT_MODEL_SOFTMAX, z, O, b->y[i]);
    }
    double sq = 0;
    for (int v = 0; v < r->num_vars; v++) {
        int weight = cfg->kind == DT_SPARSE_WIDE ? (Dd && v == 0) : v % 2 == 0;
        if (!weight) continue;
        for (int64_t j = r->var_off[v]; j < r->var_off[v + 1]; j++)
            sq += th[j] * th[j];
    }
    for (int64_t j = r->rows_off; j < r->total; j++)
        sq += th[j] * th[j];
    return sum / b->rows + 0.5 * cfg->l2 * sq;
}

/* Builds the model, random variables and rows, labels the head takes, and
 * checks loss and every partial derivative against the reference. */
static void check_fd(const dt_sparse_model_config *cfg, toy *t, uint64_t seed) {
    dt_tensor specs[DT_SPARSE_MODEL_MAX_VARS];
    dt_table_config tc;
    int count = 0;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_sparse_model_specs(cfg, specs, &count, &tc, &err) == 0, "%s", err.msg);
    dt_tensors v, g;
    ck_assert_int_eq(dt_tensors_init(&v, specs, count, NULL), 0);
    ck_assert_int_eq(dt_tensors_init(&g, specs, count, NULL), 0);
    dt_sparse_model *m = NULL;
    ck_assert_msg(dt_sparse_model_new(cfg, &m, &err) == 0, "%s", err.msg);
    const int O = dt_sparse_model_out_cols(m), D = tc.dim;
    uint64_t st = seed;
    for (int i = 0; i < v.count; i++)
        for (int64_t j = 0; j < dt_tensor_numel(&v.items[i]); j++)
            ((float *)v.items[i].data)[j] = (float)(0.5 * uniform(&st));
    for (int i = 0; i < t->b.rows; i++) {
        double u = (uniform(&st) + 1) / 2;
        t->y[i] = cfg->kind == DT_SPARSE_WIDE && cfg->head == DT_MODEL_LINEAR ? (float)(2 * u)
                  : O == 1                                                    ? (float)(u < 0.5)
                                                                              : (float)(int)(u * O);
    }
    dt_sparse_index ix = {0};
    ck_assert_int_eq(dt_sparse_index_build(&ix, &t->b, NULL), 0);
    float rows[64 * 8], row_grads[64 * 8];
    ck_assert_int_le(ix.n * D, 64 * 8);
    for (int64_t j = 0; j < ix.n * D; j++)
        rows[j] = (float)(0.7 * uniform(&st));

    /* the reference's parameters */
    ref_model r = {.cfg = cfg, .O = O, .D = D, .num_vars = count};
    if (cfg->kind == DT_SPARSE_EMBEDDING) {
        r.num_layers = count / 2;
        r.dims[0] = (int)specs[0].shape[0];
        for (int l = 0; l < r.num_layers; l++)
            r.dims[l + 1] = (int)specs[2 * l].shape[1];
        ck_assert_int_le(r.dims[0], RMAX);
    }
    for (int i = 0; i < count; i++)
        r.var_off[i + 1] = r.var_off[i] + dt_tensor_numel(&specs[i]);
    r.rows_off = r.var_off[count];
    r.total = r.rows_off + ix.n * D;
    r.theta = malloc((size_t)r.total * sizeof *r.theta);
    for (int i = 0; i < count; i++)
        for (int64_t j = 0; j < dt_tensor_numel(&specs[i]); j++)
            r.theta[r.var_off[i] + j] = ((float *)v.items[i].data)[j];
    for (int64_t j = 0; j < ix.n * D; j++)
        r.theta[r.rows_off + j] = rows[j];

    double loss;
    ck_assert_msg(dt_sparse_model_loss_grad(m, &v, &t->b, &ix, rows, &g, row_grads, &loss, &err) ==
                      0,
                  "%s", err.msg);
    const double want = ref_loss(&r, &t->b, &ix);
    ck_assert_msg(fabs(loss - want) <= 1e-5 * (1 + fabs(want)), "loss %.9g, reference %.9g", loss,
                  want);
    const double h = 1e-5;
    for (int64_t k = 0; k < r.total; k++) {
        double keep = r.theta[k];
        r.theta[k] = keep + h;
        double up = ref_loss(&r, &t->b, &ix);
        r.theta[k] = keep - h;
        double down = ref_loss(&r, &t->b, &ix);
        r.theta[k] = keep;
        double fd = (up - down) / (2 * h), got;
        const char *what = "row";
        if (k >= r.rows_off) {
            got = row_grads[k - r.rows_off];
        } else {
            int i = 0;
            while (k >= r.var_off[i + 1])
                i++;
            got = ((float *)g.items[i].data)[k - r.var_off[i]];
            what = specs[i].name;
        }
        ck_assert_msg(fabs(got - fd) <= 1e-4 + 1e-3 * fabs(fd),
                      "%s: d%s (param %lld) = %.7g, fd %.7g", dt_sparse_model_kind_names[cfg->kind],
                      what, (long long)k, got, fd);
    }
    /* Evaluate's loss is the data loss: the same without l2. */
    double eval_loss, acc;
    ck_assert_int_eq(dt_sparse_model_evaluate(m, &v, &t->b, &ix, rows, &eval_loss, &acc, NULL), 0);
    dt_sparse_model_config no_l2 = *cfg;
    no_l2.l2 = 0;
    r.cfg = &no_l2;
    ck_assert_msg(fabs(eval_loss - ref_loss(&r, &t->b, &ix)) < 1e-5 * (1 + eval_loss), "eval %g",
                  eval_loss);
    free(r.theta);
    dt_sparse_index_deinit(&ix);
    dt_sparse_model_free(m);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
}

static dt_sparse_model_config wide(dt_model_kind head, int K, int64_t F, int Dd, double l2) {
    dt_sparse_model_config c;
    memset(&c, 0, sizeof c);
    c.kind = DT_SPARSE_WIDE;
    c.head = head;
    c.num_classes = K;
    c.num_ids = F;
    c.dense_features = Dd;
    c.l2 = l2;
    return c;
}

static dt_sparse_model_config embedding(dt_sparse_combiner comb, int C, int E, int Dd, double l2) {
    dt_sparse_model_config c;
    memset(&c, 0, sizeof c);
    c.kind = DT_SPARSE_EMBEDDING;
    c.num_classes = 2;
    c.num_ids = 1000;
    c.dense_features = Dd;
    c.dim = E;
    c.combiner = comb;
    c.num_fields = C;
    c.hidden[0] = 5;
    c.hidden[1] = 3;
    c.num_hidden = 2;
    c.l2 = l2;
    return c;
}

START_TEST(test_grad_fd) {
    toy t;
    dt_sparse_model_config c = wide(DT_MODEL_LINEAR, 0, 50, 3, 0.1);
    toy_batch(&t, 6, 50, 3, 0, 1, 1);
    check_fd(&c, &t, 2);
    c = wide(DT_MODEL_LOGISTIC, 2, (int64_t)1 << 40, 2, 0);
    toy_batch(&t, 8, (int64_t)1 << 40, 2, 0, 0, 3);
    check_fd(&c, &t, 4);
    c = wide(DT_MODEL_SOFTMAX, 3, 20, 0, 0.05);
    toy_batch(&t, 7, 20, 0, 0, 1, 5);
    check_fd(&c, &t, 6);
    c = embedding(DT_COMBINE_SUM, 0, 3, 2, 0.01);
    toy_batch(&t, 6, 1000, 2, 0, 1, 7);
    check_fd(&c, &t, 8);
    c = embedding(DT_COMBINE_CONCAT, 4, 2, 3, 0);
    toy_batch(&t, 9, 1000, 3, 4, 0, 9);
    check_fd(&c, &t, 10);
    c.num_hidden = 1;
    c.l2 = 0.02;
    c.dense_features = 0;
    toy_batch(&t, 5, 1000, 0, 4, 1, 11);
    check_fd(&c, &t, 12);
}
END_TEST

START_TEST(test_specs) {
    dt_tensor specs[DT_SPARSE_MODEL_MAX_VARS];
    dt_table_config tc;
    int n = 0;
    dt_sparse_model_config c = wide(DT_MODEL_LOGISTIC, 2, (int64_t)1 << 28, 13, 0);
    ck_assert_int_eq(dt_sparse_model_specs(&c, specs, &n, &tc, NULL), 0);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(specs[0].name, "logistic/dense_weight");
    ck_assert(specs[0].shape[0] == 13 && specs[0].shape[1] == 1);
    ck_assert_str_eq(specs[1].name, "logistic/bias");
    ck_assert_str_eq(tc.name, "logistic/weight");
    ck_assert(tc.rows == (int64_t)1 << 28 && tc.dim == 1 && tc.init == DT_TABLE_INIT_ZEROS);
    c = wide(DT_MODEL_SOFTMAX, 5, 100, 0, 0);
    ck_assert_int_eq(dt_sparse_model_specs(&c, specs, &n, &tc, NULL), 0);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(tc.dim, 5);
    c = embedding(DT_COMBINE_CONCAT, 26, 16, 13, 0);
    ck_assert_int_eq(dt_sparse_model_specs(&c, specs, &n, &tc, NULL), 0);
    ck_assert_int_eq(n, 6);
    ck_assert_str_eq(specs[0].name, "layer0/weight");
    ck_assert_int_eq(specs[0].shape[0], 13 + 26 * 16);
    ck_assert_str_eq(tc.name, "embedding/table");
    ck_assert(tc.dim == 16 && tc.init == DT_TABLE_INIT_NORMAL && tc.init_scale == 0.25);
    /* The table config is one dt_table_new takes (given a seed and slots). */
    dt_table *t = NULL;
    ck_assert_int_eq(dt_table_new(&tc, &t, NULL), 0);
    dt_table_free(t);

    static const struct {
        int what;
        const char *want;
    } bad[] = {
        {0, "wide: the head must be linear, logistic or softmax"},
        {1, "logistic: \"classes\" must be 2 (got 3)"},
        {2, "concat needs the fields' count"},
        {3, "\"dim\" must be 1 to 65536 (got 0)"},
        {4, "\"features\" must be 1 to 2^40 (got 0)"},
        {5, "\"l2\" must be a finite number >= 0"},
        {6, "\"hidden\" must list 1 to 8 layer sizes"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        c = bad[k].what < 2 ? wide(DT_MODEL_LOGISTIC, 2, 10, 0, 0)
                            : embedding(DT_COMBINE_SUM, 0, 4, 0, 0);
        switch (bad[k].what) {
        case 0: c.head = DT_MODEL_MLP; break;
        case 1: c.num_classes = 3; break;
        case 2: c.combiner = DT_COMBINE_CONCAT; break;
        case 3: c.dim = 0; break;
        case 4: c.num_ids = 0; break;
        case 5: c.l2 = -1; break;
        case 6: c.num_hidden = 0; break;
        }
        dt_err err;
        dt_err_clear(&err);
        ck_assert_int_eq(dt_sparse_model_specs(&c, specs, &n, &tc, &err), DT_EINVAL);
        ck_assert_msg(strstr(err.msg, bad[k].want) != NULL, "%zu: %s", k, err.msg);
        dt_sparse_model *m = (dt_sparse_model *)1;
        ck_assert_int_eq(dt_sparse_model_new(&c, &m, NULL), DT_EINVAL);
        ck_assert_ptr_null(m);
    }
}
END_TEST

START_TEST(test_wide_equals_dense) {
    /* The wide logistic model without dense features is lib/model's
     * logistic model on the dense rows the entries spell: same loss, and
     * the rows' gradients are the dense weight's at those ids. */
    enum { B = 12, F = 9 };
    toy t;
    toy_batch(&t, B, F, 0, 0, 1, 21);
    for (int i = 0; i < B; i++)
        t.y[i] = (float)(i % 3 == 0);
    float x[B * F] = {0};
    for (int i = 0; i < B; i++)
        for (int64_t e = t.offsets[i]; e < t.offsets[i + 1]; e++)
            x[i * F + t.ids[e]] += t.values[e];
    float w[F], bias = 0.3f;
    uint64_t st = 5;
    for (int j = 0; j < F; j++)
        w[j] = (float)uniform(&st);

    dt_model_config mc = {
        .kind = DT_MODEL_LOGISTIC, .num_features = F, .num_classes = 2, .l2 = 0.1};
    dt_tensor specs[DT_MODEL_MAX_VARS];
    int n;
    ck_assert_int_eq(dt_model_specs(&mc, specs, &n, NULL), 0);
    dt_tensors dv, dg;
    ck_assert_int_eq(dt_tensors_init(&dv, specs, n, NULL), 0);
    ck_assert_int_eq(dt_tensors_init(&dg, specs, n, NULL), 0);
    memcpy(dv.items[0].data, w, sizeof w);
    *(float *)dv.items[1].data = bias;
    dt_model *dm = NULL;
    ck_assert_int_eq(dt_model_new(&mc, &dm, NULL), 0);
    dt_batch db = {.rows = B, .cols = F, .x = x, .y = t.y};
    double dense_loss;
    ck_assert_int_eq(dt_model_loss_grad(dm, &dv, &db, &dg, &dense_loss, NULL), 0);

    dt_sparse_model_config sc = wide(DT_MODEL_LOGISTIC, 2, F, 0, 0.1);
    dt_tensor sspecs[DT_SPARSE_MODEL_MAX_VARS];
    dt_table_config tc;
    ck_assert_int_eq(dt_sparse_model_specs(&sc, sspecs, &n, &tc, NULL), 0);
    dt_tensors sv, sg;
    ck_assert_int_eq(dt_tensors_init(&sv, sspecs, n, NULL), 0);
    ck_assert_int_eq(dt_tensors_init(&sg, sspecs, n, NULL), 0);
    *(float *)sv.items[0].data = bias;
    dt_sparse_index ix = {0};
    ck_assert_int_eq(dt_sparse_index_build(&ix, &t.b, NULL), 0);
    float rows[F], row_grads[F];
    for (int64_t k = 0; k < ix.n; k++)
        rows[k] = w[ix.ids[k]];
    dt_sparse_model *sm = NULL;
    ck_assert_int_eq(dt_sparse_model_new(&sc, &sm, NULL), 0);
    double sparse_loss;
    ck_assert_int_eq(
        dt_sparse_model_loss_grad(sm, &sv, &t.b, &ix, rows, &sg, row_grads, &sparse_loss, NULL), 0);
    /* l2 differs by design: dense over all F weights, sparse over the rows
     * touched. Take the dense one's untouched part out. */
    double untouched = 0;
    for (int j = 0; j < F; j++) {
        int hit = 0;
        for (int64_t k = 0; k < ix.n; k++)
            hit |= ix.ids[k] == j;
        if (!hit) untouched += 0.5 * 0.1 * w[j] * w[j];
    }
    ck_assert_msg(fabs(sparse_loss - (dense_loss - untouched)) < 1e-6, "%.9g vs %.9g", sparse_loss,
                  dense_loss - untouched);
    for (int64_t k = 0; k < ix.n; k++)
        ck_assert_msg(fabs(row_grads[k] - ((float *)dg.items[0].data)[ix.ids[k]]) < 1e-6,
                      "row %lld", (long long)ix.ids[k]);
    ck_assert_float_eq_tol(*(float *)sg.items[0].data, *(float *)dg.items[1].data, 1e-6f);
    float p_dense[B], p_sparse[B];
    ck_assert_int_eq(dt_model_predict(dm, &dv, &db, p_dense, NULL, NULL), 0);
    ck_assert_int_eq(dt_sparse_model_predict(sm, &sv, &t.b, &ix, rows, p_sparse, NULL), 0);
    for (int i = 0; i < B; i++)
        ck_assert_float_eq_tol(p_dense[i], p_sparse[i], 1e-6f);
    dt_sparse_index_deinit(&ix);
    dt_sparse_model_free(sm);
    dt_model_free(dm);
    dt_tensors_deinit(&dv), dt_tensors_deinit(&dg), dt_tensors_deinit(&sv), dt_tensors_deinit(&sg);
}
END_TEST

START_TEST(test_bad_calls) {
    toy t;
    toy_batch(&t, 4, 30, 2, 3, 0, 31);
    dt_sparse_model_config c = embedding(DT_COMBINE_CONCAT, 3, 2, 2, 0);
    c.num_ids = 30;
    dt_tensor specs[DT_SPARSE_MODEL_MAX_VARS];
    dt_table_config tc;
    int n;
    ck_assert_int_eq(dt_sparse_model_specs(&c, specs, &n, &tc, NULL), 0);
    dt_tensors v, g;
    ck_assert_int_eq(dt_tensors_init(&v, specs, n, NULL), 0);
    ck_assert_int_eq(dt_tensors_init(&g, specs, n, NULL), 0);
    dt_sparse_model *m = NULL;
    ck_assert_int_eq(dt_sparse_model_new(&c, &m, NULL), 0);
    dt_sparse_index ix = {0};
    ck_assert_int_eq(dt_sparse_index_build(&ix, &t.b, NULL), 0);
    float rows[128] = {0}, rg[128];
    for (int i = 0; i < 4; i++)
        t.y[i] = (float)(i % 2);
    double loss;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_sparse_model_loss_grad(m, &v, &t.b, &ix, rows, &g, rg, &loss, &err) == 0, "%s",
                  err.msg);
    ck_assert(isfinite(loss));
    /* a label out of the classes, a field out of range, dense features
     * missing, the index of another batch, an id past F */
    t.y[2] = 2;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_sparse_model_loss_grad(m, &v, &t.b, &ix, rows, &g, rg, &loss, &err),
                     DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "batch row 2: label 2 is not a class"));
    ck_assert(isnan(loss));
    t.y[2] = 0;
    int32_t keep = t.fields[0];
    t.fields[0] = 3;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_sparse_model_loss_grad(m, &v, &t.b, &ix, rows, &g, rg, &loss, &err),
                     DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "field 3 is out of range [0, 3)"));
    t.fields[0] = keep;
    t.b.dense_cols = 1;
    ck_assert_int_eq(dt_sparse_model_loss_grad(m, &v, &t.b, &ix, rows, &g, rg, &loss, NULL),
                     DT_EINVAL);
    t.b.dense_cols = 2;
    t.b.rows = 3;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_sparse_model_loss_grad(m, &v, &t.b, &ix, rows, &g, rg, &loss, &err),
                     DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "the index is of another batch"));
    t.b.rows = 4;
    dt_sparse_model_config small = c;
    small.num_ids = 2;
    dt_sparse_model *m2 = NULL;
    ck_assert_int_eq(dt_sparse_model_new(&small, &m2, NULL), 0);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_sparse_model_loss_grad(m2, &v, &t.b, &ix, rows, &g, rg, &loss, &err),
                     DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "is not below \"features\" 2"));
    /* variables of another model */
    dt_sparse_model_config other = c;
    other.hidden[0] = 6;
    dt_sparse_model *m3 = NULL;
    ck_assert_int_eq(dt_sparse_model_new(&other, &m3, NULL), 0);
    ck_assert_int_eq(dt_sparse_model_loss_grad(m3, &v, &t.b, &ix, rows, &g, rg, &loss, NULL),
                     DT_EINVAL);
    dt_sparse_model_free(m), dt_sparse_model_free(m2), dt_sparse_model_free(m3);
    dt_sparse_index_deinit(&ix);
    dt_tensors_deinit(&v), dt_tensors_deinit(&g);
}
END_TEST

/* ---- training on generated data ---- */

typedef struct {
    dt_sparse_set train, test;
    double hidden_test_loss; /* the hidden model's log loss on the test rows */
} criteo_data;

static void make_data(criteo_data *d, int64_t rows, int64_t test_rows, int hash_bits) {
    char *dir = dt_test_tempdir();
    ck_assert_ptr_nonnull(dir);
    char path[512];
    snprintf(path, sizeof path, "%s/gen.txt", dir);
    dt_criteo_gen_params p;
    dt_criteo_gen_defaults(&p);
    p.rows = rows + test_rows;
    p.seed = 17;
    p.vocab_scale = 0.002;
    ck_assert_int_eq(dt_criteo_gen_write(&p, path, NULL, NULL), 0);
    dt_sparse_read_params rp;
    memset(&rp, 0, sizeof rp);
    rp.hash_bits = hash_bits;
    dt_sparse_set all;
    ck_assert_int_eq(dt_sparse_read_criteo(path, &rp, &all, NULL), 0);
    unlink(path);
    dt_test_tempdir_free(dir);
    /* the last test_rows rows are held out */
    dt_criteo_gen_model gm;
    ck_assert_int_eq(dt_criteo_gen_init(&p, &gm, NULL), 0);
    d->hidden_test_loss = dt_criteo_gen_log_loss(&gm, rows, test_rows);
    dt_sparse_buffer buf = {0};
    dt_sparse_batch b;
    int64_t *idx = malloc((size_t)(rows + test_rows) * sizeof *idx);
    for (int part = 0; part < 2; part++) {
        const int64_t first = part ? rows : 0, n = part ? test_rows : rows;
        for (int64_t i = 0; i < n; i++)
            idx[i] = first + i;
        ck_assert_int_eq(dt_sparse_gather(&all, idx, (int)n, &buf, &b, NULL), 0);
        dt_sparse_set *s = part ? &d->test : &d->train;
        memset(s, 0, sizeof *s);
        s->rows = n;
        s->dense_cols = b.dense_cols;
        s->num_ids = b.num_ids;
        s->num_fields = b.num_fields;
        const int64_t nnz = b.offsets[n];
        s->dense = malloc((size_t)n * 13 * sizeof(float));
        s->y = malloc((size_t)n * sizeof(float));
        s->offsets = malloc((size_t)(n + 1) * sizeof(int64_t));
        s->ids = malloc((size_t)nnz * sizeof(int64_t));
        s->fields = malloc((size_t)nnz * sizeof(int32_t));
        memcpy(s->dense, b.dense, (size_t)n * 13 * sizeof(float));
        memcpy(s->y, b.y, (size_t)n * sizeof(float));
        memcpy(s->offsets, b.offsets, (size_t)(n + 1) * sizeof(int64_t));
        memcpy(s->ids, b.ids, (size_t)nnz * sizeof(int64_t));
        memcpy(s->fields, b.fields, (size_t)nnz * sizeof(int32_t));
    }
    free(idx);
    dt_sparse_buffer_deinit(&buf);
    dt_sparse_set_deinit(&all);
}

/* Trains the wide logistic model through a table with optimizer o for
 * `epochs` passes in batches of 256, then returns the test log loss;
 * *nonzero gets the table's non-zero weights, *held its rows. */
static double train_wide(const criteo_data *d, const dt_optim_config *o, int epochs,
                         int64_t *nonzero, int64_t *held) {
    dt_sparse_model_config c = wide(DT_MODEL_LOGISTIC, 2, d->train.num_ids, 13, 0);
    dt_tensor specs[DT_SPARSE_MODEL_MAX_VARS];
    dt_table_config tc;
    int n;
    ck_assert_int_eq(dt_sparse_model_specs(&c, specs, &n, &tc, NULL), 0);
    dt_table_config_slots(&tc, o);
    dt_table *table = NULL;
    ck_assert_int_eq(dt_table_new(&tc, &table, NULL), 0);
    dt_tensors v, g, slots;
    ck_assert_int_eq(dt_tensors_init(&v, specs, n, NULL), 0);
    ck_assert_int_eq(dt_tensors_init(&g, specs, n, NULL), 0);
    dt_tensor slot_specs[2 * DT_SPARSE_MODEL_MAX_VARS];
    const int S = dt_optim_num_slots(o);
    for (int i = 0; i < n; i++)
        for (int s = 0; s < S; s++) {
            slot_specs[i * S + s] = specs[i];
            snprintf(slot_specs[i * S + s].name, DT_TENSOR_NAME_MAX, "%.100s/%d", specs[i].name, s);
        }
    ck_assert_int_eq(dt_tensors_init(&slots, slot_specs, n * S, NULL), 0);
    for (int i = 0; i < n * S; i++)
        for (int64_t j = 0; j < dt_tensor_numel(&slots.items[i]); j++)
            ((float *)slots.items[i].data)[j] = dt_optim_slot_init(o, i % S);
    dt_sparse_model *m = NULL;
    ck_assert_int_eq(dt_sparse_model_new(&c, &m, NULL), 0);
    dt_sparse_index ix = {0};
    dt_table_batch tb = {0};
    float *rows = malloc(8 * 256 * 40 * sizeof *rows), *rg = malloc(8 * 256 * 40 * sizeof *rg);
    int64_t step = 0;
    for (int epoch = 0; epoch < epochs; epoch++)
        for (int64_t first = 0; first + 256 <= d->train.rows; first += 256) {
            dt_sparse_batch b;
            dt_sparse_set_slice(&d->train, first, 256, &b);
            ck_assert_int_eq(dt_sparse_index_build(&ix, &b, NULL), 0);
            ck_assert_int_eq(dt_table_plan(table, ix.ids, ix.n, &tb, NULL), 0);
            dt_table_read(table, &tb, rows, NULL);
            double loss;
            ck_assert_int_eq(dt_sparse_model_loss_grad(m, &v, &b, &ix, rows, &g, rg, &loss, NULL),
                             0);
            step++;
            ck_assert_int_eq(dt_table_apply(table, &tb, o, o->learning_rate, rg, step, NULL), 0);
            for (int i = 0; i < n; i++) {
                float *sl[2] = {S > 0 ? slots.items[i * S].data : NULL,
                                S > 1 ? slots.items[i * S + 1].data : NULL};
                dt_optim_apply(o, o->learning_rate, step, v.items[i].data, sl, g.items[i].data,
                               dt_tensor_numel(&v.items[i]));
            }
        }
    /* the held-out log loss */
    dt_sparse_batch b;
    dt_sparse_set_slice(&d->test, 0, (int)d->test.rows, &b);
    ck_assert_int_eq(dt_sparse_index_build(&ix, &b, NULL), 0);
    float *test_rows = malloc((size_t)ix.n * sizeof *test_rows);
    ck_assert_int_eq(dt_table_plan(table, ix.ids, ix.n, &tb, NULL), 0);
    dt_table_read(table, &tb, test_rows, NULL);
    double loss, acc;
    ck_assert_int_eq(dt_sparse_model_evaluate(m, &v, &b, &ix, test_rows, &loss, &acc, NULL), 0);
    *nonzero = dt_table_count_nonzero(table);
    dt_table_stats st;
    dt_table_stats_of(table, &st);
    *held = st.rows_held;
    free(test_rows), free(rows), free(rg);
    dt_table_batch_deinit(&tb);
    dt_sparse_index_deinit(&ix);
    dt_sparse_model_free(m);
    dt_table_free(table);
    dt_tensors_deinit(&v), dt_tensors_deinit(&g), dt_tensors_deinit(&slots);
    return loss;
}

/* The quality goals at a unit test's scale (100k rows; bench/
 * measures them on more): within 8% of the hidden model's log loss
 * (measured: adagrad 3.4%, FTRL 4.9%), and FTRL with L1 keeping under 20% of the touched
 * weights non-zero at a log loss within 1% of FTRL without it. */
START_TEST(test_learns_generated_data) {
    criteo_data d;
    make_data(&d, 100000, 20000, 22);
    dt_optim_config o;
    dt_optim_defaults(&o);
    o.kind = DT_OPTIM_ADAGRAD;
    o.learning_rate = 1;
    int64_t nonzero, held;
    double adagrad = train_wide(&d, &o, 3, &nonzero, &held);
    o.kind = DT_OPTIM_FTRL;
    o.ftrl_beta = 1;
    int64_t nz0, held0;
    double ftrl = train_wide(&d, &o, 3, &nz0, &held0);
    o.ftrl_l1 = 0.02;
    int64_t nz1, held1;
    double ftrl_l1 = train_wide(&d, &o, 3, &nz1, &held1);
    fprintf(stderr,
            "sparse_model: 100k generated rows, test log loss: hidden model %.4f; adagrad %.4f; "
            "ftrl %.4f; ftrl l1=0.02 %.4f with %lld of %lld touched weights non-zero\n",
            d.hidden_test_loss, adagrad, ftrl, ftrl_l1, (long long)nz1, (long long)held1);
    ck_assert_msg(adagrad < d.hidden_test_loss * 1.08, "adagrad %g vs hidden %g", adagrad,
                  d.hidden_test_loss);
    ck_assert_msg(ftrl < d.hidden_test_loss * 1.08, "ftrl %g vs hidden %g", ftrl,
                  d.hidden_test_loss);
    ck_assert_msg(ftrl_l1 < ftrl * 1.01, "ftrl l1 %g vs %g", ftrl_l1, ftrl);
    ck_assert_msg(nz1 * 5 < held1, "%lld of %lld non-zero", (long long)nz1, (long long)held1);
    ck_assert_int_eq(nz0, held0); /* without l1 every touched weight moved */
    ck_assert_int_eq(held1, held0);
    dt_sparse_set_deinit(&d.train);
    dt_sparse_set_deinit(&d.test);
}
END_TEST

Suite *sparse_model_suite(void) {
    Suite *s = suite_create("sparse_model");
    TCase *tc = tcase_create("sparse_model");
    tcase_set_timeout(tc, 300);
    tcase_add_unchecked_fixture(tc, dt_test_tmp_fixture, dt_test_tmp_end);
    tcase_add_test(tc, test_specs);
    tcase_add_test(tc, test_grad_fd);
    tcase_add_test(tc, test_wide_equals_dense);
    tcase_add_test(tc, test_bad_calls);
    tcase_add_test(tc, test_learns_generated_data);
    suite_add_tcase(s, tc);
    return s;
}
