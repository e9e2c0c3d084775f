/*
 * alloc: the one door through which lib/ takes heap memory.
 *
 * dt_malloc, dt_calloc, dt_realloc, dt_strdup and dt_aligned_alloc behave as
 * the C library's functions of the same name, and what they return is
 * released with free(). lib/ calls no other allocator of its own (the
 * libraries it uses allocate for themselves: cJSON through the hooks a
 * caller may install, zlib's gz* files and gRPC never through these).
 *
 * The door exists so that a test can make any one allocation fail, as
 * SQLite's test allocator does: dt_alloc_fail_at arms a countdown, and the
 * allocation it reaches returns NULL as an exhausted heap would. An unarmed
 * door costs one relaxed atomic load per allocation.
 *
 * Threads: every function may be called from any thread. The countdown is
 * process-wide, so a test that arms it runs the code under test alone.
 */
#ifndef DT_ALLOC_H
#define DT_ALLOC_H

#include <stddef.h>

void *dt_malloc(size_t n);
void *dt_calloc(size_t count, size_t size);
void *dt_realloc(void *p, size_t n);
char *dt_strdup(const char *s);
/* align: a power of two that is a multiple of sizeof(void *); n need not be a
 * multiple of align (it is rounded up here, as C11 asks of the caller). */
void *dt_aligned_alloc(size_t align, size_t n);

/* Tunes the C library's allocator for a dtrain process (alloc.c says
 * how and why). Only the dtrain binary calls it, first thing in main: a
 * process's allocator belongs to its program, and libdtrain in someone
 * else's program (a PyTorch worker) leaves it as that program set it. */
void dt_alloc_tune_process(void);

/* In a process dt_alloc_tune_process tuned: keeps up to 2 x
 * largest_message + 8 MiB of freed heap (at most 1 GiB) before giving
 * memory back to the kernel (glibc's M_TRIM_THRESHOLD; never below its
 * 8 MiB). A process that receives messages of that size in gRPC's slices
 * again and again then reuses their pages, where with 8 MiB they were
 * returned after each message and faulted in again by the next one's
 * socket reads. Call it once the size is known; it changes the process's
 * allocator, not anything it holds. Elsewhere it does nothing: setting any
 * glibc threshold turns off its dynamic mmap threshold, and a PyTorch
 * worker then mapped, faulted in and unmapped its activations on every
 * step (a third of its CPU time in the kernel). */
void dt_alloc_keep_for_messages(size_t largest_message);

/* Test hook. Makes the nth allocation from now (n >= 1; dt_realloc and
 * dt_strdup count as one) return NULL; with persistent set, every one after it
 * as well, until the next call. n == 0 disarms. */
void dt_alloc_fail_at(long n, int persistent);
/* Allocations made since the last dt_alloc_fail_at, failed ones included. */
long dt_alloc_count(void);
/* Allocations failed since the last dt_alloc_fail_at. */
long dt_alloc_failed(void);

#endif
