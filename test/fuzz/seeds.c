/*
 * Writes the fuzz targets' seed inputs: small valid inputs of each format,
 * made with dtrain's own writers, so the fuzzers start from the formats'
 * real shapes. `make fuzz-seeds` runs it into test/fuzz/corpus:
 *   <out>/codec/seed-<message>    type byte + an encoded message
 *   <out>/checkpoint/seed-*       0x00 + a safetensors file, 0x01 + a state file
 *   <out>/config/seed-*           --set assignments (the conf/ files are copied
 *                                 by the makefile)
 *   <out>/summary/seed-*          an event file (scalars, a histogram)
 *   <out>/reader/seed-*           selector byte + csv, libsvm, idx (plain, gzip);
 *                                 seed-*-none, seed-*-detect: selector 3 + a
 *                                 mode byte + a file with or without labels
 * Usage: seeds OUT_DIR
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "codec.h"
#include "safetensors.h"
#include "summary.h"
#include "tensor.h"

static const char *out_dir;

static void die(const char *what, const dt_err *err) {
    fprintf(stderr, "seeds: %s%s%s\n", what, err ? ": " : "", err ? err->msg : "");
    exit(1);
}

static void make_dir(const char *target) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", out_dir, target);
    if (mkdir(path, 0755) != 0 && access(path, F_OK) != 0) die("cannot make a dir", NULL);
}

/* Writes prefix (if any) then data to <out>/<target>/seed-<name>. */
static void put(const char *target, const char *name, int prefix, const void *data, size_t len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/seed-%s", out_dir, target, name);
    FILE *f = fopen(path, "wb");
    if (!f) die(path, NULL);
    uint8_t p = (uint8_t)prefix;
    int ok =
        (prefix < 0 || fwrite(&p, 1, 1, f) == 1) && (len == 0 || fwrite(data, 1, len, f) == len);
    if (fclose(f) != 0 || !ok) die(path, NULL);
}

static void *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) die(path, NULL);
    size_t cap = 1 << 16;
    uint8_t *buf = malloc(cap);
    if (!buf) die("out of memory", NULL);
    *len = fread(buf, 1, cap, f);
    fclose(f);
    return buf;
}

/* The linear model's two variables with values. */
static void model_vars(dt_tensors *ts) {
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
    dt_err err;
    dt_err_clear(&err);
    if (dt_tensors_init(ts, specs, 2, &err) < 0) die("tensors", &err);
    float w = 1.98f, b = -0.01f;
    memcpy(ts->items[0].data, &w, 4);
    memcpy(ts->items[1].data, &b, 4);
}

static void put_msg(const char *name, dt_msg_type type, const void *msg) {
    dt_err err;
    dt_err_clear(&err);
    int64_t n = dt_codec_size(type, msg, &err);
    if (n < 0) die(name, &err);
    uint8_t *buf = malloc((size_t)n + 1);
    if (!buf) die("out of memory", NULL);
    if (dt_codec_encode(type, msg, buf, (size_t)n, &err) < 0) die(name, &err);
    put("codec", name, (int)type, buf, (size_t)n);
    free(buf);
}

/* ps: runs of calls in fuzz_ps's layout (see there): after the chief's
 * model, a fuzzed Push whose seen_step claims step 100 and a Status; raw
 * Pull and Shutdown messages; and a Push to a ps no chief created. */
static void ps_seeds(void) {
    uint8_t run[128];
    size_t n = 0;
    run[n++] = 0;       /* the chief's model */
    run[n++] = 5;       /* a fuzzed push */
    run[n++] = 2;       /* from worker:1 */
    float g[9] = {0.5f, -1, 2, 0.25f, 0, 1, -0.5f, 1, 3};
    memcpy(run + n, g, sizeof g);
    int64_t step = 7, seen = 100;
    memcpy(run + n + 36, &step, 8);
    memcpy(run + n + 44, &seen, 8);
    run[n + 52] = 0, run[n + 53] = 0; /* no flipped byte */
    n += 54;
    run[n++] = 3, run[n++] = 3, run[n++] = 0; /* Status from a tool, empty */
    put("ps", "push-claims-step", -1, run, n);

    const char *names[2] = {"w", "b"};
    dt_msg_pull_req pull;
    memset(&pull, 0, sizeof pull);
    pull.worker = 1;
    pull.seen_step = 1000;
    pull.out_names = names;
    pull.out_count = 2;
    dt_err err;
    dt_err_clear(&err);
    n = 0;
    run[n++] = 0, run[n++] = 1, run[n++] = 2; /* the chief's model; a Pull from worker:1 */
    int64_t len = dt_codec_size(DT_MSG_PULL_REQ, &pull, &err);
    if (len < 0 || len > 64 || dt_codec_encode(DT_MSG_PULL_REQ, &pull, run + n + 1, (size_t)len,
                                               &err) < 0)
        die("ps pull seed", &err);
    run[n++] = (uint8_t)len;
    n += (size_t)len;
    dt_msg_shutdown_req bye;
    memset(&bye, 0, sizeof bye);
    snprintf(bye.reason, sizeof bye.reason, "bye\nforged");
    run[n++] = 4, run[n++] = 0; /* Shutdown from anyone */
    len = dt_codec_size(DT_MSG_SHUTDOWN_REQ, &bye, &err);
    if (len < 0 || len > 64 || dt_codec_encode(DT_MSG_SHUTDOWN_REQ, &bye, run + n + 1, (size_t)len,
                                               &err) < 0)
        die("ps shutdown seed", &err);
    run[n++] = (uint8_t)len;
    n += (size_t)len;
    put("ps", "pull-shutdown", -1, run, n);

    n = 0;
    run[n++] = 1, run[n++] = 5, run[n++] = 0; /* no model; a fuzzed push from anyone */
    memset(run + n, 0, 54);
    n += 54;
    put("ps", "push-not-ready", -1, run, n);
}

static void codec_seeds(void) {
    dt_tensors vars;
    model_vars(&vars);
    dt_tensor_list list = {.items = vars.items, .count = vars.count};

    dt_msg_create_req create;
    memset(&create, 0, sizeof create);
    create.out = list;
    create.global_step = 1200;
    create.max_steps = 2000;
    dt_optim_defaults(&create.optim);
    create.optim.kind = DT_OPTIM_ADAM;
    create.schedule.kind = DT_LR_EXPONENTIAL;
    create.schedule.decay_steps = 1000;
    create.schedule.decay_rate = 0.96;
    create.consistency.mode = DT_MODE_SYNC;
    create.consistency.replicas_to_aggregate = 2;
    create.consistency.total_num_replicas = 2;
    create.consistency.timeout_ms = 30000;
    snprintf(create.model, sizeof create.model, "linear features=1 l2=0");
    put_msg("create_req", DT_MSG_CREATE_REQ, &create);

    dt_msg_create_resp create_resp = {0x1234abcd5678ef01ull, 1200};
    put_msg("create_resp", DT_MSG_CREATE_RESP, &create_resp);

    static const char *const names[] = {"linear/weight", "linear/bias"};
    dt_msg_pull_req pull;
    memset(&pull, 0, sizeof pull);
    pull.out_names = names;
    pull.out_count = 2;
    pull.worker = 1;
    pull.include_slots = true;
    pull.min_global_step = 7;
    put_msg("pull_req", DT_MSG_PULL_REQ, &pull);

    dt_msg_pull_resp pull_resp;
    memset(&pull_resp, 0, sizeof pull_resp);
    pull_resp.incarnation = 42;
    pull_resp.global_step = 1300;
    pull_resp.out = list;
    put_msg("pull_resp", DT_MSG_PULL_RESP, &pull_resp);

    dt_msg_push_req push;
    memset(&push, 0, sizeof push);
    push.worker = 1;
    push.step = 1300;
    push.out = list;
    put_msg("push_req", DT_MSG_PUSH_REQ, &push);

    dt_msg_push_resp push_resp;
    memset(&push_resp, 0, sizeof push_resp);
    push_resp.incarnation = 42;
    push_resp.global_step = 1301;
    push_resp.done = true;
    put_msg("push_resp", DT_MSG_PUSH_RESP, &push_resp);

    dt_msg_status_req status = {.worker = -1};
    put_msg("status_req", DT_MSG_STATUS_REQ, &status);

    dt_msg_status_resp status_resp;
    memset(&status_resp, 0, sizeof status_resp);
    status_resp.incarnation = 42;
    status_resp.ready = true;
    status_resp.global_step = 1301;
    status_resp.max_steps = 2000;
    status_resp.num_variables = 2;
    status_resp.num_bytes = 8;
    snprintf(status_resp.model, sizeof status_resp.model, "linear features=1");
    status_resp.pushes_applied = 1301;
    status_resp.num_staleness_counts = 3;
    status_resp.staleness_counts[0] = 1000;
    status_resp.staleness_counts[1] = 300;
    status_resp.staleness_counts[2] = 1;
    snprintf(status_resp.mode, sizeof status_resp.mode, "async");
    put_msg("status_resp", DT_MSG_STATUS_RESP, &status_resp);

    dt_msg_shutdown_req shutdown;
    memset(&shutdown, 0, sizeof shutdown);
    snprintf(shutdown.reason, sizeof shutdown.reason, "training complete");
    put_msg("shutdown_req", DT_MSG_SHUTDOWN_REQ, &shutdown);
    dt_msg_shutdown_resp shutdown_resp = {0};
    put_msg("shutdown_resp", DT_MSG_SHUTDOWN_RESP, &shutdown_resp);
    dt_tensors_deinit(&vars);
}

static void checkpoint_seeds(const char *tmp) {
    dt_tensors vars;
    model_vars(&vars);
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.global_step = 1200;
    snprintf(meta.model, sizeof meta.model, "linear features=1 l2=0");
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    dt_err err;
    dt_err_clear(&err);
    if (dt_safetensors_save(path, &vars, &meta, &err) < 0) die("checkpoint", &err);
    size_t len = 0;
    void *bytes = slurp(path, &len);
    put("checkpoint", "linear", 0, bytes, len);
    free(bytes);
    unlink(path);
    dt_tensors_deinit(&vars);

    static const char state[] = "model_checkpoint_path: \"model.ckpt-5.safetensors\"\n"
                                "all_model_checkpoint_paths: \"model.ckpt-3.safetensors\"\n"
                                "all_model_checkpoint_paths: \"model.ckpt-5.safetensors\"\n";
    put("checkpoint", "state", 1, state, strlen(state));
    static const char missing[] = "model_checkpoint_path: \"model.ckpt-9.safetensors\"\n";
    put("checkpoint", "state-missing", 1, missing, strlen(missing));
}

static void config_seeds(void) {
    static const char *const sets[] = {"max_steps=500",  "log_dir=logs/x",     "optimizer=adam",
                                       "hidden=[64,32]", "learning_rate=1e-3", "mode=sync"};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "set-%zu", i);
        put("config", name, -1, sets[i], strlen(sets[i]));
    }
}

static void summary_seeds(const char *tmp) {
    dt_summary_writer *w = NULL;
    dt_err err;
    dt_err_clear(&err);
    if (dt_summary_open(tmp, &w, &err) < 0) die("summary", &err);
    const char *tags[] = {"loss", "global_step/sec"};
    double values[] = {0.25, 1500.0};
    double hist[] = {-1.5, 0, 0.001, 2, 3.5};
    int64_t hist_counts[] = {1, 1, 1, 2, 1};
    if (dt_summary_scalars(w, 10, tags, values, 2, &err) < 0 ||
        dt_summary_histogram_counts(w, 20, "linear/weight", hist, hist_counts, 5, &err) < 0)
        die("summary", &err);
    char path[1024];
    snprintf(path, sizeof path, "%s", dt_summary_path(w));
    dt_summary_close(w);
    size_t len = 0;
    void *bytes = slurp(path, &len);
    put("summary", "events", -1, bytes, len);
    free(bytes);
    unlink(path);
}

static void put_gzip(const char *name, int prefix, const char *text) {
    uLongf cap = compressBound((uLong)strlen(text)) + 32;
    uint8_t *buf = malloc(cap);
    if (!buf) die("out of memory", NULL);
    /* A gzip stream (windowBits 16 + 15), as `gzip` writes. */
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, 6, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK) die("zlib", NULL);
    zs.next_in = (Bytef *)text;
    zs.avail_in = (uInt)strlen(text);
    zs.next_out = buf;
    zs.avail_out = (uInt)cap;
    if (deflate(&zs, Z_FINISH) != Z_STREAM_END) die("zlib", NULL);
    put("reader", name, prefix, buf, zs.total_out);
    deflateEnd(&zs);
    free(buf);
}

/* A reader input of selector format 3: sel, the mode byte (format | detect
 * << 2), then the file. */
static void put_mode(const char *name, int sel, int mode, const void *data, size_t len) {
    uint8_t *buf = malloc(len + 1);
    if (!buf) die("out of memory", NULL);
    buf[0] = (uint8_t)mode;
    memcpy(buf + 1, data, len);
    put("reader", name, 3 | sel, buf, len + 1);
    free(buf);
}

static void reader_seeds(void) {
    /* Selector: format | (F-1) << 2 | class << 5 | skip << 6 | bit 7; format
     * 3 takes the format and the labels mode from a second byte: format |
     * detect << 2 (0: read without labels, 1: as dt_reader_detect_labels
     * tells). */
    static const char csv[] = "label,x1,x2\n1,0.5,2\n0,\"1.5\",-3e2\n2, 4 ,5\r\n\n";
    put("reader", "csv", 0 | 1 << 2 | 1 << 5, csv, strlen(csv));
    static const char csv_named[] = "x1,label,x2\n0.5,1.25,2\n1,-2,3\n";
    put("reader", "csv-named", 0 | 1 << 2 | 1 << 7, csv_named, strlen(csv_named));
    put_gzip("csv-gz", 0 | 1 << 2 | 1 << 5, csv);
    static const char svm[] = "1 1:0.5 3:2 # first\n0 qid:3 2:1.5\n\n2 1:-1 2:1 3:4\n";
    put("reader", "libsvm", 1 | 2 << 2 | 1 << 5 | 1 << 6, svm, strlen(svm));
    static const char svm_signed[] = "-1 1:0.5\n+1 2:1\n";
    put("reader", "libsvm-signed", 1 | 1 << 2 | 1 << 7, svm_signed, strlen(svm_signed));
    /* idx: 2 images of 2x2 (F = 4) and their labels; split after the images. */
    static const uint8_t images[] = {0, 0, 8, 3, 0, 0,  0,   2,   0, 0, 0, 2,
                                     0, 0, 0, 2, 0, 64, 128, 255, 1, 2, 3, 4};
    static const uint8_t labels[] = {0, 0, 8, 1, 0, 0, 0, 2, 1, 2};
    uint8_t idx[2 + sizeof images + sizeof labels];
    idx[0] = (uint8_t)sizeof images;
    idx[1] = 0;
    memcpy(idx + 2, images, sizeof images);
    memcpy(idx + 2 + sizeof images, labels, sizeof labels);
    put("reader", "idx", 2 | 3 << 2 | 1 << 5, idx, sizeof idx);

    /* Without labels, and told by detection (one of each layout). */
    static const char csv_none[] = "x1,x2\n0.5,2\n\"1.5\",-3e2\n 4 ,5\r\n\n";
    put_mode("csv-none", 1 << 2, 0, csv_none, strlen(csv_none));
    put_mode("csv-detect", 1 << 2 | 1 << 7, 0 | 1 << 2, csv_named, strlen(csv_named));
    static const char svm_none[] = "1:0.5 3:2 # first\nqid:3 2:1.5\n\n1:-1 2:1 3:4\n";
    put_mode("libsvm-none", 2 << 2, 1, svm_none, strlen(svm_none));
    put_mode("libsvm-detect", 2 << 2, 1 | 1 << 2, svm_none, strlen(svm_none));
    /* idx images alone: the split leaves the labels part empty. */
    uint8_t idx_none[2 + sizeof images];
    idx_none[0] = (uint8_t)sizeof images;
    idx_none[1] = 0;
    memcpy(idx_none + 2, images, sizeof images);
    put_mode("idx-none", 3 << 2, 2, idx_none, sizeof idx_none);
    put_mode("idx-detect", 3 << 2 | 1 << 5, 2 | 1 << 2, idx, sizeof idx);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: seeds OUT_DIR\n");
        return 2;
    }
    out_dir = argv[1];
    static const char *const targets[] = {"codec", "checkpoint", "config", "summary", "reader", "ps"};
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
        make_dir(targets[i]);
    char tmp[] = "/tmp/dtrain-seeds-XXXXXX";
    if (!mkdtemp(tmp)) die("mkdtemp", NULL);
    codec_seeds();
    ps_seeds();
    checkpoint_seeds(tmp);
    config_seeds();
    summary_seeds(tmp);
    reader_seeds();
    rmdir(tmp);
    return 0;
}
