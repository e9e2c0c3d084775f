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
 * Two shapes of round:
 *   echo   one call: N*4 bytes in, the same N*4 bytes copied back out;
 *   split  two calls, shaped like Pull then Push: an 8-byte request answered
 *          with N*4 bytes (copied from a server-held buffer, as a Pull copies
 *          the variable), then N*4 bytes answered with 8 bytes.
 * Both move 2 * N * 4 payload bytes per round per client, the count
 * bench_pullpush uses; MB is 10^6 bytes. The request buffers are made once
 * and re-sent (the RPC layer only reads them); every reply is a fresh buffer,
 * as in the ps. The clock runs from the moment every client has warmed up to
 * the moment the last one finishes. Large buffers stay on the heap
 * (mallopt, as cmd/dtrain.c does), so the ceiling and dtrain are measured
 * with the same allocator.
 *
 * Threading: the server's pollers run the handlers; each client owns its
 * channel and buffers; the main thread only starts, times and joins. Client
 * processes are forked before this process starts gRPC (gRPC does not
 * survive a fork) and talk to it over pipes: 'C' (server up), 'R'/'F'
 * (warmed up or failed), 'S' (start), then a client_result. A child that
 * reads EOF (parent gone) exits; every call has a deadline.
 *
 * Output (stdout), one line:
 *   rawgrpc mode=M clients_as=K floats=N rounds=R clients=C threads=T
 *   seconds=S mb_per_s=X rounds_per_s=Y
 * Exit status: 0, 1 on any failure (message on stderr), 2 on usage errors.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "rpc_client.h"
#include "rpc_common.h"
#include "rpc_server.h"

#define MAX_CLIENTS 16
#define SMALL_BYTES 8

#define METHOD_ECHO "/dtrain.Bench/Echo"
#define METHOD_GET "/dtrain.Bench/Get"
#define METHOD_PUT "/dtrain.Bench/Put"

typedef struct {
    const char *addr;
    int split;      /* 0 echo, 1 split */
    int64_t floats; /* N */
    int rounds;     /* R per client */
    int clients;    /* C */
    int threads;    /* T server pollers */
    int processes;  /* 1: clients are forked processes */
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

/* What a client reports. */
typedef struct {
    int rc;         /* 0 or a dt_err_code */
    double seconds; /* its own loop time */
    char msg[DT_ERR_MSG_MAX];
} client_result;

static double now_secs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- server ---------------------------------------------------------------- */

static int handle_echo(void *ctx, const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    (void)ctx;
    int rc = dt_rpc_buf_alloc(reply, request->len, err);
    if (rc < 0) return rc;
    if (request->len > 0) memcpy(reply->data, request->data, request->len);
    return 0;
}

static int handle_get(void *ctx, const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    const server_ctx *s = ctx;
    if (request->len != SMALL_BYTES)
        return dt_err_set(err, DT_EINVAL, "get: request of %zu bytes, want %d", request->len,
                          SMALL_BYTES);
    int rc = dt_rpc_buf_alloc(reply, s->payload, err);
    if (rc < 0) return rc;
    memcpy(reply->data, s->held, s->payload);
    return 0;
}

static int handle_put(void *ctx, const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
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

/* One call; checks the reply's size; releases it. */
static int call_once(dt_rpc_channel *ch, const char *method, const dt_rpc_buf *request,
                     size_t want_reply, int timeout_ms, dt_err *err) {
    dt_rpc_call call;
    memset(&call, 0, sizeof call);
    call.channel = ch;
    call.method = method;
    call.request = request;
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
    if (!o->split) return call_once(ch, METHOD_ECHO, big, payload, o->timeout_ms, err);
    int rc = call_once(ch, METHOD_GET, small, payload, o->timeout_ms, err);
    if (rc == 0) rc = call_once(ch, METHOD_PUT, big, SMALL_BYTES, o->timeout_ms, err);
    return rc;
}

/* A client's whole life after the server is up: channel, warm-up call,
 * check in at the start line (wait_start: 1 run, 0 give up), R rounds. */
static void client_run(const options *o, int index, int (*wait_start)(void *ctx, int ok), void *ctx,
                       client_result *res) {
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
    if (wait_start(ctx, rc == 0) && rc == 0) {
        double t0 = now_secs();
        for (int r = 0; r < o->rounds && rc == 0; r++)
            rc = one_round(o, ch, &big, &small, &err);
        res->seconds = now_secs() - t0;
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
    client_result res;
} client_thread;

static void *client_thread_main(void *arg) {
    client_thread *ct = arg;
    client_run(ct->o, ct->index, gate_wait, ct->gate, &ct->res);
    return NULL;
}

/* Runs the clients as threads of this process; fills res and *seconds. */
static int run_threads(const options *o, client_result *res, double *seconds, dt_err *err) {
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
    double t0 = now_secs();
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    *seconds = now_secs() - t0;
    for (int i = 0; i < started; i++)
        res[i] = ct[i].res;
    return rc;
}

/* ---- clients as processes ---------------------------------------------------- */

static int write_full(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* 0 when len bytes were read; -1 on EOF or error. */
static int read_full(int fd, void *buf, size_t len) {
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int expect_byte(int fd, char want) {
    char got = 0;
    return read_full(fd, &got, 1) == 0 && got == want ? 0 : -1;
}

typedef struct {
    pid_t pid;
    int to_child;   /* write end */
    int from_child; /* read end */
} child;

typedef struct {
    int to_parent, from_parent;
} child_pipes;

/* The process client's start line: 'R' (or 'F') up, then wait for 'S'. */
static int pipe_wait(void *ctx, int ok) {
    child_pipes *cp = ctx;
    char ready = ok ? 'R' : 'F';
    if (write_full(cp->to_parent, &ready, 1) < 0) return 0;
    return ok && expect_byte(cp->from_parent, 'S') == 0;
}

/* Runs in the forked child: waits for 'C' (server up), runs, reports. */
static void client_process_main(const options *o, int index, int to_parent, int from_parent) {
    client_result res;
    memset(&res, 0, sizeof res);
    int status = 3; /* the parent went away */
    if (expect_byte(from_parent, 'C') == 0) {
        child_pipes cp = {to_parent, from_parent};
        client_run(o, index, pipe_wait, &cp, &res);
        status = res.rc == 0 ? 0 : 1;
        if (write_full(to_parent, &res, sizeof res) < 0) status = 3;
    }
    close(to_parent);
    close(from_parent);
    _exit(status);
}

/* Forks the client processes; must run before this process touches gRPC. */
static int spawn_clients(const options *o, child *kids) {
    fflush(NULL); /* nothing buffered may be written twice */
    for (int i = 0; i < o->clients; i++) {
        int down[2], up[2];
        if (pipe(down) != 0) return -1;
        if (pipe(up) != 0) {
            close(down[0]);
            close(down[1]);
            return -1;
        }
        pid_t pid = fork();
        if (pid < 0) {
            close(down[0]);
            close(down[1]);
            close(up[0]);
            close(up[1]);
            return -1;
        }
        if (pid == 0) {
            close(down[1]);
            close(up[0]);
            for (int k = 0; k < i; k++) {
                close(kids[k].to_child);
                close(kids[k].from_child);
            }
            client_process_main(o, i, up[1], down[0]);
        }
        close(down[0]);
        close(up[1]);
        kids[i].pid = pid;
        kids[i].to_child = down[1];
        kids[i].from_child = up[0];
    }
    return 0;
}

/* Closes the pipes (a child waiting on one then exits), gives the children
 * up to 2 s to end by themselves, then kills and reaps what is left. */
static void stop_children(child *kids, int n) {
    for (int i = 0; i < n; i++) {
        if (kids[i].to_child >= 0) close(kids[i].to_child);
        if (kids[i].from_child >= 0) close(kids[i].from_child);
        kids[i].to_child = kids[i].from_child = -1;
    }
    double deadline = now_secs() + 2.0;
    for (int i = 0; i < n; i++) {
        while (kids[i].pid > 0) {
            pid_t r = waitpid(kids[i].pid, NULL, WNOHANG);
            if (r == kids[i].pid || (r < 0 && errno != EINTR)) {
                kids[i].pid = -1;
            } else if (now_secs() >= deadline) {
                kill(kids[i].pid, SIGKILL);
                while (waitpid(kids[i].pid, NULL, 0) < 0 && errno == EINTR) {
                }
                kids[i].pid = -1;
            } else {
                struct timespec nap = {0, 10 * 1000000L};
                nanosleep(&nap, NULL);
            }
        }
    }
}

/* Drives forked clients once the server is up; fills res and *seconds. */
static int run_processes(const options *o, child *kids, client_result *res, double *seconds,
                         dt_err *err) {
    for (int i = 0; i < o->clients; i++)
        if (write_full(kids[i].to_child, "C", 1) < 0)
            return dt_err_set(err, DT_EINTERNAL, "client %d: gone before start", i);
    for (int i = 0; i < o->clients; i++)
        if (expect_byte(kids[i].from_child, 'R') < 0) {
            /* It failed its warm-up: its result follows. */
            if (read_full(kids[i].from_child, &res[i], sizeof res[i]) == 0 && res[i].rc < 0)
                return dt_err_set(err, res[i].rc, "client %d: warm-up: %s", i, res[i].msg);
            return dt_err_set(err, DT_EINTERNAL, "client %d: died during warm-up", i);
        }
    double t0 = now_secs();
    for (int i = 0; i < o->clients; i++)
        if (write_full(kids[i].to_child, "S", 1) < 0)
            return dt_err_set(err, DT_EINTERNAL, "client %d: gone before the loop", i);
    for (int i = 0; i < o->clients; i++)
        if (read_full(kids[i].from_child, &res[i], sizeof res[i]) < 0)
            return dt_err_set(err, DT_EINTERNAL, "client %d: died in the loop", i);
    *seconds = now_secs() - t0;
    return 0;
}

/* ---- main ------------------------------------------------------------------ */

static int parse_int(const char *text, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!*text || *end || errno || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static const char usage[] =
    "usage: bench_rawgrpc --addr HOST:PORT --floats N --rounds R [--mode echo|split]\n"
    "                     [--clients C] [--clients-as threads|processes]\n"
    "                     [--threads T] [--timeout-secs S]\n"
    "  Serves on HOST:PORT (must be free) and runs C clients (default 2 processes)\n"
    "  doing R rounds of N*4 bytes each way; T server poller threads (default 2).\n";

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
        else if (strcmp(a, "--mode") == 0 && (strcmp(v, "echo") == 0 || strcmp(v, "split") == 0))
            o->split = strcmp(v, "split") == 0;
        else if (strcmp(a, "--floats") == 0 && parse_int(v, 1, (int64_t)1 << 30, &n) == 0)
            o->floats = n;
        else if (strcmp(a, "--rounds") == 0 && parse_int(v, 1, 1000000, &n) == 0)
            o->rounds = (int)n;
        else if (strcmp(a, "--clients") == 0 && parse_int(v, 1, MAX_CLIENTS, &n) == 0)
            o->clients = (int)n;
        else if (strcmp(a, "--clients-as") == 0 &&
                 (strcmp(v, "threads") == 0 || strcmp(v, "processes") == 0))
            o->processes = strcmp(v, "processes") == 0;
        else if (strcmp(a, "--threads") == 0 && parse_int(v, 1, 64, &n) == 0)
            o->threads = (int)n;
        else if (strcmp(a, "--timeout-secs") == 0 && parse_int(v, 1, 3600, &n) == 0)
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

/* The allocator settings of cmd/dtrain.c, so these processes handle
 * message buffers as dtrain's roles do: above glibc's default 32 MB mmap
 * threshold every 40 MB buffer would be a fresh mmap, faulted in and
 * unmapped again, a cost real workers do not pay. */
static void tune_allocator(void) {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

int main(int argc, char **argv) {
    tune_allocator();
    options o;
    memset(&o, 0, sizeof o);
    if (parse_args(argc, argv, &o) < 0) return 2;
    signal(SIGPIPE, SIG_IGN);

    dt_err err;
    dt_err_clear(&err);
    int rc = 0;
    dt_rpc_server *server = NULL;
    child kids[MAX_CLIENTS];
    for (int i = 0; i < MAX_CLIENTS; i++)
        kids[i] = (child){-1, -1, -1};
    client_result res[MAX_CLIENTS];
    memset(res, 0, sizeof res);
    double seconds = 0;
    server_ctx sctx = {(size_t)o.floats * 4, NULL};
    uint8_t *held = NULL;

    if (o.processes && spawn_clients(&o, kids) < 0) {
        rc = dt_err_set(&err, DT_EINTERNAL, "cannot start client processes: %s", strerror(errno));
        goto fail;
    }
    /* gRPC starts only now, after every fork. */
    if (!(held = calloc(sctx.payload, 1))) {
        rc = dt_err_set(&err, DT_ENOMEM, "cannot hold %zu bytes", sctx.payload);
        goto fail;
    }
    sctx.held = held;
    static const dt_rpc_method methods[] = {
        {METHOD_ECHO, handle_echo},
        {METHOD_GET, handle_get},
        {METHOD_PUT, handle_put},
    };
    dt_rpc_server_params sp = {o.addr, o.threads, methods, 3, &sctx};
    if ((rc = dt_rpc_server_start(&sp, &server, &err)) < 0) goto fail;

    rc = o.processes ? run_processes(&o, kids, res, &seconds, &err)
                     : run_threads(&o, res, &seconds, &err);
    if (rc < 0) goto fail;
    for (int i = 0; i < o.clients; i++)
        if (res[i].rc < 0) {
            rc = dt_err_set(&err, res[i].rc, "client %d: %s", i, res[i].msg);
            goto fail;
        }

    double total_rounds = (double)o.clients * o.rounds;
    double bytes = total_rounds * 2.0 * (double)o.floats * 4.0;
    printf("rawgrpc mode=%s clients_as=%s floats=%lld rounds=%d clients=%d threads=%d "
           "seconds=%.3f mb_per_s=%.1f rounds_per_s=%.2f\n",
           o.split ? "split" : "echo", o.processes ? "processes" : "threads", (long long)o.floats,
           o.rounds, o.clients, o.threads, seconds, bytes / seconds / 1e6, total_rounds / seconds);
fail:
    if (rc < 0) fprintf(stderr, "bench_rawgrpc: %s\n", err.msg);
    stop_children(kids, o.clients);
    dt_rpc_server_stop(server, 1000);
    free(held);
    return rc < 0 ? 1 : 0;
}
