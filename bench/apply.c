/*
 * bench_apply: what the ps's pass before an update costs, in one thread,
 * without RPC: for each rule, N floats of a variable, its slots and a
 * gradient of 2^-10 (finite, no overflow), R rounds of
 *   grad-check  the gradient's NaN/Inf scan, then the update (the push path
 *               before values were checked: dt_span_first_nonfinite +
 *               dt_optim_apply_to out of place);
 *   value-check the update tried without writing, then made (the push path
 *               now: dt_optim_first_nonfinite + dt_optim_apply_to).
 * Prints one line per rule and mode with the best round's ms and GB/s of
 * the variable (N*4 bytes / best round). The two read the same gradient;
 * value-check also reads w and the slots once more.
 *
 * Usage: bench_apply [--floats N] [--rounds R]   (defaults 10000000, 10)
 * Exit status 0, 1 on no memory, 2 on usage errors. Single-threaded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "common.h"
#include "optim.h"
#include "rpc_common.h"

static double best_round(const dt_optim_config *cfg, int value_check, float *w, float *out,
                         float *const *slots, const float *g, int64_t n, int rounds,
                         int64_t *sink) {
    double best = 1e30;
    dt_piece one = {(const uint8_t *)g, (size_t)n * sizeof(float)};
    dt_span span = {&one, 0, one.len};
    for (int r = 0; r < rounds; r++) {
        double t0 = dt_bench_now_secs();
        int64_t bad = value_check
                          ? dt_optim_first_nonfinite(cfg, cfg->learning_rate, r + 1, w, slots, g, n)
                          : (int64_t)dt_span_first_nonfinite(&span);
        if (bad == n) dt_optim_apply_to(cfg, cfg->learning_rate, r + 1, w, out, slots, g, n);
        double t = dt_bench_now_secs() - t0;
        *sink += bad;
        float *tmp = w; /* the ps writes the spare, then makes it current */
        w = out;
        out = tmp;
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    int64_t n = 10000000, rounds = 10;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--floats") == 0) {
            if (dt_bench_parse_int(argv[++i], 1, (int64_t)1 << 30, &n) < 0) return 2;
        } else if (i + 1 < argc && strcmp(argv[i], "--rounds") == 0) {
            if (dt_bench_parse_int(argv[++i], 1, 1000, &rounds) < 0) return 2;
        } else {
            fprintf(stderr, "usage: bench_apply [--floats N] [--rounds R]\n");
            return 2;
        }
    }
    size_t bytes = (size_t)n * sizeof(float);
    float *w = dt_malloc(bytes), *out = dt_malloc(bytes), *g = dt_malloc(bytes);
    float *s0 = dt_malloc(bytes), *s1 = dt_malloc(bytes);
    if (!w || !out || !g || !s0 || !s1) {
        fprintf(stderr, "bench_apply: out of memory\n");
        return 1;
    }
    int64_t sink = 0;
    for (int k = DT_OPTIM_SGD; k <= DT_OPTIM_FTRL; k++) {
        dt_optim_config cfg;
        dt_optim_defaults(&cfg);
        cfg.kind = k;
        for (int mode = 0; mode < 2; mode++) {
            for (int64_t i = 0; i < n; i++) {
                w[i] = out[i] = 0.5f;
                g[i] = 1.0f / 1024;
                s0[i] = dt_optim_num_slots(&cfg) > 0 ? dt_optim_slot_init(&cfg, 0) : 0;
                s1[i] = dt_optim_num_slots(&cfg) > 1 ? dt_optim_slot_init(&cfg, 1) : 0;
            }
            float *slots[2] = {s0, s1};
            double t = best_round(&cfg, mode, w, out, slots, g, n, (int)rounds, &sink);
            printf("apply optimizer=%s mode=%s floats=%lld best_ms=%.2f gb_per_s=%.2f\n",
                   dt_optim_name(k), mode ? "value-check" : "grad-check", (long long)n, t * 1e3,
                   (double)bytes / t / 1e9);
        }
    }
    free(w);
    free(out);
    free(g);
    free(s0);
    free(s1);
    return sink == n * rounds * 10 ? 0 : 1;
}
