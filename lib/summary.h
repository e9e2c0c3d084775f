/*
 * summary: TensorBoard event files.
 *
 * The writer creates log_dir/events.out.tfevents.<unix secs>.<hostname>, a
 * TFRecord file: each record is uint64 length, uint32 masked CRC-32C of the
 * length, the data, uint32 masked CRC-32C of the data (all little-endian).
 * Each record's data is a serialized tensorflow.Event. The first Event holds
 * file_version "brain.Event:2"; the others hold wall_time, step and a Summary
 * of scalar (simple_value) or histogram values.
 *
 * A writer is used by one thread at a time. The file only ever holds whole
 * records: a write that fails part way (a full disk) is cut back to the end
 * of the last whole record, the call returns DT_EIO, and the writer goes on
 * working once space returns. Only if that cut itself fails does every later
 * call on the writer fail.
 */
#ifndef DT_SUMMARY_H
#define DT_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct dt_summary_writer dt_summary_writer; /* opaque; owns its file */

/* Longest tag accepted, in bytes; tags must also be valid UTF-8 (proto3
 * strings), or TensorBoard would reject the whole record. */
#define DT_SUMMARY_TAG_MAX 1024

/* Creates log_dir (and its parents, if missing) and a new event file in it,
 * then writes the file_version record (in the file when this returns, so a
 * process killed right after leaves a valid event file). Never overwrites: if the name is taken
 * (two writers in the same second), ".1", ".2", ... is appended. On failure
 * *out is NULL and nothing is left open. */
int dt_summary_open(const char *log_dir, dt_summary_writer **out, dt_err *err) DT_WARN_UNUSED;
/* Appends one Event at step holding n >= 0 scalar values tag[i] = value[i]
 * (stored as float, as TensorBoard does; NaN and inf are kept). DT_EINVAL for
 * a NULL, empty, too long or non-UTF-8 tag, with nothing written. */
int dt_summary_scalars(dt_summary_writer *w, int64_t step, const char *const *tags,
                       const double *values, int n, dt_err *err) DT_WARN_UNUSED;
/* Appends one Event at step holding a histogram under tag of a sample given
 * as counts: values[i] occurs counts[i] times (i < n), without the caller
 * expanding it (a staleness histogram, say, is a few buckets holding
 * millions). Bucketed as TensorFlow does (limits growing 10% per bucket
 * from 1e-12 to 1e20, mirrored for negatives, plus 0 and +-DBL_MAX; runs of
 * empty buckets merged); statistics and buckets are those of the expanded
 * sample, and values with count 0 affect nothing. No occurrences at all (n == 0, or every count 0)
 * write TensorFlow's empty histogram: num 0, sum and sum_squares 0, min DBL_MAX, max -DBL_MAX, and
 * the single bucket (limit DBL_MAX, count 0). DT_EINVAL, with nothing written, for a bad tag, n <
 * 0, a negative count or a value that is not finite. values and counts are borrowed. */
int dt_summary_histogram_counts(dt_summary_writer *w, int64_t step, const char *tag,
                                const double *values, const int64_t *counts, int64_t n,
                                dt_err *err) DT_WARN_UNUSED;
/* The same Event for n >= 0 float32 values (a variable, a model's output),
 * in one pass and without a copy: a 10M-float variable takes tens of
 * milliseconds (make bench). Values that are not finite (a model that
 * diverged) are left out, since HistogramProto has nowhere to put them;
 * *nonfinite (may be NULL) gets their number once the Event is written, 0
 * on failure. No finite value at all writes TF's empty histogram (see
 * dt_summary_histogram_counts). DT_EINVAL, with nothing written, for a bad
 * tag or n < 0. values are borrowed. */
int dt_summary_histogram_floats(dt_summary_writer *w, int64_t step, const char *tag,
                                const float *values, int64_t n, int64_t *nonfinite,
                                dt_err *err) DT_WARN_UNUSED;
/* Records reach the OS as they are written; this only reports a writer that
 * can no longer write (DT_EIO). Kept so callers mark where a batch ends. */
int dt_summary_flush(dt_summary_writer *w, dt_err *err) DT_WARN_UNUSED;
/* Path of the event file (borrowed). */
const char *dt_summary_path(const dt_summary_writer *w);
/* Flushes and closes; NULL is a no-op. */
void dt_summary_close(dt_summary_writer *w);

#endif
