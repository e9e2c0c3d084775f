/*
 * codec_internal: what the codec files share: codec.c (the messages) and
 * codec_tensor.c (the repeated Tensor field's bytes, written and read in
 * place). One of the codec files, the only ones that include nanopb's
 * headers (pb_*.h): only codec*.c include this header. codec.h stays the
 * one interface of the codec.
 */
#ifndef DT_CODEC_INTERNAL_H
#define DT_CODEC_INTERNAL_H

#include <pb.h>
#include <pb_decode.h>
#include <pb_encode.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codec.h"
#include "err.h"
#include "rpc_common.h"
#include "tensor.h"

/* Per-call decode context, reachable from every callback. */
typedef struct {
    dt_err *err;
    const char *what; /* "variables", "gradients" */
} decode_ctx;

typedef struct {
    decode_ctx *ctx;
    dt_tensor_views *views;
} views_arg;

/* dt_codec_encode_buf's output: the message's own bytes, written in order,
 * with runs of tensor bytes put between them in *out. */
typedef struct {
    uint8_t *own;
    size_t own_len, own_at;
    dt_rpc_buf *out;
    dt_err *err;
} builder;

/* The read position in a message in pieces: a nanopb input stream. */
typedef struct {
    const dt_piece *piece, *end;
    size_t offset; /* into *piece */
} piece_pos;

/* ---- encoding (codec_tensor.c) ------------------------------------------ */

/* The write callback of a builder's stream (dt_codec_encode_buf), also
 * compared with a stream's callback to tell its writing pass. */
bool dt_codec_builder_write(pb_ostream_t *stream, const pb_byte_t *buf, size_t count);
/* Whether tensor t of list goes by reference. */
int dt_codec_by_ref(const dt_tensor_list *list, const dt_tensor *t);
/* The bytes of v as a varint. Inline: the push messages' scalars are
 * sized and put with it, where a call costs more than the loop. */
static inline size_t dt_codec_varint_len(uint64_t v) {
    size_t n = 1;
    for (; v >= 0x80; v >>= 7)
        n++;
    return n;
}

/* v as a varint at p; the byte after it. */
static inline uint8_t *dt_codec_put_varint(uint8_t *p, uint64_t v) {
    for (; v >= 0x80; v >>= 7)
        *p++ = (uint8_t)(v | 0x80);
    *p++ = (uint8_t)v;
    return p;
}

/* The repeated Tensor field number of list, its tags included, written by
 * hand (a sizing stream gets the length alone). */
bool dt_codec_write_tensors(pb_ostream_t *stream, const dt_tensor_list *list, uint32_t number);
/* The nanopb callback of a repeated Tensor field; arg: its dt_tensor_list. */
bool dt_codec_encode_tensors(pb_ostream_t *stream, const pb_field_t *field, void *const *arg);

/* ---- decoding (codec_tensor.c) ------------------------------------------ */

/* The read callback of a stream over a message's pieces (state: its
 * piece_pos); a tensor's data is read in place only from such a stream. */
bool dt_codec_piece_read(pb_istream_t *stream, pb_byte_t *buf, size_t count);
/* pb_decode_varint and pb_decode_varint32, a one-byte varint read in place. */
bool dt_codec_read_varint(pb_istream_t *stream, uint64_t *v);
bool dt_codec_read_varint32(pb_istream_t *stream, uint32_t *v);
/* The next field's tag, refused when its number is 0, as pb_decode refuses it. */
bool dt_codec_next_tag(pb_istream_t *stream, pb_wire_type_t *wt, uint32_t *number);
/* pb_make_string_substream, a one-byte length read in place. */
bool dt_codec_open_sub(pb_istream_t *stream, pb_istream_t *sub);
/* The nanopb callback of a repeated Tensor field (arg: its views_arg): one
 * tensor, checked, into the next view; an error is in the views_arg's ctx. */
bool dt_codec_decode_tensor(pb_istream_t *stream, const pb_field_t *field, void **arg);

#endif
