/*
 * predict: `dtrain eval` and `dtrain predict`, a checkpoint scored or applied
 * on a data file in one process, with no ps and no worker.
 *
 * A session is the three things both commands need, acquired in the order
 * that fails cheapest first: the checkpoint's variables, matched against the
 * job's model (a few MB, and the usual mistake: the wrong job file); the
 * model handle; then the data (tens of MB to read and scale). Everything
 * else reuses the other modules: checkpoint reads the file, data reads and
 * scales the examples as dt_data_open_eval does for the chief, model
 * evaluates and predicts. Nothing is parsed here.
 *
 * Data without labels: which kind a file is, the reader tells from its
 * start before anything else is read (labels_of); then the data module
 * opens it with its labels (dt_data_open_eval) or without them
 * (dt_data_open_unlabeled), scaled the same way either way, so the tests
 * hold predictions with and without labels equal to the byte.
 *
 * Invariants: a session's vars are laid out by dt_model_specs(job), so the
 * model calls cannot refuse them; predictions are written in chunks of
 * CHUNK_ROWS rows, so the output buffer stays small whatever N is.
 * Threading: none; every call owns what it allocates.
 */
#include "predict.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "checkpoint.h"
#include "data.h"
#include "data_format.h"
#include "log.h"
#include "model.h"
#include "reader.h"
#include "sparse_eval.h"
#include "sparse_reader.h"

#define CHUNK_ROWS 1024
#define NAMES_MAX 200 /* bytes of the checkpoint's variable names quoted in an error */

/* 1 when name is "<another tensor of ts>/<something>": an optimizer slot. */
static int is_slot_in(const char *name, const dt_tensors *ts) {
    const char *slash = strrchr(name, '/');
    if (!slash || slash == name) return 0;
    for (int i = 0; i < ts->count; i++) {
        const char *other = ts->items[i].name;
        if (strlen(other) == (size_t)(slash - name) &&
            strncmp(other, name, (size_t)(slash - name)) == 0)
            return 1;
    }
    return 0;
}

/* The names of the tensors in a loaded file that are not optimizer slots,
 * comma-separated, cut with "..." when they do not fit. */
static void names_text(const dt_tensors *loaded, char *buf, size_t cap) {
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < loaded->count; i++) {
        const char *name = loaded->items[i].name;
        if (is_slot_in(name, loaded)) continue;
        size_t need = strlen(name) + (off ? 2 : 0);
        if (off + need + 4 >= cap) {
            snprintf(buf + off, cap - off, "%s...", off ? ", " : "");
            return;
        }
        off += (size_t)snprintf(buf + off, cap - off, "%s%s", off ? ", " : "", name);
    }
    if (!off) snprintf(buf, cap, "no variables");
}

/* 1 when name is "<a variable of specs>/<something>": an optimizer slot the
 * chief saved beside the variable. */
static int is_slot_of(const char *name, const dt_tensor *specs, int count) {
    for (int i = 0; i < count; i++) {
        size_t n = strlen(specs[i].name);
        if (strncmp(name, specs[i].name, n) == 0 && name[n] == '/' && name[n + 1] != '\0') return 1;
    }
    return 0;
}

/* Checks that loaded holds exactly the model's variables (slots aside),
 * each with the spec's dtype and shape. */
static int match(const char *what, const dt_job *job, const dt_tensor *specs, int count,
                 const dt_tensors *loaded, const dt_safetensors_meta *meta, const char *path,
                 dt_err *err) {
    char want[DT_SAFETENSORS_MODEL_MAX], have[NAMES_MAX], a[96], b[96];
    dt_model_describe(&job->model, want, sizeof want);
    const char *written = meta->model[0] ? meta->model : "(no model description)";
    for (int i = 0; i < count; i++) {
        const dt_tensor *t = dt_tensors_find(loaded, specs[i].name);
        if (!t) {
            names_text(loaded, have, sizeof have);
            return dt_err_set(err, DT_EINVAL,
                              "%s: %s: no variable \"%s\" for the job's model \"%s\"; the "
                              "checkpoint holds %s (written for \"%s\")",
                              what, path, specs[i].name, want, have, written);
        }
        if (!dt_tensor_same_layout(t, &specs[i])) {
            dt_tensor_layout_text(t, a, sizeof a);
            dt_tensor_layout_text(&specs[i], b, sizeof b);
            return dt_err_set(err, DT_EINVAL,
                              "%s: %s: variable \"%s\" is %s in the checkpoint but %s in the "
                              "job's model \"%s\" (the checkpoint was written for \"%s\")",
                              what, path, specs[i].name, a, b, want, written);
        }
    }
    for (int i = 0; i < loaded->count; i++) {
        const char *name = loaded->items[i].name;
        int known = is_slot_of(name, specs, count) || strcmp(name, DT_CKPT_SCALE_MEAN) == 0 ||
                    strcmp(name, DT_CKPT_SCALE_STD) == 0;
        for (int k = 0; k < count && !known; k++)
            known = strcmp(name, specs[k].name) == 0;
        if (!known)
            return dt_err_set(err, DT_EINVAL,
                              "%s: %s: the checkpoint holds \"%s\", which the job's model "
                              "\"%s\" does not have (the checkpoint was written for \"%s\")",
                              what, path, name, want, written);
    }
    return 0;
}

/* Reads the checkpoint at path, or the latest in log_dir when path is NULL
 * or "", into *loaded and *m; where (DT_PATH_MAX + 64 bytes) gets its path. */
static int read_checkpoint(const char *what, const char *path, const char *log_dir,
                           dt_tensors *loaded, dt_safetensors_meta *m, char *where, size_t cap,
                           dt_err *err) {
    if (path && *path) {
        if (strlen(path) >= cap)
            return dt_err_set(err, DT_EINVAL, "%s: checkpoint path of %zu bytes is too long", what,
                              strlen(path));
        snprintf(where, cap, "%s", path);
        return dt_safetensors_load(path, loaded, m, err);
    }
    int found = dt_ckpt_restore_latest(log_dir, loaded, m, where, cap, err);
    if (found == 0)
        return dt_err_set(err, DT_ENOTFOUND,
                          "%s: no checkpoint in %.*s (train the job first, or name a "
                          "checkpoint file)",
                          what, DT_PATH_MAX, log_dir);
    return found < 0 ? found : 0;
}

int dt_predict_pick_best(const char *what, const char *log_dir, char *out, size_t cap) {
    out[0] = '\0';
    if (!log_dir || !log_dir[0]) return 0;
    dt_safetensors_meta m;
    memset(&m, 0, sizeof m);
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_ckpt_best_meta(log_dir, &m, out, cap, &err);
    if (rc < 0)
        dt_log(DT_LOG_WARN, "%s: passing over the best model: %s; taking the latest checkpoint",
               what, err.msg);
    if (rc <= 0) {
        out[0] = '\0';
        return 0;
    }
    dt_safetensors_meta_deinit(&m);
    dt_log(DT_LOG_INFO,
           "%s: the best model, %s (global_step %lld, eval loss %.6g); --latest takes the latest "
           "checkpoint",
           what, out, (long long)m.global_step, m.eval_loss);
    return 1;
}

/* The checkpoint's job (its "job" metadata) into *job: the defaults, then
 * its fields, then dt_job_finish. */
static int job_of_meta(const char *what, const dt_safetensors_meta *m, const char *where,
                       dt_job *job, dt_err *err) {
    char source[DT_PATH_MAX + 128];
    snprintf(source, sizeof source, "%s: __metadata__ job", where);
    dt_job_defaults(job);
    /* A job saved without "scale" was trained before "auto" was the
     * default: its features went in as read. */
    job->data.scale = DT_SCALE_NONE;
    int rc = dt_job_parse(m->job, source, job, err);
    if (rc == 0) rc = dt_job_finish(job, err);
    if (rc == 0) return 0;
    dt_err_wrap(err, rc, "%s", what);
    if (err) err->code = DT_ECONFIG; /* a config that this build cannot take */
    return DT_ECONFIG;
}

/* A job given beside a checkpoint that carries its own must agree with it
 * on the model and on how data becomes its input: anything else would
 * score or predict with a model the checkpoint is not. A scale the given
 * job left to "auto" is the checkpoint's (*scale and *divisor; unchanged
 * without its job), so a checkpoint trained before "auto" was the default
 * is scored as it was trained. */
static int check_job(const char *what, const dt_job *job, const dt_safetensors_meta *m,
                     const char *where, dt_scale *scale, double *divisor, dt_err *err) {
    if (!m->job) return 0; /* an older checkpoint: the job is all there is */
    dt_job *trained = dt_malloc(sizeof *trained), *given = dt_malloc(sizeof *given);
    if (!trained || !given) {
        free(trained);
        free(given);
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", what);
    }
    int rc = job_of_meta(what, m, where, trained, err);
    *given = *job;
    if (rc == 0 && job->data.scale_chosen) {
        given->data.scale = *scale = trained->data.scale;
        given->data.scale_divisor = *divisor = trained->data.scale_divisor;
    }
    char diff[DT_ERR_MSG_MAX / 2];
    if (rc == 0 && (dt_job_diff(trained, given, dt_job_model_fields, diff, sizeof diff) > 0 ||
                    dt_job_diff(trained, given, dt_job_input_fields, diff, sizeof diff) > 0))
        rc = dt_err_set(err, DT_ECONFIG,
                        "%s: %s: the job config disagrees with the job the checkpoint was "
                        "trained with: %s (checkpoint -> config); leave out --config to use "
                        "the checkpoint's",
                        what, where, diff);
    free(trained);
    free(given);
    return rc;
}

/* The scaling statistics a checkpoint carries, copied out of it. */
typedef struct {
    double *mean, *std; /* (F) owned */
    dt_data_stats view; /* num_features 0: the checkpoint has none */
} ckpt_stats;

static void stats_deinit(ckpt_stats *st) {
    free(st->mean);
    free(st->std);
    memset(st, 0, sizeof *st);
}

/* Takes "scale/mean" and "scale/std" from loaded when the job standardizes
 * (scale) and the checkpoint has both (F64 (F), F the job's features). */
static int stats_of(const char *what, const dt_job *job, dt_scale scale, const dt_tensors *loaded,
                    const char *where, ckpt_stats *st, dt_err *err) {
    memset(st, 0, sizeof *st);
    const dt_tensor *mean = dt_tensors_find(loaded, DT_CKPT_SCALE_MEAN);
    const dt_tensor *std = dt_tensors_find(loaded, DT_CKPT_SCALE_STD);
    if (scale != DT_SCALE_STANDARDIZE || !mean || !std) return 0;
    const int F = (int)job->model.num_features; /* standardized: a dense model's */
    for (int i = 0; i < 2; i++) {
        const dt_tensor *t = i ? std : mean;
        if (t->dtype != DT_DTYPE_F64 || t->ndim != 1 || t->shape[0] != F)
            return dt_err_set(err, DT_ECONFIG,
                              "%s: %s: \"%s\" is not F64 (%d), the shape of the scaling "
                              "statistics of %d features",
                              what, where, t->name, F, F);
    }
    st->mean = dt_malloc(mean->nbytes);
    st->std = dt_malloc(std->nbytes);
    if (!st->mean || !st->std) {
        stats_deinit(st);
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", what);
    }
    memcpy(st->mean, mean->data, mean->nbytes);
    memcpy(st->std, std->data, std->nbytes);
    st->view = (dt_data_stats){.num_features = F, .mean = st->mean, .std = st->std};
    return 0;
}

/* A dense model's variable that the checkpoint holds as a table's rows
 * ("<name>/ids"): a sparse job's checkpoint, named before the job's
 * fields are compared, so the message says which tensor. */
static int check_not_table(const char *what, const dt_tensor *specs, int count,
                           const dt_tensors *loaded, const char *where, dt_err *err) {
    for (int i = 0; i < count; i++) {
        char ids[DT_TENSOR_NAME_MAX + 8];
        snprintf(ids, sizeof ids, "%.*s/ids", DT_TENSOR_NAME_MAX, specs[i].name);
        if (!dt_tensors_find(loaded, specs[i].name) && dt_tensors_find(loaded, ids))
            return dt_err_set(err, DT_EINVAL,
                              "%s: %s: \"%s\" is a table's rows (\"%s\", a sparse model's), but "
                              "the job's model is dense and wants the variable \"%s\" (a "
                              "checkpoint of a \"sparse\": \"on\" job?)",
                              what, where, specs[i].name, ids, specs[i].name);
    }
    return 0;
}

/* A sparse job's model from the checkpoint at path (or the latest of
 * log_dir) into *out; meta and where as load's. */
static int load_sparse(const char *what, const dt_job *job, const char *path, dt_sparse_ckpt **out,
                       dt_safetensors_meta *meta, char *where, size_t cap, dt_err *err) {
    dt_tensors loaded;
    memset(&loaded, 0, sizeof loaded);
    memset(meta, 0, sizeof *meta);
    int rc = read_checkpoint(what, path, job->log_dir, &loaded, meta, where, cap, err);
    if (rc == 0) rc = dt_sparse_ckpt_open(what, job, &loaded, where, out, err);
    dt_tensors_deinit(&loaded);       /* the model holds its own copy of what it needs */
    dt_scale scale = job->data.scale; /* a sparse job's rows are not scaled */
    double divisor = job->data.scale_divisor;
    if (rc == 0 && (rc = check_job(what, job, meta, where, &scale, &divisor, err)) < 0) {
        dt_sparse_ckpt_free(*out);
        *out = NULL;
    }
    if (rc == 0)
        dt_log(DT_LOG_INFO, "%s: read %s (global_step %lld, %lld rows of the table, %s)", what,
               where, (long long)meta->global_step, (long long)dt_sparse_ckpt_rows(*out),
               meta->model[0] ? meta->model : "no model description");
    if (rc < 0) dt_safetensors_meta_deinit(meta);
    return rc;
}

int dt_predict_load_sparse(const char *what, const dt_job *job, const char *path,
                           dt_sparse_ckpt **out, dt_safetensors_meta *meta, char *path_out,
                           size_t path_cap, dt_err *err) {
    char where[DT_PATH_MAX + 64];
    dt_safetensors_meta m;
    *out = NULL;
    int rc = load_sparse(what, job, path, out, &m, where, sizeof where, err);
    if (rc < 0) return rc;
    if (path_out && path_cap) snprintf(path_out, path_cap, "%s", where);
    if (meta)
        *meta = m;
    else
        dt_safetensors_meta_deinit(&m);
    return 0;
}

/* dt_predict_load, with messages that start "<what>: "; stats (may be
 * NULL) gets the checkpoint's scaling statistics, and scaling (may be
 * NULL) the scale and divisor the data takes: the job's, or the
 * checkpoint's when the job left "scale" to "auto". */
static int load(const char *what, const dt_job *job, const char *path, dt_tensors *vars,
                dt_safetensors_meta *meta, char *path_out, size_t path_cap, ckpt_stats *stats,
                dt_data_config *scaling, dt_err *err) {
    dt_scale scale = job->data.scale;
    double divisor = job->data.scale_divisor;
    memset(vars, 0, sizeof *vars);
    if (stats) memset(stats, 0, sizeof *stats);
    dt_tensor specs[DT_MODEL_MAX_VARS];
    int count = 0, rc;
    dt_tensors loaded;
    memset(&loaded, 0, sizeof loaded);
    dt_safetensors_meta m;
    memset(&m, 0, sizeof m);
    char where[DT_PATH_MAX + 64];
    if ((rc = dt_model_specs(&job->model, specs, &count, err)) < 0) return rc;
    if ((rc = read_checkpoint(what, path, job->log_dir, &loaded, &m, where, sizeof where, err)) < 0)
        goto fail;
    if ((rc = check_not_table(what, specs, count, &loaded, where, err)) < 0) goto fail;
    if ((rc = check_job(what, job, &m, where, &scale, &divisor, err)) < 0) goto fail;
    if ((rc = match(what, job, specs, count, &loaded, &m, where, err)) < 0) goto fail;
    if (stats && (rc = stats_of(what, job, scale, &loaded, where, stats, err)) < 0) goto fail;
    /* Without its job, a checkpoint was standardized when it has the
     * statistics ("auto" only: a scale set by hand is the user's word). */
    if (!m.job && job->data.scale_chosen && !dt_tensors_find(&loaded, DT_CKPT_SCALE_MEAN))
        scale = DT_SCALE_NONE;
    if (scaling) {
        scaling->scale = scale;
        scaling->scale_divisor = divisor;
    }
    if ((rc = dt_tensors_init(vars, specs, count, err)) < 0) goto fail;
    for (int i = 0; i < count; i++)
        memcpy(vars->items[i].data, dt_tensors_find(&loaded, specs[i].name)->data,
               vars->items[i].nbytes);
    if (path_out && path_cap) snprintf(path_out, path_cap, "%s", where);
    dt_log(DT_LOG_INFO, "%s: read %s (global_step %lld, %s)", what, where, (long long)m.global_step,
           m.model[0] ? m.model : "no model description");
    if (meta) {
        *meta = m;
        m.job = m.feature_names = NULL; /* the caller's now */
    }
fail:
    dt_safetensors_meta_deinit(&m);
    dt_tensors_deinit(&loaded);
    if (rc < 0) {
        dt_tensors_deinit(vars);
        if (stats) stats_deinit(stats);
    }
    return rc;
}

int dt_predict_load(const char *what, const dt_job *job, const char *path, dt_tensors *vars,
                    dt_safetensors_meta *meta, char *path_out, size_t path_cap, dt_err *err) {
    return load(what, job, path, vars, meta, path_out, path_cap, NULL, NULL, err);
}

int dt_predict_job_of(const char *what, const char *path, const char *log_dir, dt_job *job,
                      char *path_out, size_t path_cap, dt_err *err) {
    dt_tensors loaded;
    memset(&loaded, 0, sizeof loaded);
    dt_safetensors_meta m;
    memset(&m, 0, sizeof m);
    char where[DT_PATH_MAX + 64];
    int rc = read_checkpoint(what, path, log_dir, &loaded, &m, where, sizeof where, err);
    dt_tensors_deinit(&loaded);
    if (rc == 0 && !m.job)
        rc = dt_err_set(err, DT_ECONFIG,
                        "%s: %s carries no job config (a checkpoint of an older dtrain): give "
                        "--config FILE, the job it was trained with",
                        what, where);
    if (rc == 0) rc = job_of_meta(what, &m, where, job, err);
    if (rc == 0 && path_out) {
        if (strlen(where) >= path_cap)
            rc = dt_err_set(err, DT_EINVAL, "%s: %s: path too long", what, where);
        else
            snprintf(path_out, path_cap, "%s", where);
    }
    if (rc == 0)
        dt_log(DT_LOG_INFO, "%s: the job config is the one %s was trained with", what, where);
    dt_safetensors_meta_deinit(&m);
    return rc;
}

int dt_predict_fill_shape(const char *what, const char *path, dt_job *job, dt_err *err) {
    if (!dt_job_shape_unset(job)) return 0;
    dt_tensors loaded;
    memset(&loaded, 0, sizeof loaded);
    dt_safetensors_meta m;
    memset(&m, 0, sizeof m);
    char where[DT_PATH_MAX + 64];
    dt_err quiet;
    dt_err_clear(&quiet);
    /* A checkpoint that cannot be read here fails the command soon with
     * its own error; until then the training file may still say the shape. */
    int rc = read_checkpoint(what, path, job->log_dir, &loaded, &m, where, sizeof where, &quiet);
    dt_tensors_deinit(&loaded);
    dt_job *trained = rc == 0 && m.job ? dt_malloc(sizeof *trained) : NULL;
    if (trained && job_of_meta(what, &m, where, trained, &quiet) == 0) {
        dt_model_config *mc = &job->model;
        const int64_t F = mc->num_features;
        const int K = mc->num_classes;
        if (!F) mc->num_features = trained->model.num_features;
        if (!K) mc->num_classes = trained->model.num_classes;
        dt_log(DT_LOG_INFO, "%s: %s%s%s from the job %s was trained with: features %lld classes %d",
               what, !F ? "\"features\"" : "", !F && !K ? " and " : "", !K ? "\"classes\"" : "",
               where, (long long)mc->num_features, mc->num_classes);
    }
    free(trained);
    dt_safetensors_meta_deinit(&m);
    rc = dt_job_infer(job, err); /* an older checkpoint, without its job */
    return rc < 0 ? dt_err_wrap(err, rc, "%s", what) : 0;
}

/* ---- sessions --------------------------------------------------------- */

typedef struct {
    dt_tensors vars;
    dt_model *model;
    int labeled;      /* 1: the data carries labels */
    dt_dataset *data; /* read as the chief reads its held-out set */
    dt_batch all;     /* every example, borrowed from data; y NULL without labels */
    /* A sparse model: vars, model and data above stay empty. */
    dt_sparse_ckpt *sparse;
    dt_sparse_set set; /* every example, in file order */
} session;

static void session_close(session *s) {
    dt_sparse_ckpt_free(s->sparse);
    dt_sparse_set_deinit(&s->set);
    dt_data_free(s->data);
    dt_model_free(s->model);
    dt_tensors_deinit(&s->vars);
    memset(s, 0, sizeof *s);
}

/* The job with its held-out set replaced by the params' data, when given;
 * a file that is not there is an error naming its flag or field. */
static int data_config(const char *what, const dt_predict_params *p, dt_data_config *d,
                       dt_err *err) {
    *d = p->job->data;
    int have_data = p->data && *p->data, have_labels = p->labels && *p->labels;
    if (!have_data) {
        if (have_labels)
            return dt_err_set(err, DT_EINVAL,
                              "%s: labels %s given without the data file they label", what,
                              p->labels);
        if (dt_data_splits(d)) /* the validation rows the chief scored */
            return dt_data_check_files(what, "\"train_data\"", d->train_data, "\"train_labels\"",
                                       d->source == DT_DATA_IDX ? d->train_labels : NULL, err);
        if (!d->eval_data[0])
            return dt_err_set(err, DT_EINVAL,
                              "%s: no data: the job has no \"eval_data\" (nor "
                              "\"validation_fraction\") and no data file was given",
                              what);
        return dt_data_check_files(what, "\"eval_data\"", d->eval_data, "\"eval_labels\"",
                                   d->source == DT_DATA_IDX ? d->eval_labels : NULL, err);
    }
    if (strlen(p->data) >= sizeof d->eval_data ||
        (have_labels && strlen(p->labels) >= sizeof d->eval_labels))
        return dt_err_set(err, DT_EINVAL, "%s: a data path is too long (at most %zu bytes)", what,
                          sizeof d->eval_data - 1);
    snprintf(d->eval_data, sizeof d->eval_data, "%s", p->data);
    snprintf(d->eval_labels, sizeof d->eval_labels, "%s", have_labels ? p->labels : "");
    return dt_data_check_files(what, "--data", d->eval_data, "--labels", d->eval_labels, err);
}

/* A data file that looks like another format than the model reads (a
 * libsvm file given to a csv model, a csv to a libsvm or idx one) is a
 * config that does not fit its data: both formats named, DT_ECONFIG. */
static int check_format(const char *what, const dt_data_config *d, dt_err *err) {
    if (!dt_data_reads_files(d) || d->source == DT_DATA_CRITEO) return 0;
    dt_reader_format want = dt_data_reader_format(d);
    int looks = -1;
    char how[128];
    int rc = dt_data_format_guess(dt_data_held_out_file(d), &looks, how, sizeof how, err);
    if (rc < 0) return dt_err_wrap(err, rc, "%s", what);
    if (looks < 0 || looks == (int)want) return 0;
    return dt_err_set(err, DT_ECONFIG,
                      "%s: %s looks like %s (%s), but the model reads %s (\"data\": \"%s\"): "
                      "give it a %s file like its training data, or use the checkpoint of a "
                      "%s job",
                      what, dt_data_held_out_file(d), dt_data_format_name((dt_reader_format)looks),
                      how, dt_data_format_name(want), dt_data_source_names[d->source],
                      dt_data_format_name(want), dt_data_format_name((dt_reader_format)looks));
}

/* Logs whether the data carries labels (labeled) and what that was told
 * by (how); eval refuses data without them. */
static int report_labels(const char *what, int labeled, const char *how, dt_err *err) {
    const int eval = strcmp(what, "eval") == 0;
    if (labeled) {
        /* Only predict had a choice to report. */
        dt_log(eval ? DT_LOG_DEBUG : DT_LOG_INFO,
               "%s: labels in the data (%s): checked and scored, not written", what, how);
        return 0;
    }
    if (eval)
        return dt_err_set(err, DT_EINVAL,
                          "eval: no labels in the data (%s); eval scores the model against "
                          "labels (predict reads data without them)",
                          how);
    dt_log(DT_LOG_INFO,
           "%s: no labels in the data (%s): predicting from the features alone, "
           "with no loss or accuracy",
           what, how);
    return 0;
}

/* Whether the data of d carries labels (*labeled), told from the file's
 * start; logs what it went by. */
static int labels_of(const char *what, const dt_data_config *d, const dt_data_needs *needs,
                     int *labeled, dt_err *err) {
    *labeled = 1;
    /* The synthetic sources have no held-out set: the data module says so. */
    if (!dt_data_reads_files(d)) return 0;
    if (dt_data_splits(d))
        return report_labels(what, 1, "the validation rows of \"train_data\"", err);
    dt_reader_params rp;
    dt_data_reader_params(d, needs, &rp);
    char how[DT_ERR_MSG_MAX / 2];
    int rc = dt_reader_detect_labels(dt_data_reader_format(d), d->eval_data, d->eval_labels, &rp,
                                     labeled, how, sizeof how, err);
    if (rc < 0) return dt_err_wrap(err, rc, "%s", what);
    return report_labels(what, *labeled, how, err);
}

/* Whether a sparse job's data file carries labels: a libsvm file tells by
 * its first row, as for dense data; a Criteo file by its count of fields. */
static int sparse_labels_of(const char *what, const dt_data_config *d, const dt_data_needs *needs,
                            int *labeled, dt_err *err) {
    if (d->source == DT_DATA_LIBSVM) return labels_of(what, d, needs, labeled, err);
    char how[DT_ERR_MSG_MAX / 2];
    int rc = dt_sparse_detect_criteo_labels(d->eval_data, labeled, how, sizeof how, err);
    if (rc < 0) return dt_err_wrap(err, rc, "%s", what);
    return report_labels(what, *labeled, how, err);
}

/* session_open for a sparse job: its model from the checkpoint, then the
 * whole data file as a CSR set. */
static int session_open_sparse(const char *what, const dt_predict_params *p,
                               const dt_data_config *d, session *s, dt_predict_result *r,
                               dt_err *err) {
    dt_data_needs needs;
    dt_model_data_needs(&p->job->model, &needs);
    dt_safetensors_meta meta;
    int rc = load_sparse(what, p->job, p->checkpoint, &s->sparse, &meta, r->checkpoint,
                         sizeof r->checkpoint, err);
    if (rc < 0) return rc;
    if ((rc = sparse_labels_of(what, d, &needs, &s->labeled, err)) == 0 &&
        (rc = dt_job_read_sparse(p->job, d->eval_data, s->labeled, 0, 1, &s->set, err)) < 0)
        dt_err_wrap(err, rc, "%s", what);
    if (rc == 0 && s->set.rows < 1)
        rc = dt_err_set(err, DT_EINVAL, "%s: %s: no examples", what, d->eval_data);
    if (rc == 0) {
        r->global_step = meta.global_step;
        snprintf(r->model, sizeof r->model, "%s", meta.model);
        r->examples = s->set.rows;
        r->labeled = s->labeled;
    }
    dt_safetensors_meta_deinit(&meta);
    return rc;
}

/* Opens the session of command `what` ("eval" or "predict", the prefix of
 * its messages). */
static int session_open(const char *what, const dt_predict_params *p, session *s,
                        dt_predict_result *r, dt_err *err) {
    memset(s, 0, sizeof *s);
    memset(r, 0, sizeof *r);
    r->loss = r->accuracy = NAN;
    if (dt_job_is_sparse(p->job)) {
        dt_data_config *d = dt_malloc(sizeof *d);
        if (!d) return dt_err_set(err, DT_ENOMEM, "%s: out of memory", what);
        int rc = data_config(what, p, d, err);
        if (rc == 0) rc = check_format(what, d, err);
        if (rc == 0) rc = session_open_sparse(what, p, d, s, r, err);
        free(d);
        if (rc < 0) session_close(s);
        return rc;
    }
    dt_data_config *d = dt_malloc(sizeof *d); /* several KB of paths: not on the stack */
    if (!d) return dt_err_set(err, DT_ENOMEM, "%s: out of memory", what);
    dt_data_needs needs;
    dt_model_data_needs(&p->job->model, &needs);
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    ckpt_stats stats;
    memset(&stats, 0, sizeof stats);
    int rc = data_config(what, p, d, err);
    if (rc == 0) rc = check_format(what, d, err);
    if (rc == 0)
        rc = load(what, p->job, p->checkpoint, &s->vars, &meta, r->checkpoint, sizeof r->checkpoint,
                  &stats, d, err);
    if (rc == 0) rc = dt_model_new(&p->job->model, &s->model, err);
    if (rc == 0) rc = labels_of(what, d, &needs, &s->labeled, err);
    if (rc == 0 && (rc = dt_data_check_names(d, &needs, dt_data_held_out_file(d), s->labeled,
                                             meta.feature_names, err)) < 0)
        dt_err_wrap(err, rc, "%s", what);
    /* Scaled with the checkpoint's statistics when it has them, so the
     * training file need not exist; an older checkpoint's job reads it. */
    if (rc == 0)
        rc = dt_data_open_held_out(d, &needs, p->job->seed,
                                   stats.view.num_features ? &stats.view : NULL, s->labeled,
                                   &s->data, err);
    if (rc == 0) rc = dt_data_all(s->data, &s->all, err);
    free(d);
    stats_deinit(&stats);
    dt_safetensors_meta_deinit(&meta);
    if (rc < 0) {
        session_close(s);
        return rc;
    }
    r->global_step = meta.global_step;
    snprintf(r->model, sizeof r->model, "%s", meta.model);
    r->examples = s->all.rows;
    r->labeled = s->labeled;
    return 0;
}

static int session_evaluate(const char *what, session *s, dt_predict_result *r, dt_err *err) {
    int rc = s->sparse
                 ? dt_sparse_scorer_evaluate(dt_sparse_ckpt_scorer(s->sparse), &s->set, &r->loss,
                                             &r->accuracy, err)
                 : dt_model_evaluate(s->model, &s->vars, &s->all, &r->loss, &r->accuracy, err);
    return rc < 0 ? dt_err_wrap(err, rc, "%s: evaluate", what) : 0;
}

int dt_predict_eval(const dt_predict_params *p, dt_predict_result *out, dt_err *err) {
    session s;
    int rc = session_open("eval", p, &s, out, err);
    if (rc < 0) return rc;
    rc = session_evaluate("eval", &s, out, err);
    session_close(&s);
    return rc;
}

/* ---- writing predictions ---------------------------------------------- */

const char *const dt_predict_output_names[] = {"both", "class", "proba", NULL};

/* The header line: "prediction" for a linear model; for a classifier of
 * classes classes, "class" and/or "p0,...". */
static int write_header(FILE *f, int linear, int classes, int output) {
    if (linear) return fprintf(f, "prediction\n") < 0 ? -1 : 0;
    int n = 0;
    if (output != DT_PREDICT_PROBA && fprintf(f, "class") < 0) return -1;
    if (output != DT_PREDICT_PROBA) n++;
    for (int k = 0; output != DT_PREDICT_CLASS && k < classes; k++)
        if (fprintf(f, "%sp%d", n++ ? "," : "", k) < 0) return -1;
    return fprintf(f, "\n") < 0 ? -1 : 0;
}

/* One line per row of pred (rows, cols): a linear model's value; for a
 * classifier the class and/or the probabilities (cols 1: logistic's P(y=1),
 * the two classes' probabilities being 1 - p and p). */
static int write_rows(FILE *f, const float *pred, int rows, int cols, int linear, int output) {
    for (int i = 0; i < rows; i++) {
        const float *row = pred + (size_t)i * (size_t)cols;
        if (linear) {
            if (fprintf(f, "%.9g\n", (double)row[0]) < 0) return -1;
            continue;
        }
        double two[2] = {1.0 - (double)row[0], (double)row[0]};
        int classes = cols == 1 ? 2 : cols, best = 0;
        if (cols == 1)
            best = row[0] > 0.5f;
        else
            for (int k = 1; k < cols; k++)
                if (row[k] > row[best]) best = k;
        int n = 0;
        if (output != DT_PREDICT_PROBA && fprintf(f, "%d", best) < 0) return -1;
        if (output != DT_PREDICT_PROBA) n++;
        for (int k = 0; output != DT_PREDICT_CLASS && k < classes; k++)
            if (fprintf(f, "%s%.9g", n++ ? "," : "", cols == 1 ? two[k] : (double)row[k]) < 0)
                return -1;
        if (fputc('\n', f) == EOF) return -1;
    }
    return 0;
}

int dt_predict_write(const dt_predict_params *p, dt_predict_result *out, dt_err *err) {
    dt_predict_result local;
    memset(&local, 0, sizeof local);
    dt_predict_result *r = out ? out : &local;
    session s;
    int rc = session_open("predict", p, &s, r, err);
    if (rc < 0) return rc;
    int to_stdout = !p->out || !*p->out || strcmp(p->out, "-") == 0;
    const char *name = to_stdout ? "standard output" : p->out;
    const int cols = s.sparse ? dt_sparse_ckpt_out_cols(s.sparse) : dt_model_out_cols(s.model);
    const int F = s.all.cols;
    const int64_t rows = s.sparse ? s.set.rows : s.all.rows;
    const int linear = p->job->model.kind == DT_MODEL_LINEAR;
    FILE *f = NULL;
    float *pred = dt_malloc((size_t)CHUNK_ROWS * (size_t)cols * sizeof *pred);
    if (!pred) {
        rc = dt_err_set(err, DT_ENOMEM, "predict: out of memory");
        goto fail;
    }
    if (s.labeled && (rc = session_evaluate("predict", &s, r, err)) < 0) goto fail;
    f = to_stdout ? stdout : fopen(p->out, "w");
    if (!f) {
        rc = dt_err_set(err, errno == ENOENT ? DT_ENOTFOUND : DT_EIO,
                        "predict: %s: cannot open for writing: %s", p->out, strerror(errno));
        goto fail;
    }
    errno = 0; /* so a failed write without errno does not show a stale reason */
    const int classes = cols == 1 ? 2 : cols;
    if (!p->no_header && write_header(f, linear, classes, p->output) < 0) goto write_failed;
    for (int64_t start = 0; start < rows; start += CHUNK_ROWS) {
        int n = rows - start < CHUNK_ROWS ? (int)(rows - start) : CHUNK_ROWS;
        if (s.sparse) {
            rc = dt_sparse_scorer_predict(dt_sparse_ckpt_scorer(s.sparse), &s.set, start, n, pred,
                                          err);
        } else {
            dt_batch b = s.all;
            b.rows = n;
            b.x = s.all.x + (size_t)start * (size_t)F;
            b.y = NULL;
            rc = dt_model_predict(s.model, &s.vars, &b, pred, NULL, err);
        }
        if (rc < 0) {
            rc = dt_err_wrap(err, rc, "predict");
            goto fail;
        }
        if (write_rows(f, pred, n, cols, linear, p->output) < 0) goto write_failed;
    }
    if (fflush(f) != 0 || ferror(f)) goto write_failed;
    if (!to_stdout) {
        FILE *closing = f;
        f = NULL;
        if (fclose(closing) != 0) goto write_failed;
    }
    dt_log(DT_LOG_INFO, "predict: wrote %lld rows to %s", (long long)rows, name);
    goto fail;

write_failed:
    rc =
        dt_err_set(err, DT_EIO, "predict: %s: write: %s", name, errno ? strerror(errno) : "failed");
fail:
    if (f && !to_stdout) fclose(f);
    free(pred);
    session_close(&s);
    return rc;
}

int dt_predict_format(const dt_predict_result *r, char *buf, size_t cap) {
    if (isnan(r->accuracy))
        return snprintf(buf, cap, "loss %.6g examples %lld global_step %lld", r->loss,
                        (long long)r->examples, (long long)r->global_step);
    return snprintf(buf, cap, "loss %.6g accuracy %.4f examples %lld global_step %lld", r->loss,
                    r->accuracy, (long long)r->examples, (long long)r->global_step);
}
