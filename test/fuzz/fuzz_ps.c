/*
 * Fuzz target: the ps's request handlers themselves (dt_ps_call, the path a
 * gRPC call takes after the server's checks), on an in-process ps with no
 * port. The input is a run of calls, each: an op byte (Create, Pull, Push,
 * Status, Shutdown, SparsePull, SparseExport or SparseImport with raw
 * bytes, or a valid Push with fuzzed values, seen_step, sparse ids and rows
 * of the model's table and one flipped byte), a caller byte (anonymous,
 * chief, worker:1, tool) and, for raw ops, a length byte and that many
 * bytes: fuzz_ps.h has the layout, which the seed writer shares.
 * The first byte chooses whether the chief created the model first.
 * Requests longer than 8 bytes reach the handlers in pieces of 1 to 8
 * bytes (lengths drawn from their bytes), as gRPC hands over a message it
 * read in several chunks, so the handlers read them in place.
 *
 * Beyond "no crash, no sanitizer report", after every call:
 *  - the global step never goes down;
 *  - with the chief's model: the step moves by exactly the pushes applied
 *    (no claim, name or size moves it), and a refused call, or any call but
 *    an applied push, leaves every variable and slot byte as it was, and
 *    every row of the table (ids, values and slots, as exported).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../pieces.h"
#include "codec.h"
#include "fuzz_ps.h"
#include "optim.h"
#include "ps.h"
#include "rpc_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_ps: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);      \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define SNAP_MAX 65536 /* bytes of variables, slots and table rows: the model here is tiny */
#define TABLE_ROWS FUZZ_PS_TABLE_ROWS

static const char *const methods[] = {
    DT_METHOD_CREATE,   DT_METHOD_PULL,        DT_METHOD_PUSH,          DT_METHOD_STATUS,
    DT_METHOD_SHUTDOWN, DT_METHOD_SPARSE_PULL, DT_METHOD_SPARSE_EXPORT, DT_METHOD_SPARSE_IMPORT};
static const dt_msg_type types[] = {DT_MSG_CREATE_REQ,        DT_MSG_PULL_REQ,
                                    DT_MSG_PUSH_REQ,          DT_MSG_STATUS_REQ,
                                    DT_MSG_SHUTDOWN_REQ,      DT_MSG_SPARSE_PULL_REQ,
                                    DT_MSG_SPARSE_EXPORT_REQ, DT_MSG_SPARSE_IMPORT_REQ};
#define NUM_RAW_OPS FUZZ_PS_FUZZED_PUSH
_Static_assert(sizeof methods / sizeof methods[0] == NUM_RAW_OPS, "a method per raw op");
_Static_assert(sizeof types / sizeof types[0] == NUM_RAW_OPS, "a message type per raw op");

static int call(dt_ps *ps, int op, const dt_rpc_peer *peer, const void *bytes, size_t n,
                dt_rpc_buf *reply) {
    dt_rpc_buf req = {0};
    dt_err err;
    dt_err_clear(&err);
    if (n > 8) {
        dt_piece pieces[1024];
        const uint8_t *b = bytes;
        uint64_t h = 14695981039346656037ull;
        for (size_t i = 0; i < n; i++)
            h = (h ^ b[i]) * 1099511628211ull;
        CHECK(n <= sizeof pieces / sizeof pieces[0]);
        int k = dt_test_cut(b, n, h, 8, pieces);
        if (dt_rpc_buf_received(&req, pieces, k, &err) < 0) abort();
    } else {
        if (dt_rpc_buf_alloc(&req, n, &err) < 0) abort();
        if (n) memcpy(req.data, bytes, n);
    }
    int rc = dt_ps_call(ps, methods[op], peer, &req, reply, &err);
    CHECK(rc == 0 || (err.code == rc && err.msg[0])); /* a refusal always says why */
    dt_rpc_buf_release(&req);
    return rc;
}

static int encode_call(dt_ps *ps, int op, const dt_rpc_peer *peer, const void *msg, int flip_at,
                       uint8_t flip, dt_rpc_buf *reply) {
    uint8_t buf[1024];
    dt_err err;
    dt_err_clear(&err);
    int64_t n = dt_codec_size(types[op], msg, &err);
    CHECK(n >= 0 && n <= (int64_t)sizeof buf);
    CHECK(dt_codec_encode(types[op], msg, buf, (size_t)n, &err) == 0);
    if (flip_at >= 0 && n > 0) buf[flip_at % n] ^= flip;
    return call(ps, op, peer, buf, (size_t)n, reply);
}

typedef struct {
    int64_t step, applied;
    int ready;
    size_t len;
    uint8_t bytes[SNAP_MAX];
} snapshot;

static void take(dt_ps *ps, snapshot *s) {
    static const dt_rpc_peer anyone = {DT_PEER_ANY, -1, 0, "anonymous"};
    dt_rpc_buf reply;
    dt_msg_status_req sq = {.worker = -1};
    CHECK(encode_call(ps, FUZZ_PS_STATUS, &anyone, &sq, -1, 0, &reply) == 0);
    dt_msg_status_resp st;
    dt_err err;
    dt_err_clear(&err);
    CHECK(dt_codec_decode(DT_MSG_STATUS_RESP, reply.data, reply.len, &st, &err) == 0);
    dt_rpc_buf_release(&reply);
    s->step = st.global_step;
    s->applied = st.pushes_applied;
    s->ready = st.ready;
    s->len = 0;
    if (!s->ready) return;
    dt_msg_pull_req pq = {.worker = -1, .include_slots = true};
    CHECK(encode_call(ps, FUZZ_PS_PULL, &anyone, &pq, -1, 0, &reply) == 0);
    dt_tensor in[16], slots[32];
    dt_msg_pull_resp pr;
    memset(&pr, 0, sizeof pr);
    pr.in.items = in;
    pr.in.cap = 16;
    pr.slots_in.items = slots;
    pr.slots_in.cap = 32;
    CHECK(dt_codec_decode(DT_MSG_PULL_RESP, reply.data, reply.len, &pr, &err) == 0);
    for (int i = 0; i < pr.in.count + pr.slots_in.count; i++) {
        const dt_tensor *t = i < pr.in.count ? &in[i] : &slots[i - pr.in.count];
        CHECK(s->len + t->nbytes <= SNAP_MAX);
        memcpy(s->bytes + s->len, t->data, t->nbytes);
        s->len += t->nbytes;
    }
    dt_rpc_buf_release(&reply);
    /* The table's rows, all in one page (it holds at most TABLE_ROWS). */
    static const dt_rpc_peer chief = {DT_PEER_CHIEF, 0, 1, "chief"};
    dt_msg_sparse_export_req eq = {"t", -1, TABLE_ROWS, true};
    CHECK(encode_call(ps, FUZZ_PS_SPARSE_EXPORT, &chief, &eq, -1, 0, &reply) == 0);
    dt_msg_sparse_export_resp er;
    memset(&er, 0, sizeof er);
    er.in.items = in;
    er.in.cap = 16;
    CHECK(dt_codec_decode_buf(DT_MSG_SPARSE_EXPORT_RESP, &reply, &er, &err) == 0);
    CHECK(!er.more);
    for (int i = 0; i < er.in.count; i++) {
        CHECK(s->len + in[i].nbytes <= SNAP_MAX);
        memcpy(s->bytes + s->len, in[i].data, in[i].nbytes);
        s->len += in[i].nbytes;
    }
    dt_rpc_buf_release(&reply);
}

/* The chief's model: w (2, 3) and b (3), momentum (so slots change too). */
static void tensors(dt_tensor t[2], float *w, float *b) {
    memset(t, 0, 2 * sizeof *t);
    strcpy(t[0].name, "w");
    t[0].dtype = DT_DTYPE_F32, t[0].ndim = 2, t[0].shape[0] = 2, t[0].shape[1] = 3;
    t[0].data = w, t[0].nbytes = 24;
    strcpy(t[1].name, "b");
    t[1].dtype = DT_DTYPE_F32, t[1].ndim = 1, t[1].shape[0] = 3;
    t[1].data = b, t[1].nbytes = 12;
}

static void create_model(dt_ps *ps) {
    static const dt_rpc_peer chief = {DT_PEER_CHIEF, 0, 1, "chief"};
    float w[6] = {1, 2, 3, 4, 5, 6}, b[3] = {-1, 0, 1};
    dt_tensor t[2];
    tensors(t, w, b);
    dt_msg_create_req req;
    memset(&req, 0, sizeof req);
    req.out.items = t;
    req.out.count = 2;
    req.global_step = 7;
    req.max_steps = 1000000000;
    dt_optim_defaults(&req.optim);
    req.optim.kind = DT_OPTIM_MOMENTUM;
    req.optim.learning_rate = 0.5;
    req.optim.momentum = 0.9;
    strcpy(req.model, "fuzz");
    req.num_tables = 1;
    req.tables[0] = (dt_msg_table){"t", TABLE_ROWS, 2, DT_TABLE_INIT_NORMAL, 0.1, 3};
    dt_rpc_buf reply;
    CHECK(encode_call(ps, FUZZ_PS_CREATE, &chief, &req, -1, 0, &reply) == 0);
    dt_rpc_buf_release(&reply);
}

#define FUZZED_PUSH_BYTES FUZZ_PS_PUSH_BYTES

/* A valid Push from the input's bytes: gradient values, step, seen_step,
 * two ids of the table (in the order given, up to 20% past its end) and
 * their rows. */
static int fuzzed_push(dt_ps *ps, const dt_rpc_peer *peer, const uint8_t *p, size_t n) {
    uint8_t raw[FUZZED_PUSH_BYTES] = {0};
    memcpy(raw, p, n < sizeof raw ? n : sizeof raw);
    float g[9], rows[4];
    memcpy(g, raw + FUZZ_PS_PUSH_GRADS, sizeof g);
    dt_tensor t[4];
    tensors(t, g, g + 6);
    dt_msg_push_req req;
    memset(&req, 0, sizeof req);
    req.worker = peer->task;
    memcpy(&req.step, raw + FUZZ_PS_PUSH_STEP, 8);
    memcpy(&req.seen_step, raw + FUZZ_PS_PUSH_SEEN, 8);
    req.out.items = t;
    req.out.count = 2;
    int64_t ids[2];
    uint16_t id16[2];
    memcpy(id16, raw + FUZZ_PS_PUSH_IDS, sizeof id16);
    for (int k = 0; k < 2; k++)
        ids[k] = id16[k] % (TABLE_ROWS + TABLE_ROWS / 5);
    memcpy(rows, raw + FUZZ_PS_PUSH_ROWS, sizeof rows);
    memset(t + 2, 0, 2 * sizeof *t);
    strcpy(t[2].name, "t");
    t[2].dtype = DT_DTYPE_I64, t[2].ndim = 1, t[2].shape[0] = 2;
    t[2].data = ids, t[2].nbytes = sizeof ids;
    strcpy(t[3].name, "t");
    t[3].dtype = DT_DTYPE_F32, t[3].ndim = 2, t[3].shape[0] = 2, t[3].shape[1] = 2;
    t[3].data = rows, t[3].nbytes = sizeof rows;
    req.sparse_ids_out.items = t + 2;
    req.sparse_ids_out.count = 1;
    req.sparse_grads_out.items = t + 3;
    req.sparse_grads_out.count = 1;
    dt_rpc_buf reply;
    int flip_at = raw[FUZZ_PS_PUSH_FLIP] ? raw[FUZZ_PS_PUSH_FLIP_AT] : -1;
    int rc = encode_call(ps, FUZZ_PS_PUSH, peer, &req, flip_at, raw[FUZZ_PS_PUSH_FLIP], &reply);
    dt_rpc_buf_release(&reply);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const dt_rpc_peer peers[] = {{DT_PEER_ANY, -1, 0, "anonymous"},
                                        {DT_PEER_CHIEF, 0, 1, "chief"},
                                        {DT_PEER_WORKER, 1, 1, "worker:1"},
                                        {DT_PEER_TOOL, -1, 1, "tool"}};
    static int initialized;
    if (!initialized) {
        dt_rpc_init();
        initialized = 1;
    }
    if (size == 0) return 0;
    dt_addr ps_addr = {0}, worker_addr[2] = {{0}, {0}};
    snprintf(ps_addr.addr, sizeof ps_addr.addr, "127.0.0.1:1");
    dt_cluster cluster = {.num_ps = 1, .ps = &ps_addr, .num_workers = 2, .workers = worker_addr};
    dt_ps_params params = {.cluster = &cluster, .num_threads = 1, .no_server = 1};
    dt_ps *ps = NULL;
    dt_err err;
    dt_err_clear(&err);
    CHECK(dt_ps_start(&params, &ps, &err) == 0);
    int chiefs_model = (data[0] & 1) == 0;
    if (chiefs_model) create_model(ps);
    snapshot *before = malloc(sizeof *before), *after = malloc(sizeof *after);
    CHECK(before && after);
    take(ps, before);
    size_t i = 1;
    while (i + 2 <= size) {
        int op = data[i] % FUZZ_PS_OPS;
        const dt_rpc_peer *peer = &peers[data[i + 1] % 4];
        i += 2;
        dt_rpc_buf reply = {0};
        int rc;
        if (op == NUM_RAW_OPS) {
            size_t n = size - i < FUZZED_PUSH_BYTES ? size - i : FUZZED_PUSH_BYTES;
            rc = fuzzed_push(ps, peer, data + i, n);
            i += n;
        } else {
            size_t n = i < size ? data[i++] : 0;
            if (n > size - i) n = size - i;
            rc = call(ps, op, peer, data + i, n, &reply);
            dt_rpc_buf_release(&reply);
            i += n;
        }
        take(ps, after);
        CHECK(after->step >= before->step);
        if (chiefs_model) {
            int64_t pushes = after->applied - before->applied;
            CHECK(after->step - before->step == pushes);
            int may_change = rc == 0 && (op == FUZZ_PS_PUSH || op == NUM_RAW_OPS) && pushes > 0;
            if (!may_change)
                CHECK(after->len == before->len &&
                      memcmp(after->bytes, before->bytes, before->len) == 0);
        }
        snapshot *t = before;
        before = after;
        after = t;
    }
    free(before);
    free(after);
    dt_ps_free(ps);
    return 0;
}
