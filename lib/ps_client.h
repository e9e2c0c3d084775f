/*
 * ps_client: a role's view of all ps tasks as one store of whole variables.
 *
 * Partitioning and placement (placement.h): each variable, or each slice of
 * its rows, lives on one ps task, which every role computes alike. Callers
 * always see whole variables.
 *
 * Pull and push fan out to every ps at once and wait for all. The global
 * step reported is ps 0's (every push goes to every ps, so all agree). Each
 * ps's incarnation is remembered: a change means that ps restarted.
 *
 * Sync mode with several ps tasks is two-phase, so every shard of a step
 * comes from the same gradients: a push goes to the other tasks first (they
 * hold it) and to ps 0 (which counts it into a step) only when all have it;
 * a pull asks ps 0 first and passes its decision (which workers made the
 * step) on to the others, which then apply exactly that set.
 *
 * Threading: one thread at a time per client.
 */
#ifndef DT_PS_CLIENT_H
#define DT_PS_CLIENT_H

#include <stdint.h>

#include "cluster.h"
#include "codec.h"
#include "err.h"
#include "placement.h"
#include "rpc_common.h"
#include "safetensors.h"
#include "tensor.h"

typedef struct dt_ps_client dt_ps_client;

typedef struct {
    const dt_cluster *cluster; /* borrowed for the client's life */
    int worker;                /* caller's task index (-1 for tools) */
    int timeout_ms;            /* deadline of each call */
    dt_placement_config placement;
    /* NULL: plaintext. Borrowed; its identity, when NULL, is the worker's
     * ("chief" for 0, "worker:N", "tool" for -1). */
    const dt_rpc_security *security;
    /* Threads that copy one large pulled tensor into the caller's variable,
     * the caller's own included (split by ranges of bytes; dt_pool): 0 or 1
     * copies on the caller alone. copy_min_bytes: the smallest tensor so
     * copied (0: 1 MiB). */
    int copy_threads;
    size_t copy_min_bytes;
} dt_ps_client_params;

/* Places the variables of `layout` (specs; the data is not read) and makes
 * channels to every ps (they connect lazily). */
int dt_ps_client_new(const dt_ps_client_params *params, const dt_tensors *layout,
                     dt_ps_client **out, dt_err *err) DT_WARN_UNUSED;
void dt_ps_client_free(dt_ps_client *c);

/* Number of ps tasks. */
int dt_ps_client_num_ps(const dt_ps_client *c);
/* "ps:1 host:port" for logs (borrowed). */
const char *dt_ps_client_name(const dt_ps_client *c, int ps_index);

/* Placement, for logs and tests: the units (whole variables or slices). */
int dt_ps_client_num_units(const dt_ps_client *c);
typedef struct {
    const char *name;  /* name on the ps: "w" or "w/part_1" (borrowed) */
    int var;           /* index in the layout */
    int64_t row_begin; /* first row of the variable in this unit */
    int64_t rows;      /* rows in this unit (all of them when not split) */
    int ps;            /* ps task that holds it */
    size_t nbytes;
} dt_ps_unit;
void dt_ps_client_unit(const dt_ps_client *c, int i, dt_ps_unit *out);
/* Logs one line per unit: variable, slice, ps task, bytes; then per-task totals. */
void dt_ps_client_log_placement(const dt_ps_client *c);

/* Status of ps `ps_index` (fails fast if it is down). */
int dt_ps_client_status(dt_ps_client *c, int ps_index, dt_msg_status_resp *out,
                        dt_err *err) DT_WARN_UNUSED;
/* Whether this client's Status calls say that the worker made its passes
 * over its shard ("epochs") and waits for the others (0 at first). A ps
 * keeps what the last one said until the worker pushes again. */
void dt_ps_client_set_passes_done(dt_ps_client *c, int passes_done);
/* Tells every ps task at once that this worker is alive (a Status with
 * heartbeat: its reply is dropped, and does not count as telling the
 * worker the job's end). Returns the first failed call's error; the
 * others were still made. */
int dt_ps_client_heartbeat(dt_ps_client *c, dt_err *err) DT_WARN_UNUSED;

/* Steps per worker that a restored ps may be raised by callers' seen_step
 * beyond the highest step the chief knew of: the pushes other workers can
 * make while the chief is busy (evaluating, saving) and not looking. */
#define DT_PS_CATCH_UP_STEPS 1000

/* What the ps tasks are created with. slots may be NULL (initial values);
 * else it holds, for every variable and every slot of the optimizer, a
 * tensor "<variable>/<slot>" shaped like the variable. */
typedef struct {
    const dt_tensors *vars;
    const dt_tensors *slots;
    int64_t global_step;
    int64_t max_steps;
    dt_optim_config optim;
    dt_lr_schedule schedule;
    dt_consistency consistency;
    int skip_nonfinite;   /* skip and count NaN/Inf gradients instead of refusing them */
    int64_t step_ceiling; /* a restore: callers' seen_step may raise the ps up to
                             this step; 0: never (a fresh model) */
    const char *model;
    const char *job_id; /* 32 hex digits (NULL: none) */
    /* The sparse variables: every ps task holds each table's rows placed on
     * it. tables_pending: their rows follow (dt_ps_client_sparse_import);
     * the ps tasks serve once the last page is in. */
    const dt_msg_table *tables; /* (num_tables) borrowed */
    int num_tables;
    int tables_pending;
    dt_table_evict_policy eviction; /* the tables' rows dropped; all 0: none */
} dt_ps_model;

/* Creates the model on every ps, or only on those with only[p] != 0 when
 * only is not NULL (a restarted ps). */
int dt_ps_client_create(dt_ps_client *c, const dt_ps_model *m, const int *only,
                        dt_err *err) DT_WARN_UNUSED;

/* What a pull or push learned besides the tensors. */
typedef struct {
    int64_t global_step; /* ps 0's */
    int64_t max_step;    /* the highest any ps task answered: max_steps once one is done */
    int done;            /* the job is finished */
    int wait;            /* pull: not yet (sync / bounded); nothing was copied */
    int dropped;         /* push: a ps did not use the gradient (sync: stale) */
    int pulled;          /* push_pull: every ps sent its variables; vars hold them */
} dt_ps_reply;

/* Copies every variable's current value into vars (laid out as at _new),
 * and the optimizer slots into slots when it is not NULL (laid out as
 * described at dt_ps_model). With min_global_step > 0 (sync) or in bounded
 * mode, a ps may answer "wait": then r->wait is set and vars are unchanged. */
int dt_ps_client_pull(dt_ps_client *c, dt_tensors *vars, dt_tensors *slots, int64_t min_global_step,
                      dt_ps_reply *r, dt_err *err) DT_WARN_UNUSED;

/* Sends grads (laid out as at _new), computed at global step `step`. When
 * some ps tasks fail, the push stays pending: the next call (the retry, with
 * the same gradients) goes only to the tasks that have not applied it, so
 * no task applies one gradient twice. Large gradients are sent in place,
 * not copied: grads must not change during the call, and when it returns
 * 0 gRPC reads them no more. */
int dt_ps_client_push(dt_ps_client *c, const dt_tensors *grads, int64_t step, dt_ps_reply *r,
                      dt_err *err) DT_WARN_UNUSED;

/* dt_ps_client_push, and each ps's reply also carries its variables after
 * the push, copied into vars: one round trip per step instead of two. When
 * every ps sent them, r->pulled is set and vars hold the next step's values
 * (r->global_step is then also the step they were read at). Otherwise (a
 * ps said "not yet" in sync or bounded mode, the job is done, a ps
 * restarted, or sync with several ps tasks, whose decisions only Pull
 * carries) r->pulled is 0, some of vars may have changed, and the caller
 * pulls as usual. min_global_step as for dt_ps_client_pull. */
int dt_ps_client_push_pull(dt_ps_client *c, const dt_tensors *grads, int64_t step, dt_tensors *vars,
                           int64_t min_global_step, dt_ps_reply *r, dt_err *err) DT_WARN_UNUSED;

/* ---- tables (sparse variables) -------------------------------------------
 *
 * A batch's rows of one table: ids sorted and unique (a dt_sparse_index's),
 * rows (n, dim) row k for ids[k]. Calls split the ids by the placement rule
 * (dt_table_shard_of) and go to the tasks that hold some, all at once. */
typedef struct {
    const char *table; /* borrowed */
    int dim;
    int64_t n;
    const int64_t *ids; /* (n) borrowed */
    float *rows;        /* (n, dim): a pull writes them; a push reads them (the
                           gradient, every occurrence of an id summed) */
} dt_ps_sparse;

/* The rows of s->ids into s->rows, as the ps tasks hold them (a row never
 * pushed reads as its initial value). r gets the replies' steps and done.
 * Errors: a ps's refusal (ids out of range, unknown table: DT_EINVAL,
 * DT_ENOTFOUND), a reply of another shape (DT_EINVAL), a restarted ps
 * (DT_EUNAVAILABLE, as for dt_ps_client_pull), the RPC's. */
int dt_ps_client_sparse_pull(dt_ps_client *c, const dt_ps_sparse *s, dt_ps_reply *r,
                             dt_err *err) DT_WARN_UNUSED;

/* dt_ps_client_push_pull (vars NULL: dt_ps_client_push) with the sparse
 * gradients of nsparse tables (at most DT_MAX_TABLES) in the same pushes:
 * each ps gets its dense units and the rows placed on it, as one step. A
 * retry after a failure must pass the same gradients. */
int dt_ps_client_push_sparse(dt_ps_client *c, const dt_tensors *grads, const dt_ps_sparse *sparse,
                             int nsparse, int64_t step, dt_tensors *vars, int64_t min_global_step,
                             dt_ps_reply *r, dt_err *err) DT_WARN_UNUSED;

/* A page of a checkpoint's rows of table ("<table>/ids", "<table>/values"
 * and the slots, as dt_table_export makes them; count tensors) to the ps
 * tasks (those with only[p] != 0 when only is not NULL), after a Create
 * with tables_pending: each task gets the rows placed on it (so any number
 * of tasks restores any checkpoint, and the table crosses the wire once).
 * last: the restore's final page, after which the tasks serve. */
int dt_ps_client_sparse_import(dt_ps_client *c, const char *table, const dt_tensor *page, int count,
                               int last, const int *only, dt_err *err) DT_WARN_UNUSED;

/* For tests (the chief streams its saves: dt_ps_client_sparse_save), which
 * compare a whole table at once. Every row the ps tasks hold of table (dim
 * floats, nslots slots), in id order, into a new set *out (the caller deinits it): "<table>/ids",
 * "<table>/values", and with_slots the slots, as a checkpoint holds them;
 * empty when no task holds a row. Pages of at most page_rows rows a call
 * (1..DT_SPARSE_EXPORT_MAX_ROWS), so no message holds a whole table. */
int dt_ps_client_sparse_export(dt_ps_client *c, const dt_table_config *table, int with_slots,
                               int page_rows, dt_tensors *out, dt_err *err) DT_WARN_UNUSED;

/* A run of a table's rows, in id order, as dt_ps_client_sparse_export_each
 * hands them over: everything borrowed for the time of the call. */
typedef struct {
    int64_t n;          /* rows: 1..page_rows */
    const int64_t *ids; /* (n) increasing, above every id of the runs before */
    int nparts;         /* values, then each slot asked for */
    const float *parts[1 + DT_OPTIM_MAX_SLOTS]; /* each (n, dim) */
    const char *names[1 + DT_OPTIM_MAX_SLOTS];  /* "<table>/values", "<table>/<slot>" */
} dt_ps_rows;

/* Takes a run; a negative return (with err set) stops the export. */
typedef int (*dt_ps_rows_fn)(void *ctx, const dt_ps_rows *rows, dt_err *err);

/*
 * dt_ps_client_sparse_export without the set: the rows go to fn in runs of
 * at most page_rows, in id order, as the tasks' pages come in, so memory is
 * a page per task and a run whatever the table (a checkpoint streams them
 * to disk). Each task is read page by page, each page the rows the task
 * holds above the last id it sent when the page is asked for: rows made
 * meanwhile are in the export when their id is above that mark, rows
 * evicted meanwhile are missing when theirs is; every row is whole, and
 * there once. Pages are checked as they come, for the table's layout
 * (ids, values, the slots asked for: table's num_slots and slot_names,
 * dim), at most page_rows rows, ids of the table (0..rows-1) placed on
 * the task that sent them (dt_table_shard_of) and increasing; a row sent by
 * two tasks is an error too (DT_EINVAL naming the task). fn is never
 * called for a table with no row.
 */
int dt_ps_client_sparse_export_each(dt_ps_client *c, const dt_table_config *table, int with_slots,
                                    int page_rows, dt_ps_rows_fn fn, void *ctx,
                                    dt_err *err) DT_WARN_UNUSED;

/* dt_ps_client_sparse_export_each into a rows writer (safetensors.h) made
 * in dir, the table's tensors as dt_ps_client_sparse_export names them:
 * *out gets it (the caller frees it), or NULL when no task holds a row.
 * On failure *out is NULL and nothing is left in dir. */
int dt_ps_client_sparse_save(dt_ps_client *c, const dt_table_config *table, int with_slots,
                             int page_rows, const char *dir, dt_safetensors_rows **out,
                             dt_err *err) DT_WARN_UNUSED;

/* Tells every ps that this worker knows the job is done (a Status with
 * done_seen), so none waits out its linger to tell it. */
int dt_ps_client_tell_done(dt_ps_client *c, dt_err *err) DT_WARN_UNUSED;

/* Tells every ps the job is finished. */
int dt_ps_client_shutdown(dt_ps_client *c, const char *reason, dt_err *err) DT_WARN_UNUSED;

/* Early stopping: tells every ps to end training now (every later Push and
 * Pull is answered done) while it goes on serving the final pull, until
 * dt_ps_client_shutdown. */
int dt_ps_client_stop_training(dt_ps_client *c, const char *reason, dt_err *err) DT_WARN_UNUSED;

/* Failures. Each call goes to every ps at once, with the client's deadline
 * and without waiting for a ps that is down (it fails fast), so a caller is
 * held for at most timeout_ms. `failure` may be any text: it is sent as at
 * most DT_MSG_FAILURE_MAX - 1 bytes of UTF-8 with control bytes escaped
 * (dt_text_escape), as a ps accepts it. The first failed call's error is
 * returned; the others were still made. */

/* The chief: the job failed (a Shutdown carrying `failure`). Every ps
 * answers every later call of the job's tasks with DT_EABORTED "job failed:
 * <failure>" and exits 1. */
int dt_ps_client_fail_job(dt_ps_client *c, const char *failure, dt_err *err) DT_WARN_UNUSED;

/* A worker other than the chief: this task failed permanently and leaves
 * (a Status carrying `failure`). The job goes on without it; the ps tasks
 * show it in Status and do not wait to tell it the job's end. */
int dt_ps_client_leave(dt_ps_client *c, const char *failure, dt_err *err) DT_WARN_UNUSED;

#endif
