/*
 * log: one line per event, written with a single write(2) so lines from
 * several threads never interleave. Two formats:
 *   text (the default): "pid R hh:mm:ss.mmm L message", the role letter P
 *     (ps), C (chief), W (worker), E (evaluator) or '-' before a role is
 *     chosen, the time local;
 *   json (--log-format json): one JSON object a line, for log collectors:
 *     {"time":"2026-12-06T20:10:11.123Z","level":"info","role":"worker",
 *      "task":1,"job_id":"...","pid":4242,"msg":"...", fields...}
 *     time in UTC (RFC 3339, milliseconds), job_id only once known, then
 *     the event's fields (dt_log_kv: step, loss, peer, code, ...). Every
 *     line is valid JSON whatever the message holds: quotes, control
 *     bytes and bytes that are not UTF-8 are escaped (dt_text_json_escape).
 * Metrics belong in summaries and /metrics, not here. Also home to the one
 * monotonic clock (dt_now_secs, dt_now_ms, dt_clock_now, dt_ms_since) that
 * timers, deadlines and rates across lib/ read.
 */
#ifndef DT_LOG_H
#define DT_LOG_H

#include <stdint.h>
#include <time.h>

typedef enum { DT_LOG_DEBUG = 0, DT_LOG_INFO, DT_LOG_WARN, DT_LOG_ERROR } dt_log_level;

typedef enum { DT_LOG_TEXT = 0, DT_LOG_JSON } dt_log_format;

/* Process-wide settings; call before starting threads (but the job id:
 * dt_log_set_job_id may be called at any time, from any thread). */
void dt_log_set_role(char role_letter);
/* The task index the json format prints ("task"); < 0: none (the default). */
void dt_log_set_task(int task);
void dt_log_set_level(dt_log_level level);
dt_log_level dt_log_get_level(void);
void dt_log_set_format(dt_log_format format);
dt_log_format dt_log_get_format(void);
/* Parses "debug", "info", "warn" or "error" into *out; -1 (and *out
 * untouched) otherwise. */
int dt_log_parse_level(const char *name, dt_log_level *out);
/* Parses "text" or "json" into *out; -1 (and *out untouched) otherwise. */
int dt_log_parse_format(const char *name, dt_log_format *out);

/* The job's id, once known (NULL or "": none): the json format prints it
 * as "job_id", /metrics as the job_id label. Copied (at most 127 bytes).
 * Thread-safe. */
void dt_log_set_job_id(const char *job_id);
/* The job id into buf (cap bytes, NUL-terminated; "" when none). Returns
 * its length. Thread-safe. */
size_t dt_log_job_id(char *buf, size_t cap);
/* "ps", "chief", "worker", "evaluator" or "" (no role yet), and the task
 * index (-1: none): what the json format prints and /metrics labels. */
const char *dt_log_role_name(void);
int dt_log_task(void);

/* One field of an event, for the json format (the text format prints the
 * message only, which says the same in words). Build them with the
 * DT_LOG_INT, DT_LOG_NUM and DT_LOG_STR macros; a key is a JSON-safe
 * literal ([a-z_]), a string value may hold anything (it is escaped); a
 * number that is not finite is written null. */
typedef enum { DT_LOG_FIELD_INT, DT_LOG_FIELD_NUM, DT_LOG_FIELD_STR } dt_log_field_kind;
typedef struct {
    const char *key;
    dt_log_field_kind kind;
    long long i;
    double d;
    const char *s; /* borrowed for the call; NULL is written null */
} dt_log_field;
#define DT_LOG_INT(k, v) ((dt_log_field){.key = (k), .kind = DT_LOG_FIELD_INT, .i = (long long)(v)})
#define DT_LOG_NUM(k, v) ((dt_log_field){.key = (k), .kind = DT_LOG_FIELD_NUM, .d = (double)(v)})
#define DT_LOG_STR(k, v) ((dt_log_field){.key = (k), .kind = DT_LOG_FIELD_STR, .s = (v)})

void dt_log_write(dt_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same, with n fields (borrowed for the call) after the message. */
void dt_log_write_kv(dt_log_level level, const dt_log_field *fields, int n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Skips formatting entirely below the configured level. */
#define dt_log(level, ...)                                                                         \
    do {                                                                                           \
        if ((level) >= dt_log_get_level()) dt_log_write((level), __VA_ARGS__);                     \
    } while (0)

/* dt_log with the event's fields: dt_log_kv(DT_LOG_INFO, fields, n, fmt, ...). */
#define dt_log_kv(level, fields, n, ...)                                                           \
    do {                                                                                           \
        if ((level) >= dt_log_get_level()) dt_log_write_kv((level), (fields), (n), __VA_ARGS__);   \
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
