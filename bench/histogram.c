/*
 * bench_histogram: what the chief's histogram of one large variable costs
 * at a summary step: dt_summary_histogram_floats over N float32 values
 * (default 10M, a 40 MB variable), written to an event file in a temp dir.
 *
 * The values are He-initialized-like weights (normal, stddev 0.05, by
 * Box-Muller from a fixed seed), so they spread over ~100 of TF's buckets
 * on each side of 0, as a trained layer's do. One untimed call first
 * (bucket tables, record buffer), then R timed calls; the best and the
 * mean are reported.
 *
 * Output (stdout), one line:
 *   histogram floats=N rounds=R best_ms=B mean_ms=M ns_per_float=X entries_bytes=E
 * (E: the event file's size after the first record, per histogram).
 * Exit status: 0, 1 on a failure (message on stderr), 2 on usage errors.
 *
 * Single-threaded.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "summary.h"

static int usage(void) {
    fprintf(stderr, "usage: bench_histogram [--floats N] [--rounds R]\n");
    return 2;
}

/* Normal values, stddev 0.05: splitmix64 into Box-Muller. */
static void fill(float *v, int64_t n) {
    uint64_t s = 7;
    for (int64_t i = 0; i < n; i += 2) {
        double u[2];
        for (int k = 0; k < 2; k++) {
            uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
            z ^= z >> 31;
            u[k] = ((double)(z >> 11) + 0.5) * 0x1.0p-53;
        }
        double r = sqrt(-2 * log(u[0])) * 0.05;
        v[i] = (float)(r * cos(2 * M_PI * u[1]));
        if (i + 1 < n) v[i + 1] = (float)(r * sin(2 * M_PI * u[1]));
    }
}

int main(int argc, char **argv) {
    int64_t n = 10000000, rounds = 5;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (strcmp(argv[i], "--floats") == 0 && dt_bench_parse_int(v, 1, 1000000000, &n) == 0)
            i++;
        else if (strcmp(argv[i], "--rounds") == 0 && dt_bench_parse_int(v, 1, 1000, &rounds) == 0)
            i++;
        else
            return usage();
    }
    float *values = malloc((size_t)n * sizeof *values);
    if (!values) {
        fprintf(stderr, "bench_histogram: no memory for %lld floats\n", (long long)n);
        return 1;
    }
    fill(values, n);
    char dir[] = "/tmp/dtrain-bench-histogram.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("bench_histogram: mkdtemp");
        free(values);
        return 1;
    }
    dt_err err;
    dt_err_clear(&err);
    dt_summary_writer *w = NULL;
    int rc = dt_summary_open(dir, &w, &err);
    double best = 1e30, total = 0;
    long long entries_bytes = 0;
    for (int64_t r = 0; rc == 0 && r <= rounds; r++) {
        struct stat before, after;
        stat(dt_summary_path(w), &before);
        double t0 = dt_bench_now_secs();
        rc = dt_summary_histogram_floats(w, r + 1, "layer0/weight", values, n, NULL, &err);
        double secs = dt_bench_now_secs() - t0;
        stat(dt_summary_path(w), &after);
        if (r == 0) {
            entries_bytes = (long long)(after.st_size - before.st_size);
            continue; /* warm-up */
        }
        total += secs;
        if (secs < best) best = secs;
    }
    if (w) {
        unlink(dt_summary_path(w));
        dt_summary_close(w);
    }
    rmdir(dir);
    free(values);
    if (rc < 0) {
        fprintf(stderr, "bench_histogram: %s\n", err.msg);
        return 1;
    }
    printf("histogram floats=%lld rounds=%lld best_ms=%.1f mean_ms=%.1f ns_per_float=%.2f "
           "entries_bytes=%lld\n",
           (long long)n, (long long)rounds, best * 1e3, total / (double)rounds * 1e3,
           best * 1e9 / (double)n, entries_bytes);
    return 0;
}
