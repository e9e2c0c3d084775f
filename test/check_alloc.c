/*
 * alloc suite: allocation-failure injection, as SQLite's test allocator does
 * it. Each entry point that takes a file or a config (checkpoint save, load,
 * save in a log dir and restore; the job and cluster files; each reader,
 * plain and gzip; a csv's shape, labels and feature names) runs once
 * with allocation n failing, for n = 1, 2, ... until a run meets no
 * failure: that run must succeed. A run that meets
 * one ends in DT_ENOMEM with a message naming the file and leaves nothing
 * behind (no new checkpoint or temporary file, the old state file, the job
 * unchanged, the output empty), or it succeeds with exactly the result of a
 * run without failures (the code absorbed the failure: a buffer's shrink to
 * fit, a warning left unsaid). Under ASan no run leaks (checked after every
 * run, so a leak names its n). Each entry point is run twice: with
 * allocation n alone failing (the code after it must cope with memory that
 * comes back), and with every allocation from n on failing (its cleanup
 * paths too). The codec's sizing, encoding and decoding of every message
 * must allocate nothing at all: they run with every allocation failing, and
 * succeed.
 *
 * How allocations are made to fail: lib/ allocates only through lib/alloc.h
 * (dt_malloc and its kin), whose countdown a test arms; cJSON's allocations
 * go through it too while this suite runs (cJSON_InitHooks). That is the
 * way SQLite (sqlite3_config(SQLITE_CONFIG_MALLOC) and its test_malloc.c
 * layer) and redis (zmalloc) take memory: one door the project owns, which
 * every build, test or not, goes through. Link-time wrapping
 * (-Wl,--wrap=malloc) would leave lib/ untouched but sees only the calls the
 * linker resolves in our own objects: strdup's and aligned_alloc's inner
 * allocations, and any build with LTO or a shared libdtrain, would slip past
 * it. Not reached either way: zlib's gz* files (gzdopen and gzread allocate
 * with plain malloc; zlib takes an allocator only on a bare z_stream) and
 * gRPC, which none of these entry points use.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "alloc.h"
#include "anymsg.h"
#include "checkpoint.h"
#include "cluster.h"
#include "codec.h"
#include "job.h"
#include "log.h"
#include "proc.h"
#include "reader.h"
#include "suites.h"

/* More allocations than any entry point here makes: a bound on the loop. */
#define MAX_ALLOCS 100000

/* LeakSanitizer's on-demand check, when the runner is built with ASan. */
int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

static char *tmpdir;

static void setup(void) {
    tmpdir = dt_test_tempdir();
    ck_assert_ptr_nonnull(tmpdir);
    /* Restore's fallbacks log warnings; failures are asserted, not read. */
    dt_log_set_level(DT_LOG_ERROR);
    cJSON_Hooks hooks = {.malloc_fn = dt_malloc, .free_fn = free};
    cJSON_InitHooks(&hooks);
}

static void teardown(void) {
    cJSON_InitHooks(NULL);
    dt_alloc_fail_at(0, 0);
    dt_test_rmtree(tmpdir);
    dt_test_tempdir_free(tmpdir);
}

static void path_in(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", tmpdir, name);
}

/* A tensor (a spec when data is NULL) of up to 2 dims: rows < 0 for a
 * scalar, cols < 0 for a vector. */
static dt_tensor tensor(const char *name, int dtype, int64_t rows, int64_t cols, void *data) {
    dt_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", name);
    t.dtype = dtype;
    t.ndim = rows < 0 ? 0 : cols < 0 ? 1 : 2;
    if (t.ndim >= 1) t.shape[0] = rows;
    if (t.ndim == 2) t.shape[1] = cols;
    t.data = data;
    t.nbytes = (size_t)dt_tensor_numel(&t) * dt_dtype_size(dtype);
    return t;
}

/* ---- the driver ---------------------------------------------------------- */

/* An entry point under test: run calls it once; after a failed run,
 * check_clean asserts it left nothing behind; after a successful one,
 * check_done asserts it made what a run without failures makes, and
 * releases it. Every failure's message must name names[0] or names[1]
 * (NULL: unused), the files or source. */
typedef struct {
    const char *what;
    const char *names[2];
    int (*run)(void *ctx, dt_err *err);
    void (*check_clean)(void *ctx);
    void (*check_done)(void *ctx);
    void *ctx;
} entry;

static void assert_no_leak(const entry *e, long n, int persistent) {
    if (!__lsan_do_recoverable_leak_check) return;
    ck_assert_msg(__lsan_do_recoverable_leak_check() == 0,
                  "%s: leak after a run with allocation %ld%s failing (report above)", e->what, n,
                  persistent ? " and on" : "");
}

/* The run under way, for the messages of check_clean's assertions. */
static char trial[DT_ERR_MSG_MAX + 64];

static int names_one(const entry *e, const char *msg) {
    for (int i = 0; i < 2; i++)
        if (e->names[i] && strstr(msg, e->names[i])) return 1;
    return 0;
}

/* Runs e with allocation n failing (and every later one too, with
 * persistent) for n = 1, 2, ... until a run meets no failure. A run that
 * meets one fails with DT_ENOMEM, or succeeds with the same result as
 * without it (a failure the code may absorb: a buffer's shrink to fit).
 * Returns the allocations of the run that met none; *absorbed counts the
 * successes despite a failure. */
static long fail_each(const entry *e, int persistent, long *absorbed) {
    *absorbed = 0;
    for (long n = 1; n <= MAX_ALLOCS; n++) {
        dt_err err;
        dt_err_clear(&err);
        dt_alloc_fail_at(n, persistent);
        int rc = e->run(e->ctx, &err);
        long made = dt_alloc_count(), failed = dt_alloc_failed();
        dt_alloc_fail_at(0, 0);
        if (rc >= 0) {
            ck_assert_msg(err.code == DT_OK, "%s: returned %d with err \"%s\"", e->what, rc,
                          err.msg);
            e->check_done(e->ctx);
            assert_no_leak(e, n, persistent);
            if (failed == 0) return made;
            ++*absorbed;
            continue;
        }
        ck_assert_msg(failed > 0, "%s: %ld allocations, none failed, yet: %s (%d)", e->what, made,
                      err.msg, rc);
        ck_assert_msg(rc == DT_ENOMEM && err.code == DT_ENOMEM,
                      "%s: allocation %ld%s of %ld failed: returned %d, err %s \"%s\"; want "
                      "DT_ENOMEM",
                      e->what, n, persistent ? " and on" : "", made, rc, dt_err_name(err.code),
                      err.msg);
        ck_assert_msg(names_one(e, err.msg), "%s: allocation %ld%s failed: \"%s\" does not name %s",
                      e->what, n, persistent ? " and on" : "", err.msg, e->names[0]);
        snprintf(trial, sizeof trial, "allocation %ld%s failing (\"%s\")", n,
                 persistent ? " and on" : "", err.msg);
        e->check_clean(e->ctx);
        assert_no_leak(e, n, persistent);
    }
    ck_abort_msg("%s: still failing after %d allocations", e->what, MAX_ALLOCS);
    return -1;
}

/* Both modes; prints how many allocations the entry point makes. */
static void fail_every_allocation(const entry *e) {
    long absorbed_once, absorbed_from;
    long once = fail_each(e, 0, &absorbed_once), from = fail_each(e, 1, &absorbed_from);
    ck_assert_int_eq(once, from);
    ck_assert_msg(once > 0, "%s made no allocation: the test does not reach it", e->what);
    printf("alloc: %s: %ld allocations, each failed in turn (%ld absorbed)\n", e->what, once,
           absorbed_once);
}

/* ---- files and directories ----------------------------------------------- */

static void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

static void write_text(const char *path, const char *text) {
    write_file(path, text, strlen(text));
}

static void gzip_file(const char *src, const char *dst) {
    size_t len = 0;
    char *data = dt_test_read_file(src, &len);
    ck_assert_msg(data != NULL, "read %s", src);
    gzFile gz = gzopen(dst, "wb9");
    ck_assert_ptr_nonnull(gz);
    ck_assert_int_eq(gzwrite(gz, data, (unsigned)len), (int)len);
    ck_assert_int_eq(gzclose(gz), Z_OK);
    free(data);
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "name size\n" for every entry of dir, sorted: what a failed call must
 * leave as it found it. Caller frees. */
static char *dir_listing(const char *dir) {
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "%s: %s", dir, strerror(errno));
    char *names[64];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        ck_assert_int_lt(n, 64);
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct stat st;
        ck_assert_int_eq(lstat(path, &st), 0);
        char line[512];
        snprintf(line, sizeof line, "%s %lld\n", de->d_name, (long long)st.st_size);
        names[n] = strdup(line);
        ck_assert_ptr_nonnull(names[n]);
        n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, by_name);
    size_t cap = 1;
    for (int i = 0; i < n; i++)
        cap += strlen(names[i]);
    char *all = calloc(1, cap);
    ck_assert_ptr_nonnull(all);
    for (int i = 0; i < n; i++) {
        strcat(all, names[i]);
        free(names[i]);
    }
    return all;
}

static void assert_listing(const char *dir, const char *want, const char *what) {
    char *now = dir_listing(dir);
    ck_assert_msg(strcmp(now, want) == 0, "%s, %s: %s holds\n%swhere it held\n%s", what, trial, dir,
                  now, want);
    free(now);
}

/* ---- checkpoints --------------------------------------------------------- */

/* A model's variables and statistics: a 2-D F32, an F64 vector, an I64
 * scalar, with values that tell them apart. */
static void make_tensors(dt_tensors *ts) {
    dt_tensor specs[3] = {tensor("mlp/hidden0/weight", DT_DTYPE_F32, 4, 3, NULL),
                          tensor(DT_CKPT_SCALE_MEAN, DT_DTYPE_F64, 4, -1, NULL),
                          tensor("global_step", DT_DTYPE_I64, -1, -1, NULL)};
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_tensors_init(ts, specs, 3, &err) == 0, "%s", err.msg);
    float *w = ts->items[0].data;
    for (int i = 0; i < 12; i++)
        w[i] = 0.25f * (float)i - 1.0f;
    double *mean = ts->items[1].data;
    for (int i = 0; i < 4; i++)
        mean[i] = 1.0 / (i + 1);
    *(int64_t *)ts->items[2].data = 1234;
}

static void assert_same_tensors(const dt_tensors *want, const dt_tensors *got) {
    ck_assert_int_eq(got->count, want->count);
    for (int i = 0; i < want->count; i++) {
        const dt_tensor *w = NULL;
        for (int j = 0; j < want->count; j++)
            if (strcmp(want->items[j].name, got->items[i].name) == 0) w = &want->items[j];
        ck_assert_msg(w != NULL, "unexpected tensor %s", got->items[i].name);
        ck_assert_uint_eq(got->items[i].nbytes, w->nbytes);
        ck_assert_msg(memcmp(got->items[i].data, w->data, w->nbytes) == 0, "%s differs", w->name);
    }
}

static void assert_empty_tensors(const dt_tensors *ts, const char *what) {
    ck_assert_msg(ts->count == 0 && ts->items == NULL && ts->slab == NULL,
                  "%s: a failed call left %d tensors", what, ts->count);
}

static const char job_json[] = "{\"model\": \"mlp\", \"features\": 3, \"hidden\": [4]}";

typedef struct {
    char path[1100];
    char dir[1024];
    dt_tensors ts;
    dt_safetensors_meta meta;
    char *before; /* the dir's listing before the call */
    unsigned char *old_bytes;
    size_t old_len;
    dt_tensors loaded;
    dt_safetensors_meta loaded_meta;
    char restored[1024];
    dt_safetensors_rows *rows; /* a table's rows streamed after ts */
} ckpt_ctx;

static void ckpt_ctx_init(ckpt_ctx *c, const char *dir_name) {
    memset(c, 0, sizeof *c);
    path_in(c->dir, sizeof c->dir, dir_name);
    ck_assert_int_eq(mkdir(c->dir, 0755), 0);
    make_tensors(&c->ts);
    c->meta.global_step = 1234;
    c->meta.max_steps = 5000;
    snprintf(c->meta.model, sizeof c->meta.model, "mlp F=3 H=4 K=1");
    c->meta.job = (char *)job_json;
}

static void ckpt_ctx_deinit(ckpt_ctx *c) {
    dt_tensors_deinit(&c->ts);
    dt_safetensors_rows_free(c->rows);
    free(c->before);
    free(c->old_bytes);
}

static void save_meta(ckpt_ctx *c, int64_t step, const char *name) {
    dt_err err;
    dt_err_clear(&err);
    dt_safetensors_meta m = c->meta;
    m.global_step = step;
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", c->dir, name);
    ck_assert_msg(dt_safetensors_save(path, &c->ts, &m, &err) == 0, "%s", err.msg);
}

/* dt_safetensors_save over an older checkpoint: a failure keeps the old bytes and
 * leaves no temporary file. */
static int run_save(void *ctx, dt_err *err) {
    ckpt_ctx *c = ctx;
    return dt_safetensors_save(c->path, &c->ts, &c->meta, err);
}

static void save_clean(void *ctx) {
    ckpt_ctx *c = ctx;
    assert_listing(c->dir, c->before, "save");
    size_t len = 0;
    char *now = dt_test_read_file(c->path, &len);
    ck_assert_msg(now && len == c->old_len && memcmp(now, c->old_bytes, len) == 0,
                  "save: %s changed by a failed save", c->path);
    free(now);
}

static void save_done(void *ctx) {
    ckpt_ctx *c = ctx;
    dt_tensors back;
    dt_safetensors_meta meta = {0};
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_safetensors_load(c->path, &back, &meta, &err) == 0, "%s", err.msg);
    assert_same_tensors(&c->ts, &back);
    ck_assert_int_eq(meta.global_step, 1234);
    ck_assert_str_eq(meta.model, c->meta.model);
    ck_assert_ptr_nonnull(meta.job);
    dt_tensors_deinit(&back);
    dt_safetensors_meta_deinit(&meta);
    write_file(c->path, c->old_bytes, c->old_len); /* the next run saves over it again */
}

/* c for a save over the checkpoint of step 7 in dir_name, its bytes kept. */
static void save_over_old(ckpt_ctx *c, const char *dir_name) {
    ckpt_ctx_init(c, dir_name);
    save_meta(c, 7, "model.ckpt-1234.safetensors");
    snprintf(c->path, sizeof c->path, "%s/model.ckpt-1234.safetensors", c->dir);
    c->old_bytes = (unsigned char *)dt_test_read_file(c->path, &c->old_len);
}

START_TEST(test_ckpt_save) {
    ckpt_ctx c;
    save_over_old(&c, "save");
    c.before = dir_listing(c.dir);
    entry e = {"dt_safetensors_save", {c.path, NULL}, run_save, save_clean, save_done, &c};
    fail_every_allocation(&e);
    ckpt_ctx_deinit(&c);
}
END_TEST

/* dt_safetensors_save_rows: the same promises as dt_safetensors_save, with
 * a table's rows streamed after the tensors. */
static int run_save_rows(void *ctx, dt_err *err) {
    ckpt_ctx *c = ctx;
    return dt_safetensors_save_rows(c->path, &c->ts, &c->rows, 1, &c->meta, err);
}

static void save_rows_done(void *ctx) {
    ckpt_ctx *c = ctx;
    dt_tensors back;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_safetensors_load(c->path, &back, NULL, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(back.count, c->ts.count + 2);
    const dt_tensor *ids = dt_tensors_find(&back, "t/ids");
    ck_assert_ptr_nonnull(ids);
    ck_assert_int_eq(ids->shape[0], 5);
    ck_assert_int_eq(((const int64_t *)ids->data)[4], 40);
    dt_tensors_deinit(&back);
    write_file(c->path, c->old_bytes, c->old_len); /* the next run saves over it again */
}

START_TEST(test_ckpt_save_rows) {
    ckpt_ctx c;
    save_over_old(&c, "save_rows");
    dt_tensor specs[2] = {tensor("t/ids", DT_DTYPE_I64, 1, -1, NULL),
                          tensor("t/values", DT_DTYPE_F32, 1, 2, NULL)};
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_safetensors_rows_new(c.dir, specs, 2, &c.rows, &err) == 0, "%s", err.msg);
    const int64_t ids[5] = {0, 10, 20, 30, 40};
    const float values[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    const void *parts[2] = {ids, values};
    ck_assert_msg(dt_safetensors_rows_append(c.rows, 5, parts, &err) == 0, "%s", err.msg);
    c.before = dir_listing(c.dir);
    entry e = {
        "dt_safetensors_save_rows", {c.path, NULL}, run_save_rows, save_clean, save_rows_done, &c};
    fail_every_allocation(&e);
    ckpt_ctx_deinit(&c);
}
END_TEST

/* dt_safetensors_load: a failure allocates nothing for the caller and leaves meta
 * as it was (it is written only on success). */
static int run_load(void *ctx, dt_err *err) {
    ckpt_ctx *c = ctx;
    memset(&c->loaded, 0xA5, sizeof c->loaded); /* the call must set it */
    c->loaded_meta.global_step = -77;
    c->loaded_meta.job = NULL;
    return dt_safetensors_load(c->path, &c->loaded, &c->loaded_meta, err);
}

static void load_clean(void *ctx) {
    ckpt_ctx *c = ctx;
    assert_empty_tensors(&c->loaded, "load");
    ck_assert_int_eq(c->loaded_meta.global_step, -77);
    ck_assert_ptr_null(c->loaded_meta.job);
}

static void load_done(void *ctx) {
    ckpt_ctx *c = ctx;
    assert_same_tensors(&c->ts, &c->loaded);
    ck_assert_int_eq(c->loaded_meta.global_step, 1234);
    ck_assert_int_eq(c->loaded_meta.max_steps, 5000);
    ck_assert_msg(c->loaded_meta.job && strstr(c->loaded_meta.job, "\"mlp\""), "job: %s",
                  c->loaded_meta.job ? c->loaded_meta.job : "(none)");
    dt_tensors_deinit(&c->loaded);
    dt_safetensors_meta_deinit(&c->loaded_meta);
}

START_TEST(test_ckpt_load) {
    ckpt_ctx c;
    ckpt_ctx_init(&c, "load");
    save_meta(&c, 1234, "model.ckpt-1234.safetensors");
    snprintf(c.path, sizeof c.path, "%s/model.ckpt-1234.safetensors", c.dir);
    entry e = {"dt_safetensors_load", {c.path, NULL}, run_load, load_clean, load_done, &c};
    fail_every_allocation(&e);
    ckpt_ctx_deinit(&c);
}
END_TEST

/* A log dir with checkpoints 100 and 200 and the state file naming both. */
static void make_log_dir(ckpt_ctx *c) {
    dt_err err;
    dt_err_clear(&err);
    for (int64_t step = 100; step <= 200; step += 100) {
        c->meta.global_step = step;
        ck_assert_msg(dt_ckpt_save_in_dir(c->dir, &c->ts, &c->meta, 2, NULL, 0, &err) == 0, "%s",
                      err.msg);
    }
    char state[1100];
    snprintf(state, sizeof state, "%s/checkpoint", c->dir);
    free(c->old_bytes);
    free(c->before);
    c->old_bytes = (unsigned char *)dt_test_read_file(state, &c->old_len);
    ck_assert_ptr_nonnull(c->old_bytes);
    c->before = dir_listing(c->dir);
}

/* dt_ckpt_save_in_dir into a log dir holding two checkpoints and their
 * state file, keeping 2: a failure leaves the dir as it was (no new
 * checkpoint, the old state file, nothing deleted, no temporary file). */
static int run_save_in_dir(void *ctx, dt_err *err) {
    ckpt_ctx *c = ctx;
    c->meta.global_step = 300;
    return dt_ckpt_save_in_dir(c->dir, &c->ts, &c->meta, 2, c->restored, sizeof c->restored, err);
}

static void save_in_dir_clean(void *ctx) {
    ckpt_ctx *c = ctx;
    assert_listing(c->dir, c->before, "save in dir");
    size_t len = 0;
    char state[1100];
    snprintf(state, sizeof state, "%s/checkpoint", c->dir);
    char *now = dt_test_read_file(state, &len);
    ck_assert_msg(now && len == c->old_len && memcmp(now, c->old_bytes, len) == 0,
                  "save in dir: the state file changed by a failed save:\n%s", now ? now : "");
    free(now);
}

static void save_in_dir_done(void *ctx) {
    ckpt_ctx *c = ctx;
    ck_assert_int_eq(dt_ckpt_latest_step(c->dir), 300);
    ck_assert_msg(strstr(c->restored, "model.ckpt-300.safetensors"), "%s", c->restored);
    /* Retention kept 200 and 300; 100 is gone. */
    char old[1100];
    snprintf(old, sizeof old, "%s/model.ckpt-100.safetensors", c->dir);
    ck_assert_int_ne(access(old, F_OK), 0);
    /* The next run starts from the same log dir. */
    ck_assert_int_eq(dt_test_rmtree(c->dir), 0);
    ck_assert_int_eq(mkdir(c->dir, 0755), 0);
    make_log_dir(c);
}

START_TEST(test_ckpt_save_in_dir) {
    ckpt_ctx c;
    ckpt_ctx_init(&c, "logdir");
    make_log_dir(&c);
    entry e = {"dt_ckpt_save_in_dir", {c.dir, NULL},    run_save_in_dir,
               save_in_dir_clean,     save_in_dir_done, &c};
    fail_every_allocation(&e);
    ckpt_ctx_deinit(&c);
}
END_TEST

/* dt_ckpt_restore_latest: running out of memory is no reason to fall back
 * to an older checkpoint; it fails, and the dir is untouched. */
static int run_restore(void *ctx, dt_err *err) {
    ckpt_ctx *c = ctx;
    memset(&c->loaded, 0xA5, sizeof c->loaded);
    c->loaded_meta.global_step = -77;
    c->loaded_meta.job = NULL;
    c->restored[0] = '\0';
    return dt_ckpt_restore_latest(c->dir, &c->loaded, &c->loaded_meta, c->restored,
                                  sizeof c->restored, err);
}

static void restore_clean(void *ctx) {
    ckpt_ctx *c = ctx;
    load_clean(c);
    assert_listing(c->dir, c->before, "restore");
}

static void restore_done(void *ctx) {
    ckpt_ctx *c = ctx;
    ck_assert_int_eq(c->loaded_meta.global_step, 200);
    ck_assert_msg(strstr(c->restored, "model.ckpt-200.safetensors"), "%s", c->restored);
    assert_same_tensors(&c->ts, &c->loaded);
    dt_tensors_deinit(&c->loaded);
    dt_safetensors_meta_deinit(&c->loaded_meta);
}

START_TEST(test_ckpt_restore_latest) {
    ckpt_ctx c;
    ckpt_ctx_init(&c, "restore");
    make_log_dir(&c);
    entry e = {
        "dt_ckpt_restore_latest", {c.dir, NULL}, run_restore, restore_clean, restore_done, &c};
    fail_every_allocation(&e);
    ckpt_ctx_deinit(&c);
}
END_TEST

/* ---- job and cluster files ----------------------------------------------- */

/* Every kind of field: numbers, strings, arrays, a nested schedule. */
static const char job_text[] =
    "{\n"
    "  \"model\": \"mlp\", \"features\": 4, \"classes\": 3, \"hidden\": [8, 6], \"l2\": 0.01,\n"
    "  \"data\": \"csv\", \"train_data\": \"train.csv\", \"label_column\": \"y\",\n"
    "  \"scale\": \"standardize\", \"seed\": 7,\n"
    "  \"optimizer\": \"adam\", \"learning_rate\": 0.01,\n"
    "  \"lr_schedule\": \"piecewise\", \"boundaries\": [100, 200],\n"
    "  \"lr_values\": [0.01, 0.005, 0.001],\n"
    "  \"mode\": \"sync\", \"batch_size\": 32, \"max_steps\": 400,\n"
    "  \"log_dir\": \"logs/alloc\", \"max_to_keep\": 3\n"
    "}\n";

typedef struct {
    char path[1024];
    dt_job before; /* the defaults the file is applied to */
    dt_job want;   /* the job a run without failures makes */
    dt_job job;
    int from_file;
} job_ctx;

static int run_job(void *ctx, dt_err *err) {
    job_ctx *c = ctx;
    c->job = c->before;
    return c->from_file ? dt_job_load(c->path, &c->job, err)
                        : dt_job_parse(job_text, "alloc-job.json", &c->job, err);
}

static void job_clean(void *ctx) {
    job_ctx *c = ctx;
    ck_assert_msg(memcmp(&c->job, &c->before, sizeof c->job) == 0,
                  "a failed job load changed the job");
}

static void job_done(void *ctx) {
    job_ctx *c = ctx;
    ck_assert_msg(memcmp(&c->job, &c->want, sizeof c->job) == 0,
                  "the job differs from the one read without failures");
}

static void job_setup(job_ctx *c, int from_file) {
    memset(c, 0, sizeof *c);
    dt_job_defaults(&c->before);
    c->from_file = from_file;
    path_in(c->path, sizeof c->path, "alloc-job.json");
    write_text(c->path, job_text);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(run_job(c, &err) == 0, "%s", err.msg);
    c->want = c->job;
    ck_assert_int_eq(c->want.model.hidden[1], 6);
    ck_assert_int_eq(c->want.batch_size, 32);
    ck_assert_int_eq(c->want.num_lr_values, 3);
    ck_assert_str_eq(c->want.log_dir, "logs/alloc");
}

START_TEST(test_job_parse) {
    job_ctx c;
    job_setup(&c, 0);
    entry e = {"dt_job_parse", {"alloc-job.json", NULL}, run_job, job_clean, job_done, &c};
    fail_every_allocation(&e);
}
END_TEST

START_TEST(test_job_load) {
    job_ctx c;
    job_setup(&c, 1);
    entry e = {"dt_job_load", {c.path, NULL}, run_job, job_clean, job_done, &c};
    fail_every_allocation(&e);
}
END_TEST

/* A TF_CONFIG-style file: a chief, workers, ps, an evaluator, the task and
 * a job section. */
static const char cluster_text[] = "{\"cluster\": {\"chief\": [\"host0:2222\"],\n"
                                   "              \"worker\": [\"host1:2222\", \"host2:2222\"],\n"
                                   "              \"ps\": [\"[::1]:2223\", \"10.0.0.4:2224\"],\n"
                                   "              \"evaluator\": [\"host5:2222\"]},\n"
                                   " \"task\": {\"type\": \"worker\", \"index\": 1},\n"
                                   " \"job\": {\"batch_size\": 8}}\n";

typedef struct {
    char path[1024];
    dt_cluster want; /* read without failures */
    dt_cluster cluster;
} cluster_ctx;

static int run_cluster(void *ctx, dt_err *err) {
    cluster_ctx *c = ctx;
    memset(&c->cluster, 0xA5, sizeof c->cluster);
    return dt_cluster_load(c->path, &c->cluster, err);
}

static void cluster_clean(void *ctx) {
    cluster_ctx *c = ctx;
    ck_assert_msg(c->cluster.ps == NULL && c->cluster.workers == NULL &&
                      c->cluster.evaluators == NULL && c->cluster.num_ps == 0 &&
                      c->cluster.num_workers == 0 && c->cluster.num_evaluators == 0,
                  "a failed cluster load left tasks behind");
}

static void assert_same_addrs(const dt_addr *want, const dt_addr *got, int n) {
    for (int i = 0; i < n; i++) {
        ck_assert_str_eq(got[i].addr, want[i].addr);
        ck_assert_str_eq(got[i].host, want[i].host);
        ck_assert_int_eq(got[i].port, want[i].port);
    }
}

static void cluster_done(void *ctx) {
    cluster_ctx *c = ctx;
    const dt_cluster *w = &c->want, *g = &c->cluster;
    ck_assert_int_eq(g->num_ps, w->num_ps);
    ck_assert_int_eq(g->num_workers, w->num_workers);
    ck_assert_int_eq(g->num_evaluators, w->num_evaluators);
    ck_assert_int_eq(g->has_chief, w->has_chief);
    ck_assert_int_eq(g->has_task, w->has_task);
    ck_assert_int_eq(g->task_type, w->task_type);
    ck_assert_int_eq(g->task_index, w->task_index);
    assert_same_addrs(w->ps, g->ps, w->num_ps);
    assert_same_addrs(w->workers, g->workers, w->num_workers);
    assert_same_addrs(w->evaluators, g->evaluators, w->num_evaluators);
    dt_cluster_deinit(&c->cluster);
}

START_TEST(test_cluster_load) {
    cluster_ctx c;
    memset(&c, 0, sizeof c);
    path_in(c.path, sizeof c.path, "alloc-cluster.json");
    write_text(c.path, cluster_text);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_cluster_load(c.path, &c.want, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.want.num_ps, 2);
    ck_assert_int_eq(c.want.num_workers, 3);
    ck_assert_int_eq(c.want.num_evaluators, 1);
    ck_assert_str_eq(c.want.ps[0].addr, "[::1]:2223");
    ck_assert_int_eq(c.want.task_index, 1);
    entry e = {"dt_cluster_load", {c.path, NULL}, run_cluster, cluster_clean, cluster_done, &c};
    fail_every_allocation(&e);
    dt_cluster_deinit(&c.want);
}
END_TEST

/* ---- readers ------------------------------------------------------------- */

typedef struct {
    dt_reader_format format;
    char data[1024];
    char labels[1024];
    dt_reader_params params;
    dt_reader_table want; /* read without failures */
    dt_reader_table table;
} reader_ctx;

static int run_reader(void *ctx, dt_err *err) {
    reader_ctx *c = ctx;
    memset(&c->table, 0xA5, sizeof c->table);
    return dt_reader_load(c->format, c->data, c->labels, &c->params, &c->table, err);
}

static void reader_clean(void *ctx) {
    reader_ctx *c = ctx;
    ck_assert_msg(c->table.x == NULL && c->table.y == NULL && c->table.rows == 0,
                  "%s: a failed read left %lld rows", c->data, (long long)c->table.rows);
}

static void reader_done(void *ctx) {
    reader_ctx *c = ctx;
    const dt_reader_table *w = &c->want, *g = &c->table;
    ck_assert_int_eq(g->rows, w->rows);
    ck_assert_int_eq(g->cols, w->cols);
    ck_assert_msg(memcmp(g->x, w->x, (size_t)w->rows * (size_t)w->cols * sizeof *w->x) == 0 &&
                      memcmp(g->y, w->y, (size_t)w->rows * sizeof *w->y) == 0,
                  "%s: values differ from a read without failures", c->data);
    dt_reader_table_deinit(&c->table);
}

/* A csv of rows x (F = 3, label "y" last), large enough that the reader's
 * buffers grow several times. */
static void write_big_csv(const char *path, int rows) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "a,b,c,y\n");
    for (int i = 0; i < rows; i++)
        fprintf(f, "%d.5,%d,-%d.25,%d\n", i, i * 3, i, i % 3);
    ck_assert_int_eq(fclose(f), 0);
}

static void fixture(char *buf, size_t cap, const char *name) {
    const char *root = getenv("DT_TEST_DATA");
    snprintf(buf, cap, "%s/readers/%s", root && *root ? root : "test/data", name);
    struct stat st;
    ck_assert_msg(stat(buf, &st) == 0, "fixture %s: %s (run from the repository's top)", buf,
                  strerror(errno));
}

static void reader_params(reader_ctx *c, dt_reader_format format, int F, int K, const char *label) {
    c->format = format;
    c->params.num_features = F;
    c->params.label_kind = DT_LABEL_CLASS;
    c->params.num_classes = K;
    c->params.label_column = label;
}

/* Reads the file once without failures (rows and the first label as
 * expected), then with each allocation failing. */
static void run_reader_entry(reader_ctx *c, const char *what, int64_t rows, float first_label) {
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(run_reader(c, &err) == 0, "%s", err.msg);
    c->want = c->table;
    ck_assert_int_eq(c->want.rows, rows);
    ck_assert_int_eq(c->want.cols, c->params.num_features);
    ck_assert_ptr_nonnull(c->want.y);
    ck_assert_msg(c->want.y[0] == first_label, "%s: first label %g", c->data, (double)c->want.y[0]);
    entry e = {
        what, {c->data, c->labels[0] ? c->labels : NULL}, run_reader, reader_clean, reader_done, c};
    fail_every_allocation(&e);
    dt_reader_table_deinit(&c->want);
}

START_TEST(test_reader_csv) {
    reader_ctx c;
    memset(&c, 0, sizeof c);
    reader_params(&c, DT_READER_CSV, 3, 3, "y");
    path_in(c.data, sizeof c.data, "big.csv");
    write_big_csv(c.data, 2000);
    run_reader_entry(&c, "csv reader", 2000, 0);
}
END_TEST

START_TEST(test_reader_csv_gz) {
    reader_ctx c;
    memset(&c, 0, sizeof c);
    reader_params(&c, DT_READER_CSV, 3, 3, "y");
    char plain[1024];
    path_in(plain, sizeof plain, "big.csv");
    write_big_csv(plain, 500);
    path_in(c.data, sizeof c.data, "big.csv.gz");
    gzip_file(plain, c.data);
    run_reader_entry(&c, "csv.gz reader", 500, 0);
}
END_TEST

START_TEST(test_reader_libsvm) {
    reader_ctx c;
    memset(&c, 0, sizeof c);
    reader_params(&c, DT_READER_LIBSVM, 4, 2, NULL);
    c.params.svm_signed_labels = 1;
    fixture(c.data, sizeof c.data, "small.libsvm");
    run_reader_entry(&c, "libsvm reader", 4, 1);
}
END_TEST

START_TEST(test_reader_idx) {
    reader_ctx c;
    memset(&c, 0, sizeof c);
    reader_params(&c, DT_READER_IDX, 6, 10, NULL);
    fixture(c.data, sizeof c.data, "small-images-idx3-ubyte");
    fixture(c.labels, sizeof c.labels, "small-labels-idx1-ubyte");
    run_reader_entry(&c, "idx reader", 3, 7);
}
END_TEST

START_TEST(test_reader_idx_gz) {
    reader_ctx c;
    memset(&c, 0, sizeof c);
    reader_params(&c, DT_READER_IDX, 6, 10, NULL);
    char src[1024];
    fixture(src, sizeof src, "small-images-idx3-ubyte");
    path_in(c.data, sizeof c.data, "images.gz");
    gzip_file(src, c.data);
    fixture(src, sizeof src, "small-labels-idx1-ubyte");
    path_in(c.labels, sizeof c.labels, "labels.gz");
    gzip_file(src, c.labels);
    run_reader_entry(&c, "idx.gz reader", 3, 7);
}
END_TEST

/* The reader's other entry points over one csv: its shape (F and K, the
 * classes counted over every row), whether it has labels, and its feature
 * names. Each leaves nothing in its output on a failure. */
typedef struct {
    char path[1024];
    dt_reader_params params;
    dt_reader_shape shape;
    int labeled;
    char *names;
} csv_facts;

static int run_infer(void *ctx, dt_err *err) {
    csv_facts *c = ctx;
    return dt_reader_infer(DT_READER_CSV, c->path, NULL, &c->params, 1, &c->shape, err);
}

static void infer_done(void *ctx) {
    csv_facts *c = ctx;
    ck_assert_int_eq(c->shape.num_features, 3);
    ck_assert_int_eq(c->shape.num_classes, 3);
}

static int run_detect(void *ctx, dt_err *err) {
    csv_facts *c = ctx;
    c->labeled = -1;
    return dt_reader_detect_labels(DT_READER_CSV, c->path, NULL, &c->params, &c->labeled, NULL, 0,
                                   err);
}

static void detect_done(void *ctx) {
    ck_assert_int_eq(((csv_facts *)ctx)->labeled, 1);
}

static int run_names(void *ctx, dt_err *err) {
    csv_facts *c = ctx;
    c->names = (char *)trial; /* the call must set it, to NULL on failure */
    return dt_reader_csv_names(c->path, &c->params, &c->names, err);
}

static void names_clean(void *ctx) {
    ck_assert_msg(((csv_facts *)ctx)->names == NULL, "names left set after %s", trial);
}

static void names_done(void *ctx) {
    csv_facts *c = ctx;
    ck_assert_str_eq(c->names, "a,b,c");
    free(c->names);
    c->names = NULL;
}

/* What infer and detect fill in (a shape, a flag) is the caller's storage,
 * not memory: the driver's checks (DT_ENOMEM naming the file, no leak) are
 * all there is to see after a failure. */
static void nothing_to_clean(void *ctx) {
    (void)ctx;
}

START_TEST(test_reader_csv_facts) {
    csv_facts c;
    memset(&c, 0, sizeof c);
    c.params.num_features = 3;
    c.params.label_kind = DT_LABEL_CLASS;
    c.params.num_classes = 3;
    c.params.label_column = "y";
    path_in(c.path, sizeof c.path, "facts.csv");
    write_big_csv(c.path, 300);
    entry infer = {"csv shape", {c.path, NULL}, run_infer, nothing_to_clean, infer_done, &c};
    entry detect = {"csv labels", {c.path, NULL}, run_detect, nothing_to_clean, detect_done, &c};
    entry names = {"csv names", {c.path, NULL}, run_names, names_clean, names_done, &c};
    fail_every_allocation(&infer);
    fail_every_allocation(&detect);
    fail_every_allocation(&names);
}
END_TEST

/* ---- codec --------------------------------------------------------------- */

static float c_weight[2][3] = {{-0.0f, 1.0e-40f, 3.0f}, {0.1f, -2.5f, 1.0f / 3.0f}};
static int64_t c_longs[2] = {INT64_MIN, INT64_MAX};

static void codec_tensors(dt_tensor items[2]) {
    items[0] = tensor("linear/weight", DT_DTYPE_F32, 2, 3, c_weight);
    items[1] = tensor("linear/weight/m", DT_DTYPE_I64, 2, -1, c_longs);
}

static const char *const pull_names[] = {"linear/weight", "linear/bias"};

/* A message of type with its fields set (tensors for the types that carry
 * them). */
static void make_msg(dt_msg_type type, dt_test_any_msg *m, dt_tensor items[2]) {
    memset(m, 0, sizeof *m);
    codec_tensors(items);
    dt_tensor_list list = {.items = items, .count = 2};
    switch (type) {
    case DT_MSG_CREATE_REQ:
        m->create_req.out = list;
        m->create_req.global_step = 12;
        m->create_req.optim.kind = DT_OPTIM_ADAM;
        m->create_req.optim.learning_rate = 0.5;
        snprintf(m->create_req.model, sizeof m->create_req.model, "linear F=3");
        break;
    case DT_MSG_CREATE_RESP: m->create_resp.incarnation = 99; break;
    case DT_MSG_PULL_REQ:
        m->pull_req.out_names = pull_names;
        m->pull_req.out_count = 2;
        m->pull_req.worker = 3;
        break;
    case DT_MSG_PULL_RESP:
        m->pull_resp.out = list;
        m->pull_resp.global_step = 41;
        break;
    case DT_MSG_PUSH_REQ:
        m->push_req.out = list;
        m->push_req.step = 40;
        m->push_req.push_id = 7;
        break;
    case DT_MSG_PUSH_RESP:
        m->push_resp.out = list;
        m->push_resp.global_step = 41;
        break;
    case DT_MSG_STATUS_REQ: m->status_req.worker = 2; break;
    case DT_MSG_STATUS_RESP:
        m->status_resp.ready = true;
        m->status_resp.num_workers = 1;
        m->status_resp.workers[0].pushes = 5;
        snprintf(m->status_resp.mode, sizeof m->status_resp.mode, "async");
        break;
    case DT_MSG_SHUTDOWN_REQ:
        snprintf(m->shutdown_req.reason, sizeof m->shutdown_req.reason, "done");
        break;
    case DT_MSG_SHUTDOWN_RESP: break;
    case DT_MSG_HEALTH_REQ:
        snprintf(m->health_req.service, sizeof m->health_req.service, DT_HEALTH_SERVICE);
        break;
    case DT_MSG_HEALTH_RESP: m->health_resp.status = DT_HEALTH_SERVING; break;
    case DT_MSG_SPARSE_PULL_REQ:
        m->sparse_pull_req.ids_out = (dt_tensor_list){.items = items + 1, .count = 1};
        snprintf(m->sparse_pull_req.table, sizeof m->sparse_pull_req.table, "wide/weight");
        break;
    case DT_MSG_SPARSE_PULL_RESP:
        m->sparse_pull_resp.values_out = (dt_tensor_list){.items = items, .count = 1};
        break;
    case DT_MSG_SPARSE_EXPORT_REQ: m->sparse_export_req.max_rows = 5; break;
    case DT_MSG_SPARSE_EXPORT_RESP: m->sparse_export_resp.out = list; break;
    case DT_MSG_SPARSE_IMPORT_REQ: m->sparse_import_req.out = list; break;
    case DT_MSG_SPARSE_IMPORT_RESP: m->sparse_import_resp.rows_held = 3; break;
    case DT_MSG_COUNT: break;
    }
}

/* Zeroes d and points its decoding storage at views and names. */
static void decode_storage(dt_msg_type type, dt_test_any_msg *d, dt_tensor views[4],
                           char (*names)[DT_TENSOR_NAME_MAX]) {
    memset(d, 0, sizeof *d);
    dt_tensor_views v = {.items = views, .cap = 4};
    switch (type) {
    case DT_MSG_CREATE_REQ: d->create_req.in = v; break;
    case DT_MSG_PULL_REQ:
        d->pull_req.names.items = names;
        d->pull_req.names.cap = 4;
        break;
    case DT_MSG_PULL_RESP: d->pull_resp.in = v; break;
    case DT_MSG_PUSH_REQ: d->push_req.in = v; break;
    case DT_MSG_PUSH_RESP: d->push_resp.in = v; break;
    case DT_MSG_SPARSE_PULL_REQ: d->sparse_pull_req.ids_in = v; break;
    case DT_MSG_SPARSE_PULL_RESP: d->sparse_pull_resp.values_in = v; break;
    case DT_MSG_SPARSE_EXPORT_RESP: d->sparse_export_resp.in = v; break;
    case DT_MSG_SPARSE_IMPORT_REQ: d->sparse_import_req.in = v; break;
    default: break;
    }
}

/* What a decoded message carries, to compare with what was sent. */
static int decoded_count(dt_msg_type type, const dt_test_any_msg *d) {
    switch (type) {
    case DT_MSG_CREATE_REQ: return d->create_req.in.count;
    case DT_MSG_PULL_REQ: return d->pull_req.names.count;
    case DT_MSG_PULL_RESP: return d->pull_resp.in.count;
    case DT_MSG_PUSH_REQ: return d->push_req.in.count;
    case DT_MSG_PUSH_RESP: return d->push_resp.in.count;
    case DT_MSG_SPARSE_PULL_REQ: return 2 * d->sparse_pull_req.ids_in.count;
    case DT_MSG_SPARSE_PULL_RESP: return 2 * d->sparse_pull_resp.values_in.count;
    case DT_MSG_SPARSE_EXPORT_RESP: return d->sparse_export_resp.in.count;
    case DT_MSG_SPARSE_IMPORT_REQ: return d->sparse_import_req.in.count;
    default: return 0;
    }
}

static int carries_two(dt_msg_type type) {
    /* The sparse pull's one tensor counts twice (decoded_count). */
    return type == DT_MSG_CREATE_REQ || type == DT_MSG_PULL_REQ || type == DT_MSG_PULL_RESP ||
           type == DT_MSG_PUSH_REQ || type == DT_MSG_PUSH_RESP || type == DT_MSG_SPARSE_PULL_REQ ||
           type == DT_MSG_SPARSE_PULL_RESP || type == DT_MSG_SPARSE_EXPORT_RESP ||
           type == DT_MSG_SPARSE_IMPORT_REQ;
}

/* Sizing, encoding and decoding every message with every allocation
 * failing: they succeed, having asked for no memory (tensors are copied
 * straight into the caller's buffer and decoded as views into it). */
START_TEST(test_codec_allocates_nothing) {
    for (int type = 0; type < DT_MSG_COUNT; type++) {
        dt_test_any_msg m, d;
        dt_tensor items[2], views[4];
        char names[4][DT_TENSOR_NAME_MAX];
        make_msg((dt_msg_type)type, &m, items);
        decode_storage((dt_msg_type)type, &d, views, names);
        uint8_t buf[4096];
        dt_err err;
        dt_err_clear(&err);
        dt_alloc_fail_at(1, 1);
        int64_t size = dt_codec_size((dt_msg_type)type, &m, &err);
        int enc = size >= 0 && (size_t)size <= sizeof buf
                      ? dt_codec_encode((dt_msg_type)type, &m, buf, (size_t)size, &err)
                      : -1;
        int dec = enc == 0 ? dt_codec_decode((dt_msg_type)type, buf, (size_t)size, &d, &err) : -1;
        long made = dt_alloc_count();
        dt_alloc_fail_at(0, 0);
        ck_assert_msg(size >= 0 && enc == 0 && dec == 0,
                      "message type %d: size %lld, encode %d, decode %d: %s", type, (long long)size,
                      enc, dec, err.msg);
        ck_assert_msg(made == 0, "message type %d: %ld allocations", type, made);
        ck_assert_int_eq(decoded_count((dt_msg_type)type, &d), carries_two(type) ? 2 : 0);
        if (type == DT_MSG_PUSH_REQ) {
            ck_assert_int_eq(d.push_req.step, 40);
            ck_assert_msg(memcmp(d.push_req.in.items[0].data, c_weight, sizeof c_weight) == 0,
                          "push: gradient bytes differ");
        }
    }
}
END_TEST

/* ---- the door itself ----------------------------------------------------- */

/* The countdown fails exactly allocation n (and with persistent the rest),
 * counts every kind of allocation, and disarmed passes everything. */
START_TEST(test_countdown) {
    dt_alloc_fail_at(3, 0);
    void *a = dt_malloc(8), *b = dt_calloc(2, 8);
    char *c = dt_strdup("x"); /* allocation 3 */
    void *d = dt_aligned_alloc(64, 1);
    void *e = dt_realloc(NULL, 4);
    ck_assert_int_eq(dt_alloc_count(), 5);
    ck_assert_int_eq(dt_alloc_failed(), 1);
    ck_assert(a && b && !c && d && e);
    ck_assert_uint_eq((uintptr_t)d % 64, 0);
    free(a);
    free(b);
    free(d);
    free(e);
    dt_alloc_fail_at(2, 1);
    a = dt_malloc(1);
    ck_assert(a && !dt_malloc(1) && !dt_calloc(1, 1) && !dt_realloc(a, 2));
    ck_assert_int_eq(dt_alloc_failed(), 3);
    free(a);
    dt_alloc_fail_at(0, 0);
    a = dt_malloc(1);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(dt_alloc_count(), 0);
    free(a);
}
END_TEST

static void suite_setup(void) {
    if (dt_test_tmp_begin() != 0) fprintf(stderr, "alloc: no suite temp dir; using $TMPDIR\n");
}

/* Heap bytes glibc holds free after n_blocks of 64 kB are allocated and
 * all freed again (the socket reads of one large message, in gRPC's
 * slices). */
static size_t free_after_message(int n_blocks) {
    void *blocks[512];
    ck_assert_int_le(n_blocks, 512);
    for (int i = 0; i < n_blocks; i++) {
        blocks[i] = dt_malloc(64 << 10);
        ck_assert_ptr_nonnull(blocks[i]);
        memset(blocks[i], 1, 64 << 10); /* pages faulted in, as a read fills them */
    }
    for (int i = 0; i < n_blocks; i++)
        free(blocks[i]);
    return mallinfo2().fordblks;
}

/* With cmd/dtrain.c's allocator settings, 24 MB of message freed is given
 * back down to about the 8 MiB trim threshold; once the process keeps room
 * for messages of 12 MiB (2 x 12 + 8 = 32 MiB) the same 24 MB stays for the
 * next message. Sanitizers bring their own allocator, which ignores
 * mallopt: there the call must only be harmless. */
START_TEST(test_keep_for_messages) {
    dt_alloc_tune_process();
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    dt_alloc_keep_for_messages((size_t)12 << 20);
    ck_assert_int_ge(free_after_message(384), 0);
#else
    size_t trimmed = free_after_message(384);
    ck_assert_msg(trimmed <= ((size_t)9 << 20), "%zu bytes kept with an 8 MiB threshold", trimmed);
    dt_alloc_keep_for_messages((size_t)12 << 20);
    size_t kept = free_after_message(384);
    ck_assert_msg(kept >= ((size_t)23 << 20), "%zu bytes kept for 12 MiB messages", kept);
#endif
}
END_TEST

/* Minor page faults of rounds of an 8 MB block taken, written and freed. */
static long faults_of_big_blocks(int rounds) {
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    for (int i = 0; i < rounds; i++) {
        char *p = malloc((size_t)8 << 20);
        if (!p) return -1;
        memset(p, 1, (size_t)8 << 20);
        __asm__ volatile("" : : "r"(p) : "memory"); /* the writes stay */
        free(p);
    }
    getrusage(RUSAGE_SELF, &after);
    return after.ru_minflt - before.ru_minflt;
}

/* libdtrain in another program's process (a PyTorch worker) leaves that
 * program's allocator as it was: a worker's start once set glibc's trim
 * threshold, which turns off its dynamic mmap threshold, and every large
 * block the program took after it was mapped and faulted in afresh (a
 * CNN worker spent a third of its time in the kernel). Untuned, an 8 MB
 * block freed raises the threshold, and the next ones reuse the heap:
 * after the first rounds, no faults. Tuned (the binary), blocks over 1 MiB
 * are mapped each time, as cmd/dtrain.c wants. Sanitizers bring their own
 * allocator: there only harmless. */
START_TEST(test_library_leaves_allocator) {
    dt_alloc_keep_for_messages((size_t)4 << 20); /* what a library worker's start does */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    faults_of_big_blocks(3); /* the threshold learns the size */
    long untuned = faults_of_big_blocks(20);
    ck_assert_msg(untuned < 2048, "%ld page faults for 20 reused 8 MB blocks", untuned);
    dt_alloc_tune_process();
    long tuned = faults_of_big_blocks(20);
    ck_assert_msg(tuned >= 20 * 1024, "%ld page faults for 20 mapped 8 MB blocks", tuned);
#else
    ck_assert_int_ge(faults_of_big_blocks(2), 0);
#endif
}
END_TEST

Suite *alloc_suite(void) {
    Suite *s = suite_create("alloc");
    TCase *tc = tcase_create("alloc");
    tcase_add_unchecked_fixture(tc, suite_setup, dt_test_tmp_end);
    tcase_add_checked_fixture(tc, setup, teardown);
    /* Each entry point runs a few hundred times, fsyncs included, and
     * under ASan each run ends in a heap scan. */
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_countdown);
    tcase_add_test(tc, test_library_leaves_allocator);
    tcase_add_test(tc, test_keep_for_messages);
    tcase_add_test(tc, test_codec_allocates_nothing);
    tcase_add_test(tc, test_ckpt_save);
    tcase_add_test(tc, test_ckpt_save_rows);
    tcase_add_test(tc, test_ckpt_load);
    tcase_add_test(tc, test_ckpt_save_in_dir);
    tcase_add_test(tc, test_ckpt_restore_latest);
    tcase_add_test(tc, test_job_parse);
    tcase_add_test(tc, test_job_load);
    tcase_add_test(tc, test_cluster_load);
    tcase_add_test(tc, test_reader_csv);
    tcase_add_test(tc, test_reader_csv_gz);
    tcase_add_test(tc, test_reader_libsvm);
    tcase_add_test(tc, test_reader_idx);
    tcase_add_test(tc, test_reader_idx_gz);
    tcase_add_test(tc, test_reader_csv_facts);
    suite_add_tcase(s, tc);
    return s;
}
