/*
 * text: the name rule shared by every message and file, and log escaping.
 */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "suites.h"
#include "text.h"

static int check(const char *s, size_t n, char *msg) {
    dt_err err;
    dt_err_clear(&err);
    int rc = dt_text_check_name(s, n, 127, "t", &err);
    strcpy(msg, err.msg);
    return rc;
}

START_TEST(test_names) {
    char msg[DT_ERR_MSG_MAX];
    ck_assert_int_eq(check("layer0/weight", 13, msg), 0);
    ck_assert_int_eq(check("gewicht/\xc3\xa4", 10, msg), 0); /* U+00E4 */
    ck_assert_int_eq(check("\xf0\x9f\x99\x82", 4, msg), 0);  /* U+1F642 */
    static const struct {
        const char *s;
        size_t n;
        const char *needle;
    } bad[] = {
        {"", 0, "empty name"},
        {"w\0x", 3, "NUL byte at 1"},
        {"w\n", 2, "control byte 0x0a at 1"},
        {"\x7f", 1, "control byte 0x7f"},
        {"w\xff", 2, "not valid UTF-8 at byte 1"},
        {"\xc0\xaf", 2, "not valid UTF-8"},         /* overlong '/' */
        {"\xed\xa0\x80", 3, "not valid UTF-8"},     /* a surrogate */
        {"\xf4\x90\x80\x80", 4, "not valid UTF-8"}, /* above U+10FFFF */
        {"\xe2\x82", 2, "not valid UTF-8"},         /* cut short */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(check(bad[i].s, bad[i].n, msg) == DT_EINVAL, "case %zu accepted", i);
        ck_assert_msg(strstr(msg, bad[i].needle), "case %zu: \"%s\" lacks \"%s\"", i, msg,
                      bad[i].needle);
    }
    char longname[129];
    memset(longname, 'a', 128);
    ck_assert_int_eq(check(longname, 127, msg), 0);
    ck_assert_int_eq(check(longname, 128, msg), DT_EINVAL);
    ck_assert(strstr(msg, "128 bytes"));
}
END_TEST

/* Free text a ps keeps and echoes (a failure's reason): empty is fine;
 * control bytes, invalid UTF-8 and too much are not. */
START_TEST(test_lines) {
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_text_check_line("", 0, 255, "f", &err), 0);
    ck_assert_int_eq(dt_text_check_line("chief: caf\xc3\xa9.csv: open", 22, 255, "f", &err), 0);
    ck_assert_int_eq(dt_text_check_line("a\nb", 3, 255, "f", &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "f: text contains control byte 0x0a at 1"), "%s", err.msg);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_text_check_line("caf\xc3", 4, 255, "f", &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "not valid UTF-8 at byte 3"), "%s", err.msg);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_text_check_line("abcd", 4, 3, "f", &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "4 bytes (at most 3)"), "%s", err.msg);
}
END_TEST

START_TEST(test_escape) {
    char out[64];
    const char in[] = "a\nb\\c\x1b[2J\xff\xc3\xa4\t";
    size_t n = dt_text_escape(out, sizeof out, in, sizeof in - 1);
    ck_assert_str_eq(out, "a\\nb\\\\c\\x1b[2J\\xff\xc3\xa4\\t");
    ck_assert_uint_eq(n, strlen(out));
    /* A full buffer stops at a whole escape, never half of one. */
    char small[5];
    dt_text_escape(small, sizeof small, "ab\ncd", 5);
    ck_assert_str_eq(small, "ab\\n");
    dt_text_escape(small, 4, "ab\ncd", 5);
    ck_assert_str_eq(small, "ab");
}
END_TEST

/* The valid prefix stops at the first byte of a bad sequence: a stray
 * continuation, an overlong form, a surrogate, a code point past U+10FFFF,
 * a sequence cut short. Control bytes and NUL are valid UTF-8. */
START_TEST(test_utf8_prefix) {
    static const struct {
        const char *s;
        size_t n, want;
    } cases[] = {
        {"", 0, 0},
        {"caf\xc3\xa9 \t\x01", 8, 8},
        {"a\0b", 3, 3},
        {"ab\x80", 3, 2},
        {"a\xc0\xafz", 4, 1},        /* overlong "/" */
        {"ab\xed\xa0\x80", 5, 2},    /* U+D800 */
        {"\xf4\x90\x80\x80", 4, 0},  /* U+110000 */
        {"\xf0\x9f\x98\x80x", 5, 5}, /* U+1F600 */
        {"xy\xe2\x82", 4, 2},        /* cut short */
        {"\xe0\x9f\xbf", 3, 0},      /* overlong U+07FF */
        {"a\xf0\x8f\xbf\xbf", 5, 1}, /* overlong U+FFFF */
        {"\xf4\x8f\xbf\xbf", 4, 4},  /* U+10FFFF */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(dt_text_utf8_prefix((const unsigned char *)cases[i].s, cases[i].n) ==
                          cases[i].want,
                      "case %zu", i);
}
END_TEST

/* Digits only, within max; nothing is written on a refusal. */
/* The "want ..." list of a refusal: one name, two, three; quoted or not;
 * cut short (never past the buffer) when it does not fit. */
START_TEST(test_choices) {
    const char *const none[] = {NULL};
    const char *const one[] = {"sgd", NULL};
    const char *const two[] = {"sum", "concat", NULL};
    const char *const three[] = {"async", "sync", "bounded", NULL};
    char buf[64];
    ck_assert_str_eq(dt_text_choices(buf, sizeof buf, none, 0), "");
    ck_assert_str_eq(dt_text_choices(buf, sizeof buf, one, 1), "\"sgd\"");
    ck_assert_str_eq(dt_text_choices(buf, sizeof buf, two, 0), "sum or concat");
    ck_assert_str_eq(dt_text_choices(buf, sizeof buf, three, 0), "async, sync or bounded");
    ck_assert_str_eq(dt_text_choices(buf, sizeof buf, three, 1),
                     "\"async\", \"sync\" or \"bounded\"");
    char small[10];
    memset(small, '#', sizeof small);
    ck_assert_str_eq(dt_text_choices(small, sizeof small, three, 0), "async, sy");
}
END_TEST

START_TEST(test_parse_decimal) {
    uint64_t v = 7;
    ck_assert_int_eq(dt_text_parse_decimal("0", 10, &v), 0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(dt_text_parse_decimal("0012", 100, &v), 0);
    ck_assert_uint_eq(v, 12);
    ck_assert_int_eq(dt_text_parse_decimal("9223372036854775807", INT64_MAX, &v), 0);
    ck_assert_uint_eq(v, INT64_MAX);
    ck_assert_int_eq(dt_text_parse_decimal("18446744073709551615", UINT64_MAX, &v), 0);
    ck_assert_uint_eq(v, UINT64_MAX);
    v = 7;
    static const char *const bad[] = {"",
                                      "-1",
                                      "+1",
                                      " 1",
                                      "1 ",
                                      "1e3",
                                      "0x10",
                                      "1.0",
                                      "9223372036854775808",
                                      "18446744073709551616"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t max = i == sizeof bad / sizeof bad[0] - 1 ? UINT64_MAX : INT64_MAX;
        ck_assert_msg(dt_text_parse_decimal(bad[i], max, &v) == -1, "\"%s\"", bad[i]);
    }
    ck_assert_int_eq(dt_text_parse_decimal("11", 10, &v), -1);
    ck_assert_int_eq(dt_text_parse_decimal("4294967296", UINT32_MAX, &v), -1);
    ck_assert_uint_eq(v, 7);
}
END_TEST

Suite *text_suite(void) {
    Suite *s = suite_create("text");
    TCase *tc = tcase_create("text");
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_lines);
    tcase_add_test(tc, test_escape);
    tcase_add_test(tc, test_utf8_prefix);
    tcase_add_test(tc, test_parse_decimal);
    tcase_add_test(tc, test_choices);
    suite_add_tcase(s, tc);
    return s;
}
