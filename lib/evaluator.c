/*
 * evaluator: a poll loop over log_dir (evaluator.h). One thread; it owns
 * the held-out set, the model's scratch and its event file.
 */
#include "evaluator.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "checkpoint.h"
#include "data.h"
#include "log.h"
#include "loss_watch.h"
#include "model.h"
#include "predict.h"
#include "sparse_eval.h"
#include "summary.h"
#include "train_metrics.h"

#define STORAGE_LOG_SECS 10.0 /* at most one line per this while summaries drop */
#define EVAL_WARMUP 2         /* checkpoints scored before the losses are judged */

typedef struct {
    const dt_job *job;
    dt_dataset *data;
    dt_batch all; /* every held-out example, borrowed from data */
    dt_model *model;
    dt_sparse_set set;         /* a sparse model's held-out set (data and model NULL) */
    char dir[DT_PATH_MAX + 8]; /* log_dir/eval */
    dt_summary_writer *summary;
    long long summaries_dropped;
    double summary_logged;
    int64_t tried;  /* the newest checkpoint step (by name) already looked at */
    int64_t scored; /* the step of the last checkpoint scored */
    /* The eval losses in order: with no training loss to compare, a
     * diverging job shows as its held-out loss growing past its best. */
    dt_loss_watch loss_watch;
} evaluator;

static void close_evaluator(evaluator *e) {
    dt_summary_close(e->summary);
    dt_sparse_set_deinit(&e->set);
    dt_model_free(e->model);
    dt_data_free(e->data);
}

static int open_evaluator(const dt_job *job, evaluator *e, dt_err *err) {
    memset(e, 0, sizeof *e);
    e->job = job;
    e->tried = e->scored = -1;
    dt_loss_watch_init(&e->loss_watch, EVAL_WARMUP, dt_job_loss_ceiling(job));
    if (!dt_data_has_held_out(&job->data) || !dt_data_reads_files(&job->data))
        return dt_err_set(err, DT_EINVAL,
                          "evaluator: the job has no \"eval_data\" to score checkpoints on "
                          "(the evaluator reads files: set \"eval_data\" or "
                          "\"validation_fraction\")");
    snprintf(e->dir, sizeof e->dir, "%s/eval", job->log_dir);
    int rc = 0;
    if (dt_job_is_sparse(job)) {
        /* The model comes with each checkpoint (its table's rows). */
        rc = dt_job_open_sparse(job, 1, 0, 1, &e->set, err);
        if (rc == 0 && e->set.rows > INT32_MAX)
            rc = dt_err_set(err, DT_EINVAL, "data: \"eval_data\": %lld rows (at most %d)",
                            (long long)e->set.rows, INT32_MAX);
        e->all.rows = (int)e->set.rows;
    } else {
        rc = dt_job_open_eval(job, &e->data, err);
        if (rc == 0) rc = dt_data_all(e->data, &e->all, err);
        if (rc == 0) rc = dt_model_new(&job->model, &e->model, err);
    }
    if (rc < 0) {
        close_evaluator(e);
        return dt_err_wrap(err, rc, "evaluator");
    }
    char name[DT_PATH_MAX + 32];
    dt_data_held_out_name(&job->data, name, sizeof name);
    dt_log(DT_LOG_INFO, "evaluator: %d held-out examples from %s; watching %s for checkpoints",
           e->all.rows, name, job->log_dir);
    return 0;
}

/* Writes the scores at step; a failure is dropped and counted, never
 * returned (the chief's rule for storage faults). */
static void write_summary(evaluator *e, int64_t step, double loss, double accuracy) {
    static const char *const tags[] = {"eval/loss", "eval/accuracy"};
    const double values[2] = {loss, accuracy};
    dt_err err;
    dt_err_clear(&err);
    int rc = 0;
    if (!e->summary && (rc = dt_summary_open(e->dir, &e->summary, &err)) == 0)
        dt_log(DT_LOG_INFO, "evaluator: writing summaries to %s", dt_summary_path(e->summary));
    if (rc == 0)
        rc = dt_summary_scalars(e->summary, step, tags, values, isnan(accuracy) ? 1 : 2, &err);
    if (rc == 0) rc = dt_summary_flush(e->summary, &err);
    if (rc == 0) {
        if (e->summaries_dropped > 0)
            dt_log(DT_LOG_INFO, "evaluator: summaries resumed after %lld were dropped",
                   e->summaries_dropped);
        e->summaries_dropped = 0;
        return;
    }
    double t = dt_now_secs();
    dt_train_metrics_storage_failed(0, &err);
    if (++e->summaries_dropped == 1 || t - e->summary_logged >= STORAGE_LOG_SECS) {
        dt_log(DT_LOG_WARN, "evaluator: %s; summaries dropped: %lld so far", err.msg,
               e->summaries_dropped);
        e->summary_logged = t;
    }
}

/* The step at which the job that wrote meta ends; 0 when nobody says. */
static int64_t final_step(const evaluator *e, const dt_safetensors_meta *meta) {
    return meta->max_steps > 0 ? meta->max_steps : e->job->max_steps;
}

/* Says when the held-out loss at step is not finite or has grown far past
 * its best (loss_watch.h), with the likely fix. */
static void warn_loss(evaluator *e, int64_t step, double loss) {
    dt_loss_verdict v = dt_loss_watch_add(&e->loss_watch, loss);
    if (v == DT_LOSS_OK) return;
    char hint[160];
    dt_job_divergence_hint(e->job, hint, sizeof hint);
    if (v == DT_LOSS_NONFINITE)
        dt_log(DT_LOG_WARN,
               "evaluator: global_step %lld: the loss is %g (not finite): training "
               "has diverged; %s",
               (long long)step, loss, hint);
    else if (v == DT_LOSS_CEILING)
        dt_log(DT_LOG_WARN,
               "evaluator: global_step %lld: the loss (smoothed) %.6g is past %.6g, 100x a "
               "uniform guess's: training has diverged; %s",
               (long long)step, e->loss_watch.smoothed, e->loss_watch.ceiling, hint);
    else
        dt_log(DT_LOG_WARN,
               "evaluator: global_step %lld: the loss (smoothed) %.6g is over %.0fx its best "
               "%.6g: training is diverging; %s",
               (long long)step, e->loss_watch.smoothed, DT_LOSS_WATCH_GROWTH, e->loss_watch.best,
               hint);
}

/* Logs and writes the scores of the checkpoint at path (step), the job's
 * last being `last`; *done once it is. */
static int scored(evaluator *e, int64_t step, int64_t last, double loss, double accuracy,
                  const char *path, int *done) {
    e->scored = step;
    dt_train_metrics_scored(step, loss, accuracy);
    if (isnan(accuracy))
        dt_log(DT_LOG_INFO, "evaluator: global_step %lld: loss %.6g on %d examples (%s)",
               (long long)step, loss, e->all.rows, path);
    else
        dt_log(DT_LOG_INFO,
               "evaluator: global_step %lld: loss %.6g accuracy %.4f on %d examples (%s)",
               (long long)step, loss, accuracy, e->all.rows, path);
    warn_loss(e, step, loss);
    write_summary(e, step, loss, accuracy);
    *done = last > 0 && step >= last;
    return 0;
}

/* look() for a sparse model: the checkpoint's dense variables and table
 * rows, scored on the held-out set. Returns as dt_predict_load_sparse;
 * *step gets the checkpoint's step, *last the step the job ends at. */
static int score_sparse(evaluator *e, int64_t *step, int64_t *last, double *loss, double *accuracy,
                        char *path, size_t cap, dt_err *err) {
    dt_sparse_ckpt *ck = NULL;
    dt_safetensors_meta meta;
    int rc = dt_predict_load_sparse("evaluator", e->job, NULL, &ck, &meta, path, cap, err);
    if (rc < 0) return rc;
    *step = meta.global_step;
    *last = final_step(e, &meta);
    if (meta.job_id[0])
        dt_log_set_job_id(meta.job_id); /* the job it scores, for logs and metrics */
    dt_safetensors_meta_deinit(&meta);
    if (*step > e->scored) {
        rc = dt_sparse_scorer_evaluate(dt_sparse_ckpt_scorer(ck), &e->set, loss, accuracy, err);
        if (rc < 0) rc = dt_err_wrap(err, rc, "evaluator: evaluate");
    }
    dt_sparse_ckpt_free(ck);
    /* A failure to score is the held-out set's or the model's: final. */
    return rc < 0 ? DT_EINVAL : 0;
}

/* Scores the latest checkpoint when it is newer than the last look. *done
 * is set once the final one is scored. A checkpoint that cannot be read
 * now (gone, damaged, half there) is logged and waited past. */
static int look(evaluator *e, int *done, dt_err *err) {
    int64_t named = dt_ckpt_latest_step(e->job->log_dir);
    if (named <= e->tried) return 0;
    e->tried = named;
    int64_t step = -1, last = 0;
    double loss = NAN, accuracy = NAN;
    char path[DT_PATH_MAX + 64];
    int rc = 0;
    if (e->set.rows > 0) {
        rc = score_sparse(e, &step, &last, &loss, &accuracy, path, sizeof path, err);
        if (rc == DT_EINVAL || rc == DT_ECONFIG) return rc;
        if (rc < 0) {
            dt_log(DT_LOG_WARN, "%s; waiting for the next checkpoint", err->msg);
            dt_err_clear(err);
            return 0;
        }
        if (step <= e->scored) return 0;
        return scored(e, step, last, loss, accuracy, path, done);
    }
    dt_tensors vars;
    dt_safetensors_meta meta;
    rc = dt_predict_load("evaluator", e->job, NULL, &vars, &meta, path, sizeof path, err);
    /* Another model's checkpoint, or one whose job disagrees with this one
     * on the model's input: not ours to score, now or later. */
    if (rc == DT_EINVAL || rc == DT_ECONFIG) return rc;
    if (rc < 0) {
        dt_log(DT_LOG_WARN, "%s; waiting for the next checkpoint", err->msg);
        dt_err_clear(err);
        return 0;
    }
    /* The held-out csv's columns must be those the model was trained on. */
    dt_data_needs needs;
    dt_model_data_needs(&e->job->model, &needs);
    if (meta.job_id[0])
        dt_log_set_job_id(meta.job_id); /* the job it scores, for logs and metrics */
    rc = dt_data_check_names(&e->job->data, &needs, dt_data_held_out_file(&e->job->data), 1,
                             meta.feature_names, err);
    dt_safetensors_meta_deinit(&meta); /* its job is not needed here */
    if (rc < 0) {
        dt_tensors_deinit(&vars);
        return dt_err_wrap(err, rc, "evaluator");
    }
    if (meta.global_step <= e->scored) { /* the newest was unreadable: an older one came */
        dt_tensors_deinit(&vars);
        return 0;
    }
    rc = dt_model_evaluate(e->model, &vars, &e->all, &loss, &accuracy, err);
    dt_tensors_deinit(&vars);
    if (rc < 0) return dt_err_wrap(err, rc, "evaluator: evaluate");
    return scored(e, meta.global_step, final_step(e, &meta), loss, accuracy, path, done);
}

/* Sleeps ms in short slices; 1 when *stop was set meanwhile. */
static int nap(int ms, const atomic_int *stop) {
    for (int t = 0; t < ms && !*stop; t += 50) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return *stop != 0;
}

int dt_evaluator_run(const dt_job *given, const atomic_int *stop, dt_err *err) {
    /* Shapes the job leaves to the data come from the training file, as
     * the chief's and the workers' do. */
    dt_job job = *given;
    int rc = dt_job_infer(&job, err);
    if (rc < 0) return dt_err_wrap(err, rc, "evaluator");
    evaluator e;
    rc = open_evaluator(&job, &e, err);
    if (rc < 0) return rc;
    int done = 0;
    while (rc == 0 && !done) {
        if (*stop) {
            rc = dt_err_set(err, DT_ECANCELLED, "evaluator: stopped by a signal");
            break;
        }
        rc = look(&e, &done, err);
        if (rc == 0 && !done) nap(DT_EVAL_POLL_MS, stop);
    }
    if (done)
        dt_log(DT_LOG_INFO, "evaluator: done: scored the final checkpoint (global_step %lld)",
               (long long)e.scored);
    close_evaluator(&e);
    return rc;
}
