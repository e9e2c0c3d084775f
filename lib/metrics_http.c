/*
 * metrics_http: libmicrohttpd's daemon with its own polling thread (one:
 * a scrape a second needs no more), at most 16 connections, each closed
 * after 10 s idle, so a stuck scraper holds nothing for long. The only
 * file that includes microhttpd.h.
 */
#include "metrics_http.h"

#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "alloc.h"
#include "log.h"
#include "metrics.h"

#define MAX_CONNECTIONS 16
#define IDLE_SECS 10

struct dt_metrics_http {
    struct MHD_Daemon *daemon;
    int port;
    char where[300]; /* "host:port", for messages */
};

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status, const char *type,
                              char *body, size_t len, enum MHD_ResponseMemoryMode mode) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE) free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **state) {
    (void)cls;
    (void)version;
    (void)upload;
    static char text[] = "text/plain; charset=utf-8";
    /* The first call of a request only sees its headers: answer at the
     * second (libmicrohttpd's contract), when a body would have come. */
    if (!*state) {
        *state = (void *)1;
        return MHD_YES;
    }
    if (*upload_size) { /* a body to a GET: read and ignored */
        *upload_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        static char body[] = "only GET\n";
        return answer(c, MHD_HTTP_METHOD_NOT_ALLOWED, text, body, sizeof body - 1,
                      MHD_RESPMEM_PERSISTENT);
    }
    if (strcmp(url, "/metrics") == 0) {
        char *page = NULL;
        size_t len = 0;
        dt_err err;
        dt_err_clear(&err);
        if (dt_metrics_render(&page, &len, &err) < 0) {
            static char body[] = "cannot render the metrics (out of memory)\n";
            dt_log(DT_LOG_WARN, "metrics: %s", err.msg);
            return answer(c, MHD_HTTP_INTERNAL_SERVER_ERROR, text, body, sizeof body - 1,
                          MHD_RESPMEM_PERSISTENT);
        }
        return answer(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", page, len,
                      MHD_RESPMEM_MUST_FREE);
    }
    if (strcmp(url, "/") == 0) {
        static char body[] = "dtrain: metrics at /metrics\n";
        return answer(c, MHD_HTTP_OK, text, body, sizeof body - 1, MHD_RESPMEM_PERSISTENT);
    }
    static char body[] = "not found: see /metrics\n";
    return answer(c, MHD_HTTP_NOT_FOUND, text, body, sizeof body - 1, MHD_RESPMEM_PERSISTENT);
}

int dt_metrics_http_start(const char *host, int port, dt_metrics_http **out, dt_err *err) {
    *out = NULL;
    if (port < 0 || port > 65535)
        return dt_err_set(err, DT_EINVAL, "metrics: port %d (0..65535)", port);
    dt_metrics_http *h = dt_calloc(1, sizeof *h);
    if (!h) return dt_err_set(err, DT_ENOMEM, "metrics: out of memory");
    int any = !host || !*host;
    if (any)
        snprintf(h->where, sizeof h->where, "*:%d", port);
    else
        snprintf(h->where, sizeof h->where, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
    struct addrinfo *ai = NULL, *pick = NULL;
    if (!any) {
        struct addrinfo hints;
        memset(&hints, 0, sizeof hints);
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_PASSIVE;
        char service[16];
        snprintf(service, sizeof service, "%d", port);
        int g = getaddrinfo(host, service, &hints, &ai);
        if (g != 0 || !ai) {
            int rc = dt_err_set(err, DT_EINVAL, "metrics: %s: cannot resolve %s: %s", h->where,
                                host, gai_strerror(g));
            free(h);
            return rc;
        }
        /* "localhost" names ::1 and 127.0.0.1: IPv4 first, as scrape
         * configs mostly say 127.0.0.1. */
        for (struct addrinfo *a = ai; a; a = a->ai_next)
            if (a->ai_family == AF_INET) {
                pick = a;
                break;
            }
        if (!pick) pick = ai;
        if (pick->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    } else {
        flags |= MHD_USE_DUAL_STACK;
    }
    h->daemon =
        ai ? MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, NULL,
                              MHD_OPTION_SOCK_ADDR, pick->ai_addr, MHD_OPTION_CONNECTION_LIMIT,
                              (unsigned)MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
                              (unsigned)IDLE_SECS, MHD_OPTION_END)
           : MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, NULL,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_SECS, MHD_OPTION_END);
    if (!h->daemon && any) /* no IPv6 here: IPv4 alone */
        h->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO, (uint16_t)port,
                                     NULL, NULL, on_request, NULL, MHD_OPTION_CONNECTION_LIMIT,
                                     (unsigned)MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
                                     (unsigned)IDLE_SECS, MHD_OPTION_END);
    if (ai) freeaddrinfo(ai);
    if (!h->daemon) {
        int rc = dt_err_set(err, DT_EUNAVAILABLE,
                            "metrics: cannot listen on %s (port in use, or not a local address?)",
                            h->where);
        free(h);
        return rc;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : port;
    /* Named with the port bound (port 0 asks the system for one). */
    const char *colon = strrchr(h->where, ':');
    if (colon)
        snprintf(h->where + (colon - h->where), sizeof h->where - (size_t)(colon - h->where), ":%d",
                 h->port);
    dt_log(DT_LOG_INFO, "metrics: serving http://%s/metrics (plain HTTP)", h->where);
    *out = h;
    return 0;
}

int dt_metrics_http_port(const dt_metrics_http *h) {
    return h->port;
}

void dt_metrics_http_stop(dt_metrics_http *h) {
    if (!h) return;
    MHD_stop_daemon(h->daemon);
    free(h);
}
