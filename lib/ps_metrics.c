/*
 * ps_metrics: Status, called in process (dt_ps_call, as the identity
 * "tool"), turned into families. A scrape costs one Status: encoding and
 * decoding a few kB, about a tool's `dtrain status`.
 */
#include "ps_metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "codec.h"
#include "log.h"
#include "metrics.h"

/* Status's reply for ps into *st (heap: it is large); 0 or negative. */
static int read_status(dt_ps *ps, dt_msg_status_resp *st, dt_err *err) {
    dt_msg_status_req req;
    memset(&req, 0, sizeof req);
    req.worker = -1;
    dt_rpc_buf request = {0}, reply = {0};
    dt_rpc_peer peer = {.role = DT_PEER_TOOL, .task = -1, .name = "metrics"};
    int rc = dt_codec_encode_buf(DT_MSG_STATUS_REQ, &req, &request, err);
    if (rc == 0)
        rc = dt_ps_call(ps, dt_codec_method(DT_MSG_STATUS_REQ), &peer, &request, &reply, err);
    if (rc == 0) rc = dt_codec_decode_buf(DT_MSG_STATUS_RESP, &reply, st, err);
    dt_rpc_buf_release(&request);
    dt_rpc_buf_release(&reply);
    return rc;
}

static void one(dt_metrics_out *o, const char *name, const char *type, const char *help,
                double value) {
    dt_metrics_family(o, name, type, help);
    dt_metrics_sample(o, name, NULL, value);
}

/* Status's staleness counts (bucket i: staleness i, the last: that or
 * more) as a histogram with bounds 0, 1, ..., B-2; its sum counts the
 * last bucket at its floor. */
static void staleness(dt_metrics_out *o, const dt_msg_status_resp *st) {
    static double bounds[DT_STALENESS_BUCKETS];
    static const double picked[] = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, DT_STALENESS_BUCKETS - 2};
    dt_histogram h;
    memset(&h, 0, sizeof h);
    int nb = (int)(sizeof picked / sizeof picked[0]);
    for (int i = 0; i < nb; i++)
        bounds[i] = picked[i];
    h.bounds = bounds;
    h.num_bounds = nb;
    double sum = 0;
    for (int i = 0; i < st->num_staleness_counts && i < DT_STALENESS_BUCKETS; i++) {
        int b = 0;
        while (b < nb && (double)i > bounds[b])
            b++;
        atomic_store(&h.counts[b], atomic_load(&h.counts[b]) + (uint64_t)st->staleness_counts[i]);
        sum += (double)i * (double)st->staleness_counts[i];
    }
    uint64_t bits;
    memcpy(&bits, &sum, sizeof bits);
    atomic_store(&h.sum_bits, bits);
    dt_metrics_family(o, "dtrain_ps_staleness_steps", "histogram",
                      "Staleness of the gradients applied: global steps between the values a "
                      "gradient was computed from and its update.");
    dt_metrics_histogram(o, "dtrain_ps_staleness_steps", NULL, &h);
}

static void collect(void *ctx, dt_metrics_out *o) {
    dt_ps *ps = ctx;
    dt_msg_status_resp *st = dt_calloc(1, sizeof *st);
    dt_err err;
    dt_err_clear(&err);
    if (!st || read_status(ps, st, &err) < 0) {
        /* A family missing from one scrape is what Prometheus shows as a gap. */
        dt_log(DT_LOG_DEBUG, "metrics: ps status: %s", st ? err.msg : "out of memory");
        free(st);
        return;
    }
    dt_ps_counters c;
    dt_ps_counters_of(ps, &c);
    one(o, "dtrain_ps_global_step", "gauge", "The global step: updates applied.",
        (double)st->global_step);
    one(o, "dtrain_ps_max_steps", "gauge", "The step at which the job ends.",
        (double)st->max_steps);
    one(o, "dtrain_ps_ready", "gauge", "1 when the ps holds a model and serves pulls and pushes.",
        st->ready);
    one(o, "dtrain_ps_done", "gauge", "1 once the job is done.", st->done);
    one(o, "dtrain_ps_failed", "gauge", "1 once the chief said the job failed.",
        st->failure[0] != '\0');
    one(o, "dtrain_ps_steps_per_second", "gauge",
        "Global steps a second over the last 10 s, as Status says.", st->steps_per_sec);
    static const char *const push_names[4] = {"applied", "rejected", "dropped", "nonfinite"};
    const int64_t pushes[4] = {st->pushes_applied, st->pushes_rejected, st->pushes_dropped,
                               st->pushes_nonfinite};
    dt_metrics_family(o, "dtrain_ps_pushes_total", "counter",
                      "Pushes by outcome: applied, rejected (refused, state untouched), "
                      "dropped (stale in sync mode), nonfinite (skipped).");
    for (int i = 0; i < 4; i++) {
        char labels[64] = "";
        dt_metrics_sample(o, "dtrain_ps_pushes_total",
                          dt_metrics_label(labels, sizeof labels, "outcome", push_names[i]),
                          (double)pushes[i]);
    }
    one(o, "dtrain_ps_push_retries_total", "counter",
        "Retries of a push already taken: answered, not applied again.", (double)c.pushes_retried);
    one(o, "dtrain_ps_pulls_total", "counter", "Pull calls answered.", (double)c.pulls);
    one(o, "dtrain_ps_checkpoint_reads_total", "counter",
        "Pulls that read the optimizer slots too: a chief's checkpoint reading this ps.",
        (double)c.checkpoint_pulls);
    one(o, "dtrain_ps_refused_calls_total", "counter",
        "Calls refused, by the server (unauthenticated, not allowed) and by the handlers "
        "(a caller speaking for another task).",
        (double)st->calls_refused);
    one(o, "dtrain_ps_variables", "gauge", "Dense variables held.", st->num_variables);
    one(o, "dtrain_ps_variable_bytes", "gauge", "Bytes of the dense variables held.",
        (double)st->num_bytes);
    one(o, "dtrain_ps_slot_bytes", "gauge", "Bytes of their optimizer slots.",
        (double)c.slot_bytes);
    if (st->num_tables > 0) {
        static const char *const names[2] = {"dtrain_ps_table_rows", "dtrain_ps_table_bytes"};
        static const char *const helps[2] = {"Rows of a sparse table held on this ps.",
                                             "Bytes of a sparse table's rows held on this ps."};
        for (int k = 0; k < 2; k++) {
            dt_metrics_family(o, names[k], "gauge", helps[k]);
            for (int t = 0; t < st->num_tables; t++) {
                char labels[DT_METRICS_LABELS_MAX] = "";
                dt_metrics_label(labels, sizeof labels, "table", st->tables[t].name);
                dt_metrics_sample(o, names[k], labels,
                                  (double)(k ? st->tables[t].bytes : st->tables[t].rows_held));
            }
        }
    }
    if (st->num_workers > 0) {
        dt_metrics_family(o, "dtrain_ps_worker_pushes_total", "counter",
                          "Pushes this ps took from each training task.");
        for (int w = 0; w < st->num_workers; w++) {
            char labels[64] = "", text[16];
            snprintf(text, sizeof text, "%d", (int)st->workers[w].worker);
            dt_metrics_sample(o, "dtrain_ps_worker_pushes_total",
                              dt_metrics_label(labels, sizeof labels, "worker", text),
                              (double)st->workers[w].pushes);
        }
    }
    staleness(o, st);
    free(st);
}

int dt_ps_metrics_attach(dt_ps *ps, dt_err *err) {
    return dt_metrics_add(collect, ps, err);
}

void dt_ps_metrics_detach(dt_ps *ps) {
    if (ps) dt_metrics_remove(collect, ps);
}
