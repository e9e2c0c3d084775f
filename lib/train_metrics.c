/*
 * train_metrics: static counters, gauges and histograms, and the
 * collector that writes them. The step's wall time is measured between
 * steps, on the loop's thread (the only caller of dt_train_metrics_step).
 */
#include "train_metrics.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/time.h>

#include "log.h"
#include "metrics.h"

/* Client-side methods, by their names' ends; the last: any other. */
static const char *const methods[] = {"Pull",         "Push",         "SparsePull",
                                      "SparseExport", "SparseImport", "Create",
                                      "Status",       "Shutdown",     "other"};
#define NUM_METHODS ((int)(sizeof methods / sizeof methods[0]))
static const char *const phases[DT_NUM_PHASES] = {"compute", "round_trip", "wait"};
static const char *const causes[3] = {"unavailable", "deadline", "not_ready"};

/* A histogram of call or step latencies, its bounds set at compile time
 * (no thread ever writes them). */
#define LATENCY_HISTOGRAM                                                                          \
    { .bounds = dt_metrics_latency_bounds, .num_bounds = DT_METRICS_LATENCY_BOUNDS }

static struct {
    dt_counter steps, examples;
    dt_gauge global_step, loss;
    dt_histogram step_secs;
    _Atomic uint64_t phase_ns[DT_NUM_PHASES];
    dt_histogram call_secs[NUM_METHODS];
    dt_counter retries[3];
    dt_gauge ckpt_step, ckpt_time, scored_step, eval_loss, eval_accuracy;
    dt_counter saves, save_failures, summaries_dropped, disk_full, scored;
    dt_histogram save_secs;
    int evaluator, chief;
    double last_step_at; /* the loop's thread only */
} m = {.step_secs = LATENCY_HISTOGRAM,
       .save_secs = LATENCY_HISTOGRAM,
       .call_secs = {LATENCY_HISTOGRAM, LATENCY_HISTOGRAM, LATENCY_HISTOGRAM, LATENCY_HISTOGRAM,
                     LATENCY_HISTOGRAM, LATENCY_HISTOGRAM, LATENCY_HISTOGRAM, LATENCY_HISTOGRAM,
                     LATENCY_HISTOGRAM}};
_Static_assert(NUM_METHODS == 9, "one LATENCY_HISTOGRAM per method above");

void dt_train_metrics_step(int64_t global_step, double loss, int examples) {
    double now = dt_now_secs();
    if (m.last_step_at > 0) dt_histogram_observe(&m.step_secs, now - m.last_step_at);
    m.last_step_at = now;
    dt_counter_add(&m.steps, 1);
    dt_counter_add(&m.examples, examples > 0 ? (uint64_t)examples : 0);
    dt_gauge_set(&m.global_step, (double)global_step);
    dt_gauge_set(&m.loss, loss);
}

void dt_train_metrics_phase(dt_phase phase, double secs) {
    if ((unsigned)phase >= DT_NUM_PHASES || !(secs > 0)) return;
    atomic_fetch_add_explicit(&m.phase_ns[phase], (uint64_t)(secs * 1e9), memory_order_relaxed);
}

void dt_train_metrics_call(const char *method, double secs) {
    const char *tail = method ? strrchr(method, '/') : NULL;
    tail = tail ? tail + 1 : method ? method : "";
    int i = 0;
    while (i < NUM_METHODS - 1 && strcmp(methods[i], tail) != 0)
        i++;
    dt_histogram_observe(&m.call_secs[i], secs);
    dt_train_metrics_phase(DT_PHASE_ROUND_TRIP, secs);
}

void dt_train_metrics_retry(int code) {
    dt_counter_add(&m.retries[code == DT_EDEADLINE ? 1 : code == DT_EPRECOND ? 2 : 0], 1);
}

void dt_train_metrics_saved(int64_t step, double secs) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    dt_counter_add(&m.saves, 1);
    dt_histogram_observe(&m.save_secs, secs);
    dt_gauge_set(&m.ckpt_step, (double)step);
    dt_gauge_set(&m.ckpt_time, (double)tv.tv_sec + (double)tv.tv_usec * 1e-6);
}

void dt_train_metrics_storage_failed(int checkpoint, const dt_err *why) {
    dt_counter_add(checkpoint ? &m.save_failures : &m.summaries_dropped, 1);
    if (why && (why->code == DT_ESTORAGE || strstr(why->msg, strerror(ENOSPC)) ||
                strstr(why->msg, strerror(EDQUOT))))
        dt_counter_add(&m.disk_full, 1);
}

void dt_train_metrics_scored(int64_t step, double loss, double accuracy) {
    dt_counter_add(&m.scored, 1);
    dt_gauge_set(&m.scored_step, (double)step);
    dt_gauge_set(&m.eval_loss, loss);
    dt_gauge_set(&m.eval_accuracy, accuracy);
}

/* ---- the collector ------------------------------------------------------ */

static void one(dt_metrics_out *o, const char *name, const char *type, const char *help,
                double value) {
    dt_metrics_family(o, name, type, help);
    dt_metrics_sample(o, name, NULL, value);
}

static void labelled(dt_metrics_out *o, const char *name, const char *key, const char *value,
                     double v) {
    char labels[128] = "";
    dt_metrics_sample(o, name, dt_metrics_label(labels, sizeof labels, key, value), v);
}

static void storage(dt_metrics_out *o) {
    one(o, "dtrain_summaries_dropped_total", "counter",
        "Batches of summaries that could not be written (training goes on).",
        (double)dt_counter_get(&m.summaries_dropped));
    one(o, "dtrain_disk_full_events_total", "counter",
        "Checkpoints or summaries that could not be written for a full disk or quota.",
        (double)dt_counter_get(&m.disk_full));
}

static void evaluator_families(dt_metrics_out *o) {
    one(o, "dtrain_evaluator_last_scored_step", "gauge",
        "Global step of the last checkpoint scored.", dt_gauge_get(&m.scored_step));
    one(o, "dtrain_evaluator_checkpoints_scored_total", "counter", "Checkpoints scored.",
        (double)dt_counter_get(&m.scored));
    one(o, "dtrain_evaluator_loss", "gauge", "Loss on the held-out set at the last scored step.",
        dt_gauge_get(&m.eval_loss));
    if (!isnan(dt_gauge_get(&m.eval_accuracy)))
        one(o, "dtrain_evaluator_accuracy", "gauge",
            "Accuracy on the held-out set at the last scored step (classifiers).",
            dt_gauge_get(&m.eval_accuracy));
    storage(o);
}

static void chief_families(dt_metrics_out *o) {
    one(o, "dtrain_chief_checkpoints_saved_total", "counter", "Checkpoints saved.",
        (double)dt_counter_get(&m.saves));
    one(o, "dtrain_chief_checkpoint_failures_total", "counter",
        "Checkpoints that could not be saved (retried).", (double)dt_counter_get(&m.save_failures));
    one(o, "dtrain_chief_last_checkpoint_step", "gauge",
        "Global step of the last checkpoint saved.", dt_gauge_get(&m.ckpt_step));
    one(o, "dtrain_chief_last_checkpoint_timestamp_seconds", "gauge",
        "When the last checkpoint was saved, in seconds since the epoch.",
        dt_gauge_get(&m.ckpt_time));
    dt_metrics_family(o, "dtrain_chief_checkpoint_save_duration_seconds", "histogram",
                      "Time to pull and write a checkpoint, in seconds.");
    dt_metrics_histogram(o, "dtrain_chief_checkpoint_save_duration_seconds", NULL, &m.save_secs);
    storage(o);
}

static void collect(void *ctx, dt_metrics_out *o) {
    (void)ctx;
    if (m.evaluator) {
        evaluator_families(o);
        return;
    }
    one(o, "dtrain_worker_steps_total", "counter", "Steps this task pushed.",
        (double)dt_counter_get(&m.steps));
    one(o, "dtrain_worker_examples_total", "counter", "Examples this task trained on.",
        (double)dt_counter_get(&m.examples));
    one(o, "dtrain_worker_global_step", "gauge", "The global step the last push was answered with.",
        dt_gauge_get(&m.global_step));
    one(o, "dtrain_worker_loss", "gauge", "Loss of the last step's batch.", dt_gauge_get(&m.loss));
    dt_metrics_family(o, "dtrain_worker_step_duration_seconds", "histogram",
                      "Wall time of a step (pull, compute, push, waits), in seconds.");
    dt_metrics_histogram(o, "dtrain_worker_step_duration_seconds", NULL, &m.step_secs);
    dt_metrics_family(o, "dtrain_worker_phase_seconds_total", "counter",
                      "Time spent computing gradients, in round trips to the ps tasks, and "
                      "waiting (backoff, other workers), in seconds; with pipeline_push the "
                      "round trips overlap the compute.");
    for (int p = 0; p < DT_NUM_PHASES; p++)
        labelled(o, "dtrain_worker_phase_seconds_total", "phase", phases[p],
                 (double)atomic_load_explicit(&m.phase_ns[p], memory_order_relaxed) * 1e-9);
    dt_metrics_family(o, "dtrain_worker_call_duration_seconds", "histogram",
                      "Round trip of one round of calls to the ps tasks, by method, in seconds.");
    for (int i = 0; i < NUM_METHODS; i++) {
        char labels[64] = "";
        dt_metrics_histogram(o, "dtrain_worker_call_duration_seconds",
                             dt_metrics_label(labels, sizeof labels, "method", methods[i]),
                             &m.call_secs[i]);
    }
    dt_metrics_family(o, "dtrain_worker_retries_total", "counter",
                      "Calls to the ps tasks retried, by cause.");
    for (int c = 0; c < 3; c++)
        labelled(o, "dtrain_worker_retries_total", "cause", causes[c],
                 (double)dt_counter_get(&m.retries[c]));
    if (m.chief) chief_families(o);
}

int dt_train_metrics_register(int evaluator, int chief, dt_err *err) {
    dt_gauge_set(&m.eval_loss, NAN);
    dt_gauge_set(&m.eval_accuracy, NAN);
    m.evaluator = evaluator;
    m.chief = chief;
    return dt_metrics_add(collect, NULL, err);
}
