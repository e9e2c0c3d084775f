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

#define MAX_EXACT_INT 9007199254740992.0 /* 2^53: JSON numbers are doubles */
#define WHY_MAX 400

/* ---- job ---- */

typedef enum {
    F_ENUM,
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
    size_t size;                /* F_ENUM, F_PATH: the buffer */
    const char *const *choices; /* F_ENUM: NULL-terminated */
    double min, max;            /* F_INT, F_INT64, F_SEED: inclusive */
    field_type type;
    num_rule rule;       /* F_NUM, F_NUM_LIST */
    size_t count_offset; /* lists: the int that holds the count */
    int max_count;       /* lists */
} field;

#define AT(m) .offset = offsetof(dt_job, m), .size = sizeof(((dt_job *)0)->m)
#define INT_FIELD(n, m, lo)                                                                        \
    { .name = n, .type = F_INT, AT(m), .min = lo, .max = INT_MAX }

static const char *const models[] = {"linear", "logistic", "softmax", "mlp", NULL};
static const char *const datas[] = {"line", "wide", "csv", "libsvm", "idx", NULL};
static const char *const scales[] = {"none", "standardize", "divide", NULL};
static const char *const schedules[] = {"constant", "exponential", "piecewise", NULL};
static const char *const placements[] = {"greedy", "round_robin", NULL};
static const char *const modes[] = {"async", "sync", "bounded", NULL};
static const char *const nonfinites[] = {"reject", "skip", NULL};
static const char *const optimizers[] = {"sgd", "momentum", "adagrad", "adam", NULL};

/* The job fields, in the order conf/README.md lists them. */
static const field fields[] = {
    {.name = "model", .type = F_ENUM, AT(model), .choices = models},
    INT_FIELD("features", num_features, 1),
    INT_FIELD("classes", num_classes, 2),
    {.name = "hidden",
     .type = F_INT_LIST,
     AT(hidden),
     .min = 1,
     .max = 1 << 20,
     .count_offset = offsetof(dt_job, num_hidden),
     .max_count = DT_MAX_HIDDEN},
    {.name = "l2", .type = F_NUM, AT(l2), .rule = NUM_NONNEG},
    {.name = "data", .type = F_ENUM, AT(data), .choices = datas},
    {.name = "examples", .type = F_INT64, AT(num_examples), .min = 1, .max = MAX_EXACT_INT},
    {.name = "noise", .type = F_NUM, AT(noise), .rule = NUM_NONNEG},
    {.name = "seed", .type = F_SEED, AT(seed), .min = 0, .max = MAX_EXACT_INT},
    {.name = "train_data", .type = F_OPT_PATH, AT(train_data)},
    {.name = "train_labels", .type = F_OPT_PATH, AT(train_labels)},
    {.name = "eval_data", .type = F_OPT_PATH, AT(eval_data)},
    {.name = "eval_labels", .type = F_OPT_PATH, AT(eval_labels)},
    {.name = "label_column", .type = F_PATH, AT(label_column)},
    {.name = "scale", .type = F_ENUM, AT(scale), .choices = scales},
    {.name = "scale_divisor", .type = F_NUM, AT(scale_divisor), .rule = NUM_POSITIVE},
    {.name = "skip_bad_rows", .type = F_BOOL, AT(skip_bad_rows)},
    INT_FIELD("eval_steps", eval_steps, 0),
    {.name = "optimizer", .type = F_ENUM, AT(optim.name), .choices = optimizers},
    {.name = "learning_rate", .type = F_NUM, AT(optim.learning_rate), .rule = NUM_POSITIVE},
    {.name = "momentum", .type = F_NUM, AT(optim.momentum), .rule = NUM_UNIT},
    {.name = "nesterov", .type = F_BOOL, AT(optim.nesterov)},
    {.name = "beta1", .type = F_NUM, AT(optim.beta1), .rule = NUM_UNIT},
    {.name = "beta2", .type = F_NUM, AT(optim.beta2), .rule = NUM_UNIT},
    {.name = "epsilon", .type = F_NUM, AT(optim.epsilon), .rule = NUM_POSITIVE},
    {.name = "initial_accumulator",
     .type = F_NUM,
     AT(optim.initial_accumulator),
     .rule = NUM_NONNEG},
    {.name = "lr_schedule", .type = F_ENUM, AT(lr_schedule), .choices = schedules},
    {.name = "decay_steps", .type = F_INT64, AT(decay_steps), .min = 1, .max = MAX_EXACT_INT},
    {.name = "decay_rate", .type = F_NUM, AT(decay_rate), .rule = NUM_POSITIVE},
    {.name = "staircase", .type = F_BOOL, AT(staircase)},
    {.name = "boundaries",
     .type = F_INT64_LIST,
     AT(boundaries),
     .min = 0,
     .max = MAX_EXACT_INT,
     .count_offset = offsetof(dt_job, num_boundaries),
     .max_count = DT_LR_MAX_BOUNDARIES},
    {.name = "lr_values",
     .type = F_NUM_LIST,
     AT(lr_values),
     .rule = NUM_POSITIVE,
     .count_offset = offsetof(dt_job, num_lr_values),
     .max_count = DT_LR_MAX_BOUNDARIES + 1},
    {.name = "placement", .type = F_ENUM, AT(placement), .choices = placements},
    {.name = "partition_min_bytes",
     .type = F_INT64,
     AT(partition_min_bytes),
     .min = 1,
     .max = MAX_EXACT_INT},
    {.name = "mode", .type = F_ENUM, AT(mode), .choices = modes},
    INT_FIELD("replicas_to_aggregate", replicas_to_aggregate, 0),
    INT_FIELD("total_num_replicas", total_num_replicas, 0),
    INT_FIELD("staleness", staleness, 0),
    INT_FIELD("sync_timeout_secs", sync_timeout_secs, 1),
    {.name = "nonfinite", .type = F_ENUM, AT(nonfinite), .choices = nonfinites},
    INT_FIELD("batch_size", batch_size, 1),
    {.name = "max_steps", .type = F_INT64, AT(max_steps), .min = 0, .max = MAX_EXACT_INT},
    INT_FIELD("epochs", epochs, 0),
    {.name = "log_dir", .type = F_PATH, AT(log_dir)},
    INT_FIELD("save_model_secs", save_model_secs, 1),
    INT_FIELD("final_save_secs", final_save_secs, 1),
    INT_FIELD("max_to_keep", max_to_keep, 1),
    INT_FIELD("summary_steps", summary_steps, 1),
    INT_FIELD("log_steps", log_steps, 1),
    INT_FIELD("ready_wait_secs", ready_wait_secs, 1),
    INT_FIELD("rpc_timeout_secs", rpc_timeout_secs, 1),
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

/* Stores v into the job field f, or says in why what f must be. */
static int apply_value(dt_job *job, const field *f, const cJSON *v, char *why, size_t cap) {
    char *slot = (char *)job + f->offset;
    char got[80];
    int is_num = cJSON_IsNumber(v);
    double x = is_num ? v->valuedouble : 0;
    dt_json_describe(v, got, sizeof got);
    switch (f->type) {
    case F_ENUM: {
        if (cJSON_IsString(v))
            for (const char *const *c = f->choices; *c; c++)
                if (strcmp(v->valuestring, *c) == 0) {
                    DT_ASSERT(strlen(*c) < f->size);
                    memcpy(slot, *c, strlen(*c) + 1);
                    return 0;
                }
        size_t n = (size_t)snprintf(why, cap, "\"%s\" must be", f->name);
        for (const char *const *c = f->choices; *c && n < cap; c++)
            n += (size_t)snprintf(why + n, cap - n, "%s\"%s\"",
                                  c == f->choices ? " "
                                  : c[1]          ? ", "
                                                  : " or ",
                                  *c);
        if (n < cap) snprintf(why + n, cap - n, " (got %s)", got);
        return -1;
    }
    case F_PATH:
        if (cJSON_IsString(v) && v->valuestring[0] != '\0' && strlen(v->valuestring) < f->size) {
            memcpy(slot, v->valuestring, strlen(v->valuestring) + 1);
            return 0;
        }
        snprintf(why, cap, "\"%s\" must be a non-empty string shorter than %zu bytes (got %s)",
                 f->name, f->size, got);
        return -1;
    case F_OPT_PATH:
        if (cJSON_IsString(v) && strlen(v->valuestring) < f->size) {
            memcpy(slot, v->valuestring, strlen(v->valuestring) + 1);
            return 0;
        }
        snprintf(why, cap,
                 "\"%s\" must be a string shorter than %zu bytes (\"\" for none) (got %s)", f->name,
                 f->size, got);
        return -1;
    case F_INT_LIST:
    case F_INT64_LIST:
    case F_NUM_LIST: {
        /* [256, 128]: the values, and their number in the count field. */
        /* hidden needs a layer; the schedule's lists may be empty (unused). */
        int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
        int ok = n >= (f->type == F_INT_LIST ? 1 : 0) && n <= f->max_count;
        double values[32];
        DT_ASSERT(f->max_count <= 32);
        for (int i = 0; ok && i < n; i++) {
            const cJSON *e = cJSON_GetArrayItem(v, i);
            double u = cJSON_IsNumber(e) ? e->valuedouble : NAN;
            if (f->type == F_NUM_LIST)
                ok = isfinite(u) && (f->rule == NUM_POSITIVE ? u > 0 : u >= 0);
            else
                ok = isfinite(u) && u == floor(u) && u >= f->min && u <= f->max;
            values[i] = u;
        }
        if (ok) {
            for (int i = 0; i < n; i++) {
                if (f->type == F_INT_LIST) {
                    int x32 = (int)values[i];
                    memcpy(slot + sizeof(int) * (size_t)i, &x32, sizeof x32);
                } else if (f->type == F_INT64_LIST) {
                    int64_t x64 = (int64_t)values[i];
                    memcpy(slot + sizeof(int64_t) * (size_t)i, &x64, sizeof x64);
                } else {
                    memcpy(slot + sizeof(double) * (size_t)i, &values[i], sizeof(double));
                }
            }
            memcpy((char *)job + f->count_offset, &n, sizeof n);
            return 0;
        }
        if (f->type == F_NUM_LIST)
            snprintf(why, cap, "\"%s\" must be a list of up to %d positive numbers (got %s)",
                     f->name, f->max_count, got);
        else
            snprintf(why, cap, "\"%s\" must be a list of %s%d integers from %.0f to %.0f (got %s)",
                     f->name, f->type == F_INT_LIST ? "1 to " : "up to ", f->max_count, f->min,
                     f->max, got);
        return -1;
    }
    case F_BOOL:
        if (cJSON_IsBool(v)) {
            int b = cJSON_IsTrue(v) ? 1 : 0;
            memcpy(slot, &b, sizeof b);
            return 0;
        }
        snprintf(why, cap, "\"%s\" must be true or false (got %s)", f->name, got);
        return -1;
    case F_NUM: {
        static const char *const rules[] = {
            [NUM_POSITIVE] = "a positive number",
            [NUM_NONNEG] = "a number >= 0",
            [NUM_UNIT] = "a number in [0, 1)",
        };
        int ok = is_num && isfinite(x) &&
                 (f->rule == NUM_POSITIVE ? x > 0
                  : f->rule == NUM_NONNEG ? x >= 0
                                          : x >= 0 && x < 1);
        if (ok) {
            memcpy(slot, &x, sizeof x);
            return 0;
        }
        snprintf(why, cap, "\"%s\" must be %s (got %s)", f->name, rules[f->rule], got);
        return -1;
    }
    case F_INT:
    case F_INT64:
    case F_SEED:
        if (is_num && isfinite(x) && x == floor(x) && x >= f->min && x <= f->max) {
            if (f->type == F_INT) {
                int i = (int)x;
                memcpy(slot, &i, sizeof i);
            } else if (f->type == F_INT64) {
                int64_t i = (int64_t)x;
                memcpy(slot, &i, sizeof i);
            } else {
                uint64_t u = (uint64_t)x;
                memcpy(slot, &u, sizeof u);
            }
            return 0;
        }
        if (is_num && isfinite(x) && x > f->max)
            snprintf(why, cap, "\"%s\" must be an integer from %.0f to %.0f (got %s)", f->name,
                     f->min, f->max, got);
        else
            snprintf(why, cap, "\"%s\" must be an integer >= %.0f (got %s)", f->name, f->min, got);
        return -1;
    }
    DT_ASSERT(0);
    return -1;
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
        if (apply_value(job, f, m, why, sizeof why))
            return dt_json_fail_at(d, path, n + 1, 0, err, "%s", why);
    }
    return 0;
}

void dt_job_defaults(dt_job *job) {
    memset(job, 0, sizeof *job);
    snprintf(job->model, sizeof job->model, "linear");
    job->num_features = 1;
    job->num_classes = 2;
    job->hidden[0] = 128;
    job->num_hidden = 1;
    snprintf(job->data, sizeof job->data, "line");
    snprintf(job->label_column, sizeof job->label_column, "0");
    snprintf(job->scale, sizeof job->scale, "none");
    job->scale_divisor = 255;
    job->num_examples = 100;
    job->noise = 0.3;
    job->seed = 1;
    dt_optim_defaults(&job->optim);
    snprintf(job->optim.name, sizeof job->optim.name, "sgd");
    job->optim.learning_rate = 0.05;
    snprintf(job->lr_schedule, sizeof job->lr_schedule, "constant");
    job->decay_steps = 1000;
    job->decay_rate = 0.96;
    snprintf(job->placement, sizeof job->placement, "greedy");
    job->partition_min_bytes = 256 * 1024; /* TF's min_max_variable_partitioner */
    snprintf(job->mode, sizeof job->mode, "async");
    job->sync_timeout_secs = 30;
    snprintf(job->nonfinite, sizeof job->nonfinite, "reject");
    job->batch_size = 10;
    job->max_steps = 0;
    job->epochs = 200; /* 200 * 100 / 10 = 2000 global steps */
    snprintf(job->log_dir, sizeof job->log_dir, "logs/linear");
    job->save_model_secs = 5;
    job->final_save_secs = 60;
    job->max_to_keep = 5;
    job->summary_steps = 10;
    job->log_steps = 100;
    job->ready_wait_secs = 120;
    job->rpc_timeout_secs = 10;
}

int dt_job_parse(const char *text, const char *source, dt_job *job, dt_err *err) {
    DT_ASSERT(text && job);
    dt_json_doc d = {text, source ? source : "job"};
    cJSON *root = NULL;
    dt_job next = *job; /* committed only when every field is good */
    int path[2] = {0, 0};
    char got[80];
    int rc;

    if ((rc = dt_json_parse(&d, &root, err))) goto fail;
    if (!cJSON_IsObject(root)) {
        dt_json_describe(root, got, sizeof got);
        rc = dt_json_fail_at(&d, NULL, 0, 0, err,
                             "a job file holds an object of fields, {\"learning_rate\": 0.05, ...} "
                             "(got %s)",
                             got);
        goto fail;
    }
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
    if ((f->type != F_ENUM && f->type != F_PATH && f->type != F_OPT_PATH) || value[0] == '"')
        v = cJSON_ParseWithOpts(value, NULL, 1);
    if (!v) v = cJSON_CreateString(value);
    if (!v) return dt_err_set(err, DT_ENOMEM, "--set %s: out of memory", assignment);
    dt_job next = *job;
    int rc = 0;
    if (apply_value(&next, f, v, why, sizeof why))
        rc = dt_err_set(err, DT_EINVAL, "--set %s: %s", assignment, why);
    else
        *job = next;
    cJSON_Delete(v);
    return rc;
}

/* Runs every field of job through the same rules as a file, so fields set
 * directly in the struct are held to them too. */
static int check_fields(const dt_job *job, dt_err *err) {
    char why[WHY_MAX];
    for (int i = 0; i < NUM_FIELDS; i++) {
        const field *f = &fields[i];
        const char *slot = (const char *)job + f->offset;
        cJSON *v = NULL;
        int i32;
        int64_t i64;
        uint64_t u64;
        double num;
        switch (f->type) {
        case F_INT_LIST:
        case F_INT64_LIST:
        case F_NUM_LIST: {
            int n;
            memcpy(&n, (const char *)job + f->count_offset, sizeof n);
            if (n < (f->type == F_INT_LIST ? 1 : 0) || n > f->max_count)
                return dt_err_set(err, DT_EINVAL, "job: \"%s\" has %d entries (1 to %d)", f->name,
                                  n, f->max_count);
            v = cJSON_CreateArray();
            for (int k = 0; v && k < n; k++) {
                double x;
                if (f->type == F_INT_LIST) {
                    int x32;
                    memcpy(&x32, slot + sizeof(int) * (size_t)k, sizeof x32);
                    x = x32;
                } else if (f->type == F_INT64_LIST) {
                    int64_t x64;
                    memcpy(&x64, slot + sizeof(int64_t) * (size_t)k, sizeof x64);
                    x = (double)x64;
                } else {
                    memcpy(&x, slot + sizeof(double) * (size_t)k, sizeof x);
                }
                cJSON_AddItemToArray(v, cJSON_CreateNumber(x));
            }
            break;
        }
        case F_ENUM:
        case F_PATH:
        case F_OPT_PATH:
            if (strnlen(slot, f->size) == f->size)
                return dt_err_set(err, DT_EINVAL, "job: \"%s\" is not a terminated string",
                                  f->name);
            v = cJSON_CreateString(slot);
            break;
        case F_BOOL:
            memcpy(&i32, slot, sizeof i32);
            v = i32 == 0 || i32 == 1 ? cJSON_CreateBool(i32) : cJSON_CreateNumber(i32);
            break;
        case F_NUM:
            memcpy(&num, slot, sizeof num);
            v = cJSON_CreateNumber(num);
            break;
        case F_INT:
            memcpy(&i32, slot, sizeof i32);
            v = cJSON_CreateNumber(i32);
            break;
        case F_INT64:
            memcpy(&i64, slot, sizeof i64);
            v = cJSON_CreateNumber((double)i64);
            break;
        case F_SEED:
            memcpy(&u64, slot, sizeof u64);
            v = cJSON_CreateNumber((double)u64);
            break;
        }
        if (!v) return dt_err_set(err, DT_ENOMEM, "job: check: out of memory");
        dt_job scratch = *job;
        int bad = apply_value(&scratch, f, v, why, sizeof why);
        cJSON_Delete(v);
        if (bad) return dt_err_set(err, DT_EINVAL, "job: %s", why);
    }
    return 0;
}

int dt_job_schedule(const dt_job *job, dt_lr_schedule *out, dt_err *err) {
    memset(out, 0, sizeof *out);
    out->kind = dt_lr_kind_from_name(job->lr_schedule);
    out->decay_steps = job->decay_steps;
    out->decay_rate = job->decay_rate;
    out->staircase = job->staircase;
    if (out->kind == DT_LR_PIECEWISE && job->num_lr_values != job->num_boundaries + 1)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"lr_values\" needs one more entry than \"boundaries\" (%d and %d)",
                          job->num_lr_values, job->num_boundaries);
    out->num_boundaries = job->num_boundaries;
    memcpy(out->boundaries, job->boundaries, sizeof out->boundaries);
    memcpy(out->values, job->lr_values, sizeof out->values);
    int rc = dt_lr_check(out, err);
    return rc < 0 ? dt_err_wrap(err, rc, "job") : 0;
}

int dt_job_reads_files(const dt_job *job) {
    return strcmp(job->data, "csv") == 0 || strcmp(job->data, "libsvm") == 0 ||
           strcmp(job->data, "idx") == 0;
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

int dt_job_finish(dt_job *job, dt_err *err) {
    DT_ASSERT(job);
    int rc = check_fields(job, err);
    if (rc) return rc;
    if ((rc = dt_optim_check(&job->optim, err))) return rc;
    if (strcmp(job->data, "line") == 0 && job->num_features != 1)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"data\": \"line\" has 1 feature, but \"features\" is %d (use "
                          "\"features\": 1, or \"data\": \"wide\")",
                          job->num_features);
    dt_lr_schedule schedule;
    if ((rc = dt_job_schedule(job, &schedule, err))) return rc;
    int from_file = dt_job_reads_files(job);
    if (from_file && job->train_data[0] == '\0')
        return dt_err_set(err, DT_EINVAL, "job: \"data\": \"%s\" needs \"train_data\" (a file)",
                          job->data);
    if (strcmp(job->data, "idx") == 0 && job->train_labels[0] == '\0')
        return dt_err_set(err, DT_EINVAL,
                          "job: \"data\": \"idx\" needs \"train_labels\" (the "
                          "labels file beside the images)");
    if (strcmp(job->data, "idx") == 0 && job->eval_data[0] && !job->eval_labels[0])
        return dt_err_set(err, DT_EINVAL, "job: \"eval_data\" in idx format needs \"eval_labels\"");
    if (!from_file && job->eval_data[0])
        return dt_err_set(err, DT_EINVAL,
                          "job: \"eval_data\" needs a file data source (\"data\": "
                          "\"csv\", \"libsvm\" or \"idx\")");
    if (strcmp(job->model, "logistic") == 0 && job->num_classes != 2)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"model\": \"logistic\" is binary: \"classes\" "
                          "must be 2 (got %d); use \"softmax\" for more",
                          job->num_classes);
    if (!from_file && job->batch_size > job->num_examples)
        return dt_err_set(err, DT_EINVAL, "job: \"batch_size\" %d is larger than \"examples\" %lld",
                          job->batch_size, (long long)job->num_examples);
    /* A file's size is known only once it is read: the chief derives
     * max_steps from epochs then (dt_job_steps_for). */
    if (job->max_steps == 0 && from_file && job->epochs == 0)
        return dt_err_set(err, DT_EINVAL,
                          "job: \"max_steps\" and \"epochs\" are both 0; set one of them");
    if (job->max_steps == 0 && !from_file) {
        int64_t steps = 0;
        if ((rc = dt_job_steps_for(job, job->num_examples, &steps, err))) return rc;
        job->max_steps = steps;
    }
    return 0;
}
