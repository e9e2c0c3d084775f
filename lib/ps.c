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
 *  - The job a ps knows (its job id, echoed by Status) comes from the
 *    chief's Create; before one, from the latest checkpoint of a log dir
 *    its own config named (params.log_dir, never a default), or from the
 *    peer it learned the job's end from. A ps decides "done" from a
 *    checkpoint only against the max_steps recorded in that checkpoint.
 *
 * Threading: see ps.h. The lifecycle fields (shutdown, workers told) are
 * under `life_mu`; dt_ps_wait polls them with a short sleep. A large
 * gradient's check and update may also run on the pool's helpers, by ranges
 * of elements (each element read and written by one thread), while the
 * handler that posted them waits, its variable's lock held.
 *
 * The ps is cut by job, sharing `struct dt_ps` through ps_internal.h: this
 * file starts it, dispatches its methods, and watches the job's end (peers
 * asked, the log dir looked at); ps_store.c holds the variable buffers and
 * Create; ps_pull.c, Pull; ps_push.c, a push checked and applied (a large
 * gradient by ranges, the retry memo); ps_sync.c, the sync mode's
 * accumulate, decide and follow; ps_rows.c, the tables' sparse rows on the
 * wire (SparsePull, SparseExport, SparseImport); ps_status.c, the activity
 * Status reports, Status, Shutdown and the health check.
 */
#include "ps.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "checkpoint.h"
#include "fileio.h"
#include "job.h"
#include "log.h"
#include "memstat.h"
#include "ps_internal.h"
#include "safetensors.h"

/* ---- the handlers' checks: the job's end, the caller, the reply --------- */

int ps_done_locked(dt_ps *ps) {
    return ps->shutdown_requested || ps->training_stopped ||
           (ps->ready && atomic_load(&ps->global_step) >= ps->max_steps);
}

/* Whether the job is done; remembers that `worker` has now been told. */
int ps_check_done(dt_ps *ps, int32_t worker) {
    pthread_mutex_lock(&ps->life_mu);
    int done = ps_done_locked(ps);
    if (done && worker >= 0 && worker < ps->params.cluster->num_workers)
        ps->worker_told_done[worker] = 1;
    pthread_mutex_unlock(&ps->life_mu);
    return done;
}

/* DT_EABORTED "job failed: <reason>" once the chief said the job failed
 * (remembering that `worker` has now heard it), else 0. `what` names the
 * call in the message. */
int ps_check_failed(dt_ps *ps, int32_t worker, const char *what, dt_err *err) {
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
int ps_job_failed(dt_ps *ps) {
    pthread_mutex_lock(&ps->life_mu);
    int failed = ps->failure[0] != '\0';
    pthread_mutex_unlock(&ps->life_mu);
    return failed;
}

/* A chief or worker identity may speak only for its own task: with a
 * certificate or a per-identity token, "worker:1" pushing as worker 2 is
 * refused. Without authentication (DT_PEER_ANY) the index is the caller's
 * word, as docs/security.md says. */
int ps_check_caller(dt_ps *ps, const dt_rpc_peer *peer, int32_t worker, const char *method,
                    dt_err *err) {
    if (peer->role != DT_PEER_CHIEF && peer->role != DT_PEER_WORKER) return 0;
    if (worker == peer->task) return 0;
    atomic_fetch_add(&ps->calls_refused, 1);
    return dt_err_set(err, DT_EPERM, "%s: %s: %s may not call as worker %d", ps->name, method,
                      peer->name, (int)worker);
}

/* Replies carry large variables as runs of their buffers (no copy; see
 * ps_ref_var), small ones copied under the variable's lock. */
int ps_encode_reply(dt_msg_type type, const void *msg, dt_rpc_buf *reply, dt_err *err) {
    return dt_codec_encode_buf(type, msg, reply, err);
}

/* ---- lifecycle --------------------------------------------------------- */

/* Who may call what when the ps authenticates its callers: the chief
 * creates and ends the job and trains as worker 0; workers train; tools
 * (and every trainer) read the status. */
#define ROLES_CHIEF DT_PEER_MASK(DT_PEER_CHIEF)
#define ROLES_TRAINERS (DT_PEER_MASK(DT_PEER_CHIEF) | DT_PEER_MASK(DT_PEER_WORKER))
static const dt_rpc_method ps_methods[] = {
    {DT_METHOD_CREATE, ps_handle_create, ROLES_CHIEF, 0},
    {DT_METHOD_PULL, ps_handle_pull, ROLES_TRAINERS, 0},
    {DT_METHOD_PUSH, ps_handle_push, ROLES_TRAINERS, 0},
    {DT_METHOD_STATUS, ps_handle_status,
     ROLES_TRAINERS | DT_PEER_MASK(DT_PEER_TOOL) | DT_PEER_MASK(DT_PEER_PS), 0},
    {DT_METHOD_SHUTDOWN, ps_handle_shutdown, ROLES_CHIEF, 0},
    {DT_METHOD_SPARSE_PULL, ps_handle_sparse_pull, ROLES_TRAINERS, 0},
    {DT_METHOD_SPARSE_EXPORT, ps_handle_sparse_export, ROLES_CHIEF, 0},
    {DT_METHOD_SPARSE_IMPORT, ps_handle_sparse_import, ROLES_CHIEF, 0},
    {DT_METHOD_HEALTH_CHECK, ps_handle_health, 0, 1}, /* open: probes carry no token */
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
    dt_clock_now(&ps->started);
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
    int linger_up = over && dt_ms_since(&ps->shutdown_at) >= ps->params.linger_ms;
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
            dt_clock_now(&ps->shutdown_at);
    }
    pthread_mutex_unlock(&ps->life_mu);
    if (first)
        dt_log(DT_LOG_INFO,
               "%s: %s says the job is done (global_step %lld); no chief will "
               "create a model here",
               ps->name, peer, (long long)step);
}

/* The epochs of a checkpoint's job (its "job" metadata) when they set its
 * length (max_steps 0), else INT_MAX: a job that says nothing, or one that
 * cannot be read, is taken to have made every pass asked of it. */
static int epochs_of(const char *job_json) {
    dt_job *job = job_json ? dt_malloc(sizeof *job) : NULL; /* KBs of paths: not on the stack */
    if (!job) return INT_MAX;
    dt_job_defaults(job);
    dt_err err;
    dt_err_clear(&err);
    int epochs = dt_job_parse(job_json, "checkpoint job", job, &err) < 0 || job->max_steps > 0
                     ? INT_MAX
                     : job->epochs;
    free(job);
    return epochs;
}

/* Whether the latest checkpoint (header m) ends the job for this ps: at
 * the max_steps it records, and at or past what this ps's own config asks
 * (max_steps, epochs). A job that early stopping ended is over below any. */
static int checkpoint_ends_job(const dt_ps *ps, const dt_safetensors_meta *m) {
    if (m->max_steps <= 0 || m->global_step < m->max_steps) return 0;
    if (m->stopped_early) return 1;
    if (ps->params.max_steps > 0 && m->global_step < ps->params.max_steps) return 0;
    return ps->params.epochs <= 0 || epochs_of(m->job) >= ps->params.epochs;
}

/* The log dir its own config named (never a default: a ps started without
 * one learns its job from the chief alone): the latest checkpoint's job id
 * (else the log dir's job id file's) is the job this ps knows, and that
 * checkpoint at the max_steps it records means the job ended (a chief that
 * came now would restore it and stop at once). The linger counts from this
 * ps's start: a chief had that long to come. A checkpoint that records no
 * max_steps decides nothing. */
static void ask_log_dir(dt_ps *ps) {
    const char *dir = ps->params.log_dir;
    if (!dir || !dir[0]) return;
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    char path[DT_PATH_MAX + 64];
    dt_err err;
    dt_err_clear(&err);
    if (dt_ckpt_latest_meta(dir, &meta, path, sizeof path, &err) <= 0) return;
    char id[DT_JOB_ID_MAX];
    snprintf(id, sizeof id, "%s", meta.job_id);
    if (!id[0] && dt_ckpt_job_id_load(dir, id, &err) <= 0) id[0] = '\0';
    char from[2 * DT_PATH_MAX + 192];
    snprintf(from, sizeof from, "the latest checkpoint in %s", dir);
    if (id[0]) ps_learn_job_id(ps, id, from);
    const int ended = checkpoint_ends_job(ps, &meta);
    dt_safetensors_meta_deinit(&meta);
    if (!ended) return;
    snprintf(from, sizeof from, "%s (job %s, max_steps %lld)", path, id[0] ? id : "(none)",
             (long long)meta.max_steps);
    learn_done(ps, from, meta.global_step, &ps->started);
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
            ps_learn_job_id(ps, st.job_id, peer);
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
    if (dt_ms_since(&ps->peers_asked) < PEER_ASK_MS) return;
    pthread_rwlock_rdlock(&ps->model_lock);
    int ready = ps->ready;
    pthread_rwlock_unlock(&ps->model_lock);
    pthread_mutex_lock(&ps->life_mu);
    int over = ps->shutdown_requested;
    pthread_mutex_unlock(&ps->life_mu);
    if (ready || over) return;
    dt_clock_now(&ps->peers_asked);
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
        if (over && ps_job_failed(ps)) {
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
        ps_sync_timeout_check(ps);
        ask_whether_done(ps);
        ps_sample_rate(ps);
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
    ps_free_model(ps);
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
