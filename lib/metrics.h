/*
 * metrics: the process's metrics, rendered in the Prometheus text
 * exposition format (version 0.0.4) for /metrics (lib/metrics_http).
 *
 * Three kinds of value, each lock-free to update (C11 atomics, relaxed: a
 * scrape reads each value on its own, never a consistent set):
 *   dt_counter    a count that only grows (names end in _total);
 *   dt_gauge      a number that goes up and down;
 *   dt_histogram  counts of observations by upper bound, with their sum:
 *                 one atomic add to a bucket and a CAS loop on the sum.
 * Modules keep these in their own structs (the RPC server per method, the
 * training loop in lib/train_metrics) or read counters they keep anyway
 * (the ps's Status), and register a collector: a callback that writes
 * their families into a dt_metrics_out when /metrics is scraped. Names
 * follow Prometheus's conventions: dtrain_ prefix, base units (seconds,
 * bytes) in the name, counters ending in _total. Every sample carries the
 * process's labels: job_id (once known, dt_log_set_job_id), role and task.
 *
 * Threading: updates from any thread; collectors run on the thread that
 * renders (the HTTP server's), one render at a time; dt_metrics_remove
 * returns once its collector is not running and will not run again.
 */
#ifndef DT_METRICS_H
#define DT_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "err.h"

#define DT_METRICS_MAX_BOUNDS 24
#define DT_METRICS_MAX_COLLECTORS 64
/* Most bytes of one sample's own labels (escaped), past the process's. */
#define DT_METRICS_LABELS_MAX 512

typedef struct {
    _Atomic uint64_t value;
} dt_counter;

typedef struct {
    _Atomic uint64_t bits; /* a double's bits */
} dt_gauge;

/* bounds: num_bounds ascending upper bounds (static storage); counts[i]
 * is observations <= bounds[i] and above bounds[i-1], counts[num_bounds]
 * those above every bound (+Inf). Zero-initialize, then set bounds. */
typedef struct {
    const double *bounds;
    int num_bounds;
    _Atomic uint64_t counts[DT_METRICS_MAX_BOUNDS + 1];
    _Atomic uint64_t sum_bits; /* a double's bits */
} dt_histogram;

static inline void dt_counter_add(dt_counter *c, uint64_t n) {
    atomic_fetch_add_explicit(&c->value, n, memory_order_relaxed);
}
static inline uint64_t dt_counter_get(const dt_counter *c) {
    return atomic_load_explicit(&c->value, memory_order_relaxed);
}
static inline void dt_gauge_set(dt_gauge *g, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    atomic_store_explicit(&g->bits, bits, memory_order_relaxed);
}
static inline double dt_gauge_get(const dt_gauge *g) {
    uint64_t bits = atomic_load_explicit(&g->bits, memory_order_relaxed);
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}
/* Counts v in its bucket and adds it to the sum. NaN is not counted. */
void dt_histogram_observe(dt_histogram *h, double v);

/* Bounds for call latencies in seconds, 100 us to 30 s (16 bounds), and
 * for step times (1 ms to 60 s). */
extern const double dt_metrics_latency_bounds[16];
#define DT_METRICS_LATENCY_BOUNDS 16

/* ---- rendering -------------------------------------------------------- */

typedef struct dt_metrics_out dt_metrics_out;

/* A family's header: "# HELP name help" and "# TYPE name type" (counter,
 * gauge or histogram). Its samples follow at once, before the next
 * family: a family is written once, by one collector. */
void dt_metrics_family(dt_metrics_out *o, const char *name, const char *type, const char *help);
/* One sample: name{process labels,labels} value. labels: "" or the
 * sample's own, built with dt_metrics_label (NULL: none). */
void dt_metrics_sample(dt_metrics_out *o, const char *name, const char *labels, double value);
/* A histogram's samples: name_bucket{...,le="b"} (cumulative, +Inf last),
 * name_sum and name_count. */
void dt_metrics_histogram(dt_metrics_out *o, const char *name, const char *labels,
                          const dt_histogram *h);
/* Appends key="value" (value escaped: backslash, quote, newline; bytes
 * that are not UTF-8 as \\xHH) to the labels in buf (cap bytes, a comma
 * first when buf is not empty). Returns buf. Cut short (never mid-label)
 * when buf is full. */
char *dt_metrics_label(char *buf, size_t cap, const char *key, const char *value);

typedef void (*dt_metrics_collector)(void *ctx, dt_metrics_out *o);

/* Registers fn(ctx) to write its families at every render. 0, or
 * DT_EINTERNAL when DT_METRICS_MAX_COLLECTORS are registered. */
int dt_metrics_add(dt_metrics_collector fn, void *ctx, dt_err *err) DT_WARN_UNUSED;
/* Unregisters fn(ctx) (not registered: a no-op), waiting for a render in
 * progress. */
void dt_metrics_remove(dt_metrics_collector fn, void *ctx);

/* The whole exposition: the process's own families (resident memory, CPU,
 * open files, start time) then every collector's, into *text (heap,
 * caller frees, NUL-terminated) and *len. DT_ENOMEM on a short heap. */
int dt_metrics_render(char **text, size_t *len, dt_err *err) DT_WARN_UNUSED;

#endif
