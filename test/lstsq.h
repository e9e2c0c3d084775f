/*
 * lstsq: ordinary least squares y = w x + b over a one-feature batch (e.g.
 * the "line" source's dt_data_all), in double. Test code only.
 */
#ifndef DT_TEST_LSTSQ_H
#define DT_TEST_LSTSQ_H

#include "data.h"
#include "err.h"

/* Errors (DT_EINVAL, *w and *b NaN): cols != 1, fewer than 2 rows, every
 * x equal. */
int dt_test_lstsq_line(const dt_batch *all, double *w, double *b, dt_err *err) DT_WARN_UNUSED;

#endif
