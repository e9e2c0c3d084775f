/*
 * loss_watch: is training diverging? The rules and their constants are in
 * loss_watch.h. Why smoothed and why "above the start": a softmax on
 * separable classes reaches batch losses of 1e-5 and then meets a batch at
 * 0.5 now and then (50,000x its best, and a false alarm on the raw loss);
 * its smoothed loss moves a tenth of the way and stays under the start
 * (log K), while a diverging model's grows past both within a few steps.
 */
#include "loss_watch.h"

#include <math.h>

#include "err.h"

void dt_loss_watch_init(dt_loss_watch *w, int64_t warmup, double ceiling) {
    DT_ASSERT(w && warmup >= 1 && ceiling >= 0);
    *w = (dt_loss_watch){.warmup = warmup, .best = INFINITY, .ceiling = ceiling};
}

dt_loss_verdict dt_loss_watch_add(dt_loss_watch *w, double loss) {
    if (!isfinite(loss)) {
        /* Once an episode: with "nonfinite": "skip" the values stay and
         * every other batch may be NaN again. */
        if (w->nonfinite) return DT_LOSS_OK;
        w->nonfinite = w->diverging = 1;
        return DT_LOSS_NONFINITE;
    }
    /* s = (1 - a) s + a loss, from the first loss itself */
    if (w->seen == 0)
        w->start = w->smoothed = loss;
    else
        w->smoothed = (1 - DT_LOSS_WATCH_ALPHA) * w->smoothed + DT_LOSS_WATCH_ALPHA * loss;
    w->seen++;
    if (w->smoothed < w->best) w->best = w->smoothed;
    if (w->seen <= w->warmup) return DT_LOSS_OK;
    const int past = w->ceiling > 0 && w->smoothed > w->ceiling;
    if (w->diverging) {
        if (w->smoothed < DT_LOSS_WATCH_CALM * w->best && !past) w->diverging = w->nonfinite = 0;
        return DT_LOSS_OK;
    }
    /* A loss below 0 (a program's own) has no scale to grow by. */
    if (w->best >= 0 && w->smoothed > DT_LOSS_WATCH_GROWTH * w->best && w->smoothed > w->start) {
        w->diverging = 1;
        return DT_LOSS_DIVERGING;
    }
    if (past) {
        w->diverging = 1;
        return DT_LOSS_CEILING;
    }
    return DT_LOSS_OK;
}

int dt_loss_watch_eval_far_above(const dt_loss_watch *w, double eval_loss) {
    if (w->seen < w->warmup) return 0;
    if (!isfinite(eval_loss)) return 1;
    if (w->ceiling > 0 && eval_loss > w->ceiling) return 1;
    return eval_loss > DT_LOSS_WATCH_EVAL_RATIO * w->smoothed && eval_loss > w->start;
}
