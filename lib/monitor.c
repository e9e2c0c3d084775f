/*
 * monitor: one batch of unary calls (rpc_client) per question, decoded by
 * the codec; the summary is plain arithmetic over the replies.
 */
#include "monitor.h"

#include <cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "log.h"
#include "rpc_client.h"

/* ---- requests --------------------------------------------------------- */

/* An encoded request in a new buffer. */
static int encode_request(dt_msg_type type, const void *msg, dt_rpc_buf *buf, dt_err *err) {
    int64_t size = dt_codec_size(type, msg, err);
    if (size < 0) return (int)size;
    int rc = dt_rpc_buf_alloc(buf, (size_t)size, err);
    if (rc == 0) rc = dt_codec_encode(type, msg, buf->data, buf->len, err);
    if (rc < 0) dt_rpc_buf_release(buf);
    return rc;
}

/* A channel to addr as a tool: operators' calls claim that identity. */
static int tool_channel(const char *addr, const dt_rpc_security *sec, dt_rpc_channel **ch,
                        dt_err *err) {
    if (!sec) return dt_rpc_channel_new(addr, ch, err);
    dt_rpc_security tool = *sec;
    if (!tool.identity) tool.identity = "tool";
    return dt_rpc_channel_new_secure(addr, &tool, ch, err);
}

const char *dt_health_status_name(dt_health_status s) {
    static const char *const names[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
    return (unsigned)s < 4 ? names[s] : "UNKNOWN";
}

int dt_health_check(const char *addr, const char *service, const dt_rpc_security *sec,
                    int timeout_ms, dt_health_status *status, dt_err *err) {
    dt_msg_health_req req;
    memset(&req, 0, sizeof req);
    if (service && strlen(service) >= sizeof req.service)
        return dt_err_set(err, DT_EINVAL, "health: service name longer than %zu bytes",
                          sizeof req.service - 1);
    snprintf(req.service, sizeof req.service, "%s", service ? service : "");
    dt_rpc_channel *ch = NULL;
    dt_rpc_buf request = {0};
    int rc = tool_channel(addr, sec, &ch, err);
    if (rc == 0) rc = encode_request(DT_MSG_HEALTH_REQ, &req, &request, err);
    if (rc == 0) {
        dt_rpc_call call = {.channel = ch, .method = DT_METHOD_HEALTH_CHECK, .request = &request};
        dt_err_clear(&call.err);
        rc = dt_rpc_call_all(&call, 1, timeout_ms, err);
        dt_msg_health_resp resp = {0};
        if (rc == 0)
            rc = dt_codec_decode(DT_MSG_HEALTH_RESP, call.response.data, call.response.len, &resp,
                                 err);
        if (rc == 0) *status = (dt_health_status)resp.status;
        dt_rpc_buf_release(&call.response);
    }
    dt_rpc_buf_release(&request);
    dt_rpc_channel_free(ch);
    return rc;
}

/* ---- the job's status -------------------------------------------------- */

const char *dt_job_state_name(dt_job_state s) {
    static const char *const names[] = {"unreachable", "waiting for chief", "training", "done",
                                        "failed"};
    return (unsigned)s < 5 ? names[s] : "unknown";
}

void dt_job_status_deinit(dt_job_status *st) {
    if (!st) return;
    free(st->ps);
    free(st->workers);
    memset(st, 0, sizeof *st);
}

/* Merges ps p's view of the training tasks into st->workers (indexed by task). */
static void merge_workers(dt_job_status *st, const dt_msg_status_resp *r, dt_worker_seen *all) {
    for (int i = 0; i < r->num_workers; i++) {
        const dt_worker_activity *a = &r->workers[i];
        if (a->worker < 0 || a->worker >= st->num_workers) continue; /* not this cluster's */
        dt_worker_seen *w = &all[a->worker];
        if (a->pushes > w->pushes) w->pushes = a->pushes;
        if (a->last_push_ms >= 0 && (w->last_push_ms < 0 || a->last_push_ms < w->last_push_ms))
            w->last_push_ms = a->last_push_ms;
        if (a->failure[0] && !w->failure[0])
            snprintf(w->failure, sizeof w->failure, "%s", a->failure);
        if (a->last_seen_ms >= 0 && (w->last_seen_ms < 0 || a->last_seen_ms < w->last_seen_ms))
            w->last_seen_ms = a->last_seen_ms;
        w->passes_done |= a->passes_done;
    }
}

/* The job-wide figures from the replies that came. */
static void summarize(dt_job_status *st, dt_worker_seen *all) {
    int ready = 0, done = 0;
    long long stale_sum = 0, stale_n = 0;
    for (int p = 0; p < st->num_ps; p++) {
        if (!st->ps[p].answered) continue;
        const dt_msg_status_resp *r = &st->ps[p].resp;
        ready |= r->ready;
        done |= r->done;
        if (r->failure[0] && !st->failure[0])
            snprintf(st->failure, sizeof st->failure, "%s", r->failure);
        if (r->global_step > st->global_step) st->global_step = r->global_step;
        if (r->max_steps > st->max_steps) st->max_steps = r->max_steps;
        if (r->steps_per_sec > st->steps_per_sec) st->steps_per_sec = r->steps_per_sec;
        st->applied += r->pushes_applied;
        st->rejected += r->pushes_rejected;
        st->dropped += r->pushes_dropped;
        st->nonfinite += r->pushes_nonfinite;
        st->updates_nonfinite += r->updates_nonfinite;
        st->refused += r->calls_refused;
        for (int b = 0; b < r->num_staleness_counts; b++) {
            stale_sum += (long long)b * r->staleness_counts[b];
            stale_n += r->staleness_counts[b];
        }
        merge_workers(st, r, all);
    }
    st->state = !st->num_answered ? DT_JOB_UNREACHABLE
                : st->failure[0]  ? DT_JOB_FAILED
                : done            ? DT_JOB_DONE
                : ready           ? DT_JOB_TRAINING
                                  : DT_JOB_WAITING;
    st->mean_staleness = stale_n ? (double)stale_sum / (double)stale_n : -1;
    st->eta_secs = -1;
    if (st->state == DT_JOB_TRAINING && st->steps_per_sec > 0 && st->max_steps > st->global_step)
        st->eta_secs = (double)(st->max_steps - st->global_step) / st->steps_per_sec;
    else if (st->state == DT_JOB_DONE)
        st->eta_secs = 0;
    for (int w = 0; w < st->num_workers; w++)
        if (all[w].pushes > 0 || all[w].failure[0] || all[w].last_seen_ms >= 0)
            st->workers[st->num_seen++] = all[w];
}

/* Sends Status to every ps at once; fills st->ps. */
static int ask_all(const dt_cluster *c, const dt_rpc_security *sec, int timeout_ms,
                   dt_job_status *st, dt_err *err) {
    int n = c->num_ps, rc = 0;
    dt_rpc_channel **ch = dt_calloc((size_t)n, sizeof *ch);
    dt_rpc_call *calls = dt_calloc((size_t)n, sizeof *calls);
    dt_rpc_buf request = {0};
    dt_msg_status_req req = {.worker = -1};
    if (!ch || !calls) rc = dt_err_set(err, DT_ENOMEM, "status: out of memory");
    if (rc == 0) rc = encode_request(DT_MSG_STATUS_REQ, &req, &request, err);
    for (int p = 0; rc == 0 && p < n; p++) {
        rc = tool_channel(c->ps[p].addr, sec, &ch[p], err);
        calls[p] = (dt_rpc_call){.channel = ch[p], .method = DT_METHOD_STATUS, .request = &request};
        dt_err_clear(&calls[p].err);
    }
    if (rc == 0) {
        dt_err ignored; /* each call's own err says what happened to it */
        dt_err_clear(&ignored);
        if (dt_rpc_call_all(calls, n, timeout_ms, &ignored) < 0)
            dt_log(DT_LOG_DEBUG, "status: %s", ignored.msg);
        for (int p = 0; p < n; p++) {
            dt_ps_status *s = &st->ps[p];
            s->err = calls[p].err;
            if (s->err.code == DT_OK &&
                dt_codec_decode(DT_MSG_STATUS_RESP, calls[p].response.data, calls[p].response.len,
                                &s->resp, &s->err) == 0) {
                s->answered = 1;
                st->num_answered++;
            }
            dt_rpc_buf_release(&calls[p].response);
        }
    }
    for (int p = 0; ch && p < n; p++)
        dt_rpc_channel_free(ch[p]);
    dt_rpc_buf_release(&request);
    free(ch);
    free(calls);
    return rc;
}

int dt_job_status_get(const dt_cluster *c, const dt_rpc_security *sec, int timeout_ms,
                      dt_job_status *st, dt_err *err) {
    memset(st, 0, sizeof *st);
    st->num_ps = c->num_ps;
    st->num_workers = c->num_workers;
    st->ps = dt_calloc((size_t)c->num_ps, sizeof *st->ps);
    st->workers = dt_calloc((size_t)c->num_workers, sizeof *st->workers);
    dt_worker_seen *all = dt_calloc((size_t)c->num_workers, sizeof *all);
    int rc = st->ps && st->workers && all ? 0 : dt_err_set(err, DT_ENOMEM, "status: out of memory");
    for (int w = 0; rc == 0 && w < c->num_workers; w++)
        all[w] = (dt_worker_seen){.worker = w, .pushes = 0, .last_push_ms = -1, .last_seen_ms = -1};
    if (rc == 0) rc = ask_all(c, sec, timeout_ms, st, err);
    if (rc == 0) summarize(st, all);
    free(all);
    if (rc < 0) dt_job_status_deinit(st);
    return rc;
}

/* ---- output ------------------------------------------------------------ */

typedef struct {
    char *buf;
    size_t cap, len;
} out_buf;

static void put(out_buf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_buf *o, const char *fmt, ...) {
    if (o->len + 1 >= o->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n > 0) o->len = o->len + (size_t)n < o->cap ? o->len + (size_t)n : o->cap - 1;
}

/* "12 s", "3 min 4 s", "2 h 5 min" */
static void put_duration(out_buf *o, double secs) {
    long long s = (long long)(secs + 0.5);
    if (s < 60)
        put(o, "%lld s", s);
    else if (s < 3600)
        put(o, "%lld min %lld s", s / 60, s % 60);
    else
        put(o, "%lld h %lld min", s / 3600, s / 60 % 60);
}

static void put_worker_name(out_buf *o, int w) {
    if (w == 0)
        put(o, "chief");
    else
        put(o, "worker %d", w);
}

size_t dt_job_status_text(const dt_job_status *st, const dt_cluster *c, char *buf, size_t cap) {
    out_buf o = {buf, cap, 0};
    if (cap) buf[0] = '\0';
    put(&o, "job: %s", dt_job_state_name(st->state));
    if (st->max_steps > 0)
        put(&o, ", global_step %lld of %lld (%.1f%%)", st->global_step, st->max_steps,
            100.0 * (double)st->global_step / (double)st->max_steps);
    if (st->state == DT_JOB_TRAINING) {
        put(&o, ", %.1f steps/s", st->steps_per_sec);
        if (st->eta_secs >= 0) {
            put(&o, ", ETA ");
            put_duration(&o, st->eta_secs);
        }
    }
    if (st->state == DT_JOB_FAILED) put(&o, "\nfailure: %s", st->failure);
    put(&o,
        "\npushes: %lld applied, %lld rejected, %lld dropped, %lld non-finite; %lld calls "
        "refused",
        st->applied, st->rejected, st->dropped, st->nonfinite, st->refused);
    if (st->mean_staleness >= 0) put(&o, "; mean staleness %.2f", st->mean_staleness);
    if (st->updates_nonfinite)
        put(&o,
            "\nupdates refused as not finite: %lld (lower learning_rate, or clip the "
            "gradients)",
            st->updates_nonfinite);
    put(&o, "\n");
    for (int p = 0; p < st->num_ps; p++) {
        const dt_ps_status *s = &st->ps[p];
        put(&o, "ps:%d %s: ", p, c->ps[p].addr);
        if (!s->answered) {
            put(&o, "unreachable (%s)\n", s->err.msg);
            continue;
        }
        const dt_msg_status_resp *r = &s->resp;
        put(&o, "%s, global_step %lld, %d variables, %lld bytes, %s, %lld applied, up ",
            r->failure[0] ? "failed"
            : r->done     ? "done"
            : r->ready    ? "training"
                          : "waiting for chief",
            (long long)r->global_step, r->num_variables, (long long)r->num_bytes,
            r->mode[0] ? r->mode : "no mode", (long long)r->pushes_applied);
        put_duration(&o, (double)r->uptime_ms / 1000.0);
        put(&o, "\n");
        for (int t = 0; t < r->num_tables; t++)
            put(&o, "  table %s: %lld rows held, %lld weights non-zero, %lld bytes\n",
                r->tables[t].name, (long long)r->tables[t].rows_held,
                (long long)r->tables[t].nonzero, (long long)r->tables[t].bytes);
    }
    put(&o, "workers seen: %d of %d\n", st->num_seen, st->num_workers);
    for (int i = 0; i < st->num_seen; i++) {
        const dt_worker_seen *w = &st->workers[i];
        put(&o, "  ");
        put_worker_name(&o, w->worker);
        if (w->failure[0]) {
            put(&o, ": failed: %s\n", w->failure);
            continue;
        }
        if (w->pushes > 0)
            put(&o, ": %lld pushes, the last %.1f s ago", w->pushes, (double)w->last_push_ms / 1e3);
        else
            put(&o, ": no pushes yet");
        if (w->last_seen_ms >= 0) put(&o, ", heard %.1f s ago", (double)w->last_seen_ms / 1e3);
        put(&o, "%s\n", w->passes_done ? ", its passes done" : "");
    }
    return o.len;
}

size_t dt_job_status_json(const dt_job_status *st, const dt_cluster *c, char *buf, size_t cap) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "state", dt_job_state_name(st->state));
    if (st->state == DT_JOB_FAILED)
        cJSON_AddStringToObject(root, "failure", st->failure);
    else
        cJSON_AddNullToObject(root, "failure");
    cJSON_AddNumberToObject(root, "global_step", (double)st->global_step);
    cJSON_AddNumberToObject(root, "max_steps", (double)st->max_steps);
    cJSON_AddNumberToObject(
        root, "percent",
        st->max_steps > 0 ? 100.0 * (double)st->global_step / (double)st->max_steps : 0);
    cJSON_AddNumberToObject(root, "steps_per_sec", st->steps_per_sec);
    if (st->eta_secs >= 0)
        cJSON_AddNumberToObject(root, "eta_secs", st->eta_secs);
    else
        cJSON_AddNullToObject(root, "eta_secs");
    cJSON_AddNumberToObject(root, "pushes_applied", (double)st->applied);
    cJSON_AddNumberToObject(root, "pushes_rejected", (double)st->rejected);
    cJSON_AddNumberToObject(root, "pushes_dropped", (double)st->dropped);
    cJSON_AddNumberToObject(root, "pushes_nonfinite", (double)st->nonfinite);
    cJSON_AddNumberToObject(root, "updates_nonfinite", (double)st->updates_nonfinite);
    cJSON_AddNumberToObject(root, "calls_refused", (double)st->refused);
    if (st->mean_staleness >= 0)
        cJSON_AddNumberToObject(root, "mean_staleness", st->mean_staleness);
    else
        cJSON_AddNullToObject(root, "mean_staleness");
    cJSON *ps = cJSON_AddArrayToObject(root, "ps");
    for (int p = 0; ps && p < st->num_ps; p++) {
        const dt_ps_status *s = &st->ps[p];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(ps, e);
        cJSON_AddStringToObject(e, "address", c->ps[p].addr);
        cJSON_AddBoolToObject(e, "reachable", s->answered);
        if (!s->answered) {
            cJSON_AddStringToObject(e, "error", s->err.msg);
            continue;
        }
        const dt_msg_status_resp *r = &s->resp;
        cJSON_AddBoolToObject(e, "ready", r->ready);
        cJSON_AddBoolToObject(e, "done", r->done);
        if (r->failure[0])
            cJSON_AddStringToObject(e, "failure", r->failure);
        else
            cJSON_AddNullToObject(e, "failure");
        cJSON_AddNumberToObject(e, "global_step", (double)r->global_step);
        cJSON_AddNumberToObject(e, "num_variables", r->num_variables);
        cJSON_AddNumberToObject(e, "num_bytes", (double)r->num_bytes);
        cJSON_AddStringToObject(e, "mode", r->mode);
        cJSON_AddNumberToObject(e, "pushes_applied", (double)r->pushes_applied);
        cJSON_AddNumberToObject(e, "steps_per_sec", r->steps_per_sec);
        cJSON_AddNumberToObject(e, "uptime_secs", (double)r->uptime_ms / 1000.0);
        cJSON *tables = cJSON_AddArrayToObject(e, "tables");
        for (int t = 0; tables && t < r->num_tables; t++) {
            cJSON *te = cJSON_CreateObject();
            cJSON_AddItemToArray(tables, te);
            cJSON_AddStringToObject(te, "name", r->tables[t].name);
            cJSON_AddNumberToObject(te, "rows_held", (double)r->tables[t].rows_held);
            cJSON_AddNumberToObject(te, "nonzero", (double)r->tables[t].nonzero);
            cJSON_AddNumberToObject(te, "bytes", (double)r->tables[t].bytes);
        }
    }
    cJSON *ws = cJSON_AddArrayToObject(root, "workers");
    for (int i = 0; ws && i < st->num_seen; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(ws, e);
        cJSON_AddNumberToObject(e, "task", st->workers[i].worker);
        cJSON_AddNumberToObject(e, "pushes", (double)st->workers[i].pushes);
        if (st->workers[i].last_push_ms >= 0)
            cJSON_AddNumberToObject(e, "last_push_secs", (double)st->workers[i].last_push_ms / 1e3);
        else
            cJSON_AddNullToObject(e, "last_push_secs");
        if (st->workers[i].failure[0])
            cJSON_AddStringToObject(e, "failure", st->workers[i].failure);
        else
            cJSON_AddNullToObject(e, "failure");
        if (st->workers[i].last_seen_ms >= 0)
            cJSON_AddNumberToObject(e, "last_seen_secs", (double)st->workers[i].last_seen_ms / 1e3);
        else
            cJSON_AddNullToObject(e, "last_seen_secs");
        cJSON_AddBoolToObject(e, "passes_done", st->workers[i].passes_done);
    }
    cJSON_AddNumberToObject(root, "num_workers", st->num_workers);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    size_t n = 0;
    if (text && cap) {
        n = strlen(text) < cap - 1 ? strlen(text) : cap - 1;
        memcpy(buf, text, n);
        buf[n] = '\0';
    } else if (cap) {
        buf[0] = '\0';
    }
    free(text);
    return n;
}
