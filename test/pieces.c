/*
 * pieces: see pieces.h.
 */
#include "pieces.h"

#include <check.h>
#include <stdlib.h>

void dt_test_in_pieces(const uint8_t *bytes, size_t len, uint64_t seed, dt_rpc_buf *out) {
    dt_piece *pieces = calloc(len ? len : 1, sizeof *pieces);
    ck_assert_ptr_nonnull(pieces);
    int n = dt_test_cut(bytes, len, seed, 7, pieces);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_rpc_buf_received(out, pieces, n, &err) == 0, "in pieces: %s", err.msg);
    free(pieces);
}
