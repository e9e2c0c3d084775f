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

/* Creates a plaintext channel to addr ("host:port"); does not connect yet. */
int dt_rpc_channel_new(const char *addr, dt_rpc_channel **out, dt_err *err) DT_WARN_UNUSED;
/* Same, secured by sec (NULL: plaintext). With ca_file (or cert_file) the
 * channel speaks TLS and verifies the server's certificate against ca_file
 * and the host of addr (DNS name or IP address SAN); with cert_file and
 * key_file it presents that certificate (mTLS). With token_file every call
 * carries "authorization: Bearer" and the token of sec->identity (and
 * claims that identity). The files are read here, once: a rotated client
 * certificate is used by channels created afterwards. Fails with the file
 * named when one cannot be read, or when the token file has no token for
 * the identity. */
int dt_rpc_channel_new_secure(const char *addr, const dt_rpc_security *sec, dt_rpc_channel **out,
                              dt_err *err) DT_WARN_UNUSED;
void dt_rpc_channel_free(dt_rpc_channel *ch); /* NULL is a no-op */

typedef struct {
    dt_rpc_channel *channel;   /* borrowed */
    const char *method;        /* "/dtrain.ParameterServer/Pull" */
    const dt_rpc_buf *request; /* borrowed */
    int wait_for_ready;        /* 1: wait for the peer until the deadline instead of
                                  failing fast when it is down */
    int in_pieces;             /* 1: the response may be in pieces (read in place);
                                  0: it comes in one run (response.data) */
    dt_rpc_buf response;       /* out: the reply on success; caller releases */
    dt_err err;                /* out: this call's outcome */
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
