/*
 * checkpoint: a log dir's checkpoints, its "checkpoint" state file,
 * retention and restore (see checkpoint.h). Each checkpoint is one
 * safetensors file (safetensors.c); the state file is TF-style text.
 *
 * Durability: every file is replaced atomically (fileio.h). The new
 * checkpoint is durable before the state file names it, and old checkpoints
 * are deleted only after the state file that drops them is durable. A crash
 * at any point leaves a loadable checkpoint behind (possibly an unlisted
 * one, which restore finds by scanning), and at worst files the state file
 * no longer lists, which the next save ranks by step with the rest
 * (retention, checkpoint.h).
 *
 * Threading: no globals of its own; calls on different log dirs may run
 * concurrently. Two savers in the same log dir are not supported (the state
 * file update is read-modify-write); dtrain has one saver, the chief, which
 * holds the log dir's lock (dt_ckpt_lock_dir).
 */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "dirlock.h"
#include "fileio.h"
#include "log.h"
#include "text.h"

#define STATE_FILE "checkpoint"
#define STATE_MAX (1 << 20) /* a state file for ~20k checkpoints */
#define NAME_CAP 256        /* a file name in the log dir, with its NUL */
#define JOIN_CAP 4096       /* "<log_dir>/<name>" */

/* ---- the state file ------------------------------------------------------- */

typedef struct {
    char latest[NAME_CAP]; /* model_checkpoint_path; "" when absent */
    int count, cap;
    char (*all)[NAME_CAP]; /* (count) all_model_checkpoint_paths, oldest first */
    char best[NAME_CAP];   /* best_model_checkpoint_path; "" when absent */
} ckpt_state;

static void state_free(ckpt_state *st) {
    free(st->all);
    memset(st, 0, sizeof *st);
}

static int state_push(ckpt_state *st, const char *name) {
    if (st->count == st->cap) {
        int cap = st->cap ? st->cap * 2 : 16;
        void *p = dt_realloc(st->all, (size_t)cap * sizeof *st->all);
        if (!p) return -1;
        st->all = p;
        st->cap = cap;
    }
    snprintf(st->all[st->count++], NAME_CAP, "%s", name);
    return 0;
}

static int join(char *buf, size_t cap, const char *dir, const char *name, dt_err *err) {
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap)
        return dt_err_set(err, DT_EINVAL, "%s: path of %s is too long", dir, name);
    return 0;
}

/* Step of "model.ckpt-<step>.safetensors" with the step written as a save
 * writes it (no leading zero, so one step has one name), or -1 for any
 * other name: those are not dtrain checkpoints, and retention never
 * deletes them. */
static int64_t ckpt_step(const char *name) {
    static const char prefix[] = "model.ckpt-", suffix[] = ".safetensors";
    size_t len = strlen(name), pl = sizeof prefix - 1, sl = sizeof suffix - 1;
    if (len <= pl + sl || strncmp(name, prefix, pl) != 0 || strcmp(name + len - sl, suffix) != 0)
        return -1;
    char digits[24];
    size_t nd = len - pl - sl;
    if (nd >= sizeof digits || (nd > 1 && name[pl] == '0')) return -1;
    memcpy(digits, name + pl, nd);
    digits[nd] = '\0';
    uint64_t v;
    if (dt_text_parse_decimal(digits, INT64_MAX, &v) < 0) return -1;
    return (int64_t)v;
}

typedef struct {
    int64_t step;
    char name[NAME_CAP];
} found_ckpt;

static int by_step(const void *a, const void *b) {
    const found_ckpt *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Fills st with the dir's checkpoints, by step, oldest first: the regular
 * files named model.ckpt-<step>.safetensors (a directory or a symlink of
 * that name is someone else's). A missing dir holds none. */
static int state_scan(const char *log_dir, ckpt_state *st, dt_err *err) {
    memset(st, 0, sizeof *st);
    DIR *dir = opendir(log_dir);
    if (!dir) {
        if (errno == ENOENT) return 0;
        return dt_err_set(err, DT_EIO, "%s: open directory: %s", log_dir, strerror(errno));
    }
    int rc = 0, count = 0, cap = 0;
    found_ckpt *found = NULL;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(dir);
        if (!de) {
            if (errno)
                rc = dt_err_set(err, DT_EIO, "%s: read directory: %s", log_dir, strerror(errno));
            break;
        }
        int64_t step = ckpt_step(de->d_name);
        if (step < 0 || strlen(de->d_name) >= NAME_CAP) continue;
        char path[JOIN_CAP];
        struct stat sb;
        if (join(path, sizeof path, log_dir, de->d_name, NULL) < 0 || lstat(path, &sb) != 0 ||
            !S_ISREG(sb.st_mode))
            continue;
        if (count == cap) {
            cap = cap ? cap * 2 : 16;
            void *p = dt_realloc(found, (size_t)cap * sizeof *found);
            if (!p) {
                rc = dt_err_set(err, DT_ENOMEM, "%s: out of memory listing checkpoints", log_dir);
                break;
            }
            found = p;
        }
        found[count].step = step;
        snprintf(found[count].name, sizeof found[count].name, "%s", de->d_name);
        count++;
    }
    closedir(dir);
    if (rc == 0 && count > 0) {
        qsort(found, (size_t)count, sizeof *found, by_step);
        for (int i = 0; i < count && rc == 0; i++)
            if (state_push(st, found[i].name) < 0)
                rc = dt_err_set(err, DT_ENOMEM, "%s: out of memory listing checkpoints", log_dir);
        if (rc == 0) snprintf(st->latest, sizeof st->latest, "%s", found[count - 1].name);
    }
    free(found);
    if (rc < 0) state_free(st);
    return rc;
}

/* Parses one line 'key: "value"' (spaces around allowed). Returns 0 and
 * fills key/value, 1 for a blank or comment line, or -1 with why set. */
static int parse_state_line(char *line, const char **key, const char **value, const char **why) {
    char *p = line;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '\0' || *p == '#') return 1;
    *key = p;
    while ((*p >= 'a' && *p <= 'z') || *p == '_')
        p++;
    if (p == *key) return *why = "expected a key such as model_checkpoint_path", -1;
    char *key_end = p;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p != ':') return *why = "expected ':' after the key", -1;
    *key_end = '\0';
    p++;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p != '"') return *why = "expected a quoted value", -1;
    *value = ++p;
    while (*p && *p != '"') {
        if (*p == '\\') return *why = "escapes in the value are not supported", -1;
        if ((unsigned char)*p < 0x20) return *why = "control character in the value", -1;
        p++;
    }
    if (*p != '"') return *why = "unterminated quoted value", -1;
    *p++ = '\0';
    while (*p == ' ' || *p == '\t' || *p == '\r')
        p++;
    if (*p != '\0') return *why = "unexpected text after the value", -1;
    return 0;
}

/* Adds one parsed line of path (line line_no) to st. Entries are file
 * names in the log dir; anything else could point deletion or loading
 * outside it. */
static int state_add(ckpt_state *st, const char *path, int line_no, const char *key,
                     const char *value, dt_err *err) {
    size_t vlen = strlen(value);
    if (vlen == 0 || vlen >= NAME_CAP || strchr(value, '/') || strcmp(value, ".") == 0 ||
        strcmp(value, "..") == 0)
        return dt_err_set(err, DT_ECORRUPT, "%s:%d: \"%.60s\" is not a file name in the log dir",
                          path, line_no, value);
    if (strcmp(key, "model_checkpoint_path") == 0) {
        if (st->latest[0])
            return dt_err_set(err, DT_ECORRUPT, "%s:%d: model_checkpoint_path given twice", path,
                              line_no);
        snprintf(st->latest, sizeof st->latest, "%s", value);
        return 0;
    }
    if (strcmp(key, "all_model_checkpoint_paths") == 0)
        return state_push(st, value) < 0 ? dt_err_set(err, DT_ENOMEM, "%s: out of memory", path)
                                         : 0;
    if (strcmp(key, "best_model_checkpoint_path") == 0) {
        snprintf(st->best, sizeof st->best, "%s", value);
        return 0;
    }
    return dt_err_set(err, DT_ECORRUPT, "%s:%d: unknown key \"%s\"", path, line_no, key);
}

/* Parses the state file's text (read from path, NUL-terminated; its lines
 * are cut in place) into st. */
static int state_parse(char *text, const char *path, ckpt_state *st, dt_err *err) {
    int line_no = 0;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        line_no++;
        const char *key = NULL, *value = NULL, *why = NULL;
        int r = parse_state_line(line, &key, &value, &why);
        if (r < 0) return dt_err_set(err, DT_ECORRUPT, "%s:%d: %s", path, line_no, why);
        if (r == 0 && (r = state_add(st, path, line_no, key, value, err)) < 0) return r;
        line = nl ? nl + 1 : NULL;
    }
    return 0;
}

/* Reads "<log_dir>/checkpoint". DT_ENOTFOUND when absent, DT_ECORRUPT
 * naming the line when malformed. */
static int state_load(const char *log_dir, ckpt_state *st, dt_err *err) {
    memset(st, 0, sizeof *st);
    char path[JOIN_CAP];
    int rc = join(path, sizeof path, log_dir, STATE_FILE, err);
    if (rc < 0) return rc;
    char *text = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = dt_err_set(err, errno == ENOENT ? DT_ENOTFOUND : DT_EIO, "%s: open: %s", path,
                        strerror(errno));
        goto fail;
    }
    text = dt_malloc(STATE_MAX + 1);
    if (!text) {
        rc = dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    ssize_t got = dt_fileio_read_full(fd, text, STATE_MAX + 1);
    if (got < 0) {
        rc = dt_err_set(err, DT_EIO, "%s: read: %s", path, strerror(errno));
        goto fail;
    }
    if (got > STATE_MAX) {
        rc = dt_err_set(err, DT_ECORRUPT, "%s: larger than %d bytes", path, STATE_MAX);
        goto fail;
    }
    if (memchr(text, '\0', (size_t)got)) {
        rc = dt_err_set(err, DT_ECORRUPT, "%s: contains a NUL byte", path);
        goto fail;
    }
    text[got] = '\0';
    rc = state_parse(text, path, st, err);
fail:
    free(text);
    if (fd >= 0) close(fd);
    if (rc < 0) state_free(st);
    return rc;
}

static int emit_state(int fd, const void *ctx, const char *tmp, dt_err *err) {
    const ckpt_state *st = ctx;
    char line[NAME_CAP + 64];
    int n = snprintf(line, sizeof line, "model_checkpoint_path: \"%s\"\n", st->latest);
    if (dt_fileio_write_all(fd, line, (size_t)n) < 0) goto io;
    for (int i = 0; i < st->count; i++) {
        n = snprintf(line, sizeof line, "all_model_checkpoint_paths: \"%s\"\n", st->all[i]);
        if (dt_fileio_write_all(fd, line, (size_t)n) < 0) goto io;
    }
    n = st->best[0] ? snprintf(line, sizeof line, "best_model_checkpoint_path: \"%s\"\n", st->best)
                    : 0;
    if (n > 0 && dt_fileio_write_all(fd, line, (size_t)n) < 0) goto io;
    return 0;
io:
    return dt_err_set(err, DT_EIO, "%s: write: %s", tmp, strerror(errno));
}

/* ---- retention ------------------------------------------------------------ */

/* Test-only fault injection (checkpoint.h): with DT_TEST_CKPT_KILL set to
 * point, the process SIGKILLs itself here, leaving the dir as a crash at
 * this moment would. Unset, as in every real run, it is one getenv. */
static void crash_point(const char *point) {
    const char *want = getenv("DT_TEST_CKPT_KILL");
    if (want && strcmp(want, point) == 0) raise(SIGKILL);
}

/* Test-only (checkpoint.h): with DT_TEST_CKPT_STOP=after_save the process
 * SIGSTOPs itself once, after its first save past step 0 is named by the
 * state file, so a test can hold a job exactly when a checkpoint with
 * trained values exists, however fast the job runs. */
static void stop_point(int64_t step) {
    static atomic_int stopped;
    const char *want = getenv("DT_TEST_CKPT_STOP");
    if (step > 0 && want && strcmp(want, "after_save") == 0 && !atomic_exchange(&stopped, 1))
        raise(SIGSTOP);
}

/* The new list is built from the files present, not from the old state
 * file; that is read only to say so when it was unreadable. */
static void warn_bad_state(const char *log_dir) {
    ckpt_state old;
    dt_err state_err;
    dt_err_clear(&state_err);
    int rc = state_load(log_dir, &old, &state_err);
    if (rc == 0)
        state_free(&old);
    else if (rc != DT_ENOTFOUND)
        dt_log(DT_LOG_WARN, "checkpoint: %s; writing a new one from the checkpoint files present",
               state_err.msg);
}

/* 1 when log_dir holds the best model as a regular file (as state_scan
 * takes checkpoints: a directory or symlink of that name is someone
 * else's). */
static int best_present(const char *log_dir) {
    char path[JOIN_CAP];
    struct stat sb;
    return join(path, sizeof path, log_dir, DT_CKPT_BEST_FILE, NULL) == 0 &&
           lstat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Makes the dir hold this run's history up to anchor, a checkpoint in it
 * that is durable (just saved, or just restored). The state file names
 * anchor as latest and lists the newest max_to_keep (<= 0: all) of the
 * checkpoints present whose step is at most anchor's, by step. The list is
 * rebuilt from the files every time: a file an old list lost (a chief killed
 * between its state update and its deletions) is ranked by its step like any
 * other, never kept as if it were new. Only once that state file is durable
 * are the checkpoints it leaves out deleted: the older ones beyond
 * max_to_keep and, with drop_futures, those above anchor's step. Those are
 * stale futures: written by an earlier incarnation that got further than the
 * checkpoint this run restored (one skipped as corrupt, or rolled back from
 * by editing the state file); kept, they would outrank every new save. Files
 * that are not checkpoints (state_scan's) are never deleted. On failure
 * nothing is deleted and the old state file stands. */
static int retain(const char *log_dir, const char *anchor, int max_to_keep, int drop_futures,
                  dt_err *err) {
    int64_t top = ckpt_step(anchor);
    DT_ASSERT(top >= 0);
    char state_path[JOIN_CAP];
    ckpt_state present;
    int rc = join(state_path, sizeof state_path, log_dir, STATE_FILE, err);
    if (rc < 0) return rc;
    if ((rc = state_scan(log_dir, &present, err)) < 0) return rc;
    /* present is by step: the history is its prefix up to anchor. */
    int end = 0;
    while (end < present.count && ckpt_step(present.all[end]) <= top)
        end++;
    if (end == 0 || strcmp(present.all[end - 1], anchor) != 0) {
        rc = dt_err_set(err, DT_EIO,
                        "%s/%s: gone, or not a regular file, before the state file "
                        "could name it",
                        log_dir, anchor);
        goto fail;
    }
    int begin = max_to_keep > 0 && end > max_to_keep ? end - max_to_keep : 0;
    ckpt_state kept = present; /* a view: no list of its own */
    snprintf(kept.latest, sizeof kept.latest, "%s", anchor);
    if (best_present(log_dir)) snprintf(kept.best, sizeof kept.best, "%s", DT_CKPT_BEST_FILE);
    kept.all += begin;
    kept.count = end - begin;
    if ((rc = dt_fileio_write_atomic(state_path, emit_state, &kept, err)) < 0) goto fail;

    int futures = drop_futures ? present.count - end : 0;
    if (begin > 0 || futures > 0) crash_point("before_delete");
    for (int i = 0; i < present.count; i++) {
        int future = i >= end;
        if ((i >= begin && !future) || (future && !drop_futures)) continue;
        char old[JOIN_CAP];
        if (join(old, sizeof old, log_dir, present.all[i], NULL) < 0) continue;
        if (future)
            dt_log(DT_LOG_INFO,
                   "checkpoint: deleting %s: a stale future, written before this run went back "
                   "to an earlier step (%s is now the latest)",
                   old, anchor);
        if (unlink(old) != 0 && errno != ENOENT)
            dt_log(DT_LOG_WARN, "checkpoint: %s: cannot delete old checkpoint: %s", old,
                   strerror(errno));
    }
    rc = 0;
fail:
    state_free(&present);
    return rc;
}

/* dt_ckpt_save_in_dir, with rows (may be NULL) streamed after ts. */
static int save_in_dir(const char *log_dir, const dt_tensors *ts, dt_safetensors_rows *const *rows,
                       int nrows, const dt_safetensors_meta *meta, int max_to_keep, char *path_out,
                       size_t path_cap, dt_err *err) {
    DT_ASSERT(log_dir && ts && meta);
    char name[NAME_CAP], path[JOIN_CAP];
    int rc;
    if (meta->global_step < 0)
        return dt_err_set(err, DT_EINVAL, "%s: save: global_step %lld is negative", log_dir,
                          (long long)meta->global_step);
    snprintf(name, sizeof name, "model.ckpt-%lld.safetensors", (long long)meta->global_step);
    if ((rc = join(path, sizeof path, log_dir, name, err)) < 0) return rc;
    if (path_out && strlen(path) >= path_cap)
        return dt_err_set(err, DT_EINVAL, "%s: path_out holds %zu bytes, the path needs %zu", path,
                          path_cap, strlen(path) + 1);
    if ((rc = dt_fileio_mkdir_p(log_dir, err)) < 0) return rc;
    /* A file of this step already there (listed, or left by a save cut
     * short) is replaced by the rename: it is this save's from then on and
     * stays even if the state file cannot be written. */
    struct stat sb;
    int existed = lstat(path, &sb) == 0;
    rc = nrows > 0 ? dt_safetensors_save_rows(path, ts, rows, nrows, meta, err)
                   : dt_safetensors_save(path, ts, meta, err);
    if (rc < 0) return rc;
    crash_point("before_state");
    warn_bad_state(log_dir);
    if ((rc = retain(log_dir, name, max_to_keep, 1, err)) < 0) {
        /* The old state file stands; a new checkpoint it does not list
         * would be invisible to tools that read it, and it holds space the
         * disk lacks. The caller retries the whole save. */
        if (!existed && unlink(path) != 0 && errno != ENOENT)
            dt_log(DT_LOG_WARN, "checkpoint: %s: cannot remove after the state file failed: %s",
                   path, strerror(errno));
        return rc;
    }
    if (path_out) snprintf(path_out, path_cap, "%s", path);
    stop_point(meta->global_step);
    return 0;
}

int dt_ckpt_save_in_dir(const char *log_dir, const dt_tensors *ts, const dt_safetensors_meta *meta,
                        int max_to_keep, char *path_out, size_t path_cap, dt_err *err) {
    return save_in_dir(log_dir, ts, NULL, 0, meta, max_to_keep, path_out, path_cap, err);
}

int dt_ckpt_save_rows_in_dir(const char *log_dir, const dt_tensors *ts,
                             dt_safetensors_rows *const *rows, int nrows,
                             const dt_safetensors_meta *meta, int max_to_keep, char *path_out,
                             size_t path_cap, dt_err *err) {
    DT_ASSERT(rows && nrows > 0);
    return save_in_dir(log_dir, ts, rows, nrows, meta, max_to_keep, path_out, path_cap, err);
}

int dt_ckpt_retain(const char *log_dir, int max_to_keep, dt_err *err) {
    DT_ASSERT(log_dir);
    dt_tensors ts;
    char path[JOIN_CAP];
    int rc = dt_ckpt_restore_latest(log_dir, &ts, NULL, path, sizeof path, err);
    if (rc <= 0) return rc;
    dt_tensors_deinit(&ts);
    const char *name = strrchr(path, '/') + 1; /* restore joins "<log_dir>/<name>" */
    /* A file the state file names by another name anchors nothing: there
     * is no step to rank the others against. */
    if (ckpt_step(name) < 0) return 0;
    /* No newer checkpoint was saved: files above the one restore picked
     * (corrupt ones it skipped) stay, as restore keeps them. */
    rc = retain(log_dir, name, max_to_keep, 0, err);
    return rc < 0 ? rc : 1;
}

int64_t dt_ckpt_latest_step(const char *log_dir) {
    ckpt_state st;
    int64_t step = -1;
    if (state_load(log_dir, &st, NULL) == 0) {
        char path[JOIN_CAP];
        struct stat sb;
        if (st.latest[0] && join(path, sizeof path, log_dir, st.latest, NULL) == 0 &&
            stat(path, &sb) == 0)
            step = ckpt_step(st.latest);
        state_free(&st);
        if (step >= 0) return step;
    }
    if (state_scan(log_dir, &st, NULL) < 0) return -1;
    if (st.latest[0]) step = ckpt_step(st.latest);
    state_free(&st);
    return step;
}

int dt_ckpt_latest_meta(const char *log_dir, dt_safetensors_meta *meta, char *path_out,
                        size_t path_cap, dt_err *err) {
    int64_t step = dt_ckpt_latest_step(log_dir);
    if (step < 0) return 0;
    char name[NAME_CAP], path[JOIN_CAP];
    snprintf(name, sizeof name, "model.ckpt-%lld.safetensors", (long long)step);
    int rc = join(path, sizeof path, log_dir, name, err);
    if (rc == 0) rc = dt_safetensors_load_meta(path, meta, err);
    if (rc < 0) return rc;
    if (path_out) snprintf(path_out, path_cap, "%s", path);
    return 1;
}

int dt_ckpt_save_best(const char *log_dir, const dt_tensors *ts, dt_safetensors_rows *const *rows,
                      int nrows, const dt_safetensors_meta *meta, dt_err *err) {
    DT_ASSERT(log_dir && ts && meta && meta->has_eval_loss && (nrows == 0 || rows));
    char path[JOIN_CAP], state_path[JOIN_CAP];
    int rc = join(path, sizeof path, log_dir, DT_CKPT_BEST_FILE, err);
    if (rc == 0) rc = join(state_path, sizeof state_path, log_dir, STATE_FILE, err);
    if (rc == 0) rc = dt_fileio_mkdir_p(log_dir, err);
    if (rc == 0)
        rc = nrows > 0 ? dt_safetensors_save_rows(path, ts, rows, nrows, meta, err)
                       : dt_safetensors_save(path, ts, meta, err);
    if (rc < 0) return rc;
    /* Named now when there is a state file; else the first save names it
     * (retain finds the file). An unreadable state file is the next
     * save's to replace. */
    ckpt_state st;
    dt_err state_err;
    dt_err_clear(&state_err);
    if (state_load(log_dir, &st, &state_err) < 0) return 0;
    if (strcmp(st.best, DT_CKPT_BEST_FILE) != 0) {
        snprintf(st.best, sizeof st.best, "%s", DT_CKPT_BEST_FILE);
        rc = dt_fileio_write_atomic(state_path, emit_state, &st, err);
    }
    state_free(&st);
    return rc;
}

int dt_ckpt_best_meta(const char *log_dir, dt_safetensors_meta *meta, char *path_out,
                      size_t path_cap, dt_err *err) {
    char path[JOIN_CAP];
    if (!best_present(log_dir)) return 0;
    int rc = join(path, sizeof path, log_dir, DT_CKPT_BEST_FILE, err);
    if (rc == 0 && strlen(path) >= path_cap)
        rc = dt_err_set(err, DT_EINVAL, "%s: path_out holds %zu bytes", path, path_cap);
    if (rc == 0) rc = dt_safetensors_load_meta(path, meta, err);
    if (rc == 0 && !meta->has_eval_loss) {
        dt_safetensors_meta_deinit(meta);
        rc = dt_err_set(err, DT_ECORRUPT, "%s: records no eval_loss: not a best model", path);
    }
    if (rc < 0) return rc;
    snprintf(path_out, path_cap, "%s", path);
    return 1;
}

int dt_ckpt_job_id_load(const char *log_dir, char *out, dt_err *err) {
    char path[JOIN_CAP];
    int rc = join(path, sizeof path, log_dir, DT_CKPT_JOB_ID_FILE, err);
    if (rc < 0) return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return 0;
    if (fd < 0) return dt_err_set(err, DT_EIO, "%s: open: %s", path, strerror(errno));
    char text[64];
    ssize_t n = dt_fileio_read_full(fd, text, sizeof text - 1);
    int saved = errno;
    close(fd);
    if (n < 0) return dt_err_set(err, DT_EIO, "%s: read: %s", path, strerror(saved));
    text[n] = '\0';
    if (n > 0 && text[n - 1] == '\n') text[--n] = '\0';
    if (!dt_safetensors_job_id_ok(text))
        return dt_err_set(err, DT_ECORRUPT,
                          "%s: \"%.40s\" is not a job id (32 lowercase hex digits); restore the "
                          "file or delete it to give the job a new id",
                          path, text);
    memcpy(out, text, DT_SAFETENSORS_JOB_ID_MAX);
    return 1;
}

static int emit_job_id(int fd, const void *ctx, const char *tmp, dt_err *err) {
    char line[DT_SAFETENSORS_JOB_ID_MAX + 1];
    int n = snprintf(line, sizeof line, "%s\n", (const char *)ctx);
    if (dt_fileio_write_all(fd, line, (size_t)n) < 0)
        return dt_err_set(err, DT_EIO, "%s: write: %s", tmp, strerror(errno));
    return 0;
}

int dt_ckpt_job_id_save(const char *log_dir, const char *job_id, dt_err *err) {
    DT_ASSERT(dt_safetensors_job_id_ok(job_id));
    char path[JOIN_CAP];
    int rc = join(path, sizeof path, log_dir, DT_CKPT_JOB_ID_FILE, err);
    if (rc == 0) rc = dt_fileio_write_atomic(path, emit_job_id, job_id, err);
    return rc;
}

/* 1 when log_dir/name was modified no earlier than the state file (or
 * there is no state file). */
static int written_after_state(const char *log_dir, const char *name) {
    char state[JOIN_CAP], path[JOIN_CAP];
    struct stat ss, cs;
    if (join(state, sizeof state, log_dir, STATE_FILE, NULL) < 0 ||
        join(path, sizeof path, log_dir, name, NULL) < 0 || stat(path, &cs) != 0)
        return 0;
    if (stat(state, &ss) != 0) return 1;
    return cs.st_mtim.tv_sec > ss.st_mtim.tv_sec ||
           (cs.st_mtim.tv_sec == ss.st_mtim.tv_sec && cs.st_mtim.tv_nsec >= ss.st_mtim.tv_nsec);
}

/* The order in which restore tries the checkpoints of st (the state file,
 * or the scan standing in for it) and disk (the files present), into
 * *out (malloc'd; the names are borrowed from st and disk) and *count.
 *
 * A save writes its checkpoint (fsynced, renamed into place) before it
 * names it in the state file; a kill between the two leaves a complete
 * checkpoint newer than the state file's latest, and written after the
 * state file. It is the job's last durable work, so it comes first (newest
 * first), then model_checkpoint_path, then the list from its end. One
 * older than the state file is not: the file was edited after it (an
 * operator rolling back), and the state file is obeyed. */
static int restore_order(const char *log_dir, const ckpt_state *st, const ckpt_state *disk,
                         const char ***out, int *count, dt_err *err) {
    const char **order = dt_malloc(((size_t)st->count + (size_t)disk->count + 1) * sizeof *order);
    if (!order) return dt_err_set(err, DT_ENOMEM, "%s: restore: out of memory", log_dir);
    int n = 0;
    int64_t listed = st->latest[0] ? ckpt_step(st->latest) : -1;
    for (int i = disk->count - 1; i >= 0 && ckpt_step(disk->all[i]) > listed; i--) {
        if (!written_after_state(log_dir, disk->all[i])) continue;
        if (n == 0)
            dt_log(DT_LOG_WARN,
                   "checkpoint: %s/%s is newer than the state file's latest (%s): a save was cut "
                   "short before naming it; taking it",
                   log_dir, disk->all[i], st->latest[0] ? st->latest : "none");
        order[n++] = disk->all[i];
    }
    if (st->latest[0]) order[n++] = st->latest;
    for (int i = st->count - 1; i >= 0; i--)
        if (strcmp(st->all[i], st->latest) != 0) order[n++] = st->all[i];
    *out = order;
    *count = n;
    return 0;
}

/* Loads the first of the n names in log_dir that loads, skipping (and
 * logging) those that are corrupt or gone. 1 with *out, *meta and
 * path_out filled; negative when one fails otherwise (I/O, memory), or
 * when none loads. */
static int load_first(const char *log_dir, const char *const *names, int n, dt_tensors *out,
                      dt_safetensors_meta *meta, char *path_out, size_t path_cap, dt_err *err) {
    int corrupt_seen = 0, rc;
    char last_msg[DT_ERR_MSG_MAX] = "";
    for (int i = 0; i < n; i++) {
        char path[JOIN_CAP];
        if ((rc = join(path, sizeof path, log_dir, names[i], err)) < 0) return rc;
        if (path_out && strlen(path) >= path_cap)
            return dt_err_set(err, DT_EINVAL, "%s: path_out holds %zu bytes, the path needs %zu",
                              path, path_cap, strlen(path) + 1);
        dt_err load_err;
        dt_err_clear(&load_err);
        rc = dt_safetensors_load(path, out, meta, &load_err);
        if (rc == 0) {
            if (path_out) snprintf(path_out, path_cap, "%s", path);
            return 1;
        }
        if (rc != DT_ECORRUPT && rc != DT_ENOTFOUND) return dt_err_set(err, rc, "%s", load_err.msg);
        /* Keep the bad file as evidence; just move on to an older one. */
        corrupt_seen |= rc == DT_ECORRUPT;
        snprintf(last_msg, sizeof last_msg, "%s", load_err.msg);
        dt_log(DT_LOG_WARN, "checkpoint: skipping %s: %s", path, load_err.msg);
    }
    return dt_err_set(err, corrupt_seen ? DT_ECORRUPT : DT_ENOTFOUND,
                      "%s: restore: none of the %d checkpoints loads (the oldest: %s)", log_dir, n,
                      last_msg);
}

int dt_ckpt_restore_latest(const char *log_dir, dt_tensors *out, dt_safetensors_meta *meta,
                           char *path_out, size_t path_cap, dt_err *err) {
    DT_ASSERT(log_dir && out);
    memset(out, 0, sizeof *out);
    ckpt_state st, disk;
    memset(&disk, 0, sizeof disk);
    const char **order = NULL;
    int n = 0;
    dt_err state_err;
    dt_err_clear(&state_err);
    int rc = state_load(log_dir, &st, &state_err);
    if (rc == DT_ENOTFOUND || (rc == 0 && !st.latest[0] && st.count == 0)) {
        /* No state file (or an empty one): a crash between a checkpoint's
         * rename and the state update must not lose it, so take the files
         * on disk, highest step first. */
        state_free(&st);
        if ((rc = state_scan(log_dir, &st, err)) < 0) return rc;
        if (st.count == 0) return 0;
        dt_log(DT_LOG_WARN, "checkpoint: %s has no state file; taking the highest step, %s",
               log_dir, st.latest);
    } else if (rc < 0) {
        state_free(&st); /* already empty; keeps ownership obvious */
        return dt_err_set(err, rc, "%s", state_err.msg);
    }
    if ((rc = state_scan(log_dir, &disk, err)) == 0 &&
        (rc = restore_order(log_dir, &st, &disk, &order, &n, err)) == 0)
        rc = load_first(log_dir, order, n, out, meta, path_out, path_cap, err);
    free(order);
    state_free(&disk);
    state_free(&st);
    return rc;
}

/* ---- the log dir's lock ------------------------------------------------ */

/* 1 for "<name>.tmp.<pid>" where name is the state file's, the job id
 * file's, the best model's or a checkpoint's: the temporaries dt_fileio_write_atomic makes in a log
 * dir. Anything else with ".tmp." in its name is not ours to remove. */
static int is_our_temp(const char *file) {
    const char *t = strstr(file, ".tmp.");
    uint64_t pid;
    char base[NAME_CAP];
    if (!t || (size_t)(t - file) >= sizeof base ||
        dt_text_parse_decimal(t + 5, INT64_MAX, &pid) < 0)
        return 0;
    memcpy(base, file, (size_t)(t - file));
    base[t - file] = '\0';
    return strcmp(base, STATE_FILE) == 0 || strcmp(base, DT_CKPT_JOB_ID_FILE) == 0 ||
           strcmp(base, DT_CKPT_BEST_FILE) == 0 || ckpt_step(base) >= 0;
}

/* Removes the temporaries of a writer that died mid-save. Only safe while
 * holding the log-dir lock (no live writer can own one). */
static void remove_stale_temps(const char *log_dir) {
    DIR *d = opendir(log_dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!is_our_temp(e->d_name)) continue;
        char path[JOIN_CAP];
        snprintf(path, sizeof path, "%s/%s", log_dir, e->d_name);
        if (unlink(path) == 0) dt_log(DT_LOG_INFO, "checkpoint: removed stale %s", path);
    }
    closedir(d);
}

int dt_ckpt_lock_dir(const char *log_dir, int *fd_out, dt_err *err) {
    int rc = dt_dirlock_acquire(log_dir, fd_out, err);
    if (rc < 0) return rc;
    remove_stale_temps(log_dir);
    return 0;
}

void dt_ckpt_unlock_dir(int fd) {
    dt_dirlock_release(fd);
}
