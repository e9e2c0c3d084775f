/*
 * criteo_gen: synthetic click logs in the Criteo display-ads layout
 * (lib/sparse_reader.h), drawn from a known hidden logistic model, so
 * tests and benchmarks can make 10^5 to 10^7 rows without a download and
 * know the best log loss a model can reach on them.
 *
 * Every row is a pure function of (seed, row index): a splitmix64 stream
 * started at mix64(seed_key + (i + 1) * 0x9e3779b97f4a7c15). Nothing grows
 * with the rows or the vocabularies (no table of values or weights is
 * kept), so memory is constant whatever the size, and the same seed gives
 * the same file byte for byte on every machine.
 *
 * The columns, each with a missing rate close to the real data's:
 *   I1..I13   counts: x = floor(exp(mu_d + s_d z)) - 1 with z standard
 *             normal (I2 is -1 one time in ten, as the real I2 has small
 *             negative values); the model sees f_d = log(1 + x) for x > 0,
 *             else 0 (dt_criteo_dense), 0 when missing.
 *   C1..C26   categorical: column c has V_c values (the Kaggle data's
 *             cardinalities times vocab_scale, at least 2). A value's rank
 *             k = floor(V_c^u) for u uniform in [0, 1) is log-uniform
 *             (P(k) ~ 1/k): a few values are frequent, most are rare. Rank
 *             k is written as 8 hex digits, a bijection of k keyed by
 *             (seed, c), so distinct values never share a string.
 * The hidden model: P(y = 1) = sigmoid(b + sum_d a_d (f_d - mu_d) +
 * sum_c w_c(k_c)), the sum over d on every row (f_d 0 when missing, as the
 * model sees it) and over c the columns present, with a_d ~ N(0, 0.15^2) and
 * w_c(k) ~ N(0, sigma_c^2) / sqrt(1 + k / 100), sigma_c 0.2 to 0.6 by
 * column: rare values matter less, as in real logs, so a model that learns
 * the frequent ones can come close to the hidden one. Weights are hashes
 * of (seed, column, rank), never stored. Hashing (column, value) into
 * 2^hash_bits ids and the integers through log(1 + x), a logistic
 * regression can represent the hidden model exactly (up to hash
 * collisions); its log loss on the data is the target (report.log_loss).
 * The bias b is set once per seed so that a quarter of the rows are clicks
 * (the real data has 25.6%): the b in [-20, 20] that makes the mean of
 * P(y = 1) 0.25 over the first 4096 rows' features, by bisection.
 */
#ifndef DT_CRITEO_GEN_H
#define DT_CRITEO_GEN_H

#include <stdint.h>

#include "err.h"

typedef struct {
    int64_t rows;       /* N >= 1 */
    uint64_t seed;      /* any */
    double vocab_scale; /* (0, 1]: the real cardinalities times this (1: 33M values in all) */
    int labels;         /* 1: label first (train.txt); 0: the 39 fields after it (test.txt) */
} dt_criteo_gen_params;

typedef struct {
    int64_t rows;
    int64_t positives;    /* labels drawn 1 (written or not) */
    double log_loss;      /* mean -log P(y | x) of the hidden model on the rows written */
    double base_log_loss; /* the same for a constant P(y = 1) = positives / rows */
    int64_t vocabulary;   /* sum of V_c: distinct categorical values possible */
    double bias;          /* the hidden model's b */
} dt_criteo_gen_report;

/* Defaults: rows 100000, seed 1, vocab_scale 0.01, labels 1. */
void dt_criteo_gen_defaults(dt_criteo_gen_params *p);

/*
 * Writes p->rows rows to path ("-": standard output; a name ending in
 * ".gz": gzip). A regular file is written through a temporary file renamed
 * into place at the end, so a failed run leaves no partial file; a path
 * that exists and is not a regular file (/dev/null, a pipe) is written as
 * it is. report (may be NULL) says what was
 * written. Errors: a parameter out of range (DT_EINVAL naming it), DT_EIO
 * naming the file and errno.
 */
int dt_criteo_gen_write(const dt_criteo_gen_params *p, const char *path,
                        dt_criteo_gen_report *report, dt_err *err) DT_WARN_UNUSED;

/* The hidden model of a parameter set: the parameters and the bias. */
typedef struct {
    dt_criteo_gen_params params;
    double bias;
} dt_criteo_gen_model;

/* Checks p (errors as dt_criteo_gen_write's) and works out the bias (a
 * pass over 4096 rows' features). */
int dt_criteo_gen_init(const dt_criteo_gen_params *p, dt_criteo_gen_model *out,
                       dt_err *err) DT_WARN_UNUSED;

/* Row i as the file has it (with its newline, NUL-terminated) into line
 * (cap >= 512 bytes), P(y = 1) under the hidden model into *p1 and the
 * label drawn into *label (written or not: a file without labels has the
 * rows of the labeled one). For tests, which check the file and the model
 * against each other. */
void dt_criteo_gen_row(const dt_criteo_gen_model *m, int64_t i, char *line, size_t cap, double *p1,
                       int *label);

/* The hidden model's mean log loss on rows first..first+n-1 (n >= 1) of
 * the generator's output: what a perfect fit scores on those rows, which
 * the quality figures of tests and the bench are measured against. */
double dt_criteo_gen_log_loss(const dt_criteo_gen_model *m, int64_t first, int64_t n);

#endif
