/*
 * Suite "predict": evaluation and prediction from a checkpoint (lib/predict)
 * in-process. Each test writes a tiny data file and a checkpoint with weights
 * chosen by hand (dt_safetensors_save), then checks dt_predict_eval's loss,
 * accuracy, example count and global step against the same model computed
 * here in double, and every value dt_predict_write puts in its CSV. Covered:
 * all four models, idx and csv data, scaling with the training file's
 * statistics (not the evaluated file's), the latest checkpoint of a log dir
 * versus a named one, outputs larger than one chunk, the eval line's format,
 * and the refusals: a checkpoint of another model, shape or dtype, a foreign
 * variable, missing checkpoint, data or log dir, labels without data, bad
 * labels, an unwritable output. Data without labels (csv with one column
 * fewer, libsvm rows that start with index:value, idx images alone) gives
 * byte for byte the predictions of the same data with labels under every
 * scaling; eval refuses it; bad rows of it are named by file:line.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "job.h"
#include "log.h"
#include "model.h"
#include "predict.h"
#include "proc.h"
#include "suites.h"

#define TOL 1e-5
#define MAX_ROWS 4096
#define MAX_COLS 16
#define PATH_CAP 1000 /* bytes of a test path: fits a job's path fields */

static char *tmp;

static void suite_setup(void) {
    if (dt_test_tmp_begin() != 0) fprintf(stderr, "predict: cannot make the suite's temp dir\n");
}

static void setup(void) {
    dt_log_set_level(DT_LOG_WARN); /* the info lines of every eval would bury the report */
    tmp = dt_test_tempdir();
    ck_assert_msg(tmp != NULL, "cannot make a temp dir");
}

static void teardown(void) {
    dt_test_tempdir_free(tmp);
    tmp = NULL;
}

/* tmp/name into path (PATH_CAP bytes). */
static void path_of(const char *name, char *path) {
    snprintf(path, PATH_CAP, "%s/%s", tmp, name);
}

static void write_tmp(const char *name, const char *text, char *path) {
    path_of(name, path);
    ck_assert_int_eq(dt_test_write_file(path, text), 0);
}

/* A csv job on eval file `eval` (label column "label"), checked by
 * dt_job_finish as the command line does. */
static dt_job job_of(dt_model_kind model, int features, int classes, const char *eval) {
    dt_job job;
    dt_job_defaults(&job);
    job.model.kind = model;
    job.data.source = DT_DATA_CSV;
    job.model.num_features = features;
    job.model.num_classes = classes;
    snprintf(job.data.train_data, sizeof job.data.train_data, "%s", eval);
    snprintf(job.data.eval_data, sizeof job.data.eval_data, "%s", eval);
    snprintf(job.data.label_column, sizeof job.data.label_column, "label");
    snprintf(job.log_dir, sizeof job.log_dir, "%s/logs", tmp);
    job.data.scale = DT_SCALE_NONE; /* the checkpoints here are made by hand, of raw features */
    dt_err err = {0};
    ck_assert_msg(dt_job_finish(&job, &err) == 0, "%s", err.msg);
    return job;
}

/* The job's variables filled from values (all of them, in spec order). */
static void vars_of(const dt_job *job, const float *values, dt_tensors *ts) {
    dt_tensor specs[DT_MODEL_MAX_VARS];
    int count = 0;
    dt_err err = {0};
    ck_assert_msg(dt_model_specs(&job->model, specs, &count, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_tensors_init(ts, specs, count, &err) == 0, "%s", err.msg);
    size_t off = 0;
    for (int i = 0; i < ts->count; i++) {
        int64_t n = dt_tensor_numel(&ts->items[i]);
        memcpy(ts->items[i].data, values + off, (size_t)n * sizeof(float));
        off += (size_t)n;
    }
}

/* Saves the job's model with values at step into tmp/name; path gets it. */
static void save_ckpt(const dt_job *job, const float *values, int64_t step, const char *name,
                      char *path) {
    dt_tensors ts;
    vars_of(job, values, &ts);
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.global_step = step;
    dt_model_describe(&job->model, meta.model, sizeof meta.model);
    path_of(name, path);
    dt_err err = {0};
    ck_assert_msg(dt_safetensors_save(path, &ts, &meta, &err) == 0, "%s", err.msg);
    dt_tensors_deinit(&ts);
}

static dt_predict_result eval_ok(const dt_job *job, const char *ckpt, const char *data,
                                 const char *labels) {
    dt_predict_params p = {
        .job = job, .checkpoint = ckpt, .data = data, .labels = labels, .out = NULL};
    dt_predict_result r;
    dt_err err = {0};
    ck_assert_msg(dt_predict_eval(&p, &r, &err) == 0, "%s", err.msg);
    return r;
}

typedef int (*predict_fn)(const dt_predict_params *, dt_predict_result *, dt_err *);

/* Runs fn (dt_predict_eval or dt_predict_write) expecting code, with a
 * message holding n1 and n2. */
static void call_fails(predict_fn fn, const dt_predict_params *p, int code, const char *n1,
                       const char *n2) {
    dt_predict_result r;
    dt_err err = {0};
    int rc = fn(p, &r, &err);
    ck_assert_msg(rc == code, "rc %d (%s), want %d; message: %s", rc, dt_err_name(rc), code,
                  err.msg);
    ck_assert_int_eq(err.code, code);
    ck_assert_msg(strstr(err.msg, n1) != NULL, "message lacks \"%s\": %s", n1, err.msg);
    ck_assert_msg(!n2 || strstr(err.msg, n2) != NULL, "message lacks \"%s\": %s", n2, err.msg);
}

static void eval_fails(const dt_job *job, const char *ckpt, const char *data, const char *labels,
                       int code, const char *n1, const char *n2) {
    dt_predict_params p = {
        .job = job, .checkpoint = ckpt, .data = data, .labels = labels, .out = NULL};
    call_fails(dt_predict_eval, &p, code, n1, n2);
}

/* A CSV parsed back: its header line and its values. */
typedef struct {
    char header[256];
    int rows, cols;
    double v[MAX_ROWS][MAX_COLS];
} csv_out;

static csv_out out_csv;

static void read_csv(const char *path, csv_out *c) {
    char *text = dt_test_read_file(path, NULL);
    ck_assert_msg(text != NULL, "no output %s", path);
    memset(c, 0, sizeof *c);
    char *line = text, *end = strchr(line, '\n');
    ck_assert_msg(end != NULL, "no header line in %s", path);
    snprintf(c->header, sizeof c->header, "%.*s", (int)(end - line), line);
    for (line = end + 1; *line; line = end + 1) {
        end = strchr(line, '\n');
        ck_assert_msg(end != NULL, "%s: last line not terminated", path);
        ck_assert(c->rows < MAX_ROWS);
        int col = 0;
        for (char *p = line; p < end; col++) {
            char *stop = NULL;
            ck_assert(col < MAX_COLS);
            c->v[c->rows][col] = strtod(p, &stop);
            ck_assert_msg(stop != p, "%s: line %d: not a number: %.*s", path, c->rows + 2,
                          (int)(end - line), line);
            p = stop;
            if (*p == ',')
                p++;
            else
                ck_assert_msg(p == end, "%s: line %d: junk: %s", path, c->rows + 2, p);
        }
        if (c->rows == 0) c->cols = col;
        ck_assert_msg(col == c->cols, "%s: line %d has %d fields, want %d", path, c->rows + 2, col,
                      c->cols);
        c->rows++;
    }
    free(text);
}

static dt_predict_result write_ok(const dt_job *job, const char *ckpt, const char *data,
                                  const char *labels, const char *out) {
    dt_predict_params p = {
        .job = job, .checkpoint = ckpt, .data = data, .labels = labels, .out = out};
    dt_predict_result r;
    dt_err err = {0};
    ck_assert_msg(dt_predict_write(&p, &r, &err) == 0, "%s", err.msg);
    read_csv(out, &out_csv);
    return r;
}

static void write_fails(const dt_job *job, const char *ckpt, const char *data, int code,
                        const char *n1, const char *n2) {
    char out[PATH_CAP];
    path_of("failed.out.csv", out);
    dt_predict_params p = {
        .job = job, .checkpoint = ckpt, .data = data, .labels = NULL, .out = out};
    call_fails(dt_predict_write, &p, code, n1, n2);
}

/* Predicts data with labels and the same data without them (unlabeled;
 * idx: images without labels) into two files and checks they are equal to
 * the byte; the second result says it had no labels. */
static void same_predictions(const dt_job *job, const char *ckpt, const char *data,
                             const char *labels, const char *unlabeled, int rows) {
    char with[PATH_CAP], without[PATH_CAP];
    path_of("with.out.csv", with);
    path_of("without.out.csv", without);
    dt_predict_result a = write_ok(job, ckpt, data, labels, with);
    ck_assert_int_eq(out_csv.rows, rows);
    dt_predict_result b = write_ok(job, ckpt, unlabeled, NULL, without);
    ck_assert_int_eq(a.labeled, 1);
    ck_assert(isfinite(a.loss));
    ck_assert_int_eq(b.labeled, 0);
    ck_assert(isnan(b.loss) && isnan(b.accuracy));
    ck_assert_int_eq(b.examples, rows);
    ck_assert_int_eq(b.global_step, a.global_step);
    char *ta = dt_test_read_file(with, NULL), *tb = dt_test_read_file(without, NULL);
    ck_assert_ptr_nonnull(ta);
    ck_assert_ptr_nonnull(tb);
    ck_assert_msg(strcmp(ta, tb) == 0, "with labels:\n%s\nwithout:\n%s", ta, tb);
    free(ta);
    free(tb);
}

/* ---- the models, worked out here in double ------------------------------ */

/* z_k = b_k + sum_j x_j W_jk for W (F, K). */
static void affine(const double *x, int F, const float *W, const float *b, int K, double *z) {
    for (int k = 0; k < K; k++) {
        z[k] = b[k];
        for (int j = 0; j < F; j++)
            z[k] += x[j] * W[j * K + k];
    }
}

/* Softmax probabilities of z (K) into p, and -log p[y]. */
static double softmax_xent(const double *z, int K, int y, double *p) {
    double m = z[0], s = 0;
    for (int k = 1; k < K; k++)
        m = z[k] > m ? z[k] : m;
    for (int k = 0; k < K; k++)
        s += exp(z[k] - m);
    for (int k = 0; k < K; k++)
        p[k] = exp(z[k] - m) / s;
    return m + log(s) - z[y];
}

static int argmax(const double *p, int K) {
    int best = 0;
    for (int k = 1; k < K; k++)
        if (p[k] > p[best]) best = k;
    return best;
}

/* ---- tests ----------------------------------------------------------------- */

/* Softmax, K = 3, F = 2: W = [[1, 0, -1], [0, 1, 0]], b = [0, 0, 0.5]. The
 * last row is wrong (z = (0, 0, 0.5) says class 2), so accuracy is 3/4. */
static const char softmax_csv[] = "x1,label,x2\n"
                                  "2,0,0\n"
                                  "0,1,2\n"
                                  "-2,2,0\n"
                                  "0,0,0\n";
static const float softmax_w[] = {1, 0, -1, 0, 1, 0, 0, 0, 0.5f};
static const double softmax_x[4][2] = {{2, 0}, {0, 2}, {-2, 0}, {0, 0}};
static const int softmax_y[4] = {0, 1, 2, 0};

START_TEST(softmax_eval_and_predict) {
    char data[PATH_CAP], ckpt[PATH_CAP], out[PATH_CAP];
    write_tmp("s.csv", softmax_csv, data);
    dt_job job = job_of(DT_MODEL_SOFTMAX, 2, 3, data);
    save_ckpt(&job, softmax_w, 1234, "s.safetensors", ckpt);

    double loss = 0, p[4][3];
    int correct = 0;
    for (int i = 0; i < 4; i++) {
        double z[3];
        affine(softmax_x[i], 2, softmax_w, softmax_w + 6, 3, z);
        loss += softmax_xent(z, 3, softmax_y[i], p[i]);
        correct += argmax(p[i], 3) == softmax_y[i];
    }
    ck_assert_int_eq(correct, 3);
    dt_predict_result r = eval_ok(&job, ckpt, NULL, NULL);
    ck_assert_double_eq_tol(r.loss, loss / 4, TOL);
    ck_assert_double_eq_tol(r.accuracy, 0.75, 1e-12);
    ck_assert_int_eq(r.examples, 4);
    ck_assert_int_eq(r.global_step, 1234);
    ck_assert_str_eq(r.checkpoint, ckpt);
    ck_assert_str_eq(r.model, "softmax features=2 classes=3 l2=0");

    path_of("s.out.csv", out);
    dt_predict_result w = write_ok(&job, ckpt, data, NULL, out);
    ck_assert_double_eq_tol(w.loss, r.loss, 1e-12);
    ck_assert_str_eq(out_csv.header, "class,p0,p1,p2");
    ck_assert_int_eq(out_csv.rows, 4);
    ck_assert_int_eq(out_csv.cols, 4);
    int expect_class[4] = {0, 1, 2, 2};
    for (int i = 0; i < 4; i++) {
        ck_assert_double_eq(out_csv.v[i][0], expect_class[i]);
        for (int k = 0; k < 3; k++)
            ck_assert_double_eq_tol(out_csv.v[i][1 + k], p[i][k], 1e-6);
    }
}
END_TEST

/* Logistic: z = 2 x1 - x2 + 0.5; p1 = sigmoid(z); loss softplus(z) - y z. */
START_TEST(logistic_eval_and_predict) {
    char data[PATH_CAP], ckpt[PATH_CAP], out[PATH_CAP];
    write_tmp("l.csv", "label,x1,x2\n1,1,0\n0,-1,0\n0,0,1\n1,0,3\n", data);
    dt_job job = job_of(DT_MODEL_LOGISTIC, 2, 2, data);
    const float w[] = {2, -1, 0.5f};
    save_ckpt(&job, w, 7, "l.safetensors", ckpt);
    const double x[4][2] = {{1, 0}, {-1, 0}, {0, 1}, {0, 3}};
    const int y[4] = {1, 0, 0, 1};
    double loss = 0, p1[4];
    int correct = 0;
    for (int i = 0; i < 4; i++) {
        double z = 2 * x[i][0] - x[i][1] + 0.5;
        p1[i] = 1 / (1 + exp(-z));
        loss += log1p(exp(z)) - y[i] * z;
        correct += (p1[i] > 0.5) == y[i];
    }
    ck_assert_int_eq(correct, 3); /* the last row (z = -2.5, label 1) is wrong */
    dt_predict_result r = eval_ok(&job, ckpt, NULL, NULL);
    ck_assert_double_eq_tol(r.loss, loss / 4, TOL);
    ck_assert_double_eq_tol(r.accuracy, 0.75, 1e-12);
    ck_assert_int_eq(r.global_step, 7);

    path_of("l.out.csv", out);
    write_ok(&job, ckpt, data, NULL, out);
    ck_assert_str_eq(out_csv.header, "class,p0,p1");
    ck_assert_int_eq(out_csv.rows, 4);
    ck_assert_int_eq(out_csv.cols, 3);
    for (int i = 0; i < 4; i++) {
        ck_assert_double_eq(out_csv.v[i][0], p1[i] > 0.5);
        ck_assert_double_eq_tol(out_csv.v[i][1], 1 - p1[i], 1e-6);
        ck_assert_double_eq_tol(out_csv.v[i][2], p1[i], 1e-6);
    }
}
END_TEST

/* --output and --no-header: the same columns for every classifier, the
 * class alone, the probabilities alone; a header or not. */
START_TEST(output_modes) {
    char data[PATH_CAP], ckpt[PATH_CAP], out[PATH_CAP];
    write_tmp("o.csv", "label,x1,x2\n1,1,0\n0,-1,0\n", data);
    dt_job job = job_of(DT_MODEL_LOGISTIC, 2, 2, data);
    const float w[] = {2, -1, 0.5f};
    save_ckpt(&job, w, 3, "o.safetensors", ckpt);
    path_of("o.out.csv", out);
    static const char *const want[3] = {"class,p0,p1", "class", "p0,p1"};
    for (int mode = 0; mode < 3; mode++) {
        dt_predict_params p = {
            .job = &job, .checkpoint = ckpt, .data = data, .out = out, .output = mode};
        dt_predict_result r;
        dt_err err = {0};
        ck_assert_msg(dt_predict_write(&p, &r, &err) == 0, "%s", err.msg);
        read_csv(out, &out_csv);
        ck_assert_str_eq(out_csv.header, want[mode]);
        ck_assert_int_eq(out_csv.rows, 2);
        if (mode != DT_PREDICT_PROBA) {
            ck_assert_double_eq(out_csv.v[0][0], 1); /* z = 2.5 */
            ck_assert_double_eq(out_csv.v[1][0], 0); /* z = -1.5 */
        }
        if (mode == DT_PREDICT_PROBA)
            ck_assert_double_eq_tol(out_csv.v[0][1], 1 / (1 + exp(-2.5)), 1e-6);
    }
    dt_predict_params p = {.job = &job,
                           .checkpoint = ckpt,
                           .data = data,
                           .out = out,
                           .output = DT_PREDICT_CLASS,
                           .no_header = 1};
    dt_predict_result r;
    dt_err err = {0};
    ck_assert_msg(dt_predict_write(&p, &r, &err) == 0, "%s", err.msg);
    char *text = dt_test_read_file(out, NULL);
    ck_assert_ptr_nonnull(text);
    ck_assert_str_eq(text, "1\n0\n");
    free(text);
}
END_TEST

/* Linear: pred = 3 x - 1; the eval line has no accuracy. */
START_TEST(linear_eval_and_predict) {
    char data[PATH_CAP], ckpt[PATH_CAP], out[PATH_CAP];
    write_tmp("r.csv", "x,label\n0,-1\n1,3\n2,4\n-1,-4\n", data);
    dt_job job = job_of(DT_MODEL_LINEAR, 1, 2, data);
    const float w[] = {3, -1};
    save_ckpt(&job, w, 0, "r.safetensors", ckpt);
    /* preds -1, 2, 5, -4 against -1, 3, 4, -4: squared errors 0, 1, 1, 0. */
    dt_predict_result r = eval_ok(&job, ckpt, NULL, NULL);
    ck_assert_double_eq_tol(r.loss, 0.5, 1e-6);
    ck_assert(isnan(r.accuracy));
    char line[256];
    dt_predict_format(&r, line, sizeof line);
    ck_assert_str_eq(line, "loss 0.5 examples 4 global_step 0");

    path_of("r.out.csv", out);
    write_ok(&job, ckpt, data, NULL, out);
    ck_assert_str_eq(out_csv.header, "prediction");
    const double expect[4] = {-1, 2, 5, -4};
    ck_assert_int_eq(out_csv.rows, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_double_eq_tol(out_csv.v[i][0], expect[i], 1e-6);
}
END_TEST

/* MLP 2-3-2 with hand-set weights: h = relu(x W0 + b0), z = h W1 + b1. */
START_TEST(mlp_eval_and_predict) {
    char data[PATH_CAP], ckpt[PATH_CAP], out[PATH_CAP];
    write_tmp("m.csv", "a,b,label\n1,1,0\n1,-1,1\n-1,1,1\n-1,-1,0\n0.5,0,1\n", data);
    dt_job job = job_of(DT_MODEL_MLP, 2, 2, data);
    job.model.num_hidden = 1;
    job.model.hidden[0] = 3;
    /* W0 (2, 3), b0 (3), W1 (3, 2), b1 (2) */
    const float w[] = {1, -1, 0.5f, -1, 1, 0.5f, 0, 0, -0.25f, 1, -1, -1, 1, 0.5f, 0.5f, 0.1f, 0};
    save_ckpt(&job, w, 99, "m.safetensors", ckpt);
    const double x[5][2] = {{1, 1}, {1, -1}, {-1, 1}, {-1, -1}, {0.5, 0}};
    const int y[5] = {0, 1, 1, 0, 1};
    double loss = 0, p[5][2];
    int correct = 0;
    for (int i = 0; i < 5; i++) {
        double h[3], z[2];
        affine(x[i], 2, w, w + 6, 3, h);
        for (int k = 0; k < 3; k++)
            h[k] = h[k] > 0 ? h[k] : 0;
        affine(h, 3, w + 9, w + 15, 2, z);
        loss += softmax_xent(z, 2, y[i], p[i]);
        correct += argmax(p[i], 2) == y[i];
    }
    dt_predict_result r = eval_ok(&job, ckpt, NULL, NULL);
    ck_assert_double_eq_tol(r.loss, loss / 5, TOL);
    ck_assert_double_eq_tol(r.accuracy, correct / 5.0, 1e-12);
    ck_assert_int_eq(r.examples, 5);

    path_of("m.out.csv", out);
    write_ok(&job, ckpt, data, NULL, out);
    ck_assert_str_eq(out_csv.header, "class,p0,p1");
    ck_assert_int_eq(out_csv.rows, 5);
    for (int i = 0; i < 5; i++) {
        ck_assert_double_eq(out_csv.v[i][0], argmax(p[i], 2));
        ck_assert_double_eq_tol(out_csv.v[i][1], p[i][0], 1e-6);
        ck_assert_double_eq_tol(out_csv.v[i][2], p[i][1], 1e-6);
    }
}
END_TEST

/* "standardize" scales the evaluated file with the TRAINING file's mean and
 * std: train x = 0, 2, 4, 6 (mean 3, std sqrt(5)); the evaluated rows'
 * own statistics would give other values. */
START_TEST(standardize_uses_training_statistics) {
    char train[PATH_CAP], data[PATH_CAP], ckpt[PATH_CAP], out[PATH_CAP];
    write_tmp("train.csv", "x,label\n0,0\n2,0\n4,1\n6,1\n", train);
    write_tmp("held.csv", "x,label\n3,1\n8,1\n", data);
    dt_job job = job_of(DT_MODEL_LOGISTIC, 1, 2, data);
    snprintf(job.data.train_data, sizeof job.data.train_data, "%s", train);
    job.data.scale = DT_SCALE_STANDARDIZE;
    const float w[] = {2, -0.5f};
    save_ckpt(&job, w, 5, "z.safetensors", ckpt);
    double loss = 0, p1[2];
    const double x[2] = {3, 8};
    for (int i = 0; i < 2; i++) {
        double z = 2 * (x[i] - 3) / sqrt(5.0) - 0.5;
        p1[i] = 1 / (1 + exp(-z));
        loss += log1p(exp(z)) - z;
    }
    dt_predict_result r = eval_ok(&job, ckpt, NULL, NULL);
    ck_assert_double_eq_tol(r.loss, loss / 2, TOL);
    ck_assert_double_eq_tol(r.accuracy, 0.5, 1e-12); /* x = 3 is z = -0.5: class 0 */
    path_of("z.out.csv", out);
    write_ok(&job, ckpt, NULL, NULL, out);
    ck_assert_double_eq_tol(out_csv.v[0][2], p1[0], 1e-6);
    ck_assert_double_eq_tol(out_csv.v[1][2], p1[1], 1e-6);

    /* "divide" applies too: x / 4. */
    job.data.scale = DT_SCALE_DIVIDE;
    job.data.scale_divisor = 4;
    r = eval_ok(&job, ckpt, NULL, NULL);
    double z0 = 2 * 0.75 - 0.5, z1 = 2 * 2.0 - 0.5;
    ck_assert_double_eq_tol(r.loss, (log1p(exp(z0)) - z0 + log1p(exp(z1)) - z1) / 2, TOL);
}
END_TEST

/* An IDX pair (2x2 images, divided by 255) passed as data and labels. */
START_TEST(idx_data_and_labels) {
    char images[PATH_CAP], labels[PATH_CAP], ckpt[PATH_CAP], out[PATH_CAP];
    const unsigned char img[] = {0, 0, 8,   3, 0, 0, 0, 3,   0, 0, 0, 2, 0, 0,
                                 0, 2, 255, 0, 0, 0, 0, 255, 0, 0, 0, 0, 0, 255};
    const unsigned char lab[] = {0, 0, 8, 1, 0, 0, 0, 3, 0, 1, 2};
    path_of("img.idx", images);
    path_of("lab.idx", labels);
    FILE *f = fopen(images, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(img, 1, sizeof img, f), sizeof img);
    fclose(f);
    f = fopen(labels, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(lab, 1, sizeof lab, f), sizeof lab);
    fclose(f);

    char other[PATH_CAP];
    write_tmp("unused.csv", "label,a,b,c,d\n0,0,0,0,0\n", other);
    dt_job job = job_of(DT_MODEL_SOFTMAX, 4, 3, other);
    job.data.source = DT_DATA_IDX;
    job.data.scale = DT_SCALE_DIVIDE;
    job.data.scale_divisor = 255;
    job.data.eval_data[0] = '\0';
    /* W (4, 3): pixel j votes for class j (pixel 3 for class 2), 4 each. */
    float w[15] = {0};
    w[0 * 3 + 0] = 4;
    w[1 * 3 + 1] = 4;
    w[3 * 3 + 2] = 4;
    save_ckpt(&job, w, 3, "i.safetensors", ckpt);
    dt_predict_result r = eval_ok(&job, ckpt, images, labels);
    double z[3] = {4, 0, 0}, p[3];
    double per_row = softmax_xent(z, 3, 0, p);
    ck_assert_double_eq_tol(r.loss, per_row, TOL);
    ck_assert_double_eq_tol(r.accuracy, 1.0, 1e-12);
    ck_assert_int_eq(r.examples, 3);
    path_of("i.out.csv", out);
    write_ok(&job, ckpt, images, labels, out);
    for (int i = 0; i < 3; i++) {
        ck_assert_double_eq(out_csv.v[i][0], i);
        ck_assert_double_eq_tol(out_csv.v[i][1 + i], p[0], 1e-6);
    }
    /* idx data without its labels file: the reader's message. */
    eval_fails(&job, ckpt, images, NULL, DT_EINVAL, images, "labels");
}
END_TEST

/* Without a checkpoint path the latest of the log dir is read; a named one
 * is read as named. */
START_TEST(latest_checkpoint_of_log_dir) {
    char data[PATH_CAP], ckpt[PATH_CAP];
    write_tmp("s.csv", softmax_csv, data);
    dt_job job = job_of(DT_MODEL_SOFTMAX, 2, 3, data);
    eval_fails(&job, NULL, NULL, NULL, DT_ENOTFOUND, "eval: no checkpoint in", job.log_dir);
    dt_err err = {0};
    float zero[9] = {0};
    for (int step = 10; step <= 20; step += 10) {
        dt_tensors ts;
        vars_of(&job, step == 10 ? zero : softmax_w, &ts);
        dt_safetensors_meta meta = {.global_step = step};
        ck_assert_msg(dt_ckpt_save_in_dir(job.log_dir, &ts, &meta, 5, ckpt, sizeof ckpt, &err) == 0,
                      "%s", err.msg);
        dt_tensors_deinit(&ts);
    }
    dt_predict_result r = eval_ok(&job, NULL, NULL, NULL);
    ck_assert_int_eq(r.global_step, 20);
    ck_assert_double_eq_tol(r.accuracy, 0.75, 1e-12);
    ck_assert_str_eq(r.model, "");
    char first[PATH_CAP + 64];
    snprintf(first, sizeof first, "%.999s/model.ckpt-10.safetensors", job.log_dir);
    r = eval_ok(&job, first, NULL, NULL);
    ck_assert_int_eq(r.global_step, 10);
    ck_assert_double_eq_tol(r.loss, log(3.0), TOL); /* all zero: uniform */
    /* Ties go to the first class, as dt_model_evaluate counts them. */
    char out[PATH_CAP];
    path_of("zero.out.csv", out);
    write_ok(&job, first, NULL, NULL, out);
    for (int i = 0; i < 4; i++) {
        ck_assert_double_eq(out_csv.v[i][0], 0);
        for (int k = 1; k <= 3; k++)
            ck_assert_double_eq_tol(out_csv.v[i][k], 1.0 / 3, 1e-7);
    }
}
END_TEST

/* More rows than one chunk of predictions (1024): every row, in order. */
START_TEST(many_rows) {
    enum { N = 2500 };
    char data[PATH_CAP], ckpt[PATH_CAP], out[PATH_CAP];
    size_t cap = 32 * N + 32, used = 0;
    char *text = malloc(cap);
    ck_assert_ptr_nonnull(text);
    used += (size_t)snprintf(text, cap, "x,label\n");
    for (int i = 0; i < N; i++)
        used += (size_t)snprintf(text + used, cap - used, "%d,%d\n", i, i * 2);
    write_tmp("big.csv", text, data);
    free(text);
    dt_job job = job_of(DT_MODEL_LINEAR, 1, 2, data);
    const float w[] = {2, 0.25f};
    save_ckpt(&job, w, 1, "big.safetensors", ckpt);
    path_of("big.out.csv", out);
    dt_predict_result r = write_ok(&job, ckpt, NULL, NULL, out);
    ck_assert_int_eq(r.examples, N);
    ck_assert_double_eq_tol(r.loss, 0.0625, 1e-6);
    ck_assert_int_eq(out_csv.rows, N);
    for (int i = 0; i < N; i++)
        ck_assert_double_eq_tol(out_csv.v[i][0], 2.0 * i + 0.25, 1e-9 * i + 1e-6);
}
END_TEST

START_TEST(format_line) {
    dt_predict_result r;
    memset(&r, 0, sizeof r);
    r.loss = 0.4439821;
    r.accuracy = 0.84627;
    r.examples = 10000;
    r.global_step = 6000;
    char buf[256];
    int n = dt_predict_format(&r, buf, sizeof buf);
    ck_assert_str_eq(buf, "loss 0.443982 accuracy 0.8463 examples 10000 global_step 6000");
    ck_assert_int_eq(n, (int)strlen(buf));
    char small[10];
    ck_assert_int_eq(dt_predict_format(&r, small, sizeof small), n);
    ck_assert_str_eq(small, "loss 0.44");
}
END_TEST

/* A checkpoint of another model, shape or dtype is refused, naming the
 * variable and both model descriptions. */
START_TEST(mismatched_checkpoints) {
    char data[PATH_CAP], ckpt[PATH_CAP];
    write_tmp("s.csv", softmax_csv, data);
    dt_job job = job_of(DT_MODEL_SOFTMAX, 2, 3, data);

    /* Another model: a logistic checkpoint for the softmax job. */
    dt_job logistic = job_of(DT_MODEL_LOGISTIC, 2, 2, data);
    const float lw[] = {1, 1, 0};
    save_ckpt(&logistic, lw, 1, "logistic.safetensors", ckpt);
    eval_fails(&job, ckpt, NULL, NULL, DT_EINVAL, "no variable \"softmax/weight\"",
               "logistic/weight, logistic/bias");
    eval_fails(&job, ckpt, NULL, NULL, DT_EINVAL, "written for \"logistic features=2 classes=2",
               "job's model \"softmax features=2 classes=3 l2=0\"");

    /* Another shape: 4 classes for the 3-class job. */
    dt_job four = job_of(DT_MODEL_SOFTMAX, 2, 4, data);
    float fw[12] = {0};
    save_ckpt(&four, fw, 1, "four.safetensors", ckpt);
    eval_fails(&job, ckpt, NULL, NULL, DT_EINVAL,
               "\"softmax/weight\" is F32 (2, 4) in the checkpoint but F32 (2, 3)", ckpt);

    /* Another dtype. */
    dt_tensor specs[2] = {
        {.name = "softmax/weight", .dtype = DT_DTYPE_F64, .ndim = 2, .shape = {2, 3}},
        {.name = "softmax/bias", .dtype = DT_DTYPE_F32, .ndim = 1, .shape = {3}}};
    dt_tensors ts;
    dt_err err = {0};
    ck_assert_msg(dt_tensors_init(&ts, specs, 2, &err) == 0, "%s", err.msg);
    dt_safetensors_meta meta = {.global_step = 1};
    path_of("f64.safetensors", ckpt);
    ck_assert_msg(dt_safetensors_save(ckpt, &ts, &meta, &err) == 0, "%s", err.msg);
    dt_tensors_deinit(&ts);
    eval_fails(&job, ckpt, NULL, NULL, DT_EINVAL, "is F64 (2, 3) in the checkpoint but F32 (2, 3)",
               "(no model description)");

    /* A deeper MLP whose first layers fit: its extra layer is refused. */
    dt_job deep = job_of(DT_MODEL_MLP, 2, 2, data), shallow = deep;
    deep.model.num_hidden = 2;
    deep.model.hidden[0] = deep.model.hidden[1] = 2;
    shallow.model.num_hidden = 1;
    shallow.model.hidden[0] = 2;
    float dw[6 + 2 + 4 + 2 + 4 + 2] = {0};
    save_ckpt(&deep, dw, 1, "deep.safetensors", ckpt);
    eval_fails(&shallow, ckpt, NULL, NULL, DT_EINVAL, "holds \"layer2/weight\"", "does not have");
}
END_TEST

/* The chief saves optimizer slots beside the variables: they are skipped. */
START_TEST(slots_are_ignored) {
    char data[PATH_CAP], ckpt[PATH_CAP];
    write_tmp("s.csv", softmax_csv, data);
    dt_job job = job_of(DT_MODEL_SOFTMAX, 2, 3, data);
    dt_tensor specs[4] = {
        {.name = "softmax/weight", .dtype = DT_DTYPE_F32, .ndim = 2, .shape = {2, 3}},
        {.name = "softmax/bias", .dtype = DT_DTYPE_F32, .ndim = 1, .shape = {3}},
        {.name = "softmax/weight/m", .dtype = DT_DTYPE_F32, .ndim = 2, .shape = {2, 3}},
        {.name = "softmax/bias/v", .dtype = DT_DTYPE_F32, .ndim = 1, .shape = {3}}};
    dt_tensors ts;
    dt_err err = {0};
    ck_assert_msg(dt_tensors_init(&ts, specs, 4, &err) == 0, "%s", err.msg);
    memcpy(ts.items[0].data, softmax_w, 6 * sizeof(float));
    memcpy(ts.items[1].data, softmax_w + 6, 3 * sizeof(float));
    for (int k = 0; k < 6; k++)
        ((float *)ts.items[2].data)[k] = 100; /* would change every answer if read */
    dt_safetensors_meta meta = {.global_step = 2};
    path_of("slots.safetensors", ckpt);
    ck_assert_msg(dt_safetensors_save(ckpt, &ts, &meta, &err) == 0, "%s", err.msg);
    dt_tensors_deinit(&ts);
    dt_predict_result r = eval_ok(&job, ckpt, NULL, NULL);
    ck_assert_double_eq_tol(r.accuracy, 0.75, 1e-12);

    dt_tensors vars;
    ck_assert_msg(dt_predict_load("predict", &job, ckpt, &vars, NULL, NULL, 0, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(vars.count, 2);
    ck_assert_str_eq(vars.items[0].name, "softmax/weight");
    ck_assert(memcmp(vars.items[0].data, softmax_w, 6 * sizeof(float)) == 0);
    ck_assert(memcmp(vars.items[1].data, softmax_w + 6, 3 * sizeof(float)) == 0);
    dt_tensors_deinit(&vars);
}
END_TEST

/* Missing and bad files, missing data, bad labels, an unwritable output. */
START_TEST(bad_inputs) {
    char data[PATH_CAP], ckpt[PATH_CAP], missing[PATH_CAP], bad[PATH_CAP];
    write_tmp("s.csv", softmax_csv, data);
    dt_job job = job_of(DT_MODEL_SOFTMAX, 2, 3, data);
    save_ckpt(&job, softmax_w, 1, "s.safetensors", ckpt);

    path_of("nope.safetensors", missing);
    eval_fails(&job, missing, NULL, NULL, DT_ENOTFOUND, missing, NULL);
    path_of("nope.csv", missing);
    eval_fails(&job, ckpt, missing, NULL, DT_ECONFIG, "eval: --data: no such file: ", missing);
    write_tmp("garbage.safetensors", "not a checkpoint at all", bad);
    eval_fails(&job, bad, NULL, NULL, DT_ECORRUPT, bad, NULL);

    /* A label outside the 3 classes: the reader names the line. */
    write_tmp("badlabel.csv", "x1,label,x2\n1,0,1\n1,5,1\n", bad);
    eval_fails(&job, ckpt, bad, NULL, DT_ECONFIG, "badlabel.csv:3", "\"classes\" is 3");
    write_tmp("fraction.csv", "x1,label,x2\n1,0,1\n1,0.5,1\n", bad);
    eval_fails(&job, ckpt, bad, NULL, DT_ECONFIG, "fraction.csv:3", "not a whole number");
    /* A file with another number of features. */
    write_tmp("wide.csv", "x1,label,x2,x3\n1,0,1,1\n", bad);
    eval_fails(&job, ckpt, bad, NULL, DT_ECONFIG, "wide.csv", "feature");

    dt_job no_eval = job;
    no_eval.data.eval_data[0] = '\0';
    eval_fails(&no_eval, ckpt, NULL, NULL, DT_EINVAL, "no data", "eval_data");
    eval_fails(&job, ckpt, NULL, data, DT_EINVAL, "without the data file", NULL);

    char out[PATH_CAP];
    path_of("no/such/dir/out.csv", out);
    dt_predict_params p = {
        .job = &job, .checkpoint = ckpt, .data = NULL, .labels = NULL, .out = out};
    dt_err err = {0};
    ck_assert_int_lt(dt_predict_write(&p, NULL, &err), 0);
    ck_assert_msg(strstr(err.msg, out) && strstr(err.msg, "cannot open for writing"), "%s",
                  err.msg);

    /* A job the model module refuses. */
    dt_job broken = job;
    broken.model.num_classes = 1;
    eval_fails(&broken, ckpt, NULL, NULL, DT_EINVAL, "classes", NULL);
}
END_TEST

/* The softmax job on tmp/s.csv (data gets its path) with its hand-set
 * checkpoint at step 41 (ckpt gets the path). */
static dt_job softmax_job(char *data, char *ckpt) {
    write_tmp("s.csv", softmax_csv, data);
    dt_job job = job_of(DT_MODEL_SOFTMAX, 2, 3, data);
    save_ckpt(&job, softmax_w, 41, "s.safetensors", ckpt);
    return job;
}

/* A csv with one column fewer than the training layout is features only,
 * under every scaling, with the label column by name or by index. */
START_TEST(csv_without_labels) {
    char data[PATH_CAP], bare[PATH_CAP], ckpt[PATH_CAP];
    dt_job job = softmax_job(data, ckpt);
    write_tmp("bare.csv", "x1,x2\n2,0\n0,2\n-2,0\n0,0\n", bare);
    static const dt_scale scales[] = {DT_SCALE_NONE, DT_SCALE_DIVIDE, DT_SCALE_STANDARDIZE};
    for (int k = 0; k < 3; k++) {
        job.data.scale = scales[k];
        job.data.scale_divisor = 3;
        same_predictions(&job, ckpt, data, NULL, bare, 4);
    }
    /* The unscaled predictions are the model's, worked out here. */
    job.data.scale = DT_SCALE_NONE;
    char out[PATH_CAP];
    path_of("bare.out.csv", out);
    write_ok(&job, ckpt, bare, NULL, out);
    for (int i = 0; i < 4; i++) {
        double z[3], p[3];
        affine(softmax_x[i], 2, softmax_w, softmax_w + 6, 3, z);
        softmax_xent(z, 3, 0, p);
        ck_assert_double_eq(out_csv.v[i][0], argmax(p, 3));
        for (int c = 0; c < 3; c++)
            ck_assert_double_eq_tol(out_csv.v[i][1 + c], p[c], 1e-6);
    }
    /* The label column by index: column 1 of three. */
    snprintf(job.data.label_column, sizeof job.data.label_column, "1");
    same_predictions(&job, ckpt, data, NULL, bare, 4);
}
END_TEST

/* libsvm rows that start with index:value (a qid allowed first) are
 * features only. */
START_TEST(libsvm_without_labels) {
    char train[PATH_CAP], data[PATH_CAP], bare[PATH_CAP], ckpt[PATH_CAP];
    write_tmp("t.svm", "0 1:2\n1 2:2\n2 1:-2\n0 1:1 2:1\n", train);
    write_tmp("s.svm", "# labeled\n1 1:0.5 2:3\n2 1:-1\n0 qid:7 2:-0.25\n", data);
    write_tmp("u.svm", "# the same rows\n1:0.5 2:3\n\n1:-1 # no label\nqid:7 2:-0.25\n", bare);
    dt_job job = job_of(DT_MODEL_SOFTMAX, 2, 3, train);
    job.data.source = DT_DATA_LIBSVM;
    save_ckpt(&job, softmax_w, 8, "s.safetensors", ckpt);
    same_predictions(&job, ckpt, data, NULL, bare, 3);
    job.data.scale = DT_SCALE_STANDARDIZE;
    same_predictions(&job, ckpt, data, NULL, bare, 3);
}
END_TEST

/* Writes an idx file of unsigned bytes: magic 0x0800 + ndims, the dims,
 * then the data. */
static void write_idx(const char *name, int ndims, const uint32_t *dims, const unsigned char *data,
                      size_t n, char *path) {
    path_of(name, path);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    unsigned char head[16] = {0, 0, 8, (unsigned char)ndims};
    for (int d = 0; d < ndims; d++)
        for (int b = 0; b < 4; b++)
            head[4 + 4 * d + b] = (unsigned char)(dims[d] >> (24 - 8 * b));
    ck_assert_uint_eq(fwrite(head, 1, 4 + 4 * (size_t)ndims, f), 4 + 4 * (size_t)ndims);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

/* IDX images with no labels file are features only. */
START_TEST(idx_without_labels) {
    char images[PATH_CAP], labels[PATH_CAP], ckpt[PATH_CAP];
    const unsigned char px[] = {255, 0, 0, 0, 0, 255, 0, 0, 0, 0, 0, 255, 10, 20, 30, 40};
    const unsigned char lab[] = {0, 1, 2, 1};
    write_idx("img.idx", 3, (const uint32_t[]){4, 2, 2}, px, sizeof px, images);
    write_idx("lab.idx", 1, (const uint32_t[]){4}, lab, sizeof lab, labels);
    dt_job job = job_of(DT_MODEL_SOFTMAX, 4, 3, "unused");
    job.data.source = DT_DATA_IDX;
    snprintf(job.data.train_data, sizeof job.data.train_data, "%s", images);
    snprintf(job.data.train_labels, sizeof job.data.train_labels, "%s", labels);
    job.data.eval_data[0] = '\0';
    float w[15] = {0};
    w[0 * 3 + 0] = 4;
    w[1 * 3 + 1] = 4;
    w[3 * 3 + 2] = 4;
    w[2 * 3 + 1] = -1;
    save_ckpt(&job, w, 3, "i.safetensors", ckpt);
    job.data.scale = DT_SCALE_DIVIDE;
    job.data.scale_divisor = 255;
    same_predictions(&job, ckpt, images, labels, images, 4);
    job.data.scale = DT_SCALE_STANDARDIZE;
    same_predictions(&job, ckpt, images, labels, images, 4);
}
END_TEST

/* eval needs labels: data without them is refused, saying what showed it. */
START_TEST(eval_needs_labels) {
    char data[PATH_CAP], bare[PATH_CAP], ckpt[PATH_CAP];
    dt_job job = softmax_job(data, ckpt);
    write_tmp("bare.csv", "x1,x2\n2,0\n", bare);
    eval_fails(&job, ckpt, bare, NULL, DT_EINVAL, "eval: no labels in the data",
               "bare.csv: 2 columns for 2 features, none of them the label column \"label\"");
    /* The job's own eval_data, too. */
    dt_job held = job;
    snprintf(held.data.eval_data, sizeof held.data.eval_data, "%s", bare);
    eval_fails(&held, ckpt, NULL, NULL, DT_EINVAL, "eval scores the model against labels", NULL);

    write_tmp("u.svm", "1:2 2:1\n", bare);
    job.data.source = DT_DATA_LIBSVM;
    eval_fails(&job, ckpt, bare, NULL, DT_EINVAL,
               "u.svm:1: the first row starts with the "
               "index:value pair \"1:2\"",
               "eval: no labels");
}
END_TEST

/* Bad rows and layouts of data without labels: file:line and the fault. */
START_TEST(bad_rows_without_labels) {
    char data[PATH_CAP], bad[PATH_CAP], ckpt[PATH_CAP];
    dt_job job = softmax_job(data, ckpt);

    write_tmp("short.csv", "x1,x2\n1,2\n3\n", bad);
    write_fails(&job, ckpt, bad, DT_EINVAL, "short.csv:3: 1 fields, but the header has 2",
                "column \"x2\" is missing");
    write_tmp("long.csv", "x1,x2\n1,2\n3,4,5\n", bad);
    write_fails(&job, ckpt, bad, DT_EINVAL, "long.csv:3: 3 fields, but the header has 2", NULL);
    write_tmp("junk.csv", "x1,x2\n1,2\n3,4\n5,abc\n", bad);
    write_fails(&job, ckpt, bad, DT_EINVAL, "junk.csv:4: column \"x2\": not a number: \"abc\"",
                NULL);
    /* A header of neither width. */
    write_tmp("wide.csv", "a,b,c,d\n1,2,3,4\n", bad);
    write_fails(&job, ckpt, bad, DT_ECONFIG, "predict: ",
                "wide.csv:1: the header has 4 columns, but the job's 2 features make 3 with the "
                "label column \"label\" or 2 without labels");
    /* Two columns, one of them the label: a labeled file short of a feature. */
    write_tmp("half.csv", "x1,label\n1,0\n", bad);
    write_fails(&job, ckpt, bad, DT_ECONFIG, "half.csv:1: the header has 1 feature columns", NULL);
    /* A labeled file whose row lacks a field is still named. */
    write_tmp("lab.csv", "x1,label,x2\n1,0,1\n1,2\n", bad);
    write_fails(&job, ckpt, bad, DT_EINVAL, "lab.csv:3: 2 fields, but the header has 3", NULL);

    job.data.source = DT_DATA_LIBSVM;
    write_tmp("mixed.svm", "1:1 2:1\n\n0 1:1\n", bad);
    write_fails(&job, ckpt, bad, DT_EINVAL, "mixed.svm:3: \"0\" is not index:value",
                "the file is read without labels");
    write_tmp("mixed2.svm", "0 1:1\n2:1\n", bad);
    write_fails(&job, ckpt, bad, DT_EINVAL, "mixed2.svm:2: no label: the row starts with \"2:1\"",
                NULL);
    write_tmp("junk.svm", "1:1\n2:x\n", bad);
    write_fails(&job, ckpt, bad, DT_EINVAL, "junk.svm:2: feature 2: not a number: \"x\"", NULL);
    write_tmp("range.svm", "1:1\n3:1\n", bad);
    write_fails(&job, ckpt, bad, DT_ECONFIG, "range.svm:2: feature index 3 is out of range 1..2",
                "\"features\" is 2");

    /* idx images alone that are damaged: the reader's error. */
    const unsigned char px[] = {1, 2, 3};
    write_idx("cut.idx", 3, (const uint32_t[]){1, 2, 2}, px, sizeof px, bad);
    dt_job idx = job_of(DT_MODEL_SOFTMAX, 4, 3, data);
    idx.data.source = DT_DATA_IDX;
    float w[15] = {0};
    save_ckpt(&idx, w, 1, "i.safetensors", ckpt);
    write_fails(&idx, ckpt, bad, DT_ECORRUPT, "cut.idx: truncated", NULL);
}
END_TEST

/* ---- the recipe a checkpoint carries ---------------------------------- */

/* Saves the job's model as the chief does: its variables, the job as JSON,
 * and the scaling statistics of its training data. */
static void save_with_recipe(const dt_job *job, const float *values, int64_t step, const char *name,
                             char *path) {
    dt_tensors vars, all;
    vars_of(job, values, &vars);
    dt_err err = {0};
    dt_dataset *ds = NULL;
    ck_assert_msg(dt_job_open_data(job, 0, 1, &ds, &err) == 0, "%s", err.msg);
    dt_data_stats st;
    dt_data_stats_of(ds, &st);
    ck_assert_int_eq(st.num_features, job->model.num_features);
    dt_tensor specs[DT_MODEL_MAX_VARS + 2];
    int n = vars.count;
    for (int i = 0; i < n; i++)
        specs[i] = vars.items[i];
    specs[n] = (dt_tensor){.name = DT_CKPT_SCALE_MEAN, .dtype = DT_DTYPE_F64, .ndim = 1};
    specs[n + 1] = (dt_tensor){.name = DT_CKPT_SCALE_STD, .dtype = DT_DTYPE_F64, .ndim = 1};
    specs[n].shape[0] = specs[n + 1].shape[0] = st.num_features;
    ck_assert_msg(dt_tensors_init(&all, specs, n + 2, &err) == 0, "%s", err.msg);
    for (int i = 0; i < n; i++)
        memcpy(all.items[i].data, vars.items[i].data, vars.items[i].nbytes);
    memcpy(all.items[n].data, st.mean, all.items[n].nbytes);
    memcpy(all.items[n + 1].data, st.std, all.items[n + 1].nbytes);
    dt_data_free(ds);
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.global_step = step;
    dt_model_describe(&job->model, meta.model, sizeof meta.model);
    ck_assert_msg(dt_job_to_json(job, &meta.job, &err) == 0, "%s", err.msg);
    path_of(name, path);
    ck_assert_msg(dt_safetensors_save(path, &all, &meta, &err) == 0, "%s", err.msg);
    free(meta.job);
    dt_tensors_deinit(&all);
    dt_tensors_deinit(&vars);
}

/* A standardized model predicts the same with its job file and training
 * file, and with neither: the checkpoint carries both what the job says
 * and the statistics the training file gave. */
START_TEST(recipe_predicts_without_config_or_training_file) {
    char train[PATH_CAP], data[PATH_CAP], ckpt[PATH_CAP], a[PATH_CAP], b[PATH_CAP];
    write_tmp("train.csv", "x1,x2,label\n0,10,0\n2,30,0\n4,20,1\n6,60,1\n", train);
    write_tmp("new.csv", "x1,x2\n3,15\n8,40\n-1,0\n", data);
    dt_job job = job_of(DT_MODEL_LOGISTIC, 2, 2, data);
    snprintf(job.data.train_data, sizeof job.data.train_data, "%s", train);
    job.data.eval_data[0] = '\0';
    job.data.scale = DT_SCALE_STANDARDIZE;
    const float w[] = {1.5f, -0.75f, 0.25f};
    save_with_recipe(&job, w, 7, "r.safetensors", ckpt);
    path_of("a.csv", a);
    path_of("b.csv", b);
    write_ok(&job, ckpt, data, NULL, a);
    ck_assert_int_eq(out_csv.rows, 3);
    ck_assert_int_eq(unlink(train), 0); /* the training file is gone */

    dt_job from_ckpt;
    char where[PATH_CAP];
    dt_err err = {0};
    ck_assert_msg(dt_predict_job_of("predict", ckpt, NULL, &from_ckpt, where, sizeof where, &err) ==
                      0,
                  "%s", err.msg);
    ck_assert_str_eq(where, ckpt);
    char diff[512];
    ck_assert_msg(dt_job_diff(&job, &from_ckpt, NULL, diff, sizeof diff) == 0, "%s", diff);
    dt_predict_result r = write_ok(&from_ckpt, ckpt, data, NULL, b);
    ck_assert_int_eq(r.global_step, 7);
    char *ta = dt_test_read_file(a, NULL), *tb = dt_test_read_file(b, NULL);
    ck_assert_ptr_nonnull(ta);
    ck_assert_ptr_nonnull(tb);
    ck_assert_msg(strcmp(ta, tb) == 0, "with the files:\n%s\nwithout:\n%s", ta, tb);
    free(ta);
    free(tb);
    /* With the job file too but no training file: the statistics still
     * come from the checkpoint. */
    write_ok(&job, ckpt, data, NULL, b);
    ck_assert_int_eq(out_csv.rows, 3);
}
END_TEST

/* A job that disagrees with the checkpoint's on the model or its input is
 * a configuration error naming the field and both values; one that
 * differs elsewhere (the learning rate) is not. */
START_TEST(recipe_refuses_a_disagreeing_config) {
    char train[PATH_CAP], data[PATH_CAP], ckpt[PATH_CAP];
    write_tmp("train.csv", "x1,x2,label\n0,10,0\n2,30,0\n4,20,1\n6,60,1\n", train);
    dt_job job = job_of(DT_MODEL_LOGISTIC, 2, 2, train);
    job.data.scale = DT_SCALE_STANDARDIZE;
    const float w[] = {1.5f, -0.75f, 0.25f};
    save_with_recipe(&job, w, 7, "r.safetensors", ckpt);
    snprintf(data, sizeof data, "%s", train);

    dt_job other = job;
    other.data.scale = DT_SCALE_NONE;
    write_fails(&other, ckpt, data, DT_ECONFIG, "\"scale\" \"standardize\" -> \"none\"",
                "checkpoint -> config");
    other = job;
    snprintf(other.data.label_column, sizeof other.data.label_column, "x1");
    eval_fails(&other, ckpt, data, NULL, DT_ECONFIG, "\"label_column\" \"label\" -> \"x1\"", NULL);
    other = job;
    other.optim.learning_rate = 0.5;
    dt_predict_result r = eval_ok(&other, ckpt, data, NULL);
    ck_assert_int_eq(r.examples, 4);
}
END_TEST

/* A checkpoint of an older dtrain has no job: without a config that is a
 * configuration error saying what to give. */
START_TEST(old_checkpoint_needs_config) {
    char data[PATH_CAP], ckpt[PATH_CAP];
    write_tmp("d.csv", "x,label\n1,0\n", data);
    dt_job job = job_of(DT_MODEL_LOGISTIC, 1, 2, data);
    const float w[] = {1, 0};
    save_ckpt(&job, w, 3, "old.safetensors", ckpt);
    dt_job from_ckpt;
    dt_err err = {0};
    int rc = dt_predict_job_of("eval", ckpt, NULL, &from_ckpt, NULL, 0, &err);
    ck_assert_int_eq(rc, DT_ECONFIG);
    ck_assert_msg(strstr(err.msg, "carries no job config") && strstr(err.msg, "--config"), "%s",
                  err.msg);
    eval_ok(&job, ckpt, NULL, NULL); /* with its config it still works */
}
END_TEST

/* A checkpoint of job (values, at step 1) that carries its job config and
 * the feature names given (NULL: none). */
static void save_named(const dt_job *job, const float *values, const char *names, const char *name,
                       char *path) {
    dt_tensors ts;
    vars_of(job, values, &ts);
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.global_step = 1;
    dt_model_describe(&job->model, meta.model, sizeof meta.model);
    dt_err err = {0};
    ck_assert_msg(dt_job_to_json(job, &meta.job, &err) == 0, "%s", err.msg);
    meta.feature_names = (char *)names;
    path_of(name, path);
    ck_assert_msg(dt_safetensors_save(path, &ts, &meta, &err) == 0, "%s", err.msg);
    free(meta.job);
    dt_tensors_deinit(&ts);
}

/* The model knows its inputs by position: a csv whose feature columns are
 * not the training file's, in its order (the checkpoint's feature_names),
 * is refused naming the first column that differs, where the label column
 * sits does not matter, and a checkpoint without names checks nothing. */
START_TEST(columns_in_training_order) {
    char data[PATH_CAP], ckpt[PATH_CAP], old[PATH_CAP], other[PATH_CAP];
    write_tmp("s.csv", softmax_csv, data); /* x1,label,x2 */
    dt_job job = job_of(DT_MODEL_SOFTMAX, 2, 3, data);
    save_named(&job, softmax_w, "x1,x2", "named.safetensors", ckpt);
    dt_predict_result r = eval_ok(&job, ckpt, NULL, NULL);
    ck_assert_double_eq_tol(r.accuracy, 0.75, 1e-12);
    write_tmp("last.csv", "x1,x2,label\n2,0,0\n", other);
    ck_assert_int_eq(eval_ok(&job, ckpt, other, NULL).examples, 1);
    write_tmp("swapped.csv", "x2,x1\n0,2\n", other);
    write_fails(&job, ckpt, other, DT_ECONFIG,
                "swapped.csv: feature column 1 is \"x2\", but the model was trained with \"x1\" "
                "there",
                "in its order (x1,x2)");
    write_tmp("renamed.csv", "label, x1 ,\"y2\"\n0,2,0\n", other);
    eval_fails(&job, ckpt, other, NULL, DT_ECONFIG,
               "feature column 2 is \"y2\", but the model was trained with \"x2\"", NULL);
    /* Another count is the read's to say. */
    write_tmp("wide.csv", "x1,x2,x3,x4\n0,2,1,1\n", other);
    write_fails(&job, ckpt, other, DT_ECONFIG, "wide.csv:1: the header has 4 columns", NULL);
    save_named(&job, softmax_w, NULL, "old.safetensors", old);
    write_tmp("swapped.csv", "x2,x1\n0,2\n", other);
    char out[PATH_CAP];
    path_of("old.out.csv", out);
    write_ok(&job, old, other, NULL, out);
    ck_assert_int_eq(out_csv.rows, 1);
}
END_TEST

/* A config that leaves "scale" to "auto" (standardize, for a csv) takes
 * the checkpoint's scaling instead: divide by 4 for one trained so, none
 * for one trained unscaled; each scores as its own job does. */
START_TEST(auto_scale_is_the_checkpoints) {
    char data[PATH_CAP], ckpt[PATH_CAP];
    write_tmp("held.csv", "x,label\n3,1\n8,1\n0,0\n", data);
    const float w[] = {2, -0.5f};
    for (int k = 0; k < 2; k++) {
        dt_job job = job_of(DT_MODEL_LOGISTIC, 1, 2, data);
        if (k == 0) {
            job.data.scale = DT_SCALE_DIVIDE;
            job.data.scale_divisor = 4;
        }
        save_named(&job, w, "x", k ? "none.safetensors" : "divide.safetensors", ckpt);
        dt_predict_result want = eval_ok(&job, ckpt, NULL, NULL);
        dt_job given = job; /* as "auto" resolves for a csv job */
        given.data.scale = DT_SCALE_STANDARDIZE;
        given.data.scale_divisor = 255;
        given.data.scale_chosen = 1;
        dt_predict_result r = eval_ok(&given, ckpt, NULL, NULL);
        ck_assert_msg(r.loss == want.loss && r.accuracy == want.accuracy,
                      "%s: loss %g accuracy %g, the checkpoint's job %g %g", ckpt, r.loss,
                      r.accuracy, want.loss, want.accuracy);
    }
}
END_TEST

/* A config that leaves "features" and "classes" out takes the values of
 * the job the checkpoint was trained with; with a checkpoint that carries
 * no job, the training file's. */
START_TEST(shape_from_checkpoint_or_data) {
    char data[PATH_CAP], ckpt[PATH_CAP], old[PATH_CAP];
    write_tmp("s.csv", softmax_csv, data);
    dt_job job = job_of(DT_MODEL_SOFTMAX, 2, 3, data);
    save_named(&job, softmax_w, "x1,x2", "named.safetensors", ckpt);
    save_ckpt(&job, softmax_w, 1, "old.safetensors", old);
    dt_job unset = job_of(DT_MODEL_SOFTMAX, 0, 0, data);
    ck_assert(dt_job_shape_unset(&unset));
    snprintf(unset.data.train_data, sizeof unset.data.train_data, "%s/gone.csv", tmp);
    dt_job filled = unset;
    dt_err err = {0};
    ck_assert_msg(dt_predict_fill_shape("eval", ckpt, &filled, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(filled.model.num_features, 2);
    ck_assert_int_eq(filled.model.num_classes, 3);
    ck_assert_double_eq_tol(eval_ok(&filled, ckpt, NULL, NULL).accuracy, 0.75, 1e-12);
    /* No job in the checkpoint: the training file says it, or is named. */
    filled = unset;
    ck_assert_int_eq(dt_predict_fill_shape("eval", old, &filled, &err), DT_ECONFIG);
    ck_assert_msg(strstr(err.msg, "\"train_data\": no such file: ") && strstr(err.msg, "gone.csv"),
                  "%s", err.msg);
    filled = unset;
    snprintf(filled.data.train_data, sizeof filled.data.train_data, "%s", data);
    dt_err_clear(&err);
    ck_assert_msg(dt_predict_fill_shape("eval", old, &filled, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(filled.model.num_features, 2);
    ck_assert_int_eq(filled.model.num_classes, 3);
    /* Set values are left as they are. */
    ck_assert_msg(dt_predict_fill_shape("eval", old, &job, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(job.model.num_features, 2);
}
END_TEST

/* ---- errors of fit, through the binary ------------------------------------ */

/* Saves the job's model with its job config, as the chief does, so the
 * commands need no --config. */
static void save_with_job(const dt_job *job, const float *values, const char *name, char *path) {
    dt_tensors ts;
    vars_of(job, values, &ts);
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.global_step = 5;
    dt_model_describe(&job->model, meta.model, sizeof meta.model);
    dt_err err = {0};
    ck_assert_msg(dt_job_to_json(job, &meta.job, &err) == 0, "%s", err.msg);
    path_of(name, path);
    ck_assert_msg(dt_safetensors_save(path, &ts, &meta, &err) == 0, "%s", err.msg);
    free(meta.job);
    dt_tensors_deinit(&ts);
}

/* `dtrain <command> --checkpoint ckpt --data data`: its exit status, with
 * its stderr in *stderr_text (the caller frees it). */
static int run_command(const char *command, const char *ckpt, const char *data,
                       char **stderr_text) {
    char out[PATH_CAP], errp[PATH_CAP];
    path_of("cmd.out", out);
    path_of("cmd.err", errp);
    char *argv[] = {(char *)dt_test_bin(),
                    (char *)command,
                    "--checkpoint",
                    (char *)ckpt,
                    "--data",
                    (char *)data,
                    NULL};
    pid_t pid = dt_test_spawn_split(argv, out, errp);
    ck_assert_int_gt(pid, 0);
    int status = dt_test_wait(pid, 30000);
    *stderr_text = dt_test_read_file(errp, NULL);
    ck_assert_ptr_nonnull(*stderr_text);
    return status;
}

/* Both commands exit 2 on data that does not fit the model's config, with
 * one line naming the file and what does not fit (n1, n2). */
static void both_exit_2(const char *ckpt, const char *data, const char *n1, const char *n2) {
    static const char *const commands[] = {"eval", "predict"};
    for (int i = 0; i < 2; i++) {
        char *text = NULL;
        int status = run_command(commands[i], ckpt, data, &text);
        ck_assert_msg(status == 2 && strstr(text, n1) && strstr(text, n2),
                      "dtrain %s --data %s: exit %d, want 2 naming \"%s\" and \"%s\"; stderr:\n%s",
                      commands[i], data, status, n1, n2, text);
        free(text);
    }
}

/* Issue 32's errors of fit: a libsvm file given to a csv model, and a csv
 * given to a libsvm one, name both formats; a label that is no class index
 * (1.5) for a classifier is a config that does not fit; all exit 2, as the
 * exit-code table says. */
START_TEST(errors_of_fit_exit_2) {
    char train[PATH_CAP], ckpt[PATH_CAP], svm[PATH_CAP], frac[PATH_CAP], csv[PATH_CAP];
    write_tmp("train.csv", softmax_csv, train);
    dt_job job = job_of(DT_MODEL_SOFTMAX, 2, 3, train);
    save_with_job(&job, softmax_w, "csv.safetensors", ckpt);
    write_tmp("new.svm", "1 1:0.5 2:3\n0 2:1\n", svm);
    both_exit_2(ckpt, svm, "new.svm looks like libsvm (its first row \"1 1:0.5 2:3\")",
                "but the model reads csv (\"data\": \"csv\")");
    write_tmp("fraction.csv", "x1,label,x2\n1,0,1\n1,1.5,1\n", frac);
    both_exit_2(ckpt, frac, "fraction.csv:3: column \"label\": label 1.5 is not a whole number",
                "\"model\": \"linear\"");

    char svm_train[PATH_CAP], svm_ckpt[PATH_CAP];
    write_tmp("train.svm", "0 1:2\n1 2:2\n2 1:-2\n", svm_train);
    dt_job sjob = job_of(DT_MODEL_SOFTMAX, 2, 3, svm_train);
    sjob.data.source = DT_DATA_LIBSVM;
    save_with_job(&sjob, softmax_w, "svm.safetensors", svm_ckpt);
    write_tmp("new.csv", "label,x1,x2\n0,1,2\n", csv);
    both_exit_2(svm_ckpt, csv, "new.csv looks like csv (its first line \"label,x1,x2\")",
                "but the model reads libsvm (\"data\": \"libsvm\")");
    write_tmp("fraction.svm", "0 1:2\n2.5 2:1\n", frac);
    both_exit_2(svm_ckpt, frac, "fraction.svm:2: label 2.5 is not a whole number",
                "a class index 0..2 is wanted");
}
END_TEST

Suite *predict_suite(void) {
    Suite *s = suite_create("predict");
    TCase *tc = tcase_create("predict");
    tcase_add_unchecked_fixture(tc, suite_setup, dt_test_tmp_end);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, softmax_eval_and_predict);
    tcase_add_test(tc, logistic_eval_and_predict);
    tcase_add_test(tc, output_modes);
    tcase_add_test(tc, linear_eval_and_predict);
    tcase_add_test(tc, mlp_eval_and_predict);
    tcase_add_test(tc, standardize_uses_training_statistics);
    tcase_add_test(tc, idx_data_and_labels);
    tcase_add_test(tc, latest_checkpoint_of_log_dir);
    tcase_add_test(tc, many_rows);
    tcase_add_test(tc, format_line);
    tcase_add_test(tc, mismatched_checkpoints);
    tcase_add_test(tc, slots_are_ignored);
    tcase_add_test(tc, bad_inputs);
    tcase_add_test(tc, columns_in_training_order);
    tcase_add_test(tc, shape_from_checkpoint_or_data);
    tcase_add_test(tc, auto_scale_is_the_checkpoints);
    tcase_add_test(tc, csv_without_labels);
    tcase_add_test(tc, libsvm_without_labels);
    tcase_add_test(tc, idx_without_labels);
    tcase_add_test(tc, eval_needs_labels);
    tcase_add_test(tc, bad_rows_without_labels);
    tcase_add_test(tc, recipe_predicts_without_config_or_training_file);
    tcase_add_test(tc, recipe_refuses_a_disagreeing_config);
    tcase_add_test(tc, old_checkpoint_needs_config);
    tcase_add_test(tc, errors_of_fit_exit_2);
    suite_add_tcase(s, tc);
    return s;
}
