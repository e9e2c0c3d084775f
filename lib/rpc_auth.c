/*
 * rpc_auth: who may call a server. The server's credentials (TLS with
 * certificate files reloaded at the next handshake after they change, a
 * token file) and, for each call, the caller's identity from its client
 * certificate and its metadata (the bearer token, a shared token's
 * claimed identity), checked against the cluster. The server counts and
 * logs what this refuses (rpc_server.c).
 */
#include "rpc_auth.h"

#include <grpc/grpc_security.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "alloc.h"
#include "auth.h"
#include "log.h"
#include "rpc_internal.h"

/* The certificate files of a TLS server and what was last handed to gRPC. */
typedef struct {
    pthread_mutex_t mu;
    char addr[300];
    char cert_file[4096], key_file[4096], ca_file[4096]; /* ca_file "" : no mTLS */
    struct stat seen[3];                                 /* cert, key, ca as last loaded */
    int generation; /* dt_rpc_cert_generation() when last loaded */
    int loaded;     /* a config was handed to gRPC */
} tls_files;

struct dt_rpc_auth {
    tls_files *tls;         /* NULL: plaintext */
    int mtls;               /* client certificates required and verified */
    dt_auth_tokens *tokens; /* NULL: no token required */
    int num_workers, num_ps;
};

/* ---- each call's identity ------------------------------------------------ */

/* The identity a verified client certificate names: its CN when that is an
 * identity, else the first SAN (URI or DNS) that is one. */
static int peer_from_cert(grpc_call *call, dt_rpc_peer *peer, char *seen, size_t cap) {
    grpc_auth_context *ctx = grpc_call_auth_context(call);
    if (!ctx) return -1;
    int rc = -1;
    const char *names[2] = {GRPC_X509_CN_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME};
    for (int k = 0; k < 2 && rc < 0; k++) {
        grpc_auth_property_iterator it = grpc_auth_context_find_properties_by_name(ctx, names[k]);
        const grpc_auth_property *prop;
        while (rc < 0 && (prop = grpc_auth_property_iterator_next(&it)) != NULL) {
            char value[DT_PEER_NAME_MAX];
            size_t n =
                prop->value_length < sizeof value - 1 ? prop->value_length : sizeof value - 1;
            memcpy(value, prop->value, n);
            value[n] = '\0';
            if (k == 0) snprintf(seen, cap, "CN=%s", value);
            if (dt_auth_parse_identity(value, peer) == 0) rc = 0;
        }
    }
    grpc_auth_context_release(ctx);
    if (rc == 0) peer->authenticated = 1;
    return rc;
}

/* The value of metadata `key` (borrowed from md), or NULL. */
static const grpc_slice *find_md(const grpc_metadata_array *md, const char *key) {
    for (size_t i = 0; i < md->count; i++)
        if (grpc_slice_str_cmp(md->metadata[i].key, key) == 0) return &md->metadata[i].value;
    return NULL;
}

grpc_status_code dt_rpc_auth_check(const dt_rpc_auth *a, grpc_call *call,
                                   const grpc_metadata_array *md, int open, dt_rpc_peer *peer,
                                   dt_err *err) {
    memset(peer, 0, sizeof *peer);
    peer->role = DT_PEER_ANY;
    peer->task = -1;
    snprintf(peer->name, sizeof peer->name, "anonymous");
    if (open || (!a->mtls && !a->tokens)) return GRPC_STATUS_OK;
    dt_rpc_peer cert_peer;
    int have_cert = 0;
    if (a->mtls) {
        char seen[64] = "no CN";
        if (peer_from_cert(call, &cert_peer, seen, sizeof seen) < 0) {
            dt_err_set(err, DT_EINVAL,
                       "unauthenticated: the client certificate (%s) names no dtrain identity "
                       "(chief, worker:N, ps:N, tool)",
                       seen);
            return GRPC_STATUS_UNAUTHENTICATED;
        }
        have_cert = 1;
        *peer = cert_peer;
    }
    if (a->tokens) {
        const grpc_slice *auth = find_md(md, DT_RPC_MD_AUTHORIZATION);
        const char *claimed_name = have_cert ? cert_peer.name : NULL;
        char claimed[DT_PEER_NAME_MAX] = "";
        const grpc_slice *claim = find_md(md, DT_RPC_MD_IDENTITY);
        if (!claimed_name && claim) {
            dt_rpc_slice_to_str(*claim, claimed, sizeof claimed);
            claimed_name = claimed;
        }
        char value[DT_AUTH_TOKEN_MAX + 16];
        if (auth) dt_rpc_slice_to_str(*auth, value, sizeof value);
        if (!auth || strncmp(value, "Bearer ", 7) != 0) {
            dt_err_set(err, DT_EINVAL,
                       "unauthenticated: no bearer token (the server needs one "
                       "from its token file)");
            return GRPC_STATUS_UNAUTHENTICATED;
        }
        dt_rpc_peer token_peer;
        int checked = dt_auth_tokens_check(a->tokens, value + 7, strlen(value + 7), claimed_name,
                                           &token_peer);
        if (checked == DT_AUTH_NO_IDENTITY) {
            dt_err_set(err, DT_EINVAL,
                       "unauthenticated: the token is right but the call names no identity "
                       "(a shared token needs the %s header: chief, worker:N, ps:N or tool)",
                       DT_RPC_MD_IDENTITY);
            return GRPC_STATUS_UNAUTHENTICATED;
        }
        if (checked == DT_AUTH_BAD_IDENTITY) {
            dt_err_set(err, DT_EINVAL,
                       "unauthenticated: the token is right but the identity \"%.40s\" is not "
                       "one (chief, worker:N, ps:N or tool)",
                       claimed_name);
            return GRPC_STATUS_UNAUTHENTICATED;
        }
        if (checked < 0) {
            dt_err_set(err, DT_EINVAL,
                       "unauthenticated: wrong token%s%s (the server's token file does not "
                       "hold it)",
                       claimed_name ? " for " : "", claimed_name ? claimed_name : "");
            return GRPC_STATUS_UNAUTHENTICATED;
        }
        if (have_cert && strcmp(token_peer.name, cert_peer.name) != 0) {
            dt_err_set(err, DT_EINVAL,
                       "unauthenticated: the token is not the one of %s (the certificate's)",
                       cert_peer.name);
            return GRPC_STATUS_UNAUTHENTICATED;
        }
        *peer = token_peer;
    }
    int bound = peer->role == DT_PEER_WORKER ? a->num_workers
                : peer->role == DT_PEER_PS   ? a->num_ps
                                             : 0;
    if (bound > 0 && peer->task >= bound) {
        dt_err_set(err, DT_EPERM, "permission denied: %s is not in the cluster (%d %s tasks)",
                   peer->name, bound, peer->role == DT_PEER_WORKER ? "worker" : "ps");
        return GRPC_STATUS_PERMISSION_DENIED;
    }
    return GRPC_STATUS_OK;
}

/* ---- the server's credentials ---------------------------------------------- */

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Reads the three files into a new gRPC config (*out), noting what was read. */
static int tls_load(tls_files *t, grpc_ssl_server_certificate_config **out, dt_err *err) {
    *out = NULL;
    char *cert = NULL, *key = NULL, *ca = NULL;
    struct stat st[3];
    memset(st, 0, sizeof st);
    const char *paths[3] = {t->cert_file, t->key_file, t->ca_file};
    for (int i = 0; i < 3; i++)
        if (paths[i][0] && stat(paths[i], &st[i]) != 0) memset(&st[i], 0, sizeof st[i]);
    int rc = dt_rpc_read_pem(t->cert_file, "--tls-cert", &cert, err);
    if (rc == 0) rc = dt_rpc_read_pem(t->key_file, "--tls-key", &key, err);
    if (rc == 0 && t->ca_file[0]) rc = dt_rpc_read_pem(t->ca_file, "--tls-ca", &ca, err);
    if (rc == 0) {
        grpc_ssl_pem_key_cert_pair pair = {key, cert};
        /* gRPC 1.51 asserts that a fetched config has root certificates
         * even when it requests no client certificate (and so uses none):
         * without a CA, the server's own chain stands in. */
        *out = grpc_ssl_server_certificate_config_create(ca ? ca : cert, &pair, 1);
        memcpy(t->seen, st, sizeof st);
        t->generation = dt_rpc_cert_generation();
    }
    if (key) memset(key, 0, strlen(key));
    free(cert);
    free(key);
    free(ca);
    return rc;
}

/* gRPC's certificate-config fetcher: runs at every new handshake. */
static grpc_ssl_certificate_config_reload_status
tls_fetch(void *user_data, grpc_ssl_server_certificate_config **config) {
    tls_files *t = user_data;
    grpc_ssl_certificate_config_reload_status status = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
    pthread_mutex_lock(&t->mu);
    int changed = !t->loaded || t->generation != dt_rpc_cert_generation();
    const char *paths[3] = {t->cert_file, t->key_file, t->ca_file};
    for (int i = 0; i < 3 && !changed; i++) {
        struct stat st;
        if (paths[i][0] && stat(paths[i], &st) == 0 && !same_file(&st, &t->seen[i])) changed = 1;
    }
    if (changed) {
        dt_err err;
        dt_err_clear(&err);
        if (tls_load(t, config, &err) == 0) {
            if (t->loaded)
                dt_log(DT_LOG_INFO, "rpc server %s: TLS certificates reloaded from %s", t->addr,
                       t->cert_file);
            t->loaded = 1;
            status = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
        } else if (!t->loaded) {
            dt_log(DT_LOG_ERROR, "rpc server %s: %s", t->addr, err.msg);
            status = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_FAIL;
        } else {
            /* Mid-rotation (a file written, its partner not yet): keep the
             * last good set; the next handshake tries again. */
            dt_log(DT_LOG_WARN, "rpc server %s: keeping the previous certificates: %s", t->addr,
                   err.msg);
            t->generation = dt_rpc_cert_generation();
        }
    }
    pthread_mutex_unlock(&t->mu);
    return status;
}

int dt_rpc_auth_new(const dt_rpc_security *sec, const char *addr, int num_workers, int num_ps,
                    dt_rpc_auth **auth, grpc_server_credentials **out, dt_err *err) {
    *out = NULL;
    dt_rpc_auth *a = *auth = dt_calloc(1, sizeof *a);
    if (!a) return dt_err_set(err, DT_ENOMEM, "out of memory");
    a->num_workers = num_workers;
    a->num_ps = num_ps;
    int rc = 0;
    if (sec && sec->token_file && (rc = dt_auth_tokens_load(sec->token_file, &a->tokens, err)) < 0)
        return rc;
    if (!sec || (!sec->cert_file && !sec->key_file && !sec->ca_file)) {
        dt_log(DT_LOG_WARN,
               a->tokens ? "rpc server %s: no TLS: tokens and tensors cross the network in clear; "
                           "anyone who can read the traffic can replay a token and control the job"
                         : "rpc server %s: no TLS and no token: anyone who can reach the port can "
                           "control the job (see --tls-cert, --token-file)",
               addr);
        *out = grpc_insecure_server_credentials_create();
        return 0;
    }
    if (!sec->cert_file || !sec->key_file)
        return dt_err_set(err, DT_EINVAL, "TLS needs both --tls-cert and --tls-key");
    tls_files *t = dt_calloc(1, sizeof *t);
    if (!t) return dt_err_set(err, DT_ENOMEM, "out of memory");
    pthread_mutex_init(&t->mu, NULL);
    snprintf(t->addr, sizeof t->addr, "%s", addr);
    snprintf(t->cert_file, sizeof t->cert_file, "%s", sec->cert_file);
    snprintf(t->key_file, sizeof t->key_file, "%s", sec->key_file);
    snprintf(t->ca_file, sizeof t->ca_file, "%s", sec->ca_file ? sec->ca_file : "");
    a->tls = t;
    a->mtls = sec->ca_file != NULL;
    /* Read once here so a bad file fails the start with its name. */
    grpc_ssl_server_certificate_config *probe = NULL;
    if ((rc = tls_load(t, &probe, err)) < 0) return rc;
    grpc_ssl_server_certificate_config_destroy(probe);
    grpc_ssl_server_credentials_options *opts =
        grpc_ssl_server_credentials_create_options_using_config_fetcher(
            a->mtls ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                    : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
            tls_fetch, t);
    *out = opts ? grpc_ssl_server_credentials_create_with_options(opts) : NULL;
    if (!*out) return dt_err_set(err, DT_EINTERNAL, "cannot create TLS credentials");
    if (a->mtls)
        dt_log(DT_LOG_INFO, "rpc server %s: TLS, client certificates of CA %s required", addr,
               sec->ca_file);
    else if (a->tokens)
        dt_log(DT_LOG_INFO, "rpc server %s: TLS, no client certificates (tokens identify callers)",
               addr);
    else
        dt_log(DT_LOG_WARN,
               "rpc server %s: TLS without client certificates or tokens: the traffic is "
               "encrypted, but anyone who can reach the port can control the job (see --tls-ca, "
               "--token-file)",
               addr);
    return 0;
}

void dt_rpc_auth_free(dt_rpc_auth *a) {
    if (!a) return;
    if (a->tls) {
        pthread_mutex_destroy(&a->tls->mu);
        free(a->tls);
    }
    dt_auth_tokens_free(a->tokens);
    free(a);
}
