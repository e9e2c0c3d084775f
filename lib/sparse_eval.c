/*
 * sparse_eval: chunked scoring of a sparse model (sparse_eval.h). For each
 * chunk: the distinct ids (dt_sparse_index), their rows from the source,
 * then the model. Every chunk is scored with the same variables, so the
 * mean over chunks weighted by their rows is the mean over the set.
 *
 * A checkpoint's rows go into a dt_table of one shard with no slots: its
 * import checks the layout (ids increasing and in range, values finite and
 * (n, D)) before anything is written, and its read gives an id it does not
 * hold its initial value, as the ps would.
 */
#include "sparse_eval.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"

void dt_sparse_scorer_deinit(dt_sparse_scorer *s) {
    dt_sparse_index_deinit(&s->ix);
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}

/* The chunk's index and rows, into s->ix and s->buf. */
static int gather(dt_sparse_scorer *s, const dt_sparse_batch *b, dt_err *err) {
    int rc = dt_sparse_index_build(&s->ix, b, err);
    if (rc < 0) return rc;
    /* U <= entries < 2^24 and D <= 2^16: the product fits. */
    const int64_t want = s->ix.n * (int64_t)s->dim;
    if (want > s->cap) {
        float *buf = dt_realloc(s->buf, (size_t)want * sizeof *buf);
        if (!buf)
            return dt_err_set(err, DT_ENOMEM, "out of memory for %lld rows", (long long)s->ix.n);
        s->buf = buf;
        s->cap = want;
    }
    return s->ix.n > 0 ? s->rows(s->ctx, s->ix.ids, s->ix.n, s->buf, err) : 0;
}

int dt_sparse_scorer_evaluate(dt_sparse_scorer *s, const dt_sparse_set *set, double *loss,
                              double *accuracy, dt_err *err) {
    *loss = *accuracy = NAN;
    if (set->rows < 1) return dt_err_set(err, DT_EINVAL, "no examples to score");
    double sum_loss = 0, sum_acc = 0;
    for (int64_t first = 0; first < set->rows; first += DT_SPARSE_EVAL_CHUNK) {
        int64_t left = set->rows - first;
        int count = left < DT_SPARSE_EVAL_CHUNK ? (int)left : DT_SPARSE_EVAL_CHUNK;
        dt_sparse_batch b;
        dt_sparse_set_slice(set, first, count, &b);
        double l = NAN, a = NAN;
        int rc = gather(s, &b, err);
        if (rc == 0)
            rc = dt_sparse_model_evaluate(s->model, s->vars, &b, &s->ix, s->buf, &l, &a, err);
        if (rc < 0) return rc;
        sum_loss += l * count;
        sum_acc += a * count;
    }
    *loss = sum_loss / (double)set->rows;
    *accuracy = sum_acc / (double)set->rows;
    return 0;
}

int dt_sparse_scorer_predict(dt_sparse_scorer *s, const dt_sparse_set *set, int64_t first,
                             int count, float *out, dt_err *err) {
    DT_ASSERT(first >= 0 && count >= 1 && count <= DT_SPARSE_EVAL_CHUNK &&
              first + count <= set->rows);
    dt_sparse_batch b;
    dt_sparse_set_slice(set, first, count, &b);
    b.y = NULL;
    int rc = gather(s, &b, err);
    return rc < 0 ? rc : dt_sparse_model_predict(s->model, s->vars, &b, &s->ix, s->buf, out, err);
}

/* ---- a checkpoint's model ---------------------------------------------- */

struct dt_sparse_ckpt {
    dt_tensors vars; /* the dense variables */
    dt_table *table; /* the rows the file held */
    dt_table_batch tb;
    dt_sparse_model *model;
    dt_sparse_scorer scorer;
    int64_t rows_held;
};

static int rows_of_table(void *ctx, const int64_t *ids, int64_t n, float *rows, dt_err *err) {
    dt_sparse_ckpt *c = ctx;
    int rc = dt_table_plan(c->table, ids, n, &c->tb, err);
    if (rc == 0) dt_table_read(c->table, &c->tb, rows, NULL);
    return rc;
}

/* The dense variables of specs from loaded into c->vars, each present with
 * its dtype and shape. */
static int take_vars(const char *what, const char *path, const dt_tensor *specs, int count,
                     const dt_tensors *loaded, dt_sparse_ckpt *c, dt_err *err) {
    char have[64], want[64];
    for (int i = 0; i < count; i++) {
        const dt_tensor *t = dt_tensors_find(loaded, specs[i].name);
        if (!t)
            return dt_err_set(err, DT_EINVAL,
                              "%s: %s: no variable \"%s\" for the job's sparse model", what, path,
                              specs[i].name);
        if (!dt_tensor_same_layout(t, &specs[i])) {
            dt_tensor_layout_text(t, have, sizeof have);
            dt_tensor_layout_text(&specs[i], want, sizeof want);
            return dt_err_set(err, DT_EINVAL,
                              "%s: %s: variable \"%s\" is %s in the checkpoint but %s in the "
                              "job's sparse model",
                              what, path, specs[i].name, have, want);
        }
    }
    int rc = dt_tensors_init(&c->vars, specs, count, err);
    for (int i = 0; rc == 0 && i < count; i++)
        memcpy(c->vars.items[i].data, dt_tensors_find(loaded, specs[i].name)->data,
               c->vars.items[i].nbytes);
    return rc;
}

int dt_sparse_ckpt_open(const char *what, const dt_job *job, const dt_tensors *loaded,
                        const char *path, dt_sparse_ckpt **out, dt_err *err) {
    *out = NULL;
    dt_sparse_model_config mc;
    dt_table_config tc;
    dt_tensor specs[DT_SPARSE_MODEL_MAX_VARS];
    int count = 0;
    int rc = dt_job_sparse_vars(job, &mc, &tc, specs, &count, err);
    if (rc < 0) return dt_err_wrap(err, rc, "%s", what);
    tc.num_slots = 0; /* scoring reads the weights alone */
    /* A dense model's checkpoint holds the table's name as one variable. */
    const dt_tensor *dense = dt_tensors_find(loaded, tc.name);
    if (dense) {
        char have[64];
        dt_tensor_layout_text(dense, have, sizeof have);
        return dt_err_set(err, DT_EINVAL,
                          "%s: %s: \"%s\" is a dense variable %s, but the job's model is sparse: "
                          "its table's rows are \"%s/ids\" and \"%s/values\" (a checkpoint of a "
                          "\"sparse\": \"off\" job?)",
                          what, path, tc.name, have, tc.name, tc.name);
    }
    dt_sparse_ckpt *c = dt_calloc(1, sizeof *c);
    if (!c) return dt_err_set(err, DT_ENOMEM, "%s: out of memory", what);
    if ((rc = take_vars(what, path, specs, count, loaded, c, err)) < 0) goto fail;
    if ((rc = dt_table_new(&tc, &c->table, err)) < 0 ||
        (rc = dt_table_import(c->table, loaded, 0, 1, 0, &c->rows_held, err)) < 0 ||
        (rc = dt_sparse_model_new(&mc, &c->model, err)) < 0) {
        dt_err_wrap(err, rc, "%s: %s", what, path);
        goto fail;
    }
    c->scorer = (dt_sparse_scorer){
        .model = c->model, .vars = &c->vars, .dim = tc.dim, .rows = rows_of_table, .ctx = c};
    *out = c;
    return 0;
fail:
    dt_sparse_ckpt_free(c);
    return rc;
}

void dt_sparse_ckpt_free(dt_sparse_ckpt *c) {
    if (!c) return;
    dt_sparse_scorer_deinit(&c->scorer);
    dt_sparse_model_free(c->model);
    dt_table_batch_deinit(&c->tb);
    dt_table_free(c->table);
    dt_tensors_deinit(&c->vars);
    free(c);
}

dt_sparse_scorer *dt_sparse_ckpt_scorer(dt_sparse_ckpt *c) {
    return &c->scorer;
}
int64_t dt_sparse_ckpt_rows(const dt_sparse_ckpt *c) {
    return c->rows_held;
}
int dt_sparse_ckpt_out_cols(const dt_sparse_ckpt *c) {
    return dt_sparse_model_out_cols(c->model);
}

int64_t dt_sparse_ckpt_nonzero(const dt_sparse_ckpt *c) {
    return dt_table_count_nonzero(c->table);
}
