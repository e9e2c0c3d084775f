/*
 * rpc_auth: who may call a server (see rpc_auth.c). For the rpc_*.c files
 * only, like rpc_internal.h: its functions take gRPC's types.
 */
#ifndef DT_RPC_AUTH_H
#define DT_RPC_AUTH_H

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>

#include "err.h"
#include "rpc_common.h"

typedef struct dt_rpc_auth dt_rpc_auth; /* opaque: the TLS files, the token file */

/* The server credentials for sec (NULL: plaintext, no tokens) at addr, in
 * *out, and what the calls are checked against in *auth (the cluster's
 * num_workers and num_ps bound the task of a worker:N or ps:N). Logs what
 * the server will accept. A bad file fails with its flag's name. *auth is
 * set before anything can fail: the caller frees it (dt_rpc_auth_free) on
 * failure too, with the server it belongs to. */
int dt_rpc_auth_new(const dt_rpc_security *sec, const char *addr, int num_workers, int num_ps,
                    dt_rpc_auth **auth, grpc_server_credentials **out, dt_err *err) DT_WARN_UNUSED;
void dt_rpc_auth_free(dt_rpc_auth *a); /* NULL is a no-op */

/* Establishes who made call (nobody in particular for an open method),
 * from its certificate and its request metadata md. Returns GRPC_STATUS_OK
 * with *peer filled, or the refusal's status (UNAUTHENTICATED,
 * PERMISSION_DENIED) with err naming what was missing or wrong. */
grpc_status_code dt_rpc_auth_check(const dt_rpc_auth *a, grpc_call *call,
                                   const grpc_metadata_array *md, int open, dt_rpc_peer *peer,
                                   dt_err *err);

#endif
