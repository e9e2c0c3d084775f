/*
 * data suite: the line source's values and noise, sharding (disjoint and
 * covering), per-epoch shuffling, the wide source's regeneration and shape,
 * bad arguments; and the file sources: sharding of a file, scaling (divide,
 * standardize over the union of the shards), the held-out set scaled with the
 * training statistics, and the reader's errors passed through. A held-out
 * file without labels (csv, libsvm, idx) reads to the same features, to the
 * bit, as the same file with labels under every scaling, with no y; its
 * errors name file:line. A validation split (validation_fraction) holds
 * the same rows out for every open and shard count, classes in proportion,
 * with standardize's statistics from the training rows alone.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "job.h"
#include "log.h"
#include "proc.h"
#include "suites.h"

/* A job filled by hand (dt_job_defaults lives in another module). */
static dt_job job_of(dt_data_source source, int features, int64_t n, double noise, uint64_t seed) {
    dt_job job;
    memset(&job, 0, sizeof job);
    job.model.kind = DT_MODEL_LINEAR;
    job.data.source = source;
    job.model.num_features = features;
    job.data.num_examples = n;
    job.data.noise = noise;
    job.seed = seed;
    job.batch_size = 8;
    return job;
}

static dt_dataset *open_ok(const dt_job *job, int shard, int num_shards) {
    dt_dataset *ds = NULL;
    dt_err err = {0};
    int rc = dt_job_open_data(job, shard, num_shards, &ds, &err);
    ck_assert_msg(rc == 0, "open: %s", err.msg);
    ck_assert_ptr_nonnull(ds);
    return ds;
}

/* The global index of a line example from its x (linspace is invertible). */
static int64_t line_index(float x, int64_t n) {
    return (int64_t)llround(((double)x + 1.0) * (double)(n - 1) / 2.0);
}

START_TEST(test_line_values) {
    dt_job job = job_of(DT_DATA_LINE, 1, 11, 0.0, 7);
    dt_dataset *ds = open_ok(&job, 0, 1);
    ck_assert_int_eq(dt_data_size(ds), 11);
    ck_assert_int_eq(dt_data_total(ds), 11);
    dt_batch all;
    dt_err err = {0};
    ck_assert_int_eq(dt_data_all(ds, &all, &err), 0);
    ck_assert_int_eq(all.rows, 11);
    ck_assert_int_eq(all.cols, 1);
    for (int i = 0; i < 11; i++) {
        ck_assert_float_eq_tol(all.x[i], -1.0f + 0.2f * i, 1e-6f);
        ck_assert_float_eq_tol(all.y[i], 2.0f * all.x[i], 1e-6f); /* noise 0 */
    }
    ck_assert_float_eq(all.x[0], -1.0f);
    ck_assert_float_eq(all.x[10], 1.0f);
    dt_data_free(ds);

    /* A single example sits at x = 0. */
    job.data.num_examples = 1;
    ds = open_ok(&job, 0, 1);
    ck_assert_int_eq(dt_data_all(ds, &all, &err), 0);
    ck_assert_int_eq(all.rows, 1);
    ck_assert_float_eq(all.x[0], 0.0f);
    ck_assert_float_eq(all.y[0], 0.0f);
    dt_data_free(ds);
}
END_TEST

START_TEST(test_line_noise) {
    const int64_t n = 10000;
    const double noise = 0.5;
    dt_job job = job_of(DT_DATA_LINE, 1, n, noise, 42);
    dt_dataset *ds = open_ok(&job, 0, 1);
    dt_batch all;
    ck_assert_int_eq(dt_data_all(ds, &all, NULL), 0);
    double sum = 0, sum_sq = 0;
    for (int i = 0; i < all.rows; i++) {
        double r = (double)all.y[i] - 2.0 * all.x[i];
        sum += r;
        sum_sq += r * r;
    }
    double mean = sum / n, sd = sqrt(sum_sq / n - mean * mean);
    /* Standard errors: sigma/sqrt(N) = 0.005 for the mean, about
     * sigma/sqrt(2N) = 0.0035 for the std. Bounds are 4-7 of them. */
    ck_assert_msg(fabs(mean) < 0.02, "mean residual %g", mean);
    ck_assert_msg(fabs(sd - noise) < 0.025, "residual std %g", sd);

    /* Same seed: the very same values. Another seed: other noise. */
    dt_dataset *same = open_ok(&job, 0, 1);
    dt_batch all2;
    ck_assert_int_eq(dt_data_all(same, &all2, NULL), 0);
    ck_assert_int_eq(memcmp(all.y, all2.y, (size_t)n * sizeof(float)), 0);
    job.seed = 43;
    dt_dataset *other = open_ok(&job, 0, 1);
    ck_assert_int_eq(dt_data_all(other, &all2, NULL), 0);
    int differ = 0;
    for (int i = 0; i < all.rows; i++)
        differ += all.y[i] != all2.y[i];
    ck_assert_int_gt(differ, n * 9 / 10);
    ck_assert_float_eq(all.x[17], all2.x[17]); /* x does not depend on the seed */
    dt_data_free(ds);
    dt_data_free(same);
    dt_data_free(other);
}
END_TEST

START_TEST(test_shards) {
    const int64_t n = 100;
    dt_job job = job_of(DT_DATA_LINE, 1, n, 0.3, 5);
    dt_dataset *whole = open_ok(&job, 0, 1);
    dt_batch ref;
    ck_assert_int_eq(dt_data_all(whole, &ref, NULL), 0);
    for (int ns = 1; ns <= 3; ns++) {
        int seen[100] = {0};
        int64_t total = 0;
        for (int s = 0; s < ns; s++) {
            dt_dataset *ds = open_ok(&job, s, ns);
            int64_t size = dt_data_size(ds);
            ck_assert_int_eq(size, (n - s + ns - 1) / ns);
            ck_assert_int_eq(dt_data_total(ds), n);
            total += size;
            dt_batch all;
            ck_assert_int_eq(dt_data_all(ds, &all, NULL), 0);
            ck_assert_int_eq(all.rows, size);
            for (int k = 0; k < all.rows; k++) {
                int64_t i = line_index(all.x[k], n);
                ck_assert_int_eq(i % ns, s);
                ck_assert_int_eq(i, s + (int64_t)k * ns); /* index order */
                seen[i]++;
                /* The example is the same as in the unsharded set, noise too. */
                ck_assert_float_eq(all.x[k], ref.x[i]);
                ck_assert_float_eq(all.y[k], ref.y[i]);
            }
            /* One epoch of batches visits every example of the shard once. */
            int visits[100] = {0};
            int64_t drawn = 0;
            while (dt_data_epoch(ds) == 0) {
                dt_batch b;
                ck_assert_int_eq(dt_data_next(ds, 7, &b, NULL), 0);
                for (int r = 0; r < b.rows; r++) {
                    int64_t i = line_index(b.x[r], n);
                    ck_assert_int_eq(i % ns, s);
                    ck_assert_float_eq(b.y[r], ref.y[i]);
                    visits[i]++;
                }
                drawn += b.rows;
            }
            ck_assert_int_eq(drawn, size);
            for (int i = 0; i < n; i++)
                ck_assert_int_eq(visits[i], i % ns == s ? 1 : 0);
            dt_data_free(ds);
        }
        ck_assert_int_eq(total, n);
        for (int i = 0; i < n; i++)
            ck_assert_msg(seen[i] == 1, "ns %d: example %d seen %d", ns, i, seen[i]);
    }
    dt_data_free(whole);
}
END_TEST

/* The order of one epoch of ds as global indices, drawn in batches of bs. */
static void epoch_order(dt_dataset *ds, int bs, int64_t n, int64_t *out, int64_t cap) {
    int start = dt_data_epoch(ds);
    int64_t k = 0;
    while (dt_data_epoch(ds) == start) {
        dt_batch b;
        ck_assert_int_eq(dt_data_next(ds, bs, &b, NULL), 0);
        for (int r = 0; r < b.rows; r++) {
            ck_assert_int_lt(k, cap);
            out[k++] = line_index(b.x[r], n);
        }
    }
    ck_assert_int_eq(k, dt_data_size(ds));
}

START_TEST(test_shuffle) {
    const int64_t n = 60;
    int64_t a0[30], a1[30], b0[30], b1[30], c0[30];
    dt_job job = job_of(DT_DATA_LINE, 1, n, 0.0, 11);
    dt_dataset *a = open_ok(&job, 1, 2), *b = open_ok(&job, 1, 2);
    epoch_order(a, 4, n, a0, 30);
    epoch_order(a, 4, n, a1, 30);
    /* A different batch size does not change the order of an epoch. */
    epoch_order(b, 7, n, b0, 30);
    epoch_order(b, 30, n, b1, 30);
    ck_assert_int_eq(memcmp(a0, b0, sizeof a0), 0);
    ck_assert_int_eq(memcmp(a1, b1, sizeof a1), 0);
    ck_assert_int_ne(memcmp(a0, a1, sizeof a0), 0); /* reshuffled each epoch */
    int in_order = 1;
    for (int k = 0; k < 30; k++)
        in_order &= a0[k] == 1 + 2 * k;
    ck_assert_int_eq(in_order, 0); /* and shuffled at all */
    job.seed = 12;
    dt_dataset *c = open_ok(&job, 1, 2);
    epoch_order(c, 4, n, c0, 30);
    ck_assert_int_ne(memcmp(a0, c0, sizeof a0), 0);
    /* Both epochs are permutations of the shard. */
    int count[60] = {0};
    for (int k = 0; k < 30; k++)
        count[a0[k]]++, count[a1[k]] += 2;
    for (int i = 0; i < 60; i++)
        ck_assert_int_eq(count[i], i % 2 ? 3 : 0);
    dt_data_free(a);
    dt_data_free(b);
    dt_data_free(c);
}
END_TEST

START_TEST(test_epochs_and_short_batch) {
    dt_job job = job_of(DT_DATA_LINE, 1, 10, 0.0, 3);
    dt_dataset *ds = open_ok(&job, 0, 1);
    static const int want_rows[] = {4, 4, 2, 4, 4, 2, 4};
    static const int want_epoch[] = {0, 0, 1, 1, 1, 2, 2}; /* after the call */
    for (int k = 0; k < 7; k++) {
        dt_batch b;
        ck_assert_int_eq(dt_data_next(ds, 4, &b, NULL), 0);
        ck_assert_int_eq(b.rows, want_rows[k]);
        ck_assert_int_eq(b.cols, 1);
        ck_assert_int_eq(dt_data_epoch(ds), want_epoch[k]);
    }
    /* A batch larger than the shard is the whole shard (per epoch). */
    dt_data_free(ds);
    ds = open_ok(&job, 0, 1);
    dt_batch b;
    ck_assert_int_eq(dt_data_next(ds, 1000, &b, NULL), 0);
    ck_assert_int_eq(b.rows, 10);
    ck_assert_int_eq(dt_data_epoch(ds), 1);
    double sum = 0;
    for (int r = 0; r < 10; r++)
        sum += b.x[r];
    ck_assert_double_eq_tol(sum, 0.0, 1e-5);
    dt_data_free(ds);
}
END_TEST

/* Batches a and b hold the same rows, byte for byte. */
static void assert_same_batch(const dt_batch *a, const dt_batch *b, const char *what,
                              int64_t step) {
    ck_assert_msg(a->rows == b->rows && a->cols == b->cols, "%s, step %lld: %dx%d against %dx%d",
                  what, (long long)step, a->rows, a->cols, b->rows, b->cols);
    size_t n = (size_t)a->rows * (size_t)a->cols;
    ck_assert_msg(memcmp(a->x, b->x, n * sizeof *a->x) == 0, "%s, step %lld: other x", what,
                  (long long)step);
    ck_assert_msg(memcmp(a->y, b->y, (size_t)a->rows * sizeof *a->y) == 0, "%s, step %lld: other y",
                  what, (long long)step);
}

/* A worker restarted at local step k (dt_data_seek) takes the batches one
 * that drew k batches takes next: in every epoch (the order drawn for it),
 * at the short last batch of a pass, for a source held in memory and one
 * made per batch. A fresh dataset seeks; so does one that moved on, even
 * back to an earlier epoch. */
static void check_seek(dt_data_source source, int features) {
    const int bs = 4;
    dt_job job = job_of(source, features, 47, 0.1, 21); /* shard 1 of 2: 23 rows, 6 batches */
    dt_dataset *moved = open_ok(&job, 1, 2);
    for (int64_t k = 0; k <= 3 * 6 + 1; k++) {
        dt_dataset *drawn = open_ok(&job, 1, 2), *sought = open_ok(&job, 1, 2);
        dt_batch a, b;
        for (int64_t i = 0; i < k; i++)
            ck_assert_int_eq(dt_data_next(drawn, bs, &a, NULL), 0);
        dt_err err;
        dt_err_clear(&err);
        ck_assert_msg(dt_data_seek(sought, bs, k, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(dt_data_epoch(sought), k / 6);
        ck_assert_int_eq(dt_data_seek(moved, bs, k, NULL), 0);
        for (int next = 0; next < 8; next++) { /* past the next epoch's start */
            dt_batch c;
            /* Each batch lives in its dataset's buffers until its next call. */
            ck_assert_int_eq(dt_data_next(drawn, bs, &a, NULL), 0);
            ck_assert_int_eq(dt_data_next(sought, bs, &b, NULL), 0);
            assert_same_batch(&a, &b, "sought", k + next);
            ck_assert_int_eq(dt_data_next(moved, bs, &c, NULL), 0);
            assert_same_batch(&a, &c, "sought after moving", k + next);
        }
        dt_data_free(drawn);
        dt_data_free(sought);
    }
    dt_data_free(moved);
}

START_TEST(test_seek) {
    check_seek(DT_DATA_LINE, 1);
    check_seek(DT_DATA_WIDE, 37);
    /* Errors leave the position where it was. */
    dt_job job = job_of(DT_DATA_LINE, 1, 10, 0.0, 3);
    dt_dataset *ds = open_ok(&job, 0, 1), *fresh = open_ok(&job, 0, 1);
    ck_assert_int_eq(dt_data_seek(ds, 4, 4, NULL), 0); /* epoch 1, batch 1 of 3 */
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_data_seek(ds, 0, 1, &err), DT_EINVAL);
    ck_assert_int_eq(dt_data_seek(ds, 4, -1, NULL), DT_EINVAL);
    ck_assert_int_eq(dt_data_seek(ds, 4, (int64_t)3 * INT_MAX + 3, NULL), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "seek"));
    dt_batch a, b;
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(dt_data_next(fresh, 4, &a, NULL), 0);
    ck_assert_int_eq(dt_data_next(fresh, 4, &a, NULL), 0);
    ck_assert_int_eq(dt_data_next(ds, 4, &b, NULL), 0);
    assert_same_batch(&a, &b, "after refused seeks", 4);
    dt_data_free(ds);
    dt_data_free(fresh);
}
END_TEST

/* Row r of batch b equals some row of the rows x/y (count of them). */
static int find_row(const dt_batch *b, int r, const float *x, const float *y, int count) {
    size_t row_bytes = (size_t)b->cols * sizeof(float);
    for (int k = 0; k < count; k++)
        if (memcmp(b->x + (size_t)r * b->cols, x + (size_t)k * b->cols, row_bytes) == 0 &&
            b->y[r] == y[k])
            return k;
    return -1;
}

static void check_wide(int F) {
    const int n = 20, bs = 20;
    dt_job job = job_of(DT_DATA_WIDE, F, n, 0.0, 99);
    dt_dataset *ds = open_ok(&job, 0, 1);
    ck_assert_int_eq(dt_data_size(ds), n);
    const float *w = dt_data_true_weights(ds);
    ck_assert_ptr_nonnull(w);

    dt_batch b;
    ck_assert_int_eq(dt_data_next(ds, bs, &b, NULL), 0);
    ck_assert_int_eq(b.rows, n);
    ck_assert_int_eq(b.cols, F);
    float *x0 = malloc((size_t)n * F * sizeof(float)), *y0 = malloc((size_t)n * sizeof(float));
    ck_assert_ptr_nonnull(x0);
    ck_assert_ptr_nonnull(y0);
    memcpy(x0, b.x, (size_t)n * F * sizeof(float));
    memcpy(y0, b.y, (size_t)n * sizeof(float));
    double sum = 0, sum_sq = 0;
    for (int r = 0; r < n; r++) {
        double dot = 0;
        for (int j = 0; j < F; j++) {
            float v = b.x[(size_t)r * F + j];
            ck_assert(v >= -1.0f && v < 1.0f);
            sum += v;
            sum_sq += (double)v * v;
            dot += (double)v * w[j];
        }
        /* noise 0: y is the true linear function. */
        double want = dot / sqrt((double)F);
        ck_assert_msg(fabs(b.y[r] - want) <= 1e-5 * (1 + fabs(want)), "F %d row %d: y %g want %g",
                      F, r, b.y[r], want);
    }
    double cnt = (double)n * F, mean = sum / cnt, var = sum_sq / cnt - mean * mean;
    /* uniform[-1, 1): mean 0, variance 1/3; bounds of 5 standard errors
     * (the variance estimate's is sqrt((1/5 - 1/9) / cnt)). */
    ck_assert_msg(fabs(mean) < 5 * sqrt(1.0 / 3 / cnt), "mean %g", mean);
    ck_assert_msg(fabs(var - 1.0 / 3) < 5 * sqrt((0.2 - 1.0 / 9) / cnt) + 5 * sqrt(1.0 / 3 / cnt),
                  "var %g", var);
    /* Neighbouring columns, and the same column of neighbouring rows, are
     * uncorrelated: the mean of x x' is 0 with a standard error of
     * 1/3 / sqrt(pairs). */
    if (F > 1) {
        double along = 0, across = 0;
        for (int r = 0; r < n; r++)
            for (int j = 0; j + 1 < F; j++)
                along += (double)b.x[(size_t)r * F + j] * b.x[(size_t)r * F + j + 1];
        for (int r = 0; r + 1 < n; r++)
            for (int j = 0; j < F; j++)
                across += (double)b.x[(size_t)r * F + j] * b.x[(size_t)(r + 1) * F + j];
        double pairs_along = (double)n * (F - 1), pairs_across = (double)(n - 1) * F;
        ck_assert_msg(fabs(along / pairs_along) < 5.0 / 3 / sqrt(pairs_along), "F %d: along %g", F,
                      along / pairs_along);
        ck_assert_msg(fabs(across / pairs_across) < 5.0 / 3 / sqrt(pairs_across), "F %d: across %g",
                      F, across / pairs_across);
    }

    /* Next epoch: reshuffled, but the very same examples. */
    const float *first_buf = b.x;
    ck_assert_int_eq(dt_data_next(ds, bs, &b, NULL), 0);
    ck_assert_ptr_eq(b.x, first_buf); /* one buffer, reused */
    int moved = 0, used[20] = {0};
    for (int r = 0; r < n; r++) {
        int k = find_row(&b, r, x0, y0, n);
        ck_assert_msg(k >= 0, "F %d: row %d of epoch 1 is not an example of epoch 0", F, r);
        used[k]++;
        moved += k != r;
    }
    for (int k = 0; k < n; k++)
        ck_assert_int_eq(used[k], 1);
    ck_assert_int_gt(moved, 0);

    /* Another dataset, another shard: examples regenerate identically. */
    dt_dataset *half = open_ok(&job, 1, 2);
    ck_assert_int_eq(dt_data_size(half), n / 2);
    ck_assert_int_eq(dt_data_next(half, 3, &b, NULL), 0);
    ck_assert_int_eq(b.rows, 3);
    for (int r = 0; r < b.rows; r++)
        ck_assert_int_ge(find_row(&b, r, x0, y0, n), 0);
    ck_assert_int_eq(memcmp(dt_data_true_weights(half), w, (size_t)F * sizeof(float)), 0);

    free(x0);
    free(y0);
    dt_data_free(half);
    dt_data_free(ds);
}

START_TEST(test_wide) {
    check_wide(1);
    check_wide(37);   /* odd: the last column takes half a hash pair */
    check_wide(9001); /* spans several generation chunks */
}
END_TEST

/* Golden values of the wide source (seed 99, F = 9001, no noise): examples
 * 0..2 at columns in the first chunk, around the chunk and lane boundaries and
 * in the scalar tail. Computed by a scalar implementation of the generator
 * (key_of, lowbias32 of the column's Weyl point, top 24 bits) in exact
 * integer arithmetic, apart from this code: the data must be the same on
 * every machine, whichever vector width the CPU gives the generator. y is
 * summed in float lanes, so it is held to 1e-6 of the exact sum. */
START_TEST(test_wide_golden) {
    static const int cols[9] = {0, 1, 15, 16, 4095, 4096, 8191, 8192, 9000};
    static const float want_x[3][9] = {
        {0.666592956f, -0.543506265f, -0.703332663f, -0.773482442f, 0.0098682642f, 0.749778271f,
         0.667818546f, 0.967083216f, 0.541206837f},
        {0.508399606f, -0.735332131f, -0.719538689f, -0.393439293f, -0.0453664064f, 0.165424228f,
         0.0407217741f, 0.671767354f, 0.987244964f},
        {-0.823999286f, 0.303304791f, 0.970528841f, 0.456031203f, 0.30287981f, -0.725236416f,
         -0.424845815f, -0.262657523f, -0.39517343f}};
    static const double want_y[3] = {-0.0490424074, -0.429303229, -0.123992607};
    for (int i = 0; i < 3; i++) {
        dt_job job = job_of(DT_DATA_WIDE, 9001, 20, 0.0, 99);
        dt_dataset *ds = open_ok(&job, i, 20); /* shard i of 20 holds example i alone */
        dt_batch b;
        ck_assert_int_eq(dt_data_next(ds, 1, &b, NULL), 0);
        for (int c = 0; c < 9; c++)
            ck_assert_msg(b.x[cols[c]] == want_x[i][c], "example %d column %d: %.9g, want %.9g", i,
                          cols[c], b.x[cols[c]], want_x[i][c]);
        ck_assert_double_eq_tol(b.y[0], want_y[i], 1e-6);
        dt_data_free(ds);
    }
}
END_TEST

START_TEST(test_wide_noise_and_weights) {
    const int n = 4000, F = 3;
    dt_job job = job_of(DT_DATA_WIDE, F, n, 0.1, 1234);
    dt_job clean = job;
    clean.data.noise = 0;
    dt_dataset *ds = open_ok(&job, 0, 1), *ref = open_ok(&clean, 0, 1);
    /* The same seed gives the same order and x, so y differs by the noise. */
    dt_batch b, c;
    ck_assert_int_eq(dt_data_next(ds, n, &b, NULL), 0);
    ck_assert_int_eq(dt_data_next(ref, n, &c, NULL), 0);
    ck_assert_int_eq(memcmp(b.x, c.x, (size_t)n * F * sizeof(float)), 0);
    double sum = 0, sum_sq = 0;
    for (int r = 0; r < n; r++) {
        double d = (double)b.y[r] - c.y[r];
        sum += d;
        sum_sq += d * d;
    }
    double mean = sum / n, sd = sqrt(sum_sq / n - mean * mean);
    ck_assert_msg(fabs(mean) < 0.008, "noise mean %g", mean);
    ck_assert_msg(fabs(sd - 0.1) < 0.008, "noise std %g", sd);
    dt_data_free(ds);
    dt_data_free(ref);

    /* w* is standard normal. */
    job.model.num_features = 20000;
    job.data.num_examples = 1;
    ds = open_ok(&job, 0, 1);
    const float *w = dt_data_true_weights(ds);
    sum = sum_sq = 0;
    for (int j = 0; j < job.model.num_features; j++) {
        sum += w[j];
        sum_sq += (double)w[j] * w[j];
    }
    mean = sum / job.model.num_features;
    double var = sum_sq / job.model.num_features - mean * mean;
    ck_assert_msg(fabs(mean) < 0.03, "w* mean %g", mean);
    ck_assert_msg(fabs(var - 1) < 0.05, "w* var %g", var);
    dt_batch all;
    dt_err err = {0};
    ck_assert_int_eq(dt_data_all(ds, &all, &err), DT_EPRECOND);
    ck_assert_ptr_nonnull(strstr(err.msg, "data: all:"));
    dt_data_free(ds);
}
END_TEST

static void expect_open_error(const dt_job *job, int shard, int num_shards, const char *want) {
    dt_dataset *ds = (dt_dataset *)&ds; /* must be reset to NULL */
    dt_err err = {0};
    int rc = dt_job_open_data(job, shard, num_shards, &ds, &err);
    ck_assert_int_eq(rc, DT_EINVAL);
    ck_assert_int_eq(err.code, DT_EINVAL);
    ck_assert_ptr_null(ds);
    ck_assert_msg(strstr(err.msg, want) != NULL, "want \"%s\" in \"%s\"", want, err.msg);
    ck_assert_msg(strncmp(err.msg, "data: ", 6) == 0, "%s", err.msg);
}

START_TEST(test_bad_args) {
    dt_job job = job_of((dt_data_source)9, 1, 10, 0.1, 1); /* dt_job_finish refuses it by name */
    expect_open_error(&job, 0, 1, "\"data\": unknown source 9");
    job = job_of(DT_DATA_LINE, 2, 10, 0.1, 1);
    expect_open_error(&job, 0, 1, "\"features\" must be 1 for the line source (got 2)");
    job = job_of(DT_DATA_WIDE, 0, 10, 0.1, 1);
    expect_open_error(&job, 0, 1, "\"features\" must be >= 1 (got 0)");
    job = job_of(DT_DATA_LINE, 1, 0, 0.1, 1);
    expect_open_error(&job, 0, 1, "\"examples\" must be >= 1 (got 0)");
    job = job_of(DT_DATA_LINE, 1, 10, -0.1, 1);
    expect_open_error(&job, 0, 1, "\"noise\"");
    job = job_of(DT_DATA_LINE, 1, 10, NAN, 1);
    expect_open_error(&job, 0, 1, "\"noise\"");
    job = job_of(DT_DATA_LINE, 1, 10, 0.1, 1);
    expect_open_error(&job, 2, 2, "shard 2 of 2 is out of range");
    expect_open_error(&job, -1, 2, "shard -1 of 2 is out of range");
    expect_open_error(&job, 0, 0, "shard 0 of 0 is out of range");
    job = job_of(DT_DATA_WIDE, 4, 2, 0.1, 1);
    expect_open_error(&job, 2, 3, "shard 2 of 3 is empty: only 2 examples");
    /* The last non-empty shard still opens. */
    dt_dataset *ds = open_ok(&job, 1, 3);
    ck_assert_int_eq(dt_data_size(ds), 1);
    dt_batch b;
    dt_err err = {0};
    ck_assert_int_eq(dt_data_next(ds, 0, &b, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "data: next: batch size must be >= 1 (got 0)");
    ck_assert_int_eq(b.rows, 0);
    dt_data_free(ds);
    dt_data_free(NULL);
}
END_TEST

START_TEST(test_normal) {
    uint64_t s1 = 77, s2 = 77;
    const int n = 200000;
    double sum = 0, sum_sq = 0, sum_4 = 0;
    for (int i = 0; i < n; i++) {
        double z = dt_data_normal(&s1);
        ck_assert(isfinite(z));
        ck_assert_double_eq(z, dt_data_normal(&s2)); /* deterministic */
        sum += z;
        sum_sq += z * z;
        sum_4 += z * z * z * z;
    }
    double mean = sum / n, var = sum_sq / n - mean * mean;
    ck_assert_msg(fabs(mean) < 0.01, "mean %g", mean);
    ck_assert_msg(fabs(var - 1) < 0.015, "var %g", var);
    ck_assert_msg(fabs(sum_4 / n - 3) < 0.1, "fourth moment %g",
                  sum_4 / n); /* normal, not uniform */
}
END_TEST

START_TEST(test_normals_bulk) {
    /* dt_data_normals: stddev scaling, an odd tail, and the same stream as
     * another fill from the same state. */
    enum { COUNT = 100001 };
    static float a[COUNT], b[COUNT];
    uint64_t sa = 5, sb = 5;
    dt_data_normals(&sa, a, COUNT, 0.25);
    dt_data_normals(&sb, b, 10, 0.25); /* a prefix in two calls */
    dt_data_normals(&sb, b + 10, COUNT - 10, 0.25);
    ck_assert_int_eq(memcmp(a, b, sizeof a), 0);
    ck_assert_uint_eq(sa, sb);
    double sum = 0, sum_sq = 0;
    for (int i = 0; i < COUNT; i++) {
        sum += a[i];
        sum_sq += (double)a[i] * a[i];
    }
    double mean = sum / COUNT, sd = sqrt(sum_sq / COUNT - mean * mean);
    ck_assert_msg(fabs(mean) < 0.004, "mean %g", mean);
    ck_assert_msg(fabs(sd - 0.25) < 0.004, "sd %g", sd);
    ck_assert_float_ne(a[COUNT - 1], 0.0f); /* the odd tail is written */
    /* Neighbours (the two outputs of one Box-Muller draw) are uncorrelated. */
    double cross = 0;
    for (int i = 0; i + 1 < COUNT; i += 2)
        cross += (double)a[i] * a[i + 1];
    ck_assert_msg(fabs(cross / (COUNT / 2) / (0.25 * 0.25)) < 0.03, "pair correlation %g",
                  cross / (COUNT / 2) / (0.25 * 0.25));
}
END_TEST

/* ---- file sources --------------------------------------------------------- */

static void files_setup(void) {
    if (dt_test_tmp_begin() != 0) fprintf(stderr, "data: no suite temp dir; using $TMPDIR\n");
}

/* Feature j of example i in the generated files: varied, with feature
 * `constant` (if >= 0) always 5. Exactly a float, so it survives the text. */
static float file_value(int i, int j, int constant, float shift) {
    if (j == constant) return 5.0f;
    return (float)((i * 37 + j * 11) % 29) * 0.25f - 3.0f + (float)j + shift;
}

/* A csv of n rows: with labeled, the label (column "target", first) is the
 * row index; then F features named f0... */
static void write_csv_as(const char *path, int n, int F, int constant, float shift, int labeled) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    if (labeled) fprintf(f, "target");
    for (int j = 0; j < F; j++)
        fprintf(f, "%sf%d", j || labeled ? "," : "", j);
    fprintf(f, "\n");
    for (int i = 0; i < n; i++) {
        if (labeled) fprintf(f, "%d", i);
        for (int j = 0; j < F; j++)
            fprintf(f, "%s%.9g", j || labeled ? "," : "",
                    (double)file_value(i, j, constant, shift));
        fprintf(f, "\n");
    }
    ck_assert_int_eq(fclose(f), 0);
}

static void write_csv(const char *path, int n, int F, int constant, float shift) {
    write_csv_as(path, n, F, constant, shift, 1);
}

static dt_job file_job(dt_data_source source, const char *train, int F) {
    dt_job job = job_of(source, F, 0, 0.0, 21);
    snprintf(job.data.train_data, sizeof job.data.train_data, "%s", train);
    strcpy(job.data.label_column, "target");
    job.data.scale = DT_SCALE_NONE;
    job.data.scale_divisor = 255;
    job.model.num_classes = 2;
    return job;
}

static char *file_in(const char *dir, const char *name) {
    static char paths[4][1024];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, 1024, "%s/%s", dir, name);
    return p;
}

START_TEST(test_file_shards) {
    enum { N = 23, F = 3 };
    dt_log_set_level(DT_LOG_WARN);
    char *dir = dt_test_tempdir();
    ck_assert_ptr_nonnull(dir);
    const char *path = file_in(dir, "train.csv");
    write_csv(path, N, F, -1, 0);
    dt_job job = file_job(DT_DATA_CSV, path, F);
    for (int ns = 1; ns <= 4; ns++) {
        int seen[N] = {0};
        int64_t total = 0;
        for (int s = 0; s < ns; s++) {
            dt_dataset *ds = open_ok(&job, s, ns);
            ck_assert_int_eq(dt_data_total(ds), N);
            ck_assert_int_eq(dt_data_size(ds), (N - s + ns - 1) / ns);
            ck_assert_ptr_null(dt_data_true_weights(ds));
            total += dt_data_size(ds);
            dt_batch all;
            dt_err err = {0};
            ck_assert_msg(dt_data_all(ds, &all, &err) == 0, "%s", err.msg);
            ck_assert_int_eq(all.rows, dt_data_size(ds));
            ck_assert_int_eq(all.cols, F);
            for (int k = 0; k < all.rows; k++) {
                int i = (int)all.y[k]; /* the label is the row index */
                ck_assert_int_eq(i, s + k * ns);
                seen[i]++;
                for (int j = 0; j < F; j++)
                    ck_assert_float_eq(all.x[k * F + j], file_value(i, j, -1, 0));
            }
            /* An epoch of batches: each example of the shard once, rows intact. */
            int visits[N] = {0};
            while (dt_data_epoch(ds) == 0) {
                dt_batch b;
                ck_assert_int_eq(dt_data_next(ds, 4, &b, NULL), 0);
                for (int r = 0; r < b.rows; r++) {
                    int i = (int)b.y[r];
                    ck_assert_int_eq(i % ns, s);
                    visits[i]++;
                    for (int j = 0; j < F; j++)
                        ck_assert_float_eq(b.x[r * F + j], file_value(i, j, -1, 0));
                }
            }
            for (int i = 0; i < N; i++)
                ck_assert_int_eq(visits[i], i % ns == s);
            dt_data_free(ds);
        }
        ck_assert_int_eq(total, N);
        for (int i = 0; i < N; i++)
            ck_assert_msg(seen[i] == 1, "ns %d: row %d seen %d", ns, i, seen[i]);
    }
    dt_test_tempdir_free(dir);
}
END_TEST

/* A softmax job training on the idx fixture (3 images of 6 pixels, labels
 * 7, 0, 9), unscaled. */
static dt_job idx_fixture_job(void) {
    const char *root = getenv("DT_TEST_DATA");
    char images[1024], labels[1024];
    snprintf(images, sizeof images, "%s/readers/small-images-idx3-ubyte",
             root && *root ? root : "test/data");
    snprintf(labels, sizeof labels, "%s/readers/small-labels-idx1-ubyte",
             root && *root ? root : "test/data");
    dt_job job = file_job(DT_DATA_IDX, images, 6);
    snprintf(job.data.train_labels, sizeof job.data.train_labels, "%s", labels);
    job.model.kind = DT_MODEL_SOFTMAX;
    job.model.num_classes = 10;
    return job;
}

/* "divide" on the idx fixture: pixels / 255, sharded. */
START_TEST(test_file_divide) {
    dt_log_set_level(DT_LOG_WARN);
    dt_job job = idx_fixture_job();
    job.data.scale = DT_SCALE_DIVIDE;
    job.data.scale_divisor = 255;
    dt_dataset *ds = open_ok(&job, 0, 2);
    ck_assert_int_eq(dt_data_total(ds), 3);
    ck_assert_int_eq(dt_data_size(ds), 2);
    dt_batch all;
    ck_assert_int_eq(dt_data_all(ds, &all, NULL), 0);
    ck_assert_int_eq(all.rows, 2);
    for (int j = 0; j < 6; j++) {
        ck_assert_float_eq_tol(all.x[j], (float)j / 255.0f, 1e-7f);
        ck_assert_float_eq_tol(all.x[6 + j], (float)(250 + j) / 255.0f, 1e-7f);
    }
    ck_assert_float_eq(all.x[11], 1.0f);
    ck_assert_float_eq(all.y[0], 7);
    ck_assert_float_eq(all.y[1], 9);
    dt_data_free(ds);
    ds = open_ok(&job, 1, 2);
    ck_assert_int_eq(dt_data_all(ds, &all, NULL), 0);
    ck_assert_int_eq(all.rows, 1);
    ck_assert_float_eq_tol(all.x[5], 45.0f / 255.0f, 1e-7f);
    ck_assert_float_eq(all.y[0], 0);
    dt_data_free(ds);
}
END_TEST

/* Mean and population std of feature j of the generated rows. */
static void file_stats(int n, int j, int constant, float shift, double *mean, double *sd) {
    double sum = 0, sq = 0;
    for (int i = 0; i < n; i++)
        sum += file_value(i, j, constant, shift);
    *mean = sum / n;
    for (int i = 0; i < n; i++) {
        double d = file_value(i, j, constant, shift) - *mean;
        sq += d * d;
    }
    *sd = sqrt(sq / n);
}

START_TEST(test_file_standardize) {
    enum { N = 50, F = 4, CONSTANT = 2 };
    dt_log_set_level(DT_LOG_WARN);
    char *dir = dt_test_tempdir();
    const char *path = file_in(dir, "train.csv");
    write_csv(path, N, F, CONSTANT, 0);
    dt_job job = file_job(DT_DATA_CSV, path, F);
    job.data.scale = DT_SCALE_STANDARDIZE;
    const int ns = 3;
    double sum[F] = {0}, sq[F] = {0};
    int count = 0;
    for (int s = 0; s < ns; s++) {
        dt_dataset *ds = open_ok(&job, s, ns);
        dt_batch all;
        ck_assert_int_eq(dt_data_all(ds, &all, NULL), 0);
        for (int k = 0; k < all.rows; k++) {
            int i = (int)all.y[k];
            for (int j = 0; j < F; j++) {
                double v = all.x[k * F + j], mean, sd;
                sum[j] += v;
                sq[j] += v * v;
                file_stats(N, j, CONSTANT, 0, &mean, &sd);
                double want = j == CONSTANT ? 0.0 : (file_value(i, j, CONSTANT, 0) - mean) / sd;
                ck_assert_msg(fabs(v - want) < 1e-5, "row %d feature %d: %g, want %g", i, j, v,
                              want);
            }
            count++;
        }
        dt_data_free(ds);
    }
    ck_assert_int_eq(count, N);
    /* Over the union of the shards: mean 0 and std 1; the constant feature is 0. */
    for (int j = 0; j < F; j++) {
        double mean = sum[j] / N, sd = sqrt(sq[j] / N - mean * mean);
        ck_assert_msg(fabs(mean) < 1e-6, "feature %d: mean %g", j, mean);
        if (j == CONSTANT)
            ck_assert_msg(sq[j] == 0, "constant feature: sum of squares %g", sq[j]);
        else
            ck_assert_msg(fabs(sd - 1) < 1e-5, "feature %d: std %g", j, sd);
    }
    dt_test_tempdir_free(dir);
}
END_TEST

START_TEST(test_eval_uses_train_stats) {
    enum { N = 40, M = 7, F = 3 };
    const float shift = 10; /* the held-out set sits elsewhere than the training set */
    dt_log_set_level(DT_LOG_WARN);
    char *dir = dt_test_tempdir();
    const char *train = file_in(dir, "train.csv"), *eval = file_in(dir, "eval.csv");
    write_csv(train, N, F, -1, 0);
    write_csv(eval, M, F, -1, shift);
    dt_job job = file_job(DT_DATA_CSV, train, F);
    snprintf(job.data.eval_data, sizeof job.data.eval_data, "%s", eval);

    static const dt_scale scales[] = {DT_SCALE_STANDARDIZE, DT_SCALE_DIVIDE, DT_SCALE_NONE};
    for (int sc = 0; sc < 3; sc++) {
        job.data.scale = scales[sc];
        job.data.scale_divisor = 4;
        dt_dataset *ds = NULL;
        dt_err err = {0};
        ck_assert_msg(dt_job_open_eval(&job, &ds, &err) == 0, "%s: %s", dt_scale_names[scales[sc]],
                      err.msg);
        ck_assert_int_eq(dt_data_total(ds), M);
        ck_assert_int_eq(dt_data_size(ds), M); /* not sharded */
        dt_batch all;
        ck_assert_msg(dt_data_all(ds, &all, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(all.rows, M);
        for (int i = 0; i < M; i++) {
            ck_assert_float_eq(all.y[i], (float)i);
            for (int j = 0; j < F; j++) {
                double raw = file_value(i, j, -1, shift), mean, sd, want = raw;
                file_stats(N, j, -1, 0, &mean, &sd); /* the TRAINING file's */
                if (sc == 0) want = (raw - mean) / sd;
                if (sc == 1) want = raw / 4;
                ck_assert_msg(fabs(all.x[i * F + j] - want) < 1e-5,
                              "%s: row %d feature %d: %g, want %g", dt_scale_names[scales[sc]], i,
                              j, all.x[i * F + j], want);
            }
        }
        if (sc == 0) {
            /* Scaled by the training set, the shifted held-out set is not centred. */
            double mean0 = 0;
            for (int i = 0; i < M; i++)
                mean0 += all.x[i * F];
            ck_assert_msg(mean0 / M > 1, "held-out mean %g", mean0 / M);
        }
        dt_batch b;
        ck_assert_int_eq(dt_data_next(ds, 100, &b, NULL), 0);
        ck_assert_int_eq(b.rows, M);
        dt_data_free(ds);
    }
    dt_test_tempdir_free(dir);
}
END_TEST

enum { OPEN_TRAIN, OPEN_EVAL, OPEN_UNLABELED };

/* The job's held-out data without its labels, as dt_job_open_eval opens it
 * with them: dt_data_open_unlabeled with the model's needs. (dtrain itself
 * opens it through dt_data_open_held_out, with a checkpoint's statistics.) */
static int open_unlabeled(const dt_job *job, dt_dataset **out, dt_err *err) {
    dt_data_needs needs;
    dt_model_data_needs(&job->model, &needs);
    return dt_data_open_unlabeled(&job->data, &needs, job->seed, out, err);
}

/* Opens with dt_data_open (OPEN_TRAIN, shard of num_shards),
 * dt_data_open_eval or dt_data_open_unlabeled, expecting code and a message
 * "data: ..." holding want. */
static void expect_code(const dt_job *job, int shard, int num_shards, int open, int code,
                        const char *want) {
    dt_dataset *ds = (dt_dataset *)&ds;
    dt_err err = {0};
    int rc = open == OPEN_EVAL        ? dt_job_open_eval(job, &ds, &err)
             : open == OPEN_UNLABELED ? open_unlabeled(job, &ds, &err)
                                      : dt_job_open_data(job, shard, num_shards, &ds, &err);
    ck_assert_msg(rc == code, "rc %d, want %d: %s", rc, code, err.msg);
    ck_assert_int_eq(err.code, code);
    ck_assert_ptr_null(ds);
    ck_assert_msg(strstr(err.msg, want) != NULL, "want \"%s\" in \"%s\"", want, err.msg);
    ck_assert_msg(strncmp(err.msg, "data: ", 6) == 0, "%s", err.msg);
}

START_TEST(test_file_errors) {
    dt_log_set_level(DT_LOG_ERROR); /* skip_bad_rows warns by design */
    char *dir = dt_test_tempdir();
    const char *train = file_in(dir, "train.csv"), *missing = file_in(dir, "missing.csv");
    write_csv(train, 3, 2, -1, 0);
    dt_job job = file_job(DT_DATA_CSV, missing, 2);
    /* A missing file is the config's error, named by the field that gives it. */
    expect_code(&job, 0, 1, OPEN_TRAIN, DT_ECONFIG, "data: \"train_data\": no such file: ");
    expect_code(&job, 0, 1, OPEN_TRAIN, DT_ECONFIG, "missing.csv");
    job.data.train_data[0] = '\0';
    expect_code(&job, 0, 1, OPEN_TRAIN, DT_EINVAL, "data: \"train_data\" is not set");
    job = file_job(DT_DATA_CSV, train, 2);
    expect_code(&job, 3, 4, OPEN_TRAIN, DT_EINVAL,
                "data: shard 3 of 4 is empty: only 3 examples in ");
    dt_dataset *ds = open_ok(&job, 2, 4); /* the last shard with a row */
    ck_assert_int_eq(dt_data_size(ds), 1);
    dt_data_free(ds);
    job.model.num_features = 3;
    expect_code(&job, 0, 1, OPEN_TRAIN, DT_ECONFIG,
                "train.csv:1: the header has 2 feature columns (3 columns less the label), but "
                "\"features\" is 3");
    job = file_job(DT_DATA_CSV, train, 2);
    job.data.scale = (dt_scale)7; /* what dt_job_finish would refuse by name */
    expect_code(&job, 0, 1, OPEN_TRAIN, DT_EINVAL, "data: \"scale\": unknown scaling 7");
    job.data.scale = DT_SCALE_DIVIDE;
    job.data.scale_divisor = 0;
    expect_code(&job, 0, 1, OPEN_TRAIN, DT_EINVAL,
                "data: \"scale_divisor\" must be a number > 0 (got 0)");
    job = file_job(DT_DATA_CSV, train, 2);
    job.model.kind = DT_MODEL_SOFTMAX; /* the label is the row index: 0, 1, 2 */
    /* A class past "classes" is the config's error (exit 2), not the data's. */
    expect_code(&job, 0, 1, OPEN_TRAIN, DT_ECONFIG,
                "train.csv:4: column \"target\": label 2 is not a class of 0..1: \"classes\" is "
                "2");
    job.data.skip_bad_rows = 1; /* the rest still trains */
    ds = open_ok(&job, 0, 1);
    ck_assert_int_eq(dt_data_total(ds), 2);
    dt_data_free(ds);

    /* The held-out set. */
    job = file_job(DT_DATA_CSV, train, 2);
    expect_code(&job, 0, 1, OPEN_EVAL, DT_EINVAL, "data: eval: \"eval_data\" is not set");
    snprintf(job.data.eval_data, sizeof job.data.eval_data, "%s", missing);
    expect_code(&job, 0, 1, OPEN_EVAL, DT_ECONFIG, "data: \"eval_data\": no such file: ");
    job.data.scale = DT_SCALE_STANDARDIZE; /* the training file is read first */
    job.data.train_data[0] = '\0';
    expect_code(&job, 0, 1, OPEN_EVAL, DT_EINVAL, "data: \"train_data\" is not set");
    dt_job line = job_of(DT_DATA_LINE, 1, 10, 0, 1);
    expect_code(&line, 0, 1, OPEN_EVAL, DT_EINVAL,
                "data: eval: the \"line\" source has no held-out set");

    /* A damaged idx file. */
    const char *img = file_in(dir, "img"), *lab = file_in(dir, "lab");
    FILE *f = fopen(img, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite("\0\0\x08\x01\0\0\0\x01", 1, 8, f), 8); /* a labels header */
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(dt_test_write_file(lab, "x"), 0);
    job = file_job(DT_DATA_IDX, img, 6);
    snprintf(job.data.train_labels, sizeof job.data.train_labels, "%s", lab);
    expect_code(&job, 0, 1, OPEN_TRAIN, DT_ECORRUPT, "img: bad magic number: expected 0x00000803");
    dt_test_tempdir_free(dir);
}
END_TEST

/* ---- held-out files without labels -------------------------------------- */

/* A libsvm file of n rows, every feature named (odd rows with a qid): with
 * labeled, the row index first as the label. */
static void write_svm(const char *path, int n, int F, float shift, int labeled) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "# %d rows\n", n);
    for (int i = 0; i < n; i++) {
        if (labeled) fprintf(f, "%d ", i);
        if (i % 2) fprintf(f, "qid:%d ", i);
        for (int j = 0; j < F; j++)
            fprintf(f, "%s%d:%.9g", j ? " " : "", j + 1, (double)file_value(i, j, -1, shift));
        fprintf(f, "\n");
    }
    ck_assert_int_eq(fclose(f), 0);
}

/* Opens job's held-out set with its labels, and `bare` (the same rows
 * without them; NULL: the same file with no labels file, for idx) with
 * dt_data_open_unlabeled. The features must be equal to the bit, in
 * dt_data_all and in an epoch of batches (same order: the shuffle depends on
 * the seed and the size only), and the unlabeled set has no y anywhere. */
static void same_features_as(const dt_job *job, const char *bare, int rows) {
    dt_job unlabeled = *job;
    if (bare) snprintf(unlabeled.data.eval_data, sizeof unlabeled.data.eval_data, "%s", bare);
    unlabeled.data.eval_labels[0] = '\0';
    dt_dataset *with = NULL, *without = NULL;
    dt_err err = {0};
    ck_assert_msg(dt_job_open_eval(job, &with, &err) == 0, "%s: %s",
                  dt_scale_names[job->data.scale], err.msg);
    ck_assert_msg(open_unlabeled(&unlabeled, &without, &err) == 0, "%s: %s",
                  dt_scale_names[job->data.scale], err.msg);
    ck_assert_int_eq(dt_data_total(without), rows);
    ck_assert_int_eq(dt_data_size(without), rows); /* not sharded */
    dt_batch a, b;
    ck_assert_msg(dt_data_all(with, &a, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_data_all(without, &b, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(b.rows, rows);
    ck_assert_int_eq(a.rows, rows);
    ck_assert_int_eq(b.cols, a.cols);
    ck_assert_ptr_nonnull(a.y);
    ck_assert_ptr_null(b.y);
    for (int k = 0; k < rows * a.cols; k++)
        ck_assert_msg(memcmp(&a.x[k], &b.x[k], sizeof(float)) == 0, "%s: value %d: %.9g vs %.9g",
                      dt_scale_names[job->data.scale], k, (double)a.x[k], (double)b.x[k]);
    int batches = 0;
    while (dt_data_epoch(without) == 0) {
        ck_assert_int_eq(dt_data_next(with, 3, &a, NULL), 0);
        ck_assert_int_eq(dt_data_next(without, 3, &b, NULL), 0);
        ck_assert_int_eq(b.rows, a.rows);
        ck_assert_ptr_nonnull(a.y);
        ck_assert_ptr_null(b.y);
        ck_assert_int_eq(memcmp(a.x, b.x, (size_t)b.rows * (size_t)b.cols * sizeof(float)), 0);
        batches++;
    }
    ck_assert_int_eq(batches, (rows + 2) / 3);
    dt_data_free(with);
    dt_data_free(without);
}

/* Opens job's held-out set without labels; *all gets every example, with
 * y NULL. */
static dt_dataset *unlabeled_ok(const dt_job *job, dt_batch *all) {
    dt_dataset *ds = NULL;
    dt_err err = {0};
    ck_assert_msg(open_unlabeled(job, &ds, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_data_all(ds, all, &err) == 0, "%s", err.msg);
    ck_assert_ptr_null(all->y);
    return ds;
}

/* same_features_as under each scaling: none, divide (by 4) and standardize. */
static void same_features(const dt_job *job, const char *bare, int rows) {
    static const dt_scale scales[] = {DT_SCALE_NONE, DT_SCALE_DIVIDE, DT_SCALE_STANDARDIZE};
    dt_job scaled = *job;
    scaled.data.scale_divisor = 4;
    for (int sc = 0; sc < 3; sc++) {
        scaled.data.scale = scales[sc];
        same_features_as(&scaled, bare, rows);
    }
}

START_TEST(test_unlabeled_same_features) {
    enum { N = 40, M = 7, F = 3 };
    const float shift = 10; /* the held-out set sits elsewhere than the training set */
    dt_log_set_level(DT_LOG_WARN);
    char *dir = dt_test_tempdir();
    ck_assert_ptr_nonnull(dir);
    const char *train = file_in(dir, "train.csv"), *eval = file_in(dir, "eval.csv"),
               *bare = file_in(dir, "bare.csv");
    write_csv(train, N, F, -1, 0);
    write_csv(eval, M, F, -1, shift);
    write_csv_as(bare, M, F, -1, shift, 0);
    dt_job job = file_job(DT_DATA_CSV, train, F);
    snprintf(job.data.eval_data, sizeof job.data.eval_data, "%s", eval);
    same_features(&job, bare, M);
    /* The label column by index: the bare file has one column fewer. */
    strcpy(job.data.label_column, "0");
    same_features(&job, bare, M);

    /* libsvm: the same rows with and without a label first. */
    train = file_in(dir, "train.svm");
    eval = file_in(dir, "eval.svm");
    bare = file_in(dir, "bare.svm");
    write_svm(train, N, F, 0, 1);
    write_svm(eval, M, F, shift, 1);
    write_svm(bare, M, F, shift, 0);
    job = file_job(DT_DATA_LIBSVM, train, F);
    snprintf(job.data.eval_data, sizeof job.data.eval_data, "%s", eval);
    same_features(&job, bare, M);

    /* idx: the fixture's images with and without their labels file. */
    job = idx_fixture_job();
    snprintf(job.data.eval_data, sizeof job.data.eval_data, "%s", job.data.train_data);
    snprintf(job.data.eval_labels, sizeof job.data.eval_labels, "%s", job.data.train_labels);
    same_features(&job, NULL, 3);
    /* Divided, the values are the pixels / 255 (image 2 holds 250..255). */
    job.data.eval_labels[0] = '\0';
    job.data.scale = DT_SCALE_DIVIDE;
    job.data.scale_divisor = 255;
    dt_batch all;
    dt_dataset *ds = unlabeled_ok(&job, &all);
    ck_assert_int_eq(all.rows, 3);
    for (int j = 0; j < 6; j++)
        ck_assert_float_eq_tol(all.x[2 * 6 + j], (float)(250 + j) / 255.0f, 1e-7f);
    dt_data_free(ds);
    dt_test_tempdir_free(dir);
}
END_TEST

/* Labeled layouts, bad rows and missing files, opened without labels: the
 * reader's file:line message behind "data: ". */
START_TEST(test_unlabeled_errors) {
    enum { F = 3 };
    dt_log_set_level(DT_LOG_ERROR); /* skip_bad_rows warns by design */
    char *dir = dt_test_tempdir();
    ck_assert_ptr_nonnull(dir);
    const char *train = file_in(dir, "train.csv"), *bare = file_in(dir, "bare.csv");
    write_csv(train, 5, F, -1, 0);
    write_csv_as(bare, 5, F, -1, 0, 0);
    dt_job job = file_job(DT_DATA_CSV, train, F);
    /* A labeled file, the label column named or by index. */
    snprintf(job.data.eval_data, sizeof job.data.eval_data, "%s", train);
    expect_code(&job, 0, 1, OPEN_UNLABELED, DT_EINVAL,
                "train.csv:1: column 0 is \"target\", the label column, but the file is read "
                "without labels");
    strcpy(job.data.label_column, "0");
    expect_code(&job, 0, 1, OPEN_UNLABELED, DT_ECONFIG,
                "train.csv:1: the header has 4 columns, but without labels there is one per "
                "feature and \"features\" is 3 (one more: a label column?)");
    /* A row with one field too many: a label? */
    const char *extra = file_in(dir, "extra.csv");
    ck_assert_int_eq(dt_test_write_file(extra, "a,b,c\n1,2,3\n\n4,5,6\n0,7,8,9\n"), 0);
    snprintf(job.data.eval_data, sizeof job.data.eval_data, "%s", extra);
    expect_code(&job, 0, 1, OPEN_UNLABELED, DT_EINVAL,
                "extra.csv:5: 4 fields, but the header has 3");
    /* The training file keeps its labels: standardize reads it with them. */
    snprintf(job.data.eval_data, sizeof job.data.eval_data, "%s", bare);
    strcpy(job.data.label_column, "target");
    job.data.scale = DT_SCALE_STANDARDIZE;
    snprintf(job.data.train_data, sizeof job.data.train_data, "%s", bare);
    expect_code(&job, 0, 1, OPEN_UNLABELED, DT_ECONFIG,
                "bare.csv:1: no column named \"target\" in the header");
    job = file_job(DT_DATA_CSV, train, F);
    expect_code(&job, 0, 1, OPEN_UNLABELED, DT_EINVAL, "data: eval: \"eval_data\" is not set");
    snprintf(job.data.eval_data, sizeof job.data.eval_data, "%s", file_in(dir, "missing.csv"));
    expect_code(&job, 0, 1, OPEN_UNLABELED, DT_ECONFIG, "\"eval_data\": no such file: ");
    dt_job line = job_of(DT_DATA_LINE, 1, 10, 0, 1);
    expect_code(&line, 0, 1, OPEN_UNLABELED, DT_EINVAL,
                "data: eval: the \"line\" source has no held-out set");

    /* libsvm: a row that starts with a label, named by line; skipped with
     * skip_bad_rows, the rest reads without labels. */
    const char *svm = file_in(dir, "u.svm");
    ck_assert_int_eq(dt_test_write_file(svm, "1:1 2:1\n\n0 1:1\nqid:2 3:-1\n"), 0);
    job = file_job(DT_DATA_LIBSVM, train, F);
    snprintf(job.data.eval_data, sizeof job.data.eval_data, "%s", svm);
    expect_code(&job, 0, 1, OPEN_UNLABELED, DT_EINVAL,
                "u.svm:3: \"0\" is not index:value (a label? the file is read without labels)");
    job.data.skip_bad_rows = 1;
    dt_batch all;
    dt_dataset *ds = unlabeled_ok(&job, &all);
    ck_assert_int_eq(all.rows, 2);
    static const float want[2 * F] = {1, 1, 0, 0, 0, -1};
    for (int k = 0; k < 2 * F; k++)
        ck_assert_float_eq(all.x[k], want[k]);
    dt_data_free(ds);

    /* idx: a labels file contradicts reading without labels. */
    const char *img = file_in(dir, "img"), *lab = file_in(dir, "lab");
    ck_assert_int_eq(dt_test_write_file(img, "x"), 0);
    ck_assert_int_eq(dt_test_write_file(lab, "x"), 0);
    job = file_job(DT_DATA_IDX, img, 6);
    snprintf(job.data.eval_data, sizeof job.data.eval_data, "%s", img);
    snprintf(job.data.eval_labels, sizeof job.data.eval_labels, "%s", lab);
    expect_code(&job, 0, 1, OPEN_UNLABELED, DT_EINVAL,
                "given, but the images are read without labels");
    job.data.eval_labels[0] = '\0';
    expect_code(&job, 0, 1, OPEN_UNLABELED, DT_ECORRUPT, "img: ");
    dt_test_tempdir_free(dir);
}
END_TEST

/* One role's job from a job file's text: the defaults, the text, finish. */
/* ---- the validation split ------------------------------------------------- */

/* A csv of n rows: label i % classes (column "target"), f0 = i (so a row
 * says which it is), f1 = 3 i + 1. */
static void write_split_csv(const char *path, int n, int classes) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "target,f0,f1\n");
    for (int i = 0; i < n; i++)
        fprintf(f, "%d,%d,%d\n", i % classes, i, 3 * i + 1);
    ck_assert_int_eq(fclose(f), 0);
}

/* Marks in rows[] (count n, zeroed by the caller) each row of ds by its f0,
 * unscaled by (mean, sd) of f0 when sd > 0; returns the rows seen. */
static int mark_rows(dt_dataset *ds, int *rows, int n, double mean, double sd) {
    dt_batch all;
    dt_err err = {0};
    ck_assert_msg(dt_data_all(ds, &all, &err) == 0, "%s", err.msg);
    for (int k = 0; k < all.rows; k++) {
        double x = all.x[k * 2];
        int i = (int)lround(sd > 0 ? x * sd + mean : x);
        ck_assert_msg(i >= 0 && i < n, "row %d: f0 %g", k, x);
        rows[i]++;
    }
    return all.rows;
}

/* The split of a file of N rows into training (all shards) and validation
 * rows: disjoint, covering, each class held out in proportion, the same
 * for every open, another for another seed. */
START_TEST(test_validation_split) {
    enum { N = 50, K = 3 };
    dt_log_set_level(DT_LOG_WARN);
    char *dir = dt_test_tempdir();
    const char *train = file_in(dir, "train.csv");
    write_split_csv(train, N, K);
    dt_job job = file_job(DT_DATA_CSV, train, 2);
    job.model.kind = DT_MODEL_SOFTMAX;
    job.model.num_classes = K;
    job.data.validation_fraction = 0.2;
    ck_assert(dt_data_splits(&job.data) && dt_data_has_held_out(&job.data));
    ck_assert_str_eq(dt_data_held_out_file(&job.data), train);
    int held_first[N] = {0};
    for (int ns = 1; ns <= 3; ns++) {
        int seen[N] = {0}, held[N] = {0};
        for (int s = 0; s < ns; s++) {
            dt_dataset *ds = open_ok(&job, s, ns);
            ck_assert_int_eq(dt_data_total(ds), N - 9); /* round(0.2 * (17, 17, 16)) = 3 each */
            mark_rows(ds, seen, N, 0, 0);
            dt_data_free(ds);
        }
        dt_dataset *v = NULL;
        dt_err err = {0};
        ck_assert_msg(dt_job_open_eval(&job, &v, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(mark_rows(v, held, N, 0, 0), 9);
        dt_batch all;
        ck_assert_int_eq(dt_data_all(v, &all, &err), 0);
        int per_class[K] = {0};
        for (int k = 0; k < all.rows; k++) {
            ck_assert_float_eq(all.y[k], (float)((int)all.x[k * 2] % K)); /* rows stay whole */
            per_class[(int)all.y[k]]++;
        }
        for (int c = 0; c < K; c++)
            ck_assert_msg(per_class[c] == 3, "class %d: %d held out", c, per_class[c]);
        dt_data_free(v);
        for (int i = 0; i < N; i++) {
            ck_assert_msg(seen[i] + held[i] == 1, "%d shards: row %d trained %d, held %d", ns, i,
                          seen[i], held[i]);
            if (ns == 1) held_first[i] = held[i];
            ck_assert_msg(held[i] == held_first[i], "row %d: another split for %d shards", i, ns);
        }
    }
    /* Another seed, another draw (of C(17,3)^2 C(16,3) splits). */
    job.seed = 22;
    dt_dataset *v = NULL;
    dt_err err = {0};
    ck_assert_msg(dt_job_open_eval(&job, &v, &err) == 0, "%s", err.msg);
    int held[N] = {0}, differ = 0;
    mark_rows(v, held, N, 0, 0);
    dt_data_free(v);
    for (int i = 0; i < N; i++)
        differ += held[i] != held_first[i];
    ck_assert_msg(differ > 0, "seed 22 held out the rows seed 21 did");
    /* Real targets: a fifth of all rows, whatever their values. */
    job.model.kind = DT_MODEL_LINEAR;
    ck_assert_msg(dt_job_open_eval(&job, &v, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(dt_data_total(v), N / 5);
    dt_data_free(v);
    dt_test_tempdir_free(dir);
}
END_TEST

/* Standardize's statistics are the training rows' alone; the validation
 * rows are scaled with them, as a held-out file is. */
START_TEST(test_validation_split_stats) {
    enum { N = 40 };
    dt_log_set_level(DT_LOG_WARN);
    char *dir = dt_test_tempdir();
    const char *train = file_in(dir, "train.csv");
    write_split_csv(train, N, 2);
    dt_job job = file_job(DT_DATA_CSV, train, 2);
    job.data.validation_fraction = 0.25;
    job.data.scale = DT_SCALE_STANDARDIZE;
    dt_dataset *ds = open_ok(&job, 0, 1);
    dt_data_stats st;
    dt_data_stats_of(ds, &st);
    ck_assert_int_eq(st.num_features, 2);
    /* Unscale the rows by the statistics to find them, then take the
     * statistics of the rows found: they must be the ones recorded. */
    int seen[N] = {0}, held[N] = {0};
    ck_assert_int_eq(mark_rows(ds, seen, N, st.mean[0], st.std[0]), N - 10);
    double sum = 0, sq = 0;
    for (int i = 0; i < N; i++)
        sum += seen[i] ? i : 0;
    const double mean = sum / (N - 10);
    for (int i = 0; i < N; i++)
        sq += seen[i] ? (i - mean) * (i - mean) : 0;
    ck_assert_msg(fabs(st.mean[0] - mean) < 1e-9, "mean %g, want %g", st.mean[0], mean);
    ck_assert_msg(fabs(st.std[0] - sqrt(sq / (N - 10))) < 1e-9, "std %g", st.std[0]);
    dt_dataset *v = NULL;
    dt_err err = {0};
    ck_assert_msg(dt_job_open_eval(&job, &v, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(mark_rows(v, held, N, mean, st.std[0]), 10);
    for (int i = 0; i < N; i++)
        ck_assert_msg(seen[i] + held[i] == 1, "row %d trained %d, held %d", i, seen[i], held[i]);
    dt_data_free(v);
    dt_data_free(ds);
    dt_test_tempdir_free(dir);
}
END_TEST

/* A split with no row on one side, and a split asked for without labels. */
START_TEST(test_validation_split_errors) {
    dt_log_set_level(DT_LOG_ERROR);
    char *dir = dt_test_tempdir();
    const char *train = file_in(dir, "train.csv");
    write_split_csv(train, 5, 2);
    dt_job job = file_job(DT_DATA_CSV, train, 2);
    job.data.validation_fraction = 0.05; /* round(0.25) = 0 of 5 */
    expect_code(&job, 0, 1, OPEN_TRAIN, DT_ECONFIG, "\"validation_fraction\" 0.05 of the 5 rows");
    expect_code(&job, 0, 1, OPEN_EVAL, DT_ECONFIG, "holds out 0");
    write_split_csv(train, 1, 2);
    job.data.validation_fraction = 0.9; /* the one row must stay to train on */
    expect_code(&job, 0, 1, OPEN_EVAL, DT_ECONFIG, "at least one row on each side");
    write_split_csv(train, 20, 2);
    expect_code(&job, 0, 1, OPEN_UNLABELED, DT_EINVAL, "with their labels");
    job.data.validation_fraction = 0;
    expect_code(&job, 0, 1, OPEN_EVAL, DT_EINVAL, "\"eval_data\" is not set");
    dt_test_tempdir_free(dir);
}
END_TEST

static void job_from(const char *text, dt_job *job) {
    dt_err err = {0};
    dt_job_defaults(job);
    ck_assert_msg(dt_job_parse(text, "t.json", job, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_job_finish(job, &err) == 0, "%s", err.msg);
}

static void expect_infer_error(dt_job *job, int code, const char *n1, const char *n2) {
    dt_err err = {0};
    int rc = dt_job_infer(job, &err);
    ck_assert_msg(rc == code, "rc %d (%s), want %d: %s", rc, dt_err_name(rc), code, err.msg);
    ck_assert_msg(strstr(err.msg, n1) && (!n2 || strstr(err.msg, n2)),
                  "want \"%s\" and \"%s\" in \"%s\"", n1, n2 ? n2 : "", err.msg);
}

/* A job of file data that leaves "features" and "classes" unset takes them
 * from its training file, the same for every role that reads it, and
 * carries them from then on; a value it sets is held to the data by the
 * read, naming the file and both numbers; a missing file names its field. */
START_TEST(test_job_infer) {
    dt_log_set_level(DT_LOG_ERROR);
    char *dir = dt_test_tempdir();
    const char *train = file_in(dir, "t.csv");
    ck_assert_int_eq(dt_test_write_file(train, "a,label,b,c\n1,0,1,1\n2,2,1,1\n3,1,1,1\n4,2,0,0\n"),
                     0);
    char text[2048];
    snprintf(text, sizeof text,
             "{\"model\": \"softmax\", \"data\": \"csv\", \"train_data\": \"%s\", "
             "\"label_column\": \"label\", \"max_steps\": 10}",
             train);
    dt_job job, other;
    job_from(text, &job);
    ck_assert_int_eq(job.model.num_features, 0);
    ck_assert_int_eq(job.model.num_classes, 0);
    ck_assert(dt_job_shape_unset(&job)); /* what a ps runs with */
    /* Written out, an unset field stays unset when read back. */
    char *json = NULL;
    dt_err err = {0};
    ck_assert_msg(dt_job_to_json(&job, &json, &err) == 0, "%s", err.msg);
    ck_assert_msg(strstr(json, "\"features\"") == NULL && strstr(json, "\"classes\"") == NULL, "%s",
                  json);
    dt_job_defaults(&other);
    ck_assert_msg(dt_job_parse(json, "json", &other, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(other.model.num_features, 0);
    free(json);

    dt_job unset = job;
    ck_assert_msg(dt_job_infer(&job, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(job.model.num_features, 3);
    ck_assert_int_eq(job.model.num_classes, 3);
    ck_assert(!dt_job_shape_unset(&job));
    job_from(text, &other); /* another role: the same file, the same shape */
    ck_assert_msg(dt_job_infer(&other, &err) == 0, "%s", err.msg);
    ck_assert(memcmp(&other.model, &job.model, sizeof job.model) == 0);
    dt_dataset *ds = open_ok(&job, 0, 1);
    ck_assert_int_eq(dt_data_total(ds), 4);
    dt_data_free(ds);
    ck_assert_msg(dt_job_to_json(&job, &json, &err) == 0, "%s", err.msg);
    ck_assert_msg(strstr(json, "\"features\":3,\"classes\":3"), "%s", json);
    free(json);
    char diff[256];
    ck_assert_int_eq(dt_job_diff(&unset, &job, dt_job_model_fields, diff, sizeof diff), 2);
    ck_assert_str_eq(diff, "\"features\" (not set) -> 3, \"classes\" (not set) -> 3");

    /* Binary and linear models have their classes; only features are read. */
    snprintf(text, sizeof text,
             "{\"model\": \"logistic\", \"data\": \"csv\", \"train_data\": \"%s\", "
             "\"label_column\": \"label\", \"max_steps\": 10}",
             train);
    job_from(text, &job);
    ck_assert_int_eq(job.model.num_classes, 2);
    ck_assert_msg(dt_job_infer(&job, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(job.model.num_features, 3);

    /* libsvm: the largest index of any row; -1/+1 labels for a binary model. */
    const char *svm = file_in(dir, "t.svm");
    ck_assert_int_eq(dt_test_write_file(svm, "-1 1:1 3:1\n+1 2:1 7:0.5\n-1 4:2\n"), 0);
    snprintf(text, sizeof text,
             "{\"model\": \"logistic\", \"data\": \"libsvm\", \"train_data\": \"%s\", "
             "\"max_steps\": 10}",
             svm);
    job_from(text, &job);
    ck_assert_msg(dt_job_infer(&job, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(job.model.num_features, 7);
    ds = open_ok(&job, 0, 1);
    ck_assert_int_eq(dt_data_total(ds), 3);
    dt_data_free(ds);

    /* Set values are not replaced; the read holds them to the file. */
    snprintf(text, sizeof text,
             "{\"model\": \"softmax\", \"features\": 5, \"classes\": 2, \"data\": \"csv\", "
             "\"train_data\": \"%s\", \"label_column\": \"label\", \"max_steps\": 10}",
             train);
    job_from(text, &job);
    ck_assert_msg(dt_job_infer(&job, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(job.model.num_features, 5);
    expect_code(&job, 0, 1, OPEN_TRAIN, DT_ECONFIG,
                "t.csv:1: the header has 3 feature columns (4 columns less the label), but "
                "\"features\" is 5");
    job.model.num_features = 0;
    ck_assert_msg(dt_job_infer(&job, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(job.model.num_classes, 2);
    expect_code(&job, 0, 1, OPEN_TRAIN, DT_ECONFIG,
                "t.csv:3: column \"label\": label 2 is not a class of 0..1: \"classes\" is 2");

    /* Labels that do not say the classes; a missing file, by its field. */
    const char *gap = file_in(dir, "gap.csv");
    ck_assert_int_eq(dt_test_write_file(gap, "label,a\n1,0\n2,0\n"), 0);
    job.model.num_classes = 0;
    snprintf(job.data.train_data, sizeof job.data.train_data, "%s", gap);
    expect_infer_error(&job, DT_ECONFIG, "job: taking \"classes\" from the training data: data: ",
                       "gap.csv: the labels run up to 2, but no row has class 0");
    job.model.num_features = 0;
    snprintf(job.data.train_data, sizeof job.data.train_data, "%s", file_in(dir, "none.csv"));
    expect_infer_error(&job, DT_ECONFIG,
                       "job: taking \"features\" and \"classes\" from the training data: data: "
                       "\"train_data\": no such file: ",
                       "none.csv");
    job.data.source = DT_DATA_IDX;
    char images[1024];
    snprintf(images, sizeof images, "%s/readers/small-images-idx3-ubyte",
             getenv("DT_TEST_DATA") && *getenv("DT_TEST_DATA") ? getenv("DT_TEST_DATA")
                                                               : "test/data");
    snprintf(job.data.train_data, sizeof job.data.train_data, "%s", images);
    snprintf(job.data.train_labels, sizeof job.data.train_labels, "%s", file_in(dir, "no-labels"));
    expect_infer_error(&job, DT_ECONFIG, "data: \"train_labels\": no such file: ", "no-labels");
    dt_test_tempdir_free(dir);
}
END_TEST

Suite *data_suite(void) {
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("data");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_line_values);
    tcase_add_test(tc, test_line_noise);
    tcase_add_test(tc, test_shards);
    tcase_add_test(tc, test_shuffle);
    tcase_add_test(tc, test_epochs_and_short_batch);
    tcase_add_test(tc, test_seek);
    tcase_add_test(tc, test_wide);
    tcase_add_test(tc, test_wide_golden);
    tcase_add_test(tc, test_wide_noise_and_weights);
    tcase_add_test(tc, test_bad_args);
    tcase_add_test(tc, test_normal);
    tcase_add_test(tc, test_normals_bulk);
    suite_add_tcase(s, tc);

    TCase *files = tcase_create("files");
    tcase_add_unchecked_fixture(files, files_setup, dt_test_tmp_end);
    tcase_set_timeout(files, 60);
    tcase_add_test(files, test_file_shards);
    tcase_add_test(files, test_file_divide);
    tcase_add_test(files, test_file_standardize);
    tcase_add_test(files, test_eval_uses_train_stats);
    tcase_add_test(files, test_file_errors);
    tcase_add_test(files, test_unlabeled_same_features);
    tcase_add_test(files, test_unlabeled_errors);
    tcase_add_test(files, test_job_infer);
    tcase_add_test(files, test_validation_split);
    tcase_add_test(files, test_validation_split_stats);
    tcase_add_test(files, test_validation_split_errors);
    suite_add_tcase(s, files);
    return s;
}
