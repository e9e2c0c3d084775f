/*
 * sparse_acc: a sync step's sparse gradients for one table, kept as the
 * pushes bring them and summed by id when the step is applied: the sparse
 * half of the ps's sync aggregation (lib/ps.c sums the dense half into a
 * tensor shaped like each variable; a table has no such shape to sum
 * into, only the rows the step's pushes name).
 *
 * Letters: D floats a row, n rows of one push, U distinct ids of the step.
 *
 * Sum order: a row's sum starts at 0 and adds each push's row in the order
 * the pushes were added, as the dense sum adds each push's tensor in turn.
 * A push that does not name an id adds nothing to it, where the dense sum
 * adds an exact 0; x + 0 is x, so for the same pushes in the same order
 * each row sums to the dense sum's bits, and scaled by the same float the
 * mean is the same too.
 *
 * An accumulator owns the pushes' arrays handed to it and scratch that
 * grows to the largest step and is reused. One thread at a time (the ps
 * holds its sync lock).
 */
#ifndef DT_SPARSE_ACC_H
#define DT_SPARSE_ACC_H

#include <stdint.h>

#include "err.h"

/* One push's rows of a table: ids (n) sorted and unique, rows (n, D). */
typedef struct {
    int64_t n;
    int64_t *ids;
    float *rows;
} dt_sparse_grad;

/* Frees g's arrays and zeroes it. */
void dt_sparse_grad_deinit(dt_sparse_grad *g);

typedef struct {
    int dim;              /* D >= 1 */
    dt_sparse_grad *adds; /* (count) in the order added, owned */
    int count, cap;
    /* scratch of dt_sparse_acc_sum */
    uint64_t *keys; /* (entries) (id, add) packed, sorted */
    int64_t keys_cap;
    int64_t *where; /* (cap) each add's next row while summing */
    int where_cap;
    int64_t *ids;    /* (U) the sum's ids */
    float *rows;     /* (U, D) the sum's rows */
    int64_t out_cap; /* rows of room in ids and rows */
} dt_sparse_acc;

/* An empty accumulator for rows of dim floats (caller storage). */
void dt_sparse_acc_init(dt_sparse_acc *a, int dim);
/* Frees everything; the accumulator is then empty and may be reused. */
void dt_sparse_acc_deinit(dt_sparse_acc *a);

/* Takes g (its arrays now the accumulator's; *g is zeroed) as the next
 * push of the step. g->ids must be sorted and unique, its rows (n, D) (the
 * ps checked them on arrival); n 0 adds nothing. Errors: DT_ENOMEM (g is
 * freed then). */
int dt_sparse_acc_add(dt_sparse_acc *a, dt_sparse_grad *g, dt_err *err) DT_WARN_UNUSED;

/* Pushes added since the last clear. */
int dt_sparse_acc_count(const dt_sparse_acc *a);

/* The step's sum: *n distinct ids of every push, increasing, into *ids,
 * and each one's row, the pushes' rows summed in the order added then
 * multiplied by scale, into *rows (both borrowed from a until the next
 * call). *n is 0 when no push named a row. Errors: more than 2^24 pushes
 * or an id past 2^40 (DT_EINVAL), DT_ENOMEM. */
int dt_sparse_acc_sum(dt_sparse_acc *a, float scale, int64_t *n, const int64_t **ids,
                      const float **rows, dt_err *err) DT_WARN_UNUSED;

/* Drops the pushes added (the step is applied or abandoned); keeps the
 * scratch. */
void dt_sparse_acc_clear(dt_sparse_acc *a);

#endif
