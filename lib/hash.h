/*
 * hash: the stable hashes of sparse models. Each one is frozen: a row's
 * place, its initial value and a hashed feature's id are functions of
 * these, so changing one would move every row of a saved table and give
 * every hashed feature another id. test/check_hash.c pins their values.
 *
 *   dt_hash_xxh64  xxHash64 (Yann Collet's XXH64), written from its
 *                  specification (xxhash.com, "xxHash fast digest
 *                  algorithm", XXH64 section): bytes read little-endian
 *                  whatever the host, so every machine gets the same
 *                  value. Any xxHash library gives the same numbers, e.g.
 *                  Python's `xxhash.xxh64(data, seed=s).intdigest()`.
 *   dt_hash_mix64  splitmix64's finaliser (Steele, Lea and Flood, 2014;
 *                  the constants of Stafford's "Mix13"): a bijection of
 *                  64-bit words, for integer keys (row ids).
 *
 * Feature hashing (Weinberger et al., 2009; the "hashing trick" of Vowpal
 * Wabbit and TF's categorical_column_with_hash_bucket): a categorical value
 * becomes the id
 *     id = xxh64(value bytes, seed = column) mod 2^hash_bits
 * where column is the value's 0-based field in its line (Criteo: the label
 * is field 0, I1..I13 are 1..13, C1..C26 are 14..39). The column is the
 * seed, so the same string in two columns gives two unrelated ids. The
 * bytes are the field as written in the file, without trimming or case
 * folding. A libsvm index i hashed into hash_bits buckets is
 *     id = xxh64(i as 8 little-endian bytes, seed = 0) mod 2^hash_bits.
 * Both depend on nothing but their inputs: every run, machine and worker
 * gets the same ids.
 *
 * Stateless; safe from any thread.
 */
#ifndef DT_HASH_H
#define DT_HASH_H

#include <stddef.h>
#include <stdint.h>

/* The most hash_bits a feature hash takes: ids below 2^40, the most rows a
 * table has. */
#define DT_HASH_MAX_BITS 40

/* XXH64 of the len bytes at data with seed. data may be NULL when len is 0. */
uint64_t dt_hash_xxh64(const void *data, size_t len, uint64_t seed);

/* splitmix64's finaliser: z ^= z >> 30; z *= 0xbf58476d1ce4e5b9;
 * z ^= z >> 27; z *= 0x94d049bb133111eb; z ^= z >> 31. */
uint64_t dt_hash_mix64(uint64_t z);

/* The id of the categorical value (len bytes) of field column, in
 * [0, 2^hash_bits); hash_bits is 1..DT_HASH_MAX_BITS (else a bug: aborts). */
int64_t dt_hash_feature(int column, const char *value, size_t len, int hash_bits);

/* The id of libsvm index i hashed into 2^hash_bits buckets (bits as above). */
int64_t dt_hash_index(int64_t index, int hash_bits);

#endif
