/*
 * spin: the budget and the hit share (spin.h says why).
 *
 * Invariant: budget is -1 until the first dt_spin_budget_us, then the
 * process's budget for good; a race on the first read computes the same
 * value twice (and may warn twice).
 */
#include "spin.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "log.h"

static atomic_long budget = -1;

long dt_spin_budget_us(void) {
    long b = atomic_load_explicit(&budget, memory_order_relaxed);
    if (b >= 0) return b;
    const char *text = getenv("DTRAIN_SPIN_US");
    b = DT_SPIN_US;
    if (text && *text) {
        char *end = NULL;
        long us = strtol(text, &end, 10);
        if (*end || us < 0 || us > DT_SPIN_US_MAX)
            dt_log(DT_LOG_WARN, "DTRAIN_SPIN_US \"%s\" is not 0..%d; using %d", text,
                   DT_SPIN_US_MAX, DT_SPIN_US);
        else
            b = us;
    }
    atomic_store_explicit(&budget, b, memory_order_relaxed);
    return b;
}

static atomic_int covered;

void dt_spin_cover(int delta) {
    atomic_fetch_add(&covered, delta);
}

int dt_spin_covered(void) {
    return atomic_load_explicit(&covered, memory_order_relaxed) > 0;
}

int dt_spin_worth(double hits) {
    return dt_spin_budget_us() > 0 && hits >= 0.5;
}

double dt_spin_deadline(void) {
    return dt_now_secs() + (double)dt_spin_budget_us() * 1e-6;
}

void dt_spin_note(double *hits, double t0) {
    double hit = (dt_now_secs() - t0) * 1e6 <= (double)dt_spin_budget_us() ? 1.0 : 0.0;
    *hits += (hit - *hits) / 8;
}

void dt_spin_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}
