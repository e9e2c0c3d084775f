/*
 * proc: what the integration tests need to run real dtrain processes on
 * loopback: free ports, temporary dirs, cluster files, spawning with the
 * output in a log file, bounded waits, and a registry so every process a
 * test started is stopped when the test ends, pass or fail.
 *
 * Not thread-safe: a test drives its processes from one thread. Each Check
 * test runs in its own forked process, so the registry is per test.
 */
#ifndef DT_TEST_PROC_H
#define DT_TEST_PROC_H

#include <stddef.h>
#include <sys/types.h>

/* dt_test_wait's result when the process outlived the timeout (it is then
 * killed with SIGKILL and reaped). */
#define DT_TEST_TIMEOUT (-1000)

/* Path of the binary under test, made absolute: $DTRAIN_BIN, else
 * "build/dtrain". Borrowed. */
const char *dt_test_bin(void);

/* A TCP socket bound to 127.0.0.1 on a port the kernel chose (*port), left
 * open (not listening); the fd, or -1. */
int dt_test_bind_port(int *port);
/* A TCP port on 127.0.0.1 that was free a moment ago, or -1. */
int dt_test_free_port(void);
/* As dt_test_free_port, written as "127.0.0.1:PORT" into addr (cap bytes);
 * the port, or -1. */
int dt_test_free_addr(char *addr, size_t cap);
/* A socket listening on 127.0.0.1, on a port the kernel chose (*port), to
 * hold a port taken; the fd, or -1. */
int dt_test_listen_port(int *port);
/* n distinct free ports (all held open while choosing), 0 or -1. */
int dt_test_free_ports(int *ports, int n);

/* The suite's temp dir, for an unchecked fixture (it runs in the runner's
 * process, which outlives every test): begin makes it, end removes it and
 * all that tests left there. Both keep the files when DT_KEEP_TMP is set
 * (non-empty, not "0"), to read the tests' logs. 0 or -1. */
int dt_test_tmp_begin(void);
void dt_test_tmp_end(void);
/* dt_test_tmp_begin as an unchecked fixture (Check's void signature): on
 * failure it says so on stderr, and the suite's dirs go to $TMPDIR. */
void dt_test_tmp_fixture(void);

/* Creates a fresh directory in the suite's temp dir (or in $TMPDIR, /tmp
 * without one). Returns a heap path the caller frees, or NULL. */
char *dt_test_tempdir(void);
/* Removes a dir from dt_test_tempdir (unless DT_KEEP_TMP is set) and frees
 * path. NULL is a no-op. */
void dt_test_tempdir_free(char *path);
/* Removes path and everything under it (no symlinks followed). 0 or -1. */
int dt_test_rmtree(const char *path);

/* Writes {"cluster": {"ps": [...], "worker": [...]}} to path with
 * "127.0.0.1:<port>" addresses on free ports. ports_out (may be NULL) gets
 * num_ps + num_workers ports: ps first, then workers. 0 or -1. */
int dt_test_write_cluster(const char *path, int num_ps, int num_workers, int *ports_out);
/* Writes text to path (truncating). 0 or -1. */
int dt_test_write_file(const char *path, const char *text);

/* Reads a whole file into a NUL-terminated heap string (caller frees); *len
 * (may be NULL) gets its length. NULL when it cannot be read. */
char *dt_test_read_file(const char *path, size_t *len);

/* Starts argv[0] with argv (NULL-terminated) in its own process group,
 * stdin from /dev/null, stdout and stderr appended to log_path, its cwd the
 * dir log_path is in (the test's temp dir: a role resolves nothing against
 * the checkout; relative paths in argv are so relative to that dir, and a
 * log_path without a dir is refused). The process
 * is registered for dt_test_kill_all and dies with the test process. Returns
 * the pid, or -1. */
pid_t dt_test_spawn(char *const argv[], const char *log_path);
/* Same, with stdout to out_path and stderr to err_path (may be equal). */
pid_t dt_test_spawn_split(char *const argv[], const char *out_path, const char *err_path);
/* The working directory of the processes spawned from now on (copied; NULL:
 * the test's own). The child exits 127 when it cannot enter it. */
void dt_test_spawn_cwd(const char *dir);

/* Waits up to timeout_ms for pid to exit. Returns its exit status (0..255),
 * -N when signal N killed it, or DT_TEST_TIMEOUT after killing it. */
int dt_test_wait(pid_t pid, int timeout_ms);
/* 1 while pid runs, 0 once it has exited (then dt_test_wait returns its
 * status at once). */
int dt_test_alive(pid_t pid);
/* Sends sig to pid's process group. 0 or -1. */
int dt_test_kill(pid_t pid, int sig);
/* SIGKILLs and reaps every registered process still running. */
void dt_test_kill_all(void);

/* Polls log_path until it contains needle: 1 when found, 0 after
 * timeout_ms, or as soon as pid (when > 0) has exited without writing it. */
int dt_test_wait_log(const char *log_path, const char *needle, int timeout_ms, pid_t pid);

/* Waits up to timeout_ms until pid has taken signal sig sent to it with
 * kill(pid): it is no longer pending for the process (Linux: ShdPnd in
 * /proc/<pid>/status), i.e. its handler or signal thread has it. 1 once
 * taken (or pid is gone), 0 after the deadline. */
int dt_test_wait_signal_taken(pid_t pid, int sig, int timeout_ms);

/* Waits up to timeout_ms until pid is stopped (SIGSTOP: state T in
 * /proc/<pid>/stat), so that a test holding a role knows it holds it. 1
 * once stopped, 0 when it is gone or the deadline passed first. */
int dt_test_wait_stopped(pid_t pid, int timeout_ms);

/* Bytes received and not yet read on the established TCP connections
 * whose local port is `port` (Linux: /proc/net/tcp and tcp6), or -1 when
 * they cannot be read. A frozen server's unread requests show here. */
long dt_test_tcp_unread(int port);
/* Waits up to timeout_ms until dt_test_tcp_unread(port) > 0: a request
 * reached a server that does not read it. 1 then, else 0. */
int dt_test_wait_tcp_unread(int port, int timeout_ms);

/* 1 when one line of text contains every non-NULL needle (up to 4). */
int dt_test_line_has(const char *text, const char *n1, const char *n2, const char *n3,
                     const char *n4);

/* The last max_bytes of a file as a heap string, for failure messages;
 * never NULL (caller frees). */
char *dt_test_tail(const char *path, size_t max_bytes);

/* Prints the last lines of every *.log file in dir to stderr, for a failed
 * test, and returns a short text for its Check message, which refuses long
 * ones ("Message string too long"). The text is static; never NULL. */
const char *dt_test_report_logs(const char *dir);

/* Milliseconds on a monotonic clock, and a sleep. */
long long dt_test_now_ms(void);
void dt_test_sleep_ms(int ms);

#endif
