/*
 * lstsq: the closed-form line fit tests compare a trained model with.
 */
#include "lstsq.h"

#include <math.h>

int dt_test_lstsq_line(const dt_batch *all, double *w, double *b, dt_err *err) {
    *w = *b = NAN;
    if (all->cols != 1)
        return dt_err_set(err, DT_EINVAL, "lstsq: batch has %d features, want 1", all->cols);
    if (all->rows < 2 || !all->x || !all->y)
        return dt_err_set(err, DT_EINVAL, "lstsq: need at least 2 examples (got %d)", all->rows);
    const int n = all->rows;
    /* Two passes (means, then centred sums) so large offsets do not cancel. */
    double mean_x = 0, mean_y = 0;
    for (int i = 0; i < n; i++) {
        mean_x += all->x[i];
        mean_y += all->y[i];
    }
    mean_x /= n;
    mean_y /= n;
    double sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        double dx = all->x[i] - mean_x;
        sxx += dx * dx;
        sxy += dx * (all->y[i] - mean_y);
    }
    if (!(sxx > 0))
        return dt_err_set(err, DT_EINVAL, "lstsq: every x is the same, the fit is undefined");
    *w = sxy / sxx; /* w = cov(x, y) / var(x) */
    *b = mean_y - *w * mean_x;
    return 0;
}
