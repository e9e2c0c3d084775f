/*
 * api_session: the public API's roles (include/dtrain.h): a ps that serves
 * until the job is done (dt_ps), a worker's or the chief's session (the
 * binary's own loop, lib/session, with the program's model), and the
 * signals that stop either.
 */
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "api_internal.h"
#include "log.h"
#include "ps.h"
#include "session.h"

/* ---- signals ------------------------------------------------------------ */

static dt_session *_Atomic signalled_session;
static atomic_int *_Atomic signalled_flag;

/* The first SIGINT/SIGTERM stops the session or server; a second exits. */
static void on_stop_signal(int signo) {
    if (atomic_exchange(&dt_api_signal_taken, signo)) _exit(128 + signo);
    dt_session *s = atomic_load(&signalled_session);
    if (s) dt_session_stop(s);
    atomic_int *flag = atomic_load(&signalled_flag);
    if (flag) atomic_store(flag, 1);
}

static void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_stop_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* ---- the ps ------------------------------------------------------------- */

struct dtrain_server {
    dt_api_handle h;
    dt_ps *ps;
    atomic_int stop;
    const dtrain_model *model;
};

int dtrain_server_new(dtrain_server **out) {
    *out = dt_api_new_handle(sizeof **out, "server");
    return *out ? 0 : DT_ENOMEM;
}

void dtrain_server_free(dtrain_server *s) {
    if (!s) return;
    if (atomic_load(&signalled_flag) == &s->stop) atomic_store(&signalled_flag, NULL);
    dt_ps_free(s->ps);
    free(s);
}

/* The largest message a ps takes: the chief's Create of the model with its
 * optimizer slots, plus 1 MiB (the binary's rule, cmd/dtrain.c). */
static long long message_cap(const dtrain_model *m, const dt_job *job) {
    if (!m) return 256LL << 20;
    long long bytes = 0;
    for (int i = 0; i < m->count; i++)
        bytes += (long long)m->vars[i].spec.nbytes;
    long long need = bytes * (1 + dt_optim_num_slots(&job->optim)) + (1LL << 20);
    return need < (4LL << 20) ? 4LL << 20 : need > INT_MAX ? INT_MAX : need;
}

int dtrain_server_start(dtrain_server *s, const dtrain_server_params *p) {
    dt_err *err = dt_api_begin(s);
    if (s->ps) return dt_err_set(err, DT_EPRECOND, "server: started already");
    if (!p || !p->cluster || !p->config)
        return dt_err_set(err, DT_EINVAL, "server: needs a cluster and a config");
    const dtrain_cluster *c = p->cluster;
    if (!c->has_role || c->role.type != DT_TASK_PS)
        return dt_err_set(err, DT_EPERM, "server: this task is not a ps (its role is %s)",
                          c->has_role ? "a worker" : "not set");
    dt_job job;
    int rc = dt_api_finished_job(p->config, &job, err);
    if (rc < 0) return rc;
    if (p->handle_signals) {
        atomic_store(&signalled_flag, &s->stop);
        install_signals();
    }
    dt_log_set_role('P');
    dt_rpc_init();
    dt_ps_params pp = {.cluster = &c->cluster,
                       .task_index = c->role.index,
                       .keep_serving = p->keep_serving,
                       .linger_ms = job.ps_linger_secs * 1000,
                       .security = &c->security,
                       .max_message_bytes = message_cap(p->model, &job),
                       .log_dir = job.log_dir,
                       .max_steps = job.max_steps,
                       .epochs = job.epochs_named ? job.epochs : 0};
    return dt_ps_start(&pp, &s->ps, err);
}

int dtrain_server_join(dtrain_server *s) {
    dt_err *err = dt_api_begin(s);
    if (!s->ps) return dt_err_set(err, DT_EPRECOND, "server: join: not started");
    return dt_ps_wait(s->ps, &s->stop, err);
}

void dtrain_server_stop(dtrain_server *s) {
    atomic_store(&s->stop, 1);
}

/* ---- the session -------------------------------------------------------- */

struct dtrain_session {
    dt_api_handle h;
    dt_session *s;
    dtrain_model *model;
    dt_tensor *specs;
    float **values;
    dt_job job;
    dt_table_config tables[DTRAIN_MAX_TABLES]; /* (model->num_tables) as the ps tasks hold them */
    char describe[DT_MSG_MODEL_MAX];
    int closed;
    int rc; /* close's outcome, once closed */
    dt_err close_err;
};

int dtrain_session_new(dtrain_session **out) {
    *out = dt_api_new_handle(sizeof **out, "session");
    return *out ? 0 : DT_ENOMEM;
}

/* The chief's first values: each variable's initializer (or the program's
 * own values), seeded by the job's seed. */
static void init_model(void *ctx, dt_tensors *vars) {
    dtrain_session *ss = ctx;
    for (int i = 0; i < ss->model->count; i++)
        dt_api_initial_values(&ss->model->vars[i], ss->job.seed, vars->items[i].data);
}

int dtrain_session_start(dtrain_session *ss, const dtrain_session_params *p) {
    dt_err *err = dt_api_begin(ss);
    if (ss->s) return dt_err_set(err, DT_EPRECOND, "session: started already");
    if (!p || !p->cluster || !p->config || !p->model)
        return dt_err_set(err, DT_EINVAL, "session: needs a cluster, a config and a model");
    const dtrain_cluster *c = p->cluster;
    if (!c->has_role || c->role.type != DT_TASK_WORKER)
        return dt_err_set(err, DT_EPERM, "session: this task is not a worker (its role is %s)",
                          c->has_role ? "a ps" : "not set");
    dtrain_model *m = (dtrain_model *)p->model; /* in_use only */
    if (m->count == 0) return dt_err_set(err, DT_EINVAL, "session: the model has no variables");
    int rc = dt_api_finished_job(p->config, &ss->job, err);
    if (rc < 0) return rc;
    ss->model = m;
    ss->specs = dt_calloc((size_t)m->count, sizeof *ss->specs);
    ss->values = dt_calloc((size_t)m->count, sizeof *ss->values);
    if (!ss->specs || !ss->values) return dt_err_set(err, DT_ENOMEM, "session: out of memory");
    for (int i = 0; i < m->count; i++) {
        ss->specs[i] = m->vars[i].spec;
        ss->values[i] = m->vars[i].values;
    }
    dt_api_describe(m, ss->describe, sizeof ss->describe);
    for (int k = 0; k < m->num_tables; k++)
        dt_api_table_config(&m->tables[k], &ss->job, &ss->tables[k]);
    atomic_fetch_add(&m->in_use, 1);
    dt_log_set_role(c->role.index == 0 ? 'C' : 'W');
    dt_rpc_init();
    dt_session_params sp = {.cluster = &c->cluster,
                            .job = &ss->job,
                            .task_index = c->role.index,
                            .security = &c->security,
                            .specs = ss->specs,
                            .count = m->count,
                            .values = ss->values,
                            .tables = ss->tables,
                            .num_tables = m->num_tables,
                            .init = init_model,
                            .init_ctx = ss,
                            .describe = ss->describe};
    if (p->handle_signals) install_signals();
    rc = dt_session_start(&sp, &ss->s, err);
    if (ss->s && p->handle_signals) atomic_store(&signalled_session, ss->s);
    return rc;
}

/* Checks a step's arguments: the session ready, a gradient for every
 * variable (and table, when rows is set). */
static int check_step(dtrain_session *ss, const float *const *grads, const float *const *rows,
                      dt_err *err) {
    if (!ss->s || ss->closed)
        return dt_err_set(err, DT_EPRECOND, "session: step: the session is not %s",
                          ss->closed ? "open (closed)" : "ready (start it first)");
    if (!grads) return dt_err_set(err, DT_EINVAL, "session: step: no gradients");
    for (int i = 0; i < ss->model->count; i++)
        if (!grads[i])
            return dt_err_set(err, DT_EINVAL, "session: step: no gradient for \"%s\"",
                              ss->specs[i].name);
    if (!rows && ss->model->num_tables)
        return dt_err_set(err, DT_EINVAL,
                          "session: step: the model has table \"%s\": step with "
                          "dtrain_session_step_rows",
                          ss->tables[0].name);
    for (int t = 0; rows && t < ss->model->num_tables; t++)
        if (!rows[t])
            return dt_err_set(err, DT_EINVAL, "session: step: no gradient for table \"%s\"",
                              ss->model->tables[t].name);
    return 0;
}

static int step(dtrain_session *ss, const float *const *grads, const float *const *rows,
                double loss, dtrain_step_result *r) {
    dt_err *err = dt_api_begin(ss);
    if (r) memset(r, 0, sizeof *r);
    int rc = check_step(ss, grads, rows, err);
    if (rc < 0) return rc;
    dt_session_result res;
    rc = dt_session_step(ss->s, grads, rows, loss, &res, err);
    if (r) {
        r->global_step = res.global_step;
        r->local_step = res.local_step;
        r->done = res.done;
    }
    return rc;
}

int dtrain_session_step(dtrain_session *ss, const float *const *grads, double loss,
                        dtrain_step_result *r) {
    return step(ss, grads, NULL, loss, r);
}

int dtrain_session_step_rows(dtrain_session *ss, const float *const *grads,
                             const float *const *row_grads, double loss, dtrain_step_result *r) {
    if (!row_grads) {
        dt_err *err = dt_api_begin(ss);
        if (r) memset(r, 0, sizeof *r);
        return dt_err_set(err, DT_EINVAL, "session: step: no row gradients");
    }
    return step(ss, grads, row_grads, loss, r);
}

int dtrain_session_lookup(dtrain_session *ss, int t, const int64_t *ids, int64_t n, float *rows) {
    dt_err *err = dt_api_begin(ss);
    if (!ss->s || ss->closed)
        return dt_err_set(err, DT_EPRECOND, "session: lookup: the session is not %s",
                          ss->closed ? "open (closed)" : "ready (start it first)");
    if (t < 0 || t >= ss->model->num_tables)
        return dt_err_set(err, DT_EPRECOND,
                          "session: lookup: the model has no table %d (it has %d)", t,
                          ss->model->num_tables);
    const char *name = ss->model->tables[t].name;
    if (n < 1 || !ids || !rows)
        return dt_err_set(err, DT_EINVAL,
                          "session: lookup \"%s\": needs n >= 1 ids and a rows "
                          "buffer (n %lld)",
                          name, (long long)n);
    for (int64_t k = 0; k < n; k++) {
        if (ids[k] < 0 || ids[k] >= ss->tables[t].rows)
            return dt_err_set(err, DT_EINVAL,
                              "session: lookup \"%s\": ids[%lld] = %lld is not in [0, %lld)", name,
                              (long long)k, (long long)ids[k], (long long)ss->tables[t].rows);
        if (k > 0 && ids[k] <= ids[k - 1])
            return dt_err_set(err, DT_EINVAL,
                              "session: lookup \"%s\": ids[%lld] = %lld after %lld: the ids must "
                              "be strictly increasing (sorted, unique)",
                              name, (long long)k, (long long)ids[k], (long long)ids[k - 1]);
    }
    return dt_session_lookup(ss->s, t, ids, n, rows, err);
}

int dtrain_session_should_stop(const dtrain_session *ss) {
    return !ss->s || ss->closed || dt_session_ended(ss->s);
}

int64_t dtrain_session_global_step(const dtrain_session *ss) {
    return ss->s ? dt_session_global_step(ss->s) : 0;
}

int dtrain_session_summary(dtrain_session *ss, const char *name, double value) {
    dt_err *err = dt_api_begin(ss);
    if (!ss->s) return dt_err_set(err, DT_EPRECOND, "session: summary: not started");
    return dt_session_scalar(ss->s, name, value, err);
}

int dtrain_session_histogram(dtrain_session *ss, const char *name, const float *values, int64_t n) {
    dt_err *err = dt_api_begin(ss);
    if (!ss->s) return dt_err_set(err, DT_EPRECOND, "session: histogram: not started");
    return dt_session_histogram(ss->s, name, values, n, err);
}

void dtrain_session_stop(dtrain_session *ss) {
    if (ss->s) dt_session_stop(ss->s);
}

int dtrain_session_close(dtrain_session *ss) {
    dt_err *err = dt_api_begin(ss);
    if (!ss->s) return 0;
    if (!ss->closed) {
        dt_err_clear(&ss->close_err);
        ss->rc = dt_session_close(ss->s, &ss->close_err);
        ss->closed = 1;
        if (atomic_load(&signalled_session) == ss->s) atomic_store(&signalled_session, NULL);
        atomic_fetch_sub(&ss->model->in_use, 1);
    }
    if (ss->rc < 0) return dt_err_set(err, ss->rc, "%s", ss->close_err.msg);
    return 0;
}

void dtrain_session_free(dtrain_session *ss) {
    if (!ss) return;
    if (ss->s) {
        (void)dtrain_session_close(ss);
        dt_session_free(ss->s);
    }
    free(ss->specs);
    free(ss->values);
    free(ss);
}
