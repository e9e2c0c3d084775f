/*
 * Suite "metrics": /metrics on every role.
 *   exposition: the text format of counters, gauges and histograms, label
 *     values escaped under hostile text; Debian's promtool (check metrics)
 *     accepts the page.
 *   every_role: a job's ps, chief, worker and evaluator each serve
 *     /metrics (--metrics-port 0: a free port, read from the log line);
 *     each page passes promtool and holds its role's families.
 *   prometheus_scrape: Debian's Prometheus server scrapes a job's roles
 *     every second; once it has two scrapes of the ps, its HTTP API's
 *     dtrain_ps_global_step and pushes agree with the ps's Status and a
 *     push latency quantile (histogram_quantile) with the ps's own page.
 *     Skipped, saying so, when /usr/bin/prometheus is absent.
 * Every wait is on an event (a log line, a query's answer) with a
 * deadline; the teardown stops every process started.
 */
#include <arpa/inet.h>
#include <cJSON.h>
#include <check.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "codec.h"
#include "log.h"
#include "metrics.h"
#include "proc.h"
#include "ps_client.h"
#include "suites.h"
#include "testjob.h"

#define PROMTOOL "/usr/bin/promtool"
#define PROMETHEUS "/usr/bin/prometheus"
#define PYTHON "/usr/bin/python3"
#define WAIT_MS 60000

static dt_test_job job;

static void setup(void) {
    dt_test_job_setup(&job);
}

static void teardown(void) {
    dt_test_job_teardown(&job);
}

/* GET path from 127.0.0.1:port: the body (heap) and the status code. */
static char *http_get(int port, const char *path, int *status) {
    *status = -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return NULL;
    }
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    ck_assert(write(fd, req, (size_t)n) == n);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    for (;;) {
        if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
        ck_assert_ptr_nonnull(buf);
        ssize_t r = read(fd, buf + len, cap - len - 1);
        if (r <= 0) break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = '\0';
    sscanf(buf, "HTTP/1.%*d %d", status);
    char *body = strstr(buf, "\r\n\r\n");
    if (!body) {
        free(buf);
        return NULL;
    }
    memmove(buf, body + 4, strlen(body + 4) + 1);
    return buf;
}

/* promtool check metrics over the text; its exit status (output on stderr). */
static int promtool(const char *text, const char *name) {
    char in[1200], out[1200], cmd[3000];
    snprintf(in, sizeof in, "%s/%s.prom", job.dir, name);
    snprintf(out, sizeof out, "%s/%s.promtool", job.dir, name);
    ck_assert_int_eq(dt_test_write_file(in, text), 0);
    /* promtool reads the page on its standard input. */
    snprintf(cmd, sizeof cmd, "exec %s check metrics < '%s'", PROMTOOL, in);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    pid_t pid = dt_test_spawn_split(argv, out, out);
    ck_assert(pid > 0);
    int status = dt_test_wait(pid, 60000);
    char *said = dt_test_read_file(out, NULL);
    if (status != 0 || (said && *said)) fprintf(stderr, "promtool on %s: %s\n", name, said);
    int clean = said && !*said; /* lint findings are printed, exit 0 or not */
    free(said);
    return status != 0 ? status : clean ? 0 : 1;
}

/* ---- exposition ------------------------------------------------------- */

static dt_counter hostile_count;
static dt_histogram latency;

static void hostile_collector(void *ctx, dt_metrics_out *o) {
    (void)ctx;
    static const char *const values[] = {"plain",
                                         "q\"uote",
                                         "back\\slash",
                                         "new\nline",
                                         "ctl\x01\x7f",
                                         "bad \xff\xc0\xaf utf8",
                                         "\xc3\xa4\xf0\x9f\x99\x82"};
    dt_metrics_family(o, "dtrain_test_things_total", "counter", "Things, by hostile name.");
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char labels[DT_METRICS_LABELS_MAX] = "";
        dt_metrics_sample(o, "dtrain_test_things_total",
                          dt_metrics_label(labels, sizeof labels, "name", values[i]),
                          (double)dt_counter_get(&hostile_count) + (double)i);
    }
    dt_metrics_family(o, "dtrain_test_latency_seconds", "histogram", "Latency.");
    dt_metrics_histogram(o, "dtrain_test_latency_seconds", "method=\"Push\"", &latency);
    dt_metrics_family(o, "dtrain_test_ratio", "gauge", "Not a number yet.");
    dt_metrics_sample(o, "dtrain_test_ratio", NULL, NAN);
}

START_TEST(exposition) {
    static const double bounds[3] = {0.001, 0.01, 0.1};
    latency.bounds = bounds;
    latency.num_bounds = 3;
    dt_histogram_observe(&latency, 0.0005);
    dt_histogram_observe(&latency, 0.001); /* on a bound: that bucket */
    dt_histogram_observe(&latency, 0.05);
    dt_histogram_observe(&latency, 5);
    dt_histogram_observe(&latency, NAN); /* not counted */
    dt_counter_add(&hostile_count, 41);
    dt_log_set_role('W');
    dt_log_set_task(2);
    dt_log_set_job_id("job \"7\"");
    ck_assert_int_eq(dt_metrics_add(hostile_collector, NULL, NULL), 0);
    char *text = NULL;
    size_t len = 0;
    ck_assert_int_eq(dt_metrics_render(&text, &len, NULL), 0);
    dt_metrics_remove(hostile_collector, NULL);
    dt_log_set_job_id(NULL);
    dt_log_set_role('-');
    dt_log_set_task(-1);
    ck_assert_uint_eq(strlen(text), len);
    const char *want[] = {
        "# TYPE dtrain_test_things_total counter\n",
        "dtrain_test_things_total{job_id=\"job "
        "\\\"7\\\"\",role=\"worker\",task=\"2\",name=\"plain\"} 41\n",
        "name=\"q\\\"uote\"} 42\n",
        "name=\"back\\\\slash\"} 43\n",
        "name=\"new\\nline\"} 44\n",
        "name=\"ctl  \"} 45\n",
        "name=\"bad \\\\xff\\\\xc0\\\\xaf utf8\"} 46\n",
        "method=\"Push\",le=\"0.001\"} 2\n",
        "method=\"Push\",le=\"0.01\"} 2\n",
        "method=\"Push\",le=\"0.10000000000000001\"} 3\n",
        "method=\"Push\",le=\"+Inf\"} 4\n",
        "dtrain_test_latency_seconds_count{job_id=\"job "
        "\\\"7\\\"\",role=\"worker\",task=\"2\",method=\"Push\"} 4\n",
        "dtrain_test_ratio{job_id=\"job \\\"7\\\"\",role=\"worker\",task=\"2\"} NaN\n",
        "# TYPE process_resident_memory_bytes gauge\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(text, want[i]), "no %s in:\n%s", want[i], text);
    ck_assert_int_eq(promtool(text, "exposition"), 0);
    free(text);
}
END_TEST

/* ---- a job's roles ------------------------------------------------------- */

/* The port a role's log says its /metrics is on. */
static int metrics_port_of(const char *log_name, pid_t pid) {
    char path[1200];
    dt_test_job_log_path(&job, log_name, path, sizeof path);
    ck_assert_msg(dt_test_wait_log(path, "/metrics (plain HTTP)", WAIT_MS, pid) == 1,
                  "%s: no metrics line: %s", log_name, dt_test_job_report(&job));
    char *text = dt_test_job_read_log(&job, log_name);
    const char *at = strstr(text, "metrics: serving http://");
    ck_assert_ptr_nonnull(at);
    const char *end = strstr(at, "/metrics (plain");
    const char *colon = end;
    while (colon > at && *colon != ':')
        colon--;
    int port = atoi(colon + 1);
    free(text);
    ck_assert_int_gt(port, 0);
    return port;
}

/* The job id the chief logged ("chief: job id <32 hex> ("), into id. */
static void chief_job_id(char *id, size_t cap) {
    char *text = dt_test_job_read_log(&job, "chief");
    const char *at = text ? strstr(text, "chief: job id ") : NULL;
    ck_assert_msg(at, "the chief logged no job id: %.2000s", text ? text : "(no log)");
    at += strlen("chief: job id ");
    size_t n = strspn(at, "0123456789abcdef");
    ck_assert_int_eq(n, 32);
    snprintf(id, cap, "%.*s", (int)n, at);
    free(text);
}

/* A sample's labels as every role renders them once it knows the job:
 * {job_id="...",role="R",task="T"}, less the closing brace when open. */
static const char *labels(const char *id, const char *role, int task, int open) {
    static char out[4][160];
    static int next;
    char *l = out[next++ % 4];
    snprintf(l, sizeof out[0], "{job_id=\"%s\",role=\"%s\",task=\"%d\"%s", id, role, task,
             open ? "," : "}");
    return l;
}

/* The role's page, checked by promtool; heap. */
static char *scrape(const char *log_name, pid_t pid) {
    int status = 0;
    char *page = http_get(metrics_port_of(log_name, pid), "/metrics", &status);
    ck_assert_msg(page && status == 200, "%s: GET /metrics: %d", log_name, status);
    ck_assert_msg(promtool(page, log_name) == 0, "%s: promtool check metrics failed", log_name);
    return page;
}

static void expect_families(const char *page, const char *who, const char *const *names, int n) {
    for (int i = 0; i < n; i++) {
        char line[160];
        snprintf(line, sizeof line, "# TYPE %s ", names[i]);
        ck_assert_msg(strstr(page, line), "%s: no family %s", who, names[i]);
    }
}

/* Every metric deploy/grafana/dtrain.json queries ("dtrain_..." or
 * "process_...", less a histogram's _bucket, _sum or _count) is a family
 * of one of the pages. */
static void dashboard_metrics_served(const char *pages) {
    size_t len = 0;
    char *dash = dt_test_read_file("deploy/grafana/dtrain.json", &len);
    ck_assert_msg(dash,
                  "cannot read deploy/grafana/dtrain.json (the suite runs from the checkout)");
    int checked = 0;
    for (const char *e = dash; (e = strstr(e, "\"expr\": \"")) != NULL; e++) {
        const char *end = strchr(e + 9, '\n');
        for (const char *p = e + 9; end && p < end; p++) {
            if (strncmp(p, "dtrain_", 7) != 0 && strncmp(p, "process_", 8) != 0) continue;
            if ((p[-1] >= 'a' && p[-1] <= 'z') || p[-1] == '_') continue;
            char name[128];
            size_t n = 0;
            while (n < sizeof name - 1 && ((p[n] >= 'a' && p[n] <= 'z') || p[n] == '_')) {
                name[n] = p[n];
                n++;
            }
            name[n] = '\0';
            p += n;
            static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
            for (int k = 0; k < 3; k++) {
                size_t sl = strlen(suffixes[k]);
                if (n > sl && strcmp(name + n - sl, suffixes[k]) == 0) name[n - sl] = '\0';
            }
            char type[160];
            snprintf(type, sizeof type, "# TYPE %s ", name);
            ck_assert_msg(strstr(pages, type), "the dashboard queries %s, which no role serves",
                          name);
            checked++;
        }
    }
    ck_assert_int_gt(checked, 10);
    free(dash);
}

/* A logistic job on a small csv, with an evaluator: long enough to run
 * past the checks (the teardown stops it). */
static void csv_job(char *config, size_t cap) {
    char data[1200], text[4096];
    snprintf(data, sizeof data, "%s/data.csv", job.dir);
    ck_assert_int_eq(
        dt_test_write_file(data, "y,a,b\n1,0.5,1\n0,-1,2\n1,2,0\n0,-2,-1\n1,1,1\n0,-1,-1\n"), 0);
    snprintf(config, cap, "%s/job.json", job.dir);
    snprintf(text, sizeof text,
             "{\"model\": \"logistic\", \"features\": 2, \"data\": \"csv\", \"train_data\": "
             "\"%s\", \"eval_data\": \"%s\", \"label_column\": \"y\", \"batch_size\": 2, "
             "\"max_steps\": 100000000, \"save_model_secs\": 1, \"log_steps\": 20}",
             data, data);
    ck_assert_int_eq(dt_test_write_file(config, text), 0);
    job.config = config;
    job.args[job.num_args++] = "--metrics-port";
    job.args[job.num_args++] = "0";
}

START_TEST(every_role) {
    static char config[1200];
    dt_test_job_cluster(&job, 1, 2);
    csv_job(config, sizeof config);
    pid_t ps = dt_test_job_start(&job, "ps", 0, "ps0");
    pid_t chief = dt_test_job_start(&job, "worker", 0, "chief");
    pid_t worker = dt_test_job_start(&job, "worker", 1, "worker1");
    pid_t eval = dt_test_job_start(&job, "evaluator", 0, "evaluator");
    char path[1200];
    dt_test_job_log_path(&job, "evaluator", path, sizeof path);
    ck_assert_msg(dt_test_wait_log(path, "evaluator: global_step", WAIT_MS, eval) == 1, "%s",
                  dt_test_job_report(&job));
    dt_test_job_log_path(&job, "worker1", path, sizeof path);
    ck_assert_msg(dt_test_wait_log(path, " steps/s", WAIT_MS, worker) == 1, "%s",
                  dt_test_job_report(&job));
    dt_test_job_log_path(&job, "chief", path, sizeof path);
    ck_assert_msg(dt_test_wait_log(path, "chief: saved", WAIT_MS, chief) == 1, "%s",
                  dt_test_job_report(&job));

    size_t all_cap = 1 << 20; /* the pages together, for the dashboard's check */
    char *all = calloc(1, all_cap);
    ck_assert_ptr_nonnull(all);
    char id[64];
    chief_job_id(id, sizeof id);
    char want[256];
    char *page = scrape("ps0", ps);
    static const char *const ps_names[] = {"dtrain_ps_global_step",
                                           "dtrain_ps_pushes_total",
                                           "dtrain_ps_pulls_total",
                                           "dtrain_ps_checkpoint_reads_total",
                                           "dtrain_ps_staleness_steps",
                                           "dtrain_ps_variable_bytes",
                                           "dtrain_ps_slot_bytes",
                                           "dtrain_ps_refused_calls_total",
                                           "dtrain_rpc_server_calls_total",
                                           "dtrain_rpc_server_call_duration_seconds",
                                           "dtrain_rpc_server_received_bytes_total",
                                           "dtrain_rpc_server_sent_bytes_total",
                                           "dtrain_rpc_server_refused_calls_total",
                                           "dtrain_rpc_server_connections",
                                           "dtrain_rpc_server_inflight_request_bytes",
                                           "process_resident_memory_bytes"};
    expect_families(page, "ps", ps_names, (int)(sizeof ps_names / sizeof ps_names[0]));
    snprintf(want, sizeof want, "dtrain_ps_global_step%s ", labels(id, "ps", 0, 0));
    ck_assert_msg(strstr(page, want), "no %s in the ps's page: %.2000s", want, page);
    ck_assert(strstr(page, "method=\"Push\",code=\"OK\"}"));
    strncat(all, page, all_cap / 4 - 1);
    free(page);

    static const char *const worker_names[] = {"dtrain_worker_steps_total",
                                               "dtrain_worker_examples_total",
                                               "dtrain_worker_loss",
                                               "dtrain_worker_phase_seconds_total",
                                               "dtrain_worker_call_duration_seconds",
                                               "dtrain_worker_retries_total",
                                               "dtrain_worker_step_duration_seconds",
                                               "process_resident_memory_bytes"};
    page = scrape("worker1", worker);
    expect_families(page, "worker 1", worker_names, 8);
    snprintf(want, sizeof want, "dtrain_worker_steps_total%s ", labels(id, "worker", 1, 0));
    ck_assert_msg(strstr(page, want), "no %s in worker 1's page: %.2000s", want, page);
    ck_assert(!strstr(page, "dtrain_chief_"));
    strncat(all, page, all_cap / 4 - 1);
    free(page);

    page = scrape("chief", chief);
    static const char *const chief_names[] = {
        "dtrain_chief_last_checkpoint_step", "dtrain_chief_last_checkpoint_timestamp_seconds",
        "dtrain_chief_checkpoint_save_duration_seconds", "dtrain_summaries_dropped_total",
        "dtrain_disk_full_events_total"};
    expect_families(page, "chief", worker_names, 8);
    expect_families(page, "chief", chief_names, 5);
    snprintf(want, sizeof want, "dtrain_chief_last_checkpoint_step%s ", labels(id, "chief", 0, 0));
    ck_assert_msg(strstr(page, want), "no %s in the chief's page: %.2000s", want, page);
    strncat(want, "0\n", sizeof want - strlen(want) - 1);
    ck_assert(!strstr(page, want));
    strncat(all, page, all_cap / 4 - 1);
    free(page);

    page = scrape("evaluator", eval);
    static const char *const eval_names[] = {"dtrain_evaluator_last_scored_step",
                                             "dtrain_evaluator_loss", "dtrain_evaluator_accuracy",
                                             "dtrain_evaluator_checkpoints_scored_total"};
    expect_families(page, "evaluator", eval_names, 4);
    snprintf(want, sizeof want, "dtrain_evaluator_last_scored_step%s ",
             labels(id, "evaluator", 0, 0));
    ck_assert_msg(strstr(page, want), "no %s in the evaluator's page: %.2000s", want, page);
    strncat(want, "0\n", sizeof want - strlen(want) - 1);
    ck_assert(!strstr(page, want));
    strncat(all, page, all_cap / 4 - 1);
    free(page);

    dashboard_metrics_served(all);
    free(all);

    /* Anything but /metrics: 404. */
    int status = 0;
    free(http_get(metrics_port_of("ps0", ps), "/nothing", &status));
    ck_assert_int_eq(status, 404);
}
END_TEST

/* ---- a real scrape ------------------------------------------------------ */

/* query, URL-encoded (RFC 3986 unreserved kept), into buf. */
static void url_encode(const char *query, char *buf, size_t cap) {
    size_t n = 0;
    for (const unsigned char *q = (const unsigned char *)query; *q && n + 4 < cap; q++)
        if ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
            strchr("-_.~", *q))
            buf[n++] = (char)*q;
        else
            n += (size_t)snprintf(buf + n, cap - n, "%%%02X", *q);
    buf[n] = '\0';
}

/* The value of an instant query's first sample (NAN when it has none). */
static double prom_query(int port, const char *query) {
    char enc[1024], path[1200];
    url_encode(query, enc, sizeof enc);
    snprintf(path, sizeof path, "/api/v1/query?query=%s", enc);
    int status = 0;
    char *body = http_get(port, path, &status);
    double v = NAN;
    cJSON *root = body && status == 200 ? cJSON_Parse(body) : NULL;
    const cJSON *result = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "data"), "result");
    const cJSON *value = cJSON_GetObjectItem(cJSON_GetArrayItem(result, 0), "value");
    const cJSON *text = cJSON_GetArrayItem(value, 1);
    if (cJSON_IsString(text)) v = strtod(text->valuestring, NULL);
    cJSON_Delete(root);
    free(body);
    return v;
}

/* The bounds around the q-quantile of the Push latency in the ps's page:
 * the bucket where the cumulative count reaches q of the total. */
static void push_quantile_bucket(const char *page, const char *id, double q, double *lower,
                                 double *upper) {
    char key[256];
    snprintf(key, sizeof key,
             "dtrain_rpc_server_call_duration_seconds_bucket%smethod=\"Push\",le=\"",
             labels(id, "ps", 0, 1));
    double bounds[64], counts[64];
    int n = 0;
    for (const char *at = page; (at = strstr(at, key)) != NULL && n < 64; at++) {
        const char *le = at + strlen(key);
        bounds[n] = strncmp(le, "+Inf", 4) == 0 ? INFINITY : strtod(le, NULL);
        counts[n++] = strtod(strstr(le, "} ") + 2, NULL);
    }
    ck_assert_int_gt(n, 1);
    double total = counts[n - 1];
    ck_assert(total > 0);
    int k = 0;
    while (k < n - 1 && counts[k] < q * total)
        k++;
    *lower = k ? bounds[k - 1] : 0;
    *upper = bounds[k];
}

START_TEST(prometheus_scrape) {
    if (access(PROMETHEUS, X_OK) != 0) {
        fprintf(stderr,
                "metrics: prometheus_scrape SKIPPED: no %s (Debian's prometheus "
                "package; scripts/install_deps.sh installs it)\n",
                PROMETHEUS);
        return;
    }
    dt_test_job_cluster(&job, 1, 2);
    static const char *const sets[] = {"max_steps=1500", "log_steps=100"};
    dt_test_job_set(&job, sets, 2);
    job.args[job.num_args++] = "--metrics-port";
    job.args[job.num_args++] = "0";
    /* The ps keeps serving once the job is done: its values then stand
     * still, so Prometheus's and Status's are the same numbers. */
    pid_t ps = dt_test_job_start_serving(&job, "ps", 0, "ps0");
    pid_t chief = dt_test_job_start(&job, "worker", 0, "chief");
    pid_t worker = dt_test_job_start(&job, "worker", 1, "worker1");
    int ports[3] = {metrics_port_of("ps0", ps), metrics_port_of("chief", chief),
                    metrics_port_of("worker1", worker)};
    char config[1200], tsdb[1200], text[2048], listen[64];
    int prom_port = dt_test_free_port();
    ck_assert_int_gt(prom_port, 0);
    snprintf(config, sizeof config, "%s/prometheus.yml", job.dir);
    snprintf(tsdb, sizeof tsdb, "--storage.tsdb.path=%s/tsdb", job.dir);
    snprintf(text, sizeof text,
             "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
             "scrape_configs:\n  - job_name: dtrain\n    static_configs:\n"
             "      - targets: ['127.0.0.1:%d', '127.0.0.1:%d', '127.0.0.1:%d']\n",
             ports[0], ports[1], ports[2]);
    ck_assert_int_eq(dt_test_write_file(config, text), 0);
    char config_flag[1300], log[1200];
    snprintf(config_flag, sizeof config_flag, "--config.file=%s", config);
    snprintf(listen, sizeof listen, "--web.listen-address=127.0.0.1:%d", prom_port);
    snprintf(log, sizeof log, "%s/prometheus.log", job.dir);
    char *argv[] = {PROMETHEUS, config_flag, tsdb, listen, NULL};
    pid_t prom = dt_test_spawn(argv, log);
    ck_assert(prom > 0);
    dt_test_job_expect_exit(&job, chief, "chief", WAIT_MS, 0);
    dt_test_job_expect_exit(&job, worker, "worker 1", WAIT_MS, 0);

    /* Two scrapes of the ps, the last one after the job's end (bounded). */
    double scrapes = NAN, done = NAN;
    long long deadline = dt_test_now_ms() + WAIT_MS;
    while (dt_test_now_ms() < deadline && dt_test_alive(prom)) {
        scrapes = prom_query(prom_port, "count_over_time(dtrain_ps_done{role=\"ps\"}[5m])");
        done = prom_query(prom_port, "dtrain_ps_done{role=\"ps\"}");
        if (scrapes >= 2 && done == 1) break;
        dt_test_sleep_ms(200);
    }
    ck_assert_msg(scrapes >= 2 && done == 1,
                  "prometheus: %g scrapes of the ps, done %g (its log: %s)", scrapes, done, log);
    dt_test_probe probe;
    dt_test_probe_open(&probe, job.cluster, 5000);
    dt_msg_status_resp *st = calloc(1, sizeof *st);
    ck_assert_ptr_nonnull(st);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_ps_client_status(probe.client, 0, st, &err) == 0, "status: %s", err.msg);
    ck_assert(st->done);
    char query[160];
    snprintf(query, sizeof query, "dtrain_ps_global_step{job_id=\"%s\"}", st->job_id);
    ck_assert_msg(prom_query(prom_port, query) == (double)st->global_step,
                  "prometheus has no global step labelled with Status's job id %s", st->job_id);
    double step = prom_query(prom_port, "dtrain_ps_global_step");
    double applied = prom_query(prom_port, "dtrain_ps_pushes_total{outcome=\"applied\"}");
    ck_assert_msg(step == (double)st->global_step, "prometheus: global step %g, Status %lld", step,
                  (long long)st->global_step);
    ck_assert_msg(applied == (double)st->pushes_applied, "prometheus: %g applied, Status %lld",
                  applied, (long long)st->pushes_applied);
    double p99 =
        prom_query(prom_port, "histogram_quantile(0.99, "
                              "dtrain_rpc_server_call_duration_seconds_bucket{method=\"Push\"})");
    int status = 0;
    char *page = http_get(ports[0], "/metrics", &status);
    ck_assert_ptr_nonnull(page);
    double lower = 0, upper = 0;
    char id[64];
    chief_job_id(id, sizeof id);
    push_quantile_bucket(page, id, 0.99, &lower, &upper);
    ck_assert_msg(p99 > 0 && p99 >= lower && p99 <= upper,
                  "prometheus: push p99 %g s, the ps's buckets put it in (%g, %g]", p99, lower,
                  upper);
    free(page);
    free(st);
    dt_test_probe_close(&probe);
}
END_TEST

Suite *metrics_suite(void) {
    Suite *s = suite_create("metrics");
    TCase *tc = dt_test_job_tcase(s, "metrics", 240, setup, teardown);
    tcase_add_test(tc, exposition);
    tcase_add_test(tc, every_role);
    tcase_add_test(tc, prometheus_scrape);
    return s;
}
