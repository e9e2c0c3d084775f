/*
 * worker: the training loop every worker runs (the chief too).
 *
 * Each step: pull the variables from the ps tasks, compute the loss and the
 * gradient on the next minibatch of this worker's shard, push the gradient.
 * Asynchronous: no worker waits for another. Training ends when a ps answers
 * that the job is done (global step >= max_steps, or the chief finished).
 *
 * Failures of ps calls (unreachable, deadline, a restarted ps that is not yet
 * ready) are retried with exponential backoff and jitter (the first wait
 * 10 to 20 ms, doubling to 1 s; an answer of another kind, e.g. "not ready"
 * after "unreachable", starts again at the first) for up to
 * job->ready_wait_secs, logging who is awaited and for how long; after that
 * the call fails with DT_EUNAVAILABLE. A ps's "job failed" answer
 * (DT_EABORTED) is never retried.
 *
 * Test-only fault injection: DT_TEST_WORKER_STOP_AT=n makes the process
 * SIGSTOP itself once its local step n is made (the push taken, none in
 * flight, after the hooks), so a test can make a fault land mid-shard
 * however fast the job runs. Tests set it for one process; nothing else
 * should.
 */
#ifndef DT_WORKER_H
#define DT_WORKER_H

#include <stdatomic.h>
#include <stdint.h>

#include "cluster.h"
#include "data.h"
#include "err.h"
#include "job.h"
#include "loss_watch.h"
#include "model.h"
#include "ps_client.h"
#include "table.h"
#include "tensor.h"

/* The loop's side of a user model's table (dt_user_model.table): what
 * its loss_grad calls to have the batch's rows pulled and to hand their
 * gradient to the push. Opaque; lives for one loss_grad call. */
typedef struct dt_user_rows dt_user_rows;

/* The rows of s->ids (sorted, unique, each below the table's rows) into
 * s->rows, pulled from the ps tasks through the loop's client with its
 * retries (a restarted ps restored by the chief meanwhile, as for every
 * call). 0; 1 when a ps said the job is done (rows unspecified: return 1
 * from loss_grad); the failure otherwise. */
int dt_user_rows_pull(dt_user_rows *io, const dt_ps_sparse *s, dt_err *err) DT_WARN_UNUSED;

/* The gradient of table s->table's rows the step pushes beside the dense
 * one: s->ids and s->rows (n, dim) borrowed until the push is done: the
 * loop's next loss_grad call, or with pipeline_push the one after (the
 * push runs beside the next step's loss_grad: keep two buffers). Once a
 * table a step; a table given none pushes no rows. */
void dt_user_rows_push(dt_user_rows *io, const dt_ps_sparse *s);

/*
 * A model whose gradient comes from outside the loop: the library's user
 * (lib/session). The loop computes every gradient through loss_grad, a
 * built-in model's too (lib/worker.c wraps each in one of these), and the
 * chief calls init where it would initialize a built-in one, so a user's
 * model trains on the same loop, retries, modes and chief. The job must
 * set max_steps (there is no data to count epochs of) and no eval_data.
 * Every callback runs on the loop's thread.
 *
 * A user model may have tables (sparse variables, table.h; up to
 * DT_MAX_TABLES, each name its own), as the built-in sparse models have
 * one: the chief creates, saves and restores them beside the dense
 * variables, and each step's loss_grad pulls its batch's rows of each
 * (dt_user_rows_pull) and pushes their gradients with the dense one
 * (dt_user_rows_push, in the same Push). With pipeline_push the pulls of
 * the next step run while the last step's push is in flight, through a
 * client of their own.
 */
typedef struct {
    const dt_tensor *specs; /* (count) the variables: names, F32, shapes; borrowed */
    int count;
    const dt_table_config *tables; /* (num_tables) seed and slots set; borrowed */
    int num_tables;                /* 0..DT_MAX_TABLES */
    const char *describe;          /* one line naming the model: checkpoint metadata and the job's
                                      identity on the ps tasks; borrowed */
    void *ctx;
    /* Initial values into vars (laid out as specs), for a model no
     * checkpoint holds (the chief only). */
    void (*init)(void *ctx, dt_tensors *vars);
    /* The gradient at vars (their global step vars_step) into grads (same
     * layout) and the batch's loss into *loss; rows is the table's side
     * (NULL without tables). 1: the job is done (a row pull said so). A
     * failure ends training with its code (DT_ECANCELLED: stopped, the
     * chief saves). */
    int (*loss_grad)(void *ctx, const dt_tensors *vars, int64_t vars_step, dt_user_rows *rows,
                     dt_tensors *grads, double *loss, dt_err *err);
    /* The chief's summaries: the user's named scalars (up to max) to write
     * beside the loss; *tags borrowed until the next call. May be NULL. */
    int (*scalars)(void *ctx, const char **tags, double *values, int max);
    /* The user's named histograms, the i-th (from 0) into *tag, *values,
     * *n (borrowed until the next step); 0 past the last. May be NULL. */
    int (*histogram)(void *ctx, int i, const char **tag, const float **values, int64_t *n);
} dt_user_model;

typedef struct {
    const dt_cluster *cluster;       /* borrowed */
    const dt_job *job;               /* borrowed; dt_job_finish already applied */
    int task_index;                  /* worker index; 0 is the chief */
    const dt_rpc_security *security; /* borrowed; NULL: plaintext (see ps_client.h) */
    const dt_user_model *user;       /* borrowed; NULL: the job's built-in model */
} dt_worker_params;

typedef struct {
    int64_t local_step;  /* steps this process has pushed */
    int64_t global_step; /* after the push */
    int64_t pulled_step; /* global step of the variables used for the gradient */
    double loss;         /* on this step's batch, before the update */
    int done;
    int64_t dropped; /* sync: gradients of this worker a ps did not use */
} dt_step_result;

typedef struct {
    void *ctx;
    /* After every step (chief: summaries and checkpoint timer). */
    int (*after_step)(void *ctx, const dt_step_result *r, dt_err *err);
    /* When a ps answers "not ready" mid-training (it restarted empty); the
     * chief restores it. Workers leave this NULL and wait. */
    int (*on_not_ready)(void *ctx, dt_err *err);
    /* While this worker, its shard's epochs done, waits for the others
     * (global_step: what the ps tasks last said); the chief keeps its
     * checkpoint timer and its watch of the workers going. May be NULL. */
    int (*waiting)(void *ctx, int64_t global_step, dt_err *err);
} dt_worker_hooks;

typedef struct dt_worker dt_worker;

/* Opens this worker's data shard, allocates variables and gradients, and
 * creates the ps client (no network traffic yet). A job that leaves
 * "features" or "classes" unset takes them from the training file first
 * (dt_job_infer, on the worker's own copy of the job: dt_worker_job). */
int dt_worker_open(const dt_worker_params *params, dt_worker **out, dt_err *err) DT_WARN_UNUSED;
void dt_worker_free(dt_worker *w);

/* Borrowed accessors for the chief. vars hold the last pulled values. */
dt_ps_client *dt_worker_client(dt_worker *w);
dt_tensors *dt_worker_vars(dt_worker *w);
dt_dataset *dt_worker_data(dt_worker *w); /* NULL for a sparse model */
dt_model *dt_worker_model(dt_worker *w);  /* NULL for a sparse model */
/* The model's tables (their rows on the ps tasks) into *out; their count,
 * 0 for a dense model (*out NULL). A built-in sparse model has one. */
int dt_worker_tables(const dt_worker *w, const dt_table_config **out);
/* The built-in sparse model's table, or NULL (a dense or a user model). */
const dt_table_config *dt_worker_sparse_table(const dt_worker *w);
/* Examples in the training file, every worker's shard together. */
int64_t dt_worker_examples(const dt_worker *w);
/* The job the worker runs: params->job with its shapes set. */
const dt_job *dt_worker_job(const dt_worker *w);
/* The watch of every training loss this worker computed (loss_watch.h),
 * for the chief's comparison of its eval loss. */
const dt_loss_watch *dt_worker_loss_watch(const dt_worker *w);

/*
 * Waits until every ps answers and reports the model ready. Returns 0 when
 * ready, 1 when the job is already done, DT_EUNAVAILABLE after
 * ready_wait_secs, DT_ECANCELLED when *stop is set.
 */
int dt_worker_wait_ready(dt_worker *w, const atomic_int *stop, dt_err *err);

/* Retries fn (a ps call) per the policy above. `what` names the call in
 * logs; hooks->on_not_ready (may be NULL) runs on a "not ready" answer. */
int dt_worker_retry(dt_worker *w, const char *what, int (*fn)(void *arg, dt_err *err), void *arg,
                    const dt_worker_hooks *hooks, const atomic_int *stop, dt_err *err);

/* The step at which the job ends, for the progress line's percent and ETA
 * (a worker learns it from the ps tasks while it waits for the model; the
 * chief, which decides it, says it here). */
void dt_worker_set_max_steps(dt_worker *w, int64_t max_steps);

/* Trains until the job is done (0) or *stop is set after a finished step
 * (DT_ECANCELLED). hooks may be NULL. In a job bounded by each worker's
 * passes over its shard (epochs; async, bounded) it first resumes them
 * where the ps tasks counted this task's pushes (the largest count, logged
 * "resuming at local step k ..."), its data positioned there, so a task
 * restarted mid-shard does not make its passes again. */
int dt_worker_train(dt_worker *w, const dt_worker_hooks *hooks, const atomic_int *stop,
                    dt_err *err);

/* The worker role: open, wait for the chief, train, close. A "job failed"
 * answer from a ps (the chief failed) ends it with DT_EABORTED and the
 * chief's reason; its own permanent failure is reported (below). */
int dt_worker_run(const dt_worker_params *params, const atomic_int *stop, dt_err *err);

/* When rc (< 0, why says why; may be NULL) is this task's own permanent
 * failure (not a signal, not a retryable 200 or 75 one, not the job's
 * failure heard from a ps, not DT_EEXIST: something another chief or job
 * owns), tells every ps task, best effort, each call bounded by
 * min(rpc_timeout_secs, 5 s) and failing fast on a ps that is down: from
 * the chief (task 0) that the job failed, which ends it; from another
 * worker that it leaves, which does not. Logs the outcome; never fails. */
void dt_worker_report_failure(const dt_worker_params *params, int rc, const dt_err *why);

#endif
