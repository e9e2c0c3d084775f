/*
 * Suite "models_e2e": real models trained by real clusters, then scored by
 * `dtrain eval` on the checkpoint the chief left. Each training test starts
 * 1 ps, the chief and worker 1 ($DTRAIN_BIN) on free loopback ports with a
 * job file and a log dir in a temp dir, on data it generates:
 *   logistic  two linearly separable classes with a margin   accuracy 1
 *   softmax   three separable clusters                       accuracy 1,
 *             and `dtrain predict` names every row's class
 *   mlp       XOR-like clusters, which no linear model fits  accuracy >= 0.95
 *   fashion   a 2,000-image slice of Fashion-MNIST's training set (written
 *             here from the real files, when /usr/share/datasets/fashion-mnist
 *             exists), softmax scored on the whole 10,000-image test set;
 *             the bound (FASHION_MIN_ACCURACY) sits below what this job
 *             measured (0.79 to 0.81 over five runs, ASan included) with a
 *             margin for the run-to-run noise of two async workers.
 * Each checks that the eval line of the command matches the chief's own
 * last evaluation (same values, same checkpoint) and that eval's global step
 * is the job's last. The last test runs the commands' bad-input cases: exit
 * status 2 and a message for flag and config errors, 1 for a checkpoint or
 * data file that is missing or of another model.
 *
 * Every process is bounded in time and stopped by the teardown.
 */
#include <check.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoint.h"
#include "cluster.h"
#include "model.h"
#include "proc.h"
#include "suites.h"

#define JOB_TIMEOUT_MS 90000 /* one job: a few s, up to ~30 s under ASan on 2 cores */
#define RUN_TIMEOUT_MS 60000 /* one eval or predict */
#define TEST_TIMEOUT_S 240
#define MAX_ARGS 32
#define PATH_CAP 1000

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"
#define FASHION_SLICE 2000
#define FASHION_MIN_ACCURACY 0.74

static char *tmp;
static char cluster[PATH_CAP + 32];
static char log_dir[PATH_CAP + 32];
static char out_text[1 << 20]; /* last command's stdout */
static char err_text[65536];   /* last command's stderr */
static int run_count;
static char report_buf[16384];

static void suite_setup(void) {
    if (dt_test_tmp_begin() != 0) fprintf(stderr, "models_e2e: cannot make the suite's temp dir\n");
}

static void setup(void) {
    tmp = dt_test_tempdir();
    ck_assert_msg(tmp != NULL, "cannot make a temp dir");
    ck_assert_msg(access(dt_test_bin(), X_OK) == 0,
                  "no executable dtrain at %s (set DTRAIN_BIN, or run `make test`)", dt_test_bin());
    snprintf(cluster, sizeof cluster, "%s/cluster.json", tmp);
    snprintf(log_dir, sizeof log_dir, "%s/logs", tmp);
    ck_assert_int_eq(dt_test_write_cluster(cluster, 1, 2, NULL), 0);
}

static void teardown(void) {
    dt_test_kill_all();
    dt_test_tempdir_free(tmp);
    tmp = NULL;
}

static void path_of(const char *name, char *path) {
    snprintf(path, PATH_CAP, "%s/%s", tmp, name);
}

/* The last lines of every role's log, for failure messages. */
static const char *report(void) {
    size_t used = 0;
    report_buf[0] = '\0';
    DIR *d = opendir(tmp);
    if (!d) return "(no logs)";
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 4, ".log") != 0) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", tmp, e->d_name);
        char *tail = dt_test_tail(path, 1500);
        int k = snprintf(report_buf + used, sizeof report_buf - used, "\n== %s ==\n%s", e->d_name,
                         tail);
        free(tail);
        if (k < 0 || (size_t)k >= sizeof report_buf - used) break;
        used += (size_t)k;
    }
    closedir(d);
    return report_buf;
}

/* ---- data --------------------------------------------------------------- */

/* splitmix64: the test's own generator, so the data never depends on the
 * code under test. */
static uint64_t rng_state;

static double uniform(double lo, double hi) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return lo + (hi - lo) * (double)(z >> 11) * 0x1.0p-53;
}

typedef enum { SET_BINARY, SET_THREE, SET_XOR } data_kind;

/* One example of a set: features x (2) and its class.
 *   binary  x uniform in [-1, 1]^2, class (x1 + 0.5 x2 > 0), no point
 *           within 0.15 of the boundary (a margin, so accuracy 1 is fair)
 *   three   centres 120 degrees apart at radius 2, x within 0.5 of one
 *   xor     centres (+-1, +-1), x within 0.35; class (x1 x2 > 0) */
static int example(data_kind kind, double *x) {
    if (kind == SET_BINARY) {
        for (;;) {
            x[0] = uniform(-1, 1);
            x[1] = uniform(-1, 1);
            double s = x[0] + 0.5 * x[1];
            if (s > 0.15 || s < -0.15) return s > 0;
        }
    }
    if (kind == SET_THREE) {
        static const double cx[3] = {2, -1, -1}, cy[3] = {0, 1.7320508, -1.7320508};
        int k = (int)uniform(0, 3) % 3;
        x[0] = cx[k] + uniform(-0.5, 0.5);
        x[1] = cy[k] + uniform(-0.5, 0.5);
        return k;
    }
    double sx = uniform(0, 1) < 0.5 ? -1 : 1, sy = uniform(0, 1) < 0.5 ? -1 : 1;
    x[0] = sx + uniform(-0.35, 0.35);
    x[1] = sy + uniform(-0.35, 0.35);
    return sx * sy > 0;
}

/* Writes rows examples as CSV (header "x1,x2,label") to tmp/name; labels
 * (may be NULL) gets each row's class. */
static void write_set(data_kind kind, int rows, uint64_t seed, const char *name, char *path,
                      int *labels) {
    rng_state = seed;
    path_of(name, path);
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    fprintf(f, "x1,x2,label\n");
    for (int i = 0; i < rows; i++) {
        double x[2];
        int y = example(kind, x);
        if (labels) labels[i] = y;
        fprintf(f, "%.6f,%.6f,%d\n", x[0], x[1], y);
    }
    ck_assert_int_eq(fclose(f), 0);
}

/* ---- processes ------------------------------------------------------------ */

static pid_t start_role(const char *job_path, const char *job_name, int task, const char *log) {
    char task_text[16], log_path[PATH_CAP + 32];
    snprintf(task_text, sizeof task_text, "%d", task);
    snprintf(log_path, sizeof log_path, "%s/%s.log", tmp, log);
    char *argv[] = {(char *)dt_test_bin(), "--cluster",    cluster,   "--job-name",
                    (char *)job_name,      "--task-index", task_text, "--config",
                    (char *)job_path,      "--log-dir",    log_dir,   NULL};
    pid_t pid = dt_test_spawn(argv, log_path);
    ck_assert_msg(pid > 0, "cannot start %s %d", job_name, task);
    return pid;
}

/* Runs the job in job_path on the cluster to its end; every role exits 0. */
static void train(const char *job_path) {
    pid_t pids[3] = {start_role(job_path, "ps", 0, "ps"),
                     start_role(job_path, "worker", 0, "chief"),
                     start_role(job_path, "worker", 1, "worker1")};
    const char *names[3] = {"ps", "chief", "worker 1"};
    long long deadline = dt_test_now_ms() + JOB_TIMEOUT_MS;
    for (int i = 0; i < 3; i++) {
        long long left = deadline - dt_test_now_ms();
        int status = dt_test_wait(pids[i], left > 0 ? (int)left : 0);
        if (status == DT_TEST_TIMEOUT)
            ck_abort_msg("%s still running after %d s; logs:%s", names[i], JOB_TIMEOUT_MS / 1000,
                         report());
        ck_assert_msg(status == 0, "%s exited with %d; logs:%s", names[i], status, report());
    }
}

static void copy_file(const char *path, char *dst, size_t cap) {
    char *text = dt_test_read_file(path, NULL);
    snprintf(dst, cap, "%s", text ? text : "");
    free(text);
}

/* Runs dtrain with args (NULL-terminated, without argv[0]); returns its
 * exit status, with its stdout and stderr in out_text and err_text. */
static int run(const char *const *args) {
    char *argv[MAX_ARGS + 2];
    char out_path[PATH_CAP + 32], err_path[PATH_CAP + 32];
    int n = 0;
    argv[n++] = (char *)dt_test_bin();
    for (; args[n - 1]; n++) {
        ck_assert(n <= MAX_ARGS);
        argv[n] = (char *)args[n - 1];
    }
    argv[n] = NULL;
    run_count++;
    snprintf(out_path, sizeof out_path, "%s/run%d.out", tmp, run_count);
    snprintf(err_path, sizeof err_path, "%s/run%d.err", tmp, run_count);
    pid_t pid = dt_test_spawn_split(argv, out_path, err_path);
    ck_assert_msg(pid > 0, "cannot start %s", argv[0]);
    int status = dt_test_wait(pid, RUN_TIMEOUT_MS);
    copy_file(out_path, out_text, sizeof out_text);
    copy_file(err_path, err_text, sizeof err_text);
    ck_assert_msg(status != DT_TEST_TIMEOUT, "dtrain %s did not exit within %d s; stderr:\n%s",
                  args[0], RUN_TIMEOUT_MS / 1000, err_text);
    return status;
}

typedef struct {
    double loss, accuracy;
    long long examples, global_step;
    char line[256]; /* "loss L accuracy A", as the chief logs it */
} eval_line;

/* `dtrain eval --config job_path` on the log dir's latest checkpoint. */
static eval_line eval_job(const char *job_path) {
    const char *args[] = {"eval", "--config", job_path, "--log-dir", log_dir, NULL};
    int status = run(args);
    ck_assert_msg(status == 0, "dtrain eval exited with %d; stderr:\n%s", status, err_text);
    eval_line e;
    memset(&e, 0, sizeof e);
    ck_assert_msg(sscanf(out_text, "loss %lf accuracy %lf examples %lld global_step %lld", &e.loss,
                         &e.accuracy, &e.examples, &e.global_step) == 4,
                  "eval printed \"%s\"", out_text);
    const char *cut = strstr(out_text, " examples");
    snprintf(e.line, sizeof e.line, "%.*s", (int)(cut - out_text), out_text);
    ck_assert_msg(strchr(out_text, '\n') == out_text + strlen(out_text) - 1,
                  "eval printed more than one line: \"%s\"", out_text);
    return e;
}

/* Checks eval's figures against the chief's last "chief: eval at global_step
 * N: loss L accuracy A on M examples" line: same step, values and count. */
static void check_matches_chief(const eval_line *e) {
    char path[PATH_CAP + 32], want[512];
    snprintf(path, sizeof path, "%s/chief.log", tmp);
    char *log = dt_test_read_file(path, NULL);
    ck_assert_msg(log != NULL, "no chief log");
    const char *last = NULL;
    for (const char *p = log; (p = strstr(p, "chief: eval at global_step ")) != NULL; p++)
        last = p;
    ck_assert_msg(last != NULL, "the chief never evaluated; logs:%s", report());
    snprintf(want, sizeof want, "chief: eval at global_step %lld: %s on %lld examples",
             e->global_step, e->line, e->examples);
    ck_assert_msg(strncmp(last, want, strlen(want)) == 0,
                  "the chief's last evaluation \"%.*s\" is not eval's \"%s\"",
                  (int)strcspn(last, "\n"), last, want);
    free(log);
}

/* A job file for 2-feature csv data in tmp/job.json; path gets its path. */
static void write_job(const char *model_fields, const char *train_path, const char *eval_path,
                      const char *training_fields, char *path) {
    char text[8192];
    snprintf(text, sizeof text,
             "{\n  %s,\n  \"features\": 2,\n  \"data\": \"csv\",\n  \"train_data\": \"%s\",\n"
             "  \"eval_data\": \"%s\",\n  \"label_column\": \"label\",\n  \"seed\": 3,\n"
             "  \"mode\": \"async\",\n  %s,\n  \"save_model_secs\": 30,\n"
             "  \"summary_steps\": 50,\n  \"log_steps\": 200\n}\n",
             model_fields, train_path, eval_path, training_fields);
    path_of("job.json", path);
    ck_assert_int_eq(dt_test_write_file(path, text), 0);
}

/* ---- training tests --------------------------------------------------------- */

START_TEST(logistic_separable) {
    char train_path[PATH_CAP], eval_path[PATH_CAP], job[PATH_CAP];
    write_set(SET_BINARY, 400, 11, "train.csv", train_path, NULL);
    write_set(SET_BINARY, 200, 12, "eval.csv", eval_path, NULL);
    write_job("\"model\": \"logistic\", \"classes\": 2", train_path, eval_path,
              "\"optimizer\": \"sgd\", \"learning_rate\": 1.0, \"batch_size\": 20, "
              "\"epochs\": 40",
              job);
    train(job);
    eval_line e = eval_job(job);
    ck_assert_msg(e.accuracy == 1.0, "accuracy %.4f (loss %.4f), want 1", e.accuracy, e.loss);
    ck_assert_int_eq(e.examples, 200);
    ck_assert_int_eq(e.global_step, 40 * 400 / 20);
    check_matches_chief(&e);
}
END_TEST

START_TEST(softmax_three_classes) {
    enum { EVAL_ROWS = 150 };
    char train_path[PATH_CAP], eval_path[PATH_CAP], job[PATH_CAP], out[PATH_CAP];
    int labels[EVAL_ROWS];
    write_set(SET_THREE, 300, 21, "train.csv", train_path, NULL);
    write_set(SET_THREE, EVAL_ROWS, 22, "eval.csv", eval_path, labels);
    write_job("\"model\": \"softmax\", \"classes\": 3", train_path, eval_path,
              "\"optimizer\": \"momentum\", \"learning_rate\": 0.05, \"batch_size\": 10, "
              "\"epochs\": 20",
              job);
    train(job);
    eval_line e = eval_job(job);
    ck_assert_msg(e.accuracy == 1.0, "accuracy %.4f (loss %.4f), want 1", e.accuracy, e.loss);
    ck_assert_int_eq(e.examples, EVAL_ROWS);
    ck_assert_int_eq(e.global_step, 20 * 300 / 10);
    check_matches_chief(&e);

    /* predict to stdout: a header, then every row's class and probabilities. */
    const char *args[] = {"predict", "--config", job,       "--log-dir",
                          log_dir,   "--data",   eval_path, NULL};
    int status = run(args);
    ck_assert_msg(status == 0, "dtrain predict exited with %d; stderr:\n%s", status, err_text);
    ck_assert_msg(strncmp(out_text, "class,p0,p1,p2\n", 15) == 0, "header: %.40s", out_text);
    const char *line = strchr(out_text, '\n') + 1;
    for (int i = 0; i < EVAL_ROWS; i++) {
        int cls = -1;
        double p[3];
        ck_assert_msg(sscanf(line, "%d,%lf,%lf,%lf", &cls, &p[0], &p[1], &p[2]) == 4,
                      "row %d: \"%.60s\"", i, line);
        ck_assert_msg(cls == labels[i], "row %d: class %d, label %d", i, cls, labels[i]);
        ck_assert_double_eq_tol(p[0] + p[1] + p[2], 1.0, 1e-5);
        ck_assert(p[cls] >= p[(cls + 1) % 3] && p[cls] >= p[(cls + 2) % 3]);
        line = strchr(line, '\n');
        ck_assert_msg(line != NULL, "only %d rows", i);
        line++;
    }
    ck_assert_msg(*line == '\0', "more rows than %d: %.40s", EVAL_ROWS, line);

    /* --out writes the same bytes to a file. */
    char *first = strdup(out_text);
    ck_assert_ptr_nonnull(first);
    path_of("pred.csv", out);
    const char *args_out[] = {"predict", "--config", job,     "--log-dir", log_dir,
                              "--data",  eval_path,  "--out", out,         NULL};
    status = run(args_out);
    ck_assert_msg(status == 0, "dtrain predict --out exited with %d; stderr:\n%s", status,
                  err_text);
    ck_assert_str_eq(out_text, "");
    char *written = dt_test_read_file(out, NULL);
    ck_assert_ptr_nonnull(written);
    ck_assert_msg(strcmp(first, written) == 0, "--out wrote other bytes than stdout");
    free(written);
    free(first);
}
END_TEST

START_TEST(mlp_xor) {
    char train_path[PATH_CAP], eval_path[PATH_CAP], job[PATH_CAP];
    write_set(SET_XOR, 400, 31, "train.csv", train_path, NULL);
    write_set(SET_XOR, 200, 32, "eval.csv", eval_path, NULL);
    write_job("\"model\": \"mlp\", \"classes\": 2, \"hidden\": [16]", train_path, eval_path,
              "\"optimizer\": \"adam\", \"learning_rate\": 0.01, \"batch_size\": 20, "
              "\"epochs\": 30",
              job);
    train(job);
    eval_line e = eval_job(job);
    ck_assert_msg(e.accuracy >= 0.95, "accuracy %.4f (loss %.4f), want >= 0.95", e.accuracy,
                  e.loss);
    ck_assert_int_eq(e.examples, 200);
    check_matches_chief(&e);
}
END_TEST

/* ---- Fashion-MNIST ------------------------------------------------------------ */

/* Copies the first n records of an IDX file (gzip or plain) to a plain
 * file, with the count in its header set to n. record_bytes: 784 for the
 * 28x28 images, 1 for labels. */
static void idx_slice(const char *src, const char *dst, int header_bytes, int record_bytes, int n) {
    gzFile in = gzopen(src, "rb");
    ck_assert_msg(in != NULL, "cannot open %s", src);
    unsigned char header[16];
    ck_assert_int_eq(gzread(in, header, (unsigned)header_bytes), header_bytes);
    header[4] = (unsigned char)(n >> 24);
    header[5] = (unsigned char)(n >> 16);
    header[6] = (unsigned char)(n >> 8);
    header[7] = (unsigned char)n;
    size_t bytes = (size_t)n * (size_t)record_bytes;
    unsigned char *body = malloc(bytes);
    ck_assert_ptr_nonnull(body);
    ck_assert_int_eq(gzread(in, body, (unsigned)bytes), (int)bytes);
    gzclose(in);
    FILE *f = fopen(dst, "wb");
    ck_assert_msg(f != NULL, "cannot write %s", dst);
    ck_assert_int_eq(fwrite(header, 1, (size_t)header_bytes, f), (size_t)header_bytes);
    ck_assert_int_eq(fwrite(body, 1, bytes, f), bytes);
    ck_assert_int_eq(fclose(f), 0);
    free(body);
}

START_TEST(fashion_slice) {
    if (access(FASHION_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0 ||
        access(FASHION_DIR "/t10k-images-idx3-ubyte.gz", R_OK) != 0) {
        fprintf(stderr, "models_e2e: fashion_slice skipped: no Fashion-MNIST in " FASHION_DIR
                        " (Debian's dataset-fashion-mnist)\n");
        return;
    }
    char images[PATH_CAP], labels[PATH_CAP], job[PATH_CAP], text[4096];
    path_of("train-images.idx", images);
    path_of("train-labels.idx", labels);
    idx_slice(FASHION_DIR "/train-images-idx3-ubyte.gz", images, 16, 784, FASHION_SLICE);
    idx_slice(FASHION_DIR "/train-labels-idx1-ubyte.gz", labels, 8, 1, FASHION_SLICE);
    snprintf(text, sizeof text,
             "{\"model\": \"softmax\", \"features\": 784, \"classes\": 10, \"data\": \"idx\",\n"
             " \"train_data\": \"%s\", \"train_labels\": \"%s\",\n"
             " \"eval_data\": \"" FASHION_DIR "/t10k-images-idx3-ubyte.gz\",\n"
             " \"eval_labels\": \"" FASHION_DIR "/t10k-labels-idx1-ubyte.gz\",\n"
             " \"scale\": \"divide\", \"scale_divisor\": 255, \"seed\": 1,\n"
             " \"optimizer\": \"adam\", \"learning_rate\": 0.002, \"batch_size\": 50,\n"
             " \"epochs\": 15, \"save_model_secs\": 30, \"log_steps\": 200}\n",
             images, labels);
    path_of("fashion.json", job);
    ck_assert_int_eq(dt_test_write_file(job, text), 0);
    train(job);
    eval_line e = eval_job(job);
    fprintf(stderr,
            "models_e2e: fashion_slice: %d training images: test accuracy %.4f, loss %.4f\n",
            FASHION_SLICE, e.accuracy, e.loss);
    ck_assert_int_eq(e.examples, 10000);
    ck_assert_int_eq(e.global_step, 15 * FASHION_SLICE / 50);
    ck_assert_msg(e.accuracy >= FASHION_MIN_ACCURACY, "test accuracy %.4f < %.2f (loss %.4f)",
                  e.accuracy, FASHION_MIN_ACCURACY, e.loss);
    check_matches_chief(&e);
}
END_TEST

/* ---- the commands' bad input ------------------------------------------------------ */

static const char *or_empty(const char *s) {
    return s ? s : "";
}

static void expect_status(int status, int want, const char *n1, const char *n2) {
    ck_assert_msg(status == want, "exit status %d, want %d; stderr:\n%s", status, want, err_text);
    ck_assert_msg(dt_test_line_has(err_text, n1, n2, NULL, NULL),
                  "no stderr line naming [%s] [%s]; stderr:\n%s", or_empty(n1), or_empty(n2),
                  err_text);
}

START_TEST(cli_bad_input) {
    char data[PATH_CAP], job[PATH_CAP], bare[PATH_CAP], ckpt[PATH_CAP], missing[PATH_CAP],
        empty_dir[PATH_CAP], other[PATH_CAP];
    write_set(SET_THREE, 20, 41, "eval.csv", data, NULL);
    write_job("\"model\": \"softmax\", \"classes\": 3", data, data,
              "\"batch_size\": 10, \"epochs\": 1", job);
    path_of("bare.json", bare);
    ck_assert_int_eq(dt_test_write_file(bare, "{\"model\": \"softmax\", \"classes\": 3, "
                                              "\"features\": 2, \"data\": \"csv\", "
                                              "\"train_data\": \"x.csv\"}\n"),
                     0);
    path_of("missing.json", missing);
    path_of("empty", empty_dir);

    /* Flags and config: status 2. */
    const char *no_config[] = {"eval", NULL};
    expect_status(run(no_config), 2, "missing --config", NULL);
    const char *unknown[] = {"eval", "--config", job, "--bogus", NULL};
    expect_status(run(unknown), 2, "unknown flag --bogus", NULL);
    const char *eval_out[] = {"eval", "--config", job, "--out", "x.csv", NULL};
    expect_status(run(eval_out), 2, "unknown flag --out", NULL);
    const char *no_value[] = {"eval", "--config", job, "--checkpoint", NULL};
    expect_status(run(no_value), 2, "--checkpoint", "needs a value");
    const char *no_data[] = {"predict", "--config", job, NULL};
    expect_status(run(no_data), 2, "predict", "missing --data");
    const char *labels_alone[] = {"eval", "--config", job, "--labels", data, NULL};
    expect_status(run(labels_alone), 2, "--labels needs --data", NULL);
    const char *both[] = {"eval", "--config", job, "--checkpoint", "a", "--log-dir", "b", NULL};
    expect_status(run(both), 2, "--checkpoint", "--log-dir");
    const char *no_file[] = {"eval", "--config", missing, NULL};
    expect_status(run(no_file), 2, missing, NULL);
    const char *bad_set[] = {"eval", "--config", job, "--set", "learning_rate=abc", NULL};
    expect_status(run(bad_set), 2, "learning_rate", "abc");
    const char *no_eval_data[] = {"eval", "--config", bare, NULL};
    expect_status(run(no_eval_data), 2, "no data", "eval_data");
    const char *bad_level[] = {"eval", "--config", job, "--log-level", "loud", NULL};
    expect_status(run(bad_level), 2, "loud", NULL);
    const char *help[] = {"predict", "--help", NULL};
    ck_assert_int_eq(run(help), 0);
    ck_assert_msg(strstr(out_text, "dtrain eval --config") && strstr(out_text, "dtrain predict"),
                  "--help: %s", out_text);

    /* Missing or wrong files: status 1. */
    const char *no_ckpt[] = {"eval", "--config", job, "--log-dir", empty_dir, NULL};
    expect_status(run(no_ckpt), 1, "no checkpoint in", empty_dir);
    path_of("nope.safetensors", ckpt);
    const char *missing_ckpt[] = {"eval", "--config", job, "--checkpoint", ckpt, NULL};
    expect_status(run(missing_ckpt), 1, ckpt, NULL);

    /* A logistic checkpoint for the softmax job. */
    dt_job lj;
    dt_job_defaults(&lj);
    snprintf(lj.model, sizeof lj.model, "logistic");
    lj.num_features = 2;
    dt_tensor specs[DT_MODEL_MAX_VARS];
    int count = 0;
    dt_err err = {0};
    ck_assert_msg(dt_model_specs(&lj, specs, &count, &err) == 0, "%s", err.msg);
    dt_tensors ts;
    ck_assert_msg(dt_tensors_init(&ts, specs, count, &err) == 0, "%s", err.msg);
    dt_ckpt_meta meta = {.global_step = 5};
    dt_model_describe(&lj, meta.model, sizeof meta.model);
    path_of("logistic.safetensors", other);
    ck_assert_msg(dt_ckpt_save(other, &ts, &meta, &err) == 0, "%s", err.msg);
    dt_tensors_deinit(&ts);
    const char *wrong_model[] = {"eval", "--config", job, "--checkpoint", other, NULL};
    expect_status(run(wrong_model), 1, "no variable \"softmax/weight\"", "logistic");
    const char *wrong_predict[] = {"predict", "--config", job,  "--checkpoint",
                                   other,     "--data",   data, NULL};
    expect_status(run(wrong_predict), 1, "softmax/weight", other);
    ck_assert_str_eq(out_text, "");

    /* A missing data file, and a data file of another shape. */
    char absent[PATH_CAP], wide[PATH_CAP];
    path_of("absent.csv", absent);
    path_of("wide.csv", wide);
    ck_assert_int_eq(dt_test_write_file(wide, "a,b,c,label\n1,2,3,0\n"), 0);
    const char *args[] = {
        "eval",           "--config", job,         "--checkpoint", other,  "--set",
        "model=logistic", "--set",    "classes=2", "--data",       absent, NULL};
    expect_status(run(args), 1, absent, NULL);
    args[10] = wide;
    expect_status(run(args), 1, wide, "feature");
}
END_TEST

Suite *models_e2e_suite(void) {
    Suite *s = suite_create("models_e2e");
    TCase *tc = tcase_create("models_e2e");
    tcase_add_unchecked_fixture(tc, suite_setup, dt_test_tmp_end);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_test(tc, logistic_separable);
    tcase_add_test(tc, softmax_three_classes);
    tcase_add_test(tc, mlp_xor);
    tcase_add_test(tc, fashion_slice);
    tcase_add_test(tc, cli_bad_input);
    suite_add_tcase(s, tc);
    return s;
}
