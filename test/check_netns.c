/*
 * Suite "netns": dtrain across hosts, not only over loopback. Every role
 * runs in a Linux network namespace of its own, with its own address, so
 * the roles reach each other only through links the test controls:
 *  - the demo (1 ps, the chief, worker 1) runs to its end: every role exits
 *    0, the last checkpoint is at max_steps and is the least-squares line;
 *  - worker 1's link goes down mid-job for longer than rpc_timeout_secs but
 *    shorter than ready_wait_secs: it says it waits, for which ps, resumes,
 *    and the job completes;
 *  - the same for the ps's link: the chief and worker 1 both wait and
 *    resume, the global step never goes back, the job completes;
 *  - worker 1 cut off for longer than ready_wait_secs exits 200
 *    (retryable: a peer stayed unreachable); the rest of the job ends with 0.
 *
 * The topology: one namespace holds only a bridge; each role's namespace
 * holds `lo` and one end of a veth pair ("eth0", 10.213.0.0/24), whose
 * other end ("to-<host>") is a port of the bridge. A partition is a bridge
 * port set down, as a cable pulled at the switch: the role's namespace is
 * not touched (its end loses the carrier, as a NIC's would). No address,
 * route or link is made in the namespace the test itself runs in, and no
 * route leads out of the test's namespaces, so the fixed subnet and port
 * (2222, each namespace has its own ports) cannot meet anything else,
 * even when runs overlap.
 *
 * A role alone runs the demo at over 10,000 steps/s, so nothing here
 * counts on a job lasting some time: in the partition tests the chief is
 * held (SIGSTOP) from the model's creation until worker 1 has trained, a
 * ps outage stops every worker, and worker 1's outage runs in bounded
 * mode, which keeps the chief within `staleness` steps of it.
 *
 * Names are dtnet-<pid>-<host>, pid being the test process's. Every test
 * deletes its links and namespaces in its teardown, and at exit, and then
 * lists the namespaces to check that none of its own are left. A failed
 * assertion skips both (Check ends the test's process at once), so the
 * runner's process also sweeps, before and after each test, every dtnet-
 * namespace whose pid is gone (its links go with it); a test first
 * removes any namespace that already bears its own pid.
 *
 * Without root, `ip`, or kernel support for namespaces, bridges or veth
 * pairs, each test says on one line that it is skipped and why, and
 * passes. Every wait is bounded; the only sleep is an outage's length.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc.h"
#include "suites.h"
#include "testjob.h"

#define JOB_TIMEOUT_MS 90000  /* one short job, 2 cores, maybe under ASan */
#define EXIT_TIMEOUT_MS 30000 /* a role that gives up or ends */
#define IP_TIMEOUT_MS 10000   /* one `ip` command */
#define TEST_TIMEOUT_S 180
/* How long a link stays down in the tests that heal it: past
 * RPC_TIMEOUT_S, so a call in flight fails on its deadline, and well
 * inside HEAL_READY_WAIT_S, so nobody gives up. */
#define OUTAGE_MS 3000
#define RPC_TIMEOUT_S "1"
#define HEAL_READY_WAIT_S "20"
#define SHORT_READY_WAIT_S "4"

#define NS_PREFIX "dtnet-"
#define SUBNET "10.213.0"
#define PORT 2222
#define MAX_HOSTS 4
#define MAX_VALUES 4096 /* numbers read back from one log */

/* As in the e2e suite: checkpoints every second, a data set whose two
 * shards agree closely, and a rate that keeps SGD's jitter small. */
#define QUICK_SETS                                                                                 \
    "save_model_secs=1", "log_steps=50", "summary_steps=50", "examples=1000", "learning_rate=0.01"

/* ---- running ip ------------------------------------------------------------ */

static char ip_bin[PATH_MAX]; /* "" until found */

/* Finds `ip` on $PATH or in the usual sbin dirs (root's PATH may lack
 * them). 1 when found. */
static int find_ip(void) {
    if (ip_bin[0]) return 1;
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s:/usr/sbin:/sbin:/usr/bin:/bin", path ? path : "");
    for (char *save = NULL, *dir = strtok_r(dirs, ":", &save); dir;
         dir = strtok_r(NULL, ":", &save)) {
        if (!*dir) continue;
        snprintf(ip_bin, sizeof ip_bin, "%s/ip", dir);
        if (access(ip_bin, X_OK) == 0) return 1;
    }
    ip_bin[0] = '\0';
    return 0;
}

/* Reads fd to EOF into out (cut at cap - 1 bytes) until deadline_ms.
 * 1 at EOF, 0 at the deadline. */
static int read_until_eof(int fd, char *out, size_t cap, long long deadline_ms) {
    size_t n = 0;
    for (;;) {
        long long left = deadline_ms - dt_test_now_ms();
        if (left <= 0) return 0;
        struct pollfd pfd = {fd, POLLIN, 0};
        int ready = poll(&pfd, 1, (int)left);
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) return 0;
        char buf[1024];
        ssize_t got = read(fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return 1;
        size_t keep = (size_t)got < cap - 1 - n ? (size_t)got : cap - 1 - n;
        memcpy(out + n, buf, keep);
        n += keep;
        out[n] = '\0';
    }
}

/* Runs `ip args...` (NULL-terminated) and returns its exit status (-1 when
 * it could not run or was killed at IP_TIMEOUT_MS); out (cap > 0) gets what
 * it printed on stdout and stderr. Not a registered process: it is short,
 * and the runner's process runs it too. */
static int run_ip(char *out, size_t cap, const char *const *args) {
    out[0] = '\0';
    char *argv[32];
    int argc = 0;
    argv[argc++] = ip_bin;
    for (; args[argc - 1] && argc < 31; argc++)
        argv[argc] = (char *)args[argc - 1];
    argv[argc] = NULL;
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(NULL); /* no buffered test output duplicated into the child */
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        int null_fd = open("/dev/null", O_RDONLY);
        if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[1], 2) < 0)
            _exit(127);
        close(fds[0]);
        execv(argv[0], argv);
        dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    int eof = read_until_eof(fds[0], out, cap, dt_test_now_ms() + IP_TIMEOUT_MS);
    close(fds[0]);
    if (!eof) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!eof || !WIFEXITED(status)) return -1;
    /* One line in messages: ip ends its errors with a newline. */
    size_t n = strlen(out);
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
        out[--n] = '\0';
    return WEXITSTATUS(status);
}

#define IP(out, ...) run_ip((out), sizeof(out), (const char *const[]){__VA_ARGS__, NULL})

/* ---- namespaces ------------------------------------------------------------ */

typedef struct {
    char name[16]; /* "ps0", "worker1": the role it runs */
    char ns[64];   /* dtnet-<pid>-<name> */
    char addr[32]; /* its address on the bridge's subnet */
    char port[16]; /* the bridge's end of its veth pair: "to-<name>" */
    int made;      /* 1 once its namespace exists */
    int linked;    /* 1 once its veth pair exists */
} net_host;

typedef struct {
    char bridge_ns[64]; /* dtnet-<pid>-bridge */
    int bridge_made;
    int br0_made; /* the bridge device in it */
    net_host hosts[MAX_HOSTS];
    int num_hosts;
} net_topo;

static net_topo net; /* the test's; the atexit handler removes it */
static int net_atexit_armed;

/* The pid in a name of this suite's scheme, or -1 for any other name. */
static long ns_owner(const char *name) {
    size_t np = strlen(NS_PREFIX);
    if (strncmp(name, NS_PREFIX, np) != 0) return -1;
    char *end = NULL;
    long pid = strtol(name + np, &end, 10);
    return end != name + np && *end == '-' && pid > 0 ? pid : -1;
}

static void ns_delete(const char *ns) {
    char out[512];
    if (IP(out, "netns", "del", ns) != 0) fprintf(stderr, "netns: cannot delete %s: %s\n", ns, out);
}

/* Calls fn on the first word of every line of `ip netns list`. 0, or -1
 * when ip failed. */
static int ns_each(void (*fn)(const char *ns, void *arg), void *arg) {
    static char out[65536];
    if (IP(out, "netns", "list") != 0) return -1;
    for (char *save = NULL, *line = strtok_r(out, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char name[256];
        if (sscanf(line, "%255s", name) == 1) fn(name, arg);
    }
    return 0;
}

static void sweep_one(const char *ns, void *arg) {
    (void)arg;
    long pid = ns_owner(ns);
    if (pid < 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) return;
    fprintf(stderr, "netns: removing %s, left by pid %ld\n", ns, pid);
    ns_delete(ns);
}

/* The runner's sweep (an unchecked fixture, so it runs even after a test
 * whose process a failed assertion or a timeout ended): namespaces of
 * this scheme whose test process is gone. */
static void sweep_stale(void) {
    if (geteuid() != 0 || !find_ip()) return;
    ns_each(sweep_one, NULL);
}

static void link_delete(const char *ns, const char *dev) {
    char out[512];
    if (IP(out, "-n", ns, "link", "del", dev) != 0)
        fprintf(stderr, "netns: cannot delete %s in %s: %s\n", dev, ns, out);
}

/* Removes what net_up made, links first (deleting one end of a veth pair
 * deletes both), although a namespace's links would go with it, so that
 * nothing depends on when the kernel gets round to a deleted namespace. */
static void net_down(net_topo *t) {
    for (int i = 0; i < t->num_hosts; i++)
        if (t->hosts[i].linked) link_delete(t->bridge_ns, t->hosts[i].port);
    if (t->br0_made) link_delete(t->bridge_ns, "br0");
    for (int i = 0; i < t->num_hosts; i++)
        if (t->hosts[i].made) ns_delete(t->hosts[i].ns);
    if (t->bridge_made) ns_delete(t->bridge_ns);
    memset(t, 0, sizeof *t);
}

static void net_down_at_exit(void) {
    net_down(&net);
}

static void count_mine(const char *ns, void *arg) {
    if (ns_owner(ns) == (long)getpid()) (*(int *)arg)++;
}

/* A namespace with this process's pid that it has not made yet was left
 * by an earlier process of that pid. */
static void delete_mine(const char *ns, void *arg) {
    (void)arg;
    if (ns_owner(ns) != (long)getpid()) return;
    fprintf(stderr, "netns: removing %s, left by an earlier process of this pid\n", ns);
    ns_delete(ns);
}

/* Asserts that ip can run `args` (for the steps that cannot fail once
 * namespaces, bridges and veth pairs work). */
static void ip_must(const char *const *args) {
    char out[1024];
    int status = run_ip(out, sizeof out, args);
    char cmd[512];
    size_t used = 0;
    cmd[0] = '\0';
    for (int i = 0; args[i] && used < sizeof cmd - 1; i++) {
        int k = snprintf(cmd + used, sizeof cmd - used, " %s", args[i]);
        used += k > 0 ? (size_t)k : 0;
    }
    ck_assert_msg(status == 0, "ip%s: status %d: %s", cmd, status, out);
}

#define IP_MUST(...) ip_must((const char *const[]){__VA_ARGS__, NULL})

/* Makes one host: its namespace with lo up, a veth pair from the bridge
 * (eth0 inside, addr/24 on it), the bridge's end a port that is up. NULL,
 * or why the kernel cannot, which only the first veth pair may tell. */
static const char *host_up(net_topo *t, net_host *h, int first, char *why, size_t cap) {
    char out[1024];
    IP_MUST("netns", "add", h->ns);
    h->made = 1;
    IP_MUST("-n", h->ns, "link", "set", "lo", "up");
    if (IP(out, "-n", t->bridge_ns, "link", "add", h->port, "type", "veth", "peer", "name", "eth0",
           "netns", h->ns) != 0) {
        ck_assert_msg(first, "ip link add %s type veth: %s", h->port, out);
        snprintf(why, cap, "no veth pairs: ip link add type veth: %s", out);
        return why;
    }
    h->linked = 1;
    char cidr[40];
    snprintf(cidr, sizeof cidr, "%s/24", h->addr);
    IP_MUST("-n", t->bridge_ns, "link", "set", h->port, "master", "br0");
    IP_MUST("-n", t->bridge_ns, "link", "set", h->port, "up");
    IP_MUST("-n", h->ns, "addr", "add", cidr, "dev", "eth0");
    IP_MUST("-n", h->ns, "link", "set", "eth0", "up");
    return NULL;
}

/* Builds the bridge and one namespace per name (NULL-terminated), host i
 * at SUBNET.(10 + i). NULL when built, else why it cannot be (then
 * nothing is left). Asserts on a failure that has no such excuse. */
static const char *net_up(net_topo *t, const char *const *names) {
    static char why[1200];
    char out[1024];
    memset(t, 0, sizeof *t);
    if (geteuid() != 0) return "not root: network namespaces need CAP_SYS_ADMIN";
    if (!find_ip()) return "no ip command (iproute2) on PATH or in /usr/sbin, /sbin";
    if (!net_atexit_armed && atexit(net_down_at_exit) == 0) net_atexit_armed = 1;
    ck_assert_msg(net_atexit_armed, "atexit failed");
    long pid = (long)getpid();
    ns_each(delete_mine, NULL);
    snprintf(t->bridge_ns, sizeof t->bridge_ns, NS_PREFIX "%ld-bridge", pid);
    if (IP(out, "netns", "add", t->bridge_ns) != 0) {
        snprintf(why, sizeof why, "no network namespaces: ip netns add: %s", out);
        return why;
    }
    t->bridge_made = 1;
    IP_MUST("-n", t->bridge_ns, "link", "set", "lo", "up");
    if (IP(out, "-n", t->bridge_ns, "link", "add", "br0", "type", "bridge") != 0) {
        snprintf(why, sizeof why, "no bridges: ip link add type bridge: %s", out);
        net_down(t);
        return why;
    }
    t->br0_made = 1;
    IP_MUST("-n", t->bridge_ns, "link", "set", "br0", "up");
    for (; names[t->num_hosts]; t->num_hosts++) {
        ck_assert(t->num_hosts < MAX_HOSTS);
        net_host *h = &t->hosts[t->num_hosts];
        const char *name = names[t->num_hosts];
        snprintf(h->name, sizeof h->name, "%s", name);
        snprintf(h->ns, sizeof h->ns, NS_PREFIX "%ld-%s", pid, name);
        snprintf(h->addr, sizeof h->addr, SUBNET ".%d", 10 + t->num_hosts);
        snprintf(h->port, sizeof h->port, "to-%s", name);
        if (host_up(t, h, t->num_hosts == 0, why, sizeof why)) {
            t->num_hosts++; /* so net_down removes it too */
            net_down(t);
            return why;
        }
    }
    return NULL;
}

static net_host *host(const char *name) {
    for (int i = 0; i < net.num_hosts; i++)
        if (strcmp(net.hosts[i].name, name) == 0) return &net.hosts[i];
    ck_abort_msg("no host %s", name);
    return NULL;
}

/* A partition and its end: the host's bridge port down or up. */
static void link_set(const char *name, const char *state) {
    IP_MUST("-n", net.bridge_ns, "link", "set", host(name)->port, state);
}

/* ---- the job ------------------------------------------------------------- */

static dt_test_job w; /* 1 ps, the chief, worker 1, one host each */

static void setup(void) {
    dt_test_job_setup(&w);
    memset(&net, 0, sizeof net);
}

/* Stops the roles first: a namespace with a process in it outlives its
 * name. Then checks that `ip netns list` holds none of the test's. */
static void teardown(void) {
    int had_net = net.bridge_made;
    dt_test_job_teardown(&w);
    net_down(&net);
    if (!had_net) return;
    int left = 0;
    ck_assert_msg(ns_each(count_mine, &left) == 0, "ip netns list failed");
    ck_assert_msg(left == 0, "%d namespaces of pid %ld left after the teardown", left,
                  (long)getpid());
}

/* Builds the hosts ps0, worker0, worker1 and eval0 and a cluster file naming
 * their addresses, and sets the job up with the demo's config, QUICK_SETS
 * and extra (NULL-terminated). 0 when the test must be skipped: it has
 * said why. */
static int job_init(const char *test, const char *const *extra) {
    static const char *const names[] = {"ps0", "worker0", "worker1", "eval0", NULL};
    static const char *const quick[] = {QUICK_SETS};
    const char *why = net_up(&net, names);
    if (why) {
        fprintf(stderr, "netns: %s skipped: %s\n", test, why);
        return 0;
    }
    char text[512];
    snprintf(text, sizeof text,
             "{\"cluster\": {\"ps\": [\"%s:%d\"], \"worker\": [\"%s:%d\", \"%s:%d\"], "
             "\"evaluator\": [\"%s:%d\"]}}\n",
             host("ps0")->addr, PORT, host("worker0")->addr, PORT, host("worker1")->addr, PORT,
             host("eval0")->addr, PORT);
    ck_assert_msg(dt_test_write_file(w.cluster, text) == 0, "cannot write %s", w.cluster);
    w.num_ps = 1;
    w.num_workers = 2;
    /* Absolute: the roles run in the test's temp dir. */
    static char config[4096];
    ck_assert_msg(realpath("conf/linear.json", config) != NULL && access(config, R_OK) == 0,
                  "no conf/linear.json (run from the repository's root)");
    w.config = config;
    dt_test_job_set(&w, quick, (int)(sizeof quick / sizeof quick[0]));
    for (int i = 0; extra && extra[i]; i++)
        dt_test_job_add_set(&w, extra[i]);
    return 1;
}

/* Starts a role in its host's namespace (`ip netns exec` execs dtrain, so
 * the pid and its group are dtrain's), logging to <dir>/<log_name>.log. */
static pid_t start_role(const char *host_name, const char *job_name, int task,
                        const char *log_name) {
    char task_text[16], path[1200];
    char *argv[16 + 2 * DT_TEST_JOB_MAX_SETS];
    int n = 0;
    snprintf(task_text, sizeof task_text, "%d", task);
    dt_test_job_log_path(&w, log_name, path, sizeof path);
    argv[n++] = ip_bin;
    argv[n++] = "netns";
    argv[n++] = "exec";
    argv[n++] = host(host_name)->ns;
    argv[n++] = (char *)dt_test_bin();
    argv[n++] = "--cluster";
    argv[n++] = w.cluster;
    argv[n++] = "--job-name";
    argv[n++] = (char *)job_name;
    argv[n++] = "--task-index";
    argv[n++] = task_text;
    argv[n++] = "--config";
    argv[n++] = (char *)w.config;
    argv[n++] = "--log-dir";
    argv[n++] = w.log_dir;
    for (int i = 0; i < w.num_sets; i++) {
        argv[n++] = "--set";
        argv[n++] = (char *)w.sets[i];
    }
    argv[n] = NULL;
    pid_t pid = dt_test_spawn(argv, path);
    ck_assert_msg(pid > 0, "cannot start %s %d in %s", job_name, task, host(host_name)->ns);
    return pid;
}

typedef struct {
    pid_t ps, chief, worker;
} roles;

/* A progress line: "worker:1 <addr>: step 100 global_step 180 loss ...". */
#define PROGRESS ": step "

/* Starts the ps and waits until it serves, as its cluster address (its
 * namespace's). */
static pid_t start_ps(void) {
    pid_t ps = start_role("ps0", "ps", 0, "ps0");
    char serving[96];
    snprintf(serving, sizeof serving, "ps:0 %s:%d: serving", host("ps0")->addr, PORT);
    ck_assert_msg(dt_test_job_wait_log(&w, "ps0", serving, JOB_TIMEOUT_MS, ps),
                  "the ps never said \"%s\"; logs:%s", serving, dt_test_job_report(&w));
    return ps;
}

/* One signal to the process itself, as the lifecycle suite sends them. */
static void send_signal(pid_t pid, int sig) {
    ck_assert_msg(dt_test_alive(pid) && kill(pid, sig) == 0, "cannot signal %d to pid %d; logs:%s",
                  sig, (int)pid, dt_test_job_report(&w));
}

/* The job of the partition tests, with both workers training: the ps
 * serving, the chief, and once the chief has made its first step, worker
 * 1. The chief stops itself there (DT_TEST_WORKER_STOP_AT, lib/worker.h)
 * and is held so until worker 1 has trained: alone it runs at a speed the
 * machine decides (over 10,000 steps/s), and could end the job while
 * worker 1's process starts, a time the machine decides too (as it could
 * between the model's creation and a SIGSTOP sent then). Returns once the chief trains again, so
 * that a wait it logs after that is not one from its pause (its call in flight may outlive
 * rpc_timeout_secs). */
static roles start_job(void) {
    roles r;
    r.ps = start_ps();
    ck_assert_int_eq(setenv("DT_TEST_WORKER_STOP_AT", "1", 1), 0);
    r.chief = start_role("worker0", "worker", 0, "chief");
    ck_assert_int_eq(unsetenv("DT_TEST_WORKER_STOP_AT"), 0);
    ck_assert_msg(dt_test_wait_stopped(r.chief, JOB_TIMEOUT_MS),
                  "the chief did not stop itself after its first step; logs:%s",
                  dt_test_job_report(&w));
    r.worker = start_role("worker1", "worker", 1, "worker1");
    int trained = dt_test_job_wait_log(&w, "worker1", PROGRESS, JOB_TIMEOUT_MS, r.worker);
    size_t held = dt_test_job_log_length(&w, "chief");
    send_signal(r.chief, SIGCONT);
    ck_assert_msg(trained, "worker 1 never trained; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(dt_test_job_wait_log_after(&w, "chief", held, PROGRESS, r.chief, JOB_TIMEOUT_MS) >
                      0,
                  "the chief did not train on after its pause; logs:%s", dt_test_job_report(&w));
    return r;
}

static void expect_all_done(const roles *r) {
    pid_t pids[3] = {r->ps, r->chief, r->worker};
    const char *names[3] = {"ps", "chief", "worker 1"};
    dt_test_job_expect_done(&w, pids, names, 3, JOB_TIMEOUT_MS);
}

/* Asserts the job's end: the final checkpoint at max_steps is the
 * least-squares line, and the chief says so. */
static void expect_job_complete(void) {
    int64_t max_steps = dt_test_job_max_steps(&w);
    int64_t final_step = dt_test_job_check_latest(&w, max_steps, 1);
    ck_assert_msg(final_step == max_steps, "final checkpoint at %" PRId64 ", want %" PRId64,
                  final_step, max_steps);
    char done[64];
    snprintf(done, sizeof done, "chief: job done at global_step %" PRId64, max_steps);
    ck_assert_msg(dt_test_job_log_has(&w, "chief", done), "the chief did not log \"%s\"; logs:%s",
                  done, dt_test_job_report(&w));
}

/* ---- reading the logs ------------------------------------------------------ */

/* 1 when one line of a role's log past `from` holds every non-NULL needle. */
static int line_after_has(const char *log_name, size_t from, const char *n1, const char *n2,
                          const char *n3) {
    char *text = dt_test_job_read_log(&w, log_name);
    int found = strlen(text) > from && dt_test_line_has(text + from, n1, n2, n3, NULL);
    free(text);
    return found;
}

/* The numbers that follow `key` on the lines of a role's log that hold
 * `marker`, in order, into values (at most MAX_VALUES). Returns how many. */
static int logged_values(const char *log_name, const char *marker, const char *key,
                         double *values) {
    char *text = dt_test_job_read_log(&w, log_name);
    int n = 0;
    for (char *line = text; line && *line && n < MAX_VALUES;) {
        char *end = strchr(line, '\n');
        if (end) *end = '\0';
        char *k = strstr(line, marker) ? strstr(line, key) : NULL;
        if (k) {
            char *stop = NULL;
            double v = strtod(k + strlen(key), &stop);
            if (stop != k + strlen(key)) values[n++] = v;
        }
        line = end ? end + 1 : NULL;
    }
    free(text);
    return n;
}

/* Asserts that the numbers after `key` on a role's lines with `marker`
 * (global steps) never go back, and that there are at least two. */
static void expect_step_never_back(const char *log_name, const char *marker, const char *key) {
    static double steps[MAX_VALUES];
    int n = logged_values(log_name, marker, key, steps);
    ck_assert_msg(n >= 2, "%s: only %d lines with \"%s\"; logs:%s", log_name, n, marker,
                  dt_test_job_report(&w));
    for (int i = 1; i < n; i++)
        ck_assert_msg(steps[i] >= steps[i - 1],
                      "%s: global step went back from %.0f to %.0f (line %d of \"%s\"); logs:%s",
                      log_name, steps[i - 1], steps[i], i + 1, marker, dt_test_job_report(&w));
}

/* Asserts that a role logged, past `from`, that it waits for ps 0 and
 * names it by address. */
static void expect_waits_for_ps(const char *log_name, size_t from) {
    char addr[64];
    snprintf(addr, sizeof addr, "%s:%d", host("ps0")->addr, PORT);
    ck_assert_msg(line_after_has(log_name, from, "waiting for ", "ps:0", addr),
                  "%s's wait does not name ps:0 %s; logs:%s", log_name, addr,
                  dt_test_job_report(&w));
}

/* Cuts a host's link for OUTAGE_MS, and on until each of the roles
 * (log_names[i], pids[i]) has said it waits, to be sure that each noticed:
 * a role that did not would prove nothing by resuming. Every role of the
 * job must still run then. Heals the link and waits until each of the
 * roles trains again (or ends the job: the last line is a progress line).
 * paused: the roles were stopped (SIGSTOP) before; they go on once the
 * link is down. */
static void outage(const char *host_name, const char *const *log_names, const pid_t *pids, int n,
                   const roles *r, int paused) {
    size_t seen[3];
    ck_assert(n <= 3);
    for (int i = 0; i < n; i++)
        seen[i] = dt_test_job_log_length(&w, log_names[i]);
    link_set(host_name, "down");
    for (int i = 0; paused && i < n; i++)
        send_signal(pids[i], SIGCONT);
    dt_test_sleep_ms(OUTAGE_MS); /* the outage itself, the one deliberate sleep */
    for (int i = 0; i < n; i++) {
        size_t waited =
            dt_test_job_wait_log_after(&w, log_names[i], seen[i], "waiting for ", pids[i], 10000);
        ck_assert_msg(waited > 0, "%s did not say it waits while %s was cut off; logs:%s",
                      log_names[i], host_name, dt_test_job_report(&w));
        expect_waits_for_ps(log_names[i], seen[i]);
        seen[i] = waited;
    }
    const pid_t all[3] = {r->ps, r->chief, r->worker};
    static const char *const all_names[3] = {"the ps", "the chief", "worker 1"};
    for (int i = 0; i < 3; i++)
        ck_assert_msg(dt_test_alive(all[i]), "%s exited (%d) while %s was cut off; logs:%s",
                      all_names[i], dt_test_wait(all[i], 0), host_name, dt_test_job_report(&w));
    link_set(host_name, "up");
    for (int i = 0; i < n; i++)
        ck_assert_msg(dt_test_job_wait_log_after(&w, log_names[i], seen[i], PROGRESS, pids[i],
                                                 JOB_TIMEOUT_MS) > 0,
                      "%s did not train again once %s was back; logs:%s", log_names[i], host_name,
                      dt_test_job_report(&w));
}

/* ---- the tests ------------------------------------------------------------- */

/* The demo, one host per role (ps, chief, worker, evaluator), on the
 * demo's line written as csv files so that the evaluator has a held-out
 * set, started as the README tells: the evaluator, the ps, worker 1 (which
 * waits for the model), the chief. Every role exits 0 (the evaluator once
 * it has scored the final checkpoint), the
 * ps answered worker 1 across the bridge, the final checkpoint is the least-squares line and the
 * loss went down. Whether worker 1 also trains before the chief ends the job alone is the machine's
 * speed; the partition tests make sure it does. */
/* The demo's line (y = 2x plus a little noise) as csv, label first, n rows
 * from `phase` (train and eval sets differ); path gets the file. */
static void write_line(const char *name, int n, double phase, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", w.dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    fprintf(f, "y,x\n");
    for (int i = 0; i < n; i++) {
        double x = -1 + 2.0 * (i + phase) / n;
        fprintf(f, "%.6f,%.6f\n", 2 * x + 0.3 * sin(7.0 * i + phase), x);
    }
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(demo_across_namespaces) {
    static char train[1100], eval[1100], train_set[1200], eval_set[1200];
    static const char *const extra[] = {"max_steps=6000", "data=csv", train_set, eval_set, NULL};
    if (!job_init("demo_across_namespaces", NULL)) return;
    write_line("train.csv", 100, 0, train, sizeof train);
    write_line("eval.csv", 40, 0.5, eval, sizeof eval);
    snprintf(train_set, sizeof train_set, "train_data=%s", train);
    snprintf(eval_set, sizeof eval_set, "eval_data=%s", eval);
    for (int i = 0; extra[i]; i++)
        dt_test_job_add_set(&w, extra[i]);
    roles r;
    /* The evaluator first, on a host of its own: it waits for checkpoints
     * in the shared log dir and never talks to the ps. */
    pid_t evaluator = start_role("eval0", "evaluator", 0, "evaluator");
    r.ps = start_ps();
    r.worker = start_role("worker1", "worker", 1, "worker1");
    char answer[128];
    snprintf(answer, sizeof answer, "ps:0 %s:%d: model not created yet", host("ps0")->addr, PORT);
    ck_assert_msg(dt_test_job_wait_log(&w, "worker1", answer, JOB_TIMEOUT_MS, r.worker),
                  "worker 1 was not answered \"%s\"; logs:%s", answer, dt_test_job_report(&w));
    r.chief = start_role("worker0", "worker", 0, "chief");
    expect_all_done(&r);
    expect_job_complete();
    dt_test_job_expect_exit(&w, evaluator, "evaluator", JOB_TIMEOUT_MS, 0);
    char scored[96];
    snprintf(scored, sizeof scored,
             "evaluator: done: scored the final checkpoint (global_step %" PRId64 ")",
             dt_test_job_max_steps(&w));
    ck_assert_msg(dt_test_job_log_has(&w, "evaluator", scored), "no \"%s\"; logs:%s", scored,
                  dt_test_job_report(&w));

    /* The loss went down: the earliest progress line (the first worker to
     * log has at most 2 * log_steps global steps behind it, so the line is
     * near the start) against the mean of each worker's last lines (one
     * minibatch's loss is noisy), near the fit's. */
    static double steps[MAX_VALUES], losses[MAX_VALUES];
    static const char *const workers[] = {"chief", "worker1"};
    double first_step = -1, first_loss = 0, final_sum = 0;
    int final_count = 0;
    for (int i = 0; i < 2; i++) {
        int n = logged_values(workers[i], PROGRESS, "global_step ", steps);
        ck_assert_msg(logged_values(workers[i], PROGRESS, " loss ", losses) == n,
                      "%s has progress lines without a loss; logs:%s", workers[i],
                      dt_test_job_report(&w));
        ck_assert_msg(n >= 1 || i > 0, "the chief logged no progress; logs:%s",
                      dt_test_job_report(&w));
        if (n >= 1 && (first_step < 0 || steps[0] < first_step)) {
            first_step = steps[0];
            first_loss = losses[0];
        }
        for (int k = n > 5 ? n - 5 : 0; k < n; k++, final_count++)
            final_sum += losses[k];
    }
    double final_loss = final_sum / final_count;
    ck_assert_msg(final_loss < 0.5 * first_loss,
                  "the loss did not go down: %.6f at global_step %.0f, %.6f over the last %d "
                  "lines; logs:%s",
                  first_loss, first_step, final_loss, final_count, dt_test_job_report(&w));
}
END_TEST

/* Worker 1's link down mid-job, then up: it waits for ps 0 and says so,
 * nobody gives up, it trains again and the job completes.
 *
 * In bounded mode, so that the chief cannot finish the job alone while
 * worker 1 is cut off, however fast the machine: it stays within
 * `staleness` steps of worker 1, which is live to the ps for
 * sync_timeout_secs, past the outage. */
START_TEST(worker_partition_heals) {
    static const char *const extra[] = {"max_steps=8000",
                                        "rpc_timeout_secs=" RPC_TIMEOUT_S,
                                        "ready_wait_secs=" HEAL_READY_WAIT_S,
                                        "mode=bounded",
                                        "staleness=50",
                                        "sync_timeout_secs=60",
                                        NULL};
    if (!job_init("worker_partition_heals", extra)) return;
    roles r = start_job();
    static const char *const logs[] = {"worker1"};
    /* Worker 1 paused until its link is down, so the job cannot end before
     * the cut: in bounded mode the chief waits for it within 50 steps. */
    dt_test_job_hold(&w, r.worker, "worker 1");
    outage("worker1", logs, &r.worker, 1, &r, 1);
    expect_all_done(&r);
    expect_job_complete();
    expect_step_never_back("worker1", PROGRESS, "global_step ");
    ck_assert_msg(dt_test_job_log_has(&w, "worker1", ": answered again after "),
                  "worker 1 did not say its wait was over; logs:%s", dt_test_job_report(&w));
}
END_TEST

/* The ps's link down mid-job, then up: the chief and worker 1 both wait
 * for it and say so, both train again, the global step never goes back
 * (every progress line and every checkpoint the chief saved) and the job
 * completes. Nobody trains while the ps is away, so the job's length does
 * not depend on the machine's speed. */
START_TEST(ps_partition_heals) {
    static const char *const extra[] = {"max_steps=8000", "rpc_timeout_secs=" RPC_TIMEOUT_S,
                                        "ready_wait_secs=" HEAL_READY_WAIT_S, NULL};
    if (!job_init("ps_partition_heals", extra)) return;
    roles r = start_job();
    static const char *const logs[] = {"chief", "worker1"};
    pid_t pids[2] = {r.chief, r.worker};
    /* Both paused until the link is down, so the job cannot end before the
     * cut however fast the machine (8,000 steps took 1.5 s once): they
     * find the ps gone at their next call. */
    send_signal(r.chief, SIGSTOP);
    send_signal(r.worker, SIGSTOP);
    ck_assert_msg(!dt_test_job_log_has(&w, "chief", "job done") &&
                      !dt_test_job_log_has(&w, "worker1", "training done"),
                  "the job ended before the cut; logs:%s", dt_test_job_report(&w));
    outage("ps0", logs, pids, 2, &r, 1);
    expect_all_done(&r);
    expect_job_complete();
    expect_step_never_back("chief", PROGRESS, "global_step ");
    expect_step_never_back("worker1", PROGRESS, "global_step ");
    expect_step_never_back("chief", "chief: saved ", "(global_step ");
}
END_TEST

/* Worker 1 cut off mid-job for good: every call it makes is retried for
 * ready_wait_secs (the budget of a call, each attempt bounded by
 * rpc_timeout_secs), then it exits 200, naming the budget and the ps. The
 * chief trains on alone and the ps ends the job (after its linger: worker
 * 1 is never told); both exit 0. */
START_TEST(partition_outlasts_ready_wait) {
    static const char *const extra[] = {"max_steps=8000", "rpc_timeout_secs=" RPC_TIMEOUT_S,
                                        "ready_wait_secs=" SHORT_READY_WAIT_S, NULL};
    if (!job_init("partition_outlasts_ready_wait", extra)) return;
    roles r = start_job();
    /* Both paused until the link is down: the job cannot end first (a
     * worker that finds it done exits 0). */
    dt_test_job_hold(&w, r.chief, "the chief");
    dt_test_job_hold(&w, r.worker, "worker 1");
    size_t seen = dt_test_job_log_length(&w, "worker1");
    link_set("worker1", "down");
    dt_test_job_release(&w, r.worker, "worker 1");
    dt_test_job_release(&w, r.chief, "the chief");
    dt_test_job_expect_exit(&w, r.worker, "worker 1 cut off", EXIT_TIMEOUT_MS, 200);
    link_set("worker1", "up");
    expect_waits_for_ps("worker1", seen);
    ck_assert_msg(
        line_after_has("worker1", seen, "gave up after " SHORT_READY_WAIT_S " s", "ps:0", NULL),
        "worker 1 does not name its budget and the ps; logs:%s", dt_test_job_report(&w));

    pid_t pids[2] = {r.chief, r.ps};
    const char *names[2] = {"chief", "ps"};
    dt_test_job_expect_done(&w, pids, names, 2, JOB_TIMEOUT_MS);
    expect_job_complete();
}
END_TEST

/* One case per test, named like it (CK_RUN_CASE=ps_partition_heals), each
 * with the runner's sweep of dead tests' namespaces around it. */
static void add_case(Suite *s, const char *name, const TTest *test) {
    TCase *tc = dt_test_job_tcase(s, name, TEST_TIMEOUT_S, setup, teardown);
    tcase_add_unchecked_fixture(tc, sweep_stale, sweep_stale);
    tcase_add_test(tc, test);
}

Suite *netns_suite(void) {
    Suite *s = suite_create("netns");
    add_case(s, "demo_across_namespaces", demo_across_namespaces);
    add_case(s, "worker_partition_heals", worker_partition_heals);
    add_case(s, "ps_partition_heals", ps_partition_heals);
    add_case(s, "partition_outlasts_ready_wait", partition_outlasts_ready_wait);
    return s;
}
