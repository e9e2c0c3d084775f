/*
 * cluster: the cluster file (who is where), JSON. Every role parses the same
 * file, so every role agrees on the tasks and their addresses.
 *
 * Cluster file:  {"cluster": {"ps": ["host:port", ...], "worker": [...]}}
 * The same text is a TF_CONFIG value, as Kubeflow's training operator,
 * SageMaker and Vertex AI set it: an optional "chief" (or "master") job, an
 * optional "evaluator", and {"task": {"type": "worker", "index": 1}} saying
 * which task this process is. A file may also hold the job config under
 * "job" (job.h); TF_CONFIG's own "job" (Vertex AI's job spec), "environment"
 * and "rpc_layer" are not dtrain's and are skipped.
 *
 * Errors name the file, line and column and the offending field, e.g.
 *   conf/cluster.json:3:15: "ps"[0] "localhost:0": port 0 is not in 1..65535
 */
#ifndef DT_CLUSTER_H
#define DT_CLUSTER_H

#include "err.h"

#define DT_HOST_MAX 256

typedef struct {
    char host[DT_HOST_MAX];      /* "localhost", "10.0.0.2", "::1" (no brackets) */
    int port;                    /* 1..65535 */
    char addr[DT_HOST_MAX + 16]; /* "host:port" as gRPC takes it ("[::1]:1681") */
} dt_addr;

/* The jobs of a cluster, as TF_CONFIG names them ("master", TF1's name for
 * the chief, parses as DT_TASK_CHIEF). */
typedef enum { DT_TASK_PS, DT_TASK_WORKER, DT_TASK_CHIEF, DT_TASK_EVALUATOR } dt_task_type;
#define DT_NUM_TASK_TYPES 4
extern const char *const dt_task_type_names[DT_NUM_TASK_TYPES]; /* "ps", ... */
/* 0, or -1 when name is no job. */
int dt_task_type_parse(const char *name, dt_task_type *out);

typedef struct {
    int num_ps;
    dt_addr *ps; /* (num_ps) owned */
    /* The training tasks (owned), chief first: a "chief" (or "master") job's
     * task when the file has one (has_chief; then "worker"[i] is
     * workers[i + 1]), else "worker"[0]. The data is sharded over all of
     * them, and logs, Status and certificate identities number them so. */
    int num_workers;
    dt_addr *workers;
    int has_chief;
    int num_evaluators;  /* 0 or 1: an evaluator serves nothing, its address */
    dt_addr *evaluators; /* is only checked (Kubeflow leaves it out) */
    /* TF_CONFIG's "task", when the text had one (has_task). */
    int has_task;
    dt_task_type task_type;
    int task_index;
} dt_cluster;

/* What a task of the cluster is to dtrain. */
typedef struct {
    dt_task_type type; /* DT_TASK_PS, DT_TASK_WORKER (the chief is worker 0) */
    int index;         /* or DT_TASK_EVALUATOR; index in dtrain's numbering */
} dt_role;

/* The role of task `index` of job `type` (TF_CONFIG's numbering: "worker"
 * 0 is training task 1 when the cluster has a chief). -1 with err naming
 * `what` (e.g. "--task-index" or "TF_CONFIG \"task\"") when the job has no
 * such task. */
int dt_cluster_role(const dt_cluster *c, dt_task_type type, int index, const char *what,
                    dt_role *out, dt_err *err) DT_WARN_UNUSED;

/* This process's role from the --job-name and --task-index flags (either
 * NULL when not given) and the cluster's "task" (source names where the
 * cluster came from, e.g. a path or "TF_CONFIG"), as the binary and the
 * library both resolve it: both flags win over "task" (logged), one flag
 * alone must agree with it, and without a "task" both are needed. An
 * evaluator only when allow_evaluator. -1 with err naming the flag. */
int dt_cluster_resolve_role(const dt_cluster *c, const char *source, const char *job_name,
                            const char *task_text, int allow_evaluator, dt_role *out,
                            dt_err *err) DT_WARN_UNUSED;

/* Parses a cluster file. On failure c is left empty and err says
 * "path:line:col: what". */
int dt_cluster_load(const char *path, dt_cluster *c, dt_err *err) DT_WARN_UNUSED;
/* Same from text; source names it in messages. */
int dt_cluster_parse(const char *text, const char *source, dt_cluster *c,
                     dt_err *err) DT_WARN_UNUSED;
void dt_cluster_deinit(dt_cluster *c);

/* The top level of a file that holds "cluster" or "job" may hold only
 * those and "task"; root is d's root object. Shared with the job reader
 * (lib/jsonpos.h defines both types; declared here only by name, so that
 * cJSON stays in the config code and out of the roles that include this). */
struct dt_json_doc;
struct cJSON;
int dt_cluster_check_top(const struct dt_json_doc *d, const struct cJSON *root,
                         dt_err *err) DT_WARN_UNUSED;

#endif
