/*
 * bench_async_sim: a sparse job's training played in one thread as W async
 * workers would make it, with the staleness set rather than left to
 * timing, then scored on a held-out file: what staleness alone costs the
 * model (bench/notes/2026-12-05-sparse-table-vs-dense.md, "Two async
 * workers").
 *
 * The job is loaded as dtrain loads it (defaults, --config, each --set);
 * its wide model, table and optimizer are lib/sparse_model, lib/table and
 * lib/optim, as on a ps. The training file is read once; worker w's shard
 * is rows i % W == w, as dtrain's readers shard. Workers push round robin:
 * each gradient is computed on the values pulled right after the same
 * worker's previous push, so it is applied W - 1 pushes later (staleness
 * W - 1 on every push, where dtrain's timing gives a mix). --stale picks
 * what is stale: "both" (as a worker), "dense" or "rows" (the other part
 * read when the push is applied), or "none". Each worker makes its own
 * epochs * ceil(shard / batch_size) steps, as dtrain's async workers do.
 *
 * Output (stdout), one line:
 *   async_sim workers=W stale=S steps=N log_loss=L accuracy=A bias_n=B
 *     [hidden_log_loss=H]
 * bias_n is the bias's FTRL accumulator (its first slot) at the end.
 * Exit status: 0, 1 on a failure (message on stderr), 2 on usage errors.
 *
 * Single-threaded.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "common.h"
#include "criteo_gen.h"
#include "err.h"
#include "job.h"
#include "optim.h"
#include "sparse.h"
#include "sparse_model.h"
#include "table.h"
#include "tensor.h"

#define MAX_SETS 64
#define MAX_WORKERS 64
#define MAX_DENSE 4096 /* floats of dense variables a snapshot holds */

static const char usage[] =
    "usage: bench_async_sim --config FILE [--set FIELD=VALUE]... --data FILE\n"
    "       [--workers W] [--stale both|dense|rows|none] [--hidden SEED,FIRST,VOCAB_SCALE]\n"
    "  Trains the job's train_data as W round-robin async workers in one thread\n"
    "  and scores the model on --data (--hidden: as bench_sparse_eval).\n";

enum { STALE_NONE = 0, STALE_DENSE = 1, STALE_ROWS = 2, STALE_BOTH = 3 };

typedef struct {
    const char *config_path, *data, *hidden;
    const char *sets[MAX_SETS];
    int num_sets, workers, stale;
} options;

/* One worker: its shard's rows, the batch it computed on, what it pulled. */
typedef struct {
    int64_t *rows; /* (n) its shard's row numbers in the file */
    int64_t n, cursor, steps;
    dt_sparse_buffer buf;
    dt_sparse_batch batch;
    dt_sparse_index ix;
    float *pulled;          /* (U) the batch's rows as pulled */
    float *row_grads;       /* (U) */
    float dense[MAX_DENSE]; /* the dense variables as pulled */
    int64_t cap;            /* floats pulled and row_grads hold */
} worker;

typedef struct {
    dt_job job;
    dt_sparse_set train;
    dt_sparse_model *model;
    dt_table *table;
    dt_table_batch tb;
    dt_tensors vars, grads, slots; /* slots: (vars * S), slot s of var i at i * S + s */
    int num_slots;
    int64_t step;
    int64_t *idx; /* (batch_size) a batch's row numbers */
    float *fresh; /* rows read when a push is applied */
    int64_t fresh_cap;
} sim;

static int parse_args(int argc, char **argv, options *o) {
    o->workers = 2;
    o->stale = STALE_BOTH;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *v = argv[i + 1];
        if (strcmp(argv[i], "--config") == 0)
            o->config_path = v;
        else if (strcmp(argv[i], "--data") == 0)
            o->data = v;
        else if (strcmp(argv[i], "--hidden") == 0)
            o->hidden = v;
        else if (strcmp(argv[i], "--workers") == 0)
            o->workers = atoi(v);
        else if (strcmp(argv[i], "--stale") == 0)
            o->stale = strcmp(v, "both") == 0    ? STALE_BOTH
                       : strcmp(v, "dense") == 0 ? STALE_DENSE
                       : strcmp(v, "rows") == 0  ? STALE_ROWS
                       : strcmp(v, "none") == 0  ? STALE_NONE
                                                 : -1;
        else if (strcmp(argv[i], "--set") == 0 && o->num_sets < MAX_SETS)
            o->sets[o->num_sets++] = v;
        else
            return -1;
    }
    return o->config_path && o->data && argc % 2 == 1 && o->stale >= 0 && o->workers >= 1 &&
                   o->workers <= MAX_WORKERS
               ? 0
               : -1;
}

static int64_t dense_count(const dt_tensors *t) {
    int64_t n = 0;
    for (int i = 0; i < t->count; i++)
        n += dt_tensor_numel(&t->items[i]);
    return n;
}

/* Copies the dense variables out of (to 0) or into (to 1) flat. */
static void dense_copy(dt_tensors *t, float *flat, int to) {
    int64_t at = 0;
    for (int i = 0; i < t->count; i++) {
        const int64_t n = dt_tensor_numel(&t->items[i]);
        float *data = t->items[i].data;
        memcpy(to ? data : flat + at, to ? flat + at : data, (size_t)n * sizeof *flat);
        at += n;
    }
}

/* Grows a float buffer to n floats. */
static int grow(float **p, int64_t *cap, int64_t n, dt_err *err) {
    if (n <= *cap) return 0;
    float *q = dt_realloc(*p, (size_t)n * sizeof *q);
    if (!q) return dt_err_set(err, DT_ENOMEM, "async_sim: out of memory");
    *p = q;
    *cap = n;
    return 0;
}

/* Worker w's next batch and its pull: the rows and the dense values now. */
static int pull(sim *s, worker *w, dt_err *err) {
    int64_t *idx = s->idx;
    int count = 0;
    while (count < s->job.batch_size) {
        idx[count++] = w->rows[w->cursor];
        w->cursor = (w->cursor + 1) % w->n;
        if (w->cursor == 0) break; /* a pass's last batch may be short */
    }
    int rc = dt_sparse_gather(&s->train, idx, count, &w->buf, &w->batch, err);
    if (rc == 0) rc = dt_sparse_index_build(&w->ix, &w->batch, err);
    int64_t cap = w->cap;
    if (rc == 0) rc = grow(&w->pulled, &cap, w->ix.n, err);
    if (rc == 0) rc = grow(&w->row_grads, &w->cap, w->ix.n, err);
    if (rc == 0) rc = dt_table_plan(s->table, w->ix.ids, w->ix.n, &s->tb, err);
    if (rc < 0) return rc;
    dt_table_read(s->table, &s->tb, w->pulled, NULL);
    dense_copy(&s->vars, w->dense, 0);
    return 0;
}

/* Worker w's push: its gradient from what it pulled (the stale parts) and
 * what the model holds now (the rest), applied as a ps applies it. */
static int push(sim *s, worker *w, int stale, dt_err *err) {
    int rc = grow(&s->fresh, &s->fresh_cap, w->ix.n, err);
    if (rc == 0) rc = dt_table_plan(s->table, w->ix.ids, w->ix.n, &s->tb, err);
    if (rc < 0) return rc;
    dt_table_read(s->table, &s->tb, s->fresh, NULL);
    float now[MAX_DENSE];
    dense_copy(&s->vars, now, 0);
    if (stale & STALE_DENSE) dense_copy(&s->vars, w->dense, 1);
    double loss;
    rc = dt_sparse_model_loss_grad(s->model, &s->vars, &w->batch, &w->ix,
                                   stale & STALE_ROWS ? w->pulled : s->fresh, &s->grads,
                                   w->row_grads, &loss, err);
    dense_copy(&s->vars, now, 1);
    if (rc < 0) return rc;
    s->step++;
    const dt_optim_config *o = &s->job.optim;
    rc = dt_table_apply(s->table, &s->tb, o, o->learning_rate, w->row_grads, s->step, err);
    if (rc < 0) return rc;
    for (int i = 0; i < s->vars.count; i++) {
        float *slots[DT_OPTIM_MAX_SLOTS] = {NULL};
        for (int k = 0; k < s->num_slots; k++)
            slots[k] = s->slots.items[i * s->num_slots + k].data;
        dt_optim_apply(o, o->learning_rate, s->step, s->vars.items[i].data, slots,
                       s->grads.items[i].data, dt_tensor_numel(&s->vars.items[i]));
    }
    w->steps++;
    return 0;
}

/* The model, its table and the optimizer's slots, as the chief and a ps
 * make them. */
static int build(sim *s, dt_err *err) {
    dt_sparse_model_config mc;
    dt_table_config tc;
    dt_tensor specs[DT_SPARSE_MODEL_MAX_VARS], slot_specs[DT_SPARSE_MODEL_MAX_VARS * 2];
    int count = 0;
    int rc = dt_job_sparse_model(&s->job, &mc, &tc, err);
    if (rc == 0) rc = dt_sparse_model_specs(&mc, specs, &count, &tc, err);
    if (rc < 0) return rc;
    if (mc.kind != DT_SPARSE_WIDE || count > DT_SPARSE_MODEL_MAX_VARS)
        return dt_err_set(err, DT_EINVAL, "async_sim: a wide model only");
    s->num_slots = dt_optim_num_slots(&s->job.optim);
    for (int i = 0; i < count; i++)
        for (int k = 0; k < s->num_slots; k++) {
            slot_specs[i * s->num_slots + k] = specs[i];
            snprintf(slot_specs[i * s->num_slots + k].name, DT_TENSOR_NAME_MAX, "%.100s/%d",
                     specs[i].name, k);
        }
    dt_table_config_slots(&tc, &s->job.optim);
    if ((rc = dt_table_new(&tc, &s->table, err)) < 0 ||
        (rc = dt_sparse_model_new(&mc, &s->model, err)) < 0 ||
        (rc = dt_tensors_init(&s->vars, specs, count, err)) < 0 ||
        (rc = dt_tensors_init(&s->grads, specs, count, err)) < 0 ||
        (rc = dt_tensors_init(&s->slots, slot_specs, count * s->num_slots, err)) < 0)
        return rc;
    if (dense_count(&s->vars) > MAX_DENSE)
        return dt_err_set(err, DT_EINVAL, "async_sim: more than %d dense floats", MAX_DENSE);
    for (int i = 0; i < s->slots.count; i++)
        for (int64_t j = 0; j < dt_tensor_numel(&s->slots.items[i]); j++)
            ((float *)s->slots.items[i].data)[j] =
                dt_optim_slot_init(&s->job.optim, i % s->num_slots);
    return 0;
}

/* The held-out log loss and accuracy of the model on path. */
static int score(sim *s, const char *path, int64_t *rows, double *loss, double *acc, dt_err *err) {
    dt_sparse_set held;
    memset(&held, 0, sizeof held);
    dt_sparse_index ix;
    memset(&ix, 0, sizeof ix);
    float *values = NULL;
    int rc = dt_job_read_sparse(&s->job, path, 1, 0, 1, &held, err);
    dt_sparse_batch b;
    if (rc == 0 && held.rows > INT32_MAX)
        rc = dt_err_set(err, DT_EINVAL, "async_sim: %s: too many rows", path);
    if (rc == 0) {
        dt_sparse_set_slice(&held, 0, (int)held.rows, &b);
        rc = dt_sparse_index_build(&ix, &b, err);
    }
    if (rc == 0 && !(values = dt_malloc((size_t)ix.n * sizeof *values + 1)))
        rc = dt_err_set(err, DT_ENOMEM, "async_sim: out of memory");
    if (rc == 0) rc = dt_table_plan(s->table, ix.ids, ix.n, &s->tb, err);
    if (rc == 0) {
        dt_table_read(s->table, &s->tb, values, NULL);
        rc = dt_sparse_model_evaluate(s->model, &s->vars, &b, &ix, values, loss, acc, err);
        *rows = held.rows;
    }
    free(values);
    dt_sparse_index_deinit(&ix);
    dt_sparse_set_deinit(&held);
    return rc;
}

static int train(sim *s, worker *ws, const options *o, dt_err *err) {
    const int W = o->workers;
    int64_t shard_steps[MAX_WORKERS];
    for (int k = 0; k < W; k++) {
        ws[k].rows = dt_malloc((size_t)(s->train.rows / W + 1) * sizeof(int64_t));
        if (!ws[k].rows) return dt_err_set(err, DT_ENOMEM, "async_sim: out of memory");
        for (int64_t i = k; i < s->train.rows; i += W)
            ws[k].rows[ws[k].n++] = i;
        if (ws[k].n == 0) return dt_err_set(err, DT_EINVAL, "async_sim: worker %d has no rows", k);
        int rc = dt_job_steps_for(&s->job, ws[k].n, &shard_steps[k], err);
        if (rc == 0) rc = pull(s, &ws[k], err);
        if (rc < 0) return rc;
    }
    /* Round robin over the workers that have passes left. */
    for (int left = W; left > 0;) {
        left = 0;
        for (int k = 0; k < W; k++) {
            if (ws[k].steps >= shard_steps[k]) continue;
            int rc = push(s, &ws[k], o->stale, err);
            if (rc == 0 && ws[k].steps < shard_steps[k]) rc = pull(s, &ws[k], err);
            if (rc < 0) return rc;
            left++;
        }
    }
    return 0;
}

static int run(const options *o, dt_err *err) {
    sim s;
    memset(&s, 0, sizeof s);
    worker *ws = dt_calloc((size_t)o->workers, sizeof *ws);
    if (!ws) return dt_err_set(err, DT_ENOMEM, "async_sim: out of memory");
    int rc = dt_bench_load_job(o->config_path, o->sets, o->num_sets, &s.job, err);
    if (rc == 0 && !(s.idx = dt_malloc((size_t)s.job.batch_size * sizeof *s.idx)))
        rc = dt_err_set(err, DT_ENOMEM, "async_sim: out of memory");
    if (rc == 0) rc = dt_job_read_sparse(&s.job, s.job.data.train_data, 1, 0, 1, &s.train, err);
    if (rc == 0) rc = build(&s, err);
    if (rc == 0) rc = train(&s, ws, o, err);
    int64_t rows = 0;
    double loss = NAN, acc = NAN, hidden = NAN;
    if (rc == 0) rc = score(&s, o->data, &rows, &loss, &acc, err);
    if (rc == 0 && o->hidden) rc = dt_bench_hidden_log_loss(o->hidden, rows, &hidden, err);
    if (rc == 0) {
        /* The bias is the wide model's last dense variable. */
        const float bias_n = *(const float *)s.slots.items[(s.vars.count - 1) * s.num_slots].data;
        static const char *const stale_names[] = {"none", "dense", "rows", "both"};
        printf("async_sim workers=%d stale=%s steps=%" PRId64
               " log_loss=%.6f accuracy=%.4f bias_n=%.3f",
               o->workers, stale_names[o->stale], s.step, loss, acc, (double)bias_n);
        if (o->hidden) printf(" hidden_log_loss=%.6f", hidden);
        printf("\n");
    }
    for (int k = 0; k < o->workers; k++) {
        free(ws[k].rows);
        free(ws[k].pulled);
        free(ws[k].row_grads);
        dt_sparse_buffer_deinit(&ws[k].buf);
        dt_sparse_index_deinit(&ws[k].ix);
    }
    free(ws);
    free(s.fresh);
    free(s.idx);
    dt_table_batch_deinit(&s.tb);
    dt_table_free(s.table);
    dt_sparse_model_free(s.model);
    dt_tensors_deinit(&s.vars);
    dt_tensors_deinit(&s.grads);
    dt_tensors_deinit(&s.slots);
    dt_sparse_set_deinit(&s.train);
    return rc;
}

int main(int argc, char **argv) {
    options o;
    memset(&o, 0, sizeof o);
    if (parse_args(argc, argv, &o) < 0) return fputs(usage, stderr), 2;
    dt_err err;
    dt_err_clear(&err);
    const int rc = run(&o, &err);
    if (rc < 0) fprintf(stderr, "bench_async_sim: %s\n", err.msg);
    return rc < 0 ? 1 : 0;
}
