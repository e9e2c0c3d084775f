/*
 * heartbeat: a thread that says "alive" to every ps task each period (see
 * heartbeat.h). Invariant: the thread alone uses client; stop, under mu,
 * is the only state the two threads share.
 */
#include "heartbeat.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "log.h"
#include "tensor.h"

struct dt_heartbeat {
    dt_ps_client *client; /* no variables: it only calls Status */
    int period_ms;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC: signalled when stop is set */
    int stop;
};

static void *beat(void *arg) {
    dt_heartbeat *hb = arg;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    pthread_mutex_lock(&hb->mu);
    while (!hb->stop) {
        pthread_mutex_unlock(&hb->mu);
        dt_err err;
        dt_err_clear(&err);
        if (dt_ps_client_heartbeat(hb->client, &err) < 0)
            dt_log(DT_LOG_DEBUG, "heartbeat: %s", err.msg);
        /* On a fixed beat from the first: a slow call does not push the
         * next ones later, and one late past its time goes at once. After a
         * stall longer than a period (the process stopped, a call that
         * waited out its deadline) one beat goes, not one per beat missed. */
        next = dt_timespec_after_ms(next, hb->period_ms);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (next.tv_sec < now.tv_sec || (next.tv_sec == now.tv_sec && next.tv_nsec < now.tv_nsec))
            next = now;
        pthread_mutex_lock(&hb->mu);
        while (!hb->stop && pthread_cond_timedwait(&hb->cv, &hb->mu, &next) == 0) {
        }
    }
    pthread_mutex_unlock(&hb->mu);
    return NULL;
}

int dt_heartbeat_start(const dt_ps_client_params *params, int period_ms, dt_heartbeat **out,
                       dt_err *err) {
    *out = NULL;
    if (params->worker < 0 || period_ms <= 0)
        return dt_err_set(err, DT_EINVAL, "heartbeat: worker %d, period %d ms", params->worker,
                          period_ms);
    dt_heartbeat *hb = dt_calloc(1, sizeof *hb);
    if (!hb) return dt_err_set(err, DT_ENOMEM, "heartbeat: out of memory");
    hb->period_ms = period_ms;
    /* Each beat's deadline: a period, at least 1 s (a loaded ps answers
     * late, not never), at most the job's call deadline. It bounds how long
     * dt_heartbeat_free waits for a beat in flight to a ps that does not
     * answer at all (a partition). */
    dt_ps_client_params cp = *params;
    int deadline_ms = period_ms < 1000 ? 1000 : period_ms;
    if (cp.timeout_ms <= 0 || cp.timeout_ms > deadline_ms) cp.timeout_ms = deadline_ms;
    dt_tensors none;
    memset(&none, 0, sizeof none);
    int rc = dt_ps_client_new(&cp, &none, &hb->client, err);
    if (rc < 0) {
        free(hb);
        return rc;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&hb->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&hb->mu, NULL);
    if (pthread_create(&hb->thread, NULL, beat, hb) != 0) {
        rc = dt_err_set(err, DT_EINTERNAL, "heartbeat: cannot start its thread");
        goto fail;
    }
    *out = hb;
    return 0;
fail:
    pthread_cond_destroy(&hb->cv);
    pthread_mutex_destroy(&hb->mu);
    dt_ps_client_free(hb->client);
    free(hb);
    return rc;
}

void dt_heartbeat_free(dt_heartbeat *hb) {
    if (!hb) return;
    pthread_mutex_lock(&hb->mu);
    hb->stop = 1;
    pthread_cond_signal(&hb->cv);
    pthread_mutex_unlock(&hb->mu);
    pthread_join(hb->thread, NULL);
    pthread_cond_destroy(&hb->cv);
    pthread_mutex_destroy(&hb->mu);
    dt_ps_client_free(hb->client);
    free(hb);
}
