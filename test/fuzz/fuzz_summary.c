/*
 * Fuzz target: dt_test_tfrecord_read (test/tfrecord.c, the TFRecord reader
 * the tests check dtrain's event files with) over the input as an event
 * file (read through fmemopen), record after record until the end or an
 * error.
 *
 * Beyond "no crash, no sanitizer report": every call returns 1 (a record),
 * 0 (clean end) or a negative code with a message; a record's length fits
 * in what was left of the input; the records and their 16 bytes of framing
 * each never add up to more than the input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tfrecord.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_summary: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0; /* fmemopen refuses an empty buffer */
    /* fmemopen takes a non-const buffer; "rb" never writes to it. */
    uint8_t *copy = malloc(size);
    if (!copy) return 0;
    memcpy(copy, data, size);
    FILE *f = fmemopen(copy, size, "rb");
    if (!f) {
        free(copy);
        return 0;
    }
    uint8_t *record = NULL;
    size_t len = 0, consumed = 0;
    int rc;
    dt_err err;
    for (;;) {
        dt_err_clear(&err);
        rc = dt_test_tfrecord_read(f, &record, &len, &err);
        if (rc != 1) break;
        consumed += len + 16; /* length, its CRC, the data, its CRC */
        CHECK(consumed <= size);
        if (len > 0) CHECK(memcmp(record, copy + consumed - 4 - len, len) == 0);
    }
    CHECK(rc == 0 || (rc < 0 && err.code == rc && err.msg[0] != '\0'));
    if (rc == 0) CHECK(consumed == size);
    free(record);
    fclose(f);
    free(copy);
    return 0;
}
