/*
 * Fuzz target: the sparse readers (Criteo layout and libsvm as ids; plain
 * or gzip) and the CSR sets they make.
 * The first input byte picks the reader and its parameters:
 *   bit 0     reader: 0 criteo, 1 libsvm
 *   bit 1     labels: 1 required, 0 none
 *   bit 2     skip_bad_rows
 *   bit 3     libsvm: ids hashed (hash_bits 1..16 from bits 4-7) rather
 *             than indices below F = 2^(bits 4-7 + 1)
 *   bits 4-7  hash_bits - 1 (criteo, hashed libsvm)
 * The second byte: bits 0-1 the number of shards - 1, bits 2-3 the shard
 * (taken mod the number); bit 4 libsvm classes (K = 2, -1/+1 labels)
 * rather than real targets. The rest is the file. max_values is small, so
 * no input can ask for much memory.
 *
 * Beyond "no crash, no sanitizer report": a failure has a negative code and
 * a message and leaves the set empty; a set passes dt_sparse_check as one
 * batch (offsets from 0, ids below F, fields below C, finite values and
 * dense features), has labels exactly when asked (0 or 1 for criteo),
 * skipped rows only with skip_bad_rows, no more rows than the file's, and
 * its distinct ids index without error.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "sparse.h"
#include "sparse_reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_sparse_reader: %s:%d: check failed: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static char dir[256], path[300];

static void cleanup(void) {
    unlink(path);
    rmdir(dir);
}

static const char *temp_base(void) {
    const char *base = getenv("TMPDIR");
    if (base && *base) return base;
    return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/dtrain-fuzz-sparse-XXXXXX", temp_base());
        CHECK(mkdtemp(dir) != NULL);
        snprintf(path, sizeof path, "%s/data", dir);
        atexit(cleanup);
        dt_log_set_level(DT_LOG_ERROR);
    }
    const uint8_t sel = data[0], sel2 = data[1];
    const int libsvm = sel & 1, bits = 1 + (sel >> 4);
    dt_sparse_read_params p;
    memset(&p, 0, sizeof p);
    p.labels = (sel >> 1) & 1 ? DT_LABELS_REQUIRED : DT_LABELS_NONE;
    p.skip_bad_rows = (sel >> 2) & 1;
    p.hash_bits = !libsvm || (sel >> 3) & 1 ? bits : 0;
    p.num_features = (int64_t)1 << bits;
    p.num_shards = 1 + (sel2 & 3);
    p.shard = ((sel2 >> 2) & 3) % p.num_shards;
    p.label_kind = (sel2 >> 4) & 1 ? DT_LABEL_CLASS : DT_LABEL_REAL;
    p.num_classes = 2;
    p.svm_signed_labels = 1;
    p.max_values = 1 << 16;
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(size == 2 || fwrite(data + 2, 1, size - 2, f) == size - 2);
    CHECK(fclose(f) == 0);

    dt_sparse_set s;
    memset(&s, 0xAB, sizeof s); /* the reader must zero it */
    dt_err err;
    dt_err_clear(&err);
    int rc = libsvm ? dt_sparse_read_libsvm(path, &p, &s, &err)
                    : dt_sparse_read_criteo(path, &p, &s, &err);
    if (rc < 0) {
        CHECK(err.code == rc && err.msg[0] != '\0');
        CHECK(s.rows == 0 && s.ids == NULL && s.offsets == NULL && s.y == NULL);
        return 0;
    }
    CHECK(rc == 0);
    CHECK(s.rows >= 1 && s.rows <= s.file_rows && s.offsets[0] == 0);
    CHECK((s.y != NULL) == (p.labels == DT_LABELS_REQUIRED));
    CHECK(s.skipped >= 0 && (p.skip_bad_rows || s.skipped == 0));
    CHECK(s.offsets[s.rows] + s.rows * s.dense_cols <= p.max_values);
    if (libsvm) {
        CHECK(s.dense_cols == 0 && s.fields == NULL && (s.values || s.offsets[s.rows] == 0));
        CHECK(s.num_ids == (int64_t)1 << bits);
    } else {
        CHECK(s.dense_cols == DT_CRITEO_INT_COLUMNS && s.num_fields == DT_CRITEO_CAT_COLUMNS);
        CHECK(s.values == NULL && s.num_ids == (int64_t)1 << bits);
        for (int64_t i = 0; s.y && i < s.rows; i++)
            CHECK(s.y[i] == 0 || s.y[i] == 1);
        for (int64_t i = 0; i < s.rows * s.dense_cols; i++)
            CHECK(s.dense[i] >= 0);
    }
    for (int64_t i = 0; s.y && i < s.rows; i++) {
        CHECK(isfinite(s.y[i]));
        if (libsvm && p.label_kind == DT_LABEL_CLASS) CHECK(s.y[i] == 0 || s.y[i] == 1);
    }
    if (s.rows <= 100000) {
        dt_sparse_batch b;
        dt_sparse_set_slice(&s, 0, (int)s.rows, &b);
        CHECK(dt_sparse_check(&b, &err) == 0);
        dt_sparse_index ix = {0};
        CHECK(dt_sparse_index_build(&ix, &b, &err) == 0);
        CHECK(ix.n <= dt_sparse_nnz(&b));
        for (int64_t k = 1; k < ix.n; k++)
            CHECK(ix.ids[k] > ix.ids[k - 1]);
        for (int64_t e = 0; e < ix.nnz; e++)
            CHECK(ix.ids[ix.pos[e]] == b.ids[e]);
        dt_sparse_index_deinit(&ix);
    }
    dt_sparse_set_deinit(&s);
    return 0;
}
