/*
 * rpc_common: what the RPC server and client share, without gRPC types.
 *
 * dt_rpc_buf is a message's bytes in storage the RPC layer can send or has
 * received without another copy (gRPC slices underneath). A received
 * message may be read in place, in the pieces gRPC holds it in (its
 * slices: as short as a byte, at any alignment), with span.h's spans and
 * readers.
 */
#ifndef DT_RPC_COMMON_H
#define DT_RPC_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "span.h"

typedef struct {
    uint8_t *data; /* (len) bytes in one run; NULL when len is 0 or the message is
                      in pieces (then pieces holds it) */
    size_t len;    /* the message's bytes in all */
    void *impl;    /* owned storage; NULL for an empty buffer */
    /* A received message read in place, or one built with runs of other
     * memory (dt_rpc_buf_add_ref): its bytes are pieces[0..num_pieces) in
     * order, and data is NULL. (num_pieces is 0 for a buffer in one run.)
     * Read it with dt_rpc_buf_pieces. */
    const dt_piece *pieces;
    int num_pieces;
} dt_rpc_buf;

/* A run of memory a message sends without copying it. The RPC layer calls
 * release(arg) exactly once, from any thread, when gRPC no longer needs
 * the bytes (they were written, or the message was dropped); until then
 * they must not change. */
typedef struct {
    const void *data;
    size_t len;
    void (*release)(void *arg);
    void *arg;
} dt_rpc_ref;

/* b's bytes as pieces: the message's own when it is in pieces, else its
 * data as one piece stored in *one (none when b is empty). Returns how
 * many; *out points at them. */
int dt_rpc_buf_pieces(const dt_rpc_buf *b, dt_piece *one, const dt_piece **out);

/* Who called, as the server established it (see docs/security.md).
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

/* Building a message to send from its own bytes and runs of other memory
 * sent in place (dt_rpc_ref). dt_rpc_buf_alloc(b, own_len) gives the own
 * bytes (b->data: the caller keeps that pointer to write them); each
 * dt_rpc_buf_add_ref puts a run after the first `own_at` of them (own_at
 * never decreasing). With a run added, b->data is NULL, b->len counts
 * every byte of the message and b->pieces holds them (the own bytes after
 * the last run as written later). The run's release is called once the
 * buffer and every message sent from it are done with it, also when
 * adding fails. */
int dt_rpc_buf_add_ref(dt_rpc_buf *b, size_t own_at, const dt_rpc_ref *ref,
                       dt_err *err) DT_WARN_UNUSED;
/* Makes dst a message of src's bytes without copying them: it holds its
 * own references to src's storage (gRPC's slices: the received message's,
 * or src's own), so it may be sent, and outlive src. Reads like a received
 * message (dst->data when one run, else dst->pieces). An echo answers with
 * the request this way. */
int dt_rpc_buf_share(dt_rpc_buf *dst, const dt_rpc_buf *src, dt_err *err) DT_WARN_UNUSED;
/* Makes b one run of memory: a copy of every byte of a message built with
 * runs or received in pieces (their storage released); nothing for a
 * buffer that is one run already. For tests: it goes through gRPC's byte
 * buffer, which only rpc_* code may touch. */
int dt_rpc_buf_flatten(dt_rpc_buf *b, dt_err *err) DT_WARN_UNUSED;

/* Makes b the way the RPC layer hands over a message received in pieces:
 * a gRPC byte buffer of one slice per given piece (copied), read in place.
 * For tests of code that reads messages in pieces (gRPC itself splits a
 * message where its socket reads ended). */
int dt_rpc_buf_received(dt_rpc_buf *b, const dt_piece *pieces, int n, dt_err *err) DT_WARN_UNUSED;

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
