/*
 * Suite "flood": HTTP/2 abuse of a ps by a real hostile client
 * (test/h2flood.py: raw frames from 127.0.0.2, so the honest roles on
 * 127.0.0.1 are another peer), against a running job (a ps that keeps
 * serving, the chief training the tiny linear model):
 *  - rapid reset (HEADERS + RST_STREAM), plaintext and mutual TLS with a
 *    valid worker:1 certificate: the connection is closed, the ps logs it
 *    once naming the peer and the counts, Status counts it, the ps's peak
 *    RSS stays bounded (RSS_GROWTH_KB), the job ends at exactly max_steps;
 *  - SETTINGS, PING and WINDOW_UPDATE floods, CONTINUATION without
 *    END_HEADERS, 1 MB header blocks, an HPACK table bomb and streams whose
 *    replies are never read (zero window), in turn, plaintext and over
 *    mutual TLS as the same insider: the ps's RSS stays bounded and comes
 *    back after each, the job ends at max_steps; the continuation flood's
 *    connection is closed and logged, and its address may not connect
 *    again at once while another may;
 *  - many slow connections from one address (each trickling a HEADERS
 *    frame after the preface): all are closed, over the per-peer cap at
 *    once and the rest at the header deadline, each kind logged.
 * Every client run is bounded in frames and seconds; loopback only.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proc.h"
#include "ps_client.h"
#include "suites.h"
#include "testjob.h"

#define TEST_TIMEOUT_S 240
#define JOB_TIMEOUT_MS 120000
#define MAX_STEPS "max_steps=60000"
#define MAX_STEPS_N 60000

static dt_test_job w;
static char certs[1200];

/* Under ASan a freed block stays resident in the allocator's quarantine
 * (256 MB by default) and every block carries redzones: a flood's calls,
 * freed at once, would count there, not in the code. The roles this suite
 * starts get a small quarantine, so the bound is about what the ps holds. */
#if defined(__SANITIZE_ADDRESS__)
#define FLOOD_ASAN 1
#else
#define FLOOD_ASAN 0
#endif
/* The bound on the ps's growth, a behaviour: memory stays bounded whatever
 * the client sends. An unguarded ps grows by 1.8 GB in a 5 s rapid reset
 * and never closes the connection; a guarded one closes it and peaks well
 * under 256 MB, however loaded the machine. How far under is a figure, not
 * a behaviour: the goal (under 64 MB, closed within 1 s) is measured by
 * `make bench` (BENCH_ONLY=flood), as every speed and memory target is;
 * on a loaded machine a poller that sees the flood late lets gRPC parse
 * more of it first (60-83 MB seen at load 15). Under ASan twice that:
 * every block there carries redzones (a gRPC call's many small ones about
 * double), its shadow adds an eighth of all that, its allocator keeps
 * freed memory (malloc_trim does nothing there) and the ps runs 2-3x
 * slower, so its pollers see a flood later (measured: a PING flood's
 * peak 57 MB plain, 93 MB under ASan). */
#define RSS_GROWTH_KB ((FLOOD_ASAN ? 2 : 1) * 256 * 1024)
static char asan_saved[2048];
static int asan_had;

static void setup(void) {
    dt_test_job_setup(&w);
    if (FLOOD_ASAN) {
        const char *old = getenv("ASAN_OPTIONS");
        asan_had = old != NULL;
        snprintf(asan_saved, sizeof asan_saved, "%s", old ? old : "");
        char opts[2200];
        snprintf(opts, sizeof opts, "%s%squarantine_size_mb=4:thread_local_quarantine_size_kb=64",
                 asan_saved, asan_saved[0] ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
    }
}

static void teardown(void) {
    dt_test_job_teardown(&w);
    unsetenv("DTRAIN_TLS_CERT");
    unsetenv("DTRAIN_TLS_KEY");
    unsetenv("DTRAIN_TLS_CA");
    if (FLOOD_ASAN) {
        if (asan_had)
            setenv("ASAN_OPTIONS", asan_saved, 1);
        else
            unsetenv("ASAN_OPTIONS");
    }
}

static void job_sets(void) {
    static const char *const sets[] = {MAX_STEPS, "log_steps=500", "examples=200",
                                       "save_model_secs=600"};
    dt_test_job_set(&w, sets, (int)(sizeof sets / sizeof sets[0]));
}

/* A field of /proc/PID/status in kB ("VmHWM", "VmRSS"); -1 when gone. */
static long proc_kb(pid_t pid, const char *field) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long kb = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':') kb = atol(line + n + 1);
    fclose(f);
    return kb;
}

/* Resets the ps's peak RSS (VmHWM) to its RSS now (clear_refs "5",
 * Linux 4.0+), so a peak read later is the flood's, not one from the ps's
 * start-up; then returns that RSS in kB. */
static long rss_baseline(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/clear_refs", (int)pid);
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fputs("5", f);
    ck_assert_msg(fclose(f) == 0, "cannot reset the peak RSS through %s", path);
    return proc_kb(pid, "VmRSS");
}

/* Runs the hostile client (mode, its extra flags) against ps 0 and returns
 * its JSON line in out. */
static void flood_from(const char *source, const char *mode, const char *extra, char *out,
                       size_t cap) {
    char cmd[4600];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 test/h2flood.py %s --port %d --source %s %s 2>&1",
             mode, w.ports[0], source, extra);
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "cannot run `%s`", cmd);
    out[0] = '\0';
    size_t len = 0;
    char line[1024];
    while (fgets(line, sizeof line, p))
        if (len + strlen(line) < cap) {
            memcpy(out + len, line, strlen(line) + 1);
            len += strlen(line);
        }
    int rc = pclose(p);
    ck_assert_msg(rc == 0, "`%s` failed (%d): %s", cmd, rc, out);
}

static void flood(const char *mode, const char *extra, char *out, size_t cap) {
    flood_from("127.0.0.2", mode, extra, out, cap);
}

/* 1 when a TCP connection from source (IPv4, or IPv6 with a ':') to the
 * ps's port on the same family's loopback is made within timeout_ms; 0
 * when it is not (an address backing off: the listening socket's filter
 * drops its packets, so the connect gets no answer). */
static int connects_from(const char *source, int timeout_ms) {
    const int v6 = strchr(source, ':') != NULL;
    struct sockaddr_storage from, to;
    memset(&from, 0, sizeof from);
    memset(&to, 0, sizeof to);
    socklen_t len;
    if (v6) {
        struct sockaddr_in6 *f = (struct sockaddr_in6 *)&from, *t = (struct sockaddr_in6 *)&to;
        f->sin6_family = t->sin6_family = AF_INET6;
        ck_assert_int_eq(inet_pton(AF_INET6, source, &f->sin6_addr), 1);
        t->sin6_addr = in6addr_loopback;
        t->sin6_port = htons((uint16_t)w.ports[0]);
        len = sizeof(struct sockaddr_in6);
    } else {
        struct sockaddr_in *f = (struct sockaddr_in *)&from, *t = (struct sockaddr_in *)&to;
        f->sin_family = t->sin_family = AF_INET;
        ck_assert_int_eq(inet_pton(AF_INET, source, &f->sin_addr), 1);
        ck_assert_int_eq(inet_pton(AF_INET, "127.0.0.1", &t->sin_addr), 1);
        t->sin_port = htons((uint16_t)w.ports[0]);
        len = sizeof(struct sockaddr_in);
    }
    int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&from, len), 0);
    int rc = connect(fd, (struct sockaddr *)&to, len);
    int made = rc == 0;
    if (rc < 0 && errno == EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int soerr = 0;
        socklen_t slen = sizeof soerr;
        made = poll(&p, 1, timeout_ms) == 1 &&
               getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &slen) == 0 && soerr == 0;
    }
    close(fd);
    return made;
}

/* Waits until the chief has logged a step: the job trains. */
static void wait_training(pid_t chief) {
    ck_assert_msg(dt_test_job_wait_log(&w, "chief", "global_step 500 ", 60000, chief),
                  "the chief never reached step 500; logs:%s", dt_test_job_report(&w));
}

/* The chief exits 0 and the last checkpoint is at exactly max_steps. */
static void expect_job_done(pid_t chief) {
    dt_test_job_expect_exit(&w, chief, "chief", JOB_TIMEOUT_MS, 0);
    int64_t step = dt_test_job_check_latest(&w, MAX_STEPS_N, 0);
    ck_assert_msg(step == MAX_STEPS_N, "the job ended at step %lld, not %d", (long long)step,
                  MAX_STEPS_N);
}

/* The ps's guard counters, from a Status call of the test's own. */
static void guard_status(dt_msg_status_resp *st) {
    dt_test_probe probe;
    dt_test_probe_open(&probe, w.cluster, 5000);
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_ps_client_status(probe.client, 0, st, &err);
    dt_test_probe_close(&probe);
    ck_assert_msg(rc == 0, "status: %s", err.msg);
}

/* A rapid-reset flood against the running job; sec_flags: the client's
 * TLS flags ("" for plaintext). */
static void rapid_reset(pid_t ps, pid_t chief, const char *sec_flags, int with_status) {
    ck_assert(strlen(sec_flags) < 4000);
    wait_training(chief);
    long before = rss_baseline(ps);
    ck_assert_int_gt(before, 0);
    char extra[4200], out[4096];
    /* --linger: how long the client waits, after its flood, for the ps to
     * close it (it returns as soon as it is closed): a bounded wait for
     * an event, long enough for a ps whose pollers a loaded machine (or
     * ASan) runs late. How soon it closes is the bench's figure. */
    snprintf(extra, sizeof extra, "--seconds 5 --max-frames 400000 --linger 10 %s", sec_flags);
    flood("reset", extra, out, sizeof out);
    long peak = proc_kb(ps, "VmHWM");
    fprintf(stderr, "flood: rapid reset: the ps grew by %ld kB (from %ld kB); client: %s",
            peak - before, before, out);
    ck_assert_msg(strstr(out, "\"closed\": true"), "the connection was not closed: %s", out);
    ck_assert_msg(dt_test_job_wait_log(&w, "ps0", "closed the connection of 127.0.0.2:", 5000, ps),
                  "no log line for the flood; client: %s; logs:%s", out, dt_test_job_report(&w));
    /* Closed for its reset calls, the address backs off; on a loaded
     * machine the pollers may see no call of it before it sent 1 MiB,
     * and then it is closed as a connection that starts no call. */
    ck_assert_msg(dt_test_job_log_has(&w, "ps0", "refusing 127.0.0.2 for") ||
                      dt_test_job_log_has(&w, "ps0", "without starting a call") ||
                      dt_test_job_log_has(&w, "ps0", "none handled (a rapid-reset flood)"),
                  "the log line says neither; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(peak - before < RSS_GROWTH_KB, "the ps grew from %ld kB to %ld kB (client: %s)",
                  before, peak, out);
    if (with_status) {
        dt_msg_status_resp st;
        guard_status(&st);
        ck_assert_msg(st.conns_closed_flood == 1, "Status counts %lld flood closings",
                      (long long)st.conns_closed_flood);
    }
    expect_job_done(chief);
    char *log = dt_test_job_read_log(&w, "ps0");
    const char *first = strstr(log, "closed the connection of 127.0.0.2:");
    int once = first && !strstr(first + 1, "closed the connection of 127.0.0.2:");
    free(log);
    ck_assert_msg(once, "the flood was logged more than once; logs:%s", dt_test_job_report(&w));
}

START_TEST(reset_plaintext) {
    dt_test_job_cluster(&w, 1, 1);
    job_sets();
    pid_t ps = dt_test_job_start_serving(&w, "ps", 0, "ps0");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    rapid_reset(ps, chief, "", 1);
}
END_TEST

/* A job over mutual TLS (a ps that keeps serving, the chief), its pids
 * in pids; the flood client's TLS flags into sec: a valid worker:1
 * certificate (the CA signed it) whose task is not in this cluster, so
 * the chief trains alone: the insider. */
/* h2flood's TLS flags for identity id ("worker-1", "tool") of certs. */
static void cert_flags(const char *id, char *out, size_t cap) {
    int len = snprintf(out, cap, "--cert %s/%s.pem --key %s/%s-key.pem --ca %s/ca.pem", certs, id,
                       certs, id, certs);
    ck_assert(len > 0 && (size_t)len < cap);
}

static void start_mtls_job(pid_t pids[2], char *sec, size_t cap) {
    snprintf(certs, sizeof certs, "%s/certs", w.dir);
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "WORKERS=2 PS=1 sh scripts/make_certs.sh '%s' 2>/dev/null", certs);
    ck_assert_int_eq(system(cmd), 0);
    dt_test_job_cluster(&w, 1, 1);
    job_sets();
    char path[1300];
    const char *ids[2] = {"ps-0", "chief"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s.pem", certs, ids[i]);
        setenv("DTRAIN_TLS_CERT", path, 1);
        snprintf(path, sizeof path, "%s/%s-key.pem", certs, ids[i]);
        setenv("DTRAIN_TLS_KEY", path, 1);
        snprintf(path, sizeof path, "%s/ca.pem", certs);
        setenv("DTRAIN_TLS_CA", path, 1);
        pids[i] = i == 0 ? dt_test_job_start_serving(&w, "ps", 0, "ps0")
                         : dt_test_job_start(&w, "worker", 0, "chief");
    }
    cert_flags("worker-1", sec, cap);
}

START_TEST(reset_mtls) {
    pid_t pids[2];
    char sec[4000];
    start_mtls_job(pids, sec, sizeof sec);
    rapid_reset(pids[0], pids[1], sec, 0);
}
END_TEST

/* Every other flood, one after the other, against one running job;
 * sec_flags: the client's TLS flags ("" for plaintext); call_sec_flags:
 * those of the floods after an honest call (an identity whose Status is
 * handled, not refused: else the refusals close it first). */
static void other_floods(pid_t ps, pid_t chief, const char *sec_flags, const char *call_sec_flags) {
    ck_assert(strlen(sec_flags) < 4000 && strlen(call_sec_flags) < 4000);
    wait_training(chief);
    long before = rss_baseline(ps);
    /* The frame floods twice: on a new connection, and after one honest
     * call on it (then only the bytes with none of its calls open tell).
     * backs_off: closed by the ps for its bytes, so its address is then
     * refused (gRPC's own PING guard, which closed a PING flood with a
     * GOAWAY and let its client connect again at once, 176-195 times in
     * 20 s, is off). */
    static const struct {
        const char *mode, *flags;
        int backs_off;
    } floods[] = {{"settings", "", 1},
                  {"ping", "", 1},
                  {"window", "", 1},
                  {"bigheaders", "", 0},
                  {"hpackbomb", "", 0},
                  {"zerowindow", "", 0},
                  {"continuation", "", 1},
                  {"ping", "--after-call", 1},
                  {"settings", "--after-call", 1},
                  {"window", "--after-call", 1}};
    for (size_t i = 0; i < sizeof floods / sizeof floods[0]; i++) {
        const char *mode = floods[i].mode;
        const int after_call = floods[i].flags[0] != '\0';
        char out[4096], source[32], extra[4200];
        /* Each from an address of its own. */
        snprintf(source, sizeof source, "127.0.0.%d", (int)(10 + i));
        /* After a call, frames enough that the bytes the guard allows
         * with no call open (three of the ps's 4 MiB messages and 2 MiB)
         * are far behind, bounded by frames rather than time: a slow ps
         * (a sanitized build, a loaded machine) reads them later, and the
         * flood ends as soon as the ps closes it (about 1.3 s here). */
        snprintf(extra, sizeof extra, "--seconds %s --max-frames %d --linger 10 %s %s",
                 after_call ? "60" : "1.5", after_call ? 4000000 : 300000, floods[i].flags,
                 after_call ? call_sec_flags : sec_flags);
        /* The peak read below is this flood's, still against the RSS
         * before the first flood. */
        long now_kb = rss_baseline(ps);
        flood_from(source, mode, extra, out, sizeof out);
        long rss = proc_kb(ps, "VmRSS"), peak = proc_kb(ps, "VmHWM");
        fprintf(stderr,
                "flood: %s%s: the ps peaked %ld kB above %ld kB (%ld kB at its start); client: %s",
                mode, sec_flags[0] ? " (mTLS)" : "", peak - before, before, now_kb, out);
        ck_assert_msg(rss > 0, "the ps is gone after the %s flood; logs:%s", mode,
                      dt_test_job_report(&w));
        ck_assert_msg(peak - before < RSS_GROWTH_KB,
                      "after the %s flood the ps peaked at %ld kB from %ld kB (client: %s)", mode,
                      peak, before, out);
        /* Its memory returns (the ps hands it back a second after a
         * connection ends): waited for, bounded, then asserted, so the
         * next flood's peak is its own. */
        for (int t = 0; t < 50 && proc_kb(ps, "VmRSS") - before >= RSS_GROWTH_KB / 2; t++)
            dt_test_sleep_ms(100); /* poll interval of a bounded wait */
        rss = proc_kb(ps, "VmRSS");
        ck_assert_msg(rss - before < RSS_GROWTH_KB,
                      "5 s after the %s flood the ps holds %ld kB, from %ld kB before", mode, rss,
                      before);
        /* Every one is closed: by gRPC (a reset for the header blocks) or
         * by the ps (1 MiB and no call; the bound above with no call
         * open). */
        ck_assert_msg(strstr(out, "\"closed\": true"), "the %s flood was not closed: %s", mode,
                      out);
        if (floods[i].backs_off)
            ck_assert_msg(!connects_from(source, 1000),
                          "%s connected again right after its %s %s flood; logs:%s", source, mode,
                          floods[i].flags, dt_test_job_report(&w));
    }
    ck_assert_msg(dt_test_job_log_has(&w, "ps0", "without starting a call"),
                  "the endless header block was not logged; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(dt_test_job_log_has(&w, "ps0", "a frame flood); refusing it for 30 s"),
                  "the continuation flood's address was not refused; logs:%s",
                  dt_test_job_report(&w));
    /* After an honest call, the frames with none of its calls open. */
    ck_assert_msg(dt_test_job_log_has(&w, "ps0", "with none of its calls open"),
                  "a frame flood after a call was not logged; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(connects_from("127.0.0.30", 5000), "another address cannot connect; logs:%s",
                  dt_test_job_report(&w));
    if (!sec_flags[0]) {
        /* A flood over IPv6 (the ps listens on both families): closed, and
         * its address refused by the same filter, which reads the IP
         * version before an address (it once compared part of an IPv6
         * source with the IPv4 list, and had no IPv6 list). */
        char out[4096];
        flood_from("::1", "reset", "--host ::1 --seconds 5 --max-frames 400000 --linger 10", out,
                   sizeof out);
        ck_assert_msg(strstr(out, "\"closed\": true"), "the IPv6 flood was not closed: %s", out);
        ck_assert_msg(dt_test_job_wait_log(&w, "ps0", "[::1]:", 5000, ps),
                      "the IPv6 flood's closing was not logged; logs:%s", dt_test_job_report(&w));
        ck_assert_msg(!connects_from("::1", 1000),
                      "::1 connected again right after its flood; logs:%s", dt_test_job_report(&w));
        ck_assert_msg(connects_from("127.0.0.31", 5000),
                      "an IPv4 address cannot connect after the IPv6 flood; logs:%s",
                      dt_test_job_report(&w));
    }
    expect_job_done(chief);
}

START_TEST(other_floods_plaintext) {
    dt_test_job_cluster(&w, 1, 1);
    job_sets();
    pid_t ps = dt_test_job_start_serving(&w, "ps", 0, "ps0");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    other_floods(ps, chief, "", "");
}
END_TEST

/* The same floods from the insider, over mutual TLS. */
START_TEST(other_floods_mtls) {
    pid_t pids[2];
    char sec[4000];
    start_mtls_job(pids, sec, sizeof sec);
    char tool[4000];
    cert_flags("tool", tool, sizeof tool);
    other_floods(pids[0], pids[1], sec, tool);
}
END_TEST

/* One call whose header block is 1 MB and that never sends its message,
 * over TLS (where gRPC 1.51 may hand such a call over with every header
 * it parsed) from an identity whose Status is allowed: its stream ends at
 * once (the ps refuses it, RESOURCE_EXHAUSTED). Without that refusal the
 * call waited for its message, holding the megabyte, until the connection
 * ended. */
START_TEST(big_headers_refused_mtls) {
    pid_t pids[2];
    char sec[4000], tool[4000], extra[4200], out[4096];
    start_mtls_job(pids, sec, sizeof sec);
    wait_training(pids[1]);
    cert_flags("tool", tool, sizeof tool);
    snprintf(extra, sizeof extra, "--seconds 10 --linger 0 %s", tool);
    flood_from("127.0.0.40", "bigcall", extra, out, sizeof out);
    ck_assert_msg(strstr(out, "\"first_call_ended\": true"),
                  "the ps did not end a call with 1 MB of headers: %s; logs:%s", out,
                  dt_test_job_report(&w));
    /* Ended by the ps's refusal (logged), or by gRPC's own limit when
     * the whole block came in one read (then no call was made): seen
     * both ways over TLS. */
    fprintf(stderr, "flood: bigcall (mTLS): %s\n",
            dt_test_job_log_has(&w, "ps0", "request headers of") ? "refused by the ps"
                                                                 : "reset by gRPC");
    expect_job_done(pids[1]);
}
END_TEST

/* Slow headers from many connections of one address. The header deadline
 * is well beyond the time the client takes to open its 40 connections,
 * even on a loaded machine: the oldest 8 (kept by the cap) are closed as
 * slow only once all 40 are open, so the counts below are exact. */
START_TEST(slow_connections) {
    static const char *const ps_flags[] = {"--header-timeout-ms", "3000", "--max-conns-per-peer",
                                           "8", NULL};
    w.ps_flags = ps_flags;
    dt_test_job_cluster(&w, 1, 1);
    job_sets();
    pid_t ps = dt_test_job_start_serving(&w, "ps", 0, "ps0");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    wait_training(chief);
    char out[4096];
    flood("slowloris", "--conns 40 --seconds 8 --linger 10", out, sizeof out);
    ck_assert_msg(strstr(out, "\"conns\": 40") && strstr(out, "\"conns_closed\": 40"),
                  "not every slow connection was closed: %s", out);
    ck_assert_msg(dt_test_job_wait_log(&w, "ps0", "holds more than 8 connections", 5000, ps),
                  "the cap was not logged; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(dt_test_job_log_has(&w, "ps0", "started no call within 3000 ms"),
                  "the header deadline was not logged; logs:%s", dt_test_job_report(&w));
    dt_msg_status_resp st;
    guard_status(&st);
    ck_assert_msg(st.conns_closed_over_cap == 32 && st.conns_closed_slow == 8,
                  "Status counts %lld over the cap and %lld slow, not 32 and 8",
                  (long long)st.conns_closed_over_cap, (long long)st.conns_closed_slow);
    expect_job_done(chief);
}
END_TEST

static void add_case(Suite *s, const char *name, const TTest *test) {
    tcase_add_test(dt_test_job_tcase(s, name, TEST_TIMEOUT_S, setup, teardown), test);
}

Suite *flood_suite(void) {
    Suite *s = suite_create("flood");
    add_case(s, "reset_plaintext", reset_plaintext);
    add_case(s, "other_floods_plaintext", other_floods_plaintext);
    /* Under ASan the floods over mutual TLS run the same dtrain code as
     * the plaintext ones (the guard, a reset call's path through the
     * server); what differs is gRPC's TLS layer. They run in the plain
     * build, which `make check` runs first: under ASan they were 40 s of
     * a stage where this suite runs alone. */
    if (!FLOOD_ASAN) {
        add_case(s, "reset_mtls", reset_mtls);
        add_case(s, "other_floods_mtls", other_floods_mtls);
        add_case(s, "big_headers_refused_mtls", big_headers_refused_mtls);
    }
    add_case(s, "slow_connections", slow_connections);
    return s;
}
