/*
 * ps_metrics: a ps's /metrics families, read at each scrape from what the
 * ps keeps anyway: its Status reply (the same values `dtrain status`
 * prints: global step, pushes, staleness, variables, tables, refusals)
 * and dt_ps_counters_of (pulls, checkpoint reads, slot bytes). Nothing is
 * added to the ps's hot path.
 *
 * Threading: the collector runs on the metrics server's thread and calls
 * the ps's Status handler there, as a tool's call would be.
 */
#ifndef DT_PS_METRICS_H
#define DT_PS_METRICS_H

#include "err.h"
#include "ps.h"

/* Registers ps's collector (ps borrowed until dt_ps_metrics_detach). */
int dt_ps_metrics_attach(dt_ps *ps, dt_err *err) DT_WARN_UNUSED;
/* Unregisters it; call before dt_ps_free. NULL: a no-op. */
void dt_ps_metrics_detach(dt_ps *ps);

#endif
