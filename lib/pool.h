/*
 * pool: a few persistent threads that help one caller at a time with the
 * parts of one job (the ranges of a large tensor's check or update).
 *
 * dt_pool_run hands out parts 0..parts-1 to whoever asks first: the caller
 * takes parts itself while any are left, and the helpers take the rest when
 * they wake. A helper that is not scheduled (its core busy with other work)
 * costs nothing but the parts it did not take, which the caller does; the
 * caller only waits for parts a helper has started. So a job split in more
 * parts than threads finishes in about its share of the time when a core
 * is free, and in about the one-thread time when none is.
 *
 * Threads: one job at a time; a second caller while a job runs is told so
 * (dt_pool_run returns 0) and does its work itself. fn runs on the caller's
 * thread and on helpers at once, each call with its own part.
 */
#ifndef DT_POOL_H
#define DT_POOL_H

#include "err.h"

typedef struct dt_pool dt_pool;

/* Does part `part` of the job ctx describes. */
typedef void (*dt_pool_fn)(void *ctx, int part);

/* Starts `helpers` threads (>= 0; 0 makes a pool whose caller does every
 * part). *out owns them until dt_pool_free. DT_ENOMEM or DT_EINTERNAL (a
 * thread that could not start) leave nothing behind. */
int dt_pool_new(int helpers, dt_pool **out, dt_err *err) DT_WARN_UNUSED;

/* Stops and joins the helpers (none may be in a job); NULL is a no-op. */
void dt_pool_free(dt_pool *pool);

/* Helpers of the pool (0 for NULL). */
int dt_pool_helpers(const dt_pool *pool);

/* Runs fn(ctx, p) for every p in [0, parts), on the caller's thread and the
 * helpers', and returns 1 once every part is done. Returns 0 without
 * running anything when pool is NULL or another job is running: the caller
 * then does the work itself. */
int dt_pool_run(dt_pool *pool, dt_pool_fn fn, void *ctx, int parts);

#endif
