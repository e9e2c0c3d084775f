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

/* Who called, as the server established it (see README "Security").
 * Identities: "chief" (worker 0), "worker:N", "ps:N", "tool". */
typedef enum {
    DT_PEER_ANY = 0, /* no authentication configured: anyone, as before */
    DT_PEER_CHIEF,
    DT_PEER_WORKER,
    DT_PEER_PS,
    DT_PEER_TOOL,
} dt_peer_role;

#define DT_PEER_MASK(role) (1u << (role))

#define DT_PEER_NAME_MAX 32

typedef struct {
    int role;                    /* dt_peer_role */
    int task;                    /* chief: 0; worker:N, ps:N: N; else -1 */
    int authenticated;           /* 1 when a certificate or token proved the identity */
    char name[DT_PEER_NAME_MAX]; /* "worker:2"; "anonymous" when role is ANY */
} dt_rpc_peer;

/* How a server or a channel secures its connections. Every field may be
 * NULL; all are borrowed (the files are read at start, and the server
 * re-reads its certificate files when they change on disk). */
typedef struct {
    const char *cert_file;  /* PEM certificate chain of this process; with key_file
                               a server serves TLS, a client presents it (mTLS) */
    const char *key_file;   /* PEM private key of cert_file */
    const char *ca_file;    /* PEM CA: a server requires and verifies client
                               certificates; a client verifies the server (TLS on) */
    const char *token_file; /* "IDENTITY TOKEN" lines, or one bare shared token */
    const char *identity;   /* client: whose token to send ("worker:1") */
} dt_rpc_security;

/* Allocates len bytes of sendable storage into b. */
int dt_rpc_buf_alloc(dt_rpc_buf *b, size_t len, dt_err *err) DT_WARN_UNUSED;
/* Releases b's storage and empties it; safe on an empty buffer. */
void dt_rpc_buf_release(dt_rpc_buf *b);

/* Process-wide start and stop of the RPC runtime; each call to _init must be
 * matched by one to _shutdown, except that a process about to exit may keep
 * its last reference (the last _shutdown waits for gRPC's threads, which
 * can take seconds). Thread-safe. */
void dt_rpc_init(void);

/* A random non-zero 64-bit id (/dev/urandom; the clock and pid without
 * it): a ps's incarnation, a client's first push id. Thread-safe. */
uint64_t dt_rpc_random_id(void);
void dt_rpc_shutdown(void);

/* Asks every TLS server of the process to re-read its certificate, key and
 * CA files at the next handshake even if their mtimes did not change.
 * Async-signal-safe (a SIGHUP handler may call it). */
void dt_rpc_reload_certs(void);

#endif
