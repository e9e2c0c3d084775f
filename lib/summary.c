/*
 * summary: TensorBoard event files (TFRecord framing around tensorflow.Event).
 *
 * The Event, Summary, Summary.Value and HistogramProto messages are encoded
 * by hand with a tiny protobuf writer (varint, fixed64, fixed32,
 * length-delimited). TensorBoard's schema is a handful of fields, and the
 * house rule keeps nanopb inside the codec module, which speaks dtrain's own
 * RPC messages; a second generated schema in lib/ would buy nothing. Field
 * numbers follow tensorflow/core/util/event.proto and
 * tensorflow/core/framework/summary.proto; the tests decode our output with
 * an independently generated decoder (proto/tensorboard.proto) and a
 * hand-written wire decoder (test/eventwire.c).
 *
 * Invariants: each message is sized exactly before it is written (nested
 * messages carry their length up front), so a record is built in one pass
 * into w->record, which holds the 12-byte frame header, the Event and the
 * 4-byte footer and only grows; after the first records no call allocates.
 * A record reaches the OS in one pwrite at w->offset, the end of the last
 * whole record, so the file holds whole records only: a write that fails
 * part way (a full disk) is cut off again with ftruncate to w->offset, and
 * the writer stays usable for when space returns. Only when that cut fails
 * does the writer fail every later call. There is no user-space buffer, so
 * the file_version record is on disk (in the page cache) when open returns
 * and a chief killed at any moment leaves a valid file.
 *
 * Threading: a writer is used by one thread at a time.
 */
#include "summary.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "crc32c.h"
#include "log.h"
#include "text.h"

#define FILE_VERSION "brain.Event:2"
#define FRAME_HEADER 12 /* uint64 length, uint32 masked crc of those 8 bytes */
#define FRAME_FOOTER 4  /* uint32 masked crc of the data */
/* An Event we write stays far below this; past it, a reader would rather
 * call the length corrupt than allocate it. */
#define EVENT_MAX ((size_t)1 << 30)
#define NAME_SUFFIX_MAX 99 /* ".1" .. ".99" when the plain name is taken */

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

/* Field numbers: event.proto, summary.proto, histogram.proto. */
enum { EVENT_WALL_TIME = 1, EVENT_STEP = 2, EVENT_FILE_VERSION = 3, EVENT_SUMMARY = 5 };
enum { SUMMARY_VALUE = 1 };
enum { VALUE_TAG = 1, VALUE_SIMPLE_VALUE = 2, VALUE_HISTO = 5 };
enum {
    HISTO_MIN = 1,
    HISTO_MAX = 2,
    HISTO_NUM = 3,
    HISTO_SUM = 4,
    HISTO_SUM_SQUARES = 5,
    HISTO_BUCKET_LIMIT = 6,
    HISTO_BUCKET = 7,
};

struct dt_summary_writer {
    int fd;
    char *path;      /* owned */
    uint64_t offset; /* end of the last whole record = next record's offset */
    int failed;      /* 0, or DT_EIO once a torn record could not be cut off */
    uint8_t *record; /* (record_cap) frame header + Event + footer, reused */
    size_t record_len;
    size_t record_cap;
    double *hist_limits;  /* (hist_buckets) TF's default bucket limits, ascending */
    double *hist_counts;  /* (hist_buckets) scratch counts for one histogram */
    uint16_t *hist_guess; /* (HIST_KEYS) a bucket near each range of magnitudes */
    uint16_t *hist_entry; /* (hist_buckets) the entries of the one being written */
    size_t hist_buckets;  /* 0 until the first histogram */
    /* The buckets the histogram being written touched: [hist_lo, hist_hi]
     * (none: hist_lo > hist_hi), the buckets of its min and max; every
     * other count is 0. A histogram of a few values is then written, and
     * cleared, without walking all 1551. hist_unknown: one was begun and
     * not written (a bad value), so which counts it left is not known. */
    size_t hist_lo, hist_hi;
    int hist_unknown;
};

/* ---- protobuf sizing: bytes each piece takes on the wire ---- */

static size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static size_t key_size(int field) {
    return varint_size((uint64_t)field << 3);
}

/* A length-delimited field whose payload is n bytes. */
static size_t len_field_size(int field, size_t n) {
    return key_size(field) + varint_size(n) + n;
}

/* ---- protobuf writing into w->record, which the caller sized exactly ---- */

static void put_raw(dt_summary_writer *w, const void *data, size_t n) {
    DT_ASSERT(w->record_len + n <= w->record_cap); /* a sizing bug, not bad input */
    if (n) memcpy(w->record + w->record_len, data, n);
    w->record_len += n;
}

/* The varint and the double are written in place, not through put_raw
 * (a histogram's buckets are most of a small model's summaries: two
 * doubles each, a call and a memcpy of a few bytes apiece). */
static void put_varint(dt_summary_writer *w, uint64_t v) {
    DT_ASSERT(w->record_len + varint_size(v) <= w->record_cap);
    uint8_t *p = w->record + w->record_len;
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    w->record_len = (size_t)(p - w->record);
}

static void put_key(dt_summary_writer *w, int field, int wire) {
    put_varint(w, (uint64_t)field << 3 | (uint64_t)wire);
}

/* Little-endian stores: one move on a little-endian host (GCC did not
 * merge the byte loop: 65 instructions a double of a histogram). */
static void store_le32(uint8_t *p, uint32_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, &v, sizeof v);
#else
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
#endif
}

static void store_le64(uint8_t *p, uint64_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, &v, sizeof v);
#else
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
#endif
}

/* Bare double (no key): packed repeated elements. */
static void put_double_bits(dt_summary_writer *w, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    DT_ASSERT(w->record_len + sizeof bits <= w->record_cap);
    store_le64(w->record + w->record_len, bits);
    w->record_len += sizeof bits;
}

static void put_double(dt_summary_writer *w, int field, double v) {
    put_key(w, field, WIRE_FIXED64);
    put_double_bits(w, v);
}

static void put_float(dt_summary_writer *w, int field, float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    uint8_t b[4];
    store_le32(b, bits);
    put_key(w, field, WIRE_FIXED32);
    put_raw(w, b, sizeof b);
}

/* Key and length of a length-delimited field; its n bytes follow. */
static void put_len(dt_summary_writer *w, int field, size_t n) {
    put_key(w, field, WIRE_LEN);
    put_varint(w, n);
}

static void put_string(dt_summary_writer *w, int field, const char *s, size_t n) {
    put_len(w, field, n);
    put_raw(w, s, n);
}

/* ---- records ---- */

static int fail_sticky(dt_summary_writer *w, dt_err *err) {
    return dt_err_set(err, w->failed,
                      "summary: %s: an earlier write failed and could not be cut back to byte "
                      "%llu; the file may end in a partial record",
                      w->path, (unsigned long long)w->offset);
}

/* Makes room for an Event of event_size bytes and starts the record after
 * the frame header. Growth is the only allocation on the write path. */
static int record_begin(dt_summary_writer *w, size_t event_size, dt_err *err) {
    if (event_size > EVENT_MAX)
        return dt_err_set(err, DT_EINVAL, "summary: %s: event of %zu bytes exceeds %zu", w->path,
                          event_size, EVENT_MAX);
    size_t need = FRAME_HEADER + event_size + FRAME_FOOTER;
    if (need > w->record_cap) {
        size_t cap = w->record_cap ? w->record_cap : 256;
        while (cap < need)
            cap *= 2;
        uint8_t *grown = dt_realloc(w->record, cap);
        if (!grown)
            return dt_err_set(err, DT_ENOMEM, "summary: %s: record buffer of %zu bytes", w->path,
                              cap);
        w->record = grown;
        w->record_cap = cap;
    }
    w->record_len = FRAME_HEADER;
    return 0;
}

/* Writes all of buf at offset; -1 with errno set on failure. */
static int pwrite_all(int fd, const uint8_t *buf, size_t len, uint64_t offset) {
    while (len > 0) {
        ssize_t n = pwrite(fd, buf, len, (off_t)offset);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n == 0) errno = EIO; /* a regular file never writes 0; don't spin */
            return -1;
        }
        buf += n;
        len -= (size_t)n;
        offset += (uint64_t)n;
    }
    return 0;
}

/* Frames the Event just encoded (its size was promised to record_begin) and
 * writes the record after the last whole one. */
static int record_end(dt_summary_writer *w, size_t event_size, dt_err *err) {
    DT_ASSERT(w->record_len == FRAME_HEADER + event_size);
    store_le64(w->record, event_size);
    store_le32(w->record + 8, dt_crc32c_mask(dt_crc32c(w->record, 8)));
    uint8_t footer[FRAME_FOOTER];
    store_le32(footer, dt_crc32c_mask(dt_crc32c(w->record + FRAME_HEADER, event_size)));
    put_raw(w, footer, sizeof footer);
    if (pwrite_all(w->fd, w->record, w->record_len, w->offset) < 0) {
        int write_errno = errno;
        /* Part of the record may be in the file: cut it off, so a reader
         * (and the next record) finds whole records only. */
        if (ftruncate(w->fd, (off_t)w->offset) != 0) {
            w->failed = DT_EIO;
            return dt_err_set(
                err, DT_EIO, "summary: %s: write record at byte %llu: %s; cut back: %s", w->path,
                (unsigned long long)w->offset, strerror(write_errno), strerror(errno));
        }
        errno = write_errno;
        return dt_err_set(err, DT_EIO, "summary: %s: write record at byte %llu: %s", w->path,
                          (unsigned long long)w->offset, strerror(write_errno));
    }
    w->offset += w->record_len;
    return 0;
}

static double wall_time_now(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

/* Every Event starts with wall_time and step; step 0 is left out, as proto3
 * leaves out defaults. */
static size_t event_head_size(int64_t step) {
    size_t step_size = step ? key_size(EVENT_STEP) + varint_size((uint64_t)step) : 0;
    return key_size(EVENT_WALL_TIME) + 8 + step_size;
}

static void put_event_head(dt_summary_writer *w, double wall_time, int64_t step) {
    put_double(w, EVENT_WALL_TIME, wall_time);
    if (step) {
        put_key(w, EVENT_STEP, WIRE_VARINT);
        put_varint(w, (uint64_t)step); /* int64: negatives take 10 bytes */
    }
}

static int write_file_version(dt_summary_writer *w, dt_err *err) {
    size_t version_len = strlen(FILE_VERSION);
    size_t event_size = event_head_size(0) + len_field_size(EVENT_FILE_VERSION, version_len);
    int rc = record_begin(w, event_size, err);
    if (rc < 0) return rc;
    put_event_head(w, wall_time_now(), 0);
    put_string(w, EVENT_FILE_VERSION, FILE_VERSION, version_len);
    return record_end(w, event_size, err);
}

/* ---- tags ---- */

/* Sets *len to the tag's length after checking it. index is the tag's place
 * in a scalars call, or -1 for a histogram's tag. */
static int check_tag(const dt_summary_writer *w, const char *tag, int index, size_t *len,
                     dt_err *err) {
    char what[32];
    if (index < 0)
        snprintf(what, sizeof what, "histogram tag");
    else
        snprintf(what, sizeof what, "tags[%d]", index);
    if (!tag) return dt_err_set(err, DT_EINVAL, "summary: %s: %s is NULL", w->path, what);
    size_t n = strnlen(tag, DT_SUMMARY_TAG_MAX + 1);
    if (n == 0) return dt_err_set(err, DT_EINVAL, "summary: %s: %s is empty", w->path, what);
    if (n > DT_SUMMARY_TAG_MAX)
        return dt_err_set(err, DT_EINVAL, "summary: %s: %s \"%.32s...\" is longer than %d bytes",
                          w->path, what, tag, DT_SUMMARY_TAG_MAX);
    /* Well-formed UTF-8 (no overlongs, surrogates or code points past
     * U+10FFFF), which proto3 requires of strings. */
    if (dt_text_utf8_prefix((const unsigned char *)tag, n) < n)
        return dt_err_set(err, DT_EINVAL, "summary: %s: %s is not valid UTF-8", w->path, what);
    *len = n;
    return 0;
}

/* ---- scalars ---- */

/* double -> float with overflow to +-inf spelled out (the plain cast of an
 * out-of-range value is undefined in C). NaN passes through. */
static float to_float(double v) {
    if (v > FLT_MAX) return INFINITY;
    if (v < -FLT_MAX) return -INFINITY;
    return (float)v;
}

static size_t scalar_value_size(size_t tag_len) {
    return len_field_size(VALUE_TAG, tag_len) + key_size(VALUE_SIMPLE_VALUE) + 4;
}

int dt_summary_scalars(dt_summary_writer *w, int64_t step, const char *const *tags,
                       const double *values, int n, dt_err *err) {
    DT_ASSERT(w && (n <= 0 || (tags && values)));
    if (w->failed) return fail_sticky(w, err);
    if (n < 0) return dt_err_set(err, DT_EINVAL, "summary: %s: %d scalars", w->path, n);
    /* Validate and size everything before writing a byte. */
    size_t summary_size = 0;
    for (int i = 0; i < n; i++) {
        size_t tag_len = 0;
        int rc = check_tag(w, tags[i], i, &tag_len, err);
        if (rc < 0) return rc;
        summary_size += len_field_size(SUMMARY_VALUE, scalar_value_size(tag_len));
    }
    size_t event_size = event_head_size(step) + len_field_size(EVENT_SUMMARY, summary_size);
    int rc = record_begin(w, event_size, err);
    if (rc < 0) return rc;
    put_event_head(w, wall_time_now(), step);
    put_len(w, EVENT_SUMMARY, summary_size);
    for (int i = 0; i < n; i++) {
        size_t tag_len = strlen(tags[i]);
        put_len(w, SUMMARY_VALUE, scalar_value_size(tag_len));
        put_string(w, VALUE_TAG, tags[i], tag_len);
        put_float(w, VALUE_SIMPLE_VALUE, to_float(values[i]));
    }
    return record_end(w, event_size, err);
}

/* ---- histograms ---- */

/* TensorFlow's default histogram buckets (tsl/lib/histogram): positive
 * limits 1e-12 * 1.1^k below 1e20 (HIST_POSITIVE of them), then DBL_MAX; the
 * same negated below zero; and 0 between. Built by repeated multiplication,
 * as TF does, so the limits match TF's bit for bit. Bucket i counts
 * [limit[i-1], limit[i]). */
#define HIST_POSITIVE 774
#define HIST_BUCKETS (2 * (HIST_POSITIVE + 1) + 1)
/* The bucket of a value is found in O(1), not by a binary search over 1551
 * limits (a 10M-float variable every summary_steps): the top HIST_KEY_BITS
 * bits of |v| as a float (8 exponent bits, 4 mantissa bits) pick a range
 * of magnitudes 1/16 of an octave wide, 6.25% < the buckets' 10%, so it
 * meets at most two buckets; hist_guess[key] is the bucket of the range's
 * lower end, and a step or two against the limits finds the exact one. */
#define HIST_KEY_SHIFT 19 /* 23 mantissa bits, 4 kept */
#define HIST_KEYS (1u << (31 - HIST_KEY_SHIFT))

/* Index of the first limit greater than v (the bucket v falls in); values at
 * DBL_MAX go to the last bucket. */
static size_t hist_bucket_search(const double *limits, size_t n, double v) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (limits[mid] > v)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo < n ? lo : n - 1;
}

/* The key of |v|: its float's bits without the sign, shifted. Magnitudes
 * past FLT_MAX take the key of infinity, which hist_guess maps to the last
 * bucket. */
static uint32_t hist_key(double v) {
    float f = fabs(v) > FLT_MAX ? INFINITY : (float)fabs(v);
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (bits & 0x7fffffffu) >> HIST_KEY_SHIFT;
}

static int hist_init(dt_summary_writer *w, dt_err *err) {
    double *limits = dt_malloc(HIST_BUCKETS * sizeof *limits);
    double *counts = dt_malloc(HIST_BUCKETS * sizeof *counts);
    uint16_t *guess = dt_malloc(HIST_KEYS * sizeof *guess);
    uint16_t *entry = dt_malloc(HIST_BUCKETS * sizeof *entry);
    if (!limits || !counts || !guess || !entry) {
        free(limits);
        free(counts);
        free(guess);
        free(entry);
        return dt_err_set(err, DT_ENOMEM, "summary: %s: histogram buckets", w->path);
    }
    const size_t zero = HIST_POSITIVE + 1; /* index of the 0 limit */
    double v = 1e-12;
    for (size_t k = 0; k < HIST_POSITIVE; k++, v *= 1.1) {
        limits[zero + 1 + k] = v;
        limits[zero - 1 - k] = -v;
    }
    DT_ASSERT(v >= 1e20 && limits[zero + HIST_POSITIVE] < 1e20); /* HIST_POSITIVE is right */
    limits[zero] = 0.0;
    limits[0] = -DBL_MAX;
    limits[HIST_BUCKETS - 1] = DBL_MAX;
    for (uint32_t key = 0; key < HIST_KEYS; key++) {
        uint32_t bits = key << HIST_KEY_SHIFT; /* the smallest float of the key */
        float lowest;
        memcpy(&lowest, &bits, sizeof lowest);
        /* NaN keys (exponent 255, mantissa != 0) never occur: inf's key is
         * the first of exponent 255 and magnitudes are capped at it. */
        guess[key] = (uint16_t)(isnan(lowest) ? HIST_BUCKETS - 1
                                              : hist_bucket_search(limits, HIST_BUCKETS, lowest));
    }
    memset(counts, 0, HIST_BUCKETS * sizeof *counts);
    w->hist_limits = limits;
    w->hist_counts = counts;
    w->hist_guess = guess;
    w->hist_entry = entry;
    w->hist_buckets = HIST_BUCKETS;
    w->hist_lo = HIST_BUCKETS;
    w->hist_hi = 0;
    return 0;
}

/* hist_bucket_search's answer for the finite v, from the guess of |v|'s key:
 * a negative v mirrors it (bucket i of |v| is bucket n - i of -|v|, up to
 * the ends of ranges), and the steps fix the rest, so the result is exact
 * whatever the guess. */
static size_t hist_bucket(const dt_summary_writer *w, double v) {
    const double *limits = w->hist_limits;
    const size_t n = w->hist_buckets;
    size_t b = w->hist_guess[hist_key(v)];
    if (v < 0) b = n - b;
    while (b > 0 && limits[b - 1] > v)
        b--;
    while (b < n - 1 && limits[b] <= v)
        b++;
    return b;
}

/* One entry of TF's compact bucket list (preserve_zero_buckets = false): a
 * non-empty bucket, or a run of empty buckets merged into one that ends at
 * the run's last limit. Returns the index whose limit and count the entry
 * takes, and moves *i past it. The buckets before hist_lo and after
 * hist_hi are such runs, taken in one step. */
static size_t hist_entry(const dt_summary_writer *w, size_t *i) {
    const double *counts = w->hist_counts;
    const size_t n = w->hist_buckets;
    if (*i < w->hist_lo) {
        *i = w->hist_lo;
        return w->hist_lo - 1;
    }
    if (*i > w->hist_hi) {
        *i = n;
        return n - 1;
    }
    size_t at = (*i)++;
    if (counts[at] <= 0.0)
        while (*i < n && counts[*i] <= 0.0)
            at = (*i)++;
    return at;
}

/* A histogram's statistics, kept as TF's Histogram::Add keeps them; its
 * bucket counts live in w->hist_counts. */
typedef struct {
    double min, max, num, sum, sum_squares;
} hist_stats;

/* Starts a histogram as TF's Histogram::Clear leaves one: no counts, min
 * DBL_MAX and max -DBL_MAX, so that an empty histogram encodes as TF's. */
static int hist_begin(dt_summary_writer *w, hist_stats *s, dt_err *err) {
    int rc;
    if (!w->hist_buckets && (rc = hist_init(w, err)) < 0) return rc;
    if (w->hist_unknown)
        memset(w->hist_counts, 0, w->hist_buckets * sizeof *w->hist_counts);
    else if (w->hist_lo <= w->hist_hi)
        memset(w->hist_counts + w->hist_lo, 0,
               (w->hist_hi - w->hist_lo + 1) * sizeof *w->hist_counts);
    w->hist_unknown = 1;
    *s = (hist_stats){DBL_MAX, -DBL_MAX, 0.0, 0.0, 0.0};
    return 0;
}

/* Adds count > 0 occurrences of the finite value v. */
static void hist_add(dt_summary_writer *w, hist_stats *s, double v, double count) {
    w->hist_counts[hist_bucket(w, v)] += count;
    if (v < s->min) s->min = v;
    if (v > s->max) s->max = v;
    s->num += count;
    s->sum += v * count;
    s->sum_squares += v * v * count;
}

/* Appends the Event of one histogram under tag (checked, tag_len bytes):
 * the statistics, then TF's compact bucket list of w->hist_counts. An empty
 * histogram's counts are one run of empty buckets, so it still has the one
 * entry (DBL_MAX, 0) that TF writes. */
static int hist_write(dt_summary_writer *w, int64_t step, const char *tag, size_t tag_len,
                      const hist_stats *s, dt_err *err) {
    const double *limits = w->hist_limits, *counts = w->hist_counts;
    size_t nbuckets = w->hist_buckets;
    /* Buckets grow with the value: min's and max's bound every one used.
     * (The search, not hist_bucket: a third caller of that one kept GCC
     * from inlining it into the adding loop, 4% more instructions.) */
    w->hist_lo = s->num > 0 ? hist_bucket_search(limits, nbuckets, s->min) : nbuckets;
    w->hist_hi = s->num > 0 ? hist_bucket_search(limits, nbuckets, s->max) : 0;
    w->hist_unknown = 0;
    /* One walk; the limits and the counts are then written from its list
     * (three walks were most of a small model's summaries: the empty
     * buckets between the min and max of its outputs). */
    size_t entries = 0;
    for (size_t i = 0; i < nbuckets; entries++)
        w->hist_entry[entries] = (uint16_t)hist_entry(w, &i);

    size_t packed_size = entries * 8;
    size_t histo_size = 5 * (1 + 8) /* min, max, num, sum, sum_squares */ +
                        len_field_size(HISTO_BUCKET_LIMIT, packed_size) +
                        len_field_size(HISTO_BUCKET, packed_size);
    size_t value_size =
        len_field_size(VALUE_TAG, tag_len) + len_field_size(VALUE_HISTO, histo_size);
    size_t summary_size = len_field_size(SUMMARY_VALUE, value_size);
    size_t event_size = event_head_size(step) + len_field_size(EVENT_SUMMARY, summary_size);
    int rc = record_begin(w, event_size, err);
    if (rc < 0) return rc;
    put_event_head(w, wall_time_now(), step);
    put_len(w, EVENT_SUMMARY, summary_size);
    put_len(w, SUMMARY_VALUE, value_size);
    put_string(w, VALUE_TAG, tag, tag_len);
    put_len(w, VALUE_HISTO, histo_size);
    put_double(w, HISTO_MIN, s->min);
    put_double(w, HISTO_MAX, s->max);
    put_double(w, HISTO_NUM, s->num);
    put_double(w, HISTO_SUM, s->sum);
    put_double(w, HISTO_SUM_SQUARES, s->sum_squares);
    put_len(w, HISTO_BUCKET_LIMIT, packed_size);
    for (size_t e = 0; e < entries; e++)
        put_double_bits(w, limits[w->hist_entry[e]]);
    put_len(w, HISTO_BUCKET, packed_size);
    for (size_t e = 0; e < entries; e++)
        put_double_bits(w, counts[w->hist_entry[e]]);
    return record_end(w, event_size, err);
}

int dt_summary_histogram_counts(dt_summary_writer *w, int64_t step, const char *tag,
                                const double *values, const int64_t *counts, int64_t n,
                                dt_err *err) {
    DT_ASSERT(w && (n <= 0 || (values && counts)));
    if (w->failed) return fail_sticky(w, err);
    size_t tag_len = 0;
    int rc = check_tag(w, tag, -1, &tag_len, err);
    if (rc < 0) return rc;
    if (n < 0)
        return dt_err_set(err, DT_EINVAL, "summary: %s: histogram \"%s\": %lld values, need >= 0",
                          w->path, tag, (long long)n);
    hist_stats s;
    if ((rc = hist_begin(w, &s, err)) < 0) return rc;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(values[i]))
            return dt_err_set(err, DT_EINVAL,
                              "summary: %s: histogram \"%s\": values[%lld] is not finite", w->path,
                              tag, (long long)i);
        int64_t count = counts[i];
        if (count < 0)
            return dt_err_set(err, DT_EINVAL,
                              "summary: %s: histogram \"%s\": counts[%lld] is negative (%lld)",
                              w->path, tag, (long long)i, (long long)count);
        /* A value seen zero times must not move min or max. */
        if (count > 0) hist_add(w, &s, values[i], (double)count);
    }
    return hist_write(w, step, tag, tag_len, &s, err);
}

int dt_summary_histogram_floats(dt_summary_writer *w, int64_t step, const char *tag,
                                const float *values, int64_t n, int64_t *nonfinite, dt_err *err) {
    DT_ASSERT(w && (n <= 0 || values));
    if (nonfinite) *nonfinite = 0;
    if (w->failed) return fail_sticky(w, err);
    size_t tag_len = 0;
    int rc = check_tag(w, tag, -1, &tag_len, err);
    if (rc < 0) return rc;
    if (n < 0)
        return dt_err_set(err, DT_EINVAL, "summary: %s: histogram \"%s\": %lld values", w->path,
                          tag, (long long)n);
    hist_stats s;
    if ((rc = hist_begin(w, &s, err)) < 0) return rc;
    int64_t skipped = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = values[i];
        if (!isfinite(v)) {
            skipped++;
            continue;
        }
        hist_add(w, &s, v, 1.0);
    }
    if ((rc = hist_write(w, step, tag, tag_len, &s, err)) < 0) return rc;
    if (nonfinite) *nonfinite = skipped;
    return 0;
}

/* ---- the file ---- */

/* mkdir -p: creates each missing component, then insists on a directory. */
static int make_dirs(const char *dir, dt_err *err) {
    int rc = 0;
    size_t n = strlen(dir);
    char *path = dt_malloc(n + 1);
    if (!path) return dt_err_set(err, DT_ENOMEM, "summary: %s: path", dir);
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (i < n && path[i] != '/') continue;
        char saved = path[i];
        path[i] = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            int mkdir_errno = errno;
            struct stat st;
            /* An existing parent may refuse mkdir with EACCES or EROFS. */
            if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
                rc = dt_err_set(err, DT_EIO, "summary: mkdir %s: %s", path, strerror(mkdir_errno));
                goto fail;
            }
        }
        path[i] = saved;
    }
    struct stat st;
    if (stat(dir, &st) != 0) {
        rc = dt_err_set(err, DT_EIO, "summary: %s: %s", dir, strerror(errno));
        goto fail;
    }
    if (!S_ISDIR(st.st_mode)) {
        rc = dt_err_set(err, DT_EIO, "summary: %s: exists and is not a directory", dir);
        goto fail;
    }
fail:
    free(path);
    return rc;
}

int dt_summary_open(const char *log_dir, dt_summary_writer **out, dt_err *err) {
    DT_ASSERT(out);
    *out = NULL;
    dt_summary_writer *w = NULL;
    int rc;
    if (!log_dir || !*log_dir) return dt_err_set(err, DT_EINVAL, "summary: log dir is empty");
    if ((rc = make_dirs(log_dir, err)) < 0) return rc;

    char host[256];
    if (gethostname(host, sizeof host) != 0 || !host[0]) strcpy(host, "localhost");
    host[sizeof host - 1] = '\0'; /* gethostname may truncate without a NUL */
    long long secs = (long long)time(NULL);

    w = dt_calloc(1, sizeof *w);
    if (!w) return dt_err_set(err, DT_ENOMEM, "summary: %s: writer", log_dir);
    w->fd = -1;
    size_t cap = strlen(log_dir) + strlen(host) + 64;
    w->path = dt_malloc(cap);
    if (!w->path) {
        rc = dt_err_set(err, DT_ENOMEM, "summary: %s: path", log_dir);
        goto fail;
    }
    /* TF's name, zero-padded seconds included; "x" refuses to clobber another
     * writer's file from the same second. */
    for (int suffix = 0; suffix <= NAME_SUFFIX_MAX; suffix++) {
        int len = snprintf(w->path, cap, "%s/events.out.tfevents.%010lld.%s", log_dir, secs, host);
        if (suffix) snprintf(w->path + len, cap - (size_t)len, ".%d", suffix);
        w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (w->fd >= 0 || errno != EEXIST) break;
    }
    if (w->fd < 0) {
        rc = dt_err_set(err, DT_EIO, "summary: create %s: %s", w->path, strerror(errno));
        goto fail;
    }
    if ((rc = write_file_version(w, err)) < 0) goto fail;
    *out = w;
    return 0;
fail:
    if (w && w->fd >= 0) {
        close(w->fd);
        remove(w->path); /* a file without its file_version record helps no one */
    }
    if (w) {
        free(w->path);
        free(w->record);
        free(w);
    }
    return rc;
}

int dt_summary_flush(dt_summary_writer *w, dt_err *err) {
    DT_ASSERT(w);
    /* Each record reached the OS in its own write; nothing is buffered. */
    if (w->failed) return fail_sticky(w, err);
    return 0;
}

const char *dt_summary_path(const dt_summary_writer *w) {
    return w->path;
}

void dt_summary_close(dt_summary_writer *w) {
    if (!w) return;
    /* Its failure can only be reported, the writer is gone. */
    if (w->fd >= 0 && close(w->fd) != 0 && !w->failed)
        dt_log(DT_LOG_WARN, "summary: %s: close: %s", w->path, strerror(errno));
    free(w->path);
    free(w->record);
    free(w->hist_limits);
    free(w->hist_counts);
    free(w->hist_guess);
    free(w->hist_entry);
    free(w);
}
