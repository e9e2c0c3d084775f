/*
 * Fuzz target: the checkpoint readers. The first input byte picks one:
 *  - even: the rest is a safetensors file, read by dt_safetensors_load;
 *  - odd: the rest is a log dir's "checkpoint" state file, next to one good
 *    checkpoint (model.ckpt-5.safetensors), read by dt_ckpt_restore_latest.
 * dt_safetensors_load reads by path, so the input is written to a file in a temp
 * dir (made once, removed at exit).
 *
 * Beyond "no crash, no sanitizer report": a failure has a negative code
 * and a message; a loaded file holds valid tensors whose bytes fit their
 * shapes, and saving them again and loading that gives the same tensors
 * and metadata.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "log.h"
#include "tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_checkpoint: %s:%d: check failed: %s\n", __FILE__, __LINE__,      \
                    #cond);                                                                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static char dir[256];       /* the input file and the round trip's file */
static char state_dir[300]; /* a log dir: one good checkpoint and the fuzzed state file */

/* $TMPDIR, else /dev/shm (memory: the saves' fsyncs cost nothing), else /tmp. */
static const char *temp_base(void) {
    const char *base = getenv("TMPDIR");
    if (base && *base) return base;
    return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

static void remove_dir(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char child[600];
            snprintf(child, sizeof child, "%s/%s", path, e->d_name);
            if (unlink(child) != 0) remove_dir(child);
        }
        closedir(d);
    }
    rmdir(path);
}

static void cleanup(void) {
    remove_dir(dir);
}

static void init_once(void) {
    if (dir[0]) return;
    snprintf(dir, sizeof dir, "%s/dtrain-fuzz-ckpt-XXXXXX", temp_base());
    CHECK(mkdtemp(dir) != NULL);
    atexit(cleanup);
    dt_log_set_level(DT_LOG_ERROR); /* restore_latest warns about every bad file */
    snprintf(state_dir, sizeof state_dir, "%s/logs", dir);
    dt_tensor specs[2];
    memset(specs, 0, sizeof specs);
    snprintf(specs[0].name, sizeof specs[0].name, "linear/weight");
    specs[0].dtype = DT_DTYPE_F32;
    specs[0].ndim = 2;
    specs[0].shape[0] = specs[0].shape[1] = 1;
    snprintf(specs[1].name, sizeof specs[1].name, "linear/bias");
    specs[1].dtype = DT_DTYPE_F32;
    specs[1].ndim = 1;
    specs[1].shape[0] = 1;
    dt_tensors ts;
    dt_err err;
    dt_err_clear(&err);
    CHECK(dt_tensors_init(&ts, specs, 2, &err) == 0);
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.global_step = 5;
    snprintf(meta.model, sizeof meta.model, "linear features=1");
    CHECK(dt_ckpt_save_in_dir(state_dir, &ts, &meta, 0, NULL, 0, &err) == 0);
    dt_tensors_deinit(&ts);
}

static void write_file(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(size == 0 || fwrite(data, 1, size, f) == size);
    CHECK(fclose(f) == 0);
}

static void check_tensors(const dt_tensors *ts) {
    for (int i = 0; i < ts->count; i++) {
        const dt_tensor *t = &ts->items[i];
        CHECK(memchr(t->name, '\0', sizeof t->name) != NULL);
        dt_tensor spec = *t;
        spec.data = NULL;
        CHECK(dt_tensor_check_spec(&spec, NULL) == 0 && spec.nbytes == t->nbytes);
        CHECK(t->data != NULL);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(t->name, ts->items[j].name) != 0);
    }
}

static void load_file(const uint8_t *data, size_t size) {
    char path[300], again[300];
    snprintf(path, sizeof path, "%s/in.safetensors", dir);
    snprintf(again, sizeof again, "%s/again.safetensors", dir);
    write_file(path, data, size);
    dt_tensors ts, ts2;
    dt_safetensors_meta meta, meta2;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_safetensors_load(path, &ts, &meta, &err);
    if (rc < 0) {
        CHECK(err.code == rc && err.msg[0] != '\0');
        CHECK(ts.count == 0 && ts.items == NULL && ts.slab == NULL); /* nothing allocated */
        return;
    }
    CHECK(rc == 0);
    check_tensors(&ts);
    CHECK(memchr(meta.model, '\0', sizeof meta.model) != NULL);

    /* What loads saves, and loads back the same. */
    rc = dt_safetensors_save(again, &ts, &meta, &err);
    if (rc < 0) {
        fprintf(stderr, "fuzz_checkpoint: loaded, but cannot save it again: %s\n", err.msg);
        abort();
    }
    rc = dt_safetensors_load(again, &ts2, &meta2, &err);
    if (rc < 0) {
        fprintf(stderr, "fuzz_checkpoint: its own save does not load: %s\n", err.msg);
        abort();
    }
    CHECK(meta.global_step == meta2.global_step && strcmp(meta.model, meta2.model) == 0);
    CHECK(!meta.job == !meta2.job && (!meta.job || strcmp(meta.job, meta2.job) == 0));
    dt_safetensors_meta_deinit(&meta);
    dt_safetensors_meta_deinit(&meta2);
    CHECK(ts.count == ts2.count);
    for (int i = 0; i < ts.count; i++) {
        const dt_tensor *a = &ts.items[i], *b = dt_tensors_find(&ts2, a->name);
        CHECK(b != NULL);
        CHECK(a->dtype == b->dtype && a->ndim == b->ndim && a->nbytes == b->nbytes);
        CHECK(memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0);
        CHECK(memcmp(a->data, b->data, a->nbytes) == 0);
    }
    dt_tensors_deinit(&ts);
    dt_tensors_deinit(&ts2);
}

static void restore_with_state(const uint8_t *data, size_t size) {
    char path[400];
    snprintf(path, sizeof path, "%s/checkpoint", state_dir);
    write_file(path, data, size);
    dt_tensors ts;
    dt_safetensors_meta meta;
    char found[512];
    dt_err err;
    dt_err_clear(&err);
    memset(&ts, 0, sizeof ts);
    int rc = dt_ckpt_restore_latest(state_dir, &ts, &meta, found, sizeof found, &err);
    if (rc < 0) {
        CHECK(err.code == rc && err.msg[0] != '\0');
        return;
    }
    CHECK(rc == 0 || rc == 1);
    if (rc == 1) {
        check_tensors(&ts);
        CHECK(memchr(found, '\0', sizeof found) != NULL);
        dt_tensors_deinit(&ts);
        dt_safetensors_meta_deinit(&meta);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    init_once();
    if (data[0] % 2 == 0)
        load_file(data + 1, size - 1);
    else
        restore_with_state(data + 1, size - 1);
    return 0;
}
