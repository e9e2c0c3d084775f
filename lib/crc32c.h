/*
 * crc32c: CRC-32C (Castagnoli), the checksum of TFRecord framing and of
 * dtrain's checkpoint payloads, plus TFRecord's "masked" form.
 */
#ifndef DT_CRC32C_H
#define DT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc (0 to start) over len bytes of data. */
uint32_t dt_crc32c_extend(uint32_t crc, const void *data, size_t len);
static inline uint32_t dt_crc32c(const void *data, size_t len) {
    return dt_crc32c_extend(0, data, len);
}
/* The CRC of A then B from crc_a = CRC(A), crc_b = CRC(B) and B's length,
 * without B's bytes: what a writer that fills a file's parts apart (a
 * checkpoint's tensors streamed to disk) needs for the whole. */
uint32_t dt_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/* TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
static inline uint32_t dt_crc32c_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
