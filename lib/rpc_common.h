/*
 * rpc_common: what the RPC server and client share, without gRPC types.
 *
 * dt_rpc_buf is a message's bytes in storage the RPC layer can send or has
 * received without another copy (a gRPC slice underneath).
 */
#ifndef DT_RPC_COMMON_H
#define DT_RPC_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct {
    uint8_t *data; /* (len) bytes; NULL when len is 0 */
    size_t len;
    void *impl; /* owned storage; NULL for an empty buffer */
} dt_rpc_buf;

/* Allocates len bytes of sendable storage into b. */
int dt_rpc_buf_alloc(dt_rpc_buf *b, size_t len, dt_err *err) DT_WARN_UNUSED;
/* Releases b's storage and empties it; safe on an empty buffer. */
void dt_rpc_buf_release(dt_rpc_buf *b);

/* Process-wide start and stop of the RPC runtime; each call to _init must be
 * matched by one to _shutdown, except that a process about to exit may keep
 * its last reference (the last _shutdown waits for gRPC's threads, which
 * can take seconds). Thread-safe. */
void dt_rpc_init(void);
void dt_rpc_shutdown(void);

#endif
