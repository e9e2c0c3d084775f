/*
 * rpc_common: message buffers as gRPC slices, the status-code table, and
 * reference-counted start/stop of the gRPC runtime.
 */
#include "rpc_internal.h"

#include "alloc.h"
#include "log.h"

#include <dlfcn.h>
#include <errno.h>
#include <grpc/slice.h>
#include <grpc/support/log.h>
#include <limits.h>
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

/* A failed TLS handshake reaches dtrain only as gRPC's log line (a server
 * never sees the connection as a call; a client sees UNAVAILABLE), so that
 * line is a warning: at most one every 5 s, with how many were skipped (a
 * misconfigured peer retries about every second). */
static void log_handshake_failure(const char *flat) {
    static atomic_llong last_ms, skipped;
    long long now = (long long)dt_now_ms();
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

/* Turns off abseil's mutex deadlock detection, which Debian's abseil
 * (built without NDEBUG) keeps on: every lock and unlock of gRPC's
 * mutexes then updates a graph of lock order (GraphCycles, 7% of a tiny
 * model worker's samples). Off, the tiny model's job made 8% more
 * steps/s. It finds deadlocks only in abseil's own mutexes, which dtrain
 * uses only through gRPC. The function is C++ and its name carries
 * abseil's inline namespace, so it is looked up by name: a build where
 * neither name is found keeps the detection. */
static void *find_absl_symbol(const char *name) {
    void *sym = dlsym(RTLD_DEFAULT, name);
    if (sym) return sym;
    /* Loaded with RTLD_LOCAL (Python's ctypes), this library's
     * dependencies are not in the global scope; a handle of its own
     * searches them. */
    Dl_info self;
    if (!dladdr((void *)&dt_rpc_init, &self) || !self.dli_fname) return NULL;
    void *h = dlopen(self.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return NULL;
    sym = dlsym(h, name);
    dlclose(h);
    return sym;
}

static void absl_deadlock_checks_off(void) {
    static const char *const names[] = {
        "_ZN4absl7debian329SetMutexDeadlockDetectionModeENS0_15OnDeadlockCycleE",
        "_ZN4absl29SetMutexDeadlockDetectionModeENS_15OnDeadlockCycleE"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *sym = find_absl_symbol(names[i]);
        if (!sym) continue;
        void (*set_mode)(int) = NULL;
        memcpy(&set_mode, &sym, sizeof set_mode); /* object to function pointer */
        set_mode(0);                              /* OnDeadlockCycle::kIgnore */
        dt_log(DT_LOG_DEBUG, "rpc: abseil's mutex deadlock detection is off");
        return;
    }
    dt_log(DT_LOG_DEBUG, "rpc: abseil's deadlock detection setting not found; left as it is");
}

void dt_rpc_init(void) {
    pthread_mutex_lock(&init_mu);
    if (init_count++ == 0) {
        absl_deadlock_checks_off();
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

/* What a dt_rpc_buf owns: one slice (a buffer in one run, or the own bytes
 * of a message built with runs, whose slices to send are `parts`: pieces
 * of the own bytes and the runs, in order), or a received byte buffer read
 * in place through a reader (which holds it decompressed when it came
 * compressed), with the pieces over the reader's slices. */
typedef struct {
    grpc_slice slice;
    grpc_slice *parts;
    size_t num_parts, cap_parts;
    size_t own_done; /* own bytes already in parts */
    grpc_byte_buffer *bb;
    grpc_byte_buffer_reader reader;
    int reading; /* reader initialised */
    dt_piece *pieces;
    dt_piece few[4]; /* pieces of a short message */
} buf_impl;

static buf_impl *impl_new(void) {
    buf_impl *im = dt_calloc(1, sizeof *im);
    if (im) im->slice = grpc_empty_slice();
    return im;
}

static void impl_free(buf_impl *im) {
    if (!im) return;
    if (im->reading) grpc_byte_buffer_reader_destroy(&im->reader);
    if (im->bb) grpc_byte_buffer_destroy(im->bb);
    if (im->pieces != im->few) free(im->pieces);
    for (size_t i = 0; i < im->num_parts; i++)
        grpc_slice_unref(im->parts[i]); /* a run's release, once no message holds it */
    free(im->parts);
    grpc_slice_unref(im->slice);
    free(im);
}

int dt_rpc_buf_alloc(dt_rpc_buf *b, size_t len, dt_err *err) {
    memset(b, 0, sizeof *b);
    if (len == 0) return 0;
    buf_impl *im = impl_new();
    if (!im) return dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
    im->slice = grpc_slice_malloc(len);
    b->impl = im;
    b->data = GRPC_SLICE_START_PTR(im->slice);
    b->len = len;
    return 0;
}

void dt_rpc_buf_release(dt_rpc_buf *b) {
    if (!b) return;
    impl_free(b->impl);
    memset(b, 0, sizeof *b);
}

int dt_rpc_buf_pieces(const dt_rpc_buf *b, dt_piece *one, const dt_piece **out) {
    if (b->pieces) {
        *out = b->pieces;
        return b->num_pieces;
    }
    one->data = b->data;
    one->len = b->len;
    *out = one;
    return b->len > 0 ? 1 : 0;
}

/* Appends s to im's parts (taking over the reference); 0, or -1 with s
 * unreferenced when there is no memory. */
static int add_part(buf_impl *im, grpc_slice s) {
    if (im->num_parts == im->cap_parts) {
        size_t cap = im->cap_parts ? 2 * im->cap_parts : 8;
        grpc_slice *parts = dt_realloc(im->parts, cap * sizeof *parts);
        if (!parts) {
            grpc_slice_unref(s);
            return -1;
        }
        im->parts = parts;
        im->cap_parts = cap;
    }
    im->parts[im->num_parts++] = s;
    return 0;
}

int dt_rpc_buf_add_ref(dt_rpc_buf *b, size_t own_at, const dt_rpc_ref *ref, dt_err *err) {
    if (ref->len == 0) {
        ref->release(ref->arg);
        return 0;
    }
    buf_impl *im = b->impl;
    if (!im && (b->impl = im = impl_new()) == NULL) {
        ref->release(ref->arg);
        return dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
    }
    DT_ASSERT(!im->bb && own_at >= im->own_done && own_at <= GRPC_SLICE_LENGTH(im->slice));
    /* gRPC calls release(arg) when the slice's last reference goes. */
    grpc_slice run =
        grpc_slice_new_with_user_data((void *)ref->data, ref->len, ref->release, ref->arg);
    if (own_at > im->own_done &&
        add_part(im, grpc_slice_sub(im->slice, im->own_done, own_at)) < 0) {
        grpc_slice_unref(run);
        return dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
    }
    im->own_done = own_at;
    if (add_part(im, run) < 0) return dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
    /* The message as pieces: the parts, then the own bytes after the last
     * run (written by the caller later; the pieces only point at them). */
    size_t cap = im->num_parts + 1;
    dt_piece *pieces = im->pieces == im->few ? NULL : im->pieces;
    if (cap > sizeof im->few / sizeof im->few[0]) {
        if (!(pieces = dt_realloc(pieces, cap * sizeof *pieces)))
            return dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
    } else {
        pieces = im->few;
    }
    im->pieces = pieces;
    size_t n = 0;
    for (; n < im->num_parts; n++)
        pieces[n] = (dt_piece){GRPC_SLICE_START_PTR(im->parts[n]), GRPC_SLICE_LENGTH(im->parts[n])};
    size_t own = GRPC_SLICE_LENGTH(im->slice);
    if (own > own_at)
        pieces[n++] = (dt_piece){GRPC_SLICE_START_PTR(im->slice) + own_at, own - own_at};
    b->data = NULL;
    b->len += ref->len;
    b->pieces = pieces;
    b->num_pieces = (int)n;
    return 0;
}

grpc_byte_buffer *dt_rpc_buf_to_byte_buffer(const dt_rpc_buf *b) {
    buf_impl *im = b->impl;
    if (!im) return grpc_raw_byte_buffer_create(NULL, 0);
    /* The new byte buffer takes its own references to the slices. */
    if (im->bb) return grpc_byte_buffer_copy(im->bb);
    if (!im->num_parts) return grpc_raw_byte_buffer_create(&im->slice, 1);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(im->parts, im->num_parts);
    size_t own = GRPC_SLICE_LENGTH(im->slice);
    if (im->own_done < own) {
        /* The own bytes after the last run. */
        grpc_slice tail = grpc_slice_sub(im->slice, im->own_done, own);
        grpc_slice_buffer_add(&bb->data.raw.slice_buffer, tail);
    }
    return bb;
}

int dt_rpc_buf_share(dt_rpc_buf *dst, const dt_rpc_buf *src, dt_err *err) {
    memset(dst, 0, sizeof *dst);
    if (src->len == 0) return 0;
    /* A byte buffer of new references to src's slices, read in place. */
    return dt_rpc_buf_from_byte_buffer_pieces(dt_rpc_buf_to_byte_buffer(src), dst, err);
}

int dt_rpc_buf_flatten(dt_rpc_buf *b, dt_err *err) {
    if (b->data || b->len == 0) return 0;
    grpc_byte_buffer *bb = dt_rpc_buf_to_byte_buffer(b);
    dt_rpc_buf flat;
    int rc = dt_rpc_buf_from_byte_buffer(bb, &flat, err);
    grpc_byte_buffer_destroy(bb);
    if (rc < 0) return rc;
    dt_rpc_buf_release(b);
    *b = flat;
    return 0;
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
    buf_impl *im = impl_new();
    if (!im) {
        grpc_slice_unref(all);
        return dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
    }
    im->slice = all;
    b->impl = im;
    b->data = GRPC_SLICE_START_PTR(im->slice);
    b->len = len;
    return 0;
}

int dt_rpc_buf_from_byte_buffer_pieces(grpc_byte_buffer *bb, dt_rpc_buf *b, dt_err *err) {
    memset(b, 0, sizeof *b);
    if (!bb) return 0;
    buf_impl *im = impl_new();
    if (!im) {
        grpc_byte_buffer_destroy(bb);
        return dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
    }
    im->bb = bb;
    if (!grpc_byte_buffer_reader_init(&im->reader, bb)) {
        impl_free(im);
        return dt_err_set(err, DT_EINVAL, "rpc: cannot read message (bad compression?)");
    }
    im->reading = 1;
    /* The reader walks the slices of its output buffer (the input itself
     * unless it was compressed): at most that many pieces. */
    size_t cap = im->reader.buffer_out->data.raw.slice_buffer.count;
    if (cap > (size_t)INT_MAX) {
        impl_free(im);
        return dt_err_set(err, DT_EINVAL, "rpc: message in %zu pieces", cap);
    }
    im->pieces =
        cap <= sizeof im->few / sizeof im->few[0] ? im->few : dt_calloc(cap, sizeof *im->pieces);
    if (!im->pieces) {
        impl_free(im);
        return dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
    }
    grpc_slice *slice;
    uint8_t *first = NULL; /* the first piece, as b->data holds it (not const) */
    size_t n = 0, len = 0;
    while (n < cap && grpc_byte_buffer_reader_peek(&im->reader, &slice)) {
        size_t piece_len = GRPC_SLICE_LENGTH(*slice);
        if (piece_len == 0) continue;
        if (n == 0) first = GRPC_SLICE_START_PTR(*slice);
        im->pieces[n].data = GRPC_SLICE_START_PTR(*slice);
        im->pieces[n++].len = piece_len;
        len += piece_len;
    }
    if (len == 0) {
        impl_free(im);
        return 0;
    }
    b->impl = im;
    b->len = len;
    if (n == 1) {
        /* One run: as a whole buffer, so no reader has to walk pieces. */
        b->data = first;
    } else {
        b->pieces = im->pieces;
        b->num_pieces = (int)n;
    }
    return 0;
}

int dt_rpc_buf_received(dt_rpc_buf *b, const dt_piece *pieces, int n, dt_err *err) {
    memset(b, 0, sizeof *b);
    grpc_slice *slices = dt_calloc(n > 0 ? (size_t)n : 1, sizeof *slices);
    if (!slices) return dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
    /* Each piece in its own exactly-sized allocation (a sanitizer sees a
     * read past it), as a slice gRPC does not merge with its neighbours
     * (it would fold short copied slices together). */
    int made = 0, rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (pieces[i].len == 0) continue;
        void *copy = dt_malloc(pieces[i].len);
        if (!copy) {
            rc = dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
            break;
        }
        memcpy(copy, pieces[i].data, pieces[i].len);
        slices[made++] = grpc_slice_new(copy, pieces[i].len, free);
    }
    grpc_byte_buffer *bb = rc == 0 ? grpc_raw_byte_buffer_create(slices, (size_t)made) : NULL;
    for (int i = 0; i < made; i++)
        grpc_slice_unref(slices[i]);
    free(slices);
    if (rc < 0) return rc;
    return dt_rpc_buf_from_byte_buffer_pieces(bb, b, err);
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
