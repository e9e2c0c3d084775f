/*
 * rpc_server: gRPC core server, several poller threads on one completion queue.
 *
 * Why one queue: gRPC delivers every new call of a connection to the queue
 * that accepted the connection, so per-thread queues would serve all calls
 * of one worker on one thread, one at a time. With one shared queue any idle
 * thread takes the next event. Each call has at most one batch in flight, so
 * only one thread touches a call at a time.
 *
 * Each call is a small state machine driven by completion-queue events:
 *   REQUESTED (a new call arrived; re-arm, then read the request message)
 *   -> RECEIVED (run the handler, send metadata + reply + status)
 *   -> DONE (release everything).
 * Every poller keeps ARMED_PER_THREAD request calls armed, so new calls are
 * always accepted while others are being handled.
 *
 * Shutdown order (the gRPC core's contract): shutdown_and_notify -> wait for
 * the notification (cancel_all_calls after the grace period) -> wait for
 * handlers still running -> destroy the server -> shut down and drain the
 * queue -> join -> destroy the queue.
 */
#include "rpc_server.h"

#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "rpc_internal.h"

#define ARMED_PER_THREAD 4
#define MAX_THREADS 64

typedef enum { CALL_REQUESTED, CALL_RECEIVED, CALL_DONE } call_phase;

typedef struct poller poller;

typedef struct {
    call_phase phase;
    poller *owner;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array request_md;
    grpc_byte_buffer *request_payload;
    grpc_byte_buffer *reply_payload;
    grpc_slice status_details;
    int cancelled;
} call_state;

struct poller {
    dt_rpc_server *server;
    pthread_t thread;
    int started;
};

struct dt_rpc_server {
    grpc_server *grpc;
    grpc_completion_queue *cq; /* the one queue every poller takes from */
    dt_rpc_server_params params;
    char addr[300];
    int num_pollers;
    poller pollers[MAX_THREADS];
    int shutdown_tag; /* address used as the notify tag */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int shutdown_done;
    int shutting_down;
    int live_calls; /* call_states allocated and not yet freed, under mu */
};

static void call_free(call_state *cs) {
    dt_rpc_server *s = cs->owner->server;
    pthread_mutex_lock(&s->mu);
    s->live_calls--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (cs->request_payload) grpc_byte_buffer_destroy(cs->request_payload);
    if (cs->reply_payload) grpc_byte_buffer_destroy(cs->reply_payload);
    grpc_slice_unref(cs->status_details);
    grpc_metadata_array_destroy(&cs->request_md);
    grpc_call_details_destroy(&cs->details);
    if (cs->call) grpc_call_unref(cs->call);
    free(cs);
}

static void arm(poller *p) {
    call_state *cs = calloc(1, sizeof *cs);
    if (!cs) {
        dt_log(DT_LOG_ERROR, "rpc server %s: out of memory arming a call", p->server->addr);
        return;
    }
    cs->owner = p;
    pthread_mutex_lock(&p->server->mu);
    p->server->live_calls++;
    pthread_mutex_unlock(&p->server->mu);
    cs->phase = CALL_REQUESTED;
    cs->status_details = grpc_empty_slice();
    grpc_call_details_init(&cs->details);
    grpc_metadata_array_init(&cs->request_md);
    grpc_call_error e = grpc_server_request_call(p->server->grpc, &cs->call, &cs->details,
                                                 &cs->request_md, p->server->cq, p->server->cq, cs);
    if (e != GRPC_CALL_OK) call_free(cs); /* the server is shutting down */
}

static const dt_rpc_method *find_method(const dt_rpc_server *s, grpc_slice path) {
    for (int i = 0; i < s->params.num_methods; i++)
        if (grpc_slice_str_cmp(path, s->params.methods[i].path) == 0) return &s->params.methods[i];
    return NULL;
}

static void start_receive(call_state *cs) {
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &cs->request_payload;
    cs->phase = CALL_RECEIVED;
    if (grpc_call_start_batch(cs->call, &op, 1, cs, NULL) != GRPC_CALL_OK) {
        dt_log(DT_LOG_ERROR, "rpc server: cannot start receive batch");
        call_free(cs);
    }
}

/* Runs the handler and starts the reply batch. */
static void handle(call_state *cs) {
    dt_rpc_server *s = cs->owner->server;
    dt_err err;
    dt_err_clear(&err);
    dt_rpc_buf request = {0}, reply = {0};
    grpc_status_code status = GRPC_STATUS_OK;
    const dt_rpc_method *m = find_method(s, cs->details.method);
    if (!m) {
        char path[256];
        dt_rpc_slice_to_str(cs->details.method, path, sizeof path);
        dt_err_set(&err, DT_EPRECOND, "unknown method %s", path);
        status = GRPC_STATUS_UNIMPLEMENTED;
    } else if (dt_rpc_buf_from_byte_buffer(cs->request_payload, &request, &err) < 0) {
        status = dt_rpc_status_from_err(err.code);
    } else if (m->handler(s->params.ctx, &request, &reply, &err) < 0) {
        status = dt_rpc_status_from_err(err.code);
        dt_rpc_buf_release(&reply);
    }
    dt_rpc_buf_release(&request);

    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (status == GRPC_STATUS_OK) {
        cs->reply_payload = dt_rpc_buf_to_byte_buffer(&reply);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = cs->reply_payload;
    } else {
        cs->status_details = grpc_slice_from_copied_string(err.msg);
    }
    dt_rpc_buf_release(&reply); /* the byte buffer holds its own reference */
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = status;
    ops[n++].data.send_status_from_server.status_details =
        status == GRPC_STATUS_OK ? NULL : &cs->status_details;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &cs->cancelled;
    cs->phase = CALL_DONE;
    if (grpc_call_start_batch(cs->call, ops, n, cs, NULL) != GRPC_CALL_OK) {
        dt_log(DT_LOG_ERROR, "rpc server: cannot start reply batch");
        call_free(cs);
    }
}

static void on_event(call_state *cs, int success) {
    switch (cs->phase) {
    case CALL_REQUESTED:
        if (!success) { /* the server is shutting down; nothing to serve */
            call_free(cs);
            return;
        }
        arm(cs->owner);
        start_receive(cs);
        return;
    case CALL_RECEIVED:
        if (!success) {
            call_free(cs);
            return;
        }
        handle(cs);
        return;
    case CALL_DONE: call_free(cs); return;
    }
}

static void *poll_loop(void *arg) {
    poller *p = arg;
    dt_rpc_server *s = p->server;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type != GRPC_OP_COMPLETE) continue;
        if (ev.tag == &s->shutdown_tag) {
            pthread_mutex_lock(&s->mu);
            s->shutdown_done = 1;
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        on_event(ev.tag, ev.success);
    }
    return NULL;
}

/* Destroys the server, then shuts down the queue, joins the pollers (or,
 * when none started, drains the queue here) and frees everything. */
static void server_free(dt_rpc_server *s) {
    grpc_server_destroy(s->grpc);
    grpc_completion_queue *cq = s->cq;
    grpc_completion_queue_shutdown(cq);
    int any_started = 0;
    for (int i = 0; i < s->num_pollers; i++)
        if (s->pollers[i].started) {
            pthread_join(s->pollers[i].thread, NULL);
            any_started = 1;
        }
    if (!any_started)
        for (;;) {
            grpc_event ev =
                grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
            if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
            if (ev.type == GRPC_OP_COMPLETE && ev.tag != &s->shutdown_tag) call_free(ev.tag);
        }
    grpc_completion_queue_destroy(cq);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    dt_rpc_shutdown();
}

int dt_rpc_server_start(const dt_rpc_server_params *params, dt_rpc_server **out, dt_err *err) {
    *out = NULL;
    if (params->num_threads < 1 || params->num_threads > MAX_THREADS)
        return dt_err_set(err, DT_EINVAL, "rpc server: %d threads (1..%d)", params->num_threads,
                          MAX_THREADS);
    dt_rpc_server *s = calloc(1, sizeof *s);
    if (!s) return dt_err_set(err, DT_ENOMEM, "rpc server: out of memory");
    dt_rpc_init();
    int rc = 0;
    s->params = *params;
    snprintf(s->addr, sizeof s->addr, "%s", params->addr);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);

    /* No SO_REUSEPORT: a second process on the same address must fail to
     * bind, not silently share the port. No message size cap: tensors are
     * as large as the model. */
    grpc_arg args[3];
    memset(args, 0, sizeof args);
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = GRPC_ARG_ALLOW_REUSEPORT;
    args[0].value.integer = 0;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[1].value.integer = -1;
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[2].value.integer = -1;
    grpc_channel_args channel_args = {3, args};
    s->grpc = grpc_server_create(&channel_args, NULL);
    s->num_pollers = params->num_threads;
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->grpc, s->cq, NULL);
    for (int i = 0; i < s->num_pollers; i++)
        s->pollers[i].server = s;
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(s->grpc, params->addr, creds);
    grpc_server_credentials_release(creds);
    if (port == 0) {
        rc =
            dt_err_set(err, DT_EUNAVAILABLE,
                       "rpc server %s: cannot listen (address in use or not local?)", params->addr);
        goto fail_unstarted;
    }
    grpc_server_start(s->grpc);
    for (int i = 0; i < s->num_pollers; i++)
        for (int k = 0; k < ARMED_PER_THREAD; k++)
            arm(&s->pollers[i]);
    for (int i = 0; i < s->num_pollers; i++) {
        if (pthread_create(&s->pollers[i].thread, NULL, poll_loop, &s->pollers[i]) != 0) {
            dt_err_set(err, DT_EINTERNAL, "rpc server %s: cannot start thread", params->addr);
            dt_rpc_server_stop(s, 0);
            return DT_EINTERNAL;
        }
        s->pollers[i].started = 1;
    }
    *out = s;
    return 0;

fail_unstarted:
    grpc_server_shutdown_and_notify(s->grpc, s->cq, &s->shutdown_tag);
    server_free(s);
    return rc;
}

/* Waits for the shutdown notification until `deadline`; 1 when it came. */
static int wait_shutdown(dt_rpc_server *s, const struct timespec *deadline) {
    pthread_mutex_lock(&s->mu);
    while (!s->shutdown_done)
        if (pthread_cond_timedwait(&s->cv, &s->mu, deadline) != 0) break;
    int done = s->shutdown_done;
    pthread_mutex_unlock(&s->mu);
    return done;
}

void dt_rpc_server_stop(dt_rpc_server *s, int grace_ms) {
    if (!s) return;
    grpc_server_shutdown_and_notify(s->grpc, s->cq, &s->shutdown_tag);
    int all_started = 1;
    for (int i = 0; i < s->num_pollers; i++)
        all_started &= s->pollers[i].started;
    if (all_started) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += grace_ms / 1000;
        deadline.tv_nsec += (long)(grace_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
        if (!wait_shutdown(s, &deadline)) {
            grpc_server_cancel_all_calls(s->grpc);
            deadline.tv_sec += 5;
            wait_shutdown(s, &deadline);
        }
        /* A handler may still run after the notification (its client went
         * away): the queue must outlive it, or its reply batch asserts. */
        deadline.tv_sec += 5;
        pthread_mutex_lock(&s->mu);
        while (s->live_calls > 0)
            if (pthread_cond_timedwait(&s->cv, &s->mu, &deadline) != 0) break;
        if (s->live_calls > 0)
            dt_log(DT_LOG_WARN, "rpc server %s: %d calls still live at stop", s->addr,
                   s->live_calls);
        pthread_mutex_unlock(&s->mu);
    } else {
        grpc_server_cancel_all_calls(s->grpc);
    }
    server_free(s);
}
