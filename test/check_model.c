/*
 * model suite: variable specs, seeded init, the linear loss on a batch worked
 * out by hand, gradients against central finite differences of a double
 * precision loss, bad inputs, the least-squares helper, and a short SGD run
 * over the line data that must land on the least-squares fit.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "model.h"
#include "optim.h"
#include "suites.h"

static dt_job job_of(const char *model, int features, uint64_t seed) {
    dt_job job;
    memset(&job, 0, sizeof job);
    strcpy(job.model, model);
    strcpy(job.data, "line");
    job.num_features = features;
    job.num_examples = 100;
    job.seed = seed;
    job.batch_size = 10;
    return job;
}

/* Variables for job via dt_model_specs, zero-filled. */
static void vars_of(const dt_job *job, dt_tensors *ts) {
    dt_tensor specs[DT_MODEL_MAX_VARS];
    int count = -1;
    dt_err err = {0};
    ck_assert_msg(dt_model_specs(job, specs, &count, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_tensors_init(ts, specs, count, &err) == 0, "%s", err.msg);
}

static float *weight(const dt_tensors *ts) { return ts->items[0].data; }
static float *bias(const dt_tensors *ts) { return ts->items[1].data; }

/* mean_i (x_i . w + b - y_i)^2, all in double. */
static double loss_f64(const double *w, double b, const float *x, const float *y, int B, int F) {
    double sum = 0;
    for (int i = 0; i < B; i++) {
        double pred = b;
        for (int j = 0; j < F; j++) pred += (double)x[i * F + j] * w[j];
        sum += (pred - y[i]) * (pred - y[i]);
    }
    return sum / B;
}

static double uniform(uint64_t *state) {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*state >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

START_TEST(test_specs) {
    dt_job job = job_of("linear", 5, 1);
    dt_tensor specs[DT_MODEL_MAX_VARS];
    int count = -1;
    dt_err err = {0};
    ck_assert_int_eq(dt_model_specs(&job, specs, &count, &err), 0);
    ck_assert_int_eq(count, 2);
    ck_assert_str_eq(specs[0].name, "linear/weight");
    ck_assert_int_eq(specs[0].dtype, DT_DTYPE_F32);
    ck_assert_int_eq(specs[0].ndim, 2);
    ck_assert_int_eq(specs[0].shape[0], 5);
    ck_assert_int_eq(specs[0].shape[1], 1);
    ck_assert_uint_eq(specs[0].nbytes, 20);
    ck_assert_ptr_null(specs[0].data);
    ck_assert_str_eq(specs[1].name, "linear/bias");
    ck_assert_int_eq(specs[1].dtype, DT_DTYPE_F32);
    ck_assert_int_eq(specs[1].ndim, 1);
    ck_assert_int_eq(specs[1].shape[0], 1);
    ck_assert_uint_eq(specs[1].nbytes, 4);

    char buf[64];
    dt_model_describe(&job, buf, sizeof buf);
    ck_assert_str_eq(buf, "linear features=5");
    dt_model_describe(&job, buf, 7); /* truncates, stays terminated */
    ck_assert_str_eq(buf, "linear");
}
END_TEST

START_TEST(test_specs_errors) {
    dt_tensor specs[DT_MODEL_MAX_VARS];
    int count = -1;
    dt_err err = {0};
    dt_job job = job_of("mlp", 5, 1);
    ck_assert_int_eq(dt_model_specs(&job, specs, &count, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "model: \"model\": unknown model \"mlp\" (want linear)");
    ck_assert_int_eq(count, 0);
    /* A name that fills the field without a NUL is read no further. */
    memset(job.model, 'x', sizeof job.model);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_specs(&job, specs, &count, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown model"));
    job = job_of("linear", 0, 1);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_specs(&job, specs, &count, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "model: \"num_features\" must be >= 1 (got 0)");
    ck_assert_int_eq(dt_model_specs(&job, specs, &count, NULL), DT_EINVAL);
}
END_TEST

START_TEST(test_init) {
    const int F = 10000;
    dt_job job = job_of("linear", F, 21);
    dt_tensors a, b, c;
    vars_of(&job, &a);
    vars_of(&job, &b);
    bias(&a)[0] = bias(&b)[0] = 9.0f; /* init must reset it */
    dt_model_init(&job, &a);
    dt_model_init(&job, &b);
    ck_assert_int_eq(memcmp(a.slab, b.slab, a.slab_bytes), 0);
    ck_assert_float_eq(bias(&a)[0], 0.0f);
    job.seed = 22;
    vars_of(&job, &c);
    dt_model_init(&job, &c);
    int differ = 0;
    double sum = 0, sum_sq = 0;
    for (int j = 0; j < F; j++) {
        differ += weight(&a)[j] != weight(&c)[j];
        sum += weight(&a)[j];
        sum_sq += (double)weight(&a)[j] * weight(&a)[j];
    }
    ck_assert_int_gt(differ, F * 99 / 100);
    /* N(0, 1/sqrt(F)): variance 1/F. */
    double mean = sum / F, var = sum_sq / F - mean * mean;
    ck_assert_msg(fabs(mean) < 5.0 / F, "mean %g", mean);
    ck_assert_msg(fabs(var * F - 1) < 0.05, "var * F = %g", var * F);
    dt_tensors_deinit(&a);
    dt_tensors_deinit(&b);
    dt_tensors_deinit(&c);
}
END_TEST

START_TEST(test_init_apart_from_data) {
    /* The model's stream is not the data's: the wide source's true weights
     * with the same seed are not (a multiple of) the initial weights. */
    const int F = 64;
    dt_job job = job_of("linear", F, 5);
    strcpy(job.data, "wide");
    dt_dataset *ds = NULL;
    ck_assert_int_eq(dt_data_open(&job, 0, 1, &ds, NULL), 0);
    dt_tensors v;
    vars_of(&job, &v);
    dt_model_init(&job, &v);
    const float *w_true = dt_data_true_weights(ds);
    double dot = 0, n1 = 0, n2 = 0;
    for (int j = 0; j < F; j++) {
        dot += (double)w_true[j] * weight(&v)[j];
        n1 += (double)w_true[j] * w_true[j];
        n2 += (double)weight(&v)[j] * weight(&v)[j];
    }
    ck_assert_msg(fabs(dot / sqrt(n1 * n2)) < 0.5, "correlation %g", dot / sqrt(n1 * n2));
    dt_tensors_deinit(&v);
    dt_data_free(ds);
}
END_TEST

START_TEST(test_loss_golden) {
    /* Worked by hand: W = (1, -2), b = 0.5,
     *   X = [[1, 2], [0, 1], [-1, 0.5]], y = (0, 1, 2)
     *   pred = (-2.5, -1.5, -1.5), r = pred - y = (-2.5, -2.5, -3.5)
     *   loss = (6.25 + 6.25 + 12.25) / 3 = 8.25
     *   dW = (2/3) X^T r = (2/3) (1, -9.25); db = (2/3) (-8.5) */
    dt_job job = job_of("linear", 2, 1);
    dt_tensors v, g;
    vars_of(&job, &v);
    vars_of(&job, &g);
    weight(&v)[0] = 1.0f;
    weight(&v)[1] = -2.0f;
    bias(&v)[0] = 0.5f;
    static const float x[] = {1, 2, 0, 1, -1, 0.5f}, y[] = {0, 1, 2};
    dt_batch b = {.rows = 3, .cols = 2, .x = x, .y = y};
    double loss = 0;
    dt_err err = {0};
    ck_assert_int_eq(dt_model_loss_grad(&job, &v, &b, &g, &loss, &err), 0);
    ck_assert_double_eq_tol(loss, 8.25, 1e-6);
    ck_assert_float_eq_tol(weight(&g)[0], 2.0f / 3, 1e-6f);
    ck_assert_float_eq_tol(weight(&g)[1], -9.25f * 2 / 3, 1e-5f);
    ck_assert_float_eq_tol(bias(&g)[0], -8.5f * 2 / 3, 1e-5f);
    /* Loss only. */
    loss = 0;
    ck_assert_int_eq(dt_model_loss_grad(&job, &v, &b, NULL, &loss, &err), 0);
    ck_assert_double_eq_tol(loss, 8.25, 1e-6);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
}
END_TEST

/* Analytic gradient of a random batch against central differences of the
 * double-precision loss. The loss is quadratic, so central differences are
 * exact up to rounding and the tolerance can be tight. */
static void check_fd(int F, int B, uint64_t seed) {
    dt_job job = job_of("linear", F, seed);
    dt_tensors v, g;
    vars_of(&job, &v);
    vars_of(&job, &g);
    dt_model_init(&job, &v);
    uint64_t st = seed;
    bias(&v)[0] = (float)uniform(&st);
    float *x = malloc((size_t)B * F * sizeof *x), *y = malloc((size_t)B * sizeof *y);
    double *w = malloc((size_t)F * sizeof *w);
    ck_assert(x && y && w);
    for (int i = 0; i < B * F; i++) x[i] = (float)uniform(&st);
    for (int i = 0; i < B; i++) y[i] = (float)(3 * uniform(&st));
    for (int j = 0; j < F; j++) w[j] = weight(&v)[j];
    double b0 = bias(&v)[0];

    dt_batch b = {.rows = B, .cols = F, .x = x, .y = y};
    double loss = 0;
    dt_err err = {0};
    ck_assert_msg(dt_model_loss_grad(&job, &v, &b, &g, &loss, &err) == 0, "%s", err.msg);
    double want = loss_f64(w, b0, x, y, B, F);
    ck_assert_msg(fabs(loss - want) <= 1e-5 * want, "loss %.9g want %.9g", loss, want);

    const double h = 1e-3;
    double worst = 0;
    for (int j = 0; j < F; j++) {
        double keep = w[j];
        w[j] = keep + h;
        double up = loss_f64(w, b0, x, y, B, F);
        w[j] = keep - h;
        double down = loss_f64(w, b0, x, y, B, F);
        w[j] = keep;
        double fd = (up - down) / (2 * h);
        double diff = fabs(weight(&g)[j] - fd) / (1e-3 + fabs(fd));
        if (diff > worst) worst = diff;
        ck_assert_msg(diff < 1e-4, "F %d: dW[%d] = %.7g, finite difference %.7g", F, j,
                      weight(&g)[j], fd);
    }
    double fd_b = (loss_f64(w, b0 + h, x, y, B, F) - loss_f64(w, b0 - h, x, y, B, F)) / (2 * h);
    ck_assert_msg(fabs(bias(&g)[0] - fd_b) < 1e-4 * (1e-3 + fabs(fd_b)), "db = %.7g, fd %.7g",
                  bias(&g)[0], fd_b);
    free(x);
    free(y);
    free(w);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
}

START_TEST(test_grad_fd) {
    check_fd(5, 7, 3);
    check_fd(1, 1, 4);
    check_fd(300, 33, 5); /* BLAS's blocked paths */
}
END_TEST

START_TEST(test_loss_errors) {
    dt_job job = job_of("linear", 3, 1);
    dt_tensors v, g, other;
    vars_of(&job, &v);
    vars_of(&job, &g);
    static const float x[6] = {0}, y[3] = {0};
    dt_batch b = {.rows = 2, .cols = 2, .x = x, .y = y};
    double loss = 0;
    dt_err err = {0};
    ck_assert_int_eq(dt_model_loss_grad(&job, &v, &b, &g, &loss, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "model: linear: batch has 2 features, \"num_features\" is 3");
    ck_assert(isnan(loss));

    b.cols = 3;
    b.rows = 0;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_loss_grad(&job, &v, &b, &g, &loss, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "empty batch"));

    /* Variables shaped for another F. */
    b.rows = 2;
    dt_job job4 = job_of("linear", 4, 1);
    vars_of(&job4, &other);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_loss_grad(&job, &other, &b, &g, &loss, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "model: linear: variables 0: want linear/weight F32 (3, 1), "
                              "got linear/weight F32 (4, 1)");
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_loss_grad(&job, &v, &b, &other, &loss, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "gradients 0"));
    /* Too few tensors. */
    other.count = 1;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_loss_grad(&job4, &other, &b, NULL, &loss, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "model: linear: 1 variables, want 2");
    other.count = 2;
    /* Unknown model at loss time. */
    strcpy(job.model, "softmax");
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_loss_grad(&job, &v, &b, &g, &loss, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "\"model\""));
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
    dt_tensors_deinit(&other);
}
END_TEST

START_TEST(test_lstsq) {
    /* Exact line y = 2x + 1. */
    static const float x[] = {0, 1, 2, 3}, y[] = {1, 3, 5, 7};
    dt_batch b = {.rows = 4, .cols = 1, .x = x, .y = y};
    double w = 0, c = 0;
    dt_err err = {0};
    ck_assert_int_eq(dt_model_lstsq_line(&b, &w, &c, &err), 0);
    ck_assert_double_eq_tol(w, 2.0, 1e-12);
    ck_assert_double_eq_tol(c, 1.0, 1e-12);
    /* Golden off-line fit: (0,0), (1,1), (2,1): w = 1/2, b = 1/6. */
    static const float y2[] = {0, 1, 1};
    dt_batch b2 = {.rows = 3, .cols = 1, .x = x, .y = y2};
    ck_assert_int_eq(dt_model_lstsq_line(&b2, &w, &c, &err), 0);
    ck_assert_double_eq_tol(w, 0.5, 1e-12);
    ck_assert_double_eq_tol(c, 1.0 / 6, 1e-12);

    /* The line data set recovers y = 2x, and the residuals are orthogonal
     * to (1, x) as least squares requires. */
    dt_job job = job_of("linear", 1, 8);
    job.num_examples = 1000;
    job.noise = 0.1;
    dt_dataset *ds = NULL;
    ck_assert_int_eq(dt_data_open(&job, 0, 1, &ds, NULL), 0);
    dt_batch all;
    ck_assert_int_eq(dt_data_all(ds, &all, NULL), 0);
    ck_assert_int_eq(dt_model_lstsq_line(&all, &w, &c, &err), 0);
    ck_assert_msg(fabs(w - 2) < 0.03 && fabs(c) < 0.02, "w %g b %g", w, c);
    double sr = 0, srx = 0;
    for (int i = 0; i < all.rows; i++) {
        double r = all.y[i] - (w * all.x[i] + c);
        sr += r;
        srx += r * all.x[i];
    }
    ck_assert_double_eq_tol(sr, 0, 1e-9);
    ck_assert_double_eq_tol(srx, 0, 1e-9);
    dt_data_free(ds);

    /* Errors. */
    b.cols = 2;
    ck_assert_int_eq(dt_model_lstsq_line(&b, &w, &c, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "model: lstsq: batch has 2 features, want 1");
    ck_assert(isnan(w) && isnan(c));
    b.cols = 1;
    b.rows = 1;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_lstsq_line(&b, &w, &c, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "at least 2 examples"));
    static const float same[] = {4, 4, 4};
    dt_batch flat = {.rows = 3, .cols = 1, .x = same, .y = y};
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_lstsq_line(&flat, &w, &c, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "every x is the same"));
}
END_TEST

START_TEST(test_sgd_reaches_lstsq) {
    /* data -> loss_grad -> optim, as a worker and a ps would run them. */
    dt_job job = job_of("linear", 1, 31);
    job.num_examples = 200;
    job.noise = 0.2;
    dt_optim_defaults(&job.optim);
    dt_dataset *ds = NULL;
    dt_err err = {0};
    ck_assert_int_eq(dt_data_open(&job, 0, 1, &ds, &err), 0);
    dt_tensors v, g;
    vars_of(&job, &v);
    vars_of(&job, &g);
    dt_model_init(&job, &v);
    double first = 0, loss = 0;
    for (int step = 1; step <= 3000; step++) {
        dt_batch b;
        ck_assert_int_eq(dt_data_next(ds, 20, &b, &err), 0);
        ck_assert_int_eq(dt_model_loss_grad(&job, &v, &b, &g, &loss, &err), 0);
        if (step == 1) first = loss;
        for (int k = 0; k < v.count; k++)
            dt_optim_apply(&job.optim, 0.1, step, v.items[k].data, NULL, g.items[k].data,
                           dt_tensor_numel(&v.items[k]));
    }
    dt_batch all;
    double w = 0, c = 0;
    ck_assert_int_eq(dt_data_all(ds, &all, &err), 0);
    ck_assert_int_eq(dt_model_lstsq_line(&all, &w, &c, &err), 0);
    ck_assert_int_eq(dt_model_loss_grad(&job, &v, &all, NULL, &loss, &err), 0);
    ck_assert_msg(fabs(weight(&v)[0] - w) < 0.05 && fabs(bias(&v)[0] - c) < 0.03,
                  "sgd w %g b %g, lstsq w %g b %g", weight(&v)[0], bias(&v)[0], w, c);
    ck_assert_msg(loss < 0.2 * 0.2 * 1.2 && loss < first, "loss %g (first %g)", loss, first);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
    dt_data_free(ds);
}
END_TEST

Suite *model_suite(void) {
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_specs);
    tcase_add_test(tc, test_specs_errors);
    tcase_add_test(tc, test_init);
    tcase_add_test(tc, test_init_apart_from_data);
    tcase_add_test(tc, test_loss_golden);
    tcase_add_test(tc, test_grad_fd);
    tcase_add_test(tc, test_loss_errors);
    tcase_add_test(tc, test_lstsq);
    tcase_add_test(tc, test_sgd_reaches_lstsq);
    suite_add_tcase(s, tc);
    return s;
}
