/*
 * api: include/dtrain.h, the public C API, over the roles' own code.
 *
 * Each handle starts with a `handle` header: a magic (dtrain_errmsg tells
 * a dtrain handle from anything else) and the dt_err of its last call,
 * cleared when a call starts. The calls only translate: a cluster is
 * dt_cluster and the role dtrain's flags or TF_CONFIG say (the binary's
 * rules, cmd/dtrain.c), a config is a dt_job loaded and set as the binary
 * does and finished (dt_job_finish) where a role starts, a server is
 * dt_ps_start/dt_ps_wait, a session is lib/session (the binary's worker
 * and chief with the program's model). The public codes are dt_err's.
 *
 * Threading: a handle is used by one thread at a time; the stop calls may
 * come from any thread or a signal handler.
 */
#include "../include/dtrain.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "cluster.h"
#include "data.h"
#include "err.h"
#include "job.h"
#include "log.h"
#include "model.h"
#include "optim.h"
#include "ps.h"
#include "rpc_common.h"
#include "session.h"
#include "table.h"
#include "tensor.h"

_Static_assert((int)DTRAIN_EABORTED == (int)DT_EABORTED && (int)DTRAIN_ECONFIG == (int)DT_ECONFIG &&
                   (int)DTRAIN_EINVAL == (int)DT_EINVAL &&
                   (int)DTRAIN_ECANCELLED == (int)DT_ECANCELLED,
               "the public codes are dt_err's");
_Static_assert(DTRAIN_MAX_DIMS == DT_TENSOR_MAX_DIMS && DTRAIN_NAME_MAX < DT_TENSOR_NAME_MAX,
               "the public bounds are the tensors'");

#define HANDLE_MAGIC 0x64747261u /* "dtra" */

typedef struct {
    unsigned magic;
    dt_err err;
} handle;

static _Thread_local dt_err last_new_err;

/* Clears h's message: a call starts. */
static dt_err *begin(void *h) {
    handle *hd = h;
    dt_err_clear(&hd->err);
    return &hd->err;
}

/* The calloc'd handle of size bytes, or NULL (the thread's error set). */
static void *new_handle(size_t size, const char *what) {
    handle *h = dt_calloc(1, size);
    if (!h) {
        dt_err_set(&last_new_err, DT_ENOMEM, "%s: out of memory", what);
        return NULL;
    }
    h->magic = HANDLE_MAGIC;
    return h;
}

const char *dtrain_version(void) {
    return DTRAIN_VERSION;
}

int dtrain_version_number(void) {
    return DTRAIN_VERSION_NUMBER;
}

const char *dtrain_strerror(int code) {
    return code == 0 ? "ok" : dt_err_name(code);
}

/* The signal a session or server took (0: none). */
static atomic_int signal_taken;

int dtrain_exit_code(int code) {
    switch (code) {
    case DT_OK: return 0;
    case DT_ECANCELLED: return 128 + (atomic_load(&signal_taken) ? signal_taken : SIGTERM);
    case DT_EUNAVAILABLE:
    case DT_EDEADLINE: return 200;
    case DT_ESTORAGE: return 75;
    case DT_ECONFIG:
    case DT_EINVAL: return 2;
    default: return 1;
    }
}

const char *dtrain_errmsg(const void *h) {
    if (!h) return last_new_err.msg;
    const handle *hd = h;
    if (hd->magic != HANDLE_MAGIC) return "not a dtrain handle";
    return hd->err.msg;
}

/* ---- cluster ------------------------------------------------------------ */

struct dtrain_cluster {
    handle h;
    int loaded;
    dt_cluster cluster;
    int has_role;
    dt_role role;
    /* TLS and tokens: the flags' paths, else the environment's. */
    char paths[4][DT_PATH_MAX];
    dt_rpc_security security;
};

int dtrain_cluster_new(dtrain_cluster **out) {
    *out = new_handle(sizeof **out, "cluster");
    return *out ? 0 : DT_ENOMEM;
}

void dtrain_cluster_free(dtrain_cluster *c) {
    if (!c) return;
    if (c->loaded) dt_cluster_deinit(&c->cluster);
    free(c);
}

/* The task a parsed cluster names itself ("task"), taken as the role. */
static int adopt_cluster(dtrain_cluster *c, dt_cluster *parsed, const char *source, dt_err *err) {
    if (c->loaded) dt_cluster_deinit(&c->cluster);
    c->cluster = *parsed;
    c->loaded = 1;
    c->has_role = 0;
    if (!c->cluster.has_task) return 0;
    int rc = dt_cluster_role(&c->cluster, c->cluster.task_type, c->cluster.task_index, source,
                             &c->role, err);
    if (rc < 0) return rc;
    c->has_role = 1;
    return 0;
}

int dtrain_cluster_load(dtrain_cluster *c, const char *path) {
    dt_err *err = begin(c);
    if (!path) return dt_err_set(err, DT_EINVAL, "cluster: no path");
    dt_cluster parsed;
    int rc = dt_cluster_load(path, &parsed, err);
    return rc < 0 ? rc : adopt_cluster(c, &parsed, path, err);
}

int dtrain_cluster_parse(dtrain_cluster *c, const char *text, const char *source) {
    dt_err *err = begin(c);
    if (!text) return dt_err_set(err, DT_EINVAL, "cluster: no text");
    if (!source) source = "cluster";
    dt_cluster parsed;
    int rc = dt_cluster_parse(text, source, &parsed, err);
    return rc < 0 ? rc : adopt_cluster(c, &parsed, source, err);
}

int dtrain_cluster_from_env(dtrain_cluster *c) {
    dt_err *err = begin(c);
    const char *v = getenv("TF_CONFIG");
    if (!v || !*v) return dt_err_set(err, DT_ENOTFOUND, "cluster: TF_CONFIG is not set");
    dt_cluster parsed;
    int rc = dt_cluster_parse(v, "TF_CONFIG", &parsed, err);
    return rc < 0 ? rc : adopt_cluster(c, &parsed, "TF_CONFIG", err);
}

int dtrain_cluster_set_task(dtrain_cluster *c, const char *job_name, int task_index) {
    dt_err *err = begin(c);
    if (!c->loaded) return dt_err_set(err, DT_EPRECOND, "cluster: set_task: no cluster loaded");
    dt_task_type type;
    if (!job_name || dt_task_type_parse(job_name, &type) < 0)
        return dt_err_set(err, DT_EINVAL,
                          "cluster: unknown job \"%s\" (expected ps, worker, chief or master)",
                          job_name ? job_name : "(null)");
    if (type == DT_TASK_EVALUATOR)
        return dt_err_set(err, DT_EINVAL, "cluster: the evaluator job is the binary's own");
    int rc = dt_cluster_role(&c->cluster, type, task_index, "task", &c->role, err);
    if (rc < 0) return rc;
    c->has_role = 1;
    return 0;
}

dtrain_role dtrain_cluster_role(const dtrain_cluster *c, int *task_index) {
    if (task_index) *task_index = c->has_role ? c->role.index : -1;
    if (!c->has_role) return DTRAIN_ROLE_NONE;
    return c->role.type == DT_TASK_PS ? DTRAIN_ROLE_PS : DTRAIN_ROLE_WORKER;
}

int dtrain_cluster_is_chief(const dtrain_cluster *c) {
    return c->has_role && c->role.type == DT_TASK_WORKER && c->role.index == 0;
}

int dtrain_cluster_num_ps(const dtrain_cluster *c) {
    return c->loaded ? c->cluster.num_ps : 0;
}

int dtrain_cluster_num_workers(const dtrain_cluster *c) {
    return c->loaded ? c->cluster.num_workers : 0;
}

/* ---- config ------------------------------------------------------------- */

struct dtrain_config {
    handle h;
    dt_job job; /* as loaded and set; finished where a role starts */
};

int dtrain_config_new(dtrain_config **out) {
    *out = new_handle(sizeof **out, "config");
    if (*out) dt_job_defaults(&(*out)->job);
    return *out ? 0 : DT_ENOMEM;
}

void dtrain_config_free(dtrain_config *cfg) {
    free(cfg);
}

int dtrain_config_load(dtrain_config *cfg, const char *path) {
    dt_err *err = begin(cfg);
    if (!path) return dt_err_set(err, DT_EINVAL, "config: no path");
    return dt_job_load(path, &cfg->job, err);
}

int dtrain_config_set(dtrain_config *cfg, const char *assignment) {
    dt_err *err = begin(cfg);
    if (!assignment) return dt_err_set(err, DT_EINVAL, "config: no assignment");
    return dt_job_set(&cfg->job, assignment, err);
}

/* The job as a role runs it: cfg's, checked across fields and finished. */
static int finished_job(const dtrain_config *cfg, dt_job *out, dt_err *err) {
    *out = cfg->job;
    return dt_job_finish(out, err);
}

int64_t dtrain_config_max_steps(const dtrain_config *cfg) {
    dt_job job;
    dt_err ignored;
    dt_err_clear(&ignored);
    return finished_job(cfg, &job, &ignored) < 0 ? cfg->job.max_steps : job.max_steps;
}

int dtrain_config_batch_size(const dtrain_config *cfg) {
    return cfg->job.batch_size;
}

uint64_t dtrain_config_seed(const dtrain_config *cfg) {
    return cfg->job.seed;
}

const char *dtrain_config_log_dir(const dtrain_config *cfg) {
    return cfg->job.log_dir;
}

/* ---- the command line --------------------------------------------------- */

/* argv[*i] is flag: its value into *out (1); 0 when it is another flag;
 * -1 (err set) when the value is missing. "--flag=value" is taken too. */
static int take_flag(int argc, char **argv, int *i, const char *flag, const char **out,
                     dt_err *err) {
    const char *a = argv[*i];
    size_t n = strlen(flag);
    if (strncmp(a, flag, n) != 0) return 0;
    if (a[n] == '=') {
        *out = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (*i + 1 >= argc) {
        dt_err_set(err, DT_EINVAL, "flag %s needs a value", flag);
        return -1;
    }
    *out = argv[++*i];
    return 1;
}

static int parse_index(const char *text, int *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (!*text || *end || errno || v < 0 || v > 1000000) return -1;
    *out = (int)v;
    return 0;
}

/* The role from --job-name/--task-index and the cluster's "task", as the
 * binary resolves them: both flags win, one alone must agree. */
static int resolve_role(dtrain_cluster *c, const char *source, const char *job_name,
                        const char *task_text, dt_err *err) {
    dt_task_type type = c->cluster.task_type;
    int index = c->cluster.task_index;
    if (job_name && dt_task_type_parse(job_name, &type) < 0)
        return dt_err_set(err, DT_EINVAL,
                          "--job-name: unknown job \"%s\" (expected ps, worker, chief or master)",
                          job_name);
    if (task_text && parse_index(task_text, &index) < 0)
        return dt_err_set(err, DT_EINVAL, "--task-index: \"%s\" is not a non-negative integer",
                          task_text);
    if (!c->cluster.has_task) {
        if (!job_name)
            return dt_err_set(err, DT_EINVAL,
                              "missing --job-name (ps or worker; %s has no \"task\")", source);
        if (!task_text)
            return dt_err_set(err, DT_EINVAL, "missing --task-index N (%s has no \"task\")",
                              source);
    } else if (!(job_name && task_text) &&
               (type != c->cluster.task_type || index != c->cluster.task_index)) {
        return dt_err_set(err, DT_EINVAL,
                          "%s conflicts with %s \"task\": give both --job-name and --task-index, "
                          "or neither",
                          job_name ? "--job-name" : "--task-index", source);
    }
    if (type == DT_TASK_EVALUATOR)
        return dt_err_set(err, DT_EINVAL,
                          "--job-name evaluator: the evaluator is the binary's own");
    const char *what = job_name || task_text ? "--job-name/--task-index" : source;
    int rc = dt_cluster_role(&c->cluster, type, index, what, &c->role, err);
    if (rc < 0) return rc;
    c->has_role = 1;
    return 0;
}

static int set_level(const char *text, dt_err *err) {
    static const char *const names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(text, names[i]) == 0) {
            dt_log_set_level((dt_log_level)i);
            return 0;
        }
    return dt_err_set(err, DT_EINVAL, "--log-level: unknown level \"%s\"", text);
}

/* The security settings: the flags, else DTRAIN_TLS_CERT, ..., checked
 * as the binary checks them (pairs, readable files). */
static int take_security(dtrain_cluster *c, const char *const flags[4], dt_err *err) {
    static const char *const envs[4] = {"DTRAIN_TLS_CERT", "DTRAIN_TLS_KEY", "DTRAIN_TLS_CA",
                                        "DTRAIN_TOKEN_FILE"};
    static const char *const names[4] = {"--tls-cert", "--tls-key", "--tls-ca", "--token-file"};
    const char *v[4];
    for (int i = 0; i < 4; i++) {
        v[i] = flags[i];
        if (!v[i]) v[i] = getenv(envs[i]);
        if (v[i] && !*v[i]) v[i] = NULL;
        c->paths[i][0] = '\0';
        if (!v[i]) continue;
        if (strlen(v[i]) >= DT_PATH_MAX)
            return dt_err_set(err, DT_EINVAL, "%s: path too long", names[i]);
        if (access(v[i], R_OK) != 0)
            return dt_err_set(err, DT_EINVAL, "%s %s: cannot read: %s", names[i], v[i],
                              strerror(errno));
        snprintf(c->paths[i], sizeof c->paths[i], "%s", v[i]);
    }
    if (!v[0] != !v[1]) return dt_err_set(err, DT_EINVAL, "--tls-cert and --tls-key go together");
    c->security = (dt_rpc_security){.cert_file = v[0] ? c->paths[0] : NULL,
                                    .key_file = v[1] ? c->paths[1] : NULL,
                                    .ca_file = v[2] ? c->paths[2] : NULL,
                                    .token_file = v[3] ? c->paths[3] : NULL};
    return 0;
}

int dtrain_parse_args(dtrain_cluster *c, dtrain_config *cfg, int *argc, char **argv) {
    dt_err *err = begin(c);
    begin(cfg);
    const char *cluster_path = NULL, *job_name = NULL, *task_text = NULL, *config_path = NULL;
    const char *log_dir = NULL, *level = NULL, *security[4] = {NULL, NULL, NULL, NULL};
    const char *sets[64];
    int num_sets = 0, kept = 1, rc = 0;
    static const char *const security_flags[4] = {"--tls-cert", "--tls-key", "--tls-ca",
                                                  "--token-file"};
    for (int i = 1; i < *argc; i++) {
        const char *v = NULL;
        int t = 0;
        if ((t = take_flag(*argc, argv, &i, "--cluster", &v, err)) > 0)
            cluster_path = v;
        else if (t == 0 && ((t = take_flag(*argc, argv, &i, "--job-name", &v, err)) > 0))
            job_name = v;
        else if (t == 0 && ((t = take_flag(*argc, argv, &i, "--task-index", &v, err)) > 0))
            task_text = v;
        else if (t == 0 && ((t = take_flag(*argc, argv, &i, "--config", &v, err)) > 0))
            config_path = v;
        else if (t == 0 && ((t = take_flag(*argc, argv, &i, "--log-dir", &v, err)) > 0))
            log_dir = v;
        else if (t == 0 && ((t = take_flag(*argc, argv, &i, "--log-level", &v, err)) > 0))
            level = v;
        else if (t == 0 && ((t = take_flag(*argc, argv, &i, "--set", &v, err)) > 0)) {
            if (num_sets == 64)
                return dt_err_set(err, DT_EINVAL, "too many --set flags (at most 64)");
            sets[num_sets++] = v;
        } else {
            for (int k = 0; t == 0 && k < 4; k++)
                if ((t = take_flag(*argc, argv, &i, security_flags[k], &v, err)) > 0)
                    security[k] = v;
            if (t == 0) argv[kept++] = argv[i]; /* the program's own */
        }
        if (t < 0) return err->code;
    }
    *argc = kept;
    argv[kept] = NULL;
    if (level && (rc = set_level(level, err)) < 0) return rc;
    const char *source = cluster_path ? cluster_path : "TF_CONFIG";
    const char *tf_config = getenv("TF_CONFIG");
    if (cluster_path)
        rc = dtrain_cluster_load(c, cluster_path);
    else if (tf_config && *tf_config)
        rc = dtrain_cluster_from_env(c);
    else
        return dt_err_set(err, DT_EINVAL,
                          "missing --cluster FILE (or the TF_CONFIG environment variable)");
    if (rc < 0) return rc;
    if ((rc = resolve_role(c, source, job_name, task_text, err)) < 0) return rc;
    if ((rc = take_security(c, security, err)) < 0) return rc;
    /* The job: --config, else the cluster file's "job" (never TF_CONFIG's). */
    dt_job job = cfg->job;
    if (config_path)
        rc = dt_job_load(config_path, &job, err);
    else if (cluster_path)
        rc = dt_job_load(cluster_path, &job, err);
    if (rc == 0 && log_dir) {
        char assignment[DT_PATH_MAX + 16];
        snprintf(assignment, sizeof assignment, "log_dir=%s", log_dir);
        rc = dt_job_set(&job, assignment, err);
    }
    for (int i = 0; rc == 0 && i < num_sets; i++)
        rc = dt_job_set(&job, sets[i], err);
    if (rc < 0) return rc;
    cfg->job = job;
    return 0;
}

/* ---- variables ---------------------------------------------------------- */

typedef struct {
    dt_tensor spec; /* name, F32, shape */
    float *values;  /* the program's */
    dtrain_init init;
    double value, stddev, low, high;
} var;

typedef struct {
    char name[DT_TABLE_NAME_MAX];
    int64_t rows;
    int dim;
    dtrain_init init;
    double scale;
} table_decl;

struct dtrain_model {
    handle h;
    var *vars;
    int count, cap;
    table_decl tables[DTRAIN_MAX_TABLES];
    int num_tables;
    atomic_int in_use; /* sessions and servers using it */
};

int dtrain_model_new(dtrain_model **out) {
    *out = new_handle(sizeof **out, "model");
    return *out ? 0 : DT_ENOMEM;
}

void dtrain_model_free(dtrain_model *m) {
    if (!m) return;
    free(m->vars);
    free(m);
}

int dtrain_model_count(const dtrain_model *m) {
    return m->count;
}

int64_t dtrain_model_numel(const dtrain_model *m, int i) {
    return i >= 0 && i < m->count ? dt_tensor_numel(&m->vars[i].spec) : 0;
}

/* 1 when name is table or lies under it ("<table>/..."): a checkpoint
 * name of the table's. */
static int under_table(const char *name, const char *table_name) {
    size_t n = strlen(table_name);
    return strncmp(name, table_name, n) == 0 && (name[n] == '\0' || name[n] == '/');
}

int dtrain_model_table_count(const dtrain_model *m) {
    return m->num_tables;
}

int dtrain_model_add_table(dtrain_model *m, const dtrain_table_params *p) {
    dt_err *err = begin(m);
    if (atomic_load(&m->in_use))
        return dt_err_set(err, DT_EPRECOND, "model: a session or server uses it already");
    if (!p || !p->name || !p->name[0] || strlen(p->name) > DTRAIN_TABLE_NAME_MAX)
        return dt_err_set(err, DT_EINVAL, "model: a table needs a name of 1..%d bytes",
                          DTRAIN_TABLE_NAME_MAX);
    const char *name = p->name;
    if (m->num_tables == DTRAIN_MAX_TABLES)
        return dt_err_set(err, DT_EINVAL, "model: table \"%s\": at most %d table(s) a model", name,
                          DTRAIN_MAX_TABLES);
    for (int i = 0; i < m->count; i++)
        if (under_table(m->vars[i].spec.name, name))
            return dt_err_set(err, DT_EEXIST,
                              "model: table \"%s\": variable \"%s\" has its name or one of "
                              "its checkpoint names",
                              name, m->vars[i].spec.name);
    for (int i = 0; i < m->num_tables; i++)
        if (strcmp(m->tables[i].name, name) == 0)
            return dt_err_set(err, DT_EEXIST, "model: table \"%s\" declared twice", name);
    /* Its checkpoint names must be tensor names. */
    dt_tensor probe;
    memset(&probe, 0, sizeof probe);
    snprintf(probe.name, sizeof probe.name, "%s/values", name);
    probe.dtype = DT_DTYPE_F32;
    int rc = dt_tensor_check_spec(&probe, err);
    if (rc < 0) return dt_err_wrap(err, rc, "model: table \"%s\"", name);
    if (p->rows < 1 || p->rows > DTRAIN_TABLE_MAX_ROWS)
        return dt_err_set(err, DT_EINVAL, "model: table \"%s\": rows %lld is not 1..2^40", name,
                          (long long)p->rows);
    if (p->dim < 1 || p->dim > DTRAIN_TABLE_MAX_DIM)
        return dt_err_set(err, DT_EINVAL, "model: table \"%s\": dim %d is not 1..%d", name, p->dim,
                          DTRAIN_TABLE_MAX_DIM);
    if (p->init != DTRAIN_INIT_ZEROS && p->init != DTRAIN_INIT_NORMAL &&
        p->init != DTRAIN_INIT_UNIFORM)
        return dt_err_set(err, DT_EINVAL,
                          "model: table \"%s\": initializer %d is not zeros, normal or uniform",
                          name, p->init);
    if (p->init != DTRAIN_INIT_ZEROS && (!(p->scale > 0) || !isfinite(p->scale)))
        return dt_err_set(err, DT_EINVAL, "model: table \"%s\": scale %g must be > 0", name,
                          p->scale);
    table_decl *t = &m->tables[m->num_tables];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = p->rows;
    t->dim = p->dim;
    t->init = p->init;
    t->scale = p->scale;
    m->num_tables++;
    return 0;
}

/* The table of m as the ps tasks hold it under job (its seed, the
 * optimizer's slots). */
static void table_config(const table_decl *t, const dt_job *job, dt_table_config *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", t->name);
    out->rows = t->rows;
    out->dim = t->dim;
    out->init = t->init == DTRAIN_INIT_NORMAL    ? DT_TABLE_INIT_NORMAL
                : t->init == DTRAIN_INIT_UNIFORM ? DT_TABLE_INIT_UNIFORM
                                                 : DT_TABLE_INIT_ZEROS;
    out->init_scale = t->init == DTRAIN_INIT_ZEROS ? 1.0 : t->scale;
    out->seed = job->seed;
    dt_table_config_slots(out, &job->optim);
}

int dtrain_model_add(dtrain_model *m, const dtrain_var_params *p) {
    dt_err *err = begin(m);
    if (atomic_load(&m->in_use))
        return dt_err_set(err, DT_EPRECOND, "model: a session or server uses it already");
    if (!p || !p->name || !p->name[0] || strlen(p->name) > DTRAIN_NAME_MAX)
        return dt_err_set(err, DT_EINVAL, "model: a variable needs a name of 1..%d bytes",
                          DTRAIN_NAME_MAX);
    const char *name = p->name;
    for (int i = 0; i < m->count; i++)
        if (strcmp(m->vars[i].spec.name, name) == 0)
            return dt_err_set(err, DT_EEXIST, "model: variable \"%s\" declared twice", name);
    for (int i = 0; i < m->num_tables; i++)
        if (under_table(name, m->tables[i].name))
            return dt_err_set(err, DT_EEXIST,
                              "model: variable \"%s\": table \"%s\" has that checkpoint name", name,
                              m->tables[i].name);
    if (p->ndim < 0 || p->ndim > DTRAIN_MAX_DIMS || (p->ndim > 0 && !p->shape))
        return dt_err_set(err, DT_EINVAL, "model: \"%s\": ndim %d is not 0..%d with a shape", name,
                          p->ndim, DTRAIN_MAX_DIMS);
    if (!p->values)
        return dt_err_set(err, DT_EINVAL, "model: \"%s\": no buffer for its values", name);
    var v;
    memset(&v, 0, sizeof v);
    snprintf(v.spec.name, sizeof v.spec.name, "%s", name);
    v.spec.dtype = DT_DTYPE_F32;
    v.spec.ndim = p->ndim;
    for (int d = 0; d < p->ndim; d++) {
        if (p->shape[d] < 1)
            return dt_err_set(err, DT_EINVAL, "model: \"%s\": dim %d is %lld (each must be >= 1)",
                              name, d, (long long)p->shape[d]);
        v.spec.shape[d] = p->shape[d];
    }
    int rc = dt_tensor_check_spec(&v.spec, err);
    if (rc < 0) return dt_err_wrap(err, rc, "model");
    switch (p->init) {
    case DTRAIN_INIT_GIVEN:
    case DTRAIN_INIT_ZEROS:
    case DTRAIN_INIT_GLOROT_UNIFORM:
    case DTRAIN_INIT_GLOROT_NORMAL:
    case DTRAIN_INIT_HE_NORMAL:
    case DTRAIN_INIT_HE_UNIFORM: break;
    case DTRAIN_INIT_CONSTANT:
        if (!isfinite(p->value))
            return dt_err_set(err, DT_EINVAL, "model: \"%s\": constant %g is not finite", name,
                              p->value);
        break;
    case DTRAIN_INIT_NORMAL:
    case DTRAIN_INIT_TRUNCATED_NORMAL:
        if (!(p->stddev > 0) || !isfinite(p->stddev))
            return dt_err_set(err, DT_EINVAL, "model: \"%s\": stddev %g must be > 0", name,
                              p->stddev);
        break;
    case DTRAIN_INIT_UNIFORM:
        if (!(p->low < p->high) || !isfinite(p->low) || !isfinite(p->high))
            return dt_err_set(err, DT_EINVAL, "model: \"%s\": uniform needs low < high (%g, %g)",
                              name, p->low, p->high);
        break;
    default:
        return dt_err_set(err, DT_EINVAL, "model: \"%s\": unknown initializer %d", name, p->init);
    }
    v.values = p->values;
    v.init = p->init;
    v.value = p->value;
    v.stddev = p->stddev;
    v.low = p->low;
    v.high = p->high;
    if (m->count == m->cap) {
        int cap = m->cap ? 2 * m->cap : 8;
        var *grown = dt_realloc(m->vars, sizeof *grown * (size_t)cap);
        if (!grown) return dt_err_set(err, DT_ENOMEM, "model: out of memory");
        m->vars = grown;
        m->cap = cap;
    }
    m->vars[m->count++] = v;
    return 0;
}

/* Keras's fans of a shape: (in, out) for a matrix, (out, in, kh, kw) a
 * convolution kernel (PyTorch's layout), n and n for a vector. */
static void fans(const dt_tensor *t, double *fan_in, double *fan_out) {
    if (t->ndim < 2) {
        *fan_in = *fan_out = (double)dt_tensor_numel(t);
        return;
    }
    if (t->ndim == 2) {
        *fan_in = (double)t->shape[0];
        *fan_out = (double)t->shape[1];
        return;
    }
    double field = 1;
    for (int d = 2; d < t->ndim; d++)
        field *= (double)t->shape[d];
    *fan_in = (double)t->shape[1] * field;
    *fan_out = (double)t->shape[0] * field;
}

/* A uniform in [0, 1) from a splitmix64 stream. */
static double uniform01(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

static void initial_values(const var *v, uint64_t seed, float *out) {
    const int64_t n = dt_tensor_numel(&v->spec);
    /* The built-in models' stream (dt_model_init_state): a variable's
     * values depend on neither the order nor the others, and a normal of
     * a built-in variable's name and stddev is the built-in's, bit for bit. */
    uint64_t state = dt_model_init_state(seed, v->spec.name);
    double fan_in, fan_out, stddev = v->stddev, limit = 0;
    fans(&v->spec, &fan_in, &fan_out);
    int truncated = 0, uniform = 0;
    switch (v->init) {
    case DTRAIN_INIT_GIVEN: memcpy(out, v->values, (size_t)n * sizeof *out); return;
    case DTRAIN_INIT_ZEROS:
    case DTRAIN_INIT_CONSTANT:
        for (int64_t i = 0; i < n; i++)
            out[i] = v->init == DTRAIN_INIT_ZEROS ? 0.0f : (float)v->value;
        return;
    case DTRAIN_INIT_NORMAL: break;
    case DTRAIN_INIT_TRUNCATED_NORMAL: truncated = 1; break;
    case DTRAIN_INIT_UNIFORM: uniform = 1; break;
    /* Keras's truncated normals divide by .87962566103423978, the stddev
     * of a standard normal cut at 2, so the values keep the asked one. */
    case DTRAIN_INIT_GLOROT_NORMAL:
        stddev = sqrt(2.0 / (fan_in + fan_out)) / .87962566103423978;
        truncated = 1;
        break;
    case DTRAIN_INIT_HE_NORMAL:
        stddev = sqrt(2.0 / fan_in) / .87962566103423978;
        truncated = 1;
        break;
    case DTRAIN_INIT_GLOROT_UNIFORM: limit = sqrt(6.0 / (fan_in + fan_out)); break;
    case DTRAIN_INIT_HE_UNIFORM: limit = sqrt(6.0 / fan_in); break;
    }
    if (limit > 0) {
        for (int64_t i = 0; i < n; i++)
            out[i] = (float)(-limit + 2 * limit * uniform01(&state));
        return;
    }
    if (uniform) {
        for (int64_t i = 0; i < n; i++)
            out[i] = (float)(v->low + (v->high - v->low) * uniform01(&state));
        return;
    }
    if (!truncated) {
        dt_data_normals(&state, out, n, stddev);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        double z = dt_data_normal(&state);
        while (fabs(z) > 2.0)
            z = dt_data_normal(&state);
        out[i] = (float)(stddev * z);
    }
}

int dtrain_model_initial_values(dtrain_model *m, int i, uint64_t seed, float *out) {
    dt_err *err = begin(m);
    if (i < 0 || i >= m->count)
        return dt_err_set(err, DT_EINVAL, "model: no variable %d (it has %d)", i, m->count);
    if (m->vars[i].init == DTRAIN_INIT_GIVEN)
        return dt_err_set(err, DT_EINVAL, "model: \"%s\": its initial values are the program's",
                          m->vars[i].spec.name);
    if (!out) return dt_err_set(err, DT_EINVAL, "model: no buffer");
    initial_values(&m->vars[i], seed, out);
    return 0;
}

/* "linear: w F32 (1, 1), b F32 (1)" for the checkpoint and the ps tasks'
 * identity of the job, cut to cap - 1 bytes. */
static void describe(const dtrain_model *m, char *buf, size_t cap) {
    size_t off = (size_t)snprintf(buf, cap, "program model:");
    for (int i = 0; i < m->count && off < cap; i++) {
        char layout[96];
        dt_tensor_layout_text(&m->vars[i].spec, layout, sizeof layout);
        int n =
            snprintf(buf + off, cap - off, "%s %s %s", i ? "," : "", m->vars[i].spec.name, layout);
        if (n < 0) break;
        off += (size_t)n;
    }
    for (int i = 0; i < m->num_tables && off < cap; i++) {
        int n = snprintf(buf + off, cap - off, "; table %s (%lld, %d)", m->tables[i].name,
                         (long long)m->tables[i].rows, m->tables[i].dim);
        if (n < 0) break;
        off += (size_t)n;
    }
}

/* ---- signals ------------------------------------------------------------ */

static dt_session *_Atomic signalled_session;
static atomic_int *_Atomic signalled_flag;

/* The first SIGINT/SIGTERM stops the session or server; a second exits. */
static void on_stop_signal(int signo) {
    if (atomic_exchange(&signal_taken, signo)) _exit(128 + signo);
    dt_session *s = atomic_load(&signalled_session);
    if (s) dt_session_stop(s);
    atomic_int *flag = atomic_load(&signalled_flag);
    if (flag) atomic_store(flag, 1);
}

static void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_stop_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* ---- the ps ------------------------------------------------------------- */

struct dtrain_server {
    handle h;
    dt_ps *ps;
    atomic_int stop;
    const dtrain_model *model;
};

int dtrain_server_new(dtrain_server **out) {
    *out = new_handle(sizeof **out, "server");
    return *out ? 0 : DT_ENOMEM;
}

void dtrain_server_free(dtrain_server *s) {
    if (!s) return;
    if (atomic_load(&signalled_flag) == &s->stop) atomic_store(&signalled_flag, NULL);
    dt_ps_free(s->ps);
    free(s);
}

/* The largest message a ps takes: the chief's Create of the model with its
 * optimizer slots, plus 1 MiB (the binary's rule, cmd/dtrain.c). */
static long long message_cap(const dtrain_model *m, const dt_job *job) {
    if (!m) return 256LL << 20;
    long long bytes = 0;
    for (int i = 0; i < m->count; i++)
        bytes += (long long)m->vars[i].spec.nbytes;
    long long need = bytes * (1 + dt_optim_num_slots(&job->optim)) + (1LL << 20);
    return need < (4LL << 20) ? 4LL << 20 : need > INT_MAX ? INT_MAX : need;
}

int dtrain_server_start(dtrain_server *s, const dtrain_server_params *p) {
    dt_err *err = begin(s);
    if (s->ps) return dt_err_set(err, DT_EPRECOND, "server: started already");
    if (!p || !p->cluster || !p->config)
        return dt_err_set(err, DT_EINVAL, "server: needs a cluster and a config");
    const dtrain_cluster *c = p->cluster;
    if (!c->has_role || c->role.type != DT_TASK_PS)
        return dt_err_set(err, DT_EPERM, "server: this task is not a ps (its role is %s)",
                          c->has_role ? "a worker" : "not set");
    dt_job job;
    int rc = finished_job(p->config, &job, err);
    if (rc < 0) return rc;
    if (p->handle_signals) {
        atomic_store(&signalled_flag, &s->stop);
        install_signals();
    }
    dt_log_set_role('P');
    dt_rpc_init();
    dt_ps_params pp = {.cluster = &c->cluster,
                       .task_index = c->role.index,
                       .keep_serving = p->keep_serving,
                       .linger_ms = job.ps_linger_secs * 1000,
                       .security = &c->security,
                       .max_message_bytes = message_cap(p->model, &job),
                       .log_dir = job.log_dir,
                       .max_steps = job.max_steps};
    return dt_ps_start(&pp, &s->ps, err);
}

int dtrain_server_join(dtrain_server *s) {
    dt_err *err = begin(s);
    if (!s->ps) return dt_err_set(err, DT_EPRECOND, "server: join: not started");
    return dt_ps_wait(s->ps, &s->stop, err);
}

void dtrain_server_stop(dtrain_server *s) {
    atomic_store(&s->stop, 1);
}

/* ---- the session -------------------------------------------------------- */

struct dtrain_session {
    handle h;
    dt_session *s;
    dtrain_model *model;
    dt_tensor *specs;
    float **values;
    dt_job job;
    dt_table_config table; /* the model's table, when it has one */
    char describe[DT_MSG_MODEL_MAX];
    int closed;
    int rc; /* close's outcome, once closed */
    dt_err close_err;
};

int dtrain_session_new(dtrain_session **out) {
    *out = new_handle(sizeof **out, "session");
    return *out ? 0 : DT_ENOMEM;
}

/* The chief's first values: each variable's initializer (or the program's
 * own values), seeded by the job's seed. */
static void init_model(void *ctx, dt_tensors *vars) {
    dtrain_session *ss = ctx;
    for (int i = 0; i < ss->model->count; i++)
        initial_values(&ss->model->vars[i], ss->job.seed, vars->items[i].data);
}

int dtrain_session_start(dtrain_session *ss, const dtrain_session_params *p) {
    dt_err *err = begin(ss);
    if (ss->s) return dt_err_set(err, DT_EPRECOND, "session: started already");
    if (!p || !p->cluster || !p->config || !p->model)
        return dt_err_set(err, DT_EINVAL, "session: needs a cluster, a config and a model");
    const dtrain_cluster *c = p->cluster;
    if (!c->has_role || c->role.type != DT_TASK_WORKER)
        return dt_err_set(err, DT_EPERM, "session: this task is not a worker (its role is %s)",
                          c->has_role ? "a ps" : "not set");
    dtrain_model *m = (dtrain_model *)p->model; /* in_use only */
    if (m->count == 0) return dt_err_set(err, DT_EINVAL, "session: the model has no variables");
    int rc = finished_job(p->config, &ss->job, err);
    if (rc < 0) return rc;
    ss->model = m;
    ss->specs = dt_calloc((size_t)m->count, sizeof *ss->specs);
    ss->values = dt_calloc((size_t)m->count, sizeof *ss->values);
    if (!ss->specs || !ss->values) return dt_err_set(err, DT_ENOMEM, "session: out of memory");
    for (int i = 0; i < m->count; i++) {
        ss->specs[i] = m->vars[i].spec;
        ss->values[i] = m->vars[i].values;
    }
    describe(m, ss->describe, sizeof ss->describe);
    if (m->num_tables) table_config(&m->tables[0], &ss->job, &ss->table);
    atomic_fetch_add(&m->in_use, 1);
    dt_log_set_role(c->role.index == 0 ? 'C' : 'W');
    dt_rpc_init();
    dt_session_params sp = {.cluster = &c->cluster,
                            .job = &ss->job,
                            .task_index = c->role.index,
                            .security = &c->security,
                            .specs = ss->specs,
                            .count = m->count,
                            .values = ss->values,
                            .table = m->num_tables ? &ss->table : NULL,
                            .init = init_model,
                            .init_ctx = ss,
                            .describe = ss->describe};
    if (p->handle_signals) install_signals();
    rc = dt_session_start(&sp, &ss->s, err);
    if (ss->s && p->handle_signals) atomic_store(&signalled_session, ss->s);
    return rc;
}

/* Checks a step's arguments: the session ready, a gradient for every
 * variable (and table, when rows is set). */
static int check_step(dtrain_session *ss, const float *const *grads, const float *const *rows,
                      dt_err *err) {
    if (!ss->s || ss->closed)
        return dt_err_set(err, DT_EPRECOND, "session: step: the session is not %s",
                          ss->closed ? "open (closed)" : "ready (start it first)");
    if (!grads) return dt_err_set(err, DT_EINVAL, "session: step: no gradients");
    for (int i = 0; i < ss->model->count; i++)
        if (!grads[i])
            return dt_err_set(err, DT_EINVAL, "session: step: no gradient for \"%s\"",
                              ss->specs[i].name);
    if (!rows && ss->model->num_tables)
        return dt_err_set(err, DT_EINVAL,
                          "session: step: the model has table \"%s\": step with "
                          "dtrain_session_step_rows",
                          ss->table.name);
    for (int t = 0; rows && t < ss->model->num_tables; t++)
        if (!rows[t])
            return dt_err_set(err, DT_EINVAL, "session: step: no gradient for table \"%s\"",
                              ss->model->tables[t].name);
    return 0;
}

static int step(dtrain_session *ss, const float *const *grads, const float *const *rows,
                double loss, dtrain_step_result *r) {
    dt_err *err = begin(ss);
    if (r) memset(r, 0, sizeof *r);
    int rc = check_step(ss, grads, rows, err);
    if (rc < 0) return rc;
    dt_session_result res;
    rc = dt_session_step(ss->s, grads, rows ? rows[0] : NULL, loss, &res, err);
    if (r) {
        r->global_step = res.global_step;
        r->local_step = res.local_step;
        r->done = res.done;
    }
    return rc;
}

int dtrain_session_step(dtrain_session *ss, const float *const *grads, double loss,
                        dtrain_step_result *r) {
    return step(ss, grads, NULL, loss, r);
}

int dtrain_session_step_rows(dtrain_session *ss, const float *const *grads,
                             const float *const *row_grads, double loss, dtrain_step_result *r) {
    if (!row_grads) {
        dt_err *err = begin(ss);
        if (r) memset(r, 0, sizeof *r);
        return dt_err_set(err, DT_EINVAL, "session: step: no row gradients");
    }
    return step(ss, grads, row_grads, loss, r);
}

int dtrain_session_lookup(dtrain_session *ss, int t, const int64_t *ids, int64_t n, float *rows) {
    dt_err *err = begin(ss);
    if (!ss->s || ss->closed)
        return dt_err_set(err, DT_EPRECOND, "session: lookup: the session is not %s",
                          ss->closed ? "open (closed)" : "ready (start it first)");
    if (t < 0 || t >= ss->model->num_tables)
        return dt_err_set(err, DT_EPRECOND,
                          "session: lookup: the model has no table %d (it has %d)", t,
                          ss->model->num_tables);
    const char *name = ss->model->tables[t].name;
    if (n < 1 || !ids || !rows)
        return dt_err_set(err, DT_EINVAL,
                          "session: lookup \"%s\": needs n >= 1 ids and a rows "
                          "buffer (n %lld)",
                          name, (long long)n);
    for (int64_t k = 0; k < n; k++) {
        if (ids[k] < 0 || ids[k] >= ss->table.rows)
            return dt_err_set(err, DT_EINVAL,
                              "session: lookup \"%s\": ids[%lld] = %lld is not in [0, %lld)", name,
                              (long long)k, (long long)ids[k], (long long)ss->table.rows);
        if (k > 0 && ids[k] <= ids[k - 1])
            return dt_err_set(err, DT_EINVAL,
                              "session: lookup \"%s\": ids[%lld] = %lld after %lld: the ids must "
                              "be strictly increasing (sorted, unique)",
                              name, (long long)k, (long long)ids[k], (long long)ids[k - 1]);
    }
    return dt_session_lookup(ss->s, ids, n, rows, err);
}

int dtrain_session_should_stop(const dtrain_session *ss) {
    return !ss->s || ss->closed || dt_session_ended(ss->s);
}

int64_t dtrain_session_global_step(const dtrain_session *ss) {
    return ss->s ? dt_session_global_step(ss->s) : 0;
}

int dtrain_session_summary(dtrain_session *ss, const char *name, double value) {
    dt_err *err = begin(ss);
    if (!ss->s) return dt_err_set(err, DT_EPRECOND, "session: summary: not started");
    return dt_session_scalar(ss->s, name, value, err);
}

int dtrain_session_histogram(dtrain_session *ss, const char *name, const float *values, int64_t n) {
    dt_err *err = begin(ss);
    if (!ss->s) return dt_err_set(err, DT_EPRECOND, "session: histogram: not started");
    return dt_session_histogram(ss->s, name, values, n, err);
}

void dtrain_session_stop(dtrain_session *ss) {
    if (ss->s) dt_session_stop(ss->s);
}

int dtrain_session_close(dtrain_session *ss) {
    dt_err *err = begin(ss);
    if (!ss->s) return 0;
    if (!ss->closed) {
        dt_err_clear(&ss->close_err);
        ss->rc = dt_session_close(ss->s, &ss->close_err);
        ss->closed = 1;
        if (atomic_load(&signalled_session) == ss->s) atomic_store(&signalled_session, NULL);
        atomic_fetch_sub(&ss->model->in_use, 1);
    }
    if (ss->rc < 0) return dt_err_set(err, ss->rc, "%s", ss->close_err.msg);
    return 0;
}

void dtrain_session_free(dtrain_session *ss) {
    if (!ss) return;
    if (ss->s) {
        (void)dtrain_session_close(ss);
        dt_session_free(ss->s);
    }
    free(ss->specs);
    free(ss->values);
    free(ss);
}
