/*
 * ps: variable store, update application and lifecycle of a ps task.
 *
 * Invariants:
 *  - Before Create, the ps is "not ready": Pull and Push fail with
 *    FAILED_PRECONDITION and leave nothing changed. Create happens once per
 *    ps process (a second one fails with ALREADY_EXISTS).
 *  - A push is validated completely (names, dtypes, shapes, finite values)
 *    before any variable changes, so a bad push leaves the state untouched.
 *  - Each variable is updated under its own mutex: concurrent pushes never
 *    interleave inside one variable's update.
 *  - The global step advances by exactly one per applied push; once it
 *    reaches max_steps, pushes are answered "done" and no longer applied.
 *  - The first Shutdown decides how the job ended. One that carries a
 *    failure (the chief failed permanently) makes the job failed for good:
 *    every later Create, Pull and Push is answered DT_EABORTED "job failed:
 *    <reason>", Status carries the reason, and dt_ps_wait returns
 *    DT_EABORTED once every worker has heard it or the linger is up.
 *  - A worker's own failure (a Status with failure, for its own task) is
 *    recorded and counts as "told" for the end of the job; it never ends
 *    the job. A push from that worker (restarted) clears it.
 *
 * Threading: see ps.h. The lifecycle fields (shutdown, workers told) are
 * under `life_mu`; dt_ps_wait polls them with a short sleep. A large
 * gradient's check and update may also run on the pool's helpers, by ranges
 * of elements (each element read and written by one thread), while the
 * handler that posted them waits, its variable's lock held.
 */
#include "ps.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "checkpoint.h"
#include "codec.h"
#include "job.h" /* DT_PATH_MAX: log_dir comes from the job */
#include "log.h"
#include "memstat.h"
#include "optim.h"
#include "pool.h"
#include "rpc_client.h"
#include "rpc_server.h"
#include "sparse_acc.h"
#include "table.h"
#include "tensor.h"
#include "text.h"

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
    _Atomic int64_t pulls_served;   /* Pull calls answered, with or without variables */
    _Atomic int64_t pushes_retried; /* retries of a push already taken: answered, not applied */
    _Atomic int64_t calls_refused;  /* by the handlers (DT_EPERM); the server counts its own */
    int skip_nonfinite;             /* skip and count non-finite gradients instead of refusing */
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

/* ---- helpers ----------------------------------------------------------- */

static int64_t ms_since(const struct timespec *t0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)(now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
}

/* sync: the tables' rows of the current step, and a follower's held ones,
 * dropped. */
static void drop_rows_locked(dt_ps *ps) {
    for (int t = 0; t < ps->num_tables; t++)
        dt_sparse_acc_clear(&ps->row_acc[t]);
    for (size_t i = 0; ps->row_hold && i < (size_t)ps->params.cluster->num_workers * DT_MAX_TABLES;
         i++)
        dt_sparse_grad_deinit(&ps->row_hold[i]);
}

/* sync: the step being aggregated becomes `step`, with nothing in it yet.
 * Called with sync_mu held (or before the model is ready). */
static void reset_step_locked(dt_ps *ps, int64_t step) {
    for (int k = 0; k < ps->acc.count; k++)
        memset(ps->acc.items[k].data, 0, ps->acc.items[k].nbytes);
    size_t nw = (size_t)ps->params.cluster->num_workers;
    memset(ps->acc_from, 0, sizeof(int) * nw);
    if (ps->held) memset(ps->held, 0, sizeof(int) * nw);
    drop_rows_locked(ps);
    ps->acc_count = 0;
    ps->acc_step = step;
}

/* A caller has seen the global step at `seen`: a ps restored from an older
 * checkpoint moves up to it, so no one sees the step go backwards. Only as
 * far as the chief's Create allowed (step_ceiling): a claim is not a push,
 * and believing any claim let one Pull end the job by saying 2^62. */
static void raise_step(dt_ps *ps, int64_t seen) {
    if (seen > ps->step_ceiling) seen = ps->step_ceiling;
    if (atomic_load(&ps->global_step) >= seen) return;
    if (ps->consistency.mode == DT_MODE_SYNC) {
        /* The step being aggregated moves with it. */
        pthread_mutex_lock(&ps->sync_mu);
        if (atomic_load(&ps->global_step) < seen) {
            atomic_store(&ps->global_step, seen);
            reset_step_locked(ps, seen);
        }
        pthread_mutex_unlock(&ps->sync_mu);
        return;
    }
    int64_t step = atomic_load(&ps->global_step);
    while (step < seen && !atomic_compare_exchange_weak(&ps->global_step, &step, seen)) {
    }
}

/* ---- activity, for Status ------------------------------------------------ */

/* worker (in range, allowed to speak for itself) called: it is alive now.
 * stats_mu held. */
static void heard_locked(dt_ps *ps, int32_t worker) {
    clock_gettime(CLOCK_MONOTONIC, &ps->heard[worker].at);
    ps->heard[worker].called = 1;
}

/* A call from worker that passed check_caller. */
static void note_call(dt_ps *ps, int32_t worker) {
    if (worker < 0 || worker >= ps->params.cluster->num_workers) return;
    pthread_mutex_lock(&ps->stats_mu);
    heard_locked(ps, worker);
    pthread_mutex_unlock(&ps->stats_mu);
}

/* Notes a push from worker and when it came, whatever becomes of it
 * (count_taken counts it once taken). A
 * worker that said it failed and pushes again was restarted: it is back,
 * and is to be told the job's end like the others. One that said its
 * passes were done and pushes again trains on (or was restarted): it is
 * waited for again. */
static void note_push(dt_ps *ps, int32_t worker) {
    if (worker < 0 || worker >= ps->params.cluster->num_workers) return;
    pthread_mutex_lock(&ps->stats_mu);
    clock_gettime(CLOCK_MONOTONIC, &ps->pushed_at[worker]);
    heard_locked(ps, worker);
    ps->heard[worker].passes_done = 0;
    char *failure = ps->worker_failure[worker];
    ps->worker_failure[worker] = NULL;
    pthread_mutex_unlock(&ps->stats_mu);
    if (!failure) return;
    pthread_mutex_lock(&ps->life_mu);
    ps->worker_told_done[worker] = 0;
    pthread_mutex_unlock(&ps->life_mu);
    dt_log(DT_LOG_INFO, "%s: worker %d, which had failed, is back", ps->name, (int)worker);
    free(failure);
}

/* Counts a push of worker's this ps took: applied, accumulated, dropped
 * as stale (sync), skipped as non-finite (skip_nonfinite) or answered
 * "done"; one that was refused (a non-finite gradient, a bad shape) is
 * not taken, nor is a retry of one taken already (same push id). The
 * count is how many of its batches the worker may take as done when it
 * restarts (Status's WorkerActivity.pushes; lib/worker.c, resume). */
static void count_taken(dt_ps *ps, int32_t worker) {
    if (worker < 0 || worker >= ps->params.cluster->num_workers) return;
    pthread_mutex_lock(&ps->stats_mu);
    ps->pushes_from[worker]++;
    pthread_mutex_unlock(&ps->stats_mu);
}

/* Takes a sample of the global step once a second (called from dt_ps_wait's
 * loop). */
static void sample_rate(dt_ps *ps) {
    pthread_mutex_lock(&ps->stats_mu);
    int last = (ps->rate_next + RATE_SAMPLES - 1) % RATE_SAMPLES;
    if (ps->rate_count == 0 || ms_since(&ps->rate_at[last]) >= 1000) {
        clock_gettime(CLOCK_MONOTONIC, &ps->rate_at[ps->rate_next]);
        ps->rate_step[ps->rate_next] = atomic_load(&ps->global_step);
        ps->rate_next = (ps->rate_next + 1) % RATE_SAMPLES;
        if (ps->rate_count < RATE_SAMPLES) ps->rate_count++;
    }
    pthread_mutex_unlock(&ps->stats_mu);
}

/* Fills Status's rate and per-worker activity. stats_mu held. */
static void activity_locked(dt_ps *ps, dt_msg_status_resp *resp) {
    if (ps->rate_count >= 2) {
        int newest = (ps->rate_next + RATE_SAMPLES - 1) % RATE_SAMPLES;
        int oldest = ps->rate_count < RATE_SAMPLES ? 0 : ps->rate_next;
        double secs =
            (double)(ms_since(&ps->rate_at[oldest]) - ms_since(&ps->rate_at[newest])) / 1000.0;
        int64_t steps = ps->rate_step[newest] - ps->rate_step[oldest];
        resp->steps_per_sec = secs > 0 && steps > 0 ? (double)steps / secs : 0;
    }
    int n = 0;
    for (int w = 0; w < ps->params.cluster->num_workers && n < DT_STATUS_MAX_WORKERS; w++) {
        if (!ps->pushes_from[w] && !ps->worker_failure[w] && !ps->heard[w].called) continue;
        resp->workers[n].worker = w;
        resp->workers[n].pushes = ps->pushes_from[w];
        resp->workers[n].last_push_ms =
            ps->pushed_at[w].tv_sec || ps->pushed_at[w].tv_nsec ? ms_since(&ps->pushed_at[w]) : -1;
        resp->workers[n].last_seen_ms = ps->heard[w].called ? ms_since(&ps->heard[w].at) : -1;
        resp->workers[n].passes_done = ps->heard[w].passes_done;
        if (ps->worker_failure[w])
            snprintf(resp->workers[n].failure, sizeof resp->workers[n].failure, "%s",
                     ps->worker_failure[w]);
        n++;
    }
    resp->num_workers = n;
}

static int done_locked(dt_ps *ps) {
    return ps->shutdown_requested || (ps->ready && atomic_load(&ps->global_step) >= ps->max_steps);
}

/* Whether the job is done; remembers that `worker` has now been told. */
static int check_done(dt_ps *ps, int32_t worker) {
    pthread_mutex_lock(&ps->life_mu);
    int done = done_locked(ps);
    if (done && worker >= 0 && worker < ps->params.cluster->num_workers)
        ps->worker_told_done[worker] = 1;
    pthread_mutex_unlock(&ps->life_mu);
    return done;
}

/* DT_EABORTED "job failed: <reason>" once the chief said the job failed
 * (remembering that `worker` has now heard it), else 0. `what` names the
 * call in the message. */
static int check_failed(dt_ps *ps, int32_t worker, const char *what, dt_err *err) {
    pthread_mutex_lock(&ps->life_mu);
    int failed = ps->failure[0] != '\0';
    if (failed && worker >= 0 && worker < ps->params.cluster->num_workers)
        ps->worker_told_done[worker] = 1;
    int rc =
        failed ? dt_err_set(err, DT_EABORTED, "%s: %s: job failed: %s", ps->name, what, ps->failure)
               : 0;
    pthread_mutex_unlock(&ps->life_mu);
    return rc;
}

/* Whether the chief said the job failed. */
static int job_failed(dt_ps *ps) {
    pthread_mutex_lock(&ps->life_mu);
    int failed = ps->failure[0] != '\0';
    pthread_mutex_unlock(&ps->life_mu);
    return failed;
}

/* A chief or worker identity may speak only for its own task: with a
 * certificate or a per-identity token, "worker:1" pushing as worker 2 is
 * refused. Without authentication (DT_PEER_ANY) the index is the caller's
 * word, as the README's Security section says. */
static int check_caller(dt_ps *ps, const dt_rpc_peer *peer, int32_t worker, const char *method,
                        dt_err *err) {
    if (peer->role != DT_PEER_CHIEF && peer->role != DT_PEER_WORKER) return 0;
    if (worker == peer->task) return 0;
    atomic_fetch_add(&ps->calls_refused, 1);
    return dt_err_set(err, DT_EPERM, "%s: %s: %s may not call as worker %d", ps->name, method,
                      peer->name, (int)worker);
}

/* Replies carry large variables as runs of their buffers (no copy; see
 * ref_var), small ones copied under the variable's lock. */
static int encode_reply(dt_msg_type type, const void *msg, dt_rpc_buf *reply, dt_err *err) {
    return dt_codec_encode_buf(type, msg, reply, err);
}

/* ---- variable buffers ------------------------------------------------------ */

static var_buf *var_buf_new(size_t nbytes) {
    /* The values follow the header, 64-byte aligned like the header itself
     * (sizeof rounds up to the values' alignment). */
    size_t total = sizeof(var_buf) + (nbytes + 63) / 64 * 64;
    var_buf *b = dt_aligned_alloc(64, total);
    if (!b) return NULL;
    atomic_init(&b->refs, 1);
    b->nbytes = nbytes;
    b->data = b->values;
    return b;
}

/* Drops one reference (the release of a run in a sent message, from any
 * thread, or the ps's own). */
static void var_buf_unref(void *arg) {
    var_buf *b = arg;
    if (b && atomic_fetch_sub(&b->refs, 1) == 1) free(b);
}

/* Whether a message being sent reads b (more references than the ps's). */
static int var_buf_read(var_buf *b) {
    return atomic_load(&b->refs) > 1;
}

#define WRITABLE_WAIT_MS 10000

/* Where the next values of variable k go (its lock held): its current
 * buffer when no message reads it, else the spare once no message reads
 * that, else a new buffer, which becomes the spare's place. Without memory
 * for one it waits for the messages to be sent (the update cannot fail
 * halfway through a push), then as a last resort writes in place. */
static var_buf *writable(dt_ps *ps, int k) {
    ps_var *pv = &ps->pv[k];
    if (!var_buf_read(pv->cur)) return pv->cur;
    if (pv->spare && !var_buf_read(pv->spare)) {
        var_buf *to = pv->spare;
        pv->spare = NULL;
        return to;
    }
    var_buf *to = var_buf_new(pv->cur->nbytes);
    if (to) {
        var_buf_unref(pv->spare); /* freed once its messages are sent */
        pv->spare = NULL;
        return to;
    }
    for (int ms = 0; var_buf_read(pv->cur) && ms < WRITABLE_WAIT_MS; ms++)
        nanosleep(&(struct timespec){0, 1000000L}, NULL);
    if (var_buf_read(pv->cur))
        dt_log(DT_LOG_WARN, "%s: %s: no memory for new values, updated in place under a reply",
               ps->name, ps->vars.items[k].name);
    return pv->cur;
}

#define SLOT_WAIT_MS 250

/* Whether a message being sent reads one of pv's slots. */
static int slots_read(ps_var *pv, int nslots) {
    for (int s = 0; s < nslots; s++)
        if (var_buf_read(pv->slot_buf[s])) return 1;
    return 0;
}

/* Makes variable k's slots safe to update in place (its lock held): while
 * a message being sent reads one (a checkpoint's pull), waits for it to be
 * sent, letting go of the lock meanwhile (so the rest of that pull can be
 * made), for up to SLOT_WAIT_MS; past that the slot is copied and the copy
 * updated instead (a slow reader costs memory, not time). */
static void slots_writable(dt_ps *ps, int k) {
    ps_var *pv = &ps->pv[k];
    int nslots = dt_optim_num_slots(&ps->optim);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (slots_read(pv, nslots) && ms_since(&t0) < SLOT_WAIT_MS) {
        pthread_mutex_unlock(&pv->mu);
        nanosleep(&(struct timespec){0, 200000L}, NULL);
        pthread_mutex_lock(&pv->mu);
    }
    for (int s = 0; s < nslots; s++) {
        var_buf *old = pv->slot_buf[s];
        var_buf *copy = var_buf_read(old) ? var_buf_new(old->nbytes) : NULL;
        if (!copy) continue; /* not read; or no memory: in place after all */
        memcpy(copy->data, old->data, old->nbytes);
        pv->slot_buf[s] = copy;
        pv->slots[s] = copy->data;
        ps->slots.items[k * nslots + s].data = copy->data;
        var_buf_unref(old); /* freed once sent */
    }
}

/* Makes `to` variable k's current buffer after an update wrote it (its
 * lock held); the old one becomes the spare. */
static void make_current(dt_ps *ps, int k, var_buf *to) {
    ps_var *pv = &ps->pv[k];
    if (to == pv->cur) return;
    DT_ASSERT(!pv->spare);
    pv->spare = pv->cur;
    pv->cur = to;
    ps->vars.items[k].data = to->data;
}

static void lock_var(void *ctx, int index, int acquire) {
    dt_ps *ps = ctx;
    if (acquire)
        pthread_mutex_lock(&ps->pv[index].mu);
    else
        pthread_mutex_unlock(&ps->pv[index].mu);
}

/* The dt_tensor_list ref hook of variables: the current buffer, sent in
 * place; an update meanwhile writes elsewhere. */
static int ref_var(void *ctx, int index, dt_rpc_ref *out, dt_err *err) {
    (void)err;
    dt_ps *ps = ctx;
    ps_var *pv = &ps->pv[index];
    pthread_mutex_lock(&pv->mu);
    var_buf *b = pv->cur;
    atomic_fetch_add(&b->refs, 1);
    pthread_mutex_unlock(&pv->mu);
    *out = (dt_rpc_ref){b->data, b->nbytes, var_buf_unref, b};
    return 0;
}

/* A named subset of the variables: items are copies of their views, and
 * index maps a position back to its variable. */
typedef struct {
    dt_ps *ps;
    dt_tensor *items;
    int index[DT_MODEL_PULL_NAMES_MAX];
} subset_lock;

/* Under the variable's lock the copy's data is its current buffer again:
 * an update since the copy may have moved it. */
static void lock_subset_var(void *ctx, int index, int acquire) {
    subset_lock *sl = ctx;
    lock_var(sl->ps, sl->index[index], acquire);
    if (acquire) sl->items[index].data = sl->ps->vars.items[sl->index[index]].data;
}

static int ref_subset_var(void *ctx, int index, dt_rpc_ref *out, dt_err *err) {
    subset_lock *sl = ctx;
    return ref_var(sl->ps, sl->index[index], out, err);
}

/* Slot k belongs to variable k / num_slots: read it under that lock. */
static void lock_slot(void *ctx, int index, int acquire) {
    dt_ps *ps = ctx;
    lock_var(ps, index / dt_optim_num_slots(&ps->optim), acquire);
}

/* The ref hook of slots (only the chief's checkpoint pull asks for them):
 * the slot's own buffer, sent in place, no copy. Slots are updated in
 * place, so an update of the variable waits until the message is sent
 * (slots_writable). */
static int ref_slot(void *ctx, int index, dt_rpc_ref *out, dt_err *err) {
    (void)err;
    dt_ps *ps = ctx;
    int nslots = dt_optim_num_slots(&ps->optim);
    ps_var *pv = &ps->pv[index / nslots];
    pthread_mutex_lock(&pv->mu);
    var_buf *b = pv->slot_buf[index % nslots];
    atomic_fetch_add(&b->refs, 1);
    pthread_mutex_unlock(&pv->mu);
    *out = (dt_rpc_ref){b->data, b->nbytes, var_buf_unref, b};
    return 0;
}

static void free_model(dt_ps *ps) {
    if (ps->pv) {
        for (int i = 0; i < ps->vars.count; i++) {
            pthread_mutex_destroy(&ps->pv[i].mu);
            var_buf_unref(ps->pv[i].cur); /* a buffer a message reads lives on */
            var_buf_unref(ps->pv[i].spare);
            for (int s = 0; s < DT_OPTIM_MAX_SLOTS; s++)
                var_buf_unref(ps->pv[i].slot_buf[s]);
        }
        free(ps->pv);
        ps->pv = NULL;
    }
    dt_tensors_deinit(&ps->vars);
    dt_tensors_deinit(&ps->slots);
    dt_tensors_deinit(&ps->acc);
    for (int w = 0; ps->hold && w < ps->params.cluster->num_workers; w++)
        dt_tensors_deinit(&ps->hold[w]);
    free(ps->hold);
    free(ps->held);
    ps->hold = NULL;
    ps->held = NULL;
    drop_rows_locked(ps);
    for (int i = 0; i < ps->num_tables; i++) {
        dt_sparse_acc_deinit(&ps->row_acc[i]);
        dt_table_free(ps->tables[i]);
    }
    free(ps->row_hold);
    ps->row_hold = NULL;
    dt_table_batch_deinit(&ps->row_batch);
    ps->num_tables = 0;
    ps->built = 0;
}

/* ---- Create ------------------------------------------------------------ */

/* Builds the variable and slot stores from validated views; ps->optim set. */
static int build_model(dt_ps *ps, const dt_tensor_views *in, dt_err *err) {
    int rc;
    /* The variables' specs; their values live in var_bufs (below). */
    ps->vars.items = dt_calloc(in->count ? (size_t)in->count : 1, sizeof *ps->vars.items);
    if (!ps->vars.items) return dt_err_set(err, DT_ENOMEM, "%s: create: out of memory", ps->name);
    ps->vars.count = in->count;
    for (int i = 0; i < in->count; i++) {
        ps->vars.items[i] = in->items[i];
        ps->vars.items[i].data = NULL;
    }
    if (ps->consistency.mode == DT_MODE_SYNC &&
        (rc = dt_tensors_init(&ps->acc, in->items, in->count, err)) < 0)
        return rc;
    if (ps->sync_role == SYNC_FOLLOWER) {
        /* The gradients themselves come at each worker's first push. */
        size_t nw = (size_t)ps->params.cluster->num_workers;
        ps->hold = dt_calloc(nw + 1, sizeof *ps->hold);
        ps->held = dt_calloc(nw + 1, sizeof *ps->held);
        if (!ps->hold || !ps->held)
            return dt_err_set(err, DT_ENOMEM, "%s: create: out of memory", ps->name);
    }
    /* The slots' specs, "<variable>/<slot>"; their values live in var_bufs
     * too (below), which a checkpoint's pull sends in place. */
    int nslots = dt_optim_num_slots(&ps->optim);
    int nspecs = in->count * nslots;
    dt_tensor *specs = dt_calloc(nspecs ? (size_t)nspecs : 1, sizeof *specs);
    if (!specs) return dt_err_set(err, DT_ENOMEM, "%s: create: out of memory", ps->name);
    ps->slots.items = specs;
    ps->slots.count = nspecs;
    for (int i = 0; i < in->count; i++)
        for (int s = 0; s < nslots; s++) {
            dt_tensor *sp = &specs[i * nslots + s];
            *sp = in->items[i];
            sp->data = NULL;
            /* "<variable>/<slot>": fits, as checked at Create. */
            const char *slot = dt_optim_slot_name(&ps->optim, s);
            size_t n = strlen(in->items[i].name), m = strlen(slot);
            DT_ASSERT(n + 1 + m < sizeof sp->name);
            memcpy(sp->name, in->items[i].name, n);
            sp->name[n] = '/';
            memcpy(sp->name + n + 1, slot, m + 1);
        }

    ps->pv = dt_calloc(in->count ? (size_t)in->count : 1, sizeof *ps->pv);
    if (!ps->pv) return dt_err_set(err, DT_ENOMEM, "%s: create: out of memory", ps->name);
    ps->num_bytes = 0;
    for (int i = 0; i < in->count; i++) {
        dt_tensor *v = &ps->vars.items[i];
        pthread_mutex_init(&ps->pv[i].mu, NULL);
        if (!(ps->pv[i].cur = var_buf_new(v->nbytes)))
            return dt_err_set(err, DT_ENOMEM, "%s: create: out of memory", ps->name);
        v->data = ps->pv[i].cur->data;
        dt_codec_view_copy(in, i, v->data);
        ps->num_bytes += (int64_t)v->nbytes;
        int64_t n = dt_tensor_numel(v);
        for (int s = 0; s < nslots; s++) {
            var_buf *b = var_buf_new(v->nbytes);
            if (!b) return dt_err_set(err, DT_ENOMEM, "%s: create: out of memory", ps->name);
            ps->pv[i].slot_buf[s] = b;
            float init = dt_optim_slot_init(&ps->optim, s);
            for (int64_t k = 0; k < n; k++)
                b->data[k] = init;
            ps->pv[i].slots[s] = b->data;
            ps->slots.items[i * nslots + s].data = b->data;
        }
    }
    return 0;
}

/* Copies given slot values ("<variable>/<slot>") over the initial ones. */
static int restore_slots(dt_ps *ps, const dt_tensor_views *given, dt_err *err) {
    for (int i = 0; i < given->count; i++) {
        const dt_tensor *g = &given->items[i];
        dt_tensor *slot = dt_tensors_find(&ps->slots, g->name);
        if (!slot)
            return dt_err_set(err, DT_EINVAL, "%s: create: slot %s matches no variable's %s slots",
                              ps->name, g->name, dt_optim_name(ps->optim.kind));
        if (g->dtype != slot->dtype || g->nbytes != slot->nbytes || g->ndim != slot->ndim ||
            memcmp(g->shape, slot->shape, sizeof(int64_t) * (size_t)slot->ndim) != 0)
            return dt_err_set(err, DT_EINVAL,
                              "%s: create: slot %s: dtype or shape differs from its "
                              "variable's",
                              ps->name, g->name);
        dt_codec_view_copy(given, i, slot->data);
    }
    return 0;
}

static int check_consistency(dt_ps *ps, const dt_consistency *c, dt_err *err) {
    const char *mode = dt_mode_name(c->mode);
    if (!mode) return dt_err_set(err, DT_EINVAL, "%s: create: unknown consistency mode", ps->name);
    if (c->mode == DT_MODE_SYNC &&
        (c->replicas_to_aggregate < 1 || c->total_num_replicas < c->replicas_to_aggregate))
        return dt_err_set(err, DT_EINVAL,
                          "%s: create: sync needs 1 <= replicas_to_aggregate (%d) "
                          "<= total_num_replicas (%d)",
                          ps->name, c->replicas_to_aggregate, c->total_num_replicas);
    if (c->mode == DT_MODE_SYNC && ps->params.cluster->num_ps > 1 &&
        ps->params.cluster->num_workers > DT_SYNC_MAX_WORKERS)
        return dt_err_set(err, DT_EINVAL,
                          "%s: create: sync with several ps tasks takes at most %d "
                          "workers; the cluster has %d",
                          ps->name, DT_SYNC_MAX_WORKERS, ps->params.cluster->num_workers);
    if (c->mode == DT_MODE_BOUNDED && c->staleness < 0)
        return dt_err_set(err, DT_EINVAL, "%s: create: staleness %d < 0", ps->name, c->staleness);
    if (c->mode != DT_MODE_ASYNC && c->timeout_ms < 1)
        return dt_err_set(err, DT_EINVAL, "%s: create: %s needs a timeout >= 1 ms", ps->name, mode);
    return 0;
}

/* Steps between sweeps: half the shorter window, so a row is dropped at
 * most half a window late; at least 1. */
static int64_t evict_interval(const dt_table_evict_policy *e) {
    int64_t w = INT64_MAX;
    if (e->idle_steps > 0) w = e->idle_steps;
    if (e->min_touches > 0 && e->touch_window_steps < w) w = e->touch_window_steps;
    return w == INT64_MAX || w < 2 ? 1 : w / 2;
}

/* The tables of a Create, every field checked before anything is built:
 * errors name the table by its place and the field. */
static int check_tables(dt_ps *ps, const dt_msg_create_req *req, dt_err *err) {
    const dt_table_evict_policy *e = &req->eviction;
    if (e->idle_steps < 0 || e->min_touches < 0 || e->touch_window_steps < 0 ||
        (e->min_touches > 0 && e->touch_window_steps < 1))
        return dt_err_set(err, DT_EINVAL,
                          "%s: create: eviction: idle_steps, min_touches and touch_window_steps "
                          "must be >= 0, touch_window_steps >= 1 with min_touches",
                          ps->name);
    for (int i = 0; i < req->num_tables; i++) {
        const dt_msg_table *t = &req->tables[i];
        char what[160];
        snprintf(what, sizeof what, "%s: create: tables[%d].name", ps->name, i);
        if (dt_text_check_name(t->name, strnlen(t->name, sizeof t->name), DT_TABLE_NAME_MAX - 1,
                               what, err) < 0)
            return dt_err_wrap(err, DT_EINVAL, "%s: create", ps->name);
        if (t->rows < 1 || t->rows > DT_TABLE_MAX_ROWS)
            return dt_err_set(err, DT_EINVAL,
                              "%s: create: tables[%d] %s: rows %lld is out of range 1..2^40",
                              ps->name, i, t->name, (long long)t->rows);
        if (t->dim < 1 || t->dim > DT_TABLE_MAX_DIM)
            return dt_err_set(err, DT_EINVAL,
                              "%s: create: tables[%d] %s: dim %d is out of range 1..%d", ps->name,
                              i, t->name, (int)t->dim, DT_TABLE_MAX_DIM);
        if (t->init < 0)
            return dt_err_set(err, DT_EINVAL,
                              "%s: create: tables[%d] %s: init: unknown (zeros, normal, uniform)",
                              ps->name, i, t->name);
        if (t->init != DT_TABLE_INIT_ZEROS && !(isfinite(t->init_scale) && t->init_scale > 0))
            return dt_err_set(err, DT_EINVAL,
                              "%s: create: tables[%d] %s: init_scale %g must be finite and > 0",
                              ps->name, i, t->name, t->init_scale);
        for (int j = 0; j < i; j++)
            if (strcmp(req->tables[j].name, t->name) == 0)
                return dt_err_set(err, DT_EINVAL, "%s: create: tables[%d] %s given twice", ps->name,
                                  i, t->name);
        for (int v = 0; v < req->in.count; v++)
            if (strcmp(req->in.items[v].name, t->name) == 0)
                return dt_err_set(err, DT_EINVAL,
                                  "%s: create: tables[%d] %s: a dense variable has its name",
                                  ps->name, i, t->name);
    }
    return 0;
}

/* The (checked) tables of a Create, empty, with the optimizer's slots. */
static int build_tables(dt_ps *ps, const dt_msg_create_req *req, dt_err *err) {
    for (int i = 0; i < req->num_tables; i++) {
        const dt_msg_table *t = &req->tables[i];
        dt_table_config cfg;
        memset(&cfg, 0, sizeof cfg);
        snprintf(cfg.name, sizeof cfg.name, "%s", t->name);
        cfg.rows = t->rows;
        cfg.dim = t->dim;
        cfg.init = (dt_table_init)t->init;
        cfg.init_scale = t->init_scale;
        cfg.seed = t->seed;
        dt_table_config_slots(&cfg, &ps->optim);
        int rc = dt_table_new(&cfg, &ps->tables[i], err);
        if (rc < 0) return dt_err_wrap(err, rc, "%s: create", ps->name);
        dt_sparse_acc_init(&ps->row_acc[i], cfg.dim);
        ps->num_tables = i + 1;
    }
    if (ps->num_tables > 0 && ps->sync_role == SYNC_FOLLOWER) {
        ps->row_hold = dt_calloc((size_t)ps->params.cluster->num_workers * DT_MAX_TABLES,
                                 sizeof *ps->row_hold);
        if (!ps->row_hold) return dt_err_set(err, DT_ENOMEM, "%s: create: out of memory", ps->name);
    }
    return 0;
}

static int check_create(dt_ps *ps, const dt_msg_create_req *req, dt_err *err) {
    /* No variables is fine: with more ps tasks than units of the model, a
     * task holds none and just keeps the step. */
    if (req->global_step < 0 || req->max_steps < 0)
        return dt_err_set(err, DT_EINVAL, "%s: create: negative global_step or max_steps",
                          ps->name);
    if (dt_optim_check(&req->optim, err) < 0)
        return dt_err_wrap(err, DT_EINVAL, "%s: create", ps->name);
    if (dt_lr_check(&req->schedule, err) < 0)
        return dt_err_wrap(err, DT_EINVAL, "%s: create", ps->name);
    int rc = check_consistency(ps, &req->consistency, err);
    if (rc == 0) rc = check_tables(ps, req, err);
    if (rc < 0) return rc;
    int nslots = dt_optim_num_slots(&req->optim);
    for (int i = 0; i < req->in.count; i++) {
        /* Slots are named "<variable>/<slot>": the name must leave room. */
        for (int k = 0; k < nslots; k++)
            if (strlen(req->in.items[i].name) + 1 + strlen(dt_optim_slot_name(&req->optim, k)) >=
                DT_TENSOR_NAME_MAX)
                return dt_err_set(err, DT_EINVAL,
                                  "%s: create: variable name %.40s... too long "
                                  "for its %s slot names",
                                  ps->name, req->in.items[i].name, dt_optim_name(req->optim.kind));
        if (req->in.items[i].dtype != DT_DTYPE_F32)
            return dt_err_set(err, DT_EINVAL,
                              "%s: create: variable %s: dtype %s, only F32 is trained", ps->name,
                              req->in.items[i].name, dt_dtype_name(req->in.items[i].dtype));
        for (int j = 0; j < i; j++)
            if (strcmp(req->in.items[i].name, req->in.items[j].name) == 0)
                return dt_err_set(err, DT_EINVAL, "%s: create: variable %s given twice", ps->name,
                                  req->in.items[i].name);
    }
    return 0;
}

static int handle_create(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                         const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    dt_ps *ps = ctx;
    enum { MAX_CREATE = 4096 };
    dt_msg_create_req *req = dt_calloc(1, sizeof *req);
    dt_tensor *views = dt_calloc(MAX_CREATE, sizeof *views);
    dt_rpc_span *spans = dt_calloc(MAX_CREATE, sizeof *spans);
    int rc = 0;
    if (!req || !views || !spans) {
        rc = dt_err_set(err, DT_ENOMEM, "%s: create: out of memory", ps->name);
        goto fail;
    }
    req->in.items = views;
    req->in.spans = spans;
    req->in.cap = MAX_CREATE / 2;
    req->slots_in.items = views + MAX_CREATE / 2;
    req->slots_in.spans = spans + MAX_CREATE / 2;
    req->slots_in.cap = MAX_CREATE / 2;
    if ((rc = dt_codec_decode_buf(DT_MSG_CREATE_REQ, request, req, err)) < 0) goto fail;
    if ((rc = check_failed(ps, 0, "create", err)) < 0) goto fail;
    if ((rc = check_create(ps, req, err)) < 0) goto fail;

    pthread_rwlock_wrlock(&ps->model_lock);
    if (ps->ready) {
        pthread_rwlock_unlock(&ps->model_lock);
        rc = dt_err_set(err, DT_EEXIST,
                        "%s: create: variables already exist (created by a chief "
                        "earlier in this ps's life)",
                        ps->name);
        goto fail;
    }
    /* A model whose rows were being restored: the chief that sent it died
     * and another starts over. */
    if (ps->built) free_model(ps);
    ps->optim = req->optim;
    ps->schedule = req->schedule;
    ps->consistency = req->consistency;
    ps->skip_nonfinite = req->skip_nonfinite;
    ps->sync_role = SYNC_ALONE;
    if (ps->consistency.mode == DT_MODE_SYNC && ps->params.cluster->num_ps > 1)
        ps->sync_role = ps->params.task_index == 0 ? SYNC_DECIDER : SYNC_FOLLOWER;
    if ((rc = build_model(ps, &req->in, err)) < 0 ||
        (rc = restore_slots(ps, &req->slots_in, err)) < 0 ||
        (rc = build_tables(ps, req, err)) < 0) {
        free_model(ps);
        pthread_rwlock_unlock(&ps->model_lock);
        goto fail;
    }
    ps->max_steps = req->max_steps;
    ps->step_ceiling = req->step_ceiling < req->max_steps ? req->step_ceiling : req->max_steps;
    snprintf(ps->model, sizeof ps->model, "%s", req->model);
    atomic_store(&ps->global_step, req->global_step);
    reset_step_locked(ps, req->global_step);
    /* A ps 0 created (or restored) at step S cannot say who made step S-1:
     * a task still at S-1 applies what it holds. */
    memset(&ps->decided, 0, sizeof ps->decided);
    ps->decided.has = ps->sync_role == SYNC_DECIDER;
    ps->decided.step = req->global_step - 1;
    ps->decided.all_held = true;
    ps->built = 1;
    ps->ready = !(req->tables_pending && ps->num_tables > 0);
    ps->eviction = req->eviction;
    atomic_store(&ps->next_evict_step, req->global_step + evict_interval(&ps->eviction));
    /* A new model: no push of the old one is a retry of one of it. */
    pthread_mutex_lock(&ps->stats_mu);
    memset(ps->memo, 0, sizeof *ps->memo * ((size_t)ps->params.cluster->num_workers + 1));
    pthread_mutex_unlock(&ps->stats_mu);
    pthread_rwlock_unlock(&ps->model_lock);
    dt_log(DT_LOG_INFO,
           "%s: created %d variables (%lld bytes, %d slots given) and %d tables%s, global_step "
           "%lld, optimizer %s, %s",
           ps->name, ps->vars.count, (long long)ps->num_bytes, req->slots_in.count, ps->num_tables,
           ps->ready ? "" : " (their rows to be restored)", (long long)req->global_step,
           dt_optim_name(ps->optim.kind), dt_mode_name(ps->consistency.mode));

    dt_msg_create_resp resp = {ps->incarnation, req->global_step};
    rc = encode_reply(DT_MSG_CREATE_RESP, &resp, reply, err);
fail:
    free(spans);
    free(views);
    free(req);
    return rc;
}

/* ---- Pull -------------------------------------------------------------- */

static int follow_decision(dt_ps *ps, const dt_sync_decision *d, dt_err *err);

/* Smallest clock among the workers that pushed within the timeout: the
 * bounded mode does not wait for a worker that died or has not started. */
static int64_t min_live_clock_locked(dt_ps *ps, int64_t fallback) {
    int64_t min = INT64_MAX;
    for (int w = 0; w < ps->params.cluster->num_workers; w++)
        if (ps->seen[w] && ms_since(&ps->last_push[w]) <= ps->consistency.timeout_ms &&
            ps->clock[w] < min)
            min = ps->clock[w];
    return min == INT64_MAX ? fallback : min;
}

/* sync: wait for the step the worker asks for; bounded: wait while the
 * worker is more than `staleness` steps ahead of the slowest live one. */
static int must_wait(dt_ps *ps, int32_t worker, int64_t min_global_step, int include_slots) {
    if (ps->consistency.mode == DT_MODE_SYNC)
        return atomic_load(&ps->global_step) < min_global_step;
    /* A pull with slots is the chief's snapshot, not a training step. */
    if (ps->consistency.mode != DT_MODE_BOUNDED || include_slots || worker < 0 ||
        worker >= ps->params.cluster->num_workers)
        return 0;
    pthread_mutex_lock(&ps->stats_mu);
    int64_t mine = ps->clock[worker];
    int wait = mine - min_live_clock_locked(ps, mine) > ps->consistency.staleness;
    pthread_mutex_unlock(&ps->stats_mu);
    return wait;
}

static int handle_pull(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request,
                       dt_rpc_buf *reply, dt_err *err) {
    dt_ps *ps = ctx;
    dt_msg_pull_req req;
    memset(&req, 0, sizeof req);
    char names[DT_MODEL_PULL_NAMES_MAX][DT_TENSOR_NAME_MAX];
    req.names.items = names;
    req.names.cap = DT_MODEL_PULL_NAMES_MAX;
    int rc = dt_codec_decode_buf(DT_MSG_PULL_REQ, request, &req, err);
    if (rc < 0) return rc;
    if ((rc = check_caller(ps, peer, req.worker, "pull", err)) < 0) return rc;
    if ((rc = check_failed(ps, req.worker, "pull", err)) < 0) return rc;
    note_call(ps, req.worker);

    pthread_rwlock_rdlock(&ps->model_lock);
    if (!ps->ready) {
        rc = dt_err_set(err, DT_EPRECOND, "%s: pull: model not ready (no chief has created it yet)",
                        ps->name);
        goto out;
    }
    dt_msg_pull_resp resp;
    memset(&resp, 0, sizeof resp);
    dt_tensor subset[DT_MODEL_PULL_NAMES_MAX];
    subset_lock lock_ctx = {ps, subset, {0}};
    resp.out.items = ps->vars.items;
    resp.out.count = ps->vars.count;
    resp.out.lock = lock_var;
    resp.out.lock_ctx = ps;
    resp.out.ref = ref_var;
    resp.out.ref_ctx = ps;
    if (req.names.count > 0) {
        /* A named subset: copies of the chosen variables' views; the lock
         * callback maps subset positions back to variable indexes. */
        for (int i = 0; i < req.names.count; i++) {
            const dt_tensor *v = dt_tensors_find(&ps->vars, req.names.items[i]);
            if (!v) {
                rc = dt_err_set(err, DT_ENOTFOUND, "%s: pull: unknown variable %s", ps->name,
                                req.names.items[i]);
                goto out;
            }
            subset[i] = *v;
            lock_ctx.index[i] = (int)(v - ps->vars.items);
            for (int j = 0; j < i; j++)
                if (lock_ctx.index[j] == lock_ctx.index[i]) {
                    /* Each copy would cost the whole variable again. */
                    rc = dt_err_set(err, DT_EINVAL, "%s: pull: variable %s named twice", ps->name,
                                    req.names.items[i]);
                    goto out;
                }
        }
        resp.out.items = subset;
        resp.out.count = req.names.count;
        resp.out.lock = lock_subset_var;
        resp.out.lock_ctx = &lock_ctx;
        resp.out.ref = ref_subset_var;
        resp.out.ref_ctx = &lock_ctx;
    }
    if (ps->sync_role == SYNC_FOLLOWER && req.decision.has &&
        (rc = follow_decision(ps, &req.decision, err)) < 0)
        goto out;
    raise_step(ps, req.seen_step);
    if (ps->sync_role == SYNC_DECIDER) {
        pthread_mutex_lock(&ps->sync_mu);
        resp.decided = ps->decided;
        pthread_mutex_unlock(&ps->sync_mu);
    }
    if (req.include_slots) {
        resp.slots_out.items = ps->slots.items;
        resp.slots_out.count = ps->slots.count;
        resp.slots_out.lock = lock_slot;
        resp.slots_out.lock_ctx = ps;
        resp.slots_out.ref = ref_slot;
        resp.slots_out.ref_ctx = ps;
    }
    resp.incarnation = ps->incarnation;
    resp.global_step = atomic_load(&ps->global_step);
    resp.done = check_done(ps, req.worker);
    if (!resp.done && must_wait(ps, req.worker, req.min_global_step, req.include_slots)) {
        /* Not yet: answer at once without variables; the worker asks again. */
        resp.wait = true;
        resp.out.count = 0;
        resp.slots_out.count = 0;
    }
    rc = encode_reply(DT_MSG_PULL_RESP, &resp, reply, err);
    atomic_fetch_add(&ps->pulls_served, 1);
out:
    pthread_rwlock_unlock(&ps->model_lock);
    return rc;
}

/* ---- Push -------------------------------------------------------------- */

/* ---- a large gradient by ranges ------------------------------------------ */

/* One gradient's check or update split into ranges of whole floats, done
 * by the pool's threads and the poller. Each range reads its own part of
 * the message and writes its own elements of the variable and its slots:
 * the rules are element-wise, so the bits are those of one pass. */
typedef struct {
    dt_ps *ps;
    dt_rpc_span grad; /* the whole gradient: n floats */
    size_t n;
    int ranges;
    /* update: variable k at its update t, w read, out written */
    int k;
    double lr;
    int64_t t;
    const float *w;
    float *out;
    /* check: each range's first non-finite element (counted from the
     * gradient's start), or n */
    size_t first_bad[MAX_RANGES];
} range_job;

/* How many ranges a gradient of n elements is split in here: 0 (the poller
 * alone) below the threshold, without helpers, or while another push is
 * being handled (its poller needs the other core more than this one). */
static int ranges_for(dt_ps *ps, size_t n) {
    if (!ps->pool || n < (size_t)ps->parallel_min_elems || atomic_load(&ps->pushes_active) > 1)
        return 0;
    size_t ranges = (size_t)ps->apply_threads * RANGES_PER_THREAD;
    return (int)(ranges < n ? ranges : n);
}

/* Range `range`'s elements [*from, *from + *count) of j's n. */
static void range_bounds(const range_job *j, int range, size_t *from, size_t *count) {
    /* n < 2^31 (a message's bytes), ranges <= MAX_RANGES: no overflow. */
    size_t lo = j->n * (size_t)range / (size_t)j->ranges;
    size_t hi = j->n * (size_t)(range + 1) / (size_t)j->ranges;
    *from = lo;
    *count = hi - lo;
}

static void check_range(void *ctx, int range) {
    range_job *j = ctx;
    size_t from, count;
    range_bounds(j, range, &from, &count);
    dt_rpc_span part = dt_rpc_span_sub(&j->grad, from * sizeof(float), count * sizeof(float));
    size_t bad = dt_rpc_span_first_nonfinite(&part);
    j->first_bad[range] = bad < count ? from + bad : j->n;
}

/* The first non-finite element of gradient i of grads, or its count: by
 * ranges when it is large and the pool is free, else in one pass. Either
 * way the index is the lowest, so the refusal reads the same. */
static size_t first_nonfinite_of(dt_ps *ps, const dt_tensor_views *grads, int i) {
    dt_rpc_piece one;
    range_job j = {.ps = ps, .grad = dt_codec_view_span(grads, i, &one)};
    j.n = j.grad.len / sizeof(float);
    j.ranges = ranges_for(ps, j.n);
    if (j.ranges > 1 && dt_pool_run(ps->pool, check_range, &j, j.ranges)) {
        size_t bad = j.n;
        for (int r = 0; r < j.ranges; r++)
            if (j.first_bad[r] < bad) bad = j.first_bad[r];
        return bad;
    }
    return dt_rpc_span_first_nonfinite(&j.grad);
}

/* Checks every gradient of a push against the variables held; index[i]
 * gets gradient i's variable. A NaN or Inf is DT_EINVAL with *nonfinite
 * set, so the caller can skip it instead when configured to. The values
 * are read where they are in the message, as the update reads them next:
 * this pass comes first so that a bad push changes nothing. */
static int check_push(dt_ps *ps, const dt_tensor_views *grads, int *index, int *nonfinite,
                      dt_err *err) {
    *nonfinite = 0;
    for (int i = 0; i < grads->count; i++) {
        const dt_tensor *g = &grads->items[i];
        int k = -1;
        for (int v = 0; v < ps->vars.count; v++)
            if (strcmp(ps->vars.items[v].name, g->name) == 0) k = v;
        if (k < 0)
            return dt_err_set(err, DT_ENOTFOUND, "%s: push: unknown variable %s", ps->name,
                              g->name);
        const dt_tensor *v = &ps->vars.items[k];
        if (g->dtype != v->dtype || g->ndim != v->ndim ||
            memcmp(g->shape, v->shape, sizeof(int64_t) * (size_t)v->ndim) != 0)
            return dt_err_set(err, DT_EINVAL,
                              "%s: push: gradient %s: dtype or shape differs from "
                              "the variable's",
                              ps->name, g->name);
        for (int j = 0; j < i; j++)
            if (index[j] == k)
                return dt_err_set(err, DT_EINVAL, "%s: push: gradient %s given twice", ps->name,
                                  g->name);
        index[i] = k;
        size_t bad = first_nonfinite_of(ps, grads, i);
        if (bad < g->nbytes / sizeof(float)) {
            *nonfinite = 1;
            return dt_err_set(err, DT_EINVAL, "%s: push: gradient %s[%zu] is not finite", ps->name,
                              g->name, bad);
        }
    }
    /* One push is one step of every variable here: a partial one (or an
     * empty, truncated message) would advance the step for nothing. */
    if (grads->count != ps->vars.count)
        return dt_err_set(err, DT_EINVAL, "%s: push: %d gradients, the ps holds %d variables",
                          ps->name, grads->count, ps->vars.count);
    return 0;
}

/* ---- tables: sparse rows on the wire --------------------------------------- */

/* Most bytes of rows one SparsePull reply may carry: past gRPC's own cap on
 * a message (an int), with room for the framing. */
#define SPARSE_PULL_MAX_BYTES ((int64_t)2047 << 20)

/* One table's part of a push, checked: its ids copied out of the message
 * (the plan and the stripes' lookups read them many times), its gradient
 * rows left where they arrived and applied from there (dt_table_apply_span),
 * copied only when they must outlive the message (sync's accumulators). */
typedef struct {
    int table;          /* index in ps->tables */
    int64_t n;          /* rows */
    int64_t *ids;       /* (n) sorted, unique, owned by this task */
    dt_rpc_span grads;  /* (n, D) floats in the message */
    dt_rpc_piece whole; /* grads' one piece when the tensor lies in one */
    float *rows;        /* (n, D): a copy of grads, once taken (sync) */
    dt_table_batch batch;
} sparse_part;

/* The parts' own buffers; the array itself is the caller's. */
static void sparse_parts_deinit(sparse_part *parts, int count) {
    for (int i = 0; parts && i < count; i++) {
        free(parts[i].ids);
        free(parts[i].rows);
        dt_table_batch_deinit(&parts[i].batch);
    }
}

static int find_table(const dt_ps *ps, const char *name) {
    for (int i = 0; i < ps->num_tables; i++)
        if (strcmp(dt_table_config_of(ps->tables[i])->name, name) == 0) return i;
    return -1;
}

/* Ids tensor i of v for table part->table, as a ps takes ids from the
 * wire: I64 (n), copied out of the message, strictly increasing, in
 * [0, rows), each placed on this task; planned into part->batch. `what`
 * names the call and the field ("push: sparse_ids[0]"). */
static int take_ids(dt_ps *ps, const char *what, const dt_tensor_views *v, int i, sparse_part *part,
                    dt_err *err) {
    const dt_tensor *x = &v->items[i];
    dt_table *t = ps->tables[part->table];
    const char *table = dt_table_config_of(t)->name;
    if (x->dtype != DT_DTYPE_I64 || x->ndim != 1)
        return dt_err_set(
            err, DT_EINVAL, "%s: %s %s: ids must be I64 (n) (got %s with %d dimensions)", ps->name,
            what, table, dt_dtype_name(x->dtype) ? dt_dtype_name(x->dtype) : "?", x->ndim);
    part->n = x->shape[0];
    part->ids = dt_malloc(x->nbytes ? x->nbytes : 1);
    if (!part->ids) return dt_err_set(err, DT_ENOMEM, "%s: %s: out of memory", ps->name, what);
    dt_codec_view_copy(v, i, part->ids);
    int rc = dt_table_plan(t, part->ids, part->n, &part->batch, err);
    if (rc < 0) return dt_err_wrap(err, DT_EINVAL, "%s: %s", ps->name, what);
    const int num_ps = ps->params.cluster->num_ps;
    for (int64_t k = 0; k < part->n; k++)
        if (dt_table_shard_of(part->ids[k], num_ps) != ps->params.task_index)
            return dt_err_set(err, DT_EINVAL,
                              "%s: %s %s: ids[%lld] = %lld is not held here: it belongs to ps "
                              "%d of %d",
                              ps->name, what, table, (long long)k, (long long)part->ids[k],
                              dt_table_shard_of(part->ids[k], num_ps), num_ps);
    return 0;
}

/* The gradient rows of part (tensor i of v): F32 (n, D), named after its
 * table, all finite (else *nonfinite is set too); read in place, as the
 * dense path reads its gradients, and kept as a span. */
static int take_grads(dt_ps *ps, const dt_tensor_views *v, int i, sparse_part *part, int *nonfinite,
                      dt_err *err) {
    const dt_tensor *g = &v->items[i];
    const dt_table_config *cfg = dt_table_config_of(ps->tables[part->table]);
    if (strcmp(g->name, cfg->name) != 0)
        return dt_err_set(err, DT_EINVAL, "%s: push: sparse_grads[%d] is %s, its sparse_ids[%d] %s",
                          ps->name, i, g->name, i, cfg->name);
    if (g->dtype != DT_DTYPE_F32 || g->ndim != 2 || g->shape[0] != part->n ||
        g->shape[1] != cfg->dim)
        return dt_err_set(err, DT_EINVAL,
                          "%s: push: sparse_grads[%d] %s: must be F32 (%lld, %d), one row per "
                          "id",
                          ps->name, i, cfg->name, (long long)part->n, cfg->dim);
    if (g->data) {
        part->whole = (dt_rpc_piece){g->data, g->nbytes};
        part->grads = (dt_rpc_span){&part->whole, 0, g->nbytes};
    } else {
        part->grads = v->spans[i];
    }
    size_t bad = dt_rpc_span_first_nonfinite(&part->grads);
    if (bad < part->grads.len / sizeof(float)) {
        *nonfinite = 1;
        size_t row = bad / (size_t)cfg->dim;
        return dt_err_set(err, DT_EINVAL,
                          "%s: push: sparse_grads[%d] %s: row %zu (id %lld) is not finite",
                          ps->name, i, cfg->name, row, (long long)part->ids[row]);
    }
    return 0;
}

/* Copies part's gradient rows out of the message into part->rows, for
 * sync, whose accumulators keep them past the call. */
static int take_rows(dt_ps *ps, sparse_part *part, dt_err *err) {
    part->rows = dt_malloc(part->grads.len ? part->grads.len : 1);
    if (!part->rows) return dt_err_set(err, DT_ENOMEM, "%s: push: out of memory", ps->name);
    dt_rpc_span_copy(&part->grads, part->rows);
    return 0;
}

/* Checks the sparse half of a push (parts: one per table this ps holds,
 * zeroed) before anything is applied: as many ids as gradient tensors,
 * each pair for a known table named once, ids and rows as above. *count
 * gets the pairs. */
static int check_sparse(dt_ps *ps, const dt_msg_push_req *req, sparse_part *parts, int *count,
                        int *nonfinite, dt_err *err) {
    const dt_tensor_views *iv = &req->sparse_ids_in, *gv = &req->sparse_grads_in;
    *count = 0;
    if (iv->count != gv->count)
        return dt_err_set(err, DT_EINVAL,
                          "%s: push: %d sparse_ids and %d sparse_grads: one of each per table",
                          ps->name, iv->count, gv->count);
    for (int i = 0; i < iv->count; i++) {
        int k = find_table(ps, iv->items[i].name);
        if (k < 0)
            return dt_err_set(err, DT_ENOTFOUND, "%s: push: sparse_ids[%d]: unknown table %s",
                              ps->name, i, iv->items[i].name);
        for (int j = 0; j < i; j++)
            if (parts[j].table == k)
                return dt_err_set(err, DT_EINVAL, "%s: push: sparse_ids[%d]: table %s given twice",
                                  ps->name, i, iv->items[i].name);
        parts[i].table = k;
        *count = i + 1;
        char what[48];
        snprintf(what, sizeof what, "push: sparse_ids[%d]", i);
        int rc = take_ids(ps, what, iv, i, &parts[i], err);
        if (rc == 0) rc = take_grads(ps, gv, i, &parts[i], nonfinite, err);
        if (rc < 0) return rc;
    }
    return 0;
}

/* Eviction, when the job asks for it: the push that makes global step
 * `step` reach the next sweep's step sweeps every table (the CAS picks one
 * pusher; the others go on, waiting only for the stripes a sweep holds). */
static void maybe_evict(dt_ps *ps, int64_t step) {
    const dt_table_evict_policy *e = &ps->eviction;
    if (ps->num_tables == 0 || (e->idle_steps == 0 && e->min_touches == 0)) return;
    int64_t due = atomic_load(&ps->next_evict_step);
    if (step < due ||
        !atomic_compare_exchange_strong(&ps->next_evict_step, &due, step + evict_interval(e)))
        return;
    for (int i = 0; i < ps->num_tables; i++) {
        int64_t evicted = 0;
        dt_err why;
        dt_err_clear(&why);
        if (dt_table_evict(ps->tables[i], step, e, &evicted, &why) < 0)
            dt_log(DT_LOG_WARN, "%s: evicting at step %lld: %s", ps->name, (long long)step,
                   why.msg);
        if (evicted > 0)
            dt_log(DT_LOG_DEBUG, "%s: table %s: %lld rows evicted at step %lld", ps->name,
                   dt_table_config_of(ps->tables[i])->name, (long long)evicted, (long long)step);
    }
}

/* Applies a checked push's rows, lazily (only the rows named), at the
 * step's learning rate. A table without memory for new rows keeps its old
 * ones (dt_table_apply changes nothing then); the dense part is applied
 * regardless, so the failure is logged rather than returned. */
static void apply_sparse(dt_ps *ps, sparse_part *parts, int count, int64_t step) {
    double lr = dt_lr_at(&ps->schedule, ps->optim.learning_rate, step);
    for (int i = 0; i < count; i++) {
        dt_err why;
        dt_err_clear(&why);
        if (dt_table_apply_span(ps->tables[parts[i].table], &parts[i].batch, &ps->optim, lr,
                                &parts[i].grads, step, &why) < 0)
            dt_log(DT_LOG_ERROR, "%s: push at step %lld: %s", ps->name, (long long)step, why.msg);
    }
}

/* SparsePull: rows of one table, as they are now (a row never pushed
 * reads as its initial value and is not stored). */
static int handle_sparse_pull(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request,
                              dt_rpc_buf *reply, dt_err *err) {
    dt_ps *ps = ctx;
    dt_msg_sparse_pull_req req;
    memset(&req, 0, sizeof req);
    dt_tensor view;
    dt_rpc_span span;
    req.ids_in = (dt_tensor_views){&view, 0, 1, &span};
    sparse_part part;
    memset(&part, 0, sizeof part);
    float *values = NULL;
    int rc = dt_codec_decode_buf(DT_MSG_SPARSE_PULL_REQ, request, &req, err);
    if (rc < 0) return rc;
    if ((rc = check_caller(ps, peer, req.worker, "sparse pull", err)) < 0) return rc;
    if ((rc = check_failed(ps, req.worker, "sparse pull", err)) < 0) return rc;
    note_call(ps, req.worker);
    pthread_rwlock_rdlock(&ps->model_lock);
    if (!ps->ready) {
        rc = dt_err_set(err, DT_EPRECOND,
                        "%s: sparse pull: model not ready (no chief has created it yet)", ps->name);
        goto out;
    }
    if ((part.table = find_table(ps, req.table)) < 0) {
        rc = dt_err_set(err, DT_ENOTFOUND, "%s: sparse pull: unknown table \"%s\"", ps->name,
                        req.table);
        goto out;
    }
    if (req.ids_in.count != 1) {
        rc = dt_err_set(err, DT_EINVAL, "%s: sparse pull: ids: none given", ps->name);
        goto out;
    }
    if ((rc = take_ids(ps, "sparse pull: ids", &req.ids_in, 0, &part, err)) < 0) goto out;
    const dt_table_config *cfg = dt_table_config_of(ps->tables[part.table]);
    /* n <= 2^37 (the request's bytes); n D 4 fits int64, and is bounded. */
    int64_t bytes = part.n * (int64_t)cfg->dim * (int64_t)sizeof(float);
    if (bytes > SPARSE_PULL_MAX_BYTES) {
        rc = dt_err_set(err, DT_EINVAL,
                        "%s: sparse pull: ids: %lld rows of %d floats are %lld bytes, more than "
                        "a reply carries (%lld)",
                        ps->name, (long long)part.n, cfg->dim, (long long)bytes,
                        (long long)SPARSE_PULL_MAX_BYTES);
        goto out;
    }
    if (!(values = dt_malloc(bytes ? (size_t)bytes : 1))) {
        rc = dt_err_set(err, DT_ENOMEM, "%s: sparse pull: out of memory", ps->name);
        goto out;
    }
    raise_step(ps, req.seen_step);
    dt_table_read(ps->tables[part.table], &part.batch, values, NULL);
    dt_tensor out = {.dtype = DT_DTYPE_F32,
                     .ndim = 2,
                     .shape = {part.n, cfg->dim},
                     .data = values,
                     .nbytes = (size_t)bytes};
    snprintf(out.name, sizeof out.name, "%s", cfg->name);
    dt_msg_sparse_pull_resp resp;
    memset(&resp, 0, sizeof resp);
    resp.incarnation = ps->incarnation;
    resp.global_step = atomic_load(&ps->global_step);
    resp.done = check_done(ps, req.worker);
    resp.values_out = (dt_tensor_list){.items = &out, .count = 1};
    rc = encode_reply(DT_MSG_SPARSE_PULL_RESP, &resp, reply, err);
out:
    pthread_rwlock_unlock(&ps->model_lock);
    free(values);
    free(part.ids);
    dt_table_batch_deinit(&part.batch);
    return rc;
}

/* SparseExport: a page of a table's held rows, for the chief's save. */
static int handle_sparse_export(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                                const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    dt_ps *ps = ctx;
    dt_msg_sparse_export_req req;
    memset(&req, 0, sizeof req);
    dt_tensors page;
    memset(&page, 0, sizeof page);
    int rc = dt_codec_decode_buf(DT_MSG_SPARSE_EXPORT_REQ, request, &req, err);
    if (rc < 0) return rc;
    if (req.max_rows < 1 || req.max_rows > DT_SPARSE_EXPORT_MAX_ROWS || req.after_id < -1)
        return dt_err_set(err, DT_EINVAL,
                          "%s: sparse export: max_rows %d must be in 1..%d and after_id %lld "
                          ">= -1",
                          ps->name, (int)req.max_rows, DT_SPARSE_EXPORT_MAX_ROWS,
                          (long long)req.after_id);
    pthread_rwlock_rdlock(&ps->model_lock);
    int k = ps->ready ? find_table(ps, req.table) : -1;
    if (!ps->ready)
        rc = dt_err_set(err, DT_EPRECOND, "%s: sparse export: model not ready", ps->name);
    else if (k < 0)
        rc = dt_err_set(err, DT_ENOTFOUND, "%s: sparse export: unknown table \"%s\"", ps->name,
                        req.table);
    int more = 0;
    if (rc == 0)
        rc = dt_table_export_page(ps->tables[k], 0, 1, req.after_id, req.max_rows, &page, &more,
                                  err);
    if (rc == 0) {
        dt_msg_sparse_export_resp resp;
        memset(&resp, 0, sizeof resp);
        resp.incarnation = ps->incarnation;
        resp.global_step = atomic_load(&ps->global_step);
        resp.more = more;
        resp.out.items = page.items;
        /* ids and values first, then the slots when asked for. */
        resp.out.count = req.include_slots || page.count < 2 ? page.count : 2;
        rc = encode_reply(DT_MSG_SPARSE_EXPORT_RESP, &resp, reply, err);
    }
    pthread_rwlock_unlock(&ps->model_lock);
    dt_tensors_deinit(&page);
    return rc;
}

/* The tensors of an import page, copied out of the message (dt_table_import
 * reads aligned, contiguous arrays). */
static int copy_views(dt_ps *ps, const dt_tensor_views *v, dt_tensors *out, dt_err *err) {
    memset(out, 0, sizeof *out);
    if (v->count == 0) return 0;
    int rc = dt_tensors_init(out, v->items, v->count, err);
    if (rc < 0) return dt_err_wrap(err, rc, "%s: sparse import", ps->name);
    for (int i = 0; i < v->count; i++)
        dt_codec_view_copy(v, i, out->items[i].data);
    return 0;
}

/* SparseImport: a page of a checkpoint's rows for a model created with
 * tables_pending; the last page makes the ps ready. */
static int handle_sparse_import(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                                const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    dt_ps *ps = ctx;
    enum { CAP = 2 + DT_OPTIM_MAX_SLOTS };
    dt_msg_sparse_import_req req;
    memset(&req, 0, sizeof req);
    dt_tensor views[CAP];
    dt_rpc_span spans[CAP];
    req.in = (dt_tensor_views){views, 0, CAP, spans};
    dt_tensors page;
    memset(&page, 0, sizeof page);
    int rc = dt_codec_decode_buf(DT_MSG_SPARSE_IMPORT_REQ, request, &req, err);
    if (rc < 0) return rc;
    pthread_rwlock_wrlock(&ps->model_lock);
    int k = ps->built && !ps->ready ? find_table(ps, req.table) : -1;
    int64_t imported = 0;
    if (!ps->built || ps->ready)
        rc = dt_err_set(err, DT_EPRECOND,
                        "%s: sparse import: no restore in progress (a Create with "
                        "tables_pending comes first)",
                        ps->name);
    else if (k < 0)
        rc = dt_err_set(err, DT_ENOTFOUND, "%s: sparse import: unknown table \"%s\"", ps->name,
                        req.table);
    if (rc == 0) rc = copy_views(ps, &req.in, &page, err);
    if (rc == 0 && (rc = dt_table_import(ps->tables[k], &page, ps->params.task_index,
                                         ps->params.cluster->num_ps, atomic_load(&ps->global_step),
                                         &imported, err)) < 0) {
        /* The table calls a bad page corrupt, as it would a file; from a
         * caller it is a bad argument. */
        dt_err_wrap(err, rc, "%s: sparse import", ps->name);
        if (err && rc == DT_ECORRUPT) err->code = DT_EINVAL;
        if (rc == DT_ECORRUPT) rc = DT_EINVAL;
    }
    dt_msg_sparse_import_resp resp = {0};
    if (rc == 0) {
        dt_table_stats st;
        dt_table_stats_of(ps->tables[k], &st);
        resp.rows_held = st.rows_held;
        if (req.last) {
            ps->ready = 1;
            dt_log(DT_LOG_INFO, "%s: tables restored; serving", ps->name);
        }
    }
    pthread_rwlock_unlock(&ps->model_lock);
    dt_tensors_deinit(&page);
    if (rc < 0) return rc;
    return encode_reply(DT_MSG_SPARSE_IMPORT_RESP, &resp, reply, err);
}

/* Status's rows held and non-zero weights per table (counts each table
 * keeps: no scan of the rows). */
static void table_status(dt_ps *ps, dt_msg_status_resp *resp) {
    resp->num_tables = ps->num_tables;
    for (int i = 0; i < ps->num_tables; i++) {
        dt_table_stats st;
        dt_table_stats_of(ps->tables[i], &st);
        dt_msg_table_status *out = &resp->tables[i];
        snprintf(out->name, sizeof out->name, "%s", dt_table_config_of(ps->tables[i])->name);
        out->rows_held = st.rows_held;
        out->bytes = st.bytes;
        out->nonzero = dt_table_count_nonzero(ps->tables[i]);
    }
}

/* How many steps behind `applied_at` a gradient computed at step `from`
 * is. `from` is the caller's word: one from before step 0 or from the
 * future counts as 0, computed without overflow for any int64. */
static int64_t staleness_of(int64_t applied_at, int64_t from) {
    return from < 0 || from > applied_at ? 0 : applied_at - from;
}

static void record_staleness(dt_ps *ps, int64_t staleness) {
    if (staleness < 0) staleness = 0;
    if (staleness >= DT_STALENESS_BUCKETS) staleness = DT_STALENESS_BUCKETS - 1;
    pthread_mutex_lock(&ps->stats_mu);
    ps->staleness_counts[staleness]++;
    pthread_mutex_unlock(&ps->stats_mu);
}

/* Takes the next global step for this push: 1 and *step_after set, or 0
 * when the job has reached max_steps. */
static int reserve_step(dt_ps *ps, int64_t *step_after) {
    int64_t step = atomic_load(&ps->global_step);
    while (step < ps->max_steps)
        if (atomic_compare_exchange_weak(&ps->global_step, &step, step + 1)) {
            *step_after = step + 1;
            return 1;
        }
    return 0;
}

/* Elements [from, from + s's count) of j's variable updated from span s,
 * straight from the message: run by run (the pieces the message came in),
 * each run's variable, slots and gradient elements together. */
static void apply_span(const range_job *j, const dt_rpc_span *s, size_t from) {
    ps_var *pv = &j->ps->pv[j->k];
    int nslots = dt_optim_num_slots(&j->ps->optim);
    dt_rpc_reader r;
    dt_rpc_reader_init(&r, s, sizeof(float));
    size_t at = from, n;
    const uint8_t *run;
    while ((run = dt_rpc_reader_next(&r, &n)) != NULL) {
        float *slots[DT_OPTIM_MAX_SLOTS];
        for (int i = 0; i < nslots; i++)
            slots[i] = pv->slots[i] + at;
        dt_optim_apply_to(&j->ps->optim, j->lr, j->t, j->w + at, j->out + at, slots, run,
                          (int64_t)n);
        at += n;
    }
}

static void apply_range(void *ctx, int range) {
    range_job *j = ctx;
    size_t from, count;
    range_bounds(j, range, &from, &count);
    dt_rpc_span part = dt_rpc_span_sub(&j->grad, from * sizeof(float), count * sizeof(float));
    apply_span(j, &part, from);
}

/* One update of variable k (its lock held) from gradient grad (where it
 * lies in the message, or in memory): by ranges when it is large and the
 * pool is free, else in one pass. The rules are element-wise, so the bits
 * are those of one call. */
static void apply_one(dt_ps *ps, int k, double lr, const dt_rpc_span *grad) {
    ps_var *pv = &ps->pv[k];
    slots_writable(ps, k);
    var_buf *to = writable(ps, k);
    pv->updates++;
    range_job j = {.ps = ps,
                   .grad = *grad,
                   .k = k,
                   .lr = lr,
                   .t = pv->updates,
                   .w = pv->cur->data,
                   .out = to->data};
    j.n = j.grad.len / sizeof(float);
    j.ranges = ranges_for(ps, j.n);
    if (j.ranges <= 1 || !dt_pool_run(ps->pool, apply_range, &j, j.ranges))
        apply_span(&j, &j.grad, 0);
    make_current(ps, k, to);
}

/* async and bounded: apply each gradient at once, under its variable's
 * lock. Cannot fail. */
static void apply_now(dt_ps *ps, const dt_tensor_views *grads, const int *index, int64_t step) {
    double lr = dt_lr_at(&ps->schedule, ps->optim.learning_rate, step);
    for (int i = 0; i < grads->count; i++) {
        int k = index[i];
        dt_rpc_piece one;
        dt_rpc_span grad = dt_codec_view_span(grads, i, &one);
        pthread_mutex_lock(&ps->pv[k].mu);
        apply_one(ps, k, lr, &grad);
        pthread_mutex_unlock(&ps->pv[k].mu);
    }
}

/* FNV-1a over the step and the index of each worker in it: two tasks that
 * applied the same sets at the same steps have the same digest. */
static void fold_digest(dt_ps *ps) {
    uint64_t h = ps->sync_digest ? ps->sync_digest : 0xcbf29ce484222325ull;
    uint64_t words[2] = {(uint64_t)ps->acc_step, 0};
    for (int w = -1; w < ps->params.cluster->num_workers; w++) {
        if (w >= 0 && !ps->acc_from[w]) continue;
        words[1] = (uint64_t)(int64_t)w;
        /* Byte by byte, low byte first, whatever the machine's order. */
        for (int i = 0; i < 16; i++)
            h = (h ^ ((words[i / 8] >> (8 * (i % 8))) & 0xffu)) * 0x100000001b3ull;
    }
    ps->sync_digest = h;
}

/* sync: each table's rows of the step, summed by id over its pushes and
 * scaled as the dense sums are (the mean over the step's pushes, a row a
 * push did not name counting as 0), applied lazily to the rows named.
 * Like apply_sparse, a failure (no memory) is logged: the dense half of
 * the step is applied regardless. Called with sync_mu held. */
static void apply_rows_locked(dt_ps *ps, float scale, double lr) {
    for (int t = 0; t < ps->num_tables; t++) {
        dt_err why;
        dt_err_clear(&why);
        int64_t n = 0;
        const int64_t *ids = NULL;
        const float *rows = NULL;
        int rc = dt_sparse_acc_sum(&ps->row_acc[t], scale, &n, &ids, &rows, &why);
        if (rc == 0 && n > 0) rc = dt_table_plan(ps->tables[t], ids, n, &ps->row_batch, &why);
        if (rc == 0 && n > 0)
            rc = dt_table_apply(ps->tables[t], &ps->row_batch, &ps->optim, lr, rows, ps->acc_step,
                                &why);
        if (rc < 0)
            dt_log(DT_LOG_ERROR, "%s: sync step %lld: table %s: %s", ps->name,
                   (long long)ps->acc_step, dt_table_config_of(ps->tables[t])->name, why.msg);
        dt_sparse_acc_clear(&ps->row_acc[t]);
    }
}

/* sync: apply the mean of the accumulated gradients as one step, and move
 * to the next. Called with sync_mu held. acc_count may be 0 only on a
 * follower told of a step whose gradients it lost (restarted since): the
 * step then passes with no change here. */
static void apply_accumulated(dt_ps *ps) {
    fold_digest(ps);
    if (ps->sync_role == SYNC_DECIDER) {
        dt_sync_decision *d = &ps->decided;
        memset(d, 0, sizeof *d);
        d->has = true;
        d->step = ps->acc_step;
        d->members_len = (ps->params.cluster->num_workers + 7) / 8;
        for (int w = 0; w < ps->params.cluster->num_workers; w++)
            if (ps->acc_from[w]) d->members[w / 8] |= (uint8_t)(1u << (w % 8));
    }
    double lr = dt_lr_at(&ps->schedule, ps->optim.learning_rate, ps->acc_step);
    float scale = ps->acc_count ? 1.0f / (float)ps->acc_count : 0.0f;
    for (int k = 0; ps->acc_count > 0 && k < ps->vars.count; k++) {
        ps_var *pv = &ps->pv[k];
        dt_tensor *v = &ps->vars.items[k];
        float *sum = ps->acc.items[k].data;
        int64_t n = dt_tensor_numel(v);
        for (int64_t e = 0; e < n; e++)
            sum[e] *= scale; /* mean = sum / count */
        dt_rpc_piece one = {(const uint8_t *)sum, v->nbytes};
        dt_rpc_span grad = {&one, 0, v->nbytes};
        pthread_mutex_lock(&pv->mu);
        apply_one(ps, k, lr, &grad);
        pthread_mutex_unlock(&pv->mu);
        memset(sum, 0, v->nbytes);
    }
    if (ps->acc_count > 0) apply_rows_locked(ps, scale, lr);
    for (int i = 0; i < ps->acc_count; i++)
        record_staleness(ps, 0);
    atomic_fetch_add(&ps->pushes_applied, ps->acc_count);
    ps->acc_count = 0;
    memset(ps->acc_from, 0, sizeof(int) * (size_t)ps->params.cluster->num_workers);
    if (ps->held) memset(ps->held, 0, sizeof(int) * (size_t)ps->params.cluster->num_workers);
    drop_rows_locked(ps);
    ps->acc_step = atomic_fetch_add(&ps->global_step, 1) + 1;
    maybe_evict(ps, ps->acc_step);
}

/* Adds the floats r reads (a message's, at any alignment) to sum. */
static void add_floats(float *sum, dt_rpc_reader *r) {
    size_t n;
    const uint8_t *run;
    while ((run = dt_rpc_reader_next(r, &n)) != NULL) {
        for (size_t e = 0; e < n; e++) {
            float x;
            memcpy(&x, run + 4 * e, sizeof x);
            sum[e] += x;
        }
        sum += n;
    }
}

/* sync follower: keep worker w's gradient for the current step until ps 0's
 * decision names (or leaves out) w. 1 when held, 0 when stale or a
 * duplicate, or a negative code (no memory for the worker's buffer). */
static int hold_gradient(dt_ps *ps, const dt_msg_push_req *req, const int *index,
                         sparse_part *parts, int nparts, dt_err *err) {
    int w = req->worker;
    if (req->step != ps->acc_step || ps->held[w]) return 0;
    dt_tensors *h = &ps->hold[w];
    if (!h->items) {
        int rc = dt_tensors_init(h, ps->vars.items, ps->vars.count, err);
        if (rc < 0)
            return dt_err_wrap(err, rc, "%s: push: holding worker %d's gradient", ps->name, w);
    }
    for (int i = 0; i < nparts; i++) {
        int rc = take_rows(ps, &parts[i], err);
        if (rc < 0) return rc;
    }
    for (int i = 0; i < req->in.count; i++)
        dt_codec_view_copy(&req->in, i, h->items[index[i]].data);
    /* The rows: the push's arrays, taken as they are. */
    for (int i = 0; i < nparts; i++) {
        dt_sparse_grad *g = &ps->row_hold[(size_t)w * DT_MAX_TABLES + (size_t)parts[i].table];
        dt_sparse_grad_deinit(g);
        *g = (dt_sparse_grad){parts[i].n, parts[i].ids, parts[i].rows};
        parts[i].ids = NULL;
        parts[i].rows = NULL;
    }
    ps->held[w] = 1;
    return 1;
}

/* sync: the rows of a push (or of one a follower held) join the step's,
 * after those that came before it. The arrays are taken, not copied. On
 * failure (no memory) the step goes on without them, logged. */
static void add_rows_locked(dt_ps *ps, int table, dt_sparse_grad *g) {
    dt_err why;
    dt_err_clear(&why);
    if (dt_sparse_acc_add(&ps->row_acc[table], g, &why) < 0)
        dt_log(DT_LOG_ERROR, "%s: sync step %lld: table %s: %s", ps->name, (long long)ps->acc_step,
               dt_table_config_of(ps->tables[table])->name, why.msg);
}

/* sync follower: apply the step ps 0 decided, with exactly the gradients it
 * names, and drop the others held for it. A decision for a later step (this
 * task restarted and missed some) moves the step up, as a seen_step does;
 * one for an earlier step is old news. */
static int follow_decision(dt_ps *ps, const dt_sync_decision *d, dt_err *err) {
    int nw = ps->params.cluster->num_workers;
    if (d->members_len > (nw + 7) / 8)
        return dt_err_set(err, DT_EINVAL, "%s: pull: decision: %d member bytes for %d workers",
                          ps->name, d->members_len, nw);
    pthread_mutex_lock(&ps->sync_mu);
    int64_t step = ps->acc_step;
    if (d->step != step) {
        pthread_mutex_unlock(&ps->sync_mu);
        if (d->step > step) raise_step(ps, d->step + 1);
        return 0;
    }
    int lost = 0, dropped = 0;
    for (int w = 0; w < nw; w++) {
        int member = d->all_held ? ps->held[w]
                                 : w / 8 < d->members_len && (d->members[w / 8] >> (w % 8)) & 1;
        if (member && !ps->held[w]) lost++;
        if (!member && ps->held[w]) dropped++;
        if (!member || !ps->held[w]) continue;
        for (int k = 0; k < ps->acc.count; k++) {
            dt_rpc_reader r;
            dt_rpc_reader_init_flat(&r, ps->hold[w].items[k].data, ps->hold[w].items[k].nbytes,
                                    sizeof(float));
            add_floats(ps->acc.items[k].data, &r);
        }
        for (int t = 0; t < ps->num_tables; t++)
            add_rows_locked(ps, t, &ps->row_hold[(size_t)w * DT_MAX_TABLES + (size_t)t]);
        ps->acc_from[w] = 1;
        ps->acc_count++;
    }
    int applied = ps->acc_count;
    apply_accumulated(ps);
    pthread_mutex_unlock(&ps->sync_mu);
    atomic_fetch_add(&ps->pushes_dropped, dropped);
    if (lost)
        dt_log(DT_LOG_WARN,
               "%s: step %lld: %d gradient(s) ps:0 counted were lost here (this task "
               "restarted since they came); applying the %d it holds",
               ps->name, (long long)step, lost, applied);
    return 0;
}

/* sync: add one worker's gradient to the current step (a follower holds it
 * instead); 1 when used, 0 when stale (computed for another step, or this
 * worker already gave one), or a negative code. */
static int accumulate(dt_ps *ps, const dt_msg_push_req *req, const int *index, sparse_part *parts,
                      int nparts, dt_err *err) {
    pthread_mutex_lock(&ps->sync_mu);
    int w = req->worker;
    int known = w >= 0 && w < ps->params.cluster->num_workers;
    if (ps->sync_role == SYNC_FOLLOWER) {
        int rc = hold_gradient(ps, req, index, parts, nparts, err);
        pthread_mutex_unlock(&ps->sync_mu);
        return rc;
    }
    if (req->step != ps->acc_step || (known && ps->acc_from[w])) {
        pthread_mutex_unlock(&ps->sync_mu);
        return 0;
    }
    for (int i = 0; i < nparts; i++) {
        int rc = take_rows(ps, &parts[i], err);
        if (rc < 0) {
            pthread_mutex_unlock(&ps->sync_mu);
            return rc;
        }
    }
    for (int i = 0; i < req->in.count; i++) {
        dt_rpc_reader r;
        dt_codec_view_reader(&req->in, i, &r);
        add_floats(ps->acc.items[index[i]].data, &r);
    }
    for (int i = 0; i < nparts; i++) {
        dt_sparse_grad g = {parts[i].n, parts[i].ids, parts[i].rows};
        parts[i].ids = NULL;
        parts[i].rows = NULL;
        add_rows_locked(ps, parts[i].table, &g);
    }
    if (known) ps->acc_from[w] = 1;
    if (ps->acc_count++ == 0) clock_gettime(CLOCK_MONOTONIC, &ps->acc_first);
    if (ps->acc_count >= ps->consistency.replicas_to_aggregate) apply_accumulated(ps);
    pthread_mutex_unlock(&ps->sync_mu);
    return 1;
}

/* bounded: advance the worker's clock; remember how far ahead it ran. */
static void tick_clock(dt_ps *ps, int32_t worker) {
    if (worker < 0 || worker >= ps->params.cluster->num_workers) return;
    pthread_mutex_lock(&ps->stats_mu);
    /* A worker joining late (or back after a silence) starts level with the
     * slowest live one, not at 0: else the others would be held back until
     * it redid every step they took without it. */
    int live = ps->seen[worker] && ms_since(&ps->last_push[worker]) <= ps->consistency.timeout_ms;
    if (!live) {
        int64_t floor = min_live_clock_locked(ps, ps->clock[worker]);
        if (floor > ps->clock[worker]) ps->clock[worker] = floor;
    }
    int64_t lead = ps->clock[worker] - min_live_clock_locked(ps, ps->clock[worker]);
    if (lead > ps->max_lead) ps->max_lead = (int32_t)lead;
    ps->clock[worker]++;
    ps->seen[worker] = 1;
    clock_gettime(CLOCK_MONOTONIC, &ps->last_push[worker]);
    pthread_mutex_unlock(&ps->stats_mu);
}

/* ---- retried pushes ------------------------------------------------------- */

/* A push whose reply was lost (a deadline, a dropped connection) is sent
 * again with the id it had. Each training task's last id is kept with what
 * its push became, so the retry is answered as the first one was and never
 * applied twice. The id is claimed before the push is applied: a retry that
 * overtakes a first try still in progress is told the step as it stands. */
static push_memo *memo_of(dt_ps *ps, const dt_msg_push_req *req) {
    if (!req->push_id || req->worker < 0 || req->worker >= ps->params.cluster->num_workers)
        return NULL;
    return &ps->memo[req->worker];
}

/* 1 when req is a retry (resp then says what the first try became); else
 * claims its id and returns 0. */
static int retried_push(dt_ps *ps, const dt_msg_push_req *req, dt_msg_push_resp *resp) {
    push_memo *m = memo_of(ps, req);
    if (!m) return 0;
    pthread_mutex_lock(&ps->stats_mu);
    int retry = m->id == req->push_id;
    if (retry) {
        resp->global_step = m->global_step;
        resp->dropped = m->dropped;
    } else {
        m->id = req->push_id;
        m->global_step = atomic_load(&ps->global_step);
        m->dropped = false;
    }
    pthread_mutex_unlock(&ps->stats_mu);
    return retry;
}

/* Records what req became (rc < 0: refused, so a retry is a new try). */
static void remember_push(dt_ps *ps, const dt_msg_push_req *req, const dt_msg_push_resp *resp,
                          int rc) {
    push_memo *m = memo_of(ps, req);
    if (!m) return;
    pthread_mutex_lock(&ps->stats_mu);
    if (m->id == req->push_id) {
        if (rc < 0) {
            m->id = 0;
        } else {
            m->global_step = resp->global_step;
            m->dropped = resp->dropped;
        }
    }
    pthread_mutex_unlock(&ps->stats_mu);
}

/* A push that asked for the variables (one round trip per step) gets every
 * variable this ps holds, encoded from the store under each one's lock as a
 * Pull's are; unless the job is done, or it is not yet time (sync, bounded:
 * `wait`, and the caller pulls when it is). With several ps tasks in sync
 * mode only a Pull carries ps 0's decision, so those always say `wait`. */
static void attach_variables(dt_ps *ps, const dt_msg_push_req *req, dt_msg_push_resp *resp) {
    if (!req->pull || resp->done) return;
    if (ps->sync_role != SYNC_ALONE || must_wait(ps, req->worker, req->min_global_step, 0)) {
        resp->wait = true;
        return;
    }
    resp->out.items = ps->vars.items;
    resp->out.count = ps->vars.count;
    resp->out.lock = lock_var;
    resp->out.lock_ctx = ps;
    resp->out.ref = ref_var;
    resp->out.ref_ctx = ps;
}

/* A decoded push from an allowed caller, with model_lock held for reading
 * and the model ready: checks it and applies, accumulates or drops it; *out
 * gets the reply's step and flags. */
static int push_locked(dt_ps *ps, dt_msg_push_req *req, int *index, sparse_part *parts,
                       dt_msg_push_resp *out, dt_err *err) {
    raise_step(ps, req->seen_step);
    dt_msg_push_resp resp;
    memset(&resp, 0, sizeof resp);
    dt_err why;
    dt_err_clear(&why);
    int nonfinite = 0, nparts = 0;
    int rc = check_push(ps, &req->in, index, &nonfinite, &why);
    if (rc == 0) rc = check_sparse(ps, req, parts, &nparts, &nonfinite, &why);
    if (rc < 0 && nonfinite && ps->skip_nonfinite) {
        /* Configured to survive a diverging worker: skip it, count it. */
        atomic_fetch_add(&ps->pushes_nonfinite, 1);
        resp.dropped = true;
        resp.global_step = atomic_load(&ps->global_step);
        resp.done = check_done(ps, req->worker);
        dt_log(DT_LOG_DEBUG, "%s: skipped: %s", ps->name, why.msg);
        *out = resp;
        return 0;
    }
    if (rc < 0) return dt_err_set(err, rc, "%s", why.msg);
    int reserved = 0;
    if (check_done(ps, req->worker)) {
        resp.done = true;
    } else if (ps->consistency.mode == DT_MODE_SYNC) {
        int used = 0;
        if (ps->sync_role != SYNC_ALONE &&
            (req->worker < 0 || req->worker >= ps->params.cluster->num_workers))
            /* A decision names workers: a gradient from no worker has no place in one. */
            used = dt_err_set(err, DT_EINVAL,
                              "%s: push: worker %d is not in the cluster (%d "
                              "workers)",
                              ps->name, (int)req->worker, ps->params.cluster->num_workers);
        else
            used = accumulate(ps, req, index, parts, nparts, err);
        if (used < 0) return used;
        if (used == 0) {
            atomic_fetch_add(&ps->pushes_dropped, 1);
            resp.dropped = true;
        }
    } else if ((reserved = reserve_step(ps, &resp.global_step))) {
        /* The step is ours: concurrent pushes cannot carry the global step
         * past max_steps, and each applied push counts exactly once. */
        record_staleness(ps, staleness_of(resp.global_step - 1, req->step));
        apply_now(ps, &req->in, index, resp.global_step - 1);
        apply_sparse(ps, parts, nparts, resp.global_step - 1);
        maybe_evict(ps, resp.global_step);
        if (ps->consistency.mode == DT_MODE_BOUNDED) tick_clock(ps, req->worker);
        atomic_fetch_add(&ps->pushes_applied, 1);
    } else {
        resp.done = true;
    }
    if (!reserved) resp.global_step = atomic_load(&ps->global_step);
    resp.done = check_done(ps, req->worker) || resp.done;
    *out = resp;
    return 0;
}

/* Views (gradients, then a table's ids and rows each) and tables a push of
 * a small model finds room for on the handler's stack (about 2 kB). */
#define PUSH_SMALL_VIEWS 8
#define PUSH_SMALL_TABLES 2

static int handle_push(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request,
                       dt_rpc_buf *reply, dt_err *err) {
    dt_ps *ps = ctx;
    dt_msg_push_req req;
    memset(&req, 0, sizeof req);
    dt_tensor *views = NULL;
    dt_rpc_span *spans = NULL;
    sparse_part *parts = NULL;
    int *index = NULL, rc = 0, tcap = 0, heap = 0;
    /* A small model's push takes its storage from here: four callocs and
     * frees per push were a tenth of a tiny push's instructions on the ps. */
    dt_tensor small_views[PUSH_SMALL_VIEWS];
    dt_rpc_span small_spans[PUSH_SMALL_VIEWS];
    int small_index[PUSH_SMALL_VIEWS];
    sparse_part small_parts[PUSH_SMALL_TABLES];
    pthread_rwlock_rdlock(&ps->model_lock);
    if (!ps->ready) {
        /* A failed job's answer wins over "not ready", which is retried. */
        if ((rc = check_failed(ps, -1, "push", err)) == 0)
            rc = dt_err_set(err, DT_EPRECOND,
                            "%s: push: model not ready (no chief has created it yet)", ps->name);
        goto done;
    }
    /* A valid push has one gradient per variable held here; one more slot
     * lets check_push name the extra. Sized by the model: on the heap past
     * the small arrays above, never a fixed worst case on a poller
     * thread's stack. */
    int cap = ps->vars.count + 1;
    tcap = ps->num_tables + 1;
    size_t nviews = (size_t)cap + 2 * (size_t)tcap;
    if (nviews <= PUSH_SMALL_VIEWS && tcap <= PUSH_SMALL_TABLES) {
        views = small_views;
        spans = small_spans;
        index = small_index;
        parts = small_parts;
        memset(views, 0, nviews * sizeof *views);
        memset(spans, 0, nviews * sizeof *spans);
        memset(index, 0, (size_t)cap * sizeof *index);
        memset(parts, 0, (size_t)tcap * sizeof *parts);
    } else {
        heap = 1;
        views = dt_calloc(nviews, sizeof *views);
        spans = dt_calloc(nviews, sizeof *spans);
        index = dt_calloc((size_t)cap, sizeof *index);
        parts = dt_calloc((size_t)tcap, sizeof *parts);
        if (!views || !spans || !index || !parts) {
            rc = dt_err_set(err, DT_ENOMEM, "%s: push: out of memory", ps->name);
            goto done;
        }
    }
    req.in = (dt_tensor_views){views, 0, cap, spans};
    /* Tables: one pair each, and one more so check_sparse names an extra. */
    req.sparse_ids_in = (dt_tensor_views){views + cap, 0, tcap, spans + cap};
    req.sparse_grads_in = (dt_tensor_views){views + cap + tcap, 0, tcap, spans + cap + tcap};
    if ((rc = dt_codec_decode_buf(DT_MSG_PUSH_REQ, request, &req, err)) < 0) goto done;
    if ((rc = check_caller(ps, peer, req.worker, "push", err)) < 0) goto done;
    if ((rc = check_failed(ps, req.worker, "push", err)) < 0) goto done;
    note_push(ps, req.worker);
    dt_msg_push_resp resp;
    memset(&resp, 0, sizeof resp);
    if (retried_push(ps, &req, &resp)) {
        atomic_fetch_add(&ps->pushes_retried, 1);
        resp.done = check_done(ps, req.worker);
    } else {
        atomic_fetch_add(&ps->pushes_active, 1);
        rc = push_locked(ps, &req, index, parts, &resp, err);
        atomic_fetch_sub(&ps->pushes_active, 1);
        remember_push(ps, &req, &resp, rc);
        if (rc == 0) count_taken(ps, req.worker);
    }
    if (rc == 0) {
        resp.incarnation = ps->incarnation;
        attach_variables(ps, &req, &resp);
        rc = encode_reply(DT_MSG_PUSH_RESP, &resp, reply, err);
    }
done:
    pthread_rwlock_unlock(&ps->model_lock);
    sparse_parts_deinit(parts, tcap);
    if (heap) {
        free(views);
        free(spans);
        free(index);
        free(parts);
    }
    if (rc < 0) atomic_fetch_add(&ps->pushes_rejected, 1);
    return rc;
}

/* sync: when peers are slow or dead, apply what the step has after the
 * timeout instead of waiting forever. Called from dt_ps_wait's loop. */
static void sync_timeout_check(dt_ps *ps) {
    pthread_rwlock_rdlock(&ps->model_lock);
    if (ps->ready && ps->consistency.mode == DT_MODE_SYNC && ps->sync_role != SYNC_FOLLOWER) {
        pthread_mutex_lock(&ps->life_mu);
        int done = done_locked(ps);
        pthread_mutex_unlock(&ps->life_mu);
        pthread_mutex_lock(&ps->sync_mu);
        if (ps->acc_count > 0 && ms_since(&ps->acc_first) >= ps->consistency.timeout_ms && !done) {
            dt_log(DT_LOG_WARN,
                   "%s: step %lld: applying %d of %d gradients after waiting %d ms "
                   "for the others",
                   ps->name, (long long)ps->acc_step, ps->acc_count,
                   ps->consistency.replicas_to_aggregate, ps->consistency.timeout_ms);
            apply_accumulated(ps);
        }
        pthread_mutex_unlock(&ps->sync_mu);
    }
    pthread_rwlock_unlock(&ps->model_lock);
}

/* ---- Status and Shutdown ----------------------------------------------- */

/* A worker told by another ps task that the job is done says so here, so
 * this task need not wait out its linger for it after the chief's
 * Shutdown. Only for itself: a tool or another task cannot speak for it. */
static int note_done_seen(dt_ps *ps, const dt_rpc_peer *peer, int32_t worker, dt_err *err) {
    if (peer->role == DT_PEER_TOOL || peer->role == DT_PEER_PS) {
        atomic_fetch_add(&ps->calls_refused, 1);
        return dt_err_set(err, DT_EPERM,
                          "%s: status: %s may not say a worker was told the job "
                          "is done",
                          ps->name, peer->name);
    }
    int rc = check_caller(ps, peer, worker, "status", err);
    if (rc < 0) return rc;
    if (worker < 0 || worker >= ps->params.cluster->num_workers)
        return dt_err_set(err, DT_EINVAL,
                          "%s: status: done_seen from worker %d, not in the cluster", ps->name,
                          (int)worker);
    pthread_mutex_lock(&ps->life_mu);
    ps->worker_told_done[worker] = 1;
    pthread_mutex_unlock(&ps->life_mu);
    return 0;
}

/* A worker says it failed permanently and leaves (its own task only, as
 * for done_seen; the chief's failure is a Shutdown, which ends the job):
 * remembered for Status, and it need not be told the job's end. The text
 * was checked by the codec. */
static int note_failed_worker(dt_ps *ps, const dt_rpc_peer *peer, int32_t worker,
                              const char *failure, dt_err *err) {
    if (peer->role == DT_PEER_TOOL || peer->role == DT_PEER_PS) {
        atomic_fetch_add(&ps->calls_refused, 1);
        return dt_err_set(err, DT_EPERM, "%s: status: %s may not say a worker failed", ps->name,
                          peer->name);
    }
    int rc = check_caller(ps, peer, worker, "status", err);
    if (rc < 0) return rc;
    if (worker < 1 || worker >= ps->params.cluster->num_workers)
        return dt_err_set(err, DT_EINVAL,
                          "%s: status: failure from worker %d: only workers 1..%d report their "
                          "own (the chief's ends the job: a Shutdown)",
                          ps->name, (int)worker, ps->params.cluster->num_workers - 1);
    char *copy = dt_strdup(failure);
    if (!copy) return dt_err_set(err, DT_ENOMEM, "%s: status: out of memory", ps->name);
    pthread_mutex_lock(&ps->stats_mu);
    free(ps->worker_failure[worker]);
    ps->worker_failure[worker] = copy;
    pthread_mutex_unlock(&ps->stats_mu);
    pthread_mutex_lock(&ps->life_mu);
    ps->worker_told_done[worker] = 1;
    pthread_mutex_unlock(&ps->life_mu);
    dt_log(DT_LOG_WARN, "%s: worker %d failed and left: %s; the job goes on without it", ps->name,
           (int)worker, failure);
    return 0;
}

/* A Status from a training task for itself says it is alive, and whether
 * its passes are done. A tool or a ps task speaks for no worker; a chief
 * or worker identity only for its own task (unlike done_seen and failure,
 * such a call is not refused: Status stays open to read). */
static void note_status_caller(dt_ps *ps, const dt_rpc_peer *peer, const dt_msg_status_req *req) {
    if (req->worker < 0 || req->worker >= ps->params.cluster->num_workers) return;
    if (peer->role == DT_PEER_TOOL || peer->role == DT_PEER_PS) return;
    if (peer->role != DT_PEER_ANY && peer->task != req->worker) return;
    pthread_mutex_lock(&ps->stats_mu);
    heard_locked(ps, req->worker);
    if (req->passes_done) ps->heard[req->worker].passes_done = 1;
    pthread_mutex_unlock(&ps->stats_mu);
}

/* A heartbeat's reply: the beat only needs the call answered, so it
 * carries the job's state and none of what costs (workers, tables,
 * counters). Told nothing: the caller's training loop hears the end. */
static int heartbeat_reply(dt_ps *ps, dt_rpc_buf *reply, dt_err *err) {
    dt_msg_status_resp resp;
    memset(&resp, 0, sizeof resp);
    pthread_rwlock_rdlock(&ps->model_lock);
    resp.incarnation = ps->incarnation;
    resp.ready = ps->ready;
    resp.max_steps = ps->max_steps;
    pthread_rwlock_unlock(&ps->model_lock);
    resp.global_step = atomic_load(&ps->global_step);
    resp.done = check_done(ps, -1) && !job_failed(ps);
    return encode_reply(DT_MSG_STATUS_RESP, &resp, reply, err);
}

static int handle_status(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request,
                         dt_rpc_buf *reply, dt_err *err) {
    dt_ps *ps = ctx;
    dt_msg_status_req req;
    memset(&req, 0, sizeof req);
    int rc = dt_codec_decode_buf(DT_MSG_STATUS_REQ, request, &req, err);
    if (rc < 0) return rc;
    if (req.done_seen && (rc = note_done_seen(ps, peer, req.worker, err)) < 0) return rc;
    if (req.failure[0] && (rc = note_failed_worker(ps, peer, req.worker, req.failure, err)) < 0)
        return rc;
    note_status_caller(ps, peer, &req);
    if (req.heartbeat) return heartbeat_reply(ps, reply, err);
    dt_msg_status_resp resp;
    memset(&resp, 0, sizeof resp);
    pthread_rwlock_rdlock(&ps->model_lock);
    resp.incarnation = ps->incarnation;
    resp.ready = ps->ready;
    resp.global_step = atomic_load(&ps->global_step);
    resp.max_steps = ps->max_steps;
    resp.num_variables = ps->vars.count;
    resp.num_bytes = ps->num_bytes;
    snprintf(resp.model, sizeof resp.model, "%s", ps->model);
    snprintf(resp.mode, sizeof resp.mode, "%s", dt_mode_name(ps->consistency.mode));
    table_status(ps, &resp);
    pthread_rwlock_unlock(&ps->model_lock);
    resp.done = check_done(ps, req.worker); /* a failed job is over, and told so */
    pthread_mutex_lock(&ps->life_mu);
    snprintf(resp.failure, sizeof resp.failure, "%s", ps->failure);
    pthread_mutex_unlock(&ps->life_mu);
    if (resp.failure[0]) resp.done = false; /* over, but not done: failed */
    resp.uptime_ms = ms_since(&ps->started);
    resp.pushes_applied = atomic_load(&ps->pushes_applied);
    resp.pushes_rejected = atomic_load(&ps->pushes_rejected);
    resp.pushes_dropped = atomic_load(&ps->pushes_dropped);
    resp.pushes_nonfinite = atomic_load(&ps->pushes_nonfinite);
    resp.calls_refused =
        atomic_load(&ps->calls_refused) + (ps->server ? dt_rpc_server_refused(ps->server) : 0);
    if (ps->server) {
        dt_adm_stats guard;
        dt_rpc_server_guard_stats(ps->server, &guard);
        resp.conns_closed_flood = guard.closed_flood;
        resp.conns_closed_slow = guard.closed_slow;
        resp.conns_closed_over_cap = guard.closed_over_cap;
        resp.conns_closed_backoff = guard.closed_backoff;
        resp.calls_dropped = guard.calls_dropped;
    }
    pthread_mutex_lock(&ps->stats_mu);
    memcpy(resp.staleness_counts, ps->staleness_counts, sizeof resp.staleness_counts);
    resp.num_staleness_counts = DT_STALENESS_BUCKETS;
    resp.max_lead = ps->max_lead;
    activity_locked(ps, &resp);
    pthread_mutex_unlock(&ps->stats_mu);
    pthread_mutex_lock(&ps->sync_mu);
    resp.sync_digest = ps->sync_digest;
    pthread_mutex_unlock(&ps->sync_mu);
    return encode_reply(DT_MSG_STATUS_RESP, &resp, reply, err);
}

static int handle_shutdown(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                           const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    dt_ps *ps = ctx;
    dt_msg_shutdown_req req;
    memset(&req, 0, sizeof req);
    int rc = dt_codec_decode_buf(DT_MSG_SHUTDOWN_REQ, request, &req, err);
    if (rc < 0) return rc;
    pthread_mutex_lock(&ps->life_mu);
    int first = !ps->shutdown_requested;
    if (first) {
        ps->shutdown_requested = 1;
        clock_gettime(CLOCK_MONOTONIC, &ps->shutdown_at);
        ps->worker_told_done[0] = 1; /* the chief asked, so it knows */
        /* The reason is text (the codec checked it): safe to log and echo. */
        snprintf(ps->failure, sizeof ps->failure, "%s", req.failure);
    }
    pthread_mutex_unlock(&ps->life_mu);
    if (first && req.failure[0])
        dt_log(DT_LOG_ERROR, "%s: job failed: %s (the chief says so); telling the workers",
               ps->name, req.failure);
    else
        dt_log(DT_LOG_INFO, "%s: shutdown requested: %s%s", ps->name,
               req.failure[0] ? req.failure : req.reason,
               first ? "" : " (after the job had ended: no change)");
    dt_msg_shutdown_resp resp = {0};
    return encode_reply(DT_MSG_SHUTDOWN_RESP, &resp, reply, err);
}

/* grpc.health.v1.Health/Check: SERVING while the ps holds a model and the
 * job is not done; NOT_SERVING before the chief created the variables and
 * once the job is done. Open to every caller (no token): probes carry none. */
static int handle_health(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                         const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    dt_ps *ps = ctx;
    dt_msg_health_req req;
    memset(&req, 0, sizeof req);
    int rc = dt_codec_decode_buf(DT_MSG_HEALTH_REQ, request, &req, err);
    if (rc < 0) return rc;
    if (req.service[0] && strcmp(req.service, DT_HEALTH_SERVICE) != 0)
        return dt_err_set(err, DT_ENOTFOUND,
                          "%s: health: unknown service \"%s\" (this ps serves \"\" and \"%s\")",
                          ps->name, req.service, DT_HEALTH_SERVICE);
    pthread_rwlock_rdlock(&ps->model_lock);
    int ready = ps->ready;
    pthread_rwlock_unlock(&ps->model_lock);
    pthread_mutex_lock(&ps->life_mu);
    int done = done_locked(ps);
    pthread_mutex_unlock(&ps->life_mu);
    dt_msg_health_resp resp = {.status =
                                   ready && !done ? DT_HEALTH_SERVING : DT_HEALTH_NOT_SERVING};
    return encode_reply(DT_MSG_HEALTH_RESP, &resp, reply, err);
}

/* ---- lifecycle --------------------------------------------------------- */

/* Who may call what when the ps authenticates its callers: the chief
 * creates and ends the job and trains as worker 0; workers train; tools
 * (and every trainer) read the status. */
#define ROLES_CHIEF DT_PEER_MASK(DT_PEER_CHIEF)
#define ROLES_TRAINERS (DT_PEER_MASK(DT_PEER_CHIEF) | DT_PEER_MASK(DT_PEER_WORKER))
static const dt_rpc_method ps_methods[] = {
    {DT_METHOD_CREATE, handle_create, ROLES_CHIEF, 0},
    {DT_METHOD_PULL, handle_pull, ROLES_TRAINERS, 0},
    {DT_METHOD_PUSH, handle_push, ROLES_TRAINERS, 0},
    {DT_METHOD_STATUS, handle_status,
     ROLES_TRAINERS | DT_PEER_MASK(DT_PEER_TOOL) | DT_PEER_MASK(DT_PEER_PS), 0},
    {DT_METHOD_SHUTDOWN, handle_shutdown, ROLES_CHIEF, 0},
    {DT_METHOD_SPARSE_PULL, handle_sparse_pull, ROLES_TRAINERS, 0},
    {DT_METHOD_SPARSE_EXPORT, handle_sparse_export, ROLES_CHIEF, 0},
    {DT_METHOD_SPARSE_IMPORT, handle_sparse_import, ROLES_CHIEF, 0},
    {DT_METHOD_HEALTH_CHECK, handle_health, 0, 1}, /* open: probes carry no token */
};

/* The requests a ps reads at once: while they hold less than half its
 * largest message, another is read; past that, the others wait their turn
 * (as many large pushes arriving together would otherwise all sit in
 * memory). Requests in flight so stay under 1.5 largest messages. */
static long long inflight_bound(const dt_ps_params *params) {
    long long max =
        params->max_message_bytes ? params->max_message_bytes : DT_RPC_DEFAULT_MAX_MESSAGE_BYTES;
    return max / 2 > 0 ? max / 2 : 1;
}

/* The threads of a large gradient (dt_ps_params): the machine's cores by
 * default, as many as MAX_APPLY_THREADS. */
static int start_pool(dt_ps *ps, dt_err *err) {
    int threads = ps->params.apply_threads;
    if (threads <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 0 ? (int)(cores < MAX_APPLY_THREADS ? cores : MAX_APPLY_THREADS) : 1;
    }
    ps->apply_threads = threads < MAX_APPLY_THREADS ? threads : MAX_APPLY_THREADS;
    ps->parallel_min_elems = ps->params.parallel_min_elems > 0 ? ps->params.parallel_min_elems
                                                               : DEFAULT_PARALLEL_MIN_ELEMS;
    if (ps->apply_threads <= 1) return 0;
    int rc = dt_pool_new(ps->apply_threads - 1, &ps->pool, err);
    if (rc < 0) return dt_err_wrap(err, rc, "%s", ps->name);
    return 0;
}

int dt_ps_start(const dt_ps_params *params, dt_ps **out, dt_err *err) {
    *out = NULL;
    const dt_cluster *c = params->cluster;
    if (params->task_index < 0 || params->task_index >= c->num_ps)
        return dt_err_set(err, DT_EINVAL, "ps: task index %d out of range (cluster has %d ps)",
                          params->task_index, c->num_ps);
    dt_ps *ps = dt_calloc(1, sizeof *ps);
    if (!ps) return dt_err_set(err, DT_ENOMEM, "ps: out of memory");
    ps->worker_told_done = dt_calloc((size_t)c->num_workers + 1, sizeof *ps->worker_told_done);
    if (!ps->worker_told_done) {
        free(ps);
        return dt_err_set(err, DT_ENOMEM, "ps: out of memory");
    }
    size_t nw = (size_t)c->num_workers + 1;
    ps->clock = dt_calloc(nw, sizeof *ps->clock);
    ps->last_push = dt_calloc(nw, sizeof *ps->last_push);
    ps->seen = dt_calloc(nw, sizeof *ps->seen);
    ps->acc_from = dt_calloc(nw, sizeof *ps->acc_from);
    ps->pushes_from = dt_calloc(nw, sizeof *ps->pushes_from);
    ps->memo = dt_calloc(nw, sizeof *ps->memo);
    ps->pushed_at = dt_calloc(nw, sizeof *ps->pushed_at);
    ps->worker_failure = dt_calloc(nw, sizeof *ps->worker_failure);
    ps->heard = dt_calloc(nw, sizeof *ps->heard);
    if (!ps->clock || !ps->last_push || !ps->seen || !ps->acc_from || !ps->pushes_from ||
        !ps->memo || !ps->pushed_at || !ps->worker_failure || !ps->heard) {
        free(ps->heard);
        free(ps->worker_failure);
        free(ps->pushes_from);
        free(ps->memo);
        free(ps->pushed_at);
        free(ps->clock);
        free(ps->last_push);
        free(ps->seen);
        free(ps->acc_from);
        free(ps->worker_told_done);
        free(ps);
        return dt_err_set(err, DT_ENOMEM, "ps: out of memory");
    }
    pthread_mutex_init(&ps->stats_mu, NULL);
    pthread_mutex_init(&ps->sync_mu, NULL);
    ps->params = *params;
    if (ps->params.num_threads <= 0) ps->params.num_threads = DEFAULT_THREADS;
    if (ps->params.linger_ms <= 0) ps->params.linger_ms = DEFAULT_LINGER_MS;
    const dt_addr *addr = &c->ps[params->task_index];
    snprintf(ps->name, sizeof ps->name, "ps:%d %.40s", params->task_index, addr->addr);
    ps->incarnation = dt_rpc_random_id();
    clock_gettime(CLOCK_MONOTONIC, &ps->started);
    snprintf(ps->identity, sizeof ps->identity, "ps:%d", params->task_index);
    pthread_rwlock_init(&ps->model_lock, NULL);
    pthread_mutex_init(&ps->life_mu, NULL);

    char listen[DT_HOST_MAX + 16];
    if (params->listen_addr)
        snprintf(listen, sizeof listen, "%s", params->listen_addr);
    else /* every interface: "[::]" takes IPv4 too where the system allows */
        snprintf(listen, sizeof listen, strchr(addr->host, ':') ? "[::]:%d" : "0.0.0.0:%d",
                 addr->port);
    dt_rpc_server_params sp = {.addr = listen,
                               .num_threads = ps->params.num_threads,
                               .methods = ps_methods,
                               .num_methods = (int)(sizeof ps_methods / sizeof ps_methods[0]),
                               .ctx = ps,
                               .security = params->security,
                               .num_workers = c->num_workers,
                               .num_ps = c->num_ps,
                               .max_message_bytes = params->max_message_bytes,
                               .in_pieces = 1,
                               .inflight_bytes = inflight_bound(params),
                               .guard = params->guard};
    int rc = start_pool(ps, err);
    if (rc < 0) {
        dt_ps_free(ps);
        return rc;
    }
    if (params->no_server) {
        *out = ps;
        return 0;
    }
    rc = dt_rpc_server_start(&sp, &ps->server, err);
    if (rc < 0) {
        dt_err_wrap(err, rc, "ps:%d (%s)", params->task_index, addr->addr);
        dt_ps_free(ps);
        return rc;
    }
    dt_log(DT_LOG_INFO, "%s: serving on %s (incarnation %016llx)", ps->name, listen,
           (unsigned long long)ps->incarnation);
    *out = ps;
    return 0;
}

int dt_ps_call(dt_ps *ps, const char *method, const dt_rpc_peer *peer, const dt_rpc_buf *request,
               dt_rpc_buf *reply, dt_err *err) {
    memset(reply, 0, sizeof *reply);
    for (size_t i = 0; i < sizeof ps_methods / sizeof ps_methods[0]; i++) {
        const dt_rpc_method *m = &ps_methods[i];
        if (strcmp(m->path, method) != 0) continue;
        if (!dt_rpc_method_allows(m, peer))
            return dt_err_set(err, DT_EPERM, "permission denied: %s may not call %s", peer->name,
                              m->path);
        int rc = m->handler(ps, peer, request, reply, err);
        if (rc < 0) dt_rpc_buf_release(reply);
        return rc;
    }
    return dt_err_set(err, DT_EPRECOND, "unknown method %s", method);
}

/* 1 when the job is over and every worker knows, or the linger is up. */
static int finished(dt_ps *ps) {
    pthread_mutex_lock(&ps->life_mu);
    int over = ps->shutdown_requested;
    int failed = ps->failure[0] != '\0';
    int all_told = 1;
    for (int w = 0; w < ps->params.cluster->num_workers; w++)
        all_told &= ps->worker_told_done[w];
    int linger_up = over && ms_since(&ps->shutdown_at) >= ps->params.linger_ms;
    pthread_mutex_unlock(&ps->life_mu);
    if (over && !all_told && linger_up)
        dt_log(DT_LOG_WARN, "%s: not every worker was told the job %s after %d ms; exiting",
               ps->name, failed ? "failed" : "is done", ps->params.linger_ms);
    return over && (all_told || linger_up);
}

#define PEER_ASK_MS 1000 /* how often an empty ps asks the others */
#define PEER_CALL_MS 500 /* deadline of one such Status */

/* The job is over: as if the chief had said so at `since` (NULL: now), so
 * dt_ps_wait exits after its linger (no worker will come to be told). */
static void learn_done(dt_ps *ps, const char *peer, int64_t step, const struct timespec *since) {
    pthread_mutex_lock(&ps->life_mu);
    int first = !ps->shutdown_requested;
    if (first) {
        ps->shutdown_requested = 1;
        if (since)
            ps->shutdown_at = *since;
        else
            clock_gettime(CLOCK_MONOTONIC, &ps->shutdown_at);
    }
    pthread_mutex_unlock(&ps->life_mu);
    if (first)
        dt_log(DT_LOG_INFO,
               "%s: %s says the job is done (global_step %lld); no chief will "
               "create a model here",
               ps->name, peer, (long long)step);
}

/* The log dir's latest checkpoint at max_steps: the job ended (a chief
 * that came now would restore it and stop at once). The linger counts from
 * this ps's start: a chief had that long to come. */
static void ask_log_dir(dt_ps *ps) {
    if (!ps->params.log_dir || !ps->params.log_dir[0] || ps->params.max_steps <= 0) return;
    int64_t step = dt_ckpt_latest_step(ps->params.log_dir);
    if (step < ps->params.max_steps) return;
    char who[DT_PATH_MAX + 64];
    snprintf(who, sizeof who, "the latest checkpoint in %s (max_steps %lld)", ps->params.log_dir,
             (long long)ps->params.max_steps);
    learn_done(ps, who, step, &ps->started);
}

/* Asks the other ps tasks, all at once with a short deadline, whether the
 * job is done. A task that is down or empty too says nothing. */
static void ask_peers(dt_ps *ps) {
    const dt_cluster *c = ps->params.cluster;
    if (c->num_ps < 2) return;
    /* Made at the first ask (most ps tasks never need them); what a short
     * allocation left NULL is tried again next time, freed by dt_ps_free. */
    if (!ps->peers) ps->peers = dt_calloc((size_t)c->num_ps, sizeof *ps->peers);
    if (!ps->peer_calls) ps->peer_calls = dt_calloc((size_t)c->num_ps, sizeof *ps->peer_calls);
    if (!ps->peer_of) ps->peer_of = dt_calloc((size_t)c->num_ps, sizeof *ps->peer_of);
    if (!ps->peers || !ps->peer_calls || !ps->peer_of) return;
    dt_rpc_call *calls = ps->peer_calls;
    int *who = ps->peer_of, k = 0;
    dt_rpc_security sec = {0};
    if (ps->params.security) sec = *ps->params.security;
    sec.identity = ps->identity;
    dt_msg_status_req req = {.worker = -1};
    uint8_t bytes[16];
    dt_err err;
    dt_err_clear(&err);
    int64_t n = dt_codec_size(DT_MSG_STATUS_REQ, &req, &err);
    DT_ASSERT(n >= 0 && n <= (int64_t)sizeof bytes);
    if (dt_codec_encode(DT_MSG_STATUS_REQ, &req, bytes, (size_t)n, &err) < 0) return;
    dt_rpc_buf request = {0};
    if (dt_rpc_buf_alloc(&request, (size_t)n, &err) < 0) return;
    if (n) memcpy(request.data, bytes, (size_t)n);
    for (int q = 0; q < c->num_ps; q++) {
        if (q == ps->params.task_index) continue;
        if (!ps->peers[q] &&
            dt_rpc_channel_new_secure(c->ps[q].addr, &sec, &ps->peers[q], &err) < 0)
            continue; /* e.g. a token file without this task's token: said at start */
        memset(&calls[k], 0, sizeof calls[k]);
        calls[k].channel = ps->peers[q];
        calls[k].method = dt_codec_method(DT_MSG_STATUS_REQ);
        calls[k].request = &request;
        who[k++] = q;
    }
    if (k > 0 && dt_rpc_call_all(calls, k, PEER_CALL_MS, NULL) < 0) {
        /* Each call's own outcome is read below. */
    }
    for (int i = 0; i < k; i++) {
        dt_msg_status_resp st;
        memset(&st, 0, sizeof st);
        if (calls[i].err.code == 0 &&
            dt_codec_decode(DT_MSG_STATUS_RESP, calls[i].response.data, calls[i].response.len, &st,
                            NULL) == 0 &&
            st.done) {
            char peer[32];
            snprintf(peer, sizeof peer, "ps:%d", who[i]);
            learn_done(ps, peer, st.global_step, NULL);
        }
        dt_rpc_buf_release(&calls[i].response);
    }
    dt_rpc_buf_release(&request);
}

/* An empty ps that has not learned the end yet looks, once a second, at
 * its log dir and asks the other ps tasks whether the job is done (a ps
 * restarted after the end would otherwise wait for a chief that never
 * comes). */
static void ask_whether_done(dt_ps *ps) {
    if (ms_since(&ps->peers_asked) < PEER_ASK_MS) return;
    pthread_rwlock_rdlock(&ps->model_lock);
    int ready = ps->ready;
    pthread_rwlock_unlock(&ps->model_lock);
    pthread_mutex_lock(&ps->life_mu);
    int over = ps->shutdown_requested;
    pthread_mutex_unlock(&ps->life_mu);
    if (ready || over) return;
    clock_gettime(CLOCK_MONOTONIC, &ps->peers_asked);
    ask_log_dir(ps);
    ask_peers(ps);
}

/* The ps's peak resident memory against its model's, at its end. */
static void log_peak_rss(dt_ps *ps) {
    int64_t peak = dt_mem_peak_rss();
    pthread_rwlock_rdlock(&ps->model_lock);
    int64_t model = ps->num_bytes * (1 + (ps->ready ? dt_optim_num_slots(&ps->optim) : 0));
    /* A table's rows held, their non-zero weights and memory (the rows'
     * share of the peak). */
    for (int i = 0; i < ps->num_tables; i++) {
        dt_table_stats st;
        dt_table_stats_of(ps->tables[i], &st);
        dt_log(DT_LOG_INFO, "%s: table %s: %lld rows held, %lld weights non-zero, %.1f MB",
               ps->name, dt_table_config_of(ps->tables[i])->name, (long long)st.rows_held,
               (long long)dt_table_count_nonzero(ps->tables[i]), (double)st.bytes / 1e6);
    }
    pthread_rwlock_unlock(&ps->model_lock);
    if (peak >= 0)
        dt_log(DT_LOG_INFO, "%s: peak RSS %.1f MB (VmHWM); variables and slots %.1f MB", ps->name,
               (double)peak / 1e6, (double)model / 1e6);
}

int dt_ps_wait(dt_ps *ps, const atomic_int *stop, dt_err *err) {
    int announced = 0;
    for (;;) {
        if (stop && *stop) return dt_err_set(err, DT_ECANCELLED, "%s: stopped by signal", ps->name);
        int over = finished(ps);
        if (over && job_failed(ps)) {
            if (!ps->params.keep_serving) {
                pthread_mutex_lock(&ps->life_mu);
                dt_err_set(err, DT_EABORTED, "%s: job failed: %s; exiting", ps->name, ps->failure);
                pthread_mutex_unlock(&ps->life_mu);
                return DT_EABORTED;
            }
            if (!announced)
                dt_log(DT_LOG_INFO, "%s: job failed; --keep-serving: still serving", ps->name);
            announced = 1;
        } else if (over) {
            if (!ps->params.keep_serving) {
                dt_log(DT_LOG_INFO,
                       "%s: job done at global_step %lld after %lld pushes (%lld retries) "
                       "and %lld pulls; exiting",
                       ps->name, (long long)atomic_load(&ps->global_step),
                       (long long)atomic_load(&ps->pushes_applied),
                       (long long)atomic_load(&ps->pushes_retried),
                       (long long)atomic_load(&ps->pulls_served));
                log_peak_rss(ps);
                return 0;
            }
            if (!announced)
                dt_log(DT_LOG_INFO, "%s: job done; --keep-serving: still serving", ps->name);
            announced = 1;
        }
        sync_timeout_check(ps);
        ask_whether_done(ps);
        sample_rate(ps);
        struct timespec nap = {0, 50 * 1000000L};
        nanosleep(&nap, NULL);
    }
}

void dt_ps_free(dt_ps *ps) {
    if (!ps) return;
    dt_rpc_server_stop(ps->server, 2000);
    for (int q = 0; ps->peers && q < ps->params.cluster->num_ps; q++)
        dt_rpc_channel_free(ps->peers[q]);
    free(ps->peers);
    free(ps->peer_calls);
    free(ps->peer_of);
    free_model(ps);
    dt_pool_free(ps->pool);
    pthread_rwlock_destroy(&ps->model_lock);
    pthread_mutex_destroy(&ps->life_mu);
    pthread_mutex_destroy(&ps->stats_mu);
    pthread_mutex_destroy(&ps->sync_mu);
    free(ps->worker_told_done);
    free(ps->clock);
    free(ps->last_push);
    free(ps->seen);
    free(ps->acc_from);
    free(ps->pushes_from);
    free(ps->memo);
    free(ps->pushed_at);
    for (int w = 0; ps->worker_failure && w < ps->params.cluster->num_workers; w++)
        free(ps->worker_failure[w]);
    free(ps->worker_failure);
    free(ps->heard);
    free(ps);
}
