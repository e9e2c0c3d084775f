/*
 * api: include/dtrain.h, the public C API, over the roles' own code. This
 * file: handles and their errors, the cluster, the config and the command
 * line; lib/api_model.c the variables, tables and initializers,
 * lib/api_session.c the ps, the session and signals (api_internal.h is
 * what they share).
 *
 * Each handle starts with a dt_api_handle header: a magic (dtrain_errmsg
 * tells a dtrain handle from anything else) and the dt_err of its last
 * call, cleared when a call starts. The calls only translate: a cluster is
 * dt_cluster and the role dtrain's flags or TF_CONFIG say (the binary's
 * rules, cmd/dtrain.c), a config is a dt_job loaded and set as the binary
 * does and finished (dt_job_finish) where a role starts, a server is
 * dt_ps_start/dt_ps_wait, a session is lib/session (the binary's worker
 * and chief with the program's model). The public codes are dt_err's.
 *
 * Threading: a handle is used by one thread at a time; the stop calls may
 * come from any thread or a signal handler.
 */
#include "api_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "err.h"
#include "log.h"

_Static_assert((int)DTRAIN_EABORTED == (int)DT_EABORTED && (int)DTRAIN_ECONFIG == (int)DT_ECONFIG &&
                   (int)DTRAIN_EINVAL == (int)DT_EINVAL &&
                   (int)DTRAIN_ECANCELLED == (int)DT_ECANCELLED,
               "the public codes are dt_err's");
_Static_assert(DTRAIN_MAX_DIMS == DT_TENSOR_MAX_DIMS && DTRAIN_NAME_MAX < DT_TENSOR_NAME_MAX,
               "the public bounds are the tensors'");

static _Thread_local dt_err last_new_err;

/* Clears h's message: a call starts. */
dt_err *dt_api_begin(void *h) {
    dt_api_handle *hd = h;
    dt_err_clear(&hd->err);
    return &hd->err;
}

/* The calloc'd handle of size bytes, or NULL (the thread's error set). */
void *dt_api_new_handle(size_t size, const char *what) {
    dt_api_handle *h = dt_calloc(1, size);
    if (!h) {
        dt_err_set(&last_new_err, DT_ENOMEM, "%s: out of memory", what);
        return NULL;
    }
    h->magic = DT_API_HANDLE_MAGIC;
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
atomic_int dt_api_signal_taken;

int dtrain_exit_code(int code) {
    switch (code) {
    case DT_OK: return 0;
    case DT_ECANCELLED:
        return 128 + (atomic_load(&dt_api_signal_taken) ? dt_api_signal_taken : SIGTERM);
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
    const dt_api_handle *hd = h;
    if (hd->magic != DT_API_HANDLE_MAGIC) return "not a dtrain handle";
    return hd->err.msg;
}

/* ---- cluster ------------------------------------------------------------ */

int dtrain_cluster_new(dtrain_cluster **out) {
    *out = dt_api_new_handle(sizeof **out, "cluster");
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
    dt_err *err = dt_api_begin(c);
    if (!path) return dt_err_set(err, DT_EINVAL, "cluster: no path");
    dt_cluster parsed;
    int rc = dt_cluster_load(path, &parsed, err);
    return rc < 0 ? rc : adopt_cluster(c, &parsed, path, err);
}

int dtrain_cluster_parse(dtrain_cluster *c, const char *text, const char *source) {
    dt_err *err = dt_api_begin(c);
    if (!text) return dt_err_set(err, DT_EINVAL, "cluster: no text");
    if (!source) source = "cluster";
    dt_cluster parsed;
    int rc = dt_cluster_parse(text, source, &parsed, err);
    return rc < 0 ? rc : adopt_cluster(c, &parsed, source, err);
}

int dtrain_cluster_from_env(dtrain_cluster *c) {
    dt_err *err = dt_api_begin(c);
    const char *v = getenv("TF_CONFIG");
    if (!v || !*v) return dt_err_set(err, DT_ENOTFOUND, "cluster: TF_CONFIG is not set");
    dt_cluster parsed;
    int rc = dt_cluster_parse(v, "TF_CONFIG", &parsed, err);
    return rc < 0 ? rc : adopt_cluster(c, &parsed, "TF_CONFIG", err);
}

int dtrain_cluster_set_task(dtrain_cluster *c, const char *job_name, int task_index) {
    dt_err *err = dt_api_begin(c);
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

int dtrain_config_new(dtrain_config **out) {
    *out = dt_api_new_handle(sizeof **out, "config");
    if (*out) dt_job_defaults(&(*out)->job);
    return *out ? 0 : DT_ENOMEM;
}

void dtrain_config_free(dtrain_config *cfg) {
    free(cfg);
}

int dtrain_config_load(dtrain_config *cfg, const char *path) {
    dt_err *err = dt_api_begin(cfg);
    if (!path) return dt_err_set(err, DT_EINVAL, "config: no path");
    return dt_job_load(path, &cfg->job, err);
}

int dtrain_config_set(dtrain_config *cfg, const char *assignment) {
    dt_err *err = dt_api_begin(cfg);
    if (!assignment) return dt_err_set(err, DT_EINVAL, "config: no assignment");
    return dt_job_set(&cfg->job, assignment, err);
}

/* The job as a role runs it: cfg's, checked across fields and finished. */
int dt_api_finished_job(const dtrain_config *cfg, dt_job *out, dt_err *err) {
    *out = cfg->job;
    return dt_job_finish(out, err);
}

int64_t dtrain_config_max_steps(const dtrain_config *cfg) {
    dt_job job;
    dt_err ignored;
    dt_err_clear(&ignored);
    return dt_api_finished_job(cfg, &job, &ignored) < 0 ? cfg->job.max_steps : job.max_steps;
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

/* The role from --job-name/--task-index and the cluster's "task", as the
 * binary resolves them (dt_cluster_resolve_role). */
static int resolve_role(dtrain_cluster *c, const char *source, const char *job_name,
                        const char *task_text, dt_err *err) {
    int rc = dt_cluster_resolve_role(&c->cluster, source, job_name, task_text, 0, &c->role, err);
    if (rc < 0) return rc;
    c->has_role = 1;
    return 0;
}

static int set_level(const char *text, dt_err *err) {
    dt_log_level level;
    if (dt_log_parse_level(text, &level) < 0)
        return dt_err_set(err, DT_EINVAL, "--log-level: unknown level \"%s\"", text);
    dt_log_set_level(level);
    return 0;
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
    dt_err *err = dt_api_begin(c);
    dt_api_begin(cfg);
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
