/*
 * bench_metrics: what /metrics adds to a step, measured where it is
 * paid. The hooks every step makes whether or not the metrics are served
 * (the ps: a call's counters, bytes and latency histogram, two clock
 * reads; a worker: the round trip's histogram, the step's counters and
 * histogram, the compute phase: two more clock reads) are run N times on
 * one thread and on two threads at once (the same histograms: the
 * contended case of two pollers), and a page of the training task's
 * families is rendered R times (what one scrape costs the role).
 *
 * Output (stdout), one line:
 *   metrics hooks=N ns_per_step=A ns_per_step_2threads=B render_us=C page_bytes=D
 * Exit status: 0, 1 on a failure (message on stderr), 2 on usage errors.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "log.h"
#include "metrics.h"
#include "train_metrics.h"

static int64_t steps = 2000000;
static dt_counter calls, bytes_in, bytes_out;
static dt_histogram latency;

/* One step's hooks on both sides, as the ps and a worker make them. */
static void *run_steps(void *arg) {
    (void)arg;
    for (int64_t i = 0; i < steps; i++) {
        /* ps: rpc_server's handle() */
        double arrived = dt_now_secs();
        dt_counter_add(&bytes_in, 73);
        dt_counter_add(&bytes_out, 67);
        dt_counter_add(&calls, 1);
        dt_histogram_observe(&latency, dt_now_secs() - arrived);
        /* worker: ps_client's run_on, compute(), after_step() */
        double t0 = dt_now_secs();
        dt_train_metrics_call("/dtrain.ParameterServer/Push", dt_now_secs() - t0);
        t0 = dt_now_secs();
        dt_train_metrics_phase(DT_PHASE_COMPUTE, dt_now_secs() - t0);
        dt_train_metrics_step(i, 0.5, 10);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int64_t renders = 200;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc &&
            dt_bench_parse_int(argv[++i], 1, INT64_MAX / 2, &steps) == 0)
            continue;
        if (strcmp(argv[i], "--renders") == 0 && i + 1 < argc &&
            dt_bench_parse_int(argv[++i], 1, 1000000, &renders) == 0)
            continue;
        fprintf(stderr, "usage: bench_metrics [--steps N] [--renders R]\n");
        return 2;
    }
    latency.bounds = dt_metrics_latency_bounds;
    latency.num_bounds = DT_METRICS_LATENCY_BOUNDS;
    dt_err err;
    dt_err_clear(&err);
    dt_log_set_role('W');
    dt_log_set_task(1);
    if (dt_train_metrics_register(0, 0, &err) < 0) {
        fprintf(stderr, "bench_metrics: %s\n", err.msg);
        return 1;
    }
    run_steps(NULL); /* warm */
    double t0 = dt_bench_now_secs();
    run_steps(NULL);
    double one = (dt_bench_now_secs() - t0) / (double)steps * 1e9;
    pthread_t other;
    t0 = dt_bench_now_secs();
    if (pthread_create(&other, NULL, run_steps, NULL) != 0) return 1;
    run_steps(NULL);
    pthread_join(other, NULL);
    double two = (dt_bench_now_secs() - t0) / (double)steps * 1e9;
    size_t len = 0;
    t0 = dt_bench_now_secs();
    for (int64_t r = 0; r < renders; r++) {
        char *page = NULL;
        if (dt_metrics_render(&page, &len, &err) < 0) {
            fprintf(stderr, "bench_metrics: %s\n", err.msg);
            return 1;
        }
        free(page);
    }
    double render_us = (dt_bench_now_secs() - t0) / (double)renders * 1e6;
    printf("metrics hooks=%lld ns_per_step=%.1f ns_per_step_2threads=%.1f render_us=%.1f "
           "page_bytes=%zu\n",
           (long long)steps, one, two, render_us, len);
    return 0;
}
