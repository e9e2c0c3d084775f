/*
 * sparse_acc suite: a sync step's sparse pushes summed by id. The sum is
 * held to a dense sum of the same pushes (each scattered into zeros and
 * added in turn, then scaled) to the bit, for rows named by one push, by
 * several, and by none; empty pushes and steps; reuse after a clear; the
 * bound on ids; each allocation failing in turn.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "sparse_acc.h"
#include "suites.h"

#define DIM 3
#define ROWS 40

/* A push of n rows at ids (copied), row k's values from seed and k. */
static dt_sparse_grad push_of(const int64_t *ids, int64_t n, int seed) {
    dt_sparse_grad g = {n, malloc(((size_t)n + 1) * sizeof(int64_t)),
                        malloc(((size_t)n + 1) * DIM * sizeof(float))};
    ck_assert(g.ids && g.rows);
    for (int64_t k = 0; k < n; k++) {
        g.ids[k] = ids[k];
        for (int d = 0; d < DIM; d++)
            g.rows[k * DIM + d] = (float)((seed * 7 + k * 3 + d) % 11) / 3.0f - 1.7f + 0.1f * seed;
    }
    return g;
}

START_TEST(test_sum_matches_dense) {
    static const int64_t a[] = {0, 3, 7, 20}, b[] = {3, 5, 20, 39}, c[] = {7, 39};
    const int64_t *sets[] = {a, b, c};
    const int64_t sizes[] = {4, 4, 2};
    dt_sparse_acc acc;
    dt_sparse_acc_init(&acc, DIM);
    dt_err err;
    dt_err_clear(&err);
    for (int round = 0; round < 2; round++) { /* the second reuses the scratch */
        float dense[ROWS * DIM];
        memset(dense, 0, sizeof dense);
        for (int p = 0; p < 3; p++) {
            dt_sparse_grad g = push_of(sets[p], sizes[p], p + round);
            float scattered[ROWS * DIM];
            memset(scattered, 0, sizeof scattered);
            for (int64_t k = 0; k < g.n; k++)
                memcpy(&scattered[g.ids[k] * DIM], &g.rows[k * DIM], DIM * sizeof(float));
            for (int e = 0; e < ROWS * DIM; e++)
                dense[e] += scattered[e]; /* the dense sum: every element, push by push */
            ck_assert_int_eq(dt_sparse_acc_add(&acc, &g, &err), 0);
            ck_assert_ptr_null(g.ids); /* taken */
        }
        dt_sparse_grad empty = {0, NULL, NULL};
        ck_assert_int_eq(dt_sparse_acc_add(&acc, &empty, &err), 0);
        ck_assert_int_eq(dt_sparse_acc_count(&acc), 4);
        const float scale = 1.0f / 4.0f;
        for (int e = 0; e < ROWS * DIM; e++)
            dense[e] *= scale;
        int64_t n = 0;
        const int64_t *ids = NULL;
        const float *rows = NULL;
        ck_assert_int_eq(dt_sparse_acc_sum(&acc, scale, &n, &ids, &rows, &err), 0);
        static const int64_t want[] = {0, 3, 5, 7, 20, 39};
        ck_assert_int_eq(n, 6);
        for (int64_t k = 0; k < n; k++) {
            ck_assert_int_eq(ids[k], want[k]);
            ck_assert_msg(memcmp(&rows[k * DIM], &dense[ids[k] * DIM], DIM * sizeof(float)) == 0,
                          "round %d id %lld: the sparse sum is not the dense one's bits", round,
                          (long long)ids[k]);
        }
        dt_sparse_acc_clear(&acc);
        ck_assert_int_eq(dt_sparse_acc_count(&acc), 0);
    }
    /* A step of no pushes, or of empty ones: nothing to apply. */
    int64_t n = -1;
    const int64_t *ids = NULL;
    const float *rows = NULL;
    ck_assert_int_eq(dt_sparse_acc_sum(&acc, 1.0f, &n, &ids, &rows, &err), 0);
    ck_assert_int_eq(n, 0);
    /* An id past 2^40 cannot be packed: refused, not wrapped. */
    int64_t huge = (int64_t)1 << 41;
    dt_sparse_grad g = push_of(&huge, 1, 0);
    ck_assert_int_eq(dt_sparse_acc_add(&acc, &g, &err), 0);
    ck_assert_int_eq(dt_sparse_acc_sum(&acc, 1.0f, &n, &ids, &rows, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "out of range"));
    dt_sparse_acc_deinit(&acc);
}
END_TEST

/* Allocation n failing, for n = 1, 2, ... (alone, then from n on): an add
 * or the sum ends in DT_ENOMEM (an add frees the push it could not take;
 * under ASan nothing leaks), the accumulator stays usable, and once no
 * allocation fails the sum is the one of a run without failures. */
START_TEST(test_sum_out_of_memory) {
    static const int64_t a[] = {2, 9}, b[] = {1, 9, 30};
    for (int persistent = 0; persistent < 2; persistent++) {
        for (long n = 1;; n++) {
            dt_sparse_acc acc;
            dt_sparse_acc_init(&acc, DIM);
            dt_err err;
            dt_err_clear(&err);
            dt_sparse_grad ga = push_of(a, 2, 1), gb = push_of(b, 3, 2);
            dt_alloc_fail_at(n, persistent);
            int rc = dt_sparse_acc_add(&acc, &ga, &err);
            if (rc == 0) rc = dt_sparse_acc_add(&acc, &gb, &err);
            int64_t count = 0;
            const int64_t *ids = NULL;
            const float *rows = NULL;
            if (rc == 0) rc = dt_sparse_acc_sum(&acc, 0.5f, &count, &ids, &rows, &err);
            long failed = dt_alloc_failed();
            dt_alloc_fail_at(0, 0);
            if (rc < 0) {
                ck_assert_int_eq(rc, DT_ENOMEM);
                ck_assert_ptr_nonnull(strstr(err.msg, "out of memory"));
                ck_assert_int_gt(failed, 0);
            }
            dt_sparse_grad_deinit(&ga); /* what an add did not take */
            dt_sparse_grad_deinit(&gb);
            dt_sparse_acc_deinit(&acc);
            if (failed == 0) {
                ck_assert_int_eq(rc, 0);
                ck_assert_int_eq(count, 4); /* 1, 2, 9, 30 */
                break;
            }
            ck_assert_int_lt(n, 100);
        }
    }
}
END_TEST

Suite *sparse_acc_suite(void) {
    Suite *s = suite_create("sparse_acc");
    TCase *tc = tcase_create("sum");
    tcase_add_test(tc, test_sum_matches_dense);
    tcase_add_test(tc, test_sum_out_of_memory);
    suite_add_tcase(s, tc);
    return s;
}
