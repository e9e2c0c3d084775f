/*
 * ps_status: what the ps tells about the job: Status, Shutdown, health.
 *
 * The callers' activity (who called, pushed, finished a pass) is kept for
 * Status's WorkerActivity and steps/s; Shutdown decides how the job ended
 * (the first one wins). Threading: activity under stats_mu, the job's end
 * under life_mu.
 */

#include "ps_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "log.h"

/* ---- activity, for Status ------------------------------------------------ */

/* worker (in range, allowed to speak for itself) called: it is alive now.
 * stats_mu held. */
static void heard_locked(dt_ps *ps, int32_t worker) {
    dt_clock_now(&ps->heard[worker].at);
    ps->heard[worker].called = 1;
}

/* A call from worker that passed ps_check_caller. */
void ps_note_call(dt_ps *ps, int32_t worker) {
    if (worker < 0 || worker >= ps->params.cluster->num_workers) return;
    pthread_mutex_lock(&ps->stats_mu);
    heard_locked(ps, worker);
    pthread_mutex_unlock(&ps->stats_mu);
}

/* Notes a push from worker and when it came, whatever becomes of it
 * (ps_count_taken counts it once taken). A
 * worker that said it failed and pushes again was restarted: it is back,
 * and is to be told the job's end like the others. One that said its
 * passes were done and pushes again trains on (or was restarted): it is
 * waited for again. */
void ps_note_push(dt_ps *ps, int32_t worker) {
    if (worker < 0 || worker >= ps->params.cluster->num_workers) return;
    pthread_mutex_lock(&ps->stats_mu);
    dt_clock_now(&ps->pushed_at[worker]);
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
void ps_count_taken(dt_ps *ps, int32_t worker) {
    if (worker < 0 || worker >= ps->params.cluster->num_workers) return;
    pthread_mutex_lock(&ps->stats_mu);
    ps->pushes_from[worker]++;
    pthread_mutex_unlock(&ps->stats_mu);
}

/* Takes a sample of the global step once a second (called from dt_ps_wait's
 * loop). */
void ps_sample_rate(dt_ps *ps) {
    pthread_mutex_lock(&ps->stats_mu);
    int last = (ps->rate_next + RATE_SAMPLES - 1) % RATE_SAMPLES;
    if (ps->rate_count == 0 || dt_ms_since(&ps->rate_at[last]) >= 1000) {
        dt_clock_now(&ps->rate_at[ps->rate_next]);
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
            (double)(dt_ms_since(&ps->rate_at[oldest]) - dt_ms_since(&ps->rate_at[newest])) /
            1000.0;
        int64_t steps = ps->rate_step[newest] - ps->rate_step[oldest];
        resp->steps_per_sec = secs > 0 && steps > 0 ? (double)steps / secs : 0;
    }
    int n = 0;
    for (int w = 0; w < ps->params.cluster->num_workers && n < DT_STATUS_MAX_WORKERS; w++) {
        if (!ps->pushes_from[w] && !ps->worker_failure[w] && !ps->heard[w].called) continue;
        resp->workers[n].worker = w;
        resp->workers[n].pushes = ps->pushes_from[w];
        resp->workers[n].last_push_ms = ps->pushed_at[w].tv_sec || ps->pushed_at[w].tv_nsec
                                            ? dt_ms_since(&ps->pushed_at[w])
                                            : -1;
        resp->workers[n].last_seen_ms = ps->heard[w].called ? dt_ms_since(&ps->heard[w].at) : -1;
        resp->workers[n].passes_done = ps->heard[w].passes_done;
        if (ps->worker_failure[w])
            snprintf(resp->workers[n].failure, sizeof resp->workers[n].failure, "%s",
                     ps->worker_failure[w]);
        n++;
    }
    resp->num_workers = n;
}

/* ---- Status and Shutdown ----------------------------------------------- */

/* The counters Status does not carry, for /metrics (ps.h). */
void dt_ps_counters_of(dt_ps *ps, dt_ps_counters *out) {
    out->pulls = atomic_load(&ps->pulls_served);
    out->checkpoint_pulls = atomic_load(&ps->ckpt_pulls);
    out->pushes_retried = atomic_load(&ps->pushes_retried);
    pthread_rwlock_rdlock(&ps->model_lock);
    out->slot_bytes = ps->built ? ps->num_bytes * dt_optim_num_slots(&ps->optim) : 0;
    pthread_rwlock_unlock(&ps->model_lock);
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
    int rc = ps_check_caller(ps, peer, worker, "status", err);
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
    int rc = ps_check_caller(ps, peer, worker, "status", err);
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
    resp.done = ps_check_done(ps, -1) && !ps_job_failed(ps);
    pthread_mutex_lock(&ps->life_mu);
    snprintf(resp.job_id, sizeof resp.job_id, "%s", ps->job_id);
    pthread_mutex_unlock(&ps->life_mu);
    return ps_encode_reply(DT_MSG_STATUS_RESP, &resp, reply, err);
}

int ps_handle_status(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request,
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
    resp.done = ps_check_done(ps, req.worker); /* a failed job is over, and told so */
    pthread_mutex_lock(&ps->life_mu);
    snprintf(resp.failure, sizeof resp.failure, "%s", ps->failure);
    snprintf(resp.job_id, sizeof resp.job_id, "%s", ps->job_id);
    pthread_mutex_unlock(&ps->life_mu);
    if (resp.failure[0]) resp.done = false; /* over, but not done: failed */
    resp.uptime_ms = dt_ms_since(&ps->started);
    resp.pushes_applied = atomic_load(&ps->pushes_applied);
    resp.pushes_rejected = atomic_load(&ps->pushes_rejected);
    resp.pushes_dropped = atomic_load(&ps->pushes_dropped);
    resp.pushes_nonfinite = atomic_load(&ps->pushes_nonfinite);
    resp.updates_nonfinite = atomic_load(&ps->updates_nonfinite);
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
    return ps_encode_reply(DT_MSG_STATUS_RESP, &resp, reply, err);
}

int ps_handle_shutdown(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                       const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    dt_ps *ps = ctx;
    dt_msg_shutdown_req req;
    memset(&req, 0, sizeof req);
    int rc = dt_codec_decode_buf(DT_MSG_SHUTDOWN_REQ, request, &req, err);
    if (rc < 0) return rc;
    pthread_mutex_lock(&ps->life_mu);
    if (req.stop_training && !req.failure[0]) {
        int was = ps->training_stopped || ps->shutdown_requested;
        ps->training_stopped = 1;
        pthread_mutex_unlock(&ps->life_mu);
        dt_log(DT_LOG_INFO, "%s: training stopped at global_step %lld: %s%s", ps->name,
               (long long)atomic_load(&ps->global_step), req.reason,
               was ? " (already over: no change)" : "; serving the final pull");
        dt_msg_shutdown_resp resp = {0};
        return ps_encode_reply(DT_MSG_SHUTDOWN_RESP, &resp, reply, err);
    }
    int first = !ps->shutdown_requested;
    if (first) {
        ps->shutdown_requested = 1;
        dt_clock_now(&ps->shutdown_at);
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
    return ps_encode_reply(DT_MSG_SHUTDOWN_RESP, &resp, reply, err);
}

/* grpc.health.v1.Health/Check: SERVING while the ps holds a model and the
 * job is not done; NOT_SERVING before the chief created the variables and
 * once the job is done. Open to every caller (no token): probes carry none. */
int ps_handle_health(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
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
    int done = ps_done_locked(ps);
    pthread_mutex_unlock(&ps->life_mu);
    dt_msg_health_resp resp = {.status =
                                   ready && !done ? DT_HEALTH_SERVING : DT_HEALTH_NOT_SERVING};
    return ps_encode_reply(DT_MSG_HEALTH_RESP, &resp, reply, err);
}
