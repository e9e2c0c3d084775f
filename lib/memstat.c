/*
 * memstat: reads /proc/self/status. Thread-safe (no state).
 */
#include "memstat.h"

#include <stdio.h>
#include <string.h>

int64_t dt_mem_peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0 && sscanf(line + 6, "%lld", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
}
