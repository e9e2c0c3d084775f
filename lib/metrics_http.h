/*
 * metrics_http: the /metrics endpoint, plain HTTP/1.1 served by
 * libmicrohttpd on a thread of its own: GET /metrics answers
 * dt_metrics_render's text (Content-Type text/plain; version=0.0.4), GET
 * / a line pointing there, anything else 404 (405 for another method).
 *
 * Plain HTTP, also in a job that uses TLS: the page holds counts and
 * timings, no tensors, tokens or names beyond the job's tasks and tables,
 * and Prometheus scrapes with an identity of its own, which the job's
 * mutual TLS (identities chief, worker:N, ps:N, tool) does not know. Bind
 * it where only the monitoring network reaches, or put a TLS proxy in
 * front.
 *
 * Threading: start and stop from one thread; the server's thread renders.
 */
#ifndef DT_METRICS_HTTP_H
#define DT_METRICS_HTTP_H

#include "err.h"

typedef struct dt_metrics_http dt_metrics_http;

/* Listens on host:port (host NULL or "": every interface, IPv6 and IPv4
 * where the system allows; port 0: one the system picks) and serves.
 * DT_EINVAL when host does not resolve, DT_EUNAVAILABLE when the address
 * cannot be bound (the message names it). */
int dt_metrics_http_start(const char *host, int port, dt_metrics_http **out,
                          dt_err *err) DT_WARN_UNUSED;
/* The port it listens on. */
int dt_metrics_http_port(const dt_metrics_http *h);
/* Stops serving (open connections are closed) and frees. NULL: a no-op. */
void dt_metrics_http_stop(dt_metrics_http *h);

#endif
