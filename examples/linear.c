/*
 * linear: the seed's distributed linear regression, y = 2x + 0.3 noise,
 * against libdtrain. One program for every role:
 *
 *   linear --cluster conf/cluster.json --job-name ps --task-index 0
 *   linear --cluster conf/cluster.json --job-name worker --task-index 0   (the chief)
 *   linear --cluster conf/cluster.json --job-name worker --task-index 1
 *
 * or with TF_CONFIG set and no flags; --config, --set, --log-dir as the
 * dtrain binary takes them (the job defaults are conf/linear.json's).
 *
 * The model is the seed's: z = X w + b, loss = mean((z - y)^2), its
 * gradient by hand; the ps tasks hold w and b and apply the optimizer.
 * Worker t of n trains on the examples i with i % n == t.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <dtrain.h>

#define EXAMPLES 100 /* x on linspace(-1, 1, 100), as the seed's */

static int fail(const void *handle, int rc) {
    fprintf(stderr, "linear: %s\n", dtrain_errmsg(handle));
    return dtrain_exit_code(rc);
}

/* The seed's data: y = 2x + 0.3 * N(0, 1), the noise seeded. */
static void make_data(uint64_t seed, float *x, float *y) {
    srand((unsigned)seed);
    for (int i = 0; i < EXAMPLES; i++) {
        double u1 = (rand() + 1.0) / (RAND_MAX + 2.0), u2 = (rand() + 1.0) / (RAND_MAX + 2.0);
        double noise = sqrt(-2 * log(u1)) * cos(2 * 3.14159265358979323846 * u2);
        x[i] = (float)(-1.0 + 2.0 * i / (EXAMPLES - 1));
        y[i] = (float)(2.0 * x[i] + 0.3 * noise);
    }
}

static int serve(dtrain_cluster *cluster, dtrain_config *config, dtrain_model *model) {
    dtrain_server *server = NULL;
    if (dtrain_server_new(&server)) return fail(NULL, DTRAIN_ENOMEM);
    dtrain_server_params p = {
        .cluster = cluster, .config = config, .model = model, .handle_signals = 1};
    int rc = dtrain_server_start(server, &p);
    if (rc == 0) rc = dtrain_server_join(server); /* server.join() */
    int status = rc ? fail(server, rc) : 0;
    dtrain_server_free(server);
    return status;
}

static int train(dtrain_cluster *cluster, dtrain_config *config, dtrain_model *model, float *w,
                 float *b) {
    int task = 0, workers = dtrain_cluster_num_workers(cluster);
    dtrain_cluster_role(cluster, &task);
    float x[EXAMPLES], y[EXAMPLES];
    make_data(dtrain_config_seed(config), x, y);
    const int batch = dtrain_config_batch_size(config);

    dtrain_session *sess = NULL;
    if (dtrain_session_new(&sess)) return fail(NULL, DTRAIN_ENOMEM);
    dtrain_session_params p = {
        .cluster = cluster, .config = config, .model = model, .handle_signals = 1};
    int rc = dtrain_session_start(sess, &p); /* the chief creates or restores; others wait */
    int next = task;                         /* this worker's next example */
    dtrain_step_result r = {0};
    while (rc == 0 && !dtrain_session_should_stop(sess)) {
        /* Forward and backward on the next batch of this shard. */
        double loss = 0, dw = 0, db = 0;
        float residual[EXAMPLES];
        for (int k = 0; k < batch; k++, next = (next + workers) % EXAMPLES) {
            double err = w[0] * x[next] + b[0] - y[next];
            residual[k % EXAMPLES] = (float)err;
            loss += err * err / batch;
            dw += 2 * err * x[next] / batch;
            db += 2 * err / batch;
        }
        const float gw = (float)dw, gb = (float)db;
        const float *grads[2] = {&gw, &gb};
        /* What the chief writes to TensorBoard beside the loss. */
        if (rc == 0)
            rc = dtrain_session_histogram(sess, "linear/residual", residual,
                                          batch < EXAMPLES ? batch : EXAMPLES);
        if (rc == 0) rc = dtrain_session_summary(sess, "linear/abs_error", sqrt(loss));
        if (rc == 0) rc = dtrain_session_step(sess, grads, loss, &r); /* push; w, b fresh */
        if (rc == 0 && r.local_step % 100 == 0) {
            printf("worker %d: step %lld global_step %lld loss %.4f w=%.4f b=%.4f\n", task,
                   (long long)r.local_step, (long long)r.global_step, loss, w[0], b[0]);
            fflush(stdout);
        }
    }
    int close_rc = dtrain_session_close(sess); /* the chief's final checkpoint */
    int status = rc ? fail(sess, rc) : close_rc ? fail(sess, close_rc) : 0;
    if (status == 0 && r.local_step > 0)
        printf("worker %d: done, w=%.4f b=%.4f\n", task, w[0], b[0]);
    dtrain_session_free(sess);
    return status;
}

int main(int argc, char **argv) {
    dtrain_cluster *cluster = NULL;
    dtrain_config *config = NULL;
    dtrain_model *model = NULL;
    int status = 1, rc;
    if (dtrain_cluster_new(&cluster) || dtrain_config_new(&config) || dtrain_model_new(&model)) {
        status = fail(NULL, DTRAIN_ENOMEM);
        goto out;
    }
    if ((rc = dtrain_parse_args(cluster, config, &argc, argv))) {
        fprintf(stderr, "linear: %s\n", dtrain_errmsg(cluster));
        status = 2; /* a usage or config error, as the dtrain binary says it */
        goto out;
    }

    /* The variables, declared by every role (the ps sizes its messages). */
    static float w[1], b[1];
    const int64_t w_shape[2] = {1, 1}, b_shape[1] = {1};
    dtrain_var_params vw = {.name = "linear/weight",
                            .ndim = 2,
                            .shape = w_shape,
                            .values = w,
                            .init = DTRAIN_INIT_NORMAL,
                            .stddev = 1.0};
    dtrain_var_params vb = {
        .name = "linear/bias", .ndim = 1, .shape = b_shape, .values = b, .init = DTRAIN_INIT_ZEROS};
    if ((rc = dtrain_model_add(model, &vw)) || (rc = dtrain_model_add(model, &vb))) {
        status = fail(model, rc);
        goto out;
    }

    status = dtrain_cluster_role(cluster, NULL) == DTRAIN_ROLE_PS
                 ? serve(cluster, config, model)
                 : train(cluster, config, model, w, b);
out:
    dtrain_model_free(model);
    dtrain_config_free(config);
    dtrain_cluster_free(cluster);
    return status;
}
