/*
 * bench_overlap: what overlapping a ps's update with the transfer could buy
 * (issue 12, goal 3), measured on the raw gRPC core with the work of
 * dtrain's fused pull+push done on the same bytes.
 *
 * One server process with one thread per client, each thread with its own
 * completion queue and one request call armed, serving one call at a time;
 * C client processes (forked before gRPC starts, as in bench_rawgrpc), each
 * doing R rounds after one warm-up round. A round moves N*4 bytes each way:
 *   echo-ref    unary: the reply is the request's own slices (no copy), the
 *               client checks its size and drops it (bench_rawgrpc's
 *               echo-ref, on this program's server);
 *   work        unary, dtrain's work: the server checks every float of the
 *               request for NaN/Inf (a push is applied all or nothing),
 *               applies w -= lr*g reading the request's slices in place,
 *               and replies with w's bytes referenced, not copied; the
 *               client copies the reply into its own array;
 *   stream      the same work, the reply streamed in chunks of K bytes: the
 *               update of chunk k+1 is done while chunk k is being sent
 *               (gRPC core takes one send_message at a time per call), the
 *               client copies chunk k while k+1 arrives. The request comes
 *               whole: the NaN rule needs all of it before any apply;
 *   stream-both the request streamed in chunks too, each checked for
 *               NaN/Inf as it arrives (the next one arriving meanwhile), the
 *               apply after the last.
 * w is one array per server thread (a ps's variable, one per client here:
 * dtrain's lock is held only for the update), kept as dtrain's ps keeps it:
 * the update writes into a buffer no reply still reads (the current one, a
 * spare, or a new one), out of place when it is not the current one.
 *
 * This program talks to the gRPC core itself (only rpc_*.c do in lib/):
 * dtrain's RPC layer is unary, and a streamed reply is what is measured.
 *
 * Output (stdout), one line:
 *   overlap mode=M floats=N rounds=R clients=C chunk_kb=K apply_threads=A
 *   seconds=S mb_per_s=X rounds_per_s=Y
 * and on stderr, per client, its best, 10th-percentile and median round in ms.
 * Exit status: 0, 1 on any failure (message on stderr), 2 on usage errors.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "common.h"
#include "err.h"
#include "optim.h"
#include "pool.h"
#include "rpc_common.h"

#define MAX_CLIENTS 8
#define LR 0.001f

typedef enum { MODE_ECHO_REF, MODE_WORK, MODE_STREAM, MODE_STREAM_BOTH } round_mode;
static const char *const mode_names[] = {"echo-ref", "work", "stream", "stream-both"};
static const char *const method_names[] = {"/dtrain.Bench/EchoRef", "/dtrain.Bench/Work",
                                           "/dtrain.Bench/Stream", "/dtrain.Bench/StreamBoth"};

typedef struct {
    const char *addr;
    int mode;          /* round_mode */
    int64_t floats;    /* N */
    size_t chunk;      /* K bytes, a multiple of 4 */
    int rounds;        /* R per client */
    int clients;       /* C, also the server's threads */
    int apply_threads; /* the server's threads for one large check or update */
    int timeout_ms;
} options;

/* Chunk k of a payload of `payload` bytes: [k*chunk, min(+chunk, payload)). */
static size_t num_chunks(const options *o) {
    size_t payload = (size_t)o->floats * 4;
    return (payload + o->chunk - 1) / o->chunk;
}

static size_t chunk_len(const options *o, size_t k) {
    size_t payload = (size_t)o->floats * 4, from = k * o->chunk;
    return payload - from < o->chunk ? payload - from : o->chunk;
}

/* ---- completion queue of one call at a time ------------------------------- */

/* Tags are small numbers; a queue serves one call at a time, whose batches
 * may complete in any order, so completions are kept as bits. */
enum { TAG_NEW = 1, TAG_RECV, TAG_SEND0, TAG_SEND1, TAG_STATUS, TAG_FIRST };

typedef struct {
    grpc_completion_queue *cq;
    unsigned done; /* bit per tag completed and not yet waited for */
    unsigned ok;   /* bit per tag completed with success */
} callq;

static void *tag_of(int t) {
    return (void *)(intptr_t)t;
}

/* Waits until batch `tag` completes, up to deadline; 0 when it succeeded,
 * -1 when it failed, timed out, or the queue shut down. */
static int wait_tag(callq *q, int tag, gpr_timespec deadline) {
    unsigned bit = 1u << tag;
    while (!(q->done & bit)) {
        grpc_event ev = grpc_completion_queue_next(q->cq, deadline, NULL);
        if (ev.type != GRPC_OP_COMPLETE) return -1;
        unsigned b = 1u << (int)(intptr_t)ev.tag;
        q->done |= b;
        if (ev.success) q->ok |= b;
    }
    q->done &= ~bit;
    int ok = (q->ok & bit) != 0;
    q->ok &= ~bit;
    return ok ? 0 : -1;
}

static int start_batch(grpc_call *call, const grpc_op *ops, size_t n, int tag) {
    return grpc_call_start_batch(call, ops, n, tag_of(tag), NULL) == GRPC_CALL_OK ? 0 : -1;
}

static gpr_timespec deadline_in(int ms) {
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

static grpc_op op(grpc_op_type type) {
    grpc_op o;
    memset(&o, 0, sizeof o);
    o.op = type;
    return o;
}

/* ---- a message's pieces ------------------------------------------------------ */

/* A received message read in place: its slices as dt_pieces (the
 * reader keeps them alive until pieces_end). */
typedef struct {
    grpc_byte_buffer_reader reader;
    dt_piece *pieces; /* (cap) grown as needed, kept across calls */
    int num, cap;
    size_t len;
} msg_pieces;

static int pieces_of(msg_pieces *m, grpc_byte_buffer *bb) {
    m->num = 0;
    m->len = 0;
    if (!grpc_byte_buffer_reader_init(&m->reader, bb)) return -1;
    grpc_slice *s;
    while (grpc_byte_buffer_reader_peek(&m->reader, &s)) {
        if (m->num == m->cap) {
            int cap = m->cap ? 2 * m->cap : 64;
            dt_piece *p = realloc(m->pieces, (size_t)cap * sizeof *p);
            if (!p) {
                grpc_byte_buffer_reader_destroy(&m->reader);
                return -1;
            }
            m->pieces = p;
            m->cap = cap;
        }
        m->pieces[m->num].data = GRPC_SLICE_START_PTR(*s);
        m->pieces[m->num].len = GRPC_SLICE_LENGTH(*s);
        m->len += GRPC_SLICE_LENGTH(*s);
        m->num++;
    }
    return 0;
}

static void pieces_end(msg_pieces *m) {
    grpc_byte_buffer_reader_destroy(&m->reader);
}

static dt_span span_of(const msg_pieces *m) {
    dt_span s = {m->pieces, 0, m->len};
    return s;
}

/* ---- the work ----------------------------------------------------------------- */

/* The ps's work, done with lib/ps_push.c's own pieces: the finiteness test
 * (dt_span_first_nonfinite) and the update by dt_optim_apply_to, read
 * from the message's pieces. A span of PARALLEL_MIN_FLOATS or more is done
 * in RANGES_PER_THREAD ranges per thread on a dt_pool while no other call
 * of the server is at this work, as the ps splits a large gradient. */
#define PARALLEL_MIN_FLOATS (256 * 1024)
#define RANGES_PER_THREAD 4
#define MAX_RANGES (4 * RANGES_PER_THREAD)

/* 1 when the floats of span s are all finite. */
static int span_finite(const dt_span *s) {
    return dt_span_first_nonfinite(s) == s->len / sizeof(float);
}

/* to = w - lr * g over the floats of span g (to is w or apart from it). */
static void span_sgd(const dt_optim_config *optim, const float *w, float *to,
                     const dt_span *g) {
    dt_span_reader r;
    dt_span_reader_init(&r, g, sizeof(float));
    const uint8_t *run;
    size_t n, at = 0;
    while ((run = dt_span_reader_next(&r, &n)) != NULL) {
        dt_optim_apply_to(optim, LR, 1, w + at, to + at, NULL, run, (int64_t)n);
        at += n;
    }
}

/* One check or update of a span, by ranges. */
typedef struct {
    const dt_optim_config *optim;
    dt_span g; /* n floats */
    size_t n;
    int ranges;
    const float *w; /* update: w read, to written; NULL: check */
    float *to;
    int finite[MAX_RANGES];
} range_job;

static void range_run(void *ctx, int range) {
    range_job *j = ctx;
    size_t lo = j->n * (size_t)range / (size_t)j->ranges;
    size_t hi = j->n * (size_t)(range + 1) / (size_t)j->ranges;
    dt_span part = dt_span_sub(&j->g, lo * 4, (hi - lo) * 4);
    if (j->w)
        span_sgd(j->optim, j->w + lo, j->to + lo, &part);
    else
        j->finite[range] = span_finite(&part);
}

/* What the server's calls share for their work. */
typedef struct {
    dt_optim_config optim; /* sgd */
    dt_pool *pool;         /* NULL: one thread */
    int apply_threads;
    atomic_int active; /* calls at their check or update */
} work_ctx;

/* The check (w NULL) or the update of span g, by ranges when it is large,
 * the pool is free and no other call is at this work; 1 when finite. */
static int work_span(work_ctx *wc, const dt_span *g, const float *w, float *to) {
    range_job j = {.optim = &wc->optim, .g = *g, .n = g->len / 4, .w = w, .to = to};
    int ranges = wc->apply_threads * RANGES_PER_THREAD;
    int alone = atomic_fetch_add(&wc->active, 1) == 0;
    int done = 0;
    if (wc->pool && alone && j.n >= PARALLEL_MIN_FLOATS) {
        j.ranges = ranges;
        done = dt_pool_run(wc->pool, range_run, &j, ranges);
    }
    atomic_fetch_sub(&wc->active, 1);
    if (!done) {
        j.ranges = 1;
        range_run(&j, 0);
        return w || j.finite[0];
    }
    for (int r = 0; r < ranges && !w; r++)
        if (!j.finite[r]) return 0;
    return 1;
}

/* ---- the held array (a ps's variable) ------------------------------------------ */

/* Values a reply may still read: freed by the last of the server's and the
 * replies' references (gRPC drops a slice's from any thread). */
typedef struct {
    atomic_int refs;
    float *values; /* (N) */
} held_buf;

static held_buf *held_new(int64_t floats) {
    held_buf *b = malloc(sizeof *b);
    if (!b) return NULL;
    if (!(b->values = calloc((size_t)floats, sizeof(float)))) {
        free(b);
        return NULL;
    }
    atomic_init(&b->refs, 1);
    return b;
}

static void held_unref(void *arg) {
    held_buf *b = arg;
    if (b && atomic_fetch_sub(&b->refs, 1) == 1) {
        free(b->values);
        free(b);
    }
}

static int held_read(held_buf *b) {
    return atomic_load(&b->refs) > 1;
}

/* A slice of len bytes of b from byte `from`, holding a reference on b. */
static grpc_slice held_slice(held_buf *b, size_t from, size_t len) {
    atomic_fetch_add(&b->refs, 1);
    return grpc_slice_new_with_user_data((uint8_t *)b->values + from, len, held_unref, b);
}

/* ---- server ------------------------------------------------------------------- */

typedef struct {
    const options *o;
    grpc_server *server;
    work_ctx *work; /* shared by the threads */
    callq q;
    pthread_t thread;
    held_buf *cur, *spare; /* w, and a buffer a reply may still read */
    msg_pieces req;
    grpc_byte_buffer **chunks; /* (num_chunks) stream-both's request */
    int started;
} server_thread;

/* Where the next values go, as dtrain's ps picks it: the current buffer
 * when no reply reads it, else the spare when none reads that, else a new
 * one (NULL without memory). */
static held_buf *writable(server_thread *t) {
    if (!held_read(t->cur)) return t->cur;
    if (t->spare && !held_read(t->spare)) {
        held_buf *to = t->spare;
        t->spare = NULL;
        return to;
    }
    held_buf *to = held_new(t->o->floats);
    if (to) {
        held_unref(t->spare);
        t->spare = NULL;
    }
    return to;
}

/* The update that wrote into `to` is done: it becomes w. */
static void commit(server_thread *t, held_buf *to) {
    if (to == t->cur) return;
    held_unref(t->spare);
    t->spare = t->cur;
    t->cur = to;
}

/* Sends the chunks of `to` one send_message at a time, each chunk's update
 * (from gradient span g, the whole request) done while the previous chunk
 * is being sent; the status goes with the last. */
static int send_streamed(server_thread *t, grpc_call *call, held_buf *to, const dt_span *g,
                         gpr_timespec deadline, int *cancelled) {
    const options *o = t->o;
    size_t n = num_chunks(o);
    int inflight = -1; /* the tag of the send in progress */
    grpc_byte_buffer *sending[2] = {NULL, NULL};
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        size_t from = k * o->chunk, len = chunk_len(o, k);
        dt_span sub = dt_span_sub(g, from, len);
        work_span(t->work, &sub, t->cur->values + from / 4, to->values + from / 4);
        grpc_slice s = held_slice(to, from, len);
        int slot = (int)(k & 1);
        if (inflight >= 0) rc = wait_tag(&t->q, inflight, deadline);
        if (sending[slot]) grpc_byte_buffer_destroy(sending[slot]);
        sending[slot] = grpc_raw_byte_buffer_create(&s, 1);
        grpc_slice_unref(s);
        if (rc < 0) break;
        grpc_op ops[3] = {op(GRPC_OP_SEND_MESSAGE), op(GRPC_OP_SEND_STATUS_FROM_SERVER),
                          op(GRPC_OP_RECV_CLOSE_ON_SERVER)};
        ops[0].data.send_message.send_message = sending[slot];
        ops[1].data.send_status_from_server.status = GRPC_STATUS_OK;
        ops[2].data.recv_close_on_server.cancelled = cancelled;
        inflight = slot ? TAG_SEND1 : TAG_SEND0;
        rc = start_batch(call, ops, k + 1 == n ? 3 : 1, inflight);
        if (rc < 0) inflight = -1;
    }
    if (inflight >= 0 && wait_tag(&t->q, inflight, deadline) < 0) rc = -1;
    for (int i = 0; i < 2; i++)
        if (sending[i]) grpc_byte_buffer_destroy(sending[i]);
    return rc;
}

/* Receives stream-both's request chunk by chunk into t->chunks, checking
 * each while the next arrives; *finite 0 when one held a NaN or Inf. */
static int recv_chunks(server_thread *t, grpc_call *call, gpr_timespec deadline, int *finite) {
    const options *o = t->o;
    size_t n = num_chunks(o);
    *finite = 1;
    for (size_t k = 0; k < n; k++) {
        if (wait_tag(&t->q, TAG_RECV, deadline) < 0 || !t->chunks[k]) return -1;
        if (k + 1 < n) {
            grpc_op r = op(GRPC_OP_RECV_MESSAGE);
            r.data.recv_message.recv_message = &t->chunks[k + 1];
            if (start_batch(call, &r, 1, TAG_RECV) < 0) return -1;
        }
        if (pieces_of(&t->req, t->chunks[k]) < 0) return -1;
        dt_span s = span_of(&t->req);
        int ok = t->req.len == chunk_len(o, k);
        if (ok && *finite) *finite = work_span(t->work, &s, NULL, NULL);
        pieces_end(&t->req);
        if (!ok) {
            if (k + 1 < n) wait_tag(&t->q, TAG_RECV, deadline);
            return -1;
        }
    }
    return 0;
}

/* Serves one call to its end. */
static void serve(server_thread *t, grpc_call *call) {
    const options *o = t->o;
    size_t payload = (size_t)o->floats * 4, n = num_chunks(o);
    gpr_timespec deadline = deadline_in(o->timeout_ms);
    grpc_byte_buffer *request = NULL, *reply = NULL;
    grpc_status_code status = GRPC_STATUS_OK;
    const char *why = NULL;
    int cancelled = 0, have_pieces = 0;
    for (size_t k = 0; k < n && t->chunks; k++)
        t->chunks[k] = NULL;
    t->q.done = t->q.ok = 0;

    grpc_op first[2] = {op(GRPC_OP_SEND_INITIAL_METADATA), op(GRPC_OP_RECV_MESSAGE)};
    first[1].data.recv_message.recv_message =
        o->mode == MODE_STREAM_BOTH ? &t->chunks[0] : &request;
    if (start_batch(call, first, 2, TAG_RECV) < 0) goto fail;
    held_buf *to = NULL;
    if (o->mode == MODE_STREAM_BOTH) {
        int finite = 0;
        if (recv_chunks(t, call, deadline, &finite) < 0) {
            status = GRPC_STATUS_INVALID_ARGUMENT;
            why = "request chunk missing or of the wrong size";
        } else if (!finite) {
            status = GRPC_STATUS_INVALID_ARGUMENT;
            why = "gradient not finite";
        } else if (!(to = writable(t))) {
            status = GRPC_STATUS_RESOURCE_EXHAUSTED;
            why = "no memory for new values";
        } else {
            /* The whole gradient as one span over the chunks' pieces. */
            size_t count = 0;
            for (size_t k = 0; k < n; k++)
                count += t->chunks[k]->data.raw.slice_buffer.count;
            grpc_slice *all = malloc(count * sizeof *all);
            if (!all) goto fail;
            count = 0;
            for (size_t k = 0; k < n; k++) {
                const grpc_slice_buffer *sb = &t->chunks[k]->data.raw.slice_buffer;
                memcpy(all + count, sb->slices, sb->count * sizeof *all);
                count += sb->count;
            }
            request = grpc_raw_byte_buffer_create(all, count); /* its own references */
            free(all);
        }
    } else if (wait_tag(&t->q, TAG_RECV, deadline) < 0 || !request) {
        goto fail;
    }
    if (request && status == GRPC_STATUS_OK) {
        if (pieces_of(&t->req, request) < 0) goto fail;
        have_pieces = 1;
        dt_span g = span_of(&t->req);
        if (t->req.len != payload) {
            status = GRPC_STATUS_INVALID_ARGUMENT;
            why = "request of the wrong size";
        } else if (o->mode == MODE_ECHO_REF) {
            reply = grpc_byte_buffer_copy(request); /* references its slices */
        } else if (o->mode != MODE_STREAM_BOTH && !work_span(t->work, &g, NULL, NULL)) {
            status = GRPC_STATUS_INVALID_ARGUMENT;
            why = "gradient not finite";
        } else if (!to && !(to = writable(t))) {
            status = GRPC_STATUS_RESOURCE_EXHAUSTED;
            why = "no memory for new values";
        } else if (o->mode == MODE_WORK) {
            work_span(t->work, &g, t->cur->values, to->values);
            commit(t, to);
            grpc_slice s = held_slice(to, 0, payload);
            reply = grpc_raw_byte_buffer_create(&s, 1);
            grpc_slice_unref(s);
        } else {
            int rc = send_streamed(t, call, to, &g, deadline, &cancelled);
            commit(t, to);
            if (rc < 0) goto fail;
            goto done;
        }
    }
    grpc_op last[3] = {op(GRPC_OP_SEND_STATUS_FROM_SERVER), op(GRPC_OP_RECV_CLOSE_ON_SERVER),
                       op(GRPC_OP_SEND_MESSAGE)};
    grpc_slice details = grpc_slice_from_static_string(why ? why : "");
    last[0].data.send_status_from_server.status = status;
    last[0].data.send_status_from_server.status_details = why ? &details : NULL;
    last[1].data.recv_close_on_server.cancelled = &cancelled;
    last[2].data.send_message.send_message = reply;
    if (start_batch(call, last, reply ? 3 : 2, TAG_STATUS) == 0)
        wait_tag(&t->q, TAG_STATUS, deadline);
    goto done;
fail:
    grpc_call_cancel(call, NULL);
done:
    if (have_pieces) pieces_end(&t->req);
    if (request) grpc_byte_buffer_destroy(request);
    if (reply) grpc_byte_buffer_destroy(reply);
    for (size_t k = 0; k < n && t->chunks; k++)
        if (t->chunks[k]) grpc_byte_buffer_destroy(t->chunks[k]);
}

/* A server thread: one request call armed, the call it brings served, until
 * the server shuts down. */
static void *server_main(void *arg) {
    server_thread *t = arg;
    for (;;) {
        grpc_call *call = NULL;
        grpc_call_details details;
        grpc_metadata_array md;
        grpc_call_details_init(&details);
        grpc_metadata_array_init(&md);
        int armed = grpc_server_request_call(t->server, &call, &details, &md, t->q.cq, t->q.cq,
                                             tag_of(TAG_NEW)) == GRPC_CALL_OK;
        int got = armed && wait_tag(&t->q, TAG_NEW, gpr_inf_future(GPR_CLOCK_MONOTONIC)) == 0;
        if (got) serve(t, call);
        if (call) grpc_call_unref(call);
        grpc_call_details_destroy(&details);
        grpc_metadata_array_destroy(&md);
        if (!got) break;
    }
    return NULL;
}

typedef struct {
    grpc_server *server;
    grpc_completion_queue *shutdown_cq;
    server_thread threads[MAX_CLIENTS];
    int num_threads;
    work_ctx work;
} bench_server;

static void args_unlimited(grpc_arg args[2]) {
    static char recv_key[] = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    static char send_key[] = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[0].type = args[1].type = GRPC_ARG_INTEGER;
    args[0].key = recv_key;
    args[1].key = send_key;
    args[0].value.integer = args[1].value.integer = -1;
}

static void server_stop(bench_server *s) {
    if (!s->server) return;
    grpc_server_shutdown_and_notify(s->server, s->shutdown_cq, NULL);
    grpc_server_cancel_all_calls(s->server);
    grpc_completion_queue_pluck(s->shutdown_cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    for (int i = 0; i < s->num_threads; i++)
        if (s->threads[i].started) pthread_join(s->threads[i].thread, NULL);
    grpc_server_destroy(s->server);
    for (int i = 0; i < s->num_threads; i++) {
        server_thread *t = &s->threads[i];
        grpc_completion_queue_shutdown(t->q.cq);
        while (grpc_completion_queue_next(t->q.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN) {
        }
        grpc_completion_queue_destroy(t->q.cq);
        held_unref(t->cur);
        held_unref(t->spare);
        free(t->req.pieces);
        free(t->chunks);
    }
    grpc_completion_queue_shutdown(s->shutdown_cq);
    grpc_completion_queue_destroy(s->shutdown_cq);
    dt_pool_free(s->work.pool);
    s->server = NULL;
}

static int server_start(const options *o, bench_server *s, dt_err *err) {
    grpc_arg a[2];
    args_unlimited(a);
    grpc_channel_args args = {2, a};
    memset(s, 0, sizeof *s);
    s->server = grpc_server_create(&args, NULL);
    s->shutdown_cq = grpc_completion_queue_create_for_pluck(NULL);
    s->num_threads = o->clients;
    dt_optim_defaults(&s->work.optim); /* sgd */
    s->work.apply_threads = o->apply_threads;
    atomic_init(&s->work.active, 0);
    if (o->apply_threads > 1 && dt_pool_new(o->apply_threads - 1, &s->work.pool, err) < 0)
        return -1;
    for (int i = 0; i < s->num_threads; i++) {
        server_thread *t = &s->threads[i];
        t->o = o;
        t->server = s->server;
        t->work = &s->work;
        t->q.cq = grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(s->server, t->q.cq, NULL);
        t->cur = held_new(o->floats);
        t->chunks = calloc(num_chunks(o), sizeof *t->chunks);
        if (!t->cur || !t->chunks) return dt_err_set(err, DT_ENOMEM, "server: no memory");
    }
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(s->server, o->addr, creds);
    grpc_server_credentials_release(creds);
    if (port <= 0) return dt_err_set(err, DT_EUNAVAILABLE, "server: cannot bind %s", o->addr);
    grpc_server_start(s->server);
    for (int i = 0; i < s->num_threads; i++) {
        if (pthread_create(&s->threads[i].thread, NULL, server_main, &s->threads[i]) != 0)
            return dt_err_set(err, DT_EINTERNAL, "server: cannot start thread %d", i);
        s->threads[i].started = 1;
    }
    return 0;
}

/* ---- clients --------------------------------------------------------------- */

typedef struct {
    const options *o;
    grpc_channel *channel;
    callq q;
    grpc_slice method;
    /* The gradient in one message, and in chunks: slices of the same bytes.
     * A message is made of them for each send (gRPC takes a sent message's
     * slices). */
    grpc_slice whole;
    grpc_slice *chunks; /* (num_chunks) */
    float *w;           /* (N) the client's copy of the values */
    msg_pieces reply;
} client;

/* Copies a received reply (or chunk) to w + at, checking it fits. */
static int take_reply(client *c, grpc_byte_buffer *bb, size_t *at) {
    size_t payload = (size_t)c->o->floats * 4;
    if (pieces_of(&c->reply, bb) < 0) return -1;
    int rc = 0;
    if (c->reply.len > payload - *at)
        rc = -1;
    else if (c->o->mode != MODE_ECHO_REF) {
        dt_span s = span_of(&c->reply);
        dt_span_copy(&s, (uint8_t *)c->w + *at);
    }
    *at += c->reply.len;
    pieces_end(&c->reply);
    return rc;
}

/* One round; 0, or a negative code with err set. */
static int client_round(client *c, dt_err *err) {
    const options *o = c->o;
    size_t payload = (size_t)o->floats * 4, n = num_chunks(o), at = 0;
    gpr_timespec deadline = deadline_in(o->timeout_ms);
    grpc_call *call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, c->q.cq,
                                               c->method, NULL, deadline, NULL);
    grpc_metadata_array initial, trailing;
    grpc_metadata_array_init(&initial);
    grpc_metadata_array_init(&trailing);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    grpc_byte_buffer *msg = NULL;
    int rc = -1, streamed_in = o->mode == MODE_STREAM_BOTH, status_pending = 0;
    c->q.done = c->q.ok = 0;
    const char *step = "start";

    grpc_op st = op(GRPC_OP_RECV_STATUS_ON_CLIENT);
    st.data.recv_status_on_client.trailing_metadata = &trailing;
    st.data.recv_status_on_client.status = &status;
    st.data.recv_status_on_client.status_details = &details;
    if (start_batch(call, &st, 1, TAG_STATUS) < 0) goto fail;
    status_pending = 1;
    grpc_op ops[4] = {op(GRPC_OP_SEND_INITIAL_METADATA), op(GRPC_OP_RECV_INITIAL_METADATA),
                      op(GRPC_OP_SEND_MESSAGE), op(GRPC_OP_SEND_CLOSE_FROM_CLIENT)};
    ops[1].data.recv_initial_metadata.recv_initial_metadata = &initial;
    /* The request: whole, or chunk by chunk, one send at a time. */
    for (size_t k = 0; k < (streamed_in ? n : 1); k++) {
        int last = !streamed_in || k + 1 == n;
        grpc_byte_buffer *bb =
            grpc_raw_byte_buffer_create(streamed_in ? &c->chunks[k] : &c->whole, 1);
        ops[2].data.send_message.send_message = bb;
        grpc_op *from = k == 0 ? ops : ops + 2;
        size_t count = (k == 0 ? 3 : 1) + (last ? 1 : 0);
        step = "send";
        int sent = start_batch(call, from, count, TAG_FIRST) == 0 &&
                   wait_tag(&c->q, TAG_FIRST, deadline) == 0;
        grpc_byte_buffer_destroy(bb);
        if (!sent) goto fail;
    }
    /* The reply: each message copied while the next one arrives. */
    step = "receive";
    grpc_op r = op(GRPC_OP_RECV_MESSAGE);
    r.data.recv_message.recv_message = &msg;
    if (start_batch(call, &r, 1, TAG_RECV) < 0 || wait_tag(&c->q, TAG_RECV, deadline) < 0)
        goto fail;
    while (msg) {
        grpc_byte_buffer *got = msg;
        msg = NULL;
        int more = o->mode == MODE_STREAM || o->mode == MODE_STREAM_BOTH;
        if (more && start_batch(call, &r, 1, TAG_RECV) < 0) {
            grpc_byte_buffer_destroy(got);
            goto fail;
        }
        int bad = take_reply(c, got, &at) < 0;
        grpc_byte_buffer_destroy(got);
        if (!more) break;
        if (wait_tag(&c->q, TAG_RECV, deadline) < 0 || bad) goto fail;
    }
    step = "status";
    status_pending = 0;
    if (wait_tag(&c->q, TAG_STATUS, deadline) < 0) goto fail;
    rc = 0;
fail:
    if (rc < 0 || status != GRPC_STATUS_OK || at != payload) {
        char *why = grpc_slice_to_c_string(details);
        rc = dt_err_set(err, DT_EINTERNAL, "%s: %s: status %d (%s), reply of %zu bytes of %zu",
                        method_names[o->mode], step, (int)status, why, at, payload);
        gpr_free(why);
        grpc_call_cancel(call, NULL);
        /* The status ends the call once it is cancelled. */
        if (status_pending) wait_tag(&c->q, TAG_STATUS, deadline_in(o->timeout_ms));
    }
    if (msg) grpc_byte_buffer_destroy(msg);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&initial);
    grpc_metadata_array_destroy(&trailing);
    grpc_call_unref(call);
    return rc;
}

static void client_free(client *c) {
    if (c->chunks)
        for (size_t k = 0; k < num_chunks(c->o); k++)
            grpc_slice_unref(c->chunks[k]);
    free(c->chunks);
    grpc_slice_unref(c->whole);
    if (c->channel) grpc_channel_destroy(c->channel);
    if (c->q.cq) {
        grpc_completion_queue_shutdown(c->q.cq);
        while (grpc_completion_queue_next(c->q.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN) {
        }
        grpc_completion_queue_destroy(c->q.cq);
    }
    grpc_slice_unref(c->method);
    free(c->reply.pieces);
    free(c->w);
}

/* The gradient, and its messages: one of all of it, one per chunk (slices
 * of the same bytes: made once, sent every round). */
static int client_setup(client *c, const options *o, int index, float **grad) {
    size_t payload = (size_t)o->floats * 4, n = num_chunks(o);
    grpc_arg a[2];
    args_unlimited(a);
    grpc_channel_args args = {2, a};
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    c->channel = grpc_channel_create(o->addr, creds, &args);
    grpc_channel_credentials_release(creds);
    c->q.cq = grpc_completion_queue_create_for_next(NULL);
    c->method = grpc_slice_from_static_string(method_names[o->mode]);
    c->w = malloc(payload);
    c->chunks = calloc(n, sizeof *c->chunks);
    *grad = malloc(payload);
    if (!c->w || !c->chunks || !*grad) return -1;
    /* Small finite values, so w stays finite round after round. */
    for (int64_t i = 0; i < o->floats; i++)
        (*grad)[i] = (float)((i * 131 + index) % 17) * 0.001f;
    c->whole = grpc_slice_from_static_buffer(*grad, payload);
    for (size_t k = 0; k < n; k++)
        c->chunks[k] = grpc_slice_sub(c->whole, k * o->chunk, k * o->chunk + chunk_len(o, k));
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The best, 10th percentile and median of a client's n round times, on
 * stderr: what a round takes when the cores are free for it, which the
 * total under other load does not show. Sorts ms. */
static void print_round_times(int index, double *ms, int n) {
    if (!ms || n == 0) return;
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    fprintf(stderr, "bench_overlap: client %d: round ms best %.3f p10 %.3f median %.3f\n", index,
            ms[0], ms[n / 10], ms[n / 2]);
}

/* With one client the server's w is this client's alone: after `rounds`
 * updates from zero its values are those of the same float arithmetic done
 * here, and the reply copied last must hold them, every chunk in its place.
 * Checked at every 61st element and both ends of every chunk, so that the
 * check costs little beside the rounds (perf stat counts it); outside the
 * timed loop. */
static int check_values(const client *c, const float *grad, int rounds, dt_err *err) {
    size_t per_chunk = c->o->chunk / 4;
    for (int64_t i = 0; i < c->o->floats; i++) {
        size_t in_chunk = (size_t)i % per_chunk;
        if (i % 61 != 0 && in_chunk != 0 && in_chunk != per_chunk - 1) continue;
        float w = 0;
        for (int r = 0; r < rounds; r++)
            w = w - LR * grad[i];
        if (memcmp(&w, &c->w[i], sizeof w) != 0)
            return dt_err_set(err, DT_EINTERNAL, "values: w[%lld] is %g after %d rounds, want %g",
                              (long long)i, (double)c->w[i], rounds, (double)w);
    }
    return 0;
}

/* A client's whole life after the server is up (a dt_bench_client_fn). */
static void client_run(const void *arg, int index, dt_bench_start_fn start, void *start_ctx,
                       dt_bench_result *res) {
    const options *o = arg;
    dt_err err;
    dt_err_clear(&err);
    grpc_init();
    client c;
    memset(&c, 0, sizeof c);
    c.o = o;
    float *grad = NULL;
    double *round_ms = malloc((size_t)o->rounds * sizeof *round_ms); /* NULL: none printed */
    int rc = client_setup(&c, o, index, &grad) < 0
                 ? dt_err_set(&err, DT_ENOMEM, "client %d: no memory", index)
                 : client_round(&c, &err); /* warm-up: connects */
    if (start(start_ctx, rc == 0) && rc == 0) {
        double t0 = dt_bench_now_secs(), last = t0;
        for (int r = 0; r < o->rounds && rc == 0; r++) {
            rc = client_round(&c, &err);
            double now = dt_bench_now_secs();
            if (rc == 0 && round_ms) round_ms[res->rounds] = (now - last) * 1e3;
            last = now;
            if (rc == 0) res->rounds++;
        }
        res->seconds = dt_bench_now_secs() - t0;
        print_round_times(index, round_ms, (int)res->rounds);
        if (rc == 0 && o->clients == 1 && o->mode != MODE_ECHO_REF)
            rc = check_values(&c, grad, o->rounds + 1, &err);
    }
    res->rc = rc;
    snprintf(res->msg, sizeof res->msg, "%s", err.msg);
    client_free(&c);
    free(grad);
    free(round_ms);
    /* No grpc_shutdown: the process exits next (see bench_rawgrpc). */
}

/* ---- main ------------------------------------------------------------------ */

static const char usage[] =
    "usage: bench_overlap --addr HOST:PORT --floats N --rounds R\n"
    "                     [--mode echo-ref|work|stream|stream-both]\n"
    "                     [--chunk-kb K] [--clients C] [--apply-threads A]\n"
    "                     [--timeout-secs S]\n"
    "  Serves on HOST:PORT (must be free) with C threads and runs C client\n"
    "  processes (default 2) doing R rounds of N*4 bytes each way; stream modes\n"
    "  send K KiB a message (default 1024). A large check or update runs on A\n"
    "  threads (default 2, as a ps on 2 cores), by ranges as the ps does.\n";

static int mode_of(const char *name) {
    for (int m = 0; m <= MODE_STREAM_BOTH; m++)
        if (strcmp(name, mode_names[m]) == 0) return m;
    return -1;
}

static int parse_args(int argc, char **argv, options *o) {
    o->clients = 2;
    o->chunk = 1024 * 1024;
    o->apply_threads = 2;
    o->timeout_ms = 120 * 1000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_overlap: %s needs a value\n%s", a, usage);
            return -1;
        }
        const char *v = argv[++i];
        int64_t n = 0;
        if (strcmp(a, "--addr") == 0)
            o->addr = v;
        else if (strcmp(a, "--mode") == 0 && mode_of(v) >= 0)
            o->mode = mode_of(v);
        else if (strcmp(a, "--floats") == 0 && dt_bench_parse_int(v, 1, (int64_t)1 << 28, &n) == 0)
            o->floats = n;
        else if (strcmp(a, "--chunk-kb") == 0 && dt_bench_parse_int(v, 1, 1 << 20, &n) == 0)
            o->chunk = (size_t)n * 1024;
        else if (strcmp(a, "--rounds") == 0 && dt_bench_parse_int(v, 1, 1000000, &n) == 0)
            o->rounds = (int)n;
        else if (strcmp(a, "--clients") == 0 && dt_bench_parse_int(v, 1, MAX_CLIENTS, &n) == 0)
            o->clients = (int)n;
        else if (strcmp(a, "--apply-threads") == 0 && dt_bench_parse_int(v, 1, 4, &n) == 0)
            o->apply_threads = (int)n;
        else if (strcmp(a, "--timeout-secs") == 0 && dt_bench_parse_int(v, 1, 3600, &n) == 0)
            o->timeout_ms = (int)n * 1000;
        else {
            fprintf(stderr, "bench_overlap: bad flag or value: %s %s\n%s", a, v, usage);
            return -1;
        }
    }
    if (!o->addr || o->floats == 0 || o->rounds == 0) {
        fprintf(stderr, "bench_overlap: --addr, --floats and --rounds are required\n%s", usage);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    dt_bench_tune_allocator();
    options o;
    memset(&o, 0, sizeof o);
    if (parse_args(argc, argv, &o) < 0) return 2;
    signal(SIGPIPE, SIG_IGN);

    dt_err err;
    dt_err_clear(&err);
    int rc = 0;
    bench_server server;
    memset(&server, 0, sizeof server);
    dt_bench_child kids[MAX_CLIENTS];
    for (int i = 0; i < MAX_CLIENTS; i++)
        kids[i] = DT_BENCH_NO_CHILD;
    dt_bench_result res[MAX_CLIENTS];
    memset(res, 0, sizeof res);
    double seconds = 0;

    /* The clients are forked before this process starts gRPC. */
    if (dt_bench_spawn_children(o.clients, client_run, &o, kids) < 0) {
        rc = dt_err_set(&err, DT_EINTERNAL, "cannot start client processes: %s", strerror(errno));
        goto fail;
    }
    grpc_init();
    if ((rc = server_start(&o, &server, &err)) < 0) goto fail;
    rc = dt_bench_children_run(kids, o.clients, "client", res, &seconds, &err);
    for (int i = 0; i < o.clients && rc == 0; i++)
        rc = dt_bench_result_check(&res[i], "client", i, &err);
    if (rc < 0) goto fail;
    printf("overlap mode=%s floats=%lld rounds=%d clients=%d chunk_kb=%zu apply_threads=%d",
           mode_names[o.mode], (long long)o.floats, o.rounds, o.clients, o.chunk / 1024,
           o.apply_threads);
    dt_bench_print_rates((double)o.clients * o.rounds, o.floats, seconds);
    printf("\n");
fail:
    if (rc < 0) fprintf(stderr, "bench_overlap: %s\n", err.msg);
    dt_bench_stop_children(kids, o.clients);
    server_stop(&server);
    return rc < 0 ? 1 : 0;
}
