/*
 * tensor: spec checking and slab allocation. Pure data, no threads.
 */
#include "tensor.h"

#include "alloc.h"
#include "text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLAB_ALIGN 64

size_t dt_dtype_size(int dtype) {
    switch (dtype) {
    case DT_DTYPE_F32: return 4;
    case DT_DTYPE_F64: return 8;
    case DT_DTYPE_I32: return 4;
    case DT_DTYPE_I64: return 8;
    default: return 0;
    }
}

const char *dt_dtype_name(int dtype) {
    switch (dtype) {
    case DT_DTYPE_F32: return "F32";
    case DT_DTYPE_F64: return "F64";
    case DT_DTYPE_I32: return "I32";
    case DT_DTYPE_I64: return "I64";
    default: return NULL;
    }
}

int dt_dtype_from_name(const char *name) {
    static const int all[] = {DT_DTYPE_F32, DT_DTYPE_F64, DT_DTYPE_I32, DT_DTYPE_I64};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(name, dt_dtype_name(all[i])) == 0) return all[i];
    return DT_DTYPE_INVALID;
}

int64_t dt_tensor_numel(const dt_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

int dt_tensor_same_layout(const dt_tensor *a, const dt_tensor *b) {
    return a->dtype == b->dtype && a->ndim == b->ndim &&
           memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

void dt_tensor_layout_text(const dt_tensor *t, char *buf, size_t cap) {
    const char *dtype = dt_dtype_name(t->dtype);
    size_t off = 0;
    int n = snprintf(buf, cap, "%s (", dtype ? dtype : "?");
    off = n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
    for (int d = 0; d < t->ndim && off < cap - 1; d++) {
        n = snprintf(buf + off, cap - off, d ? ", %lld" : "%lld", (long long)t->shape[d]);
        off = n < 0 ? off : (size_t)n < cap - off ? off + (size_t)n : cap - 1;
    }
    if (off < cap - 1) snprintf(buf + off, cap - off, ")");
}

int dt_tensor_check_spec(dt_tensor *spec, dt_err *err) {
    size_t len = strnlen(spec->name, DT_TENSOR_NAME_MAX);
    if (len == DT_TENSOR_NAME_MAX)
        return dt_err_set(err, DT_EINVAL, "tensor: name longer than %d bytes",
                          DT_TENSOR_NAME_MAX - 1);
    int rc = dt_text_check_name(spec->name, len, DT_TENSOR_NAME_MAX - 1, "tensor", err);
    if (rc < 0) return rc;
    return dt_tensor_check_layout(spec, err);
}

int dt_tensor_check_layout(dt_tensor *spec, dt_err *err) {
    size_t esize = dt_dtype_size(spec->dtype);
    if (esize == 0)
        return dt_err_set(err, DT_EINVAL, "tensor %s: unknown dtype %d", spec->name, spec->dtype);
    if (spec->ndim < 0 || spec->ndim > DT_TENSOR_MAX_DIMS)
        return dt_err_set(err, DT_EINVAL, "tensor %s: %d dimensions (at most %d)", spec->name,
                          spec->ndim, DT_TENSOR_MAX_DIMS);
    /* Bound the total at 2^40 bytes, far above any model dtrain serves.
     * Each factor is compared before it is multiplied in, so no product
     * can wrap: a wrapped size once let [2^31, 2^31] pass as 0 bytes. */
    const int64_t limit = (int64_t)1 << 40;
    int64_t bytes = (int64_t)esize;
    for (int i = 0; i < spec->ndim; i++) {
        if (spec->shape[i] < 1)
            return dt_err_set(err, DT_EINVAL, "tensor %s: dimension %d is %lld", spec->name, i,
                              (long long)spec->shape[i]);
        if (spec->shape[i] > limit / bytes)
            return dt_err_set(err, DT_EINVAL, "tensor %s: larger than 2^40 bytes", spec->name);
        bytes *= spec->shape[i];
    }
    spec->nbytes = (size_t)bytes;
    return 0;
}

static size_t round_up(size_t n) {
    return (n + SLAB_ALIGN - 1) / SLAB_ALIGN * SLAB_ALIGN;
}

int dt_tensors_init(dt_tensors *ts, const dt_tensor *specs, int count, dt_err *err) {
    memset(ts, 0, sizeof *ts);
    if (count < 0) return dt_err_set(err, DT_EINVAL, "tensors: negative count");
    dt_tensor *items = dt_calloc(count ? (size_t)count : 1, sizeof *items);
    if (!items) return dt_err_set(err, DT_ENOMEM, "tensors: out of memory");
    int rc = 0;
    size_t total = 0;
    for (int i = 0; i < count; i++) {
        items[i] = specs[i];
        items[i].data = NULL;
        if ((rc = dt_tensor_check_spec(&items[i], err)) < 0) goto fail;
        for (int j = 0; j < i; j++)
            if (strcmp(items[j].name, items[i].name) == 0) {
                rc = dt_err_set(err, DT_EINVAL, "tensors: duplicate name %s", items[i].name);
                goto fail;
            }
        total += round_up(items[i].nbytes);
    }
    void *slab = dt_aligned_alloc(SLAB_ALIGN, total ? total : SLAB_ALIGN);
    if (!slab) {
        rc = dt_err_set(err, DT_ENOMEM, "tensors: cannot allocate %zu bytes", total);
        goto fail;
    }
    memset(slab, 0, total);
    size_t off = 0;
    for (int i = 0; i < count; i++) {
        items[i].data = (char *)slab + off;
        off += round_up(items[i].nbytes);
    }
    ts->count = count;
    ts->items = items;
    ts->slab = slab;
    ts->slab_bytes = total;
    return 0;
fail:
    free(items);
    return rc;
}

void dt_tensors_deinit(dt_tensors *ts) {
    if (!ts) return;
    free(ts->items);
    free(ts->slab);
    memset(ts, 0, sizeof *ts);
}

dt_tensor *dt_tensors_find(const dt_tensors *ts, const char *name) {
    for (int i = 0; i < ts->count; i++)
        if (strcmp(ts->items[i].name, name) == 0) return &ts->items[i];
    return NULL;
}
