/*
 * sparse_eval: a sparse model (lib/sparse_model) scored or applied on a
 * whole held-out set, a chunk of rows at a time, wherever its table's rows
 * come from: the ps tasks (the chief's evaluation during training: a
 * SparsePull of the chunk's ids) or a checkpoint (dtrain eval, predict and
 * the evaluator: the rows the file holds, looked up by id).
 *
 * Letters as lib/sparse.h's: N rows of the set, U distinct ids of a chunk,
 * D floats a row, O outputs a row.
 *
 * Memory follows the rows used, never the table's 2^hash_bits: a chunk
 * needs its U rows (DT_SPARSE_EVAL_CHUNK examples at most), and a
 * checkpoint's rows go into a one-shard dt_table (a hash of the ids it
 * holds; an id it does not hold reads as its initial value, as on the ps).
 *
 * A scorer borrows its model, variables and row source, and owns scratch
 * that grows to the largest chunk; one thread uses it at a time.
 */
#ifndef DT_SPARSE_EVAL_H
#define DT_SPARSE_EVAL_H

#include <stdint.h>

#include "err.h"
#include "job.h"
#include "sparse.h"
#include "sparse_model.h"
#include "table.h"
#include "tensor.h"

/* Examples scored at once: the U rows of a chunk are fetched together. */
#define DT_SPARSE_EVAL_CHUNK 4096

/* Fills rows (n, D), row k for ids[k] (n >= 1 sorted distinct ids), from
 * wherever the table lives. Errors are the source's. */
typedef int (*dt_sparse_rows_fn)(void *ctx, const int64_t *ids, int64_t n, float *rows,
                                 dt_err *err);

typedef struct {
    dt_sparse_model *model; /* borrowed */
    const dt_tensors *vars; /* borrowed: the dense variables (dt_sparse_model_specs) */
    int dim;                /* D of the table */
    dt_sparse_rows_fn rows; /* the row source */
    void *ctx;              /* its argument */
    /* scratch */
    dt_sparse_index ix;
    float *buf;  /* (cap) the chunk's rows */
    int64_t cap; /* floats */
} dt_sparse_scorer;

/* Releases the scratch; the borrowed fields are left alone. */
void dt_sparse_scorer_deinit(dt_sparse_scorer *s);

/* Mean data loss (no l2 term) and accuracy (NaN for linear) over every
 * row of set (N >= 1, labeled), each chunk weighted by its rows. Errors
 * (*loss, *accuracy NaN): the row source's, the model's (DT_EINVAL for a
 * set of another shape), DT_ENOMEM. */
int dt_sparse_scorer_evaluate(dt_sparse_scorer *s, const dt_sparse_set *set, double *loss,
                              double *accuracy, dt_err *err) DT_WARN_UNUSED;

/* Predictions of rows [first, first + count) of set (1 <= count <=
 * DT_SPARSE_EVAL_CHUNK, within N) into out (count, O), as
 * dt_sparse_model_predict writes them. Errors as _evaluate's. */
int dt_sparse_scorer_predict(dt_sparse_scorer *s, const dt_sparse_set *set, int64_t first,
                             int count, float *out, dt_err *err) DT_WARN_UNUSED;

/* A sparse job's model restored from a checkpoint for scoring: its dense
 * variables, its table's rows (values only: optimizer slots are not
 * needed) and the model, with a scorer reading rows from them. */
typedef struct dt_sparse_ckpt dt_sparse_ckpt; /* opaque; owns all of it */

/*
 * Takes the model of job (which must be sparse) from loaded, the tensors of
 * the checkpoint file `path` (named in errors): every dense variable with
 * its dtype and shape, and the table's "<table>/ids" and "<table>/values"
 * (lib/table.h's layout: ids I64 (n) increasing and in [0, R), values F32
 * (n, D), finite; both absent: an empty table). Other tensors (optimizer
 * slots) are not read here. loaded may be released once this returns.
 * Errors, prefixed "<what>: <path>: " and naming the tensor: a dense
 * variable missing or of another shape, or the table's weight saved as a
 * dense variable (a "sparse": "off" job's checkpoint) (DT_EINVAL); ids or
 * values that break the layout (DT_ECORRUPT); DT_ENOMEM.
 */
int dt_sparse_ckpt_open(const char *what, const dt_job *job, const dt_tensors *loaded,
                        const char *path, dt_sparse_ckpt **out, dt_err *err) DT_WARN_UNUSED;
void dt_sparse_ckpt_free(dt_sparse_ckpt *c); /* NULL is a no-op */

/* Its scorer (borrowed from c; valid while c is). */
dt_sparse_scorer *dt_sparse_ckpt_scorer(dt_sparse_ckpt *c);
/* Rows the checkpoint held, O a row (for predict's columns). */
int64_t dt_sparse_ckpt_rows(const dt_sparse_ckpt *c);
/* Weights among those rows that are not 0 (FTRL's L1 keeps most at 0). */
int64_t dt_sparse_ckpt_nonzero(const dt_sparse_ckpt *c);
int dt_sparse_ckpt_out_cols(const dt_sparse_ckpt *c);

#endif
