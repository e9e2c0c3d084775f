/*
 * codec suite: every message type survives a round trip field by field;
 * tensors decode as views into the received bytes, bit-exact; the encoder
 * reads each tensor under its lock callback exactly once; the wire format is
 * the one proto/dtrain.proto declares (checked against bytes built by hand);
 * and bad bytes (truncation at every offset, wrong sizes, dtypes, shapes,
 * names, counts, random and mutated strings) come back as DT_EINVAL with a
 * message naming the problem, never a crash or a read past the input.
 *
 * Inputs to the decoder always sit in exactly-sized heap copies, so ASan
 * flags any read beyond them.
 */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "anymsg.h"
#include "codec.h"
#include "pbref.h"
#include "pieces.h"
#include "suites.h"

/* ---- helpers ----------------------------------------------------------- */

/* Sizes and encodes msg into a fresh exactly-sized heap buffer. */
static uint8_t *encode_new(dt_msg_type type, const void *msg, size_t *len) {
    dt_err err;
    dt_err_clear(&err);
    int64_t size = dt_codec_size(type, msg, &err);
    ck_assert_msg(size >= 0, "size of type %d: %s", (int)type, err.msg);
    uint8_t *buf = malloc(size > 0 ? (size_t)size : 1);
    ck_assert_ptr_nonnull(buf);
    int rc = dt_codec_encode(type, msg, buf, (size_t)size, &err);
    ck_assert_msg(rc == 0, "encode of type %d: %s", (int)type, err.msg);
    *len = (size_t)size;
    return buf;
}

/* An exactly-sized heap copy of the first len bytes of src (NULL for 0), so
 * the sanitizer sees any read past the end. */
static uint8_t *copy_exact(const uint8_t *src, size_t len) {
    if (len == 0) return NULL;
    uint8_t *p = malloc(len);
    ck_assert_ptr_nonnull(p);
    memcpy(p, src, len);
    return p;
}

static void assert_view_inside(const dt_tensor *t, const uint8_t *buf, size_t len) {
    const uint8_t *p = t->data;
    ck_assert_msg(p >= buf && p + t->nbytes <= buf + len,
                  "tensor %s: view [%p, +%zu) outside the message [%p, +%zu)", t->name,
                  (const void *)p, t->nbytes, (const void *)buf, len);
}

/* Field-by-field equality of an encoded tensor and its decoded view. */
static void assert_same_tensor(const dt_tensor *want, const dt_tensor *got, const uint8_t *buf,
                               size_t len) {
    ck_assert_str_eq(got->name, want->name);
    ck_assert_int_eq(got->dtype, want->dtype);
    ck_assert_int_eq(got->ndim, want->ndim);
    for (int d = 0; d < want->ndim; d++)
        ck_assert_int_eq(got->shape[d], want->shape[d]);
    ck_assert_uint_eq(got->nbytes, want->nbytes);
    assert_view_inside(got, buf, len);
    ck_assert_msg(memcmp(got->data, want->data, want->nbytes) == 0, "tensor %s: bytes differ",
                  want->name);
}

/* The test model: a 2-D F32 weight with values that probe the float bits
 * (negative zero, a denormal, the largest finite), a F64 scalar, an I32
 * vector and a 4-D I64. */
static float t_weight[2][3];
static double t_scalar = -1.0 / 3.0;
static int32_t t_ints[5] = {0, -1, 2147483647, -2147483647 - 1, 42};
static int64_t t_longs[1][2][1][2] = {{{{INT64_MIN, INT64_MAX}}, {{-7, 7}}}};
static dt_tensor t_items[4];

static void make_tensors(void) {
    t_weight[0][0] = -0.0f;
    t_weight[0][1] = 1.0e-40f; /* denormal */
    t_weight[0][2] = 3.4028235e38f;
    t_weight[1][0] = 0.1f;
    t_weight[1][1] = -2.5f;
    t_weight[1][2] = 1.0f / 3.0f;
    memset(t_items, 0, sizeof t_items);
    snprintf(t_items[0].name, sizeof t_items[0].name, "linear/weight");
    t_items[0].dtype = DT_DTYPE_F32;
    t_items[0].ndim = 2;
    t_items[0].shape[0] = 2;
    t_items[0].shape[1] = 3;
    t_items[0].data = t_weight;
    t_items[0].nbytes = sizeof t_weight;
    snprintf(t_items[1].name, sizeof t_items[1].name, "scalar");
    t_items[1].dtype = DT_DTYPE_F64;
    t_items[1].ndim = 0;
    t_items[1].data = &t_scalar;
    t_items[1].nbytes = sizeof t_scalar;
    snprintf(t_items[2].name, sizeof t_items[2].name, "ints");
    t_items[2].dtype = DT_DTYPE_I32;
    t_items[2].ndim = 1;
    t_items[2].shape[0] = 5;
    t_items[2].data = t_ints;
    t_items[2].nbytes = sizeof t_ints;
    /* 127 bytes: the longest name that fits. */
    memset(t_items[3].name, 'n', DT_TENSOR_NAME_MAX - 1);
    t_items[3].name[DT_TENSOR_NAME_MAX - 1] = '\0';
    t_items[3].dtype = DT_DTYPE_I64;
    t_items[3].ndim = 4;
    t_items[3].shape[0] = 1;
    t_items[3].shape[1] = 2;
    t_items[3].shape[2] = 1;
    t_items[3].shape[3] = 2;
    t_items[3].data = t_longs;
    t_items[3].nbytes = sizeof t_longs;
}

static dt_tensor_list all_tensors(void) {
    make_tensors();
    dt_tensor_list l = {.items = t_items, .count = 4};
    return l;
}

/* ---- round trips ------------------------------------------------------- */

START_TEST(test_roundtrip_create_req) {
    dt_msg_create_req m;
    memset(&m, 0, sizeof m);
    m.out = all_tensors();
    m.global_step = 123456789012345;
    m.max_steps = 987654321;
    m.optim.kind = DT_OPTIM_ADAM;
    m.optim.learning_rate = 0.125;
    m.optim.momentum = 0.875;
    m.optim.nesterov = 1;
    m.optim.beta1 = 0.9;
    m.optim.beta2 = 0.999;
    m.optim.epsilon = 1e-7;
    m.optim.initial_accumulator = 0.1;
    memset(m.model, 'm', DT_MSG_MODEL_MAX - 1); /* the longest model text */
    size_t len;
    uint8_t *buf = encode_new(DT_MSG_CREATE_REQ, &m, &len);

    dt_msg_create_req d;
    memset(&d, 0, sizeof d);
    dt_tensor views[8];
    d.in.items = views;
    d.in.cap = 8;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_codec_decode(DT_MSG_CREATE_REQ, buf, len, &d, &err), 0);
    ck_assert_int_eq(d.in.count, 4);
    for (int i = 0; i < 4; i++)
        assert_same_tensor(&t_items[i], &d.in.items[i], buf, len);
    ck_assert_int_eq(d.global_step, m.global_step);
    ck_assert_int_eq(d.max_steps, m.max_steps);
    ck_assert_int_eq(d.optim.kind, DT_OPTIM_ADAM);
    ck_assert(d.optim.learning_rate == m.optim.learning_rate);
    ck_assert(d.optim.momentum == m.optim.momentum);
    ck_assert_int_eq(d.optim.nesterov, 1);
    ck_assert(d.optim.beta1 == m.optim.beta1);
    ck_assert(d.optim.beta2 == m.optim.beta2);
    ck_assert(d.optim.epsilon == m.optim.epsilon);
    ck_assert(d.optim.initial_accumulator == m.optim.initial_accumulator);
    ck_assert_str_eq(d.model, m.model);
    /* -0.0 and the denormal keep their bits: no float conversion on the way. */
    const float *w = d.in.items[0].data;
    float w0, w1;
    memcpy(&w0, &w[0], 4);
    memcpy(&w1, &w[1], 4);
    ck_assert(signbit(w0) && w0 == 0.0f);
    ck_assert(w1 == 1.0e-40f);
    free(buf);
}
END_TEST

/* buf decoded as a CreateRequest into a zeroed *d; err cleared first. */
static int decode_create(const uint8_t *buf, size_t len, dt_msg_create_req *d, dt_err *err) {
    memset(d, 0, sizeof *d);
    dt_err_clear(err);
    return dt_codec_decode(DT_MSG_CREATE_REQ, buf, len, d, err);
}

/* The optimizer goes by its name on the wire (the proto's string) and is
 * the enum on each side; a name the receiver does not know is refused where
 * the message is decoded, naming the field. */
START_TEST(test_optimizer_by_name) {
    for (int k = DT_OPTIM_SGD; k <= DT_OPTIM_FTRL; k++) {
        dt_msg_create_req m;
        memset(&m, 0, sizeof m);
        dt_optim_defaults(&m.optim);
        m.optim.kind = (dt_optim_kind)k;
        size_t len;
        uint8_t *buf = encode_new(DT_MSG_CREATE_REQ, &m, &len);
        const char *name = dt_optim_name(k);
        /* OptimizerConfig (field 3) holds name (field 1) as a string. */
        const uint8_t want[2] = {0x0a, (uint8_t)strlen(name)};
        uint8_t *at = memmem(buf, len, want, sizeof want);
        ck_assert_msg(at && memcmp(at + 2, name, strlen(name)) == 0, "%s not on the wire", name);
        dt_msg_create_req d;
        dt_err err;
        ck_assert_msg(decode_create(buf, len, &d, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(d.optim.kind, k);
        /* The same length, unknown: refused. */
        memset(at + 2, 'x', strlen(name));
        ck_assert_int_eq(decode_create(buf, len, &d, &err), DT_EINVAL);
        char msg[160];
        snprintf(msg, sizeof msg,
                 "CreateRequest: optimizer.name: unknown name \"%.*s\" (want sgd, momentum, "
                 "adagrad, adam or ftrl)",
                 (int)strlen(name), "xxxxxxxx");
        ck_assert_str_eq(err.msg, msg);
        free(buf);
    }
    /* A kind out of range is sent as "" (no name), which is refused too:
     * a Create without an optimizer is not a default one. */
    dt_msg_create_req m;
    memset(&m, 0, sizeof m);
    dt_optim_defaults(&m.optim);
    m.optim.kind = (dt_optim_kind)9;
    size_t len;
    uint8_t *buf = encode_new(DT_MSG_CREATE_REQ, &m, &len);
    dt_msg_create_req d;
    dt_err err;
    ck_assert_int_eq(decode_create(buf, len, &d, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "optimizer.name: unknown name \"\""));
    free(buf);
    uint8_t none[1];
    ck_assert_int_eq(decode_create(none, 0, &d, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "optimizer.name: unknown name \"\""));
}
END_TEST

/* A Create whose encoding holds the name `have`, with one byte of it
 * changed on the wire: refused at decode with `want` as the message. */
static void assert_name_refused(const dt_msg_create_req *m, const char *have, const char *want) {
    size_t len;
    uint8_t *buf = encode_new(DT_MSG_CREATE_REQ, m, &len);
    uint8_t *at = memmem(buf, len, have, strlen(have));
    ck_assert_msg(at != NULL, "\"%s\" not on the wire", have);
    at[strlen(have) - 1] = 'X';
    dt_msg_create_req d;
    dt_err err;
    ck_assert_int_eq(decode_create(buf, len, &d, &err), DT_EINVAL);
    ck_assert_str_eq(err.msg, want);
    free(buf);
}

/* The schedule's kind, the consistency mode and a table's init travel by
 * name too: an unknown one is refused where the Create is decoded, quoting
 * it, the field and the names it could have been (empty is the default). */
START_TEST(test_choice_names_refused) {
    dt_msg_create_req m;
    memset(&m, 0, sizeof m);
    dt_optim_defaults(&m.optim);
    m.schedule.kind = DT_LR_EXPONENTIAL;
    m.schedule.decay_steps = 10;
    m.schedule.decay_rate = 0.5;
    m.consistency.mode = DT_MODE_BOUNDED;
    m.num_tables = 2;
    for (int i = 0; i < 2; i++) {
        snprintf(m.tables[i].name, sizeof m.tables[i].name, "t%d", i);
        m.tables[i].rows = 10;
        m.tables[i].dim = 1;
    }
    m.tables[1].init = DT_TABLE_INIT_UNIFORM;
    assert_name_refused(&m, "exponential",
                        "CreateRequest: schedule.kind: unknown name \"exponentiaX\" (want "
                        "constant, exponential, piecewise or cosine)");
    assert_name_refused(&m, "bounded",
                        "CreateRequest: consistency.mode: unknown name \"boundeX\" (want async, "
                        "sync or bounded)");
    assert_name_refused(&m, "uniform",
                        "CreateRequest: tables[1].init: unknown name \"uniforX\" (want zeros, "
                        "normal or uniform)");
    /* The same message unpatched decodes, every name to its enum. */
    size_t len;
    uint8_t *buf = encode_new(DT_MSG_CREATE_REQ, &m, &len);
    dt_msg_create_req d;
    dt_err err;
    ck_assert_msg(decode_create(buf, len, &d, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(d.schedule.kind, DT_LR_EXPONENTIAL);
    ck_assert_int_eq(d.consistency.mode, DT_MODE_BOUNDED);
    ck_assert_int_eq(d.tables[0].init, DT_TABLE_INIT_ZEROS);
    ck_assert_int_eq(d.tables[1].init, DT_TABLE_INIT_UNIFORM);
    free(buf);
    /* Every kind a job can send travels as itself, cosine's alpha too (a
     * kind the encoder did not name would reach the ps as constant). */
    for (int k = DT_LR_CONSTANT; k < DT_LR_AUTO; k++) {
        m.schedule.kind = k;
        m.schedule.alpha = 0.25;
        m.schedule.num_boundaries = k == DT_LR_PIECEWISE ? 1 : 0;
        buf = encode_new(DT_MSG_CREATE_REQ, &m, &len);
        ck_assert_msg(decode_create(buf, len, &d, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(d.schedule.kind, k);
        ck_assert_double_eq(d.schedule.alpha, 0.25);
        free(buf);
    }
}
END_TEST

START_TEST(test_roundtrip_create_resp) {
    dt_msg_create_resp m = {.incarnation = 0xFEEDFACECAFEBEEFull, .global_step = 77};
    size_t len;
    uint8_t *buf = encode_new(DT_MSG_CREATE_RESP, &m, &len);
    dt_msg_create_resp d;
    memset(&d, 0, sizeof d);
    ck_assert_int_eq(dt_codec_decode(DT_MSG_CREATE_RESP, buf, len, &d, NULL), 0);
    ck_assert(d.incarnation == m.incarnation);
    ck_assert_int_eq(d.global_step, 77);
    free(buf);
}
END_TEST

START_TEST(test_roundtrip_pull_req) {
    char longest[DT_TENSOR_NAME_MAX];
    memset(longest, 'x', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0';
    const char *names[3] = {"a", "linear/weight", longest};
    dt_msg_pull_req m;
    memset(&m, 0, sizeof m);
    m.out_names = names;
    m.out_count = 3;
    m.worker = -1; /* tools: a negative int32 on the wire */
    size_t len;
    uint8_t *buf = encode_new(DT_MSG_PULL_REQ, &m, &len);
    dt_msg_pull_req d;
    memset(&d, 0, sizeof d);
    char storage[4][DT_TENSOR_NAME_MAX];
    d.names.items = storage;
    d.names.cap = 4;
    ck_assert_int_eq(dt_codec_decode(DT_MSG_PULL_REQ, buf, len, &d, NULL), 0);
    ck_assert_int_eq(d.worker, -1);
    ck_assert_int_eq(d.names.count, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_str_eq(d.names.items[i], names[i]);
    free(buf);

    /* No names: "every variable". */
    m.out_count = 0;
    m.worker = 1;
    buf = encode_new(DT_MSG_PULL_REQ, &m, &len);
    memset(&d, 0, sizeof d);
    d.names.items = storage;
    d.names.cap = 4;
    ck_assert_int_eq(dt_codec_decode(DT_MSG_PULL_REQ, buf, len, &d, NULL), 0);
    ck_assert_int_eq(d.names.count, 0);
    ck_assert_int_eq(d.worker, 1);
    free(buf);
}
END_TEST

START_TEST(test_roundtrip_pull_resp) {
    dt_msg_pull_resp m;
    memset(&m, 0, sizeof m);
    m.incarnation = UINT64_MAX;
    m.global_step = 5;
    m.done = true;
    m.out = all_tensors();
    size_t len;
    uint8_t *buf = encode_new(DT_MSG_PULL_RESP, &m, &len);
    dt_msg_pull_resp d;
    memset(&d, 0, sizeof d);
    dt_tensor views[4];
    d.in.items = views;
    d.in.cap = 4; /* exactly enough */
    ck_assert_int_eq(dt_codec_decode(DT_MSG_PULL_RESP, buf, len, &d, NULL), 0);
    ck_assert(d.incarnation == UINT64_MAX);
    ck_assert_int_eq(d.global_step, 5);
    ck_assert(d.done);
    ck_assert_int_eq(d.in.count, 4);
    for (int i = 0; i < 4; i++)
        assert_same_tensor(&t_items[i], &d.in.items[i], buf, len);
    free(buf);
}
END_TEST

START_TEST(test_roundtrip_push_req) {
    dt_msg_push_req m;
    memset(&m, 0, sizeof m);
    m.worker = 1;
    m.step = -3;
    m.out = all_tensors();
    size_t len;
    uint8_t *buf = encode_new(DT_MSG_PUSH_REQ, &m, &len);
    dt_msg_push_req d;
    memset(&d, 0, sizeof d);
    dt_tensor views[5];
    d.in.items = views;
    d.in.cap = 5;
    ck_assert_int_eq(dt_codec_decode(DT_MSG_PUSH_REQ, buf, len, &d, NULL), 0);
    ck_assert_int_eq(d.worker, 1);
    ck_assert_int_eq(d.step, -3);
    ck_assert_int_eq(d.in.count, 4);
    for (int i = 0; i < 4; i++)
        assert_same_tensor(&t_items[i], &d.in.items[i], buf, len);
    free(buf);

    /* No gradients at all is a well-formed message. */
    m.out.count = 0;
    buf = encode_new(DT_MSG_PUSH_REQ, &m, &len);
    memset(&d, 0, sizeof d);
    d.in.items = views;
    d.in.cap = 5;
    ck_assert_int_eq(dt_codec_decode(DT_MSG_PUSH_REQ, buf, len, &d, NULL), 0);
    ck_assert_int_eq(d.in.count, 0);
    free(buf);
}
END_TEST

START_TEST(test_roundtrip_push_resp) {
    dt_msg_push_resp m = {.incarnation = 0x8000000000000001ull, .global_step = 1000, .done = true};
    size_t len;
    uint8_t *buf = encode_new(DT_MSG_PUSH_RESP, &m, &len);
    dt_msg_push_resp d;
    memset(&d, 0, sizeof d);
    ck_assert_int_eq(dt_codec_decode(DT_MSG_PUSH_RESP, buf, len, &d, NULL), 0);
    ck_assert(d.incarnation == m.incarnation);
    ck_assert_int_eq(d.global_step, 1000);
    ck_assert(d.done);
    free(buf);
}
END_TEST

START_TEST(test_roundtrip_status) {
    dt_msg_status_req q = {.worker = 7, .passes_done = true, .heartbeat = true};
    size_t len;
    uint8_t *buf = encode_new(DT_MSG_STATUS_REQ, &q, &len);
    dt_msg_status_req dq = {0};
    ck_assert_int_eq(dt_codec_decode(DT_MSG_STATUS_REQ, buf, len, &dq, NULL), 0);
    ck_assert_int_eq(dq.worker, 7);
    ck_assert(dq.passes_done && dq.heartbeat);
    free(buf);

    dt_msg_status_resp m;
    memset(&m, 0, sizeof m);
    m.incarnation = 0x0123456789ABCDEFull;
    m.ready = true;
    m.global_step = 41;
    m.max_steps = 1000;
    m.done = true;
    m.num_variables = 2;
    m.num_bytes = 1LL << 33;
    snprintf(m.model, sizeof m.model, "linear F=3");
    m.pushes_applied = 40;
    m.pushes_rejected = 3;
    /* A negative staleness count is no ps's: refused, the message untouched. */
    m.num_staleness_counts = 3;
    m.staleness_counts[0] = 5;
    m.staleness_counts[1] = -2;
    buf = encode_new(DT_MSG_STATUS_RESP, &m, &len);
    dt_msg_status_resp d;
    memset(&d, 0, sizeof d);
    dt_err bad;
    dt_err_clear(&bad);
    ck_assert_int_eq(dt_codec_decode(DT_MSG_STATUS_RESP, buf, len, &d, &bad), DT_EINVAL);
    ck_assert_msg(strstr(bad.msg, "staleness_counts[1] is negative (-2)"), "%s", bad.msg);
    ck_assert_int_eq(d.num_staleness_counts, 0);
    ck_assert_int_eq(d.global_step, 0);
    free(buf);
    m.staleness_counts[1] = 0;
    m.num_staleness_counts = 0;

    buf = encode_new(DT_MSG_STATUS_RESP, &m, &len);
    memset(&d, 0, sizeof d);
    ck_assert_int_eq(dt_codec_decode(DT_MSG_STATUS_RESP, buf, len, &d, NULL), 0);
    ck_assert(d.incarnation == m.incarnation);
    ck_assert(d.ready);
    ck_assert_int_eq(d.global_step, 41);
    ck_assert_int_eq(d.max_steps, 1000);
    ck_assert(d.done);
    ck_assert_int_eq(d.num_variables, 2);
    ck_assert_int_eq(d.num_bytes, 1LL << 33);
    ck_assert_str_eq(d.model, "linear F=3");
    ck_assert_int_eq(d.pushes_applied, 40);
    ck_assert_int_eq(d.pushes_rejected, 3);
    free(buf);

    /* A worker's liveness: "never" is -1; less is no ps's, and refused. */
    m.num_workers = 2;
    m.workers[0] = (dt_worker_activity){
        .worker = 1, .last_push_ms = -1, .last_seen_ms = 250, .passes_done = true};
    m.workers[1] = (dt_worker_activity){.worker = 2, .last_push_ms = -1, .last_seen_ms = -1};
    buf = encode_new(DT_MSG_STATUS_RESP, &m, &len);
    memset(&d, 0, sizeof d);
    ck_assert_int_eq(dt_codec_decode(DT_MSG_STATUS_RESP, buf, len, &d, NULL), 0);
    ck_assert_int_eq(d.num_workers, 2);
    ck_assert_int_eq(d.workers[0].last_seen_ms, 250);
    ck_assert(d.workers[0].passes_done);
    ck_assert_int_eq(d.workers[1].last_seen_ms, -1);
    ck_assert(!d.workers[1].passes_done);
    free(buf);
    m.workers[1].last_seen_ms = -2;
    buf = encode_new(DT_MSG_STATUS_RESP, &m, &len);
    dt_err_clear(&bad);
    ck_assert_int_eq(dt_codec_decode(DT_MSG_STATUS_RESP, buf, len, &d, &bad), DT_EINVAL);
    ck_assert_msg(strstr(bad.msg, "workers[1].last_seen_ms is -2"), "%s", bad.msg);
    free(buf);
}
END_TEST

START_TEST(test_roundtrip_shutdown) {
    dt_msg_shutdown_req m;
    memset(&m, 0, sizeof m);
    memset(m.reason, 'r', DT_MSG_REASON_MAX - 1);
    size_t len;
    uint8_t *buf = encode_new(DT_MSG_SHUTDOWN_REQ, &m, &len);
    dt_msg_shutdown_req d;
    memset(&d, 0, sizeof d);
    ck_assert_int_eq(dt_codec_decode(DT_MSG_SHUTDOWN_REQ, buf, len, &d, NULL), 0);
    ck_assert_str_eq(d.reason, m.reason);
    free(buf);

    dt_msg_shutdown_resp r = {0};
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_codec_size(DT_MSG_SHUTDOWN_RESP, &r, &err), 0);
    uint8_t one[1];
    ck_assert_int_eq(dt_codec_encode(DT_MSG_SHUTDOWN_RESP, &r, one, 0, &err), 0);
    ck_assert_int_eq(dt_codec_decode(DT_MSG_SHUTDOWN_RESP, one, 0, &r, &err), 0);
}
END_TEST

/* Defaults (all zero) round trip too: proto3 leaves them off the wire. */
START_TEST(test_roundtrip_zero_values) {
    dt_msg_status_resp m;
    memset(&m, 0, sizeof m);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_codec_size(DT_MSG_STATUS_RESP, &m, &err), 0);
    dt_msg_status_resp d;
    memset(&d, 0x5A, sizeof d);
    d.model[0] = 'x';
    uint8_t none[1];
    ck_assert_int_eq(dt_codec_decode(DT_MSG_STATUS_RESP, none, 0, &d, &err), 0);
    ck_assert(d.incarnation == 0 && !d.ready && d.global_step == 0 && d.num_variables == 0);
    ck_assert_str_eq(d.model, "");
}
END_TEST

START_TEST(test_size_is_exact) {
    dt_msg_push_req m;
    memset(&m, 0, sizeof m);
    m.worker = 1;
    m.step = 9;
    m.out = all_tensors();
    dt_err err;
    dt_err_clear(&err);
    int64_t size = dt_codec_size(DT_MSG_PUSH_REQ, &m, &err);
    ck_assert_int_gt(size, (int64_t)(sizeof t_weight + sizeof t_ints));
    uint8_t *buf = malloc((size_t)size + 1);
    ck_assert_ptr_nonnull(buf);
    /* One byte short: an error, not an overflow. */
    int rc = dt_codec_encode(DT_MSG_PUSH_REQ, &m, buf, (size_t)size - 1, &err);
    ck_assert_int_lt(rc, 0);
    ck_assert_int_eq(err.code, rc);
    ck_assert_msg(strstr(err.msg, "PushRequest") != NULL, "message: %s", err.msg);
    /* One byte long: the size promise is broken, reported as such. */
    dt_err_clear(&err);
    rc = dt_codec_encode(DT_MSG_PUSH_REQ, &m, buf, (size_t)size + 1, &err);
    ck_assert_int_eq(rc, DT_EINTERNAL);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_codec_encode(DT_MSG_PUSH_REQ, &m, buf, (size_t)size, &err), 0);
    free(buf);
}
END_TEST

START_TEST(test_methods_and_types) {
    ck_assert_str_eq(dt_codec_method(DT_MSG_CREATE_REQ), "/dtrain.ParameterServer/Create");
    ck_assert_str_eq(dt_codec_method(DT_MSG_PULL_REQ), "/dtrain.ParameterServer/Pull");
    ck_assert_str_eq(dt_codec_method(DT_MSG_PUSH_REQ), "/dtrain.ParameterServer/Push");
    ck_assert_str_eq(dt_codec_method(DT_MSG_STATUS_REQ), "/dtrain.ParameterServer/Status");
    ck_assert_str_eq(dt_codec_method(DT_MSG_SHUTDOWN_REQ), "/dtrain.ParameterServer/Shutdown");
    ck_assert_ptr_null(dt_codec_method(DT_MSG_PULL_RESP));
    ck_assert_ptr_null(dt_codec_method(DT_MSG_COUNT));

    dt_err err;
    dt_err_clear(&err);
    int dummy = 0;
    uint8_t b[4] = {0};
    ck_assert_int_eq(dt_codec_size(DT_MSG_COUNT, &dummy, &err), DT_EINTERNAL);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_codec_encode(DT_MSG_COUNT, &dummy, b, 4, &err), DT_EINTERNAL);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_codec_decode(DT_MSG_COUNT, b, 4, &dummy, &err), DT_EINTERNAL);
    ck_assert_msg(strstr(err.msg, "unknown message type") != NULL, "message: %s", err.msg);
}
END_TEST

/* ---- the lock callback ------------------------------------------------- */

#define SENTINEL 12345.5f

typedef struct {
    int events[16][2]; /* (index, acquire) in call order */
    int n;
    dt_tensor *items;
    float saved[8];
} lock_log;

/* Records the call; while "locked", the first float of the tensor reads
 * SENTINEL, so the encoded bytes show whether the copy happened inside. */
static void record_lock(void *ctx, int index, int acquire) {
    lock_log *log = ctx;
    if (log->n < 16) {
        log->events[log->n][0] = index;
        log->events[log->n][1] = acquire;
    }
    log->n++;
    float *first = log->items[index].data;
    if (acquire) {
        log->saved[index] = first[0];
        first[0] = SENTINEL;
    } else {
        first[0] = log->saved[index];
    }
}

START_TEST(test_lock_callback_pairs) {
    float a[3] = {1, 2, 3}, b[1] = {4}, c[2][2] = {{5, 6}, {7, 8}};
    dt_tensor items[3];
    memset(items, 0, sizeof items);
    const char *names[3] = {"a", "b", "c"};
    void *datas[3] = {a, b, c};
    size_t sizes[3] = {sizeof a, sizeof b, sizeof c};
    int64_t dims[3][2] = {{3, 0}, {1, 0}, {2, 2}};
    int ndims[3] = {1, 1, 2};
    for (int i = 0; i < 3; i++) {
        snprintf(items[i].name, sizeof items[i].name, "%s", names[i]);
        items[i].dtype = DT_DTYPE_F32;
        items[i].ndim = ndims[i];
        items[i].shape[0] = dims[i][0];
        items[i].shape[1] = dims[i][1];
        items[i].data = datas[i];
        items[i].nbytes = sizes[i];
    }
    lock_log log;
    memset(&log, 0, sizeof log);
    log.items = items;
    dt_msg_pull_resp m;
    memset(&m, 0, sizeof m);
    m.out.items = items;
    m.out.count = 3;
    m.out.lock = record_lock;
    m.out.lock_ctx = &log;

    dt_err err;
    dt_err_clear(&err);
    int64_t size = dt_codec_size(DT_MSG_PULL_RESP, &m, &err);
    ck_assert_int_gt(size, 0);
    ck_assert_msg(log.n == 0, "sizing took the lock %d times", log.n);

    uint8_t *buf = malloc((size_t)size);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(dt_codec_encode(DT_MSG_PULL_RESP, &m, buf, (size_t)size, &err), 0);
    ck_assert_int_eq(log.n, 6);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(log.events[2 * i][0], i);
        ck_assert_int_eq(log.events[2 * i][1], 1);
        ck_assert_int_eq(log.events[2 * i + 1][0], i);
        ck_assert_int_eq(log.events[2 * i + 1][1], 0);
    }
    /* Released: the sources are back to their values. */
    ck_assert(a[0] == 1 && b[0] == 4 && c[0][0] == 5);

    dt_msg_pull_resp d;
    memset(&d, 0, sizeof d);
    dt_tensor views[3];
    d.in.items = views;
    d.in.cap = 3;
    ck_assert_int_eq(dt_codec_decode(DT_MSG_PULL_RESP, buf, (size_t)size, &d, &err), 0);
    ck_assert_int_eq(d.in.count, 3);
    for (int i = 0; i < 3; i++) {
        float first, last;
        memcpy(&first, d.in.items[i].data, 4);
        ck_assert_msg(first == SENTINEL, "tensor %d was copied outside its lock", i);
        if (sizes[i] == 4) continue; /* one element: the sentinel is all there is */
        memcpy(&last, (const uint8_t *)d.in.items[i].data + d.in.items[i].nbytes - 4, 4);
        ck_assert(last == ((float *)datas[i])[sizes[i] / 4 - 1]);
    }
    free(buf);
}
END_TEST

/* ---- the wire format, by hand ------------------------------------------ */

typedef struct {
    uint8_t b[8192];
    size_t n;
} wbuf;

static void put_varint(wbuf *w, uint64_t v) {
    while (v >= 0x80) {
        w->b[w->n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    w->b[w->n++] = (uint8_t)v;
}

static void put_tag(wbuf *w, int field, int wire_type) {
    put_varint(w, ((uint64_t)field << 3) | (uint64_t)wire_type);
}

static void put_bytes(wbuf *w, int field, const void *p, size_t len) {
    put_tag(w, field, 2);
    put_varint(w, len);
    memcpy(w->b + w->n, p, len);
    w->n += len;
}

/* A Tensor submessage as field `field` of w. Fields in number order, zero
 * values left out, shape packed: what any proto3 encoder writes. */
static void put_tensor(wbuf *w, int field, const char *name, int dtype, const int64_t *shape,
                       int ndim, const void *data, size_t nbytes) {
    wbuf t, packed;
    t.n = packed.n = 0;
    if (name[0]) put_bytes(&t, 1, name, strlen(name));
    if (dtype) {
        put_tag(&t, 2, 0);
        put_varint(&t, (uint64_t)(int64_t)dtype);
    }
    for (int d = 0; d < ndim; d++)
        put_varint(&packed, (uint64_t)shape[d]);
    if (ndim) put_bytes(&t, 3, packed.b, packed.n);
    if (nbytes) put_bytes(&t, 4, data, nbytes);
    put_bytes(w, field, t.b, t.n);
}

START_TEST(test_wire_format_by_hand) {
    float w[2][3] = {{1, 2, 3}, {4, 5, 6}};
    float bias[3] = {-1, 0.5f, 2};
    int64_t ws[2] = {2, 3}, bs[1] = {3};
    wbuf hand;
    hand.n = 0;
    put_tag(&hand, 1, 0);
    put_varint(&hand, 1); /* worker */
    put_tag(&hand, 2, 0);
    put_varint(&hand, 300); /* step */
    put_tensor(&hand, 3, "w", DT_DTYPE_F32, ws, 2, w, sizeof w);
    put_tensor(&hand, 3, "b", DT_DTYPE_F32, bs, 1, bias, sizeof bias);

    dt_tensor items[2];
    memset(items, 0, sizeof items);
    snprintf(items[0].name, sizeof items[0].name, "w");
    items[0].dtype = DT_DTYPE_F32;
    items[0].ndim = 2;
    items[0].shape[0] = 2;
    items[0].shape[1] = 3;
    items[0].data = w;
    items[0].nbytes = sizeof w;
    snprintf(items[1].name, sizeof items[1].name, "b");
    items[1].dtype = DT_DTYPE_F32;
    items[1].ndim = 1;
    items[1].shape[0] = 3;
    items[1].data = bias;
    items[1].nbytes = sizeof bias;
    dt_msg_push_req m;
    memset(&m, 0, sizeof m);
    m.worker = 1;
    m.step = 300;
    m.out.items = items;
    m.out.count = 2;
    size_t len;
    uint8_t *buf = encode_new(DT_MSG_PUSH_REQ, &m, &len);
    ck_assert_uint_eq(len, hand.n);
    ck_assert_msg(memcmp(buf, hand.b, len) == 0, "encoder bytes differ from proto3's");
    free(buf);

    /* And the decoder takes what other encoders write: the shape unpacked
     * (legal for proto3 parsers) and the fields out of order. */
    wbuf odd;
    odd.n = 0;
    wbuf t;
    t.n = 0;
    put_bytes(&t, 4, bias, sizeof bias);
    put_tag(&t, 3, 0);
    put_varint(&t, 3);
    put_tag(&t, 2, 0);
    put_varint(&t, DT_DTYPE_F32);
    put_bytes(&t, 1, "b", 1);
    put_bytes(&odd, 3, t.b, t.n);
    put_tag(&odd, 2, 0);
    put_varint(&odd, 300);
    uint8_t *in = copy_exact(odd.b, odd.n);
    dt_msg_push_req d;
    memset(&d, 0, sizeof d);
    dt_tensor views[2];
    d.in.items = views;
    d.in.cap = 2;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_codec_decode(DT_MSG_PUSH_REQ, in, odd.n, &d, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(d.in.count, 1);
    ck_assert_int_eq(d.step, 300);
    assert_same_tensor(&items[1], &d.in.items[0], in, odd.n);
    free(in);
}
END_TEST

/* The sparse fields of a PushRequest (8 and 9, after push_id) are written
 * as proto3 writes them, and read back as views. */
START_TEST(test_wire_sparse_push_by_hand) {
    float bias[1] = {0.25f};
    int64_t ids[3] = {2, 9, 1099511627775};
    float rows[3][2] = {{1, 2}, {3, 4}, {5, 6}};
    int64_t bs[1] = {1}, is[1] = {3}, rs[2] = {3, 2};
    wbuf hand;
    hand.n = 0;
    put_tag(&hand, 2, 0);
    put_varint(&hand, 5); /* step */
    put_tensor(&hand, 3, "wide/bias", DT_DTYPE_F32, bs, 1, bias, sizeof bias);
    put_tensor(&hand, 8, "wide/weight", DT_DTYPE_I64, is, 1, ids, sizeof ids);
    put_tensor(&hand, 9, "wide/weight", DT_DTYPE_F32, rs, 2, rows, sizeof rows);

    dt_tensor items[3];
    items[0] = (dt_tensor){
        .dtype = DT_DTYPE_F32, .ndim = 1, .shape = {1}, .data = bias, .nbytes = sizeof bias};
    snprintf(items[0].name, sizeof items[0].name, "wide/bias");
    items[1] = (dt_tensor){
        .dtype = DT_DTYPE_I64, .ndim = 1, .shape = {3}, .data = ids, .nbytes = sizeof ids};
    snprintf(items[1].name, sizeof items[1].name, "wide/weight");
    items[2] = (dt_tensor){
        .dtype = DT_DTYPE_F32, .ndim = 2, .shape = {3, 2}, .data = rows, .nbytes = sizeof rows};
    snprintf(items[2].name, sizeof items[2].name, "wide/weight");
    dt_msg_push_req m;
    memset(&m, 0, sizeof m);
    m.step = 5;
    m.out = (dt_tensor_list){.items = items, .count = 1};
    m.sparse_ids_out = (dt_tensor_list){.items = items + 1, .count = 1};
    m.sparse_grads_out = (dt_tensor_list){.items = items + 2, .count = 1};
    size_t len;
    uint8_t *buf = encode_new(DT_MSG_PUSH_REQ, &m, &len);
    ck_assert_uint_eq(len, hand.n);
    ck_assert_msg(memcmp(buf, hand.b, len) == 0, "encoder bytes differ from proto3's");

    dt_msg_push_req d;
    memset(&d, 0, sizeof d);
    dt_tensor views[3];
    d.in = (dt_tensor_views){.items = views, .cap = 1};
    d.sparse_ids_in = (dt_tensor_views){.items = views + 1, .cap = 1};
    d.sparse_grads_in = (dt_tensor_views){.items = views + 2, .cap = 1};
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_codec_decode(DT_MSG_PUSH_REQ, buf, len, &d, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(d.step, 5);
    ck_assert_int_eq(d.in.count, 1);
    ck_assert_int_eq(d.sparse_ids_in.count, 1);
    ck_assert_int_eq(d.sparse_grads_in.count, 1);
    assert_same_tensor(&items[0], &d.in.items[0], buf, len);
    assert_same_tensor(&items[1], &d.sparse_ids_in.items[0], buf, len);
    assert_same_tensor(&items[2], &d.sparse_grads_in.items[0], buf, len);

    /* A decoder that gave no room for sparse gradients refuses them, naming
     * the field. */
    memset(&d, 0, sizeof d);
    d.in = (dt_tensor_views){.items = views, .cap = 1};
    dt_err_clear(&err);
    ck_assert_int_eq(dt_codec_decode(DT_MSG_PUSH_REQ, buf, len, &d, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "sparse_ids: more than 0 tensors"), "%s", err.msg);
    free(buf);
}
END_TEST

/* The sparse messages and the new fields of the old ones survive a round
 * trip: tables and FTRL's fields in Create, tables in Status, SparsePull's
 * ids and values, an export page, an import page. */
START_TEST(test_roundtrip_sparse) {
    dt_err err;
    size_t len;
    dt_msg_create_req c;
    memset(&c, 0, sizeof c);
    c.optim.kind = DT_OPTIM_FTRL;
    c.optim.ftrl_l1 = 0.5;
    c.optim.ftrl_l2 = 0.25;
    c.optim.ftrl_beta = 1.5;
    c.num_tables = 2;
    c.tables[0] = (dt_msg_table){"wide/weight", (int64_t)1 << 40, 1, DT_TABLE_INIT_ZEROS, 0, 7};
    c.tables[1] = (dt_msg_table){"embedding/table",    1000, 16,
                                 DT_TABLE_INIT_NORMAL, 0.25, 0xFFFFFFFFFFFFFFFFull};
    c.tables_pending = true;
    uint8_t *buf = encode_new(DT_MSG_CREATE_REQ, &c, &len);
    dt_msg_create_req cd;
    memset(&cd, 0, sizeof cd);
    dt_err_clear(&err);
    ck_assert_msg(dt_codec_decode(DT_MSG_CREATE_REQ, buf, len, &cd, &err) == 0, "%s", err.msg);
    ck_assert(cd.optim.ftrl_l1 == 0.5 && cd.optim.ftrl_l2 == 0.25 && cd.optim.ftrl_beta == 1.5);
    ck_assert_int_eq(cd.num_tables, 2);
    ck_assert(cd.tables_pending);
    for (int i = 0; i < 2; i++) {
        ck_assert_str_eq(cd.tables[i].name, c.tables[i].name);
        ck_assert_int_eq(cd.tables[i].rows, c.tables[i].rows);
        ck_assert_int_eq(cd.tables[i].dim, c.tables[i].dim);
        ck_assert_int_eq(cd.tables[i].init, c.tables[i].init);
        ck_assert(cd.tables[i].init_scale == c.tables[i].init_scale);
        ck_assert(cd.tables[i].seed == c.tables[i].seed);
    }
    free(buf);
    dt_msg_status_resp st;
    memset(&st, 0, sizeof st);
    st.num_tables = 1;
    st.tables[0] = (dt_msg_table_status){"wide/weight", 12345, 678, 9999999};
    buf = encode_new(DT_MSG_STATUS_RESP, &st, &len);
    dt_msg_status_resp sd;
    memset(&sd, 0, sizeof sd);
    ck_assert_int_eq(dt_codec_decode(DT_MSG_STATUS_RESP, buf, len, &sd, &err), 0);
    ck_assert_int_eq(sd.num_tables, 1);
    ck_assert_str_eq(sd.tables[0].name, "wide/weight");
    ck_assert_int_eq(sd.tables[0].rows_held, 12345);
    ck_assert_int_eq(sd.tables[0].nonzero, 678);
    ck_assert_int_eq(sd.tables[0].bytes, 9999999);
    free(buf);

    int64_t ids[3] = {0, 5, 77};
    float vals[3][2] = {{1, 2}, {3, 4}, {5, 6}};
    dt_tensor it = {
        .dtype = DT_DTYPE_I64, .ndim = 1, .shape = {3}, .data = ids, .nbytes = sizeof ids};
    snprintf(it.name, sizeof it.name, "wide/weight");
    dt_tensor vt = {
        .dtype = DT_DTYPE_F32, .ndim = 2, .shape = {3, 2}, .data = vals, .nbytes = sizeof vals};
    snprintf(vt.name, sizeof vt.name, "wide/weight");
    dt_msg_sparse_pull_req pr;
    memset(&pr, 0, sizeof pr);
    pr.worker = 3;
    pr.seen_step = 44;
    snprintf(pr.table, sizeof pr.table, "wide/weight");
    pr.ids_out = (dt_tensor_list){.items = &it, .count = 1};
    buf = encode_new(DT_MSG_SPARSE_PULL_REQ, &pr, &len);
    dt_msg_sparse_pull_req prd;
    memset(&prd, 0, sizeof prd);
    dt_tensor view;
    prd.ids_in = (dt_tensor_views){.items = &view, .cap = 1};
    ck_assert_msg(dt_codec_decode(DT_MSG_SPARSE_PULL_REQ, buf, len, &prd, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(prd.worker, 3);
    ck_assert_int_eq(prd.seen_step, 44);
    ck_assert_str_eq(prd.table, "wide/weight");
    ck_assert_int_eq(prd.ids_in.count, 1);
    assert_same_tensor(&it, &view, buf, len);
    free(buf);
    /* Two ids tensors: the second has no room. */
    wbuf two;
    two.n = 0;
    int64_t is[1] = {3};
    put_tensor(&two, 3, "t", DT_DTYPE_I64, is, 1, ids, sizeof ids);
    put_tensor(&two, 3, "t", DT_DTYPE_I64, is, 1, ids, sizeof ids);
    uint8_t *in = copy_exact(two.b, two.n);
    memset(&prd, 0, sizeof prd);
    prd.ids_in = (dt_tensor_views){.items = &view, .cap = 1};
    dt_err_clear(&err);
    ck_assert_int_eq(dt_codec_decode(DT_MSG_SPARSE_PULL_REQ, in, two.n, &prd, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "SparsePullRequest: ids: more than 1 tensors"), "%s", err.msg);
    free(in);

    dt_msg_sparse_pull_resp pp;
    memset(&pp, 0, sizeof pp);
    pp.incarnation = 0xABCDEF0123456789ull;
    pp.global_step = 9;
    pp.done = true;
    pp.values_out = (dt_tensor_list){.items = &vt, .count = 1};
    buf = encode_new(DT_MSG_SPARSE_PULL_RESP, &pp, &len);
    dt_msg_sparse_pull_resp ppd;
    memset(&ppd, 0, sizeof ppd);
    ppd.values_in = (dt_tensor_views){.items = &view, .cap = 1};
    ck_assert_int_eq(dt_codec_decode(DT_MSG_SPARSE_PULL_RESP, buf, len, &ppd, &err), 0);
    ck_assert(ppd.incarnation == pp.incarnation && ppd.global_step == 9 && ppd.done);
    assert_same_tensor(&vt, &view, buf, len);
    free(buf);

    dt_msg_sparse_export_req er = {"wide/weight", 41, 1000, true};
    buf = encode_new(DT_MSG_SPARSE_EXPORT_REQ, &er, &len);
    dt_msg_sparse_export_req erd;
    memset(&erd, 0, sizeof erd);
    ck_assert_int_eq(dt_codec_decode(DT_MSG_SPARSE_EXPORT_REQ, buf, len, &erd, &err), 0);
    ck_assert_str_eq(erd.table, "wide/weight");
    ck_assert(erd.after_id == 41 && erd.max_rows == 1000 && erd.include_slots);
    free(buf);

    dt_tensor page[2] = {it, vt};
    dt_msg_sparse_import_req ir;
    memset(&ir, 0, sizeof ir);
    snprintf(ir.table, sizeof ir.table, "wide/weight");
    ir.last = true;
    ir.out = (dt_tensor_list){.items = page, .count = 2};
    buf = encode_new(DT_MSG_SPARSE_IMPORT_REQ, &ir, &len);
    dt_msg_sparse_import_req ird;
    memset(&ird, 0, sizeof ird);
    dt_tensor pv[2];
    ird.in = (dt_tensor_views){.items = pv, .cap = 2};
    ck_assert_int_eq(dt_codec_decode(DT_MSG_SPARSE_IMPORT_REQ, buf, len, &ird, &err), 0);
    ck_assert(ird.last && ird.in.count == 2);
    assert_same_tensor(&it, &pv[0], buf, len);
    assert_same_tensor(&vt, &pv[1], buf, len);
    free(buf);
    ck_assert_str_eq(dt_codec_method(DT_MSG_SPARSE_PULL_REQ), "/dtrain.ParameterServer/SparsePull");
}
END_TEST

/* ---- bad bytes --------------------------------------------------------- */

/* Decodes hand-built bytes as a PushRequest (cap views); returns the code
 * and leaves the message in err. */
static int decode_push_bytes(const wbuf *w, int cap, dt_err *err) {
    uint8_t *in = copy_exact(w->b, w->n);
    dt_msg_push_req d;
    memset(&d, 0, sizeof d);
    dt_tensor views[8];
    d.in.items = views;
    d.in.cap = cap;
    dt_err_clear(err);
    int rc = dt_codec_decode(DT_MSG_PUSH_REQ, in, w->n, &d, err);
    if (rc == 0)
        for (int i = 0; i < d.in.count; i++)
            assert_view_inside(&d.in.items[i], in, w->n);
    free(in);
    return rc;
}

#define ASSERT_BAD(w, cap, needle)                                                                 \
    do {                                                                                           \
        dt_err e_;                                                                                 \
        int rc_ = decode_push_bytes((w), (cap), &e_);                                              \
        ck_assert_msg(rc_ == DT_EINVAL, "expected DT_EINVAL for %s, got %d (%s)", needle, rc_,     \
                      e_.msg);                                                                     \
        ck_assert_int_eq(e_.code, DT_EINVAL);                                                      \
        ck_assert_msg(strstr(e_.msg, needle) != NULL, "message \"%s\" lacks \"%s\"", e_.msg,       \
                      needle);                                                                     \
        ck_assert_msg(strstr(e_.msg, "PushRequest") != NULL,                                       \
                      "message \"%s\" lacks the "                                                  \
                      "message type",                                                              \
                      e_.msg);                                                                     \
    } while (0)

START_TEST(test_bad_data_length) {
    float g[4] = {1, 2, 3, 4};
    int64_t s3[1] = {3};
    wbuf w;
    w.n = 0;
    put_tensor(&w, 3, "g", DT_DTYPE_F32, s3, 1, g, 8); /* 8 bytes, shape needs 12 */
    ASSERT_BAD(&w, 4, "8 data bytes, shape needs 12");
    w.n = 0;
    put_tensor(&w, 3, "g", DT_DTYPE_F32, s3, 1, g, 16); /* too many */
    ASSERT_BAD(&w, 4, "16 data bytes");
    w.n = 0;
    put_tensor(&w, 3, "g", DT_DTYPE_F32, s3, 1, g, 0); /* none at all */
    ASSERT_BAD(&w, 4, "0 data bytes");
    /* The second tensor is the bad one: the message says which. */
    w.n = 0;
    put_tensor(&w, 3, "ok", DT_DTYPE_F32, s3, 1, g, 12);
    put_tensor(&w, 3, "bad", DT_DTYPE_F64, s3, 1, g, 12);
    ASSERT_BAD(&w, 4, "gradients[1] bad");
}
END_TEST

START_TEST(test_bad_dtype) {
    float g[2] = {1, 2};
    int64_t s2[1] = {2};
    wbuf w;
    w.n = 0;
    put_tensor(&w, 3, "g", 7, s2, 1, g, sizeof g);
    ASSERT_BAD(&w, 4, "unknown dtype 7");
    w.n = 0;
    put_tensor(&w, 3, "g", 0, s2, 1, g, sizeof g); /* DT_INVALID: left off the wire */
    ASSERT_BAD(&w, 4, "unknown dtype 0");
    w.n = 0;
    put_tensor(&w, 3, "g", -1, s2, 1, g, sizeof g); /* out of the enum's range */
    ASSERT_BAD(&w, 4, "gradients[0]");
}
END_TEST

START_TEST(test_bad_shape) {
    float g[4] = {0};
    int64_t zero[2] = {2, 0}, neg[1] = {-3}, huge[2] = {(int64_t)1 << 30, (int64_t)1 << 30};
    wbuf w;
    w.n = 0;
    put_tensor(&w, 3, "g", DT_DTYPE_F32, zero, 2, g, 0);
    ASSERT_BAD(&w, 4, "dimension 1 is 0");
    w.n = 0;
    put_tensor(&w, 3, "g", DT_DTYPE_F32, neg, 1, g, 0);
    ASSERT_BAD(&w, 4, "dimension 0 is -3");
    w.n = 0;
    put_tensor(&w, 3, "g", DT_DTYPE_F32, huge, 2, g, 16);
    ASSERT_BAD(&w, 4, "larger than");
    /* Five dimensions: one more than a Tensor may have. */
    int64_t five[5] = {1, 1, 1, 1, 1};
    w.n = 0;
    put_tensor(&w, 3, "g", DT_DTYPE_F32, five, 5, g, 4);
    ASSERT_BAD(&w, 4, "gradients[0]");
    {
        dt_err e;
        decode_push_bytes(&w, 4, &e);
        ck_assert_msg(strstr(e.msg, "shape") || strstr(e.msg, "dim"),
                      "5 dims: message \"%s\" does not name the shape", e.msg);
    }
}
END_TEST

START_TEST(test_bad_names) {
    float g[1] = {1};
    int64_t s1[1] = {1};
    char longname[200];
    memset(longname, 'q', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    wbuf w;
    w.n = 0;
    put_tensor(&w, 3, longname, DT_DTYPE_F32, s1, 1, g, 4);
    ASSERT_BAD(&w, 4, "gradients[0]");
    {
        dt_err e;
        decode_push_bytes(&w, 4, &e);
        ck_assert_msg(strstr(e.msg, "name"), "long name: message \"%s\" does not say name", e.msg);
    }
    /* Exactly 128 bytes: one too many for the NUL. */
    longname[DT_TENSOR_NAME_MAX] = '\0';
    w.n = 0;
    put_tensor(&w, 3, longname, DT_DTYPE_F32, s1, 1, g, 4);
    ASSERT_BAD(&w, 4, "gradients[0]");
    w.n = 0;
    put_tensor(&w, 3, "", DT_DTYPE_F32, s1, 1, g, 4);
    ASSERT_BAD(&w, 4, "empty name");

    /* PullRequest names: empty and too long. */
    dt_err err;
    char storage[2][DT_TENSOR_NAME_MAX];
    const char *cases[2][2] = {{"", "names[0]"}, {longname, "names[0]: length 128"}};
    for (int c = 0; c < 2; c++) {
        wbuf p;
        p.n = 0;
        put_bytes(&p, 1, cases[c][0], strlen(cases[c][0]));
        uint8_t *in = copy_exact(p.b, p.n);
        dt_msg_pull_req d;
        memset(&d, 0, sizeof d);
        d.names.items = storage;
        d.names.cap = 2;
        dt_err_clear(&err);
        ck_assert_int_eq(dt_codec_decode(DT_MSG_PULL_REQ, in, p.n, &d, &err), DT_EINVAL);
        ck_assert_msg(strstr(err.msg, cases[c][1]) && strstr(err.msg, "PullRequest"), "message: %s",
                      err.msg);
        free(in);
    }
}
END_TEST

START_TEST(test_too_many_tensors) {
    float g[1] = {1};
    int64_t s1[1] = {1};
    wbuf w;
    w.n = 0;
    put_tensor(&w, 3, "a", DT_DTYPE_F32, s1, 1, g, 4);
    put_tensor(&w, 3, "b", DT_DTYPE_F32, s1, 1, g, 4);
    put_tensor(&w, 3, "c", DT_DTYPE_F32, s1, 1, g, 4);
    dt_err err;
    ck_assert_int_eq(decode_push_bytes(&w, 3, &err), 0);
    ASSERT_BAD(&w, 2, "more than 2 tensors");
    ASSERT_BAD(&w, 0, "more than 0 tensors");

    /* Names over the caller's cap. */
    wbuf p;
    p.n = 0;
    put_bytes(&p, 1, "a", 1);
    put_bytes(&p, 1, "b", 1);
    uint8_t *in = copy_exact(p.b, p.n);
    char storage[1][DT_TENSOR_NAME_MAX];
    dt_msg_pull_req d;
    memset(&d, 0, sizeof d);
    d.names.items = storage;
    d.names.cap = 1;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_codec_decode(DT_MSG_PULL_REQ, in, p.n, &d, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "more than 1"), "message: %s", err.msg);
    free(in);
}
END_TEST

START_TEST(test_bad_encode_input) {
    float g[1] = {1};
    dt_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "g");
    t.dtype = DT_DTYPE_F32;
    t.ndim = 5;
    for (int d = 0; d < 5 && d < DT_TENSOR_MAX_DIMS; d++)
        t.shape[d] = 1;
    t.data = g;
    t.nbytes = 4;
    dt_msg_push_req m;
    memset(&m, 0, sizeof m);
    m.out.items = &t;
    m.out.count = 1;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_lt(dt_codec_size(DT_MSG_PUSH_REQ, &m, &err), 0);
    ck_assert_int_eq(err.code, DT_EINVAL);
    uint8_t buf[64];
    dt_err_clear(&err);
    ck_assert_int_eq(dt_codec_encode(DT_MSG_PUSH_REQ, &m, buf, sizeof buf, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "ndim"), "message: %s", err.msg);
    /* A name with no NUL in its 128 bytes. */
    t.ndim = 1;
    memset(t.name, 'z', sizeof t.name);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_codec_encode(DT_MSG_PUSH_REQ, &m, buf, sizeof buf, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "name too long"), "message: %s", err.msg);
}
END_TEST

/* Truncating a valid two-gradient PushRequest at every byte offset: the
 * decoder fails cleanly, except at the four offsets where a prefix is itself
 * a well-formed shorter PushRequest (protobuf cannot tell those apart), and
 * there it yields exactly that prefix. */
START_TEST(test_truncation_every_offset) {
    float w[2][3] = {{1, 2, 3}, {4, 5, 6}};
    float bias[3] = {-1, 0.5f, 2};
    dt_tensor items[2];
    memset(items, 0, sizeof items);
    snprintf(items[0].name, sizeof items[0].name, "linear/weight");
    items[0].dtype = DT_DTYPE_F32;
    items[0].ndim = 2;
    items[0].shape[0] = 2;
    items[0].shape[1] = 3;
    items[0].data = w;
    items[0].nbytes = sizeof w;
    snprintf(items[1].name, sizeof items[1].name, "linear/bias");
    items[1].dtype = DT_DTYPE_F32;
    items[1].ndim = 1;
    items[1].shape[0] = 3;
    items[1].data = bias;
    items[1].nbytes = sizeof bias;
    dt_msg_push_req m;
    memset(&m, 0, sizeof m);
    m.worker = 1;
    m.step = 1000;
    m.out.items = items;
    m.out.count = 2;
    size_t len;
    uint8_t *full = encode_new(DT_MSG_PUSH_REQ, &m, &len);

    /* The prefix boundaries: sizes of the message cut after each field. */
    size_t bound[4];
    dt_msg_push_req p;
    memset(&p, 0, sizeof p);
    p.worker = 1;
    bound[0] = 0;
    bound[1] = (size_t)dt_codec_size(DT_MSG_PUSH_REQ, &p, NULL);
    p.step = 1000;
    bound[2] = (size_t)dt_codec_size(DT_MSG_PUSH_REQ, &p, NULL);
    p.out.items = items;
    p.out.count = 1;
    bound[3] = (size_t)dt_codec_size(DT_MSG_PUSH_REQ, &p, NULL);
    int expect_count[4] = {0, 0, 0, 1};

    int failures = 0;
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *in = copy_exact(full, cut);
        dt_msg_push_req d;
        memset(&d, 0, sizeof d);
        dt_tensor views[2];
        d.in.items = views;
        d.in.cap = 2;
        dt_err err;
        dt_err_clear(&err);
        int rc = dt_codec_decode(DT_MSG_PUSH_REQ, in, cut, &d, &err);
        int boundary = -1;
        for (int b = 0; b < 4; b++)
            if (cut == bound[b]) boundary = b;
        if (boundary >= 0) {
            ck_assert_msg(rc == 0, "cut %zu (a field boundary): %s", cut, err.msg);
            ck_assert_int_eq(d.in.count, expect_count[boundary]);
            for (int i = 0; i < d.in.count; i++)
                assert_same_tensor(&items[i], &views[i], in, cut);
        } else {
            ck_assert_msg(rc == DT_EINVAL, "cut %zu of %zu: rc %d (%s)", cut, len, rc, err.msg);
            ck_assert_int_eq(err.code, rc);
            ck_assert_msg(strstr(err.msg, "PushRequest"), "cut %zu: message %s", cut, err.msg);
            failures++;
        }
        free(in);
    }
    ck_assert_int_eq(failures, (int)len - 4);
    free(full);
}
END_TEST

/* ---- fuzz -------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rng_next(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

#define FUZZ_CAP 4

/* Decodes in as type and checks what a successful decode promises. */
static void decode_checked(dt_msg_type type, const uint8_t *in, size_t len) {
    dt_test_any_msg msg;
    memset(&msg, 0, sizeof msg);
    dt_tensor views[FUZZ_CAP];
    char names[FUZZ_CAP][DT_TENSOR_NAME_MAX];
    dt_tensor_views *tv = NULL;
    switch (type) {
    case DT_MSG_CREATE_REQ: tv = &msg.create_req.in; break;
    case DT_MSG_PULL_RESP: tv = &msg.pull_resp.in; break;
    case DT_MSG_PUSH_REQ: tv = &msg.push_req.in; break;
    case DT_MSG_PULL_REQ:
        msg.pull_req.names.items = names;
        msg.pull_req.names.cap = FUZZ_CAP;
        break;
    default: break;
    }
    if (tv) {
        tv->items = views;
        tv->cap = FUZZ_CAP;
    }
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_codec_decode(type, in, len, &msg, &err);
    if (rc < 0) {
        ck_assert_int_eq(err.code, rc);
        ck_assert_msg(err.msg[0] != '\0', "type %d: error without a message", (int)type);
        return;
    }
    ck_assert_int_eq(rc, 0);
    if (tv) {
        ck_assert(tv->count >= 0 && tv->count <= FUZZ_CAP);
        for (int i = 0; i < tv->count; i++) {
            dt_tensor copy = tv->items[i];
            ck_assert_int_eq(dt_tensor_check_spec(&copy, NULL), 0);
            ck_assert_uint_eq(copy.nbytes, tv->items[i].nbytes);
            assert_view_inside(&tv->items[i], in, len);
        }
    }
    if (type == DT_MSG_PULL_REQ)
        for (int i = 0; i < msg.pull_req.names.count; i++) {
            size_t n = strnlen(names[i], DT_TENSOR_NAME_MAX);
            ck_assert(n >= 1 && n < DT_TENSOR_NAME_MAX);
        }
    if (type == DT_MSG_CREATE_REQ) {
        ck_assert(strnlen(msg.create_req.model, DT_MSG_MODEL_MAX) < DT_MSG_MODEL_MAX);
        ck_assert(dt_optim_name(msg.create_req.optim.kind) != NULL);
    }
}

static void decode_everywhere(const uint8_t *bytes, size_t len) {
    uint8_t *in = copy_exact(bytes, len);
    for (int t = 0; t < DT_MSG_COUNT; t++)
        decode_checked((dt_msg_type)t, in, len);
    free(in);
}

START_TEST(test_fuzz_random_bytes) {
    rng_state = 0x9E3779B97F4A7C15ull;
    uint8_t bytes[512];
    for (int iter = 0; iter < 2000; iter++) {
        size_t len = (size_t)(rng_next() % sizeof bytes);
        for (size_t i = 0; i < len; i++)
            bytes[i] = (uint8_t)(rng_next() >> 56);
        decode_everywhere(bytes, len);
    }
}
END_TEST

/* 1..max_flips random changes to the len bytes at b, each one of `kinds`
 * (3: a bit flipped, a byte replaced, the message cut short there; 4: also
 * a byte made 0x80 or 0xff, the stuff of long varints). Returns the length
 * left. */
static size_t mutate(uint8_t *b, size_t len, int max_flips, int kinds) {
    int flips = 1 + (int)(rng_next() % (uint64_t)max_flips);
    for (int f = 0; f < flips && len > 0; f++) {
        size_t at = (size_t)(rng_next() % len);
        uint64_t k = rng_next() % (uint64_t)kinds;
        if (k == 0)
            b[at] ^= (uint8_t)(1u << (rng_next() % 8));
        else if (k == 1)
            b[at] = (uint8_t)rng_next();
        else if (k == 2 && kinds == 4)
            b[at] = (uint8_t)(rng_next() % 2 ? 0x80 : 0xff);
        else
            len = at;
    }
    return len;
}

/* Random bytes rarely get past the first tag; mutations of valid messages
 * reach the tensor and name callbacks. */
START_TEST(test_fuzz_mutations) {
    rng_state = 0xD1B54A32D192ED03ull;
    dt_msg_create_req c;
    memset(&c, 0, sizeof c);
    c.out = all_tensors();
    c.global_step = 3;
    c.max_steps = 10;
    c.optim.kind = DT_OPTIM_SGD;
    c.optim.learning_rate = 0.5;
    snprintf(c.model, sizeof c.model, "linear");
    const char *names[2] = {"linear/weight", "scalar"};
    dt_msg_pull_req pq;
    memset(&pq, 0, sizeof pq);
    pq.out_names = names;
    pq.out_count = 2;
    pq.worker = 1;
    dt_msg_push_req pr;
    memset(&pr, 0, sizeof pr);
    pr.worker = 1;
    pr.step = 2;
    pr.out = all_tensors();
    dt_msg_status_resp st;
    memset(&st, 0, sizeof st);
    st.ready = true;
    st.global_step = 9;
    snprintf(st.model, sizeof st.model, "linear");
    struct {
        dt_msg_type type;
        const void *msg;
    } seeds[4] = {{DT_MSG_CREATE_REQ, &c},
                  {DT_MSG_PULL_REQ, &pq},
                  {DT_MSG_PUSH_REQ, &pr},
                  {DT_MSG_STATUS_RESP, &st}};
    uint8_t *enc[4];
    size_t enc_len[4];
    for (int s = 0; s < 4; s++)
        enc[s] = encode_new(seeds[s].type, seeds[s].msg, &enc_len[s]);

    uint8_t work[2048];
    for (int iter = 0; iter < 2000; iter++) {
        int s = (int)(rng_next() % 4);
        size_t len = enc_len[s];
        ck_assert_uint_le(len, sizeof work);
        memcpy(work, enc[s], len);
        len = mutate(work, len, 4, 3);
        decode_everywhere(work, len);
    }
    for (int s = 0; s < 4; s++)
        free(enc[s]);
}
END_TEST

/* Tensor data sent with the fixed32 wire type reaches the decoder through a
 * copy on nanopb's stack: it must be refused, not kept as a view (found by
 * the codec fuzzer). */
START_TEST(test_data_wrong_wire_type) {
    const uint8_t msg[] = {0x1a, 0x0a,                    /* gradients, 10 bytes */
                           0x0a, 0x01, 'w',               /* name "w" */
                           0x10, 0x01,                    /* dtype F32, scalar */
                           0x25, 0x00, 0x00, 0x80, 0x3f}; /* data as fixed32 1.0f */
    dt_msg_push_req req;
    memset(&req, 0, sizeof req);
    dt_tensor views[2];
    req.in.items = views;
    req.in.cap = 2;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_codec_decode(DT_MSG_PUSH_REQ, msg, sizeof msg, &req, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "length-delimited") != NULL, "message: %s", err.msg);
}
END_TEST

/* ---- messages in pieces -------------------------------------------------- */

/* A pull reply with the test tensors, a long float variable and its slots:
 * tensors that cross many pieces, elements split between them. */
static float t_long[1031];
static dt_tensor t_more[2];

static uint8_t *encode_pull_reply(size_t *len) {
    make_tensors();
    for (int i = 0; i < 1031; i++)
        t_long[i] = (float)i * 0.37f - 100.0f;
    memset(t_more, 0, sizeof t_more);
    snprintf(t_more[0].name, sizeof t_more[0].name, "long");
    t_more[0].dtype = DT_DTYPE_F32;
    t_more[0].ndim = 1;
    t_more[0].shape[0] = 1031;
    t_more[0].data = t_long;
    t_more[0].nbytes = sizeof t_long;
    t_more[1] = t_more[0];
    snprintf(t_more[1].name, sizeof t_more[1].name, "long/m");
    dt_msg_pull_resp m;
    memset(&m, 0, sizeof m);
    m.incarnation = 0x0123456789abcdefull;
    m.global_step = 4242;
    m.decided.has = true;
    m.decided.step = 4241;
    m.decided.members_len = 2;
    m.decided.members[1] = 0x81;
    dt_tensor vars[5];
    memcpy(vars, t_items, sizeof t_items);
    vars[4] = t_more[0];
    m.out = (dt_tensor_list){.items = vars, .count = 5};
    m.slots_out = (dt_tensor_list){.items = &t_more[1], .count = 1};
    return encode_new(DT_MSG_PULL_RESP, &m, len);
}

/* Decodes a pull reply from b into *d with views (and spans) in storage. */
static int decode_pull_reply(const dt_rpc_buf *b, dt_msg_pull_resp *d, dt_tensor *views,
                             dt_span *spans, dt_tensor *slot_views, dt_span *slot_spans,
                             dt_err *err) {
    memset(d, 0, sizeof *d);
    d->in = (dt_tensor_views){views, 0, 8, spans};
    d->slots_in = (dt_tensor_views){slot_views, 0, 8, slot_spans};
    return dt_codec_decode_buf(DT_MSG_PULL_RESP, b, d, err);
}

/* Tensor i of views, as one run of bytes read element by element. */
static void read_view(const dt_tensor_views *v, int i, uint8_t *out) {
    dt_span_reader r;
    dt_codec_view_reader(v, i, &r);
    size_t n, at = 0, elem = dt_dtype_size(v->items[i].dtype);
    const uint8_t *run;
    while ((run = dt_span_reader_next(&r, &n)) != NULL) {
        memcpy(out + at, run, n * elem);
        at += n * elem;
    }
    ck_assert_uint_eq(at, v->items[i].nbytes);
}

static void assert_same_views(const dt_tensor_views *want, const dt_tensor_views *got) {
    static uint8_t a[8192], b[8192], c[8192];
    ck_assert_int_eq(got->count, want->count);
    for (int i = 0; i < want->count; i++) {
        const dt_tensor *w = &want->items[i], *g = &got->items[i];
        ck_assert_str_eq(g->name, w->name);
        ck_assert_int_eq(g->dtype, w->dtype);
        ck_assert_int_eq(g->ndim, w->ndim);
        for (int d = 0; d < w->ndim; d++)
            ck_assert_int_eq(g->shape[d], w->shape[d]);
        ck_assert_uint_eq(g->nbytes, w->nbytes);
        ck_assert(w->nbytes <= sizeof a);
        memcpy(a, w->data, w->nbytes);
        dt_codec_view_copy(got, i, b);
        read_view(got, i, c);
        ck_assert_msg(memcmp(a, b, w->nbytes) == 0, "%s: copied bytes differ", w->name);
        ck_assert_msg(memcmp(a, c, w->nbytes) == 0, "%s: bytes read by runs differ", w->name);
        if (g->data) ck_assert(memcmp(g->data, a, w->nbytes) == 0);
    }
}

/* The same message decoded from one run and from pieces of 1 to 7 bytes
 * (a real gRPC byte buffer read in place, every piece in its own
 * allocation): every field, name, shape and tensor byte agrees, a tensor
 * inside one piece is a view, and one that crosses pieces is read from its
 * span, elements split between pieces included. */
START_TEST(test_decode_in_pieces) {
    size_t len;
    uint8_t *flat = encode_pull_reply(&len);
    dt_rpc_buf whole = {.data = flat, .len = len};
    dt_tensor fv[8], fsv[8], pv[8], psv[8];
    dt_span fs[8], fss[8], ps[8], pss[8];
    dt_msg_pull_resp want, got;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(decode_pull_reply(&whole, &want, fv, fs, fsv, fss, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(want.in.count, 5);
    ck_assert_int_eq(want.slots_in.count, 1);
    for (uint64_t seed = 1; seed <= 20; seed++) {
        dt_rpc_buf b;
        dt_test_in_pieces(flat, len, seed, &b);
        ck_assert_msg(decode_pull_reply(&b, &got, pv, ps, psv, pss, &err) == 0, "seed %llu: %s",
                      (unsigned long long)seed, err.msg);
        ck_assert(got.incarnation == want.incarnation);
        ck_assert_int_eq(got.global_step, want.global_step);
        ck_assert(got.decided.has && got.decided.step == 4241 && got.decided.members_len == 2);
        ck_assert_int_eq(got.decided.members[1], 0x81);
        assert_same_views(&want.in, &got.in);
        assert_same_views(&want.slots_in, &got.slots_in);
        /* 4124 bytes of "long" in pieces of at most 7: never one view. */
        ck_assert_ptr_null(got.in.items[4].data);
        ck_assert_uint_eq(got.in.spans[4].len, sizeof t_long);
        dt_rpc_buf_release(&b);
    }
    free(flat);
}
END_TEST

/* Pieces without span storage: a tensor that crosses them cannot be
 * described, and decoding says so instead of handing out a bad view. */
START_TEST(test_decode_pieces_need_spans) {
    size_t len;
    uint8_t *flat = encode_pull_reply(&len);
    dt_rpc_buf b;
    dt_test_in_pieces(flat, len, 7, &b);
    dt_msg_pull_resp d;
    memset(&d, 0, sizeof d);
    dt_tensor views[8], slot_views[8];
    d.in = (dt_tensor_views){views, 0, 8, NULL};
    d.slots_in = (dt_tensor_views){slot_views, 0, 8, NULL};
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_codec_decode_buf(DT_MSG_PULL_RESP, &b, &d, &err), DT_EINTERNAL);
    ck_assert_msg(strstr(err.msg, "span") != NULL, "message: %s", err.msg);
    dt_rpc_buf_release(&b);
    free(flat);
}
END_TEST

/* A message at every alignment: views point at unaligned bytes, and
 * reading them (by copy or by runs of elements) gives the values sent. */
START_TEST(test_decode_unaligned) {
    size_t len;
    uint8_t *flat = encode_pull_reply(&len);
    uint8_t *room = malloc(len + 8);
    ck_assert_ptr_nonnull(room);
    int misaligned = 0;
    for (size_t shift = 0; shift < 8; shift++) {
        memcpy(room + shift, flat, len);
        dt_rpc_buf b = {.data = room + shift, .len = len};
        dt_tensor views[8], slot_views[8];
        dt_msg_pull_resp d;
        dt_err err;
        dt_err_clear(&err);
        ck_assert_msg(decode_pull_reply(&b, &d, views, NULL, slot_views, NULL, &err) == 0, "%s",
                      err.msg);
        const dt_tensor *t = &d.in.items[4];
        ck_assert_ptr_nonnull(t->data);
        misaligned += ((uintptr_t)t->data & 3u) != 0;
        dt_tensor_views one = {d.in.items + 4, 1, 1, NULL};
        float got[1031];
        read_view(&one, 0, (uint8_t *)got);
        ck_assert(memcmp(got, t_long, sizeof t_long) == 0);
        dt_codec_view_copy(&one, 0, got);
        ck_assert(memcmp(got, t_long, sizeof t_long) == 0);
    }
    ck_assert_int_ge(misaligned, 4);
    free(room);
    free(flat);
}
END_TEST

/* ---- tensors sent in place ------------------------------------------------- */

/* A ref hook that hands out the list's own bytes and counts what it gave
 * and what came back; it fails at call number fail_at (0: never). */
typedef struct {
    const dt_tensor *items;
    int given, released, calls, fail_at;
} ref_count;

static void count_release(void *arg) {
    ((ref_count *)arg)->released++;
}

static int give_ref(void *ctx, int index, dt_rpc_ref *out, dt_err *err) {
    ref_count *rc = ctx;
    if (++rc->calls == rc->fail_at) return dt_err_set(err, DT_ENOMEM, "no snapshot");
    rc->given++;
    *out = (dt_rpc_ref){rc->items[index].data, rc->items[index].nbytes, count_release, rc};
    return 0;
}

/* dt_codec_encode_buf: tensors of DT_CODEC_REF_MIN_BYTES or more from a
 * list with a ref hook go as runs of the caller's memory (a change to it
 * after encoding is in the message: no copy was made), smaller ones are
 * copied; the pieces decode, and flattened they are the bytes
 * dt_codec_encode writes. Every run is released once, when the buffer is
 * released; a failing hook fails the encode and releases what it took. */
START_TEST(test_encode_in_place) {
    enum { BIG = DT_CODEC_REF_MIN_BYTES / 4 + 3 };
    static float big[BIG], big2[BIG];
    for (int i = 0; i < BIG; i++) {
        big[i] = (float)i * 0.25f;
        big2[i] = -(float)i;
    }
    make_tensors();
    dt_tensor items[3] = {t_items[0], t_items[0], t_items[0]};
    snprintf(items[0].name, sizeof items[0].name, "big");
    items[0].ndim = 1;
    items[0].shape[0] = BIG;
    items[0].data = big;
    items[0].nbytes = sizeof big;
    items[2] = items[0];
    snprintf(items[2].name, sizeof items[2].name, "big2");
    items[2].data = big2;
    ref_count counts = {items, 0, 0, 0, 0};
    dt_msg_pull_resp m;
    memset(&m, 0, sizeof m);
    m.global_step = 9;
    m.out = (dt_tensor_list){.items = items, .count = 3, .ref = give_ref, .ref_ctx = &counts};
    dt_rpc_buf b;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_codec_encode_buf(DT_MSG_PULL_RESP, &m, &b, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(counts.given, 2); /* the two big ones; the weight was copied */
    ck_assert_ptr_null(b.data);
    ck_assert_int_ge(b.num_pieces, 4);
    big[7] = 1234.5f; /* after encoding: sent in place, so it is in the message */
    size_t len;
    uint8_t *want = encode_new(DT_MSG_PULL_RESP, &m, &len);
    ck_assert_uint_eq(b.len, len);
    dt_msg_pull_resp d;
    dt_tensor views[4];
    dt_span spans[4];
    memset(&d, 0, sizeof d);
    d.in = (dt_tensor_views){views, 0, 4, spans};
    ck_assert_msg(dt_codec_decode_buf(DT_MSG_PULL_RESP, &b, &d, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(d.in.count, 3);
    ck_assert_ptr_eq(views[0].data, big); /* the run is the caller's memory */
    ck_assert_int_eq(counts.released, 0);
    ck_assert_int_eq(dt_rpc_buf_flatten(&b, &err), 0);
    ck_assert_uint_eq(b.len, len);
    ck_assert(memcmp(b.data, want, len) == 0);
    ck_assert_int_eq(counts.released, 2);
    dt_rpc_buf_release(&b);
    ck_assert_int_eq(counts.released, 2);
    free(want);
    /* Released with the buffer when it is never sent. */
    counts = (ref_count){items, 0, 0, 0, 0};
    ck_assert_int_eq(dt_codec_encode_buf(DT_MSG_PULL_RESP, &m, &b, &err), 0);
    dt_rpc_buf_release(&b);
    ck_assert_int_eq(counts.released, 2);
    /* The second run cannot be had: nothing built, the first released. */
    counts = (ref_count){items, 0, 0, 0, 2};
    dt_err_clear(&err);
    ck_assert_int_eq(dt_codec_encode_buf(DT_MSG_PULL_RESP, &m, &b, &err), DT_ENOMEM);
    ck_assert_msg(strstr(err.msg, "no snapshot") != NULL, "%s", err.msg);
    ck_assert(b.data == NULL && b.len == 0 && b.impl == NULL);
    ck_assert_int_eq(counts.given, 1);
    ck_assert_int_eq(counts.released, 1);
}
END_TEST

/* ---- against nanopb ---------------------------------------------------- */

/* PushRequest and PushResponse are written and read by hand (lib/codec.c);
 * nanopb, from the generated struct and descriptor (test/pbref.c), is the
 * reference: the same bytes for the same values, and each decoder takes
 * the other's bytes to the same values. */

#define DIFF_CAP 8 /* tensors a decoded message may hold here */

/* A random int64 of any magnitude and either sign, never 0. */
static int64_t rand_i64(void) {
    uint64_t v = rng_next() >> (rng_next() % 64);
    if (rng_next() & 1) v = ~v;
    return v ? (int64_t)v : 1;
}

/* A random name of 1..127 bytes: printable ASCII, now and then a two- or
 * three-byte UTF-8 character. */
static void rand_name(char *name) {
    size_t len = 1 + (size_t)(rng_next() % (DT_TENSOR_NAME_MAX - 1)), n = 0;
    if (rng_next() % 4) len = 1 + len % 24; /* mostly short, as a model's are */
    while (n < len) {
        unsigned r = (unsigned)(rng_next() % 40);
        if (r == 0 && len - n >= 2) {
            memcpy(name + n, "\xc3\xa9", 2); /* é */
            n += 2;
        } else if (r == 1 && len - n >= 3) {
            memcpy(name + n, "\xe5\x90\x8d", 3); /* 名 */
            n += 3;
        } else {
            name[n++] = (char)(0x20 + rng_next() % 95);
        }
    }
    name[n] = '\0';
}

static const int diff_dtypes[4] = {DT_DTYPE_F32, DT_DTYPE_F64, DT_DTYPE_I32, DT_DTYPE_I64};

/* count random tensors (0..4 dims of 1..5, random bytes) into items, their
 * bytes in data (room for DIFF_CAP * 5^4 * 8 bytes). */
static void rand_tensors(dt_tensor *items, int count, uint8_t *data) {
    for (int i = 0; i < count; i++) {
        dt_tensor *t = &items[i];
        memset(t, 0, sizeof *t);
        rand_name(t->name);
        t->dtype = diff_dtypes[rng_next() % 4];
        t->ndim = (int)(rng_next() % 5);
        size_t nbytes = dt_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++) {
            t->shape[d] = 1 + (int64_t)(rng_next() % 5);
            nbytes *= (size_t)t->shape[d];
        }
        for (size_t b = 0; b < nbytes; b++)
            data[b] = (uint8_t)(rng_next() >> 56);
        t->data = data;
        t->nbytes = nbytes;
        data += nbytes;
    }
}

/* Decode storage for a push message of either type. */
typedef struct {
    dt_test_any_msg m;
    dt_tensor views[3][DIFF_CAP]; /* a request's gradients, sparse_ids, sparse_grads */
    dt_span spans[3][DIFF_CAP];
} diff_slot;

static void *diff_prepare(dt_msg_type type, diff_slot *s, int with_spans) {
    memset(s, 0, sizeof *s);
    dt_tensor_views v[3];
    for (int i = 0; i < 3; i++)
        v[i] = (dt_tensor_views){s->views[i], 0, DIFF_CAP, with_spans ? s->spans[i] : NULL};
    if (type == DT_MSG_PUSH_REQ) {
        s->m.push_req.in = v[0];
        s->m.push_req.sparse_ids_in = v[1];
        s->m.push_req.sparse_grads_in = v[2];
        return &s->m.push_req;
    }
    s->m.push_resp.in = v[0];
    return &s->m.push_resp;
}

/* The fields of each message this test sets: the scalars, then the
 * repeated tensors. A field nanopb's descriptor has and this list lacks
 * fails test_diff_covers_every_field. */
static const uint32_t push_req_numbers[] = {1, 2, 4, 5, 6, 7, 3, 8, 9};
static const uint32_t push_resp_numbers[] = {1, 2, 3, 4, 6, 5};

/* Up to 4 random tensors into items (4) and data (4 * 5^4 * 8 bytes). */
static dt_tensor_list rand_list(dt_tensor *items, uint8_t *data) {
    int count = 1 + (int)(rng_next() % 4);
    rand_tensors(items, count, data);
    return (dt_tensor_list){.items = items, .count = count};
}

#define DIFF_LIST_BYTES (4 * 625 * 8)

/* A random message of type with every field away from its default but
 * `skip` (a field number; 0: none), tensors in items (12) and data (3
 * DIFF_LIST_BYTES). */
static void rand_push(dt_msg_type type, uint32_t skip, void *msg, dt_tensor *items, uint8_t *data) {
    dt_tensor_list out = rand_list(items, data);
    if (type == DT_MSG_PUSH_REQ) {
        dt_msg_push_req *m = msg;
        memset(m, 0, sizeof *m);
        m->worker = (int32_t)rand_i64();
        if (m->worker == 0) m->worker = -1;
        m->step = rand_i64();
        m->seen_step = rand_i64();
        m->pull = true;
        m->min_global_step = rand_i64();
        m->push_id = (uint64_t)rand_i64();
        m->out = out;
        m->sparse_ids_out = rand_list(items + 4, data + DIFF_LIST_BYTES);
        m->sparse_grads_out = rand_list(items + 8, data + 2 * DIFF_LIST_BYTES);
        switch (skip) {
        case 1: m->worker = 0; break;
        case 2: m->step = 0; break;
        case 3: m->out.count = 0; break;
        case 4: m->seen_step = 0; break;
        case 5: m->pull = false; break;
        case 6: m->min_global_step = 0; break;
        case 7: m->push_id = 0; break;
        case 8: m->sparse_ids_out.count = 0; break;
        case 9: m->sparse_grads_out.count = 0; break;
        default: break;
        }
        return;
    }
    dt_msg_push_resp *m = msg;
    memset(m, 0, sizeof *m);
    m->incarnation = (uint64_t)rand_i64();
    m->global_step = rand_i64();
    m->done = true;
    m->dropped = true;
    m->out = out;
    m->wait = true;
    switch (skip) {
    case 1: m->incarnation = 0; break;
    case 2: m->global_step = 0; break;
    case 3: m->done = false; break;
    case 4: m->dropped = false; break;
    case 5: m->out.count = 0; break;
    case 6: m->wait = false; break;
    default: break;
    }
}

/* Both decoders on the len bytes at in (an exact heap copy): the same
 * verdict, and on success the same values; the hand-written one also in
 * pieces of 1..7 bytes. Returns the verdict. */
static int decode_both(dt_msg_type type, const uint8_t *in, size_t len) {
    static diff_slot hand, ref, cut;
    void *h = diff_prepare(type, &hand, 0), *r = diff_prepare(type, &ref, 0);
    dt_err he, re;
    dt_err_clear(&he);
    dt_err_clear(&re);
    int hrc = dt_codec_decode(type, in, len, h, &he);
    int rrc = dt_test_pb_decode(type, in, len, r, &re);
    ck_assert_msg((hrc == 0) == (rrc == 0), "type %d, %zu bytes: by hand %d (%s), nanopb %d (%s)",
                  (int)type, len, hrc, he.msg, rrc, re.msg);
    if (hrc < 0) return hrc;
    char why[256];
    ck_assert_msg(dt_test_push_same(type, h, r, why, sizeof why) == 0, "by hand vs nanopb: %s",
                  why);
    dt_rpc_buf b;
    dt_test_in_pieces(in, len, len * 31 + 7, &b);
    void *c = diff_prepare(type, &cut, 1);
    ck_assert_msg(dt_codec_decode_buf(type, &b, c, &he) == 0, "in pieces: %s", he.msg);
    ck_assert_msg(dt_test_push_same(type, c, r, why, sizeof why) == 0, "in pieces vs nanopb: %s",
                  why);
    dt_rpc_buf_release(&b);
    return 0;
}

static void diff_random(dt_msg_type type, const uint32_t *numbers, int nfields) {
    static uint8_t data[3 * DIFF_LIST_BYTES];
    dt_tensor items[12];
    dt_test_any_msg m;
    for (int iter = 0; iter < 3000; iter++) {
        /* Every field set, then each left at its default in turn. */
        uint32_t skip = iter % (nfields + 1) == 0 ? 0 : numbers[iter % (nfields + 1) - 1];
        rand_push(type, skip, &m, items, data);
        size_t hand_len, ref_len;
        uint8_t *hand = encode_new(type, &m, &hand_len), *ref = NULL;
        dt_err err;
        dt_err_clear(&err);
        ck_assert_msg(dt_test_pb_encode(type, &m, &ref, &ref_len, &err) == 0, "%s", err.msg);
        ck_assert_msg(hand_len == ref_len && memcmp(hand, ref, ref_len) == 0,
                      "iteration %d (field %u default): %zu bytes by hand, nanopb's %zu differ",
                      iter, skip, hand_len, ref_len);
        /* nanopb's bytes read by hand, and by nanopb, give what was sent. */
        uint8_t *in = copy_exact(ref, ref_len);
        diff_slot got;
        void *g = diff_prepare(type, &got, 0);
        ck_assert_msg(dt_codec_decode(type, in, ref_len, g, &err) == 0, "%s", err.msg);
        char why[256];
        ck_assert_msg(dt_test_push_same_as_sent(type, &m, g, why, sizeof why) == 0,
                      "iteration %d: by hand: %s", iter, why);
        g = diff_prepare(type, &got, 0);
        ck_assert_msg(dt_test_pb_decode(type, in, ref_len, g, &err) == 0, "%s", err.msg);
        ck_assert_msg(dt_test_push_same_as_sent(type, &m, g, why, sizeof why) == 0,
                      "iteration %d: nanopb: %s", iter, why);
        ck_assert_int_eq(decode_both(type, in, ref_len), 0);
        free(in);
        free(hand);
        free(ref);
    }
}

START_TEST(test_diff_push_req) {
    rng_state = 0x243F6A8885A308D3ull;
    diff_random(DT_MSG_PUSH_REQ, push_req_numbers, 9);
}
END_TEST

START_TEST(test_diff_push_resp) {
    rng_state = 0x13198A2E03707344ull;
    diff_random(DT_MSG_PUSH_RESP, push_resp_numbers, 6);
}
END_TEST

/* The test above sets every field nanopb's descriptor has (a field added
 * to the .proto fails here until the test sets it too); and each field,
 * alone away from its default in nanopb's bytes, survives a decode and
 * re-encode by hand: a field the hand-written codec did not know would be
 * skipped on reading and missing from the bytes written. */
START_TEST(test_diff_covers_every_field) {
    const dt_msg_type types[2] = {DT_MSG_PUSH_REQ, DT_MSG_PUSH_RESP};
    const uint32_t *known[2] = {push_req_numbers, push_resp_numbers};
    const int nknown[2] = {9, 6};
    for (int k = 0; k < 2; k++) {
        dt_msg_type type = types[k];
        uint32_t numbers[64];
        int n = dt_test_pb_fields(type, numbers, 64);
        ck_assert_int_le(n, 64);
        ck_assert_msg(n == nknown[k], "type %d: nanopb has %d fields, this test sets %d", (int)type,
                      n, nknown[k]);
        for (int i = 0; i < n; i++) {
            int found = 0;
            for (int j = 0; j < nknown[k]; j++)
                found |= known[k][j] == numbers[i];
            ck_assert_msg(found, "type %d: field %u is not set by test_diff_push_*", (int)type,
                          numbers[i]);
        }
        for (int i = 0;; i++) {
            uint32_t number = 0;
            uint8_t *ref = NULL;
            size_t len = 0;
            dt_err err;
            dt_err_clear(&err);
            int rc = dt_test_pb_encode_one(type, i, &number, &ref, &len, &err);
            if (rc == 1) {
                ck_assert_int_eq(i, n);
                break;
            }
            ck_assert_msg(rc == 0, "field %u: %s", number, err.msg);
            ck_assert_uint_gt(len, 0);
            uint8_t *in = copy_exact(ref, len);
            diff_slot got;
            void *g = diff_prepare(type, &got, 0);
            ck_assert_msg(dt_codec_decode(type, in, len, g, &err) == 0,
                          "type %d field %u: the hand-written decoder refuses nanopb's bytes: %s",
                          (int)type, number, err.msg);
            if (type == DT_MSG_PUSH_REQ) {
                dt_msg_push_req *q = &got.m.push_req;
                q->out = (dt_tensor_list){.items = got.views[0], .count = q->in.count};
                q->sparse_ids_out =
                    (dt_tensor_list){.items = got.views[1], .count = q->sparse_ids_in.count};
                q->sparse_grads_out =
                    (dt_tensor_list){.items = got.views[2], .count = q->sparse_grads_in.count};
            } else {
                got.m.push_resp.out =
                    (dt_tensor_list){.items = got.views[0], .count = got.m.push_resp.in.count};
            }
            size_t hand_len;
            uint8_t *hand = encode_new(type, g, &hand_len);
            ck_assert_msg(hand_len == len && memcmp(hand, ref, len) == 0,
                          "type %d field %u: read and written again by hand it is lost (%zu "
                          "bytes of %zu): add it to lib/codec.c's hand-written tables",
                          (int)type, number, hand_len, len);
            free(hand);
            free(in);
            free(ref);
        }
    }
}
END_TEST

/* Mutated nanopb bytes of random messages: both decoders accept or both
 * refuse, and what they accept is the same. */
START_TEST(test_diff_mutations) {
    rng_state = 0xA4093822299F31D0ull;
    static uint8_t data[3 * DIFF_LIST_BYTES];
    dt_tensor items[12];
    dt_test_any_msg m;
    int accepted = 0;
    for (int iter = 0; iter < 4000; iter++) {
        dt_msg_type type = iter % 2 ? DT_MSG_PUSH_RESP : DT_MSG_PUSH_REQ;
        rand_push(type, (uint32_t)(rng_next() % 8), &m, items, data);
        uint8_t *ref = NULL;
        size_t len;
        dt_err err;
        dt_err_clear(&err);
        ck_assert_msg(dt_test_pb_encode(type, &m, &ref, &len, &err) == 0, "%s", err.msg);
        len = mutate(ref, len, 3, 4);
        uint8_t *in = copy_exact(ref, len);
        if (decode_both(type, in, len) == 0) accepted++;
        free(in);
        free(ref);
    }
    /* Some mutations leave a valid message (a flipped data byte). */
    ck_assert_int_gt(accepted, 100);
}
END_TEST

Suite *codec_suite(void) {
    Suite *s = suite_create("codec");
    TCase *tc = tcase_create("roundtrip");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_roundtrip_create_req);
    tcase_add_test(tc, test_optimizer_by_name);
    tcase_add_test(tc, test_choice_names_refused);
    tcase_add_test(tc, test_roundtrip_create_resp);
    tcase_add_test(tc, test_roundtrip_pull_req);
    tcase_add_test(tc, test_roundtrip_pull_resp);
    tcase_add_test(tc, test_roundtrip_push_req);
    tcase_add_test(tc, test_roundtrip_push_resp);
    tcase_add_test(tc, test_roundtrip_status);
    tcase_add_test(tc, test_roundtrip_shutdown);
    tcase_add_test(tc, test_roundtrip_zero_values);
    tcase_add_test(tc, test_size_is_exact);
    tcase_add_test(tc, test_methods_and_types);
    tcase_add_test(tc, test_lock_callback_pairs);
    tcase_add_test(tc, test_wire_format_by_hand);
    tcase_add_test(tc, test_wire_sparse_push_by_hand);
    tcase_add_test(tc, test_roundtrip_sparse);
    suite_add_tcase(s, tc);

    TCase *bad = tcase_create("bad_bytes");
    tcase_set_timeout(bad, 60);
    tcase_add_test(bad, test_bad_data_length);
    tcase_add_test(bad, test_bad_dtype);
    tcase_add_test(bad, test_bad_shape);
    tcase_add_test(bad, test_bad_names);
    tcase_add_test(bad, test_too_many_tensors);
    tcase_add_test(bad, test_bad_encode_input);
    tcase_add_test(bad, test_truncation_every_offset);
    tcase_add_test(bad, test_fuzz_random_bytes);
    tcase_add_test(bad, test_data_wrong_wire_type);
    tcase_add_test(bad, test_fuzz_mutations);
    suite_add_tcase(s, bad);

    TCase *pieces = tcase_create("pieces");
    tcase_set_timeout(pieces, 30);
    tcase_add_test(pieces, test_decode_in_pieces);
    tcase_add_test(pieces, test_decode_pieces_need_spans);
    tcase_add_test(pieces, test_decode_unaligned);
    tcase_add_test(pieces, test_encode_in_place);
    suite_add_tcase(s, pieces);

    TCase *diff = tcase_create("nanopb");
    tcase_set_timeout(diff, 60);
    tcase_add_test(diff, test_diff_push_req);
    tcase_add_test(diff, test_diff_push_resp);
    tcase_add_test(diff, test_diff_covers_every_field);
    tcase_add_test(diff, test_diff_mutations);
    suite_add_tcase(s, diff);
    return s;
}
