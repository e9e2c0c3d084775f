/*
 * Suite "storage": what a user sees when the log dir's disk fills or the log
 * dir is deleted mid-job, with real processes ($DTRAIN_BIN) on free loopback
 * ports:
 *  - the disk fills while summaries and checkpoints are written: the chief
 *    trains on (no exit 1), logs the drops once per interval, and once the
 *    filler is removed the job ends with exit 0 on every role, the final
 *    checkpoint at exactly max_steps, and every event file non-empty and
 *    whole records;
 *  - the disk is full at the final checkpoint: the chief exits 75 after
 *    final_save_secs, the ps exits too; rerun with space, the job completes;
 *  - the disk fills while the best model is kept: its writes fail, said,
 *    the old one still reads, and a later one is written once there is
 *    space;
 *  - the log dir is deleted mid-job: the chief says so, recreates it, locks
 *    it again, saves a checkpoint there and writes summaries there.
 *
 * The full disk is a small tmpfs mounted as the log dir (root only; the
 * cases say so and pass when the mount fails), filled by a filler file at a
 * chosen moment. The teardown unmounts it on every path. Every wait is on
 * an event (a log line, a file, an exit) with a deadline.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pb_decode.h>

#include "checkpoint.h"
#include "proc.h"
#include "suites.h"
#include "tensorboard.pb.h"
#include "testjob.h"
#include "tfrecord.h"

#define JOB_TIMEOUT_MS 90000
#define EVENT_MS 30000 /* a log line or file the roles are expected to produce */
#define TEST_TIMEOUT_S 240
#define TMPFS_SIZE "size=8m"
/* The tmpfs's source name, so the suite's last word can find what a failed
 * case (which exits without its teardown) left mounted. */
#define TMPFS_SOURCE "dtrain-storage-test"

static dt_test_job w;
static int mounted; /* w.log_dir is a tmpfs of ours */

static void setup(void) {
    dt_test_job_setup(&w);
    mounted = 0;
}

static void teardown(void) {
    dt_test_kill_all(); /* nothing may hold files on the mount */
    if (mounted) umount2(w.log_dir, MNT_DETACH);
    mounted = 0;
    dt_test_job_teardown(&w);
}

/* Mounts a small tmpfs as the log dir; 0 (with a message) when that is not
 * possible here, and the case then passes without testing anything. */
static int mount_log_dir(const char *test) {
    ck_assert_int_eq(mkdir(w.log_dir, 0755), 0);
    if (mount(TMPFS_SOURCE, w.log_dir, "tmpfs", 0, TMPFS_SIZE) != 0) {
        fprintf(stderr, "storage: %s skipped: mount tmpfs on the log dir: %s\n", test,
                strerror(errno));
        return 0;
    }
    mounted = 1;
    return 1;
}

/* In the suite's process, after its cases: unmounts every tmpfs of ours
 * still mounted (a failed assertion ends a case without its teardown). */
static void unmount_leftovers(void) {
    FILE *f = fopen("/proc/self/mounts", "r");
    if (!f) return;
    char source[256], target[4096];
    while (fscanf(f, "%255s %4095s %*[^\n]", source, target) == 2)
        if (strcmp(source, TMPFS_SOURCE) == 0) umount2(target, MNT_DETACH);
    fclose(f);
}

/* <log_dir>/filler, grown until the disk is full. */
static void fill_disk(char *filler, size_t cap) {
    snprintf(filler, cap, "%s/filler", w.log_dir);
    int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_msg(fd >= 0, "%s: %s", filler, strerror(errno));
    static char block[64 * 1024];
    ssize_t n;
    while ((n = write(fd, block, sizeof block)) > 0)
        ;
    int saved = errno;
    close(fd);
    ck_assert_msg(n < 0 && saved == ENOSPC, "%s: filled without ENOSPC: %s", filler,
                  strerror(saved));
}

static const char *const base_sets[] = {
    "data=line", "examples=1000", "learning_rate=0.01", "log_steps=100000", "save_model_secs=1",
};

static void world_init(int num_workers, const char *const *extra) {
    dt_test_job_cluster(&w, 1, num_workers);
    dt_test_job_set(&w, base_sets, (int)(sizeof base_sets / sizeof base_sets[0]));
    for (int i = 0; extra[i]; i++)
        dt_test_job_add_set(&w, extra[i]);
}

/* ---- what is left in the log dir ---------------------------------------- */

/* Every event file in dir is non-empty, starts with file_version and is
 * whole records that decode as Events. Returns the count of files. */
static int check_event_files(const char *dir) {
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "%s: %s", dir, strerror(errno));
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20) != 0) continue;
        char path[2400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_msg(st.st_size > 0, "%s is empty", path);
        FILE *f = fopen(path, "rb");
        ck_assert_ptr_nonnull(f);
        uint8_t *data = NULL;
        size_t len = 0;
        dt_err err = {0};
        int rc, records = 0;
        while ((rc = dt_test_tfrecord_read(f, &data, &len, &err)) == 1) {
            tensorflow_Event ev = tensorflow_Event_init_zero;
            pb_istream_t in = pb_istream_from_buffer(data, len);
            ck_assert_msg(pb_decode(&in, tensorflow_Event_fields, &ev), "%s: record %d: %s", path,
                          records, PB_GET_ERROR(&in));
            if (records == 0) {
                ck_assert_int_eq(ev.which_what, tensorflow_Event_file_version_tag);
                ck_assert_str_eq(ev.what.file_version, "brain.Event:2");
            }
            records++;
        }
        ck_assert_msg(rc == 0, "%s: after %d whole records: %s", path, records, err.msg);
        ck_assert_int_eq(ftello(f), st.st_size);
        free(data);
        fclose(f);
        files++;
    }
    closedir(d);
    return files;
}

/* No temporary file is left, and the state file names only files present
 * (no state file: no checkpoint either). */
static void check_ckpt_files(const char *dir) {
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        ck_assert_msg(!strstr(e->d_name, ".tmp."), "%s/%s left behind", dir, e->d_name);
    closedir(d);
    char state[2400];
    snprintf(state, sizeof state, "%s/checkpoint", dir);
    char *text = dt_test_read_file(state, NULL);
    if (!text) {
        ck_assert_msg(dt_test_ckpt_max(dir) < 0, "%s: missing, but checkpoints exist", state);
        return;
    }
    for (char *q = text; (q = strchr(q, '"')) != NULL;) {
        char *end = strchr(q + 1, '"');
        ck_assert_ptr_nonnull(end);
        *end = '\0';
        char path[2400];
        snprintf(path, sizeof path, "%s/%s", dir, q + 1);
        ck_assert_msg(access(path, F_OK) == 0, "%s lists %s, which is gone", state, q + 1);
        q = end + 1;
    }
    free(text);
}

/* How many lines of a role's log hold needle. */
static int count_lines(const char *log_name, const char *needle) {
    char *log = dt_test_job_read_log(&w, log_name);
    int n = 0;
    for (char *p = log; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    free(log);
    return n;
}

static void expect_log(const char *log_name, const char *needle, pid_t pid) {
    ck_assert_msg(dt_test_job_wait_log(&w, log_name, needle, EVENT_MS, pid),
                  "%s never logged \"%s\"; logs:%s", log_name, needle, dt_test_job_report(&w));
}

/* ---- the disk fills mid-job --------------------------------------------- */

/* The job is held open by the test, not by its length: both workers are
 * stopped (SIGSTOP) while the disk fills and while it is emptied, so the
 * global step cannot reach max_steps before the chief has met the full disk
 * and, after it, written summaries again. Between the two the chief runs
 * alone until it logs both drops; a job of 40,000 steps ends long after
 * that (a summary every 5 steps, a save due at its first step). */
START_TEST(full_disk_mid_job) {
    if (!mount_log_dir("full_disk_mid_job")) return;
    static const char *const sets[] = {"max_steps=40000", "summary_steps=5", NULL};
    world_init(2, sets);
    int64_t max_steps = dt_test_job_max_steps(&w);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps0");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1");
    dt_test_job_expect_ckpt_after(&w, -1, chief, EVENT_MS);

    dt_test_job_hold(&w, worker, "worker1");
    dt_test_job_hold(&w, chief, "chief");
    char filler[1200];
    fill_disk(filler, sizeof filler);
    /* The chief's clock runs while it is stopped: past save_model_secs (1)
     * since its last save, one is due at its next step, whatever the load. */
    dt_test_sleep_ms(1100);
    dt_test_job_release(&w, chief, "chief");
    expect_log("chief", "summaries dropped", chief);
    expect_log("chief", "training goes on, retrying in", chief);
    ck_assert_msg(dt_test_alive(chief), "the chief died on a full disk; logs:%s",
                  dt_test_job_report(&w));
    dt_test_job_hold(&w, chief, "chief");
    ck_assert_int_eq(unlink(filler), 0);
    dt_test_job_release(&w, chief, "chief");
    dt_test_job_release(&w, worker, "worker1");
    expect_log("chief", "summaries resumed", chief);

    pid_t pids[] = {ps, chief, worker};
    const char *names[] = {"ps0", "chief", "worker1"};
    dt_test_job_expect_done(&w, pids, names, 3, JOB_TIMEOUT_MS);
    ck_assert_int_eq(dt_test_ckpt_max(w.log_dir), max_steps);
    ck_assert_int_ge(check_event_files(w.log_dir), 1);
    check_ckpt_files(w.log_dir);
    /* Logged once per interval, not once per dropped summary. */
    char *log = dt_test_job_read_log(&w, "chief");
    char *resumed = strstr(log, "summaries resumed");
    char *after = resumed ? strstr(resumed, " after ") : NULL;
    long dropped = after ? strtol(after + 7, NULL, 10) : 0;
    free(log);
    int lines = count_lines("chief", "summaries dropped:");
    ck_assert_msg(dropped >= 1 && lines >= 1 && (dropped == 1 || lines < dropped),
                  "%d lines for %ld dropped summaries", lines, dropped);
}
END_TEST

/* ---- the disk is full at the final checkpoint ---------------------------- */

START_TEST(full_disk_at_final_save) {
    if (!mount_log_dir("full_disk_at_final_save")) return;
    static const char *const sets[] = {"max_steps=300", "summary_steps=10", "final_save_secs=3",
                                       NULL};
    world_init(1, sets);
    int64_t max_steps = dt_test_job_max_steps(&w);
    /* Full before the chief starts, so the final save is sure to meet it. */
    char filler[1200];
    fill_disk(filler, sizeof filler);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps0");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    dt_test_job_expect_exit(&w, chief, "chief", JOB_TIMEOUT_MS, 75);
    ck_assert_msg(dt_test_job_log_has(&w, "chief", "final checkpoint at global_step"),
                  "no give-up line; logs:%s", dt_test_job_report(&w));
    /* Told the job ended: the ps does not wait for a chief that is gone. */
    dt_test_job_expect_exit(&w, ps, "ps0", EVENT_MS, 0);
    check_ckpt_files(w.log_dir);

    ck_assert_int_eq(unlink(filler), 0);
    dt_test_job_run(&w, "-again", JOB_TIMEOUT_MS);
    ck_assert_int_eq(dt_test_ckpt_max(w.log_dir), max_steps);
    ck_assert_int_ge(check_event_files(w.log_dir), 1);
    check_ckpt_files(w.log_dir);
}
END_TEST

/* ---- the disk fills while the best model is kept ------------------------ */

/* A csv of n rows of y = 3 a - 2 b + small noise, in the test's dir. */
static void write_plane(const char *name, int n, unsigned seed, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", w.dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "y,a,b\n");
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        double a = (double)(seed >> 8 & 0xffff) / 32768.0 - 1;
        seed = seed * 1103515245u + 12345u;
        double b = (double)(seed >> 8 & 0xffff) / 32768.0 - 1;
        fprintf(f, "%.6f,%.6f,%.6f\n", 3 * a - 2 * b + 0.01 * (double)(i % 7 - 3), a, b);
    }
    ck_assert_int_eq(fclose(f), 0);
}

/* The best model's global_step into *step: 1 when its header reads, 0
 * when there is none, negative when it cannot be read. */
static int best_step(int64_t *step) {
    dt_err err;
    dt_err_clear(&err);
    char path[2400];
    dt_safetensors_meta m;
    memset(&m, 0, sizeof m);
    int rc = dt_ckpt_best_meta(w.log_dir, &m, path, sizeof path, &err);
    *step = m.global_step;
    dt_safetensors_meta_deinit(&m);
    return rc;
}

/* Issue 32's best model on a full disk: a slow-learning job evaluates every
 * 20 steps, each evaluation better than the last, so each writes the best
 * model. Once it has one, the disk fills: the next writes fail, said as a
 * warning, the job trains on and the best model on disk still reads, none
 * older than before. With space again, a later evaluation's best is
 * written, every role exits 0 and no temporary file is left. */
START_TEST(full_disk_best_model) {
    if (!mount_log_dir("full_disk_best_model")) return;
    char train[1200], eval[1200], train_set[1300], eval_set[1300];
    write_plane("train.csv", 400, 7, train, sizeof train);
    write_plane("eval.csv", 100, 8, eval, sizeof eval);
    snprintf(train_set, sizeof train_set, "train_data=%s", train);
    snprintf(eval_set, sizeof eval_set, "eval_data=%s", eval);
    const char *const sets[] = {"data=csv",
                                "label_column=y",
                                "features=2",
                                train_set,
                                eval_set,
                                "eval_steps=20",
                                "max_steps=20000",
                                "lr_schedule=constant",
                                "learning_rate=0.0005",
                                NULL};
    world_init(1, sets);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps0");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    int64_t step = -1, before = -1, on_full = -1;
    long long deadline = dt_test_now_ms() + EVENT_MS;
    while (best_step(&step) != 1 && dt_test_now_ms() < deadline && dt_test_alive(chief))
        dt_test_sleep_ms(10);
    ck_assert_msg(best_step(&step) == 1, "no best model; logs:%s", dt_test_job_report(&w));

    dt_test_job_hold(&w, chief, "chief");
    ck_assert_int_eq(best_step(&before), 1);
    char filler[1200];
    fill_disk(filler, sizeof filler);
    dt_test_job_release(&w, chief, "chief");
    expect_log("chief", "chief: best model: ", chief);
    ck_assert_msg(dt_test_job_log_has(&w, "chief", "the previous one stands"),
                  "the warning does not say the old best stands; logs:%s", dt_test_job_report(&w));
    dt_test_job_hold(&w, chief, "chief");
    ck_assert_msg(best_step(&on_full) == 1 && on_full >= before,
                  "on the full disk the best model is step %lld (was %lld); logs:%s",
                  (long long)on_full, (long long)before, dt_test_job_report(&w));
    ck_assert_int_eq(unlink(filler), 0);
    dt_test_job_release(&w, chief, "chief");

    pid_t pids[] = {ps, chief};
    const char *names[] = {"ps0", "chief"};
    dt_test_job_expect_done(&w, pids, names, 2, JOB_TIMEOUT_MS);
    ck_assert_msg(best_step(&step) == 1 && step > on_full,
                  "after the disk emptied the best model is step %lld (on the full disk %lld)",
                  (long long)step, (long long)on_full);
    check_ckpt_files(w.log_dir);
}
END_TEST

/* ---- the log dir is deleted mid-job ------------------------------------- */

/* Size of the newest event file in dir, or -1. */
static long event_file_size(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    long size = -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20) != 0) continue;
        char path[2400];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) == 0 && st.st_size > size) size = (long)st.st_size;
    }
    closedir(d);
    return size;
}

START_TEST(log_dir_deleted) {
    /* save_model_secs 60: a checkpoint in the new dir comes from the
     * recreation, not from the timer. */
    static const char *const sets[] = {"max_steps=100000000", "summary_steps=5",
                                       "save_model_secs=60", NULL};
    world_init(1, sets);
    pid_t ps = dt_test_job_start(&w, "ps", 0, "ps0");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    expect_log("chief", "writing summaries to", chief);
    (void)ps;

    /* The chief may create a file while the tree goes: try again. */
    long long deadline = dt_test_now_ms() + EVENT_MS;
    int removed;
    while ((removed = dt_test_rmtree(w.log_dir) == 0) == 0 && dt_test_now_ms() < deadline)
        dt_test_sleep_ms(10);
    ck_assert_msg(removed, "could not delete %s within %d ms", w.log_dir, EVENT_MS);
    expect_log("chief", "vanished or was replaced", chief);
    ck_assert_msg(dt_test_job_log_has(&w, "chief", w.log_dir), "the error names no dir");
    ck_assert_msg(dt_test_ckpt_wait_after(w.log_dir, -1, chief, EVENT_MS) >= 0,
                  "no checkpoint in the recreated dir; logs:%s", dt_test_job_report(&w));
    /* Summaries go on in the new dir: its event file grows past file_version. */
    long first = -1, now = -1;
    deadline = dt_test_now_ms() + EVENT_MS;
    while (dt_test_now_ms() < deadline) {
        now = event_file_size(w.log_dir);
        if (first < 0) first = now;
        if (first > 0 && now > first) break;
        dt_test_sleep_ms(20);
    }
    ck_assert_msg(first > 0 && now > first, "the new event file does not grow (%ld -> %ld)", first,
                  now);
    /* The new dir is locked again. */
    char lock[1200];
    snprintf(lock, sizeof lock, "%s/dtrain.lock", w.log_dir);
    int fd = open(lock, O_RDWR);
    ck_assert_msg(fd >= 0, "%s: %s", lock, strerror(errno));
    int locked = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd);
    ck_assert_msg(locked, "%s is not locked", lock);

    ck_assert_int_eq(kill(chief, SIGTERM), 0);
    dt_test_job_expect_exit(&w, chief, "chief", EVENT_MS, 128 + SIGTERM);
    ck_assert_int_ge(check_event_files(w.log_dir), 1);
    check_ckpt_files(w.log_dir);
}
END_TEST

Suite *storage_suite(void) {
    Suite *s = suite_create("storage");
    TCase *tc = dt_test_job_tcase(s, "storage", TEST_TIMEOUT_S, setup, teardown);
    tcase_add_unchecked_fixture(tc, NULL, unmount_leftovers);
    tcase_add_test(tc, full_disk_mid_job);
    tcase_add_test(tc, full_disk_at_final_save);
    tcase_add_test(tc, full_disk_best_model);
    tcase_add_test(tc, log_dir_deleted);
    return s;
}
