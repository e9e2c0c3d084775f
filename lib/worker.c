/*
 * worker: pull -> forward/backward -> push, with waiting and retries.
 *
 * The loop reads top to bottom like the algorithm:
 *   pull(vars) -> next_batch -> loss_grad(vars, batch) -> push(grads)
 * With pipeline_push the push of one gradient runs on a second thread while
 * this one computes the next, from the values it has:
 *   push(grads) || loss_grad(vars, next batch) -> grads'; vars' from the push
 * vars and grads are two slabs laid out by the model's specs; the dataset
 * owns the batch buffers; the ps client reuses its call state. Nothing that
 * grows with the model is allocated per step except the messages themselves.
 *
 * A sparse model (job "sparse") takes the same loop: its batch is gathered
 * from a CSR set of this worker's shard, shuffled each epoch by the dense
 * data's rule (dt_sparse_feed), its table's rows for the batch's
 * distinct ids are pulled before the gradient (SparsePull, fanned out by
 * placement), and the push carries their gradient, one row per distinct id
 * with every occurrence summed, beside the dense variables':
 *   pull(vars) -> next_batch -> pull_rows(ids) -> loss_grad -> push(grads, rows)
 *
 * One call site of the model: every gradient comes through a
 * dt_user_model's loss_grad (model_grad), a program's (lib/session) or a
 * built-in model's (builtin_dense_grad, builtin_sparse_grad), so the
 * binary's models and a program's share the loop, its retries and its
 * row pulls.
 *
 * Threading: one thread; with pipeline_push a second one, started once,
 * makes each push (the ps client, the push's gradient and the values it
 * brings back are its own meanwhile; hooks run when no push is in flight).
 * Row pulls are then made through a second client of the main thread's,
 * into the other of two batch buffers: the push in flight reads its
 * batch's ids and rows' gradient from its own.
 */
#include "worker.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "data.h"
#include "heartbeat.h"
#include "log.h"
#include "loss_watch.h"
#include "memstat.h"
#include "model.h"
#include "sparse_model.h"
#include "train_metrics.h"

/* One batch's sparse state (U distinct ids, D floats a row). */
typedef struct {
    dt_sparse_index ix; /* the batch's distinct ids */
    float *rows;        /* (U, D) the batch's rows, as pulled */
    float *row_grads;   /* (U, D) their gradient */
    int64_t cap;        /* floats each holds */
} sparse_buf;

struct dt_worker {
    dt_worker_params params; /* params.job points to job */
    dt_job job;              /* the caller's, with the shapes it leaves unset read from the data */
    char name[96];
    dt_dataset *data;
    dt_tensors vars;  /* last pulled values */
    dt_tensors grads; /* same layout */
    /* pipeline_push: the values a push in flight brings back, and the
     * gradient computed meanwhile (swapped with vars and grads after). */
    dt_tensors vars_next, grads_next;
    dt_model *model; /* scratch of the forward/backward pass */
    dt_ps_client *client;
    uint64_t rng;        /* jitter */
    int64_t max_steps;   /* the job's end as the ps tasks said it; 0: not known yet */
    int64_t local_steps; /* pushed by the last dt_worker_train, with resumed_at */
    int64_t resumed_at;  /* local steps an earlier run of this task made (resume) */
    /* async, bounded with "epochs": the local steps of `epochs` passes over
     * this worker's shard, after which it waits for the others (0: no
     * bound; see dt_worker_train). */
    int64_t shard_steps;
    /* Test-only (worker.h): the local step after which the process stops
     * itself, from DT_TEST_WORKER_STOP_AT; 0: never. */
    int64_t stop_at;
    /* A sparse model (dt_job_is_sparse); data and model above are NULL. */
    int sparse;
    dt_sparse_set set;   /* this worker's shard of the training file */
    dt_sparse_feed feed; /* set's rows shuffled each epoch, as dense data's */
    dt_sparse_model *smodel;
    dt_table_config table; /* the model's table */
    /* A batch's rows: two, taken in turn a step each (with pipeline_push
     * the push in flight reads one's ids and gradient while the next batch
     * fills the other). cur: the last step's. */
    sparse_buf bufs[2];
    int cur;
    /* pipeline_push: the client of the row pulls, made while the push
     * thread uses client (a client serves one thread at a time). */
    dt_ps_client *rows_client;
    /* pipeline_push: the sender whose push is in flight while the next
     * gradient is computed (row pulls then go through rows_client);
     * NULL when none is. */
    struct sender *in_flight;
    int64_t rows_moved;   /* rows pulled (and pushed) over all steps, for the end's log */
    int64_t sparse_steps; /* steps those were for */
    /* With "epochs" and other workers: tells the ps tasks this one is alive
     * from before its data is read to the end, so the others, waiting,
     * tell it from a gone one (wait_for_others). NULL otherwise. */
    dt_heartbeat *heartbeat;
    /* A user's model (params.user): no data of the job's is read. */
    const dt_user_model *user;
    /* The model the loop computes through, a program's or, for a built-in
     * one, builtin: the gradient comes from its loss_grad, given the
     * global step of the values it is computed at (vars_step). */
    const dt_user_model *src;
    dt_user_model builtin;
    int64_t vars_step;
    dt_loss_watch loss_watch; /* every loss computed, in order (watch_loss) */
};

/* The built-in models' loss_grad (dt_user_model; below). */
static int builtin_dense_grad(void *ctx, const dt_tensors *vars, int64_t vars_step,
                              dt_user_rows *io, dt_tensors *grads, double *loss, dt_err *err);
static int builtin_sparse_grad(void *ctx, const dt_tensors *vars, int64_t vars_step,
                               dt_user_rows *io, dt_tensors *grads, double *loss, dt_err *err);

/* What a waiting worker knows of each other training task
 * (wait_for_others). */
typedef struct {
    double heard_at; /* dt_now_secs() of its latest call a ps saw, the wait's start at first */
    int excused;     /* in the last round: its passes are done, or it failed and left */
} other_task;

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000L, (us % 1000000L) * 1000L};
    nanosleep(&ts, NULL);
    dt_train_metrics_phase(DT_PHASE_WAIT,
                           (double)us * 1e-6); /* every wait of the loop's sleeps here */
}

/* What every wait returns once *stop is set. */
static int stopped(const dt_worker *w, dt_err *err) {
    return dt_err_set(err, DT_ECANCELLED, "%s: stopped by signal", w->name);
}

dt_ps_client *dt_worker_client(dt_worker *w) {
    return w->client;
}
dt_tensors *dt_worker_vars(dt_worker *w) {
    return &w->vars;
}
dt_dataset *dt_worker_data(dt_worker *w) {
    return w->data;
}
const dt_loss_watch *dt_worker_loss_watch(const dt_worker *w) {
    return &w->loss_watch;
}
dt_model *dt_worker_model(dt_worker *w) {
    return w->model;
}
int dt_worker_tables(const dt_worker *w, const dt_table_config **out) {
    *out = NULL;
    if (w->sparse) *out = &w->table;
    if (w->user && w->user->num_tables > 0) *out = w->user->tables;
    return w->sparse ? 1 : w->user ? w->user->num_tables : 0;
}
const dt_table_config *dt_worker_sparse_table(const dt_worker *w) {
    return w->sparse ? &w->table : NULL;
}
int64_t dt_worker_examples(const dt_worker *w) {
    if (w->user) return 0; /* no data: the job sets max_steps */
    return w->sparse ? w->set.file_rows : dt_data_total(w->data);
}
const dt_job *dt_worker_job(const dt_worker *w) {
    return &w->job;
}

/* Whether this job's workers pipeline their pushes (never in sync mode: a
 * gradient there must be for the step being made). */
static int pipelined(const dt_job *job) {
    return job->pipeline_push && job->consistency.mode != DT_MODE_SYNC;
}

/* Whether each worker keeps to its shard's "epochs" passes and then waits
 * for the others (async and bounded jobs that set epochs, not max_steps). */
static int bounded_by_shard(const dt_job *job) {
    return job->max_steps == 0 && job->consistency.mode != DT_MODE_SYNC;
}

/* The heartbeat's period: four beats to a sync_timeout_secs, so a late or
 * lost one does not make a live worker look gone; at most 5 s apart. */
static int heartbeat_ms(const dt_job *job) {
    int64_t ms = (int64_t)job->consistency.sync_timeout_secs * 1000 / 4;
    return ms > 5000 ? 5000 : ms < 1 ? 1 : (int)ms;
}

int dt_worker_open(const dt_worker_params *params, dt_worker **out, dt_err *err) {
    *out = NULL;
    const dt_cluster *cl = params->cluster;
    if (params->task_index < 0 || params->task_index >= cl->num_workers)
        return dt_err_set(err, DT_EINVAL,
                          "worker: task index %d out of range (cluster has %d workers)",
                          params->task_index, cl->num_workers);
    dt_worker *w = dt_calloc(1, sizeof *w);
    if (!w) return dt_err_set(err, DT_ENOMEM, "worker: out of memory");
    w->params = *params;
    w->job = *params->job;
    w->params.job = &w->job;
    snprintf(w->name, sizeof w->name, "worker:%d %.60s", params->task_index,
             cl->workers[params->task_index].addr);
    w->rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)params->task_index ^ (uint64_t)time(NULL);
    const char *stop_at = getenv("DT_TEST_WORKER_STOP_AT");
    if (stop_at) w->stop_at = strtoll(stop_at, NULL, 10);
    dt_tensor model_specs[DT_MODEL_MAX_VARS];
    const dt_tensor *specs = model_specs;
    int count = 0, rc;
    const dt_job *job = &w->job;
    w->user = params->user;
    dt_ps_client_params cp = {.cluster = cl,
                              .worker = params->task_index,
                              .timeout_ms = job->rpc_timeout_secs * 1000,
                              .placement = job->placement,
                              .security = params->security};
    /* Before the data is read: reading a large file takes a while, and the
     * others, if waiting already, are to see this one alive meanwhile. */
    if (bounded_by_shard(job) && cl->num_workers > 1 &&
        (rc = dt_heartbeat_start(&cp, heartbeat_ms(job), &w->heartbeat, err)) < 0)
        goto fail;
    if (w->user) {
        if (job->max_steps <= 0 || dt_data_has_held_out(&job->data)) {
            rc = dt_err_set(err, DT_ECONFIG,
                            "job: a program's own model needs \"max_steps\" and no "
                            "\"eval_data\" (it reads no data)");
            goto fail;
        }
        specs = w->user->specs;
        count = w->user->count;
    } else if ((rc = dt_job_infer(&w->job, err)) < 0) {
        goto fail;
    }
    w->sparse = !w->user && dt_job_is_sparse(job);
    w->builtin = (dt_user_model){.ctx = w, .loss_grad = builtin_dense_grad};
    if (w->sparse)
        w->builtin = (dt_user_model){
            .tables = &w->table, .num_tables = 1, .ctx = w, .loss_grad = builtin_sparse_grad};
    w->src = w->user ? w->user : &w->builtin;
    if (w->user) {
        /* Its variables are the user's: no data, no built-in model. */
    } else if (w->sparse) {
        /* The dense variables (bias, dense weight) live here; the weight
         * is the table's rows, pulled a batch at a time. */
        dt_sparse_model_config smc;
        if ((rc = dt_job_sparse_vars(job, &smc, &w->table, model_specs, &count, err)) < 0 ||
            (rc = dt_sparse_model_new(&smc, &w->smodel, err)) < 0 ||
            (rc = dt_job_open_sparse(job, 0, params->task_index, cl->num_workers, &w->set, err)) <
                0)
            goto fail;
        if (w->set.rows == 0) {
            rc = dt_err_set(err, DT_ECONFIG, "%s has no rows for worker %d of %d",
                            job->data.train_data, params->task_index, cl->num_workers);
            goto fail;
        }
        if ((rc = dt_sparse_feed_init(&w->feed, &w->set, job->seed, params->task_index, err)) < 0)
            goto fail;
    } else if ((rc = dt_model_specs(&job->model, model_specs, &count, err)) < 0) {
        goto fail;
    }
    if ((rc = dt_tensors_init(&w->vars, specs, count, err)) < 0) goto fail;
    /* Each pull's reply comes in gRPC's slices, freed once copied: keep
     * their pages for the next one (dt_alloc_keep_for_messages). */
    dt_alloc_keep_for_messages(w->vars.slab_bytes);
    if ((rc = dt_tensors_init(&w->grads, specs, count, err)) < 0) goto fail;
    if (pipelined(job) && ((rc = dt_tensors_init(&w->vars_next, specs, count, err)) < 0 ||
                           (rc = dt_tensors_init(&w->grads_next, specs, count, err)) < 0))
        goto fail;
    if (!w->sparse && !w->user &&
        ((rc = dt_model_new(&job->model, &w->model, err)) < 0 ||
         (rc = dt_job_open_data(job, params->task_index, cl->num_workers, &w->data, err)) < 0))
        goto fail;
    /* Each worker its own masks, the same every run of the job. */
    if (w->model) dt_model_seed_dropout(w->model, job->seed + (uint64_t)params->task_index);
    /* Every worker reads the whole file: each chooses the same epochs. */
    if (!w->user) dt_job_choose_epochs(&w->job, dt_worker_examples(w));
    /* max_steps from epochs covers every shard's passes together; each
     * worker keeps to its own, so how fast one starts or runs does not
     * decide which rows are seen (sync runs the workers in step anyway). */
    if (bounded_by_shard(job) &&
        (rc = dt_job_steps_for(job, w->sparse ? w->set.rows : dt_data_size(w->data),
                               &w->shard_steps, err)) < 0)
        goto fail;
    cp.copy_threads = job->pull_copy_threads; /* not the heartbeat's: it pulls nothing */
    if ((rc = dt_ps_client_new(&cp, &w->vars, &w->client, err)) < 0) goto fail;
    const dt_table_config *tables;
    if (dt_worker_tables(w, &tables) > 0 && pipelined(job) &&
        (rc = dt_ps_client_new(&cp, &w->vars, &w->rows_client, err)) < 0)
        goto fail;
    /* The job's classes are known now (dt_job_infer). */
    dt_loss_watch_init(&w->loss_watch, DT_LOSS_WATCH_WARMUP, dt_job_loss_ceiling(job));
    *out = w;
    return 0;
fail:
    dt_err_wrap(err, rc, "%s", w->name);
    dt_worker_free(w);
    return rc;
}

void dt_worker_free(dt_worker *w) {
    if (!w) return;
    dt_heartbeat_free(w->heartbeat);
    dt_ps_client_free(w->client);
    dt_ps_client_free(w->rows_client);
    dt_data_free(w->data);
    dt_tensors_deinit(&w->vars);
    dt_tensors_deinit(&w->grads);
    dt_tensors_deinit(&w->vars_next);
    dt_tensors_deinit(&w->grads_next);
    dt_model_free(w->model);
    dt_sparse_feed_deinit(&w->feed);
    dt_sparse_set_deinit(&w->set);
    dt_sparse_model_free(w->smodel);
    for (int k = 0; k < 2; k++) {
        dt_sparse_index_deinit(&w->bufs[k].ix);
        free(w->bufs[k].rows);
        free(w->bufs[k].row_grads);
    }
    free(w);
}

/* ---- waiting ----------------------------------------------------------- */

static int retryable(int code) {
    return code == DT_EUNAVAILABLE || code == DT_EDEADLINE || code == DT_EPRECOND;
}

/* The first wait between two tries of a call, and the longest. A ps just
 * started or a model about to be created answers within tens of ms, and the
 * demo's whole job takes a fraction of a second: a worker that first slept
 * 0.6 s found it over. A peer that stays down is asked at most once a
 * second. */
#define RETRY_FIRST_MS 20
#define RETRY_MAX_MS 1000

int dt_worker_retry(dt_worker *w, const char *what, int (*fn)(void *arg, dt_err *err), void *arg,
                    const dt_worker_hooks *hooks, const atomic_int *stop, dt_err *err) {
    double start = dt_now_secs(), last_log = 0;
    int budget_s = w->params.job->ready_wait_secs;
    int backoff_ms = RETRY_FIRST_MS;
    int last_rc = 0;
    for (;;) {
        dt_err attempt;
        dt_err_clear(&attempt);
        int rc = fn(arg, &attempt);
        if (rc >= 0) {
            if (last_log > 0) /* it said it waited: say the wait is over */
                dt_log(DT_LOG_INFO, "%s: %s: answered again after %.1f s", w->name, what,
                       dt_now_secs() - start);
            return rc;
        }
        if (!retryable(rc)) return dt_err_set(err, rc, "%s", attempt.msg);
        dt_train_metrics_retry(rc);
        if (rc == DT_EPRECOND && hooks && hooks->on_not_ready) {
            int hrc = hooks->on_not_ready(hooks->ctx, err);
            if (hrc < 0) return hrc;
        }
        double waited = dt_now_secs() - start;
        if (waited >= budget_s)
            return dt_err_set(err, DT_EUNAVAILABLE, "%s: %s: gave up after %d s: %s", w->name, what,
                              budget_s, attempt.msg);
        if (waited - last_log >= 5 || last_log == 0) {
            dt_log(DT_LOG_WARN, "%s: waiting for %s for %.0f s: %s", w->name, what, waited,
                   attempt.msg);
            last_log = waited > 0 ? waited : 1e-9;
        }
        if (stop && *stop) return stopped(w, err);
        /* A new answer (a ps that was unreachable now says "not ready": it
         * is up, and the chief creates the model next) starts the backoff
         * again, so the model is seen within tens of ms of its creation. */
        if (rc != last_rc) backoff_ms = RETRY_FIRST_MS;
        last_rc = rc;
        /* Exponential backoff, full jitter in [backoff/2, backoff]. */
        w->rng = w->rng * 6364136223846793005ull + 1442695040888963407ull;
        int jitter = (int)((w->rng >> 33) % (uint64_t)(backoff_ms / 2 + 1));
        sleep_us(1000L * (backoff_ms / 2 + jitter));
        if (backoff_ms < RETRY_MAX_MS)
            backoff_ms = backoff_ms * 2 < RETRY_MAX_MS ? backoff_ms * 2 : RETRY_MAX_MS;
    }
}

typedef struct {
    dt_worker *w;
    int ready;
    int done;
    int64_t global_step;        /* the highest of the ps tasks' */
    other_task *others;         /* (num_workers) while waiting for them; else NULL */
    char job_id[DT_JOB_ID_MAX]; /* the job id the ps tasks know (empty: none yet) */
    int job_id_ps;              /* the first task that said it */
} ready_probe;

/* Every ps task that knows a job id must know the same: tasks of two jobs
 * in one cluster would mix their variables. DT_EEXIST naming both. */
static int same_job_id(ready_probe *pr, int p, const char *id, dt_err *err) {
    if (!id[0]) return 0;
    if (!pr->job_id[0]) {
        snprintf(pr->job_id, sizeof pr->job_id, "%s", id);
        pr->job_id_ps = p;
        return 0;
    }
    if (strcmp(pr->job_id, id) == 0) return 0;
    dt_ps_client *c = pr->w->client;
    return dt_err_set(err, DT_EEXIST,
                      "%s: the ps tasks know different jobs: %s has job id %s, %s has %s "
                      "(a ps of another job in this cluster: restart it for this one)",
                      pr->w->name, dt_ps_client_name(c, pr->job_id_ps), pr->job_id,
                      dt_ps_client_name(c, p), id);
}

/* What ps reply st says of the other training tasks, into pr->others: a
 * task is alive as of the latest call any ps task saw from it. */
static void note_others(ready_probe *pr, const dt_msg_status_resp *st) {
    const int n = pr->w->params.cluster->num_workers;
    const double now = dt_now_secs();
    for (int i = 0; i < st->num_workers; i++) {
        const dt_worker_activity *a = &st->workers[i];
        if (a->worker < 0 || a->worker >= n || a->worker == pr->w->params.task_index) continue;
        other_task *o = &pr->others[a->worker];
        if (a->last_seen_ms >= 0 && now - (double)a->last_seen_ms / 1e3 > o->heard_at)
            o->heard_at = now - (double)a->last_seen_ms / 1e3;
        if (a->passes_done || a->failure[0]) o->excused = 1;
    }
}

/* One round of Status calls: fails while any ps is down or not ready. */
static int probe_ready(void *arg, dt_err *err) {
    ready_probe *pr = arg;
    dt_worker *w = pr->w;
    for (int k = 0; pr->others && k < w->params.cluster->num_workers; k++)
        pr->others[k].excused = 0;
    pr->job_id[0] = '\0';
    for (int p = 0; p < dt_ps_client_num_ps(w->client); p++) {
        dt_msg_status_resp st;
        int rc = dt_ps_client_status(w->client, p, &st, err);
        /* A task no chief has created yet knows at most what it read on
         * disk: only a created (or finished) task's id is the job's. */
        if (rc == 0 && (st.ready || st.done)) rc = same_job_id(pr, p, st.job_id, err);
        if (rc < 0) return rc;
        if (pr->others) note_others(pr, &st);
        if (st.failure[0])
            return dt_err_set(err, DT_EABORTED, "%s: %s: job failed: %s", w->name,
                              dt_ps_client_name(w->client, p), st.failure);
        if (st.max_steps > w->max_steps) w->max_steps = st.max_steps;
        if (st.global_step > pr->global_step) pr->global_step = st.global_step;
        if (st.done) {
            pr->done = 1;
            return 0;
        }
        if (!st.ready)
            return dt_err_set(err, DT_EPRECOND, "%s: model not created yet (the chief creates it)",
                              dt_ps_client_name(w->client, p));
    }
    pr->ready = 1;
    return 0;
}

int dt_worker_wait_ready(dt_worker *w, const atomic_int *stop, dt_err *err) {
    ready_probe pr = {w, 0, 0, 0, NULL, "", 0};
    int rc = dt_worker_retry(w, "the model to be ready", probe_ready, &pr, NULL, stop, err);
    if (rc < 0) return rc;
    /* Said once, when first seen: ready, or already over. */
    if (pr.job_id[0]) dt_log_set_job_id(pr.job_id);
    dt_log(DT_LOG_INFO, "%s: job id %s", w->name, pr.job_id[0] ? pr.job_id : "(none)");
    return pr.done ? 1 : 0;
}

/* ---- training ---------------------------------------------------------- */

typedef struct {
    dt_worker *w;
    int64_t min_global_step;
    dt_ps_reply reply;
} pull_state;

static int do_pull(void *arg, dt_err *err) {
    pull_state *ps = arg;
    return dt_ps_client_pull(ps->w->client, &ps->w->vars, NULL, ps->min_global_step, &ps->reply,
                             err);
}

typedef struct {
    dt_worker *w;
    int64_t step;
    int fuse;                 /* also take the next step's variables (job's fuse_push_pull) */
    int64_t min_global_step;  /* with fuse: as the next pull's */
    const dt_tensors *grads;  /* what is pushed */
    dt_tensors *into;         /* with fuse: where the variables go */
    const dt_ps_sparse *rows; /* (nrows) the rows' gradients of the model's tables */
    int nrows;
    dt_ps_reply reply;
} push_state;

/* A push refused because a value would not be finite (a NaN or Inf in
 * the gradient, or an update that overflows): the model diverges, and the
 * log says what to change. */
static void say_not_finite(const dt_worker *w, const dt_err *why) {
    const dt_job *job = w->params.job;
    dt_log(DT_LOG_ERROR,
           "%s: %s: the model diverges: lower \"learning_rate\" (now %g, %s), clip or scale "
           "the gradients in the model, or set \"nonfinite\": \"skip\" to skip such updates "
           "and count them (Status: updates_nonfinite)",
           w->name, why->msg, job->optim.learning_rate, dt_optim_name(job->optim.kind));
}

static int do_push(void *arg, dt_err *err) {
    push_state *ps = arg;
    int rc;
    if (ps->nrows > 0)
        rc = dt_ps_client_push_sparse(ps->w->client, ps->grads, ps->rows, ps->nrows, ps->step,
                                      ps->fuse ? ps->into : NULL, ps->min_global_step, &ps->reply,
                                      err);
    else if (ps->fuse)
        rc = dt_ps_client_push_pull(ps->w->client, ps->grads, ps->step, ps->into,
                                    ps->min_global_step, &ps->reply, err);
    else
        rc = dt_ps_client_push(ps->w->client, ps->grads, ps->step, &ps->reply, err);
    if (rc == DT_EINVAL && err &&
        (strstr(err->msg, "is not finite") || strstr(err->msg, "would not be finite")))
        say_not_finite(ps->w, err);
    return rc;
}

/*
 * Pulls the variables, waiting while a ps answers "not yet": in sync mode
 * until the step after the one this worker pushed is applied, in bounded
 * mode while this worker is too far ahead. The ps bounds both waits (it
 * applies a partial step, or stops waiting for a silent worker, after
 * sync_timeout_secs); this loop gives up only well past that.
 */
static int pull_when_ready(dt_worker *w, pull_state *pull, const dt_worker_hooks *hooks,
                           const atomic_int *stop, dt_err *err) {
    const dt_job *job = w->params.job;
    double start = dt_now_secs(), last_log = start;
    int nap_us = 200;
    for (;;) {
        int rc = dt_worker_retry(w, "pull", do_pull, pull, hooks, stop, err);
        if (rc < 0 || !pull->reply.wait || pull->reply.done) return rc;
        double now = dt_now_secs();
        if (now - start > 2.0 * job->consistency.sync_timeout_secs + job->ready_wait_secs)
            return dt_err_set(err, DT_EUNAVAILABLE,
                              "%s: no progress from the other workers for "
                              "%.0f s (%s mode)",
                              w->name, now - start, dt_mode_name(job->consistency.mode));
        if (now - last_log >= 5) {
            dt_log(DT_LOG_INFO, "%s: waiting for the other workers for %.0f s (%s mode)", w->name,
                   now - start, dt_mode_name(job->consistency.mode));
            last_log = now;
        }
        if (stop && *stop) return stopped(w, err);
        sleep_us(nap_us);
        if (nap_us < 20000) nap_us *= 2;
    }
}

/* "linear/weight=1.9981 linear/bias=0.0123" for one-element variables: the
 * tutorial's "W= b=" view of a small model. */
static void scalar_summary(const dt_tensors *vars, char *buf, size_t cap) {
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < vars->count && off < cap; i++) {
        const dt_tensor *t = &vars->items[i];
        if (dt_tensor_numel(t) != 1 || t->dtype != DT_DTYPE_F32) continue;
        int n =
            snprintf(buf + off, cap - off, " %s=%.4f", t->name, (double)*(const float *)t->data);
        if (n < 0) break;
        off += (size_t)n;
    }
}

/* "42.0%, ETA 1 min 5 s" from the global step's rate since the last line
 * (global_last < 0: none yet); empty while max_steps is unknown. */
static void progress_text(const dt_worker *w, const dt_step_result *r, double secs,
                          int64_t global_last, char *buf, size_t cap) {
    buf[0] = '\0';
    if (w->max_steps <= 0) return;
    int n = snprintf(buf, cap, " %.1f%%", 100.0 * (double)r->global_step / (double)w->max_steps);
    double rate = global_last >= 0 && secs > 0 ? (double)(r->global_step - global_last) / secs : 0;
    if (n < 0 || (size_t)n >= cap || rate <= 0 || r->global_step >= w->max_steps) return;
    long long eta = (long long)((double)(w->max_steps - r->global_step) / rate + 0.5);
    if (eta < 60)
        snprintf(buf + n, cap - (size_t)n, " ETA %lld s", eta);
    else if (eta < 3600)
        snprintf(buf + n, cap - (size_t)n, " ETA %lld min %lld s", eta / 60, eta % 60);
    else
        snprintf(buf + n, cap - (size_t)n, " ETA %lld h %lld min", eta / 3600, eta / 60 % 60);
}

/* The progress line: local and global step, loss, this worker's rate,
 * the job's percent done and ETA, the scalars. */
static void log_progress(dt_worker *w, const dt_step_result *r, double t_last, int64_t step_last,
                         int64_t global_last) {
    double secs = dt_now_secs() - t_last;
    if (secs < 1e-9) secs = 1e-9;
    char vals[256], progress[64];
    scalar_summary(&w->vars, vals, sizeof vals);
    progress_text(w, r, secs, global_last, progress, sizeof progress);
    const double rate = (double)(r->local_step - step_last) / secs;
    const dt_log_field f[] = {DT_LOG_INT("step", r->local_step),
                              DT_LOG_INT("global_step", r->global_step),
                              DT_LOG_NUM("loss", r->loss), DT_LOG_NUM("steps_per_sec", rate)};
    dt_log_kv(DT_LOG_INFO, f, 4, "%s: step %lld global_step %lld loss %.6g %.1f steps/s%s%s",
              w->name, (long long)r->local_step, (long long)r->global_step, r->loss, rate, progress,
              vals);
}

void dt_worker_set_max_steps(dt_worker *w, int64_t max_steps) {
    w->max_steps = max_steps;
}

static int training_done(dt_worker *w);

/* pipeline_push's sender: one thread for the whole training, handed one
 * push at a time (sender_post) and giving its outcome back (sender_take),
 * a condition variable each way. (A thread per push cost more than the
 * overlap won: 1,796 steps/s against 3,820 unpipelined, tiny model.) */
typedef struct sender {
    dt_worker *w;
    const dt_worker_hooks *hooks;
    const atomic_int *stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    push_state *push; /* posted, not yet made; under mu */
    push_state *last; /* the one made last; under mu */
    int made;         /* the posted push was made: rc and err hold how */
    int quit;         /* end the thread (no push posted) */
    int rc;
    dt_err err;
    pthread_t thread;
} sender;

static void *sender_main(void *arg) {
    sender *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->push && !s->quit)
            pthread_cond_wait(&s->cv, &s->mu);
        if (!s->push) break;
        push_state *push = s->push;
        pthread_mutex_unlock(&s->mu);
        dt_err err;
        dt_err_clear(&err);
        int rc = dt_worker_retry(s->w, "push", do_push, push, s->hooks, s->stop, &err);
        pthread_mutex_lock(&s->mu);
        s->push = NULL;
        s->last = push;
        s->rc = rc;
        s->err = err;
        s->made = 1;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static int sender_start(sender *s, dt_worker *w, const dt_worker_hooks *hooks,
                        const atomic_int *stop, dt_err *err) {
    memset(s, 0, sizeof *s);
    s->w = w;
    s->hooks = hooks;
    s->stop = stop;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, sender_main, s) != 0) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        return dt_err_set(err, DT_EINTERNAL, "%s: cannot start the push thread", w->name);
    }
    return 0;
}

static void sender_post(sender *s, push_state *push) {
    pthread_mutex_lock(&s->mu);
    s->push = push;
    s->made = 0;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Waits for the posted push; its outcome, with err set on failure. Again
 * after it, the same outcome (nothing is posted in between). */
static int sender_take(sender *s, dt_err *err) {
    pthread_mutex_lock(&s->mu);
    while (!s->made)
        pthread_cond_wait(&s->cv, &s->mu);
    int rc = s->rc;
    if (rc < 0) dt_err_set(err, rc, "%s", s->err.msg);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Ends the thread; no push may be posted and not taken. */
static void sender_stop(sender *s) {
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
}

/* ---- sparse models ---------------------------------------------------------- */

typedef struct {
    dt_ps_client *client;
    dt_ps_sparse rows;
    dt_ps_reply reply;
} rows_pull;

static int do_pull_rows(void *arg, dt_err *err) {
    rows_pull *rp = arg;
    return dt_ps_client_sparse_pull(rp->client, &rp->rows, &rp->reply, err);
}

/* The next batch of this worker's shard: the next batch_size rows of this
 * epoch's shuffled order, copied into the feed's buffers (valid until the
 * next call). */
static int next_sparse_batch(dt_worker *w, dt_sparse_batch *b, dt_err *err) {
    return dt_sparse_feed_next(&w->feed, w->params.job->batch_size, b, err);
}

/* The next batch into *b, its distinct ids into buf, and buf's rows grown
 * to hold them. */
static int sparse_batch(dt_worker *w, sparse_buf *buf, dt_sparse_batch *b, dt_err *err) {
    int rc = next_sparse_batch(w, b, err);
    if (rc < 0) return rc;
    if ((rc = dt_sparse_index_build(&buf->ix, b, err)) < 0) return rc;
    const int64_t want = buf->ix.n * w->table.dim; /* U <= entries < 2^24: no overflow */
    if (want > buf->cap) {
        float *rows = dt_realloc(buf->rows, (size_t)want * sizeof *rows);
        if (rows) buf->rows = rows;
        float *row_grads =
            rows ? dt_realloc(buf->row_grads, (size_t)want * sizeof *row_grads) : NULL;
        if (row_grads) buf->row_grads = row_grads;
        if (!rows || !row_grads) return dt_err_set(err, DT_ENOMEM, "%s: out of memory", w->name);
        buf->cap = want;
    }
    return 0;
}

/* "linear/weight[3] (gradient)": the first value of ts that is not finite,
 * or 0 when every one is (a scan, made only once a loss is not). */
static int first_nonfinite(const dt_tensors *ts, const char *what, char *buf, size_t cap) {
    for (int i = 0; i < ts->count; i++) {
        const dt_tensor *t = &ts->items[i];
        if (t->dtype != DT_DTYPE_F32 || !t->data) continue;
        const float *v = t->data;
        for (int64_t j = 0, n = dt_tensor_numel(t); j < n; j++)
            if (!isfinite(v[j])) {
                snprintf(buf, cap, "; %s %s[%lld] is %g", what, t->name, (long long)j, v[j]);
                return 1;
            }
    }
    return 0;
}

/* Says at once when the loss just computed (from values of global step
 * w->vars_step) is not finite or has grown far past its best
 * (loss_watch.h), naming the step, the first variable or gradient that is
 * not finite, and the likely fix. */
static void watch_loss(dt_worker *w, const dt_tensors *vars, const dt_tensors *grads, double loss) {
    dt_loss_verdict v = dt_loss_watch_add(&w->loss_watch, loss);
    if (v == DT_LOSS_OK) return;
    char hint[160], which[DT_TENSOR_NAME_MAX + 64] = "";
    dt_job_divergence_hint(w->params.job, hint, sizeof hint);
    if (v == DT_LOSS_NONFINITE) {
        if (!first_nonfinite(vars, "value", which, sizeof which))
            (void)first_nonfinite(grads, "gradient", which, sizeof which);
        dt_log(DT_LOG_WARN,
               "%s: global_step %lld: the loss is %g (not finite)%s: training "
               "has diverged; %s",
               w->name, (long long)w->vars_step, loss, which, hint);
        return;
    }
    const dt_loss_watch *lw = &w->loss_watch;
    if (v == DT_LOSS_CEILING)
        dt_log(DT_LOG_WARN,
               "%s: global_step %lld: the loss (smoothed) %.6g is past %.6g, 100x a uniform "
               "guess's: training has diverged; %s",
               w->name, (long long)w->vars_step, lw->smoothed, lw->ceiling, hint);
    else
        dt_log(DT_LOG_WARN,
               "%s: global_step %lld: the loss (smoothed) %.6g is over %.0fx its best %.6g: "
               "training is diverging; %s",
               w->name, (long long)w->vars_step, lw->smoothed, DT_LOSS_WATCH_GROWTH, lw->best,
               hint);
}

/* ---- a model's tables, through the hook ------------------------------------- */

struct dt_user_rows {
    dt_worker *w;
    const dt_worker_hooks *hooks;
    const atomic_int *stop;
    dt_ps_sparse push[DT_MAX_TABLES]; /* (npush) the tables' rows pushed */
    int npush;
    double pull_secs; /* in row pulls (round trips, not compute) */
};

/* A row pull while a push is in flight (the push thread
 * owns w->client and the hooks): one try through w->rows_client. After a
 * retryable failure (a ps restarting, not ready), the push is waited for
 * and the pull retried with the hooks, as every call is: the gradient is
 * then made after the push it would have overlapped. */
static int pull_beside_push(dt_worker *w, rows_pull *rp, const dt_worker_hooks *hooks,
                            const atomic_int *stop, dt_err *err) {
    dt_err attempt;
    dt_err_clear(&attempt);
    int rc = do_pull_rows(rp, &attempt);
    if (rc == 0) return 0;
    if (!retryable(rc)) return dt_err_set(err, rc, "%s", attempt.msg);
    dt_log(DT_LOG_INFO, "%s: pull rows beside the push in flight: %s; again after it", w->name,
           attempt.msg);
    dt_err ignored;
    sender *s = w->in_flight;
    w->in_flight = NULL;
    /* run_pipelined takes the push's outcome; when it failed or ended the
     * job, this gradient is not pushed: no pull. */
    if (sender_take(s, &ignored) < 0 || s->last->reply.done) {
        rp->reply.done = 1;
        return 0;
    }
    return dt_worker_retry(w, "pull rows", do_pull_rows, rp, hooks, stop, err);
}

int dt_user_rows_pull(dt_user_rows *io, const dt_ps_sparse *s, dt_err *err) {
    dt_worker *w = io->w;
    const double t0 = dt_now_secs();
    rows_pull rp = {.client = w->in_flight ? w->rows_client : w->client, .rows = *s};
    int rc = w->in_flight
                 ? pull_beside_push(w, &rp, io->hooks, io->stop, err)
                 : dt_worker_retry(w, "pull rows", do_pull_rows, &rp, io->hooks, io->stop, err);
    io->pull_secs += dt_now_secs() - t0;
    if (rc < 0) return rc;
    w->rows_moved += s->n;
    return rp.reply.done ? 1 : 0;
}

void dt_user_rows_push(dt_user_rows *io, const dt_ps_sparse *s) {
    DT_ASSERT(io->npush < DT_MAX_TABLES);
    if (s->n > 0) io->push[io->npush++] = *s;
}

/* The model's gradient at vars into grads, through its loss_grad (a
 * program's or a built-in one's, the one call site of either): it pulls
 * the batch's rows of its tables, if it has any, and says their
 * gradients, into out (*nout of them) for the push. 1: the job is done. */
static int model_grad(dt_worker *w, const dt_tensors *vars, dt_tensors *grads, double *loss,
                      dt_ps_sparse *out, int *nout, const dt_worker_hooks *hooks,
                      const atomic_int *stop, dt_err *err) {
    dt_user_rows io = {.w = w, .hooks = hooks, .stop = stop};
    const double t0 = dt_now_secs();
    int rc = w->src->loss_grad(w->src->ctx, vars, w->vars_step, &io, grads, loss, err);
    dt_train_metrics_phase(DT_PHASE_COMPUTE, dt_now_secs() - t0 - io.pull_secs);
    if (rc != 0) return rc;
    watch_loss(w, vars, grads, *loss);
    memcpy(out, io.push, (size_t)io.npush * sizeof *out);
    *nout = io.npush;
    if (w->src->num_tables > 0) w->sparse_steps++;
    return 0;
}

/* ---- the built-in models, on the hook a program's model takes --------------- */

/* A dense model's next batch: its loss and gradient at vars. */
static int builtin_dense_grad(void *ctx, const dt_tensors *vars, int64_t vars_step,
                              dt_user_rows *io, dt_tensors *grads, double *loss, dt_err *err) {
    (void)vars_step, (void)io;
    dt_worker *w = ctx;
    dt_batch batch;
    int rc = dt_data_next(w->data, w->params.job->batch_size, &batch, err);
    return rc < 0 ? rc : dt_model_loss_grad(w->model, vars, &batch, grads, loss, err);
}

/* A sparse model's next batch, in the buffer the last step's push is not
 * reading: its distinct ids' rows pulled, the loss and both gradients
 * (the rows' handed to the push). 1: a ps said the job is done. */
static int builtin_sparse_grad(void *ctx, const dt_tensors *vars, int64_t vars_step,
                               dt_user_rows *io, dt_tensors *grads, double *loss, dt_err *err) {
    (void)vars_step;
    dt_worker *w = ctx;
    w->cur = !w->cur;
    sparse_buf *buf = &w->bufs[w->cur];
    dt_sparse_batch b;
    int rc = sparse_batch(w, buf, &b, err);
    if (rc < 0) return rc;
    const dt_table_config *t = &w->table;
    if ((rc = dt_user_rows_pull(
             io, &(dt_ps_sparse){t->name, t->dim, buf->ix.n, buf->ix.ids, buf->rows}, err)) != 0)
        return rc;
    if ((rc = dt_sparse_model_loss_grad(w->smodel, vars, &b, &buf->ix, buf->rows, grads,
                                        buf->row_grads, loss, err)) < 0)
        return rc;
    dt_user_rows_push(io, &(dt_ps_sparse){t->name, t->dim, buf->ix.n, buf->ix.ids, buf->row_grads});
    return 0;
}

/*
 * After this worker's passes over its shard (shard_steps), while the other
 * workers make the rest of max_steps: Status every ps task until one says
 * the job is done (1). TF1's workers stop at the end of their input the
 * same way. Its Status calls say its passes are done.
 *
 * The others are gone when every other task still to finish its passes
 * (not done with them, not failed and left) has called no ps task for
 * sync_timeout_secs: liveness, not progress, so a live one that does not
 * push for long (reading its data, the chief saving, a long step) is
 * waited for; its heartbeat speaks for it. A task never heard of is silent
 * since the wait began; with no one left to wait for, the wait lasts
 * sync_timeout_secs. A global step that moves says someone still trains
 * too: a task past the DT_STATUS_MAX_WORKERS a Status lists is never
 * heard of by name. Gone: 0, with shard_steps cleared, and this worker
 * finishes the job on its own shard again (a job never hangs on a lost
 * worker).
 */
static int wait_for_others(dt_worker *w, const dt_step_result *r, const dt_worker_hooks *hooks,
                           const atomic_int *stop, dt_err *err) {
    const dt_job *job = w->params.job;
    const int n = w->params.cluster->num_workers;
    dt_log(DT_LOG_INFO,
           "%s: %d epoch(s) of this shard done after %lld local steps (global step %lld); "
           "waiting for the other workers to finish theirs",
           w->name, job->epochs, (long long)r->local_step, (long long)r->global_step);
    other_task *others = dt_calloc((size_t)n, sizeof *others);
    if (!others) return dt_err_set(err, DT_ENOMEM, "%s: out of memory", w->name);
    const double began = dt_now_secs();
    for (int t = 0; t < n; t++)
        others[t].heard_at = began;
    dt_ps_client_set_passes_done(w->client, 1);
    int64_t last_step = -1;
    double moved_at = began;
    int nap_us = 1000, rc;
    for (;;) {
        ready_probe pr = {w, 0, 0, 0, others, "", 0};
        /* With the hooks: a ps that restarts meanwhile is restored by the
         * chief, as it is while training. */
        if ((rc = dt_worker_retry(w, "the other workers", probe_ready, &pr, hooks, stop, err)) < 0)
            goto out;
        if (pr.done) {
            rc = 1;
            goto out;
        }
        if (hooks && hooks->waiting && (rc = hooks->waiting(hooks->ctx, pr.global_step, err)) < 0)
            goto out;
        const double now = dt_now_secs();
        if (pr.global_step != last_step) {
            if (last_step >= 0) moved_at = now;
            last_step = pr.global_step;
        }
        double heard = moved_at;
        int awaited = 0;
        for (int t = 0; t < n; t++) {
            if (t == w->params.task_index || others[t].excused) continue;
            awaited++;
            if (others[t].heard_at > heard) heard = others[t].heard_at;
        }
        if (now - heard >= job->consistency.sync_timeout_secs) {
            dt_log(DT_LOG_WARN,
                   "%s: %d worker(s) still to finish their passes, none heard by any ps task "
                   "and the global step still for %.0f s: the other workers are gone; training "
                   "on this shard again until the job is done (global step %lld)",
                   w->name, awaited, now - heard, (long long)pr.global_step);
            w->shard_steps = 0; /* no bound from here on */
            dt_ps_client_set_passes_done(w->client, 0);
            rc = 0;
            goto out;
        }
        if (stop && *stop) {
            rc = stopped(w, err);
            goto out;
        }
        sleep_us(nap_us);
        if (nap_us < 50000) nap_us *= 2;
    }
out:
    free(others);
    return rc;
}

/* ---- resuming -------------------------------------------------------------- */

/* What the ps tasks say they took of this task's pushes. */
typedef struct {
    dt_worker *w;
    int64_t most;   /* the largest count of any ps task */
    int64_t fewest; /* the smallest */
    int most_from;  /* the ps task that said most */
} taken_probe;

static int probe_taken(void *arg, dt_err *err) {
    taken_probe *tp = arg;
    dt_worker *w = tp->w;
    tp->most = 0;
    tp->fewest = -1;
    tp->most_from = 0;
    for (int p = 0; p < dt_ps_client_num_ps(w->client); p++) {
        dt_msg_status_resp st;
        int rc = dt_ps_client_status(w->client, p, &st, err);
        if (rc < 0) return rc;
        int64_t n = 0; /* a task it does not list (never heard of, past the 64): none */
        for (int i = 0; i < st.num_workers; i++)
            if (st.workers[i].worker == w->params.task_index && st.workers[i].pushes > 0)
                n = st.workers[i].pushes;
        if (n > tp->most) {
            tp->most = n;
            tp->most_from = p;
        }
        if (tp->fewest < 0 || n < tp->fewest) tp->fewest = n;
    }
    return 0;
}

/*
 * A job bounded by shard: where this task's passes stand, as the ps tasks
 * counted its pushes (WorkerActivity.pushes: each one taken once, a retry
 * or a refused one not), so a task restarted mid-shard makes the rest of
 * its passes, not all of them again. Takes the largest count over the ps
 * tasks: a push any of them took is done (one restarted since counts from
 * its start; if every one did, the batches before are made again, never
 * skipped). The data is positioned at that local step, in its epoch's
 * order, without making the batches before it. *step: where training
 * resumes, at most shard_steps (then this task goes to waiting). Sync and
 * max_steps jobs start at 0, as before: their steps are not a shard's.
 */
static int resume(dt_worker *w, const dt_worker_hooks *hooks, const atomic_int *stop, int64_t *step,
                  dt_err *err) {
    *step = 0;
    if (w->shard_steps <= 0) return 0;
    taken_probe tp = {.w = w};
    int rc = dt_worker_retry(w, "the count of its pushes", probe_taken, &tp, hooks, stop, err);
    if (rc < 0) return rc;
    if (tp.most == 0) return 0;
    const dt_job *job = w->params.job;
    const int64_t k = tp.most < w->shard_steps ? tp.most : w->shard_steps;
    const int64_t per_epoch = w->shard_steps / job->epochs;
    rc = w->sparse ? dt_sparse_feed_seek(&w->feed, job->batch_size, k, err)
                   : dt_data_seek(w->data, job->batch_size, k, err);
    if (rc < 0) return dt_err_wrap(err, rc, "%s: resume", w->name);
    char fewer[160] = "";
    if (tp.fewest < tp.most)
        snprintf(fewer, sizeof fewer,
                 "; another ps task counts only %lld (restarted since: it counts from its start)",
                 (long long)tp.fewest);
    dt_log(DT_LOG_INFO,
           "%s: resuming at local step %lld (epoch %lld, batch %lld of %lld): %s took %lld of "
           "this task's pushes%s",
           w->name, (long long)k, (long long)(k / per_epoch), (long long)(k % per_epoch),
           (long long)per_epoch, dt_ps_client_name(w->client, tp.most_from), (long long)tp.most,
           fewer);
    w->resumed_at = k;
    *step = k;
    return 0;
}

static void swap_tensors(dt_tensors *a, dt_tensors *b) {
    dt_tensors t = *a;
    *a = *b;
    *b = t;
}

/* The progress line and the hooks after step r (none of them while a push
 * is in flight). */
static int after_step(dt_worker *w, dt_step_result *r, double *t_last, int64_t *step_last,
                      int64_t *global_last, const dt_worker_hooks *hooks, dt_err *err) {
    const dt_job *job = w->params.job;
    dt_train_metrics_step(r->global_step, r->loss, job->batch_size);
    if (r->local_step % job->log_steps == 0 || r->done) {
        log_progress(w, r, *t_last, *step_last, *global_last);
        *t_last = dt_now_secs();
        *step_last = r->local_step;
        *global_last = r->global_step;
    }
    int rc = hooks && hooks->after_step ? hooks->after_step(hooks->ctx, r, err) : 0;
    if (rc == 0 && w->stop_at > 0 && r->local_step == w->stop_at) raise(SIGSTOP);
    return rc;
}

/* pipeline_push: a gradient made while a push is in flight. */
typedef struct {
    double loss;
    dt_ps_sparse rows[DT_MAX_TABLES]; /* (nrows) its tables' rows' gradients */
    int nrows;
    int done; /* a ps said the job is done: there is no gradient */
} next_grad;

/* The next gradient, from vars into grads, while the push of s is in
 * flight. The push thread owns w->client, w->rng and the hooks meanwhile,
 * so the model's row pulls go through w->rows_client (pull_beside_push). */
static int grad_in_flight(dt_worker *w, sender *s, const dt_tensors *vars, dt_tensors *grads,
                          next_grad *g, const dt_worker_hooks *hooks, const atomic_int *stop,
                          dt_err *err) {
    memset(g, 0, sizeof *g);
    w->in_flight = s;
    int rc = model_grad(w, vars, grads, &g->loss, g->rows, &g->nrows, hooks, stop, err);
    w->in_flight = NULL;
    g->done = rc == 1;
    return rc < 0 ? rc : 0;
}

/* pipeline_push's start, and its start again after waiting for the other
 * workers: the values pulled into w->vars (*vars_step their step), then the
 * first gradient from them, with no push in flight. *done: a ps said the
 * job is done. */
static int pipelined_start(dt_worker *w, double *loss, dt_ps_sparse *rows, int *nrows,
                           int64_t *vars_step, int *done, const dt_worker_hooks *hooks,
                           const atomic_int *stop, dt_err *err) {
    pull_state pull = {.w = w};
    int rc = pull_when_ready(w, &pull, hooks, stop, err);
    if (rc < 0) return rc;
    *vars_step = pull.reply.global_step;
    *done = pull.reply.done;
    if (*done) return 0;
    w->vars_step = *vars_step;
    if ((rc = model_grad(w, &w->vars, &w->grads, loss, rows, nrows, hooks, stop, err)) < 0)
        return rc;
    *done = rc == 1;
    return 0;
}

/* pipeline_push: each push (one round trip, bringing the values back) runs
 * on the sender's thread while this one computes the next gradient from
 * the values it has; that gradient is pushed next, computed one step
 * earlier than it would have been (the ps counts the staleness). A push
 * that brings no values (a ps said "not yet", or restarted) is followed by
 * a pull, as without pipelining. A sparse model's next batch pulls its
 * rows meanwhile too, into the other of its two buffers (the push in
 * flight reads its own): as they are while that push lands, before or
 * after it, so at most one step staler, as the dense values are. */
static int run_pipelined(dt_worker *w, sender *s, const dt_worker_hooks *hooks,
                         const atomic_int *stop, dt_err *err) {
    dt_step_result r;
    memset(&r, 0, sizeof r);
    double t_last = dt_now_secs(), loss = 0;
    int64_t step_last = 0, global_last = -1;
    pull_state pull = {.w = w};
    int64_t vars_step = 0;            /* of the values in w->vars */
    dt_ps_sparse rows[DT_MAX_TABLES]; /* (nrows) the rows' gradients beside w->grads */
    int nrows = 0, done = 0;
    int rc = resume(w, hooks, stop, &r.local_step, err);
    if (rc < 0) return rc;
    step_last = r.local_step;
    w->local_steps = r.local_step;
    if (w->shard_steps > 0 && r.local_step >= w->shard_steps) {
        /* Its passes were done before it restarted. */
        if ((rc = wait_for_others(w, &r, hooks, stop, err)) < 0) return rc;
        if (rc == 1) return 0;
    }
    if ((rc = pipelined_start(w, &loss, rows, &nrows, &vars_step, &done, hooks, stop, err)) < 0)
        return rc;
    int64_t grad_step = vars_step; /* of the values w->grads was computed from */
    while (!done) {
        if (stop && *stop) return stopped(w, err);
        /* The last push of this worker's epochs over its shard: nothing is
         * computed beside it (the next batch would be the next epoch's). */
        const int last = w->shard_steps > 0 && r.local_step + 1 >= w->shard_steps;
        push_state push = {.w = w,
                           .step = grad_step,
                           .fuse = 1,
                           .grads = &w->grads,
                           .into = &w->vars_next,
                           .rows = rows,
                           .nrows = nrows};
        sender_post(s, &push);
        next_grad next;
        memset(&next, 0, sizeof next);
        dt_err next_err;
        dt_err_clear(&next_err);
        w->vars_step = vars_step;
        int crc =
            last ? 0
                 : grad_in_flight(w, s, &w->vars, &w->grads_next, &next, hooks, stop, &next_err);
        if ((rc = sender_take(s, err)) < 0) return rc;
        if (crc < 0) return dt_err_set(err, crc, "%s", next_err.msg);
        r.local_step++;
        r.pulled_step = grad_step;
        r.global_step = push.reply.global_step;
        r.done = done = push.reply.done || next.done;
        r.dropped += push.reply.dropped;
        r.loss = loss;
        /* The gradient computed meanwhile goes next; the values the push
         * brought are the next one's. */
        swap_tensors(&w->grads, &w->grads_next);
        memcpy(rows, next.rows, sizeof rows);
        nrows = next.nrows;
        grad_step = vars_step;
        loss = next.loss;
        if (push.reply.pulled) {
            swap_tensors(&w->vars, &w->vars_next);
            vars_step = push.reply.global_step;
        } else if (!done) {
            pull = (pull_state){.w = w};
            if ((rc = pull_when_ready(w, &pull, hooks, stop, err)) < 0) return rc;
            vars_step = pull.reply.global_step;
            r.done = done = pull.reply.done;
        }
        if ((rc = after_step(w, &r, &t_last, &step_last, &global_last, hooks, err)) < 0) return rc;
        if (last && !done) {
            if ((rc = wait_for_others(w, &r, hooks, stop, err)) < 0) return rc;
            if (rc == 1) break;
            /* The others are gone: on round this shard again, from values
             * pulled now (those of before the wait are old). */
            if ((rc = pipelined_start(w, &loss, rows, &nrows, &vars_step, &done, hooks, stop,
                                      err)) < 0)
                return rc;
            grad_step = vars_step;
        }
    }
    w->local_steps = r.local_step;
    return 0;
}

static int train_pipelined(dt_worker *w, const dt_worker_hooks *hooks, const atomic_int *stop,
                           dt_err *err) {
    sender s;
    int rc = sender_start(&s, w, hooks, stop, err);
    if (rc < 0) return rc;
    rc = run_pipelined(w, &s, hooks, stop, err);
    sender_stop(&s);
    return rc;
}

int dt_worker_train(dt_worker *w, const dt_worker_hooks *hooks, const atomic_int *stop,
                    dt_err *err) {
    const dt_job *job = w->params.job;
    if (pipelined(job)) {
        int rc = train_pipelined(w, hooks, stop, err);
        if (rc < 0) return rc;
        return training_done(w);
    }
    dt_step_result r;
    memset(&r, 0, sizeof r);
    double t_last = dt_now_secs();
    int64_t step_last = 0, global_last = -1, min_global_step = 0;
    dt_ps_reply fused; /* the last push's reply; .pulled: it brought the variables */
    memset(&fused, 0, sizeof fused);
    int sync = job->consistency.mode == DT_MODE_SYNC;
    int rc = resume(w, hooks, stop, &r.local_step, err);
    if (rc < 0) return rc;
    step_last = r.local_step;
    for (;;) {
        if (stop && *stop) return stopped(w, err);
        if (w->shard_steps > 0 && r.local_step >= w->shard_steps) {
            if ((rc = wait_for_others(w, &r, hooks, stop, err)) < 0) return rc;
            if (rc == 1) break;
            memset(&fused, 0, sizeof fused); /* the values are old: pull */
        }

        pull_state pull = {.w = w, .min_global_step = min_global_step};
        if (fused.pulled) /* the last push brought this step's variables */
            pull.reply = fused;
        else if ((rc = pull_when_ready(w, &pull, hooks, stop, err)) < 0)
            return rc;
        if (pull.reply.done) break;

        dt_ps_sparse rows[DT_MAX_TABLES];
        int nrows = 0;
        w->vars_step = pull.reply.global_step;
        if ((rc = model_grad(w, &w->vars, &w->grads, &r.loss, rows, &nrows, hooks, stop, err)) < 0)
            return rc;
        if (rc == 1) break; /* done */

        /* sync: the next pull must see the step this gradient was for. */
        if (sync) min_global_step = pull.reply.global_step + 1;
        push_state push = {.w = w,
                           .step = pull.reply.global_step,
                           .fuse = job->fuse_push_pull,
                           .min_global_step = min_global_step,
                           .grads = &w->grads,
                           .into = &w->vars,
                           .rows = rows,
                           .nrows = nrows};
        if ((rc = dt_worker_retry(w, "push", do_push, &push, hooks, stop, err)) < 0) return rc;
        fused = push.reply;
        r.local_step++;
        r.pulled_step = pull.reply.global_step;
        r.global_step = push.reply.global_step;
        r.done = push.reply.done;
        r.dropped += push.reply.dropped;

        if ((rc = after_step(w, &r, &t_last, &step_last, &global_last, hooks, err)) < 0) return rc;
        if (r.done) break;
    }
    w->local_steps = r.local_step;
    return training_done(w);
}

/* The end of training: logged, with this process's peak memory, and told
 * to every ps task. */
static int training_done(dt_worker *w) {
    if (w->resumed_at > 0)
        dt_log(DT_LOG_INFO,
               "%s: training done after %lld local steps (%lld of them before a restart)", w->name,
               (long long)w->local_steps, (long long)w->resumed_at);
    else
        dt_log(DT_LOG_INFO, "%s: training done after %lld local steps", w->name,
               (long long)w->local_steps);
    int64_t peak = dt_mem_peak_rss();
    if (peak >= 0)
        dt_log(DT_LOG_INFO, "%s: peak RSS %.1f MB (VmHWM); model %.1f MB, gradient %.1f MB",
               w->name, (double)peak / 1e6, (double)w->vars.slab_bytes / 1e6,
               (double)w->grads.slab_bytes / 1e6);
    if (w->sparse && w->sparse_steps > 0) {
        /* Each row goes as its id (8 bytes) and dim floats, pulled, then
         * its gradient pushed the same way. */
        double rows = (double)w->rows_moved / (double)w->sparse_steps;
        dt_log(DT_LOG_INFO,
               "%s: sparse: %.1f rows a step (the batch's distinct ids), %.1f kB a step of ids "
               "and rows on the wire",
               w->name, rows, rows * 2.0 * (8.0 + 4.0 * w->table.dim) / 1e3);
    }
    /* The ps task that said "done" knows we know; the others would wait
     * for us until their linger is up. Best effort: a task that is down
     * now has nothing to wait for. */
    dt_err told;
    dt_err_clear(&told);
    if (dt_ps_client_tell_done(w->client, &told) < 0)
        dt_log(DT_LOG_DEBUG, "%s: telling the ps tasks we know the job is done: %s", w->name,
               told.msg);
    return 0;
}

/* ---- failures ---------------------------------------------------------- */

/* Deadline of each call that reports a failure: the task is going anyway. */
#define FAILURE_REPORT_MS 5000

/* Whether rc is this task's own permanent failure, the kind the job must
 * hear of. Not: a signal (a restart may follow), a peer out of reach past
 * the retry budget or storage that stayed full (retryable: 200, 75), the
 * job's failure heard from a ps (not ours), or something another owns (a
 * log dir another chief holds, a ps holding another job's model, variables
 * another chief created: ending that job is not this task's to do). */
static int own_permanent_failure(int rc) {
    switch (rc) {
    case DT_ECANCELLED:
    case DT_EUNAVAILABLE:
    case DT_EDEADLINE:
    case DT_ESTORAGE:
    case DT_EABORTED:
    case DT_EEXIST: return 0;
    default: return rc < 0;
    }
}

void dt_worker_report_failure(const dt_worker_params *params, int rc, const dt_err *why) {
    if (!own_permanent_failure(rc)) return;
    int chief = params->task_index == 0;
    const char *reason = why && why->msg[0] ? why->msg : dt_err_name(rc);
    int timeout_ms = params->job->rpc_timeout_secs * 1000;
    if (timeout_ms > FAILURE_REPORT_MS) timeout_ms = FAILURE_REPORT_MS;
    /* A client of its own: the caller's may be half made (the failure was
     * opening it) or mid-call. No variables: none are sent. */
    dt_tensors none;
    memset(&none, 0, sizeof none);
    dt_ps_client_params cp = {.cluster = params->cluster,
                              .worker = params->task_index,
                              .timeout_ms = timeout_ms,
                              .placement = params->job->placement,
                              .security = params->security};
    dt_ps_client *c = NULL;
    dt_err told;
    dt_err_clear(&told);
    int trc = dt_ps_client_new(&cp, &none, &c, &told);
    if (trc == 0)
        trc =
            chief ? dt_ps_client_fail_job(c, reason, &told) : dt_ps_client_leave(c, reason, &told);
    dt_ps_client_free(c);
    const char *what = chief ? "the job failed" : "this worker failed and leaves";
    if (trc < 0)
        dt_log(DT_LOG_WARN, "worker:%d: telling the ps tasks that %s: %s", params->task_index, what,
               told.msg);
    else
        dt_log(DT_LOG_INFO, "worker:%d: told every ps task that %s", params->task_index, what);
}

int dt_worker_run(const dt_worker_params *params, const atomic_int *stop, dt_err *err) {
    dt_worker *w = NULL;
    int rc = dt_worker_open(params, &w, err);
    if (rc < 0) {
        dt_worker_report_failure(params, rc, err);
        return rc;
    }
    if (w->user)
        dt_log(DT_LOG_INFO, "%s: the program's own model (%s); waiting for it", w->name,
               w->user->describe);
    else
        dt_log(DT_LOG_INFO, "%s: %lld examples in this shard; waiting for the model", w->name,
               (long long)(w->sparse ? w->set.rows : dt_data_size(w->data)));
    rc = dt_worker_wait_ready(w, stop, err);
    if (rc == 1) {
        dt_log(DT_LOG_INFO, "%s: the job is already done", w->name);
        rc = 0;
    } else if (rc == 0) {
        rc = dt_worker_train(w, NULL, stop, err);
    }
    dt_worker_free(w);
    if (rc < 0) dt_worker_report_failure(params, rc, err);
    return rc;
}
