/*
 * consistency: see consistency.h.
 */
#include "consistency.h"

#include <string.h>

const char *const dt_mode_names[] = {"async", "sync", "bounded", NULL};
const char *const dt_nonfinite_names[] = {"reject", "skip", NULL};

int dt_mode_from_name(const char *name) {
    for (int m = 0; m <= DT_MODE_BOUNDED; m++)
        if (strcmp(name, dt_mode_names[m]) == 0) return m;
    return -1;
}

const char *dt_mode_name(int mode) {
    return mode >= 0 && mode <= DT_MODE_BOUNDED ? dt_mode_names[mode] : NULL;
}
