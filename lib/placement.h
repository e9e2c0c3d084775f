/*
 * placement: which ps task holds which variable, or which slice of one.
 *
 * Partitioning: a variable of at least 2 * partition_min_bytes bytes is cut
 * along its first dimension into min(num_ps, rows, bytes / partition_min_bytes)
 * slices of near-equal rows ("<name>/part_<k>", as TF's
 * min_max_variable_partitioner names them). Rows are contiguous in memory, so
 * a slice is a view: pushing one copies nothing extra.
 *
 * Placement: each unit (a whole variable or a slice) lives on one ps task:
 *   greedy       largest first onto the least-loaded task (TF's
 *                GreedyLoadBalancingStrategy), never two slices of one
 *                variable on one task while another task is free of it;
 *   round_robin  in variable order, task 0, 1, 2, ... (TF's default).
 * Every role computes the same placement from the same model specs and job,
 * so no one has to send it. The job's placement fields are owned here.
 *
 * Threading: stateless; safe from any thread.
 */
#ifndef DT_PLACEMENT_H
#define DT_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "tensor.h"

/* Most ps tasks a cluster may have. */
#define DT_MAX_PS 64

typedef enum { DT_PLACE_GREEDY = 0, DT_PLACE_ROUND_ROBIN } dt_placement;
/* The job's names of the placements, indexed by dt_placement, NULL-terminated. */
extern const char *const dt_placement_names[];

/* The job's placement fields (conf/README.md), owned here; dt_job embeds them. */
typedef struct {
    dt_placement kind;           /* greedy: by bytes, the largest first (default) */
    int64_t partition_min_bytes; /* variables of at least 2x this are split by rows; 0: never */
} dt_placement_config;

/* "greedy" / "round_robin" -> dt_placement; -1 when unknown. */
int dt_placement_from_name(const char *name);

/* A unit: a whole variable or a slice of its rows, on one ps task. */
typedef struct {
    char name[DT_TENSOR_NAME_MAX]; /* on the ps */
    int var;
    int64_t row_begin, rows;
    size_t offset; /* bytes into the variable's data */
    size_t nbytes;
    int ps;
} dt_placement_unit;

/* Cuts the variables of layout (num_vars specs; the data is not read) into
 * the units of num_ps tasks (1..DT_MAX_PS) by cfg's partitioning, in
 * variable order, each unplaced: *out gets them (room for at least one;
 * the caller frees it) and *num_units their count. On failure (out of
 * memory; a slice's name too long) *out is NULL. */
int dt_placement_units(const dt_placement_config *cfg, int num_ps, const dt_tensor *layout,
                       int num_vars, dt_placement_unit **out, int *num_units,
                       dt_err *err) DT_WARN_UNUSED;

/* Sets the ps of each of units[0..n) by kind, on num_ps tasks. order:
 * (n) scratch storage. */
void dt_placement_place(dt_placement kind, dt_placement_unit *units, int n, int num_ps, int *order);

#endif
