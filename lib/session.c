/*
 * session: the worker and chief roles on a thread, a program's model in
 * them (session.h says how the two threads take turns).
 *
 * The turn is a phase under one mutex:
 *   LOOP    the role works (pull, push, save); the program waits in
 *           start or step
 *   VALUES  loss_grad wrote values to the buffers and waits for grads
 *   LOOKUP  the program posted ids of a table; loss_grad pulls their rows
 *           into the program's buffer and goes back to VALUES
 *   GRADS   the program posted grads; loss_grad takes them
 *   ENDED   the role returned (rc, err): no more turns
 * The loop's waits are bounded (STOP_POLL_MS) so a stop asked while the
 * program computes ends the wait; the role then ends as on a signal.
 *
 * Each side spins before it sleeps (spin.h), when its waits are short:
 * a thread woken from a condition variable cost about 40 us on a 2-core
 * machine, two a step, where the tiny model's whole round trip is 100 us.
 * Each waiting thread (the program: post to values; the loop: values to
 * post) keeps its own hit share. So a small model or a numpy step costs
 * no wake-up, and a CNN's step (milliseconds each way) sleeps at once
 * after its first few.
 */
#include "session.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "chief.h"
#include "log.h"
#include "spin.h"

#define STOP_POLL_MS 100

typedef enum { PHASE_LOOP, PHASE_VALUES, PHASE_LOOKUP, PHASE_GRADS, PHASE_ENDED } phase;

/* One step's ids of a table (copies) and their rows' gradient, copied at
 * the step; the push borrows both until it is done. */
typedef struct {
    int64_t *ids, cap, n;
    float *row_grads; /* (cap, dim) */
} table_buf;

/* A table's last lookup, under mu. Two buffers, taken in turn a step
 * each: with pipeline_push the loop computes the next step while the
 * last one's push still reads its own buffer. */
typedef struct {
    const dt_table_config *cfg; /* its entry of table_cfgs, the one copy */
    table_buf bufs[2];
    int cur;       /* this step's */
    int looked_up; /* a lookup came since the last step */
} session_table;

struct dt_session {
    dt_job job;
    dt_tensor *specs; /* (count) */
    int count;
    float *const *values; /* (count) the program's buffers */
    session_table tables[DT_MAX_TABLES];
    dt_table_config table_cfgs[DT_MAX_TABLES]; /* the loop's copy (dt_user_model.tables) */
    int num_tables;
    /* PHASE_LOOKUP: the table posted and the program's rows buffer. */
    int lookup_table;
    float *lookup_rows;
    const float *const *row_grads_in; /* PHASE_GRADS: the program's, borrowed */
    char describe[DT_MSG_MODEL_MAX];
    dt_user_model user;
    void (*init)(void *ctx, dt_tensors *vars); /* the caller's, with init_ctx */
    void *init_ctx;
    dt_worker_params wp;
    atomic_int stop;
    /* The spins (top of file): the counters each side bumps at a post or
     * a hand-over (under mu, read without it), and each waiting thread's
     * hit share (spin.h). */
    atomic_uint posts;             /* the program's: GRADS, LOOKUP */
    atomic_uint handed;            /* the loop's: VALUES, ENDED */
    double step_hits, lookup_hits; /* the program's */
    double compute_hits;           /* the loop's */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    phase phase;               /* under mu */
    const float *const *grads; /* PHASE_GRADS: the program's, borrowed */
    double loss;
    int64_t vars_step;  /* of the values in the buffers */
    int64_t local_step; /* steps taken */
    int rc;             /* PHASE_ENDED: the role's outcome */
    dt_err err;
    int closed;
    int thread_started;
    pthread_t thread;

    /* The program's scalars, under mu. */
    char scalar_tags[DT_SESSION_MAX_SCALARS][DT_TENSOR_NAME_MAX];
    const char *scalar_ptrs[DT_SESSION_MAX_SCALARS];
    double scalar_values[DT_SESSION_MAX_SCALARS];
    int num_scalars;
    /* The program's histograms (copies), under mu. */
    char hist_tags[DT_SESSION_MAX_SCALARS][DT_TENSOR_NAME_MAX];
    float *hist_values[DT_SESSION_MAX_SCALARS];
    int64_t hist_n[DT_SESSION_MAX_SCALARS], hist_cap[DT_SESSION_MAX_SCALARS];
    int num_hists;
};

/* mu held. Waits on cv for at most STOP_POLL_MS. */
static void wait_a_while(dt_session *s) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct timespec until = dt_timespec_after_ms(now, STOP_POLL_MS);
    pthread_cond_timedwait(&s->cv, &s->mu, &until);
}

/* mu held: spins (mu released) until *counter moves from seen, a stop is
 * asked, or the budget is spent. Only a hint: the caller checks the phase
 * under mu and sleeps if it has not come. Every 16 pauses it yields the
 * core: where cores are few, the ps or the loop's own RPC wants it, and a
 * spinner that keeps it delays the very answer it waits for (the C API's
 * tiny job on 2 cores: 0.65 of the binary's steps/s without the yield,
 * 0.78-0.82 with it). */
static void spin_while(dt_session *s, atomic_uint *counter, unsigned seen) {
    pthread_mutex_unlock(&s->mu);
    double until = dt_spin_deadline();
    for (unsigned i = 1;
         atomic_load_explicit(counter, memory_order_acquire) == seen && !atomic_load(&s->stop);
         i++) {
        dt_spin_relax();
        if (i % 16 == 0) sched_yield();
        if (i % 64 == 0 && dt_now_secs() >= until) break;
    }
    pthread_mutex_lock(&s->mu);
}

/* mu held, phase LOOKUP: the rows of the posted ids into the program's
 * buffer through the loop's pull (mu released meanwhile: the program
 * waits for VALUES). 0, 1 (done) or the pull's failure. */
static int serve_lookup(dt_session *s, dt_user_rows *io, dt_err *err) {
    session_table *t = &s->tables[s->lookup_table];
    const table_buf *b = &t->bufs[t->cur];
    dt_ps_sparse req = {t->cfg->name, t->cfg->dim, b->n, b->ids, s->lookup_rows};
    pthread_mutex_unlock(&s->mu);
    int rc = dt_user_rows_pull(io, &req, err);
    pthread_mutex_lock(&s->mu);
    t->looked_up = rc == 0;
    return rc;
}

/* mu held: no table looked up (a step's start, or its end). */
static void forget_lookups(dt_session *s) {
    for (int k = 0; k < s->num_tables; k++)
        s->tables[k].looked_up = 0;
}

/* mu held, at a step's start: each table's other buffer (the one the push
 * before last read, done since). */
static void next_buffers(dt_session *s) {
    for (int k = 0; k < s->num_tables; k++)
        s->tables[k].cur = !s->tables[k].cur;
}

/* The loop's side of a turn: values out, then wait for the gradient (a
 * table's lookups served meanwhile). */
static int loss_grad(void *ctx, const dt_tensors *vars, int64_t vars_step, dt_user_rows *io,
                     dt_tensors *grads, double *loss, dt_err *err) {
    dt_session *s = ctx;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->count; i++)
        memcpy(s->values[i], vars->items[i].data, vars->items[i].nbytes);
    s->vars_step = vars_step;
    forget_lookups(s);
    next_buffers(s);
    s->phase = PHASE_VALUES;
    atomic_fetch_add_explicit(&s->handed, 1, memory_order_release);
    pthread_cond_broadcast(&s->cv);
    double t0 = dt_now_secs();
    int spun = 0;
    while (s->phase != PHASE_GRADS && !atomic_load(&s->stop)) {
        if (s->phase == PHASE_LOOKUP && io) {
            int rc = serve_lookup(s, io, err);
            if (rc != 0) { /* done or failed: the role ends with it */
                s->phase = PHASE_LOOP;
                pthread_mutex_unlock(&s->mu);
                return rc;
            }
            s->phase = PHASE_VALUES;
            atomic_fetch_add_explicit(&s->handed, 1, memory_order_release);
            pthread_cond_broadcast(&s->cv);
            t0 = dt_now_secs(); /* the program computes on the rows now */
            spun = 0;
            continue;
        }
        if (!spun && dt_spin_worth(s->compute_hits)) {
            spun = 1;
            spin_while(s, &s->posts, atomic_load(&s->posts));
            continue;
        }
        spun = 1;
        wait_a_while(s);
    }
    if (s->phase != PHASE_GRADS) {
        s->phase = PHASE_LOOP;
        pthread_mutex_unlock(&s->mu);
        return dt_err_set(err, DT_ECANCELLED, "session: stopped");
    }
    dt_spin_note(&s->compute_hits, t0);
    for (int i = 0; i < s->count; i++)
        memcpy(grads->items[i].data, s->grads[i], grads->items[i].nbytes);
    for (int k = 0; io && s->row_grads_in && k < s->num_tables; k++) {
        session_table *t = &s->tables[k];
        table_buf *b = &t->bufs[t->cur];
        memcpy(b->row_grads, s->row_grads_in[k],
               (size_t)b->n * (size_t)t->cfg->dim * sizeof *b->row_grads);
        dt_user_rows_push(io,
                          &(dt_ps_sparse){t->cfg->name, t->cfg->dim, b->n, b->ids, b->row_grads});
    }
    *loss = s->loss;
    s->grads = NULL;
    s->row_grads_in = NULL;
    forget_lookups(s);
    s->phase = PHASE_LOOP;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* The chief's first values: the caller's init, with its own context. */
static void init_values(void *ctx, dt_tensors *vars) {
    dt_session *s = ctx;
    s->init(s->init_ctx, vars);
}

static int scalars(void *ctx, const char **tags, double *values, int max) {
    dt_session *s = ctx;
    pthread_mutex_lock(&s->mu);
    int n = s->num_scalars < max ? s->num_scalars : max;
    for (int i = 0; i < n; i++) {
        tags[i] = s->scalar_ptrs[i];
        values[i] = s->scalar_values[i];
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

static int histogram(void *ctx, int i, const char **tag, const float **values, int64_t *n) {
    dt_session *s = ctx;
    pthread_mutex_lock(&s->mu);
    int have = i < s->num_hists;
    if (have) {
        *tag = s->hist_tags[i];
        *values = s->hist_values[i];
        *n = s->hist_n[i];
    }
    pthread_mutex_unlock(&s->mu);
    return have;
}

static void *run_role(void *arg) {
    dt_session *s = arg;
    dt_err err;
    dt_err_clear(&err);
    int rc = s->wp.task_index == 0 ? dt_chief_run(&s->wp, &s->stop, &err)
                                   : dt_worker_run(&s->wp, &s->stop, &err);
    pthread_mutex_lock(&s->mu);
    s->rc = rc;
    s->err = err;
    s->phase = PHASE_ENDED;
    atomic_fetch_add_explicit(&s->handed, 1, memory_order_release);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    dt_spin_cover(-1); /* no more calls of the loop's */
    return NULL;
}

/* mu held: waits until the loop hands values over or ends. */
static int await_values(dt_session *s, dt_err *err) {
    while (s->phase != PHASE_VALUES && s->phase != PHASE_ENDED)
        pthread_cond_wait(&s->cv, &s->mu);
    if (s->phase == PHASE_ENDED && s->rc < 0) return dt_err_set(err, s->rc, "%s", s->err.msg);
    return 0;
}

int dt_session_start(const dt_session_params *p, dt_session **out, dt_err *err) {
    *out = NULL;
    dt_session *s = dt_calloc(1, sizeof *s);
    if (!s) return dt_err_set(err, DT_ENOMEM, "session: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->phase = PHASE_ENDED; /* until the thread runs */
    s->closed = 1;
    s->step_hits = s->lookup_hits = s->compute_hits = DT_SPIN_FIRST_HITS;
    *out = s;
    s->job = *p->job;
    s->count = p->count;
    s->values = p->values;
    snprintf(s->describe, sizeof s->describe, "%s", p->describe);
    s->specs = dt_calloc((size_t)(p->count > 0 ? p->count : 1), sizeof *s->specs);
    if (!s->specs) return dt_err_set(err, DT_ENOMEM, "session: out of memory");
    memcpy(s->specs, p->specs, sizeof *s->specs * (size_t)p->count);
    if (p->num_tables < 0 || p->num_tables > DT_MAX_TABLES)
        return dt_err_set(err, DT_EINVAL, "session: %d tables (0..%d)", p->num_tables,
                          DT_MAX_TABLES);
    s->num_tables = p->num_tables;
    for (int k = 0; k < p->num_tables; k++)
        s->table_cfgs[k] = p->tables[k];
    for (int k = 0; k < p->num_tables; k++)
        s->tables[k].cfg = &s->table_cfgs[k];
    s->user = (dt_user_model){.specs = s->specs,
                              .count = s->count,
                              .tables = s->table_cfgs,
                              .num_tables = s->num_tables,
                              .describe = s->describe,
                              .ctx = s,
                              .init = init_values,
                              .loss_grad = loss_grad,
                              .scalars = scalars,
                              .histogram = histogram};
    s->init = p->init;
    s->init_ctx = p->init_ctx;
    s->wp = (dt_worker_params){.cluster = p->cluster,
                               .job = &s->job,
                               .task_index = p->task_index,
                               .security = p->security,
                               .user = &s->user};
    pthread_mutex_lock(&s->mu);
    s->phase = PHASE_LOOP;
    s->closed = 0;
    dt_spin_cover(1); /* the program spins through the loop's calls; run_role ends it */
    if (pthread_create(&s->thread, NULL, run_role, s) != 0) {
        dt_spin_cover(-1);
        s->phase = PHASE_ENDED;
        s->closed = 1;
        pthread_mutex_unlock(&s->mu);
        return dt_err_set(err, DT_EINTERNAL, "session: cannot start the training thread");
    }
    s->thread_started = 1;
    int rc = await_values(s, err);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* mu held: room in t's buffer of this step for n ids and their rows'
 * gradient. */
static int reserve_ids(session_table *t, int64_t n, dt_err *err) {
    table_buf *b = &t->bufs[t->cur];
    if (n <= b->cap) return 0;
    int64_t cells;
    if (__builtin_mul_overflow(n, (int64_t)t->cfg->dim, &cells) ||
        cells > INT64_MAX / (int64_t)sizeof(float))
        return dt_err_set(err, DT_EINVAL,
                          "session: lookup \"%s\": %lld ids of %d floats are too many",
                          t->cfg->name, (long long)n, t->cfg->dim);
    int64_t *grown_ids = dt_realloc(b->ids, (size_t)n * sizeof *grown_ids);
    if (grown_ids) b->ids = grown_ids;
    float *grown = grown_ids ? dt_realloc(b->row_grads, (size_t)cells * sizeof *grown) : NULL;
    if (grown) b->row_grads = grown;
    if (!grown_ids || !grown)
        return dt_err_set(err, DT_ENOMEM, "session: lookup \"%s\": out of memory", t->cfg->name);
    b->cap = n;
    return 0;
}

int dt_session_lookup(dt_session *s, int table, const int64_t *ids, int64_t n, float *rows,
                      dt_err *err) {
    if (table < 0 || table >= s->num_tables)
        return dt_err_set(err, DT_EPRECOND,
                          "session: lookup: the model has no table %d (it has %d)", table,
                          s->num_tables);
    session_table *t = &s->tables[table];
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    if (s->phase != PHASE_VALUES) {
        if (s->phase == PHASE_ENDED && s->rc < 0) rc = dt_err_set(err, s->rc, "%s", s->err.msg);
        goto out; /* the job is done: the caller sees the end */
    }
    if ((rc = reserve_ids(t, n, err)) < 0) goto out;
    memcpy(t->bufs[t->cur].ids, ids, (size_t)n * sizeof *ids);
    t->bufs[t->cur].n = n;
    s->lookup_table = table;
    s->lookup_rows = rows;
    s->phase = PHASE_LOOKUP;
    double t0 = dt_now_secs();
    unsigned handed = atomic_load(&s->handed);
    atomic_fetch_add_explicit(&s->posts, 1, memory_order_release);
    pthread_cond_broadcast(&s->cv);
    if (dt_spin_worth(s->lookup_hits)) spin_while(s, &s->handed, handed);
    while (s->phase == PHASE_LOOKUP || s->phase == PHASE_LOOP)
        pthread_cond_wait(&s->cv, &s->mu);
    dt_spin_note(&s->lookup_hits, t0);
    if (s->phase == PHASE_ENDED && s->rc < 0) rc = dt_err_set(err, s->rc, "%s", s->err.msg);
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int dt_session_step(dt_session *s, const float *const *grads, const float *const *row_grads,
                    double loss, dt_session_result *r, dt_err *err) {
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    if (s->phase != PHASE_VALUES) {
        rc = s->phase == PHASE_ENDED && s->rc < 0
                 ? dt_err_set(err, s->rc, "%s", s->err.msg)
                 : dt_err_set(err, DT_EPRECOND, "session: step: the job is done");
        goto out;
    }
    for (int k = 0; k < s->num_tables; k++)
        if (!row_grads || !row_grads[k] || !s->tables[k].looked_up) {
            rc = dt_err_set(err, DT_EPRECOND,
                            "session: step: the model has table \"%s\": look up the batch's rows "
                            "first and give their gradient",
                            s->tables[k].cfg->name);
            goto out;
        }
    s->grads = grads;
    s->row_grads_in = s->num_tables > 0 ? row_grads : NULL;
    s->loss = loss;
    s->phase = PHASE_GRADS;
    double t0 = dt_now_secs();
    unsigned handed = atomic_load(&s->handed);
    atomic_fetch_add_explicit(&s->posts, 1, memory_order_release);
    pthread_cond_broadcast(&s->cv);
    if (dt_spin_worth(s->step_hits)) spin_while(s, &s->handed, handed);
    /* The loop takes the gradient (phase LOOP), pushes it, and hands the
     * next values over (VALUES) or ends (ENDED). */
    while (s->phase == PHASE_GRADS)
        pthread_cond_wait(&s->cv, &s->mu);
    s->local_step++;
    rc = await_values(s, err);
    dt_spin_note(&s->step_hits, t0);
out:
    if (r) {
        r->global_step = s->vars_step;
        r->local_step = s->local_step;
        r->done = s->phase == PHASE_ENDED;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int dt_session_ended(const dt_session *s) {
    dt_session *m = (dt_session *)s; /* the lock, not the state, changes */
    pthread_mutex_lock(&m->mu);
    int ended = m->phase == PHASE_ENDED;
    pthread_mutex_unlock(&m->mu);
    return ended;
}

int64_t dt_session_global_step(const dt_session *s) {
    dt_session *m = (dt_session *)s;
    pthread_mutex_lock(&m->mu);
    int64_t step = m->vars_step;
    pthread_mutex_unlock(&m->mu);
    return step;
}

int dt_session_scalar(dt_session *s, const char *name, double value, dt_err *err) {
    if (!name || !name[0] || strlen(name) >= DT_TENSOR_NAME_MAX)
        return dt_err_set(err, DT_EINVAL, "session: summary: a name of 1..%d bytes",
                          DT_TENSOR_NAME_MAX - 1);
    pthread_mutex_lock(&s->mu);
    int i = 0;
    while (i < s->num_scalars && strcmp(s->scalar_tags[i], name) != 0)
        i++;
    int rc = 0;
    if (i == DT_SESSION_MAX_SCALARS) {
        rc = dt_err_set(err, DT_EINVAL, "session: summary \"%s\": at most %d names", name,
                        DT_SESSION_MAX_SCALARS);
    } else {
        if (i == s->num_scalars) {
            snprintf(s->scalar_tags[i], sizeof s->scalar_tags[i], "%s", name);
            s->scalar_ptrs[i] = s->scalar_tags[i];
            s->num_scalars++;
        }
        s->scalar_values[i] = value;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int dt_session_histogram(dt_session *s, const char *name, const float *values, int64_t n,
                         dt_err *err) {
    if (!name || !name[0] || strlen(name) >= DT_TENSOR_NAME_MAX || n < 0 || (n > 0 && !values) ||
        n > INT64_MAX / (int64_t)sizeof(float))
        return dt_err_set(err, DT_EINVAL,
                          "session: histogram: a name of 1..%d bytes and n >= 0 "
                          "values",
                          DT_TENSOR_NAME_MAX - 1);
    pthread_mutex_lock(&s->mu);
    int i = 0, rc = 0;
    while (i < s->num_hists && strcmp(s->hist_tags[i], name) != 0)
        i++;
    if (i == DT_SESSION_MAX_SCALARS) {
        rc = dt_err_set(err, DT_EINVAL, "session: histogram \"%s\": at most %d names", name,
                        DT_SESSION_MAX_SCALARS);
        goto out;
    }
    if (n > s->hist_cap[i]) {
        float *grown = dt_realloc(s->hist_values[i], (size_t)n * sizeof *grown);
        if (!grown) {
            rc = dt_err_set(err, DT_ENOMEM, "session: histogram \"%s\": out of memory", name);
            goto out;
        }
        s->hist_values[i] = grown;
        s->hist_cap[i] = n;
    }
    if (n > 0) memcpy(s->hist_values[i], values, (size_t)n * sizeof *values);
    s->hist_n[i] = n;
    if (i == s->num_hists) {
        snprintf(s->hist_tags[i], sizeof s->hist_tags[i], "%s", name);
        s->num_hists++;
    }
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void dt_session_stop(dt_session *s) {
    atomic_store(&s->stop, 1);
}

int dt_session_close(dt_session *s, dt_err *err) {
    if (!s->closed) {
        pthread_mutex_lock(&s->mu);
        int ended = s->phase == PHASE_ENDED;
        pthread_mutex_unlock(&s->mu);
        if (!ended) dt_session_stop(s);
        pthread_join(s->thread, NULL);
        s->closed = 1;
    }
    if (s->rc < 0) return dt_err_set(err, s->rc, "%s", s->err.msg);
    return 0;
}

void dt_session_free(dt_session *s) {
    if (!s) return;
    if (s->thread_started) dt_session_close(s, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    for (int i = 0; i < DT_SESSION_MAX_SCALARS; i++)
        free(s->hist_values[i]);
    for (int k = 0; k < s->num_tables; k++)
        for (int b = 0; b < 2; b++) {
            free(s->tables[k].bufs[b].ids);
            free(s->tables[k].bufs[b].row_grads);
        }
    free(s->specs);
    free(s);
}
