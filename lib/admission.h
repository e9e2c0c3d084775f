/*
 * admission: which connections a server keeps. It knows each TCP
 * connection of one listening port (its peer address and port), counts per
 * connection and per second the calls started, reset before their handler
 * ran and refused, and closes (shutdown(2) of the process's own socket) a
 * connection that resets or is refused far more calls a second than any
 * honest client, one that started no call within the header deadline
 * (half-sent headers, slowloris), and the newest of a peer's connections
 * over the per-peer cap; the address of a connection closed for a flood is
 * refused for a back-off period. Each closing is logged once.
 *
 * Knows nothing of gRPC: the server tells it of calls by gRPC's peer text
 * ("ipv4:10.0.0.2:41234", "ipv6:[::1]:41234") and calls dt_adm_tick on a
 * clock. Thread-safe: one mutex, held for table updates only (never across
 * a system call on a socket).
 */
#ifndef DT_ADMISSION_H
#define DT_ADMISSION_H

#include "err.h"

/* The bounds (0: the DT_ADM_DEFAULT_* value; negative: that guard off). */
typedef struct {
    int max_aborts_per_sec; /* calls reset before their handler or refused, on one
                               connection within one second, above which it is closed */
    int backoff_ms;         /* a connection closed for that: its address refused this long */
    int max_conns_per_peer; /* connections from one address; the newest above are closed */
    int header_timeout_ms;  /* a connection that has started no call by then is closed */
    /* Bytes a connection with calls behind it may receive with none of
     * them open before it is a frame flood (0: DT_ADM_DEFAULT_QUIET_BYTES;
     * the server sets it from its message cap, see admission.c). */
    long long quiet_bytes;
} dt_adm_limits;

/* An honest worker is refused no call and resets almost none (a retried
 * deadline: one a deadline); dtrain status --watch and a 1 s poller make
 * about one call a second. 200 a second is far above either. */
#define DT_ADM_DEFAULT_MAX_ABORTS_PER_SEC 200
#define DT_ADM_DEFAULT_BACKOFF_MS 30000
#define DT_ADM_DEFAULT_MAX_CONNS_PER_PEER 64
#define DT_ADM_DEFAULT_HEADER_TIMEOUT_MS 10000
#define DT_ADM_DEFAULT_QUIET_BYTES (16LL << 20)
/* Calls started and not yet over on one connection above which it is a
 * flood: gRPC holds an honest one to its 100 concurrent streams, but a
 * reset stream leaves that count at once while its call waits its turn. */
#define DT_ADM_MAX_OPEN_CALLS 400
/* A connection most of whose calls in a second are reset or refused is a
 * flood once this many are: the full bound above takes a loaded ps's
 * pollers hundreds of ms to see, while gRPC parses 50,000 reset streams a
 * second and holds each (about 4 kB) until a poller takes it. An honest
 * client's calls are almost all handled; one whose every call is refused
 * (a wrong token) retries far below this rate. */
#define DT_ADM_EARLY_ABORTS 16

typedef enum {
    DT_ADM_STARTED, /* a call arrived */
    DT_ADM_ABORTED, /* cancelled or reset before its handler ran */
    DT_ADM_REFUSED, /* refused: unauthenticated, not allowed, unknown or malformed */
    DT_ADM_ENDED,   /* a call noted STARTED is over (its state freed) */
    DT_ADM_HANDLED, /* its handler runs (authenticated, allowed, known) */
} dt_adm_event;

typedef struct {
    long long closed_flood;    /* connections closed over max_aborts_per_sec */
    long long closed_slow;     /* closed for starting no call within header_timeout_ms */
    long long closed_over_cap; /* closed over max_conns_per_peer */
    long long closed_backoff;  /* closed because their address was backing off */
    long long calls_dropped;   /* calls refused at once on a connection being closed */
    int most_in_a_second;      /* the most calls reset or refused on one connection within
                                  one second, among those not closed for it */
} dt_adm_stats;

typedef struct dt_adm dt_adm;

/* A guard for the sockets of local TCP port `port` (the server's); name
 * (e.g. "rpc server 0.0.0.0:1681") opens its log lines. Fails (DT_EINVAL)
 * on a limit out of range, naming it. *out is NULL after a failure. */
int dt_adm_new(const char *name, int port, const dt_adm_limits *limits, dt_adm **out,
               dt_err *err) DT_WARN_UNUSED;
void dt_adm_free(dt_adm *a);

/* Notes ev on the connection gRPC names `peer` (borrowed). Returns 1 when
 * the call should be dropped at once (its connection is being closed, or
 * its address is backing off: then the connection is closed now), else 0.
 * A peer text that names no TCP address is not counted. */
int dt_adm_note(dt_adm *a, const char *peer, dt_adm_event ev);

/* Scans the process's sockets of the port: closes those past the header
 * deadline, over the per-peer cap or from an address backing off, and
 * forgets connections that are gone. Call every few hundred ms from one
 * thread. */
void dt_adm_tick(dt_adm *a);

/* What was closed and dropped so far. */
void dt_adm_get_stats(dt_adm *a, dt_adm_stats *out);

/* The live connections the table knows (for tests and Status). */
int dt_adm_connections(dt_adm *a);

/* Sockets of the port that have ended (closed by either side) as the
 * scans saw them, since the start. */
long long dt_adm_sockets_gone(dt_adm *a);

#endif
