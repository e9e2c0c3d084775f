/*
 * table suite: sparse tables of rows. Config checks; the placement rule
 * (pinned, balanced); deterministic init; id batches checked as the ps
 * will check them; lazy updates against a dense per-coordinate reference;
 * growth to many rows; concurrent pushes and an eviction sweep beside them
 * (exact counts); eviction rules; checkpoints through real safetensors
 * files, re-shard from 3 ps tasks onto 2, and every bad file refused with
 * the table unchanged.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hash.h"
#include "pieces.h"
#include "proc.h"
#include "safetensors.h"
#include "suites.h"
#include "table.h"

static dt_table_config config(const char *name, int64_t rows, int dim) {
    dt_table_config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.name, sizeof cfg.name, "%s", name);
    cfg.rows = rows;
    cfg.dim = dim;
    cfg.seed = 7;
    return cfg;
}

static dt_optim_config optim(dt_optim_kind kind) {
    dt_optim_config o;
    dt_optim_defaults(&o);
    o.kind = kind;
    return o;
}

static dt_table *new_table(const dt_table_config *cfg) {
    dt_table *t = NULL;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_table_new(cfg, &t, &err) == 0, "%s", err.msg);
    return t;
}

static int64_t rows_held(dt_table *t) {
    dt_table_stats st;
    dt_table_stats_of(t, &st);
    return st.rows_held;
}

/* Plans ids into b, which must succeed. */
static void plan(dt_table *t, const int64_t *ids, int64_t n, dt_table_batch *b) {
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_table_plan(t, ids, n, b, &err) == 0, "%s", err.msg);
}

static void apply(dt_table *t, const dt_optim_config *o, double lr, const int64_t *ids, int64_t n,
                  const float *g, int64_t step) {
    dt_table_batch b = {0};
    dt_err err;
    dt_err_clear(&err);
    plan(t, ids, n, &b);
    ck_assert_msg(dt_table_apply(t, &b, o, lr, g, step, &err) == 0, "%s", err.msg);
    dt_table_batch_deinit(&b);
}

static void read_rows(dt_table *t, const int64_t *ids, int64_t n, float *values,
                      float *const *slots) {
    dt_table_batch b = {0};
    plan(t, ids, n, &b);
    dt_table_read(t, &b, values, slots);
    dt_table_batch_deinit(&b);
}

START_TEST(test_config_errors) {
    static const struct {
        const char *what;
        const char *want;
    } cases[] = {
        {"name", "table: empty name"}, {"rows0", "rows must be 1 to 2^40 (got 0)"},
        {"rows", "rows must be 1"},    {"dim", "dim must be 1 to 65536 (got 0)"},
        {"scale", "init_scale"},       {"stripes", "stripes must be a power of two"},
        {"slots", "3 slots (0 to 2)"}, {"slotname", "slot 0 has no usable name"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        dt_table_config cfg = config("w", 100, 4);
        const char *w = cases[k].what;
        if (!strcmp(w, "name")) cfg.name[0] = '\0';
        if (!strcmp(w, "rows0")) cfg.rows = 0;
        if (!strcmp(w, "rows")) cfg.rows = DT_TABLE_MAX_ROWS + 1;
        if (!strcmp(w, "dim")) cfg.dim = 0;
        if (!strcmp(w, "scale")) cfg.init = DT_TABLE_INIT_NORMAL, cfg.init_scale = NAN;
        if (!strcmp(w, "stripes")) cfg.stripes = 48;
        if (!strcmp(w, "slots")) cfg.num_slots = 3;
        if (!strcmp(w, "slotname")) cfg.num_slots = 1;
        dt_table *t = (dt_table *)1;
        dt_err err;
        dt_err_clear(&err);
        ck_assert_int_eq(dt_table_new(&cfg, &t, &err), DT_EINVAL);
        ck_assert_ptr_null(t);
        ck_assert_msg(strstr(err.msg, cases[k].want) != NULL, "%s: %s", w, err.msg);
    }
    /* A name with a control byte follows the tensor-name rule. */
    dt_table_config cfg = config("a\tb", 100, 4);
    dt_table *t = NULL;
    ck_assert_int_eq(dt_table_new(&cfg, &t, NULL), DT_EINVAL);
    /* The largest table is fine: nothing is allocated for its rows. */
    cfg = config("big", DT_TABLE_MAX_ROWS, 1);
    t = new_table(&cfg);
    dt_table_stats st;
    dt_table_stats_of(t, &st);
    ck_assert_int_eq(st.rows_held, 0);
    ck_assert_int_lt(st.bytes, 128 * 1024); /* 64 stripes of bookkeeping */
    dt_table_free(t);
    dt_table_free(NULL);
}
END_TEST

START_TEST(test_placement) {
    /* Pinned: a change moves every row of every saved table. */
    for (int64_t id = 0; id < 1000; id += 37)
        ck_assert_int_eq(dt_table_shard_of(id, 5),
                         (int)(dt_hash_mix64((uint64_t)id + 0x9e3779b97f4a7c15ULL) % 5));
    ck_assert_int_eq(dt_table_shard_of(0, 1), 0);
    ck_assert_int_eq(dt_table_shard_of(0, 2), (int)(0xe220a8397b1dcdafULL % 2));
    /* Balanced for raw ids packed at the low end, and for strided ones
     * (every third id), where "id mod P" would put all on one task. */
    enum { N = 90000, P = 3 };
    int count[P] = {0}, strided[P] = {0};
    for (int64_t id = 0; id < N; id++) {
        count[dt_table_shard_of(id, P)]++;
        strided[dt_table_shard_of(id * P, P)]++;
    }
    for (int p = 0; p < P; p++) {
        ck_assert_msg(abs(count[p] - N / P) < N / P / 50, "shard %d: %d", p, count[p]);
        ck_assert_msg(abs(strided[p] - N / P) < N / P / 50, "strided %d: %d", p, strided[p]);
    }
    /* The largest id is placed like any other. */
    int s = dt_table_shard_of(DT_TABLE_MAX_ROWS - 1, 7);
    ck_assert(s >= 0 && s < 7);
}
END_TEST

START_TEST(test_init_rule) {
    enum { D = 8 };
    dt_table_config cfg = config("emb", 1000000, D);
    float a[D], b[D];
    /* zeros */
    dt_table_init_row(&cfg, 5, a);
    for (int j = 0; j < D; j++)
        ck_assert(a[j] == 0.0f);
    /* normal: the same (seed, name, id) gives the same row anywhere. */
    cfg.init = DT_TABLE_INIT_NORMAL;
    cfg.init_scale = 0.5;
    dt_table_init_row(&cfg, 123456, a);
    dt_table_init_row(&cfg, 123456, b);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    dt_table_init_row(&cfg, 123457, b);
    ck_assert(memcmp(a, b, sizeof a) != 0);
    dt_table_config other = cfg;
    snprintf(other.name, sizeof other.name, "emb2");
    dt_table_init_row(&other, 123456, b);
    ck_assert(memcmp(a, b, sizeof a) != 0);
    other = cfg;
    other.seed = 8;
    dt_table_init_row(&other, 123456, b);
    ck_assert(memcmp(a, b, sizeof a) != 0);
    /* Its moments, over many rows. */
    double sum = 0, sq = 0;
    const int rows = 20000;
    for (int64_t id = 0; id < rows; id++) {
        dt_table_init_row(&cfg, id * 7919, a);
        for (int j = 0; j < D; j++)
            sum += a[j], sq += (double)a[j] * a[j];
    }
    double mean = sum / (rows * D), sd = sqrt(sq / (rows * D) - mean * mean);
    ck_assert_msg(fabs(mean) < 0.01 && fabs(sd - 0.5) < 0.01, "mean %g sd %g", mean, sd);
    /* uniform in [-a, a), spread over it */
    cfg.init = DT_TABLE_INIT_UNIFORM;
    cfg.init_scale = 0.1;
    float lo = 1, hi = -1;
    for (int64_t id = 0; id < rows; id++) {
        dt_table_init_row(&cfg, id, a);
        for (int j = 0; j < D; j++) {
            ck_assert(a[j] >= -0.1f && a[j] < 0.1f);
            lo = a[j] < lo ? a[j] : lo;
            hi = a[j] > hi ? a[j] : hi;
        }
    }
    ck_assert(lo < -0.099f && hi > 0.099f);
    /* A table reads absent rows as the rule says, and stores none. */
    dt_table *t = new_table(&cfg);
    int64_t ids[3] = {0, 999, 999999};
    float got[3 * D];
    read_rows(t, ids, 3, got, NULL);
    for (int k = 0; k < 3; k++) {
        dt_table_init_row(&cfg, ids[k], a);
        ck_assert(memcmp(got + k * D, a, sizeof a) == 0);
    }
    ck_assert_int_eq(rows_held(t), 0);
    dt_table_free(t);
}
END_TEST

START_TEST(test_plan_errors) {
    dt_table_config cfg = config("w", 1000, 2);
    dt_table *t = new_table(&cfg);
    dt_table_batch b = {0};
    static const struct {
        int64_t ids[4];
        int n;
        const char *want;
    } cases[] = {
        {{1, 3, 2}, 3, "table w: ids[2] = 2 after 3: ids must increase (sorted, no duplicates)"},
        {{1, 3, 3}, 3, "ids[2] = 3 after 3"},
        {{-1, 3}, 2, "table w: ids[0] = -1 is out of range [0, 1000)"},
        {{5, 1000}, 2, "ids[1] = 1000 is out of range [0, 1000)"},
        {{0}, -1, "-1 rows of 2 floats"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        dt_err err;
        dt_err_clear(&err);
        ck_assert_int_eq(dt_table_plan(t, cases[k].ids, cases[k].n, &b, &err), DT_EINVAL);
        ck_assert_msg(strstr(err.msg, cases[k].want) != NULL, "case %zu: %s", k, err.msg);
        ck_assert_int_eq(b.n, 0);
    }
    /* Too many rows for one batch: refused before anything is allocated. */
    ck_assert_int_eq(dt_table_plan(t, cases[0].ids, (int64_t)1 << 40, &b, NULL), DT_EINVAL);
    /* An empty batch is fine, and applies nothing. */
    plan(t, NULL, 0, &b);
    dt_optim_config o = optim(DT_OPTIM_SGD);
    ck_assert_int_eq(dt_table_apply(t, &b, &o, 0.1, NULL, 1, NULL), 0);
    ck_assert_int_eq(rows_held(t), 0);
    /* An optimizer with other slots than the table's. */
    int64_t one = 4;
    float g[2] = {1, 1};
    plan(t, &one, 1, &b);
    dt_optim_config adam = optim(DT_OPTIM_ADAM);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_table_apply(t, &b, &adam, 0.1, g, 1, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "optimizer adam has 2 slots, the table 0"));
    ck_assert_int_eq(dt_table_apply(t, &b, &o, 0.1, g, -1, NULL), DT_EINVAL);
    ck_assert_int_eq(rows_held(t), 0);
    dt_table_batch_deinit(&b);
    dt_table_free(t);
}
END_TEST

/* A table of R rows of D at a normal init (0.1) over 8 stripes, with o's
 * slots: the tables the update tests push to. */
static dt_table *normal_table(const char *name, int64_t R, int D, const dt_optim_config *o) {
    dt_table_config cfg = config(name, R, D);
    cfg.init = DT_TABLE_INIT_NORMAL;
    cfg.init_scale = 0.1;
    cfg.stripes = 8;
    dt_table_config_slots(&cfg, o);
    return new_table(&cfg);
}

/* Pushes of several optimizers against a dense reference of the same
 * rule: a dense array per row, updated with dt_optim_apply per touched row
 * (the rule's reference is check_optim's), and untouched rows never. */
static void lazy_against_dense(dt_optim_kind kind) {
    enum { R = 5000, D = 3, PUSHES = 40 };
    const char *name = dt_optim_name(kind);
    dt_optim_config o = optim(kind);
    o.ftrl_l1 = 0.01;
    dt_table *t = normal_table("t", R, D, &o);
    const dt_table_config cfg = *dt_table_config_of(t);
    const int S = cfg.num_slots;
    float *ref = malloc((size_t)R * (1 + S) * D * sizeof *ref);
    int *held = calloc(R, sizeof *held);
    for (int64_t id = 0; id < R; id++) {
        float *rec = ref + (size_t)id * (1 + S) * D;
        dt_table_init_row(&cfg, id, rec);
        for (int s = 0; s < S; s++)
            for (int j = 0; j < D; j++)
                rec[(s + 1) * D + j] = cfg.slot_init[s];
    }
    int64_t ids[R];
    float g[R * D];
    uint64_t rng = 42;
    for (int p = 1; p <= PUSHES; p++) {
        int64_t n = 0;
        for (int64_t id = 0; id < R; id++) {
            rng = dt_hash_mix64(rng + 1);
            if (rng % 50 == 0 || (p % 7 == 0 && id < 20)) ids[n++] = id;
        }
        for (int64_t k = 0; k < n * D; k++)
            g[k] =
                (float)((double)(dt_hash_mix64((uint64_t)(p * 100003 + k)) >> 11) * 0x1.0p-53 * 2 -
                        1);
        apply(t, &o, 0.05, ids, n, g, p);
        for (int64_t k = 0; k < n; k++) {
            float *rec = ref + (size_t)ids[k] * (1 + S) * D;
            float *slots[2] = {rec + D, rec + 2 * D};
            dt_optim_apply(&o, 0.05, p, rec, slots, g + k * D, D);
            held[ids[k]] = 1;
        }
    }
    /* Every row, held or not, reads as the reference has it, bit for bit. */
    int64_t all[R];
    for (int64_t id = 0; id < R; id++)
        all[id] = id;
    float *values = malloc((size_t)R * D * sizeof *values);
    float *s0 = malloc((size_t)R * D * sizeof *s0), *s1 = malloc((size_t)R * D * sizeof *s1);
    float *slots[2] = {s0, s1};
    read_rows(t, all, R, values, slots);
    int64_t want_held = 0;
    for (int64_t id = 0; id < R; id++) {
        const float *rec = ref + (size_t)id * (1 + S) * D;
        want_held += held[id];
        ck_assert_msg(memcmp(values + id * D, rec, D * sizeof(float)) == 0, "%s: row %lld", name,
                      (long long)id);
        for (int s = 0; s < S; s++)
            ck_assert_msg(memcmp(slots[s] + id * D, rec + (s + 1) * D, D * sizeof(float)) == 0,
                          "%s: row %lld slot %d", name, (long long)id, s);
    }
    dt_table_stats st;
    dt_table_stats_of(t, &st);
    ck_assert_int_eq(st.rows_held, want_held);
    ck_assert_int_eq(st.updates, PUSHES);
    ck_assert_int_gt(st.bytes, want_held * (int64_t)(1 + S) * D * 4);
    free(values), free(s0), free(s1), free(ref), free(held);
    dt_table_free(t);
}

START_TEST(test_lazy_updates) {
    lazy_against_dense(DT_OPTIM_SGD);
    lazy_against_dense(DT_OPTIM_MOMENTUM);
    lazy_against_dense(DT_OPTIM_ADAGRAD);
    lazy_against_dense(DT_OPTIM_ADAM);
    lazy_against_dense(DT_OPTIM_FTRL);
}
END_TEST

static int cmp_i64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* An export a page at a time, at page sizes from 1 row to more than all:
 * the pages together are every held id once, increasing, whatever order
 * the ids were made in (ids scattered over 2^40, pages picked out of them
 * by selection, not by sorting all of them each time), with each row's
 * values; a shard's pages hold only its ids. */
START_TEST(test_export_pages) {
    enum { N = 5003, D = 2 };
    dt_table_config cfg = config("paged", DT_TABLE_MAX_ROWS, D);
    cfg.stripes = 4;
    dt_table *t = new_table(&cfg);
    int64_t *ids = malloc(N * sizeof *ids);
    uint64_t x = 88172645463325252ull;
    for (int64_t i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[i] = (int64_t)(x % (uint64_t)DT_TABLE_MAX_ROWS);
    }
    /* Distinct, sorted for the plan, then the held set is checked against it. */
    qsort(ids, N, sizeof *ids, cmp_i64);
    int64_t n = 0;
    for (int64_t i = 0; i < N; i++)
        if (n == 0 || ids[i] != ids[n - 1]) ids[n++] = ids[i];
    float *v = malloc((size_t)n * D * sizeof *v);
    for (int64_t i = 0; i < n * D; i++)
        v[i] = (float)(ids[i / D] % 1000) + (float)(i % D) / 4;
    dt_table_batch b = {0};
    plan(t, ids, n, &b);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_table_write(t, &b, v, NULL, 1, &err) == 0, "%s", err.msg);
    const int64_t pages[] = {1, 3, 16, 17, 18, 333, 4096, n - 1, n, n + 5};
    for (size_t p = 0; p < sizeof pages / sizeof *pages; p++) {
        for (int shards = 1; shards <= 3; shards += 2) {
            int64_t seen = 0; /* over the shards */
            for (int shard = 0; shard < shards; shard++) {
                int64_t after = -1, calls = 0;
                int more = 1;
                while (more) {
                    dt_tensors page;
                    dt_err_clear(&err);
                    ck_assert_msg(dt_table_export_page(t, shard, shards, after, pages[p], &page,
                                                       &more, &err) == 0,
                                  "%s", err.msg);
                    calls++;
                    const int64_t k = page.count ? page.items[0].shape[0] : 0;
                    ck_assert_int_le(k, pages[p]);
                    const int64_t *got = k ? page.items[0].data : NULL;
                    const float *vals = k ? page.items[1].data : NULL;
                    for (int64_t r = 0; r < k; r++) {
                        ck_assert_int_gt(got[r], after);
                        after = got[r];
                        if (shards > 1) ck_assert_int_eq(dt_table_shard_of(got[r], shards), shard);
                        const int64_t *at = bsearch(&got[r], ids, (size_t)n, sizeof *ids, cmp_i64);
                        ck_assert_ptr_nonnull(at);
                        ck_assert(memcmp(vals + r * D, v + (at - ids) * D, D * sizeof *vals) == 0);
                        seen++;
                    }
                    dt_tensors_deinit(&page);
                    ck_assert_int_le(calls, n + 2);
                }
            }
            ck_assert_int_eq(seen, n);
        }
    }
    dt_table_batch_deinit(&b);
    free(ids), free(v);
    dt_table_free(t);
}
END_TEST

START_TEST(test_growth) {
    /* 300k rows written in batches, on 4 stripes, then read back. Ids are
     * spread over 2^40 so the index sees every kind of key. */
    enum { N = 300000, D = 2, BATCH = 30000 };
    dt_table_config cfg = config("big", DT_TABLE_MAX_ROWS, D);
    cfg.stripes = 4;
    dt_table *t = new_table(&cfg);
    int64_t *ids = malloc(N * sizeof *ids);
    for (int64_t i = 0; i < N; i++)
        ids[i] = i * 3664679 + (i % 3); /* increasing, < 2^40 */
    float *v = malloc((size_t)N * D * sizeof *v);
    for (int64_t i = 0; i < N * D; i++)
        v[i] = (float)i;
    dt_table_batch b = {0};
    dt_err err;
    int64_t bytes_before = 0;
    for (int64_t first = 0; first < N; first += BATCH) {
        plan(t, ids + first, BATCH, &b);
        dt_err_clear(&err);
        ck_assert_msg(dt_table_write(t, &b, v + first * D, NULL, 1, &err) == 0, "%s", err.msg);
        dt_table_stats st;
        dt_table_stats_of(t, &st);
        ck_assert_int_eq(st.rows_held, first + BATCH);
        ck_assert_int_ge(st.bytes, bytes_before);
        bytes_before = st.bytes;
    }
    /* Memory follows the rows: records, touch data and index, within about
     * twice what the rows need (chunks double, the index is at most 3/4 full). */
    const int64_t per_row = D * 4 + 12 + 16;
    ck_assert_msg(bytes_before < 3 * N * per_row, "%lld bytes for %d rows", (long long)bytes_before,
                  N);
    float *got = malloc((size_t)N * D * sizeof *got);
    plan(t, ids, N, &b);
    dt_table_read(t, &b, got, NULL);
    ck_assert(memcmp(got, v, (size_t)N * D * sizeof *got) == 0);
    ck_assert_int_eq(rows_held(t), N);
    dt_table_batch_deinit(&b);
    free(ids), free(v), free(got);
    dt_table_free(t);
}
END_TEST

/* ---- threads ---- */

enum { TR = 4000, THREADS = 4, TPUSHES = 150 };

typedef struct {
    dt_table *t;
    int index;
    int counts[TR]; /* how often this thread pushed each row */
} pusher;

static void *push_loop(void *arg) {
    pusher *p = arg;
    dt_optim_config o = optim(DT_OPTIM_SGD);
    dt_table_batch b = {0};
    int64_t ids[TR];
    float g[TR];
    uint64_t rng = (uint64_t)p->index * 1000003 + 1;
    for (int k = 0; k < TPUSHES; k++) {
        int64_t n = 0;
        for (int64_t id = 0; id < TR; id++) {
            rng = dt_hash_mix64(rng);
            if (rng % 4 == 0) {
                ids[n] = id;
                g[n++] = 1.0f;
                p->counts[id]++;
            }
        }
        /* lr 1, g 1: each push subtracts exactly 1, in any order. */
        if (dt_table_plan(p->t, ids, n, &b, NULL) < 0 ||
            dt_table_apply(p->t, &b, &o, 1.0, g, 1000, NULL) < 0)
            p->counts[0] = -1000000;
    }
    dt_table_batch_deinit(&b);
    return NULL;
}

typedef struct {
    dt_table *t;
    int64_t evicted;
    int failed;
} sweeper;

static void *sweep_loop(void *arg) {
    sweeper *s = arg;
    dt_table_evict_policy policy = {.idle_steps = 500};
    for (int k = 0; k < 20; k++) {
        int64_t n = 0;
        if (dt_table_evict(s->t, 1000, &policy, &n, NULL) < 0) s->failed = 1;
        s->evicted += n;
    }
    return NULL;
}

START_TEST(test_concurrent_pushes) {
    /* Ids [0, TR) are pushed by 4 threads while another sweeps ids
     * [TR, 2 TR), written at step 0, out of the table. Every push row ends
     * exactly at -(its pushes), every stale row is gone. */
    dt_table_config cfg = config("c", 2 * TR, 1);
    cfg.stripes = 16;
    dt_table *t = new_table(&cfg);
    int64_t stale[TR];
    float zero[TR] = {0};
    for (int i = 0; i < TR; i++)
        stale[i] = TR + i;
    dt_table_batch b = {0};
    plan(t, stale, TR, &b);
    ck_assert_int_eq(dt_table_write(t, &b, zero, NULL, 0, NULL), 0);
    dt_table_batch_deinit(&b);
    ck_assert_int_eq(rows_held(t), TR);

    static pusher pushers[THREADS];
    pthread_t th[THREADS + 1];
    sweeper sw = {.t = t};
    for (int i = 0; i < THREADS; i++) {
        memset(&pushers[i], 0, sizeof pushers[i]);
        pushers[i].t = t;
        pushers[i].index = i;
        ck_assert_int_eq(pthread_create(&th[i], NULL, push_loop, &pushers[i]), 0);
    }
    ck_assert_int_eq(pthread_create(&th[THREADS], NULL, sweep_loop, &sw), 0);
    for (int i = 0; i <= THREADS; i++)
        pthread_join(th[i], NULL);
    ck_assert(!sw.failed);
    ck_assert_int_eq(sw.evicted, TR);

    int64_t ids[TR];
    float got[TR];
    for (int i = 0; i < TR; i++)
        ids[i] = i;
    read_rows(t, ids, TR, got, NULL);
    int64_t pushed_rows = 0;
    for (int id = 0; id < TR; id++) {
        int total = 0;
        for (int i = 0; i < THREADS; i++)
            total += pushers[i].counts[id];
        ck_assert_msg(got[id] == (float)-total, "row %d: %g after %d pushes", id, got[id], total);
        pushed_rows += total > 0;
    }
    dt_table_stats st;
    dt_table_stats_of(t, &st);
    ck_assert_int_eq(st.rows_held, pushed_rows);
    ck_assert_int_eq(st.updates, THREADS * TPUSHES);
    dt_table_free(t);
}
END_TEST

START_TEST(test_evict_rules) {
    dt_table_config cfg = config("e", 100, 2);
    cfg.init = DT_TABLE_INIT_UNIFORM;
    cfg.init_scale = 1;
    dt_optim_config o = optim(DT_OPTIM_SGD);
    dt_table *t = new_table(&cfg);
    /* Row 1: pushed 5 times up to step 10. Row 2: once at step 10. Row 3:
     * once at step 90. Row 4: 5 times up to step 90. */
    float g[2] = {1, 1};
    for (int64_t s = 6; s <= 10; s++) {
        int64_t id = 1;
        apply(t, &o, 1, &id, 1, g, s);
    }
    int64_t two = 2, three = 3, four = 4;
    apply(t, &o, 1, &two, 1, g, 10);
    apply(t, &o, 1, &three, 1, g, 90);
    for (int64_t s = 86; s <= 90; s++)
        apply(t, &o, 1, &four, 1, g, s);
    ck_assert_int_eq(rows_held(t), 4);

    dt_table_evict_policy off = {0}, bad = {.min_touches = 2};
    int64_t n = -1;
    ck_assert_int_eq(dt_table_evict(t, 100, &off, &n, NULL), 0);
    ck_assert_int_eq(n, 0);
    dt_err err;
    dt_err_clear(&err);
    ck_assert_int_eq(dt_table_evict(t, 100, &bad, &n, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "min_touches needs touch_window_steps"));

    /* Rare rows go once quiet for 20 steps: row 2 (1 touch, quiet 90),
     * not row 3 (quiet 10) nor row 1 (5 touches). */
    dt_table_evict_policy rare = {.min_touches = 2, .touch_window_steps = 20};
    ck_assert_int_eq(dt_table_evict(t, 100, &rare, &n, NULL), 0);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(rows_held(t), 3);
    /* Idle rows go after 50 steps: row 1 (last touched at 10). */
    dt_table_evict_policy idle = {.idle_steps = 50};
    ck_assert_int_eq(dt_table_evict(t, 100, &idle, &n, NULL), 0);
    ck_assert_int_eq(n, 1);
    /* What is left is rows 3 and 4, with their learned values; the evicted
     * rows read as their initial values again. */
    int64_t ids[4] = {1, 2, 3, 4};
    float got[8], init[2];
    read_rows(t, ids, 4, got, NULL);
    for (int k = 0; k < 4; k++) {
        dt_table_init_row(&cfg, ids[k], init);
        float moved = k < 2 ? 0.0f : (k == 2 ? 1.0f : 5.0f);
        ck_assert_float_eq(got[2 * k], init[0] - moved);
        ck_assert_float_eq(got[2 * k + 1], init[1] - moved);
    }
    ck_assert_int_eq(rows_held(t), 2);
    /* Compaction gave memory back: what is left is an empty table's
     * bookkeeping and at most a chunk of 16 rows for each of the 2 rows. */
    dt_table_stats st, empty;
    dt_table_stats_of(t, &st);
    dt_table *none = new_table(&cfg);
    dt_table_stats_of(none, &empty);
    dt_table_free(none);
    ck_assert_int_le(st.bytes, empty.bytes + 2 * 16 * (2 * 4 + 12));
    dt_table_free(t);
}
END_TEST

/* ---- checkpoints ---- */

/* A table of R rows with adam slots, some rows pushed. */
static dt_table *trained(const char *name, int stripes, int64_t *held) {
    enum { R = 3000, D = 4 };
    dt_optim_config o = optim(DT_OPTIM_ADAM);
    dt_table_config cfg = config(name, R, D);
    cfg.init = DT_TABLE_INIT_NORMAL;
    cfg.init_scale = 0.05;
    cfg.stripes = stripes;
    dt_table_config_slots(&cfg, &o);
    dt_table *t = new_table(&cfg);
    int64_t ids[R];
    float g[R * D];
    for (int p = 1; p <= 5; p++) {
        int64_t n = 0;
        for (int64_t id = p; id < R; id += 3 + p)
            ids[n++] = id;
        for (int64_t k = 0; k < n * D; k++)
            g[k] = (float)sin((double)(k + p));
        apply(t, &o, 0.01, ids, n, g, p);
    }
    *held = rows_held(t);
    return t;
}

/* Every row of a and b reads alike, weights and slots. */
static void same_rows(dt_table *a, dt_table *b) {
    enum { R = 3000, D = 4 };
    int64_t ids[R];
    for (int64_t i = 0; i < R; i++)
        ids[i] = i;
    static float va[R * D], vb[R * D], ma[R * D], mb[R * D], sa[R * D], sb[R * D];
    float *slots_a[2] = {ma, sa}, *slots_b[2] = {mb, sb};
    read_rows(a, ids, R, va, slots_a);
    read_rows(b, ids, R, vb, slots_b);
    ck_assert(memcmp(va, vb, sizeof va) == 0);
    ck_assert(memcmp(ma, mb, sizeof ma) == 0);
    ck_assert(memcmp(sa, sb, sizeof sa) == 0);
}

START_TEST(test_checkpoint_round_trip) {
    int64_t held = 0;
    dt_table *t = trained("emb/table", 8, &held);
    ck_assert_int_gt(held, 1000);
    dt_tensors ts;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_table_export(t, 0, 1, &ts, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(ts.count, 4);
    ck_assert_str_eq(ts.items[0].name, "emb/table/ids");
    ck_assert_str_eq(ts.items[1].name, "emb/table/values");
    ck_assert_str_eq(ts.items[2].name, "emb/table/m");
    ck_assert_str_eq(ts.items[3].name, "emb/table/v");
    ck_assert_int_eq(ts.items[0].shape[0], held);
    ck_assert_int_eq(ts.items[1].shape[1], 4);
    const int64_t *ids = ts.items[0].data;
    for (int64_t k = 1; k < held; k++)
        ck_assert(ids[k] > ids[k - 1]);

    /* Through a real safetensors file, as a checkpoint carries it. */
    char *dir = dt_test_tempdir(), path[512];
    ck_assert_ptr_nonnull(dir);
    snprintf(path, sizeof path, "%s/t.safetensors", dir);
    dt_safetensors_meta meta = {.global_step = 5};
    snprintf(meta.model, sizeof meta.model, "test");
    ck_assert_msg(dt_safetensors_save(path, &ts, &meta, &err) == 0, "%s", err.msg);
    dt_tensors loaded;
    ck_assert_msg(dt_safetensors_load(path, &loaded, NULL, &err) == 0, "%s", err.msg);

    dt_table_config cfg = *dt_table_config_of(t);
    cfg.stripes = 32; /* another stripe count: storage, not meaning */
    dt_table *back = new_table(&cfg);
    int64_t imported = 0;
    ck_assert_msg(dt_table_import(back, &loaded, 0, 1, 5, &imported, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(imported, held);
    ck_assert_int_eq(rows_held(back), held);
    same_rows(t, back);
    ck_assert_int_eq(dt_table_count_nonzero(back), dt_table_count_nonzero(t));

    /* A file without the slots (another optimizer's): they start at 0. */
    dt_tensors no_slots = loaded;
    no_slots.count = 2;
    dt_table *fresh = new_table(&cfg);
    ck_assert_int_eq(dt_table_import(fresh, &no_slots, 0, 1, 5, NULL, NULL), 0);
    int64_t one = ids[3];
    float w[4], m[4], v[4], *slots[2] = {m, v};
    read_rows(fresh, &one, 1, w, slots);
    ck_assert(memcmp(w, (float *)ts.items[1].data + 3 * 4, sizeof w) == 0);
    ck_assert(m[0] == 0.0f && v[3] == 0.0f);

    /* An empty table exports nothing and imports as empty. */
    dt_table *empty = new_table(&cfg);
    dt_tensors none;
    ck_assert_int_eq(dt_table_export(empty, 0, 1, &none, NULL), 0);
    ck_assert_int_eq(none.count, 0);
    ck_assert_int_eq(dt_table_import(empty, &none, 0, 1, 0, &imported, NULL), 0);
    ck_assert_int_eq(imported, 0);
    dt_tensors_deinit(&none);

    dt_tensors_deinit(&ts);
    dt_tensors_deinit(&loaded);
    dt_test_tempdir_free(dir);
    dt_table_free(t), dt_table_free(back), dt_table_free(fresh), dt_table_free(empty);
}
END_TEST

START_TEST(test_reshard) {
    /* A table placed on 3 ps tasks (each task holds only its rows), saved
     * shard by shard, restored onto 2 tasks. */
    int64_t held = 0;
    dt_table *whole = trained("w", 8, &held);
    dt_tensors all;
    ck_assert_int_eq(dt_table_export(whole, 0, 1, &all, NULL), 0);
    dt_table *old[3];
    dt_tensors part[3];
    int64_t total = 0;
    for (int s = 0; s < 3; s++) {
        old[s] = new_table(dt_table_config_of(whole));
        int64_t n = 0;
        ck_assert_int_eq(dt_table_import(old[s], &all, s, 3, 5, &n, NULL), 0);
        total += n;
        ck_assert_int_eq(dt_table_export(old[s], s, 3, &part[s], NULL), 0);
        /* Each old task holds exactly its placed rows. */
        const int64_t *ids = part[s].items[0].data;
        for (int64_t k = 0; k < part[s].items[0].shape[0]; k++)
            ck_assert_int_eq(dt_table_shard_of(ids[k], 3), s);
    }
    ck_assert_int_eq(total, held);
    dt_table *now[2];
    int64_t total2 = 0;
    for (int j = 0; j < 2; j++) {
        now[j] = new_table(dt_table_config_of(whole));
        for (int s = 0; s < 3; s++) {
            int64_t n = 0;
            ck_assert_int_eq(dt_table_import(now[j], &part[s], j, 2, 5, &n, NULL), 0);
            total2 += n;
        }
        dt_tensors mine;
        ck_assert_int_eq(dt_table_export(now[j], 0, 1, &mine, NULL), 0);
        const int64_t *ids = mine.items[0].data;
        for (int64_t k = 0; k < mine.items[0].shape[0]; k++)
            ck_assert_int_eq(dt_table_shard_of(ids[k], 2), j);
        dt_tensors_deinit(&mine);
    }
    ck_assert_int_eq(total2, held);
    /* Merged back into one table, the rows are the original's. */
    dt_table *merged = new_table(dt_table_config_of(whole));
    for (int j = 0; j < 2; j++) {
        dt_tensors mine;
        ck_assert_int_eq(dt_table_export(now[j], j, 2, &mine, NULL), 0);
        ck_assert_int_eq(dt_table_import(merged, &mine, 0, 1, 5, NULL, NULL), 0);
        dt_tensors_deinit(&mine);
    }
    same_rows(whole, merged);
    dt_err err;
    dt_err_clear(&err);
    dt_tensors bad;
    ck_assert_int_eq(dt_table_export(whole, 3, 3, &bad, &err), DT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "shard 3 of 3 is out of range"));
    for (int s = 0; s < 3; s++) {
        dt_tensors_deinit(&part[s]);
        dt_table_free(old[s]);
    }
    dt_table_free(now[0]), dt_table_free(now[1]), dt_table_free(merged), dt_table_free(whole);
    dt_tensors_deinit(&all);
}
END_TEST

START_TEST(test_import_refuses_bad_files) {
    int64_t held = 0;
    dt_table *src = trained("w", 4, &held);
    dt_tensors good;
    ck_assert_int_eq(dt_table_export(src, 0, 1, &good, NULL), 0);
    const int64_t n = good.items[0].shape[0];
    dt_table *t = new_table(dt_table_config_of(src));
    int64_t keep = 7;
    float w7[4] = {1, 2, 3, 4};
    dt_table_batch b = {0};
    plan(t, &keep, 1, &b);
    ck_assert_int_eq(dt_table_write(t, &b, w7, NULL, 1, NULL), 0);
    dt_table_batch_deinit(&b);
    for (int c = 0; c < 7; c++) {
        dt_tensors bad;
        ck_assert_int_eq(dt_table_export(src, 0, 1, &bad, NULL), 0);
        int64_t *ids = bad.items[0].data;
        float *values = bad.items[1].data, *m = bad.items[2].data;
        const char *want = NULL;
        switch (c) {
        case 0: ids[5] = ids[4], want = "w/ids[5]"; break;
        case 1: ids[0] = 3000, want = "w/ids[0] = 3000 is out of range [0, 3000)"; break;
        case 2: values[9] = NAN, want = "w/values[2] is nan, not a finite number"; break;
        case 3: m[n * 4 - 1] = INFINITY, want = "w/m["; break;
        case 4:
            bad.items[1].shape[1] = 3, bad.items[1].shape[0] = n * 4 / 3,
            want = "ids of dim 4: it must be F32 (";
            break;
        case 5: bad.items[0].dtype = DT_DTYPE_I32, want = "w/ids must be I64"; break;
        case 6:
            snprintf(bad.items[1].name, sizeof bad.items[1].name, "w/other");
            want = "has w/ids but no w/values";
            break;
        }
        dt_err err;
        dt_err_clear(&err);
        ck_assert_int_eq(dt_table_import(t, &bad, 0, 1, 5, NULL, &err), DT_ECORRUPT);
        ck_assert_msg(strstr(err.msg, want) != NULL, "case %d: %s", c, err.msg);
        /* Nothing was written. */
        ck_assert_int_eq(rows_held(t), 1);
        float got[4];
        read_rows(t, &keep, 1, got, NULL);
        ck_assert(memcmp(got, w7, sizeof got) == 0);
        dt_tensors_deinit(&bad);
    }
    ck_assert_int_eq(dt_table_import(t, &good, 0, 1, 5, NULL, NULL), 0);
    int has7 = 0;
    for (int64_t k = 0; k < n; k++)
        has7 |= ((const int64_t *)good.items[0].data)[k] == 7;
    ck_assert_int_eq(rows_held(t), held + !has7);
    dt_tensors_deinit(&good);
    dt_table_free(src), dt_table_free(t);
}
END_TEST

START_TEST(test_nonzero_with_ftrl) {
    /* FTRL with L1 on a table: rows pushed with noise stay exactly 0, rows
     * with a steady gradient do not; the count says so. */
    enum { R = 2000, SIGNAL = 50 };
    dt_optim_config o = optim(DT_OPTIM_FTRL);
    o.learning_rate = 0.1;
    o.ftrl_l1 = 8;
    o.ftrl_beta = 1;
    dt_table_config cfg = config("ftrl", R, 1);
    dt_table_config_slots(&cfg, &o);
    dt_table *t = new_table(&cfg);
    int64_t ids[R];
    float g[R];
    for (int64_t i = 0; i < R; i++)
        ids[i] = i;
    for (int p = 1; p <= 60; p++) {
        for (int64_t i = 0; i < R; i++) {
            double u = (double)(dt_hash_mix64((uint64_t)(p * 7777 + i)) >> 11) * 0x1.0p-53;
            g[i] = (float)((2 * u - 1) + (i < SIGNAL ? -1.0 : 0.0));
        }
        apply(t, &o, 0.1, ids, R, g, p);
    }
    int64_t nonzero = dt_table_count_nonzero(t);
    ck_assert_msg(nonzero >= SIGNAL && nonzero < R / 10, "%lld of %d weights non-zero",
                  (long long)nonzero, R);
    float w[SIGNAL];
    read_rows(t, ids, SIGNAL, w, NULL);
    for (int i = 0; i < SIGNAL; i++)
        ck_assert(w[i] > 0);
    dt_table_free(t);
}
END_TEST

/* The non-zero weights of t by a full scan of an export: the reference
 * the kept count is held to. */
static int64_t scanned_nonzero(dt_table *t) {
    dt_tensors ts;
    dt_err err;
    dt_err_clear(&err);
    ck_assert_msg(dt_table_export(t, 0, 1, &ts, &err) == 0, "%s", err.msg);
    int64_t n = 0;
    if (ts.count > 0) {
        const float *w = ts.items[1].data;
        for (int64_t i = 0; i < dt_tensor_numel(&ts.items[1]); i++)
            n += w[i] != 0.0f;
    }
    dt_tensors_deinit(&ts);
    return n;
}

static void nonzero_matches_scan(dt_table *t, const char *when) {
    int64_t kept = dt_table_count_nonzero(t), scanned = scanned_nonzero(t);
    ck_assert_msg(kept == scanned, "%s: count %lld, scan %lld", when, (long long)kept,
                  (long long)scanned);
}

START_TEST(test_nonzero_kept_exact) {
    /* The count kept as rows change equals a full scan after each kind of
     * change: random pushes on a normal init, FTRL with L1 (weights going to 0
     * and back as the gradient's sign turns), writes that zero weights, an import over held and new
     * rows, an eviction, and a restore into a fresh table. */
    enum { R = 5000, D = 3, PUSHES = 40 };
    dt_optim_config o = optim(DT_OPTIM_FTRL);
    o.learning_rate = 0.1;
    o.ftrl_l1 = 2;
    o.ftrl_beta = 1;
    dt_table *t = normal_table("nz", R, D, &o);
    const dt_table_config cfg = *dt_table_config_of(t);
    nonzero_matches_scan(t, "empty");
    static int64_t ids[R];
    static float g[R * D], w[R * D];
    uint64_t rng = 42;
    int64_t went_to_zero = 0, came_back = 0, before = 0;
    for (int p = 1; p <= PUSHES; p++) {
        /* A random sorted subset of the ids. */
        int64_t n = 0;
        for (int64_t id = 0; id < R; id++)
            if (dt_hash_mix64(rng += 0x9e3779b97f4a7c15ULL) % 4 == 0) ids[n++] = id;
        /* Phases of 10 pushes: the rows' gradient sign flips, so FTRL's
         * weights leave 0 and come back to it. */
        const double sign = (p / 10) % 2 ? 1.0 : -1.0;
        for (int64_t k = 0; k < n * D; k++) {
            double u = (double)(dt_hash_mix64(rng += 0x9e3779b97f4a7c15ULL) >> 11) * 0x1.0p-53;
            g[k] = (float)(sign * 3 + (2 * u - 1));
        }
        if (p % 7 == 0) {
            /* A write (as a restore does) that zeroes every other weight. */
            read_rows(t, ids, n, w, NULL);
            for (int64_t k = 0; k < n * D; k += 2)
                w[k] = 0.0f;
            dt_table_batch b = {0};
            plan(t, ids, n, &b);
            ck_assert_int_eq(dt_table_write(t, &b, w, NULL, p, NULL), 0);
            dt_table_batch_deinit(&b);
        } else {
            apply(t, &o, 0.1, ids, n, g, p);
        }
        int64_t now = dt_table_count_nonzero(t);
        went_to_zero += now < before;
        came_back += now > before && p > 1;
        before = now;
        nonzero_matches_scan(t, "push");
    }
    /* Both directions happened, or the test proved nothing. */
    ck_assert_int_gt(went_to_zero, 0);
    ck_assert_int_gt(came_back, 0);

    /* An import over held rows and new ones. */
    dt_table *src = new_table(&cfg);
    int64_t n = 0;
    for (int64_t id = 1; id < R; id += 5)
        ids[n++] = id;
    for (int64_t k = 0; k < n * D; k++)
        g[k] = k % 3 == 0 ? 0.0f : (float)k;
    dt_table_batch b = {0};
    plan(src, ids, n, &b);
    ck_assert_int_eq(dt_table_write(src, &b, g, NULL, 1, NULL), 0);
    dt_table_batch_deinit(&b);
    dt_tensors part;
    ck_assert_int_eq(dt_table_export(src, 0, 1, &part, NULL), 0);
    ck_assert_int_eq(dt_table_import(t, &part, 0, 1, PUSHES, NULL, NULL), 0);
    dt_tensors_deinit(&part);
    dt_table_free(src);
    nonzero_matches_scan(t, "import");

    /* Eviction of the rows untouched in the last 20 steps. */
    dt_table_evict_policy idle = {.idle_steps = 20};
    int64_t evicted = 0;
    ck_assert_int_eq(dt_table_evict(t, PUSHES + 15, &idle, &evicted, NULL), 0);
    ck_assert_int_gt(evicted, 0);
    nonzero_matches_scan(t, "evict");

    /* A restore into a fresh table, onto 2 shards. */
    dt_tensors all;
    ck_assert_int_eq(dt_table_export(t, 0, 1, &all, NULL), 0);
    dt_table *shard[2];
    int64_t sum = 0;
    for (int i = 0; i < 2; i++) {
        shard[i] = new_table(&cfg);
        ck_assert_int_eq(dt_table_import(shard[i], &all, i, 2, PUSHES, NULL, NULL), 0);
        nonzero_matches_scan(shard[i], "restore");
        sum += dt_table_count_nonzero(shard[i]);
    }
    ck_assert_int_eq(sum, dt_table_count_nonzero(t));
    dt_tensors_deinit(&all);
    dt_table_free(shard[0]), dt_table_free(shard[1]), dt_table_free(t);
}
END_TEST

START_TEST(test_apply_in_pieces) {
    /* Gradient rows read where a message left them: at an odd address, cut
     * into pieces of 1..7 bytes (a float split between pieces, rows
     * straddling them), give the bits of dt_table_apply on an aligned copy,
     * for every rule with slots and without, and the kept non-zero count
     * still matches a scan. */
    enum { R = 3000, D = 5, N = 400 };
    const dt_optim_kind kinds[] = {DT_OPTIM_SGD, DT_OPTIM_ADAGRAD, DT_OPTIM_ADAM, DT_OPTIM_FTRL};
    static int64_t ids[N];
    static float g[N * D];
    static uint8_t bytes[N * D * 4 + 1];
    static dt_piece pieces[N * D * 4];
    static float wa[N * D], wb[N * D], sa[2][N * D], sb[2][N * D];
    for (size_t q = 0; q < sizeof kinds / sizeof kinds[0]; q++) {
        dt_optim_config o = optim(kinds[q]);
        o.ftrl_l1 = 0.5;
        dt_table *a = normal_table("t", R, D, &o), *b = normal_table("t", R, D, &o);
        for (int push = 1; push <= 3; push++) {
            int64_t n = 0;
            for (int64_t id = push; id < R && n < N; id += 1 + (id * 7 + push) % 13)
                ids[n++] = id;
            for (int64_t k = 0; k < n * D; k++)
                g[k] = (float)sin((double)(k * 3 + push)) * 2.0f;
            apply(a, &o, 0.1, ids, n, g, push);
            /* b: the same bytes one past an aligned address, in pieces. */
            memcpy(bytes + 1, g, (size_t)n * D * sizeof(float));
            int np = dt_test_cut(bytes + 1, (size_t)n * D * sizeof(float), (uint64_t)push * 31 + q,
                                 7, pieces);
            dt_span span = {pieces, 0, (size_t)n * D * sizeof(float)};
            dt_table_batch tb = {0};
            plan(b, ids, n, &tb);
            dt_err err;
            dt_err_clear(&err);
            ck_assert_msg(dt_table_apply_span(b, &tb, &o, 0.1, &span, push, &err) == 0, "%s",
                          err.msg);
            ck_assert_int_gt(np, n); /* rows did straddle pieces */
            dt_table_batch_deinit(&tb);
        }
        for (int64_t k = 0; k < N; k++)
            ids[k] = k;
        float *slots_a[2] = {sa[0], sa[1]}, *slots_b[2] = {sb[0], sb[1]};
        const int S = dt_optim_num_slots(&o);
        read_rows(a, ids, N, wa, S ? slots_a : NULL);
        read_rows(b, ids, N, wb, S ? slots_b : NULL);
        ck_assert_msg(memcmp(wa, wb, sizeof wa) == 0, "%s: weights differ", dt_optim_name(o.kind));
        for (int j = 0; j < S; j++)
            ck_assert_msg(memcmp(sa[j], sb[j], sizeof sa[j]) == 0, "%s: slot %d differs",
                          dt_optim_name(o.kind), j);
        ck_assert_int_eq(dt_table_count_nonzero(a), dt_table_count_nonzero(b));
        nonzero_matches_scan(b, dt_optim_name(o.kind));
        dt_table_free(a), dt_table_free(b);
    }
}
END_TEST

Suite *table_suite(void) {
    Suite *s = suite_create("table");
    TCase *tc = tcase_create("table");
    tcase_set_timeout(tc, 60);
    /* the runner's temp dir: a failed test's files go with it */
    tcase_add_unchecked_fixture(tc, dt_test_tmp_fixture, dt_test_tmp_end);
    tcase_add_test(tc, test_config_errors);
    tcase_add_test(tc, test_placement);
    tcase_add_test(tc, test_init_rule);
    tcase_add_test(tc, test_plan_errors);
    tcase_add_test(tc, test_lazy_updates);
    tcase_add_test(tc, test_growth);
    tcase_add_test(tc, test_export_pages);
    tcase_add_test(tc, test_concurrent_pushes);
    tcase_add_test(tc, test_evict_rules);
    tcase_add_test(tc, test_checkpoint_round_trip);
    tcase_add_test(tc, test_reshard);
    tcase_add_test(tc, test_import_refuses_bad_files);
    tcase_add_test(tc, test_nonzero_with_ftrl);
    tcase_add_test(tc, test_nonzero_kept_exact);
    tcase_add_test(tc, test_apply_in_pieces);
    suite_add_tcase(s, tc);
    return s;
}
