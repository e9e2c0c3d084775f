/*
 * pieces: test messages as gRPC hands them over after reading a socket in
 * small, uneven chunks: one message split into short pieces (a float of a
 * tensor crosses them), each at its own address. Header-only cutting, so
 * the fuzz targets (which link no test library) share it.
 */
#ifndef DT_TEST_PIECES_H
#define DT_TEST_PIECES_H

#include <stddef.h>
#include <stdint.h>

#include "rpc_common.h"

/* Cuts len bytes into pieces of 1..max bytes in order, their lengths drawn
 * from seed; pieces has room for len. Returns how many. */
static inline int dt_test_cut(const uint8_t *bytes, size_t len, uint64_t seed, size_t max,
                              dt_piece *pieces) {
    uint64_t x = seed | 1;
    int n = 0;
    for (size_t at = 0; at < len; n++) {
        x ^= x << 13; /* xorshift64 */
        x ^= x >> 7;
        x ^= x << 17;
        size_t piece = 1 + (size_t)(x % max);
        if (piece > len - at) piece = len - at;
        pieces[n].data = bytes + at;
        pieces[n].len = piece;
        at += piece;
    }
    return n;
}

/* Makes *out the len bytes at `bytes` received in pieces of 1..7 bytes
 * (dt_test_cut; dt_rpc_buf_received: a real gRPC byte buffer, read in
 * place). Asserts on failure; the caller releases *out. */
void dt_test_in_pieces(const uint8_t *bytes, size_t len, uint64_t seed, dt_rpc_buf *out);

#endif
