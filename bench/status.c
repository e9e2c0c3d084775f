/*
 * bench_status: what a worker's heartbeat costs the ps and the worker,
 * against a full Status: a ps serving in this process on 127.0.0.1:PORT
 * (no model: Status needs none) knows W workers, each of which calls once
 * first, so a full Status lists all W (what the chief's once-a-second
 * Status and `dtrain status` read). Then, round-robin over W clients (one
 * a worker index, as a worker's heartbeat thread has), R full Status calls
 * (dt_ps_client_status), then R heartbeats (dt_ps_client_heartbeat: the
 * ps notes the call and answers with the job's state alone).
 *
 * CPU is the process's (getrusage): client and ps together, so one call's
 * whole cost on the machine, the round trip's gRPC work on both sides
 * included. Wall time is per call, one call in flight.
 *
 * Output (stdout), one line:
 *   status workers=W rounds=R full_us=A full_cpu_us=B heartbeat_us=C heartbeat_cpu_us=D
 * Exit status: 0, 1 on a failure (message on stderr), 2 on usage errors.
 */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "common.h"
#include "log.h"
#include "ps.h"
#include "ps_client.h"

#define MAX_WORKERS 64

static int usage(void) {
    fprintf(stderr, "usage: bench_status --port PORT [--workers W] [--rounds R]\n");
    return 2;
}

/* The process's CPU seconds so far, user and system. */
static double cpu_secs(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

static void loopback(dt_addr *a, int port) {
    memset(a, 0, sizeof *a);
    snprintf(a->host, sizeof a->host, "127.0.0.1");
    a->port = port;
    snprintf(a->addr, sizeof a->addr, "127.0.0.1:%d", port);
}

int main(int argc, char **argv) {
    int64_t port = 0, workers = 16, rounds = 5000;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) return usage();
        int64_t *v = !strcmp(argv[i], "--port")      ? &port
                     : !strcmp(argv[i], "--workers") ? &workers
                     : !strcmp(argv[i], "--rounds")  ? &rounds
                                                     : NULL;
        if (!v) return usage();
        int64_t hi = v == &workers ? MAX_WORKERS : v == &port ? 65535 : 10000000;
        if (dt_bench_parse_int(argv[i + 1], 1, hi, v) < 0) return usage();
    }
    if (!port) return usage();
    dt_log_set_level(DT_LOG_WARN);
    dt_addr ps_addr[1], worker_addr[MAX_WORKERS];
    loopback(&ps_addr[0], (int)port);
    for (int w = 0; w < workers; w++)
        loopback(&worker_addr[w], 1); /* never dialled */
    dt_cluster cl;
    memset(&cl, 0, sizeof cl);
    cl.num_ps = 1;
    cl.ps = ps_addr;
    cl.num_workers = (int)workers;
    cl.workers = worker_addr;
    dt_ps_params pp = {.cluster = &cl, .task_index = 0};
    dt_ps *ps = NULL;
    dt_ps_client *clients[MAX_WORKERS] = {0};
    dt_err err;
    dt_err_clear(&err);
    int status = 1;
    if (dt_ps_start(&pp, &ps, &err) < 0) goto fail;
    dt_tensors none;
    memset(&none, 0, sizeof none);
    dt_msg_status_resp st;
    for (int w = 0; w < workers; w++) {
        dt_ps_client_params cp = {.cluster = &cl, .worker = w, .timeout_ms = 5000};
        if (dt_ps_client_new(&cp, &none, &clients[w], &err) < 0) goto fail;
        /* The server is up once dt_ps_start returned; a first call may still
         * meet the connection being made: a few tries. */
        int rc = -1;
        for (int k = 0; k < 50 && rc < 0; k++) {
            dt_err_clear(&err);
            if ((rc = dt_ps_client_status(clients[w], 0, &st, &err)) < 0) dt_bench_sleep_ms(20);
        }
        if (rc < 0) goto fail;
    }
    double t0 = dt_bench_now_secs(), c0 = cpu_secs();
    for (int64_t i = 0; i < rounds; i++)
        if (dt_ps_client_status(clients[i % workers], 0, &st, &err) < 0) goto fail;
    double t1 = dt_bench_now_secs(), c1 = cpu_secs();
    if (st.num_workers != workers) {
        dt_err_set(&err, DT_EINTERNAL, "a full Status listed %d workers, not %lld", st.num_workers,
                   (long long)workers);
        goto fail;
    }
    for (int64_t i = 0; i < rounds; i++)
        if (dt_ps_client_heartbeat(clients[i % workers], &err) < 0) goto fail;
    double t2 = dt_bench_now_secs(), c2 = cpu_secs();
    const double per = 1e6 / (double)rounds;
    printf("status workers=%lld rounds=%lld full_us=%.1f full_cpu_us=%.1f heartbeat_us=%.1f "
           "heartbeat_cpu_us=%.1f\n",
           (long long)workers, (long long)rounds, (t1 - t0) * per, (c1 - c0) * per, (t2 - t1) * per,
           (c2 - c1) * per);
    status = fflush(stdout) == 0 ? 0 : 1;
fail:
    if (status != 0 && err.msg[0]) fprintf(stderr, "bench_status: %s\n", err.msg);
    for (int w = 0; w < MAX_WORKERS; w++)
        dt_ps_client_free(clients[w]);
    dt_ps_free(ps);
    return status;
}
