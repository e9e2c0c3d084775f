/*
 * Suite "log": the two log formats. The json format (--log-format json)
 * must give one valid JSON object a line whatever a message or field
 * holds (quotes, backslashes, control bytes, bytes that are not UTF-8, a
 * message past the line's room), read back by Python's json module
 * (/usr/bin/python3, strict: NaN refused); the text format stays
 * "<pid> <role> hh:mm:ss.mmm <L> message". Then a whole job run with
 * --log-format json: every line of every role's log parses, and the
 * progress and save lines carry their fields.
 */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "proc.h"
#include "suites.h"
#include "testjob.h"
#include "text.h"

#define PYTHON "/usr/bin/python3"
#define JOB_TIMEOUT_MS 60000

/* Reads every line of the files named after argv[1] (keys every object must
 * have, comma-separated) as strict JSON; prints how many, fails naming the
 * first line that is not an object with those keys. With argv[2] == "-g"
 * the lines must also name the given "key=value" pairs in some line. */
static const char checker[] =
    "import json, sys\n"
    "def bad(c):\n"
    "    raise ValueError('not JSON: ' + c)\n"
    "need = [k for k in sys.argv[1].split(',') if k]\n"
    "n = 0\n"
    "for path in sys.argv[2:]:\n"
    "    data = open(path, 'rb').read()\n"
    "    if data and not data.endswith(b'\\n'):\n"
    "        print(path + ': no newline at the end', file=sys.stderr); sys.exit(1)\n"
    "    for k, raw in enumerate(data.split(b'\\n')[:-1]):\n"
    "        try:\n"
    "            obj = json.loads(raw.decode('utf-8'), parse_constant=bad)\n"
    "            assert isinstance(obj, dict), 'not an object'\n"
    "            for key in need:\n"
    "                assert key in obj, 'no ' + key\n"
    "        except Exception as e:\n"
    "            print('%s:%d: %r: %r' % (path, k + 1, e, raw), file=sys.stderr)\n"
    "            sys.exit(1)\n"
    "        n += 1\n"
    "print(n)\n";

static char *dir;
static dt_test_job job;

static void setup(void) {
    dir = dt_test_tempdir();
}

static void teardown(void) {
    dt_test_kill_all();
    dt_test_tempdir_free(dir);
    dir = NULL;
}

/* Runs the checker over the files; returns its exit status, its output
 * (the line count) in *lines. */
static int check_json(const char *keys, const char *const *files, int n, long *lines) {
    char script[1200], out[1200];
    snprintf(script, sizeof script, "%s/check_json.py", dir);
    snprintf(out, sizeof out, "%s/check_json.out", dir);
    ck_assert_int_eq(dt_test_write_file(script, checker), 0);
    char *argv[16] = {PYTHON, script, (char *)keys};
    ck_assert(n <= 12);
    for (int i = 0; i < n; i++)
        argv[3 + i] = (char *)files[i];
    argv[3 + n] = NULL;
    pid_t pid = dt_test_spawn_split(argv, out, out);
    ck_assert(pid > 0);
    int status = dt_test_wait(pid, 60000);
    char *text = dt_test_read_file(out, NULL);
    if (status != 0) fprintf(stderr, "check_json: %s\n", text ? text : "");
    *lines = text ? strtol(text, NULL, 10) : -1;
    free(text);
    return status;
}

/* Runs fn with stderr going to path, the log format as given. */
static void with_stderr(const char *path, dt_log_format format, void (*fn)(void)) {
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert(saved >= 0 && fd >= 0);
    ck_assert(dup2(fd, STDERR_FILENO) >= 0);
    close(fd);
    dt_log_format old = dt_log_get_format();
    dt_log_set_format(format);
    fn();
    dt_log_set_format(old);
    ck_assert(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
}

#define NUM_HOSTILE 9
static const char *const hostile[NUM_HOSTILE] = {
    "plain",
    "quote \" and backslash \\ and \\\" both",
    "newline\nand\rreturn\tand tab",
    "control \x01\x02\x1f\x7f bytes",
    "not UTF-8: \xff\xfe \xc0\xaf \xed\xa0\x80 \xe2\x82",
    "cut UTF-8 at the end \xe2\x82",
    "unicode \xc3\xa4 \xf0\x9f\x99\x82 \xe2\x80\xa8 line separator",
    "{\"msg\":\"forged\"}\n{\"level\":\"error\"",
    "</script>\\u0000",
};

static void log_hostile(void) {
    dt_log_set_role('P');
    dt_log_set_task(3);
    for (int i = 0; i < NUM_HOSTILE; i++) {
        dt_log_set_job_id(hostile[i]);
        dt_log(DT_LOG_WARN, "peer %s refused: %s", hostile[i], hostile[(i + 1) % NUM_HOSTILE]);
        const dt_log_field f[] = {DT_LOG_STR("peer", hostile[i]), DT_LOG_STR("reason", NULL),
                                  DT_LOG_INT("step", -42),        DT_LOG_NUM("loss", NAN),
                                  DT_LOG_NUM("rate", INFINITY),   DT_LOG_NUM("lr", 0.1)};
        dt_log_kv(DT_LOG_ERROR, f, 6, "%s", hostile[i]);
    }
    /* Past the line's room: a long message and a long field, each cut at
     * a whole escape, the line still closed. */
    static char big[8192];
    for (size_t i = 0; i < sizeof big - 1; i++)
        big[i] = "\"\\\x01\xff"[i % 4];
    big[sizeof big - 1] = '\0';
    dt_log(DT_LOG_INFO, "%s", big);
    const dt_log_field f[] = {DT_LOG_STR("long", big), DT_LOG_STR("after", "kept?")};
    dt_log_kv(DT_LOG_INFO, f, 2, "%s", "short message, long field");
    dt_log_set_job_id(NULL);
    dt_log(DT_LOG_INFO, "no job id");
    dt_log_set_role('-');
    dt_log_set_task(-1);
}

START_TEST(json_lines_parse_under_hostile_input) {
    char path[1200];
    snprintf(path, sizeof path, "%s/hostile.log", dir);
    dt_log_level level = dt_log_get_level();
    dt_log_set_level(DT_LOG_DEBUG);
    with_stderr(path, DT_LOG_JSON, log_hostile);
    dt_log_set_level(level);
    const char *files[1] = {path};
    long lines = 0;
    ck_assert_int_eq(check_json("time,level,role,task,pid,msg", files, 1, &lines), 0);
    ck_assert_int_eq(lines, 2 * NUM_HOSTILE + 3);
    char *text = dt_test_read_file(path, NULL);
    ck_assert_ptr_nonnull(text);
    /* The fields come after the message, typed; no NaN reaches the line. */
    ck_assert_ptr_nonnull(strstr(text, "\"step\":-42,\"loss\":null,\"rate\":null,\"lr\":0.1"));
    ck_assert_ptr_nonnull(strstr(text, "\"role\":\"ps\",\"task\":3,\"job_id\":\"plain\""));
    ck_assert_ptr_nonnull(strstr(text, "not UTF-8: \\\\xff\\\\xfe"));
    ck_assert_ptr_nonnull(strstr(text, "control \\u0001\\u0002\\u001f\\u007f bytes"));
    ck_assert_ptr_null(strstr(text, "NaN"));
    free(text);
}
END_TEST

static void log_text(void) {
    dt_log_set_role('W');
    dt_log(DT_LOG_INFO, "step %d \"quoted\"\nsecond", 7);
    const dt_log_field f[] = {DT_LOG_INT("step", 7)};
    dt_log_kv(DT_LOG_WARN, f, 1, "with fields %s", "x");
    dt_log_set_role('-');
}

/* The text format is the one it was: fields are the json format's only. */
START_TEST(text_format_unchanged) {
    char path[1200];
    snprintf(path, sizeof path, "%s/text.log", dir);
    with_stderr(path, DT_LOG_TEXT, log_text);
    char *text = dt_test_read_file(path, NULL);
    ck_assert_ptr_nonnull(text);
    char want1[128], want2[128];
    snprintf(want1, sizeof want1, "%d W ", (int)getpid());
    ck_assert_msg(strncmp(text, want1, strlen(want1)) == 0, "line: %s", text);
    ck_assert_ptr_nonnull(strstr(text, " I step 7 \"quoted\"\\nsecond\n"));
    snprintf(want2, sizeof want2, " W with fields x\n");
    ck_assert_ptr_nonnull(strstr(text, want2));
    ck_assert_ptr_null(strstr(text, "{"));
    /* "pid R hh:mm:ss.mmm L ": the clock at a fixed place. */
    const char *t = text + strlen(want1);
    ck_assert_msg(t[2] == ':' && t[5] == ':' && t[8] == '.' && t[12] == ' ', "line: %s", text);
    free(text);
}
END_TEST

START_TEST(json_escape_bounds) {
    char out[16];
    /* A whole escape or none: 5 bytes of room never split "\u0001". */
    size_t n = dt_text_json_escape(out, 6, "a\x01", 2);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(out, "a");
    n = dt_text_json_escape(out, sizeof out, "a\x01", 2);
    ck_assert_str_eq(out, "a\\u0001");
    n = dt_text_json_escape(out, sizeof out, "\xff\"", 2);
    ck_assert_str_eq(out, "\\\\xff\\\"");
    ck_assert_uint_eq(dt_text_json_escape(out, 0, "x", 1), 0);
    dt_log_format f = DT_LOG_TEXT;
    ck_assert_int_eq(dt_log_parse_format("json", &f), 0);
    ck_assert_int_eq(f, DT_LOG_JSON);
    ck_assert_int_eq(dt_log_parse_format("JSON", &f), -1);
}
END_TEST

/* ---- a job's logs ------------------------------------------------------- */

static void job_setup(void) {
    dt_test_job_setup(&job);
    dir = job.dir;
    dt_test_job_cluster(&job, 1, 2);
}

static void job_teardown(void) {
    dir = NULL;
    dt_test_job_teardown(&job);
}

START_TEST(job_logs_json) {
    static const char *const sets[] = {"max_steps=300", "save_model_secs=1", "log_steps=50",
                                       "examples=200"};
    dt_test_job_set(&job, sets, 4);
    job.args[job.num_args++] = "--log-format";
    job.args[job.num_args++] = "json";
    dt_test_job_run(&job, "", JOB_TIMEOUT_MS);
    char ps[1200], chief[1200], worker[1200];
    dt_test_job_log_path(&job, "ps0", ps, sizeof ps);
    dt_test_job_log_path(&job, "chief", chief, sizeof chief);
    dt_test_job_log_path(&job, "worker1", worker, sizeof worker);
    const char *files[3] = {ps, chief, worker};
    long lines = 0;
    ck_assert_msg(check_json("time,level,pid,msg", files, 3, &lines) == 0, "%s",
                  dt_test_job_report(&job));
    ck_assert_int_gt(lines, 10);
    /* The roles say who they are; progress and save lines carry fields. */
    ck_assert(dt_test_job_log_has(&job, "ps0", "\"role\":\"ps\",\"task\":0"));
    ck_assert(dt_test_job_log_has(&job, "chief", "\"role\":\"chief\",\"task\":0"));
    ck_assert(dt_test_job_log_has(&job, "worker1", "\"role\":\"worker\",\"task\":1"));
    ck_assert(dt_test_job_log_has(&job, "chief", ",\"step\":50,\"global_step\":"));
    ck_assert(dt_test_job_log_has(&job, "chief", "\"loss\":"));
    ck_assert(dt_test_job_log_has(&job, "chief", "saved "));
    ck_assert(dt_test_job_log_has(&job, "chief", "\"path\":\""));
}
END_TEST

Suite *log_suite(void) {
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("format");
    tcase_add_unchecked_fixture(tc, dt_test_tmp_fixture, dt_test_tmp_end);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, json_lines_parse_under_hostile_input);
    tcase_add_test(tc, text_format_unchanged);
    tcase_add_test(tc, json_escape_bounds);
    suite_add_tcase(s, tc);
    TCase *jobs = dt_test_job_tcase(s, "jobs", 180, job_setup, job_teardown);
    tcase_add_test(jobs, job_logs_json);
    return s;
}
