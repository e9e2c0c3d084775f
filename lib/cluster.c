/*
 * cluster: the cluster file, parsed with cJSON through jsonpos (which gives
 * every error its line:col).
 *
 * Invariant: a dt_cluster is either empty (counts 0, arrays NULL) or fully
 * checked. Threading: as jsonpos, parse from one thread at a time.
 */
#include "cluster.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "alloc.h"
#include "jsonpos.h"
#include "log.h"
#include "text.h"

#define MAX_TASKS 4096 /* per job; keeps the duplicate check cheap */

/* TF_CONFIG's "environment" and "rpc_layer" are skipped (cluster.h). */
int dt_cluster_check_top(const dt_json_doc *d, const cJSON *root, dt_err *err) {
    int k = 0;
    for (const cJSON *m = root->child; m; m = m->next, k++) {
        char key[48];
        dt_json_shown(m->string, key);
        int path[1] = {k};
        int twin = dt_json_earlier_twin(root, m, k);
        if (twin >= 0) {
            char first[32];
            path[0] = twin;
            dt_json_where(d, path, 1, 1, first, sizeof first);
            path[0] = k;
            return dt_json_fail_at(d, path, 1, 1, err, "duplicate field \"%s\" (first at %s)", key,
                                   first);
        }
        const char *name = m->string;
        if (strcmp(name, "cluster") == 0 || strcmp(name, "job") == 0 || strcmp(name, "task") == 0 ||
            strcmp(name, "environment") == 0 || strcmp(name, "rpc_layer") == 0)
            continue;
        dt_task_type type;
        if (dt_task_type_parse(name, &type) == 0)
            return dt_json_fail_at(
                d, path, 1, 1, err,
                "\"%s\" belongs under \"cluster\": {\"cluster\": {\"ps\": [...], "
                "\"worker\": [...]}}",
                key);
        return dt_json_fail_at(
            d, path, 1, 1, err,
            "unknown field \"%s\" (next to \"cluster\" a file may hold only \"job\", "
            "\"task\", \"environment\" and \"rpc_layer\")",
            key);
    }
    return 0;
}

/* Parses "host:port" or "[ipv6]:port" into a; on failure why says what is wrong. */
static int parse_addr(const char *s, dt_addr *a, char *why, size_t cap) {
    const char *host, *host_end, *p;
    int ipv6 = 0;
    if (*s == '\0') return snprintf(why, cap, "empty address (want host:port)"), -1;
    for (const char *q = s; *q; q++)
        if ((unsigned char)*q <= 32 || *q == 127)
            return snprintf(why, cap, "contains a space or control character"), -1;
    if (*s == '[') {
        const char *close = strchr(s, ']');
        if (!close) return snprintf(why, cap, "'[' without ']' (want [ipv6]:port)"), -1;
        host = s + 1;
        host_end = close;
        if (host == host_end) return snprintf(why, cap, "empty host"), -1;
        for (const char *q = host; q < host_end; q++)
            if (!isxdigit((unsigned char)*q) && *q != ':' && *q != '.')
                return snprintf(why, cap, "bad character '%c' in an IPv6 address", *q), -1;
        if (!memchr(host, ':', (size_t)(host_end - host)))
            return snprintf(why, cap, "brackets are for IPv6 addresses only"), -1;
        ipv6 = 1;
        p = close + 1;
        if (*p == '\0') return snprintf(why, cap, "missing port (want [ipv6]:port)"), -1;
        if (*p != ':') return snprintf(why, cap, "expected ':' after ']'"), -1;
        p++;
    } else {
        const char *colon = strchr(s, ':');
        if (!colon) return snprintf(why, cap, "missing port (want host:port)"), -1;
        if (strchr(colon + 1, ':'))
            return snprintf(why, cap, "IPv6 addresses take brackets, e.g. [::1]:1681"), -1;
        host = s;
        host_end = colon;
        if (host == host_end) return snprintf(why, cap, "empty host (want host:port)"), -1;
        for (const char *q = host; q < host_end; q++)
            if (!isalnum((unsigned char)*q) && *q != '-' && *q != '.' && *q != '_')
                return snprintf(why, cap, "bad character '%c' in the host", *q), -1;
        p = colon + 1;
    }
    if (host_end - host >= DT_HOST_MAX)
        return snprintf(why, cap, "host longer than %d bytes", DT_HOST_MAX - 1), -1;
    if (*p == '\0') return snprintf(why, cap, "missing port after ':'"), -1;
    if (!isdigit((unsigned char)*p))
        return snprintf(why, cap, "port must be a number from 1 to 65535"), -1;
    long port = 0;
    const char *q = p;
    for (; isdigit((unsigned char)*q); q++)
        if (port <= 65535) port = port * 10 + (*q - '0'); /* stops growing once too big */
    if (*q != '\0') return snprintf(why, cap, "junk \"%s\" after the port", q), -1;
    if (port < 1 || port > 65535)
        return snprintf(why, cap, "port %.*s is not in 1..65535", (int)(q - p), p), -1;

    memset(a, 0, sizeof *a);
    memcpy(a->host, host, (size_t)(host_end - host));
    a->port = (int)port;
    snprintf(a->addr, sizeof a->addr, ipv6 ? "[%s]:%d" : "%s:%d", a->host, a->port);
    return 0;
}

const char *const dt_task_type_names[DT_NUM_TASK_TYPES] = {"ps", "worker", "chief", "evaluator"};

int dt_task_type_parse(const char *name, dt_task_type *out) {
    for (int t = 0; t < DT_NUM_TASK_TYPES; t++)
        if (strcmp(name, dt_task_type_names[t]) == 0) {
            *out = (dt_task_type)t;
            return 0;
        }
    if (strcmp(name, "master") != 0) return -1;
    *out = DT_TASK_CHIEF;
    return 0;
}

/* One job's address list as read, and where it is for messages. */
typedef struct {
    const char *name; /* as the file spells it ("master" stays "master") */
    dt_addr *addrs;   /* (n) owned */
    int li;           /* member index in the cluster object; -1: absent */
    int n;
} job_list;

/* Reads the list cluster[job->name] (member ci of the root) when present,
 * with between min and max addresses; max_why says why no more. */
static int parse_list(const dt_json_doc *d, const cJSON *cl, int ci, job_list *job, int min,
                      int max, const char *max_why, dt_err *err) {
    const cJSON *list = dt_json_member(cl, job->name, &job->li);
    if (!list) {
        job->li = -1;
        return 0;
    }
    int path[3] = {ci, job->li, 0};
    char got[80], why[160];
    if (!cJSON_IsArray(list)) {
        dt_json_describe(list, got, sizeof got);
        return dt_json_fail_at(d, path, 2, 0, err,
                               "\"%s\" must be a list of \"host:port\" strings (got %s)", job->name,
                               got);
    }
    int n = cJSON_GetArraySize(list);
    if (n < min)
        return dt_json_fail_at(d, path, 2, 0, err,
                               "\"%s\" must list at least one \"host:port\" address", job->name);
    if (n > max)
        return dt_json_fail_at(d, path, 2, 0, err, "\"%s\" lists %d addresses; %s", job->name, n,
                               max_why);
    if (n == 0) return 0;
    dt_addr *addrs = dt_calloc((size_t)n, sizeof *addrs);
    if (!addrs)
        return dt_err_set(err, DT_ENOMEM, "%s: \"%s\": out of memory", d->source, job->name);
    int k = 0;
    for (const cJSON *e = list->child; e; e = e->next, k++) {
        path[2] = k;
        if (!cJSON_IsString(e)) {
            dt_json_describe(e, got, sizeof got);
            free(addrs);
            return dt_json_fail_at(d, path, 3, 0, err,
                                   "\"%s\"[%d] must be a \"host:port\" string (got %s)", job->name,
                                   k, got);
        }
        if (parse_addr(e->valuestring, &addrs[k], why, sizeof why)) {
            dt_json_describe(e, got, sizeof got);
            free(addrs);
            return dt_json_fail_at(d, path, 3, 0, err, "\"%s\"[%d] %s: %s", job->name, k, got, why);
        }
    }
    job->addrs = addrs;
    job->n = n;
    return 0;
}

enum { L_PS, L_CHIEF, L_WORKER, L_EVALUATOR, NUM_LISTS };

/* One address, one task: two tasks cannot both listen on it. Hosts compare
 * without case; names are not resolved ("localhost" and "127.0.0.1"
 * differ). */
static int check_unique(const dt_json_doc *d, int ci, const job_list *lists, dt_err *err) {
    for (int j = 0; j < NUM_LISTS; j++)
        for (int k = 0; k < lists[j].n; k++) {
            const dt_addr *a = &lists[j].addrs[k];
            for (int i = 0; i <= j; i++)
                for (int m = 0; m < (i == j ? k : lists[i].n); m++) {
                    const dt_addr *b = &lists[i].addrs[m];
                    if (a->port != b->port || strcasecmp(a->host, b->host) != 0) continue;
                    char other[32];
                    int pa[3] = {ci, lists[j].li, k}, pb[3] = {ci, lists[i].li, m};
                    dt_json_where(d, pb, 3, 0, other, sizeof other);
                    return dt_json_fail_at(
                        d, pa, 3, 0, err,
                        "\"%s\"[%d] \"%s\" is listed twice: also as \"%s\"[%d] at %s",
                        lists[j].name, k, a->addr, lists[i].name, m, other);
                }
        }
    return 0;
}

/* The members of "cluster": known jobs, each once, not both "chief" and
 * "master". Sets chief_name to the one given (default "chief"). */
static int check_jobs(const dt_json_doc *d, const cJSON *cl, int ci, const char **chief_name,
                      dt_err *err) {
    int path[2] = {ci, 0}, k = 0, chief_at = -1;
    char name[48], first[32];
    for (const cJSON *m = cl->child; m; m = m->next, k++) {
        path[1] = k;
        dt_task_type type;
        int twin = dt_json_earlier_twin(cl, m, k);
        if (twin >= 0) {
            path[1] = twin;
            dt_json_where(d, path, 2, 1, first, sizeof first);
            path[1] = k;
            return dt_json_fail_at(d, path, 2, 1, err, "duplicate job \"%s\" (first at %s)",
                                   dt_json_shown(m->string, name), first);
        }
        if (dt_task_type_parse(m->string, &type) < 0)
            return dt_json_fail_at(d, path, 2, 1, err,
                                   "unknown job \"%s\": the jobs are \"ps\", \"worker\", \"chief\" "
                                   "(or \"master\") and \"evaluator\"",
                                   dt_json_shown(m->string, name));
        if (type != DT_TASK_CHIEF) continue;
        if (chief_at >= 0) {
            path[1] = chief_at;
            dt_json_where(d, path, 2, 1, first, sizeof first);
            path[1] = k;
            return dt_json_fail_at(d, path, 2, 1, err,
                                   "\"chief\" and \"master\" name the same job: give one (first "
                                   "at %s)",
                                   first);
        }
        chief_at = k;
        *chief_name = m->string;
    }
    return 0;
}

/* The training tasks, chief first (cluster.h). */
static int join_workers(const dt_json_doc *d, const job_list *lists, dt_cluster *c, dt_err *err) {
    int n = lists[L_CHIEF].n + lists[L_WORKER].n;
    c->workers = dt_calloc((size_t)n, sizeof *c->workers);
    if (!c->workers) return dt_err_set(err, DT_ENOMEM, "%s: out of memory", d->source);
    if (lists[L_CHIEF].n) c->workers[0] = lists[L_CHIEF].addrs[0];
    for (int i = 0; i < lists[L_WORKER].n; i++)
        c->workers[lists[L_CHIEF].n + i] = lists[L_WORKER].addrs[i];
    c->num_workers = n;
    c->has_chief = lists[L_CHIEF].n;
    return 0;
}

static int parse_cluster(const dt_json_doc *d, const cJSON *root, dt_cluster *c, dt_err *err) {
    int ci;
    char got[80];
    const cJSON *cl = dt_json_member(root, "cluster", &ci);
    if (!cl)
        return dt_json_fail_at(d, NULL, 0, 0, err,
                               "missing \"cluster\" (want {\"cluster\": {\"ps\": [...], "
                               "\"worker\": [...]}})");
    int path[1] = {ci};
    if (!cJSON_IsObject(cl)) {
        dt_json_describe(cl, got, sizeof got);
        return dt_json_fail_at(
            d, path, 1, 0, err,
            "\"cluster\" must be an object, {\"ps\": [...], \"worker\": [...]} (got %s)", got);
    }
    job_list lists[NUM_LISTS] = {
        {.name = "ps"}, {.name = "chief"}, {.name = "worker"}, {.name = "evaluator"}};
    int rc = check_jobs(d, cl, ci, &lists[L_CHIEF].name, err);
    if (!rc) rc = parse_list(d, cl, ci, &lists[L_PS], 1, MAX_TASKS, "too many", err);
    if (!rc)
        rc = parse_list(d, cl, ci, &lists[L_CHIEF], 1, 1,
                        "a cluster has one chief (the "
                        "training task that saves)",
                        err);
    if (!rc)
        rc = parse_list(d, cl, ci, &lists[L_WORKER], lists[L_CHIEF].n ? 0 : 1, MAX_TASKS - 1,
                        "too many", err);
    if (!rc)
        rc = parse_list(d, cl, ci, &lists[L_EVALUATOR], 1, 1, "a cluster has at most one evaluator",
                        err);
    if (!rc && lists[L_PS].li < 0)
        rc = dt_json_fail_at(d, path, 1, 0, err, "\"cluster\" has no \"ps\" list");
    if (!rc && lists[L_WORKER].li < 0 && lists[L_CHIEF].li < 0)
        rc = dt_json_fail_at(d, path, 1, 0, err,
                             "\"cluster\" has no \"worker\" list (nor a \"chief\")");
    if (!rc) rc = check_unique(d, ci, lists, err);
    if (!rc) rc = join_workers(d, lists, c, err);
    free(lists[L_CHIEF].addrs);
    free(lists[L_WORKER].addrs);
    c->ps = lists[L_PS].addrs;
    c->num_ps = lists[L_PS].n;
    c->evaluators = lists[L_EVALUATOR].addrs;
    c->num_evaluators = lists[L_EVALUATOR].n;
    return rc;
}

/* "task": {"type": "worker", "index": 1}; Vertex AI adds "trial" and
 * "cloud", which are not dtrain's. */
static int parse_task(const dt_json_doc *d, const cJSON *root, dt_cluster *c, dt_err *err) {
    int ti;
    const cJSON *task = dt_json_member(root, "task", &ti);
    if (!task) return 0;
    int path[2] = {ti, 0}, k = 0, ki = -1, tk = -1;
    char got[80], name[48];
    if (!cJSON_IsObject(task)) {
        dt_json_describe(task, got, sizeof got);
        return dt_json_fail_at(d, path, 1, 0, err,
                               "\"task\" must be an object, {\"type\": \"worker\", \"index\": 0} "
                               "(got %s)",
                               got);
    }
    const cJSON *type = NULL, *index = NULL;
    for (const cJSON *m = task->child; m; m = m->next, k++) {
        path[1] = k;
        if (dt_json_earlier_twin(task, m, k) >= 0)
            return dt_json_fail_at(d, path, 2, 1, err, "duplicate field \"task\".\"%s\"",
                                   dt_json_shown(m->string, name));
        if (strcmp(m->string, "type") == 0)
            type = m, tk = k;
        else if (strcmp(m->string, "index") == 0)
            index = m, ki = k;
        else if (strcmp(m->string, "trial") != 0 && strcmp(m->string, "cloud") != 0)
            return dt_json_fail_at(d, path, 2, 1, err,
                                   "unknown field \"task\".\"%s\" (it holds \"type\" and "
                                   "\"index\")",
                                   dt_json_shown(m->string, name));
    }
    if (!type || !index)
        return dt_json_fail_at(d, path, 1, 0, err,
                               "\"task\" has no \"%s\" (want {\"type\": "
                               "\"worker\", \"index\": 0})",
                               type ? "index" : "type");
    path[1] = tk;
    if (!cJSON_IsString(type) || dt_task_type_parse(type->valuestring, &c->task_type) < 0) {
        dt_json_describe(type, got, sizeof got);
        return dt_json_fail_at(d, path, 2, 0, err,
                               "\"task\".\"type\" %s is not a job: \"ps\", \"worker\", \"chief\", "
                               "\"master\" or \"evaluator\"",
                               got);
    }
    path[1] = ki;
    double v = cJSON_IsNumber(index) ? index->valuedouble : -1;
    if (v < 0 || v > MAX_TASKS || v != (double)(int)v) {
        dt_json_describe(index, got, sizeof got);
        return dt_json_fail_at(d, path, 2, 0, err,
                               "\"task\".\"index\" must be a whole number from 0 (got %s)", got);
    }
    c->task_index = (int)v;
    c->has_task = 1;
    dt_role role;
    dt_err why;
    dt_err_clear(&why);
    if (dt_cluster_role(c, c->task_type, c->task_index, "\"task\"", &role, &why) < 0)
        return dt_json_fail_at(d, path, 2, 0, err, "%s", why.msg);
    return 0;
}

int dt_cluster_parse(const char *text, const char *source, dt_cluster *c, dt_err *err) {
    DT_ASSERT(text && c);
    dt_json_doc d = {text, source ? source : "cluster"};
    dt_cluster out = {0};
    cJSON *root = NULL;
    memset(c, 0, sizeof *c);
    int rc = dt_json_parse_object(
        &d, "cluster", ", {\"cluster\": {\"ps\": [...], \"worker\": [...]}}", &root, err);
    if (!rc) rc = dt_cluster_check_top(&d, root, err);
    if (!rc) rc = parse_cluster(&d, root, &out, err);
    if (!rc) rc = parse_task(&d, root, &out, err);
    cJSON_Delete(root);
    if (rc) {
        dt_cluster_deinit(&out);
        return rc;
    }
    *c = out;
    return 0;
}

int dt_cluster_role(const dt_cluster *c, dt_task_type type, int index, const char *what,
                    dt_role *out, dt_err *err) {
    int n = type == DT_TASK_PS       ? c->num_ps
            : type == DT_TASK_WORKER ? c->num_workers - c->has_chief
            : type == DT_TASK_CHIEF  ? c->has_chief
                                     : 1;
    const char *job = dt_task_type_names[type];
    if (type == DT_TASK_CHIEF && !c->has_chief)
        return dt_err_set(err, DT_EINVAL,
                          "%s: the cluster has no \"chief\" job (then worker 0 is the chief: "
                          "job worker, task 0)",
                          what);
    if (index < 0 || index >= n)
        return dt_err_set(err, DT_EINVAL,
                          "%s: %s task %d out of range: the cluster has %d %s task%s", what, job,
                          index, n, job, n == 1 ? "" : "s");
    out->type = type == DT_TASK_CHIEF ? DT_TASK_WORKER : type;
    out->index = type == DT_TASK_WORKER ? index + c->has_chief : index;
    return 0;
}

int dt_cluster_resolve_role(const dt_cluster *c, const char *source, const char *job_name,
                            const char *task_text, int allow_evaluator, dt_role *out, dt_err *err) {
    dt_task_type type = c->task_type;
    int index = c->task_index;
    if (job_name && dt_task_type_parse(job_name, &type) < 0)
        return dt_err_set(err, DT_EINVAL,
                          "--job-name: unknown job \"%s\" (expected ps, worker, %s)", job_name,
                          allow_evaluator ? "chief, master or evaluator" : "chief or master");
    uint64_t v = 0;
    if (task_text && dt_text_parse_decimal(task_text, 1000000, &v) < 0)
        return dt_err_set(err, DT_EINVAL, "--task-index: \"%s\" is not a non-negative integer",
                          task_text);
    if (task_text) index = (int)v;
    if (!c->has_task) {
        if (!job_name)
            return dt_err_set(err, DT_EINVAL,
                              "missing --job-name (ps or worker; %s has no \"task\")", source);
        if (!task_text)
            return dt_err_set(err, DT_EINVAL, "missing --task-index N (%s has no \"task\")",
                              source);
    } else if (job_name && task_text) {
        if (type != c->task_type || index != c->task_index)
            dt_log(DT_LOG_INFO, "--job-name %s --task-index %d override %s \"task\" (%s %d)",
                   job_name, index, source, dt_task_type_names[c->task_type], c->task_index);
    } else if (type != c->task_type || index != c->task_index) {
        return dt_err_set(err, DT_EINVAL,
                          "%s %s conflicts with %s \"task\" {\"type\": \"%s\", \"index\": %d}: "
                          "give both --job-name and --task-index, or neither",
                          job_name ? "--job-name" : "--task-index", job_name ? job_name : task_text,
                          source, dt_task_type_names[c->task_type], c->task_index);
    }
    if (type == DT_TASK_EVALUATOR && !allow_evaluator)
        return dt_err_set(err, DT_EINVAL,
                          "--job-name evaluator: the evaluator is the binary's own (dtrain "
                          "--job-name evaluator)");
    if (!job_name && !task_text) return dt_cluster_role(c, type, index, source, out, err);
    int rc = dt_cluster_role(c, type, index, "--job-name/--task-index", out, err);
    return rc < 0 ? dt_err_wrap(err, rc, "%s", source) : 0;
}

int dt_cluster_load(const char *path, dt_cluster *c, dt_err *err) {
    DT_ASSERT(path && c);
    char *text = NULL;
    memset(c, 0, sizeof *c);
    int rc = dt_json_read_file(path, &text, err);
    if (rc) return rc;
    rc = dt_cluster_parse(text, path, c, err);
    free(text);
    return rc;
}

void dt_cluster_deinit(dt_cluster *c) {
    if (!c) return;
    free(c->ps);
    free(c->workers);
    free(c->evaluators);
    memset(c, 0, sizeof *c);
}
