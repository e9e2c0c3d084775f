/*
 * libsvm: the one tokenizer of libsvm (svmlight) rows, for the dense
 * reader (reader.c) and the sparse one (sparse_reader.c):
 *   [label] [qid:N] index:value index:value ...   # comment
 * with indices 1-based and strictly increasing. It splits a row in place
 * (strtok_r over the caller's line), checks the label, the query id and the
 * indices, and hands each value's text to the caller, which stores it its
 * own way. Every message (the `why` buffers) is worded here, so both
 * readers refuse the same bad label, index or query id with the same text.
 *
 * Also the number rule of the readers' text formats: a whole token that
 * strtod reads, finite, within float range.
 *
 * No state beyond a row's cursor; thread-safe for distinct rows.
 */
#ifndef DT_LIBSVM_H
#define DT_LIBSVM_H

#include <stddef.h>
#include <stdint.h>

/* What dt_libsvm_number says of a token. */
enum { DT_NUM_OK = 0, DT_NUM_EMPTY, DT_NUM_BAD, DT_NUM_NONFINITE, DT_NUM_RANGE };

/* s, a whole trimmed NUL-terminated token, as a number: DT_NUM_OK and
 * *out, or what is wrong with it ("nan", "inf" and 1e999 are
 * DT_NUM_NONFINITE; 1e39 DT_NUM_RANGE). */
int dt_libsvm_number(const char *s, double *out);
/* "empty field", "not a number", "not a finite number", "out of float
 * range" ("ok" for DT_NUM_OK). */
const char *dt_libsvm_number_problem(int status);

/* A row refused because it does not fit the job's config (a class past
 * "classes", an index past "features"), not because it is malformed. */
#define DT_LIBSVM_MISFIT (-2)

/* What a row may hold. */
typedef struct {
    int labeled;       /* the first token is the label */
    int classes;       /* > 0: labels are class indices 0..classes-1; 0: any finite number */
    int signed_labels; /* classes: -1 reads as class 0 (svmlight's negative class) */
    int64_t max_index; /* indices 1..max_index */
    /* > 0: an index past max_index is DT_LIBSVM_MISFIT and its message
     * names "features" (= this); 0: it is malformed like an index < 1. */
    int64_t features;
} dt_libsvm_rules;

/*
 * A class label's stored value: v (a finite number) checked against
 * classes (0: kept as it is) and signed (-1 as 0). 0 and *out; or
 * DT_LIBSVM_MISFIT, with the reason in why (cap bytes), for a label that is
 * no class index (a fraction, a negative: another task's label) or one past
 * classes: either way the config does not fit the data. The one label rule of every reader (csv
 * and idx call it too, with signed 0).
 */
int dt_libsvm_check_label(int classes, int signed_labels, double v, float *out, char *why,
                          size_t cap);

/* A row being tokenized; the caller's storage. */
typedef struct {
    const dt_libsvm_rules *rules;
    char *save;     /* strtok_r's */
    char *first;    /* the line, until the first token is taken */
    int ntok;       /* tokens taken */
    int64_t prev;   /* the last index */
    int label_done; /* the label (when labeled) was taken */
} dt_libsvm_row;

/* Starts on line (written into: the comment cut off, tokens split). */
void dt_libsvm_row_begin(dt_libsvm_row *r, char *line, const dt_libsvm_rules *rules);

/*
 * The next item of the row. Returns 1 for a feature (*index, 1-based, and
 * *value, the value's text, borrowed from the line), 2 for the label when
 * rules->labeled (*label; only ever the first item), 0 at the end of the
 * row, or -1 (malformed) or DT_LIBSVM_MISFIT with the reason in why (cap
 * bytes). A query id ("qid:N" right after the label) is checked and
 * skipped.
 */
int dt_libsvm_row_next(dt_libsvm_row *r, int64_t *index, const char **value, float *label,
                       char *why, size_t cap);

#endif
