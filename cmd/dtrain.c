/*
 * dtrain: one binary, three roles. Parses argv and the config files, installs
 * the signal handlers, and hands over to lib/ps, lib/chief or lib/worker.
 *
 * Exit codes (for people and cluster managers):
 *   0    the job is done
 *   1    a permanent runtime failure (bad checkpoint, data error, bug)
 *   2    usage or configuration error (also: a job config that does not
 *        fit its data, e.g. a label column the file lacks, or that names a
 *        data file that is not there)
 *   75   the final checkpoint could not be written in final_save_secs (a full
 *        disk; retryable: restart the job once the log dir has room)
 *   200  a peer stayed unreachable past the retry budget (retryable)
 *   128+N  stopped by signal N (130 for SIGINT, 143 for SIGTERM)
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "chief.h"
#include "cluster.h"
#include "criteo_gen.h"
#include "err.h"
#include "evaluator.h"
#include "job.h"
#include "log.h"
#include "metrics_http.h"
#include "model.h"
#include "monitor.h"
#include "optim.h"
#include "predict.h"
#include "ps.h"
#include "ps_metrics.h"
#include "rpc_common.h"
#include "train_metrics.h"
#include "worker.h"

#define DT_VERSION "0.1.0"
#define EXIT_USAGE 2
#define EXIT_UNREACHABLE 200
#define MAX_SETS 64

/* The first SIGINT/SIGTERM asks the role to stop (its loops poll this);
 * a second one exits at once. Set on another thread than the main one
 * (below), hence an atomic: lock-free, so a handler may set it too. */
static atomic_int stop_signal;

static void on_stop_signal(int signo) {
    if (atomic_exchange(&stop_signal, signo)) _exit(128 + signo);
}

/* SIGHUP: re-read the TLS certificate files at the next handshake. */
static void on_hangup(int signo) {
    (void)signo;
    dt_rpc_reload_certs();
}

static sigset_t taken_signals;

static void *take_signals(void *arg) {
    (void)arg;
    for (;;) {
        int signo = 0;
        if (sigwait(&taken_signals, &signo) != 0) continue;
        if (signo == SIGHUP)
            on_hangup(signo);
        else
            on_stop_signal(signo);
    }
    return NULL;
}

/* Signals are taken by a thread of their own (sigwait) and blocked in
 * every thread the process starts after this call (gRPC's, the pollers),
 * which inherit the main thread's mask: a process-directed signal could
 * otherwise land on any of them, and one parked in an uninstrumented
 * library never runs its handler under ThreadSanitizer. The handlers stay
 * installed for a thread started before main (OpenBLAS starts one when it
 * loads, unless OPENBLAS_NUM_THREADS=1). hangup: SIGHUP too. Call before
 * anything starts a thread (dt_rpc_init). Without the thread (it cannot
 * start), the handlers alone take the signals, on any thread. */
static void take_signals_on_a_thread(int hangup) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_stop_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigemptyset(&taken_signals);
    sigaddset(&taken_signals, SIGINT);
    sigaddset(&taken_signals, SIGTERM);
    if (hangup) {
        sa.sa_handler = on_hangup;
        sigaction(SIGHUP, &sa, NULL);
        sigaddset(&taken_signals, SIGHUP);
    }
    signal(SIGPIPE, SIG_IGN);
    pthread_sigmask(SIG_BLOCK, &taken_signals, NULL);
    pthread_attr_t attr;
    pthread_t thread;
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&thread, &attr, take_signals, NULL);
        pthread_attr_destroy(&attr);
    }
    if (rc != 0) {
        pthread_sigmask(SIG_UNBLOCK, &taken_signals, NULL);
        dt_log(DT_LOG_WARN, "cannot start the signal thread (%s): signals run on any thread",
               strerror(rc));
    }
}

static const char usage[] =
    "usage: dtrain [--cluster FILE] [--job-name JOB --task-index N] [options]\n"
    "       dtrain eval [--config FILE] [--checkpoint FILE | --log-dir DIR] [--latest]\n"
    "                   [--data FILE [--labels FILE]] [--set FIELD=VALUE]...\n"
    "       dtrain predict [--config FILE] [--checkpoint FILE | --log-dir DIR] [--latest]\n"
    "                   --data FILE [--labels FILE] [--out FILE] [--set FIELD=VALUE]...\n"
    "       dtrain status [--cluster FILE] [--json] [--watch SECS] [--timeout-secs N]\n"
    "       dtrain health --address HOST:PORT [--service NAME] [--serving]\n"
    "                   [--timeout-secs N]\n"
    "       dtrain gen-criteo --out FILE [--rows N] [--seed S] [--vocab-scale X]\n"
    "                   [--no-labels]\n"
    "\n"
    "Runs one task of a dtrain cluster: a ps, the chief, a worker or the evaluator.\n"
    "\n"
    "  --cluster FILE       cluster file: {\"cluster\": {\"ps\": [...], \"worker\": [...]}};\n"
    "                       without it, the TF_CONFIG environment variable (Kubeflow,\n"
    "                       SageMaker, Vertex AI), whose \"task\" says who this is\n"
    "  --job-name, --job    ps, worker, chief (or master) or evaluator; worker 0 is\n"
    "                       the chief unless the cluster lists a \"chief\" job\n"
    "  --task-index, --task N  index of this task in its job's list; both flags win\n"
    "                       over TF_CONFIG's \"task\", one alone must agree with it\n"
    "  --config FILE        job config (model, data, optimizer, schedule); default:\n"
    "                       the cluster file's \"job\" object, else built-in defaults\n"
    "  --set FIELD=VALUE    override one job field (repeatable), e.g. --set max_steps=500\n"
    "  --log-dir DIR        same as --set log_dir=DIR\n"
    "  --keep-serving       ps only: keep serving after the job is done\n"
    "  --listen HOST:PORT   ps only: listen there (default: every interface at the\n"
    "                       port of its cluster address, as TF's server does)\n"
    "  --max-message-mb N   ps only: largest message accepted or sent, in MiB (default:\n"
    "                       the job's variables and optimizer slots plus 1 MiB, >= 4;\n"
    "                       256 when the ps cannot know the model's size)\n"
    "  --max-resets-per-sec N  ps only: a connection with more calls reset before\n"
    "                       their handler or refused in one second is closed and\n"
    "                       its address refused for --flood-backoff-secs (default\n"
    "                       200; 0 never)\n"
    "  --flood-backoff-secs N  ps only: that refusal's length (default 30)\n"
    "  --max-conns-per-peer N  ps only: connections from one address; the newest\n"
    "                       above are closed (default 64; 0 no cap)\n"
    "  --header-timeout-ms N  ps only: a connection that has started no call by then\n"
    "                       is closed (half-sent headers; default 10000; 0 never)\n"
    "  --tls-cert FILE      PEM certificate of this task (env DTRAIN_TLS_CERT); the ps\n"
    "                       serves TLS, workers present it to the ps (mutual TLS)\n"
    "  --tls-key FILE       PEM private key of --tls-cert (env DTRAIN_TLS_KEY)\n"
    "  --tls-ca FILE        PEM CA (env DTRAIN_TLS_CA): the ps requires client\n"
    "                       certificates it signed; workers verify the ps against it\n"
    "                       and the host of its address (DNS or IP SAN). A\n"
    "                       certificate's CN (or a SAN) is its identity: chief,\n"
    "                       worker:N, ps:N or tool. SIGHUP or a change on disk\n"
    "                       makes the ps use new certificate files for new\n"
    "                       connections\n"
    "  --token-file FILE    bearer tokens (env DTRAIN_TOKEN_FILE): lines \"IDENTITY\n"
    "                       TOKEN\" ('#' comments), or one bare shared token (then a\n"
    "                       caller's claimed identity is trusted); the ps refuses\n"
    "                       calls without the right token, workers send their own\n"
    "                       Flags win over the environment. Without TLS and tokens\n"
    "                       anyone who can reach a ps port controls the job.\n"
    "  --log-level LEVEL    debug, info (default), warn or error\n"
    "  --log-format FORMAT  text (default) or json: one JSON object a line (time,\n"
    "                       level, role, task, job_id, pid, msg and the event's\n"
    "                       fields), for log collectors\n"
    "  --metrics-port [HOST:]N  serve Prometheus metrics at http://HOST:N/metrics\n"
    "                       (off by default; N 0: a free port, logged). HOST: the\n"
    "                       interface of the role's RPC address (a ps: --listen's,\n"
    "                       else every interface; a worker: its cluster host, or\n"
    "                       every interface when that is not local).\n"
    "                       Plain HTTP, also when the job uses TLS\n"
    "  --help               this text\n"
    "  --version            print the version\n"
    "\n"
    "eval scores a checkpoint on a data set, scaled as in training, and prints\n"
    "\"loss L accuracy A examples N global_step S\"; predict writes CSV, one line per\n"
    "row (linear: the prediction; logistic, softmax, mlp: class,p0,...,pK-1).\n"
    "eval needs labels; predict reads data with or without them and logs which it\n"
    "found: csv with one column fewer than the training layout (no label column),\n"
    "libsvm rows that start with index:value, idx images without --labels.\n"
    "A checkpoint carries its job config and scaling statistics, so --checkpoint or\n"
    "--log-dir alone is enough; a --config given too must agree with it on the\n"
    "model and its input (exit 2 naming each field otherwise). A csv must have the\n"
    "training file's feature columns, by name and in order (exit 2 otherwise).\n"
    "  --config FILE        the job config (needed for checkpoints of older versions)\n"
    "  --checkpoint FILE    a checkpoint file; default: the job's log_dir's best model\n"
    "                       (model.best.safetensors, kept by a chief with eval_data),\n"
    "                       else its latest checkpoint\n"
    "  --log-dir DIR        take DIR's best model (else its latest checkpoint) instead\n"
    "  --latest             the latest checkpoint, not the best model\n"
    "  --data FILE          examples in the job's data format (predict: labels\n"
    "                       optional); eval's default: the job's eval_data and\n"
    "                       eval_labels\n"
    "  --labels FILE        idx: the labels file of --data (predict: optional)\n"
    "  --out FILE           predict: write the CSV there (default: standard output)\n"
    "  --output WHAT        predict, classifiers: both (default: class,p0,...,pK-1),\n"
    "                       class or proba (p0,...,pK-1); linear: the value\n"
    "  --no-header          predict: no header line (--header: one, the default)\n"
    "\n"
    "status asks every ps (as the identity \"tool\") and prints the job's state, step,\n"
    "rate, ETA and the workers seen; exit 0 when one answered, 200 when none did.\n"
    "health makes a grpc.health.v1 Check (a probe: no token needed): exit 0 when the\n"
    "ps answers, with --serving only when it is SERVING (it has a model and the job is\n"
    "not done), 1 otherwise, 200 when unreachable. Both take the --tls-* and\n"
    "--token-file flags (or their environment variables).\n"
    "\n"
    "gen-criteo writes synthetic click logs in the Criteo layout (label, I1-I13,\n"
    "C1-C26, tab-separated; FILE.gz is gzip, - is standard output) from a hidden\n"
    "logistic model, N rows (default 100000) of seed S (default 1), categorical\n"
    "vocabularies of the real data times X (default 0.01), and prints the rows,\n"
    "positives and the hidden model's log loss on them to stderr.\n"
    "\n"
    "Exit status: 0 done; 1 failure; 2 usage or config error; 75 final checkpoint\n"
    "unwritable (retryable); 200 peer unreachable (retryable); 128+N stopped by signal N.\n";

typedef struct {
    const char *cluster_path;
    const char *job_name;
    const char *task_text;
    const char *config_path;
    const char *sets[MAX_SETS];
    int num_sets;
    const char *log_dir;
    int keep_serving;
    const char *max_message_mb;
    const char *listen; /* ps: where to listen (default: every interface) */
    /* ps: the connection guards, as given (NULL: the default) */
    const char *max_resets_per_sec, *flood_backoff_secs, *max_conns_per_peer, *header_timeout_ms;
    const char *log_level;
    const char *log_format;   /* text or json */
    const char *metrics_port; /* N or HOST:N: serve /metrics there */
    const char *checkpoint;   /* eval, predict */
    int latest;               /* eval, predict: the latest checkpoint, not the best model */
    const char *data;
    const char *labels;
    const char *out;
    const char *output;   /* predict: both, class or proba */
    int no_header;        /* predict */
    const char *tls_cert; /* security: flags, else the environment */
    const char *tls_key;
    const char *tls_ca;
    const char *token_file;
} options;

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    fprintf(stderr, "dtrain: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see dtrain --help)\n");
    return EXIT_USAGE;
}

/* Matches "--name VALUE" or "--name=VALUE"; advances *i past a separate value. */
static int take_value(int argc, char **argv, int *i, const char *name, const char **out,
                      int *missing) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *out = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (*i + 1 >= argc) {
        *missing = 1;
        return 1;
    }
    *out = argv[++*i];
    return 1;
}

/* --tls-cert, --tls-key, --tls-ca and --token-file, which the roles and
 * the operator's tools (status, health) take alike. 1 when argv[*i] was
 * one of them. */
static int take_security_flag(int argc, char **argv, int *i, options *o, int *missing) {
    const char *const names[4] = {"--tls-cert", "--tls-key", "--tls-ca", "--token-file"};
    const char **slots[4] = {&o->tls_cert, &o->tls_key, &o->tls_ca, &o->token_file};
    for (int k = 0; k < 4; k++)
        if (take_value(argc, argv, i, names[k], slots[k], missing)) return 1;
    return 0;
}

/* TF_CONFIG's text, or NULL when unset or empty. */
static const char *tf_config(void) {
    const char *v = getenv("TF_CONFIG");
    return v && *v ? v : NULL;
}

/* Returns -1 to go on, or an exit status. */
static int parse_args(int argc, char **argv, options *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = NULL;
        int missing = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if (strcmp(a, "--version") == 0) {
            printf("dtrain %s\n", DT_VERSION);
            return 0;
        }
        if (strcmp(a, "--keep-serving") == 0) {
            o->keep_serving = 1;
            continue;
        }
        if (take_value(argc, argv, &i, "--cluster", &v, &missing))
            o->cluster_path = v;
        else if (take_value(argc, argv, &i, "--job-name", &v, &missing) ||
                 take_value(argc, argv, &i, "--job", &v, &missing))
            o->job_name = v;
        else if (take_value(argc, argv, &i, "--task-index", &v, &missing) ||
                 take_value(argc, argv, &i, "--task", &v, &missing))
            o->task_text = v;
        else if (take_value(argc, argv, &i, "--config", &v, &missing))
            o->config_path = v;
        else if (take_value(argc, argv, &i, "--log-dir", &v, &missing))
            o->log_dir = v;
        else if (take_value(argc, argv, &i, "--log-level", &v, &missing))
            o->log_level = v;
        else if (take_value(argc, argv, &i, "--log-format", &v, &missing))
            o->log_format = v;
        else if (take_value(argc, argv, &i, "--metrics-port", &v, &missing))
            o->metrics_port = v;
        else if (take_value(argc, argv, &i, "--max-message-mb", &v, &missing))
            o->max_message_mb = v;
        else if (take_value(argc, argv, &i, "--listen", &v, &missing))
            o->listen = v;
        else if (take_value(argc, argv, &i, "--max-resets-per-sec", &v, &missing))
            o->max_resets_per_sec = v;
        else if (take_value(argc, argv, &i, "--flood-backoff-secs", &v, &missing))
            o->flood_backoff_secs = v;
        else if (take_value(argc, argv, &i, "--max-conns-per-peer", &v, &missing))
            o->max_conns_per_peer = v;
        else if (take_value(argc, argv, &i, "--header-timeout-ms", &v, &missing))
            o->header_timeout_ms = v;
        else if (take_security_flag(argc, argv, &i, o, &missing))
            ;
        else if (take_value(argc, argv, &i, "--set", &v, &missing)) {
            if (!missing) {
                if (o->num_sets == MAX_SETS)
                    return usage_error("too many --set flags (at most 64)%s", "");
                o->sets[o->num_sets++] = v;
            }
        } else {
            return usage_error("unknown flag %s", a);
        }
        if (missing) return usage_error("flag %s needs a value", a);
    }
    if (!o->cluster_path && !tf_config())
        return usage_error("missing --cluster FILE (or the TF_CONFIG environment variable)%s", "");
    return -1;
}

/* The flags of `dtrain eval` and `dtrain predict` (argv[1]). Returns -1 to
 * go on, or an exit status. */
static int parse_tool_args(int argc, char **argv, int is_predict, options *o) {
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = NULL;
        int missing = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if (take_value(argc, argv, &i, "--config", &v, &missing))
            o->config_path = v;
        else if (take_value(argc, argv, &i, "--checkpoint", &v, &missing))
            o->checkpoint = v;
        else if (take_value(argc, argv, &i, "--log-dir", &v, &missing))
            o->log_dir = v;
        else if (strcmp(a, "--latest") == 0)
            o->latest = 1;
        else if (take_value(argc, argv, &i, "--data", &v, &missing))
            o->data = v;
        else if (take_value(argc, argv, &i, "--labels", &v, &missing))
            o->labels = v;
        else if (is_predict && take_value(argc, argv, &i, "--out", &v, &missing))
            o->out = v;
        else if (is_predict && take_value(argc, argv, &i, "--output", &v, &missing))
            o->output = v;
        else if (is_predict && (strcmp(a, "--no-header") == 0 || strcmp(a, "--header") == 0))
            o->no_header = strcmp(a, "--no-header") == 0;
        else if (take_value(argc, argv, &i, "--log-level", &v, &missing))
            o->log_level = v;
        else if (take_value(argc, argv, &i, "--log-format", &v, &missing))
            o->log_format = v;
        else if (take_value(argc, argv, &i, "--set", &v, &missing)) {
            if (!missing) {
                if (o->num_sets == MAX_SETS)
                    return usage_error("too many --set flags (at most 64)%s", "");
                o->sets[o->num_sets++] = v;
            }
        } else {
            return usage_error(is_predict ? "predict: unknown flag %s" : "eval: unknown flag %s",
                               a);
        }
        if (missing) return usage_error("flag %s needs a value", a);
    }
    if (!o->config_path && !o->checkpoint && !o->log_dir)
        return usage_error("%s: missing --config FILE (the job config), or --checkpoint FILE or "
                           "--log-dir DIR of a checkpoint that carries its job",
                           argv[1]);
    if (is_predict && !o->data) return usage_error("%s: missing --data FILE", argv[1]);
    if (o->labels && !o->data) return usage_error("%s: --labels needs --data FILE", argv[1]);
    if (o->checkpoint && o->log_dir)
        return usage_error("%s: give --checkpoint FILE or --log-dir DIR, not both", argv[1]);
    if (o->checkpoint && o->latest)
        return usage_error("%s: give --checkpoint FILE or --latest, not both", argv[1]);
    return -1;
}

/* A flag's value, else the environment variable's (empty counts as unset). */
static const char *flag_or_env(const char *flag, const char *env) {
    if (flag) return flag;
    const char *v = getenv(env);
    return v && *v ? v : NULL;
}

/* Fills sec from the flags and the environment. Returns -1 to go on, or an
 * exit status. */
static int security_from(const options *o, int is_ps, dt_rpc_security *sec) {
    memset(sec, 0, sizeof *sec);
    sec->cert_file = flag_or_env(o->tls_cert, "DTRAIN_TLS_CERT");
    sec->key_file = flag_or_env(o->tls_key, "DTRAIN_TLS_KEY");
    sec->ca_file = flag_or_env(o->tls_ca, "DTRAIN_TLS_CA");
    sec->token_file = flag_or_env(o->token_file, "DTRAIN_TOKEN_FILE");
    if (!sec->cert_file != !sec->key_file)
        return usage_error("--tls-cert and --tls-key go together%s", "");
    if (is_ps && sec->ca_file && !sec->cert_file)
        return usage_error("ps: --tls-ca needs --tls-cert and --tls-key (the ps's own)%s", "");
    if (!is_ps && sec->cert_file && !sec->ca_file)
        return usage_error("worker: --tls-cert needs --tls-ca to verify the ps%s", "");
    /* A path that cannot be read is a configuration error (exit 2), found
     * before the role starts; the contents are checked where they are used. */
    const char *const files[4] = {sec->cert_file, sec->key_file, sec->ca_file, sec->token_file};
    static const char *const names[4] = {"--tls-cert", "--tls-key", "--tls-ca", "--token-file"};
    for (int i = 0; i < 4; i++)
        if (files[i] && access(files[i], R_OK) != 0) {
            fprintf(stderr, "dtrain: %s %s: cannot read: %s\n(see dtrain --help)\n", names[i],
                    files[i], strerror(errno));
            return EXIT_USAGE;
        }
    return -1;
}

/* The cluster: --cluster FILE, else TF_CONFIG (then named so in messages). */
static int load_cluster(const options *o, dt_cluster *c, dt_err *err) {
    if (o->cluster_path) return dt_cluster_load(o->cluster_path, c, err);
    return dt_cluster_parse(tf_config(), "TF_CONFIG", c, err);
}

/* Which task this process is: --job-name and --task-index, else TF_CONFIG's
 * (or the cluster file's) "task" (dt_cluster_resolve_role). Returns -1 to
 * go on, or an exit status. */
static int resolve_role(const options *o, const dt_cluster *c, dt_role *role) {
    const char *src = o->cluster_path ? o->cluster_path : "TF_CONFIG";
    dt_err err;
    dt_err_clear(&err);
    if (dt_cluster_resolve_role(c, src, o->job_name, o->task_text, 1, role, &err) < 0)
        return usage_error("%s", err.msg);
    return -1;
}

/* --log-level, else fallback; --log-format. Returns -1 to go on, or an
 * exit status. */
static int set_log_level(const options *o, dt_log_level fallback) {
    dt_log_level level = fallback;
    if (o->log_level && dt_log_parse_level(o->log_level, &level) < 0)
        return usage_error("--log-level: unknown level \"%s\"", o->log_level);
    dt_log_set_level(level);
    dt_log_format format = DT_LOG_TEXT;
    if (o->log_format && dt_log_parse_format(o->log_format, &format) < 0)
        return usage_error("--log-format: unknown format \"%s\" (text or json)", o->log_format);
    dt_log_set_format(format);
    return -1;
}

/* Loads the job config: the defaults; then --config when given, else the
 * cluster file's "job" object (if any; never TF_CONFIG's); then --log-dir
 * and --set. */
static int load_job(const options *o, dt_job *job, dt_err *err) {
    dt_job_defaults(job);
    int rc = 0;
    if (o->config_path) {
        if ((rc = dt_job_load(o->config_path, job, err)) < 0) return rc;
    } else if (o->cluster_path && (rc = dt_job_load(o->cluster_path, job, err)) < 0) {
        return rc; /* TF_CONFIG's "job" is not a job config (cluster.h) */
    }
    if (o->log_dir) {
        char assignment[DT_PATH_MAX + 16];
        snprintf(assignment, sizeof assignment, "log_dir=%s", o->log_dir);
        if ((rc = dt_job_set(job, assignment, err)) < 0) return rc;
    }
    for (int i = 0; i < o->num_sets; i++)
        if ((rc = dt_job_set(job, o->sets[i], err)) < 0) return rc;
    return dt_job_finish(job, err);
}

/* --output: a name of dt_predict_output_names, and only class or proba for
 * a classifier. Returns -1 to go on, or an exit status. */
static int predict_output(const options *o, const dt_job *job, int *out) {
    for (int k = 0; dt_predict_output_names[k]; k++)
        if (strcmp(o->output, dt_predict_output_names[k]) == 0) *out = k;
    if (*out == DT_PREDICT_BOTH && strcmp(o->output, "both") != 0)
        return usage_error("predict: --output: unknown \"%s\" (both, class or proba)", o->output);
    if (*out != DT_PREDICT_BOTH && job->model.kind == DT_MODEL_LINEAR)
        return usage_error("predict: --output %s: a linear model predicts values, not classes",
                           o->output);
    return -1;
}

/* The job of eval and predict: --config's, else the one the checkpoint was
 * trained with (ckpt then names that file, so the variables come from the
 * same one), with --set applied on top either way. */
static int load_tool_job(const options *o, const char *tool, dt_job *job, char *ckpt, size_t cap,
                         dt_err *err) {
    ckpt[0] = '\0';
    /* Unnamed, the checkpoint is the log dir's best model when it has one. */
    const int best = !o->checkpoint && !o->latest;
    if (o->config_path) {
        int rc = load_job(o, job, err);
        if (rc == 0 && best) dt_predict_pick_best(tool, job->log_dir, ckpt, cap);
        return rc < 0 ? rc : dt_predict_fill_shape(tool, ckpt[0] ? ckpt : o->checkpoint, job, err);
    }
    char picked[DT_PATH_MAX + 64] = "";
    if (best) dt_predict_pick_best(tool, o->log_dir, picked, sizeof picked);
    int rc = dt_predict_job_of(tool, picked[0] ? picked : o->checkpoint, o->log_dir, job, ckpt, cap,
                               err);
    for (int i = 0; rc == 0 && i < o->num_sets; i++)
        rc = dt_job_set(job, o->sets[i], err);
    if (rc == 0) rc = dt_job_finish(job, err);
    return rc;
}

/* dtrain eval and dtrain predict: a checkpoint, a job and a data file, no
 * cluster; lib/predict does the work. */
static int run_tool(int argc, char **argv) {
    const char *tool = argv[1];
    int is_predict = strcmp(tool, "predict") == 0;
    options o;
    memset(&o, 0, sizeof o);
    int status = parse_tool_args(argc, argv, is_predict, &o);
    if (status >= 0) return status;
    if ((status = set_log_level(&o, DT_LOG_INFO)) >= 0) return status;
    dt_err err;
    dt_err_clear(&err);
    dt_job job;
    char ckpt[DT_PATH_MAX + 64];
    int rc = load_tool_job(&o, tool, &job, ckpt, sizeof ckpt, &err);
    if (rc < 0) {
        fprintf(stderr, "dtrain: %s\n", err.msg);
        /* A job file that fails is the config's fault; a checkpoint that
         * cannot be read is not, unless its job is what fails. */
        return o.config_path || rc == DT_ECONFIG || rc == DT_EINVAL ? EXIT_USAGE : 1;
    }
    if (!o.data && !dt_data_has_held_out(&job.data))
        return usage_error("eval: no data: give --data FILE, or set \"eval_data\" (or "
                           "\"validation_fraction\") in %s",
                           o.config_path ? o.config_path : "the job config");
    dt_predict_params pp = {.job = &job,
                            .checkpoint = ckpt[0] ? ckpt : o.checkpoint,
                            .data = o.data,
                            .labels = o.labels,
                            .out = o.out,
                            .no_header = o.no_header};
    if (o.output && (status = predict_output(&o, &job, &pp.output)) >= 0) return status;
    dt_predict_result r;
    rc = is_predict ? dt_predict_write(&pp, &r, &err) : dt_predict_eval(&pp, &r, &err);
    if (rc < 0) {
        fprintf(stderr, "dtrain: %s\n", err.msg);
        return rc == DT_ECONFIG ? EXIT_USAGE : 1; /* the config, not the data, is wrong */
    }
    if (!is_predict) {
        char line[256];
        dt_predict_format(&r, line, sizeof line);
        printf("%s\n", line);
    }
    return fflush(stdout) == 0 ? 0 : 1;
}

/* ---- dtrain health and dtrain status ------------------------------------ */

typedef struct {
    const char *address, *service, *timeout, *watch;
    int serving, json;
} monitor_flags;

/* The flags of `dtrain health` and `dtrain status`; security flags and
 * --cluster land in o. Returns -1 to go on, or an exit status. */
static int parse_monitor_args(int argc, char **argv, int is_health, options *o, monitor_flags *m) {
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int missing = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if (is_health && strcmp(a, "--serving") == 0) {
            m->serving = 1;
            continue;
        }
        if (!is_health && strcmp(a, "--json") == 0) {
            m->json = 1;
            continue;
        }
        if (is_health && take_value(argc, argv, &i, "--address", &v, &missing))
            m->address = v;
        else if (is_health && take_value(argc, argv, &i, "--service", &v, &missing))
            m->service = v;
        else if (!is_health && take_value(argc, argv, &i, "--cluster", &v, &missing))
            o->cluster_path = v;
        else if (!is_health && take_value(argc, argv, &i, "--watch", &v, &missing))
            m->watch = v;
        else if (take_value(argc, argv, &i, "--timeout-secs", &v, &missing))
            m->timeout = v;
        else if (take_security_flag(argc, argv, &i, o, &missing))
            ;
        else if (take_value(argc, argv, &i, "--log-level", &v, &missing))
            o->log_level = v;
        else
            return usage_error("%s: unknown flag %s", argv[1], a);
        if (missing) return usage_error("flag %s needs a value", a);
    }
    if (is_health && !m->address) return usage_error("health: missing --address HOST:PORT%s", "");
    if (!is_health && !o->cluster_path && !tf_config())
        return usage_error("status: missing --cluster FILE (or the TF_CONFIG environment "
                           "variable)%s",
                           "");
    return -1;
}

/* A whole number of seconds from 1 to max for flag; -1 when it is not. */
static int parse_secs(const char *flag, const char *text, int max) {
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (!*text || *end || v < 1 || v > max) {
        usage_error("%s: \"%s\" is not a whole number of seconds from 1 to %d", flag, text, max);
        return -1;
    }
    return (int)v;
}

/* dtrain health: one grpc.health.v1 Check. 0 when it answers (with
 * --serving: SERVING), 1 otherwise, 200 when nobody answers. */
static int run_health(const options *o, const monitor_flags *m, int timeout_ms) {
    dt_rpc_security sec;
    int status = security_from(o, 0, &sec);
    if (status >= 0) return status;
    dt_health_status h = DT_HEALTH_UNKNOWN;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_health_check(m->address, m->service, &sec, timeout_ms, &h, &err);
    if (rc < 0) {
        fprintf(stderr, "dtrain: health: %s\n", err.msg);
        return rc == DT_EUNAVAILABLE || rc == DT_EDEADLINE ? EXIT_UNREACHABLE : 1;
    }
    printf("%s %s\n", m->address, dt_health_status_name(h));
    if (fflush(stdout) != 0) return 1;
    return !m->serving || h == DT_HEALTH_SERVING ? 0 : 1;
}

/* dtrain status: every ps's Status, summed up; --watch repeats it. 0 when a
 * ps answered, 200 when none did. */
static int run_status(const options *o, const monitor_flags *m, int timeout_ms, int watch_secs) {
    dt_rpc_security sec;
    int status = security_from(o, 0, &sec);
    if (status >= 0) return status;
    dt_err err;
    dt_err_clear(&err);
    dt_cluster cluster;
    if (load_cluster(o, &cluster, &err) < 0) {
        fprintf(stderr, "dtrain: %s\n", err.msg);
        return EXIT_USAGE;
    }
    char *text = dt_malloc(1 << 16);
    int rc = text ? 0 : dt_err_set(&err, DT_ENOMEM, "status: out of memory");
    while (rc == 0) {
        dt_job_status st;
        if ((rc = dt_job_status_get(&cluster, &sec, timeout_ms, &st, &err)) < 0) break;
        if (m->json)
            dt_job_status_json(&st, &cluster, text, 1 << 16);
        else
            dt_job_status_text(&st, &cluster, text, 1 << 16);
        printf("%s%s", text, m->json ? "\n" : "");
        if (watch_secs && !m->json) printf("\n");
        fflush(stdout);
        status = st.num_answered ? 0 : EXIT_UNREACHABLE;
        dt_job_status_deinit(&st);
        if (!watch_secs || stop_signal) break;
        for (int t = 0; t < watch_secs * 10 && !stop_signal; t++) {
            struct timespec nap = {0, 100 * 1000000L};
            nanosleep(&nap, NULL);
        }
        if (stop_signal) break;
    }
    free(text);
    dt_cluster_deinit(&cluster);
    if (rc < 0) {
        fprintf(stderr, "dtrain: %s\n", err.msg);
        return 1;
    }
    return status;
}

static int run_monitor(int argc, char **argv) {
    int is_health = strcmp(argv[1], "health") == 0;
    options o;
    monitor_flags m;
    memset(&o, 0, sizeof o);
    memset(&m, 0, sizeof m);
    int status = parse_monitor_args(argc, argv, is_health, &o, &m);
    if (status >= 0) return status;
    /* The answer is the output, not the log. */
    if ((status = set_log_level(&o, DT_LOG_WARN)) >= 0) return status;
    int timeout_ms = 5000, watch = 0;
    if (m.timeout && (timeout_ms = parse_secs("--timeout-secs", m.timeout, 3600)) < 0)
        return EXIT_USAGE;
    if (m.timeout) timeout_ms *= 1000;
    if (m.watch && (watch = parse_secs("--watch", m.watch, 86400)) < 0) return EXIT_USAGE;
    take_signals_on_a_thread(0);
    dt_rpc_init();
    return is_health ? run_health(&o, &m, timeout_ms) : run_status(&o, &m, timeout_ms, watch);
}

static int exit_status(int rc, const dt_err *err) {
    if (rc >= 0) return 0;
    dt_log(DT_LOG_ERROR, "%s", err->msg);
    switch (rc) {
    case DT_ECANCELLED: return 128 + (stop_signal ? stop_signal : SIGTERM);
    case DT_EUNAVAILABLE:
    case DT_EDEADLINE: return EXIT_UNREACHABLE;
    case DT_ESTORAGE: return 75; /* EX_TEMPFAIL */
    case DT_ECONFIG: return EXIT_USAGE;
    default: return 1;
    }
}

/* The ps's message cap when --max-message-mb is not given, derived from the
 * job's model: the largest request a ps must take is the chief's Create of
 * the whole model with its optimizer slots (a restore), so the variables
 * times (1 + slots) (a sparse model's dense variables, plus a step's table
 * rows: dt_job_sparse_bytes), plus 1 MiB for names, shapes and framing; at least
 * 4 MiB (gRPC's own default), at most the int gRPC keeps it in. A ps
 * holding one shard of several could do with less; the whole model is the
 * bound every shard fits under. */
#define MIN_MESSAGE_CAP (4LL << 20)
#define MESSAGE_HEADROOM (1LL << 20)

/* The cap when the model's size cannot be known: a job that leaves its
 * shapes to a training file this ps cannot read (it runs elsewhere). Not
 * gRPC's 2 GiB: every byte of a request is held until it is whole, so a cap
 * is also how much one stranger's message costs the ps. 256 MiB fits a
 * model of 21M floats with Adam's two slots; larger jobs say "features" and
 * "classes" or give --max-message-mb. */
#define UNKNOWN_MODEL_CAP (256LL << 20)

static int derived_message_cap(const dt_job *given, long long *cap, dt_err *err) {
    dt_job shaped;
    const dt_job *job = given;
    if (dt_job_shape_unset(given)) {
        /* The shapes are the data's: read as the chief reads them, when
         * the file is here too. */
        shaped = *given;
        dt_err why;
        dt_err_clear(&why);
        if (dt_job_infer(&shaped, &why) < 0) {
            *cap = UNKNOWN_MODEL_CAP;
            dt_log(DT_LOG_WARN,
                   "ps: largest message %lld bytes (256 MiB): the job leaves \"features\" or "
                   "\"classes\" to the training data, which this ps cannot read (%s); set them "
                   "in the job, or --max-message-mb, for a larger model",
                   *cap, why.msg);
            return 0;
        }
        job = &shaped;
    }
    long long vars = 0, step_rows = 0;
    int rc = dt_job_is_sparse(job) ? dt_job_sparse_bytes(job, &vars, &step_rows, err)
                                   : dt_model_bytes(&job->model, &vars, err);
    if (rc < 0) return rc;
    /* A sparse model's table is never sent whole: its rows come a batch
     * (SparsePull, Push) or a page (the chief's save and restore) at a time. */
    long long need = vars * (1 + dt_optim_num_slots(&job->optim)) + step_rows + MESSAGE_HEADROOM;
    /* A libsvm row holds what its file holds (a document's words: often
     * more than the 256 entries step_rows assumes), and a step over the
     * cap fails the job, so such a job's ps takes at least what one of
     * unknown size does. */
    if (dt_job_is_sparse(job) && job->data.source == DT_DATA_LIBSVM && need < UNKNOWN_MODEL_CAP) {
        *cap = UNKNOWN_MODEL_CAP;
        dt_log(DT_LOG_INFO,
               "ps: largest message %lld bytes (256 MiB): a libsvm row's features are its "
               "file's, so a batch's table rows have no bound the job states; "
               "--max-message-mb overrides",
               *cap);
        return 0;
    }
    *cap = need < MIN_MESSAGE_CAP ? MIN_MESSAGE_CAP : need > INT_MAX ? INT_MAX : need;
    dt_log(need > INT_MAX ? DT_LOG_WARN : DT_LOG_INFO,
           "ps: largest message %lld bytes: the job's model (%lld bytes of variables, %d "
           "optimizer slot%s each%s) plus 1 MiB%s; --max-message-mb overrides",
           *cap, vars, dt_optim_num_slots(&job->optim),
           dt_optim_num_slots(&job->optim) == 1 ? "" : "s",
           step_rows ? ", and a step's table rows" : "",
           need > INT_MAX ? ", cut to the most one gRPC message can carry: keep every ps's "
                            "shard under it"
                          : "");
    return 0;
}

/* A whole number of N >= 1 from text; -1 when it is not one. */
static long long parse_count(const char *text) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    return *text && !*end && !errno && v >= 0 ? v : -1;
}

/* dtrain gen-criteo: flags in, lib/criteo_gen does the work. */
static int run_gen_criteo(int argc, char **argv) {
    dt_criteo_gen_params p;
    dt_criteo_gen_defaults(&p);
    const char *out = NULL, *v = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int missing = 0;
        if (strcmp(a, "--help") == 0) {
            fputs(usage, stdout);
            return 0;
        } else if (take_value(argc, argv, &i, "--out", &out, &missing)) {
        } else if (take_value(argc, argv, &i, "--rows", &v, &missing)) {
            if (!missing && (p.rows = parse_count(v)) < 1)
                return usage_error("gen-criteo: --rows: \"%s\" is not a whole number >= 1", v);
        } else if (take_value(argc, argv, &i, "--seed", &v, &missing)) {
            long long seed = missing ? 0 : parse_count(v);
            if (!missing && seed < 0)
                return usage_error("gen-criteo: --seed: \"%s\" is not a whole number >= 0", v);
            p.seed = (uint64_t)seed;
        } else if (take_value(argc, argv, &i, "--vocab-scale", &v, &missing)) {
            char *end = NULL;
            p.vocab_scale = missing ? 0 : strtod(v, &end);
            if (!missing && (!*v || *end || !(p.vocab_scale > 0 && p.vocab_scale <= 1)))
                return usage_error("gen-criteo: --vocab-scale: \"%s\" is not a number in (0, 1]",
                                   v);
        } else if (strcmp(a, "--no-labels") == 0) {
            p.labels = 0;
        } else {
            return usage_error("gen-criteo: unknown flag %s", a);
        }
        if (missing) return usage_error("flag %s needs a value", a);
    }
    if (!out) return usage_error("gen-criteo: missing --out FILE (- for standard output)%s", "");
    dt_err err;
    dt_err_clear(&err);
    dt_criteo_gen_report rep;
    if (dt_criteo_gen_write(&p, out, &rep, &err) < 0) {
        fprintf(stderr, "dtrain: %s\n", err.msg);
        return err.code == DT_EINVAL ? EXIT_USAGE : EXIT_FAILURE;
    }
    fprintf(stderr,
            "gen-criteo: %lld rows to %s (seed %llu, %lld categorical values): %lld positives "
            "(%.2f%%), hidden model log loss %.6f (constant rate: %.6f; bias %.4f)\n",
            (long long)rep.rows, out, (unsigned long long)p.seed, (long long)rep.vocabulary,
            (long long)rep.positives, 100.0 * (double)rep.positives / (double)rep.rows,
            rep.log_loss, rep.base_log_loss, rep.bias);
    return 0;
}

/* A guard flag's value into *out: 0 (the default) when not given, -1 for
 * "0" (that guard off), else the number times scale; -1 when not a whole
 * number from 0 to max (then a usage error was printed). */
static int guard_flag(const char *flag, const char *text, long max, int scale, int *out) {
    *out = 0;
    if (!text) return 0;
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (!*text || *end || v < 0 || v > max) {
        usage_error("%s: \"%s\" is not a whole number from 0 to %ld", flag, text, max);
        return -1;
    }
    *out = v == 0 ? -1 : (int)(v * scale);
    return 0;
}

/* The ps's connection guards from its flags; -1 after a usage error. */
static int guard_limits(const options *o, dt_adm_limits *out) {
    memset(out, 0, sizeof *out);
    if (guard_flag("--max-resets-per-sec", o->max_resets_per_sec, 1000000, 1,
                   &out->max_aborts_per_sec) < 0 ||
        guard_flag("--flood-backoff-secs", o->flood_backoff_secs, 86400, 1000, &out->backoff_ms) <
            0 ||
        guard_flag("--max-conns-per-peer", o->max_conns_per_peer, 100000, 1,
                   &out->max_conns_per_peer) < 0 ||
        guard_flag("--header-timeout-ms", o->header_timeout_ms, 3600000, 1,
                   &out->header_timeout_ms) < 0)
        return -1;
    return 0;
}

/* The flags that only some roles take. Returns -1 to go on, or an exit
 * status. */
static int check_role_flags(const options *o, const dt_role *role) {
    int is_ps = role->type == DT_TASK_PS;
    if (!is_ps && (o->max_resets_per_sec || o->flood_backoff_secs || o->max_conns_per_peer ||
                   o->header_timeout_ms))
        return usage_error("--max-resets-per-sec, --flood-backoff-secs, --max-conns-per-peer and "
                           "--header-timeout-ms are for the ps job only%s",
                           "");
    dt_adm_limits guard;
    if (is_ps && guard_limits(o, &guard) < 0) return EXIT_USAGE;
    if (o->keep_serving && !is_ps)
        return usage_error("--keep-serving is for the ps job only%s", "");
    if (o->listen && !is_ps) return usage_error("--listen is for the ps job only%s", "");
    if (o->listen && !strchr(o->listen, ':'))
        return usage_error("--listen: \"%s\" is not HOST:PORT", o->listen);
    if (o->metrics_port) {
        const char *colon = strrchr(o->metrics_port, ':');
        const char *num = colon ? colon + 1 : o->metrics_port;
        char *end = NULL;
        long port = strtol(num, &end, 10);
        if (!*num || *end || port < 0 || port > 65535 || (colon && colon == o->metrics_port))
            return usage_error("--metrics-port: \"%s\" is not a port (0..65535) or HOST:PORT",
                               o->metrics_port);
    }
    if (o->max_message_mb) {
        char *end = NULL;
        long mb = strtol(o->max_message_mb, &end, 10);
        /* gRPC takes the cap as an int: 2047 MiB is the most it can hold. */
        if (!*o->max_message_mb || *end || mb < 1 || mb > 2047)
            return usage_error(
                "--max-message-mb: \"%s\" is not a whole number of MiB from 1 to 2047",
                o->max_message_mb);
        if (!is_ps) return usage_error("--max-message-mb is for the ps job only%s", "");
    }
    return -1;
}

/* 1 when this process's own configuration names the job's log dir: a
 * --config job file, --log-dir, --set log_dir=, or a "log_dir" in the
 * cluster file's "job" (TF_CONFIG's is not a job config). The built-in
 * default names nothing: a ps acts on a log dir only when told it. */
static int log_dir_named(const options *o) {
    if (o->config_path || o->log_dir) return 1;
    for (int i = 0; i < o->num_sets; i++)
        if (strncmp(o->sets[i], "log_dir=", 8) == 0) return 1;
    if (!o->cluster_path) return 0;
    dt_job probe;
    dt_job_defaults(&probe);
    probe.log_dir[0] = '\0';
    dt_err err;
    dt_err_clear(&err);
    return dt_job_load(o->cluster_path, &probe, &err) == 0 && probe.log_dir[0];
}

/* The max_steps this process's own configuration names (a --set, the
 * --config file's or the cluster file's "job"), else 0: never the
 * default. */
static int64_t max_steps_named(const options *o, const dt_job *job) {
    for (int i = 0; i < o->num_sets; i++)
        if (strncmp(o->sets[i], "max_steps=", 10) == 0) return job->max_steps;
    const char *file = o->config_path ? o->config_path : o->cluster_path;
    if (!file) return 0;
    dt_job probe;
    dt_job_defaults(&probe);
    probe.max_steps = -1;
    dt_err err;
    dt_err_clear(&err);
    if (dt_job_load(file, &probe, &err) < 0 || probe.max_steps < 0) return 0;
    return job->max_steps;
}

/* The /metrics server of --metrics-port ("N", or "HOST:N" for another
 * interface), on the interface of rpc_addr ("host:port"; NULL: every
 * interface; one that does not resolve or bind here: every interface,
 * logged). DT_ECONFIG when it cannot listen. */
static int start_metrics(const options *o, const char *rpc_addr, dt_metrics_http **http,
                         dt_err *err) {
    char host[DT_HOST_MAX] = "";
    const char *colon = strrchr(o->metrics_port, ':');
    const char *from = colon ? o->metrics_port : rpc_addr;
    size_t n = from && strrchr(from, ':') ? (size_t)(strrchr(from, ':') - from) : 0;
    if (n >= sizeof host) n = sizeof host - 1;
    if (n) memcpy(host, from, n);
    host[n] = '\0';
    /* "[::1]" as gRPC writes it; "0.0.0.0" and "[::]": every interface. */
    if (host[0] == '[' && n >= 2 && host[n - 1] == ']') {
        memmove(host, host + 1, n - 2);
        host[n - 2] = '\0';
    }
    if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0) host[0] = '\0';
    const int port = atoi(colon ? colon + 1 : o->metrics_port);
    int rc = dt_metrics_http_start(host, port, http, err);
    if (rc < 0 && !colon && host[0]) {
        /* A task's cluster host is often a service name that resolves
         * only once the task is up, or an address of a proxy (Kubernetes):
         * then every interface, as a ps listens by default. */
        dt_log(DT_LOG_WARN, "%s; serving /metrics on every interface instead", err->msg);
        dt_err_clear(err);
        rc = dt_metrics_http_start(NULL, port, http, err);
    }
    return rc < 0 ? dt_err_wrap(err, DT_ECONFIG, "--metrics-port %s", o->metrics_port) : 0;
}

/* Runs this process's role (ps, evaluator, chief or worker) until it ends
 * or a signal stops it; the role's code, with err set when negative. */
static int run_role(const options *o, const dt_cluster *cluster, const dt_role *role,
                    const dt_job *job, const dt_rpc_security *security, long long max_message_bytes,
                    dt_err *err) {
    int task = role->index;
    dt_log_set_task(task);
    if (role->type == DT_TASK_PS) {
        dt_log_set_role('P');
        dt_ps_params pp = {.cluster = cluster,
                           .task_index = task,
                           .keep_serving = o->keep_serving,
                           .linger_ms = job->ps_linger_secs * 1000,
                           .security = security,
                           .max_message_bytes = max_message_bytes,
                           .log_dir = log_dir_named(o) ? job->log_dir : NULL,
                           .max_steps = max_steps_named(o, job),
                           .epochs = job->epochs_named ? job->epochs : 0,
                           .listen_addr = o->listen};
        if (guard_limits(o, &pp.guard) < 0) return dt_err_set(err, DT_EINVAL, "bad guard flag");
        dt_ps *ps = NULL;
        dt_metrics_http *http = NULL;
        int rc = max_message_bytes ? 0 : derived_message_cap(job, &pp.max_message_bytes, err);
        if (rc == 0) rc = dt_ps_start(&pp, &ps, err);
        if (rc == 0 && o->metrics_port && (rc = dt_ps_metrics_attach(ps, err)) == 0)
            rc = start_metrics(o, o->listen, &http, err);
        if (rc == 0) rc = dt_ps_wait(ps, &stop_signal, err);
        dt_metrics_http_stop(http);
        dt_ps_metrics_detach(ps);
        dt_ps_free(ps);
        return rc;
    }
    int is_eval = role->type == DT_TASK_EVALUATOR;
    dt_log_set_role(is_eval ? 'E' : task == 0 ? 'C' : 'W');
    dt_metrics_http *http = NULL;
    const dt_addr *own = is_eval ? (cluster->num_evaluators ? &cluster->evaluators[0] : NULL)
                                 : &cluster->workers[task];
    int rc = 0;
    if (o->metrics_port && (rc = dt_train_metrics_register(is_eval, task == 0, err)) == 0)
        rc = start_metrics(o, own ? own->addr : NULL, &http, err);
    dt_worker_params wp = {
        .cluster = cluster, .job = job, .task_index = task, .security = security};
    if (rc == 0)
        rc = is_eval     ? dt_evaluator_run(job, &stop_signal, err)
             : task == 0 ? dt_chief_run(&wp, &stop_signal, err)
                         : dt_worker_run(&wp, &stop_signal, err);
    dt_metrics_http_stop(http);
    return rc;
}

int main(int argc, char **argv) {
    dt_alloc_tune_process();
    if (argc > 1 && (strcmp(argv[1], "eval") == 0 || strcmp(argv[1], "predict") == 0))
        return run_tool(argc, argv);
    if (argc > 1 && (strcmp(argv[1], "health") == 0 || strcmp(argv[1], "status") == 0))
        return run_monitor(argc, argv);
    if (argc > 1 && strcmp(argv[1], "gen-criteo") == 0) return run_gen_criteo(argc, argv);
    options o;
    memset(&o, 0, sizeof o);
    int status = parse_args(argc, argv, &o);
    if (status >= 0) return status;

    if ((status = set_log_level(&o, DT_LOG_INFO)) >= 0) return status;
    dt_err err;
    dt_err_clear(&err);
    dt_cluster cluster;
    /* Zeroed: resolve_role sets it unless it fails, which the static
     * analyzer cannot tell (it does not follow usage_error, variadic). */
    dt_role role = {0};
    if (load_cluster(&o, &cluster, &err) < 0) {
        fprintf(stderr, "dtrain: %s\n", err.msg);
        return EXIT_USAGE;
    }
    if ((status = resolve_role(&o, &cluster, &role)) < 0) status = check_role_flags(&o, &role);
    if (status >= 0) {
        dt_cluster_deinit(&cluster);
        return status;
    }
    int is_ps = role.type == DT_TASK_PS;
    long long max_message_bytes = o.max_message_mb ? atoll(o.max_message_mb) << 20 : 0;
    dt_rpc_security security;
    dt_job job;
    if ((status = security_from(&o, is_ps, &security)) >= 0) {
        dt_cluster_deinit(&cluster);
        return status;
    }
    if (load_job(&o, &job, &err) < 0) {
        fprintf(stderr, "dtrain: %s\n", err.msg);
        dt_cluster_deinit(&cluster);
        return EXIT_USAGE;
    }
    if (role.type == DT_TASK_EVALUATOR && !job.data.eval_data[0]) {
        dt_cluster_deinit(&cluster);
        return usage_error("evaluator: the job has no \"eval_data\" to score checkpoints on (set "
                           "it in the job config, or --set eval_data=FILE)%s",
                           "");
    }

    take_signals_on_a_thread(1);

    /* The process keeps one reference to the RPC runtime and exits without
     * the final grpc_shutdown: that call joins gRPC's executor threads, and
     * after a write larger than the socket buffer one of them sits out a
     * 10 s poll, so a ps that served big tensors took 10 s to exit. Nothing
     * durable is left to gRPC by then; the kernel closes the sockets. */
    dt_rpc_init();
    int rc = run_role(&o, &cluster, &role, &job, &security, max_message_bytes, &err);
    dt_cluster_deinit(&cluster);
    return exit_status(rc, &err);
}
