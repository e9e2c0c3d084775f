/*
 * Tests of lib/cluster: the cluster file and the job config.
 *
 * Most cases parse text and check the return code and the whole message,
 * line:col included (columns are counted by hand in the comments). Files go
 * to a temporary directory made and removed by an unchecked fixture, so it is
 * removed even when a test fails. Run from the repository root: the conf/
 * files are read by relative path.
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "job.h"
#include "log.h"
#include "suites.h"

/* ---- helpers ---- */

#define SRC "t.json"

static char tmp_dir[64];

static void tmp_setup(void) {
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/dt_cluster_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
}

static void tmp_teardown(void) {
    DIR *dir = opendir(tmp_dir);
    if (dir) {
        struct dirent *e;
        char path[PATH_MAX];
        while ((e = readdir(dir)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(path, sizeof path, "%s/%s", tmp_dir, e->d_name);
            unlink(path);
        }
        closedir(dir);
    }
    rmdir(tmp_dir);
}

static void write_file(const char *name, const char *bytes, size_t len, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", tmp_dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

/* Parses text as a cluster file and expects code and exactly msg. */
static void cluster_fails(const char *text, int code, const char *msg) {
    dt_cluster c;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_cluster_parse(text, SRC, &c, &err);
    ck_assert_msg(rc == code, "rc %d, want %d, for %s (msg: %s)", rc, code, text, err.msg);
    ck_assert_int_eq(err.code, code);
    ck_assert_str_eq(err.msg, msg);
    /* A failed parse leaves nothing to free. */
    ck_assert_int_eq(c.num_ps, 0);
    ck_assert_int_eq(c.num_workers, 0);
    ck_assert_ptr_null(c.ps);
    ck_assert_ptr_null(c.workers);
}

/* Parses text as a job file over the defaults; expects DT_EINVAL and msg,
 * and the job untouched. */
static void job_fails(const char *text, const char *msg) {
    dt_job job, before;
    dt_err err;
    dt_err_clear(&err);
    dt_job_defaults(&job);
    before = job;
    int rc = dt_job_parse(text, SRC, &job, &err);
    ck_assert_msg(rc == DT_EINVAL, "rc %d for %s (msg: %s)", rc, text, err.msg);
    ck_assert_str_eq(err.msg, msg);
    ck_assert(memcmp(&job, &before, sizeof job) == 0);
}

/* Like job_fails, for messages too long to spell out: msg is a prefix. */
static void job_fails_prefix(const char *text, const char *msg) {
    dt_job job, before;
    dt_err err;
    dt_err_clear(&err);
    dt_job_defaults(&job);
    before = job;
    int rc = dt_job_parse(text, SRC, &job, &err);
    ck_assert_msg(rc == DT_EINVAL, "rc %d for %s (msg: %s)", rc, text, err.msg);
    ck_assert_msg(strncmp(err.msg, msg, strlen(msg)) == 0, "message: %s", err.msg);
    ck_assert(memcmp(&job, &before, sizeof job) == 0);
}

static void set_fails(const char *assignment, const char *msg) {
    dt_job job, before;
    dt_err err;
    dt_err_clear(&err);
    dt_job_defaults(&job);
    before = job;
    int rc = dt_job_set(&job, assignment, &err);
    ck_assert_msg(rc == DT_EINVAL, "rc %d for %s (msg: %s)", rc, assignment, err.msg);
    ck_assert_str_eq(err.msg, msg);
    ck_assert(memcmp(&job, &before, sizeof job) == 0);
}

/* ---- cluster: good files ---- */

START_TEST(test_cluster_demo) {
    dt_cluster c;
    dt_err err;
    dt_err_clear(&err);
    const char *text = "{\"cluster\": {\"ps\": [\"localhost:1681\"], "
                       "\"worker\": [\"localhost:1682\", \"10.0.0.2:1683\"]}}";
    ck_assert_int_eq(dt_cluster_parse(text, SRC, &c, &err), 0);
    ck_assert_int_eq(c.num_ps, 1);
    ck_assert_int_eq(c.num_workers, 2);
    ck_assert_str_eq(c.ps[0].host, "localhost");
    ck_assert_int_eq(c.ps[0].port, 1681);
    ck_assert_str_eq(c.ps[0].addr, "localhost:1681");
    ck_assert_str_eq(c.workers[0].addr, "localhost:1682");
    ck_assert_str_eq(c.workers[1].host, "10.0.0.2");
    ck_assert_int_eq(c.workers[1].port, 1683);
    ck_assert_str_eq(c.workers[1].addr, "10.0.0.2:1683");
    dt_cluster_deinit(&c);
    ck_assert_ptr_null(c.ps);
    ck_assert_int_eq(c.num_workers, 0);
    dt_cluster_deinit(&c); /* twice is fine */
    dt_cluster_deinit(NULL);
}
END_TEST

/* The role from the flags and the cluster's "task", as the binary and
 * the library both take it. */
static const char *role_error(const dt_cluster *c, const char *job, const char *task,
                              int allow_evaluator, dt_role *r, dt_err *err) {
    dt_err_clear(err);
    return dt_cluster_resolve_role(c, "TF_CONFIG", job, task, allow_evaluator, r, err) < 0
               ? err->msg
               : NULL;
}

START_TEST(test_cluster_resolve_role) {
    dt_cluster c;
    dt_err err;
    dt_role r;
    dt_err_clear(&err);
    const char *text = "{\"cluster\": {\"chief\": [\"h:1\"], \"ps\": [\"h:2\"], "
                       "\"worker\": [\"h:3\"], \"evaluator\": [\"h:4\"]}, "
                       "\"task\": {\"type\": \"worker\", \"index\": 0}}";
    ck_assert_int_eq(dt_cluster_parse(text, SRC, &c, &err), 0);
    /* "task" alone: worker 0 is training task 1 (after the chief). */
    ck_assert_ptr_null(role_error(&c, NULL, NULL, 0, &r, &err));
    ck_assert(r.type == DT_TASK_WORKER && r.index == 1);
    /* Both flags win; chief is training task 0. */
    ck_assert_ptr_null(role_error(&c, "chief", "0", 0, &r, &err));
    ck_assert(r.type == DT_TASK_WORKER && r.index == 0);
    ck_assert_ptr_null(role_error(&c, "ps", "0", 0, &r, &err));
    ck_assert(r.type == DT_TASK_PS && r.index == 0);
    /* One flag alone must agree with "task". */
    ck_assert_ptr_null(role_error(&c, "worker", NULL, 0, &r, &err));
    ck_assert_ptr_nonnull(strstr(role_error(&c, "ps", NULL, 0, &r, &err),
                                 "--job-name ps conflicts with TF_CONFIG \"task\""));
    ck_assert_ptr_nonnull(
        strstr(role_error(&c, NULL, "1", 0, &r, &err), "--task-index 1 conflicts with"));
    ck_assert_ptr_nonnull(strstr(role_error(&c, "boss", "0", 0, &r, &err), "unknown job \"boss\""));
    ck_assert_ptr_nonnull(
        strstr(role_error(&c, "ps", "-1", 0, &r, &err), "\"-1\" is not a non-negative integer"));
    ck_assert_ptr_nonnull(strstr(role_error(&c, "ps", "1", 0, &r, &err),
                                 "TF_CONFIG: --job-name/--task-index: ps task 1 out of range"));
    /* The evaluator is the binary's alone. */
    ck_assert_ptr_nonnull(
        strstr(role_error(&c, "evaluator", "0", 0, &r, &err), "the evaluator is the binary's own"));
    ck_assert_ptr_null(role_error(&c, "evaluator", "0", 1, &r, &err));
    ck_assert(r.type == DT_TASK_EVALUATOR && r.index == 0);
    dt_cluster_deinit(&c);
    /* No "task": both flags are needed. */
    ck_assert_int_eq(dt_cluster_parse("{\"cluster\": {\"ps\": [\"h:2\"], \"worker\": [\"h:3\"]}}",
                                      SRC, &c, &err),
                     0);
    ck_assert_ptr_nonnull(strstr(role_error(&c, NULL, "0", 0, &r, &err), "missing --job-name"));
    ck_assert_ptr_nonnull(strstr(role_error(&c, "ps", NULL, 0, &r, &err), "missing --task-index"));
    dt_cluster_deinit(&c);
}
END_TEST

START_TEST(test_cluster_ipv6_and_edges) {
    dt_cluster c;
    dt_err err;
    dt_err_clear(&err);
    const char *text = "{\"cluster\": {\"ps\": [\"[::1]:1681\", \"[FE80::1]:1\"], "
                       "\"worker\": [\"a-b.c_d:65535\", \"[::1]:1682\", \"127.0.0.1:1681\"]}}";
    ck_assert_int_eq(dt_cluster_parse(text, SRC, &c, &err), 0);
    ck_assert_int_eq(c.num_ps, 2);
    ck_assert_str_eq(c.ps[0].host, "::1");
    ck_assert_int_eq(c.ps[0].port, 1681);
    ck_assert_str_eq(c.ps[0].addr, "[::1]:1681");
    ck_assert_str_eq(c.ps[1].addr, "[FE80::1]:1");
    ck_assert_int_eq(c.ps[1].port, 1);
    ck_assert_int_eq(c.num_workers, 3);
    ck_assert_str_eq(c.workers[0].host, "a-b.c_d");
    ck_assert_int_eq(c.workers[0].port, 65535);
    /* Same port, different spelling of the host: not resolved, not a duplicate. */
    ck_assert_str_eq(c.workers[2].addr, "127.0.0.1:1681");
    dt_cluster_deinit(&c);
}
END_TEST

START_TEST(test_cluster_longest_host) {
    char host[300], text[600];
    memset(host, 'a', DT_HOST_MAX - 1);
    host[DT_HOST_MAX - 1] = '\0';
    snprintf(text, sizeof text, "{\"cluster\": {\"ps\": [\"%s:1\"], \"worker\": [\"b:2\"]}}", host);
    dt_cluster c;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_cluster_parse(text, SRC, &c, &err), 0);
    ck_assert_uint_eq(strlen(c.ps[0].host), DT_HOST_MAX - 1);
    ck_assert_uint_eq(strlen(c.ps[0].addr), DT_HOST_MAX - 1 + 2);
    dt_cluster_deinit(&c);

    host[DT_HOST_MAX - 1] = 'a';
    host[DT_HOST_MAX] = '\0';
    snprintf(text, sizeof text, "{\"cluster\": {\"ps\": [\"%s:1\"], \"worker\": [\"b:2\"]}}", host);
    ck_assert_int_eq(dt_cluster_parse(text, SRC, &c, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "t.json:1:21: \"ps\"[0] \"aaaa"));
    ck_assert_ptr_nonnull(strstr(err.msg, "...\": host longer than 255 bytes"));
}
END_TEST

START_TEST(test_cluster_tf_config_and_job) {
    dt_cluster c;
    dt_err err;
    dt_err_clear(&err);
    /* TF_CONFIG's shape: "task" is the command line's business. */
    const char *tf = "{\"cluster\": {\"worker\": [\"h:2\"], \"ps\": [\"h:1\"]},\n"
                     " \"task\": {\"type\": \"worker\", \"index\": 0}}";
    ck_assert_int_eq(dt_cluster_parse(tf, SRC, &c, &err), 0);
    ck_assert_int_eq(c.num_ps, 1);
    ck_assert_str_eq(c.ps[0].addr, "h:1");
    ck_assert_str_eq(c.workers[0].addr, "h:2");
    dt_cluster_deinit(&c);

    /* A combined file: the cluster parse leaves "job" to dt_job_parse. */
    const char *both = "{\"cluster\": {\"ps\": [\"h:1\"], \"worker\": [\"h:2\"]},\n"
                       " \"job\": {\"learning_rate\": 0.2, \"batch_size\": 20}}";
    ck_assert_int_eq(dt_cluster_parse(both, SRC, &c, &err), 0);
    ck_assert_int_eq(c.num_workers, 1);
    dt_cluster_deinit(&c);
    dt_job job;
    dt_job_defaults(&job);
    ck_assert_int_eq(dt_job_parse(both, SRC, &job, &err), 0);
    ck_assert_double_eq(job.optim.learning_rate, 0.2);
    ck_assert_int_eq(job.batch_size, 20);
    ck_assert_int_eq(job.epochs, 200);
    ck_assert_int_eq(err.code, DT_OK);
}
END_TEST

/* TF_CONFIG as Kubeflow's training operator writes it: a chief job, the
 * task, "environment"; the chief is training task 0, worker i task i + 1. */
START_TEST(test_cluster_tf_config_chief) {
    dt_cluster c;
    dt_err err;
    dt_err_clear(&err);
    const char *tf = "{\"cluster\": {\"chief\": [\"c:2222\"], \"worker\": [\"w0:2222\", "
                     "\"w1:2222\"], \"ps\": [\"p:2222\"], \"evaluator\": [\"e:2222\"]},\n"
                     " \"task\": {\"type\": \"worker\", \"index\": 1}, \"environment\": "
                     "\"cloud\", \"job\": {\"python_module\": \"x\"}, \"rpc_layer\": \"grpc\"}";
    ck_assert_msg(dt_cluster_parse(tf, "TF_CONFIG", &c, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.num_workers, 3);
    ck_assert_int_eq(c.has_chief, 1);
    ck_assert_str_eq(c.workers[0].addr, "c:2222");
    ck_assert_str_eq(c.workers[2].addr, "w1:2222");
    ck_assert_int_eq(c.num_evaluators, 1);
    ck_assert_int_eq(c.has_task, 1);
    ck_assert_int_eq(c.task_type, DT_TASK_WORKER);
    ck_assert_int_eq(c.task_index, 1);
    dt_role r;
    ck_assert_int_eq(dt_cluster_role(&c, DT_TASK_WORKER, 1, "x", &r, &err), 0);
    ck_assert_int_eq(r.type, DT_TASK_WORKER);
    ck_assert_int_eq(r.index, 2);
    ck_assert_int_eq(dt_cluster_role(&c, DT_TASK_CHIEF, 0, "x", &r, &err), 0);
    ck_assert_int_eq(r.type, DT_TASK_WORKER);
    ck_assert_int_eq(r.index, 0);
    ck_assert_int_eq(dt_cluster_role(&c, DT_TASK_EVALUATOR, 0, "x", &r, &err), 0);
    ck_assert_int_eq(r.type, DT_TASK_EVALUATOR);
    ck_assert_int_eq(dt_cluster_role(&c, DT_TASK_WORKER, 2, "--task-index", &r, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg,
                     "--task-index: worker task 2 out of range: the cluster has 2 worker tasks");
    dt_err_clear(&err);
    ck_assert_int_eq(dt_cluster_role(&c, DT_TASK_CHIEF, 1, "x", &r, &err), DT_EINVAL);
    dt_cluster_deinit(&c);

    /* "master" (TF1's chief), no worker list, no task. */
    const char *master = "{\"cluster\": {\"master\": [\"m:1\"], \"ps\": [\"p:1\"]}}";
    dt_err_clear(&err);
    ck_assert_msg(dt_cluster_parse(master, SRC, &c, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.num_workers, 1);
    ck_assert_int_eq(c.has_chief, 1);
    ck_assert_int_eq(c.has_task, 0);
    dt_task_type t;
    ck_assert_int_eq(dt_task_type_parse("master", &t), 0);
    ck_assert_int_eq(t, DT_TASK_CHIEF);
    ck_assert_int_eq(dt_task_type_parse("Master", &t), -1);
    dt_cluster_deinit(&c);

    /* Without a chief job worker 0 is the chief, and "chief" is no task. */
    const char *plain = "{\"cluster\": {\"worker\": [\"w:1\"], \"ps\": [\"p:1\"]}}";
    ck_assert_msg(dt_cluster_parse(plain, SRC, &c, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.has_chief, 0);
    ck_assert_int_eq(dt_cluster_role(&c, DT_TASK_WORKER, 0, "x", &r, &err), 0);
    ck_assert_int_eq(r.index, 0);
    ck_assert_int_eq(dt_cluster_role(&c, DT_TASK_CHIEF, 0, "TF_CONFIG", &r, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "TF_CONFIG: the cluster has no \"chief\" job (then worker 0 is the "
                              "chief: job worker, task 0)");
    dt_cluster_deinit(&c);
}
END_TEST

/* Every malformed TF_CONFIG names the field, at its line and column. */
START_TEST(test_cluster_tf_config_errors) {
    static const char *const cases[][2] = {
        {"{\"cluster\": {\"chief\": [\"c:1\"], \"master\": [\"m:1\"], \"ps\": [\"p:1\"]}}",
         "t.json:1:32: \"chief\" and \"master\" name the same job: give one (first at 1:14)"},
        {"{\"cluster\": {\"chief\": [\"c:1\", \"c:2\"], \"ps\": [\"p:1\"]}}",
         "t.json:1:23: \"chief\" lists 2 addresses; a cluster has one chief (the training task "
         "that saves)"},
        {"{\"cluster\": {\"chief\": [], \"ps\": [\"p:1\"]}}",
         "t.json:1:23: \"chief\" must list at least one \"host:port\" address"},
        {"{\"cluster\": {\"worker\": [\"w:1\"], \"ps\": [\"p:1\"], \"evaluator\": [\"e:1\", "
         "\"e:2\"]}}",
         "t.json:1:61: \"evaluator\" lists 2 addresses; a cluster has at most one evaluator"},
        {"{\"cluster\": {\"chief\": [\"h:1\"], \"worker\": [\"h:1\"], \"ps\": [\"p:1\"]}}",
         "t.json:1:43: \"worker\"[0] \"h:1\" is listed twice: also as \"chief\"[0] at 1:24"},
        {"{\"cluster\": {\"worker\": [\"w:1\"], \"ps\": [\"p:1\"]}, \"task\": [1]}",
         "t.json:1:57: \"task\" must be an object, {\"type\": \"worker\", \"index\": 0} (got a "
         "list)"},
        {"{\"cluster\": {\"worker\": [\"w:1\"], \"ps\": [\"p:1\"]}, \"task\": {\"type\": \"boss\", "
         "\"index\": 0}}",
         "t.json:1:66: \"task\".\"type\" \"boss\" is not a job: \"ps\", \"worker\", \"chief\", "
         "\"master\" or \"evaluator\""},
        {"{\"cluster\": {\"worker\": [\"w:1\"], \"ps\": [\"p:1\"]}, \"task\": {\"type\": \"ps\", "
         "\"index\": 1.5}}",
         "t.json:1:81: \"task\".\"index\" must be a whole number from 0 (got 1.5)"},
        {"{\"cluster\": {\"worker\": [\"w:1\"], \"ps\": [\"p:1\"]}, \"task\": {\"type\": \"ps\", "
         "\"index\": 1}}",
         "t.json:1:81: \"task\": ps task 1 out of range: the cluster has 1 ps task"},
        {"{\"cluster\": {\"worker\": [\"w:1\"], \"ps\": [\"p:1\"]}, \"task\": {\"type\": \"ps\"}}",
         "t.json:1:57: \"task\" has no \"index\" (want {\"type\": \"worker\", \"index\": 0})"},
        {"{\"cluster\": {\"worker\": [\"w:1\"], \"ps\": [\"p:1\"]}, \"task\": {\"type\": \"ps\", "
         "\"idx\": 0}}",
         "t.json:1:72: unknown field \"task\".\"idx\" (it holds \"type\" and \"index\")"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cluster_fails(cases[i][0], DT_EINVAL, cases[i][1]);
}
END_TEST

/* ---- cluster: syntax errors ---- */

START_TEST(test_cluster_bad_json) {
    /* line 3 "    \"ps\": [\"a:1\",]": ']' is column 18 */
    cluster_fails("{\n  \"cluster\": {\n    \"ps\": [\"a:1\",]\n  }\n}", DT_EINVAL,
                  "t.json:3:18: invalid JSON: trailing comma before ']'");
    cluster_fails("{\"cluster\": {\"ps\": [\"a:1\"] \"worker\": []}}", DT_EINVAL,
                  "t.json:1:28: invalid JSON: expected ',' or '}' after a member, found a string");
    cluster_fails("{\"cluster\": {\"ps\": [\"a:1", DT_EINVAL,
                  "t.json:1:21: invalid JSON: unterminated string");
    cluster_fails("{\"cluster\": {}", DT_EINVAL,
                  "t.json:1:15: invalid JSON: unexpected end of the input ('{' at 1:1 is not "
                  "closed)");
    cluster_fails("", DT_EINVAL, "t.json:1:1: invalid JSON: no JSON value (the input is empty)");
    cluster_fails(" \n\t ", DT_EINVAL,
                  "t.json:2:3: invalid JSON: no JSON value (the input is empty)");
    cluster_fails("{'cluster': 1}", DT_EINVAL, "t.json:1:2: invalid JSON: keys take double quotes");
    cluster_fails("{} x", DT_EINVAL,
                  "t.json:1:4: invalid JSON: unexpected 'x' after the JSON value");
    cluster_fails("{\"cluster\": tru}", DT_EINVAL,
                  "t.json:1:13: invalid JSON: expected a value, found 'tru'");
    cluster_fails("{\"cluster\" {}}", DT_EINVAL,
                  "t.json:1:12: invalid JSON: expected ':' after the key, found '{'");
    cluster_fails("{\"cluster\": {\"ps\": [1,,2]}}", DT_EINVAL,
                  "t.json:1:23: invalid JSON: expected a value, found ','");
    cluster_fails("{\"a\": \"\\q\"}", DT_EINVAL,
                  "t.json:1:8: invalid JSON: bad escape '\\q' in a string");
    cluster_fails("{\"a\": -x}", DT_EINVAL, "t.json:1:7: invalid JSON: bad number");
    cluster_fails("{\"a\": \"\\u12G4\"}", DT_EINVAL,
                  "t.json:1:8: invalid JSON: bad \\u escape: want 4 hex digits");
    cluster_fails("{\"a\": \"x\\uD83D\\u0041\"}", DT_EINVAL,
                  "t.json:1:9: invalid JSON: \\uD83D is half a surrogate pair");
    cluster_fails("{\"a\": \"\\u0000\"}", DT_EINVAL,
                  "t.json:1:8: invalid JSON: \\u0000 (NUL) cannot be in a string");
    cluster_fails("{\"a\": 1.}", DT_EINVAL, "t.json:1:7: invalid JSON: bad number");
    cluster_fails("{\"a\": 01}", DT_EINVAL,
                  "t.json:1:7: invalid JSON: bad number (a leading zero)");
    cluster_fails("{\"log_dir\": \"abc,\n \"seed\": 1}", DT_EINVAL,
                  "t.json:1:13: invalid JSON: string not closed before the end of the line");
    cluster_fails("{\"a\": \"x\ty\"}", DT_EINVAL,
                  "t.json:1:9: invalid JSON: raw control character 0x09 in a string (escape it)");
    cluster_fails("{\"a\":\f1}", DT_EINVAL,
                  "t.json:1:6: invalid JSON: expected a value, found byte 0x0c");
    cluster_fails("{\"a\": .5}", DT_EINVAL,
                  "t.json:1:7: invalid JSON: expected a value, found '.5'");
    cluster_fails("{\"a\": \"\\udc00\"}", DT_EINVAL,
                  "t.json:1:8: invalid JSON: \\udc00 is half a surrogate pair");
    cluster_fails("{\"a\": 1,\n}", DT_EINVAL,
                  "t.json:2:1: invalid JSON: trailing comma before '}'");
    /* Columns count characters, not bytes: "é" is one. */
    cluster_fails("{\"é\": 1 2}", DT_EINVAL,
                  "t.json:1:9: invalid JSON: expected ',' or '}' after a member, found '2'");
}
END_TEST

START_TEST(test_cluster_deep_nesting) {
    /* Deeper than cJSON allows: an error, not a crash. */
    enum { DEPTH = 1200 };
    char *text = malloc(2 * DEPTH + 1);
    ck_assert_ptr_nonnull(text);
    memset(text, '[', DEPTH);
    memset(text + DEPTH, ']', DEPTH);
    text[2 * DEPTH] = '\0';
    dt_cluster c;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_cluster_parse(text, SRC, &c, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "t.json:1:1001: invalid JSON: nested deeper than 1000 levels");
    free(text);
}
END_TEST

/* ---- cluster: content errors ---- */

START_TEST(test_cluster_bad_shape) {
    cluster_fails("[1]", DT_EINVAL,
                  "t.json:1:1: a cluster file holds an object, {\"cluster\": {\"ps\": [...], "
                  "\"worker\": [...]}} (got a list)");
    cluster_fails("{\n  \"job\": {}\n}", DT_EINVAL,
                  "t.json:1:1: missing \"cluster\" (want {\"cluster\": {\"ps\": [...], "
                  "\"worker\": [...]}})");
    cluster_fails("{\"ps\": [\"a:1\"], \"worker\": [\"a:2\"]}", DT_EINVAL,
                  "t.json:1:2: \"ps\" belongs under \"cluster\": {\"cluster\": {\"ps\": [...], "
                  "\"worker\": [...]}}");
    cluster_fails("{\"cluster\": {\"ps\": [\"a:1\"], \"worker\": [\"a:2\"]},\n \"tsak\": {}}",
                  DT_EINVAL,
                  "t.json:2:2: unknown field \"tsak\" (next to \"cluster\" a file may hold only "
                  "\"job\", \"task\", \"environment\" and \"rpc_layer\")");
    cluster_fails("{\"cluster\": [\"a:1\"]}", DT_EINVAL,
                  "t.json:1:13: \"cluster\" must be an object, {\"ps\": [...], \"worker\": [...]} "
                  "(got a list)");
    cluster_fails(
        "{\"cluster\": {\"ps\": [\"a:1\"], \"worker\": [\"a:2\"], \"evaluators\": [\"a:3\"]}}",
        DT_EINVAL,
        "t.json:1:48: unknown job \"evaluators\": the jobs are \"ps\", \"worker\", \"chief\" (or "
        "\"master\") and \"evaluator\"");
    cluster_fails("{\"cluster\": {\"Ps\": [\"a:1\"], \"worker\": [\"a:2\"]}}", DT_EINVAL,
                  "t.json:1:14: unknown job \"Ps\": the jobs are \"ps\", \"worker\", \"chief\" (or "
                  "\"master\") and \"evaluator\"");
    cluster_fails("{\"cluster\": {\"worker\": [\"a:1\"]}}", DT_EINVAL,
                  "t.json:1:13: \"cluster\" has no \"ps\" list");
    cluster_fails("{\"cluster\": {\"ps\": [\"a:1\"]}}", DT_EINVAL,
                  "t.json:1:13: \"cluster\" has no \"worker\" list (nor a \"chief\")");
    cluster_fails("{\"cluster\": {\"ps\": [], \"worker\": [\"a:1\"]}}", DT_EINVAL,
                  "t.json:1:20: \"ps\" must list at least one \"host:port\" address");
    cluster_fails("{\"cluster\": {\"ps\": \"a:1\", \"worker\": [\"a:2\"]}}", DT_EINVAL,
                  "t.json:1:20: \"ps\" must be a list of \"host:port\" strings (got \"a:1\")");
    cluster_fails("{\"cluster\": {\"ps\": [\"a:1\"], \"ps\": [\"a:2\"], \"worker\": [\"a:3\"]}}",
                  DT_EINVAL, "t.json:1:29: duplicate job \"ps\" (first at 1:14)");
    cluster_fails("{\"cluster\": {\"ps\": [\"a:1\"], \"worker\": [\"a:2\"]},\n\"cluster\": {}}",
                  DT_EINVAL, "t.json:2:1: duplicate field \"cluster\" (first at 1:2)");
    /* line 4 "    \"worker\": [\"localhost:1682\", 1683]": 1683 is column 34 */
    cluster_fails("{\n  \"cluster\": {\n    \"ps\": [\"localhost:1681\"],\n"
                  "    \"worker\": [\"localhost:1682\", 1683]\n  }\n}",
                  DT_EINVAL,
                  "t.json:4:34: \"worker\"[1] must be a \"host:port\" string (got 1683)");
    cluster_fails("{\"cluster\": {\"ps\": [null], \"worker\": [\"a:1\"]}}", DT_EINVAL,
                  "t.json:1:21: \"ps\"[0] must be a \"host:port\" string (got null)");
}
END_TEST

START_TEST(test_cluster_bad_address) {
    static const struct {
        const char *addr, *why;
    } cases[] = {
        {"", "\"\": empty address (want host:port)"},
        {":1683", "\":1683\": empty host (want host:port)"},
        {"localhost", "\"localhost\": missing port (want host:port)"},
        {"localhost:", "\"localhost:\": missing port after ':'"},
        {"localhost:0", "\"localhost:0\": port 0 is not in 1..65535"},
        {"localhost:65536", "\"localhost:65536\": port 65536 is not in 1..65535"},
        {"localhost:99999999999999999999",
         "\"localhost:99999999999999999999\": port 99999999999999999999 is not in 1..65535"},
        {"localhost:1683x", "\"localhost:1683x\": junk \"x\" after the port"},
        {"localhost:1683/x", "\"localhost:1683/x\": junk \"/x\" after the port"},
        {"localhost:-1", "\"localhost:-1\": port must be a number from 1 to 65535"},
        {"localhost:+1", "\"localhost:+1\": port must be a number from 1 to 65535"},
        {"local host:1683", "\"local host:1683\": contains a space or control character"},
        {" localhost:1683", "\" localhost:1683\": contains a space or control character"},
        {"localhost:1683 ", "\"localhost:1683 \": contains a space or control character"},
        {"localhost:\\t1683", "\"localhost:?1683\": contains a space or control character"},
        {"local/host:1683", "\"local/host:1683\": bad character '/' in the host"},
        {"::1:1683", "\"::1:1683\": IPv6 addresses take brackets, e.g. [::1]:1681"},
        {"[::1]", "\"[::1]\": missing port (want [ipv6]:port)"},
        {"[::1]1683", "\"[::1]1683\": expected ':' after ']'"},
        {"[]:1683", "\"[]:1683\": empty host"},
        {"[::1:1683", "\"[::1:1683\": '[' without ']' (want [ipv6]:port)"},
        {"[localhost]:1683", "\"[localhost]:1683\": bad character 'l' in an IPv6 address"},
        {"[1.2.3.4]:1683", "\"[1.2.3.4]:1683\": brackets are for IPv6 addresses only"},
        {"[::1]:", "\"[::1]:\": missing port after ':'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256], msg[256];
        /* line 4 "    \"worker\": [\"localhost:1682\", \"...": the bad one is column 34 */
        snprintf(text, sizeof text,
                 "{\n  \"cluster\": {\n    \"ps\": [\"localhost:1681\"],\n"
                 "    \"worker\": [\"localhost:1682\", \"%s\"]\n  }\n}",
                 cases[i].addr);
        snprintf(msg, sizeof msg, "t.json:4:34: \"worker\"[1] %s", cases[i].why);
        cluster_fails(text, DT_EINVAL, msg);
    }
}
END_TEST

START_TEST(test_cluster_duplicates) {
    /* line 3 "    \"ps\": [\"localhost:1681\"],": the address is column 12 */
    cluster_fails("{\n  \"cluster\": {\n    \"ps\": [\"localhost:1681\"],\n"
                  "    \"worker\": [\"LocalHost:1681\", \"localhost:1683\"]\n  }\n}",
                  DT_EINVAL,
                  "t.json:4:16: \"worker\"[0] \"LocalHost:1681\" is listed twice: also as "
                  "\"ps\"[0] at 3:12");
    cluster_fails("{\n  \"cluster\": {\n    \"ps\": [\"localhost:1681\"],\n"
                  "    \"worker\": [\"localhost:1682\", \"localhost:1682\"]\n  }\n}",
                  DT_EINVAL,
                  "t.json:4:34: \"worker\"[1] \"localhost:1682\" is listed twice: also as "
                  "\"worker\"[0] at 4:16");
    cluster_fails("{\"cluster\": {\"ps\": [\"[::1]:1\", \"[::1]:1\"], \"worker\": [\"a:2\"]}}",
                  DT_EINVAL,
                  "t.json:1:32: \"ps\"[1] \"[::1]:1\" is listed twice: also as \"ps\"[0] at "
                  "1:21");
    /* The worker list first, and an escaped key: positions follow the
     * member order, whatever the keys look like. */
    cluster_fails("{\"cluster\": {\"worker\": [\"a:1\"], \"p\\u0073\": [\"a:1\"]}}", DT_EINVAL,
                  "t.json:1:25: \"worker\"[0] \"a:1\" is listed twice: also as \"ps\"[0] at "
                  "1:45");
}
END_TEST

START_TEST(test_cluster_positions_skip_values) {
    /* Brackets inside strings and nested values before the one meant. */
    cluster_fails("{\"task\": {\"a\": [1, {\"b\": \"]}\"}]}, \"cluster\": {\"ps\": [], "
                  "\"worker\": [\"a:1\"]}}",
                  DT_EINVAL, "t.json:1:53: \"ps\" must list at least one \"host:port\" address");
    /* A byte order mark is not a column. */
    cluster_fails("\xEF\xBB\xBF{\"cluster\": 1}", DT_EINVAL,
                  "t.json:1:13: \"cluster\" must be an object, {\"ps\": [...], \"worker\": [...]} "
                  "(got 1)");
    /* CRLF line ends. */
    cluster_fails("{\r\n\"cluster\": {\r\n\"ps\": [],\r\n\"worker\": [\"a:1\"]}}", DT_EINVAL,
                  "t.json:3:7: \"ps\" must list at least one \"host:port\" address");
}
END_TEST

/* ---- cluster: files ---- */

START_TEST(test_cluster_load_files) {
    dt_cluster c;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_cluster_load("conf/cluster.json", &c, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.num_ps, 1);
    ck_assert_str_eq(c.ps[0].addr, "localhost:1681");
    ck_assert_int_eq(c.num_workers, 2);
    ck_assert_str_eq(c.workers[0].addr, "localhost:1682");
    ck_assert_str_eq(c.workers[1].addr, "localhost:1683");
    dt_cluster_deinit(&c);

    char path[PATH_MAX], msg[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/nope.json", tmp_dir);
    ck_assert_int_eq(dt_cluster_load(path, &c, &err), DT_ENOTFOUND);
    snprintf(msg, sizeof msg, "%s: cannot open: No such file or directory", path);
    ck_assert_str_eq(err.msg, msg);
    ck_assert_ptr_null(c.ps);

    /* Messages name the file. */
    const char bad[] = "{\n  \"cluster\": {\"ps\": [\"a:1\"], \"worker\": [\"a:1\"]}\n}\n";
    write_file("dup.json", bad, sizeof bad - 1, path, sizeof path);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_cluster_load(path, &c, &err), DT_EINVAL);
    snprintf(msg, sizeof msg,
             "%s:2:41: \"worker\"[0] \"a:1\" is listed twice: also as \"ps\"[0] at 2:22", path);
    ck_assert_str_eq(err.msg, msg);

    /* A NUL byte would hide the rest of the file from a string parser. */
    const char nul[] = "{\"cluster\":\n {\0}}";
    write_file("nul.json", nul, sizeof nul - 1, path, sizeof path);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_cluster_load(path, &c, &err), DT_EINVAL);
    snprintf(msg, sizeof msg, "%s:2:3: a NUL byte: not a text file", path);
    ck_assert_str_eq(err.msg, msg);

    /* A directory opens but does not read. */
    dt_err_clear(&err);
    ck_assert_int_eq(dt_cluster_load(tmp_dir, &c, &err), DT_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, ": read: "));
}
END_TEST

/* ---- job: defaults and good files ---- */

START_TEST(test_job_defaults) {
    dt_job job;
    memset(&job, 0x5a, sizeof job);
    dt_job_defaults(&job);
    ck_assert_int_eq(job.model.kind, DT_MODEL_LINEAR);
    ck_assert_int_eq(job.model.num_features, 0); /* not set: the data's */
    ck_assert_int_eq(job.model.num_classes, 0);
    ck_assert_int_eq(job.data.source, DT_DATA_LINE);
    ck_assert_int_eq(job.data.num_examples, 100);
    ck_assert_double_eq(job.data.noise, 0.3);
    ck_assert_uint_eq(job.seed, 1);
    ck_assert_int_eq(job.optim.kind, DT_OPTIM_SGD);
    ck_assert_double_eq(job.optim.learning_rate, 0.05);
    ck_assert_int_eq(job.batch_size, 10);
    ck_assert_int_eq(job.max_steps, 0);
    ck_assert_int_eq(job.epochs, 200);
    ck_assert_str_eq(job.log_dir, "logs/linear");
    ck_assert_int_eq(job.save_model_secs, 5);
    ck_assert_int_eq(job.max_to_keep, 5);
    ck_assert_int_eq(job.summary_steps, 0);
    ck_assert_int_eq(job.summary_secs, 10);
    ck_assert_int_eq(job.log_steps, 100);
    ck_assert_int_eq(job.ready_wait_secs, 120);
    ck_assert_int_eq(job.rpc_timeout_secs, 10);
    ck_assert_int_eq(job.ps_linger_secs, 10);

    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_job_finish(&job, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(job.max_steps, 2000); /* 200 epochs of 100 / 10 */
    /* The line has one feature; a linear model, two classes it never uses. */
    ck_assert_int_eq(job.model.num_features, 1);
    ck_assert_int_eq(job.model.num_classes, 2);
    ck_assert(!dt_job_shape_unset(&job));
}
END_TEST

/* "epochs" left out on file data follows the rows: about 150,000 examples'
 * worth (a dense mlp's 40,000, at least 3 passes), at most 200 passes; given, or with max_steps, or
 * for synthetic data, it is left as it is. */
START_TEST(test_job_epochs_from_rows) {
    dt_job job;
    dt_err err;
    dt_err_clear(&err);
    dt_job_defaults(&job);
    ck_assert_int_eq(dt_job_set(&job, "train_data=t.csv", &err), 0);
    ck_assert_int_eq(dt_job_set(&job, "data=csv", &err), 0);
    const int64_t rows[] = {1, 300, 750, 751, 3000, 60000, 2000000};
    const int want[] = {200, 200, 200, 200, 50, 3, 1};
    for (int i = 0; i < 7; i++) {
        dt_job j = job;
        dt_job_choose_epochs(&j, rows[i]);
        ck_assert_msg(j.epochs == want[i] && j.epochs_chosen, "%lld rows: %d epochs, want %d",
                      (long long)rows[i], j.epochs, want[i]);
    }
    /* A dense mlp aims at 40,000 examples, at least 3 passes. */
    const int64_t mlp_rows[] = {300, 2000, 60000};
    const int mlp_want[] = {134, 20, 3};
    for (int i = 0; i < 3; i++) {
        dt_job m = job;
        ck_assert_int_eq(dt_job_set(&m, "model=mlp", &err), 0);
        dt_job_choose_epochs(&m, mlp_rows[i]);
        ck_assert_msg(m.epochs == mlp_want[i], "mlp, %lld rows: %d epochs, want %d",
                      (long long)mlp_rows[i], m.epochs, mlp_want[i]);
    }
    dt_job j = job;
    ck_assert_int_eq(dt_job_set(&j, "epochs=7", &err), 0);
    dt_job_choose_epochs(&j, 3000);
    ck_assert(j.epochs == 7 && !j.epochs_chosen);
    j = job;
    j.max_steps = 10;
    dt_job_choose_epochs(&j, 3000);
    ck_assert(j.epochs == 200 && !j.epochs_chosen);
    dt_job_defaults(&j); /* the line: generated, not read */
    dt_job_choose_epochs(&j, 3000);
    ck_assert(j.epochs == 200 && !j.epochs_chosen);
}
END_TEST

/* A learning_rate left out is the optimizer's own: Adam's 0.001, 0.05
 * for the others; one given is kept. */
START_TEST(test_job_rate_of_optimizer) {
    const char *sets[][2] = {{"optimizer=adam", NULL},
                             {"optimizer=adam", "learning_rate=0.01"},
                             {"optimizer=sgd", NULL},
                             {"optimizer=adagrad", NULL}};
    const double want[] = {0.001, 0.01, 0.05, 0.05};
    for (int i = 0; i < 4; i++) {
        dt_job job;
        dt_err err;
        dt_err_clear(&err);
        dt_job_defaults(&job);
        for (int k = 0; k < 2 && sets[i][k]; k++)
            ck_assert_msg(dt_job_set(&job, sets[i][k], &err) == 0, "%s", err.msg);
        ck_assert_msg(dt_job_finish(&job, &err) == 0, "%s", err.msg);
        ck_assert_msg(job.optim.learning_rate == want[i], "%s %s: rate %g, want %g", sets[i][0],
                      sets[i][1] ? sets[i][1] : "", job.optim.learning_rate, want[i]);
    }
}
END_TEST

/* "patience" counts evaluations: without eval_data or a timer of them it
 * could never act, and is refused naming both fields. */
/* Sets fields (NULL ends the list) on a default job and finishes it. */
static int job_with(dt_job *job, const char *const *sets, dt_err *err) {
    dt_err_clear(err);
    dt_job_defaults(job);
    int rc = 0;
    for (int k = 0; sets[k] && rc == 0; k++)
        rc = dt_job_set(job, sets[k], err);
    return rc ? rc : dt_job_finish(job, err);
}

START_TEST(test_job_patience_needs_evals) {
    struct {
        const char *sets[6];
        int code;
        const char *want;
    } bad[] = {
        {{"patience=3"}, DT_EINVAL, "\"patience\" 3 counts evaluations"},
        /* A file and patience hold a tenth out; eval_steps is still needed. */
        {{"patience=3", "data=csv", "train_data=a.csv"}, DT_EINVAL, "got a split and 0"},
        {{"patience=3", "eval_steps=100"}, DT_EINVAL, "got none and 100"},
        {{"patience=-1"}, DT_EINVAL, "\"patience\" must be an integer >= 0"},
        {{"patience=3", "data=csv", "train_data=a.csv", "validation_fraction=0", "eval_steps=10"},
         DT_EINVAL,
         "\"eval_data\" (or \"validation_fraction\" > 0) and \"eval_steps\" > 0 (got none and "
         "10)"},
        {{"validation_fraction=0.2"}, DT_EINVAL, "holds out rows of a file"},
        {{"data=csv", "train_data=a.csv", "eval_data=b.csv", "validation_fraction=0.2"},
         DT_EINVAL,
         "both name a held-out set"},
        {{"validation_fraction=1"}, DT_EINVAL, "\"validation_fraction\""},
        {{"data=libsvm", "train_data=a.svm", "hash_bits=10", "validation_fraction=0.2"},
         DT_ECONFIG,
         "a sparse model's held-out set is a file of its own"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dt_job job;
        dt_err err;
        int rc = job_with(&job, bad[i].sets, &err);
        ck_assert_msg(rc == bad[i].code && strstr(err.msg, bad[i].want), "case %zu: %d %s", i, rc,
                      err.msg);
    }
    dt_job job;
    dt_err err;
    const char *with_file[] = {"data=csv",      "train_data=a.csv", "eval_data=b.csv",
                               "eval_steps=50", "patience=3",       NULL};
    ck_assert_msg(job_with(&job, with_file, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(job.patience, 3);
    ck_assert(!dt_data_splits(&job.data));
    const char *split[] = {"data=csv", "train_data=a.csv", "eval_steps=50", "patience=3", NULL};
    ck_assert_msg(job_with(&job, split, &err) == 0, "%s", err.msg);
    ck_assert(dt_data_splits(&job.data));
    ck_assert_double_eq(job.data.validation_fraction, DT_JOB_VALIDATION_FRACTION);
    const char *named[] = {"data=csv", "train_data=a.csv", "validation_fraction=0.3", NULL};
    ck_assert_msg(job_with(&job, named, &err) == 0, "%s", err.msg);
    ck_assert_double_eq(job.data.validation_fraction, 0.3); /* no patience: a split still */
    ck_assert(dt_data_splits(&job.data));
    /* A libsvm model that turns sparse only once its features are read
     * (after dt_job_finish) is refused when its rows are opened, before
     * its file is: there is none here. */
    const char *late[] = {"data=libsvm", "train_data=no-such.svm", "validation_fraction=0.2", NULL};
    ck_assert_msg(job_with(&job, late, &err) == 0, "%s", err.msg);
    job.model.num_features = DT_SPARSE_AUTO_FEATURES + 1;
    ck_assert(dt_job_is_sparse(&job));
    dt_sparse_set set;
    memset(&set, 0, sizeof set);
    int rc = dt_job_open_sparse(&job, 0, 0, 1, &set, &err);
    ck_assert_msg(rc == DT_ECONFIG && strstr(err.msg, "a sparse model's held-out set is a file"),
                  "%d %s", rc, err.msg);
}
END_TEST

START_TEST(test_job_conf_linear) {
    /* conf/linear.json spells out every field with the default value: load
     * it over a job of junk and every field must come out as the default. */
    dt_job job, want;
    dt_err err;
    dt_err_clear(&err);
    memset(&job, 0x5a, sizeof job);
    ck_assert_msg(dt_job_load("conf/linear.json", &job, &err) == 0, "%s", err.msg);
    dt_job_defaults(&want);
    ck_assert_int_eq(job.schedule.kind, want.schedule.kind); /* "auto", both */
    ck_assert_int_eq(job.model.kind, want.model.kind);
    /* Not set by default; the line's and the linear model's values. */
    ck_assert_int_eq(job.model.num_features, 1);
    ck_assert_int_eq(job.model.num_classes, 2);
    ck_assert_int_eq(job.model.num_hidden, want.model.num_hidden);
    ck_assert_int_eq(job.model.hidden[0], want.model.hidden[0]);
    ck_assert_double_eq(job.model.l2, want.model.l2);
    ck_assert_double_eq(job.model.dropout, want.model.dropout);
    ck_assert_str_eq(job.data.train_data, want.data.train_data);
    ck_assert_str_eq(job.data.eval_labels, want.data.eval_labels);
    ck_assert_str_eq(job.data.label_column, want.data.label_column);
    ck_assert_int_eq(job.data.scale, want.data.scale);
    ck_assert_double_eq(job.data.scale_divisor, want.data.scale_divisor);
    ck_assert_int_eq(job.data.skip_bad_rows, want.data.skip_bad_rows);
    ck_assert_int_eq(job.eval_steps, want.eval_steps);
    ck_assert_int_eq(job.data.source, want.data.source);
    ck_assert_int_eq(job.data.num_examples, want.data.num_examples);
    ck_assert_double_eq(job.data.noise, want.data.noise);
    ck_assert_uint_eq(job.seed, want.seed);
    ck_assert_int_eq(job.optim.kind, want.optim.kind);
    ck_assert_double_eq(job.optim.learning_rate, want.optim.learning_rate);
    /* The optimizer's own defaults, as lib/optim.h documents them. */
    ck_assert_double_eq(job.optim.momentum, 0.9);
    ck_assert_int_eq(job.optim.nesterov, 0);
    ck_assert_double_eq(job.optim.beta1, 0.9);
    ck_assert_double_eq(job.optim.beta2, 0.999);
    ck_assert_double_eq(job.optim.epsilon, 1e-7);
    ck_assert_double_eq(job.optim.initial_accumulator, 0.1);
    ck_assert_double_eq(job.optim.ftrl_l1, 0);
    ck_assert_double_eq(job.optim.ftrl_l2, 0);
    ck_assert_double_eq(job.optim.ftrl_beta, 0);
    ck_assert_int_eq(job.sparse, want.sparse);
    ck_assert_int_eq(job.hash_bits, want.hash_bits);
    ck_assert_int_eq(job.embedding_dim, want.embedding_dim);
    ck_assert_int_eq(job.embedding_combiner, want.embedding_combiner);
    ck_assert_int_eq(job.eviction.idle_steps, 0);
    ck_assert_int_eq(job.eviction.min_touches, 0);
    ck_assert_int_eq(job.eviction.touch_window_steps, 0);
    ck_assert_int_eq(job.batch_size, want.batch_size);
    ck_assert_int_eq(job.max_steps, want.max_steps);
    ck_assert_int_eq(job.epochs, want.epochs);
    ck_assert_str_eq(job.log_dir, want.log_dir);
    ck_assert_int_eq(job.save_model_secs, want.save_model_secs);
    ck_assert_int_eq(job.max_to_keep, want.max_to_keep);
    ck_assert_int_eq(job.summary_steps, want.summary_steps);
    ck_assert_int_eq(job.summary_secs, want.summary_secs);
    ck_assert_int_eq(job.log_steps, want.log_steps);
    ck_assert_int_eq(job.ready_wait_secs, want.ready_wait_secs);
    ck_assert_int_eq(job.rpc_timeout_secs, want.rpc_timeout_secs);
    ck_assert_int_eq(job.pull_copy_threads, want.pull_copy_threads);
    ck_assert_int_eq(job.ps_linger_secs, want.ps_linger_secs);

    /* The demo cluster file has no job section: nothing changes. */
    dt_job before = job;
    ck_assert_msg(dt_job_load("conf/cluster.json", &job, &err) == 0, "%s", err.msg);
    ck_assert(memcmp(&job, &before, sizeof job) == 0);
    ck_assert_msg(dt_job_finish(&job, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(job.max_steps, 2000);
}
END_TEST

START_TEST(test_job_parse_fields) {
    dt_job job;
    dt_err err;
    dt_err_clear(&err);
    dt_job_defaults(&job);
    const char *text =
        "{\"learning_rate\": 0.1, \"optimizer\": \"adam\", \"nesterov\": true,\n"
        " \"seed\": 9007199254740992, \"examples\": 1000, \"log_dir\": \"runs/a b\",\n"
        " \"batch_size\": 1e1, \"epochs\": 3.0, \"data\": \"wide\", \"features\": 8,\n"
        " \"beta1\": 0, \"epsilon\": 1e-8, \"max_steps\": 123}";
    ck_assert_msg(dt_job_parse(text, SRC, &job, &err) == 0, "%s", err.msg);
    ck_assert_double_eq(job.optim.learning_rate, 0.1);
    ck_assert_int_eq(job.optim.kind, DT_OPTIM_ADAM);
    ck_assert_int_eq(job.optim.nesterov, 1);
    ck_assert_uint_eq(job.seed, UINT64_C(9007199254740992));
    ck_assert_int_eq(job.data.num_examples, 1000);
    ck_assert_str_eq(job.log_dir, "runs/a b");
    ck_assert_int_eq(job.batch_size, 10);
    ck_assert_int_eq(job.epochs, 3);
    ck_assert_int_eq(job.data.source, DT_DATA_WIDE);
    ck_assert_int_eq(job.model.num_features, 8);
    ck_assert_double_eq(job.optim.beta1, 0);
    ck_assert_double_eq(job.optim.epsilon, 1e-8);
    ck_assert_int_eq(job.max_steps, 123);
    /* Untouched fields keep their values. */
    ck_assert_double_eq(job.data.noise, 0.3);
    ck_assert_int_eq(job.rpc_timeout_secs, 10);

    /* Later files apply on top; an empty object changes nothing. */
    dt_job before = job;
    ck_assert_int_eq(dt_job_parse("{}", SRC, &job, &err), 0);
    ck_assert(memcmp(&job, &before, sizeof job) == 0);
    ck_assert_int_eq(dt_job_parse("{\"cluster\": {}, \"task\": 1}", SRC, &job, &err), 0);
    ck_assert(memcmp(&job, &before, sizeof job) == 0);
    ck_assert_int_eq(dt_job_parse("{\"job\": {\"noise\": 0}}", SRC, &job, &err), 0);
    ck_assert_double_eq(job.data.noise, 0);

    /* The longest log_dir that fits. */
    char *big = malloc(DT_PATH_MAX + 32);
    ck_assert_ptr_nonnull(big);
    int n = snprintf(big, DT_PATH_MAX + 32, "{\"log_dir\": \"");
    memset(big + n, 'd', DT_PATH_MAX - 1);
    snprintf(big + n + DT_PATH_MAX - 1, 32, "\"}");
    ck_assert_msg(dt_job_parse(big, SRC, &job, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(strlen(job.log_dir), DT_PATH_MAX - 1);
    /* One more byte does not. */
    n = snprintf(big, DT_PATH_MAX + 32, "{\"log_dir\": \"");
    memset(big + n, 'd', DT_PATH_MAX);
    snprintf(big + n + DT_PATH_MAX, 32, "\"}");
    ck_assert_int_eq(dt_job_parse(big, SRC, &job, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "t.json:1:13: \"log_dir\" must be a non-empty string "
                                          "shorter than 1024 bytes (got \"dddd"));
    free(big);
}
END_TEST

/* A job written as JSON reads back equal, field by field; dt_job_diff
 * names what differs with both values, and only within the fields asked. */
START_TEST(test_job_to_json_and_diff) {
    dt_job job, back;
    dt_err err;
    dt_err_clear(&err);
    dt_job_defaults(&job);
    const char *text = "{\"model\": \"mlp\", \"hidden\": [64, 32], \"classes\": 10,\n"
                       " \"features\": 784, \"optimizer\": \"adam\", \"learning_rate\": 0.001,\n"
                       " \"lr_schedule\": \"piecewise\", \"boundaries\": [100],\n"
                       " \"lr_values\": [0.1, 0.01], \"seed\": 9007199254740992,\n"
                       " \"log_dir\": \"runs/\\\"q\\\" b\", \"nesterov\": true, \"max_steps\": 5}";
    ck_assert_msg(dt_job_parse(text, SRC, &job, &err) == 0, "%s", err.msg);
    char *json = NULL;
    ck_assert_msg(dt_job_to_json(&job, &json, &err) == 0, "%s", err.msg);
    dt_job_defaults(&back);
    back.batch_size = 999; /* every field is written, so the defaults do not matter */
    ck_assert_msg(dt_job_parse(json, "ckpt", &back, &err) == 0, "%s: %s", err.msg, json);
    char diff[512];
    ck_assert_msg(dt_job_diff(&job, &back, NULL, diff, sizeof diff) == 0, "%s", diff);
    ck_assert_int_eq(back.batch_size, job.batch_size);
    ck_assert_str_eq(back.log_dir, "runs/\"q\" b");
    ck_assert_int_eq(back.model.num_hidden, 2);
    ck_assert_int_eq(back.model.hidden[1], 32);
    free(json);

    back.optim.learning_rate = 0.05;
    back.model.hidden[1] = 16;
    back.optim.kind = DT_OPTIM_SGD;
    ck_assert_int_eq(dt_job_diff(&job, &back, NULL, diff, sizeof diff), 3);
    ck_assert_str_eq(diff, "\"hidden\" [64, 32] -> [64, 16], \"optimizer\" \"adam\" -> \"sgd\", "
                           "\"learning_rate\" 0.001 -> 0.05");
    ck_assert_int_eq(dt_job_diff(&job, &back, dt_job_model_fields, diff, sizeof diff), 1);
    ck_assert_str_eq(diff, "\"hidden\" [64, 32] -> [64, 16]");
    ck_assert_int_eq(dt_job_diff(&job, &back, dt_job_input_fields, diff, sizeof diff), 0);
    ck_assert_str_eq(diff, "");
    /* A buffer too small is cut, never overrun; the count stays right. */
    char tiny[8];
    ck_assert_int_eq(dt_job_diff(&job, &back, NULL, tiny, sizeof tiny), 3);
    ck_assert_uint_eq(strlen(tiny), sizeof tiny - 1);
}
END_TEST

/* ---- job: bad files ---- */

START_TEST(test_job_wrong_type) {
    /* line 3 "  \"learning_rate\": \"fast\"": the value is column 20 */
    job_fails("{\n  \"optimizer\": \"sgd\",\n  \"learning_rate\": \"fast\"\n}",
              "t.json:3:20: \"learning_rate\" must be a positive number (got \"fast\")");
    /* Inside "job" of a combined file. */
    job_fails("{\"cluster\": {}, \"job\": {\n  \"seed\": \"x\"}}",
              "t.json:2:11: \"seed\" must be an integer >= 0 (got \"x\")");
    job_fails("{\"cluster\": {}, \"job\": [1]}",
              "t.json:1:24: \"job\" must be an object of job fields (got a list)");
    job_fails("{\"job\": {}, \"learning_rate\": 0.1}",
              "t.json:1:13: unknown field \"learning_rate\" (next to \"cluster\" a file may hold "
              "only \"job\", \"task\", \"environment\" and \"rpc_layer\")");
    job_fails("\"linear\"",
              "t.json:1:1: a job file holds an object of fields, {\"learning_rate\": 0.05, ...} "
              "(got \"linear\")");
    job_fails("{\"seed\": 1,\n \"seed\": 2}",
              "t.json:2:2: duplicate field \"seed\" (first at 1:2)");
    /* A multibyte character before the bad value, and brackets in a string. */
    job_fails("{\"log_dir\": \"h\xC3\xA9llo\", \"seed\": -1}",
              "t.json:1:30: \"seed\" must be an integer >= 0 (got -1)");
    job_fails("{\"log_dir\": \"a}]{[\\\"b\", \"seed\": -1}",
              "t.json:1:33: \"seed\" must be an integer >= 0 (got -1)");
    job_fails("{\"learning_rate\": 0.1,", "t.json:1:23: invalid JSON: unexpected end of the input "
                                          "('{' at 1:1 is not closed)");
}
END_TEST

START_TEST(test_job_bad_values) {
    static const struct {
        const char *field, *value, *why;
    } cases[] = {
        {"learning_rate", "0", "must be a positive number (got 0)"},
        {"learning_rate", "-1", "must be a positive number (got -1)"},
        {"learning_rate", "null", "must be a positive number (got null)"},
        {"learning_rate", "1e999",
         "must be a positive number (got a number too large for a "
         "double)"},
        {"momentum", "1", "must be a number in [0, 1) (got 1)"},
        {"momentum", "-0.1", "must be a number in [0, 1) (got -0.1)"},
        {"beta1", "1.5", "must be a number in [0, 1) (got 1.5)"},
        {"beta2", "true", "must be a number in [0, 1) (got true)"},
        {"epsilon", "0", "must be a positive number (got 0)"},
        {"initial_accumulator", "-0.1", "must be a number >= 0 (got -0.1)"},
        {"l1_regularization_strength", "-1", "must be a number >= 0 (got -1)"},
        {"l2_regularization_strength", "\"0.1\"", "must be a number >= 0 (got \"0.1\")"},
        {"ftrl_beta", "-0.5", "must be a number >= 0 (got -0.5)"},
        {"noise", "-0.25", "must be a number >= 0 (got -0.25)"},
        {"features", "0", "must be an integer >= 1 (got 0)"},
        {"features", "2.5", "must be an integer >= 1 (got 2.5)"},
        {"features", "1099511627777",
         "must be an integer from 1 to 1099511627776 (got 1099511627777)"},
        {"examples", "1e20", "must be an integer from 1 to 9007199254740992 (got 1e+20)"},
        {"examples", "0", "must be an integer >= 1 (got 0)"},
        {"seed", "-1", "must be an integer >= 0 (got -1)"},
        {"seed", "1.5", "must be an integer >= 0 (got 1.5)"},
        {"seed", "9007199254740994",
         "must be an integer from 0 to 9007199254740992 (got "
         "9007199254740994)"},
        {"batch_size", "\"10\"", "must be an integer >= 1 (got \"10\")"},
        {"batch_size", "0", "must be an integer >= 1 (got 0)"},
        {"max_steps", "-1", "must be an integer >= 0 (got -1)"},
        {"epochs", "true", "must be an integer >= 0 (got true)"},
        {"epochs", "-2", "must be an integer >= 0 (got -2)"},
        {"nesterov", "\"yes\"", "must be true or false (got \"yes\")"},
        {"nesterov", "1", "must be true or false (got 1)"},
        {"optimizer", "\"rmsprop\"",
         "must be \"sgd\", \"momentum\", \"adagrad\", \"adam\" or \"ftrl\" (got \"rmsprop\")"},
        {"optimizer", "\"SGD\"",
         "must be \"sgd\", \"momentum\", \"adagrad\", \"adam\" or \"ftrl\" (got "
         "\"SGD\")"},
        {"model", "\"cnn\"",
         "must be \"linear\", \"logistic\", \"softmax\" or \"mlp\" (got \"cnn\")"},
        {"data", "\"tall\"",
         "must be \"line\", \"wide\", \"csv\", \"libsvm\", \"idx\" or \"criteo\" (got \"tall\")"},
        {"data", "1",
         "must be \"line\", \"wide\", \"csv\", \"libsvm\", \"idx\" or \"criteo\" (got 1)"},
        {"log_dir", "\"\"", "must be a non-empty string shorter than 1024 bytes (got \"\")"},
        {"log_dir", "[\"a\"]", "must be a non-empty string shorter than 1024 bytes (got a list)"},
        {"save_model_secs", "0", "must be an integer >= 1 (got 0)"},
        {"max_to_keep", "0", "must be an integer >= 1 (got 0)"},
        {"hidden", "[]", "must be a list of 1 to 8 integers from 1 to 1048576 (got a list)"},
        {"hidden", "[256, 0]", "must be a list of 1 to 8 integers from 1 to 1048576 (got a list)"},
        {"hidden", "[1.5]", "must be a list of 1 to 8 integers from 1 to 1048576 (got a list)"},
        {"hidden", "128", "must be a list of 1 to 8 integers from 1 to 1048576 (got 128)"},
        {"classes", "1", "must be an integer >= 2 (got 1)"},
        {"l2", "-0.1", "must be a number >= 0 (got -0.1)"},
        {"scale", "\"max\"",
         "must be \"none\", \"standardize\", \"divide\" or \"auto\" (got \"max\")"},
        {"scale_divisor", "0", "must be a positive number (got 0)"},
        {"train_data", "7", "must be a string shorter than 1024 bytes (\"\" for none) (got 7)"},
        {"skip_bad_rows", "\"no\"", "must be true or false (got \"no\")"},
        {"summary_steps", "-1", "must be an integer >= 0 (got -1)"},
        {"summary_secs", "0", "must be an integer >= 1 (got 0)"},
        {"log_steps", "-5", "must be an integer >= 1 (got -5)"},
        {"ready_wait_secs", "0", "must be an integer >= 1 (got 0)"},
        {"rpc_timeout_secs", "{}", "must be an integer >= 1 (got an object)"},
        {"ps_linger_secs", "0", "must be an integer >= 1 (got 0)"},
        {"ps_linger_secs", "86401", "must be an integer from 1 to 86400 (got 86401)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256], msg[400];
        /* {"<field>": <value>}: the value is column strlen(field) + 6 */
        snprintf(text, sizeof text, "{\"%s\": %s}", cases[i].field, cases[i].value);
        snprintf(msg, sizeof msg, "t.json:1:%zu: \"%s\" %s", strlen(cases[i].field) + 6,
                 cases[i].field, cases[i].why);
        job_fails(text, msg);
    }
}
END_TEST

START_TEST(test_job_unknown_field) {
    job_fails("{\n  \"learnig_rate\": 0.1\n}",
              "t.json:2:3: unknown field \"learnig_rate\" (did you mean \"learning_rate\"?)");
    job_fails("{\"Batch_Size\": 1}",
              "t.json:1:2: unknown field \"Batch_Size\" (did you mean \"batch_size\"?)");
    job_fails("{\"epoch\": 1}", "t.json:1:2: unknown field \"epoch\" (did you mean \"epochs\"?)");
    job_fails("{\"lr\": 0.1}",
              "t.json:1:2: unknown field \"lr\" (did you mean \"learning_rate\"?)");
    job_fails_prefix("{\"seed\": 2, \"colour\": \"red\"}",
                     "t.json:1:13: unknown field \"colour\"; the fields are model, features, "
                     "classes, hidden, l2, dropout, data, examples, noise, seed, train_data,");
    /* Keys are shown printable and short. */
    dt_job job;
    dt_err err;
    dt_err_clear(&err);
    dt_job_defaults(&job);
    ck_assert_int_eq(dt_job_parse("{\"a\\nb\": 1}", SRC, &job, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "t.json:1:2: unknown field \"a?b\"; the fields are"));
    dt_err_clear(&err);
    ck_assert_int_eq(
        dt_job_parse("{\"0123456789012345678901234567890123456789xyz\": 1}", SRC, &job, &err),
        DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(
        err.msg, "unknown field \"0123456789012345678901234567890123456789...\"; the fields"));
    /* No comments in JSON: a "_comment" field is just unknown. */
    job_fails_prefix("{\"_comment\": \"demo\"}",
                     "t.json:1:2: unknown field \"_comment\"; the fields are model, features, "
                     "classes, hidden, l2, dropout, data,");
}
END_TEST

START_TEST(test_job_load_errors) {
    dt_job job;
    dt_err err;
    char path[PATH_MAX], msg[PATH_MAX + 128];
    dt_err_clear(&err);
    dt_job_defaults(&job);
    snprintf(path, sizeof path, "%s/missing.json", tmp_dir);
    ck_assert_int_eq(dt_job_load(path, &job, &err), DT_ENOTFOUND);
    snprintf(msg, sizeof msg, "%s: cannot open: No such file or directory", path);
    ck_assert_str_eq(err.msg, msg);

    const char text[] = "{\n  \"batch_size\": 32,\n  \"learning_rate\": \"fast\"\n}\n";
    write_file("job.json", text, sizeof text - 1, path, sizeof path);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_job_load(path, &job, &err), DT_EINVAL);
    snprintf(msg, sizeof msg, "%s:3:20: \"learning_rate\" must be a positive number (got \"fast\")",
             path);
    ck_assert_str_eq(err.msg, msg);
    ck_assert_int_eq(job.batch_size, 10); /* all or nothing */
}
END_TEST

/* ---- job: --set ---- */

START_TEST(test_job_set) {
    dt_job job;
    dt_err err;
    dt_err_clear(&err);
    dt_job_defaults(&job);
    ck_assert_int_eq(dt_job_set(&job, "learning_rate=0.1", &err), 0);
    ck_assert_double_eq(job.optim.learning_rate, 0.1);
    ck_assert_int_eq(dt_job_set(&job, "optimizer=adam", &err), 0);
    ck_assert_int_eq(job.optim.kind, DT_OPTIM_ADAM);
    ck_assert_int_eq(dt_job_set(&job, "optimizer=\"momentum\"", &err), 0);
    ck_assert_int_eq(job.optim.kind, DT_OPTIM_MOMENTUM);
    ck_assert_int_eq(dt_job_set(&job, "nesterov=true", &err), 0);
    ck_assert_int_eq(job.optim.nesterov, 1);
    ck_assert_int_eq(dt_job_set(&job, "log_dir=runs/a=b c", &err), 0);
    ck_assert_str_eq(job.log_dir, "runs/a=b c");
    ck_assert_int_eq(dt_job_set(&job, "seed=42", &err), 0);
    ck_assert_uint_eq(job.seed, 42);
    ck_assert_int_eq(dt_job_set(&job, "max_steps=5000", &err), 0);
    ck_assert_int_eq(job.max_steps, 5000);
    ck_assert_int_eq(dt_job_set(&job, "noise=0", &err), 0);
    ck_assert_double_eq(job.data.noise, 0);
    ck_assert_int_eq(dt_job_set(&job, "data=wide", &err), 0);
    ck_assert_int_eq(job.data.source, DT_DATA_WIDE);
    ck_assert_int_eq(err.code, DT_OK);
}
END_TEST

START_TEST(test_job_set_errors) {
    set_fails("learning_rate=abc",
              "--set learning_rate=abc: \"learning_rate\" must be a positive number (got \"abc\")");
    set_fails("learning_rate=", "--set learning_rate=: \"learning_rate\" must be a positive "
                                "number (got \"\")");
    set_fails("learning_rate=-0.1",
              "--set learning_rate=-0.1: \"learning_rate\" must be a positive number (got -0.1)");
    set_fails("learning_rate=[1]",
              "--set learning_rate=[1]: \"learning_rate\" must be a positive number (got a list)");
    set_fails("nesterov=yes",
              "--set nesterov=yes: \"nesterov\" must be true or false (got \"yes\")");
    set_fails("batch_size=2.5",
              "--set batch_size=2.5: \"batch_size\" must be an integer >= 1 (got 2.5)");
    set_fails("optimizer=rmsprop",
              "--set optimizer=rmsprop: \"optimizer\" must be \"sgd\", \"momentum\", "
              "\"adagrad\", \"adam\" or \"ftrl\" (got \"rmsprop\")");
    set_fails("optimizer=\"sgd", "--set optimizer=\"sgd: \"optimizer\" must be \"sgd\", "
                                 "\"momentum\", \"adagrad\", \"adam\" or \"ftrl\" (got \"\"sgd\")");
    set_fails("log_dir=", "--set log_dir=: \"log_dir\" must be a non-empty string shorter than "
                          "1024 bytes (got \"\")");
    set_fails("learnig_rate=0.1",
              "--set learnig_rate=0.1: unknown field \"learnig_rate\" (did you mean "
              "\"learning_rate\"?)");
    set_fails("learning_rate", "--set learning_rate: want field=value, e.g. learning_rate=0.1");
    set_fails("=0.1", "--set =0.1: want field=value, e.g. learning_rate=0.1");
    set_fails("", "--set : want field=value, e.g. learning_rate=0.1");

    /* A name longer than any field. */
    char long_name[200];
    memset(long_name, 'x', 150);
    snprintf(long_name + 150, sizeof long_name - 150, "=1");
    dt_job job;
    dt_err err;
    dt_err_clear(&err);
    dt_job_defaults(&job);
    ck_assert_int_eq(dt_job_set(&job, long_name, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, ": unknown field \"xxxx"));
}
END_TEST

/* ---- job: finish ---- */

/* dt_job_finish with the log (stderr) caught, at level info, into log. */
static int finish_logged(dt_job *job, dt_err *err, char *log, size_t cap) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/stderr.txt", tmp_dir);
    dt_log_level level = dt_log_get_level();
    dt_log_set_level(DT_LOG_INFO);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_ge(dup2(fd, STDERR_FILENO), 0);
    close(fd);
    dt_err_clear(err);
    int rc = dt_job_finish(job, err);
    ck_assert_int_ge(dup2(saved, STDERR_FILENO), 0);
    close(saved);
    dt_log_set_level(level);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(log, 1, cap - 1, f);
    log[n] = '\0';
    fclose(f);
    return rc;
}

/* A job parsed from text, then finished with its log caught. */
static int finish_text(const char *text, dt_job *job, dt_err *err, char *log, size_t cap) {
    dt_job_defaults(job);
    dt_err_clear(err);
    ck_assert_msg(dt_job_parse(text, SRC, job, err) == 0, "%s", err->msg);
    return finish_logged(job, err, log, cap);
}

/* "data" left out: the source comes from train_data's name, else from an
 * idx header, else the job is refused naming the field and the file. */
START_TEST(test_job_data_inferred) {
    dt_job job;
    dt_err err;
    char log[4096], text[3 * PATH_MAX], path[PATH_MAX], labels[PATH_MAX];
    static const struct {
        const char *name;
        dt_data_source want;
    } named[] = {{"x.csv", DT_DATA_CSV},
                 {"x.CSV.gz", DT_DATA_CSV},
                 {"dir/x.svm", DT_DATA_LIBSVM},
                 {"x.libsvm.gz", DT_DATA_LIBSVM},
                 {"x.LibSVM", DT_DATA_LIBSVM}};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        snprintf(text, sizeof text, "{\"train_data\": \"%s\"}", named[i].name);
        int rc = finish_text(text, &job, &err, log, sizeof log);
        ck_assert_msg(rc == 0, "%s: %s", named[i].name, err.msg);
        ck_assert_int_eq(job.data.source, named[i].want);
        ck_assert_msg(strstr(log, " I job: \"data\" is not set: ") && strstr(log, named[i].name) &&
                          strstr(log, dt_data_source_names[named[i].want]) &&
                          strstr(log, "its name"),
                      "%s: no INFO line saying the inference: %s", named[i].name, log);
    }

    /* No extension: an idx images header says it (the labels beside). */
    static const unsigned char idx[] = {0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 7};
    static const unsigned char idx_labels[] = {0, 0, 8, 1, 0, 0, 0, 1, 0};
    write_file("images", (const char *)idx, sizeof idx, path, sizeof path);
    write_file("labels", (const char *)idx_labels, sizeof idx_labels, labels, sizeof labels);
    snprintf(text, sizeof text,
             "{\"model\": \"softmax\", \"classes\": 2, \"train_data\": \"%s\", "
             "\"train_labels\": \"%s\"}",
             path, labels);
    ck_assert_msg(finish_text(text, &job, &err, log, sizeof log) == 0, "%s", err.msg);
    ck_assert_int_eq(job.data.source, DT_DATA_IDX);
    ck_assert_msg(strstr(log, "\"idx\", as its idx header says"), "%s", log);

    /* The labels file given as the images: said so. */
    snprintf(text, sizeof text, "{\"train_data\": \"%s\"}", labels);
    ck_assert_int_eq(finish_text(text, &job, &err, log, sizeof log), DT_ECONFIG);
    ck_assert_msg(strstr(err.msg, "\"train_data\"") && strstr(err.msg, labels) &&
                      strstr(err.msg, "idx labels file"),
                  "%s", err.msg);

    /* A name and bytes that say nothing: refused, naming field and file. */
    write_file("rows.txt", "1 1:2\n", 6, path, sizeof path);
    snprintf(text, sizeof text, "{\"train_data\": \"%s\"}", path);
    ck_assert_int_eq(finish_text(text, &job, &err, log, sizeof log), DT_ECONFIG);
    ck_assert_msg(strstr(err.msg, "job: \"data\" is not set: \"train_data\" ") &&
                      strstr(err.msg, path) && strstr(err.msg, "set \"data\""),
                  "%s", err.msg);
    snprintf(text, sizeof text, "{\"train_data\": \"%s/none\"}", tmp_dir);
    ck_assert_int_eq(finish_text(text, &job, &err, log, sizeof log), DT_ECONFIG);
    ck_assert_msg(strstr(err.msg, "\"train_data\"") && strstr(err.msg, "/none") &&
                      strstr(err.msg, "cannot read it"),
                  "%s", err.msg);

    /* --set names nothing either: inferred the same. */
    dt_job_defaults(&job);
    ck_assert_int_eq(dt_job_set(&job, "train_data=t.csv", &err), 0);
    ck_assert_msg(finish_logged(&job, &err, log, sizeof log) == 0, "%s", err.msg);
    ck_assert_int_eq(job.data.source, DT_DATA_CSV);

    /* "data" named, even as the default: kept, and train_data is unused. */
    ck_assert_int_eq(
        finish_text("{\"data\": \"line\", \"train_data\": \"t.csv\"}", &job, &err, log, sizeof log),
        0);
    ck_assert_int_eq(job.data.source, DT_DATA_LINE);
    ck_assert_msg(!strstr(log, "is not set"), "%s", log);
    ck_assert_msg(strstr(log, " W job: \"train_data\" is \"t.csv\"") && strstr(log, "\"line\""),
                  "no warning of the unused train_data: %s", log);
    dt_job_defaults(&job);
    ck_assert_int_eq(dt_job_set(&job, "data=line", &err), 0);
    ck_assert_int_eq(dt_job_set(&job, "train_data=t.csv", &err), 0);
    ck_assert_msg(finish_logged(&job, &err, log, sizeof log) == 0, "%s", err.msg);
    ck_assert_int_eq(job.data.source, DT_DATA_LINE);
}
END_TEST

/* A data field set off its default that the source does not read is a
 * warning naming the field and the source; defaults, and fields in use,
 * say nothing (conf/linear.json names every field). */
START_TEST(test_job_unused_data_fields) {
    dt_job job;
    dt_err err;
    char log[4096];
    ck_assert_int_eq(finish_text("{\"label_column\": \"price\"}", &job, &err, log, sizeof log), 0);
    ck_assert_msg(strstr(log, " W job: \"label_column\" is \"price\"") &&
                      strstr(log, "\"data\" \"line\" does not use it"),
                  "%s", log);
    ck_assert_int_eq(finish_text("{\"data\": \"wide\", \"features\": 3, \"train_labels\": \"l\", "
                                 "\"skip_bad_rows\": true}",
                                 &job, &err, log, sizeof log),
                     0);
    ck_assert_msg(strstr(log, "\"train_labels\" is \"l\"") && strstr(log, "\"skip_bad_rows\"") &&
                      strstr(log, "\"wide\""),
                  "%s", log);
    ck_assert_int_eq(finish_text("{\"train_data\": \"t.csv\", \"label_column\": \"y\", "
                                 "\"examples\": 7, \"noise\": 1}",
                                 &job, &err, log, sizeof log),
                     0);
    ck_assert_msg(!strstr(log, "\"label_column\""), "csv reads label_column: %s", log);
    ck_assert_msg(strstr(log, "\"examples\" is 7") && strstr(log, "\"noise\" is 1") &&
                      strstr(log, "\"csv\""),
                  "%s", log);
    ck_assert_int_eq(finish_text("{\"data\": \"libsvm\", \"train_data\": \"t.svm\", "
                                 "\"eval_labels\": \"e\", \"label_column\": \"2\"}",
                                 &job, &err, log, sizeof log),
                     0);
    ck_assert_msg(strstr(log, "\"eval_labels\" is \"e\"") && strstr(log, "\"label_column\"") &&
                      strstr(log, "\"libsvm\""),
                  "%s", log);

    dt_job_defaults(&job);
    dt_err_clear(&err);
    ck_assert_msg(dt_job_load("conf/linear.json", &job, &err) == 0, "%s", err.msg);
    ck_assert_msg(finish_logged(&job, &err, log, sizeof log) == 0, "%s", err.msg);
    ck_assert_msg(log[0] == '\0', "conf/linear.json logged: %s", log);
}
END_TEST

START_TEST(test_job_finish_files) {
    dt_job job;
    dt_err err;
    dt_job_defaults(&job);
    job.data.source = DT_DATA_CSV;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_job_finish(&job, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "job: \"data\": \"csv\" needs \"train_data\" (a file)");

    snprintf(job.data.train_data, sizeof job.data.train_data, "train.csv");
    dt_err_clear(&err);
    ck_assert_msg(dt_job_finish(&job, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(job.max_steps, 0); /* derived once the file is read */
    int64_t steps = 0;
    ck_assert_int_eq(dt_job_steps_for(&job, 1001, &steps, &err), 0);
    ck_assert_int_eq(steps, 200 * 101);

    job.data.source = DT_DATA_IDX;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_job_finish(&job, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "needs \"train_labels\""));

    dt_job_defaults(&job);
    job.model.kind = DT_MODEL_LOGISTIC;
    job.model.num_classes = 3;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_job_finish(&job, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "\"classes\" must be 2 (got 3)"));

    /* ftrl parses, with its fields, which reach the ps (OptimizerConfig). */
    dt_job_defaults(&job);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_job_set(&job, "optimizer=ftrl", &err), 0);
    ck_assert_int_eq(dt_job_set(&job, "l1_regularization_strength=0.5", &err), 0);
    ck_assert_int_eq(dt_job_set(&job, "l2_regularization_strength=0.25", &err), 0);
    ck_assert_int_eq(dt_job_set(&job, "ftrl_beta=1", &err), 0);
    ck_assert_double_eq(job.optim.ftrl_l1, 0.5);
    ck_assert_double_eq(job.optim.ftrl_l2, 0.25);
    ck_assert_double_eq(job.optim.ftrl_beta, 1);
    ck_assert_msg(dt_job_finish(&job, &err) == 0, "%s", err.msg);

    dt_job_defaults(&job);
    snprintf(job.data.eval_data, sizeof job.data.eval_data, "test.csv");
    dt_err_clear(&err);
    ck_assert_int_eq(dt_job_finish(&job, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "\"eval_data\" needs a file data source"));

    /* Schedules and consistency modes are checked as a whole. */
    dt_job_defaults(&job);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_job_set(&job, "lr_schedule=piecewise", &err), 0);
    ck_assert_int_eq(dt_job_set(&job, "boundaries=[100, 200]", &err), 0);
    ck_assert_int_eq(dt_job_set(&job, "lr_values=[0.1, 0.01]", &err), 0);
    ck_assert_int_eq(dt_job_finish(&job, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg,
                     "job: \"lr_values\" needs one more entry than \"boundaries\" (2 and 2)");
    dt_err_clear(&err);
    ck_assert_int_eq(dt_job_set(&job, "lr_values=[0.1, 0.01, 0.001]", &err), 0);
    ck_assert_msg(dt_job_finish(&job, &err) == 0, "%s", err.msg);
    dt_lr_schedule sched;
    ck_assert_int_eq(dt_job_schedule(&job, &sched, &err), 0);
    ck_assert_int_eq(sched.kind, DT_LR_PIECEWISE);
    ck_assert_double_eq(sched.values[2], 0.001);
    ck_assert_int_eq(dt_job_set(&job, "mode=ssp", &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "\"mode\" must be \"async\", \"sync\" or \"bounded\""));

    /* A list field parses and survives dt_job_finish's re-check. */
    dt_job_defaults(&job);
    dt_err_clear(&err);
    ck_assert_msg(dt_job_set(&job, "hidden=[256,128]", &err) == 0, "%s", err.msg);
    ck_assert_int_eq(job.model.num_hidden, 2);
    ck_assert_int_eq(job.model.hidden[1], 128);
    ck_assert_msg(dt_job_finish(&job, &err) == 0, "%s", err.msg);
}
END_TEST

/* What a sparse job takes, decided once "features" and the data are
 * known; every refusal names its field. */
static int finish_with(const char *const *sets, dt_err *err) {
    dt_job job;
    dt_job_defaults(&job);
    dt_err_clear(err);
    for (int i = 0; sets[i]; i++)
        ck_assert_msg(dt_job_set(&job, sets[i], err) == 0, "%s: %s", sets[i], err->msg);
    return dt_job_finish(&job, err);
}

START_TEST(test_job_sparse_rules) {
    dt_err err;
    struct {
        const char *sets[8];
        const char *needle; /* NULL: accepted */
    } cases[] = {
        {{"data=criteo", "train_data=c.txt", "model=logistic", "hash_bits=20", NULL}, NULL},
        {{"data=criteo", "train_data=c.txt", "model=logistic", NULL},
         "\"hash_bits\" must be 1..40"},
        {{"data=criteo", "train_data=c.txt", "sparse=off", "hash_bits=20", NULL},
         "\"criteo\" needs a sparse model"},
        {{"data=criteo", "train_data=c.txt", "hash_bits=20", "mode=sync", NULL}, NULL},
        {{"data=criteo", "train_data=c.txt", "hash_bits=20", "model=mlp", NULL}, NULL},
        {{"data=libsvm", "train_data=t.svm", "hash_bits=20", "model=mlp", NULL},
         "\"embedding_combiner\": \"concat\" gives each field its own slot, and \"libsvm\" "
         "rows have no fields"},
        {{"data=libsvm", "train_data=t.svm", "hash_bits=20", "model=mlp", "classes=3",
          "embedding_combiner=sum", NULL},
         NULL},
        /* pipelined pushes for sparse models as for dense ones; in sync
         * mode accepted and without effect, as for dense ones */
        {{"data=criteo", "train_data=c.txt", "hash_bits=20", "pipeline_push=true", NULL}, NULL},
        {{"data=libsvm", "train_data=t.svm", "hash_bits=20", "pipeline_push=true", "mode=sync",
          NULL},
         NULL},
        {{"data=criteo", "train_data=c.txt", "hash_bits=20", "eval_data=e.txt", NULL}, NULL},
        {{"data=libsvm", "train_data=t.svm", "hash_bits=20", "model=logistic", NULL}, NULL},
        {{"data=wide", "sparse=on", NULL}, "a sparse model reads"},
        {{"data=wide", "hash_bits=3", NULL}, "\"hash_bits\" 3 needs a sparse model"},
        {{"data=wide", "evict_idle_steps=10", NULL}, "the model is not sparse"},
        {{"data=criteo", "train_data=c.txt", "hash_bits=20", "evict_min_touches=2", NULL},
         "\"evict_touch_window_steps\" >= 1"},
        {{"data=criteo", "train_data=c.txt", "hash_bits=20", "evict_min_touches=2",
          "evict_touch_window_steps=100", NULL},
         NULL},
        /* libsvm indices as written, up to 2^40: a table's rows, never a
         * dense weight */
        {{"data=libsvm", "train_data=t.svm", "features=1099511627776", NULL}, NULL},
        {{"data=libsvm", "train_data=t.svm", "features=2147483648", "sparse=off", NULL},
         "\"features\" 2147483648: a dense model takes at most 2147483647"},
        {{"data=csv", "train_data=t.csv", "features=34359738368", NULL},
         "a dense model takes at most"},
        /* scaling does not apply to sparse rows, whatever the source */
        {{"data=criteo", "train_data=c.txt", "hash_bits=20", "scale=standardize", NULL},
         "\"scale\": \"standardize\" is for dense models"},
        {{"data=libsvm", "train_data=t.svm", "hash_bits=20", "scale=divide", NULL},
         "\"scale\": \"divide\" is for dense models"},
        {{"data=libsvm", "train_data=t.svm", "hash_bits=20", "scale=none", NULL}, NULL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int rc = finish_with(cases[c].sets, &err);
        if (!cases[c].needle) {
            ck_assert_msg(rc == 0, "case %zu: %s", c, err.msg);
        } else {
            ck_assert_msg(rc == DT_EINVAL, "case %zu: rc %d (%s)", c, rc, err.msg);
            ck_assert_msg(strstr(err.msg, cases[c].needle), "case %zu: \"%s\" lacks \"%s\"", c,
                          err.msg, cases[c].needle);
        }
    }
    /* auto: a table for Criteo, hashed libsvm, or more than 2^20 features. */
    dt_job job;
    dt_job_defaults(&job);
    job.data.source = DT_DATA_LIBSVM;
    job.model.num_features = DT_SPARSE_AUTO_FEATURES;
    ck_assert(!dt_job_is_sparse(&job));
    job.model.num_features = DT_SPARSE_AUTO_FEATURES + 1;
    ck_assert(dt_job_is_sparse(&job));
    job.sparse = DT_SPARSE_OFF;
    ck_assert(!dt_job_is_sparse(&job));
}
END_TEST

/* "model": "mlp" with a sparse job is the embedding model: its dim,
 * combiner, fields and hidden layers from the job; bad values name the
 * field, from --set and from a file alike. */
START_TEST(test_job_sparse_embedding) {
    dt_err err;
    dt_job job;
    dt_job_defaults(&job);
    ck_assert_int_eq(job.embedding_dim, 16);
    ck_assert_int_eq(job.embedding_combiner, DT_COMBINE_CONCAT);
    const char *sets[] = {"data=criteo",   "train_data=c.txt", "hash_bits=20",     "model=mlp",
                          "hidden=[32,8]", "embedding_dim=4",  "optimizer=adagrad"};
    dt_err_clear(&err);
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++)
        ck_assert_msg(dt_job_set(&job, sets[i], &err) == 0, "%s: %s", sets[i], err.msg);
    ck_assert_msg(dt_job_finish(&job, &err) == 0, "%s", err.msg);
    dt_sparse_model_config mc;
    dt_table_config tc;
    ck_assert_msg(dt_job_sparse_model(&job, &mc, &tc, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(mc.kind, DT_SPARSE_EMBEDDING);
    ck_assert_int_eq(mc.dim, 4);
    ck_assert_int_eq(mc.combiner, DT_COMBINE_CONCAT);
    ck_assert_int_eq(mc.num_fields, 26);
    ck_assert_int_eq(mc.dense_features, 13);
    ck_assert_int_eq(mc.num_classes, 2);
    ck_assert_int_eq(mc.num_hidden, 2);
    ck_assert_int_eq(mc.hidden[0], 32);
    ck_assert_int_eq(mc.hidden[1], 8);
    ck_assert_str_eq(tc.name, "embedding/table");
    ck_assert_int_eq(tc.rows, 1 << 20);
    ck_assert_int_eq(tc.dim, 4);
    ck_assert_int_eq(tc.init, DT_TABLE_INIT_NORMAL);
    ck_assert_uint_eq(tc.seed, job.seed);
    ck_assert_int_eq(tc.num_slots, 1); /* adagrad's accumulator */
    /* The ps's cap: the mlp (13 + 26*4 = 117 -> 32 -> 8 -> 2 floats) and a
     * batch of 10 rows of 26 entries, each an id and 4 floats. */
    long long dense = 0, step_rows = 0;
    ck_assert_msg(dt_job_sparse_bytes(&job, &dense, &step_rows, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(dense, 4 * (117 * 32 + 32 + 32 * 8 + 8 + 8 * 2 + 2));
    ck_assert_int_eq(step_rows, 10LL * 26 * (8 + 4 * 4));
    /* The wide model of the same job is untouched by the embedding fields. */
    ck_assert_int_eq(dt_job_set(&job, "model=logistic", &err), 0);
    ck_assert_msg(dt_job_sparse_model(&job, &mc, &tc, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(mc.kind, DT_SPARSE_WIDE);
    ck_assert_int_eq(tc.dim, 1);

    struct {
        const char *set, *needle;
    } bad[] = {
        {"embedding_dim=0", "\"embedding_dim\" must be an integer >= 1 (got 0)"},
        {"embedding_dim=1025", "\"embedding_dim\" must be an integer from 1 to 1024 (got 1025)"},
        {"embedding_dim=-3", "\"embedding_dim\""},
        {"embedding_dim=2.5", "\"embedding_dim\""},
        {"embedding_combiner=mean", "\"embedding_combiner\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dt_err_clear(&err);
        ck_assert_int_eq(dt_job_set(&job, bad[i].set, &err), DT_EINVAL);
        ck_assert_msg(strstr(err.msg, bad[i].needle), "%s: \"%s\" lacks \"%s\"", bad[i].set,
                      err.msg, bad[i].needle);
    }
    dt_err_clear(&err);
    ck_assert_int_eq(
        dt_job_parse("{\"model\": \"mlp\",\n  \"embedding_dim\": 0}", "e.json", &job, &err),
        DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "e.json:2:") && strstr(err.msg, "\"embedding_dim\""), "%s",
                  err.msg);
}
END_TEST

/* Each shard makes its own passes: 150 rows in 2 shards at batch 10 are 8
 * steps a pass each (16, not ceil(150 / 10) = 15); more shards than rows
 * leave the extra ones none; no shard at all is an error. */
START_TEST(test_job_steps_for_shards) {
    dt_job job;
    dt_err err;
    dt_err_clear(&err);
    dt_job_defaults(&job);
    job.epochs = 20;
    job.batch_size = 10;
    int64_t steps = 0;
    ck_assert_int_eq(dt_job_steps_for_shards(&job, 150, 2, &steps, &err), 0);
    ck_assert_int_eq(steps, 20 * 16);
    ck_assert_int_eq(dt_job_steps_for_shards(&job, 150, 1, &steps, &err), 0);
    ck_assert_int_eq(steps, 20 * 15);
    ck_assert_int_eq(dt_job_steps_for_shards(&job, 3, 5, &steps, &err), 0);
    ck_assert_int_eq(steps, 20 * 3); /* 3 shards of 1 row, 2 of none */
    ck_assert_int_eq(dt_job_steps_for_shards(&job, 150, 0, &steps, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "0 shards"), "%s", err.msg);
    dt_err_clear(&err);
    job.epochs = 0;
    ck_assert_int_eq(dt_job_steps_for_shards(&job, 150, 2, &steps, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "\"epochs\" are both 0"), "%s", err.msg);
}
END_TEST

START_TEST(test_job_finish) {
    dt_job job;
    dt_err err;
    dt_err_clear(&err);

    /* max_steps = epochs * ceil(N / B) */
    dt_job_defaults(&job);
    job.data.num_examples = 101;
    ck_assert_msg(dt_job_finish(&job, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(job.max_steps, 200 * 11);

    dt_job_defaults(&job);
    job.max_steps = 500; /* given: epochs do not matter */
    ck_assert_int_eq(dt_job_finish(&job, &err), 0);
    ck_assert_int_eq(job.max_steps, 500);

    dt_job_defaults(&job);
    job.epochs = 0;
    job.max_steps = 7;
    ck_assert_int_eq(dt_job_finish(&job, &err), 0);
    ck_assert_int_eq(job.max_steps, 7);

    dt_job_defaults(&job);
    job.epochs = 0;
    ck_assert_int_eq(dt_job_finish(&job, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "job: \"max_steps\" and \"epochs\" are both 0; set one of them");

    dt_err_clear(&err);
    dt_job_defaults(&job);
    job.model.num_features = 3;
    ck_assert_int_eq(dt_job_finish(&job, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "job: \"data\": \"line\" has 1 feature, but \"features\" is 3 (use "
                              "\"features\": 1, or \"data\": \"wide\")");
    dt_err_clear(&err);
    ck_assert_int_eq(dt_job_set(&job, "data=wide", &err), 0);
    ck_assert_int_eq(dt_job_finish(&job, &err), 0);

    dt_job_defaults(&job);
    job.batch_size = 101;
    ck_assert_int_eq(dt_job_finish(&job, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "job: \"batch_size\" 101 is larger than \"examples\" 100");

    dt_err_clear(&err);
    dt_job_defaults(&job);
    job.data.num_examples = INT64_C(9007199254740992);
    job.batch_size = 1;
    job.epochs = INT_MAX;
    ck_assert_int_eq(dt_job_finish(&job, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "job: \"epochs\" 2147483647 of 9007199254740992 steps each is too "
                              "many steps");

    /* Fields set in the struct are held to the rules of the files. */
    dt_err_clear(&err);
    dt_job_defaults(&job);
    job.batch_size = 0;
    ck_assert_int_eq(dt_job_finish(&job, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "job: \"batch_size\" must be an integer >= 1 (got 0)");
    dt_err_clear(&err);
    dt_job_defaults(&job);
    job.optim.nesterov = 2;
    ck_assert_int_eq(dt_job_finish(&job, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "job: \"nesterov\" must be true or false (got 2)");
    dt_err_clear(&err);
    dt_job_defaults(&job);
    memset(job.log_dir, 'x', sizeof job.log_dir);
    ck_assert_int_eq(dt_job_finish(&job, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "job: \"log_dir\" is not a terminated string");

    /* A choice is an enum in the struct: one out of range is named with
     * the choices, as a file's bad string would be. */
    dt_err_clear(&err);
    dt_job_defaults(&job);
    job.consistency.mode = (dt_mode)7;
    ck_assert_int_eq(dt_job_finish(&job, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "job: \"mode\" must be \"async\", \"sync\" or \"bounded\" (got 7)");
    dt_err_clear(&err);
    dt_job_defaults(&job);
    job.model.kind = (dt_model_kind)-1;
    ck_assert_int_eq(dt_job_finish(&job, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "\"model\" must be \"linear\""));
    /* A list's count out of range is refused before its entries are read. */
    dt_err_clear(&err);
    dt_job_defaults(&job);
    job.model.num_hidden = DT_MAX_HIDDEN + 1;
    ck_assert_int_eq(dt_job_finish(&job, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "job: \"hidden\" has 9 entries (1 to 8)");
    dt_err_clear(&err);
    dt_job_defaults(&job);
    job.schedule.num_boundaries = -1;
    ck_assert_int_eq(dt_job_finish(&job, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "job: \"boundaries\" has -1 entries (0 to 16)");

    /* The optimizer is a choice like any other. */
    dt_err_clear(&err);
    dt_job_defaults(&job);
    job.optim.kind = (dt_optim_kind)5;
    ck_assert_int_eq(dt_job_finish(&job, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, "job: \"optimizer\" must be \"sgd\", \"momentum\", \"adagrad\", "
                              "\"adam\" or \"ftrl\" (got 5)");
}
END_TEST

Suite *cluster_suite(void) {
    Suite *s = suite_create("cluster");
    TCase *tc = tcase_create("cluster");
    tcase_set_timeout(tc, 10);
    tcase_add_unchecked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_add_test(tc, test_cluster_demo);
    tcase_add_test(tc, test_cluster_ipv6_and_edges);
    tcase_add_test(tc, test_cluster_resolve_role);
    tcase_add_test(tc, test_cluster_longest_host);
    tcase_add_test(tc, test_cluster_tf_config_and_job);
    tcase_add_test(tc, test_cluster_tf_config_chief);
    tcase_add_test(tc, test_cluster_tf_config_errors);
    tcase_add_test(tc, test_cluster_bad_json);
    tcase_add_test(tc, test_cluster_deep_nesting);
    tcase_add_test(tc, test_cluster_bad_shape);
    tcase_add_test(tc, test_cluster_bad_address);
    tcase_add_test(tc, test_cluster_duplicates);
    tcase_add_test(tc, test_cluster_positions_skip_values);
    tcase_add_test(tc, test_cluster_load_files);
    suite_add_tcase(s, tc);

    TCase *tj = tcase_create("job");
    tcase_set_timeout(tj, 10);
    tcase_add_unchecked_fixture(tj, tmp_setup, tmp_teardown);
    tcase_add_test(tj, test_job_defaults);
    tcase_add_test(tj, test_job_conf_linear);
    tcase_add_test(tj, test_job_patience_needs_evals);
    tcase_add_test(tj, test_job_epochs_from_rows);
    tcase_add_test(tj, test_job_rate_of_optimizer);
    tcase_add_test(tj, test_job_parse_fields);
    tcase_add_test(tj, test_job_to_json_and_diff);
    tcase_add_test(tj, test_job_wrong_type);
    tcase_add_test(tj, test_job_bad_values);
    tcase_add_test(tj, test_job_unknown_field);
    tcase_add_test(tj, test_job_load_errors);
    tcase_add_test(tj, test_job_set);
    tcase_add_test(tj, test_job_set_errors);
    tcase_add_test(tj, test_job_finish);
    tcase_add_test(tj, test_job_steps_for_shards);
    tcase_add_test(tj, test_job_sparse_rules);
    tcase_add_test(tj, test_job_sparse_embedding);
    tcase_add_test(tj, test_job_finish_files);
    tcase_add_test(tj, test_job_data_inferred);
    tcase_add_test(tj, test_job_unused_data_fields);
    suite_add_tcase(s, tj);
    return s;
}
