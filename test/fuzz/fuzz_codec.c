/*
 * Fuzz target: dt_codec_decode on every RPC message type. The first input
 * byte picks the type (modulo DT_MSG_COUNT), the rest is the wire message.
 *
 * Beyond "no crash, no sanitizer report":
 *  - a failed decode sets a negative code and a message;
 *  - every decoded tensor view lies inside the input, has a valid spec
 *    (name, dtype, 0..4 dims) and exactly numel * dtype-size bytes;
 *  - what decodes re-encodes (sized exactly) and decodes again to the same
 *    message: names, dtypes, shapes, bytes and every scalar field;
 *  - the input received in pieces of 1 to 16 bytes (a real gRPC byte buffer
 *    read in place, lengths drawn from the input itself) decodes exactly as
 *    in one run: the same code and message, or the same message fields and
 *    tensor bytes, read through their spans;
 *  - a PushRequest or PushResponse (written and read by hand in lib/codec.c)
 *    decodes as nanopb decodes it (test/pbref.c, from the generated
 *    descriptors): both accept or both refuse, and what they accept holds
 *    the same values, every scalar field and tensor.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../pbref.h"
#include "../pieces.h"
#include "anymsg.h"
#include "codec.h"
#include "optim.h"
#include "tensor.h"

#define CAP 64 /* tensors (and names) a message may carry here */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_codec: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Storage a decoded message may point into. */
typedef struct {
    dt_tensor in[CAP];
    dt_tensor slots[CAP];
    dt_span in_spans[CAP];
    dt_span slot_spans[CAP];
    char names[CAP][DT_TENSOR_NAME_MAX];
    const char *name_ptrs[CAP];
    dt_test_any_msg m;
} slot;

static slot first, second, cut, ref;

/* Zeroes s and points the message's decode storage at it. */
static void prepare(dt_msg_type type, slot *s) {
    memset(s, 0, sizeof *s);
    switch (type) {
    case DT_MSG_CREATE_REQ:
        s->m.create_req.in = (dt_tensor_views){s->in, 0, CAP, s->in_spans};
        s->m.create_req.slots_in = (dt_tensor_views){s->slots, 0, CAP, s->slot_spans};
        break;
    case DT_MSG_PULL_REQ:
        s->m.pull_req.names.items = s->names;
        s->m.pull_req.names.cap = CAP;
        break;
    case DT_MSG_PULL_RESP:
        s->m.pull_resp.in = (dt_tensor_views){s->in, 0, CAP, s->in_spans};
        s->m.pull_resp.slots_in = (dt_tensor_views){s->slots, 0, CAP, s->slot_spans};
        break;
    case DT_MSG_PUSH_REQ:
        s->m.push_req.in = (dt_tensor_views){s->in, 0, CAP, s->in_spans};
        s->m.push_req.sparse_ids_in = (dt_tensor_views){s->slots, 0, CAP / 2, s->slot_spans};
        s->m.push_req.sparse_grads_in =
            (dt_tensor_views){s->slots + CAP / 2, 0, CAP - CAP / 2, s->slot_spans + CAP / 2};
        break;
    case DT_MSG_SPARSE_PULL_REQ:
        s->m.sparse_pull_req.ids_in = (dt_tensor_views){s->in, 0, 1, s->in_spans};
        break;
    case DT_MSG_SPARSE_PULL_RESP:
        s->m.sparse_pull_resp.values_in = (dt_tensor_views){s->in, 0, 1, s->in_spans};
        break;
    case DT_MSG_SPARSE_EXPORT_RESP:
        s->m.sparse_export_resp.in = (dt_tensor_views){s->in, 0, CAP, s->in_spans};
        break;
    case DT_MSG_SPARSE_IMPORT_REQ:
        s->m.sparse_import_req.in = (dt_tensor_views){s->in, 0, CAP, s->in_spans};
        break;
    case DT_MSG_PUSH_RESP: s->m.push_resp.in = (dt_tensor_views){s->in, 0, CAP, s->in_spans}; break;
    default: break;
    }
}

/* The hand-written decoder (rc, first) and nanopb's agree on msg. */
static void same_as_nanopb(dt_msg_type type, const uint8_t *msg, size_t len, int rc) {
    if (type != DT_MSG_PUSH_REQ && type != DT_MSG_PUSH_RESP) return;
    prepare(type, &ref);
    dt_err err;
    dt_err_clear(&err);
    int ref_rc = dt_test_pb_decode(type, msg, len, &ref.m, &err);
    if ((rc == 0) != (ref_rc == 0)) {
        fprintf(stderr, "fuzz_codec: by hand %d, nanopb %d (%s)\n", rc, ref_rc, err.msg);
        abort();
    }
    char why[256];
    if (rc == 0 && dt_test_push_same(type, &first.m, &ref.m, why, sizeof why) < 0) {
        fprintf(stderr, "fuzz_codec: by hand and nanopb differ: %s\n", why);
        abort();
    }
}

/* A decoded view: a valid spec whose bytes lie inside [buf, buf + len). */
static void check_views(const dt_tensor_views *v, const uint8_t *buf, size_t len) {
    CHECK(v->count >= 0 && v->count <= v->cap);
    for (int i = 0; i < v->count; i++) {
        const dt_tensor *t = &v->items[i];
        CHECK(memchr(t->name, '\0', sizeof t->name) != NULL);
        dt_tensor spec = *t;
        spec.data = NULL;
        CHECK(dt_tensor_check_spec(&spec, NULL) == 0);
        CHECK(spec.nbytes == t->nbytes);
        CHECK(t->nbytes == (size_t)dt_tensor_numel(t) * dt_dtype_size(t->dtype));
        const uint8_t *p = t->data;
        CHECK(p != NULL && p >= buf && t->nbytes <= len && p <= buf + len - t->nbytes);
    }
}

static void same_message(dt_msg_type type, const slot *a, const slot *b);

/* Tensor bytes of either form (a view, or a span across pieces) compared
 * through copies. */
static void same_views(const dt_tensor_views *a, const dt_tensor_views *b) {
    CHECK(a->count == b->count);
    for (int i = 0; i < a->count; i++) {
        const dt_tensor *x = &a->items[i], *y = &b->items[i];
        CHECK(strcmp(x->name, y->name) == 0);
        CHECK(x->dtype == y->dtype && x->ndim == y->ndim && x->nbytes == y->nbytes);
        CHECK(memcmp(x->shape, y->shape, sizeof(int64_t) * (size_t)x->ndim) == 0);
        uint8_t *u = malloc(x->nbytes), *v = malloc(x->nbytes);
        CHECK(u != NULL && v != NULL);
        dt_codec_view_copy(a, i, u);
        dt_codec_view_copy(b, i, v);
        CHECK(memcmp(u, v, x->nbytes) == 0);
        free(u);
        free(v);
    }
}

/* The input received in pieces of 1..16 bytes, their lengths drawn from
 * the input: decodes as it did in one run (rc, err, message). */
static void decode_in_pieces(dt_msg_type type, const uint8_t *msg, size_t len, int flat_rc,
                             const dt_err *flat_err) {
    dt_piece *pieces = calloc(len ? len : 1, sizeof *pieces);
    CHECK(pieces != NULL);
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ msg[i]) * 1099511628211ull;
    int n = dt_test_cut(msg, len, h, 16, pieces);
    dt_rpc_buf b;
    dt_err err;
    dt_err_clear(&err);
    CHECK(dt_rpc_buf_received(&b, pieces, n, &err) == 0);
    free(pieces);
    prepare(type, &cut);
    int rc = dt_codec_decode_buf(type, &b, &cut.m, &err);
    CHECK(rc == flat_rc);
    if (rc < 0)
        CHECK(strcmp(err.msg, flat_err->msg) == 0);
    else
        same_message(type, &first, &cut);
    dt_rpc_buf_release(&b);
}

static dt_tensor_list as_list(const dt_tensor_views *v) {
    return (dt_tensor_list){.items = v->items, .count = v->count};
}

/* Turns the decoded (`in`) side of s into the encoding (`out`) side. */
static void to_out(dt_msg_type type, slot *s) {
    switch (type) {
    case DT_MSG_CREATE_REQ:
        s->m.create_req.out = as_list(&s->m.create_req.in);
        s->m.create_req.slots_out = as_list(&s->m.create_req.slots_in);
        break;
    case DT_MSG_PULL_REQ:
        for (int i = 0; i < s->m.pull_req.names.count; i++)
            s->name_ptrs[i] = s->names[i];
        s->m.pull_req.out_names = s->name_ptrs;
        s->m.pull_req.out_count = s->m.pull_req.names.count;
        break;
    case DT_MSG_PULL_RESP:
        s->m.pull_resp.out = as_list(&s->m.pull_resp.in);
        s->m.pull_resp.slots_out = as_list(&s->m.pull_resp.slots_in);
        break;
    case DT_MSG_PUSH_REQ:
        s->m.push_req.out = as_list(&s->m.push_req.in);
        s->m.push_req.sparse_ids_out = as_list(&s->m.push_req.sparse_ids_in);
        s->m.push_req.sparse_grads_out = as_list(&s->m.push_req.sparse_grads_in);
        break;
    case DT_MSG_SPARSE_PULL_REQ:
        s->m.sparse_pull_req.ids_out = as_list(&s->m.sparse_pull_req.ids_in);
        break;
    case DT_MSG_SPARSE_PULL_RESP:
        s->m.sparse_pull_resp.values_out = as_list(&s->m.sparse_pull_resp.values_in);
        break;
    case DT_MSG_SPARSE_EXPORT_RESP:
        s->m.sparse_export_resp.out = as_list(&s->m.sparse_export_resp.in);
        break;
    case DT_MSG_SPARSE_IMPORT_REQ:
        s->m.sparse_import_req.out = as_list(&s->m.sparse_import_req.in);
        break;
    case DT_MSG_PUSH_RESP: s->m.push_resp.out = as_list(&s->m.push_resp.in); break;
    default: break;
    }
}

/* Schedules the ps would accept agree on what their kind uses. (Unknown
 * kinds decode as -1 for the ps to refuse by name, and fields a kind does
 * not use are not sent again.) */
static void same_schedule(const dt_lr_schedule *x, const dt_lr_schedule *y) {
    if (dt_lr_check(x, NULL) < 0) return;
    CHECK(x->kind == y->kind);
    if (x->kind == DT_LR_EXPONENTIAL)
        CHECK(x->decay_steps == y->decay_steps && x->decay_rate == y->decay_rate &&
              x->staircase == y->staircase);
    if (x->kind == DT_LR_PIECEWISE) {
        CHECK(x->num_boundaries == y->num_boundaries);
        int n = x->num_boundaries;
        CHECK(memcmp(x->boundaries, y->boundaries, sizeof(int64_t) * (size_t)n) == 0);
        CHECK(memcmp(x->values, y->values, sizeof(double) * (size_t)(n + 1)) == 0);
    }
}

/* The two decodes agree on everything the message carries. */
static void same_message(dt_msg_type type, const slot *a, const slot *b) {
    switch (type) {
    case DT_MSG_CREATE_REQ: {
        const dt_msg_create_req *x = &a->m.create_req, *y = &b->m.create_req;
        same_views(&x->in, &y->in);
        same_views(&x->slots_in, &y->slots_in);
        CHECK(x->global_step == y->global_step && x->max_steps == y->max_steps);
        CHECK(memcmp(&x->optim, &y->optim, sizeof x->optim) == 0);
        same_schedule(&x->schedule, &y->schedule);
        /* An unknown mode decodes as -1 for the ps to refuse by name; it
         * cannot travel further. */
        if (dt_mode_name(x->consistency.mode))
            CHECK(memcmp(&x->consistency, &y->consistency, sizeof x->consistency) == 0);
        CHECK(strcmp(x->model, y->model) == 0);
        CHECK(x->num_tables == y->num_tables && x->tables_pending == y->tables_pending);
        for (int i = 0; i < x->num_tables; i++)
            /* An unknown init decodes as -1 and is sent as none (zeros). */
            CHECK(strcmp(x->tables[i].name, y->tables[i].name) == 0 &&
                  x->tables[i].rows == y->tables[i].rows && x->tables[i].dim == y->tables[i].dim &&
                  (x->tables[i].init < 0 || x->tables[i].init == y->tables[i].init));
        break;
    }
    case DT_MSG_PULL_REQ: {
        const dt_msg_pull_req *x = &a->m.pull_req, *y = &b->m.pull_req;
        CHECK(x->names.count == y->names.count);
        for (int i = 0; i < x->names.count; i++)
            CHECK(strcmp(x->names.items[i], y->names.items[i]) == 0);
        CHECK(x->worker == y->worker && x->include_slots == y->include_slots &&
              x->min_global_step == y->min_global_step);
        break;
    }
    case DT_MSG_PULL_RESP: {
        const dt_msg_pull_resp *x = &a->m.pull_resp, *y = &b->m.pull_resp;
        same_views(&x->in, &y->in);
        same_views(&x->slots_in, &y->slots_in);
        CHECK(x->incarnation == y->incarnation && x->global_step == y->global_step);
        CHECK(x->done == y->done && x->wait == y->wait);
        break;
    }
    case DT_MSG_PUSH_RESP: {
        char why[256];
        if (dt_test_push_same(type, &a->m, &b->m, why, sizeof why) < 0) {
            fprintf(stderr, "fuzz_codec: decodes differ: %s\n", why);
            abort();
        }
        break;
    }
    case DT_MSG_PUSH_REQ: {
        const dt_msg_push_req *x = &a->m.push_req, *y = &b->m.push_req;
        same_views(&x->in, &y->in);
        same_views(&x->sparse_ids_in, &y->sparse_ids_in);
        same_views(&x->sparse_grads_in, &y->sparse_grads_in);
        CHECK(x->worker == y->worker && x->step == y->step);
        break;
    }
    case DT_MSG_SPARSE_PULL_REQ: {
        const dt_msg_sparse_pull_req *x = &a->m.sparse_pull_req, *y = &b->m.sparse_pull_req;
        same_views(&x->ids_in, &y->ids_in);
        CHECK(x->worker == y->worker && x->seen_step == y->seen_step);
        CHECK(strcmp(x->table, y->table) == 0);
        break;
    }
    case DT_MSG_SPARSE_PULL_RESP: {
        const dt_msg_sparse_pull_resp *x = &a->m.sparse_pull_resp, *y = &b->m.sparse_pull_resp;
        same_views(&x->values_in, &y->values_in);
        CHECK(x->incarnation == y->incarnation && x->global_step == y->global_step &&
              x->done == y->done);
        break;
    }
    case DT_MSG_SPARSE_EXPORT_RESP: {
        const dt_msg_sparse_export_resp *x = &a->m.sparse_export_resp,
                                        *y = &b->m.sparse_export_resp;
        same_views(&x->in, &y->in);
        CHECK(x->global_step == y->global_step && x->more == y->more);
        break;
    }
    case DT_MSG_SPARSE_IMPORT_REQ: {
        const dt_msg_sparse_import_req *x = &a->m.sparse_import_req, *y = &b->m.sparse_import_req;
        same_views(&x->in, &y->in);
        CHECK(strcmp(x->table, y->table) == 0 && x->last == y->last);
        break;
    }
    default:
        /* Plain data, zeroed before decoding: equal down to the byte. */
        CHECK(memcmp(&a->m, &b->m, sizeof a->m) == 0);
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    dt_msg_type type = (dt_msg_type)(data[0] % DT_MSG_COUNT);
    const uint8_t *msg = data + 1;
    size_t len = size - 1;

    prepare(type, &first);
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_codec_decode(type, msg, len, &first.m, &err);
    same_as_nanopb(type, msg, len, rc);
    decode_in_pieces(type, msg, len, rc, &err);
    if (rc < 0) {
        CHECK(err.code == rc && err.msg[0] != '\0');
        return 0;
    }
    CHECK(rc == 0);
    switch (type) {
    case DT_MSG_CREATE_REQ:
        check_views(&first.m.create_req.in, msg, len);
        check_views(&first.m.create_req.slots_in, msg, len);
        break;
    case DT_MSG_PULL_RESP:
        check_views(&first.m.pull_resp.in, msg, len);
        check_views(&first.m.pull_resp.slots_in, msg, len);
        break;
    case DT_MSG_PUSH_REQ: check_views(&first.m.push_req.in, msg, len); break;
    case DT_MSG_PUSH_RESP: check_views(&first.m.push_resp.in, msg, len); break;
    case DT_MSG_PULL_REQ:
        CHECK(first.m.pull_req.names.count >= 0 && first.m.pull_req.names.count <= CAP);
        for (int i = 0; i < first.m.pull_req.names.count; i++)
            CHECK(memchr(first.names[i], '\0', DT_TENSOR_NAME_MAX) != NULL);
        break;
    default: break;
    }

    /* Round trip: encode what was decoded, decode it again. */
    to_out(type, &first);
    dt_err_clear(&err);
    int64_t n = dt_codec_size(type, &first.m, &err);
    if (n < 0) {
        fprintf(stderr, "fuzz_codec: decoded, but cannot size it: %s\n", err.msg);
        abort();
    }
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    CHECK(buf != NULL);
    if (dt_codec_encode(type, &first.m, buf, (size_t)n, &err) < 0) {
        fprintf(stderr, "fuzz_codec: decoded, but cannot encode it: %s\n", err.msg);
        abort();
    }
    prepare(type, &second);
    if (dt_codec_decode(type, buf, (size_t)n, &second.m, &err) < 0) {
        fprintf(stderr, "fuzz_codec: its own encoding does not decode: %s\n", err.msg);
        abort();
    }
    same_message(type, &first, &second);
    free(buf);
    return 0;
}
