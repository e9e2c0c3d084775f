/*
 * alloc: the C library's allocators behind a countdown a test can arm.
 *
 * Invariant: with the countdown unarmed (fail_at == 0) every function is its
 * libc namesake. Armed, allocation number fail_at (counted from the arming)
 * fails, and with persistent so do all after it. The counters are atomics so
 * that threads the code under test did not start (a gRPC poller, a ps
 * handler) cannot tear them; the numbering is only deterministic for the
 * single-threaded calls the tests arm it around.
 */
#include "alloc.h"

#include <malloc.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_long fail_at;    /* 0: unarmed */
static atomic_int persistent_; /* fail every allocation from fail_at on */
static atomic_long count;      /* allocations since the arming */
static atomic_long failed;     /* of which failed */

/* 1 when this allocation is to fail. */
static int inject(void) {
    long at = atomic_load_explicit(&fail_at, memory_order_relaxed);
    if (at == 0) return 0;
    long n = atomic_fetch_add_explicit(&count, 1, memory_order_relaxed) + 1;
    int fail = n == at || (n > at && atomic_load_explicit(&persistent_, memory_order_relaxed));
    if (fail) atomic_fetch_add_explicit(&failed, 1, memory_order_relaxed);
    return fail;
}

void *dt_malloc(size_t n) {
    return inject() ? NULL : malloc(n);
}

void *dt_calloc(size_t count_, size_t size) {
    return inject() ? NULL : calloc(count_, size);
}

void *dt_realloc(void *p, size_t n) {
    return inject() ? NULL : realloc(p, n);
}

char *dt_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *copy = dt_malloc(n);
    if (copy) memcpy(copy, s, n);
    return copy;
}

void *dt_aligned_alloc(size_t align, size_t n) {
    if (inject()) return NULL;
    size_t rounded = n + (align - 1);
    if (rounded < n) return NULL; /* n near SIZE_MAX: no such block */
    return aligned_alloc(align, rounded & ~(align - 1));
}

void dt_alloc_fail_at(long n, int persistent) {
    atomic_store(&fail_at, 0);
    atomic_store(&count, 0);
    atomic_store(&failed, 0);
    atomic_store(&persistent_, persistent != 0);
    atomic_store(&fail_at, n > 0 ? n : 0);
}

long dt_alloc_count(void) {
    return atomic_load(&count);
}

long dt_alloc_failed(void) {
    return atomic_load(&failed);
}

/* The binary's allocator. No buffer as large as the model comes and goes
 * per step any more (messages are read in gRPC's slices and tensors sent
 * from their own buffers), so large blocks are better mapped: a fixed
 * 1 MiB threshold maps every one and gives it back when freed. glibc's default threshold grows
 * with the blocks freed, up to 32 MB, after which such blocks stay on the
 * heap of the thread that freed them (a ps has one per poller), and a
 * checkpoint's pulls left hundreds of MB resident; the 1 GiB thresholds
 * this replaced kept every size ever seen. 8 MiB of free heap top is kept
 * for the small blocks gRPC's reads come and go in, in one arena: with one
 * per thread each kept its own (a ps: 20-40 MB free in all), for no speed
 * measured (bench/notes/2026-12-05-near-the-wire.md). */
static atomic_int tuned; /* dt_alloc_tune_process ran */

void dt_alloc_tune_process(void) {
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    mallopt(M_TRIM_THRESHOLD, 8 << 20);
    mallopt(M_ARENA_MAX, 1);
    atomic_store(&tuned, 1);
}

void dt_alloc_keep_for_messages(size_t largest_message) {
    if (!atomic_load(&tuned)) return;
    const size_t floor = (size_t)8 << 20, cap = (size_t)1 << 30;
    size_t keep = largest_message < (cap - floor) / 2 ? 2 * largest_message + floor : cap;
    mallopt(M_TRIM_THRESHOLD, (int)keep);
}
