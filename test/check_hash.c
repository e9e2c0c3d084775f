/*
 * hash suite: xxHash64 against published test vectors (the reference
 * implementation's values, lengths 0 to 65 so every branch of the spec
 * runs), splitmix64's finaliser against splitmix64's first outputs, and the
 * feature hashes: pinned values, range, column separation, spread.
 */
#include <stdio.h>
#include <string.h>

#include "hash.h"
#include "suites.h"

/* "0123456789:;<=>?@ABC...": the first len bytes of the characters from
 * '0' on, as in the reference's sanity test. */
static void ramp(char *buf, size_t len) {
    for (size_t i = 0; i < len; i++)
        buf[i] = (char)('0' + i);
}

START_TEST(test_xxh64_vectors) {
    static const struct {
        size_t len;
        uint64_t seed0, seed_x; /* seed 0, seed 0x1234567890abcdef */
    } v[] = {
        {0, 0xef46db3751d8e999ULL, 0xa2f5c44d0f46c872ULL},
        {1, 0x633457081244afecULL, 0xf47ebf7f5cb6795bULL},
        {4, 0x4c33072b45647dcbULL, 0xe19fff0227e3b861ULL},
        {7, 0x97ee4fe4a0ff4dfaULL, 0x281fef0a47387bf4ULL},
        {8, 0xe4ba22a49ad89d3fULL, 0x5981b4a4e0a07d38ULL},
        {9, 0x43ecc9248bc07d20ULL, 0xc2fc855460180ba2ULL},
        {13, 0x46a4c93f9ee1767eULL, 0x1ace702635ab26fdULL},
        {31, 0xc506e23012915790ULL, 0xa2c0eddf74983bfeULL},
        {32, 0x96ee2fa935fdd556ULL, 0x1396bc2a00938b77ULL},
        {33, 0xa5cdc6940c6fde9eULL, 0x65cd9ed37dff8753ULL},
        {45, 0x3f55f9f87adb6b04ULL, 0xd648279ebd0dfc59ULL},
        {64, 0x3fe627fabdb30aeaULL, 0xd2ff1b3750571f15ULL},
        {65, 0xeddce6ec01f7e595ULL, 0xb0aa81bc38df17b9ULL},
    };
    char buf[80];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        ramp(buf, v[i].len);
        ck_assert_msg(dt_hash_xxh64(buf, v[i].len, 0) == v[i].seed0, "len %zu seed 0: %016llx",
                      v[i].len, (unsigned long long)dt_hash_xxh64(buf, v[i].len, 0));
        ck_assert_msg(dt_hash_xxh64(buf, v[i].len, 0x1234567890abcdefULL) == v[i].seed_x,
                      "len %zu seed x: %016llx", v[i].len,
                      (unsigned long long)dt_hash_xxh64(buf, v[i].len, 0x1234567890abcdefULL));
    }
    ck_assert(dt_hash_xxh64(NULL, 0, 0) == 0xef46db3751d8e999ULL);
    ck_assert(dt_hash_xxh64("abc", 3, 0) == 0x44bc2cf5ad770999ULL);
    ck_assert(dt_hash_xxh64("a", 1, 0) == 0xd24ec4f1a98c6e5bULL);
    /* The bytes are read wherever they sit: an unaligned start hashes alike. */
    char shifted[80];
    ramp(shifted + 1, 65);
    ck_assert(dt_hash_xxh64(shifted + 1, 65, 0) == 0xeddce6ec01f7e595ULL);
}
END_TEST

START_TEST(test_mix64) {
    /* splitmix64 seeded 0: state += 0x9e3779b97f4a7c15, output mix64(state). */
    ck_assert(dt_hash_mix64(0x9e3779b97f4a7c15ULL) == 0xe220a8397b1dcdafULL);
    ck_assert(dt_hash_mix64(0x3c6ef372fe94f82aULL) == 0x6e789e6aa1b965f4ULL);
    ck_assert(dt_hash_mix64(0) == 0);
}
END_TEST

START_TEST(test_feature_ids) {
    /* Pinned: a change here renumbers every hashed feature of a saved model. */
    ck_assert_int_eq(dt_hash_feature(14, "68fd1e64", 8, 20),
                     (int64_t)(dt_hash_xxh64("68fd1e64", 8, 14) & 0xfffff));
    ck_assert_int_eq(dt_hash_feature(0, "", 0, 40),
                     (int64_t)(0xef46db3751d8e999ULL & ((1ULL << 40) - 1)));
    ck_assert_int_eq(dt_hash_feature(0, "abc", 3, 12), 0x999);
    /* The same value in two columns: two ids (at 2^40 buckets, a
     * collision would be a 2^-40 accident). */
    ck_assert_int_ne(dt_hash_feature(14, "68fd1e64", 8, 40),
                     dt_hash_feature(15, "68fd1e64", 8, 40));
    /* A libsvm index is hashed as its 8 little-endian bytes. */
    unsigned char le[8] = {0x39, 0x30, 0, 0, 0, 0, 0, 0}; /* 12345 */
    ck_assert_int_eq(dt_hash_index(12345, 24), (int64_t)(dt_hash_xxh64(le, 8, 0) & 0xffffff));
    for (int bits = 1; bits <= DT_HASH_MAX_BITS; bits++) {
        int64_t id = dt_hash_feature(3, "x", 1, bits), ix = dt_hash_index((int64_t)1 << 39, bits);
        ck_assert(id >= 0 && id < ((int64_t)1 << bits));
        ck_assert(ix >= 0 && ix < ((int64_t)1 << bits));
    }
}
END_TEST

START_TEST(test_feature_spread) {
    /* 64k distinct values into 256 buckets: each bucket should get about
     * 256; a biased hash (say, one that ignored a byte) would not. */
    enum { VALUES = 65536, BUCKETS = 256 };
    int count[BUCKETS] = {0};
    char text[16];
    for (int i = 0; i < VALUES; i++) {
        int n = snprintf(text, sizeof text, "%08x", (unsigned)i);
        count[dt_hash_feature(20, text, (size_t)n, 8)]++;
    }
    int lo = VALUES, hi = 0;
    for (int b = 0; b < BUCKETS; b++) {
        lo = count[b] < lo ? count[b] : lo;
        hi = count[b] > hi ? count[b] : hi;
    }
    /* sd of a bucket is sqrt(256) = 16: 6 sd either way. */
    ck_assert_msg(lo > 256 - 96 && hi < 256 + 96, "buckets from %d to %d", lo, hi);
}
END_TEST

Suite *hash_suite(void) {
    Suite *s = suite_create("hash");
    TCase *tc = tcase_create("hash");
    tcase_add_test(tc, test_xxh64_vectors);
    tcase_add_test(tc, test_mix64);
    tcase_add_test(tc, test_feature_ids);
    tcase_add_test(tc, test_feature_spread);
    suite_add_tcase(s, tc);
    return s;
}
