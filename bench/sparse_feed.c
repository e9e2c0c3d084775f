/*
 * bench_sparse_feed: what a sparse worker's shuffled batches cost it.
 *
 * It reads --data (the Criteo layout, as a sparse job reads its training
 * file, hashed into 2^--hash-bits ids) into one set, then takes --epochs
 * passes of batches of --batch rows three ways, each timed in CPU seconds
 * of this process (other load on the machine changes them less than wall
 * time, though it still evicts the caches):
 *   slice     a view of the next rows in file order (dt_sparse_set_slice),
 *             what a worker took before batches were shuffled;
 *   gather    the next rows in file order copied out (dt_sparse_gather):
 *             the copy alone;
 *   shuffled  dt_sparse_feed_next, a worker's batches now: the rows of
 *             each epoch's shuffled order copied out, each from anywhere
 *             in the set.
 * and the drawing of one epoch's order (dt_sparse_feed_init).
 *
 * Output (stdout), one line:
 *   sparse_feed rows=N batch=B batches=K slice_us=S gather_us=G
 *     shuffled_us=F order_ms=O set_mb=M
 * (microseconds of CPU a batch; M the set's arrays in MB).
 * Exit status: 0, 1 on a failure (message on stderr), 2 on usage errors.
 *
 * Single-threaded.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "err.h"
#include "sparse.h"
#include "sparse_reader.h"

static const char usage[] =
    "usage: bench_sparse_feed --data FILE [--hash-bits 1..40] [--batch N] [--epochs N]\n"
    "  CPU time a batch of a Criteo-layout file's rows: in file order (a view, a\n"
    "  copy) and shuffled as a sparse worker takes them.\n";

/* Where the loops' reads end up, so none is optimised away. */
static volatile double sink;

/* CPU seconds of this process (for differences only). */
static double cpu_secs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The set's arrays in bytes. */
static double set_bytes(const dt_sparse_set *s) {
    const double nnz = (double)s->offsets[s->rows];
    return (double)s->rows * (4.0 * s->dense_cols + (s->y ? 4.0 : 0.0) + 8.0) +
           nnz * (8.0 + (s->values ? 4.0 : 0.0) + (s->fields ? 4.0 : 0.0));
}

int main(int argc, char **argv) {
    const char *data = NULL;
    int64_t hash_bits = 28, batch = 256, epochs = 3;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = value != NULL;
        if (ok && strcmp(flag, "--data") == 0)
            data = value;
        else if (ok && strcmp(flag, "--hash-bits") == 0)
            ok = dt_bench_parse_int(value, 1, 40, &hash_bits) == 0;
        else if (ok && strcmp(flag, "--batch") == 0)
            ok = dt_bench_parse_int(value, 1, 1 << 20, &batch) == 0;
        else if (ok && strcmp(flag, "--epochs") == 0)
            ok = dt_bench_parse_int(value, 1, 1000, &epochs) == 0;
        else
            ok = 0;
        if (!ok) {
            fprintf(stderr, "bench_sparse_feed: bad flag or value: %s\n%s", flag, usage);
            return 2;
        }
        i++;
    }
    if (!data) {
        fputs(usage, stderr);
        return 2;
    }
    dt_sparse_read_params p;
    memset(&p, 0, sizeof p);
    p.hash_bits = (int)hash_bits;
    dt_sparse_set s;
    dt_sparse_feed feed;
    dt_sparse_buffer buf = {0};
    int64_t *rows = malloc((size_t)batch * sizeof *rows);
    dt_err err;
    dt_err_clear(&err);
    memset(&feed, 0, sizeof feed);
    if (!rows || dt_sparse_read_criteo(data, &p, &s, &err) < 0) {
        fprintf(stderr, "bench_sparse_feed: %s\n", rows ? err.msg : "out of memory");
        free(rows);
        return 1;
    }
    const int B = s.rows < batch ? (int)s.rows : (int)batch;
    const int64_t per_epoch = (s.rows + B - 1) / B, batches = per_epoch * epochs;
    double sum = 0; /* a label of every batch, for sink */
    dt_sparse_batch b;
    int rc = 0;

    const double t0 = cpu_secs();
    for (int64_t k = 0, first = 0; k < batches; k++) {
        const int count = s.rows - first < B ? (int)(s.rows - first) : B;
        dt_sparse_set_slice(&s, first, count, &b);
        sum += b.y[0];
        first = (first + count) % s.rows;
    }
    const double t1 = cpu_secs();
    for (int64_t k = 0, first = 0; k < batches && rc == 0; k++) {
        const int count = s.rows - first < B ? (int)(s.rows - first) : B;
        for (int i = 0; i < count; i++)
            rows[i] = first + i;
        rc = dt_sparse_gather(&s, rows, count, &buf, &b, &err);
        if (rc == 0) sum += b.y[0];
        first = (first + count) % s.rows;
    }
    const double t2 = cpu_secs();
    if (rc == 0) rc = dt_sparse_feed_init(&feed, &s, 1, 0, &err);
    const double t3 = cpu_secs();
    for (int64_t k = 0; k < batches && rc == 0; k++) {
        rc = dt_sparse_feed_next(&feed, B, &b, &err);
        if (rc == 0) sum += b.y[0];
    }
    const double t4 = cpu_secs();
    if (rc < 0) {
        fprintf(stderr, "bench_sparse_feed: %s\n", err.msg);
    } else {
        printf("sparse_feed rows=%" PRId64 " batch=%d batches=%" PRId64
               " slice_us=%.3f gather_us=%.1f shuffled_us=%.1f order_ms=%.1f set_mb=%.1f\n",
               s.rows, B, batches, (t1 - t0) / (double)batches * 1e6,
               (t2 - t1) / (double)batches * 1e6, (t4 - t3) / (double)batches * 1e6,
               (t3 - t2) * 1e3, set_bytes(&s) / 1e6);
        sink = sum;
    }
    dt_sparse_feed_deinit(&feed);
    dt_sparse_buffer_deinit(&buf);
    dt_sparse_set_deinit(&s);
    free(rows);
    return rc < 0 ? 1 : 0;
}
