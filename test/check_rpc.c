/*
 * rpc suite: a dt_rpc_server on a free loopback port with test handlers,
 * driven through dt_rpc_channel and dt_rpc_call_all. Covers echo, a 40 MB
 * payload, the mapping of handler errors to client codes with their
 * messages, unknown methods, unreachable peers, deadlines, handlers running
 * concurrently on two poller threads, an address already in use, and
 * stopping a server with a call in flight, and the resource limits: an
 * oversized message, and connections that stay silent, send half a
 * preface, idle, or answer no ping are closed.
 *
 * Every wait in a handler is bounded, so a broken server fails a test
 * instead of hanging it; tcase timeouts bound the rest.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pieces.h"
#include "proc.h"
#include "rpc_client.h"
#include "rpc_internal.h" /* dt_rpc_accept_failures */
#include "rpc_server.h"
#include "suites.h"

/* ---- helpers ----------------------------------------------------------- */

/* A new TCP socket, and *sa set to 127.0.0.1:port. */
static int loopback_socket(int port, struct sockaddr_in *sa) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa->sin_port = htons((uint16_t)port);
    return fd;
}

/* Shared by the handlers (the server's ctx). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int a_started;     /* set by A when it begins */
    int b_ran;         /* set by B, awaited by A */
    int sleep_started; /* set by Sleep when it begins */
    int sleep_done;
    int block_done;               /* set by Block when it returns */
    int released;                 /* set by the test: Block may return */
    dt_rpc_server *const *server; /* where dt_rpc_server_start puts the server */
} test_ctx;

static int reply_bytes(dt_rpc_buf *reply, const void *data, size_t len, dt_err *err) {
    int rc = dt_rpc_buf_alloc(reply, len, err);
    if (rc < 0) return rc;
    if (len) memcpy(reply->data, data, len);
    return 0;
}

static int handle_echo(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                       const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    (void)ctx;
    return reply_bytes(reply, request->data, request->len, err);
}

/* The request is a decimal dt_err code; fails with it. Allocates a reply
 * first, which the server must release (ASan's leak check says if not). */
static int handle_fail(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                       const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    (void)ctx;
    char text[32] = {0};
    memcpy(text, request->data, request->len < sizeof text - 1 ? request->len : sizeof text - 1);
    int code = atoi(text);
    if (reply_bytes(reply, "partial", 7, err) < 0) return err->code;
    return dt_err_set(err, code, "fail handler: asked for %s", dt_err_name(code));
}

/* The request is a decimal number of milliseconds to sleep. */
static int handle_sleep(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                        const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    test_ctx *t = ctx;
    char text[32] = {0};
    memcpy(text, request->data, request->len < sizeof text - 1 ? request->len : sizeof text - 1);
    pthread_mutex_lock(&t->mu);
    t->sleep_started = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    dt_test_sleep_ms(atoi(text));
    pthread_mutex_lock(&t->mu);
    t->sleep_done = 1;
    pthread_mutex_unlock(&t->mu);
    return reply_bytes(reply, "slept", 5, err);
}

/* With t->mu held: waits until *flag is set or secs have passed; returns
 * *flag. */
static int wait_flag_locked(test_ctx *t, const int *flag, int secs) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += secs;
    while (!*flag)
        if (pthread_cond_timedwait(&t->cv, &t->mu, &deadline) != 0) break;
    return *flag;
}

/* Returns once the test sets `released` (or after 20 s, so that a test
 * that failed before releasing it still stops): a handler still running
 * for as long as the test needs. */
static int handle_block(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                        const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    (void)request;
    test_ctx *t = ctx;
    pthread_mutex_lock(&t->mu);
    wait_flag_locked(t, &t->released, 20);
    t->block_done = 1;
    pthread_mutex_unlock(&t->mu);
    return reply_bytes(reply, "released", 8, err);
}

/* Answers "set" when the server the handler belongs to is already where
 * dt_rpc_server_start puts it, as a handler that reaches its server
 * through its ctx (the ps's Status) expects. */
static int handle_self(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                       const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    (void)request;
    const test_ctx *t = ctx;
    return *t->server ? reply_bytes(reply, "set", 3, err) : reply_bytes(reply, "unset", 5, err);
}

static void release_blocked(test_ctx *t) {
    pthread_mutex_lock(&t->mu);
    t->released = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* A waits (at most 3 s) for B to have run: it succeeds only when B ran
 * while A was still inside its handler, i.e. concurrently. */
static int handle_a(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                    const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    (void)request;
    test_ctx *t = ctx;
    pthread_mutex_lock(&t->mu);
    t->a_started = 1;
    pthread_cond_broadcast(&t->cv);
    int ran = wait_flag_locked(t, &t->b_ran, 3);
    pthread_mutex_unlock(&t->mu);
    if (!ran) return dt_err_set(err, DT_EINTERNAL, "A: B did not run while A waited 3 s");
    return reply_bytes(reply, "A", 1, err);
}

static int handle_b(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                    const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    (void)request;
    test_ctx *t = ctx;
    pthread_mutex_lock(&t->mu);
    t->b_ran = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return reply_bytes(reply, "B", 1, err);
}

static const dt_rpc_method methods[] = {
    {"/test.T/Echo", handle_echo, 0, 0},   {"/test.T/Fail", handle_fail, 0, 0},
    {"/test.T/Sleep", handle_sleep, 0, 0}, {"/test.T/A", handle_a, 0, 0},
    {"/test.T/B", handle_b, 0, 0},         {"/test.T/Block", handle_block, 0, 0},
    {"/test.T/Self", handle_self, 0, 0},
};
#define NUM_METHODS ((int)(sizeof methods / sizeof methods[0]))

/* A running server and a channel to it. */
typedef struct {
    test_ctx ctx;
    char addr[64];
    dt_rpc_server *server;
    dt_rpc_channel *channel;
} fixture;

/* Starts a server with the limits of `limits` (NULL: all defaults). */
static void fixture_start_limited(fixture *f, int threads, const dt_rpc_server_params *limits) {
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->ctx.mu, NULL);
    pthread_cond_init(&f->ctx.cv, NULL);
    f->ctx.server = &f->server;
    ck_assert_int_gt(dt_test_free_addr(f->addr, sizeof f->addr), 0);
    dt_rpc_server_params p;
    memset(&p, 0, sizeof p);
    if (limits) p = *limits;
    p.addr = f->addr;
    p.num_threads = threads;
    p.methods = methods;
    p.num_methods = NUM_METHODS;
    p.ctx = &f->ctx;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_rpc_server_start(&p, &f->server, &err);
    ck_assert_msg(rc == 0, "server start on %s: %s", f->addr, err.msg);
    rc = dt_rpc_channel_new(f->addr, &f->channel, &err);
    ck_assert_msg(rc == 0, "channel to %s: %s", f->addr, err.msg);
}

static void fixture_start(fixture *f, int threads) {
    fixture_start_limited(f, threads, NULL);
}

static void fixture_stop(fixture *f) {
    dt_rpc_channel_free(f->channel);
    dt_rpc_server_stop(f->server, 1000);
    pthread_mutex_destroy(&f->ctx.mu);
    pthread_cond_destroy(&f->ctx.cv);
}

static void buf_from(dt_rpc_buf *b, const void *data, size_t len) {
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_rpc_buf_alloc(b, len, &err), 0);
    if (len) memcpy(b->data, data, len);
}

static void buf_from_str(dt_rpc_buf *b, const char *s) {
    buf_from(b, s, strlen(s));
}

static void call_init(dt_rpc_call *c, dt_rpc_channel *ch, const char *method,
                      const dt_rpc_buf *request) {
    memset(c, 0, sizeof *c);
    c->channel = ch;
    c->method = method;
    c->request = request;
}

/* ---- tests ------------------------------------------------------------- */

START_TEST(test_echo) {
    fixture f;
    fixture_start(&f, 2);
    dt_rpc_buf req;
    buf_from_str(&req, "hello, ps");
    dt_rpc_call c;
    call_init(&c, f.channel, "/test.T/Echo", &req);
    c.wait_for_ready = 1;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_rpc_call_all(&c, 1, 5000, &err);
    ck_assert_msg(rc == 0, "echo: %s", err.msg);
    ck_assert_int_eq(c.err.code, DT_OK);
    ck_assert_uint_eq(c.response.len, 9);
    ck_assert(memcmp(c.response.data, "hello, ps", 9) == 0);
    dt_rpc_buf_release(&c.response);
    dt_rpc_buf_release(&c.response); /* twice is harmless */

    /* An empty message both ways. */
    dt_rpc_buf empty;
    buf_from(&empty, NULL, 0);
    ck_assert_ptr_null(empty.data);
    call_init(&c, f.channel, "/test.T/Echo", &empty);
    ck_assert_int_eq(dt_rpc_call_all(&c, 1, 5000, &err), 0);
    ck_assert_uint_eq(c.response.len, 0);
    dt_rpc_buf_release(&c.response);

    /* Three at once, through one batch. */
    dt_rpc_buf reqs[3];
    dt_rpc_call calls[3];
    const char *texts[3] = {"one", "two", "three"};
    for (int i = 0; i < 3; i++) {
        buf_from_str(&reqs[i], texts[i]);
        call_init(&calls[i], f.channel, "/test.T/Echo", &reqs[i]);
    }
    ck_assert_int_eq(dt_rpc_call_all(calls, 3, 5000, &err), 0);
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(calls[i].response.len, strlen(texts[i]));
        ck_assert(memcmp(calls[i].response.data, texts[i], strlen(texts[i])) == 0);
        dt_rpc_buf_release(&calls[i].response);
        dt_rpc_buf_release(&reqs[i]);
    }
    ck_assert_int_eq(dt_rpc_call_all(calls, 0, 5000, &err), 0);
    dt_rpc_buf_release(&req);
    dt_rpc_buf_release(&empty);
    fixture_stop(&f);
}
END_TEST

/* 40 MB: ten times gRPC's default 4 MiB receive cap, both directions. */
START_TEST(test_large_payload) {
    fixture f;
    fixture_start(&f, 2);
    const size_t len = 40u * 1000u * 1000u;
    dt_rpc_buf req;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_rpc_buf_alloc(&req, len, &err), 0);
    for (size_t i = 0; i < len; i++)
        req.data[i] = (uint8_t)((i * 2654435761u) >> 13);
    dt_rpc_call c;
    call_init(&c, f.channel, "/test.T/Echo", &req);
    c.wait_for_ready = 1;
    int rc = dt_rpc_call_all(&c, 1, 60000, &err);
    ck_assert_msg(rc == 0, "40 MB echo: %s", err.msg);
    ck_assert_uint_eq(c.response.len, len);
    ck_assert(memcmp(c.response.data, req.data, len) == 0);
    dt_rpc_buf_release(&c.response);
    dt_rpc_buf_release(&req);
    fixture_stop(&f);
}
END_TEST

START_TEST(test_handler_errors) {
    fixture f;
    fixture_start(&f, 2);
    /* DT_ECANCELLED is left out: a cancelled call reaches the client as
     * DT_EUNAVAILABLE (the peer went away), checked below. */
    const int codes[] = {DT_EINVAL, DT_EPRECOND, DT_ENOTFOUND, DT_EEXIST,
                         DT_EIO,    DT_ENOMEM,   DT_EINTERNAL};
    for (size_t k = 0; k < sizeof codes / sizeof codes[0]; k++) {
        char text[16];
        snprintf(text, sizeof text, "%d", codes[k]);
        dt_rpc_buf req;
        buf_from_str(&req, text);
        dt_rpc_call c;
        call_init(&c, f.channel, "/test.T/Fail", &req);
        c.wait_for_ready = 1;
        dt_err err;
        dt_err_clear(&err);
        int rc = dt_rpc_call_all(&c, 1, 5000, &err);
        ck_assert_msg(rc == codes[k], "code %d came back as %d (%s)", codes[k], rc, err.msg);
        ck_assert_int_eq(c.err.code, codes[k]);
        ck_assert_int_eq(err.code, codes[k]);
        char want[128];
        snprintf(want, sizeof want, "fail handler: asked for %s", dt_err_name(codes[k]));
        ck_assert_msg(strstr(err.msg, want) != NULL, "message \"%s\" lacks \"%s\"", err.msg, want);
        ck_assert_msg(strstr(err.msg, f.addr) && strstr(err.msg, "/test.T/Fail"),
                      "message \"%s\" does not name the peer and method", err.msg);
        ck_assert_str_eq(c.err.msg, err.msg);
        ck_assert_uint_eq(c.response.len, 0); /* no reply on failure */
        dt_rpc_buf_release(&c.response);
        dt_rpc_buf_release(&req);
    }
    /* CANCELLED means the peer went away under the call: retryable. */
    char text[16];
    snprintf(text, sizeof text, "%d", DT_ECANCELLED);
    dt_rpc_buf req;
    buf_from_str(&req, text);
    dt_rpc_call c;
    call_init(&c, f.channel, "/test.T/Fail", &req);
    c.wait_for_ready = 1;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_rpc_call_all(&c, 1, 5000, &err), DT_EUNAVAILABLE);
    ck_assert_msg(strstr(err.msg, "CANCELLED") != NULL, "message: %s", err.msg);
    dt_rpc_buf_release(&c.response);
    dt_rpc_buf_release(&req);
    fixture_stop(&f);
}
END_TEST

/* In a batch, the first failure is returned and each call keeps its own
 * outcome. */
START_TEST(test_mixed_batch) {
    fixture f;
    fixture_start(&f, 2);
    dt_rpc_buf ok, bad;
    buf_from_str(&ok, "fine");
    char text[16];
    snprintf(text, sizeof text, "%d", DT_ENOTFOUND);
    buf_from_str(&bad, text);
    dt_rpc_call c[3];
    call_init(&c[0], f.channel, "/test.T/Echo", &ok);
    call_init(&c[1], f.channel, "/test.T/Fail", &bad);
    call_init(&c[2], f.channel, "/test.T/Echo", &ok);
    for (int i = 0; i < 3; i++)
        c[i].wait_for_ready = 1;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_rpc_call_all(c, 3, 5000, &err), DT_ENOTFOUND);
    ck_assert_int_eq(c[0].err.code, DT_OK);
    ck_assert_int_eq(c[1].err.code, DT_ENOTFOUND);
    ck_assert_int_eq(c[2].err.code, DT_OK);
    ck_assert_uint_eq(c[0].response.len, 4);
    ck_assert_uint_eq(c[2].response.len, 4);
    ck_assert(strstr(err.msg, "asked for not found") != NULL);
    for (int i = 0; i < 3; i++)
        dt_rpc_buf_release(&c[i].response);
    dt_rpc_buf_release(&ok);
    dt_rpc_buf_release(&bad);
    fixture_stop(&f);
}
END_TEST

START_TEST(test_unknown_method) {
    fixture f;
    fixture_start(&f, 1);
    dt_rpc_buf req;
    buf_from_str(&req, "x");
    dt_rpc_call c;
    call_init(&c, f.channel, "/test.T/Nope", &req);
    c.wait_for_ready = 1;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_rpc_call_all(&c, 1, 5000, &err);
    ck_assert_int_lt(rc, 0);
    ck_assert_int_eq(rc, c.err.code);
    ck_assert_msg(strstr(err.msg, "/test.T/Nope") != NULL, "message: %s", err.msg);
    ck_assert_msg(strstr(err.msg, "unknown method") != NULL, "message: %s", err.msg);
    dt_rpc_buf_release(&c.response);
    /* The server still serves. */
    call_init(&c, f.channel, "/test.T/Echo", &req);
    ck_assert_int_eq(dt_rpc_call_all(&c, 1, 5000, &err), 0);
    dt_rpc_buf_release(&c.response);
    dt_rpc_buf_release(&req);
    fixture_stop(&f);
}
END_TEST

START_TEST(test_unreachable) {
    char addr[64];
    ck_assert_int_gt(dt_test_free_addr(addr, sizeof addr), 0);
    dt_rpc_channel *ch = NULL;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_rpc_channel_new(addr, &ch, &err), 0);
    dt_rpc_buf req;
    buf_from_str(&req, "anyone?");
    dt_rpc_call c;
    call_init(&c, ch, "/test.T/Echo", &req);
    /* Fail fast: UNAVAILABLE when no one listens, not DEADLINE_EXCEEDED
     * after waiting out the 3 s. */
    int rc = dt_rpc_call_all(&c, 1, 3000, &err);
    ck_assert_msg(rc == DT_EUNAVAILABLE, "rc %d (%s)", rc, err.msg);
    ck_assert_int_eq(c.err.code, DT_EUNAVAILABLE);
    ck_assert_msg(strstr(err.msg, addr) != NULL, "message \"%s\" lacks %s", err.msg, addr);
    dt_rpc_buf_release(&c.response);

    /* With wait_for_ready, the same call waits and ends at its deadline. */
    call_init(&c, ch, "/test.T/Echo", &req);
    c.wait_for_ready = 1;
    dt_err_clear(&err);
    rc = dt_rpc_call_all(&c, 1, 300, &err);
    ck_assert_msg(rc == DT_EDEADLINE || rc == DT_EUNAVAILABLE, "rc %d (%s)", rc, err.msg);
    ck_assert(strstr(err.msg, addr) != NULL);
    dt_rpc_buf_release(&c.response);
    dt_rpc_buf_release(&req);
    dt_rpc_channel_free(ch);
    dt_rpc_channel_free(NULL);
}
END_TEST

START_TEST(test_deadline) {
    fixture f;
    fixture_start(&f, 2);
    dt_rpc_buf req;
    buf_from_str(&req, "-");
    dt_rpc_call c;
    call_init(&c, f.channel, "/test.T/Block", &req);
    c.wait_for_ready = 1;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_rpc_call_all(&c, 1, 300, &err);
    /* The client gave up at its deadline, not when the handler returned:
     * the handler returns only once released, below. */
    pthread_mutex_lock(&f.ctx.mu);
    int handler_done = f.ctx.block_done;
    pthread_mutex_unlock(&f.ctx.mu);
    ck_assert_msg(!handler_done, "the call returned only after its handler finished");
    ck_assert_msg(rc == DT_EDEADLINE, "rc %d (%s)", rc, err.msg);
    ck_assert_msg(strstr(err.msg, "deadline exceeded after 300 ms") && strstr(err.msg, f.addr),
                  "message: %s", err.msg);
    dt_rpc_buf_release(&c.response);
    dt_rpc_buf_release(&req);
    release_blocked(&f.ctx);
    fixture_stop(&f); /* waits for the handler */
}
END_TEST

/* dt_rpc_server_start stores the server before any poller runs, so a
 * handler reading it through its ctx finds it set (and, under TSan, the
 * write and the read are ordered: before the fix they raced whenever a
 * call came in, the ps's Status among them). */
START_TEST(test_server_set_before_handlers) {
    fixture f;
    fixture_start(&f, 2);
    dt_rpc_buf req;
    buf_from_str(&req, "-");
    dt_rpc_call c;
    call_init(&c, f.channel, "/test.T/Self", &req);
    c.wait_for_ready = 1;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_rpc_call_all(&c, 1, 5000, &err) == 0, "self: %s", err.msg);
    ck_assert_msg(c.response.len == 3 && memcmp(c.response.data, "set", 3) == 0,
                  "the handler found no server in its ctx");
    dt_rpc_buf_release(&c.response);
    dt_rpc_buf_release(&req);
    fixture_stop(&f);
}
END_TEST

/* A waits for B; both succeed only if the two handlers overlapped in time
 * on the two poller threads. Which thread gets a call may depend on the
 * connection, so a few rounds, each with a fresh server and connection. */
START_TEST(test_concurrent_handlers) {
    for (int round = 0; round < 10; round++) {
        fixture f;
        fixture_start(&f, 2);
        dt_rpc_buf req;
        buf_from_str(&req, "-");
        dt_rpc_call c[2];
        call_init(&c[0], f.channel, "/test.T/A", &req);
        call_init(&c[1], f.channel, "/test.T/B", &req);
        c[0].wait_for_ready = c[1].wait_for_ready = 1;
        dt_err err;
        dt_err_clear(&err);
        int rc = dt_rpc_call_all(c, 2, 15000, &err);
        ck_assert_msg(rc == 0, "round %d: A: %s / B: %s", round, c[0].err.msg, c[1].err.msg);
        ck_assert(c[0].response.len == 1 && c[0].response.data[0] == 'A');
        ck_assert(c[1].response.len == 1 && c[1].response.data[0] == 'B');
        for (int i = 0; i < 2; i++)
            dt_rpc_buf_release(&c[i].response);
        dt_rpc_buf_release(&req);
        fixture_stop(&f);
    }
}
END_TEST

typedef struct {
    dt_rpc_channel *channel;
    int rc;
    dt_err err;
} a_caller;

static void *call_a(void *arg) {
    a_caller *a = arg;
    dt_rpc_buf req;
    dt_err_clear(&a->err);
    if ((a->rc = dt_rpc_buf_alloc(&req, 1, &a->err)) < 0) return NULL;
    req.data[0] = '-';
    dt_rpc_call c;
    call_init(&c, a->channel, "/test.T/A", &req);
    c.wait_for_ready = 1;
    a->rc = dt_rpc_call_all(&c, 1, 15000, &a->err);
    dt_rpc_buf_release(&c.response);
    dt_rpc_buf_release(&req);
    return NULL;
}

/* The same, with B sent only once A's handler is running: a server that
 * keeps every call of a connection on one poller thread fails this every
 * time, not just when two calls happen to race. */
START_TEST(test_concurrent_handlers_staggered) {
    fixture f;
    fixture_start(&f, 2);
    a_caller a;
    memset(&a, 0, sizeof a);
    a.channel = f.channel;
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, call_a, &a), 0);
    pthread_mutex_lock(&f.ctx.mu);
    int started = wait_flag_locked(&f.ctx, &f.ctx.a_started, 10);
    pthread_mutex_unlock(&f.ctx.mu);
    ck_assert_msg(started, "handler A never started");
    dt_rpc_buf req;
    buf_from_str(&req, "-");
    dt_rpc_call c;
    call_init(&c, f.channel, "/test.T/B", &req);
    c.wait_for_ready = 1;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_rpc_call_all(&c, 1, 15000, &err);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_msg(rc == 0, "B: %s", err.msg);
    ck_assert_msg(a.rc == 0, "A: %s", a.err.msg);
    dt_rpc_buf_release(&c.response);
    dt_rpc_buf_release(&req);
    fixture_stop(&f);
}
END_TEST

START_TEST(test_address_in_use) {
    fixture f;
    fixture_start(&f, 1);
    dt_rpc_server *again = NULL;
    dt_rpc_server_params p = {
        .addr = f.addr, .num_threads = 1, .methods = methods, .num_methods = 1};
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_rpc_server_start(&p, &again, &err);
    ck_assert_msg(rc == DT_EUNAVAILABLE, "second server on %s: rc %d (%s)", f.addr, rc, err.msg);
    ck_assert_ptr_null(again);
    ck_assert_msg(strstr(err.msg, f.addr) != NULL, "message: %s", err.msg);
    fixture_stop(&f);

    /* A port held by a plain listening socket. */
    int port = -1;
    int fd = dt_test_listen_port(&port);
    ck_assert_int_ge(fd, 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    p.addr = addr;
    dt_err_clear(&err);
    rc = dt_rpc_server_start(&p, &again, &err);
    ck_assert_msg(rc == DT_EUNAVAILABLE, "server on held %s: rc %d (%s)", addr, rc, err.msg);
    ck_assert_ptr_null(again);
    ck_assert(strstr(err.msg, addr) != NULL);
    close(fd);
}
END_TEST

START_TEST(test_bad_params) {
    dt_rpc_server *s = NULL;
    dt_rpc_server_params p = {
        .addr = "127.0.0.1:0", .num_threads = 0, .methods = methods, .num_methods = 1};
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_rpc_server_start(&p, &s, &err), DT_EINVAL);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err.msg, "threads") != NULL, "message: %s", err.msg);
    dt_rpc_server_stop(NULL, 0);

    dt_rpc_buf b;
    ck_assert_int_eq(dt_rpc_buf_alloc(&b, 0, &err), 0);
    ck_assert(b.data == NULL && b.len == 0 && b.impl == NULL);
    dt_rpc_buf_release(&b);
    dt_rpc_buf_release(NULL);
}
END_TEST

typedef struct {
    dt_rpc_channel *channel;
    int rc;
    dt_err err;
} sleeper;

static void *call_sleep(void *arg) {
    sleeper *s = arg;
    dt_rpc_buf req;
    dt_err_clear(&s->err);
    if (dt_rpc_buf_alloc(&req, 4, &s->err) < 0) {
        s->rc = s->err.code;
        return NULL;
    }
    memcpy(req.data, "1500", 4);
    dt_rpc_call c;
    call_init(&c, s->channel, "/test.T/Sleep", &req);
    c.wait_for_ready = 1;
    s->rc = dt_rpc_call_all(&c, 1, 20000, &s->err);
    dt_rpc_buf_release(&c.response);
    dt_rpc_buf_release(&req);
    return NULL;
}

/* Stopping with a call in flight: the handler runs out (or the call is
 * cancelled), the client's call ends, and stop returns, all well within
 * the client's 20 s deadline. */
START_TEST(test_stop_with_call_in_flight) {
    fixture f;
    fixture_start(&f, 1);
    sleeper s;
    memset(&s, 0, sizeof s);
    s.channel = f.channel;
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, call_sleep, &s), 0);
    /* Wait (bounded) until the handler is running. */
    pthread_mutex_lock(&f.ctx.mu);
    int started = wait_flag_locked(&f.ctx, &f.ctx.sleep_started, 10);
    pthread_mutex_unlock(&f.ctx.mu);
    ck_assert_msg(started, "the Sleep handler never started");

    /* Stop returns and the in-flight call ends (a hang fails the case by
     * its 60 s timeout). */
    dt_rpc_server_stop(f.server, 100);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_msg(s.rc == 0 || s.rc == DT_EUNAVAILABLE || s.rc == DT_ECANCELLED,
                  "in-flight call: rc %d (%s)", s.rc, s.err.msg);
    ck_assert(f.ctx.sleep_done);

    /* A call after stop finds no one. */
    dt_rpc_buf req;
    buf_from_str(&req, "late");
    dt_rpc_call c;
    call_init(&c, f.channel, "/test.T/Echo", &req);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_rpc_call_all(&c, 1, 3000, &err), DT_EUNAVAILABLE);
    dt_rpc_buf_release(&c.response);
    dt_rpc_buf_release(&req);
    dt_rpc_channel_free(f.channel);
    pthread_mutex_destroy(&f.ctx.mu);
    pthread_cond_destroy(&f.ctx.cv);
}
END_TEST

/* The client gives up and goes away while handlers still sleep on both
 * poller threads (more calls than one thread has armed, so they spill over
 * to the second). Stop must outlive every handler: a handler that returns
 * after its queue was shut down would abort the process. */
START_TEST(test_stop_after_client_gone) {
    fixture f;
    fixture_start(&f, 2);
    enum { N = 12 };
    dt_rpc_buf reqs[N];
    dt_rpc_call c[N];
    for (int i = 0; i < N; i++) {
        buf_from_str(&reqs[i], i < N / 2 ? "300" : "1500");
        call_init(&c[i], f.channel, "/test.T/Sleep", &reqs[i]);
        c[i].wait_for_ready = 1;
    }
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_rpc_call_all(c, N, 200, &err), DT_EDEADLINE);
    for (int i = 0; i < N; i++) {
        dt_rpc_buf_release(&c[i].response);
        dt_rpc_buf_release(&reqs[i]);
    }
    dt_rpc_channel_free(f.channel);
    /* Stop returns with calls whose clients gave up still in handlers (a
     * hang fails the case by its timeout). */
    dt_rpc_server_stop(f.server, 100);
    pthread_mutex_destroy(&f.ctx.mu);
    pthread_cond_destroy(&f.ctx.cv);
}
END_TEST

/* A server restarted on the same port is found again by the old channel. */
START_TEST(test_reconnect) {
    fixture f;
    fixture_start(&f, 1);
    dt_rpc_buf req;
    buf_from_str(&req, "again");
    dt_rpc_call c;
    call_init(&c, f.channel, "/test.T/Echo", &req);
    c.wait_for_ready = 1;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_rpc_call_all(&c, 1, 5000, &err), 0);
    dt_rpc_buf_release(&c.response);
    dt_rpc_server_stop(f.server, 100);
    dt_rpc_server_params p = {.addr = f.addr,
                              .num_threads = 1,
                              .methods = methods,
                              .num_methods = NUM_METHODS,
                              .ctx = &f.ctx};
    int rc = dt_rpc_server_start(&p, &f.server, &err);
    ck_assert_msg(rc == 0, "restart on %s: %s", f.addr, err.msg);
    call_init(&c, f.channel, "/test.T/Echo", &req);
    c.wait_for_ready = 1;
    rc = dt_rpc_call_all(&c, 1, 5000, &err);
    ck_assert_msg(rc == 0, "after restart: %s", err.msg);
    ck_assert_uint_eq(c.response.len, 5);
    dt_rpc_buf_release(&c.response);
    dt_rpc_buf_release(&req);
    fixture_stop(&f);
}
END_TEST

/* ---- resource limits --------------------------------------------------- */

/* An echo of len bytes; returns the call's code, message in *err. */
static int echo_len(fixture *f, size_t len, dt_err *err) {
    dt_rpc_buf req;
    ck_assert_int_eq(dt_rpc_buf_alloc(&req, len, err), 0);
    if (len) memset(req.data, 0x5a, len);
    dt_rpc_call c;
    call_init(&c, f->channel, "/test.T/Echo", &req);
    c.wait_for_ready = 1;
    dt_err_clear(err);
    int rc = dt_rpc_call_all(&c, 1, 20000, err);
    if (rc == 0) ck_assert_uint_eq(c.response.len, len);
    dt_rpc_buf_release(&c.response);
    dt_rpc_buf_release(&req);
    return rc;
}

/* A request over max_message_bytes is refused with RESOURCE_EXHAUSTED and
 * the server goes on serving; one exactly at the cap passes. */
START_TEST(test_message_too_large) {
    fixture f;
    dt_rpc_server_params limits = {.max_message_bytes = 1 << 20};
    fixture_start_limited(&f, 2, &limits);
    dt_err err;
    ck_assert_int_eq(echo_len(&f, 16, &err), 0);
    int rc = echo_len(&f, (1u << 20) + 1, &err);
    ck_assert_msg(rc == DT_ENOMEM, "1 MiB + 1 came back as %d (%s)", rc, err.msg);
    ck_assert_msg(strstr(err.msg, "RESOURCE_EXHAUSTED") != NULL, "message: %s", err.msg);
    rc = echo_len(&f, 8u << 20, &err);
    ck_assert_msg(rc == DT_ENOMEM && strstr(err.msg, "RESOURCE_EXHAUSTED"), "8 MiB: %d %s", rc,
                  err.msg);
    rc = echo_len(&f, 1u << 20, &err);
    ck_assert_msg(rc == 0, "exactly 1 MiB: %s", err.msg);
    rc = echo_len(&f, 5, &err);
    ck_assert_msg(rc == 0, "after the refusals: %s", err.msg);
    fixture_stop(&f);
}
END_TEST

START_TEST(test_bad_limits) {
    dt_rpc_server *s = NULL;
    dt_rpc_server_params p = {.addr = "127.0.0.1:0",
                              .num_threads = 1,
                              .methods = methods,
                              .num_methods = 1,
                              .max_message_bytes = 1LL << 40};
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_rpc_server_start(&p, &s, &err), DT_EINVAL);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err.msg, "max_message_bytes") != NULL, "message: %s", err.msg);
    p.max_message_bytes = 0;
    p.handshake_timeout_ms = -1;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_rpc_server_start(&p, &s, &err), DT_EINVAL);
    ck_assert_ptr_null(s);
}
END_TEST

/* A raw TCP connection to f's server that first sends `len` bytes of
 * `data`; returns the socket. */
static int raw_connect(const fixture *f, const void *data, size_t len) {
    struct sockaddr_in sa;
    int fd = loopback_socket(atoi(strrchr(f->addr, ':') + 1), &sa);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    if (len) ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
    return fd;
}

/* Reads (and drops) what the server sends until it closes fd: 1 when it
 * did (EOF or reset) within timeout_ms, 0 when the deadline passed. */
static int closed_by_server(int fd, int timeout_ms) {
    long long deadline = dt_test_now_ms() + timeout_ms;
    for (;;) {
        long long left = deadline - dt_test_now_ms();
        if (left <= 0) return 0;
        struct pollfd pfd = {fd, POLLIN, 0};
        int n = poll(&pfd, 1, (int)left);
        if (n < 0 && errno == EINTR) continue;
        ck_assert_int_ge(n, 0);
        if (n == 0) return 0;
        char buf[4096];
        ssize_t got = read(fd, buf, sizeof buf);
        if (got == 0 || (got < 0 && errno == ECONNRESET)) return 1;
        ck_assert_msg(got > 0, "read: %s", strerror(errno));
    }
}

#define PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
/* An empty SETTINGS frame: length 0, type 4, flags 0, stream 0. */
static const unsigned char empty_settings[9] = {0, 0, 0, 4, 0, 0, 0, 0, 0};

/* A connection that sends nothing, or only half the HTTP/2 preface, is
 * closed at the handshake deadline; the server still serves after. */
START_TEST(test_silent_connection_closed) {
    fixture f;
    dt_rpc_server_params limits = {.handshake_timeout_ms = 300};
    fixture_start_limited(&f, 1, &limits);
    int silent = raw_connect(&f, NULL, 0);
    int half = raw_connect(&f, PREFACE, 12);
    ck_assert_msg(closed_by_server(silent, 10000), "a silent connection stayed open");
    ck_assert_msg(closed_by_server(half, 10000), "a half-preface connection stayed open");
    close(silent);
    close(half);
    dt_err err;
    ck_assert_msg(echo_len(&f, 5, &err) == 0, "after: %s", err.msg);
    fixture_stop(&f);
}
END_TEST

/* Starts a server with `limits`, opens a raw connection that completes the
 * preface and SETTINGS and then neither calls nor answers anything, and
 * asserts the server closes it and still serves afterwards. */
static void assert_quiet_peer_closed(const dt_rpc_server_params *limits, const char *what) {
    fixture f;
    fixture_start_limited(&f, 1, limits);
    int fd = raw_connect(&f, PREFACE, strlen(PREFACE));
    ck_assert_int_eq(write(fd, empty_settings, sizeof empty_settings), 9);
    ck_assert_msg(closed_by_server(fd, 10000), "%s stayed open", what);
    close(fd);
    dt_err err;
    ck_assert_msg(echo_len(&f, 5, &err) == 0, "after: %s", err.msg);
    fixture_stop(&f);
}

/* A connection that makes no call is closed once idle (keepalive at its
 * default of a minute cannot be what closes it). */
START_TEST(test_idle_connection_closed) {
    dt_rpc_server_params limits = {.idle_timeout_ms = 300};
    assert_quiet_peer_closed(&limits, "an idle connection");
}
END_TEST

/* A peer that answers no ping (as a half-open connection would) is closed
 * after one unanswered keepalive ping, with no idle timeout. */
START_TEST(test_unresponsive_peer_closed) {
    dt_rpc_server_params limits = {
        .idle_timeout_ms = -1, .keepalive_time_ms = 200, .keepalive_timeout_ms = 200};
    assert_quiet_peer_closed(&limits, "an unresponsive peer");
}
END_TEST

/* gRPC 1.51 stops accepting for good after an accept fails with EMFILE, so
 * the server raises the descriptor soft limit to the hard one at start. */
START_TEST(test_fd_limit_raised) {
    struct rlimit rl;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_max > 256) {
        struct rlimit low = {256, rl.rlim_max};
        ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    }
    fixture f;
    fixture_start(&f, 1);
    struct rlimit now;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &now), 0);
    ck_assert_uint_eq(now.rlim_cur, rl.rlim_max);
    fixture_stop(&f);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
}
END_TEST

/* Reads exactly len bytes from fd within timeout_ms; returns how many came
 * (fewer: the deadline passed or the peer closed). */
static size_t read_within(int fd, unsigned char *buf, size_t len, int timeout_ms) {
    long long deadline = dt_test_now_ms() + timeout_ms;
    size_t got = 0;
    while (got < len) {
        long long left = deadline - dt_test_now_ms();
        if (left <= 0) break;
        struct pollfd pfd = {fd, POLLIN, 0};
        int n = poll(&pfd, 1, (int)left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        ssize_t r = read(fd, buf + got, len - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    return got;
}

/* Descriptors in use by this process. */
static int open_fds(void) {
    int n = 0;
    for (int fd = 0; fd < 4096; fd++)
        if (fcntl(fd, F_GETFD) >= 0) n++;
    return n;
}

/* The process runs out of descriptors with connections queued at the
 * server, so gRPC's accept fails (EMFILE) and its listener gives up. Once
 * descriptors are free again the server must listen again: a new channel
 * gets the server's SETTINGS, and the old channel (told to reconnect) is
 * served. The soft limit is
 * lowered after the server started (its start raises it) and restored. */
START_TEST(test_listens_again_after_emfile) {
    fixture f;
    fixture_start(&f, 2);
    dt_err err;
    ck_assert_msg(echo_len(&f, 5, &err) == 0, "before: %s", err.msg);
    struct rlimit saved;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &saved), 0);
    struct rlimit low = {(rlim_t)open_fds() + 24, saved.rlim_max};
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    enum { MAX_CONNS = 64 };
    int conns[MAX_CONNS], n = 0;
    struct sockaddr_in sa;
    close(loopback_socket(atoi(strrchr(f.addr, ':') + 1), &sa));
    /* Fill the table; then free one descriptor at a time and take it for a
     * new connection, until the server's accept finds none left (gRPC's
     * log line for it is counted), within a deadline. */
    int failures = dt_rpc_accept_failures();
    long long deadline = dt_test_now_ms() + 10000;
    while (dt_rpc_accept_failures() == failures) {
        ck_assert_msg(dt_test_now_ms() < deadline,
                      "%d connections: the server's accept never failed", n);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            ck_assert_int_eq(errno, EMFILE);
            ck_assert_int_gt(n, 0);
            close(conns[--n]);
            dt_test_sleep_ms(20); /* poll interval: the server may take the one freed */
            continue;
        }
        ck_assert_int_lt(n, MAX_CONNS);
        ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "connect: %s",
                      strerror(errno));
        conns[n++] = fd;
    }
    for (int i = 0; i < n; i++)
        close(conns[i]);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &saved), 0);

    /* A new connection (channels to one address share gRPC's connection,
     * so a raw one): the server answers the preface with its SETTINGS. */
    int answered = 0;
    for (long long until = dt_test_now_ms() + 20000; !answered && dt_test_now_ms() < until;) {
        /* One made before the server listens again waits in the old
         * socket's queue and is reset when that closes: try again. */
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        unsigned char frame[9];
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) { /* between the two */
            close(fd);
            dt_test_sleep_ms(200); /* the poll interval of a bounded wait */
            continue;
        }
        answered = send(fd, PREFACE, strlen(PREFACE), MSG_NOSIGNAL) == (ssize_t)strlen(PREFACE) &&
                   send(fd, empty_settings, sizeof empty_settings, MSG_NOSIGNAL) == 9 &&
                   read_within(fd, frame, sizeof frame, 2000) == 9 && frame[3] == 4;
        close(fd);
    }
    ck_assert_msg(answered, "no new connection got a SETTINGS frame within 20 s after the "
                            "descriptors ran out");
    int served = -1;
    for (int tries = 0; tries < 3 && served != 0; tries++)
        served = echo_len(&f, 5, &err);
    ck_assert_msg(served == 0, "the old channel after the server listened again: %s", err.msg);
    fixture_stop(&f);
}
END_TEST

/* ---- messages read in pieces ------------------------------------------- */

/* The bytes of a span, read element by element, with how many runs came
 * from the reader's carry (an element split between pieces). */
static size_t read_span(const dt_span *sp, size_t elem, uint8_t *out, int *carried) {
    dt_span_reader r;
    dt_span_reader_init(&r, sp, elem);
    size_t n, total = 0;
    const uint8_t *run;
    *carried = 0;
    while ((run = dt_span_reader_next(&r, &n)) != NULL) {
        ck_assert_uint_gt(n, 0);
        if (run == r.carry) {
            ck_assert_uint_eq(n, 1);
            (*carried)++;
        }
        memcpy(out + total, run, n * elem);
        total += n * elem;
    }
    ck_assert_uint_eq(n, 0);
    return total;
}

/* A message of 1..7-byte pieces (a real gRPC byte buffer, read in place):
 * its pieces are the bytes in order, and a reader of any span of it, in
 * elements of 1, 4 or 8 bytes from any offset, yields exactly those bytes,
 * an element split between pieces put back together. */
START_TEST(test_reader_over_tiny_pieces) {
    enum { LEN = 4099 };
    uint8_t *bytes = malloc(LEN), *out = malloc(LEN);
    ck_assert(bytes && out);
    for (int i = 0; i < LEN; i++)
        bytes[i] = (uint8_t)(i * 131 + 7);
    dt_rpc_buf b;
    dt_test_in_pieces(bytes, LEN, 12345, &b);
    ck_assert_uint_eq(b.len, LEN);
    ck_assert_ptr_null(b.data);
    ck_assert_int_gt(b.num_pieces, LEN / 7);
    dt_piece one;
    const dt_piece *pieces;
    int n = dt_rpc_buf_pieces(&b, &one, &pieces);
    ck_assert_int_eq(n, b.num_pieces);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        ck_assert(pieces[i].len >= 1 && pieces[i].len <= 7);
        ck_assert(memcmp(pieces[i].data, bytes + at, pieces[i].len) == 0);
        at += pieces[i].len;
    }
    ck_assert_uint_eq(at, LEN);
    /* Spans from several offsets, each read in elements of 1, 4 and 8. */
    const size_t starts[] = {0, 1, 3, 5, 1000, 2051};
    const size_t elems[] = {1, 4, 8};
    for (size_t s = 0; s < sizeof starts / sizeof starts[0]; s++) {
        size_t piece = 0, offset = starts[s];
        while (offset >= pieces[piece].len)
            offset -= pieces[piece++].len;
        for (size_t e = 0; e < sizeof elems / sizeof elems[0]; e++) {
            size_t len = (LEN - starts[s]) / elems[e] * elems[e];
            dt_span sp = {&pieces[piece], offset, len};
            int carried = 0;
            memset(out, 0, LEN);
            ck_assert_uint_eq(read_span(&sp, elems[e], out, &carried), len);
            ck_assert_msg(memcmp(out, bytes + starts[s], len) == 0, "span at %zu, elem %zu",
                          starts[s], elems[e]);
            if (elems[e] > 1) ck_assert_msg(carried > 0, "no element crossed pieces");
            memset(out, 0, LEN);
            dt_span_copy(&sp, out);
            ck_assert(memcmp(out, bytes + starts[s], len) == 0);
        }
    }
    /* A reader over one run of memory at an odd address. */
    dt_span_reader r;
    dt_span_reader_init_flat(&r, bytes + 3, 4000, 4);
    size_t count;
    const uint8_t *run = dt_span_reader_next(&r, &count);
    ck_assert_ptr_eq(run, bytes + 3);
    ck_assert_uint_eq(count, 1000);
    ck_assert_ptr_null(dt_span_reader_next(&r, &count));
    dt_rpc_buf_release(&b);
    dt_rpc_buf_release(&b); /* twice is harmless */
    /* No pieces at all: an empty message. */
    dt_test_in_pieces(bytes, 0, 1, &b);
    ck_assert(b.len == 0 && b.data == NULL && b.num_pieces == 0);
    ck_assert_int_eq(dt_rpc_buf_pieces(&b, &one, &pieces), 0);
    dt_rpc_buf_release(&b);
    free(bytes);
    free(out);
}
END_TEST

/* Echo that reads the request in place, piece by piece; the first four
 * bytes of the reply count the pieces. */
static int handle_echo_pieces(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                              const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    (void)ctx;
    dt_piece one;
    const dt_piece *pieces;
    int n = dt_rpc_buf_pieces(request, &one, &pieces);
    int rc = dt_rpc_buf_alloc(reply, request->len + 4, err);
    if (rc < 0) return rc;
    uint32_t count = (uint32_t)n;
    memcpy(reply->data, &count, 4);
    size_t at = 4;
    for (int i = 0; i < n; i++) {
        memcpy(reply->data + at, pieces[i].data, pieces[i].len);
        at += pieces[i].len;
    }
    return at == reply->len ? 0 : dt_err_set(err, DT_EINTERNAL, "pieces hold %zu bytes", at - 4);
}

/* Echo whose reply is the request's own storage, shared (no copy). */
static int handle_echo_share(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                             const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    (void)ctx;
    return dt_rpc_buf_share(reply, request, err);
}

/* A server whose handlers read requests in place, serving EchoPieces and
 * EchoShare, and a channel to it. */
static void start_echo_pieces(dt_rpc_server **server, dt_rpc_channel **ch) {
    static const dt_rpc_method echo[] = {{"/test.T/EchoPieces", handle_echo_pieces, 0, 0},
                                         {"/test.T/EchoShare", handle_echo_share, 0, 0}};
    char addr[64];
    ck_assert_int_gt(dt_test_free_addr(addr, sizeof addr), 0);
    dt_rpc_server_params p = {
        .addr = addr, .num_threads = 2, .methods = echo, .num_methods = 2, .in_pieces = 1};
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_rpc_server_start(&p, server, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_rpc_channel_new(addr, ch, &err) == 0, "%s", err.msg);
}

/* Over the network: a server that reads requests in place hands the
 * handler a 100 kB request in the pieces gRPC read it in (several), and a
 * client that takes its response in pieces gets every byte. */
START_TEST(test_server_reads_in_pieces) {
    dt_rpc_server *server = NULL;
    dt_rpc_channel *ch = NULL;
    start_echo_pieces(&server, &ch);
    dt_err err;
    dt_err_clear(&err);
    enum { LEN = 100003 };
    dt_rpc_buf req;
    ck_assert_int_eq(dt_rpc_buf_alloc(&req, LEN, &err), 0);
    for (size_t i = 0; i < LEN; i++)
        req.data[i] = (uint8_t)((i * 2654435761u) >> 11);
    dt_rpc_call c;
    call_init(&c, ch, "/test.T/EchoPieces", &req);
    c.wait_for_ready = 1;
    c.in_pieces = 1;
    ck_assert_msg(dt_rpc_call_all(&c, 1, 20000, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(c.response.len, LEN + 4);
    uint8_t *got = malloc(LEN + 4);
    ck_assert_ptr_nonnull(got);
    dt_span all;
    dt_piece one;
    const dt_piece *pieces;
    ck_assert_int_gt(dt_rpc_buf_pieces(&c.response, &one, &pieces), 0);
    all.piece = pieces;
    all.offset = 0;
    all.len = c.response.len;
    dt_span_copy(&all, got);
    uint32_t count;
    memcpy(&count, got, 4);
    ck_assert_msg(count > 1, "%d bytes in %u piece", LEN, count);
    ck_assert(memcmp(got + 4, req.data, LEN) == 0);
    free(got);
    dt_rpc_buf_release(&c.response);
    dt_rpc_buf_release(&req);
    dt_rpc_channel_free(ch);
    dt_rpc_server_stop(server, 1000);
}
END_TEST

/* The bytes of b (in one run or in pieces) equal the len bytes at want. */
static void assert_buf_bytes(const dt_rpc_buf *b, const uint8_t *want, size_t len) {
    ck_assert_uint_eq(b->len, len);
    dt_piece one;
    const dt_piece *pieces;
    int n = dt_rpc_buf_pieces(b, &one, &pieces);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        ck_assert_uint_le(pieces[i].len, len - at);
        ck_assert(memcmp(pieces[i].data, want + at, pieces[i].len) == 0);
        at += pieces[i].len;
    }
    ck_assert_uint_eq(at, len);
}

/* dt_rpc_buf_share: the same bytes at the same addresses (no copy), which
 * outlive the buffer shared (ASan sees any read of freed storage): a
 * message received in pieces, one in one run, an empty one; and over the
 * network, an echo that answers with the request shared. */
START_TEST(test_share) {
    enum { LEN = 100003 };
    uint8_t *bytes = malloc(LEN);
    ck_assert_ptr_nonnull(bytes);
    for (size_t i = 0; i < LEN; i++)
        bytes[i] = (uint8_t)((i * 2654435761u) >> 13);
    dt_err err;
    dt_err_clear(&err);
    dt_rpc_buf src, dst;
    dt_test_in_pieces(bytes, LEN, 77, &src);
    ck_assert_int_gt(src.num_pieces, 1);
    ck_assert_int_eq(dt_rpc_buf_share(&dst, &src, &err), 0);
    ck_assert_int_eq(dst.num_pieces, src.num_pieces);
    for (int i = 0; i < src.num_pieces; i++)
        ck_assert_ptr_eq(dst.pieces[i].data, src.pieces[i].data);
    dt_rpc_buf_release(&src);
    assert_buf_bytes(&dst, bytes, LEN);
    dt_rpc_buf_release(&dst);

    ck_assert_int_eq(dt_rpc_buf_alloc(&src, LEN, &err), 0);
    memcpy(src.data, bytes, LEN);
    ck_assert_int_eq(dt_rpc_buf_share(&dst, &src, &err), 0);
    ck_assert_ptr_eq(dst.data, src.data);
    dt_rpc_buf_release(&src);
    assert_buf_bytes(&dst, bytes, LEN);
    dt_rpc_buf_release(&dst);

    memset(&src, 0, sizeof src);
    ck_assert_int_eq(dt_rpc_buf_share(&dst, &src, &err), 0);
    ck_assert(dst.len == 0 && dst.impl == NULL && dst.data == NULL);

    dt_rpc_server *server = NULL;
    dt_rpc_channel *ch = NULL;
    start_echo_pieces(&server, &ch);
    ck_assert_int_eq(dt_rpc_buf_alloc(&src, LEN, &err), 0);
    memcpy(src.data, bytes, LEN);
    dt_rpc_call c;
    call_init(&c, ch, "/test.T/EchoShare", &src);
    c.wait_for_ready = 1;
    c.in_pieces = 1;
    ck_assert_msg(dt_rpc_call_all(&c, 1, 20000, &err) == 0, "%s", err.msg);
    assert_buf_bytes(&c.response, bytes, LEN);
    dt_rpc_buf_release(&c.response);
    dt_rpc_buf_release(&src);
    dt_rpc_channel_free(ch);
    dt_rpc_server_stop(server, 1000);
    free(bytes);
}
END_TEST

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int released;
} release_count;

static void count_release(void *arg) {
    release_count *rc = arg;
    pthread_mutex_lock(&rc->mu);
    rc->released++;
    pthread_cond_broadcast(&rc->cv);
    pthread_mutex_unlock(&rc->mu);
}

/* A request built from its own bytes and two runs of other memory sent in
 * place (no copy) arrives whole and in order; each run's release comes
 * once, when gRPC is done with it (awaited with a deadline: a transport may
 * let go of a written slice a moment after the call ends). */
START_TEST(test_send_in_place) {
    dt_rpc_server *server = NULL;
    dt_rpc_channel *ch = NULL;
    start_echo_pieces(&server, &ch);
    dt_err err;
    dt_err_clear(&err);
    enum { RUN = 300000 };
    uint8_t *a = malloc(RUN), *b = malloc(RUN), *want = malloc(2 * RUN + 10);
    ck_assert(a && b && want);
    for (int i = 0; i < RUN; i++) {
        a[i] = (uint8_t)(i * 7);
        b[i] = (uint8_t)(i * 13 + 1);
    }
    release_count counts = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    /* own "head" | run a | own "mid" | run b | own "!!" */
    dt_rpc_buf req;
    ck_assert_int_eq(dt_rpc_buf_alloc(&req, 10, &err), 0);
    uint8_t *own = req.data;
    memcpy(own, "headmid!!!", 10);
    dt_rpc_ref ra = {a, RUN, count_release, &counts}, rb = {b, RUN, count_release, &counts};
    ck_assert_int_eq(dt_rpc_buf_add_ref(&req, 4, &ra, &err), 0);
    ck_assert_int_eq(dt_rpc_buf_add_ref(&req, 7, &rb, &err), 0);
    ck_assert_uint_eq(req.len, 2 * RUN + 10);
    memcpy(want, "head", 4);
    memcpy(want + 4, a, RUN);
    memcpy(want + 4 + RUN, "mid", 3);
    memcpy(want + 7 + RUN, b, RUN);
    memcpy(want + 7 + 2 * RUN, "!!!", 3);
    dt_rpc_call c;
    call_init(&c, ch, "/test.T/EchoPieces", &req);
    c.wait_for_ready = 1;
    ck_assert_msg(dt_rpc_call_all(&c, 1, 20000, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(c.response.len, req.len + 4);
    ck_assert(memcmp(c.response.data + 4, want, req.len) == 0);
    dt_rpc_buf_release(&c.response);
    dt_rpc_buf_release(&req);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    pthread_mutex_lock(&counts.mu);
    while (counts.released < 2)
        if (pthread_cond_timedwait(&counts.cv, &counts.mu, &deadline) != 0) break;
    int released = counts.released;
    pthread_mutex_unlock(&counts.mu);
    ck_assert_int_eq(released, 2);
    dt_rpc_channel_free(ch);
    dt_rpc_server_stop(server, 1000);
    ck_assert_int_eq(counts.released, 2); /* and never again */
    free(a);
    free(b);
    free(want);
}
END_TEST

/* ---- requests in flight -------------------------------------------------- */

/* Holds its request until released, counting who is in. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running, done, open;
} gate;

static int handle_hold(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                       const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    gate *g = ctx;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 20;
    pthread_mutex_lock(&g->mu);
    g->running++;
    pthread_cond_broadcast(&g->cv);
    while (!g->open)
        if (pthread_cond_timedwait(&g->cv, &g->mu, &deadline) != 0) break;
    g->running--;
    g->done++;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return reply_bytes(reply, &request->len, sizeof request->len, err);
}

typedef struct {
    dt_rpc_channel *ch;
    const dt_rpc_buf *req;
    int rc;
} caller;

static void *call_hold(void *arg) {
    caller *c = arg;
    dt_rpc_call call;
    call_init(&call, c->ch, "/test.T/Hold", c->req);
    call.wait_for_ready = 1;
    dt_err err;
    dt_err_clear(&err);
    c->rc = dt_rpc_call_all(&call, 1, 30000, &err);
    dt_rpc_buf_release(&call.response);
    return NULL;
}

/* A server bounding its requests in flight reads one large request, and
 * while its handler holds it the other two calls wait their turn unread
 * (the server says so); let go, they are read one after the other, and
 * all three complete. */
START_TEST(test_requests_in_flight_bounded) {
    static const dt_rpc_method hold[] = {{"/test.T/Hold", handle_hold, 0, 0}};
    gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};
    char addr[64];
    ck_assert_int_gt(dt_test_free_addr(addr, sizeof addr), 0);
    enum { LEN = 2 << 20 };
    dt_rpc_server_params p = {.addr = addr,
                              .num_threads = 4,
                              .methods = hold,
                              .num_methods = 1,
                              .ctx = &g,
                              .inflight_bytes = LEN / 2};
    dt_err err;
    dt_err_clear(&err);
    dt_rpc_server *server = NULL;
    dt_rpc_channel *ch = NULL;
    ck_assert_msg(dt_rpc_server_start(&p, &server, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_rpc_channel_new(addr, &ch, &err) == 0, "%s", err.msg);
    dt_rpc_buf req;
    ck_assert_int_eq(dt_rpc_buf_alloc(&req, LEN, &err), 0);
    memset(req.data, 7, LEN);
    caller callers[3];
    pthread_t threads[3];
    for (int i = 0; i < 3; i++) {
        callers[i] = (caller){ch, &req, -1};
        ck_assert_int_eq(pthread_create(&threads[i], NULL, call_hold, &callers[i]), 0);
    }
    /* One handler holds its request; the two others wait, unread. (Polls
     * the server's and the handler's state: the events themselves.) */
    long long deadline = dt_test_now_ms() + 20000, inflight = 0;
    int waiting = 0, running = 0;
    for (;;) {
        waiting = dt_rpc_server_waiting(server, &inflight);
        pthread_mutex_lock(&g.mu);
        running = g.running;
        pthread_mutex_unlock(&g.mu);
        if ((waiting == 2 && running == 1) || dt_test_now_ms() > deadline) break;
        dt_test_sleep_ms(5);
    }
    ck_assert_int_eq(waiting, 2);
    ck_assert_int_eq(running, 1);
    ck_assert_int_eq(inflight, LEN);
    pthread_mutex_lock(&g.mu);
    ck_assert_int_eq(g.running, 1);
    g.open = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    for (int i = 0; i < 3; i++) {
        pthread_join(threads[i], NULL);
        ck_assert_int_eq(callers[i].rc, 0);
    }
    /* Under the lock: the handlers' writes reach this thread through the
     * network, which TSan cannot see as an ordering. */
    pthread_mutex_lock(&g.mu);
    int done = g.done;
    pthread_mutex_unlock(&g.mu);
    ck_assert_int_eq(done, 3);
    ck_assert_int_eq(dt_rpc_server_waiting(server, &inflight), 0);
    ck_assert_int_eq(inflight, 0);
    dt_rpc_buf_release(&req);
    dt_rpc_channel_free(ch);
    dt_rpc_server_stop(server, 1000);
}
END_TEST

/* The one table between dtrain's codes and gRPC's: every code a handler
 * may return reaches the caller as itself, except those that share a
 * status (the first in the table wins: DT_ECORRUPT arrives as DT_EIO) and
 * those gRPC has no status for (UNKNOWN, arriving as DT_EINTERNAL). A
 * CANCELLED call is the peer gone, retryable; statuses only gRPC makes map
 * to the nearest code. */
START_TEST(test_status_table) {
    for (int code = DT_EABORTED; code <= DT_OK; code++) {
        grpc_status_code status = dt_rpc_status_from_err(code);
        int back = dt_rpc_err_from_status(status);
        if (code == DT_ECORRUPT) {
            ck_assert_int_eq(status, GRPC_STATUS_DATA_LOSS);
            ck_assert_int_eq(back, DT_EIO);
        } else if (code == DT_ESTORAGE || code == DT_ECONFIG) {
            ck_assert_int_eq(status, GRPC_STATUS_UNKNOWN);
            ck_assert_int_eq(back, DT_EINTERNAL);
        } else if (code == DT_ECANCELLED) {
            ck_assert_int_eq(status, GRPC_STATUS_CANCELLED);
            ck_assert_int_eq(back, DT_EUNAVAILABLE);
        } else {
            ck_assert_msg(back == code, "%s -> %s -> %s", dt_err_name(code),
                          dt_rpc_status_name(status), dt_err_name(back));
        }
    }
    ck_assert_int_eq(dt_rpc_err_from_status(GRPC_STATUS_OUT_OF_RANGE), DT_EINVAL);
    ck_assert_int_eq(dt_rpc_err_from_status(GRPC_STATUS_UNIMPLEMENTED), DT_EPRECOND);
    ck_assert_int_eq(dt_rpc_err_from_status(GRPC_STATUS_UNAUTHENTICATED), DT_EPERM);
    ck_assert_int_eq(dt_rpc_err_from_status(GRPC_STATUS_UNKNOWN), DT_EINTERNAL);
    ck_assert_str_eq(dt_rpc_status_name(GRPC_STATUS_UNAUTHENTICATED), "UNAUTHENTICATED");
    ck_assert_str_eq(dt_rpc_status_name(GRPC_STATUS_OK), "OK");
    ck_assert_str_eq(dt_rpc_status_name((grpc_status_code)17), "UNKNOWN");
    ck_assert_str_eq(dt_rpc_status_name((grpc_status_code)-1), "UNKNOWN");
}
END_TEST

/* What dt_rpc_read_pem refuses, each named with the flag and the path: a
 * missing file, a directory (the read fails), an empty file, one without a
 * -----BEGIN line, one over the 1 MiB cap. */
START_TEST(test_read_pem_refusals) {
    char *dir = dt_test_tempdir();
    ck_assert_ptr_nonnull(dir);
    char path[1024];
    char *pem = (char *)"untouched";
    dt_err err;

    snprintf(path, sizeof path, "%s/missing.pem", dir);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_rpc_read_pem(path, "--tls-cert", &pem, &err), DT_EIO);
    ck_assert_ptr_null(pem);
    ck_assert_msg(strstr(err.msg, "--tls-cert") && strstr(err.msg, path) &&
                      strstr(err.msg, "cannot open"),
                  "%s", err.msg);

    dt_err_clear(&err);
    ck_assert_int_eq(dt_rpc_read_pem(dir, "--tls-ca", &pem, &err), DT_EIO);
    ck_assert_msg(strstr(err.msg, "--tls-ca") && strstr(err.msg, "read failed"), "%s", err.msg);

    snprintf(path, sizeof path, "%s/empty.pem", dir);
    ck_assert_int_eq(dt_test_write_file(path, ""), 0);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_rpc_read_pem(path, "--tls-key", &pem, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, "not a PEM file"), "%s", err.msg);

    ck_assert_int_eq(dt_test_write_file(path, "MIIB...\n-----END CERTIFICATE-----\n"), 0);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_rpc_read_pem(path, "--tls-key", &pem, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "no -----BEGIN line"), "%s", err.msg);

    snprintf(path, sizeof path, "%s/huge.pem", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("-----BEGIN CERTIFICATE-----\n", f);
    for (int i = 0; i < (1 << 20) / 64 + 1; i++)
        fprintf(f, "%063d\n", i);
    ck_assert_int_eq(fclose(f), 0);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_rpc_read_pem(path, "--tls-cert", &pem, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, "larger than 1048576 bytes"), "%s",
                  err.msg);
    ck_assert_ptr_null(pem);

    dt_test_rmtree(dir);
    dt_test_tempdir_free(dir);
}
END_TEST

/* A SIGHUP's reload request is a new generation the TLS servers compare
 * with theirs. */
START_TEST(test_reload_bumps_generation) {
    int before = dt_rpc_cert_generation();
    dt_rpc_reload_certs();
    ck_assert_int_eq(dt_rpc_cert_generation(), before + 1);
    dt_rpc_reload_certs();
    ck_assert_int_eq(dt_rpc_cert_generation(), before + 2);
}
END_TEST

Suite *rpc_suite(void) {
    Suite *s = suite_create("rpc");
    TCase *tc = tcase_create("rpc");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_echo);
    tcase_add_test(tc, test_large_payload);
    tcase_add_test(tc, test_handler_errors);
    tcase_add_test(tc, test_mixed_batch);
    tcase_add_test(tc, test_unknown_method);
    tcase_add_test(tc, test_unreachable);
    tcase_add_test(tc, test_deadline);
    tcase_add_test(tc, test_server_set_before_handlers);
    tcase_add_test(tc, test_concurrent_handlers);
    tcase_add_test(tc, test_concurrent_handlers_staggered);
    tcase_add_test(tc, test_address_in_use);
    tcase_add_test(tc, test_bad_params);
    tcase_add_test(tc, test_stop_with_call_in_flight);
    tcase_add_test(tc, test_stop_after_client_gone);
    tcase_add_test(tc, test_reconnect);
    tcase_add_test(tc, test_message_too_large);
    tcase_add_test(tc, test_bad_limits);
    tcase_add_test(tc, test_silent_connection_closed);
    tcase_add_test(tc, test_idle_connection_closed);
    tcase_add_test(tc, test_unresponsive_peer_closed);
    tcase_add_test(tc, test_fd_limit_raised);
    tcase_add_test(tc, test_listens_again_after_emfile);
    tcase_add_test(tc, test_status_table);
    tcase_add_test(tc, test_read_pem_refusals);
    tcase_add_test(tc, test_reload_bumps_generation);
    suite_add_tcase(s, tc);
    TCase *pieces = tcase_create("pieces");
    tcase_set_timeout(pieces, 60);
    tcase_add_test(pieces, test_reader_over_tiny_pieces);
    tcase_add_test(pieces, test_server_reads_in_pieces);
    tcase_add_test(pieces, test_send_in_place);
    tcase_add_test(pieces, test_share);
    tcase_add_test(pieces, test_requests_in_flight_bounded);
    suite_add_tcase(s, pieces);
    return s;
}
