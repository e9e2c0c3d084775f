/*
 * pbref: the push messages (PushRequest, PushResponse and their Tensors)
 * written and read by nanopb itself, from the generated structs and
 * descriptors (dtrain.pb.h), as the reference the hand-written codec in
 * lib/codec.c is held to (the codec suite's differential tests, the codec
 * fuzz target). Test code only.
 *
 * Reading applies to nanopb's values the checks dtrain makes of a received
 * tensor (dt_text_check_name, dt_tensor_check_spec, its byte count, at most
 * `cap` tensors), and one protobuf rule nanopb leaves to its callbacks: a
 * message or bytes field must come length-delimited (nanopb hands a
 * callback a varint's or fixed value's bytes as if they were one).
 */
#ifndef DT_TEST_PBREF_H
#define DT_TEST_PBREF_H

#include <stddef.h>
#include <stdint.h>

#include "codec.h"

/* nanopb's encoding of msg (a dt_msg_push_req or dt_msg_push_resp, type
 * DT_MSG_PUSH_REQ or DT_MSG_PUSH_RESP): its fields copied into the
 * generated struct, its `out` tensors written through callbacks as
 * dtrain_Tensor submessages, then pb_encode. *out is a new heap buffer of
 * *len bytes (at least 1 allocated) that the caller frees. Negative with
 * err set when nanopb refuses. */
int dt_test_pb_encode(dt_msg_type type, const void *msg, uint8_t **out, size_t *len, dt_err *err);

/* nanopb's decoding of the len bytes at buf into msg, which the caller
 * zeroed and whose `in` views it set up (cap; spans are not used: every
 * view points into buf). Negative with err set for bytes nanopb refuses or
 * a tensor dtrain's checks refuse. */
int dt_test_pb_decode(dt_msg_type type, const uint8_t *buf, size_t len, void *msg, dt_err *err);

/* The field numbers of the message's nanopb descriptor, in its order, into
 * numbers[0..cap); returns how many fields it has. */
int dt_test_pb_fields(dt_msg_type type, uint32_t *numbers, int cap);

/* nanopb's encoding of the message with only its index-th field (in the
 * descriptor's order) away from its default: 1 for an integer, true, the
 * bytes 0x5a.. of a fixed field, "x" for a string, a present submessage,
 * one 1-float tensor for the Tensor field and one empty element for any
 * other callback field. *number is the field's number; *out as for
 * dt_test_pb_encode. Returns 1 (nothing made) when index is past the last
 * field. */
int dt_test_pb_encode_one(dt_msg_type type, int index, uint32_t *number, uint8_t **out, size_t *len,
                          dt_err *err);

/* 0 when two decoded push messages of type hold the same values: every
 * scalar field, and each tensor's name, dtype, shape and bytes (read with
 * dt_codec_view_copy, so views or spans alike); else -1 and why (the first
 * difference) in why[0..cap). */
int dt_test_push_same(dt_msg_type type, const void *a, const void *b, char *why, size_t cap);

/* The same for a message as sent (its `out` list) and one decoded (`in`). */
int dt_test_push_same_as_sent(dt_msg_type type, const void *sent, const void *got, char *why,
                              size_t cap);

#endif
