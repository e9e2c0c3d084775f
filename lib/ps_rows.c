/*
 * ps_rows: the tables' sparse rows on the wire.
 *
 * A push's rows are checked (ids sorted, unique, on this task; values
 * finite) before any table changes; SparsePull sends rows by id;
 * SparseExport and SparseImport move a table's rows for a checkpoint.
 * Threading: model_lock for reading; each table locks its own stripes.
 */

#include "ps_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "log.h"

/* ---- tables: sparse rows on the wire --------------------------------------- */

/* Most bytes of rows one SparsePull reply may carry: past gRPC's own cap on
 * a message (an int), with room for the framing. */
#define SPARSE_PULL_MAX_BYTES ((int64_t)2047 << 20)

/* The parts' own buffers; the array itself is the caller's. */
void ps_sparse_parts_deinit(sparse_part *parts, int count) {
    for (int i = 0; parts && i < count; i++) {
        free(parts[i].ids);
        free(parts[i].rows);
        dt_table_batch_deinit(&parts[i].batch);
    }
}

static int find_table(const dt_ps *ps, const char *name) {
    for (int i = 0; i < ps->num_tables; i++)
        if (strcmp(dt_table_config_of(ps->tables[i])->name, name) == 0) return i;
    return -1;
}

/* Ids tensor i of v for table part->table, as a ps takes ids from the
 * wire: I64 (n), copied out of the message, strictly increasing, in
 * [0, rows), each placed on this task; planned into part->batch. `what`
 * names the call and the field ("push: sparse_ids[0]"). */
static int take_ids(dt_ps *ps, const char *what, const dt_tensor_views *v, int i, sparse_part *part,
                    dt_err *err) {
    const dt_tensor *x = &v->items[i];
    dt_table *t = ps->tables[part->table];
    const char *table = dt_table_config_of(t)->name;
    if (x->dtype != DT_DTYPE_I64 || x->ndim != 1)
        return dt_err_set(
            err, DT_EINVAL, "%s: %s %s: ids must be I64 (n) (got %s with %d dimensions)", ps->name,
            what, table, dt_dtype_name(x->dtype) ? dt_dtype_name(x->dtype) : "?", x->ndim);
    part->n = x->shape[0];
    part->ids = dt_malloc(x->nbytes ? x->nbytes : 1);
    if (!part->ids) return dt_err_set(err, DT_ENOMEM, "%s: %s: out of memory", ps->name, what);
    dt_codec_view_copy(v, i, part->ids);
    int rc = dt_table_plan(t, part->ids, part->n, &part->batch, err);
    if (rc < 0) return dt_err_wrap(err, DT_EINVAL, "%s: %s", ps->name, what);
    const int num_ps = ps->params.cluster->num_ps;
    for (int64_t k = 0; k < part->n; k++)
        if (dt_table_shard_of(part->ids[k], num_ps) != ps->params.task_index)
            return dt_err_set(err, DT_EINVAL,
                              "%s: %s %s: ids[%lld] = %lld is not held here: it belongs to ps "
                              "%d of %d",
                              ps->name, what, table, (long long)k, (long long)part->ids[k],
                              dt_table_shard_of(part->ids[k], num_ps), num_ps);
    return 0;
}

/* The gradient rows of part (tensor i of v): F32 (n, D), named after its
 * table, all finite (else *nonfinite is set too); read in place, as the
 * dense path reads its gradients, and kept as a span. */
static int take_grads(dt_ps *ps, const dt_tensor_views *v, int i, sparse_part *part, int *nonfinite,
                      dt_err *err) {
    const dt_tensor *g = &v->items[i];
    const dt_table_config *cfg = dt_table_config_of(ps->tables[part->table]);
    if (strcmp(g->name, cfg->name) != 0)
        return dt_err_set(err, DT_EINVAL, "%s: push: sparse_grads[%d] is %s, its sparse_ids[%d] %s",
                          ps->name, i, g->name, i, cfg->name);
    if (g->dtype != DT_DTYPE_F32 || g->ndim != 2 || g->shape[0] != part->n ||
        g->shape[1] != cfg->dim)
        return dt_err_set(err, DT_EINVAL,
                          "%s: push: sparse_grads[%d] %s: must be F32 (%lld, %d), one row per "
                          "id",
                          ps->name, i, cfg->name, (long long)part->n, cfg->dim);
    if (g->data) {
        part->whole = (dt_piece){g->data, g->nbytes};
        part->grads = (dt_span){&part->whole, 0, g->nbytes};
    } else {
        part->grads = v->spans[i];
    }
    size_t bad = dt_span_first_nonfinite(&part->grads);
    if (bad < part->grads.len / sizeof(float)) {
        *nonfinite = 1;
        size_t row = bad / (size_t)cfg->dim;
        return dt_err_set(err, DT_EINVAL,
                          "%s: push: sparse_grads[%d] %s: row %zu (id %lld) is not finite",
                          ps->name, i, cfg->name, row, (long long)part->ids[row]);
    }
    return 0;
}

/* Copies part's gradient rows out of the message into part->rows, for
 * sync, whose accumulators keep them past the call. */
int ps_take_rows(dt_ps *ps, sparse_part *part, dt_err *err) {
    part->rows = dt_malloc(part->grads.len ? part->grads.len : 1);
    if (!part->rows) return dt_err_set(err, DT_ENOMEM, "%s: push: out of memory", ps->name);
    dt_span_copy(&part->grads, part->rows);
    return 0;
}

/* Checks the sparse half of a push (parts: one per table this ps holds,
 * zeroed) before anything is applied: as many ids as gradient tensors,
 * each pair for a known table named once, ids and rows as above. *count
 * gets the pairs. */
int ps_check_sparse(dt_ps *ps, const dt_msg_push_req *req, sparse_part *parts, int *count,
                    int *nonfinite, dt_err *err) {
    const dt_tensor_views *iv = &req->sparse_ids_in, *gv = &req->sparse_grads_in;
    *count = 0;
    if (iv->count != gv->count)
        return dt_err_set(err, DT_EINVAL,
                          "%s: push: %d sparse_ids and %d sparse_grads: one of each per table",
                          ps->name, iv->count, gv->count);
    for (int i = 0; i < iv->count; i++) {
        int k = find_table(ps, iv->items[i].name);
        if (k < 0)
            return dt_err_set(err, DT_ENOTFOUND, "%s: push: sparse_ids[%d]: unknown table %s",
                              ps->name, i, iv->items[i].name);
        for (int j = 0; j < i; j++)
            if (parts[j].table == k)
                return dt_err_set(err, DT_EINVAL, "%s: push: sparse_ids[%d]: table %s given twice",
                                  ps->name, i, iv->items[i].name);
        parts[i].table = k;
        *count = i + 1;
        char what[48];
        snprintf(what, sizeof what, "push: sparse_ids[%d]", i);
        int rc = take_ids(ps, what, iv, i, &parts[i], err);
        if (rc == 0) rc = take_grads(ps, gv, i, &parts[i], nonfinite, err);
        if (rc < 0) return rc;
    }
    return 0;
}

/* Eviction, when the job asks for it: the push that makes global step
 * `step` reach the next sweep's step sweeps every table (the CAS picks one
 * pusher; the others go on, waiting only for the stripes a sweep holds). */
void ps_maybe_evict(dt_ps *ps, int64_t step) {
    const dt_table_evict_policy *e = &ps->eviction;
    if (ps->num_tables == 0 || (e->idle_steps == 0 && e->min_touches == 0)) return;
    int64_t due = atomic_load(&ps->next_evict_step);
    if (step < due ||
        !atomic_compare_exchange_strong(&ps->next_evict_step, &due, step + ps_evict_interval(e)))
        return;
    for (int i = 0; i < ps->num_tables; i++) {
        int64_t evicted = 0;
        dt_err why;
        dt_err_clear(&why);
        if (dt_table_evict(ps->tables[i], step, e, &evicted, &why) < 0)
            dt_log(DT_LOG_WARN, "%s: evicting at step %lld: %s", ps->name, (long long)step,
                   why.msg);
        if (evicted > 0)
            dt_log(DT_LOG_DEBUG, "%s: table %s: %lld rows evicted at step %lld", ps->name,
                   dt_table_config_of(ps->tables[i])->name, (long long)evicted, (long long)step);
    }
}

/* Applies a checked push's rows, lazily (only the rows named), at the
 * step's learning rate. A table without memory for new rows keeps its old
 * ones (dt_table_apply changes nothing then); the dense part is applied
 * regardless, so the failure is logged rather than returned. */
void ps_apply_sparse(dt_ps *ps, sparse_part *parts, int count, int64_t step) {
    double lr = dt_lr_at(&ps->schedule, ps->optim.learning_rate, step);
    for (int i = 0; i < count; i++) {
        dt_err why;
        dt_err_clear(&why);
        if (dt_table_apply_span(ps->tables[parts[i].table], &parts[i].batch, &ps->optim, lr,
                                &parts[i].grads, step, &why) < 0)
            dt_log(DT_LOG_ERROR, "%s: push at step %lld: %s", ps->name, (long long)step, why.msg);
    }
}

/* async and bounded, every variable's lock held: each table's rows of a
 * push tried at lr (dt_table_first_nonfinite_span); 0 when every new value
 * would be finite, else DT_EINVAL naming the table, the row, its id and
 * the element, *overflow set (the gradient rows were checked finite). */
int ps_check_rows(dt_ps *ps, sparse_part *parts, int count, double lr, int *overflow, dt_err *err) {
    for (int i = 0; i < count; i++) {
        dt_table *t = ps->tables[parts[i].table];
        int64_t row;
        int elem;
        int rc = dt_table_first_nonfinite_span(t, &parts[i].batch, &ps->optim, lr, &parts[i].grads,
                                               &row, &elem, err);
        if (rc < 0) return dt_err_wrap(err, rc, "%s: push", ps->name);
        if (row < parts[i].n) {
            *overflow = 1;
            return dt_err_set(err, DT_EINVAL,
                              "%s: push: update of %s row %lld (id %lld) [%d] would not be finite "
                              "(%s at learning rate %g); nothing applied",
                              ps->name, dt_table_config_of(t)->name, (long long)row,
                              (long long)parts[i].ids[row], elem, dt_optim_name(ps->optim.kind),
                              lr);
        }
    }
    return 0;
}

/* SparsePull: rows of one table, as they are now (a row never pushed
 * reads as its initial value and is not stored). */
int ps_handle_sparse_pull(void *ctx, const dt_rpc_peer *peer, const dt_rpc_buf *request,
                          dt_rpc_buf *reply, dt_err *err) {
    dt_ps *ps = ctx;
    dt_msg_sparse_pull_req req;
    memset(&req, 0, sizeof req);
    dt_tensor view;
    dt_span span;
    req.ids_in = (dt_tensor_views){&view, 0, 1, &span};
    sparse_part part;
    memset(&part, 0, sizeof part);
    float *values = NULL;
    int rc = dt_codec_decode_buf(DT_MSG_SPARSE_PULL_REQ, request, &req, err);
    if (rc < 0) return rc;
    if ((rc = ps_check_caller(ps, peer, req.worker, "sparse pull", err)) < 0) return rc;
    if ((rc = ps_check_failed(ps, req.worker, "sparse pull", err)) < 0) return rc;
    ps_note_call(ps, req.worker);
    pthread_rwlock_rdlock(&ps->model_lock);
    if (!ps->ready) {
        rc = dt_err_set(err, DT_EPRECOND,
                        "%s: sparse pull: model not ready (no chief has created it yet)", ps->name);
        goto out;
    }
    if ((part.table = find_table(ps, req.table)) < 0) {
        rc = dt_err_set(err, DT_ENOTFOUND, "%s: sparse pull: unknown table \"%s\"", ps->name,
                        req.table);
        goto out;
    }
    if (req.ids_in.count != 1) {
        rc = dt_err_set(err, DT_EINVAL, "%s: sparse pull: ids: none given", ps->name);
        goto out;
    }
    if ((rc = take_ids(ps, "sparse pull: ids", &req.ids_in, 0, &part, err)) < 0) goto out;
    const dt_table_config *cfg = dt_table_config_of(ps->tables[part.table]);
    /* n <= 2^37 (the request's bytes); n D 4 fits int64, and is bounded. */
    int64_t bytes = part.n * (int64_t)cfg->dim * (int64_t)sizeof(float);
    if (bytes > SPARSE_PULL_MAX_BYTES) {
        rc = dt_err_set(err, DT_EINVAL,
                        "%s: sparse pull: ids: %lld rows of %d floats are %lld bytes, more than "
                        "a reply carries (%lld)",
                        ps->name, (long long)part.n, cfg->dim, (long long)bytes,
                        (long long)SPARSE_PULL_MAX_BYTES);
        goto out;
    }
    if (!(values = dt_malloc(bytes ? (size_t)bytes : 1))) {
        rc = dt_err_set(err, DT_ENOMEM, "%s: sparse pull: out of memory", ps->name);
        goto out;
    }
    ps_raise_step(ps, req.seen_step);
    dt_table_read(ps->tables[part.table], &part.batch, values, NULL);
    dt_tensor out = {.dtype = DT_DTYPE_F32,
                     .ndim = 2,
                     .shape = {part.n, cfg->dim},
                     .data = values,
                     .nbytes = (size_t)bytes};
    snprintf(out.name, sizeof out.name, "%s", cfg->name);
    dt_msg_sparse_pull_resp resp;
    memset(&resp, 0, sizeof resp);
    resp.incarnation = ps->incarnation;
    resp.global_step = atomic_load(&ps->global_step);
    resp.done = ps_check_done(ps, req.worker);
    resp.values_out = (dt_tensor_list){.items = &out, .count = 1};
    rc = ps_encode_reply(DT_MSG_SPARSE_PULL_RESP, &resp, reply, err);
out:
    pthread_rwlock_unlock(&ps->model_lock);
    free(values);
    free(part.ids);
    dt_table_batch_deinit(&part.batch);
    return rc;
}

/* SparseExport: a page of a table's held rows, for the chief's save. */
int ps_handle_sparse_export(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                            const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    dt_ps *ps = ctx;
    dt_msg_sparse_export_req req;
    memset(&req, 0, sizeof req);
    dt_tensors page;
    memset(&page, 0, sizeof page);
    int rc = dt_codec_decode_buf(DT_MSG_SPARSE_EXPORT_REQ, request, &req, err);
    if (rc < 0) return rc;
    if (req.max_rows < 1 || req.max_rows > DT_SPARSE_EXPORT_MAX_ROWS || req.after_id < -1)
        return dt_err_set(err, DT_EINVAL,
                          "%s: sparse export: max_rows %d must be in 1..%d and after_id %lld "
                          ">= -1",
                          ps->name, (int)req.max_rows, DT_SPARSE_EXPORT_MAX_ROWS,
                          (long long)req.after_id);
    pthread_rwlock_rdlock(&ps->model_lock);
    int k = ps->ready ? find_table(ps, req.table) : -1;
    if (!ps->ready)
        rc = dt_err_set(err, DT_EPRECOND, "%s: sparse export: model not ready", ps->name);
    else if (k < 0)
        rc = dt_err_set(err, DT_ENOTFOUND, "%s: sparse export: unknown table \"%s\"", ps->name,
                        req.table);
    int more = 0;
    if (rc == 0)
        rc = dt_table_export_page(ps->tables[k], 0, 1, req.after_id, req.max_rows, &page, &more,
                                  err);
    if (rc == 0) {
        dt_msg_sparse_export_resp resp;
        memset(&resp, 0, sizeof resp);
        resp.incarnation = ps->incarnation;
        resp.global_step = atomic_load(&ps->global_step);
        resp.more = more;
        resp.out.items = page.items;
        /* ids and values first, then the slots when asked for. */
        resp.out.count = req.include_slots || page.count < 2 ? page.count : 2;
        rc = ps_encode_reply(DT_MSG_SPARSE_EXPORT_RESP, &resp, reply, err);
    }
    pthread_rwlock_unlock(&ps->model_lock);
    dt_tensors_deinit(&page);
    return rc;
}

/* The tensors of an import page, copied out of the message (dt_table_import
 * reads aligned, contiguous arrays). */
static int copy_views(dt_ps *ps, const dt_tensor_views *v, dt_tensors *out, dt_err *err) {
    memset(out, 0, sizeof *out);
    if (v->count == 0) return 0;
    int rc = dt_tensors_init(out, v->items, v->count, err);
    if (rc < 0) return dt_err_wrap(err, rc, "%s: sparse import", ps->name);
    for (int i = 0; i < v->count; i++)
        dt_codec_view_copy(v, i, out->items[i].data);
    return 0;
}

/* SparseImport: a page of a checkpoint's rows for a model created with
 * tables_pending; the last page makes the ps ready. */
int ps_handle_sparse_import(void *ctx, const dt_rpc_peer *peer __attribute__((unused)),
                            const dt_rpc_buf *request, dt_rpc_buf *reply, dt_err *err) {
    dt_ps *ps = ctx;
    enum { CAP = 2 + DT_OPTIM_MAX_SLOTS };
    dt_msg_sparse_import_req req;
    memset(&req, 0, sizeof req);
    dt_tensor views[CAP];
    dt_span spans[CAP];
    req.in = (dt_tensor_views){views, 0, CAP, spans};
    dt_tensors page;
    memset(&page, 0, sizeof page);
    int rc = dt_codec_decode_buf(DT_MSG_SPARSE_IMPORT_REQ, request, &req, err);
    if (rc < 0) return rc;
    pthread_rwlock_wrlock(&ps->model_lock);
    int k = ps->built && !ps->ready ? find_table(ps, req.table) : -1;
    int64_t imported = 0;
    if (!ps->built || ps->ready)
        rc = dt_err_set(err, DT_EPRECOND,
                        "%s: sparse import: no restore in progress (a Create with "
                        "tables_pending comes first)",
                        ps->name);
    else if (k < 0)
        rc = dt_err_set(err, DT_ENOTFOUND, "%s: sparse import: unknown table \"%s\"", ps->name,
                        req.table);
    if (rc == 0) rc = copy_views(ps, &req.in, &page, err);
    if (rc == 0 && (rc = dt_table_import(ps->tables[k], &page, ps->params.task_index,
                                         ps->params.cluster->num_ps, atomic_load(&ps->global_step),
                                         &imported, err)) < 0) {
        /* The table calls a bad page corrupt, as it would a file; from a
         * caller it is a bad argument. */
        dt_err_wrap(err, rc, "%s: sparse import", ps->name);
        if (err && rc == DT_ECORRUPT) err->code = DT_EINVAL;
        if (rc == DT_ECORRUPT) rc = DT_EINVAL;
    }
    dt_msg_sparse_import_resp resp = {0};
    if (rc == 0) {
        dt_table_stats st;
        dt_table_stats_of(ps->tables[k], &st);
        resp.rows_held = st.rows_held;
        if (req.last) {
            ps->ready = 1;
            dt_log(DT_LOG_INFO, "%s: tables restored; serving", ps->name);
        }
    }
    pthread_rwlock_unlock(&ps->model_lock);
    dt_tensors_deinit(&page);
    if (rc < 0) return rc;
    return ps_encode_reply(DT_MSG_SPARSE_IMPORT_RESP, &resp, reply, err);
}
