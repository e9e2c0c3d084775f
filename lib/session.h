/*
 * session: a program's own model trained by the worker and chief roles.
 *
 * The program steps (it computes a gradient, then calls dt_session_step);
 * the roles loop (they call a model for each gradient). The session runs
 * the role, dt_chief_run or dt_worker_run, unchanged on a thread of its
 * own with a dt_user_model whose loss_grad hands the values to the
 * program's buffers and waits for its gradient: one training loop, the
 * binary's, whoever computes the gradient.
 *
 *   program: start ........ step(g1) ........ step(g2) ...
 *   loop:    create/pull -> loss_grad: values -> push(g1)+pull -> loss_grad ...
 *
 * Invariant: at most one of the two threads works at a time: the loop
 * waits in loss_grad while the program computes, the program waits in
 * step while the loop pushes (and, on the chief, saves and summarizes).
 * The program's buffers are touched only by the thread that works.
 *
 * Threading: dt_session_stop may be called from any thread or a signal
 * handler; every other call from one thread at a time.
 */
#ifndef DT_SESSION_H
#define DT_SESSION_H

#include <stdatomic.h>
#include <stdint.h>

#include "cluster.h"
#include "err.h"
#include "job.h"
#include "rpc_common.h"
#include "tensor.h"
#include "worker.h"

typedef struct {
    const dt_cluster *cluster;       /* borrowed until free */
    const dt_job *job;               /* copied */
    int task_index;                  /* worker index; 0 is the chief */
    const dt_rpc_security *security; /* borrowed until free; NULL: plaintext */
    const dt_tensor *specs;          /* (count) F32 variables; copied */
    int count;
    float *const *values; /* (count) where each variable's values go; kept */
    /* The model's tables (worker.h's dt_user_model.tables); copied. */
    const dt_table_config *tables; /* (num_tables) */
    int num_tables;                /* 0..DT_MAX_TABLES */
    /* The chief's initial values (a model no checkpoint holds). */
    void (*init)(void *ctx, dt_tensors *vars);
    void *init_ctx;
    const char *describe; /* one line naming the model; copied */
} dt_session_params;

typedef struct dt_session dt_session;

typedef struct {
    int64_t global_step; /* of the values in the buffers */
    int64_t local_step;  /* steps pushed */
    int done;
} dt_session_result;

/* Starts the role's thread and waits until the first values are in the
 * buffers (0), or until the role ended: 0 with the job done (it was
 * already), or its failure. *out is set in every case but ENOMEM (free it). */
int dt_session_start(const dt_session_params *p, dt_session **out, dt_err *err) DT_WARN_UNUSED;

/* The rows of ids (n >= 1, strictly increasing, each below the table's
 * rows: the caller checked) of table (its index) into rows (n, dim),
 * pulled by the loop for the batch the program computes now; ids copied.
 * 0 (after the role's end too: then dt_session_ended and rows
 * unspecified), or the role's failure. DT_EPRECOND for no such table. */
int dt_session_lookup(dt_session *s, int table, const int64_t *ids, int64_t n, float *rows,
                      dt_err *err) DT_WARN_UNUSED;

/* Hands grads (count arrays, the variables' layout) and loss to the loop
 * and waits for the next values (0) or the role's end (0 and r->done when
 * the job is done; its failure otherwise). With tables, row_grads[k] (n,
 * dim) is the gradient of the rows of table k's last lookup, pushed with
 * grads (copied); DT_EPRECOND when a table had no lookup since the last
 * step. NULL without tables. DT_EPRECOND after the end. */
int dt_session_step(dt_session *s, const float *const *grads, const float *const *row_grads,
                    double loss, dt_session_result *r, dt_err *err) DT_WARN_UNUSED;

int dt_session_ended(const dt_session *s);
int64_t dt_session_global_step(const dt_session *s);

/* Sets (or adds) the scalar the chief writes under name; at most
 * DT_SESSION_MAX_SCALARS names. */
#define DT_SESSION_MAX_SCALARS 64
int dt_session_scalar(dt_session *s, const char *name, double value, dt_err *err) DT_WARN_UNUSED;

/* Sets (or adds) the histogram the chief writes under name: n floats of
 * values, copied; at most DT_SESSION_MAX_SCALARS names. */
int dt_session_histogram(dt_session *s, const char *name, const float *values, int64_t n,
                         dt_err *err) DT_WARN_UNUSED;

/* Asks the role to stop (as a signal does). Async-signal-safe. */
void dt_session_stop(dt_session *s);

/* Waits for the role's end (stopping it first when it has not ended) and
 * returns its outcome, err set on failure. Idempotent. */
int dt_session_close(dt_session *s, dt_err *err);

/* Closes when not yet closed, then frees; NULL is a no-op. */
void dt_session_free(dt_session *s);

#endif
