/*
 * bench_freeport: prints N TCP ports on 127.0.0.1 that were free a moment
 * ago, space-separated, for scripts/bench.sh's cluster files.
 *
 * All N sockets are bound (to port 0, so the kernel picks) and held open
 * together before any is closed, so the N ports are distinct. A port can
 * still be taken by someone else between this program's exit and its use;
 * the bench then fails to start a role and says so.
 *
 * usage: bench_freeport N     (1 <= N <= 64)
 * Exit status: 0, or 1 when a socket cannot be bound.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

#define MAX_PORTS 64

int main(int argc, char **argv) {
    int64_t n = 0;
    if (argc != 2 || dt_bench_parse_int(argv[1], 1, MAX_PORTS, &n) < 0) {
        fprintf(stderr, "usage: bench_freeport N   (1..%d)\n", MAX_PORTS);
        return 2;
    }
    int fds[MAX_PORTS];
    int ports[MAX_PORTS];
    int opened = 0, status = 0;
    for (int i = 0; i < n; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) {
            perror("bench_freeport: socket");
            status = 1;
            break;
        }
        fds[opened++] = fd;
        struct sockaddr_in sa;
        memset(&sa, 0, sizeof sa);
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sa.sin_port = 0;
        socklen_t len = sizeof sa;
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
            getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
            perror("bench_freeport: bind");
            status = 1;
            break;
        }
        ports[i] = ntohs(sa.sin_port);
    }
    for (int i = 0; i < opened; i++)
        close(fds[i]);
    if (status != 0) return status;
    for (int i = 0; i < n; i++)
        printf("%d%c", ports[i], i + 1 < n ? ' ' : '\n');
    return fflush(stdout) == 0 ? 0 : 1;
}
