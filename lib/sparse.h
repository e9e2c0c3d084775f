/*
 * sparse: how sparse examples and sparse gradients are held, between the
 * readers (lib/sparse_reader), the models (lib/sparse_model) and the
 * tables (lib/table).
 *
 * Letters: B examples in a batch, Dd dense features per example, nnz
 * sparse entries in a batch, F feature ids (the table's rows: 2^hash_bits,
 * or the libsvm file's feature count), C fields (categorical columns), U
 * distinct ids in a batch.
 *
 * A batch is CSR (compressed sparse rows), the layout of scipy's
 * csr_matrix and of TF's SparseTensor once sorted by row:
 *   offsets (B + 1)  row i's entries are [offsets[i], offsets[i + 1]),
 *                    counted from offsets[0] (so a batch can be a view of
 *                    rows first..first+B-1 of a larger set without a copy)
 *   ids     (nnz)    each entry's feature id, in [0, F)
 *   values  (nnz)    each entry's value; NULL when every value is 1 (one-hot
 *                    categoricals, the Criteo layout)
 *   fields  (nnz)    each entry's field, in [0, C); NULL when the data has
 *                    no fields (libsvm)
 * beside the dense part, dense (B, Dd) row-major, and the labels y (B).
 * Within a row, entries keep file order; an id may appear more than once
 * in a row (two values hashed to one bucket) and its values then add up.
 *
 * A gradient for a table is IndexedSlices-style (TF's tf.IndexedSlices):
 * U sorted distinct ids and a (U, D) block of rows, row k for ids[k], with
 * every occurrence of an id in the batch already summed into its row. That
 * is what dt_sparse_index gives the models (each entry's place among the
 * batch's distinct ids), and what a worker pushes.
 *
 * Batches borrow their arrays; sets and indexes own theirs. A set or an
 * index is used by one thread at a time.
 */
#ifndef DT_SPARSE_H
#define DT_SPARSE_H

#include <stdint.h>

#include "err.h"

typedef struct {
    int rows;               /* B */
    int dense_cols;         /* Dd >= 0 */
    const float *dense;     /* (B, Dd); NULL when Dd is 0 */
    const float *y;         /* (B); NULL without labels */
    const int64_t *offsets; /* (B + 1), non-decreasing */
    const int64_t *ids;     /* (nnz) */
    const float *values;    /* (nnz) or NULL: all 1 */
    const int32_t *fields;  /* (nnz) or NULL */
    int64_t num_ids;        /* F: every id is below it */
    int num_fields;         /* C: every field is below it (0 when fields is NULL) */
} dt_sparse_batch;

/* Entries of b: offsets[B] - offsets[0]. */
int64_t dt_sparse_nnz(const dt_sparse_batch *b);

/* Checks b's structure: B >= 1, Dd >= 0 with dense given when Dd > 0,
 * offsets non-decreasing, every id in [0, F), every field in [0, C), every
 * value and dense feature finite. Errors (DT_EINVAL) name the row and
 * entry. For batches that come from outside the readers (tests, tools);
 * the readers only make good ones. */
int dt_sparse_check(const dt_sparse_batch *b, dt_err *err) DT_WARN_UNUSED;

/* The distinct ids of a batch (sorted) and each entry's place among them.
 * Zero it before first use; buffers grow to the largest batch and are
 * reused. */
typedef struct {
    int64_t n;    /* U */
    int64_t nnz;  /* entries of the batch it was built from */
    int64_t *ids; /* (U) sorted, distinct */
    int64_t *pos; /* (nnz) ids[pos[e]] is entry e's id (e counted from offsets[0]) */
    /* scratch */
    int64_t cap;
    uint64_t *keys; /* (nnz) (id, entry) pairs being sorted */
} dt_sparse_index;

/* Builds ix for b (ids in [0, F), entries < 2^24 per batch: the sort packs
 * an entry's number beside its id). Errors: too many entries or an id
 * past 2^40 (DT_EINVAL), DT_ENOMEM. */
int dt_sparse_index_build(dt_sparse_index *ix, const dt_sparse_batch *b,
                          dt_err *err) DT_WARN_UNUSED;
void dt_sparse_index_deinit(dt_sparse_index *ix);

/* A whole data set held in memory, as the readers return it: the arrays
 * of a batch of all its rows, owned. */
typedef struct {
    int64_t rows;      /* N */
    int dense_cols;    /* Dd */
    float *dense;      /* (N, Dd) or NULL */
    float *y;          /* (N) or NULL (read without labels) */
    int64_t *offsets;  /* (N + 1), offsets[0] = 0 */
    int64_t *ids;      /* (nnz) */
    float *values;     /* (nnz) or NULL: all 1 */
    int32_t *fields;   /* (nnz) or NULL */
    int64_t num_ids;   /* F */
    int num_fields;    /* C */
    int64_t skipped;   /* malformed rows left out (skip_bad_rows) */
    int64_t file_rows; /* rows read from the file, every shard's (skipped ones not counted) */
} dt_sparse_set;

/* Releases the set's arrays and zeroes it. NULL is a no-op. */
void dt_sparse_set_deinit(dt_sparse_set *s);

/* Rows [first, first + count) of s as a batch of views into s (valid
 * while s is). The caller keeps within 0 <= first, count >= 1,
 * first + count <= N (else a bug: aborts). */
void dt_sparse_set_slice(const dt_sparse_set *s, int64_t first, int count, dt_sparse_batch *out);

/* Owned copies of chosen rows, for shuffled minibatches. Zero it first;
 * it grows to the largest batch (its entries at least doubling) and is
 * reused. */
typedef struct {
    int cap_rows;
    int64_t cap_entries;
    float *dense, *y, *values;
    int64_t *offsets, *ids;
    int32_t *fields;
} dt_sparse_buffer;

/* Copies rows rows[0..count) of s into buf and points out at them.
 * Errors: a row out of range (DT_EINVAL), DT_ENOMEM. */
int dt_sparse_gather(const dt_sparse_set *s, const int64_t *rows, int count, dt_sparse_buffer *buf,
                     dt_sparse_batch *out, dt_err *err) DT_WARN_UNUSED;
void dt_sparse_buffer_deinit(dt_sparse_buffer *buf);

/* A worker's training batches from its shard: each epoch every row of
 * the set once, in the order a dense data set of as many examples takes
 * (lib/data.h, dt_data_shuffle_start: seeded by (seed, shard, epoch)
 * alone, so every run, and a worker started again, sees the same order),
 * batch_size rows at a time gathered into buffers owned here. A batch
 * never spans two epochs: the last of a pass is short when batch_size
 * does not divide N. The order is 4 bytes a row (uint32_t: a set of
 * 2^32 rows or more is refused); the buffers grow to the largest batch
 * and are then reused, so a step allocates nothing once they have. */
typedef struct {
    const dt_sparse_set *set; /* borrowed: outlives the feed */
    uint64_t seed;
    int shard;
    int epoch;       /* completed passes */
    int64_t pos;     /* next position in order */
    uint32_t *order; /* (N) this epoch's order of the set's rows */
    int64_t *rows;   /* (rows_cap) the batch's rows, as dt_sparse_gather takes them */
    int rows_cap;
    dt_sparse_buffer buf;
} dt_sparse_feed;

/* Starts f at epoch 0, position 0, over s (N >= 1 rows), for shard
 * `shard` of a job seeded `seed`. Errors: an empty set or one of 2^32
 * rows or more (DT_EINVAL), DT_ENOMEM; f is then zeroed. */
int dt_sparse_feed_init(dt_sparse_feed *f, const dt_sparse_set *s, uint64_t seed, int shard,
                        dt_err *err) DT_WARN_UNUSED;
/* The next min(batch_size, rows left in this epoch) rows, gathered into
 * f's buffers (valid until the next call); at the end of a pass the next
 * epoch's order is drawn. Errors: batch_size < 1 (DT_EINVAL), DT_ENOMEM;
 * the position is then unchanged. */
int dt_sparse_feed_next(dt_sparse_feed *f, int batch_size, dt_sparse_batch *out,
                        dt_err *err) DT_WARN_UNUSED;
/* Positions f where dt_sparse_feed_next, called `step` times from the
 * start with batch_size, would leave it (dt_data_seek_position: that
 * epoch's order is drawn once, no batch before it is gathered). Errors
 * as dt_data_seek_position's; f is then unchanged. */
int dt_sparse_feed_seek(dt_sparse_feed *f, int batch_size, int64_t step,
                        dt_err *err) DT_WARN_UNUSED;
/* Releases f's order and buffers and zeroes it. NULL is a no-op. */
void dt_sparse_feed_deinit(dt_sparse_feed *f);

#endif
