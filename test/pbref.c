/*
 * pbref: nanopb's own codec of the push messages, the reference the
 * hand-written one is held to (see pbref.h). Everything here goes through
 * pb_encode / pb_decode and the generated descriptors; the only reading of
 * the wire by this file is finding a tensor name's length on the wire,
 * which nanopb's C string hides (a name with a NUL inside is refused by
 * dtrain's rule, and the string alone cannot show one).
 */
#include "pbref.h"

#include <pb_common.h>
#include <pb_decode.h>
#include <pb_encode.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain.pb.h"
#include "text.h"

static const pb_msgdesc_t *desc_of(dt_msg_type type) {
    if (type == DT_MSG_PUSH_REQ) return dtrain_PushRequest_fields;
    if (type == DT_MSG_PUSH_RESP) return dtrain_PushResponse_fields;
    return NULL;
}

/* ---- encoding ---------------------------------------------------------- */

/* proto3: empty bytes are left out, as nanopb leaves out a static field at
 * its default. */
static bool encode_data(pb_ostream_t *stream, const pb_field_t *field, void *const *arg) {
    const dt_tensor *t = *arg;
    if (t->nbytes == 0) return true;
    return pb_encode_tag_for_field(stream, field) &&
           pb_encode_string(stream, (const pb_byte_t *)t->data, t->nbytes);
}

static bool encode_tensors(pb_ostream_t *stream, const pb_field_t *field, void *const *arg) {
    const dt_tensor_list *list = *arg;
    for (int i = 0; i < list->count; i++) {
        const dt_tensor *t = &list->items[i];
        dtrain_Tensor pt = dtrain_Tensor_init_zero;
        size_t n = strnlen(t->name, sizeof t->name);
        if (n >= sizeof pt.name) PB_RETURN_ERROR(stream, "tensor name too long");
        memcpy(pt.name, t->name, n + 1);
        pt.dtype = (dtrain_DataType)t->dtype;
        if (t->ndim < 0 || t->ndim > (int)(sizeof pt.shape / sizeof pt.shape[0]))
            PB_RETURN_ERROR(stream, "bad ndim");
        pt.shape_count = (pb_size_t)t->ndim;
        for (int d = 0; d < t->ndim; d++)
            pt.shape[d] = t->shape[d];
        pt.data.funcs.encode = encode_data;
        pt.data.arg = (void *)t;
        if (!pb_encode_tag_for_field(stream, field) ||
            !pb_encode_submessage(stream, dtrain_Tensor_fields, &pt))
            return false;
    }
    return true;
}

/* The generated struct filled from msg, field by field. */
typedef union {
    dtrain_PushRequest req;
    dtrain_PushResponse resp;
} pb_push;

/* Every scalar field copied between the generated struct p and the
 * dt_msg_* m, by name (nanopb's field list); the callback field, the
 * tensors, is set up by hand. */
#define TO_PB(a, atype, htype, ltype, name, number) TO_PB_##atype(name)
#define TO_PB_STATIC(name) p->name = m->name;
#define TO_PB_CALLBACK(name)
#define FROM_PB(a, atype, htype, ltype, name, number) FROM_PB_##atype(name)
#define FROM_PB_STATIC(name) m->name = p->name;
#define FROM_PB_CALLBACK(name)

static void to_pb(dt_msg_type type, const void *msg, pb_push *pb) {
    memset(pb, 0, sizeof *pb);
    if (type == DT_MSG_PUSH_REQ) {
        const dt_msg_push_req *m = msg;
        dtrain_PushRequest *p = &pb->req;
        dtrain_PushRequest_FIELDLIST(TO_PB, x);
        p->gradients.funcs.encode = encode_tensors;
        p->gradients.arg = (void *)&m->out;
        p->sparse_ids.funcs.encode = encode_tensors;
        p->sparse_ids.arg = (void *)&m->sparse_ids_out;
        p->sparse_grads.funcs.encode = encode_tensors;
        p->sparse_grads.arg = (void *)&m->sparse_grads_out;
    } else {
        const dt_msg_push_resp *m = msg;
        dtrain_PushResponse *p = &pb->resp;
        dtrain_PushResponse_FIELDLIST(TO_PB, x);
        p->variables.funcs.encode = encode_tensors;
        p->variables.arg = (void *)&m->out;
    }
}

/* Sizes, allocates and encodes the generated struct pb. */
static int encode_pb(const pb_msgdesc_t *desc, const void *pb, uint8_t **out, size_t *len,
                     dt_err *err) {
    size_t size = 0;
    *out = NULL;
    if (!pb_get_encoded_size(&size, desc, pb))
        return dt_err_set(err, DT_EINVAL, "nanopb: cannot size the message");
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return dt_err_set(err, DT_ENOMEM, "nanopb: out of memory");
    pb_ostream_t stream = pb_ostream_from_buffer(buf, size);
    if (!pb_encode(&stream, desc, pb) || stream.bytes_written != size) {
        free(buf);
        return dt_err_set(err, DT_EINVAL, "nanopb: encode: %s", PB_GET_ERROR(&stream));
    }
    *out = buf;
    *len = size;
    return 0;
}

int dt_test_pb_encode(dt_msg_type type, const void *msg, uint8_t **out, size_t *len, dt_err *err) {
    const pb_msgdesc_t *desc = desc_of(type);
    if (!desc) return dt_err_set(err, DT_EINTERNAL, "pbref: not a push message: %d", (int)type);
    pb_push pb;
    to_pb(type, msg, &pb);
    return encode_pb(desc, &pb, out, len, err);
}

/* ---- decoding ---------------------------------------------------------- */

typedef struct {
    const uint8_t *buf; /* the message: a callback's bytes must lie in it */
    size_t len;
    dt_tensor_views *views;
    const char *what;
    dt_err *err;
} decode_ctx;

/* Whether stream reads the message itself, not nanopb's stack copy of a
 * scalar handed to a callback as if it were a length-delimited field. */
static int in_message(const decode_ctx *ctx, const pb_istream_t *stream) {
    const uint8_t *at = stream->state;
    return at >= ctx->buf && at <= ctx->buf + ctx->len && stream->bytes_left <= ctx->len;
}

typedef struct {
    const decode_ctx *ctx;
    const uint8_t *data;
    size_t len;
    int seen;
} data_rec;

static bool decode_data(pb_istream_t *stream, const pb_field_t *field, void **arg) {
    (void)field;
    data_rec *rec = *arg;
    if (!in_message(rec->ctx, stream)) PB_RETURN_ERROR(stream, "data not length-delimited");
    rec->data = stream->state;
    rec->len = stream->bytes_left;
    rec->seen = 1;
    return pb_read(stream, NULL, stream->bytes_left);
}

/* The length on the wire of the last name field of the Tensor message that
 * stream holds (0 when none), read from a copy of the stream with nanopb's
 * tag and skip functions; a malformed message is left to pb_decode. */
static size_t wire_name_len(const pb_istream_t *stream) {
    pb_istream_t scan = *stream;
    size_t len = 0;
    while (scan.bytes_left > 0) {
        pb_wire_type_t wt;
        uint32_t tag;
        bool eof;
        if (!pb_decode_tag(&scan, &wt, &tag, &eof)) break;
        if (tag == dtrain_Tensor_name_tag && wt == PB_WT_STRING) {
            uint32_t n;
            if (!pb_decode_varint32(&scan, &n) || !pb_read(&scan, NULL, n)) break;
            len = n;
        } else if (!pb_skip_field(&scan, wt)) {
            break;
        }
    }
    return len;
}

static bool decode_tensor(pb_istream_t *stream, const pb_field_t *field, void **arg) {
    (void)field;
    const decode_ctx *ctx = *arg;
    dt_tensor_views *v = ctx->views;
    if (!in_message(ctx, stream)) PB_RETURN_ERROR(stream, "tensor not length-delimited");
    if (v->count >= v->cap) {
        dt_err_set(ctx->err, DT_EINVAL, "%s: more than %d tensors", ctx->what, v->cap);
        return false;
    }
    size_t name_len = wire_name_len(stream);
    dtrain_Tensor pt;
    memset(&pt, 0, sizeof pt);
    data_rec rec = {ctx, NULL, 0, 0};
    pt.data.funcs.decode = decode_data;
    pt.data.arg = &rec;
    if (!pb_decode(stream, dtrain_Tensor_fields, &pt)) return false;
    char what[64];
    snprintf(what, sizeof what, "%s[%d]", ctx->what, v->count);
    if (dt_text_check_name(pt.name, name_len, DT_TENSOR_NAME_MAX - 1, what, ctx->err) < 0)
        return false;
    dt_tensor *t = &v->items[v->count];
    memset(t, 0, sizeof *t);
    memcpy(t->name, pt.name, name_len + 1);
    t->dtype = (int)pt.dtype;
    t->ndim = (int)pt.shape_count;
    for (int d = 0; d < t->ndim; d++)
        t->shape[d] = pt.shape[d];
    if (dt_tensor_check_spec(t, ctx->err) < 0) return false;
    if (rec.len != t->nbytes) {
        dt_err_set(ctx->err, DT_EINVAL, "%s: %zu data bytes, shape needs %zu", what, rec.len,
                   t->nbytes);
        return false;
    }
    t->data = (void *)rec.data;
    v->count++;
    return true;
}

int dt_test_pb_decode(dt_msg_type type, const uint8_t *buf, size_t len, void *msg, dt_err *err) {
    const pb_msgdesc_t *desc = desc_of(type);
    if (!desc) return dt_err_set(err, DT_EINTERNAL, "pbref: not a push message: %d", (int)type);
    dt_err local;
    dt_err_clear(&local);
    pb_push pb;
    memset(&pb, 0, sizeof pb);
    /* One context per repeated Tensor field: its views and its name. */
    decode_ctx ctx[3];
    for (int i = 0; i < 3; i++)
        ctx[i] = (decode_ctx){buf, len, NULL, NULL, &local};
    if (type == DT_MSG_PUSH_REQ) {
        dt_msg_push_req *m = msg;
        ctx[0].views = &m->in;
        ctx[0].what = "gradients";
        ctx[1].views = &m->sparse_ids_in;
        ctx[1].what = "sparse_ids";
        ctx[2].views = &m->sparse_grads_in;
        ctx[2].what = "sparse_grads";
        pb_callback_t *cbs[3] = {&pb.req.gradients, &pb.req.sparse_ids, &pb.req.sparse_grads};
        for (int i = 0; i < 3; i++) {
            cbs[i]->funcs.decode = decode_tensor;
            cbs[i]->arg = &ctx[i];
            ctx[i].views->count = 0;
        }
    } else {
        ctx[0].views = &((dt_msg_push_resp *)msg)->in;
        ctx[0].what = "variables";
        pb.resp.variables.funcs.decode = decode_tensor;
        pb.resp.variables.arg = &ctx[0];
        ctx[0].views->count = 0;
    }
    pb_istream_t stream = pb_istream_from_buffer(buf ? buf : (const uint8_t *)"", len);
    if (!pb_decode(&stream, desc, &pb)) {
        if (local.code != DT_OK) return dt_err_set(err, local.code, "nanopb: %s", local.msg);
        return dt_err_set(err, DT_EINVAL, "nanopb: %s", PB_GET_ERROR(&stream));
    }
    if (type == DT_MSG_PUSH_REQ) {
        dt_msg_push_req *m = msg;
        const dtrain_PushRequest *p = &pb.req;
        dtrain_PushRequest_FIELDLIST(FROM_PB, x);
    } else {
        dt_msg_push_resp *m = msg;
        const dtrain_PushResponse *p = &pb.resp;
        dtrain_PushResponse_FIELDLIST(FROM_PB, x);
    }
    return 0;
}

/* ---- the descriptor, field by field ------------------------------------ */

int dt_test_pb_fields(dt_msg_type type, uint32_t *numbers, int cap) {
    const pb_msgdesc_t *desc = desc_of(type);
    pb_push pb;
    pb_field_iter_t it;
    int n = 0;
    if (!desc || !pb_field_iter_begin(&it, desc, &pb)) return 0;
    do {
        if (n < cap) numbers[n] = it.tag;
        n++;
    } while (pb_field_iter_next(&it));
    return n;
}

static float one_float = 1.5f;
static const dt_tensor one_tensor = {.name = "w",
                                     .dtype = DT_DTYPE_F32,
                                     .ndim = 1,
                                     .shape = {1},
                                     .data = &one_float,
                                     .nbytes = sizeof one_float};
static const dt_tensor_list one_list = {.items = &one_tensor, .count = 1};

/* One empty element of a callback field whose kind this file does not
 * know: a zero-length value, which a repeated message, string or bytes
 * field all take. */
static bool encode_empty(pb_ostream_t *stream, const pb_field_t *field, void *const *arg) {
    (void)arg;
    return pb_encode_tag_for_field(stream, field) && pb_encode_string(stream, NULL, 0);
}

/* Sets the field it points at away from its default. */
static void set_one(pb_field_iter_t *it) {
    if (PB_ATYPE(it->type) == PB_ATYPE_CALLBACK) {
        pb_callback_t *cb = it->pData;
        if (it->submsg_desc == dtrain_Tensor_fields) {
            cb->funcs.encode = encode_tensors;
            cb->arg = (void *)&one_list;
        } else {
            cb->funcs.encode = encode_empty;
        }
        return;
    }
    /* Static: a repeated field gets one element; an optional submessage or
     * scalar its has_ flag. */
    if (PB_HTYPE(it->type) == PB_HTYPE_REPEATED) *(pb_size_t *)it->pSize = 1;
    if (PB_HTYPE(it->type) == PB_HTYPE_OPTIONAL && it->pSize && it->pSize != it->pData)
        *(bool *)it->pSize = true;
    switch (PB_LTYPE(it->type)) {
    case PB_LTYPE_BOOL: *(bool *)it->pData = true; break;
    case PB_LTYPE_VARINT:
    case PB_LTYPE_UVARINT:
    case PB_LTYPE_SVARINT:
        /* Little-endian: 1 in a field of any width. */
        memset(it->pData, 0, it->data_size);
        *(uint8_t *)it->pData = 1;
        break;
    case PB_LTYPE_FIXED32:
    case PB_LTYPE_FIXED64: memset(it->pData, 0x5a, it->data_size); break;
    case PB_LTYPE_STRING: memcpy(it->pData, "x", 2); break;
    case PB_LTYPE_BYTES: {
        pb_bytes_array_t *b = it->pData;
        b->size = 1;
        b->bytes[0] = 'x';
        break;
    }
    default: break; /* a submessage: present (has_), empty */
    }
}

int dt_test_pb_encode_one(dt_msg_type type, int index, uint32_t *number, uint8_t **out, size_t *len,
                          dt_err *err) {
    const pb_msgdesc_t *desc = desc_of(type);
    if (!desc) return dt_err_set(err, DT_EINTERNAL, "pbref: not a push message: %d", (int)type);
    pb_push pb;
    memset(&pb, 0, sizeof pb);
    pb_field_iter_t it;
    if (!pb_field_iter_begin(&it, desc, &pb)) return 1;
    for (int i = 0; i < index; i++)
        if (!pb_field_iter_next(&it)) return 1;
    *number = it.tag;
    set_one(&it);
    return encode_pb(desc, &pb, out, len, err);
}

/* ---- comparing --------------------------------------------------------- */

#define DIFF(...)                                                                                  \
    do {                                                                                           \
        snprintf(why, cap, __VA_ARGS__);                                                           \
        return -1;                                                                                 \
    } while (0)

/* Tensor i of a (its bytes at pa) and of b (at pb) agree. */
static int same_tensor(const dt_tensor *a, const void *pa, const dt_tensor *b, const void *pb,
                       int i, char *why, size_t cap) {
    if (strcmp(a->name, b->name) != 0)
        DIFF("tensor %d: name \"%s\" against \"%s\"", i, a->name, b->name);
    if (a->dtype != b->dtype) DIFF("tensor %d: dtype %d against %d", i, a->dtype, b->dtype);
    if (a->ndim != b->ndim) DIFF("tensor %d: %d dims against %d", i, a->ndim, b->ndim);
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            DIFF("tensor %d: dim %d is %lld against %lld", i, d, (long long)a->shape[d],
                 (long long)b->shape[d]);
    if (a->nbytes != b->nbytes) DIFF("tensor %d: %zu bytes against %zu", i, a->nbytes, b->nbytes);
    if (a->nbytes && memcmp(pa, pb, a->nbytes) != 0) DIFF("tensor %d: bytes differ", i);
    return 0;
}

/* The bytes of decoded tensor i, copied to a new buffer. */
static void *view_bytes(const dt_tensor_views *v, int i) {
    void *p = malloc(v->items[i].nbytes ? v->items[i].nbytes : 1);
    if (p) dt_codec_view_copy(v, i, p);
    return p;
}

/* Decoded views a and b, or (sent != NULL) the list sent and views b. */
static int same_tensors(const dt_tensor_list *sent, const dt_tensor_views *a,
                        const dt_tensor_views *b, char *why, size_t cap) {
    int na = sent ? sent->count : a->count;
    if (na != b->count) DIFF("%d tensors against %d", na, b->count);
    for (int i = 0; i < na; i++) {
        const dt_tensor *ta = sent ? &sent->items[i] : &a->items[i];
        void *pa = sent ? NULL : view_bytes(a, i);
        void *pb = view_bytes(b, i);
        int rc = (sent || pa) && pb ? 0 : -1;
        if (rc < 0) snprintf(why, cap, "out of memory");
        if (rc == 0) rc = same_tensor(ta, sent ? ta->data : pa, &b->items[i], pb, i, why, cap);
        free(pa);
        free(pb);
        if (rc < 0) return rc;
    }
    return 0;
}

static int same_scalars(dt_msg_type type, const void *a, const void *b, char *why, size_t cap) {
    if (type == DT_MSG_PUSH_REQ) {
        const dt_msg_push_req *x = a, *y = b;
        if (x->worker != y->worker) DIFF("worker %d against %d", x->worker, y->worker);
        if (x->step != y->step)
            DIFF("step %lld against %lld", (long long)x->step, (long long)y->step);
        if (x->seen_step != y->seen_step)
            DIFF("seen_step %lld against %lld", (long long)x->seen_step, (long long)y->seen_step);
        if (x->pull != y->pull) DIFF("pull %d against %d", x->pull, y->pull);
        if (x->min_global_step != y->min_global_step)
            DIFF("min_global_step %lld against %lld", (long long)x->min_global_step,
                 (long long)y->min_global_step);
        if (x->push_id != y->push_id)
            DIFF("push_id %llx against %llx", (unsigned long long)x->push_id,
                 (unsigned long long)y->push_id);
        return 0;
    }
    const dt_msg_push_resp *x = a, *y = b;
    if (x->incarnation != y->incarnation)
        DIFF("incarnation %llx against %llx", (unsigned long long)x->incarnation,
             (unsigned long long)y->incarnation);
    if (x->global_step != y->global_step)
        DIFF("global_step %lld against %lld", (long long)x->global_step, (long long)y->global_step);
    if (x->done != y->done) DIFF("done %d against %d", x->done, y->done);
    if (x->dropped != y->dropped) DIFF("dropped %d against %d", x->dropped, y->dropped);
    if (x->wait != y->wait) DIFF("wait %d against %d", x->wait, y->wait);
    return 0;
}

static const dt_tensor_views *in_of(dt_msg_type type, const void *m) {
    return type == DT_MSG_PUSH_REQ ? &((const dt_msg_push_req *)m)->in
                                   : &((const dt_msg_push_resp *)m)->in;
}

int dt_test_push_same(dt_msg_type type, const void *a, const void *b, char *why, size_t cap) {
    if (same_scalars(type, a, b, why, cap) < 0) return -1;
    if (same_tensors(NULL, in_of(type, a), in_of(type, b), why, cap) < 0) return -1;
    if (type != DT_MSG_PUSH_REQ) return 0;
    const dt_msg_push_req *x = a, *y = b;
    if (same_tensors(NULL, &x->sparse_ids_in, &y->sparse_ids_in, why, cap) < 0) return -1;
    return same_tensors(NULL, &x->sparse_grads_in, &y->sparse_grads_in, why, cap);
}

int dt_test_push_same_as_sent(dt_msg_type type, const void *sent, const void *got, char *why,
                              size_t cap) {
    if (same_scalars(type, sent, got, why, cap) < 0) return -1;
    const dt_tensor_list *out = type == DT_MSG_PUSH_REQ ? &((const dt_msg_push_req *)sent)->out
                                                        : &((const dt_msg_push_resp *)sent)->out;
    if (same_tensors(out, NULL, in_of(type, got), why, cap) < 0) return -1;
    if (type != DT_MSG_PUSH_REQ) return 0;
    const dt_msg_push_req *x = sent, *y = got;
    if (same_tensors(&x->sparse_ids_out, NULL, &y->sparse_ids_in, why, cap) < 0) return -1;
    return same_tensors(&x->sparse_grads_out, NULL, &y->sparse_grads_in, why, cap);
}
