/*
 * rpc_common: message buffers as gRPC slices, the status-code table, and
 * reference-counted start/stop of the gRPC runtime.
 */
#include "rpc_internal.h"

#include "alloc.h"
#include "log.h"

#include <errno.h>
#include <grpc/slice.h>
#include <grpc/support/log.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static int init_count;
/* Bumped by a signal handler on any thread, read by gRPC's handshake
 * threads: atomic (lock-free, so safe in a handler). */
static atomic_int cert_generation;

void dt_rpc_reload_certs(void) {
    atomic_fetch_add(&cert_generation, 1);
}

int dt_rpc_cert_generation(void) {
    return atomic_load(&cert_generation);
}

/* PEM files are small; a cap keeps a wrong path (a device, a huge file)
 * from being read whole. */
#define PEM_MAX (1 << 20)

int dt_rpc_read_pem(const char *path, const char *what, char **out, dt_err *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return dt_err_set(err, DT_EIO, "%s %s: cannot open: %s", what, path, strerror(errno));
    char *buf = dt_malloc(PEM_MAX + 1);
    if (!buf) {
        fclose(f);
        return dt_err_set(err, DT_ENOMEM, "%s %s: out of memory", what, path);
    }
    size_t n = fread(buf, 1, PEM_MAX + 1, f);
    int failed = ferror(f);
    fclose(f);
    int rc = 0;
    buf[n > PEM_MAX ? PEM_MAX : n] = '\0';
    if (failed)
        rc = dt_err_set(err, DT_EIO, "%s %s: read failed", what, path);
    else if (n > PEM_MAX)
        rc = dt_err_set(err, DT_EINVAL, "%s %s: larger than %d bytes", what, path, PEM_MAX);
    else if (n == 0 || !strstr(buf, "-----BEGIN "))
        rc = dt_err_set(err, DT_EINVAL, "%s %s: not a PEM file (no -----BEGIN line)", what, path);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    *out = buf;
    return 0;
}

static long long mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A failed TLS handshake reaches dtrain only as gRPC's log line (a server
 * never sees the connection as a call; a client sees UNAVAILABLE), so that
 * line is a warning: at most one every 5 s, with how many were skipped (a
 * misconfigured peer retries about every second). */
static void log_handshake_failure(const char *flat) {
    static atomic_llong last_ms, skipped;
    long long now = mono_ms();
    long long last = atomic_load(&last_ms);
    if ((last != 0 && now - last < 5000) || !atomic_compare_exchange_strong(&last_ms, &last, now)) {
        atomic_fetch_add(&skipped, 1);
        return;
    }
    const char *reason = strstr(flat, "Handshake failed");
    dt_log(DT_LOG_WARN, "tls: %s (%lld more in the last 5 s not logged)", reason,
           (long long)atomic_exchange(&skipped, 0));
}

/* gRPC 1.51's listener, when accept() fails with anything but EAGAIN or
 * ECONNABORTED (EMFILE, ENFILE, ENOBUFS), logs this line and stops
 * watching its socket for good; the line is the only sign of it, so the
 * servers of this process count it and listen again (rpc_server.c). */
static atomic_int accept_failures;

int dt_rpc_accept_failures(void) {
    return atomic_load(&accept_failures);
}

/* gRPC's own messages go through dt_log, one line each, at debug level:
 * dtrain reports every failure that matters itself, with context. */
static void grpc_log_to_dt(gpr_log_func_args *args) {
    char flat[512];
    size_t n = 0;
    for (const char *p = args->message; *p && n + 1 < sizeof flat; p++)
        flat[n++] = (*p == '\n' || *p == '\r') ? ' ' : *p;
    flat[n] = '\0';
    dt_log(DT_LOG_DEBUG, "grpc %s:%d: %s", args->file, args->line, flat);
    if (strstr(flat, "Handshake failed")) log_handshake_failure(flat);
    if (strstr(flat, "Failed accept4")) atomic_fetch_add(&accept_failures, 1);
}

void dt_rpc_init(void) {
    pthread_mutex_lock(&init_mu);
    if (init_count++ == 0) {
        /* Between calls nobody polls a channel, so a reconnect attempt to a
         * restarted peer only progresses on gRPC's backup poller, every 5 s
         * by default. Poll every 100 ms so a peer that comes back is found
         * within a fraction of a second. (An explicit setting wins.) */
        setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100", 0);
        gpr_set_log_function(grpc_log_to_dt);
        grpc_init();
    }
    pthread_mutex_unlock(&init_mu);
}

void dt_rpc_shutdown(void) {
    pthread_mutex_lock(&init_mu);
    if (init_count > 0 && --init_count == 0) grpc_shutdown();
    pthread_mutex_unlock(&init_mu);
}

int dt_rpc_buf_alloc(dt_rpc_buf *b, size_t len, dt_err *err) {
    memset(b, 0, sizeof *b);
    if (len == 0) return 0;
    grpc_slice *s = dt_malloc(sizeof *s);
    if (!s) return dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
    *s = grpc_slice_malloc(len);
    b->impl = s;
    b->data = GRPC_SLICE_START_PTR(*s);
    b->len = len;
    return 0;
}

void dt_rpc_buf_release(dt_rpc_buf *b) {
    if (!b) return;
    if (b->impl) {
        grpc_slice *s = b->impl;
        grpc_slice_unref(*s);
        free(s);
    }
    memset(b, 0, sizeof *b);
}

grpc_byte_buffer *dt_rpc_buf_to_byte_buffer(const dt_rpc_buf *b) {
    if (!b->impl) return grpc_raw_byte_buffer_create(NULL, 0);
    /* The byte buffer takes its own reference to the slice. */
    return grpc_raw_byte_buffer_create((grpc_slice *)b->impl, 1);
}

int dt_rpc_buf_from_byte_buffer(grpc_byte_buffer *bb, dt_rpc_buf *b, dt_err *err) {
    memset(b, 0, sizeof *b);
    if (!bb) return 0;
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, bb))
        return dt_err_set(err, DT_EINVAL, "rpc: cannot read message (bad compression?)");
    grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    size_t len = GRPC_SLICE_LENGTH(all);
    if (len == 0) {
        grpc_slice_unref(all);
        return 0;
    }
    grpc_slice *s = dt_malloc(sizeof *s);
    if (!s) {
        grpc_slice_unref(all);
        return dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
    }
    *s = all;
    b->impl = s;
    b->data = GRPC_SLICE_START_PTR(*s);
    b->len = len;
    return 0;
}

void dt_rpc_slice_to_str(grpc_slice s, char *out, size_t cap) {
    size_t n = GRPC_SLICE_LENGTH(s);
    if (n >= cap) n = cap - 1;
    memcpy(out, GRPC_SLICE_START_PTR(s), n);
    out[n] = '\0';
}

/* dtrain code -> gRPC status; the reverse is the first match below. */
static const struct {
    int code;
    grpc_status_code status;
} status_table[] = {
    {DT_OK, GRPC_STATUS_OK},
    {DT_EINVAL, GRPC_STATUS_INVALID_ARGUMENT},
    {DT_ENOTFOUND, GRPC_STATUS_NOT_FOUND},
    {DT_EIO, GRPC_STATUS_DATA_LOSS},
    {DT_EUNAVAILABLE, GRPC_STATUS_UNAVAILABLE},
    {DT_EDEADLINE, GRPC_STATUS_DEADLINE_EXCEEDED},
    {DT_EPRECOND, GRPC_STATUS_FAILED_PRECONDITION},
    {DT_ECORRUPT, GRPC_STATUS_DATA_LOSS},
    {DT_ENOMEM, GRPC_STATUS_RESOURCE_EXHAUSTED},
    {DT_EEXIST, GRPC_STATUS_ALREADY_EXISTS},
    {DT_ECANCELLED, GRPC_STATUS_CANCELLED},
    {DT_EINTERNAL, GRPC_STATUS_INTERNAL},
    {DT_EPERM, GRPC_STATUS_PERMISSION_DENIED},
    {DT_EABORTED, GRPC_STATUS_ABORTED},
};
#define STATUS_TABLE_LEN (sizeof status_table / sizeof status_table[0])

grpc_status_code dt_rpc_status_from_err(int code) {
    for (size_t i = 0; i < STATUS_TABLE_LEN; i++)
        if (status_table[i].code == code) return status_table[i].status;
    return GRPC_STATUS_UNKNOWN;
}

int dt_rpc_err_from_status(grpc_status_code status) {
    /* A caller sees CANCELLED when the peer shut down under its call: the
     * peer is gone for now (retryable), and it is not this process's own
     * stop signal, which DT_ECANCELLED means. */
    if (status == GRPC_STATUS_CANCELLED) return DT_EUNAVAILABLE;
    for (size_t i = 0; i < STATUS_TABLE_LEN; i++)
        if (status_table[i].status == status) return status_table[i].code;
    switch (status) {
    case GRPC_STATUS_OUT_OF_RANGE: return DT_EINVAL;
    case GRPC_STATUS_UNIMPLEMENTED: return DT_EPRECOND;
    /* A missing or wrong token: as permanent for the caller as a refusal. */
    case GRPC_STATUS_UNAUTHENTICATED: return DT_EPERM;
    default: return DT_EINTERNAL;
    }
}

const char *dt_rpc_status_name(grpc_status_code status) {
    static const char *const names[] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    if ((int)status >= 0 && (size_t)status < sizeof names / sizeof names[0]) return names[status];
    return "UNKNOWN";
}

uint64_t dt_rpc_random_id(void) {
    uint64_t id = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&id, sizeof id, 1, f) != 1) id = 0;
        fclose(f);
    }
    if (id == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        id = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);
    }
    return id ? id : 1;
}
