/*
 * ps: the parameter server role. Holds the variables, their optimizer slots
 * and the global step; applies each pushed gradient atomically per variable;
 * serves dtrain.ParameterServer over gRPC; and, unlike TF's ps, exits when
 * the chief says the job is done (after every worker has been told, or a
 * linger period has passed), or, the same way, that it failed: then every
 * later call of the job's tasks is answered "job failed: <reason>".
 *
 * Sync mode with several ps tasks: ps 0 decides which workers' gradients
 * make each step; the other tasks hold each worker's gradient until a
 * caller's Pull brings that decision, then apply exactly that set (see
 * ps_client.h for the order of calls that makes this safe).
 *
 * Threading: RPC handlers run on the server's poller threads. A read-write
 * lock guards the model's existence (Create takes it for writing; Pull and
 * Push for reading); each variable has its own mutex, held only while it is
 * read or updated. The global step is atomic.
 */
#ifndef DT_PS_H
#define DT_PS_H

#include <stdatomic.h>

#include "admission.h"
#include "cluster.h"
#include "err.h"
#include "rpc_common.h"

/* Most variable names one Pull may list. (A Push carries one gradient per
 * variable the ps holds: its bound is the model's.) */
#define DT_MODEL_PULL_NAMES_MAX 64

typedef struct {
    const dt_cluster *cluster;       /* borrowed for the ps's life */
    int task_index;                  /* which ps this is */
    int keep_serving;                /* 1: keep serving after the job is done */
    int num_threads;                 /* RPC poller threads; 0 picks a default */
    int linger_ms;                   /* after Shutdown: longest wait for workers to be told */
    const dt_rpc_security *security; /* borrowed; NULL: plaintext, no auth */
    int no_server;                   /* 1: serve no port; calls come through dt_ps_call */
    long long max_message_bytes;     /* largest request or reply; 0: the RPC server's default */
    /* The job's log dir, only when the ps's own config named it (--config,
     * --log-dir, --set log_dir=, the cluster file's "job"); NULL: unknown,
     * never a default. A ps no chief has created a model on knows the job
     * of that dir's latest checkpoint (its job id, for Status), and when
     * that checkpoint is at the max_steps it records, that the job already
     * ended: it exits once its linger since start is up, unless told
     * otherwise (it has no one to ask when it is the only ps task). */
    const char *log_dir;
    /* The max_steps its own config names explicitly (0: none): a job
     * resumed with more steps than its checkpoint records is not done at
     * that checkpoint. Never a default. */
    int64_t max_steps;
    /* The epochs its own config names explicitly (0: none): a job on file
     * data resumed with more passes than its checkpoint's job made is not
     * done at that checkpoint either (the chief derives the new max_steps
     * from the rows). Never a default. */
    int epochs;
    /* Where to listen: NULL serves every interface at the cluster address's
     * port, as TF's server does. The cluster's host names this task for
     * others; on a cluster manager it is a service name that may not
     * resolve until the task is up, and is not the pod's own address. */
    const char *listen_addr;
    /* Threads that check and apply one large dense gradient (split by
     * ranges of elements: the same bits as one thread), the poller's own
     * included: 0 picks the machine's cores, at most 4; 1 keeps every push
     * on its poller. They help only a push that arrives while no other push
     * is being handled, so two workers' pushes do not crowd each other's
     * cores. */
    int apply_threads;
    /* Smallest gradient, in elements, split so; 0 picks the default (256Ki
     * floats, 1 MiB: below it waking a helper costs about what it saves).
     * Tests set 1 to split every gradient. */
    int64_t parallel_min_elems;
    dt_adm_limits guard; /* the server's connection guards (admission.h); zeros: defaults */
} dt_ps_params;

typedef struct dt_ps dt_ps;

/* Binds the ps's address and starts serving. */
int dt_ps_start(const dt_ps_params *params, dt_ps **out, dt_err *err) DT_WARN_UNUSED;

/*
 * Blocks until the job is finished (0), until it failed (DT_EABORTED, err
 * holding the chief's reason: a Shutdown carrying a failure, once every
 * worker heard it or the linger is up), or until *stop becomes non-zero
 * (DT_ECANCELLED). With keep_serving neither end of the job returns.
 */
int dt_ps_wait(dt_ps *ps, const atomic_int *stop, dt_err *err);

/* Runs one request through the handler of method ("/dtrain.ParameterServer/
 * Push") as if peer had sent it over gRPC, role check included, without the
 * network. For tests, fuzzing and /metrics (lib/ps_metrics reads Status
 * so): it needs the ps's own method table. request may
 * be in pieces (dt_rpc_buf_received). On success *reply holds the encoded
 * answer (caller releases it): in one run, or, when it carries variables
 * of DT_CODEC_REF_MIN_BYTES or more, in pieces that are the variables'
 * buffers themselves (read it with dt_codec_decode_buf, or flatten it). */
int dt_ps_call(dt_ps *ps, const char *method, const dt_rpc_peer *peer, const dt_rpc_buf *request,
               dt_rpc_buf *reply, dt_err *err) DT_WARN_UNUSED;

/* The counters a ps keeps that Status does not carry, for /metrics. */
typedef struct {
    int64_t pulls;            /* Pull calls answered */
    int64_t checkpoint_pulls; /* of them, with the optimizer slots (a chief's save) */
    int64_t pushes_retried;   /* retries of a push already taken, answered not applied */
    int64_t slot_bytes;       /* bytes of the optimizer slots held */
} dt_ps_counters;

/* Fills *out. Thread-safe. */
void dt_ps_counters_of(dt_ps *ps, dt_ps_counters *out);

/* Stops serving (in-flight calls get a short grace period) and frees. */
void dt_ps_free(dt_ps *ps);

#endif
