/*
 * table: a sparse variable, a table of R rows of D floats whose rows exist
 * only once touched, as a ps holds a click model's 2^28 weights or an
 * embedding of 10^8 rows (TF's partitioned variables read through
 * embedding_lookup, ps-lite's key-value store).
 *
 * Letters: R logical rows (ids 0..R-1, R <= 2^40), D floats per row, S
 * optimizer slots (0..2), n ids in a batch, P ps tasks (shards).
 *
 * Design.
 *
 * Placement over ps tasks (phase 2 puts a table on every ps task):
 *     shard(id) = mix64(id + 0x9e3779b97f4a7c15) mod P
 * (dt_table_shard_of; mix64 is splitmix64's finaliser, lib/hash.h). A
 * hash, not ranges of ids: hashed feature ids are uniform anyway, but raw
 * ids (libsvm indices, vocabulary ranks) crowd at the low end, where
 * ranges (ps-lite's key ranges, TF's "div" strategy) would put most of
 * the traffic on the first task; TF's "mod" strategy (id mod P) balances
 * them only while ids are not strided by P. A row's place depends on its
 * id and P alone, so adding rows never moves others; changing P moves most
 * rows, which is a restore with a re-shard (dt_table_export of each old
 * shard into dt_table_import of each new one), as for dense variables.
 *
 * Rows materialize on first touch. A row never written reads as its
 * initial value, a pure function of (seed, table name, id):
 *   zeros    0
 *   normal   N(0, init_scale^2) per value
 *   uniform  U[-init_scale, init_scale) per value
 * drawn from a splitmix64 stream started at
 *     mix64(xxh64(name, seed) + (id + 1) * 0x9e3779b97f4a7c15)
 * (normals: Box-Muller pairs, data.h's dt_data_normals; uniforms: the top
 * 24 bits of each output). Every ps task, every restore and every re-shard
 * therefore gives a row the same start, and a read of an absent row
 * (dt_table_read) returns that value without storing anything: memory
 * grows with the rows pushed to, not the rows pulled. Slots start at the
 * optimizer's initial values (dt_optim_slot_init).
 *
 * Updates are lazy (optim.h): a push changes the rows it names and no
 * other, with the step count t of the whole table for Adam (TF's LazyAdam).
 *
 * Storage. The table is cut into stripes (64 by default) by a second hash
 * of the id (the top bits of mix64(id ^ 0x5bd1e9955bd1e995), unrelated to
 * the placement hash, so the rows one ps task holds spread over all its
 * stripes). A stripe is an open-addressing hash of id -> row (linear
 * probing, a power-of-two capacity, load at most 3/4, 16 bytes a slot)
 * and its rows: records of (1 + S) * D floats (the weights, then each
 * slot: optim.h's record) and per row the step of its last touch and its
 * touch count, in chunks of 16, 32, 64, ... rows (chunk c holds 16 << c),
 * so rows never move while the table grows and memory is at most about
 * twice the rows held. Bytes per row held: 4 (1 + S) D + 12, plus 16 to
 * 43 of index (dt_table_stats reports the total).
 *
 * Threading, for a ps whose poller threads apply pushes at once: striped
 * locks. Each stripe has a mutex. A batch of ids is grouped by stripe once
 * (dt_table_plan); every call then takes each stripe's mutex once per
 * pass, one stripe at a time, never two together, so calls on disjoint
 * stripes run in parallel and no lock order exists to violate. A row is
 * updated under its stripe's mutex, so concurrent pushes to one row never
 * interleave within it (each row is updated atomically; a push as a whole
 * is not: a pull running beside a push may see some of its rows new and
 * some old, as with dense variables split over ps tasks). A reader-writer
 * lock keeps eviction, which moves rows, apart from everything else:
 * reads, applies, writes and exports hold it shared.
 *
 * Eviction (off by default; Monolith's expiry and TF's frequency filter):
 * dt_table_evict drops rows not touched (pushed or written) in the last
 * idle_steps steps, and rare rows sooner: a row touched fewer than
 * min_touches times in all once it has been untouched for
 * touch_window_steps (so a new row is never dropped at once, and a row
 * seen often is kept for idle_steps after its last use). An evicted row reads
 * as its initial value again, slots included: what it had learned is lost.
 * Rare features are the ones dropped, which is usually cheap in accuracy
 * (their weights were learned from a handful of examples, and with FTRL's
 * L1 most of them are 0 anyway), but a feature that comes back after a
 * long absence starts over.
 *
 * Sizes are checked before they are multiplied; nothing here aborts on bad
 * input: ids out of range or out of order, a count or size too large, and
 * non-finite imported values are errors.
 */
#ifndef DT_TABLE_H
#define DT_TABLE_H

#include <stdint.h>

#include "err.h"
#include "optim.h"
#include "span.h"
#include "tensor.h"

#define DT_TABLE_MAX_ROWS ((int64_t)1 << 40)
#define DT_TABLE_MAX_DIM 65536
/* A table name with the NUL; with "/" and the longest slot or "values"
 * name it still fits a tensor name (DT_TENSOR_NAME_MAX). */
#define DT_TABLE_NAME_MAX 96
#define DT_TABLE_DEFAULT_STRIPES 64
#define DT_TABLE_MAX_STRIPES 1024

typedef enum { DT_TABLE_INIT_ZEROS = 0, DT_TABLE_INIT_NORMAL, DT_TABLE_INIT_UNIFORM } dt_table_init;
/* "zeros", "normal", "uniform"; indexed by dt_table_init, NULL-terminated. */
extern const char *const dt_table_init_names[];

typedef struct {
    char name[DT_TABLE_NAME_MAX]; /* e.g. "logistic/weight"; a tensor name (text.h's rule) */
    int64_t rows;                 /* R: 1..DT_TABLE_MAX_ROWS */
    int dim;                      /* D: 1..DT_TABLE_MAX_DIM */
    dt_table_init init;
    double init_scale; /* normal: stddev, uniform: half-width; finite > 0 (unused by zeros) */
    uint64_t seed;
    int num_slots;                                          /* S: 0..DT_OPTIM_MAX_SLOTS */
    char slot_names[DT_OPTIM_MAX_SLOTS][DT_OPTIM_NAME_MAX]; /* checkpoint names, e.g. "m" */
    float slot_init[DT_OPTIM_MAX_SLOTS];                    /* each slot's initial value */
    int stripes; /* lock stripes, a power of two up to DT_TABLE_MAX_STRIPES; 0: 64 */
} dt_table_config;

/* Sets num_slots, slot_names and slot_init as optim's rule needs them
 * (optim must have passed dt_optim_check). */
void dt_table_config_slots(dt_table_config *cfg, const dt_optim_config *optim);

/* The ps task (0..num_shards-1) that holds row id: the placement rule
 * above. num_shards >= 1, id >= 0 (else a bug: aborts). */
int dt_table_shard_of(int64_t id, int num_shards);

/* Row id's initial weights (D floats) under cfg, as every reader sees a
 * row not yet written. */
void dt_table_init_row(const dt_table_config *cfg, int64_t id, float *out);

typedef struct dt_table dt_table; /* opaque; owns its rows */

/* A new empty table (cfg copied). Errors (*out stays NULL): a field out of
 * range (DT_EINVAL naming it), no memory (DT_ENOMEM). */
int dt_table_new(const dt_table_config *cfg, dt_table **out, dt_err *err) DT_WARN_UNUSED;
void dt_table_free(dt_table *t); /* NULL is a no-op */
const dt_table_config *dt_table_config_of(const dt_table *t);

/* A batch of ids planned for one table: n and ids are the caller's (ids
 * borrowed, valid while the batch is used); the rest is scratch that grows
 * to the largest batch and is reused, so a ps thread that keeps one batch
 * allocates nothing per call once its batches stop growing. Zero it before
 * the first plan; release it with dt_table_batch_deinit. A batch is used by
 * one thread at a time. */
typedef struct {
    int64_t n;          /* ids in the batch */
    const int64_t *ids; /* (n) sorted, unique, each in [0, R) */
    /* scratch */
    int64_t cap;
    int64_t *order; /* (n) positions into ids, grouped by stripe */
    int64_t *row;   /* (n) row of ids[k] in its stripe, while an apply runs */
    int64_t *start; /* (stripes + 1) stripe s owns order[start[s] .. start[s+1]) */
    int nstripes;
    float **recs;       /* (n) records, in order[] order */
    const void **grads; /* (n) gradient rows, in order[] order, any alignment */
    float *carry;       /* (carry_dim) a gradient row split between pieces, put together */
    int carry_dim;
} dt_table_batch;

void dt_table_batch_deinit(dt_table_batch *b);

/*
 * Checks ids (n of them) as the ps checks ids from the wire, and groups
 * them by stripe into b: n >= 0; n * D floats at most 2^40 bytes; every id
 * in [0, R); strictly increasing (sorted and unique). Errors (DT_EINVAL)
 * name the table and the offending position and id; DT_ENOMEM when the
 * scratch cannot grow. b keeps a pointer to ids.
 */
int dt_table_plan(const dt_table *t, const int64_t *ids, int64_t n, dt_table_batch *b,
                  dt_err *err) DT_WARN_UNUSED;

/* Copies the weights of b's rows into values (n, D), row k for ids[k], and
 * when slots is not NULL each slot s into slots[s] (n, D) (a NULL entry
 * skips that slot). A row not held reads as its initial value and the
 * slots' initial values; nothing is stored. */
void dt_table_read(dt_table *t, const dt_table_batch *b, float *values, float *const *slots);

/*
 * Applies the gradient grads (n, D), row k for ids[k], to b's rows with
 * optim at learning rate lr: rows not held are made first at their initial
 * values, then every row is updated lazily (dt_optim_apply_rows) with
 * t = the number of applies to this table so far, this one included. Each
 * row's last touch becomes step and its touch count grows by one.
 * grads is not checked (the ps checks finiteness first). Errors: optim
 * with another number of slots than the table (DT_EINVAL); no memory for
 * new rows (DT_ENOMEM): then no weight changed (rows made so far hold
 * their initial values, which is how they read anyway).
 */
int dt_table_apply(dt_table *t, dt_table_batch *b, const dt_optim_config *optim, double lr,
                   const float *grads, int64_t step, dt_err *err) DT_WARN_UNUSED;

/* dt_table_apply with the gradient read where it arrived: grads is a span
 * of a received message (span.h) of n * D floats, at any alignment,
 * in pieces of any length. Rows are read in place; a row split between two
 * pieces is put together in b's carry (D floats, the one allocation, made
 * before any row changes). The same bits as dt_table_apply of a copy. */
int dt_table_apply_span(dt_table *t, dt_table_batch *b, const dt_optim_config *optim, double lr,
                        const dt_span *grads, int64_t step, dt_err *err) DT_WARN_UNUSED;

/*
 * The apply dt_table_apply_span would make, tried without changing
 * anything: *row gets the lowest k (of b's n) whose update would make a
 * weight or slot of its record NaN or Inf (*elem: the element in the row),
 * or n when none would. A row not held is tried from its initial values.
 * Errors as dt_table_apply_span's (slots, no memory). Rows another thread
 * applies to in between may move: the ps serializes its pushes for it.
 */
int dt_table_first_nonfinite_span(dt_table *t, dt_table_batch *b, const dt_optim_config *optim,
                                  double lr, const dt_span *grads, int64_t *row, int *elem,
                                  dt_err *err) DT_WARN_UNUSED;

/* Sets b's rows to values (n, D) and, when slots is not NULL, each slot s
 * to slots[s] (n, D) (NULL entries: the initial value), making rows as
 * needed; last touch step, touch count 1 for a new row. For restores.
 * Errors as dt_table_apply's DT_ENOMEM (rows already set keep their new
 * values). */
int dt_table_write(dt_table *t, dt_table_batch *b, const float *values, const float *const *slots,
                   int64_t step, dt_err *err) DT_WARN_UNUSED;

typedef struct {
    int64_t rows_held; /* rows materialized */
    int64_t bytes;     /* memory held for them: records, touch data, index */
    int64_t updates;   /* applies so far (Adam's t) */
} dt_table_stats;

void dt_table_stats_of(dt_table *t, dt_table_stats *out);
/* Weights (of D per held row) that are not 0, for Status and checkpoints
 * (FTRL with L1 keeps most at 0). Exact, and no scan: each stripe keeps its
 * count as rows change (made, applied, written, evicted), so this costs one
 * short lock per stripe however many rows are held. */
int64_t dt_table_count_nonzero(dt_table *t);

typedef struct {
    int64_t idle_steps;         /* > 0: drop rows untouched for more than this many steps */
    int64_t min_touches;        /* > 0: drop rows touched fewer times than this in all ... */
    int64_t touch_window_steps; /* ... once untouched for more than this many steps (>= 1) */
} dt_table_evict_policy;

/* Drops the rows the policy says at global step `step` (see above) and
 * gives back their memory; *evicted (may be NULL) gets how many. Blocks
 * every other call on t for the time of the sweep. A policy with both
 * rules off drops nothing. Errors: a negative field, min_touches without a
 * window (DT_EINVAL); DT_ENOMEM when the compacted copy of a stripe cannot
 * be allocated (that stripe is kept whole). */
int dt_table_evict(dt_table *t, int64_t step, const dt_table_evict_policy *policy, int64_t *evicted,
                   dt_err *err) DT_WARN_UNUSED;

/*
 * Checkpoints. A table is saved as tensors beside the dense variables, so
 * safetensors readers (numpy, PyTorch) load it as they load any tensor:
 *   "<name>/ids"     I64 (n)     the held rows' ids, increasing
 *   "<name>/values"  F32 (n, D)  their weights, row k for ids[k]
 *   "<name>/<slot>"  F32 (n, D)  each optimizer slot (e.g. "/m", "/v")
 * Only held rows are saved; a row not in ids has its initial value (above).
 * An empty table is saved as no tensors at all (a dtrain checkpoint has no
 * tensor with a dimension of 0), and loads empty.
 * numpy: w = dict(zip(f["t/ids"], f["t/values"])) with safetensors.numpy's
 * load_file, or a dense np.zeros((R, D)) filled at f["t/ids"].
 */

/* The held rows of shard `shard` of num_shards (placement rule; 0 of 1:
 * all) into a new set *out (the caller deinits it), in id order: ids,
 * values, then the slots. Concurrent pushes may go on; each row is copied
 * whole, as it is at some moment of the export. Errors: shard out of
 * range (DT_EINVAL), DT_ENOMEM. */
int dt_table_export(dt_table *t, int shard, int num_shards, dt_tensors *out,
                    dt_err *err) DT_WARN_UNUSED;

/* One page of dt_table_export: the held rows of the shard whose id is
 * above after_id (-1: from the first), the max_rows (>= 1) lowest of them;
 * *more (may be NULL) says whether rows remain past the page. A save of a
 * large table asks page after page (the chief, through the ps), never
 * building the whole table as one message. Each page scans the table's
 * index (O(rows held) + the page's sort). Errors as dt_table_export's, and
 * max_rows < 1 (DT_EINVAL). */
int dt_table_export_page(dt_table *t, int shard, int num_shards, int64_t after_id, int64_t max_rows,
                         dt_tensors *out, int *more, dt_err *err) DT_WARN_UNUSED;

/*
 * Restores rows from ts (a loaded checkpoint: other tensors are left
 * alone), keeping those of shard `shard` of num_shards: the re-shard of a
 * checkpoint made by any number of ps tasks onto num_shards. Held rows
 * named in ts are overwritten; others stay. A slot the file lacks starts at
 * its initial value (as dense restores do). Everything is checked before
 * any row is written: "<name>/ids" and "<name>/values" both present or both
 * absent (absent: nothing to import), ids I64 (n) increasing and in
 * [0, R), values and slots F32 (n, D), all finite. *imported (may be NULL)
 * gets the rows taken. Errors: DT_ECORRUPT naming the tensor for a file
 * that breaks a rule, DT_EINVAL for a bad shard, DT_ENOMEM.
 */
int dt_table_import(dt_table *t, const dt_tensors *ts, int shard, int num_shards, int64_t step,
                    int64_t *imported, dt_err *err) DT_WARN_UNUSED;

#endif
