/*
 * ps_push: a push checked and applied, and a retried push answered.
 *
 * A push is checked whole (names, dtypes, shapes, finite values) before
 * any variable changes; a large gradient is checked and applied by ranges
 * on the pool's helpers. Each worker's last push id and outcome is kept
 * (the retry memo), so a retry of a push already taken is answered, never
 * applied twice. Threading: model_lock for reading; each variable's update
 * under its own mutex; the memo and clocks under stats_mu.
 */

#include "ps_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "log.h"

/* ---- Push -------------------------------------------------------------- */

/* ---- a large gradient by ranges ------------------------------------------ */

/* One gradient's check or update split into ranges of whole floats, done
 * by the pool's threads and the poller. Each range reads its own part of
 * the message and writes its own elements of the variable and its slots:
 * the rules are element-wise, so the bits are those of one pass. */
typedef struct {
    dt_ps *ps;
    dt_span grad; /* the whole gradient: n floats */
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
    dt_span part = dt_span_sub(&j->grad, from * sizeof(float), count * sizeof(float));
    size_t bad = dt_span_first_nonfinite(&part);
    j->first_bad[range] = bad < count ? from + bad : j->n;
}

/* The first non-finite element of gradient i of grads, or its count: by
 * ranges when it is large and the pool is free, else in one pass. Either
 * way the index is the lowest, so the refusal reads the same. */
static size_t first_nonfinite_of(dt_ps *ps, const dt_tensor_views *grads, int i) {
    dt_piece one;
    range_job j = {.ps = ps, .grad = dt_codec_view_span(grads, i, &one)};
    j.n = j.grad.len / sizeof(float);
    j.ranges = ranges_for(ps, j.n);
    if (j.ranges > 1 && dt_pool_run(ps->pool, check_range, &j, j.ranges)) {
        size_t bad = j.n;
        for (int r = 0; r < j.ranges; r++)
            if (j.first_bad[r] < bad) bad = j.first_bad[r];
        return bad;
    }
    return dt_span_first_nonfinite(&j.grad);
}

/* Checks every gradient of a push against the variables held; index[i]
 * gets gradient i's variable. A NaN or Inf is DT_EINVAL with *nonfinite
 * set, so the caller can skip it instead when configured to. The values
 * are read where they are in the message, as the update reads them next:
 * this pass comes first so that a bad push changes nothing. With scan 0
 * the values are left to check_values_locked, which tries the update
 * itself (async and bounded: one pass finds both a NaN or Inf in the
 * gradient and an update that would overflow). */
static int check_push(dt_ps *ps, const dt_tensor_views *grads, int scan, int *index, int *nonfinite,
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
        if (!scan) continue;
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

/* ---- a gradient applied ------------------------------------------------- */

/* How many steps behind `applied_at` a gradient computed at step `from`
 * is. `from` is the caller's word: one from before step 0 or from the
 * future counts as 0, computed without overflow for any int64. */
static int64_t staleness_of(int64_t applied_at, int64_t from) {
    return from < 0 || from > applied_at ? 0 : applied_at - from;
}

void ps_record_staleness(dt_ps *ps, int64_t staleness) {
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
static void apply_span(const range_job *j, const dt_span *s, size_t from) {
    ps_var *pv = &j->ps->pv[j->k];
    int nslots = dt_optim_num_slots(&j->ps->optim);
    dt_span_reader r;
    dt_span_reader_init(&r, s, sizeof(float));
    size_t at = from, n;
    const uint8_t *run;
    while ((run = dt_span_reader_next(&r, &n)) != NULL) {
        float *slots[DT_OPTIM_MAX_SLOTS];
        for (int i = 0; i < nslots; i++)
            slots[i] = pv->slots[i] + at;
        dt_optim_apply_to(&j->ps->optim, j->lr, j->t, j->w + at, j->out + at, slots, run,
                          (int64_t)n);
        at += n;
    }
}

/* The first element of j's variable, from `from` on, whose update from
 * span s (elements [from, from + s's count)) would not be finite (a new
 * weight or slot value NaN or Inf, dt_optim_first_nonfinite), or j->n.
 * Reads the variable, its slots and the message; writes nothing. */
static size_t first_bad_span(const range_job *j, const dt_span *s, size_t from) {
    ps_var *pv = &j->ps->pv[j->k];
    int nslots = dt_optim_num_slots(&j->ps->optim);
    dt_span_reader r;
    dt_span_reader_init(&r, s, sizeof(float));
    size_t at = from, n;
    const uint8_t *run;
    while ((run = dt_span_reader_next(&r, &n)) != NULL) {
        float *slots[DT_OPTIM_MAX_SLOTS];
        for (int i = 0; i < nslots; i++)
            slots[i] = pv->slots[i] + at;
        int64_t bad =
            dt_optim_first_nonfinite(&j->ps->optim, j->lr, j->t, j->w + at, slots, run, (int64_t)n);
        if (bad < (int64_t)n) return at + (size_t)bad;
        at += n;
    }
    return j->n;
}

static void check_update_range(void *ctx, int range) {
    range_job *j = ctx;
    size_t from, count;
    range_bounds(j, range, &from, &count);
    dt_span part = dt_span_sub(&j->grad, from * sizeof(float), count * sizeof(float));
    j->first_bad[range] = first_bad_span(j, &part, from);
}

/* The first element of variable k (its lock held) whose next update from
 * grad at lr would not be finite, or its count: by ranges when it is large
 * and the pool is free, as ps_apply_one, else in one pass; the lowest index
 * either way. This is the push's one pass before the update: a NaN or Inf
 * in the gradient makes a non-finite value too, so it is found here. */
size_t ps_first_bad_update(dt_ps *ps, int k, double lr, const dt_span *grad) {
    ps_var *pv = &ps->pv[k];
    range_job j = {
        .ps = ps, .grad = *grad, .k = k, .lr = lr, .t = pv->updates + 1, .w = pv->cur->data};
    j.n = j.grad.len / sizeof(float);
    j.ranges = ranges_for(ps, j.n);
    if (j.ranges > 1 && dt_pool_run(ps->pool, check_update_range, &j, j.ranges)) {
        size_t bad = j.n;
        for (int r = 0; r < j.ranges; r++)
            if (j.first_bad[r] < bad) bad = j.first_bad[r];
        return bad;
    }
    return first_bad_span(&j, &j.grad, 0);
}

/* The refusal of an update of variable `name` whose element `bad` would
 * not be finite: the gradient's own NaN or Inf (*nonfinite set, as
 * check_push's) or an overflow of finite values (*overflow set). Both
 * DT_EINVAL, naming the variable and the index. */
int ps_refuse_update(dt_ps *ps, const char *what, const char *name, const dt_span *grad, size_t bad,
                     double lr, int *nonfinite, int *overflow, dt_err *err) {
    float g = 0;
    dt_span one = dt_span_sub(grad, bad * sizeof g, sizeof g);
    dt_span_copy(&one, &g);
    if (!isfinite(g)) {
        *nonfinite = 1;
        return dt_err_set(err, DT_EINVAL, "%s: %s: gradient %s[%zu] is not finite", ps->name, what,
                          name, bad);
    }
    *overflow = 1;
    return dt_err_set(err, DT_EINVAL,
                      "%s: %s: update of %s[%zu] would not be finite (gradient %g, %s at "
                      "learning rate %g); nothing applied",
                      ps->name, what, name, bad, (double)g, dt_optim_name(ps->optim.kind), lr);
}

static void apply_range(void *ctx, int range) {
    range_job *j = ctx;
    size_t from, count;
    range_bounds(j, range, &from, &count);
    dt_span part = dt_span_sub(&j->grad, from * sizeof(float), count * sizeof(float));
    apply_span(j, &part, from);
}

/* One update of variable k (its lock held) from gradient grad (where it
 * lies in the message, or in memory): by ranges when it is large and the
 * pool is free, else in one pass. The rules are element-wise, so the bits
 * are those of one call. */
void ps_apply_one(dt_ps *ps, int k, double lr, const dt_span *grad) {
    ps_var *pv = &ps->pv[k];
    ps_slots_writable(ps, k);
    var_buf *to = ps_writable(ps, k);
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
    ps_make_current(ps, k, to);
}

/* Counts an update refused (or skipped) because a value would not be
 * finite, and logs it: the first one, then one in a thousand (a diverging
 * job would otherwise log every push). */
void ps_count_not_finite(dt_ps *ps, const dt_err *why) {
    int64_t n = atomic_fetch_add(&ps->updates_nonfinite, 1);
    if (n % 1000 == 0)
        dt_log(DT_LOG_WARN, "%s: %s (%lld such so far%s)", ps->name, why->msg, (long long)n + 1,
               ps->skip_nonfinite ? ", skipped: skip_nonfinite" : "");
}

/* Every variable's lock, in index order (the one order every holder of
 * more than one takes them in), or released. */
void ps_lock_all_vars(dt_ps *ps) {
    for (int k = 0; k < ps->vars.count; k++)
        pthread_mutex_lock(&ps->pv[k].mu);
}

void ps_unlock_all_vars(dt_ps *ps) {
    for (int k = ps->vars.count - 1; k >= 0; k--)
        pthread_mutex_unlock(&ps->pv[k].mu);
}

/* async and bounded, every variable's lock held: the update each gradient
 * would make at lr, tried; 0 when every new value would be finite, else
 * ps_refuse_update's refusal for the first variable (in the push's order) and
 * element that would not be. */
static int check_values_locked(dt_ps *ps, const dt_tensor_views *grads, const int *index, double lr,
                               int *nonfinite, int *overflow, dt_err *err) {
    for (int i = 0; i < grads->count; i++) {
        dt_piece one;
        dt_span grad = dt_codec_view_span(grads, i, &one);
        size_t bad = ps_first_bad_update(ps, index[i], lr, &grad);
        if (bad < grad.len / sizeof(float))
            return ps_refuse_update(ps, "push", grads->items[i].name, &grad, bad, lr, nonfinite,
                                    overflow, err);
    }
    return 0;
}

/* async and bounded: apply each gradient at lr, every variable's lock
 * held (the check just above saw the values this writes). Cannot fail. */
static void apply_now_locked(dt_ps *ps, const dt_tensor_views *grads, const int *index, double lr) {
    for (int i = 0; i < grads->count; i++) {
        dt_piece one;
        dt_span grad = dt_codec_view_span(grads, i, &one);
        ps_apply_one(ps, index[i], lr, &grad);
    }
}

/* ---- the bounded mode's clocks ------------------------------------------ */

/* bounded: advance the worker's clock; remember how far ahead it ran. */
static void tick_clock(dt_ps *ps, int32_t worker) {
    if (worker < 0 || worker >= ps->params.cluster->num_workers) return;
    pthread_mutex_lock(&ps->stats_mu);
    /* A worker joining late (or back after a silence) starts level with the
     * slowest live one, not at 0: else the others would be held back until
     * it redid every step they took without it. */
    int live =
        ps->seen[worker] && dt_ms_since(&ps->last_push[worker]) <= ps->consistency.timeout_ms;
    if (!live) {
        int64_t floor = ps_min_live_clock_locked(ps, ps->clock[worker]);
        if (floor > ps->clock[worker]) ps->clock[worker] = floor;
    }
    int64_t lead = ps->clock[worker] - ps_min_live_clock_locked(ps, ps->clock[worker]);
    if (lead > ps->max_lead) ps->max_lead = (int32_t)lead;
    ps->clock[worker]++;
    ps->seen[worker] = 1;
    dt_clock_now(&ps->last_push[worker]);
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
    if (ps->sync_role != SYNC_ALONE || ps_must_wait(ps, req->worker, req->min_global_step, 0)) {
        resp->wait = true;
        return;
    }
    resp->out.items = ps->vars.items;
    resp->out.count = ps->vars.count;
    resp->out.lock = ps_lock_var;
    resp->out.lock_ctx = ps;
    resp->out.ref = ps_ref_var;
    resp->out.ref_ctx = ps;
}

/* A push whose values would not be finite (nonfinite: its gradient's own;
 * overflow: the update's), checked before anything changed: skipped and
 * counted when the job says skip_nonfinite (the reply says dropped), else
 * refused with why. Either way counted: pushes_nonfinite for a skipped
 * gradient, updates_nonfinite for an update refused or skipped. */
static int skip_or_refuse(dt_ps *ps, const dt_msg_push_req *req, int nonfinite, int overflow,
                          const dt_err *why, dt_msg_push_resp *out, dt_err *err) {
    if (overflow) ps_count_not_finite(ps, why);
    if (!ps->skip_nonfinite) return dt_err_set(err, why->code, "%s", why->msg);
    /* Configured to survive a diverging worker: skip it, count it. */
    if (nonfinite) atomic_fetch_add(&ps->pushes_nonfinite, 1);
    dt_msg_push_resp resp;
    memset(&resp, 0, sizeof resp);
    resp.dropped = true;
    resp.global_step = atomic_load(&ps->global_step);
    resp.done = ps_check_done(ps, req->worker);
    dt_log(DT_LOG_DEBUG, "%s: skipped: %s", ps->name, why->msg);
    *out = resp;
    return 0;
}

/* A decoded push from an allowed caller, with model_lock held for reading
 * and the model ready: checks it and applies, accumulates or drops it; *out
 * gets the reply's step and flags. */
static int push_locked(dt_ps *ps, dt_msg_push_req *req, int *index, sparse_part *parts,
                       dt_msg_push_resp *out, dt_err *err) {
    ps_raise_step(ps, req->seen_step);
    dt_msg_push_resp resp;
    memset(&resp, 0, sizeof resp);
    dt_err why;
    dt_err_clear(&why);
    int nonfinite = 0, overflow = 0, nparts = 0;
    const int sync = ps->consistency.mode == DT_MODE_SYNC;
    int rc = check_push(ps, &req->in, sync, index, &nonfinite, &why);
    if (rc == 0) rc = ps_check_sparse(ps, req, parts, &nparts, &nonfinite, &why);
    if (rc < 0 && nonfinite) return skip_or_refuse(ps, req, nonfinite, 0, &why, out, err);
    if (rc < 0) return dt_err_set(err, rc, "%s", why.msg);
    int reserved = 0;
    if (ps_check_done(ps, req->worker)) {
        resp.done = true;
    } else if (!sync) {
        /* Every variable's lock, so the values tried are those updated: no
         * other push of this ps changes one in between (each takes them
         * all), and the step this one takes is the one read here. */
        ps_lock_all_vars(ps);
        double lr = dt_lr_at(&ps->schedule, ps->optim.learning_rate, atomic_load(&ps->global_step));
        rc = check_values_locked(ps, &req->in, index, lr, &nonfinite, &overflow, &why);
        if (rc == 0) rc = ps_check_rows(ps, parts, nparts, lr, &overflow, &why);
        if (rc == 0 && (reserved = reserve_step(ps, &resp.global_step))) {
            apply_now_locked(ps, &req->in, index, lr);
            /* Under the same locks, so the rows tried are the rows updated. */
            ps_apply_sparse(ps, parts, nparts, resp.global_step - 1);
        }
        ps_unlock_all_vars(ps);
        if (rc < 0) return skip_or_refuse(ps, req, nonfinite, overflow, &why, out, err);
        if (reserved) {
            /* The step is ours: concurrent pushes cannot carry the global
             * step past max_steps, and each applied push counts once. */
            ps_record_staleness(ps, staleness_of(resp.global_step - 1, req->step));
            ps_maybe_evict(ps, resp.global_step);
            if (ps->consistency.mode == DT_MODE_BOUNDED) tick_clock(ps, req->worker);
            atomic_fetch_add(&ps->pushes_applied, 1);
        } else {
            resp.done = true;
        }
    } else {
        int used = 0;
        if (ps->sync_role != SYNC_ALONE &&
            (req->worker < 0 || req->worker >= ps->params.cluster->num_workers))
            /* A decision names workers: a gradient from no worker has no place in one. */
            used = dt_err_set(err, DT_EINVAL,
                              "%s: push: worker %d is not in the cluster (%d "
                              "workers)",
                              ps->name, (int)req->worker, ps->params.cluster->num_workers);
        else
            used = ps_accumulate(ps, req, index, parts, nparts, &why);
        /* The step this push completed would have made a value non-finite:
         * it passed with nothing applied (apply_accumulated). */
        if (used == USED_NOT_FINITE) return skip_or_refuse(ps, req, 0, 1, &why, out, err);
        if (used < 0) return dt_err_set(err, used, "%s", why.msg);
        if (used == 0) {
            atomic_fetch_add(&ps->pushes_dropped, 1);
            resp.dropped = true;
        }
    }
    if (!reserved) resp.global_step = atomic_load(&ps->global_step);
    resp.done = ps_check_done(ps, req->worker) || resp.done;
    *out = resp;
    return 0;
}

/* Views (gradients, then a table's ids and rows each) and tables a push of
 * a small model finds room for on the handler's stack (about 2 kB). */
#define PUSH_SMALL_VIEWS 8
#define PUSH_SMALL_TABLES 2

int ps_handle_push(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request, dt_rpc_buf *reply,
                   dt_err *err) {
    dt_ps *ps = ctx;
    dt_msg_push_req req;
    memset(&req, 0, sizeof req);
    dt_tensor *views = NULL;
    dt_span *spans = NULL;
    sparse_part *parts = NULL;
    int *index = NULL, rc = 0, tcap = 0, heap = 0;
    /* A small model's push takes its storage from here: four callocs and
     * frees per push were a tenth of a tiny push's instructions on the ps. */
    dt_tensor small_views[PUSH_SMALL_VIEWS];
    dt_span small_spans[PUSH_SMALL_VIEWS];
    int small_index[PUSH_SMALL_VIEWS];
    sparse_part small_parts[PUSH_SMALL_TABLES];
    pthread_rwlock_rdlock(&ps->model_lock);
    if (!ps->ready) {
        /* A failed job's answer wins over "not ready", which is retried. */
        if ((rc = ps_check_failed(ps, -1, "push", err)) == 0)
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
    /* Tables: one pair each, and one more so ps_check_sparse names an extra. */
    req.sparse_ids_in = (dt_tensor_views){views + cap, 0, tcap, spans + cap};
    req.sparse_grads_in = (dt_tensor_views){views + cap + tcap, 0, tcap, spans + cap + tcap};
    if ((rc = dt_codec_decode_buf(DT_MSG_PUSH_REQ, request, &req, err)) < 0) goto done;
    if ((rc = ps_check_caller(ps, peer, req.worker, "push", err)) < 0) goto done;
    if ((rc = ps_check_failed(ps, req.worker, "push", err)) < 0) goto done;
    ps_note_push(ps, req.worker);
    dt_msg_push_resp resp;
    memset(&resp, 0, sizeof resp);
    if (retried_push(ps, &req, &resp)) {
        atomic_fetch_add(&ps->pushes_retried, 1);
        resp.done = ps_check_done(ps, req.worker);
    } else {
        atomic_fetch_add(&ps->pushes_active, 1);
        rc = push_locked(ps, &req, index, parts, &resp, err);
        atomic_fetch_sub(&ps->pushes_active, 1);
        remember_push(ps, &req, &resp, rc);
        if (rc == 0) ps_count_taken(ps, req.worker);
    }
    if (rc == 0) {
        resp.incarnation = ps->incarnation;
        attach_variables(ps, &req, &resp);
        rc = ps_encode_reply(DT_MSG_PUSH_RESP, &resp, reply, err);
    }
done:
    pthread_rwlock_unlock(&ps->model_lock);
    ps_sparse_parts_deinit(parts, tcap);
    if (heap) {
        free(views);
        free(spans);
        free(index);
        free(parts);
    }
    if (rc < 0) atomic_fetch_add(&ps->pushes_rejected, 1);
    return rc;
}
