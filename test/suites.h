/*
 * The Check suites of dtrain, one per subsystem (test/check_<module>.c), plus
 * the integration suites that start real processes. check_main.c runs them
 * all. Each listed suite must be defined: a missing one is a link error, and
 * check_main fails a suite that has no tests.
 */
#ifndef DT_TEST_SUITES_H
#define DT_TEST_SUITES_H

#include <check.h>

#define DT_SUITES(X)                                                                               \
    X(err)                                                                                         \
    X(text)                                                                                        \
    X(hash)                                                                                        \
    X(tensor)                                                                                      \
    X(cluster)                                                                                     \
    X(optim)                                                                                       \
    X(table)                                                                                       \
    X(data)                                                                                        \
    X(reader)                                                                                      \
    X(sparse)                                                                                      \
    X(sparse_acc)                                                                                  \
    X(criteo_gen)                                                                                  \
    X(model)                                                                                       \
    X(sparse_model)                                                                                \
    X(codec)                                                                                       \
    X(checkpoint)                                                                                  \
    X(summary)                                                                                     \
    X(alloc)                                                                                       \
    X(pool)                                                                                        \
    X(rpc)                                                                                         \
    X(tls)                                                                                         \
    X(flood)                                                                                       \
    X(ps)                                                                                          \
    X(placement)                                                                                   \
    X(consistency)                                                                                 \
    X(predict)                                                                                     \
    X(evaluator)                                                                                   \
    X(log)                                                                                         \
    X(loss_watch)                                                                                  \
    X(metrics)                                                                                     \
    X(cli)                                                                                         \
    X(api)                                                                                         \
    X(e2e)                                                                                         \
    X(models_e2e)                                                                                  \
    X(sparse_e2e)                                                                                  \
    X(lifecycle)                                                                                   \
    X(restart)                                                                                     \
    X(failure)                                                                                     \
    X(storage)                                                                                     \
    X(netns)                                                                                       \
    X(chaos)

#define DT_DECLARE_SUITE(name) Suite *name##_suite(void);
DT_SUITES(DT_DECLARE_SUITE)
#undef DT_DECLARE_SUITE

#endif
