/*
 * ps_client: a role's view of all ps tasks as one store of variables.
 *
 * Placement: each variable lives on one ps task, chosen greedily by bytes
 * (largest first, onto the least-loaded task; ties by name and task index),
 * like TF's GreedyLoadBalancingStrategy. Every role computes the same
 * placement from the same model specs, so no one has to send it.
 *
 * Pull and push fan out to every ps at once and wait for all. The global
 * step reported is ps 0's (every push goes to every ps, so all agree).
 * Each ps's incarnation is remembered: a change means that ps restarted.
 *
 * Threading: one thread at a time per client.
 */
#ifndef DT_PS_CLIENT_H
#define DT_PS_CLIENT_H

#include <stdint.h>

#include "cluster.h"
#include "codec.h"
#include "err.h"
#include "tensor.h"

/* Most ps tasks a cluster may have. */
#define DT_MAX_PS 64

typedef struct dt_ps_client dt_ps_client;

typedef struct {
    const dt_cluster *cluster; /* borrowed for the client's life */
    int worker;                /* caller's task index (-1 for tools) */
    int timeout_ms;            /* deadline of each call */
} dt_ps_client_params;

/* Connects lazily to every ps and places the variables of `layout` (specs;
 * the data is not read). */
int dt_ps_client_new(const dt_ps_client_params *params, const dt_tensors *layout,
                     dt_ps_client **out, dt_err *err) DT_WARN_UNUSED;
void dt_ps_client_free(dt_ps_client *c);

/* Index of the ps that holds variable i of the layout. */
int dt_ps_client_placement(const dt_ps_client *c, int var_index);

/* Status of ps `ps_index` (wait_for_ready 0: fails fast if it is down). */
int dt_ps_client_status(dt_ps_client *c, int ps_index, dt_msg_status_resp *out,
                        dt_err *err) DT_WARN_UNUSED;

/* Creates the variables (values from vars) at global_step on every ps, or
 * only on those with only[p] != 0 when only is not NULL (a restarted ps). */
int dt_ps_client_create(dt_ps_client *c, const dt_tensors *vars, int64_t global_step,
                        const dt_optim_config *optim, int64_t max_steps, const char *model,
                        const int *only, dt_err *err) DT_WARN_UNUSED;

/* Number of ps tasks. */
int dt_ps_client_num_ps(const dt_ps_client *c);

/* Copies every variable's current value into vars (laid out as at _new).
 * *global_step and *done come from the replies. */
int dt_ps_client_pull(dt_ps_client *c, dt_tensors *vars, int64_t *global_step, int *done,
                      dt_err *err) DT_WARN_UNUSED;

/* Sends grads (laid out as at _new), computed at `step`. */
int dt_ps_client_push(dt_ps_client *c, const dt_tensors *grads, int64_t step,
                      int64_t *global_step, int *done, dt_err *err) DT_WARN_UNUSED;

/* Tells every ps the job is finished. */
int dt_ps_client_shutdown(dt_ps_client *c, const char *reason, dt_err *err) DT_WARN_UNUSED;

/* "ps:1 host:port" for logs (borrowed). */
const char *dt_ps_client_name(const dt_ps_client *c, int ps_index);

#endif
