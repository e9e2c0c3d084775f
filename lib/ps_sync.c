/*
 * ps_sync: the sync mode's step: gradients accumulated, decided, followed.
 *
 * Alone, a ps applies the mean once every worker's gradient of the step is
 * in. With several ps tasks, ps 0 decides which gradients make each step
 * and the others hold each worker's gradient until the decision reaches
 * them (follow). Threading: everything here runs under sync_mu.
 */

#include "ps_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "log.h"

/* ---- the step being aggregated ------------------------------------------ */

/* sync: the tables' rows of the current step, and a follower's held ones,
 * dropped. */
void ps_drop_rows_locked(dt_ps *ps) {
    for (int t = 0; t < ps->num_tables; t++)
        dt_sparse_acc_clear(&ps->row_acc[t]);
    for (size_t i = 0; ps->row_hold && i < (size_t)ps->params.cluster->num_workers * DT_MAX_TABLES;
         i++)
        dt_sparse_grad_deinit(&ps->row_hold[i]);
}

/* sync: the step being aggregated becomes `step`, with nothing in it yet.
 * Called with sync_mu held (or before the model is ready). */
void ps_reset_step_locked(dt_ps *ps, int64_t step) {
    for (int k = 0; k < ps->acc.count; k++)
        memset(ps->acc.items[k].data, 0, ps->acc.items[k].nbytes);
    size_t nw = (size_t)ps->params.cluster->num_workers;
    memset(ps->acc_from, 0, sizeof(int) * nw);
    if (ps->held) memset(ps->held, 0, sizeof(int) * nw);
    ps_drop_rows_locked(ps);
    ps->acc_count = 0;
    ps->acc_step = step;
}

/* A caller has seen the global step at `seen`: a ps restored from an older
 * checkpoint moves up to it, so no one sees the step go backwards. Only as
 * far as the chief's Create allowed (step_ceiling): a claim is not a push,
 * and believing any claim let one Pull end the job by saying 2^62. */
void ps_raise_step(dt_ps *ps, int64_t seen) {
    if (seen > ps->step_ceiling) seen = ps->step_ceiling;
    if (atomic_load(&ps->global_step) >= seen) return;
    if (ps->consistency.mode == DT_MODE_SYNC) {
        /* The step being aggregated moves with it. */
        pthread_mutex_lock(&ps->sync_mu);
        if (atomic_load(&ps->global_step) < seen) {
            atomic_store(&ps->global_step, seen);
            ps_reset_step_locked(ps, seen);
        }
        pthread_mutex_unlock(&ps->sync_mu);
        return;
    }
    int64_t step = atomic_load(&ps->global_step);
    while (step < seen && !atomic_compare_exchange_weak(&ps->global_step, &step, seen)) {
    }
}

/* ---- sync: accumulate, decide, follow ----------------------------------- */

/* FNV-1a over the step and the index of each worker in it: two tasks that
 * applied the same sets at the same steps have the same digest. */
static void fold_digest(dt_ps *ps) {
    uint64_t h = ps->sync_digest ? ps->sync_digest : 0xcbf29ce484222325ull;
    uint64_t words[2] = {(uint64_t)ps->acc_step, 0};
    for (int w = -1; w < ps->params.cluster->num_workers; w++) {
        if (w >= 0 && !ps->acc_from[w]) continue;
        words[1] = (uint64_t)(int64_t)w;
        /* Byte by byte, low byte first, whatever the machine's order. */
        for (int i = 0; i < 16; i++)
            h = (h ^ ((words[i / 8] >> (8 * (i % 8))) & 0xffu)) * 0x100000001b3ull;
    }
    ps->sync_digest = h;
}

/* sync: each table's rows of the step, summed by id over its pushes and
 * scaled as the dense sums are (the mean over the step's pushes, a row a
 * push did not name counting as 0), as dt_sparse_acc_sum returns them. */
typedef struct {
    int64_t n;
    const int64_t *ids;
    const float *rows;
    int failed; /* the sum could not be made (logged): the table is skipped */
} step_rows;

/* The sums of every table into out (ps->num_tables); a table whose sum
 * fails (no memory) is logged and left out, as the dense half of the step
 * is applied regardless. The sums stay in the accumulators until
 * ps_drop_rows_locked. Called with sync_mu held. */
static void sum_rows_locked(dt_ps *ps, float scale, step_rows *out) {
    for (int t = 0; t < ps->num_tables; t++) {
        dt_err why;
        dt_err_clear(&why);
        memset(&out[t], 0, sizeof out[t]);
        if (dt_sparse_acc_sum(&ps->row_acc[t], scale, &out[t].n, &out[t].ids, &out[t].rows, &why) <
            0) {
            out[t].failed = 1;
            dt_log(DT_LOG_ERROR, "%s: sync step %lld: table %s: %s", ps->name,
                   (long long)ps->acc_step, dt_table_config_of(ps->tables[t])->name, why.msg);
        }
    }
}

/* sync: the step's summed rows tried at lr before anything is applied, as
 * check_mean_locked tries the variables: a sum of finite rows can
 * overflow, and an update of finite ones can make a weight or slot
 * non-finite. DT_EINVAL naming the table, the row and its id, *overflow
 * set; a table the check cannot try (no memory) is logged and applied as
 * it comes. Called with sync_mu held. */
static int check_rows_locked(dt_ps *ps, const step_rows *sums, double lr, int *overflow,
                             dt_err *err) {
    for (int t = 0; t < ps->num_tables; t++) {
        if (sums[t].failed || sums[t].n == 0) continue;
        const dt_table_config *tc = dt_table_config_of(ps->tables[t]);
        size_t count = (size_t)sums[t].n * (size_t)tc->dim;
        dt_piece one = {(const uint8_t *)sums[t].rows, count * sizeof(float)};
        dt_span grads = {&one, 0, one.len};
        size_t bad = dt_span_first_nonfinite(&grads);
        if (bad < count) {
            *overflow = 1;
            return dt_err_set(
                err, DT_EINVAL,
                "%s: sync step %lld: summed row of %s id %lld [%zu] is not finite "
                "(the sum of the step's %d finite pushes overflowed); nothing applied",
                ps->name, (long long)ps->acc_step, tc->name,
                (long long)sums[t].ids[bad / (size_t)tc->dim], bad % (size_t)tc->dim,
                ps->acc_count);
        }
        dt_err why;
        dt_err_clear(&why);
        int64_t row = sums[t].n;
        int elem = 0;
        int rc = dt_table_plan(ps->tables[t], sums[t].ids, sums[t].n, &ps->row_batch, &why);
        if (rc == 0)
            rc = dt_table_first_nonfinite_span(ps->tables[t], &ps->row_batch, &ps->optim, lr,
                                               &grads, &row, &elem, &why);
        if (rc < 0) {
            dt_log(DT_LOG_ERROR, "%s: sync step %lld: table %s: cannot try the update: %s",
                   ps->name, (long long)ps->acc_step, tc->name, why.msg);
            continue;
        }
        if (row < sums[t].n) {
            *overflow = 1;
            return dt_err_set(err, DT_EINVAL,
                              "%s: sync step %lld: update of %s row %lld (id %lld) [%d] would not "
                              "be finite (%s at learning rate %g); nothing applied",
                              ps->name, (long long)ps->acc_step, tc->name, (long long)row,
                              (long long)sums[t].ids[row], elem, dt_optim_name(ps->optim.kind), lr);
        }
    }
    return 0;
}

/* sync: the step's summed rows applied lazily to the rows named. Like
 * ps_apply_sparse, a failure (no memory) is logged: the dense half of the
 * step is applied regardless. Called with sync_mu held. */
static void apply_rows_locked(dt_ps *ps, const step_rows *sums, double lr) {
    for (int t = 0; t < ps->num_tables; t++) {
        if (sums[t].failed || sums[t].n == 0) continue;
        dt_err why;
        dt_err_clear(&why);
        int rc = dt_table_plan(ps->tables[t], sums[t].ids, sums[t].n, &ps->row_batch, &why);
        if (rc == 0)
            rc = dt_table_apply(ps->tables[t], &ps->row_batch, &ps->optim, lr, sums[t].rows,
                                ps->acc_step, &why);
        if (rc < 0)
            dt_log(DT_LOG_ERROR, "%s: sync step %lld: table %s: %s", ps->name,
                   (long long)ps->acc_step, dt_table_config_of(ps->tables[t])->name, why.msg);
    }
}

/* sync, every variable's lock held: the mean gradients (acc, already
 * scaled) tried at lr; as check_values_locked. */
static int check_mean_locked(dt_ps *ps, double lr, int *overflow, dt_err *err) {
    int nonfinite = 0;
    for (int k = 0; k < ps->vars.count; k++) {
        dt_tensor *v = &ps->vars.items[k];
        dt_piece one = {(const uint8_t *)ps->acc.items[k].data, v->nbytes};
        dt_span grad = {&one, 0, v->nbytes};
        size_t bad = ps_first_bad_update(ps, k, lr, &grad);
        if (bad >= v->nbytes / sizeof(float)) continue;
        *overflow = 1;
        /* A sum of finite gradients can itself overflow, which the check
         * of each push cannot see: both count as the update's. */
        if (!isfinite(((const float *)ps->acc.items[k].data)[bad]))
            return dt_err_set(err, DT_EINVAL,
                              "%s: sync step %lld: mean gradient %s[%zu] is not finite (the sum "
                              "of the step's %d finite gradients overflowed); nothing applied",
                              ps->name, (long long)ps->acc_step, v->name, bad, ps->acc_count);
        return ps_refuse_update(ps, "sync step", v->name, &grad, bad, lr, &nonfinite, overflow,
                                err);
    }
    return 0;
}

/* sync: apply the mean of the accumulated gradients as one step, and move
 * to the next. Called with sync_mu held. acc_count may be 0 only on a
 * follower told of a step whose gradients it lost (restarted since): the
 * step then passes with no change here. Returns 0, or 1 when the step's
 * update would have made a value non-finite (why says which and where):
 * then no variable or row changed and the step passes all the same, so
 * the ps tasks of a job stay at one step (a follower does as ps 0
 * decided). */
static int apply_accumulated(dt_ps *ps, dt_err *why) {
    int refused = 0;
    fold_digest(ps);
    if (ps->sync_role == SYNC_DECIDER) {
        dt_sync_decision *d = &ps->decided;
        memset(d, 0, sizeof *d);
        d->has = true;
        d->step = ps->acc_step;
        d->members_len = (ps->params.cluster->num_workers + 7) / 8;
        for (int w = 0; w < ps->params.cluster->num_workers; w++)
            if (ps->acc_from[w]) d->members[w / 8] |= (uint8_t)(1u << (w % 8));
    }
    double lr = dt_lr_at(&ps->schedule, ps->optim.learning_rate, ps->acc_step);
    float scale = ps->acc_count ? 1.0f / (float)ps->acc_count : 0.0f;
    for (int k = 0; ps->acc_count > 0 && k < ps->vars.count; k++) {
        float *sum = ps->acc.items[k].data;
        int64_t n = dt_tensor_numel(&ps->vars.items[k]);
        for (int64_t e = 0; e < n; e++)
            sum[e] *= scale; /* mean = sum / count */
    }
    step_rows sums[DT_MAX_TABLES];
    memset(sums, 0, sizeof sums);
    if (ps->acc_count > 0) sum_rows_locked(ps, scale, sums);
    if (ps->acc_count > 0) {
        int overflow = 0;
        ps_lock_all_vars(ps);
        refused = check_mean_locked(ps, lr, &overflow, why) < 0 ||
                  check_rows_locked(ps, sums, lr, &overflow, why) < 0;
        if (!refused) {
            for (int k = 0; k < ps->vars.count; k++) {
                dt_tensor *v = &ps->vars.items[k];
                dt_piece one = {(const uint8_t *)ps->acc.items[k].data, v->nbytes};
                dt_span grad = {&one, 0, v->nbytes};
                ps_apply_one(ps, k, lr, &grad);
            }
        }
        ps_unlock_all_vars(ps);
        for (int k = 0; k < ps->vars.count; k++)
            memset(ps->acc.items[k].data, 0, ps->vars.items[k].nbytes);
    }
    if (ps->acc_count > 0 && !refused) apply_rows_locked(ps, sums, lr);
    for (int i = 0; !refused && i < ps->acc_count; i++)
        ps_record_staleness(ps, 0);
    if (!refused) atomic_fetch_add(&ps->pushes_applied, ps->acc_count);
    ps->acc_count = 0;
    memset(ps->acc_from, 0, sizeof(int) * (size_t)ps->params.cluster->num_workers);
    if (ps->held) memset(ps->held, 0, sizeof(int) * (size_t)ps->params.cluster->num_workers);
    ps_drop_rows_locked(ps);
    ps->acc_step = atomic_fetch_add(&ps->global_step, 1) + 1;
    ps_maybe_evict(ps, ps->acc_step);
    return refused;
}

/* Adds the floats r reads (a message's, at any alignment) to sum. */
static void add_floats(float *sum, dt_span_reader *r) {
    size_t n;
    const uint8_t *run;
    while ((run = dt_span_reader_next(r, &n)) != NULL) {
        for (size_t e = 0; e < n; e++) {
            float x;
            memcpy(&x, run + 4 * e, sizeof x);
            sum[e] += x;
        }
        sum += n;
    }
}

/* sync follower: keep worker w's gradient for the current step until ps 0's
 * decision names (or leaves out) w. 1 when held, 0 when stale or a
 * duplicate, or a negative code (no memory for the worker's buffer). */
static int hold_gradient(dt_ps *ps, const dt_msg_push_req *req, const int *index,
                         sparse_part *parts, int nparts, dt_err *err) {
    int w = req->worker;
    if (req->step != ps->acc_step || ps->held[w]) return 0;
    dt_tensors *h = &ps->hold[w];
    if (!h->items) {
        int rc = dt_tensors_init(h, ps->vars.items, ps->vars.count, err);
        if (rc < 0)
            return dt_err_wrap(err, rc, "%s: push: holding worker %d's gradient", ps->name, w);
    }
    for (int i = 0; i < nparts; i++) {
        int rc = ps_take_rows(ps, &parts[i], err);
        if (rc < 0) return rc;
    }
    for (int i = 0; i < req->in.count; i++)
        dt_codec_view_copy(&req->in, i, h->items[index[i]].data);
    /* The rows: the push's arrays, taken as they are. */
    for (int i = 0; i < nparts; i++) {
        dt_sparse_grad *g = &ps->row_hold[(size_t)w * DT_MAX_TABLES + (size_t)parts[i].table];
        dt_sparse_grad_deinit(g);
        *g = (dt_sparse_grad){parts[i].n, parts[i].ids, parts[i].rows};
        parts[i].ids = NULL;
        parts[i].rows = NULL;
    }
    ps->held[w] = 1;
    return 1;
}

/* sync: the rows of a push (or of one a follower held) join the step's,
 * after those that came before it. The arrays are taken, not copied. On
 * failure (no memory) the step goes on without them, logged. */
static void add_rows_locked(dt_ps *ps, int table, dt_sparse_grad *g) {
    dt_err why;
    dt_err_clear(&why);
    if (dt_sparse_acc_add(&ps->row_acc[table], g, &why) < 0)
        dt_log(DT_LOG_ERROR, "%s: sync step %lld: table %s: %s", ps->name, (long long)ps->acc_step,
               dt_table_config_of(ps->tables[table])->name, why.msg);
}

/* sync follower: apply the step ps 0 decided, with exactly the gradients it
 * names, and drop the others held for it. A decision for a later step (this
 * task restarted and missed some) moves the step up, as a seen_step does;
 * one for an earlier step is old news. */
int ps_follow_decision(dt_ps *ps, const dt_sync_decision *d, dt_err *err) {
    int nw = ps->params.cluster->num_workers;
    if (d->members_len > (nw + 7) / 8)
        return dt_err_set(err, DT_EINVAL, "%s: pull: decision: %d member bytes for %d workers",
                          ps->name, d->members_len, nw);
    pthread_mutex_lock(&ps->sync_mu);
    int64_t step = ps->acc_step;
    if (d->step != step) {
        pthread_mutex_unlock(&ps->sync_mu);
        if (d->step > step) ps_raise_step(ps, d->step + 1);
        return 0;
    }
    int lost = 0, dropped = 0;
    for (int w = 0; w < nw; w++) {
        int member = d->all_held ? ps->held[w]
                                 : w / 8 < d->members_len && (d->members[w / 8] >> (w % 8)) & 1;
        if (member && !ps->held[w]) lost++;
        if (!member && ps->held[w]) dropped++;
        if (!member || !ps->held[w]) continue;
        for (int k = 0; k < ps->acc.count; k++) {
            dt_span_reader r;
            dt_span_reader_init_flat(&r, ps->hold[w].items[k].data, ps->hold[w].items[k].nbytes,
                                     sizeof(float));
            add_floats(ps->acc.items[k].data, &r);
        }
        for (int t = 0; t < ps->num_tables; t++)
            add_rows_locked(ps, t, &ps->row_hold[(size_t)w * DT_MAX_TABLES + (size_t)t]);
        ps->acc_from[w] = 1;
        ps->acc_count++;
    }
    int applied = ps->acc_count;
    dt_err why;
    dt_err_clear(&why);
    if (apply_accumulated(ps, &why)) {
        ps_count_not_finite(ps, &why);
        applied = 0;
    }
    pthread_mutex_unlock(&ps->sync_mu);
    atomic_fetch_add(&ps->pushes_dropped, dropped);
    if (lost)
        dt_log(DT_LOG_WARN,
               "%s: step %lld: %d gradient(s) ps:0 counted were lost here (this task "
               "restarted since they came); applying the %d it holds",
               ps->name, (long long)step, lost, applied);
    return 0;
}

/* sync: add one worker's gradient to the current step (a follower holds it
 * instead); 1 when used, 0 when stale (computed for another step, or this
 * worker already gave one), USED_NOT_FINITE (err says why), or a negative
 * code. */
int ps_accumulate(dt_ps *ps, const dt_msg_push_req *req, const int *index, sparse_part *parts,
                  int nparts, dt_err *err) {
    pthread_mutex_lock(&ps->sync_mu);
    int w = req->worker;
    int known = w >= 0 && w < ps->params.cluster->num_workers;
    if (ps->sync_role == SYNC_FOLLOWER) {
        int rc = hold_gradient(ps, req, index, parts, nparts, err);
        pthread_mutex_unlock(&ps->sync_mu);
        return rc;
    }
    if (req->step != ps->acc_step || (known && ps->acc_from[w])) {
        pthread_mutex_unlock(&ps->sync_mu);
        return 0;
    }
    for (int i = 0; i < nparts; i++) {
        int rc = ps_take_rows(ps, &parts[i], err);
        if (rc < 0) {
            pthread_mutex_unlock(&ps->sync_mu);
            return rc;
        }
    }
    for (int i = 0; i < req->in.count; i++) {
        dt_span_reader r;
        dt_codec_view_reader(&req->in, i, &r);
        add_floats(ps->acc.items[index[i]].data, &r);
    }
    for (int i = 0; i < nparts; i++) {
        dt_sparse_grad g = {parts[i].n, parts[i].ids, parts[i].rows};
        parts[i].ids = NULL;
        parts[i].rows = NULL;
        add_rows_locked(ps, parts[i].table, &g);
    }
    if (known) ps->acc_from[w] = 1;
    if (ps->acc_count++ == 0) dt_clock_now(&ps->acc_first);
    int used = 1;
    if (ps->acc_count >= ps->consistency.replicas_to_aggregate && apply_accumulated(ps, err))
        used = USED_NOT_FINITE;
    pthread_mutex_unlock(&ps->sync_mu);
    return used;
}

/* sync: when peers are slow or dead, apply what the step has after the
 * timeout instead of waiting forever. Called from dt_ps_wait's loop. */
void ps_sync_timeout_check(dt_ps *ps) {
    pthread_rwlock_rdlock(&ps->model_lock);
    if (ps->ready && ps->consistency.mode == DT_MODE_SYNC && ps->sync_role != SYNC_FOLLOWER) {
        pthread_mutex_lock(&ps->life_mu);
        int done = ps_done_locked(ps);
        pthread_mutex_unlock(&ps->life_mu);
        pthread_mutex_lock(&ps->sync_mu);
        if (ps->acc_count > 0 && dt_ms_since(&ps->acc_first) >= ps->consistency.timeout_ms &&
            !done) {
            dt_log(DT_LOG_WARN,
                   "%s: step %lld: applying %d of %d gradients after waiting %d ms "
                   "for the others",
                   ps->name, (long long)ps->acc_step, ps->acc_count,
                   ps->consistency.replicas_to_aggregate, ps->consistency.timeout_ms);
            dt_err why;
            dt_err_clear(&why);
            if (apply_accumulated(ps, &why)) ps_count_not_finite(ps, &why);
        }
        pthread_mutex_unlock(&ps->sync_mu);
    }
    pthread_rwlock_unlock(&ps->model_lock);
}
