/*
 * bench_sparse_eval: the held-out log loss of a sparse job's latest
 * checkpoint, for the quality figures of make bench (dtrain eval does not
 * score sparse models yet).
 *
 * It loads the job as dtrain does (defaults, --config, then each --set),
 * restores the log dir's latest checkpoint (dense variables and the
 * table's rows, "<table>/ids", "/values"), puts the rows in a table of one
 * shard (rows never trained read as their initial value), reads --data as
 * the job reads its training file (dt_sparse_read_*), and scores it in
 * batches of 4096: mean log loss (the model's data loss, no l2) and
 * accuracy.
 *
 * With --hidden SEED,FIRST,VOCAB_SCALE the file is taken for rows FIRST..
 * of `dtrain gen-criteo --seed SEED --vocab-scale VOCAB_SCALE` (a tail of
 * its output), and the hidden model's log loss on those rows is printed
 * too: the best a trained model can reach on them.
 *
 * Output (stdout), one line:
 *   sparse_eval step=S examples=N log_loss=L accuracy=A rows=R nonzero=Z
 *     [hidden_log_loss=H]
 * R is the rows the checkpoint holds, Z the weights among them that are
 * not 0 (FTRL's L1 keeps most at 0).
 * Exit status: 0, 1 on a failure (message on stderr), 2 on usage errors.
 *
 * Single-threaded.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "common.h"
#include "criteo_gen.h"
#include "err.h"
#include "job.h"
#include "sparse.h"
#include "sparse_model.h"
#include "table.h"

#define MAX_SETS 64
#define EVAL_BATCH 4096

static const char usage[] =
    "usage: bench_sparse_eval --config FILE [--set FIELD=VALUE]... --data FILE\n"
    "       [--hidden SEED,FIRST,VOCAB_SCALE]\n"
    "  Scores the job's latest checkpoint (its log_dir) on a held-out file.\n";

typedef struct {
    const char *config_path, *data, *hidden;
    const char *sets[MAX_SETS];
    int num_sets;
} options;

static int parse_args(int argc, char **argv, options *o) {
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--config") == 0)
            o->config_path = argv[i + 1];
        else if (strcmp(argv[i], "--data") == 0)
            o->data = argv[i + 1];
        else if (strcmp(argv[i], "--hidden") == 0)
            o->hidden = argv[i + 1];
        else if (strcmp(argv[i], "--set") == 0 && o->num_sets < MAX_SETS)
            o->sets[o->num_sets++] = argv[i + 1];
        else
            return -1;
    }
    return o->config_path && o->data && argc % 2 == 1 ? 0 : -1;
}

/* Scores ds with the model's dense variables vars and table t. */
/* The hidden model's mean log loss on rows first..first+n of the
 * generator's output for spec "SEED,FIRST,VOCAB_SCALE". */
static int hidden_loss(const char *spec, int64_t n, double *out, dt_err *err) {
    unsigned long long seed = 0;
    long long first = 0;
    double vocab = 0;
    if (sscanf(spec, "%llu,%lld,%lf", &seed, &first, &vocab) != 3 || first < 0)
        return dt_err_set(err, DT_EINVAL, "--hidden %s: want SEED,FIRST,VOCAB_SCALE", spec);
    dt_criteo_gen_params p;
    dt_criteo_gen_defaults(&p);
    p.seed = seed;
    p.vocab_scale = vocab;
    p.rows = first + n;
    dt_criteo_gen_model m;
    int rc = dt_criteo_gen_init(&p, &m, err);
    if (rc < 0) return rc;
    double sum = 0;
    char line[1024];
    for (int64_t i = first; i < first + n; i++) {
        double p1;
        int label;
        dt_criteo_gen_row(&m, i, line, sizeof line, &p1, &label);
        sum -= log(label ? p1 : 1 - p1);
    }
    *out = sum / (double)n;
    return 0;
}

static int run(const options *o, dt_err *err) {
    dt_job job;
    dt_job_defaults(&job);
    int rc = dt_job_load(o->config_path, &job, err);
    for (int i = 0; i < o->num_sets && rc == 0; i++)
        rc = dt_job_set(&job, o->sets[i], err);
    if (rc == 0) rc = dt_job_finish(&job, err);
    dt_sparse_model_config mc;
    dt_table_config tc;
    if (rc == 0) rc = dt_job_sparse_model(&job, &mc, &tc, err);
    if (rc < 0) return rc;
    dt_tensors loaded, vars;
    memset(&loaded, 0, sizeof loaded);
    memset(&vars, 0, sizeof vars);
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    char path[DT_PATH_MAX + 64];
    dt_table *t = NULL;
    dt_sparse_model *m = NULL;
    dt_sparse_set ds;
    memset(&ds, 0, sizeof ds);
    dt_tensor specs[DT_SPARSE_MODEL_MAX_VARS];
    int count = 0;
    dt_table_config unused;
    int found = dt_ckpt_restore_latest(job.log_dir, &loaded, &meta, path, sizeof path, err);
    if (found == 0) rc = dt_err_set(err, DT_ENOTFOUND, "no checkpoint in %s", job.log_dir);
    if (found < 0) rc = found;
    if (rc == 0) rc = dt_sparse_model_specs(&mc, specs, &count, &unused, err);
    if (rc == 0) rc = dt_tensors_init(&vars, specs, count, err);
    for (int i = 0; rc == 0 && i < vars.count; i++) {
        const dt_tensor *x = dt_tensors_find(&loaded, vars.items[i].name);
        if (!x || x->nbytes != vars.items[i].nbytes)
            rc = dt_err_set(err, DT_ECORRUPT, "%s: no %s of its shape", path, vars.items[i].name);
        else
            memcpy(vars.items[i].data, x->data, x->nbytes);
    }
    int64_t held = 0;
    if (rc == 0) rc = dt_table_new(&tc, &t, err);
    if (rc == 0) rc = dt_table_import(t, &loaded, 0, 1, meta.global_step, &held, err);
    if (rc == 0) rc = dt_sparse_model_new(&mc, &m, err);
    if (rc == 0) {
        snprintf(job.data.eval_data, sizeof job.data.eval_data, "%s", o->data);
        rc = dt_job_open_sparse(&job, 1, 0, 1, &ds, err);
    }
    double loss = NAN, accuracy = NAN;
    if (rc == 0) rc = dt_sparse_model_score(m, &vars, t, &ds, EVAL_BATCH, &loss, &accuracy, err);
    double hidden = NAN;
    if (rc == 0 && o->hidden) rc = hidden_loss(o->hidden, ds.rows, &hidden, err);
    if (rc == 0) {
        printf("sparse_eval step=%" PRId64 " examples=%" PRId64
               " log_loss=%.6f accuracy=%.4f rows=%" PRId64 " nonzero=%" PRId64,
               meta.global_step, ds.rows, loss, accuracy, held, dt_table_count_nonzero(t));
        if (o->hidden) printf(" hidden_log_loss=%.6f", hidden);
        printf("\n");
    }
    dt_sparse_set_deinit(&ds);
    dt_sparse_model_free(m);
    dt_table_free(t);
    dt_tensors_deinit(&vars);
    dt_tensors_deinit(&loaded);
    dt_safetensors_meta_deinit(&meta);
    return rc;
}

int main(int argc, char **argv) {
    options o;
    memset(&o, 0, sizeof o);
    if (parse_args(argc, argv, &o) < 0) {
        fputs(usage, stderr);
        return 2;
    }
    dt_err err;
    dt_err_clear(&err);
    if (run(&o, &err) < 0) {
        fprintf(stderr, "bench_sparse_eval: %s\n", err.msg);
        return 1;
    }
    return 0;
}
