/*
 * pool suite: every part of a job runs exactly once and the job is over when
 * dt_pool_run returns; helpers really run parts at the same time as the
 * caller; a second job while one runs is refused, not queued; a pool
 * without helpers and no pool at all behave as the header says; a pool is
 * reused for many jobs and freed with its helpers idle.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "pool.h"
#include "suites.h"

#define MAX_PARTS 64

typedef struct {
    atomic_int runs[MAX_PARTS];
    atomic_int started; /* parts begun */
    int wait_for;       /* each part waits until this many have begun */
    dt_pool *pool;
    atomic_int nested; /* dt_pool_run's answer from inside a part */
} job;

/* Waits (10 s at most) until `want` parts have begun: returns 0 then, -1
 * on the deadline. */
static int wait_started(job *j, int want) {
    struct timespec start, now, nap = {0, 1000000L};
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (atomic_load(&j->started) < want) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec >= 10) return -1;
        nanosleep(&nap, NULL);
    }
    return 0;
}

static void count_part(void *ctx, int part) {
    job *j = ctx;
    atomic_fetch_add(&j->runs[part], 1);
    atomic_fetch_add(&j->started, 1);
    if (j->wait_for > 0 && wait_started(j, j->wait_for) < 0)
        atomic_fetch_add(&j->runs[part], 1000); /* seen as a failure below */
    if (j->pool) atomic_store(&j->nested, dt_pool_run(j->pool, count_part, j, 1) + 1);
}

static void assert_each_once(job *j, int parts) {
    for (int p = 0; p < parts; p++)
        ck_assert_msg(atomic_load(&j->runs[p]) == 1, "part %d ran %d times", p,
                      atomic_load(&j->runs[p]));
    for (int p = parts; p < MAX_PARTS; p++)
        ck_assert_int_eq(atomic_load(&j->runs[p]), 0);
}

static dt_pool *new_pool(int helpers) {
    dt_pool *pool = NULL;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_pool_new(helpers, &pool, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(dt_pool_helpers(pool), helpers);
    return pool;
}

/* A zeroed job: static, its counters too large for comfort on the stack of
 * Check's forked test. */
static job *fresh_job(void) {
    static job j;
    memset(&j, 0, sizeof j);
    return &j;
}

START_TEST(test_each_part_once) {
    dt_pool *pool = new_pool(3);
    /* Many jobs on one pool, of every size up to MAX_PARTS. */
    for (int round = 0; round < 200; round++) {
        int parts = round % (MAX_PARTS + 1);
        job *j = fresh_job();
        ck_assert_int_eq(dt_pool_run(pool, count_part, j, parts), 1);
        assert_each_once(j, parts);
    }
    dt_pool_free(pool);
}
END_TEST

/* Three parts, each waiting until all three have begun: only the caller
 * and both helpers at once can finish the job (else a part's wait runs
 * out and marks it). */
START_TEST(test_helpers_run_at_once) {
    dt_pool *pool = new_pool(2);
    job *j = fresh_job();
    j->wait_for = 3;
    ck_assert_int_eq(dt_pool_run(pool, count_part, j, 3), 1);
    assert_each_once(j, 3);
    dt_pool_free(pool);
}
END_TEST

/* A job started while one runs (here: from inside one of its parts) is
 * refused, and the running job still completes. */
START_TEST(test_busy_refused) {
    dt_pool *pool = new_pool(1);
    job *j = fresh_job();
    j->pool = pool;
    ck_assert_int_eq(dt_pool_run(pool, count_part, j, 4), 1);
    assert_each_once(j, 4);
    ck_assert_int_eq(atomic_load(&j->nested), 1); /* dt_pool_run returned 0 */
    dt_pool_free(pool);
}
END_TEST

/* No helpers: the caller does every part. No pool: nothing runs, 0. */
START_TEST(test_no_helpers) {
    dt_pool *pool = new_pool(0);
    job *j = fresh_job();
    ck_assert_int_eq(dt_pool_run(pool, count_part, j, 5), 1);
    assert_each_once(j, 5);
    dt_pool_free(pool);
    j = fresh_job();
    ck_assert_int_eq(dt_pool_run(NULL, count_part, j, 5), 0);
    assert_each_once(j, 0);
    ck_assert_int_eq(dt_pool_helpers(NULL), 0);
    dt_pool_free(NULL);
}
END_TEST

Suite *pool_suite(void) {
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_each_part_once);
    tcase_add_test(tc, test_helpers_run_at_once);
    tcase_add_test(tc, test_busy_refused);
    tcase_add_test(tc, test_no_helpers);
    suite_add_tcase(s, tc);
    return s;
}
