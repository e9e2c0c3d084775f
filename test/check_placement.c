/*
 * Suite "placement": how dt_ps_client cuts variables into slices and places
 * them on ps tasks. Pure: dt_ps_client_new only makes lazy channels, so the
 * clusters here (1 to 4 ps on free loopback ports) have nothing listening.
 *
 * Covers the partitioning rule (a variable of B bytes and R rows, with
 * partition_min_bytes m and P ps tasks, is cut into min(P, R, B / m) slices
 * when B >= 2m, else kept whole), the near-equal rows of the slices and their
 * "<name>/part_<k>" names, greedy placement (balance bounds on mixed sizes, a
 * hand-computed case, no two slices of one variable on one task, two clients
 * agree), round_robin (unit k on task k % P, units in variable order), and
 * the errors (too many ps, a name too long to take "/part_<k>").
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "err.h"
#include "proc.h"
#include "ps_client.h"
#include "suites.h"
#include "tensor.h"
#include "testjob.h"

#define MAX_VARS 16
#define MAX_TEST_PS 4

/* A cluster of num_ps ps tasks and one worker on 127.0.0.1 free ports. */
typedef struct {
    dt_addr ps[DT_MAX_PS + 1];
    dt_addr worker[1];
    dt_cluster cluster;
} fake_cluster;

static void cluster_make(fake_cluster *fc, int num_ps) {
    ck_assert(num_ps >= 1 && num_ps <= DT_MAX_PS + 1);
    int ports[MAX_TEST_PS + 1];
    memset(fc, 0, sizeof *fc);
    /* Ports are only names here: a few real free ones, the rest made up
     * (nothing ever connects). */
    ck_assert_int_eq(dt_test_free_ports(ports, MAX_TEST_PS + 1), 0);
    for (int p = 0; p < num_ps; p++)
        dt_test_loopback_addr(&fc->ps[p], p < MAX_TEST_PS ? ports[p] : 20000 + p);
    dt_test_loopback_addr(&fc->worker[0], ports[MAX_TEST_PS]);
    fc->cluster.num_ps = num_ps;
    fc->cluster.ps = fc->ps;
    fc->cluster.num_workers = 1;
    fc->cluster.workers = fc->worker;
}

/* A layout of specs only (no slab): the client reads names, dtypes and
 * shapes. */
typedef struct {
    dt_tensor items[MAX_VARS];
    dt_tensors set;
} layout;

static void layout_add(layout *l, const char *name, int ndim, int64_t d0, int64_t d1) {
    ck_assert(l->set.count < MAX_VARS);
    dt_tensor *t = &l->items[l->set.count];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = DT_DTYPE_F32;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    ck_assert_int_eq(dt_tensor_check_spec(t, NULL), 0);
    l->set.items = l->items;
    l->set.count++;
}

static dt_ps_client *client_new(const fake_cluster *fc, const layout *l, int placement,
                                int64_t min_bytes) {
    dt_ps_client_params p = {.cluster = &fc->cluster,
                             .worker = 0,
                             .timeout_ms = 1000,
                             .placement = {(dt_placement)placement, min_bytes}};
    dt_ps_client *c = NULL;
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_ps_client_new(&p, &l->set, &c, &err);
    ck_assert_msg(rc == 0 && c != NULL, "client: %d %s", rc, err.msg);
    return c;
}

/* Bytes placed on each ps, and the largest unit. */
static void loads(const dt_ps_client *c, int64_t *load, int64_t *largest) {
    int num_ps = dt_ps_client_num_ps(c);
    for (int p = 0; p < num_ps; p++)
        load[p] = 0;
    *largest = 0;
    for (int i = 0; i < dt_ps_client_num_units(c); i++) {
        dt_ps_unit u;
        dt_ps_client_unit(c, i, &u);
        ck_assert_msg(u.ps >= 0 && u.ps < num_ps, "unit %s on ps %d of %d", u.name, u.ps, num_ps);
        load[u.ps] += (int64_t)u.nbytes;
        if ((int64_t)u.nbytes > *largest) *largest = (int64_t)u.nbytes;
    }
}

/* Expected slice count of the partitioning rule, computed independently. */
static int64_t rule_parts(int64_t bytes, int ndim, int64_t rows, int num_ps, int64_t min_bytes) {
    if (min_bytes <= 0 || ndim < 1 || bytes < 2 * min_bytes) return 1;
    int64_t parts = bytes / min_bytes;
    if (parts > num_ps) parts = num_ps;
    if (parts > rows) parts = rows;
    return parts;
}

/* Checks every unit against the rule: for each variable in order, its
 * slices come next, named var/part_k (or var when whole), rows near-equal
 * (the first ones get the remainder), contiguous, covering all rows, bytes
 * = rows * row bytes. Returns the number of units seen. */
static int check_units(const dt_ps_client *c, const layout *l, int num_ps, int64_t min_bytes) {
    int i = 0;
    for (int v = 0; v < l->set.count; v++) {
        const dt_tensor *t = &l->items[v];
        int64_t rows = t->ndim ? t->shape[0] : 1;
        int64_t row_bytes = (int64_t)t->nbytes / rows;
        int64_t parts = rule_parts((int64_t)t->nbytes, t->ndim, rows, num_ps, min_bytes);
        int64_t next_row = 0;
        for (int64_t k = 0; k < parts; k++, i++) {
            ck_assert_msg(i < dt_ps_client_num_units(c), "%s: only %d units", t->name,
                          dt_ps_client_num_units(c));
            dt_ps_unit u;
            dt_ps_client_unit(c, i, &u);
            char want[DT_TENSOR_NAME_MAX + 32];
            if (parts == 1)
                snprintf(want, sizeof want, "%s", t->name);
            else
                snprintf(want, sizeof want, "%s/part_%lld", t->name, (long long)k);
            ck_assert_str_eq(u.name, want);
            ck_assert_int_eq(u.var, v);
            ck_assert_int_eq(u.row_begin, next_row);
            int64_t want_rows = rows / parts + (k < rows % parts ? 1 : 0);
            ck_assert_msg(u.rows == want_rows, "%s: %lld rows, want %lld", u.name,
                          (long long)u.rows, (long long)want_rows);
            ck_assert_int_eq((int64_t)u.nbytes, u.rows * row_bytes);
            next_row += u.rows;
        }
        ck_assert_msg(next_row == rows, "%s: slices cover %lld of %lld rows", t->name,
                      (long long)next_row, (long long)rows);
    }
    ck_assert_int_eq(dt_ps_client_num_units(c), i);
    return i;
}

/* No ps holds two slices of one variable. */
static void check_slices_spread(const dt_ps_client *c) {
    int n = dt_ps_client_num_units(c);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            dt_ps_unit a, b;
            dt_ps_client_unit(c, i, &a);
            dt_ps_client_unit(c, j, &b);
            ck_assert_msg(!(a.var == b.var && a.ps == b.ps), "%s and %s both on ps %d", a.name,
                          b.name, a.ps);
        }
}

/* Mixed sizes: bytes 8000, 4800, 3600, 2000, 1200, 800, 400, 400, 120, 4. */
static void mixed_layout(layout *l) {
    memset(l, 0, sizeof *l);
    layout_add(l, "embed", 2, 200, 10);
    layout_add(l, "hidden/weight", 2, 40, 30);
    layout_add(l, "hidden2/weight", 2, 30, 30);
    layout_add(l, "out/weight", 2, 50, 10);
    layout_add(l, "proj", 2, 30, 10);
    layout_add(l, "gate", 2, 20, 10);
    layout_add(l, "hidden/bias", 1, 100, 0);
    layout_add(l, "hidden2/bias", 1, 100, 0);
    layout_add(l, "out/bias", 1, 30, 0);
    layout_add(l, "scale", 0, 0, 0);
}

/* ---- tests ------------------------------------------------------------- */

START_TEST(test_greedy_balance) {
    for (int num_ps = 2; num_ps <= 3; num_ps++) {
        fake_cluster fc;
        cluster_make(&fc, num_ps);
        layout l;
        mixed_layout(&l);
        dt_ps_client *c = client_new(&fc, &l, DT_PLACE_GREEDY, 0);
        ck_assert_int_eq(dt_ps_client_num_ps(c), num_ps);
        ck_assert_int_eq(check_units(c, &l, num_ps, 0), l.set.count);
        int64_t load[MAX_TEST_PS], largest, total = 0, max = 0, min = INT64_MAX;
        loads(c, load, &largest);
        for (int p = 0; p < num_ps; p++) {
            total += load[p];
            if (load[p] > max) max = load[p];
            if (load[p] < min) min = load[p];
        }
        ck_assert_int_eq(total, 8000 + 4800 + 3600 + 2000 + 1200 + 800 + 400 + 400 + 120 + 4);
        ck_assert_msg(min > 0 && max * 2 <= min * 3, "%d ps: loads max %lld min %lld (> 1.5x)",
                      num_ps, (long long)max, (long long)min);
        ck_assert_msg(max * num_ps <= total + largest * num_ps,
                      "%d ps: max load %lld > mean %lld + largest unit %lld", num_ps,
                      (long long)max, (long long)(total / num_ps), (long long)largest);

        /* Deterministic: a second client (another role) agrees unit by unit. */
        dt_ps_client *other = client_new(&fc, &l, DT_PLACE_GREEDY, 0);
        ck_assert_int_eq(dt_ps_client_num_units(other), dt_ps_client_num_units(c));
        for (int i = 0; i < dt_ps_client_num_units(c); i++) {
            dt_ps_unit a, b;
            dt_ps_client_unit(c, i, &a);
            dt_ps_client_unit(other, i, &b);
            ck_assert_str_eq(a.name, b.name);
            ck_assert_int_eq(a.ps, b.ps);
        }
        dt_ps_client_log_placement(c);
        dt_ps_client_free(other);
        dt_ps_client_free(c);
    }
}
END_TEST

/* Distinct sizes on 2 ps, worked by hand with "largest first onto the
 * least-loaded task": a(700)->0, b(500)->1, c(400)->1 (500 < 700),
 * d(300)->0 (700 < 900), e(100)->1 (900 < 1000): 1000 bytes each. */
START_TEST(test_greedy_by_hand) {
    fake_cluster fc;
    cluster_make(&fc, 2);
    layout l;
    memset(&l, 0, sizeof l);
    layout_add(&l, "e", 1, 25, 0);
    layout_add(&l, "c", 1, 100, 0);
    layout_add(&l, "a", 1, 175, 0);
    layout_add(&l, "d", 1, 75, 0);
    layout_add(&l, "b", 1, 125, 0);
    dt_ps_client *c = client_new(&fc, &l, DT_PLACE_GREEDY, 0);
    static const char names[] = "ecadb";
    static const int want_ps[] = {1, 1, 0, 0, 1};
    for (int i = 0; i < 5; i++) {
        dt_ps_unit u;
        dt_ps_client_unit(c, i, &u);
        ck_assert_int_eq(u.name[0], names[i]);
        ck_assert_msg(u.ps == want_ps[i], "%s on ps %d, want %d", u.name, u.ps, want_ps[i]);
    }
    int64_t load[2], largest;
    loads(c, load, &largest);
    ck_assert_int_eq(load[0], 1000);
    ck_assert_int_eq(load[1], 1000);
    ck_assert_int_eq(largest, 700);
    dt_ps_client_free(c);
}
END_TEST

START_TEST(test_round_robin) {
    for (int num_ps = 1; num_ps <= 3; num_ps++)
        for (int split = 0; split <= 1; split++) {
            fake_cluster fc;
            cluster_make(&fc, num_ps);
            layout l;
            mixed_layout(&l);
            int64_t min_bytes = split ? 1000 : 0;
            dt_ps_client *c = client_new(&fc, &l, DT_PLACE_ROUND_ROBIN, min_bytes);
            /* Units in variable order, slices of a variable in row order. */
            int n = check_units(c, &l, num_ps, min_bytes);
            for (int k = 0; k < n; k++) {
                dt_ps_unit u;
                dt_ps_client_unit(c, k, &u);
                ck_assert_msg(u.ps == k % num_ps, "%d ps: unit %d (%s) on ps %d, want %d", num_ps,
                              k, u.name, u.ps, k % num_ps);
            }
            dt_ps_client_free(c);
        }
}
END_TEST

/* The slice count of min(P, R, B / m) for B >= 2m, one case per limb of the
 * rule, checked through the units the client made. */
START_TEST(test_partition_rule) {
    static const struct {
        const char *name;
        int ndim;
        int64_t d0, d1; /* bytes = 4 * d0 * d1 (or 4 * d0) */
        int num_ps;
        int64_t min_bytes;
        int64_t want_parts;
    } cases[] = {
        {"below_twice_min", 1, 499, 0, 3, 1000, 1},   /* 1996 < 2000: whole */
        {"exactly_twice_min", 1, 500, 0, 3, 1000, 2}, /* 2000: bytes/min = 2 */
        {"by_bytes", 2, 250, 3, 4, 1000, 3},          /* 3000 / 1000 = 3 < 4 ps */
        {"by_ps", 2, 1000, 4, 3, 1000, 3},            /* 16000 / 1000 = 16 > 3 ps */
        {"by_rows", 2, 2, 1000, 4, 100, 2},           /* 8000 / 100 = 80, but 2 rows */
        {"one_row", 2, 1, 1000, 4, 100, 1},           /* cannot cut one row */
        {"off", 2, 1000, 4, 3, 0, 1},                 /* partition_min_bytes 0 */
        {"negative_off", 2, 1000, 4, 3, -5, 1},
        {"scalar", 0, 0, 0, 3, 1, 1},           /* no first dimension */
        {"one_ps", 2, 1000, 4, 1, 10, 1},       /* nowhere to spread */
        {"uneven_rows", 2, 10, 100, 3, 100, 3}, /* 4000 / 100 = 40: 4, 3, 3 rows */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fake_cluster fc;
        cluster_make(&fc, cases[i].num_ps);
        layout l;
        memset(&l, 0, sizeof l);
        layout_add(&l, cases[i].name, cases[i].ndim, cases[i].d0, cases[i].d1);
        layout_add(&l, "small", 1, 1, 0); /* one row: never cut */
        for (int placement = DT_PLACE_GREEDY; placement <= DT_PLACE_ROUND_ROBIN; placement++) {
            dt_ps_client *c = client_new(&fc, &l, placement, cases[i].min_bytes);
            ck_assert_msg(dt_ps_client_num_units(c) == cases[i].want_parts + 1,
                          "%s: %d units, want %lld slices + 1", cases[i].name,
                          dt_ps_client_num_units(c), (long long)cases[i].want_parts);
            check_units(c, &l, cases[i].num_ps, cases[i].min_bytes);
            if (cases[i].want_parts > 1) check_slices_spread(c);
            dt_ps_client_free(c);
        }
    }
    /* The uneven case spelled out: 10 rows in 3 slices are 4, 3, 3. */
    fake_cluster fc;
    cluster_make(&fc, 3);
    layout l;
    memset(&l, 0, sizeof l);
    layout_add(&l, "w", 2, 10, 100);
    dt_ps_client *c = client_new(&fc, &l, DT_PLACE_GREEDY, 100);
    static const int64_t rows[] = {4, 3, 3}, begin[] = {0, 4, 7};
    for (int k = 0; k < 3; k++) {
        dt_ps_unit u;
        dt_ps_client_unit(c, k, &u);
        char want[32];
        snprintf(want, sizeof want, "w/part_%d", k);
        ck_assert_str_eq(u.name, want);
        ck_assert_int_eq(u.rows, rows[k]);
        ck_assert_int_eq(u.row_begin, begin[k]);
        ck_assert_uint_eq(u.nbytes, (size_t)rows[k] * 400);
    }
    check_slices_spread(c);
    dt_ps_client_free(c);
}
END_TEST

/* Several partitioned variables of various sizes under greedy: every slice
 * of a variable on its own task, and the load still balanced. */
START_TEST(test_greedy_spreads_slices) {
    for (int num_ps = 2; num_ps <= 4; num_ps++) {
        fake_cluster fc;
        cluster_make(&fc, num_ps);
        layout l;
        mixed_layout(&l);
        dt_ps_client *c = client_new(&fc, &l, DT_PLACE_GREEDY, 600);
        int n = check_units(c, &l, num_ps, 600);
        ck_assert_int_gt(n, l.set.count); /* something was cut */
        check_slices_spread(c);
        int64_t load[MAX_TEST_PS], largest, total = 0, max = 0;
        loads(c, load, &largest);
        for (int p = 0; p < num_ps; p++) {
            total += load[p];
            if (load[p] > max) max = load[p];
        }
        ck_assert_msg(max * num_ps <= total + largest * num_ps,
                      "%d ps: max load %lld > mean + largest unit %lld", num_ps, (long long)max,
                      (long long)largest);
        dt_ps_client_free(c);
    }
}
END_TEST

START_TEST(test_placement_names) {
    ck_assert_int_eq(dt_placement_from_name("greedy"), DT_PLACE_GREEDY);
    ck_assert_int_eq(dt_placement_from_name("round_robin"), DT_PLACE_ROUND_ROBIN);
    ck_assert_int_eq(dt_placement_from_name("Greedy"), -1);
    ck_assert_int_eq(dt_placement_from_name(""), -1);
}
END_TEST

START_TEST(test_errors) {
    /* A name that leaves no room for "/part_<k>". */
    fake_cluster fc;
    cluster_make(&fc, 2);
    layout l;
    memset(&l, 0, sizeof l);
    char name[DT_TENSOR_NAME_MAX];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    layout_add(&l, name, 2, 100, 10);
    dt_ps_client_params p = {.cluster = &fc.cluster,
                             .worker = 0,
                             .timeout_ms = 1000,
                             .placement = {DT_PLACE_GREEDY, 100}};
    dt_ps_client *c = (dt_ps_client *)(uintptr_t)1; /* must be reset to NULL */
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_ps_client_new(&p, &l.set, &c, &err), DT_EINVAL);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(err.msg, "too long to partition") && strstr(err.msg, "nnnn"),
                  "message: %s", err.msg);
    /* The same variable kept whole is fine. */
    p.placement.partition_min_bytes = 0;
    dt_err_clear(&err);
    ck_assert_msg(dt_ps_client_new(&p, &l.set, &c, &err) == 0, "%s", err.msg);
    dt_ps_client_free(c);

    /* More ps tasks than a client can address. */
    cluster_make(&fc, DT_MAX_PS + 1);
    memset(&l, 0, sizeof l);
    layout_add(&l, "w", 1, 10, 0);
    p.cluster = &fc.cluster;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_ps_client_new(&p, &l.set, &c, &err), DT_EINVAL);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(err.msg, "65 ps tasks"), "message: %s", err.msg);
    dt_ps_client_free(NULL);
}
END_TEST

Suite *placement_suite(void) {
    Suite *s = suite_create("placement");
    TCase *tc = tcase_create("placement");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_greedy_balance);
    tcase_add_test(tc, test_greedy_by_hand);
    tcase_add_test(tc, test_round_robin);
    tcase_add_test(tc, test_partition_rule);
    tcase_add_test(tc, test_greedy_spreads_slices);
    tcase_add_test(tc, test_placement_names);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    return s;
}
