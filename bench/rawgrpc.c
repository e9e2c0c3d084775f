/*
 * bench_rawgrpc: the ceiling under bench_pullpush. The same payload sizes
 * through dtrain's RPC layer (rpc_server / rpc_client over the gRPC core)
 * with no codec, no variable store and no optimizer.
 *
 * A dt_rpc_server with T poller threads (default 2) and C clients (default
 * 2), each with its own channel, each doing R rounds after one warm-up call.
 * The clients are forked processes (--clients-as processes, the default:
 * the shape of bench_pullpush, one server process and one process per
 * worker), or threads of the server's process (--clients-as threads; on a
 * 2-core machine this is markedly slower, the runtime being shared).
 * Three shapes of round:
 *   echo-ref one call: N*4 bytes in, the same bytes back out without a copy
 *          on either side: the reply references the slices the request came
 *          in (dt_rpc_buf_share), and the client reads the reply in place,
 *          in its pieces, as dtrain's ps and ps client read and send. The
 *          reference dtrain's figures are compared with;
 *   echo   one call: N*4 bytes in, the same N*4 bytes copied back out (the
 *          request put together in one run first, and the client's reply
 *          too): the reference before dtrain read and sent in place;
 *   split  two calls, shaped like Pull then Push: an 8-byte request answered
 *          with N*4 bytes (copied from a server-held buffer, as a Pull copies
 *          the variable), then N*4 bytes answered with 8 bytes.
 * All move 2 * N * 4 payload bytes per round per client, the count
 * bench_pullpush uses; MB is 10^6 bytes. The request buffers are made once
 * and re-sent (the RPC layer only reads them); every reply is a fresh buffer,
 * as in the ps. The clock runs from the moment every client has warmed up to
 * the moment the last one finishes. Large buffers stay on the heap
 * (mallopt): the fresh payload-sized reply of every call is reused, not
 * mapped and faulted in each time, so the ceiling is measured at its best.
 *
 * Threading: the server's pollers run the handlers; each client owns its
 * channel and buffers; the main thread only starts, times and joins. Client
 * processes are forked before this process starts gRPC (gRPC does not
 * survive a fork) and talk to it over pipes (bench/common.h): 'C' (server up), 'R'/'F'
 * (warmed up or failed), 'S' (start), then a dt_bench_result. A child that
 * reads EOF (parent gone) exits; every call has a deadline.
 *
 * Output (stdout), one line:
 *   rawgrpc mode=M clients_as=K floats=N rounds=R clients=C threads=T
 *   seconds=S mb_per_s=X rounds_per_s=Y
 * Exit status: 0, 1 on any failure (message on stderr), 2 on usage errors.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "err.h"
#include "rpc_client.h"
#include "rpc_common.h"
#include "rpc_server.h"

#define MAX_CLIENTS 16
#define SMALL_BYTES 8

#define METHOD_ECHO "/dtrain.Bench/Echo"
#define METHOD_ECHO_REF "/dtrain.Bench/EchoRef"
#define METHOD_GET "/dtrain.Bench/Get"
#define METHOD_PUT "/dtrain.Bench/Put"

typedef enum { MODE_ECHO, MODE_SPLIT, MODE_ECHO_REF } round_mode;
static const char *const mode_names[] = {"echo", "split", "echo-ref"};

typedef struct {
    const char *addr;
    int mode;               /* round_mode */
    int64_t floats;         /* N */
    int rounds;             /* R per client */
    int clients;            /* C */
    int threads;            /* T server pollers */
    int processes;          /* 1: clients are processes of their own */
    int exec;               /* with processes: each exec'd anew, not a fork of the server's */
    const char *exec_child; /* this process is such a client: its --exec-child spec */
    int timeout_ms;
} options;

/* What the handlers share: the payload size and, for Get, the bytes served
 * (read-only once the server runs). */
typedef struct {
    size_t payload;      /* N * 4 */
    const uint8_t *held; /* (payload) Get's reply bytes */
} server_ctx;

/* The start line: clients check in when warmed up, then wait for `go`
 * (1 run, 2 give up). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready;
    int go;
} start_gate;

/* ---- server ---------------------------------------------------------------- */

static int handle_echo(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                       const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    (void)ctx;
    int rc = dt_rpc_buf_alloc(reply, request->len, err);
    if (rc < 0) return rc;
    if (request->len > 0) memcpy(reply->data, request->data, request->len);
    return 0;
}

/* The reply is the request's own slices, referenced (the server reads
 * requests in place for this mode). */
static int handle_echo_ref(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                           const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    (void)ctx;
    return dt_rpc_buf_share(reply, request, err);
}

static int handle_get(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                      const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    const server_ctx *s = ctx;
    if (request->len != SMALL_BYTES)
        return dt_err_set(err, DT_EINVAL, "get: request of %zu bytes, want %d", request->len,
                          SMALL_BYTES);
    int rc = dt_rpc_buf_alloc(reply, s->payload, err);
    if (rc < 0) return rc;
    memcpy(reply->data, s->held, s->payload);
    return 0;
}

static int handle_put(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                      const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    const server_ctx *s = ctx;
    if (request->len != s->payload)
        return dt_err_set(err, DT_EINVAL, "put: request of %zu bytes, want %zu", request->len,
                          s->payload);
    int rc = dt_rpc_buf_alloc(reply, SMALL_BYTES, err);
    if (rc < 0) return rc;
    memset(reply->data, 0, SMALL_BYTES);
    return 0;
}

/* ---- clients --------------------------------------------------------------- */

/* One call; checks the reply's size; releases it. With in_pieces the reply
 * is read in place, in the pieces it came in (no copy). */
static int call_once(dt_rpc_channel *ch, const char *method, const dt_rpc_buf *request,
                     size_t want_reply, int in_pieces, int timeout_ms, dt_err *err) {
    dt_rpc_call call;
    memset(&call, 0, sizeof call);
    call.channel = ch;
    call.method = method;
    call.request = request;
    call.in_pieces = in_pieces;
    int rc = dt_rpc_call_all(&call, 1, timeout_ms, err);
    if (rc == 0 && call.response.len != want_reply)
        rc = dt_err_set(err, DT_EINTERNAL, "%s: reply of %zu bytes, want %zu", method,
                        call.response.len, want_reply);
    dt_rpc_buf_release(&call.response);
    return rc;
}

static int one_round(const options *o, dt_rpc_channel *ch, const dt_rpc_buf *big,
                     const dt_rpc_buf *small, dt_err *err) {
    size_t payload = (size_t)o->floats * 4;
    if (o->mode == MODE_ECHO)
        return call_once(ch, METHOD_ECHO, big, payload, 0, o->timeout_ms, err);
    if (o->mode == MODE_ECHO_REF)
        return call_once(ch, METHOD_ECHO_REF, big, payload, 1, o->timeout_ms, err);
    int rc = call_once(ch, METHOD_GET, small, payload, 0, o->timeout_ms, err);
    if (rc == 0) rc = call_once(ch, METHOD_PUT, big, SMALL_BYTES, 0, o->timeout_ms, err);
    return rc;
}

/* A client's whole life after the server is up (a dt_bench_client_fn;
 * arg is the options): channel, warm-up call, the start line, R rounds. */
static void client_run(const void *arg, int index, dt_bench_start_fn start, void *start_ctx,
                       dt_bench_result *res) {
    const options *o = arg;
    dt_err err;
    dt_err_clear(&err);
    dt_rpc_channel *ch = NULL;
    dt_rpc_buf big = {0}, small = {0};
    int rc = dt_rpc_channel_new(o->addr, &ch, &err);
    if (rc == 0) rc = dt_rpc_buf_alloc(&big, (size_t)o->floats * 4, &err);
    if (rc == 0) rc = dt_rpc_buf_alloc(&small, SMALL_BYTES, &err);
    if (rc == 0) {
        /* Recognisable bytes, so the payload is not a page of zeros. */
        for (size_t i = 0; i < big.len; i++)
            big.data[i] = (uint8_t)(i * 131u + (size_t)index);
        memset(small.data, 0, small.len);
        rc = one_round(o, ch, &big, &small, &err); /* warm-up: connects */
    }
    /* Every client checks in, failed or not, so the main side never waits
     * forever. */
    if (start(start_ctx, rc == 0) && rc == 0) {
        double t0 = dt_bench_now_secs();
        for (int r = 0; r < o->rounds && rc == 0; r++) {
            rc = one_round(o, ch, &big, &small, &err);
            if (rc == 0) res->rounds++;
        }
        res->seconds = dt_bench_now_secs() - t0;
    }
    res->rc = rc;
    snprintf(res->msg, sizeof res->msg, "%s", err.msg);
    dt_rpc_buf_release(&big);
    dt_rpc_buf_release(&small);
    dt_rpc_channel_free(ch);
}

/* ---- clients as threads ------------------------------------------------------ */

static int gate_wait(void *ctx, int ok) {
    (void)ok;
    start_gate *g = ctx;
    pthread_mutex_lock(&g->mu);
    g->ready++;
    pthread_cond_broadcast(&g->cv);
    while (!g->go)
        pthread_cond_wait(&g->cv, &g->mu);
    int go = g->go;
    pthread_mutex_unlock(&g->mu);
    return go == 1;
}

typedef struct {
    const options *o;
    start_gate *gate;
    int index;
    dt_bench_result res;
} client_thread;

static void *client_thread_main(void *arg) {
    client_thread *ct = arg;
    client_run(ct->o, ct->index, gate_wait, ct->gate, &ct->res);
    return NULL;
}

/* Runs the clients as threads of this process; fills res and *seconds. */
static int run_threads(const options *o, dt_bench_result *res, double *seconds, dt_err *err) {
    pthread_t threads[MAX_CLIENTS];
    client_thread ct[MAX_CLIENTS];
    memset(ct, 0, sizeof ct);
    start_gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    int started = 0, rc = 0;
    for (int i = 0; i < o->clients; i++) {
        ct[i].o = o;
        ct[i].gate = &gate;
        ct[i].index = i;
        if (pthread_create(&threads[i], NULL, client_thread_main, &ct[i]) != 0) {
            rc = dt_err_set(err, DT_EINTERNAL, "cannot start client thread %d", i);
            break;
        }
        started++;
    }
    pthread_mutex_lock(&gate.mu);
    while (gate.ready < started)
        pthread_cond_wait(&gate.cv, &gate.mu);
    gate.go = rc == 0 ? 1 : 2;
    double t0 = dt_bench_now_secs();
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    *seconds = dt_bench_now_secs() - t0;
    for (int i = 0; i < started; i++)
        res[i] = ct[i].res;
    return rc;
}

/* ---- main ------------------------------------------------------------------ */

static const char usage[] =
    "usage: bench_rawgrpc --addr HOST:PORT --floats N --rounds R\n"
    "                     [--mode echo-ref|echo|split]\n"
    "                     [--clients C] [--clients-as threads|processes|exec]\n"
    "                     [--threads T] [--timeout-secs S]\n"
    "  Serves on HOST:PORT (must be free) and runs C clients (default 2 processes)\n"
    "  doing R rounds of N*4 bytes each way; T server poller threads (default 2).\n"
    "  exec: each client process runs this program anew (its libraries at\n"
    "  addresses of its own), not as a fork of the server's process.\n";

static int mode_of(const char *name) {
    for (int m = 0; m <= MODE_ECHO_REF; m++)
        if (strcmp(name, mode_names[m]) == 0) return m;
    return -1;
}

static int parse_args(int argc, char **argv, options *o) {
    o->clients = 2;
    o->threads = 2;
    o->processes = 1;
    o->timeout_ms = 120 * 1000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_rawgrpc: %s needs a value\n%s", a, usage);
            return -1;
        }
        const char *v = argv[++i];
        int64_t n = 0;
        if (strcmp(a, "--addr") == 0)
            o->addr = v;
        else if (strcmp(a, "--mode") == 0 && mode_of(v) >= 0)
            o->mode = mode_of(v);
        else if (strcmp(a, "--floats") == 0 && dt_bench_parse_int(v, 1, (int64_t)1 << 30, &n) == 0)
            o->floats = n;
        else if (strcmp(a, "--rounds") == 0 && dt_bench_parse_int(v, 1, 1000000, &n) == 0)
            o->rounds = (int)n;
        else if (strcmp(a, "--clients") == 0 && dt_bench_parse_int(v, 1, MAX_CLIENTS, &n) == 0)
            o->clients = (int)n;
        else if (strcmp(a, "--clients-as") == 0 &&
                 (strcmp(v, "threads") == 0 || strcmp(v, "processes") == 0 ||
                  strcmp(v, "exec") == 0)) {
            o->processes = strcmp(v, "threads") != 0;
            o->exec = strcmp(v, "exec") == 0;
        } else if (strcmp(a, "--exec-child") == 0)
            o->exec_child = v;
        else if (strcmp(a, "--threads") == 0 && dt_bench_parse_int(v, 1, 64, &n) == 0)
            o->threads = (int)n;
        else if (strcmp(a, "--timeout-secs") == 0 && dt_bench_parse_int(v, 1, 3600, &n) == 0)
            o->timeout_ms = (int)n * 1000;
        else {
            fprintf(stderr, "bench_rawgrpc: bad flag or value: %s %s\n%s", a, v, usage);
            return -1;
        }
    }
    if (!o->addr || o->floats == 0 || o->rounds == 0) {
        fprintf(stderr, "bench_rawgrpc: --addr, --floats and --rounds are required\n%s", usage);
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
    dt_rpc_server *server = NULL;
    dt_bench_child kids[MAX_CLIENTS];
    for (int i = 0; i < MAX_CLIENTS; i++)
        kids[i] = DT_BENCH_NO_CHILD;
    dt_bench_result res[MAX_CLIENTS];
    memset(res, 0, sizeof res);
    double seconds = 0;
    server_ctx sctx = {(size_t)o.floats * 4, NULL};
    uint8_t *held = NULL;

    /* A client exec'd by dt_bench_spawn_children_exec: only that. */
    if (o.exec_child) {
        dt_bench_exec_child(o.exec_child, client_run, &o);
        fprintf(stderr, "bench_rawgrpc: bad --exec-child %s\n", o.exec_child);
        return 2;
    }
    if (o.processes && (o.exec ? dt_bench_spawn_children_exec(o.clients, argc, argv, kids)
                               : dt_bench_spawn_children(o.clients, client_run, &o, kids)) < 0) {
        rc = dt_err_set(&err, DT_EINTERNAL, "cannot start client processes: %s", strerror(errno));
        goto fail;
    }
    /* gRPC starts only now, after every fork, and this process keeps a
     * reference until it exits (see child_main in common.c: the final
     * grpc_shutdown can take 10 s). */
    dt_rpc_init();
    if (!(held = calloc(sctx.payload, 1))) {
        rc = dt_err_set(&err, DT_ENOMEM, "cannot hold %zu bytes", sctx.payload);
        goto fail;
    }
    sctx.held = held;
    static const dt_rpc_method methods[] = {
        {METHOD_ECHO, handle_echo, 0, 0},
        {METHOD_GET, handle_get, 0, 0},
        {METHOD_PUT, handle_put, 0, 0},
        {METHOD_ECHO_REF, handle_echo_ref, 0, 0},
    };
    /* Requests read in place only for echo-ref: the other handlers read
     * request->data, one run. */
    dt_rpc_server_params sp = {.addr = o.addr,
                               .num_threads = o.threads,
                               .methods = methods,
                               .num_methods = 4,
                               .ctx = &sctx,
                               .in_pieces = o.mode == MODE_ECHO_REF};
    if ((rc = dt_rpc_server_start(&sp, &server, &err)) < 0) goto fail;

    rc = o.processes ? dt_bench_children_run(kids, o.clients, "client", res, &seconds, &err)
                     : run_threads(&o, res, &seconds, &err);
    for (int i = 0; i < o.clients && rc == 0; i++)
        rc = dt_bench_result_check(&res[i], "client", i, &err);
    if (rc < 0) goto fail;

    printf("rawgrpc mode=%s clients_as=%s floats=%lld rounds=%d clients=%d threads=%d",
           mode_names[o.mode],
           o.exec        ? "exec"
           : o.processes ? "processes"
                         : "threads",
           (long long)o.floats, o.rounds, o.clients, o.threads);
    dt_bench_print_rates((double)o.clients * o.rounds, o.floats, seconds);
    printf("\n");
fail:
    if (rc < 0) fprintf(stderr, "bench_rawgrpc: %s\n", err.msg);
    dt_bench_stop_children(kids, o.clients);
    dt_rpc_server_stop(server, 1000);
    free(held);
    return rc < 0 ? 1 : 0;
}
