/*
 * ps suite: a ps task started in-process (dt_ps_start) on a free loopback
 * port, in a hand-built cluster of 1 ps and 2 workers, driven with raw
 * dt_rpc_call_all + codec messages (so bad bytes can be sent) and with
 * dt_ps_client.
 *
 * Covers the lifecycle (not ready -> created -> done -> shut down), exact
 * update arithmetic (sgd with values exact in float; momentum, Nesterov,
 * Adagrad and Adam against a double-precision reference), rejection of every
 * kind of bad push with the variables and the step left untouched, 800
 * concurrent pushes summing exactly, Status counters, and dt_ps_wait's exits.
 *
 * The model on the ps: w (2, 3) and b (3), both F32.
 */
#define _GNU_SOURCE /* memmem */
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec.h"
#include "optim.h"
#include "pieces.h"
#include "proc.h"
#include "ps.h"
#include "ps_client.h"
#include "rpc_client.h"
#include "rpc_server.h"
#include "safetensors.h"
#include "suites.h"
#include "testjob.h"
#include "worker.h"

#define CALL_TIMEOUT_MS 10000
#define NW 6 /* elements of w */
#define NB 3 /* elements of b */

/* ---- helpers ----------------------------------------------------------- */

/* a = 127.0.0.1 on a port that was free a moment ago. */
static void free_addr(dt_addr *a) {
    int port = dt_test_free_port();
    ck_assert_int_gt(port, 0);
    dt_test_loopback_addr(a, port);
}

/* A ps task and a raw channel to it. */
typedef struct {
    dt_addr ps_addr[2];
    dt_addr worker_addr[2];
    dt_cluster cluster;
    dt_ps *ps;
    dt_rpc_channel *ch;
} fixture;

/* Task `task` of num_ps (1 or 2; only this one runs) for the cluster's
 * placement of table rows. server secures the ps (NULL: plaintext, no
 * auth); client, the raw channel. */
static void fixture_start_task(fixture *f, int num_ps, int task, int linger_ms,
                               const dt_rpc_security *server, const dt_rpc_security *client) {
    memset(f, 0, sizeof *f);
    for (int p = 0; p < num_ps; p++)
        free_addr(&f->ps_addr[p]);
    free_addr(&f->worker_addr[0]);
    free_addr(&f->worker_addr[1]);
    f->cluster.num_ps = num_ps;
    f->cluster.ps = f->ps_addr;
    f->cluster.num_workers = 2;
    f->cluster.workers = f->worker_addr;
    dt_ps_params p = {.cluster = &f->cluster,
                      .task_index = task,
                      .num_threads = 4,
                      .linger_ms = linger_ms,
                      .security = server};
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_ps_start(&p, &f->ps, &err);
    ck_assert_msg(rc == 0, "ps start on %s: %s", f->ps_addr[task].addr, err.msg);
    rc = dt_rpc_channel_new_secure(f->ps_addr[task].addr, client, &f->ch, &err);
    ck_assert_msg(rc == 0, "channel: %s", err.msg);
}

static void fixture_start_secure(fixture *f, int linger_ms, const dt_rpc_security *server,
                                 const dt_rpc_security *client) {
    fixture_start_task(f, 1, 0, linger_ms, server, client);
}

static void fixture_start(fixture *f, int linger_ms) {
    fixture_start_secure(f, linger_ms, NULL, NULL);
}

/* The raw channel again, secured by client. */
static void fixture_reconnect(fixture *f, const dt_rpc_security *client) {
    dt_rpc_channel_free(f->ch);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_rpc_channel_new_secure(f->ps_addr[0].addr, client, &f->ch, &err) == 0,
                  "channel: %s", err.msg);
}

static void fixture_stop(fixture *f) {
    dt_rpc_channel_free(f->ch);
    dt_ps_free(f->ps);
}

/* Sends raw request bytes; on success *resp holds the reply (caller
 * releases). */
static int call_raw(fixture *f, dt_msg_type type, const uint8_t *bytes, size_t len,
                    dt_rpc_buf *resp, dt_err *err) {
    dt_rpc_buf req;
    int rc = dt_rpc_buf_alloc(&req, len, err);
    ck_assert_int_eq(rc, 0);
    if (len) memcpy(req.data, bytes, len);
    dt_rpc_call c;
    memset(&c, 0, sizeof c);
    c.channel = f->ch;
    c.method = dt_codec_method(type);
    c.request = &req;
    c.wait_for_ready = 1;
    rc = dt_rpc_call_all(&c, 1, CALL_TIMEOUT_MS, err);
    dt_rpc_buf_release(&req);
    *resp = c.response;
    return rc;
}

/* msg encoded, in a heap buffer of *len bytes (at least 1 allocated) that
 * the caller frees. */
static uint8_t *encode_msg(dt_msg_type type, const void *msg, size_t *len) {
    dt_err local;
    dt_err_clear(&local);
    int64_t size = dt_codec_size(type, msg, &local);
    ck_assert_msg(size >= 0, "size: %s", local.msg);
    uint8_t *bytes = malloc(size ? (size_t)size : 1);
    ck_assert_ptr_nonnull(bytes);
    ck_assert_msg(dt_codec_encode(type, msg, bytes, (size_t)size, &local) == 0, "encode: %s",
                  local.msg);
    *len = (size_t)size;
    return bytes;
}

/* Encodes msg and sends it; decodes the reply into out (of out_type). */
static int call_msg(fixture *f, dt_msg_type type, const void *msg, dt_msg_type out_type, void *out,
                    dt_err *err) {
    size_t size;
    uint8_t *bytes = encode_msg(type, msg, &size);
    dt_rpc_buf resp;
    int rc = call_raw(f, type, bytes, size, &resp, err);
    free(bytes);
    if (rc == 0 && out) {
        rc = dt_codec_decode(out_type, resp.data, resp.len, out, err);
        ck_assert_msg(rc == 0, "reply decode: %s", err ? err->msg : "");
    }
    dt_rpc_buf_release(&resp);
    return rc;
}

/* Encodes msg, replaces the first `from` in its bytes by `to` (same length:
 * a name with a NUL or control byte the encoder would not write), sends. */
static int call_patched(fixture *f, dt_msg_type type, const void *msg, const char *from,
                        const char *to, size_t n, dt_err *err) {
    size_t size;
    uint8_t *bytes = encode_msg(type, msg, &size);
    uint8_t *at = memmem(bytes, size, from, n);
    ck_assert_msg(at != NULL, "%s not in the encoded message", from);
    memcpy(at, to, n);
    dt_rpc_buf resp;
    int rc = call_raw(f, type, bytes, size, &resp, err);
    free(bytes);
    dt_rpc_buf_release(&resp);
    return rc;
}

static void make_tensor(dt_tensor *t, const char *name, int dtype, int ndim, int64_t d0, int64_t d1,
                        void *data) {
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->data = data;
    ck_assert_int_eq(dt_tensor_check_spec(t, NULL), 0);
}

/* The model's two tensors over caller arrays. */
static void model_tensors(dt_tensor items[2], float *w, float *b) {
    make_tensor(&items[0], "w", DT_DTYPE_F32, 2, 2, 3, w);
    make_tensor(&items[1], "b", DT_DTYPE_F32, 1, 3, 0, b);
}

/* The model's two tensors over a copy of (w, b), for a request that must
 * not write the caller's arrays. Holds pointers into itself: not copied. */
typedef struct {
    float w[NW], b[NB];
    dt_tensor items[2];
} model_copy;

static void copy_model(model_copy *m, const float *w, const float *b) {
    memcpy(m->w, w, sizeof m->w);
    memcpy(m->b, b, sizeof m->b);
    model_tensors(m->items, m->w, m->b);
}

/* The requests as most tests send them; each test sets only what differs. */

/* Create the `count` variables of items (borrowed) for cfg, done at
 * max_steps: step 0, async, no slots, tables or model text. */
static dt_msg_create_req create_req(dt_tensor *items, int count, const dt_optim_config *cfg,
                                    int64_t max_steps) {
    dt_msg_create_req req;
    memset(&req, 0, sizeof req);
    req.out = (dt_tensor_list){.items = items, .count = count};
    req.optim = *cfg;
    req.max_steps = max_steps;
    return req;
}

/* The `count` gradients of items (borrowed) from worker, computed at step
 * 0: no id, no pull, no sparse pairs. */
static dt_msg_push_req push_req(dt_tensor *items, int count, int worker) {
    dt_msg_push_req req;
    memset(&req, 0, sizeof req);
    req.worker = worker;
    req.out = (dt_tensor_list){.items = items, .count = count};
    return req;
}

/* A pull of every variable by worker (-1: a tool). */
static dt_msg_pull_req pull_req(int worker) {
    dt_msg_pull_req req;
    memset(&req, 0, sizeof req);
    req.worker = worker;
    return req;
}

static void sgd_config(dt_optim_config *cfg, double lr) {
    dt_optim_defaults(cfg);
    cfg->kind = DT_OPTIM_SGD;
    cfg->learning_rate = lr;
}

/* Create as the chief sends it; step_ceiling > 0: a restore (see raise_step). */
static int create_restored(fixture *f, const float *w, const float *b, const dt_optim_config *cfg,
                           int64_t global_step, int64_t step_ceiling, int64_t max_steps,
                           dt_msg_create_resp *resp, dt_err *err) {
    model_copy m;
    copy_model(&m, w, b);
    dt_msg_create_req req = create_req(m.items, 2, cfg, max_steps);
    req.global_step = global_step;
    req.step_ceiling = step_ceiling;
    snprintf(req.model, sizeof req.model, "linear test");
    dt_msg_create_resp local;
    if (!resp) resp = &local;
    memset(resp, 0, sizeof *resp); /* dt_codec_decode fills a zeroed message */
    return call_msg(f, DT_MSG_CREATE_REQ, &req, DT_MSG_CREATE_RESP, resp, err);
}

static int create(fixture *f, const float *w, const float *b, const dt_optim_config *cfg,
                  int64_t global_step, int64_t max_steps, dt_msg_create_resp *resp, dt_err *err) {
    return create_restored(f, w, b, cfg, global_step, 0, max_steps, resp, err);
}

/* Pulls every variable into w, b; *global_step, *done from the reply. */
static int pull(fixture *f, float *w, float *b, int64_t *global_step, int *done, dt_err *err) {
    dt_msg_pull_req req = pull_req(-1);
    dt_err local;
    dt_err_clear(&local);
    size_t size;
    uint8_t *bytes = encode_msg(DT_MSG_PULL_REQ, &req, &size);
    dt_rpc_buf resp;
    int rc = call_raw(f, DT_MSG_PULL_REQ, bytes, size, &resp, err);
    free(bytes);
    if (rc < 0) return rc;
    dt_msg_pull_resp pr;
    memset(&pr, 0, sizeof pr);
    dt_tensor views[4];
    pr.in.items = views;
    pr.in.cap = 4;
    rc = dt_codec_decode(DT_MSG_PULL_RESP, resp.data, resp.len, &pr, &local);
    ck_assert_msg(rc == 0, "pull reply: %s", local.msg);
    ck_assert_int_eq(pr.in.count, 2);
    ck_assert_str_eq(views[0].name, "w");
    ck_assert_str_eq(views[1].name, "b");
    ck_assert_uint_eq(views[0].nbytes, NW * 4);
    ck_assert_uint_eq(views[1].nbytes, NB * 4);
    memcpy(w, views[0].data, NW * 4);
    memcpy(b, views[1].data, NB * 4);
    if (global_step) *global_step = pr.global_step;
    if (done) *done = pr.done;
    dt_rpc_buf_release(&resp);
    return 0;
}

static int push_items(fixture *f, dt_tensor *items, int count, int worker, dt_msg_push_resp *resp,
                      dt_err *err) {
    dt_msg_push_req req = push_req(items, count, worker);
    /* Zeroed, as the decoder wants: a field the ps leaves at its default
     * (global_step 0 after a Shutdown) is not on the wire. */
    dt_msg_push_resp local;
    if (!resp) resp = &local;
    memset(resp, 0, sizeof *resp);
    return call_msg(f, DT_MSG_PUSH_REQ, &req, DT_MSG_PUSH_RESP, resp, err);
}

static int push(fixture *f, const float *gw, const float *gb, int worker, dt_msg_push_resp *resp,
                dt_err *err) {
    model_copy m;
    copy_model(&m, gw, gb);
    return push_items(f, m.items, 2, worker, resp, err);
}

static void status(fixture *f, int worker, dt_msg_status_resp *st) {
    dt_msg_status_req req = {.worker = worker};
    memset(st, 0, sizeof *st);
    dt_err err;
    dt_err_clear(&err);
    int rc = call_msg(f, DT_MSG_STATUS_REQ, &req, DT_MSG_STATUS_RESP, st, &err);
    ck_assert_msg(rc == 0, "status: %s", err.msg);
}

static int shutdown_ps(fixture *f, const char *reason, dt_err *err) {
    dt_msg_shutdown_req req;
    memset(&req, 0, sizeof req);
    snprintf(req.reason, sizeof req.reason, "%s", reason);
    dt_msg_shutdown_resp resp;
    memset(&resp, 0, sizeof resp);
    return call_msg(f, DT_MSG_SHUTDOWN_REQ, &req, DT_MSG_SHUTDOWN_RESP, &resp, err);
}

static void assert_floats_eq(const float *got, const float *want, int n, const char *what) {
    for (int i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "%s[%d] = %.9g, want %.9g", what, i, got[i], want[i]);
}

/* Pulls and checks the ps holds exactly (w, b) at global_step. */
static void assert_state(fixture *f, const float *w, const float *b, int64_t global_step,
                         const char *when) {
    float gw[NW], gb[NB];
    int64_t gs = -1;
    int done = -1;
    dt_err err;
    dt_err_clear(&err);
    int rc = pull(f, gw, gb, &gs, &done, &err);
    ck_assert_msg(rc == 0, "%s: pull: %s", when, err.msg);
    for (int i = 0; i < NW; i++)
        ck_assert_msg(gw[i] == w[i], "%s: w[%d] = %.9g, want %.9g", when, i, gw[i], w[i]);
    for (int i = 0; i < NB; i++)
        ck_assert_msg(gb[i] == b[i], "%s: b[%d] = %.9g, want %.9g", when, i, gb[i], b[i]);
    ck_assert_msg(gs == global_step, "%s: global_step %lld, want %lld", when, (long long)gs,
                  (long long)global_step);
}

#define ASSERT_FAILS(expr, code, needle)                                                           \
    do {                                                                                           \
        dt_err_clear(&err);                                                                        \
        int rc_ = (expr);                                                                          \
        ck_assert_msg(rc_ == (code), "%s: rc %d, want %d (%s)", #expr, rc_, (code), err.msg);      \
        ck_assert_msg(strstr(err.msg, (needle)) != NULL, "%s: message \"%s\" lacks \"%s\"", #expr, \
                      err.msg, (needle));                                                          \
    } while (0)

/* Values exact in float, with lr a power of two, so sgd is exact. */
static const float W0[NW] = {1, 2, -0.5f, 0.25f, 8, -4};
static const float B0[NB] = {0.5f, -1, 3};
static const float GW[NW] = {0.25f, -0.5f, 1, 2, 0.125f, -1};
static const float GB[NB] = {1, 0.5f, -2};

/* The set-up most tests share: a ps with the given linger, its model
 * created from (W0, B0) for sgd at learning rate lr, at global_step `step`
 * of max_steps. *cr (may be NULL) gets the Create reply. */
static void fixture_start_sgd(fixture *f, int linger_ms, double lr, int64_t step, int64_t max_steps,
                              dt_msg_create_resp *cr) {
    fixture_start(f, linger_ms);
    dt_optim_config cfg;
    sgd_config(&cfg, lr);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(create(f, W0, B0, &cfg, step, max_steps, cr, &err) == 0, "create: %s", err.msg);
}

/* ---- tables (sparse variables) ------------------------------------------- */

#define T_NAME "wide/weight"
#define T_DIM 2
#define T_ROWS ((int64_t)1 << 40)

static dt_msg_table table_spec(void) {
    return (dt_msg_table){T_NAME, T_ROWS, T_DIM, DT_TABLE_INIT_NORMAL, 0.5, 42};
}

/* Create of (W0, B0) and the tables, as the chief sends it, dropping rows
 * as eviction says. */
static int create_evicting(fixture *f, const dt_optim_config *cfg, const dt_msg_table *tables,
                           int n, bool pending, int mode, const dt_table_evict_policy *eviction,
                           dt_err *err) {
    model_copy m;
    copy_model(&m, W0, B0);
    dt_msg_create_req req = create_req(m.items, 2, cfg, 100);
    req.consistency.mode = mode;
    /* sync: a step is both workers' pushes. */
    req.consistency.replicas_to_aggregate = mode == DT_MODE_SYNC ? 2 : 1;
    req.consistency.total_num_replicas = req.consistency.replicas_to_aggregate;
    req.consistency.timeout_ms = mode == DT_MODE_SYNC ? 60000 : 1000;
    for (int i = 0; i < n; i++)
        req.tables[i] = tables[i];
    req.num_tables = n;
    req.tables_pending = pending;
    req.eviction = *eviction;
    dt_msg_create_resp resp;
    return call_msg(f, DT_MSG_CREATE_REQ, &req, DT_MSG_CREATE_RESP, &resp, err);
}

static int create_tables(fixture *f, const dt_optim_config *cfg, const dt_msg_table *tables, int n,
                         bool pending, int mode, dt_err *err) {
    const dt_table_evict_policy none = {0, 0, 0};
    return create_evicting(f, cfg, tables, n, pending, mode, &none, err);
}

/* A SparsePull of ids (any tensor: the hostile tests shape their own)
 * from table; the rows (n, T_DIM) into out when it is not NULL. */
static int sparse_pull_tensor(fixture *f, const char *table, dt_tensor *ids, float *out,
                              dt_err *err) {
    dt_msg_sparse_pull_req req;
    memset(&req, 0, sizeof req);
    req.worker = 1;
    snprintf(req.table, sizeof req.table, "%s", table);
    req.ids_out = (dt_tensor_list){.items = ids, .count = ids ? 1 : 0};
    dt_msg_sparse_pull_resp resp;
    memset(&resp, 0, sizeof resp);
    dt_tensor view;
    resp.values_in = (dt_tensor_views){.items = &view, .cap = 1};
    dt_err local;
    dt_err_clear(&local);
    size_t size;
    uint8_t *bytes = encode_msg(DT_MSG_SPARSE_PULL_REQ, &req, &size);
    dt_rpc_buf reply;
    int rc = call_raw(f, DT_MSG_SPARSE_PULL_REQ, bytes, size, &reply, err);
    free(bytes);
    if (rc < 0) return rc;
    ck_assert_msg(dt_codec_decode(DT_MSG_SPARSE_PULL_RESP, reply.data, reply.len, &resp, &local) ==
                      0,
                  "%s", local.msg);
    ck_assert_int_eq(resp.values_in.count, 1);
    ck_assert_str_eq(view.name, table);
    ck_assert_int_eq(view.dtype, DT_DTYPE_F32);
    ck_assert_int_eq(view.shape[0], ids->shape[0]);
    ck_assert_int_eq(view.shape[1], T_DIM);
    if (out) memcpy(out, view.data, view.nbytes);
    dt_rpc_buf_release(&reply);
    return 0;
}

static int sparse_pull(fixture *f, const int64_t *ids, int64_t n, float *out, dt_err *err) {
    int64_t copy[16];
    ck_assert(n <= 16);
    memcpy(copy, ids, (size_t)n * sizeof *ids);
    dt_tensor t;
    make_tensor(&t, T_NAME, DT_DTYPE_I64, 1, n, 0, copy);
    return sparse_pull_tensor(f, T_NAME, &t, out, err);
}

/* A push from worker, computed at step, of (GW, GB) and `pairs` sparse
 * pairs (ids[i], grads[i]); *resp (may be NULL) gets the reply. */
static int push_sparse_from(fixture *f, int worker, int64_t step, dt_tensor *ids, dt_tensor *grads,
                            int npairs, int ngrads, dt_msg_push_resp *resp, dt_err *err) {
    model_copy m;
    copy_model(&m, GW, GB);
    dt_msg_push_req req = push_req(m.items, 2, worker);
    req.step = step;
    req.sparse_ids_out = (dt_tensor_list){.items = ids, .count = npairs};
    req.sparse_grads_out = (dt_tensor_list){.items = grads, .count = ngrads};
    dt_msg_push_resp local;
    if (!resp) resp = &local;
    memset(resp, 0, sizeof *resp);
    return call_msg(f, DT_MSG_PUSH_REQ, &req, DT_MSG_PUSH_RESP, resp, err);
}

/* A push of (GW, GB) and `pairs` sparse pairs (ids[i], grads[i]). */
static int push_sparse(fixture *f, dt_tensor *ids, dt_tensor *grads, int npairs, int ngrads,
                       dt_err *err) {
    return push_sparse_from(f, 1, 0, ids, grads, npairs, ngrads, NULL, err);
}

static dt_msg_table_status table_status_of(fixture *f, int64_t *global_step) {
    dt_msg_status_resp st;
    status(f, -1, &st);
    ck_assert_int_eq(st.num_tables, 1);
    ck_assert_str_eq(st.tables[0].name, T_NAME);
    if (global_step) *global_step = st.global_step;
    return st.tables[0];
}

/* A ps with (W0, B0) and table_spec()'s table, SGD at 0.5, in mode; *tc
 * gets the table's config as the ps holds it (for its initial rows). */
static void start_with_table(fixture *f, int mode, dt_table_config *tc) {
    fixture_start(f, 0);
    dt_optim_config cfg;
    sgd_config(&cfg, 0.5);
    dt_msg_table spec = table_spec();
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(create_tables(f, &cfg, &spec, 1, false, mode, &err) == 0, "%s", err.msg);
    memset(tc, 0, sizeof *tc);
    snprintf(tc->name, sizeof tc->name, "%s", spec.name);
    tc->rows = spec.rows;
    tc->dim = spec.dim;
    tc->init = (dt_table_init)spec.init;
    tc->init_scale = spec.init_scale;
    tc->seed = spec.seed;
}

/* Rows never pushed read as their initial value (seeded per id) and are
 * not stored; a push updates the rows it names, lazily, with the dense
 * variables, as one step; Status counts the rows held and non-zero. */
START_TEST(test_table_pull_push) {
    fixture f;
    dt_table_config tc;
    start_with_table(&f, DT_MODE_ASYNC, &tc);
    dt_err err;
    dt_err_clear(&err);
    const int64_t ids[3] = {3, 10, T_ROWS - 1};
    float want[3][T_DIM], got[3][T_DIM];
    for (int k = 0; k < 3; k++)
        dt_table_init_row(&tc, ids[k], want[k]);
    ck_assert_msg(sparse_pull(&f, ids, 3, &got[0][0], &err) == 0, "%s", err.msg);
    assert_floats_eq(&got[0][0], &want[0][0], 3 * T_DIM, "initial rows");
    dt_msg_table_status ts = table_status_of(&f, NULL);
    ck_assert_int_eq(ts.rows_held, 0); /* a pull stores nothing */

    int64_t pid[2] = {3, T_ROWS - 1};
    float g[2][T_DIM] = {{1, -2}, {0.5f, 4}};
    dt_tensor it, gt;
    make_tensor(&it, T_NAME, DT_DTYPE_I64, 1, 2, 0, pid);
    make_tensor(&gt, T_NAME, DT_DTYPE_F32, 2, 2, T_DIM, g);
    ck_assert_msg(push_sparse(&f, &it, &gt, 1, 1, &err) == 0, "%s", err.msg);
    for (int d = 0; d < T_DIM; d++) {
        want[0][d] = want[0][d] - 0.5f * g[0][d];
        want[2][d] = want[2][d] - 0.5f * g[1][d];
    }
    ck_assert_msg(sparse_pull(&f, ids, 3, &got[0][0], &err) == 0, "%s", err.msg);
    assert_floats_eq(&got[0][0], &want[0][0], 3 * T_DIM, "rows after a push");
    float w[NW], b[NB];
    for (int i = 0; i < NW; i++)
        w[i] = W0[i] - 0.5f * GW[i];
    for (int i = 0; i < NB; i++)
        b[i] = B0[i] - 0.5f * GB[i];
    assert_state(&f, w, b, 1, "the dense part of the push");
    ts = table_status_of(&f, NULL);
    ck_assert_int_eq(ts.rows_held, 2);
    int nonzero = 0;
    for (int k = 0; k < 3; k += 2)
        for (int d = 0; d < T_DIM; d++)
            nonzero += want[k][d] != 0;
    ck_assert_int_eq(ts.nonzero, nonzero);
    ck_assert_int_gt(ts.bytes, 0);
    fixture_stop(&f);
}
END_TEST

/* Every bad sparse input is an RPC error naming the field, and leaves
 * the ps as it was: rows, held count and global step. */
START_TEST(test_table_bad_inputs) {
    fixture f;
    fixture_start_task(&f, 2, 0, 0, NULL, NULL); /* task 0 of 2: some ids are not its own */
    dt_optim_config cfg;
    sgd_config(&cfg, 0.5);
    dt_msg_table spec = table_spec();
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(create_tables(&f, &cfg, &spec, 1, false, DT_MODE_ASYNC, &err) == 0, "%s",
                  err.msg);
    /* Ids of this task, and one of the other's. */
    int64_t mine[4], theirs = -1;
    int nm = 0;
    for (int64_t id = 0; nm < 4 || theirs < 0; id++) {
        if (dt_table_shard_of(id, 2) == 0 && nm < 4)
            mine[nm++] = id;
        else if (dt_table_shard_of(id, 2) == 1 && theirs < 0 && nm > 0)
            theirs = id; /* above mine[0] */
    }
    float g[4][T_DIM] = {{1, 2}, {3, 4}, {5, 6}, {7, 8}};
    dt_tensor it, gt;
    make_tensor(&it, T_NAME, DT_DTYPE_I64, 1, 2, 0, mine);
    make_tensor(&gt, T_NAME, DT_DTYPE_F32, 2, 2, T_DIM, g);
    ck_assert_msg(push_sparse(&f, &it, &gt, 1, 1, &err) == 0, "%s", err.msg);
    float before[4][T_DIM];
    ck_assert_int_eq(sparse_pull(&f, mine, 4, &before[0][0], &err), 0);
    int64_t step0;
    ck_assert_int_eq(table_status_of(&f, &step0).rows_held, 2);

    struct {
        int64_t ids[3];
        int n;
        const char *needle;
    } bad_ids[] = {
        {{mine[1], mine[0], 0}, 2, "ids must increase"},
        {{mine[0], mine[0], 0}, 2, "ids must increase"},
        {{mine[0], T_ROWS, 0}, 2, "out of range"},
        {{-5, mine[0], 0}, 2, "out of range"},
        {{mine[0], theirs, 0}, 2, "not held here: it belongs to ps 1 of 2"},
    };
    for (size_t c = 0; c < sizeof bad_ids / sizeof *bad_ids; c++) {
        /* The same rule for a pull and a push. */
        ASSERT_FAILS(sparse_pull(&f, bad_ids[c].ids, bad_ids[c].n, NULL, &err), DT_EINVAL,
                     bad_ids[c].needle);
        ck_assert_msg(strstr(err.msg, "sparse pull: ids"), "%s", err.msg);
        int64_t copy[3];
        memcpy(copy, bad_ids[c].ids, sizeof copy);
        make_tensor(&it, T_NAME, DT_DTYPE_I64, 1, bad_ids[c].n, 0, copy);
        make_tensor(&gt, T_NAME, DT_DTYPE_F32, 2, bad_ids[c].n, T_DIM, g);
        ASSERT_FAILS(push_sparse(&f, &it, &gt, 1, 1, &err), DT_EINVAL, bad_ids[c].needle);
        ck_assert_msg(strstr(err.msg, "push: sparse_ids[0]"), "%s", err.msg);
    }
    /* Rows of the wrong size: (2, 3) and (3, 2) for 2 ids of dim 2. */
    float g3[3][3] = {{0}};
    make_tensor(&it, T_NAME, DT_DTYPE_I64, 1, 2, 0, mine);
    make_tensor(&gt, T_NAME, DT_DTYPE_F32, 2, 2, 3, g3);
    ASSERT_FAILS(push_sparse(&f, &it, &gt, 1, 1, &err), DT_EINVAL,
                 "sparse_grads[0] wide/weight: must be F32 (2, 2)");
    make_tensor(&gt, T_NAME, DT_DTYPE_F32, 2, 3, 2, g3);
    ASSERT_FAILS(push_sparse(&f, &it, &gt, 1, 1, &err), DT_EINVAL, "one row per id");
    /* A NaN, and an Inf in the last row. */
    float gn[2][T_DIM] = {{1, NAN}, {2, 3}};
    make_tensor(&gt, T_NAME, DT_DTYPE_F32, 2, 2, T_DIM, gn);
    ASSERT_FAILS(push_sparse(&f, &it, &gt, 1, 1, &err), DT_EINVAL, "row 0 (id");
    gn[0][1] = 1;
    gn[1][0] = INFINITY;
    ASSERT_FAILS(push_sparse(&f, &it, &gt, 1, 1, &err), DT_EINVAL, "row 1 (id");
    /* Pairs that do not pair, an unknown table, one named twice, ids of
     * another dtype. */
    make_tensor(&gt, T_NAME, DT_DTYPE_F32, 2, 2, T_DIM, g);
    ASSERT_FAILS(push_sparse(&f, &it, &gt, 1, 0, &err), DT_EINVAL,
                 "1 sparse_ids and 0 sparse_grads");
    dt_tensor its[2] = {it, it}, gts[2] = {gt, gt};
    ASSERT_FAILS(push_sparse(&f, its, gts, 2, 2, &err), DT_EINVAL, "table wide/weight given twice");
    make_tensor(&its[0], "nope", DT_DTYPE_I64, 1, 2, 0, mine);
    ASSERT_FAILS(push_sparse(&f, its, gts, 1, 1, &err), DT_ENOTFOUND, "unknown table nope");
    make_tensor(&gts[0], "other", DT_DTYPE_F32, 2, 2, T_DIM, g);
    ASSERT_FAILS(push_sparse(&f, &it, gts, 1, 1, &err), DT_EINVAL, "sparse_grads[0] is other");
    float fids[2] = {1, 2};
    make_tensor(&its[0], T_NAME, DT_DTYPE_F32, 1, 2, 0, fids);
    ASSERT_FAILS(push_sparse(&f, its, &gt, 1, 1, &err), DT_EINVAL, "ids must be I64 (n)");
    ASSERT_FAILS(sparse_pull_tensor(&f, T_NAME, &its[0], NULL, &err), DT_EINVAL,
                 "ids must be I64 (n)");
    /* A pull of an unknown table; one without ids; one whose reply would
     * be huge (a claim the ps must not try to meet). */
    ASSERT_FAILS(sparse_pull_tensor(&f, "nope", &it, NULL, &err), DT_ENOTFOUND,
                 "unknown table \"nope\"");
    ASSERT_FAILS(sparse_pull_tensor(&f, T_NAME, NULL, NULL, &err), DT_EINVAL, "ids: none given");
    /* A shape that claims more ids than the bytes sent: the codec's rule. */
    int64_t few[2] = {mine[0], mine[1]};
    make_tensor(&it, T_NAME, DT_DTYPE_I64, 1, 2, 0, few);
    it.shape[0] = (int64_t)1 << 30;
    ASSERT_FAILS(sparse_pull_tensor(&f, T_NAME, &it, NULL, &err), DT_EINVAL,
                 "16 data bytes, shape needs 8589934592");
    it.shape[0] = (int64_t)1 << 40;
    ASSERT_FAILS(sparse_pull_tensor(&f, T_NAME, &it, NULL, &err), DT_EINVAL,
                 "ids[0]: tensor wide/weight: larger than 2^40 bytes");

    /* Nothing changed: the rows, the count held, the step. */
    float after[4][T_DIM];
    ck_assert_int_eq(sparse_pull(&f, mine, 4, &after[0][0], &err), 0);
    assert_floats_eq(&after[0][0], &before[0][0], 4 * T_DIM, "rows after bad inputs");
    int64_t step1;
    ck_assert_int_eq(table_status_of(&f, &step1).rows_held, 2);
    ck_assert_int_eq(step1, step0);
    fixture_stop(&f);
}
END_TEST

/* A table's rows bigger than a reply: dim 65536, 10^4 ids would be 2.4 GiB. */
START_TEST(test_table_pull_too_large) {
    fixture f;
    fixture_start(&f, 0);
    dt_optim_config cfg;
    sgd_config(&cfg, 0.5);
    dt_msg_table spec = {"big", 1 << 20, DT_TABLE_MAX_DIM, DT_TABLE_INIT_ZEROS, 0, 1};
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(create_tables(&f, &cfg, &spec, 1, false, DT_MODE_ASYNC, &err) == 0, "%s",
                  err.msg);
    enum { N = 10000 };
    int64_t *ids = malloc(N * sizeof *ids);
    for (int k = 0; k < N; k++)
        ids[k] = k;
    dt_tensor it;
    make_tensor(&it, "big", DT_DTYPE_I64, 1, N, 0, ids);
    ASSERT_FAILS(sparse_pull_tensor(&f, "big", &it, NULL, &err), DT_EINVAL,
                 "more than a reply carries");
    free(ids);
    fixture_stop(&f);
}
END_TEST

/* A Create's tables are checked field by field, by name. */
START_TEST(test_table_create_invalid) {
    fixture f;
    fixture_start(&f, 0);
    dt_optim_config cfg;
    sgd_config(&cfg, 0.5);
    dt_err err;
    dt_msg_table t[2] = {table_spec(), table_spec()};
    t[0].rows = 0;
    ASSERT_FAILS(create_tables(&f, &cfg, t, 1, false, DT_MODE_ASYNC, &err), DT_EINVAL,
                 "tables[0] wide/weight: rows 0 is out of range 1..2^40");
    t[0].rows = T_ROWS + 1;
    ASSERT_FAILS(create_tables(&f, &cfg, t, 1, false, DT_MODE_ASYNC, &err), DT_EINVAL, "rows");
    t[0] = table_spec();
    t[0].dim = 0;
    ASSERT_FAILS(create_tables(&f, &cfg, t, 1, false, DT_MODE_ASYNC, &err), DT_EINVAL, "dim 0");
    t[0] = table_spec();
    t[0].init_scale = 0;
    ASSERT_FAILS(create_tables(&f, &cfg, t, 1, false, DT_MODE_ASYNC, &err), DT_EINVAL,
                 "init_scale");
    t[0] = table_spec();
    ASSERT_FAILS(create_tables(&f, &cfg, t, 2, false, DT_MODE_ASYNC, &err), DT_EINVAL,
                 "tables[1] wide/weight given twice");
    snprintf(t[1].name, sizeof t[1].name, "w");
    ASSERT_FAILS(create_tables(&f, &cfg, t, 2, false, DT_MODE_ASYNC, &err), DT_EINVAL,
                 "a dense variable has its name");
    t[1].name[0] = '\0';
    ASSERT_FAILS(create_tables(&f, &cfg, t, 2, false, DT_MODE_ASYNC, &err), DT_EINVAL,
                 "tables[1].name");
    dt_msg_status_resp st;
    status(&f, -1, &st);
    ck_assert(!st.ready);
    ck_assert_int_eq(st.num_tables, 0);
    fixture_stop(&f);
}
END_TEST

/* sync: a step's sparse pushes are summed by id and applied once, as the
 * mean over the step's pushes (a row one push does not name counts as 0
 * in it), with the dense mean; nothing moves before the step is whole,
 * and a push for a past step is dropped. */
START_TEST(test_table_sync_mean) {
    fixture f;
    dt_table_config tc;
    start_with_table(&f, DT_MODE_SYNC, &tc);
    dt_err err;
    dt_err_clear(&err);
    const int64_t ids[3] = {3, 10, 20};
    float init[3][T_DIM], got[3][T_DIM], want[3][T_DIM];
    for (int k = 0; k < 3; k++)
        dt_table_init_row(&tc, ids[k], init[k]);
    /* Worker 0 names 3 and 10, worker 1 names 10 and 20. */
    int64_t id0[2] = {3, 10}, id1[2] = {10, 20};
    float g0[2][T_DIM] = {{1, -2}, {0.25f, 3}}, g1[2][T_DIM] = {{0.5f, -1}, {4, 0.75f}};
    dt_tensor it, gt;
    make_tensor(&it, T_NAME, DT_DTYPE_I64, 1, 2, 0, id0);
    make_tensor(&gt, T_NAME, DT_DTYPE_F32, 2, 2, T_DIM, g0);
    dt_msg_push_resp resp;
    ck_assert_msg(push_sparse_from(&f, 0, 0, &it, &gt, 1, 1, &resp, &err) == 0, "%s", err.msg);
    ck_assert(!resp.dropped);
    ck_assert_msg(sparse_pull(&f, ids, 3, &got[0][0], &err) == 0, "%s", err.msg);
    assert_floats_eq(&got[0][0], &init[0][0], 3 * T_DIM, "rows before the step is whole");
    ck_assert_int_eq(table_status_of(&f, NULL).rows_held, 0);

    make_tensor(&it, T_NAME, DT_DTYPE_I64, 1, 2, 0, id1);
    make_tensor(&gt, T_NAME, DT_DTYPE_F32, 2, 2, T_DIM, g1);
    ck_assert_msg(push_sparse_from(&f, 1, 0, &it, &gt, 1, 1, &resp, &err) == 0, "%s", err.msg);
    ck_assert(!resp.dropped);
    for (int d = 0; d < T_DIM; d++) {
        /* mean = (sum in arrival order) * (1 / 2) */
        float m3 = (0.0f + g0[0][d]) * 0.5f, m10 = (0.0f + g0[1][d] + g1[0][d]) * 0.5f,
              m20 = (0.0f + g1[1][d]) * 0.5f;
        want[0][d] = init[0][d] - 0.5f * m3;
        want[1][d] = init[1][d] - 0.5f * m10;
        want[2][d] = init[2][d] - 0.5f * m20;
    }
    ck_assert_msg(sparse_pull(&f, ids, 3, &got[0][0], &err) == 0, "%s", err.msg);
    assert_floats_eq(&got[0][0], &want[0][0], 3 * T_DIM, "rows after the step");
    float w[NW], b[NB];
    for (int i = 0; i < NW; i++)
        w[i] = W0[i] - 0.5f * ((GW[i] + GW[i]) * 0.5f);
    for (int i = 0; i < NB; i++)
        b[i] = B0[i] - 0.5f * ((GB[i] + GB[i]) * 0.5f);
    assert_state(&f, w, b, 1, "the dense mean of the step");
    ck_assert_int_eq(table_status_of(&f, NULL).rows_held, 3);

    /* A push computed at step 0, now past: dropped, nothing changes. */
    make_tensor(&it, T_NAME, DT_DTYPE_I64, 1, 2, 0, id0);
    make_tensor(&gt, T_NAME, DT_DTYPE_F32, 2, 2, T_DIM, g0);
    ck_assert_msg(push_sparse_from(&f, 0, 0, &it, &gt, 1, 1, &resp, &err) == 0, "%s", err.msg);
    ck_assert(resp.dropped);
    ck_assert_msg(sparse_pull(&f, ids, 3, &got[0][0], &err) == 0, "%s", err.msg);
    assert_floats_eq(&got[0][0], &want[0][0], 3 * T_DIM, "rows after a stale push");
    fixture_stop(&f);
}
END_TEST

/* Eviction from the Create: a row untouched for more than idle_steps is
 * dropped by a later push's sweep (Status's rows held fall) and reads as
 * its initial value again; a row pushed every step stays. */
START_TEST(test_table_eviction) {
    fixture f;
    fixture_start(&f, 0);
    dt_optim_config cfg;
    sgd_config(&cfg, 0.5);
    dt_msg_table spec = table_spec();
    dt_err err;
    dt_table_evict_policy ev = {.idle_steps = -1};
    ASSERT_FAILS(create_evicting(&f, &cfg, &spec, 1, false, DT_MODE_ASYNC, &ev, &err), DT_EINVAL,
                 "eviction");
    ev = (dt_table_evict_policy){.min_touches = 3};
    ASSERT_FAILS(create_evicting(&f, &cfg, &spec, 1, false, DT_MODE_ASYNC, &ev, &err), DT_EINVAL,
                 "touch_window_steps >= 1 with min_touches");
    ev = (dt_table_evict_policy){.idle_steps = 2};
    dt_err_clear(&err);
    ck_assert_msg(create_evicting(&f, &cfg, &spec, 1, false, DT_MODE_ASYNC, &ev, &err) == 0, "%s",
                  err.msg);
    int64_t a = 5, b = 9;
    float g[T_DIM] = {1, 1}, init_a[T_DIM], got[T_DIM];
    dt_tensor it, gt;
    ck_assert_int_eq(sparse_pull(&f, &a, 1, init_a, &err), 0);
    make_tensor(&it, T_NAME, DT_DTYPE_I64, 1, 1, 0, &a);
    make_tensor(&gt, T_NAME, DT_DTYPE_F32, 2, 1, T_DIM, g);
    ck_assert_msg(push_sparse(&f, &it, &gt, 1, 1, &err) == 0, "%s", err.msg); /* step 1 */
    ck_assert_int_eq(sparse_pull(&f, &a, 1, got, &err), 0);
    ck_assert(got[0] != init_a[0]);
    /* Row b every step; row a's last touch was step 0. */
    make_tensor(&it, T_NAME, DT_DTYPE_I64, 1, 1, 0, &b);
    int64_t step = 1;
    dt_msg_table_status ts = table_status_of(&f, &step);
    ck_assert_int_eq(ts.rows_held, 1);
    while (ts.rows_held != 1 || step < 4) {
        ck_assert_msg(step < 10, "row %lld never evicted (%lld held at step %lld)", (long long)a,
                      (long long)ts.rows_held, (long long)step);
        ck_assert_msg(push_sparse(&f, &it, &gt, 1, 1, &err) == 0, "%s", err.msg);
        ts = table_status_of(&f, &step);
    }
    ck_assert_int_eq(sparse_pull(&f, &a, 1, got, &err), 0);
    assert_floats_eq(got, init_a, T_DIM, "an evicted row");
    ck_assert_int_eq(sparse_pull(&f, &b, 1, got, &err), 0);
    ck_assert(got[0] != 0); /* kept */
    fixture_stop(&f);
}
END_TEST

/* Pages of an export, for a table's rows in id order. */
static int export_page(fixture *f, int64_t after, int max_rows, bool slots,
                       dt_msg_sparse_export_resp *resp, dt_tensor *views, dt_rpc_buf *keep,
                       dt_err *err) {
    dt_msg_sparse_export_req req = {T_NAME, after, max_rows, slots};
    dt_err local;
    dt_err_clear(&local);
    size_t size;
    uint8_t *bytes = encode_msg(DT_MSG_SPARSE_EXPORT_REQ, &req, &size);
    int rc = call_raw(f, DT_MSG_SPARSE_EXPORT_REQ, bytes, size, keep, err);
    free(bytes);
    if (rc < 0) return rc;
    memset(resp, 0, sizeof *resp);
    resp->in = (dt_tensor_views){.items = views, .cap = 4};
    ck_assert_msg(dt_codec_decode(DT_MSG_SPARSE_EXPORT_RESP, keep->data, keep->len, resp, &local) ==
                      0,
                  "%s", local.msg);
    return 0;
}

static int import_page(fixture *f, dt_tensor *items, int count, bool last, dt_err *err) {
    dt_msg_sparse_import_req req;
    memset(&req, 0, sizeof req);
    snprintf(req.table, sizeof req.table, T_NAME);
    req.out = (dt_tensor_list){.items = items, .count = count};
    req.last = last;
    dt_msg_sparse_import_resp resp;
    return call_msg(f, DT_MSG_SPARSE_IMPORT_REQ, &req, DT_MSG_SPARSE_IMPORT_RESP, &resp, err);
}

/* A restore: Create with tables_pending, pages of rows (with adagrad's
 * slot), the last one makes the ps ready; the export gives them back a
 * page at a time, in id order. On task 0 of 2 only its own rows stay: the
 * re-shard. */
START_TEST(test_table_import_export) {
    for (int num_ps = 1; num_ps <= 2; num_ps++) {
        fixture f;
        fixture_start_task(&f, num_ps, 0, 0, NULL, NULL);
        dt_optim_config cfg;
        sgd_config(&cfg, 0.5);
        cfg.kind = DT_OPTIM_ADAGRAD;
        dt_msg_table spec = table_spec();
        dt_err err;
        dt_err_clear(&err);
        ck_assert_msg(create_tables(&f, &cfg, &spec, 1, true, DT_MODE_ASYNC, &err) == 0, "%s",
                      err.msg);
        int64_t probe = 1;
        ASSERT_FAILS(sparse_pull(&f, &probe, 1, NULL, &err), DT_EPRECOND, "not ready");
        enum { N = 7 };
        int64_t ids[N] = {1, 2, 3, 50, 51, 1000, T_ROWS - 2};
        float vals[N][T_DIM], acc[N][T_DIM];
        for (int k = 0; k < N; k++)
            for (int d = 0; d < T_DIM; d++) {
                vals[k][d] = (float)(k * 10 + d) - 20.5f;
                acc[k][d] = 0.25f * (float)(k + d + 1);
            }
        /* Two pages: rows 0..3, then 4..6. */
        for (int page = 0; page < 2; page++) {
            int first = page ? 4 : 0, n = page ? 3 : 4;
            dt_tensor items[3];
            make_tensor(&items[0], T_NAME "/ids", DT_DTYPE_I64, 1, n, 0, ids + first);
            make_tensor(&items[1], T_NAME "/values", DT_DTYPE_F32, 2, n, T_DIM, vals[first]);
            make_tensor(&items[2], T_NAME "/accumulator", DT_DTYPE_F32, 2, n, T_DIM, acc[first]);
            if (page == 1) {
                /* A bad page (a NaN) is refused and changes nothing. */
                float keep = vals[5][1];
                vals[5][1] = NAN;
                ASSERT_FAILS(import_page(&f, items, 3, true, &err), DT_EINVAL, "not a finite");
                vals[5][1] = keep;
            }
            ck_assert_msg(import_page(&f, items, 3, page == 1, &err) == 0, "%s", err.msg);
        }
        ASSERT_FAILS(import_page(&f, NULL, 0, true, &err), DT_EPRECOND, "no restore in progress");
        int held = 0;
        for (int k = 0; k < N; k++)
            held += dt_table_shard_of(ids[k], num_ps) == 0;
        ck_assert_int_eq(table_status_of(&f, NULL).rows_held, held);

        /* Export two rows a page, with the slot, until no more. */
        int64_t after = -1;
        int got = 0, more = 1;
        while (more) {
            dt_msg_sparse_export_resp resp;
            dt_tensor views[4];
            dt_rpc_buf keep;
            ck_assert_msg(export_page(&f, after, 2, true, &resp, views, &keep, &err) == 0, "%s",
                          err.msg);
            more = resp.more;
            if (resp.in.count == 0) {
                ck_assert(!more);
                dt_rpc_buf_release(&keep);
                break;
            }
            ck_assert_int_eq(resp.in.count, 3);
            ck_assert_str_eq(views[2].name, T_NAME "/accumulator");
            int64_t n = views[0].shape[0];
            ck_assert(n >= 1 && n <= 2);
            for (int64_t r = 0; r < n; r++) {
                int64_t id;
                memcpy(&id, (const uint8_t *)views[0].data + 8 * r, 8);
                int k = 0;
                while (k < N && ids[k] != id)
                    k++;
                ck_assert_msg(k < N && id > after, "exported id %lld", (long long)id);
                ck_assert_int_eq(dt_table_shard_of(id, num_ps), 0);
                ck_assert(
                    memcmp((const float *)views[1].data + r * T_DIM, vals[k], sizeof vals[k]) == 0);
                ck_assert(memcmp((const float *)views[2].data + r * T_DIM, acc[k], sizeof acc[k]) ==
                          0);
                after = id;
                got++;
            }
            dt_rpc_buf_release(&keep);
        }
        ck_assert_int_eq(got, held);
        fixture_stop(&f);
    }
}
END_TEST

/* FTRL's fields reach the ps: with a large L1 every weight a gradient
 * touches is exactly 0. */
START_TEST(test_ftrl_over_the_wire) {
    fixture f;
    fixture_start(&f, 0);
    dt_optim_config cfg;
    dt_optim_defaults(&cfg);
    cfg.kind = DT_OPTIM_FTRL;
    cfg.learning_rate = 0.5;
    cfg.ftrl_l1 = 100;
    dt_msg_table spec = table_spec();
    spec.init = DT_TABLE_INIT_ZEROS;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(create_tables(&f, &cfg, &spec, 1, false, DT_MODE_ASYNC, &err) == 0, "%s",
                  err.msg);
    int64_t ids[2] = {5, 6};
    float g[2][T_DIM] = {{1, -2}, {0.5f, 4}};
    dt_tensor it, gt;
    make_tensor(&it, T_NAME, DT_DTYPE_I64, 1, 2, 0, ids);
    make_tensor(&gt, T_NAME, DT_DTYPE_F32, 2, 2, T_DIM, g);
    ck_assert_msg(push_sparse(&f, &it, &gt, 1, 1, &err) == 0, "%s", err.msg);
    float rows[2][T_DIM], w[NW], b[NB];
    ck_assert_int_eq(sparse_pull(&f, ids, 2, &rows[0][0], &err), 0);
    for (int d = 0; d < 2 * T_DIM; d++)
        ck_assert_float_eq((&rows[0][0])[d], 0);
    ck_assert_int_eq(pull(&f, w, b, NULL, NULL, &err), 0);
    for (int i = 0; i < NW; i++)
        ck_assert_float_eq(w[i], 0);
    dt_msg_table_status ts = table_status_of(&f, NULL);
    ck_assert_int_eq(ts.rows_held, 2);
    ck_assert_int_eq(ts.nonzero, 0);
    fixture_stop(&f);
}
END_TEST

/* ---- lifecycle --------------------------------------------------------- */

START_TEST(test_not_ready) {
    fixture f;
    fixture_start(&f, 0);
    dt_err err;
    float w[NW], b[NB];
    ASSERT_FAILS(pull(&f, w, b, NULL, NULL, &err), DT_EPRECOND, "not ready");
    ASSERT_FAILS(push(&f, GW, GB, 1, NULL, &err), DT_EPRECOND, "not ready");
    dt_msg_status_resp st;
    status(&f, 1, &st);
    ck_assert(!st.ready);
    ck_assert(!st.done);
    ck_assert_int_eq(st.num_variables, 0);
    ck_assert_int_eq(st.global_step, 0);
    ck_assert_int_eq(st.pushes_applied, 0);
    ck_assert_int_eq(st.pushes_rejected, 1);
    ck_assert(st.incarnation != 0);
    fixture_stop(&f);
}
END_TEST

START_TEST(test_create_then_pull) {
    fixture f;
    dt_msg_create_resp cr;
    fixture_start_sgd(&f, 0, 0.5, 5, 100, &cr);
    dt_err err;
    dt_err_clear(&err);
    ck_assert(cr.incarnation != 0);
    ck_assert_int_eq(cr.global_step, 5);
    assert_state(&f, W0, B0, 5, "after create");

    dt_msg_status_resp st;
    status(&f, 1, &st);
    ck_assert(st.ready);
    ck_assert(!st.done);
    ck_assert(st.incarnation == cr.incarnation);
    ck_assert_int_eq(st.global_step, 5);
    ck_assert_int_eq(st.max_steps, 100);
    ck_assert_int_eq(st.num_variables, 2);
    ck_assert_int_eq(st.num_bytes, (NW + NB) * 4);
    ck_assert_str_eq(st.model, "linear test");

    /* A named subset, and an unknown name. */
    const char *names[1] = {"b"};
    dt_msg_pull_req req = pull_req(0);
    req.out_names = names;
    req.out_count = 1;
    size_t size;
    uint8_t *bytes = encode_msg(DT_MSG_PULL_REQ, &req, &size);
    dt_rpc_buf resp;
    ck_assert_int_eq(call_raw(&f, DT_MSG_PULL_REQ, bytes, size, &resp, &err), 0);
    free(bytes);
    dt_msg_pull_resp pr;
    memset(&pr, 0, sizeof pr);
    dt_tensor views[2];
    pr.in.items = views;
    pr.in.cap = 2;
    ck_assert_int_eq(dt_codec_decode(DT_MSG_PULL_RESP, resp.data, resp.len, &pr, &err), 0);
    ck_assert_int_eq(pr.in.count, 1);
    ck_assert_str_eq(views[0].name, "b");
    float got[NB];
    memcpy(got, views[0].data, sizeof got);
    assert_floats_eq(got, B0, NB, "b");
    dt_rpc_buf_release(&resp);

    names[0] = "nope";
    ASSERT_FAILS(call_msg(&f, DT_MSG_PULL_REQ, &req, DT_MSG_PULL_RESP, NULL, &err), DT_ENOTFOUND,
                 "unknown variable nope");
    fixture_stop(&f);
}
END_TEST

START_TEST(test_create_twice) {
    fixture f;
    fixture_start(&f, 0);
    dt_optim_config cfg;
    sgd_config(&cfg, 0.5);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(create(&f, W0, B0, &cfg, 0, 100, NULL, &err), 0);
    ASSERT_FAILS(create(&f, GW, GB, &cfg, 7, 100, NULL, &err), DT_EEXIST, "already exist");
    assert_state(&f, W0, B0, 0, "after the second create");
    fixture_stop(&f);
}
END_TEST

/* A rejected Create leaves the ps not ready; a good one then works. */
START_TEST(test_create_invalid) {
    fixture f;
    fixture_start(&f, 0);
    dt_optim_config cfg;
    sgd_config(&cfg, 0.5);
    dt_err err;
    dt_optim_config bad = cfg;
    bad.learning_rate = -1;
    ASSERT_FAILS(create(&f, W0, B0, &bad, 0, 100, NULL, &err), DT_EINVAL, "learning_rate");
    ASSERT_FAILS(create(&f, W0, B0, &cfg, -1, 100, NULL, &err), DT_EINVAL, "negative");

    float w[NW], b[NB];
    memcpy(w, W0, sizeof w);
    memcpy(b, B0, sizeof b);
    dt_tensor items[2];
    model_tensors(items, w, b);
    dt_msg_create_req req = create_req(items, 2, &cfg, 10);
    /* The optimizer travels by name: one this ps does not know is the
     * caller's error, naming the field, before anything else is read. */
    req.optim.kind = DT_OPTIM_ADAGRAD;
    ASSERT_FAILS(call_patched(&f, DT_MSG_CREATE_REQ, &req, "adagrad", "rmsprop", 7, &err),
                 DT_EINVAL,
                 "CreateRequest: optimizer.name: unknown name \"rmsprop\" (want sgd, momentum, "
                 "adagrad, adam or ftrl)");
    /* A name with a control byte is shown escaped. */
    ASSERT_FAILS(call_patched(&f, DT_MSG_CREATE_REQ, &req, "adagrad",
                              "adagr\x01"
                              "d",
                              7, &err),
                 DT_EINVAL, "unknown name \"adagr\\x01d\"");
    req.optim = cfg;
    snprintf(items[1].name, sizeof items[1].name, "w"); /* twice */
    ASSERT_FAILS(call_msg(&f, DT_MSG_CREATE_REQ, &req, DT_MSG_CREATE_RESP, NULL, &err), DT_EINVAL,
                 "given twice");
    double dw[NW] = {0};
    make_tensor(&items[0], "w", DT_DTYPE_F64, 2, 2, 3, dw);
    snprintf(items[1].name, sizeof items[1].name, "b");
    ASSERT_FAILS(call_msg(&f, DT_MSG_CREATE_REQ, &req, DT_MSG_CREATE_RESP, NULL, &err), DT_EINVAL,
                 "only F32");
    /* An empty Create is a ps with no units of the model, which is fine;
     * an empty message is still refused, for its missing optimizer, and a
     * zeroed optimizer (sgd) for its learning rate. */
    req.out.count = 0;
    memset(&req.optim, 0, sizeof req.optim);
    ASSERT_FAILS(call_msg(&f, DT_MSG_CREATE_REQ, &req, DT_MSG_CREATE_RESP, NULL, &err), DT_EINVAL,
                 "optimizer: \"learning_rate\"");
    dt_rpc_buf resp;
    ASSERT_FAILS(call_raw(&f, DT_MSG_CREATE_REQ, NULL, 0, &resp, &err), DT_EINVAL,
                 "CreateRequest: optimizer.name: unknown name \"\"");
    const uint8_t garbage[6] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
    ASSERT_FAILS(call_raw(&f, DT_MSG_CREATE_REQ, garbage, sizeof garbage, &resp, &err), DT_EINVAL,
                 "CreateRequest");

    dt_msg_status_resp st;
    status(&f, -1, &st);
    ck_assert(!st.ready);
    dt_err_clear(&err);
    ck_assert_msg(create(&f, W0, B0, &cfg, 0, 100, NULL, &err) == 0, "create: %s", err.msg);
    assert_state(&f, W0, B0, 0, "after a good create");
    fixture_stop(&f);
}
END_TEST

/* ---- pushes ------------------------------------------------------------ */

START_TEST(test_push_sgd_exact) {
    fixture f;
    dt_msg_create_resp cr;
    fixture_start_sgd(&f, 0, 0.5, 10, 100, &cr);
    dt_err err;
    dt_err_clear(&err);
    float w[NW], b[NB];
    memcpy(w, W0, sizeof w);
    memcpy(b, B0, sizeof b);
    for (int step = 1; step <= 2; step++) {
        dt_msg_push_resp pr;
        ck_assert_msg(push(&f, GW, GB, 1, &pr, &err) == 0, "push: %s", err.msg);
        ck_assert_int_eq(pr.global_step, 10 + step);
        ck_assert(!pr.done);
        ck_assert(pr.incarnation == cr.incarnation);
        for (int i = 0; i < NW; i++)
            w[i] -= 0.5f * GW[i]; /* w -= lr*g */
        for (int i = 0; i < NB; i++)
            b[i] -= 0.5f * GB[i];
        assert_state(&f, w, b, 10 + step, "after a push");
    }
    dt_msg_status_resp st;
    status(&f, 1, &st);
    ck_assert_int_eq(st.pushes_applied, 2);
    ck_assert_int_eq(st.pushes_rejected, 0);
    ck_assert_int_eq(st.global_step, 12);
    fixture_stop(&f);
}
END_TEST

/* A push with an id, optionally asking for the variables back (pull). */
static int push_with_id(fixture *f, const float *gw, const float *gb, int worker, uint64_t id,
                        int want_vars, dt_msg_push_resp *resp, float *w, float *b, dt_err *err) {
    model_copy m;
    copy_model(&m, gw, gb);
    dt_tensor views[4];
    dt_msg_push_req req = push_req(m.items, 2, worker);
    req.push_id = id;
    req.pull = want_vars;
    memset(resp, 0, sizeof *resp);
    resp->in.items = views;
    resp->in.cap = want_vars ? 4 : 0;
    /* A raw call: the variables' views point into the reply, read here. */
    dt_err local;
    dt_err_clear(&local);
    size_t size;
    uint8_t *bytes = encode_msg(DT_MSG_PUSH_REQ, &req, &size);
    dt_rpc_buf raw;
    int rc = call_raw(f, DT_MSG_PUSH_REQ, bytes, size, &raw, err);
    free(bytes);
    if (rc < 0) return rc;
    rc = dt_codec_decode(DT_MSG_PUSH_RESP, raw.data, raw.len, resp, &local);
    ck_assert_msg(rc == 0, "push reply: %s", local.msg);
    if (want_vars && resp->in.count == 2) {
        ck_assert_str_eq(views[0].name, "w");
        memcpy(w, views[0].data, NW * 4);
        memcpy(b, views[1].data, NB * 4);
    }
    memset(&resp->in, 0, sizeof resp->in);
    dt_rpc_buf_release(&raw);
    return 0;
}

/* Status's count of the pushes this ps took from task, -1 when it does
 * not list the task. */
static int64_t pushes_taken(const dt_msg_status_resp *st, int task) {
    for (int i = 0; i < st->num_workers; i++)
        if (st->workers[i].worker == task) return st->workers[i].pushes;
    return -1;
}

/* A push sent again with its id (its reply was lost) is answered as the
 * first one was and not applied twice; a new id is a new push; a refused
 * push leaves its id free for the corrected retry. */
START_TEST(test_retried_push_applied_once) {
    fixture f;
    dt_msg_create_resp cr;
    fixture_start_sgd(&f, 0, 0.5, 10, 100, &cr);
    dt_err err;
    dt_err_clear(&err);
    float w[NW], b[NB], pw[NW], pb[NB];
    memcpy(w, W0, sizeof w);
    memcpy(b, B0, sizeof b);
    for (int i = 0; i < NW; i++)
        w[i] -= 0.5f * GW[i];
    for (int i = 0; i < NB; i++)
        b[i] -= 0.5f * GB[i];
    dt_msg_push_resp pr;
    for (int attempt = 0; attempt < 3; attempt++) {
        ck_assert_msg(push_with_id(&f, GW, GB, 1, 77, 1, &pr, pw, pb, &err) == 0, "push: %s",
                      err.msg);
        ck_assert_int_eq(pr.global_step, 11);
        ck_assert(!pr.wait && !pr.done);
        /* The reply carries the variables after the (one) push. */
        assert_floats_eq(pw, w, NW, "w in the push reply");
        assert_floats_eq(pb, b, NB, "b in the push reply");
    }
    assert_state(&f, w, b, 11, "after one push sent three times");
    dt_msg_status_resp st;
    status(&f, 1, &st);
    ck_assert_int_eq(st.pushes_applied, 1);

    /* Another task's push with the same id is its own. */
    ck_assert_int_eq(push_with_id(&f, GW, GB, 2, 77, 0, &pr, pw, pb, &err), 0);
    ck_assert_int_eq(pr.global_step, 12);
    /* A refused push (NaN) does not take its id: the good retry applies. */
    float bad[NW];
    memcpy(bad, GW, sizeof bad);
    bad[0] = NAN;
    ASSERT_FAILS(push_with_id(&f, bad, GB, 1, 78, 0, &pr, pw, pb, &err), DT_EINVAL, "");
    ck_assert_int_eq(push_with_id(&f, GW, GB, 1, 78, 0, &pr, pw, pb, &err), 0);
    ck_assert_int_eq(pr.global_step, 13);
    /* Id 0 means none: each one is applied. */
    ck_assert_int_eq(push_with_id(&f, GW, GB, 1, 0, 0, &pr, pw, pb, &err), 0);
    ck_assert_int_eq(push_with_id(&f, GW, GB, 1, 0, 0, &pr, pw, pb, &err), 0);
    ck_assert_int_eq(pr.global_step, 15);
    status(&f, 1, &st);
    ck_assert_int_eq(st.pushes_applied, 5);
    /* Each task's count of taken pushes (what a restarted worker resumes
     * from) is as many: a retry of a taken one and a refused one are not
     * batches it took. */
    ck_assert_int_eq(pushes_taken(&st, 1), 4);
    fixture_stop(&f);
}
END_TEST

START_TEST(test_max_steps) {
    fixture f;
    fixture_start_sgd(&f, 0, 0.5, 0, 3, NULL);
    dt_err err;
    dt_err_clear(&err);
    float w[NW], b[NB];
    memcpy(w, W0, sizeof w);
    memcpy(b, B0, sizeof b);
    for (int step = 1; step <= 3; step++) {
        dt_msg_push_resp pr;
        ck_assert_int_eq(push(&f, GW, GB, 1, &pr, &err), 0);
        ck_assert_int_eq(pr.global_step, step);
        ck_assert_int_eq(pr.done, step == 3);
        for (int i = 0; i < NW; i++)
            w[i] -= 0.5f * GW[i];
        for (int i = 0; i < NB; i++)
            b[i] -= 0.5f * GB[i];
    }
    /* Past max_steps: answered done, not applied. */
    for (int extra = 0; extra < 2; extra++) {
        dt_msg_push_resp pr;
        ck_assert_int_eq(push(&f, GW, GB, 1, &pr, &err), 0);
        ck_assert(pr.done);
        ck_assert_int_eq(pr.global_step, 3);
    }
    assert_state(&f, w, b, 3, "after pushes past max_steps");
    int done = 0;
    float gw[NW], gb[NB];
    ck_assert_int_eq(pull(&f, gw, gb, NULL, &done, &err), 0);
    ck_assert(done);
    dt_msg_status_resp st;
    status(&f, 1, &st);
    ck_assert(st.done);
    ck_assert_int_eq(st.pushes_applied, 3);
    ck_assert_int_eq(st.global_step, 3);
    fixture_stop(&f);
}
END_TEST

/* Each bad push is refused with its code; nothing changes; the ps serves
 * on. */
START_TEST(test_bad_pushes) {
    fixture f;
    fixture_start_sgd(&f, 0, 0.5, 4, 100, NULL);
    dt_err err;
    dt_err_clear(&err);

    float gw[NW], gb[NB];
    memcpy(gw, GW, sizeof gw);
    memcpy(gb, GB, sizeof gb);
    double gw64[NW] = {0};
    dt_tensor items[3];
    int rejected = 0;

    /* Unknown variable: in place of b, then besides w and b. */
    model_tensors(items, gw, gb);
    make_tensor(&items[1], "nope", DT_DTYPE_F32, 1, 3, 0, gb);
    ASSERT_FAILS(push_items(&f, items, 2, 1, NULL, &err), DT_ENOTFOUND, "unknown variable nope");
    assert_state(&f, W0, B0, 4, "unknown variable");
    model_tensors(items, gw, gb);
    make_tensor(&items[2], "nope", DT_DTYPE_F32, 1, 3, 0, gb);
    ASSERT_FAILS(push_items(&f, items, 3, 1, NULL, &err), DT_ENOTFOUND, "unknown variable nope");
    assert_state(&f, W0, B0, 4, "an extra unknown variable");
    rejected += 2;

    /* Wrong shape: (3, 2) for (2, 3); then (6). */
    model_tensors(items, gw, gb);
    make_tensor(&items[0], "w", DT_DTYPE_F32, 2, 3, 2, gw);
    ASSERT_FAILS(push_items(&f, items, 2, 1, NULL, &err), DT_EINVAL, "shape");
    assert_state(&f, W0, B0, 4, "wrong shape");
    make_tensor(&items[0], "w", DT_DTYPE_F32, 1, 6, 0, gw);
    ASSERT_FAILS(push_items(&f, items, 2, 1, NULL, &err), DT_EINVAL, "gradient w");
    assert_state(&f, W0, B0, 4, "wrong rank");
    rejected += 2;

    /* Wrong dtype. */
    make_tensor(&items[0], "w", DT_DTYPE_F64, 2, 2, 3, gw64);
    ASSERT_FAILS(push_items(&f, items, 2, 1, NULL, &err), DT_EINVAL, "dtype");
    assert_state(&f, W0, B0, 4, "wrong dtype");
    rejected++;

    /* Not finite: NaN in w; +Inf and -Inf in b after a good w (validation
     * comes before any update). */
    const float bad_values[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        model_tensors(items, gw, gb);
        float saved;
        if (k == 0) {
            saved = gw[4];
            gw[4] = bad_values[k];
            ASSERT_FAILS(push_items(&f, items, 2, 1, NULL, &err), DT_EINVAL, "w[4] is not finite");
            gw[4] = saved;
        } else {
            saved = gb[2];
            gb[2] = bad_values[k];
            ASSERT_FAILS(push_items(&f, items, 2, 1, NULL, &err), DT_EINVAL, "b[2] is not finite");
            gb[2] = saved;
        }
        assert_state(&f, W0, B0, 4, "non-finite gradient");
        rejected++;
    }

    /* The same variable twice. */
    model_tensors(items, gw, gb);
    make_tensor(&items[1], "w", DT_DTYPE_F32, 2, 2, 3, gw);
    ASSERT_FAILS(push_items(&f, items, 2, 1, NULL, &err), DT_EINVAL, "twice");
    assert_state(&f, W0, B0, 4, "duplicate gradient");
    rejected++;

    /* Garbage bytes. */
    const uint8_t garbage[][8] = {
        {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF},
        {0x1A, 0x7F, 0x0A, 0x01, 0x77, 0, 0, 0}, /* a tensor longer than the message */
        {0x0F, 0x00, 0x00, 0x00, 0x00, 0, 0, 0}, /* wire type 7 */
    };
    for (size_t g = 0; g < sizeof garbage / sizeof garbage[0]; g++) {
        dt_rpc_buf resp;
        ASSERT_FAILS(call_raw(&f, DT_MSG_PUSH_REQ, garbage[g], sizeof garbage[g], &resp, &err),
                     DT_EINVAL, "PushRequest");
        dt_rpc_buf_release(&resp);
        assert_state(&f, W0, B0, 4, "garbage push");
        rejected++;
    }
    /* Garbage to the other methods too; Shutdown must not shut down. */
    const dt_msg_type others[3] = {DT_MSG_PULL_REQ, DT_MSG_STATUS_REQ, DT_MSG_SHUTDOWN_REQ};
    for (int o = 0; o < 3; o++) {
        dt_rpc_buf resp;
        ASSERT_FAILS(call_raw(&f, others[o], garbage[0], sizeof garbage[0], &resp, &err), DT_EINVAL,
                     "malformed");
        dt_rpc_buf_release(&resp);
    }

    dt_msg_status_resp st;
    status(&f, 1, &st);
    ck_assert_int_eq(st.pushes_rejected, rejected);
    ck_assert_int_eq(st.pushes_applied, 0);
    ck_assert(!st.done);
    /* Still serving, and a good push still applies. */
    dt_msg_push_resp pr;
    ck_assert_msg(push(&f, GW, GB, 1, &pr, &err) == 0, "good push: %s", err.msg);
    ck_assert_int_eq(pr.global_step, 5);
    fixture_stop(&f);
}
END_TEST

/* A Push carries one gradient per variable on the ps: one that leaves a
 * variable out (or has none) is malformed and must not move the step. */
/* With skip_nonfinite, a NaN gradient is answered "dropped", counted, and
 * changes nothing; the next good push applies as usual. */
START_TEST(test_skip_nonfinite) {
    fixture f;
    fixture_start(&f, 0);
    float wc[NW], bc[NB];
    memcpy(wc, W0, sizeof wc);
    memcpy(bc, B0, sizeof bc);
    dt_tensor model[2];
    model_tensors(model, wc, bc);
    dt_optim_config cfg;
    sgd_config(&cfg, 0.5);
    dt_msg_create_req req = create_req(model, 2, &cfg, 100);
    req.global_step = 4;
    req.skip_nonfinite = true;
    dt_msg_create_resp created;
    memset(&created, 0, sizeof created);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(call_msg(&f, DT_MSG_CREATE_REQ, &req, DT_MSG_CREATE_RESP, &created, &err) == 0,
                  "%s", err.msg);

    float gw[NW], gb[NB];
    memcpy(gw, GW, sizeof gw);
    memcpy(gb, GB, sizeof gb);
    gw[1] = NAN;
    dt_tensor items[2];
    model_tensors(items, gw, gb);
    dt_msg_push_resp resp;
    memset(&resp, 0, sizeof resp);
    ck_assert_msg(push_items(&f, items, 2, 1, &resp, &err) == 0, "%s", err.msg);
    ck_assert(resp.dropped);
    ck_assert_int_eq(resp.global_step, 4);
    assert_state(&f, W0, B0, 4, "skipped non-finite gradient");
    dt_msg_status_resp st;
    status(&f, -1, &st);
    ck_assert_int_eq(st.pushes_nonfinite, 1);
    ck_assert_int_eq(st.pushes_rejected, 0);
    /* Skipped, its batch was taken all the same: a restarted worker goes
     * on past it. */
    ck_assert_int_eq(pushes_taken(&st, 1), 1);

    gw[1] = GW[1];
    memset(&resp, 0, sizeof resp);
    ck_assert_int_eq(push_items(&f, items, 2, 1, &resp, &err), 0);
    ck_assert(!resp.dropped);
    ck_assert_int_eq(resp.global_step, 5);
    fixture_stop(&f);
}
END_TEST

START_TEST(test_push_must_cover_every_variable) {
    fixture f;
    fixture_start_sgd(&f, 0, 0.5, 4, 100, NULL);
    dt_err err;
    dt_err_clear(&err);
    float gw[NW], gb[NB];
    memcpy(gw, GW, sizeof gw);
    memcpy(gb, GB, sizeof gb);
    dt_tensor items[2];
    model_tensors(items, gw, gb);
    dt_err_clear(&err);
    int rc = push_items(&f, &items[0], 1, 1, NULL, &err);
    ck_assert_msg(rc == DT_EINVAL, "a push of w only: rc %d (%s)", rc, err.msg);
    assert_state(&f, W0, B0, 4, "a push missing b");
    dt_err_clear(&err);
    rc = push_items(&f, items, 0, 1, NULL, &err);
    ck_assert_msg(rc == DT_EINVAL, "a push of nothing: rc %d (%s)", rc, err.msg);
    assert_state(&f, W0, B0, 4, "an empty push");
    fixture_stop(&f);
}
END_TEST

/* Fault injection: a valid push cut at every byte offset is refused with
 * DT_EINVAL and leaves the ps as it was. */
START_TEST(test_truncated_pushes) {
    fixture f;
    fixture_start_sgd(&f, 0, 0.5, 4, 100, NULL);
    dt_err err;
    dt_err_clear(&err);
    float gw[NW], gb[NB];
    memcpy(gw, GW, sizeof gw);
    memcpy(gb, GB, sizeof gb);
    dt_tensor items[2];
    model_tensors(items, gw, gb);
    dt_msg_push_req req = push_req(items, 2, 1);
    req.step = 4;
    size_t size;
    uint8_t *full = encode_msg(DT_MSG_PUSH_REQ, &req, &size);
    ck_assert_uint_gt(size, 0);
    char when[64];
    for (size_t cut = 0; cut < size; cut++) {
        dt_rpc_buf resp;
        dt_err_clear(&err);
        int rc = call_raw(&f, DT_MSG_PUSH_REQ, full, cut, &resp, &err);
        dt_rpc_buf_release(&resp);
        ck_assert_msg(rc == DT_EINVAL, "push cut at %lld of %lld: rc %d (%s)", (long long)cut,
                      (long long)size, rc, err.msg);
        snprintf(when, sizeof when, "push cut at %lld", (long long)cut);
        assert_state(&f, W0, B0, 4, when);
    }
    free(full);
    fixture_stop(&f);
}
END_TEST

/* ---- concurrency ------------------------------------------------------- */

#define PUSHERS 4
#define PUSHES_EACH 200

typedef struct {
    fixture *f;
    const dt_tensors *grads; /* shared, read only */
    int worker;
    int pushes;
    int rc;
    dt_err err;
} pusher;

/* Pushes p->grads p->pushes times through a client of its own. */
static void *push_loop(void *arg) {
    pusher *p = arg;
    dt_err_clear(&p->err);
    dt_ps_client *client = NULL;
    dt_ps_client_params cp = {
        .cluster = &p->f->cluster, .worker = p->worker, .timeout_ms = CALL_TIMEOUT_MS};
    if ((p->rc = dt_ps_client_new(&cp, p->grads, &client, &p->err)) < 0) return NULL;
    for (int k = 0; k < p->pushes; k++) {
        dt_ps_reply r;
        if ((p->rc = dt_ps_client_push(client, p->grads, 0, &r, &p->err)) < 0) break;
    }
    dt_ps_client_free(client);
    return NULL;
}

/* Runs n pushers concurrently and checks they all succeeded. */
static void run_pushers(pusher *p, int n) {
    pthread_t th[16];
    ck_assert_int_le(n, 16);
    for (int t = 0; t < n; t++)
        ck_assert_int_eq(pthread_create(&th[t], NULL, push_loop, &p[t]), 0);
    for (int t = 0; t < n; t++)
        ck_assert_int_eq(pthread_join(th[t], NULL), 0);
    for (int t = 0; t < n; t++)
        ck_assert_msg(p[t].rc == 0, "pusher %d: %s", t, p[t].err.msg);
}

/* Thread t's gradient: powers of two, different per thread and element. */
static float grad_of(int t, int i) {
    return ldexpf(1.0f, ((t + i) % 4) - 1) * (i % 2 ? -1 : 1);
}

START_TEST(test_concurrent_pushes) {
    fixture f;
    fixture_start(&f, 0);
    dt_optim_config cfg;
    sgd_config(&cfg, 1.0 / 1024);
    dt_err err;
    dt_err_clear(&err);
    float w0[NW], b0[NB];
    for (int i = 0; i < NW; i++)
        w0[i] = 0.25f * (float)i - 1;
    for (int i = 0; i < NB; i++)
        b0[i] = 2 - 0.5f * (float)i;
    ck_assert_int_eq(create(&f, w0, b0, &cfg, 0, 1000000, NULL, &err), 0);
    dt_tensor specs[2];
    float unused_w[NW], unused_b[NB];
    model_tensors(specs, unused_w, unused_b);
    dt_tensors grads[PUSHERS];
    pusher p[PUSHERS];
    for (int t = 0; t < PUSHERS; t++) {
        ck_assert_int_eq(dt_tensors_init(&grads[t], specs, 2, &err), 0);
        float *gw = grads[t].items[0].data, *gb = grads[t].items[1].data;
        for (int i = 0; i < NW; i++)
            gw[i] = grad_of(t, i);
        for (int i = 0; i < NB; i++)
            gb[i] = grad_of(t, NW + i);
        memset(&p[t], 0, sizeof p[t]);
        p[t].f = &f;
        p[t].grads = &grads[t];
        p[t].worker = t % 2;
        p[t].pushes = PUSHES_EACH;
    }
    run_pushers(p, PUSHERS);

    /* w = w0 - lr * sum of every gradient, exact: every partial sum is a
     * multiple of 2^-11 well inside float's 24 bits. */
    float w[NW], b[NB];
    for (int i = 0; i < NW; i++) {
        double sum = 0;
        for (int t = 0; t < PUSHERS; t++)
            sum += PUSHES_EACH * (double)grad_of(t, i);
        w[i] = (float)(w0[i] - sum / 1024);
    }
    for (int i = 0; i < NB; i++) {
        double sum = 0;
        for (int t = 0; t < PUSHERS; t++)
            sum += PUSHES_EACH * (double)grad_of(t, NW + i);
        b[i] = (float)(b0[i] - sum / 1024);
    }
    assert_state(&f, w, b, PUSHERS * PUSHES_EACH, "after concurrent pushes");
    dt_msg_status_resp st;
    status(&f, -1, &st);
    ck_assert_int_eq(st.global_step, PUSHERS * PUSHES_EACH);
    ck_assert_int_eq(st.pushes_applied, PUSHERS * PUSHES_EACH);
    ck_assert_int_eq(st.pushes_rejected, 0);
    for (int t = 0; t < PUSHERS; t++)
        dt_tensors_deinit(&grads[t]);
    fixture_stop(&f);
}
END_TEST

/* Concurrent pushes racing past max_steps: exactly max_steps are applied,
 * whatever the interleaving. A large variable widens the time each update
 * takes, and so the window for a race; several rounds, each on a fresh ps. */
#define BIG (1 << 16)

START_TEST(test_max_steps_under_concurrency) {
    enum { MAX_STEPS = 6, ROUNDS = 10, THREADS = 6 };
    dt_tensor spec;
    make_tensor(&spec, "big", DT_DTYPE_F32, 1, BIG, 0, NULL);
    dt_tensors init, grads, got;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_tensors_init(&init, &spec, 1, &err), 0);
    ck_assert_int_eq(dt_tensors_init(&grads, &spec, 1, &err), 0);
    ck_assert_int_eq(dt_tensors_init(&got, &spec, 1, &err), 0);
    float *iv = init.items[0].data, *gv = grads.items[0].data, *out = got.items[0].data;
    for (int i = 0; i < BIG; i++) {
        iv[i] = 1.0f;
        gv[i] = 0.5f;
    }
    const float want = 1.0f - MAX_STEPS * 0.5f / 1024; /* exact */
    for (int round = 0; round < ROUNDS; round++) {
        fixture f;
        fixture_start(&f, 0);
        dt_optim_config cfg;
        sgd_config(&cfg, 1.0 / 1024);
        dt_msg_create_req req = create_req(init.items, 1, &cfg, MAX_STEPS);
        int rc = call_msg(&f, DT_MSG_CREATE_REQ, &req, DT_MSG_CREATE_RESP, NULL, &err);
        ck_assert_msg(rc == 0, "create: %s", err.msg);
        pusher p[THREADS];
        for (int t = 0; t < THREADS; t++) {
            memset(&p[t], 0, sizeof p[t]);
            p[t].f = &f;
            p[t].grads = &grads;
            p[t].worker = t % 2;
            p[t].pushes = MAX_STEPS;
        }
        run_pushers(p, THREADS);
        dt_msg_status_resp st;
        status(&f, -1, &st);
        ck_assert_msg(st.global_step == MAX_STEPS && st.pushes_applied == MAX_STEPS,
                      "round %d: global_step %lld, pushes_applied %lld, max_steps %d", round,
                      (long long)st.global_step, (long long)st.pushes_applied, MAX_STEPS);
        dt_ps_client *client = NULL;
        dt_ps_client_params cp = {
            .cluster = &f.cluster, .worker = -1, .timeout_ms = CALL_TIMEOUT_MS};
        ck_assert_int_eq(dt_ps_client_new(&cp, &got, &client, &err), 0);
        dt_ps_reply r;
        ck_assert_msg(dt_ps_client_pull(client, &got, NULL, 0, &r, &err) == 0, "pull: %s", err.msg);
        ck_assert(r.done);
        for (int i = 0; i < BIG; i++)
            ck_assert_msg(out[i] == want, "round %d: big[%d] = %.9g, want %.9g", round, i, out[i],
                          want);
        dt_ps_client_free(client);
        fixture_stop(&f);
    }
    dt_tensors_deinit(&init);
    dt_tensors_deinit(&grads);
    dt_tensors_deinit(&got);
}
END_TEST

/* ---- optimizers -------------------------------------------------------- */

/* Three pushes through the ps against the update rules of optim.h in
 * double precision. */
static void run_optimizer(const dt_optim_config *cfg) {
    fixture f;
    fixture_start(&f, 0);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(create(&f, W0, B0, cfg, 0, 100, NULL, &err) == 0, "create %s: %s",
                  dt_optim_name(cfg->kind), err.msg);
    const int n = NW + NB;
    double w[NW + NB], s0[NW + NB], s1[NW + NB];
    for (int i = 0; i < n; i++) {
        w[i] = i < NW ? W0[i] : B0[i - NW];
        s0[i] = cfg->kind == DT_OPTIM_ADAGRAD ? cfg->initial_accumulator : 0;
        s1[i] = 0;
    }
    const double lr = cfg->learning_rate, mu = cfg->momentum, b1 = cfg->beta1, b2 = cfg->beta2,
                 eps = cfg->epsilon;
    for (int t = 1; t <= 3; t++) {
        float gw[NW], gb[NB];
        for (int i = 0; i < NW; i++)
            gw[i] = (float)(0.3 * t - 0.2 * i + 0.05);
        for (int i = 0; i < NB; i++)
            gb[i] = (float)(-0.7 * t + 0.4 * i);
        ck_assert_msg(push(&f, gw, gb, 1, NULL, &err) == 0, "push: %s", err.msg);
        for (int i = 0; i < n; i++) {
            double g = i < NW ? gw[i] : gb[i - NW];
            if (cfg->kind == DT_OPTIM_MOMENTUM) {
                s0[i] = mu * s0[i] + g; /* a = mu*a + g */
                w[i] -= cfg->nesterov ? lr * g + lr * mu * s0[i] : lr * s0[i];
            } else if (cfg->kind == DT_OPTIM_ADAGRAD) {
                s0[i] += g * g; /* a += g^2; w -= lr*g / (sqrt(a) + eps) */
                w[i] -= lr * g / (sqrt(s0[i]) + eps);
            } else { /* adam */
                double lr_t = lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
                s0[i] = b1 * s0[i] + (1 - b1) * g;
                s1[i] = b2 * s1[i] + (1 - b2) * g * g;
                w[i] -= lr_t * s0[i] / (sqrt(s1[i]) + eps);
            }
        }
    }
    float gotw[NW], gotb[NB];
    int64_t gs = 0;
    ck_assert_int_eq(pull(&f, gotw, gotb, &gs, NULL, &err), 0);
    ck_assert_int_eq(gs, 3);
    for (int i = 0; i < n; i++) {
        double got = i < NW ? gotw[i] : gotb[i - NW];
        double start = i < NW ? W0[i] : B0[i - NW];
        ck_assert_msg(fabs(got - w[i]) <= 1e-6 + 1e-5 * fabs(w[i]),
                      "%s%s: element %d = %.9g, reference %.9g", dt_optim_name(cfg->kind),
                      cfg->nesterov ? " (nesterov)" : "", i, got, w[i]);
        ck_assert_msg(fabs(w[i] - start) > 1e-3, "%s: element %d did not move",
                      dt_optim_name(cfg->kind), i);
    }
    fixture_stop(&f);
}

START_TEST(test_momentum) {
    dt_optim_config cfg;
    dt_optim_defaults(&cfg);
    cfg.kind = DT_OPTIM_MOMENTUM;
    cfg.learning_rate = 0.1;
    cfg.momentum = 0.9;
    run_optimizer(&cfg);
    cfg.nesterov = 1;
    run_optimizer(&cfg);
}
END_TEST

START_TEST(test_adagrad) {
    dt_optim_config cfg;
    dt_optim_defaults(&cfg);
    cfg.kind = DT_OPTIM_ADAGRAD;
    cfg.learning_rate = 0.1;
    cfg.initial_accumulator = 0.1;
    run_optimizer(&cfg);
}
END_TEST

START_TEST(test_adam) {
    dt_optim_config cfg;
    dt_optim_defaults(&cfg);
    cfg.kind = DT_OPTIM_ADAM;
    cfg.learning_rate = 0.01;
    cfg.beta1 = 0.9;
    cfg.beta2 = 0.999;
    cfg.epsilon = 1e-7;
    run_optimizer(&cfg);
}
END_TEST

/* Variables whose names share their first 120 bytes, under an optimizer
 * with slots: "<variable>/<slot>" cannot hold such a name in full. The ps
 * either serves them (slots kept apart) or refuses the Create naming the
 * real problem; never a misleading "duplicate name" from truncated slot
 * names. */
START_TEST(test_long_names_with_slots) {
    fixture f;
    fixture_start(&f, 0);
    dt_optim_config cfg;
    dt_optim_defaults(&cfg);
    cfg.kind = DT_OPTIM_ADAM;
    float a[2] = {1, 2}, b[2] = {3, 4};
    dt_tensor items[2];
    char name[DT_TENSOR_NAME_MAX];
    memset(name, 'v', DT_TENSOR_NAME_MAX - 1);
    name[DT_TENSOR_NAME_MAX - 1] = '\0';
    make_tensor(&items[0], name, DT_DTYPE_F32, 1, 2, 0, a);
    name[DT_TENSOR_NAME_MAX - 2] = 'w';
    make_tensor(&items[1], name, DT_DTYPE_F32, 1, 2, 0, b);
    dt_msg_create_req req = create_req(items, 2, &cfg, 10);
    dt_err err;
    dt_err_clear(&err);
    dt_msg_create_resp cr;
    memset(&cr, 0, sizeof cr);
    int rc = call_msg(&f, DT_MSG_CREATE_REQ, &req, DT_MSG_CREATE_RESP, &cr, &err);
    if (rc != 0) {
        ck_assert_msg(rc == DT_EINVAL, "create: rc %d (%s)", rc, err.msg);
        ck_assert_msg(strstr(err.msg, "too long") != NULL && strstr(err.msg, "duplicate") == NULL,
                      "create with two long names under adam: %s", err.msg);
    }
    fixture_stop(&f);
}
END_TEST

/* ---- shutdown and dt_ps_wait ------------------------------------------- */

typedef struct {
    dt_ps *ps;
    atomic_int stop;
    int rc;
    dt_err err;
    volatile int returned;
} waiter;

static void *wait_thread(void *arg) {
    waiter *w = arg;
    dt_err_clear(&w->err);
    w->rc = dt_ps_wait(w->ps, &w->stop, &w->err);
    __atomic_store_n(&w->returned, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Waits up to ms for the waiter to return; 1 if it did. */
static int wait_for_return(waiter *w, int ms) {
    long long until = dt_test_now_ms() + ms;
    while (dt_test_now_ms() < until) {
        if (__atomic_load_n(&w->returned, __ATOMIC_SEQ_CST)) return 1;
        dt_test_sleep_ms(10);
    }
    return __atomic_load_n(&w->returned, __ATOMIC_SEQ_CST);
}

START_TEST(test_shutdown_after_workers_told) {
    fixture f;
    /* A long linger: only telling worker 1 may end the wait. */
    fixture_start_sgd(&f, 60000, 0.5, 0, 100, NULL);
    dt_err err;
    dt_err_clear(&err);
    waiter w;
    memset(&w, 0, sizeof w);
    w.ps = f.ps;
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, wait_thread, &w), 0);
    ck_assert_msg(!wait_for_return(&w, 300), "dt_ps_wait returned before any shutdown");

    ck_assert_msg(shutdown_ps(&f, "test: job done", &err) == 0, "shutdown: %s", err.msg);
    ck_assert_msg(!wait_for_return(&w, 500), "dt_ps_wait returned before worker 1 was told");
    /* After Shutdown pushes are answered done and not applied. */
    dt_msg_push_resp pr;
    ck_assert_int_eq(push(&f, GW, GB, -1, &pr, &err), 0);
    ck_assert(pr.done);
    ck_assert_int_eq(pr.global_step, 0);
    assert_state(&f, W0, B0, 0, "push after shutdown");
    ck_assert(!wait_for_return(&w, 100));

    dt_msg_status_resp st;
    status(&f, 1, &st); /* worker 1 learns the job is done */
    ck_assert(st.done);
    int returned = wait_for_return(&w, 10000);
    if (!returned) {
        w.stop = 1;
        wait_for_return(&w, 5000);
    }
    pthread_join(th, NULL);
    ck_assert_msg(returned, "dt_ps_wait did not return once both workers were told");
    ck_assert_msg(w.rc == 0, "dt_ps_wait: %d (%s)", w.rc, w.err.msg);
    fixture_stop(&f);
}
END_TEST

START_TEST(test_shutdown_linger) {
    fixture f;
    fixture_start_sgd(&f, 200, 0.5, 0, 100, NULL);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(shutdown_ps(&f, "test: job done", &err), 0);
    /* Worker 1 never calls: the linger ends the wait, and the ps says so
     * (its log, this process's stderr, caught in a file meanwhile). */
    char *dir = dt_test_tempdir();
    ck_assert_ptr_nonnull(dir);
    char log_path[1024];
    snprintf(log_path, sizeof log_path, "%s/stderr.log", dir);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert(saved >= 0 && fd >= 0 && dup2(fd, STDERR_FILENO) >= 0);
    close(fd);
    waiter w;
    memset(&w, 0, sizeof w);
    w.ps = f.ps;
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, wait_thread, &w), 0);
    int returned = wait_for_return(&w, 10000);
    if (!returned) {
        w.stop = 1;
        wait_for_return(&w, 5000);
    }
    pthread_join(th, NULL);
    ck_assert_int_ge(dup2(saved, STDERR_FILENO), 0);
    close(saved);
    char *log = dt_test_read_file(log_path, NULL);
    ck_assert_msg(returned, "dt_ps_wait outlived a 200 ms linger by 10 s");
    ck_assert_msg(w.rc == 0, "dt_ps_wait: %d (%s)", w.rc, w.err.msg);
    ck_assert_msg(log && dt_test_line_has(log,
                                          "not every worker was told the job is done after "
                                          "200 ms",
                                          NULL, NULL, NULL),
                  "the ps did not say its linger ended the wait; it logged:\n%s", log ? log : "");
    free(log);
    dt_test_tempdir_free(dir);
    fixture_stop(&f);
}
END_TEST

START_TEST(test_wait_stop_flag) {
    fixture f;
    fixture_start(&f, 0);
    atomic_int stop = 1;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_ps_wait(f.ps, &stop, &err), DT_ECANCELLED);
    ck_assert_msg(strstr(err.msg, "ps:0") && strstr(err.msg, "stopped"), "message: %s", err.msg);

    /* Set while waiting, as a signal handler would. */
    waiter w;
    memset(&w, 0, sizeof w);
    w.ps = f.ps;
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, wait_thread, &w), 0);
    ck_assert(!wait_for_return(&w, 200));
    w.stop = 1;
    int returned = wait_for_return(&w, 5000);
    pthread_join(th, NULL);
    ck_assert(returned);
    ck_assert_int_eq(w.rc, DT_ECANCELLED);
    fixture_stop(&f);
}
END_TEST

/* ---- start errors and the client --------------------------------------- */

START_TEST(test_start_errors) {
    fixture f;
    fixture_start(&f, 0);
    dt_ps *again = NULL;
    dt_ps_params p = {.cluster = &f.cluster, .task_index = 0, .num_threads = 1};
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_ps_start(&p, &again, &err), DT_EUNAVAILABLE);
    ck_assert_ptr_null(again);
    ck_assert_msg(strstr(err.msg, "ps:0") && strstr(err.msg, f.ps_addr[0].addr), "message: %s",
                  err.msg);
    p.task_index = 1;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_ps_start(&p, &again, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "task index 1"), "message: %s", err.msg);
    dt_ps_free(NULL);
    fixture_stop(&f);
}
END_TEST

/* w and b with W0 and B0 in vars and GW and GB in grads, for dt_ps_client. */
static void client_tensors(dt_tensors *vars, dt_tensors *grads) {
    dt_tensor specs[2];
    float sw[NW], sb[NB];
    model_tensors(specs, sw, sb);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_tensors_init(vars, specs, 2, &err), 0);
    ck_assert_int_eq(dt_tensors_init(grads, specs, 2, &err), 0);
    memcpy(vars->items[0].data, W0, sizeof W0);
    memcpy(vars->items[1].data, B0, sizeof B0);
    memcpy(grads->items[0].data, GW, sizeof GW);
    memcpy(grads->items[1].data, GB, sizeof GB);
}

/* A pulled variable of 1.2 MB (gRPC's slices, ranges that start inside
 * them) and one of 7 floats, each copied by ranges on 3 threads
 * (copy_min_bytes 1: every tensor is split, some ranges empty): the bits
 * the ps holds, by a Pull and by a push that brings the values back, as a
 * client copying on its own thread gets them. */
#define NCOPY 300007
static float odd_value(uint64_t *x);
START_TEST(test_pull_copy_ranges) {
    fixture f;
    fixture_start(&f, 60000);
    dt_tensor specs[2];
    make_tensor(&specs[0], "big", DT_DTYPE_F32, 1, NCOPY, 0, NULL);
    make_tensor(&specs[1], "small", DT_DTYPE_F32, 1, 7, 0, NULL);
    dt_tensors vars[2], grads;
    dt_err err;
    dt_err_clear(&err);
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(dt_tensors_init(&vars[k], specs, 2, &err), 0);
    ck_assert_int_eq(dt_tensors_init(&grads, specs, 2, &err), 0);
    uint64_t x = 5;
    for (int t = 0; t < 2; t++) {
        float *w = vars[0].items[t].data, *g = grads.items[t].data;
        for (int64_t i = 0; i < dt_tensor_numel(&specs[t]); i++) {
            w[i] = odd_value(&x);
            g[i] = odd_value(&x);
        }
    }
    /* What the ps holds after one sgd push at 0.5: w - 0.5 * g, exact in
     * float arithmetic whichever thread computes it. */
    static float want_big[NCOPY];
    float want_small[7];
    for (int i = 0; i < NCOPY; i++)
        want_big[i] =
            ((float *)vars[0].items[0].data)[i] - 0.5f * ((float *)grads.items[0].data)[i];
    for (int i = 0; i < 7; i++)
        want_small[i] =
            ((float *)vars[0].items[1].data)[i] - 0.5f * ((float *)grads.items[1].data)[i];
    dt_ps_client *ranged = NULL, *alone = NULL;
    dt_ps_client_params cp = {.cluster = &f.cluster,
                              .worker = 0,
                              .timeout_ms = CALL_TIMEOUT_MS,
                              .copy_threads = 3,
                              .copy_min_bytes = 1};
    ck_assert_int_eq(dt_ps_client_new(&cp, &vars[0], &ranged, &err), 0);
    cp.worker = 1;
    cp.copy_threads = 0;
    ck_assert_int_eq(dt_ps_client_new(&cp, &vars[1], &alone, &err), 0);
    dt_optim_config cfg;
    sgd_config(&cfg, 0.5);
    dt_ps_model model;
    memset(&model, 0, sizeof model);
    model.vars = &vars[0];
    model.optim = cfg;
    model.max_steps = 100;
    model.model = "copy by ranges";
    ck_assert_msg(dt_ps_client_create(ranged, &model, NULL, &err) == 0, "create: %s", err.msg);
    dt_ps_reply r;
    /* The push's reply brings the values back to the ranged client... */
    ck_assert_msg(dt_ps_client_push_pull(ranged, &grads, 0, &vars[0], 0, &r, &err) == 0, "%s",
                  err.msg);
    ck_assert(r.pulled);
    ck_assert_int_eq(r.global_step, 1);
    /* ...and a Pull to the other one. */
    ck_assert_int_eq(dt_ps_client_pull(alone, &vars[1], NULL, 0, &r, &err), 0);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(memcmp(vars[k].items[0].data, want_big, sizeof want_big) == 0,
                      "client %d: big differs", k);
        ck_assert_msg(memcmp(vars[k].items[1].data, want_small, sizeof want_small) == 0,
                      "client %d: small differs", k);
    }
    /* A Pull on the ranged client too, over values it already holds. */
    memset(vars[0].items[0].data, 0, vars[0].items[0].nbytes);
    ck_assert_int_eq(dt_ps_client_pull(ranged, &vars[0], NULL, 0, &r, &err), 0);
    ck_assert_msg(memcmp(vars[0].items[0].data, want_big, sizeof want_big) == 0, "pull: differs");
    dt_ps_client_free(ranged);
    dt_ps_client_free(alone);
    for (int k = 0; k < 2; k++)
        dt_tensors_deinit(&vars[k]);
    dt_tensors_deinit(&grads);
    fixture_stop(&f);
}
END_TEST

/* The same life through dt_ps_client: create, pull, push, status,
 * shutdown. */
START_TEST(test_through_client) {
    fixture f;
    fixture_start(&f, 60000);
    dt_tensors vars, grads;
    dt_err err;
    dt_err_clear(&err);
    client_tensors(&vars, &grads);
    dt_ps_client *chief = NULL, *worker1 = NULL;
    dt_ps_client_params cp = {.cluster = &f.cluster, .worker = 0, .timeout_ms = CALL_TIMEOUT_MS};
    ck_assert_int_eq(dt_ps_client_new(&cp, &vars, &chief, &err), 0);
    cp.worker = 1;
    ck_assert_int_eq(dt_ps_client_new(&cp, &vars, &worker1, &err), 0);
    ck_assert_int_eq(dt_ps_client_num_ps(chief), 1);
    ck_assert_int_eq(dt_ps_client_num_units(chief), 2);
    for (int i = 0; i < 2; i++) {
        dt_ps_unit u;
        dt_ps_client_unit(chief, i, &u);
        ck_assert_int_eq(u.ps, 0);
        ck_assert_int_eq(u.var, i);
    }

    dt_optim_config cfg;
    sgd_config(&cfg, 0.5);
    dt_ps_model model;
    memset(&model, 0, sizeof model);
    model.vars = &vars;
    model.global_step = 2;
    model.optim = cfg;
    model.max_steps = 4;
    model.model = "client test";
    int rc = dt_ps_client_create(chief, &model, NULL, &err);
    ck_assert_msg(rc == 0, "create: %s", err.msg);
    dt_ps_reply r;
    ck_assert_int_eq(dt_ps_client_push(worker1, &grads, 2, &r, &err), 0);
    ck_assert_int_eq(r.global_step, 3);
    ck_assert(!r.done);
    memset(vars.items[0].data, 0, vars.items[0].nbytes);
    ck_assert_int_eq(dt_ps_client_pull(chief, &vars, NULL, 0, &r, &err), 0);
    ck_assert_int_eq(r.global_step, 3);
    float w[NW], b[NB];
    for (int i = 0; i < NW; i++)
        w[i] = W0[i] - 0.5f * GW[i];
    for (int i = 0; i < NB; i++)
        b[i] = B0[i] - 0.5f * GB[i];
    assert_floats_eq(vars.items[0].data, w, NW, "w");
    assert_floats_eq(vars.items[1].data, b, NB, "b");
    ck_assert_int_eq(dt_ps_client_push(worker1, &grads, 3, &r, &err), 0);
    ck_assert_int_eq(r.global_step, 4);
    ck_assert(r.done);
    dt_msg_status_resp st;
    ck_assert_int_eq(dt_ps_client_status(chief, 0, &st, &err), 0);
    ck_assert_str_eq(st.model, "client test");
    ck_assert_int_eq(st.pushes_applied, 2);
    ck_assert(st.done);

    ck_assert_int_eq(dt_ps_client_shutdown(chief, "client test over", &err), 0);
    /* Both workers have been told (worker 1 by its last push, the chief by
     * asking): the wait ends now, not after the 60 s linger. */
    waiter wt;
    memset(&wt, 0, sizeof wt);
    wt.ps = f.ps;
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, wait_thread, &wt), 0);
    int returned = wait_for_return(&wt, 10000);
    if (!returned) {
        wt.stop = 1;
        wait_for_return(&wt, 5000);
    }
    pthread_join(th, NULL);
    ck_assert(returned);
    ck_assert_int_eq(wt.rc, 0);
    dt_ps_client_free(chief);
    dt_ps_client_free(worker1);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&grads);
    fixture_stop(&f);
}
END_TEST

/* Two ps tasks count their pushes apart. A client must send each one back
 * only the step that task answered with: sending ps 1 the step ps 0 is at
 * would raise ps 1 to it and count the push twice. A ps restored below its
 * old step is raised back to what it last answered, not to the other's. */
static void start_ps(dt_cluster *cl, int task, dt_ps **out) {
    dt_ps_params p = {.cluster = cl, .task_index = task, .num_threads = 2, .linger_ms = 1000};
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_ps_start(&p, out, &err) == 0, "ps %d: %s", task, err.msg);
}

static int64_t step_of(dt_ps_client *c, int p) {
    dt_msg_status_resp st;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_ps_client_status(c, p, &st, &err) == 0, "status %d: %s", p, err.msg);
    return st.global_step;
}

START_TEST(test_two_ps_count_apart) {
    dt_addr ps_addr[2], worker_addr[2];
    for (int i = 0; i < 2; i++) {
        free_addr(&ps_addr[i]);
        free_addr(&worker_addr[i]);
    }
    dt_cluster cl = {.num_ps = 2, .ps = ps_addr, .num_workers = 2, .workers = worker_addr};
    dt_ps *ps[2];
    start_ps(&cl, 0, &ps[0]);
    start_ps(&cl, 1, &ps[1]);

    dt_tensors vars, grads;
    dt_err err;
    dt_err_clear(&err);
    client_tensors(&vars, &grads);
    dt_ps_client *c = NULL;
    dt_ps_client_params cp = {.cluster = &cl, .worker = 1, .timeout_ms = CALL_TIMEOUT_MS};
    ck_assert_int_eq(dt_ps_client_new(&cp, &vars, &c, &err), 0);
    int on[2] = {0, 0};
    for (int i = 0; i < dt_ps_client_num_units(c); i++) {
        dt_ps_unit u;
        dt_ps_client_unit(c, i, &u);
        on[u.ps]++;
    }
    ck_assert_msg(on[0] == 1 && on[1] == 1, "w and b not one per ps (%d, %d)", on[0], on[1]);

    /* ps 0 at step 5, ps 1 at step 0. */
    dt_ps_model model;
    memset(&model, 0, sizeof model);
    model.vars = &vars;
    sgd_config(&model.optim, 0.5);
    model.model = "two ps";
    model.max_steps = 100;
    int only0[2] = {1, 0}, only1[2] = {0, 1};
    model.global_step = 5;
    ck_assert_msg(dt_ps_client_create(c, &model, only0, &err) == 0, "create 0: %s", err.msg);
    model.global_step = 0;
    ck_assert_msg(dt_ps_client_create(c, &model, only1, &err) == 0, "create 1: %s", err.msg);

    dt_ps_reply r;
    ck_assert_msg(dt_ps_client_pull(c, &vars, NULL, 0, &r, &err) == 0, "pull: %s", err.msg);
    for (int k = 0; k < 3; k++)
        ck_assert_msg(dt_ps_client_push(c, &grads, 5 + k, &r, &err) == 0, "push: %s", err.msg);
    ck_assert_int_eq(step_of(c, 0), 8);
    ck_assert_int_eq(step_of(c, 1), 3);

    /* ps 1 restarts and is restored at step 1 (an older checkpoint), with
     * room to catch up as the chief allows: the client's next push raises
     * it to 3, the step it last answered, then applies: 4. */
    dt_ps_free(ps[1]);
    start_ps(&cl, 1, &ps[1]);
    model.global_step = 1;
    model.step_ceiling = 1 + DT_PS_CATCH_UP_STEPS;
    ck_assert_msg(dt_ps_client_create(c, &model, only1, &err) == 0, "re-create 1: %s", err.msg);
    ck_assert_msg(dt_ps_client_push(c, &grads, 8, &r, &err) == 0, "push after restore: %s",
                  err.msg);
    ck_assert_int_eq(step_of(c, 0), 9);
    ck_assert_int_eq(step_of(c, 1), 4);

    dt_ps_client_free(c);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&grads);
    dt_ps_free(ps[0]);
    dt_ps_free(ps[1]);
}
END_TEST

/* A table through dt_ps_client over two ps tasks: pulled rows are the
 * initial ones, a push splits rows by placement and updates them with the
 * dense variables as one step (adagrad, to the bit of a dense update of
 * each row), the export gives every row in id order with its slot, and
 * the export restored onto three tasks (a re-shard, pages of 16 rows)
 * reads back the same. */
static dt_ps_client *tables_client(dt_cluster *cl, const dt_tensors *vars) {
    dt_ps_client *c = NULL;
    dt_ps_client_params cp = {.cluster = cl, .worker = 0, .timeout_ms = CALL_TIMEOUT_MS};
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_ps_client_new(&cp, vars, &c, &err) == 0, "%s", err.msg);
    return c;
}

/* A streamed save (the chief's, dt_ps_client_sparse_save) of T_NAME on c's
 * tasks writes the file a save of the whole export in memory writes. */
static void streamed_save_same_bytes(dt_ps_client *c, const dt_table_config *tc,
                                     const dt_tensors *whole, int page_rows) {
    char *dir = dt_test_tempdir(), a[512], b[512];
    ck_assert_ptr_nonnull(dir);
    snprintf(a, sizeof a, "%s/whole.safetensors", dir);
    snprintf(b, sizeof b, "%s/streamed.safetensors", dir);
    dt_safetensors_meta meta = {.global_step = 3};
    snprintf(meta.model, sizeof meta.model, "tables");
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_safetensors_save(a, whole, &meta, &err) == 0, "%s", err.msg);
    dt_safetensors_rows *rows = NULL;
    ck_assert_msg(dt_ps_client_sparse_save(c, tc, 1, page_rows, dir, &rows, &err) == 0,
                  "streamed save: %s", err.msg);
    ck_assert_ptr_nonnull(rows);
    dt_tensors none = {0};
    ck_assert_msg(dt_safetensors_save_rows(b, &none, &rows, 1, &meta, &err) == 0, "%s", err.msg);
    dt_safetensors_rows_free(rows);
    size_t la = 0, lb = 0;
    char *fa = dt_test_read_file(a, &la), *fb = dt_test_read_file(b, &lb);
    ck_assert(fa && fb);
    ck_assert_uint_eq(la, lb);
    ck_assert_msg(memcmp(fa, fb, la) == 0, "pages of %d: the files differ", page_rows);
    free(fa), free(fb);
    dt_test_tempdir_free(dir);
}

/* Rows pushed by another client while an export runs: on its first run,
 * rows new at ids `fresh` (the export holds none of them yet). */
typedef struct {
    dt_ps_client *other;
    dt_tensors *grads, *vars;
    const int64_t *fresh;
    int nfresh;
    int runs;
    int64_t got[64];
    int ngot;
} push_during;

static int push_during_run(void *ctx, const dt_ps_rows *rows, dt_err *err) {
    push_during *pd = ctx;
    if (pd->runs++ == 0) {
        float g[8 * T_DIM] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
        dt_ps_sparse gp = {T_NAME, T_DIM, pd->nfresh, pd->fresh, g};
        dt_ps_reply r;
        int rc = dt_ps_client_push_sparse(pd->other, pd->grads, &gp, 1, 1, pd->vars, 0, &r, err);
        if (rc < 0) return rc;
    }
    for (int64_t k = 0; k < rows->n && pd->ngot < 64; k++)
        pd->got[pd->ngot++] = rows->ids[k];
    return 0;
}

static int has_id(const int64_t *ids, int n, int64_t id) {
    for (int k = 0; k < n; k++)
        if (ids[k] == id) return 1;
    return 0;
}

START_TEST(test_client_tables_reshard) {
    enum { N = 40, D = T_DIM };
    dt_addr ps_addr[3], worker_addr[2];
    for (int i = 0; i < 2; i++) /* the third's when it starts, below */
        free_addr(&ps_addr[i]);
    for (int i = 0; i < 2; i++)
        free_addr(&worker_addr[i]);
    dt_cluster cl2 = {.num_ps = 2, .ps = ps_addr, .num_workers = 2, .workers = worker_addr};
    dt_ps *ps[3];
    start_ps(&cl2, 0, &ps[0]);
    start_ps(&cl2, 1, &ps[1]);
    dt_tensors vars, grads;
    client_tensors(&vars, &grads);
    dt_ps_client *c = tables_client(&cl2, &vars);
    dt_msg_table spec = table_spec();
    dt_ps_model model;
    memset(&model, 0, sizeof model);
    model.vars = &vars;
    sgd_config(&model.optim, 0.5);
    model.optim.kind = DT_OPTIM_ADAGRAD;
    model.max_steps = 100;
    model.tables = &spec;
    model.num_tables = 1;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_ps_client_create(c, &model, NULL, &err) == 0, "create: %s", err.msg);

    int64_t ids[N];
    for (int k = 0; k < N; k++)
        ids[k] = (int64_t)k * 7919 * 104729 + (k % 3); /* spread, increasing */
    float rows[N][D], want[N][D], acc[N][D], g[N][D];
    dt_table_config tc;
    memset(&tc, 0, sizeof tc);
    snprintf(tc.name, sizeof tc.name, T_NAME);
    tc.rows = T_ROWS;
    tc.dim = D;
    tc.init = DT_TABLE_INIT_NORMAL;
    tc.init_scale = 0.5;
    tc.seed = 42;
    dt_table_config_slots(&tc, &model.optim);
    for (int k = 0; k < N; k++) {
        dt_table_init_row(&tc, ids[k], want[k]);
        for (int d = 0; d < D; d++) {
            g[k][d] = (float)((k * 3 + d) % 7) - 3.0f;
            acc[k][d] = (float)model.optim.initial_accumulator;
        }
    }
    dt_ps_sparse sp = {T_NAME, D, N, ids, &rows[0][0]};
    dt_ps_reply r;
    ck_assert_msg(dt_ps_client_sparse_pull(c, &sp, &r, &err) == 0, "sparse pull: %s", err.msg);
    assert_floats_eq(&rows[0][0], &want[0][0], N * D, "initial rows via the client");

    dt_ps_sparse gp = {T_NAME, D, N, ids, &g[0][0]};
    ck_assert_msg(dt_ps_client_push_sparse(c, &grads, &gp, 1, 0, &vars, 0, &r, &err) == 0,
                  "push: %s", err.msg);
    ck_assert(r.pulled);
    for (int k = 0; k < N; k++) {
        float *slots[1] = {acc[k]};
        dt_optim_apply(&model.optim, model.optim.learning_rate, 1, want[k], slots, g[k], D);
    }
    ck_assert_msg(dt_ps_client_sparse_pull(c, &sp, &r, &err) == 0, "sparse pull: %s", err.msg);
    assert_floats_eq(&rows[0][0], &want[0][0], N * D, "rows after the push");
    ck_assert_int_eq(r.global_step, 1);
    int64_t held = 0;
    for (int p = 0; p < 2; p++) {
        dt_msg_status_resp st;
        ck_assert_int_eq(dt_ps_client_status(c, p, &st, &err), 0);
        held += st.tables[0].rows_held;
    }
    ck_assert_int_eq(held, N);

    dt_tensors saved;
    ck_assert_msg(dt_ps_client_sparse_export(c, &tc, 1, 7, &saved, &err) == 0, "export: %s",
                  err.msg);
    ck_assert_int_eq(saved.count, 3);
    ck_assert_str_eq(saved.items[2].name, T_NAME "/accumulator");
    ck_assert(memcmp(saved.items[0].data, ids, sizeof ids) == 0);
    assert_floats_eq(saved.items[1].data, &want[0][0], N * D, "exported values");
    assert_floats_eq(saved.items[2].data, &acc[0][0], N * D, "exported accumulators");
    dt_ps_client_free(c);
    for (int p = 0; p < 2; p++)
        dt_ps_free(ps[p]);

    /* Three tasks, restored from the export. The third's port is chosen
     * now: chosen at the start, it stayed free for the whole two-task part,
     * and a busy machine's outgoing connections once took it meanwhile. */
    free_addr(&ps_addr[2]);
    dt_cluster cl3 = {.num_ps = 3, .ps = ps_addr, .num_workers = 2, .workers = worker_addr};
    for (int p = 0; p < 3; p++)
        start_ps(&cl3, p, &ps[p]);
    c = tables_client(&cl3, &vars);
    model.tables_pending = 1;
    model.global_step = 1;
    ck_assert_msg(dt_ps_client_create(c, &model, NULL, &err) == 0, "create: %s", err.msg);
    ck_assert_int_eq(dt_ps_client_sparse_pull(c, &sp, &r, &err), DT_EPRECOND);
    for (int first = 0; first < N; first += 16) {
        int n = N - first < 16 ? N - first : 16;
        dt_tensor page[3];
        for (int i = 0; i < 3; i++) {
            page[i] = saved.items[i];
            size_t row = saved.items[i].nbytes / N;
            page[i].shape[0] = n;
            page[i].data = (char *)saved.items[i].data + row * (size_t)first;
            page[i].nbytes = row * (size_t)n;
        }
        ck_assert_msg(dt_ps_client_sparse_import(c, T_NAME, page, 3, first + n == N, NULL, &err) ==
                          0,
                      "import: %s", err.msg);
    }
    memset(rows, 0, sizeof rows);
    ck_assert_msg(dt_ps_client_sparse_pull(c, &sp, &r, &err) == 0, "sparse pull: %s", err.msg);
    assert_floats_eq(&rows[0][0], &want[0][0], N * D, "rows restored onto three tasks");
    held = 0;
    for (int p = 0; p < 3; p++) {
        dt_msg_status_resp st;
        ck_assert_int_eq(dt_ps_client_status(c, p, &st, &err), 0);
        ck_assert_int_lt(st.tables[0].rows_held, N); /* each its own share */
        held += st.tables[0].rows_held;
    }
    ck_assert_int_eq(held, N);
    dt_tensors again;
    ck_assert_int_eq(dt_ps_client_sparse_export(c, &tc, 1, 1000, &again, &err), 0);
    ck_assert_int_eq(again.count, 3);
    for (int i = 0; i < 3; i++)
        ck_assert(memcmp(again.items[i].data, saved.items[i].data, saved.items[i].nbytes) == 0);
    /* Streamed to disk in runs of 1, 7 and all rows, merged from three
     * tasks: the same file as the export saved whole. */
    streamed_save_same_bytes(c, &tc, &again, 1);
    streamed_save_same_bytes(c, &tc, &again, 7);
    streamed_save_same_bytes(c, &tc, &again, 1000);
    dt_tensors_deinit(&again);

    /* Rows made while a save reads the tasks (pages of 1 row): a row whose
     * id is above what its task has sent is in the save; one below, not
     * (its task is past it). After the first page of each task, a task's
     * mark is its lowest id. */
    int64_t low_mark[3] = {INT64_MAX, INT64_MAX, INT64_MAX};
    for (int k = 0; k < N; k++) {
        int p = dt_table_shard_of(ids[k], 3);
        if (ids[k] < low_mark[p]) low_mark[p] = ids[k];
    }
    int64_t fresh[2] = {-1, ids[N - 1] + 1}; /* below a mark, above every id */
    for (int64_t x = 1; fresh[0] < 0; x++)
        if (!has_id(ids, N, x) && x < low_mark[dt_table_shard_of(x, 3)]) fresh[0] = x;
    ck_assert_int_lt(fresh[0], fresh[1]);
    dt_ps_client *other = tables_client(&cl3, &vars);
    push_during pd = {.other = other, .grads = &grads, .vars = &vars, .fresh = fresh, .nfresh = 2};
    ck_assert_msg(dt_ps_client_sparse_export_each(c, &tc, 1, 1, push_during_run, &pd, &err) == 0,
                  "export during pushes: %s", err.msg);
    ck_assert_int_eq(pd.ngot, N + 1);
    for (int k = 1; k < pd.ngot; k++)
        ck_assert(pd.got[k] > pd.got[k - 1]);
    for (int k = 0; k < N; k++)
        ck_assert(has_id(pd.got, pd.ngot, ids[k]));
    ck_assert(!has_id(pd.got, pd.ngot, fresh[0]));
    ck_assert(has_id(pd.got, pd.ngot, fresh[1]));
    /* Both rows were made: the next save has them. */
    ck_assert_int_eq(dt_ps_client_sparse_export(c, &tc, 1, 1000, &again, &err), 0);
    ck_assert_int_eq(again.items[0].shape[0], N + 2);
    dt_tensors_deinit(&again);
    dt_ps_client_free(other);
    dt_tensors_deinit(&saved);
    dt_ps_client_free(c);
    for (int p = 0; p < 3; p++)
        dt_ps_free(ps[p]);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&grads);
}
END_TEST

/* ---- hostile ps tasks ---------------------------------------------------- */

/* A ps task as a hostile peer: a plain rpc server answering SparseExport
 * with one page of the rows of 0..EX_ROWS-1 placed on it, spoiled as `bad`
 * says: the ids by task 1 alone, the slots by both tasks alike (a layout
 * the tasks agree on is still not the table's). */
enum { EX_ROWS = 64, EX_DIM = 2 };
typedef enum {
    EX_GOOD,
    EX_OUT_OF_RANGE, /* an id past the table's rows, placed on the task */
    EX_MISPLACED,    /* an id placed on the other task */
    EX_NO_SLOT,      /* slots asked for, none sent */
    EX_SLOT_NAME,    /* a slot under another name */
    EX_SLOT_UNASKED, /* no slots asked for, one sent */
} export_fault;

typedef struct {
    int task;
    atomic_int bad; /* an export_fault; set by the test between calls, read by the server's
                       thread (the call between them orders the two, unseen by TSan) */
} export_peer;

static int export_peer_handle(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                              const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    const export_peer *ep = ctx;
    dt_msg_sparse_export_req req;
    memset(&req, 0, sizeof req);
    int rc = dt_codec_decode_buf(DT_MSG_SPARSE_EXPORT_REQ, request, &req, err);
    if (rc < 0) return rc;
    const export_fault fault = (export_fault)atomic_load(&ep->bad);
    const export_fault bad = ep->task == 1 || fault >= EX_NO_SLOT ? fault : EX_GOOD;
    int64_t ids[EX_ROWS + 1];
    float vals[(EX_ROWS + 1) * EX_DIM], acc[(EX_ROWS + 1) * EX_DIM];
    int64_t other = req.after_id + 1; /* the other task's first row */
    while (dt_table_shard_of(other, 2) == ep->task)
        other++;
    int n = 0;
    for (int64_t id = req.after_id + 1; id < EX_ROWS; id++)
        if (dt_table_shard_of(id, 2) == ep->task || (bad == EX_MISPLACED && id == other))
            ids[n++] = id;
    if (n && bad == EX_OUT_OF_RANGE) { /* past the last row, placed here */
        int64_t id = EX_ROWS;
        while (dt_table_shard_of(id, 2) != ep->task)
            id++;
        ids[n++] = id;
    }
    for (int k = 0; k < n * EX_DIM; k++) {
        vals[k] = (float)k;
        acc[k] = 0.1f;
    }
    dt_tensor page[3];
    make_tensor(&page[0], T_NAME "/ids", DT_DTYPE_I64, 1, n, 0, ids);
    make_tensor(&page[1], T_NAME "/values", DT_DTYPE_F32, 2, n, EX_DIM, vals);
    make_tensor(&page[2], bad == EX_SLOT_NAME ? T_NAME "/m" : T_NAME "/accumulator", DT_DTYPE_F32,
                2, n, EX_DIM, acc);
    page[0].nbytes = (size_t)n * sizeof(int64_t);
    page[1].nbytes = page[2].nbytes = (size_t)n * EX_DIM * sizeof(float);
    int count = req.include_slots ? 3 : 2;
    if (bad == EX_NO_SLOT) count = 2;
    if (bad == EX_SLOT_UNASKED) count = 3;
    dt_msg_sparse_export_resp resp;
    memset(&resp, 0, sizeof resp);
    resp.incarnation = 7;
    resp.out = (dt_tensor_list){.items = page, .count = n ? count : 0};
    return dt_codec_encode_buf(DT_MSG_SPARSE_EXPORT_RESP, &resp, reply, err);
}

typedef struct {
    int runs;
    int64_t rows, last;
} export_seen;

static int export_seen_run(void *ctx, const dt_ps_rows *rows, dt_err *err) {
    export_seen *s = ctx;
    for (int64_t k = 0; k < rows->n; k++) {
        if (rows->ids[k] <= s->last)
            return dt_err_set(err, DT_EINVAL, "run out of order at id %lld",
                              (long long)rows->ids[k]);
        s->last = rows->ids[k];
    }
    s->runs++;
    s->rows += rows->n;
    return 0;
}

/* A chief's streamed save reads pages from ps tasks it must not believe:
 * a page with a row the table does not have, a row placed on another
 * task, or slots other than the table's (missing, misnamed, not asked
 * for) fails the export naming the task and the fault, before a row of it
 * is handed on; the same peers serving good pages give every row. */
START_TEST(test_export_pages_checked) {
    static const struct {
        export_fault bad;
        int with_slots;
        const char *task, *says;
    } cases[] = {
        {EX_GOOD, 1, NULL, NULL},
        {EX_GOOD, 0, NULL, NULL},
        {EX_OUT_OF_RANGE, 1, "ps:1 ", "is not a row of the table (0..63)"},
        {EX_MISPLACED, 1, "ps:1 ", "belongs to ps task 0, not 1"},
        {EX_NO_SLOT, 1, "ps:0 ", "a page of another layout"},
        {EX_SLOT_NAME, 1, "ps:0 ", "a page of another layout"},
        {EX_SLOT_UNASKED, 0, "ps:0 ", "a page of another layout"},
    };
    dt_addr ps_addr[2], worker_addr[1];
    free_addr(&worker_addr[0]);
    export_peer peers[2];
    dt_rpc_server *servers[2];
    const dt_rpc_method method = {.path = DT_METHOD_SPARSE_EXPORT, .handler = export_peer_handle};
    dt_err err;
    dt_err_clear(&err);
    for (int p = 0; p < 2; p++) {
        free_addr(&ps_addr[p]);
        peers[p].task = p;
        atomic_init(&peers[p].bad, EX_GOOD);
        dt_rpc_server_params sp = {.addr = ps_addr[p].addr,
                                   .num_threads = 1,
                                   .methods = &method,
                                   .num_methods = 1,
                                   .ctx = &peers[p],
                                   .in_pieces = 1};
        ck_assert_msg(dt_rpc_server_start(&sp, &servers[p], &err) == 0, "%s", err.msg);
    }
    dt_cluster cl = {.num_ps = 2, .ps = ps_addr, .num_workers = 1, .workers = worker_addr};
    dt_tensors vars, grads;
    client_tensors(&vars, &grads);
    dt_ps_client *c = tables_client(&cl, &vars);
    dt_table_config tc;
    memset(&tc, 0, sizeof tc);
    snprintf(tc.name, sizeof tc.name, T_NAME);
    tc.rows = EX_ROWS;
    tc.dim = EX_DIM;
    dt_optim_config optim;
    sgd_config(&optim, 0.5);
    optim.kind = DT_OPTIM_ADAGRAD;
    dt_table_config_slots(&tc, &optim);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        atomic_store(&peers[0].bad, (int)cases[i].bad);
        atomic_store(&peers[1].bad, (int)cases[i].bad);
        export_seen seen = {.last = -1};
        dt_err_clear(&err);
        int rc = dt_ps_client_sparse_export_each(c, &tc, cases[i].with_slots, 1000, export_seen_run,
                                                 &seen, &err);
        if (!cases[i].says) {
            ck_assert_msg(rc == 0, "case %zu: %s", i, err.msg);
            ck_assert_int_eq(seen.rows, EX_ROWS);
            continue;
        }
        ck_assert_msg(rc == DT_EINVAL, "case %zu: rc %d (%s)", i, rc, err.msg);
        ck_assert_msg(strstr(err.msg, cases[i].says) && strstr(err.msg, cases[i].task),
                      "case %zu: \"%s\" lacks \"%s\" or the task", i, err.msg, cases[i].says);
        ck_assert_int_eq(seen.runs, 0);
    }
    dt_ps_client_free(c);
    for (int p = 0; p < 2; p++)
        dt_rpc_server_stop(servers[p], 1000);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&grads);
}
END_TEST

/* ---- hostile clients --------------------------------------------------- */

/* A Create whose one tensor is shaped [d0, d1] but carries no data: sizes
 * that wrap 64 bits once passed as 0 bytes and crashed the next Push. */
static int create_shaped(fixture *f, int64_t d0, int64_t d1, dt_err *err) {
    dt_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "huge");
    t.dtype = DT_DTYPE_F32;
    t.ndim = 2;
    t.shape[0] = d0;
    t.shape[1] = d1;
    t.data = "";
    t.nbytes = 0;
    dt_optim_config cfg;
    sgd_config(&cfg, 0.5);
    dt_msg_create_req req = create_req(&t, 1, &cfg, 100);
    dt_msg_create_resp resp;
    memset(&resp, 0, sizeof resp);
    return call_msg(f, DT_MSG_CREATE_REQ, &req, DT_MSG_CREATE_RESP, &resp, err);
}

START_TEST(test_overflowing_shapes) {
    fixture f;
    fixture_start(&f, 0);
    dt_err err;
    const int64_t two31 = (int64_t)1 << 31, two32 = (int64_t)1 << 32, two62 = (int64_t)1 << 62;
    ASSERT_FAILS(create_shaped(&f, two31, two31, &err), DT_EINVAL, "larger than 2^40 bytes");
    ASSERT_FAILS(create_shaped(&f, two32, two32, &err), DT_EINVAL, "larger than 2^40 bytes");
    ASSERT_FAILS(create_shaped(&f, two62, 4, &err), DT_EINVAL, "larger than 2^40 bytes");
    ASSERT_FAILS(create_shaped(&f, INT64_MAX, INT64_MAX, &err), DT_EINVAL, "huge");
    dt_msg_status_resp st;
    status(&f, 0, &st);
    ck_assert_msg(!st.ready, "a refused Create made the ps ready");
    /* The ps still takes a real model and trains it. */
    dt_optim_config cfg;
    sgd_config(&cfg, 0.5);
    dt_err_clear(&err);
    ck_assert_msg(create(&f, W0, B0, &cfg, 0, 100, NULL, &err) == 0, "create: %s", err.msg);
    ck_assert_msg(push(&f, GW, GB, 1, NULL, &err) == 0, "push: %s", err.msg);
    status(&f, 0, &st);
    ck_assert_int_eq(st.global_step, 1);
    fixture_stop(&f);
}
END_TEST

static int pull_seen(fixture *f, int64_t seen_step, dt_msg_pull_resp *pr, dt_err *err) {
    dt_msg_pull_req req = pull_req(1);
    req.seen_step = seen_step;
    dt_tensor views[4];
    memset(pr, 0, sizeof *pr);
    pr->in.items = views; /* only read before call_msg returns: views are not kept */
    pr->in.cap = 4;
    int rc = call_msg(f, DT_MSG_PULL_REQ, &req, DT_MSG_PULL_RESP, pr, err);
    pr->in.items = NULL;
    return rc;
}

START_TEST(test_seen_step_not_believed) {
    fixture f;
    fixture_start_sgd(&f, 0, 0.5, 4, 1000000000, NULL);
    dt_err err;
    dt_err_clear(&err);
    /* A fresh model: no claim moves the step, not even one within reach. */
    dt_msg_pull_resp pr;
    const int64_t claims[] = {(int64_t)1 << 62, 4 + 1000000, 5, INT64_MAX};
    for (size_t i = 0; i < sizeof claims / sizeof claims[0]; i++) {
        ck_assert_msg(pull_seen(&f, claims[i], &pr, &err) == 0, "pull: %s", err.msg);
        ck_assert_msg(pr.global_step == 4 && !pr.done,
                      "Pull(seen_step %lld) moved the step to %lld", (long long)claims[i],
                      (long long)pr.global_step);
    }
    /* Push: the step moves by exactly the one applied push. */
    model_copy m;
    copy_model(&m, GW, GB);
    dt_msg_push_req req = push_req(m.items, 2, 1);
    req.step = 4;
    req.seen_step = 4 + 1000000;
    dt_msg_push_resp resp;
    memset(&resp, 0, sizeof resp);
    ck_assert_int_eq(call_msg(&f, DT_MSG_PUSH_REQ, &req, DT_MSG_PUSH_RESP, &resp, &err), 0);
    ck_assert_int_eq(resp.global_step, 5);
    dt_msg_status_resp st;
    status(&f, 0, &st);
    ck_assert_int_eq(st.global_step, 5);
    ck_assert_int_eq(st.pushes_applied, 1);
    fixture_stop(&f);
}
END_TEST

/* A restore (the chief's Create after a ps restart) lets seen_step catch
 * the step up to what callers saw, and only up to the chief's ceiling. */
START_TEST(test_seen_step_catch_up_bounded) {
    fixture f;
    fixture_start(&f, 0);
    dt_optim_config cfg;
    sgd_config(&cfg, 0.5);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(create_restored(&f, W0, B0, &cfg, 4, 40, 100, NULL, &err), 0);
    dt_msg_pull_resp pr;
    ck_assert_int_eq(pull_seen(&f, 30, &pr, &err), 0);
    ck_assert_int_eq(pr.global_step, 30); /* what a worker saw: believed */
    ck_assert_int_eq(pull_seen(&f, (int64_t)1 << 62, &pr, &err), 0);
    ck_assert_int_eq(pr.global_step, 40); /* past the ceiling: not */
    ck_assert(!pr.done);
    fixture_stop(&f);
}
END_TEST

START_TEST(test_hostile_names) {
    fixture f;
    fixture_start(&f, 0);
    dt_optim_config cfg;
    sgd_config(&cfg, 0.5);
    dt_err err;
    dt_err_clear(&err);
    /* Create with "w\0x" in place of "w": refused, the ps stays empty. */
    float wc[NW], bc[NB];
    memcpy(wc, W0, sizeof wc);
    memcpy(bc, B0, sizeof bc);
    dt_tensor items[2];
    model_tensors(items, wc, bc);
    make_tensor(&items[0], "wQx", DT_DTYPE_F32, 2, 2, 3, wc);
    dt_msg_create_req creq = create_req(items, 2, &cfg, 100);
    ASSERT_FAILS(call_patched(&f, DT_MSG_CREATE_REQ, &creq, "wQx", "w\0x", 3, &err), DT_EINVAL,
                 "NUL");
    dt_msg_status_resp st;
    status(&f, 0, &st);
    ck_assert(!st.ready);

    ck_assert_int_eq(create(&f, W0, B0, &cfg, 4, 100, NULL, &err), 0);
    /* Push "w\0anything", "w\n", and a byte that is not UTF-8: each refused,
     * nothing applied. */
    static const struct {
        const char *bytes, *needle;
    } bad[] = {{"w\0anythin", "NUL"},
               {"w\nanythin", "control byte 0x0a"},
               {"w\xff"
                "anythin",
                "not valid UTF-8"},
               {"w\xc0\xafnythin", "not valid UTF-8"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memcpy(wc, GW, sizeof wc);
        memcpy(bc, GB, sizeof bc);
        model_tensors(items, wc, bc);
        make_tensor(&items[0], "wXanythin", DT_DTYPE_F32, 2, 2, 3, wc);
        dt_msg_push_req preq = push_req(items, 2, 1);
        ASSERT_FAILS(call_patched(&f, DT_MSG_PUSH_REQ, &preq, "wXanythin", bad[i].bytes, 9, &err),
                     DT_EINVAL, bad[i].needle);
        assert_state(&f, W0, B0, 4, bad[i].needle);
    }
    /* Pull: the same rule, and a name given twice. */
    const char *names[2] = {"wX", "b"};
    dt_msg_pull_req pq = pull_req(1);
    pq.out_names = names;
    pq.out_count = 2;
    ASSERT_FAILS(call_patched(&f, DT_MSG_PULL_REQ, &pq, "wX", "w\x01", 2, &err), DT_EINVAL,
                 "control byte 0x01");
    const char *twice[2] = {"w", "w"};
    pq.out_names = twice;
    ASSERT_FAILS(call_msg(&f, DT_MSG_PULL_REQ, &pq, DT_MSG_PULL_RESP, NULL, &err), DT_EINVAL,
                 "named twice");
    assert_state(&f, W0, B0, 4, "after the refused pulls");
    fixture_stop(&f);
}
END_TEST

/* With per-identity tokens a worker speaks only for its own task: worker:1
 * pushing or pulling as worker 0 is PERMISSION_DENIED, names both, and
 * changes nothing; as itself it trains. */
START_TEST(test_push_as_another_task) {
    char *dir = dt_test_tempdir();
    ck_assert_ptr_nonnull(dir);
    char tokens[1100];
    snprintf(tokens, sizeof tokens, "%s/tokens", dir);
    ck_assert_int_eq(dt_test_write_file(tokens, "chief tok-c\nworker:1 tok-w1\n"), 0);
    /* The chief's channel creates the model; worker 1's does the rest. */
    dt_rpc_security server = {.token_file = tokens};
    dt_rpc_security as_chief = {.token_file = tokens, .identity = "chief"};
    dt_rpc_security as_w1 = {.token_file = tokens, .identity = "worker:1"};
    fixture f;
    fixture_start_secure(&f, 0, &server, &as_chief);
    dt_err err;
    dt_err_clear(&err);
    dt_optim_config cfg;
    sgd_config(&cfg, 0.5);
    ck_assert_msg(create(&f, W0, B0, &cfg, 4, 100, NULL, &err) == 0, "create: %s", err.msg);
    fixture_reconnect(&f, &as_w1);

    ASSERT_FAILS(push(&f, GW, GB, 0, NULL, &err), DT_EPERM, "worker:1 may not call as worker 0");
    dt_msg_pull_req pq = pull_req(0);
    ASSERT_FAILS(call_msg(&f, DT_MSG_PULL_REQ, &pq, DT_MSG_PULL_RESP, NULL, &err), DT_EPERM,
                 "worker:1 may not call as worker 0");
    dt_msg_status_resp st;
    status(&f, 1, &st);
    ck_assert_int_eq(st.global_step, 4);
    ck_assert_int_eq(st.pushes_applied, 0);
    ck_assert_int_eq(st.calls_refused, 2);
    dt_err_clear(&err);
    ck_assert_msg(push(&f, GW, GB, 1, NULL, &err) == 0, "push as itself: %s", err.msg);
    status(&f, 1, &st);
    ck_assert_int_eq(st.global_step, 5);
    fixture_stop(&f);
    dt_test_rmtree(dir);
    dt_test_tempdir_free(dir);
}
END_TEST

/* A Shutdown reason with a newline must not forge a log record: the ps's
 * stderr, captured here, holds it escaped on the one line it logs. */
START_TEST(test_reason_escaped_in_log) {
    fixture f;
    fixture_start(&f, 0);
    char path[] = "/tmp/dtrain-log-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    int saved = dup(STDERR_FILENO);
    ck_assert_int_ge(saved, 0);
    dup2(fd, STDERR_FILENO);
    dt_err err;
    dt_err_clear(&err);
    int rc = shutdown_ps(&f, "bye\n99 - 00:00:00.000 I forged record\x1b[2J", &err);
    /* The handler logs before it answers, so the line is in the file now. */
    dup2(saved, STDERR_FILENO);
    close(saved);
    ck_assert_msg(rc == 0, "shutdown: %s", err.msg);
    char text[4096];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    unlink(path);
    ck_assert_int_gt(n, 0);
    text[n] = '\0';
    const char *line = strstr(text, "shutdown requested");
    ck_assert_msg(line != NULL, "no shutdown line in: %s", text);
    const char *end = strchr(line, '\n');
    ck_assert_ptr_nonnull(end);
    ck_assert_msg(memmem(line, (size_t)(end - line), "bye\\n99", 7) != NULL &&
                      memmem(line, (size_t)(end - line), "\\x1b[2J", 7) != NULL,
                  "reason not escaped on its line: %.*s", (int)(end - line), line);
    ck_assert_msg(strstr(text, "\n99 - ") == NULL, "a forged record starts a line: %s", text);
    fixture_stop(&f);
}
END_TEST

/* ---- requests in pieces ------------------------------------------------- */

/* Two in-process ps tasks (no port) of the same 1-ps, 2-worker cluster:
 * `flat` takes every request in one run, `cut` the same bytes in pieces
 * of 1 to 7 bytes, as gRPC may hand them over. twin_start_threads gives
 * each its threads for a large gradient (dt_ps_params.apply_threads; 0:
 * the default) and makes every gradient large enough to be split in
 * ranges (parallel_min_elems 1). */
#define PR 37 /* the piece tests' model: big (PR, PC) and b (PC) */
#define PC 11
typedef struct {
    dt_addr ps_addr[1], worker_addr[2];
    dt_cluster cluster;
    dt_ps *flat, *cut;
    uint64_t seed;
} twin;

static void twin_start_threads(twin *t, int flat_threads, int cut_threads) {
    memset(t, 0, sizeof *t);
    dt_test_loopback_addr(&t->ps_addr[0], 1);
    dt_test_loopback_addr(&t->worker_addr[0], 2);
    dt_test_loopback_addr(&t->worker_addr[1], 3);
    t->cluster =
        (dt_cluster){.num_ps = 1, .ps = t->ps_addr, .num_workers = 2, .workers = t->worker_addr};
    dt_ps_params p = {.cluster = &t->cluster, .no_server = 1, .linger_ms = 600000};
    dt_err err;
    dt_err_clear(&err);
    p.apply_threads = flat_threads;
    p.parallel_min_elems = flat_threads ? 1 : 0;
    ck_assert_msg(dt_ps_start(&p, &t->flat, &err) == 0, "%s", err.msg);
    p.apply_threads = cut_threads;
    p.parallel_min_elems = cut_threads ? 1 : 0;
    ck_assert_msg(dt_ps_start(&p, &t->cut, &err) == 0, "%s", err.msg);
}

static void twin_start(twin *t) {
    twin_start_threads(t, 0, 0);
}

static void twin_stop(twin *t) {
    dt_ps_free(t->flat);
    dt_ps_free(t->cut);
}

/* Sends msg to one twin as one run or, with cut, in pieces. Returns the
 * handler's code; on success *reply (when not NULL) gets a heap copy of
 * the reply's bytes and *reply_len their number. */
static int send_to(twin *t, int cut, dt_msg_type type, const void *msg, uint8_t **reply,
                   size_t *reply_len, dt_err *err) {
    size_t size;
    uint8_t *bytes = encode_msg(type, msg, &size);
    ck_assert_uint_gt(size, 0);
    dt_rpc_buf req = {.data = bytes, .len = size}, out;
    if (cut) dt_test_in_pieces(bytes, size, ++t->seed, &req);
    dt_rpc_peer anyone = {.role = DT_PEER_ANY, .task = -1, .name = "anonymous"};
    dt_err_clear(err);
    int rc = dt_ps_call(cut ? t->cut : t->flat, dt_codec_method(type), &anyone, &req, &out, err);
    if (rc == 0 && reply) {
        *reply = malloc(out.len ? out.len : 1);
        ck_assert_ptr_nonnull(*reply);
        /* A reply that carries a large variable is in pieces: its own
         * bytes and the variable's buffer. */
        dt_piece one;
        const dt_piece *pieces;
        int np = dt_rpc_buf_pieces(&out, &one, &pieces);
        size_t at = 0;
        for (int k = 0; k < np; k++) {
            memcpy(*reply + at, pieces[k].data, pieces[k].len);
            at += pieces[k].len;
        }
        ck_assert_uint_eq(at, out.len);
        *reply_len = out.len;
    }
    if (rc == 0) dt_rpc_buf_release(&out);
    if (cut) dt_rpc_buf_release(&req);
    free(bytes);
    return rc;
}

/* Sends msg to both; both must answer alike (code, and the reply's step). */
static int send_both(twin *t, dt_msg_type type, const void *msg, dt_err *err) {
    dt_err cut_err;
    int rc = send_to(t, 0, type, msg, NULL, NULL, err);
    int rc_cut = send_to(t, 1, type, msg, NULL, NULL, &cut_err);
    ck_assert_msg(rc == rc_cut, "one run: %d (%s); in pieces: %d (%s)", rc, err->msg, rc_cut,
                  cut_err.msg);
    return rc;
}

/* The model's tensors over caller arrays. */
static void twin_tensors(dt_tensor items[2], float *big, float *b) {
    make_tensor(&items[0], "big", DT_DTYPE_F32, 2, PR, PC, big);
    make_tensor(&items[1], "b", DT_DTYPE_F32, 1, PC, 0, b);
}

/* A value that does not come out exact in float: updates of it differ in
 * their last bits when anything in the arithmetic differs. */
static float odd_value(uint64_t *x) {
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*x >> 11) / 9007199254740992.0 * 2.0 - 1.0) * 0.37f;
}

/* One push of fresh odd gradients from worker w with id, to both. */
static int push_both(twin *t, uint64_t *x, int w, uint64_t id, int64_t step, float nan_at_end,
                     dt_err *err) {
    float gbig[PR * PC], gb[PC];
    for (int i = 0; i < PR * PC; i++)
        gbig[i] = odd_value(x);
    for (int i = 0; i < PC; i++)
        gb[i] = odd_value(x);
    if (nan_at_end != 0) gbig[PR * PC - 1] = nan_at_end;
    dt_tensor items[2];
    twin_tensors(items, gbig, gb);
    dt_msg_push_req req = push_req(items, 2, w);
    req.step = step;
    req.push_id = id;
    return send_both(t, DT_MSG_PUSH_REQ, &req, err);
}

/* Every variable and slot of both, pulled: the same bits; *step gets the
 * global step (the same on both). */
static void assert_twins_equal(twin *t, int64_t *step) {
    dt_msg_pull_req req = {.worker = -1, .include_slots = true};
    dt_msg_pull_resp r[2];
    dt_tensor views[2][4], slots[2][8];
    for (int k = 0; k < 2; k++) {
        memset(&r[k], 0, sizeof r[k]);
        r[k].in = (dt_tensor_views){views[k], 0, 4, NULL};
        r[k].slots_in = (dt_tensor_views){slots[k], 0, 8, NULL};
    }
    /* Each reply is decoded while its bytes live: pull, compare, release. */
    dt_err err;
    dt_err_clear(&err);
    dt_rpc_buf req_buf, reply[2];
    int64_t size = dt_codec_size(DT_MSG_PULL_REQ, &req, &err);
    ck_assert_int_eq(dt_rpc_buf_alloc(&req_buf, (size_t)size, &err), 0);
    ck_assert_int_eq(dt_codec_encode(DT_MSG_PULL_REQ, &req, req_buf.data, req_buf.len, &err), 0);
    dt_rpc_peer anyone = {.role = DT_PEER_ANY, .task = -1, .name = "anonymous"};
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(dt_ps_call(k ? t->cut : t->flat, DT_METHOD_PULL, &anyone, &req_buf, &reply[k],
                                 &err) == 0,
                      "%s", err.msg);
        ck_assert_msg(dt_codec_decode(DT_MSG_PULL_RESP, reply[k].data, reply[k].len, &r[k], &err) ==
                          0,
                      "%s", err.msg);
    }
    ck_assert_int_eq(r[0].global_step, r[1].global_step);
    ck_assert_int_eq(r[0].in.count, 2);
    ck_assert_int_eq(r[1].in.count, 2);
    ck_assert_int_eq(r[0].slots_in.count, r[1].slots_in.count);
    for (int i = 0; i < 2; i++)
        ck_assert_msg(memcmp(views[0][i].data, views[1][i].data, views[0][i].nbytes) == 0,
                      "variable %s differs", views[0][i].name);
    for (int i = 0; i < r[0].slots_in.count; i++)
        ck_assert_msg(memcmp(slots[0][i].data, slots[1][i].data, slots[0][i].nbytes) == 0,
                      "slot %s differs", slots[0][i].name);
    *step = r[0].global_step;
    for (int k = 0; k < 2; k++)
        dt_rpc_buf_release(&reply[k]);
    dt_rpc_buf_release(&req_buf);
}

/* A job run on both twins, its requests cut into pieces for one: create
 * (variables and slots given), pushes of odd gradients from two workers, a
 * push with a NaN in its last piece (refused, nothing changed), a retry of
 * an applied push (not applied again), a push that brings the variables
 * back. The twins end bit-identical. */
/* The twins' Create of items (big, b) with optimizer at 0.0173, in mode
 * (sync: both workers' pushes make a step). */
static dt_msg_create_req twin_create(dt_tensor *items, dt_optim_kind optimizer, int mode) {
    dt_optim_config cfg;
    dt_optim_defaults(&cfg);
    cfg.kind = optimizer;
    cfg.learning_rate = 0.0173;
    dt_msg_create_req c = create_req(items, 2, &cfg, 1000);
    c.consistency.mode = mode;
    c.consistency.replicas_to_aggregate = 2;
    c.consistency.total_num_replicas = 2;
    c.consistency.timeout_ms = 600000;
    return c;
}

/* threaded: `cut` checks and applies each gradient by ranges on 3 threads
 * (407 floats of big in 12 ranges, the 11 of b in 11), `flat` on one: the
 * same bits still. */
static void run_twins_on(dt_optim_kind optimizer, int mode, int threaded, int nesterov) {
    twin t;
    if (threaded)
        twin_start_threads(&t, 1, 3);
    else
        twin_start(&t);
    uint64_t x = 99;
    float big[PR * PC], b[PC], sbig[PR * PC], sb[PC];
    for (int i = 0; i < PR * PC; i++) {
        big[i] = odd_value(&x);
        sbig[i] = 0.5f + odd_value(&x) * odd_value(&x); /* a positive slot value */
    }
    for (int i = 0; i < PC; i++) {
        b[i] = odd_value(&x);
        sb[i] = 0.25f;
    }
    dt_tensor items[2], slot_items[2];
    twin_tensors(items, big, b);
    dt_msg_create_req c = twin_create(items, optimizer, mode);
    c.optim.nesterov = nesterov;
    if (dt_optim_num_slots(&c.optim) > 0) {
        /* The first slot given, the others at their initial value. */
        twin_tensors(slot_items, sbig, sb);
        snprintf(slot_items[0].name, sizeof slot_items[0].name, "big/%s",
                 dt_optim_slot_name(&c.optim, 0));
        snprintf(slot_items[1].name, sizeof slot_items[1].name, "b/%s",
                 dt_optim_slot_name(&c.optim, 0));
        c.slots_out = (dt_tensor_list){.items = slot_items, .count = 2};
    }
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(send_both(&t, DT_MSG_CREATE_REQ, &c, &err) == 0, "create: %s", err.msg);
    int64_t step = 0;
    uint64_t id = 1000;
    for (int k = 0; k < 6; k++) {
        ck_assert_msg(push_both(&t, &x, k % 2, ++id, step, 0, &err) == 0, "push %d: %s", k,
                      err.msg);
        if (mode != DT_MODE_SYNC || k % 2 == 1) step++;
    }
    int64_t before;
    assert_twins_equal(&t, &before);
    ck_assert_int_eq(before, step);
    /* A NaN in the last element, so in the last piece: refused by both,
     * and nothing of it applied. */
    ck_assert_int_eq(push_both(&t, &x, 0, ++id, step, NAN, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "not finite") != NULL, "%s", err.msg);
    int64_t after;
    assert_twins_equal(&t, &after);
    ck_assert_int_eq(after, before);
    /* The last applied push again, same id: answered, not applied. */
    uint64_t replay = x;
    ck_assert_int_eq(push_both(&t, &x, 1, ++id, step, 0, &err), 0);
    if (mode != DT_MODE_SYNC) step++;
    assert_twins_equal(&t, &before);
    x = replay;
    ck_assert_int_eq(push_both(&t, &x, 1, id, step, 0, &err), 0);
    assert_twins_equal(&t, &after);
    ck_assert_int_eq(after, before);
    /* A push that asks for the variables: the same reply from both. */
    float gbig[PR * PC], gb[PC];
    for (int i = 0; i < PR * PC; i++)
        gbig[i] = odd_value(&x);
    for (int i = 0; i < PC; i++)
        gb[i] = odd_value(&x);
    twin_tensors(items, gbig, gb);
    dt_msg_push_req req = push_req(items, 2, 0);
    req.step = step;
    req.push_id = ++id;
    req.pull = true;
    uint8_t *reply[2];
    size_t reply_len[2];
    dt_msg_push_resp r[2];
    dt_tensor views[2][4];
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(send_to(&t, k, DT_MSG_PUSH_REQ, &req, &reply[k], &reply_len[k], &err), 0);
        memset(&r[k], 0, sizeof r[k]);
        r[k].in = (dt_tensor_views){views[k], 0, 4, NULL};
        ck_assert_msg(dt_codec_decode(DT_MSG_PUSH_RESP, reply[k], reply_len[k], &r[k], &err) == 0,
                      "%s", err.msg);
    }
    ck_assert_int_eq(r[0].global_step, r[1].global_step);
    ck_assert_int_eq(r[0].wait, r[1].wait);
    ck_assert_int_eq(r[0].in.count, r[1].in.count);
    ck_assert_int_eq(r[0].in.count, 2); /* sync: this gradient completed the step */
    for (int i = 0; i < r[0].in.count; i++)
        ck_assert_msg(memcmp(views[0][i].data, views[1][i].data, views[0][i].nbytes) == 0,
                      "pushed-back variable %s differs", views[0][i].name);
    free(reply[0]);
    free(reply[1]);
    assert_twins_equal(&t, &after);
    twin_stop(&t);
}

static void run_twins(dt_optim_kind optimizer, int mode) {
    run_twins_on(optimizer, mode, 0, 0);
}

START_TEST(test_pieces_sgd_async) {
    run_twins(DT_OPTIM_SGD, DT_MODE_ASYNC);
}
END_TEST

START_TEST(test_pieces_adam_async) {
    run_twins(DT_OPTIM_ADAM, DT_MODE_ASYNC);
}
END_TEST

START_TEST(test_pieces_momentum_sync) {
    run_twins(DT_OPTIM_MOMENTUM, DT_MODE_SYNC);
}
END_TEST

/* Every dense rule, async and sync, checked and applied by ranges on three
 * threads from pieces of 1..7 bytes, against one thread reading one run:
 * variables and slots the same bits after every stage of run_twins (a NaN
 * in the last range refused whole, a retry, a push that pulls). */
START_TEST(test_ranges_every_optimizer) {
    const dt_optim_kind kinds[] = {DT_OPTIM_SGD,     DT_OPTIM_MOMENTUM, DT_OPTIM_MOMENTUM,
                                   DT_OPTIM_ADAGRAD, DT_OPTIM_ADAM,     DT_OPTIM_FTRL};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int mode = DT_MODE_ASYNC; mode <= DT_MODE_SYNC; mode++)
            run_twins_on(kinds[k], mode, 1, k == 2);
}
END_TEST

/* Twins' rows of T_NAME at ids (n <= 64) compared, bit for bit. */
static void assert_twin_rows_equal(twin *t, const int64_t *ids, int n) {
    int64_t copy[64];
    ck_assert(n <= 64);
    memcpy(copy, ids, (size_t)n * sizeof *ids);
    dt_tensor it;
    make_tensor(&it, T_NAME, DT_DTYPE_I64, 1, n, 0, copy);
    dt_msg_sparse_pull_req req;
    memset(&req, 0, sizeof req);
    req.worker = -1;
    snprintf(req.table, sizeof req.table, "%s", T_NAME);
    req.ids_out = (dt_tensor_list){.items = &it, .count = 1};
    uint8_t *reply[2];
    size_t len[2];
    dt_tensor view[2];
    dt_err err;
    for (int k = 0; k < 2; k++) { /* k picks the twin: flat, then cut */
        ck_assert_msg(send_to(t, k, DT_MSG_SPARSE_PULL_REQ, &req, &reply[k], &len[k], &err) == 0,
                      "%s", err.msg);
        dt_msg_sparse_pull_resp resp;
        memset(&resp, 0, sizeof resp);
        resp.values_in = (dt_tensor_views){.items = &view[k], .cap = 1};
        ck_assert_msg(dt_codec_decode(DT_MSG_SPARSE_PULL_RESP, reply[k], len[k], &resp, &err) == 0,
                      "%s", err.msg);
        ck_assert_int_eq(resp.values_in.count, 1);
    }
    ck_assert_uint_eq(view[0].nbytes, (size_t)n * T_DIM * sizeof(float));
    ck_assert_msg(memcmp(view[0].data, view[1].data, view[0].nbytes) == 0, "rows differ");
    free(reply[0]);
    free(reply[1]);
}

/* Sparse pushes (and their dense half) to both twins: the rows read in
 * place from pieces of 1..7 bytes (rows and floats split between them)
 * give the bits of one run; a NaN in the last row is refused by both and
 * nothing of that push applied. async reads the rows where they lie, sync
 * copies them into its accumulators. */
static void run_sparse_twins(dt_optim_kind optimizer, int mode) {
    enum { N = 48 };
    twin t;
    twin_start(&t);
    uint64_t x = 7;
    float big[PR * PC], b[PC];
    for (int i = 0; i < PR * PC; i++)
        big[i] = odd_value(&x);
    for (int i = 0; i < PC; i++)
        b[i] = odd_value(&x);
    dt_tensor items[2];
    twin_tensors(items, big, b);
    dt_msg_create_req c = twin_create(items, optimizer, mode);
    c.tables[0] = table_spec();
    c.num_tables = 1;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(send_both(&t, DT_MSG_CREATE_REQ, &c, &err) == 0, "create: %s", err.msg);
    int64_t ids[N], step = 0;
    uint64_t push_id = 1;
    for (int k = 0; k <= 6; k++) {
        int n = 0;
        for (int64_t id = k; n < N; id += 1 + (id * 5 + k) % 9)
            ids[n++] = id * 1000003;
        float g[N * T_DIM], gbig[PR * PC], gb[PC];
        for (int i = 0; i < N * T_DIM; i++)
            g[i] = odd_value(&x);
        for (int i = 0; i < PR * PC; i++)
            gbig[i] = odd_value(&x);
        for (int i = 0; i < PC; i++)
            gb[i] = odd_value(&x);
        if (k == 6) g[N * T_DIM - 1] = NAN;
        dt_tensor dense[2], it, gt;
        twin_tensors(dense, gbig, gb);
        make_tensor(&it, T_NAME, DT_DTYPE_I64, 1, N, 0, ids);
        make_tensor(&gt, T_NAME, DT_DTYPE_F32, 2, N, T_DIM, g);
        dt_msg_push_req req = push_req(dense, 2, k % 2);
        req.step = step;
        req.push_id = push_id++;
        req.sparse_ids_out = (dt_tensor_list){.items = &it, .count = 1};
        req.sparse_grads_out = (dt_tensor_list){.items = &gt, .count = 1};
        int rc = send_both(&t, DT_MSG_PUSH_REQ, &req, &err);
        if (k == 6) {
            ck_assert_int_eq(rc, DT_EINVAL);
            ck_assert_msg(strstr(err.msg, "not finite") != NULL, "%s", err.msg);
        } else {
            ck_assert_msg(rc == 0, "push %d: %s", k, err.msg);
            if (mode != DT_MODE_SYNC || k % 2 == 1) step++;
        }
        assert_twin_rows_equal(&t, ids, N);
    }
    int64_t now;
    assert_twins_equal(&t, &now);
    ck_assert_int_eq(now, step);
    twin_stop(&t);
}

START_TEST(test_pieces_sparse_async) {
    run_sparse_twins(DT_OPTIM_ADAGRAD, DT_MODE_ASYNC);
}
END_TEST

START_TEST(test_pieces_sparse_sync) {
    run_sparse_twins(DT_OPTIM_FTRL, DT_MODE_SYNC);
}
END_TEST

/* ---- finiteness of large gradients ------------------------------------------ */

/* A Create of one float32 variable `name` of n values w (item holds its
 * tensor), with optimizer at rate 0.5 (momentum 0.5: exact on small
 * integers) and 100 steps. */
static void one_var_create(dt_msg_create_req *c, dt_tensor *item, const char *name, float *w,
                           int64_t n, dt_optim_kind optimizer) {
    make_tensor(item, name, DT_DTYPE_F32, 1, n, 0, w);
    dt_optim_config cfg;
    dt_optim_defaults(&cfg);
    cfg.kind = optimizer;
    cfg.learning_rate = 0.5;
    cfg.momentum = 0.5;
    *c = create_req(item, 1, &cfg, 100);
}

#define NF 1037 /* 16 blocks of the finiteness test's 64, and a tail of 13 */

/* Both twins created with one variable "f" of n floats at w0 (item over
 * it, reused by the caller for its pushes). */
static void twin_create_f(twin *t, dt_tensor *item, float *w0, int64_t n, dt_optim_kind optimizer) {
    dt_msg_create_req c;
    one_var_create(&c, item, "f", w0, n, optimizer);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(send_both(t, DT_MSG_CREATE_REQ, &c, &err) == 0, "create: %s", err.msg);
}

/* Variable "f" of one twin (cut: the one taking requests in pieces), pulled
 * into out (n floats); the global step is returned. */
static int64_t twin_pull_n(twin *t, int cut, float *out, size_t n) {
    dt_msg_pull_req req = {.worker = -1};
    uint8_t *reply = NULL;
    size_t len = 0;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(send_to(t, cut, DT_MSG_PULL_REQ, &req, &reply, &len, &err) == 0, "%s", err.msg);
    dt_msg_pull_resp r;
    dt_tensor views[2];
    memset(&r, 0, sizeof r);
    r.in = (dt_tensor_views){views, 0, 2, NULL};
    ck_assert_msg(dt_codec_decode(DT_MSG_PULL_RESP, reply, len, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r.in.count, 1);
    ck_assert_uint_eq(views[0].nbytes, n * 4);
    memcpy(out, views[0].data, n * 4);
    free(reply);
    return r.global_step;
}

static int64_t twin_pull_f(twin *t, int cut, float *out) {
    return twin_pull_n(t, cut, out, NF);
}

/* A NaN or an Inf anywhere in a gradient of many blocks (first, last,
 * either side of a block's edge, the tail; quiet, signalling, negative
 * NaNs with payloads) is refused by name and index, in one run and in
 * pieces of 1 to 7 bytes (runs at every alignment), and changes nothing;
 * the largest and smallest finite values, denormals and -0 pass, and the
 * update is exact. */
/* threaded: both twins check by ranges on 3 threads (1,037 floats in 12
 * ranges of 86 or 87), so the places below fall on either side of range
 * edges too, and a second bad value in a later range must not be the one
 * named. */
static void nonfinite_anywhere(int threaded) {
    twin t;
    twin_start_threads(&t, threaded ? 3 : 0, threaded ? 3 : 0);
    static float w0[NF], g[NF], got[NF];
    for (int i = 0; i < NF; i++)
        w0[i] = (float)(i % 97) - 48.0f;
    dt_tensor item;
    twin_create_f(&t, &item, w0, NF, DT_OPTIM_SGD);
    dt_err err;
    dt_err_clear(&err);
    const uint32_t bad[5] = {0x7fc00000u, 0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc12345u};
    const int at[] = {0,   1,   62,  63,  64,  65,   86,   87,   127,
                      128, 172, 511, 512, 700, 1023, 1024, 1030, NF - 1};
    dt_msg_push_req req;
    memset(&req, 0, sizeof req);
    req.worker = 0;
    req.out = (dt_tensor_list){.items = &item, .count = 1};
    make_tensor(&item, "f", DT_DTYPE_F32, 1, NF, 0, g);
    int refused = 0;
    for (size_t a = 0; a < sizeof at / sizeof at[0]; a++)
        for (int b = 0; b < 5; b++) {
            for (int i = 0; i < NF; i++)
                g[i] = 1.0f;
            memcpy(&g[at[a]], &bad[b], sizeof bad[b]);
            /* A second one further on: the first is the one named. */
            if (at[a] + 300 < NF) memcpy(&g[at[a] + 300], &bad[(b + 1) % 5], sizeof bad[b]);
            req.push_id = (uint64_t)(1 + refused);
            char want[64];
            snprintf(want, sizeof want, "f[%d] is not finite", at[a]);
            for (int cut = 0; cut < 2; cut++) {
                ck_assert_int_eq(send_to(&t, cut, DT_MSG_PUSH_REQ, &req, NULL, NULL, &err),
                                 DT_EINVAL);
                ck_assert_msg(strstr(err.msg, want) != NULL, "want \"%s\" in: %s", want, err.msg);
                ck_assert_int_eq(twin_pull_f(&t, cut, got), 0);
                ck_assert_msg(memcmp(got, w0, sizeof got) == 0, "bad at %d changed the variable",
                              at[a]);
            }
            refused++;
        }
    /* Finite extremes pass; w - 0.5 * g is exact for each of them. */
    const float extremes[6] = {FLT_MAX, -FLT_MAX, FLT_MIN, 1e-45f, -0.0f, 3.0f};
    for (int i = 0; i < NF; i++)
        g[i] = extremes[i % 6];
    req.push_id = 9999;
    ck_assert_msg(send_both(&t, DT_MSG_PUSH_REQ, &req, &err) == 0, "extremes: %s", err.msg);
    for (int cut = 0; cut < 2; cut++) {
        ck_assert_int_eq(twin_pull_f(&t, cut, got), 1);
        for (int i = 0; i < NF; i++) {
            float want = w0[i] - 0.5f * g[i];
            ck_assert_msg(memcmp(&got[i], &want, sizeof want) == 0, "f[%d] = %a, want %a", i,
                          (double)got[i], (double)want);
        }
    }
    twin_stop(&t);
}

START_TEST(test_nonfinite_anywhere) {
    nonfinite_anywhere(0);
}
END_TEST

/* A gradient long enough that the helpers take ranges while the poller
 * does its own (65,536 floats in 12 ranges, each read from about 5,000
 * pieces of 1..7 bytes; the small model's ranges are done before a helper
 * wakes): Adam by ranges on 3 threads against one thread reading one run,
 * the same bits after each of 3 pushes; a NaN in the middle refused by
 * both, nothing changed. Under TSan this is where helpers and poller run
 * at once. */
#define NL 65536
START_TEST(test_ranges_large_gradient) {
    twin t;
    twin_start_threads(&t, 1, 3);
    static float w0[NL], g[NL], flat[NL], cut[NL];
    uint64_t x = 11;
    for (int i = 0; i < NL; i++)
        w0[i] = odd_value(&x);
    dt_tensor item;
    twin_create_f(&t, &item, w0, NL, DT_OPTIM_ADAM);
    dt_err err;
    dt_err_clear(&err);
    dt_msg_push_req req;
    memset(&req, 0, sizeof req);
    req.worker = 0;
    req.out = (dt_tensor_list){.items = &item, .count = 1};
    make_tensor(&item, "f", DT_DTYPE_F32, 1, NL, 0, g);
    for (int step = 1; step <= 3; step++) {
        for (int i = 0; i < NL; i++)
            g[i] = odd_value(&x);
        req.push_id = (uint64_t)step;
        ck_assert_msg(send_both(&t, DT_MSG_PUSH_REQ, &req, &err) == 0, "push %d: %s", step,
                      err.msg);
        ck_assert_int_eq(twin_pull_n(&t, 0, flat, NL), step);
        ck_assert_int_eq(twin_pull_n(&t, 1, cut, NL), step);
        ck_assert_msg(memcmp(flat, cut, sizeof flat) == 0, "push %d: the variable differs", step);
    }
    g[NL / 2 + 1] = NAN;
    req.push_id = 4;
    ck_assert_int_eq(send_both(&t, DT_MSG_PUSH_REQ, &req, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "f[32769] is not finite") != NULL, "%s", err.msg);
    ck_assert_int_eq(twin_pull_n(&t, 1, cut, NL), 3);
    ck_assert_msg(memcmp(flat, cut, sizeof flat) == 0, "the refused push changed the variable");
    twin_stop(&t);
}
END_TEST

START_TEST(test_nonfinite_anywhere_ranges) {
    nonfinite_anywhere(1);
}
END_TEST

/* ---- variables sent in place ---------------------------------------------- */

#define NBIG 20000 /* 80 kB: sent in place (DT_CODEC_REF_MIN_BYTES) */

/* Calls ps's handler for msg and keeps the reply as it is built (pieces
 * that are the variables' own buffers). */
static dt_rpc_buf call_keep(dt_ps *ps, dt_msg_type type, const void *msg) {
    dt_err err;
    dt_err_clear(&err);
    int64_t size = dt_codec_size(type, msg, &err);
    ck_assert(size > 0);
    dt_rpc_buf req, reply;
    ck_assert_int_eq(dt_rpc_buf_alloc(&req, (size_t)size, &err), 0);
    ck_assert_int_eq(dt_codec_encode(type, msg, req.data, req.len, &err), 0);
    dt_rpc_peer anyone = {.role = DT_PEER_ANY, .task = -1, .name = "anonymous"};
    ck_assert_msg(dt_ps_call(ps, dt_codec_method(type), &anyone, &req, &reply, &err) == 0, "%s",
                  err.msg);
    dt_rpc_buf_release(&req);
    return reply;
}

static dt_rpc_buf pull_keep(dt_ps *ps, int with_slots, const char *only) {
    dt_msg_pull_req req = {.worker = -1, .include_slots = with_slots};
    const char *names[1] = {only};
    if (only) {
        req.out_names = names;
        req.out_count = 1;
    }
    return call_keep(ps, DT_MSG_PULL_REQ, &req);
}

/* The first element of every tensor of a kept pull reply, and how many
 * elements of each equal want(i) for the rule checked by want. */
static void check_reply(const dt_rpc_buf *reply, const char *name, float base, float step) {
    dt_msg_pull_resp r;
    dt_tensor views[4], slot_views[4];
    dt_span spans[4], slot_spans[4];
    memset(&r, 0, sizeof r);
    r.in = (dt_tensor_views){views, 0, 4, spans};
    r.slots_in = (dt_tensor_views){slot_views, 0, 4, slot_spans};
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_codec_decode_buf(DT_MSG_PULL_RESP, reply, &r, &err) == 0, "%s", err.msg);
    const dt_tensor_views *v = strchr(name, '/') ? &r.slots_in : &r.in;
    int k = -1;
    for (int i = 0; i < v->count; i++)
        if (strcmp(v->items[i].name, name) == 0) k = i;
    ck_assert_msg(k >= 0, "%s not in the reply", name);
    ck_assert_uint_eq(v->items[k].nbytes, NBIG * 4);
    static float got[NBIG];
    dt_codec_view_copy(v, k, got);
    for (int i = 0; i < NBIG; i++)
        if (got[i] != base + step * (float)i)
            ck_abort_msg("%s[%d] = %g, want %g", name, i, (double)got[i],
                         (double)(base + step * (float)i));
}

static void push_ones(twin *t, uint64_t id) {
    static float g[NBIG];
    for (int i = 0; i < NBIG; i++)
        g[i] = 1.0f;
    dt_tensor item;
    make_tensor(&item, "big", DT_DTYPE_F32, 1, NBIG, 0, g);
    dt_msg_push_req req = push_req(&item, 1, 0);
    req.push_id = id;
    dt_rpc_buf reply = call_keep(t->flat, DT_MSG_PUSH_REQ, &req);
    dt_rpc_buf_release(&reply);
}

/* A pull's reply carries a large variable as its buffer itself, not a
 * copy: while it is (as if) being sent, pushes write the next values
 * elsewhere, so every reply says what the variable was when it was made,
 * whole pulls, named pulls and slots (a snapshot) alike; once the replies
 * are gone the buffers are used again. Exact values: sgd and momentum with
 * power-of-two rates on small integers. */
START_TEST(test_reply_buffers_unchanged) {
    const dt_optim_kind optimizers[2] = {DT_OPTIM_SGD, DT_OPTIM_MOMENTUM};
    for (int o = 0; o < 2; o++) {
        twin t;
        twin_start(&t);
        static float w[NBIG];
        for (int i = 0; i < NBIG; i++)
            w[i] = (float)i;
        dt_tensor item;
        dt_msg_create_req c;
        one_var_create(&c, &item, "big", w, NBIG, optimizers[o]);
        dt_rpc_buf r = call_keep(t.flat, DT_MSG_CREATE_REQ, &c);
        dt_rpc_buf_release(&r);
        int slots = o == 1;
        /* w0 = i; each push of 1: sgd w -= 0.5; momentum a = 0.5a + 1, w -= 0.5a. */
        const float w_after[4] = {0.0f, -0.5f, slots ? -1.25f : -1.0f, slots ? -2.125f : -1.5f};
        const float a_after[4] = {0.0f, 1.0f, 1.5f, 1.75f};
        dt_rpc_buf r0 = pull_keep(t.flat, slots, NULL);
        push_ones(&t, 1);
        dt_rpc_buf r1 = pull_keep(t.flat, slots, NULL);
        dt_rpc_buf named = pull_keep(t.flat, 0, "big");
        push_ones(&t, 2); /* both buffers read: a third one */
        check_reply(&r0, "big", w_after[0], 1.0f);
        check_reply(&r1, "big", w_after[1], 1.0f);
        check_reply(&named, "big", w_after[1], 1.0f);
        if (slots) {
            check_reply(&r0, "big/momentum", a_after[0], 0.0f);
            check_reply(&r1, "big/momentum", a_after[1], 0.0f);
        }
        dt_rpc_buf_release(&r0);
        dt_rpc_buf_release(&r1);
        dt_rpc_buf_release(&named);
        push_ones(&t, 3); /* none read now: in place */
        dt_rpc_buf r3 = pull_keep(t.flat, slots, NULL);
        check_reply(&r3, "big", w_after[3], 1.0f);
        if (slots) check_reply(&r3, "big/momentum", a_after[3], 0.0f);
        twin_stop(&t); /* the reply outlives the ps that made it */
        check_reply(&r3, "big", w_after[3], 1.0f);
        dt_rpc_buf_release(&r3);
    }
}
END_TEST

/* ---- pipelined pushes ------------------------------------------------------- */

/* The demo job (linear, line data) trained by one in-process worker (task
 * 1, so no chief hooks) against the fixture's ps, 300 steps, pipelined or
 * not; st gets the ps's Status after, w_out the weight the worker ends with. */
static void train_one(int pipeline, dt_msg_status_resp *st, float *w_out) {
    fixture f;
    fixture_start(&f, 0);
    dt_job job;
    dt_job_defaults(&job);
    job.max_steps = 300;
    job.log_steps = 1000;
    job.pipeline_push = pipeline;
    job.rpc_timeout_secs = CALL_TIMEOUT_MS / 1000;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_job_finish(&job, &err) == 0, "%s", err.msg);
    dt_worker_params wp = {.cluster = &f.cluster, .job = &job, .task_index = 1};
    dt_worker *w = NULL;
    ck_assert_msg(dt_worker_open(&wp, &w, &err) == 0, "%s", err.msg);
    dt_ps_model model;
    memset(&model, 0, sizeof model);
    model.vars = dt_worker_vars(w); /* zeros */
    model.max_steps = job.max_steps;
    model.optim = job.optim;
    model.model = "pipeline test";
    ck_assert_msg(dt_ps_client_create(dt_worker_client(w), &model, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_worker_train(w, NULL, NULL, &err) == 0, "%s", err.msg);
    memset(st, 0, sizeof *st);
    ck_assert_int_eq(dt_ps_client_status(dt_worker_client(w), 0, st, &err), 0);
    const dt_tensor *weight = dt_tensors_find(dt_worker_vars(w), "linear/weight");
    ck_assert_ptr_nonnull(weight);
    memcpy(w_out, weight->data, sizeof *w_out);
    dt_worker_free(w);
    fixture_stop(&f);
}

/* pipeline_push: a lone worker's every gradient but its first is exactly
 * one step stale (it was computed while the previous push was in flight),
 * where without pipelining none is; every push is applied once, and both
 * fit the demo's line (w* = 2). */
START_TEST(test_pipelined_pushes_one_step_stale) {
    dt_msg_status_resp plain, piped;
    float w_plain, w_piped;
    train_one(0, &plain, &w_plain);
    train_one(1, &piped, &w_piped);
    ck_assert_int_eq(plain.global_step, 300);
    ck_assert_int_eq(piped.global_step, 300);
    ck_assert_int_eq(plain.pushes_applied, 300);
    ck_assert_int_eq(piped.pushes_applied, 300);
    ck_assert_int_eq(plain.staleness_counts[0], 300);
    ck_assert_int_eq(piped.staleness_counts[0], 1);
    ck_assert_int_eq(piped.staleness_counts[1], 299);
    ck_assert_msg(fabsf(w_plain - 2.0f) < 0.3f && fabsf(w_piped - 2.0f) < 0.3f,
                  "weights %g and %g, want about 2", (double)w_plain, (double)w_piped);
}
END_TEST

/* ---- values stay finite ---------------------------------------------------- */

/* Every value the ps holds is finite: pulled, w and b. */
static void assert_all_finite(fixture *f, const char *when) {
    float w[NW], b[NB];
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(pull(f, w, b, NULL, NULL, &err) == 0, "%s: pull: %s", when, err.msg);
    for (int i = 0; i < NW; i++)
        ck_assert_msg(isfinite(w[i]), "%s: w[%d] = %g", when, i, (double)w[i]);
    for (int i = 0; i < NB; i++)
        ck_assert_msg(isfinite(b[i]), "%s: b[%d] = %g", when, i, (double)b[i]);
}

/* Create refuses Inf and NaN initial values, naming the variable (or slot)
 * and the index; the ps stays unbuilt, and a good Create then works. */
START_TEST(test_create_refuses_nonfinite) {
    fixture f;
    fixture_start(&f, 0);
    dt_optim_config cfg;
    sgd_config(&cfg, 0.5);
    float w[NW], b[NB];
    memcpy(w, W0, sizeof w);
    memcpy(b, B0, sizeof b);
    dt_err err;
    w[3] = INFINITY;
    ASSERT_FAILS(create(&f, w, b, &cfg, 0, 100, NULL, &err), DT_EINVAL, "w[3] is inf");
    w[3] = W0[3];
    b[2] = -INFINITY;
    ASSERT_FAILS(create(&f, w, b, &cfg, 0, 100, NULL, &err), DT_EINVAL, "b[2] is -inf");
    b[2] = NAN;
    ASSERT_FAILS(create(&f, w, b, &cfg, 0, 100, NULL, &err), DT_EINVAL, "b[2] is");
    b[2] = B0[2];
    /* A slot: momentum's, Inf at w/momentum[5]. */
    dt_optim_config mom;
    dt_optim_defaults(&mom);
    mom.kind = DT_OPTIM_MOMENTUM;
    mom.learning_rate = 0.5;
    model_copy m;
    copy_model(&m, W0, B0);
    float sw[NW] = {0, 0, 0, 0, 0, INFINITY};
    dt_tensor slot;
    make_tensor(&slot, "w/momentum", DT_DTYPE_F32, 2, 2, 3, sw);
    dt_msg_create_req req = create_req(m.items, 2, &mom, 100);
    req.slots_out = (dt_tensor_list){.items = &slot, .count = 1};
    dt_msg_create_resp cr;
    memset(&cr, 0, sizeof cr);
    ASSERT_FAILS(call_msg(&f, DT_MSG_CREATE_REQ, &req, DT_MSG_CREATE_RESP, &cr, &err), DT_EINVAL,
                 "w/momentum[5] is inf");
    dt_err_clear(&err);
    ck_assert_msg(create(&f, W0, B0, &cfg, 0, 100, NULL, &err) == 0, "%s", err.msg);
    assert_state(&f, W0, B0, 0, "after the refusals");
    fixture_stop(&f);
}
END_TEST

/* Pushes 30 gradients of 3e38 (finite) for optimizer kind at lr from
 * worker 1: whatever the rule, no value pulled after any of them is
 * non-finite; the first refusal names the variable and the index; Status
 * counts the refusals and the applied ones add up to the step. */
static void overflow_run(dt_optim_kind kind, int nesterov, double lr, int skip) {
    fixture f;
    fixture_start(&f, 0);
    dt_optim_config cfg;
    dt_optim_defaults(&cfg);
    cfg.kind = kind;
    cfg.nesterov = nesterov;
    cfg.learning_rate = lr;
    model_copy m;
    copy_model(&m, W0, B0);
    dt_msg_create_req req = create_req(m.items, 2, &cfg, 1000);
    req.skip_nonfinite = skip;
    dt_msg_create_resp cr;
    memset(&cr, 0, sizeof cr);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(call_msg(&f, DT_MSG_CREATE_REQ, &req, DT_MSG_CREATE_RESP, &cr, &err) == 0,
                  "create: %s", err.msg);
    float gw[NW], gb[NB];
    for (int i = 0; i < NW; i++)
        gw[i] = 3e38f;
    for (int i = 0; i < NB; i++)
        gb[i] = 1; /* b stays small: the refusal is w's */
    int refused = 0, applied = 0;
    char first[sizeof err.msg] = "";
    for (int k = 0; k < 30; k++) {
        dt_msg_push_resp pr;
        dt_err_clear(&err);
        int rc = push(&f, gw, gb, 1, &pr, &err);
        if (skip) {
            ck_assert_msg(rc == 0, "%s push %d: %s", dt_optim_name(kind), k, err.msg);
            if (pr.dropped)
                refused++;
            else
                applied++;
        } else if (rc < 0) {
            ck_assert_msg(rc == DT_EINVAL, "%s push %d: rc %d: %s", dt_optim_name(kind), k, rc,
                          err.msg);
            if (!refused++) snprintf(first, sizeof first, "%s", err.msg);
        } else {
            applied++;
        }
        assert_all_finite(&f, dt_optim_name(kind));
    }
    ck_assert_msg(refused > 0, "%s: no update refused in 30 pushes of 3e38", dt_optim_name(kind));
    if (!skip)
        ck_assert_msg(strstr(first, "update of w[0] would not be finite") != NULL, "%s: %s",
                      dt_optim_name(kind), first);
    dt_msg_status_resp st;
    status(&f, -1, &st);
    ck_assert_int_eq(st.updates_nonfinite, refused);
    ck_assert_int_eq(st.pushes_applied, applied);
    ck_assert_int_eq(st.global_step, applied);
    ck_assert_int_eq(st.pushes_nonfinite, 0); /* every gradient was finite */
    fixture_stop(&f);
}

/* The issue's case: sgd at lr 0.5, w -= 1.5e38 a push, -inf at the third. */
START_TEST(test_overflow_sgd) {
    overflow_run(DT_OPTIM_SGD, 0, 0.5, 0);
}
END_TEST

/* adagrad's and adam's g^2, ftrl's n, momentum's accumulator: each rule
 * overflows its own way, and each is refused before it lands. */
START_TEST(test_overflow_every_optimizer) {
    const dt_optim_kind kinds[] = {DT_OPTIM_MOMENTUM, DT_OPTIM_MOMENTUM, DT_OPTIM_ADAGRAD,
                                   DT_OPTIM_ADAM, DT_OPTIM_FTRL};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        overflow_run(kinds[i], i == 1, 0.5, 0);
}
END_TEST

/* skip_nonfinite: the same pushes are dropped and counted, never refused. */
START_TEST(test_overflow_skipped) {
    overflow_run(DT_OPTIM_SGD, 0, 0.5, 1);
    overflow_run(DT_OPTIM_ADAM, 0, 0.5, 1);
}
END_TEST

/* Rows of a table overflow as dense variables do: 30 pushes of finite row
 * gradients of 3e38 at sgd 0.5 (the dense part small): the push whose
 * update would make a row -inf is refused, naming the table, the row and
 * its id, nothing of it applied; the rows stay finite. */
START_TEST(test_overflow_table_rows) {
    fixture f;
    dt_table_config tc;
    start_with_table(&f, DT_MODE_ASYNC, &tc);
    int64_t ids[2] = {3, 10};
    float g[2][T_DIM] = {{1, 1}, {1, 3e38f}};
    dt_tensor it, gt;
    make_tensor(&it, T_NAME, DT_DTYPE_I64, 1, 2, 0, ids);
    make_tensor(&gt, T_NAME, DT_DTYPE_F32, 2, 2, T_DIM, g);
    dt_err err;
    int refused = 0, applied = 0;
    char first[sizeof err.msg] = "";
    for (int k = 0; k < 30; k++) {
        dt_err_clear(&err);
        int rc = push_sparse(&f, &it, &gt, 1, 1, &err);
        if (rc == 0) {
            applied++;
        } else {
            ck_assert_msg(rc == DT_EINVAL, "push %d: %s", k, err.msg);
            if (!refused++) snprintf(first, sizeof first, "%s", err.msg);
        }
        float got[2][T_DIM];
        dt_err_clear(&err);
        ck_assert_msg(sparse_pull(&f, ids, 2, &got[0][0], &err) == 0, "%s", err.msg);
        for (int r = 0; r < 2; r++)
            for (int d = 0; d < T_DIM; d++)
                ck_assert_msg(isfinite(got[r][d]), "push %d: row %d [%d] = %g", k, r, d,
                              (double)got[r][d]);
    }
    ck_assert_int_gt(refused, 0);
    ck_assert_msg(strstr(first, T_NAME " row 1 (id 10) [1] would not be finite") != NULL, "%s",
                  first);
    dt_msg_status_resp st;
    status(&f, -1, &st);
    ck_assert_int_eq(st.updates_nonfinite, refused);
    ck_assert_int_eq(st.global_step, applied);
    fixture_stop(&f);
}
END_TEST

/* sync: two finite gradients of 3e38 each whose sum overflows: the step's
 * update is refused whole (the push that completed it is told, naming the
 * variable and the index), nothing changes, and the step passes. */
START_TEST(test_overflow_sync_sum) {
    fixture f;
    fixture_start(&f, 0);
    dt_optim_config cfg;
    sgd_config(&cfg, 0.5);
    model_copy m;
    copy_model(&m, W0, B0);
    dt_msg_create_req req = create_req(m.items, 2, &cfg, 100);
    req.consistency.mode = DT_MODE_SYNC;
    req.consistency.replicas_to_aggregate = 2;
    req.consistency.total_num_replicas = 2;
    req.consistency.timeout_ms = 600000;
    dt_msg_create_resp cr;
    memset(&cr, 0, sizeof cr);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(call_msg(&f, DT_MSG_CREATE_REQ, &req, DT_MSG_CREATE_RESP, &cr, &err) == 0,
                  "create: %s", err.msg);
    float gw[NW], gb[NB];
    memcpy(gw, GW, sizeof gw);
    memcpy(gb, GB, sizeof gb);
    gw[2] = 3e38f;
    dt_msg_push_resp pr;
    ck_assert_msg(push(&f, gw, gb, 0, &pr, &err) == 0, "first: %s", err.msg);
    ASSERT_FAILS(push(&f, gw, gb, 1, &pr, &err), DT_EINVAL, "w[2]");
    ck_assert_msg(strstr(err.msg, "not finite") != NULL, "%s", err.msg);
    assert_state(&f, W0, B0, 1, "sync step refused");
    dt_msg_status_resp st;
    status(&f, -1, &st);
    ck_assert_int_eq(st.updates_nonfinite, 1);
    ck_assert_int_eq(st.pushes_applied, 0);
    fixture_stop(&f);
}
END_TEST

/* sync: a step's rows are tried as its dense mean is. Worker 0 pushes a
 * row gradient of 3e38 (finite) for id 10 each step, worker 1 a small one:
 * at sgd 0.5 the row falls by 7.5e37 a step, and the step whose update
 * would make it -inf is refused whole (the push that completed it is
 * told, naming the table, the row and its id): no row and no variable
 * changes at it, the step passes, Status counts it, and the rows stay
 * finite. Then two pushes of 3e38 whose sum overflows: refused too. */
START_TEST(test_overflow_sync_table_rows) {
    fixture f;
    dt_table_config tc;
    start_with_table(&f, DT_MODE_SYNC, &tc);
    int64_t ids[2] = {3, 10};
    float g0[2][T_DIM] = {{1, 1}, {1, 3e38f}}, g1[2][T_DIM] = {{1, 1}, {1, 0}};
    dt_tensor it, gt0, gt1;
    make_tensor(&it, T_NAME, DT_DTYPE_I64, 1, 2, 0, ids);
    make_tensor(&gt0, T_NAME, DT_DTYPE_F32, 2, 2, T_DIM, g0);
    make_tensor(&gt1, T_NAME, DT_DTYPE_F32, 2, 2, T_DIM, g1);
    dt_err err;
    int refused = 0;
    char first[sizeof err.msg] = "";
    int64_t step = 0;
    for (; step < 12; step++) {
        dt_msg_push_resp resp;
        dt_err_clear(&err);
        ck_assert_msg(push_sparse_from(&f, 0, step, &it, &gt0, 1, 1, &resp, &err) == 0,
                      "step %lld, worker 0: %s", (long long)step, err.msg);
        float before[2][T_DIM], got[2][T_DIM];
        ck_assert_msg(sparse_pull(&f, ids, 2, &before[0][0], &err) == 0, "%s", err.msg);
        dt_err_clear(&err);
        int rc = push_sparse_from(&f, 1, step, &it, &gt1, 1, 1, &resp, &err);
        dt_err pull_err;
        dt_err_clear(&pull_err);
        ck_assert_msg(sparse_pull(&f, ids, 2, &got[0][0], &pull_err) == 0, "%s", pull_err.msg);
        for (int r = 0; r < 2; r++)
            for (int d = 0; d < T_DIM; d++)
                ck_assert_msg(isfinite(got[r][d]), "step %lld: row %d [%d] = %g", (long long)step,
                              r, d, (double)got[r][d]);
        if (rc == 0) continue;
        ck_assert_msg(rc == DT_EINVAL, "step %lld: rc %d: %s", (long long)step, rc, err.msg);
        if (!refused++) snprintf(first, sizeof first, "%s", err.msg);
        assert_floats_eq(&got[0][0], &before[0][0], 2 * T_DIM, "rows of a refused step");
    }
    ck_assert_msg(refused > 0, "no sync step refused in %lld", (long long)step);
    ck_assert_msg(strstr(first, T_NAME " row 1 (id 10) [1] would not be finite") != NULL, "%s",
                  first);
    /* Both at 3e38: the mean's sum is +inf. */
    float big[2][T_DIM] = {{1, 1}, {1, 3e38f}};
    dt_tensor gtb;
    make_tensor(&gtb, T_NAME, DT_DTYPE_F32, 2, 2, T_DIM, big);
    dt_msg_push_resp resp;
    dt_err_clear(&err);
    ck_assert_msg(push_sparse_from(&f, 0, step, &it, &gtb, 1, 1, &resp, &err) == 0, "%s", err.msg);
    ASSERT_FAILS(push_sparse_from(&f, 1, step, &it, &gtb, 1, 1, &resp, &err), DT_EINVAL,
                 "summed row");
    refused++;
    step++;
    dt_msg_status_resp st;
    status(&f, -1, &st);
    ck_assert_int_eq(st.updates_nonfinite, refused);
    ck_assert_int_eq(st.global_step, step);
    fixture_stop(&f);
}
END_TEST

Suite *ps_suite(void) {
    Suite *s = suite_create("ps");
    TCase *life = tcase_create("lifecycle");
    tcase_set_timeout(life, 60);
    tcase_add_test(life, test_not_ready);
    tcase_add_test(life, test_create_then_pull);
    tcase_add_test(life, test_create_twice);
    tcase_add_test(life, test_create_invalid);
    tcase_add_test(life, test_start_errors);
    tcase_add_test(life, test_shutdown_after_workers_told);
    tcase_add_test(life, test_shutdown_linger);
    tcase_add_test(life, test_wait_stop_flag);
    tcase_add_test(life, test_through_client);
    tcase_add_test(life, test_pull_copy_ranges);
    tcase_add_test(life, test_two_ps_count_apart);
    suite_add_tcase(s, life);

    TCase *push_tc = tcase_create("push");
    tcase_set_timeout(push_tc, 120);
    tcase_add_test(push_tc, test_push_sgd_exact);
    tcase_add_test(push_tc, test_retried_push_applied_once);
    tcase_add_test(push_tc, test_max_steps);
    tcase_add_test(push_tc, test_bad_pushes);
    tcase_add_test(push_tc, test_push_must_cover_every_variable);
    tcase_add_test(push_tc, test_skip_nonfinite);
    tcase_add_test(push_tc, test_truncated_pushes);
    tcase_add_test(push_tc, test_concurrent_pushes);
    tcase_add_test(push_tc, test_max_steps_under_concurrency);
    suite_add_tcase(s, push_tc);

    TCase *opt = tcase_create("optimizers");
    tcase_set_timeout(opt, 60);
    tcase_add_test(opt, test_momentum);
    tcase_add_test(opt, test_adagrad);
    tcase_add_test(opt, test_adam);
    tcase_add_test(opt, test_long_names_with_slots);
    suite_add_tcase(s, opt);

    TCase *hostile = tcase_create("hostile");
    tcase_set_timeout(hostile, 60);
    tcase_add_test(hostile, test_overflowing_shapes);
    tcase_add_test(hostile, test_seen_step_not_believed);
    tcase_add_test(hostile, test_seen_step_catch_up_bounded);
    tcase_add_test(hostile, test_hostile_names);
    tcase_add_test(hostile, test_export_pages_checked);
    tcase_add_test(hostile, test_reason_escaped_in_log);
    tcase_add_test(hostile, test_push_as_another_task);
    suite_add_tcase(s, hostile);

    TCase *tables = tcase_create("tables");
    tcase_set_timeout(tables, 60);
    tcase_add_test(tables, test_table_pull_push);
    tcase_add_test(tables, test_table_bad_inputs);
    tcase_add_test(tables, test_table_pull_too_large);
    tcase_add_test(tables, test_table_create_invalid);
    tcase_add_test(tables, test_table_sync_mean);
    tcase_add_test(tables, test_table_import_export);
    tcase_add_test(tables, test_ftrl_over_the_wire);
    tcase_add_test(tables, test_client_tables_reshard);
    tcase_add_test(tables, test_table_eviction);
    suite_add_tcase(s, tables);

    TCase *pieces = tcase_create("pieces");
    tcase_set_timeout(pieces, 60);
    tcase_add_test(pieces, test_pieces_sgd_async);
    tcase_add_test(pieces, test_pieces_adam_async);
    tcase_add_test(pieces, test_pieces_momentum_sync);
    tcase_add_test(pieces, test_pieces_sparse_async);
    tcase_add_test(pieces, test_pieces_sparse_sync);
    tcase_add_test(pieces, test_reply_buffers_unchanged);
    tcase_add_test(pieces, test_nonfinite_anywhere);
    tcase_add_test(pieces, test_nonfinite_anywhere_ranges);
    tcase_add_test(pieces, test_ranges_large_gradient);
    tcase_add_test(pieces, test_ranges_every_optimizer);
    tcase_add_test(pieces, test_pipelined_pushes_one_step_stale);
    suite_add_tcase(s, pieces);

    TCase *finite = tcase_create("finite");
    tcase_set_timeout(finite, 60);
    tcase_add_test(finite, test_create_refuses_nonfinite);
    tcase_add_test(finite, test_overflow_sgd);
    tcase_add_test(finite, test_overflow_every_optimizer);
    tcase_add_test(finite, test_overflow_skipped);
    tcase_add_test(finite, test_overflow_sync_sum);
    tcase_add_test(finite, test_overflow_sync_table_rows);
    tcase_add_test(finite, test_overflow_table_rows);
    suite_add_tcase(s, finite);
    return s;
}
