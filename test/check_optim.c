/*
 * optim suite: config checks, slot layout, and each update rule over several
 * steps against a double-precision reference written out here from TF's
 * formulas.
 */
#include <math.h>
#include <string.h>

#include "optim.h"
#include "suites.h"

#define N 7
#define STEPS 12

/* Deterministic gradients in [-2, 2), some exactly 0, so every rule sees
 * sign changes and a zero. */
static double grad_at(int step, int i) {
    if (i == 3) return 0.0;
    uint32_t h = (uint32_t)(step * 7919 + i * 104729 + 17) * 2654435761u;
    return ((double)(h >> 8) / 16777216.0) * 4.0 - 2.0;
}

static void init_w(float *wf, double *wd) {
    for (int i = 0; i < N; i++) {
        wd[i] = 0.25 * i - 0.8;
        wf[i] = (float)wd[i];
    }
}

/* Runs STEPS updates of cfg in float through dt_optim_apply and in double
 * through ref(), then compares. lr changes each step like a schedule would. */
typedef void (*ref_fn)(const dt_optim_config *cfg, double lr, int t, double *w, double *s0,
                       double *s1, double g, int i);

static void run_and_compare(const dt_optim_config *cfg, ref_fn ref) {
    float wf[N], s0f[N], s1f[N], gf[N];
    double wd[N], s0d[N], s1d[N];
    init_w(wf, wd);
    int slots = dt_optim_num_slots(cfg);
    for (int i = 0; i < N; i++) {
        s0f[i] = slots > 0 ? dt_optim_slot_init(cfg, 0) : 0.0f;
        s1f[i] = slots > 1 ? dt_optim_slot_init(cfg, 1) : 0.0f;
        s0d[i] = s0f[i];
        s1d[i] = s1f[i];
    }
    float *slot_ptrs[DT_OPTIM_MAX_SLOTS] = {s0f, s1f};
    for (int t = 1; t <= STEPS; t++) {
        double lr = 0.05 / (1.0 + 0.1 * t);
        for (int i = 0; i < N; i++)
            gf[i] = (float)grad_at(t, i);
        dt_optim_apply(cfg, lr, t, wf, slot_ptrs, gf, N);
        for (int i = 0; i < N; i++)
            ref(cfg, lr, t, &wd[i], &s0d[i], &s1d[i], gf[i], i);
    }
    for (int i = 0; i < N; i++) {
        ck_assert_msg(fabs(wf[i] - wd[i]) <= 1e-5 + 1e-5 * fabs(wd[i]),
                      "%s: w[%d] = %.9g, reference %.9g", dt_optim_name(cfg->kind), i, wf[i],
                      wd[i]);
        ck_assert_msg(fabs(s0f[i] - s0d[i]) <= 1e-5 + 1e-5 * fabs(s0d[i]),
                      "%s: slot0[%d] = %.9g, reference %.9g", dt_optim_name(cfg->kind), i, s0f[i],
                      s0d[i]);
        ck_assert_msg(fabs(s1f[i] - s1d[i]) <= 1e-5 + 1e-5 * fabs(s1d[i]),
                      "%s: slot1[%d] = %.9g, reference %.9g", dt_optim_name(cfg->kind), i, s1f[i],
                      s1d[i]);
    }
    /* The weights moved: a rule that did nothing would pass the slot checks
     * for sgd trivially, so make sure the comparison means something. */
    double w0[N];
    float unused[N];
    init_w(unused, w0);
    int moved = 0;
    for (int i = 0; i < N; i++)
        moved += fabs(wd[i] - w0[i]) > 1e-3;
    ck_assert_int_ge(moved, N - 1);
}

static void ref_sgd(const dt_optim_config *cfg, double lr, int t, double *w, double *s0, double *s1,
                    double g, int i) {
    (void)cfg, (void)t, (void)s0, (void)s1, (void)i;
    *w -= lr * g;
}

static void ref_momentum(const dt_optim_config *cfg, double lr, int t, double *w, double *a,
                         double *s1, double g, int i) {
    (void)t, (void)s1, (void)i;
    *a = cfg->momentum * *a + g;
    if (cfg->nesterov)
        *w -= lr * (g + cfg->momentum * *a);
    else
        *w -= lr * *a;
}

static void ref_adagrad(const dt_optim_config *cfg, double lr, int t, double *w, double *a,
                        double *s1, double g, int i) {
    (void)t, (void)s1, (void)i;
    *a += g * g;
    *w -= lr * g / (sqrt(*a) + cfg->epsilon);
}

static void ref_adam(const dt_optim_config *cfg, double lr, int t, double *w, double *m, double *v,
                     double g, int i) {
    (void)i;
    double b1 = cfg->beta1, b2 = cfg->beta2;
    double lr_t = lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
    *m = b1 * *m + (1 - b1) * g;
    *v = b2 * *v + (1 - b2) * g * g;
    *w -= lr_t * *m / (sqrt(*v) + cfg->epsilon);
}

/* FTRL-Proximal as McMahan et al. write it (Algorithm 1), in TF's terms:
 * lambda2 = 2*l2, and beta in the denominator. s0 is n, s1 is z. */
static void ref_ftrl(const dt_optim_config *cfg, double lr, int t, double *w, double *n, double *z,
                     double g, int i) {
    (void)t, (void)i;
    double n_new = *n + g * g;
    double sigma = (sqrt(n_new) - sqrt(*n)) / lr;
    *z += g - sigma * *w;
    *n = n_new;
    double l1 = cfg->ftrl_l1, lambda2 = 2 * cfg->ftrl_l2;
    *w = fabs(*z) <= l1 ? 0.0
                        : -(*z - copysign(l1, *z)) / ((cfg->ftrl_beta + sqrt(*n)) / lr + lambda2);
}

/* A config whose learning_rate must never be read by dt_optim_apply. */
static dt_optim_config config(dt_optim_kind kind) {
    dt_optim_config cfg;
    dt_optim_defaults(&cfg);
    cfg.kind = kind;
    cfg.learning_rate = 1000.0;
    return cfg;
}

START_TEST(test_defaults) {
    dt_optim_config cfg;
    memset(&cfg, 0x5a, sizeof cfg);
    dt_optim_defaults(&cfg);
    ck_assert_int_eq(cfg.kind, DT_OPTIM_SGD);
    ck_assert_double_eq(cfg.learning_rate, 0.01);
    ck_assert_double_eq(cfg.momentum, 0.9);
    ck_assert_int_eq(cfg.nesterov, 0);
    ck_assert_double_eq(cfg.beta1, 0.9);
    ck_assert_double_eq(cfg.beta2, 0.999);
    ck_assert_double_eq(cfg.epsilon, 1e-7);
    ck_assert_double_eq(cfg.initial_accumulator, 0.1);
    ck_assert_double_eq(cfg.ftrl_l1, 0);
    ck_assert_double_eq(cfg.ftrl_l2, 0);
    ck_assert_double_eq(cfg.ftrl_beta, 0);
    dt_err err = {0};
    ck_assert_int_eq(dt_optim_check(&cfg, &err), 0);
}
END_TEST

START_TEST(test_check_errors) {
    static const struct {
        const char *field;
        double value;
        const char *want;
    } cases[] = {
        {"learning_rate", 0, "optimizer: \"learning_rate\" must be a positive number (got 0)"},
        {"learning_rate", -1, "\"learning_rate\""},
        {"learning_rate", NAN, "\"learning_rate\""},
        {"learning_rate", INFINITY, "\"learning_rate\""},
        {"momentum", 1.0, "optimizer: \"momentum\" must be in [0, 1) (got 1)"},
        {"momentum", -0.1, "\"momentum\""},
        {"nesterov", 2, "optimizer: \"nesterov\" must be 0 or 1 (got 2)"},
        {"beta1", 1.0, "\"beta1\""},
        {"beta2", -0.5, "\"beta2\""},
        {"beta2", NAN, "\"beta2\""},
        {"epsilon", 0, "optimizer: \"epsilon\" must be a positive number (got 0)"},
        {"initial_accumulator", -1e-3, "\"initial_accumulator\""},
        {"ftrl_l1", -1e-3,
         "optimizer: \"l1_regularization_strength\" must be a number >= 0 (got -0.001)"},
        {"ftrl_l2", NAN, "\"l2_regularization_strength\""},
        {"ftrl_beta", INFINITY, "\"ftrl_beta\""},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        dt_optim_config cfg;
        dt_optim_defaults(&cfg);
        cfg.kind = DT_OPTIM_ADAM;
        const char *f = cases[k].field;
        double v = cases[k].value;
        if (!strcmp(f, "learning_rate")) cfg.learning_rate = v;
        if (!strcmp(f, "momentum")) cfg.momentum = v;
        if (!strcmp(f, "nesterov")) cfg.nesterov = (int)v;
        if (!strcmp(f, "beta1")) cfg.beta1 = v;
        if (!strcmp(f, "beta2")) cfg.beta2 = v;
        if (!strcmp(f, "epsilon")) cfg.epsilon = v;
        if (!strcmp(f, "initial_accumulator")) cfg.initial_accumulator = v;
        if (!strcmp(f, "ftrl_l1")) cfg.ftrl_l1 = v;
        if (!strcmp(f, "ftrl_l2")) cfg.ftrl_l2 = v;
        if (!strcmp(f, "ftrl_beta")) cfg.ftrl_beta = v;
        dt_err err = {0};
        ck_assert_int_eq(dt_optim_check(&cfg, &err), DT_EINVAL);
        ck_assert_int_eq(err.code, DT_EINVAL);
        ck_assert_msg(strstr(err.msg, cases[k].want) != NULL, "case %zu: got \"%s\"", k, err.msg);
        ck_assert_msg(strncmp(err.msg, "optimizer: ", 11) == 0, "%s", err.msg);
        /* NULL err is allowed and still fails. */
        ck_assert_int_eq(dt_optim_check(&cfg, NULL), DT_EINVAL);
    }
}
END_TEST

START_TEST(test_check_name) {
    /* One table both ways: every kind's name parses back to the kind. */
    static const char *const good[] = {"sgd", "momentum", "adagrad", "adam", "ftrl"};
    for (int k = 0; k < 5; k++) {
        ck_assert_str_eq(dt_optim_name(k), good[k]);
        ck_assert_str_eq(dt_optim_names[k], good[k]);
        ck_assert_int_eq(dt_optim_from_name(good[k]), k);
        dt_optim_config cfg = config((dt_optim_kind)k);
        ck_assert_int_eq(dt_optim_check(&cfg, NULL), 0);
    }
    ck_assert_ptr_null(dt_optim_names[5]);
    ck_assert_ptr_null(dt_optim_name(5));
    ck_assert_ptr_null(dt_optim_name(-1));
    /* Unknown names, the empty one and prefixes of known ones are not names. */
    ck_assert_int_eq(dt_optim_from_name("rmsprop"), -1);
    ck_assert_int_eq(dt_optim_from_name(""), -1);
    ck_assert_int_eq(dt_optim_from_name("ada"), -1);
    ck_assert_int_eq(dt_optim_from_name("SGD"), -1);
    ck_assert_int_eq(dt_optim_from_name(NULL), -1);
    /* A kind out of range (a config built by hand) is refused, not used. */
    dt_optim_config cfg;
    dt_optim_defaults(&cfg);
    dt_err err = {0};
    cfg.kind = (dt_optim_kind)5;
    ck_assert_int_eq(dt_optim_check(&cfg, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg,
                     "optimizer: unknown kind 5 (want sgd, momentum, adagrad, adam or ftrl)");
    cfg.kind = (dt_optim_kind)-1;
    ck_assert_int_eq(dt_optim_check(&cfg, NULL), DT_EINVAL);
}
END_TEST

START_TEST(test_slots) {
    dt_optim_config cfg = config(DT_OPTIM_SGD);
    ck_assert_int_eq(dt_optim_num_slots(&cfg), 0);

    cfg = config(DT_OPTIM_MOMENTUM);
    ck_assert_int_eq(dt_optim_num_slots(&cfg), 1);
    ck_assert_str_eq(dt_optim_slot_name(&cfg, 0), "momentum");
    ck_assert_float_eq(dt_optim_slot_init(&cfg, 0), 0.0f);

    cfg = config(DT_OPTIM_ADAGRAD);
    cfg.initial_accumulator = 0.25;
    ck_assert_int_eq(dt_optim_num_slots(&cfg), 1);
    ck_assert_str_eq(dt_optim_slot_name(&cfg, 0), "accumulator");
    ck_assert_float_eq(dt_optim_slot_init(&cfg, 0), 0.25f);

    cfg = config(DT_OPTIM_ADAM);
    ck_assert_int_eq(dt_optim_num_slots(&cfg), 2);
    ck_assert_int_le(dt_optim_num_slots(&cfg), DT_OPTIM_MAX_SLOTS);
    ck_assert_str_eq(dt_optim_slot_name(&cfg, 0), "m");
    ck_assert_str_eq(dt_optim_slot_name(&cfg, 1), "v");
    ck_assert_float_eq(dt_optim_slot_init(&cfg, 0), 0.0f);
    ck_assert_float_eq(dt_optim_slot_init(&cfg, 1), 0.0f);

    cfg = config(DT_OPTIM_FTRL);
    cfg.initial_accumulator = 0.5;
    ck_assert_int_eq(dt_optim_num_slots(&cfg), 2);
    ck_assert_str_eq(dt_optim_slot_name(&cfg, 0), "accumulator");
    ck_assert_str_eq(dt_optim_slot_name(&cfg, 1), "linear");
    ck_assert_float_eq(dt_optim_slot_init(&cfg, 0), 0.5f);
    ck_assert_float_eq(dt_optim_slot_init(&cfg, 1), 0.0f);
}
END_TEST

START_TEST(test_sgd) {
    dt_optim_config cfg = config(DT_OPTIM_SGD);
    run_and_compare(&cfg, ref_sgd);
    /* Golden single step: w -= lr * g. */
    float w[2] = {1.0f, -2.0f};
    const float g[2] = {0.5f, -4.0f};
    dt_optim_apply(&cfg, 0.1, 1, w, NULL, g, 2);
    ck_assert_float_eq_tol(w[0], 0.95f, 1e-7f);
    ck_assert_float_eq_tol(w[1], -1.6f, 1e-7f);
}
END_TEST

START_TEST(test_momentum) {
    dt_optim_config cfg = config(DT_OPTIM_MOMENTUM);
    run_and_compare(&cfg, ref_momentum);
    cfg.momentum = 0.5;
    run_and_compare(&cfg, ref_momentum);
    /* Golden: two steps of g = 1, mu = 0.9, lr = 0.1: accum 1 then 1.9. */
    cfg.momentum = 0.9;
    float w = 0.0f, accum = 0.0f, g = 1.0f;
    float *slots[1] = {&accum};
    dt_optim_apply(&cfg, 0.1, 1, &w, slots, &g, 1);
    dt_optim_apply(&cfg, 0.1, 2, &w, slots, &g, 1);
    ck_assert_float_eq_tol(accum, 1.9f, 1e-6f);
    ck_assert_float_eq_tol(w, -0.29f, 1e-6f);
}
END_TEST

START_TEST(test_nesterov) {
    dt_optim_config cfg = config(DT_OPTIM_MOMENTUM);
    cfg.nesterov = 1;
    run_and_compare(&cfg, ref_momentum);
    /* Golden: g = 1, mu = 0.9, lr = 0.1: step 1 moves lr*(1 + 0.9*1) = 0.19,
     * step 2 lr*(1 + 0.9*1.9) = 0.271. */
    float w = 0.0f, accum = 0.0f, g = 1.0f;
    float *slots[1] = {&accum};
    dt_optim_apply(&cfg, 0.1, 1, &w, slots, &g, 1);
    ck_assert_float_eq_tol(w, -0.19f, 1e-6f);
    dt_optim_apply(&cfg, 0.1, 2, &w, slots, &g, 1);
    ck_assert_float_eq_tol(w, -0.461f, 1e-6f);
}
END_TEST

START_TEST(test_adagrad) {
    dt_optim_config cfg = config(DT_OPTIM_ADAGRAD);
    run_and_compare(&cfg, ref_adagrad);
    /* A large eps shows where it goes: outside the square root. */
    cfg.epsilon = 0.5;
    run_and_compare(&cfg, ref_adagrad);
    cfg.epsilon = 1e-7;
    /* Golden: accum 0.1 + 0.3^2 = 0.19, w -= 0.1 * 0.3 / sqrt(0.19). */
    float w = 1.0f, accum = dt_optim_slot_init(&cfg, 0), g = 0.3f;
    float *slots[1] = {&accum};
    dt_optim_apply(&cfg, 0.1, 1, &w, slots, &g, 1);
    ck_assert_float_eq_tol(accum, 0.19f, 1e-7f);
    ck_assert_float_eq_tol(w, (float)(1.0 - 0.03 / sqrt(0.19)), 1e-6f);
    /* A zero accumulator and a zero gradient give no step, not NaN. */
    cfg.initial_accumulator = 0;
    float w0 = 2.0f, a0 = 0.0f, g0 = 0.0f;
    float *slots0[1] = {&a0};
    dt_optim_apply(&cfg, 0.1, 1, &w0, slots0, &g0, 1);
    ck_assert_float_eq(w0, 2.0f);
}
END_TEST

START_TEST(test_adam) {
    dt_optim_config cfg = config(DT_OPTIM_ADAM);
    run_and_compare(&cfg, ref_adam);
    cfg.beta1 = 0.5;
    cfg.beta2 = 0.75;
    cfg.epsilon = 1e-3;
    run_and_compare(&cfg, ref_adam);
    /* Golden: Adam's first step moves every weight by about lr against the
     * sign of its gradient, whatever the gradient's size (bias correction). */
    cfg = config(DT_OPTIM_ADAM);
    float w[3] = {0.0f, 0.0f, 0.0f}, m[3] = {0}, v[3] = {0};
    const float g[3] = {1e-2f, -3.0f, 40.0f};
    float *slots[2] = {m, v};
    dt_optim_apply(&cfg, 0.001, 1, w, slots, g, 3);
    ck_assert_float_eq_tol(w[0], -0.001f, 1e-6f); /* eps shows at |g| = 0.01 */
    ck_assert_float_eq_tol(w[1], 0.001f, 1e-7f);
    ck_assert_float_eq_tol(w[2], -0.001f, 1e-7f);
    ck_assert_float_eq_tol(m[1], -0.3f, 1e-6f);
    ck_assert_float_eq_tol(v[1], 0.009f, 1e-7f);
}
END_TEST

START_TEST(test_ftrl) {
    dt_optim_config cfg = config(DT_OPTIM_FTRL);
    cfg.ftrl_l1 = 0.01;
    cfg.ftrl_l2 = 0.1;
    cfg.ftrl_beta = 0.5;
    run_and_compare(&cfg, ref_ftrl);
    cfg.ftrl_l1 = 0.3;
    cfg.ftrl_l2 = 0;
    cfg.ftrl_beta = 0;
    cfg.initial_accumulator = 0.01;
    run_and_compare(&cfg, ref_ftrl);
    /* Golden, worked by hand: alpha 0.5, beta 1, l1 0.1, l2 0.25, n from 0.
     * g = 1:     n = 1,    z = 1,           w = (0.1 - 1) / ((1 + 1)/0.5 + 0.5) = -0.2
     * g = -0.5:  n = 1.25, z = 0.5 + sigma*0.2 with sigma = (sqrt(1.25) - 1)/0.5,
     *            w = (0.1 - z) / ((1 + sqrt(1.25))/0.5 + 0.5)
     * g = 0.25:  the same once more. */
    cfg = config(DT_OPTIM_FTRL);
    cfg.ftrl_l1 = 0.1;
    cfg.ftrl_l2 = 0.25;
    cfg.ftrl_beta = 1;
    cfg.initial_accumulator = 0;
    float w = 0.0f, n = dt_optim_slot_init(&cfg, 0), z = dt_optim_slot_init(&cfg, 1);
    float *slots[2] = {&n, &z};
    const float g[3] = {1.0f, -0.5f, 0.25f};
    const double want_w[3] = {-0.2, -0.09442719099991588, -0.1466052291304359};
    const double want_z[3] = {1.0, 0.547213595499958, 0.8024278527093733};
    for (int k = 0; k < 3; k++) {
        dt_optim_apply(&cfg, 0.5, k + 1, &w, slots, &g[k], 1);
        ck_assert_msg(fabs(w - want_w[k]) < 1e-6, "step %d: w %.9g", k + 1, w);
        ck_assert_msg(fabs(z - want_z[k]) < 1e-6, "step %d: z %.9g", k + 1, z);
    }
    ck_assert_float_eq(n, 1.3125f);
    /* |z| <= l1 is exactly 0, not a small number. */
    w = 0.7f;
    n = 0.0f;
    z = 0.0f;
    float tiny = 0.05f;
    dt_optim_apply(&cfg, 0.5, 1, &w, slots, &tiny, 1);
    ck_assert(w == 0.0f);
}
END_TEST

/* With L1, FTRL keeps the weights of features that carry no signal at
 * exactly 0: 200 coordinates with zero-mean noise as gradient and 10 with a
 * steady push. Without L1 almost none is 0. */
static int ftrl_zeros(double l1, float *w_signal_min) {
    enum { COORDS = 210, SIGNAL = 10, STEPS_L1 = 400 };
    static float w[COORDS], n[COORDS], z[COORDS], g[COORDS];
    dt_optim_config cfg = config(DT_OPTIM_FTRL);
    cfg.ftrl_l1 = l1;
    cfg.ftrl_l2 = 0.01;
    cfg.ftrl_beta = 1;
    for (int i = 0; i < COORDS; i++) {
        w[i] = z[i] = 0.0f;
        n[i] = dt_optim_slot_init(&cfg, 0);
    }
    float *slots[2] = {n, z};
    for (int t = 1; t <= STEPS_L1; t++) {
        for (int i = 0; i < COORDS; i++) {
            /* uniform in [-1, 1): zero-mean noise, a hash of (t, i) */
            uint32_t h = (uint32_t)(t * 7919 + i * 104729 + 5) * 2654435761u;
            double noise = (double)(h >> 8) / 8388608.0 - 1.0;
            g[i] = (float)(noise + (i < SIGNAL ? -0.8 : 0.0)); /* the signal pulls w up */
        }
        dt_optim_apply(&cfg, 0.1, t, w, slots, g, COORDS);
    }
    int zeros = 0;
    *w_signal_min = w[0];
    for (int i = 0; i < COORDS; i++) {
        zeros += w[i] == 0.0f;
        if (i < SIGNAL && w[i] < *w_signal_min) *w_signal_min = w[i];
    }
    return zeros;
}

START_TEST(test_ftrl_l1_sparsity) {
    float signal_min;
    /* The noise's z is a random walk of sd sqrt(400 / 3) = 11.5: an l1 of
     * 25 (2.2 sd) keeps all but a few percent at 0. */
    int zeros = ftrl_zeros(25.0, &signal_min);
    ck_assert_msg(zeros >= 180, "with l1: %d of 210 weights are 0", zeros);
    ck_assert_msg(signal_min > 0.1f, "with l1: a signal weight is %g", signal_min);
    zeros = ftrl_zeros(0.0, &signal_min);
    ck_assert_msg(zeros <= 10, "without l1: %d of 210 weights are 0", zeros);
    ck_assert_msg(signal_min > 0.1f, "without l1: a signal weight is %g", signal_min);
}
END_TEST

/* A sparse variable of R rows of D floats: dense arrays (weights, slots)
 * and the same values as records for dt_optim_apply_rows. */
enum { R = 9, D = 3 };

static void fill_rows(const dt_optim_config *cfg, float *w, float *s0, float *s1, float *rec) {
    const int S = dt_optim_num_slots(cfg);
    for (int r = 0; r < R; r++)
        for (int j = 0; j < D; j++) {
            int i = r * D + j;
            w[i] = (float)(0.1 * i - 1.0);
            s0[i] = S > 0 ? dt_optim_slot_init(cfg, 0) + 0.01f * (float)i : 0.0f;
            s1[i] = S > 1 ? dt_optim_slot_init(cfg, 1) + 0.02f * (float)j : 0.0f;
            float *record = rec + (size_t)r * (size_t)(1 + S) * D;
            record[j] = w[i];
            if (S > 0) record[D + j] = s0[i];
            if (S > 1) record[2 * D + j] = s1[i];
        }
}

/* Applies 5 steps to rows {1, 4, 8} (then {0, 4}, alternating), lazily to
 * the records and densely (zero gradient elsewhere) to the arrays. Returns
 * 1 when the two agree bit for bit on every row, and checks that untouched
 * records never changed. */
static int lazy_vs_dense(const dt_optim_config *cfg) {
    const int S = dt_optim_num_slots(cfg);
    float w[R * D], s0[R * D], s1[R * D], rec[R * 3 * D], before[R * 3 * D];
    fill_rows(cfg, w, s0, s1, rec);
    if (cfg->kind == DT_OPTIM_FTRL) {
        /* ftrl's w is a function of z and n once a row has been updated;
         * start from that state (a zero gradient step sets it). */
        float zero[R * D] = {0}, *slots[2] = {s0, s1};
        dt_optim_apply(cfg, 0.05, 1, w, slots, zero, R * D);
        for (int i = 0; i < R * D; i++)
            rec[(size_t)(i / D) * (1 + S) * D + i % D] = w[i];
    }
    int same = 1;
    for (int t = 1; t <= 5; t++) {
        static const int odd[] = {1, 4, 8}, even[] = {0, 4};
        const int *touched = t % 2 ? odd : even, count = t % 2 ? 3 : 2;
        float dense_g[R * D] = {0}, rows_g[3 * D];
        float *rows[3];
        const void *grads[3] = {rows_g, rows_g + D, rows_g + 2 * D};
        for (int k = 0; k < count; k++) {
            rows[k] = rec + (size_t)touched[k] * (size_t)(1 + S) * D;
            for (int j = 0; j < D; j++) {
                float gv = (float)grad_at(t, touched[k] * D + j);
                rows_g[k * D + j] = gv;
                dense_g[touched[k] * D + j] = gv;
            }
        }
        memcpy(before, rec, sizeof rec);
        dt_optim_apply_rows(cfg, 0.05, t, rows, grads, count, D);
        float *slots[2] = {s0, s1};
        dt_optim_apply(cfg, 0.05, t, w, slots, dense_g, R * D);
        for (int r = 0; r < R; r++) {
            int hit = 0;
            for (int k = 0; k < count; k++)
                hit |= touched[k] == r;
            const float *record = rec + (size_t)r * (size_t)(1 + S) * D;
            if (!hit)
                ck_assert_msg(memcmp(record, before + (record - rec),
                                     (size_t)(1 + S) * D * sizeof(float)) == 0,
                              "%s: step %d: untouched row %d changed", dt_optim_name(cfg->kind), t,
                              r);
            for (int j = 0; j < D; j++) {
                int i = r * D + j;
                same &= record[j] == w[i];
                if (S > 0) same &= record[D + j] == s0[i];
                if (S > 1) same &= record[2 * D + j] == s1[i];
            }
        }
    }
    return same;
}

START_TEST(test_apply_rows_lazy) {
    /* sgd, adagrad and ftrl: a row without gradient would not move under
     * the dense rule either, so lazy and dense agree to the bit. */
    dt_optim_config cfg = config(DT_OPTIM_SGD);
    ck_assert(lazy_vs_dense(&cfg));
    cfg = config(DT_OPTIM_ADAGRAD);
    ck_assert(lazy_vs_dense(&cfg));
    cfg = config(DT_OPTIM_FTRL);
    cfg.ftrl_l1 = 0.05;
    cfg.ftrl_l2 = 0.1;
    cfg.ftrl_beta = 1;
    ck_assert(lazy_vs_dense(&cfg));
    /* momentum and adam: dense moves rows by their momentum, lazy does not
     * (lazy_vs_dense checks that untouched rows stay put). */
    cfg = config(DT_OPTIM_MOMENTUM);
    ck_assert(!lazy_vs_dense(&cfg));
    cfg = config(DT_OPTIM_ADAM);
    ck_assert(!lazy_vs_dense(&cfg));
}
END_TEST

/* LazyAdam against a per-coordinate loop: each step updates m and v of the
 * touched rows only, with the bias correction of the step count t of the
 * whole variable; a row untouched at step t keeps w, m and v. */
START_TEST(test_apply_rows_lazy_adam) {
    dt_optim_config cfg = config(DT_OPTIM_ADAM);
    cfg.beta1 = 0.8;
    cfg.beta2 = 0.9;
    enum { ROWS = 4, DIM = 2, T = 7 };
    float rec[ROWS * 3 * DIM] = {0};
    double w[ROWS * DIM], m[ROWS * DIM] = {0}, v[ROWS * DIM] = {0};
    for (int i = 0; i < ROWS * DIM; i++) {
        w[i] = 0.3 * i - 1;
        rec[(i / DIM) * 3 * DIM + i % DIM] = (float)w[i];
    }
    for (int t = 1; t <= T; t++) {
        /* Row 0 every step, row 1 on odd steps, row 3 only at step 5. */
        int touched[3], count = 0;
        touched[count++] = 0;
        if (t % 2) touched[count++] = 1;
        if (t == 5) touched[count++] = 3;
        float *rows[3], g[3 * DIM];
        const void *grads[3] = {g, g + DIM, g + 2 * DIM};
        for (int k = 0; k < count; k++) {
            rows[k] = rec + touched[k] * 3 * DIM;
            for (int j = 0; j < DIM; j++)
                g[k * DIM + j] = (float)grad_at(t, touched[k] * DIM + j);
        }
        const double lr = 0.01, lr_t = lr * sqrt(1 - pow(0.9, t)) / (1 - pow(0.8, t));
        dt_optim_apply_rows(&cfg, lr, t, rows, grads, count, DIM);
        for (int k = 0; k < count; k++)
            for (int j = 0; j < DIM; j++) {
                int i = touched[k] * DIM + j;
                double gi = g[k * DIM + j];
                m[i] = 0.8 * m[i] + 0.2 * gi;
                v[i] = 0.9 * v[i] + 0.1 * gi * gi;
                w[i] -= lr_t * m[i] / (sqrt(v[i]) + cfg.epsilon);
            }
    }
    for (int i = 0; i < ROWS * DIM; i++) {
        const float *record = rec + (i / DIM) * 3 * DIM;
        int j = i % DIM;
        ck_assert_msg(fabs(record[j] - w[i]) < 1e-5, "w[%d] %.8g vs %.8g", i, record[j], w[i]);
        ck_assert_msg(fabs(record[DIM + j] - m[i]) < 1e-6, "m[%d]", i);
        ck_assert_msg(fabs(record[2 * DIM + j] - v[i]) < 1e-6, "v[%d]", i);
    }
    /* Row 2 never had a gradient: its record is as it started. */
    ck_assert_float_eq(rec[2 * 3 * DIM], (float)(0.3 * 4 - 1));
    ck_assert_float_eq(rec[2 * 3 * DIM + DIM], 0.0f);
}
END_TEST

START_TEST(test_large_n) {
    /* Long arrays go through the same (vectorised) loops: spot-check both
     * ends against the short-array result. */
    enum { LONG = 100003 };
    static float w[LONG], m[LONG], v[LONG], g[LONG];
    dt_optim_config cfg = config(DT_OPTIM_ADAM);
    for (int i = 0; i < LONG; i++) {
        w[i] = 0.5f;
        m[i] = v[i] = 0.0f;
        g[i] = (float)grad_at(1, i % N);
    }
    float *slots[2] = {m, v};
    dt_optim_apply(&cfg, 0.01, 1, w, slots, g, LONG);
    for (int i = 0; i < LONG; i += 997) {
        float ws = 0.5f, ms = 0.0f, vs = 0.0f, gs = g[i];
        float *s[2] = {&ms, &vs};
        dt_optim_apply(&cfg, 0.01, 1, &ws, s, &gs, 1);
        ck_assert_float_eq(w[i], ws);
    }
    ck_assert_float_eq(w[LONG - 1], w[(LONG - 1) % N]);
}
END_TEST

/* Schedules against TF1's formulas, at and around their boundaries. */
START_TEST(test_schedules) {
    dt_lr_schedule s;
    memset(&s, 0, sizeof s);
    ck_assert_double_eq(dt_lr_at(&s, 0.1, 12345), 0.1); /* constant */

    s.kind = DT_LR_EXPONENTIAL;
    s.decay_steps = 100;
    s.decay_rate = 0.5;
    ck_assert_double_eq_tol(dt_lr_at(&s, 0.1, 0), 0.1, 1e-15);
    ck_assert_double_eq_tol(dt_lr_at(&s, 0.1, 50), 0.1 * pow(0.5, 0.5), 1e-15);
    ck_assert_double_eq_tol(dt_lr_at(&s, 0.1, 200), 0.025, 1e-15);
    s.staircase = 1;
    ck_assert_double_eq_tol(dt_lr_at(&s, 0.1, 199), 0.05, 1e-15);
    ck_assert_double_eq_tol(dt_lr_at(&s, 0.1, 200), 0.025, 1e-15);

    memset(&s, 0, sizeof s);
    s.kind = DT_LR_PIECEWISE;
    s.num_boundaries = 2;
    s.boundaries[0] = 100;
    s.boundaries[1] = 200;
    s.values[0] = 1.0;
    s.values[1] = 0.5;
    s.values[2] = 0.1;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_lr_check(&s, &err), 0);
    /* TF's piecewise_constant: values[i] while step <= boundaries[i]. */
    ck_assert_double_eq(dt_lr_at(&s, 9.0, 0), 1.0);
    ck_assert_double_eq(dt_lr_at(&s, 9.0, 100), 1.0);
    ck_assert_double_eq(dt_lr_at(&s, 9.0, 101), 0.5);
    ck_assert_double_eq(dt_lr_at(&s, 9.0, 200), 0.5);
    ck_assert_double_eq(dt_lr_at(&s, 9.0, 201), 0.1);

    s.boundaries[1] = 100;
    ck_assert_int_eq(dt_lr_check(&s, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "schedule: \"boundaries\" must increase (100 then 100)");
    memset(&s, 0, sizeof s);
    s.kind = DT_LR_EXPONENTIAL;
    s.decay_rate = 0.5;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_lr_check(&s, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "schedule: \"decay_steps\" must be >= 1 (got 0)");
    ck_assert_int_eq(dt_lr_kind_from_name("piecewise"), DT_LR_PIECEWISE);
    ck_assert_int_eq(dt_lr_kind_from_name("cosine"), DT_LR_COSINE);
    ck_assert_int_eq(dt_lr_kind_from_name("linear"), -1);

    /* TF's cosine_decay: lr at 0, half way down at T/2, alpha * lr from T. */
    memset(&s, 0, sizeof s);
    s.kind = DT_LR_COSINE;
    s.decay_steps = 100;
    s.alpha = 0.1;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_lr_check(&s, &err), 0);
    ck_assert_double_eq(dt_lr_at(&s, 2.0, 0), 2.0);
    ck_assert_double_eq_tol(dt_lr_at(&s, 2.0, 50), 2.0 * (0.1 + 0.9 * 0.5), 1e-12);
    ck_assert_double_eq_tol(dt_lr_at(&s, 2.0, 25), 2.0 * (0.1 + 0.9 * (1 + cos(M_PI / 4)) / 2),
                            1e-12);
    ck_assert_double_eq_tol(dt_lr_at(&s, 2.0, 100), 0.2, 1e-12);
    ck_assert_double_eq_tol(dt_lr_at(&s, 2.0, 1000), 0.2, 1e-12);
    s.alpha = 1;
    ck_assert_int_eq(dt_lr_check(&s, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "\"cosine_alpha\" must be in [0, 1)"), "%s", err.msg);
    s.alpha = 0;
    s.decay_steps = 0;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_lr_check(&s, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "max_steps"), "%s", err.msg);
    /* "auto" is the job's word, never a ps's schedule. */
    s.kind = DT_LR_AUTO;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_lr_check(&s, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "\"auto\""), "%s", err.msg);
}
END_TEST

Suite *optim_suite(void) {
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("optim");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_check_errors);
    tcase_add_test(tc, test_check_name);
    tcase_add_test(tc, test_slots);
    tcase_add_test(tc, test_sgd);
    tcase_add_test(tc, test_momentum);
    tcase_add_test(tc, test_nesterov);
    tcase_add_test(tc, test_adagrad);
    tcase_add_test(tc, test_adam);
    tcase_add_test(tc, test_ftrl);
    tcase_add_test(tc, test_ftrl_l1_sparsity);
    tcase_add_test(tc, test_apply_rows_lazy);
    tcase_add_test(tc, test_apply_rows_lazy_adam);
    tcase_add_test(tc, test_schedules);
    tcase_add_test(tc, test_large_n);
    suite_add_tcase(s, tc);
    return s;
}
