/*
 * sparse_reader: text files of sparse examples read into a dt_sparse_set
 * (lib/sparse.h's CSR layout), for models whose features are table rows.
 * The dense readers (lib/reader.h) are unchanged; files go through the
 * same line splitting (plain or .gz, lines up to 256 MiB, a trailing CR
 * dropped).
 *
 * Formats:
 *   criteo  The Criteo display-ads layout (Kaggle's train.txt, the
 *           Terabyte click logs' day_N): one example per line, 40 fields
 *           separated by tabs: the label (0 or 1), 13 integer columns
 *           I1..I13, 26 categorical columns C1..C26 (hash strings such as
 *           "68fd1e64"). Any field but the label may be empty (missing).
 *             - I1..I13 become the Dd = 13 dense features, x -> log(1 + x)
 *               for x > 0 and 0 for x <= 0 or missing (the usual transform
 *               for these counts, as in DLRM's preprocessing, which also
 *               clips the few negative values to 0). An integer is decimal
 *               with an optional sign and fits int64; anything else is a
 *               malformed row.
 *             - C1..C26 become one entry each when not empty: id =
 *               dt_hash_feature(14 + c, value, hash_bits) (lib/hash.h: the
 *               column's 0-based field in the labeled layout is the hash
 *               seed) and field c (0..25); values are all 1. Missing
 *               categoricals give no entry.
 *           Without labels (Criteo's test.txt) a line has the 39 fields
 *           after the label; the ids are the same as with it.
 *   libsvm  svmlight text, as the dense reader reads it (`label idx:val
 *           ... # comment`, optional `qid:N`, 1-based strictly increasing
 *           indices, -1/+1 labels for a binary classifier), but sparse: the
 *           entries are the pairs as written (a value of 0 written out is
 *           an entry). With hash_bits 0 an index idx in 1..F becomes id
 *           idx - 1 (F = num_features, up to 2^40); with hash_bits > 0 it
 *           becomes dt_hash_index(idx, hash_bits) for any idx from 1 to
 *           2^62, and two indices of a row may then share an id (their
 *           values add up in the models). No fields, no dense features.
 *
 * Sharding: of the rows kept (malformed rows skipped are not counted),
 * row i goes to shard i % num_shards, as lib/data.h shards files; only
 * the caller's shard is kept in memory, so each worker holds about
 * 1/num_shards of the file. file_rows counts every shard's.
 *
 * Errors say where: "path:line: column \"I5\": not an integer: \"abc\""
 * (criteo names the column: label, I1..I13, C1..C26), "path:line: feature
 * index 0 is out of range 1..F" (libsvm). Codes as lib/reader.h's:
 * DT_ENOTFOUND, DT_EIO, DT_ECORRUPT (damaged gzip), DT_EINVAL (malformed
 * content, more values than max_values), DT_ENOMEM. skip_bad_rows leaves
 * malformed rows out and counts them, with one warning per file naming the
 * first; a file with no rows left (in all shards) is an error.
 *
 * Stateless; safe from several threads on separate sets.
 */
#ifndef DT_SPARSE_READER_H
#define DT_SPARSE_READER_H

#include <stdint.h>

#include "err.h"
#include "reader.h"
#include "sparse.h"

#define DT_CRITEO_INT_COLUMNS 13
#define DT_CRITEO_CAT_COLUMNS 26
#define DT_CRITEO_FIELDS (1 + DT_CRITEO_INT_COLUMNS + DT_CRITEO_CAT_COLUMNS)

typedef struct {
    int hash_bits;            /* criteo: 1..40; libsvm: 0 (ids are indices - 1) or 1..40 */
    int64_t num_features;     /* libsvm with hash_bits 0: F, 1..2^40 */
    dt_label_kind label_kind; /* libsvm: real targets or classes (criteo: always 0/1) */
    int num_classes;          /* libsvm, DT_LABEL_CLASS: K >= 2 */
    int svm_signed_labels;    /* libsvm: -1 and +1 read as 0 and 1 */
    dt_labels_mode labels;    /* rows carry labels (default) or not */
    int skip_bad_rows;
    int shard, num_shards; /* keep shard `shard` of num_shards (0 of 0 or 1: all) */
    int64_t max_values;    /* bound on the shard's entries + N * Dd; 0: 2^31 */
} dt_sparse_read_params;

/* Whether a Criteo-layout file carries labels, by its first line: 40
 * tab-separated fields (a label first) or 39 (the features alone, as
 * Kaggle's test.txt and `dtrain gen-criteo --no-labels` write them). how
 * gets what it went by ("<path>:1: 39 fields"). A file with no lines reads
 * as labeled (the read then says it has no examples). Errors: another
 * count of fields, naming the file, the line and the count (DT_EINVAL);
 * the file's (DT_EIO, DT_ENOTFOUND). */
int dt_sparse_detect_criteo_labels(const char *path, int *labeled, char *how, size_t cap,
                                   dt_err *err) DT_WARN_UNUSED;

int dt_sparse_read_criteo(const char *path, const dt_sparse_read_params *p, dt_sparse_set *out,
                          dt_err *err) DT_WARN_UNUSED;
int dt_sparse_read_libsvm(const char *path, const dt_sparse_read_params *p, dt_sparse_set *out,
                          dt_err *err) DT_WARN_UNUSED;

/* The dense value of a Criteo integer: log(1 + x) for x > 0, else 0. */
float dt_criteo_dense(int64_t x);

#endif
