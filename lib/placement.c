/*
 * placement: the partitioning of variables into units and the placement of
 * the units on ps tasks (placement.h says the rules).
 *
 * Invariants: the same layout, job and number of tasks give the same units
 * and placement in every role; ties are broken by name, then task index.
 *
 * Threading: stateless; safe from any thread.
 */
#include "placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

const char *const dt_placement_names[] = {"greedy", "round_robin", NULL};

int dt_placement_from_name(const char *name) {
    for (int p = 0; dt_placement_names[p]; p++)
        if (strcmp(name, dt_placement_names[p]) == 0) return p;
    return -1;
}

/* ---- partitioning and placement --------------------------------------- */

/* Slices of variable v: min(num_ps, rows, bytes / min_bytes), at least 1. */
static int64_t num_parts(const dt_placement_config *cfg, int num_ps, const dt_tensor *v) {
    int64_t min_bytes = cfg->partition_min_bytes;
    if (min_bytes <= 0 || v->ndim < 1 || (int64_t)v->nbytes < 2 * min_bytes) return 1;
    int64_t parts = (int64_t)v->nbytes / min_bytes;
    if (parts > num_ps) parts = num_ps;
    if (parts > v->shape[0]) parts = v->shape[0];
    return parts < 1 ? 1 : parts;
}

int dt_placement_units(const dt_placement_config *cfg, int num_ps, const dt_tensor *layout,
                       int num_vars, dt_placement_unit **out, int *num_units, dt_err *err) {
    *out = NULL;
    *num_units = 0;
    int n = 0;
    for (int i = 0; i < num_vars; i++)
        n += (int)num_parts(cfg, num_ps, &layout[i]);
    dt_placement_unit *units = dt_calloc((size_t)(n ? n : 1), sizeof *units);
    if (!units) return dt_err_set(err, DT_ENOMEM, "ps client: out of memory");
    int k = 0;
    for (int i = 0; i < num_vars; i++) {
        const dt_tensor *v = &layout[i];
        int64_t parts = num_parts(cfg, num_ps, v);
        int64_t rows = v->ndim ? v->shape[0] : 1;
        size_t row_bytes = v->nbytes / (size_t)rows;
        int64_t begin = 0;
        for (int64_t p = 0; p < parts; p++) {
            dt_placement_unit *u = &units[k++];
            u->var = i;
            u->row_begin = begin;
            u->rows = rows / parts + (p < rows % parts ? 1 : 0); /* first ones get the rest */
            u->offset = (size_t)begin * row_bytes;
            u->nbytes = (size_t)u->rows * row_bytes;
            if (parts == 1) {
                snprintf(u->name, sizeof u->name, "%s", v->name);
            } else if (snprintf(u->name, sizeof u->name, "%s/part_%lld", v->name, (long long)p) >=
                       (int)sizeof u->name) {
                free(units);
                return dt_err_set(err, DT_EINVAL, "ps client: %s: name too long to partition",
                                  v->name);
            }
            begin += u->rows;
        }
    }
    *out = units;
    *num_units = n;
    return 0;
}

static void place_round_robin(dt_placement_unit *units, int n, int num_ps) {
    for (int k = 0; k < n; k++)
        units[k].ps = k % num_ps;
}

/* Largest first onto the least-loaded task that holds no other slice of the
 * same variable (when there is one); ties by name, then task index. */
static void place_greedy(dt_placement_unit *units, int n, int num_ps, int *order) {
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0; j--) {
            const dt_placement_unit *a = &units[order[j - 1]], *b = &units[order[j]];
            int swap =
                a->nbytes < b->nbytes || (a->nbytes == b->nbytes && strcmp(a->name, b->name) > 0);
            if (!swap) break;
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int64_t load[DT_MAX_PS] = {0};
    for (int k = 0; k < n; k++) {
        dt_placement_unit *u = &units[order[k]];
        int best = -1;
        for (int p = 0; p < num_ps; p++) {
            int taken = 0;
            for (int j = 0; j < k; j++) {
                const dt_placement_unit *o = &units[order[j]];
                taken |= o->var == u->var && o->ps == p;
            }
            if (!taken && (best < 0 || load[p] < load[best])) best = p;
        }
        if (best < 0) best = 0; /* cannot happen: slices <= tasks */
        u->ps = best;
        load[best] += (int64_t)u->nbytes;
    }
}

void dt_placement_place(dt_placement kind, dt_placement_unit *units, int n, int num_ps,
                        int *order) {
    if (kind == DT_PLACE_ROUND_ROBIN)
        place_round_robin(units, n, num_ps);
    else
        place_greedy(units, n, num_ps, order);
}
