/*
 * ps_pull: Pull, the variables (and slots) sent back by reference.
 *
 * A pull of the bounded mode may wait for the slowest worker; a sync
 * follower's pull applies ps 0's decision first. Threading: model_lock for
 * reading; each variable locked only while its buffer is referenced.
 */

#include "ps_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "log.h"

/* ---- Pull -------------------------------------------------------------- */

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
    ps_lock_var(sl->ps, sl->index[index], acquire);
    if (acquire) sl->items[index].data = sl->ps->vars.items[sl->index[index]].data;
}

static int ref_subset_var(void *ctx, int index, dt_rpc_ref *out, dt_err *err) {
    subset_lock *sl = ctx;
    return ps_ref_var(sl->ps, sl->index[index], out, err);
}

/* Slot k belongs to variable k / num_slots: read it under that lock. */
static void lock_slot(void *ctx, int index, int acquire) {
    dt_ps *ps = ctx;
    ps_lock_var(ps, index / dt_optim_num_slots(&ps->optim), acquire);
}

/* The ref hook of slots (only the chief's checkpoint pull asks for them):
 * the slot's own buffer, sent in place, no copy. Slots are updated in
 * place, so an update of the variable waits until the message is sent
 * (ps_slots_writable). */
static int ref_slot(void *ctx, int index, dt_rpc_ref *out, dt_err *err) {
    (void)err;
    dt_ps *ps = ctx;
    int nslots = dt_optim_num_slots(&ps->optim);
    ps_var *pv = &ps->pv[index / nslots];
    pthread_mutex_lock(&pv->mu);
    var_buf *b = pv->slot_buf[index % nslots];
    atomic_fetch_add(&b->refs, 1);
    pthread_mutex_unlock(&pv->mu);
    *out = (dt_rpc_ref){b->data, b->nbytes, ps_var_buf_unref, b};
    return 0;
}

/* Smallest clock among the workers that pushed within the timeout: the
 * bounded mode does not wait for a worker that died or has not started. */
int64_t ps_min_live_clock_locked(dt_ps *ps, int64_t fallback) {
    int64_t min = INT64_MAX;
    for (int w = 0; w < ps->params.cluster->num_workers; w++)
        if (ps->seen[w] && dt_ms_since(&ps->last_push[w]) <= ps->consistency.timeout_ms &&
            ps->clock[w] < min)
            min = ps->clock[w];
    return min == INT64_MAX ? fallback : min;
}

/* sync: wait for the step the worker asks for; bounded: wait while the
 * worker is more than `staleness` steps ahead of the slowest live one. */
int ps_must_wait(dt_ps *ps, int32_t worker, int64_t min_global_step, int include_slots) {
    if (ps->consistency.mode == DT_MODE_SYNC)
        return atomic_load(&ps->global_step) < min_global_step;
    /* A pull with slots is the chief's snapshot, not a training step. */
    if (ps->consistency.mode != DT_MODE_BOUNDED || include_slots || worker < 0 ||
        worker >= ps->params.cluster->num_workers)
        return 0;
    pthread_mutex_lock(&ps->stats_mu);
    int64_t mine = ps->clock[worker];
    int wait = mine - ps_min_live_clock_locked(ps, mine) > ps->consistency.staleness;
    pthread_mutex_unlock(&ps->stats_mu);
    return wait;
}

int ps_handle_pull(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request, dt_rpc_buf *reply,
                   dt_err *err) {
    dt_ps *ps = ctx;
    dt_msg_pull_req req;
    memset(&req, 0, sizeof req);
    char names[DT_MODEL_PULL_NAMES_MAX][DT_TENSOR_NAME_MAX];
    req.names.items = names;
    req.names.cap = DT_MODEL_PULL_NAMES_MAX;
    int rc = dt_codec_decode_buf(DT_MSG_PULL_REQ, request, &req, err);
    if (rc < 0) return rc;
    if ((rc = ps_check_caller(ps, peer, req.worker, "pull", err)) < 0) return rc;
    if ((rc = ps_check_failed(ps, req.worker, "pull", err)) < 0) return rc;
    ps_note_call(ps, req.worker);

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
    resp.out.lock = ps_lock_var;
    resp.out.lock_ctx = ps;
    resp.out.ref = ps_ref_var;
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
        (rc = ps_follow_decision(ps, &req.decision, err)) < 0)
        goto out;
    ps_raise_step(ps, req.seen_step);
    if (ps->sync_role == SYNC_DECIDER) {
        pthread_mutex_lock(&ps->sync_mu);
        resp.decided = ps->decided;
        pthread_mutex_unlock(&ps->sync_mu);
    }
    if (req.include_slots) {
        atomic_fetch_add(&ps->ckpt_pulls, 1);
        resp.slots_out.items = ps->slots.items;
        resp.slots_out.count = ps->slots.count;
        resp.slots_out.lock = lock_slot;
        resp.slots_out.lock_ctx = ps;
        resp.slots_out.ref = ref_slot;
        resp.slots_out.ref_ctx = ps;
    }
    resp.incarnation = ps->incarnation;
    resp.global_step = atomic_load(&ps->global_step);
    resp.done = ps_check_done(ps, req.worker);
    if (!resp.done && ps_must_wait(ps, req.worker, req.min_global_step, req.include_slots)) {
        /* Not yet: answer at once without variables; the worker asks again. */
        resp.wait = true;
        resp.out.count = 0;
        resp.slots_out.count = 0;
    }
    rc = ps_encode_reply(DT_MSG_PULL_RESP, &resp, reply, err);
    atomic_fetch_add(&ps->pulls_served, 1);
out:
    pthread_rwlock_unlock(&ps->model_lock);
    return rc;
}
