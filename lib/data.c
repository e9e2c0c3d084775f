/*
 * data: training sets, sharded and shuffled into minibatches.
 *
 * Sources (cfg->source):
 *   line  the TF tutorial's set: x_i = linspace(-1, 1, N), y_i = 2 x_i +
 *         noise z_i. One feature; the shard's examples are held in memory.
 *   wide  F features, y_i = sum_j x_ij w*_j / sqrt(F) + noise z_i with x_ij
 *         uniform in [-1, 1) and w*_j standard normal. Nothing of size N*F is
 *         kept: every example is a pure function of (seed, i), regenerated
 *         into the batch buffer when it is drawn. Only w* (F), one normal
 *         stream of the seed, is kept.
 *   csv, libsvm, idx  files parsed by the reader. Every worker reads the
 *         whole training file, so all agree on N, on which rows are malformed
 *         and on the scaling statistics; then it moves its shard's rows to
 *         the front of the table in place and gives the rest back. The peak
 *         is one whole table; afterwards a worker holds N/num_shards rows.
 *
 * Scaling (file sources only): "divide" x / scale_divisor; "standardize"
 * (x - mean_j) / std_j with the per-feature mean and population standard
 * deviation over the whole training file (two passes, in double; a std of
 * 0 counts as 1). The held-out set is scaled with the training file's
 * statistics, so opening it with "standardize" reads the training file once
 * more (its time, and one training table of memory while the statistics are
 * taken). A held-out or prediction file may come without labels
 * (dt_data_open_unlabeled): it is read with the reader's DT_LABELS_NONE and
 * goes through the same table, statistics and scaling code as a labeled one,
 * so its features are scaled to the bit as they would be with labels.
 *
 * Every random number comes from a counter-based hash (splitmix64's
 * finaliser) of the seed, a stream constant and an index, so example i is the
 * same on every worker and in every epoch, whatever the sharding, and no
 * state has to be replayed to reach it. Normals are Box-Muller. The wide
 * source's x, F numbers an example, take the example's 64-bit key from it
 * and a 32-bit hash per column from the key (wide_value), so the columns are
 * made eight or four at a time in vector registers.
 *
 * Shuffling: at the start of each epoch the shard's order is reset to index
 * order and Fisher-Yates-shuffled with a generator seeded by (seed, shard,
 * epoch), so epoch e's order depends on nothing else.
 *
 * Invariants: 0 <= pos < size; order holds a permutation of 0..size-1
 * (shard-local indices; local k is global index shard + k * num_shards);
 * mem_x/mem_y hold the shard in index order for the in-memory sources;
 * labeled is 0 only for a file read without labels, whose mem_y and batch
 * y are NULL.
 * Threading: a dataset belongs to one thread; separate datasets share nothing.
 */
#include "data.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "alloc.h"
#include "log.h"
#include "reader.h"

#define GOLDEN 0x9e3779b97f4a7c15ULL

/* Stream constants keep the random numbers of different purposes apart. */
#define STREAM_NOISE 0x6e6f697365000001ULL   /* z_i */
#define STREAM_X 0x78000000000000a3ULL       /* wide: x_ij */
#define STREAM_WEIGHT 0x77737461720000c5ULL  /* wide: w*_j */
#define STREAM_SHUFFLE 0x73687566666c65e7ULL /* epoch order */
#define STREAM_SPLIT 0x73706c6974000d1bULL   /* validation_fraction's rows */

/* Columns generated at a time in a wide row, so the row's dot product with
 * w* reads them while they are still in cache. Even, so pairs never split. */
#define WIDE_CHUNK 4096

enum { SRC_LINE, SRC_WIDE, SRC_FILE };

/* One row of a wide batch being made. */
typedef struct {
    int64_t index;   /* i, the global example index */
    uint32_t lo, hi; /* key_of(seed, STREAM_X, i), halved */
    double dot;      /* sum_j x_ij w*_j so far */
} wide_row;

struct dt_dataset {
    int source;           /* SRC_LINE, SRC_WIDE or SRC_FILE */
    int features;         /* F */
    int64_t num_examples; /* N, whole data set */
    int shard, num_shards;
    int64_t size; /* examples in this shard */
    uint64_t seed;
    double noise;

    int epoch;      /* completed passes */
    int64_t pos;    /* next position in order */
    int64_t *order; /* (size) shard-local indices, this epoch's order */

    float *mem_x;       /* (size, F) line and files: the shard in index order */
    float *mem_y;       /* (size) NULL when not labeled */
    int labeled;        /* 0: a file read without labels */
    float *true_w;      /* (F) wide: w* */
    double *scale_mean; /* (F) standardize: the statistics x was scaled with; else NULL */
    double *scale_std;  /* (F) */

    float *batch_x;       /* (batch_cap, F) reused across calls */
    float *batch_y;       /* (batch_cap) */
    wide_row *batch_rows; /* (batch_cap) wide: the rows being made */
    int batch_cap;
};

/* splitmix64's finaliser: a bijective 64-bit mix. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A generator state (or row key) for item i of a stream. */
static uint64_t key_of(uint64_t seed, uint64_t stream, uint64_t i) {
    return mix64(mix64(seed ^ stream) + (i + 1) * GOLDEN);
}

static uint64_t next_u64(uint64_t *state) {
    *state += GOLDEN;
    return mix64(*state);
}

/* Box-Muller: two uniforms make two independent standard normals. u1 is in
 * (0, 1] so log(u1) is finite; u2 in [0, 1). 53 bits each. */
static void normal_pair(uint64_t *state, double *z0, double *z1) {
    double u1 = (double)((next_u64(state) >> 11) + 1) * 0x1.0p-53;
    double u2 = (double)(next_u64(state) >> 11) * 0x1.0p-53;
    double radius = sqrt(-2.0 * log(u1)), angle = 6.283185307179586 * u2;
    *z0 = radius * cos(angle);
    *z1 = radius * sin(angle);
}

double dt_data_normal(uint64_t *state) {
    double z0, z1;
    normal_pair(state, &z0, &z1);
    return z0;
}

void dt_data_normals(uint64_t *state, float *out, int64_t n, double stddev) {
    int64_t j = 0;
    for (; j + 2 <= n; j += 2) {
        double z0, z1;
        normal_pair(state, &z0, &z1);
        out[j] = (float)(stddev * z0);
        out[j + 1] = (float)(stddev * z1);
    }
    if (j < n) out[j] = (float)(stddev * dt_data_normal(state));
}

/* The noise of global example i: the same wherever it is drawn. */
static double noise_of(const dt_dataset *ds, int64_t i) {
    if (ds->noise == 0) return 0;
    uint64_t state = key_of(ds->seed, STREAM_NOISE, (uint64_t)i);
    return ds->noise * dt_data_normal(&state);
}

/* The wide rows' columns are made WIDE_LANES at a time into fixed lanes, so
 * the loops below vectorise (with 128-bit vectors on any x86-64, 256-bit
 * ones where the CPU has AVX2) and give the same bits whichever runs: the
 * lanes' order is fixed by the source and no step is fused or reordered. */
#define WIDE_LANES 16

/* AVX2 doubles the lanes of the integer hash. GCC and clang compile the
 * function for both and pick one when the program loads; elsewhere it is
 * compiled once, for the target. */
#if defined(__SANITIZE_THREAD__)
#define WIDE_TSAN 1 /* gcc */
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WIDE_TSAN 1 /* clang */
#endif
#endif
/* Not under ThreadSanitizer: the clones' resolver runs before its runtime is
 * up, and the instrumented resolver crashes the program at load. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(WIDE_TSAN)
#define WIDE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define WIDE_CLONES
#endif

/* lowbias32 (Wellons' hash prospector): a bijective 32-bit mix with two
 * multiplies. 32-bit lanes, where splitmix64's 64-bit multiplies have no
 * vector instruction before AVX-512. */
static inline uint32_t mix32(uint32_t z) {
    z = (z ^ (z >> 16)) * 0x7feb352dU;
    z = (z ^ (z >> 15)) * 0x846ca68bU;
    return z ^ (z >> 16);
}

#define GOLDEN32 0x9e3779b9U

/* x_ij of the row whose key is (lo, hi), given jg = j * GOLDEN32 (mod 2^32),
 * column j's Weyl point: the hash's top 24 bits as a float in [-1, 1),
 * (h >> 8) * 2^-23 - 1, exact (24 bits fit a float). The Weyl point spreads
 * the columns over all 32 bits before the row's key is mixed in, so two rows
 * share a value only where their columns' maps collide (about F^2 / 2^32
 * of them: 233 of 10^6 columns), and hi then flips those values too. */
static inline float wide_value(uint32_t jg, uint32_t lo, uint32_t hi) {
    uint32_t h = mix32(jg ^ lo) ^ hi;
    return (float)(h >> 8) * 0x1.0p-23f - 1.0f;
}

/* Writes the rows' x (rows, F) and adds their dot products with w (F) into
 * row[r].dot, one WIDE_CHUNK of columns at a time across all rows, so each
 * chunk of w is read from memory once a batch and each chunk of x is dotted
 * while still in cache. Within a chunk the products are summed in float in
 * WIDE_LANES lanes (x w < 5 in size, 4096 / 16 terms a lane), the lanes and
 * chunks in double. */
WIDE_CLONES
static void wide_rows(wide_row *row, int rows, const float *w, int64_t F, float *x) {
    /* The Weyl points are added lane by lane (a multiply costs more than
     * the hash's shifts and xors): lane k of a group is k * GOLDEN32 on. */
    uint32_t weyl[WIDE_LANES];
    for (int k = 0; k < WIDE_LANES; k++)
        weyl[k] = (uint32_t)k * GOLDEN32;
    int64_t c0 = 0;
    for (; c0 + WIDE_CHUNK <= F; c0 += WIDE_CHUNK) {
        const float *wc = w + c0;
        for (int r = 0; r < rows; r++) {
            float *xc = x + (size_t)r * (size_t)F + (size_t)c0;
            const uint32_t lo = row[r].lo, hi = row[r].hi;
            for (int j = 0; j < WIDE_CHUNK; j += WIDE_LANES) {
                const uint32_t jg = (uint32_t)(c0 + j) * GOLDEN32;
                for (int k = 0; k < WIDE_LANES; k++)
                    xc[j + k] = wide_value(jg + weyl[k], lo, hi);
            }
            float lane[WIDE_LANES] = {0};
            for (int j = 0; j < WIDE_CHUNK; j += WIDE_LANES)
                for (int k = 0; k < WIDE_LANES; k++)
                    lane[k] += xc[j + k] * wc[j + k];
            double sum = 0;
            for (int k = 0; k < WIDE_LANES; k++)
                sum += lane[k];
            row[r].dot += sum;
        }
    }
    for (int r = 0; r < rows; r++) /* the last, partial chunk */
        for (int64_t j = c0; j < F; j++) {
            float *xr = x + (size_t)r * (size_t)F;
            xr[j] = wide_value((uint32_t)j * GOLDEN32, row[r].lo, row[r].hi);
            row[r].dot += (double)xr[j] * (double)w[j];
        }
}

/* Writes the wide examples row[0..rows).index into the batch buffers. */
static void wide_batch(dt_dataset *ds, wide_row *row, int rows) {
    for (int r = 0; r < rows; r++) {
        uint64_t key = key_of(ds->seed, STREAM_X, (uint64_t)row[r].index);
        row[r].lo = (uint32_t)key;
        row[r].hi = (uint32_t)(key >> 32);
        row[r].dot = 0;
    }
    wide_rows(row, rows, ds->true_w, ds->features, ds->batch_x);
    for (int r = 0; r < rows; r++)
        ds->batch_y[r] =
            (float)(row[r].dot / sqrt((double)ds->features) + noise_of(ds, row[r].index));
}

uint64_t dt_data_shuffle_start(uint64_t seed, int shard, int epoch) {
    return mix64(mix64(mix64(seed ^ STREAM_SHUFFLE) + (uint64_t)shard) + (uint64_t)epoch);
}

/* The modulo bias is below (k + 1) / 2^64: negligible. */
int64_t dt_data_shuffle_draw(uint64_t *state, int64_t k) {
    return (int64_t)(next_u64(state) % (uint64_t)(k + 1));
}

int dt_data_seek_position(int64_t size, int batch_size, int64_t step, int *epoch, int64_t *pos,
                          dt_err *err) {
    if (batch_size < 1 || step < 0 || size < 1)
        return dt_err_set(err, DT_EINVAL,
                          "data: seek: step %lld in batches of %d over %lld examples: each must "
                          "be >= 0, the others >= 1",
                          (long long)step, batch_size, (long long)size);
    const int64_t per_epoch = (size - 1) / batch_size + 1; /* ceil, no overflow */
    if (step / per_epoch > INT_MAX)
        return dt_err_set(err, DT_EINVAL, "data: seek: step %lld is past epoch %d", (long long)step,
                          INT_MAX);
    *epoch = (int)(step / per_epoch);
    *pos = step % per_epoch * batch_size; /* < size: no overflow */
    return 0;
}

/* Resets the order to index order and shuffles it for ds->epoch. */
static void shuffle(dt_dataset *ds) {
    for (int64_t k = 0; k < ds->size; k++)
        ds->order[k] = k;
    uint64_t state = dt_data_shuffle_start(ds->seed, ds->shard, ds->epoch);
    for (int64_t k = ds->size - 1; k > 0; k--) { /* Fisher-Yates */
        int64_t r = dt_data_shuffle_draw(&state, k);
        int64_t tmp = ds->order[k];
        ds->order[k] = ds->order[r];
        ds->order[r] = tmp;
    }
}

/* ---- scaling of file sources ---------------------------------------------- */

typedef struct {
    dt_scale kind;
    double divisor; /* DT_SCALE_DIVIDE */
    double *mean;   /* (F) DT_SCALE_STANDARDIZE, owned */
    double *std;    /* (F) never 0 */
} scaling;

static void scaling_deinit(scaling *sc) {
    free(sc->mean);
    free(sc->std);
    memset(sc, 0, sizeof *sc);
}

static int scaling_of(const dt_data_config *cfg, scaling *sc, dt_err *err) {
    memset(sc, 0, sizeof *sc);
    if ((unsigned)cfg->scale > DT_SCALE_DIVIDE)
        return dt_err_set(err, DT_EINVAL, "data: \"scale\": unknown scaling %d", (int)cfg->scale);
    sc->kind = cfg->scale;
    if (sc->kind == DT_SCALE_DIVIDE && !(cfg->scale_divisor > 0 && isfinite(cfg->scale_divisor)))
        return dt_err_set(err, DT_EINVAL, "data: \"scale_divisor\" must be a number > 0 (got %g)",
                          cfg->scale_divisor);
    sc->divisor = cfg->scale_divisor;
    return 0;
}

/* Standardize's statistics over the whole training table, in double and in
 * two passes (the mean, then the squared deviations from it). */
static int scaling_fit(scaling *sc, const dt_reader_table *t, dt_err *err) {
    if (sc->kind != DT_SCALE_STANDARDIZE) return 0;
    const int F = t->cols;
    sc->mean = dt_calloc((size_t)F, sizeof *sc->mean);
    sc->std = dt_calloc((size_t)F, sizeof *sc->std);
    if (!sc->mean || !sc->std)
        return dt_err_set(err, DT_ENOMEM, "data: no memory for the statistics of %d features", F);
    for (int64_t i = 0; i < t->rows; i++) {
        const float *x = t->x + (size_t)i * (size_t)F;
        for (int j = 0; j < F; j++)
            sc->mean[j] += x[j];
    }
    for (int j = 0; j < F; j++)
        sc->mean[j] /= (double)t->rows;
    for (int64_t i = 0; i < t->rows; i++) {
        const float *x = t->x + (size_t)i * (size_t)F;
        for (int j = 0; j < F; j++) {
            double d = x[j] - sc->mean[j];
            sc->std[j] += d * d;
        }
    }
    /* std_j = sqrt(sum_i (x_ij - mean_j)^2 / N); a constant feature keeps
     * std 1, so it becomes 0 rather than a division by zero. */
    for (int j = 0; j < F; j++) {
        double sd = sqrt(sc->std[j] / (double)t->rows);
        sc->std[j] = sd > 0 ? sd : 1.0;
    }
    return 0;
}

/* Takes statistics given by the caller (a checkpoint's) instead of fitting
 * them, after checking they are usable: F of each, finite, std > 0. */
static int scaling_take(scaling *sc, const dt_data_stats *given, int F, dt_err *err) {
    if (sc->kind != DT_SCALE_STANDARDIZE) return 0;
    if (given->num_features != F)
        return dt_err_set(err, DT_ECONFIG,
                          "data: the scaling statistics are for %d features, but \"features\" "
                          "is %d",
                          given->num_features, F);
    for (int j = 0; j < F; j++)
        if (!isfinite(given->mean[j]) || !isfinite(given->std[j]) || !(given->std[j] > 0))
            return dt_err_set(err, DT_EINVAL,
                              "data: scaling statistic %d is not usable (mean %g, std %g)", j,
                              given->mean[j], given->std[j]);
    sc->mean = dt_malloc((size_t)F * sizeof *sc->mean);
    sc->std = dt_malloc((size_t)F * sizeof *sc->std);
    if (!sc->mean || !sc->std)
        return dt_err_set(err, DT_ENOMEM, "data: no memory for the statistics of %d features", F);
    memcpy(sc->mean, given->mean, (size_t)F * sizeof *sc->mean);
    memcpy(sc->std, given->std, (size_t)F * sizeof *sc->std);
    return 0;
}

static void scaling_apply(const scaling *sc, float *x, int64_t rows, int F) {
    if (sc->kind == DT_SCALE_DIVIDE) {
        const double inv = 1.0 / sc->divisor;
        for (int64_t k = 0; k < rows * F; k++)
            x[k] = (float)(x[k] * inv);
    } else if (sc->kind == DT_SCALE_STANDARDIZE) {
        for (int64_t i = 0; i < rows; i++) {
            float *row = x + (size_t)i * (size_t)F;
            for (int j = 0; j < F; j++)
                row[j] = (float)((row[j] - sc->mean[j]) / sc->std[j]);
        }
    }
}

/* ---- opening -------------------------------------------------------------- */

const char *const dt_data_source_names[] = {"line", "wide", "csv", "libsvm", "idx", "criteo", NULL};
const char *const dt_scale_names[] = {"none", "standardize", "divide", "auto", NULL};

int dt_data_reads_files(const dt_data_config *cfg) {
    return cfg->source == DT_DATA_CSV || cfg->source == DT_DATA_LIBSVM ||
           cfg->source == DT_DATA_IDX || cfg->source == DT_DATA_CRITEO;
}

int dt_data_splits(const dt_data_config *cfg) {
    return dt_data_reads_files(cfg) && !cfg->eval_data[0] && cfg->validation_fraction > 0;
}

int dt_data_has_held_out(const dt_data_config *cfg) {
    return cfg->eval_data[0] || dt_data_splits(cfg);
}

const char *dt_data_held_out_file(const dt_data_config *cfg) {
    return dt_data_splits(cfg) ? cfg->train_data : cfg->eval_data;
}

void dt_data_held_out_name(const dt_data_config *cfg, char *buf, size_t n) {
    if (!dt_data_splits(cfg))
        snprintf(buf, n, "%s", cfg->eval_data);
    else
        snprintf(buf, n, "the validation rows of %s", cfg->train_data);
}

/* 1 when name ends in suffix, case ignored. */
static int ends_with(const char *name, size_t len, const char *suffix) {
    size_t n = strlen(suffix);
    return len >= n && strncasecmp(name + len - n, suffix, n) == 0;
}

int dt_data_source_of_file(const char *path, dt_data_source *out, const char **how, dt_err *err) {
    *out = DT_DATA_LINE;
    *how = "its name";
    size_t len = strlen(path);
    if (ends_with(path, len, ".gz")) len -= 3;
    if (ends_with(path, len, ".csv")) {
        *out = DT_DATA_CSV;
        return 0;
    }
    if (ends_with(path, len, ".svm") || ends_with(path, len, ".libsvm")) {
        *out = DT_DATA_LIBSVM;
        return 0;
    }
    static const char set_it[] = "; set \"data\" (\"csv\", \"libsvm\" or \"idx\")";
    uint32_t magic = 0;
    dt_err why;
    dt_err_clear(&why);
    if (dt_reader_magic(path, &magic, &why) < 0)
        return dt_err_set(err, DT_ECONFIG,
                          "\"train_data\" %s: cannot read it to tell its format: %s%s", path,
                          why.msg, set_it);
    if (magic == DT_READER_IDX_IMAGES_MAGIC) {
        *out = DT_DATA_IDX;
        *how = "its idx header";
        return 0;
    }
    if (magic == DT_READER_IDX_LABELS_MAGIC)
        return dt_err_set(err, DT_ECONFIG,
                          "\"train_data\" %s is an idx labels file (magic 0x%08x): "
                          "\"train_data\" is the images, \"train_labels\" the labels",
                          path, magic);
    return dt_err_set(err, DT_ECONFIG,
                      "\"train_data\" %s: its format is not told by its name (.csv, .svm or "
                      ".libsvm, each maybe .gz) nor by an idx images header (magic 0x%08x, got "
                      "0x%08x)%s",
                      path, DT_READER_IDX_IMAGES_MAGIC, magic, set_it);
}

dt_reader_format dt_data_reader_format(const dt_data_config *cfg) {
    DT_ASSERT(dt_data_reads_files(cfg));
    if (cfg->source == DT_DATA_CSV) return DT_READER_CSV;
    return cfg->source == DT_DATA_LIBSVM ? DT_READER_LIBSVM : DT_READER_IDX;
}

void dt_data_reader_params(const dt_data_config *cfg, const dt_data_needs *needs,
                           dt_reader_params *out) {
    memset(out, 0, sizeof *out);
    out->num_features = needs->num_features;
    out->label_kind = needs->label_kind;
    out->num_classes = needs->label_kind == DT_LABEL_CLASS ? needs->num_classes : 0;
    out->svm_signed_labels = needs->svm_signed_labels;
    out->label_column = cfg->label_column;
    out->skip_bad_rows = cfg->skip_bad_rows;
    out->max_values = 0;
    out->labels = DT_LABELS_REQUIRED;
}

/* What a data set is opened from: the config, the model's needs, the seed. */
typedef struct {
    const dt_data_config *cfg;
    const dt_data_needs *needs;
    uint64_t seed;
    const dt_data_stats *stats; /* held-out sets: the statistics to scale with, or NULL */
} spec;

static int source_of(const dt_data_config *cfg, int *source, dt_err *err) {
    switch (cfg->source) {
    case DT_DATA_LINE: *source = SRC_LINE; return 0;
    case DT_DATA_WIDE: *source = SRC_WIDE; return 0;
    case DT_DATA_CSV:
    case DT_DATA_LIBSVM:
    case DT_DATA_IDX: *source = SRC_FILE; return 0;
    case DT_DATA_CRITEO:
        return dt_err_set(err, DT_EINVAL,
                          "data: \"data\": \"criteo\" is read by sparse models only (\"sparse\")");
    }
    return dt_err_set(err, DT_EINVAL, "data: \"data\": unknown source %d", (int)cfg->source);
}

static const char *source_name(const dt_data_config *cfg) {
    return (unsigned)cfg->source <= DT_DATA_CRITEO ? dt_data_source_names[cfg->source] : "?";
}

/* A new dataset with its shard geometry, order and the shard's size. */
static int new_dataset(const spec *sp, int source, int64_t num_examples, int shard, int num_shards,
                       dt_dataset **out, dt_err *err) {
    *out = NULL;
    dt_dataset *ds = dt_calloc(1, sizeof *ds);
    if (!ds) return dt_err_set(err, DT_ENOMEM, "data: out of memory");
    ds->source = source;
    ds->features = sp->needs->num_features;
    ds->num_examples = num_examples;
    ds->shard = shard;
    ds->num_shards = num_shards;
    ds->size = (num_examples - 1 - shard) / num_shards + 1; /* shard < N */
    ds->seed = sp->seed;
    ds->noise = sp->cfg->noise;
    ds->labeled = 1;
    if ((uint64_t)ds->size > SIZE_MAX / sizeof *ds->order ||
        !(ds->order = dt_malloc((size_t)ds->size * sizeof *ds->order))) {
        int64_t size = ds->size;
        dt_data_free(ds);
        return dt_err_set(err, DT_ENOMEM, "data: cannot hold the order of %lld examples",
                          (long long)size);
    }
    *out = ds;
    return 0;
}

/* DT_ECONFIG "<prefix>: <name>: no such file: <path>" when path is not
 * there; 0 otherwise (any other failure is the read's to report). */
static int check_file(const char *prefix, const char *name, const char *path, dt_err *err) {
    struct stat st;
    if (stat(path, &st) == 0 || (errno != ENOENT && errno != ENOTDIR)) return 0;
    return dt_err_set(err, DT_ECONFIG, "%s: %s: no such file: %s", prefix, name, path);
}

int dt_data_check_files(const char *prefix, const char *data_name, const char *data,
                        const char *labels_name, const char *labels, dt_err *err) {
    int rc = check_file(prefix, data_name, data, err);
    if (rc == 0 && labels && labels[0]) rc = check_file(prefix, labels_name, labels, err);
    return rc;
}

/* The labels field beside a data field: "train_labels" for "train_data". */
static const char *labels_field(const char *what) {
    return strcmp(what, "train_data") == 0 ? "train_labels" : "eval_labels";
}

static int read_table(const spec *sp, const char *what, const char *data, const char *labels,
                      dt_labels_mode mode, dt_reader_table *t, dt_err *err) {
    if (!data[0])
        return dt_err_set(err, DT_EINVAL, "data: \"%s\" is not set: the \"%s\" source reads a file",
                          what, source_name(sp->cfg));
    char data_name[32], labels_name[32];
    snprintf(data_name, sizeof data_name, "\"%s\"", what);
    snprintf(labels_name, sizeof labels_name, "\"%s\"", labels_field(what));
    int rc = dt_data_check_files("data", data_name, data, labels_name,
                                 sp->cfg->source == DT_DATA_IDX ? labels : NULL, err);
    if (rc < 0) return rc;
    dt_reader_params p;
    dt_data_reader_params(sp->cfg, sp->needs, &p);
    p.labels = mode;
    rc = dt_reader_load(dt_data_reader_format(sp->cfg), data, labels, &p, t, err);
    return rc < 0 ? dt_err_wrap(err, rc, "data") : 0;
}

int dt_data_feature_names(const dt_data_config *cfg, const dt_data_needs *needs, const char *path,
                          int labeled, char **out, dt_err *err) {
    *out = NULL;
    if (cfg->source != DT_DATA_CSV) return 0;
    dt_reader_params p;
    dt_data_reader_params(cfg, needs, &p);
    p.labels = labeled ? DT_LABELS_REQUIRED : DT_LABELS_NONE;
    int rc = dt_reader_csv_names(path, &p, out, err);
    return rc < 0 ? dt_err_wrap(err, rc, "data") : 0;
}

/* The number of names in a comma-joined list. */
static int count_names(const char *names) {
    int n = 1;
    for (; *names; names++)
        n += *names == ',';
    return n;
}

/* Name c (0-based, below count_names) of a comma-joined list: its start,
 * and its length in *len. */
static const char *name_at(const char *names, int c, int *len) {
    for (; c > 0; c--)
        names = strchr(names, ',') + 1;
    *len = (int)strcspn(names, ",");
    return names;
}

/* The model knows its inputs by position: a file with two columns swapped
 * would be scored on the wrong ones without a word. */
int dt_data_check_names(const dt_data_config *cfg, const dt_data_needs *needs, const char *path,
                        int labeled, const char *want, dt_err *err) {
    if (!want) return 0;
    char *have = NULL;
    int rc = dt_data_feature_names(cfg, needs, path, labeled, &have, err);
    if (rc < 0) return rc;
    const int n = have ? count_names(have) : 0;
    if (have && n == count_names(want) && strcmp(have, want) != 0) {
        int c = 0, la = 0, lb = 0;
        const char *a = have, *b = want;
        for (; c < n; c++) { /* the lists differ, so some column does */
            a = name_at(have, c, &la);
            b = name_at(want, c, &lb);
            if (la != lb || strncmp(a, b, (size_t)la) != 0) break;
        }
        rc = dt_err_set(err, DT_ECONFIG,
                        "%s: feature column %d is \"%.*s\", but the model was trained with "
                        "\"%.*s\" there: the columns must be the training file's, in its order "
                        "(%.200s%s)",
                        path, c + 1, la > 80 ? 80 : la, a, lb > 80 ? 80 : lb, b, want,
                        strlen(want) > 200 ? "..." : "");
    }
    free(have);
    return rc;
}

int dt_data_infer(const dt_data_config *cfg, const dt_data_needs *needs, int want_classes,
                  dt_reader_shape *out, dt_err *err) {
    memset(out, 0, sizeof *out);
    if (!dt_data_reads_files(cfg))
        return dt_err_set(err, DT_EINVAL,
                          "data: the \"%s\" source has no file to take \"features\" or "
                          "\"classes\" from",
                          source_name(cfg));
    if (!cfg->train_data[0])
        return dt_err_set(err, DT_EINVAL,
                          "data: \"train_data\" is not set: the \"%s\" source "
                          "reads a file",
                          source_name(cfg));
    const char *labels = cfg->source == DT_DATA_IDX ? cfg->train_labels : NULL;
    int rc = dt_data_check_files("data", "\"train_data\"", cfg->train_data, "\"train_labels\"",
                                 labels, err);
    if (rc < 0) return rc;
    dt_reader_params p;
    dt_data_reader_params(cfg, needs, &p);
    rc = dt_reader_infer(dt_data_reader_format(cfg), cfg->train_data, labels, &p, want_classes, out,
                         err);
    return rc < 0 ? dt_err_wrap(err, rc, "data") : 0;
}

/* ---- the validation split ------------------------------------------------- */

/* The classes a split keeps in proportion: K for class labels, else 1. */
static int class_count(const spec *sp, const float *y) {
    return sp->needs->label_kind == DT_LABEL_CLASS && y && sp->needs->num_classes > 1
               ? sp->needs->num_classes
               : 1;
}

/* Row i's class among K (the reader has checked labels are 0..K-1). */
static int class_of(const float *y, int64_t i, int K) {
    int c = K > 1 ? (int)y[i] : 0;
    return c >= 0 && c < K ? c : 0;
}

/* Which rows of a training table of n rows with labels y (NULL: no classes
 * to keep in proportion) validation_fraction f holds out: held[i] = 1 for
 * round(f * n_c) rows of each class c of n_c rows (of all n rows when the
 * labels are not classes), drawn by one seeded permutation, so every role
 * that reads the file picks the same rows. A class keeps at least one
 * training row. order (n) and counts (2 * class_count) are scratch.
 * Returns the count held out. */
static int64_t pick_held_out(const spec *sp, const float *y, int64_t n, unsigned char *held,
                             int64_t *order, int64_t *counts) {
    const double f = sp->cfg->validation_fraction;
    const int K = class_count(sp, y);
    int64_t *want = counts, *seen = counts + K;
    memset(counts, 0, 2 * (size_t)K * sizeof *counts);
    for (int64_t i = 0; i < n; i++) {
        order[i] = i;
        seen[class_of(y, i, K)]++;
    }
    for (int c = 0; c < K; c++) {
        want[c] = (int64_t)floor(f * (double)seen[c] + 0.5);
        if (want[c] >= seen[c]) want[c] = seen[c] - 1;
        if (want[c] < 0) want[c] = 0;
    }
    uint64_t state = key_of(sp->seed, STREAM_SPLIT, 0);
    for (int64_t k = n - 1; k > 0; k--) { /* Fisher-Yates */
        int64_t r = dt_data_shuffle_draw(&state, k), tmp = order[k];
        order[k] = order[r];
        order[r] = tmp;
    }
    int64_t total = 0;
    memset(held, 0, (size_t)n);
    for (int64_t k = 0; k < n; k++) {
        int64_t i = order[k];
        int c = class_of(y, i, K);
        if (want[c] > 0) {
            want[c]--;
            held[i] = 1;
            total++;
        }
    }
    return total;
}

/* Copies the rows i of t with held[i] == want into x and y (y NULL when t
 * has no labels), in file order, and returns their count. x and y may be
 * t's own buffers: row k lands at or before row i, never across it. */
static int64_t gather_rows(const dt_reader_table *t, const unsigned char *held, int want, float *x,
                           float *y) {
    const size_t F = (size_t)t->cols;
    int64_t k = 0;
    for (int64_t i = 0; i < t->rows; i++) {
        if (held[i] != want) continue;
        if (x != t->x || k != i) {
            memcpy(x + (size_t)k * F, t->x + (size_t)i * F, F * sizeof(float));
            if (t->y) y[k] = t->y[i];
        }
        k++;
    }
    return k;
}

/* With validation_fraction > 0 and no eval_data, splits the training table
 * t: t keeps the training rows, and *held_out (when not NULL) gets the
 * validation rows, both in file order. Without a split, t is unchanged and
 * *held_out empty. Errors: a split that leaves no row on one side
 * (DT_ECONFIG naming the field and the counts), no memory. */
static int split_validation(const spec *sp, dt_reader_table *t, dt_reader_table *held_out,
                            dt_err *err) {
    if (held_out) memset(held_out, 0, sizeof *held_out);
    if (!dt_data_splits(sp->cfg)) return 0;
    const int64_t n = t->rows;
    unsigned char *held = dt_malloc((size_t)n);
    int64_t *order = dt_malloc((size_t)n * sizeof *order);
    int64_t *counts = dt_malloc(2 * (size_t)class_count(sp, t->y) * sizeof *counts);
    int rc = 0;
    if (!held || !order || !counts) {
        rc = dt_err_set(err, DT_ENOMEM, "data: no memory to split %lld rows", (long long)n);
        goto out;
    }
    const int64_t m = pick_held_out(sp, t->y, n, held, order, counts);
    if (m < 1 || m >= n) {
        rc = dt_err_set(err, DT_ECONFIG,
                        "data: \"validation_fraction\" %g of the %lld rows of %s holds out %lld: "
                        "it must leave at least one row on each side (give \"eval_data\", or "
                        "a larger file)",
                        sp->cfg->validation_fraction, (long long)n, sp->cfg->train_data,
                        (long long)m);
        goto out;
    }
    if (held_out) {
        const size_t F = (size_t)t->cols;
        *held_out = (dt_reader_table){.rows = m, .cols = t->cols, .labeled = t->labeled};
        held_out->x = dt_malloc((size_t)m * F * sizeof(float));
        held_out->y = t->y ? dt_malloc((size_t)m * sizeof(float)) : NULL;
        if (!held_out->x || (t->y && !held_out->y)) {
            dt_reader_table_deinit(held_out);
            rc = dt_err_set(err, DT_ENOMEM, "data: no memory for %lld validation rows",
                            (long long)m);
            goto out;
        }
        gather_rows(t, held, 1, held_out->x, held_out->y);
    }
    t->rows = gather_rows(t, held, 0, t->x, t->y);
out:
    free(counts);
    free(order);
    free(held);
    return rc;
}

/* Takes the table's rows of shard `shard` of `num_shards` into a new
 * dataset, scaled; a table read without labels (y NULL) makes a dataset
 * without them. The table is consumed (its buffers move or are freed). */
static int from_table(const spec *sp, dt_reader_table *t, const scaling *sc, int shard,
                      int num_shards, dt_dataset **out, dt_err *err) {
    const int64_t F = t->cols;
    dt_dataset *ds = NULL;
    int rc = new_dataset(sp, SRC_FILE, t->rows, shard, num_shards, &ds, err);
    if (rc < 0) goto fail;
    /* Row shard + k * num_shards moves to row k; the source is never behind
     * the destination, so a forward pass of memmove is safe. */
    for (int64_t k = 0; k < ds->size && num_shards > 1; k++) {
        int64_t i = shard + k * num_shards;
        memmove(t->x + (size_t)(k * F), t->x + (size_t)(i * F), (size_t)F * sizeof(float));
        if (t->y) t->y[k] = t->y[i];
    }
    if (ds->size < t->rows) { /* give the other shards' rows back; a failed shrink is harmless */
        float *x = dt_realloc(t->x, (size_t)(ds->size * F) * sizeof(float));
        if (x) t->x = x;
        float *y = t->y ? dt_realloc(t->y, (size_t)ds->size * sizeof(float)) : NULL;
        if (y) t->y = y;
    }
    ds->mem_x = t->x;
    ds->mem_y = t->y;
    ds->labeled = t->y != NULL;
    t->x = t->y = NULL;
    t->rows = 0;
    scaling_apply(sc, ds->mem_x, ds->size, (int)F);
    if (sc->mean) { /* kept so a checkpoint can carry them (dt_data_stats_of) */
        ds->scale_mean = dt_malloc((size_t)F * sizeof *ds->scale_mean);
        ds->scale_std = dt_malloc((size_t)F * sizeof *ds->scale_std);
        if (!ds->scale_mean || !ds->scale_std) {
            dt_data_free(ds);
            return dt_err_set(err, DT_ENOMEM, "data: no memory for the statistics of %lld features",
                              (long long)F);
        }
        memcpy(ds->scale_mean, sc->mean, (size_t)F * sizeof *ds->scale_mean);
        memcpy(ds->scale_std, sc->std, (size_t)F * sizeof *ds->scale_std);
    }
    shuffle(ds);
    *out = ds;
    return 0;
fail:
    dt_reader_table_deinit(t);
    return rc;
}

static int open_file(const spec *sp, int shard, int num_shards, dt_dataset **out, dt_err *err) {
    dt_reader_table t = {0};
    scaling sc;
    const dt_data_config *cfg = sp->cfg;
    int rc = scaling_of(cfg, &sc, err);
    if (rc < 0) return rc;
    if ((rc = read_table(sp, "train_data", cfg->train_data, cfg->train_labels, DT_LABELS_REQUIRED,
                         &t, err)) < 0 ||
        (rc = split_validation(sp, &t, NULL, err)) < 0)
        goto fail;
    if (shard >= t.rows) {
        rc = dt_err_set(err, DT_EINVAL, "data: shard %d of %d is empty: only %lld examples in %s",
                        shard, num_shards, (long long)t.rows, cfg->train_data);
        goto fail;
    }
    if ((rc = scaling_fit(&sc, &t, err)) < 0) goto fail;
    int64_t total = t.rows, skipped = t.skipped;
    if ((rc = from_table(sp, &t, &sc, shard, num_shards, out, err)) < 0) goto fail;
    dt_log(DT_LOG_INFO,
           "data: %s: %lld examples of %d features (%lld malformed rows skipped%s); shard %d of "
           "%d keeps %lld",
           cfg->train_data, (long long)total, sp->needs->num_features, (long long)skipped,
           dt_data_splits(cfg) ? ", the validation rows held out" : "", shard, num_shards,
           (long long)dt_data_size(*out));
fail:
    dt_reader_table_deinit(&t);
    scaling_deinit(&sc);
    return rc;
}

int dt_data_open(const dt_data_config *cfg, const dt_data_needs *needs, uint64_t seed, int shard,
                 int num_shards, dt_dataset **out, dt_err *err) {
    *out = NULL;
    const spec sp = {cfg, needs, seed, NULL};
    int source = SRC_FILE, rc;
    if ((rc = source_of(cfg, &source, err)) < 0) return rc;
    if (source != SRC_FILE) {
        if (cfg->num_examples < 1)
            return dt_err_set(err, DT_EINVAL, "data: \"examples\" must be >= 1 (got %lld)",
                              (long long)cfg->num_examples);
        if (!(cfg->noise >= 0 && isfinite(cfg->noise)))
            return dt_err_set(err, DT_EINVAL, "data: \"noise\" must be a number >= 0 (got %g)",
                              cfg->noise);
    }
    if (source == SRC_LINE && needs->num_features != 1)
        return dt_err_set(err, DT_EINVAL,
                          "data: \"features\" must be 1 for the line source (got %d)",
                          needs->num_features);
    if (needs->num_features < 1)
        return dt_err_set(err, DT_EINVAL, "data: \"features\" must be >= 1 (got %d)",
                          needs->num_features);
    if (num_shards < 1 || shard < 0 || shard >= num_shards)
        return dt_err_set(err, DT_EINVAL, "data: shard %d of %d is out of range", shard,
                          num_shards);
    if (source == SRC_FILE) return open_file(&sp, shard, num_shards, out, err);
    if (shard >= cfg->num_examples)
        return dt_err_set(err, DT_EINVAL,
                          "data: shard %d of %d is empty: only %lld examples in \"examples\"",
                          shard, num_shards, (long long)cfg->num_examples);

    dt_dataset *ds = NULL;
    if ((rc = new_dataset(&sp, source, cfg->num_examples, shard, num_shards, &ds, err)) < 0)
        return rc;
    if (source == SRC_LINE) {
        ds->mem_x = dt_malloc((size_t)ds->size * sizeof *ds->mem_x);
        ds->mem_y = dt_malloc((size_t)ds->size * sizeof *ds->mem_y);
        if (!ds->mem_x || !ds->mem_y) {
            rc = dt_err_set(err, DT_ENOMEM, "data: cannot hold %lld examples", (long long)ds->size);
            goto fail;
        }
        for (int64_t k = 0; k < ds->size; k++) {
            int64_t i = shard + k * num_shards;
            /* linspace(-1, 1, N); a single example sits at 0. */
            double x = ds->num_examples == 1
                           ? 0.0
                           : -1.0 + 2.0 * (double)i / (double)(ds->num_examples - 1);
            ds->mem_x[k] = (float)x;
            ds->mem_y[k] = (float)(2.0 * x + noise_of(ds, i));
        }
    } else {
        ds->true_w = dt_malloc((size_t)ds->features * sizeof *ds->true_w);
        if (!ds->true_w) {
            rc = dt_err_set(err, DT_ENOMEM, "data: cannot hold %d true weights", ds->features);
            goto fail;
        }
        uint64_t state = key_of(ds->seed, STREAM_WEIGHT, 0);
        dt_data_normals(&state, ds->true_w, ds->features, 1.0);
    }
    shuffle(ds);
    *out = ds;
    return 0;
fail:
    dt_data_free(ds);
    return rc;
}

/* The held-out set of a split (validation_fraction): the training file's
 * validation rows, scaled with the statistics of its training rows (or the
 * given ones). They carry labels: a split has none to leave out. */
static int read_validation(const spec *sp, dt_labels_mode labels, scaling *sc, dt_dataset **out,
                           dt_err *err) {
    const dt_data_config *cfg = sp->cfg;
    if (!dt_data_splits(cfg))
        return dt_err_set(err, DT_EINVAL,
                          "data: eval: \"eval_data\" is not set (nor \"validation_fraction\")");
    if (labels == DT_LABELS_NONE)
        return dt_err_set(err, DT_EINVAL,
                          "data: eval: the validation rows come from \"train_data\" with their "
                          "labels: give a file without labels to read one");
    dt_reader_table t = {0}, held = {0};
    int rc = read_table(sp, "train_data", cfg->train_data, cfg->train_labels, DT_LABELS_REQUIRED,
                        &t, err);
    if (rc == 0) rc = split_validation(sp, &t, &held, err);
    if (rc == 0)
        rc = sp->stats ? scaling_take(sc, sp->stats, sp->needs->num_features, err)
                       : scaling_fit(sc, &t, err);
    dt_reader_table_deinit(&t);
    if (rc < 0) {
        dt_reader_table_deinit(&held);
        return rc;
    }
    int64_t total = held.rows;
    if ((rc = from_table(sp, &held, sc, 0, 1, out, err)) < 0) return rc;
    dt_log(DT_LOG_INFO, "data: %s: %lld validation examples held out (\"validation_fraction\" %g)",
           cfg->train_data, (long long)total, cfg->validation_fraction);
    return 0;
}

/* The held-out set (cfg->eval_data) whole, with its labels or without them,
 * scaled with the training file's statistics. */
static int open_held_out(const spec *sp, dt_labels_mode labels, dt_dataset **out, dt_err *err) {
    *out = NULL;
    const dt_data_config *cfg = sp->cfg;
    int source = SRC_FILE, rc;
    if ((rc = source_of(cfg, &source, err)) < 0) return rc;
    if (source != SRC_FILE)
        return dt_err_set(err, DT_EINVAL,
                          "data: eval: the \"%s\" source has no held-out set (it needs a file "
                          "source: csv, libsvm or idx)",
                          source_name(cfg));
    if (sp->needs->num_features < 1)
        return dt_err_set(err, DT_EINVAL, "data: \"features\" must be >= 1 (got %d)",
                          sp->needs->num_features);
    dt_reader_table t = {0};
    scaling sc;
    if ((rc = scaling_of(cfg, &sc, err)) < 0) return rc;
    if (!cfg->eval_data[0]) {
        rc = read_validation(sp, labels, &sc, out, err);
        goto fail;
    }
    if (sp->stats) {
        if ((rc = scaling_take(&sc, sp->stats, sp->needs->num_features, err)) < 0) goto fail;
    } else if (sc.kind == DT_SCALE_STANDARDIZE) {
        /* The held-out set is scaled as the training set was; the training
         * file is read with its labels, so the rows are the ones training
         * keeps (skip_bad_rows) whatever the held-out file carries. */
        if ((rc = read_table(sp, "train_data", cfg->train_data, cfg->train_labels,
                             DT_LABELS_REQUIRED, &t, err)) < 0)
            goto fail;
        if ((rc = scaling_fit(&sc, &t, err)) < 0) goto fail;
        dt_reader_table_deinit(&t);
    }
    if ((rc = read_table(sp, "eval_data", cfg->eval_data, cfg->eval_labels, labels, &t, err)) < 0)
        goto fail;
    int64_t total = t.rows;
    if ((rc = from_table(sp, &t, &sc, 0, 1, out, err)) < 0) goto fail;
    dt_log(DT_LOG_INFO, "data: %s: %lld held-out examples%s", cfg->eval_data, (long long)total,
           labels == DT_LABELS_NONE ? " without labels" : "");
fail:
    dt_reader_table_deinit(&t);
    scaling_deinit(&sc);
    return rc;
}

int dt_data_open_eval(const dt_data_config *cfg, const dt_data_needs *needs, uint64_t seed,
                      dt_dataset **out, dt_err *err) {
    const spec sp = {cfg, needs, seed, NULL};
    return open_held_out(&sp, DT_LABELS_REQUIRED, out, err);
}

int dt_data_open_unlabeled(const dt_data_config *cfg, const dt_data_needs *needs, uint64_t seed,
                           dt_dataset **out, dt_err *err) {
    const spec sp = {cfg, needs, seed, NULL};
    return open_held_out(&sp, DT_LABELS_NONE, out, err);
}

int dt_data_open_held_out(const dt_data_config *cfg, const dt_data_needs *needs, uint64_t seed,
                          const dt_data_stats *stats, int labeled, dt_dataset **out, dt_err *err) {
    const spec sp = {cfg, needs, seed, stats};
    return open_held_out(&sp, labeled ? DT_LABELS_REQUIRED : DT_LABELS_NONE, out, err);
}

void dt_data_stats_of(const dt_dataset *ds, dt_data_stats *out) {
    memset(out, 0, sizeof *out);
    if (!ds->scale_mean) return;
    out->num_features = ds->features;
    out->mean = ds->scale_mean;
    out->std = ds->scale_std;
}

int64_t dt_data_size(const dt_dataset *ds) {
    return ds->size;
}

int64_t dt_data_total(const dt_dataset *ds) {
    return ds->num_examples;
}

int dt_data_epoch(const dt_dataset *ds) {
    return ds->epoch;
}

const float *dt_data_true_weights(const dt_dataset *ds) {
    return ds->true_w;
}

/* Makes room for `rows` examples in the batch buffers. They only grow, so a
 * steady batch size allocates once. */
static int reserve(dt_dataset *ds, int rows, dt_err *err) {
    if (rows <= ds->batch_cap) return 0;
    if ((uint64_t)rows * (uint64_t)ds->features > SIZE_MAX / sizeof(float))
        return dt_err_set(err, DT_EINVAL, "data: a batch of %d x %d floats is too large", rows,
                          ds->features);
    free(ds->batch_x);
    free(ds->batch_y);
    free(ds->batch_rows);
    ds->batch_cap = 0;
    ds->batch_x = dt_malloc((size_t)rows * (size_t)ds->features * sizeof(float));
    ds->batch_y = dt_malloc((size_t)rows * sizeof(float));
    ds->batch_rows = dt_malloc((size_t)rows * sizeof *ds->batch_rows);
    if (!ds->batch_x || !ds->batch_y || !ds->batch_rows)
        return dt_err_set(err, DT_ENOMEM, "data: cannot allocate a batch of %d x %d floats", rows,
                          ds->features);
    ds->batch_cap = rows;
    return 0;
}

int dt_data_next(dt_dataset *ds, int batch_size, dt_batch *out, dt_err *err) {
    memset(out, 0, sizeof *out);
    if (batch_size < 1)
        return dt_err_set(err, DT_EINVAL, "data: next: batch size must be >= 1 (got %d)",
                          batch_size);
    /* A batch never spans two epochs: the last one of a pass may be short. */
    int64_t left = ds->size - ds->pos;
    int rows = left < batch_size ? (int)left : batch_size;
    int rc = reserve(ds, rows, err);
    if (rc < 0) return rc;
    const int64_t F = ds->features;
    for (int r = 0; r < rows; r++) {
        int64_t k = ds->order[ds->pos + r];
        if (ds->source == SRC_WIDE) {
            ds->batch_rows[r].index = ds->shard + k * ds->num_shards;
        } else {
            memcpy(ds->batch_x + r * F, ds->mem_x + k * F, (size_t)F * sizeof(float));
            if (ds->labeled) ds->batch_y[r] = ds->mem_y[k];
        }
    }
    if (ds->source == SRC_WIDE) wide_batch(ds, ds->batch_rows, rows);
    ds->pos += rows;
    if (ds->pos == ds->size) {
        ds->epoch++;
        ds->pos = 0;
        shuffle(ds);
    }
    out->rows = rows;
    out->cols = ds->features;
    out->x = ds->batch_x;
    out->y = ds->labeled ? ds->batch_y : NULL;
    return 0;
}

int dt_data_seek(dt_dataset *ds, int batch_size, int64_t step, dt_err *err) {
    int epoch;
    int64_t pos;
    int rc = dt_data_seek_position(ds->size, batch_size, step, &epoch, &pos, err);
    if (rc < 0) return rc;
    if (epoch != ds->epoch) {
        ds->epoch = epoch;
        shuffle(ds);
    }
    ds->pos = pos;
    return 0;
}

int dt_data_all(dt_dataset *ds, dt_batch *out, dt_err *err) {
    memset(out, 0, sizeof *out);
    if (ds->source == SRC_WIDE)
        return dt_err_set(err, DT_EPRECOND,
                          "data: all: the wide source is made per batch, not held in memory");
    if (ds->size > 0x7fffffff)
        return dt_err_set(err, DT_EPRECOND, "data: all: %lld examples do not fit one batch",
                          (long long)ds->size);
    out->rows = (int)ds->size;
    out->cols = ds->features;
    out->x = ds->mem_x;
    out->y = ds->mem_y;
    return 0;
}

void dt_data_free(dt_dataset *ds) {
    if (!ds) return;
    free(ds->order);
    free(ds->mem_x);
    free(ds->mem_y);
    free(ds->true_w);
    free(ds->scale_mean);
    free(ds->scale_std);
    free(ds->batch_x);
    free(ds->batch_y);
    free(ds->batch_rows);
    free(ds);
}
