/*
 * rpc_client: channels and batched unary calls over the gRPC core.
 *
 * Each dt_rpc_call_all creates one completion queue, starts one batch of six
 * ops per call (send metadata, message, close; receive metadata, message,
 * status) tagged with the call's state, and drains the queue until every
 * call has completed. The deadline bounds each call, so the drain ends.
 */
#include "rpc_client.h"

#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "auth.h"
#include "log.h"
#include "rpc_internal.h"
#include "spin.h"

struct dt_rpc_channel {
    grpc_channel *grpc;
    char addr[300];
    char authorization[DT_AUTH_TOKEN_MAX + 16]; /* "Bearer TOKEN"; "" sends none */
    char identity[DT_PEER_NAME_MAX];            /* claimed with the token */
};

typedef struct {
    grpc_call *call;
    grpc_metadata_array initial_md;
    grpc_metadata_array trailing_md;
    grpc_byte_buffer *send;
    grpc_byte_buffer *recv;
    grpc_status_code status;
    grpc_slice details;
    grpc_metadata md[2]; /* authorization, identity */
    int started;
} call_slot;

/* Channel credentials for sec: TLS when it names a CA or a certificate. */
static int make_channel_creds(const dt_rpc_security *sec, grpc_channel_credentials **out,
                              dt_err *err) {
    *out = NULL;
    if (!sec || (!sec->ca_file && !sec->cert_file && !sec->key_file)) {
        *out = grpc_insecure_credentials_create();
        return 0;
    }
    if (!sec->ca_file) return dt_err_set(err, DT_EINVAL, "TLS needs --tls-ca to verify the server");
    if (!sec->cert_file != !sec->key_file)
        return dt_err_set(err, DT_EINVAL,
                          "a client certificate needs both --tls-cert and --tls-key");
    char *ca = NULL, *cert = NULL, *key = NULL;
    int rc = dt_rpc_read_pem(sec->ca_file, "--tls-ca", &ca, err);
    if (rc == 0 && sec->cert_file) rc = dt_rpc_read_pem(sec->cert_file, "--tls-cert", &cert, err);
    if (rc == 0 && sec->key_file) rc = dt_rpc_read_pem(sec->key_file, "--tls-key", &key, err);
    if (rc == 0) {
        grpc_ssl_pem_key_cert_pair pair = {key, cert};
        *out = grpc_ssl_credentials_create(ca, cert ? &pair : NULL, NULL, NULL);
        if (!*out) rc = dt_err_set(err, DT_EINTERNAL, "cannot create TLS credentials");
    }
    if (key) memset(key, 0, strlen(key));
    free(ca);
    free(cert);
    free(key);
    return rc;
}

/* The token to send, from sec->token_file for sec->identity. */
static int load_token(dt_rpc_channel *ch, const dt_rpc_security *sec, dt_err *err) {
    if (!sec || !sec->token_file) return 0;
    dt_auth_tokens *tokens = NULL;
    int rc = dt_auth_tokens_load(sec->token_file, &tokens, err);
    if (rc < 0) return rc;
    const char *identity = sec->identity ? sec->identity : "tool";
    const char *token = dt_auth_tokens_for(tokens, identity);
    if (!token)
        rc = dt_err_set(err, DT_EINVAL, "%s: no token for identity %s", sec->token_file, identity);
    else {
        snprintf(ch->authorization, sizeof ch->authorization, "Bearer %s", token);
        snprintf(ch->identity, sizeof ch->identity, "%s", identity);
    }
    dt_auth_tokens_free(tokens);
    return rc;
}

int dt_rpc_channel_new(const char *addr, dt_rpc_channel **out, dt_err *err) {
    return dt_rpc_channel_new_secure(addr, NULL, out, err);
}

int dt_rpc_channel_new_secure(const char *addr, const dt_rpc_security *sec, dt_rpc_channel **out,
                              dt_err *err) {
    *out = NULL;
    dt_rpc_channel *ch = dt_calloc(1, sizeof *ch);
    if (!ch) return dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
    dt_rpc_init();
    snprintf(ch->addr, sizeof ch->addr, "%s", addr);
    grpc_channel_credentials *creds = NULL;
    int rc = load_token(ch, sec, err);
    if (rc == 0) rc = make_channel_creds(sec, &creds, err);
    if (rc < 0) {
        free(ch);
        dt_rpc_shutdown();
        return dt_err_wrap(err, rc, "rpc: channel to %s", addr);
    }
    /* Unlimited messages (tensors), no transparent retries (dtrain retries
     * with its own budget and logs it), and a short reconnect backoff so a
     * restarted ps is found again quickly. */
    grpc_arg args[5];
    memset(args, 0, sizeof args);
    /* grpc_arg's key is a char *, which gRPC only reads; a string literal is
     * one in C. */
    char *keys[5] = {GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
                     GRPC_ARG_ENABLE_RETRIES, GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                     GRPC_ARG_MAX_RECONNECT_BACKOFF_MS};
    /* Reconnects 20 ms after a refused connection, then 1.6 times longer
     * each time up to 1 s: a ps that starts with its workers (the demo) is
     * found within tens of ms, as dt_worker_retry polls. */
    const int values[5] = {-1, -1, 0, 20, 1000};
    for (int i = 0; i < 5; i++) {
        args[i].type = GRPC_ARG_INTEGER;
        args[i].key = keys[i];
        args[i].value.integer = values[i];
    }
    grpc_channel_args channel_args = {5, args};
    ch->grpc = grpc_channel_create(addr, creds, &channel_args);
    grpc_channel_credentials_release(creds);
    if (!ch->grpc) {
        free(ch);
        dt_rpc_shutdown();
        return dt_err_set(err, DT_EINVAL, "rpc: cannot create channel to %s", addr);
    }
    *out = ch;
    return 0;
}

void dt_rpc_channel_free(dt_rpc_channel *ch) {
    if (!ch) return;
    grpc_channel_destroy(ch->grpc);
    free(ch);
    dt_rpc_shutdown();
}

static int start_call(dt_rpc_call *c, call_slot *slot, grpc_completion_queue *cq,
                      gpr_timespec deadline) {
    grpc_metadata_array_init(&slot->initial_md);
    grpc_metadata_array_init(&slot->trailing_md);
    slot->details = grpc_empty_slice();
    grpc_slice method = grpc_slice_from_static_string(c->method);
    slot->call = grpc_channel_create_call(c->channel->grpc, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                          method, NULL, deadline, NULL);
    if (!slot->call)
        return dt_err_set(&c->err, DT_EINTERNAL, "%s %s: cannot create call", c->channel->addr,
                          c->method);
    slot->send = dt_rpc_buf_to_byte_buffer(c->request);
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].flags = c->wait_for_ready ? GRPC_INITIAL_METADATA_WAIT_FOR_READY : 0;
    if (c->channel->authorization[0]) {
        slot->md[0].key = grpc_slice_from_static_string(DT_RPC_MD_AUTHORIZATION);
        slot->md[0].value = grpc_slice_from_static_string(c->channel->authorization);
        slot->md[1].key = grpc_slice_from_static_string(DT_RPC_MD_IDENTITY);
        slot->md[1].value = grpc_slice_from_static_string(c->channel->identity);
        ops[0].data.send_initial_metadata.count = 2;
        ops[0].data.send_initial_metadata.metadata = slot->md;
    }
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = slot->send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &slot->initial_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &slot->recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &slot->trailing_md;
    ops[5].data.recv_status_on_client.status = &slot->status;
    ops[5].data.recv_status_on_client.status_details = &slot->details;
    if (grpc_call_start_batch(slot->call, ops, 6, slot, NULL) != GRPC_CALL_OK)
        return dt_err_set(&c->err, DT_EINTERNAL, "%s %s: cannot start call", c->channel->addr,
                          c->method);
    slot->started = 1;
    return 0;
}

static void finish_call(dt_rpc_call *c, call_slot *slot, int timeout_ms) {
    if (slot->status == GRPC_STATUS_OK) {
        int rc;
        if (c->in_pieces) {
            rc = dt_rpc_buf_from_byte_buffer_pieces(slot->recv, &c->response, &c->err);
            slot->recv = NULL; /* the response holds it now */
        } else {
            rc = dt_rpc_buf_from_byte_buffer(slot->recv, &c->response, &c->err);
        }
        if (rc < 0) dt_err_wrap(&c->err, c->err.code, "%s %s", c->channel->addr, c->method);
        return;
    }
    char details[400];
    dt_rpc_slice_to_str(slot->details, details, sizeof details);
    int code = dt_rpc_err_from_status(slot->status);
    if (slot->status == GRPC_STATUS_DEADLINE_EXCEEDED)
        dt_err_set(&c->err, code, "%s %s: deadline exceeded after %d ms", c->channel->addr,
                   c->method, timeout_ms);
    else
        dt_err_set(&c->err, code, "%s %s: %s: %s", c->channel->addr, c->method,
                   dt_rpc_status_name(slot->status), details);
}

static void release_slot(call_slot *slot) {
    if (slot->send) grpc_byte_buffer_destroy(slot->send);
    if (slot->recv) grpc_byte_buffer_destroy(slot->recv);
    grpc_slice_unref(slot->details);
    grpc_metadata_array_destroy(&slot->initial_md);
    grpc_metadata_array_destroy(&slot->trailing_md);
    if (slot->call) grpc_call_unref(slot->call);
}

int dt_rpc_call_all(dt_rpc_call *calls, int n, int timeout_ms, dt_err *err) {
    if (n <= 0) return 0;
    call_slot *slots = dt_calloc((size_t)n, sizeof *slots);
    if (!slots) return dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
    int pending = 0;
    for (int i = 0; i < n; i++) {
        dt_err_clear(&calls[i].err);
        memset(&calls[i].response, 0, sizeof calls[i].response);
        if (start_call(&calls[i], &slots[i], cq, deadline) == 0) pending++;
    }
    /* The thread that waits on the queue is gRPC's poller for it: polled
     * without blocking for up to the spin budget while the process's
     * calls mostly end within it (spin.h), its core stays awake for the
     * answer. One share for the process, not one a thread: a thread-local
     * in lib/ (built -fPIC) would make the binary need the dynamic
     * loader's __tls_get_addr. Two threads' updates may race; one is
     * lost, which only delays the share. */
    static _Atomic double shared_hits = DT_SPIN_FIRST_HITS;
    double hits = atomic_load_explicit(&shared_hits, memory_order_relaxed);
    double t0 = dt_now_secs();
    double spin_until = dt_spin_worth(hits) && !dt_spin_covered() ? dt_spin_deadline() : t0;
    while (pending > 0) {
        int spin = dt_now_secs() < spin_until;
        grpc_event ev = grpc_completion_queue_next(
            cq, spin ? gpr_time_0(GPR_CLOCK_MONOTONIC) : gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type != GRPC_OP_COMPLETE) continue;
        call_slot *slot = ev.tag;
        int i = (int)(slot - slots);
        finish_call(&calls[i], slot, timeout_ms);
        pending--;
    }
    dt_spin_note(&hits, t0);
    atomic_store_explicit(&shared_hits, hits, memory_order_relaxed);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        release_slot(&slots[i]);
        if (calls[i].err.code != DT_OK && rc == 0) {
            rc = calls[i].err.code;
            dt_err_set(err, rc, "%s", calls[i].err.msg);
        }
    }
    free(slots);
    return rc;
}
