/*
 * bench_compute: the single-process training rate of a job's model, without
 * any RPC: the ceiling a distributed run of the same job is compared with.
 *
 * It loads the job as dtrain does (defaults, --config, then each --set),
 * opens the job's training data whole (shard 0 of 1, dt_data_open), and runs
 * W warm-up steps, then S timed steps of what a worker and its ps do per
 * step, in one process:
 *   next_batch -> loss_grad -> update (the job's optimizer and schedule)
 * The update is the ps's rule (dt_optim_apply), so the weights move and the
 * loss falls as in training; it costs a few passes over the variables.
 * dt_model_new sets OpenBLAS to one thread unless the environment says
 * otherwise, as in a worker.
 *
 * The clock covers the S timed steps only (not the data load or warm-up).
 * Examples/s counts the rows of the batches actually drawn (the last batch
 * of an epoch may be short).
 *
 * Output (stdout), one line:
 *   compute model=M batch=B steps=S examples=E seconds=T examples_per_s=X
 *     steps_per_s=Y grad_share=G loss_first=L0 loss_last=L1
 * grad_share is the fraction of the time spent in dt_model_loss_grad.
 * Exit status: 0, 1 on a failure (message on stderr), 2 on usage or config
 * errors.
 *
 * Single-threaded.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "data.h"
#include "err.h"
#include "job.h"
#include "model.h"
#include "optim.h"
#include "tensor.h"

#define MAX_SETS 64

typedef struct {
    const char *config_path;
    const char *sets[MAX_SETS];
    int num_sets;
    int64_t steps;  /* S, timed */
    int64_t warmup; /* W, untimed */
} options;

/* The variables, their gradients and the optimizer's slots: slot s of
 * variable v is slots.items[v * num_slots + s], shaped like the variable. */
typedef struct {
    dt_tensors vars;
    dt_tensors grads;
    dt_tensors slots;
    int num_slots;
    dt_lr_schedule schedule;
    int64_t step; /* updates applied so far (the global step) */
} trainer;

static const char usage[] =
    "usage: bench_compute --config FILE [--set FIELD=VALUE]... --steps S [--warmup W]\n"
    "  Trains the job's model in this process, without RPC: W untimed steps\n"
    "  (default 10), then S timed ones, and prints examples/s.\n";

static int parse_args(int argc, char **argv, options *o) {
    o->warmup = 10;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_compute: %s needs a value\n%s", a, usage);
            return -1;
        }
        const char *v = argv[++i];
        int64_t n = 0;
        if (strcmp(a, "--config") == 0) {
            o->config_path = v;
        } else if (strcmp(a, "--set") == 0) {
            if (o->num_sets == MAX_SETS) {
                fprintf(stderr, "bench_compute: too many --set flags (at most %d)\n", MAX_SETS);
                return -1;
            }
            o->sets[o->num_sets++] = v;
        } else if (strcmp(a, "--steps") == 0 && dt_bench_parse_int(v, 1, 100000000, &n) == 0) {
            o->steps = n;
        } else if (strcmp(a, "--warmup") == 0 && dt_bench_parse_int(v, 0, 100000000, &n) == 0) {
            o->warmup = n;
        } else {
            fprintf(stderr, "bench_compute: bad flag or value: %s %s\n%s", a, v, usage);
            return -1;
        }
    }
    if (!o->config_path || o->steps == 0) {
        fprintf(stderr, "bench_compute: --config and --steps are required\n%s", usage);
        return -1;
    }
    return 0;
}

/* The job as dtrain builds it: defaults, the file, the overrides, checks. */
static int load_job(const options *o, dt_job *job, dt_err *err) {
    dt_job_defaults(job);
    int rc = dt_job_load(o->config_path, job, err);
    for (int i = 0; i < o->num_sets && rc == 0; i++)
        rc = dt_job_set(job, o->sets[i], err);
    if (rc == 0) rc = dt_job_finish(job, err);
    return rc;
}

static int trainer_init(trainer *t, const dt_job *job, dt_err *err) {
    dt_tensor specs[DT_MODEL_MAX_VARS];
    dt_tensor slot_specs[DT_MODEL_MAX_VARS * DT_OPTIM_MAX_SLOTS];
    int count = 0;
    int rc = dt_model_specs(&job->model, specs, &count, err);
    if (rc == 0) rc = dt_job_schedule(job, &t->schedule, err);
    if (rc < 0) return rc;
    t->num_slots = dt_optim_num_slots(&job->optim);
    for (int v = 0; v < count; v++)
        for (int s = 0; s < t->num_slots; s++) {
            dt_tensor *sp = &slot_specs[v * t->num_slots + s];
            *sp = specs[v];
            /* A long variable name may be cut short: slot names only have
             * to be distinct, and the index makes them so. */
            snprintf(sp->name, sizeof sp->name, "slot%d/%d", v, s);
        }
    if ((rc = dt_tensors_init(&t->vars, specs, count, err)) < 0) return rc;
    if ((rc = dt_tensors_init(&t->grads, specs, count, err)) < 0) return rc;
    if ((rc = dt_tensors_init(&t->slots, slot_specs, count * t->num_slots, err)) < 0) return rc;
    dt_model_init(&job->model, job->seed, &t->vars);
    for (int i = 0; i < t->slots.count; i++) {
        float init = dt_optim_slot_init(&job->optim, i % t->num_slots);
        float *a = t->slots.items[i].data;
        int64_t n = dt_tensor_numel(&t->slots.items[i]);
        for (int64_t k = 0; k < n; k++)
            a[k] = init;
    }
    return 0;
}

static void trainer_deinit(trainer *t) {
    dt_tensors_deinit(&t->vars);
    dt_tensors_deinit(&t->grads);
    dt_tensors_deinit(&t->slots);
}

/* One step: batch, loss and gradient, then the ps's update of every
 * variable. *grad_secs gains the time spent in loss_grad. */
static int train_step(trainer *t, const dt_job *job, dt_model *model, dt_dataset *ds,
                      int64_t *examples, double *loss, double *grad_secs, dt_err *err) {
    dt_batch b;
    int rc = dt_data_next(ds, job->batch_size, &b, err);
    if (rc < 0) return rc;
    double t0 = dt_bench_now_secs();
    rc = dt_model_loss_grad(model, &t->vars, &b, &t->grads, loss, err);
    *grad_secs += dt_bench_now_secs() - t0;
    if (rc < 0) return rc;
    double lr = dt_lr_at(&t->schedule, job->optim.learning_rate, t->step);
    t->step++;
    for (int v = 0; v < t->vars.count; v++) {
        float *slots[DT_OPTIM_MAX_SLOTS] = {NULL};
        for (int s = 0; s < t->num_slots; s++)
            slots[s] = t->slots.items[v * t->num_slots + s].data;
        dt_optim_apply(&job->optim, lr, t->step, t->vars.items[v].data, slots,
                       t->grads.items[v].data, dt_tensor_numel(&t->vars.items[v]));
    }
    *examples += b.rows;
    return 0;
}

int main(int argc, char **argv) {
    options o;
    memset(&o, 0, sizeof o);
    if (parse_args(argc, argv, &o) < 0) return 2;

    dt_err err;
    dt_err_clear(&err);
    static dt_job job; /* large (paths): not on the stack */
    if (load_job(&o, &job, &err) < 0) {
        fprintf(stderr, "bench_compute: %s\n", err.msg);
        return 2;
    }
    trainer t;
    memset(&t, 0, sizeof t);
    dt_dataset *ds = NULL;
    dt_model *model = NULL;
    int rc = trainer_init(&t, &job, &err);
    if (rc == 0) rc = dt_job_open_data(&job, 0, 1, &ds, &err);
    if (rc == 0) rc = dt_model_new(&job.model, &model, &err);
    if (rc < 0) goto fail;

    int64_t examples = 0;
    double loss = NAN, loss_first = NAN, grad_secs = 0;
    for (int64_t i = 0; i < o.warmup; i++)
        if ((rc = train_step(&t, &job, model, ds, &examples, &loss, &grad_secs, &err)) < 0)
            goto fail;
    examples = 0;
    grad_secs = 0;
    double t0 = dt_bench_now_secs();
    for (int64_t i = 0; i < o.steps; i++) {
        if ((rc = train_step(&t, &job, model, ds, &examples, &loss, &grad_secs, &err)) < 0)
            goto fail;
        if (i == 0) loss_first = loss;
    }
    double seconds = dt_bench_now_secs() - t0;
    if (!(seconds > 0)) seconds = 1e-9;
    printf("compute model=%s batch=%d steps=%" PRId64 " examples=%" PRId64 " seconds=%.3f "
           "examples_per_s=%.0f steps_per_s=%.1f grad_share=%.2f loss_first=%.4f "
           "loss_last=%.4f\n",
           dt_model_kind_names[job.model.kind], job.batch_size, o.steps, examples, seconds,
           (double)examples / seconds, (double)o.steps / seconds, grad_secs / seconds, loss_first,
           loss);
fail:
    if (rc < 0) fprintf(stderr, "bench_compute: %s\n", err.msg);
    dt_model_free(model);
    dt_data_free(ds);
    trainer_deinit(&t);
    return rc < 0 ? 1 : 0;
}
