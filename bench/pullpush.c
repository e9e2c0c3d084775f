/*
 * bench_pullpush: pull+push throughput of real dtrain RPCs against the ps
 * tasks of a cluster file: either already running, or started here
 * (--dtrain BIN: one `BIN --job ps --task i` per ps task of the file).
 *
 * The parent creates one float32 variable "bench/weight" (N) on the ps
 * tasks (sgd, max_steps huge, so no push is ever refused as "done"), then W
 * worker processes, each with its own dt_ps_client, run R rounds of
 *   pull(weight) -> push(grad)
 * or, with --fuse, of one push whose reply brings the next values back
 * (dt_ps_client_push_pull, what a worker does with fuse_push_pull), where
 * grad is the constant 2^-10, so the ps does its real work per push
 * (decode, finiteness check, sgd update) and the final value is exact.
 * With --partition-min-bytes B the variable is split by rows across the ps
 * tasks as a job's would be (placement.h: min(ps tasks, N*4 / B) slices when
 * N*4 >= 2B), placed by --placement; every client computes the same
 * placement, so a pull or push fans out to every task holding a slice.
 * Afterwards the parent checks the global step (W*R) and the weight
 * (-lr * g * W * R) at both ends of every slice, then sends Shutdown and
 * tells every ps, for every worker index, that the job is done (a Status
 * call), so the ps tasks exit at once.
 *
 * With --tls-dir DIR every connection is mutual TLS with the certificates
 * of scripts/make_certs.sh in DIR: a ps started here serves with
 * ps-<i>.pem, worker 0 and the parent (which creates the variable and ends
 * the job, the chief's calls) present chief.pem, worker i > 0
 * worker-<i>.pem, and all check the peer against ca.pem; the ps then
 * authorizes each call by the certificate, as in a secured job.
 *
 * Payload: 2 * N * 4 bytes per round per worker (the tensor bytes pulled and
 * pushed), summed over workers; MB is 10^6 bytes. The time runs from the
 * moment every worker is connected and has done one warm-up pull to the
 * moment the last one finishes. The allocator is set up as cmd/dtrain.c
 * sets it, so the worker processes allocate as dtrain's do.
 *
 * Processes, not threads, because that is what a real job looks like: each
 * worker has its own gRPC runtime. They (and the ps tasks started here) are
 * forked before the parent touches gRPC (gRPC does not survive a fork), and
 * the workers talk to the parent over pipes (bench/common.h): 'C' once the
 * variable is created, 'R' (ready), 'S' (start), then a dt_bench_result.
 * A child that reads EOF (parent gone) exits; every RPC has a deadline, so
 * nothing waits forever. A ps started here dies with the parent (parent-death
 * signal); the parent waits up to 20 s for it to serve, and after the job up
 * to --ps-exit-secs (default 15) for it to exit by itself: an exit status
 * other than 0 is a failure; one still running then is killed and counted.
 *
 * Output (stdout), one line:
 *   pullpush floats=N rounds=R workers=W ps=P units=U tls=T fuse=F seconds=S
 *     mb_per_s=X rounds_per_s=Y [ps_exited=K]
 * (U: the variable's slices, 1 when it is not split; K, with --dtrain: the
 * ps tasks that exited by themselves within --ps-exit-secs, the others were
 * killed).
 * Exit status: 0, 1 on any failure (message on stderr), 2 on usage errors.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc.h"
#include "cluster.h"
#include "common.h"
#include "err.h"
#include "job.h"
#include "log.h"
#include "optim.h"
#include "ps_client.h"
#include "rpc_common.h"
#include "tensor.h"

#define MAX_WORKERS 16
#define GRAD_VALUE (1.0f / 1024.0f) /* a power of two: sums stay exact */
#define LEARNING_RATE (1.0 / 64.0)
#define VAR_NAME "bench/weight"
#define PS_READY_SECS 20.0 /* for a started ps to answer Status */

typedef struct {
    const char *cluster_path;
    int64_t floats;              /* N */
    int rounds;                  /* R per worker */
    int workers;                 /* W */
    int timeout_ms;              /* each RPC's deadline */
    int64_t partition_min_bytes; /* 0: never split */
    int placement;               /* dt_placement */
    const char *dtrain_bin;      /* start the ps tasks with it; NULL: they run */
    const char *ps_log_dir;      /* started ps i logs to <dir>/ps<i>.log */
    double ps_exit_secs;         /* wait for a started ps to exit after the job */
    const char *tls_dir;         /* make_certs.sh output: mutual TLS; NULL: plaintext */
    int fuse;                    /* 1: a round is one push that brings the values back */
    int copy_threads;            /* a worker's pull_copy_threads */
} options;

/* One identity's certificate files under --tls-dir, and the security
 * settings that borrow them. */
typedef struct {
    char cert[DT_PATH_MAX + 32];
    char key[DT_PATH_MAX + 32];
    char ca[DT_PATH_MAX + 32];
    dt_rpc_security sec;
} tls_files;

static const char usage[] =
    "usage: bench_pullpush --cluster FILE --floats N --rounds R [--workers W]\n"
    "         [--timeout-secs S] [--partition-min-bytes B]\n"
    "         [--placement greedy|round_robin]\n"
    "         [--dtrain BIN [--ps-log-dir DIR] [--ps-exit-secs S]] [--tls-dir DIR]\n"
    "         [--fuse 0|1] [--copy-threads T]\n"
    "  Runs W worker processes (default 2) doing R rounds of pull+push of one\n"
    "  variable of N float32 against the ps tasks of FILE: running ones, or\n"
    "  with --dtrain, one `BIN --job ps` per task started here (logs in DIR,\n"
    "  else on stderr; after the job each gets S seconds, default 15, to exit\n"
    "  by itself before it is killed). B > 0 splits the variable across the ps\n"
    "  tasks as a job's partition_min_bytes does (default 0: never split).\n"
    "  --tls-dir: mutual TLS with scripts/make_certs.sh's files in DIR.\n"
    "  --fuse 1: each round is one push whose reply carries the next values\n"
    "  (fuse_push_pull); 0 (default): a pull, then a push.\n"
    "  --copy-threads T: each worker copies the pulled variable on T threads\n"
    "  (the job field pull_copy_threads; default 1).\n";

static int parse_args(int argc, char **argv, options *o) {
    o->workers = 2;
    o->timeout_ms = 120 * 1000;
    o->ps_exit_secs = 15;
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
        if (strcmp(a, "--dtrain") == 0) {
            o->dtrain_bin = v;
            continue;
        }
        if (strcmp(a, "--ps-log-dir") == 0) {
            o->ps_log_dir = v;
            continue;
        }
        if (strcmp(a, "--tls-dir") == 0 && strlen(v) < DT_PATH_MAX) {
            o->tls_dir = v;
            continue;
        }
        if (strcmp(a, "--placement") == 0 && dt_placement_from_name(v) >= 0)
            o->placement = dt_placement_from_name(v);
        else if (strcmp(a, "--partition-min-bytes") == 0 &&
                 dt_bench_parse_int(v, 0, (int64_t)1 << 40, &n) == 0)
            o->partition_min_bytes = n;
        else if (strcmp(a, "--ps-exit-secs") == 0 && dt_bench_parse_int(v, 0, 3600, &n) == 0)
            o->ps_exit_secs = (double)n;
        else if (strcmp(a, "--floats") == 0 && dt_bench_parse_int(v, 1, (int64_t)1 << 30, &n) == 0)
            o->floats = n;
        else if (strcmp(a, "--rounds") == 0 && dt_bench_parse_int(v, 1, 1000000, &n) == 0)
            o->rounds = (int)n;
        else if (strcmp(a, "--workers") == 0 && dt_bench_parse_int(v, 1, MAX_WORKERS, &n) == 0)
            o->workers = (int)n;
        else if (strcmp(a, "--timeout-secs") == 0 && dt_bench_parse_int(v, 1, 3600, &n) == 0)
            o->timeout_ms = (int)n * 1000;
        else if (strcmp(a, "--fuse") == 0 && dt_bench_parse_int(v, 0, 1, &n) == 0)
            o->fuse = (int)n;
        else if (strcmp(a, "--copy-threads") == 0 && dt_bench_parse_int(v, 1, 4, &n) == 0)
            o->copy_threads = (int)n;
        else {
            fprintf(stderr, "bench_pullpush: bad flag or value: %s %s\n%s", a, v, usage);
            return -1;
        }
    }
    if (!o->cluster_path || o->floats == 0 || o->rounds == 0) {
        fprintf(stderr, "bench_pullpush: --cluster, --floats and --rounds are required\n%s", usage);
        return -1;
    }
    if (o->ps_log_dir && !o->dtrain_bin) {
        fprintf(stderr, "bench_pullpush: --ps-log-dir needs --dtrain\n%s", usage);
        return -1;
    }
    return 0;
}

/* The files of identity `name` ("chief", "worker-1", "ps-0": make_certs.sh
 * writes ':' as '-') under --tls-dir into tf. NULL without --tls-dir, else
 * &tf->sec. parse_args bounds the dir, so the paths always fit. */
static const dt_rpc_security *tls_for(const options *o, const char *name, tls_files *tf) {
    memset(tf, 0, sizeof *tf);
    if (!o->tls_dir) return NULL;
    snprintf(tf->cert, sizeof tf->cert, "%s/%s.pem", o->tls_dir, name);
    snprintf(tf->key, sizeof tf->key, "%s/%s-key.pem", o->tls_dir, name);
    snprintf(tf->ca, sizeof tf->ca, "%s/ca.pem", o->tls_dir);
    tf->sec.cert_file = tf->cert;
    tf->sec.key_file = tf->key;
    tf->sec.ca_file = tf->ca;
    return &tf->sec;
}

/* Client parameters: the same placement and partitioning in every process,
 * so all agree on which ps task holds which slice. With --tls-dir a client
 * presents its worker's certificate, and the parent's (worker -1) speaks as
 * the chief, worker 0: only the chief may create and shut down, and an
 * authenticated chief may call only as its own task. tf holds the files
 * for as long as the parameters are used. */
static dt_ps_client_params client_params(const options *o, const dt_cluster *cluster, int worker,
                                         tls_files *tf) {
    dt_ps_client_params cp;
    memset(&cp, 0, sizeof cp);
    if (o->tls_dir && worker < 0) worker = 0;
    char name[32];
    if (worker == 0)
        snprintf(name, sizeof name, "chief");
    else
        snprintf(name, sizeof name, "worker-%d", worker);
    cp.security = tls_for(o, name, tf);
    cp.copy_threads = o->copy_threads;
    cp.cluster = cluster;
    cp.worker = worker;
    cp.timeout_ms = o->timeout_ms;
    cp.placement.kind = (dt_placement)o->placement;
    cp.placement.partition_min_bytes = o->partition_min_bytes;
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

/* What every worker process gets, from the parent's memory at the fork. */
typedef struct {
    const options *o;
    const dt_cluster *cluster;
} worker_args;

/* A worker's life after 'C' (a dt_bench_client_fn): connect, warm up, pass
 * the start line, loop; fills res. */
static void worker_run(const void *arg, int index, dt_bench_start_fn start, void *start_ctx,
                       dt_bench_result *res) {
    const worker_args *wa = arg;
    const options *o = wa->o;
    dt_log_set_role('W');
    dt_err err;
    dt_err_clear(&err);
    dt_tensors vars, grads;
    memset(&vars, 0, sizeof vars);
    memset(&grads, 0, sizeof grads);
    dt_ps_client *client = NULL;
    int rc = init_layout(&vars, o->floats, &err);
    if (rc == 0) rc = init_layout(&grads, o->floats, &err);
    /* As a worker does with its model. */
    if (rc == 0) dt_alloc_keep_for_messages(vars.slab_bytes);
    if (rc == 0) {
        float *g = grads.items[0].data;
        for (int64_t i = 0; i < o->floats; i++)
            g[i] = GRAD_VALUE;
        tls_files tf;
        dt_ps_client_params cp = client_params(o, wa->cluster, index, &tf);
        rc = dt_ps_client_new(&cp, &vars, &client, &err);
    }
    dt_ps_reply reply;
    memset(&reply, 0, sizeof reply);
    /* One pull before the clock starts: connects the channel and touches
     * every page of the receive side. */
    if (rc == 0) rc = dt_ps_client_pull(client, &vars, NULL, 0, &reply, &err);
    if (start(start_ctx, rc == 0) && rc == 0) {
        double t0 = dt_bench_now_secs();
        int have = o->fuse; /* fused: the warm-up pull brought the first values */
        for (int r = 0; r < o->rounds && rc == 0; r++) {
            if (!have) rc = dt_ps_client_pull(client, &vars, NULL, 0, &reply, &err);
            if (rc == 0 && reply.wait)
                rc = dt_err_set(&err, DT_EPRECOND, "the ps says wait (not an async job?)");
            if (rc == 0 && o->fuse)
                rc = dt_ps_client_push_pull(client, &grads, reply.global_step, &vars, 0, &reply,
                                            &err);
            else if (rc == 0)
                rc = dt_ps_client_push(client, &grads, reply.global_step, &reply, &err);
            if (rc == 0 && (reply.done || reply.dropped))
                rc = dt_err_set(&err, DT_EPRECOND, "the ps %s at global_step %lld",
                                reply.done ? "says the job is done" : "dropped a gradient",
                                (long long)reply.global_step);
            have = o->fuse && reply.pulled; /* else the next round pulls */
            if (rc == 0) res->rounds++;
        }
        res->seconds = dt_bench_now_secs() - t0;
    }
    res->rc = rc;
    snprintf(res->msg, sizeof res->msg, "%s", err.msg);
    dt_ps_client_free(client);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&grads);
}

/* ---- ps tasks started here ------------------------------------------------ */

/* Starts `bin --cluster FILE --job ps --task i` for every ps task of the
 * cluster; pids[i] is its pid. Called before this process touches gRPC. A
 * child gets SIGKILL when the parent dies, so a killed bench leaves no ps
 * behind. */
static int spawn_ps(const options *o, int num_ps, pid_t *pids, dt_err *err) {
    fflush(NULL);
    pid_t parent = getpid();
    for (int i = 0; i < num_ps; i++) {
        char task[16];
        snprintf(task, sizeof task, "%d", i);
        int log_fd = -1;
        if (o->ps_log_dir) {
            char path[DT_PATH_MAX + 32];
            int len = snprintf(path, sizeof path, "%s/ps%d.log", o->ps_log_dir, i);
            if (len < 0 || (size_t)len >= sizeof path)
                return dt_err_set(err, DT_EINVAL, "--ps-log-dir: path too long");
            log_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (log_fd < 0)
                return dt_err_set(err, DT_EIO, "%s: cannot open: %s", path, strerror(errno));
        }
        pid_t pid = fork();
        if (pid < 0) {
            int e = errno;
            if (log_fd >= 0) close(log_fd);
            return dt_err_set(err, DT_EINTERNAL, "ps %d: fork: %s", i, strerror(e));
        }
        if (pid == 0) {
            /* getppid() catches a parent that died before prctl took hold. */
            if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
            signal(SIGPIPE, SIG_DFL); /* ignored here; a ps starts as any program does */
            if (log_fd >= 0 && (dup2(log_fd, STDOUT_FILENO) < 0 || dup2(log_fd, STDERR_FILENO) < 0))
                _exit(127);
            char ps_name[32];
            snprintf(ps_name, sizeof ps_name, "ps-%d", i);
            tls_files tf;
            tls_for(o, ps_name, &tf);
            /* A ps sizes its cap from its job's model, and this one has no
             * job of the bench's variable: give it room for the variable. */
            char cap_mb[32];
            snprintf(cap_mb, sizeof cap_mb, "%lld", (long long)((o->floats * 4 >> 20) + 2));
            char *args[] = {(char *)o->dtrain_bin,
                            "--cluster",
                            (char *)o->cluster_path,
                            "--job",
                            "ps",
                            "--task",
                            task,
                            "--max-message-mb",
                            cap_mb,
                            o->tls_dir ? "--tls-cert" : NULL,
                            tf.cert,
                            "--tls-key",
                            tf.key,
                            "--tls-ca",
                            tf.ca,
                            NULL};
            execv(o->dtrain_bin, args);
            fprintf(stderr, "bench_pullpush: ps %d: cannot run %s: %s\n", i, o->dtrain_bin,
                    strerror(errno));
            _exit(127);
        }
        if (log_fd >= 0) close(log_fd);
        pids[i] = pid;
    }
    return 0;
}

/* "exit status 1", "signal 9" */
static void describe_status(int status, char *buf, size_t cap) {
    if (WIFEXITED(status))
        snprintf(buf, cap, "exit status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, cap, "signal %d", WTERMSIG(status));
    else
        snprintf(buf, cap, "wait status %d", status);
}

/* 0 when a TCP connection to addr succeeds. The probe is closed at once; the
 * ps sees a connection that never speaks and drops it. */
static int tcp_probe(const dt_addr *addr) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    char port[16];
    snprintf(port, sizeof port, "%d", addr->port);
    if (getaddrinfo(addr->host, port, &hints, &res) != 0) return -1;
    int ok = -1;
    for (struct addrinfo *a = res; a && ok < 0; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) ok = 0;
        close(fd);
    }
    freeaddrinfo(res);
    return ok;
}

/* "ps:1 127.0.0.1:1681: exited (exit status 1) before serving", when it has. */
static int check_alive(const dt_cluster *cluster, pid_t *pids, int p, dt_err *err) {
    int status = 0;
    if (pids[p] <= 0 || !dt_bench_has_exited(pids[p], &status)) return 0;
    char how[64];
    describe_status(status, how, sizeof how);
    pids[p] = -1;
    return dt_err_set(err, DT_EUNAVAILABLE, "ps:%d %s: exited (%s) before serving", p,
                      cluster->ps[p].addr, how);
}

/* Waits up to PS_READY_SECS for every started ps to accept connections, so
 * the first RPC does not meet a refused port and gRPC's reconnect backoff;
 * then asks each for its Status with a short deadline, so a port held by
 * something else (our ps then exits: address in use) fails in seconds, not
 * after a whole RPC deadline. */
static int wait_ps_ready(const options *o, const dt_cluster *cluster, pid_t *pids, dt_err *err) {
    double deadline = dt_bench_now_secs() + PS_READY_SECS;
    int rc = 0;
    for (int p = 0; p < cluster->num_ps; p++) {
        while (tcp_probe(&cluster->ps[p]) < 0) {
            if ((rc = check_alive(cluster, pids, p, err)) < 0) return rc;
            if (dt_bench_now_secs() >= deadline)
                return dt_err_set(err, DT_EDEADLINE, "ps:%d %s: not listening after %.0f s", p,
                                  cluster->ps[p].addr, PS_READY_SECS);
            dt_bench_sleep_ms(20);
        }
    }
    options quick = *o;
    quick.timeout_ms = 5000;
    tls_files tf;
    dt_ps_client_params cp = client_params(&quick, cluster, -1, &tf);
    dt_tensors none;
    memset(&none, 0, sizeof none);
    dt_ps_client *probe = NULL;
    if ((rc = dt_ps_client_new(&cp, &none, &probe, err)) < 0) return rc;
    for (int p = 0; p < cluster->num_ps && rc == 0; p++) {
        dt_msg_status_resp st;
        dt_err status_err;
        dt_err_clear(&status_err);
        if (dt_ps_client_status(probe, p, &st, &status_err) == 0) continue;
        rc = check_alive(cluster, pids, p, err);
        if (rc == 0) rc = dt_err_set(err, status_err.code, "%s", status_err.msg);
    }
    dt_ps_client_free(probe);
    return rc;
}

/* After the job: waits up to `secs` in all for every started ps to exit by
 * itself, which must be with status 0; *clean counts those that did. One
 * still running after that is left for stop_ps. */
static int reap_ps(const dt_cluster *cluster, pid_t *pids, double secs, int *clean, dt_err *err) {
    double deadline = dt_bench_now_secs() + secs;
    *clean = 0;
    for (int p = 0; p < cluster->num_ps; p++) {
        int status = 0, exited = 0;
        while (pids[p] > 0 && !(exited = dt_bench_has_exited(pids[p], &status)) &&
               dt_bench_now_secs() < deadline) {
            dt_bench_sleep_ms(10);
        }
        if (!exited) continue;
        pids[p] = -1;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            char how[64];
            describe_status(status, how, sizeof how);
            return dt_err_set(err, DT_EINTERNAL, "ps:%d %s: %s after the job", p,
                              cluster->ps[p].addr, how);
        }
        (*clean)++;
    }
    return 0;
}

/* Stops every started ps still running: SIGTERM, up to grace_secs, then
 * SIGKILL. */
static void stop_ps(pid_t *pids, int n, double grace_secs) {
    for (int p = 0; p < n; p++)
        if (pids[p] > 0) kill(pids[p], SIGTERM);
    double deadline = dt_bench_now_secs() + grace_secs;
    for (int p = 0; p < n; p++) {
        if (pids[p] > 0) dt_bench_reap_by(pids[p], deadline);
        pids[p] = -1;
    }
}

/* ---- the check ------------------------------------------------------------- */

/* After the loop: global step, and the value at both ends of every slice
 * (each slice lives on its own ps and is updated on its own); then Shutdown,
 * and one Status per ps and worker index so every ps knows every worker has
 * been told. */
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
    for (int u = 0; u < dt_ps_client_num_units(client); u++) {
        dt_ps_unit unit;
        dt_ps_client_unit(client, u, &unit);
        int64_t ends[2] = {unit.row_begin, unit.row_begin + unit.rows - 1};
        for (int k = 0; k < 2; k++)
            if (fabs(w[ends[k]] - want) > 1e-6 * fabs(want))
                return dt_err_set(err, DT_EINTERNAL,
                                  "check: %s on ps:%d: weight[%lld] %.9g, "
                                  "want %.9g",
                                  unit.name, unit.ps, (long long)ends[k], (double)w[ends[k]], want);
    }
    if ((rc = dt_ps_client_shutdown(client, "bench done", err)) < 0) return rc;
    dt_tensors none;
    memset(&none, 0, sizeof none);
    for (int i = 0; i < cluster->num_workers && rc == 0; i++) {
        dt_ps_client *told = NULL;
        tls_files tf;
        dt_ps_client_params cp = client_params(o, cluster, i, &tf);
        rc = dt_ps_client_new(&cp, &none, &told, err);
        dt_msg_status_resp st;
        for (int p = 0; p < cluster->num_ps && rc == 0; p++)
            rc = dt_ps_client_status(told, p, &st, err);
        dt_ps_client_free(told);
    }
    return rc;
}

/* Where the slices went, on stderr, for the record. */
static void print_placement(dt_ps_client *client) {
    for (int u = 0; u < dt_ps_client_num_units(client); u++) {
        dt_ps_unit unit;
        dt_ps_client_unit(client, u, &unit);
        fprintf(stderr, "bench_pullpush: %s rows %lld..%lld -> ps:%d (%zu bytes)\n", unit.name,
                (long long)unit.row_begin, (long long)(unit.row_begin + unit.rows - 1), unit.ps,
                unit.nbytes);
    }
}

int main(int argc, char **argv) {
    dt_bench_allocate_as_dtrain();
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
    if (cluster.num_ps > DT_MAX_PS || cluster.num_workers < o.workers) {
        fprintf(stderr,
                "bench_pullpush: %s: need at most %d ps and at least %d workers (has %d "
                "and %d)\n",
                o.cluster_path, DT_MAX_PS, o.workers, cluster.num_ps, cluster.num_workers);
        dt_cluster_deinit(&cluster);
        return 2;
    }

    dt_bench_child kids[MAX_WORKERS];
    for (int i = 0; i < MAX_WORKERS; i++)
        kids[i] = DT_BENCH_NO_CHILD;
    pid_t ps_pids[DT_MAX_PS];
    for (int p = 0; p < DT_MAX_PS; p++)
        ps_pids[p] = -1;
    dt_tensors vars;
    memset(&vars, 0, sizeof vars);
    dt_ps_client *client = NULL;
    dt_bench_result res[MAX_WORKERS];
    memset(res, 0, sizeof res);
    int rc = 0;
    double seconds = 0;

    if (o.dtrain_bin && (rc = spawn_ps(&o, cluster.num_ps, ps_pids, &err)) < 0) goto fail;
    worker_args wa = {&o, &cluster};
    if (dt_bench_spawn_children(o.workers, worker_run, &wa, kids) < 0) {
        rc = dt_err_set(&err, DT_EINTERNAL, "cannot start worker processes: %s", strerror(errno));
        goto fail;
    }
    /* gRPC starts only now, in the parent, after every fork, and this
     * process keeps a reference until it exits (see child_main in
     * common.c: the final grpc_shutdown can take 10 s). */
    dt_rpc_init();
    if ((rc = init_layout(&vars, o.floats, &err)) < 0) goto fail;
    tls_files tf;
    dt_ps_client_params cp = client_params(&o, &cluster, -1, &tf);
    if ((rc = dt_ps_client_new(&cp, &vars, &client, &err)) < 0) goto fail;
    print_placement(client);
    if (o.dtrain_bin && (rc = wait_ps_ready(&o, &cluster, ps_pids, &err)) < 0) goto fail;
    dt_optim_config optim;
    dt_optim_defaults(&optim);
    optim.kind = DT_OPTIM_SGD;
    optim.learning_rate = LEARNING_RATE;
    dt_ps_model model;
    memset(&model, 0, sizeof model); /* constant schedule, async, no slots */
    model.vars = &vars;
    model.global_step = 0;
    model.max_steps = INT64_MAX / 2;
    model.optim = optim;
    model.model = "bench pullpush";
    if ((rc = dt_ps_client_create(client, &model, NULL, &err)) < 0) goto fail;

    if ((rc = dt_bench_children_run(kids, o.workers, "worker", res, &seconds, &err)) < 0) goto fail;
    dt_bench_stop_children(kids, o.workers);
    if ((rc = check_and_stop(&o, &cluster, client, &vars, &err)) < 0) goto fail;
    int units = dt_ps_client_num_units(client);
    /* A channel still open to a ps delays its exit by seconds. */
    dt_ps_client_free(client);
    client = NULL;
    int ps_exited = 0;
    if (o.dtrain_bin && (rc = reap_ps(&cluster, ps_pids, o.ps_exit_secs, &ps_exited, &err)) < 0)
        goto fail;
    /* Those still running have told us the job is done: nothing to lose. */
    stop_ps(ps_pids, cluster.num_ps, 0);

    printf("pullpush floats=%lld rounds=%d workers=%d ps=%d units=%d tls=%d fuse=%d",
           (long long)o.floats, o.rounds, o.workers, cluster.num_ps, units, o.tls_dir ? 1 : 0,
           o.fuse);
    dt_bench_print_rates((double)o.workers * o.rounds, o.floats, seconds);
    if (o.dtrain_bin) printf(" ps_exited=%d", ps_exited);
    printf("\n");
    for (int i = 0; i < o.workers; i++)
        fprintf(stderr, "bench_pullpush: worker %d: %d rounds in %.3f s\n", i, o.rounds,
                res[i].seconds);
fail:
    if (rc < 0) fprintf(stderr, "bench_pullpush: %s\n", err.msg);
    dt_bench_stop_children(kids, o.workers);
    dt_ps_client_free(client);
    stop_ps(ps_pids, cluster.num_ps, 3.0);
    dt_tensors_deinit(&vars);
    dt_cluster_deinit(&cluster);
    return rc < 0 ? 1 : 0;
}
