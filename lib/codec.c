/*
 * codec: nanopb glue for proto/dtrain.proto: each message between its
 * dt_msg_* struct (codec.h) and nanopb's, both ways, field by field; the
 * push messages written and read by hand; the values the schema allows but
 * no ps sends refused where they enter. The repeated Tensor field's bytes,
 * written and read in place, are codec_tensor.c's.
 *
 * One of the codec files (codec*.c, codec_internal.h), the only ones that
 * include nanopb's headers (pb_*.h, *.pb.h).
 *
 * Threading: stateless; safe from any thread.
 */
#include "codec.h"

#include <pb_decode.h>
#include <pb_encode.h>
#include <stdio.h>
#include <string.h>

#include "codec_internal.h"
#include "dtrain.pb.h"
#include "health.pb.h"
#include "text.h"

typedef struct {
    decode_ctx *ctx;
    dt_name_list *names;
} names_arg;

typedef struct {
    const char *const *names;
    int count;
} out_names_arg;

static int host_is_little_endian(void) {
    const uint16_t one = 1;
    uint8_t first;
    memcpy(&first, &one, 1);
    return first == 1;
}

/* ---- encoding ---------------------------------------------------------- */

static bool encode_names(pb_ostream_t *stream, const pb_field_t *field, void *const *arg) {
    const out_names_arg *on = *arg;
    for (int i = 0; i < on->count; i++) {
        if (!pb_encode_tag_for_field(stream, field)) return false;
        if (!pb_encode_string(stream, (const pb_byte_t *)on->names[i], strlen(on->names[i])))
            return false;
    }
    return true;
}

static void set_tensor_encoder(pb_callback_t *cb, const dt_tensor_list *list) {
    cb->funcs.encode = dt_codec_encode_tensors;
    cb->arg = (void *)list;
}

static void copy_str(char *dst, size_t cap, const char *src) {
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* An unknown kind goes as "", which the receiver refuses. */
static void optim_to_pb(const dt_optim_config *in, dtrain_OptimizerConfig *out) {
    const char *name = dt_optim_name(in->kind);
    copy_str(out->name, sizeof out->name, name ? name : "");
    out->learning_rate = in->learning_rate;
    out->momentum = in->momentum;
    out->nesterov = in->nesterov != 0;
    out->beta1 = in->beta1;
    out->beta2 = in->beta2;
    out->epsilon = in->epsilon;
    out->initial_accumulator = in->initial_accumulator;
    out->l1_regularization_strength = in->ftrl_l1;
    out->l2_regularization_strength = in->ftrl_l2;
    out->ftrl_beta = in->ftrl_beta;
}

/* The name passed check_values. */
static void optim_from_pb(const dtrain_OptimizerConfig *in, dt_optim_config *out) {
    int kind = dt_optim_from_name(in->name);
    DT_ASSERT(kind >= 0);
    out->kind = (dt_optim_kind)kind;
    out->learning_rate = in->learning_rate;
    out->momentum = in->momentum;
    out->nesterov = in->nesterov;
    out->beta1 = in->beta1;
    out->beta2 = in->beta2;
    out->epsilon = in->epsilon;
    out->initial_accumulator = in->initial_accumulator;
    out->ftrl_l1 = in->l1_regularization_strength;
    out->ftrl_l2 = in->l2_regularization_strength;
    out->ftrl_beta = in->ftrl_beta;
}

static void table_to_pb(const dt_msg_table *in, dtrain_TableSpec *out) {
    copy_str(out->name, sizeof out->name, in->name);
    out->rows = in->rows;
    out->dim = in->dim;
    int init = in->init;
    copy_str(out->init, sizeof out->init,
             init >= DT_TABLE_INIT_ZEROS && init <= DT_TABLE_INIT_UNIFORM
                 ? dt_table_init_names[init]
                 : "");
    out->init_scale = in->init_scale;
    out->seed = in->seed;
}

/* check_create has refused unknown init names; -1 stays for a caller that
 * decodes without it. */
static void table_from_pb(const dtrain_TableSpec *in, dt_msg_table *out) {
    copy_str(out->name, sizeof out->name, in->name);
    out->rows = in->rows;
    out->dim = in->dim;
    out->init = in->init[0] ? -1 : DT_TABLE_INIT_ZEROS;
    for (int i = 0; dt_table_init_names[i]; i++)
        if (strcmp(in->init, dt_table_init_names[i]) == 0) out->init = i;
    out->init_scale = in->init_scale;
    out->seed = in->seed;
}

static void schedule_to_pb(const dt_lr_schedule *in, dtrain_LearningRateSchedule *out) {
    const char *kind = dt_lr_kind_name(in->kind);
    copy_str(out->kind, sizeof out->kind, kind ? kind : "");
    out->decay_steps = in->decay_steps;
    out->decay_rate = in->decay_rate;
    out->staircase = in->staircase != 0;
    out->alpha = in->alpha;
    int n = in->num_boundaries;
    if (n < 0) n = 0;
    if (n > DT_LR_MAX_BOUNDARIES) n = DT_LR_MAX_BOUNDARIES;
    out->boundaries_count = (pb_size_t)n;
    memcpy(out->boundaries, in->boundaries, sizeof(int64_t) * (size_t)n);
    out->values_count = (pb_size_t)(n + (in->kind == DT_LR_PIECEWISE ? 1 : 0));
    memcpy(out->values, in->values, sizeof(double) * out->values_count);
}

/* check_create has refused unknown kinds; a piecewise schedule whose value
 * count does not match its boundaries decodes with num_boundaries -1, which
 * the receiver's dt_lr_check names. */
static void schedule_from_pb(const dtrain_LearningRateSchedule *in, dt_lr_schedule *out) {
    memset(out, 0, sizeof *out);
    out->kind = in->kind[0] ? dt_lr_kind_from_name(in->kind) : DT_LR_CONSTANT;
    out->decay_steps = in->decay_steps;
    out->decay_rate = in->decay_rate;
    out->staircase = in->staircase;
    out->alpha = in->alpha;
    out->num_boundaries = (int)in->boundaries_count;
    memcpy(out->boundaries, in->boundaries, sizeof(int64_t) * in->boundaries_count);
    /* A piecewise schedule needs one more value than boundaries. */
    if (in->kind[0] && out->kind == DT_LR_PIECEWISE && in->values_count != in->boundaries_count + 1)
        out->num_boundaries = -1;
    memcpy(out->values, in->values, sizeof(double) * in->values_count);
}

static void decision_to_pb(const dt_sync_decision *in, bool *has, dtrain_SyncDecision *out) {
    *has = in->has;
    if (!in->has) return;
    out->step = in->step;
    out->all_held = in->all_held;
    int n = in->members_len < 0 ? 0 : in->members_len;
    if (n > (int)sizeof out->members.bytes) n = (int)sizeof out->members.bytes;
    out->members.size = (pb_size_t)n;
    memcpy(out->members.bytes, in->members, (size_t)n);
}

static void decision_from_pb(bool has, const dtrain_SyncDecision *in, dt_sync_decision *out) {
    memset(out, 0, sizeof *out);
    out->has = has;
    if (!has) return;
    out->step = in->step;
    out->all_held = in->all_held;
    out->members_len = (int)in->members.size;
    memcpy(out->members, in->members.bytes, in->members.size);
}

static void consistency_to_pb(const dt_consistency *in, dtrain_Consistency *out) {
    const char *mode = dt_mode_name(in->mode);
    copy_str(out->mode, sizeof out->mode, mode ? mode : "");
    out->replicas_to_aggregate = in->replicas_to_aggregate;
    out->total_num_replicas = in->total_num_replicas;
    out->staleness = in->staleness;
    out->timeout_ms = in->timeout_ms;
}

static void consistency_from_pb(const dtrain_Consistency *in, dt_consistency *out) {
    out->mode = in->mode[0] ? dt_mode_from_name(in->mode) : DT_MODE_ASYNC;
    out->replicas_to_aggregate = in->replicas_to_aggregate;
    out->total_num_replicas = in->total_num_replicas;
    out->staleness = in->staleness;
    out->timeout_ms = in->timeout_ms;
}

/* All nanopb message structs in one place, so encode/decode share storage. */
typedef union {
    dtrain_CreateRequest create_req;
    dtrain_CreateResponse create_resp;
    dtrain_PullRequest pull_req;
    dtrain_PullResponse pull_resp;
    dtrain_PushRequest push_req;
    dtrain_PushResponse push_resp;
    dtrain_StatusRequest status_req;
    dtrain_StatusResponse status_resp;
    dtrain_ShutdownRequest shutdown_req;
    dtrain_ShutdownResponse shutdown_resp;
    grpc_health_v1_HealthCheckRequest health_req;
    grpc_health_v1_HealthCheckResponse health_resp;
    dtrain_SparsePullRequest sparse_pull_req;
    dtrain_SparsePullResponse sparse_pull_resp;
    dtrain_SparseExportRequest sparse_export_req;
    dtrain_SparseExportResponse sparse_export_resp;
    dtrain_SparseImportRequest sparse_import_req;
    dtrain_SparseImportResponse sparse_import_resp;
} pb_any;

static const pb_msgdesc_t *descriptor(dt_msg_type type) {
    switch (type) {
    case DT_MSG_CREATE_REQ: return dtrain_CreateRequest_fields;
    case DT_MSG_CREATE_RESP: return dtrain_CreateResponse_fields;
    case DT_MSG_PULL_REQ: return dtrain_PullRequest_fields;
    case DT_MSG_PULL_RESP: return dtrain_PullResponse_fields;
    case DT_MSG_PUSH_REQ: return dtrain_PushRequest_fields;
    case DT_MSG_PUSH_RESP: return dtrain_PushResponse_fields;
    case DT_MSG_STATUS_REQ: return dtrain_StatusRequest_fields;
    case DT_MSG_STATUS_RESP: return dtrain_StatusResponse_fields;
    case DT_MSG_SHUTDOWN_REQ: return dtrain_ShutdownRequest_fields;
    case DT_MSG_SHUTDOWN_RESP: return dtrain_ShutdownResponse_fields;
    case DT_MSG_HEALTH_REQ: return grpc_health_v1_HealthCheckRequest_fields;
    case DT_MSG_HEALTH_RESP: return grpc_health_v1_HealthCheckResponse_fields;
    case DT_MSG_SPARSE_PULL_REQ: return dtrain_SparsePullRequest_fields;
    case DT_MSG_SPARSE_PULL_RESP: return dtrain_SparsePullResponse_fields;
    case DT_MSG_SPARSE_EXPORT_REQ: return dtrain_SparseExportRequest_fields;
    case DT_MSG_SPARSE_EXPORT_RESP: return dtrain_SparseExportResponse_fields;
    case DT_MSG_SPARSE_IMPORT_REQ: return dtrain_SparseImportRequest_fields;
    case DT_MSG_SPARSE_IMPORT_RESP: return dtrain_SparseImportResponse_fields;
    default: return NULL;
    }
}

/* The bytes of type's member of pb_any: what zeroing it takes. The union is
 * as large as its largest member (a StatusResponse, ~20 kB with its
 * workers' failure texts); zeroing all of it for every small push was the
 * largest single cost of a tiny model's step. */
static size_t pb_size(dt_msg_type type) {
    switch (type) {
    case DT_MSG_CREATE_REQ: return sizeof(dtrain_CreateRequest);
    case DT_MSG_CREATE_RESP: return sizeof(dtrain_CreateResponse);
    case DT_MSG_PULL_REQ: return sizeof(dtrain_PullRequest);
    case DT_MSG_PULL_RESP: return sizeof(dtrain_PullResponse);
    case DT_MSG_PUSH_REQ: return sizeof(dtrain_PushRequest);
    case DT_MSG_PUSH_RESP: return sizeof(dtrain_PushResponse);
    case DT_MSG_STATUS_REQ: return sizeof(dtrain_StatusRequest);
    case DT_MSG_STATUS_RESP: return sizeof(dtrain_StatusResponse);
    case DT_MSG_SHUTDOWN_REQ: return sizeof(dtrain_ShutdownRequest);
    case DT_MSG_SHUTDOWN_RESP: return sizeof(dtrain_ShutdownResponse);
    case DT_MSG_HEALTH_REQ: return sizeof(grpc_health_v1_HealthCheckRequest);
    case DT_MSG_HEALTH_RESP: return sizeof(grpc_health_v1_HealthCheckResponse);
    case DT_MSG_SPARSE_PULL_REQ: return sizeof(dtrain_SparsePullRequest);
    case DT_MSG_SPARSE_PULL_RESP: return sizeof(dtrain_SparsePullResponse);
    case DT_MSG_SPARSE_EXPORT_REQ: return sizeof(dtrain_SparseExportRequest);
    case DT_MSG_SPARSE_EXPORT_RESP: return sizeof(dtrain_SparseExportResponse);
    case DT_MSG_SPARSE_IMPORT_REQ: return sizeof(dtrain_SparseImportRequest);
    case DT_MSG_SPARSE_IMPORT_RESP: return sizeof(dtrain_SparseImportResponse);
    default: return sizeof(pb_any);
    }
}

static const char *const type_names[DT_MSG_COUNT] = {
    "CreateRequest",       "CreateResponse",       "PullRequest",         "PullResponse",
    "PushRequest",         "PushResponse",         "StatusRequest",       "StatusResponse",
    "ShutdownRequest",     "ShutdownResponse",     "HealthCheckRequest",  "HealthCheckResponse",
    "SparsePullRequest",   "SparsePullResponse",   "SparseExportRequest", "SparseExportResponse",
    "SparseImportRequest", "SparseImportResponse",
};

/* Each message with more than a field or two, both ways, field by field. */
static void create_req_to_pb(const dt_msg_create_req *m, dtrain_CreateRequest *out) {
    set_tensor_encoder(&out->variables, &m->out);
    out->global_step = m->global_step;
    out->has_optimizer = true;
    optim_to_pb(&m->optim, &out->optimizer);
    out->max_steps = m->max_steps;
    copy_str(out->model, sizeof out->model, m->model);
    copy_str(out->job_id, sizeof out->job_id, m->job_id);
    set_tensor_encoder(&out->slots, &m->slots_out);
    out->has_schedule = true;
    schedule_to_pb(&m->schedule, &out->schedule);
    out->has_consistency = true;
    consistency_to_pb(&m->consistency, &out->consistency);
    out->skip_nonfinite = m->skip_nonfinite;
    out->step_ceiling = m->step_ceiling;
    int nt = m->num_tables < 0 ? 0 : m->num_tables > DT_MAX_TABLES ? DT_MAX_TABLES : m->num_tables;
    out->tables_count = (pb_size_t)nt;
    for (int i = 0; i < nt; i++)
        table_to_pb(&m->tables[i], &out->tables[i]);
    out->tables_pending = m->tables_pending;
    const dt_table_evict_policy *e = &m->eviction;
    out->has_eviction = e->idle_steps || e->min_touches || e->touch_window_steps;
    out->eviction.idle_steps = e->idle_steps;
    out->eviction.min_touches = e->min_touches;
    out->eviction.touch_window_steps = e->touch_window_steps;
}

static void create_req_from_pb(const dtrain_CreateRequest *in, dt_msg_create_req *m) {
    m->global_step = in->global_step;
    optim_from_pb(&in->optimizer, &m->optim);
    m->max_steps = in->max_steps;
    copy_str(m->model, sizeof m->model, in->model);
    copy_str(m->job_id, sizeof m->job_id, in->job_id);
    schedule_from_pb(&in->schedule, &m->schedule);
    consistency_from_pb(&in->consistency, &m->consistency);
    m->skip_nonfinite = in->skip_nonfinite;
    m->step_ceiling = in->step_ceiling;
    m->num_tables = (int)in->tables_count;
    for (pb_size_t i = 0; i < in->tables_count; i++)
        table_from_pb(&in->tables[i], &m->tables[i]);
    m->tables_pending = in->tables_pending;
    m->eviction.idle_steps = in->eviction.idle_steps;
    m->eviction.min_touches = in->eviction.min_touches;
    m->eviction.touch_window_steps = in->eviction.touch_window_steps;
}

static void pull_req_to_pb(const dt_msg_pull_req *m, dtrain_PullRequest *out,
                           out_names_arg *names_storage) {
    names_storage->names = m->out_names;
    names_storage->count = m->out_count;
    out->names.funcs.encode = encode_names;
    out->names.arg = names_storage;
    out->worker = m->worker;
    out->include_slots = m->include_slots;
    out->min_global_step = m->min_global_step;
    out->seen_step = m->seen_step;
    decision_to_pb(&m->decision, &out->has_decision, &out->decision);
}

static void pull_req_from_pb(const dtrain_PullRequest *in, dt_msg_pull_req *m) {
    m->worker = in->worker;
    m->include_slots = in->include_slots;
    m->min_global_step = in->min_global_step;
    m->seen_step = in->seen_step;
    decision_from_pb(in->has_decision, &in->decision, &m->decision);
}

static void pull_resp_to_pb(const dt_msg_pull_resp *m, dtrain_PullResponse *out) {
    out->incarnation = m->incarnation;
    out->global_step = m->global_step;
    out->done = m->done;
    out->wait = m->wait;
    decision_to_pb(&m->decided, &out->has_decided, &out->decided);
    set_tensor_encoder(&out->variables, &m->out);
    set_tensor_encoder(&out->slots, &m->slots_out);
}

static void pull_resp_from_pb(const dtrain_PullResponse *in, dt_msg_pull_resp *m) {
    m->incarnation = in->incarnation;
    m->global_step = in->global_step;
    m->done = in->done;
    m->wait = in->wait;
    decision_from_pb(in->has_decided, &in->decided, &m->decided);
}

static void status_resp_to_pb(const dt_msg_status_resp *m, dtrain_StatusResponse *s) {
    s->incarnation = m->incarnation;
    s->ready = m->ready;
    s->global_step = m->global_step;
    s->max_steps = m->max_steps;
    s->done = m->done;
    s->num_variables = m->num_variables;
    s->num_bytes = m->num_bytes;
    copy_str(s->model, sizeof s->model, m->model);
    s->pushes_applied = m->pushes_applied;
    s->pushes_rejected = m->pushes_rejected;
    s->pushes_dropped = m->pushes_dropped;
    int n = m->num_staleness_counts;
    if (n < 0) n = 0;
    if (n > DT_STALENESS_BUCKETS) n = DT_STALENESS_BUCKETS;
    s->staleness_counts_count = (pb_size_t)n;
    memcpy(s->staleness_counts, m->staleness_counts, sizeof(int64_t) * (size_t)n);
    s->max_lead = m->max_lead;
    copy_str(s->mode, sizeof s->mode, m->mode);
    s->pushes_nonfinite = m->pushes_nonfinite;
    s->updates_nonfinite = m->updates_nonfinite;
    s->calls_refused = m->calls_refused;
    s->conns_closed_flood = m->conns_closed_flood;
    s->conns_closed_slow = m->conns_closed_slow;
    s->conns_closed_over_cap = m->conns_closed_over_cap;
    s->conns_closed_backoff = m->conns_closed_backoff;
    s->calls_dropped = m->calls_dropped;
    s->sync_digest = m->sync_digest;
    s->steps_per_sec = m->steps_per_sec;
    s->uptime_ms = m->uptime_ms;
    int nw = m->num_workers < 0                       ? 0
             : m->num_workers > DT_STATUS_MAX_WORKERS ? DT_STATUS_MAX_WORKERS
                                                      : m->num_workers;
    s->workers_count = (pb_size_t)nw;
    for (int i = 0; i < nw; i++) {
        s->workers[i].worker = m->workers[i].worker;
        s->workers[i].pushes = m->workers[i].pushes;
        s->workers[i].last_push_ms = m->workers[i].last_push_ms;
        s->workers[i].last_seen_ms = m->workers[i].last_seen_ms;
        s->workers[i].passes_done = m->workers[i].passes_done;
        copy_str(s->workers[i].failure, sizeof s->workers[i].failure, m->workers[i].failure);
    }
    copy_str(s->failure, sizeof s->failure, m->failure);
    copy_str(s->job_id, sizeof s->job_id, m->job_id);
    int nt = m->num_tables < 0 ? 0 : m->num_tables > DT_MAX_TABLES ? DT_MAX_TABLES : m->num_tables;
    s->tables_count = (pb_size_t)nt;
    for (int i = 0; i < nt; i++) {
        copy_str(s->tables[i].name, sizeof s->tables[i].name, m->tables[i].name);
        s->tables[i].rows_held = m->tables[i].rows_held;
        s->tables[i].nonzero = m->tables[i].nonzero;
        s->tables[i].bytes = m->tables[i].bytes;
    }
}

static void status_resp_from_pb(const dtrain_StatusResponse *s, dt_msg_status_resp *m) {
    m->incarnation = s->incarnation;
    m->ready = s->ready;
    m->global_step = s->global_step;
    m->max_steps = s->max_steps;
    m->done = s->done;
    m->num_variables = s->num_variables;
    m->num_bytes = s->num_bytes;
    copy_str(m->model, sizeof m->model, s->model);
    copy_str(m->job_id, sizeof m->job_id, s->job_id);
    m->pushes_applied = s->pushes_applied;
    m->pushes_rejected = s->pushes_rejected;
    m->pushes_dropped = s->pushes_dropped;
    m->num_staleness_counts = (int)s->staleness_counts_count;
    memcpy(m->staleness_counts, s->staleness_counts,
           sizeof(int64_t) * (size_t)s->staleness_counts_count);
    m->max_lead = s->max_lead;
    copy_str(m->mode, sizeof m->mode, s->mode);
    m->pushes_nonfinite = s->pushes_nonfinite;
    m->updates_nonfinite = s->updates_nonfinite;
    m->calls_refused = s->calls_refused;
    m->conns_closed_flood = s->conns_closed_flood;
    m->conns_closed_slow = s->conns_closed_slow;
    m->conns_closed_over_cap = s->conns_closed_over_cap;
    m->conns_closed_backoff = s->conns_closed_backoff;
    m->calls_dropped = s->calls_dropped;
    m->sync_digest = s->sync_digest;
    m->steps_per_sec = s->steps_per_sec;
    m->uptime_ms = s->uptime_ms;
    m->num_workers = (int)s->workers_count;
    for (pb_size_t i = 0; i < s->workers_count; i++) {
        m->workers[i].worker = s->workers[i].worker;
        m->workers[i].pushes = s->workers[i].pushes;
        m->workers[i].last_push_ms = s->workers[i].last_push_ms;
        m->workers[i].last_seen_ms = s->workers[i].last_seen_ms;
        m->workers[i].passes_done = s->workers[i].passes_done;
        copy_str(m->workers[i].failure, sizeof m->workers[i].failure, s->workers[i].failure);
    }
    copy_str(m->failure, sizeof m->failure, s->failure);
    m->num_tables = (int)s->tables_count;
    for (pb_size_t i = 0; i < s->tables_count; i++) {
        copy_str(m->tables[i].name, sizeof m->tables[i].name, s->tables[i].name);
        m->tables[i].rows_held = s->tables[i].rows_held;
        m->tables[i].nonzero = s->tables[i].nonzero;
        m->tables[i].bytes = s->tables[i].bytes;
    }
}

static void sparse_to_pb(dt_msg_type type, const void *msg, pb_any *pb) {
    switch (type) {
    case DT_MSG_SPARSE_PULL_REQ: {
        const dt_msg_sparse_pull_req *m = msg;
        pb->sparse_pull_req.worker = m->worker;
        copy_str(pb->sparse_pull_req.table, sizeof pb->sparse_pull_req.table, m->table);
        set_tensor_encoder(&pb->sparse_pull_req.ids, &m->ids_out);
        pb->sparse_pull_req.seen_step = m->seen_step;
        break;
    }
    case DT_MSG_SPARSE_PULL_RESP: {
        const dt_msg_sparse_pull_resp *m = msg;
        pb->sparse_pull_resp.incarnation = m->incarnation;
        pb->sparse_pull_resp.global_step = m->global_step;
        pb->sparse_pull_resp.done = m->done;
        set_tensor_encoder(&pb->sparse_pull_resp.values, &m->values_out);
        break;
    }
    case DT_MSG_SPARSE_EXPORT_REQ: {
        const dt_msg_sparse_export_req *m = msg;
        copy_str(pb->sparse_export_req.table, sizeof pb->sparse_export_req.table, m->table);
        pb->sparse_export_req.after_id = m->after_id;
        pb->sparse_export_req.max_rows = m->max_rows;
        pb->sparse_export_req.include_slots = m->include_slots;
        break;
    }
    case DT_MSG_SPARSE_EXPORT_RESP: {
        const dt_msg_sparse_export_resp *m = msg;
        pb->sparse_export_resp.incarnation = m->incarnation;
        pb->sparse_export_resp.global_step = m->global_step;
        set_tensor_encoder(&pb->sparse_export_resp.tensors, &m->out);
        pb->sparse_export_resp.more = m->more;
        break;
    }
    case DT_MSG_SPARSE_IMPORT_REQ: {
        const dt_msg_sparse_import_req *m = msg;
        copy_str(pb->sparse_import_req.table, sizeof pb->sparse_import_req.table, m->table);
        set_tensor_encoder(&pb->sparse_import_req.tensors, &m->out);
        pb->sparse_import_req.last = m->last;
        break;
    }
    case DT_MSG_SPARSE_IMPORT_RESP:
        pb->sparse_import_resp.rows_held = ((const dt_msg_sparse_import_resp *)msg)->rows_held;
        break;
    default: break;
    }
}

static void sparse_from_pb(dt_msg_type type, const pb_any *pb, void *msg) {
    switch (type) {
    case DT_MSG_SPARSE_PULL_REQ: {
        dt_msg_sparse_pull_req *m = msg;
        m->worker = pb->sparse_pull_req.worker;
        copy_str(m->table, sizeof m->table, pb->sparse_pull_req.table);
        m->seen_step = pb->sparse_pull_req.seen_step;
        break;
    }
    case DT_MSG_SPARSE_PULL_RESP: {
        dt_msg_sparse_pull_resp *m = msg;
        m->incarnation = pb->sparse_pull_resp.incarnation;
        m->global_step = pb->sparse_pull_resp.global_step;
        m->done = pb->sparse_pull_resp.done;
        break;
    }
    case DT_MSG_SPARSE_EXPORT_REQ: {
        dt_msg_sparse_export_req *m = msg;
        copy_str(m->table, sizeof m->table, pb->sparse_export_req.table);
        m->after_id = pb->sparse_export_req.after_id;
        m->max_rows = pb->sparse_export_req.max_rows;
        m->include_slots = pb->sparse_export_req.include_slots;
        break;
    }
    case DT_MSG_SPARSE_EXPORT_RESP: {
        dt_msg_sparse_export_resp *m = msg;
        m->incarnation = pb->sparse_export_resp.incarnation;
        m->global_step = pb->sparse_export_resp.global_step;
        m->more = pb->sparse_export_resp.more;
        break;
    }
    case DT_MSG_SPARSE_IMPORT_REQ: {
        dt_msg_sparse_import_req *m = msg;
        copy_str(m->table, sizeof m->table, pb->sparse_import_req.table);
        m->last = pb->sparse_import_req.last;
        break;
    }
    case DT_MSG_SPARSE_IMPORT_RESP:
        ((dt_msg_sparse_import_resp *)msg)->rows_held = pb->sparse_import_resp.rows_held;
        break;
    default: break;
    }
}

/* Fills the nanopb struct from a dtrain message; `names_storage` backs the
 * out-names callback argument for the duration of the encode. */
static void to_pb(dt_msg_type type, const void *msg, pb_any *pb, out_names_arg *names_storage) {
    memset(pb, 0, pb_size(type));
    switch (type) {
    case DT_MSG_CREATE_REQ: create_req_to_pb(msg, &pb->create_req); break;
    case DT_MSG_CREATE_RESP: {
        const dt_msg_create_resp *m = msg;
        pb->create_resp.incarnation = m->incarnation;
        pb->create_resp.global_step = m->global_step;
        break;
    }
    case DT_MSG_PULL_REQ: pull_req_to_pb(msg, &pb->pull_req, names_storage); break;
    case DT_MSG_PULL_RESP: pull_resp_to_pb(msg, &pb->pull_resp); break;
    case DT_MSG_PUSH_REQ: /* by hand: hand_write */
    case DT_MSG_PUSH_RESP: break;
    case DT_MSG_STATUS_REQ: {
        const dt_msg_status_req *m = msg;
        pb->status_req.worker = m->worker;
        pb->status_req.done_seen = m->done_seen;
        pb->status_req.passes_done = m->passes_done;
        pb->status_req.heartbeat = m->heartbeat;
        copy_str(pb->status_req.failure, sizeof pb->status_req.failure, m->failure);
        break;
    }
    case DT_MSG_STATUS_RESP: status_resp_to_pb(msg, &pb->status_resp); break;
    case DT_MSG_SHUTDOWN_REQ: {
        const dt_msg_shutdown_req *m = msg;
        copy_str(pb->shutdown_req.reason, sizeof pb->shutdown_req.reason, m->reason);
        copy_str(pb->shutdown_req.failure, sizeof pb->shutdown_req.failure, m->failure);
        pb->shutdown_req.stop_training = m->stop_training;
        break;
    }
    case DT_MSG_HEALTH_REQ:
        copy_str(pb->health_req.service, sizeof pb->health_req.service,
                 ((const dt_msg_health_req *)msg)->service);
        break;
    case DT_MSG_HEALTH_RESP:
        pb->health_resp.status =
            (grpc_health_v1_HealthCheckResponse_ServingStatus)((const dt_msg_health_resp *)msg)
                ->status;
        break;
    case DT_MSG_SHUTDOWN_RESP:
    case DT_MSG_COUNT: break;
    default: sparse_to_pb(type, msg, pb); break;
    }
}

/* ---- the push messages, by hand ---------------------------------------- */

/* PushRequest and PushResponse, a step's messages, are written and read
 * without nanopb's field iteration: a table of their fields, in number
 * order (each with a 1-byte tag: numbers below 16), the repeated Tensor
 * fields among them. The bytes are nanopb's (proto3: a field at its default
 * is left out; fields in number order), and reading follows nanopb's rules
 * (any order, the last value wins, unknown fields skipped, field number 0
 * refused, "wrong wire type", an int32 sent as a wider varint cut to its low
 * 32 bits, as protobuf's C++ parser and nanopb do). test/pbref.c holds both
 * directions to nanopb's. */
typedef enum { HAND_INT32, HAND_INT64, HAND_BOOL, HAND_FIXED64, HAND_TENSORS } hand_kind;

typedef struct {
    uint32_t number;
    hand_kind kind;
    size_t offset;    /* in the dt_msg_* struct; tensors: its dt_tensor_list */
    size_t in_offset; /* tensors: its dt_tensor_views */
    const char *what; /* tensors: their name in errors */
} hand_field;

typedef struct {
    const hand_field *fields;
    int count;
} hand_msg;

/* The tables are made from nanopb's own field lists (the generated
 * <Message>_FIELDLIST), so a field added to the .proto cannot be left out
 * of them: a scalar of a kind this codec knows becomes a row (and the
 * dt_msg_* struct needs a member of its name and C type, or this file does
 * not compile); a scalar of another kind names an enum constant that does
 * not exist (HAND_UINT32, say) and does not compile either; a callback field
 * (a repeated Tensor) needs its HAND_TENSORS_<struct>_<field> below, naming
 * its list and views in the struct, or it does not compile. */
#define HAND_ROW(msg, atype, htype, ltype, name, number) HAND_ROW_##atype(msg, ltype, name, number)
#define HAND_ROW_STATIC(msg, ltype, name, number)                                                  \
    {number, HAND_##ltype, offsetof(msg, name), 0, NULL},
#define HAND_ROW_CALLBACK(msg, ltype, name, number) {number, HAND_TENSORS_##msg##_##name},
#define HAND_TENSORS_AT(type, out, in, what)                                                       \
    HAND_TENSORS, offsetof(type, out), offsetof(type, in), what
#define HAND_TENSORS_dt_msg_push_req_gradients                                                     \
    HAND_TENSORS_AT(dt_msg_push_req, out, in, "gradients")
#define HAND_TENSORS_dt_msg_push_req_sparse_ids                                                    \
    HAND_TENSORS_AT(dt_msg_push_req, sparse_ids_out, sparse_ids_in, "sparse_ids")
#define HAND_TENSORS_dt_msg_push_req_sparse_grads                                                  \
    HAND_TENSORS_AT(dt_msg_push_req, sparse_grads_out, sparse_grads_in, "sparse_grads")
#define HAND_TENSORS_dt_msg_push_resp_variables                                                    \
    HAND_TENSORS_AT(dt_msg_push_resp, out, in, "variables")
/* && 1 when a row's member has the C type hand_value reads for its kind. */
#define HAND_TYPE_OK(msg, atype, htype, ltype, name, number)                                       \
    &&HAND_TYPE_OK_##atype(msg, ltype, name)
#define HAND_TYPE_OK_STATIC(msg, ltype, name)                                                      \
    _Generic(((msg *)0)->name, int32_t                                                             \
             : HAND_##ltype == HAND_INT32, int64_t                                                 \
             : HAND_##ltype == HAND_INT64, bool                                                    \
             : HAND_##ltype == HAND_BOOL, uint64_t                                                 \
             : HAND_##ltype == HAND_FIXED64, default : 0)
#define HAND_TYPE_OK_CALLBACK(msg, ltype, name) 1

static const hand_field push_req_fields[] = {
    dtrain_PushRequest_FIELDLIST(HAND_ROW, dt_msg_push_req)};
static const hand_field push_resp_fields[] = {
    dtrain_PushResponse_FIELDLIST(HAND_ROW, dt_msg_push_resp)};
_Static_assert(1 dtrain_PushRequest_FIELDLIST(HAND_TYPE_OK, dt_msg_push_req),
               "PushRequest: a field's C type in dt_msg_push_req is not its wire kind's");
_Static_assert(1 dtrain_PushResponse_FIELDLIST(HAND_TYPE_OK, dt_msg_push_resp),
               "PushResponse: a field's C type in dt_msg_push_resp is not its wire kind's");
#define HAND_COUNT(fields) ((int)(sizeof fields / sizeof fields[0]))
static const hand_msg hand_push_req = {push_req_fields, HAND_COUNT(push_req_fields)};
static const hand_msg hand_push_resp = {push_resp_fields, HAND_COUNT(push_resp_fields)};

static const hand_msg *hand_of(dt_msg_type type) {
    if (type == DT_MSG_PUSH_REQ) return &hand_push_req;
    if (type == DT_MSG_PUSH_RESP) return &hand_push_resp;
    return NULL;
}

/* Field f of msg as its wire value (a varint's, or the fixed64's bits). */
static uint64_t hand_value(const hand_field *f, const void *msg) {
    const char *at = (const char *)msg + f->offset;
    switch (f->kind) {
    case HAND_INT32: return (uint64_t)(int64_t) * (const int32_t *)at;
    case HAND_INT64: return (uint64_t) * (const int64_t *)at;
    case HAND_BOOL: return *(const bool *)at ? 1 : 0;
    default: return *(const uint64_t *)at;
    }
}

/* Scalar field f of value v, sized (a sizing stream) or put straight into
 * a builder's bytes, as build_tensor puts a tensor's head: the bytes of
 * pb_encode_tag and pb_encode_varint (or pb_encode_fixed64), without their
 * call, write callback and memcpy per piece. */
static bool put_scalar(pb_ostream_t *stream, const hand_field *f, uint64_t v) {
    int fixed = f->kind == HAND_FIXED64;
    uint64_t key = ((uint64_t)f->number << 3) | (fixed ? PB_WT_64BIT : PB_WT_VARINT);
    size_t len = dt_codec_varint_len(key) + (fixed ? 8 : dt_codec_varint_len(v));
    if (stream->callback) { /* as pb_write, a sizing stream has no bound */
        builder *bd = stream->state;
        if (len > stream->max_size - stream->bytes_written || len > bd->own_len - bd->own_at)
            PB_RETURN_ERROR(stream, "stream full");
        uint8_t *p = dt_codec_put_varint(bd->own + bd->own_at, key);
        if (fixed) {
            for (int b = 0; b < 8; b++) /* little-endian, as pb_encode_fixed64 */
                *p++ = (uint8_t)(v >> (8 * b));
        } else {
            dt_codec_put_varint(p, v);
        }
        bd->own_at += len;
    }
    stream->bytes_written += len;
    return true;
}

/* Writes msg by hand; a sizing stream (no callback) only counts. */
static bool hand_write(pb_ostream_t *stream, const hand_msg *h, const void *msg) {
    for (int i = 0; i < h->count; i++) {
        const hand_field *f = &h->fields[i];
        if (f->kind == HAND_TENSORS) {
            const dt_tensor_list *out = (const dt_tensor_list *)((const char *)msg + f->offset);
            if (!dt_codec_write_tensors(stream, out, f->number)) return false;
            continue;
        }
        uint64_t v = hand_value(f, msg);
        if (v == 0) continue; /* proto3: the default is not sent */
        if (!stream->callback || stream->callback == dt_codec_builder_write) {
            if (!put_scalar(stream, f, v)) return false;
            continue;
        }
        if (f->kind == HAND_FIXED64) {
            if (!pb_encode_tag(stream, PB_WT_64BIT, f->number) || !pb_encode_fixed64(stream, &v))
                return false;
        } else if (!pb_encode_tag(stream, PB_WT_VARINT, f->number) ||
                   !pb_encode_varint(stream, v)) {
            return false;
        }
    }
    return true;
}

/* Reads field f's value into msg. */
static bool hand_read_field(pb_istream_t *stream, pb_wire_type_t wt, const hand_field *f,
                            void *msg) {
    char *at = (char *)msg + f->offset;
    uint64_t v;
    if (f->kind == HAND_FIXED64) {
        if (wt != PB_WT_64BIT) PB_RETURN_ERROR(stream, "wrong wire type");
        return pb_decode_fixed64(stream, at);
    }
    if (wt != PB_WT_VARINT) PB_RETURN_ERROR(stream, "wrong wire type");
    if (f->kind == HAND_BOOL) { /* as pb_decode_bool */
        uint32_t b;
        if (!dt_codec_read_varint32(stream, &b)) return false;
        *(bool *)at = b != 0;
        return true;
    }
    if (!dt_codec_read_varint(stream, &v)) return false;
    if (f->kind == HAND_INT64) {
        *(int64_t *)at = (int64_t)v;
        return true;
    }
    *(int32_t *)at = (int32_t)v;
    return true;
}

/* One Tensor of field f (its tag read) into f's views. */
static bool hand_read_tensor(pb_istream_t *stream, pb_wire_type_t wt, const hand_field *f,
                             void *msg, decode_ctx *ctx) {
    decode_ctx fctx = {ctx->err, f->what};
    views_arg va = {&fctx, (dt_tensor_views *)((char *)msg + f->in_offset)};
    void *arg = &va;
    pb_istream_t sub;
    if (wt != PB_WT_STRING) PB_RETURN_ERROR(stream, "wrong wire type");
    if (!dt_codec_open_sub(stream, &sub)) return false;
    if (!dt_codec_decode_tensor(&sub, NULL, &arg)) {
        /* The tensor's own error is in ctx->err; a substream error in its
         * stream. */
        if (ctx->err->code == DT_OK) PB_RETURN_ERROR(stream, PB_GET_ERROR(&sub));
        return false;
    }
    return pb_close_string_substream(stream, &sub);
}

/* Reads msg by hand from stream (views into the message's pieces). */
static bool hand_read(pb_istream_t *stream, const hand_msg *h, void *msg, decode_ctx *ctx) {
    for (int i = 0; i < h->count; i++)
        if (h->fields[i].kind == HAND_TENSORS)
            ((dt_tensor_views *)((char *)msg + h->fields[i].in_offset))->count = 0;
    while (stream->bytes_left > 0) {
        pb_wire_type_t wt;
        uint32_t tag;
        if (!dt_codec_next_tag(stream, &wt, &tag)) return false;
        const hand_field *f = NULL;
        for (int i = 0; i < h->count && !f; i++)
            if (h->fields[i].number == tag) f = &h->fields[i];
        bool ok = !f                        ? pb_skip_field(stream, wt)
                  : f->kind == HAND_TENSORS ? hand_read_tensor(stream, wt, f, msg, ctx)
                                            : hand_read_field(stream, wt, f, msg);
        if (!ok) return false;
    }
    return true;
}

/* msg as nanopb's struct in *pb (names backs a pull request's names) and
 * its encoded size; a negative code for an unknown type or a message that
 * cannot be sized. */
static int sized_pb(dt_msg_type type, const void *msg, pb_any *pb, out_names_arg *names,
                    size_t *size, dt_err *err) {
    const pb_msgdesc_t *fields = descriptor(type);
    if (!fields) return dt_err_set(err, DT_EINTERNAL, "codec: unknown message type %d", (int)type);
    to_pb(type, msg, pb, names);
    *size = 0;
    if (!pb_get_encoded_size(size, fields, pb))
        return dt_err_set(err, DT_EINVAL, "codec: %s: cannot size: invalid message",
                          type_names[type]);
    return 0;
}

int64_t dt_codec_size(dt_msg_type type, const void *msg, dt_err *err) {
    const hand_msg *h = hand_of(type);
    if (h) {
        pb_ostream_t sizing = PB_OSTREAM_SIZING;
        if (!hand_write(&sizing, h, msg))
            return dt_err_set(err, DT_EINVAL, "codec: %s: cannot size: %s", type_names[type],
                              PB_GET_ERROR(&sizing));
        return (int64_t)sizing.bytes_written;
    }
    pb_any pb;
    out_names_arg names;
    size_t size;
    int rc = sized_pb(type, msg, &pb, &names, &size, err);
    return rc < 0 ? rc : (int64_t)size;
}

int dt_codec_encode(dt_msg_type type, const void *msg, uint8_t *buf, size_t len, dt_err *err) {
    DT_ASSERT(host_is_little_endian()); /* tensor bytes are sent as they are in memory */
    const pb_msgdesc_t *fields = (unsigned)type < DT_MSG_COUNT ? descriptor(type) : NULL;
    if (!fields) return dt_err_set(err, DT_EINTERNAL, "codec: unknown message type %d", (int)type);
    pb_any pb;
    out_names_arg names;
    const hand_msg *h = hand_of(type);
    if (!h) to_pb(type, msg, &pb, &names);
    pb_ostream_t stream = pb_ostream_from_buffer(buf, len);
    if (h ? !hand_write(&stream, h, msg) : !pb_encode(&stream, fields, &pb))
        return dt_err_set(err, DT_EINVAL, "codec: %s: encode: %s", type_names[type],
                          PB_GET_ERROR(&stream));
    if (stream.bytes_written != len)
        return dt_err_set(err, DT_EINTERNAL, "codec: %s: encoded %zu bytes into a %zu-byte buffer",
                          type_names[type], stream.bytes_written, len);
    return 0;
}

/* The tensor lists msg encodes. */
static int lists_of(dt_msg_type type, const void *msg, const dt_tensor_list *lists[3]) {
    switch (type) {
    case DT_MSG_CREATE_REQ:
        lists[0] = &((const dt_msg_create_req *)msg)->out;
        lists[1] = &((const dt_msg_create_req *)msg)->slots_out;
        return 2;
    case DT_MSG_PULL_RESP:
        lists[0] = &((const dt_msg_pull_resp *)msg)->out;
        lists[1] = &((const dt_msg_pull_resp *)msg)->slots_out;
        return 2;
    case DT_MSG_PUSH_REQ:
        lists[0] = &((const dt_msg_push_req *)msg)->out;
        lists[1] = &((const dt_msg_push_req *)msg)->sparse_ids_out;
        lists[2] = &((const dt_msg_push_req *)msg)->sparse_grads_out;
        return 3;
    case DT_MSG_SPARSE_PULL_REQ:
        lists[0] = &((const dt_msg_sparse_pull_req *)msg)->ids_out;
        return 1;
    case DT_MSG_SPARSE_PULL_RESP:
        lists[0] = &((const dt_msg_sparse_pull_resp *)msg)->values_out;
        return 1;
    case DT_MSG_SPARSE_EXPORT_RESP:
        lists[0] = &((const dt_msg_sparse_export_resp *)msg)->out;
        return 1;
    case DT_MSG_SPARSE_IMPORT_REQ:
        lists[0] = &((const dt_msg_sparse_import_req *)msg)->out;
        return 1;
    case DT_MSG_PUSH_RESP: lists[0] = &((const dt_msg_push_resp *)msg)->out; return 1;
    default: return 0;
    }
}

int dt_codec_encode_buf(dt_msg_type type, const void *msg, dt_rpc_buf *out, dt_err *err) {
    DT_ASSERT(host_is_little_endian());
    memset(out, 0, sizeof *out);
    pb_any pb;
    out_names_arg names;
    size_t size;
    const hand_msg *h = hand_of(type);
    int rc = 0;
    if (h) {
        int64_t n = dt_codec_size(type, msg, err);
        if (n < 0) return (int)n;
        size = (size_t)n;
    } else if ((rc = sized_pb(type, msg, &pb, &names, &size, err)) < 0) {
        return rc;
    }
    /* The bytes sent in place are not the message's own. */
    const dt_tensor_list *lists[3];
    size_t refs = 0;
    for (int l = lists_of(type, msg, lists) - 1; l >= 0; l--)
        for (int i = 0; i < lists[l]->count; i++)
            if (dt_codec_by_ref(lists[l], &lists[l]->items[i])) refs += lists[l]->items[i].nbytes;
    DT_ASSERT(refs <= size);
    size_t own_len = size - refs;
    if ((rc = dt_rpc_buf_alloc(out, own_len, err)) < 0) return rc;
    dt_err local;
    dt_err_clear(&local);
    builder bd = {out->data, own_len, 0, out, &local};
    pb_ostream_t stream = {.callback = dt_codec_builder_write, .state = &bd, .max_size = size};
    if (h ? !hand_write(&stream, h, msg) : !pb_encode(&stream, descriptor(type), &pb))
        rc = local.code != DT_OK
                 ? dt_err_set(err, local.code, "codec: %s: encode: %s", type_names[type], local.msg)
                 : dt_err_set(err, DT_EINVAL, "codec: %s: encode: %s", type_names[type],
                              PB_GET_ERROR(&stream));
    else if (stream.bytes_written != size || bd.own_at != own_len)
        rc = dt_err_set(err, DT_EINTERNAL, "codec: %s: encoded %zu bytes (%zu own), sized %zu",
                        type_names[type], stream.bytes_written, bd.own_at, size);
    if (rc < 0) dt_rpc_buf_release(out);
    return rc;
}

/* ---- decoding ---------------------------------------------------------- */

static bool decode_name(pb_istream_t *stream, const pb_field_t *field, void **arg) {
    (void)field;
    names_arg *na = *arg;
    dt_name_list *names = na->names;
    if (names->count >= names->cap) {
        dt_err_set(na->ctx->err, DT_EINVAL, "names: more than %d", names->cap);
        return false;
    }
    size_t n = stream->bytes_left;
    if (n == 0 || n >= DT_TENSOR_NAME_MAX) {
        dt_err_set(na->ctx->err, DT_EINVAL, "names[%d]: length %zu (1..%d)", names->count, n,
                   DT_TENSOR_NAME_MAX - 1);
        return false;
    }
    char *dst = names->items[names->count];
    if (!pb_read(stream, (pb_byte_t *)dst, n)) return false;
    dst[n] = '\0';
    char what[32];
    snprintf(what, sizeof what, "names[%d]", names->count);
    if (dt_text_check_name(dst, n, DT_TENSOR_NAME_MAX - 1, what, na->ctx->err) < 0) return false;
    names->count++;
    return true;
}

static void set_tensor_decoder(pb_callback_t *cb, views_arg *va, dt_tensor_views *views,
                               decode_ctx *ctx) {
    views->count = 0;
    va->ctx = ctx;
    va->views = views;
    cb->funcs.decode = dt_codec_decode_tensor;
    cb->arg = va;
}

static void from_pb(dt_msg_type type, const pb_any *pb, void *msg) {
    switch (type) {
    case DT_MSG_CREATE_REQ: create_req_from_pb(&pb->create_req, msg); break;
    case DT_MSG_CREATE_RESP: {
        dt_msg_create_resp *m = msg;
        m->incarnation = pb->create_resp.incarnation;
        m->global_step = pb->create_resp.global_step;
        break;
    }
    case DT_MSG_PULL_REQ: pull_req_from_pb(&pb->pull_req, msg); break;
    case DT_MSG_PULL_RESP: pull_resp_from_pb(&pb->pull_resp, msg); break;
    case DT_MSG_PUSH_REQ: /* by hand: hand_read */
    case DT_MSG_PUSH_RESP: break;
    case DT_MSG_STATUS_REQ: {
        dt_msg_status_req *m = msg;
        m->worker = pb->status_req.worker;
        m->done_seen = pb->status_req.done_seen;
        m->passes_done = pb->status_req.passes_done;
        m->heartbeat = pb->status_req.heartbeat;
        copy_str(m->failure, sizeof m->failure, pb->status_req.failure);
        break;
    }
    case DT_MSG_STATUS_RESP: status_resp_from_pb(&pb->status_resp, msg); break;
    case DT_MSG_SHUTDOWN_REQ: {
        dt_msg_shutdown_req *m = msg;
        copy_str(m->reason, sizeof m->reason, pb->shutdown_req.reason);
        copy_str(m->failure, sizeof m->failure, pb->shutdown_req.failure);
        m->stop_training = pb->shutdown_req.stop_training;
        break;
    }
    case DT_MSG_HEALTH_REQ:
        copy_str(((dt_msg_health_req *)msg)->service, DT_HEALTH_SERVICE_MAX,
                 pb->health_req.service);
        break;
    case DT_MSG_HEALTH_RESP:
        ((dt_msg_health_resp *)msg)->status = (int)pb->health_resp.status;
        break;
    case DT_MSG_SHUTDOWN_RESP:
    case DT_MSG_COUNT: break;
    default: sparse_from_pb(type, pb, msg); break;
    }
}

/* A failure's reason, which a ps keeps and echoes to every caller (Status,
 * the "job failed" answers): nanopb bounded its length; the bytes must be
 * text (dt_text_check_line), so no strict proto3 decoder chokes on them.
 * (A Shutdown's `reason` is only logged, and the log escapes it.) */
static int check_line(const char *s, size_t cap, dt_msg_type type, const char *field, dt_err *err) {
    char what[64];
    snprintf(what, sizeof what, "%s: %s", type_names[type], field);
    return dt_text_check_line(s, strnlen(s, cap), cap - 1, what, err);
}

/* Choices travel by name (the proto's strings); each becomes its enum where
 * the message enters, and an unknown name is the caller's INVALID_ARGUMENT
 * quoting it and the field. Empty means the default, except for the
 * optimizer, which has none. nanopb has checked the lengths. */
static int check_name(const char *name, size_t cap, const char *const *names, int empty_ok,
                      const char *field, dt_err *err) {
    size_t len = strnlen(name, cap);
    if (len == 0 && empty_ok) return 0;
    for (int i = 0; names[i]; i++)
        if (strcmp(name, names[i]) == 0) return 0;
    char shown[4 * 64], want[128];
    dt_text_escape(shown, sizeof shown, name, len);
    return dt_err_set(err, DT_EINVAL, "%s: %s: unknown name \"%s\" (want %s)",
                      type_names[DT_MSG_CREATE_REQ], field, shown,
                      dt_text_choices(want, sizeof want, names, 0));
}

static int check_create(const dtrain_CreateRequest *c, dt_err *err) {
    int rc = check_name(c->optimizer.name, sizeof c->optimizer.name, dt_optim_names, 0,
                        "optimizer.name", err);
    if (rc == 0)
        rc = check_name(c->schedule.kind, sizeof c->schedule.kind, dt_lr_wire_kind_names, 1,
                        "schedule.kind", err);
    if (rc == 0)
        rc = check_name(c->consistency.mode, sizeof c->consistency.mode, dt_mode_names, 1,
                        "consistency.mode", err);
    for (pb_size_t i = 0; rc == 0 && i < c->tables_count; i++) {
        char field[32];
        snprintf(field, sizeof field, "tables[%u].init", (unsigned)i);
        rc = check_name(c->tables[i].init, sizeof c->tables[i].init, dt_table_init_names, 1, field,
                        err);
    }
    return rc;
}

/* Values the schema allows but no ps sends, refused here once rather than
 * by each reader of the message. */
static int check_values(dt_msg_type type, const pb_any *pb, dt_err *err) {
    if (type == DT_MSG_CREATE_REQ) return check_create(&pb->create_req, err);
    if (type == DT_MSG_SHUTDOWN_REQ)
        return check_line(pb->shutdown_req.failure, sizeof pb->shutdown_req.failure, type,
                          "failure", err);
    if (type == DT_MSG_STATUS_REQ)
        return check_line(pb->status_req.failure, sizeof pb->status_req.failure, type, "failure",
                          err);
    if (type != DT_MSG_STATUS_RESP) return 0;
    const dtrain_StatusResponse *s = &pb->status_resp;
    for (pb_size_t i = 0; i < s->staleness_counts_count; i++)
        if (s->staleness_counts[i] < 0)
            return dt_err_set(err, DT_EINVAL, "%s: staleness_counts[%u] is negative (%lld)",
                              type_names[type], (unsigned)i, (long long)s->staleness_counts[i]);
    int rc = check_line(s->failure, sizeof s->failure, type, "failure", err);
    for (pb_size_t i = 0; rc == 0 && i < s->workers_count; i++)
        rc = check_line(s->workers[i].failure, sizeof s->workers[i].failure, type,
                        "workers[].failure", err);
    /* A waiting worker reckons liveness from it: "never" is -1, no less. */
    for (pb_size_t i = 0; rc == 0 && i < s->workers_count; i++)
        if (s->workers[i].last_seen_ms < -1)
            rc = dt_err_set(err, DT_EINVAL, "%s: workers[%u].last_seen_ms is %lld (-1: never)",
                            type_names[type], (unsigned)i, (long long)s->workers[i].last_seen_ms);
    return rc;
}

/* Decodes the message in pieces[0..n) into msg. */
static int decode_pieces(dt_msg_type type, const dt_piece *pieces, int n, size_t len, void *msg,
                         dt_err *err) {
    const pb_msgdesc_t *fields = descriptor(type);
    if (!fields) return dt_err_set(err, DT_EINTERNAL, "codec: unknown message type %d", (int)type);
    dt_err local;
    dt_err_clear(&local);
    piece_pos pos = {pieces, pieces + n, 0};
    pb_istream_t stream = {.callback = dt_codec_piece_read, .state = &pos, .bytes_left = len};
    const hand_msg *h = hand_of(type);
    if (h) {
        decode_ctx hctx = {&local, "tensors"};
        if (hand_read(&stream, h, msg, &hctx)) return 0;
        if (local.code != DT_OK)
            return dt_err_set(err, local.code, "%s: %s", type_names[type], local.msg);
        return dt_err_set(err, DT_EINVAL, "%s: malformed message: %s", type_names[type],
                          PB_GET_ERROR(&stream));
    }
    decode_ctx ctx = {&local, "tensors"};
    decode_ctx slots_ctx = {&local, "slots"};
    views_arg va, sa;
    names_arg na;
    pb_any pb;
    memset(&pb, 0, pb_size(type));
    switch (type) {
    case DT_MSG_CREATE_REQ:
        ctx.what = "variables";
        set_tensor_decoder(&pb.create_req.variables, &va, &((dt_msg_create_req *)msg)->in, &ctx);
        set_tensor_decoder(&pb.create_req.slots, &sa, &((dt_msg_create_req *)msg)->slots_in,
                           &slots_ctx);
        break;
    case DT_MSG_PULL_RESP:
        ctx.what = "variables";
        set_tensor_decoder(&pb.pull_resp.variables, &va, &((dt_msg_pull_resp *)msg)->in, &ctx);
        set_tensor_decoder(&pb.pull_resp.slots, &sa, &((dt_msg_pull_resp *)msg)->slots_in,
                           &slots_ctx);
        break;
    case DT_MSG_SPARSE_PULL_REQ:
        ctx.what = "ids";
        set_tensor_decoder(&pb.sparse_pull_req.ids, &va, &((dt_msg_sparse_pull_req *)msg)->ids_in,
                           &ctx);
        break;
    case DT_MSG_SPARSE_PULL_RESP:
        ctx.what = "values";
        set_tensor_decoder(&pb.sparse_pull_resp.values, &va,
                           &((dt_msg_sparse_pull_resp *)msg)->values_in, &ctx);
        break;
    case DT_MSG_SPARSE_EXPORT_RESP:
        set_tensor_decoder(&pb.sparse_export_resp.tensors, &va,
                           &((dt_msg_sparse_export_resp *)msg)->in, &ctx);
        break;
    case DT_MSG_SPARSE_IMPORT_REQ:
        set_tensor_decoder(&pb.sparse_import_req.tensors, &va,
                           &((dt_msg_sparse_import_req *)msg)->in, &ctx);
        break;
    case DT_MSG_PULL_REQ: {
        dt_msg_pull_req *m = msg;
        m->names.count = 0;
        na.ctx = &ctx;
        na.names = &m->names;
        pb.pull_req.names.funcs.decode = decode_name;
        pb.pull_req.names.arg = &na;
        break;
    }
    default: break;
    }
    if (!pb_decode(&stream, fields, &pb)) {
        if (local.code != DT_OK)
            return dt_err_set(err, local.code, "%s: %s", type_names[type], local.msg);
        return dt_err_set(err, DT_EINVAL, "%s: malformed message: %s", type_names[type],
                          PB_GET_ERROR(&stream));
    }
    int rc = check_values(type, &pb, err);
    if (rc < 0) return rc;
    from_pb(type, &pb, msg);
    return 0;
}

int dt_codec_decode(dt_msg_type type, const uint8_t *buf, size_t len, void *msg, dt_err *err) {
    if (!buf && len) return dt_err_set(err, DT_EINTERNAL, "codec: NULL buffer of %zu bytes", len);
    dt_piece one = {buf, len};
    return decode_pieces(type, &one, len ? 1 : 0, len, msg, err);
}

int dt_codec_decode_buf(dt_msg_type type, const dt_rpc_buf *b, void *msg, dt_err *err) {
    dt_piece one;
    const dt_piece *pieces;
    int n = dt_rpc_buf_pieces(b, &one, &pieces);
    return decode_pieces(type, pieces, n, b->len, msg, err);
}

const char *dt_codec_method(dt_msg_type request_type) {
    switch (request_type) {
    case DT_MSG_CREATE_REQ: return DT_METHOD_CREATE;
    case DT_MSG_PULL_REQ: return DT_METHOD_PULL;
    case DT_MSG_PUSH_REQ: return DT_METHOD_PUSH;
    case DT_MSG_STATUS_REQ: return DT_METHOD_STATUS;
    case DT_MSG_SHUTDOWN_REQ: return DT_METHOD_SHUTDOWN;
    case DT_MSG_HEALTH_REQ: return DT_METHOD_HEALTH_CHECK;
    case DT_MSG_SPARSE_PULL_REQ: return DT_METHOD_SPARSE_PULL;
    case DT_MSG_SPARSE_EXPORT_REQ: return DT_METHOD_SPARSE_EXPORT;
    case DT_MSG_SPARSE_IMPORT_REQ: return DT_METHOD_SPARSE_IMPORT;
    default: return NULL;
    }
}
