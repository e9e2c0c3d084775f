/*
 * Suite "loss_watch": the rules that decide a training is diverging
 * (lib/loss_watch.h), driven by made-up loss sequences: a loss that grows
 * 100x over its best is said once per episode and again after it calms, a
 * converging run and a fitted classifier's rare bad batch are never said,
 * nothing is judged during the warm-up, a non-finite loss is said once per
 * run of them, and an eval loss far above the training loss is told apart
 * from an overfit one.
 */
#include <check.h>
#include <math.h>

#include "loss_watch.h"
#include "suites.h"

/* Feeds n copies of loss; returns how many verdicts v came back. */
static int feed(dt_loss_watch *w, double loss, int n, dt_loss_verdict v) {
    int said = 0;
    for (int i = 0; i < n; i++)
        said += dt_loss_watch_add(w, loss) == v;
    return said;
}

/* A run whose loss falls from 1.1 (log 3) to 0.05, then grows by 10% a step:
 * diverging is said once, when the smoothed loss passes 100x its best and
 * the start, not at every later step. */
START_TEST(growth_said_once) {
    dt_loss_watch w;
    dt_loss_watch_init(&w, DT_LOSS_WATCH_WARMUP, 0);
    double loss = 1.1;
    for (int i = 0; i < 200; i++, loss = fmax(0.05, loss * 0.97))
        ck_assert_int_eq(dt_loss_watch_add(&w, loss), DT_LOSS_OK);
    ck_assert_double_lt(w.best, 0.06);
    int said = 0, at = -1;
    for (int i = 0; i < 200; i++, loss *= 1.1) {
        if (dt_loss_watch_add(&w, loss) == DT_LOSS_DIVERGING) {
            said++;
            if (at < 0) at = i;
        }
    }
    ck_assert_int_eq(said, 1);
    /* 100x of 0.05 is 5, above the start: passed by the raw loss at i = 48,
     * by the smoothed one a few steps later. */
    ck_assert_int_ge(at, 48);
    ck_assert_int_le(at, 70);
    ck_assert_double_gt(w.smoothed, DT_LOSS_WATCH_GROWTH * w.best);
}
END_TEST

/* An episode ends when the smoothed loss is back under 10x the best; a
 * second growth is said again. */
START_TEST(second_episode_said_again) {
    dt_loss_watch w;
    dt_loss_watch_init(&w, 5, 0);
    ck_assert_int_eq(feed(&w, 1.0, 50, DT_LOSS_DIVERGING), 0);
    ck_assert_int_eq(feed(&w, 500.0, 100, DT_LOSS_DIVERGING), 1);
    ck_assert_int_eq(feed(&w, 1.0, 100, DT_LOSS_DIVERGING), 0); /* calm again */
    ck_assert_int_eq(w.diverging, 0);
    ck_assert_int_eq(feed(&w, 500.0, 100, DT_LOSS_DIVERGING), 1);
}
END_TEST

/* Converging runs and noisy batches: never said. A softmax on separable
 * classes reaches batch losses of 1e-6 and meets a batch at 0.5 now and
 * then: 500,000x its best, but its smoothed loss stays under the start. */
START_TEST(no_false_alarm) {
    dt_loss_watch w;
    dt_loss_watch_init(&w, DT_LOSS_WATCH_WARMUP, 0);
    double loss = 1.1;
    int said = 0;
    for (int i = 0; i < 5000; i++) {
        loss = fmax(1e-6, loss * 0.99);
        double batch = i % 97 == 0 ? 0.5 : loss;
        said += dt_loss_watch_add(&w, batch) != DT_LOSS_OK;
    }
    ck_assert_int_eq(said, 0);
    /* A regression's noisy batches around a flat loss: not said either. */
    dt_loss_watch_init(&w, DT_LOSS_WATCH_WARMUP, 0);
    for (int i = 0; i < 5000; i++)
        said += dt_loss_watch_add(&w, 0.09 * (1 + 0.9 * sin(i * 0.7))) != DT_LOSS_OK;
    ck_assert_int_eq(said, 0);
    /* A loss below 0 (a program's own) has no scale to grow by. */
    dt_loss_watch_init(&w, 2, 0);
    ck_assert_int_eq(feed(&w, -5.0, 50, DT_LOSS_DIVERGING), 0);
    ck_assert_int_eq(feed(&w, 100.0, 50, DT_LOSS_DIVERGING), 0);
}
END_TEST

/* Nothing is judged during the warm-up, however the loss grows. */
START_TEST(warmup_not_judged) {
    dt_loss_watch w;
    dt_loss_watch_init(&w, 10, 0);
    double loss = 0.01;
    for (int i = 0; i < 10; i++, loss *= 100)
        ck_assert_int_eq(dt_loss_watch_add(&w, loss), DT_LOSS_OK);
    ck_assert_int_eq(dt_loss_watch_add(&w, loss), DT_LOSS_DIVERGING);
}
END_TEST

/* NaN and Inf: said at the first of an episode, again once it calmed; they
 * leave the smoothed loss as it was (and are said during the warm-up too). */
START_TEST(nonfinite_once_per_run) {
    dt_loss_watch w;
    dt_loss_watch_init(&w, DT_LOSS_WATCH_WARMUP, 0);
    ck_assert_int_eq(dt_loss_watch_add(&w, 1.0), DT_LOSS_OK);
    ck_assert_int_eq(dt_loss_watch_add(&w, NAN), DT_LOSS_NONFINITE);
    ck_assert_int_eq(dt_loss_watch_add(&w, INFINITY), DT_LOSS_OK);
    ck_assert_int_eq(dt_loss_watch_add(&w, NAN), DT_LOSS_OK);
    ck_assert_double_eq(w.smoothed, 1.0);
    ck_assert_int_eq(w.seen, 1);
    /* Finite and NaN in turn (skip_nonfinite keeps the values): not again. */
    ck_assert_int_eq(dt_loss_watch_add(&w, 1.0), DT_LOSS_OK);
    ck_assert_int_eq(dt_loss_watch_add(&w, -INFINITY), DT_LOSS_OK);
    /* Past the warm-up, calm again: the episode is over, a NaN is said. */
    ck_assert_int_eq(feed(&w, 1.0, 30, DT_LOSS_OK), 30);
    ck_assert_int_eq(w.diverging, 0);
    ck_assert_int_eq(dt_loss_watch_add(&w, -INFINITY), DT_LOSS_NONFINITE);
}
END_TEST

/* An eval loss 10x over the smoothed training loss and over the start is far
 * above; an overfit model's (eval 0.2 against training 0.01, under the start
 * log 3) is not; nothing before the warm-up is over; NaN always is. */
START_TEST(eval_far_above) {
    dt_loss_watch w;
    dt_loss_watch_init(&w, DT_LOSS_WATCH_WARMUP, 0);
    ck_assert_int_eq(dt_loss_watch_add(&w, 1.1), DT_LOSS_OK);
    ck_assert_int_eq(dt_loss_watch_eval_far_above(&w, 1e4), 0); /* warm-up */
    feed(&w, 0.01, 200, DT_LOSS_OK);
    ck_assert_int_eq(dt_loss_watch_eval_far_above(&w, 8825.0), 1);
    ck_assert_int_eq(dt_loss_watch_eval_far_above(&w, 2.0), 1);
    ck_assert_int_eq(dt_loss_watch_eval_far_above(&w, 0.2), 0);
    ck_assert_int_eq(dt_loss_watch_eval_far_above(&w, 0.011), 0);
    ck_assert_int_eq(dt_loss_watch_eval_far_above(&w, NAN), 1);
}
END_TEST

/* A classifier's ceiling (100 log K): a task whose first losses are those of
 * a model already diverged (it joined late) says so, once, though its loss
 * never grew under its eyes; the episode lasts while s stays past it. An
 * eval loss past it is far above, whatever the training loss. */
START_TEST(ceiling_for_late_joiners) {
    const double ceiling = 100 * log(3.0);
    dt_loss_watch w;
    dt_loss_watch_init(&w, DT_LOSS_WATCH_WARMUP, ceiling);
    ck_assert_int_eq(feed(&w, 5e6, DT_LOSS_WATCH_WARMUP, DT_LOSS_CEILING), 0);
    ck_assert_int_eq(dt_loss_watch_add(&w, 4e6), DT_LOSS_CEILING);
    ck_assert_int_eq(feed(&w, 3e5, 100, DT_LOSS_CEILING), 0);
    ck_assert_int_eq(feed(&w, 0.5, 200, DT_LOSS_CEILING), 0); /* calm: under both */
    ck_assert_int_eq(w.diverging, 0);
    /* Again: its start (5e6) keeps the growth rule quiet, the ceiling is not. */
    ck_assert_int_eq(feed(&w, 1e4, 100, DT_LOSS_CEILING), 1);
    ck_assert_int_eq(dt_loss_watch_eval_far_above(&w, 2632.0), 1);
    /* No ceiling (a regression): a loss of 5e6 from the start is its scale. */
    dt_loss_watch_init(&w, DT_LOSS_WATCH_WARMUP, 0);
    ck_assert_int_eq(feed(&w, 5e6, 500, DT_LOSS_OK), 500);
}
END_TEST

Suite *loss_watch_suite(void) {
    Suite *s = suite_create("loss_watch");
    TCase *tc = tcase_create("rules");
    tcase_add_test(tc, growth_said_once);
    tcase_add_test(tc, second_episode_said_again);
    tcase_add_test(tc, no_false_alarm);
    tcase_add_test(tc, warmup_not_judged);
    tcase_add_test(tc, nonfinite_once_per_run);
    tcase_add_test(tc, eval_far_above);
    tcase_add_test(tc, ceiling_for_late_joiners);
    suite_add_tcase(s, tc);
    return s;
}
