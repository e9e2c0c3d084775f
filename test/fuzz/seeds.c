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
#include "fuzz_ps.h"
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

/* Appends one raw call of fuzz_ps's layout (fuzz_ps.h) to run: op, caller,
 * the encoded message's length (a byte) and the message. */
static void raw_call(uint8_t *run, size_t *n, size_t cap, int op, int caller, dt_msg_type type,
                     const void *msg) {
    dt_err err;
    dt_err_clear(&err);
    int64_t len = dt_codec_size(type, msg, &err);
    if (len < 0 || len > 255 || *n + 3 + (size_t)len > cap ||
        dt_codec_encode(type, msg, run + *n + 3, (size_t)len, &err) < 0)
        die("ps seed", &err);
    run[*n] = (uint8_t)op, run[*n + 1] = (uint8_t)caller, run[*n + 2] = (uint8_t)len;
    *n += 3 + (size_t)len;
}

/* Appends a fuzzed push (fuzz_ps.h): gradients g, step, seen_step, two
 * table ids and their rows, no flipped byte. */
static void fuzzed_push(uint8_t *run, size_t *n, int caller, const float g[9], int64_t step,
                        int64_t seen, const uint16_t ids[2], const float rows[4]) {
    uint8_t *p = run + *n + 2;
    run[*n] = FUZZ_PS_FUZZED_PUSH, run[*n + 1] = (uint8_t)caller;
    memset(p, 0, FUZZ_PS_PUSH_BYTES);
    memcpy(p + FUZZ_PS_PUSH_GRADS, g, 9 * sizeof *g);
    memcpy(p + FUZZ_PS_PUSH_STEP, &step, 8);
    memcpy(p + FUZZ_PS_PUSH_SEEN, &seen, 8);
    memcpy(p + FUZZ_PS_PUSH_IDS, ids, 2 * sizeof *ids);
    memcpy(p + FUZZ_PS_PUSH_ROWS, rows, 4 * sizeof *rows);
    *n += 2 + FUZZ_PS_PUSH_BYTES;
}

static void one_tensor(dt_tensor *t, const char *name, dt_dtype dtype, int64_t rows, int64_t cols,
                       void *data, size_t nbytes) {
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->data = data;
    t->nbytes = nbytes;
}

/* ps: runs of calls in fuzz_ps's layout (fuzz_ps.h): after the chief's
 * model, a fuzzed Push (dense and table rows) whose seen_step claims step
 * 100, and a Status; raw Pull and Shutdown messages; a Push to a ps no
 * chief created; and the table's calls: SparsePull of rows (one past the
 * table's end), SparseExport from the chief and a tool, a SparseImport
 * after the model is ready. */
static void ps_seeds(void) {
    uint8_t run[1024];
    size_t n = 0;
    const float g[9] = {0.5f, -1, 2, 0.25f, 0, 1, -0.5f, 1, 3}, rows[4] = {0.5f, -2, 1, 0.125f};
    const uint16_t ids[2] = {3, 999};
    dt_msg_status_req status = {.worker = -1};

    run[n++] = 0; /* the chief's model */
    fuzzed_push(run, &n, FUZZ_PS_WORKER1, g, 7, 100, ids, rows);
    raw_call(run, &n, sizeof run, FUZZ_PS_STATUS, FUZZ_PS_TOOL, DT_MSG_STATUS_REQ, &status);
    put("ps", "push-claims-step", -1, run, n);

    const char *names[2] = {"w", "b"};
    dt_msg_pull_req pull;
    memset(&pull, 0, sizeof pull);
    pull.worker = 1;
    pull.seen_step = 1000;
    pull.out_names = names;
    pull.out_count = 2;
    dt_msg_shutdown_req bye;
    memset(&bye, 0, sizeof bye);
    snprintf(bye.reason, sizeof bye.reason, "bye\nforged");
    n = 0;
    run[n++] = 0;
    raw_call(run, &n, sizeof run, FUZZ_PS_PULL, FUZZ_PS_WORKER1, DT_MSG_PULL_REQ, &pull);
    raw_call(run, &n, sizeof run, FUZZ_PS_SHUTDOWN, FUZZ_PS_ANYONE, DT_MSG_SHUTDOWN_REQ, &bye);
    put("ps", "pull-shutdown", -1, run, n);

    n = 0;
    run[n++] = 1; /* no model */
    fuzzed_push(run, &n, FUZZ_PS_ANYONE, g, 0, 0, ids, rows);
    put("ps", "push-not-ready", -1, run, n);

    int64_t want[3] = {1, 3, FUZZ_PS_TABLE_ROWS};
    dt_tensor ids_t;
    one_tensor(&ids_t, "t", DT_DTYPE_I64, 3, 0, want, sizeof want);
    dt_msg_sparse_pull_req sp;
    memset(&sp, 0, sizeof sp);
    sp.worker = 1;
    snprintf(sp.table, sizeof sp.table, "t");
    sp.ids_out = (dt_tensor_list){.items = &ids_t, .count = 1};
    dt_msg_sparse_export_req ex = {"t", -1, 2, true};
    int64_t held[2] = {3, 7};
    float values[4] = {1, -1, 0.5f, 2};
    dt_tensor page[2];
    one_tensor(&page[0], "t/ids", DT_DTYPE_I64, 2, 0, held, sizeof held);
    one_tensor(&page[1], "t/values", DT_DTYPE_F32, 2, 2, values, sizeof values);
    dt_msg_sparse_import_req im;
    memset(&im, 0, sizeof im);
    snprintf(im.table, sizeof im.table, "t");
    im.last = true;
    im.out = (dt_tensor_list){.items = page, .count = 2};
    n = 0;
    run[n++] = 0;
    fuzzed_push(run, &n, FUZZ_PS_WORKER1, g, 7, 7, ids, rows);
    raw_call(run, &n, sizeof run, FUZZ_PS_SPARSE_PULL, FUZZ_PS_WORKER1, DT_MSG_SPARSE_PULL_REQ,
             &sp);
    raw_call(run, &n, sizeof run, FUZZ_PS_SPARSE_EXPORT, FUZZ_PS_CHIEF, DT_MSG_SPARSE_EXPORT_REQ,
             &ex);
    raw_call(run, &n, sizeof run, FUZZ_PS_SPARSE_EXPORT, FUZZ_PS_TOOL, DT_MSG_SPARSE_EXPORT_REQ,
             &ex);
    raw_call(run, &n, sizeof run, FUZZ_PS_SPARSE_IMPORT, FUZZ_PS_CHIEF, DT_MSG_SPARSE_IMPORT_REQ,
             &im);
    put("ps", "table-calls", -1, run, n);
}

/* The table messages: a Create with a table, a Push with rows, and
 * SparsePull, SparseExport and SparseImport with their replies. */
static void table_seeds(void) {
    int64_t ids[3] = {2, 40, 1000003};
    float rows[6] = {0.5f, -1, 0.25f, 2, -0.125f, 1};
    dt_tensor t[4];
    one_tensor(&t[0], "wide/weight", DT_DTYPE_I64, 3, 0, ids, sizeof ids);
    one_tensor(&t[1], "wide/weight", DT_DTYPE_F32, 3, 2, rows, sizeof rows);
    one_tensor(&t[2], "wide/weight/ids", DT_DTYPE_I64, 3, 0, ids, sizeof ids);
    one_tensor(&t[3], "wide/weight/values", DT_DTYPE_F32, 3, 2, rows, sizeof rows);

    dt_msg_create_req create;
    memset(&create, 0, sizeof create);
    dt_optim_defaults(&create.optim);
    create.optim.kind = DT_OPTIM_FTRL;
    create.max_steps = 1000;
    snprintf(create.model, sizeof create.model, "logistic sparse");
    create.num_tables = 1;
    create.tables[0] =
        (dt_msg_table){"wide/weight", (int64_t)1 << 40, 2, DT_TABLE_INIT_NORMAL, 0.01, 7};
    create.eviction.idle_steps = 100;
    create.tables_pending = true;
    put_msg("create_req_table", DT_MSG_CREATE_REQ, &create);

    dt_msg_push_req push;
    memset(&push, 0, sizeof push);
    push.worker = 1;
    push.step = 12;
    push.push_id = 99;
    push.sparse_ids_out = (dt_tensor_list){.items = &t[0], .count = 1};
    push.sparse_grads_out = (dt_tensor_list){.items = &t[1], .count = 1};
    put_msg("push_req_rows", DT_MSG_PUSH_REQ, &push);

    dt_msg_sparse_pull_req pull;
    memset(&pull, 0, sizeof pull);
    pull.worker = 1;
    pull.seen_step = 12;
    snprintf(pull.table, sizeof pull.table, "wide/weight");
    pull.ids_out = (dt_tensor_list){.items = &t[0], .count = 1};
    put_msg("sparse_pull_req", DT_MSG_SPARSE_PULL_REQ, &pull);
    dt_msg_sparse_pull_resp pull_resp;
    memset(&pull_resp, 0, sizeof pull_resp);
    pull_resp.incarnation = 42;
    pull_resp.global_step = 13;
    pull_resp.values_out = (dt_tensor_list){.items = &t[1], .count = 1};
    put_msg("sparse_pull_resp", DT_MSG_SPARSE_PULL_RESP, &pull_resp);

    dt_msg_sparse_export_req ex = {"wide/weight", 40, 1024, true};
    put_msg("sparse_export_req", DT_MSG_SPARSE_EXPORT_REQ, &ex);
    dt_msg_sparse_export_resp ex_resp;
    memset(&ex_resp, 0, sizeof ex_resp);
    ex_resp.incarnation = 42;
    ex_resp.global_step = 13;
    ex_resp.more = true;
    ex_resp.out = (dt_tensor_list){.items = &t[2], .count = 2};
    put_msg("sparse_export_resp", DT_MSG_SPARSE_EXPORT_RESP, &ex_resp);

    dt_msg_sparse_import_req im;
    memset(&im, 0, sizeof im);
    snprintf(im.table, sizeof im.table, "wide/weight");
    im.last = true;
    im.out = ex_resp.out;
    put_msg("sparse_import_req", DT_MSG_SPARSE_IMPORT_REQ, &im);
    dt_msg_sparse_import_resp im_resp = {3};
    put_msg("sparse_import_resp", DT_MSG_SPARSE_IMPORT_RESP, &im_resp);
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
    table_seeds();
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
    static const char *const targets[] = {"codec",   "checkpoint", "config",
                                          "summary", "reader",     "ps"};
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
