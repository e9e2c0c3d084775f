/*
 * rpc_server: a multi-threaded unary gRPC server over the gRPC core.
 *
 * Poller threads share one completion queue with request calls always armed
 * on it, one of them (the leader) waiting on it at a time: it runs the
 * handlers of small requests itself, and hands the queue to another poller
 * before the handler of a large one, so handlers of large requests run
 * concurrently on different threads. Handlers run on poller threads: they
 * must not block for long (a small request's handler holds up the queue).
 */
#ifndef DT_RPC_SERVER_H
#define DT_RPC_SERVER_H

#include "admission.h"
#include "err.h"
#include "rpc_common.h"

/* Handles one request from `peer` (borrowed for the call; role DT_PEER_ANY
 * when the server has no authentication). Fills *reply (allocated with
 * dt_rpc_buf_alloc; the server sends then releases it) and returns 0, or
 * returns a negative code with err set: the client then sees the mapped
 * gRPC status and err's message. */
typedef int (*dt_rpc_handler)(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request,
                              dt_rpc_buf *reply, dt_err *err);

typedef struct {
    const char *path; /* "/dtrain.ParameterServer/Pull" */
    dt_rpc_handler handler;
    /* DT_PEER_MASK()s of the roles that may call it when the server
     * authenticates its callers; others get PERMISSION_DENIED before the
     * handler runs. 0: no authenticated role may. Ignored without auth. */
    unsigned allowed_roles;
    /* 1: anyone may call it, without a token (the health check: probes
     * carry none); the handler sees an anonymous DT_PEER_ANY peer. Under
     * mTLS the caller still needs a certificate the CA signed, since the
     * TLS handshake asks for it before any call. */
    int open;
} dt_rpc_method;

/* Whether peer may call m: the check the server makes before a handler runs
 * (and dt_ps_call makes for in-process calls). Without authentication
 * (DT_PEER_ANY) every method is allowed. */
static inline int dt_rpc_method_allows(const dt_rpc_method *m, const dt_rpc_peer *peer) {
    return peer->role == DT_PEER_ANY || (m->allowed_roles & DT_PEER_MASK(peer->role)) != 0;
}

typedef struct {
    const char *addr;             /* "host:port" to listen on */
    int num_threads;              /* poller threads, >= 1 */
    const dt_rpc_method *methods; /* (num_methods) borrowed for the server's life */
    int num_methods;
    void *ctx; /* passed to every handler */
    /* 1: handlers read requests in place, in the pieces gRPC received them
     * in (request->pieces; dt_codec_decode_buf reads either form); 0: in
     * one run (request->data), copied together when it came in pieces. */
    int in_pieces;
    /* Optional (NULL: plaintext, no authentication, one warning logged).
     * cert_file + key_file: TLS; ca_file too: clients must present a
     * certificate from that CA (mTLS), whose CN or a SAN is the identity;
     * token_file: clients must send "authorization: Bearer TOKEN". */
    const dt_rpc_security *security;
    int num_workers; /* > 0: identities worker:N with N >= num_workers are refused */
    int num_ps;      /* > 0: likewise for ps:N */
    /* Resource limits, so that no client can exhaust the server (0: the
     * DT_RPC_DEFAULT_* value; negative: invalid unless said otherwise).
     * gRPC fixes them when the server starts. */
    long long max_message_bytes; /* largest request (and reply) accepted; a larger one
                                    fails with RESOURCE_EXHAUSTED; at most INT_MAX */
    int handshake_timeout_ms;    /* a connection that has not finished TLS and the
                                    HTTP/2 preface + SETTINGS by then is closed */
    int idle_timeout_ms;         /* a connection without calls for this long is closed
                                    (GOAWAY; clients reconnect); < 0: never */
    int keepalive_time_ms;       /* the server pings a connection quiet this long ... */
    int keepalive_timeout_ms;    /* ... and closes it when the ping is not answered
                                    in time (half-open peers) */
    int max_concurrent_streams;  /* calls in flight on one connection */
    long long inflight_bytes;    /* > 0: a call's request is read only while the requests
                                    read and not yet handled hold fewer bytes than this
                                    (others wait their turn, in order), so their memory
                                    stays under it plus one message; 0: no bound */
    /* Per-connection guards against HTTP/2 floods and half-sent requests
     * (admission.h; zeros: the defaults). */
    dt_adm_limits guard;
    int max_pending_calls; /* calls handed by gRPC and waiting their turn (inflight_bytes);
                              past it a new call is dropped at once (RESOURCE_EXHAUSTED);
                              0: DT_RPC_DEFAULT_MAX_PENDING_CALLS */
} dt_rpc_server_params;

/* Built-in limits. The message cap is 64 MiB of tensor bytes plus 1 MiB for
 * names, shapes and framing; a ps whose shard is larger sets
 * max_message_bytes from its flag. */
#define DT_RPC_DEFAULT_MAX_MESSAGE_BYTES ((64LL + 1) << 20)
#define DT_RPC_DEFAULT_HANDSHAKE_TIMEOUT_MS 10000
#define DT_RPC_DEFAULT_IDLE_TIMEOUT_MS (30 * 60 * 1000)
#define DT_RPC_DEFAULT_KEEPALIVE_TIME_MS 60000
#define DT_RPC_DEFAULT_KEEPALIVE_TIMEOUT_MS 20000
#define DT_RPC_DEFAULT_MAX_CONCURRENT_STREAMS 100
#define DT_RPC_DEFAULT_MAX_PENDING_CALLS 1024
/* Request headers (names and values) above which a call is refused at
 * once (RESOURCE_EXHAUSTED): gRPC's own default limit, 8 KiB; dtrain's
 * clients send under 1 KiB (a token, an identity). */
#define DT_RPC_MAX_REQUEST_MD_BYTES 8192

typedef struct dt_rpc_server dt_rpc_server;

/* Binds, starts the poller threads and serves. Fails (DT_EINVAL) on a limit
 * out of range, (DT_EUNAVAILABLE) when
 * the address cannot be bound, e.g. it is in use; DT_EIO or DT_EINVAL (the
 * message names the file) when a certificate, key or token file cannot be
 * read or parsed. *out is set before the first handler runs, so a handler
 * may use it (through its ctx); it is NULL after a failure. */
int dt_rpc_server_start(const dt_rpc_server_params *params, dt_rpc_server **out,
                        dt_err *err) DT_WARN_UNUSED;

/* Calls refused so far (unauthenticated or not allowed). Thread-safe. */
long long dt_rpc_server_refused(const dt_rpc_server *server);

/* What the connection guards closed and dropped so far (admission.h), with
 * the calls dropped for max_pending_calls added to calls_dropped.
 * Thread-safe. */
void dt_rpc_server_guard_stats(dt_rpc_server *server, dt_adm_stats *out);

/* Calls whose request waits its turn (inflight_bytes), and the bytes of
 * the requests read and not yet handled. Thread-safe. For tests: the
 * server's own queue, which no role reads. */
int dt_rpc_server_waiting(dt_rpc_server *server, long long *inflight);

/* Stops accepting calls, lets in-flight calls finish for up to grace_ms, then
 * cancels the rest, joins the threads and frees the server. NULL is a no-op.
 * Never call from a handler. */
void dt_rpc_server_stop(dt_rpc_server *server, int grace_ms);

#endif
