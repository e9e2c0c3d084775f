/*
 * heartbeat: a training task tells every ps task, now and then, that it is
 * alive, whatever its training loop is doing (reading its data file at
 * start-up, saving a checkpoint, a long step). A worker whose "epochs"
 * passes are done and that waits for the others takes one that still
 * calls a ps for alive, however long it goes without pushing, and one
 * that calls none for sync_timeout_secs for gone (see worker.c,
 * wait_for_others).
 *
 * The beat is a Status with heartbeat set, from a ps client of its own
 * (with no variables) on a thread of its own: one small call to each ps
 * task every period, all at once, each with a deadline of a period (at
 * least 1 s, at most the caller's).
 * A failed beat (a ps down or restarting) is logged at debug level and the
 * next one comes on time: the beat never fails its task.
 *
 * Threading: dt_heartbeat_start starts the thread; dt_heartbeat_free stops
 * and joins it (waking it from its wait, so at most one call's deadline).
 */
#ifndef DT_HEARTBEAT_H
#define DT_HEARTBEAT_H

#include "err.h"
#include "ps_client.h"

typedef struct dt_heartbeat dt_heartbeat;

/* Starts beating for params->worker (>= 0) every period_ms (> 0), the
 * first beat at once. params->cluster and params->security are borrowed
 * for the heartbeat's life. Returns 0, or DT_EINVAL / DT_ENOMEM /
 * DT_EINTERNAL (no thread) with *out NULL. */
int dt_heartbeat_start(const dt_ps_client_params *params, int period_ms, dt_heartbeat **out,
                       dt_err *err) DT_WARN_UNUSED;
/* Stops the beats and frees it; NULL is a no-op. */
void dt_heartbeat_free(dt_heartbeat *hb);

#endif
