/*
 * api_internal: what the public API's files share, never included outside
 * them: lib/api.c (handles and their errors, the cluster, the config, the
 * command line), lib/api_model.c (variables, tables, initializers) and
 * lib/api_session.c (the ps, the session, signals).
 *
 * Each handle starts with a dt_api_handle header: a magic (dtrain_errmsg
 * tells a dtrain handle from anything else) and the dt_err of its last
 * call, cleared when a call starts (dt_api_begin).
 */
#ifndef DT_API_INTERNAL_H
#define DT_API_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "../include/dtrain.h"
#include "cluster.h"
#include "err.h"
#include "fileio.h"
#include "job.h"
#include "rpc_common.h"
#include "table.h"
#include "tensor.h"

#define DT_API_HANDLE_MAGIC 0x64747261u /* "dtra" */

typedef struct {
    unsigned magic;
    dt_err err;
} dt_api_handle;

/* Clears h's message: a call starts. Returns it. */
dt_err *dt_api_begin(void *h);
/* The calloc'd handle of size bytes, or NULL (the thread's error set). */
void *dt_api_new_handle(size_t size, const char *what);
/* The signal a session or server took (0: none). */
extern atomic_int dt_api_signal_taken;

struct dtrain_cluster {
    dt_api_handle h;
    int loaded;
    dt_cluster cluster;
    int has_role;
    dt_role role;
    /* TLS and tokens: the flags' paths, else the environment's. */
    char paths[4][DT_PATH_MAX];
    dt_rpc_security security;
};

struct dtrain_config {
    dt_api_handle h;
    dt_job job; /* as loaded and set; finished where a role starts */
};

/* The job as a role runs it: cfg's, checked across fields and finished. */
int dt_api_finished_job(const dtrain_config *cfg, dt_job *out, dt_err *err) DT_WARN_UNUSED;

typedef struct {
    dt_tensor spec; /* name, F32, shape */
    float *values;  /* the program's */
    dtrain_init init;
    double value, stddev, low, high;
} dt_api_var;

typedef struct {
    char name[DT_TABLE_NAME_MAX];
    int64_t rows;
    int dim;
    dtrain_init init;
    double scale;
} dt_api_table;

struct dtrain_model {
    dt_api_handle h;
    dt_api_var *vars;
    int count, cap;
    dt_api_table tables[DTRAIN_MAX_TABLES];
    int num_tables;
    atomic_int in_use; /* sessions and servers using it */
};

/* Variable v's initial values (its initializer, or the program's own), from seed. */
void dt_api_initial_values(const dt_api_var *v, uint64_t seed, float *out);
/* The model in a line, for the ps's "created" log line and Create. */
void dt_api_describe(const dtrain_model *m, char *buf, size_t cap);
/* Table t as the session and the ps take it. */
void dt_api_table_config(const dt_api_table *t, const dt_job *job, dt_table_config *out);

#endif
