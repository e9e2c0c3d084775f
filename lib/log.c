/*
 * log: formatting and one-shot writes to stderr, and the monotonic clock.
 * The settings are plain globals written once at start-up, before any
 * thread exists; the job id, which becomes known later, is under a mutex.
 */
#define _POSIX_C_SOURCE 200809L
#include "log.h"

#include "text.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define JOB_ID_MAX 128
#define MSG_MAX 1536
/* A json line: the header, the message escaped (6 bytes a byte at worst),
 * the fields. What does not fit is cut at a whole escape, never mid-JSON. */
#define JSON_LINE_MAX 16384
#define JSON_FIELDS_ROOM 2048

static char log_role = '-';
static int log_task = -1;
static dt_log_level log_level = DT_LOG_INFO;
static dt_log_format log_format = DT_LOG_TEXT;
static pthread_mutex_t job_id_mu = PTHREAD_MUTEX_INITIALIZER;
static char job_id[JOB_ID_MAX];

void dt_log_set_role(char role_letter) {
    log_role = role_letter;
}
void dt_log_set_task(int task) {
    log_task = task;
}
void dt_log_set_level(dt_log_level level) {
    log_level = level;
}
dt_log_level dt_log_get_level(void) {
    return log_level;
}
void dt_log_set_format(dt_log_format format) {
    log_format = format;
}
dt_log_format dt_log_get_format(void) {
    return log_format;
}

int dt_log_parse_level(const char *name, dt_log_level *out) {
    static const char *const names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = (dt_log_level)i;
            return 0;
        }
    return -1;
}

int dt_log_parse_format(const char *name, dt_log_format *out) {
    if (strcmp(name, "text") == 0)
        *out = DT_LOG_TEXT;
    else if (strcmp(name, "json") == 0)
        *out = DT_LOG_JSON;
    else
        return -1;
    return 0;
}

void dt_log_set_job_id(const char *id) {
    pthread_mutex_lock(&job_id_mu);
    snprintf(job_id, sizeof job_id, "%s", id ? id : "");
    pthread_mutex_unlock(&job_id_mu);
}

size_t dt_log_job_id(char *buf, size_t cap) {
    if (cap == 0) return 0;
    pthread_mutex_lock(&job_id_mu);
    snprintf(buf, cap, "%s", job_id);
    pthread_mutex_unlock(&job_id_mu);
    return strlen(buf);
}

const char *dt_log_role_name(void) {
    switch (log_role) {
    case 'P': return "ps";
    case 'C': return "chief";
    case 'W': return "worker";
    case 'E': return "evaluator";
    default: return "";
    }
}

int dt_log_task(void) {
    return log_task;
}

/* A bounded line being built: text appended while it fits. */
typedef struct {
    char *buf;
    size_t cap, len;
} line_buf;

static void put(line_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(line_buf *b, const char *fmt, ...) {
    if (b->len >= b->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    /* Cut: keep what was there before, so no half token is left. */
    if (n < 0 || (size_t)n >= b->cap - b->len)
        b->buf[b->len] = '\0';
    else
        b->len += (size_t)n;
}

/* "s" as a JSON string, within limit bytes of the line (cut at a whole
 * escape), quotes included. */
static void put_json_string(line_buf *b, const char *s, size_t n, size_t limit) {
    if (b->len + 3 > limit || limit > b->cap) return;
    b->buf[b->len++] = '"';
    b->len += dt_text_json_escape(b->buf + b->len, limit - b->len - 1, s, n);
    b->buf[b->len++] = '"';
    b->buf[b->len] = '\0';
}

static void put_field(line_buf *b, const dt_log_field *f, size_t limit) {
    size_t before = b->len;
    put(b, ",\"%s\":", f->key);
    if (b->len == before) return; /* no room for the key: the field is left out */
    if (f->kind == DT_LOG_FIELD_INT)
        put(b, "%lld", f->i);
    else if (f->kind == DT_LOG_FIELD_NUM && isfinite(f->d))
        put(b, "%.17g", f->d);
    else if (f->kind == DT_LOG_FIELD_STR && f->s)
        put_json_string(b, f->s, strlen(f->s), limit);
    else
        put(b, "null");
    /* A field cut short (its value had no room) is left out whole. */
    if (b->len > limit || b->buf[b->len - 1] == ':') {
        b->len = before;
        b->buf[before] = '\0';
    }
}

static size_t format_json(char *line, size_t cap, dt_log_level level, const char *msg, size_t mlen,
                          const dt_log_field *fields, int n) {
    static const char *const levels[] = {"debug", "info", "warn", "error"};
    line_buf b = {line, cap - 2, 0}; /* room for "}\n" */
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    put(&b, "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ\",\"level\":\"%s\"", tm.tm_year + 1900,
        tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000),
        levels[level & 3]);
    if (dt_log_role_name()[0]) put(&b, ",\"role\":\"%s\"", dt_log_role_name());
    if (log_task >= 0) put(&b, ",\"task\":%d", log_task);
    char id[JOB_ID_MAX];
    size_t id_len = dt_log_job_id(id, sizeof id);
    if (id_len) {
        put(&b, ",\"job_id\":");
        put_json_string(&b, id, id_len, b.cap);
    }
    put(&b, ",\"pid\":%d,\"msg\":", (int)getpid());
    put_json_string(&b, msg, mlen, b.cap > JSON_FIELDS_ROOM ? b.cap - JSON_FIELDS_ROOM : b.cap);
    for (int i = 0; i < n; i++)
        put_field(&b, &fields[i], b.cap);
    line[b.len++] = '}';
    line[b.len++] = '\n';
    return b.len;
}

static size_t format_text(char *line, size_t cap, dt_log_level level, const char *msg,
                          size_t mlen) {
    static const char letters[] = "DIWE";
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    int n =
        snprintf(line, cap, "%d %c %02d:%02d:%02d.%03d %c ", (int)getpid(), log_role, tm.tm_hour,
                 tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000), letters[level & 3]);
    if (n < 0) n = 0;
    /* Messages quote names, reasons and addresses from the wire: escape
     * them so a record is always one line and a peer cannot forge one. */
    size_t len = (size_t)n + dt_text_escape(line + n, cap - (size_t)n - 1, msg, mlen);
    line[len++] = '\n';
    return len;
}

static void write_line(dt_log_level level, const dt_log_field *fields, int n, const char *fmt,
                       va_list ap) __attribute__((format(printf, 4, 0)));
static void write_line(dt_log_level level, const dt_log_field *fields, int n, const char *fmt,
                       va_list ap) {
    char msg[MSG_MAX];
    int m = vsnprintf(msg, sizeof msg, fmt, ap);
    if (m < 0) m = 0;
    size_t mlen = (size_t)m < sizeof msg ? (size_t)m : sizeof msg - 1;
    char line[JSON_LINE_MAX];
    size_t len = log_format == DT_LOG_JSON
                     ? format_json(line, sizeof line, level, msg, mlen, fields, n)
                     : format_text(line, 2048, level, msg, mlen);
    /* One write keeps the line whole; a failed log write has nowhere to go. */
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

void dt_log_write(dt_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    write_line(level, NULL, 0, fmt, ap);
    va_end(ap);
}

void dt_log_write_kv(dt_log_level level, const dt_log_field *fields, int n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    write_line(level, fields, n, fmt, ap);
    va_end(ap);
}

struct timespec dt_timespec_after_ms(struct timespec t, int64_t ms) {
    t.tv_sec += (time_t)(ms / 1000);
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

void dt_clock_now(struct timespec *out) {
    /* Cannot fail: POSIX.1-2008 guarantees the clock, and out is valid. */
    clock_gettime(CLOCK_MONOTONIC, out);
}

double dt_now_secs(void) {
    struct timespec ts;
    dt_clock_now(&ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int64_t dt_now_ms(void) {
    struct timespec ts;
    dt_clock_now(&ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t dt_ms_since(const struct timespec *t0) {
    struct timespec now;
    dt_clock_now(&now);
    return (int64_t)(now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
}
