/*
 * span: where a run of bytes lies in a message held in pieces, and reading
 * it element by element. A message received over the network may be read
 * in place, in the pieces the transport holds it in (as short as a byte, at
 * any alignment); a reader puts an element split between two pieces back
 * together. Below both the RPC layer, which makes the pieces, and the
 * tables and the ps, which read gradients from them; so the ps's
 * finiteness test of a gradient lives here too.
 */
#ifndef DT_SPAN_H
#define DT_SPAN_H

#include <stddef.h>
#include <stdint.h>

/* A run of a message's bytes. Borrowed from the message. */
typedef struct {
    const uint8_t *data;
    size_t len;
} dt_piece;

/* Where a run of bytes lies in a message in pieces: len bytes from
 * `offset` into *piece, going on into the pieces after it. Borrowed. */
typedef struct {
    const dt_piece *piece;
    size_t offset;
    size_t len;
} dt_span;

/* Reads a span in runs of whole elements of `elem` bytes (1..8): each
 * dt_span_reader_next returns where the next run's bytes are (possibly
 * unaligned: load them with memcpy) and how many elements it holds. An
 * element split between two pieces is put together in `carry` and returned
 * as a run of one. */
typedef struct {
    const dt_piece *piece; /* the piece being read */
    size_t offset;         /* into it */
    size_t left;           /* bytes of the span not yet returned */
    size_t elem;
    dt_piece one; /* the piece of a reader over one run of memory */
    uint8_t carry[8];
} dt_span_reader;

/* The first float32 of span s (its len a multiple of 4) that is a NaN or an
 * Inf, counted from the span's start, or s's count of floats when all are
 * finite: the ps's check of a push, before anything changes. */
size_t dt_span_first_nonfinite(const dt_span *s);

/* A reader of span s (its len a multiple of elem), or of len bytes at data. */
void dt_span_reader_init(dt_span_reader *r, const dt_span *s, size_t elem);
void dt_span_reader_init_flat(dt_span_reader *r, const void *data, size_t len, size_t elem);
/* The next run: *count elements at the returned address; NULL (and 0) once
 * the span is read. */
const uint8_t *dt_span_reader_next(dt_span_reader *r, size_t *count);
/* Copies span s's bytes to dst (s->len bytes). */
void dt_span_copy(const dt_span *s, void *dst);
/* The len bytes of s from byte `from` on (from + len <= s->len): a span
 * into the same pieces, for reading a range of a large tensor apart from the
 * rest (from a multiple of the element size: its reader then finds whole
 * elements, put together across pieces as in s). */
dt_span dt_span_sub(const dt_span *s, size_t from, size_t len);

#endif
