/*
 * bench_pullpush: pull+push throughput of real dtrain RPCs against a running
 * `dtrain --job ps`.
 *
 * The parent creates one float32 variable "bench/weight" (N) on the ps (sgd,
 * max_steps huge, so no push is ever refused as "done"), then W worker
 * processes, each with its own dt_ps_client, run R rounds of
 *   pull(weight) -> push(grad)
 * where grad is the constant 2^-10, so the ps does its real work per push
 * (decode, finiteness check, sgd update) and the final value is exact.
 * Afterwards the parent checks the global step (W*R) and the weight
 * (-lr * g * W * R), then sends Shutdown and tells the ps, for every worker
 * index, that the job is done (a Status call), so the ps exits at once.
 *
 * Payload: 2 * N * 4 bytes per round per worker (the tensor bytes pulled and
 * pushed), summed over workers; MB is 10^6 bytes. The time runs from the
 * moment every worker is connected and has done one warm-up pull to the
 * moment the last one finishes.
 *
 * Processes, not threads, because that is what a real job looks like: each
 * worker has its own gRPC runtime. They are forked before the parent touches
 * gRPC (gRPC does not survive a fork), and talk to the parent over pipes:
 *   parent -> child 'C' (variable created), child -> parent 'R' (ready),
 *   parent -> child 'S' (start), child -> parent a worker_result.
 * A child that reads EOF (parent gone) exits; every RPC has a deadline, so
 * nothing waits forever.
 *
 * Output (stdout), one line:
 *   pullpush floats=N rounds=R workers=W seconds=S mb_per_s=X rounds_per_s=Y
 * Exit status: 0, 1 on any failure (message on stderr), 2 on usage errors.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "err.h"
#include "log.h"
#include "optim.h"
#include "ps_client.h"
#include "tensor.h"

#define MAX_WORKERS 16
#define GRAD_VALUE (1.0f / 1024.0f) /* a power of two: sums stay exact */
#define LEARNING_RATE (1.0 / 64.0)
#define VAR_NAME "bench/weight"

typedef struct {
    const char *cluster_path;
    int64_t floats;  /* N */
    int rounds;      /* R per worker */
    int workers;     /* W */
    int timeout_ms;  /* each RPC's deadline */
} options;

/* What a worker process reports to the parent. */
typedef struct {
    int rc;          /* 0 or a dt_err_code */
    double seconds;  /* its own loop time */
    int64_t rounds;  /* completed */
    char msg[DT_ERR_MSG_MAX];
} worker_result;

typedef struct {
    pid_t pid;
    int to_child;   /* write end */
    int from_child; /* read end */
} child;

static double now_secs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int write_full(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* 0 when len bytes were read; -1 on EOF or error. */
static int read_full(int fd, void *buf, size_t len) {
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int expect_byte(int fd, char want) {
    char got = 0;
    return read_full(fd, &got, 1) == 0 && got == want ? 0 : -1;
}

static int parse_int(const char *text, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!*text || *end || errno || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static const char usage[] =
    "usage: bench_pullpush --cluster FILE --floats N --rounds R [--workers W] "
    "[--timeout-secs S]\n"
    "  Runs W worker processes (default 2) doing R rounds of pull+push of one\n"
    "  variable of N float32 against the ps of FILE (which must be running).\n";

static int parse_args(int argc, char **argv, options *o) {
    o->workers = 2;
    o->timeout_ms = 120 * 1000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_pullpush: %s needs a value\n%s", a, usage);
            return -1;
        }
        const char *v = argv[++i];
        int64_t n = 0;
        if (strcmp(a, "--cluster") == 0) {
            o->cluster_path = v;
            continue;
        }
        if (strcmp(a, "--floats") == 0 && parse_int(v, 1, (int64_t)1 << 30, &n) == 0)
            o->floats = n;
        else if (strcmp(a, "--rounds") == 0 && parse_int(v, 1, 1000000, &n) == 0)
            o->rounds = (int)n;
        else if (strcmp(a, "--workers") == 0 && parse_int(v, 1, MAX_WORKERS, &n) == 0)
            o->workers = (int)n;
        else if (strcmp(a, "--timeout-secs") == 0 && parse_int(v, 1, 3600, &n) == 0)
            o->timeout_ms = (int)n * 1000;
        else {
            fprintf(stderr, "bench_pullpush: bad flag or value: %s %s\n%s", a, v, usage);
            return -1;
        }
    }
    if (!o->cluster_path || o->floats == 0 || o->rounds == 0) {
        fprintf(stderr, "bench_pullpush: --cluster, --floats and --rounds are required\n%s", usage);
        return -1;
    }
    return 0;
}

/* Client parameters: greedy placement, never partitioned (one ps anyway). */
static dt_ps_client_params client_params(const dt_cluster *cluster, int worker, int timeout_ms) {
    dt_ps_client_params cp;
    memset(&cp, 0, sizeof cp);
    cp.cluster = cluster;
    cp.worker = worker;
    cp.timeout_ms = timeout_ms;
    cp.placement = DT_PLACE_GREEDY;
    cp.partition_min_bytes = 0;
    return cp;
}

/* The variable's layout: one float32 vector of N. */
static int init_layout(dt_tensors *ts, int64_t floats, dt_err *err) {
    dt_tensor spec;
    memset(&spec, 0, sizeof spec);
    snprintf(spec.name, sizeof spec.name, "%s", VAR_NAME);
    spec.dtype = DT_DTYPE_F32;
    spec.ndim = 1;
    spec.shape[0] = floats;
    int rc = dt_tensor_check_spec(&spec, err);
    if (rc < 0) return rc;
    return dt_tensors_init(ts, &spec, 1, err);
}

/* ---- worker process ------------------------------------------------------ */

/* The worker's part after 'C': connect, warm up, report ready, wait for 'S',
 * loop. Fills res; returns nonzero only when the parent has gone away. */
static int worker_loop(const options *o, const dt_cluster *cluster, int index, int to_parent,
                       int from_parent, worker_result *res) {
    dt_err err;
    dt_err_clear(&err);
    dt_tensors vars, grads;
    memset(&vars, 0, sizeof vars);
    memset(&grads, 0, sizeof grads);
    dt_ps_client *client = NULL;
    int gone = 0;
    int rc = init_layout(&vars, o->floats, &err);
    if (rc == 0) rc = init_layout(&grads, o->floats, &err);
    if (rc == 0) {
        float *g = grads.items[0].data;
        for (int64_t i = 0; i < o->floats; i++) g[i] = GRAD_VALUE;
        dt_ps_client_params cp = client_params(cluster, index, o->timeout_ms);
        rc = dt_ps_client_new(&cp, &vars, &client, &err);
    }
    dt_ps_reply reply;
    memset(&reply, 0, sizeof reply);
    /* One pull before the clock starts: connects the channel and touches
     * every page of the receive side. */
    if (rc == 0) rc = dt_ps_client_pull(client, &vars, NULL, 0, &reply, &err);
    char ready = rc == 0 ? 'R' : 'F';
    if (write_full(to_parent, &ready, 1) < 0) gone = 1;
    if (rc == 0 && !gone && expect_byte(from_parent, 'S') < 0) gone = 1;
    if (rc == 0 && !gone) {
        double t0 = now_secs();
        for (int r = 0; r < o->rounds && rc == 0; r++) {
            rc = dt_ps_client_pull(client, &vars, NULL, 0, &reply, &err);
            if (rc == 0 && reply.wait)
                rc = dt_err_set(&err, DT_EPRECOND, "the ps says wait (not an async job?)");
            if (rc == 0) rc = dt_ps_client_push(client, &grads, reply.global_step, &reply, &err);
            if (rc == 0 && (reply.done || reply.dropped))
                rc = dt_err_set(&err, DT_EPRECOND, "the ps %s at global_step %lld",
                                reply.done ? "says the job is done" : "dropped a gradient",
                                (long long)reply.global_step);
            if (rc == 0) res->rounds++;
        }
        res->seconds = now_secs() - t0;
    }
    res->rc = rc;
    snprintf(res->msg, sizeof res->msg, "%s", err.msg);
    dt_ps_client_free(client);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&grads);
    return gone;
}

/* Runs in the forked child; never returns. */
static void worker_main(const options *o, dt_cluster *cluster, int index, int to_parent,
                        int from_parent) {
    worker_result res;
    memset(&res, 0, sizeof res);
    int status = 3; /* the parent went away before 'C' */
    if (expect_byte(from_parent, 'C') == 0) {
        dt_log_set_role('W');
        int gone = worker_loop(o, cluster, index, to_parent, from_parent, &res);
        status = gone ? 3 : res.rc == 0 ? 0 : 1;
        if (!gone && write_full(to_parent, &res, sizeof res) < 0) status = 3;
    }
    dt_cluster_deinit(cluster);
    close(to_parent);
    close(from_parent);
    _exit(status);
}

/* ---- parent ---------------------------------------------------------------- */

/* Closes the pipes (a child waiting on one then exits), gives the children
 * up to 2 s to end by themselves, then kills and reaps what is left. */
static void stop_children(child *kids, int n) {
    for (int i = 0; i < n; i++) {
        if (kids[i].to_child >= 0) close(kids[i].to_child);
        if (kids[i].from_child >= 0) close(kids[i].from_child);
        kids[i].to_child = kids[i].from_child = -1;
    }
    double deadline = now_secs() + 2.0;
    for (int i = 0; i < n; i++) {
        while (kids[i].pid > 0) {
            pid_t r = waitpid(kids[i].pid, NULL, WNOHANG);
            if (r == kids[i].pid || (r < 0 && errno != EINTR)) {
                kids[i].pid = -1;
            } else if (now_secs() >= deadline) {
                kill(kids[i].pid, SIGKILL);
                while (waitpid(kids[i].pid, NULL, 0) < 0 && errno == EINTR) {
                }
                kids[i].pid = -1;
            } else {
                struct timespec nap = {0, 10 * 1000000L};
                nanosleep(&nap, NULL);
            }
        }
    }
}

static int spawn_workers(const options *o, dt_cluster *cluster, child *kids) {
    fflush(NULL); /* nothing buffered may be written twice */
    for (int i = 0; i < o->workers; i++) {
        int down[2], up[2];
        if (pipe(down) != 0) return -1;
        if (pipe(up) != 0) {
            close(down[0]);
            close(down[1]);
            return -1;
        }
        pid_t pid = fork();
        if (pid < 0) {
            close(down[0]);
            close(down[1]);
            close(up[0]);
            close(up[1]);
            return -1;
        }
        if (pid == 0) {
            close(down[1]);
            close(up[0]);
            for (int k = 0; k < i; k++) {
                close(kids[k].to_child);
                close(kids[k].from_child);
            }
            worker_main(o, cluster, i, up[1], down[0]);
        }
        close(down[0]);
        close(up[1]);
        kids[i].pid = pid;
        kids[i].to_child = down[1];
        kids[i].from_child = up[0];
    }
    return 0;
}

/* After the loop: global step and value check, Shutdown, and one Status per
 * worker index so the ps knows every worker has been told. */
static int check_and_stop(const options *o, const dt_cluster *cluster, dt_ps_client *client,
                          dt_tensors *vars, dt_err *err) {
    dt_ps_reply reply;
    memset(&reply, 0, sizeof reply);
    int rc = dt_ps_client_pull(client, vars, NULL, 0, &reply, err);
    if (rc < 0) return rc;
    int64_t pushes = (int64_t)o->workers * o->rounds;
    if (reply.global_step != pushes)
        return dt_err_set(err, DT_EINTERNAL, "check: global_step %lld after %lld pushes",
                          (long long)reply.global_step, (long long)pushes);
    const float *w = vars->items[0].data;
    double want = -LEARNING_RATE * GRAD_VALUE * (double)pushes;
    int64_t last = o->floats - 1;
    if (fabs(w[0] - want) > 1e-6 * fabs(want) || fabs(w[last] - want) > 1e-6 * fabs(want))
        return dt_err_set(err, DT_EINTERNAL, "check: weight[0] %.9g, weight[%lld] %.9g, want %.9g",
                          (double)w[0], (long long)last, (double)w[last], want);
    if ((rc = dt_ps_client_shutdown(client, "bench done", err)) < 0) return rc;
    dt_tensors none;
    memset(&none, 0, sizeof none);
    for (int i = 0; i < cluster->num_workers && rc == 0; i++) {
        dt_ps_client *told = NULL;
        dt_ps_client_params cp = client_params(cluster, i, o->timeout_ms);
        rc = dt_ps_client_new(&cp, &none, &told, err);
        dt_msg_status_resp st;
        if (rc == 0) rc = dt_ps_client_status(told, 0, &st, err);
        dt_ps_client_free(told);
    }
    return rc;
}

int main(int argc, char **argv) {
    options o;
    memset(&o, 0, sizeof o);
    if (parse_args(argc, argv, &o) < 0) return 2;
    signal(SIGPIPE, SIG_IGN);

    dt_err err;
    dt_err_clear(&err);
    dt_cluster cluster;
    memset(&cluster, 0, sizeof cluster);
    if (dt_cluster_load(o.cluster_path, &cluster, &err) < 0) {
        fprintf(stderr, "bench_pullpush: %s\n", err.msg);
        return 2;
    }
    if (cluster.num_ps != 1 || cluster.num_workers < o.workers) {
        fprintf(stderr, "bench_pullpush: %s: need 1 ps and at least %d workers (has %d and %d)\n",
                o.cluster_path, o.workers, cluster.num_ps, cluster.num_workers);
        dt_cluster_deinit(&cluster);
        return 2;
    }

    child kids[MAX_WORKERS];
    for (int i = 0; i < MAX_WORKERS; i++) kids[i] = (child){-1, -1, -1};
    dt_tensors vars;
    memset(&vars, 0, sizeof vars);
    dt_ps_client *client = NULL;
    worker_result res[MAX_WORKERS];
    memset(res, 0, sizeof res);
    int rc = 0;
    double t0 = 0, t1 = 0;

    if (spawn_workers(&o, &cluster, kids) < 0) {
        rc = dt_err_set(&err, DT_EINTERNAL, "cannot start worker processes: %s", strerror(errno));
        goto fail;
    }
    /* gRPC starts only now, in the parent, after every fork. */
    if ((rc = init_layout(&vars, o.floats, &err)) < 0) goto fail;
    dt_ps_client_params cp = client_params(&cluster, -1, o.timeout_ms);
    if ((rc = dt_ps_client_new(&cp, &vars, &client, &err)) < 0) goto fail;
    dt_optim_config optim;
    dt_optim_defaults(&optim);
    snprintf(optim.name, sizeof optim.name, "sgd");
    optim.learning_rate = LEARNING_RATE;
    dt_ps_model model;
    memset(&model, 0, sizeof model); /* constant schedule, async, no slots */
    model.vars = &vars;
    model.global_step = 0;
    model.max_steps = INT64_MAX / 2;
    model.optim = optim;
    model.model = "bench pullpush";
    if ((rc = dt_ps_client_create(client, &model, NULL, &err)) < 0) goto fail;

    for (int i = 0; i < o.workers; i++)
        if (write_full(kids[i].to_child, "C", 1) < 0) {
            rc = dt_err_set(&err, DT_EINTERNAL, "worker %d: gone before start", i);
            goto fail;
        }
    for (int i = 0; i < o.workers; i++)
        if (expect_byte(kids[i].from_child, 'R') < 0) {
            /* It failed its warm-up: its result follows. */
            if (read_full(kids[i].from_child, &res[i], sizeof res[i]) == 0 && res[i].rc < 0)
                rc = dt_err_set(&err, res[i].rc, "worker %d: warm-up: %s", i, res[i].msg);
            else
                rc = dt_err_set(&err, DT_EINTERNAL, "worker %d: died during warm-up", i);
            goto fail;
        }
    t0 = now_secs();
    for (int i = 0; i < o.workers; i++)
        if (write_full(kids[i].to_child, "S", 1) < 0) {
            rc = dt_err_set(&err, DT_EINTERNAL, "worker %d: gone before the loop", i);
            goto fail;
        }
    for (int i = 0; i < o.workers; i++) {
        if (read_full(kids[i].from_child, &res[i], sizeof res[i]) < 0) {
            rc = dt_err_set(&err, DT_EINTERNAL, "worker %d: died in the loop", i);
            goto fail;
        }
        if (res[i].rc < 0) {
            rc = dt_err_set(&err, res[i].rc, "worker %d: round %lld: %s", i,
                            (long long)res[i].rounds, res[i].msg);
            goto fail;
        }
    }
    t1 = now_secs();
    stop_children(kids, o.workers);
    if ((rc = check_and_stop(&o, &cluster, client, &vars, &err)) < 0) goto fail;

    double seconds = t1 - t0;
    double total_rounds = (double)o.workers * o.rounds;
    double bytes = total_rounds * 2.0 * (double)o.floats * 4.0;
    printf("pullpush floats=%lld rounds=%d workers=%d seconds=%.3f mb_per_s=%.1f "
           "rounds_per_s=%.2f\n",
           (long long)o.floats, o.rounds, o.workers, seconds, bytes / seconds / 1e6,
           total_rounds / seconds);
    for (int i = 0; i < o.workers; i++)
        fprintf(stderr, "bench_pullpush: worker %d: %d rounds in %.3f s\n", i, o.rounds,
                res[i].seconds);
fail:
    if (rc < 0) fprintf(stderr, "bench_pullpush: %s\n", err.msg);
    stop_children(kids, o.workers);
    dt_ps_client_free(client);
    dt_tensors_deinit(&vars);
    dt_cluster_deinit(&cluster);
    return rc < 0 ? 1 : 0;
}
