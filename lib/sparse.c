/*
 * sparse: CSR batches, their distinct ids, and in-memory sets (sparse.h
 * has the layout).
 *
 * dt_sparse_index_build sorts (id << 24 | entry) as one 64-bit key per
 * entry, so one sort gives both the distinct ids in order and where each
 * entry's id went; ids are below 2^40 and a batch has fewer than 2^24
 * entries, so the key is exact.
 *
 * A feed shuffles a set's rows with lib/data.c's draws (dt_data_shuffle_*)
 * into a uint32_t order, half of a dense data set's int64_t one: a set's
 * rows are small (a Criteo row is about 376 bytes, a libsvm row 12 bytes
 * and 12 an entry), so the order is a visible share of them.
 *
 * Threading: none; see sparse.h.
 */
#include "sparse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "data.h"

#define ENTRY_BITS 24
#define MAX_ID ((int64_t)1 << 40)

int64_t dt_sparse_nnz(const dt_sparse_batch *b) {
    return b->offsets[b->rows] - b->offsets[0];
}

int dt_sparse_check(const dt_sparse_batch *b, dt_err *err) {
    if (b->rows < 1 || !b->offsets)
        return dt_err_set(err, DT_EINVAL, "sparse: empty batch (%d rows)", b->rows);
    if (b->dense_cols < 0 || (b->dense_cols > 0 && !b->dense))
        return dt_err_set(err, DT_EINVAL, "sparse: %d dense features without their values",
                          b->dense_cols);
    if (b->num_ids < 1 || b->num_fields < 0 || (b->fields && b->num_fields < 1))
        return dt_err_set(err, DT_EINVAL, "sparse: bad id count %lld or field count %d",
                          (long long)b->num_ids, b->num_fields);
    const int64_t base = b->offsets[0];
    for (int i = 0; i < b->rows; i++) {
        if (b->offsets[i + 1] < b->offsets[i])
            return dt_err_set(err, DT_EINVAL, "sparse: row %d: offsets go back (%lld then %lld)", i,
                              (long long)b->offsets[i], (long long)b->offsets[i + 1]);
        for (int64_t e = b->offsets[i] - base; e < b->offsets[i + 1] - base; e++) {
            if (b->ids[e] < 0 || b->ids[e] >= b->num_ids)
                return dt_err_set(err, DT_EINVAL,
                                  "sparse: row %d entry %lld: id %lld is out of range [0, %lld)", i,
                                  (long long)e, (long long)b->ids[e], (long long)b->num_ids);
            if (b->fields && (b->fields[e] < 0 || b->fields[e] >= b->num_fields))
                return dt_err_set(err, DT_EINVAL,
                                  "sparse: row %d entry %lld: field %d is out of range [0, %d)", i,
                                  (long long)e, (int)b->fields[e], b->num_fields);
            if (b->values && !isfinite(b->values[e]))
                return dt_err_set(err, DT_EINVAL, "sparse: row %d entry %lld: value %g", i,
                                  (long long)e, (double)b->values[e]);
        }
        for (int j = 0; j < b->dense_cols; j++)
            if (!isfinite(b->dense[(size_t)i * (size_t)b->dense_cols + (size_t)j]))
                return dt_err_set(err, DT_EINVAL, "sparse: row %d: dense feature %d is not finite",
                                  i, j);
    }
    return 0;
}

static int by_key(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int dt_sparse_index_build(dt_sparse_index *ix, const dt_sparse_batch *b, dt_err *err) {
    ix->n = ix->nnz = 0;
    const int64_t nnz = dt_sparse_nnz(b);
    if (nnz < 0 || nnz >= ((int64_t)1 << ENTRY_BITS))
        return dt_err_set(err, DT_EINVAL, "sparse: %lld entries in one batch (fewer than 2^%d)",
                          (long long)nnz, ENTRY_BITS);
    if (nnz > ix->cap) {
        int64_t *ids = dt_realloc(ix->ids, (size_t)nnz * sizeof *ids);
        if (ids) ix->ids = ids;
        int64_t *pos = dt_realloc(ix->pos, (size_t)nnz * sizeof *pos);
        if (pos) ix->pos = pos;
        uint64_t *keys = dt_realloc(ix->keys, (size_t)nnz * sizeof *keys);
        if (keys) ix->keys = keys;
        if (!ids || !pos || !keys)
            return dt_err_set(err, DT_ENOMEM, "sparse: no memory to index %lld entries",
                              (long long)nnz);
        ix->cap = nnz;
    }
    for (int64_t e = 0; e < nnz; e++) {
        const int64_t id = b->ids[e];
        if (id < 0 || id >= MAX_ID)
            return dt_err_set(err, DT_EINVAL, "sparse: entry %lld: id %lld is out of range",
                              (long long)e, (long long)id);
        ix->keys[e] = (uint64_t)id << ENTRY_BITS | (uint64_t)e;
    }
    if (nnz > 1) qsort(ix->keys, (size_t)nnz, sizeof *ix->keys, by_key);
    int64_t n = 0;
    for (int64_t k = 0; k < nnz; k++) {
        const int64_t id = (int64_t)(ix->keys[k] >> ENTRY_BITS);
        if (n == 0 || ix->ids[n - 1] != id) ix->ids[n++] = id;
        ix->pos[ix->keys[k] & ((1u << ENTRY_BITS) - 1)] = n - 1;
    }
    ix->n = n;
    ix->nnz = nnz;
    return 0;
}

void dt_sparse_index_deinit(dt_sparse_index *ix) {
    if (!ix) return;
    free(ix->ids);
    free(ix->pos);
    free(ix->keys);
    memset(ix, 0, sizeof *ix);
}

void dt_sparse_set_deinit(dt_sparse_set *s) {
    if (!s) return;
    free(s->dense);
    free(s->y);
    free(s->offsets);
    free(s->ids);
    free(s->values);
    free(s->fields);
    memset(s, 0, sizeof *s);
}

/* The batch fields that do not depend on which rows it holds. */
static void batch_shape(const dt_sparse_set *s, int count, dt_sparse_batch *out) {
    memset(out, 0, sizeof *out);
    out->rows = count;
    out->dense_cols = s->dense_cols;
    out->num_ids = s->num_ids;
    out->num_fields = s->num_fields;
}

void dt_sparse_set_slice(const dt_sparse_set *s, int64_t first, int count, dt_sparse_batch *out) {
    DT_ASSERT(first >= 0 && count >= 1 && first + count <= s->rows);
    batch_shape(s, count, out);
    const int64_t e0 = s->offsets[first];
    out->dense = s->dense ? s->dense + (size_t)first * (size_t)s->dense_cols : NULL;
    out->y = s->y ? s->y + first : NULL;
    out->offsets = s->offsets + first;
    out->ids = s->ids ? s->ids + e0 : NULL; /* a set without entries may have no array */
    out->values = s->values ? s->values + e0 : NULL;
    out->fields = s->fields ? s->fields + e0 : NULL;
}

/* p = dt_realloc(p, n * size), keeping p when that fails; 0 or -1. */
static int resize(void **p, size_t n, size_t size) {
    if (n > SIZE_MAX / size) return -1;
    void *q = dt_realloc(*p, n > 0 ? n * size : 1);
    if (!q) return -1;
    *p = q;
    return 0;
}

int dt_sparse_gather(const dt_sparse_set *s, const int64_t *rows, int count, dt_sparse_buffer *buf,
                     dt_sparse_batch *out, dt_err *err) {
    memset(out, 0, sizeof *out);
    if (count < 1) return dt_err_set(err, DT_EINVAL, "sparse: gather of %d rows", count);
    int64_t entries = 0;
    for (int i = 0; i < count; i++) {
        if (rows[i] < 0 || rows[i] >= s->rows)
            return dt_err_set(err, DT_EINVAL, "sparse: gather: row %lld of %lld",
                              (long long)rows[i], (long long)s->rows);
        entries += s->offsets[rows[i] + 1] - s->offsets[rows[i]];
    }
    int ok = 1;
    if (count > buf->cap_rows) {
        const size_t n = (size_t)count;
        ok = resize((void **)&buf->offsets, n + 1, sizeof *buf->offsets) == 0 &&
             resize((void **)&buf->y, n, sizeof *buf->y) == 0 &&
             resize((void **)&buf->dense, n * (size_t)(s->dense_cols + 1), sizeof *buf->dense) == 0;
        if (ok) buf->cap_rows = count;
    }
    if (ok && entries > buf->cap_entries) {
        /* At least doubled: batches of one size vary in entries, and each
         * new largest one would otherwise cost a step an allocation. */
        const size_t n = (size_t)(entries > 2 * buf->cap_entries ? entries : 2 * buf->cap_entries);
        ok = resize((void **)&buf->ids, n, sizeof *buf->ids) == 0 &&
             resize((void **)&buf->values, n, sizeof *buf->values) == 0 &&
             resize((void **)&buf->fields, n, sizeof *buf->fields) == 0;
        if (ok) buf->cap_entries = (int64_t)n;
    }
    if (!ok)
        return dt_err_set(err, DT_ENOMEM, "sparse: no memory for a batch of %d rows, %lld entries",
                          count, (long long)entries);
    const size_t Dd = (size_t)s->dense_cols;
    int64_t e = 0;
    buf->offsets[0] = 0;
    for (int i = 0; i < count; i++) {
        const int64_t r = rows[i], from = s->offsets[r], n = s->offsets[r + 1] - from;
        if (n > 0) { /* a set without entries may have no arrays for them */
            memcpy(buf->ids + e, s->ids + from, (size_t)n * sizeof *buf->ids);
            if (s->values)
                memcpy(buf->values + e, s->values + from, (size_t)n * sizeof *buf->values);
            if (s->fields)
                memcpy(buf->fields + e, s->fields + from, (size_t)n * sizeof *buf->fields);
        }
        e += n;
        buf->offsets[i + 1] = e;
        if (Dd) memcpy(buf->dense + (size_t)i * Dd, s->dense + (size_t)r * Dd, Dd * sizeof(float));
        if (s->y) buf->y[i] = s->y[r];
    }
    batch_shape(s, count, out);
    out->dense = Dd ? buf->dense : NULL;
    out->y = s->y ? buf->y : NULL;
    out->offsets = buf->offsets;
    out->ids = buf->ids;
    out->values = s->values ? buf->values : NULL;
    out->fields = s->fields ? buf->fields : NULL;
    return 0;
}

void dt_sparse_buffer_deinit(dt_sparse_buffer *buf) {
    if (!buf) return;
    free(buf->dense);
    free(buf->y);
    free(buf->values);
    free(buf->offsets);
    free(buf->ids);
    free(buf->fields);
    memset(buf, 0, sizeof *buf);
}

/* ---- shuffled batches ------------------------------------------------------ */

/* Resets the order to row order and shuffles it for f->epoch by the rule of
 * lib/data.h, so the draws are those of a dense data set of N examples. */
static void feed_shuffle(dt_sparse_feed *f) {
    const int64_t n = f->set->rows;
    for (int64_t k = 0; k < n; k++)
        f->order[k] = (uint32_t)k;
    uint64_t state = dt_data_shuffle_start(f->seed, f->shard, f->epoch);
    for (int64_t k = n - 1; k > 0; k--) {
        const int64_t r = dt_data_shuffle_draw(&state, k);
        const uint32_t moved = f->order[k];
        f->order[k] = f->order[r];
        f->order[r] = moved;
    }
}

int dt_sparse_feed_init(dt_sparse_feed *f, const dt_sparse_set *s, uint64_t seed, int shard,
                        dt_err *err) {
    memset(f, 0, sizeof *f);
    if (s->rows < 1 || s->rows > (int64_t)UINT32_MAX)
        return dt_err_set(err, DT_EINVAL,
                          "sparse: shuffling a shard of %lld rows: it must have 1 to 2^32 - 1 "
                          "(more workers make smaller shards)",
                          (long long)s->rows);
    f->order = dt_malloc((size_t)s->rows * sizeof *f->order);
    if (!f->order)
        return dt_err_set(err, DT_ENOMEM, "sparse: no memory for the order of %lld rows",
                          (long long)s->rows);
    f->set = s;
    f->seed = seed;
    f->shard = shard;
    feed_shuffle(f);
    return 0;
}

int dt_sparse_feed_next(dt_sparse_feed *f, int batch_size, dt_sparse_batch *out, dt_err *err) {
    memset(out, 0, sizeof *out);
    if (batch_size < 1)
        return dt_err_set(err, DT_EINVAL, "sparse: next: batch size must be >= 1 (got %d)",
                          batch_size);
    const int64_t left = f->set->rows - f->pos;
    const int count = left < batch_size ? (int)left : batch_size;
    if (count > f->rows_cap) {
        if (resize((void **)&f->rows, (size_t)count, sizeof *f->rows) < 0)
            return dt_err_set(err, DT_ENOMEM, "sparse: no memory for a batch of %d rows", count);
        f->rows_cap = count;
    }
    for (int i = 0; i < count; i++)
        f->rows[i] = f->order[f->pos + i];
    int rc = dt_sparse_gather(f->set, f->rows, count, &f->buf, out, err);
    if (rc < 0) return rc;
    f->pos += count;
    if (f->pos == f->set->rows) {
        f->epoch++;
        f->pos = 0;
        feed_shuffle(f);
    }
    return 0;
}

int dt_sparse_feed_seek(dt_sparse_feed *f, int batch_size, int64_t step, dt_err *err) {
    int epoch;
    int64_t pos;
    int rc = dt_data_seek_position(f->set->rows, batch_size, step, &epoch, &pos, err);
    if (rc < 0) return rc;
    if (epoch != f->epoch) {
        f->epoch = epoch;
        feed_shuffle(f);
    }
    f->pos = pos;
    return 0;
}

void dt_sparse_feed_deinit(dt_sparse_feed *f) {
    if (!f) return;
    free(f->order);
    free(f->rows);
    dt_sparse_buffer_deinit(&f->buf);
    memset(f, 0, sizeof *f);
}
