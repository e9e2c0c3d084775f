/*
 * span: see span.h.
 */
#include "span.h"

#include <string.h>

#include "err.h"

void dt_span_reader_init(dt_span_reader *r, const dt_span *s, size_t elem) {
    DT_ASSERT(elem >= 1 && elem <= sizeof r->carry && s->len % elem == 0);
    r->piece = s->piece;
    r->offset = s->offset;
    r->left = s->len;
    r->elem = elem;
}

void dt_span_reader_init_flat(dt_span_reader *r, const void *data, size_t len, size_t elem) {
    r->one.data = data;
    r->one.len = len;
    dt_span s = {&r->one, 0, len};
    dt_span_reader_init(r, &s, elem);
}

/* Moves past used-up (or empty) pieces; the span goes on, so one follows. */
static void reader_settle(dt_span_reader *r) {
    while (r->offset >= r->piece->len) {
        r->piece++;
        r->offset = 0;
    }
}

const uint8_t *dt_span_reader_next(dt_span_reader *r, size_t *count) {
    *count = 0;
    if (r->left == 0) return NULL;
    reader_settle(r);
    size_t avail = r->piece->len - r->offset;
    if (avail > r->left) avail = r->left;
    if (avail >= r->elem) {
        size_t n = avail / r->elem;
        const uint8_t *run = r->piece->data + r->offset;
        r->offset += n * r->elem;
        r->left -= n * r->elem;
        *count = n;
        return run;
    }
    /* An element split between pieces: put it together. */
    for (size_t got = 0; got < r->elem;) {
        reader_settle(r);
        size_t take = r->piece->len - r->offset;
        if (take > r->elem - got) take = r->elem - got;
        memcpy(r->carry + got, r->piece->data + r->offset, take);
        got += take;
        r->offset += take;
    }
    r->left -= r->elem;
    *count = 1;
    return r->carry;
}

dt_span dt_span_sub(const dt_span *s, size_t from, size_t len) {
    DT_ASSERT(from <= s->len && len <= s->len - from);
    const dt_piece *piece = s->piece;
    size_t offset = s->offset + from;
    /* Past the pieces the range starts after; an empty range stays put (the
     * pieces after the span's end need not exist). */
    while (len > 0 && offset >= piece->len) {
        offset -= piece->len;
        piece++;
    }
    return (dt_span){piece, offset, len};
}

/* The first element of n float32 values at any alignment that is a NaN or
 * an Inf (exponent all ones), or n. A block is tested as a whole first:
 * masking the exponent and adding one to it carries into bit 31 only for
 * an exponent of all ones, so the OR of those sums over the block has bit
 * 31 set exactly when the block holds a NaN or an Inf. That is an and, an
 * add and an or per element, which GCC at -O2 turns into SIMD (a block of
 * fixed length; the test leaves the loop once per block), a third of the
 * instructions of a compare per element; the block that trips it is then
 * walked one by one for the index. Every finite push is read to the end. */
static size_t first_nonfinite(const uint8_t *g, size_t n) {
    enum { BLOCK = 64 };
    const uint32_t exp_mask = 0x7f800000u, exp_one = 0x00800000u;
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK) {
        uint32_t carry = 0;
#pragma GCC unroll 16
        for (int k = 0; k < BLOCK; k++) {
            uint32_t bits;
            memcpy(&bits, g + 4 * (i + k), sizeof bits);
            carry |= (bits & exp_mask) + exp_one;
        }
        if (carry & 0x80000000u) break;
    }
    for (; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, g + 4 * i, sizeof bits);
        if ((bits & exp_mask) == exp_mask) return i;
    }
    return n;
}

size_t dt_span_first_nonfinite(const dt_span *s) {
    dt_span_reader r;
    dt_span_reader_init(&r, s, sizeof(float));
    size_t at = 0, n;
    const uint8_t *run;
    while ((run = dt_span_reader_next(&r, &n)) != NULL) {
        size_t bad = first_nonfinite(run, n);
        if (bad < n) return at + bad;
        at += n;
    }
    return at;
}

void dt_span_copy(const dt_span *s, void *dst) {
    dt_span_reader r;
    dt_span_reader_init(&r, s, 1);
    uint8_t *out = dst;
    size_t n;
    const uint8_t *run;
    while ((run = dt_span_reader_next(&r, &n)) != NULL) {
        memcpy(out, run, n);
        out += n;
    }
}
