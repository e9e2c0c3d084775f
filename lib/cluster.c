/*
 * cluster: the cluster file, parsed with cJSON through jsonpos (which gives
 * every error its line:col).
 *
 * Invariant: a dt_cluster is either empty (counts 0, arrays NULL) or fully
 * checked. Threading: as jsonpos, parse from one thread at a time.
 */
#include "cluster.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_TASKS 4096 /* per job; keeps the duplicate check cheap */

/* "task" is TF_CONFIG's, read by the command line, not here. */
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
        if (strcmp(name, "cluster") == 0 || strcmp(name, "job") == 0 || strcmp(name, "task") == 0)
            continue;
        if (strcmp(name, "ps") == 0 || strcmp(name, "worker") == 0 || strcmp(name, "chief") == 0)
            return dt_json_fail_at(
                d, path, 1, 1, err,
                "\"%s\" belongs under \"cluster\": {\"cluster\": {\"ps\": [...], "
                "\"worker\": [...]}}",
                key);
        return dt_json_fail_at(
            d, path, 1, 1, err,
            "unknown field \"%s\" (next to \"cluster\" a file may hold only \"job\" "
            "and \"task\")",
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

/* Parses the list cluster[job]; the cluster object is member ci of the root. */
static int parse_list(const dt_json_doc *d, const cJSON *cl, int ci, const char *job, dt_addr **out,
                      int *num, dt_err *err) {
    int li;
    const cJSON *list = dt_json_member(cl, job, &li);
    int path[3] = {ci, li, 0};
    char got[80], why[160];
    if (!list) return dt_json_fail_at(d, path, 1, 0, err, "\"cluster\" has no \"%s\" list", job);
    if (!cJSON_IsArray(list)) {
        dt_json_describe(list, got, sizeof got);
        return dt_json_fail_at(d, path, 2, 0, err,
                               "\"%s\" must be a list of \"host:port\" strings (got %s)", job, got);
    }
    int n = cJSON_GetArraySize(list);
    if (n == 0)
        return dt_json_fail_at(d, path, 2, 0, err,
                               "\"%s\" must list at least one \"host:port\" address", job);
    if (n > MAX_TASKS)
        return dt_json_fail_at(d, path, 2, 0, err,
                               "\"%s\" lists %d addresses; at most %d are supported", job, n,
                               MAX_TASKS);
    dt_addr *addrs = calloc((size_t)n, sizeof *addrs);
    if (!addrs) return dt_err_set(err, DT_ENOMEM, "%s: \"%s\": out of memory", d->source, job);
    int k = 0;
    for (const cJSON *e = list->child; e; e = e->next, k++) {
        path[2] = k;
        if (!cJSON_IsString(e)) {
            dt_json_describe(e, got, sizeof got);
            free(addrs);
            return dt_json_fail_at(d, path, 3, 0, err,
                                   "\"%s\"[%d] must be a \"host:port\" string (got %s)", job, k,
                                   got);
        }
        if (parse_addr(e->valuestring, &addrs[k], why, sizeof why)) {
            dt_json_describe(e, got, sizeof got);
            free(addrs);
            return dt_json_fail_at(d, path, 3, 0, err, "\"%s\"[%d] %s: %s", job, k, got, why);
        }
    }
    *out = addrs;
    *num = n;
    return 0;
}

int dt_cluster_parse(const char *text, const char *source, dt_cluster *c, dt_err *err) {
    DT_ASSERT(text && c);
    dt_json_doc d = {text, source ? source : "cluster"};
    dt_cluster out = {0};
    cJSON *root = NULL;
    char got[80];
    int rc;
    memset(c, 0, sizeof *c);

    if ((rc = dt_json_parse_object(
             &d, "cluster", ", {\"cluster\": {\"ps\": [...], \"worker\": [...]}}", &root, err)))
        goto fail;
    if ((rc = dt_cluster_check_top(&d, root, err))) goto fail;
    int ci;
    const cJSON *cl = dt_json_member(root, "cluster", &ci);
    if (!cl) {
        rc = dt_json_fail_at(&d, NULL, 0, 0, err,
                             "missing \"cluster\" (want {\"cluster\": {\"ps\": [...], \"worker\": "
                             "[...]}})");
        goto fail;
    }
    int path[2] = {ci, 0};
    if (!cJSON_IsObject(cl)) {
        dt_json_describe(cl, got, sizeof got);
        rc = dt_json_fail_at(
            &d, path, 1, 0, err,
            "\"cluster\" must be an object, {\"ps\": [...], \"worker\": [...]} (got %s)", got);
        goto fail;
    }
    int k = 0;
    char name[48];
    for (const cJSON *m = cl->child; m; m = m->next, k++) {
        path[1] = k;
        int twin = dt_json_earlier_twin(cl, m, k);
        if (twin >= 0) {
            char first[32];
            path[1] = twin;
            dt_json_where(&d, path, 2, 1, first, sizeof first);
            path[1] = k;
            rc = dt_json_fail_at(&d, path, 2, 1, err, "duplicate job \"%s\" (first at %s)",
                                 dt_json_shown(m->string, name), first);
            goto fail;
        }
        if (strcmp(m->string, "ps") == 0 || strcmp(m->string, "worker") == 0) continue;
        if (strcmp(m->string, "chief") == 0)
            rc = dt_json_fail_at(
                &d, path, 2, 1, err,
                "a \"chief\" job is not supported: worker 0 is the chief, so list its "
                "address first under \"worker\"");
        else
            rc = dt_json_fail_at(&d, path, 2, 1, err,
                                 "unknown job \"%s\": only \"ps\" and \"worker\" are supported",
                                 dt_json_shown(m->string, name));
        goto fail;
    }
    if ((rc = parse_list(&d, cl, ci, "ps", &out.ps, &out.num_ps, err))) goto fail;
    if ((rc = parse_list(&d, cl, ci, "worker", &out.workers, &out.num_workers, err))) goto fail;

    /* One address, one task: two tasks cannot both listen on it. Hosts
     * compare without case; names are not resolved ("localhost" and
     * "127.0.0.1" differ). Task t counts the ps first, then the workers. */
    int pi, wi;
    dt_json_member(cl, "ps", &pi);
    dt_json_member(cl, "worker", &wi);
    int total = out.num_ps + out.num_workers;
    for (int t = 1; t < total; t++) {
        int t_ps = t < out.num_ps;
        int pa[3] = {ci, t_ps ? pi : wi, t_ps ? t : t - out.num_ps};
        const dt_addr *a = t_ps ? &out.ps[pa[2]] : &out.workers[pa[2]];
        for (int u = 0; u < t; u++) {
            int u_ps = u < out.num_ps;
            int pb[3] = {ci, u_ps ? pi : wi, u_ps ? u : u - out.num_ps};
            const dt_addr *b = u_ps ? &out.ps[pb[2]] : &out.workers[pb[2]];
            if (a->port != b->port || strcasecmp(a->host, b->host) != 0) continue;
            char other[32];
            dt_json_where(&d, pb, 3, 0, other, sizeof other);
            rc = dt_json_fail_at(
                &d, pa, 3, 0, err, "\"%s\"[%d] \"%s\" is listed twice: also as \"%s\"[%d] at %s",
                t_ps ? "ps" : "worker", pa[2], a->addr, u_ps ? "ps" : "worker", pb[2], other);
            goto fail;
        }
    }
    cJSON_Delete(root);
    *c = out;
    return 0;
fail:
    free(out.ps);
    free(out.workers);
    cJSON_Delete(root);
    return rc;
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
    memset(c, 0, sizeof *c);
}
