/*
 * criteo_gen: the generator of Criteo-layout rows from a hidden logistic
 * model (criteo_gen.h describes the columns and the model).
 *
 * Streams: a row's draws come from its own splitmix64 stream; the hidden
 * weights and the value strings are hashes of (seed, column, rank) with
 * their own stream constants, so they are the same in every row.
 *
 * Threading: no state; the caller owns the output.
 */
#include "criteo_gen.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data.h"
#include "hash.h"
#include "sparse_reader.h"

#define GOLDEN 0x9e3779b97f4a7c15ULL
#define STREAM_ROW 0x726f7773000000a1ULL    /* a row's draws */
#define STREAM_WEIGHT 0x77656967687400b3ULL /* hidden weights */
#define STREAM_VALUE 0x76616c75650000c5ULL  /* value strings */
#define CLICK_RATE 0.25
#define CALIBRATION_ROWS 4096
#define DENSE_SD 0.15
#define RANK_DECAY 100.0

/* Kaggle's display advertising challenge: distinct values of C1..C26 in
 * train.txt, and the share of rows where each column is empty. */
static const double cardinality[DT_CRITEO_CAT_COLUMNS] = {
    1460, 583,   10131227, 2202608, 305,  24,   12517, 633,     3,  93145, 5683,   8351593, 3194,
    27,   14992, 5461306,  10,      5652, 2173, 4,     7046547, 18, 15,    286181, 105,     142572};
static const double cat_missing[DT_CRITEO_CAT_COLUMNS] = {
    0, 0, 0.034, 0.034, 0, 0.12, 0,    0,     0,    0.034, 0,     0.034, 0,
    0, 0, 0.034, 0,     0, 0.44, 0.44, 0.034, 0.76, 0,     0.034, 0.44,  0.44};
static const double cat_sd[DT_CRITEO_CAT_COLUMNS] = {0.4, 0.3, 0.5, 0.5, 0.3, 0.4, 0.5, 0.3, 0.2,
                                                     0.4, 0.4, 0.5, 0.3, 0.3, 0.5, 0.5, 0.3, 0.4,
                                                     0.3, 0.2, 0.6, 0.3, 0.3, 0.4, 0.3, 0.4};
/* I1..I13: missing share, and mu, s of the counts' log-normal. */
static const double int_missing[DT_CRITEO_INT_COLUMNS] = {
    0.45, 0, 0.21, 0.22, 0.026, 0.22, 0.043, 0.0005, 0.043, 0.45, 0.043, 0.77, 0.22};
static const double int_mu[DT_CRITEO_INT_COLUMNS] = {0.7, 2,   2.5, 1.5, 7,   3,  1.5,
                                                     2,   3.5, 0.3, 1,   0.3, 1.5};
static const double int_s[DT_CRITEO_INT_COLUMNS] = {1, 2,   1.5, 1, 2.5, 1.7, 1.5,
                                                    1, 1.5, 0.5, 1, 0.8, 1};

void dt_criteo_gen_defaults(dt_criteo_gen_params *p) {
    memset(p, 0, sizeof *p);
    p->rows = 100000;
    p->seed = 1;
    p->vocab_scale = 0.01;
    p->labels = 1;
}

static uint64_t next_u64(uint64_t *state) {
    *state += GOLDEN;
    return dt_hash_mix64(*state);
}

/* Uniform in [0, 1), 53 bits. */
static double uniform(uint64_t *state) {
    return (double)(next_u64(state) >> 11) * 0x1.0p-53;
}

static int64_t vocab_of(const dt_criteo_gen_params *p, int c) {
    double v = floor(cardinality[c] * p->vocab_scale + 0.5);
    return v < 2 ? 2 : (int64_t)v;
}

/* A key for (seed, stream, column, rank). */
static uint64_t key_of(uint64_t seed, uint64_t stream, int column, int64_t rank) {
    uint64_t k = dt_hash_mix64(seed ^ stream) + (uint64_t)(column + 1) * GOLDEN;
    return dt_hash_mix64(dt_hash_mix64(k) + (uint64_t)rank * GOLDEN);
}

/* w_c(k): N(0, sd_c^2) / sqrt(1 + k / 100), the same wherever it is drawn. */
static double cat_weight(uint64_t seed, int c, int64_t rank) {
    uint64_t state = key_of(seed, STREAM_WEIGHT, c, rank);
    return cat_sd[c] * dt_data_normal(&state) / sqrt(1.0 + (double)rank / RANK_DECAY);
}

static double dense_weight(uint64_t seed, int d) {
    uint64_t state = key_of(seed, STREAM_WEIGHT, 100 + d, 0);
    return DENSE_SD * dt_data_normal(&state);
}

/* murmur3's 32-bit finaliser: a bijection of 32-bit words. */
static uint32_t fmix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
}

/* The 8 hex digits of rank k in column c: a bijection of k for ranks
 * below 2^32 (every V_c is), keyed by (seed, c). */
static uint32_t value_code(uint64_t seed, int c, int64_t rank) {
    uint32_t key = (uint32_t)key_of(seed, STREAM_VALUE, c, 0);
    return fmix32((uint32_t)rank + key);
}

/* Writes x in decimal at out; returns the end. */
static char *put_int(char *out, int64_t x) {
    char digits[24];
    int n = 0;
    uint64_t u = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
    do
        digits[n++] = (char)('0' + u % 10);
    while ((u /= 10) > 0);
    if (x < 0) *out++ = '-';
    while (n > 0)
        *out++ = digits[--n];
    return out;
}

static char *put_hex8(char *out, uint32_t v) {
    static const char hex[] = "0123456789abcdef";
    for (int k = 7; k >= 0; k--)
        *out++ = hex[(v >> (4 * k)) & 15];
    return out;
}

static int check_params(const dt_criteo_gen_params *p, dt_err *err) {
    if (p->rows < 1)
        return dt_err_set(err, DT_EINVAL, "gen-criteo: --rows must be >= 1 (got %lld)",
                          (long long)p->rows);
    if (!(p->vocab_scale > 0 && p->vocab_scale <= 1))
        return dt_err_set(err, DT_EINVAL, "gen-criteo: --vocab-scale must be in (0, 1] (got %g)",
                          p->vocab_scale);
    return 0;
}

/* Row i's fields without the label into body (>= 480 bytes), its logit
 * without the bias, and its generator state, ready for the label's draw. */
static double row_body(const dt_criteo_gen_params *p, int64_t i, char *body, uint64_t *state_out) {
    uint64_t state =
        dt_hash_mix64(dt_hash_mix64(p->seed ^ STREAM_ROW) + ((uint64_t)i + 1) * GOLDEN);
    double logit = 0;
    char *out = body;
    for (int d = 0; d < DT_CRITEO_INT_COLUMNS; d++) {
        const double missing = uniform(&state), z = dt_data_normal(&state), neg = uniform(&state);
        double f = 0; /* what the model sees of a missing column */
        if (missing >= int_missing[d]) {
            int64_t x = (int64_t)floor(exp(int_mu[d] + int_s[d] * z)) - 1;
            if (d == 1 && neg < 0.1) x = -1;
            out = put_int(out, x);
            f = dt_criteo_dense(x);
        }
        /* Centred on every row, the column missing or not: a shift of
         * -a_d mu_d on present rows alone would be a term (column d is
         * present) that a weight on f_d cannot express; the wide model
         * fitted with the hidden categorical weights stayed 4.5% above
         * the hidden log loss then. */
        logit += dense_weight(p->seed, d) * (f - int_mu[d]);
        *out++ = '\t';
    }
    for (int c = 0; c < DT_CRITEO_CAT_COLUMNS; c++) {
        const double missing = uniform(&state), u = uniform(&state);
        if (missing >= cat_missing[c]) {
            const int64_t V = vocab_of(p, c);
            int64_t rank = (int64_t)floor(pow((double)V, u)); /* 1..V, log-uniform */
            if (rank > V) rank = V;
            out = put_hex8(out, value_code(p->seed, c, rank));
            logit += cat_weight(p->seed, c, rank);
        }
        *out++ = c == DT_CRITEO_CAT_COLUMNS - 1 ? '\n' : '\t';
    }
    *out = '\0';
    *state_out = state;
    return logit;
}

static double sigmoid(double z) {
    return z >= 0 ? 1 / (1 + exp(-z)) : exp(z) / (1 + exp(z));
}

int dt_criteo_gen_init(const dt_criteo_gen_params *p, dt_criteo_gen_model *out, dt_err *err) {
    memset(out, 0, sizeof *out);
    int rc = check_params(p, err);
    if (rc < 0) return rc;
    out->params = *p;
    /* The bias that gives CLICK_RATE over the first CALIBRATION_ROWS rows'
     * features: the mean of sigmoid(b + logit) grows with b; bisection. */
    double logits[CALIBRATION_ROWS]; /* 32 KiB */
    char body[480];
    for (int i = 0; i < CALIBRATION_ROWS; i++) {
        uint64_t state;
        logits[i] = row_body(p, i, body, &state);
    }
    double lo = -20, hi = 20;
    for (int step = 0; step < 60; step++) {
        double b = (lo + hi) / 2, rate = 0;
        for (int i = 0; i < CALIBRATION_ROWS; i++)
            rate += sigmoid(b + logits[i]);
        if (rate / CALIBRATION_ROWS < CLICK_RATE)
            lo = b;
        else
            hi = b;
    }
    out->bias = (lo + hi) / 2;
    return 0;
}

void dt_criteo_gen_row(const dt_criteo_gen_model *m, int64_t i, char *line, size_t cap, double *p1,
                       int *label) {
    /* The longest row: 13 int64s of 20 characters, 26 codes of 8, 40
     * separators and the NUL. */
    DT_ASSERT(cap >= 512);
    char body[480];
    uint64_t state;
    const double prob = sigmoid(m->bias + row_body(&m->params, i, body, &state));
    const int y = uniform(&state) < prob;
    snprintf(line, cap, "%s%s", m->params.labels ? (y ? "1\t" : "0\t") : "", body);
    *p1 = prob;
    *label = y;
}

double dt_criteo_gen_log_loss(const dt_criteo_gen_model *m, int64_t first, int64_t n) {
    double loss = 0;
    char line[1024];
    for (int64_t i = first; i < first + n; i++) {
        double p1;
        int y;
        dt_criteo_gen_row(m, i, line, sizeof line, &p1, &y);
        loss -= log(y ? p1 : 1 - p1);
    }
    return loss / (double)n;
}

static int write_failed(const char *path, gzFile gz, dt_err *err) {
    int errnum = Z_OK;
    const char *msg = gzerror(gz, &errnum);
    return dt_err_set(err, DT_EIO, "gen-criteo: %s: write: %s", path,
                      errnum == Z_ERRNO ? strerror(errno) : msg);
}

int dt_criteo_gen_write(const dt_criteo_gen_params *p, const char *path,
                        dt_criteo_gen_report *report, dt_err *err) {
    dt_criteo_gen_report rep;
    memset(&rep, 0, sizeof rep);
    if (report) *report = rep;
    dt_criteo_gen_model model;
    int rc = dt_criteo_gen_init(p, &model, err);
    if (rc < 0) return rc;
    /* A regular file (or a new one) is written beside itself and renamed
     * into place; anything else that exists (a device such as /dev/null, a
     * pipe) and "-" are written as they are. */
    struct stat st;
    const int to_stdout = strcmp(path, "-") == 0;
    const int in_place = to_stdout || (stat(path, &st) == 0 && !S_ISREG(st.st_mode));
    const char *name = to_stdout ? "stdout" : path;
    const size_t len = strlen(path);
    const int gzip = len > 3 && strcmp(path + len - 3, ".gz") == 0;
    char tmp[4096];
    if (!in_place) {
        if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
            return dt_err_set(err, DT_EINVAL, "gen-criteo: path too long: %s", path);
        name = tmp;
    }
    int fd = to_stdout  ? dup(STDOUT_FILENO)
             : in_place ? open(path, O_WRONLY | O_CLOEXEC)
                        : open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return dt_err_set(err, DT_EIO, "gen-criteo: %s: open: %s", name, strerror(errno));
    /* "T": zlib writes a plain file through the same calls. */
    gzFile gz = gzdopen(fd, gzip ? "wb6" : "wbT");
    if (!gz) {
        close(fd);
        rc = dt_err_set(err, DT_ENOMEM, "gen-criteo: no memory for a writer");
        goto fail;
    }
    gzbuffer(gz, 1u << 17);
    for (int c = 0; c < DT_CRITEO_CAT_COLUMNS; c++)
        rep.vocabulary += vocab_of(p, c);
    double loss = 0;
    char line[1024];
    for (int64_t i = 0; i < p->rows; i++) {
        double p1;
        int y;
        dt_criteo_gen_row(&model, i, line, sizeof line, &p1, &y);
        rep.positives += y;
        loss -= log(y ? p1 : 1 - p1);
        const size_t n = strlen(line);
        if (gzwrite(gz, line, (unsigned)n) != (int)n) {
            rc = write_failed(name, gz, err);
            gzclose_w(gz);
            goto fail;
        }
    }
    int closed = gzclose_w(gz);
    if (closed != Z_OK) {
        rc = dt_err_set(err, DT_EIO, "gen-criteo: %s: close: %s", name,
                        closed == Z_ERRNO ? strerror(errno) : "zlib error");
        goto fail;
    }
    if (!in_place && rename(tmp, path) != 0) {
        rc = dt_err_set(err, DT_EIO, "gen-criteo: rename %s to %s: %s", tmp, path, strerror(errno));
        goto fail;
    }
    rep.rows = p->rows;
    rep.log_loss = loss / (double)p->rows;
    const double rate = (double)rep.positives / (double)p->rows;
    rep.base_log_loss =
        rate <= 0 || rate >= 1 ? 0 : -(rate * log(rate) + (1 - rate) * log(1 - rate));
    rep.bias = model.bias;
    if (report) *report = rep;
    return 0;
fail:
    if (!in_place) unlink(tmp);
    return rc;
}
