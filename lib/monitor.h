/*
 * monitor: what an operator asks a running job, from outside it.
 *
 * dt_health_check is a grpc.health.v1 Check, as Kubernetes' gRPC probes and
 * grpc_health_probe make it (dtrain health runs it as an exec probe, which
 * can present the mTLS certificate a kubelet probe cannot). dt_job_status
 * asks every ps task for its Status at once and sums the job up for
 * `dtrain status`: its state (failed, with the chief's reason, when a ps
 * says so), the global step against max_steps, the rate, an ETA, each
 * task's figures and the training tasks seen recently (and which failed).
 * Unreachable tasks are part of the answer, not an error.
 *
 * Threading: each call is independent and blocks its caller for at most
 * its timeout.
 */
#ifndef DT_MONITOR_H
#define DT_MONITOR_H

#include <stddef.h>

#include "cluster.h"
#include "codec.h"
#include "err.h"
#include "rpc_common.h"

/* Asks addr's health of service ("" = the server). *status gets the
 * answer; DT_EUNAVAILABLE / DT_EDEADLINE when nobody answered in
 * timeout_ms, DT_ENOTFOUND for a service the server does not know. */
int dt_health_check(const char *addr, const char *service, const dt_rpc_security *sec,
                    int timeout_ms, dt_health_status *status, dt_err *err) DT_WARN_UNUSED;
/* "SERVING", "NOT_SERVING", ... */
const char *dt_health_status_name(dt_health_status s);

typedef enum {
    DT_JOB_UNREACHABLE,
    DT_JOB_WAITING,
    DT_JOB_TRAINING,
    DT_JOB_DONE,
    DT_JOB_FAILED /* a ps says the chief failed: dt_job_status.failure says why */
} dt_job_state;
/* "unreachable", "waiting for chief", "training", "done", "failed" */
const char *dt_job_state_name(dt_job_state s);

typedef struct {
    int answered; /* 0: err says why not */
    dt_err err;
    dt_msg_status_resp resp; /* when answered */
} dt_ps_status;

/* One training task as the ps tasks saw it: the most pushes any task took
 * from it, its most recent push and call on any, and whether any says
 * its passes are done. */
typedef struct {
    int worker;
    long long pushes;
    long long last_push_ms;
    char failure[DT_MSG_FAILURE_MAX]; /* non-empty: it failed and left (a ps says why) */
    long long last_seen_ms;           /* its last call of any kind; -1: never */
    int passes_done;                  /* its "epochs" passes are done; it waits */
} dt_worker_seen;

typedef struct {
    dt_job_state state;
    int num_ps, num_answered;
    dt_ps_status *ps; /* (num_ps) owned */
    long long global_step, max_steps;
    double steps_per_sec;
    double eta_secs; /* < 0: unknown */
    long long applied, rejected, dropped, nonfinite, refused;
    long long updates_nonfinite; /* updates refused or skipped: a value would not be finite */
    double mean_staleness;       /* < 0: no gradients yet */
    int num_workers;             /* the cluster's training tasks */
    dt_worker_seen *workers;     /* (num_seen) owned, by task index */
    int num_seen;
    char failure[DT_MSG_FAILURE_MAX]; /* DT_JOB_FAILED: the chief's reason */
} dt_job_status;

/* Asks every ps of cluster as a tool, each call with timeout_ms. Fails only
 * when out of memory or sec is unusable; *out is the caller's to deinit. */
int dt_job_status_get(const dt_cluster *cluster, const dt_rpc_security *sec, int timeout_ms,
                      dt_job_status *out, dt_err *err) DT_WARN_UNUSED;
void dt_job_status_deinit(dt_job_status *st);

/* The status for people (lines, '\n'-terminated) or as one JSON object
 * (one line), into buf. Returns the length written, truncated to cap. */
size_t dt_job_status_text(const dt_job_status *st, const dt_cluster *cluster, char *buf,
                          size_t cap);
size_t dt_job_status_json(const dt_job_status *st, const dt_cluster *cluster, char *buf,
                          size_t cap);

#endif
