/*
 * tensor: spec checks (every bound, and sizes that would wrap), sets,
 * lookup and layout comparison.
 */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "suites.h"
#include "tensor.h"

static dt_tensor spec(const char *name, int dtype, int ndim, int64_t d0, int64_t d1) {
    dt_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", name);
    t.dtype = dtype;
    t.ndim = ndim;
    t.shape[0] = d0;
    t.shape[1] = d1;
    return t;
}

/* Checks t and returns its code; the message goes to msg. */
static int check_spec(dt_tensor *t, char *msg) {
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_tensor_check_spec(t, &err);
    strcpy(msg, err.msg);
    return rc;
}

/* Shapes whose byte count wraps 64 bits are refused, not sized 0. */
START_TEST(test_spec_overflow) {
    const int64_t cases[][2] = {{(int64_t)1 << 31, (int64_t)1 << 31},
                                {(int64_t)1 << 32, (int64_t)1 << 32},
                                {(int64_t)1 << 40, 2},
                                {INT64_MAX, INT64_MAX}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dt_tensor t;
        memset(&t, 0, sizeof t);
        strcpy(t.name, "huge");
        t.dtype = DT_DTYPE_F32;
        t.ndim = 2;
        t.shape[0] = cases[i][0];
        t.shape[1] = cases[i][1];
        dt_err err;
        dt_err_clear(&err);
        ck_assert_msg(dt_tensor_check_spec(&t, &err) == DT_EINVAL, "case %zu accepted (%zu bytes)",
                      i, t.nbytes);
        ck_assert(strstr(err.msg, "larger than 2^40 bytes"));
    }
    dt_tensor ok;
    memset(&ok, 0, sizeof ok);
    strcpy(ok.name, "edge");
    ok.dtype = DT_DTYPE_F32;
    ok.ndim = 2;
    ok.shape[0] = (int64_t)1 << 19;
    ok.shape[1] = (int64_t)1 << 19; /* exactly 2^40 bytes */
    ck_assert_int_eq(dt_tensor_check_spec(&ok, NULL), 0);
    ck_assert_uint_eq(ok.nbytes, (size_t)1 << 40);
}
END_TEST

/* Each rule of a spec, and the message that names it. */
START_TEST(test_spec_rules) {
    char msg[DT_ERR_MSG_MAX];
    dt_tensor t = spec("w", DT_DTYPE_F64, 2, 3, 4);
    ck_assert_int_eq(check_spec(&t, msg), 0);
    ck_assert_uint_eq(t.nbytes, 3 * 4 * 8);
    ck_assert_int_eq(dt_tensor_numel(&t), 12);

    t = spec("step", DT_DTYPE_I64, 0, 0, 0); /* a scalar: one element */
    ck_assert_int_eq(check_spec(&t, msg), 0);
    ck_assert_uint_eq(t.nbytes, 8);
    ck_assert_int_eq(dt_tensor_numel(&t), 1);

    t = spec("w", 7, 1, 2, 0);
    ck_assert_int_eq(check_spec(&t, msg), DT_EINVAL);
    ck_assert_msg(strstr(msg, "tensor w: unknown dtype 7"), "%s", msg);

    t = spec("w", DT_DTYPE_F32, DT_TENSOR_MAX_DIMS + 1, 1, 1);
    ck_assert_int_eq(check_spec(&t, msg), DT_EINVAL);
    ck_assert_msg(strstr(msg, "5 dimensions (at most 4)"), "%s", msg);
    t.ndim = -1;
    ck_assert_int_eq(check_spec(&t, msg), DT_EINVAL);

    const int64_t bad_dims[] = {0, -1, INT64_MIN};
    for (size_t i = 0; i < sizeof bad_dims / sizeof bad_dims[0]; i++) {
        t = spec("w", DT_DTYPE_F32, 2, 4, bad_dims[i]);
        ck_assert_int_eq(check_spec(&t, msg), DT_EINVAL);
        ck_assert_msg(strstr(msg, "tensor w: dimension 1 is"), "%s", msg);
    }

    t = spec("", DT_DTYPE_F32, 1, 1, 0);
    ck_assert_int_eq(check_spec(&t, msg), DT_EINVAL);
    memset(t.name, 'a', sizeof t.name); /* no NUL anywhere */
    ck_assert_int_eq(check_spec(&t, msg), DT_EINVAL);
    ck_assert_msg(strstr(msg, "name longer than 127 bytes"), "%s", msg);
}
END_TEST

START_TEST(test_dtype_names) {
    const int dtypes[] = {DT_DTYPE_F32, DT_DTYPE_F64, DT_DTYPE_I32, DT_DTYPE_I64};
    const size_t sizes[] = {4, 8, 4, 8};
    for (int i = 0; i < 4; i++) {
        ck_assert_uint_eq(dt_dtype_size(dtypes[i]), sizes[i]);
        ck_assert_int_eq(dt_dtype_from_name(dt_dtype_name(dtypes[i])), dtypes[i]);
    }
    ck_assert_str_eq(dt_dtype_name(DT_DTYPE_F32), "F32");
    ck_assert_ptr_null(dt_dtype_name(DT_DTYPE_INVALID));
    ck_assert_uint_eq(dt_dtype_size(DT_DTYPE_INVALID), 0);
    ck_assert_int_eq(dt_dtype_from_name("BF16"), DT_DTYPE_INVALID);
}
END_TEST

/* A set is one zeroed, aligned slab; views do not overlap; names are
 * unique; a failed init leaves the set empty. */
START_TEST(test_sets) {
    dt_tensor specs[3] = {spec("a", DT_DTYPE_F32, 2, 3, 5), spec("b", DT_DTYPE_F64, 1, 7, 0),
                          spec("c", DT_DTYPE_I64, 0, 0, 0)};
    dt_tensors ts;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_tensors_init(&ts, specs, 3, &err), 0);
    ck_assert_int_eq(ts.count, 3);
    ck_assert_uint_eq((uintptr_t)ts.slab % 64, 0);
    for (size_t i = 0; i < ts.slab_bytes; i++)
        ck_assert_int_eq(((unsigned char *)ts.slab)[i], 0);
    for (int i = 0; i < 3; i++) {
        const char *lo = ts.items[i].data, *hi = lo + ts.items[i].nbytes;
        ck_assert(lo >= (char *)ts.slab && hi <= (char *)ts.slab + ts.slab_bytes);
        for (int j = i + 1; j < 3; j++) {
            const char *lo2 = ts.items[j].data;
            ck_assert(hi <= lo2 || lo2 + ts.items[j].nbytes <= lo);
        }
    }
    ck_assert_ptr_eq(dt_tensors_find(&ts, "b"), &ts.items[1]);
    ck_assert_ptr_null(dt_tensors_find(&ts, "d"));
    dt_tensors_deinit(&ts);
    dt_tensors_deinit(&ts); /* safe twice */

    specs[2] = spec("a", DT_DTYPE_F32, 1, 1, 0);
    ck_assert_int_eq(dt_tensors_init(&ts, specs, 3, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "duplicate name a"), "%s", err.msg);
    ck_assert_int_eq(ts.count, 0);
    ck_assert_ptr_null(ts.slab);
    dt_err_clear(&err);
    specs[2] = spec("z", DT_DTYPE_F32, 2, (int64_t)1 << 31, (int64_t)1 << 31);
    ck_assert_int_eq(dt_tensors_init(&ts, specs, 3, &err), DT_EINVAL);
    ck_assert_ptr_null(ts.items);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_tensors_init(&ts, specs, -1, &err), DT_EINVAL);
}
END_TEST

Suite *tensor_suite(void) {
    Suite *s = suite_create("tensor");
    TCase *tc = tcase_create("tensor");
    tcase_add_test(tc, test_spec_rules);
    tcase_add_test(tc, test_spec_overflow);
    tcase_add_test(tc, test_dtype_names);
    tcase_add_test(tc, test_sets);
    suite_add_tcase(s, tc);
    return s;
}
