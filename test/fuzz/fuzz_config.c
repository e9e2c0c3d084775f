/*
 * Fuzz target: the configuration parsers on the input as text: the
 * cluster file (dt_cluster_parse), the job config (dt_job_parse, then
 * dt_job_finish on what parsed) and one --set assignment (dt_job_set).
 *
 * Beyond "no crash, no sanitizer report": a failure has a negative code
 * and a message naming the source; a parsed cluster has at least one task,
 * ports in 1..65535 and "host:port" addresses; a failed job parse or
 * --set leaves the job as it was.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "job.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_config: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void check_addr(const dt_addr *a) {
    CHECK(a->port >= 1 && a->port <= 65535);
    CHECK(memchr(a->host, '\0', sizeof a->host) != NULL && a->host[0] != '\0');
    CHECK(memchr(a->addr, '\0', sizeof a->addr) != NULL && strchr(a->addr, ':') != NULL);
}

static void cluster(const char *text) {
    dt_cluster c;
    dt_err err;
    dt_err_clear(&err);
    memset(&c, 0, sizeof c);
    int rc = dt_cluster_parse(text, "fuzz.json", &c, &err);
    if (rc < 0) {
        CHECK(err.code == rc && strstr(err.msg, "fuzz.json") != NULL);
        CHECK(c.ps == NULL && c.workers == NULL);
        return;
    }
    CHECK(c.num_ps >= 0 && c.num_workers >= 0 && c.num_ps + c.num_workers >= 1);
    for (int i = 0; i < c.num_ps; i++)
        check_addr(&c.ps[i]);
    for (int i = 0; i < c.num_workers; i++)
        check_addr(&c.workers[i]);
    dt_cluster_deinit(&c);
}

static void job(const char *text) {
    dt_job before, j;
    dt_err err;
    dt_err_clear(&err);
    dt_job_defaults(&before);
    j = before;
    int rc = dt_job_parse(text, "fuzz.json", &j, &err);
    if (rc < 0) {
        CHECK(err.code == rc && strstr(err.msg, "fuzz.json") != NULL);
        CHECK(memcmp(&j, &before, sizeof j) == 0);
        return;
    }
    dt_err_clear(&err);
    rc = dt_job_finish(&j, &err);
    CHECK(rc == 0 || (err.code == rc && err.msg[0] != '\0'));
}

static void assignment(const char *text) {
    dt_job before, j;
    dt_err err;
    dt_err_clear(&err);
    dt_job_defaults(&before);
    j = before;
    int rc = dt_job_set(&j, text, &err);
    if (rc < 0) {
        CHECK(err.code == rc && err.msg[0] != '\0');
        CHECK(memcmp(&j, &before, sizeof j) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    cluster(text);
    job(text);
    assignment(text);
    free(text);
    return 0;
}
