/*
 * Suite "consistency": what the many-ps features promise about values.
 *
 * In-process (tcases "split", "sync", "bounded", "schedule"): ps tasks
 * started with dt_ps_start on free loopback ports, driven through
 * dt_ps_client as roles drive them. The model is emb (7, 5) and b (5), F32;
 * with partition_min_bytes 40 emb (140 bytes) is cut into min(num_ps, 7, 3)
 * slices. Every value, gradient and learning rate is a small multiple of a
 * power of two, so each expected update is computed here in float, the way
 * the ps does it, and compared bit for bit.
 *
 * Covers: a variable split across 3 ps pulls back as it was created and takes
 * a push exactly; a ps with no unit of the model; optimizer slots round trip
 * and carry over to another ps count; sync mode (1 worker = plain SGD, 2
 * workers = the mean once per pair, stale / duplicate / future gradients
 * dropped and counted, the partial step after the timeout); bounded
 * staleness (the pull gate opens and closes with the clocks, a silent worker
 * stops counting, the chief's snapshot never waits); the learning-rate
 * schedule applied on the ps at the right steps.
 *
 * Real processes (tcase "jobs", $DTRAIN_BIN): a partitioned job restored onto
 * 1 and then 3 ps tasks, a sync job of 2 workers, a bounded job whose max lead
 * stays within its staleness. Every wait is bounded; every process and
 * thread started is stopped.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "codec.h"
#include "err.h"
#include "optim.h"
#include "proc.h"
#include "ps.h"
#include "ps_client.h"
#include "suites.h"
#include "tensor.h"
#include "testjob.h"

#define CALL_TIMEOUT_MS 10000
#define MAX_PS 3
#define MAX_WORKERS 2
#define ROWS 7
#define COLS 5
#define NE (ROWS * COLS) /* elements of emb */
#define NB COLS          /* elements of b */
#define SPLIT_BYTES 40   /* partition_min_bytes that cuts emb */
#define LR 0.5f

/* ---- in-process ps tasks ------------------------------------------------ */

typedef struct {
    dt_addr ps_addr[MAX_PS];
    dt_addr worker_addr[MAX_WORKERS];
    dt_cluster cluster;
    dt_ps *ps[MAX_PS];
} world;

static void world_start(world *w, int num_ps, int num_workers) {
    ck_assert(num_ps >= 1 && num_ps <= MAX_PS && num_workers >= 1 && num_workers <= MAX_WORKERS);
    memset(w, 0, sizeof *w);
    int ports[MAX_PS + MAX_WORKERS];
    ck_assert_int_eq(dt_test_free_ports(ports, num_ps + num_workers), 0);
    for (int p = 0; p < num_ps; p++)
        dt_test_loopback_addr(&w->ps_addr[p], ports[p]);
    for (int k = 0; k < num_workers; k++)
        dt_test_loopback_addr(&w->worker_addr[k], ports[num_ps + k]);
    w->cluster.num_ps = num_ps;
    w->cluster.ps = w->ps_addr;
    w->cluster.num_workers = num_workers;
    w->cluster.workers = w->worker_addr;
    for (int p = 0; p < num_ps; p++) {
        dt_ps_params params = {
            .cluster = &w->cluster, .task_index = p, .num_threads = 2, .linger_ms = 1000};
        dt_err err;
        dt_err_clear(&err);
        int rc = dt_ps_start(&params, &w->ps[p], &err);
        ck_assert_msg(rc == 0, "ps %d start on %s: %s", p, w->ps_addr[p].addr, err.msg);
    }
}

static void world_stop(world *w) {
    for (int p = 0; p < w->cluster.num_ps; p++)
        dt_ps_free(w->ps[p]);
    memset(w, 0, sizeof *w);
}

/* dt_ps_wait on its own thread (it drives the sync partial step), with the
 * stop flag a signal handler would set. */
typedef struct {
    dt_ps *ps;
    atomic_int stop;
    int rc;
    dt_err err;
    pthread_t thread;
} waiter;

static void *wait_main(void *arg) {
    waiter *wt = arg;
    dt_err_clear(&wt->err);
    wt->rc = dt_ps_wait(wt->ps, &wt->stop, &wt->err);
    return NULL;
}

static void waiter_start(waiter *wt, dt_ps *ps) {
    memset(wt, 0, sizeof *wt);
    wt->ps = ps;
    ck_assert_int_eq(pthread_create(&wt->thread, NULL, wait_main, wt), 0);
}

static void waiter_stop(waiter *wt) {
    wt->stop = 1;
    pthread_join(wt->thread, NULL); /* the loop polls the flag every 50 ms */
    ck_assert_int_eq(wt->rc, DT_ECANCELLED);
}

/* ---- the model ------------------------------------------------------------ */

static void spec(dt_tensor *t, const char *name, int ndim, int64_t d0, int64_t d1) {
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = DT_DTYPE_F32;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    ck_assert_int_eq(dt_tensor_check_spec(t, NULL), 0);
}

/* vars (or grads): emb (7, 5), b (5). */
static void model_init(dt_tensors *ts) {
    dt_tensor specs[2];
    spec(&specs[0], "emb", 2, ROWS, COLS);
    spec(&specs[1], "b", 1, NB, 0);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_tensors_init(ts, specs, 2, &err) == 0, "%s", err.msg);
}

/* Slots "<var>/<slot>" shaped like each variable. */
static void slots_init(dt_tensors *ts, const dt_optim_config *optim) {
    dt_tensor specs[2 * DT_OPTIM_MAX_SLOTS];
    int n = 0;
    for (int s = 0; s < dt_optim_num_slots(optim); s++) {
        char name[64];
        snprintf(name, sizeof name, "emb/%s", dt_optim_slot_name(optim, s));
        spec(&specs[n++], name, 2, ROWS, COLS);
        snprintf(name, sizeof name, "b/%s", dt_optim_slot_name(optim, s));
        spec(&specs[n++], name, 1, NB, 0);
    }
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_tensors_init(ts, specs, n, &err) == 0, "%s", err.msg);
}

static float *emb_of(const dt_tensors *ts) {
    return ts->items[0].data;
}
static float *bias_of(const dt_tensors *ts) {
    return ts->items[1].data;
}

/* Initial values: quarters in [-4.25, 4.5]. */
static void fill_initial(dt_tensors *vars) {
    for (int i = 0; i < NE; i++)
        emb_of(vars)[i] = (float)(i - 17) * 0.25f;
    for (int i = 0; i < NB; i++)
        bias_of(vars)[i] = (float)(2 * i - 3) * 0.5f;
}

/* Gradient number k of worker `who`: eighths in [-0.625, 0.625]. */
static void fill_grad(dt_tensors *g, int who, int k) {
    for (int i = 0; i < NE; i++)
        emb_of(g)[i] = (float)((i * 7 + k * 3 + who * 5) % 11 - 5) * 0.125f;
    for (int i = 0; i < NB; i++)
        bias_of(g)[i] = (float)((i * 5 + k + who * 2) % 7 - 3) * 0.125f;
}

static void fill(dt_tensors *ts, float value) {
    for (int t = 0; t < ts->count; t++) {
        float *x = ts->items[t].data;
        for (int64_t i = 0; i < dt_tensor_numel(&ts->items[t]); i++)
            x[i] = value;
    }
}

/* want -= lr * g, in float as ApplyGradientDescent does. */
static void sgd_step(dt_tensors *want, const dt_tensors *g, float lr) {
    for (int t = 0; t < want->count; t++) {
        float *w = want->items[t].data;
        const float *d = g->items[t].data;
        for (int64_t i = 0; i < dt_tensor_numel(&want->items[t]); i++)
            w[i] -= lr * d[i];
    }
}

/* The ps's mean of gradients: a zeroed sum, each added in arrival order,
 * times 1/count. */
static void mean_of(dt_tensors *out, const dt_tensors *const *gs, int n) {
    fill(out, 0);
    for (int k = 0; k < n; k++)
        for (int t = 0; t < out->count; t++) {
            float *s = out->items[t].data;
            const float *d = gs[k]->items[t].data;
            for (int64_t i = 0; i < dt_tensor_numel(&out->items[t]); i++)
                s[i] += d[i];
        }
    float scale = 1.0f / (float)n;
    for (int t = 0; t < out->count; t++) {
        float *s = out->items[t].data;
        for (int64_t i = 0; i < dt_tensor_numel(&out->items[t]); i++)
            s[i] *= scale;
    }
}

/* Bit-identical sets (same layout assumed). */
static void assert_same(const dt_tensors *got, const dt_tensors *want, const char *what) {
    ck_assert_int_eq(got->count, want->count);
    for (int t = 0; t < got->count; t++) {
        const float *a = got->items[t].data, *b = want->items[t].data;
        for (int64_t i = 0; i < dt_tensor_numel(&got->items[t]); i++)
            ck_assert_msg(memcmp(&a[i], &b[i], sizeof(float)) == 0,
                          "%s: %s[%lld] = %.9g, want %.9g", what, got->items[t].name, (long long)i,
                          (double)a[i], (double)b[i]);
    }
}

static void sgd(dt_optim_config *o, double lr) {
    dt_optim_defaults(o);
    o->kind = DT_OPTIM_SGD;
    o->learning_rate = lr;
}

static dt_ps_client *client_new(world *w, int worker, const dt_tensors *layout, int64_t min_bytes) {
    dt_ps_client_params p = {.cluster = &w->cluster,
                             .worker = worker,
                             .timeout_ms = CALL_TIMEOUT_MS,
                             .placement = {DT_PLACE_GREEDY, min_bytes}};
    dt_ps_client *c = NULL;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_ps_client_new(&p, layout, &c, &err) == 0, "client: %s", err.msg);
    return c;
}

typedef struct {
    const dt_tensors *vars;
    const dt_tensors *slots;
    dt_optim_config optim;
    dt_lr_schedule schedule;
    dt_consistency consistency;
    int64_t global_step;
    int64_t max_steps;
} create_args;

static void create_args_init(create_args *a, const dt_tensors *vars) {
    memset(a, 0, sizeof *a);
    a->vars = vars;
    sgd(&a->optim, LR);
    a->max_steps = 1000;
    a->consistency.mode = DT_MODE_ASYNC;
}

static int create(dt_ps_client *c, const create_args *a, dt_err *err) {
    dt_ps_model m;
    memset(&m, 0, sizeof m);
    m.vars = a->vars;
    m.slots = a->slots;
    m.global_step = a->global_step;
    m.max_steps = a->max_steps;
    m.optim = a->optim;
    m.schedule = a->schedule;
    m.consistency = a->consistency;
    m.model = "consistency test";
    return dt_ps_client_create(c, &m, NULL, err);
}

static void create_ok(dt_ps_client *c, const create_args *a) {
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(create(c, a, &err) == 0, "create: %s", err.msg);
}

static dt_ps_reply pull_ok(dt_ps_client *c, dt_tensors *vars, dt_tensors *slots, int64_t min_step) {
    dt_ps_reply r;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_ps_client_pull(c, vars, slots, min_step, &r, &err) == 0, "pull: %s", err.msg);
    return r;
}

static dt_ps_reply push_ok(dt_ps_client *c, const dt_tensors *grads, int64_t step) {
    dt_ps_reply r;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_ps_client_push(c, grads, step, &r, &err) == 0, "push: %s", err.msg);
    return r;
}

static dt_msg_status_resp status_ok(dt_ps_client *c, int ps) {
    dt_msg_status_resp st;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_ps_client_status(c, ps, &st, &err) == 0, "status: %s", err.msg);
    return st;
}

/* ---- split -------------------------------------------------------------- */

/* emb cut in 3 slices on 3 ps: created values come back bit for bit, a push
 * updates every slice exactly, and each ps holds only its slices. */
START_TEST(test_split_exact) {
    world w;
    world_start(&w, 3, 2);
    dt_tensors vars, got, grads, want;
    model_init(&vars);
    model_init(&got);
    model_init(&grads);
    model_init(&want);
    fill_initial(&vars);
    dt_ps_client *chief = client_new(&w, 0, &vars, SPLIT_BYTES);
    dt_ps_client *worker = client_new(&w, 1, &vars, SPLIT_BYTES);

    /* emb/part_0..2 (3, 2, 2 rows) each on its own ps, b whole. */
    ck_assert_int_eq(dt_ps_client_num_units(chief), 4);
    int64_t bytes_on[MAX_PS] = {0};
    int units_on[MAX_PS] = {0}, emb_on[MAX_PS] = {0};
    for (int i = 0; i < 4; i++) {
        dt_ps_unit u;
        dt_ps_client_unit(chief, i, &u);
        bytes_on[u.ps] += (int64_t)u.nbytes;
        units_on[u.ps]++;
        if (u.var == 0) emb_on[u.ps]++;
    }
    for (int p = 0; p < 3; p++)
        ck_assert_int_eq(emb_on[p], 1);

    create_args a;
    create_args_init(&a, &vars);
    create_ok(chief, &a);
    for (int p = 0; p < 3; p++) {
        dt_msg_status_resp st = status_ok(chief, p);
        ck_assert(st.ready);
        ck_assert_int_eq(st.num_variables, units_on[p]);
        ck_assert_int_eq(st.num_bytes, bytes_on[p]);
    }

    fill(&got, NAN);
    dt_ps_reply r = pull_ok(worker, &got, NULL, 0);
    ck_assert_int_eq(r.global_step, 0);
    assert_same(&got, &vars, "pulled after create");

    fill_grad(&grads, 1, 0);
    r = push_ok(worker, &grads, 0);
    ck_assert_int_eq(r.global_step, 1);
    ck_assert(!r.dropped && !r.done);
    for (int p = 0; p < 3; p++)
        ck_assert_int_eq(status_ok(chief, p).global_step, 1);
    memcpy(want.slab, vars.slab, vars.slab_bytes);
    sgd_step(&want, &grads, LR);
    fill(&got, NAN);
    pull_ok(chief, &got, NULL, 0);
    assert_same(&got, &want, "after one push");

    /* A role that cuts the model otherwise (emb whole) is told so, and its
     * tensors are left alone. */
    dt_ps_client *other = client_new(&w, 1, &vars, 0);
    fill(&got, 7);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_lt(dt_ps_client_pull(other, &got, NULL, 0, &r, &err), 0);
    ck_assert_msg(strstr(err.msg, "pull") && strstr(err.msg, "emb/part_"), "message: %s", err.msg);
    dt_ps_client_free(other);

    dt_ps_client_free(chief);
    dt_ps_client_free(worker);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&got);
    dt_tensors_deinit(&grads);
    dt_tensors_deinit(&want);
    world_stop(&w);
}
END_TEST

/* 3 ps and a model of 2 small variables: one ps holds no unit. TF leaves
 * such a ps idle; here Create, pull and push must still work. */
START_TEST(test_ps_without_units) {
    world w;
    world_start(&w, 3, 1);
    dt_tensors vars, got, grads;
    model_init(&vars);
    model_init(&got);
    model_init(&grads);
    fill_initial(&vars);
    dt_ps_client *c = client_new(&w, 0, &vars, 0);
    ck_assert_int_eq(dt_ps_client_num_units(c), 2);
    create_args a;
    create_args_init(&a, &vars);
    create_ok(c, &a);
    fill_grad(&grads, 0, 0);
    dt_ps_reply r = push_ok(c, &grads, 0);
    ck_assert_int_eq(r.global_step, 1);
    pull_ok(c, &got, NULL, 0);
    sgd_step(&vars, &grads, LR);
    assert_same(&got, &vars, "after one push");
    for (int p = 0; p < 3; p++)
        ck_assert_int_eq(status_ok(c, p).global_step, 1);
    dt_ps_client_free(c);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&got);
    dt_tensors_deinit(&grads);
    world_stop(&w);
}
END_TEST

/* ---- slots --------------------------------------------------------------- */

static void momentum(dt_optim_config *o) {
    sgd(o, LR);
    o->kind = DT_OPTIM_MOMENTUM;
    o->momentum = 0.5;
}

/* accum = mu*accum + g; w -= lr*accum (ApplyMomentum), in float. */
static void momentum_step(dt_tensors *vars, dt_tensors *slots, const dt_tensors *g) {
    for (int t = 0; t < vars->count; t++) {
        float *w = vars->items[t].data, *acc = slots->items[t].data;
        const float *d = g->items[t].data;
        for (int64_t i = 0; i < dt_tensor_numel(&vars->items[t]); i++) {
            acc[i] = 0.5f * acc[i] + d[i];
            w[i] -= LR * acc[i];
        }
    }
}

/* Slots given at Create come back from a pull and move with a push; what a
 * 2-ps cluster holds, pulled whole, carries over onto 3 ps and onto 1 ps
 * (sliced anew), which then follow the same trajectory bit for bit. */
START_TEST(test_slots_round_trip) {
    dt_optim_config opt;
    momentum(&opt);
    /* ref_*: the expected state; cur_*: what the 2-ps cluster holds. */
    dt_tensors ref_v, ref_s, cur_v, cur_s, got_v, got_s, grads;
    model_init(&ref_v);
    model_init(&cur_v);
    model_init(&got_v);
    model_init(&grads);
    slots_init(&ref_s, &opt);
    slots_init(&cur_s, &opt);
    slots_init(&got_s, &opt);
    ck_assert_int_eq(ref_s.count, 2);
    ck_assert_str_eq(ref_s.items[0].name, "emb/momentum");
    ck_assert_str_eq(ref_s.items[1].name, "b/momentum");
    fill_initial(&ref_v);
    for (int i = 0; i < NE; i++)
        emb_of(&ref_s)[i] = (float)(i % 9 - 4) * 0.0625f;
    for (int i = 0; i < NB; i++)
        bias_of(&ref_s)[i] = (float)(i + 1) * 0.25f;

    world w2;
    world_start(&w2, 2, 1);
    dt_ps_client *c2 = client_new(&w2, 0, &ref_v, SPLIT_BYTES);
    ck_assert_int_eq(dt_ps_client_num_units(c2), 3); /* emb in 2 slices, b */
    create_args a;
    create_args_init(&a, &ref_v);
    a.optim = opt;
    a.slots = &ref_s;
    a.global_step = 5;
    create_ok(c2, &a);
    fill(&cur_v, NAN);
    fill(&cur_s, NAN);
    dt_ps_reply r = pull_ok(c2, &cur_v, &cur_s, 0);
    ck_assert_int_eq(r.global_step, 5);
    assert_same(&cur_v, &ref_v, "vars on 2 ps");
    assert_same(&cur_s, &ref_s, "slots on 2 ps");
    fill_grad(&grads, 0, 1);
    push_ok(c2, &grads, 5);
    momentum_step(&ref_v, &ref_s, &grads);
    r = pull_ok(c2, &cur_v, &cur_s, 0);
    ck_assert_int_eq(r.global_step, 6);
    assert_same(&cur_v, &ref_v, "vars after a momentum step");
    assert_same(&cur_s, &ref_s, "slots after a momentum step");

    static const int counts[] = {3, 1};
    for (int k = 0; k < 2; k++) {
        /* "Restore" what the 2-ps cluster holds onto another ps count. */
        r = pull_ok(c2, &cur_v, &cur_s, 0);
        world w;
        world_start(&w, counts[k], 1);
        dt_ps_client *c = client_new(&w, 0, &ref_v, SPLIT_BYTES);
        ck_assert_int_eq(dt_ps_client_num_units(c), counts[k] == 3 ? 4 : 2);
        create_args b = a;
        b.vars = &cur_v;
        b.slots = &cur_s;
        b.global_step = r.global_step;
        create_ok(c, &b);
        fill(&got_v, NAN);
        fill(&got_s, NAN);
        dt_ps_reply r2 = pull_ok(c, &got_v, &got_s, 0);
        ck_assert_int_eq(r2.global_step, r.global_step);
        assert_same(&got_v, &ref_v, "vars restored onto another ps count");
        assert_same(&got_s, &ref_s, "slots restored onto another ps count");

        /* The same gradient on both clusters: the same result. */
        fill_grad(&grads, 0, 2 + k);
        ck_assert_int_eq(push_ok(c, &grads, r.global_step).global_step, r.global_step + 1);
        ck_assert_int_eq(push_ok(c2, &grads, r.global_step).global_step, r.global_step + 1);
        momentum_step(&ref_v, &ref_s, &grads);
        pull_ok(c, &got_v, &got_s, 0);
        assert_same(&got_v, &ref_v, "restored cluster's vars after a push");
        assert_same(&got_s, &ref_s, "restored cluster's slots after a push");
        pull_ok(c2, &got_v, &got_s, 0);
        assert_same(&got_v, &ref_v, "2-ps vars after a push");
        assert_same(&got_s, &ref_s, "2-ps slots after a push");
        dt_ps_client_free(c);
        world_stop(&w);
    }

    /* Slots that do not cover every variable are refused by name. */
    world w;
    world_start(&w, 2, 1);
    dt_ps_client *c = client_new(&w, 0, &ref_v, SPLIT_BYTES);
    dt_tensors partial;
    dt_tensor one;
    spec(&one, "emb/momentum", 2, ROWS, COLS);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_tensors_init(&partial, &one, 1, &err), 0);
    create_args bad = a;
    bad.slots = &partial;
    ck_assert_int_eq(create(c, &bad, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "b/momentum"), "message: %s", err.msg);
    dt_tensors_deinit(&partial);
    dt_ps_client_free(c);
    world_stop(&w);

    dt_ps_client_free(c2);
    world_stop(&w2);
    dt_tensors_deinit(&ref_v);
    dt_tensors_deinit(&ref_s);
    dt_tensors_deinit(&cur_v);
    dt_tensors_deinit(&cur_s);
    dt_tensors_deinit(&got_v);
    dt_tensors_deinit(&got_s);
    dt_tensors_deinit(&grads);
}
END_TEST

/* ---- sync ----------------------------------------------------------------- */

static void sync_mode(create_args *a, int replicas, int total, int timeout_ms) {
    a->consistency.mode = DT_MODE_SYNC;
    a->consistency.replicas_to_aggregate = replicas;
    a->consistency.total_num_replicas = total;
    a->consistency.timeout_ms = timeout_ms;
}

/* One worker, replicas_to_aggregate 1: plain SGD, step by step. */
START_TEST(test_sync_one_worker) {
    world w;
    world_start(&w, 2, 1);
    dt_tensors vars, want, grads;
    model_init(&vars);
    model_init(&want);
    model_init(&grads);
    fill_initial(&vars);
    memcpy(want.slab, vars.slab, vars.slab_bytes);
    dt_ps_client *c = client_new(&w, 0, &vars, SPLIT_BYTES);
    create_args a;
    create_args_init(&a, &vars);
    sync_mode(&a, 1, 1, 60000);
    create_ok(c, &a);
    for (int step = 0; step < 6; step++) {
        fill(&vars, NAN);
        dt_ps_reply r = pull_ok(c, &vars, NULL, step);
        ck_assert_msg(!r.wait, "step %d: pull waits", step);
        ck_assert_int_eq(r.global_step, step);
        assert_same(&vars, &want, "sync, 1 worker");
        fill_grad(&grads, 0, step);
        r = push_ok(c, &grads, step);
        ck_assert(!r.dropped);
        ck_assert_int_eq(r.global_step, step + 1);
        sgd_step(&want, &grads, LR);
    }
    pull_ok(c, &vars, NULL, 6);
    assert_same(&vars, &want, "sync, 1 worker, at the end");
    dt_msg_status_resp st = status_ok(c, 1);
    ck_assert_str_eq(st.mode, "sync");
    ck_assert_int_eq(st.pushes_applied, 6);
    ck_assert_int_eq(st.pushes_dropped, 0);
    ck_assert_int_eq(st.staleness_counts[0], 6);
    dt_ps_client_free(c);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&want);
    dt_tensors_deinit(&grads);
    world_stop(&w);
}
END_TEST

/* Two workers, aggregate 2, on 2 ps with emb split: one update per pair,
 * the mean of the two; the first worker waits for the second. */
START_TEST(test_sync_two_workers_mean) {
    world w;
    world_start(&w, 2, 2);
    dt_tensors vars, want, ga, gb, mean, sentinel;
    model_init(&vars);
    model_init(&want);
    model_init(&ga);
    model_init(&gb);
    model_init(&mean);
    model_init(&sentinel);
    fill_initial(&vars);
    memcpy(want.slab, vars.slab, vars.slab_bytes);
    dt_ps_client *a_c = client_new(&w, 0, &vars, SPLIT_BYTES);
    dt_ps_client *b_c = client_new(&w, 1, &vars, SPLIT_BYTES);
    create_args a;
    create_args_init(&a, &vars);
    sync_mode(&a, 2, 2, 60000);
    create_ok(a_c, &a);
    for (int step = 0; step < 4; step++) {
        dt_ps_reply r = pull_ok(a_c, &vars, NULL, step);
        ck_assert(!r.wait);
        assert_same(&vars, &want, "before the step");
        fill_grad(&ga, 0, step);
        fill_grad(&gb, 1, step);
        r = push_ok(a_c, &ga, step);
        ck_assert(!r.dropped);
        ck_assert_int_eq(r.global_step, step); /* held until the pair is complete */
        /* The next step is not there yet: "wait", nothing copied. */
        fill(&sentinel, 12345.0f);
        r = pull_ok(a_c, &sentinel, NULL, step + 1);
        ck_assert_msg(r.wait, "step %d: pull for the next step does not wait", step);
        ck_assert_int_eq(r.global_step, step);
        for (int i = 0; i < NE; i++)
            ck_assert(emb_of(&sentinel)[i] == 12345.0f);
        pull_ok(b_c, &vars, NULL, 0);
        assert_same(&vars, &want, "one gradient of two is not applied");
        for (int p = 0; p < 2; p++)
            ck_assert_int_eq(status_ok(a_c, p).global_step, step);

        r = push_ok(b_c, &gb, step);
        ck_assert(!r.dropped);
        ck_assert_int_eq(r.global_step, step + 1);
        const dt_tensors *both[2] = {&ga, &gb};
        mean_of(&mean, both, 2);
        sgd_step(&want, &mean, LR);
        r = pull_ok(a_c, &vars, NULL, step + 1);
        ck_assert(!r.wait);
        ck_assert_int_eq(r.global_step, step + 1);
        assert_same(&vars, &want, "the mean of the pair");
    }
    for (int p = 0; p < 2; p++) {
        dt_msg_status_resp st = status_ok(a_c, p);
        ck_assert_int_eq(st.global_step, 4);
        ck_assert_int_eq(st.pushes_applied, 8);
        ck_assert_int_eq(st.pushes_dropped, 0);
    }
    dt_ps_client_free(a_c);
    dt_ps_client_free(b_c);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&want);
    dt_tensors_deinit(&ga);
    dt_tensors_deinit(&gb);
    dt_tensors_deinit(&mean);
    dt_tensors_deinit(&sentinel);
    world_stop(&w);
}
END_TEST

/* Stale, duplicate and future gradients are dropped, said so in the reply,
 * counted in Status, and change nothing. */
START_TEST(test_sync_drops) {
    world w;
    world_start(&w, 1, 2);
    dt_tensors vars, want, ga, gb, other, mean;
    model_init(&vars);
    model_init(&want);
    model_init(&ga);
    model_init(&gb);
    model_init(&other);
    model_init(&mean);
    fill_initial(&vars);
    memcpy(want.slab, vars.slab, vars.slab_bytes);
    dt_ps_client *a_c = client_new(&w, 0, &vars, 0);
    dt_ps_client *b_c = client_new(&w, 1, &vars, 0);
    create_args a;
    create_args_init(&a, &vars);
    sync_mode(&a, 2, 2, 60000);
    create_ok(a_c, &a);

    fill_grad(&ga, 0, 0);
    fill_grad(&gb, 1, 0);
    ck_assert(!push_ok(a_c, &ga, 0).dropped);
    ck_assert_int_eq(push_ok(b_c, &gb, 0).global_step, 1);
    const dt_tensors *pair[2] = {&ga, &gb};
    mean_of(&mean, pair, 2);
    sgd_step(&want, &mean, LR);

    /* Stale: computed for step 0, which is over. */
    fill_grad(&other, 0, 9);
    dt_ps_reply r = push_ok(a_c, &other, 0);
    ck_assert(r.dropped);
    ck_assert_int_eq(r.global_step, 1);
    ck_assert_int_eq(status_ok(a_c, 0).pushes_dropped, 1);

    /* Duplicate: worker 0 already gave step 1 its gradient. */
    fill_grad(&ga, 0, 1);
    ck_assert(!push_ok(a_c, &ga, 1).dropped);
    r = push_ok(a_c, &other, 1);
    ck_assert(r.dropped);
    ck_assert_int_eq(status_ok(a_c, 0).pushes_dropped, 2);
    /* Future: no one can have pulled step 5. */
    r = push_ok(b_c, &other, 5);
    ck_assert(r.dropped);
    ck_assert_int_eq(r.global_step, 1);
    pull_ok(b_c, &vars, NULL, 0);
    assert_same(&vars, &want, "after dropped gradients");

    /* The step completes with worker 0's first gradient and worker 1's. */
    fill_grad(&gb, 1, 1);
    r = push_ok(b_c, &gb, 1);
    ck_assert(!r.dropped);
    ck_assert_int_eq(r.global_step, 2);
    mean_of(&mean, pair, 2);
    sgd_step(&want, &mean, LR);
    pull_ok(b_c, &vars, NULL, 2);
    assert_same(&vars, &want, "step 1 without the duplicate");
    dt_msg_status_resp st = status_ok(a_c, 0);
    ck_assert_int_eq(st.pushes_dropped, 3);
    ck_assert_int_eq(st.pushes_applied, 4);
    ck_assert_int_eq(st.pushes_rejected, 0);
    ck_assert_int_eq(st.global_step, 2);
    dt_ps_client_free(a_c);
    dt_ps_client_free(b_c);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&want);
    dt_tensors_deinit(&ga);
    dt_tensors_deinit(&gb);
    dt_tensors_deinit(&other);
    dt_tensors_deinit(&mean);
    world_stop(&w);
}
END_TEST

/* One of two workers silent: the ps holds the one gradient it has, and
 * after timeout_ms (its wait loop) applies it as the step; a late one is
 * stale. */
START_TEST(test_sync_partial_step) {
    enum { TIMEOUT_MS = 500 };
    world w;
    world_start(&w, 1, 2);
    dt_tensors vars, want, ga, gb;
    model_init(&vars);
    model_init(&want);
    model_init(&ga);
    model_init(&gb);
    fill_initial(&vars);
    memcpy(want.slab, vars.slab, vars.slab_bytes);
    dt_ps_client *a_c = client_new(&w, 0, &vars, 0);
    dt_ps_client *b_c = client_new(&w, 1, &vars, 0);
    create_args a;
    create_args_init(&a, &vars);
    sync_mode(&a, 2, 2, TIMEOUT_MS);
    create_ok(a_c, &a);

    fill_grad(&ga, 0, 0);
    ck_assert(!push_ok(a_c, &ga, 0).dropped);
    /* Held: one gradient of two is no step. The wait loop, which applies
     * the partial step once the timeout is up, is not running yet, so this
     * holds on a machine of any speed. */
    dt_ps_reply held = pull_ok(a_c, &vars, NULL, 1);
    ck_assert_msg(held.wait && held.global_step == 0,
                  "one gradient of two made a step at once (wait %d, step %lld)", held.wait,
                  (long long)held.global_step);
    waiter wt;
    waiter_start(&wt, w.ps[0]);
    int64_t step = 0;
    long long deadline = dt_test_now_ms() + 10000;
    while (step == 0 && dt_test_now_ms() < deadline) {
        dt_ps_reply r = pull_ok(a_c, &vars, NULL, 1);
        step = r.global_step;
        if (r.wait) dt_test_sleep_ms(10); /* the poll interval of a bounded wait */
    }
    ck_assert_msg(step == 1, "no partial step 10 s after a %d ms timeout", TIMEOUT_MS);
    sgd_step(&want, &ga, LR); /* the mean of one gradient is that gradient */
    assert_same(&vars, &want, "partial step");

    fill_grad(&gb, 1, 0);
    dt_ps_reply r = push_ok(b_c, &gb, 0);
    ck_assert(r.dropped);
    ck_assert_int_eq(r.global_step, 1);
    dt_msg_status_resp st = status_ok(a_c, 0);
    ck_assert_int_eq(st.pushes_dropped, 1);
    ck_assert_int_eq(st.pushes_applied, 1);

    /* Both on time again: the step completes at once, on the second push
     * (its reply already says step 2), not after a timeout. */
    fill_grad(&ga, 0, 1);
    fill_grad(&gb, 1, 1);
    ck_assert(!push_ok(a_c, &ga, 1).dropped);
    ck_assert_int_eq(push_ok(b_c, &gb, 1).global_step, 2);
    waiter_stop(&wt);
    dt_ps_client_free(a_c);
    dt_ps_client_free(b_c);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&want);
    dt_tensors_deinit(&ga);
    dt_tensors_deinit(&gb);
    world_stop(&w);
}
END_TEST

/* Sends msg (a request of `type`) straight to ps task p's handler, as an
 * anonymous caller; *reply holds the answer on success (caller releases). */
static int call_ps(world *w, int p, dt_msg_type type, const void *msg, dt_rpc_buf *reply,
                   dt_err *err) {
    int64_t n = dt_codec_size(type, msg, err);
    ck_assert_msg(n >= 0, "%s", err->msg);
    dt_rpc_buf request = {0};
    ck_assert_int_eq(dt_rpc_buf_alloc(&request, (size_t)n, err), 0);
    ck_assert_int_eq(dt_codec_encode(type, msg, request.data, request.len, err), 0);
    dt_rpc_peer peer = {.role = DT_PEER_ANY, .task = -1, .name = "anonymous"};
    int rc = dt_ps_call(w->ps[p], dt_codec_method(type), &peer, &request, reply, err);
    dt_rpc_buf_release(&request);
    return rc;
}

/* The part of a push that goes to ps task `p` (units placed as client c
 * places them), sent straight to its handler as worker `worker`: a worker
 * caught between its pushes to two tasks. */
static int send_part(world *w, dt_ps_client *c, int p, int worker, const dt_tensors *grads,
                     int64_t step, dt_msg_push_resp *resp, dt_err *err) {
    dt_tensor views[8];
    dt_msg_push_req req;
    memset(&req, 0, sizeof req);
    req.worker = worker;
    req.step = step;
    for (int i = 0; i < dt_ps_client_num_units(c); i++) {
        dt_ps_unit u;
        dt_ps_client_unit(c, i, &u);
        if (u.ps != p) continue;
        ck_assert_int_lt(req.out.count, 8);
        const dt_tensor *g = &grads->items[u.var];
        dt_tensor *v = &views[req.out.count++];
        *v = *g;
        snprintf(v->name, sizeof v->name, "%s", u.name);
        v->shape[0] = u.rows;
        v->nbytes = u.nbytes;
        v->data = (char *)g->data + (size_t)u.row_begin * (g->nbytes / (size_t)g->shape[0]);
    }
    req.out.items = views;
    dt_rpc_buf reply = {0};
    memset(resp, 0, sizeof *resp);
    int rc = call_ps(w, p, DT_MSG_PUSH_REQ, &req, &reply, err);
    if (rc == 0)
        ck_assert_int_eq(dt_codec_decode(DT_MSG_PUSH_RESP, reply.data, reply.len, resp, err), 0);
    dt_rpc_buf_release(&reply);
    return rc;
}

/* send_part that must succeed. */
static dt_msg_push_resp push_part(world *w, dt_ps_client *c, int p, int worker,
                                  const dt_tensors *grads, int64_t step) {
    dt_err err;
    dt_err_clear(&err);
    dt_msg_push_resp resp;
    int rc = send_part(w, c, p, worker, grads, step, &resp, &err);
    ck_assert_msg(rc == 0, "push to ps %d: %s", p, err.msg);
    return resp;
}

/* Two workers, 2 ps, emb split across both. Worker 1 hands its gradient to
 * ps:1 and then stalls past the timeout before its push to ps:0: ps:0
 * applies step 0 with worker 0's gradient alone, and ps:1, told so, applies
 * exactly that too (on its own it had both gradients and would have taken
 * their mean). The late half is dropped on both; the counters and the
 * digests agree; then a full step is the mean on every shard. */
START_TEST(test_sync_one_decision_across_shards) {
    enum { TIMEOUT_MS = 300 };
    world w;
    world_start(&w, 2, 2);
    dt_tensors vars, want, ga, gb, mean;
    model_init(&vars);
    model_init(&want);
    model_init(&ga);
    model_init(&gb);
    model_init(&mean);
    fill_initial(&vars);
    memcpy(want.slab, vars.slab, vars.slab_bytes);
    dt_ps_client *a_c = client_new(&w, 0, &vars, SPLIT_BYTES);
    dt_ps_client *b_c = client_new(&w, 1, &vars, SPLIT_BYTES);
    int on_ps1 = 0;
    for (int i = 0; i < dt_ps_client_num_units(a_c); i++) {
        dt_ps_unit u;
        dt_ps_client_unit(a_c, i, &u);
        on_ps1 += u.ps == 1;
    }
    ck_assert_msg(on_ps1 > 0, "no variable on ps:1: the test would show nothing");
    create_args a;
    create_args_init(&a, &vars);
    sync_mode(&a, 2, 2, TIMEOUT_MS);
    create_ok(a_c, &a);
    waiter wt[2];
    for (int p = 0; p < 2; p++)
        waiter_start(&wt[p], w.ps[p]);
    pull_ok(b_c, &vars, NULL, 0);
    pull_ok(a_c, &vars, NULL, 0);

    fill_grad(&ga, 0, 0);
    fill_grad(&gb, 1, 0);
    ck_assert(!push_part(&w, b_c, 1, 1, &gb, 0).dropped); /* held by ps:1 */
    ck_assert(!push_ok(a_c, &ga, 0).dropped);
    long long t0 = dt_test_now_ms();
    while (status_ok(a_c, 0).global_step == 0 && dt_test_now_ms() - t0 < 10000)
        dt_test_sleep_ms(10);
    ck_assert_msg(status_ok(a_c, 0).global_step == 1, "ps:0 applied no partial step in 10 s");
    ck_assert_msg(push_part(&w, b_c, 0, 1, &gb, 0).dropped, "the late half was used by ps:0");
    dt_ps_reply r = pull_ok(a_c, &vars, NULL, 1);
    ck_assert(!r.wait);
    sgd_step(&want, &ga, LR);
    assert_same(&vars, &want, "every shard of step 0: worker 0's gradient alone");
    dt_msg_status_resp st[2];
    for (int p = 0; p < 2; p++) {
        st[p] = status_ok(a_c, p);
        ck_assert_int_eq(st[p].global_step, 1);
        ck_assert_int_eq(st[p].pushes_applied, 1);
        ck_assert_int_eq(st[p].pushes_dropped, 1);
    }
    ck_assert_msg(st[0].sync_digest != 0 && st[0].sync_digest == st[1].sync_digest,
                  "digests differ: %016llx %016llx", (unsigned long long)st[0].sync_digest,
                  (unsigned long long)st[1].sync_digest);

    /* Both on time: the mean, on every shard. */
    pull_ok(b_c, &vars, NULL, 1);
    fill_grad(&ga, 0, 1);
    fill_grad(&gb, 1, 1);
    ck_assert(!push_ok(a_c, &ga, 1).dropped);
    ck_assert_int_eq(push_ok(b_c, &gb, 1).global_step, 2);
    const dt_tensors *both[2] = {&ga, &gb};
    mean_of(&mean, both, 2);
    sgd_step(&want, &mean, LR);
    r = pull_ok(b_c, &vars, NULL, 2);
    ck_assert(!r.wait);
    assert_same(&vars, &want, "step 1: the mean of both");
    for (int p = 0; p < 2; p++) {
        st[p] = status_ok(a_c, p);
        ck_assert_int_eq(st[p].global_step, 2);
        ck_assert_int_eq(st[p].pushes_applied, 3);
    }
    ck_assert_uint_eq(st[0].sync_digest, st[1].sync_digest);

    /* A decision naming more workers than the cluster has is refused. */
    dt_msg_pull_req bad;
    memset(&bad, 0, sizeof bad);
    bad.worker = 1;
    bad.decision.has = true;
    bad.decision.step = 2;
    bad.decision.members_len = 9;
    dt_err err;
    dt_err_clear(&err);
    dt_rpc_buf reply = {0};
    ck_assert_int_eq(call_ps(&w, 1, DT_MSG_PULL_REQ, &bad, &reply, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "9 member bytes for 2 workers"), "%s", err.msg);
    ck_assert_int_eq(status_ok(a_c, 1).global_step, 2);

    /* So is a gradient from a worker the cluster does not have, on either
     * task, and it changes nothing. */
    for (int p = 0; p < 2; p++) {
        dt_msg_push_resp resp;
        dt_err_clear(&err);
        ck_assert_int_eq(send_part(&w, b_c, p, 5, &gb, 2, &resp, &err), DT_EINVAL);
        ck_assert_msg(strstr(err.msg, "worker 5 is not in the cluster"), "%s", err.msg);
        st[p] = status_ok(a_c, p);
        ck_assert_int_eq(st[p].global_step, 2);
        ck_assert_int_eq(st[p].pushes_applied, 3);
    }
    pull_ok(a_c, &vars, NULL, 2);
    assert_same(&vars, &want, "after the strangers' pushes");

    for (int p = 0; p < 2; p++)
        waiter_stop(&wt[p]);
    dt_ps_client_free(a_c);
    dt_ps_client_free(b_c);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&want);
    dt_tensors_deinit(&ga);
    dt_tensors_deinit(&gb);
    dt_tensors_deinit(&mean);
    world_stop(&w);
}
END_TEST

/* ---- bounded staleness ---------------------------------------------------- */

static void bounded_mode(create_args *a, int staleness, int timeout_ms) {
    a->consistency.mode = DT_MODE_BOUNDED;
    a->consistency.staleness = staleness;
    a->consistency.timeout_ms = timeout_ms;
}

/* Both workers under way; then worker 0 pushes on without worker 1 until
 * its pull answers wait (nothing copied). The gate admits exactly
 * `staleness` steps of lead (the ps's max_lead), stays closed while worker 1
 * is silent, and each push of worker 1 lets worker 0 take one more step.
 * The chief's snapshot (with slots) never waits. */
START_TEST(test_bounded_gate) {
    enum { STALENESS = 2 };
    world w;
    world_start(&w, 2, 2);
    dt_tensors vars, grads, sentinel, no_slots;
    model_init(&vars);
    model_init(&grads);
    model_init(&sentinel);
    memset(&no_slots, 0, sizeof no_slots); /* sgd: no slots, but asks like the chief */
    fill_initial(&vars);
    dt_ps_client *a_c = client_new(&w, 0, &vars, SPLIT_BYTES);
    dt_ps_client *b_c = client_new(&w, 1, &vars, SPLIT_BYTES);
    create_args a;
    create_args_init(&a, &vars);
    bounded_mode(&a, STALENESS, 60000);
    create_ok(a_c, &a);
    fill_grad(&grads, 0, 0);

    /* One step each: both are live. */
    ck_assert(!pull_ok(b_c, &vars, NULL, 0).wait);
    push_ok(b_c, &grads, 0);
    ck_assert(!pull_ok(a_c, &vars, NULL, 0).wait);
    push_ok(a_c, &grads, 1);
    int64_t pushes = 2;
    /* Worker 0 runs ahead until the gate closes: staleness steps from level
     * (one more if its first step counted as level with worker 1's). */
    int ahead = 0;
    dt_ps_reply r;
    for (;;) {
        fill(&sentinel, 12345.0f);
        r = pull_ok(a_c, &sentinel, NULL, 0);
        if (r.wait) {
            for (int i = 0; i < NE; i++)
                ck_assert(emb_of(&sentinel)[i] == 12345.0f);
            for (int i = 0; i < NB; i++)
                ck_assert(bias_of(&sentinel)[i] == 12345.0f);
            break;
        }
        ck_assert_msg(ahead <= STALENESS + 1, "worker 0 ran %d steps ahead, staleness %d", ahead,
                      STALENESS);
        push_ok(a_c, &grads, r.global_step);
        pushes++;
        ahead++;
    }
    ck_assert_msg(ahead >= STALENESS, "the gate closed after %d steps ahead, staleness %d", ahead,
                  STALENESS);
    for (int p = 0; p < 2; p++)
        ck_assert_int_eq(status_ok(a_c, p).max_lead, STALENESS);
    /* It stays closed while worker 1 is silent (well within the timeout). */
    for (int k = 0; k < 3; k++)
        ck_assert(pull_ok(a_c, &vars, NULL, 0).wait);
    /* The chief's snapshot is not a training step: it never waits. */
    r = pull_ok(a_c, &vars, &no_slots, 0);
    ck_assert(!r.wait);
    ck_assert_int_eq(r.global_step, pushes);

    /* Each step of worker 1 lets worker 0 take exactly one. */
    for (int k = 0; k < 3; k++) {
        push_ok(b_c, &grads, r.global_step);
        pushes++;
        r = pull_ok(a_c, &vars, NULL, 0);
        ck_assert_msg(!r.wait, "worker 1 took a step, but worker 0 still waits");
        push_ok(a_c, &grads, r.global_step);
        pushes++;
        r = pull_ok(a_c, &vars, NULL, 0);
        ck_assert_msg(r.wait, "worker 0 took two steps for worker 1's one");
    }
    for (int p = 0; p < 2; p++) {
        dt_msg_status_resp st = status_ok(a_c, p);
        ck_assert_str_eq(st.mode, "bounded");
        ck_assert_int_eq(st.global_step, pushes);
        ck_assert_int_eq(st.pushes_applied, pushes);
        ck_assert_msg(st.max_lead == STALENESS, "ps %d: max_lead %d, want %d", p, st.max_lead,
                      STALENESS);
    }
    dt_ps_client_free(a_c);
    dt_ps_client_free(b_c);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&grads);
    dt_tensors_deinit(&sentinel);
    world_stop(&w);
}
END_TEST

/* A worker silent for longer than the timeout is not waited for. The
 * timeout is long (3 s) against the few local calls before the first
 * check, so worker 0 is held then on any machine, ASan included. */
START_TEST(test_bounded_silent_worker) {
    enum { TIMEOUT_MS = 3000 };
    world w;
    world_start(&w, 1, 2);
    dt_tensors vars, grads;
    model_init(&vars);
    model_init(&grads);
    fill_initial(&vars);
    fill_grad(&grads, 0, 0);
    dt_ps_client *a_c = client_new(&w, 0, &vars, 0);
    dt_ps_client *b_c = client_new(&w, 1, &vars, 0);
    create_args a;
    create_args_init(&a, &vars);
    bounded_mode(&a, 0, TIMEOUT_MS);
    create_ok(a_c, &a);
    push_ok(b_c, &grads, 0);
    /* Staleness 0: worker 0 is held after at most two steps. */
    push_ok(a_c, &grads, 1);
    dt_ps_reply r = pull_ok(a_c, &vars, NULL, 0);
    for (int k = 0; k < 2 && !r.wait; k++) {
        push_ok(a_c, &grads, r.global_step);
        r = pull_ok(a_c, &vars, NULL, 0);
    }
    ck_assert_msg(r.wait, "ahead of a live worker with staleness 0, but not held");
    long long deadline = dt_test_now_ms() + 10000;
    while (r.wait && dt_test_now_ms() < deadline) {
        dt_test_sleep_ms(20);
        r = pull_ok(a_c, &vars, NULL, 0);
    }
    ck_assert_msg(!r.wait, "still waiting for a worker silent for 10 s (timeout %d ms)",
                  TIMEOUT_MS);
    /* Released because the ps found worker 1 silent past the timeout, by
     * its own clock (Status). */
    dt_msg_status_resp st = status_ok(a_c, 0);
    long long silent = -1;
    for (int k = 0; k < st.num_workers; k++)
        if (st.workers[k].worker == 1) silent = st.workers[k].last_push_ms;
    ck_assert_msg(silent >= TIMEOUT_MS,
                  "worker 0 released while the ps saw worker 1 silent for %lld ms only "
                  "(timeout %d ms)",
                  silent, TIMEOUT_MS);
    dt_ps_client_free(a_c);
    dt_ps_client_free(b_c);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&grads);
    world_stop(&w);
}
END_TEST

/* Worker 1 joins late (its first push comes after worker 0's tenth): it
 * must join level with the workers already running, not at clock 0. Else
 * worker 0 is held until worker 1 has redone the 10 - staleness steps it
 * missed, and the lead the ps records (10) breaks the bound it enforces. */
START_TEST(test_bounded_late_joiner) {
    enum { STALENESS = 2, EARLY = 10 };
    world w;
    world_start(&w, 1, 2);
    dt_tensors vars, grads;
    model_init(&vars);
    model_init(&grads);
    fill_initial(&vars);
    fill_grad(&grads, 0, 0);
    dt_ps_client *a_c = client_new(&w, 0, &vars, 0);
    dt_ps_client *b_c = client_new(&w, 1, &vars, 0);
    create_args a;
    create_args_init(&a, &vars);
    bounded_mode(&a, STALENESS, 60000);
    create_ok(a_c, &a);
    /* Alone, worker 0 is never held: no one else has started. */
    for (int k = 0; k < EARLY; k++) {
        dt_ps_reply r = pull_ok(a_c, &vars, NULL, 0);
        ck_assert_msg(!r.wait, "worker 0 alone held at clock %d", k);
        push_ok(a_c, &grads, r.global_step);
    }
    dt_ps_reply ra = pull_ok(a_c, &vars, NULL, 0); /* worker 0's next step begins */
    ck_assert(!ra.wait);
    dt_ps_reply rb = pull_ok(b_c, &vars, NULL, 0);
    ck_assert(!rb.wait);
    push_ok(b_c, &grads, rb.global_step); /* worker 1's first push */
    push_ok(a_c, &grads, ra.global_step); /* worker 0's step ends */
    ra = pull_ok(a_c, &vars, NULL, 0);
    dt_msg_status_resp st = status_ok(a_c, 0);
    ck_assert_msg(!ra.wait,
                  "worker 0 held after worker 1 joined late: it waits for worker 1 to redo the "
                  "steps it missed (max_lead %d)",
                  st.max_lead);
    ck_assert_msg(st.max_lead <= STALENESS, "max_lead %d > staleness %d after a late join",
                  st.max_lead, STALENESS);
    dt_ps_client_free(a_c);
    dt_ps_client_free(b_c);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&grads);
    world_stop(&w);
}
END_TEST

/* ---- learning-rate schedule ---------------------------------------------- */

/* piecewise, boundaries {2, 4}, values {0.5, 0.25, 0.125}: the update at
 * global step s (before it advances) uses 0.5 for s <= 2, 0.25 for
 * s in 3..4, then 0.125; in async mode and in sync mode alike. */
START_TEST(test_piecewise_schedule) {
    static const float lr_at[] = {0.5f, 0.5f, 0.5f, 0.25f, 0.25f, 0.125f, 0.125f};
    for (int mode = DT_MODE_ASYNC; mode <= DT_MODE_SYNC; mode++) {
        world w;
        world_start(&w, 2, 1);
        dt_tensors vars, want, grads;
        model_init(&vars);
        model_init(&want);
        model_init(&grads);
        fill_initial(&vars);
        memcpy(want.slab, vars.slab, vars.slab_bytes);
        dt_ps_client *c = client_new(&w, 0, &vars, SPLIT_BYTES);
        create_args a;
        create_args_init(&a, &vars);
        a.optim.learning_rate = 3.0; /* unused by piecewise */
        a.schedule.kind = DT_LR_PIECEWISE;
        a.schedule.num_boundaries = 2;
        a.schedule.boundaries[0] = 2;
        a.schedule.boundaries[1] = 4;
        a.schedule.values[0] = 0.5;
        a.schedule.values[1] = 0.25;
        a.schedule.values[2] = 0.125;
        if (mode == DT_MODE_SYNC) sync_mode(&a, 1, 1, 60000);
        create_ok(c, &a);
        for (int step = 0; step < 7; step++) {
            fill_grad(&grads, 0, step);
            dt_ps_reply r = push_ok(c, &grads, step);
            ck_assert_int_eq(r.global_step, step + 1);
            sgd_step(&want, &grads, lr_at[step]);
            fill(&vars, NAN);
            pull_ok(c, &vars, NULL, 0);
            char what[64];
            snprintf(what, sizeof what, "%s, update at step %d (lr %g)", dt_mode_name(mode), step,
                     (double)lr_at[step]);
            assert_same(&vars, &want, what);
        }
        dt_ps_client_free(c);
        dt_tensors_deinit(&vars);
        dt_tensors_deinit(&want);
        dt_tensors_deinit(&grads);
        world_stop(&w);
    }
}
END_TEST

/* ---- real processes ---------------------------------------------------------- */

#define JOB_TIMEOUT_MS 120000 /* a short job, 2 cores, maybe under ASan */
#define EXIT_TIMEOUT_MS 20000

static dt_test_job J;

static void setup(void) {
    dt_test_job_setup(&J);
}

static void teardown(void) {
    dt_test_job_teardown(&J);
}

/* Every element of the named tensor is finite; returns the sum of squares. */
static double tensor_norm2(const dt_tensors *ts, const char *name, int64_t rows, int64_t cols) {
    const dt_tensor *t = dt_tensors_find(ts, name);
    ck_assert_msg(t != NULL, "checkpoint has no %s", name);
    ck_assert_int_eq(t->dtype, DT_DTYPE_F32);
    ck_assert_int_eq(t->shape[0], rows);
    if (cols) ck_assert_int_eq(t->shape[1], cols);
    double sum = 0;
    for (int64_t i = 0; i < dt_tensor_numel(t); i++) {
        float x;
        memcpy(&x, (const char *)t->data + 4 * i, 4);
        ck_assert_msg(isfinite(x), "%s[%lld] is not finite", name, (long long)i);
        sum += (double)x * x;
    }
    return sum;
}

/* A chief's log line has "restored" and the step it restored. */
static void expect_restored(const char *log_name, int64_t step) {
    char *log = dt_test_job_read_log(&J, log_name);
    char step_text[64];
    snprintf(step_text, sizeof step_text, "(global_step %" PRId64 ")", step);
    int ok = dt_test_line_has(log, "restored", step_text, NULL, NULL);
    int warned = strstr(log, "slots; they start from") != NULL;
    free(log);
    ck_assert_msg(ok, "%s has no \"restored\" line with %s; logs:%s", log_name, step_text,
                  dt_test_job_report(&J));
    ck_assert_msg(!warned, "%s: the checkpoint's momentum slots were not restored", log_name);
}

/* The weight (F = 300, 1200 bytes) is cut in min(num_ps, 300, 1200 / 256)
 * slices; momentum gives it a slot, saved whole. Trained on 2 ps, restored
 * onto 1, then onto 3, each run continuing the step. */
START_TEST(test_job_restore_other_ps_counts) {
    static const char *const base[] = {
        "data=wide",          "features=300",        "examples=1000",
        "optimizer=momentum", "learning_rate=0.002", "partition_min_bytes=256",
        "save_model_secs=1",  "log_steps=100",       "summary_steps=50"};
    static const int ps_counts[] = {2, 1, 3};
    static const char *const max_steps[] = {"max_steps=300", "max_steps=600", "max_steps=900"};
    int64_t last = -1;
    for (int run = 0; run < 3; run++) {
        dt_test_job_set(&J, base, (int)(sizeof base / sizeof base[0]));
        dt_test_job_add_set(&J, max_steps[run]);
        dt_test_job_cluster(&J, ps_counts[run], 2);
        char tag[16];
        snprintf(tag, sizeof tag, "_%d", run);
        dt_test_job_run(&J, tag, JOB_TIMEOUT_MS);
        char chief_log[32];
        snprintf(chief_log, sizeof chief_log, "chief%s", tag);
        if (run > 0) expect_restored(chief_log, last);
        /* The chief's placement lines: slices on every ps when split. */
        char *log = dt_test_job_read_log(&J, chief_log);
        if (ps_counts[run] > 1) {
            char part[64];
            snprintf(part, sizeof part, "linear/weight/part_%d rows", ps_counts[run] - 1);
            ck_assert_msg(strstr(log, part), "%s: no placement line for %s; logs:%s", chief_log,
                          part, dt_test_job_report(&J));
        } else {
            ck_assert_msg(!strstr(log, "/part_"), "%s: a slice on 1 ps", chief_log);
        }
        free(log);
        dt_tensors ts;
        int64_t step = dt_test_job_load_latest(&J, 300 * (run + 1), &ts, NULL, 0);
        ck_assert_msg(step > last, "run %d ended at step %" PRId64 ", not past %" PRId64, run, step,
                      last);
        double w2 = tensor_norm2(&ts, "linear/weight", 300, 1);
        double m2 = tensor_norm2(&ts, "linear/weight/momentum", 300, 1);
        tensor_norm2(&ts, "linear/bias", 1, 0);
        tensor_norm2(&ts, "linear/bias/momentum", 1, 0);
        ck_assert_msg(w2 > 0 && m2 > 0, "run %d: weight or its momentum is all zero", run);
        dt_tensors_deinit(&ts);
        last = step;
    }
}
END_TEST

/* Sync mode, 2 workers aggregated per step, on 2 ps (weight on one, bias on
 * the other, each aggregating on its own): the job completes at exactly
 * max_steps and its final checkpoint is the least-squares line of the data
 * (within 0.05). */
START_TEST(test_job_sync) {
    static const char *const sets[] = {"mode=sync",           "max_steps=400", "examples=1000",
                                       "save_model_secs=1",   "log_steps=100", "summary_steps=50",
                                       "sync_timeout_secs=20"};
    dt_test_job_set(&J, sets, (int)(sizeof sets / sizeof sets[0]));
    dt_test_job_cluster(&J, 2, 2);
    dt_test_job_run(&J, "", JOB_TIMEOUT_MS);
    /* The mean gradient of both shards descends the whole set's loss: the
     * line is the closed form's. */
    int64_t step = dt_test_job_check_latest(&J, 400, 1);
    ck_assert_int_eq(step, 400); /* sync: the step advances once per pair, never past */
    for (int p = 0; p < 2; p++) {
        char name[16];
        snprintf(name, sizeof name, "ps%d", p);
        char *log = dt_test_job_read_log(&J, name);
        ck_assert_msg(dt_test_line_has(log, "created", "sync", NULL, NULL),
                      "%s.log: no \"created ... sync\" line", name);
        free(log);
    }
}
END_TEST

/* Status of ps `ps` of the current cluster, asked from this process. */
static void ps_status(int ps, dt_msg_status_resp *st) {
    dt_test_probe probe;
    dt_err err;
    dt_err_clear(&err);
    dt_test_probe_open(&probe, J.cluster, CALL_TIMEOUT_MS);
    int rc = dt_ps_client_status(probe.client, ps, st, &err);
    dt_test_probe_close(&probe);
    ck_assert_msg(rc == 0, "status of ps %d: %s", ps, err.msg);
}

/* Polls ps `ps`'s global step until it is at least `step` (or the job's
 * max_steps); fails the test after JOB_TIMEOUT_MS. Returns the step seen. */
static int64_t ps_step_at_least(int ps, int64_t step) {
    int64_t deadline = dt_test_now_ms() + JOB_TIMEOUT_MS;
    for (;;) {
        dt_msg_status_resp st;
        ps_status(ps, &st);
        if (st.global_step >= step || (st.max_steps > 0 && st.global_step >= st.max_steps))
            return st.global_step;
        ck_assert_msg(dt_test_now_ms() < deadline, "ps:%d stayed at step %lld (< %lld); logs:%s",
                      ps, (long long)st.global_step, (long long)step, dt_test_job_report(&J));
        dt_test_sleep_ms(20);
    }
}

/* Sync, 2 ps (--keep-serving, so their Status can be read after the job),
 * the chief and worker 1, sync_timeout_secs 1. Worker 1 is stopped
 * (SIGSTOP) three times while it trains, each time for two partial steps,
 * wherever it happens to be: between its pull and push, or between its
 * pushes to the two tasks.
 * ps:0 applies partial steps meanwhile; every shard must apply the same
 * gradients at every step: equal pushes_applied and equal digests of
 * (step, workers) on both tasks, final step exactly max_steps on both. */
START_TEST(test_job_sync_slow_worker) {
    static const char *const sets[] = {"mode=sync",          "max_steps=3000", "examples=1000",
                                       "save_model_secs=1",  "log_steps=100",  "summary_steps=50",
                                       "sync_timeout_secs=1"};
    dt_test_job_set(&J, sets, (int)(sizeof sets / sizeof sets[0]));
    dt_test_job_cluster(&J, 2, 2);
    pid_t ps[2];
    ps[0] = dt_test_job_start_serving(&J, "ps", 0, "ps0");
    ps[1] = dt_test_job_start_serving(&J, "ps", 1, "ps1");
    pid_t pids[2];
    pids[0] = dt_test_job_start(&J, "worker", 0, "chief");
    pids[1] = dt_test_job_start(&J, "worker", 1, "worker1");
    ck_assert_msg(
        dt_test_job_wait_log(&J, "worker1", ": step 100 global_step", JOB_TIMEOUT_MS, pids[1]),
        "worker 1 never reached its step 100; logs:%s", dt_test_job_report(&J));
    /* Each stop lasts until ps:0 has applied two steps without worker 1;
     * each run between stops lasts a different number of steps, so the stops
     * fall at different points of worker 1's step. */
    int stops = 0;
    int64_t step = ps_step_at_least(0, 0);
    for (int k = 0; k < 3 && dt_test_alive(pids[1]); k++) {
        step = ps_step_at_least(0, step + 50 + 37 * k);
        if (step >= 3000 || dt_test_kill(pids[1], SIGSTOP) != 0) break;
        step = ps_step_at_least(0, ps_step_at_least(0, 0) + 2);
        ck_assert_int_eq(dt_test_kill(pids[1], SIGCONT), 0);
        stops++;
    }
    const char *names[2] = {"chief", "worker 1"};
    dt_test_job_expect_done(&J, pids, names, 2, JOB_TIMEOUT_MS);
    ck_assert_msg(stops == 3, "worker 1 ended before it was stopped 3 times; logs:%s",
                  dt_test_job_report(&J));
    /* The fault happened: ps:0 applied a step without worker 1. */
    char *log = dt_test_job_read_log(&J, "ps0");
    int partial = strstr(log, "applying 1 of 2 gradients") != NULL;
    free(log);
    ck_assert_msg(partial, "ps:0 never applied a partial step; logs:%s", dt_test_job_report(&J));
    dt_msg_status_resp st[2];
    for (int p = 0; p < 2; p++) {
        ps_status(p, &st[p]);
        ck_assert_msg(st[p].global_step == 3000, "ps:%d ended at step %lld; logs:%s", p,
                      (long long)st[p].global_step, dt_test_job_report(&J));
    }
    ck_assert_msg(st[0].pushes_applied == st[1].pushes_applied &&
                      st[0].sync_digest == st[1].sync_digest,
                  "the shards applied different gradients: applied %lld / %lld, digest %016llx / "
                  "%016llx; logs:%s",
                  (long long)st[0].pushes_applied, (long long)st[1].pushes_applied,
                  (unsigned long long)st[0].sync_digest, (unsigned long long)st[1].sync_digest,
                  dt_test_job_report(&J));
    ck_assert_msg(st[0].pushes_applied < 2 * 3000, "no step without worker 1 (%lld applied)",
                  (long long)st[0].pushes_applied);
    ck_assert_int_eq(dt_test_job_check_latest(&J, 3000, 1), 3000);
    for (int p = 0; p < 2; p++) {
        ck_assert_int_eq(dt_test_kill(ps[p], SIGTERM), 0);
        dt_test_job_expect_exit(&J, ps[p], "ps after SIGTERM", EXIT_TIMEOUT_MS, 128 + SIGTERM);
    }
}
END_TEST

/* The pushes ps `ps` took from worker `task` (Status), 0 before any. */
static int64_t pushes_of(int ps, int task) {
    dt_msg_status_resp st;
    ps_status(ps, &st);
    for (int i = 0; i < st.num_workers; i++)
        if (st.workers[i].worker == task && st.workers[i].pushes > 0) return st.workers[i].pushes;
    return 0;
}

/* Bounded staleness 2, 1 ps (--keep-serving, so its Status can be read
 * after the job), 2 workers; worker 1 starts with the others, or (late)
 * once the chief has made its 200th step. The job completes and the ps's
 * max_lead stays within the staleness. The chief stops itself after its
 * step 1 (or 200 when late; DT_TEST_WORKER_STOP_AT, lib/worker.h) and is
 * let go only once the ps took a push of worker 1's: both train, however
 * fast the chief alone could end the job. Before, the test hoped worker 1
 * came before the chief's last step, and under load it came after (it
 * then took no step). */
static void run_bounded(int late, const char *max_steps) {
    const char *sets[] = {"mode=bounded",      "staleness=2",   max_steps,         "examples=1000",
                          "save_model_secs=1", "log_steps=100", "summary_steps=50"};
    dt_test_job_set(&J, sets, (int)(sizeof sets / sizeof sets[0]));
    dt_test_job_cluster(&J, 1, 2);
    pid_t ps = dt_test_job_start_serving(&J, "ps", 0, "ps0");
    pid_t pids[2];
    ck_assert_int_eq(setenv("DT_TEST_WORKER_STOP_AT", late ? "200" : "1", 1), 0);
    pids[0] = dt_test_job_start(&J, "worker", 0, "chief");
    ck_assert_int_eq(unsetenv("DT_TEST_WORKER_STOP_AT"), 0);
    if (late)
        ck_assert_msg(dt_test_wait_stopped(pids[0], JOB_TIMEOUT_MS),
                      "the chief did not stop itself at its step 200; logs:%s",
                      dt_test_job_report(&J));
    pids[1] = dt_test_job_start(&J, "worker", 1, "worker1");
    ck_assert_msg(dt_test_wait_stopped(pids[0], JOB_TIMEOUT_MS),
                  "the chief did not stop itself at its step %d; logs:%s", late ? 200 : 1,
                  dt_test_job_report(&J));
    int64_t deadline = dt_test_now_ms() + JOB_TIMEOUT_MS;
    while (pushes_of(0, 1) < 1 && dt_test_alive(pids[1]) && dt_test_now_ms() < deadline)
        dt_test_sleep_ms(20);
    ck_assert_msg(pushes_of(0, 1) >= 1,
                  "worker 1 made no push while the chief was stopped; logs:%s",
                  dt_test_job_report(&J));
    dt_test_job_release(&J, pids[0], "chief");
    const char *names[2] = {"chief", "worker 1"};
    dt_test_job_expect_done(&J, pids, names, 2, JOB_TIMEOUT_MS);
    ck_assert_msg(dt_test_alive(ps), "--keep-serving ps exited; logs:%s", dt_test_job_report(&J));
    /* Both trained: else the bound held trivially. */
    char *log = dt_test_job_read_log(&J, "worker1");
    const char *done = strstr(log, "training done after ");
    long steps = done ? strtol(done + strlen("training done after "), NULL, 10) : 0;
    free(log);
    ck_assert_msg(steps > 0, "worker 1 took no step; logs:%s", dt_test_job_report(&J));
    dt_msg_status_resp st;
    ps_status(0, &st);
    ck_assert_str_eq(st.mode, "bounded");
    ck_assert_int_ge(st.global_step, st.max_steps);
    ck_assert_msg(st.max_lead <= 2, "max_lead %d > staleness 2 (worker 1 started %s); logs:%s",
                  st.max_lead, late ? "after the chief's step 200" : "with the chief",
                  dt_test_job_report(&J));
    ck_assert_int_eq(dt_test_kill(ps, SIGTERM), 0);
    dt_test_job_expect_exit(&J, ps, "ps after SIGTERM", EXIT_TIMEOUT_MS, 128 + SIGTERM);
}

START_TEST(test_job_bounded) {
    run_bounded(0, "max_steps=3000");
}
END_TEST

/* The same with worker 1 joining once the chief is under way, as happens
 * when workers start in any order. */
START_TEST(test_job_bounded_late_worker) {
    run_bounded(1, "max_steps=6000");
}
END_TEST

Suite *consistency_suite(void) {
    Suite *s = suite_create("consistency");
    TCase *split = tcase_create("split");
    tcase_set_timeout(split, 60);
    tcase_add_test(split, test_split_exact);
    tcase_add_test(split, test_ps_without_units);
    tcase_add_test(split, test_slots_round_trip);
    suite_add_tcase(s, split);

    TCase *sync = tcase_create("sync");
    tcase_set_timeout(sync, 60);
    tcase_add_test(sync, test_sync_one_worker);
    tcase_add_test(sync, test_sync_two_workers_mean);
    tcase_add_test(sync, test_sync_drops);
    tcase_add_test(sync, test_sync_partial_step);
    tcase_add_test(sync, test_sync_one_decision_across_shards);
    suite_add_tcase(s, sync);

    TCase *bounded = tcase_create("bounded");
    tcase_set_timeout(bounded, 60);
    tcase_add_test(bounded, test_bounded_gate);
    tcase_add_test(bounded, test_bounded_silent_worker);
    tcase_add_test(bounded, test_bounded_late_joiner);
    suite_add_tcase(s, bounded);

    TCase *schedule = tcase_create("schedule");
    tcase_set_timeout(schedule, 60);
    tcase_add_test(schedule, test_piecewise_schedule);
    suite_add_tcase(s, schedule);

    TCase *jobs = dt_test_job_tcase(s, "jobs", 600, setup, teardown);
    tcase_add_test(jobs, test_job_restore_other_ps_counts);
    tcase_add_test(jobs, test_job_sync);
    tcase_add_test(jobs, test_job_sync_slow_worker);
    tcase_add_test(jobs, test_job_bounded);
    tcase_add_test(jobs, test_job_bounded_late_worker);
    return s;
}
