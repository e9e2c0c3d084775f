/*
 * codec_tensor: the repeated Tensor field of proto/dtrain.proto's messages,
 * its bytes written and read by hand (Tensor = name (1) dtype (2) shape (3,
 * packed) data (4)), for codec.c's messages; and the views of received
 * tensors (dt_codec_view_*).
 *
 * Tensor bytes: encoding writes each tensor's bytes with one
 * pb_encode_string (a memcpy into the output); decoding records where the
 * bytes sit in the input instead of copying them. The input is a nanopb
 * stream over the message's pieces (dt_codec_piece_read), whose state is the read
 * position: a tensor's data field notes that position and steps past its
 * bytes without reading them.
 *
 * One of the codec files (codec*.c, codec_internal.h), the only ones that
 * include nanopb's headers (pb_*.h).
 *
 * Threading: stateless; safe from any thread.
 */
#include <pb_decode.h>
#include <pb_encode.h>
#include <stdio.h>
#include <string.h>

#include "codec.h"
#include "codec_internal.h"
#include "text.h"

typedef struct {
    const dt_tensor_list *list;
    int index;
} data_arg;

/* Where a tensor's data field lay in the message. */
typedef struct {
    dt_span span;
    const uint8_t *ptr; /* the bytes when they lie in one piece, else NULL */
    const decode_ctx *ctx;
} bytes_view;

/* ---- encoding ---------------------------------------------------------- */

bool dt_codec_builder_write(pb_ostream_t *stream, const pb_byte_t *buf, size_t count) {
    builder *bd = stream->state;
    if (count > bd->own_len - bd->own_at) return false;
    memcpy(bd->own + bd->own_at, buf, count);
    bd->own_at += count;
    return true;
}

/* Whether tensor t of list goes by reference. */
int dt_codec_by_ref(const dt_tensor_list *list, const dt_tensor *t) {
    return list->ref && t->nbytes >= DT_CODEC_REF_MIN_BYTES;
}

/* The length prefix of a tensor's data, then the data as a run of *out
 * (dt_codec_encode_buf's writing pass only). */
static bool add_data_ref(pb_ostream_t *stream, const data_arg *da, const dt_tensor *t);

static bool encode_data_ref(pb_ostream_t *stream, const data_arg *da, const dt_tensor *t) {
    if (!pb_encode_varint(stream, t->nbytes)) return false;
    return add_data_ref(stream, da, t);
}

/* The data itself of encode_data_ref, its length prefix written. */
static bool add_data_ref(pb_ostream_t *stream, const data_arg *da, const dt_tensor *t) {
    builder *bd = stream->state;
    dt_rpc_ref r;
    if (da->list->ref(da->list->ref_ctx, da->index, &r, bd->err) < 0)
        PB_RETURN_ERROR(stream, "tensor reference failed");
    DT_ASSERT(r.len == t->nbytes);
    if (dt_rpc_buf_add_ref(bd->out, bd->own_at, &r, bd->err) < 0)
        PB_RETURN_ERROR(stream, "out of memory");
    /* The bytes are in the message, though not written by this stream. */
    stream->bytes_written += t->nbytes;
    return true;
}

/* Tensor i's data field's value (its tag written): by reference, or copied
 * under the list's lock. */
static bool encode_data(pb_ostream_t *stream, const dt_tensor_list *list, int i) {
    const dt_tensor *t = &list->items[i];
    data_arg da = {list, i};
    if (stream->callback == dt_codec_builder_write && dt_codec_by_ref(list, t))
        return encode_data_ref(stream, &da, t);
    if (list->lock) list->lock(list->lock_ctx, i, 1);
    bool ok = pb_encode_string(stream, t->data, t->nbytes);
    if (list->lock) list->lock(list->lock_ctx, i, 0);
    return ok;
}

/* The length of a Tensor message, written as nanopb would write it (proto3:
 * default values left out; shape packed), and of its packed shape. */
static size_t tensor_len(const dt_tensor *t, size_t name_len, size_t *shape_len) {
    size_t n = 0, sl = 0;
    for (int d = 0; d < t->ndim; d++)
        sl += dt_codec_varint_len((uint64_t)t->shape[d]);
    if (name_len) n += 1 + dt_codec_varint_len(name_len) + name_len;
    if (t->dtype) n += 1 + dt_codec_varint_len((uint64_t)(int64_t)t->dtype);
    if (t->ndim) n += 1 + dt_codec_varint_len(sl) + sl;
    n += 1 + dt_codec_varint_len(t->nbytes) + t->nbytes;
    *shape_len = sl;
    return n;
}

/* The repeated Tensor field, written by hand rather than through nanopb's
 * submessage encoder, which encodes each tensor twice (to size it, then to
 * write it) and that again for the message's own sizing: the largest cost
 * of a small model's push. The bytes are the same (test_wire_format_by_hand
 * builds them independently): Tensor = name (1) dtype (2) shape (3, packed)
 * data (4). A sizing stream gets the length alone. */
/* dt_codec_write_tensors' writing pass into a builder (dt_codec_encode_buf): tensor
 * i, its tag and length (len, as tensor_len gives it) and each field put
 * straight into the builder's own bytes, where pb_encode_tag and
 * pb_encode_varint cost a pb_write, a callback and a memcpy each: the
 * larger part of encoding a small tensor. The same bytes as the nanopb
 * calls of dt_codec_write_tensors (which tests compare with nanopb's own). */
static bool build_tensor(pb_ostream_t *stream, const dt_tensor_list *list, int i, uint32_t number,
                         size_t name_len, size_t shape_len, size_t len) {
    builder *bd = stream->state;
    const dt_tensor *t = &list->items[i];
    int ref = dt_codec_by_ref(list, t);
    uint64_t tag = ((uint64_t)number << 3) | PB_WT_STRING;
    size_t whole = dt_codec_varint_len(tag) + dt_codec_varint_len(len) + len;
    size_t own = whole - (ref ? t->nbytes : 0);
    if (own > bd->own_len - bd->own_at || whole > stream->max_size - stream->bytes_written)
        PB_RETURN_ERROR(stream, "stream full");
    uint8_t *start = bd->own + bd->own_at, *p = start;
    p = dt_codec_put_varint(p, tag);
    p = dt_codec_put_varint(p, len);
    if (name_len) {
        *p++ = (1 << 3) | PB_WT_STRING;
        p = dt_codec_put_varint(p, name_len);
        memcpy(p, t->name, name_len);
        p += name_len;
    }
    if (t->dtype) {
        *p++ = (2 << 3) | PB_WT_VARINT;
        p = dt_codec_put_varint(p, (uint64_t)(int64_t)t->dtype);
    }
    if (t->ndim) {
        *p++ = (3 << 3) | PB_WT_STRING;
        p = dt_codec_put_varint(p, shape_len);
        for (int d = 0; d < t->ndim; d++)
            p = dt_codec_put_varint(p, (uint64_t)t->shape[d]);
    }
    *p++ = (4 << 3) | PB_WT_STRING;
    p = dt_codec_put_varint(p, t->nbytes);
    size_t head = (size_t)(p - start);
    bd->own_at += head;
    stream->bytes_written += head;
    if (ref) {
        data_arg da = {list, i};
        return add_data_ref(stream, &da, t);
    }
    if (list->lock) list->lock(list->lock_ctx, i, 1);
    if (t->nbytes) memcpy(p, t->data, t->nbytes);
    if (list->lock) list->lock(list->lock_ctx, i, 0);
    bd->own_at += t->nbytes;
    stream->bytes_written += t->nbytes;
    return true;
}

bool dt_codec_write_tensors(pb_ostream_t *stream, const dt_tensor_list *list, uint32_t number) {
    for (int i = 0; i < list->count; i++) {
        const dt_tensor *t = &list->items[i];
        size_t name_len = strnlen(t->name, sizeof t->name);
        if (name_len >= DT_TENSOR_NAME_MAX) PB_RETURN_ERROR(stream, "tensor name too long");
        if (t->ndim < 0 || t->ndim > DT_TENSOR_MAX_DIMS) PB_RETURN_ERROR(stream, "bad ndim");
        size_t shape_len;
        size_t len = tensor_len(t, name_len, &shape_len);
        if (stream->callback == dt_codec_builder_write) {
            if (!build_tensor(stream, list, i, number, name_len, shape_len, len)) return false;
            continue;
        }
        if (!pb_encode_tag(stream, PB_WT_STRING, number) || !pb_encode_varint(stream, len))
            return false;
        if (!stream->callback) {
            if (!pb_write(stream, NULL, len)) return false;
            continue;
        }
        size_t start = stream->bytes_written;
        if (name_len && (!pb_encode_tag(stream, PB_WT_STRING, 1) ||
                         !pb_encode_string(stream, (const pb_byte_t *)t->name, name_len)))
            return false;
        if (t->dtype && (!pb_encode_tag(stream, PB_WT_VARINT, 2) ||
                         !pb_encode_varint(stream, (uint64_t)(int64_t)t->dtype)))
            return false;
        if (t->ndim) {
            if (!pb_encode_tag(stream, PB_WT_STRING, 3) || !pb_encode_varint(stream, shape_len))
                return false;
            for (int d = 0; d < t->ndim; d++)
                if (!pb_encode_varint(stream, (uint64_t)t->shape[d])) return false;
        }
        if (!pb_encode_tag(stream, PB_WT_STRING, 4) || !encode_data(stream, list, i)) return false;
        if (stream->bytes_written - start != len) PB_RETURN_ERROR(stream, "tensor length changed");
    }
    return true;
}

/* The nanopb callback of a repeated Tensor field. */
bool dt_codec_encode_tensors(pb_ostream_t *stream, const pb_field_t *field, void *const *arg) {
    return dt_codec_write_tensors(stream, *arg, field->tag);
}

/* ---- decoding ---------------------------------------------------------- */

/* Moves pos past used-up (or empty) pieces. */
static void pos_settle(piece_pos *pos) {
    while (pos->piece != pos->end && pos->offset >= pos->piece->len) {
        pos->piece++;
        pos->offset = 0;
    }
}

/* Moves pos count bytes on, copying them to buf unless it is NULL. nanopb
 * checked that the message holds them. */
bool dt_codec_piece_read(pb_istream_t *stream, pb_byte_t *buf, size_t count) {
    piece_pos *pos = stream->state;
    /* Most reads are a byte of a varint or tag inside the current piece. */
    if (count == 1 && pos->piece != pos->end && pos->offset < pos->piece->len) {
        if (buf) *buf = pos->piece->data[pos->offset];
        pos->offset++;
        return true;
    }
    while (count > 0) {
        pos_settle(pos);
        if (pos->piece == pos->end) return false;
        size_t n = pos->piece->len - pos->offset;
        if (n > count) n = count;
        if (buf) {
            memcpy(buf, pos->piece->data + pos->offset, n);
            buf += n;
        }
        pos->offset += n;
        count -= n;
    }
    return true;
}

/* The next byte of stream when it is a whole varint that fits in `limit`
 * (below 0x80: most tags, lengths and values of a small message) and lies
 * in the current piece: read in place, where nanopb makes a call through
 * its stream per byte (a fifth of decoding a tiny push). 0, nothing read,
 * otherwise: nanopb then reads it, with its own checks and errors. */
static int byte_varint(pb_istream_t *stream, uint32_t limit, uint32_t *v) {
    if (stream->bytes_left == 0 || stream->callback != dt_codec_piece_read) return 0;
    piece_pos *pos = stream->state;
    if (pos->piece == pos->end || pos->offset >= pos->piece->len) return 0;
    uint8_t b = pos->piece->data[pos->offset];
    if (b >= 0x80 || b > limit) return 0;
    pos->offset++;
    stream->bytes_left--;
    *v = b;
    return 1;
}

/* pb_decode_varint, a one-byte varint read in place. */
bool dt_codec_read_varint(pb_istream_t *stream, uint64_t *v) {
    uint32_t b;
    if (!byte_varint(stream, UINT32_MAX, &b)) return pb_decode_varint(stream, v);
    *v = b;
    return true;
}

/* pb_decode_varint32, a one-byte varint read in place. */
bool dt_codec_read_varint32(pb_istream_t *stream, uint32_t *v) {
    return byte_varint(stream, UINT32_MAX, v) || pb_decode_varint32(stream, v);
}

/* The next field's tag, refused when its number is 0, as pb_decode refuses
 * it (no field has number 0; pb_decode_tag itself lets one through when its
 * wire type is not 0). */
bool dt_codec_next_tag(pb_istream_t *stream, pb_wire_type_t *wt, uint32_t *number) {
    uint32_t key;
    if (byte_varint(stream, UINT32_MAX, &key)) {
        *wt = (pb_wire_type_t)(key & 7);
        *number = key >> 3;
    } else {
        bool eof;
        if (!pb_decode_tag(stream, wt, number, &eof)) return false;
    }
    if (*number == 0) PB_RETURN_ERROR(stream, "zero tag");
    return true;
}

/* pb_make_string_substream, a one-byte length the stream holds read in
 * place (any other goes to nanopb, which refuses one past the stream). */
bool dt_codec_open_sub(pb_istream_t *stream, pb_istream_t *sub) {
    uint32_t size;
    size_t room = stream->bytes_left > 0 ? stream->bytes_left - 1 : 0; /* after the length */
    if (stream->bytes_left == 0 || !byte_varint(stream, room < 0x80 ? (uint32_t)room : 0x7f, &size))
        return pb_make_string_substream(stream, sub);
    *sub = *stream;
    sub->bytes_left = size;
    stream->bytes_left -= size;
    return true;
}

/* A tensor's data field (its length read: stream is the substream of its
 * bytes): where they lie, stepped past without reading them. */
static bool decode_data(pb_istream_t *stream, bytes_view *bv) {
    piece_pos *pos = stream->state;
    size_t len = stream->bytes_left;
    if (len > 0) pos_settle(pos);
    bv->span.piece = pos->piece;
    bv->span.offset = pos->offset;
    bv->span.len = len;
    bv->ptr =
        len > 0 && pos->piece->len - pos->offset >= len ? pos->piece->data + pos->offset : NULL;
    if (!dt_codec_piece_read(stream, NULL, len)) return false;
    stream->bytes_left = 0;
    return true;
}

/* What a Tensor message said, before it is checked. */
typedef struct {
    char name[DT_TENSOR_NAME_MAX];
    size_t name_len; /* as on the wire; 0: none came */
    int64_t dtype;
    int64_t shape[DT_TENSOR_MAX_DIMS];
    int ndim;
    bytes_view data;
} tensor_fields;

/* Reads one field of a Tensor message into tf; an error names the field
 * (why), or is nanopb's. The rules are protobuf's, as nanopb applies them:
 * fields in any order, the last of a repeated scalar wins, shape packed or
 * not, unknown fields skipped. */
static bool decode_tensor_field(pb_istream_t *stream, pb_wire_type_t wt, uint32_t tag,
                                tensor_fields *tf, const char **why) {
    uint64_t v;
    pb_istream_t sub;
    switch (tag) {
    case 1: { /* name */
        uint32_t n;
        if (wt != PB_WT_STRING) PB_RETURN_ERROR(stream, "wrong wire type");
        if (!dt_codec_read_varint32(stream, &n)) return false;
        if (n >= DT_TENSOR_NAME_MAX) {
            *why = "name longer than 127 bytes";
            return false;
        }
        if (!pb_read(stream, (pb_byte_t *)tf->name, n)) return false;
        tf->name[n] = '\0';
        tf->name_len = n;
        return true;
    }
    case 2: /* dtype: an enum, an int32 varint */
        if (wt != PB_WT_VARINT) PB_RETURN_ERROR(stream, "wrong wire type");
        if (!dt_codec_read_varint(stream, &v)) return false;
        tf->dtype = (int32_t)v;
        return true;
    case 3: /* shape: packed, or one value per occurrence */
        if (wt == PB_WT_VARINT) {
            if (tf->ndim == DT_TENSOR_MAX_DIMS) break;
            if (!dt_codec_read_varint(stream, &v)) return false;
            tf->shape[tf->ndim++] = (int64_t)v;
            return true;
        }
        if (wt != PB_WT_STRING) PB_RETURN_ERROR(stream, "wrong wire type");
        if (!dt_codec_open_sub(stream, &sub)) return false;
        while (sub.bytes_left > 0) {
            if (tf->ndim == DT_TENSOR_MAX_DIMS) break;
            if (!dt_codec_read_varint(&sub, &v)) return false;
            tf->shape[tf->ndim++] = (int64_t)v;
        }
        if (sub.bytes_left > 0) break;
        return pb_close_string_substream(stream, &sub);
    case 4: /* data: its place in the message, never a copy */
        /* Sent with another wire type (fixed32, say), or inside a Tensor
         * that itself was, the bytes would come through a copy on nanopb's
         * stack, not the message: refuse, never keep a view. */
        if (wt != PB_WT_STRING || stream->callback != dt_codec_piece_read) {
            *why = "tensor data must be a length-delimited field";
            return false;
        }
        if (!dt_codec_open_sub(stream, &sub)) return false;
        if (!decode_data(&sub, &tf->data)) return false;
        return pb_close_string_substream(stream, &sub);
    default: return pb_skip_field(stream, wt);
    }
    *why = "shape has more than 4 dimensions";
    return false;
}

/* 1 when s is 1 to 127 bytes of printable ASCII: a name dt_text_check_name
 * accepts, known without its UTF-8 walk (every name a dtrain job makes). */
static int printable_ascii(const char *s, size_t len) {
    if (len == 0 || len >= DT_TENSOR_NAME_MAX) return 0;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) return 0;
    return 1;
}

/* The repeated Tensor field, read by hand (see dt_codec_encode_tensors): one
 * tensor, checked, into the next view. */
bool dt_codec_decode_tensor(pb_istream_t *stream, const pb_field_t *field, void **arg) {
    (void)field;
    views_arg *va = *arg;
    dt_tensor_views *views = va->views;
    if (views->count >= views->cap) {
        dt_err_set(va->ctx->err, DT_EINVAL, "%s: more than %d tensors", va->ctx->what, views->cap);
        return false;
    }
    tensor_fields tf;
    tf.name_len = 0;
    tf.name[0] = '\0';
    tf.dtype = 0;
    tf.ndim = 0;
    memset(tf.shape, 0, sizeof tf.shape);
    tf.data = (bytes_view){{NULL, 0, 0}, NULL, va->ctx};
    while (stream->bytes_left > 0) {
        pb_wire_type_t wt;
        uint32_t tag;
        const char *why = NULL;
        if (!dt_codec_next_tag(stream, &wt, &tag) ||
            !decode_tensor_field(stream, wt, tag, &tf, &why)) {
            if (!why) why = PB_GET_ERROR(stream);
            dt_err_set(va->ctx->err, DT_EINVAL, "%s[%d]: %s", va->ctx->what, views->count, why);
            return false;
        }
    }
    if (!printable_ascii(tf.name, tf.name_len) &&
        dt_text_check_name(tf.name, tf.name_len, DT_TENSOR_NAME_MAX - 1, "", NULL) < 0) {
        /* Formatted only when it fails: it costs more than the check. */
        char what[64];
        snprintf(what, sizeof what, "%s[%d]", va->ctx->what, views->count);
        return dt_text_check_name(tf.name, tf.name_len, DT_TENSOR_NAME_MAX - 1, what,
                                  va->ctx->err) == 0;
    }
    dt_tensor *t = &views->items[views->count];
    memcpy(t->name, tf.name, tf.name_len + 1);
    t->dtype = (int)tf.dtype;
    t->ndim = tf.ndim;
    memset(t->shape, 0, sizeof t->shape);
    for (int d = 0; d < t->ndim; d++)
        t->shape[d] = tf.shape[d];
    t->data = NULL;
    t->nbytes = 0;
    if (dt_tensor_check_layout(t, va->ctx->err) < 0) { /* its name was checked above */
        dt_err_wrap(va->ctx->err, DT_EINVAL, "%s[%d]", va->ctx->what, views->count);
        return false;
    }
    const bytes_view *bv = &tf.data;
    if (bv->span.len != t->nbytes) {
        dt_err_set(va->ctx->err, DT_EINVAL, "%s[%d] %s: %zu data bytes, shape needs %zu",
                   va->ctx->what, views->count, t->name, bv->span.len, t->nbytes);
        return false;
    }
    if (!bv->ptr && !views->spans) {
        dt_err_set(va->ctx->err, DT_EINTERNAL,
                   "%s[%d] %s: its bytes cross pieces of the message and the caller gave no "
                   "span storage",
                   va->ctx->what, views->count, t->name);
        return false;
    }
    t->data = (void *)bv->ptr;
    if (views->spans) views->spans[views->count] = bv->span;
    views->count++;
    return true;
}

/* ---- views ------------------------------------------------------------- */

void dt_codec_view_copy(const dt_tensor_views *views, int i, void *dst) {
    const dt_tensor *t = &views->items[i];
    if (t->data)
        memcpy(dst, t->data, t->nbytes);
    else
        dt_span_copy(&views->spans[i], dst);
}

dt_span dt_codec_view_span(const dt_tensor_views *views, int i, dt_piece *one) {
    const dt_tensor *t = &views->items[i];
    if (!t->data) return views->spans[i];
    *one = (dt_piece){t->data, t->nbytes};
    return (dt_span){one, 0, t->nbytes};
}

void dt_codec_view_reader(const dt_tensor_views *views, int i, dt_span_reader *r) {
    const dt_tensor *t = &views->items[i];
    size_t elem = dt_dtype_size(t->dtype);
    if (t->data)
        dt_span_reader_init_flat(r, t->data, t->nbytes, elem);
    else
        dt_span_reader_init(r, &views->spans[i], elem);
}
