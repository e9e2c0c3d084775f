/*
 * sparse_acc: the sum of a sync step's sparse pushes by id (sparse_acc.h).
 *
 * The sum sorts one key per pushed row, (id << 24) | add, so equal ids come
 * together in the order their pushes were added; since every push's ids
 * increase, the k-th key of push c in sorted order is push c's row k, and
 * a cursor per push finds each row without storing where it was.
 */
#include "sparse_acc.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "table.h"

#define ADD_BITS 24

void dt_sparse_grad_deinit(dt_sparse_grad *g) {
    free(g->ids);
    free(g->rows);
    memset(g, 0, sizeof *g);
}

void dt_sparse_acc_init(dt_sparse_acc *a, int dim) {
    memset(a, 0, sizeof *a);
    a->dim = dim;
}

void dt_sparse_acc_clear(dt_sparse_acc *a) {
    for (int i = 0; i < a->count; i++)
        dt_sparse_grad_deinit(&a->adds[i]);
    a->count = 0;
}

void dt_sparse_acc_deinit(dt_sparse_acc *a) {
    dt_sparse_acc_clear(a);
    free(a->adds);
    free(a->keys);
    free(a->where);
    free(a->ids);
    free(a->rows);
    int dim = a->dim;
    dt_sparse_acc_init(a, dim);
}

int dt_sparse_acc_count(const dt_sparse_acc *a) {
    return a->count;
}

int dt_sparse_acc_add(dt_sparse_acc *a, dt_sparse_grad *g, dt_err *err) {
    if (a->count == a->cap) {
        int cap = a->cap ? 2 * a->cap : 8;
        dt_sparse_grad *adds = dt_realloc(a->adds, (size_t)cap * sizeof *adds);
        if (!adds) {
            dt_sparse_grad_deinit(g);
            return dt_err_set(err, DT_ENOMEM, "sparse gradients: out of memory");
        }
        a->adds = adds;
        a->cap = cap;
    }
    a->adds[a->count++] = *g;
    memset(g, 0, sizeof *g);
    return 0;
}

static int compare_keys(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a > b) - (a < b);
}

/* Room for `entries` keys and as many rows of the sum, and a cursor per
 * push. */
static int grow(dt_sparse_acc *a, int64_t entries, dt_err *err) {
    if (entries > a->keys_cap) {
        uint64_t *keys = dt_realloc(a->keys, (size_t)entries * sizeof *keys);
        if (!keys) return dt_err_set(err, DT_ENOMEM, "sparse gradients: out of memory");
        a->keys = keys;
        a->keys_cap = entries;
    }
    if (a->count > a->where_cap) {
        int64_t *where = dt_realloc(a->where, (size_t)a->count * sizeof *where);
        if (!where) return dt_err_set(err, DT_ENOMEM, "sparse gradients: out of memory");
        a->where = where;
        a->where_cap = a->count;
    }
    if (entries > a->out_cap) {
        /* entries * D floats: each push's (n, D) fit a message, so the
         * step's total fits size_t. */
        int64_t *ids = dt_realloc(a->ids, (size_t)entries * sizeof *ids);
        if (ids) a->ids = ids;
        float *rows = dt_realloc(a->rows, (size_t)entries * (size_t)a->dim * sizeof *rows);
        if (rows) a->rows = rows;
        if (!ids || !rows) return dt_err_set(err, DT_ENOMEM, "sparse gradients: out of memory");
        a->out_cap = entries;
    }
    return 0;
}

int dt_sparse_acc_sum(dt_sparse_acc *a, float scale, int64_t *n, const int64_t **ids,
                      const float **rows, dt_err *err) {
    *n = 0;
    *ids = NULL;
    *rows = NULL;
    if (a->count >= (1 << ADD_BITS))
        return dt_err_set(err, DT_EINVAL, "sparse gradients: %d pushes in a step (at most %d)",
                          a->count, (1 << ADD_BITS) - 1);
    int64_t entries = 0;
    for (int c = 0; c < a->count; c++)
        entries += a->adds[c].n; /* each n fits a message: the total fits int64 */
    if (entries == 0) return 0;
    int rc = grow(a, entries, err);
    if (rc < 0) return rc;
    int64_t e = 0;
    for (int c = 0; c < a->count; c++) {
        const dt_sparse_grad *g = &a->adds[c];
        for (int64_t k = 0; k < g->n; k++) {
            if (g->ids[k] < 0 || g->ids[k] >= DT_TABLE_MAX_ROWS)
                return dt_err_set(err, DT_EINVAL, "sparse gradients: id %lld out of range",
                                  (long long)g->ids[k]);
            a->keys[e++] = (uint64_t)g->ids[k] << ADD_BITS | (uint64_t)c;
        }
        a->where[c] = 0;
    }
    qsort(a->keys, (size_t)entries, sizeof *a->keys, compare_keys);
    const size_t D = (size_t)a->dim;
    int64_t u = -1;
    for (e = 0; e < entries; e++) {
        int64_t id = (int64_t)(a->keys[e] >> ADD_BITS);
        int c = (int)(a->keys[e] & ((1u << ADD_BITS) - 1));
        if (u < 0 || a->ids[u] != id) {
            u++;
            a->ids[u] = id;
            memset(a->rows + (size_t)u * D, 0, D * sizeof *a->rows);
        }
        const float *src = a->adds[c].rows + (size_t)a->where[c]++ * D;
        float *sum = a->rows + (size_t)u * D;
        for (size_t d = 0; d < D; d++)
            sum[d] += src[d];
    }
    *n = u + 1;
    for (size_t i = 0; i < (size_t)*n * D; i++)
        a->rows[i] *= scale; /* mean = sum * (1 / pushes), as the dense mean */
    *ids = a->ids;
    *rows = a->rows;
    return 0;
}
