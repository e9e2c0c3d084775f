/*
 * metrics: the registry of collectors and the text exposition format.
 *
 * The registry is a fixed array under one mutex, held while a render runs
 * the collectors (a render is a scrape: about once a second), so removing
 * a collector waits for a render that may be calling it. The values
 * themselves are never under it: updates are atomics (metrics.h).
 *
 * A render writes into a buffer that grows by doubling (dt_realloc); an
 * allocation that fails marks the render failed, and every later write is
 * dropped, so a collector never checks.
 */
#include "metrics.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "log.h"
#include "memstat.h"
#include "text.h"

const double dt_metrics_latency_bounds[16] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                              0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                              1,      2.5,     10,     30};

void dt_histogram_observe(dt_histogram *h, double v) {
    if (isnan(v)) return;
    int i = 0;
    while (i < h->num_bounds && v > h->bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    uint64_t old = atomic_load_explicit(&h->sum_bits, memory_order_relaxed), bits;
    do {
        double sum;
        memcpy(&sum, &old, sizeof sum);
        sum += v;
        memcpy(&bits, &sum, sizeof bits);
    } while (!atomic_compare_exchange_weak_explicit(&h->sum_bits, &old, bits, memory_order_relaxed,
                                                    memory_order_relaxed));
}

/* ---- the output buffer ---------------------------------------------------- */

struct dt_metrics_out {
    char *buf;
    size_t len, cap;
    int failed;                             /* an allocation failed: the render fails */
    char common[256];                       /* the process's labels, escaped */
    char labels[2 * DT_METRICS_LABELS_MAX]; /* scratch: common plus a sample's own */
};

static void grow(dt_metrics_out *o, size_t need) {
    if (o->failed || o->len + need < o->cap) return;
    size_t cap = o->cap ? o->cap : 16384;
    while (o->len + need >= cap)
        cap *= 2;
    char *b = dt_realloc(o->buf, cap);
    if (!b) {
        o->failed = 1;
        return;
    }
    o->buf = b;
    o->cap = cap;
}

static void out(dt_metrics_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(dt_metrics_out *o, const char *fmt, ...) {
    for (int tries = 0; tries < 2 && !o->failed; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf ? o->buf + o->len : NULL, o->buf ? o->cap - o->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (o->buf && (size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        grow(o, (size_t)n + 1);
    }
}

/* value as the exposition format's label text into dst (cap bytes): \\,
 * \" and \n escaped (its only escapes), other control bytes as spaces, a
 * byte that is not UTF-8 as the text \\xHH (an escaped backslash, then
 * xHH), so the value stays valid UTF-8. Stops at a whole escape. */
static size_t label_escape(char *dst, size_t cap, const char *value) {
    const unsigned char *u = (const unsigned char *)value;
    size_t n = strlen(value), at = 0;
    for (size_t i = 0; i < n && cap > 0;) {
        char esc[8];
        const char *piece = NULL;
        size_t take = 1;
        if (u[i] == '\\')
            piece = "\\\\";
        else if (u[i] == '"')
            piece = "\\\"";
        else if (u[i] == '\n')
            piece = "\\n";
        else if (u[i] < 0x20 || u[i] == 0x7F)
            piece = " ";
        else if (u[i] >= 0x80 && (take = dt_text_utf8_seq(u + i, n - i)) == 0) {
            snprintf(esc, sizeof esc, "\\\\x%02x", u[i]);
            piece = esc;
            take = 1;
        }
        size_t plen = piece ? strlen(piece) : take;
        if (at + plen >= cap) break;
        memcpy(dst + at, piece ? piece : value + i, plen);
        at += plen;
        i += take;
    }
    if (cap > 0) dst[at] = '\0';
    return at;
}

char *dt_metrics_label(char *buf, size_t cap, const char *key, const char *value) {
    size_t len = strlen(buf);
    size_t klen = strlen(key);
    if (len + klen + 6 >= cap) return buf;
    size_t at = len;
    if (len) buf[at++] = ',';
    memcpy(buf + at, key, klen);
    at += klen;
    buf[at++] = '=';
    buf[at++] = '"';
    at += label_escape(buf + at, cap - at - 2, value);
    buf[at++] = '"';
    buf[at] = '\0';
    return buf;
}

void dt_metrics_family(dt_metrics_out *o, const char *name, const char *type, const char *help) {
    out(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* "{common,labels}" or "" into o->labels, extra (may be NULL) last. */
static const char *labels_of(dt_metrics_out *o, const char *labels, const char *extra) {
    snprintf(o->labels, sizeof o->labels, "%s", o->common);
    size_t n = strlen(o->labels);
    if (labels && *labels)
        n += (size_t)snprintf(o->labels + n, sizeof o->labels - n, "%s%s", n ? "," : "", labels);
    if (n < sizeof o->labels && extra && *extra)
        snprintf(o->labels + n, sizeof o->labels - n, "%s%s", n ? "," : "", extra);
    return o->labels;
}

static void sample(dt_metrics_out *o, const char *name, const char *suffix, const char *labels,
                   const char *extra, double value) {
    const char *l = labels_of(o, labels, extra);
    char num[40];
    if (isnan(value))
        snprintf(num, sizeof num, "NaN");
    else if (isinf(value))
        snprintf(num, sizeof num, value > 0 ? "+Inf" : "-Inf");
    else if (value == floor(value) && fabs(value) < 9e15)
        snprintf(num, sizeof num, "%.0f", value);
    else
        snprintf(num, sizeof num, "%.17g", value);
    out(o, "%s%s%s%s%s %s\n", name, suffix, *l ? "{" : "", l, *l ? "}" : "", num);
}

void dt_metrics_sample(dt_metrics_out *o, const char *name, const char *labels, double value) {
    sample(o, name, "", labels, NULL, value);
}

void dt_metrics_histogram(dt_metrics_out *o, const char *name, const char *labels,
                          const dt_histogram *h) {
    uint64_t cumulative = 0;
    for (int i = 0; i <= h->num_bounds; i++) {
        cumulative += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        char le[48];
        if (i < h->num_bounds)
            snprintf(le, sizeof le, "le=\"%.17g\"", h->bounds[i]);
        else
            snprintf(le, sizeof le, "le=\"+Inf\"");
        sample(o, name, "_bucket", labels, le, (double)cumulative);
    }
    uint64_t bits = atomic_load_explicit(&h->sum_bits, memory_order_relaxed);
    double sum;
    memcpy(&sum, &bits, sizeof sum);
    sample(o, name, "_sum", labels, NULL, sum);
    sample(o, name, "_count", labels, NULL, (double)cumulative);
}

/* ---- the registry ---------------------------------------------------------- */

typedef struct {
    dt_metrics_collector fn;
    void *ctx;
} collector;

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static collector collectors[DT_METRICS_MAX_COLLECTORS];
static int num_collectors;

int dt_metrics_add(dt_metrics_collector fn, void *ctx, dt_err *err) {
    pthread_mutex_lock(&registry_mu);
    int rc = 0;
    if (num_collectors == DT_METRICS_MAX_COLLECTORS)
        rc = dt_err_set(err, DT_EINTERNAL, "metrics: more than %d collectors",
                        DT_METRICS_MAX_COLLECTORS);
    else
        collectors[num_collectors++] = (collector){fn, ctx};
    pthread_mutex_unlock(&registry_mu);
    return rc;
}

void dt_metrics_remove(dt_metrics_collector fn, void *ctx) {
    pthread_mutex_lock(&registry_mu);
    for (int i = 0; i < num_collectors; i++)
        if (collectors[i].fn == fn && collectors[i].ctx == ctx) {
            collectors[i] = collectors[--num_collectors];
            break;
        }
    pthread_mutex_unlock(&registry_mu);
}

/* ---- the process's own families ------------------------------------------- */

static double process_start = -1; /* unix time, read once */

/* Seconds since the epoch of this process's start: the boot time plus its
 * start in clock ticks (/proc/self/stat field 22). */
static double start_time(long ticks_per_sec) {
    if (process_start >= 0) return process_start;
    FILE *f = fopen("/proc/self/stat", "r");
    unsigned long long start = 0;
    if (f) {
        char line[1024];
        if (fgets(line, sizeof line, f)) {
            /* After the command's ")" (it may hold spaces): field 3 on. */
            char *p = strrchr(line, ')');
            for (int field = 2; p && field < 22; field++)
                p = strchr(p + 1, ' ');
            if (p) start = strtoull(p + 1, NULL, 10);
        }
        fclose(f);
    }
    f = fopen("/proc/stat", "r");
    unsigned long long btime = 0;
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "btime %llu", &btime) == 1) break;
        fclose(f);
    }
    process_start = btime ? (double)btime + (double)start / (double)ticks_per_sec : 0;
    return process_start;
}

static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1; /* less the one opendir holds */
}

static void process_families(dt_metrics_out *o) {
    long page = sysconf(_SC_PAGESIZE), ticks = sysconf(_SC_CLK_TCK);
    unsigned long long vsize_pages = 0, rss_pages = 0, utime = 0, stime = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%llu %llu", &vsize_pages, &rss_pages) != 2) vsize_pages = rss_pages = 0;
        fclose(f);
    }
    f = fopen("/proc/self/stat", "r");
    if (f) {
        char line[1024];
        char *p = fgets(line, sizeof line, f) ? strrchr(line, ')') : NULL;
        /* utime and stime: fields 14 and 15. */
        for (int field = 2; p && field < 14; field++)
            p = strchr(p + 1, ' ');
        if (!p || sscanf(p + 1, "%llu %llu", &utime, &stime) != 2) utime = stime = 0;
        fclose(f);
    }
    dt_metrics_family(o, "process_resident_memory_bytes", "gauge",
                      "Resident memory size in bytes.");
    dt_metrics_sample(o, "process_resident_memory_bytes", NULL, (double)rss_pages * (double)page);
    dt_metrics_family(o, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
    dt_metrics_sample(o, "process_virtual_memory_bytes", NULL, (double)vsize_pages * (double)page);
    int64_t peak = dt_mem_peak_rss();
    if (peak >= 0) {
        dt_metrics_family(o, "dtrain_peak_resident_memory_bytes", "gauge",
                          "Largest resident memory this process had (VmHWM), in bytes.");
        dt_metrics_sample(o, "dtrain_peak_resident_memory_bytes", NULL, (double)peak);
    }
    dt_metrics_family(o, "process_cpu_seconds_total", "counter",
                      "Total user and system CPU time spent in seconds.");
    dt_metrics_sample(o, "process_cpu_seconds_total", NULL,
                      ticks > 0 ? (double)(utime + stime) / (double)ticks : 0);
    int fds = open_fds();
    if (fds >= 0) {
        dt_metrics_family(o, "process_open_fds", "gauge", "Number of open file descriptors.");
        dt_metrics_sample(o, "process_open_fds", NULL, fds);
    }
    dt_metrics_family(o, "process_start_time_seconds", "gauge",
                      "Start time of the process since unix epoch in seconds.");
    dt_metrics_sample(o, "process_start_time_seconds", NULL, start_time(ticks > 0 ? ticks : 100));
}

int dt_metrics_render(char **text, size_t *len, dt_err *err) {
    *text = NULL;
    *len = 0;
    dt_metrics_out *o = dt_calloc(1, sizeof *o);
    if (!o) return dt_err_set(err, DT_ENOMEM, "metrics: out of memory");
    char id[128], task[16];
    dt_log_job_id(id, sizeof id);
    if (id[0]) dt_metrics_label(o->common, sizeof o->common, "job_id", id);
    if (dt_log_role_name()[0])
        dt_metrics_label(o->common, sizeof o->common, "role", dt_log_role_name());
    if (dt_log_task() >= 0) {
        snprintf(task, sizeof task, "%d", dt_log_task());
        dt_metrics_label(o->common, sizeof o->common, "task", task);
    }
    grow(o, 1);
    process_families(o);
    pthread_mutex_lock(&registry_mu);
    for (int i = 0; i < num_collectors; i++)
        collectors[i].fn(collectors[i].ctx, o);
    pthread_mutex_unlock(&registry_mu);
    int rc = 0;
    if (o->failed) {
        free(o->buf);
        rc = dt_err_set(err, DT_ENOMEM, "metrics: out of memory rendering %zu bytes", o->cap);
    } else {
        *text = o->buf;
        *len = o->len;
    }
    free(o);
    return rc;
}
