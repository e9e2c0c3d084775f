/*
 * log: formatting and one-shot writes to stderr, and the monotonic clock.
 * The settings are plain globals written once at start-up, before any thread
 * exists.
 */
#define _POSIX_C_SOURCE 200809L
#include "log.h"

#include "text.h"

#include <stdarg.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static char log_role = '-';
static dt_log_level log_level = DT_LOG_INFO;

void dt_log_set_role(char role_letter) {
    log_role = role_letter;
}
void dt_log_set_level(dt_log_level level) {
    log_level = level;
}
dt_log_level dt_log_get_level(void) {
    return log_level;
}

void dt_log_write(dt_log_level level, const char *fmt, ...) {
    static const char letters[] = "DIWE";
    char line[2048];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    int n =
        snprintf(line, sizeof line, "%d %c %02d:%02d:%02d.%03d %c ", (int)getpid(), log_role,
                 tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000), letters[level & 3]);
    /* Messages quote names, reasons and addresses from the wire: escape
     * them so a record is always one line and a peer cannot forge one. */
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (m < 0) m = 0;
    size_t mlen = (size_t)m < sizeof msg ? (size_t)m : sizeof msg - 1;
    size_t len = (size_t)n + dt_text_escape(line + n, sizeof line - (size_t)n - 1, msg, mlen);
    line[len++] = '\n';
    /* One write keeps the line whole; a failed log write has nowhere to go. */
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
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
