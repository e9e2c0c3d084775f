/*
 * auth: identities and bearer tokens, without gRPC types.
 *
 * An identity names a task: "chief" (worker 0), "worker:N", "ps:N", or
 * "tool" (eval, probes, operators). A token file holds either lines
 * "IDENTITY TOKEN" (per-identity tokens: the token proves the identity) or
 * one bare line "TOKEN" (shared mode: the token proves membership only and
 * the caller's claimed identity is trusted). '#' starts a comment; blank
 * lines are skipped. Tokens are compared in constant time.
 */
#ifndef DT_AUTH_H
#define DT_AUTH_H

#include <stddef.h>

#include "err.h"
#include "rpc_common.h"

#define DT_AUTH_TOKEN_MAX 256
#define DT_AUTH_MAX_ENTRIES 1024

/* Parses an identity into out (authenticated 0, name set). Returns 0, or -1
 * when text is not an identity. */
int dt_auth_parse_identity(const char *text, dt_rpc_peer *out);

/* The identity of a task: worker 0 is "chief", worker N "worker:N", ps N
 * "ps:N"; a negative worker index is "tool". */
void dt_auth_identity_of(int is_ps, int task, char *out, size_t cap);

typedef struct dt_auth_tokens dt_auth_tokens;

/* Loads a token file. Errors name path:line and what is wrong (never the
 * token). The caller frees *out with dt_auth_tokens_free. */
int dt_auth_tokens_load(const char *path, dt_auth_tokens **out, dt_err *err) DT_WARN_UNUSED;
void dt_auth_tokens_free(dt_auth_tokens *t); /* NULL is a no-op; wipes the tokens */

/* The token a client with `identity` sends (borrowed), or NULL when the
 * file has none for it. In shared mode, the shared token. */
const char *dt_auth_tokens_for(const dt_auth_tokens *t, const char *identity);

/* Checks a presented token. Per-identity mode: finds the identity whose
 * token it is and fills *peer (authenticated 1); shared mode: the token must
 * be the shared one and *peer is parsed from `claimed` (authenticated 1).
 * Every entry is compared, each in constant time. Returns 0, or one of
 * DT_AUTH_WRONG_TOKEN (no entry has this token), DT_AUTH_NO_IDENTITY (shared
 * mode: the token is right, no identity was claimed) or DT_AUTH_BAD_IDENTITY
 * (shared mode: the token is right, the claim is not an identity). */
#define DT_AUTH_WRONG_TOKEN (-1)
#define DT_AUTH_NO_IDENTITY (-2)
#define DT_AUTH_BAD_IDENTITY (-3)
int dt_auth_tokens_check(const dt_auth_tokens *t, const char *token, size_t len,
                         const char *claimed, dt_rpc_peer *peer);

/* 1 when a and b are equal (each at most DT_AUTH_TOKEN_MAX bytes);
 * time depends only on the lengths' bound, not on where they differ. */
int dt_auth_equal(const char *a, size_t a_len, const char *b, size_t b_len);

#endif
