/*
 * ps_client: placement, fan-out and reply checking for calls to ps tasks.
 *
 * Invariants: `place[i]` never changes after _new; a reply's variables must
 * match the expected names, dtypes and shapes exactly before any byte is
 * copied into the caller's tensors.
 */
#include "ps_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rpc_client.h"

struct dt_ps_client {
    dt_ps_client_params params;
    int num_ps;
    dt_rpc_channel **channels; /* (num_ps) */
    char (*names)[80];         /* (num_ps) "ps:i host:port" */
    uint64_t *incarnation;     /* (num_ps) last seen; 0 = none yet */
    int num_vars;
    int *place;                /* (num_vars) ps index of each variable */
    int *count_on;             /* (num_ps) variables on each ps */
    dt_tensor *views;          /* (num_vars) scratch for decoding replies */
    dt_tensor *sorted;         /* (num_vars) per-ps grouping of variables, by ps */
    int *first_on;             /* (num_ps) offset of each ps's group in `sorted` */
    dt_rpc_call *calls;        /* (num_ps) */
    dt_rpc_buf *requests;      /* (num_ps) */
};

/* ---- placement --------------------------------------------------------- */

static void place_greedy(dt_ps_client *c, const dt_tensors *layout) {
    int n = layout->count;
    int *order = malloc(sizeof(int) * (size_t)(n ? n : 1));
    int64_t *load = calloc((size_t)c->num_ps, sizeof *load);
    for (int i = 0; i < n; i++) order[i] = i;
    /* Largest first; ties by name, so every role sorts identically. */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0; j--) {
            const dt_tensor *a = &layout->items[order[j - 1]], *b = &layout->items[order[j]];
            int swap = a->nbytes < b->nbytes ||
                       (a->nbytes == b->nbytes && strcmp(a->name, b->name) > 0);
            if (!swap) break;
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int k = 0; k < n; k++) {
        int best = 0;
        for (int p = 1; p < c->num_ps; p++)
            if (load[p] < load[best]) best = p;
        c->place[order[k]] = best;
        load[best] += (int64_t)layout->items[order[k]].nbytes;
    }
    free(order);
    free(load);
}

int dt_ps_client_placement(const dt_ps_client *c, int var_index) { return c->place[var_index]; }

const char *dt_ps_client_name(const dt_ps_client *c, int ps_index) { return c->names[ps_index]; }

int dt_ps_client_num_ps(const dt_ps_client *c) { return c->num_ps; }

int dt_ps_client_new(const dt_ps_client_params *params, const dt_tensors *layout,
                     dt_ps_client **out, dt_err *err) {
    *out = NULL;
    const dt_cluster *cl = params->cluster;
    if (cl->num_ps < 1 || cl->num_ps > DT_MAX_PS)
        return dt_err_set(err, DT_EINVAL, "ps client: %d ps tasks (1..%d)", cl->num_ps, DT_MAX_PS);
    dt_ps_client *c = calloc(1, sizeof *c);
    if (!c) return dt_err_set(err, DT_ENOMEM, "ps client: out of memory");
    c->params = *params;
    c->num_ps = cl->num_ps;
    c->num_vars = layout->count;
    size_t np = (size_t)c->num_ps, nv = (size_t)(c->num_vars ? c->num_vars : 1);
    c->channels = calloc(np, sizeof *c->channels);
    c->names = calloc(np, sizeof *c->names);
    c->incarnation = calloc(np, sizeof *c->incarnation);
    c->place = calloc(nv, sizeof *c->place);
    c->count_on = calloc(np, sizeof *c->count_on);
    c->views = calloc(nv, sizeof *c->views);
    c->sorted = calloc(nv, sizeof *c->sorted);
    c->first_on = calloc(np, sizeof *c->first_on);
    c->calls = calloc(np, sizeof *c->calls);
    c->requests = calloc(np, sizeof *c->requests);
    int rc = 0;
    if (!c->channels || !c->names || !c->incarnation || !c->place || !c->count_on || !c->views ||
        !c->sorted || !c->first_on || !c->calls || !c->requests) {
        rc = dt_err_set(err, DT_ENOMEM, "ps client: out of memory");
        goto fail;
    }
    for (int p = 0; p < c->num_ps; p++) {
        snprintf(c->names[p], sizeof c->names[p], "ps:%d %.60s", p, cl->ps[p].addr);
        if ((rc = dt_rpc_channel_new(cl->ps[p].addr, &c->channels[p], err)) < 0) goto fail;
    }
    place_greedy(c, layout);
    /* Group the variables by ps, keeping the layout order inside a group. */
    int k = 0;
    for (int p = 0; p < c->num_ps; p++) {
        c->first_on[p] = k;
        for (int i = 0; i < c->num_vars; i++)
            if (c->place[i] == p) {
                c->sorted[k++] = layout->items[i];
                c->count_on[p]++;
            }
    }
    *out = c;
    return 0;
fail:
    dt_ps_client_free(c);
    return rc;
}

void dt_ps_client_free(dt_ps_client *c) {
    if (!c) return;
    for (int p = 0; p < c->num_ps; p++) {
        if (c->channels) dt_rpc_channel_free(c->channels[p]);
        if (c->requests) dt_rpc_buf_release(&c->requests[p]);
    }
    free(c->channels);
    free(c->names);
    free(c->incarnation);
    free(c->place);
    free(c->count_on);
    free(c->views);
    free(c->sorted);
    free(c->first_on);
    free(c->calls);
    free(c->requests);
    free(c);
}

/* ---- calls ------------------------------------------------------------- */

/* Encodes msg for ps p into c->requests[p] and prepares c->calls[p]. */
static int prepare(dt_ps_client *c, int p, dt_msg_type type, const void *msg, int wait_for_ready,
                   dt_err *err) {
    dt_rpc_buf_release(&c->requests[p]);
    int64_t size = dt_codec_size(type, msg, err);
    if (size < 0) return (int)size;
    int rc = dt_rpc_buf_alloc(&c->requests[p], (size_t)size, err);
    if (rc < 0) return rc;
    if ((rc = dt_codec_encode(type, msg, c->requests[p].data, c->requests[p].len, err)) < 0)
        return rc;
    dt_rpc_call *call = &c->calls[p];
    memset(call, 0, sizeof *call);
    call->channel = c->channels[p];
    call->method = dt_codec_method(type);
    call->request = &c->requests[p];
    call->wait_for_ready = wait_for_ready;
    return 0;
}

/* Runs calls [first, first+n) and releases their requests. */
static int run(dt_ps_client *c, int first, int n, dt_err *err) {
    int rc = dt_rpc_call_all(&c->calls[first], n, c->params.timeout_ms, err);
    for (int p = first; p < first + n; p++) dt_rpc_buf_release(&c->requests[p]);
    return rc;
}

static void release_responses(dt_ps_client *c) {
    for (int p = 0; p < c->num_ps; p++) dt_rpc_buf_release(&c->calls[p].response);
}

/* Records ps p's incarnation; a change means it restarted since last seen. */
static int note_incarnation(dt_ps_client *c, int p, uint64_t incarnation, dt_err *err) {
    uint64_t before = c->incarnation[p];
    c->incarnation[p] = incarnation;
    if (before != 0 && before != incarnation)
        return dt_err_set(err, DT_EUNAVAILABLE, "%s: restarted (incarnation %016llx, was %016llx)",
                          c->names[p], (unsigned long long)incarnation,
                          (unsigned long long)before);
    return 0;
}

int dt_ps_client_status(dt_ps_client *c, int p, dt_msg_status_resp *out, dt_err *err) {
    dt_msg_status_req req = {c->params.worker};
    int rc = prepare(c, p, DT_MSG_STATUS_REQ, &req, 0, err);
    if (rc < 0) return rc;
    if ((rc = run(c, p, 1, err)) == 0) {
        memset(out, 0, sizeof *out);
        rc = dt_codec_decode(DT_MSG_STATUS_RESP, c->calls[p].response.data,
                             c->calls[p].response.len, out, err);
        if (rc < 0) dt_err_wrap(err, rc, "%s: status", c->names[p]);
    }
    dt_rpc_buf_release(&c->calls[p].response);
    return rc;
}

int dt_ps_client_create(dt_ps_client *c, const dt_tensors *vars, int64_t global_step,
                        const dt_optim_config *optim, int64_t max_steps, const char *model,
                        const int *only, dt_err *err) {
    if (vars->count != c->num_vars)
        return dt_err_set(err, DT_EINVAL, "ps client: create: %d variables, expected %d",
                          vars->count, c->num_vars);
    /* Group the values like the placement (same order as c->sorted). */
    dt_tensor *grouped = c->views;
    int k = 0;
    for (int p = 0; p < c->num_ps; p++)
        for (int i = 0; i < c->num_vars; i++)
            if (c->place[i] == p) grouped[k++] = vars->items[i];
    /* Create is rare (start, ps restart): one ps at a time keeps it simple. */
    for (int p = 0; p < c->num_ps; p++) {
        if (only && !only[p]) continue;
        dt_msg_create_req req;
        memset(&req, 0, sizeof req);
        req.out.items = &grouped[c->first_on[p]];
        req.out.count = c->count_on[p];
        req.global_step = global_step;
        req.max_steps = max_steps;
        req.optim = *optim;
        snprintf(req.model, sizeof req.model, "%s", model);
        int rc = prepare(c, p, DT_MSG_CREATE_REQ, &req, 1, err);
        if (rc == 0) rc = run(c, p, 1, err);
        if (rc == 0) {
            dt_msg_create_resp resp;
            memset(&resp, 0, sizeof resp);
            rc = dt_codec_decode(DT_MSG_CREATE_RESP, c->calls[p].response.data,
                                 c->calls[p].response.len, &resp, err);
            if (rc == 0) c->incarnation[p] = resp.incarnation;
        }
        dt_rpc_buf_release(&c->calls[p].response);
        if (rc < 0) return rc;
    }
    return 0;
}

/* Checks a pulled view against the expected variable and copies it. */
static int take_variable(dt_ps_client *c, int p, const dt_tensor *got, dt_tensors *vars,
                         dt_err *err) {
    dt_tensor *dst = dt_tensors_find(vars, got->name);
    if (!dst || c->place[dst - vars->items] != p)
        return dt_err_set(err, DT_EINVAL, "%s: pull: unexpected variable %s", c->names[p],
                          got->name);
    if (dst->dtype != got->dtype || dst->ndim != got->ndim || dst->nbytes != got->nbytes ||
        memcmp(dst->shape, got->shape, sizeof(int64_t) * (size_t)dst->ndim) != 0)
        return dt_err_set(err, DT_EINVAL, "%s: pull: variable %s has another dtype or shape "
                                          "than this model's (was the ps created by another job?)",
                          c->names[p], got->name);
    memcpy(dst->data, got->data, got->nbytes);
    return 0;
}

int dt_ps_client_pull(dt_ps_client *c, dt_tensors *vars, int64_t *global_step, int *done,
                      dt_err *err) {
    int rc = 0;
    for (int p = 0; p < c->num_ps; p++) {
        dt_msg_pull_req req;
        memset(&req, 0, sizeof req);
        req.worker = c->params.worker;
        if ((rc = prepare(c, p, DT_MSG_PULL_REQ, &req, 0, err)) < 0) return rc;
    }
    if ((rc = run(c, 0, c->num_ps, err)) < 0) goto out;
    *done = 0;
    for (int p = 0; p < c->num_ps; p++) {
        dt_msg_pull_resp resp;
        memset(&resp, 0, sizeof resp);
        resp.in.items = c->views;
        resp.in.cap = c->num_vars;
        if ((rc = dt_codec_decode(DT_MSG_PULL_RESP, c->calls[p].response.data,
                                  c->calls[p].response.len, &resp, err)) < 0) {
            dt_err_wrap(err, rc, "%s: pull", c->names[p]);
            goto out;
        }
        if ((rc = note_incarnation(c, p, resp.incarnation, err)) < 0) goto out;
        if (resp.in.count != c->count_on[p]) {
            rc = dt_err_set(err, DT_EINVAL, "%s: pull: %d variables, expected %d", c->names[p],
                            resp.in.count, c->count_on[p]);
            goto out;
        }
        for (int i = 0; i < resp.in.count; i++)
            if ((rc = take_variable(c, p, &resp.in.items[i], vars, err)) < 0) goto out;
        if (p == 0) *global_step = resp.global_step;
        *done |= resp.done;
    }
out:
    release_responses(c);
    return rc;
}

int dt_ps_client_push(dt_ps_client *c, const dt_tensors *grads, int64_t step,
                      int64_t *global_step, int *done, dt_err *err) {
    if (grads->count != c->num_vars)
        return dt_err_set(err, DT_EINVAL, "ps client: push: %d gradients, expected %d",
                          grads->count, c->num_vars);
    dt_tensor *grouped = c->views;
    int k = 0;
    for (int p = 0; p < c->num_ps; p++)
        for (int i = 0; i < c->num_vars; i++)
            if (c->place[i] == p) grouped[k++] = grads->items[i];
    int rc = 0;
    for (int p = 0; p < c->num_ps; p++) {
        dt_msg_push_req req;
        memset(&req, 0, sizeof req);
        req.worker = c->params.worker;
        req.step = step;
        req.out.items = &grouped[c->first_on[p]];
        req.out.count = c->count_on[p];
        if ((rc = prepare(c, p, DT_MSG_PUSH_REQ, &req, 0, err)) < 0) return rc;
    }
    if ((rc = run(c, 0, c->num_ps, err)) < 0) goto out;
    *done = 0;
    for (int p = 0; p < c->num_ps; p++) {
        dt_msg_push_resp resp;
        memset(&resp, 0, sizeof resp);
        if ((rc = dt_codec_decode(DT_MSG_PUSH_RESP, c->calls[p].response.data,
                                  c->calls[p].response.len, &resp, err)) < 0)
            goto out;
        if ((rc = note_incarnation(c, p, resp.incarnation, err)) < 0) goto out;
        if (p == 0) *global_step = resp.global_step;
        *done |= resp.done;
    }
out:
    release_responses(c);
    return rc;
}

int dt_ps_client_shutdown(dt_ps_client *c, const char *reason, dt_err *err) {
    int rc = 0;
    for (int p = 0; p < c->num_ps; p++) {
        dt_msg_shutdown_req req;
        memset(&req, 0, sizeof req);
        snprintf(req.reason, sizeof req.reason, "%s", reason);
        if ((rc = prepare(c, p, DT_MSG_SHUTDOWN_REQ, &req, 0, err)) < 0) return rc;
    }
    rc = run(c, 0, c->num_ps, err);
    release_responses(c);
    return rc;
}
