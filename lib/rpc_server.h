/*
 * rpc_server: a multi-threaded unary gRPC server over the gRPC core.
 *
 * Poller threads share one completion queue with request calls always armed
 * on it; each event of a call is handled by whichever thread takes it, one
 * at a time, so handlers for different calls run concurrently on different
 * threads. Handlers run on poller threads: they must not block for long.
 */
#ifndef DT_RPC_SERVER_H
#define DT_RPC_SERVER_H

#include "err.h"
#include "rpc_common.h"

/* Handles one request. Fills *reply (allocated with dt_rpc_buf_alloc; the
 * server sends then releases it) and returns 0, or returns a negative code
 * with err set: the client then sees the mapped gRPC status and err's
 * message. */
typedef int (*dt_rpc_handler)(void *ctx, const dt_rpc_buf *request, dt_rpc_buf *reply,
                              dt_err *err);

typedef struct {
    const char *path; /* "/dtrain.ParameterServer/Pull" */
    dt_rpc_handler handler;
} dt_rpc_method;

typedef struct {
    const char *addr;   /* "host:port" to listen on */
    int num_threads;    /* poller threads, >= 1 */
    const dt_rpc_method *methods; /* (num_methods) borrowed for the server's life */
    int num_methods;
    void *ctx;          /* passed to every handler */
} dt_rpc_server_params;

typedef struct dt_rpc_server dt_rpc_server;

/* Binds, starts the poller threads and serves. Fails (DT_EUNAVAILABLE) when
 * the address cannot be bound, e.g. it is in use. */
int dt_rpc_server_start(const dt_rpc_server_params *params, dt_rpc_server **out,
                        dt_err *err) DT_WARN_UNUSED;

/* Stops accepting calls, lets in-flight calls finish for up to grace_ms, then
 * cancels the rest, joins the threads and frees the server. NULL is a no-op.
 * Never call from a handler. */
void dt_rpc_server_stop(dt_rpc_server *server, int grace_ms);

#endif
