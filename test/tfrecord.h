/*
 * tfrecord: the reading side of the TFRecord framing of event files, for the
 * tests and the summary fuzz target (dtrain itself only writes event
 * files; lib/summary.c). A record is a little-endian uint64 length, the
 * masked CRC-32C of those 8 bytes, the data, and the masked CRC-32C of the
 * data. Test code only.
 *
 * No state of its own: calls on different files may run concurrently.
 */
#ifndef DT_TEST_TFRECORD_H
#define DT_TEST_TFRECORD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"

/*
 * Reads the next TFRecord from f into *data (grown with realloc; caller
 * frees) and its length into *len, verifying both CRCs. Returns 1 on a
 * record, 0 at a clean end of file, DT_ECORRUPT on a bad CRC or a truncated
 * record, DT_EIO when reading fails, DT_ENOMEM when *data cannot grow.
 */
int dt_test_tfrecord_read(FILE *f, uint8_t **data, size_t *len, dt_err *err) DT_WARN_UNUSED;

#endif
