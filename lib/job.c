/*
 * job: the job config's schema (one table of fields, each with its rule) and
 * the rules across fields.
 *
 * Invariant: a failed dt_job_parse or dt_job_set leaves the job unchanged.
 * Threading: as jsonpos, parse from one thread at a time.
 */
#include "job.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cluster.h"
#include "jsonpos.h"
#include "log.h"
#include "sparse_reader.h"
#include "text.h"

#define MAX_EXACT_INT 9007199254740992.0 /* 2^53: JSON numbers are doubles */
#define WHY_MAX 400

/* ---- the schema ---- */

typedef enum {
    F_CHOICE, /* one of choices, stored as its index (an enum) */
    F_PATH,
    F_OPT_PATH,
    F_INT,
    F_INT64,
    F_SEED,
    F_NUM,
    F_BOOL,
    F_INT_LIST,
    F_INT64_LIST,
    F_NUM_LIST
} field_type;
typedef enum { NUM_POSITIVE, NUM_NONNEG, NUM_UNIT } num_rule;

/* One job field: its JSON name, where it lives in dt_job, and its rule. */
typedef struct {
    const char *name;
    size_t offset;
    size_t size;                /* F_CHOICE: sizeof(int); F_PATH: the buffer */
    const char *const *choices; /* F_CHOICE: NULL-terminated, owned by their module */
    double min, max;            /* F_INT, F_INT64, F_SEED, integer lists: inclusive */
    field_type type;
    num_rule rule;       /* F_NUM, F_NUM_LIST */
    size_t count_offset; /* lists: the int that holds the count */
    int max_count;       /* lists */
    int zero_unset;      /* F_INT: 0 in the struct is "not set", to be read from the data
                            (dt_job_infer); a file cannot say 0 */
    size_t named_flag;   /* nonzero: the offset of an int set to 1 when a file or --set
                            names the field (offset 0 is "model", never a flag) */
} field;

/* An enum stored through an int slot must be an int. */
_Static_assert(sizeof(dt_model_kind) == sizeof(int), "enum size");
_Static_assert(sizeof(dt_data_source) == sizeof(int), "enum size");
_Static_assert(sizeof(dt_scale) == sizeof(int), "enum size");
_Static_assert(sizeof(dt_placement) == sizeof(int), "enum size");
_Static_assert(sizeof(dt_mode) == sizeof(int), "enum size");
_Static_assert(sizeof(dt_nonfinite) == sizeof(int), "enum size");
_Static_assert(sizeof(dt_sparse_mode) == sizeof(int), "enum size");
_Static_assert(sizeof(dt_sparse_combiner) == sizeof(int), "enum size");
_Static_assert(sizeof(dt_optim_kind) == sizeof(int), "enum size");

#define AT(m) .offset = offsetof(dt_job, m), .size = sizeof(((dt_job *)0)->m)
#define INT_FIELD(n, m, lo)                                                                        \
    { .name = n, .type = F_INT, AT(m), .min = lo, .max = INT_MAX }
#define CHOICE(n, m, names)                                                                        \
    { .name = n, .type = F_CHOICE, AT(m), .choices = names }

/* The job fields, in the order conf/README.md lists them. */
static const field fields[] = {
    CHOICE("model", model.kind, dt_model_kind_names),
    /* Up to 2^40 for a sparse model's table rows (libsvm indices as they
     * are); a dense model's at most INT_MAX (dt_job_finish). */
    {.name = "features",
     .type = F_INT64,
     AT(model.num_features),
     .min = 1,
     .max = (double)DT_TABLE_MAX_ROWS,
     .zero_unset = 1},
    {.name = "classes",
     .type = F_INT,
     AT(model.num_classes),
     .min = 2,
     .max = INT_MAX,
     .zero_unset = 1},
    {.name = "hidden",
     .type = F_INT_LIST,
     AT(model.hidden),
     .min = 1,
     .max = 1 << 20,
     .count_offset = offsetof(dt_job, model.num_hidden),
     .max_count = DT_MAX_HIDDEN},
    {.name = "l2", .type = F_NUM, AT(model.l2), .rule = NUM_NONNEG},
    {.name = "dropout", .type = F_NUM, AT(model.dropout), .rule = NUM_UNIT},
    {.name = "data",
     .type = F_CHOICE,
     AT(data.source),
     .choices = dt_data_source_names,
     .named_flag = offsetof(dt_job, data_named)},
    {.name = "examples", .type = F_INT64, AT(data.num_examples), .min = 1, .max = MAX_EXACT_INT},
    {.name = "noise", .type = F_NUM, AT(data.noise), .rule = NUM_NONNEG},
    {.name = "seed", .type = F_SEED, AT(seed), .min = 0, .max = MAX_EXACT_INT},
    {.name = "train_data", .type = F_OPT_PATH, AT(data.train_data)},
    {.name = "train_labels", .type = F_OPT_PATH, AT(data.train_labels)},
    {.name = "eval_data", .type = F_OPT_PATH, AT(data.eval_data)},
    {.name = "eval_labels", .type = F_OPT_PATH, AT(data.eval_labels)},
    {.name = "validation_fraction",
     .type = F_NUM,
     AT(data.validation_fraction),
     .rule = NUM_UNIT,
     .named_flag = offsetof(dt_job, validation_named)},
    {.name = "label_column", .type = F_PATH, AT(data.label_column)},
    CHOICE("scale", data.scale, dt_scale_names),
    {.name = "scale_divisor", .type = F_NUM, AT(data.scale_divisor), .rule = NUM_POSITIVE},
    {.name = "skip_bad_rows", .type = F_BOOL, AT(data.skip_bad_rows)},
    INT_FIELD("eval_steps", eval_steps, 0),
    INT_FIELD("patience", patience, 0),
    CHOICE("optimizer", optim.kind, dt_optim_names),
    {.name = "learning_rate",
     .type = F_NUM,
     AT(optim.learning_rate),
     .rule = NUM_POSITIVE,
     .named_flag = offsetof(dt_job, lr_named)},
    {.name = "momentum", .type = F_NUM, AT(optim.momentum), .rule = NUM_UNIT},
    {.name = "nesterov", .type = F_BOOL, AT(optim.nesterov)},
    {.name = "beta1", .type = F_NUM, AT(optim.beta1), .rule = NUM_UNIT},
    {.name = "beta2", .type = F_NUM, AT(optim.beta2), .rule = NUM_UNIT},
    {.name = "epsilon", .type = F_NUM, AT(optim.epsilon), .rule = NUM_POSITIVE},
    {.name = "initial_accumulator",
     .type = F_NUM,
     AT(optim.initial_accumulator),
     .rule = NUM_NONNEG},
    {.name = "l1_regularization_strength", .type = F_NUM, AT(optim.ftrl_l1), .rule = NUM_NONNEG},
    {.name = "l2_regularization_strength", .type = F_NUM, AT(optim.ftrl_l2), .rule = NUM_NONNEG},
    {.name = "ftrl_beta", .type = F_NUM, AT(optim.ftrl_beta), .rule = NUM_NONNEG},
    CHOICE("lr_schedule", schedule.kind, dt_lr_kind_names),
    {.name = "decay_steps",
     .type = F_INT64,
     AT(schedule.decay_steps),
     .min = 1,
     .max = MAX_EXACT_INT},
    {.name = "decay_rate", .type = F_NUM, AT(schedule.decay_rate), .rule = NUM_POSITIVE},
    {.name = "staircase", .type = F_BOOL, AT(schedule.staircase)},
    {.name = "cosine_alpha", .type = F_NUM, AT(schedule.alpha), .rule = NUM_UNIT},
    {.name = "boundaries",
     .type = F_INT64_LIST,
     AT(schedule.boundaries),
     .min = 0,
     .max = MAX_EXACT_INT,
     .count_offset = offsetof(dt_job, schedule.num_boundaries),
     .max_count = DT_LR_MAX_BOUNDARIES},
    {.name = "lr_values",
     .type = F_NUM_LIST,
     AT(schedule.values),
     .rule = NUM_POSITIVE,
     .count_offset = offsetof(dt_job, num_lr_values),
     .max_count = DT_LR_MAX_BOUNDARIES + 1},
    CHOICE("placement", placement.kind, dt_placement_names),
    {.name = "partition_min_bytes",
     .type = F_INT64,
     AT(placement.partition_min_bytes),
     .min = 1,
     .max = MAX_EXACT_INT},
    CHOICE("mode", consistency.mode, dt_mode_names),
    INT_FIELD("replicas_to_aggregate", consistency.replicas_to_aggregate, 0),
    INT_FIELD("total_num_replicas", consistency.total_num_replicas, 0),
    INT_FIELD("staleness", consistency.staleness, 0),
    INT_FIELD("sync_timeout_secs", consistency.sync_timeout_secs, 1),
    CHOICE("nonfinite", consistency.nonfinite, dt_nonfinite_names),
    CHOICE("sparse", sparse, dt_sparse_mode_names),
    {.name = "hash_bits", .type = F_INT, AT(hash_bits), .min = 0, .max = 40},
    {.name = "embedding_dim",
     .type = F_INT,
     AT(embedding_dim),
     .min = 1,
     .max = DT_JOB_MAX_EMBEDDING_DIM},
    CHOICE("embedding_combiner", embedding_combiner, dt_sparse_combiner_names),
    {.name = "evict_idle_steps",
     .type = F_INT64,
     AT(eviction.idle_steps),
     .min = 0,
     .max = MAX_EXACT_INT},
    {.name = "evict_min_touches",
     .type = F_INT64,
     AT(eviction.min_touches),
     .min = 0,
     .max = MAX_EXACT_INT},
    {.name = "evict_touch_window_steps",
     .type = F_INT64,
     AT(eviction.touch_window_steps),
     .min = 0,
     .max = MAX_EXACT_INT},
    INT_FIELD("batch_size", batch_size, 1),
    {.name = "max_steps", .type = F_INT64, AT(max_steps), .min = 0, .max = MAX_EXACT_INT},
    {.name = "epochs",
     .type = F_INT,
     AT(epochs),
     .min = 0,
     .max = INT_MAX,
     .named_flag = offsetof(dt_job, epochs_named)},
    {.name = "log_dir", .type = F_PATH, AT(log_dir)},
    INT_FIELD("save_model_secs", save_model_secs, 1),
    INT_FIELD("final_save_secs", final_save_secs, 1),
    INT_FIELD("max_to_keep", max_to_keep, 1),
    INT_FIELD("summary_steps", summary_steps, 0),
    INT_FIELD("summary_secs", summary_secs, 1),
    INT_FIELD("log_steps", log_steps, 1),
    {.name = "fuse_push_pull", .type = F_BOOL, AT(fuse_push_pull)},
    {.name = "pipeline_push", .type = F_BOOL, AT(pipeline_push)},
    INT_FIELD("ready_wait_secs", ready_wait_secs, 1),
    INT_FIELD("rpc_timeout_secs", rpc_timeout_secs, 1),
    {.name = "pull_copy_threads", .type = F_INT, AT(pull_copy_threads), .min = 1, .max = 4},
    /* At most a day: the ps counts it in milliseconds, in an int. */
    {.name = "ps_linger_secs", .type = F_INT, AT(ps_linger_secs), .min = 1, .max = 86400},
};
#define NUM_FIELDS ((int)(sizeof fields / sizeof fields[0]))

static const field *find_field(const char *name) {
    for (int i = 0; i < NUM_FIELDS; i++)
        if (strcmp(fields[i].name, name) == 0) return &fields[i];
    return NULL;
}

/* Edit distance ignoring case, for "did you mean"; large for long names. */
static int distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 40 || lb > 40) return INT_MAX;
    int prev[41], cur[41];
    for (int j = 0; j <= lb; j++)
        prev[j] = j;
    for (int i = 1; i <= la; i++) {
        cur[0] = i;
        for (int j = 1; j <= lb; j++) {
            int same = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]);
            int best = prev[j - 1] + !same;
            if (prev[j] + 1 < best) best = prev[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            cur[j] = best;
        }
        memcpy(prev, cur, sizeof cur);
    }
    return prev[lb];
}

/* "unknown field "x"", with the closest name or, if none is close, all. */
static void unknown_field(const char *key, char *why, size_t cap) {
    /* Names other tools use for the same thing. */
    static const char *const aliases[][2] = {
        {"lr", "learning_rate"},       {"num_features", "features"}, {"num_examples", "examples"},
        {"steps", "max_steps"},        {"train_steps", "max_steps"}, {"model_dir", "log_dir"},
        {"checkpoint_dir", "log_dir"}, {"optim", "optimizer"},
    };
    const char *best = NULL;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(key, aliases[i][0]) == 0) best = aliases[i][1];
    if (!best) {
        int best_d = INT_MAX, limit = (int)strlen(key) / 3;
        if (limit < 1) limit = 1;
        if (limit > 2) limit = 2;
        for (int i = 0; i < NUM_FIELDS; i++) {
            int dist = distance(key, fields[i].name);
            if (dist <= limit && dist < best_d) {
                best_d = dist;
                best = fields[i].name;
            }
        }
    }
    if (best) {
        snprintf(why, cap, "unknown field \"%s\" (did you mean \"%s\"?)", key, best);
        return;
    }
    size_t n = (size_t)snprintf(why, cap, "unknown field \"%s\"; the fields are", key);
    for (int i = 0; i < NUM_FIELDS && n < cap; i++)
        n += (size_t)snprintf(why + n, cap - n, "%s %s", i ? "," : "", fields[i].name);
}

/* ---- values and their rules ---- */

#define LIST_MAX 32 /* room for the longest list a field takes */

/* A field's value on its way in, from JSON (a file or --set) or from the
 * struct (dt_job_finish), so that one rule judges both. */
typedef enum { V_STRING, V_NUMBER, V_BOOL, V_LIST, V_OTHER } value_kind;
typedef struct {
    value_kind kind;
    const char *str;       /* V_STRING: borrowed */
    double num;            /* V_NUMBER */
    int boolean;           /* V_BOOL */
    int count;             /* V_LIST: entries, possibly more than LIST_MAX */
    double list[LIST_MAX]; /* V_LIST: the first entries, NAN for one not a number */
    char got[80];          /* how messages show it: "(got ...)" */
} field_value;

static void value_of_json(const cJSON *v, field_value *out) {
    memset(out, 0, sizeof *out);
    dt_json_describe(v, out->got, sizeof out->got);
    if (cJSON_IsString(v)) {
        out->kind = V_STRING;
        out->str = v->valuestring;
    } else if (cJSON_IsNumber(v)) {
        out->kind = V_NUMBER;
        out->num = v->valuedouble;
    } else if (cJSON_IsBool(v)) {
        out->kind = V_BOOL;
        out->boolean = cJSON_IsTrue(v);
    } else if (cJSON_IsArray(v)) {
        out->kind = V_LIST;
        out->count = cJSON_GetArraySize(v);
        int i = 0;
        for (const cJSON *e = v->child; e && i < LIST_MAX; e = e->next, i++)
            out->list[i] = cJSON_IsNumber(e) ? e->valuedouble : NAN;
    } else {
        out->kind = V_OTHER;
    }
}

/* The fewest entries a list field takes: hidden needs a layer; the
 * schedule's lists may be empty (unused). */
static int min_count(const field *f) {
    return f->type == F_INT_LIST ? 1 : 0;
}

static double list_entry(const field *f, const char *slot, int k) {
    if (f->type == F_INT_LIST) {
        int x;
        memcpy(&x, slot + sizeof x * (size_t)k, sizeof x);
        return x;
    }
    if (f->type == F_INT64_LIST) {
        int64_t x;
        memcpy(&x, slot + sizeof x * (size_t)k, sizeof x);
        return (double)x;
    }
    double x;
    memcpy(&x, slot + sizeof x * (size_t)k, sizeof x);
    return x;
}

/* The value held in job for f, shown as a file would give it. A string
 * without its NUL, or a list count out of range, is an error of its own. */
static int value_of_slot(const dt_job *job, const field *f, field_value *out, dt_err *err) {
    const char *slot = (const char *)job + f->offset;
    int i32;
    int64_t i64;
    uint64_t u64;
    memset(out, 0, sizeof *out);
    out->kind = V_NUMBER;
    switch (f->type) {
    case F_CHOICE: {
        memcpy(&i32, slot, sizeof i32);
        int n = 0;
        while (f->choices[n])
            n++;
        if (i32 >= 0 && i32 < n) {
            out->kind = V_STRING;
            out->str = f->choices[i32];
        } else {
            out->num = i32;
        }
        break;
    }
    case F_PATH:
    case F_OPT_PATH:
        if (strnlen(slot, f->size) == f->size)
            return dt_err_set(err, DT_EINVAL, "job: \"%s\" is not a terminated string", f->name);
        out->kind = V_STRING;
        out->str = slot;
        break;
    case F_BOOL:
        memcpy(&i32, slot, sizeof i32);
        if (i32 == 0 || i32 == 1) {
            out->kind = V_BOOL;
            out->boolean = i32;
        } else {
            out->num = i32;
        }
        break;
    case F_NUM: memcpy(&out->num, slot, sizeof out->num); break;
    case F_INT:
        memcpy(&i32, slot, sizeof i32);
        out->num = i32;
        break;
    case F_INT64:
        memcpy(&i64, slot, sizeof i64);
        out->num = (double)i64;
        break;
    case F_SEED:
        memcpy(&u64, slot, sizeof u64);
        out->num = (double)u64;
        break;
    case F_INT_LIST:
    case F_INT64_LIST:
    case F_NUM_LIST:
        out->kind = V_LIST;
        memcpy(&out->count, (const char *)job + f->count_offset, sizeof out->count);
        if (out->count < min_count(f) || out->count > f->max_count)
            return dt_err_set(err, DT_EINVAL, "job: \"%s\" has %d entries (%d to %d)", f->name,
                              out->count, min_count(f), f->max_count);
        for (int k = 0; k < out->count; k++)
            out->list[k] = list_entry(f, slot, k);
        break;
    }
    char text[48];
    if (out->kind == V_STRING)
        snprintf(out->got, sizeof out->got, "\"%s\"", dt_json_shown(out->str, text));
    else if (out->kind == V_BOOL)
        snprintf(out->got, sizeof out->got, "%s", out->boolean ? "true" : "false");
    else if (out->kind == V_LIST)
        snprintf(out->got, sizeof out->got, "a list");
    else if (!isfinite(out->num))
        snprintf(out->got, sizeof out->got, "%g", out->num);
    else
        dt_json_describe_number(out->num, out->got, sizeof out->got);
    return 0;
}

/* The index of v's string among f's choices, or -1. */
static int choice_of(const field *f, const field_value *v) {
    if (v->kind != V_STRING) return -1;
    for (int i = 0; f->choices[i]; i++)
        if (strcmp(v->str, f->choices[i]) == 0) return i;
    return -1;
}

static int list_ok(const field *f, const field_value *v) {
    if (v->kind != V_LIST || v->count < min_count(f) || v->count > f->max_count) return 0;
    DT_ASSERT(f->max_count <= LIST_MAX);
    for (int i = 0; i < v->count; i++) {
        double u = v->list[i];
        int ok = f->type == F_NUM_LIST ? isfinite(u) && (f->rule == NUM_POSITIVE ? u > 0 : u >= 0)
                                       : isfinite(u) && u == floor(u) && u >= f->min && u <= f->max;
        if (!ok) return 0;
    }
    return 1;
}

static int num_ok(const field *f, double x) {
    if (!isfinite(x)) return 0;
    if (f->rule == NUM_POSITIVE) return x > 0;
    if (f->rule == NUM_NONNEG) return x >= 0;
    return x >= 0 && x < 1;
}

/* 0 when v obeys f's rule; otherwise -1 and why says what f must be. */
static int check_value(const field *f, const field_value *v, char *why, size_t cap) {
    const char *got = v->got;
    int is_num = v->kind == V_NUMBER && isfinite(v->num);
    switch (f->type) {
    case F_CHOICE: {
        if (choice_of(f, v) >= 0) return 0;
        char names[256];
        snprintf(why, cap, "\"%s\" must be %s (got %s)", f->name,
                 dt_text_choices(names, sizeof names, f->choices, 1), got);
        return -1;
    }
    case F_PATH:
        if (v->kind == V_STRING && v->str[0] != '\0' && strlen(v->str) < f->size) return 0;
        snprintf(why, cap, "\"%s\" must be a non-empty string shorter than %zu bytes (got %s)",
                 f->name, f->size, got);
        return -1;
    case F_OPT_PATH:
        if (v->kind == V_STRING && strlen(v->str) < f->size) return 0;
        snprintf(why, cap,
                 "\"%s\" must be a string shorter than %zu bytes (\"\" for none) (got %s)", f->name,
                 f->size, got);
        return -1;
    case F_INT_LIST:
    case F_INT64_LIST:
    case F_NUM_LIST:
        if (list_ok(f, v)) return 0;
        if (f->type == F_NUM_LIST)
            snprintf(why, cap, "\"%s\" must be a list of up to %d positive numbers (got %s)",
                     f->name, f->max_count, got);
        else
            snprintf(why, cap, "\"%s\" must be a list of %s%d integers from %.0f to %.0f (got %s)",
                     f->name, f->type == F_INT_LIST ? "1 to " : "up to ", f->max_count, f->min,
                     f->max, got);
        return -1;
    case F_BOOL:
        if (v->kind == V_BOOL) return 0;
        snprintf(why, cap, "\"%s\" must be true or false (got %s)", f->name, got);
        return -1;
    case F_NUM: {
        static const char *const rules[] = {
            [NUM_POSITIVE] = "a positive number",
            [NUM_NONNEG] = "a number >= 0",
            [NUM_UNIT] = "a number in [0, 1)",
        };
        if (is_num && num_ok(f, v->num)) return 0;
        snprintf(why, cap, "\"%s\" must be %s (got %s)", f->name, rules[f->rule], got);
        return -1;
    }
    case F_INT:
    case F_INT64:
    case F_SEED:
        if (is_num && v->num == floor(v->num) && v->num >= f->min && v->num <= f->max) return 0;
        if (is_num && v->num > f->max)
            snprintf(why, cap, "\"%s\" must be an integer from %.0f to %.0f (got %s)", f->name,
                     f->min, f->max, got);
        else
            snprintf(why, cap, "\"%s\" must be an integer >= %.0f (got %s)", f->name, f->min, got);
        return -1;
    }
    DT_ASSERT(0);
    return -1;
}

/* Writes v, which check_value has passed, into job's slot for f. */
static void store_value(dt_job *job, const field *f, const field_value *v) {
    char *slot = (char *)job + f->offset;
    switch (f->type) {
    case F_CHOICE: {
        int index = choice_of(f, v);
        DT_ASSERT(f->size == sizeof index);
        memcpy(slot, &index, sizeof index);
        return;
    }
    case F_PATH:
    case F_OPT_PATH: memmove(slot, v->str, strlen(v->str) + 1); return;
    case F_INT_LIST:
    case F_INT64_LIST:
    case F_NUM_LIST:
        for (int i = 0; i < v->count; i++) {
            if (f->type == F_INT_LIST) {
                int x = (int)v->list[i];
                memcpy(slot + sizeof x * (size_t)i, &x, sizeof x);
            } else if (f->type == F_INT64_LIST) {
                int64_t x = (int64_t)v->list[i];
                memcpy(slot + sizeof x * (size_t)i, &x, sizeof x);
            } else {
                memcpy(slot + sizeof(double) * (size_t)i, &v->list[i], sizeof(double));
            }
        }
        memcpy((char *)job + f->count_offset, &v->count, sizeof v->count);
        return;
    case F_BOOL: memcpy(slot, &v->boolean, sizeof v->boolean); return;
    case F_NUM: memcpy(slot, &v->num, sizeof v->num); return;
    case F_INT: {
        int x = (int)v->num;
        memcpy(slot, &x, sizeof x);
        return;
    }
    case F_INT64: {
        int64_t x = (int64_t)v->num;
        memcpy(slot, &x, sizeof x);
        return;
    }
    case F_SEED: {
        uint64_t x = (uint64_t)v->num;
        memcpy(slot, &x, sizeof x);
        return;
    }
    }
}

/* Stores JSON value j into job's field f, or says in why what f must be. */
static int apply_json(dt_job *job, const field *f, const cJSON *j, char *why, size_t cap) {
    field_value v;
    value_of_json(j, &v);
    if (check_value(f, &v, why, cap)) return -1;
    store_value(job, f, &v);
    if (f->named_flag) {
        int named = 1;
        memcpy((char *)job + f->named_flag, &named, sizeof named);
    }
    return 0;
}

/* Applies the members of obj (reached from the root by path, depth n). */
static int apply_object(const dt_json_doc *d, const cJSON *obj, int *path, int n, dt_job *job,
                        dt_err *err) {
    char why[WHY_MAX], name[48];
    int k = 0;
    for (const cJSON *m = obj->child; m; m = m->next, k++) {
        path[n] = k;
        const field *f = find_field(m->string);
        if (!f) {
            unknown_field(dt_json_shown(m->string, name), why, sizeof why);
            return dt_json_fail_at(d, path, n + 1, 1, err, "%s", why);
        }
        int twin = dt_json_earlier_twin(obj, m, k);
        if (twin >= 0) {
            char first[32];
            path[n] = twin;
            dt_json_where(d, path, n + 1, 1, first, sizeof first);
            path[n] = k;
            return dt_json_fail_at(d, path, n + 1, 1, err, "duplicate field \"%s\" (first at %s)",
                                   m->string, first); /* a known field's name */
        }
        if (apply_json(job, f, m, why, sizeof why))
            return dt_json_fail_at(d, path, n + 1, 0, err, "%s", why);
    }
    return 0;
}

void dt_job_defaults(dt_job *job) {
    memset(job, 0, sizeof *job);
    job->model.kind = DT_MODEL_LINEAR;
    job->model.num_features = 0; /* not set: dt_job_finish or dt_job_infer decides */
    job->model.num_classes = 0;
    job->model.hidden[0] = 128;
    job->model.num_hidden = 1;
    job->data.source = DT_DATA_LINE;
    snprintf(job->data.label_column, sizeof job->data.label_column, "0");
    job->data.scale = DT_SCALE_AUTO;
    job->data.scale_divisor = 255;
    job->data.num_examples = 100;
    job->data.noise = 0.3;
    job->seed = 1;
    dt_optim_defaults(&job->optim);
    job->optim.learning_rate = 0.05;
    job->schedule.kind = DT_LR_AUTO;
    job->schedule.decay_steps = 1000;
    job->schedule.decay_rate = 0.96;
    job->placement.kind = DT_PLACE_GREEDY;
    job->placement.partition_min_bytes = 256 * 1024; /* TF's min_max_variable_partitioner */
    job->consistency.mode = DT_MODE_ASYNC;
    job->consistency.sync_timeout_secs = 30;
    job->consistency.nonfinite = DT_NONFINITE_REJECT;
    job->batch_size = 10;
    job->max_steps = 0;
    job->epochs = 200; /* 200 * 100 / 10 = 2000 global steps */
    snprintf(job->log_dir, sizeof job->log_dir, "logs/linear");
    job->save_model_secs = 5;
    job->final_save_secs = 60;
    job->max_to_keep = 5;
    /* By time, not steps: TF1's Supervisor writes every 120 s; 10 s keeps
     * a short job's curve readable and the tiny model's event files at
     * 0.5 MB an hour (bench.sh BENCH_ONLY=summary), where every 10
     * steps wrote 1.2-2.4 GB. TensorBoard keeps 1,000 points of a scalar: 10 s
     * fills them in 2.8 h before it samples. */
    job->summary_steps = 0;
    job->summary_secs = 10;
    job->log_steps = 100;
    job->fuse_push_pull = 1;
    job->pipeline_push = 0;
    job->ready_wait_secs = 120;
    job->rpc_timeout_secs = 10;
    job->pull_copy_threads = 1;
    job->ps_linger_secs = 10;
    job->embedding_dim = 16;
    job->embedding_combiner = DT_COMBINE_CONCAT;
}

int dt_job_parse(const char *text, const char *source, dt_job *job, dt_err *err) {
    DT_ASSERT(text && job);
    dt_json_doc d = {text, source ? source : "job"};
    cJSON *root = NULL;
    dt_job next = *job; /* committed only when every field is good */
    int path[2] = {0, 0};
    char got[80];
    int rc;

    if ((rc = dt_json_parse_object(&d, "job", " of fields, {\"learning_rate\": 0.05, ...}", &root,
                                   err)))
        goto fail;
    int ci, ji;
    const cJSON *cl = dt_json_member(root, "cluster", &ci);
    const cJSON *jb = dt_json_member(root, "job", &ji);
    if (!cl && !jb) {
        rc = apply_object(&d, root, path, 0, &next, err);
    } else {
        /* A cluster file: its job fields, if any, sit under "job". */
        if ((rc = dt_cluster_check_top(&d, root, err))) goto fail;
        if (jb && !cJSON_IsObject(jb)) {
            dt_json_describe(jb, got, sizeof got);
            path[0] = ji;
            rc = dt_json_fail_at(&d, path, 1, 0, err,
                                 "\"job\" must be an object of job fields (got %s)", got);
            goto fail;
        }
        path[0] = ji;
        if (jb) rc = apply_object(&d, jb, path, 1, &next, err);
    }
    if (rc) goto fail;
    cJSON_Delete(root);
    *job = next;
    return 0;
fail:
    cJSON_Delete(root);
    return rc;
}

int dt_job_load(const char *path, dt_job *job, dt_err *err) {
    DT_ASSERT(path && job);
    char *text = NULL;
    int rc = dt_json_read_file(path, &text, err);
    if (rc) return rc;
    rc = dt_job_parse(text, path, job, err);
    free(text);
    return rc;
}

int dt_job_set(dt_job *job, const char *assignment, dt_err *err) {
    DT_ASSERT(job && assignment);
    const char *eq = strchr(assignment, '=');
    char name[64], why[WHY_MAX];
    if (!eq || eq == assignment)
        return dt_err_set(err, DT_EINVAL, "--set %s: want field=value, e.g. learning_rate=0.1",
                          assignment);
    size_t n = (size_t)(eq - assignment);
    const field *f = NULL;
    if (n < sizeof name) {
        memcpy(name, assignment, n);
        name[n] = '\0';
        f = find_field(name);
    } else {
        snprintf(name, sizeof name, "%.*s", (int)sizeof name - 1, assignment);
    }
    if (!f) {
        char text[48];
        unknown_field(dt_json_shown(name, text), why, sizeof why);
        return dt_err_set(err, DT_EINVAL, "--set %s: %s", assignment, why);
    }
    /* A string field takes the bare text (log_dir=runs/a); anything else, or
     * a quoted string, is a JSON scalar. Text that is not JSON goes on as a
     * string, so the field's own rule names what it wants. */
    const char *value = eq + 1;
    cJSON *v = NULL;
    if ((f->type != F_CHOICE && f->type != F_PATH && f->type != F_OPT_PATH) || value[0] == '"')
        v = cJSON_ParseWithOpts(value, NULL, 1);
    if (!v) v = cJSON_CreateString(value);
    if (!v) return dt_err_set(err, DT_ENOMEM, "--set %s: out of memory", assignment);
    dt_job next = *job;
    int rc = 0;
    if (apply_json(&next, f, v, why, sizeof why))
        rc = dt_err_set(err, DT_EINVAL, "--set %s: %s", assignment, why);
    else
        *job = next;
    cJSON_Delete(v);
    return rc;
}

/* 1 when v, f's value in a job, is "not set" (to be read from the data). */
static int is_unset(const field *f, const field_value *v) {
    return f->zero_unset && v->kind == V_NUMBER && v->num == 0;
}

/* Holds every field of job to the rule a file's value would meet, so
 * fields set directly in the struct are held to them too. */
static int check_fields(const dt_job *job, dt_err *err) {
    char why[WHY_MAX];
    for (int i = 0; i < NUM_FIELDS; i++) {
        field_value v;
        int rc = value_of_slot(job, &fields[i], &v, err);
        if (rc) return rc;
        if (!is_unset(&fields[i], &v) && check_value(&fields[i], &v, why, sizeof why))
            return dt_err_set(err, DT_EINVAL, "job: %s", why);
    }
    return 0;
}

int dt_job_schedule(const dt_job *job, dt_lr_schedule *out, dt_err *err) {
    *out = job->schedule;
    if (out->kind == DT_LR_PIECEWISE && job->num_lr_values != out->num_boundaries + 1)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"lr_values\" needs one more entry than \"boundaries\" (%d and %d)",
                          job->num_lr_values, out->num_boundaries);
    int rc = dt_lr_check(out, err);
    return rc < 0 ? dt_err_wrap(err, rc, "job") : 0;
}

int dt_job_reads_files(const dt_job *job) {
    return dt_data_reads_files(&job->data);
}

void dt_job_divergence_hint(const dt_job *job, char *buf, size_t cap) {
    /* Unscaled columns of mixed magnitudes (a column in the thousands
     * beside one in [0, 1]) are the usual cause with file data: a rate
     * fit for the small ones overshoots on the large. Sparse rows are not
     * scaled (conf/README.md "Sparse models"). */
    const int unscaled =
        dt_job_reads_files(job) && !dt_job_is_sparse(job) && job->data.scale == DT_SCALE_NONE;
    snprintf(buf, cap, "%sa lower \"learning_rate\" (now %g)",
             unscaled ? "set \"scale\": \"standardize\" (the features are not scaled) or " : "try ",
             job->optim.learning_rate);
}

double dt_job_loss_ceiling(const dt_job *job) {
    if (job->model.kind == DT_MODEL_LINEAR) return 0;
    const int K = job->model.num_classes > 2 ? job->model.num_classes : 2;
    return 100 * log((double)K);
}

int dt_job_open_data(const dt_job *job, int shard, int num_shards, dt_dataset **out, dt_err *err) {
    dt_data_needs needs;
    dt_model_data_needs(&job->model, &needs);
    return dt_data_open(&job->data, &needs, job->seed, shard, num_shards, out, err);
}

int dt_job_open_eval(const dt_job *job, dt_dataset **out, dt_err *err) {
    dt_data_needs needs;
    dt_model_data_needs(&job->model, &needs);
    return dt_data_open_eval(&job->data, &needs, job->seed, out, err);
}

int dt_job_shape_unset(const dt_job *job) {
    return job->model.num_features == 0 || job->model.num_classes == 0;
}

int dt_job_infer(dt_job *job, dt_err *err) {
    dt_model_config *m = &job->model;
    const int want_features = m->num_features == 0, want_classes = m->num_classes == 0;
    if (!want_features && !want_classes) return 0;
    dt_data_needs needs;
    dt_model_data_needs(m, &needs);
    dt_reader_shape shape;
    int rc = dt_data_infer(&job->data, &needs, want_classes, &shape, err);
    if (rc < 0)
        return dt_err_wrap(err, rc, "job: taking %s from the training data",
                           !want_classes   ? "\"features\""
                           : want_features ? "\"features\" and \"classes\""
                                           : "\"classes\"");
    /* A set value is checked by the read itself, which names the file and
     * both numbers; only what is not set is taken here. */
    char said[DT_ERR_MSG_MAX] = "";
    if (want_features) {
        m->num_features = shape.num_features;
        snprintf(said, sizeof said, "\"features\" %d (%s)", shape.num_features, shape.features_how);
    }
    if (want_classes) {
        m->num_classes = shape.num_classes;
        size_t n = strlen(said);
        snprintf(said + n, sizeof said - n, "%s\"classes\" %d (%s)", n ? ", " : "",
                 shape.num_classes, shape.classes_how);
    }
    dt_log(DT_LOG_INFO, "job: from the training data: %s", said);
    return 0;
}

/* A small set wants many passes to converge, a large one few: 200 passes
 * of 60,000 images at batch 10 are 1.2M steps. 150,000 examples keep the
 * tabular sets of bench/firsttry.py at the reference (3,000 rows: 50
 * passes, 0.91 against 0.89) in a few seconds, where 200 passes took 15 s
 * in sync mode; sets under 750 rows keep the old 200. A network overfits a
 * small set that way: its 2,000 rows (bench/firsttry.py's mlp5) scored
 * 0.70-0.73 in 75 passes against MLPClassifier's 0.73, and 0.735-0.75 in
 * 20; 40,000 examples give it 20, and at least 3 passes over a large one. */
static int dense_mlp(const dt_job *job) {
    return job->model.kind == DT_MODEL_MLP && !dt_job_is_sparse(job);
}

int64_t dt_job_epoch_examples(const dt_job *job) {
    return dense_mlp(job) ? 40000 : 150000;
}

void dt_job_choose_epochs(dt_job *job, int64_t rows) {
    if (job->epochs_named || job->max_steps > 0 || !dt_job_reads_files(job) || rows < 1) return;
    const int64_t k = dt_job_epoch_examples(job);
    int64_t e = (k + rows - 1) / rows;
    if (dense_mlp(job) && e < 3) e = 3;
    job->epochs = (int)(e > DT_JOB_MAX_AUTO_EPOCHS ? DT_JOB_MAX_AUTO_EPOCHS : e);
    job->epochs_chosen = 1;
}

int dt_job_steps_for(const dt_job *job, int64_t num_examples, int64_t *steps, dt_err *err) {
    if (job->epochs == 0)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"max_steps\" and \"epochs\" are both 0; set one of them");
    /* max_steps = epochs * ceil(N / B): a last short batch is a step. */
    int64_t per_epoch = num_examples / job->batch_size + (num_examples % job->batch_size != 0);
    if (per_epoch > INT64_MAX / job->epochs)
        return dt_err_set(err, DT_EINVAL, "job: \"epochs\" %d of %lld steps each is too many steps",
                          job->epochs, (long long)per_epoch);
    *steps = job->epochs * per_epoch;
    return 0;
}

int dt_job_steps_for_shards(const dt_job *job, int64_t num_examples, int num_shards, int64_t *steps,
                            dt_err *err) {
    if (num_shards < 1) return dt_err_set(err, DT_EINVAL, "job: %d shards", num_shards);
    /* Shard i holds the rows i, i + W, ...: (N - 1 - i) / W + 1 of them
     * (data.c); each makes its own passes, a short last batch a step. */
    int64_t total = 0;
    for (int i = 0; i < num_shards && i < num_examples; i++) {
        int64_t shard_steps = 0;
        int rc = dt_job_steps_for(job, (num_examples - 1 - i) / num_shards + 1, &shard_steps, err);
        if (rc < 0) return rc;
        if (shard_steps > INT64_MAX - total)
            return dt_err_set(err, DT_EINVAL, "job: \"epochs\" %d make too many steps",
                              job->epochs);
        total += shard_steps;
    }
    *steps = total;
    return 0;
}

/* ---- sparse models ------------------------------------------------------ */

int dt_job_is_sparse(const dt_job *job) {
    if (job->sparse != DT_SPARSE_AUTO) return job->sparse == DT_SPARSE_ON;
    if (job->data.source == DT_DATA_CRITEO) return 1;
    return job->data.source == DT_DATA_LIBSVM &&
           (job->hash_bits > 0 || job->model.num_features > DT_SPARSE_AUTO_FEATURES);
}

/* What a sparse model takes (and what it does not yet), by field. */
static int check_sparse(const dt_job *job, dt_err *err) {
    const dt_data_config *d = &job->data;
    const dt_table_evict_policy *e = &job->eviction;
    if (e->min_touches > 0 && e->touch_window_steps < 1)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"evict_min_touches\" needs \"evict_touch_window_steps\" >= 1");
    if (!dt_job_is_sparse(job) && (e->idle_steps || e->min_touches || e->touch_window_steps))
        return dt_err_set(err, DT_EINVAL,
                          "job: \"evict_*\" drop rows of a sparse model's table: the model is "
                          "not sparse (\"sparse\")");
    if (!dt_job_is_sparse(job)) {
        if (job->model.num_features > INT_MAX)
            return dt_err_set(err, DT_EINVAL,
                              "job: \"features\" %lld: a dense model takes at most %d; a sparse "
                              "one (\"sparse\", libsvm data) up to 2^40",
                              (long long)job->model.num_features, INT_MAX);
        if (d->source == DT_DATA_CRITEO)
            return dt_err_set(err, DT_EINVAL,
                              "job: \"data\": \"criteo\" needs a sparse model (\"sparse\": "
                              "\"auto\" or \"on\")");
        if (job->hash_bits > 0)
            return dt_err_set(err, DT_EINVAL,
                              "job: \"hash_bits\" %d needs a sparse model (\"sparse\" is \"off\")",
                              job->hash_bits);
        return 0;
    }
    if (d->source != DT_DATA_LIBSVM && d->source != DT_DATA_CRITEO)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"sparse\": a sparse model reads \"data\": \"libsvm\" or "
                          "\"criteo\" (got \"%s\")",
                          dt_data_source_names[d->source]);
    if (job->model.kind == DT_MODEL_MLP && job->embedding_combiner == DT_COMBINE_CONCAT &&
        d->source != DT_DATA_CRITEO)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"embedding_combiner\": \"concat\" gives each field its own "
                          "slot, and \"%s\" rows have no fields (use \"sum\", or \"data\": "
                          "\"criteo\")",
                          dt_data_source_names[d->source]);
    if (d->source == DT_DATA_CRITEO && job->hash_bits < 1)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"data\": \"criteo\" hashes its categories: \"hash_bits\" must "
                          "be 1..40");
    /* Not "not yet": scaling does not fit sparse rows (conf/README.md,
     * "Sparse models", says why at length). */
    if (d->scale != DT_SCALE_NONE)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"scale\": \"%s\" is for dense models; a sparse model takes "
                          "its values as read (\"none\"): Criteo's integer columns come as "
                          "log(1 + x) and its categories as ids of value 1, and standardizing "
                          "would make every libsvm row dense",
                          dt_scale_names[d->scale]);
    return 0;
}

int dt_job_sparse_vars(const dt_job *job, dt_sparse_model_config *model, dt_table_config *table,
                       dt_tensor *specs, int *count, dt_err *err) {
    int rc = check_sparse(job, err);
    if (rc < 0) return rc;
    if (!dt_job_is_sparse(job))
        return dt_err_set(err, DT_EINVAL, "job: not a sparse model (\"sparse\")");
    memset(model, 0, sizeof *model);
    model->kind = DT_SPARSE_WIDE;
    model->head = job->model.kind;
    if (job->model.kind == DT_MODEL_MLP) {
        model->kind = DT_SPARSE_EMBEDDING;
        model->dim = job->embedding_dim;
        model->combiner = job->embedding_combiner;
        model->num_fields = job->data.source == DT_DATA_CRITEO ? DT_CRITEO_CAT_COLUMNS : 0;
        model->num_hidden = job->model.num_hidden;
        memcpy(model->hidden, job->model.hidden, sizeof model->hidden);
    }
    model->num_ids = job->hash_bits ? (int64_t)1 << job->hash_bits : job->model.num_features;
    model->dense_features = job->data.source == DT_DATA_CRITEO ? DT_CRITEO_INT_COLUMNS : 0;
    model->num_classes = job->model.num_classes;
    model->l2 = job->model.l2;
    if ((rc = dt_sparse_model_specs(model, specs, count, table, err)) < 0)
        return dt_err_wrap(err, rc, "job");
    table->seed = job->seed;
    dt_table_config_slots(table, &job->optim);
    return 0;
}

int dt_job_sparse_model(const dt_job *job, dt_sparse_model_config *model, dt_table_config *table,
                        dt_err *err) {
    dt_tensor specs[DT_SPARSE_MODEL_MAX_VARS];
    int count = 0;
    return dt_job_sparse_vars(job, model, table, specs, &count, err);
}

int dt_job_sparse_bytes(const dt_job *job, long long *dense, long long *step_rows, dt_err *err) {
    *dense = *step_rows = 0;
    dt_sparse_model_config mc;
    dt_table_config tc;
    dt_tensor specs[DT_SPARSE_MODEL_MAX_VARS];
    int count = 0;
    int rc = dt_job_sparse_vars(job, &mc, &tc, specs, &count, err);
    if (rc < 0) return rc;
    for (int i = 0; i < count; i++)
        *dense += (long long)specs[i].nbytes;
    /* batch_size < 2^31, entries <= 256, row bytes <= 8 + 4 * 65536:
     * under 2^56, no overflow. */
    const long long entries =
        job->data.source == DT_DATA_CRITEO ? DT_CRITEO_CAT_COLUMNS : DT_JOB_LIBSVM_ROW_ENTRIES;
    *step_rows = (long long)job->batch_size * entries * (8 + 4LL * tc.dim);
    return 0;
}

/* A split reads the dense tables (data.c); a sparse model's rows are
 * read by its own reader, which holds none out. */
static int check_split(const dt_job *job, dt_err *err) {
    if (!dt_job_is_sparse(job) || !dt_data_splits(&job->data)) return 0;
    return dt_err_set(err, DT_ECONFIG,
                      "job: \"validation_fraction\" %g holds rows of a dense model's file out; "
                      "a sparse model's held-out set is a file of its own (\"eval_data\")%s",
                      job->data.validation_fraction,
                      job->validation_named ? "" : " (\"patience\" asked for the split)");
}

int dt_job_open_sparse(const dt_job *job, int eval, int shard, int num_shards, dt_sparse_set *out,
                       dt_err *err) {
    int rc = check_split(job, err);
    if (rc) return rc;
    return dt_job_read_sparse(job, eval ? job->data.eval_data : job->data.train_data, 1, shard,
                              num_shards, out, err);
}

int dt_job_read_sparse(const dt_job *job, const char *path, int labeled, int shard, int num_shards,
                       dt_sparse_set *out, dt_err *err) {
    dt_data_needs needs;
    dt_model_data_needs(&job->model, &needs);
    dt_sparse_read_params p;
    memset(&p, 0, sizeof p);
    p.hash_bits = job->hash_bits;
    p.num_features = job->model.num_features;
    p.label_kind = needs.label_kind;
    p.num_classes = needs.num_classes;
    p.svm_signed_labels = needs.svm_signed_labels;
    p.labels = labeled ? DT_LABELS_REQUIRED : DT_LABELS_NONE;
    p.skip_bad_rows = job->data.skip_bad_rows;
    p.shard = shard;
    p.num_shards = num_shards;
    int rc = job->data.source == DT_DATA_CRITEO ? dt_sparse_read_criteo(path, &p, out, err)
                                                : dt_sparse_read_libsvm(path, &p, out, err);
    return rc < 0 ? dt_err_wrap(err, rc, "data") : 0;
}

static int same_value(const field_value *a, const field_value *b);

/* Whether the "auto" fields (scale, lr_schedule) pick the file recipe: a
 * dense model on csv or IDX data, the files users bring as they are. A
 * libsvm file stays as read, dense or sparse alike: LIBSVM's sets come
 * scaled, and a model switched between dense and sparse on it trains the
 * same (sparse_e2e's sparse_matches_dense); sparse models keep their
 * optimizers' own recipes (FTRL, Adagrad); synthetic sources are made at
 * their scale. */
static int takes_file_recipe(const dt_job *job) {
    const dt_data_source s = job->data.source;
    return (s == DT_DATA_CSV || s == DT_DATA_IDX) && dt_job_reads_files(job) &&
           !dt_job_is_sparse(job) && job->sparse != DT_SPARSE_ON;
}

/*
 * "scale": "auto" (the default): standardize the features of the file
 * recipe's jobs (takes_file_recipe), none otherwise. Unscaled columns of
 * mixed magnitudes are the first cause of a model that diverges or stalls
 * on a user's own file, and the statistics travel in the checkpoint, so
 * eval and predict apply them.
 */
static void resolve_scale(dt_job *job) {
    dt_data_config *d = &job->data;
    if (d->scale != DT_SCALE_AUTO) return;
    d->scale = takes_file_recipe(job) ? DT_SCALE_STANDARDIZE : DT_SCALE_NONE;
    d->scale_chosen = 1;
}

/* As scikit-learn's early_stopping: "patience" with no held-out file
 * holds out a tenth of the training rows, unless told otherwise. */
static void resolve_validation(dt_job *job) {
    dt_data_config *d = &job->data;
    if (job->patience > 0 && dt_data_reads_files(d) && !d->eval_data[0] && !job->validation_named)
        d->validation_fraction = DT_JOB_VALIDATION_FRACTION;
}

/*
 * "lr_schedule": "auto" (the default): for the file recipe, a cosine from
 * learning_rate to 0 over max_steps; constant otherwise. A constant rate
 * leaves SGD's noise in the last steps' values: on small tabular sets the
 * regression's test MSE stayed 1-5% above least squares' and some
 * classifiers 0.02 under the reference (bench/firsttry.py); the decay
 * settles them.
 */
static void resolve_schedule(dt_job *job) {
    if (job->schedule.kind != DT_LR_AUTO) return;
    job->schedule.kind = takes_file_recipe(job) ? DT_LR_COSINE : DT_LR_CONSTANT;
    job->schedule_chosen = 1;
}

/* "data" from "train_data" when nothing named it (dt_job_finish). */
static int infer_source(dt_job *job, dt_err *err) {
    dt_data_config *d = &job->data;
    if (job->data_named || d->source != DT_DATA_LINE || d->train_data[0] == '\0') return 0;
    dt_data_source source;
    const char *how = "";
    int rc = dt_data_source_of_file(d->train_data, &source, &how, err);
    if (rc < 0) return dt_err_wrap(err, rc, "job: \"data\" is not set");
    d->source = source;
    dt_log(DT_LOG_INFO, "job: \"data\" is not set: \"%s\", as %s says (\"train_data\" %s)",
           dt_data_source_names[source], how, d->train_data);
    return 0;
}

/* The data fields each source reads; a field set off its default that the
 * job's source does not read is a warning (a typo, or a job copied from
 * another): never an error, as a config naming every field (conf/linear.json)
 * must load whatever its source. */
typedef struct {
    const char *name;
    unsigned sources; /* bit s: source s reads it */
    const char *who;  /* the sources that do, for the message */
} data_use;
#define SRC_BIT(s) (1u << (s))
#define SYNTHETIC (SRC_BIT(DT_DATA_LINE) | SRC_BIT(DT_DATA_WIDE))
#define FILES                                                                                      \
    (SRC_BIT(DT_DATA_CSV) | SRC_BIT(DT_DATA_LIBSVM) | SRC_BIT(DT_DATA_IDX) |                       \
     SRC_BIT(DT_DATA_CRITEO))

static void warn_unused(const dt_job *job) {
    static const data_use uses[] = {
        {"examples", SYNTHETIC, "\"line\" and \"wide\" (a file has its own)"},
        {"noise", SYNTHETIC, "\"line\" and \"wide\""},
        {"train_data", FILES, "file sources (csv, libsvm, idx, criteo)"},
        {"train_labels", SRC_BIT(DT_DATA_IDX), "idx"},
        {"eval_labels", SRC_BIT(DT_DATA_IDX), "idx"},
        {"label_column", SRC_BIT(DT_DATA_CSV), "csv"},
        {"skip_bad_rows", FILES, "file sources"},
    };
    dt_job defaults;
    dt_job_defaults(&defaults);
    for (size_t i = 0; i < sizeof uses / sizeof uses[0]; i++) {
        if (uses[i].sources & SRC_BIT(job->data.source)) continue;
        const field *f = find_field(uses[i].name);
        field_value now, was;
        DT_ASSERT(f);
        if (value_of_slot(job, f, &now, NULL) < 0 || value_of_slot(&defaults, f, &was, NULL) < 0)
            continue; /* check_fields has refused it already */
        if (same_value(&now, &was)) continue;
        dt_log(DT_LOG_WARN,
               "job: \"%s\" is %s, but \"data\" \"%s\" does not use it (it is read by %s)", f->name,
               now.got, dt_data_source_names[job->data.source], uses[i].who);
    }
}

int dt_job_finish(dt_job *job, dt_err *err) {
    DT_ASSERT(job);
    int rc = check_fields(job, err);
    if (rc) return rc;
    if ((rc = infer_source(job, err)) < 0) return rc;
    warn_unused(job);
    if ((rc = dt_optim_check(&job->optim, err))) return rc;
    const dt_data_config *data = &job->data;
    int from_file = dt_job_reads_files(job);
    /* Shapes not set: the synthetic sources keep their old defaults (one
     * feature, two classes); a file says its own (dt_job_infer), except
     * that a binary model has two classes and a linear one none to say. */
    dt_model_config *m = &job->model;
    if (m->num_features == 0 && !from_file) m->num_features = 1;
    /* Criteo rows have 13 dense features and hashed ids; hashed libsvm
     * indices need no feature count either. */
    if (data->source == DT_DATA_CRITEO) m->num_features = DT_CRITEO_INT_COLUMNS;
    if (m->num_features == 0 && data->source == DT_DATA_LIBSVM && job->hash_bits > 0 &&
        job->sparse != DT_SPARSE_OFF)
        m->num_features = 1;
    if (m->num_classes == 0 && data->source == DT_DATA_CRITEO) m->num_classes = 2;
    resolve_scale(job);
    resolve_schedule(job);
    resolve_validation(job);
    /* Adam's steps are lr-sized whatever the gradient's scale: 0.05, SGD's
     * rate, sent a Fashion-MNIST MLP to chance (loss 2.30); 0.001 is its
     * paper's and Keras's default. The others keep 0.05. */
    if (!job->lr_named && job->optim.kind == DT_OPTIM_ADAM) job->optim.learning_rate = 0.001;
    if ((rc = check_sparse(job, err))) return rc;
    if (m->num_classes == 0 &&
        (!from_file || m->kind == DT_MODEL_LINEAR || m->kind == DT_MODEL_LOGISTIC))
        m->num_classes = 2;
    if (data->source == DT_DATA_LINE && job->model.num_features != 1)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"data\": \"line\" has 1 feature, but \"features\" is %lld (use "
                          "\"features\": 1, or \"data\": \"wide\")",
                          (long long)job->model.num_features);
    dt_lr_schedule schedule;
    if ((rc = dt_job_schedule(job, &schedule, err))) return rc;
    if (from_file && data->train_data[0] == '\0')
        return dt_err_set(err, DT_EINVAL, "job: \"data\": \"%s\" needs \"train_data\" (a file)",
                          dt_data_source_names[data->source]);
    if (data->source == DT_DATA_IDX && data->train_labels[0] == '\0')
        return dt_err_set(err, DT_EINVAL,
                          "job: \"data\": \"idx\" needs \"train_labels\" (the "
                          "labels file beside the images)");
    if (data->source == DT_DATA_IDX && data->eval_data[0] && !data->eval_labels[0])
        return dt_err_set(err, DT_EINVAL, "job: \"eval_data\" in idx format needs \"eval_labels\"");
    if (!from_file && data->eval_data[0])
        return dt_err_set(err, DT_EINVAL,
                          "job: \"eval_data\" needs a file data source (\"data\": "
                          "\"csv\", \"libsvm\" or \"idx\")");
    if (data->eval_data[0] && data->validation_fraction > 0)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"validation_fraction\" %g and \"eval_data\" both name a "
                          "held-out set; set one of them",
                          data->validation_fraction);
    if (!from_file && data->validation_fraction > 0)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"validation_fraction\" holds out rows of a file: it needs a "
                          "file data source (\"data\": \"csv\", \"libsvm\" or \"idx\")");
    if ((rc = check_split(job, err))) return rc;
    if (job->patience > 0 && (!dt_data_has_held_out(data) || job->eval_steps <= 0))
        return dt_err_set(err, DT_EINVAL,
                          "job: \"patience\" %d counts evaluations on the held-out set: it needs "
                          "\"eval_data\" (or \"validation_fraction\" > 0) and \"eval_steps\" "
                          "> 0 (got %s and %d)",
                          job->patience,
                          data->eval_data[0]              ? "a file"
                          : data->validation_fraction > 0 ? "a split"
                                                          : "none",
                          job->eval_steps);
    if (job->model.kind == DT_MODEL_LOGISTIC && job->model.num_classes != 2)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"model\": \"logistic\" is binary: \"classes\" "
                          "must be 2 (got %d); use \"softmax\" for more",
                          job->model.num_classes);
    if (!from_file && job->batch_size > data->num_examples)
        return dt_err_set(err, DT_EINVAL, "job: \"batch_size\" %d is larger than \"examples\" %lld",
                          job->batch_size, (long long)data->num_examples);
    /* A file's size is known only once it is read: the chief derives
     * max_steps from epochs then (dt_job_steps_for). */
    if (job->max_steps == 0 && from_file && job->epochs == 0)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"max_steps\" and \"epochs\" are both 0; set one of them");
    if (job->max_steps == 0 && !from_file) {
        int64_t steps = 0;
        if ((rc = dt_job_steps_for(job, data->num_examples, &steps, err))) return rc;
        job->max_steps = steps;
    }
    return 0;
}

/* ---- the job as data: written into checkpoints, compared on resume ---- */

const char *const dt_job_model_fields[] = {
    "model",         "features",           "classes", "hidden", "sparse", "hash_bits",
    "embedding_dim", "embedding_combiner", NULL};
const char *const dt_job_input_fields[] = {"data", "label_column", "scale", "scale_divisor", NULL};

/* A number as raw JSON text that reads back to the same double: cJSON's
 * own printing rounds to 15 digits when they look close enough, which
 * would move a 2^53 seed. Values were checked finite. */
static cJSON *exact_number(double x) {
    char buf[40];
    if (x == floor(x) && fabs(x) <= MAX_EXACT_INT)
        snprintf(buf, sizeof buf, "%.0f", x);
    else
        snprintf(buf, sizeof buf, "%.17g", x);
    return cJSON_CreateRaw(buf);
}

/* The JSON form of one field's value, as a job file gives it. */
static cJSON *json_of_value(const field_value *v) {
    switch (v->kind) {
    case V_STRING: return cJSON_CreateString(v->str);
    case V_BOOL: return cJSON_CreateBool(v->boolean);
    case V_LIST: {
        cJSON *a = cJSON_CreateArray();
        for (int k = 0; a && k < v->count; k++) {
            cJSON *e = exact_number(v->list[k]);
            if (!e || !cJSON_AddItemToArray(a, e)) {
                cJSON_Delete(e);
                cJSON_Delete(a);
                return NULL;
            }
        }
        return a;
    }
    default: return exact_number(v->num);
    }
}

int dt_job_to_json(const dt_job *job, char **out, dt_err *err) {
    *out = NULL;
    cJSON *root = cJSON_CreateObject();
    int rc = root ? 0 : dt_err_set(err, DT_ENOMEM, "job: out of memory");
    for (int i = 0; rc == 0 && i < NUM_FIELDS; i++) {
        field_value v;
        if ((rc = value_of_slot(job, &fields[i], &v, err))) break;
        if (is_unset(&fields[i], &v)) continue; /* read back, it is unset again */
        cJSON *j = json_of_value(&v);
        if (!j || !cJSON_AddItemToObject(root, fields[i].name, j)) {
            cJSON_Delete(j);
            rc = dt_err_set(err, DT_ENOMEM, "job: out of memory");
        }
    }
    if (rc == 0 && !(*out = cJSON_PrintUnformatted(root)))
        rc = dt_err_set(err, DT_ENOMEM, "job: out of memory");
    cJSON_Delete(root);
    return rc;
}

static int same_value(const field_value *a, const field_value *b) {
    if (a->kind != b->kind) return 0;
    switch (a->kind) {
    case V_STRING: return strcmp(a->str, b->str) == 0;
    case V_BOOL: return a->boolean == b->boolean;
    case V_LIST:
        if (a->count != b->count) return 0;
        for (int k = 0; k < a->count && k < LIST_MAX; k++)
            if (a->list[k] != b->list[k]) return 0;
        return 1;
    default: return a->num == b->num;
    }
}

/* v, f's value, as a message shows it: "sgd", 0.05, true, [64, 32]. */
static void show_value(const field *f, const field_value *v, char *buf, size_t cap) {
    if (is_unset(f, v)) {
        snprintf(buf, cap, "(not set)");
        return;
    }
    if (v->kind != V_LIST) {
        snprintf(buf, cap, "%s", v->got);
        return;
    }
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int k = 0; k < v->count && k < LIST_MAX && n < cap; k++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%.17g", k ? ", " : "", v->list[k]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static int listed(const char *name, const char *const *names) {
    if (!names) return 1;
    for (; *names; names++)
        if (strcmp(*names, name) == 0) return 1;
    return 0;
}

int dt_job_diff(const dt_job *was, const dt_job *now, const char *const *names, char *buf,
                size_t cap) {
    int differ = 0;
    size_t n = 0;
    if (cap) buf[0] = '\0';
    for (int i = 0; i < NUM_FIELDS; i++) {
        const field *f = &fields[i];
        field_value a, b;
        if (!listed(f->name, names)) continue;
        /* An unreadable slot (an unterminated string) shows as a difference. */
        int bad_a = value_of_slot(was, f, &a, NULL), bad_b = value_of_slot(now, f, &b, NULL);
        if (!bad_a && !bad_b && same_value(&a, &b)) continue;
        char sa[200], sb[200];
        show_value(f, &a, sa, sizeof sa);
        show_value(f, &b, sb, sizeof sb);
        if (n < cap)
            n += (size_t)snprintf(buf + n, cap - n, "%s\"%s\" %s -> %s", differ ? ", " : "",
                                  f->name, bad_a ? "?" : sa, bad_b ? "?" : sb);
        differ++;
    }
    return differ;
}
