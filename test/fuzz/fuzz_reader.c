/*
 * Fuzz target: the data file readers (csv, libsvm, idx; plain or gzip),
 * with labels and without, and dt_reader_detect_labels.
 * The first input byte picks the format and the parameters:
 *   bits 0-1  format: 0 csv, 1 libsvm, 2 idx, all read with labels
 *             (DT_LABELS_REQUIRED); 3: the next byte picks the format and
 *             the labels mode
 *   bits 2-4  F - 1 (1..8 features)
 *   bit 5     labels: 0 real, 1 classes (K = 3)
 *   bit 6     skip_bad_rows
 *   bit 7     csv: label column "label" (by name) instead of "0";
 *             libsvm: accept -1/+1 labels (K = 2)
 * With format 3, the second byte:
 *   bits 0-1  format: 0 csv, 1 libsvm, 2 and 3 idx
 *   bit 2     labels: 0 none (DT_LABELS_NONE); 1 the mode
 *             dt_reader_detect_labels reports (none when it fails)
 * (Format 3 was a second idx before; no kept input used it beyond a lone
 * selector byte, so the committed corpus means what it meant.)
 * For idx, the next two bytes (little-endian) split the rest into the
 * images file and the labels file; with format 3 an empty labels part means
 * no labels file. The readers take paths, so the input is written to files
 * in a temp dir (made once, removed at exit). max_values is kept small so
 * that no input can ask for much memory.
 *
 * Beyond "no crash, no sanitizer report": a failure has a negative code and
 * a message and leaves the table empty; a table has rows >= 1, F columns,
 * finite values, labels of the declared kind (y NULL when read without
 * them), and skipped rows only with skip_bad_rows. Every input also goes
 * through dt_reader_detect_labels, which fails with a code and a message or
 * answers 0 or 1 with a line that names the file; and when a read without
 * skip_bad_rows succeeds, detection must have told its mode: a file that
 * reads whole as labeled (or unlabeled) starts like one. A labeled input
 * also goes through dt_reader_infer (classes too for class labels), which
 * fails with a code and a message or says F >= 1 (and 2 <= K <= the most it
 * infers) with lines that name the file; when the read succeeds too, the
 * shape it read agrees with the one inferred (csv and idx: the same F;
 * libsvm without skip_bad_rows: no index past F; every class below K).
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

/* dt_reader_detect_labels on the input's files; checks its contract and
 * returns its rc, with *labeled. */
static int detect(dt_reader_format format, const char *data_path, const char *labels_path,
                  const dt_reader_params *p, int *labeled) {
    char how[512];
    dt_err err;
    dt_err_clear(&err);
    memset(how, 0xAB, sizeof how);
    *labeled = -1;
    int rc =
        dt_reader_detect_labels(format, data_path, labels_path, p, labeled, how, sizeof how, &err);
    if (rc < 0) {
        CHECK(err.code == rc && err.msg[0] != '\0');
        return rc;
    }
    CHECK(rc == 0);
    CHECK(*labeled == 0 || *labeled == 1);
    CHECK(memchr(how, '\0', sizeof how) != NULL);
    CHECK(strncmp(how, data_path, strlen(data_path)) == 0);
    return 0;
}

/* dt_reader_infer on the input's files (classes for class labels); checks
 * its contract and returns its rc, with *shape. */
static int infer(dt_reader_format format, const char *data_path, const char *labels_path,
                 const dt_reader_params *p, dt_reader_shape *shape) {
    dt_err err;
    dt_err_clear(&err);
    memset(shape, 0xAB, sizeof *shape);
    const int want_classes = p->label_kind == DT_LABEL_CLASS;
    int rc = dt_reader_infer(format, data_path, labels_path, p, want_classes, shape, &err);
    if (rc < 0) {
        CHECK(err.code == rc && err.msg[0] != '\0');
        return rc;
    }
    CHECK(rc == 0);
    CHECK(shape->num_features >= 1);
    CHECK(want_classes ? shape->num_classes >= 2 && shape->num_classes <= DT_READER_MAX_CLASSES
                       : shape->num_classes == 0);
    CHECK(memchr(shape->features_how, '\0', sizeof shape->features_how) != NULL);
    CHECK(strstr(shape->features_how, data_path) == shape->features_how);
    CHECK(memchr(shape->classes_how, '\0', sizeof shape->classes_how) != NULL);
    CHECK(!want_classes || shape->classes_how[0] != '\0');
    return 0;
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
    int format = sel & 3, choose_mode = format == 3, use_detect = 0;
    const uint8_t *rest = data + 1;
    size_t left = size - 1;
    if (choose_mode) {
        if (left < 1) return 0;
        format = rest[0] & 3;
        use_detect = (rest[0] >> 2) & 1;
        rest++;
        left--;
    }
    if (format == 3) format = 2;
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

    char data_path[300], labels_path[300];
    snprintf(data_path, sizeof data_path, "%s/data", dir);
    snprintf(labels_path, sizeof labels_path, "%s/labels", dir);
    const char *labels_arg = labels_path;
    if (format == 2) {
        if (left < 2) return 0;
        size_t split = (size_t)rest[0] | (size_t)rest[1] << 8;
        rest += 2;
        left -= 2;
        if (split > left) split = left;
        write_file(data_path, rest, split);
        write_file(labels_path, rest + split, left - split);
        if (choose_mode && split == left) labels_arg = "";
    } else {
        write_file(data_path, rest, left);
    }
    int labeled_found,
        detect_rc = detect((dt_reader_format)format, data_path, labels_arg, &p, &labeled_found);
    if (choose_mode)
        p.labels =
            use_detect && detect_rc == 0 && labeled_found ? DT_LABELS_REQUIRED : DT_LABELS_NONE;
    const int labeled = p.labels == DT_LABELS_REQUIRED;

    dt_reader_shape shape;
    int infer_rc =
        labeled ? infer((dt_reader_format)format, data_path, labels_arg, &p, &shape) : -1;

    dt_reader_table t;
    dt_err err;
    dt_err_clear(&err);
    memset(&t, 0xAB, sizeof t); /* the reader must zero it */
    int rc;
    if (format == 0)
        rc = dt_reader_csv(data_path, &p, &t, &err);
    else if (format == 1)
        rc = dt_reader_libsvm(data_path, &p, &t, &err);
    else
        rc = dt_reader_idx(data_path, labels_arg, &p, &t, &err);
    if (rc < 0) {
        CHECK(err.code == rc && err.msg[0] != '\0');
        CHECK(t.x == NULL && t.y == NULL && t.rows == 0);
        return 0;
    }
    CHECK(rc == 0);
    CHECK(t.rows >= 1 && t.cols == p.num_features && t.x);
    CHECK(t.labeled == labeled && (t.y != NULL) == labeled);
    CHECK(t.rows * t.cols <= p.max_values);
    CHECK(t.skipped >= 0 && (p.skip_bad_rows || t.skipped == 0));
    /* A file read whole in one layout starts in it (a skipped first row
     * could start in the other). */
    if (!p.skip_bad_rows) CHECK(detect_rc == 0 && labeled_found == labeled);
    if (infer_rc == 0) {
        /* libsvm: a row skipped for an index past F still counts there. */
        if (format != 1)
            CHECK(shape.num_features == p.num_features);
        else if (!p.skip_bad_rows)
            CHECK(shape.num_features <= p.num_features);
        /* Every label read is a class the labels said, when they said one. */
        for (int64_t i = 0; i < t.rows && shape.num_classes; i++)
            CHECK(t.y[i] < shape.num_classes);
    }
    for (int64_t i = 0; i < t.rows * t.cols; i++)
        CHECK(isfinite(t.x[i]));
    for (int64_t i = 0; i < t.rows && labeled; i++) {
        CHECK(isfinite(t.y[i]));
        if (p.label_kind == DT_LABEL_CLASS)
            CHECK(t.y[i] >= 0 && t.y[i] < p.num_classes && t.y[i] == floorf(t.y[i]));
    }
    dt_reader_table_deinit(&t);
    return 0;
}
