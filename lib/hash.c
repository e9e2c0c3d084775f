/*
 * hash: xxHash64 from its specification, splitmix64's finaliser, and the
 * feature hashes built on them (hash.h says what each is and why they are
 * frozen).
 *
 * XXH64 in short, all arithmetic mod 2^64, P1..P5 the primes below:
 *   round(acc, lane)  = rotl(acc + lane * P2, 31) * P1
 *   inputs of 32 bytes or more: four accumulators v1 = seed + P1 + P2,
 *     v2 = seed + P2, v3 = seed, v4 = seed - P1 each take one 8-byte lane
 *     of every 32-byte stripe; then
 *     acc = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18) and for
 *     each v: acc = (acc ^ round(0, v)) * P1 + P4
 *   shorter inputs: acc = seed + P5
 *   acc += length; then the rest, 8 bytes at a time
 *     acc = rotl(acc ^ round(0, lane), 27) * P1 + P4,
 *   4 bytes once: acc = rotl(acc ^ (lane32 * P1), 23) * P2 + P3,
 *   single bytes: acc = rotl(acc ^ (byte * P5), 11) * P1
 *   avalanche: acc ^= acc >> 33; acc *= P2; acc ^= acc >> 29; acc *= P3;
 *     acc ^= acc >> 32.
 *
 * Threading: no state.
 */
#include "hash.h"

#include "err.h"

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static uint64_t rotl(uint64_t x, int r) {
    return (x << r) | (x >> (64 - r));
}

/* Little-endian loads, byte by byte: the same on every host. */
static uint64_t load64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t load32(const unsigned char *p) {
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
}

static uint64_t round64(uint64_t acc, uint64_t lane) {
    return rotl(acc + lane * P2, 31) * P1;
}

static uint64_t merge(uint64_t acc, uint64_t v) {
    return (acc ^ round64(0, v)) * P1 + P4;
}

uint64_t dt_hash_xxh64(const void *data, size_t len, uint64_t seed) {
    const unsigned char *p = data, *end = p + len;
    uint64_t acc;
    if (len >= 32) {
        uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
        for (; end - p >= 32; p += 32) {
            v1 = round64(v1, load64(p));
            v2 = round64(v2, load64(p + 8));
            v3 = round64(v3, load64(p + 16));
            v4 = round64(v4, load64(p + 24));
        }
        acc = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
        acc = merge(merge(merge(merge(acc, v1), v2), v3), v4);
    } else {
        acc = seed + P5;
    }
    acc += (uint64_t)len;
    for (; end - p >= 8; p += 8)
        acc = rotl(acc ^ round64(0, load64(p)), 27) * P1 + P4;
    if (end - p >= 4) {
        acc = rotl(acc ^ (load32(p) * P1), 23) * P2 + P3;
        p += 4;
    }
    for (; p < end; p++)
        acc = rotl(acc ^ (*p * P5), 11) * P1;
    acc ^= acc >> 33;
    acc *= P2;
    acc ^= acc >> 29;
    acc *= P3;
    return acc ^ (acc >> 32);
}

uint64_t dt_hash_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int64_t bucket(uint64_t h, int hash_bits) {
    DT_ASSERT(hash_bits >= 1 && hash_bits <= DT_HASH_MAX_BITS);
    return (int64_t)(h & ((1ULL << hash_bits) - 1));
}

int64_t dt_hash_feature(int column, const char *value, size_t len, int hash_bits) {
    DT_ASSERT(column >= 0);
    return bucket(dt_hash_xxh64(value, len, (uint64_t)column), hash_bits);
}

int64_t dt_hash_index(int64_t index, int hash_bits) {
    unsigned char bytes[8];
    for (int i = 0; i < 8; i++)
        bytes[i] = (unsigned char)((uint64_t)index >> (8 * i));
    return bucket(dt_hash_xxh64(bytes, sizeof bytes, 0), hash_bits);
}
