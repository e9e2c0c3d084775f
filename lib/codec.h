/*
 * codec: dtrain's RPC messages (proto/dtrain.proto) to and from bytes.
 *
 * The only module that sees nanopb. Messages are plain dtrain structs; a
 * caller sizes a message, gets a buffer of exactly that size (from the RPC
 * layer, so it is sent without a copy) and encodes into it.
 *
 * Tensor payloads are never walked per element:
 *  - encoding copies each tensor's bytes once, straight into the output;
 *  - decoding yields *views* and allocates nothing: tensors land in
 *    caller-provided storage, and a tensor's bytes stay where they are in
 *    the message (valid while it lives; possibly unaligned). A received
 *    message may be in pieces (dt_rpc_buf): a tensor within one piece gets
 *    dt_tensor.data pointing at its bytes; one that crosses pieces gets
 *    data NULL, and views->spans[i] says where its bytes lie. Either way
 *    dt_codec_view_copy and dt_codec_view_reader read them.
 * The message is decoded in one pass, and every decoded field is validated
 * (dtype, shape, byte count, name) before the caller sees it.
 */
#ifndef DT_CODEC_H
#define DT_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "consistency.h"
#include "err.h"
#include "optim.h"
#include "rpc_common.h"
#include "table.h"
#include "tensor.h"

#define DT_MSG_MODEL_MAX 256
#define DT_JOB_ID_MAX 33 /* a job id: 32 hex digits and the NUL */
#define DT_MSG_REASON_MAX 256
/* A failure's reason on the wire (proto options): at most 255 bytes of
 * UTF-8 without control characters, checked at decoding. */
#define DT_MSG_FAILURE_MAX 256

/* Encoding side: a borrowed list of tensors. When lock is set, it is called
 * with acquire=1 before items[i].data is copied and acquire=0 after, so a
 * variable can be read under its own lock. When ref is set,
 * dt_codec_encode_buf sends the bytes of every tensor of at least
 * DT_CODEC_REF_MIN_BYTES without copying them: ref(ref_ctx, i, &r) gives
 * the run to send (items[i].nbytes bytes, and its release; see dt_rpc_ref)
 * or fails with a negative code and err set; lock is then not called for
 * that tensor. */
typedef struct {
    const dt_tensor *items; /* (count) borrowed */
    int count;
    void (*lock)(void *ctx, int index, int acquire);
    void *lock_ctx;
    int (*ref)(void *ctx, int index, dt_rpc_ref *out, dt_err *err);
    void *ref_ctx;
} dt_tensor_list;

/* Tensors smaller than this are copied into the message even from a list
 * with a ref hook: a copy of a few kB costs less than a slice of its own. */
#define DT_CODEC_REF_MIN_BYTES (32 * 1024)

/* Decoding side: caller storage for up to cap views. */
typedef struct {
    dt_tensor *items; /* (cap) caller-owned; data: a view of the bytes when they
                         lie in one piece of the message, else NULL */
    int count;
    int cap;
    /* (cap) caller-owned: where each tensor's bytes lie in the message. May
     * be NULL when the message is in one run (then every data is a view);
     * decoding a message in pieces without it fails when a tensor crosses
     * pieces. */
    dt_span *spans;
} dt_tensor_views;

/* Decoding side: caller storage for up to cap names. */
typedef struct {
    char (*items)[DT_TENSOR_NAME_MAX]; /* (cap) caller-owned */
    int count;
    int cap;
} dt_name_list;

typedef enum {
    DT_MSG_CREATE_REQ,
    DT_MSG_CREATE_RESP,
    DT_MSG_PULL_REQ,
    DT_MSG_PULL_RESP,
    DT_MSG_PUSH_REQ,
    DT_MSG_PUSH_RESP,
    DT_MSG_STATUS_REQ,
    DT_MSG_STATUS_RESP,
    DT_MSG_SHUTDOWN_REQ,
    DT_MSG_SHUTDOWN_RESP,
    DT_MSG_HEALTH_REQ, /* grpc.health.v1 (proto/health.proto) */
    DT_MSG_HEALTH_RESP,
    DT_MSG_SPARSE_PULL_REQ,
    DT_MSG_SPARSE_PULL_RESP,
    DT_MSG_SPARSE_EXPORT_REQ,
    DT_MSG_SPARSE_EXPORT_RESP,
    DT_MSG_SPARSE_IMPORT_REQ,
    DT_MSG_SPARSE_IMPORT_RESP,
    DT_MSG_COUNT
} dt_msg_type;

/* Every message carries its tensors twice: `out` when encoding, `in` when
 * decoding; the other side is unused. */

/* Which workers' gradients make global step `step` (proto SyncDecision). */
typedef struct {
    bool has; /* the field is present */
    int64_t step;
    bool all_held;                            /* ps 0 no longer knows: apply what is held */
    int members_len;                          /* bytes used in members */
    uint8_t members[DT_SYNC_MAX_WORKERS / 8]; /* bit w % 8 of byte w / 8: worker w */
} dt_sync_decision;

/* Most tables (sparse variables) one job has (proto options). */
#define DT_MAX_TABLES 16

/* A table as the wire describes it (proto TableSpec). init is a
 * dt_table_init; the decoder refuses a name it does not know, quoting it. */
typedef struct {
    char name[DT_TABLE_NAME_MAX];
    int64_t rows;
    int32_t dim;
    int init;
    double init_scale;
    uint64_t seed;
} dt_msg_table;

typedef struct {
    dt_tensor_list out;
    dt_tensor_views in;
    dt_tensor_list slots_out; /* "<variable>/<slot>"; may be empty */
    dt_tensor_views slots_in; /* cap 0: slots are refused */
    int64_t global_step;
    int64_t max_steps;
    dt_optim_config optim;
    dt_lr_schedule schedule;
    dt_consistency consistency;
    bool skip_nonfinite;
    int64_t step_ceiling;
    char model[DT_MSG_MODEL_MAX];
    char job_id[DT_JOB_ID_MAX];         /* 32 hex digits; empty: an older chief */
    dt_msg_table tables[DT_MAX_TABLES]; /* (num_tables) the sparse variables */
    int num_tables;
    bool tables_pending;            /* rows follow (SparseImport); not ready before the last page */
    dt_table_evict_policy eviction; /* all 0: off */
} dt_msg_create_req;

typedef struct {
    uint64_t incarnation;
    int64_t global_step;
} dt_msg_create_resp;

typedef struct {
    dt_name_list names; /* decoding; encoding sends out_names */
    const char *const *out_names;
    int out_count;
    int32_t worker;
    bool include_slots;
    int64_t min_global_step;
    int64_t seen_step;         /* highest global step the caller has seen */
    dt_sync_decision decision; /* sync, ps tasks other than 0: ps 0's, passed on */
} dt_msg_pull_req;

typedef struct {
    uint64_t incarnation;
    int64_t global_step;
    bool done;
    bool wait;                /* no variables: ask again later (sync / bounded) */
    dt_sync_decision decided; /* sync, ps 0 of several: its last decided step */
    dt_tensor_list out;
    dt_tensor_views in;
    dt_tensor_list slots_out;
    dt_tensor_views slots_in;
} dt_msg_pull_resp;

typedef struct {
    int32_t worker;
    int64_t step;
    int64_t seen_step; /* highest global step the caller has seen */
    dt_tensor_list out;
    dt_tensor_views in;
    bool pull;               /* also return the variables after the push */
    int64_t min_global_step; /* with pull: as a Pull's */
    uint64_t push_id;        /* non-zero: a retry carries the same; never applied twice */
    /* Sparse gradients: pair i is table sparse_*[i].name's ids (I64 (n))
     * and rows (F32 (n, dim)). Decoding: a cap of 0 refuses them. */
    dt_tensor_list sparse_ids_out, sparse_grads_out;
    dt_tensor_views sparse_ids_in, sparse_grads_in;
} dt_msg_push_req;

typedef struct {
    uint64_t incarnation;
    int64_t global_step;
    bool done;
    bool dropped;       /* sync: stale, not used */
    bool wait;          /* with pull: no variables, pull when it is time */
    dt_tensor_list out; /* with pull: the variables after the push */
    dt_tensor_views in; /* cap 0: variables are refused */
} dt_msg_push_resp;

typedef struct {
    int32_t worker;
    bool done_seen;                   /* the caller knows the job is done */
    char failure[DT_MSG_FAILURE_MAX]; /* non-empty: the caller failed and leaves; why */
    bool passes_done;                 /* the caller's passes over its shard are done */
    bool heartbeat;                   /* only says the caller is alive: not told the job's end */
} dt_msg_status_req;

/* Most training tasks one Status reply describes (proto options): the
 * first ones by task index that called. */
#define DT_STATUS_MAX_WORKERS 64

/* One training task as a ps saw it (proto WorkerActivity). */
typedef struct {
    int32_t worker;
    int64_t pushes;                   /* taken from it, applied or not */
    int64_t last_push_ms;             /* how long ago its last push came; -1: never */
    char failure[DT_MSG_FAILURE_MAX]; /* non-empty: it failed and left; why */
    int64_t last_seen_ms;             /* how long ago any call of its came; -1: never */
    bool passes_done;                 /* it said its passes over its shard are done */
} dt_worker_activity;

/* One table on one ps (proto TableStatus). */
typedef struct {
    char name[DT_TABLE_NAME_MAX];
    int64_t rows_held;
    int64_t nonzero;
    int64_t bytes;
} dt_msg_table_status;

typedef struct {
    uint64_t incarnation;
    bool ready;
    int64_t global_step;
    int64_t max_steps;
    bool done;
    int32_t num_variables;
    int64_t num_bytes;
    char model[DT_MSG_MODEL_MAX];
    int64_t pushes_applied;
    int64_t pushes_rejected;
    int64_t pushes_dropped;
    int64_t staleness_counts[DT_STALENESS_BUCKETS]; /* [i]: staleness i; last: >= */
    int num_staleness_counts;
    int32_t max_lead;
    char mode[16];
    int64_t pushes_nonfinite;
    int64_t updates_nonfinite; /* updates refused or skipped: a new value would not be finite */
    int64_t calls_refused;
    uint64_t sync_digest; /* sync: hash of the steps applied and their members */
    double steps_per_sec; /* global steps a second over the last ~10 s */
    int64_t uptime_ms;
    dt_worker_activity workers[DT_STATUS_MAX_WORKERS]; /* (num_workers) by task index */
    int num_workers;
    char failure[DT_MSG_FAILURE_MAX];          /* non-empty: the job failed; the chief's reason */
    dt_msg_table_status tables[DT_MAX_TABLES]; /* (num_tables) the sparse variables held */
    int num_tables;
    char job_id[DT_JOB_ID_MAX]; /* the job this ps knows of; empty: none yet */
    /* The connection guards: connections closed (flood, slow headers, over
     * the per-peer cap, address backing off) and calls dropped unread. */
    int64_t conns_closed_flood, conns_closed_slow, conns_closed_over_cap, conns_closed_backoff;
    int64_t calls_dropped;
} dt_msg_status_resp;

typedef struct {
    char reason[DT_MSG_REASON_MAX];
    char failure[DT_MSG_FAILURE_MAX]; /* non-empty: the job failed, and why */
    int stop_training;                /* early stopping: done now, serving on */
} dt_msg_shutdown_req;

typedef struct {
    int unused;
} dt_msg_shutdown_resp;

/* grpc.health.v1.HealthCheckResponse.ServingStatus */
typedef enum {
    DT_HEALTH_UNKNOWN = 0,
    DT_HEALTH_SERVING = 1,
    DT_HEALTH_NOT_SERVING = 2,
    DT_HEALTH_SERVICE_UNKNOWN = 3
} dt_health_status;

/* The services a ps answers health checks for: the server as a whole ("")
 * and the parameter-server service; any other name is NOT_FOUND, as the
 * protocol says. */
#define DT_HEALTH_SERVICE "dtrain.ParameterServer"
#define DT_HEALTH_SERVICE_MAX 128

typedef struct {
    char service[DT_HEALTH_SERVICE_MAX];
} dt_msg_health_req;

typedef struct {
    int status; /* dt_health_status */
} dt_msg_health_resp;

/* SparsePull: rows of one table. ids travel as a Tensor (I64 (n)); the
 * reply's values as one (F32 (n, dim)). Decoding: cap 1 storage each. */
typedef struct {
    int32_t worker;
    char table[DT_TABLE_NAME_MAX];
    int64_t seen_step;
    dt_tensor_list ids_out;
    dt_tensor_views ids_in;
} dt_msg_sparse_pull_req;

typedef struct {
    uint64_t incarnation;
    int64_t global_step;
    bool done;
    dt_tensor_list values_out;
    dt_tensor_views values_in;
} dt_msg_sparse_pull_resp;

/* Most rows one SparseExport page may ask for. */
#define DT_SPARSE_EXPORT_MAX_ROWS (1 << 20)

typedef struct {
    char table[DT_TABLE_NAME_MAX];
    int64_t after_id; /* rows with a greater id; -1: from the first */
    int32_t max_rows; /* 1..DT_SPARSE_EXPORT_MAX_ROWS */
    bool include_slots;
} dt_msg_sparse_export_req;

typedef struct {
    uint64_t incarnation;
    int64_t global_step;
    bool more;          /* rows remain past this page */
    dt_tensor_list out; /* "<table>/ids", "<table>/values", slots */
    dt_tensor_views in;
} dt_msg_sparse_export_resp;

typedef struct {
    char table[DT_TABLE_NAME_MAX];
    bool last;          /* the restore's last page: the ps is ready after it */
    dt_tensor_list out; /* as dt_msg_sparse_export_resp's */
    dt_tensor_views in;
} dt_msg_sparse_import_req;

typedef struct {
    int64_t rows_held;
} dt_msg_sparse_import_resp;

/* Exact encoded size of msg (a dt_msg_* matching type), or a negative code. */
int64_t dt_codec_size(dt_msg_type type, const void *msg, dt_err *err);

/* Encodes msg into buf, which must hold exactly dt_codec_size bytes. */
int dt_codec_encode(dt_msg_type type, const void *msg, uint8_t *buf, size_t len,
                    dt_err *err) DT_WARN_UNUSED;
/* Sizes msg and encodes it into a new buffer *out to send: the tensors of
 * lists with a ref hook (of DT_CODEC_REF_MIN_BYTES or more) as runs sent in
 * place, the rest copied. On failure *out is empty and every run taken so
 * far released. */
int dt_codec_encode_buf(dt_msg_type type, const void *msg, dt_rpc_buf *out,
                        dt_err *err) DT_WARN_UNUSED;

/* Decodes len bytes into msg. The caller zeroes msg and sets up the `in` /
 * `names` storage first. Tensor views point into buf. On error msg's
 * contents are unspecified and err says which field was wrong. */
int dt_codec_decode(dt_msg_type type, const uint8_t *buf, size_t len, void *msg,
                    dt_err *err) DT_WARN_UNUSED;
/* The same for a message in one run or in pieces (as received); views
 * point into b's bytes, so b must outlive them. */
int dt_codec_decode_buf(dt_msg_type type, const dt_rpc_buf *b, void *msg,
                        dt_err *err) DT_WARN_UNUSED;

/* Copies decoded tensor i's bytes (items[i].nbytes of them) to dst. */
void dt_codec_view_copy(const dt_tensor_views *views, int i, void *dst);
/* A reader of decoded tensor i's bytes in elements of its dtype. */
void dt_codec_view_reader(const dt_tensor_views *views, int i, dt_span_reader *r);
/* Tensor i of views as a span of the message it was decoded from; *one
 * holds its piece when it lies in one run (the span points at it). */
dt_span dt_codec_view_span(const dt_tensor_views *views, int i, dt_piece *one);

/* The service's method paths on the wire (proto/dtrain.proto's
 * ParameterServer), the one place they are spelled: the ps's method table
 * and dt_codec_method use these. */
#define DT_METHOD_CREATE "/dtrain.ParameterServer/Create"
#define DT_METHOD_PULL "/dtrain.ParameterServer/Pull"
#define DT_METHOD_PUSH "/dtrain.ParameterServer/Push"
#define DT_METHOD_STATUS "/dtrain.ParameterServer/Status"
#define DT_METHOD_SHUTDOWN "/dtrain.ParameterServer/Shutdown"
#define DT_METHOD_HEALTH_CHECK "/grpc.health.v1.Health/Check"
#define DT_METHOD_SPARSE_PULL "/dtrain.ParameterServer/SparsePull"
#define DT_METHOD_SPARSE_EXPORT "/dtrain.ParameterServer/SparseExport"
#define DT_METHOD_SPARSE_IMPORT "/dtrain.ParameterServer/SparseImport"

/* Method path for a request type (DT_METHOD_PULL for DT_MSG_PULL_REQ), or
 * NULL for a type that is not a request. */
const char *dt_codec_method(dt_msg_type request_type);

#endif
