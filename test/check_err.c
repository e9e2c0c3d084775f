/*
 * err: the first error wins, wrapping adds context and truncates safely,
 * NULL is allowed everywhere, and every code has a name.
 */
#include <check.h>
#include <string.h>

#include "err.h"
#include "suites.h"

START_TEST(test_first_wins) {
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(err.code, DT_OK);
    ck_assert_str_eq(err.msg, "");
    ck_assert_int_eq(dt_err_set(&err, DT_ENOTFOUND, "file %s: %d", "a", 1), DT_ENOTFOUND);
    ck_assert_int_eq(dt_err_set(&err, DT_EIO, "later"), DT_EIO); /* returns its code... */
    ck_assert_int_eq(err.code, DT_ENOTFOUND);                    /* ...but keeps the first */
    ck_assert_str_eq(err.msg, "file a: 1");
    dt_err_clear(&err);
    ck_assert_int_eq(dt_err_set(&err, DT_EIO, "later"), DT_EIO);
    ck_assert_str_eq(err.msg, "later");
    /* NULL: nothing recorded, the code still comes back. */
    ck_assert_int_eq(dt_err_set(NULL, DT_EINVAL, "x"), DT_EINVAL);
    ck_assert_int_eq(dt_err_wrap(NULL, DT_EIO, "x"), DT_EIO);
    dt_err_clear(NULL);
}
END_TEST

START_TEST(test_wrap) {
    dt_err err;
    dt_err_clear(&err);
    dt_err_set(&err, DT_ECORRUPT, "bad magic");
    ck_assert_int_eq(dt_err_wrap(&err, DT_EIO, "checkpoint %s", "m.ckpt"), DT_ECORRUPT);
    ck_assert_str_eq(err.msg, "checkpoint m.ckpt: bad magic");
    /* Wrapping a clean record sets its code. */
    dt_err_clear(&err);
    ck_assert_int_eq(dt_err_wrap(&err, DT_EIO, "ctx"), DT_EIO);
    ck_assert_str_eq(err.msg, "ctx: ");
    /* Long prefix and long message: truncated, always terminated. */
    char big[2 * DT_ERR_MSG_MAX];
    memset(big, 'p', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    dt_err_clear(&err);
    dt_err_set(&err, DT_EINVAL, "%s", big);
    ck_assert_uint_eq(strlen(err.msg), DT_ERR_MSG_MAX - 1);
    dt_err_wrap(&err, DT_EINVAL, "%s", big);
    ck_assert_uint_lt(strlen(err.msg), DT_ERR_MSG_MAX);
    dt_err_clear(&err);
    dt_err_set(&err, DT_EINVAL, "tail");
    dt_err_wrap(&err, DT_EINVAL, "%s", big);
    ck_assert_uint_lt(strlen(err.msg), DT_ERR_MSG_MAX);
    ck_assert_msg(strstr(err.msg, ": "), "%s", err.msg);
}
END_TEST

START_TEST(test_names) {
    for (int code = DT_EABORTED; code <= DT_OK; code++) {
        const char *name = dt_err_name(code);
        ck_assert_msg(strcmp(name, "unknown error") != 0, "code %d has no name", code);
        for (int other = DT_EABORTED; other < code; other++)
            ck_assert_str_ne(dt_err_name(other), name);
    }
    ck_assert_str_eq(dt_err_name(DT_EABORTED - 1), "unknown error");
    ck_assert_str_eq(dt_err_name(1), "unknown error");
}
END_TEST

Suite *err_suite(void) {
    Suite *s = suite_create("err");
    TCase *tc = tcase_create("err");
    tcase_add_test(tc, test_first_wins);
    tcase_add_test(tc, test_wrap);
    tcase_add_test(tc, test_names);
    suite_add_tcase(s, tc);
    return s;
}
