/*
 * Fuzz target: the data file readers (csv, libsvm, idx; plain or gzip).
 * The first input byte picks the format and the parameters:
 *   bits 0-1  format: 0 csv, 1 libsvm, 2 and 3 idx
 *   bits 2-4  F - 1 (1..8 features)
 *   bit 5     labels: 0 real, 1 classes (K = 3)
 *   bit 6     skip_bad_rows
 *   bit 7     csv: label column "label" (by name) instead of "0";
 *             libsvm: accept -1/+1 labels (K = 2)
 * For idx, the next two bytes (little-endian) split the rest into the
 * images file and the labels file. The readers take paths, so the input is
 * written to files in a temp dir (made once, removed at exit). max_values
 * is kept small so that no input can ask for much memory.
 *
 * Beyond "no crash, no sanitizer report": a failure has a negative code and
 * a message and leaves the table empty; a table has rows >= 1, F columns,
 * finite values, labels of the declared kind, and skipped rows only with
 * skip_bad_rows.
 */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_reader: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static char dir[256];

static void cleanup(void) {
    static const char *const names[] = {"data", "labels"};
    for (int i = 0; i < 2; i++) {
        char path[300];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* $TMPDIR, else /dev/shm (memory: the saves' fsyncs cost nothing), else /tmp. */
static const char *temp_base(void) {
    const char *base = getenv("TMPDIR");
    if (base && *base) return base;
    return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

static void write_file(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(size == 0 || fwrite(data, 1, size, f) == size);
    CHECK(fclose(f) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/dtrain-fuzz-reader-XXXXXX", temp_base());
        CHECK(mkdtemp(dir) != NULL);
        atexit(cleanup);
        dt_log_set_level(DT_LOG_ERROR); /* skip_bad_rows warns once per file */
    }
    uint8_t sel = data[0];
    int format = sel & 3;
    dt_reader_params p;
    memset(&p, 0, sizeof p);
    p.num_features = 1 + ((sel >> 2) & 7);
    p.label_kind = (sel >> 5) & 1 ? DT_LABEL_CLASS : DT_LABEL_REAL;
    p.num_classes = 3;
    p.skip_bad_rows = (sel >> 6) & 1;
    p.label_column = "0";
    p.max_values = 1 << 16;
    if (sel >> 7) {
        if (format == 0) p.label_column = "label";
        if (format == 1) {
            p.svm_signed_labels = 1;
            p.label_kind = DT_LABEL_CLASS;
            p.num_classes = 2;
        }
    }
    const uint8_t *rest = data + 1;
    size_t left = size - 1;

    char data_path[300], labels_path[300];
    snprintf(data_path, sizeof data_path, "%s/data", dir);
    snprintf(labels_path, sizeof labels_path, "%s/labels", dir);
    dt_reader_table t;
    dt_err err;
    dt_err_clear(&err);
    memset(&t, 0xAB, sizeof t); /* the reader must zero it */
    int rc;
    if (format == 0) {
        write_file(data_path, rest, left);
        rc = dt_reader_csv(data_path, &p, &t, &err);
    } else if (format == 1) {
        write_file(data_path, rest, left);
        rc = dt_reader_libsvm(data_path, &p, &t, &err);
    } else {
        if (left < 2) return 0;
        size_t split = (size_t)rest[0] | (size_t)rest[1] << 8;
        rest += 2;
        left -= 2;
        if (split > left) split = left;
        write_file(data_path, rest, split);
        write_file(labels_path, rest + split, left - split);
        rc = dt_reader_idx(data_path, labels_path, &p, &t, &err);
    }
    if (rc < 0) {
        CHECK(err.code == rc && err.msg[0] != '\0');
        CHECK(t.x == NULL && t.y == NULL && t.rows == 0);
        return 0;
    }
    CHECK(rc == 0);
    CHECK(t.rows >= 1 && t.cols == p.num_features && t.x && t.y);
    CHECK(t.rows * t.cols <= p.max_values);
    CHECK(t.skipped >= 0 && (p.skip_bad_rows || t.skipped == 0));
    for (int64_t i = 0; i < t.rows * t.cols; i++)
        CHECK(isfinite(t.x[i]));
    for (int64_t i = 0; i < t.rows; i++) {
        CHECK(isfinite(t.y[i]));
        if (p.label_kind == DT_LABEL_CLASS)
            CHECK(t.y[i] >= 0 && t.y[i] < p.num_classes && t.y[i] == floorf(t.y[i]));
    }
    dt_reader_table_deinit(&t);
    return 0;
}
