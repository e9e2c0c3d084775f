/*
 * bench_sparse_eval: the held-out log loss of a sparse job's latest
 * checkpoint, for the quality figures of make bench: dtrain eval's loss,
 * with the rows held and the generating model's loss beside it.
 *
 * It loads the job as dtrain does (defaults, --config, then each --set),
 * restores the log dir's latest checkpoint (dense variables and the
 * table's rows, "<table>/ids", "/values"), puts the rows in a table of one
 * shard (rows never trained read as their initial value), reads --data as
 * the job reads its training file (dt_sparse_read_*), and scores it as
 * dtrain eval does (lib/sparse_eval): mean log loss (the model's data
 * loss, no l2) and accuracy.
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
#include "err.h"
#include "job.h"
#include "sparse.h"
#include "sparse_eval.h"

#define MAX_SETS 64

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

static int run(const options *o, dt_err *err) {
    dt_job job;
    int rc = dt_bench_load_job(o->config_path, o->sets, o->num_sets, &job, err);
    if (rc < 0) return rc;
    dt_tensors loaded;
    memset(&loaded, 0, sizeof loaded);
    dt_safetensors_meta meta;
    memset(&meta, 0, sizeof meta);
    char path[DT_PATH_MAX + 64];
    dt_sparse_ckpt *ck = NULL;
    dt_sparse_set ds;
    memset(&ds, 0, sizeof ds);
    int found = dt_ckpt_restore_latest(job.log_dir, &loaded, &meta, path, sizeof path, err);
    if (found == 0) rc = dt_err_set(err, DT_ENOTFOUND, "no checkpoint in %s", job.log_dir);
    if (found < 0) rc = found;
    if (rc == 0) rc = dt_sparse_ckpt_open("bench_sparse_eval", &job, &loaded, path, &ck, err);
    dt_tensors_deinit(&loaded);
    if (rc == 0) rc = dt_job_read_sparse(&job, o->data, 1, 0, 1, &ds, err);
    double loss = NAN, accuracy = NAN;
    if (rc == 0)
        rc = dt_sparse_scorer_evaluate(dt_sparse_ckpt_scorer(ck), &ds, &loss, &accuracy, err);
    double hidden = NAN;
    if (rc == 0 && o->hidden) rc = dt_bench_hidden_log_loss(o->hidden, ds.rows, &hidden, err);
    if (rc == 0) {
        printf("sparse_eval step=%" PRId64 " examples=%" PRId64
               " log_loss=%.6f accuracy=%.4f rows=%" PRId64 " nonzero=%" PRId64,
               meta.global_step, ds.rows, loss, accuracy, dt_sparse_ckpt_rows(ck),
               dt_sparse_ckpt_nonzero(ck));
        if (o->hidden) printf(" hidden_log_loss=%.6f", hidden);
        printf("\n");
    }
    dt_sparse_set_deinit(&ds);
    dt_sparse_ckpt_free(ck);
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
