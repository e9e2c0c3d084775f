/*
 * pool: persistent helper threads for the parts of one job at a time.
 *
 * Invariants (under mu): a job is running while `running` is set; its parts
 * [0, next) have been taken, [0, finished) counted done (in any order);
 * next <= parts and finished <= next. A helper sleeps on `work` while no
 * part is left to take; the caller sleeps on `done` once it finds none left
 * and some taken part is still being done.
 *
 * Threading: see pool.h. fn and ctx are read under mu together with the
 * part they go with, so a helper that wakes late never runs a part of a
 * job that has ended.
 */
#include "pool.h"

#include <pthread.h>
#include <stdlib.h>

#include "alloc.h"

struct dt_pool {
    pthread_mutex_t mu;
    pthread_cond_t work; /* a job was posted, or stop */
    pthread_cond_t done; /* the last taken part is done */
    int running, stop;
    dt_pool_fn fn;
    void *ctx;
    int parts, next, finished;
    int helpers;
    pthread_t *threads; /* (helpers) */
};

static void *helper_main(void *arg) {
    dt_pool *pool = arg;
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (!pool->stop && pool->next >= pool->parts)
            pthread_cond_wait(&pool->work, &pool->mu);
        if (pool->stop) break;
        int part = pool->next++;
        dt_pool_fn fn = pool->fn;
        void *ctx = pool->ctx;
        pthread_mutex_unlock(&pool->mu);
        fn(ctx, part);
        pthread_mutex_lock(&pool->mu);
        if (++pool->finished == pool->parts) pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

/* Stops the first `started` helpers and frees the pool. */
static void pool_destroy(dt_pool *pool, int started) {
    pthread_mutex_lock(&pool->mu);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < started; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->work);
    pthread_mutex_destroy(&pool->mu);
    free(pool->threads);
    free(pool);
}

int dt_pool_new(int helpers, dt_pool **out, dt_err *err) {
    DT_ASSERT(helpers >= 0);
    *out = NULL;
    dt_pool *pool = dt_calloc(1, sizeof *pool);
    if (!pool) return dt_err_set(err, DT_ENOMEM, "pool: out of memory");
    pool->threads = dt_calloc(helpers > 0 ? (size_t)helpers : 1, sizeof *pool->threads);
    if (!pool->threads) {
        free(pool);
        return dt_err_set(err, DT_ENOMEM, "pool: out of memory");
    }
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->work, NULL);
    pthread_cond_init(&pool->done, NULL);
    pool->helpers = helpers;
    for (int i = 0; i < helpers; i++)
        if (pthread_create(&pool->threads[i], NULL, helper_main, pool) != 0) {
            pool_destroy(pool, i);
            return dt_err_set(err, DT_EINTERNAL, "pool: cannot start helper thread %d of %d", i + 1,
                              helpers);
        }
    *out = pool;
    return 0;
}

void dt_pool_free(dt_pool *pool) {
    if (!pool) return;
    DT_ASSERT(!pool->running);
    pool_destroy(pool, pool->helpers);
}

int dt_pool_helpers(const dt_pool *pool) {
    return pool ? pool->helpers : 0;
}

int dt_pool_run(dt_pool *pool, dt_pool_fn fn, void *ctx, int parts) {
    if (!pool) return 0;
    DT_ASSERT(parts >= 0);
    pthread_mutex_lock(&pool->mu);
    if (pool->running) {
        pthread_mutex_unlock(&pool->mu);
        return 0;
    }
    pool->running = 1;
    pool->fn = fn;
    pool->ctx = ctx;
    pool->parts = parts;
    pool->next = 0;
    pool->finished = 0;
    if (parts > 1) pthread_cond_broadcast(&pool->work);
    /* The caller takes parts too, as many as the helpers leave it: with
     * their cores busy elsewhere it does them all and waits for nobody. */
    while (pool->next < pool->parts) {
        int part = pool->next++;
        pthread_mutex_unlock(&pool->mu);
        fn(ctx, part);
        pthread_mutex_lock(&pool->mu);
        pool->finished++;
    }
    while (pool->finished < pool->parts)
        pthread_cond_wait(&pool->done, &pool->mu);
    pool->running = 0;
    pool->parts = 0;
    pool->next = 0;
    pthread_mutex_unlock(&pool->mu);
    return 1;
}
