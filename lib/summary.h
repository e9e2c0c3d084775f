/*
 * summary: TensorBoard event files.
 *
 * The writer creates log_dir/events.out.tfevents.<unix secs>.<hostname>, a
 * TFRecord file: each record is uint64 length, uint32 masked CRC-32C of the
 * length, the data, uint32 masked CRC-32C of the data (all little-endian).
 * Each record's data is a serialized tensorflow.Event. The first Event holds
 * file_version "brain.Event:2"; the others hold wall_time, step and a Summary
 * of scalar (simple_value) or histogram values.
 */
#ifndef DT_SUMMARY_H
#define DT_SUMMARY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"

typedef struct dt_summary_writer dt_summary_writer; /* opaque; owns its file */

/* Creates log_dir (if missing) and a new event file in it. */
int dt_summary_open(const char *log_dir, dt_summary_writer **out, dt_err *err) DT_WARN_UNUSED;
/* Appends one Event at step holding n scalar values tag[i] = value[i]. */
int dt_summary_scalars(dt_summary_writer *w, int64_t step, const char *const *tags,
                       const double *values, int n, dt_err *err) DT_WARN_UNUSED;
/* Flushes buffered records to the file (the OS), so TensorBoard sees them. */
int dt_summary_flush(dt_summary_writer *w, dt_err *err) DT_WARN_UNUSED;
/* Path of the event file (borrowed). */
const char *dt_summary_path(const dt_summary_writer *w);
/* Flushes and closes; NULL is a no-op. */
void dt_summary_close(dt_summary_writer *w);

/*
 * Reads the next TFRecord from f into *data (grown with realloc; caller
 * frees) and its length into *len, verifying both CRCs. Returns 1 on a
 * record, 0 at a clean end of file, DT_ECORRUPT on a bad CRC or a truncated
 * record.
 */
int dt_tfrecord_read(FILE *f, uint8_t **data, size_t *len, dt_err *err) DT_WARN_UNUSED;

#endif
