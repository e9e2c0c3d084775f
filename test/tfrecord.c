/*
 * tfrecord: reads the TFRecord framing the summary writer produces (see
 * tfrecord.h). Every length and CRC is checked before the data is trusted:
 * a length is vouched for by its CRC, and still refused when the file
 * cannot hold it, so a damaged file never makes the reader allocate more
 * than the file's size.
 */
#include "tfrecord.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "crc32c.h"

#define FRAME_HEADER 12 /* uint64 length, uint32 masked crc of those 8 bytes */
#define FRAME_FOOTER 4  /* uint32 masked crc of the data */
/* The writer's own bound on an Event; past it the length is called corrupt
 * rather than allocated. */
#define EVENT_MAX ((size_t)1 << 30)

static uint32_t load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t load_le64(const uint8_t *p) {
    return (uint64_t)load_le32(p) | (uint64_t)load_le32(p + 4) << 32;
}

/* "record at byte N", or without N when f cannot tell its position. */
static void record_where(char *buf, size_t cap, off_t at) {
    if (at < 0)
        snprintf(buf, cap, "record at unknown offset");
    else
        snprintf(buf, cap, "record at byte %lld", (long long)at);
}

/* A short fread: an I/O error, or a file that ends inside the record. */
static int short_read(FILE *f, const char *where, const char *part, size_t got, uint64_t want,
                      dt_err *err) {
    if (ferror(f))
        return dt_err_set(err, DT_EIO, "tfrecord: %s: read %s: %s", where, part, strerror(errno));
    return dt_err_set(err, DT_ECORRUPT, "tfrecord: %s: truncated %s: %zu of %llu bytes", where,
                      part, got, (unsigned long long)want);
}

int dt_test_tfrecord_read(FILE *f, uint8_t **data, size_t *len, dt_err *err) {
    DT_ASSERT(f && data && len);
    *len = 0;
    off_t at = ftello(f);
    char where[64];
    record_where(where, sizeof where, at);

    uint8_t header[FRAME_HEADER];
    size_t got = fread(header, 1, sizeof header, f);
    if (got == 0 && !ferror(f)) return 0; /* clean end between records */
    if (got < sizeof header) return short_read(f, where, "header", got, sizeof header, err);
    uint32_t stored = load_le32(header + 8), computed = dt_crc32c_mask(dt_crc32c(header, 8));
    if (stored != computed)
        return dt_err_set(err, DT_ECORRUPT,
                          "tfrecord: %s: length crc mismatch (stored 0x%08x, computed 0x%08x)",
                          where, stored, computed);
    uint64_t length = load_le64(header);
    /* The crc vouches for the length; still refuse to allocate more than the
     * file could hold. */
    struct stat st;
    if (at >= 0 && fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)) {
        off_t data_at = at + FRAME_HEADER;
        uint64_t left = st.st_size > data_at ? (uint64_t)(st.st_size - data_at) : 0;
        if (length > left || left - length < FRAME_FOOTER)
            return dt_err_set(err, DT_ECORRUPT,
                              "tfrecord: %s: truncated: length %llu plus %d-byte crc, but %llu "
                              "bytes are left",
                              where, (unsigned long long)length, FRAME_FOOTER,
                              (unsigned long long)left);
    }
    if (length > EVENT_MAX)
        return dt_err_set(err, DT_ECORRUPT, "tfrecord: %s: length %llu exceeds %zu", where,
                          (unsigned long long)length, EVENT_MAX);

    uint8_t *grown = realloc(*data, length ? (size_t)length : 1);
    if (!grown)
        return dt_err_set(err, DT_ENOMEM, "tfrecord: %s: %llu bytes", where,
                          (unsigned long long)length);
    *data = grown;
    got = fread(*data, 1, (size_t)length, f);
    if (got < length) return short_read(f, where, "data", got, length, err);
    uint8_t footer[FRAME_FOOTER];
    got = fread(footer, 1, sizeof footer, f);
    if (got < sizeof footer) return short_read(f, where, "data crc", got, sizeof footer, err);
    stored = load_le32(footer);
    computed = dt_crc32c_mask(dt_crc32c(*data, (size_t)length));
    if (stored != computed)
        return dt_err_set(err, DT_ECORRUPT,
                          "tfrecord: %s: data crc mismatch (stored 0x%08x, computed 0x%08x)", where,
                          stored, computed);
    *len = (size_t)length;
    return 1;
}
