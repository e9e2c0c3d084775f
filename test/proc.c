/*
 * proc: process, port and temp-dir helpers for the integration tests.
 *
 * Every spawned process is recorded in a small registry with its reaped
 * status; dt_test_kill_all stops what is left, from the tests' teardown and
 * from atexit. A failing ck_assert ends the test's process at once, skipping
 * both, so on Linux each child also asks for SIGKILL when its parent dies
 * (which covers Check's timeout kill too), and temp dirs live under one
 * suite dir that the runner's process removes.
 * Children get their own process group so a kill reaches anything they fork.
 *
 * Single-threaded: one test process drives its children.
 */
#include "proc.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#define MAX_PROCS 64

typedef struct {
    pid_t pid;
    int reaped; /* 1 once waitpid returned it; status is then valid */
    int status; /* raw waitpid status */
} proc_entry;

static proc_entry procs[MAX_PROCS];
static int num_procs;
static int atexit_armed;

const char *dt_test_bin(void) {
    /* Absolute: the roles run in their test's temp dir (dt_test_spawn). */
    static char resolved[4096];
    const char *bin = getenv("DTRAIN_BIN");
    if (!bin || !*bin) bin = "build/dtrain";
    if (!resolved[0] && !realpath(bin, resolved)) return bin;
    return resolved;
}

long long dt_test_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void dt_test_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int dt_test_bind_port(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    socklen_t len = sizeof sa;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

int dt_test_free_port(void) {
    int port = -1;
    int fd = dt_test_bind_port(&port);
    if (fd < 0) return -1;
    close(fd);
    return port;
}

int dt_test_free_addr(char *addr, size_t cap) {
    int port = dt_test_free_port();
    if (port < 0) return -1;
    snprintf(addr, cap, "127.0.0.1:%d", port);
    return port;
}

int dt_test_listen_port(int *port) {
    int fd = dt_test_bind_port(port);
    if (fd >= 0 && listen(fd, 4) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int dt_test_free_ports(int *ports, int n) {
    int fds[MAX_PROCS];
    int rc = 0, opened = 0;
    if (n < 0 || n > MAX_PROCS) return -1;
    /* Holding every socket open until all are chosen keeps them distinct. */
    for (; opened < n; opened++) {
        fds[opened] = dt_test_bind_port(&ports[opened]);
        if (fds[opened] < 0) {
            rc = -1;
            break;
        }
    }
    for (int i = 0; i < opened; i++)
        close(fds[i]);
    return rc;
}

/* The suite's temp dir: every dt_test_tempdir is made inside it. Set in the
 * runner's process by dt_test_tmp_begin (an unchecked fixture), so forked
 * tests inherit it and dt_test_tmp_end removes whatever a failed test (whose
 * process ends at the failed assertion, skipping its teardown) left behind. */
static char base_dir[1024];

int dt_test_tmp_begin(void) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    snprintf(base_dir, sizeof base_dir, "%s/dtrain-test-XXXXXX", tmp);
    if (!mkdtemp(base_dir)) {
        base_dir[0] = '\0';
        return -1;
    }
    return 0;
}

void dt_test_tmp_fixture(void) {
    if (dt_test_tmp_begin() != 0) fprintf(stderr, "test: no suite temp dir; using $TMPDIR\n");
}

static int keep_tmp(void) {
    const char *keep = getenv("DT_KEEP_TMP");
    return keep && *keep && strcmp(keep, "0") != 0;
}

void dt_test_tmp_end(void) {
    if (!base_dir[0]) return;
    if (keep_tmp())
        fprintf(stderr, "test: kept %s\n", base_dir);
    else
        dt_test_rmtree(base_dir);
    base_dir[0] = '\0';
}

void dt_test_tempdir_free(char *path) {
    if (path && !keep_tmp()) dt_test_rmtree(path);
    free(path);
}

char *dt_test_tempdir(void) {
    const char *base = base_dir[0] ? base_dir : getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    size_t cap = strlen(base) + 32;
    char *path = malloc(cap);
    if (!path) return NULL;
    snprintf(path, cap, "%s/%s", base, base_dir[0] ? "test-XXXXXX" : "dtrain-test-XXXXXX");
    if (!mkdtemp(path)) {
        free(path);
        return NULL;
    }
    return path;
}

int dt_test_rmtree(const char *path) {
    struct stat st;
    if (!path) return 0;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) return unlink(path) == 0 ? 0 : -1;
    DIR *dir = opendir(path);
    if (!dir) return -1;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        size_t cap = strlen(path) + strlen(e->d_name) + 2;
        char *child = malloc(cap);
        if (!child) {
            rc = -1;
            break;
        }
        snprintf(child, cap, "%s/%s", path, e->d_name);
        if (dt_test_rmtree(child) != 0) rc = -1;
        free(child);
    }
    closedir(dir);
    if (rmdir(path) != 0) rc = -1;
    return rc;
}

int dt_test_write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n;
    if (fclose(f) != 0) ok = 0;
    return ok ? 0 : -1;
}

int dt_test_write_cluster(const char *path, int num_ps, int num_workers, int *ports_out) {
    int ports[MAX_PROCS];
    int n = num_ps + num_workers;
    if (num_ps < 0 || num_workers < 0 || n > MAX_PROCS) return -1;
    if (dt_test_free_ports(ports, n) != 0) return -1;
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\n  \"cluster\": {\n    \"ps\": [");
    for (int i = 0; i < num_ps; i++)
        fprintf(f, "%s\"127.0.0.1:%d\"", i ? ", " : "", ports[i]);
    fprintf(f, "],\n    \"worker\": [");
    for (int i = 0; i < num_workers; i++)
        fprintf(f, "%s\"127.0.0.1:%d\"", i ? ", " : "", ports[num_ps + i]);
    fprintf(f, "]\n  }\n}\n");
    int ok = !ferror(f);
    if (fclose(f) != 0) ok = 0;
    if (ok && ports_out) memcpy(ports_out, ports, (size_t)n * sizeof *ports);
    return ok ? 0 : -1;
}

char *dt_test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *grown = realloc(buf, cap * 2);
        if (!grown) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = grown;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

char *dt_test_tail(const char *path, size_t max_bytes) {
    size_t len = 0;
    char *text = dt_test_read_file(path, &len);
    if (!text) {
        const char *none = "(no log)";
        text = malloc(strlen(none) + 1);
        if (!text) abort(); /* out of memory in a test: nothing sane to report */
        strcpy(text, none);
        return text;
    }
    if (len > max_bytes) memmove(text, text + len - max_bytes, max_bytes + 1);
    return text;
}

const char *dt_test_report_logs(const char *dir) {
    fprintf(stderr, "test: the role logs in %s end:\n", dir);
    DIR *d = opendir(dir);
    if (!d) return " (no log dir)";
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 4, ".log") != 0) continue;
        size_t cap = strlen(dir) + n + 2;
        char *path = malloc(cap);
        if (!path) break;
        snprintf(path, cap, "%s/%s", dir, e->d_name);
        char *tail = dt_test_tail(path, 3000);
        fprintf(stderr, "== %s ==\n%s\n", e->d_name, tail);
        free(tail);
        free(path);
    }
    closedir(d);
    return " (printed on stderr)";
}

static proc_entry *find_proc(pid_t pid) {
    for (int i = 0; i < num_procs; i++)
        if (procs[i].pid == pid) return &procs[i];
    return NULL;
}

static void kill_all_at_exit(void) {
    dt_test_kill_all();
}

static void arm_atexit(void) {
    if (atexit_armed) return;
    if (atexit(kill_all_at_exit) == 0) atexit_armed = 1;
}

static char spawn_cwd[4096]; /* empty: the test's own */

void dt_test_spawn_cwd(const char *dir) {
    snprintf(spawn_cwd, sizeof spawn_cwd, "%s", dir ? dir : "");
}

pid_t dt_test_spawn(char *const argv[], const char *log_path) {
    return dt_test_spawn_split(argv, log_path, log_path);
}

pid_t dt_test_spawn_split(char *const argv[], const char *out_path, const char *err_path) {
    if (num_procs == MAX_PROCS) return -1;
    arm_atexit();
    if (!atexit_armed) return -1;
    int out_fd = open(out_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out_fd < 0) return -1;
    int err_fd = open(err_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (err_fd < 0) {
        close(out_fd);
        return -1;
    }
    /* The child's cwd: the dir its log is in, the test's temp dir, so that
     * nothing it resolves (a default log dir, a relative path) lands in or
     * reads from the checkout the tests run from. */
    char cwd[4096];
    snprintf(cwd, sizeof cwd, "%s", out_path);
    char *slash = strrchr(cwd, '/');
    if (!slash) {
        close(out_fd);
        close(err_fd);
        errno = EINVAL; /* a log in the runner's cwd: the checkout */
        return -1;
    }
    *(slash == cwd ? slash + 1 : slash) = '\0';
    fflush(NULL); /* no buffered test output duplicated into the child */
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(out_fd);
        close(err_fd);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
#ifdef __linux__
        /* Dies with the test even when Check SIGKILLs it on a timeout. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
#else
        (void)parent;
#endif
        int null_fd = open("/dev/null", O_RDONLY);
        if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
            _exit(127);
        const char *dir = spawn_cwd[0] ? spawn_cwd : cwd; /* a test's own choice wins */
        if (chdir(dir) != 0) {
            dprintf(2, "spawn: chdir %s: %s\n", dir, strerror(errno));
            _exit(127);
        }
        execv(argv[0], argv);
        dprintf(2, "spawn: exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    /* Also set here: whichever of parent and child runs first, the group
     * exists before anyone signals it. */
    setpgid(pid, pid);
    close(out_fd);
    close(err_fd);
    procs[num_procs++] = (proc_entry){.pid = pid, .reaped = 0, .status = 0};
    return pid;
}

static int decode_status(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return -WTERMSIG(status);
    return DT_TEST_TIMEOUT;
}

/* Reaps pid if it has exited. Returns 1 when reaped (now or before). */
static int try_reap(proc_entry *p) {
    if (p->reaped) return 1;
    int status = 0;
    pid_t r = waitpid(p->pid, &status, WNOHANG);
    if (r == p->pid || (r < 0 && errno == ECHILD)) {
        p->reaped = 1;
        p->status = r == p->pid ? status : 0;
        return 1;
    }
    return 0;
}

int dt_test_alive(pid_t pid) {
    proc_entry *p = find_proc(pid);
    if (!p) return 0;
    return !try_reap(p);
}

int dt_test_wait(pid_t pid, int timeout_ms) {
    proc_entry *p = find_proc(pid);
    if (!p) return DT_TEST_TIMEOUT;
    long long deadline = dt_test_now_ms() + timeout_ms;
    while (!try_reap(p)) {
        if (dt_test_now_ms() >= deadline) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            int status = 0;
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            p->reaped = 1;
            p->status = status;
            return DT_TEST_TIMEOUT;
        }
        dt_test_sleep_ms(20);
    }
    return decode_status(p->status);
}

int dt_test_kill(pid_t pid, int sig) {
    proc_entry *p = find_proc(pid);
    if (!p || p->reaped) return -1;
    /* The group, so a child's children go too; the pid alone only when the
     * group does not exist yet (the child has not called setpgid). Never
     * both: a second SIGTERM means "exit at once" to dtrain. */
    if (kill(-pid, sig) == 0) return 0;
    return kill(pid, sig) == 0 ? 0 : -1;
}

void dt_test_kill_all(void) {
    for (int i = 0; i < num_procs; i++) {
        proc_entry *p = &procs[i];
        if (try_reap(p)) continue;
        kill(-p->pid, SIGKILL);
        kill(p->pid, SIGKILL);
        int status = 0;
        while (waitpid(p->pid, &status, 0) < 0 && errno == EINTR) {
        }
        p->reaped = 1;
        p->status = status;
    }
    num_procs = 0;
}

int dt_test_wait_log(const char *log_path, const char *needle, int timeout_ms, pid_t pid) {
    long long deadline = dt_test_now_ms() + timeout_ms;
    for (;;) {
        /* Check liveness before reading, so a line written just before exit
         * is still seen. */
        int gone = pid > 0 && !dt_test_alive(pid);
        char *text = dt_test_read_file(log_path, NULL);
        int found = text && strstr(text, needle) != NULL;
        free(text);
        if (found) return 1;
        if (gone || dt_test_now_ms() >= deadline) return 0;
        dt_test_sleep_ms(50);
    }
}

/* The hex mask after `key` ("ShdPnd:") in /proc/<pid>/status; -1 when the
 * file or the line cannot be read. */
static int proc_status_mask(pid_t pid, const char *key, unsigned long long *mask) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int rc = -1;
    size_t n = strlen(key);
    while (rc < 0 && fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && sscanf(line + n, "%llx", mask) == 1) rc = 0;
    fclose(f);
    return rc;
}

int dt_test_wait_signal_taken(pid_t pid, int sig, int timeout_ms) {
    long long deadline = dt_test_now_ms() + timeout_ms;
    for (;;) {
        unsigned long long pending = 0;
        if (!dt_test_alive(pid) || proc_status_mask(pid, "ShdPnd:", &pending) < 0) return 1;
        if (!(pending & (1ull << (sig - 1)))) return 1;
        if (dt_test_now_ms() >= deadline) return 0;
        dt_test_sleep_ms(10); /* the poll interval of a bounded wait */
    }
}

/* The state letter of pid in /proc/<pid>/stat (after the name's ')'), or
 * 0 when it cannot be read. */
static char proc_state(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')');
    return close_paren && close_paren[1] == ' ' ? close_paren[2] : 0;
}

int dt_test_wait_stopped(pid_t pid, int timeout_ms) {
    long long deadline = dt_test_now_ms() + timeout_ms;
    for (;;) {
        if (!dt_test_alive(pid)) return 0;
        if (proc_state(pid) == 'T') return 1;
        if (dt_test_now_ms() >= deadline) return 0;
        dt_test_sleep_ms(5); /* the poll interval of a bounded wait */
    }
}

/* Adds the unread bytes of port's established connections listed in one
 * /proc/net file to *total; -1 when it cannot be read. */
static int tcp_unread_in(const char *path, int port, long *total) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[512];
    if (!fgets(line, sizeof line, f)) { /* the header */
        fclose(f);
        return -1;
    }
    while (fgets(line, sizeof line, f)) {
        /* "  sl  local_address rem_address   st tx_queue:rx_queue ..." with
         * addresses as HEXADDR:HEXPORT */
        char local[64], remote[64];
        unsigned state = 0;
        unsigned long tx = 0, rx = 0;
        if (sscanf(line, "%*s %63s %63s %x %lx:%lx", local, remote, &state, &tx, &rx) != 5)
            continue;
        const char *colon = strrchr(local, ':');
        if (state == 1 /* ESTABLISHED */ && colon && strtol(colon + 1, NULL, 16) == port)
            *total += (long)rx;
    }
    fclose(f);
    return 0;
}

long dt_test_tcp_unread(int port) {
    long total = 0;
    int v4 = tcp_unread_in("/proc/net/tcp", port, &total);
    int v6 = tcp_unread_in("/proc/net/tcp6", port, &total);
    return v4 < 0 && v6 < 0 ? -1 : total;
}

int dt_test_wait_tcp_unread(int port, int timeout_ms) {
    long long deadline = dt_test_now_ms() + timeout_ms;
    for (;;) {
        if (dt_test_tcp_unread(port) > 0) return 1;
        if (dt_test_now_ms() >= deadline) return 0;
        dt_test_sleep_ms(10); /* the poll interval of a bounded wait */
    }
}

int dt_test_line_has(const char *text, const char *n1, const char *n2, const char *n3,
                     const char *n4) {
    const char *needles[4] = {n1, n2, n3, n4};
    char line[4096];
    if (!text) return 0;
    for (const char *p = text; *p;) {
        const char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        size_t copy = n < sizeof line - 1 ? n : sizeof line - 1;
        memcpy(line, p, copy);
        line[copy] = '\0';
        int all = 1;
        for (int i = 0; i < 4; i++)
            if (needles[i] && !strstr(line, needles[i])) all = 0;
        if (all) return 1;
        p += n;
        if (*p == '\n') p++;
    }
    return 0;
}
