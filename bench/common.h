/*
 * Helpers shared by the bench programs: the clock, flag values, pipes,
 * forked client processes and the figure's rates. Not a library API: each
 * bench_* binary links bench/common.c beside libdtrain.a.
 */
#ifndef DT_BENCH_COMMON_H
#define DT_BENCH_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"
#include "job.h"

/* Seconds on the monotonic clock (for differences only). */
double dt_bench_now_secs(void);

/* Sleeps ms milliseconds (EINTR resumes the sleep). */
void dt_bench_sleep_ms(int ms);

/* Parses the whole of text as a base-10 integer in [lo, hi] into *out.
 * 0, or -1 (and *out untouched) for empty text, trailing characters,
 * overflow or a value out of range. */
int dt_bench_parse_int(const char *text, int64_t lo, int64_t hi, int64_t *out);

/* Large buffers kept on the heap (bench_rawgrpc: a fresh payload-sized
 * reply per call, reused rather than mapped each time). Call first thing in
 * main. */
void dt_bench_tune_allocator(void);
/* The allocator settings of cmd/dtrain.c, so a process standing in for a
 * worker allocates as one does. Call first thing in main. */
void dt_bench_allocate_as_dtrain(void);

/* 1 when pid has exited and is reaped (*status set; -1 when it cannot be
 * known), 0 while it runs. Never blocks. */
int dt_bench_has_exited(pid_t pid, int *status);

/* Waits for pid to exit until deadline (dt_bench_now_secs), then sends it
 * SIGKILL; either way it is reaped on return. */
void dt_bench_reap_by(pid_t pid, double deadline);

/* ---- forked clients ----------------------------------------------------------
 * A bench with client processes forks them before it touches gRPC (gRPC
 * does not survive a fork) and talks to them over two pipes each:
 *   parent -> child 'C' (the server side is up), child -> parent 'R'
 *   (warmed up) or 'F' (failed, its result follows), parent -> child 'S'
 *   (start the timed loop), child -> parent its dt_bench_result.
 * A child that reads EOF (parent gone) exits; it never outlives its pipes
 * by more than its RPC deadlines. */

/* What a client reports when it is done. */
typedef struct {
    int rc;         /* 0 or a dt_err_code */
    double seconds; /* its own timed loop */
    int64_t rounds; /* completed */
    char msg[DT_ERR_MSG_MAX];
} dt_bench_result;

/* The start line a client passes after its warm-up, ok 1 when the warm-up
 * worked: 1 when it is to run its timed loop, 0 when it is to give up. */
typedef int (*dt_bench_start_fn)(void *start_ctx, int ok);

/* A client's whole life once the server side is up: set up, warm up, call
 * start(start_ctx, ok) exactly once, run the loop only when it returned 1,
 * fill res. In a forked child it runs with the parent's memory as it was at
 * the fork. */
typedef void (*dt_bench_client_fn)(const void *arg, int index, dt_bench_start_fn start,
                                   void *start_ctx, dt_bench_result *res);

/* A forked client as its parent sees it; -1 fields when there is none. */
typedef struct {
    pid_t pid;
    int to_child;   /* write end */
    int from_child; /* read end */
} dt_bench_child;

#define DT_BENCH_NO_CHILD ((dt_bench_child){-1, -1, -1})

/* Forks n clients into kids[0..n-1]; child i waits for 'C', runs
 * run(arg, i, ...) and reports, then _exits (0, 1 when res.rc < 0, 3 when
 * the parent went away). Flushes stdio first so nothing is written twice.
 * 0, or -1 with errno set when a pipe or fork failed (the kids started so
 * far are in kids; dt_bench_stop_children ends them). */
int dt_bench_spawn_children(int n, dt_bench_client_fn run, const void *arg, dt_bench_child *kids);
/* The same, each child exec'ing this program again (argv[0..argc), plus
 * "--exec-child SPEC"), which hands SPEC to dt_bench_exec_child: a client
 * started as a separate program is, with shared libraries at addresses of
 * its own, where a forked one shares its parent's. */
int dt_bench_spawn_children_exec(int n, int argc, char *const *argv, dt_bench_child *kids);
/* In the exec'd child: runs client index of SPEC as a forked child would
 * (never returns); -1 when SPEC is not one dt_bench_spawn_children_exec
 * made. */
int dt_bench_exec_child(const char *spec, dt_bench_client_fn run, const void *arg);

/* The parent's side of the protocol above, for n clients called noun
 * ("worker", "client") in messages: 'C', every 'R', 'S', every result.
 * *seconds runs from just before the first 'S' to the last result. res[i]
 * gets client i's result. 0, or a negative code when a client failed
 * ("worker 1: warm-up: ...", "worker 1: round 7: ...") or died. */
int dt_bench_children_run(dt_bench_child *kids, int n, const char *noun, dt_bench_result *res,
                          double *seconds, dt_err *err);

/* 0 when res (client index's) succeeded, else its error as
 * "noun index: round R: msg". */
int dt_bench_result_check(const dt_bench_result *res, const char *noun, int index, dt_err *err);

/* Closes the pipes (a child waiting on one then exits), gives the children
 * up to 2 s to end by themselves, then kills and reaps what is left. Kids
 * with pid -1 are skipped; every kid is DT_BENCH_NO_CHILD afterwards. */
void dt_bench_stop_children(dt_bench_child *kids, int n);

/* ---- figures ----------------------------------------------------------------- */

/* Prints " seconds=S mb_per_s=X rounds_per_s=Y" (no newline) for `rounds`
 * rounds in all, each moving 2 * floats * 4 payload bytes (MB = 10^6). */
void dt_bench_print_rates(double rounds, int64_t floats, double seconds);

/* The generating model's mean log loss on rows FIRST..FIRST+n-1 of
 * `dtrain gen-criteo` for spec "SEED,FIRST,VOCAB_SCALE" (the best a model
 * trained on its rows can reach there) into *out. DT_EINVAL for a bad
 * spec. */
/* The job as dtrain loads it: the defaults, the config file, then each
 * "field=value" of sets, checked (dt_job_finish). Errors: the config's. */
int dt_bench_load_job(const char *config, const char *const *sets, int num_sets, dt_job *job,
                      dt_err *err);

int dt_bench_hidden_log_loss(const char *spec, int64_t n, double *out, dt_err *err);

#endif
