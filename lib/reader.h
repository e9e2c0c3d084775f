/*
 * reader: whole data files parsed into memory as a table of examples,
 * x (N, F) float features and y (N) float labels, for the data module.
 *
 * Letters: N examples (rows kept), F features (fixed by the job; a job
 * that leaves it unset takes dt_reader_infer's), K classes.
 *
 * Every file is read through zlib, so "x.csv" and "x.csv.gz" read alike (a
 * plain file passes through unchanged).
 *
 * Formats:
 *   csv     A header row is required. One column is the label, chosen by
 *           label_column: all digits is a 0-based column index, anything else
 *           a header name (which must be unique). Every other column is a
 *           numeric feature, in file order, and there must be exactly F of
 *           them. Fields are separated by commas; spaces and tabs around a
 *           field are ignored, and so is a trailing CR. Quoting is minimal:
 *           a field may be wrapped in double quotes ("1.5", "age"), but a
 *           quoted field may not contain commas or quotes. Empty lines are not
 *           rows and are passed over.
 *   libsvm  svmlight text: `label idx:val idx:val ... # comment`. Indices
 *           are 1-based and strictly increasing, 1 <= idx <= F; features not
 *           named are 0 (rows become dense). An optional `qid:N` right after
 *           the label is ignored; `#` starts a comment; lines that are empty
 *           once the comment is gone are passed over. For the logistic model
 *           the svmlight labels -1 and +1 are accepted too, -1 read as 0.
 *   idx     MNIST's IDX pair: an images file (magic 0x00000803, dims N, R, C
 *           as big-endian 32-bit, then N*R*C unsigned bytes) and a labels
 *           file (magic 0x00000801, dim N, then N unsigned bytes). R*C must
 *           be F and N must agree between the files; pixels become floats
 *           0..255 unscaled. Bytes after the last record are an error.
 *
 * Labels: for classification (DT_LABEL_CLASS) a label must be an integral
 * value in [0, K); for regression (DT_LABEL_REAL) any finite number. Every
 * feature must be a finite number that fits a float. A row that is well
 * formed but does not fit the job (a label >= K, a libsvm index > F) is a
 * configuration error, DT_ECONFIG, with the message naming "classes" or
 * "features" and its value.
 *
 * Files without labels (labels = DT_LABELS_NONE, for predictions): a csv
 * has exactly F columns, all features, and none of them may be the named
 * label column; a libsvm row is `idx:val ...` (an optional `qid:N` first),
 * and a first token that is not index:value is refused as a label; idx
 * reads the images alone and no labels file may be given. The table's y is
 * then NULL. dt_reader_detect_labels tells the two layouts apart from the
 * start of a file.
 *
 * Shape: dt_reader_infer reads what a training file says of F and K, for
 * a job that leaves "features" or "classes" to the data: F from the csv
 * header (its columns less the label column), from the largest libsvm
 * feature index of any row, or from the idx header (rows x cols); K as the
 * largest label + 1, only when the labels are the class indices 0..K-1,
 * each one present at least once (otherwise the number of classes is not
 * clear and the job must say it). Rows the read would refuse do not stop
 * the scan: their tokens that do not parse are passed over, and the read
 * that follows reports them (or skips them) as usual.
 *
 * Errors say where: "path:line: column \"name\": reason" for csv,
 * "path:line: reason" for libsvm, "path: record i: reason" for idx (i is the
 * 0-based example index). Codes: DT_ENOTFOUND for a missing file, DT_EIO
 * for a failed read, DT_ECORRUPT for a bad magic number, a truncated file,
 * trailing bytes or a damaged gzip stream, DT_EINVAL for malformed content
 * and for data larger than max_values, DT_ENOMEM when memory runs out.
 *
 * skip_bad_rows: a malformed row (a bad field, field count, index, label,
 * or an idx label out of range) is left out and counted in `skipped`, and one
 * warning per file names the file, the count and the first row skipped. A
 * malformed header, a bad magic number or a truncated file still fail. A
 * file with no rows left is an error.
 *
 * Stateless; tables are owned by their caller. Safe to call from several
 * threads on separate tables.
 */
#ifndef DT_READER_H
#define DT_READER_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* The default bound on N * F: 2^31 floats (8 GiB). A file claiming or
 * holding more is refused before it exhausts memory. */
#define DT_READER_MAX_VALUES ((int64_t)1 << 31)

/* The formats above. The reader knows no job: data maps its sources to
 * these (dt_data_reader_format). */
typedef enum { DT_READER_CSV = 0, DT_READER_LIBSVM, DT_READER_IDX } dt_reader_format;

typedef enum {
    DT_LABEL_REAL = 0, /* regression: any finite number */
    DT_LABEL_CLASS,    /* a class index in [0, num_classes) */
} dt_label_kind;

typedef enum {
    DT_LABELS_REQUIRED = 0, /* every row carries a label (training, evaluation) */
    DT_LABELS_NONE,         /* no row does: features only (predictions) */
} dt_labels_mode;

typedef struct {
    int num_features;         /* F >= 1: the feature count every row must have */
    dt_label_kind label_kind; /* how labels are checked */
    int num_classes;          /* K >= 2 for DT_LABEL_CLASS; unused otherwise */
    int svm_signed_labels;    /* libsvm: accept -1 and +1 as the classes 0 and 1 */
    const char *label_column; /* csv: 0-based index (all digits) or header name; borrowed */
    int skip_bad_rows;        /* 1: skip and count malformed rows instead of failing */
    int64_t max_values;       /* bound on N * F; 0 means DT_READER_MAX_VALUES */
    dt_labels_mode labels;    /* whether rows carry labels; 0 (required) by default */
} dt_reader_params;

typedef struct {
    int64_t rows;    /* N */
    int cols;        /* F */
    float *x;        /* (N, F) row-major, owned */
    float *y;        /* (N) owned; NULL when the file was read without labels */
    int labeled;     /* 1: y holds the N labels; 0: read with DT_LABELS_NONE */
    int64_t skipped; /* malformed rows left out (only with skip_bad_rows) */
} dt_reader_table;

/* Each reads a whole file into *out (zeroed first, owned by the caller on
 * success; left empty on failure, with everything released). idx takes its
 * labels from labels_path, which must be NULL or "" with DT_LABELS_NONE. */
int dt_reader_csv(const char *path, const dt_reader_params *p, dt_reader_table *out,
                  dt_err *err) DT_WARN_UNUSED;
int dt_reader_libsvm(const char *path, const dt_reader_params *p, dt_reader_table *out,
                     dt_err *err) DT_WARN_UNUSED;
int dt_reader_idx(const char *images_path, const char *labels_path, const dt_reader_params *p,
                  dt_reader_table *out, dt_err *err) DT_WARN_UNUSED;

/* Reads a file of the given format (labels_path is used by idx only, and
 * must be NULL or "" with DT_LABELS_NONE). A value outside dt_reader_format
 * is DT_EINVAL. */
int dt_reader_load(dt_reader_format format, const char *data_path, const char *labels_path,
                   const dt_reader_params *p, dt_reader_table *out, dt_err *err) DT_WARN_UNUSED;

/* Whether a file carries labels, told from its start alone (p->labels is
 * not read): csv by its header, F + 1 columns (or a column named as the
 * label column) labeled, F columns not; libsvm by its first row, a label
 * first or an index:value pair first (a file with no rows counts as
 * labeled, so the read reports it); idx by whether labels_path is given.
 * *labeled gets 1 or 0, how (cap bytes; may be NULL) one line saying what
 * told, naming the file ("x.csv: 3 columns for 3 features, none of them the
 * label column \"y\""). Errors: the file's (DT_ENOTFOUND, DT_EIO,
 * DT_ECORRUPT), an empty csv or a header of neither width (DT_EINVAL,
 * "path:line: ..."), a value outside dt_reader_format. */
int dt_reader_detect_labels(dt_reader_format format, const char *data_path, const char *labels_path,
                            const dt_reader_params *p, int *labeled, char *how, size_t cap,
                            dt_err *err) DT_WARN_UNUSED;

/* csv: the names of path's feature columns, in order, trimmed and unquoted
 * as the read takes them (the label column, named by p->label_column, left
 * out unless p->labels is DT_LABELS_NONE), joined by commas (no csv name
 * holds one) into *out (malloc'd; the caller frees it). Reads the header
 * alone. Errors as dt_reader_csv's about a header. */
int dt_reader_csv_names(const char *path, const dt_reader_params *p, char **out,
                        dt_err *err) DT_WARN_UNUSED;

/* The most classes dt_reader_infer infers (a label of this or more is
 * more likely a value than a class index). */
#define DT_READER_MAX_CLASSES 65536

/* What a training file says of its shape (dt_reader_infer). */
typedef struct {
    int num_features;       /* F */
    int num_classes;        /* K, when asked for; else 0 */
    char features_how[200]; /* what told F, naming the file, for a log line */
    char classes_how[200];  /* what told K ("path: labels 0..9"); "" when not asked */
} dt_reader_shape;

/* Reads F (and with want_classes K) from the training file data_path (idx:
 * the images; labels_path its labels, read for K only) of the given format
 * into *out (zeroed first). p gives label_column (csv);
 * p->num_features is not read. One pass over the file, except that a csv
 * without want_classes and idx images are read no further than their
 * header. Errors: the file's (DT_ENOTFOUND, DT_EIO, DT_ECORRUPT), a csv
 * header without the label column (DT_ECONFIG) or with nothing else, a
 * libsvm file with no feature index (DT_EINVAL), labels that do not say K
 * (DT_ECONFIG, naming the file, why and "set \"classes\""), a value outside
 * dt_reader_format (DT_EINVAL). */
int dt_reader_infer(dt_reader_format format, const char *data_path, const char *labels_path,
                    const dt_reader_params *p, int want_classes, dt_reader_shape *out,
                    dt_err *err) DT_WARN_UNUSED;

/* Releases the table's buffers and zeroes it. NULL is a no-op. */
/* The first 4 bytes of a file (through zlib: a .gz file's, unpacked) as a
 * big-endian number into *magic, 0 when the file is shorter: an idx images
 * file's is DT_READER_IDX_IMAGES_MAGIC. Errors as the reads': DT_ENOTFOUND,
 * DT_EIO, DT_EINVAL for a directory, DT_ECORRUPT for a damaged gzip
 * stream, each naming path. */
#define DT_READER_IDX_IMAGES_MAGIC 0x00000803u
#define DT_READER_IDX_LABELS_MAGIC 0x00000801u
int dt_reader_magic(const char *path, uint32_t *magic, dt_err *err) DT_WARN_UNUSED;
void dt_reader_table_deinit(dt_reader_table *t);

/* ---- lines, for the readers of other text formats (lib/sparse_reader) ----
 * The same line splitting the csv and libsvm readers use: plain or gzip
 * files, lines up to 256 MiB, a trailing CR dropped. */
typedef struct dt_reader_lines dt_reader_lines; /* opaque; owns the file */

/* Opens path. Errors as the readers' (DT_ENOTFOUND, DT_EIO, DT_EINVAL for a
 * directory); *out stays NULL. */
int dt_reader_lines_open(const char *path, dt_reader_lines **out, dt_err *err) DT_WARN_UNUSED;
/* The next line without its newline, NUL-terminated (*line, borrowed until
 * the next call; the caller may write into it), its length and 1-based
 * number. Returns 1 for a line, 0 at the end of the file, or an error
 * (DT_EIO, DT_ECORRUPT for a damaged gzip stream, DT_EINVAL for a line
 * past 256 MiB). *bad is set, with 1 returned, for a line holding a NUL
 * byte (a binary file?), which the caller refuses or skips. */
int dt_reader_lines_next(dt_reader_lines *l, char **line, size_t *len, int64_t *line_no,
                         const char **bad, dt_err *err) DT_WARN_UNUSED;
void dt_reader_lines_close(dt_reader_lines *l); /* NULL is a no-op */
/* A whole field of decimal digits with an optional sign that fits int64,
 * as libsvm indices are read: 0, or -1 when s is anything else. */
int dt_reader_parse_int64(const char *s, int64_t *out) DT_WARN_UNUSED;

#endif
