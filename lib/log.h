/*
 * log: one line per event, "pid R hh:mm:ss.mmm L message", written with a
 * single write(2) so lines from several threads never interleave. The role
 * letter is P (ps), C (chief), W (worker) or '-' before a role is chosen.
 * Metrics belong in summaries, not here. Also home to the one monotonic
 * clock (dt_now_secs, dt_now_ms, dt_clock_now, dt_ms_since) that timers,
 * deadlines and rates across lib/ read.
 */
#ifndef DT_LOG_H
#define DT_LOG_H

#include <stdint.h>
#include <time.h>

typedef enum { DT_LOG_DEBUG = 0, DT_LOG_INFO, DT_LOG_WARN, DT_LOG_ERROR } dt_log_level;

/* Process-wide settings; call before starting threads. */
void dt_log_set_role(char role_letter);
void dt_log_set_level(dt_log_level level);
dt_log_level dt_log_get_level(void);

void dt_log_write(dt_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Skips formatting entirely below the configured level. */
#define dt_log(level, ...)                                                                         \
    do {                                                                                           \
        if ((level) >= dt_log_get_level()) dt_log_write((level), __VA_ARGS__);                     \
    } while (0)

/* Seconds on the monotonic clock (CLOCK_MONOTONIC): for intervals and
 * timers only, never for wall time. Thread-safe; cannot fail. */
double dt_now_secs(void);
/* The same clock in whole milliseconds (for rate limits and deadlines kept
 * in an integer, e.g. an atomic). */
int64_t dt_now_ms(void);
/* The same clock as a timespec, for stamps kept as one (*out). */
void dt_clock_now(struct timespec *out);
/* Milliseconds from t0 (a dt_clock_now stamp) to now, truncated. */
int64_t dt_ms_since(const struct timespec *t0);

/* t plus ms (>= 0), normalized: a deadline for pthread_cond_timedwait on
 * t's clock. */
struct timespec dt_timespec_after_ms(struct timespec t, int64_t ms);

#endif
