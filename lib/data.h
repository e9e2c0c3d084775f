/*
 * data: the examples a worker trains on, cut into minibatches.
 *
 * Sharding rule: worker `shard` of `num_shards` owns the examples whose index
 * i (0-based, in file or generation order) has i % num_shards == shard. The
 * shards are disjoint and together cover the data set. Each epoch the shard's
 * order is reshuffled with a generator seeded by (seed, shard, epoch), so runs
 * repeat exactly.
 *
 * Sources (cfg->source, the job's "data"):
 *   "line"  x_i = linspace(-1, 1, N) (x = 0 when N is 1), y_i = 2 x_i +
 *           noise z_i; num_features must be 1. Held in memory.
 *   "wide"  F = num_features; x_ij uniform in [-1, 1), y_i = sum_j x_ij w*_j /
 *           sqrt(F) + noise z_i, w*_j standard normal, no bias. Each example
 *           is regenerated from (seed, i) when drawn; only w* (F) is kept.
 *   "csv", "libsvm", "idx"  read from cfg->train_data (and train_labels for
 *           idx) by the reader (reader.h lists the formats and their errors).
 *           Every worker reads the whole file, so all agree on N, on the rows
 *           skipped (skip_bad_rows) and on the scaling statistics, then keeps
 *           only its shard's rows. Example i is the i-th row kept, in file
 *           order. cfg->scale: "none"; "divide" x / scale_divisor;
 *           "standardize" (x - mean_j) / std_j with the per-feature mean and
 *           population standard deviation over the whole training file (a
 *           std of 0 counts as 1). num_examples and noise are not used.
 * z_i is standard normal. Every value depends only on the seed and the
 * example's index, never on the sharding.
 *
 * A dataset is used by one thread at a time.
 */
#ifndef DT_DATA_H
#define DT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "fileio.h" /* DT_PATH_MAX */
#include "reader.h"

/* Where examples come from (the job's "data"). */
typedef enum {
    DT_DATA_LINE = 0,
    DT_DATA_WIDE,
    DT_DATA_CSV,
    DT_DATA_LIBSVM,
    DT_DATA_IDX,
    DT_DATA_CRITEO /* sparse models only (lib/sparse_reader): no dense dataset reads it */
} dt_data_source;
/* The job's names of the sources, indexed by dt_data_source, NULL-terminated. */
extern const char *const dt_data_source_names[];

/* How features are scaled (the job's "scale"). AUTO, the job's default,
 * is resolved by dt_job_finish to one of the others: the data layer never
 * sees it. */
typedef enum { DT_SCALE_NONE = 0, DT_SCALE_STANDARDIZE, DT_SCALE_DIVIDE, DT_SCALE_AUTO } dt_scale;
extern const char *const dt_scale_names[]; /* indexed by dt_scale, NULL-terminated */

/* The job's data fields (conf/README.md), owned here; dt_job embeds them. */
typedef struct {
    dt_data_source source;
    int64_t num_examples;           /* N >= 1 (synthetic sources; files say their own) */
    double noise;                   /* stddev of the label noise, >= 0 (synthetic) */
    char train_data[DT_PATH_MAX];   /* csv / libsvm file, or idx images; .gz is read too */
    char train_labels[DT_PATH_MAX]; /* idx labels; "" for csv and libsvm */
    char eval_data[DT_PATH_MAX];    /* held-out set, same format; "" for none */
    char eval_labels[DT_PATH_MAX];  /* idx labels of the held-out set */
    double validation_fraction;     /* 0 <= f < 1: with no eval_data, the share of
                                       train_data's rows held out as the held-out set */
    char label_column[64];          /* csv: the label column's header name, or its 0-based index */
    dt_scale scale;                 /* standardize: per feature, over the training file */
    int scale_chosen;               /* scale was "auto": dt_job_finish chose it */
    double scale_divisor;           /* > 0; 255 for 8-bit images */
    int skip_bad_rows;              /* 1: skip and count malformed rows instead of failing */
} dt_data_config;

/* What a model asks of its examples (dt_model_data_needs fills it in), so
 * data depends on no model type. */
typedef struct {
    int num_features;         /* F >= 1 */
    dt_label_kind label_kind; /* real targets or class indices */
    int num_classes;          /* K for DT_LABEL_CLASS */
    int svm_signed_labels;    /* libsvm: -1 and +1 read as the classes 0 and 1 */
} dt_data_needs;

/* 1 when the source is a file (csv, libsvm, idx). */
int dt_data_reads_files(const dt_data_config *cfg);
/* 1 when the held-out set is a split of the training file: a file source,
 * no eval_data and validation_fraction > 0. Every role that reads the file
 * then holds out the same rows: round(f * n_c) of each class's n_c rows
 * (of all rows for real targets), drawn by the seed, each class keeping
 * one training row at least. Training sees only the others, standardize's
 * statistics are theirs, and example i is the i-th training row kept. */
int dt_data_splits(const dt_data_config *cfg);
/* 1 when the job has a held-out set: eval_data or a split. */
int dt_data_has_held_out(const dt_data_config *cfg);
/* The file the held-out rows are read from: eval_data, or train_data for
 * a split (their csv columns are the same). */
const char *dt_data_held_out_file(const dt_data_config *cfg);
/* The held-out set's name for a log line or a message: eval_data's path,
 * or "the validation rows of <train_data>"; into buf (n bytes). */
void dt_data_held_out_name(const dt_data_config *cfg, char *buf, size_t n);
/* The source a training file's form says, for a job that names no "data":
 * by its name, ".csv" csv, ".svm" or ".libsvm" libsvm (each also with
 * ".gz" after it, case ignored); else by its first 4 bytes, an idx images
 * header (magic 0x00000803) idx. *how gets "its name" or "its idx header"
 * (static). Errors: DT_ECONFIG naming "train_data" and path when neither
 * tells (a labels file given as the images, too), or when path cannot be
 * read to tell (the reader's reason). */
int dt_data_source_of_file(const char *path, dt_data_source *out, const char **how,
                           dt_err *err) DT_WARN_UNUSED;
/* The reader's format of a source that reads files (a bug otherwise). */
dt_reader_format dt_data_reader_format(const dt_data_config *cfg);
/* The reader parameters for cfg's files: F, labels and K from needs,
 * label_column (borrowed from cfg) and skip_bad_rows; default max_values;
 * labels required. */
void dt_data_reader_params(const dt_data_config *cfg, const dt_data_needs *needs,
                           dt_reader_params *out);

typedef struct {
    int rows;       /* B: examples in this batch */
    int cols;       /* F: features per example */
    const float *x; /* (B, F) row-major, borrowed from the dataset */
    const float *y; /* (B) targets, borrowed; NULL for a file read without labels */
} dt_batch;

typedef struct dt_dataset dt_dataset; /* opaque; owns its buffers */

/* Opens cfg's source and keeps shard `shard` of `num_shards`; seed drives
 * the synthetic values and the shuffling. Errors (*out stays NULL): unknown
 * source or scaling, a field out of range (named in the message), shard out
 * of range, an empty shard (more shards than examples), no memory, and the
 * reader's errors about the file, prefixed "data: " (DT_ECORRUPT for a
 * damaged one, DT_EINVAL for bad content, DT_ECONFIG for content that does
 * not fit the config). A missing file is DT_ECONFIG naming its job field:
 * "data: \"train_data\": no such file: x.csv" (dt_data_check_files). */
int dt_data_open(const dt_data_config *cfg, const dt_data_needs *needs, uint64_t seed, int shard,
                 int num_shards, dt_dataset **out, dt_err *err) DT_WARN_UNUSED;
/* Opens the held-out set (cfg->eval_data, and eval_labels for idx) whole,
 * unsharded (one shard of one), scaled with the statistics of the TRAINING
 * file, so with "standardize" it reads train_data once more to take them
 * (the time of a read and one training table of memory, given back before
 * returning). dt_data_all and dt_data_next work on it. Errors as
 * dt_data_open; a synthetic source or an empty eval_data is DT_EINVAL. */
int dt_data_open_eval(const dt_data_config *cfg, const dt_data_needs *needs, uint64_t seed,
                      dt_dataset **out, dt_err *err) DT_WARN_UNUSED;
/* As dt_data_open_eval, for a cfg->eval_data WITHOUT labels (for
 * predictions): a csv of F feature columns, none of them the label column;
 * libsvm rows of index:value pairs alone; idx images with no labels file
 * (cfg->eval_labels must be empty). The features are scaled exactly as
 * dt_data_open_eval scales a labeled file, with the statistics of the
 * training file (which has its labels). The batches of dt_data_all and
 * dt_data_next have y NULL. Errors as dt_data_open_eval; a row or header laid
 * out with a label is the reader's DT_EINVAL naming file:line, prefixed
 * "data: ". */
int dt_data_open_unlabeled(const dt_data_config *cfg, const dt_data_needs *needs, uint64_t seed,
                           dt_dataset **out, dt_err *err) DT_WARN_UNUSED;
/* The statistics "standardize" scales with: per feature, over the whole
 * training file (views; the owner says how long they live). */
typedef struct {
    int num_features;   /* F; 0: none (the data is not standardized) */
    const double *mean; /* (F) */
    const double *std;  /* (F) each > 0 */
} dt_data_stats;

/* The statistics ds was scaled with, borrowed from ds (valid until
 * dt_data_free); num_features 0 when it was not standardized. For the
 * chief's checkpoints, which carry them. */
void dt_data_stats_of(const dt_dataset *ds, dt_data_stats *out);

/* dt_data_open_eval (labeled 1) or dt_data_open_unlabeled (labeled 0), scaled
 * with stats when given (a checkpoint's: the training file is not read)
 * instead of statistics taken from cfg->train_data; stats NULL is the same
 * as those two. Given stats for another feature count are DT_ECONFIG; a
 * mean or std that is not finite, or a std <= 0, DT_EINVAL. */
int dt_data_open_held_out(const dt_data_config *cfg, const dt_data_needs *needs, uint64_t seed,
                          const dt_data_stats *stats, int labeled, dt_dataset **out,
                          dt_err *err) DT_WARN_UNUSED;

/* What the training file says of the model's shape, for a job that leaves
 * "features" (and with want_classes "classes") to the data:
 * dt_reader_infer on cfg->train_data (idx: and train_labels), with
 * label_column from cfg. Errors as dt_reader_infer's, prefixed "data: ";
 * a synthetic source or an empty train_data is DT_EINVAL, a missing file
 * as dt_data_check_files says. */
int dt_data_infer(const dt_data_config *cfg, const dt_data_needs *needs, int want_classes,
                  dt_reader_shape *out, dt_err *err) DT_WARN_UNUSED;

/* The names of the feature columns of path, a file in cfg's format, in
 * order, joined by commas (dt_reader_csv_names), with its label column left
 * out when labeled; *out malloc'd, the caller frees it. Only csv names its
 * columns: for the other sources *out is NULL. Errors: the reader's about
 * the file's header, prefixed "data: ". */
int dt_data_feature_names(const dt_data_config *cfg, const dt_data_needs *needs, const char *path,
                          int labeled, char **out, dt_err *err) DT_WARN_UNUSED;

/* csv: DT_ECONFIG when the feature columns of path (dt_data_feature_names)
 * are not want, the training file's (a checkpoint's "feature_names"),
 * naming the first that differs, by name and position; 0 when they are, when
 * want is NULL, when the source names no columns, or when their count
 * differs (the read reports that). Errors of the header as
 * dt_data_feature_names. */
int dt_data_check_names(const dt_data_config *cfg, const dt_data_needs *needs, const char *path,
                        int labeled, const char *want, dt_err *err) DT_WARN_UNUSED;

/* 0 when data (and labels, when not NULL or "") exist, or fail to stat
 * for another reason, which reading them reports; DT_ECONFIG
 * "<prefix>: <name>: no such file: <path>" for one that does not, so the
 * message names the config field or flag that points to it (prefix
 * "data", name "\"eval_data\""; prefix "predict", name "--data"). Every
 * data set this module opens checks its files so. */
int dt_data_check_files(const char *prefix, const char *data_name, const char *data,
                        const char *labels_name, const char *labels, dt_err *err) DT_WARN_UNUSED;

/* Examples in this shard. */
int64_t dt_data_size(const dt_dataset *ds);
/* Examples in the whole data set, all shards together (for files: the rows
 * kept from the file; for synthetic sources: num_examples). */
int64_t dt_data_total(const dt_dataset *ds);
/* Completed passes over the shard so far. For tests: the count is the
 * dataset's own (dt_dataset is opaque); training counts steps, not epochs. */
int dt_data_epoch(const dt_dataset *ds);
/* Fills out with the next min(batch_size, examples left in this epoch)
 * examples, then wraps into the next (reshuffled) epoch once the pass is used
 * up. A batch never spans two epochs, so the last batch of a pass is short
 * when batch_size does not divide the shard size. The batch is borrowed from
 * ds and stays valid until the next call; its buffers grow to the largest
 * batch_size asked for and are then reused. Errors: batch_size < 1, no memory. */
int dt_data_next(dt_dataset *ds, int batch_size, dt_batch *out, dt_err *err) DT_WARN_UNUSED;
/* Positions ds where dt_data_next, called `step` times from the start
 * with batch_size, would leave it: at batch step % B of epoch step / B,
 * B = ceil(size / batch_size) batches a pass, that epoch's order drawn
 * once (the order is a permutation: no batch before it is read or made).
 * A restarted worker resumes its passes so. Errors: batch_size < 1 or
 * step < 0 (DT_EINVAL), an epoch past INT_MAX (DT_EINVAL); ds is then
 * unchanged. */
int dt_data_seek(dt_dataset *ds, int batch_size, int64_t step, dt_err *err) DT_WARN_UNUSED;
/* Every example of the shard in index order, for evaluation and tests,
 * borrowed from ds (valid until dt_data_free). Only for sources that are held
 * in memory ("line" and the files); DT_EPRECOND for "wide". */
int dt_data_all(dt_dataset *ds, dt_batch *out, dt_err *err) DT_WARN_UNUSED;
void dt_data_free(dt_dataset *ds); /* NULL is a no-op */

/* "wide": the true weights w* (F), borrowed from ds; NULL for other sources.
 * For tests (what a model should learn): w* is drawn inside the dataset. */
const float *dt_data_true_weights(const dt_dataset *ds);

/* The shuffling rule of every training set, dense (dt_data_next) and
 * sparse (lib/sparse.h, dt_sparse_feed): epoch e of shard s's n examples
 * is 0..n-1 Fisher-Yates-shuffled, position k from n - 1 down to 1
 * swapped with position dt_data_shuffle_draw(&state, k), state starting
 * at dt_data_shuffle_start(seed, s, e). Both sides draw the same numbers,
 * so a dense and a sparse job on one file visit its rows in one order.
 * The start depends on (seed, shard, epoch) alone; a draw is in [0, k]
 * (k >= 1) and advances *state. */
uint64_t dt_data_shuffle_start(uint64_t seed, int shard, int epoch);
int64_t dt_data_shuffle_draw(uint64_t *state, int64_t k);
/* Where local step `step` of a training set of size examples read
 * batch_size at a time falls by the rule above (a batch never spans two
 * epochs): *epoch = step / B and *pos = (step % B) * batch_size, B =
 * ceil(size / batch_size). Shared by dt_data_seek and the sparse feed's.
 * Errors: size or batch_size < 1, step < 0, an epoch past INT_MAX
 * (DT_EINVAL). */
int dt_data_seek_position(int64_t size, int batch_size, int64_t step, int *epoch, int64_t *pos,
                          dt_err *err) DT_WARN_UNUSED;

/* A standard normal from a splitmix64 stream: advances *state by two steps
 * (Box-Muller). Deterministic for a given state. */
double dt_data_normal(uint64_t *state);
/* Fills out (n) with normals of mean 0 and standard deviation stddev from the
 * stream *state, using both of Box-Muller's outputs; for bulk initialisation
 * (true weights, model init). */
void dt_data_normals(uint64_t *state, float *out, int64_t n, double stddev);

#endif
