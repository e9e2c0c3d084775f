/*
 * rpc_client: unary gRPC calls to ps tasks, many in flight at once.
 *
 * A channel is one peer address; it reconnects by itself (with a short
 * backoff, so a restarted peer is found again within about a second). Calls
 * always carry a deadline. dt_rpc_call_all starts every call in a batch on
 * one completion queue and then waits for all, so a worker talks to all its
 * ps shards concurrently.
 *
 * Threading: a channel may be shared by threads; one dt_rpc_call_all
 * invocation belongs to the calling thread.
 */
#ifndef DT_RPC_CLIENT_H
#define DT_RPC_CLIENT_H

#include "err.h"
#include "rpc_common.h"

typedef struct dt_rpc_channel dt_rpc_channel;

/* Creates a channel to addr ("host:port"); does not connect yet. */
int dt_rpc_channel_new(const char *addr, dt_rpc_channel **out, dt_err *err) DT_WARN_UNUSED;
void dt_rpc_channel_free(dt_rpc_channel *ch); /* NULL is a no-op */
/* The address given at creation (borrowed). */
const char *dt_rpc_channel_addr(const dt_rpc_channel *ch);

typedef struct {
    dt_rpc_channel *channel;  /* borrowed */
    const char *method;       /* "/dtrain.ParameterServer/Pull" */
    const dt_rpc_buf *request; /* borrowed */
    int wait_for_ready;       /* 1: wait for the peer until the deadline instead of
                                 failing fast when it is down */
    dt_rpc_buf response;      /* out: the reply on success; caller releases */
    dt_err err;               /* out: this call's outcome */
} dt_rpc_call;

/*
 * Runs n calls concurrently with a deadline of timeout_ms each. Returns 0
 * when every call succeeded; otherwise the code of the first failed call,
 * with err holding "<addr> <method>: <reason>". Each call's own err and
 * response are set either way. Peer errors come back as dtrain codes
 * (DT_EUNAVAILABLE, DT_EDEADLINE, DT_EINVAL, ...).
 */
int dt_rpc_call_all(dt_rpc_call *calls, int n, int timeout_ms, dt_err *err) DT_WARN_UNUSED;

#endif
