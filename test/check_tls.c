/*
 * Suite "tls": transport security and authorization by role, with real
 * processes ($DTRAIN_BIN) and real TLS on loopback. Certificates are made
 * at test time by scripts/make_certs.sh (and openssl for the expired one)
 * in the test's temp dir.
 *  - a job over mutual TLS (ps, chief, worker; the roles take their files
 *    from DTRAIN_TLS_* in the environment) exits 0; so does one over TLS
 *    without client certificates (the ps warns it checks no one), and one with
 *    per-identity tokens in plaintext, and the ps warns that tokens cross
 *    the network in clear;
 *  - a mutual-TLS ps that finished a job (--keep-serving, files given as
 *    flags) refuses a plaintext client, a TLS client without a certificate,
 *    a certificate of another CA and an expired one (the handshake fails:
 *    UNAVAILABLE); refuses a worker's Create and Shutdown and a worker
 *    outside the cluster (PERMISSION_DENIED naming identity and method);
 *    and still answers a tool's Status with the job's final step;
 *  - certificate files replaced on disk (another CA's) serve the next
 *    connections of a running ps: clients of the new CA get in, of the old
 *    one no longer; after SIGHUP the ps reads them again;
 *  - a plaintext ps with a token file refuses no token and a wrong token
 *    (UNAUTHENTICATED) and a worker's Shutdown, and counts its refusals in
 *    its log; with one shared token it trusts the claimed identity but
 *    still applies the roles and the cluster's bounds.
 *  - the flags: in --help, pairs that go together, unreadable and non-PEM
 *    files (exit 2 and 1, naming the file), the environment under the flags.
 * The test process itself is the raw client (dt_rpc_call_all, ps_client).
 * Every wait is bounded; the teardown kills what is left.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "monitor.h"
#include "proc.h"
#include "ps_client.h"
#include "rpc_client.h"
#include "suites.h"
#include "testjob.h"

#define JOB_TIMEOUT_MS 90000
#define CALL_TIMEOUT_MS 5000
#define TEST_TIMEOUT_S 180
#define READY_MS 30000

#define METHOD(name) "/dtrain.ParameterServer/" name

static dt_test_job w;
static char certs[1200]; /* <dir>/certs */

static void setup(void) {
    dt_test_job_setup(&w);
}

static void teardown(void) {
    dt_test_job_teardown(&w);
}

static void sh(const char *cmd) {
    int rc = system(cmd);
    ck_assert_msg(rc == 0, "`%s` failed (%d)", cmd, rc);
}

/* Makes <dir>/certs with scripts/make_certs.sh (2 workers, 1 ps). */
static void make_certs(void) {
    snprintf(certs, sizeof certs, "%s/certs", w.dir);
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "WORKERS=2 PS=1 sh scripts/make_certs.sh '%s' 2>/dev/null", certs);
    sh(cmd);
}

/* <certs>/<file> into buf. */
static const char *cert_path(char *buf, size_t cap, const char *file) {
    snprintf(buf, cap, "%s/%s", certs, file);
    return buf;
}

/* Points DTRAIN_TLS_* at identity's files (e.g. "worker-1") for the next
 * role started; the roles inherit the environment. */
static void tls_env(const char *file_name) {
    char path[1300];
    snprintf(path, sizeof path, "%s/%s.pem", certs, file_name);
    setenv("DTRAIN_TLS_CERT", path, 1);
    snprintf(path, sizeof path, "%s/%s-key.pem", certs, file_name);
    setenv("DTRAIN_TLS_KEY", path, 1);
    snprintf(path, sizeof path, "%s/ca.pem", certs);
    setenv("DTRAIN_TLS_CA", path, 1);
}

static void job_sets(void) {
    static const char *const sets[] = {"max_steps=300", "log_steps=100", "examples=200",
                                       "save_model_secs=60"};
    dt_test_job_set(&w, sets, (int)(sizeof sets / sizeof sets[0]));
}

/* ---- a raw client ------------------------------------------------------------ */

/* One call of `method` with an empty request to the ps; returns its code,
 * the message in msg. */
static int call_ps(const dt_rpc_security *sec, const char *method, char *msg, size_t cap) {
    dt_err err;
    dt_err_clear(&err);
    dt_rpc_channel *ch = NULL;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", w.ports[0]);
    int rc = dt_rpc_channel_new_secure(addr, sec, &ch, &err);
    ck_assert_msg(rc == 0, "channel: %s", err.msg);
    dt_rpc_buf empty = {0};
    dt_rpc_call call;
    memset(&call, 0, sizeof call);
    call.channel = ch;
    call.method = method;
    call.request = &empty;
    rc = dt_rpc_call_all(&call, 1, CALL_TIMEOUT_MS, &err);
    dt_rpc_buf_release(&call.response);
    snprintf(msg, cap, "%s", err.msg);
    dt_rpc_channel_free(ch);
    return rc;
}

/* Status of ps 0 as `worker` (-1: tool) with sec; returns its code and
 * fills *st. */
static int status_as(const dt_rpc_security *sec, int worker, dt_msg_status_resp *st, char *msg,
                     size_t cap) {
    dt_cluster cl;
    memset(&cl, 0, sizeof cl);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_cluster_load(w.cluster, &cl, &err) == 0, "%s", err.msg);
    dt_tensors none;
    memset(&none, 0, sizeof none);
    dt_ps_client_params p;
    memset(&p, 0, sizeof p);
    p.cluster = &cl;
    p.worker = worker;
    p.timeout_ms = CALL_TIMEOUT_MS;
    p.security = sec;
    dt_ps_client *c = NULL;
    ck_assert_msg(dt_ps_client_new(&p, &none, &c, &err) == 0, "%s", err.msg);
    memset(st, 0, sizeof *st);
    int rc = dt_ps_client_status(c, 0, st, &err);
    snprintf(msg, cap, "%s", err.msg);
    dt_ps_client_free(c);
    dt_cluster_deinit(&cl);
    return rc;
}

/* Waits until the ps answers a Status with sec (bounded). */
static void wait_ps(const dt_rpc_security *sec) {
    long long deadline = dt_test_now_ms() + READY_MS;
    char msg[DT_ERR_MSG_MAX];
    dt_msg_status_resp st;
    while (status_as(sec, -1, &st, msg, sizeof msg) != 0) {
        ck_assert_msg(dt_test_now_ms() < deadline, "ps never answered: %s; logs:%s", msg,
                      dt_test_job_report(&w));
        dt_test_sleep_ms(100);
    }
}

/* ---- whole jobs --------------------------------------------------------------- */

START_TEST(mtls_job) {
    make_certs();
    dt_test_job_cluster(&w, 1, 2);
    job_sets();
    /* The ps by name: the workers check it against the certificates' DNS
     * SAN (the other tests dial 127.0.0.1, an IP SAN). */
    char text[512];
    snprintf(text, sizeof text,
             "{\"cluster\": {\"ps\": [\"localhost:%d\"], "
             "\"worker\": [\"127.0.0.1:%d\", \"127.0.0.1:%d\"]}}\n",
             w.ports[0], w.ports[1], w.ports[2]);
    ck_assert_int_eq(dt_test_write_file(w.cluster, text), 0);
    pid_t pids[3];
    tls_env("ps-0");
    pids[0] = dt_test_job_start(&w, "ps", 0, "ps0");
    tls_env("chief");
    pids[1] = dt_test_job_start(&w, "worker", 0, "chief");
    tls_env("worker-1");
    pids[2] = dt_test_job_start(&w, "worker", 1, "worker1");
    const char *const names[] = {"ps 0", "chief", "worker 1"};
    dt_test_job_expect_done(&w, pids, names, 3, JOB_TIMEOUT_MS);
    ck_assert_msg(dt_test_job_log_has(&w, "ps0", "ps:0 localhost:"),
                  "the ps did not serve by name; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(dt_test_job_log_has(&w, "ps0", "client certificates of CA"),
                  "the ps did not serve mTLS; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(!dt_test_job_log_has(&w, "ps0", "anyone who can reach"),
                  "a TLS ps warned about plaintext; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(!dt_test_job_log_has(&w, "ps0", "refused"), "the ps refused a call; logs:%s",
                  dt_test_job_report(&w));
    dt_test_job_check_latest(&w, 300, 0);
}
END_TEST

/* TLS without client certificates: encrypted, the ps warns it checks no
 * one; workers only verify the ps. */
START_TEST(tls_only_job) {
    make_certs();
    dt_test_job_cluster(&w, 1, 2);
    job_sets();
    pid_t pids[3];
    tls_env("ps-0");
    unsetenv("DTRAIN_TLS_CA");
    pids[0] = dt_test_job_start(&w, "ps", 0, "ps0");
    unsetenv("DTRAIN_TLS_CERT");
    unsetenv("DTRAIN_TLS_KEY");
    char ca[1300];
    setenv("DTRAIN_TLS_CA", cert_path(ca, sizeof ca, "ca.pem"), 1);
    pids[1] = dt_test_job_start(&w, "worker", 0, "chief");
    pids[2] = dt_test_job_start(&w, "worker", 1, "worker1");
    const char *const names[] = {"ps 0", "chief", "worker 1"};
    dt_test_job_expect_done(&w, pids, names, 3, JOB_TIMEOUT_MS);
    ck_assert_msg(dt_test_job_log_has(&w, "ps0", "TLS without client certificates or tokens"),
                  "no warning; logs:%s", dt_test_job_report(&w));
}
END_TEST

START_TEST(token_job) {
    dt_test_job_cluster(&w, 1, 2);
    job_sets();
    char tokens[1200];
    snprintf(tokens, sizeof tokens, "%s/tokens", w.dir);
    ck_assert_int_eq(dt_test_write_file(tokens, "# per-identity tokens\n"
                                                "chief c-7f3a9e\n"
                                                "worker:1 w1-0b44d2\n"
                                                "ps:0 p0-51aa0c   # unused by clients\n"
                                                "tool t-99e1c0\n"),
                     0);
    setenv("DTRAIN_TOKEN_FILE", tokens, 1);
    dt_test_job_run(&w, "", JOB_TIMEOUT_MS);
    ck_assert_msg(dt_test_job_log_has(&w, "ps0", "tokens and tensors cross the network in clear"),
                  "no plaintext warning; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(!dt_test_job_log_has(&w, "ps0", "refused"), "the ps refused a call; logs:%s",
                  dt_test_job_report(&w));
}
END_TEST

/* ---- refusals ---------------------------------------------------------------- */

/* Asserts a refused call's code (want 0: any failure; the status name in
 * the message says which) and that its message holds n1 and n2. */
static void expect_refused(int rc, int want, const char *msg, const char *n1, const char *n2,
                           const char *what) {
    ck_assert_msg(want ? rc == want : rc < 0, "%s: code %d, want %d: %s", what, rc, want, msg);
    ck_assert_msg(!n1 || strstr(msg, n1), "%s: \"%s\" lacks \"%s\"", what, msg, n1);
    ck_assert_msg(!n2 || strstr(msg, n2), "%s: \"%s\" lacks \"%s\"", what, msg, n2);
}

START_TEST(mtls_refusals) {
    make_certs();
    dt_test_job_cluster(&w, 1, 2);
    job_sets();
    char cert[1300], key[1300], ca[1300];
    cert_path(cert, sizeof cert, "ps-0.pem");
    cert_path(key, sizeof key, "ps-0-key.pem");
    cert_path(ca, sizeof ca, "ca.pem");
    /* The ps with flags (the environment is empty here). */
    char log[1300];
    dt_test_job_log_path(&w, "ps0", log, sizeof log);
    char *const argv[] = {(char *)dt_test_bin(), "--cluster", w.cluster,        "--job-name", "ps",
                          "--task-index",        "0",         "--keep-serving", "--tls-cert", cert,
                          "--tls-key",           key,         "--tls-ca",       ca,           NULL};
    pid_t ps = dt_test_spawn(argv, log);
    ck_assert_int_gt(ps, 0);
    tls_env("chief");
    pid_t chief = dt_test_job_start(&w, "worker", 0, "chief");
    tls_env("worker-1");
    pid_t worker = dt_test_job_start(&w, "worker", 1, "worker1");
    dt_test_job_expect_exit(&w, chief, "chief", JOB_TIMEOUT_MS, 0);
    dt_test_job_expect_exit(&w, worker, "worker 1", JOB_TIMEOUT_MS, 0);

    char tool_cert[1300], tool_key[1300];
    dt_rpc_security tool = {cert_path(tool_cert, sizeof tool_cert, "tool.pem"),
                            cert_path(tool_key, sizeof tool_key, "tool-key.pem"), ca, NULL, NULL};
    char msg[DT_ERR_MSG_MAX];
    dt_msg_status_resp before, after;
    ck_assert_msg(status_as(&tool, -1, &before, msg, sizeof msg) == 0, "tool Status: %s", msg);
    ck_assert_int_eq(before.global_step, 300);

    /* Handshakes that must fail: the ps never sees a call. */
    int rc = status_as(NULL, -1, &after, msg, sizeof msg);
    expect_refused(rc, DT_EUNAVAILABLE, msg, "UNAVAILABLE", NULL, "plaintext client");
    ck_assert_msg(dt_test_job_wait_log(&w, "ps0", "tls: Handshake failed", 5000, ps),
                  "the ps did not log the failed handshake; logs:%s", dt_test_job_report(&w));
    dt_rpc_security no_cert = {NULL, NULL, ca, NULL, NULL};
    rc = status_as(&no_cert, -1, &after, msg, sizeof msg);
    expect_refused(rc, DT_EUNAVAILABLE, msg, "UNAVAILABLE", NULL,
                   "TLS client without a certificate");

    char other[1300], cmd[8192];
    snprintf(other, sizeof other, "%s/other", w.dir);
    snprintf(cmd, sizeof cmd, "WORKERS=2 PS=1 sh scripts/make_certs.sh '%s' 2>/dev/null", other);
    sh(cmd);
    char other_cert[1400], other_key[1400];
    snprintf(other_cert, sizeof other_cert, "%s/tool.pem", other);
    snprintf(other_key, sizeof other_key, "%s/tool-key.pem", other);
    dt_rpc_security foreign = {other_cert, other_key, ca, NULL, NULL};
    rc = status_as(&foreign, -1, &after, msg, sizeof msg);
    expect_refused(rc, DT_EUNAVAILABLE, msg, "UNAVAILABLE", NULL, "certificate of another CA");

    /* Signed by the right CA, but its notAfter is before its notBefore. */
    char old_cert[1400], old_key[1400];
    snprintf(old_cert, sizeof old_cert, "%s/expired.pem", w.dir);
    snprintf(old_key, sizeof old_key, "%s/expired-key.pem", w.dir);
    snprintf(cmd, sizeof cmd,
             "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout '%s' "
             "-subj /CN=tool 2>/dev/null | openssl x509 -req -CA '%s' -CAkey '%s/ca-key.pem' "
             "-CAcreateserial -CAserial '%s/expired.srl' -days -1 -out '%s' 2>/dev/null",
             old_key, ca, certs, w.dir, old_cert);
    sh(cmd);
    dt_rpc_security expired = {old_cert, old_key, ca, NULL, NULL};
    rc = status_as(&expired, -1, &after, msg, sizeof msg);
    expect_refused(rc, DT_EUNAVAILABLE, msg, "UNAVAILABLE", NULL, "expired certificate");

    /* Authenticated, not allowed. */
    char w_cert[1300], w_key[1300];
    dt_rpc_security w1 = {cert_path(w_cert, sizeof w_cert, "worker-1.pem"),
                          cert_path(w_key, sizeof w_key, "worker-1-key.pem"), ca, NULL, NULL};
    rc = call_ps(&w1, METHOD("Shutdown"), msg, sizeof msg);
    expect_refused(rc, 0, msg, "PERMISSION_DENIED", "worker:1 may not call " METHOD("Shutdown"),
                   "worker Shutdown");
    rc = call_ps(&w1, METHOD("Create"), msg, sizeof msg);
    expect_refused(rc, 0, msg, "PERMISSION_DENIED", "worker:1 may not call " METHOD("Create"),
                   "worker Create");
    rc = call_ps(&tool, METHOD("Push"), msg, sizeof msg);
    expect_refused(rc, 0, msg, "PERMISSION_DENIED", "tool may not call " METHOD("Push"),
                   "tool Push");

    /* worker:3 is signed by the CA but the cluster has 2 workers. */
    snprintf(cmd, sizeof cmd, "WORKERS=4 PS=1 sh scripts/make_certs.sh '%s' 2>/dev/null", certs);
    sh(cmd);
    dt_rpc_security w3 = {cert_path(w_cert, sizeof w_cert, "worker-3.pem"),
                          cert_path(w_key, sizeof w_key, "worker-3-key.pem"), ca, NULL, NULL};
    rc = call_ps(&w3, METHOD("Pull"), msg, sizeof msg);
    expect_refused(rc, 0, msg, "PERMISSION_DENIED", "worker:3 is not in the cluster",
                   "worker outside the cluster");

    /* Still serving, nothing changed. */
    ck_assert_msg(dt_test_alive(ps), "the ps died; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(status_as(&tool, -1, &after, msg, sizeof msg) == 0, "tool Status: %s", msg);
    ck_assert_int_eq(after.global_step, before.global_step);
    ck_assert_msg(dt_test_job_wait_log(&w, "ps0", "refused a call: PERMISSION_DENIED", 5000, ps),
                  "no refusal logged; logs:%s", dt_test_job_report(&w));
}
END_TEST

START_TEST(token_refusals) {
    dt_test_job_cluster(&w, 1, 2);
    char tokens[1200], wrong[1200];
    snprintf(tokens, sizeof tokens, "%s/tokens", w.dir);
    snprintf(wrong, sizeof wrong, "%s/wrong", w.dir);
    ck_assert_int_eq(dt_test_write_file(tokens, "chief c-1\nworker:1 w-1\ntool t-1\n"), 0);
    ck_assert_int_eq(dt_test_write_file(wrong, "chief c-2\nworker:1 w-2\ntool t-2\n"), 0);
    setenv("DTRAIN_TOKEN_FILE", tokens, 1);
    pid_t ps = dt_test_job_start_serving(&w, "ps", 0, "ps0");
    unsetenv("DTRAIN_TOKEN_FILE");
    dt_rpc_security tool = {NULL, NULL, NULL, tokens, NULL};
    wait_ps(&tool);

    char msg[DT_ERR_MSG_MAX];
    dt_msg_status_resp st;
    int rc = status_as(NULL, -1, &st, msg, sizeof msg);
    expect_refused(rc, DT_EPERM, msg, "UNAUTHENTICATED", "no bearer token", "no token");
    dt_rpc_security bad = {NULL, NULL, NULL, wrong, NULL};
    rc = status_as(&bad, -1, &st, msg, sizeof msg);
    expect_refused(rc, DT_EPERM, msg, "UNAUTHENTICATED", "wrong token", "wrong token");
    /* A right token proves worker:1, whatever identity it claims. */
    dt_rpc_security liar = {NULL, NULL, NULL, tokens, "worker:1"};
    rc = call_ps(&liar, METHOD("Shutdown"), msg, sizeof msg);
    expect_refused(rc, 0, msg, "PERMISSION_DENIED", "worker:1 may not call " METHOD("Shutdown"),
                   "worker Shutdown");
    /* The health check is open: a probe carries no token. */
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", w.ports[0]);
    dt_health_status health = DT_HEALTH_UNKNOWN;
    dt_err herr;
    dt_err_clear(&herr);
    ck_assert_msg(dt_health_check(addr, "", NULL, 5000, &health, &herr) == 0,
                  "health without a token: %s", herr.msg);
    ck_assert_int_eq(health, DT_HEALTH_NOT_SERVING); /* no chief yet */

    ck_assert_msg(dt_test_alive(ps), "the ps died; logs:%s", dt_test_job_report(&w));
    ck_assert_msg(status_as(&tool, -1, &st, msg, sizeof msg) == 0, "tool Status: %s", msg);
    ck_assert_msg(dt_test_job_wait_log(&w, "ps0", "refused a call: UNAUTHENTICATED", 5000, ps),
                  "no refusal logged; logs:%s", dt_test_job_report(&w));
    /* Stopped, the ps says how many calls it refused: no token, wrong token
     * and the worker's Shutdown. */
    ck_assert_int_eq(kill(ps, SIGTERM), 0);
    dt_test_job_expect_exit(&w, ps, "ps 0", 20000, 143);
    ck_assert_msg(dt_test_job_log_has(&w, "ps0", "3 calls refused in all"),
                  "no refusal count at exit; logs:%s", dt_test_job_report(&w));
}
END_TEST

START_TEST(shared_token) {
    dt_test_job_cluster(&w, 1, 2);
    char tokens[1200];
    snprintf(tokens, sizeof tokens, "%s/tokens", w.dir);
    ck_assert_int_eq(dt_test_write_file(tokens, "# one shared token\nsh-4d21f0\n"), 0);
    setenv("DTRAIN_TOKEN_FILE", tokens, 1);
    pid_t ps = dt_test_job_start_serving(&w, "ps", 0, "ps0");
    unsetenv("DTRAIN_TOKEN_FILE");
    dt_rpc_security tool = {NULL, NULL, NULL, tokens, "tool"};
    wait_ps(&tool);
    char msg[DT_ERR_MSG_MAX];
    /* The claim is trusted: worker:1 is a worker, worker:9 is outside. */
    dt_rpc_security w1 = {NULL, NULL, NULL, tokens, "worker:1"};
    int rc = call_ps(&w1, METHOD("Shutdown"), msg, sizeof msg);
    expect_refused(rc, 0, msg, "PERMISSION_DENIED", "worker:1 may not call " METHOD("Shutdown"),
                   "worker Shutdown");
    dt_rpc_security w9 = {NULL, NULL, NULL, tokens, "worker:9"};
    rc = call_ps(&w9, METHOD("Pull"), msg, sizeof msg);
    expect_refused(rc, 0, msg, "PERMISSION_DENIED", "worker:9 is not in the cluster",
                   "worker outside the cluster");
    /* The right token with no identity, or one that is none: the refusal
     * says the token is right and what is wrong with the identity. */
    dt_rpc_security anonymous = {NULL, NULL, NULL, tokens, ""};
    dt_msg_status_resp st;
    rc = status_as(&anonymous, -1, &st, msg, sizeof msg);
    expect_refused(rc, DT_EPERM, msg, "UNAUTHENTICATED",
                   "the token is right but the call names no identity", "no identity");
    ck_assert_msg(strstr(msg, "dtrain-identity"), "\"%s\" does not name the header", msg);
    dt_rpc_security root = {NULL, NULL, NULL, tokens, "root"};
    rc = status_as(&root, -1, &st, msg, sizeof msg);
    expect_refused(rc, DT_EPERM, msg, "UNAUTHENTICATED",
                   "the token is right but the identity \"root\" is not one", "bad identity");
    ck_assert_msg(dt_test_alive(ps), "the ps died; logs:%s", dt_test_job_report(&w));
}
END_TEST

/* ---- certificate rotation ------------------------------------------------------- */

/* Copies src over dst by a rename, as a deployment tool would. */
static void replace_file(const char *src, const char *dst) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s.new' && mv '%s.new' '%s'", src, dst, dst, dst);
    sh(cmd);
}

START_TEST(cert_reload) {
    make_certs();
    dt_test_job_cluster(&w, 1, 2);
    char served[1200], other[1200], cmd[8192];
    snprintf(served, sizeof served, "%s/served", w.dir);
    snprintf(other, sizeof other, "%s/other", w.dir);
    snprintf(cmd, sizeof cmd, "mkdir '%s' && cp '%s'/ps-0.pem '%s'/ps-0-key.pem '%s'/ca.pem '%s'",
             served, certs, certs, certs, served);
    sh(cmd);
    snprintf(cmd, sizeof cmd, "WORKERS=2 PS=1 sh scripts/make_certs.sh '%s' 2>/dev/null", other);
    sh(cmd);
    char path[3][1300];
    snprintf(path[0], sizeof path[0], "%s/ps-0.pem", served);
    snprintf(path[1], sizeof path[1], "%s/ps-0-key.pem", served);
    snprintf(path[2], sizeof path[2], "%s/ca.pem", served);
    setenv("DTRAIN_TLS_CERT", path[0], 1);
    setenv("DTRAIN_TLS_KEY", path[1], 1);
    setenv("DTRAIN_TLS_CA", path[2], 1);
    pid_t ps = dt_test_job_start_serving(&w, "ps", 0, "ps0");
    unsetenv("DTRAIN_TLS_CERT");
    unsetenv("DTRAIN_TLS_KEY");
    unsetenv("DTRAIN_TLS_CA");

    char cert[1300], key[1300], ca[1300];
    dt_rpc_security old_tool = {cert_path(cert, sizeof cert, "tool.pem"),
                                cert_path(key, sizeof key, "tool-key.pem"),
                                cert_path(ca, sizeof ca, "ca.pem"), NULL, NULL};
    char new_cert[1300], new_key[1300], new_ca[1300];
    snprintf(new_cert, sizeof new_cert, "%s/tool.pem", other);
    snprintf(new_key, sizeof new_key, "%s/tool-key.pem", other);
    snprintf(new_ca, sizeof new_ca, "%s/ca.pem", other);
    dt_rpc_security new_tool = {new_cert, new_key, new_ca, NULL, NULL};
    wait_ps(&old_tool);
    char msg[DT_ERR_MSG_MAX];
    dt_msg_status_resp st;
    ck_assert_int_eq(status_as(&new_tool, -1, &st, msg, sizeof msg), DT_EUNAVAILABLE);

    /* Rotate to the other CA's files: new connections use them. */
    char src[1300];
    snprintf(src, sizeof src, "%s/ps-0-key.pem", other);
    replace_file(src, path[1]);
    snprintf(src, sizeof src, "%s/ps-0.pem", other);
    replace_file(src, path[0]);
    replace_file(new_ca, path[2]);
    wait_ps(&new_tool);
    ck_assert_int_eq(status_as(&old_tool, -1, &st, msg, sizeof msg), DT_EUNAVAILABLE);
    ck_assert_msg(dt_test_job_wait_log(&w, "ps0", "TLS certificates reloaded", 5000, ps),
                  "no reload logged; logs:%s", dt_test_job_report(&w));

    /* SIGHUP: the same files are read again at the next handshake. */
    ck_assert_int_eq(kill(ps, SIGHUP), 0);
    long long deadline = dt_test_now_ms() + READY_MS;
    for (;;) {
        ck_assert_msg(status_as(&new_tool, -1, &st, msg, sizeof msg) == 0, "after SIGHUP: %s", msg);
        char *log = dt_test_job_read_log(&w, "ps0");
        const char *first = strstr(log, "TLS certificates reloaded");
        int twice = first && strstr(first + 1, "TLS certificates reloaded");
        free(log);
        if (twice) break;
        ck_assert_msg(dt_test_now_ms() < deadline, "no reload after SIGHUP; logs:%s",
                      dt_test_job_report(&w));
        dt_test_sleep_ms(100);
    }
    ck_assert_msg(dt_test_alive(ps), "the ps died; logs:%s", dt_test_job_report(&w));
}
END_TEST

/* ---- flags ----------------------------------------------------------------------- */

START_TEST(flags) {
    make_certs();
    dt_test_job_cluster(&w, 1, 2);
    char cert[1300], key[1300], ca[1300];
    cert_path(cert, sizeof cert, "chief.pem");
    cert_path(key, sizeof key, "chief-key.pem");
    cert_path(ca, sizeof ca, "ca.pem");
    const char *const help[] = {"--help", NULL};
    ck_assert_int_eq(dt_test_job_command(&w, help, 10000), 0);
    ck_assert_msg(strstr(w.out, "--tls-cert FILE") && strstr(w.out, "--tls-ca FILE") &&
                      strstr(w.out, "--token-file FILE") && strstr(w.out, "DTRAIN_TLS_CERT"),
                  "--help lacks the security flags:\n%s", w.out);
    const char *const no_key[] = {"--cluster",  w.cluster, "--job",    "worker", "--task", "0",
                                  "--tls-cert", cert,      "--tls-ca", ca,       NULL};
    dt_test_job_expect_error(&w, dt_test_job_command(&w, no_key, 10000), 2, "--tls-cert",
                             "--tls-key", "together");
    const char *const no_ca[] = {"--cluster",  w.cluster, "--job",     "worker", "--task", "0",
                                 "--tls-cert", cert,      "--tls-key", key,      NULL};
    dt_test_job_expect_error(&w, dt_test_job_command(&w, no_ca, 10000), 2, "--tls-ca", NULL, NULL);
    const char *const missing[] = {
        "--cluster", w.cluster,    "--job", "ps",        "--task",
        "0",         "--tls-cert", cert,    "--tls-key", "/nonexistent/key.pem",
        "--tls-ca",  ca,           NULL};
    dt_test_job_expect_error(&w, dt_test_job_command(&w, missing, 10000), 2, "--tls-key",
                             "/nonexistent/key.pem", "cannot read");
    /* A file that is there but not PEM: the ps fails at start naming it. */
    char junk[1200];
    snprintf(junk, sizeof junk, "%s/junk.pem", w.dir);
    ck_assert_int_eq(dt_test_write_file(junk, "not a certificate\n"), 0);
    const char *const bad[] = {"--cluster", w.cluster,    "--job", "ps",        "--task",
                               "0",         "--tls-cert", junk,    "--tls-key", key,
                               "--tls-ca",  ca,           NULL};
    dt_test_job_expect_error(&w, dt_test_job_command(&w, bad, 10000), 1, junk, "not a PEM file",
                             NULL);
    /* The environment is used when no flag is given; a flag wins. */
    setenv("DTRAIN_TLS_KEY", "/nonexistent/env-key.pem", 1);
    const char *const env[] = {"--cluster",  w.cluster, "--job",    "ps", "--task", "0",
                               "--tls-cert", cert,      "--tls-ca", ca,   NULL};
    dt_test_job_expect_error(&w, dt_test_job_command(&w, env, 10000), 2, "--tls-key",
                             "/nonexistent/env-key.pem", NULL);
    /* ... and the flag wins: this worker gets past its files to wait for
     * the ps (not running), and gives up as unreachable. */
    const char *const wins[] = {
        "--cluster", w.cluster,   "--job", "worker",   "--task", "0",     "--tls-cert",
        cert,        "--tls-key", key,     "--tls-ca", ca,       "--set", "ready_wait_secs=1",
        "--log-dir", w.log_dir,   NULL};
    int status = dt_test_job_command(&w, wins, 30000);
    ck_assert_msg(status == 200, "exit %d, want 200 (peer unreachable); stderr:\n%s", status,
                  w.err);
    unsetenv("DTRAIN_TLS_KEY");
}
END_TEST

/* ---- token files and identities (no processes) ----------------------------------- */

START_TEST(token_file_parsing) {
    char path[1200];
    snprintf(path, sizeof path, "%s/t", w.dir);
    dt_err err;
    dt_auth_tokens *t = NULL;
    ck_assert_int_eq(dt_test_write_file(path, "  # comment\n\nshared-secret  # trailing\n"), 0);
    ck_assert_int_eq(dt_auth_tokens_load(path, &t, &err), 0);
    /* Shared mode: every identity sends the one token. */
    ck_assert_str_eq(dt_auth_tokens_for(t, "worker:7"), "shared-secret");
    ck_assert_str_eq(dt_auth_tokens_for(t, "tool"), "shared-secret");
    dt_rpc_peer peer;
    ck_assert_int_eq(dt_auth_tokens_check(t, "shared-secret", 13, "worker:7", &peer), 0);
    ck_assert_int_eq(peer.role, DT_PEER_WORKER);
    ck_assert_int_eq(peer.task, 7);
    /* Which of token and identity is wrong: each has its own answer. */
    ck_assert_int_eq(dt_auth_tokens_check(t, "shared-secreT", 13, "worker:7", &peer),
                     DT_AUTH_WRONG_TOKEN);
    ck_assert_int_eq(dt_auth_tokens_check(t, "shared-secreT", 13, NULL, &peer),
                     DT_AUTH_WRONG_TOKEN);
    ck_assert_int_eq(dt_auth_tokens_check(t, "shared-secret", 13, "root", &peer),
                     DT_AUTH_BAD_IDENTITY);
    ck_assert_int_eq(dt_auth_tokens_check(t, "shared-secret", 13, NULL, &peer),
                     DT_AUTH_NO_IDENTITY);
    ck_assert_int_eq(dt_auth_tokens_check(t, "shared-secret", 13, "", &peer), DT_AUTH_NO_IDENTITY);
    dt_auth_tokens_free(t);

    ck_assert_int_eq(dt_test_write_file(path, "chief a\nworker:2 b\n"), 0);
    ck_assert_int_eq(dt_auth_tokens_load(path, &t, &err), 0);
    /* Identity mode: an identity the file does not list has no token. */
    ck_assert_str_eq(dt_auth_tokens_for(t, "worker:2"), "b");
    ck_assert_ptr_null(dt_auth_tokens_for(t, "tool"));
    ck_assert_int_eq(dt_auth_tokens_check(t, "b", 1, "chief", &peer), 0);
    ck_assert_str_eq(peer.name, "worker:2"); /* the token decides, not the claim */
    dt_auth_tokens_free(t);

    static const char *const bad[][2] = {
        {"chief a\nshared\n", ":2: a shared token must be the file's only entry"},
        {"boss a\n", ":1: \"boss\" is not an identity"},
        {"chief a\nchief b\n", ":2: identity chief listed twice"},
        {"chief a b\n", ":1: expected"},
        {"# nothing\n", "no token in the file"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(dt_test_write_file(path, bad[i][0]), 0);
        dt_err_clear(&err);
        ck_assert_int_eq(dt_auth_tokens_load(path, &t, &err), DT_EINVAL);
        ck_assert_msg(strstr(err.msg, bad[i][1]), "\"%s\" lacks \"%s\"", err.msg, bad[i][1]);
    }
    /* What the table cannot hold: a line over 1023 bytes, a token too long
     * for DT_AUTH_TOKEN_MAX or with a control byte, one entry too many. */
    char *text = malloc(64 * (DT_AUTH_MAX_ENTRIES + 1) + 1);
    ck_assert_ptr_nonnull(text);
    memset(text, 'x', 1100);
    text[1100] = '\n';
    text[1101] = '\0';
    const char *const why[] = {":1: line too long", ":1: a token is 1..255 printable characters",
                               ":2: a token is 1..255 printable characters",
                               ":1025: more than 1024 entries"};
    for (int i = 0; i < 4; i++) {
        if (i == 1) snprintf(text, 1101, "chief %0300d\n", 7);
        if (i == 2) snprintf(text, 1101, "chief a\nworker:1 b\001c\n");
        if (i == 3) {
            size_t n = 0;
            for (int e = 0; e <= DT_AUTH_MAX_ENTRIES; e++)
                n += (size_t)sprintf(text + n, "worker:%d token%d\n", e, e);
        }
        ck_assert_int_eq(dt_test_write_file(path, text), 0);
        dt_err_clear(&err);
        ck_assert_int_eq(dt_auth_tokens_load(path, &t, &err), DT_EINVAL);
        ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, why[i]), "\"%s\" lacks \"%s\"",
                      err.msg, why[i]);
        ck_assert_ptr_null(t);
    }
    free(text);
    /* A directory opens but does not read. */
    dt_err_clear(&err);
    ck_assert_int_eq(dt_auth_tokens_load(w.dir, &t, &err), DT_EIO);
    ck_assert_msg(strstr(err.msg, "read failed"), "%s", err.msg);
    ck_assert_int_eq(dt_auth_parse_identity("worker:x", &peer), -1);
    ck_assert_int_eq(dt_auth_parse_identity("chief", &peer), 0);
    ck_assert_int_eq(peer.task, 0);
    ck_assert(dt_auth_equal("abc", 3, "abc", 3));
    ck_assert(!dt_auth_equal("abc", 3, "abcd", 4));
}
END_TEST

static void add_case(Suite *s, const char *name, const TTest *test) {
    tcase_add_test(dt_test_job_tcase(s, name, TEST_TIMEOUT_S, setup, teardown), test);
}

Suite *tls_suite(void) {
    Suite *s = suite_create("tls");
    add_case(s, "mtls_job", mtls_job);
    add_case(s, "tls_only_job", tls_only_job);
    add_case(s, "token_job", token_job);
    add_case(s, "mtls_refusals", mtls_refusals);
    add_case(s, "token_refusals", token_refusals);
    add_case(s, "shared_token", shared_token);
    add_case(s, "cert_reload", cert_reload);
    add_case(s, "flags", flags);
    add_case(s, "token_file_parsing", token_file_parsing);
    return s;
}
