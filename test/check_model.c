/*
 * model suite: variable specs and descriptions of every model, seeded
 * initialisation (reproducible, He and 1/sqrt(fan_in) scales, a stream per
 * variable), golden losses and gradients worked out by hand, gradients of
 * every model (with and without L2) against central finite differences of a
 * double-precision recomputation, numerical stability at large logits,
 * evaluation and prediction (accuracy on hand-made batches, chunking,
 * probabilities), buffer growth, bad jobs and batches with their messages,
 * the least-squares helper, and in-process SGD runs: linear onto the
 * least-squares fit, classifiers to accuracy 1 on separable sets, and an MLP
 * on XOR.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "job.h"
#include "lstsq.h"
#include "model.h"
#include "optim.h"
#include "suites.h"

/* The kind named model in the job's names; an unknown name gives a kind
 * past the last, which the model module must refuse. */
static dt_model_kind kind_named(const char *model) {
    int k = 0;
    while (dt_model_kind_names[k] && strcmp(dt_model_kind_names[k], model) != 0)
        k++;
    return (dt_model_kind)(dt_model_kind_names[k] ? k : 99);
}

static dt_job job_of(const char *model, int features, uint64_t seed) {
    dt_job job;
    memset(&job, 0, sizeof job);
    job.model.kind = kind_named(model);
    job.data.source = DT_DATA_LINE;
    job.model.num_features = features;
    job.model.num_classes = 2;
    job.data.num_examples = 100;
    job.seed = seed;
    job.batch_size = 10;
    return job;
}

static dt_job mlp_of(int features, int classes, int num_hidden, const int *hidden, uint64_t seed) {
    dt_job job = job_of("mlp", features, seed);
    job.model.num_classes = classes;
    job.model.num_hidden = num_hidden;
    for (int i = 0; i < num_hidden; i++)
        job.model.hidden[i] = hidden[i];
    return job;
}

/* Variables for job via dt_model_specs, zero-filled. */
static void vars_of(const dt_job *job, dt_tensors *ts) {
    dt_tensor specs[DT_MODEL_MAX_VARS];
    int count = -1;
    dt_err err = {0};
    ck_assert_msg(dt_model_specs(&job->model, specs, &count, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_tensors_init(ts, specs, count, &err) == 0, "%s", err.msg);
}

static dt_model *model_of(const dt_job *job) {
    dt_model *m = NULL;
    dt_err err = {0};
    ck_assert_msg(dt_model_new(&job->model, &m, &err) == 0, "%s", err.msg);
    ck_assert_ptr_nonnull(m);
    return m;
}

static float *weight(const dt_tensors *ts) {
    return ts->items[0].data;
}
static float *bias(const dt_tensors *ts) {
    return ts->items[1].data;
}
static float *item(const dt_tensors *ts, int i) {
    return ts->items[i].data;
}

/* mean_i (x_i . w + b - y_i)^2, all in double. */
static double loss_f64(const double *w, double b, const float *x, const float *y, int B, int F) {
    double sum = 0;
    for (int i = 0; i < B; i++) {
        double pred = b;
        for (int j = 0; j < F; j++)
            pred += (double)x[i * F + j] * w[j];
        sum += (pred - y[i]) * (pred - y[i]);
    }
    return sum / B;
}

static double uniform(uint64_t *state) {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*state >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

/* ---- specs, description, init ------------------------------------------ */

START_TEST(test_specs) {
    dt_job job = job_of("linear", 5, 1);
    dt_tensor specs[DT_MODEL_MAX_VARS];
    int count = -1;
    dt_err err = {0};
    ck_assert_int_eq(dt_model_specs(&job.model, specs, &count, &err), 0);
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
    dt_model_describe(&job.model, buf, sizeof buf);
    ck_assert_str_eq(buf, "linear features=5 l2=0");
    dt_model_describe(&job.model, buf, 7); /* truncates, stays terminated */
    ck_assert_str_eq(buf, "linear");
    dt_model_describe(&job.model, buf, 1);
    ck_assert_str_eq(buf, "");
}
END_TEST

/* Names and shapes of every model's variables, and the descriptions. */
START_TEST(test_specs_models) {
    dt_tensor s[DT_MODEL_MAX_VARS];
    int count = -1;
    dt_err err = {0};
    char buf[128];

    dt_job job = job_of("logistic", 7, 1);
    ck_assert_int_eq(dt_model_specs(&job.model, s, &count, &err), 0);
    ck_assert_int_eq(count, 2);
    ck_assert_str_eq(s[0].name, "logistic/weight");
    ck_assert(s[0].ndim == 2 && s[0].shape[0] == 7 && s[0].shape[1] == 1);
    ck_assert_str_eq(s[1].name, "logistic/bias");
    ck_assert(s[1].ndim == 1 && s[1].shape[0] == 1);
    dt_model_describe(&job.model, buf, sizeof buf);
    ck_assert_str_eq(buf, "logistic features=7 classes=2 l2=0");

    job = job_of("softmax", 7, 1);
    job.model.num_classes = 4;
    job.model.l2 = 0.001;
    ck_assert_int_eq(dt_model_specs(&job.model, s, &count, &err), 0);
    ck_assert_int_eq(count, 2);
    ck_assert_str_eq(s[0].name, "softmax/weight");
    ck_assert(s[0].ndim == 2 && s[0].shape[0] == 7 && s[0].shape[1] == 4);
    ck_assert_uint_eq(s[0].nbytes, 7 * 4 * 4);
    ck_assert_str_eq(s[1].name, "softmax/bias");
    ck_assert(s[1].ndim == 1 && s[1].shape[0] == 4);
    dt_model_describe(&job.model, buf, sizeof buf);
    ck_assert_str_eq(buf, "softmax features=7 classes=4 l2=0.001");

    const int hidden[] = {256, 128};
    job = mlp_of(784, 10, 2, hidden, 1);
    ck_assert_int_eq(dt_model_specs(&job.model, s, &count, &err), 0);
    ck_assert_int_eq(count, 6);
    static const char *const names[] = {"layer0/weight", "layer0/bias",   "layer1/weight",
                                        "layer1/bias",   "layer2/weight", "layer2/bias"};
    static const int64_t rows[] = {784, 256, 256, 128, 128, 10}, cols[] = {256, 0, 128, 0, 10, 0};
    for (int i = 0; i < 6; i++) {
        ck_assert_str_eq(s[i].name, names[i]);
        ck_assert_int_eq(s[i].dtype, DT_DTYPE_F32);
        ck_assert_int_eq(s[i].ndim, cols[i] ? 2 : 1);
        ck_assert_int_eq(s[i].shape[0], rows[i]);
        if (cols[i]) ck_assert_int_eq(s[i].shape[1], cols[i]);
    }
    dt_model_describe(&job.model, buf, sizeof buf);
    ck_assert_str_eq(buf, "mlp features=784 hidden=256,128 classes=10 l2=0");

    /* The deepest mlp fits DT_MODEL_MAX_VARS. */
    int deep[DT_MAX_HIDDEN];
    for (int i = 0; i < DT_MAX_HIDDEN; i++)
        deep[i] = 3 + i;
    job = mlp_of(2, 3, DT_MAX_HIDDEN, deep, 1);
    ck_assert_int_eq(dt_model_specs(&job.model, s, &count, &err), 0);
    ck_assert_int_eq(count, DT_MODEL_MAX_VARS);
    ck_assert_int_eq(s[DT_MODEL_MAX_VARS - 2].shape[0], 3 + DT_MAX_HIDDEN - 1);
    ck_assert_int_eq(s[DT_MODEL_MAX_VARS - 2].shape[1], 3);
    /* The handle says how many values predict writes per row. */
    dt_model *m = model_of(&job);
    ck_assert_int_eq(dt_model_out_cols(m), 3);
    dt_model_free(m);
    job = job_of("logistic", 3, 1);
    m = model_of(&job);
    ck_assert_int_eq(dt_model_out_cols(m), 1);
    dt_model_free(m);
    dt_model_free(NULL);
}
END_TEST

/* dt_model_specs and dt_model_new refuse job, with message want. */
static void refused(const dt_job *job, const char *want) {
    dt_tensor specs[DT_MODEL_MAX_VARS];
    int count = -1;
    dt_err err = {0};
    ck_assert_int_eq(dt_model_specs(&job->model, specs, &count, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, want);
    ck_assert_int_eq(count, 0);
    dt_model *m = (dt_model *)&count; /* must be reset to NULL */
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_new(&job->model, &m, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, want);
    ck_assert_ptr_null(m);
    ck_assert_int_eq(dt_model_specs(&job->model, specs, &count, NULL), DT_EINVAL);
}

START_TEST(test_specs_errors) {
    dt_job job = job_of("cnn", 5, 1);
    refused(&job, "model: \"model\": unknown model kind 99");
    /* A negative kind is out of range too, and describe stays bounded. */
    job.model.kind = (dt_model_kind)-1;
    dt_tensor specs[DT_MODEL_MAX_VARS];
    int count = -1;
    dt_err err = {0};
    ck_assert_int_eq(dt_model_specs(&job.model, specs, &count, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown model kind -1"));
    char buf[80];
    dt_model_describe(&job.model, buf, sizeof buf);
    ck_assert_str_eq(buf, "unknown features=5 classes=2 l2=0");

    job = job_of("linear", 0, 1);
    refused(&job, "model: \"features\" must be 1 to 2147483647 for a dense model (got 0)");
    job = job_of("linear", 1, 1);
    job.model.num_features = (int64_t)1 << 31; /* a sparse model's table may be this wide */
    refused(&job, "model: \"features\" must be 1 to 2147483647 for a dense model (got 2147483648)");
    job = job_of("softmax", 3, 1);
    job.model.num_classes = 1;
    refused(&job, "model: softmax: \"classes\" must be >= 2 (got 1)");
    job = job_of("logistic", 3, 1);
    job.model.num_classes = 3;
    refused(&job, "model: logistic: \"classes\" must be 2, logistic regression is binary (got 3); "
                  "use softmax for more");
    job = job_of("linear", 3, 1);
    job.model.l2 = -0.5;
    refused(&job, "model: \"l2\" must be a finite number >= 0 (got -0.5)");
    job.model.l2 = NAN;
    refused(&job, "model: \"l2\" must be a finite number >= 0 (got nan)");

    const int hidden[] = {4, 0};
    job = mlp_of(3, 1, 1, hidden, 1);
    refused(&job, "model: mlp: \"classes\" must be >= 2 (got 1)");
    job = mlp_of(3, 2, 0, hidden, 1);
    refused(&job, "model: mlp: \"hidden\" must list 1 to 8 layer sizes (got 0)");
    job.model.num_hidden = DT_MAX_HIDDEN + 1;
    refused(&job, "model: mlp: \"hidden\" must list 1 to 8 layer sizes (got 9)");
    job = mlp_of(3, 2, 2, hidden, 1);
    refused(&job, "model: mlp: \"hidden\"[1] must be >= 1 (got 0)");
    /* A weight BLAS cannot index with an int. */
    const int wide[] = {100000};
    job = mlp_of(100000, 2, 1, wide, 1);
    refused(&job, "model: mlp: layer 0's weight (100000, 100000) has more than 2147483647 "
                  "elements");
}
END_TEST

START_TEST(test_init) {
    const int F = 10000;
    dt_job job = job_of("linear", F, 21);
    dt_tensors a, b, c;
    vars_of(&job, &a);
    vars_of(&job, &b);
    bias(&a)[0] = bias(&b)[0] = 9.0f; /* init must reset it */
    dt_model_init(&job.model, job.seed, &a);
    dt_model_init(&job.model, job.seed, &b);
    ck_assert_int_eq(memcmp(a.slab, b.slab, a.slab_bytes), 0);
    ck_assert_float_eq(bias(&a)[0], 0.0f);
    job.seed = 22;
    vars_of(&job, &c);
    dt_model_init(&job.model, job.seed, &c);
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

/* Mean and variance of n floats. */
static void moments(const float *v, int64_t n, double *mean, double *var) {
    double s = 0, ss = 0;
    for (int64_t i = 0; i < n; i++) {
        s += v[i];
        ss += (double)v[i] * v[i];
    }
    *mean = s / (double)n;
    *var = ss / (double)n - *mean * *mean;
}

START_TEST(test_init_mlp) {
    const int hidden[] = {300, 300};
    dt_job job = mlp_of(200, 10, 2, hidden, 7);
    dt_tensors a, b, c;
    vars_of(&job, &a);
    vars_of(&job, &b);
    for (int i = 0; i < 6; i += 2)
        item(&a, i + 1)[0] = 5.0f; /* biases must be reset */
    dt_model_init(&job.model, job.seed, &a);
    dt_model_init(&job.model, job.seed, &b);
    ck_assert_int_eq(memcmp(a.slab, b.slab, a.slab_bytes), 0);
    /* He for the ReLU layers (2 / fan_in), 1 / fan_in for the output layer. */
    static const double want_var[] = {2.0 / 200, 2.0 / 300, 1.0 / 300};
    for (int l = 0; l < 3; l++) {
        const dt_tensor *w = &a.items[2 * l], *bt = &a.items[2 * l + 1];
        double mean, var;
        moments(w->data, dt_tensor_numel(w), &mean, &var);
        ck_assert_msg(fabs(var / want_var[l] - 1) < 0.03, "layer %d: var %g want %g", l, var,
                      want_var[l]);
        ck_assert_msg(fabs(mean) < 4 * sqrt(want_var[l] / (double)dt_tensor_numel(w)),
                      "layer %d: mean %g", l, mean);
        for (int64_t j = 0; j < dt_tensor_numel(bt); j++)
            ck_assert_float_eq(((float *)bt->data)[j], 0.0f);
    }
    /* Each weight has its own stream: layer1's values are not layer0's scaled. */
    double dot = 0, n0 = 0, n1 = 0;
    for (int j = 0; j < 1000; j++) {
        double u = item(&a, 0)[j], v = item(&a, 2)[j];
        dot += u * v;
        n0 += u * u;
        n1 += v * v;
    }
    ck_assert_msg(fabs(dot / sqrt(n0 * n1)) < 0.15, "correlation %g", dot / sqrt(n0 * n1));
    /* ... nor does it depend on the other layers: the same first layer
     * whatever follows it. */
    const int one[] = {300};
    dt_job shallow = mlp_of(200, 10, 1, one, 7);
    vars_of(&shallow, &c);
    dt_model_init(&shallow.model, shallow.seed, &c);
    ck_assert_int_eq(memcmp(item(&a, 0), item(&c, 0), a.items[0].nbytes), 0);
    dt_tensors_deinit(&c);
    /* Another seed, other values. */
    job.seed = 8;
    vars_of(&job, &c);
    dt_model_init(&job.model, job.seed, &c);
    int differ = 0;
    for (int j = 0; j < 1000; j++)
        differ += item(&a, 2)[j] != item(&c, 2)[j];
    ck_assert_int_gt(differ, 990);
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
    job.data.source = DT_DATA_WIDE;
    dt_dataset *ds = NULL;
    ck_assert_int_eq(dt_job_open_data(&job, 0, 1, &ds, NULL), 0);
    dt_tensors v;
    vars_of(&job, &v);
    dt_model_init(&job.model, job.seed, &v);
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

/* ---- golden values ----------------------------------------------------- */

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
    dt_model *m = model_of(&job);
    weight(&v)[0] = 1.0f;
    weight(&v)[1] = -2.0f;
    bias(&v)[0] = 0.5f;
    static const float x[] = {1, 2, 0, 1, -1, 0.5f}, y[] = {0, 1, 2};
    dt_batch b = {.rows = 3, .cols = 2, .x = x, .y = y};
    double loss = 0;
    dt_err err = {0};
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, &g, &loss, &err), 0);
    ck_assert_double_eq_tol(loss, 8.25, 1e-6);
    ck_assert_float_eq_tol(weight(&g)[0], 2.0f / 3, 1e-6f);
    ck_assert_float_eq_tol(weight(&g)[1], -9.25f * 2 / 3, 1e-5f);
    ck_assert_float_eq_tol(bias(&g)[0], -8.5f * 2 / 3, 1e-5f);
    /* Loss only. */
    loss = 0;
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, NULL, &loss, &err), 0);
    ck_assert_double_eq_tol(loss, 8.25, 1e-6);
    /* Evaluation: the same mean, no accuracy for a regression. */
    double acc = 0;
    ck_assert_int_eq(dt_model_evaluate(m, &v, &b, &loss, &acc, &err), 0);
    ck_assert_double_eq_tol(loss, 8.25, 1e-6);
    ck_assert(isnan(acc));
    /* Prediction: X W + b. */
    float out[3];
    int cols = 0;
    ck_assert_int_eq(dt_model_predict(m, &v, &b, out, &cols, &err), 0);
    ck_assert_int_eq(cols, 1);
    ck_assert_float_eq_tol(out[0], -2.5f, 1e-6f);
    ck_assert_float_eq_tol(out[1], -1.5f, 1e-6f);
    ck_assert_float_eq_tol(out[2], -1.5f, 1e-6f);
    /* With L2 0.5: + 0.25 * (1 + 4) on the loss, + 0.5 W on dW, db as is;
     * evaluation leaves the penalty out. */
    dt_model_free(m);
    job.model.l2 = 0.5;
    m = model_of(&job);
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, &g, &loss, &err), 0);
    ck_assert_double_eq_tol(loss, 8.25 + 1.25, 1e-6);
    ck_assert_float_eq_tol(weight(&g)[0], 2.0f / 3 + 0.5f, 1e-6f);
    ck_assert_float_eq_tol(weight(&g)[1], -9.25f * 2 / 3 - 1.0f, 1e-5f);
    ck_assert_float_eq_tol(bias(&g)[0], -8.5f * 2 / 3, 1e-5f);
    ck_assert_int_eq(dt_model_evaluate(m, &v, &b, &loss, &acc, &err), 0);
    ck_assert_double_eq_tol(loss, 8.25, 1e-6);
    dt_model_free(m);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
}
END_TEST

START_TEST(test_softmax_golden) {
    /* Zero weights: every class has p = 1/3, loss = log 3, accuracy is the
     * share of class 0 (ties go to the first class).
     *   X = [[1, 0], [0, 1], [1, 1], [2, 0]], y = (0, 1, 1, 2), B = 4
     *   db_k = mean_i (1/3 - [y_i = k]) = (1/12, -1/6, 1/12)
     *   dW_fk = (1/4) sum_i x_if (1/3 - [y_i = k]):
     *     f = 0: x = (1, 0, 1, 2): (1/4)(4/3 - (1, 1, 2)) = (1/12, 1/12, -1/6)
     *     f = 1: x = (0, 1, 1, 0): (1/4)(2/3 - (0, 2, 0)) = (1/6, -1/3, 1/6) */
    dt_job job = job_of("softmax", 2, 1);
    job.model.num_classes = 3;
    dt_tensors v, g;
    vars_of(&job, &v);
    vars_of(&job, &g);
    dt_model *m = model_of(&job);
    static const float x[] = {1, 0, 0, 1, 1, 1, 2, 0}, y[] = {0, 1, 1, 2};
    dt_batch b = {.rows = 4, .cols = 2, .x = x, .y = y};
    double loss = 0, acc = 0;
    dt_err err = {0};
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, &g, &loss, &err), 0);
    ck_assert_double_eq_tol(loss, log(3.0), 1e-7);
    static const float want_gb[] = {1.0f / 12, -1.0f / 6, 1.0f / 12};
    static const float want_gw[] = {1.0f / 12, 1.0f / 12, -1.0f / 6, 1.0f / 6, -1.0f / 3, 1.0f / 6};
    for (int k = 0; k < 3; k++)
        ck_assert_float_eq_tol(bias(&g)[k], want_gb[k], 1e-7f);
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq_tol(weight(&g)[i], want_gw[i], 1e-7f);
    ck_assert_int_eq(dt_model_evaluate(m, &v, &b, &loss, &acc, &err), 0);
    ck_assert_double_eq_tol(loss, log(3.0), 1e-7);
    ck_assert_double_eq(acc, 0.25);

    /* Hand-made accuracy: W = [[1, 0, -1], [0, 1, -1]], b = 0.
     *   x (2, 0) -> z (2, 0, -2) -> 0      y 0 right
     *   x (0, 2) -> z (0, 2, -2) -> 1      y 1 right
     *   x (-1, -1) -> z (-1, -1, 2) -> 2   y 2 right
     *   x (1, 0) -> z (1, 0, -1) -> 0      y 1 wrong
     * loss_i = log sum_k exp(z_k) - z_y. */
    static const float w[] = {1, 0, -1, 0, 1, -1};
    memcpy(weight(&v), w, sizeof w);
    static const float x2[] = {2, 0, 0, 2, -1, -1, 1, 0}, y2[] = {0, 1, 2, 1};
    dt_batch b2 = {.rows = 4, .cols = 2, .x = x2, .y = y2};
    ck_assert_int_eq(dt_model_evaluate(m, &v, &b2, &loss, &acc, &err), 0);
    ck_assert_double_eq(acc, 0.75);
    double want = (log(exp(2) + 1 + exp(-2)) - 2 + log(1 + exp(2) + exp(-2)) - 2 +
                   log(exp(-1) + exp(-1) + exp(2)) - 2 + log(exp(1) + 1 + exp(-1)) - 0) /
                  4;
    ck_assert_double_eq_tol(loss, want, 1e-6);
    /* Probabilities: rows sum to 1, row 0 is softmax(2, 0, -2). */
    float p[12];
    int cols = 0;
    ck_assert_int_eq(dt_model_predict(m, &v, &b2, p, &cols, &err), 0);
    ck_assert_int_eq(cols, 3);
    double s0 = exp(2) + 1 + exp(-2);
    ck_assert_float_eq_tol(p[0], exp(2) / s0, 1e-6f);
    ck_assert_float_eq_tol(p[1], 1 / s0, 1e-6f);
    ck_assert_float_eq_tol(p[2], exp(-2) / s0, 1e-6f);
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq_tol(p[3 * i] + p[3 * i + 1] + p[3 * i + 2], 1.0f, 1e-6f);
    dt_model_free(m);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
}
END_TEST

START_TEST(test_logistic_golden) {
    /* Zero weights: p = 1/2, loss = log 2, db = mean(1/2 - y) = -1/6 for
     * y = (1, 0, 1); z = 0 is class 0. */
    dt_job job = job_of("logistic", 1, 1);
    dt_tensors v, g;
    vars_of(&job, &v);
    vars_of(&job, &g);
    dt_model *m = model_of(&job);
    static const float x[] = {1, -2, 3}, y[] = {1, 0, 1};
    dt_batch b = {.rows = 3, .cols = 1, .x = x, .y = y};
    double loss = 0, acc = 0;
    dt_err err = {0};
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, &g, &loss, &err), 0);
    ck_assert_double_eq_tol(loss, log(2.0), 1e-7);
    ck_assert_float_eq_tol(bias(&g)[0], -1.0f / 6, 1e-7f);
    /* dW = mean_i x_i (1/2 - y_i) = (1 (-1/2) + (-2)(1/2) + 3 (-1/2)) / 3 = -1 */
    ck_assert_float_eq_tol(weight(&g)[0], -1.0f, 1e-6f);
    ck_assert_int_eq(dt_model_evaluate(m, &v, &b, &loss, &acc, &err), 0);
    ck_assert_double_eq(acc, 1.0 / 3);

    /* w = 2, b = -1: x = 1 -> z = 1, y = 1: log(1 + e^-1);
     *                x = 0 -> z = -1, y = 1: log(1 + e);
     *                x = 3 -> z = 5, y = 0: log(1 + e^5).
     * Accuracy: classes (1, 0, 1) against (1, 1, 0): 1/3. */
    weight(&v)[0] = 2;
    bias(&v)[0] = -1;
    static const float x2[] = {1, 0, 3}, y2[] = {1, 1, 0};
    dt_batch b2 = {.rows = 3, .cols = 1, .x = x2, .y = y2};
    double want = (log1p(exp(-1)) + log1p(exp(1)) + log1p(exp(5))) / 3;
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b2, &g, &loss, &err), 0);
    ck_assert_double_eq_tol(loss, want, 1e-6);
    ck_assert_int_eq(dt_model_evaluate(m, &v, &b2, &loss, &acc, &err), 0);
    ck_assert_double_eq_tol(loss, want, 1e-6);
    ck_assert_double_eq_tol(acc, 1.0 / 3, 1e-12);
    float p[3];
    int cols = 0;
    ck_assert_int_eq(dt_model_predict(m, &v, &b2, p, &cols, &err), 0);
    ck_assert_int_eq(cols, 1);
    ck_assert_float_eq_tol(p[0], 1 / (1 + exp(-1)), 1e-6f);
    ck_assert_float_eq_tol(p[1], 1 / (1 + exp(1)), 1e-6f);
    ck_assert_float_eq_tol(p[2], 1 / (1 + exp(-5)), 1e-6f);
    dt_model_free(m);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
}
END_TEST

START_TEST(test_mlp_golden) {
    /* F = 1, H = 1, K = 2: W0 = [[2]], b0 = (-1), W1 = [[1, -1]], b1 = (0, 0).
     *   x = 1, y = 0: h = relu(1) = 1, z = (1, -1), loss log(1 + e^-2)
     *   x = 0, y = 1: h = relu(-1) = 0, z = (0, 0), loss log 2
     * dZ1 = (p - onehot) / 2: row 0 (-s, s)/2 with s = sigmoid(-2), row 1 (1/2, -1/2)/2
     *   db1 = ((1/2 - s)/2, (s - 1/2)/2); dW1 = h^T dZ1 = (-s/2, s/2)
     *   dh row 0 = dZ1 W1^T = -s; row 1 is masked (h = 0): dW0 = -s, db0 = -s
     * L2 0.5: + 0.25 (4 + 1 + 1) on the loss, + 0.5 W on dW. */
    const int hidden[] = {1};
    dt_job job = mlp_of(1, 2, 1, hidden, 1);
    dt_tensors v, g;
    vars_of(&job, &v);
    vars_of(&job, &g);
    /* Zero weights: loss log K whatever the input. */
    dt_model *m = model_of(&job);
    static const float x[] = {1, 0}, y[] = {0, 1};
    dt_batch b = {.rows = 2, .cols = 1, .x = x, .y = y};
    double loss = 0;
    dt_err err = {0};
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, &g, &loss, &err), 0);
    ck_assert_double_eq_tol(loss, log(2.0), 1e-7);
    dt_model_free(m);

    job.model.l2 = 0.5;
    m = model_of(&job);
    item(&v, 0)[0] = 2;
    item(&v, 1)[0] = -1;
    item(&v, 2)[0] = 1;
    item(&v, 2)[1] = -1;
    const double s = 1 / (1 + exp(2.0));
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, &g, &loss, &err), 0);
    ck_assert_double_eq_tol(loss, (log1p(exp(-2.0)) + log(2.0)) / 2 + 1.5, 1e-6);
    ck_assert_float_eq_tol(item(&g, 0)[0], -s + 0.5 * 2, 1e-6f);
    ck_assert_float_eq_tol(item(&g, 1)[0], -s, 1e-6f);
    ck_assert_float_eq_tol(item(&g, 2)[0], -s / 2 + 0.5, 1e-6f);
    ck_assert_float_eq_tol(item(&g, 2)[1], s / 2 - 0.5, 1e-6f);
    ck_assert_float_eq_tol(item(&g, 3)[0], (0.5 - s) / 2, 1e-6f);
    ck_assert_float_eq_tol(item(&g, 3)[1], (s - 0.5) / 2, 1e-6f);
    double acc = 0;
    ck_assert_int_eq(dt_model_evaluate(m, &v, &b, &loss, &acc, &err), 0);
    ck_assert_double_eq_tol(loss, (log1p(exp(-2.0)) + log(2.0)) / 2, 1e-6);
    ck_assert_double_eq(acc, 0.5); /* row 1 ties, and ties go to class 0 */
    dt_model_free(m);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
}
END_TEST

START_TEST(test_stable) {
    /* Logits of +-1000 overflow exp in float and double: the loss stays
     * exact, the gradient and probabilities finite. */
    dt_job job = job_of("logistic", 1, 1);
    dt_tensors v, g;
    vars_of(&job, &v);
    vars_of(&job, &g);
    dt_model *m = model_of(&job);
    weight(&v)[0] = 1;
    static const float x[] = {1000, -1000, 1000, -1000}, y[] = {0, 0, 1, 1};
    dt_batch b = {.rows = 4, .cols = 1, .x = x, .y = y};
    double loss = 0;
    dt_err err = {0};
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, &g, &loss, &err), 0);
    ck_assert_double_eq_tol(loss, (1000 + 0 + 0 + 1000) / 4.0, 1e-9);
    /* dz = (1, 0, 0, -1) / 4: dW = (1000 + 1000) / 4, db = 0 */
    ck_assert_float_eq_tol(weight(&g)[0], 500.0f, 1e-3f);
    ck_assert_float_eq_tol(bias(&g)[0], 0.0f, 1e-7f);
    float p[4];
    ck_assert_int_eq(dt_model_predict(m, &v, &b, p, NULL, &err), 0);
    ck_assert(p[0] == 1.0f && p[1] == 0.0f && p[2] == 1.0f && p[3] == 0.0f);
    dt_model_free(m);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);

    job = job_of("softmax", 1, 1);
    job.model.num_classes = 3;
    vars_of(&job, &v);
    vars_of(&job, &g);
    m = model_of(&job);
    weight(&v)[0] = 1; /* z = (x, 0, -x) */
    weight(&v)[2] = -1;
    static const float y3[] = {1, 2, 0, 0};
    b.y = y3;
    /* row 0: z (1000, 0, -1000), y 1: 1000; row 1: z (-1000, 0, 1000), y 2: 0;
     * row 2: y 0: 0; row 3: z (-1000, 0, 1000), y 0: 2000 */
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, &g, &loss, &err), 0);
    ck_assert_double_eq_tol(loss, 3000 / 4.0, 1e-9);
    for (int k = 0; k < 3; k++)
        ck_assert(isfinite(weight(&g)[k]) && isfinite(bias(&g)[k]));
    float p3[12];
    ck_assert_int_eq(dt_model_predict(m, &v, &b, p3, NULL, &err), 0);
    for (int i = 0; i < 12; i++)
        ck_assert(isfinite(p3[i]));
    ck_assert(p3[0] == 1.0f && p3[5] == 1.0f);
    dt_model_free(m);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
}
END_TEST

/* ---- finite differences ------------------------------------------------ */

/* Analytic gradient of a random batch against central differences of the
 * double-precision loss. The loss is quadratic, so central differences are
 * exact up to rounding and the tolerance can be tight. */
static void check_fd(int F, int B, uint64_t seed) {
    dt_job job = job_of("linear", F, seed);
    dt_tensors v, g;
    vars_of(&job, &v);
    vars_of(&job, &g);
    dt_model_init(&job.model, job.seed, &v);
    dt_model *m = model_of(&job);
    uint64_t st = seed;
    bias(&v)[0] = (float)uniform(&st);
    float *x = malloc((size_t)B * F * sizeof *x), *y = malloc((size_t)B * sizeof *y);
    double *w = malloc((size_t)F * sizeof *w);
    ck_assert(x && y && w);
    for (int i = 0; i < B * F; i++)
        x[i] = (float)uniform(&st);
    for (int i = 0; i < B; i++)
        y[i] = (float)(3 * uniform(&st));
    for (int j = 0; j < F; j++)
        w[j] = weight(&v)[j];
    double b0 = bias(&v)[0];

    dt_batch b = {.rows = B, .cols = F, .x = x, .y = y};
    double loss = 0;
    dt_err err = {0};
    ck_assert_msg(dt_model_loss_grad(m, &v, &b, &g, &loss, &err) == 0, "%s", err.msg);
    double want = loss_f64(w, b0, x, y, B, F);
    ck_assert_msg(fabs(loss - want) <= 1e-5 * want, "loss %.9g want %.9g", loss, want);

    const double h = 1e-3;
    for (int j = 0; j < F; j++) {
        double keep = w[j];
        w[j] = keep + h;
        double up = loss_f64(w, b0, x, y, B, F);
        w[j] = keep - h;
        double down = loss_f64(w, b0, x, y, B, F);
        w[j] = keep;
        double fd = (up - down) / (2 * h);
        double diff = fabs(weight(&g)[j] - fd) / (1e-3 + fabs(fd));
        ck_assert_msg(diff < 1e-4, "F %d: dW[%d] = %.7g, finite difference %.7g", F, j,
                      weight(&g)[j], fd);
    }
    double fd_b = (loss_f64(w, b0 + h, x, y, B, F) - loss_f64(w, b0 - h, x, y, B, F)) / (2 * h);
    ck_assert_msg(fabs(bias(&g)[0] - fd_b) < 1e-4 * (1e-3 + fabs(fd_b)), "db = %.7g, fd %.7g",
                  bias(&g)[0], fd_b);
    free(x);
    free(y);
    free(w);
    dt_model_free(m);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
}

START_TEST(test_grad_fd) {
    check_fd(5, 7, 3);
    check_fd(1, 1, 4);
    check_fd(300, 33, 5); /* BLAS's blocked paths */
}
END_TEST

/* Any model of this suite in double precision, read off the variables'
 * shapes: the reference the float code is checked against. */
#define REF_MAX_DIM 64
typedef struct {
    int head; /* 0 mse, 1 sigmoid, 2 softmax */
    int num_layers;
    int dims[DT_MAX_HIDDEN + 2];
    int64_t w_off[DT_MAX_HIDDEN + 1], b_off[DT_MAX_HIDDEN + 1], total;
    double l2;
    double *theta; /* (total) every variable, in the order of the set */
} ref_net;

static void ref_of(const dt_job *job, const dt_tensors *v, ref_net *r) {
    memset(r, 0, sizeof *r);
    r->head = job->model.kind == DT_MODEL_LINEAR ? 0 : job->model.kind == DT_MODEL_LOGISTIC ? 1 : 2;
    r->num_layers = v->count / 2;
    r->l2 = job->model.l2;
    r->dims[0] = (int)v->items[0].shape[0];
    for (int l = 0; l < r->num_layers; l++) {
        r->dims[l + 1] = (int)v->items[2 * l].shape[1];
        ck_assert_int_le(r->dims[l], REF_MAX_DIM);
        r->w_off[l] = r->total;
        r->total += dt_tensor_numel(&v->items[2 * l]);
        r->b_off[l] = r->total;
        r->total += dt_tensor_numel(&v->items[2 * l + 1]);
    }
    ck_assert_int_le(r->dims[r->num_layers], REF_MAX_DIM);
    r->theta = malloc((size_t)r->total * sizeof *r->theta);
    ck_assert_ptr_nonnull(r->theta);
    int64_t k = 0;
    for (int i = 0; i < v->count; i++)
        for (int64_t j = 0; j < dt_tensor_numel(&v->items[i]); j++)
            r->theta[k++] = ((const float *)v->items[i].data)[j];
}

/* Training loss of the reference: mean data loss plus l2/2 sum W^2. */
static double ref_loss(const ref_net *r, const float *x, const float *y, int B) {
    double sum = 0;
    for (int i = 0; i < B; i++) {
        double a[REF_MAX_DIM], z[REF_MAX_DIM];
        for (int d = 0; d < r->dims[0]; d++)
            a[d] = x[i * r->dims[0] + d];
        for (int l = 0; l < r->num_layers; l++) {
            const int in = r->dims[l], out = r->dims[l + 1];
            const double *w = r->theta + r->w_off[l], *b = r->theta + r->b_off[l];
            for (int j = 0; j < out; j++) {
                z[j] = b[j];
                for (int k = 0; k < in; k++)
                    z[j] += a[k] * w[k * out + j];
            }
            if (l < r->num_layers - 1)
                for (int j = 0; j < out; j++)
                    a[j] = z[j] > 0 ? z[j] : 0;
        }
        const int K = r->dims[r->num_layers];
        if (r->head == 0) {
            sum += (z[0] - y[i]) * (z[0] - y[i]);
        } else if (r->head == 1) {
            sum += fmax(z[0], 0) + log1p(exp(-fabs(z[0]))) - y[i] * z[0];
        } else {
            double mx = z[0], s = 0;
            for (int k = 1; k < K; k++)
                mx = fmax(mx, z[k]);
            for (int k = 0; k < K; k++)
                s += exp(z[k] - mx);
            sum += mx + log(s) - z[(int)y[i]];
        }
    }
    double sq = 0;
    for (int l = 0; l < r->num_layers; l++)
        for (int64_t j = 0; j < (int64_t)r->dims[l] * r->dims[l + 1]; j++)
            sq += r->theta[r->w_off[l] + j] * r->theta[r->w_off[l] + j];
    return sum / B + 0.5 * r->l2 * sq;
}

/* Initialised variables with random biases (so they matter), a random batch
 * with labels the head takes, and every analytic partial derivative against
 * (L(t + h) - L(t - h)) / 2h of the reference. */
static void check_fd_model(dt_job job, int B, uint64_t seed) {
    dt_tensors v, g;
    vars_of(&job, &v);
    vars_of(&job, &g);
    dt_model_init(&job.model, job.seed, &v);
    uint64_t st = seed;
    for (int i = 1; i < v.count; i += 2)
        for (int64_t j = 0; j < dt_tensor_numel(&v.items[i]); j++)
            item(&v, i)[j] = (float)(0.5 * uniform(&st));
    const int F = job.model.num_features;
    float *x = malloc((size_t)B * F * sizeof *x), *y = malloc((size_t)B * sizeof *y);
    ck_assert(x && y);
    for (int i = 0; i < B * F; i++)
        x[i] = (float)uniform(&st);
    ref_net r;
    ref_of(&job, &v, &r);
    const int K = r.dims[r.num_layers];
    for (int i = 0; i < B; i++) {
        double u = (uniform(&st) + 1) / 2; /* [0, 1) */
        y[i] = r.head == 0 ? (float)(3 * u) : r.head == 1 ? (float)(u < 0.5) : (float)(int)(u * K);
    }
    dt_model *m = model_of(&job);
    dt_batch b = {.rows = B, .cols = F, .x = x, .y = y};
    double loss = 0;
    dt_err err = {0};
    ck_assert_msg(dt_model_loss_grad(m, &v, &b, &g, &loss, &err) == 0, "%s", err.msg);
    double want = ref_loss(&r, x, y, B);
    ck_assert_msg(fabs(loss - want) <= 1e-5 * (1 + fabs(want)), "%s l2 %g: loss %.9g want %.9g",
                  dt_model_kind_names[job.model.kind], job.model.l2, loss, want);

    /* The ReLU kinks are why h is small: a step across one would break the
     * difference; the reference is in double, so rounding stays far below. */
    const double h = 1e-5;
    int64_t k = 0;
    for (int i = 0; i < g.count; i++) {
        for (int64_t j = 0; j < dt_tensor_numel(&g.items[i]); j++, k++) {
            double keep = r.theta[k];
            r.theta[k] = keep + h;
            double up = ref_loss(&r, x, y, B);
            r.theta[k] = keep - h;
            double down = ref_loss(&r, x, y, B);
            r.theta[k] = keep;
            double fd = (up - down) / (2 * h), got = item(&g, i)[j];
            ck_assert_msg(fabs(got - fd) <= 1e-4 + 1e-3 * fabs(fd),
                          "%s l2 %g: d %s[%lld] = %.7g, finite difference %.7g",
                          dt_model_kind_names[job.model.kind], job.model.l2, g.items[i].name,
                          (long long)j, got, fd);
        }
    }
    free(r.theta);
    free(x);
    free(y);
    dt_model_free(m);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
}

START_TEST(test_grad_fd_models) {
    static const double l2s[] = {0, 0.3};
    for (int i = 0; i < 2; i++) {
        dt_job job = job_of("linear", 4, 11);
        job.model.l2 = l2s[i];
        check_fd_model(job, 7, 11);
        job = job_of("logistic", 5, 12);
        job.model.l2 = l2s[i];
        check_fd_model(job, 9, 12);
        job = job_of("softmax", 4, 13);
        job.model.num_classes = 3;
        job.model.l2 = l2s[i];
        check_fd_model(job, 8, 13);
        const int one[] = {6}, two[] = {5, 3}, three[] = {7, 4, 6};
        job = mlp_of(4, 3, 1, one, 14);
        job.model.l2 = l2s[i];
        check_fd_model(job, 6, 14);
        job = mlp_of(4, 3, 2, two, 15);
        job.model.l2 = l2s[i];
        check_fd_model(job, 7, 15);
        job = mlp_of(3, 2, 3, three, 16);
        job.model.l2 = l2s[i];
        check_fd_model(job, 5, 16);
        job = mlp_of(6, 4, 1, one, 17); /* one row */
        job.model.l2 = l2s[i];
        check_fd_model(job, 1, 17);
    }
}
END_TEST

static void random_batch(int n, int F, int K, uint64_t seed, float **x, float **y);

/* The loss of a training step (dropout's masks drawn) at v, the masks'
 * stream seeded first; the gradient into g. */
static double drop_loss(dt_model *m, const dt_tensors *v, const dt_batch *b, dt_tensors *g) {
    double loss = 0;
    dt_err err = {0};
    dt_model_seed_dropout(m, 42);
    ck_assert_msg(dt_model_loss_grad(m, v, b, g, &loss, &err) == 0, "%s", err.msg);
    return loss;
}

/* "dropout": refused outside [0, 1) and for a model with no hidden layer;
 * a training step drops a share p of the hidden units (their bias's
 * gradient exactly 0) and scales the rest by 1 / (1 - p), so its gradient
 * matches a finite difference of the same masks; the same seed draws the
 * same masks, the next step others; evaluation drops nothing. */
START_TEST(test_dropout) {
    dt_job job = job_of("softmax", 3, 1);
    job.model.dropout = 0.3;
    refused(&job, "model: softmax: \"dropout\" 0.3: it drops hidden units, and only \"mlp\" has "
                  "hidden layers");
    const int hidden[] = {2000}, two[] = {5, 3};
    job = mlp_of(3, 2, 1, hidden, 1);
    job.model.dropout = 1;
    refused(&job, "model: \"dropout\" must be in [0, 1) (got 1)");
    job.model.dropout = -0.1;
    refused(&job, "model: \"dropout\" must be in [0, 1) (got -0.1)");

    /* One row, every hidden unit on (x > 0, W0 > 0): the units dropped
     * are exactly those whose bias gradient is 0. */
    job.model.dropout = 0.5;
    dt_tensors v, g, g2;
    vars_of(&job, &v);
    vars_of(&job, &g);
    vars_of(&job, &g2);
    for (int64_t j = 0; j < dt_tensor_numel(&v.items[0]); j++)
        item(&v, 0)[j] = 0.5f;
    for (int64_t j = 0; j < dt_tensor_numel(&v.items[2]); j++)
        item(&v, 2)[j] = j % 2 ? 1e-5f : -1e-5f;
    static const float x1[] = {1, 2, 3}, y1[] = {1};
    dt_batch one = {.rows = 1, .cols = 3, .x = x1, .y = y1};
    dt_model *m = model_of(&job);
    (void)drop_loss(m, &v, &one, &g);
    int dropped = 0;
    for (int j = 0; j < 2000; j++)
        dropped += item(&g, 1)[j] == 0.0f;
    ck_assert_msg(dropped > 850 && dropped < 1150, "%d of 2000 units dropped at p 0.5", dropped);
    (void)drop_loss(m, &v, &one, &g2); /* the same seed: the same masks */
    ck_assert_int_eq(memcmp(item(&g, 1), item(&g2, 1), 2000 * sizeof(float)), 0);
    double loss = 0, acc = 0;
    dt_err err = {0};
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &one, &g2, &loss, &err), 0); /* stream on */
    ck_assert_int_ne(memcmp(item(&g, 1), item(&g2, 1), 2000 * sizeof(float)), 0);
    /* Evaluation: as a model without dropout, to the bit. */
    double plain_loss = 0;
    ck_assert_int_eq(dt_model_evaluate(m, &v, &one, &loss, &acc, &err), 0);
    job.model.dropout = 0;
    dt_model *plain = model_of(&job);
    ck_assert_int_eq(dt_model_evaluate(plain, &v, &one, &plain_loss, &acc, &err), 0);
    ck_assert_msg(loss == plain_loss, "eval loss %.9g with dropout, %.9g without", loss,
                  plain_loss);
    dt_model_free(plain);
    dt_model_free(m);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
    dt_tensors_deinit(&g2);

    /* Two hidden layers at p 0.4: each partial derivative against a
     * central difference of the loss under the same masks. */
    job = mlp_of(4, 3, 2, two, 7);
    job.model.dropout = 0.4;
    vars_of(&job, &v);
    vars_of(&job, &g);
    vars_of(&job, &g2);
    dt_model_init(&job.model, job.seed, &v);
    uint64_t st = 5; /* biases off 0: a unit whose inputs all drop sits at ReLU's kink */
    for (int i = 1; i < v.count; i += 2)
        for (int64_t j = 0; j < dt_tensor_numel(&v.items[i]); j++)
            item(&v, i)[j] = (float)(0.5 * uniform(&st));
    float *x = NULL, *y = NULL;
    random_batch(6, 4, 3, 9, &x, &y);
    dt_batch b = {.rows = 6, .cols = 4, .x = x, .y = y};
    m = model_of(&job);
    (void)drop_loss(m, &v, &b, &g);
    const double h = 1e-3;
    int checked = 0;
    for (int i = 0; i < g.count; i++)
        for (int64_t j = 0; j < dt_tensor_numel(&g.items[i]); j++) {
            float *t = &item(&v, i)[j], keep = *t;
            *t = keep + (float)h;
            double up = drop_loss(m, &v, &b, &g2);
            *t = keep - (float)h;
            double down = drop_loss(m, &v, &b, &g2);
            *t = keep;
            double fd = (up - down) / (2 * h), got = item(&g, i)[j];
            ck_assert_msg(fabs(got - fd) <= 2e-3 + 2e-2 * fabs(fd),
                          "dropout 0.4: d %s[%lld] = %.6g, finite difference %.6g", g.items[i].name,
                          (long long)j, got, fd);
            checked += got != 0;
        }
    ck_assert_int_gt(checked, 10);
    free(x);
    free(y);
    dt_model_free(m);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
    dt_tensors_deinit(&g2);
}
END_TEST

/* ---- evaluation, prediction, buffers ----------------------------------- */

/* A random batch of n rows for a classifier with F features and K classes. */
static void random_batch(int n, int F, int K, uint64_t seed, float **x, float **y) {
    uint64_t st = seed;
    *x = malloc((size_t)n * F * sizeof **x);
    *y = malloc((size_t)n * sizeof **y);
    ck_assert(*x && *y);
    for (int i = 0; i < n * F; i++)
        (*x)[i] = (float)(2 * uniform(&st));
    for (int i = 0; i < n; i++)
        (*y)[i] = (float)(int)((uniform(&st) + 1) / 2 * K);
}

START_TEST(test_evaluate_chunks) {
    /* 1000 rows go through in chunks; the loss, accuracy and predictions
     * match one pass of loss_grad and a row-by-row count. */
    const int F = 12, K = 5, n = 1000;
    const int hidden[] = {32, 16};
    dt_job job = mlp_of(F, K, 2, hidden, 3);
    job.model.l2 = 0.01;
    dt_tensors v;
    vars_of(&job, &v);
    dt_model_init(&job.model, job.seed, &v);
    float *x, *y;
    random_batch(n, F, K, 99, &x, &y);
    dt_batch b = {.rows = n, .cols = F, .x = x, .y = y};
    dt_model *m = model_of(&job);
    double loss_eval = 0, acc = 0, loss_train = 0;
    dt_err err = {0};
    ck_assert_msg(dt_model_evaluate(m, &v, &b, &loss_eval, &acc, &err) == 0, "%s", err.msg);
    float *p = malloc((size_t)n * K * sizeof *p);
    ck_assert_ptr_nonnull(p);
    int cols = 0;
    ck_assert_int_eq(dt_model_predict(m, &v, &b, p, &cols, &err), 0);
    ck_assert_int_eq(cols, K);
    int right = 0;
    double nll = 0;
    for (int i = 0; i < n; i++) {
        int best = 0;
        double sum = 0;
        for (int k = 0; k < K; k++) {
            ck_assert(p[i * K + k] >= 0 && p[i * K + k] <= 1);
            sum += p[i * K + k];
            if (p[i * K + k] > p[i * K + best]) best = k;
        }
        ck_assert_msg(fabs(sum - 1) < 1e-5, "row %d sums to %.7g", i, sum);
        right += best == (int)y[i];
        nll -= log(p[i * K + (int)y[i]]);
    }
    ck_assert_double_eq_tol(acc, (double)right / n, 1e-12);
    ck_assert_msg(acc > 0.05 && acc < 0.6, "accuracy %g of random weights", acc);
    ck_assert_double_eq_tol(loss_eval, nll / n, 1e-5);
    /* loss_grad on the whole batch: the same data loss plus the L2 term. */
    ref_net r;
    ref_of(&job, &v, &r);
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, NULL, &loss_train, &err), 0);
    ck_assert_double_eq_tol(loss_train, ref_loss(&r, x, y, n), 1e-5);
    r.l2 = 0;
    ck_assert_double_eq_tol(loss_eval, ref_loss(&r, x, y, n), 1e-5);
    /* Now the buffers hold 1000 rows: evaluate in one pass, same answer. */
    double again = 0, acc2 = 0;
    ck_assert_int_eq(dt_model_evaluate(m, &v, &b, &again, &acc2, &err), 0);
    ck_assert_double_eq_tol(again, loss_eval, 1e-6); /* BLAS blocks the rows another way */
    ck_assert_double_eq(acc2, acc);
    /* y is not read by predict. */
    b.y = NULL;
    ck_assert_int_eq(dt_model_predict(m, &v, &b, p, NULL, &err), 0);
    free(r.theta);
    free(p);
    free(x);
    free(y);
    dt_model_free(m);
    dt_tensors_deinit(&v);
}
END_TEST

START_TEST(test_buffers_grow) {
    /* Batches of 5, 50, then 5 rows through one handle give what a fresh
     * handle gives (ASan watches the buffers). */
    const int F = 6, K = 3;
    const int hidden[] = {8, 4};
    dt_job job = mlp_of(F, K, 2, hidden, 4);
    dt_tensors v, g1, g2;
    vars_of(&job, &v);
    vars_of(&job, &g1);
    vars_of(&job, &g2);
    dt_model_init(&job.model, job.seed, &v);
    float *x, *y;
    random_batch(50, F, K, 5, &x, &y);
    dt_batch small = {.rows = 5, .cols = F, .x = x, .y = y};
    dt_batch big = {.rows = 50, .cols = F, .x = x, .y = y};
    dt_model *m = model_of(&job), *fresh = model_of(&job);
    double l1 = 0, l2 = 0, l3 = 0;
    dt_err err = {0};
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &small, &g1, &l1, &err), 0);
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &big, &g1, &l2, &err), 0);
    ck_assert_int_eq(dt_model_loss_grad(fresh, &v, &big, &g2, &l3, &err), 0);
    ck_assert_double_eq(l2, l3);
    ck_assert_int_eq(memcmp(g1.slab, g2.slab, g1.slab_bytes), 0);
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &small, &g1, &l2, &err), 0);
    dt_model_free(fresh);
    fresh = model_of(&job);
    ck_assert_int_eq(dt_model_loss_grad(fresh, &v, &small, &g2, &l3, &err), 0);
    ck_assert_double_eq(l1, l2);
    ck_assert_double_eq(l2, l3);
    ck_assert_int_eq(memcmp(g1.slab, g2.slab, g1.slab_bytes), 0);
    free(x);
    free(y);
    dt_model_free(m);
    dt_model_free(fresh);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g1);
    dt_tensors_deinit(&g2);
}
END_TEST

/* The outputs the last loss_grad saw, for the chief's "output" histogram:
 * linear's predictions X W + b, a classifier's logits (whose softmax is
 * what predict gives), kept after the gradient is computed; none after
 * evaluate, predict or a failed step. */
static void check_output(dt_job job, int K) {
    const int F = 4, B = 7;
    dt_tensors v, g;
    vars_of(&job, &v);
    vars_of(&job, &g);
    dt_model_init(&job.model, 8, &v);
    for (int64_t i = 0; i < dt_tensor_numel(&v.items[1]); i++)
        bias(&v)[i] = 0.25f * (float)(i + 1); /* biases show in the output */
    float *x, *y;
    random_batch(B, F, K, 21, &x, &y);
    if (job.model.kind == DT_MODEL_LINEAR)
        for (int i = 0; i < B; i++)
            y[i] = 0.5f * (float)i;
    dt_batch b = {.rows = B, .cols = F, .x = x, .y = y};
    dt_model *m = model_of(&job);
    int rows = -1;
    ck_assert_ptr_null(dt_model_output(m, &rows));
    ck_assert_int_eq(rows, 0);
    double loss = 0;
    dt_err err = {0};
    ck_assert_msg(dt_model_loss_grad(m, &v, &b, &g, &loss, &err) == 0, "%s", err.msg);
    const float *z = dt_model_output(m, &rows);
    ck_assert_ptr_nonnull(z);
    ck_assert_int_eq(rows, B);
    const int O = dt_model_out_cols(m);
    float *out = malloc((size_t)B * (size_t)O * sizeof *out);
    float *kept = malloc((size_t)B * (size_t)O * sizeof *kept);
    ck_assert(out && kept);
    memcpy(kept, z, (size_t)B * (size_t)O * sizeof *kept);
    ck_assert_int_eq(dt_model_predict(m, &v, &b, out, NULL, &err), 0);
    for (int i = 0; i < B; i++) {
        if (job.model.kind == DT_MODEL_LINEAR) {
            double pred = bias(&v)[0];
            for (int j = 0; j < F; j++)
                pred += (double)x[i * F + j] * weight(&v)[j];
            ck_assert_double_eq_tol(kept[i], pred, 1e-5);
            ck_assert_float_eq(kept[i], out[i]);
            continue;
        }
        double mx = kept[i * O], sum = 0;
        for (int k = 1; k < O; k++)
            mx = fmax(mx, kept[i * O + k]);
        for (int k = 0; k < O; k++)
            sum += exp(kept[i * O + k] - mx);
        for (int k = 0; k < O; k++)
            ck_assert_double_eq_tol(exp(kept[i * O + k] - mx) / sum, out[i * O + k], 1e-6);
    }
    /* predict reused the buffer: no output to show now. */
    ck_assert_ptr_null(dt_model_output(m, &rows));
    ck_assert_int_eq(rows, 0);
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, &g, &loss, &err), 0);
    ck_assert_int_eq(memcmp(dt_model_output(m, &rows), kept, (size_t)B * (size_t)O * 4), 0);
    double accuracy;
    ck_assert_int_eq(dt_model_evaluate(m, &v, &b, &loss, &accuracy, &err), 0);
    ck_assert_ptr_null(dt_model_output(m, &rows));
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, &g, &loss, &err), 0);
    b.cols = F + 1; /* refused */
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, &g, &loss, &err), DT_EINVAL);
    ck_assert_ptr_null(dt_model_output(m, &rows));
    ck_assert_int_eq(rows, 0);
    free(out);
    free(kept);
    free(x);
    free(y);
    dt_model_free(m);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
}

START_TEST(test_output_after_step) {
    check_output(job_of("linear", 4, 1), 1);
    dt_job softmax = job_of("softmax", 4, 1);
    softmax.model.num_classes = 3;
    check_output(softmax, 3);
    const int hidden[] = {5};
    check_output(mlp_of(4, 3, 1, hidden, 1), 3);
}
END_TEST

/* ---- bad input ---------------------------------------------------------- */

START_TEST(test_loss_errors) {
    dt_job job = job_of("linear", 3, 1);
    dt_tensors v, g, other;
    vars_of(&job, &v);
    vars_of(&job, &g);
    dt_model *m = model_of(&job);
    static const float x[6] = {0}, y[3] = {0};
    dt_batch b = {.rows = 2, .cols = 2, .x = x, .y = y};
    double loss = 0, acc = 0;
    dt_err err = {0};
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, &g, &loss, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "model: linear: batch has 2 features, \"features\" is 3");
    ck_assert(isnan(loss));
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_evaluate(m, &v, &b, &loss, &acc, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "model: linear: batch has 2 features, \"features\" is 3");
    ck_assert(isnan(loss) && isnan(acc));
    float out[3];
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_predict(m, &v, &b, out, NULL, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "model: linear: batch has 2 features, \"features\" is 3");

    b.cols = 3;
    b.rows = 0;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, &g, &loss, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "model: linear: empty batch (0 rows)");
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_evaluate(m, &v, &b, &loss, &acc, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "empty batch"));
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_predict(m, &v, &b, out, NULL, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "empty batch"));

    /* Variables shaped for another F. */
    b.rows = 2;
    dt_job job4 = job_of("linear", 4, 1);
    vars_of(&job4, &other);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_loss_grad(m, &other, &b, &g, &loss, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "model: linear: variables 0: want linear/weight F32 (3, 1), "
                              "got linear/weight F32 (4, 1)");
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, &other, &loss, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "gradients 0"));
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_predict(m, &other, &b, out, NULL, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "variables 0"));
    /* Too few tensors. */
    other.count = 1;
    dt_model *m4 = model_of(&job4);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_loss_grad(m4, &other, &b, NULL, &loss, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "model: linear: 1 variables, want 2");
    other.count = 2;
    dt_model_free(m4);
    /* Another model's variables. */
    dt_job soft = job_of("softmax", 3, 1);
    dt_tensors sv;
    vars_of(&soft, &sv);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_loss_grad(m, &sv, &b, NULL, &loss, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "model: linear: variables 0: want linear/weight F32 (3, 1), "
                              "got softmax/weight F32 (3, 2)");
    /* A target that is not a number. */
    const float bad_y[] = {0, INFINITY};
    b.y = bad_y;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, &g, &loss, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "model: linear: batch row 1: target inf is not a finite number");
    dt_model_free(m);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
    dt_tensors_deinit(&other);
    dt_tensors_deinit(&sv);
}
END_TEST

/* loss_grad and evaluate refuse label y at row 2 of a batch with msg. */
static void bad_label(const dt_job *job, float label, const char *want) {
    dt_tensors v, g;
    vars_of(job, &v);
    vars_of(job, &g);
    dt_model *m = model_of(job);
    float x[4 * 8] = {0}, y[4] = {0, 1, label, 0};
    ck_assert_int_le(job->model.num_features, 8);
    dt_batch b = {.rows = 4, .cols = job->model.num_features, .x = x, .y = y};
    double loss = 0, acc = 0;
    dt_err err = {0};
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, &g, &loss, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, want);
    ck_assert(isnan(loss));
    dt_err_clear(&err);
    ck_assert_int_eq(dt_model_evaluate(m, &v, &b, &loss, &acc, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, want);
    ck_assert(isnan(loss) && isnan(acc));
    /* Predict does not read labels. */
    float out[4 * 16];
    ck_assert_int_le(dt_model_out_cols(m), 16);
    ck_assert_int_eq(dt_model_predict(m, &v, &b, out, NULL, &err), 0);
    dt_model_free(m);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
}

START_TEST(test_label_errors) {
    dt_job job = job_of("softmax", 2, 1);
    job.model.num_classes = 3;
    bad_label(&job, 3,
              "model: softmax: batch row 2: label 3 is not a class (want an integer in 0..2)");
    bad_label(&job, -1,
              "model: softmax: batch row 2: label -1 is not a class (want an integer "
              "in 0..2)");
    bad_label(&job, 1.5f,
              "model: softmax: batch row 2: label 1.5 is not a class (want an integer "
              "in 0..2)");
    bad_label(&job, NAN,
              "model: softmax: batch row 2: label nan is not a class (want an integer "
              "in 0..2)");
    const int hidden[] = {4};
    job = mlp_of(3, 10, 1, hidden, 1);
    bad_label(&job, 10,
              "model: mlp: batch row 2: label 10 is not a class (want an integer in "
              "0..9)");
    job = job_of("logistic", 2, 1);
    bad_label(&job, 2, "model: logistic: batch row 2: label 2 is not 0 or 1");
    bad_label(&job, 0.5f, "model: logistic: batch row 2: label 0.5 is not 0 or 1");
}
END_TEST

/* ---- least squares and training ---------------------------------------- */

START_TEST(test_lstsq) {
    /* Exact line y = 2x + 1. */
    static const float x[] = {0, 1, 2, 3}, y[] = {1, 3, 5, 7};
    dt_batch b = {.rows = 4, .cols = 1, .x = x, .y = y};
    double w = 0, c = 0;
    dt_err err = {0};
    ck_assert_int_eq(dt_test_lstsq_line(&b, &w, &c, &err), 0);
    ck_assert_double_eq_tol(w, 2.0, 1e-12);
    ck_assert_double_eq_tol(c, 1.0, 1e-12);
    /* Golden off-line fit: (0,0), (1,1), (2,1): w = 1/2, b = 1/6. */
    static const float y2[] = {0, 1, 1};
    dt_batch b2 = {.rows = 3, .cols = 1, .x = x, .y = y2};
    ck_assert_int_eq(dt_test_lstsq_line(&b2, &w, &c, &err), 0);
    ck_assert_double_eq_tol(w, 0.5, 1e-12);
    ck_assert_double_eq_tol(c, 1.0 / 6, 1e-12);

    /* The line data set recovers y = 2x, and the residuals are orthogonal
     * to (1, x) as least squares requires. */
    dt_job job = job_of("linear", 1, 8);
    job.data.num_examples = 1000;
    job.data.noise = 0.1;
    dt_dataset *ds = NULL;
    ck_assert_int_eq(dt_job_open_data(&job, 0, 1, &ds, NULL), 0);
    dt_batch all;
    ck_assert_int_eq(dt_data_all(ds, &all, NULL), 0);
    ck_assert_int_eq(dt_test_lstsq_line(&all, &w, &c, &err), 0);
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
    ck_assert_int_eq(dt_test_lstsq_line(&b, &w, &c, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "lstsq: batch has 2 features, want 1");
    ck_assert(isnan(w) && isnan(c));
    b.cols = 1;
    b.rows = 1;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_test_lstsq_line(&b, &w, &c, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "at least 2 examples"));
    static const float same[] = {4, 4, 4};
    dt_batch flat = {.rows = 3, .cols = 1, .x = same, .y = y};
    dt_err_clear(&err);
    ck_assert_int_eq(dt_test_lstsq_line(&flat, &w, &c, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "every x is the same"));
}
END_TEST

START_TEST(test_sgd_reaches_lstsq) {
    /* data -> loss_grad -> optim, as a worker and a ps would run them. */
    dt_job job = job_of("linear", 1, 31);
    job.data.num_examples = 200;
    job.data.noise = 0.2;
    dt_optim_defaults(&job.optim);
    dt_dataset *ds = NULL;
    dt_err err = {0};
    ck_assert_int_eq(dt_job_open_data(&job, 0, 1, &ds, &err), 0);
    dt_tensors v, g;
    vars_of(&job, &v);
    vars_of(&job, &g);
    dt_model_init(&job.model, job.seed, &v);
    dt_model *m = model_of(&job);
    double first = 0, loss = 0;
    for (int step = 1; step <= 3000; step++) {
        dt_batch b;
        ck_assert_int_eq(dt_data_next(ds, 20, &b, &err), 0);
        ck_assert_int_eq(dt_model_loss_grad(m, &v, &b, &g, &loss, &err), 0);
        if (step == 1) first = loss;
        for (int k = 0; k < v.count; k++)
            dt_optim_apply(&job.optim, 0.1, step, v.items[k].data, NULL, g.items[k].data,
                           dt_tensor_numel(&v.items[k]));
    }
    dt_batch all;
    double w = 0, c = 0;
    ck_assert_int_eq(dt_data_all(ds, &all, &err), 0);
    ck_assert_int_eq(dt_test_lstsq_line(&all, &w, &c, &err), 0);
    ck_assert_int_eq(dt_model_loss_grad(m, &v, &all, NULL, &loss, &err), 0);
    ck_assert_msg(fabs(weight(&v)[0] - w) < 0.05 && fabs(bias(&v)[0] - c) < 0.03,
                  "sgd w %g b %g, lstsq w %g b %g", weight(&v)[0], bias(&v)[0], w, c);
    ck_assert_msg(loss < 0.2 * 0.2 * 1.2 && loss < first, "loss %g (first %g)", loss, first);
    dt_model_free(m);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
    dt_data_free(ds);
}
END_TEST

/* Two-feature points labelled by `kind`, with a margin around every
 * boundary:
 *   0  two classes either side of x0 + 2 x1 = 0.2 (linearly separable)
 *   1  three clusters around 120 degrees apart (linearly separable)
 *   2  XOR of the signs of x0 and x1 (not linearly separable) */
static void toy_set(int kind, int n, uint64_t seed, float *x, float *y) {
    uint64_t st = seed;
    for (int i = 0; i < n;) {
        double a = uniform(&st), b = uniform(&st);
        if (kind == 0) {
            double s = a + 2 * b - 0.2;
            if (fabs(s) < 0.3) continue;
            y[i] = s > 0;
        } else if (kind == 1) {
            int k = (int)((uniform(&st) + 1) / 2 * 3);
            double angle = 2.0943951023931953 * k; /* 2 pi / 3 */
            y[i] = (float)k;
            a = 2 * cos(angle) + 0.7 * a;
            b = 2 * sin(angle) + 0.7 * b;
        } else {
            if (fabs(a) < 0.2 || fabs(b) < 0.2) continue;
            y[i] = (a > 0) != (b > 0);
        }
        x[2 * i] = (float)a;
        x[2 * i + 1] = (float)b;
        i++;
    }
}

/* Plain SGD over minibatches of the toy set; returns the final accuracy on
 * the whole set (evaluate) and checks the loss went down. */
static double train_toy(dt_job job, int kind, int steps, double lr) {
    enum { N = 240, BATCH = 24 };
    float x[2 * N], y[N];
    toy_set(kind, N, job.seed + 100, x, y);
    dt_optim_defaults(&job.optim);
    dt_tensors v, g;
    vars_of(&job, &v);
    vars_of(&job, &g);
    dt_model_init(&job.model, job.seed, &v);
    dt_model *m = model_of(&job);
    dt_batch all = {.rows = N, .cols = 2, .x = x, .y = y};
    double first = 0, acc = 0, loss = 0;
    dt_err err = {0};
    ck_assert_int_eq(dt_model_evaluate(m, &v, &all, &first, &acc, &err), 0);
    for (int step = 1; step <= steps; step++) {
        int start = (step - 1) % (N / BATCH) * BATCH;
        dt_batch b = {.rows = BATCH, .cols = 2, .x = x + 2 * start, .y = y + start};
        ck_assert_msg(dt_model_loss_grad(m, &v, &b, &g, &loss, &err) == 0, "%s", err.msg);
        for (int k = 0; k < v.count; k++)
            dt_optim_apply(&job.optim, lr, step, v.items[k].data, NULL, g.items[k].data,
                           dt_tensor_numel(&v.items[k]));
    }
    ck_assert_int_eq(dt_model_evaluate(m, &v, &all, &loss, &acc, &err), 0);
    ck_assert_msg(loss < first, "%s: loss %g, first %g", dt_model_kind_names[job.model.kind], loss,
                  first);
    dt_model_free(m);
    dt_tensors_deinit(&v);
    dt_tensors_deinit(&g);
    return acc;
}

START_TEST(test_sgd_separable) {
    dt_job job = job_of("logistic", 2, 41);
    double acc = train_toy(job, 0, 2000, 0.5);
    ck_assert_msg(acc == 1.0, "logistic: accuracy %g", acc);
    job = job_of("softmax", 2, 42);
    job.model.num_classes = 2;
    acc = train_toy(job, 0, 2000, 0.5);
    ck_assert_msg(acc == 1.0, "softmax, 2 classes: accuracy %g", acc);
    job.model.num_classes = 3;
    acc = train_toy(job, 1, 1000, 0.2);
    ck_assert_msg(acc == 1.0, "softmax, 3 classes: accuracy %g", acc);
    const int hidden[] = {16};
    job = mlp_of(2, 3, 1, hidden, 43);
    acc = train_toy(job, 1, 1000, 0.2);
    ck_assert_msg(acc == 1.0, "mlp, 3 classes: accuracy %g", acc);
    /* L2 keeps the weights small but not the separable set from being fit. */
    job.model.l2 = 1e-3;
    acc = train_toy(job, 1, 1000, 0.2);
    ck_assert_msg(acc == 1.0, "mlp with l2, 3 classes: accuracy %g", acc);
}
END_TEST

START_TEST(test_sgd_xor) {
    /* The hidden layer is what fits XOR; softmax regression cannot. */
    const int hidden[] = {16, 8};
    dt_job job = mlp_of(2, 2, 2, hidden, 44);
    double acc = train_toy(job, 2, 4000, 0.2);
    ck_assert_msg(acc == 1.0, "mlp on xor: accuracy %g", acc);
    job = job_of("softmax", 2, 44);
    acc = train_toy(job, 2, 4000, 0.2);
    ck_assert_msg(acc < 0.85, "softmax on xor: accuracy %g", acc);
}
END_TEST

Suite *model_suite(void) {
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_specs);
    tcase_add_test(tc, test_specs_models);
    tcase_add_test(tc, test_specs_errors);
    tcase_add_test(tc, test_init);
    tcase_add_test(tc, test_init_mlp);
    tcase_add_test(tc, test_init_apart_from_data);
    tcase_add_test(tc, test_loss_golden);
    tcase_add_test(tc, test_softmax_golden);
    tcase_add_test(tc, test_logistic_golden);
    tcase_add_test(tc, test_mlp_golden);
    tcase_add_test(tc, test_stable);
    tcase_add_test(tc, test_grad_fd);
    tcase_add_test(tc, test_grad_fd_models);
    tcase_add_test(tc, test_dropout);
    tcase_add_test(tc, test_evaluate_chunks);
    tcase_add_test(tc, test_buffers_grow);
    tcase_add_test(tc, test_output_after_step);
    tcase_add_test(tc, test_loss_errors);
    tcase_add_test(tc, test_label_errors);
    tcase_add_test(tc, test_lstsq);
    suite_add_tcase(s, tc);
    TCase *train = tcase_create("train");
    tcase_set_timeout(train, 60);
    tcase_add_test(train, test_sgd_reaches_lstsq);
    tcase_add_test(train, test_sgd_separable);
    tcase_add_test(train, test_sgd_xor);
    suite_add_tcase(s, train);
    return s;
}
