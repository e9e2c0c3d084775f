/*
 * Suite "summary": TensorBoard event files.
 *
 * The writer encodes Events by hand; these tests read its files back two
 * independent ways: the TFRecord framing with a bit-at-a-time CRC-32C written
 * here (not lib/crc32c), and the Events with a nanopb decoder generated from
 * proto/tensorboard.proto (TensorFlow's field numbers). dt_test_tfrecord_read is
 * checked against every single-byte corruption and every truncation of a
 * file, and the writer against a file-size limit hit after every few bytes.
 * When the tensorboard Python package is installed, its own loader must read
 * the scalars too; otherwise that check is skipped.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <pb_decode.h>

#include "eventwire.h"
#include "proc.h"
#include "suites.h"
#include "summary.h"
#include "tensorboard.pb.h"
#include "tfrecord.h"

#define MAX_RECORDS 256
#define MAX_EVENTS 8 /* decoded Events are ~26 KB each */

static char *tmp; /* the test's temp dir */

static void suite_setup(void) {
    if (dt_test_tmp_begin() != 0) fprintf(stderr, "summary: cannot make the suite's temp dir\n");
}

static void setup(void) {
    tmp = dt_test_tempdir();
    ck_assert_msg(tmp != NULL, "cannot make a temp dir");
}

static void teardown(void) {
    dt_test_rmtree(tmp);
    free(tmp);
    tmp = NULL;
}

static double now_secs(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ---- an independent CRC-32C and TFRecord framing ---- */

static uint32_t slow_crc32c(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return ~c;
}

static uint32_t slow_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static uint64_t le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Walks a whole file's framing; fills ends[] with each record's end offset.
 * Fails the test on any bad crc or a tail that is not a whole record. */
static int check_framing(const uint8_t *file, size_t size, size_t *ends, int max) {
    size_t at = 0;
    int count = 0;
    while (at < size) {
        ck_assert_msg(size - at >= 16, "record at byte %zu: %zu bytes left", at, size - at);
        uint64_t length = le(file + at, 8);
        ck_assert_uint_eq(le(file + at + 8, 4), slow_mask(slow_crc32c(file + at, 8)));
        ck_assert_msg(length <= size - at - 16, "record at byte %zu: length %llu", at,
                      (unsigned long long)length);
        ck_assert_uint_eq(le(file + at + 12 + length, 4),
                          slow_mask(slow_crc32c(file + at + 12, (size_t)length)));
        at += 16 + (size_t)length;
        ck_assert_int_lt(count, max);
        ends[count++] = at;
    }
    return count;
}

/* ---- reading events back ---- */

/* Reads every record of path with dt_test_tfrecord_read and decodes the first
 * `max` with nanopb. Returns the record count; fails the test on any error. */
static int load_events(const char *path, tensorflow_Event *events, int max) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    uint8_t *data = NULL;
    size_t len = 0;
    dt_err err = {0};
    int count = 0, rc;
    while ((rc = dt_test_tfrecord_read(f, &data, &len, &err)) == 1) {
        if (count < max) {
            pb_istream_t in = pb_istream_from_buffer(data, len);
            ck_assert_msg(pb_decode(&in, tensorflow_Event_fields, &events[count]),
                          "record %d: decode: %s", count, PB_GET_ERROR(&in));
        }
        count++;
    }
    ck_assert_msg(rc == 0, "%s: record %d: %s", path, count, err.msg);
    free(data);
    fclose(f);
    return count;
}

/* Reads records from f until the end or an error: returns the count of good
 * records, and the final code (0 at a clean end) in *rc. */
static int read_until_error(FILE *f, int *rc, dt_err *err) {
    uint8_t *data = NULL;
    size_t len = 0;
    int count = 0;
    while ((*rc = dt_test_tfrecord_read(f, &data, &len, err)) == 1)
        count++;
    free(data);
    return count;
}

static uint8_t *slurp(const char *path, size_t *size) {
    char *text = dt_test_read_file(path, size);
    ck_assert_msg(text != NULL, "cannot read %s", path);
    return (uint8_t *)text;
}

static void spit(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    ck_assert_uint_eq(fwrite(data, 1, size, f), size);
    ck_assert_int_eq(fclose(f), 0);
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* ---- scalars ---- */

static const char *const scalar_tags[] = {"loss", "accuracy", "global_step/sec"};
static const int64_t scalar_steps[] = {0, 10, -1, (int64_t)1 << 40};
static const double scalar_values[][3] = {
    {2.302585, 0.1, 0.0},
    {0.693, 0.75, 123.5},
    {-1e-3, 1e40, NAN}, /* 1e40 overflows float: stored as inf, as TF would */
    {1e-30, 1.0 / 3.0, 5e6},
};
#define N_SCALAR_EVENTS ((int)(sizeof scalar_steps / sizeof *scalar_steps))

/* Opens a writer in dir and writes the scalar fixture. */
static dt_summary_writer *write_scalars(const char *dir) {
    dt_summary_writer *w = NULL;
    dt_err err = {0};
    ck_assert_msg(dt_summary_open(dir, &w, &err) == 0, "open: %s", err.msg);
    for (int e = 0; e < N_SCALAR_EVENTS; e++)
        ck_assert_msg(
            dt_summary_scalars(w, scalar_steps[e], scalar_tags, scalar_values[e], 3, &err) == 0,
            "event %d: %s", e, err.msg);
    ck_assert_msg(dt_summary_flush(w, &err) == 0, "flush: %s", err.msg);
    return w;
}

START_TEST(scalars_round_trip) {
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/logs/run 1", tmp); /* nested and missing: made on open */
    double before = now_secs();
    dt_summary_writer *w = write_scalars(dir);
    char path[1200];
    snprintf(path, sizeof path, "%s", dt_summary_path(w));
    dt_summary_close(w);
    double after = now_secs();

    tensorflow_Event *ev = calloc(MAX_EVENTS, sizeof *ev);
    ck_assert_ptr_nonnull(ev);
    int count = load_events(path, ev, MAX_EVENTS);
    ck_assert_int_eq(count, 1 + N_SCALAR_EVENTS);

    ck_assert_uint_eq(ev[0].which_what, tensorflow_Event_file_version_tag);
    ck_assert_str_eq(ev[0].what.file_version, "brain.Event:2");
    ck_assert_int_eq(ev[0].step, 0);
    int fractional = 0;
    for (int i = 0; i < count; i++) {
        ck_assert_msg(ev[i].wall_time >= before - 1e-3 && ev[i].wall_time <= after + 1e-3,
                      "event %d: wall_time %.6f outside [%.6f, %.6f]", i, ev[i].wall_time, before,
                      after);
        if (i > 0) ck_assert(ev[i].wall_time >= ev[i - 1].wall_time);
        if (ev[i].wall_time != floor(ev[i].wall_time)) fractional++;
    }
    ck_assert_msg(fractional > 0, "wall_time has no sub-second part");

    for (int e = 0; e < N_SCALAR_EVENTS; e++) {
        const tensorflow_Event *x = &ev[1 + e];
        ck_assert_uint_eq(x->which_what, tensorflow_Event_summary_tag);
        ck_assert_int_eq(x->step, scalar_steps[e]);
        ck_assert_uint_eq(x->what.summary.value_count, 3);
        for (int v = 0; v < 3; v++) {
            const tensorflow_Summary_Value *value = &x->what.summary.value[v];
            ck_assert_str_eq(value->tag, scalar_tags[v]);
            ck_assert_uint_eq(value->which_value, tensorflow_Summary_Value_simple_value_tag);
            double want = scalar_values[e][v];
            float got = value->value.simple_value;
            if (isnan(want))
                ck_assert(isnan(got));
            else if (want > 3.5e38)
                ck_assert(isinf(got) && got > 0);
            else
                ck_assert_msg(got == (float)want, "event %d value %d: %.9g != %.9g", e, v,
                              (double)got, want);
        }
    }
    free(ev);

    /* The framing, checked with this file's own CRC-32C. */
    size_t size;
    uint8_t *file = slurp(path, &size);
    size_t ends[MAX_RECORDS];
    ck_assert_int_eq(check_framing(file, size, ends, MAX_RECORDS), 1 + N_SCALAR_EVENTS);
    free(file);
}
END_TEST

/* The independent CRC-32C itself, against the standard check value. */
START_TEST(crc_check_value) {
    ck_assert_uint_eq(slow_crc32c((const uint8_t *)"123456789", 9), 0xE3069283u);
}
END_TEST

/* events.out.tfevents.<secs>.<host>, with a ".N" only when the name is taken. */
static void check_file_name(const char *path, long long lo, long long hi, const char *host) {
    const char *name = base_name(path);
    const char *prefix = "events.out.tfevents.";
    ck_assert_msg(strncmp(name, prefix, strlen(prefix)) == 0, "bad name %s", name);
    const char *p = name + strlen(prefix);
    char *end;
    errno = 0;
    long long secs = strtoll(p, &end, 10);
    ck_assert_msg(errno == 0 && end - p >= 10 && *end == '.', "bad seconds in %s", name);
    for (const char *d = p; d < end; d++)
        ck_assert_msg(*d >= '0' && *d <= '9', "%s", name);
    ck_assert_msg(secs >= lo && secs <= hi, "%s: %lld not in [%lld, %lld]", name, secs, lo, hi);
    p = end + 1;
    ck_assert_msg(strncmp(p, host, strlen(host)) == 0, "%s: host is not %s", name, host);
    p += strlen(host);
    if (*p) {
        ck_assert_msg(*p == '.' && p[1], "%s: junk after the host", name);
        for (p++; *p; p++)
            ck_assert_msg(*p >= '0' && *p <= '9', "%s: bad suffix", name);
    }
}

START_TEST(file_name) {
    char host[256];
    ck_assert_int_eq(gethostname(host, sizeof host), 0);
    host[sizeof host - 1] = '\0';
    long long lo = (long long)time(NULL);
    dt_err err = {0};
    dt_summary_writer *a = NULL, *b = NULL;
    ck_assert_msg(dt_summary_open(tmp, &a, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_summary_open(tmp, &b, &err) == 0, "%s", err.msg);
    long long hi = (long long)time(NULL);
    check_file_name(dt_summary_path(a), lo, hi, host);
    check_file_name(dt_summary_path(b), lo, hi, host);
    ck_assert_str_ne(dt_summary_path(a), dt_summary_path(b)); /* never clobbered */
    /* Both files live in tmp and are whole. */
    ck_assert_int_eq(strncmp(dt_summary_path(a), tmp, strlen(tmp)), 0);
    dt_summary_close(a);
    dt_summary_close(b);
    dt_summary_close(NULL);
}
END_TEST

START_TEST(open_errors) {
    dt_err err = {0};
    dt_summary_writer *w = (dt_summary_writer *)&err; /* must come back NULL */
    char file[1100];
    snprintf(file, sizeof file, "%s/plain", tmp);
    ck_assert_int_eq(dt_test_write_file(file, "x"), 0);
    ck_assert_int_eq(dt_summary_open(file, &w, &err), DT_EIO);
    ck_assert_ptr_null(w);
    ck_assert_msg(strstr(err.msg, file) && strstr(err.msg, "not a directory"), "%s", err.msg);

    dt_err_clear(&err);
    char below[1200];
    snprintf(below, sizeof below, "%s/plain/sub", tmp);
    ck_assert_int_eq(dt_summary_open(below, &w, &err), DT_EIO);
    ck_assert_ptr_null(w);
    ck_assert_msg(strstr(err.msg, "mkdir") && strstr(err.msg, below), "%s", err.msg);

    dt_err_clear(&err);
    ck_assert_int_eq(dt_summary_open("", &w, &err), DT_EINVAL);
    ck_assert_ptr_null(w);
}
END_TEST

/* ---- bad tags and values write nothing ---- */

/* A histogram of values[0..n), each once: the counts writer with every
 * count 1. */
static int histogram_once(dt_summary_writer *w, int64_t step, const char *tag, const double *values,
                          int64_t n, dt_err *err) {
    int64_t *ones = malloc(sizeof *ones * (size_t)(n > 0 ? n : 1));
    ck_assert_ptr_nonnull(ones);
    for (int64_t i = 0; i < n; i++)
        ones[i] = 1;
    int rc = dt_summary_histogram_counts(w, step, tag, values, ones, n, err);
    free(ones);
    return rc;
}

static long file_size(const char *path) {
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return (long)st.st_size;
}

static char long_tag[DT_SUMMARY_TAG_MAX + 2];

START_TEST(bad_tags) {
    dt_err err = {0};
    dt_summary_writer *w = NULL;
    ck_assert_msg(dt_summary_open(tmp, &w, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(dt_summary_flush(w, &err), 0);
    long size = file_size(dt_summary_path(w));
    double values[2] = {1.0, 2.0};

    memset(long_tag, 'a', sizeof long_tag - 1);
    struct {
        const char *tag;
        const char *needle;
    } bad[] = {
        {NULL, "tags[1] is NULL"},
        {"", "tags[1] is empty"},
        {"loss\xff", "tags[1] is not valid UTF-8"},
        {"\xc0\xaf", "tags[1] is not valid UTF-8"},     /* overlong '/' */
        {"\xed\xa0\x80", "tags[1] is not valid UTF-8"}, /* a surrogate */
        {"caf\xc3", "tags[1] is not valid UTF-8"},      /* cut mid-character */
        {long_tag, "tags[1] \"aaaa"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *tags[2] = {"ok", bad[i].tag};
        dt_err_clear(&err);
        ck_assert_int_eq(dt_summary_scalars(w, 5, tags, values, 2, &err), DT_EINVAL);
        ck_assert_msg(strstr(err.msg, bad[i].needle) && strstr(err.msg, dt_summary_path(w)),
                      "case %zu: %s", i, err.msg);
    }
    dt_err_clear(&err);
    ck_assert_int_eq(histogram_once(w, 5, "", values, 2, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "histogram tag is empty"), "%s", err.msg);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_summary_scalars(w, 5, NULL, NULL, -1, &err), DT_EINVAL);

    /* Nothing reached the file, and the writer still works. */
    ck_assert_int_eq(dt_summary_flush(w, &err), 0);
    ck_assert_int_eq(file_size(dt_summary_path(w)), size);
    const char *tags[2] = {"loss/\xce\xbb", "\xf0\x9f\x93\x88"}; /* "loss/λ", an emoji */
    dt_err_clear(&err);
    ck_assert_msg(dt_summary_scalars(w, 6, tags, values, 2, &err) == 0, "%s", err.msg);
    ck_assert_msg(dt_summary_scalars(w, 7, tags, values, 0, &err) == 0, "%s", err.msg);
    char path[1200];
    snprintf(path, sizeof path, "%s", dt_summary_path(w));
    dt_summary_close(w);

    tensorflow_Event *ev = calloc(MAX_EVENTS, sizeof *ev);
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(load_events(path, ev, MAX_EVENTS), 3);
    ck_assert_str_eq(ev[1].what.summary.value[0].tag, tags[0]);
    ck_assert_str_eq(ev[1].what.summary.value[1].tag, tags[1]);
    ck_assert_int_eq(ev[2].step, 7);
    ck_assert_uint_eq(ev[2].which_what, tensorflow_Event_summary_tag);
    ck_assert_uint_eq(ev[2].what.summary.value_count, 0);
    free(ev);
}
END_TEST

/* ---- histograms ---- */

/* Checks a decoded histogram against the values it was built from: the
 * statistics, ascending limits from TF's default set, no two empty buckets in
 * a row, and each count equal to the values in [limit[i-1], limit[i]). */
static void check_histogram(const tensorflow_HistogramProto *h, const double *values, int n) {
    double min = values[0], max = values[0], sum = 0, sum_squares = 0;
    for (int i = 0; i < n; i++) {
        min = fmin(min, values[i]);
        max = fmax(max, values[i]);
        sum += values[i];
        sum_squares += values[i] * values[i];
    }
    ck_assert_double_eq(h->min, min);
    ck_assert_double_eq(h->max, max);
    ck_assert_double_eq(h->num, n);
    ck_assert_double_eq_tol(h->sum, sum, 1e-9 * (1 + fabs(sum)));
    ck_assert_double_eq_tol(h->sum_squares, sum_squares, 1e-9 * (1 + sum_squares));
    ck_assert_uint_eq(h->bucket_limit_count, h->bucket_count);
    ck_assert_uint_gt(h->bucket_count, 0);
    ck_assert_double_eq(h->bucket_limit[h->bucket_count - 1], 1.7976931348623157e308);

    double total = 0;
    for (pb_size_t b = 0; b < h->bucket_count; b++) {
        double limit = h->bucket_limit[b];
        double lower = b ? h->bucket_limit[b - 1] : -1.7976931348623157e308;
        if (b) ck_assert_msg(limit > lower, "limits not ascending at %u", (unsigned)b);
        if (b)
            ck_assert_msg(h->bucket[b] > 0 || h->bucket[b - 1] > 0, "empty run at %u", (unsigned)b);
        /* 0, +-DBL_MAX, or +-1e-12 * 1.1^k */
        double a = fabs(limit);
        if (a != 0 && a != 1.7976931348623157e308) {
            double k = log(a / 1e-12) / log(1.1);
            ck_assert_msg(fabs(k - round(k)) < 1e-6 && k > -0.5 && a < 1.1e20,
                          "limit %.17g is not a TF default", limit);
        }
        int inside = 0;
        for (int i = 0; i < n; i++)
            inside += values[i] >= lower && values[i] < limit;
        ck_assert_msg(h->bucket[b] == inside, "bucket %u [%g, %g): %g != %d", (unsigned)b, lower,
                      limit, h->bucket[b], inside);
        total += h->bucket[b];
    }
    ck_assert_double_eq(total, n);
}

START_TEST(histogram_round_trip) {
    dt_err err = {0};
    dt_summary_writer *w = NULL;
    ck_assert_msg(dt_summary_open(tmp, &w, &err) == 0, "%s", err.msg);
    static const double small[] = {0, 1, 1, 2, 3, 5, 8, 13, -1.5, 0, 1e-13, -2.5e7};
    int n_small = (int)(sizeof small / sizeof *small);
    ck_assert_msg(histogram_once(w, 7, "staleness", small, n_small, &err) == 0, "%s", err.msg);
    /* A staleness-like spread: 1000 integers in 0..49. */
    double spread[1000];
    for (int i = 0; i < 1000; i++)
        spread[i] = (double)((i * 37) % 50);
    ck_assert_msg(histogram_once(w, 8, "ps/staleness", spread, 1000, &err) == 0, "%s", err.msg);
    double one = 1.0;
    ck_assert_msg(histogram_once(w, 9, "one", &one, 1, &err) == 0, "%s", err.msg);
    char path[1200];
    snprintf(path, sizeof path, "%s", dt_summary_path(w));
    dt_summary_close(w);

    tensorflow_Event *ev = calloc(MAX_EVENTS, sizeof *ev);
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(load_events(path, ev, MAX_EVENTS), 4);
    const char *tags[] = {"staleness", "ps/staleness", "one"};
    for (int e = 1; e <= 3; e++) {
        ck_assert_int_eq(ev[e].step, 6 + e);
        ck_assert_uint_eq(ev[e].which_what, tensorflow_Event_summary_tag);
        ck_assert_uint_eq(ev[e].what.summary.value_count, 1);
        ck_assert_str_eq(ev[e].what.summary.value[0].tag, tags[e - 1]);
        ck_assert_uint_eq(ev[e].what.summary.value[0].which_value,
                          tensorflow_Summary_Value_histo_tag);
    }
    check_histogram(&ev[1].what.summary.value[0].value.histo, small, n_small);
    check_histogram(&ev[2].what.summary.value[0].value.histo, spread, 1000);
    /* Golden: 1.0 alone is three entries: the empty run up to the limit
     * just below 1 (1e-12 * 1.1^289), its own bucket ending at 1e-12 * 1.1^290,
     * and the empty run up to DBL_MAX. */
    const tensorflow_HistogramProto *h = &ev[3].what.summary.value[0].value.histo;
    ck_assert_uint_eq(h->bucket_count, 3);
    ck_assert_double_eq_tol(h->bucket_limit[0], 1e-12 * pow(1.1, 289), 1e-9);
    ck_assert_double_eq_tol(h->bucket_limit[1], 1e-12 * pow(1.1, 290), 1e-9);
    ck_assert(h->bucket_limit[0] <= 1.0 && h->bucket_limit[1] > 1.0);
    ck_assert_double_eq(h->bucket[0], 0);
    ck_assert_double_eq(h->bucket[1], 1);
    ck_assert_double_eq(h->bucket[2], 0);
    free(ev);
}
END_TEST

START_TEST(histogram_bad_values) {
    dt_err err = {0};
    dt_summary_writer *w = NULL;
    ck_assert_msg(dt_summary_open(tmp, &w, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(dt_summary_flush(w, &err), 0);
    long size = file_size(dt_summary_path(w));
    double values[4] = {1, 2, 3, NAN};
    ck_assert_int_eq(histogram_once(w, 1, "h", values, 4, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "histogram \"h\": values[3] is not finite"), "%s", err.msg);
    values[3] = -INFINITY;
    dt_err_clear(&err);
    ck_assert_int_eq(histogram_once(w, 1, "h", values, 4, &err), DT_EINVAL);
    dt_err_clear(&err);
    ck_assert_int_eq(histogram_once(w, 1, "h", values, -1, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "-1 values, need >= 0"), "%s", err.msg);
    ck_assert_int_eq(dt_summary_flush(w, &err), 0);
    ck_assert_int_eq(file_size(dt_summary_path(w)), size);
    dt_summary_close(w);
}
END_TEST

/* ---- histograms from counts ---- */

#define DBL_MAX_LITERAL 1.7976931348623157e308
#define COUNT_EVENTS 10 /* the records of histogram_counts_round_trip */

/* values[i] repeated counts[i] times, into out (cap entries). */
static int expand(const double *values, const int64_t *counts, int n, double *out, int cap) {
    int total = 0;
    for (int i = 0; i < n; i++)
        for (int64_t k = 0; k < counts[i]; k++) {
            ck_assert_int_lt(total, cap);
            out[total++] = values[i];
        }
    return total;
}

static void write_counts(dt_summary_writer *w, int64_t step, const char *tag, const double *values,
                         const int64_t *counts, int n) {
    dt_err err = {0};
    ck_assert_msg(dt_summary_histogram_counts(w, step, tag, values, counts, n, &err) == 0, "%s: %s",
                  tag, err.msg);
}

/* Every field of two decoded histograms, bit for bit. */
static void check_same_histogram(const tensorflow_HistogramProto *a,
                                 const tensorflow_HistogramProto *b) {
    ck_assert_double_eq(a->min, b->min);
    ck_assert_double_eq(a->max, b->max);
    ck_assert_double_eq(a->num, b->num);
    ck_assert_double_eq(a->sum, b->sum);
    ck_assert_double_eq(a->sum_squares, b->sum_squares);
    ck_assert_uint_eq(a->bucket_limit_count, b->bucket_limit_count);
    ck_assert_uint_eq(a->bucket_count, b->bucket_count);
    for (pb_size_t i = 0; i < a->bucket_count; i++) {
        ck_assert_double_eq(a->bucket_limit[i], b->bucket_limit[i]);
        ck_assert_double_eq(a->bucket[i], b->bucket[i]);
    }
}

/* min, max, num, sum and sum_squares, exactly. */
static void check_stats(const tensorflow_HistogramProto *h, double min, double max, double num,
                        double sum, double sum_squares) {
    ck_assert_double_eq(h->min, min);
    ck_assert_double_eq(h->max, max);
    ck_assert_double_eq(h->num, num);
    ck_assert_double_eq(h->sum, sum);
    ck_assert_double_eq(h->sum_squares, sum_squares);
}

/* The bucket list: n entries, limits within a relative 1e-10 (the tests
 * spell TF's limits with pow, TF multiplies), counts exactly. */
static void check_buckets(const tensorflow_HistogramProto *h, pb_size_t n, const double *limits,
                          const double *counts) {
    ck_assert_uint_eq(h->bucket_limit_count, n);
    ck_assert_uint_eq(h->bucket_count, n);
    for (pb_size_t i = 0; i < n; i++) {
        double got = h->bucket_limit[i];
        ck_assert_msg(got == limits[i] || fabs(got - limits[i]) <= 1e-10 * fabs(limits[i]),
                      "bucket_limit[%u]: %.17g, want %.17g", (unsigned)i, got, limits[i]);
        ck_assert_double_eq(h->bucket[i], counts[i]);
    }
}

/* TF's empty histogram: what Histogram::Clear leaves, encoded. */
static void check_empty_histogram(const tensorflow_HistogramProto *h) {
    check_stats(h, DBL_MAX_LITERAL, -DBL_MAX_LITERAL, 0, 0, 0);
    check_buckets(h, 1, (const double[]){DBL_MAX_LITERAL}, (const double[]){0});
}

START_TEST(histogram_counts_round_trip) {
    dt_err err = {0};
    dt_summary_writer *w = NULL;
    ck_assert_msg(dt_summary_open(tmp, &w, &err) == 0, "%s", err.msg);

    /* 1: staleness buckets 0..31 as the chief sends them, and 2: the same
     * sample expanded, each value once. */
    double staleness[32];
    int64_t fresh[32];
    for (int b = 0; b < 32; b++) {
        staleness[b] = b;
        fresh[b] = b < 6 ? 40 >> b : 0; /* 40 20 10 5 2 1 0 ... */
    }
    fresh[31] = 3; /* "that or more" */
    static double expanded[200];
    int n_expanded = expand(staleness, fresh, 32, expanded, 200);
    ck_assert_int_eq(n_expanded, 81);
    write_counts(w, 1, "staleness", staleness, fresh, 32);
    ck_assert_msg(histogram_once(w, 2, "staleness", expanded, n_expanded, &err) == 0, "%s",
                  err.msg);
    /* 3: non-integers, negatives, two values that may share a bucket. */
    static const double mixed[] = {-2.5, 0.5, 0.51, 1e6, 7e-13};
    static const int64_t mixed_counts[] = {2, 1, 4, 1, 3};
    write_counts(w, 3, "mixed", mixed, mixed_counts, 5);
    /* 4: a value seen zero times moves neither min nor max. */
    static const double spread[] = {-100, 2, 100};
    static const int64_t only_middle[] = {0, 5, 0};
    write_counts(w, 4, "zeros", spread, only_middle, 3);
    /* 5: one value, one bucket: every gradient fresh. */
    static const double zero = 0;
    static const int64_t four = 4;
    write_counts(w, 5, "fresh", &zero, &four, 1);
    /* 6: one value away from 0. */
    static const double three = 3;
    static const int64_t seven = 7;
    write_counts(w, 6, "three", &three, &seven, 1);
    /* 7: counts past 32 bits, which no expanded sample could hold. */
    static const double two_values[] = {0, 1};
    static const int64_t huge[] = {3000000000LL, 1};
    write_counts(w, 7, "huge", two_values, huge, 2);
    /* 8 and 9: empty, by n == 0 and by all-zero counts. */
    write_counts(w, 8, "none", NULL, NULL, 0);
    static const int64_t no_counts[] = {0, 0, 0};
    write_counts(w, 9, "all zero", spread, no_counts, 3);
    char path[1200];
    snprintf(path, sizeof path, "%s", dt_summary_path(w));
    dt_summary_close(w);

    tensorflow_Event *ev = calloc(COUNT_EVENTS, sizeof *ev);
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(load_events(path, ev, COUNT_EVENTS), COUNT_EVENTS);
    const char *tags[] = {"staleness", "staleness", "mixed", "zeros",   "fresh",
                          "three",     "huge",      "none",  "all zero"};
    const tensorflow_HistogramProto *h[COUNT_EVENTS];
    for (int e = 1; e < COUNT_EVENTS; e++) {
        ck_assert_int_eq(ev[e].step, e);
        ck_assert_uint_eq(ev[e].which_what, tensorflow_Event_summary_tag);
        ck_assert_uint_eq(ev[e].what.summary.value_count, 1);
        ck_assert_str_eq(ev[e].what.summary.value[0].tag, tags[e - 1]);
        ck_assert_uint_eq(ev[e].what.summary.value[0].which_value,
                          tensorflow_Summary_Value_histo_tag);
        h[e] = &ev[e].what.summary.value[0].value.histo;
    }

    check_histogram(h[1], expanded, n_expanded);
    check_same_histogram(h[1], h[2]);
    check_stats(h[1], 0, 31, 81, 20 + 20 + 15 + 8 + 5 + 93, 20 + 40 + 45 + 32 + 25 + 3 * 961);

    double mixed_expanded[16];
    int n_mixed = expand(mixed, mixed_counts, 5, mixed_expanded, 16);
    check_histogram(h[3], mixed_expanded, n_mixed);
    ck_assert_double_eq(h[3]->min, -2.5);
    ck_assert_double_eq(h[3]->max, 1e6);
    ck_assert_double_eq(h[3]->num, 11);

    double fives[5] = {2, 2, 2, 2, 2};
    check_histogram(h[4], fives, 5);
    check_stats(h[4], 2, 2, 5, 10, 20);

    /* Golden: 0 alone falls in [0, 1e-12): the empty run up to the 0 limit,
     * its bucket, the empty run up to DBL_MAX. */
    check_stats(h[5], 0, 0, 4, 0, 0);
    check_buckets(h[5], 3, (const double[]){0, 1e-12, DBL_MAX_LITERAL}, (const double[]){0, 4, 0});

    /* Golden: 3 lies in [1e-12 * 1.1^301, 1e-12 * 1.1^302). */
    check_stats(h[6], 3, 3, 7, 21, 63);
    check_buckets(h[6], 3,
                  (const double[]){1e-12 * pow(1.1, 301), 1e-12 * pow(1.1, 302), DBL_MAX_LITERAL},
                  (const double[]){0, 7, 0});
    ck_assert(h[6]->bucket_limit[0] <= 3.0 && h[6]->bucket_limit[1] > 3.0);

    /* Golden: 0 three billion times and 1 once (the limits around 1 as in
     * histogram_round_trip). */
    check_stats(h[7], 0, 1, 3000000001.0, 1, 1);
    check_buckets(
        h[7], 5,
        (const double[]){0, 1e-12, 1e-12 * pow(1.1, 289), 1e-12 * pow(1.1, 290), DBL_MAX_LITERAL},
        (const double[]){0, 3000000000.0, 0, 1, 0});

    check_empty_histogram(h[8]);
    check_empty_histogram(h[9]);
    free(ev);
}
END_TEST

START_TEST(histogram_counts_bad_input) {
    dt_err err = {0};
    dt_summary_writer *w = NULL;
    ck_assert_msg(dt_summary_open(tmp, &w, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(dt_summary_flush(w, &err), 0);
    long size = file_size(dt_summary_path(w));
    double values[3] = {0, 1, 2};
    int64_t counts[3] = {1, 2, 3};

    values[1] = NAN;
    ck_assert_int_eq(dt_summary_histogram_counts(w, 1, "h", values, counts, 3, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "histogram \"h\": values[1] is not finite") &&
                      strstr(err.msg, dt_summary_path(w)),
                  "%s", err.msg);
    values[1] = INFINITY;
    counts[1] = 0; /* refused even where it counts for nothing */
    dt_err_clear(&err);
    ck_assert_int_eq(dt_summary_histogram_counts(w, 1, "h", values, counts, 3, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "values[1] is not finite"), "%s", err.msg);
    values[1] = 1;
    counts[1] = 2;
    counts[2] = -1;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_summary_histogram_counts(w, 1, "h", values, counts, 3, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "histogram \"h\": counts[2] is negative (-1)"), "%s", err.msg);
    counts[2] = 3;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_summary_histogram_counts(w, 1, "h", values, counts, -1, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "histogram \"h\": -1 values"), "%s", err.msg);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_summary_histogram_counts(w, 1, "", values, counts, 3, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "histogram tag is empty"), "%s", err.msg);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_summary_histogram_counts(w, 1, NULL, values, counts, 3, &err), DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "histogram tag is NULL"), "%s", err.msg);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_summary_histogram_counts(w, 1, "h\xff", values, counts, 3, &err),
                     DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "histogram tag is not valid UTF-8"), "%s", err.msg);

    /* Nothing reached the file, and the writer still works. */
    dt_err_clear(&err);
    ck_assert_int_eq(dt_summary_flush(w, &err), 0);
    ck_assert_int_eq(file_size(dt_summary_path(w)), size);
    ck_assert_msg(dt_summary_histogram_counts(w, 2, "h", values, counts, 3, &err) == 0, "%s",
                  err.msg);
    char path[1200];
    snprintf(path, sizeof path, "%s", dt_summary_path(w));
    dt_summary_close(w);
    tensorflow_Event *ev = calloc(MAX_EVENTS, sizeof *ev);
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(load_events(path, ev, MAX_EVENTS), 2);
    ck_assert_int_eq(ev[1].step, 2);
    double expanded[6] = {0, 1, 1, 2, 2, 2};
    check_histogram(&ev[1].what.summary.value[0].value.histo, expanded, 6);
    free(ev);
}
END_TEST

/* ---- float histograms, read with the hand-written decoder ---- */

/* TF's default limits, made here as tsl/lib/histogram makes them: 1e-12
 * times 1.1 until 1e20, mirrored, 0 between, +-DBL_MAX at the ends. */
#define TF_BUCKETS 1551
static double tf_limits[TF_BUCKETS];

static void make_tf_limits(void) {
    double pos[TF_BUCKETS];
    int n = 0;
    for (double v = 1e-12; v < 1e20; v *= 1.1)
        pos[n++] = v;
    pos[n++] = DBL_MAX;
    ck_assert_int_eq(2 * n + 1, TF_BUCKETS);
    for (int i = 0; i < n; i++) {
        tf_limits[n + 1 + i] = pos[i];
        tf_limits[n - 1 - i] = -pos[i];
    }
    tf_limits[n] = 0;
}

/* TF's Histogram: counts by std::upper_bound over the limits, then
 * EncodeToProto(preserve_zero_buckets = false): each run of empty buckets
 * becomes one entry at the run's last limit. Fills limits/counts (room for
 * TF_BUCKETS) and returns the entries. */
static size_t tf_encode(const double *values, int64_t n, double *limits, double *counts) {
    static double full[TF_BUCKETS];
    memset(full, 0, sizeof full);
    for (int64_t i = 0; i < n; i++) {
        size_t lo = 0, hi = TF_BUCKETS; /* first limit > v */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (tf_limits[mid] > values[i])
                hi = mid;
            else
                lo = mid + 1;
        }
        full[lo < TF_BUCKETS ? lo : TF_BUCKETS - 1] += 1;
    }
    size_t entries = 0;
    for (size_t i = 0; i < TF_BUCKETS;) {
        double end = tf_limits[i], count = full[i++];
        if (count <= 0)
            while (i < TF_BUCKETS && full[i] <= 0) {
                end = tf_limits[i];
                count = full[i++];
            }
        limits[entries] = end;
        counts[entries++] = count;
    }
    return entries;
}

/* A decoded histogram equals TF's of the finite values: statistics as
 * TF's Histogram::Add sums them (in order, in double), every bucket entry
 * exactly. */
static void check_wire_histogram(const dt_wire_histo *h, const double *values, int64_t n) {
    static double limits[TF_BUCKETS], counts[TF_BUCKETS];
    double min = DBL_MAX, max = -DBL_MAX, sum = 0, sum_squares = 0;
    for (int64_t i = 0; i < n; i++) {
        min = fmin(min, values[i]);
        max = fmax(max, values[i]);
        sum += values[i];
        sum_squares += values[i] * values[i];
    }
    ck_assert_double_eq(h->min, min);
    ck_assert_double_eq(h->max, max);
    ck_assert_double_eq(h->num, (double)n);
    ck_assert_double_eq(h->sum, sum);
    ck_assert_double_eq(h->sum_squares, sum_squares);
    size_t entries = tf_encode(values, n, limits, counts);
    ck_assert_uint_eq(h->num_limits, entries);
    ck_assert_uint_eq(h->num_buckets, entries);
    for (size_t i = 0; i < entries; i++) {
        ck_assert_msg(h->bucket_limit[i] == limits[i], "bucket_limit[%zu]: %.17g, want %.17g", i,
                      h->bucket_limit[i], limits[i]);
        ck_assert_msg(h->bucket[i] == counts[i], "bucket[%zu] (limit %g): %g, want %g", i,
                      limits[i], h->bucket[i], counts[i]);
    }
}

/* Every record of path, with the hand-written decoder. */
static dt_wire_event *wire_load(const char *path, size_t *count) {
    dt_wire_event *ev = NULL;
    char why[512];
    ck_assert_msg(dt_wire_load_file(path, &ev, count, why, sizeof why) == 0, "%s", why);
    return ev;
}

/* The one histogram of event e, tagged tag. */
static const dt_wire_histo *wire_histo(const dt_wire_event *ev, size_t count, size_t e,
                                       int64_t step, const char *tag) {
    ck_assert_uint_lt(e, count);
    ck_assert_int_eq(ev[e].step, step);
    ck_assert_uint_eq(ev[e].num_values, 1);
    ck_assert_str_eq(ev[e].values[0].tag, tag);
    ck_assert_int_eq(ev[e].values[0].kind, DT_WIRE_HISTO);
    return &ev[e].values[0].histo;
}

START_TEST(histogram_floats_known_values) {
    make_tf_limits();
    dt_err err = {0};
    dt_summary_writer *w = NULL;
    ck_assert_msg(dt_summary_open(tmp, &w, &err) == 0, "%s", err.msg);
    /* 1: known values, non-finite ones among them. */
    const float known[] = {0.0f,
                           1.0f,
                           1.0f,
                           -1.5f,
                           3.0f,
                           NAN,
                           INFINITY,
                           1e-13f,
                           2.5e7f,
                           -INFINITY,
                           FLT_MAX,
                           -FLT_MAX,
                           1e-45f /* denormal */,
                           -0.0f,
                           -2.5e-7f};
    const int n_known = (int)(sizeof known / sizeof *known);
    int64_t nonfinite = -1;
    ck_assert_msg(
        dt_summary_histogram_floats(w, 3, "layer0/weight", known, n_known, &nonfinite, &err) == 0,
        "%s", err.msg);
    ck_assert_int_eq(nonfinite, 3);
    /* 2: nothing finite, and 3: no values: TF's empty histogram. */
    const float none[] = {NAN, -INFINITY};
    ck_assert_int_eq(dt_summary_histogram_floats(w, 4, "diverged", none, 2, &nonfinite, &err), 0);
    ck_assert_int_eq(nonfinite, 2);
    ck_assert_int_eq(dt_summary_histogram_floats(w, 5, "empty", NULL, 0, NULL, &err), 0);
    /* 4: 200,000 values of every magnitude and sign, from 1e-30 to 1e30
     * and zeros: each one's bucket found by the writer's lookup must be
     * the one a search over TF's limits finds. */
    const int n_spread = 200000;
    float *spread = malloc((size_t)n_spread * sizeof *spread);
    double *spread_d = malloc((size_t)n_spread * sizeof *spread_d);
    ck_assert(spread && spread_d);
    uint64_t x = 42;
    for (int i = 0; i < n_spread; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(x >> 11) * 0x1.0p-53;
        float v = (float)pow(10.0, -30 + 60 * u);
        if (i % 2) v = -v;
        if (i % 97 == 0) v = 0;
        spread[i] = v;
        spread_d[i] = v;
    }
    ck_assert_int_eq(
        dt_summary_histogram_floats(w, 6, "spread", spread, n_spread, &nonfinite, &err), 0);
    ck_assert_int_eq(nonfinite, 0);
    /* 5: bad input writes nothing. */
    ck_assert_int_eq(dt_summary_flush(w, &err), 0);
    long size = file_size(dt_summary_path(w));
    ck_assert_int_eq(dt_summary_histogram_floats(w, 7, "h", known, -1, &nonfinite, &err),
                     DT_EINVAL);
    ck_assert_msg(strstr(err.msg, "histogram \"h\": -1 values"), "%s", err.msg);
    ck_assert_int_eq(nonfinite, 0);
    dt_err_clear(&err);
    ck_assert_int_eq(dt_summary_histogram_floats(w, 7, "", known, 1, NULL, &err), DT_EINVAL);
    ck_assert_int_eq(file_size(dt_summary_path(w)), size);
    char path[1200];
    snprintf(path, sizeof path, "%s", dt_summary_path(w));
    dt_summary_close(w);

    size_t count = 0;
    dt_wire_event *ev = wire_load(path, &count);
    ck_assert_uint_eq(count, 5);
    ck_assert_str_eq(ev[0].file_version, "brain.Event:2");
    double finite[16];
    int n_finite = 0;
    for (int i = 0; i < n_known; i++)
        if (isfinite(known[i])) finite[n_finite++] = known[i];
    const dt_wire_histo *h = wire_histo(ev, count, 1, 3, "layer0/weight");
    check_wire_histogram(h, finite, n_finite);
    /* Golden, by hand: 12 values; min -FLT_MAX, max FLT_MAX; -FLT_MAX in
     * the bucket ending at the last limit below -1e20 ... (the checks above
     * hold the whole list); sum is FLT_MAX - FLT_MAX + the rest. */
    ck_assert_double_eq(h->num, 12);
    ck_assert_double_eq(h->min, -FLT_MAX);
    ck_assert_double_eq(h->max, FLT_MAX);
    ck_assert_double_eq(h->bucket_limit[h->num_limits - 1], DBL_MAX);
    ck_assert_double_eq(h->bucket[h->num_buckets - 1], 1); /* FLT_MAX > 1e20 */
    for (int e = 2; e <= 3; e++) {
        h = wire_histo(ev, count, (size_t)e, e + 2, e == 2 ? "diverged" : "empty");
        ck_assert_double_eq(h->num, 0);
        ck_assert_double_eq(h->min, DBL_MAX);
        ck_assert_double_eq(h->max, -DBL_MAX);
        ck_assert_double_eq(h->sum, 0);
        ck_assert_uint_eq(h->num_buckets, 1);
        ck_assert_double_eq(h->bucket_limit[0], DBL_MAX);
        ck_assert_double_eq(h->bucket[0], 0);
    }
    check_wire_histogram(wire_histo(ev, count, 4, 6, "spread"), spread_d, n_spread);
    dt_wire_events_free(ev, count);

    /* The nanopb decoder of proto/tensorboard.proto reads the small one
     * the same way. */
    tensorflow_Event *pb = calloc(MAX_EVENTS, sizeof *pb);
    ck_assert_ptr_nonnull(pb);
    ck_assert_int_eq(load_events(path, pb, 4), 5);
    check_histogram(&pb[1].what.summary.value[0].value.histo, finite, n_finite);
    free(pb);
    free(spread);
    free(spread_d);
}
END_TEST

/* The writer's bucket lookup at the edges: each of TF's limits, and the
 * doubles just below and above it, of both signs, through the double API. */
START_TEST(histogram_at_every_limit) {
    make_tf_limits();
    static double values[6 * TF_BUCKETS];
    int n = 0;
    for (int i = 0; i < TF_BUCKETS; i++) {
        double l = tf_limits[i];
        values[n++] = l;
        values[n++] = -l;
        if (fabs(l) < DBL_MAX) {
            values[n++] = nextafter(l, -INFINITY);
            values[n++] = nextafter(l, INFINITY);
        }
    }
    dt_err err = {0};
    dt_summary_writer *w = NULL;
    ck_assert_msg(dt_summary_open(tmp, &w, &err) == 0, "%s", err.msg);
    ck_assert_msg(histogram_once(w, 1, "limits", values, n, &err) == 0, "%s", err.msg);
    char path[1200];
    snprintf(path, sizeof path, "%s", dt_summary_path(w));
    dt_summary_close(w);
    size_t count = 0;
    dt_wire_event *ev = wire_load(path, &count);
    check_wire_histogram(wire_histo(ev, count, 1, 1, "limits"), values, n);
    dt_wire_events_free(ev, count);
}
END_TEST

/* The hand-written decoder refuses what is not a well-formed Event. */
START_TEST(wire_decoder_refuses_bad_bytes) {
    dt_wire_event ev;
    char why[256];
    /* Event{step 5, summary{value{histo{bucket_limit [1, 2] packed}}}} */
    const uint8_t good[] = {0x10, 0x05, 0x2a, 22,   0x0a, 20, 0x2a, 18, 0x32, 16, 0, 0, 0,
                            0,    0,    0,    0xf0, 0x3f, 0,  0,    0,  0,    0,  0, 0, 0x40};
    ck_assert_uint_eq(sizeof good, 26);
    ck_assert_msg(dt_wire_decode_event(good, sizeof good, &ev, why, sizeof why) == 0, "%s", why);
    ck_assert_int_eq(ev.step, 5);
    ck_assert_uint_eq(ev.num_values, 1);
    ck_assert_uint_eq(ev.values[0].histo.num_limits, 2);
    ck_assert_double_eq(ev.values[0].histo.bucket_limit[0], 1.0);
    ck_assert_double_eq(ev.values[0].histo.bucket_limit[1], 2.0);
    dt_wire_event_free(&ev);
    for (size_t cut = 3; cut < sizeof good; cut++) /* 2 bytes: a whole Event{step 5} */
        ck_assert_msg(dt_wire_decode_event(good, cut, &ev, why, sizeof why) < 0,
                      "%zu of %zu bytes decoded", cut, sizeof good);
    const uint8_t wrong_wire[] = {0x11, 0, 0, 0, 0, 0, 0, 0, 0}; /* step as fixed64 */
    ck_assert_int_lt(dt_wire_decode_event(wrong_wire, sizeof wrong_wire, &ev, why, sizeof why), 0);
    ck_assert_msg(strstr(why, "wrong wire type"), "%s", why);
}
END_TEST

/* ---- corruption and truncation ---- */

/* Writes the scalar fixture; returns its bytes and record ends. */
static uint8_t *fixture_file(size_t *size, size_t *ends, int *count) {
    dt_summary_writer *w = write_scalars(tmp);
    uint8_t *file = slurp(dt_summary_path(w), size);
    dt_summary_close(w);
    *count = check_framing(file, *size, ends, MAX_RECORDS);
    return file;
}

/* Start of the record holding byte `at`. */
static size_t record_start(const size_t *ends, int count, size_t at) {
    size_t start = 0;
    for (int r = 0; r < count && ends[r] <= at; r++)
        start = ends[r];
    return start;
}

START_TEST(flipped_byte_is_corrupt) {
    size_t size, ends[MAX_RECORDS];
    int count;
    uint8_t *file = fixture_file(&size, ends, &count);
    char path[1100], needle[64];
    snprintf(path, sizeof path, "%s/flipped", tmp);
    /* Every byte of the file, each flipped alone: both crcs together must
     * catch all of them, in the record that holds the byte. */
    for (size_t at = 0; at < size; at++) {
        file[at] ^= 0x20;
        spit(path, file, size);
        file[at] ^= 0x20;
        FILE *f = fopen(path, "rb");
        ck_assert_ptr_nonnull(f);
        dt_err err = {0};
        int rc;
        int good = read_until_error(f, &rc, &err);
        fclose(f);
        size_t start = record_start(ends, count, at);
        snprintf(needle, sizeof needle, "record at byte %zu:", start);
        ck_assert_msg(rc == DT_ECORRUPT, "byte %zu: rc %d after %d records", at, rc, good);
        ck_assert_msg(strstr(err.msg, needle) &&
                          (strstr(err.msg, "crc mismatch") || strstr(err.msg, "truncated")),
                      "byte %zu: %s", at, err.msg);
        int before = 0;
        while (before < count && ends[before] <= start)
            before++;
        ck_assert_int_eq(good, before);
    }
    free(file);
}
END_TEST

/* Truncation at every length: a clean end at record boundaries, else
 * DT_ECORRUPT naming the partial record. Run on a real file (where the size
 * is known up front) and on a memory stream (where only reads tell). */
START_TEST(truncated_is_corrupt) {
    size_t size, ends[MAX_RECORDS];
    int count;
    uint8_t *file = fixture_file(&size, ends, &count);
    char path[1100], needle[64];
    snprintf(path, sizeof path, "%s/truncated", tmp);
    for (size_t cut = 0; cut < size; cut++) {
        for (int stream = 0; stream < 2; stream++) {
            FILE *f;
            if (stream && cut == 0) continue; /* fmemopen may refuse size 0 */
            if (stream) {
                f = fmemopen(file, cut, "rb");
            } else {
                spit(path, file, cut);
                f = fopen(path, "rb");
            }
            ck_assert_ptr_nonnull(f);
            dt_err err = {0};
            int rc;
            int good = read_until_error(f, &rc, &err);
            fclose(f);
            int whole = 0;
            while (whole < count && ends[whole] <= cut)
                whole++;
            ck_assert_int_eq(good, whole);
            size_t start = record_start(ends, count, cut);
            if (start == cut) {
                ck_assert_msg(rc == 0, "cut %zu (%s): %s", cut, stream ? "memory" : "file",
                              err.msg);
            } else {
                snprintf(needle, sizeof needle, "record at byte %zu: truncated", start);
                ck_assert_msg(rc == DT_ECORRUPT && strstr(err.msg, needle), "cut %zu (%s): %d %s",
                              cut, stream ? "memory" : "file", rc, err.msg);
            }
        }
    }
    free(file);
}
END_TEST

/* A header whose crc is right but whose length is absurd: refused before
 * any allocation of that size. */
START_TEST(huge_length_is_corrupt) {
    uint8_t rec[16] = {0};
    uint64_t length = (uint64_t)1 << 40;
    for (int i = 0; i < 8; i++)
        rec[i] = (uint8_t)(length >> (8 * i));
    uint32_t crc = slow_mask(slow_crc32c(rec, 8));
    for (int i = 0; i < 4; i++)
        rec[8 + i] = (uint8_t)(crc >> (8 * i));
    char path[1100];
    snprintf(path, sizeof path, "%s/huge", tmp);
    spit(path, rec, sizeof rec);
    uint8_t *data = NULL;
    size_t len = 7;
    dt_err err = {0};
    FILE *f = fopen(path, "rb");
    ck_assert_int_eq(dt_test_tfrecord_read(f, &data, &len, &err), DT_ECORRUPT);
    ck_assert_msg(strstr(err.msg, "record at byte 0: truncated: length 1099511627776"), "%s",
                  err.msg);
    ck_assert_uint_eq(len, 0);
    fclose(f);
    dt_err_clear(&err);
    f = fmemopen(rec, sizeof rec, "rb");
    ck_assert_int_eq(dt_test_tfrecord_read(f, &data, &len, &err), DT_ECORRUPT);
    ck_assert_msg(strstr(err.msg, "exceeds"), "%s", err.msg);
    fclose(f);
    free(data);
}
END_TEST

/* ---- fault injection: the disk fills after byte N ---- */

/* Entries of dir besides . and .. (0 when dir is gone). */
static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* A chief killed right after start must leave a valid event file: the
 * file_version record is in the file before open returns. */
START_TEST(file_version_on_disk_at_open) {
    dt_summary_writer *w = NULL;
    dt_err err = {0};
    ck_assert_msg(dt_summary_open(tmp, &w, &err) == 0, "%s", err.msg);
    size_t size;
    uint8_t *file = slurp(dt_summary_path(w), &size); /* while still open, no flush */
    size_t ends[MAX_RECORDS];
    ck_assert_int_eq(check_framing(file, size, ends, MAX_RECORDS), 1);
    ck_assert_uint_eq(ends[0], size);
    free(file);
    dt_summary_close(w);
}
END_TEST

/* A real full file system (a tiny tmpfs): writes fail with ENOSPC, the file
 * keeps whole records only, and writing resumes once space is freed. Needs
 * root for the mount; skipped with a message otherwise. */
START_TEST(enospc_keeps_whole_records) {
    char mnt[1100], filler[1200];
    snprintf(mnt, sizeof mnt, "%s/tmpfs", tmp);
    ck_assert_int_eq(mkdir(mnt, 0755), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=64k") != 0) {
        fprintf(stderr, "summary: enospc_keeps_whole_records skipped: mount tmpfs: %s\n",
                strerror(errno));
        return;
    }
    /* Until the umount, no Check assertion: a failing one would leave the
     * mount behind. A filler takes half the space, to be freed later. */
    snprintf(filler, sizeof filler, "%s/filler", mnt);
    static char block[32 * 1024];
    int filled = dt_test_write_file(filler, "") == 0;
    FILE *ff = filled ? fopen(filler, "wb") : NULL;
    filled = ff && fwrite(block, 1, sizeof block, ff) == sizeof block;
    if (ff && fclose(ff) != 0) filled = 0;
    dt_summary_writer *w = NULL;
    dt_err err = {0};
    int rc = dt_summary_open(mnt, &w, &err);
    int ok = 0, failed = 0, resumed = 0, fails_enospc = 1;
    for (int e = 0; rc == 0 && e < 100000 && failed < 3; e++) {
        dt_err werr = {0};
        if (dt_summary_scalars(w, e, scalar_tags, scalar_values[e % 4], 3, &werr) == 0)
            ok++;
        else {
            failed++;
            fails_enospc &= strstr(werr.msg, "No space left on device") != NULL;
        }
    }
    if (rc == 0) {
        /* Space returns; the same writer goes on. */
        unlink(filler);
        dt_err werr = {0};
        resumed = dt_summary_scalars(w, 1, scalar_tags, scalar_values[0], 3, &werr) == 0;
    }
    size_t size = 0;
    uint8_t *file = rc == 0 ? (uint8_t *)dt_test_read_file(dt_summary_path(w), &size) : NULL;
    dt_summary_close(w);
    umount2(mnt, MNT_DETACH);

    ck_assert(filled);
    ck_assert_msg(rc == 0, "open: %s", err.msg);
    ck_assert_int_gt(ok, 10);
    ck_assert_int_eq(failed, 3);
    ck_assert_msg(fails_enospc, "a failure did not name ENOSPC");
    ck_assert(resumed);
    ck_assert_ptr_nonnull(file);
    size_t *ends = calloc(100002, sizeof *ends);
    ck_assert_ptr_nonnull(ends);
    /* Framing checks every byte: whole records only, the resumed one last. */
    ck_assert_int_eq(check_framing(file, size, ends, 100002), 1 + ok + 1);
    free(ends);
    free(file);
}
END_TEST

/* Writes 200 scalar events into dir with the file size limited to limit
 * bytes; then, with the limit lifted again, one more (*resumed_rc). No Check
 * calls in here: Check itself writes files, and the limit applies to them
 * too. Returns the first failing call's code (0 if none). */
static int write_limited(const char *dir, rlim_t limit, int *events_ok, int *later_rc,
                         int *resumed_rc, char *path, size_t path_cap, char *msg, size_t msg_cap) {
    struct rlimit saved, lowered;
    getrlimit(RLIMIT_FSIZE, &saved);
    lowered = saved;
    lowered.rlim_cur = limit;
    dt_err err = {0};
    dt_summary_writer *w = NULL;
    int rc;
    *events_ok = 0;
    *later_rc = 0;
    *resumed_rc = 1;
    path[0] = '\0';
    if (setrlimit(RLIMIT_FSIZE, &lowered) != 0) return 1;
    rc = dt_summary_open(dir, &w, &err);
    for (int e = 0; rc == 0 && e < 200; e++) {
        rc = dt_summary_scalars(w, e, scalar_tags, scalar_values[e % 4], 3, &err);
        if (rc == 0) ++*events_ok;
    }
    if (rc == 0) rc = dt_summary_flush(w, &err);
    if (rc != 0 && w) {
        dt_err later = {0};
        *later_rc = dt_summary_scalars(w, 1, scalar_tags, scalar_values[0], 3, &later);
    }
    setrlimit(RLIMIT_FSIZE, &saved);
    if (w) {
        dt_err resumed = {0};
        *resumed_rc = dt_summary_scalars(w, 7, scalar_tags, scalar_values[1], 3, &resumed);
        snprintf(path, path_cap, "%s", dt_summary_path(w));
    }
    dt_summary_close(w);
    snprintf(msg, msg_cap, "%s", err.msg);
    return rc;
}

START_TEST(disk_full_after_byte_n) {
    struct sigaction ignore = {.sa_handler = SIG_IGN}, old;
    ck_assert_int_eq(sigaction(SIGXFSZ, &ignore, &old), 0);
    char dir[1100], path[1200], msg[DT_ERR_MSG_MAX];
    int events_ok, later_rc, resumed_rc;
    snprintf(dir, sizeof dir, "%s/full", tmp);
    ck_assert_int_eq(write_limited(dir, RLIM_INFINITY, &events_ok, &later_rc, &resumed_rc, path,
                                   sizeof path, msg, sizeof msg),
                     0);
    size_t size;
    uint8_t *file = slurp(path, &size);
    size_t ends[MAX_RECORDS];
    int count = check_framing(file, size, ends, MAX_RECORDS);
    ck_assert_int_eq(count, 202);
    ck_assert_uint_gt(size, 8192);
    free(file);

    for (size_t limit = 0; limit < ends[count - 2]; limit += limit < 64 ? 1 : 97) {
        snprintf(dir, sizeof dir, "%s/limit-%zu", tmp, limit);
        int rc = write_limited(dir, (rlim_t)limit, &events_ok, &later_rc, &resumed_rc, path,
                               sizeof path, msg, sizeof msg);
        ck_assert_msg(rc == DT_EIO, "limit %zu: rc %d (%s)", limit, rc, msg);
        ck_assert_msg(strstr(msg, "summary: ") && strstr(msg, "events.out.tfevents.") &&
                          strstr(msg, ": write record at byte ") && strstr(msg, "File too large"),
                      "limit %zu: %s", limit, msg);
        if (!path[0]) {
            /* Not even file_version fit: open fails and leaves no file. */
            ck_assert_msg(limit < ends[0], "limit %zu: open failed: %s", limit, msg);
            ck_assert_msg(count_files(dir) == 0, "limit %zu: open left a file", limit);
            dt_test_rmtree(dir);
            continue;
        }
        /* Still full, unless the next record is shorter than the one cut. */
        ck_assert_msg(later_rc == 0 || later_rc == DT_EIO, "limit %zu: %d", limit, later_rc);
        ck_assert_msg(resumed_rc == 0, "limit %zu: no write once space is back", limit);
        /* What reached the disk: the whole records that fit, then the one
         * written after the limit was lifted; never a partial record. */
        FILE *f = fopen(path, "rb");
        ck_assert_msg(f != NULL, "limit %zu: %s", limit, path);
        dt_err err = {0};
        int read_rc;
        int good = read_until_error(f, &read_rc, &err);
        fclose(f);
        int whole = 0;
        while (whole < count && ends[whole] <= limit)
            whole++;
        ck_assert_int_eq(good, whole + (later_rc == 0) + 1);
        ck_assert_int_eq(events_ok, whole - 1);
        ck_assert_msg(read_rc == 0, "limit %zu: %s", limit, err.msg);
        dt_test_rmtree(dir);
    }
    sigaction(SIGXFSZ, &old, NULL);
}
END_TEST

/* ---- TensorBoard itself, when installed ---- */

START_TEST(tensorboard_reads_scalars) {
    if (system("/usr/bin/python3 -c 'import tensorboard' >/dev/null 2>&1") != 0) return;
    dt_summary_writer *w = write_scalars(tmp);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c '\n"
             "import sys\n"
             "from tensorboard.backend.event_processing.event_file_loader import "
             "EventFileLoader\n"
             "for e in EventFileLoader(sys.argv[1]).Load():\n"
             "    for v in e.summary.value:\n"
             "        x = v.tensor.float_val[0] if v.HasField(\"tensor\") else v.simple_value\n"
             "        print(e.step, v.tag, repr(float(x)))\n"
             "' '%s' 2>&1",
             dt_summary_path(w));
    dt_summary_close(w);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, p)) {
        long long step;
        char tag[128], value[64];
        ck_assert_msg(sscanf(line, "%lld %127s %63s", &step, tag, value) == 3, "%s", line);
        int e = n / 3, v = n % 3;
        ck_assert_int_lt(e, N_SCALAR_EVENTS);
        ck_assert_int_eq(step, scalar_steps[e]);
        ck_assert_str_eq(tag, scalar_tags[v]);
        double want = scalar_values[e][v], got = strtod(value, NULL);
        if (isnan(want))
            ck_assert(isnan(got));
        else if (want > 3.5e38)
            ck_assert(isinf(got));
        else
            ck_assert_double_eq((float)got, (float)want);
        n++;
    }
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_int_eq(n, 3 * N_SCALAR_EVENTS);
}
END_TEST

Suite *summary_suite(void) {
    Suite *s = suite_create("summary");
    TCase *tc = tcase_create("events");
    tcase_add_unchecked_fixture(tc, suite_setup, dt_test_tmp_end);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, crc_check_value);
    tcase_add_test(tc, scalars_round_trip);
    tcase_add_test(tc, file_name);
    tcase_add_test(tc, open_errors);
    tcase_add_test(tc, bad_tags);
    tcase_add_test(tc, histogram_round_trip);
    tcase_add_test(tc, histogram_bad_values);
    tcase_add_test(tc, histogram_counts_round_trip);
    tcase_add_test(tc, histogram_counts_bad_input);
    tcase_add_test(tc, histogram_floats_known_values);
    tcase_add_test(tc, histogram_at_every_limit);
    tcase_add_test(tc, wire_decoder_refuses_bad_bytes);
    tcase_add_test(tc, flipped_byte_is_corrupt);
    tcase_add_test(tc, truncated_is_corrupt);
    tcase_add_test(tc, huge_length_is_corrupt);
    tcase_add_test(tc, disk_full_after_byte_n);
    tcase_add_test(tc, file_version_on_disk_at_open);
    tcase_add_test(tc, enospc_keeps_whole_records);
    tcase_add_test(tc, tensorboard_reads_scalars);
    suite_add_tcase(s, tc);
    return s;
}
