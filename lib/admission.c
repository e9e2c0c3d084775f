/*
 * admission: per-connection accounting and eviction (see admission.h).
 *
 * Why shutdown(2) on the process's own socket: gRPC 1.51's C API has no call
 * that closes one connection. The process owns every socket gRPC accepted,
 * so the one whose peer and local port are a connection's can be found
 * (/proc/self/fd, getpeername, getsockname) and shut down: gRPC then reads
 * its end, fails its calls and frees the transport, as for a peer that
 * hung up. The same works for plaintext and TLS alike (a socket handed to
 * gRPC by fd can only be plaintext in 1.51), and it leaves gRPC's listener
 * and handshake deadline in place. The socket is checked again just
 * before the shutdown; the descriptor is never closed here, so it cannot
 * be reused under gRPC's feet.
 *
 * The table: connections by (peer address, peer port) in a hash of
 * CONN_CAP entries with chaining; a connection enters at its first call or
 * the first scan that sees its socket, and leaves once no scan has seen it
 * for FORGET_MS. Counts run in one-second windows. Addresses backing off
 * sit in a small array (BACKOFF_CAP, the oldest replaced when full).
 *
 * Threading: one mutex over everything; system calls on sockets run
 * outside it.
 */
#define _GNU_SOURCE
#include "admission.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <linux/filter.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "log.h"

#define CONN_CAP 8192
#define BUCKETS 4096
#define BACKOFF_CAP 256
#define FORGET_MS 5000
#define SCAN_CAP 16384
/* IPv4 addresses backing off that the listening socket refuses at once. */
#define FILTER_CAP 64
/* IPv6 addresses likewise: eight instructions each, and a filter's jumps
 * reach 255 ahead, so fewer (the rest are closed at their first call or
 * the next scan). */
#define FILTER_V6_CAP 16
#define FILTER_PROG_CAP (5 + 1 + FILTER_CAP + 1 + 8 * FILTER_V6_CAP + 2)
/* A connection that received this much, and is this old, without starting
 * a call is sending one endless header block (CONTINUATION frames without
 * END_HEADERS, which gRPC 1.51 buffers whole) or a flood of other frames:
 * closed at the next scan. gRPC's own cap on a call's metadata is far
 * below it; the age leaves the pollers time to see an honest client's
 * first calls (their bodies can come right behind their headers). Its
 * address does not back off: a false alarm must not cut off a host. */
#define HEADER_BYTES_MAX (1 << 20)
#define HEADER_BYTES_MIN_AGE_MS 100
/* This much without a call is closed whatever the age: before its first
 * call is started an honest client can send only that call's headers and
 * what the flow-control windows let through (64 kB at a connection's
 * start), while gRPC buffers an endless header block as fast as loopback
 * carries it (100 MB in the 100 ms above). */
#define HEADER_BYTES_HARD (8 << 20)

typedef struct {
    unsigned char ip[16]; /* IPv4 as v4-mapped IPv6 */
    uint16_t port;
} conn_key;

typedef struct {
    conn_key key;
    int used;
    int next;            /* next in its bucket, -1: none */
    int fd;              /* its socket as the last scan found it, -1: not yet */
    long long first_ms;  /* first seen (a call or a scan), monotonic */
    long long last_ms;   /* last seen */
    long long window_ms; /* start of the current one-second window */
    int win_aborted, win_refused, win_started;
    long long started, aborted, refused; /* in all */
    long long handled;                   /* calls whose handler ran */
    int open;                            /* calls started and not yet ended */
    int closing;                         /* we shut it down (or are about to) */
    unsigned long long received;         /* bytes its socket had received at scan_ms */
    long long scan_ms;                   /* the last scan that saw its socket, 0: none */
    unsigned long long busy_received;    /* received at the last scan it had a call open or
                                            a new one started (see quiet_flood) */
    long long busy_started;              /* started at that scan */
} conn;

typedef struct {
    unsigned char ip[16];
    long long until_ms; /* 0: slot free */
    long long cap_logged_until_ms;
} backoff;

struct dt_adm {
    pthread_mutex_t mu;
    char name[320];
    int port;
    dt_adm_limits lim; /* defaults applied; negative: off */
    conn conns[CONN_CAP];
    int buckets[BUCKETS];
    int free_head;
    int live;
    backoff backoffs[BACKOFF_CAP];
    dt_adm_stats stats;
    /* The IPv4 addresses the listening socket's filter drops (see
     * refresh_filter), as last installed. */
    uint32_t filtered[FILTER_CAP];
    int num_filtered;
    uint32_t filtered6[FILTER_V6_CAP][4]; /* and the IPv6 ones */
    int num_filtered6;
    long long slow_log_ms; /* the last "closed slow connections" line */
    long long slow_unlogged;
    int rcvbuf_set;    /* the listening socket's receive buffer set (see limit_rcvbuf) */
    int sockets;       /* sockets of the port the last scan saw */
    long long scan_ms; /* the last scan's time */
    long long gone;    /* scans that saw fewer than the one before, by how many */
};

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int pick(int value, int fallback) {
    return value == 0 ? fallback : value;
}

int dt_adm_new(const char *name, int port, const dt_adm_limits *limits, dt_adm **out, dt_err *err) {
    *out = NULL;
    dt_adm_limits lim = limits ? *limits : (dt_adm_limits){0};
    lim.max_aborts_per_sec = pick(lim.max_aborts_per_sec, DT_ADM_DEFAULT_MAX_ABORTS_PER_SEC);
    lim.backoff_ms = pick(lim.backoff_ms, DT_ADM_DEFAULT_BACKOFF_MS);
    lim.max_conns_per_peer = pick(lim.max_conns_per_peer, DT_ADM_DEFAULT_MAX_CONNS_PER_PEER);
    lim.header_timeout_ms = pick(lim.header_timeout_ms, DT_ADM_DEFAULT_HEADER_TIMEOUT_MS);
    if (lim.quiet_bytes == 0) lim.quiet_bytes = DT_ADM_DEFAULT_QUIET_BYTES;
    if (port <= 0 || port > 65535)
        return dt_err_set(err, DT_EINVAL, "%s: port %d (1..65535)", name, port);
    dt_adm *a = dt_calloc(1, sizeof *a);
    if (!a) return dt_err_set(err, DT_ENOMEM, "%s: out of memory", name);
    pthread_mutex_init(&a->mu, NULL);
    snprintf(a->name, sizeof a->name, "%s", name);
    a->port = port;
    a->lim = lim;
    for (int i = 0; i < BUCKETS; i++)
        a->buckets[i] = -1;
    for (int i = 0; i < CONN_CAP; i++)
        a->conns[i].next = i + 1 < CONN_CAP ? i + 1 : -1;
    a->free_head = 0;
    *out = a;
    return 0;
}

void dt_adm_free(dt_adm *a) {
    if (!a) return;
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* ---- keys ---------------------------------------------------------------- */

static unsigned hash_key(const conn_key *k) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (int i = 0; i < 16; i++)
        h = (h ^ k->ip[i]) * 16777619u;
    h = (h ^ (k->port & 0xff)) * 16777619u;
    h = (h ^ (k->port >> 8)) * 16777619u;
    return h % BUCKETS;
}

static int same_key(const conn_key *a, const conn_key *b) {
    return a->port == b->port && memcmp(a->ip, b->ip, 16) == 0;
}

static void v4_mapped(unsigned char ip[16], const void *v4) {
    memset(ip, 0, 10);
    ip[10] = ip[11] = 0xff;
    memcpy(ip + 12, v4, 4);
}

/* gRPC's peer text ("ipv4:1.2.3.4:5", "ipv6:[::1]:5", brackets maybe
 * percent-encoded) into a key; -1 when it names no TCP address. */
static int parse_peer(const char *peer, conn_key *k) {
    int v6 = strncmp(peer, "ipv6:", 5) == 0;
    if (!v6 && strncmp(peer, "ipv4:", 5) != 0) return -1;
    const char *p = peer + 5;
    const char *colon = strrchr(p, ':');
    if (!colon) return -1;
    char host[80];
    size_t n = 0;
    for (const char *c = p; c < colon && n + 1 < sizeof host; c++) {
        if (*c == '[' || *c == ']') continue;
        if (strncmp(c, "%5B", 3) == 0 || strncmp(c, "%5D", 3) == 0) {
            c += 2;
            continue;
        }
        host[n++] = *c;
    }
    host[n] = '\0';
    char *pct = strchr(host, '%'); /* a zone id */
    if (pct) *pct = '\0';
    long port = strtol(colon + 1, NULL, 10);
    if (port <= 0 || port > 65535) return -1;
    k->port = (uint16_t)port;
    if (!v6) {
        struct in_addr a4;
        if (inet_pton(AF_INET, host, &a4) != 1) return -1;
        v4_mapped(k->ip, &a4);
        return 0;
    }
    return inet_pton(AF_INET6, host, k->ip) == 1 ? 0 : -1;
}

/* A socket's peer and local port into k; -1 when it is not a connected TCP
 * socket of port. */
static int socket_key(int fd, int port, conn_key *k) {
    struct sockaddr_storage local, remote;
    memset(&local, 0, sizeof local);
    memset(&remote, 0, sizeof remote);
    socklen_t ll = sizeof local, rl = sizeof remote;
    if (getsockname(fd, (struct sockaddr *)&local, &ll) != 0) return -1;
    int lport = local.ss_family == AF_INET    ? ntohs(((struct sockaddr_in *)&local)->sin_port)
                : local.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&local)->sin6_port)
                                              : -1;
    if (lport != port) return -1;
    if (getpeername(fd, (struct sockaddr *)&remote, &rl) != 0) return -1;
    if (remote.ss_family == AF_INET) {
        const struct sockaddr_in *r4 = (const struct sockaddr_in *)&remote;
        v4_mapped(k->ip, &r4->sin_addr);
        k->port = ntohs(r4->sin_port);
    } else if (remote.ss_family == AF_INET6) {
        const struct sockaddr_in6 *r6 = (const struct sockaddr_in6 *)&remote;
        memcpy(k->ip, &r6->sin6_addr, 16);
        k->port = ntohs(r6->sin6_port);
    } else {
        return -1;
    }
    return 0;
}

/* "1.2.3.4:5" or "[::1]:5" into buf. */
static const char *key_text(const conn_key *k, char *buf, size_t cap) {
    char host[INET6_ADDRSTRLEN];
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(k->ip, mapped, 12) == 0) {
        inet_ntop(AF_INET, k->ip + 12, host, sizeof host);
        snprintf(buf, cap, "%s:%u", host, (unsigned)k->port);
    } else {
        inet_ntop(AF_INET6, k->ip, host, sizeof host);
        snprintf(buf, cap, "[%s]:%u", host, (unsigned)k->port);
    }
    return buf;
}

/* The address alone, as key_text without the port. */
static const char *ip_text(const unsigned char ip[16], char *buf, size_t cap) {
    conn_key k;
    memcpy(k.ip, ip, 16);
    k.port = 0;
    key_text(&k, buf, cap);
    char *colon = strrchr(buf, ':');
    if (colon) *colon = '\0';
    return buf;
}

/* ---- the table (under mu) -------------------------------------------------- */

static conn *find(dt_adm *a, const conn_key *k) {
    for (int i = a->buckets[hash_key(k)]; i >= 0; i = a->conns[i].next)
        if (same_key(&a->conns[i].key, k)) return &a->conns[i];
    return NULL;
}

/* k's entry, made when new; NULL when the table is full. */
static conn *find_or_add(dt_adm *a, const conn_key *k, long long now) {
    conn *c = find(a, k);
    if (c || a->free_head < 0) return c;
    int i = a->free_head;
    c = &a->conns[i];
    a->free_head = c->next;
    memset(c, 0, sizeof *c);
    c->key = *k;
    c->used = 1;
    c->fd = -1;
    c->first_ms = c->last_ms = c->window_ms = now;
    unsigned b = hash_key(k);
    c->next = a->buckets[b];
    a->buckets[b] = i;
    a->live++;
    return c;
}

static void forget(dt_adm *a, conn *c) {
    unsigned b = hash_key(&c->key);
    int i = (int)(c - a->conns);
    for (int *p = &a->buckets[b]; *p >= 0; p = &a->conns[*p].next)
        if (*p == i) {
            *p = c->next;
            break;
        }
    c->used = 0;
    c->next = a->free_head;
    a->free_head = i;
    a->live--;
}

static backoff *find_backoff(dt_adm *a, const unsigned char ip[16], long long now) {
    for (int i = 0; i < BACKOFF_CAP; i++)
        if (a->backoffs[i].until_ms > now && memcmp(a->backoffs[i].ip, ip, 16) == 0)
            return &a->backoffs[i];
    return NULL;
}

static void add_backoff(dt_adm *a, const unsigned char ip[16], long long now) {
    if (a->lim.backoff_ms < 0) return;
    backoff *slot = find_backoff(a, ip, now);
    for (int i = 0; i < BACKOFF_CAP && !slot; i++)
        if (a->backoffs[i].until_ms <= now) slot = &a->backoffs[i];
    if (!slot) { /* full: the one that ends first makes room */
        slot = &a->backoffs[0];
        for (int i = 1; i < BACKOFF_CAP; i++)
            if (a->backoffs[i].until_ms < slot->until_ms) slot = &a->backoffs[i];
    }
    memcpy(slot->ip, ip, 16);
    slot->until_ms = now + a->lim.backoff_ms;
}

/* ---- closing ------------------------------------------------------------------ */

/* Shuts down the socket of connection k: fd when it still is its socket,
 * else the one a search of /proc/self/fd finds. 0 when one was shut down. */
static int shut_socket(dt_adm *a, const conn_key *k, int fd) {
    conn_key seen;
    if (fd >= 0 && socket_key(fd, a->port, &seen) == 0 && same_key(&seen, k))
        return shutdown(fd, SHUT_RDWR) == 0 ? 0 : -1;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int rc = -1;
    struct dirent *e;
    while (rc < 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        int n = atoi(e->d_name);
        if (n == dirfd(d)) continue;
        if (socket_key(n, a->port, &seen) == 0 && same_key(&seen, k))
            rc = shutdown(n, SHUT_RDWR) == 0 ? 0 : -1;
    }
    closedir(d);
    return rc;
}

/* ---- refusing at accept ---------------------------------------------------- */

/* The listening socket of the port, -1 when not found. */
static int find_listener(int port) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int found = -1;
    struct dirent *e;
    while (found < 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        int fd = atoi(e->d_name);
        if (fd == dirfd(d)) continue;
        struct sockaddr_storage local;
        memset(&local, 0, sizeof local);
        socklen_t ll = sizeof local;
        int listening = 0;
        socklen_t ol = sizeof listening;
        if (getsockname(fd, (struct sockaddr *)&local, &ll) != 0) continue;
        int lport = local.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&local)->sin_port)
                    : local.ss_family == AF_INET6
                        ? ntohs(((struct sockaddr_in6 *)&local)->sin6_port)
                        : -1;
        if (lport == port && getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ol) == 0 &&
            listening)
            found = fd;
    }
    closedir(d);
    return found;
}

/* Gives the listening socket a filter that drops every packet from the
 * IPv4 addresses backing off: their SYNs included, so such a peer's new
 * connections are never accepted (gRPC never sees them), and the sockets
 * accepted from it inherit the filter. Re-installed when the set changes
 * (a new back-off, one ending). IPv6 peers are closed at their first call
 * or the next scan instead. */
/* The filter program: the IPv4 addresses v4[0..n4) and the IPv6 ones
 * v6[0..n6) (four words each, network order as loaded) are dropped,
 * anything else accepted. The IP version is read first: on a dual-stack
 * socket both kinds arrive, and reading an IPv6 header at the IPv4
 * source's offset would compare part of its address with the list. Jumps
 * are 8-bit, so the IPv6 list is kept short (FILTER_V6_CAP). Returns the
 * instructions written. */
static int filter_program(const uint32_t *v4, int n4, const uint32_t (*v6)[4], int n6,
                          struct sock_filter *prog) {
    int k = 0;
    const int v4_len = 1 + n4 + 1; /* ld; jeq each; ja accept */
    const int v6_len = 8 * n6;     /* per address: (ld; jeq) x 4 */
    prog[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_B | BPF_ABS, SKF_NET_OFF + 0);
    prog[k++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xf0);
    /* 0x40: the IPv4 block next; 0x60: past it, to the IPv6 one; else accept. */
    prog[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x40, 2, 0);
    prog[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x60,
                                             (unsigned char)(1 + v4_len), 0);
    prog[k++] = (struct sock_filter)BPF_STMT(BPF_JMP | BPF_JA, (unsigned)(v4_len + v6_len));
    const int accept = k + v4_len + v6_len, drop = accept + 1;
    prog[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_NET_OFF + 12);
    for (int i = 0; i < n4; i++, k++)
        prog[k] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, v4[i],
                                               (unsigned char)(drop - k - 1), 0);
    prog[k] = (struct sock_filter)BPF_STMT(BPF_JMP | BPF_JA, (unsigned)(accept - k - 1));
    k++;
    for (int i = 0; i < n6; i++) {
        const int next = k + 8; /* the next address's first instruction */
        for (int w = 0; w < 4; w++) {
            prog[k++] =
                (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_NET_OFF + 8 + 4 * w);
            const int on_match = w == 3 ? drop : k + 1;
            prog[k] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, v6[i][w],
                                                   (unsigned char)(on_match - k - 1),
                                                   (unsigned char)(next - k - 1));
            k++;
        }
    }
    prog[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0xffffffffu);
    prog[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0);
    return k;
}

static void refresh_filter(dt_adm *a) {
    uint32_t want[FILTER_CAP] = {0};
    uint32_t want6[FILTER_V6_CAP][4];
    memset(want6, 0, sizeof want6);
    int n = 0, n6 = 0;
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    long long now = now_ms();
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < BACKOFF_CAP; i++) {
        if (a->backoffs[i].until_ms <= now) continue;
        const unsigned char *ip = a->backoffs[i].ip;
        if (memcmp(ip, mapped, 12) == 0 && n < FILTER_CAP) {
            uint32_t v;
            memcpy(&v, ip + 12, 4);
            want[n++] = ntohl(v);
        } else if (memcmp(ip, mapped, 12) != 0 && n6 < FILTER_V6_CAP) {
            for (int w = 0; w < 4; w++) {
                uint32_t v;
                memcpy(&v, ip + 4 * w, 4);
                want6[n6][w] = ntohl(v);
            }
            n6++;
        }
    }
    int same = n == a->num_filtered && n6 == a->num_filtered6 &&
               memcmp(want, a->filtered, sizeof want[0] * (size_t)n) == 0 &&
               memcmp(want6, a->filtered6, sizeof want6[0] * (size_t)n6) == 0;
    if (!same) {
        memcpy(a->filtered, want, sizeof want[0] * (size_t)n);
        memcpy(a->filtered6, want6, sizeof want6[0] * (size_t)n6);
        a->num_filtered = n;
        a->num_filtered6 = n6;
    }
    pthread_mutex_unlock(&a->mu);
    if (same) return;
    int fd = find_listener(a->port);
    if (fd < 0) return;
    if (n == 0 && n6 == 0) {
        setsockopt(fd, SOL_SOCKET, SO_DETACH_FILTER, NULL, 0);
        return;
    }
    struct sock_filter prog[FILTER_PROG_CAP];
    int k = filter_program(want, n, (const uint32_t(*)[4])want6, n6, prog);
    struct sock_fprog fprog = {.len = (unsigned short)k, .filter = prog};
    if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &fprog, sizeof fprog) != 0)
        dt_log(DT_LOG_WARN,
               "%s: cannot filter the listening socket; backing-off peers are "
               "closed at their first call instead",
               a->name);
}

int dt_adm_note(dt_adm *a, const char *peer, dt_adm_event ev) {
    conn_key k;
    if (!a || !peer || parse_peer(peer, &k) < 0) return 0;
    long long now = now_ms();
    pthread_mutex_lock(&a->mu);
    conn *c = find_or_add(a, &k, now);
    if (!c) {
        pthread_mutex_unlock(&a->mu);
        return 0;
    }
    c->last_ms = now;
    if (ev == DT_ADM_HANDLED) {
        c->handled++;
        pthread_mutex_unlock(&a->mu);
        return 0;
    }
    if (ev == DT_ADM_ENDED) {
        if (c->open > 0) c->open--;
        pthread_mutex_unlock(&a->mu);
        return 0;
    }
    if (ev == DT_ADM_STARTED) c->open++;
    if (c->closing) {
        a->stats.calls_dropped++;
        pthread_mutex_unlock(&a->mu);
        return 1;
    }
    if (now - c->window_ms >= 1000) {
        /* A second this connection was not closed for: an honest rate. */
        if (c->win_aborted + c->win_refused > a->stats.most_in_a_second)
            a->stats.most_in_a_second = c->win_aborted + c->win_refused;
        c->window_ms = now;
        c->win_started = c->win_aborted = c->win_refused = 0;
    }
    switch (ev) {
    case DT_ADM_STARTED:
        c->started++;
        c->win_started++;
        break;
    case DT_ADM_ABORTED:
        c->aborted++;
        c->win_aborted++;
        break;
    case DT_ADM_REFUSED:
        c->refused++;
        c->win_refused++;
        break;
    case DT_ADM_ENDED:
    case DT_ADM_HANDLED: break;
    }
    int bad = c->win_aborted + c->win_refused;
    int early = a->lim.max_aborts_per_sec > DT_ADM_EARLY_ABORTS && bad >= DT_ADM_EARLY_ABORTS &&
                bad * 2 > c->win_started;
    int flood = a->lim.max_aborts_per_sec > 0 &&
                (bad > a->lim.max_aborts_per_sec || early || c->open > DT_ADM_MAX_OPEN_CALLS);
    backoff *b = flood ? NULL : find_backoff(a, k.ip, now);
    if (!flood && !b) {
        pthread_mutex_unlock(&a->mu);
        return 0;
    }
    c->closing = 1;
    int fd = c->fd;
    long long win_aborted = c->win_aborted, win_refused = c->win_refused, started = c->started;
    int open = c->open;
    long long left_ms = b ? b->until_ms - now : 0;
    int log_backoff = 0;
    if (flood) {
        a->stats.closed_flood++;
        add_backoff(a, k.ip, now);
    } else {
        a->stats.closed_backoff++;
        /* One line per address per back-off period. */
        if (b->cap_logged_until_ms < b->until_ms) {
            b->cap_logged_until_ms = b->until_ms;
            log_backoff = 1;
        }
    }
    a->stats.calls_dropped++;
    pthread_mutex_unlock(&a->mu);
    /* The filter first: a client that sees its connection end must find
     * its address refused already. */
    if (flood) refresh_filter(a);
    int shut = shut_socket(a, &k, fd);
    char text[80], ip[64];
    key_text(&k, text, sizeof text);
    ip_text(k.ip, ip, sizeof ip);
    if (flood)
        dt_log(DT_LOG_WARN,
               "%s: closed the connection of %s%s: %lld calls reset before their handler and "
               "%lld refused within 1 s (bound %d a second, %d when they are most of its "
               "calls), %d calls open (bound %d; %lld started on it); refusing %s for %d s",
               a->name, text, shut == 0 ? "" : " (its socket not found)", win_aborted, win_refused,
               a->lim.max_aborts_per_sec, DT_ADM_EARLY_ABORTS, open, DT_ADM_MAX_OPEN_CALLS, started,
               ip, a->lim.backoff_ms > 0 ? a->lim.backoff_ms / 1000 : 0);
    else if (log_backoff)
        dt_log(DT_LOG_WARN, "%s: closed a connection of %s: its address is refused for %lld s more",
               a->name, text, (left_ms + 999) / 1000);
    return 1;
}

/* Whether c, with calls behind it, received over `quiet` bytes (now
 * `received` in all) since the last scan that found one of its calls open
 * or a new one started; that mark moves to this scan when it does. Such
 * bytes are frames alone: a PING, SETTINGS or WINDOW_UPDATE flood after
 * an honest call (gRPC's own PING guard is off, see rpc_server.c). An
 * honest client's bytes with no call noted are new calls that no poller
 * has taken yet, each up to a whole message: gRPC lets a stream's window
 * grow to the largest message it was asked for (seen: an 8 MB push came
 * whole before its call was taken, beside two CPU hogs). So the bound is
 * a few of the server's largest messages (quiet_bytes). */
static int quiet_flood(conn *c, unsigned long long received, long long quiet) {
    if (c->open > 0 || c->started != c->busy_started || received < c->busy_received) {
        c->busy_started = c->started;
        c->busy_received = received;
        return 0;
    }
    return c->started > 0 && quiet > 0 && received - c->busy_received > (unsigned long long)quiet;
}

/* ---- the scan -------------------------------------------------------------------- */

typedef struct {
    conn_key key;
    int fd;
    long long first_ms;
    int started;                 /* calls started on it */
    unsigned long long received; /* bytes its socket received */
    int shut; /* 0: keep; 1: slow; 2: over the cap; 3: backing off; 4: bytes, no call;
                 5: bytes, calls reset and none handled; 6: bytes, its calls over */
} seen_socket;

static int by_ip_then_age(const void *pa, const void *pb) {
    const seen_socket *x = pa, *y = pb;
    int c = memcmp(x->key.ip, y->key.ip, 16);
    if (c) return c;
    return x->first_ms < y->first_ms ? -1 : x->first_ms > y->first_ms;
}

/* The receive buffer every connection accepted on the port gets (the
 * kernel doubles it): what gRPC parses in one read is bounded by it. With
 * the kernel's autotuned buffer (4-6 MB on loopback) a loaded ps read a
 * rapid-reset flood's 25,000 streams in one go, 90 MB of calls, before a
 * poller could see 16 of them reset; at 512 kB a read holds about 3,000.
 * 512 kB a round trip is 5 GB/s at 0.1 ms. */
#define CONN_RCVBUF (256 << 10)

static void limit_rcvbuf(dt_adm *a) {
    if (a->rcvbuf_set) return;
    int fd = find_listener(a->port);
    if (fd < 0) return;
    int size = CONN_RCVBUF;
    a->rcvbuf_set = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size) != 0)
        dt_log(DT_LOG_WARN, "%s: cannot set the listening socket's receive buffer", a->name);
}

void dt_adm_tick(dt_adm *a) {
    if (!a) return;
    limit_rcvbuf(a);
    seen_socket *seen = dt_malloc(sizeof *seen * SCAN_CAP);
    if (!seen) return;
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) {
        free(seen);
        return;
    }
    struct dirent *e;
    while (n < SCAN_CAP && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        int fd = atoi(e->d_name);
        if (fd == dirfd(d)) continue;
        if (socket_key(fd, a->port, &seen[n].key) != 0) continue;
        struct tcp_info info;
        socklen_t len = sizeof info;
        memset(&info, 0, sizeof info);
        seen[n].received = getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0
                               ? (unsigned long long)info.tcpi_bytes_received
                               : 0;
        seen[n++].fd = fd;
    }
    closedir(d);
    long long now = now_ms();
    pthread_mutex_lock(&a->mu);
    if (n < a->sockets) a->gone += a->sockets - n;
    a->sockets = n;
    for (int i = 0; i < n; i++) {
        conn *c = find_or_add(a, &seen[i].key, now);
        seen[i].shut = 0;
        seen[i].first_ms = now;
        seen[i].started = 1; /* untracked (table full): left alone */
        if (!c) continue;
        c->fd = seen[i].fd;
        c->last_ms = now;
        c->received = seen[i].received;
        c->scan_ms = now;
        seen[i].first_ms = c->first_ms;
        seen[i].started = c->started > 0;
        int quiet = quiet_flood(c, seen[i].received, a->lim.quiet_bytes);
        if (c->closing) continue;
        if (find_backoff(a, c->key.ip, now))
            seen[i].shut = 3;
        else if (!c->started && seen[i].received > HEADER_BYTES_MAX &&
                 (now - c->first_ms >= HEADER_BYTES_MIN_AGE_MS ||
                  seen[i].received > HEADER_BYTES_HARD))
            seen[i].shut = 4;
        else if (c->aborted + c->refused > 0 && !c->handled && seen[i].received > HEADER_BYTES_MAX)
            seen[i].shut = 5;
        else if (quiet)
            seen[i].shut = 6;
        else if (!c->started && a->lim.header_timeout_ms > 0 &&
                 now - c->first_ms >= a->lim.header_timeout_ms)
            seen[i].shut = 1;
    }
    /* The cap: per address, the oldest max_conns_per_peer stay. */
    if (a->lim.max_conns_per_peer > 0 && n > a->lim.max_conns_per_peer) {
        qsort(seen, (size_t)n, sizeof *seen, by_ip_then_age);
        for (int i = 0, run = 0; i < n; i++) {
            run = i > 0 && memcmp(seen[i].key.ip, seen[i - 1].key.ip, 16) == 0 ? run + 1 : 0;
            if (run >= a->lim.max_conns_per_peer && !seen[i].shut) {
                conn *c = find(a, &seen[i].key);
                if (c && !c->closing) seen[i].shut = 2;
            }
        }
    }
    int over_cap_ip = -1, closed_slow = 0, slow_ip = 0;
    for (int i = 0; i < n; i++) {
        if (!seen[i].shut) continue;
        conn *c = find(a, &seen[i].key);
        if (c) c->closing = 1;
        if (seen[i].shut == 1) {
            a->stats.closed_slow++;
            closed_slow++;
            slow_ip = i;
        } else if (seen[i].shut == 2) {
            a->stats.closed_over_cap++;
            /* One line per address per back-off period. */
            backoff *b = NULL;
            for (int j = 0; j < BACKOFF_CAP && !b; j++)
                if (memcmp(a->backoffs[j].ip, seen[i].key.ip, 16) == 0) b = &a->backoffs[j];
            if (!b || b->cap_logged_until_ms <= now) {
                if (!b) {
                    for (int j = 0; j < BACKOFF_CAP && !b; j++)
                        if (a->backoffs[j].until_ms <= now &&
                            a->backoffs[j].cap_logged_until_ms <= now)
                            b = &a->backoffs[j];
                    if (b) {
                        memcpy(b->ip, seen[i].key.ip, 16);
                        b->until_ms = 0;
                    }
                }
                if (b) b->cap_logged_until_ms = now + DT_ADM_DEFAULT_BACKOFF_MS;
                over_cap_ip = i;
            }
        } else if (seen[i].shut >= 4) {
            a->stats.closed_flood++;
            add_backoff(a, seen[i].key.ip, now);
        } else {
            a->stats.closed_backoff++;
        }
    }
    /* A connection the last scan saw and this one does not has just ended.
     * One that sent a frame flood without starting a call and that gRPC
     * closed itself (a GOAWAY for a PING flood) backs off as one the
     * guards closed: else its client connects again at once. */
    int gone_flood = -1;
    unsigned long long gone_kb = 0;
    for (int i = 0; i < CONN_CAP; i++) {
        conn *c = &a->conns[i];
        if (!c->used || !c->scan_ms || c->scan_ms != a->scan_ms || c->closing) continue;
        if (c->started || c->received <= HEADER_BYTES_MAX) continue;
        c->closing = 1;
        a->stats.closed_flood++;
        add_backoff(a, c->key.ip, now);
        gone_flood = i;
        gone_kb = c->received >> 10;
    }
    conn_key gone_key;
    if (gone_flood >= 0) gone_key = a->conns[gone_flood].key;
    a->scan_ms = now;
    /* Connections no scan sees any more are gone. */
    for (int i = 0; i < CONN_CAP; i++) {
        conn *c = &a->conns[i];
        if (c->used && now - c->last_ms >= FORGET_MS) forget(a, c);
    }
    int log_slow = 0;
    long long slow_total = 0;
    if (closed_slow) {
        a->slow_unlogged += closed_slow;
        if (now - a->slow_log_ms >= 1000) {
            log_slow = 1;
            slow_total = a->slow_unlogged;
            a->slow_unlogged = 0;
            a->slow_log_ms = now;
        }
    }
    pthread_mutex_unlock(&a->mu);
    /* The filter before any socket is shut down (see dt_adm_note). */
    refresh_filter(a);
    int cap_count = 0;
    for (int i = 0; i < n; i++)
        if (seen[i].shut) {
            conn_key again;
            /* The descriptor may have been closed and reused meanwhile. */
            if (socket_key(seen[i].fd, a->port, &again) == 0 && same_key(&again, &seen[i].key))
                shutdown(seen[i].fd, SHUT_RDWR);
            if (seen[i].shut == 2) cap_count++;
            if (seen[i].shut == 4) {
                char text[80];
                dt_log(DT_LOG_WARN,
                       "%s: closed the connection of %s: it sent %llu kB without starting a "
                       "call (an endless header block or a frame flood); refusing it for %d s",
                       a->name, key_text(&seen[i].key, text, sizeof text), seen[i].received >> 10,
                       a->lim.backoff_ms > 0 ? a->lim.backoff_ms / 1000 : 0);
            }
            if (seen[i].shut == 6) {
                char text[80];
                dt_log(DT_LOG_WARN,
                       "%s: closed the connection of %s: it sent over %lld kB with none of its "
                       "calls open (frames alone: a PING, SETTINGS or WINDOW_UPDATE flood); "
                       "refusing it for %d s",
                       a->name, key_text(&seen[i].key, text, sizeof text), a->lim.quiet_bytes >> 10,
                       a->lim.backoff_ms > 0 ? a->lim.backoff_ms / 1000 : 0);
            }
            if (seen[i].shut == 5) {
                char text[80];
                dt_log(DT_LOG_WARN,
                       "%s: closed the connection of %s: it sent %llu kB, its calls were reset or "
                       "refused and none handled (a rapid-reset flood); refusing it for %d s",
                       a->name, key_text(&seen[i].key, text, sizeof text), seen[i].received >> 10,
                       a->lim.backoff_ms > 0 ? a->lim.backoff_ms / 1000 : 0);
            }
        }
    char ip[64];
    if (gone_flood >= 0) {
        char text[80];
        dt_log(DT_LOG_WARN,
               "%s: the connection of %s ended (gRPC closed it) after %llu kB without a call (a "
               "frame flood); refusing %s for %d s",
               a->name, key_text(&gone_key, text, sizeof text), gone_kb,
               ip_text(gone_key.ip, ip, sizeof ip),
               a->lim.backoff_ms > 0 ? a->lim.backoff_ms / 1000 : 0);
    }
    if (over_cap_ip >= 0)
        dt_log(DT_LOG_WARN,
               "%s: %s holds more than %d connections (--max-conns-per-peer): closed the "
               "newest %d",
               a->name, ip_text(seen[over_cap_ip].key.ip, ip, sizeof ip), a->lim.max_conns_per_peer,
               cap_count);
    if (log_slow)
        dt_log(DT_LOG_WARN,
               "%s: closed %lld connection(s) that started no call within %d ms "
               "(--header-timeout-ms), the last of %s",
               a->name, slow_total, a->lim.header_timeout_ms,
               ip_text(seen[slow_ip].key.ip, ip, sizeof ip));
    free(seen);
}

void dt_adm_get_stats(dt_adm *a, dt_adm_stats *out) {
    memset(out, 0, sizeof *out);
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    *out = a->stats;
    pthread_mutex_unlock(&a->mu);
}

int dt_adm_connections(dt_adm *a) {
    if (!a) return 0;
    pthread_mutex_lock(&a->mu);
    int n = a->live;
    pthread_mutex_unlock(&a->mu);
    return n;
}

long long dt_adm_sockets_gone(dt_adm *a) {
    if (!a) return 0;
    pthread_mutex_lock(&a->mu);
    long long n = a->gone;
    pthread_mutex_unlock(&a->mu);
    return n;
}
