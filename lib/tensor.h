/*
 * tensor: named, typed, shaped views onto slabs.
 *
 * A dt_tensors set owns one 64-byte-aligned slab; each dt_tensor in it is a
 * view (data points into the slab). Parameters, gradients and optimizer slots
 * each live in their own set, so a whole model is one allocation and one
 * contiguous range of bytes. Data is always host (little-endian) order.
 *
 * Shape letters used across dtrain: N examples, F features, H hidden units,
 * K classes.
 */
#ifndef DT_TENSOR_H
#define DT_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Numbering follows TensorFlow's DataType enum, so the wire format reads
 * naturally to TF users. */
typedef enum {
    DT_DTYPE_INVALID = 0,
    DT_DTYPE_F32 = 1,
    DT_DTYPE_F64 = 2,
    DT_DTYPE_I32 = 3,
    DT_DTYPE_I64 = 9,
} dt_dtype;

#define DT_TENSOR_MAX_DIMS 4
#define DT_TENSOR_NAME_MAX 128 /* bytes, including the NUL */

typedef struct {
    char name[DT_TENSOR_NAME_MAX]; /* e.g. "linear/weight" */
    int dtype;                     /* dt_dtype */
    int ndim;                      /* 0 (scalar) .. DT_TENSOR_MAX_DIMS */
    int64_t shape[DT_TENSOR_MAX_DIMS];
    void *data;    /* view into the owning set's slab; NULL in a spec */
    size_t nbytes; /* numel * dtype size */
} dt_tensor;

typedef struct {
    int count;
    dt_tensor *items; /* (count) owned */
    void *slab;       /* owned, 64-byte aligned, zero-filled at init */
    size_t slab_bytes;
} dt_tensors;

/* Bytes per element of dtype, or 0 for an unknown dtype. */
size_t dt_dtype_size(int dtype);
/* safetensors' dtype names: "F32", "F64", "I32", "I64"; NULL if unknown. */
const char *dt_dtype_name(int dtype);
/* Inverse of dt_dtype_name; DT_DTYPE_INVALID if unknown. */
int dt_dtype_from_name(const char *name);

/* Number of elements (1 for a scalar). */
int64_t dt_tensor_numel(const dt_tensor *t);

/* 1 when a and b have the same dtype and shape (names aside). */
int dt_tensor_same_layout(const dt_tensor *a, const dt_tensor *b);
/* "F32 (784, 10)" ("F32 ()" for a scalar) into buf, cut to cap - 1 bytes. */
void dt_tensor_layout_text(const dt_tensor *t, char *buf, size_t cap);

/* Checks a spec: a non-empty name that fits, a known dtype, 0..4 dims, each
 * dim >= 1, and a byte size that does not overflow. Sets spec->nbytes. */
int dt_tensor_check_spec(dt_tensor *spec, dt_err *err) DT_WARN_UNUSED;
/* The same without the name, for a caller that has just checked it (the
 * codec, as a tensor comes off the wire): dtype, dims and size; sets
 * spec->nbytes. */
int dt_tensor_check_layout(dt_tensor *spec, dt_err *err) DT_WARN_UNUSED;

/* Allocates a set shaped like specs (names, dtypes, shapes are copied; data
 * is ignored) with a zeroed slab. On failure ts is left empty. */
int dt_tensors_init(dt_tensors *ts, const dt_tensor *specs, int count, dt_err *err) DT_WARN_UNUSED;
/* Frees what dt_tensors_init allocated; safe on an empty or zeroed set. */
void dt_tensors_deinit(dt_tensors *ts);
/* Borrowed pointer to the tensor called name, or NULL. */
dt_tensor *dt_tensors_find(const dt_tensors *ts, const char *name);

#endif
