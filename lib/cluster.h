/*
 * cluster: the cluster file (who is where), JSON. Every role parses the same
 * file, so every role agrees on the tasks and their addresses.
 *
 * Cluster file:  {"cluster": {"ps": ["host:port", ...], "worker": [...]}}
 * It may also hold the job config under "job" (job.h), and TF_CONFIG's
 * "task" (read by the command line, ignored here).
 *
 * Errors name the file, line and column and the offending field, e.g.
 *   conf/cluster.json:3:15: "ps"[0] "localhost:0": port 0 is not in 1..65535
 */
#ifndef DT_CLUSTER_H
#define DT_CLUSTER_H

#include "err.h"
#include "jsonpos.h"

#define DT_HOST_MAX 256

typedef struct {
    char host[DT_HOST_MAX];      /* "localhost", "10.0.0.2", "::1" (no brackets) */
    int port;                    /* 1..65535 */
    char addr[DT_HOST_MAX + 16]; /* "host:port" as gRPC takes it ("[::1]:1681") */
} dt_addr;

typedef struct {
    int num_ps;
    dt_addr *ps; /* (num_ps) owned */
    int num_workers;
    dt_addr *workers; /* (num_workers) owned; worker 0 is the chief */
} dt_cluster;

/* Parses a cluster file. On failure c is left empty and err says
 * "path:line:col: what". */
int dt_cluster_load(const char *path, dt_cluster *c, dt_err *err) DT_WARN_UNUSED;
/* Same from text; source names it in messages. */
int dt_cluster_parse(const char *text, const char *source, dt_cluster *c,
                     dt_err *err) DT_WARN_UNUSED;
void dt_cluster_deinit(dt_cluster *c);

/* The top level of a file that holds "cluster" or "job" may hold only
 * those and "task"; root is d's root object. Shared with the job reader. */
int dt_cluster_check_top(const dt_json_doc *d, const cJSON *root, dt_err *err) DT_WARN_UNUSED;

#endif
