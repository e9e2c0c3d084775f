/*
 * chief: model start-up (live / restore / init), checkpoint and summary
 * timers, ps recovery, and the end of the job.
 *
 * A checkpoint pairs the variables the chief last pulled with the global
 * step they were pulled at, so saving costs no extra round trip. In
 * asynchronous training that is as consistent as any snapshot can be.
 *
 * Threading: runs on the worker loop's thread (hooks), nothing else.
 */
#include "chief.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoint.h"
#include "log.h"
#include "model.h"
#include "summary.h"

typedef struct {
    dt_worker *w;
    const dt_job *job;
    char model[DT_CKPT_MODEL_MAX];
    dt_summary_writer *summary;
    double last_save;
    int64_t last_saved_step;
    double summary_t;
    int64_t summary_step;
    int64_t last_global_step; /* highest global step seen */
    int64_t last_pulled_step; /* step of the values in the worker's vars */
} chief;

static double now_secs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int save(chief *c, int64_t global_step, dt_err *err) {
    if (global_step == c->last_saved_step) return 0;
    dt_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.global_step = global_step;
    snprintf(meta.model, sizeof meta.model, "%s", c->model);
    char path[DT_PATH_MAX + 64];
    int rc = dt_ckpt_save_in_dir(c->job->log_dir, dt_worker_vars(c->w), &meta, c->job->max_to_keep,
                                 path, sizeof path, err);
    if (rc < 0) return dt_err_wrap(err, rc, "chief: checkpoint");
    c->last_save = now_secs();
    c->last_saved_step = global_step;
    dt_log(DT_LOG_INFO, "chief: saved %s (global_step %lld)", path, (long long)global_step);
    return 0;
}

/* Copies a loaded checkpoint into vars, matching by name, dtype and shape. */
static int adopt_checkpoint(const dt_tensors *loaded, dt_tensors *vars, const char *path,
                            dt_err *err) {
    for (int i = 0; i < vars->count; i++) {
        dt_tensor *v = &vars->items[i];
        const dt_tensor *t = dt_tensors_find(loaded, v->name);
        if (!t)
            return dt_err_set(err, DT_EINVAL, "%s: no variable %s (was it written for another model?)",
                              path, v->name);
        if (t->dtype != v->dtype || t->ndim != v->ndim || t->nbytes != v->nbytes ||
            memcmp(t->shape, v->shape, sizeof(int64_t) * (size_t)v->ndim) != 0)
            return dt_err_set(err, DT_EINVAL, "%s: variable %s has another dtype or shape than "
                                              "this model's", path, v->name);
        memcpy(v->data, t->data, v->nbytes);
    }
    return 0;
}

/* Loads the latest checkpoint into the chief's vars. 1 found, 0 none. */
static int load_latest(chief *c, int64_t *global_step, dt_err *err) {
    dt_tensors loaded;
    memset(&loaded, 0, sizeof loaded);
    dt_ckpt_meta meta;
    char path[DT_PATH_MAX + 64];
    int found = dt_ckpt_restore_latest(c->job->log_dir, &loaded, &meta, path, sizeof path, err);
    if (found <= 0) return found;
    int rc = adopt_checkpoint(&loaded, dt_worker_vars(c->w), path, err);
    dt_tensors_deinit(&loaded);
    if (rc < 0) return rc;
    *global_step = meta.global_step;
    dt_log(DT_LOG_INFO, "chief: restored %s (global_step %lld)", path, (long long)meta.global_step);
    return 1;
}

typedef struct {
    chief *c;
    int ready[DT_MAX_PS];
    int num_ready;
    int done;
    int64_t global_step; /* ps 0's */
} census;

/* Asks every ps for its status; fails while any is unreachable. */
static int take_census(void *arg, dt_err *err) {
    census *cs = arg;
    dt_ps_client *pc = dt_worker_client(cs->c->w);
    cs->num_ready = 0;
    cs->done = 0;
    for (int p = 0; p < dt_ps_client_num_ps(pc); p++) {
        dt_msg_status_resp st;
        int rc = dt_ps_client_status(pc, p, &st, err);
        if (rc < 0) return rc;
        cs->ready[p] = st.ready;
        cs->num_ready += st.ready;
        cs->done |= st.done;
        if (p == 0) cs->global_step = st.global_step;
    }
    return 0;
}

/* Creates the model on the ps tasks flagged in only (NULL: all). */
static int create(chief *c, int64_t global_step, const int *only, dt_err *err) {
    const dt_job *job = c->job;
    return dt_ps_client_create(dt_worker_client(c->w), dt_worker_vars(c->w), global_step,
                               &job->optim, job->max_steps, c->model, only, err);
}

/* Restores the ps tasks that are not ready (restarted empty). */
static int recover(chief *c, const census *cs, dt_err *err) {
    int only[DT_MAX_PS] = {0};
    for (int p = 0; p < dt_ps_client_num_ps(dt_worker_client(c->w)); p++) {
        only[p] = !cs->ready[p];
        if (only[p])
            dt_log(DT_LOG_WARN, "chief: %s lost its model; restoring it",
                   dt_ps_client_name(dt_worker_client(c->w), p));
    }
    int64_t step = 0;
    int found = load_latest(c, &step, err);
    if (found < 0) return found;
    if (!found)
        dt_log(DT_LOG_WARN, "chief: no checkpoint yet; restoring from the values last pulled");
    /* The global step never goes backwards. */
    if (c->last_global_step > step) step = c->last_global_step;
    if (cs->global_step > step) step = cs->global_step;
    return create(c, step, only, err);
}

static int on_not_ready(void *ctx, dt_err *err) {
    chief *c = ctx;
    census cs;
    memset(&cs, 0, sizeof cs);
    cs.c = c;
    int rc = take_census(&cs, err);
    if (rc < 0) return 0; /* still unreachable: let the retry loop wait */
    if (cs.num_ready == dt_ps_client_num_ps(dt_worker_client(c->w))) return 0;
    return recover(c, &cs, err);
}

static int start_model(chief *c, volatile sig_atomic_t *stop, dt_err *err) {
    census cs;
    memset(&cs, 0, sizeof cs);
    cs.c = c;
    int rc = dt_worker_retry(c->w, "every ps to answer", take_census, &cs, NULL, stop, err);
    if (rc < 0) return rc;
    int num_ps = dt_ps_client_num_ps(dt_worker_client(c->w));
    if (cs.done) return 1;
    if (cs.num_ready == num_ps) {
        c->last_global_step = cs.global_step;
        dt_log(DT_LOG_INFO, "chief: ps already holds the model (global_step %lld); not "
                            "re-initializing", (long long)cs.global_step);
        return 0;
    }
    if (cs.num_ready > 0) return recover(c, &cs, err);
    int64_t step = 0;
    int found = load_latest(c, &step, err);
    if (found < 0) return found;
    if (!found) {
        dt_model_init(c->job, dt_worker_vars(c->w));
        dt_log(DT_LOG_INFO, "chief: no checkpoint in %s; initialized %s", c->job->log_dir, c->model);
    }
    c->last_global_step = step;
    c->last_saved_step = found ? step : -1;
    return create(c, step, NULL, err);
}

static int after_step(void *ctx, const dt_step_result *r, dt_err *err) {
    chief *c = ctx;
    const dt_job *job = c->job;
    if (r->global_step > c->last_global_step) c->last_global_step = r->global_step;
    c->last_pulled_step = r->pulled_step;
    double t = now_secs();
    if (r->local_step % job->summary_steps == 0) {
        double rate = (double)(r->global_step - c->summary_step) / (t - c->summary_t > 1e-9 ? t - c->summary_t : 1e-9);
        const char *tags[] = {"loss", "global_step/sec"};
        double values[] = {r->loss, rate};
        int rc = dt_summary_scalars(c->summary, r->global_step, tags, values, 2, err);
        if (rc == 0) rc = dt_summary_flush(c->summary, err);
        if (rc < 0) return rc;
        c->summary_t = t;
        c->summary_step = r->global_step;
    }
    if (t - c->last_save >= job->save_model_secs) return save(c, r->pulled_step, err);
    return 0;
}

typedef struct {
    dt_worker *w;
    int64_t global_step;
    int done;
} final_pull;

static int do_final_pull(void *arg, dt_err *err) {
    final_pull *fp = arg;
    return dt_ps_client_pull(dt_worker_client(fp->w), dt_worker_vars(fp->w), &fp->global_step,
                             &fp->done, err);
}

static int finish(chief *c, volatile sig_atomic_t *stop, dt_err *err) {
    final_pull fp = {c->w, 0, 0};
    dt_worker_hooks hooks = {c, NULL, on_not_ready};
    int rc = dt_worker_retry(c->w, "final pull", do_final_pull, &fp, &hooks, stop, err);
    if (rc < 0) return rc;
    if ((rc = save(c, fp.global_step, err)) < 0) return rc;
    if ((rc = dt_ps_client_shutdown(dt_worker_client(c->w), "training complete", err)) < 0)
        dt_log(DT_LOG_WARN, "chief: telling the ps tasks to stop: %s", err ? err->msg : "");
    dt_log(DT_LOG_INFO, "chief: job done at global_step %lld", (long long)fp.global_step);
    return 0;
}

int dt_chief_run(const dt_worker_params *params, volatile sig_atomic_t *stop, dt_err *err) {
    chief c;
    memset(&c, 0, sizeof c);
    c.job = params->job;
    c.last_saved_step = -1;
    dt_model_describe(c.job, c.model, sizeof c.model);
    int lock_fd = -1;
    int rc = dt_ckpt_lock_dir(c.job->log_dir, &lock_fd, err);
    if (rc < 0) return rc;
    if ((rc = dt_worker_open(params, &c.w, err)) < 0) goto out;
    if ((rc = start_model(&c, stop, err)) < 0) goto out;
    if (rc == 1) {
        dt_log(DT_LOG_INFO, "chief: the job is already done");
        rc = 0;
        goto out;
    }
    if ((rc = dt_summary_open(c.job->log_dir, &c.summary, err)) < 0) goto out;
    dt_log(DT_LOG_INFO, "chief: writing summaries to %s", dt_summary_path(c.summary));
    c.last_save = c.summary_t = now_secs();
    c.summary_step = c.last_global_step;

    dt_worker_hooks hooks = {&c, after_step, on_not_ready};
    rc = dt_worker_train(c.w, &hooks, stop, err);
    if (rc == 0) {
        rc = finish(&c, stop, err);
    } else if (rc == DT_ECANCELLED && c.last_pulled_step > 0) {
        /* Stopped by a signal: keep what was learned. */
        dt_err save_err;
        dt_err_clear(&save_err);
        if (save(&c, c.last_pulled_step, &save_err) < 0)
            dt_log(DT_LOG_ERROR, "%s", save_err.msg);
    }
out:
    dt_summary_close(c.summary);
    dt_worker_free(c.w);
    dt_ckpt_unlock_dir(lock_fd);
    return rc;
}
