/*
 * table: sparse variables as striped open-addressing hashes of row ids
 * over chunked row storage (table.h has the design: placement, init,
 * storage, threading, eviction, checkpoint layout).
 *
 * Invariants, per stripe (under its mutex):
 *  - index has cap slots (a power of two >= MIN_INDEX), count of them
 *    hold an id (>= 0), the others EMPTY; count * 4 <= cap * 3, so every
 *    probe sequence meets an EMPTY slot.
 *  - the rows are 0..count-1: row r lives in chunk c = floor(log2(r / 16 +
 *    1)) at offset r - 16 (2^c - 1), and chunks 0..nchunks-1 hold at
 *    least count rows. Exactly one index slot names each row.
 *  - bytes is what index and chunks take.
 *  - nonzero is the count of weights (not slots) of rows 0..count-1 that
 *    are not 0: every change of a row's weights (insert, apply, write,
 *    compact) adjusts it by the row's count after less its count before,
 *    so Status reads it in O(stripes) instead of scanning every row.
 * Rows move only in dt_table_evict, which holds evict_lock for writing;
 * every other call holds it for reading, so a row number found in one pass
 * is still valid in the next.
 * Threading: see table.h ("striped locks"). A call never holds two stripe
 * mutexes at once.
 */
#include "table.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "data.h"
#include "hash.h"
#include "text.h"

#define GOLDEN 0x9e3779b97f4a7c15ULL
#define STRIPE_SALT 0x5bd1e9955bd1e995ULL
#define EMPTY ((int64_t)-1)
#define MIN_INDEX 16
#define FIRST_ROWS 16 /* rows of chunk 0; chunk c holds FIRST_ROWS << c */
#define MAX_CHUNKS 32 /* 16 (2^32 - 1) rows: more than a stripe's memory can hold */
#define MAX_BATCH_BYTES ((int64_t)1 << 40)

const char *const dt_table_init_names[] = {"zeros", "normal", "uniform", NULL};

typedef struct {
    int64_t id; /* EMPTY or a row id */
    int64_t row;
} entry;

typedef struct {
    float *recs;       /* (rows, rec) records: weights then slots */
    int64_t *last;     /* (rows) step of the last touch */
    uint32_t *touches; /* (rows) touches, saturating */
} chunk;

typedef struct {
    pthread_mutex_t mu;
    entry *index; /* (cap) */
    int64_t cap, count;
    chunk chunks[MAX_CHUNKS];
    int nchunks;
    int64_t bytes;
    int64_t nonzero; /* weights != 0 over the held rows (invariants above) */
} stripe;

struct dt_table {
    dt_table_config cfg;
    int rec;           /* floats per record: (1 + S) * D */
    uint64_t name_key; /* xxh64(name, seed): the init streams' root */
    int stripe_bits;   /* log2 of the stripe count */
    int nstripes;
    stripe *stripes; /* (nstripes) */
    pthread_rwlock_t evict_lock;
    _Atomic int64_t updates;
};

/* ---- hashing, placement, init -------------------------------------------- */

int dt_table_shard_of(int64_t id, int num_shards) {
    DT_ASSERT(id >= 0 && num_shards >= 1);
    return (int)(dt_hash_mix64((uint64_t)id + GOLDEN) % (uint64_t)num_shards);
}

static uint64_t stripe_key(int64_t id) {
    return dt_hash_mix64((uint64_t)id ^ STRIPE_SALT);
}

/* The top stripe_bits of the key pick the stripe, its low bits the slot. */
static int stripe_index(const dt_table *t, uint64_t key) {
    return t->stripe_bits ? (int)(key >> (64 - t->stripe_bits)) : 0;
}

static uint64_t name_key_of(const dt_table_config *cfg) {
    return dt_hash_xxh64(cfg->name, strnlen(cfg->name, DT_TABLE_NAME_MAX), cfg->seed);
}

static void init_row_keyed(const dt_table_config *cfg, uint64_t name_key, int64_t id, float *out) {
    const int D = cfg->dim;
    if (cfg->init == DT_TABLE_INIT_ZEROS) {
        memset(out, 0, (size_t)D * sizeof *out);
        return;
    }
    uint64_t state = dt_hash_mix64(name_key + ((uint64_t)id + 1) * GOLDEN);
    if (cfg->init == DT_TABLE_INIT_NORMAL) {
        dt_data_normals(&state, out, D, cfg->init_scale);
        return;
    }
    for (int j = 0; j < D; j++) {
        state += GOLDEN;
        uint64_t bits24 = dt_hash_mix64(state) >> 40;
        out[j] = (float)(((double)bits24 / 8388608.0 - 1.0) * cfg->init_scale); /* [-a, a) */
    }
}

void dt_table_init_row(const dt_table_config *cfg, int64_t id, float *out) {
    init_row_keyed(cfg, name_key_of(cfg), id, out);
}

void dt_table_config_slots(dt_table_config *cfg, const dt_optim_config *optim) {
    cfg->num_slots = dt_optim_num_slots(optim);
    memset(cfg->slot_names, 0, sizeof cfg->slot_names);
    for (int s = 0; s < cfg->num_slots; s++) {
        snprintf(cfg->slot_names[s], sizeof cfg->slot_names[s], "%s", dt_optim_slot_name(optim, s));
        cfg->slot_init[s] = dt_optim_slot_init(optim, s);
    }
}

/* ---- lifecycle ------------------------------------------------------------ */

static int check_config(const dt_table_config *cfg, dt_err *err) {
    size_t len = strnlen(cfg->name, DT_TABLE_NAME_MAX);
    if (len == DT_TABLE_NAME_MAX)
        return dt_err_set(err, DT_EINVAL, "table: name longer than %d bytes",
                          DT_TABLE_NAME_MAX - 1);
    int rc = dt_text_check_name(cfg->name, len, DT_TABLE_NAME_MAX - 1, "table", err);
    if (rc < 0) return rc;
    const char *name = cfg->name;
    if (cfg->rows < 1 || cfg->rows > DT_TABLE_MAX_ROWS)
        return dt_err_set(err, DT_EINVAL, "table %s: rows must be 1 to 2^40 (got %lld)", name,
                          (long long)cfg->rows);
    if (cfg->dim < 1 || cfg->dim > DT_TABLE_MAX_DIM)
        return dt_err_set(err, DT_EINVAL, "table %s: dim must be 1 to %d (got %d)", name,
                          DT_TABLE_MAX_DIM, cfg->dim);
    if ((unsigned)cfg->init > DT_TABLE_INIT_UNIFORM)
        return dt_err_set(err, DT_EINVAL, "table %s: unknown init %d", name, (int)cfg->init);
    if (cfg->init != DT_TABLE_INIT_ZEROS && !(cfg->init_scale > 0 && isfinite(cfg->init_scale)))
        return dt_err_set(err, DT_EINVAL,
                          "table %s: init_scale must be a positive number for %s init (got %g)",
                          name, dt_table_init_names[cfg->init], cfg->init_scale);
    if (cfg->num_slots < 0 || cfg->num_slots > DT_OPTIM_MAX_SLOTS)
        return dt_err_set(err, DT_EINVAL, "table %s: %d slots (0 to %d)", name, cfg->num_slots,
                          DT_OPTIM_MAX_SLOTS);
    for (int s = 0; s < cfg->num_slots; s++) {
        size_t n = strnlen(cfg->slot_names[s], DT_OPTIM_NAME_MAX);
        if (n == 0 || n == DT_OPTIM_NAME_MAX ||
            dt_text_check_name(cfg->slot_names[s], n, DT_OPTIM_NAME_MAX - 1, "table slot", err) < 0)
            return dt_err_set(err, DT_EINVAL, "table %s: slot %d has no usable name", name, s);
        if (!isfinite(cfg->slot_init[s]))
            return dt_err_set(err, DT_EINVAL, "table %s: slot %s starts at %g", name,
                              cfg->slot_names[s], (double)cfg->slot_init[s]);
    }
    int stripes = cfg->stripes;
    if (stripes != 0 &&
        (stripes < 1 || stripes > DT_TABLE_MAX_STRIPES || (stripes & (stripes - 1))))
        return dt_err_set(err, DT_EINVAL,
                          "table %s: stripes must be a power of two up to %d (got %d)", name,
                          DT_TABLE_MAX_STRIPES, stripes);
    return 0;
}

static void stripe_release(stripe *s) {
    free(s->index);
    for (int c = 0; c < s->nchunks; c++)
        free(s->chunks[c].recs);
    s->index = NULL;
    s->nchunks = 0;
    s->cap = s->count = s->bytes = s->nonzero = 0;
}

/* A fresh index of cap EMPTY slots, or NULL. */
static entry *new_index(int64_t cap) {
    if ((uint64_t)cap > SIZE_MAX / sizeof(entry)) return NULL;
    entry *index = dt_malloc((size_t)cap * sizeof *index);
    if (!index) return NULL;
    for (int64_t i = 0; i < cap; i++)
        index[i].id = EMPTY;
    return index;
}

int dt_table_new(const dt_table_config *cfg, dt_table **out, dt_err *err) {
    *out = NULL;
    int rc = check_config(cfg, err);
    if (rc < 0) return rc;
    dt_table *t = dt_calloc(1, sizeof *t);
    if (!t) return dt_err_set(err, DT_ENOMEM, "table %s: no memory", cfg->name);
    t->cfg = *cfg;
    t->nstripes = cfg->stripes ? cfg->stripes : DT_TABLE_DEFAULT_STRIPES;
    while ((1 << t->stripe_bits) < t->nstripes)
        t->stripe_bits++;
    t->rec = (1 + cfg->num_slots) * cfg->dim; /* <= 3 * 65536 */
    t->name_key = name_key_of(cfg);
    atomic_init(&t->updates, 0);
    t->stripes = dt_calloc((size_t)t->nstripes, sizeof *t->stripes);
    if (!t->stripes || pthread_rwlock_init(&t->evict_lock, NULL) != 0) {
        free(t->stripes);
        free(t);
        return dt_err_set(err, DT_ENOMEM, "table %s: no memory", cfg->name);
    }
    for (int i = 0; i < t->nstripes; i++) {
        stripe *s = &t->stripes[i];
        pthread_mutex_init(&s->mu, NULL);
        s->cap = MIN_INDEX;
        s->index = new_index(MIN_INDEX);
        s->bytes = MIN_INDEX * (int64_t)sizeof(entry);
        if (!s->index) {
            t->nstripes = i + 1;
            dt_table_free(t);
            return dt_err_set(err, DT_ENOMEM, "table %s: no memory", cfg->name);
        }
    }
    *out = t;
    return 0;
}

void dt_table_free(dt_table *t) {
    if (!t) return;
    for (int i = 0; i < t->nstripes; i++) {
        stripe_release(&t->stripes[i]);
        pthread_mutex_destroy(&t->stripes[i].mu);
    }
    pthread_rwlock_destroy(&t->evict_lock);
    free(t->stripes);
    free(t);
}

const dt_table_config *dt_table_config_of(const dt_table *t) {
    return &t->cfg;
}

/* ---- one stripe: lookup, insert ------------------------------------------- */

static int64_t chunk_rows(int c) {
    return (int64_t)FIRST_ROWS << c;
}

/* Rows that chunks 0..n-1 hold together: 16 (2^n - 1). */
static int64_t rows_in_chunks(int n) {
    return (int64_t)FIRST_ROWS * (((int64_t)1 << n) - 1);
}

static void locate(int64_t row, int *c, int64_t *off) {
    uint64_t q = (uint64_t)row / FIRST_ROWS + 1;
    *c = 63 - __builtin_clzll(q);
    *off = row - rows_in_chunks(*c);
}

static float *record_of(const dt_table *t, const stripe *s, int64_t row) {
    int c;
    int64_t off;
    locate(row, &c, &off);
    return s->chunks[c].recs + (size_t)off * (size_t)t->rec;
}

static void touch(stripe *s, int64_t row, int64_t step) {
    int c;
    int64_t off;
    locate(row, &c, &off);
    s->chunks[c].last[off] = step;
    if (s->chunks[c].touches[off] != UINT32_MAX) s->chunks[c].touches[off]++;
}

static int64_t lookup(const stripe *s, int64_t id, uint64_t key) {
    const uint64_t mask = (uint64_t)s->cap - 1;
    for (uint64_t i = key & mask;; i = (i + 1) & mask) {
        if (s->index[i].id == id) return s->index[i].row;
        if (s->index[i].id == EMPTY) return -1;
    }
}

static void place(entry *index, int64_t cap, int64_t id, int64_t row) {
    const uint64_t mask = (uint64_t)cap - 1;
    uint64_t i = stripe_key(id) & mask;
    while (index[i].id != EMPTY)
        i = (i + 1) & mask;
    index[i].id = id;
    index[i].row = row;
}

/* Chunk c of a stripe: records, last touches and touch counts in one
 * block (the records first, 64-byte aligned). */
static int alloc_chunk(const dt_table *t, chunk *ch, int c, int64_t *bytes) {
    const int64_t rows = chunk_rows(c);
    size_t rec_bytes, meta_bytes = (size_t)rows * (sizeof(int64_t) + sizeof(uint32_t)), total;
    if (__builtin_mul_overflow((size_t)rows, (size_t)t->rec * sizeof(float), &rec_bytes) ||
        __builtin_add_overflow(rec_bytes, meta_bytes, &total) || total > SIZE_MAX - 64)
        return -1;
    total = (total + 63) / 64 * 64;
    void *block = dt_aligned_alloc(64, total);
    if (!block) return -1;
    ch->recs = block;
    ch->last = (void *)((char *)block + rec_bytes); /* rec_bytes is a multiple of 4 * 16 */
    ch->touches = (void *)((char *)block + rec_bytes + (size_t)rows * sizeof(int64_t));
    *bytes = (int64_t)total;
    return 0;
}

/* Doubles s's index. */
static int grow_index(stripe *s) {
    if (s->cap > INT64_MAX / 2) return -1;
    const int64_t cap = s->cap * 2;
    entry *index = new_index(cap);
    if (!index) return -1;
    for (int64_t i = 0; i < s->cap; i++)
        if (s->index[i].id != EMPTY) place(index, cap, s->index[i].id, s->index[i].row);
    free(s->index);
    s->index = index;
    s->bytes += (cap - s->cap) * (int64_t)sizeof(entry);
    s->cap = cap;
    return 0;
}

/* The weights (the first D floats of a record) that are not 0. */
static int64_t row_nonzero(const float *w, int dim) {
    int64_t n = 0;
    for (int j = 0; j < dim; j++)
        n += w[j] != 0.0f;
    return n;
}

/* Makes row id in s at its initial value (slots at theirs), untouched. */
static int insert(const dt_table *t, stripe *s, int64_t id, int64_t step, int64_t *row_out,
                  dt_err *err) {
    const dt_table_config *cfg = &t->cfg;
    if ((s->count + 1) * 4 > s->cap * 3 && grow_index(s) < 0)
        return dt_err_set(err, DT_ENOMEM, "table %s: no memory for the index of %lld rows",
                          cfg->name, (long long)(s->count + 1));
    if (s->count == rows_in_chunks(s->nchunks)) {
        int64_t bytes = 0;
        if (s->nchunks == MAX_CHUNKS ||
            alloc_chunk(t, &s->chunks[s->nchunks], s->nchunks, &bytes) < 0)
            return dt_err_set(err, DT_ENOMEM, "table %s: no memory for %lld more rows", cfg->name,
                              (long long)chunk_rows(s->nchunks));
        s->nchunks++;
        s->bytes += bytes;
    }
    const int64_t row = s->count++;
    float *rec = record_of(t, s, row);
    init_row_keyed(cfg, t->name_key, id, rec);
    s->nonzero += row_nonzero(rec, cfg->dim);
    for (int k = 0; k < cfg->num_slots; k++)
        for (int j = 0; j < cfg->dim; j++)
            rec[(size_t)(k + 1) * (size_t)cfg->dim + (size_t)j] = cfg->slot_init[k];
    int c;
    int64_t off;
    locate(row, &c, &off);
    s->chunks[c].last[off] = step;
    s->chunks[c].touches[off] = 0;
    place(s->index, s->cap, id, row);
    *row_out = row;
    return 0;
}

/* ---- batches -------------------------------------------------------------- */

void dt_table_batch_deinit(dt_table_batch *b) {
    if (!b) return;
    free(b->order);
    free(b->row);
    free(b->start);
    free(b->recs);
    free(b->grads);
    free(b->carry);
    memset(b, 0, sizeof *b);
}

/* Ids that must increase and lie in [0, rows); code says whose fault a
 * bad one is (DT_EINVAL for a caller, DT_ECORRUPT for a file). */
static int check_ids(const dt_table *t, const int64_t *ids, int64_t n, int code, const char *what,
                     dt_err *err) {
    const char *name = t->cfg.name;
    for (int64_t k = 0; k < n; k++) {
        if (ids[k] < 0 || ids[k] >= t->cfg.rows)
            return dt_err_set(err, code, "table %s: %s[%lld] = %lld is out of range [0, %lld)",
                              name, what, (long long)k, (long long)ids[k], (long long)t->cfg.rows);
        if (k > 0 && ids[k] <= ids[k - 1])
            return dt_err_set(err, code,
                              "table %s: %s[%lld] = %lld after %lld: ids must increase (sorted, "
                              "no duplicates)",
                              name, what, (long long)k, (long long)ids[k], (long long)ids[k - 1]);
    }
    return 0;
}

static int check_count(const dt_table *t, int64_t n, int code, dt_err *err) {
    const int64_t max_rows = MAX_BATCH_BYTES / ((int64_t)t->cfg.dim * (int64_t)sizeof(float));
    if (n < 0 || n > max_rows)
        return dt_err_set(err, code, "table %s: %lld rows of %d floats (at most %lld)", t->cfg.name,
                          (long long)n, t->cfg.dim, (long long)max_rows);
    return 0;
}

static int grow_batch(const dt_table *t, dt_table_batch *b, int64_t n, dt_err *err) {
    if (n > b->cap) {
        /* n <= 2^38 (check_count), so the products fit size_t. */
        int64_t *order = dt_realloc(b->order, (size_t)n * sizeof *order);
        if (order) b->order = order;
        int64_t *row = dt_realloc(b->row, (size_t)n * sizeof *row);
        if (row) b->row = row;
        float **recs = dt_realloc(b->recs, (size_t)n * sizeof *recs);
        if (recs) b->recs = recs;
        const void **grads = dt_realloc(b->grads, (size_t)n * sizeof *grads);
        if (grads) b->grads = grads;
        if (!order || !row || !recs || !grads)
            return dt_err_set(err, DT_ENOMEM, "table %s: no memory to plan %lld ids", t->cfg.name,
                              (long long)n);
        b->cap = n;
    }
    if (b->nstripes != t->nstripes || !b->start) {
        int64_t *start = dt_realloc(b->start, (size_t)(t->nstripes + 1) * sizeof *start);
        if (!start) return dt_err_set(err, DT_ENOMEM, "table %s: no memory", t->cfg.name);
        b->start = start;
        b->nstripes = t->nstripes;
    }
    return 0;
}

int dt_table_plan(const dt_table *t, const int64_t *ids, int64_t n, dt_table_batch *b,
                  dt_err *err) {
    b->n = 0;
    b->ids = ids;
    int rc = check_count(t, n, DT_EINVAL, err);
    if (rc == 0) rc = check_ids(t, ids, n, DT_EINVAL, "ids", err);
    if (rc == 0) rc = grow_batch(t, b, n, err);
    if (rc < 0) return rc;
    /* Counting sort of the positions by stripe. */
    int64_t *start = b->start;
    memset(start, 0, (size_t)(t->nstripes + 1) * sizeof *start);
    for (int64_t k = 0; k < n; k++)
        start[stripe_index(t, stripe_key(ids[k])) + 1]++;
    for (int s = 0; s < t->nstripes; s++)
        start[s + 1] += start[s];
    /* start[s] runs through stripe s's positions as they are filled, then
     * everything shifts back by one stripe. */
    for (int64_t k = 0; k < n; k++)
        b->order[start[stripe_index(t, stripe_key(ids[k]))]++] = k;
    for (int s = t->nstripes; s > 0; s--)
        start[s] = start[s - 1];
    start[0] = 0;
    b->n = n;
    return 0;
}

/* ---- read, apply, write --------------------------------------------------- */

static void batch_matches(const dt_table *t, const dt_table_batch *b) {
    DT_ASSERT(b->n == 0 || (b->nstripes == t->nstripes && b->order && b->start));
}

/* What one call does to the positions [begin, end) of b's order that
 * belong to stripe s, with s's mutex held. */
typedef struct pass pass;
struct pass {
    int (*fn)(const pass *ps, stripe *s, int64_t begin, int64_t end, dt_err *err);
    dt_table *t;
    dt_table_batch *b;
    int64_t step;
    float *values;             /* read: out */
    float *const *slots_out;   /* read: out, may be NULL */
    const float *in;           /* write: values */
    const dt_span *grads;      /* apply: (n, D) floats in a message's pieces */
    const float *const *slots; /* write: may be NULL */
    const dt_optim_config *optim;
    double lr;
    int64_t updates; /* apply: t */
    float *scratch;  /* check: a record for a row not held, (1 + S) D floats */
    int64_t *bad_k;  /* check: the lowest k whose update would not be finite */
    int *bad_elem;   /* check: its element */
};

/* Runs ps over every stripe b touches, one mutex at a time; stops at the
 * first error. */
static int run_pass(const pass *ps, dt_err *err) {
    const dt_table_batch *b = ps->b;
    for (int si = 0; si < ps->t->nstripes && b->n > 0; si++) {
        const int64_t begin = b->start[si], end = b->start[si + 1];
        if (begin == end) continue;
        stripe *s = &ps->t->stripes[si];
        pthread_mutex_lock(&s->mu);
        int rc = ps->fn(ps, s, begin, end, err);
        pthread_mutex_unlock(&s->mu);
        if (rc < 0) return rc;
    }
    return 0;
}

static int read_stripe(const pass *ps, stripe *s, int64_t begin, int64_t end, dt_err *err) {
    (void)err;
    const dt_table *t = ps->t;
    const dt_table_config *cfg = &t->cfg;
    const size_t D = (size_t)cfg->dim;
    for (int64_t p = begin; p < end; p++) {
        const int64_t k = ps->b->order[p], id = ps->b->ids[k];
        const int64_t row = lookup(s, id, stripe_key(id));
        float *dst = ps->values + (size_t)k * D;
        const float *rec = row >= 0 ? record_of(t, s, row) : NULL;
        if (rec)
            memcpy(dst, rec, D * sizeof *dst);
        else
            init_row_keyed(cfg, t->name_key, id, dst);
        for (int j = 0; ps->slots_out && j < cfg->num_slots; j++) {
            if (!ps->slots_out[j]) continue;
            float *sd = ps->slots_out[j] + (size_t)k * D;
            if (rec)
                memcpy(sd, rec + (size_t)(j + 1) * D, D * sizeof *sd);
            else
                for (size_t i = 0; i < D; i++)
                    sd[i] = cfg->slot_init[j];
        }
    }
    return 0;
}

static void read_locked(dt_table *t, const dt_table_batch *b, float *values, float *const *slots) {
    pass ps = {.fn = read_stripe,
               .t = t,
               .b = (dt_table_batch *)b, /* read_stripe only reads it */
               .values = values,
               .slots_out = slots};
    (void)run_pass(&ps, NULL);
}

void dt_table_read(dt_table *t, const dt_table_batch *b, float *values, float *const *slots) {
    batch_matches(t, b);
    pthread_rwlock_rdlock(&t->evict_lock);
    read_locked(t, b, values, slots);
    pthread_rwlock_unlock(&t->evict_lock);
}

/* First pass of apply and write: every row of b held, its row number in
 * b->row. A row made here holds its initial value, which is what it read
 * as before, so a failure midway changes nothing a reader can see. */
static int materialize_stripe(const pass *ps, stripe *s, int64_t begin, int64_t end, dt_err *err) {
    dt_table_batch *b = ps->b;
    for (int64_t p = begin; p < end; p++) {
        const int64_t k = b->order[p], id = b->ids[k];
        int64_t row = lookup(s, id, stripe_key(id));
        if (row < 0) {
            int rc = insert(ps->t, s, id, ps->step, &row, err);
            if (rc < 0) return rc;
        }
        b->row[k] = row;
    }
    return 0;
}

/* Where row k of the gradient lies: in place when its bytes are in one
 * piece, else put together in b's carry. *piece and *base (the offset of
 * *piece's first byte in the span's first piece) only move forward, so a
 * stripe's rows, visited in increasing k, walk the pieces once. */
static const void *grad_row(const dt_span *g, size_t row_bytes, int64_t k, const dt_piece **piece,
                            size_t *base, float *carry) {
    const size_t at = g->offset + (size_t)k * row_bytes;
    while (at >= *base + (*piece)->len) {
        *base += (*piece)->len;
        (*piece)++;
    }
    if (at + row_bytes <= *base + (*piece)->len) return (*piece)->data + (at - *base);
    const dt_piece *p = *piece;
    size_t off = at - *base;
    for (size_t got = 0; got < row_bytes; p++, off = 0) {
        size_t take = p->len - off < row_bytes - got ? p->len - off : row_bytes - got;
        memcpy((uint8_t *)carry + got, p->data + off, take);
        got += take;
    }
    return carry;
}

static int apply_stripe(const pass *ps, stripe *s, int64_t begin, int64_t end, dt_err *err) {
    (void)err;
    dt_table_batch *b = ps->b;
    const int dim = ps->t->cfg.dim;
    const size_t row_bytes = (size_t)dim * sizeof(float);
    const dt_piece *piece = ps->grads->piece;
    size_t base = 0;
    int64_t before = 0, after = 0, m = begin;
    for (int64_t p = begin; p < end; p++) {
        const int64_t k = b->order[p];
        float *rec = record_of(ps->t, s, b->row[k]);
        const void *g = grad_row(ps->grads, row_bytes, k, &piece, &base, b->carry);
        touch(s, b->row[k], ps->step);
        before += row_nonzero(rec, dim);
        if (g == b->carry) {
            /* The carry holds one row: apply it now (rows are independent). */
            dt_optim_apply_rows(ps->optim, ps->lr, ps->updates, &rec, &g, 1, dim);
            after += row_nonzero(rec, dim);
        } else {
            /* Read in place, applied together below. */
            b->recs[m] = rec;
            b->grads[m++] = g;
        }
    }
    dt_optim_apply_rows(ps->optim, ps->lr, ps->updates, b->recs + begin, b->grads + begin,
                        m - begin, dim);
    for (int64_t p = begin; p < m; p++)
        after += row_nonzero(b->recs[p], dim);
    s->nonzero += after - before;
    return 0;
}

/* The check of an apply, writing nothing: each row's record (or its
 * initial one, for a row not held) tried with its gradient row. */
static int check_stripe(const pass *ps, stripe *s, int64_t begin, int64_t end, dt_err *err) {
    (void)err;
    dt_table_batch *b = ps->b;
    const dt_table_config *cfg = &ps->t->cfg;
    const int dim = cfg->dim;
    const size_t D = (size_t)dim, row_bytes = D * sizeof(float);
    const dt_piece *piece = ps->grads->piece;
    size_t base = 0;
    for (int64_t p = begin; p < end; p++) {
        const int64_t k = b->order[p], id = b->ids[k];
        const int64_t row = lookup(s, id, stripe_key(id));
        float *rec = row >= 0 ? record_of(ps->t, s, row) : ps->scratch;
        if (row < 0) {
            init_row_keyed(cfg, ps->t->name_key, id, rec);
            for (int j = 0; j < cfg->num_slots; j++)
                for (size_t i = 0; i < D; i++)
                    rec[(size_t)(j + 1) * D + i] = cfg->slot_init[j];
        }
        const void *g = grad_row(ps->grads, row_bytes, k, &piece, &base, b->carry);
        int elem = 0;
        if (k < *ps->bad_k && dt_optim_rows_first_nonfinite(ps->optim, ps->lr, ps->updates, &rec,
                                                            &g, 1, dim, &elem) == 0) {
            *ps->bad_k = k;
            *ps->bad_elem = elem;
        }
    }
    return 0;
}

int dt_table_first_nonfinite_span(dt_table *t, dt_table_batch *b, const dt_optim_config *optim,
                                  double lr, const dt_span *grads, int64_t *row, int *elem,
                                  dt_err *err) {
    batch_matches(t, b);
    const dt_table_config *cfg = &t->cfg;
    *row = b->n;
    *elem = 0;
    if (dt_optim_num_slots(optim) != cfg->num_slots)
        return dt_err_set(err, DT_EINVAL, "table %s: optimizer %s has %d slots, the table %d",
                          cfg->name, dt_optim_name(optim->kind), dt_optim_num_slots(optim),
                          cfg->num_slots);
    if (b->carry_dim < cfg->dim) {
        float *carry = dt_realloc(b->carry, (size_t)cfg->dim * sizeof *carry);
        if (!carry) return dt_err_set(err, DT_ENOMEM, "table %s: no memory", cfg->name);
        b->carry = carry;
        b->carry_dim = cfg->dim;
    }
    float *scratch = dt_malloc((size_t)(1 + cfg->num_slots) * (size_t)cfg->dim * sizeof *scratch);
    if (!scratch) return dt_err_set(err, DT_ENOMEM, "table %s: no memory", cfg->name);
    pass ps = {.fn = check_stripe,
               .t = t,
               .b = b,
               .grads = grads,
               .optim = optim,
               .lr = lr,
               .scratch = scratch,
               .bad_k = row,
               .bad_elem = elem};
    pthread_rwlock_rdlock(&t->evict_lock);
    ps.updates = atomic_load(&t->updates) + 1;
    int rc = run_pass(&ps, err);
    pthread_rwlock_unlock(&t->evict_lock);
    free(scratch);
    return rc;
}

static int write_stripe(const pass *ps, stripe *s, int64_t begin, int64_t end, dt_err *err) {
    (void)err;
    const dt_table_config *cfg = &ps->t->cfg;
    const size_t D = (size_t)cfg->dim;
    for (int64_t p = begin; p < end; p++) {
        const int64_t k = ps->b->order[p];
        float *rec = record_of(ps->t, s, ps->b->row[k]);
        s->nonzero -= row_nonzero(rec, cfg->dim);
        memcpy(rec, ps->in + (size_t)k * D, D * sizeof *rec);
        s->nonzero += row_nonzero(rec, cfg->dim);
        for (int j = 0; j < cfg->num_slots; j++) {
            float *sd = rec + (size_t)(j + 1) * D;
            if (ps->slots && ps->slots[j])
                memcpy(sd, ps->slots[j] + (size_t)k * D, D * sizeof *sd);
            else
                for (size_t i = 0; i < D; i++)
                    sd[i] = cfg->slot_init[j];
        }
        touch(s, ps->b->row[k], ps->step);
    }
    return 0;
}

static int check_step(const dt_table *t, int64_t step, dt_err *err) {
    if (step < 0)
        return dt_err_set(err, DT_EINVAL, "table %s: step %lld is negative", t->cfg.name,
                          (long long)step);
    return 0;
}

/* Makes b's rows, then runs ps (apply or write) over them, under the
 * shared evict_lock so no row moves in between. */
static int update(pass *ps, dt_err *err) {
    int rc = check_step(ps->t, ps->step, err);
    if (rc < 0) return rc;
    pthread_rwlock_rdlock(&ps->t->evict_lock);
    pass make = *ps;
    make.fn = materialize_stripe;
    rc = run_pass(&make, err);
    if (rc == 0) {
        if (ps->optim) ps->updates = atomic_fetch_add(&ps->t->updates, 1) + 1;
        rc = run_pass(ps, err);
    }
    pthread_rwlock_unlock(&ps->t->evict_lock);
    return rc;
}

int dt_table_apply_span(dt_table *t, dt_table_batch *b, const dt_optim_config *optim, double lr,
                        const dt_span *grads, int64_t step, dt_err *err) {
    batch_matches(t, b);
    const dt_table_config *cfg = &t->cfg;
    if (dt_optim_num_slots(optim) != cfg->num_slots)
        return dt_err_set(err, DT_EINVAL, "table %s: optimizer %s has %d slots, the table %d",
                          cfg->name, dt_optim_name(optim->kind), dt_optim_num_slots(optim),
                          cfg->num_slots);
    if (b->carry_dim < cfg->dim) {
        float *carry = dt_realloc(b->carry, (size_t)cfg->dim * sizeof *carry);
        if (!carry) return dt_err_set(err, DT_ENOMEM, "table %s: no memory", cfg->name);
        b->carry = carry;
        b->carry_dim = cfg->dim;
    }
    pass ps = {
        .fn = apply_stripe, .t = t, .b = b, .step = step, .grads = grads, .optim = optim, .lr = lr};
    return update(&ps, err);
}

int dt_table_apply(dt_table *t, dt_table_batch *b, const dt_optim_config *optim, double lr,
                   const float *grads, int64_t step, dt_err *err) {
    /* n * D floats fit: dt_table_plan checked n * D * 4 <= 2^40. */
    const dt_piece one = {(const uint8_t *)grads,
                          (size_t)b->n * (size_t)t->cfg.dim * sizeof(float)};
    const dt_span span = {&one, 0, one.len};
    return dt_table_apply_span(t, b, optim, lr, &span, step, err);
}

int dt_table_write(dt_table *t, dt_table_batch *b, const float *values, const float *const *slots,
                   int64_t step, dt_err *err) {
    batch_matches(t, b);
    pass ps = {.fn = write_stripe, .t = t, .b = b, .step = step, .in = values, .slots = slots};
    return update(&ps, err);
}

/* ---- counts --------------------------------------------------------------- */

void dt_table_stats_of(dt_table *t, dt_table_stats *out) {
    memset(out, 0, sizeof *out);
    pthread_rwlock_rdlock(&t->evict_lock);
    for (int si = 0; si < t->nstripes; si++) {
        stripe *s = &t->stripes[si];
        pthread_mutex_lock(&s->mu);
        out->rows_held += s->count;
        out->bytes += s->bytes;
        pthread_mutex_unlock(&s->mu);
    }
    pthread_rwlock_unlock(&t->evict_lock);
    out->bytes += (int64_t)(sizeof *t + (size_t)t->nstripes * sizeof *t->stripes);
    out->updates = atomic_load(&t->updates);
}

int64_t dt_table_count_nonzero(dt_table *t) {
    int64_t nonzero = 0;
    pthread_rwlock_rdlock(&t->evict_lock);
    for (int si = 0; si < t->nstripes; si++) {
        stripe *s = &t->stripes[si];
        pthread_mutex_lock(&s->mu);
        nonzero += s->nonzero;
        pthread_mutex_unlock(&s->mu);
    }
    pthread_rwlock_unlock(&t->evict_lock);
    return nonzero;
}

/* ---- eviction ------------------------------------------------------------- */

static int evicted_row(const dt_table_evict_policy *p, int64_t step, int64_t last,
                       uint32_t touches) {
    /* Steps are >= 0 (check_step), so the difference cannot overflow. */
    const int64_t idle = last < step ? step - last : 0;
    if (p->idle_steps > 0 && idle > p->idle_steps) return 1;
    return p->min_touches > 0 && (int64_t)touches < p->min_touches && idle > p->touch_window_steps;
}

/* Rebuilds stripe s with only the rows the policy keeps, in new memory
 * (the stripe stays whole when that memory cannot be had). */
static int compact(dt_table *t, stripe *s, int64_t step, const dt_table_evict_policy *p,
                   int64_t *dropped, dt_err *err) {
    int64_t keep = 0;
    for (int64_t i = 0; i < s->cap; i++) {
        if (s->index[i].id == EMPTY) continue;
        int c;
        int64_t off;
        locate(s->index[i].row, &c, &off);
        keep += !evicted_row(p, step, s->chunks[c].last[off], s->chunks[c].touches[off]);
    }
    if (keep == s->count) return 0;
    stripe fresh;
    memset(&fresh, 0, sizeof fresh);
    fresh.cap = MIN_INDEX;
    while (keep * 4 > fresh.cap * 3)
        fresh.cap *= 2;
    fresh.index = new_index(fresh.cap);
    fresh.bytes = fresh.cap * (int64_t)sizeof(entry);
    int ok = fresh.index != NULL;
    while (ok && rows_in_chunks(fresh.nchunks) < keep) {
        int64_t bytes = 0;
        ok = alloc_chunk(t, &fresh.chunks[fresh.nchunks], fresh.nchunks, &bytes) == 0;
        if (ok) fresh.nchunks++, fresh.bytes += bytes;
    }
    if (!ok) {
        stripe_release(&fresh);
        return dt_err_set(err, DT_ENOMEM, "table %s: no memory to compact %lld rows", t->cfg.name,
                          (long long)keep);
    }
    for (int64_t i = 0; i < s->cap; i++) {
        const entry e = s->index[i];
        if (e.id == EMPTY) continue;
        int c, fc;
        int64_t off, foff;
        locate(e.row, &c, &off);
        if (evicted_row(p, step, s->chunks[c].last[off], s->chunks[c].touches[off])) continue;
        const int64_t row = fresh.count++;
        locate(row, &fc, &foff);
        float *rec = record_of(t, &fresh, row);
        memcpy(rec, record_of(t, s, e.row), (size_t)t->rec * sizeof(float));
        fresh.nonzero += row_nonzero(rec, t->cfg.dim);
        fresh.chunks[fc].last[foff] = s->chunks[c].last[off];
        fresh.chunks[fc].touches[foff] = s->chunks[c].touches[off];
        place(fresh.index, fresh.cap, e.id, row);
    }
    *dropped += s->count - keep;
    stripe_release(s);
    s->index = fresh.index;
    s->cap = fresh.cap;
    s->count = fresh.count;
    memcpy(s->chunks, fresh.chunks, sizeof s->chunks);
    s->nchunks = fresh.nchunks;
    s->bytes = fresh.bytes;
    s->nonzero = fresh.nonzero;
    return 0;
}

int dt_table_evict(dt_table *t, int64_t step, const dt_table_evict_policy *policy, int64_t *evicted,
                   dt_err *err) {
    if (evicted) *evicted = 0;
    const char *name = t->cfg.name;
    if (policy->idle_steps < 0 || policy->min_touches < 0 || policy->touch_window_steps < 0)
        return dt_err_set(err, DT_EINVAL,
                          "table %s: evict: negative idle_steps, min_touches or "
                          "touch_window_steps",
                          name);
    if (policy->min_touches > 0 && policy->touch_window_steps < 1)
        return dt_err_set(err, DT_EINVAL,
                          "table %s: evict: min_touches needs touch_window_steps >= 1", name);
    int rc = check_step(t, step, err);
    if (rc < 0 || (policy->idle_steps == 0 && policy->min_touches == 0)) return rc;
    int64_t dropped = 0;
    pthread_rwlock_wrlock(&t->evict_lock);
    for (int si = 0; si < t->nstripes; si++) {
        stripe *s = &t->stripes[si];
        pthread_mutex_lock(&s->mu);
        int r = compact(t, s, step, policy, &dropped, err);
        pthread_mutex_unlock(&s->mu);
        if (r < 0 && rc == 0) rc = r;
    }
    pthread_rwlock_unlock(&t->evict_lock);
    if (evicted) *evicted = dropped;
    return rc;
}

/* ---- checkpoints ---------------------------------------------------------- */

static int check_shard(const dt_table *t, int shard, int num_shards, dt_err *err) {
    if (num_shards < 1 || shard < 0 || shard >= num_shards)
        return dt_err_set(err, DT_EINVAL, "table %s: shard %d of %d is out of range", t->cfg.name,
                          shard, num_shards);
    return 0;
}

static int by_id(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The tensor names of t's checkpoint: "<name>/<what>". */
static void tensor_name(const dt_table *t, const char *what, char *out) {
    snprintf(out, DT_TENSOR_NAME_MAX, "%s/%s", t->cfg.name, what);
}

static void swap_ids(int64_t *a, int64_t *b) {
    const int64_t t = *a;
    *a = *b;
    *b = t;
}

/* Puts the k smallest of the n distinct ids a holds first, in no order
 * (0 < k < n): a quickselect, so that a page of an export costs a pass over
 * the held ids instead of a sort of all of them, which made a save of
 * millions of rows take (pages x rows x log rows). After 2 log2(n) rounds
 * without an end (pivots that kept splitting badly) it sorts the rest. */
static void smallest_first(int64_t *a, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1; /* the k-th smallest (index k) is in [lo, hi] */
    int rounds = 2 * (64 - __builtin_clzll((unsigned long long)n));
    while (hi - lo > 16 && rounds-- > 0) {
        /* The median of the first, middle and last as pivot. */
        const int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] < a[lo]) swap_ids(&a[mid], &a[lo]);
        if (a[hi] < a[lo]) swap_ids(&a[hi], &a[lo]);
        if (a[hi] < a[mid]) swap_ids(&a[hi], &a[mid]);
        const int64_t pivot = a[mid];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot)
                i++;
            while (a[j] > pivot)
                j--;
            if (i <= j) swap_ids(&a[i++], &a[j--]);
        }
        /* Now [lo, j] <= pivot <= [i, hi], and what lies between is the pivot. */
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return;
    }
    if (hi > lo) qsort(a + lo, (size_t)(hi - lo + 1), sizeof *a, by_id);
}

/* The ids above after_id of the held rows of a shard, in no order (*ids
 * malloc'd). The caller holds evict_lock. */
static int held_ids(dt_table *t, int shard, int num_shards, int64_t after_id, int64_t **ids_out,
                    int64_t *n_out, dt_err *err) {
    int64_t *ids = NULL, n = 0, cap = 0;
    int rc = 0;
    for (int si = 0; si < t->nstripes && rc == 0; si++) {
        stripe *s = &t->stripes[si];
        pthread_mutex_lock(&s->mu);
        for (int64_t i = 0; i < s->cap && rc == 0; i++) {
            const int64_t id = s->index[i].id;
            if (id == EMPTY || id <= after_id ||
                (num_shards > 1 && dt_table_shard_of(id, num_shards) != shard))
                continue;
            if (n == cap) {
                const int64_t grow = cap ? cap * 2 : 1024;
                int64_t *bigger = dt_realloc(ids, (size_t)grow * sizeof *ids);
                if (!bigger) {
                    rc = dt_err_set(err, DT_ENOMEM, "table %s: export: no memory for %lld ids",
                                    t->cfg.name, (long long)grow);
                    break;
                }
                ids = bigger;
                cap = grow;
            }
            ids[n++] = id;
        }
        pthread_mutex_unlock(&s->mu);
    }
    if (rc < 0) {
        free(ids);
        return rc;
    }
    *ids_out = ids;
    *n_out = n;
    return 0;
}

int dt_table_export(dt_table *t, int shard, int num_shards, dt_tensors *out, dt_err *err) {
    return dt_table_export_page(t, shard, num_shards, -1, INT64_MAX, out, NULL, err);
}

int dt_table_export_page(dt_table *t, int shard, int num_shards, int64_t after_id, int64_t max_rows,
                         dt_tensors *out, int *more, dt_err *err) {
    memset(out, 0, sizeof *out);
    if (more) *more = 0;
    int rc = check_shard(t, shard, num_shards, err);
    if (rc < 0) return rc;
    if (max_rows < 1)
        return dt_err_set(err, DT_EINVAL, "table %s: export: max_rows %lld < 1", t->cfg.name,
                          (long long)max_rows);
    const dt_table_config *cfg = &t->cfg;
    int64_t *ids = NULL, n = 0;
    dt_table_batch b;
    memset(&b, 0, sizeof b);
    pthread_rwlock_rdlock(&t->evict_lock);
    if ((rc = held_ids(t, shard, num_shards, after_id, &ids, &n, err)) < 0 || n == 0) goto done;
    if (n > max_rows) {
        smallest_first(ids, n, max_rows);
        n = max_rows;
        if (more) *more = 1;
    }
    if (n > 1) qsort(ids, (size_t)n, sizeof *ids, by_id);
    dt_tensor specs[2 + DT_OPTIM_MAX_SLOTS];
    memset(specs, 0, sizeof specs);
    tensor_name(t, "ids", specs[0].name);
    specs[0].dtype = DT_DTYPE_I64;
    specs[0].ndim = 1;
    specs[0].shape[0] = n;
    for (int i = 1; i < 2 + cfg->num_slots; i++) {
        tensor_name(t, i == 1 ? "values" : cfg->slot_names[i - 2], specs[i].name);
        specs[i].dtype = DT_DTYPE_F32;
        specs[i].ndim = 2;
        specs[i].shape[0] = n;
        specs[i].shape[1] = cfg->dim;
    }
    if ((rc = dt_tensors_init(out, specs, 2 + cfg->num_slots, err)) < 0) goto done;
    memcpy(out->items[0].data, ids, (size_t)n * sizeof *ids);
    if ((rc = dt_table_plan(t, ids, n, &b, err)) < 0) goto done;
    float *slots[DT_OPTIM_MAX_SLOTS] = {NULL};
    for (int j = 0; j < cfg->num_slots; j++)
        slots[j] = out->items[2 + j].data;
    read_locked(t, &b, out->items[1].data, slots);
done:
    pthread_rwlock_unlock(&t->evict_lock);
    if (rc < 0) dt_tensors_deinit(out);
    dt_table_batch_deinit(&b);
    free(ids);
    return rc;
}

/* The tensor of ts called "<name>/<what>", checked to be dtype (n, D) (or
 * (n) for ids, n taken from it); NULL when absent. */
static int find_part(const dt_table *t, const dt_tensors *ts, const char *what, int dtype,
                     int64_t n, const dt_tensor **out, dt_err *err) {
    char name[DT_TENSOR_NAME_MAX];
    tensor_name(t, what, name);
    *out = dt_tensors_find(ts, name);
    if (!*out) return 0;
    const dt_tensor *x = *out;
    int is_ids = dtype == DT_DTYPE_I64;
    int ok = x->dtype == dtype && x->ndim == (is_ids ? 1 : 2) &&
             (is_ids || (x->shape[0] == n && x->shape[1] == t->cfg.dim));
    if (ok) return 0;
    const char *got = dt_dtype_name(x->dtype) ? dt_dtype_name(x->dtype) : "?";
    if (is_ids)
        return dt_err_set(err, DT_ECORRUPT,
                          "table %s: tensor %s must be I64 (n) (got %s with %d dimensions)",
                          t->cfg.name, name, got, x->ndim);
    /* Values or a slot: one row of dim per id, so a count that differs
     * from the ids' says which of the two was cut short. */
    if (x->ndim == 2)
        return dt_err_set(err, DT_ECORRUPT,
                          "table %s: tensor %s is %s (%lld, %lld), but %s/ids has %lld ids of "
                          "dim %d: it must be F32 (%lld, %d)",
                          t->cfg.name, name, got, (long long)x->shape[0], (long long)x->shape[1],
                          t->cfg.name, (long long)n, t->cfg.dim, (long long)n, t->cfg.dim);
    return dt_err_set(err, DT_ECORRUPT,
                      "table %s: tensor %s must be F32 (n, dim) (got %s with %d dimensions)",
                      t->cfg.name, name, got, x->ndim);
}

static int check_finite(const dt_table *t, const dt_tensor *x, dt_err *err) {
    const float *v = x->data;
    const int64_t count = dt_tensor_numel(x);
    for (int64_t i = 0; i < count; i++)
        if (!isfinite(v[i]))
            return dt_err_set(err, DT_ECORRUPT, "table %s: %s[%lld] is %g, not a finite number",
                              t->cfg.name, x->name, (long long)(i / t->cfg.dim), (double)v[i]);
    return 0;
}

int dt_table_import(dt_table *t, const dt_tensors *ts, int shard, int num_shards, int64_t step,
                    int64_t *imported, dt_err *err) {
    if (imported) *imported = 0;
    int rc = check_shard(t, shard, num_shards, err);
    if (rc == 0) rc = check_step(t, step, err);
    if (rc < 0) return rc;
    const dt_table_config *cfg = &t->cfg;
    const dt_tensor *ids_t = NULL, *values_t = NULL, *slot_t[DT_OPTIM_MAX_SLOTS] = {NULL};
    if ((rc = find_part(t, ts, "ids", DT_DTYPE_I64, 0, &ids_t, err)) < 0) return rc;
    const int64_t n = ids_t ? ids_t->shape[0] : 0;
    if ((rc = find_part(t, ts, "values", DT_DTYPE_F32, n, &values_t, err)) < 0) return rc;
    if (!ids_t != !values_t)
        return dt_err_set(err, DT_ECORRUPT, "table %s: the checkpoint has %s/%s but no %s/%s",
                          cfg->name, cfg->name, ids_t ? "ids" : "values", cfg->name,
                          ids_t ? "values" : "ids");
    if (!ids_t) return 0;
    for (int j = 0; j < cfg->num_slots; j++)
        if ((rc = find_part(t, ts, cfg->slot_names[j], DT_DTYPE_F32, n, &slot_t[j], err)) < 0)
            return rc;
    const int64_t *ids = ids_t->data;
    if ((rc = check_count(t, n, DT_ECORRUPT, err)) < 0 ||
        (rc = check_ids(t, ids, n, DT_ECORRUPT, ids_t->name, err)) < 0 ||
        (rc = check_finite(t, values_t, err)) < 0)
        return rc;
    for (int j = 0; j < cfg->num_slots; j++)
        if (slot_t[j] && (rc = check_finite(t, slot_t[j], err)) < 0) return rc;

    /* The shard's rows: all of them, or a copy of those placed on it. */
    const size_t D = (size_t)cfg->dim;
    const float *values = values_t->data;
    const float *slots[DT_OPTIM_MAX_SLOTS] = {NULL};
    for (int j = 0; j < cfg->num_slots; j++)
        slots[j] = slot_t[j] ? slot_t[j]->data : NULL;
    int64_t *sel_ids = NULL, m = n;
    float *sel = NULL;
    dt_table_batch b;
    memset(&b, 0, sizeof b);
    if (num_shards > 1) {
        m = 0;
        for (int64_t k = 0; k < n; k++)
            m += dt_table_shard_of(ids[k], num_shards) == shard;
        /* m <= 2^38 rows of (1 + S) D floats within 2^40 bytes each: fits. */
        sel_ids = dt_malloc((m ? (size_t)m : 1) * sizeof *sel_ids);
        sel = dt_malloc((m ? (size_t)m : 1) * D * (size_t)(1 + cfg->num_slots) * sizeof *sel);
        if (!sel_ids || !sel) {
            rc = dt_err_set(err, DT_ENOMEM, "table %s: import: no memory for %lld rows", cfg->name,
                            (long long)m);
            goto done;
        }
        float *sel_values = sel, *sel_slots[DT_OPTIM_MAX_SLOTS] = {NULL};
        for (int j = 0; j < cfg->num_slots; j++)
            sel_slots[j] = slots[j] ? sel + (size_t)(j + 1) * (size_t)m * D : NULL;
        int64_t i = 0;
        for (int64_t k = 0; k < n; k++) {
            if (dt_table_shard_of(ids[k], num_shards) != shard) continue;
            sel_ids[i] = ids[k];
            memcpy(sel_values + (size_t)i * D, values + (size_t)k * D, D * sizeof *sel);
            for (int j = 0; j < cfg->num_slots; j++)
                if (sel_slots[j])
                    memcpy(sel_slots[j] + (size_t)i * D, slots[j] + (size_t)k * D, D * sizeof *sel);
            i++;
        }
        ids = sel_ids;
        values = sel_values;
        for (int j = 0; j < cfg->num_slots; j++)
            slots[j] = sel_slots[j];
    }
    if ((rc = dt_table_plan(t, ids, m, &b, err)) < 0) goto done;
    if ((rc = dt_table_write(t, &b, values, slots, step, err)) < 0) goto done;
    if (imported) *imported = m;
done:
    dt_table_batch_deinit(&b);
    free(sel_ids);
    free(sel);
    return rc;
}
