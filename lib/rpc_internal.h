/*
 * rpc_internal: helpers shared by rpc_common.c, rpc_server.c and rpc_client.c.
 * Only rpc_*.c include this header (it carries gRPC types).
 */
#ifndef DT_RPC_INTERNAL_H
#define DT_RPC_INTERNAL_H

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/status.h>

#include "rpc_common.h"

/* The one mapping between dtrain error codes and gRPC status codes. */
grpc_status_code dt_rpc_status_from_err(int code);
int dt_rpc_err_from_status(grpc_status_code status);
const char *dt_rpc_status_name(grpc_status_code status);

/* A byte buffer that references b's storage (no copy); caller destroys it. */
grpc_byte_buffer *dt_rpc_buf_to_byte_buffer(const dt_rpc_buf *b);
/* Moves a received byte buffer's bytes into b in one run (one copy only
 * when gRPC holds them in several slices). bb may be NULL (empty message);
 * the caller still destroys it. */
int dt_rpc_buf_from_byte_buffer(grpc_byte_buffer *bb, dt_rpc_buf *b, dt_err *err);
/* Makes b the received message bb read in place, in pieces (b->data when
 * it is one run). Takes bb over, also on failure. bb may be NULL. */
int dt_rpc_buf_from_byte_buffer_pieces(grpc_byte_buffer *bb, dt_rpc_buf *b, dt_err *err);

/* Reads a whole PEM file into a NUL-terminated heap string (*out, caller
 * frees). what names the file's purpose in errors ("--tls-cert"). */
int dt_rpc_read_pem(const char *path, const char *what, char **out, dt_err *err) DT_WARN_UNUSED;

/* Generation counter bumped by dt_rpc_reload_certs. */
int dt_rpc_cert_generation(void);

/* How many times a gRPC listener in this process has given up accepting
 * (gRPC logged "Failed accept4", e.g. out of descriptors). Thread-safe. */
int dt_rpc_accept_failures(void);

/* Metadata keys: the bearer token, and the identity a client claims (trusted
 * only with a shared token). */
#define DT_RPC_MD_AUTHORIZATION "authorization"
#define DT_RPC_MD_IDENTITY "dtrain-identity"

/* A slice's bytes as a NUL-terminated string, truncated to cap. */
void dt_rpc_slice_to_str(grpc_slice s, char *out, size_t cap);

/* ThreadSanitizer and the completion queue. gRPC's libraries are not built
 * with TSan, so it cannot see the synchronization inside them (absl::Mutex,
 * the queue's own atomics): a call's state written by the thread that hands
 * its tag to gRPC (grpc_call_start_batch, grpc_server_request_call) and read
 * by the poller that gets the tag back from grpc_completion_queue_next would
 * look like a race. The handing thread releases the tag just before the
 * call that may complete it elsewhere; the poller acquires it as it takes
 * it. Empty in other builds. */
#if defined(__SANITIZE_THREAD__)
#define DT_RPC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DT_RPC_TSAN 1
#endif
#endif
#ifdef DT_RPC_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define DT_RPC_TAG_RELEASE(tag) __tsan_release(tag)
#define DT_RPC_TAG_ACQUIRE(tag) __tsan_acquire(tag)
#else
#define DT_RPC_TAG_RELEASE(tag) ((void)(tag))
#define DT_RPC_TAG_ACQUIRE(tag) ((void)(tag))
#endif

#endif
