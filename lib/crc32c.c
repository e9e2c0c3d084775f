/*
 * crc32c: slicing-by-8 software CRC-32C (reflected polynomial 0x82F63B78).
 * The tables are built once, thread-safely, on first use.
 *
 * Combining. The register is linear over GF(2): extending a CRC by n bytes
 * multiplies the state by x^(8n) modulo the polynomial and adds the data's
 * own term, and the pre- and post-inversions cancel out of the sum, so
 *     CRC(A B) = CRC(A) * x^(8 |B|) mod P  xor  CRC(B).
 * Values are reflected: bit 31 is the coefficient of x^0, bit 0 of x^31.
 */
#include "crc32c.h"

#include <pthread.h>

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void build_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

uint32_t dt_crc32c_extend(uint32_t crc, const void *data, size_t len) {
    pthread_once(&table_once, build_table);
    const uint8_t *p = data;
    uint32_t c = ~crc;
    while (len >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
            table[4][lo >> 24] ^ table[3][p[4]] ^ table[2][p[5]] ^ table[1][p[6]] ^ table[0][p[7]];
        p += 8;
        len -= 8;
    }
    while (len--)
        c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

#define POLY 0x82F63B78u
#define X0 0x80000000u /* the polynomial 1 */

/* a * b mod P, both reflected. */
static uint32_t mul_mod(uint32_t a, uint32_t b) {
    uint32_t product = 0;
    for (uint32_t bit = X0; bit; bit >>= 1) {
        if (a & bit) product ^= b;
        b = (b & 1) ? (b >> 1) ^ POLY : b >> 1; /* b *= x */
    }
    return product;
}

uint32_t dt_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
    /* x^(8 len_b) by squaring: power runs through x^8, x^16, x^32, ... */
    uint32_t shift = X0, power = X0 >> 8;
    for (; len_b; len_b >>= 1) {
        if (len_b & 1) shift = mul_mod(shift, power);
        power = mul_mod(power, power);
    }
    return mul_mod(shift, crc_a) ^ crc_b;
}
