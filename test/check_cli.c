/*
 * Suite "cli": the dtrain binary's command line. Runs $DTRAIN_BIN with bad
 * flags and bad files and checks the contract: exit status 2 and one line on
 * stderr that names the problem (the flag, the value, or file:line:col and
 * the field). --help and --version exit 0.
 *
 * A run that is wrongly accepted would start serving, so every run is bounded
 * and killed by the teardown.
 *
 * Case "launch" runs scripts/launch_local.sh (beside $DTRAIN_BIN's build
 * dir) on free ports with a job config of the test's: its log dir is the
 * config's, or --log-dir's.
 */
#include <check.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proc.h"
#include "suites.h"
#include "testjob.h"

#define RUN_TIMEOUT_MS 15000

/* The test's temp dir and a valid cluster file (1 ps, 2 workers); J.out
 * and J.err: what the last run printed. */
static dt_test_job J;

static void setup(void) {
    dt_test_job_setup(&J);
    dt_test_job_cluster(&J, 1, 2);
}

static void teardown(void) {
    dt_test_job_teardown(&J);
}

/* Runs the binary with args (NULL-terminated, without argv[0]). Returns its
 * exit status; a run that does not end in time (bad input accepted?)
 * fails the test. */
static int run(const char *const *args) {
    return dt_test_job_command(&J, args, RUN_TIMEOUT_MS);
}

/* Asserts a usage/config error: status 2 and one stderr line holding every
 * non-NULL needle. */
static void expect_usage_error(int status, const char *n1, const char *n2, const char *n3) {
    dt_test_job_expect_error(&J, status, 2, n1, n2, n3);
}

/* 1 when a line of text holds "path:<digits>:<digits>". */
static int has_line_col(const char *text, const char *path) {
    size_t n = strlen(path);
    for (const char *p = text; (p = strstr(p, path)) != NULL; p += n) {
        const char *q = p + n;
        if (*q++ != ':' || !isdigit((unsigned char)*q)) continue;
        while (isdigit((unsigned char)*q))
            q++;
        if (*q++ != ':' || !isdigit((unsigned char)*q)) continue;
        return 1;
    }
    return 0;
}

/* Writes text to tmp/name; path_out gets the path. */
static void write_tmp(const char *name, const char *text, char *path_out, size_t cap) {
    snprintf(path_out, cap, "%s/%s", J.dir, name);
    ck_assert_int_eq(dt_test_write_file(path_out, text), 0);
}

START_TEST(unknown_flag) {
    const char *args[] = {"--cluster",    J.cluster, "--job-name",   "ps",
                          "--task-index", "0",       "--bogus-flag", NULL};
    expect_usage_error(run(args), "--bogus-flag", NULL, NULL);
}
END_TEST

START_TEST(flag_missing_value) {
    const char *args[] = {"--job-name", "ps", "--task-index", "0", "--cluster", NULL};
    expect_usage_error(run(args), "--cluster", NULL, NULL);
}
END_TEST

START_TEST(missing_cluster) {
    const char *args[] = {"--job-name", "ps", "--task-index", "0", NULL};
    expect_usage_error(run(args), "--cluster", NULL, NULL);
}
END_TEST

START_TEST(missing_job_name) {
    const char *args[] = {"--cluster", J.cluster, "--task-index", "0", NULL};
    expect_usage_error(run(args), "--job", NULL, NULL);
}
END_TEST

/* "chief" is a job only where the cluster lists one (this one does not). */
static const char *const bad_jobs[] = {"chief", "foo"};

START_TEST(unknown_job_name) {
    const char *args[] = {"--cluster",    J.cluster, "--job-name", bad_jobs[_i],
                          "--task-index", "0",       NULL};
    expect_usage_error(run(args), bad_jobs[_i], NULL, NULL);
}
END_TEST

START_TEST(short_flags_checked_too) {
    const char *args[] = {"--cluster", J.cluster, "--job", "foo", "--task", "0", NULL};
    expect_usage_error(run(args), "foo", NULL, NULL);
}
END_TEST

/* 1 ps and 2 workers: ps 1, worker 2 and -1 do not exist. */
static const char *const out_of_range[][2] = {{"ps", "1"}, {"worker", "2"}, {"worker", "-1"}};

START_TEST(task_index_out_of_range) {
    const char *args[] = {"--cluster",    J.cluster,           "--job-name", out_of_range[_i][0],
                          "--task-index", out_of_range[_i][1], NULL};
    expect_usage_error(run(args), "task", out_of_range[_i][1], NULL);
}
END_TEST

static const char *const bad_indexes[] = {"abc", "1x", ""};

START_TEST(task_index_not_a_number) {
    const char *args[] = {"--cluster",    J.cluster,       "--job-name", "worker",
                          "--task-index", bad_indexes[_i], NULL};
    expect_usage_error(run(args), "task", bad_indexes[_i], NULL);
}
END_TEST

START_TEST(missing_cluster_file) {
    char path[1100];
    snprintf(path, sizeof path, "%s/no-such-cluster.json", J.dir);
    const char *args[] = {"--cluster", path, "--job-name", "ps", "--task-index", "0", NULL};
    expect_usage_error(run(args), path, NULL, NULL);
}
END_TEST

START_TEST(malformed_json) {
    char path[1100];
    write_tmp("broken.json",
              "{\n  \"cluster\": {\n    \"ps\": [\"127.0.0.1:1681\"\n    \"worker\": []\n  }\n}\n",
              path, sizeof path);
    const char *args[] = {"--cluster", path, "--job-name", "ps", "--task-index", "0", NULL};
    int status = run(args);
    expect_usage_error(status, path, NULL, NULL);
    ck_assert_msg(has_line_col(J.err, path), "no %s:line:col in stderr:\n%s", path, J.err);
}
END_TEST

START_TEST(empty_ps_list) {
    char path[1100], text[256];
    snprintf(text, sizeof text, "{\"cluster\": {\"ps\": [], \"worker\": [\"127.0.0.1:%d\"]}}\n",
             J.ports[1]);
    write_tmp("empty_ps.json", text, path, sizeof path);
    const char *args[] = {"--cluster", path, "--job-name", "worker", "--task-index", "0", NULL};
    expect_usage_error(run(args), path, "ps", NULL);
}
END_TEST

START_TEST(duplicate_address) {
    char path[1100], text[256], addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", J.ports[0]);
    snprintf(text, sizeof text,
             "{\"cluster\": {\"ps\": [\"%s\"],\n \"worker\": [\"%s\", \"127.0.0.1:%d\"]}}\n", addr,
             addr, J.ports[2]);
    write_tmp("dup.json", text, path, sizeof path);
    const char *args[] = {"--cluster", path, "--job-name", "ps", "--task-index", "0", NULL};
    expect_usage_error(run(args), path, addr, NULL);
}
END_TEST

static const char *const bad_addrs[] = {"127.0.0.1:99999", "127.0.0.1", "127.0.0.1:http",
                                        "127.0.0.1:0", "127.0.0.1:-5"};

START_TEST(bad_host_port) {
    char path[1100], text[256];
    snprintf(text, sizeof text,
             "{\"cluster\": {\"ps\": [\"%s\"],\n \"worker\": [\"127.0.0.1:%d\"]}}\n", bad_addrs[_i],
             J.ports[1]);
    write_tmp("bad_addr.json", text, path, sizeof path);
    const char *args[] = {"--cluster", path, "--job-name", "worker", "--task-index", "0", NULL};
    expect_usage_error(run(args), path, bad_addrs[_i], NULL);
}
END_TEST

/* --set assignment and the name the message must carry. */
static const char *const bad_sets[][2] = {
    {"no_such_field=1", "no_such_field"}, {"max_steps=abc", "max_steps"},
    {"batch_size=0", "batch_size"},       {"learning_rate=-0.5", "learning_rate"},
    {"max_steps", "max_steps"},
};

START_TEST(bad_set) {
    const char *args[] = {"--cluster", J.cluster, "--job-name",    "worker", "--task-index",
                          "0",         "--set",   bad_sets[_i][0], NULL};
    expect_usage_error(run(args), bad_sets[_i][1], NULL, NULL);
}
END_TEST

START_TEST(bad_config_value) {
    char path[1100];
    write_tmp("job.json", "{\n  \"max_steps\": 100,\n  \"learning_rate\": -1\n}\n", path,
              sizeof path);
    const char *args[] = {"--cluster", J.cluster,  "--job-name", "worker", "--task-index",
                          "0",         "--config", path,         NULL};
    expect_usage_error(run(args), path, "learning_rate", NULL);
    ck_assert_msg(has_line_col(J.err, path), "no %s:line:col in stderr:\n%s", path, J.err);
}
END_TEST

START_TEST(unknown_config_field) {
    char path[1100];
    write_tmp("job.json", "{\n  \"max_stepz\": 100\n}\n", path, sizeof path);
    const char *args[] = {"--cluster", J.cluster,  "--job-name", "ps", "--task-index",
                          "0",         "--config", path,         NULL};
    expect_usage_error(run(args), path, "max_stepz", NULL);
}
END_TEST

START_TEST(missing_config_file) {
    char path[1100];
    snprintf(path, sizeof path, "%s/no-such-job.json", J.dir);
    const char *args[] = {"--cluster", J.cluster,  "--job-name", "ps", "--task-index",
                          "0",         "--config", path,         NULL};
    expect_usage_error(run(args), path, NULL, NULL);
}
END_TEST

START_TEST(bad_log_level) {
    const char *args[] = {"--cluster", J.cluster,     "--job-name", "ps", "--task-index",
                          "0",         "--log-level", "loud",       NULL};
    expect_usage_error(run(args), "loud", NULL, NULL);
}
END_TEST

START_TEST(bad_max_message) {
    static const char *const bad[] = {"0", "2048", "12x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *args[] = {"--cluster", J.cluster,          "--job-name", "ps", "--task-index",
                              "0",         "--max-message-mb", bad[i],       NULL};
        expect_usage_error(run(args), "--max-message-mb", "1 to 2047", NULL);
    }
    const char *worker[] = {"--cluster", J.cluster,          "--job-name", "worker", "--task-index",
                            "0",         "--max-message-mb", "100",        NULL};
    expect_usage_error(run(worker), "--max-message-mb is for the ps job only", NULL, NULL);
}
END_TEST

START_TEST(help) {
    static const char *const flags[] = {"--cluster", "--job-name", "--task-index",    "--config",
                                        "--set",     "--log-dir",  "--keep-serving",  "--log-level",
                                        "--help",    "--version",  "--max-message-mb"};
    const char *args[] = {"--help", NULL};
    int status = run(args);
    ck_assert_msg(status == 0, "--help: exit status %d, want 0; stderr:\n%s", status, J.err);
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
        ck_assert_msg(strstr(J.out, flags[i]) != NULL, "--help does not mention %s:\n%s", flags[i],
                      J.out);
}
END_TEST

START_TEST(version) {
    const char *args[] = {"--version", NULL};
    int status = run(args);
    ck_assert_msg(status == 0, "--version: exit status %d, want 0; stderr:\n%s", status, J.err);
    ck_assert_msg(strstr(J.out, "dtrain") != NULL, "--version prints: %s", J.out);
}
END_TEST

/* ---- TF_CONFIG ---- */

/* Runs args with TF_CONFIG set to tf (and no --cluster unless args has it). */
static int run_tf(const char *tf, const char *const *args) {
    ck_assert_int_eq(setenv("TF_CONFIG", tf, 1), 0);
    int status = run(args);
    unsetenv("TF_CONFIG");
    return status;
}

#define TF_CLUSTER "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"ps\": [\"127.0.0.1:2\"]}"

START_TEST(tf_config_errors) {
    const char *none[] = {NULL};
    expect_usage_error(run_tf("{\"cluster\": [1]}", none), "TF_CONFIG:1:13:", "\"cluster\"", NULL);
    expect_usage_error(run_tf("{\"cluster\": ", none), "TF_CONFIG:1:", "invalid JSON", NULL);
    expect_usage_error(run_tf(TF_CLUSTER ", \"task\": {\"type\": \"chief\", \"index\": 1}}", none),
                       "TF_CONFIG:1:", "\"task\": chief task 1 out of range", NULL);
    expect_usage_error(run_tf(TF_CLUSTER "}", none), "missing --job-name", "TF_CONFIG", NULL);
    /* One flag alone must agree with "task". */
    const char *job_ps[] = {"--job-name", "ps", NULL};
    expect_usage_error(
        run_tf(TF_CLUSTER ", \"task\": {\"type\": \"chief\", \"index\": 0}}", job_ps),
        "--job-name ps conflicts with TF_CONFIG \"task\"", "\"chief\"", NULL);
    const char *task_1[] = {"--task-index", "1", NULL};
    expect_usage_error(run_tf(TF_CLUSTER ", \"task\": {\"type\": \"ps\", \"index\": 0}}", task_1),
                       "--task-index 1 conflicts with TF_CONFIG", NULL, NULL);
    /* Both flags win over "task", and are checked against the cluster. */
    const char *worker_0[] = {"--job-name", "worker", "--task-index", "0", NULL};
    expect_usage_error(run_tf(TF_CLUSTER ", \"task\": {\"type\": \"ps\", \"index\": 0}}", worker_0),
                       "TF_CONFIG", "worker task 0 out of range", "0 worker tasks");
    /* The cluster file, when given, is the cluster: TF_CONFIG is not read. */
    const char *file[] = {"--cluster", J.cluster, "--job-name", "boss", "--task", "0", NULL};
    expect_usage_error(run_tf("{", file), "unknown job \"boss\"", NULL, NULL);
    /* An evaluator needs eval_data. */
    expect_usage_error(
        run_tf(TF_CLUSTER ", \"task\": {\"type\": \"evaluator\", \"index\": 0}}", none),
        "evaluator", "eval_data", NULL);
}
END_TEST

/* The operator's tools refuse bad flags with exit 2 and say which. */
START_TEST(monitor_flag_errors) {
    unsetenv("TF_CONFIG");
    const char *no_address[] = {"health", NULL};
    expect_usage_error(run(no_address), "health: missing --address", NULL, NULL);
    const char *bogus[] = {"health", "--address", "127.0.0.1:1", "--json", NULL};
    expect_usage_error(run(bogus), "health: unknown flag --json", NULL, NULL);
    const char *timeout[] = {"health", "--address", "127.0.0.1:1", "--timeout-secs", "0", NULL};
    expect_usage_error(run(timeout), "--timeout-secs", "\"0\"", NULL);
    const char *no_cluster[] = {"status", NULL};
    expect_usage_error(run(no_cluster), "status: missing --cluster", "TF_CONFIG", NULL);
    const char *serving[] = {"status", "--cluster", J.cluster, "--serving", NULL};
    expect_usage_error(run(serving), "status: unknown flag --serving", NULL, NULL);
    const char *watch[] = {"status", "--cluster", J.cluster, "--watch", "x", NULL};
    expect_usage_error(run(watch), "--watch", "\"x\"", NULL);
    const char *no_value[] = {"status", "--cluster", NULL};
    expect_usage_error(run(no_value), "--cluster", "needs a value", NULL);
    char missing[1100];
    snprintf(missing, sizeof missing, "%s/none.json", J.dir);
    const char *no_file[] = {"status", "--cluster", missing, NULL};
    expect_usage_error(run(no_file), missing, NULL, NULL);
}
END_TEST

/* A job config with train_data and no "data", whose file's name and
 * bytes say no format: exit 2 naming the field and the file (it trained
 * on the synthetic line and exited 0 before). */
START_TEST(train_data_without_data) {
    char rows[1100], path[1100], text[1300];
    write_tmp("rows.txt", "1 1:0.5\n0 1:0.25\n", rows, sizeof rows);
    snprintf(text, sizeof text, "{\"train_data\": \"%s\", \"max_steps\": 10}\n", rows);
    write_tmp("job.json", text, path, sizeof path);
    const char *args[] = {"--cluster", J.cluster,  "--job-name", "worker", "--task-index",
                          "0",         "--config", path,         NULL};
    expect_usage_error(run(args), "\"train_data\"", rows, "\"data\"");
}
END_TEST

#define LAUNCH_TIMEOUT_MS 120000

/* scripts/launch_local.sh of the checkout $DTRAIN_BIN was built in
 * (<checkout>/<build>/dtrain), else of the current directory. */
static void launch_script(char *buf, size_t cap) {
    const char *bin = dt_test_bin();
    const char *slash = strrchr(bin, '/');
    int n = slash ? (int)(slash - bin) : 0;
    while (n > 0 && bin[n - 1] != '/')
        n--; /* back over the build dir's name */
    if (bin[0] == '/' && n > 0)
        snprintf(buf, cap, "%.*sscripts/launch_local.sh", n, bin);
    else
        snprintf(buf, cap, "scripts/launch_local.sh");
}

/* Runs launch_local.sh with the config and the extra args (NULL-ended) on
 * free ports; asserts it exits 0. */
static void launch(const char *config, const char *const *extra, const char *log_name) {
    char script[1200], ports[3][16], log[1100];
    int p[3];
    ck_assert_int_eq(dt_test_free_ports(p, 3), 0);
    for (int i = 0; i < 3; i++)
        snprintf(ports[i], sizeof ports[i], "%d", p[i]);
    launch_script(script, sizeof script);
    char *argv[24] = {"/usr/bin/env", "bash",          script,   "--config",
                      (char *)config, "--ps-port",     ports[0], "--chief-port",
                      ports[1],       "--worker-port", ports[2]};
    int argc = 11;
    for (int i = 0; extra && extra[i] && argc < 23; i++)
        argv[argc++] = (char *)extra[i];
    argv[argc] = NULL;
    snprintf(log, sizeof log, "%s/%s.log", J.dir, log_name);
    pid_t pid = dt_test_spawn(argv, log);
    ck_assert_int_gt(pid, 0);
    int status = dt_test_wait(pid, LAUNCH_TIMEOUT_MS);
    ck_assert_msg(status == 0, "%s exited %d; logs:%s", script, status, dt_test_report_logs(J.dir));
}

static int has_file(const char *dir, const char *name) {
    char path[1200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

/* The config's log_dir is the job's dir (it was always logs/linear); a
 * --log-dir flag wins over it. */
START_TEST(launch_local_log_dir) {
    char config[1100], text[1400], from_config[1100], from_flag[1100];
    snprintf(from_config, sizeof from_config, "%s/from_config", J.dir);
    snprintf(from_flag, sizeof from_flag, "%s/from_flag", J.dir);
    snprintf(text, sizeof text, "{\"max_steps\": 60, \"log_steps\": 20, \"log_dir\": \"%s\"}\n",
             from_config);
    write_tmp("job.json", text, config, sizeof config);

    launch(config, NULL, "launch1");
    static const char *const files[] = {"ps.log", "chief.log", "worker1.log",
                                        "model.ckpt-60.safetensors"};
    for (int i = 0; i < 4; i++)
        ck_assert_msg(has_file(from_config, files[i]), "no %s in the config's log_dir %s; logs:%s",
                      files[i], from_config, dt_test_report_logs(J.dir));

    const char *flag[] = {"--log-dir", from_flag, NULL};
    launch(config, flag, "launch2");
    for (int i = 0; i < 4; i++)
        ck_assert_msg(has_file(from_flag, files[i]), "no %s in --log-dir %s; logs:%s", files[i],
                      from_flag, dt_test_report_logs(J.dir));
    char ckpt[1200];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint", from_config);
    char *state = dt_test_read_file(ckpt, NULL);
    ck_assert_ptr_nonnull(state);
    ck_assert_msg(strstr(state, "model.ckpt-60") != NULL, "%s: %s", ckpt, state);
    free(state);
}
END_TEST

Suite *cli_suite(void) {
    Suite *s = suite_create("cli");
    TCase *tc = dt_test_job_tcase(s, "usage", 60, setup, teardown);
    tcase_add_test(tc, unknown_flag);
    tcase_add_test(tc, flag_missing_value);
    tcase_add_test(tc, bad_max_message);
    tcase_add_test(tc, missing_cluster);
    tcase_add_test(tc, missing_job_name);
    tcase_add_loop_test(tc, unknown_job_name, 0, (int)(sizeof bad_jobs / sizeof *bad_jobs));
    tcase_add_test(tc, short_flags_checked_too);
    tcase_add_loop_test(tc, task_index_out_of_range, 0,
                        (int)(sizeof out_of_range / sizeof *out_of_range));
    tcase_add_loop_test(tc, task_index_not_a_number, 0,
                        (int)(sizeof bad_indexes / sizeof *bad_indexes));
    tcase_add_test(tc, bad_log_level);
    tcase_add_test(tc, help);
    tcase_add_test(tc, version);

    TCase *files = dt_test_job_tcase(s, "files", 60, setup, teardown);
    tcase_add_test(files, missing_cluster_file);
    tcase_add_test(files, malformed_json);
    tcase_add_test(files, empty_ps_list);
    tcase_add_test(files, duplicate_address);
    tcase_add_loop_test(files, bad_host_port, 0, (int)(sizeof bad_addrs / sizeof *bad_addrs));
    tcase_add_loop_test(files, bad_set, 0, (int)(sizeof bad_sets / sizeof *bad_sets));
    tcase_add_test(files, bad_config_value);
    tcase_add_test(files, unknown_config_field);
    tcase_add_test(files, missing_config_file);
    tcase_add_test(files, tf_config_errors);
    tcase_add_test(files, monitor_flag_errors);
    tcase_add_test(files, train_data_without_data);

    TCase *launch_tc = dt_test_job_tcase(s, "launch", 300, setup, teardown);
    tcase_add_test(launch_tc, launch_local_log_dir);
    return s;
}
