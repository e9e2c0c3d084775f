/*
 * evaluator suite: dt_evaluator_run in this process, over a log dir the
 * test writes checkpoints into. What it refuses before it starts (no
 * eval_data, an eval file it cannot read), a stop request, summaries it
 * cannot write (dropped, counted, then resumed), and a newest checkpoint
 * that is damaged (the older one it falls back to was scored already, and
 * is not scored again); a job's validation split scored as its held-out
 * set. The role as a process beside a real job is the
 * models_e2e suite's. The log is read from this process's stderr, sent to
 * a file for each test.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "evaluator.h"
#include "job.h"
#include "log.h"
#include "model.h"
#include "proc.h"
#include "suites.h"

#define WAIT_MS 30000

static char *tmpdir;
static char log_path[1024];
static int saved_stderr = -1;
static dt_job job;

static void path_in(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", tmpdir, name);
}

/* A logistic job over a 4-row eval file, ending at step 10, its log dir
 * not yet made; stderr (the log) to a file. */
static void setup(void) {
    tmpdir = dt_test_tempdir();
    ck_assert_ptr_nonnull(tmpdir);
    char eval[1024], text[4096];
    path_in(eval, sizeof eval, "eval.csv");
    ck_assert_int_eq(dt_test_write_file(eval, "y,a,b\n1,0.5,1\n0,-1,2\n1,2,0\n0,-2,-1\n"), 0);
    snprintf(text, sizeof text,
             "{\"model\": \"logistic\", \"features\": 2, \"data\": \"csv\", \"train_data\": "
             "\"%s\", \"eval_data\": \"%s\", \"label_column\": \"y\", \"batch_size\": 2, "
             "\"max_steps\": 10, \"log_dir\": \"%s/log\"}",
             eval, eval, tmpdir);
    dt_err err;
    dt_err_clear(&err);
    dt_job_defaults(&job);
    ck_assert_msg(dt_job_parse(text, "evaluator-job.json", &job, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_job_finish(&job, &err) == 0, "%s", err.msg);

    path_in(log_path, sizeof log_path, "evaluator.log");
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    saved_stderr = dup(STDERR_FILENO);
    ck_assert_int_ge(dup2(fd, STDERR_FILENO), 0);
    close(fd);
    dt_log_set_level(DT_LOG_INFO);
}

static void teardown(void) {
    if (saved_stderr >= 0) {
        dup2(saved_stderr, STDERR_FILENO);
        close(saved_stderr);
        saved_stderr = -1;
    }
    dt_test_rmtree(tmpdir);
    dt_test_tempdir_free(tmpdir);
}

/* Saves the model's variables (zeros) as step's checkpoint in dir, with
 * the job's max_steps in its metadata. */
static void save(const char *dir, int64_t step) {
    dt_tensor specs[DT_MODEL_MAX_VARS];
    int count = 0;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_model_specs(&job.model, specs, &count, &err) == 0, "%s", err.msg);
    dt_tensors ts;
    ck_assert_msg(dt_tensors_init(&ts, specs, count, &err) == 0, "%s", err.msg);
    dt_safetensors_meta meta = {.global_step = step, .max_steps = job.max_steps};
    dt_model_describe(&job.model, meta.model, sizeof meta.model);
    ck_assert_msg(dt_ckpt_save_in_dir(dir, &ts, &meta, 0, NULL, 0, &err) == 0, "%s", err.msg);
    dt_tensors_deinit(&ts);
}

static int log_count(const char *needle) {
    char *text = dt_test_read_file(log_path, NULL);
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, needle)) != NULL; p++)
        n++;
    free(text);
    return n;
}

START_TEST(test_needs_eval_data) {
    job.data.eval_data[0] = '\0';
    atomic_int stop = 0;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_evaluator_run(&job, &stop, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "evaluator: the job has no \"eval_data\""), "%s", err.msg);
}
END_TEST

/* An eval file that is not there ends it before it watches anything: a
 * config error (exit 2) whose message names the field and the file. */
START_TEST(test_eval_data_missing) {
    path_in(job.data.eval_data, sizeof job.data.eval_data, "gone.csv");
    atomic_int stop = 0;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_evaluator_run(&job, &stop, &err), DT_ECONFIG);
    ck_assert_msg(strncmp(err.msg, "evaluator: ", 11) == 0 && strstr(err.msg, "\"eval_data\"") &&
                      strstr(err.msg, "gone.csv"),
                  "%s", err.msg);
    ck_assert_int_eq(log_count("watching"), 0);
}
END_TEST

START_TEST(test_stop) {
    atomic_int stop = 1;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_evaluator_run(&job, &stop, &err), DT_ECANCELLED);
    ck_assert_str_eq(err.msg, "evaluator: stopped by a signal");
}
END_TEST

typedef struct {
    atomic_int stop;
    atomic_int finished;
    int rc;
    dt_err err;
} run_state;

static void *run_evaluator(void *arg) {
    run_state *r = arg;
    dt_err_clear(&r->err);
    r->rc = dt_evaluator_run(&job, &r->stop, &r->err);
    atomic_store(&r->finished, 1);
    return NULL;
}

static void expect_log(const char *needle, const char *why) {
    if (dt_test_wait_log(log_path, needle, WAIT_MS, 0)) return;
    char *text = dt_test_read_file(log_path, NULL);
    ck_abort_msg("%s: no \"%s\" in the log:\n%s", why, needle, text ? text : "");
}

/* Its event file cannot be made (log_dir/eval is a file): the score of
 * step 5 is logged, its summary dropped and counted. Then the newest
 * checkpoint, 6, is damaged: restore falls back to 5, scored already, so
 * nothing is scored. Once eval/ can be made, step 10 (the last) is scored,
 * its summary written with a line saying how many were dropped, and the
 * evaluator is done. */
START_TEST(test_dropped_summaries_and_damaged_newest) {
    char log_dir[1024], eval_file[1100], side[1024], from[1200], to[1200];
    snprintf(log_dir, sizeof log_dir, "%s", job.log_dir);
    ck_assert_int_eq(mkdir(log_dir, 0755), 0);
    snprintf(eval_file, sizeof eval_file, "%s/eval", log_dir);
    ck_assert_int_eq(dt_test_write_file(eval_file, "not a directory"), 0);
    save(log_dir, 5);

    run_state r = {0};
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, run_evaluator, &r), 0);
    expect_log("evaluator: global_step 5: loss", "step 5 not scored");
    expect_log("summaries dropped: 1 so far", "the dropped summary not logged");

    /* Checkpoints 5 and 6 made aside, 6 cut short, then moved in with
     * their state file in one rename each: the evaluator never sees 6
     * whole. */
    path_in(side, sizeof side, "side");
    save(side, 5);
    save(side, 6);
    snprintf(from, sizeof from, "%s/model.ckpt-6.safetensors", side);
    ck_assert_int_eq(truncate(from, 40), 0);
    snprintf(to, sizeof to, "%s/model.ckpt-6.safetensors", log_dir);
    ck_assert_int_eq(rename(from, to), 0);
    snprintf(from, sizeof from, "%s/checkpoint", side);
    snprintf(to, sizeof to, "%s/checkpoint", log_dir);
    ck_assert_int_eq(rename(from, to), 0);
    expect_log("checkpoint: skipping", "the damaged checkpoint 6 not skipped");

    ck_assert_int_eq(unlink(eval_file), 0);
    save(log_dir, 10);
    for (long long deadline = dt_test_now_ms() + WAIT_MS;
         !atomic_load(&r.finished) && dt_test_now_ms() < deadline;)
        dt_test_sleep_ms(20);
    if (!atomic_load(&r.finished)) r.stop = 1; /* so the join below returns */
    pthread_join(thread, NULL);
    char *text = dt_test_read_file(log_path, NULL);
    ck_assert_msg(r.rc == 0, "the evaluator returned %d: %s; log:\n%s", r.rc, r.err.msg, text);
    free(text);
    expect_log("evaluator: global_step 10: loss", "step 10 not scored");
    expect_log("evaluator: summaries resumed after 1 were dropped", "no resumption line");
    expect_log("evaluator: done: scored the final checkpoint (global_step 10)", "not done");
    ck_assert_int_eq(log_count("evaluator: global_step 5:"), 1);
    ck_assert_int_eq(log_count("evaluator: global_step 6:"), 0);
    struct stat st;
    ck_assert_int_eq(stat(eval_file, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
}
END_TEST

/* A job with no eval_data and validation_fraction scores its training
 * file's validation rows: 2 of the 10 (one of each class's five). */
START_TEST(test_scores_the_validation_split) {
    char train[1024];
    path_in(train, sizeof train, "train.csv");
    ck_assert_int_eq(dt_test_write_file(train, "y,a,b\n1,0.5,1\n0,-1,2\n1,2,0\n0,-2,-1\n1,1,1\n"
                                               "0,-1,-1\n1,3,0\n0,0,-3\n1,1,2\n0,-2,0\n"),
                     0);
    snprintf(job.data.train_data, sizeof job.data.train_data, "%s", train);
    job.data.eval_data[0] = '\0';
    job.data.validation_fraction = 0.2;
    ck_assert_int_eq(mkdir(job.log_dir, 0755), 0);
    save(job.log_dir, 10);
    atomic_int stop = 0;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_evaluator_run(&job, &stop, &err);
    char *text = dt_test_read_file(log_path, NULL);
    ck_assert_msg(rc == 0, "the evaluator returned %d: %s; log:\n%s", rc, err.msg, text);
    ck_assert_msg(strstr(text, "evaluator: 2 held-out examples from the validation rows of ") &&
                      strstr(text, "evaluator: global_step 10: loss ") &&
                      strstr(text, " on 2 examples"),
                  "log:\n%s", text);
    free(text);
}
END_TEST

static void suite_setup(void) {
    if (dt_test_tmp_begin() != 0) fprintf(stderr, "evaluator: no suite temp dir; using $TMPDIR\n");
}

Suite *evaluator_suite(void) {
    Suite *s = suite_create("evaluator");
    TCase *tc = tcase_create("evaluator");
    tcase_add_unchecked_fixture(tc, suite_setup, dt_test_tmp_end);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_needs_eval_data);
    tcase_add_test(tc, test_eval_data_missing);
    tcase_add_test(tc, test_stop);
    tcase_add_test(tc, test_scores_the_validation_split);
    tcase_add_test(tc, test_dropped_summaries_and_damaged_newest);
    suite_add_tcase(s, tc);
    return s;
}
