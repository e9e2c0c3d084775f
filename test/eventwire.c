/*
 * eventwire: see eventwire.h. A reader is a cursor over one message's bytes;
 * a nested message gets a reader over its own bytes, so no field can run
 * past the message that holds it.
 */
#include "eventwire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { VARINT = 0, FIXED64 = 1, LEN = 2, FIXED32 = 5 };

typedef struct {
    const uint8_t *p, *end;
    const uint8_t *base; /* the record's start, for offsets in messages */
    char *why;
    size_t cap;
} reader;

static int fail(reader *r, const char *what) {
    snprintf(r->why, r->cap, "byte %td: %s", r->p - r->base, what);
    return -1;
}

static int varint(reader *r, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return fail(r, "truncated varint");
        uint8_t b = *r->p++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return 0;
    }
    return fail(r, "varint longer than 10 bytes");
}

static int fixed(reader *r, int bytes, uint64_t *v) {
    if (r->end - r->p < bytes) return fail(r, "truncated fixed field");
    *v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        *v = *v << 8 | r->p[i];
    r->p += bytes;
    return 0;
}

static int fixed_double(reader *r, double *d) {
    uint64_t bits;
    if (fixed(r, 8, &bits) < 0) return -1;
    memcpy(d, &bits, sizeof *d);
    return 0;
}

/* The payload of a length-delimited field as a reader of its own. */
static int sub(reader *r, reader *out) {
    uint64_t n;
    if (varint(r, &n) < 0) return -1;
    if (n > (uint64_t)(r->end - r->p)) return fail(r, "length past the end of its message");
    *out = *r;
    out->end = r->p + n;
    r->p += n;
    return 0;
}

static int skip(reader *r, int wire) {
    uint64_t v;
    reader s;
    switch (wire) {
    case VARINT: return varint(r, &v);
    case FIXED64: return fixed(r, 8, &v);
    case FIXED32: return fixed(r, 4, &v);
    case LEN: return sub(r, &s);
    default: return fail(r, "unknown wire type");
    }
}

static int key(reader *r, int *field, int *wire) {
    uint64_t k;
    if (varint(r, &k) < 0) return -1;
    *field = (int)(k >> 3);
    *wire = (int)(k & 7);
    if (*field == 0) return fail(r, "field number 0");
    return 0;
}

static int want(reader *r, int wire, int expected) {
    return wire == expected ? 0 : fail(r, "field has the wrong wire type");
}

/* Appends to a repeated double: packed (LEN) or one element (FIXED64). */
static int repeated_double(reader *r, int wire, double **arr, size_t *n) {
    reader s = *r;
    size_t more = 1;
    if (wire == LEN) {
        if (sub(r, &s) < 0) return -1;
        if ((s.end - s.p) % 8) return fail(r, "packed doubles not a multiple of 8 bytes");
        more = (size_t)(s.end - s.p) / 8;
    } else if (wire != FIXED64) {
        return fail(r, "repeated double has the wrong wire type");
    }
    double *grown = realloc(*arr, (*n + more + 1) * sizeof **arr);
    if (!grown) return fail(r, "out of memory");
    *arr = grown;
    for (size_t i = 0; i < more; i++)
        if (fixed_double(&s, &(*arr)[(*n)++]) < 0) return -1;
    if (wire == FIXED64) r->p = s.p;
    return 0;
}

static int histo(reader r, dt_wire_histo *h) {
    while (r.p < r.end) {
        int field, wire;
        if (key(&r, &field, &wire) < 0) return -1;
        double *scalar = field == 1   ? &h->min
                         : field == 2 ? &h->max
                         : field == 3 ? &h->num
                         : field == 4 ? &h->sum
                         : field == 5 ? &h->sum_squares
                                      : NULL;
        int rc;
        if (scalar)
            rc = want(&r, wire, FIXED64) < 0 ? -1 : fixed_double(&r, scalar);
        else if (field == 6)
            rc = repeated_double(&r, wire, &h->bucket_limit, &h->num_limits);
        else if (field == 7)
            rc = repeated_double(&r, wire, &h->bucket, &h->num_buckets);
        else
            rc = skip(&r, wire);
        if (rc < 0) return -1;
    }
    return 0;
}

static int value(reader r, dt_wire_value *v) {
    while (r.p < r.end) {
        int field, wire, rc;
        if (key(&r, &field, &wire) < 0) return -1;
        reader s;
        if (field == 1) {
            if (want(&r, wire, LEN) < 0 || sub(&r, &s) < 0) return -1;
            size_t n = (size_t)(s.end - s.p);
            if (n >= sizeof v->tag) return fail(&r, "tag too long");
            memcpy(v->tag, s.p, n);
            v->tag[n] = '\0';
            rc = 0;
        } else if (field == 2) {
            uint64_t bits;
            if (want(&r, wire, FIXED32) < 0 || fixed(&r, 4, &bits) < 0) return -1;
            uint32_t b32 = (uint32_t)bits;
            memcpy(&v->simple_value, &b32, sizeof b32);
            v->kind = DT_WIRE_SIMPLE;
            rc = 0;
        } else if (field == 5) {
            if (want(&r, wire, LEN) < 0 || sub(&r, &s) < 0) return -1;
            v->kind = DT_WIRE_HISTO;
            rc = histo(s, &v->histo);
        } else {
            rc = skip(&r, wire);
        }
        if (rc < 0) return -1;
    }
    return 0;
}

static int summary(reader r, dt_wire_event *ev) {
    ev->has_summary = 1;
    while (r.p < r.end) {
        int field, wire;
        if (key(&r, &field, &wire) < 0) return -1;
        if (field != 1) {
            if (skip(&r, wire) < 0) return -1;
            continue;
        }
        reader s;
        if (want(&r, wire, LEN) < 0 || sub(&r, &s) < 0) return -1;
        dt_wire_value *grown = realloc(ev->values, (ev->num_values + 1) * sizeof *grown);
        if (!grown) return fail(&r, "out of memory");
        ev->values = grown;
        dt_wire_value *v = &ev->values[ev->num_values++];
        memset(v, 0, sizeof *v);
        if (value(s, v) < 0) return -1;
    }
    return 0;
}

int dt_wire_decode_event(const uint8_t *data, size_t len, dt_wire_event *ev, char *why,
                         size_t cap) {
    memset(ev, 0, sizeof *ev);
    reader r = {data, data + len, data, why, cap};
    while (r.p < r.end) {
        int field, wire, rc;
        if (key(&r, &field, &wire) < 0) goto fail;
        reader s;
        uint64_t v = 0;
        if (field == 1) {
            rc = want(&r, wire, FIXED64) < 0 ? -1 : fixed_double(&r, &ev->wall_time);
        } else if (field == 2) {
            rc = want(&r, wire, VARINT) < 0 ? -1 : varint(&r, &v);
            ev->step = (int64_t)v;
        } else if (field == 3) {
            rc = want(&r, wire, LEN) < 0 ? -1 : sub(&r, &s);
            if (rc == 0 && (size_t)(s.end - s.p) >= sizeof ev->file_version)
                rc = fail(&r, "file_version too long");
            if (rc == 0) memcpy(ev->file_version, s.p, (size_t)(s.end - s.p));
        } else if (field == 5) {
            rc = want(&r, wire, LEN) < 0 || sub(&r, &s) < 0 ? -1 : summary(s, ev);
        } else {
            rc = skip(&r, wire);
        }
        if (rc < 0) goto fail;
    }
    return 0;
fail:
    dt_wire_event_free(ev);
    return -1;
}

void dt_wire_event_free(dt_wire_event *ev) {
    for (size_t i = 0; i < ev->num_values; i++) {
        free(ev->values[i].histo.bucket_limit);
        free(ev->values[i].histo.bucket);
    }
    free(ev->values);
    memset(ev, 0, sizeof *ev);
}

const dt_wire_value *dt_wire_find(const dt_wire_event *ev, const char *tag) {
    for (size_t i = 0; i < ev->num_values; i++)
        if (strcmp(ev->values[i].tag, tag) == 0) return &ev->values[i];
    return NULL;
}

int dt_wire_load_file(const char *path, dt_wire_event **events, size_t *count, char *why,
                      size_t cap) {
    *events = NULL;
    *count = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, cap, "%s: %s", path, strerror(errno));
        return -1;
    }
    uint8_t *data = NULL;
    int rc = 0;
    for (;;) {
        uint8_t head[12], crc[4];
        size_t got = fread(head, 1, sizeof head, f);
        if (got == 0) break;
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--)
            len = len << 8 | head[i];
        uint8_t *grown = got == sizeof head && len < (1u << 30) ? realloc(data, len + 1) : NULL;
        if (!grown || fread(grown, 1, len, f) != len ||
            fread(crc, 1, sizeof crc, f) != sizeof crc) {
            if (grown) data = grown;
            snprintf(why, cap, "%s: record %zu: truncated", path, *count);
            rc = -1;
            break;
        }
        data = grown;
        dt_wire_event *more = realloc(*events, (*count + 1) * sizeof *more);
        if (!more) {
            snprintf(why, cap, "%s: out of memory", path);
            rc = -1;
            break;
        }
        *events = more;
        char inner[256];
        if (dt_wire_decode_event(data, len, &more[*count], inner, sizeof inner) < 0) {
            snprintf(why, cap, "%s: record %zu: %s", path, *count, inner);
            rc = -1;
            break;
        }
        (*count)++;
    }
    free(data);
    fclose(f);
    if (rc < 0) {
        dt_wire_events_free(*events, *count);
        *events = NULL;
        *count = 0;
    }
    return rc;
}

void dt_wire_events_free(dt_wire_event *events, size_t count) {
    for (size_t i = 0; i < count; i++)
        dt_wire_event_free(&events[i]);
    free(events);
}
