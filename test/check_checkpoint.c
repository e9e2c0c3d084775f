/*
 * checkpoint suite: the checkpoint file and the log dir that holds them.
 *
 * "file" (lib/safetensors.c): round trips (bit-exact), the file read back by
 * an independent header parse and by numpy (python3-numpy, which
 * scripts/install_deps.sh installs: the test fails without it), refusal
 * of damaged files (truncation at every byte, every flipped data byte,
 * hand-made bad headers), write faults at every byte of a save; rows
 * streamed to a save (safetensors.h's rows writer) against a save of the
 * same set in memory, byte for byte, and CRC-32C's combine.
 * "log_dir" (lib/checkpoint.c, lib/dirlock.c): rotation, the state file,
 * restore fallbacks, kills at the save's crash points, the log dir's lock.
 * One suite: both halves share the temp dir, the test model and the file
 * helpers below.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint.h"
#include "crc32c.h"
#include "dirlock.h"
#include "log.h"
#include "suites.h"

static char tmpdir[512];

static void setup(void) {
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/dtrain-ckpt-XXXXXX", base && *base ? base : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    /* The fallbacks under test log warnings by design; keep the run quiet. */
    dt_log_set_level(DT_LOG_ERROR);
}

static void rm_rf(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *dir = opendir(path);
        if (dir) {
            struct dirent *de;
            while ((de = readdir(dir)) != NULL) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
                char child[1024];
                snprintf(child, sizeof child, "%s/%s", path, de->d_name);
                rm_rf(child);
            }
            closedir(dir);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

static void teardown(void) {
    rm_rf(tmpdir);
}

/* ---- helpers -------------------------------------------------------------- */

static void tmp_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", tmpdir, name);
}

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "open %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    ck_assert_int_ge(n, 0);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = '\0';
    *len = (size_t)n;
    return buf;
}

static void write_all_file(const char *path, const void *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "create %s: %s", path, strerror(errno));
    ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

static void write_text(const char *path, const char *text) {
    write_all_file(path, text, strlen(text));
}

/* A safetensors file with this exact header text and data_len data bytes
 * (0, 1, 2, ...). */
static void write_raw(const char *path, const char *header, uint64_t header_len, size_t data_len) {
    size_t hl = strlen(header);
    unsigned char *buf = malloc(8 + hl + data_len + 1);
    ck_assert_ptr_nonnull(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(header_len >> (8 * i));
    memcpy(buf + 8, header, hl);
    for (size_t i = 0; i < data_len; i++)
        buf[8 + hl + i] = (unsigned char)i;
    write_all_file(path, buf, 8 + hl + data_len);
    free(buf);
}

/* The state file's text (heap), or NULL; no Check calls (used while a
 * mount is up). */
static char *read_state_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = calloc(1, 4096);
    if (buf && fread(buf, 1, 4095, f) == 0) buf[0] = '\0';
    fclose(f);
    return buf;
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* The entries of a dir whose name holds needle (NULL: all but . and ..). */
static int count_files_with(const char *dir_path, const char *needle) {
    DIR *dir = opendir(dir_path);
    ck_assert_ptr_nonnull(dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL)
        n += needle ? strstr(de->d_name, needle) != NULL
                    : strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(dir);
    return n;
}

static int count_tmp_files(const char *dir_path) {
    return count_files_with(dir_path, ".tmp.");
}

static void assert_err(int rc, const dt_err *err, int code, const char *needle) {
    ck_assert_msg(rc == code, "rc %d (%s), want %d; msg: %s", rc, dt_err_name(rc), code, err->msg);
    ck_assert_int_eq(err->code, code);
    ck_assert_msg(strstr(err->msg, needle) != NULL, "message \"%s\" lacks \"%s\"", err->msg,
                  needle);
}

static void assert_empty(const dt_tensors *ts) {
    ck_assert_int_eq(ts->count, 0);
    ck_assert_ptr_null(ts->items);
    ck_assert_ptr_null(ts->slab);
}

/* The test model; values depend on seed so checkpoints of different steps
 * differ. */
static void build_model(dt_tensors *ts, int seed) {
    dt_tensor specs[] = {
        {.name = "linear/weight", .dtype = DT_DTYPE_F32, .ndim = 2, .shape = {3, 2}}, /* (F, K) */
        {.name = "linear/bias", .dtype = DT_DTYPE_F32, .ndim = 0},                    /* scalar */
        {.name = "step_counts", .dtype = DT_DTYPE_I64, .ndim = 1, .shape = {3}},
        {.name = "ids", .dtype = DT_DTYPE_I32, .ndim = 2, .shape = {2, 2}},
        {.name = "adam/v", .dtype = DT_DTYPE_F64, .ndim = 1, .shape = {2}},
    };
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_tensors_init(ts, specs, 5, &err) == 0, "%s", err.msg);
    float *w = ts->items[0].data;
    const float wv[6] = {0.5f * (float)seed, -1.25f, 3.0f, -0.0f, 1e-3f, FLT_MIN / 4};
    memcpy(w, wv, sizeof wv);
    *(float *)ts->items[1].data = 0.1f * (float)seed;
    int64_t *c = ts->items[2].data;
    c[0] = INT64_MIN;
    c[1] = INT64_MAX;
    c[2] = seed;
    int32_t *ids = ts->items[3].data;
    ids[0] = -1, ids[1] = INT32_MAX, ids[2] = INT32_MIN, ids[3] = seed;
    double *v = ts->items[4].data;
    v[0] = 1.0 / 3.0, v[1] = -1e300 * seed;
}

/* The same names, dtypes, shapes and bytes, in the same order. */
static void assert_same_tensors(const dt_tensors *a, const dt_tensors *b) {
    ck_assert_int_eq(a->count, b->count);
    for (int i = 0; i < a->count; i++) {
        const dt_tensor *x = &a->items[i], *y = &b->items[i];
        ck_assert_str_eq(x->name, y->name);
        ck_assert_int_eq(x->dtype, y->dtype);
        ck_assert_int_eq(x->ndim, y->ndim);
        for (int d = 0; d < x->ndim; d++)
            ck_assert_int_eq(x->shape[d], y->shape[d]);
        ck_assert_uint_eq(x->nbytes, y->nbytes);
        ck_assert_msg(memcmp(x->data, y->data, x->nbytes) == 0, "tensor %s differs", x->name);
    }
}

static dt_safetensors_meta make_meta(int64_t step) {
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.global_step = step;
    snprintf(meta.model, sizeof meta.model, "linear F=3 K=2 \"quoted\" \xc3\xa9");
    return meta;
}

/* Saves the seed model at path. */
static void save_model(const char *path, int seed, int64_t step) {
    dt_tensors ts;
    build_model(&ts, seed);
    dt_safetensors_meta meta = make_meta(step);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_safetensors_save(path, &ts, &meta, &err) == 0, "%s", err.msg);
    dt_tensors_deinit(&ts);
}

static void save_in_dir(const char *dir, int seed, int64_t step, int max_to_keep) {
    dt_tensors ts;
    build_model(&ts, seed);
    dt_safetensors_meta meta = make_meta(step);
    dt_err err;
    dt_err_clear(&err);
    char out[1024];
    ck_assert_msg(dt_ckpt_save_in_dir(dir, &ts, &meta, max_to_keep, out, sizeof out, &err) == 0,
                  "%s", err.msg);
    char want[1024];
    snprintf(want, sizeof want, "%s/model.ckpt-%lld.safetensors", dir, (long long)step);
    ck_assert_str_eq(out, want);
    dt_tensors_deinit(&ts);
}

/* Offset of the data section of a checkpoint file. */
static size_t data_start(const unsigned char *buf) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | buf[i];
    return 8 + (size_t)n;
}

static void flip_data_byte(const char *path, size_t index_in_data) {
    size_t len;
    unsigned char *buf = read_all(path, &len);
    size_t at = data_start(buf) + index_in_data;
    ck_assert_uint_lt(at, len);
    buf[at] ^= 0x10;
    write_all_file(path, buf, len);
    free(buf);
}

/* ---- save and load -------------------------------------------------------- */

START_TEST(test_round_trip) {
    char path[1024];
    tmp_path(path, sizeof path, "rt.safetensors");
    dt_tensors ts, back, again_job;
    build_model(&ts, 7);
    /* Bit patterns a float-by-float copy could lose: a NaN with a payload
     * and a negative zero (already in the weight). */
    uint32_t nan_bits = 0x7fc01234u;
    memcpy(ts.items[1].data, &nan_bits, 4);
    dt_safetensors_meta meta = make_meta(1200), got;
    memset(&got, 0x55, sizeof got);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_safetensors_save(path, &ts, &meta, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(count_tmp_files(tmpdir), 0);
    ck_assert_msg(dt_safetensors_load(path, &back, &got, &err) == 0, "%s", err.msg);
    assert_same_tensors(&ts, &back);
    /* Same order as saved. */
    ck_assert_str_eq(back.items[0].name, "linear/weight");
    ck_assert_str_eq(back.items[4].name, "adam/v");
    ck_assert_int_eq(back.items[1].ndim, 0);
    ck_assert_int_eq(got.global_step, 1200);
    ck_assert_str_eq(got.model, meta.model);
    ck_assert_ptr_null(got.job); /* none saved */
    /* The job config travels as given. */
    char job[] = "{\"model\":\"linear\",\"learning_rate\":0.05,\"log_dir\":\"runs/\\u00e9\"}";
    meta.job = job;
    ck_assert_msg(dt_safetensors_save(path, &ts, &meta, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_safetensors_load(path, &again_job, &got, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(got.job, job);
    dt_safetensors_meta_deinit(&got);
    ck_assert_ptr_null(got.job);
    dt_tensors_deinit(&again_job);
    /* So do a csv's feature names. */
    char names[] = "x1,\xc3\xa9,x 3";
    meta.feature_names = names;
    ck_assert_msg(dt_safetensors_save(path, &ts, &meta, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_safetensors_load(path, &again_job, &got, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(got.feature_names, names);
    ck_assert_str_eq(got.job, job);
    dt_safetensors_meta_deinit(&got);
    ck_assert_ptr_null(got.feature_names);
    dt_tensors_deinit(&again_job);
    char not_utf8[] = "x1,\xff";
    meta.feature_names = not_utf8;
    ck_assert_int_eq(dt_safetensors_save(path, &ts, &meta, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "feature_names is not UTF-8"), "%s", err.msg);
    dt_err_clear(&err);
    meta.feature_names = NULL;
    /* One that is not a JSON object is refused before anything is written. */
    char not_object[] = "[1, 2]";
    meta.job = not_object;
    ck_assert_int_eq(dt_safetensors_save(path, &ts, &meta, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "job is not a JSON object"), "%s", err.msg);
    dt_err_clear(&err);
    /* A NULL meta is allowed. */
    dt_tensors again;
    ck_assert_msg(dt_safetensors_load(path, &again, NULL, &err) == 0, "%s", err.msg);
    assert_same_tensors(&ts, &again);
    dt_tensors_deinit(&again);
    dt_tensors_deinit(&back);
    dt_tensors_deinit(&ts);
}
END_TEST

START_TEST(test_round_trip_empty_and_overwrite) {
    char path[1024];
    tmp_path(path, sizeof path, "empty.safetensors");
    dt_tensors none;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_tensors_init(&none, NULL, 0, &err), 0);
    dt_safetensors_meta meta = make_meta(0), got;
    ck_assert_msg(dt_safetensors_save(path, &none, &meta, &err) == 0, "%s", err.msg);
    dt_tensors back;
    ck_assert_msg(dt_safetensors_load(path, &back, &got, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(back.count, 0);
    ck_assert_int_eq(got.global_step, 0);
    dt_tensors_deinit(&back);
    dt_tensors_deinit(&none);
    /* Saving over an existing checkpoint replaces it whole. */
    save_model(path, 3, (int64_t)1 << 40);
    ck_assert_msg(dt_safetensors_load(path, &back, &got, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(back.count, 5);
    ck_assert_int_eq(got.global_step, (int64_t)1 << 40);
    dt_tensors_deinit(&back);
}
END_TEST

/* Reads the file as any safetensors reader would, without safetensors.c. */
START_TEST(test_file_is_valid_safetensors) {
    char path[1024];
    tmp_path(path, sizeof path, "st.safetensors");
    dt_tensors ts;
    build_model(&ts, 2);
    dt_safetensors_meta meta = make_meta(1200);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_safetensors_save(path, &ts, &meta, &err) == 0, "%s", err.msg);

    size_t len;
    unsigned char *buf = read_all(path, &len);
    ck_assert_uint_ge(len, 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | buf[i];
    ck_assert_uint_le(8 + n, len);
    ck_assert_uint_eq((8 + n) % 8, 0); /* data aligned to 8 bytes */
    ck_assert_int_eq(buf[8], '{');
    const unsigned char *data = buf + 8 + n;
    size_t data_len = len - 8 - (size_t)n;

    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)buf + 8, (size_t)n, &end, 0);
    ck_assert_ptr_nonnull(root);
    for (const char *p = end; p < (const char *)buf + 8 + n; p++)
        ck_assert_int_eq(*p, ' ');

    const cJSON *md = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "global_step")),
                     "1200");
    ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "model")),
                     meta.model);
    ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "format")),
                     "dtrain.checkpoint.v1");
    char crc[16];
    snprintf(crc, sizeof crc, "%u", (unsigned)dt_crc32c(data, data_len));
    ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "crc32c")), crc);
    for (const cJSON *kv = md->child; kv; kv = kv->next)
        ck_assert(cJSON_IsString(kv));

    ck_assert_int_eq(cJSON_GetArraySize(root), ts.count + 1);
    size_t expect_off = 0;
    for (int i = 0; i < ts.count; i++) {
        const dt_tensor *t = &ts.items[i];
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, t->name);
        ck_assert_msg(e != NULL, "no entry for %s", t->name);
        ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "dtype")),
                         dt_dtype_name(t->dtype));
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
        ck_assert(cJSON_IsArray(shape));
        ck_assert_int_eq(cJSON_GetArraySize(shape), t->ndim);
        for (int d = 0; d < t->ndim; d++)
            ck_assert_int_eq((int64_t)cJSON_GetArrayItem(shape, d)->valuedouble, t->shape[d]);
        const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        ck_assert_int_eq(cJSON_GetArraySize(offs), 2);
        size_t b = (size_t)cJSON_GetArrayItem(offs, 0)->valuedouble;
        size_t f = (size_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
        ck_assert_uint_eq(b, expect_off); /* contiguous, in saved order */
        ck_assert_uint_eq(f - b, t->nbytes);
        ck_assert(memcmp(data + b, t->data, t->nbytes) == 0);
        expect_off = f;
    }
    ck_assert_uint_eq(expect_off, data_len);
    /* Scalars have shape []. */
    ck_assert_ptr_nonnull(
        strstr((const char *)buf + 8, "\"linear/bias\":{\"dtype\":\"F32\",\"shape\":[]"));
    cJSON_Delete(root);
    free(buf);
    dt_tensors_deinit(&ts);
}
END_TEST

/* Whatever the header's length, the data starts on an 8-byte boundary and
 * the padding is spaces. */
START_TEST(test_data_aligned) {
    char path[1024];
    tmp_path(path, sizeof path, "align.safetensors");
    for (int pad = 0; pad < 8; pad++) {
        dt_tensors ts;
        build_model(&ts, 1);
        dt_safetensors_meta meta = make_meta(5);
        memset(meta.model, 'x', (size_t)pad);
        meta.model[pad] = '\0';
        dt_err err;
        dt_err_clear(&err);
        ck_assert_msg(dt_safetensors_save(path, &ts, &meta, &err) == 0, "%s", err.msg);
        size_t len;
        unsigned char *buf = read_all(path, &len);
        size_t start = data_start(buf);
        ck_assert_msg(start % 8 == 0, "model length %d: data at %zu", pad, start);
        const unsigned char *close_brace = buf + start - 1;
        while (*close_brace == ' ')
            close_brace--;
        ck_assert_int_eq(*close_brace, '}');
        ck_assert_uint_lt((size_t)(buf + start - 1 - close_brace), 8);
        ck_assert_uint_eq(len - start, 6 * 4 + 4 + 3 * 8 + 4 * 4 + 2 * 8);
        free(buf);
        dt_tensors back;
        ck_assert_msg(dt_safetensors_load(path, &back, &meta, &err) == 0, "%s", err.msg);
        ck_assert_int_eq((int)strlen(meta.model), pad);
        dt_tensors_deinit(&back);
        dt_tensors_deinit(&ts);
    }
}
END_TEST

START_TEST(test_numpy_reads_checkpoint) {
    ck_assert_msg(system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0,
                  "no numpy for /usr/bin/python3: install python3-numpy (scripts/install_deps.sh)");
    char path[1024];
    tmp_path(path, sizeof path, "np.safetensors");
    dt_tensors ts;
    build_model(&ts, 5);
    dt_safetensors_meta meta = make_meta(1200);
    snprintf(meta.model, sizeof meta.model, "linear");
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_safetensors_save(path, &ts, &meta, &err) == 0, "%s", err.msg);

    static const char script[] =
        "import json, struct, sys\n"
        "import numpy as np\n"
        "raw = open(sys.argv[1], 'rb').read()\n"
        "(n,) = struct.unpack('<Q', raw[:8])\n"
        "hdr = json.loads(raw[8:8 + n].decode('utf-8'))\n"
        "data = raw[8 + n:]\n"
        "meta = hdr.pop('__metadata__')\n"
        "print('meta', meta['global_step'], meta['model'], meta['format'])\n"
        "types = {'F32': '<f4', 'F64': '<f8', 'I32': '<i4', 'I64': '<i8'}\n"
        "for name, t in sorted(hdr.items(), key=lambda kv: kv[1]['data_offsets'][0]):\n"
        "    b, e = t['data_offsets']\n"
        "    a = np.frombuffer(data[b:e], dtype=types[t['dtype']]).reshape(t['shape'])\n"
        "    isf = t['dtype'][0] == 'F'\n"
        "    vals = ['%.17g' % float(x) if isf else '%d' % int(x) for x in a.ravel()]\n"
        "    print(name, t['dtype'], list(a.shape), ' '.join(vals))\n";
    char script_path[1024], cmd[4096];
    tmp_path(script_path, sizeof script_path, "read.py");
    write_text(script_path, script);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s'", script_path, path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char got[4096];
    size_t n = fread(got, 1, sizeof got - 1, p);
    got[n] = '\0';
    ck_assert_int_eq(pclose(p), 0);

    /* The same lines from the C values. */
    char want[4096];
    int w = snprintf(want, sizeof want, "meta 1200 linear dtrain.checkpoint.v1\n");
    for (int i = 0; i < ts.count; i++) {
        const dt_tensor *t = &ts.items[i];
        w += snprintf(want + w, sizeof want - (size_t)w, "%s %s [", t->name,
                      dt_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++)
            w += snprintf(want + w, sizeof want - (size_t)w, "%s%lld", d ? ", " : "",
                          (long long)t->shape[d]);
        w += snprintf(want + w, sizeof want - (size_t)w, "]");
        for (int64_t k = 0; k < dt_tensor_numel(t); k++) {
            const char *sep = " ";
            switch (t->dtype) {
            case DT_DTYPE_F32:
                w += snprintf(want + w, sizeof want - (size_t)w, "%s%.17g", sep,
                              (double)((const float *)t->data)[k]);
                break;
            case DT_DTYPE_F64:
                w += snprintf(want + w, sizeof want - (size_t)w, "%s%.17g", sep,
                              ((const double *)t->data)[k]);
                break;
            case DT_DTYPE_I32:
                w += snprintf(want + w, sizeof want - (size_t)w, "%s%d", sep,
                              (int)((const int32_t *)t->data)[k]);
                break;
            default:
                w += snprintf(want + w, sizeof want - (size_t)w, "%s%lld", sep,
                              (long long)((const int64_t *)t->data)[k]);
            }
        }
        w += snprintf(want + w, sizeof want - (size_t)w, "\n");
    }
    ck_assert_str_eq(got, want);
    dt_tensors_deinit(&ts);
}
END_TEST

START_TEST(test_missing_file) {
    char path[1024];
    tmp_path(path, sizeof path, "nope.safetensors");
    dt_tensors out;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_safetensors_load(path, &out, NULL, &err);
    assert_err(rc, &err, DT_ENOTFOUND, "nope.safetensors: open");
    assert_empty(&out);
}
END_TEST

/* Fault injection: every proper prefix of a checkpoint is refused. */
START_TEST(test_truncated_at_every_byte) {
    char path[1024], cut_path[1024];
    tmp_path(path, sizeof path, "full.safetensors");
    tmp_path(cut_path, sizeof cut_path, "cut.safetensors");
    save_model(path, 1, 10);
    size_t len;
    unsigned char *buf = read_all(path, &len);
    for (size_t cut = 0; cut < len; cut++) {
        write_all_file(cut_path, buf, cut);
        dt_tensors out;
        dt_safetensors_meta meta = make_meta(77);
        dt_err err;
        dt_err_clear(&err);
        int rc = dt_safetensors_load(cut_path, &out, &meta, &err);
        ck_assert_msg(rc == DT_ECORRUPT, "cut at %zu: rc %d (%s)", cut, rc, err.msg);
        ck_assert_msg(strstr(err.msg, cut_path) == err.msg, "cut at %zu: %s", cut, err.msg);
        ck_assert_msg(strstr(err.msg, "truncated") != NULL, "cut at %zu: %s", cut, err.msg);
        assert_empty(&out);
        ck_assert_int_eq(meta.global_step, 77); /* untouched on failure */
    }
    free(buf);
}
END_TEST

START_TEST(test_every_flipped_data_byte) {
    char path[1024];
    tmp_path(path, sizeof path, "flip.safetensors");
    save_model(path, 1, 10);
    size_t len;
    unsigned char *orig = read_all(path, &len);
    size_t start = data_start(orig);
    for (size_t i = start; i < len; i++) {
        orig[i] ^= 0x01;
        write_all_file(path, orig, len);
        orig[i] ^= 0x01;
        dt_tensors out;
        dt_err err;
        dt_err_clear(&err);
        int rc = dt_safetensors_load(path, &out, NULL, &err);
        assert_err(rc, &err, DT_ECORRUPT, "crc32c mismatch");
        assert_empty(&out);
    }
    free(orig);
}
END_TEST

typedef struct {
    const char *header;
    size_t data_len;
    const char *needle;
} bad_case;

static const bad_case bad_headers[] = {
    {"{\"a\":", 0, "not valid JSON"},
    {"[1, 2]", 0, "not a JSON object"},
    {"{} x", 0, "after the JSON"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     12, "overlap"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
     8, "overlap"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
     20, "gap in the data section: bytes [8, 12)"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
     "gap in the data section: bytes [0, 4)"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
     "4 bytes after the last tensor"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
     "\"a\": data_offsets [0, 8] hold 8 bytes but F32 [3] needs 12"},
    {"{\"a\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, "I64 [] needs 8"},
    {"{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
     "unknown dtype \"F16\""},
    {"{\"a\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "non-string \"dtype\""},
    {"{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "missing or non-string \"dtype\""},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,8]}}", 8,
     "shape[0] is not a non-negative integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2, 1.5],\"data_offsets\":[0,8]}}", 8,
     "shape[1] is not a non-negative integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8,
     "shape[0] is not a non-negative integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, "shape[0] is 0"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "5 dimensions"},
    {"{\"a\":{\"dtype\":\"F64\",\"shape\":[1048576,1048576],\"data_offsets\":[0,8]}}", 8,
     "larger than 2^40 bytes"},
    {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "non-array \"shape\""},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
     "end before they begin"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
     "run past the 8-byte data section"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8,
     "\"data_offsets\" is not"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,-8]}}", 8,
     "\"data_offsets\" is not"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "\"data_offsets\" is not"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
     16, "\"a\" appears twice"},
    {"{\"a\":5}", 0, "\"a\": entry is not an object"},
    {"{\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "empty name"},
    {"{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
     "byte 3 is not valid UTF-8"},
    {"{\"a\xc0\xaf\":{}}", 0, "byte 3 is not valid UTF-8"}, /* overlong '/' */
    {"{\"a\x01\":{}}", 0, "control byte 0x01 at byte 3"},
    {"{\"__metadata__\":[]}", 0, "__metadata__ is not an object"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "__metadata__ appears twice"},
    {"{\"__metadata__\":{\"global_step\":12}}", 0, "\"global_step\" is not a string"},
    {"{\"__metadata__\":{\"global_step\":\"-5\"}}", 0, "global_step \"-5\" is not a decimal int64"},
    {"{\"__metadata__\":{\"global_step\":\"12a\"}}", 0, "global_step \"12a\""},
    {"{\"__metadata__\":{\"global_step\":\"\"}}", 0, "global_step \"\""},
    {"{\"__metadata__\":{\"global_step\":\"9223372036854775808\"}}", 0,
     "global_step \"9223372036854775808\" is not"},
    {"{\"__metadata__\":{\"crc32c\":\"4294967296\"}}", 0, "crc32c \"4294967296\" is not"},
    {"{\"__metadata__\":{\"format\":\"dtrain.checkpoint.v1\",\"global_step\":\"5\"}}", 0,
     "has no crc32c"},
    {"{\"__metadata__\":{\"format\":\"dtrain.checkpoint.v1\",\"crc32c\":\"0\"}}", 0,
     "has no global_step"},
    {"{\"__metadata__\":{\"format\":\"dtrain.checkpoint.v2\"}}", 0,
     "unsupported format \"dtrain.checkpoint.v2\""},
    {"{\"__metadata__\":{\"crc32c\":\"0\"}}", 4, "4 bytes after the last tensor"},
    {"{\"__metadata__\":{\"crc32c\":\"1\"}}", 0, "crc32c mismatch: header says 1, data has 0"},
    {"{\"__metadata__\":{\"job\":\"[1]\"}}", 0, "__metadata__ job is not a JSON object"},
    {"{\"__metadata__\":{\"job\":\"{\\\"a\\\":\"}}", 0, "__metadata__ job is not a JSON object"},
    {"{\"__metadata__\":{\"feature_names\":[\"a\"]}}", 0,
     "__metadata__ \"feature_names\" is not a string"},
    {"{\"__metadata__\":{\"eval_loss\":\"nan\"}}", 0, "eval_loss \"nan\" is not a finite number"},
    {"{\"__metadata__\":{\"eval_loss\":\"1.5x\"}}", 0, "eval_loss \"1.5x\""},
    {"{\"__metadata__\":{\"eval_loss\":\"\"}}", 0, "eval_loss \"\""},
    {"{\"__metadata__\":{\"stopped_early\":\"yes\"}}", 0, "stopped_early \"yes\" is not"},
    {"{\"__metadata__\":{\"evals_without_gain\":\"-1\"}}", 0, "evals_without_gain \"-1\" is not"},
    {"{\"__metadata__\":{\"evals_without_gain\":\"3x\"}}", 0, "evals_without_gain \"3x\" is not"},
};

START_TEST(test_bad_header) {
    const bad_case *c = &bad_headers[_i];
    char path[1024];
    tmp_path(path, sizeof path, "bad.safetensors");
    write_raw(path, c->header, strlen(c->header), c->data_len);
    dt_tensors out;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_safetensors_load(path, &out, NULL, &err);
    ck_assert_msg(rc == DT_ECORRUPT, "case %d (%s): rc %d: %s", _i, c->header, rc, err.msg);
    ck_assert_msg(strstr(err.msg, path) == err.msg, "case %d: %s", _i, err.msg);
    ck_assert_msg(strstr(err.msg, c->needle) != NULL, "case %d: \"%s\" lacks \"%s\"", _i, err.msg,
                  c->needle);
    assert_empty(&out);
}
END_TEST

START_TEST(test_model_too_long) {
    char header[600];
    char model[300];
    memset(model, 'm', sizeof model - 1);
    model[sizeof model - 1] = '\0';
    snprintf(header, sizeof header, "{\"__metadata__\":{\"model\":\"%s\"}}", model);
    char path[1024];
    tmp_path(path, sizeof path, "model.safetensors");
    write_raw(path, header, strlen(header), 0);
    dt_tensors out;
    dt_err err;
    dt_err_clear(&err);
    assert_err(dt_safetensors_load(path, &out, NULL, &err), &err, DT_ECORRUPT,
               "model is longer than 255");

    /* A tensor name longer than DT_TENSOR_NAME_MAX - 1. */
    char name[200];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    snprintf(header, sizeof header,
             "{\"%s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", name);
    write_raw(path, header, strlen(header), 4);
    dt_err_clear(&err);
    assert_err(dt_safetensors_load(path, &out, NULL, &err), &err, DT_ECORRUPT,
               "name longer than 127");
}
END_TEST

START_TEST(test_bad_header_length) {
    char path[1024];
    tmp_path(path, sizeof path, "len.safetensors");
    dt_tensors out;
    dt_err err;

    write_all_file(path, "abc", 3);
    dt_err_clear(&err);
    assert_err(dt_safetensors_load(path, &out, NULL, &err), &err, DT_ECORRUPT,
               "file is 3 bytes, too short for the 8-byte header length");

    const char *h = "{}";
    write_raw(path, h, (uint64_t)1 << 40, 0);
    dt_err_clear(&err);
    assert_err(dt_safetensors_load(path, &out, NULL, &err), &err, DT_ECORRUPT,
               "header length 1099511627776 exceeds the 100 MB limit");

    write_raw(path, h, UINT64_MAX, 0);
    dt_err_clear(&err);
    assert_err(dt_safetensors_load(path, &out, NULL, &err), &err, DT_ECORRUPT,
               "exceeds the 100 MB limit");

    write_raw(path, h, 3, 0);
    dt_err_clear(&err);
    assert_err(dt_safetensors_load(path, &out, NULL, &err), &err, DT_ECORRUPT,
               "header length 3 exceeds the 2 bytes after it");

    write_raw(path, h, 0, 0);
    dt_err_clear(&err);
    assert_err(dt_safetensors_load(path, &out, NULL, &err), &err, DT_ECORRUPT, "not valid JSON");

    /* The length cuts the JSON short: the rest is taken as data. */
    write_raw(path, "{\"__metadata__\":{}}", 10, 0);
    dt_err_clear(&err);
    assert_err(dt_safetensors_load(path, &out, NULL, &err), &err, DT_ECORRUPT, "not valid JSON");
    assert_empty(&out);

    /* A directory is not a checkpoint. */
    dt_err_clear(&err);
    assert_err(dt_safetensors_load(tmpdir, &out, NULL, &err), &err, DT_ECORRUPT,
               "not a regular file");
}
END_TEST

/* Other tools write no crc32c and no global_step; such files still load. */
START_TEST(test_foreign_file_loads) {
    char path[1024];
    tmp_path(path, sizeof path, "foreign.safetensors");
    const char *h = "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"x\"},"
                    "\"w\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}   ";
    write_raw(path, h, strlen(h), 8);
    dt_tensors out;
    dt_safetensors_meta meta = make_meta(99);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_safetensors_load(path, &out, &meta, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(out.count, 1);
    ck_assert_int_eq(meta.global_step, 0);
    ck_assert_str_eq(meta.model, "");
    const int32_t *v = out.items[0].data;
    ck_assert_int_eq(v[0], 0x03020100);
    ck_assert_int_eq(v[1], 0x07060504);
    dt_tensors_deinit(&out);

    /* No __metadata__ at all, tensors listed out of data order. */
    h = "{\"b\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[8,12]},"
        "\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}";
    write_raw(path, h, strlen(h), 12);
    ck_assert_msg(dt_safetensors_load(path, &out, &meta, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(out.count, 2);
    ck_assert_str_eq(out.items[0].name, "a"); /* ordered by data offset */
    ck_assert_str_eq(out.items[1].name, "b");
    ck_assert_uint_eq(((const unsigned char *)out.items[1].data)[0], 8);
    dt_tensors_deinit(&out);
}
END_TEST

/* Fault injection on save: the write fails after every possible byte count;
 * each save reports it, leaves no temporary, and the old file survives. */
/* A save to run under a file size limit. */
typedef int (*save_fn)(void *ctx, dt_err *err);

/* Runs save under a file size limit of every stride-th byte below len:
 * each run fails with DT_EIO, leaves no temporary file, and leaves path
 * holding the checkpoint of step 1 it held before. */
static void save_fails_under_limits(const char *path, size_t len, size_t stride, save_fn save,
                                    void *ctx) {
    signal(SIGXFSZ, SIG_IGN); /* over-limit writes fail with EFBIG instead */
    struct rlimit old;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    for (size_t limit = 0; limit < len; limit += stride) {
        /* No assertions while the limit is on: the test framework writes
         * files of its own. */
        struct rlimit rl = {.rlim_cur = limit, .rlim_max = old.rlim_max};
        int set = setrlimit(RLIMIT_FSIZE, &rl);
        dt_err err;
        dt_err_clear(&err);
        int rc = save(ctx, &err);
        int reset = setrlimit(RLIMIT_FSIZE, &old);
        ck_assert_int_eq(set, 0);
        ck_assert_int_eq(reset, 0);
        assert_err(rc, &err, DT_EIO, ": write: ");
        ck_assert_int_eq(count_tmp_files(tmpdir), 0);
        dt_tensors back;
        dt_safetensors_meta got;
        ck_assert_msg(dt_safetensors_load(path, &back, &got, &err) == 0, "limit %zu: %s", limit,
                      err.msg);
        ck_assert_int_eq(got.global_step, 1);
        dt_tensors_deinit(&back);
    }
    signal(SIGXFSZ, SIG_DFL);
}

typedef struct {
    const char *path;
    const dt_tensors *ts;
    const dt_safetensors_meta *meta;
} plain_save;

static int run_plain_save(void *ctx, dt_err *err) {
    const plain_save *ps = ctx;
    return dt_safetensors_save(ps->path, ps->ts, ps->meta, err);
}

START_TEST(test_save_fails_at_every_byte) {
    char path[1024];
    tmp_path(path, sizeof path, "fi.safetensors");
    save_model(path, 1, 1);
    size_t len;
    free(read_all(path, &len));

    dt_tensors ts;
    build_model(&ts, 2);
    dt_safetensors_meta meta = make_meta(2);
    plain_save ps = {path, &ts, &meta};
    save_fails_under_limits(path, len, 1, run_plain_save, &ps);
    /* With room to write, the same save goes through. */
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_safetensors_save(path, &ts, &meta, &err) == 0, "%s", err.msg);
    dt_tensors back;
    dt_safetensors_meta got;
    ck_assert_msg(dt_safetensors_load(path, &back, &got, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(got.global_step, 2);
    assert_same_tensors(&ts, &back);
    dt_tensors_deinit(&back);
    dt_tensors_deinit(&ts);
}
END_TEST

START_TEST(test_save_rename_fails) {
    char path[1024], inner[1100];
    tmp_path(path, sizeof path, "occupied");
    ck_assert_int_eq(mkdir(path, 0755), 0);
    snprintf(inner, sizeof inner, "%s/keep", path);
    write_text(inner, "x");
    dt_tensors ts;
    build_model(&ts, 1);
    dt_safetensors_meta meta = make_meta(1);
    dt_err err;
    dt_err_clear(&err);
    assert_err(dt_safetensors_save(path, &ts, &meta, &err), &err, DT_EIO, "rename");
    ck_assert_int_eq(count_tmp_files(tmpdir), 0);
    ck_assert(file_exists(inner));

    /* A directory that does not exist: nothing to create the file in. */
    tmp_path(path, sizeof path, "no/such/dir/x.safetensors");
    dt_err_clear(&err);
    assert_err(dt_safetensors_save(path, &ts, &meta, &err), &err, DT_EIO, "create");
    dt_tensors_deinit(&ts);
}
END_TEST

START_TEST(test_save_rejects_bad_input) {
    char path[1024];
    tmp_path(path, sizeof path, "arg.safetensors");
    dt_tensors ts;
    build_model(&ts, 1);
    dt_safetensors_meta meta = make_meta(-1);
    dt_err err;
    dt_err_clear(&err);
    assert_err(dt_safetensors_save(path, &ts, &meta, &err), &err, DT_EINVAL,
               "global_step -1 is negative");

    meta = make_meta(1);
    memset(meta.model, 'x', sizeof meta.model); /* no NUL */
    dt_err_clear(&err);
    assert_err(dt_safetensors_save(path, &ts, &meta, &err), &err, DT_EINVAL, "not NUL-terminated");

    meta = make_meta(1);
    meta.has_eval_loss = 1;
    meta.eval_loss = INFINITY;
    dt_err_clear(&err);
    assert_err(dt_safetensors_save(path, &ts, &meta, &err), &err, DT_EINVAL,
               "eval_loss inf is not finite");
    ck_assert_msg(access(path, F_OK) != 0, "a refused save left %s", path);

    /* The keys of the best model and of early stopping come back. */
    meta = make_meta(7);
    meta.has_eval_loss = 1;
    meta.eval_loss = 0.1 + 1e-17 * 3; /* needs all 17 digits */
    meta.stopped_early = 1;
    meta.evals_without_gain = 3;
    dt_err_clear(&err);
    ck_assert_msg(dt_safetensors_save(path, &ts, &meta, &err) == 0, "%s", err.msg);
    dt_safetensors_meta back;
    ck_assert_msg(dt_safetensors_load_meta(path, &back, &err) == 0, "%s", err.msg);
    dt_safetensors_meta_deinit(&back);
    ck_assert(back.has_eval_loss && back.eval_loss == meta.eval_loss && back.stopped_early);
    ck_assert_int_eq(back.evals_without_gain, 3);
    ck_assert_int_eq(unlink(path), 0);

    meta = make_meta(1);
    snprintf(ts.items[2].name, DT_TENSOR_NAME_MAX, "linear/weight");
    dt_err_clear(&err);
    assert_err(dt_safetensors_save(path, &ts, &meta, &err), &err, DT_EINVAL,
               "linear/weight appears twice");

    snprintf(ts.items[2].name, DT_TENSOR_NAME_MAX, "__metadata__");
    dt_err_clear(&err);
    assert_err(dt_safetensors_save(path, &ts, &meta, &err), &err, DT_EINVAL,
               "\"__metadata__\" cannot");

    snprintf(ts.items[2].name, DT_TENSOR_NAME_MAX, "step_counts");
    ts.items[2].nbytes = 4;
    dt_err_clear(&err);
    assert_err(dt_safetensors_save(path, &ts, &meta, &err), &err, DT_EINVAL,
               "nbytes does not match");
    ck_assert(!file_exists(path));
    ck_assert_int_eq(count_tmp_files(tmpdir), 0);
    ts.items[2].nbytes = 24;
    dt_tensors_deinit(&ts);
}
END_TEST

/* ---- log dir -------------------------------------------------------------- */

static void ckpt_file(char *buf, size_t cap, const char *dir, int64_t step) {
    snprintf(buf, cap, "%s/model.ckpt-%lld.safetensors", dir, (long long)step);
}

START_TEST(test_save_in_dir_keeps_newest) {
    char dir[1024], path[1200], state[1200];
    tmp_path(dir, sizeof dir, "logs/run1"); /* parents created too */
    for (int step = 100; step <= 500; step += 100)
        save_in_dir(dir, step, step, 3);
    for (int step = 100; step <= 500; step += 100) {
        ckpt_file(path, sizeof path, dir, step);
        ck_assert_msg(file_exists(path) == (step >= 300), "step %d", step);
    }
    snprintf(state, sizeof state, "%s/checkpoint", dir);
    size_t len;
    char *text = (char *)read_all(state, &len);
    ck_assert_str_eq(text, "model_checkpoint_path: \"model.ckpt-500.safetensors\"\n"
                           "all_model_checkpoint_paths: \"model.ckpt-300.safetensors\"\n"
                           "all_model_checkpoint_paths: \"model.ckpt-400.safetensors\"\n"
                           "all_model_checkpoint_paths: \"model.ckpt-500.safetensors\"\n");
    free(text);
    ck_assert_int_eq(count_tmp_files(dir), 0);

    /* max_to_keep 1 drops all but the newest; 0 keeps everything. */
    save_in_dir(dir, 600, 600, 1);
    for (int step = 300; step <= 500; step += 100) {
        ckpt_file(path, sizeof path, dir, step);
        ck_assert(!file_exists(path));
    }
    save_in_dir(dir, 700, 700, 0);
    save_in_dir(dir, 800, 800, 0);
    text = (char *)read_all(state, &len);
    ck_assert_str_eq(text, "model_checkpoint_path: \"model.ckpt-800.safetensors\"\n"
                           "all_model_checkpoint_paths: \"model.ckpt-600.safetensors\"\n"
                           "all_model_checkpoint_paths: \"model.ckpt-700.safetensors\"\n"
                           "all_model_checkpoint_paths: \"model.ckpt-800.safetensors\"\n");
    free(text);
}
END_TEST

START_TEST(test_save_in_dir_same_step_replaces) {
    char dir[1024], state[1200];
    tmp_path(dir, sizeof dir, "logs");
    save_in_dir(dir, 1, 100, 5);
    save_in_dir(dir, 2, 200, 5);
    save_in_dir(dir, 3, 200, 5);
    snprintf(state, sizeof state, "%s/checkpoint", dir);
    size_t len;
    char *text = (char *)read_all(state, &len);
    ck_assert_str_eq(text, "model_checkpoint_path: \"model.ckpt-200.safetensors\"\n"
                           "all_model_checkpoint_paths: \"model.ckpt-100.safetensors\"\n"
                           "all_model_checkpoint_paths: \"model.ckpt-200.safetensors\"\n");
    free(text);
    /* The second save at 200 is what restore sees. */
    dt_tensors out, want;
    dt_safetensors_meta meta;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_ckpt_restore_latest(dir, &out, &meta, NULL, 0, &err), 1);
    build_model(&want, 3);
    assert_same_tensors(&want, &out);
    dt_tensors_deinit(&want);
    dt_tensors_deinit(&out);
}
END_TEST

START_TEST(test_save_in_dir_unparseable_state) {
    char dir[1024], state[1200], path[1200];
    tmp_path(dir, sizeof dir, "logs");
    save_in_dir(dir, 1, 100, 5);
    save_in_dir(dir, 2, 200, 5);
    snprintf(state, sizeof state, "%s/checkpoint", dir);
    write_text(state, "garbage\n\x01\x02");
    /* The save still succeeds; the new list starts from the files present. */
    save_in_dir(dir, 3, 300, 2);
    size_t len;
    char *text = (char *)read_all(state, &len);
    ck_assert_str_eq(text, "model_checkpoint_path: \"model.ckpt-300.safetensors\"\n"
                           "all_model_checkpoint_paths: \"model.ckpt-200.safetensors\"\n"
                           "all_model_checkpoint_paths: \"model.ckpt-300.safetensors\"\n");
    free(text);
    ckpt_file(path, sizeof path, dir, 100);
    ck_assert(!file_exists(path));
}
END_TEST

/* Asserts that dir's state file lists exactly steps (n of them,
 * ascending), the last as latest. */
static void assert_listed(const char *dir, const int64_t *steps, int n) {
    char want[4096];
    int len =
        snprintf(want, sizeof want, "model_checkpoint_path: \"model.ckpt-%lld.safetensors\"\n",
                 (long long)steps[n - 1]);
    for (int i = 0; i < n; i++)
        len += snprintf(want + len, sizeof want - (size_t)len,
                        "all_model_checkpoint_paths: \"model.ckpt-%lld.safetensors\"\n",
                        (long long)steps[i]);
    char state[1200];
    snprintf(state, sizeof state, "%s/checkpoint", dir);
    char *text = read_state_text(state);
    ck_assert_ptr_nonnull(text);
    ck_assert_str_eq(text, want);
    free(text);
}

/* Asserts that dir holds exactly the checkpoint files of steps (n). */
static void assert_files(const char *dir, const int64_t *steps, int n) {
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long long step;
        char canonical[64];
        if (sscanf(e->d_name, "model.ckpt-%lld", &step) != 1) continue;
        snprintf(canonical, sizeof canonical, "model.ckpt-%lld.safetensors", step);
        if (strcmp(e->d_name, canonical) != 0) continue; /* not a name a save writes */
        char path[1300];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        int listed = 0;
        for (int i = 0; i < n; i++)
            listed |= steps[i] == step;
        ck_assert_msg(listed, "%s/%s is left over", dir, e->d_name);
        found++;
    }
    closedir(d);
    ck_assert_int_eq(found, n);
}

/* Both: dir holds exactly the checkpoints of steps, all listed. */
static void assert_retained(const char *dir, const int64_t *steps, int n) {
    assert_listed(dir, steps, n);
    assert_files(dir, steps, n);
}

/* A hand-edited state file that names a file twice, in any order: the new
 * list is built from the files, by step, each once. */
START_TEST(test_save_in_dir_duplicate_entries) {
    char dir[1024], state[1200];
    tmp_path(dir, sizeof dir, "logs");
    save_in_dir(dir, 1, 100, 5);
    save_in_dir(dir, 2, 200, 5);
    snprintf(state, sizeof state, "%s/checkpoint", dir);
    write_text(state, "model_checkpoint_path: \"model.ckpt-200.safetensors\"\n"
                      "all_model_checkpoint_paths: \"model.ckpt-100.safetensors\"\n"
                      "all_model_checkpoint_paths: \"model.ckpt-200.safetensors\"\n"
                      "all_model_checkpoint_paths: \"model.ckpt-100.safetensors\"\n");
    save_in_dir(dir, 3, 300, 2);
    assert_retained(dir, (int64_t[]){200, 300}, 2);
}
END_TEST

/* A chief killed after a state update, before its deletions, leaves a file
 * the state file no longer lists. The next save ranks it by its step: it
 * goes, and the newest stay (not the orphan, as if it were new). */
START_TEST(test_retention_ranks_orphans_by_step) {
    char dir[1024], path[1200], state[1200];
    tmp_path(dir, sizeof dir, "logs");
    for (int step = 100; step <= 400; step += 100)
        save_in_dir(dir, step, step, 3);
    assert_retained(dir, (int64_t[]){200, 300, 400}, 3);
    ckpt_file(path, sizeof path, dir, 100); /* back, as if never deleted */
    save_model(path, 100, 100);
    save_in_dir(dir, 500, 500, 3);
    assert_retained(dir, (int64_t[]){300, 400, 500}, 3);

    /* Orphans below the list, and a state file that lost every entry but
     * the latest: the same. */
    ckpt_file(path, sizeof path, dir, 50);
    save_model(path, 50, 50);
    ckpt_file(path, sizeof path, dir, 250);
    save_model(path, 250, 250);
    snprintf(state, sizeof state, "%s/checkpoint", dir);
    write_text(state, "model_checkpoint_path: \"model.ckpt-500.safetensors\"\n"
                      "all_model_checkpoint_paths: \"model.ckpt-500.safetensors\"\n");
    save_in_dir(dir, 600, 600, 3);
    assert_retained(dir, (int64_t[]){400, 500, 600}, 3);
    ck_assert_int_eq(count_tmp_files(dir), 0);
}
END_TEST

/* The newest checkpoints corrupt: restore falls back to 200, deleting
 * nothing; the first save after it (at 250, the step went back) keeps the
 * one restored from and deletes the stale futures above the new step, so
 * they never outrank this run's saves; the next save rotates normally. */
START_TEST(test_retention_drops_stale_futures) {
    char dir[1024], path[1200];
    tmp_path(dir, sizeof dir, "logs");
    for (int step = 100; step <= 400; step += 100)
        save_in_dir(dir, step, step, 5);
    ckpt_file(path, sizeof path, dir, 300);
    flip_data_byte(path, 2);
    ckpt_file(path, sizeof path, dir, 400);
    flip_data_byte(path, 2);
    dt_tensors out;
    dt_safetensors_meta meta;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_ckpt_restore_latest(dir, &out, &meta, NULL, 0, &err), 1);
    dt_tensors_deinit(&out);
    ck_assert_int_eq(meta.global_step, 200);
    ck_assert(file_exists(path)); /* restore deletes nothing */

    save_in_dir(dir, 250, 250, 3);
    assert_retained(dir, (int64_t[]){100, 200, 250}, 3);
    save_in_dir(dir, 300, 300, 3);
    assert_retained(dir, (int64_t[]){200, 250, 300}, 3);
    ck_assert_int_eq(dt_ckpt_restore_latest(dir, &out, &meta, NULL, 0, &err), 1);
    dt_tensors_deinit(&out);
    ck_assert_int_eq(meta.global_step, 300);
}
END_TEST

/* Only dtrain's checkpoints are deleted: not files the state file lists by
 * other names, names a save would not write, a directory with a
 * checkpoint's name, or temporaries of other names at lock time. */
START_TEST(test_retention_spares_other_files) {
    char dir[1024], state[1200], path[1300];
    tmp_path(dir, sizeof dir, "logs");
    save_in_dir(dir, 1, 100, 1);
    static const char *const others[] = {"notes.txt", "model.ckpt-007.safetensors",
                                         "model.ckpt-50.safetensors.bak", "notes.tmp.5",
                                         "model.ckpt-5.safetensors.tmp.x"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, others[i]);
        write_text(path, "not a dtrain checkpoint");
    }
    snprintf(path, sizeof path, "%s/model.ckpt-60.safetensors", dir);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    snprintf(state, sizeof state, "%s/checkpoint", dir);
    write_text(state, "model_checkpoint_path: \"model.ckpt-100.safetensors\"\n"
                      "all_model_checkpoint_paths: \"notes.txt\"\n"
                      "all_model_checkpoint_paths: \"model.ckpt-007.safetensors\"\n"
                      "all_model_checkpoint_paths: \"model.ckpt-60.safetensors\"\n"
                      "all_model_checkpoint_paths: \"model.ckpt-100.safetensors\"\n");
    save_in_dir(dir, 2, 200, 1);
    save_in_dir(dir, 3, 300, 1);
    int fd = -1;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_ckpt_lock_dir(dir, &fd, &err) == 0, "%s", err.msg);
    dt_ckpt_unlock_dir(fd);
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, others[i]);
        ck_assert_msg(file_exists(path), "%s was deleted", path);
    }
    snprintf(path, sizeof path, "%s/model.ckpt-60.safetensors", dir);
    struct stat sb;
    ck_assert_msg(stat(path, &sb) == 0 && S_ISDIR(sb.st_mode), "%s was removed", path);
    assert_retained(dir, (int64_t[]){300}, 1);
}
END_TEST

/* Runs a save of step in a child with DT_TEST_CKPT_KILL=point; returns
 * its wait status. */
static int save_in_child(const char *dir, int64_t step, int max_to_keep, const char *point) {
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dt_tensors ts;
        build_model(&ts, (int)step);
        dt_safetensors_meta meta = make_meta(step);
        setenv("DT_TEST_CKPT_KILL", point, 1);
        dt_err err;
        dt_err_clear(&err);
        int rc = dt_ckpt_save_in_dir(dir, &ts, &meta, max_to_keep, NULL, 0, &err);
        _exit(rc == 0 ? 0 : 1);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return status;
}

static void save_killed_at(const char *dir, int64_t step, int max_to_keep, const char *point) {
    int status = save_in_child(dir, step, max_to_keep, point);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "save of %lld was not killed %s (status %d)", (long long)step, point, status);
}

/* The restore's pick in dir: its step. */
static int64_t restored_step(const char *dir) {
    dt_tensors out;
    dt_safetensors_meta meta;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_ckpt_restore_latest(dir, &out, &meta, NULL, 0, &err);
    ck_assert_msg(rc == 1, "rc %d: %s", rc, err.msg);
    dt_tensors_deinit(&out);
    return meta.global_step;
}

/* The fault-injection points leave what a crash there would: an orphan the
 * state file no longer lists (restore ignores it), or an unlisted newer
 * checkpoint (restore takes it); either way the next save leaves exactly
 * the newest max_to_keep, all listed. "before_delete" fires only on a save
 * that deletes something. */
START_TEST(test_retention_after_kill_points) {
    char dir[1024];
    tmp_path(dir, sizeof dir, "logs");
    int status = save_in_child(dir, 100, 2, "before_delete");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    save_in_dir(dir, 200, 200, 2);
    save_killed_at(dir, 300, 2, "before_delete");
    assert_listed(dir, (int64_t[]){200, 300}, 2);
    assert_files(dir, (int64_t[]){100, 200, 300}, 3);
    ck_assert_int_eq(restored_step(dir), 300);
    save_in_dir(dir, 400, 400, 2);
    assert_retained(dir, (int64_t[]){300, 400}, 2);

    save_killed_at(dir, 500, 2, "before_state");
    assert_listed(dir, (int64_t[]){300, 400}, 2);
    assert_files(dir, (int64_t[]){300, 400, 500}, 3);
    ck_assert_int_eq(restored_step(dir), 500);
    save_in_dir(dir, 600, 600, 2);
    assert_retained(dir, (int64_t[]){500, 600}, 2);
    ck_assert_int_eq(count_tmp_files(dir), 0);
}
END_TEST

/* dt_ckpt_retain, for a job found complete: around the checkpoint restore
 * picks (an unlisted newer one here), without saving; the corrupt one
 * above it stays; older orphans go. */
START_TEST(test_retain_without_save) {
    char dir[1024], path[1200];
    tmp_path(dir, sizeof dir, "logs");
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_ckpt_retain(dir, 2, &err), 0); /* nothing there */
    for (int step = 100; step <= 300; step += 100)
        save_in_dir(dir, step, step, 2);
    ckpt_file(path, sizeof path, dir, 100);
    save_model(path, 100, 100); /* an orphan */
    ckpt_file(path, sizeof path, dir, 400);
    save_model(path, 400, 400); /* a save cut short before its state update */
    ckpt_file(path, sizeof path, dir, 500);
    save_model(path, 500, 500);
    flip_data_byte(path, 1);
    ck_assert_msg(dt_ckpt_retain(dir, 2, &err) == 1, "%s", err.msg);
    assert_listed(dir, (int64_t[]){300, 400}, 2);
    assert_files(dir, (int64_t[]){300, 400, 500}, 3);
}
END_TEST

/* dt_ckpt_save_in_dir into dir; returns its code, err gets the message. */
static int try_save_in_dir(const char *dir, int seed, int64_t step, dt_err *err) {
    dt_tensors ts;
    build_model(&ts, seed);
    dt_safetensors_meta meta = make_meta(step);
    dt_err_clear(err);
    int rc = dt_ckpt_save_in_dir(dir, &ts, &meta, 5, NULL, 0, err);
    dt_tensors_deinit(&ts);
    return rc;
}

/* The state-file write fails (its temporary cannot be created): the save
 * fails naming the path, the new checkpoint is not left unlisted, the old
 * state file stands, and the next save lists everything present. */
START_TEST(test_save_in_dir_state_write_fails) {
    char dir[1024], state[1200], path[1200], blocker[1300];
    tmp_path(dir, sizeof dir, "logs");
    save_in_dir(dir, 1, 100, 5);
    snprintf(state, sizeof state, "%s/checkpoint", dir);
    size_t len;
    char *before = (char *)read_all(state, &len);
    snprintf(blocker, sizeof blocker, "%s.tmp.%ld", state, (long)getpid());
    ck_assert_int_eq(mkdir(blocker, 0755), 0); /* open(O_WRONLY) of it fails */
    dt_err err;
    assert_err(try_save_in_dir(dir, 2, 200, &err), &err, DT_EIO, "checkpoint.tmp.");
    ckpt_file(path, sizeof path, dir, 200);
    ck_assert_msg(!file_exists(path), "an unlisted checkpoint was left behind");
    char *after = (char *)read_all(state, &len);
    ck_assert_str_eq(after, before);
    free(after);
    ck_assert_int_eq(rmdir(blocker), 0);
    ck_assert_int_eq(count_tmp_files(dir), 0);
    save_in_dir(dir, 3, 300, 5);
    after = (char *)read_all(state, &len);
    ck_assert_str_eq(after, "model_checkpoint_path: \"model.ckpt-300.safetensors\"\n"
                            "all_model_checkpoint_paths: \"model.ckpt-100.safetensors\"\n"
                            "all_model_checkpoint_paths: \"model.ckpt-300.safetensors\"\n");
    free(after);
    free(before);
}
END_TEST

/* The state file lists what the dir holds: a listed file that is gone is
 * dropped, an unlisted one (a save that died before its state update) is
 * added. */
START_TEST(test_save_in_dir_reconciles) {
    char dir[1024], state[1200], path[1200];
    tmp_path(dir, sizeof dir, "logs");
    save_in_dir(dir, 1, 100, 5);
    save_in_dir(dir, 2, 200, 5);
    ckpt_file(path, sizeof path, dir, 100);
    ck_assert_int_eq(unlink(path), 0);
    ckpt_file(path, sizeof path, dir, 250);
    save_model(path, 3, 250);
    save_in_dir(dir, 4, 300, 5);
    snprintf(state, sizeof state, "%s/checkpoint", dir);
    size_t len;
    char *text = (char *)read_all(state, &len);
    ck_assert_str_eq(text, "model_checkpoint_path: \"model.ckpt-300.safetensors\"\n"
                           "all_model_checkpoint_paths: \"model.ckpt-200.safetensors\"\n"
                           "all_model_checkpoint_paths: \"model.ckpt-250.safetensors\"\n"
                           "all_model_checkpoint_paths: \"model.ckpt-300.safetensors\"\n");
    free(text);
}
END_TEST

/* A full file system (a tiny tmpfs): the save fails with ENOSPC naming the
 * file, leaves no temporary, keeps the state file's good entries; once space
 * is freed the next save succeeds. Skipped when tmpfs cannot be mounted. */
START_TEST(test_save_in_dir_disk_full) {
    char mnt[1024], filler[1200], state[1200];
    tmp_path(mnt, sizeof mnt, "tmpfs");
    ck_assert_int_eq(mkdir(mnt, 0755), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=64k") != 0) {
        fprintf(stderr, "checkpoint: disk-full test skipped: mount tmpfs: %s\n", strerror(errno));
        return;
    }
    /* No Check assertion until the umount: a failing one would leave it. */
    dt_err err0, err1, err2;
    int rc0 = try_save_in_dir(mnt, 1, 100, &err0);
    snprintf(filler, sizeof filler, "%s/filler", mnt);
    FILE *f = fopen(filler, "wb");
    static char block[4096];
    while (f && fwrite(block, 1, sizeof block, f) == sizeof block && fflush(f) == 0)
        ;
    if (f) fclose(f);
    int rc1 = try_save_in_dir(mnt, 2, 200, &err1);
    snprintf(state, sizeof state, "%s/checkpoint", mnt);
    int tmps = 0, has200 = 0;
    DIR *d = opendir(mnt);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        tmps += strstr(de->d_name, ".tmp.") != NULL;
        has200 |= strcmp(de->d_name, "model.ckpt-200.safetensors") == 0;
    }
    if (d) closedir(d);
    char *listed = read_state_text(state);
    unlink(filler);
    int rc2 = try_save_in_dir(mnt, 3, 300, &err2);
    char *listed2 = read_state_text(state);
    umount2(mnt, MNT_DETACH);

    ck_assert_msg(rc0 == 0, "%s", err0.msg);
    ck_assert_int_eq(rc1, DT_EIO);
    ck_assert_msg(strstr(err1.msg, mnt) && strstr(err1.msg, "No space left on device"), "%s",
                  err1.msg);
    ck_assert_int_eq(tmps, 0);
    ck_assert(!has200);
    ck_assert_ptr_nonnull(listed);
    ck_assert_str_eq(listed, "model_checkpoint_path: \"model.ckpt-100.safetensors\"\n"
                             "all_model_checkpoint_paths: \"model.ckpt-100.safetensors\"\n");
    ck_assert_msg(rc2 == 0, "%s", err2.msg);
    ck_assert_ptr_nonnull(listed2);
    ck_assert_str_eq(listed2, "model_checkpoint_path: \"model.ckpt-300.safetensors\"\n"
                              "all_model_checkpoint_paths: \"model.ckpt-100.safetensors\"\n"
                              "all_model_checkpoint_paths: \"model.ckpt-300.safetensors\"\n");
    free(listed);
    free(listed2);
}
END_TEST

START_TEST(test_save_in_dir_bad_args) {
    char dir[1200], file[1024];
    tmp_path(file, sizeof file, "plain");
    write_text(file, "x");
    snprintf(dir, sizeof dir, "%s/sub", file); /* parent is a file */
    dt_tensors ts;
    build_model(&ts, 1);
    dt_safetensors_meta meta = make_meta(5);
    dt_err err;
    dt_err_clear(&err);
    assert_err(dt_ckpt_save_in_dir(dir, &ts, &meta, 3, NULL, 0, &err), &err, DT_EIO, "mkdir");

    tmp_path(dir, sizeof dir, "logs");
    char small[8];
    dt_err_clear(&err);
    assert_err(dt_ckpt_save_in_dir(dir, &ts, &meta, 3, small, sizeof small, &err), &err, DT_EINVAL,
               "path_out holds 8 bytes");
    dt_tensors_deinit(&ts);
}
END_TEST

START_TEST(test_restore_falls_back) {
    char dir[1024], path[1200], got_path[1200];
    tmp_path(dir, sizeof dir, "logs");
    for (int step = 100; step <= 300; step += 100)
        save_in_dir(dir, step, step, 5);
    ckpt_file(path, sizeof path, dir, 300);
    flip_data_byte(path, 5);

    dt_tensors out, want;
    dt_safetensors_meta meta;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_ckpt_restore_latest(dir, &out, &meta, got_path, sizeof got_path, &err);
    ck_assert_msg(rc == 1, "rc %d: %s", rc, err.msg);
    ck_assert_int_eq(meta.global_step, 200);
    ckpt_file(path, sizeof path, dir, 200);
    ck_assert_str_eq(got_path, path);
    build_model(&want, 200);
    assert_same_tensors(&want, &out);
    dt_tensors_deinit(&want);
    dt_tensors_deinit(&out);
    ckpt_file(path, sizeof path, dir, 300);
    ck_assert(file_exists(path)); /* the evidence is kept */

    /* A listed file that is gone is skipped the same way. */
    ckpt_file(path, sizeof path, dir, 200);
    ck_assert_int_eq(unlink(path), 0);
    rc = dt_ckpt_restore_latest(dir, &out, &meta, NULL, 0, &err);
    ck_assert_msg(rc == 1, "rc %d: %s", rc, err.msg);
    ck_assert_int_eq(meta.global_step, 100);
    dt_tensors_deinit(&out);

    /* None loadable: an error that says so, files untouched. */
    ckpt_file(path, sizeof path, dir, 100);
    flip_data_byte(path, 0);
    rc = dt_ckpt_restore_latest(dir, &out, &meta, NULL, 0, &err);
    assert_err(rc, &err, DT_ECORRUPT, "none of the 3 checkpoints loads");
    assert_empty(&out);
    ck_assert(file_exists(path));
}
END_TEST

START_TEST(test_restore_empty_dir) {
    dt_tensors out;
    dt_safetensors_meta meta = make_meta(42);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_ckpt_restore_latest(tmpdir, &out, &meta, NULL, 0, &err), 0);
    ck_assert_int_eq(err.code, DT_OK);
    assert_empty(&out);
    ck_assert_int_eq(meta.global_step, 42);
    char dir[1024];
    tmp_path(dir, sizeof dir, "never/created");
    ck_assert_int_eq(dt_ckpt_restore_latest(dir, &out, &meta, NULL, 0, &err), 0);
    ck_assert_int_eq(err.code, DT_OK);
    /* An empty state file and no checkpoint files is still "none". */
    char state[1200];
    snprintf(state, sizeof state, "%s/checkpoint", tmpdir);
    write_text(state, "");
    ck_assert_int_eq(dt_ckpt_restore_latest(tmpdir, &out, &meta, NULL, 0, &err), 0);
    ck_assert_int_eq(err.code, DT_OK);
}
END_TEST

START_TEST(test_restore_without_state_file) {
    char dir[1024], path[1200], state[1200], got_path[1200];
    tmp_path(dir, sizeof dir, "logs");
    save_in_dir(dir, 3, 3, 5);
    save_in_dir(dir, 20, 20, 5);
    snprintf(state, sizeof state, "%s/checkpoint", dir);
    ck_assert_int_eq(unlink(state), 0);
    /* A crash after the rename of step 100, before the state update. */
    ckpt_file(path, sizeof path, dir, 100);
    save_model(path, 100, 100);
    /* Names that are not checkpoints are ignored. */
    snprintf(path, sizeof path, "%s/model.ckpt-999.safetensors.tmp.123", dir);
    write_text(path, "partial");
    snprintf(path, sizeof path, "%s/model.ckpt-abc.safetensors", dir);
    write_text(path, "junk");

    dt_tensors out;
    dt_safetensors_meta meta;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_ckpt_restore_latest(dir, &out, &meta, got_path, sizeof got_path, &err);
    ck_assert_msg(rc == 1, "rc %d: %s", rc, err.msg);
    ck_assert_int_eq(meta.global_step, 100); /* by number: not "3" > "20" > "100" */
    ckpt_file(path, sizeof path, dir, 100);
    ck_assert_str_eq(got_path, path);
    dt_tensors_deinit(&out);

    /* The highest one corrupt: the next by step. */
    flip_data_byte(path, 1);
    rc = dt_ckpt_restore_latest(dir, &out, &meta, NULL, 0, &err);
    ck_assert_msg(rc == 1, "rc %d: %s", rc, err.msg);
    ck_assert_int_eq(meta.global_step, 20);
    dt_tensors_deinit(&out);
}
END_TEST

/* A kill between a checkpoint's rename and the state file's update leaves
 * a complete checkpoint newer than the state file's latest: restoring
 * takes it (the job's last durable work), falls back to the listed latest
 * when it is corrupt, and never prefers an unlisted older one. */
START_TEST(test_restore_newer_than_state) {
    char dir[1024], path[1200], got_path[1200];
    tmp_path(dir, sizeof dir, "logs");
    save_in_dir(dir, 100, 100, 5);
    save_in_dir(dir, 200, 200, 5);
    ckpt_file(path, sizeof path, dir, 50);
    save_model(path, 50, 50);
    ckpt_file(path, sizeof path, dir, 300);
    save_model(path, 300, 300);

    dt_tensors out, want;
    dt_safetensors_meta meta;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_ckpt_restore_latest(dir, &out, &meta, got_path, sizeof got_path, &err);
    ck_assert_msg(rc == 1, "rc %d: %s", rc, err.msg);
    ck_assert_int_eq(meta.global_step, 300);
    ck_assert_str_eq(got_path, path);
    build_model(&want, 300);
    assert_same_tensors(&want, &out);
    dt_tensors_deinit(&want);
    dt_tensors_deinit(&out);

    flip_data_byte(path, 3);
    rc = dt_ckpt_restore_latest(dir, &out, &meta, NULL, 0, &err);
    ck_assert_msg(rc == 1, "rc %d: %s", rc, err.msg);
    ck_assert_int_eq(meta.global_step, 200);
    dt_tensors_deinit(&out);
}
END_TEST

typedef struct {
    const char *text;
    const char *needle;
} state_case;

static const state_case bad_states[] = {
    {"model_checkpoint_path: \"a\"\nbogus line\n", "checkpoint:2: expected ':'"},
    {"model_checkpoint_path: a\n", "checkpoint:1: expected a quoted value"},
    {"\n\nmodel_checkpoint_path: \"a\n", "checkpoint:3: unterminated"},
    {"model_checkpoint_path: \"a\" x\n", "checkpoint:1: unexpected text after the value"},
    {"all_model_checkpoint_paths: \"../x\"\n", "checkpoint:1: \"../x\" is not a file name"},
    {"all_model_checkpoint_paths: \"\"\n", "checkpoint:1: \"\" is not a file name"},
    {"model_checkpoint_path: \"a\"\nmodel_checkpoint_path: \"b\"\n",
     "checkpoint:2: model_checkpoint_path given twice"},
    {"# comment\nlatest: \"a\"\n", "checkpoint:2: unknown key \"latest\""},
    {"model_checkpoint_path: \"a\\\"b\"\n", "checkpoint:1: escapes"},
    {": \"a\"\n", "checkpoint:1: expected a key"},
};

START_TEST(test_restore_malformed_state) {
    const state_case *c = &bad_states[_i];
    char dir[1024], state[1200];
    tmp_path(dir, sizeof dir, "logs");
    save_in_dir(dir, 1, 100, 5);
    snprintf(state, sizeof state, "%s/checkpoint", dir);
    write_text(state, c->text);
    dt_tensors out;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_ckpt_restore_latest(dir, &out, NULL, NULL, 0, &err);
    assert_err(rc, &err, DT_ECORRUPT, c->needle);
    ck_assert_msg(strstr(err.msg, state) == err.msg, "%s", err.msg);
    assert_empty(&out);
}
END_TEST

START_TEST(test_restore_tolerates_crlf_and_comments) {
    char dir[1024], state[1200];
    tmp_path(dir, sizeof dir, "logs");
    save_in_dir(dir, 1, 100, 5);
    save_in_dir(dir, 2, 200, 5);
    snprintf(state, sizeof state, "%s/checkpoint", dir);
    /* Hand-edited to roll back to 100: the state file is obeyed. */
    write_text(state,
               "# rolled back\r\n  model_checkpoint_path : \"model.ckpt-100.safetensors\"\r\n"
               "all_model_checkpoint_paths: \"model.ckpt-100.safetensors\"");
    dt_tensors out;
    dt_safetensors_meta meta;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_ckpt_restore_latest(dir, &out, &meta, NULL, 0, &err);
    ck_assert_msg(rc == 1, "rc %d: %s", rc, err.msg);
    ck_assert_int_eq(meta.global_step, 100);
    dt_tensors_deinit(&out);
}
END_TEST

/* A second lock on a locked log dir is refused with the holder's pid; once
 * released, the dir can be locked again; stale temp files are removed. */
START_TEST(test_lock_dir) {
    char dir[600], stale[700];
    tmp_path(dir, sizeof dir, "logs");
    int fd1 = -1, fd2 = -1;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_ckpt_lock_dir(dir, &fd1, &err), 0);
    ck_assert_int_ge(fd1, 0);
    snprintf(stale, sizeof stale, "%s/model.ckpt-5.safetensors.tmp.99999", dir);
    FILE *f = fopen(stale, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_ckpt_lock_dir(dir, &fd2, &err), DT_EEXIST);
    ck_assert_int_eq(fd2, -1);
    char pid[32];
    snprintf(pid, sizeof pid, "pid %d", (int)getpid());
    ck_assert_msg(strstr(err.msg, pid) && strstr(err.msg, dir), "message: %s", err.msg);
    ck_assert_int_eq(access(stale, F_OK), 0); /* the loser must not clean */
    dt_ckpt_unlock_dir(fd1);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_ckpt_lock_dir(dir, &fd2, &err), 0);
    ck_assert_int_ne(access(stale, F_OK), 0);
    dt_ckpt_unlock_dir(fd2);
}
END_TEST

/* The lock by itself: it makes the dir and its parents, the lock file
 * names the holder's pid, a second descriptor of the same process is
 * refused, a release lets it be taken again, and a dir that cannot be made
 * is DT_EIO naming it. */
START_TEST(test_dirlock) {
    char dir[600], lock[700], blocker[600], below[700];
    tmp_path(dir, sizeof dir, "a/b/logs");
    snprintf(lock, sizeof lock, "%s/dtrain.lock", dir);
    int fd1 = -1, fd2 = -1;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_dirlock_acquire(dir, &fd1, &err) == 0, "%s", err.msg);
    ck_assert_int_ge(fd1, 0);
    size_t len;
    unsigned char *text = read_all(lock, &len);
    char pid[32];
    snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    ck_assert_str_eq((const char *)text, pid);
    free(text);
    assert_err(dt_dirlock_acquire(dir, &fd2, &err), &err, DT_EEXIST, "locked by another chief");
    ck_assert_int_eq(fd2, -1);
    dt_dirlock_release(fd1);
    dt_dirlock_release(-1); /* a no-op */
    dt_err_clear(&err);
    ck_assert_msg(dt_dirlock_acquire(dir, &fd2, &err) == 0, "%s", err.msg);
    dt_dirlock_release(fd2);

    tmp_path(blocker, sizeof blocker, "file");
    write_text(blocker, "not a dir");
    snprintf(below, sizeof below, "%s/logs", blocker);
    dt_err_clear(&err);
    assert_err(dt_dirlock_acquire(below, &fd1, &err), &err, DT_EIO, below);
    ck_assert_int_eq(fd1, -1);
}
END_TEST

/* ---- rows streamed to a save ---- */

START_TEST(test_crc_combine) {
    /* CRC(A B) from CRC(A), CRC(B) and |B|, at every kind of split, and
     * over a long run of zeros (the shift by x^(8n) for a large n). */
    enum { N = 5000 };
    static unsigned char buf[N];
    for (int i = 0; i < N; i++)
        buf[i] = (unsigned char)(i * 131 + (i >> 7));
    const uint32_t whole = dt_crc32c(buf, N);
    const size_t cuts[] = {0, 1, 7, 8, 9, 100, 4096, N - 1, N};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        size_t a = cuts[k];
        ck_assert_uint_eq(dt_crc32c_combine(dt_crc32c(buf, a), dt_crc32c(buf + a, N - a), N - a),
                          whole);
    }
    const size_t big = ((size_t)1 << 22) + 3;
    unsigned char *zeros = calloc(big, 1);
    ck_assert_ptr_nonnull(zeros);
    ck_assert_uint_eq(dt_crc32c_combine(whole, dt_crc32c(zeros, big), big),
                      dt_crc32c_extend(whole, zeros, big));
    free(zeros);
}
END_TEST

/* The test model followed by a table of n rows as a checkpoint holds it:
 * "t/ids" I64 (n), "t/values" and "t/m" F32 (n, 3). */
static void build_model_and_table(dt_tensors *ts, int64_t n) {
    dt_tensors model;
    build_model(&model, 3);
    dt_tensor specs[8];
    memset(specs, 0, sizeof specs);
    for (int i = 0; i < model.count; i++) {
        specs[i] = model.items[i];
        specs[i].data = NULL;
    }
    dt_tensor *t = specs + model.count;
    t[0] = (dt_tensor){.name = "t/ids", .dtype = DT_DTYPE_I64, .ndim = 1, .shape = {n}};
    t[1] = (dt_tensor){.name = "t/values", .dtype = DT_DTYPE_F32, .ndim = 2, .shape = {n, 3}};
    t[2] = (dt_tensor){.name = "t/m", .dtype = DT_DTYPE_F32, .ndim = 2, .shape = {n, 3}};
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_tensors_init(ts, specs, model.count + (n > 0 ? 3 : 0), &err) == 0, "%s",
                  err.msg);
    for (int i = 0; i < model.count; i++)
        memcpy(ts->items[i].data, model.items[i].data, model.items[i].nbytes);
    for (int64_t k = 0; n > 0 && k < n; k++) {
        ((int64_t *)ts->items[model.count].data)[k] = 5 + 3 * k;
        for (int j = 0; j < 3; j++) {
            ((float *)ts->items[model.count + 1].data)[k * 3 + j] = (float)k * 0.25f - (float)j;
            ((float *)ts->items[model.count + 2].data)[k * 3 + j] = 1.0f / (float)(k + j + 1);
        }
    }
    dt_tensors_deinit(&model);
}

/* A rows writer in tmpdir holding the first n rows of the table part of
 * full (from tensor `first` on), appended in runs of 0, 1, 2, ... rows. */
static dt_safetensors_rows *stream_rows(const dt_tensors *full, int first, int64_t n) {
    dt_tensor specs[3];
    for (int i = 0; i < 3; i++) {
        specs[i] = full->items[first + i];
        specs[i].data = NULL;
    }
    dt_safetensors_rows *r = NULL;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_safetensors_rows_new(tmpdir, specs, 3, &r, &err) == 0, "%s", err.msg);
    const size_t rows = (size_t)full->items[first].shape[0];
    for (int64_t at = 0, run = 0; at < n; at += run, run++) {
        int64_t m = run < n - at ? run : n - at;
        const void *parts[3];
        for (int i = 0; i < 3; i++)
            parts[i] = (const char *)full->items[first + i].data +
                       (size_t)at * (full->items[first + i].nbytes / rows);
        ck_assert_msg(dt_safetensors_rows_append(r, m, parts, &err) == 0, "%s", err.msg);
    }
    ck_assert_int_eq(dt_safetensors_rows_count(r), n);
    return r;
}

START_TEST(test_rows_streamed_same_bytes) {
    /* A table's rows streamed through a rows writer give the file a save of
     * the whole set in memory gives, byte for byte; with no rows, the file
     * of the model alone. The writer's files never show in its dir. */
    dt_safetensors_meta meta = make_meta(9);
    dt_err err;
    dt_err_clear(&err);
    const int64_t sizes[] = {1, 2, 37, 1000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        dt_tensors full, model;
        build_model_and_table(&full, sizes[k]);
        build_model(&model, 3);
        char whole[1024], streamed[1024];
        tmp_path(whole, sizeof whole, "whole.safetensors");
        tmp_path(streamed, sizeof streamed, "streamed.safetensors");
        ck_assert_msg(dt_safetensors_save(whole, &full, &meta, &err) == 0, "%s", err.msg);
        dt_safetensors_rows *r = stream_rows(&full, model.count, sizes[k]);
        ck_assert_int_eq(count_files_with(tmpdir, NULL),
                         k == 0 ? 1 : 2); /* the saves, not the rows */
        ck_assert_msg(dt_safetensors_save_rows(streamed, &model, &r, 1, &meta, &err) == 0, "%s",
                      err.msg);
        dt_safetensors_rows_free(r);
        size_t la, lb;
        unsigned char *a = read_all(whole, &la), *b = read_all(streamed, &lb);
        ck_assert_uint_eq(la, lb);
        ck_assert_msg(memcmp(a, b, la) == 0, "%lld rows: the files differ", (long long)sizes[k]);
        free(a), free(b);
        dt_tensors back;
        ck_assert_msg(dt_safetensors_load(streamed, &back, NULL, &err) == 0, "%s", err.msg);
        assert_same_tensors(&full, &back);
        dt_tensors_deinit(&back), dt_tensors_deinit(&full), dt_tensors_deinit(&model);
        ck_assert_int_eq(count_files_with(tmpdir, NULL), 2);
    }
    /* No rows: no table tensors, as a table with no row saves. */
    dt_tensors model, one;
    build_model(&model, 3);
    build_model_and_table(&one, 1);
    dt_safetensors_rows *r = stream_rows(&one, model.count, 0);
    dt_tensors_deinit(&one);
    char whole[1024], streamed[1024];
    tmp_path(whole, sizeof whole, "model.safetensors");
    tmp_path(streamed, sizeof streamed, "empty.safetensors");
    ck_assert_int_eq(dt_safetensors_save(whole, &model, &meta, &err), 0);
    ck_assert_int_eq(dt_safetensors_save_rows(streamed, &model, &r, 1, &meta, &err), 0);
    dt_safetensors_rows_free(r);
    size_t la, lb;
    unsigned char *a = read_all(whole, &la), *b = read_all(streamed, &lb);
    ck_assert(la == lb && memcmp(a, b, la) == 0);
    free(a), free(b);
    dt_tensors_deinit(&model);
}
END_TEST

START_TEST(test_rows_of_tables_streamed) {
    /* Three tables' writers in one save, the middle one with no rows: the
     * file a save of the model and both tables in memory gives, byte for
     * byte (the empty table saves as no tensor). */
    dt_safetensors_meta meta = make_meta(9);
    dt_err err;
    dt_err_clear(&err);
    dt_tensors model, t, u;
    build_model(&model, 3);
    build_model_and_table(&t, 37);
    build_model_and_table(&u, 5);
    const int mc = model.count;
    static const char *const parts[] = {"ids", "values", "m"};
    for (int i = 0; i < 3; i++)
        snprintf(u.items[mc + i].name, sizeof u.items[mc + i].name, "u/%s", parts[i]);
    dt_tensor items[16];
    memcpy(items, t.items, (size_t)(mc + 3) * sizeof *items);
    memcpy(items + mc + 3, u.items + mc, 3 * sizeof *items);
    dt_tensors all = {.count = mc + 6, .items = items};
    char whole[1024], streamed[1024];
    tmp_path(whole, sizeof whole, "tables.safetensors");
    tmp_path(streamed, sizeof streamed, "tables_streamed.safetensors");
    ck_assert_msg(dt_safetensors_save(whole, &all, &meta, &err) == 0, "%s", err.msg);
    dt_safetensors_rows *rs[3] = {stream_rows(&t, mc, 37), stream_rows(&t, mc, 0),
                                  stream_rows(&u, mc, 5)};
    ck_assert_msg(dt_safetensors_save_rows(streamed, &model, rs, 3, &meta, &err) == 0, "%s",
                  err.msg);
    size_t la, lb;
    unsigned char *a = read_all(whole, &la), *b = read_all(streamed, &lb);
    ck_assert_uint_eq(la, lb);
    ck_assert_msg(memcmp(a, b, la) == 0, "the files differ");
    free(a), free(b);
    /* More writers than a save takes: refused, nothing written. */
    dt_safetensors_rows *many[DT_SAFETENSORS_MAX_ROW_SETS + 1];
    for (int i = 0; i <= DT_SAFETENSORS_MAX_ROW_SETS; i++)
        many[i] = rs[0];
    tmp_path(streamed, sizeof streamed, "too_many.safetensors");
    ck_assert_int_eq(dt_safetensors_save_rows(streamed, &model, many,
                                              DT_SAFETENSORS_MAX_ROW_SETS + 1, &meta, &err),
                     DT_EINVAL);
    ck_assert_int_eq(access(streamed, F_OK), -1);
    for (int i = 0; i < 3; i++)
        dt_safetensors_rows_free(rs[i]);
    dt_tensors_deinit(&model), dt_tensors_deinit(&t), dt_tensors_deinit(&u);
}
END_TEST

typedef struct {
    const char *path;
    const dt_tensors *ts;
    dt_safetensors_rows *rows;
    const dt_safetensors_meta *meta;
} rows_save;

static int run_rows_save(void *ctx, dt_err *err) {
    const rows_save *rs = ctx;
    return dt_safetensors_save_rows(rs->path, rs->ts, &rs->rows, 1, rs->meta, err);
}

START_TEST(test_rows_save_fails_at_every_byte) {
    /* A streamed save cut short at every 7th byte (its parts copied from
     * their files included) fails with DT_EIO and leaves the old file whole. */
    dt_tensors full, model;
    build_model_and_table(&full, 20);
    build_model(&model, 3);
    char path[1024];
    tmp_path(path, sizeof path, "rows.safetensors");
    save_model(path, 1, 1);
    dt_safetensors_rows *r = stream_rows(&full, model.count, 20);
    dt_safetensors_meta meta = make_meta(2);
    dt_err err;
    dt_err_clear(&err);
    char whole[1024];
    tmp_path(whole, sizeof whole, "whole.safetensors");
    ck_assert_int_eq(dt_safetensors_save(whole, &full, &meta, &err), 0);
    size_t len;
    free(read_all(whole, &len));
    unlink(whole);

    rows_save rs = {path, &model, r, &meta};
    save_fails_under_limits(path, len, 7, run_rows_save, &rs);
    ck_assert_msg(dt_safetensors_save_rows(path, &model, &r, 1, &meta, &err) == 0, "%s", err.msg);
    dt_tensors back;
    ck_assert_int_eq(dt_safetensors_load(path, &back, NULL, &err), 0);
    assert_same_tensors(&full, &back);
    dt_tensors_deinit(&back);
    dt_safetensors_rows_free(r);
    dt_tensors_deinit(&full), dt_tensors_deinit(&model);
}
END_TEST

START_TEST(test_rows_bad_input) {
    dt_tensor specs[2] = {
        {.name = "t/ids", .dtype = DT_DTYPE_I64, .ndim = 1},
        {.name = "t/values", .dtype = DT_DTYPE_F32, .ndim = 0},
    };
    dt_safetensors_rows *r = (dt_safetensors_rows *)1;
    dt_err err;
    dt_err_clear(&err);
    assert_err(dt_safetensors_rows_new(tmpdir, specs, 0, &r, &err), &err, DT_EINVAL, "0 parts");
    ck_assert_ptr_null(r);
    dt_err_clear(&err);
    assert_err(dt_safetensors_rows_new(tmpdir, specs, 2, &r, &err), &err, DT_EINVAL,
               "a scalar has no rows");
    dt_err_clear(&err);
    char missing[1100];
    snprintf(missing, sizeof missing, "%s/no/such/dir", tmpdir);
    assert_err(dt_safetensors_rows_new(missing, specs, 1, &r, &err), &err, DT_EIO,
               "temporary file");
    ck_assert_ptr_null(r);
    ck_assert_int_eq(count_files_with(tmpdir, NULL), 0);
    /* Rows past a tensor's limit. */
    ck_assert_int_eq(dt_safetensors_rows_new(tmpdir, specs, 1, &r, &err), 0);
    const void *parts[1] = {specs};
    dt_err_clear(&err);
    assert_err(dt_safetensors_rows_append(r, ((int64_t)1 << 40) + 1, parts, &err), &err, DT_EINVAL,
               "more rows");
    assert_err(dt_safetensors_rows_append(r, -1, parts, &err), &err, DT_EINVAL, "more rows");
    dt_safetensors_rows_free(r);
    dt_safetensors_rows_free(NULL);
}
END_TEST

/* The job id: in a checkpoint's metadata (written when set, read back,
 * refused when malformed), read from the header alone, and in the log
 * dir's job id file (absent: 0; malformed: DT_ECORRUPT naming it). */
START_TEST(test_job_id) {
    static const char id[] = "00112233445566778899aabbccddeeff";
    dt_tensors ts, back;
    build_model(&ts, 3);
    dt_safetensors_meta meta = make_meta(300), got;
    dt_err err;
    dt_err_clear(&err);
    char found[DT_SAFETENSORS_JOB_ID_MAX] = "";
    ck_assert_int_eq(dt_ckpt_job_id_load(tmpdir, found, &err), 0);
    ck_assert_int_eq(dt_ckpt_latest_meta(tmpdir, &got, NULL, 0, &err), 0);
    snprintf(meta.job_id, sizeof meta.job_id, "%s", id);
    ck_assert_msg(dt_ckpt_save_in_dir(tmpdir, &ts, &meta, 3, NULL, 0, &err) == 0, "%s", err.msg);
    char path[1200];
    ck_assert_int_eq(dt_ckpt_latest_meta(tmpdir, &got, path, sizeof path, &err), 1);
    dt_safetensors_meta_deinit(&got);
    ck_assert_str_eq(got.job_id, id);
    ck_assert_int_eq(got.global_step, 300);
    ck_assert_msg(dt_safetensors_load(path, &back, &got, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(got.job_id, id);
    dt_tensors_deinit(&back);
    dt_safetensors_meta_deinit(&got);
    /* Not 32 lowercase hex digits: refused on save. */
    snprintf(meta.job_id, sizeof meta.job_id, "00112233445566778899AABBCCDDEEFF");
    assert_err(dt_ckpt_save_in_dir(tmpdir, &ts, &meta, 3, NULL, 0, &err), &err, DT_EINVAL,
               "job_id is not 32 lowercase hex digits");
    /* No id: none written, none read. */
    meta.job_id[0] = '\0';
    meta.global_step = 400;
    dt_err_clear(&err);
    ck_assert_msg(dt_ckpt_save_in_dir(tmpdir, &ts, &meta, 3, NULL, 0, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(dt_ckpt_latest_meta(tmpdir, &got, NULL, 0, &err), 1);
    dt_safetensors_meta_deinit(&got);
    ck_assert_str_eq(got.job_id, "");
    ck_assert_int_eq(got.global_step, 400);

    ck_assert_msg(dt_ckpt_job_id_save(tmpdir, id, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(dt_ckpt_job_id_load(tmpdir, found, &err), 1);
    ck_assert_str_eq(found, id);
    ck_assert_int_eq(count_tmp_files(tmpdir), 0);
    char file[1200];
    snprintf(file, sizeof file, "%s/job_id", tmpdir);
    write_text(file, "not-an-id\n");
    assert_err(dt_ckpt_job_id_load(tmpdir, found, &err), &err, DT_ECORRUPT, "is not a job id");
    ck_assert_msg(strstr(err.msg, file), "\"%s\" does not name %s", err.msg, file);
    dt_tensors_deinit(&ts);
}
END_TEST

Suite *checkpoint_suite(void) {
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("file");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_round_trip_empty_and_overwrite);
    tcase_add_test(tc, test_job_id);
    tcase_add_test(tc, test_file_is_valid_safetensors);
    tcase_add_test(tc, test_data_aligned);
    tcase_add_test(tc, test_numpy_reads_checkpoint);
    tcase_add_test(tc, test_missing_file);
    tcase_add_test(tc, test_truncated_at_every_byte);
    tcase_add_test(tc, test_every_flipped_data_byte);
    tcase_add_loop_test(tc, test_bad_header, 0, (int)(sizeof bad_headers / sizeof bad_headers[0]));
    tcase_add_test(tc, test_model_too_long);
    tcase_add_test(tc, test_bad_header_length);
    tcase_add_test(tc, test_foreign_file_loads);
    tcase_add_test(tc, test_save_fails_at_every_byte);
    tcase_add_test(tc, test_save_rename_fails);
    tcase_add_test(tc, test_save_rejects_bad_input);
    tcase_add_test(tc, test_crc_combine);
    tcase_add_test(tc, test_rows_streamed_same_bytes);
    tcase_add_test(tc, test_rows_of_tables_streamed);
    tcase_add_test(tc, test_rows_save_fails_at_every_byte);
    tcase_add_test(tc, test_rows_bad_input);
    suite_add_tcase(s, tc);

    TCase *dir = tcase_create("log_dir");
    tcase_add_checked_fixture(dir, setup, teardown);
    tcase_set_timeout(dir, 60);
    tcase_add_test(dir, test_save_in_dir_keeps_newest);
    tcase_add_test(dir, test_save_in_dir_same_step_replaces);
    tcase_add_test(dir, test_save_in_dir_unparseable_state);
    tcase_add_test(dir, test_save_in_dir_duplicate_entries);
    tcase_add_test(dir, test_retention_ranks_orphans_by_step);
    tcase_add_test(dir, test_retention_drops_stale_futures);
    tcase_add_test(dir, test_retention_spares_other_files);
    tcase_add_test(dir, test_retention_after_kill_points);
    tcase_add_test(dir, test_retain_without_save);
    tcase_add_test(dir, test_save_in_dir_bad_args);
    tcase_add_test(dir, test_save_in_dir_state_write_fails);
    tcase_add_test(dir, test_save_in_dir_reconciles);
    tcase_add_test(dir, test_save_in_dir_disk_full);
    tcase_add_test(dir, test_restore_falls_back);
    tcase_add_test(dir, test_lock_dir);
    tcase_add_test(dir, test_dirlock);
    tcase_add_test(dir, test_restore_empty_dir);
    tcase_add_test(dir, test_restore_without_state_file);
    tcase_add_test(dir, test_restore_newer_than_state);
    tcase_add_loop_test(dir, test_restore_malformed_state, 0,
                        (int)(sizeof bad_states / sizeof bad_states[0]));
    tcase_add_test(dir, test_restore_tolerates_crlf_and_comments);
    suite_add_tcase(s, dir);
    return s;
}
