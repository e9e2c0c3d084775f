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
/* TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
static inline uint32_t dt_crc32c_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
