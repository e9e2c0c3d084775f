/*
 * ps_internal: what the parts of the ps (ps.c and ps_*.c, but ps_client)
 * share, and nothing else includes: `struct dt_ps`, the types its fields
 * and the parts' calls hold, and the few helpers one part calls in
 * another. Each helper is described where it is defined; ps_<name> is
 * that file's <name> made visible. The invariants and the threading are
 * in ps.c's opening comment.
 */
#ifndef DT_PS_INTERNAL_H
#define DT_PS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "codec.h"
#include "optim.h"
#include "pool.h"
#include "ps.h"
#include "rpc_client.h"
#include "rpc_server.h"
#include "sparse_acc.h"
#include "table.h"
#include "tensor.h"

#define DEFAULT_THREADS 4
#define MAX_APPLY_THREADS 4
#define DEFAULT_PARALLEL_MIN_ELEMS ((int64_t)256 << 10)
/* Ranges per thread a large gradient is split in: a helper that wakes late
 * leaves the poller fewer to wait for (see pool.h). */
#define RANGES_PER_THREAD 4
#define MAX_RANGES (MAX_APPLY_THREADS * RANGES_PER_THREAD)

/* Who decides a sync step: alone (one ps task, or not sync), ps 0 for
 * every task, or a task that applies what ps 0 decided. */
enum sync_role { SYNC_ALONE = 0, SYNC_DECIDER, SYNC_FOLLOWER };

/* A training task's last push, by its id: what a retry of it is told. */
typedef struct {
    uint64_t id; /* 0: none */
    int64_t global_step;
    bool dropped;
} push_memo;
#define DEFAULT_LINGER_MS 10000
#define RATE_SAMPLES 11 /* one a second: Status's steps/s is over the last 10 s */

/* One buffer of a variable's values, or a snapshot of a slot being sent.
 * refs counts the ps's own reference (a variable's current or spare
 * buffer) and one per message being sent from it (dt_rpc_ref); at zero it
 * is freed, so a message may outlive the ps's use of it. A buffer some
 * message reads never changes: the next update of its variable writes
 * elsewhere (see writable). */
typedef struct {
    atomic_int refs;
    size_t nbytes;
    float *data; /* values: (nbytes / 4) floats */
    _Alignas(64) float values[];
} var_buf;

typedef struct {
    pthread_mutex_t mu;
    int64_t updates;                       /* applied to this variable, for Adam's t */
    float *slots[DT_OPTIM_MAX_SLOTS];      /* slot_buf[s]->data (slots.items' too) */
    var_buf *slot_buf[DT_OPTIM_MAX_SLOTS]; /* updated in place: a checkpoint's pull
                                              sending one holds updates back */
    var_buf *cur;                          /* the values (vars.items[k].data points in it) */
    var_buf *spare;                        /* the values before, kept for the next update to
                                              write into once no message reads them; or NULL */
} ps_var;

/* One training task's liveness, for a worker that waits for the others
 * (Status's WorkerActivity). Under stats_mu. */
typedef struct {
    struct timespec at; /* its last call of any kind (valid once called) */
    int called;
    int passes_done; /* said by a Status of its; cleared by its next push */
} worker_heard;

struct dt_ps {
    dt_ps_params params;
    char name[64]; /* "ps:0 localhost:1681", for messages */
    uint64_t incarnation;
    dt_rpc_server *server;

    pthread_rwlock_t model_lock; /* write: Create; read: everything else */
    int built;                   /* a model exists: ready, or its tables' rows are being restored */
    int ready;        /* built, and no restore of rows pending: Pull and Push are served */
    dt_tensors vars;  /* the model's variables on this ps */
    dt_tensors slots; /* optimizer slots, num_slots per variable */
    ps_var *pv;       /* (vars.count) */
    /* The sparse variables: every ps task has each table, holding the rows
     * placed on it (dt_table_shard_of(id, num_ps) == task_index). */
    dt_table *tables[DT_MAX_TABLES]; /* (num_tables) */
    int num_tables;
    dt_table_evict_policy eviction;  /* all 0: rows are never dropped */
    _Atomic int64_t next_evict_step; /* the step of the next sweep */
    dt_optim_config optim;
    int64_t max_steps;
    int64_t step_ceiling; /* seen_step never raises global_step past it */
    char model[DT_MSG_MODEL_MAX];
    int64_t num_bytes;

    dt_lr_schedule schedule;
    dt_consistency consistency;

    _Atomic int64_t global_step;
    _Atomic int64_t pushes_applied;
    _Atomic int64_t pushes_rejected;
    _Atomic int64_t pushes_dropped;
    _Atomic int64_t pushes_nonfinite;
    _Atomic int64_t updates_nonfinite; /* updates refused (or skipped) as not finite */
    _Atomic int64_t pulls_served;      /* Pull calls answered, with or without variables */
    _Atomic int64_t ckpt_pulls;        /* of them, with the slots: a chief's save reading */
    _Atomic int64_t pushes_retried;    /* retries of a push already taken: answered, not applied */
    _Atomic int64_t calls_refused;     /* by the handlers (DT_EPERM); the server counts its own */
    int skip_nonfinite;                /* skip and count non-finite gradients instead of refusing */
    /* Large gradients checked and applied by ranges (see dt_ps_params). */
    dt_pool *pool; /* NULL: every push on its poller alone */
    int64_t parallel_min_elems;
    int apply_threads;
    atomic_int pushes_active; /* pushes being handled now */

    /* Staleness of applied gradients (global step at apply minus the step
     * they were computed at), and the bounded mode's clocks. */
    pthread_mutex_t stats_mu;
    int64_t staleness_counts[DT_STALENESS_BUCKETS];
    int64_t *clock;             /* (num_workers) pushes applied per worker */
    struct timespec *last_push; /* (num_workers) when each last pushed */
    int64_t *pushes_from;       /* (num_workers) pushes taken from each, for Status */
    push_memo *memo;            /* (num_workers) each one's last push id and its outcome */
    struct timespec *pushed_at; /* (num_workers) when each last pushed, any mode */
    /* Global step samples, one a second (dt_ps_wait), for Status's rate. */
    int64_t rate_step[RATE_SAMPLES];
    struct timespec rate_at[RATE_SAMPLES];
    int rate_count, rate_next;
    int *seen;           /* (num_workers) has pushed at least once */
    worker_heard *heard; /* (num_workers) liveness, for a waiting worker */
    int32_t max_lead;

    /* sync: the gradients of the current step, summed. */
    pthread_mutex_t sync_mu;
    dt_tensors acc;            /* same layout as vars */
    int acc_count;             /* gradients in acc */
    int64_t acc_step;          /* the step they belong to */
    int *acc_from;             /* (num_workers) contributed to acc_step */
    struct timespec acc_first; /* arrival of the first gradient of acc_step */
    /* sync with several ps tasks: ps 0 decides which gradients make each
     * step (from the commits it counts); the others hold each worker's
     * gradient apart until a caller passes the decision on. */
    int sync_role;            /* sync_role */
    dt_sync_decision decided; /* decider: the last step it decided */
    dt_tensors *hold;         /* follower: (num_workers) made at a worker's first push */
    int *held;                /* follower: (num_workers) hold[w] is for acc_step */
    uint64_t sync_digest;     /* FNV-1a over (step, members) of every step applied */
    /* sync with tables: each table's rows pushed for the current step (the
     * dense acc's counterpart), summed by id when the step is applied; a
     * follower holds each worker's rows apart as it holds its dense
     * gradient: row_hold[w * DT_MAX_TABLES + t]. */
    dt_sparse_acc row_acc[DT_MAX_TABLES];
    dt_sparse_grad *row_hold; /* follower: (num_workers * DT_MAX_TABLES) */
    dt_table_batch row_batch; /* the summed ids, planned */

    pthread_mutex_t life_mu;
    int shutdown_requested;
    int training_stopped;       /* early stopping: done, serving until the Shutdown */
    char job_id[DT_JOB_ID_MAX]; /* the job this ps knows of; empty: none yet */
    struct timespec shutdown_at;
    int *worker_told_done;            /* (num_workers) */
    char failure[DT_MSG_FAILURE_MAX]; /* non-empty: the job failed (the chief's reason) */
    char **worker_failure;            /* (num_workers) under stats_mu: why each left, or NULL */

    /* While no chief has created the model: the other ps tasks, asked now
     * and then whether the job is already done (a ps restarted after the
     * end would otherwise wait for a chief that never comes). */
    dt_rpc_channel **peers;          /* (num_ps) made at the first ask; NULL for this task */
    dt_rpc_call *peer_calls;         /* (num_ps) */
    int *peer_of;                    /* (num_ps) the task of each call */
    char identity[DT_PEER_NAME_MAX]; /* "ps:N", the token this ps sends */
    struct timespec peers_asked;
    struct timespec started;
};

/* One table's part of a push, checked: its ids copied out of the message
 * (the plan and the stripes' lookups read them many times), its gradient
 * rows left where they arrived and applied from there (dt_table_apply_span),
 * copied only when they must outlive the message (sync's accumulators). */
typedef struct {
    int table;      /* index in ps->tables */
    int64_t n;      /* rows */
    int64_t *ids;   /* (n) sorted, unique, owned by this task */
    dt_span grads;  /* (n, D) floats in the message */
    dt_piece whole; /* grads' one piece when the tensor lies in one */
    float *rows;    /* (n, D): a copy of grads, once taken (sync) */
    dt_table_batch batch;
} sparse_part;

/* accumulate's answer for a gradient that completed a step whose update
 * would not have been finite (the step passed, nothing applied). */
#define USED_NOT_FINITE 2

/* ps.c */
int ps_done_locked(dt_ps *ps);
int ps_check_done(dt_ps *ps, int32_t worker);
int ps_check_failed(dt_ps *ps, int32_t worker, const char *what, dt_err *err);
int ps_job_failed(dt_ps *ps);
int ps_check_caller(dt_ps *ps, const dt_rpc_peer *peer, int32_t worker, const char *method,
                    dt_err *err);
int ps_encode_reply(dt_msg_type type, const void *msg, dt_rpc_buf *reply, dt_err *err);

/* ps_store.c */
void ps_var_buf_unref(void *arg);
var_buf *ps_writable(dt_ps *ps, int k);
void ps_slots_writable(dt_ps *ps, int k);
void ps_make_current(dt_ps *ps, int k, var_buf *to);
void ps_lock_var(void *ctx, int index, int acquire);
int ps_ref_var(void *ctx, int index, dt_rpc_ref *out, dt_err *err);
void ps_free_model(dt_ps *ps);
int64_t ps_evict_interval(const dt_table_evict_policy *e);
void ps_learn_job_id(dt_ps *ps, const char *id, const char *from);
int ps_handle_create(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request,
                     dt_rpc_buf *reply, dt_err *err);

/* ps_pull.c */
int64_t ps_min_live_clock_locked(dt_ps *ps, int64_t fallback);
int ps_must_wait(dt_ps *ps, int32_t worker, int64_t min_global_step, int include_slots);
int ps_handle_pull(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request, dt_rpc_buf *reply,
                   dt_err *err);

/* ps_push.c */
void ps_record_staleness(dt_ps *ps, int64_t staleness);
size_t ps_first_bad_update(dt_ps *ps, int k, double lr, const dt_span *grad);
int ps_refuse_update(dt_ps *ps, const char *what, const char *name, const dt_span *grad, size_t bad,
                     double lr, int *nonfinite, int *overflow, dt_err *err);
void ps_apply_one(dt_ps *ps, int k, double lr, const dt_span *grad);
void ps_count_not_finite(dt_ps *ps, const dt_err *why);
void ps_lock_all_vars(dt_ps *ps);
void ps_unlock_all_vars(dt_ps *ps);
int ps_handle_push(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request, dt_rpc_buf *reply,
                   dt_err *err);

/* ps_sync.c */
void ps_drop_rows_locked(dt_ps *ps);
void ps_reset_step_locked(dt_ps *ps, int64_t step);
void ps_raise_step(dt_ps *ps, int64_t seen);
int ps_follow_decision(dt_ps *ps, const dt_sync_decision *d, dt_err *err);
int ps_accumulate(dt_ps *ps, const dt_msg_push_req *req, const int *index, sparse_part *parts,
                  int nparts, dt_err *err);
void ps_sync_timeout_check(dt_ps *ps);

/* ps_rows.c */
void ps_sparse_parts_deinit(sparse_part *parts, int count);
int ps_take_rows(dt_ps *ps, sparse_part *part, dt_err *err);
int ps_check_sparse(dt_ps *ps, const dt_msg_push_req *req, sparse_part *parts, int *count,
                    int *nonfinite, dt_err *err);
void ps_maybe_evict(dt_ps *ps, int64_t step);
void ps_apply_sparse(dt_ps *ps, sparse_part *parts, int count, int64_t step);
int ps_check_rows(dt_ps *ps, sparse_part *parts, int count, double lr, int *overflow, dt_err *err);
int ps_handle_sparse_pull(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request,
                          dt_rpc_buf *reply, dt_err *err);
int ps_handle_sparse_export(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request,
                            dt_rpc_buf *reply, dt_err *err);
int ps_handle_sparse_import(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request,
                            dt_rpc_buf *reply, dt_err *err);

/* ps_status.c */
void ps_note_call(dt_ps *ps, int32_t worker);
void ps_note_push(dt_ps *ps, int32_t worker);
void ps_count_taken(dt_ps *ps, int32_t worker);
void ps_sample_rate(dt_ps *ps);
int ps_handle_status(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request,
                     dt_rpc_buf *reply, dt_err *err);
int ps_handle_shutdown(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request,
                       dt_rpc_buf *reply, dt_err *err);
int ps_handle_health(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request,
                     dt_rpc_buf *reply, dt_err *err);

#endif
