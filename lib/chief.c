/*
 * chief: model start-up (live / restore / init), checkpoint, summary and
 * evaluation timers, ps recovery, and the end of the job.
 *
 * A checkpoint holds whole variables and their optimizer slots
 * ("<variable>/<slot>"), pulled in one round just before saving, with the
 * global step of that pull. Whole variables (slices joined by the ps client)
 * restore onto any number of ps tasks, placed anew.
 *
 * A sparse model's table is saved beside them as the rows the ps tasks
 * hold ("<table>/ids", "<table>/values", its slots: lib/table.h's layout),
 * asked for a page at a time (SparseExport), merged in id order and
 * streamed to disk as the pages come (never the whole table in memory); a
 * restore
 * creates the tasks with tables_pending and sends the checkpoint's rows in
 * pages (SparseImport), each task keeping those placed on it, so a table
 * saved by any number of tasks restores onto any other.
 *
 * Storage faults never end training: a summary that cannot be written (a
 * full disk) is dropped and counted, logged once per STORAGE_LOG_SECS, and
 * summaries resume when writes succeed; a periodic checkpoint that fails is
 * retried with backoff. Only the final checkpoint is worth waiting for: it
 * is retried for final_save_secs, then the ps tasks are told the job ended
 * and the chief returns DT_ESTORAGE (a restart with space back completes the
 * job from the latest checkpoint). On the timer the chief also checks that
 * its log dir is the one it locked (same inode); a dir deleted or replaced
 * mid-job is recreated, locked again, gets a new event file and at once a
 * checkpoint.
 *
 * Failures: a permanent failure of the chief's own (dt_worker_report_failure
 * says which) tells every ps task the job failed, so the ps tasks and the
 * workers exit 1 with its reason instead of waiting for a chief. A worker's
 * permanent failure reaches the chief through ps 0's Status: it is logged
 * once ("worker N is gone") and training goes on.
 *
 * Threading: runs on the worker loop's thread (hooks), nothing else.
 */
#include "chief.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include "alloc.h"
#include "checkpoint.h"
#include "fileio.h"
#include "log.h"
#include "model.h"
#include "optim.h"
#include "sparse_eval.h"
#include "sparse_model.h"
#include "summary.h"
#include "train_metrics.h"

/* Rows a page of a table's save or restore carries: at most 64k (a wide
 * model's one float with FTRL's two slots: 1.3 MB a message), fewer for
 * wider rows, so a page stays near TABLE_PAGE_BYTES whatever the row: under
 * the 4 MiB the smallest ps message cap allows (an embedding table of 8
 * floats with adagrad's slot would be 4.7 MB at 64k rows). */
#define TABLE_PAGE_ROWS 65536
#define TABLE_PAGE_BYTES (2 << 20)

#define STORAGE_LOG_SECS 10.0 /* at most one line per this while summaries drop */
#define LOG_DIR_CHECK_SECS 1.0
#define SAVE_BACKOFF_FIRST 1.0 /* seconds; doubles up to save_model_secs */
#define WORKERS_CHECK_SECS 1.0 /* how often ps 0 is asked which workers failed */
#define FINAL_BACKOFF_MAX 5.0
#define DT_CHIEF_USER_SCALARS 64 /* a program's own scalars a summary step writes */

typedef struct {
    dt_worker *w;
    const dt_job *job;
    const dt_user_model *user; /* a program's own model, or NULL */
    dt_ps_model create;        /* what the ps tasks are created with */
    int64_t catch_up_steps;    /* how far a restored ps may be raised past step */
    char model[DT_SAFETENSORS_MODEL_MAX];
    /* The model plus what else makes this job this job (optimizer, max_steps,
     * consistency): each ps echoes it in Status, so a chief that finds a live
     * model can tell whether its own job created it. */
    char job_desc[DT_MSG_MODEL_MAX];
    /* The job's identity: 32 hex digits of a random 128-bit number, made
     * when the chief first creates a model in a log dir with no checkpoint
     * and kept in its job id file (checkpoint.h) and in every checkpoint.
     * Create hands it to every ps, Status echoes it. */
    char job_id[DT_JOB_ID_MAX];
    int job_id_new;      /* made by this process (no file, no checkpoint had one) */
    int job_id_saved;    /* the log dir's job id file holds it */
    dt_tensors slots;    /* (vars x optimizer slots) "<variable>/<slot>" */
    int have_slots;      /* slots hold values worth sending (from a checkpoint) */
    dt_tensors recipe;   /* the scaling statistics a checkpoint carries (or none) */
    char *job_json;      /* the job config a checkpoint carries (dt_job_to_json) */
    char *feature_names; /* csv: the training file's feature columns, which a
                            checkpoint carries too (NULL for other data) */
    dt_tensors snapshot; /* views of vars, slots, recipe, for saving; no slab */
    dt_tensors best_set; /* views of vars and recipe: the best model's list */
    double best_loss;    /* with have_best: the best eval loss of this job, at best_step */
    int64_t best_step;
    /* Early stopping (job->patience): the eval loss an evaluation must
     * beat to count as a gain (with have_mark), the evaluations since the
     * last gain, and whether the ps tasks were told to stop training. */
    double gain_mark;
    int64_t final_step;  /* the step finish saves as final (-1 before) */
    int64_t ckpt_step;   /* the latest checkpoint's of this job at start, with ckpt_evals_flat */
    int ckpt_evals_flat; /* its evals_without_gain (resolve_job_id reads its header) */
    int have_best;
    int have_mark;
    int evals_flat;
    int stopped_early;
    dt_summary_writer *summary; /* NULL while no event file could be opened */
    int64_t summaries_dropped;  /* since the last write that succeeded */
    double summary_logged;      /* when a drop was last logged */
    int lock_fd;                /* the log dir's lock */
    dev_t log_dir_dev;          /* the locked log dir, to notice it vanish or change */
    ino_t log_dir_ino;
    double log_dir_checked;
    int log_dir_lost;      /* noticed gone, not yet recreated */
    double log_dir_logged; /* when a failure to recreate it was last logged */
    double next_save;      /* when the periodic checkpoint is due */
    double save_backoff;   /* seconds until a failed one is tried again */
    dt_dataset *eval;      /* held-out set, or NULL */
    /* A sparse model's held-out set (rows 0 when none), scored by a model
     * of the chief's own with the rows its ids pull from the ps tasks. */
    dt_sparse_set eval_set;
    dt_sparse_model *eval_model;
    dt_sparse_scorer eval_scorer;
    int64_t last_saved_step;
    double summary_t;     /* when the last summaries were written (the start, before any) */
    int64_t summary_step; /* their global step */
    int64_t staleness_seen[DT_STALENESS_BUCKETS]; /* counts already summarized */
    int64_t last_global_step;                     /* highest global step seen */
    int64_t last_pulled_step;                     /* step of the values in the worker's vars */
    int num_workers;
    int eval_far_above;     /* the last eval was far above the training loss: said */
    int summarized;         /* summaries were written (or tried) by this process */
    char *gone_logged;      /* (num_workers) a worker's failure was logged */
    double workers_checked; /* when ps 0 was last asked about the workers */
    /* ps 0's Status as last read (once a second, watch_workers), and
     * whether its staleness counts await a summary. */
    dt_msg_status_resp status;
    int status_unsummarized;
    /* The model's tables: what Create carries, and each one's rows of the
     * checkpoint last restored (ids, values, slots; empty: none), which a
     * Create of restored tasks sends after it. */
    dt_msg_table tables[DT_MAX_TABLES];
    dt_tensors table_rows[DT_MAX_TABLES];
} chief;

static void save_job_id(chief *c);

/* ---- slots ------------------------------------------------------------- */

/* One tensor per variable and slot, shaped like the variable, at the
 * slot's initial value; and the snapshot list (vars then slots). */
static int init_slots(chief *c, dt_err *err) {
    const dt_tensors *vars = dt_worker_vars(c->w);
    const dt_optim_config *o = &c->job->optim;
    int nslots = dt_optim_num_slots(o), n = vars->count * nslots;
    dt_tensor *specs = dt_calloc((size_t)(n ? n : 1), sizeof *specs);
    if (!specs) return dt_err_set(err, DT_ENOMEM, "chief: out of memory");
    int rc = 0;
    for (int i = 0; i < vars->count; i++)
        for (int s = 0; s < nslots; s++) {
            dt_tensor *t = &specs[i * nslots + s];
            *t = vars->items[i];
            t->data = NULL;
            if (snprintf(t->name, sizeof t->name, "%s/%s", vars->items[i].name,
                         dt_optim_slot_name(o, s)) >= (int)sizeof t->name)
                rc = dt_err_set(err, DT_EINVAL, "chief: variable %s: name too long for its slots",
                                vars->items[i].name);
        }
    if (rc == 0) rc = dt_tensors_init(&c->slots, specs, n, err);
    free(specs);
    if (rc < 0) return rc;
    for (int k = 0; k < c->slots.count; k++) {
        float *x = c->slots.items[k].data, init = dt_optim_slot_init(o, k % (nslots ? nslots : 1));
        for (int64_t e = 0; e < dt_tensor_numel(&c->slots.items[k]); e++)
            x[e] = init;
    }
    return 0;
}

/* What a checkpoint carries beside the variables, so that it can be scored
 * and resumed with no job file and no training file (safetensors.h,
 * checkpoint.h): the job config, a csv training file's feature names, and
 * the statistics the chief's data was standardized with (every worker
 * computes the same ones, over the whole training file). */
static int init_recipe(chief *c, dt_err *err) {
    int rc = dt_job_to_json(c->job, &c->job_json, err);
    if (rc < 0) return dt_err_wrap(err, rc, "chief");
    dt_data_needs needs;
    dt_model_data_needs(&c->job->model, &needs);
    rc = dt_data_feature_names(&c->job->data, &needs, c->job->data.train_data, 1, &c->feature_names,
                               err);
    if (rc < 0) return dt_err_wrap(err, rc, "chief");
    if (!dt_worker_data(c->w)) return 0; /* a sparse model: its data is not scaled */
    dt_data_stats st;
    dt_data_stats_of(dt_worker_data(c->w), &st);
    if (st.num_features == 0) return 0;
    if (c->job->data.scale_chosen) /* said once, as the change it is */
        dt_log(DT_LOG_INFO,
               "chief: standardizing the %lld features of %s (\"scale\" defaults to it for a "
               "dense model on csv or IDX data; the statistics go in the checkpoint for eval and "
               "predict; \"scale\": \"none\" turns it off)",
               (long long)st.num_features, c->job->data.train_data);
    dt_tensor specs[2] = {{.name = DT_CKPT_SCALE_MEAN}, {.name = DT_CKPT_SCALE_STD}};
    for (int i = 0; i < 2; i++) {
        specs[i].dtype = DT_DTYPE_F64;
        specs[i].ndim = 1;
        specs[i].shape[0] = st.num_features;
    }
    if ((rc = dt_tensors_init(&c->recipe, specs, 2, err)) < 0) return rc;
    memcpy(c->recipe.items[0].data, st.mean, c->recipe.items[0].nbytes);
    memcpy(c->recipe.items[1].data, st.std, c->recipe.items[1].nbytes);
    return 0;
}

/* A list of views of parts[0..n), in order; no slab. */
static int views_of(dt_tensors *out, const dt_tensors *const *parts, int n, dt_err *err) {
    out->count = 0;
    for (int p = 0; p < n; p++)
        out->count += parts[p]->count;
    out->items = dt_calloc((size_t)out->count + 1, sizeof *out->items);
    if (!out->items) return dt_err_set(err, DT_ENOMEM, "chief: out of memory");
    int k = 0;
    for (int p = 0; p < n; p++) {
        if (parts[p]->count == 0) continue; /* an empty set's items may be NULL */
        memcpy(out->items + k, parts[p]->items, sizeof(dt_tensor) * (size_t)parts[p]->count);
        k += parts[p]->count;
    }
    return 0;
}

/* The lists a checkpoint is written from (vars, then slots, then recipe)
 * and the best model's (vars and recipe: a model to serve). */
static int init_snapshot(chief *c, dt_err *err) {
    const dt_tensors *parts[3] = {dt_worker_vars(c->w), &c->slots, &c->recipe};
    const dt_tensors *best[2] = {dt_worker_vars(c->w), &c->recipe};
    int rc = views_of(&c->snapshot, parts, 3, err);
    return rc < 0 ? rc : views_of(&c->best_set, best, 2, err);
}

/* The views' variables at where the worker's values are now: with
 * pipeline_push the worker swaps its values' slab with the one a push
 * brought back, each step, so views taken once would save the other. */
static void views_follow_vars(chief *c) {
    const dt_tensors *vars = dt_worker_vars(c->w);
    memcpy(c->snapshot.items, vars->items, sizeof(dt_tensor) * (size_t)vars->count);
    memcpy(c->best_set.items, vars->items, sizeof(dt_tensor) * (size_t)vars->count);
}

/* ---- checkpoints ------------------------------------------------------- */

typedef struct {
    chief *c;
    dt_ps_reply reply;
} snapshot_pull;

static int do_snapshot_pull(void *arg, dt_err *err) {
    snapshot_pull *sp = arg;
    chief *c = sp->c;
    return dt_ps_client_pull(dt_worker_client(c->w), dt_worker_vars(c->w), &c->slots, 0, &sp->reply,
                             err);
}

/* Rows a page of table t carries: TABLE_PAGE_BYTES of ids, values and
 * slots, 1 to TABLE_PAGE_ROWS. */
static int64_t page_rows(const dt_table_config *t) {
    const int64_t row_bytes = 8 + 4 * (int64_t)t->dim * (1 + t->num_slots);
    const int64_t rows = TABLE_PAGE_BYTES / row_bytes;
    return rows < 1 ? 1 : rows > TABLE_PAGE_ROWS ? TABLE_PAGE_ROWS : rows;
}

/* Writes the chief's vars and slots as they are, at global_step, and a
 * sparse model's table as the ps tasks hold it while it is read: page by
 * page from each task, straight to files in the log dir and from them into
 * the checkpoint, so the chief holds a page per task, never the table (the
 * file is the one a save of the whole table in memory writes). Training
 * goes on meanwhile, as it does while the dense variables are pulled: a
 * row pushed first during the save is in it when its id is above what its
 * task has sent so far (ps_client.h has the rule). */
static void free_rows(dt_safetensors_rows **rows, int nrows) {
    while (nrows > 0)
        dt_safetensors_rows_free(rows[--nrows]);
}

/* Every table's rows as the ps tasks hold them, streamed page by page into
 * files in the log dir (with_slots: the optimizer's slots too): *nrows
 * writers into rows, none for a table no task holds a row of. On failure
 * none is left. */
static int export_tables(chief *c, int with_slots, dt_safetensors_rows **rows, int *nrows,
                         dt_err *err) {
    const dt_table_config *t;
    const int ntables = dt_worker_tables(c->w, &t);
    int rc = 0;
    *nrows = 0;
    if (ntables > 0 && (rc = dt_fileio_mkdir_p(c->job->log_dir, err)) < 0) return rc;
    for (int i = 0; i < ntables; i++) {
        rc = dt_ps_client_sparse_save(dt_worker_client(c->w), &t[i], with_slots,
                                      (int)page_rows(&t[i]), c->job->log_dir, &rows[*nrows], err);
        if (rc < 0) {
            free_rows(rows, *nrows);
            *nrows = 0;
            return dt_err_wrap(err, rc, "chief: saving table %s", t[i].name);
        }
        if (rows[*nrows]) (*nrows)++; /* NULL: no task holds a row of it */
    }
    return 0;
}

static int write_checkpoint(chief *c, int64_t global_step, dt_err *err) {
    /* Once early stopping held the step, a periodic save may already have
     * written the final one, without the mark of the end: written again. */
    const int ends_early = c->stopped_early && global_step == c->final_step;
    if (global_step == c->last_saved_step && !ends_early) return 0;
    save_job_id(c);
    views_follow_vars(c);
    const double t0 = dt_now_secs();
    dt_safetensors_rows *rows[DT_MAX_TABLES];
    int nrows = 0;
    int rc = export_tables(c, 1, rows, &nrows, err);
    if (rc < 0) return rc;
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.global_step = global_step;
    meta.max_steps = c->create.max_steps; /* the evaluator knows the last one by it */
    if (ends_early) {
        /* The job ends here: every reader of the end (the evaluator, a
         * restarted ps or chief) sees its last checkpoint at max_steps. */
        meta.max_steps = global_step;
        meta.stopped_early = 1;
    }
    if (c->job->patience > 0) meta.evals_without_gain = c->evals_flat;
    meta.job = c->job_json;
    meta.feature_names = c->feature_names;
    snprintf(meta.model, sizeof meta.model, "%s", c->model);
    snprintf(meta.job_id, sizeof meta.job_id, "%s", c->job_id);
    char path[DT_PATH_MAX + 64];
    const int keep = c->job->max_to_keep;
    rc = nrows > 0 ? dt_ckpt_save_rows_in_dir(c->job->log_dir, &c->snapshot, rows, nrows, &meta,
                                              keep, path, sizeof path, err)
                   : dt_ckpt_save_in_dir(c->job->log_dir, &c->snapshot, &meta, keep, path,
                                         sizeof path, err);
    free_rows(rows, nrows);
    if (rc < 0) return dt_err_wrap(err, rc, "chief: checkpoint");
    c->last_saved_step = global_step;
    dt_train_metrics_saved(global_step, dt_now_secs() - t0);
    const dt_log_field f[] = {DT_LOG_INT("global_step", global_step), DT_LOG_STR("path", path)};
    dt_log_kv(DT_LOG_INFO, f, 2, "chief: saved %s (global_step %lld)", path,
              (long long)global_step);
    return 0;
}

/* Pulls variables and slots in one round, then saves them. */
static int save(chief *c, dt_err *err) {
    snapshot_pull sp = {.c = c};
    int rc = do_snapshot_pull(&sp, err);
    if (rc < 0) return rc;
    c->have_slots = 1;
    return write_checkpoint(c, sp.reply.global_step, err);
}

/* A job found complete saves nothing more, so no save would apply
 * retention again: apply it once now, in case a chief killed mid-save left
 * files behind. Failing that costs only disk space. */
static void tidy_log_dir(const chief *c) {
    dt_err tidy_err;
    dt_err_clear(&tidy_err);
    if (dt_ckpt_retain(c->job->log_dir, c->job->max_to_keep, &tidy_err) < 0)
        dt_log(DT_LOG_WARN, "chief: tidying %s: %s", c->job->log_dir, tidy_err.msg);
}

/* Copies the tensors of a loaded checkpoint called like those of dst,
 * matching dtype and shape. Returns how many were found. */
static int adopt(const dt_tensors *loaded, dt_tensors *dst, const char *path, dt_err *err) {
    int found = 0;
    for (int i = 0; i < dst->count; i++) {
        dt_tensor *v = &dst->items[i];
        const dt_tensor *t = dt_tensors_find(loaded, v->name);
        if (!t) continue;
        if (t->dtype != v->dtype || t->ndim != v->ndim || t->nbytes != v->nbytes ||
            memcmp(t->shape, v->shape, sizeof(int64_t) * (size_t)v->ndim) != 0)
            return dt_err_set(err, DT_EINVAL, "%s: %s has another dtype or shape than this model's",
                              path, v->name);
        memcpy(v->data, t->data, v->nbytes);
        found++;
    }
    return found;
}

/* Resuming says what it does: the checkpoint's job (its "job" metadata)
 * against this one. Another model is a configuration error; any other
 * field that changed (optimizer, learning rate, max_steps, ...) is listed
 * in one line and this job's value applies from the restored step on, as a
 * TF Estimator resumed with new hyperparameters would. A checkpoint with
 * no job (an older file) or one this build cannot read is only noted. */
static int compare_resumed(const chief *c, const char *path, const dt_safetensors_meta *meta,
                           dt_err *err) {
    if (!meta->job) return 0;
    dt_job was;
    dt_job_defaults(&was);
    was.data.scale = DT_SCALE_NONE; /* as predict reads a job saved without "scale" */
    dt_err parse_err;
    dt_err_clear(&parse_err);
    char source[DT_PATH_MAX + 128], diff[DT_ERR_MSG_MAX];
    snprintf(source, sizeof source, "%s: __metadata__ job", path);
    if (dt_job_parse(meta->job, source, &was, &parse_err) < 0) {
        dt_log(DT_LOG_WARN, "chief: %s; its job is not compared with this one", parse_err.msg);
        return 0;
    }
    if (dt_job_diff(&was, c->job, dt_job_model_fields, diff, sizeof diff) > 0)
        return dt_err_set(err, DT_ECONFIG,
                          "chief: %s holds another model than this job's: %s (checkpoint -> "
                          "job); give this job a new log_dir, or the old values back",
                          path, diff);
    if (dt_job_diff(&was, c->job, NULL, diff, sizeof diff) > 0)
        dt_log(DT_LOG_INFO,
               "chief: resuming %s (global_step %lld) with a changed job, this job's values "
               "apply from now on: %s",
               path, (long long)meta->global_step, diff);
    return 0;
}

/* Every table's rows in a loaded checkpoint: their tensors ("<table>/ids",
 * "/values" and the slots it has) copied into c->table_rows for the
 * Create that follows; a table with none (no row yet) leaves its own
 * empty. The rows are checked by each ps task as it imports them. */
static int keep_table_rows(chief *c, const dt_tensors *loaded, dt_err *err) {
    const dt_table_config *tables;
    const int ntables = dt_worker_tables(c->w, &tables);
    for (int k = 0; k < ntables; k++) {
        const dt_table_config *t = &tables[k];
        dt_tensors_deinit(&c->table_rows[k]);
        dt_tensor specs[2 + DT_OPTIM_MAX_SLOTS];
        const dt_tensor *found[2 + DT_OPTIM_MAX_SLOTS];
        int n = 0;
        for (int i = 0; i < 2 + t->num_slots; i++) {
            char name[DT_TENSOR_NAME_MAX + 32];
            snprintf(name, sizeof name, "%s/%s", t->name,
                     i == 0   ? "ids"
                     : i == 1 ? "values"
                              : t->slot_names[i - 2]);
            const dt_tensor *x = dt_tensors_find(loaded, name);
            if (!x) continue;
            found[n] = x;
            specs[n++] = *x;
        }
        if (n == 0) continue;
        int rc = dt_tensors_init(&c->table_rows[k], specs, n, err);
        if (rc < 0) return rc;
        for (int i = 0; i < n; i++)
            memcpy(c->table_rows[k].items[i].data, found[i]->data, found[i]->nbytes);
    }
    return 0;
}

static void drop_table_rows(chief *c) {
    for (int k = 0; k < DT_MAX_TABLES; k++)
        dt_tensors_deinit(&c->table_rows[k]);
}

/* Whether a restore has rows to send (Create's tables_pending). */
static int have_table_rows(const chief *c) {
    for (int k = 0; k < DT_MAX_TABLES; k++)
        if (c->table_rows[k].count > 0) return 1;
    return 0;
}

/* Sends table k's restored rows to the ps tasks flagged in only (NULL:
 * all), a page at a time; last: its last page ends their restore. */
static int import_table(chief *c, int k, int last, const int *only, dt_err *err) {
    const dt_tensors *rows = &c->table_rows[k];
    const dt_table_config *tables;
    (void)dt_worker_tables(c->w, &tables);
    const dt_table_config *t = &tables[k];
    int64_t n = rows->items[0].shape[0]; /* ids first, then values and slots (n, D) */
    const int64_t per_page = page_rows(t);
    int64_t sent = 0;
    int rc = 0;
    for (int64_t first = 0; first < n && rc == 0; first += per_page) {
        int64_t m = n - first < per_page ? n - first : per_page;
        dt_tensor page[2 + DT_OPTIM_MAX_SLOTS];
        for (int i = 0; i < rows->count; i++) {
            const dt_tensor *x = &rows->items[i];
            size_t row_bytes = x->nbytes / (size_t)n;
            page[i] = *x;
            page[i].shape[0] = m;
            page[i].data = (char *)x->data + row_bytes * (size_t)first;
            page[i].nbytes = row_bytes * (size_t)m;
        }
        rc = dt_ps_client_sparse_import(dt_worker_client(c->w), t->name, page, rows->count,
                                        last && first + m == n, only, err);
        sent += m;
    }
    if (rc < 0) return dt_err_wrap(err, rc, "chief: restoring table %s", t->name);
    dt_log(DT_LOG_INFO, "chief: restored %lld rows of table %s", (long long)sent, t->name);
    return 0;
}

/* Every table's restored rows, the last page of the last ending the
 * restore. */
static int import_tables(chief *c, const int *only, dt_err *err) {
    int last = DT_MAX_TABLES - 1;
    while (last >= 0 && c->table_rows[last].count == 0)
        last--;
    for (int k = 0; k <= last; k++) {
        int rc = c->table_rows[k].count > 0 ? import_table(c, k, k == last, only, err) : 0;
        if (rc < 0) return rc;
    }
    return 0;
}

/* Loads the latest checkpoint into the chief's vars (and slots when it has
 * them all). 1 found, 0 none. */
static int load_latest(chief *c, int64_t *global_step, dt_err *err) {
    dt_tensors loaded;
    memset(&loaded, 0, sizeof loaded);
    dt_safetensors_meta meta;
    char path[DT_PATH_MAX + 64];
    int found = dt_ckpt_restore_latest(c->job->log_dir, &loaded, &meta, path, sizeof path, err);
    if (found <= 0) return found;
    int rc = compare_resumed(c, path, &meta, err);
    dt_safetensors_meta_deinit(&meta);
    if (rc < 0) {
        dt_tensors_deinit(&loaded);
        return rc;
    }
    dt_tensors *vars = dt_worker_vars(c->w);
    rc = adopt(&loaded, vars, path, err);
    if (rc >= 0 && rc < vars->count)
        rc = dt_err_set(err, DT_EINVAL,
                        "%s: %d of this model's %d variables missing (was it "
                        "written for another model?)",
                        path, vars->count - rc, vars->count);
    int nslots = rc < 0 ? 0 : adopt(&loaded, &c->slots, path, err);
    if (rc >= 0 && nslots >= 0) rc = keep_table_rows(c, &loaded, err);
    dt_tensors_deinit(&loaded);
    if (rc < 0) return rc;
    if (nslots < 0) return nslots;
    c->have_slots = nslots == c->slots.count;
    if (!c->have_slots && c->slots.count > 0)
        dt_log(DT_LOG_WARN, "chief: %s has no %s slots; they start from their initial values", path,
               dt_optim_name(c->job->optim.kind));
    *global_step = meta.global_step;
    dt_log(DT_LOG_INFO, "chief: restored %s (global_step %lld)", path, (long long)meta.global_step);
    return 1;
}

/* ---- start-up and recovery ---------------------------------------------- */

typedef struct {
    chief *c;
    int ready[DT_MAX_PS];
    int num_ready;
    int foreign_ps;                 /* a ready ps holding another job's model, or -1 */
    char foreign[DT_MSG_MODEL_MAX]; /* what it was created with */
    int done;
    int64_t global_step; /* the highest of the ready tasks' */
    /* Each task's Status: whether it says the job is done, at which step,
     * and the job id it knows (empty: none). */
    int said_done[DT_MAX_PS];
    int64_t step[DT_MAX_PS];
    char job_id[DT_MAX_PS][DT_JOB_ID_MAX];
} census;

/* Asks every ps for its status; fails while any is unreachable. */
static int take_census(void *arg, dt_err *err) {
    census *cs = arg;
    dt_ps_client *pc = dt_worker_client(cs->c->w);
    cs->num_ready = 0;
    cs->done = 0;
    cs->global_step = 0;
    cs->foreign_ps = -1;
    for (int p = 0; p < dt_ps_client_num_ps(pc); p++) {
        dt_msg_status_resp st;
        int rc = dt_ps_client_status(pc, p, &st, err);
        if (rc < 0) return rc;
        cs->ready[p] = st.ready;
        cs->num_ready += st.ready;
        cs->done |= st.done;
        cs->said_done[p] = st.done;
        cs->step[p] = st.global_step;
        snprintf(cs->job_id[p], sizeof cs->job_id[p], "%s", st.job_id);
        if (st.ready && st.global_step > cs->global_step) cs->global_step = st.global_step;
        if (st.ready && cs->foreign_ps < 0 && strcmp(st.model, cs->c->job_desc) != 0) {
            cs->foreign_ps = p;
            snprintf(cs->foreign, sizeof cs->foreign, "%s", st.model);
        }
    }
    return 0;
}

/* A ps that holds this job's model but another job id than a chief that
 * made its id just now (no id file, no checkpoint: its log dir was
 * emptied under live ps tasks) is this job's: the chief takes the ps's id.
 * Any other difference of id makes the ps foreign (cs->foreign_ps). */
static void match_job_id(chief *c, census *cs) {
    dt_ps_client *pc = dt_worker_client(c->w);
    for (int p = 0; p < dt_ps_client_num_ps(pc) && cs->foreign_ps < 0; p++) {
        if (!cs->ready[p] || !cs->job_id[p][0] || strcmp(cs->job_id[p], c->job_id) == 0) continue;
        if (c->job_id_new) {
            dt_log(DT_LOG_WARN,
                   "chief: %s holds this job's model under job id %s and the log dir %s has "
                   "no job id yet: taking %s as this job's id",
                   dt_ps_client_name(pc, p), cs->job_id[p], c->job->log_dir, cs->job_id[p]);
            snprintf(c->job_id, sizeof c->job_id, "%s", cs->job_id[p]);
            dt_log_set_job_id(c->job_id);
            c->job_id_new = 0;
            c->job_id_saved = 0;
            save_job_id(c);
            continue;
        }
        cs->foreign_ps = p;
        snprintf(cs->foreign, sizeof cs->foreign, "job id %s", cs->job_id[p]);
    }
}

/* The ps tasks that say the job is done must say it of this job: one that
 * knows another job id (or none), or whose global step is below this log
 * dir's latest checkpoint, speaks of another job or of a past it lost, and
 * ending the job on its word would save its values (or none) as this
 * job's final model. DT_EEXIST naming both ids; 0 when all agree. */
static int check_done(const chief *c, const census *cs, dt_err *err) {
    dt_ps_client *pc = dt_worker_client(c->w);
    int64_t latest = dt_ckpt_latest_step(c->job->log_dir);
    for (int p = 0; p < dt_ps_client_num_ps(pc); p++) {
        if (!cs->said_done[p]) continue;
        const char *theirs = cs->job_id[p][0] ? cs->job_id[p] : "(none)";
        if (strcmp(cs->job_id[p], c->job_id) != 0)
            return dt_err_set(err, DT_EEXIST,
                              "chief: %s says the job is done (global_step %lld), but of job %s; "
                              "this job is %s (log dir %s): refusing to end it or save a final "
                              "model (the ps learned the end of another job: restart it for "
                              "this one, or give this job its own ps tasks)",
                              dt_ps_client_name(pc, p), (long long)cs->step[p], theirs, c->job_id,
                              c->job->log_dir);
        if (cs->step[p] < latest)
            return dt_err_set(err, DT_EEXIST,
                              "chief: %s says job %s is done at global_step %lld, below this "
                              "job's latest checkpoint in %s (job %s, global_step %lld): refusing "
                              "to end it or save a final model",
                              dt_ps_client_name(pc, p), theirs, (long long)cs->step[p],
                              c->job->log_dir, c->job_id, (long long)latest);
    }
    return 0;
}

/* Creates the model on the ps tasks flagged in only (NULL: all). */
static int create(chief *c, int64_t global_step, const int *only, dt_err *err) {
    c->create.vars = dt_worker_vars(c->w);
    c->create.slots = c->have_slots ? &c->slots : NULL;
    c->create.global_step = global_step;
    c->create.tables_pending = have_table_rows(c);
    int rc = dt_ps_client_create(dt_worker_client(c->w), &c->create, only, err);
    if (rc == 0 && c->create.tables_pending) rc = import_tables(c, only, err);
    /* gRPC's words for a request over the ps's cap, which a ps derives from
     * its own job config: say which setting disagrees. */
    if (rc < 0 && strstr(err->msg, "Received message larger than max"))
        dt_err_wrap(err, rc,
                    "the model is larger than a ps accepts (a ps sizes its message cap from its "
                    "own job config: start every role with the same --config and --set, or give "
                    "the ps --max-message-mb)");
    return rc;
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
    if (!found) {
        dt_log(DT_LOG_WARN, "chief: no checkpoint yet; restoring from the values last pulled");
        c->have_slots = 0;
        drop_table_rows(c); /* the lost task's rows start over */
    }
    /* The global step never goes backwards. */
    if (c->last_global_step > step) step = c->last_global_step;
    if (cs->global_step > step) step = cs->global_step;
    /* Workers may have seen the lost ps a little ahead of everything the
     * chief knows: let their seen_step raise it that far, and no further,
     * so no caller can move the step by claiming to have seen more. */
    c->create.step_ceiling = step + c->catch_up_steps;
    return create(c, step, only, err);
}

static int on_not_ready(void *ctx, dt_err *err) {
    chief *c = ctx;
    census cs = {.c = c};
    int rc = take_census(&cs, err);
    if (rc < 0) return 0; /* still unreachable: let the retry loop wait */
    if (cs.num_ready == dt_ps_client_num_ps(dt_worker_client(c->w))) return 0;
    return recover(c, &cs, err);
}

/* What every Create carries besides the values: from the job, with the
 * defaults that depend on the cluster and the data filled in. */
static int creation_params(chief *c, const dt_cluster *cluster, dt_err *err) {
    const dt_job *job = c->job;
    dt_ps_model *m = &c->create;
    m->optim = job->optim;
    m->model = c->job_desc;
    m->job_id = c->job_id;
    m->skip_nonfinite = job->consistency.nonfinite == DT_NONFINITE_SKIP;
    m->max_steps = job->max_steps;
    c->catch_up_steps = (int64_t)DT_PS_CATCH_UP_STEPS * cluster->num_workers;
    const dt_consistency_config *jc = &job->consistency;
    dt_consistency *k = &m->consistency;
    k->mode = jc->mode;
    k->replicas_to_aggregate =
        jc->replicas_to_aggregate ? jc->replicas_to_aggregate : cluster->num_workers;
    k->total_num_replicas = jc->total_num_replicas ? jc->total_num_replicas : cluster->num_workers;
    k->staleness = jc->staleness;
    k->timeout_ms = jc->sync_timeout_secs * 1000;
    if (k->mode == DT_MODE_SYNC && (k->replicas_to_aggregate > k->total_num_replicas ||
                                    k->total_num_replicas > cluster->num_workers))
        return dt_err_set(err, DT_EINVAL,
                          "job: sync needs replicas_to_aggregate (%d) <= "
                          "total_num_replicas (%d) <= workers (%d)",
                          k->replicas_to_aggregate, k->total_num_replicas, cluster->num_workers);
    if (m->max_steps > 0 && dt_worker_examples(c->w) > 0) {
        /* A file job that sets max_steps: that decides its end, however
         * many passes over each shard it makes; said, since "epochs" then
         * counts for nothing. */
        const int64_t n = dt_worker_examples(c->w);
        const double rows = (double)n / cluster->num_workers;
        const double steps_per_worker =
            (double)m->max_steps / (k->mode == DT_MODE_SYNC ? 1 : cluster->num_workers);
        dt_log(DT_LOG_INFO,
               "chief: max_steps %lld ends the job: about %.3g passes over each worker's %.0f "
               "rows at batch_size %d (\"epochs\" counts only when max_steps is 0)",
               (long long)m->max_steps, steps_per_worker * job->batch_size / rows, rows,
               job->batch_size);
    }
    char epochs_why[160];
    snprintf(epochs_why, sizeof epochs_why,
             " (\"epochs\" left out: about %lld examples' worth, at most %d passes; set it to "
             "choose)",
             (long long)dt_job_epoch_examples(job), DT_JOB_MAX_AUTO_EPOCHS);
    if (m->max_steps == 0) { /* epochs of a file: its size is known now */
        int rc = dt_job_steps_for_shards(job, dt_worker_examples(c->w), cluster->num_workers,
                                         &m->max_steps, err);
        if (rc < 0) return rc;
        /* A sync step takes replicas_to_aggregate batches, one a worker:
         * the epochs' batches make that many times fewer steps. */
        const int per_step = k->mode == DT_MODE_SYNC ? k->replicas_to_aggregate : 1;
        m->max_steps = (m->max_steps + per_step - 1) / per_step;
        dt_log(DT_LOG_INFO,
               "chief: %d epochs of %lld examples in %d shard(s), %d batch(es) a step: "
               "max_steps %lld%s",
               job->epochs, (long long)dt_worker_examples(c->w), cluster->num_workers, per_step,
               (long long)m->max_steps, job->epochs_chosen ? epochs_why : "");
    }
    const dt_table_config *t;
    const int ntables = dt_worker_tables(c->w, &t);
    for (int i = 0; i < ntables; i++) {
        dt_msg_table *mt = &c->tables[i];
        snprintf(mt->name, sizeof mt->name, "%s", t[i].name);
        mt->rows = t[i].rows;
        mt->dim = t[i].dim;
        mt->init = (int)t[i].init;
        mt->init_scale = t[i].init_scale;
        mt->seed = t[i].seed;
    }
    if (ntables > 0) {
        m->tables = c->tables;
        m->num_tables = ntables;
        m->eviction = job->eviction;
    }
    dt_worker_set_max_steps(c->w, m->max_steps);
    int rc = dt_job_schedule(job, &m->schedule, err);
    if (rc < 0) return rc;
    if (m->schedule.kind == DT_LR_COSINE) { /* over the whole job, however its length came */
        m->schedule.decay_steps = m->max_steps;
        dt_log(DT_LOG_INFO,
               "chief: the learning rate decays from %g to %g along a cosine over the %lld "
               "steps%s",
               m->optim.learning_rate, m->optim.learning_rate * m->schedule.alpha,
               (long long)m->max_steps,
               job->schedule_chosen ? " (\"lr_schedule\" defaults to it for a dense model on "
                                      "csv or IDX data; \"constant\" keeps the rate)"
                                    : "");
    }
    /* The short fields first: a very long model description is what a cut
     * drops, the same way on every run of this job. */
    int n =
        snprintf(c->job_desc, sizeof c->job_desc, "optimizer=%s lr=%g max_steps=%lld mode=%s %s",
                 dt_optim_name(m->optim.kind), m->optim.learning_rate, (long long)m->max_steps,
                 dt_mode_name(jc->mode), c->model);
    if (n >= (int)sizeof c->job_desc)
        dt_log(DT_LOG_DEBUG, "chief: job description cut to %zu bytes", sizeof c->job_desc - 1);
    return 0;
}

/* Says why a job run again on its finished log dir ends at once: its
 * latest checkpoint (at step) is at or past max_steps. */
static void nothing_to_train(const chief *c, const char *why, int64_t step) {
    char at[96];
    if (step == c->create.max_steps)
        snprintf(at, sizeof at, "at max_steps %lld", (long long)step);
    else
        snprintf(at, sizeof at, "at global_step %lld, past max_steps %lld", (long long)step,
                 (long long)c->create.max_steps);
    dt_log(DT_LOG_INFO,
           "chief: %sthe checkpoint is %s: nothing to train; raise max_steps or use a new log_dir",
           why, at);
}

/* The step at which this log dir's job stopped early (its latest
 * checkpoint says so), else -1. */
static int64_t stopped_early_at(const chief *c) {
    dt_safetensors_meta m;
    memset(&m, 0, sizeof m);
    dt_err err;
    dt_err_clear(&err);
    if (dt_ckpt_latest_meta(c->job->log_dir, &m, NULL, 0, &err) <= 0) return -1;
    dt_safetensors_meta_deinit(&m);
    return m.stopped_early ? m.global_step : -1;
}

/* Puts a model on the ps tasks: the one they hold, a recovery, the latest
 * checkpoint or a fresh one. 0: train it; 1: the ps tasks say the job is
 * done; 2: the log dir's latest checkpoint is already at max_steps. */
static int start_model(chief *c, const atomic_int *stop, dt_err *err) {
    census cs = {.c = c};
    int rc = dt_worker_retry(c->w, "every ps to answer", take_census, &cs, NULL, stop, err);
    if (rc < 0) return rc;
    int num_ps = dt_ps_client_num_ps(dt_worker_client(c->w));
    match_job_id(c, &cs);
    if (cs.foreign_ps >= 0)
        /* Training it would send this job's gradients into someone else's
         * variables, or train values a stranger planted before us. */
        return dt_err_set(err, DT_EEXIST,
                          "chief: %s holds a model this job did not create: it has \"%s\" "
                          "(job id %s), this job is \"%s\" (job id %s); refusing to train it "
                          "(stop the other job, or give this one its own ps tasks)",
                          dt_ps_client_name(dt_worker_client(c->w), cs.foreign_ps), cs.foreign,
                          cs.job_id[cs.foreign_ps][0] ? cs.job_id[cs.foreign_ps] : "(none)",
                          c->job_desc, c->job_id);
    int64_t ended = stopped_early_at(c);
    if (ended >= 0) {
        dt_log(DT_LOG_INFO,
               "chief: the job stopped early at global_step %lld (its final checkpoint says so): "
               "nothing to train; use a new log_dir to train it again",
               (long long)ended);
        return 2;
    }
    int64_t latest = cs.done && cs.num_ready < num_ps ? dt_ckpt_latest_step(c->job->log_dir) : -1;
    if (latest >= c->create.max_steps) {
        /* A ps restarted after the end says "done" with no model to give:
         * the final one is the log dir's. */
        nothing_to_train(c, "the ps tasks say the job is done, and ", latest);
        return 2;
    }
    if (cs.done && (rc = check_done(c, &cs, err)) < 0) return rc;
    if (cs.done) return 1;
    if (cs.num_ready == num_ps) {
        c->last_global_step = cs.global_step;
        dt_log(DT_LOG_INFO,
               "chief: ps already holds the model (global_step %lld); not "
               "re-initializing",
               (long long)cs.global_step);
        return 0;
    }
    if (cs.num_ready > 0) return recover(c, &cs, err);
    int64_t step = 0;
    int found = load_latest(c, &step, err);
    if (found < 0) return found;
    if (found && step >= c->create.max_steps) {
        /* Every ps is empty and the log dir holds the final model: a job
         * run again. Recreating it would only end it at once. */
        nothing_to_train(c, "", step);
        return 2;
    }
    if (!found && c->user) {
        /* A program's model, its table too (its rows start from the
         * table's initializer on the ps tasks). */
        c->user->init(c->user->ctx, dt_worker_vars(c->w));
        dt_log(DT_LOG_INFO, "chief: no checkpoint in %s; initialized %s", c->job->log_dir,
               c->model);
    } else if (!found && dt_worker_sparse_table(c->w)) {
        dt_sparse_model_config smc;
        dt_table_config table;
        if ((rc = dt_job_sparse_model(c->job, &smc, &table, err)) < 0) return rc;
        dt_sparse_model_init(&smc, c->job->seed, dt_worker_vars(c->w));
        dt_log(DT_LOG_INFO, "chief: no checkpoint in %s; initialized %s", c->job->log_dir,
               c->model);
    } else if (!found) {
        dt_model_init(&c->job->model, c->job->seed, dt_worker_vars(c->w));
        dt_log(DT_LOG_INFO, "chief: no checkpoint in %s; initialized %s", c->job->log_dir,
               c->model);
    }
    c->last_global_step = step;
    c->last_saved_step = found ? step : -1;
    return create(c, step, NULL, err);
}

/* ---- summaries and evaluation ------------------------------------------ */

static void log_summary_path(const chief *c) {
    dt_log(DT_LOG_INFO, "chief: writing summaries to %s", dt_summary_path(c->summary));
}

/* The writer to use now, or NULL with err set when none can be had. A
 * writer that could not cut a torn record off (its flush says so) is
 * replaced by a new file; a missing one (open failed, the dir was replaced)
 * is opened again. */
static dt_summary_writer *summary_writer(chief *c, dt_err *err) {
    if (c->summary && dt_summary_flush(c->summary, err) < 0) {
        dt_log(DT_LOG_WARN, "%s; starting a new event file", err->msg);
        dt_summary_close(c->summary);
        c->summary = NULL;
        dt_err_clear(err);
    }
    if (!c->summary) {
        if (dt_summary_open(c->job->log_dir, &c->summary, err) < 0) return NULL;
        log_summary_path(c);
    }
    return c->summary;
}

/* Takes the outcome of one batch of summaries; never fails, so a full disk
 * never ends training. A failed batch is dropped and counted; the first
 * drop, and then one per STORAGE_LOG_SECS, is logged, not every one. */
static void summary_outcome(chief *c, int rc, const dt_err *err) {
    if (rc == 0) {
        if (c->summaries_dropped > 0)
            dt_log(DT_LOG_INFO, "chief: summaries resumed in %s after %lld were dropped",
                   dt_summary_path(c->summary), (long long)c->summaries_dropped);
        c->summaries_dropped = 0;
        return;
    }
    double t = dt_now_secs();
    dt_train_metrics_storage_failed(0, err);
    if (++c->summaries_dropped == 1 || t - c->summary_logged >= STORAGE_LOG_SECS) {
        dt_log(DT_LOG_WARN,
               "%s; summaries dropped: %lld so far; training goes on (logged every %.0f s while "
               "this lasts)",
               err->msg, (long long)c->summaries_dropped, STORAGE_LOG_SECS);
        c->summary_logged = t;
    }
}

/* The staleness of the gradients applied since the last call, as a
 * histogram (bucket i: staleness i; the last bucket: that or more), and its
 * mean. The counts come from ps 0 and only grow there; a count below the one
 * already seen means ps 0 restarted with fresh counters, and then all it
 * holds is new. They come with the Status watch_workers reads once a
 * second, not a Status of their own each summary_steps: that was a round
 * trip to ps 0 every 10 steps by default, a tenth more calls there and an
 * eighth of a tiny model's instructions per step on both sides (a Status
 * reply is large). So staleness is summarized at most once a second. */
static int summarize_staleness(chief *c, dt_summary_writer *w, int64_t step, dt_err *err) {
    if (!c->status_unsummarized) return 0;
    c->status_unsummarized = 0;
    const dt_msg_status_resp *st = &c->status;
    int nb = st->num_staleness_counts < DT_STALENESS_BUCKETS ? st->num_staleness_counts
                                                             : DT_STALENESS_BUCKETS;
    int restarted = 0;
    for (int b = 0; b < nb; b++) /* the codec refused negative counts */
        restarted |= st->staleness_counts[b] < c->staleness_seen[b];
    double staleness[DT_STALENESS_BUCKETS];
    int64_t fresh[DT_STALENESS_BUCKETS];
    int64_t n = 0;
    double sum = 0;
    for (int b = 0; b < nb; b++) {
        staleness[b] = b;
        fresh[b] = st->staleness_counts[b] - (restarted ? 0 : c->staleness_seen[b]);
        c->staleness_seen[b] = st->staleness_counts[b];
        n += fresh[b];
        sum += (double)b * (double)fresh[b];
    }
    if (n == 0) {
        /* None applied: no histogram, and the mean would be 0/0; a job
         * whose every update is refused as not finite still says so. */
        if (!st->pushes_nonfinite && !st->updates_nonfinite) return 0;
        const char *nf_tags[] = {"pushes_nonfinite", "updates_nonfinite"};
        double nf[] = {(double)st->pushes_nonfinite, (double)st->updates_nonfinite};
        return dt_summary_scalars(w, step, nf_tags, nf, 2, err);
    }
    int rc = dt_summary_histogram_counts(w, step, "staleness", staleness, fresh, nb, err);
    if (rc < 0) return rc;
    const char *tags[] = {"staleness/mean", "pushes_dropped", "pushes_nonfinite",
                          "updates_nonfinite"};
    double scalars[] = {sum / (double)n, (double)st->pushes_dropped, (double)st->pushes_nonfinite,
                        (double)st->updates_nonfinite};
    return dt_summary_scalars(w, step, tags, scalars, 4, err);
}

/* The scorer's row source: the rows as the ps tasks hold them now. */
static int pull_eval_rows(void *ctx, const int64_t *ids, int64_t n, float *rows, dt_err *err) {
    chief *c = ctx;
    const dt_table_config *t = dt_worker_sparse_table(c->w);
    dt_ps_sparse s = {t->name, t->dim, n, ids, rows};
    dt_ps_reply reply;
    return dt_ps_client_sparse_pull(dt_worker_client(c->w), &s, &reply, err);
}

/* A sparse model's loss (and accuracy) on the held-out set: the dense
 * variables and the rows as the ps tasks hold them now, pulled one after
 * the other (the rows are not the chief's: a step's pull fetched its
 * batch's alone), *step the global step of the dense pull. A ps that
 * cannot answer now costs this evaluation, not the job: *skipped is set. */
static int evaluate_sparse(chief *c, int64_t *step, double *loss, double *accuracy, int *skipped,
                           dt_err *err) {
    *skipped = 0;
    dt_err pull_err;
    dt_err_clear(&pull_err);
    dt_ps_reply reply;
    memset(&reply, 0, sizeof reply);
    int rc =
        dt_ps_client_pull(dt_worker_client(c->w), dt_worker_vars(c->w), NULL, 0, &reply, &pull_err);
    if (rc == 0 && reply.wait)
        rc = dt_err_set(&pull_err, DT_EUNAVAILABLE, "a ps said not yet (bounded staleness)");
    if (rc == 0) {
        *step = reply.global_step;
        rc = dt_sparse_scorer_evaluate(&c->eval_scorer, &c->eval_set, loss, accuracy, &pull_err);
    }
    if (rc == 0) return 0;
    if (rc == DT_EINVAL || rc == DT_ENOMEM) /* the set or the model: a bug or a bad file */
        return dt_err_set(err, rc, "%s", pull_err.msg);
    dt_log(DT_LOG_WARN, "chief: evaluate: pulling the held-out set's rows: %s; skipped",
           pull_err.msg);
    *skipped = 1;
    return 0;
}

/* An eval loss far above the chief's own training loss (loss_watch.h) is
 * a model that diverged, or one that fits its batches and nothing else:
 * said once, until an eval comes back under. */
static void warn_eval_loss(chief *c, int64_t step, double loss) {
    const dt_loss_watch *lw = dt_worker_loss_watch(c->w);
    int far = dt_loss_watch_eval_far_above(lw, loss);
    if (far && !c->eval_far_above) {
        char hint[160];
        dt_job_divergence_hint(c->job, hint, sizeof hint);
        if (lw->ceiling > 0 && !(loss <= lw->ceiling))
            dt_log(DT_LOG_WARN,
                   "chief: eval at global_step %lld: loss %.6g is past %.6g, 100x a uniform "
                   "guess's: the model has diverged; %s",
                   (long long)step, loss, lw->ceiling, hint);
        else
            dt_log(DT_LOG_WARN,
                   "chief: eval at global_step %lld: loss %.6g is over %.0fx the training loss "
                   "%.6g (smoothed): the model does not fit the held-out data; %s",
                   (long long)step, loss, DT_LOSS_WATCH_EVAL_RATIO, lw->smoothed, hint);
    }
    c->eval_far_above = far;
}

/* The best eval loss this job's log dir records, so a restarted chief
 * keeps comparing with it. A best model of another job, or one that
 * cannot be read, is replaced at this job's first evaluation. */
static void read_best(chief *c) {
    char path[DT_PATH_MAX + 64];
    dt_safetensors_meta m;
    memset(&m, 0, sizeof m);
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_ckpt_best_meta(c->job->log_dir, &m, path, sizeof path, &err);
    if (rc == 0) return;
    if (rc > 0) dt_safetensors_meta_deinit(&m);
    if (rc > 0 && strcmp(m.job_id, c->job_id) == 0) {
        c->have_best = c->have_mark = 1;
        c->best_loss = c->gain_mark = m.eval_loss;
        c->best_step = m.global_step;
        dt_log(DT_LOG_INFO, "chief: the best model so far: global_step %lld, eval loss %.6g (%s)",
               (long long)m.global_step, m.eval_loss, path);
    } else {
        dt_log(DT_LOG_INFO, "chief: %s; the first evaluation replaces it",
               rc < 0 ? err.msg : "the log dir's best model is another job's");
    }
}

/* Early stopping's count as the latest checkpoint of this job recorded
 * it, so a restarted chief goes on counting instead of starting over (the
 * evaluations after that save are made again, or, when the ps tasks kept
 * the model, not counted: at most that many more before the stop). */
static void resume_flat(chief *c) {
    if (c->job->patience <= 0 || !c->have_mark || c->ckpt_evals_flat <= 0) return;
    c->evals_flat = c->ckpt_evals_flat;
    dt_log(DT_LOG_INFO,
           "chief: %d evaluations without a better eval loss so far (of patience %d), as the "
           "latest checkpoint (global_step %lld) records",
           c->evals_flat, c->job->patience, (long long)c->ckpt_step);
}

/* Keeps the values just evaluated (the worker's vars, at step) as the best
 * model when their eval loss is the lowest yet. A sparse model's tables
 * are read from the ps tasks now, as a checkpoint reads them (values, no
 * slots): with other workers training meanwhile, their rows may be a few
 * steps newer than the evaluation's. A failed write costs the job
 * nothing; the previous best stands and the next better one tries again. */
static void keep_best(chief *c, int64_t step, double loss) {
    if (!isfinite(loss) || (c->have_best && !(loss < c->best_loss))) return;
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.global_step = step;
    meta.max_steps = c->create.max_steps;
    meta.job = c->job_json;
    meta.feature_names = c->feature_names;
    meta.has_eval_loss = 1;
    meta.eval_loss = loss;
    snprintf(meta.model, sizeof meta.model, "%s", c->model);
    snprintf(meta.job_id, sizeof meta.job_id, "%s", c->job_id);
    dt_err err;
    dt_err_clear(&err);
    dt_safetensors_rows *rows[DT_MAX_TABLES];
    int nrows = 0;
    int rc = export_tables(c, 0, rows, &nrows, &err);
    views_follow_vars(c);
    if (rc == 0) rc = dt_ckpt_save_best(c->job->log_dir, &c->best_set, rows, nrows, &meta, &err);
    free_rows(rows, nrows);
    if (rc < 0) {
        dt_train_metrics_storage_failed(1, &err);
        dt_log(DT_LOG_WARN, "chief: best model: %s; the previous one stands", err.msg);
        return;
    }
    c->have_best = 1;
    c->best_loss = loss;
    c->best_step = step;
    dt_log(DT_LOG_DEBUG, "chief: the best model so far: global_step %lld, eval loss %.6g",
           (long long)step, loss);
}

/* Counts an evaluation for early stopping: a gain when its loss is below
 * the mark by more than a relative 1e-4 (scikit-learn's tol, made
 * scale-free: an MSE in the thousands and a log loss near 0.01 alike), so
 * a plateau's crawl does not keep a job going. */
#define GAIN_TOL 1e-4
static void count_gain(chief *c, double loss) {
    if (isfinite(loss) && (!c->have_mark || loss < c->gain_mark - GAIN_TOL * fabs(c->gain_mark))) {
        c->have_mark = 1;
        c->gain_mark = loss;
        c->evals_flat = 0;
    } else {
        c->evals_flat++;
    }
}

/* Early stopping: once job->patience evaluations in a row brought no gain,
 * the ps tasks end training (each worker is told "done" at its next call,
 * as at max_steps) and the chief's loop ends, to save the final model. A
 * ps that cannot be told now is told after the next step. */
static void stop_when_flat(chief *c, int64_t step) {
    const int patience = c->job->patience;
    if (patience <= 0 || c->stopped_early || c->evals_flat < patience) return;
    char why[256];
    snprintf(why, sizeof why,
             "early stopping: no better eval loss in %d evaluations (best %.6g, patience %d)",
             c->evals_flat, c->gain_mark, patience);
    dt_err stop_err;
    dt_err_clear(&stop_err);
    if (dt_ps_client_stop_training(dt_worker_client(c->w), why, &stop_err) < 0) {
        dt_log(DT_LOG_WARN, "chief: %s: telling the ps tasks: %s; trying again after the next step",
               why, stop_err.msg);
        return;
    }
    c->stopped_early = 1;
    dt_log(DT_LOG_INFO, "chief: %s; the job ends at global_step %lld", why, (long long)step);
}

/* Loss (and accuracy) of the current variables on the held-out set. */
static int evaluate(chief *c, int64_t step, dt_err *err) {
    if (!c->eval && c->eval_set.rows == 0) return 0;
    dt_batch all;
    memset(&all, 0, sizeof all);
    double loss = NAN, accuracy = NAN;
    int rc = 0, skipped = 0;
    if (c->eval_set.rows > 0) {
        rc = evaluate_sparse(c, &step, &loss, &accuracy, &skipped, err);
        all.rows = (int)c->eval_set.rows;
    } else {
        rc = dt_data_all(c->eval, &all, err);
        if (rc == 0)
            rc = dt_model_evaluate(dt_worker_model(c->w), dt_worker_vars(c->w), &all, &loss,
                                   &accuracy, err);
    }
    if (rc < 0) return dt_err_wrap(err, rc, "chief: evaluate");
    if (skipped) return 0;
    if (isnan(accuracy)) {
        dt_log(DT_LOG_INFO, "chief: eval at global_step %lld: loss %.6g on %d examples",
               (long long)step, loss, all.rows);
    } else {
        dt_log(DT_LOG_INFO,
               "chief: eval at global_step %lld: loss %.6g accuracy %.4f on %d "
               "examples",
               (long long)step, loss, accuracy, all.rows);
    }
    warn_eval_loss(c, step, loss);
    keep_best(c, step, loss);
    count_gain(c, loss);
    const char *tags[] = {"eval/loss", "eval/accuracy"};
    double values[] = {loss, accuracy};
    dt_err summary_err;
    dt_err_clear(&summary_err);
    dt_summary_writer *sw = summary_writer(c, &summary_err);
    int src = sw ? dt_summary_scalars(sw, step, tags, values, isnan(accuracy) ? 1 : 2, &summary_err)
                 : summary_err.code;
    summary_outcome(c, src, &summary_err);
    return 0;
}

/* A histogram of n floats under tag, as tf.summary.histogram writes one;
 * values that are not finite are left out of it and counted under
 * "<tag>/nonfinite", written only when there are any. */
static int summarize_floats(dt_summary_writer *sw, int64_t step, const char *tag,
                            const float *values, int64_t n, dt_err *err) {
    int64_t nonfinite = 0;
    int rc = dt_summary_histogram_floats(sw, step, tag, values, n, &nonfinite, err);
    if (rc < 0 || nonfinite == 0) return rc;
    char count_tag[DT_TENSOR_NAME_MAX + 16];
    snprintf(count_tag, sizeof count_tag, "%s/nonfinite", tag);
    const char *tags[] = {count_tag};
    double values_nonfinite[] = {(double)nonfinite};
    return dt_summary_scalars(sw, step, tags, values_nonfinite, 1, err);
}

/* TF's tf.summary.histogram(var.op.name, var) for every variable, with the
 * values the chief holds (those its step pulled, or with fuse_push_pull
 * those its push brought back: no extra pull), and "output": the model's
 * outputs on the step's batch (dt_model_output: predictions for linear,
 * logits for the classifiers). */
static int summarize_histograms(chief *c, dt_summary_writer *sw, int64_t step, dt_err *err) {
    const dt_tensors *vars = dt_worker_vars(c->w);
    int rc = 0;
    for (int i = 0; i < vars->count && rc == 0; i++)
        rc = summarize_floats(sw, step, vars->items[i].name, vars->items[i].data,
                              dt_tensor_numel(&vars->items[i]), err);
    const dt_model *m = dt_worker_model(c->w);
    int rows = 0;
    const float *z = m ? dt_model_output(m, &rows) : NULL;
    if (rc == 0 && z)
        rc = summarize_floats(sw, step, "output", z, (int64_t)rows * dt_model_out_cols(m), err);
    return rc;
}

/* The step's summaries: loss, rate and learning rate, the histograms, then
 * staleness. learning_rate is the rate the ps applies at this global step
 * (the job's schedule, as the ps computes it). */
static int summarize(chief *c, const dt_step_result *r, double t, dt_err *err) {
    dt_summary_writer *sw = summary_writer(c, err);
    if (!sw) return err->code;
    double dt = t - c->summary_t > 1e-9 ? t - c->summary_t : 1e-9;
    const char *tags[] = {"loss", "global_step/sec", "learning_rate"};
    double values[] = {
        r->loss, (double)(r->global_step - c->summary_step) / dt,
        dt_lr_at(&c->create.schedule, c->create.optim.learning_rate, r->global_step)};
    int rc = dt_summary_scalars(sw, r->global_step, tags, values, 3, err);
    if (rc == 0 && c->user && c->user->scalars) {
        const char *user_tags[DT_CHIEF_USER_SCALARS];
        double user_values[DT_CHIEF_USER_SCALARS];
        int n = c->user->scalars(c->user->ctx, user_tags, user_values, DT_CHIEF_USER_SCALARS);
        if (n > 0) rc = dt_summary_scalars(sw, r->global_step, user_tags, user_values, n, err);
    }
    const char *htag = NULL;
    const float *hvalues = NULL;
    int64_t hn = 0;
    for (int i = 0; rc == 0 && c->user && c->user->histogram &&
                    c->user->histogram(c->user->ctx, i, &htag, &hvalues, &hn) > 0;
         i++)
        rc = summarize_floats(sw, r->global_step, htag, hvalues, hn, err);
    if (rc == 0) rc = summarize_histograms(c, sw, r->global_step, err);
    if (rc == 0) rc = summarize_staleness(c, sw, r->global_step, err);
    return rc;
}

/* ---- the other workers ----------------------------------------------------- */

/* A worker that fails permanently tells the ps tasks (dt_worker_report_failure)
 * and is gone; the job goes on without it. Once a second the chief reads
 * ps 0's Status and logs each such worker once (again if it came back and
 * failed anew). A ps that does not answer now is asked next time. */
static void watch_workers(chief *c, double t) {
    if (t - c->workers_checked < WORKERS_CHECK_SECS) return;
    c->workers_checked = t;
    dt_err ignored;
    dt_err_clear(&ignored);
    if (dt_ps_client_status(dt_worker_client(c->w), 0, &c->status, &ignored) < 0) return;
    c->status_unsummarized = 1;
    const dt_msg_status_resp *st = &c->status;
    for (int i = 0; i < st->num_workers; i++) {
        const dt_worker_activity *a = &st->workers[i];
        if (a->worker < 1 || a->worker >= c->num_workers) continue;
        char failed = a->failure[0] != '\0';
        if (failed && !c->gone_logged[a->worker])
            dt_log(DT_LOG_WARN, "chief: worker %d is gone: %s; training goes on without it",
                   (int)a->worker, a->failure);
        c->gone_logged[a->worker] = failed;
    }
}

/* ---- the log dir ------------------------------------------------------- */

/* A new job id: 128 random bits as 32 lowercase hex digits. */
static int new_job_id(char out[DT_JOB_ID_MAX], dt_err *err) {
    unsigned char bits[16];
    size_t got = 0;
    while (got < sizeof bits) {
        ssize_t n = getrandom(bits + got, sizeof bits - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return dt_err_set(err, DT_EIO, "chief: job id: getrandom: %s", strerror(errno));
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof bits; i++)
        snprintf(out + 2 * i, 3, "%02x", bits[i]);
    return 0;
}

/* Writes the job id file unless it holds the id already. A storage fault
 * (a full disk) never stops training: it is logged, and each checkpoint
 * tries again (the checkpoints carry the id meanwhile). */
static void save_job_id(chief *c) {
    if (c->job_id_saved) return;
    dt_err save_err;
    dt_err_clear(&save_err);
    if (dt_ckpt_job_id_save(c->job->log_dir, c->job_id, &save_err) < 0) {
        dt_log(DT_LOG_WARN, "chief: saving the job id: %s; trying again at the next checkpoint",
               save_err.msg);
        return;
    }
    c->job_id_saved = 1;
}

/* The job's id, with the log dir locked: its latest checkpoint's; else its
 * job id file's (a chief killed before its first save, or a checkpoint from
 * before job ids that an earlier run gave one); else a new one (a new log
 * dir, or a checkpoint from before job ids). The file is (re)written before
 * any Create, so every later run of this job finds the same id. */
static int resolve_job_id(chief *c, dt_err *err) {
    const char *dir = c->job->log_dir;
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    char path[DT_PATH_MAX + 64] = "";
    dt_err meta_err;
    dt_err_clear(&meta_err);
    /* An unreadable latest checkpoint is the restore's to report. */
    int have_ckpt = dt_ckpt_latest_meta(dir, &meta, path, sizeof path, &meta_err);
    if (have_ckpt > 0) dt_safetensors_meta_deinit(&meta);
    char from_file[DT_JOB_ID_MAX] = "";
    int have_file = dt_ckpt_job_id_load(dir, from_file, err);
    if (have_file < 0) return dt_err_wrap(err, have_file, "chief");
    const char *from = "";
    if (have_ckpt > 0 && meta.job_id[0]) {
        snprintf(c->job_id, sizeof c->job_id, "%s", meta.job_id);
        from = "from its latest checkpoint";
        c->ckpt_evals_flat = meta.evals_without_gain; /* this job's, for resume_flat */
        c->ckpt_step = meta.global_step;
        if (have_file && strcmp(from_file, meta.job_id) != 0)
            dt_log(DT_LOG_WARN, "chief: %s/%s says job %s, %s says %s: the checkpoint's applies",
                   dir, DT_CKPT_JOB_ID_FILE, from_file, path, meta.job_id);
    } else if (have_file) {
        snprintf(c->job_id, sizeof c->job_id, "%s", from_file);
        from = "from " DT_CKPT_JOB_ID_FILE;
    } else {
        int rc = new_job_id(c->job_id, err);
        if (rc < 0) return rc;
        c->job_id_new = have_ckpt <= 0;
        from = have_ckpt > 0 ? "new: its checkpoints are from before job ids" : "new";
    }
    c->job_id_saved = have_file && strcmp(from_file, c->job_id) == 0;
    dt_log_set_job_id(c->job_id);
    dt_log(DT_LOG_INFO, "chief: job id %s (%s; log dir %s)", c->job_id, from, dir);
    save_job_id(c);
    return 0;
}

/* Remembers which directory the lock is in. */
static int note_log_dir(chief *c, dt_err *err) {
    struct stat st;
    if (stat(c->job->log_dir, &st) != 0)
        return dt_err_set(err, DT_EIO, "chief: log dir %s: stat: %s", c->job->log_dir,
                          strerror(errno));
    c->log_dir_dev = st.st_dev;
    c->log_dir_ino = st.st_ino;
    return 0;
}

/* 1 when the log dir is gone or is no longer the directory locked. */
static int log_dir_changed(const chief *c) {
    struct stat st;
    if (stat(c->job->log_dir, &st) != 0) return errno == ENOENT || errno == ENOTDIR;
    return !S_ISDIR(st.st_mode) || st.st_dev != c->log_dir_dev || st.st_ino != c->log_dir_ino;
}

/* A log dir deleted or replaced mid-job would take the checkpoints, the
 * lock and the event file with it, while the chief kept writing into the
 * deleted files: recreate it, lock it again, open a new event file there and
 * save a checkpoint at once. On failure, tried again at the next check. */
static void check_log_dir(chief *c, double t) {
    if (t - c->log_dir_checked < LOG_DIR_CHECK_SECS) return;
    c->log_dir_checked = t;
    if (!log_dir_changed(c)) return;
    const char *dir = c->job->log_dir;
    if (!c->log_dir_lost)
        dt_log(DT_LOG_ERROR,
               "chief: log dir %s vanished or was replaced; recreating it, locking it again, "
               "opening a new event file and saving a checkpoint now",
               dir);
    c->log_dir_lost = 1;
    dt_err lock_err;
    dt_err_clear(&lock_err);
    int fd = -1;
    if (dt_ckpt_lock_dir(dir, &fd, &lock_err) < 0 || note_log_dir(c, &lock_err) < 0) {
        dt_ckpt_unlock_dir(fd);
        /* Tried every check; said at most once per STORAGE_LOG_SECS. */
        if (t - c->log_dir_logged >= STORAGE_LOG_SECS) {
            dt_log(DT_LOG_ERROR, "%s; trying again every %.0f s", lock_err.msg, LOG_DIR_CHECK_SECS);
            c->log_dir_logged = t;
        }
        return;
    }
    c->log_dir_lost = 0;
    dt_ckpt_unlock_dir(c->lock_fd);
    c->lock_fd = fd;
    dt_summary_close(c->summary);
    c->summary = NULL;
    dt_err summary_err;
    dt_err_clear(&summary_err);
    if (!summary_writer(c, &summary_err)) summary_outcome(c, summary_err.code, &summary_err);
    c->last_saved_step = -1; /* the saved steps went with the old dir */
    c->job_id_saved = 0;     /* the file went with the old dir */
    save_job_id(c);
    c->next_save = t;
    c->save_backoff = SAVE_BACKOFF_FIRST;
}

/* A checkpoint when one is due, after a step or while the chief waits. */
static void save_when_due(chief *c, double t) {
    const dt_job *job = c->job;
    if (t < c->next_save) return;
    dt_err save_err;
    dt_err_clear(&save_err);
    /* A ps that is down now is waited for by the next step's retries;
     * a full disk may have room again soon. Either way training goes
     * on and the save is tried again, backing off to save_model_secs. */
    if (save(c, &save_err) < 0) {
        dt_train_metrics_storage_failed(1, &save_err);
        dt_log(DT_LOG_WARN, "%s; training goes on, retrying in %.0f s", save_err.msg,
               c->save_backoff);
        c->next_save = t + c->save_backoff;
        c->save_backoff = fmin(c->save_backoff * 2, job->save_model_secs);
    } else {
        c->next_save = t + job->save_model_secs;
        c->save_backoff = SAVE_BACKOFF_FIRST;
    }
}

/* While the chief's own passes are done and the other workers make
 * theirs: what after_step does on a clock goes on (summaries and
 * evaluation follow local steps, which stand still). */
static int waiting(void *ctx, int64_t global_step, dt_err *err) {
    (void)err;
    chief *c = ctx;
    if (global_step > c->last_global_step) c->last_global_step = global_step;
    const double t = dt_now_secs();
    check_log_dir(c, t);
    watch_workers(c, t);
    save_when_due(c, t);
    return 0;
}

/* Whether step r (at time t) writes summaries: every summary_steps local
 * steps when set; else the first step of this process (a short job and
 * TensorBoard have a point at once), every summary_secs after the last,
 * and the last step. */
static int summary_due(const chief *c, const dt_step_result *r, double t) {
    const dt_job *job = c->job;
    if (job->summary_steps > 0) return r->local_step % job->summary_steps == 0;
    return !c->summarized || r->done || t - c->summary_t >= job->summary_secs;
}

static int after_step(void *ctx, const dt_step_result *r, dt_err *err) {
    chief *c = ctx;
    const dt_job *job = c->job;
    if (r->global_step > c->last_global_step) c->last_global_step = r->global_step;
    c->last_pulled_step = r->pulled_step;
    double t = dt_now_secs();
    int rc = 0;
    check_log_dir(c, t);
    watch_workers(c, t);
    if (summary_due(c, r, t)) {
        dt_err summary_err;
        dt_err_clear(&summary_err);
        summary_outcome(c, summarize(c, r, t, &summary_err), &summary_err);
        c->summary_t = t;
        c->summary_step = r->global_step;
        c->summarized = 1;
    }
    /* The pulled values are those the gradient was computed from. */
    if (job->eval_steps > 0 && r->local_step % job->eval_steps == 0 &&
        (rc = evaluate(c, r->pulled_step, err)) < 0)
        return rc;
    stop_when_flat(c, r->global_step);
    save_when_due(c, t);
    return 0;
}

/* Sleeps secs in slices of 100 ms, and no longer once *stop is set (the
 * signal is taken on another thread: it does not cut a sleep short). */
static void sleep_secs(double secs, const atomic_int *stop) {
    for (long ms = (long)(secs * 1000); ms > 0 && !*stop; ms -= 100) {
        struct timespec ts = {0, (ms < 100 ? ms : 100) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Writes the final checkpoint, retrying for final_save_secs: a full disk
 * may be cleared by then. DT_ESTORAGE once the bound is up. */
static int write_final(chief *c, int64_t global_step, const atomic_int *stop, dt_err *err) {
    double start = dt_now_secs(), backoff = SAVE_BACKOFF_FIRST;
    int bound = c->job->final_save_secs;
    for (int attempt = 1;; attempt++) {
        dt_err save_err;
        dt_err_clear(&save_err);
        if (write_checkpoint(c, global_step, &save_err) == 0) {
            if (attempt > 1)
                dt_log(DT_LOG_INFO, "chief: final checkpoint written at attempt %d", attempt);
            return 0;
        }
        dt_train_metrics_storage_failed(1, &save_err);
        double left = bound - (dt_now_secs() - start);
        if (*stop)
            return dt_err_set(err, DT_ECANCELLED, "%s; final checkpoint: stopped by a signal",
                              save_err.msg);
        if (left <= 0)
            return dt_err_set(err, DT_ESTORAGE,
                              "%s; final checkpoint at global_step %lld: gave up after %d "
                              "attempts in %d s (final_save_secs); restart the job once the log "
                              "dir has room",
                              save_err.msg, (long long)global_step, attempt, bound);
        dt_log(DT_LOG_WARN, "%s; final checkpoint: attempt %d failed, retrying for %.0f s more",
               save_err.msg, attempt, left);
        sleep_secs(fmin(backoff, left), stop);
        backoff = fmin(backoff * 2, FINAL_BACKOFF_MAX);
    }
}

static int finish(chief *c, const atomic_int *stop, dt_err *err) {
    /* Told "done" (by Status, a Pull or a Push): by this job's ps tasks
     * only, before anything is pulled to be saved as final. */
    census cs = {.c = c};
    int rc = dt_worker_retry(c->w, "every ps to answer", take_census, &cs, NULL, stop, err);
    if (rc == 0) rc = check_done(c, &cs, err);
    if (rc < 0) return rc;
    snapshot_pull sp = {.c = c};
    dt_worker_hooks hooks = {c, NULL, on_not_ready, NULL};
    rc = dt_worker_retry(c->w, "final pull", do_snapshot_pull, &sp, &hooks, stop, err);
    if (rc < 0) return rc;
    c->have_slots = 1;
    /* The job ends when one ps task reaches max_steps; after a ps restore
     * the tasks' counters can differ by the pushes in flight then, so the
     * final step is the highest, not ps 0's. */
    int64_t final_step =
        sp.reply.max_step > sp.reply.global_step ? sp.reply.max_step : sp.reply.global_step;
    if (final_step <= 0)
        return dt_err_set(err, DT_EEXIST,
                          "chief: the ps tasks say job %s is done at global_step %lld: refusing "
                          "to save a step-0 model as its final one",
                          c->job_id, (long long)final_step);
    c->final_step = final_step;
    if ((rc = evaluate(c, final_step, err)) < 0) return rc;
    dt_err stop_err;
    dt_err_clear(&stop_err);
    if ((rc = write_final(c, final_step, stop, err)) < 0) {
        /* Nothing more comes from this chief: the ps tasks must not wait
         * for it. After a signal they stay, for a restarted chief. */
        if (rc == DT_ESTORAGE &&
            dt_ps_client_shutdown(dt_worker_client(c->w),
                                  "the final checkpoint could not be written", &stop_err) < 0)
            dt_log(DT_LOG_WARN, "chief: telling the ps tasks to stop: %s", stop_err.msg);
        return rc;
    }
    if (dt_ps_client_shutdown(dt_worker_client(c->w), "training complete", &stop_err) < 0)
        dt_log(DT_LOG_WARN, "chief: telling the ps tasks to stop: %s", stop_err.msg);
    if (c->have_best)
        dt_log(DT_LOG_INFO,
               "chief: the best model is global_step %lld's (eval loss %.6g), in %s/%s; eval and "
               "predict take it unless given --latest or --checkpoint",
               (long long)c->best_step, c->best_loss, c->job->log_dir, DT_CKPT_BEST_FILE);
    dt_log(DT_LOG_INFO, "chief: job done at global_step %lld%s", (long long)final_step,
           c->stopped_early ? " (stopped early)" : "");
    return 0;
}

/* ---- the role ---------------------------------------------------------- */

/* The held-out set, scaled with the statistics the chief's training data
 * took (every worker's are the same): the training file is not read a
 * second time, nor its skipped rows reported twice. A csv's feature
 * columns must be the training file's, in order. */
static int open_eval(chief *c, dt_err *err) {
    if (dt_worker_sparse_table(c->w)) {
        /* A sparse set is not scaled; its rows come from the ps tasks. */
        dt_sparse_model_config smc;
        dt_table_config table;
        int rc = dt_job_open_sparse(c->job, 1, 0, 1, &c->eval_set, err);
        if (rc == 0) rc = dt_job_sparse_model(c->job, &smc, &table, err);
        if (rc == 0) rc = dt_sparse_model_new(&smc, &c->eval_model, err);
        if (rc == 0 && c->eval_set.rows > INT32_MAX)
            rc = dt_err_set(err, DT_EINVAL, "data: \"eval_data\": %lld rows (at most %d)",
                            (long long)c->eval_set.rows, INT32_MAX);
        if (rc < 0) return rc;
        c->eval_scorer = (dt_sparse_scorer){.model = c->eval_model,
                                            .vars = dt_worker_vars(c->w),
                                            .dim = table.dim,
                                            .rows = pull_eval_rows,
                                            .ctx = c};
        dt_log(DT_LOG_INFO, "chief: %lld held-out examples from %s", (long long)c->eval_set.rows,
               c->job->data.eval_data);
        return rc;
    }
    dt_data_stats st;
    dt_data_stats_of(dt_worker_data(c->w), &st);
    dt_data_needs needs;
    dt_model_data_needs(&c->job->model, &needs);
    const dt_data_config *d = &c->job->data;
    int rc = dt_data_open_held_out(d, &needs, c->job->seed, st.num_features ? &st : NULL, 1,
                                   &c->eval, err);
    return rc < 0
               ? rc
               : dt_data_check_names(d, &needs, dt_data_held_out_file(d), 1, c->feature_names, err);
}

static void chief_deinit(chief *c) {
    dt_summary_close(c->summary);
    dt_ckpt_unlock_dir(c->lock_fd);
    dt_data_free(c->eval);
    dt_sparse_scorer_deinit(&c->eval_scorer);
    dt_sparse_model_free(c->eval_model);
    dt_sparse_set_deinit(&c->eval_set);
    free(c->snapshot.items);
    free(c->best_set.items);
    free(c->job_json);
    free(c->feature_names);
    dt_tensors_deinit(&c->recipe);
    free(c->gone_logged);
    dt_tensors_deinit(&c->slots);
    drop_table_rows(c);
    dt_worker_free(c->w);
}

int dt_chief_run(const dt_worker_params *params, const atomic_int *stop, dt_err *err) {
    chief c;
    memset(&c, 0, sizeof c);
    c.job = params->job;
    c.user = params->user;
    c.last_saved_step = -1;
    c.final_step = -1;
    c.lock_fd = -1;
    c.num_workers = params->cluster->num_workers;
    int rc = dt_ckpt_lock_dir(c.job->log_dir, &c.lock_fd, err);
    if (rc < 0) return rc;
    c.gone_logged = dt_calloc((size_t)c.num_workers + 1, 1);
    if (!c.gone_logged) {
        rc = dt_err_set(err, DT_ENOMEM, "chief: out of memory");
        goto out;
    }
    if ((rc = note_log_dir(&c, err)) < 0) goto out;
    if ((rc = dt_worker_open(params, &c.w, err)) < 0) goto out;
    if ((rc = resolve_job_id(&c, err)) < 0) goto out;
    c.job = dt_worker_job(c.w); /* with the shapes the training file gave */
    if (params->user)
        snprintf(c.model, sizeof c.model, "%s", params->user->describe);
    else
        dt_model_describe(&c.job->model, c.model, sizeof c.model);
    const dt_table_config *tables;
    const int ntables = dt_worker_tables(c.w, &tables);
    for (int k = 0; k < ntables; k++) {
        size_t n = strlen(c.model);
        snprintf(c.model + n, sizeof c.model - n, "%s table %s of %lld rows",
                 k == 0 ? " sparse:" : ",", tables[k].name, (long long)tables[k].rows);
    }
    if ((rc = init_slots(&c, err)) < 0 || (rc = init_recipe(&c, err)) < 0 ||
        (rc = init_snapshot(&c, err)) < 0)
        goto out;
    if ((rc = creation_params(&c, params->cluster, err)) < 0) goto out;
    const int held_out = dt_data_has_held_out(&c.job->data);
    if (held_out && (rc = open_eval(&c, err)) < 0) {
        dt_err_wrap(err, rc, "chief"); /* the data module names the field */
        goto out;
    }
    if (held_out) {
        read_best(&c);
        resume_flat(&c);
    }
    if ((rc = start_model(&c, stop, err)) < 0) goto out;
    if (rc == 2) { /* complete in the log dir: the ps tasks and workers may go */
        tidy_log_dir(&c);
        dt_err stop_err;
        dt_err_clear(&stop_err);
        if (dt_ps_client_shutdown(dt_worker_client(c.w), "the job was already complete",
                                  &stop_err) < 0)
            dt_log(DT_LOG_WARN, "chief: telling the ps tasks to stop: %s", stop_err.msg);
        rc = 0;
        goto out;
    }
    int already_done = rc == 1;
    dt_ps_client_log_placement(dt_worker_client(c.w));
    /* No event file (a full disk) is no reason not to train. */
    dt_err summary_err;
    dt_err_clear(&summary_err);
    if (!summary_writer(&c, &summary_err)) summary_outcome(&c, summary_err.code, &summary_err);
    if (already_done) {
        /* The workers finished while no chief ran: the ps holds the final
         * model. Save it and end the job. */
        dt_log(DT_LOG_INFO, "chief: the job is already done; saving the final model");
        rc = finish(&c, stop, err);
        goto out;
    }
    c.summary_t = dt_now_secs();
    c.next_save = c.summary_t + c.job->save_model_secs;
    c.save_backoff = SAVE_BACKOFF_FIRST;
    c.summary_step = c.last_global_step;

    dt_worker_hooks hooks = {&c, after_step, on_not_ready, waiting};
    rc = dt_worker_train(c.w, &hooks, stop, err);
    if (rc == 0) {
        rc = finish(&c, stop, err);
    } else if (rc == DT_ECANCELLED && c.last_pulled_step > 0) {
        /* Stopped by a signal: keep what was learned. */
        dt_err save_err;
        dt_err_clear(&save_err);
        if (save(&c, &save_err) < 0) dt_log(DT_LOG_ERROR, "%s", save_err.msg);
    }
out:
    /* With the log dir still locked: no other chief starts this job anew
     * while its ps tasks are told it failed. */
    if (rc < 0) dt_worker_report_failure(params, rc, err);
    chief_deinit(&c);
    return rc;
}
