/*
 * ps_store: the variables' buffers, and Create, which builds them.
 *
 * A buffer a message reads never changes (see var_buf); an update writes a
 * spare one and makes it current. Create checks the whole request (the
 * consistency, the tables, finite values) before anything is built, and
 * learns the job id from the chief. Threading: Create holds model_lock
 * for writing; the buffers are touched under their variable's mutex.
 */

#include "ps_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "log.h"
#include "safetensors.h"
#include "text.h"

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
void ps_var_buf_unref(void *arg) {
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
var_buf *ps_writable(dt_ps *ps, int k) {
    ps_var *pv = &ps->pv[k];
    if (!var_buf_read(pv->cur)) return pv->cur;
    if (pv->spare && !var_buf_read(pv->spare)) {
        var_buf *to = pv->spare;
        pv->spare = NULL;
        return to;
    }
    var_buf *to = var_buf_new(pv->cur->nbytes);
    if (to) {
        ps_var_buf_unref(pv->spare); /* freed once its messages are sent */
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
void ps_slots_writable(dt_ps *ps, int k) {
    ps_var *pv = &ps->pv[k];
    int nslots = dt_optim_num_slots(&ps->optim);
    struct timespec t0;
    dt_clock_now(&t0);
    while (slots_read(pv, nslots) && dt_ms_since(&t0) < SLOT_WAIT_MS) {
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
        ps_var_buf_unref(old); /* freed once sent */
    }
}

/* Makes `to` variable k's current buffer after an update wrote it (its
 * lock held); the old one becomes the spare. */
void ps_make_current(dt_ps *ps, int k, var_buf *to) {
    ps_var *pv = &ps->pv[k];
    if (to == pv->cur) return;
    DT_ASSERT(!pv->spare);
    pv->spare = pv->cur;
    pv->cur = to;
    ps->vars.items[k].data = to->data;
}

void ps_lock_var(void *ctx, int index, int acquire) {
    dt_ps *ps = ctx;
    if (acquire)
        pthread_mutex_lock(&ps->pv[index].mu);
    else
        pthread_mutex_unlock(&ps->pv[index].mu);
}

/* The dt_tensor_list ref hook of variables: the current buffer, sent in
 * place; an update meanwhile writes elsewhere. */
int ps_ref_var(void *ctx, int index, dt_rpc_ref *out, dt_err *err) {
    (void)err;
    dt_ps *ps = ctx;
    ps_var *pv = &ps->pv[index];
    pthread_mutex_lock(&pv->mu);
    var_buf *b = pv->cur;
    atomic_fetch_add(&b->refs, 1);
    pthread_mutex_unlock(&pv->mu);
    *out = (dt_rpc_ref){b->data, b->nbytes, ps_var_buf_unref, b};
    return 0;
}

void ps_free_model(dt_ps *ps) {
    if (ps->pv) {
        for (int i = 0; i < ps->vars.count; i++) {
            pthread_mutex_destroy(&ps->pv[i].mu);
            ps_var_buf_unref(ps->pv[i].cur); /* a buffer a message reads lives on */
            ps_var_buf_unref(ps->pv[i].spare);
            for (int s = 0; s < DT_OPTIM_MAX_SLOTS; s++)
                ps_var_buf_unref(ps->pv[i].slot_buf[s]);
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
    ps_drop_rows_locked(ps);
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
int64_t ps_evict_interval(const dt_table_evict_policy *e) {
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

/* Every F32 tensor of v finite (a Create's variables or slots): else DT_EINVAL naming `what`, the
 * tensor and the first index that is NaN or Inf. A model that starts non-finite stays so: every
 * pull would return it, every update keep it. (A sparse import's rows are
 * checked so by dt_table_import.) */
static int check_finite_views(dt_ps *ps, const char *what, const dt_tensor_views *v, dt_err *err) {
    for (int i = 0; i < v->count; i++) {
        if (v->items[i].dtype != DT_DTYPE_F32) continue; /* refused elsewhere, by name */
        dt_piece one;
        dt_span span = dt_codec_view_span(v, i, &one);
        size_t bad = dt_span_first_nonfinite(&span);
        if (bad < span.len / sizeof(float)) {
            float x = 0;
            dt_span at = dt_span_sub(&span, bad * sizeof x, sizeof x);
            dt_span_copy(&at, &x);
            return dt_err_set(err, DT_EINVAL,
                              "%s: %s: %s[%zu] is %g: initial values must be finite", ps->name,
                              what, v->items[i].name, bad, (double)x);
        }
    }
    return 0;
}

/* Takes id (may be empty: a chief of an older build) as the job this ps
 * knows, logging it when it changes; from says where it came from. */
void ps_learn_job_id(dt_ps *ps, const char *id, const char *from) {
    pthread_mutex_lock(&ps->life_mu);
    int changed = strcmp(ps->job_id, id) != 0;
    char was[DT_JOB_ID_MAX];
    snprintf(was, sizeof was, "%s", ps->job_id);
    snprintf(ps->job_id, sizeof ps->job_id, "%s", id);
    pthread_mutex_unlock(&ps->life_mu);
    if (!changed) return;
    dt_log_set_job_id(id);
    if (was[0])
        dt_log(DT_LOG_WARN, "%s: job id %s (from %s), no longer %s", ps->name,
               id[0] ? id : "(none)", from, was);
    else
        dt_log(DT_LOG_INFO, "%s: job id %s (from %s)", ps->name, id, from);
}

static int check_create(dt_ps *ps, const dt_msg_create_req *req, dt_err *err) {
    /* No variables is fine: with more ps tasks than units of the model, a
     * task holds none and just keeps the step. */
    if (req->global_step < 0 || req->max_steps < 0)
        return dt_err_set(err, DT_EINVAL, "%s: create: negative global_step or max_steps",
                          ps->name);
    if (req->job_id[0] && !dt_safetensors_job_id_ok(req->job_id))
        return dt_err_set(err, DT_EINVAL,
                          "%s: create: job_id \"%.40s\" is not 32 lowercase hex digits", ps->name,
                          req->job_id);
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
    if ((rc = check_finite_views(ps, "create: variable", &req->in, err)) < 0) return rc;
    return check_finite_views(ps, "create: slot", &req->slots_in, err);
}

int ps_handle_create(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                     const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    dt_ps *ps = ctx;
    enum { MAX_CREATE = 4096 };
    dt_msg_create_req *req = dt_calloc(1, sizeof *req);
    dt_tensor *views = dt_calloc(MAX_CREATE, sizeof *views);
    dt_span *spans = dt_calloc(MAX_CREATE, sizeof *spans);
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
    if ((rc = ps_check_failed(ps, 0, "create", err)) < 0) goto fail;
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
    if (ps->built) ps_free_model(ps);
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
        ps_free_model(ps);
        pthread_rwlock_unlock(&ps->model_lock);
        goto fail;
    }
    ps->max_steps = req->max_steps;
    ps->step_ceiling = req->step_ceiling < req->max_steps ? req->step_ceiling : req->max_steps;
    snprintf(ps->model, sizeof ps->model, "%s", req->model);
    ps_learn_job_id(ps, req->job_id, "the chief's Create");
    atomic_store(&ps->global_step, req->global_step);
    ps_reset_step_locked(ps, req->global_step);
    /* A ps 0 created (or restored) at step S cannot say who made step S-1:
     * a task still at S-1 applies what it holds. */
    memset(&ps->decided, 0, sizeof ps->decided);
    ps->decided.has = ps->sync_role == SYNC_DECIDER;
    ps->decided.step = req->global_step - 1;
    ps->decided.all_held = true;
    ps->built = 1;
    ps->ready = !(req->tables_pending && ps->num_tables > 0);
    ps->eviction = req->eviction;
    atomic_store(&ps->next_evict_step, req->global_step + ps_evict_interval(&ps->eviction));
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
    rc = ps_encode_reply(DT_MSG_CREATE_RESP, &resp, reply, err);
fail:
    free(spans);
    free(views);
    free(req);
    return rc;
}
