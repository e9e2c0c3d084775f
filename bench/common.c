/*
 * common: what the bench programs share, so each of them is only its own
 * measurement: the monotonic clock, flag values, dtrain's allocator
 * settings, whole reads and writes on pipes, reaping and stopping child
 * processes, the fork-and-pipes protocol of client processes (common.h),
 * and the rates every pull+push figure is given in.
 *
 * Invariants: a dt_bench_child with pid > 0 is a child not yet reaped;
 * closed pipe ends are -1. dt_bench_stop_children always leaves every child
 * reaped, so a bench never leaves a process behind it.
 *
 * Threading: the clock, parsing and rates are thread-safe; the child
 * helpers are for the one thread that forked the children.
 */
#include "common.h"

#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "criteo_gen.h"
#include "rpc_common.h"

double dt_bench_now_secs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void dt_bench_sleep_ms(int ms) {
    struct timespec nap = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&nap, &nap) != 0 && errno == EINTR) {
    }
}

int dt_bench_parse_int(const char *text, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!*text || *end || errno || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* The raw echo makes a fresh reply as large as the payload per call (40 MB
 * for 10M floats) and copies each request together; above glibc's default
 * 32 MB mmap threshold each would be a fresh mmap, faulted in and unmapped
 * again. Kept on the heap, the ceiling is measured at its best. */
void dt_bench_tune_allocator(void) {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

/* cmd/dtrain.c's settings (see there), for processes that stand in for a
 * worker: they allocate as a worker does. */
void dt_bench_allocate_as_dtrain(void) {
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    mallopt(M_TRIM_THRESHOLD, 8 << 20);
    mallopt(M_ARENA_MAX, 1);
}

/* The loop under write_full and read_full: len bytes from or into p,
 * resuming after EINTR and short transfers. p is only read when writing. */
static int transfer_full(int fd, char *p, size_t len, int writing) {
    while (len > 0) {
        ssize_t n = writing ? write(fd, p, len) : read(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Writes / reads exactly len bytes. 0, or -1 on an error or (reading) EOF. */
static int write_full(int fd, const void *buf, size_t len) {
    return transfer_full(fd, (char *)buf, len, 1);
}

static int read_full(int fd, void *buf, size_t len) {
    return transfer_full(fd, buf, len, 0);
}

/* 0 when the next byte on fd is `want`; -1 on another byte, EOF or error. */
static int expect_byte(int fd, char want) {
    char got = 0;
    return read_full(fd, &got, 1) == 0 && got == want ? 0 : -1;
}

int dt_bench_has_exited(pid_t pid, int *status) {
    pid_t r;
    while ((r = waitpid(pid, status, WNOHANG)) < 0 && errno == EINTR) {
    }
    if (r < 0) *status = -1;
    return r == pid || r < 0;
}

void dt_bench_reap_by(pid_t pid, double deadline) {
    int status = 0;
    while (!dt_bench_has_exited(pid, &status)) {
        if (dt_bench_now_secs() >= deadline) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            return;
        }
        dt_bench_sleep_ms(10);
    }
}

/* ---- forked clients ---------------------------------------------------------- */

typedef struct {
    int to_parent, from_parent;
} child_pipes;

/* A client process's start line: 'R' (or 'F') up, then wait for 'S'. */
static int pipe_start(void *start_ctx, int ok) {
    const child_pipes *cp = start_ctx;
    char ready = ok ? 'R' : 'F';
    if (write_full(cp->to_parent, &ready, 1) < 0) return 0;
    return ok && expect_byte(cp->from_parent, 'S') == 0;
}

/* Runs in the child (forked, or exec'd and back here through
 * dt_bench_exec_child): waits for 'C' (server side up), runs the client,
 * reports. Never returns. */
__attribute__((noreturn)) static void child_main(dt_bench_client_fn run, const void *arg, int index,
                                                 int to_parent, int from_parent) {
    dt_bench_result res;
    memset(&res, 0, sizeof res);
    int status = 3; /* the parent went away */
    if (expect_byte(from_parent, 'C') == 0) {
        child_pipes cp = {to_parent, from_parent};
        /* The child keeps a reference to the RPC runtime until it exits, as
         * dtrain does: the last dt_rpc_shutdown (freeing its channel) joins
         * gRPC's threads, and after a write larger than the socket buffer
         * one of them sits out a 10 s poll, which the result would wait for
         * and the parent's clock would count. */
        dt_rpc_init();
        run(arg, index, pipe_start, &cp, &res);
        status = res.rc == 0 ? 0 : 1;
        if (write_full(to_parent, &res, sizeof res) < 0) status = 3;
    }
    close(to_parent);
    close(from_parent);
    _exit(status);
}

/* Child index becomes this program anew (/proc/self/exe) with argv's
 * arguments and "--exec-child INDEX:TO_PARENT:FROM_PARENT", which its main
 * hands to dt_bench_exec_child; the pipes stay open across the exec. Never
 * returns (exit status 3 when the exec failed, as for a vanished parent). */
__attribute__((noreturn)) static void exec_child(int argc, char *const *argv, int index,
                                                 int to_parent, int from_parent) {
    char spec[64];
    snprintf(spec, sizeof spec, "%d:%d:%d", index, to_parent, from_parent);
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (args) {
        for (int i = 0; i < argc; i++)
            args[i] = argv[i];
        args[argc] = "--exec-child";
        args[argc + 1] = spec;
        execv("/proc/self/exe", args); /* returns only on failure */
    }
    _exit(3);
}

/* Forks n children with pipes to and from each; each runs
 * child_main(run, ...), or with argv execs itself (exec_child). */
static int spawn(int n, dt_bench_client_fn run, const void *arg, int argc, char *const *argv,
                 dt_bench_child *kids) {
    fflush(NULL); /* nothing buffered may be written twice */
    for (int i = 0; i < n; i++) {
        int down[2], up[2];
        if (pipe(down) != 0) return -1;
        if (pipe(up) != 0) {
            close(down[0]);
            close(down[1]);
            return -1;
        }
        pid_t pid = fork();
        if (pid < 0) {
            int e = errno;
            close(down[0]);
            close(down[1]);
            close(up[0]);
            close(up[1]);
            errno = e;
            return -1;
        }
        if (pid == 0) {
            close(down[1]);
            close(up[0]);
            /* Only the parent may hold its siblings' pipes: a sibling
             * must see EOF when the parent closes them. */
            for (int k = 0; k < i; k++) {
                close(kids[k].to_child);
                close(kids[k].from_child);
            }
            if (argv) exec_child(argc, argv, i, up[1], down[0]);
            child_main(run, arg, i, up[1], down[0]);
        }
        close(down[0]);
        close(up[1]);
        kids[i].pid = pid;
        kids[i].to_child = down[1];
        kids[i].from_child = up[0];
    }
    return 0;
}

int dt_bench_spawn_children(int n, dt_bench_client_fn run, const void *arg, dt_bench_child *kids) {
    return spawn(n, run, arg, 0, NULL, kids);
}

int dt_bench_spawn_children_exec(int n, int argc, char *const *argv, dt_bench_child *kids) {
    return spawn(n, NULL, NULL, argc, argv, kids);
}

int dt_bench_exec_child(const char *spec, dt_bench_client_fn run, const void *arg) {
    int index, to_parent, from_parent;
    char end;
    if (sscanf(spec, "%d:%d:%d%c", &index, &to_parent, &from_parent, &end) != 3 || index < 0 ||
        to_parent < 0 || from_parent < 0)
        return -1;
    child_main(run, arg, index, to_parent, from_parent);
}

int dt_bench_result_check(const dt_bench_result *res, const char *noun, int index, dt_err *err) {
    if (res->rc == 0) return 0;
    return dt_err_set(err, res->rc < 0 ? res->rc : DT_EINTERNAL, "%s %d: round %lld: %s", noun,
                      index, (long long)res->rounds, res->msg);
}

int dt_bench_children_run(dt_bench_child *kids, int n, const char *noun, dt_bench_result *res,
                          double *seconds, dt_err *err) {
    for (int i = 0; i < n; i++)
        if (write_full(kids[i].to_child, "C", 1) < 0)
            return dt_err_set(err, DT_EINTERNAL, "%s %d: gone before start", noun, i);
    for (int i = 0; i < n; i++)
        if (expect_byte(kids[i].from_child, 'R') < 0) {
            /* It failed its warm-up: its result follows. */
            if (read_full(kids[i].from_child, &res[i], sizeof res[i]) == 0 && res[i].rc < 0)
                return dt_err_set(err, res[i].rc, "%s %d: warm-up: %s", noun, i, res[i].msg);
            return dt_err_set(err, DT_EINTERNAL, "%s %d: died during warm-up", noun, i);
        }
    double t0 = dt_bench_now_secs();
    for (int i = 0; i < n; i++)
        if (write_full(kids[i].to_child, "S", 1) < 0)
            return dt_err_set(err, DT_EINTERNAL, "%s %d: gone before the loop", noun, i);
    for (int i = 0; i < n; i++) {
        if (read_full(kids[i].from_child, &res[i], sizeof res[i]) < 0)
            return dt_err_set(err, DT_EINTERNAL, "%s %d: died in the loop", noun, i);
        int rc = dt_bench_result_check(&res[i], noun, i, err);
        if (rc < 0) return rc;
    }
    *seconds = dt_bench_now_secs() - t0;
    return 0;
}

void dt_bench_stop_children(dt_bench_child *kids, int n) {
    for (int i = 0; i < n; i++) {
        if (kids[i].to_child >= 0) close(kids[i].to_child);
        if (kids[i].from_child >= 0) close(kids[i].from_child);
        kids[i].to_child = kids[i].from_child = -1;
    }
    double deadline = dt_bench_now_secs() + 2.0;
    for (int i = 0; i < n; i++) {
        if (kids[i].pid > 0) dt_bench_reap_by(kids[i].pid, deadline);
        kids[i].pid = -1;
    }
}

/* ---- figures ----------------------------------------------------------------- */

void dt_bench_print_rates(double rounds, int64_t floats, double seconds) {
    double bytes = rounds * 2.0 * (double)floats * 4.0; /* pulled + pushed */
    printf(" seconds=%.3f mb_per_s=%.1f rounds_per_s=%.2f", seconds, bytes / seconds / 1e6,
           rounds / seconds);
}

/* The hidden model's mean log loss on rows first..first+n of the
 * generator's output for spec "SEED,FIRST,VOCAB_SCALE". */
int dt_bench_hidden_log_loss(const char *spec, int64_t n, double *out, dt_err *err) {
    unsigned long long seed = 0;
    long long first = 0;
    double vocab = 0;
    if (sscanf(spec, "%llu,%lld,%lf", &seed, &first, &vocab) != 3 || first < 0)
        return dt_err_set(err, DT_EINVAL, "--hidden %s: want SEED,FIRST,VOCAB_SCALE", spec);
    dt_criteo_gen_params p;
    dt_criteo_gen_defaults(&p);
    p.seed = seed;
    p.vocab_scale = vocab;
    p.rows = first + n;
    dt_criteo_gen_model m;
    int rc = dt_criteo_gen_init(&p, &m, err);
    if (rc < 0) return rc;
    *out = dt_criteo_gen_log_loss(&m, first, n);
    return 0;
}

int dt_bench_load_job(const char *config, const char *const *sets, int num_sets, dt_job *job,
                      dt_err *err) {
    dt_job_defaults(job);
    int rc = dt_job_load(config, job, err);
    for (int i = 0; i < num_sets && rc == 0; i++)
        rc = dt_job_set(job, sets[i], err);
    return rc == 0 ? dt_job_finish(job, err) : rc;
}
