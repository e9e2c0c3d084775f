/*
 * loss_watch: decides, from the losses a role sees one after another,
 * whether training is diverging, so the role can say so at once instead of
 * printing ever larger losses. Pure: no I/O, no clock, no logging; the
 * roles (worker, chief, evaluator) log what it decides, with the fix that
 * fits their job (dt_job_divergence_hint).
 *
 * The rules, on the smoothed loss s (an exponential moving average, weight
 * DT_LOSS_WATCH_ALPHA of each new loss, so one bad batch does not count):
 *  - diverging: after `warmup` losses, s is more than DT_LOSS_WATCH_GROWTH
 *    times the lowest s seen so far, and above the first loss the watch saw
 *    (a model worse than where it started; an overconfident classifier's
 *    rare bad batch after a near-zero best is not). Said once per episode: the
 *    episode ends when s falls back under DT_LOSS_WATCH_CALM times the best
 *    (and under the ceiling).
 *  - past the ceiling: after the warm-up, s is above a loss no sane model
 *    reaches (a classifier's: 100 log K, 100x a uniform guess's, so a task
 *    that joins a model already diverged says so too); the same episode.
 *  - non-finite: a NaN or Inf loss, said once an episode (it starts one;
 *    finite losses back under the calm bound end it).
 *  - eval far above: an eval loss more than DT_LOSS_WATCH_EVAL_RATIO times
 *    the smoothed training loss, and above the training's start, or above
 *    the ceiling, once the warm-up is over (dt_loss_watch_eval_far_above;
 *    the caller keeps the episode).
 *
 * Threading: none; a watch belongs to one thread.
 */
#ifndef DT_LOSS_WATCH_H
#define DT_LOSS_WATCH_H

#include <stdint.h>

#define DT_LOSS_WATCH_ALPHA 0.1       /* s = (1 - a) s + a loss */
#define DT_LOSS_WATCH_GROWTH 100.0    /* s over its best by this: diverging */
#define DT_LOSS_WATCH_CALM 10.0       /* s back under best by this: the episode ends */
#define DT_LOSS_WATCH_EVAL_RATIO 10.0 /* eval over smoothed training loss by this */
#define DT_LOSS_WATCH_WARMUP 20       /* losses a worker sees before it judges */

typedef enum {
    DT_LOSS_OK = 0,
    DT_LOSS_DIVERGING, /* the first loss of a diverging episode: s over 100x its best */
    DT_LOSS_CEILING,   /* the same, by s past the ceiling */
    DT_LOSS_NONFINITE, /* the first non-finite loss of a run of them */
} dt_loss_verdict;

typedef struct {
    int64_t warmup;  /* finite losses seen before judging */
    int64_t seen;    /* finite losses seen */
    double start;    /* the first finite loss */
    double smoothed; /* s */
    double best;     /* the lowest s seen (the warm-up's too) */
    double ceiling;  /* a loss no sane model reaches; 0: none known (a regression) */
    int diverging;   /* in an episode: said, not yet calm */
    int nonfinite;   /* a loss of this episode was not finite: said */
} dt_loss_watch;

/* A watch that judges after warmup (>= 1) finite losses; ceiling (>= 0;
 * 0: none) as above. */
void dt_loss_watch_init(dt_loss_watch *w, int64_t warmup, double ceiling);

/* Takes the next loss. Returns DT_LOSS_DIVERGING, DT_LOSS_CEILING or
 * DT_LOSS_NONFINITE the first time in an episode (the caller says it), else DT_LOSS_OK. A
 * non-finite loss leaves the smoothed loss as it was. */
dt_loss_verdict dt_loss_watch_add(dt_loss_watch *w, double loss);

/* 1 when eval_loss is far above the training losses w has seen (see the
 * rules above; a non-finite eval_loss is far above), 0 before the warm-up
 * is over or when it is not. */
int dt_loss_watch_eval_far_above(const dt_loss_watch *w, double eval_loss);

#endif
