/*
 * rpc_server: gRPC core server, several poller threads on one completion queue.
 *
 * Why one queue: gRPC delivers every new call of a connection to the queue
 * that accepted the connection, so per-thread queues would serve all calls
 * of one worker on one thread, one at a time. With one shared queue any idle
 * thread takes the next event. Each call has at most one batch in flight, so
 * only one thread touches a call at a time.
 *
 * Leader and followers: one poller at a time waits on the queue (the
 * leader); the others wait on lead_cv. gRPC wakes a thread waiting on the
 * queue for every event an operation completes outside the queue's own
 * polling, and a small call makes two such (its message read as the batch
 * starts, its reply written as it is sent): with every poller waiting on
 * the queue, each was a wake-up of another thread and the event's hand-off
 * to it (5.7 context switches a tiny push on the ps, against 3.3 with one
 * poller). The leader serves small requests itself and keeps the queue; a
 * request of LEAD_HANDOFF_BYTES or more (a gradient worth applying on a
 * thread of its own) first hands the queue to a follower, so large
 * requests are still handled on several threads at once. While handlers
 * run, one follower watches the clock (LEAD_WATCH_MS) and takes the queue over
 * from a leader still in one handler a tick later, so a handler that
 * blocks (one waiting for another call) holds up nothing else. And for
 * LEAD_WIDE_MS after a large request every poller waits on the queue again
 * (with one, the 10M-float pushes of two workers were read one after the
 * other: 10-15% fewer MB/s), then they step back to one.
 *
 * Each call is a small state machine driven by completion-queue events:
 *   REQUESTED (a new call arrived; re-arm, then read the request message)
 *   -> RECEIVED (run the handler, send metadata + reply + status)
 *   -> DONE (release everything).
 * Every poller keeps ARMED_PER_THREAD request calls armed, so new calls are
 * always accepted while others are being handled.
 *
 * Security (all optional): TLS through a certificate-config fetcher that gRPC
 * calls at every new handshake; it re-reads the certificate, key and CA
 * files when their mtime, size or inode changed or dt_rpc_reload_certs was
 * called, so rotated files serve new connections without a restart (open
 * connections keep the old ones). A file that fails to load keeps the last
 * good set. Callers are authenticated in handle(), before the handler:
 * identity from the client certificate (CN, else a SAN) and/or a bearer
 * token; then the cluster's bounds and the method's allowed roles. A
 * refusal is counted and logged (at most one line a second).
 *
 * Requests in flight (inflight_bytes): a new call's message is read only
 * while the requests read and not yet handled hold less than the bound;
 * otherwise the call waits in a queue (gRPC's flow control then keeps its
 * bytes with the client, bar one window) and is read when a handler lets
 * go of its request. The bound holds what many large pushes arriving at
 * once would otherwise keep in memory together.
 *
 * Resource limits (limits_to_args): a message cap, a handshake deadline,
 * an idle timeout, keepalive pings that also run without calls, a cap on
 * calls per connection, so no client can make the server buffer an
 * unbounded message or hold a connection that does nothing. No gRPC
 * resource quota: 1.51's wedged the whole server now and then after a
 * storm of large calls (no call served for a minute, on old connections or
 * new, our pollers idle), and inflight_bytes bounds the same buffers.
 *
 * Listening again (watch_listener): gRPC 1.51's listener stops for good
 * after one accept() fails (EMFILE: the process is out of descriptors). A
 * watchdog thread sees gRPC's log line for it, waits for free descriptors,
 * shuts that grpc_server down (it holds the port) and starts another on
 * the same address, queue and handlers: a server generation. Old
 * generations drain their calls and are destroyed once notified and empty.
 *
 * Shutdown order (the gRPC core's contract): shutdown_and_notify -> wait for
 * the notification (cancel_all_calls after the grace period) -> wait for
 * handlers still running -> destroy the server -> shut down and drain the
 * queue -> join -> destroy the queue.
 */
#include "rpc_server.h"

#include <errno.h>
#include <fcntl.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "auth.h"
#include "log.h"
#include "metrics.h"
#include "rpc_auth.h"
#include "rpc_internal.h"

#define ARMED_PER_THREAD 4
/* Requests this large are handled off the leader (see above). */
#define LEAD_HANDOFF_BYTES (16 * 1024)
/* A handler the leader runs for a whole tick of this many ms is left to
 * it, a follower leading in its place; the watching follower stops after
 * LEAD_IDLE_TICKS ticks without a handler (then the next handler asks for
 * a watcher again: one wake-up). */
#define LEAD_WATCH_MS 2
#define LEAD_IDLE_TICKS 50
/* After a large request every poller waits on the queue for this long:
 * large messages are read and sent by several threads, as before. */
#define LEAD_WIDE_MS 1000
#define MAX_THREADS 64

typedef enum { CALL_REQUESTED, CALL_RECEIVED, CALL_DONE } call_phase;

typedef struct poller poller;

/* One grpc_server on the address: the first, or one started in its place
 * after gRPC's listener gave up accepting (see watch_listener). */
typedef struct {
    grpc_server *grpc; /* NULL: slot free */
    char notify_tag;   /* its address is the shutdown notification's tag */
    int shut;          /* shutdown_and_notify called */
    int notified;      /* the notification came (under the server's mu) */
    int live_calls;    /* call_states armed on it and not yet freed (under mu) */
} server_gen;

#define MAX_GENS 4

typedef struct call_state {
    call_phase phase;
    poller *owner;
    server_gen *gen; /* the grpc_server it was requested on */
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array request_md;
    grpc_byte_buffer *request_payload;
    grpc_byte_buffer *reply_payload;
    grpc_slice status_details;
    int cancelled;
    int receiving;                   /* counted in the server's receiving */
    long long charged;               /* request bytes counted in the server's inflight */
    double arrived;                  /* dt_now_secs() when the call came, for its latency */
    char peer[80];                   /* gRPC's peer text: the connection it came on */
    int adm_ended;                   /* DT_ADM_ENDED noted (at the reply, or the free) */
    struct call_state *next_waiting; /* in the queue of calls waiting to be read */
} call_state;

/* A method's calls for /metrics (updated lock-free by the pollers). */
#define NUM_CODES 17 /* gRPC's status codes, OK to UNAUTHENTICATED */
typedef struct {
    dt_counter calls[NUM_CODES];
    dt_histogram latency; /* seconds from the call's arrival to its reply */
    dt_counter bytes_in, bytes_out;
} method_stats;

struct poller {
    dt_rpc_server *server;
    pthread_t thread;
    int started;
    clockid_t cpu_clock; /* its thread's CPU time (see busy_in_grpc) */
    int have_clock;
};

struct dt_rpc_server {
    server_gen gens[MAX_GENS];
    server_gen *current;            /* the one listening and taking new calls, under mu */
    grpc_completion_queue *cq;      /* the one queue every poller takes from */
    grpc_server_credentials *creds; /* kept to listen again */
    grpc_arg args[16];              /* the limits, kept to listen again */
    grpc_channel_args channel_args;
    dt_rpc_server_params params;
    char addr[300];
    int num_pollers;
    poller pollers[MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Leader and followers (see the top of the file), under mu: */
    pthread_cond_t lead_cv;    /* followers wait here for the queue */
    int leaders;               /* pollers leading: waiting on the queue or serving an event */
    long long wide_until_ms;   /* up to this (monotonic) every poller may lead */
    poller *in_handler;        /* the only leader, in a handler */
    poller *taken_from;        /* a leader a watcher took the queue over from */
    unsigned long handler_seq; /* handlers the only leader started */
    int want_watch;            /* a follower should watch the leader's handlers */
    int watching;              /* one does */
    int queue_done;            /* the queue said GRPC_QUEUE_SHUTDOWN */
    atomic_int num_leading;    /* leaders, as the pollers count themselves (read unlocked) */
    atomic_llong events;       /* events the pollers took from the queue */
    long long busy_cpu_ns;     /* the pollers' CPU time at the watchdog's last tick */
    long long busy_events;     /* events then */
    pthread_t watchdog;
    int watchdog_started;
    int stopping;                       /* tells the watchdog to end, under mu */
    int accept_failures;                /* dt_rpc_accept_failures() last acted on */
    int live_calls;                     /* call_states allocated and not yet freed, under mu */
    long long inflight;                 /* bytes of requests read and not yet handled, under mu */
    int receiving;                      /* calls whose request is being read, under mu */
    long long largest;                  /* the largest request read so far, under mu */
    call_state *waiting, *waiting_last; /* calls not yet read (inflight_bytes), under mu */
    int num_waiting;                    /* calls in that queue, under mu */
    int max_pending;                    /* bound on num_waiting */
    atomic_llong pending_dropped;       /* calls dropped over max_pending */
    dt_adm *adm;                        /* the connection guards */
    long long closed_seen;              /* connections they had closed at the last tick */
    long long trim_at_ms;               /* then: memory handed back to the system at this time */
    dt_rpc_auth *auth;                  /* who may call: TLS files, tokens (rpc_auth.h) */
    atomic_llong refused;
    dt_counter refused_unauthenticated, refused_denied; /* for /metrics, by reason */
    method_stats *stats;         /* (num_methods + 1) the last: unknown methods */
    atomic_llong refusal_log_ms; /* last refusal log line, monotonic ms */
    atomic_llong refusals_unlogged;
};

static void uncharge(call_state *cs);

/* Tells the guards the call is over for its peer (admission.h): at its
 * reply, whose completion a poller busy inside gRPC (parsing a flood on
 * the same connection) may take only much later. */
static void note_ended(call_state *cs) {
    if (cs->adm_ended || !cs->peer[0]) return;
    cs->adm_ended = 1;
    dt_adm_note(cs->owner->server->adm, cs->peer, DT_ADM_ENDED);
}

static void call_free(call_state *cs) {
    dt_rpc_server *s = cs->owner->server;
    note_ended(cs);
    uncharge(cs);
    pthread_mutex_lock(&s->mu);
    s->live_calls--;
    cs->gen->live_calls--;
    /* Only the last call of the server (dt_rpc_server_stop waits for it)
     * or of a generation being drained (the watchdog reaps it) is news to
     * a waiter; the watchdog's other work runs on its clock. Woken at
     * every call, the watchdog was a wake-up and two context switches per
     * call. */
    if (s->live_calls == 0 || cs->gen != s->current) pthread_cond_broadcast(&s->cv);
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
    call_state *cs = dt_calloc(1, sizeof *cs);
    if (!cs) {
        dt_log(DT_LOG_ERROR, "rpc server %s: out of memory arming a call", p->server->addr);
        return;
    }
    cs->owner = p;
    cs->phase = CALL_REQUESTED;
    cs->status_details = grpc_empty_slice();
    grpc_call_details_init(&cs->details);
    grpc_metadata_array_init(&cs->request_md);
    dt_rpc_server *s = p->server;
    /* Counted on its generation first, so that one is not destroyed while
     * the call is being requested on it. */
    pthread_mutex_lock(&s->mu);
    cs->gen = s->current;
    s->live_calls++;
    cs->gen->live_calls++;
    pthread_mutex_unlock(&s->mu);
    DT_RPC_TAG_RELEASE(cs);
    grpc_call_error e = grpc_server_request_call(cs->gen->grpc, &cs->call, &cs->details,
                                                 &cs->request_md, s->cq, s->cq, cs);
    if (e != GRPC_CALL_OK) call_free(cs); /* the server is shutting down */
}

static const dt_rpc_method *find_method(const dt_rpc_server *s, grpc_slice path) {
    for (int i = 0; i < s->params.num_methods; i++)
        if (grpc_slice_str_cmp(path, s->params.methods[i].path) == 0) return &s->params.methods[i];
    return NULL;
}

static void start_receive(call_state *cs) {
    cs->next_waiting = NULL;
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &cs->request_payload;
    cs->phase = CALL_RECEIVED;
    DT_RPC_TAG_RELEASE(cs);
    if (grpc_call_start_batch(cs->call, &op, 1, cs, NULL) != GRPC_CALL_OK) {
        dt_log(DT_LOG_ERROR, "rpc server: cannot start receive batch");
        call_free(cs);
    }
}

/* ---- requests in flight --------------------------------------------------- */

/* Whether one more request may be read now (under mu): nothing is in
 * flight, or the requests read and those being read (each counted as the
 * largest request seen so far, so none is read beside another before one
 * was seen) stay under the bound. */
static int fits(const dt_rpc_server *s) {
    if (s->inflight == 0 && s->receiving == 0) return 1;
    return s->largest > 0 &&
           s->inflight + (long long)(s->receiving + 1) * s->largest < s->params.inflight_bytes;
}

/* The waiting calls that may be read now, taken off the queue (at most
 * cap, each counted as being read); under mu. */
static int take_admitted(dt_rpc_server *s, call_state **out, int cap) {
    int n = 0;
    while (n < cap && s->waiting && fits(s)) {
        call_state *cs = s->waiting;
        s->waiting = cs->next_waiting;
        if (!s->waiting) s->waiting_last = NULL;
        s->num_waiting--;
        cs->receiving = 1;
        s->receiving++;
        out[n++] = cs;
    }
    return n;
}

/* Reads cs's request now, or queues it behind the others waiting. */
static void admit(call_state *cs) {
    dt_rpc_server *s = cs->owner->server;
    if (s->params.inflight_bytes > 0) {
        pthread_mutex_lock(&s->mu);
        if (s->waiting || !fits(s)) {
            if (s->num_waiting >= s->max_pending) {
                /* Past the bound a call costs the server its state only
                 * until now: dropped, never read. */
                pthread_mutex_unlock(&s->mu);
                atomic_fetch_add(&s->pending_dropped, 1);
                grpc_call_cancel_with_status(cs->call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                             "too many calls waiting at the server", NULL);
                call_free(cs);
                return;
            }
            s->num_waiting++;
            cs->next_waiting = NULL;
            if (s->waiting_last)
                s->waiting_last->next_waiting = cs;
            else
                s->waiting = cs;
            s->waiting_last = cs;
            pthread_mutex_unlock(&s->mu);
            return;
        }
        cs->receiving = 1;
        s->receiving++;
        pthread_mutex_unlock(&s->mu);
    }
    start_receive(cs);
}

/* Reads the waiting calls that fit now. */
static void admit_waiting(dt_rpc_server *s) {
    call_state *ready[16];
    int n;
    do {
        pthread_mutex_lock(&s->mu);
        n = take_admitted(s, ready, (int)(sizeof ready / sizeof ready[0]));
        pthread_mutex_unlock(&s->mu);
        for (int i = 0; i < n; i++)
            start_receive(ready[i]);
    } while (n == (int)(sizeof ready / sizeof ready[0]));
}

/* cs's request has been read (or its read ended without one): it counts
 * with its real size from now on. */
static void charge(call_state *cs) {
    dt_rpc_server *s = cs->owner->server;
    if (!cs->receiving) return;
    long long size =
        cs->request_payload ? (long long)grpc_byte_buffer_length(cs->request_payload) : 0;
    pthread_mutex_lock(&s->mu);
    cs->receiving = 0;
    s->receiving--;
    cs->charged = size;
    s->inflight += size;
    if (size > s->largest) s->largest = size;
    pthread_mutex_unlock(&s->mu);
    if (size == 0) admit_waiting(s);
}

/* cs's request was handled (or never will be): its bytes leave the count,
 * and the calls waiting that now fit are read. */
static void uncharge(call_state *cs) {
    dt_rpc_server *s = cs->owner->server;
    if (cs->receiving) charge(cs);
    if (cs->charged == 0) return;
    pthread_mutex_lock(&s->mu);
    s->inflight -= cs->charged;
    cs->charged = 0;
    pthread_mutex_unlock(&s->mu);
    admit_waiting(s);
}

/* At stop: every waiting call is read (and so ends, as the server shuts
 * down). */
static void admit_all(dt_rpc_server *s) {
    for (;;) {
        pthread_mutex_lock(&s->mu);
        call_state *cs = s->waiting;
        if (cs) {
            s->waiting = cs->next_waiting;
            if (!s->waiting) s->waiting_last = NULL;
            s->num_waiting--;
            cs->receiving = 1;
            s->receiving++;
        }
        pthread_mutex_unlock(&s->mu);
        if (!cs) return;
        start_receive(cs);
    }
}

/* ---- authentication ---------------------------------------------------- */

/* Counts a refusal and logs it, one line a second at most. */
static void note_refusal(dt_rpc_server *s, grpc_status_code status, const char *msg) {
    atomic_fetch_add(&s->refused, 1);
    dt_counter_add(status == GRPC_STATUS_UNAUTHENTICATED ? &s->refused_unauthenticated
                                                         : &s->refused_denied,
                   1);
    long long now = dt_now_ms();
    long long last = atomic_load(&s->refusal_log_ms);
    if (last != 0 && now - last < 1000) {
        atomic_fetch_add(&s->refusals_unlogged, 1);
        return;
    }
    if (!atomic_compare_exchange_strong(&s->refusal_log_ms, &last, now)) {
        atomic_fetch_add(&s->refusals_unlogged, 1);
        return;
    }
    long long unlogged = atomic_exchange(&s->refusals_unlogged, 0);
    const long long refused = atomic_load(&s->refused);
    const dt_log_field f[] = {DT_LOG_STR("code", dt_rpc_status_name(status)),
                              DT_LOG_STR("reason", msg), DT_LOG_INT("refused_total", refused),
                              DT_LOG_INT("not_logged", unlogged)};
    dt_log_kv(DT_LOG_WARN, f, 4,
              "rpc server %s: refused a call: %s: %s (%lld refused in all, %lld not logged)",
              s->addr, dt_rpc_status_name(status), msg, refused, unlogged);
}

int dt_rpc_server_waiting(dt_rpc_server *s, long long *inflight) {
    pthread_mutex_lock(&s->mu);
    int n = 0;
    for (const call_state *cs = s->waiting; cs; cs = cs->next_waiting)
        n++;
    if (inflight) *inflight = s->inflight;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void dt_rpc_server_guard_stats(dt_rpc_server *s, dt_adm_stats *out) {
    dt_adm_get_stats(s->adm, out);
    out->calls_dropped += atomic_load(&s->pending_dropped);
}

long long dt_rpc_server_refused(const dt_rpc_server *s) {
    return atomic_load(&s->refused);
}

/* The request as the handlers read it: in place, in pieces (the byte
 * buffer moves into *request), or in one run. */
static int take_request(call_state *cs, dt_rpc_buf *request, dt_err *err) {
    if (!cs->owner->server->params.in_pieces)
        return dt_rpc_buf_from_byte_buffer(cs->request_payload, request, err);
    grpc_byte_buffer *bb = cs->request_payload;
    cs->request_payload = NULL;
    return dt_rpc_buf_from_byte_buffer_pieces(bb, request, err);
}

/* Runs the handler and starts the reply batch. */
static void handle(call_state *cs) {
    dt_rpc_server *s = cs->owner->server;
    dt_err err;
    dt_err_clear(&err);
    dt_rpc_buf request = {0}, reply = {0};
    dt_rpc_peer peer;
    const dt_rpc_method *m = find_method(s, cs->details.method);
    method_stats *ms = &s->stats[m ? m - s->params.methods : s->params.num_methods];
    if (cs->request_payload)
        dt_counter_add(&ms->bytes_in, grpc_byte_buffer_length(cs->request_payload));
    grpc_status_code status =
        dt_rpc_auth_check(s->auth, cs->call, &cs->request_md, m && m->open, &peer, &err);
    if (status == GRPC_STATUS_OK && m && !dt_rpc_method_allows(m, &peer)) {
        dt_err_set(&err, DT_EPERM, "permission denied: %s may not call %s", peer.name, m->path);
        status = GRPC_STATUS_PERMISSION_DENIED;
    }
    if (status != GRPC_STATUS_OK) {
        note_refusal(s, status, err.msg);
        dt_adm_note(s->adm, cs->peer, DT_ADM_REFUSED);
    } else if (!m) {
        char path[256];
        dt_rpc_slice_to_str(cs->details.method, path, sizeof path);
        dt_err_set(&err, DT_EPRECOND, "unknown method %s", path);
        status = GRPC_STATUS_UNIMPLEMENTED;
        dt_adm_note(s->adm, cs->peer, DT_ADM_REFUSED);
    } else if (take_request(cs, &request, &err) < 0) {
        status = dt_rpc_status_from_err(err.code);
        dt_adm_note(s->adm, cs->peer, DT_ADM_REFUSED);
    } else {
        dt_adm_note(s->adm, cs->peer, DT_ADM_HANDLED);
        if (m->handler(s->params.ctx, &peer, &request, &reply, &err) < 0) {
            status = dt_rpc_status_from_err(err.code);
            dt_rpc_buf_release(&reply);
        }
    }
    /* The request's bytes are not needed once handled: freed now, not
     * after the reply is sent. */
    dt_rpc_buf_release(&request);
    if (cs->request_payload) {
        grpc_byte_buffer_destroy(cs->request_payload);
        cs->request_payload = NULL;
    }
    uncharge(cs);

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
    if (cs->reply_payload)
        dt_counter_add(&ms->bytes_out, grpc_byte_buffer_length(cs->reply_payload));
    dt_counter_add(&ms->calls[(unsigned)status < NUM_CODES ? status : GRPC_STATUS_UNKNOWN], 1);
    dt_histogram_observe(&ms->latency, dt_now_secs() - cs->arrived);
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = status;
    ops[n++].data.send_status_from_server.status_details =
        status == GRPC_STATUS_OK ? NULL : &cs->status_details;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &cs->cancelled;
    cs->phase = CALL_DONE;
    note_ended(cs); /* the client has sent all of it */
    DT_RPC_TAG_RELEASE(cs);
    if (grpc_call_start_batch(cs->call, ops, n, cs, NULL) != GRPC_CALL_OK) {
        dt_log(DT_LOG_ERROR, "rpc server: cannot start reply batch");
        call_free(cs);
    }
}

/* The bytes of a call's request headers (names and values); dtrain's own
 * clients send a token and an identity, well under a kilobyte. */
static size_t request_md_bytes(const call_state *cs) {
    size_t n = 0;
    for (size_t i = 0; i < cs->request_md.count; i++)
        n += GRPC_SLICE_LENGTH(cs->request_md.metadata[i].key) +
             GRPC_SLICE_LENGTH(cs->request_md.metadata[i].value);
    return n;
}

/* Refuses, before anything else is done with it, a call whose headers are
 * over DT_RPC_MAX_REQUEST_MD_BYTES. Over TLS gRPC 1.51 hands such a call
 * over with every header it parsed (1 MB a call in a header-block flood),
 * and one that never sends its message held them until its connection
 * ended: hundreds of megabytes. Counted as refused, so the guards close
 * such a connection at once. 1 when refused. */
static int refuse_big_headers(call_state *cs) {
    const size_t bytes = request_md_bytes(cs);
    if (bytes <= DT_RPC_MAX_REQUEST_MD_BYTES) return 0;
    dt_rpc_server *s = cs->owner->server;
    char msg[128];
    snprintf(msg, sizeof msg, "request headers of %zu bytes, over the %d this server takes", bytes,
             DT_RPC_MAX_REQUEST_MD_BYTES);
    note_refusal(s, GRPC_STATUS_RESOURCE_EXHAUSTED, msg);
    if (cs->peer[0]) dt_adm_note(s->adm, cs->peer, DT_ADM_REFUSED);
    grpc_call_cancel_with_status(cs->call, GRPC_STATUS_RESOURCE_EXHAUSTED, msg, NULL);
    call_free(cs);
    return 1;
}

/* Notes a new call on its connection; 1 when it is to be dropped (its
 * connection is being closed, see admission.h). */
static int note_started(call_state *cs) {
    dt_rpc_server *s = cs->owner->server;
    if (!s->adm) return 0;
    char *peer = grpc_call_get_peer(cs->call);
    if (peer) {
        snprintf(cs->peer, sizeof cs->peer, "%s", peer);
        gpr_free(peer);
    }
    return dt_adm_note(s->adm, cs->peer, DT_ADM_STARTED);
}

static void on_event(call_state *cs, int success) {
    switch (cs->phase) {
    case CALL_REQUESTED:
        if (!success) { /* the server is shutting down; nothing to serve */
            call_free(cs);
            return;
        }
        cs->arrived = dt_now_secs();
        arm(cs->owner);
        if (note_started(cs)) {
            call_free(cs); /* unreferenced before any batch: gRPC cancels it */
            return;
        }
        if (refuse_big_headers(cs)) return;
        admit(cs);
        return;
    case CALL_RECEIVED:
        /* No message: the stream was reset or half-closed before its
         * request (every unary client sends one, an empty message too). */
        if (!success || !cs->request_payload) {
            dt_adm_note(cs->owner->server->adm, cs->peer, DT_ADM_ABORTED);
            call_free(cs);
            return;
        }
        charge(cs);
        handle(cs);
        return;
    case CALL_DONE: call_free(cs); return;
    }
}

/* The generation whose shutdown notification tag is `tag`, else NULL (the
 * tag is a call). */
static server_gen *gen_of_tag(dt_rpc_server *s, void *tag) {
    for (int i = 0; i < MAX_GENS; i++)
        if (tag == &s->gens[i].notify_tag) return &s->gens[i];
    return NULL;
}

/* The CLOCK_REALTIME time ms from now: a pthread_cond_timedwait deadline. */
static struct timespec deadline_in(int ms) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return dt_timespec_after_ms(t, ms);
}

/* How many pollers may wait on the queue at once, under mu: one, or all of
 * them for a while after a large request (see the top of the file). */
static int max_leaders(const dt_rpc_server *s) {
    return s->wide_until_ms > dt_now_ms() ? s->num_pollers : 1;
}

/* Waits to lead (take events from the queue); 0 once the queue is done. A
 * follower asked to watch the leader (want_watch) wakes every
 * LEAD_WATCH_MS while handlers run, and takes the queue over from a leader
 * whose handler ran a whole tick: a handler that blocks (waiting for
 * another call, say) never holds up the rest. It stops watching after
 * LEAD_IDLE_TICKS ticks without a handler. */
static int lead(dt_rpc_server *s) {
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->queue_done) break;
        if (s->leaders < max_leaders(s)) {
            s->leaders++;
            break;
        }
        if (!s->want_watch || s->watching) {
            pthread_cond_wait(&s->lead_cv, &s->mu);
            continue;
        }
        s->want_watch = 0;
        s->watching = 1;
        unsigned long seen = s->handler_seq;
        int idle = 0, took = 0;
        while (s->leaders >= max_leaders(s) && !s->queue_done && idle < LEAD_IDLE_TICKS) {
            struct timespec deadline = deadline_in(LEAD_WATCH_MS);
            pthread_cond_timedwait(&s->lead_cv, &s->mu, &deadline);
            if (s->in_handler && s->handler_seq == seen) {
                /* The same handler for a whole tick: lead in its place
                 * (its poller finds out when it returns). */
                s->taken_from = s->in_handler;
                s->in_handler = NULL;
                took = 1;
                break;
            }
            idle = s->handler_seq == seen && !s->in_handler ? idle + 1 : 0;
            seen = s->handler_seq;
        }
        s->watching = 0;
        if (took) break;
    }
    int ok = !s->queue_done;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* Stops leading and wakes a follower (done: all of them, to end; wide:
 * all of them, to lead too). */
static void unlead(dt_rpc_server *s, int done, int wide) {
    pthread_mutex_lock(&s->mu);
    s->leaders--;
    if (done) s->queue_done = 1;
    if (wide) s->wide_until_ms = dt_now_ms() + LEAD_WIDE_MS;
    if (done || wide)
        pthread_cond_broadcast(&s->lead_cv);
    else
        pthread_cond_signal(&s->lead_cv);
    pthread_mutex_unlock(&s->mu);
}

/* Whether an event starts a handler on a request large enough to hand the
 * queue over first. */
static int heavy(const call_state *cs, int success) {
    return success && cs->phase == CALL_RECEIVED && cs->request_payload &&
           grpc_byte_buffer_length(cs->request_payload) >= LEAD_HANDOFF_BYTES;
}

/* The only leader runs a small request's handler, watched (see lead); 0
 * when a follower took the queue over meanwhile. */
static int handle_leading(poller *p, call_state *cs, int success) {
    dt_rpc_server *s = p->server;
    pthread_mutex_lock(&s->mu);
    s->in_handler = p;
    s->handler_seq++;
    if (!s->watching && !s->want_watch) {
        s->want_watch = 1;
        pthread_cond_signal(&s->lead_cv);
    }
    pthread_mutex_unlock(&s->mu);
    on_event(cs, success);
    pthread_mutex_lock(&s->mu);
    int still = s->taken_from != p;
    if (still)
        s->in_handler = NULL;
    else
        s->taken_from = NULL;
    pthread_mutex_unlock(&s->mu);
    return still;
}

/* Whether a leader should step back: more lead than may (the while after
 * a large request is over). */
static int surplus(dt_rpc_server *s) {
    if (atomic_load(&s->num_leading) <= 1) return 0;
    pthread_mutex_lock(&s->mu);
    int over = s->leaders > max_leaders(s);
    if (over) s->leaders--;
    pthread_mutex_unlock(&s->mu);
    return over;
}

static void *poll_loop(void *arg) {
    poller *p = arg;
    dt_rpc_server *s = p->server;
    p->have_clock = pthread_getcpuclockid(pthread_self(), &p->cpu_clock) == 0;
    int leading = 0;
    for (;;) {
        if (!leading) {
            if (!(leading = lead(s))) break;
            atomic_fetch_add(&s->num_leading, 1);
        }
        grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) {
            atomic_fetch_sub(&s->num_leading, 1);
            unlead(s, 1, 0);
            break;
        }
        if (ev.type != GRPC_OP_COMPLETE) continue;
        atomic_fetch_add_explicit(&s->events, 1, memory_order_relaxed);
        DT_RPC_TAG_ACQUIRE(ev.tag);
        server_gen *g = gen_of_tag(s, ev.tag);
        if (g) {
            pthread_mutex_lock(&s->mu);
            g->notified = 1;
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        call_state *cs = ev.tag;
        if (heavy(cs, ev.success)) {
            atomic_fetch_sub(&s->num_leading, 1);
            unlead(s, 0, 1);
            leading = 0;
            on_event(cs, ev.success);
        } else if (cs->phase == CALL_RECEIVED && atomic_load(&s->num_leading) == 1) {
            if (!handle_leading(p, cs, ev.success)) {
                atomic_fetch_sub(&s->num_leading, 1);
                leading = 0;
            }
        } else {
            on_event(cs, ev.success);
        }
        if (leading && surplus(s)) {
            atomic_fetch_sub(&s->num_leading, 1);
            leading = 0;
        }
    }
    return NULL;
}

/* Destroys the server, then shuts down the queue, joins the pollers (or,
 * when none started, drains the queue here) and frees everything. */
static void server_free(dt_rpc_server *s) {
    for (int i = 0; i < MAX_GENS; i++)
        if (s->gens[i].grpc) grpc_server_destroy(s->gens[i].grpc);
    if (s->creds) grpc_server_credentials_release(s->creds);
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
            if (ev.type == GRPC_OP_COMPLETE && !gen_of_tag(s, ev.tag)) call_free(ev.tag);
        }
    grpc_completion_queue_destroy(cq);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->lead_cv);
    dt_rpc_auth_free(s->auth);
    dt_adm_free(s->adm);
    free(s->stats);
    free(s);
    dt_rpc_shutdown();
}

/* ---- resource limits ------------------------------------------------- */

/* key: a GRPC_ARG_ name (a string literal, so a char * in C, as grpc_arg
 * wants; gRPC only reads it). */
static void int_arg(grpc_arg *a, char *key, int value) {
    a->type = GRPC_ARG_INTEGER;
    a->key = key;
    a->value.integer = value;
}

/* The value of a limit field: its default when 0, else itself. */
static int pick(int value, int fallback) {
    return value == 0 ? fallback : value;
}

/* Fills args (room for 16) and *out from params' limits, defaults applied.
 * Why each one: a client must not be able to make the server buffer an
 * unbounded message, hold a connection that never finishes its handshake
 * or never sends anything, or keep a half-open connection forever. */
static int limits_to_args(const dt_rpc_server_params *params, grpc_arg *args,
                          grpc_channel_args *out, dt_err *err) {
    long long max_message =
        params->max_message_bytes ? params->max_message_bytes : DT_RPC_DEFAULT_MAX_MESSAGE_BYTES;
    if (max_message < 0 || max_message > INT_MAX)
        return dt_err_set(err, DT_EINVAL, "rpc server %s: max_message_bytes %lld (1..%d)",
                          params->addr, max_message, INT_MAX);
    int handshake = pick(params->handshake_timeout_ms, DT_RPC_DEFAULT_HANDSHAKE_TIMEOUT_MS);
    int idle = pick(params->idle_timeout_ms, DT_RPC_DEFAULT_IDLE_TIMEOUT_MS);
    int keepalive = pick(params->keepalive_time_ms, DT_RPC_DEFAULT_KEEPALIVE_TIME_MS);
    int keepalive_timeout = pick(params->keepalive_timeout_ms, DT_RPC_DEFAULT_KEEPALIVE_TIMEOUT_MS);
    int streams = pick(params->max_concurrent_streams, DT_RPC_DEFAULT_MAX_CONCURRENT_STREAMS);
    if (handshake < 0 || keepalive < 0 || keepalive_timeout < 0 || streams < 0)
        return dt_err_set(err, DT_EINVAL,
                          "rpc server %s: negative handshake, keepalive or stream limit",
                          params->addr);
    int n = 0;
    /* No SO_REUSEPORT: a second process on the same address must fail to
     * bind, not silently share the port. */
    int_arg(&args[n++], GRPC_ARG_ALLOW_REUSEPORT, 0);
    /* gRPC checks the size only once the whole message has arrived (see
     * docs/security.md, "Resource limits"), so this bounds what one call can make the
     * server buffer; the send cap makes an oversized reply fail here, named,
     * rather than at a client with its own cap. */
    int_arg(&args[n++], GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, (int)max_message);
    int_arg(&args[n++], GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, (int)max_message);
    /* Covers TCP accept to the client's SETTINGS frame: a socket that sends
     * nothing or half a preface is closed at this deadline. */
    int_arg(&args[n++], GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, handshake);
    if (idle > 0) int_arg(&args[n++], GRPC_ARG_MAX_CONNECTION_IDLE_MS, idle);
    int_arg(&args[n++], GRPC_ARG_KEEPALIVE_TIME_MS, keepalive);
    int_arg(&args[n++], GRPC_ARG_KEEPALIVE_TIMEOUT_MS, keepalive_timeout);
    /* Keep pinging a connection that carries no calls: that is exactly the
     * one whose peer may have vanished. */
    int_arg(&args[n++], GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    int_arg(&args[n++], GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    /* gRPC's own guard against a PING flood is off (0: no limit). In 1.51,
     * once past its strikes it sends a GOAWAY and then adds every further
     * ping to the connection's error, a string that grew by 56 MB while
     * it read one connection's flood (and the client connected again).
     * The connection guards close such a flood instead (admission.c: bytes
     * without a call, or with none of its calls open) and back off its
     * address; the ps then grew by 1 MB. */
    int_arg(&args[n++], GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
    int_arg(&args[n++], GRPC_ARG_HTTP2_MIN_SENT_PING_INTERVAL_WITHOUT_DATA_MS, keepalive);
    int_arg(&args[n++], GRPC_ARG_MAX_CONCURRENT_STREAMS, streams);
    /* With requests in flight bounded, a call waiting its turn must not
     * have its message pile up in gRPC regardless: without BDP probing a
     * stream's window stays at gRPC's 64 kB until its message is asked for
     * (then it opens to the whole message, so reading is no slower). */
    if (params->inflight_bytes > 0) int_arg(&args[n++], GRPC_ARG_HTTP2_BDP_PROBE, 0);
    out->num_args = (size_t)n;
    out->args = args;
    return 0;
}

/* gRPC 1.51's listener stops accepting for good after one accept() fails
 * with EMFILE/ENFILE (it drops the listening socket's read notification
 * instead of retrying), so running out of descriptors once would deafen
 * the server. Raising the soft limit to the hard one makes that far less
 * likely; it cannot rule it out. */
static void raise_fd_limit(const char *addr) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == rl.rlim_max) return;
    rlim_t old = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        dt_log(DT_LOG_WARN, "rpc server %s: cannot raise the descriptor limit from %llu", addr,
               (unsigned long long)old);
        return;
    }
    dt_log(DT_LOG_DEBUG, "rpc server %s: descriptor limit raised from %llu to %llu", addr,
           (unsigned long long)old, (unsigned long long)rl.rlim_max);
}

/* ---- listening again ------------------------------------------------- */

/* A grpc_server with the server's limits on its queue, not yet listening. */
static grpc_server *new_grpc_server(dt_rpc_server *s) {
    grpc_server *g = grpc_server_create(&s->channel_args, NULL);
    grpc_server_register_completion_queue(g, s->cq, NULL);
    return g;
}

/* Arms ARMED_PER_THREAD request calls per poller on the current server. */
static void arm_all(dt_rpc_server *s) {
    for (int i = 0; i < s->num_pollers; i++)
        for (int k = 0; k < ARMED_PER_THREAD; k++)
            arm(&s->pollers[i]);
}

/* Starts g's shutdown (once): it stops listening, its connections get a
 * GOAWAY and their calls in flight finish. */
static void shut_gen(dt_rpc_server *s, server_gen *g) {
    if (!g->grpc || g->shut) return;
    g->shut = 1;
    grpc_server_shutdown_and_notify(g->grpc, s->cq, &g->notify_tag);
}

/* Destroys the generations that are shut down, notified and hold no call. */
static void reap_gens(dt_rpc_server *s) {
    for (int i = 0; i < MAX_GENS; i++) {
        server_gen *g = &s->gens[i];
        pthread_mutex_lock(&s->mu);
        int done = g->grpc && g != s->current && g->notified && g->live_calls == 0;
        pthread_mutex_unlock(&s->mu);
        if (!done) continue;
        grpc_server_destroy(g->grpc);
        pthread_mutex_lock(&s->mu);
        memset(g, 0, sizeof *g);
        pthread_mutex_unlock(&s->mu);
    }
}

/* 1 when this process could open `n` more descriptors now. */
static int descriptors_free(int n) {
    int fds[64], got = 0;
    if (n > 64) n = 64;
    while (got < n && (fds[got] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
        got++;
    for (int i = 0; i < got; i++)
        close(fds[i]);
    return got == n;
}

/* Replaces the current grpc_server, whose listener gave up, by a new one on
 * the same address. The old one must stop first: it still holds the
 * listening socket, and without SO_REUSEPORT the new one cannot bind until
 * that is closed. Its open connections are told to reconnect (GOAWAY), so
 * this waits until descriptors are free again (the handshake deadline
 * closes the connections of whoever took them). Returns 0 once listening,
 * -1 to be tried again later. */
static int listen_again(dt_rpc_server *s) {
    if (!descriptors_free(32)) return -1;
    server_gen *slot = NULL;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < MAX_GENS && !slot; i++)
        if (!s->gens[i].grpc) slot = &s->gens[i];
    server_gen *old = s->current;
    pthread_mutex_unlock(&s->mu);
    if (!slot) return -1; /* old ones still draining */
    grpc_server *g = new_grpc_server(s);
    shut_gen(s, old);
    /* The old listening socket closes asynchronously; a few tries. */
    int port = 0;
    for (int tries = 0; tries < 100 && port == 0; tries++) {
        port = grpc_server_add_http2_port(g, s->addr, s->creds);
        if (port == 0) nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    }
    if (port == 0) {
        /* Never started: a shutdown with its notification, then destroy. */
        dt_log(DT_LOG_ERROR, "rpc server %s: cannot listen again yet; retrying", s->addr);
        pthread_mutex_lock(&s->mu);
        slot->grpc = g;
        pthread_mutex_unlock(&s->mu);
        shut_gen(s, slot);
        return -1;
    }
    grpc_server_start(g);
    pthread_mutex_lock(&s->mu);
    slot->grpc = g;
    s->current = slot;
    pthread_mutex_unlock(&s->mu);
    arm_all(s);
    return 0;
}

/* The watchdog: every WATCH_MS, reaps drained generations and, when a gRPC
 * listener of this process gave up accepting since last time, listens again
 * (gRPC 1.51 never retries by itself; newer versions retry after EMFILE).
 * The failure count is process-wide and says nothing of which listener
 * failed, so every server of the process listens again: harmless, as its
 * clients reconnect. */
#define WATCH_MS 200
/* The connection guards' scan (admission.h): a socket that must be closed
 * is closed within this. */
#define ADM_TICK_MS 20
/* The watchdog's tick for busy_in_grpc. */
#define BUSY_TICK_MS 20

/* Whether the only leader spends its time inside gRPC without taking
 * events: gRPC's transport work (parsing a flood of frames, making a call
 * of each stream) runs on the thread that waits on the queue, and while it
 * runs the events it makes wait for a poller. A tick in which the pollers
 * used most of a core yet took few events (an honest load of small calls
 * is dozens a millisecond) is that: every poller then waits on the queue
 * for a while, so the calls are taken, counted and the flood's connection
 * closed at once rather than seconds later. */
static int busy_in_grpc(dt_rpc_server *s, long long tick_ms) {
    long long cpu = 0;
    for (int i = 0; i < s->num_pollers; i++) {
        struct timespec ts;
        if (s->pollers[i].have_clock && clock_gettime(s->pollers[i].cpu_clock, &ts) == 0)
            cpu += (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    }
    long long events = atomic_load(&s->events);
    long long used = cpu - s->busy_cpu_ns, taken = events - s->busy_events;
    s->busy_cpu_ns = cpu;
    s->busy_events = events;
    return atomic_load(&s->num_leading) <= 1 && used * 10 >= tick_ms * 1000000LL * 6 &&
           taken < tick_ms * 4;
}

/* The watchdog's thread runs ahead of the process's others: the guards'
 * scan must see a flood while gRPC's threads parse it at full speed on a
 * busy machine, and a scan that came late let a client send hundreds of
 * megabytes of header blocks before its connection was closed. It sleeps
 * between ticks, so it takes little of the CPU it is given first. Raising
 * the priority takes CAP_SYS_NICE; without it the thread runs as the
 * others do, which is said once at debug level. */
#define WATCH_NICE (-10)
static void prefer_this_thread(const dt_rpc_server *s) {
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), WATCH_NICE) != 0)
        dt_log(DT_LOG_DEBUG, "rpc server %s: the guard thread keeps its priority: %s", s->addr,
               strerror(errno));
}

static void *watch_listener(void *arg) {
    dt_rpc_server *s = arg;
    prefer_this_thread(s);
    long long waiting_since = 0; /* a failure not yet acted on, monotonic ms */
    long long last_watch = dt_now_ms(), last_busy = last_watch, last_scan = last_watch;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        struct timespec deadline = deadline_in(BUSY_TICK_MS);
        pthread_cond_timedwait(&s->cv, &s->mu, &deadline);
        if (s->stopping) break;
        long long tick = dt_now_ms();
        if (tick - last_busy >= BUSY_TICK_MS) {
            if (busy_in_grpc(s, tick - last_busy)) {
                s->wide_until_ms = tick + LEAD_WIDE_MS;
                pthread_cond_broadcast(&s->lead_cv);
            }
            last_busy = tick;
        }
        if (tick - last_scan >= ADM_TICK_MS) {
            last_scan = tick;
            pthread_mutex_unlock(&s->mu);
            dt_adm_tick(s->adm);
            pthread_mutex_lock(&s->mu);
        }
        if (tick - last_watch < WATCH_MS) continue;
        last_watch = tick;
        pthread_mutex_unlock(&s->mu);
        reap_gens(s);
        /* A flood's calls and buffers, freed once its connection closed,
         * stay in malloc's arenas unless handed back. */
        dt_adm_stats guard;
        dt_adm_get_stats(s->adm, &guard);
        /* Those gRPC closed too (a GOAWAY for a PING flood). */
        long long closed = guard.closed_flood + guard.closed_backoff + guard.closed_slow +
                           guard.closed_over_cap + dt_adm_sockets_gone(s->adm);
        if (closed != s->closed_seen) {
            s->closed_seen = closed;
            s->trim_at_ms = dt_now_ms() + 1000;
        }
        if (s->trim_at_ms && dt_now_ms() >= s->trim_at_ms) {
            s->trim_at_ms = 0;
            malloc_trim(0);
        }
        int failures = dt_rpc_accept_failures();
        if (failures != s->accept_failures) {
            if (!waiting_since) {
                waiting_since = dt_now_ms();
                dt_log(DT_LOG_WARN,
                       "rpc server %s: stopped accepting connections (accept failed: out of "
                       "descriptors?); listening again once descriptors are free",
                       s->addr);
            }
            if (listen_again(s) == 0) {
                s->accept_failures = failures;
                dt_log(DT_LOG_WARN,
                       "rpc server %s: listening again after %lld ms; open connections were "
                       "asked to reconnect",
                       s->addr, dt_now_ms() - waiting_since);
                waiting_since = 0;
            }
        }
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- /metrics ------------------------------------------------------------- */

/* Established TCP connections to port (this process is the one listening
 * there), from the kernel's tables; -1 when they cannot be read. */
static int connections_to(int port) {
    const char *const tables[2] = {"/proc/net/tcp", "/proc/net/tcp6"};
    int n = -1;
    for (int t = 0; t < 2; t++) {
        FILE *f = fopen(tables[t], "r");
        if (!f) continue;
        if (n < 0) n = 0;
        char line[512];
        while (fgets(line, sizeof line, f)) {
            /* "  0: 0100007F:0691 0100007F:D2C4 01 ...": local, remote, state */
            char local[64], state[8];
            if (sscanf(line, " %*d: %63s %*s %7s", local, state) != 2) continue;
            const char *colon = strrchr(local, ':');
            if (colon && strtol(colon + 1, NULL, 16) == port && strcmp(state, "01") == 0) n++;
        }
        fclose(f);
    }
    return n;
}

/* The server's families: calls by method and code, their latency and
 * bytes, refusals by reason, what is in flight, its connections. */
static void collect(void *ctx, dt_metrics_out *o) {
    dt_rpc_server *s = ctx;
    const int nm = s->params.num_methods;
    char labels[DT_METRICS_LABELS_MAX];
    dt_metrics_family(o, "dtrain_rpc_server_calls_total", "counter",
                      "Calls answered, by method and gRPC status code.");
    for (int i = 0; i <= nm; i++)
        for (int c = 0; c < NUM_CODES; c++) {
            uint64_t v = dt_counter_get(&s->stats[i].calls[c]);
            if (v == 0 && !(c == 0 && i < nm)) continue; /* OK always, others once seen */
            const char *path = i < nm ? s->params.methods[i].path : "unknown";
            labels[0] = '\0';
            dt_metrics_label(labels, sizeof labels, "method",
                             strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
            dt_metrics_label(labels, sizeof labels, "code",
                             dt_rpc_status_name((grpc_status_code)c));
            dt_metrics_sample(o, "dtrain_rpc_server_calls_total", labels, (double)v);
        }
    static const char *const names[3] = {"dtrain_rpc_server_call_duration_seconds",
                                         "dtrain_rpc_server_received_bytes_total",
                                         "dtrain_rpc_server_sent_bytes_total"};
    static const char *const helps[3] = {
        "Time from a call's arrival to its reply, by method, in seconds.",
        "Request bytes received, by method.", "Reply bytes sent, by method."};
    for (int k = 0; k < 3; k++) {
        dt_metrics_family(o, names[k], k == 0 ? "histogram" : "counter", helps[k]);
        for (int i = 0; i < nm; i++) {
            const char *path = s->params.methods[i].path;
            labels[0] = '\0';
            dt_metrics_label(labels, sizeof labels, "method",
                             strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
            if (k == 0)
                dt_metrics_histogram(o, names[k], labels, &s->stats[i].latency);
            else
                dt_metrics_sample(o, names[k], labels,
                                  (double)dt_counter_get(k == 1 ? &s->stats[i].bytes_in
                                                                : &s->stats[i].bytes_out));
        }
    }
    dt_metrics_family(o, "dtrain_rpc_server_refused_calls_total", "counter",
                      "Calls refused before their handler, by reason.");
    dt_metrics_sample(o, "dtrain_rpc_server_refused_calls_total", "reason=\"unauthenticated\"",
                      (double)dt_counter_get(&s->refused_unauthenticated));
    dt_metrics_sample(o, "dtrain_rpc_server_refused_calls_total", "reason=\"permission_denied\"",
                      (double)dt_counter_get(&s->refused_denied));
    long long inflight = 0;
    int waiting = dt_rpc_server_waiting(s, &inflight);
    dt_metrics_family(o, "dtrain_rpc_server_inflight_request_bytes", "gauge",
                      "Bytes of requests read and not yet handled.");
    dt_metrics_sample(o, "dtrain_rpc_server_inflight_request_bytes", NULL, (double)inflight);
    dt_metrics_family(o, "dtrain_rpc_server_waiting_calls", "gauge",
                      "Calls whose request waits its turn to be read (in-flight bound).");
    dt_metrics_sample(o, "dtrain_rpc_server_waiting_calls", NULL, waiting);
    const char *colon = strrchr(s->addr, ':');
    int conns = colon ? connections_to(atoi(colon + 1)) : -1;
    if (conns >= 0) {
        dt_metrics_family(o, "dtrain_rpc_server_connections", "gauge",
                          "Established TCP connections to the server's port.");
        dt_metrics_sample(o, "dtrain_rpc_server_connections", NULL, conns);
    }
}

int dt_rpc_server_start(const dt_rpc_server_params *params, dt_rpc_server **out, dt_err *err) {
    *out = NULL;
    if (params->num_threads < 1 || params->num_threads > MAX_THREADS)
        return dt_err_set(err, DT_EINVAL, "rpc server: %d threads (1..%d)", params->num_threads,
                          MAX_THREADS);
    dt_rpc_server *s = dt_calloc(1, sizeof *s);
    if (s) s->stats = dt_calloc((size_t)params->num_methods + 1, sizeof *s->stats);
    if (!s || !s->stats) {
        free(s);
        return dt_err_set(err, DT_ENOMEM, "rpc server: out of memory");
    }
    for (int i = 0; i <= params->num_methods; i++) {
        s->stats[i].latency.bounds = dt_metrics_latency_bounds;
        s->stats[i].latency.num_bounds = DT_METRICS_LATENCY_BOUNDS;
    }
    dt_rpc_init();
    int rc = 0;
    s->params = *params;
    snprintf(s->addr, sizeof s->addr, "%s", params->addr);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->lead_cv, NULL);

    if (params->inflight_bytes < 0)
        rc = dt_err_set(err, DT_EINVAL, "rpc server %s: inflight_bytes %lld < 0", params->addr,
                        params->inflight_bytes);
    if (params->max_pending_calls < 0)
        rc = dt_err_set(err, DT_EINVAL, "rpc server %s: max_pending_calls %d < 0", params->addr,
                        params->max_pending_calls);
    s->max_pending =
        params->max_pending_calls ? params->max_pending_calls : DT_RPC_DEFAULT_MAX_PENDING_CALLS;
    if (rc < 0 || (rc = limits_to_args(params, s->args, &s->channel_args, err)) < 0) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        pthread_cond_destroy(&s->lead_cv);
        free(s->stats);
        free(s);
        dt_rpc_shutdown();
        return rc;
    }
    raise_fd_limit(s->addr);
    s->accept_failures = dt_rpc_accept_failures();
    s->num_pollers = params->num_threads;
    s->cq = grpc_completion_queue_create_for_next(NULL);
    for (int i = 0; i < s->num_pollers; i++)
        s->pollers[i].server = s;
    s->current = &s->gens[0];
    s->current->grpc = new_grpc_server(s);
    if ((rc = dt_rpc_auth_new(params->security, s->addr, params->num_workers, params->num_ps,
                              &s->auth, &s->creds, err)) < 0) {
        dt_err_wrap(err, rc, "rpc server %s", params->addr);
        goto fail_unstarted;
    }
    int port = grpc_server_add_http2_port(s->current->grpc, params->addr, s->creds);
    if (port == 0) {
        rc =
            dt_err_set(err, DT_EUNAVAILABLE,
                       "rpc server %s: cannot listen (address in use or not local?)", params->addr);
        goto fail_unstarted;
    }
    char guard_name[340];
    snprintf(guard_name, sizeof guard_name, "rpc server %s", s->addr);
    /* Three of the largest messages and 2 MiB: what an honest client may
     * send before its calls are taken (admission.c, quiet_flood). */
    dt_adm_limits guard = params->guard;
    if (guard.quiet_bytes == 0) {
        long long cap = params->max_message_bytes ? params->max_message_bytes
                                                  : DT_RPC_DEFAULT_MAX_MESSAGE_BYTES;
        guard.quiet_bytes = 3 * cap + (2LL << 20);
    }
    if ((rc = dt_adm_new(guard_name, port, &guard, &s->adm, err)) < 0) goto fail_unstarted;
    grpc_server_start(s->current->grpc);
    arm_all(s);
    /* Set before the first poller starts: a handler may read it (through
     * its ctx) as soon as a call comes, which can be before we return. */
    *out = s;
    for (int i = 0; i < s->num_pollers; i++) {
        if (pthread_create(&s->pollers[i].thread, NULL, poll_loop, &s->pollers[i]) != 0) {
            dt_err_set(err, DT_EINTERNAL, "rpc server %s: cannot start thread", params->addr);
            dt_rpc_server_stop(s, 0);
            *out = NULL;
            return DT_EINTERNAL;
        }
        s->pollers[i].started = 1;
    }
    if (pthread_create(&s->watchdog, NULL, watch_listener, s) != 0) {
        dt_err_set(err, DT_EINTERNAL, "rpc server %s: cannot start thread", params->addr);
        dt_rpc_server_stop(s, 0);
        *out = NULL;
        return DT_EINTERNAL;
    }
    s->watchdog_started = 1;
    /* Without /metrics served, a collector costs nothing: it runs only
     * when a page is rendered. Past the registry's room (a process with
     * dozens of servers: tests) a server goes without: never a failure. */
    dt_err full;
    dt_err_clear(&full);
    if (dt_metrics_add(collect, s, &full) < 0)
        dt_log(DT_LOG_DEBUG, "rpc server %s: no /metrics: %s", s->addr, full.msg);
    return 0;

fail_unstarted:
    shut_gen(s, s->current);
    server_free(s);
    return rc;
}

/* 1 when every generation that exists has been notified of its shutdown.
 * Under mu. */
static int all_notified(const dt_rpc_server *s) {
    for (int i = 0; i < MAX_GENS; i++)
        if (s->gens[i].grpc && !s->gens[i].notified) return 0;
    return 1;
}

/* Waits for the shutdown notifications until `deadline`; 1 when all came. */
static int wait_shutdown(dt_rpc_server *s, const struct timespec *deadline) {
    pthread_mutex_lock(&s->mu);
    while (!all_notified(s))
        if (pthread_cond_timedwait(&s->cv, &s->mu, deadline) != 0) break;
    int done = all_notified(s);
    pthread_mutex_unlock(&s->mu);
    return done;
}

static void cancel_all(dt_rpc_server *s) {
    for (int i = 0; i < MAX_GENS; i++)
        if (s->gens[i].grpc) grpc_server_cancel_all_calls(s->gens[i].grpc);
}

void dt_rpc_server_stop(dt_rpc_server *s, int grace_ms) {
    if (!s) return;
    dt_metrics_remove(collect, s);
    long long refused = atomic_load(&s->refused);
    if (refused > 0)
        dt_log(DT_LOG_INFO, "rpc server %s: %lld calls refused in all", s->addr, refused);
    dt_adm_stats guard;
    dt_rpc_server_guard_stats(s, &guard);
    int any = guard.closed_flood || guard.closed_slow || guard.closed_over_cap ||
              guard.closed_backoff || guard.calls_dropped || guard.most_in_a_second;
    dt_log(any ? DT_LOG_INFO : DT_LOG_DEBUG,
           "rpc server %s: connections closed: %lld for floods, %lld for slow headers, %lld over "
           "the per-peer cap, %lld backing off; %lld calls dropped; any other connection at most "
           "%d calls reset before their handler or turned away in one second",
           s->addr, guard.closed_flood, guard.closed_slow, guard.closed_over_cap,
           guard.closed_backoff, guard.calls_dropped, guard.most_in_a_second);
    if (s->watchdog_started) {
        pthread_mutex_lock(&s->mu);
        s->stopping = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->watchdog, NULL);
    }
    shut_gen(s, s->current);
    admit_all(s);
    int all_started = 1;
    for (int i = 0; i < s->num_pollers; i++)
        all_started &= s->pollers[i].started;
    if (all_started) {
        struct timespec deadline = deadline_in(grace_ms);
        if (!wait_shutdown(s, &deadline)) {
            cancel_all(s);
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
        cancel_all(s);
    }
    server_free(s);
}
