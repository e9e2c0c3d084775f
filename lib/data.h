/*
 * data: the examples a worker trains on, cut into minibatches.
 *
 * Sharding rule: worker `shard` of `num_shards` owns the examples whose index
 * i (0-based, in file or generation order) has i % num_shards == shard. The
 * shards are disjoint and together cover the data set. Each epoch the shard's
 * order is reshuffled with a generator seeded by (seed, shard, epoch), so runs
 * repeat exactly.
 */
#ifndef DT_DATA_H
#define DT_DATA_H

#include <stdint.h>

#include "cluster.h"
#include "err.h"

typedef struct {
    int rows;       /* B: examples in this batch */
    int cols;       /* F: features per example */
    const float *x; /* (B, F) row-major, borrowed from the dataset */
    const float *y; /* (B) targets, borrowed */
} dt_batch;

typedef struct dt_dataset dt_dataset; /* opaque; owns its buffers */

/* Opens the job's data source and keeps shard `shard` of `num_shards`. */
int dt_data_open(const dt_job *job, int shard, int num_shards, dt_dataset **out,
                 dt_err *err) DT_WARN_UNUSED;
/* Examples in this shard. */
int64_t dt_data_size(const dt_dataset *ds);
/* Completed passes over the shard so far. */
int dt_data_epoch(const dt_dataset *ds);
/* Fills out with the next min(batch_size, shard size) examples, wrapping into
 * the next (reshuffled) epoch. The batch stays valid until the next call. */
int dt_data_next(dt_dataset *ds, int batch_size, dt_batch *out, dt_err *err) DT_WARN_UNUSED;
/* Every example of the shard in index order, for evaluation and tests. Only
 * for sources that are held in memory ("line"); DT_EPRECOND otherwise. */
int dt_data_all(dt_dataset *ds, dt_batch *out, dt_err *err) DT_WARN_UNUSED;
void dt_data_free(dt_dataset *ds); /* NULL is a no-op */

#endif
