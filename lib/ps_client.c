/*
 * ps_client: fan-out and reply checking for calls to ps tasks, over the
 * units placement.c cuts and places.
 *
 * Invariants: the units and their placement never change after _new; a
 * reply's tensors must match the expected units exactly (name, dtype, shape,
 * each once) before any byte is copied into the caller's tensors.
 */
#include "ps_client.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "auth.h"
#include "log.h"
#include "optim.h"
#include "pool.h"
#include "rpc_client.h"
#include "table.h"
#include "text.h"
#include "train_metrics.h"

/* Gradients sent in place (no copy into the request): one count per run
 * gRPC may still read, and one for the client itself. Whoever drops the
 * last frees it: a stuck connection can release a run after the client
 * is gone. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int runs;
    int owned; /* the client still holds it */
} pins;

/* One table's ids of a call split by placement: task p holds ids[start[p]
 * .. start[p + 1]) (still sorted), which are the caller's ids[pos[k]]; a
 * push's rows beside them. Grown to the largest batch and reused. */
typedef struct {
    int64_t cap;
    int64_t *ids, *pos;
    float *rows; /* (cap, dim) */
    int64_t rows_cap;
    int64_t start[DT_MAX_PS + 1];
} sparse_split;

/* A whole variable or a slice of one, on its ps task (placement.h). */
typedef dt_placement_unit unit;

#define MAX_COPY_THREADS 4
#define DEFAULT_COPY_MIN_BYTES ((size_t)1 << 20)
#define COPY_RANGES_PER_THREAD 4 /* a helper that wakes late leaves the caller less to wait for */

struct dt_ps_client {
    dt_ps_client_params params;
    int num_ps;
    dt_rpc_channel **channels; /* (num_ps) */
    char (*names)[80];         /* (num_ps) "ps:i host:port" */
    uint64_t *incarnation;     /* (num_ps) last seen; 0 = none yet */
    int num_vars;
    dt_tensor *layout; /* (num_vars) specs: names, dtypes, shapes */
    int num_units;
    unit *units;              /* (num_units) */
    int *order;               /* (num_units) unit indexes grouped by ps */
    int *first_on, *count_on; /* (num_ps) each ps's group in order */
    int *seen;                /* (num_units) scratch: unit answered */
    /* Decoded replies, views into their responses, each ps in its own part
     * (reply_views): room for its units and one more (which names an extra
     * a reply should not carry), spans beside the views. */
    dt_tensor *views;               /* (num_units + num_ps) */
    dt_span *spans;                 /* (num_units + num_ps) */
    dt_tensor *slot_views;          /* (num_units * DT_OPTIM_MAX_SLOTS + num_ps) */
    dt_span *slot_spans;            /* (num_units * DT_OPTIM_MAX_SLOTS + num_ps) */
    dt_msg_pull_resp *pull_replies; /* (num_ps) decoded once each */
    dt_tensor *out_views;           /* (num_units + 1) scratch: one request's units */
    dt_tensor *out_slot_views;      /* (num_units * DT_OPTIM_MAX_SLOTS + 1) */
    dt_rpc_call *calls;             /* (num_ps) ps p's call; its response, once run */
    dt_rpc_buf *requests;           /* (num_ps) */
    dt_rpc_call *batch;             /* (num_ps) scratch: the calls of one round */
    pins *pins;                     /* the caller's gradients gRPC may still read */
    dt_pool *copy_pool;             /* NULL: pulled tensors copied on the caller alone */
    size_t copy_min_bytes;
    /* A push that failed on some ps tasks: the retry goes only to those that
     * did not apply it, so no task applies one gradient twice. */
    int push_pending;
    uint64_t push_id;               /* the pending push's id: a retry sends the same */
    int passes_done;                /* Status calls say this worker's passes are done */
    int *push_acked;                /* (num_ps) */
    int *push_pulled;               /* (num_ps) push_pull: its variables were taken */
    dt_msg_push_resp *push_replies; /* (num_ps) the acknowledging replies */
    /* (num_ps) the highest global step each ps has replied with, sent back
     * to that ps only: a restored ps never answers below what it said
     * before. Per ps, because tasks count their pushes apart and may differ
     * by the pushes in flight; raising one to another's step would count
     * those pushes twice. */
    int64_t *seen_step;
    /* sync with several ps tasks: ps 0 decides which gradients make each
     * step. Pull asks ps 0 first and passes its decision on to the others;
     * push goes to the others first and to ps 0 (the commit) last, so every
     * gradient ps 0 counts is already held by every task. Set at Create in
     * sync mode, or at the first pull reply carrying a decision. */
    int two_phase;
    dt_sync_decision decision;               /* ps 0's latest */
    sparse_split split[DT_MAX_TABLES];       /* the current call's tables */
    dt_tensor sparse_out[2 * DT_MAX_TABLES]; /* one request's ids, then its rows */
};

/* ---- placement --------------------------------------------------------- */

static int place(dt_ps_client *c, dt_err *err) {
    int rc = dt_placement_units(&c->params.placement, c->num_ps, c->layout, c->num_vars, &c->units,
                                &c->num_units, err);
    if (rc < 0) return rc;
    size_t nu = (size_t)(c->num_units ? c->num_units : 1);
    c->order = dt_calloc(nu, sizeof *c->order);
    c->seen = dt_calloc(nu, sizeof *c->seen);
    size_t np = (size_t)c->num_ps, ns = nu * DT_OPTIM_MAX_SLOTS;
    c->views = dt_calloc(nu + np, sizeof *c->views);
    c->spans = dt_calloc(nu + np, sizeof *c->spans);
    c->slot_views = dt_calloc(ns + np, sizeof *c->slot_views);
    c->slot_spans = dt_calloc(ns + np, sizeof *c->slot_spans);
    c->out_views = dt_calloc(nu + 1, sizeof *c->out_views);
    c->out_slot_views = dt_calloc(ns + 1, sizeof *c->out_slot_views);
    if (!c->order || !c->seen || !c->views || !c->spans || !c->slot_views || !c->slot_spans ||
        !c->out_views || !c->out_slot_views)
        return dt_err_set(err, DT_ENOMEM, "ps client: out of memory");
    dt_placement_place(c->params.placement.kind, c->units, c->num_units, c->num_ps, c->order);
    /* Group by ps, keeping unit order inside a group. */
    int k = 0;
    for (int p = 0; p < c->num_ps; p++) {
        c->first_on[p] = k;
        for (int i = 0; i < c->num_units; i++)
            if (c->units[i].ps == p) c->order[k++] = i;
        c->count_on[p] = k - c->first_on[p];
    }
    return 0;
}

int dt_ps_client_num_ps(const dt_ps_client *c) {
    return c->num_ps;
}
const char *dt_ps_client_name(const dt_ps_client *c, int ps_index) {
    return c->names[ps_index];
}
int dt_ps_client_num_units(const dt_ps_client *c) {
    return c->num_units;
}

void dt_ps_client_unit(const dt_ps_client *c, int i, dt_ps_unit *out) {
    const unit *u = &c->units[i];
    out->name = u->name;
    out->var = u->var;
    out->row_begin = u->row_begin;
    out->rows = u->rows;
    out->ps = u->ps;
    out->nbytes = u->nbytes;
}

void dt_ps_client_log_placement(const dt_ps_client *c) {
    for (int i = 0; i < c->num_units; i++) {
        const unit *u = &c->units[i];
        const dt_tensor *v = &c->layout[u->var];
        dt_log(DT_LOG_INFO, "placement: %s rows %lld..%lld of %lld -> %s (%zu bytes)", u->name,
               (long long)u->row_begin, (long long)(u->row_begin + u->rows - 1),
               (long long)(v->ndim ? v->shape[0] : 1), c->names[u->ps], u->nbytes);
    }
    for (int p = 0; p < c->num_ps; p++) {
        size_t bytes = 0;
        for (int k = c->first_on[p]; k < c->first_on[p] + c->count_on[p]; k++)
            bytes += c->units[c->order[k]].nbytes;
        dt_log(DT_LOG_INFO, "placement: %s holds %d unit%s, %zu bytes", c->names[p], c->count_on[p],
               c->count_on[p] == 1 ? "" : "s", bytes);
    }
}

/* ---- life -------------------------------------------------------------- */

int dt_ps_client_new(const dt_ps_client_params *params, const dt_tensors *layout,
                     dt_ps_client **out, dt_err *err) {
    *out = NULL;
    const dt_cluster *cl = params->cluster;
    if (cl->num_ps < 1 || cl->num_ps > DT_MAX_PS)
        return dt_err_set(err, DT_EINVAL, "ps client: %d ps tasks (1..%d)", cl->num_ps, DT_MAX_PS);
    dt_ps_client *c = dt_calloc(1, sizeof *c);
    if (!c) return dt_err_set(err, DT_ENOMEM, "ps client: out of memory");
    c->params = *params;
    /* A random start: a restarted worker's pushes are not taken for
     * retries of its previous process's last one. */
    c->push_id = dt_rpc_random_id();
    c->num_ps = cl->num_ps;
    c->num_vars = layout->count;
    size_t np = (size_t)c->num_ps, nv = (size_t)(c->num_vars ? c->num_vars : 1);
    c->channels = dt_calloc(np, sizeof *c->channels);
    c->names = dt_calloc(np, sizeof *c->names);
    c->incarnation = dt_calloc(np, sizeof *c->incarnation);
    c->seen_step = dt_calloc(np, sizeof *c->seen_step);
    c->layout = dt_calloc(nv, sizeof *c->layout);
    c->first_on = dt_calloc(np, sizeof *c->first_on);
    c->count_on = dt_calloc(np, sizeof *c->count_on);
    c->calls = dt_calloc(np, sizeof *c->calls);
    c->requests = dt_calloc(np, sizeof *c->requests);
    c->batch = dt_calloc(np, sizeof *c->batch);
    c->push_acked = dt_calloc(np, sizeof *c->push_acked);
    c->push_pulled = dt_calloc(np, sizeof *c->push_pulled);
    c->push_replies = dt_calloc(np, sizeof *c->push_replies);
    c->pull_replies = dt_calloc(np, sizeof *c->pull_replies);
    c->pins = dt_calloc(1, sizeof *c->pins);
    int rc = 0;
    if (!c->channels || !c->names || !c->incarnation || !c->seen_step || !c->layout ||
        !c->first_on || !c->count_on || !c->calls || !c->requests || !c->batch || !c->push_acked ||
        !c->push_pulled || !c->push_replies || !c->pull_replies || !c->pins) {
        rc = dt_err_set(err, DT_ENOMEM, "ps client: out of memory");
        goto fail;
    }
    pthread_mutex_init(&c->pins->mu, NULL);
    pthread_cond_init(&c->pins->cv, NULL);
    c->pins->owned = 1;
    for (int i = 0; i < c->num_vars; i++) {
        c->layout[i] = layout->items[i];
        c->layout[i].data = NULL;
    }
    /* The caller's identity picks its token; the chief is worker 0. */
    char identity[DT_PEER_NAME_MAX];
    dt_auth_identity_of(0, params->worker, identity, sizeof identity);
    dt_rpc_security sec = {0};
    if (params->security) {
        sec = *params->security;
        if (!sec.identity) sec.identity = identity;
    }
    for (int p = 0; p < c->num_ps; p++) {
        snprintf(c->names[p], sizeof c->names[p], "ps:%d %.60s", p, cl->ps[p].addr);
        if ((rc = dt_rpc_channel_new_secure(cl->ps[p].addr, params->security ? &sec : NULL,
                                            &c->channels[p], err)) < 0)
            goto fail;
    }
    if ((rc = place(c, err)) < 0) goto fail;
    c->copy_min_bytes = params->copy_min_bytes ? params->copy_min_bytes : DEFAULT_COPY_MIN_BYTES;
    int copy_threads =
        params->copy_threads < MAX_COPY_THREADS ? params->copy_threads : MAX_COPY_THREADS;
    if (copy_threads > 1 && (rc = dt_pool_new(copy_threads - 1, &c->copy_pool, err)) < 0) goto fail;
    *out = c;
    return 0;
fail:
    dt_ps_client_free(c);
    return rc;
}

static void pins_drop(pins *pn, int run);

void dt_ps_client_free(dt_ps_client *c) {
    if (!c) return;
    dt_pool_free(c->copy_pool);
    if (c->pins && c->pins->owned) pins_drop(c->pins, 0);
    for (int p = 0; p < c->num_ps; p++) {
        if (c->channels) dt_rpc_channel_free(c->channels[p]);
        if (c->requests) dt_rpc_buf_release(&c->requests[p]);
    }
    free(c->channels);
    free(c->names);
    free(c->incarnation);
    free(c->seen_step);
    free(c->layout);
    free(c->units);
    free(c->order);
    free(c->first_on);
    free(c->count_on);
    free(c->seen);
    free(c->views);
    free(c->spans);
    free(c->slot_views);
    free(c->slot_spans);
    free(c->out_views);
    free(c->out_slot_views);
    free(c->pull_replies);
    free(c->calls);
    free(c->requests);
    free(c->batch);
    free(c->push_acked);
    free(c->push_pulled);
    free(c->push_replies);
    for (int t = 0; t < DT_MAX_TABLES; t++) {
        free(c->split[t].ids);
        free(c->split[t].pos);
        free(c->split[t].rows);
    }
    free(c);
}

/* ---- calls ------------------------------------------------------------- */

/* Encodes msg for ps p into c->requests[p] and prepares c->calls[p]. */
static int prepare(dt_ps_client *c, int p, dt_msg_type type, const void *msg, int wait_for_ready,
                   dt_err *err) {
    dt_rpc_buf_release(&c->requests[p]);
    int rc = dt_codec_encode_buf(type, msg, &c->requests[p], err);
    if (rc < 0) return rc;
    dt_rpc_call *call = &c->calls[p];
    memset(call, 0, sizeof *call);
    call->channel = c->channels[p];
    call->method = dt_codec_method(type);
    call->request = &c->requests[p];
    call->wait_for_ready = wait_for_ready;
    call->in_pieces = 1; /* every reply is read with dt_codec_decode_buf */
    return 0;
}

/* The one way calls run: the prepared calls of the ps tasks in
 * tasks[0..n), all at once with the client's deadline. Each task's outcome
 * and response land in c->calls[p]; the requests are released. Returns 0,
 * or the first failure's code with err prefixed by its task ("ps:1"), so a
 * wait names whom it waits for. */
static int run_on(dt_ps_client *c, const int *tasks, int n, dt_err *err) {
    if (n <= 0) return 0;
    for (int k = 0; k < n; k++)
        c->batch[k] = c->calls[tasks[k]];
    double t0 = dt_now_secs();
    int rc = dt_rpc_call_all(c->batch, n, c->params.timeout_ms, err);
    dt_train_metrics_call(c->batch[0].method, dt_now_secs() - t0);
    int named = 0;
    for (int k = 0; k < n; k++) {
        int p = tasks[k];
        c->calls[p] = c->batch[k];
        dt_rpc_buf_release(&c->requests[p]);
        if (rc < 0 && !named && c->calls[p].err.code != DT_OK) {
            rc = dt_err_wrap(err, rc, "ps:%d", p);
            named = 1;
        }
    }
    return rc;
}

/* Runs the calls of ps tasks [first, last). */
static int run(dt_ps_client *c, int first, int last, dt_err *err) {
    int tasks[DT_MAX_PS] = {0}, n = 0;
    for (int p = first; p < last; p++)
        tasks[n++] = p;
    return run_on(c, tasks, n, err);
}

static void release_responses(dt_ps_client *c) {
    for (int p = 0; p < c->num_ps; p++)
        dt_rpc_buf_release(&c->calls[p].response);
}

/* Records ps p's incarnation; a change means it restarted since last seen. */
static int note_incarnation(dt_ps_client *c, int p, uint64_t incarnation, dt_err *err) {
    uint64_t before = c->incarnation[p];
    c->incarnation[p] = incarnation;
    if (before != 0 && before != incarnation)
        return dt_err_set(err, DT_EUNAVAILABLE, "%s: restarted (incarnation %016llx, was %016llx)",
                          c->names[p], (unsigned long long)incarnation, (unsigned long long)before);
    return 0;
}

/* A view of unit u's rows of tensor t (t shaped like u's variable). */
static void unit_view(const unit *u, const dt_tensor *t, const char *name, dt_tensor *out) {
    *out = *t;
    size_t n = strnlen(name, sizeof out->name - 1); /* callers checked it fits */
    memcpy(out->name, name, n);
    out->name[n] = '\0';
    if (out->ndim > 0) out->shape[0] = u->rows;
    out->data = (char *)t->data + u->offset;
    out->nbytes = u->nbytes;
}

/* Views of every unit on ps p, over the whole tensors in `full`. */
static int unit_views(const dt_ps_client *c, int p, const dt_tensors *full, dt_tensor *out) {
    int n = 0;
    for (int k = c->first_on[p]; k < c->first_on[p] + c->count_on[p]; k++) {
        const unit *u = &c->units[c->order[k]];
        unit_view(u, &full->items[u->var], u->name, &out[n++]);
    }
    return n;
}

/* Views of every slot of every unit on ps p ("<unit>/<slot>"), over whole
 * slot tensors "<variable>/<slot>" in `slots`. */
static int slot_views(const dt_ps_client *c, int p, const dt_optim_config *optim,
                      const dt_tensors *slots, dt_tensor *out, dt_err *err) {
    int n = 0, nslots = dt_optim_num_slots(optim);
    for (int k = c->first_on[p]; k < c->first_on[p] + c->count_on[p]; k++) {
        const unit *u = &c->units[c->order[k]];
        for (int s = 0; s < nslots; s++) {
            char full_name[DT_TENSOR_NAME_MAX + 32], name[DT_TENSOR_NAME_MAX + 32];
            const char *slot = dt_optim_slot_name(optim, s);
            snprintf(full_name, sizeof full_name, "%s/%s", c->layout[u->var].name, slot);
            snprintf(name, sizeof name, "%s/%s", u->name, slot);
            const dt_tensor *t = dt_tensors_find(slots, full_name);
            if (!t || t->nbytes != c->layout[u->var].nbytes)
                return dt_err_set(err, DT_EINVAL, "ps client: no slot %s shaped like its variable",
                                  full_name);
            if (strlen(name) >= DT_TENSOR_NAME_MAX)
                return dt_err_set(err, DT_EINVAL, "ps client: slot name %s too long", name);
            unit_view(u, t, name, &out[n++]);
        }
    }
    return n;
}

void dt_ps_client_set_passes_done(dt_ps_client *c, int passes_done) {
    c->passes_done = passes_done != 0;
}

int dt_ps_client_status(dt_ps_client *c, int p, dt_msg_status_resp *out, dt_err *err) {
    dt_msg_status_req req = {.worker = c->params.worker, .passes_done = c->passes_done != 0};
    int rc = prepare(c, p, DT_MSG_STATUS_REQ, &req, 0, err);
    if (rc < 0) return rc;
    if ((rc = run(c, p, p + 1, err)) == 0) {
        memset(out, 0, sizeof *out);
        rc = dt_codec_decode_buf(DT_MSG_STATUS_RESP, &c->calls[p].response, out, err);
        if (rc < 0) dt_err_wrap(err, rc, "%s: status", c->names[p]);
    }
    dt_rpc_buf_release(&c->calls[p].response);
    return rc;
}

int dt_ps_client_create(dt_ps_client *c, const dt_ps_model *m, const int *only, dt_err *err) {
    if (m->vars->count != c->num_vars)
        return dt_err_set(err, DT_EINVAL, "ps client: create: %d variables, expected %d",
                          m->vars->count, c->num_vars);
    /* Create is rare (start, ps restart): one ps at a time keeps it simple. */
    for (int p = 0; p < c->num_ps; p++) {
        if (only && !only[p]) continue;
        dt_msg_create_req req;
        memset(&req, 0, sizeof req);
        req.out.items = c->out_views;
        req.out.count = unit_views(c, p, m->vars, c->out_views);
        if (m->slots) {
            int n = slot_views(c, p, &m->optim, m->slots, c->out_slot_views, err);
            if (n < 0) return n;
            req.slots_out.items = c->out_slot_views;
            req.slots_out.count = n;
        }
        req.global_step = m->global_step;
        req.max_steps = m->max_steps;
        req.optim = m->optim;
        req.schedule = m->schedule;
        req.consistency = m->consistency;
        req.skip_nonfinite = m->skip_nonfinite;
        req.step_ceiling = m->step_ceiling;
        if (m->num_tables < 0 || m->num_tables > DT_MAX_TABLES)
            return dt_err_set(err, DT_EINVAL, "ps client: create: %d tables (0..%d)", m->num_tables,
                              DT_MAX_TABLES);
        for (int t = 0; t < m->num_tables; t++)
            req.tables[t] = m->tables[t];
        req.num_tables = m->num_tables;
        req.tables_pending = m->tables_pending && m->num_tables > 0;
        req.eviction = m->eviction;
        if (m->consistency.mode == DT_MODE_SYNC && c->num_ps > 1) c->two_phase = 1;
        snprintf(req.model, sizeof req.model, "%s", m->model ? m->model : "");
        snprintf(req.job_id, sizeof req.job_id, "%s", m->job_id ? m->job_id : "");
        int rc = prepare(c, p, DT_MSG_CREATE_REQ, &req, 1, err);
        if (rc == 0) rc = run(c, p, p + 1, err);
        if (rc == 0) {
            dt_msg_create_resp resp;
            memset(&resp, 0, sizeof resp);
            rc = dt_codec_decode_buf(DT_MSG_CREATE_RESP, &c->calls[p].response, &resp, err);
            if (rc == 0) c->incarnation[p] = resp.incarnation;
        }
        dt_rpc_buf_release(&c->calls[p].response);
        if (rc < 0) return rc;
    }
    return 0;
}

/* The unit on ps p called name, or -1. */
static int find_unit(const dt_ps_client *c, int p, const char *name, size_t len) {
    for (int k = c->first_on[p]; k < c->first_on[p] + c->count_on[p]; k++) {
        const unit *u = &c->units[c->order[k]];
        if (strlen(u->name) == len && strncmp(u->name, name, len) == 0) return c->order[k];
    }
    return -1;
}

/* A pulled tensor's copy by ranges of bytes, each but the last ending on a
 * 64-byte line of dst, for the copy pool. */
typedef struct {
    dt_span src;
    uint8_t *dst;
    int ranges;
} copy_job;

static void copy_range(void *ctx, int range) {
    copy_job *j = ctx;
    const size_t len = j->src.len, line = ~(size_t)63;
    /* len < 2^31 (a message), ranges <= 4 * MAX_COPY_THREADS: no overflow. */
    size_t lo = range == 0 ? 0 : (len * (size_t)range / (size_t)j->ranges) & line;
    size_t hi =
        range + 1 == j->ranges ? len : (len * (size_t)(range + 1) / (size_t)j->ranges) & line;
    dt_span part = dt_span_sub(&j->src, lo, hi - lo);
    dt_span_copy(&part, j->dst + lo);
}

/* Copies tensor i of `in` to dst: by ranges on the copy pool when it is
 * large, else (or with the pool busy) in one pass. */
static void copy_view(dt_ps_client *c, const dt_tensor_views *in, int i, void *dst) {
    dt_piece one;
    copy_job j = {.src = dt_codec_view_span(in, i, &one), .dst = dst};
    if (c->copy_pool && j.src.len >= c->copy_min_bytes) {
        j.ranges = (dt_pool_helpers(c->copy_pool) + 1) * COPY_RANGES_PER_THREAD;
        if (dt_pool_run(c->copy_pool, copy_range, &j, j.ranges)) return;
    }
    dt_span_copy(&j.src, j.dst);
}

/* Checks decoded tensor i of `in` (from ps p) against unit ui and copies
 * its bytes, wherever they lie in the reply, straight into dst (the whole
 * tensor, shaped like the unit's variable): the one copy of a pulled value. */
static int take(dt_ps_client *c, int p, int ui, const dt_tensor_views *in, int i, dt_tensor *dst,
                dt_err *err) {
    const unit *u = &c->units[ui];
    const dt_tensor *v = &c->layout[u->var];
    const dt_tensor *got = &in->items[i];
    int ok = got->dtype == v->dtype && got->ndim == v->ndim && got->nbytes == u->nbytes;
    for (int d = 0; ok && d < v->ndim; d++)
        ok = got->shape[d] == (d == 0 ? u->rows : v->shape[d]);
    if (!ok)
        return dt_err_set(err, DT_EINVAL,
                          "%s: pull: %s has another dtype or shape than this "
                          "model's (was the ps created by another job?)",
                          c->names[p], got->name);
    copy_view(c, in, i, (char *)dst->data + u->offset);
    return 0;
}

static int take_variables(dt_ps_client *c, int p, const dt_tensor_views *in, dt_tensors *vars,
                          dt_err *err) {
    if (in->count != c->count_on[p])
        return dt_err_set(err, DT_EINVAL, "%s: pull: %d variables, expected %d", c->names[p],
                          in->count, c->count_on[p]);
    memset(c->seen, 0, sizeof(int) * (size_t)c->num_units);
    for (int i = 0; i < in->count; i++) {
        const dt_tensor *got = &in->items[i];
        int ui = find_unit(c, p, got->name, strlen(got->name));
        if (ui < 0 || c->seen[ui]++)
            return dt_err_set(err, DT_EINVAL, "%s: pull: unexpected variable %s", c->names[p],
                              got->name);
        int rc = take(c, p, ui, in, i, &vars->items[c->units[ui].var], err);
        if (rc < 0) return rc;
    }
    return 0;
}

/* Slot views are named "<unit>/<slot>"; they land in "<variable>/<slot>". */
static int take_slots(dt_ps_client *c, int p, const dt_tensor_views *in, dt_tensors *slots,
                      dt_err *err) {
    for (int i = 0; i < in->count; i++) {
        const dt_tensor *got = &in->items[i];
        const char *slash = strrchr(got->name, '/');
        int ui = slash ? find_unit(c, p, got->name, (size_t)(slash - got->name)) : -1;
        char full_name[DT_TENSOR_NAME_MAX + 32];
        dt_tensor *dst = NULL;
        if (ui >= 0) {
            snprintf(full_name, sizeof full_name, "%s/%s", c->layout[c->units[ui].var].name,
                     slash + 1);
            dst = dt_tensors_find(slots, full_name);
        }
        if (!dst)
            return dt_err_set(err, DT_EINVAL, "%s: pull: unexpected slot %s", c->names[p],
                              got->name);
        int rc = take(c, p, ui, in, i, dst, err);
        if (rc < 0) return rc;
    }
    return 0;
}

/* Where ps p's decoded variables (and slots) go: its own part of the view
 * storage, so every reply of a round stays decoded until all are taken. */
static void reply_views(dt_ps_client *c, int p, int with_vars, int with_slots,
                        dt_tensor_views *vars, dt_tensor_views *slots) {
    int base = c->first_on[p] + p;
    *vars =
        (dt_tensor_views){c->views + base, 0, with_vars ? c->count_on[p] + 1 : 0, c->spans + base};
    if (!slots) return;
    base = c->first_on[p] * DT_OPTIM_MAX_SLOTS + p;
    *slots = (dt_tensor_views){c->slot_views + base, 0,
                               with_slots ? c->count_on[p] * DT_OPTIM_MAX_SLOTS + 1 : 0,
                               c->slot_spans + base};
}

/* Prepares and runs pulls to ps tasks [first, last); the others (p > 0)
 * carry ps 0's latest decision. */
static int pull_round(dt_ps_client *c, int first, int last, int with_slots, int64_t min_global_step,
                      dt_err *err) {
    for (int p = first; p < last; p++) {
        dt_msg_pull_req req;
        memset(&req, 0, sizeof req);
        req.worker = c->params.worker;
        req.include_slots = with_slots;
        req.min_global_step = min_global_step;
        req.seen_step = c->seen_step[p];
        if (p > 0 && c->two_phase) req.decision = c->decision;
        int rc = prepare(c, p, DT_MSG_PULL_REQ, &req, 0, err);
        if (rc < 0) return rc;
    }
    return run(c, first, last, err);
}

/* Decodes the pull replies of ps tasks [first, last), once each, into
 * c->pull_replies (views into the responses). */
static int decode_pulls(dt_ps_client *c, int first, int last, int with_slots, dt_err *err) {
    for (int p = first; p < last; p++) {
        dt_msg_pull_resp *resp = &c->pull_replies[p];
        memset(resp, 0, sizeof *resp);
        reply_views(c, p, 1, with_slots, &resp->in, &resp->slots_in);
        int rc = dt_codec_decode_buf(DT_MSG_PULL_RESP, &c->calls[p].response, resp, err);
        if (rc < 0) return dt_err_wrap(err, rc, "%s: pull", c->names[p]);
    }
    return 0;
}

/* Keeps ps 0's decision from its reply; 1 when it is the first this client
 * has seen (it did not know the job was sync with several ps tasks). */
static int note_decision(dt_ps_client *c, const dt_msg_pull_resp *resp) {
    if (!resp->decided.has) return 0;
    int first = !c->two_phase;
    c->two_phase = 1;
    if (!c->decision.has || resp->decided.step >= c->decision.step) c->decision = resp->decided;
    return first;
}

int dt_ps_client_pull(dt_ps_client *c, dt_tensors *vars, dt_tensors *slots, int64_t min_global_step,
                      dt_ps_reply *r, dt_err *err) {
    memset(r, 0, sizeof *r);
    int with_slots = slots != NULL, rc;
    /* Two-phase: ps 0 alone first; while it says "wait" the others could
     * not answer either. */
    int asked = c->two_phase && c->num_ps > 1 ? 1 : c->num_ps;
    if ((rc = pull_round(c, 0, asked, with_slots, min_global_step, err)) < 0 ||
        (rc = decode_pulls(c, 0, asked, with_slots, err)) < 0)
        goto out;
    /* The others are asked (again) with ps 0's decision: in two phases, or
     * when this reply brought the first decision this client has seen. */
    int first_decision = note_decision(c, &c->pull_replies[0]);
    if (c->num_ps > 1 && !c->pull_replies[0].wait && (asked == 1 || first_decision)) {
        for (int q = 1; q < c->num_ps; q++)
            dt_rpc_buf_release(&c->calls[q].response);
        asked = c->num_ps;
        if ((rc = pull_round(c, 1, asked, with_slots, min_global_step, err)) < 0 ||
            (rc = decode_pulls(c, 1, asked, with_slots, err)) < 0)
            goto out;
    }
    /* Every reply is checked before any is copied, so a "wait" from one ps
     * leaves the caller's variables as they were. */
    for (int p = 0; p < asked; p++) {
        const dt_msg_pull_resp *resp = &c->pull_replies[p];
        if ((rc = note_incarnation(c, p, resp->incarnation, err)) < 0) goto out;
        if (p == 0) r->global_step = resp->global_step;
        if (resp->global_step > r->max_step) r->max_step = resp->global_step;
        if (resp->global_step > c->seen_step[p]) c->seen_step[p] = resp->global_step;
        r->done |= resp->done;
        r->wait |= resp->wait;
    }
    for (int p = 0; p < asked && !r->wait; p++) {
        const dt_msg_pull_resp *resp = &c->pull_replies[p];
        if ((rc = take_variables(c, p, &resp->in, vars, err)) < 0) goto out;
        if (slots && (rc = take_slots(c, p, &resp->slots_in, slots, err)) < 0) goto out;
    }
out:
    release_responses(c);
    return rc;
}

/* What a push round also asks for: the variables after the push, into
 * `into` (NULL: a plain push). */
typedef struct {
    dt_tensors *into;
    int64_t min_global_step;
} push_pull;

/* Takes ps p's variables from its push reply when it sent them and has not
 * restarted since the last reply (then the caller's pull sees to it). */
static int take_pushed_variables(dt_ps_client *c, int p, const push_pull *pp,
                                 const dt_msg_push_resp *resp, int restarted, dt_err *err) {
    if (!pp->into || resp->wait || resp->done || restarted || resp->in.count == 0) return 0;
    int rc = take_variables(c, p, &resp->in, pp->into, err);
    if (rc == 0) c->push_pulled[p] = 1;
    return rc;
}

/* Drops one reference of pn: a run gRPC released (run 1), or the client's
 * own (run 0). The last one frees it. */
static void pins_drop(pins *pn, int run) {
    pthread_mutex_lock(&pn->mu);
    if (run)
        pn->runs--;
    else
        pn->owned = 0;
    int last = pn->runs == 0 && !pn->owned;
    pthread_cond_broadcast(&pn->cv);
    pthread_mutex_unlock(&pn->mu);
    if (!last) return;
    pthread_mutex_destroy(&pn->mu);
    pthread_cond_destroy(&pn->cv);
    free(pn);
}

static void unpin(void *arg) {
    pins_drop(arg, 1);
}

/* The ref hook of a push's gradients: the caller's memory, sent in place. */
static int ref_grad(void *ctx, int index, dt_rpc_ref *out, dt_err *err) {
    (void)err;
    dt_ps_client *c = ctx;
    const dt_tensor *t = &c->out_views[index];
    pthread_mutex_lock(&c->pins->mu);
    c->pins->runs++;
    pthread_mutex_unlock(&c->pins->mu);
    *out = (dt_rpc_ref){t->data, t->nbytes, unpin, c->pins};
    return 0;
}

/* Waits until gRPC reads none of the caller's gradients (the calls are
 * over, so only a transport still flushing holds them), at most the
 * client's deadline: the caller may write them again once this returns 0. */
static int wait_unpinned(dt_ps_client *c, dt_err *err) {
    pins *pn = c->pins;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const struct timespec deadline = dt_timespec_after_ms(now, c->params.timeout_ms);
    pthread_mutex_lock(&pn->mu);
    while (pn->runs > 0)
        if (pthread_cond_timedwait(&pn->cv, &pn->mu, &deadline) == ETIMEDOUT) break;
    int runs = pn->runs;
    pthread_mutex_unlock(&pn->mu);
    if (runs > 0)
        return dt_err_set(err, DT_EINTERNAL,
                          "ps client: gRPC still reads %d gradient run(s) %d ms after the push",
                          runs, c->params.timeout_ms);
    return 0;
}

/* Pushes to the tasks in [first, last) that have not acknowledged this
 * push yet, all at once; records each acknowledgement. */
static int sparse_views(dt_ps_client *c, int p, const dt_ps_sparse *sparse, int nsparse);

static int push_round(dt_ps_client *c, const dt_tensors *grads, const dt_ps_sparse *sparse,
                      int nsparse, int64_t step, const push_pull *pp, int first, int last,
                      dt_err *err) {
    int rc = 0, n = 0, tasks[DT_MAX_PS] = {0};
    for (int p = first; p < last; p++) {
        if (c->push_acked[p]) continue;
        dt_msg_push_req req;
        memset(&req, 0, sizeof req);
        req.worker = c->params.worker;
        req.step = step;
        req.seen_step = c->seen_step[p];
        req.pull = pp->into != NULL;
        req.push_id = c->push_id;
        req.min_global_step = pp->min_global_step;
        req.out.items = c->out_views;
        req.out.count = unit_views(c, p, grads, c->out_views);
        /* Large gradients go in place, the rest are copied. */
        req.out.ref = ref_grad;
        req.out.ref_ctx = c;
        /* The rows placed on p, copied into the request. */
        int pairs = sparse_views(c, p, sparse, nsparse);
        req.sparse_ids_out = (dt_tensor_list){.items = c->sparse_out, .count = pairs};
        req.sparse_grads_out =
            (dt_tensor_list){.items = c->sparse_out + DT_MAX_TABLES, .count = pairs};
        if ((rc = prepare(c, p, DT_MSG_PUSH_REQ, &req, 0, err)) < 0) return rc;
        tasks[n++] = p;
    }
    rc = run_on(c, tasks, n, err);
    for (int k = 0; k < n; k++) {
        int p = tasks[k];
        if (c->calls[p].err.code != DT_OK) continue;
        dt_msg_push_resp *resp = &c->push_replies[p];
        memset(resp, 0, sizeof *resp);
        reply_views(c, p, pp->into != NULL, 0, &resp->in, NULL);
        int drc = dt_codec_decode_buf(DT_MSG_PUSH_RESP, &c->calls[p].response, resp, err);
        if (drc == 0) {
            /* Applied, even by a ps restarted since the pull: never resend. */
            c->push_acked[p] = 1;
            dt_err restarted;
            dt_err_clear(&restarted);
            int changed = note_incarnation(c, p, resp->incarnation, &restarted) < 0;
            if (changed) dt_log(DT_LOG_INFO, "%s", restarted.msg);
            drc = take_pushed_variables(c, p, pp, resp, changed, err);
        }
        memset(&resp->in, 0, sizeof resp->in); /* views into the response, released next */
        if (drc < 0 && rc == 0) rc = drc;
    }
    for (int k = 0; k < n; k++)
        dt_rpc_buf_release(&c->calls[tasks[k]].response);
    return rc;
}

static int split_sparse(dt_ps_client *c, int t, const dt_ps_sparse *s, int with_rows, dt_err *err);

static int push(dt_ps_client *c, const dt_tensors *grads, const dt_ps_sparse *sparse, int nsparse,
                int64_t step, const push_pull *pp, dt_ps_reply *r, dt_err *err) {
    memset(r, 0, sizeof *r);
    if (grads->count != c->num_vars)
        return dt_err_set(err, DT_EINVAL, "ps client: push: %d gradients, expected %d",
                          grads->count, c->num_vars);
    if (nsparse < 0 || nsparse > DT_MAX_TABLES)
        return dt_err_set(err, DT_EINVAL, "ps client: push: %d tables (0..%d)", nsparse,
                          DT_MAX_TABLES);
    /* The same split every try: a retry sends each task the same rows. */
    for (int t = 0; t < nsparse; t++) {
        int rc = split_sparse(c, t, &sparse[t], 1, err);
        if (rc < 0) return rc;
    }
    if (!c->push_pending) {
        if (++c->push_id == 0) c->push_id = 1;
        memset(c->push_acked, 0, sizeof(int) * (size_t)c->num_ps);
        memset(c->push_pulled, 0, sizeof(int) * (size_t)c->num_ps);
    }
    c->push_pending = 1;
    int rc;
    if (c->two_phase && c->num_ps > 1) {
        /* The others hold it first; then ps 0 may count it in a step. */
        if ((rc = push_round(c, grads, sparse, nsparse, step, pp, 1, c->num_ps, err)) == 0)
            rc = push_round(c, grads, sparse, nsparse, step, pp, 0, 1, err);
    } else {
        rc = push_round(c, grads, sparse, nsparse, step, pp, 0, c->num_ps, err);
    }
    if (rc < 0) return rc; /* the pending push is retried on the next call */
    if ((rc = wait_unpinned(c, err)) < 0) return rc;
    c->push_pending = 0;
    r->pulled = pp->into != NULL;
    for (int p = 0; p < c->num_ps; p++) {
        if (c->push_replies[p].global_step > c->seen_step[p])
            c->seen_step[p] = c->push_replies[p].global_step;
        if (p == 0) r->global_step = c->push_replies[p].global_step;
        if (c->push_replies[p].global_step > r->max_step)
            r->max_step = c->push_replies[p].global_step;
        r->done |= c->push_replies[p].done;
        r->dropped |= c->push_replies[p].dropped;
        r->pulled &= c->push_pulled[p];
    }
    return 0;
}

int dt_ps_client_push(dt_ps_client *c, const dt_tensors *grads, int64_t step, dt_ps_reply *r,
                      dt_err *err) {
    const push_pull none = {NULL, 0};
    return push(c, grads, NULL, 0, step, &none, r, err);
}

int dt_ps_client_push_pull(dt_ps_client *c, const dt_tensors *grads, int64_t step, dt_tensors *vars,
                           int64_t min_global_step, dt_ps_reply *r, dt_err *err) {
    /* Sync with several ps tasks: the others learn ps 0's decision from a
     * Pull only, so that stays two calls. */
    const push_pull pp = {c->two_phase && c->num_ps > 1 ? NULL : vars, min_global_step};
    return push(c, grads, NULL, 0, step, &pp, r, err);
}

int dt_ps_client_push_sparse(dt_ps_client *c, const dt_tensors *grads, const dt_ps_sparse *sparse,
                             int nsparse, int64_t step, dt_tensors *vars, int64_t min_global_step,
                             dt_ps_reply *r, dt_err *err) {
    const push_pull pp = {c->two_phase && c->num_ps > 1 ? NULL : vars, min_global_step};
    return push(c, grads, sparse, nsparse, step, &pp, r, err);
}

/* ---- tables ------------------------------------------------------------- */

/* Splits s's ids (and with_rows its rows) into c->split[t] by task. */
static int split_sparse(dt_ps_client *c, int t, const dt_ps_sparse *s, int with_rows, dt_err *err) {
    sparse_split *sp = &c->split[t];
    if (s->n < 0 || s->dim < 1 || s->n > INT64_MAX / 8 / s->dim)
        return dt_err_set(err, DT_EINVAL, "ps client: table %s: %lld rows of %d", s->table,
                          (long long)s->n, s->dim);
    if (s->n > sp->cap) {
        int64_t *ids = dt_realloc(sp->ids, (size_t)s->n * sizeof *ids);
        if (ids) sp->ids = ids;
        int64_t *pos = ids ? dt_realloc(sp->pos, (size_t)s->n * sizeof *pos) : NULL;
        if (pos) sp->pos = pos;
        if (!ids || !pos) return dt_err_set(err, DT_ENOMEM, "ps client: out of memory");
        sp->cap = s->n;
    }
    int64_t want = with_rows ? s->n * s->dim : 0;
    if (want > sp->rows_cap) {
        float *rows = dt_realloc(sp->rows, (size_t)want * sizeof *rows);
        if (!rows) return dt_err_set(err, DT_ENOMEM, "ps client: out of memory");
        sp->rows = rows;
        sp->rows_cap = want;
    }
    /* A counting sort by task keeps each task's ids in order. */
    int64_t count[DT_MAX_PS] = {0};
    for (int64_t k = 0; k < s->n; k++) {
        if (s->ids[k] < 0 || (k > 0 && s->ids[k] <= s->ids[k - 1]))
            return dt_err_set(err, DT_EINVAL,
                              "ps client: table %s: ids[%lld] = %lld: ids must be >= 0, sorted "
                              "and unique",
                              s->table, (long long)k, (long long)s->ids[k]);
        count[dt_table_shard_of(s->ids[k], c->num_ps)]++;
    }
    sp->start[0] = 0;
    for (int p = 0; p < c->num_ps; p++)
        sp->start[p + 1] = sp->start[p] + count[p];
    int64_t at[DT_MAX_PS];
    memcpy(at, sp->start, sizeof(int64_t) * (size_t)c->num_ps);
    size_t row_bytes = (size_t)s->dim * sizeof(float);
    for (int64_t k = 0; k < s->n; k++) {
        int64_t i = at[dt_table_shard_of(s->ids[k], c->num_ps)]++;
        sp->ids[i] = s->ids[k];
        sp->pos[i] = k;
        if (with_rows) memcpy(sp->rows + i * s->dim, s->rows + k * s->dim, row_bytes);
    }
    return 0;
}

/* Tensor views of table t's ids (and rows) on task p into *ids (*rows). */
static void split_views(const dt_ps_client *c, int t, const dt_ps_sparse *s, int p, dt_tensor *ids,
                        dt_tensor *rows) {
    const sparse_split *sp = &c->split[t];
    int64_t first = sp->start[p], m = sp->start[p + 1] - first;
    memset(ids, 0, sizeof *ids);
    snprintf(ids->name, sizeof ids->name, "%s", s->table);
    ids->dtype = DT_DTYPE_I64;
    ids->ndim = 1;
    ids->shape[0] = m;
    ids->data = sp->ids + first;
    ids->nbytes = (size_t)m * sizeof(int64_t);
    if (!rows) return;
    *rows = *ids;
    rows->dtype = DT_DTYPE_F32;
    rows->ndim = 2;
    rows->shape[1] = s->dim;
    rows->data = sp->rows + first * s->dim;
    rows->nbytes = (size_t)m * (size_t)s->dim * sizeof(float);
}

/* The pairs of a push to task p into c->sparse_out (ids) and
 * c->sparse_out + DT_MAX_TABLES (rows): the tables it holds rows of. */
static int sparse_views(dt_ps_client *c, int p, const dt_ps_sparse *sparse, int nsparse) {
    int pairs = 0;
    for (int t = 0; t < nsparse; t++) {
        if (c->split[t].start[p + 1] == c->split[t].start[p]) continue;
        split_views(c, t, &sparse[t], p, &c->sparse_out[pairs],
                    &c->sparse_out[DT_MAX_TABLES + pairs]);
        pairs++;
    }
    return pairs;
}

int dt_ps_client_sparse_pull(dt_ps_client *c, const dt_ps_sparse *s, dt_ps_reply *r, dt_err *err) {
    memset(r, 0, sizeof *r);
    int rc = split_sparse(c, 0, s, 0, err);
    if (rc < 0) return rc;
    int tasks[DT_MAX_PS], n = 0;
    for (int p = 0; p < c->num_ps; p++) {
        if (c->split[0].start[p + 1] == c->split[0].start[p]) continue;
        dt_tensor ids;
        split_views(c, 0, s, p, &ids, NULL);
        dt_msg_sparse_pull_req req;
        memset(&req, 0, sizeof req);
        req.worker = c->params.worker;
        snprintf(req.table, sizeof req.table, "%s", s->table);
        req.seen_step = c->seen_step[p];
        req.ids_out = (dt_tensor_list){.items = &ids, .count = 1};
        if ((rc = prepare(c, p, DT_MSG_SPARSE_PULL_REQ, &req, 0, err)) < 0) return rc;
        tasks[n++] = p;
    }
    if ((rc = run_on(c, tasks, n, err)) < 0) goto out;
    const sparse_split *sp = &c->split[0];
    for (int k = 0; k < n; k++) {
        int p = tasks[k];
        int64_t first = sp->start[p], m = sp->start[p + 1] - first;
        dt_tensor view;
        dt_span span;
        dt_msg_sparse_pull_resp resp;
        memset(&resp, 0, sizeof resp);
        resp.values_in = (dt_tensor_views){&view, 0, 1, &span};
        if ((rc = dt_codec_decode_buf(DT_MSG_SPARSE_PULL_RESP, &c->calls[p].response, &resp, err)) <
            0) {
            dt_err_wrap(err, rc, "%s: sparse pull", c->names[p]);
            goto out;
        }
        if ((rc = note_incarnation(c, p, resp.incarnation, err)) < 0) goto out;
        if (resp.values_in.count != 1 || view.dtype != DT_DTYPE_F32 || view.ndim != 2 ||
            view.shape[0] != m || view.shape[1] != s->dim) {
            rc = dt_err_set(err, DT_EINVAL,
                            "%s: sparse pull: %s: the reply's rows are not F32 (%lld, %d)",
                            c->names[p], s->table, (long long)m, s->dim);
            goto out;
        }
        if (resp.global_step > c->seen_step[p]) c->seen_step[p] = resp.global_step;
        if (p == 0 || k == 0) r->global_step = resp.global_step;
        if (resp.global_step > r->max_step) r->max_step = resp.global_step;
        r->done |= resp.done;
        /* Received in pieces or not: read it out run by run, into place. */
        dt_span_reader rd;
        dt_codec_view_reader(&resp.values_in, 0, &rd);
        int64_t at = 0; /* floats so far */
        size_t got;
        const uint8_t *run;
        while ((run = dt_span_reader_next(&rd, &got)) != NULL) {
            for (size_t e = 0; e < got;) {
                int64_t row = (at + (int64_t)e) / s->dim, col = (at + (int64_t)e) % s->dim;
                size_t take_n = (size_t)(s->dim - col);
                if (take_n > got - e) take_n = got - e;
                memcpy(s->rows + sp->pos[first + row] * s->dim + col, run + 4 * e, 4 * take_n);
                e += take_n;
            }
            at += (int64_t)got;
        }
    }
out:
    release_responses(c);
    return rc;
}

/* Task p's rows of an import page (ids first, each tensor n rows) into
 * *out (count tensors, the data in *scratch, grown as needed); 0 tensors
 * when p holds none. A page of another layout goes whole: the ps checks it
 * and refuses it by name. */
static int page_for(const dt_ps_client *c, int p, const dt_tensor *page, int count, dt_tensor *out,
                    char **scratch, size_t *cap, dt_err *err) {
    if (count < 2 || page[0].dtype != DT_DTYPE_I64 || page[0].ndim != 1 || page[0].shape[0] < 1) {
        memcpy(out, page, sizeof *page * (size_t)count);
        return count;
    }
    const int64_t n = page[0].shape[0], *ids = page[0].data;
    size_t row_bytes = 0;
    for (int i = 0; i < count; i++) {
        if (page[i].ndim < 1 || page[i].shape[0] != n) {
            memcpy(out, page, sizeof *page * (size_t)count);
            return count;
        }
        row_bytes += page[i].nbytes / (size_t)n;
    }
    if (row_bytes == 0) { /* no bytes to split */
        memcpy(out, page, sizeof *page * (size_t)count);
        return count;
    }
    /* Ids a checkpoint should not hold: the page goes whole, for every
     * task to refuse naming the id. */
    for (int64_t k = 0; k < n; k++)
        if (ids[k] < 0 || (k > 0 && ids[k] <= ids[k - 1])) {
            memcpy(out, page, sizeof *page * (size_t)count);
            return count;
        }
    int64_t m = 0;
    for (int64_t k = 0; k < n; k++)
        m += dt_table_shard_of(ids[k], c->num_ps) == p;
    if (m == 0) return 0;
    if (!*scratch || (size_t)m * row_bytes > *cap) {
        char *bigger = dt_realloc(*scratch, (size_t)m * row_bytes);
        if (!bigger) return dt_err_set(err, DT_ENOMEM, "ps client: import: out of memory");
        *scratch = bigger;
        *cap = (size_t)m * row_bytes;
    }
    char *at = *scratch;
    for (int i = 0; i < count; i++) {
        size_t rb = page[i].nbytes / (size_t)n;
        out[i] = page[i];
        out[i].shape[0] = m;
        out[i].data = at;
        out[i].nbytes = rb * (size_t)m;
        for (int64_t k = 0; k < n; k++)
            if (dt_table_shard_of(ids[k], c->num_ps) == p) {
                memcpy(at, (const char *)page[i].data + rb * (size_t)k, rb);
                at += rb;
            }
    }
    return count;
}

int dt_ps_client_sparse_import(dt_ps_client *c, const char *table, const dt_tensor *page, int count,
                               int last, const int *only, dt_err *err) {
    if (count < 0 || count > 2 + DT_OPTIM_MAX_SLOTS)
        return dt_err_set(err, DT_EINVAL, "ps client: import: %d tensors a page", count);
    dt_msg_sparse_import_req req;
    memset(&req, 0, sizeof req);
    snprintf(req.table, sizeof req.table, "%s", table);
    req.last = last;
    dt_tensor mine[2 + DT_OPTIM_MAX_SLOTS];
    char *scratch = NULL;
    size_t cap = 0;
    int rc = 0, tasks[DT_MAX_PS], n = 0;
    /* Each task gets the rows placed on it, not the page: a restore moves
     * the table once, whatever the number of tasks. */
    for (int p = 0; p < c->num_ps && rc == 0; p++) {
        if (only && !only[p]) continue;
        int k = page_for(c, p, page, count, mine, &scratch, &cap, err);
        if (k < 0) {
            rc = k;
            break;
        }
        req.out = (dt_tensor_list){.items = mine, .count = k};
        rc = prepare(c, p, DT_MSG_SPARSE_IMPORT_REQ, &req, 1, err);
        tasks[n++] = p;
    }
    free(scratch);
    if (rc == 0) rc = run_on(c, tasks, n, err);
    release_responses(c);
    return rc;
}

/* A streamed export: each task's current page, copied out of its message,
 * and the run of merged rows handed to the caller. */
typedef struct {
    int64_t *ids;                         /* (page_rows) */
    float *parts[1 + DT_OPTIM_MAX_SLOTS]; /* each (page_rows, dim) */
    int64_t m, at;                        /* rows in the page, the next one to merge */
    int64_t after;                        /* the last id received: the next page's start */
    int more;                             /* the task has rows past this page */
} task_page;

typedef struct {
    dt_ps_client *c;
    const dt_table_config *t;
    const char *table; /* t->name */
    int dim;           /* t->dim */
    int with_slots;
    int64_t page_rows;
    int nparts; /* values, then the slots asked for */
    char names[1 + DT_OPTIM_MAX_SLOTS][DT_TENSOR_NAME_MAX];
    task_page pages[DT_MAX_PS];
    task_page run; /* merged rows not yet handed over (m of them) */
} export_merge;

static void task_page_free(task_page *tp) {
    free(tp->ids);
    for (int i = 0; i < 1 + DT_OPTIM_MAX_SLOTS; i++)
        free(tp->parts[i]);
}

/* tp's ids (page_rows) and nparts parts (page_rows, dim), once. */
static int page_arrays(export_merge *x, task_page *tp, dt_err *err) {
    if (!tp->ids && !(tp->ids = dt_malloc((size_t)x->page_rows * sizeof *tp->ids))) goto oom;
    for (int i = 0; i < x->nparts; i++)
        if (!tp->parts[i] &&
            !(tp->parts[i] = dt_malloc((size_t)x->page_rows * (size_t)x->dim * sizeof(float))))
            goto oom;
    return 0;
oom:
    return dt_err_set(err, DT_ENOMEM, "ps client: export: out of memory");
}

/* Whether a page from task p has the layout the table's config says: ids,
 * values and the slots asked for, by name, each of m rows (1..page_rows). */
static int page_layout_ok(const export_merge *x, const dt_tensor_views *in, int64_t m) {
    const dt_tensor *ids = &in->items[0];
    char want[DT_TENSOR_NAME_MAX + 8];
    snprintf(want, sizeof want, "%s/ids", x->table);
    if (ids->dtype != DT_DTYPE_I64 || m < 1 || m > x->page_rows || strcmp(ids->name, want) != 0 ||
        in->count != 1 + x->nparts)
        return 0;
    for (int i = 1; i < in->count; i++)
        if (in->items[i].dtype != DT_DTYPE_F32 || in->items[i].ndim != 2 ||
            in->items[i].shape[0] != m || in->items[i].shape[1] != x->dim ||
            strcmp(in->items[i].name, x->names[i - 1]) != 0)
            return 0;
    return 1;
}

/*
 * Checks a page from task p and copies it into the task's arrays. A ps is
 * a peer like any other: its page must have the table's layout (ids,
 * values, the slots asked for, at most page_rows rows) and hold only ids
 * of the table (0..rows-1), placed on p, increasing past the task's last;
 * else the export fails naming the task, before any of its rows is used.
 */
static int take_page(export_merge *x, int p, const dt_tensor_views *in, dt_err *err) {
    dt_ps_client *c = x->c;
    task_page *tp = &x->pages[p];
    tp->m = tp->at = 0;
    if (in->count == 0) return 0;
    const int64_t m = in->items[0].ndim == 1 ? in->items[0].shape[0] : -1;
    if (!page_layout_ok(x, in, m))
        return dt_err_set(err, DT_EINVAL, "%s: sparse export: %s: a page of another layout",
                          c->names[p], x->table);
    int rc = page_arrays(x, tp, err);
    if (rc < 0) return rc;
    dt_codec_view_copy(in, 0, tp->ids);
    for (int64_t k = 0; k < m; k++) {
        const int64_t id = tp->ids[k], before = k ? tp->ids[k - 1] : tp->after;
        if (id <= before)
            return dt_err_set(err, DT_EINVAL,
                              "%s: sparse export: %s: id %lld after %lld: ids must increase",
                              c->names[p], x->table, (long long)id, (long long)before);
        if (id >= x->t->rows)
            return dt_err_set(err, DT_EINVAL,
                              "%s: sparse export: %s: id %lld is not a row of the table "
                              "(0..%lld)",
                              c->names[p], x->table, (long long)id, (long long)x->t->rows - 1);
        if (dt_table_shard_of(id, c->num_ps) != p)
            return dt_err_set(
                err, DT_EINVAL, "%s: sparse export: %s: row %lld belongs to ps task %d, not %d",
                c->names[p], x->table, (long long)id, dt_table_shard_of(id, c->num_ps), p);
    }
    for (int i = 0; i < x->nparts; i++)
        dt_codec_view_copy(in, i + 1, tp->parts[i]);
    tp->m = m;
    tp->after = tp->ids[m - 1];
    return 0;
}

/* Task p's next page, if it has one (tp->m stays 0 when not). */
static int next_page(export_merge *x, int p, dt_err *err) {
    dt_ps_client *c = x->c;
    task_page *tp = &x->pages[p];
    tp->m = tp->at = 0;
    if (!tp->more) return 0;
    dt_msg_sparse_export_req req;
    memset(&req, 0, sizeof req);
    snprintf(req.table, sizeof req.table, "%s", x->table);
    req.after_id = tp->after;
    req.max_rows = x->page_rows;
    req.include_slots = x->with_slots;
    int rc = prepare(c, p, DT_MSG_SPARSE_EXPORT_REQ, &req, 0, err);
    if (rc == 0) rc = run(c, p, p + 1, err);
    if (rc < 0) return rc;
    dt_tensor views[2 + DT_OPTIM_MAX_SLOTS];
    dt_span spans[2 + DT_OPTIM_MAX_SLOTS];
    dt_msg_sparse_export_resp resp;
    memset(&resp, 0, sizeof resp);
    resp.in = (dt_tensor_views){views, 0, 2 + DT_OPTIM_MAX_SLOTS, spans};
    rc = dt_codec_decode_buf(DT_MSG_SPARSE_EXPORT_RESP, &c->calls[p].response, &resp, err);
    if (rc == 0) rc = take_page(x, p, &resp.in, err);
    dt_rpc_buf_release(&c->calls[p].response);
    tp->more = rc == 0 && resp.more && tp->m > 0;
    return rc;
}

/* Hands the merged run to fn and empties it. */
static int flush_run(export_merge *x, dt_ps_rows_fn fn, void *ctx, dt_err *err) {
    if (x->run.m == 0) return 0;
    dt_ps_rows rows = {.n = x->run.m, .ids = x->run.ids, .nparts = x->nparts};
    for (int i = 0; i < x->nparts; i++) {
        rows.parts[i] = x->run.parts[i];
        rows.names[i] = x->names[i];
    }
    x->run.m = 0;
    return fn(ctx, &rows, err);
}

int dt_ps_client_sparse_export_each(dt_ps_client *c, const dt_table_config *t, int with_slots,
                                    int page_rows, dt_ps_rows_fn fn, void *ctx, dt_err *err) {
    export_merge *x = dt_calloc(1, sizeof *x);
    if (!x) return dt_err_set(err, DT_ENOMEM, "ps client: export: out of memory");
    *x = (export_merge){.c = c,
                        .t = t,
                        .table = t->name,
                        .dim = t->dim,
                        .with_slots = with_slots,
                        .page_rows = page_rows < 1 ? 1 : page_rows,
                        .nparts = 1 + (with_slots ? t->num_slots : 0)};
    const char *table = t->name;
    const int dim = t->dim;
    snprintf(x->names[0], sizeof x->names[0], "%s/values", table);
    for (int s = 0; s < x->nparts - 1; s++)
        snprintf(x->names[s + 1], sizeof x->names[s + 1], "%s/%s", table, t->slot_names[s]);
    int rc = 0;
    for (int p = 0; p < c->num_ps && rc == 0; p++) {
        x->pages[p].after = -1;
        x->pages[p].more = 1;
        rc = next_page(x, p, err);
    }
    const size_t row_bytes = (size_t)dim * sizeof(float);
    int64_t last = -1;
    /* Each task's pages come in id order; the tasks' rows interleave, so
     * the lowest id among the tasks' current rows goes next. */
    while (rc == 0) {
        int low = -1;
        for (int p = 0; p < c->num_ps; p++) {
            const task_page *tp = &x->pages[p];
            if (tp->at < tp->m &&
                (low < 0 || tp->ids[tp->at] < x->pages[low].ids[x->pages[low].at]))
                low = p;
        }
        if (low < 0) break;
        task_page *tp = &x->pages[low];
        const int64_t id = tp->ids[tp->at];
        if (id == last) {
            rc = dt_err_set(err, DT_EINVAL, "%s: sparse export: %s: row %lld held by two tasks",
                            c->names[low], table, (long long)id);
            break;
        }
        task_page *run = &x->run;
        if ((rc = page_arrays(x, run, err)) < 0) break;
        run->ids[run->m] = id;
        for (int i = 0; i < x->nparts; i++)
            memcpy(run->parts[i] + run->m * dim, tp->parts[i] + tp->at * dim, row_bytes);
        last = id;
        if (++run->m == x->page_rows) rc = flush_run(x, fn, ctx, err);
        if (rc == 0 && ++tp->at == tp->m) rc = next_page(x, low, err);
    }
    if (rc == 0) rc = flush_run(x, fn, ctx, err);
    for (int p = 0; p < DT_MAX_PS; p++)
        task_page_free(&x->pages[p]);
    task_page_free(&x->run);
    free(x);
    return rc;
}

/* A whole export in memory: the runs appended. */
typedef struct {
    int64_t n, cap;
    int nparts;
    int64_t *ids;                         /* (cap) */
    float *parts[1 + DT_OPTIM_MAX_SLOTS]; /* each (cap, dim) */
    char names[1 + DT_OPTIM_MAX_SLOTS][DT_TENSOR_NAME_MAX];
    int dim;
} gathered;

static int gather_run(void *ctx, const dt_ps_rows *rows, dt_err *err) {
    gathered *g = ctx;
    const int dim = g->dim;
    if (g->n + rows->n > g->cap) {
        int64_t cap = g->cap ? g->cap : 1024;
        while (cap < g->n + rows->n)
            cap *= 2;
        int64_t *nids = dt_realloc(g->ids, (size_t)cap * sizeof *nids);
        if (!nids) return dt_err_set(err, DT_ENOMEM, "ps client: export: out of memory");
        g->ids = nids;
        for (int i = 0; i < rows->nparts; i++) {
            float *np = dt_realloc(g->parts[i], (size_t)cap * (size_t)dim * sizeof *np);
            if (!np) return dt_err_set(err, DT_ENOMEM, "ps client: export: out of memory");
            g->parts[i] = np;
        }
        g->cap = cap;
    }
    g->nparts = rows->nparts;
    for (int i = 0; i < rows->nparts; i++)
        snprintf(g->names[i], sizeof g->names[i], "%s", rows->names[i]);
    memcpy(g->ids + g->n, rows->ids, (size_t)rows->n * sizeof *g->ids);
    for (int i = 0; i < rows->nparts; i++)
        memcpy(g->parts[i] + g->n * dim, rows->parts[i],
               (size_t)rows->n * (size_t)dim * sizeof(float));
    g->n += rows->n;
    return 0;
}

int dt_ps_client_sparse_export(dt_ps_client *c, const dt_table_config *t, int with_slots,
                               int page_rows, dt_tensors *out, dt_err *err) {
    memset(out, 0, sizeof *out);
    gathered g;
    memset(&g, 0, sizeof g);
    const int dim = t->dim;
    g.dim = dim;
    int rc = dt_ps_client_sparse_export_each(c, t, with_slots, page_rows, gather_run, &g, err);
    if (rc < 0 || g.n == 0) goto done;
    dt_tensor specs[1 + 1 + DT_OPTIM_MAX_SLOTS];
    memset(specs, 0, sizeof specs);
    snprintf(specs[0].name, sizeof specs[0].name, "%s/ids", t->name);
    specs[0].dtype = DT_DTYPE_I64;
    specs[0].ndim = 1;
    specs[0].shape[0] = g.n;
    for (int i = 0; i < g.nparts; i++) {
        snprintf(specs[i + 1].name, sizeof specs[i + 1].name, "%s", g.names[i]);
        specs[i + 1].dtype = DT_DTYPE_F32;
        specs[i + 1].ndim = 2;
        specs[i + 1].shape[0] = g.n;
        specs[i + 1].shape[1] = dim;
    }
    if ((rc = dt_tensors_init(out, specs, 1 + g.nparts, err)) < 0) goto done;
    memcpy(out->items[0].data, g.ids, (size_t)g.n * sizeof *g.ids);
    for (int i = 0; i < g.nparts; i++)
        memcpy(out->items[i + 1].data, g.parts[i], (size_t)g.n * (size_t)dim * sizeof(float));
done:
    free(g.ids);
    for (int i = 0; i < 1 + DT_OPTIM_MAX_SLOTS; i++)
        free(g.parts[i]);
    if (rc < 0) dt_tensors_deinit(out);
    return rc;
}

/* The rows writer of a streamed save, made at the first run, when the
 * parts' names are known. */
typedef struct {
    const char *dir, *table;
    int dim;
    dt_safetensors_rows *rows;
} save_rows;

static int save_run(void *ctx, const dt_ps_rows *run, dt_err *err) {
    save_rows *sr = ctx;
    if (!sr->rows) {
        dt_tensor specs[1 + 1 + DT_OPTIM_MAX_SLOTS];
        memset(specs, 0, sizeof specs);
        snprintf(specs[0].name, sizeof specs[0].name, "%s/ids", sr->table);
        specs[0].dtype = DT_DTYPE_I64;
        specs[0].ndim = 1;
        for (int i = 0; i < run->nparts; i++) {
            snprintf(specs[i + 1].name, sizeof specs[i + 1].name, "%s", run->names[i]);
            specs[i + 1].dtype = DT_DTYPE_F32;
            specs[i + 1].ndim = 2;
            specs[i + 1].shape[1] = sr->dim;
        }
        int rc = dt_safetensors_rows_new(sr->dir, specs, 1 + run->nparts, &sr->rows, err);
        if (rc < 0) return rc;
    }
    const void *parts[1 + 1 + DT_OPTIM_MAX_SLOTS] = {run->ids};
    for (int i = 0; i < run->nparts; i++)
        parts[i + 1] = run->parts[i];
    return dt_safetensors_rows_append(sr->rows, run->n, parts, err);
}

int dt_ps_client_sparse_save(dt_ps_client *c, const dt_table_config *t, int with_slots,
                             int page_rows, const char *dir, dt_safetensors_rows **out,
                             dt_err *err) {
    save_rows sr = {.dir = dir, .table = t->name, .dim = t->dim};
    int rc = dt_ps_client_sparse_export_each(c, t, with_slots, page_rows, save_run, &sr, err);
    if (rc < 0) {
        dt_safetensors_rows_free(sr.rows);
        sr.rows = NULL;
    }
    *out = sr.rows;
    return rc;
}

/* req to every ps task at once; the replies are dropped. */
static int status_all(dt_ps_client *c, const dt_msg_status_req *req, dt_err *err) {
    for (int p = 0; p < c->num_ps; p++) {
        int rc = prepare(c, p, DT_MSG_STATUS_REQ, req, 0, err);
        if (rc < 0) return rc;
    }
    int rc = run(c, 0, c->num_ps, err);
    release_responses(c);
    return rc;
}

int dt_ps_client_tell_done(dt_ps_client *c, dt_err *err) {
    dt_msg_status_req req = {.worker = c->params.worker, .done_seen = true};
    return status_all(c, &req, err);
}

int dt_ps_client_heartbeat(dt_ps_client *c, dt_err *err) {
    dt_msg_status_req req = {.worker = c->params.worker, .heartbeat = true};
    return status_all(c, &req, err);
}

static int send_shutdown(dt_ps_client *c, const char *reason, int stop_training, dt_err *err) {
    int rc = 0;
    for (int p = 0; p < c->num_ps; p++) {
        dt_msg_shutdown_req req;
        memset(&req, 0, sizeof req);
        snprintf(req.reason, sizeof req.reason, "%s", reason);
        req.stop_training = stop_training;
        if ((rc = prepare(c, p, DT_MSG_SHUTDOWN_REQ, &req, 0, err)) < 0) return rc;
    }
    rc = run(c, 0, c->num_ps, err);
    release_responses(c);
    return rc;
}

int dt_ps_client_shutdown(dt_ps_client *c, const char *reason, dt_err *err) {
    return send_shutdown(c, reason, 0, err);
}

int dt_ps_client_stop_training(dt_ps_client *c, const char *reason, dt_err *err) {
    return send_shutdown(c, reason, 1, err);
}

/* failure as a ps takes it: text, cut to the field at a whole character. */
static void failure_text(char *dst, size_t cap, const char *failure) {
    dt_text_escape(dst, cap, failure ? failure : "", failure ? strlen(failure) : 0);
}

int dt_ps_client_fail_job(dt_ps_client *c, const char *failure, dt_err *err) {
    int rc = 0;
    for (int p = 0; p < c->num_ps; p++) {
        dt_msg_shutdown_req req;
        memset(&req, 0, sizeof req);
        snprintf(req.reason, sizeof req.reason, "the chief failed");
        failure_text(req.failure, sizeof req.failure, failure);
        if (!req.failure[0]) snprintf(req.failure, sizeof req.failure, "(no reason given)");
        if ((rc = prepare(c, p, DT_MSG_SHUTDOWN_REQ, &req, 0, err)) < 0) return rc;
    }
    rc = run(c, 0, c->num_ps, err);
    release_responses(c);
    return rc;
}

int dt_ps_client_leave(dt_ps_client *c, const char *failure, dt_err *err) {
    dt_msg_status_req req;
    memset(&req, 0, sizeof req);
    req.worker = c->params.worker;
    failure_text(req.failure, sizeof req.failure, failure);
    if (!req.failure[0]) snprintf(req.failure, sizeof req.failure, "(no reason given)");
    return status_all(c, &req, err);
}
