/*
 * memstat: this process's memory as the kernel counts it, for the lines a
 * role logs at its end (the bench reads them): the peak resident set
 * (VmHWM), the largest the process ever was in RAM.
 */
#ifndef DT_MEMSTAT_H
#define DT_MEMSTAT_H

#include <stdint.h>

/* Peak resident set size in bytes (/proc/self/status VmHWM), or -1 where
 * the system does not say. */
int64_t dt_mem_peak_rss(void);

#endif
