/*
 * api_model: the public API's models (include/dtrain.h): the program's
 * variables and tables of rows, and the initializers that give the chief
 * their first values.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "api_internal.h"
#include "data.h"

/* ---- variables ---------------------------------------------------------- */

int dtrain_model_new(dtrain_model **out) {
    *out = dt_api_new_handle(sizeof **out, "model");
    return *out ? 0 : DT_ENOMEM;
}

void dtrain_model_free(dtrain_model *m) {
    if (!m) return;
    free(m->vars);
    free(m);
}

int dtrain_model_count(const dtrain_model *m) {
    return m->count;
}

int64_t dtrain_model_numel(const dtrain_model *m, int i) {
    return i >= 0 && i < m->count ? dt_tensor_numel(&m->vars[i].spec) : 0;
}

/* 1 when name is table or lies under it ("<table>/..."): a checkpoint
 * name of the table's. */
static int under_table(const char *name, const char *table_name) {
    size_t n = strlen(table_name);
    return strncmp(name, table_name, n) == 0 && (name[n] == '\0' || name[n] == '/');
}

int dtrain_model_table_count(const dtrain_model *m) {
    return m->num_tables;
}

int dtrain_model_add_table(dtrain_model *m, const dtrain_table_params *p) {
    dt_err *err = dt_api_begin(m);
    if (atomic_load(&m->in_use))
        return dt_err_set(err, DT_EPRECOND, "model: a session or server uses it already");
    if (!p || !p->name || !p->name[0] || strlen(p->name) > DTRAIN_TABLE_NAME_MAX)
        return dt_err_set(err, DT_EINVAL, "model: a table needs a name of 1..%d bytes",
                          DTRAIN_TABLE_NAME_MAX);
    const char *name = p->name;
    if (m->num_tables == DTRAIN_MAX_TABLES)
        return dt_err_set(err, DT_EINVAL, "model: table \"%s\": at most %d table(s) a model", name,
                          DTRAIN_MAX_TABLES);
    for (int i = 0; i < m->count; i++)
        if (under_table(m->vars[i].spec.name, name))
            return dt_err_set(err, DT_EEXIST,
                              "model: table \"%s\": variable \"%s\" has its name or one of "
                              "its checkpoint names",
                              name, m->vars[i].spec.name);
    for (int i = 0; i < m->num_tables; i++) {
        if (strcmp(m->tables[i].name, name) == 0)
            return dt_err_set(err, DT_EEXIST, "model: table \"%s\" declared twice", name);
        /* "<table>/ids" and the like are a table's checkpoint names. */
        if (under_table(name, m->tables[i].name) || under_table(m->tables[i].name, name))
            return dt_err_set(err, DT_EEXIST,
                              "model: table \"%s\": table \"%s\" has its name under the other's "
                              "(their checkpoint names would collide)",
                              name, m->tables[i].name);
    }
    /* Its checkpoint names must be tensor names. */
    dt_tensor probe;
    memset(&probe, 0, sizeof probe);
    snprintf(probe.name, sizeof probe.name, "%s/values", name);
    probe.dtype = DT_DTYPE_F32;
    int rc = dt_tensor_check_spec(&probe, err);
    if (rc < 0) return dt_err_wrap(err, rc, "model: table \"%s\"", name);
    if (p->rows < 1 || p->rows > DTRAIN_TABLE_MAX_ROWS)
        return dt_err_set(err, DT_EINVAL, "model: table \"%s\": rows %lld is not 1..2^40", name,
                          (long long)p->rows);
    if (p->dim < 1 || p->dim > DTRAIN_TABLE_MAX_DIM)
        return dt_err_set(err, DT_EINVAL, "model: table \"%s\": dim %d is not 1..%d", name, p->dim,
                          DTRAIN_TABLE_MAX_DIM);
    if (p->init != DTRAIN_INIT_ZEROS && p->init != DTRAIN_INIT_NORMAL &&
        p->init != DTRAIN_INIT_UNIFORM)
        return dt_err_set(err, DT_EINVAL,
                          "model: table \"%s\": initializer %d is not zeros, normal or uniform",
                          name, p->init);
    if (p->init != DTRAIN_INIT_ZEROS && (!(p->scale > 0) || !isfinite(p->scale)))
        return dt_err_set(err, DT_EINVAL, "model: table \"%s\": scale %g must be > 0", name,
                          p->scale);
    dt_api_table *t = &m->tables[m->num_tables];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = p->rows;
    t->dim = p->dim;
    t->init = p->init;
    t->scale = p->scale;
    m->num_tables++;
    return 0;
}

/* The table of m as the ps tasks hold it under job (its seed, the
 * optimizer's slots). */
void dt_api_table_config(const dt_api_table *t, const dt_job *job, dt_table_config *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", t->name);
    out->rows = t->rows;
    out->dim = t->dim;
    out->init = t->init == DTRAIN_INIT_NORMAL    ? DT_TABLE_INIT_NORMAL
                : t->init == DTRAIN_INIT_UNIFORM ? DT_TABLE_INIT_UNIFORM
                                                 : DT_TABLE_INIT_ZEROS;
    out->init_scale = t->init == DTRAIN_INIT_ZEROS ? 1.0 : t->scale;
    out->seed = job->seed;
    dt_table_config_slots(out, &job->optim);
}

int dtrain_model_add(dtrain_model *m, const dtrain_var_params *p) {
    dt_err *err = dt_api_begin(m);
    if (atomic_load(&m->in_use))
        return dt_err_set(err, DT_EPRECOND, "model: a session or server uses it already");
    if (!p || !p->name || !p->name[0] || strlen(p->name) > DTRAIN_NAME_MAX)
        return dt_err_set(err, DT_EINVAL, "model: a variable needs a name of 1..%d bytes",
                          DTRAIN_NAME_MAX);
    const char *name = p->name;
    for (int i = 0; i < m->count; i++)
        if (strcmp(m->vars[i].spec.name, name) == 0)
            return dt_err_set(err, DT_EEXIST, "model: variable \"%s\" declared twice", name);
    for (int i = 0; i < m->num_tables; i++)
        if (under_table(name, m->tables[i].name))
            return dt_err_set(err, DT_EEXIST,
                              "model: variable \"%s\": table \"%s\" has that checkpoint name", name,
                              m->tables[i].name);
    if (p->ndim < 0 || p->ndim > DTRAIN_MAX_DIMS || (p->ndim > 0 && !p->shape))
        return dt_err_set(err, DT_EINVAL, "model: \"%s\": ndim %d is not 0..%d with a shape", name,
                          p->ndim, DTRAIN_MAX_DIMS);
    if (!p->values)
        return dt_err_set(err, DT_EINVAL, "model: \"%s\": no buffer for its values", name);
    dt_api_var v;
    memset(&v, 0, sizeof v);
    snprintf(v.spec.name, sizeof v.spec.name, "%s", name);
    v.spec.dtype = DT_DTYPE_F32;
    v.spec.ndim = p->ndim;
    for (int d = 0; d < p->ndim; d++) {
        if (p->shape[d] < 1)
            return dt_err_set(err, DT_EINVAL, "model: \"%s\": dim %d is %lld (each must be >= 1)",
                              name, d, (long long)p->shape[d]);
        v.spec.shape[d] = p->shape[d];
    }
    int rc = dt_tensor_check_spec(&v.spec, err);
    if (rc < 0) return dt_err_wrap(err, rc, "model");
    switch (p->init) {
    case DTRAIN_INIT_GIVEN:
    case DTRAIN_INIT_ZEROS:
    case DTRAIN_INIT_GLOROT_UNIFORM:
    case DTRAIN_INIT_GLOROT_NORMAL:
    case DTRAIN_INIT_HE_NORMAL:
    case DTRAIN_INIT_HE_UNIFORM: break;
    case DTRAIN_INIT_CONSTANT:
        if (!isfinite(p->value))
            return dt_err_set(err, DT_EINVAL, "model: \"%s\": constant %g is not finite", name,
                              p->value);
        break;
    case DTRAIN_INIT_NORMAL:
    case DTRAIN_INIT_TRUNCATED_NORMAL:
        if (!(p->stddev > 0) || !isfinite(p->stddev))
            return dt_err_set(err, DT_EINVAL, "model: \"%s\": stddev %g must be > 0", name,
                              p->stddev);
        break;
    case DTRAIN_INIT_UNIFORM:
        if (!(p->low < p->high) || !isfinite(p->low) || !isfinite(p->high))
            return dt_err_set(err, DT_EINVAL, "model: \"%s\": uniform needs low < high (%g, %g)",
                              name, p->low, p->high);
        break;
    default:
        return dt_err_set(err, DT_EINVAL, "model: \"%s\": unknown initializer %d", name, p->init);
    }
    v.values = p->values;
    v.init = p->init;
    v.value = p->value;
    v.stddev = p->stddev;
    v.low = p->low;
    v.high = p->high;
    if (m->count == m->cap) {
        int cap = m->cap ? 2 * m->cap : 8;
        dt_api_var *grown = dt_realloc(m->vars, sizeof *grown * (size_t)cap);
        if (!grown) return dt_err_set(err, DT_ENOMEM, "model: out of memory");
        m->vars = grown;
        m->cap = cap;
    }
    m->vars[m->count++] = v;
    return 0;
}

/* Keras's fans of a shape: (in, out) for a matrix, (out, in, kh, kw) a
 * convolution kernel (PyTorch's layout), n and n for a vector. */
static void fans(const dt_tensor *t, double *fan_in, double *fan_out) {
    if (t->ndim < 2) {
        *fan_in = *fan_out = (double)dt_tensor_numel(t);
        return;
    }
    if (t->ndim == 2) {
        *fan_in = (double)t->shape[0];
        *fan_out = (double)t->shape[1];
        return;
    }
    double field = 1;
    for (int d = 2; d < t->ndim; d++)
        field *= (double)t->shape[d];
    *fan_in = (double)t->shape[1] * field;
    *fan_out = (double)t->shape[0] * field;
}

/* A uniform in [0, 1) from a splitmix64 stream. */
static double uniform01(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

void dt_api_initial_values(const dt_api_var *v, uint64_t seed, float *out) {
    const int64_t n = dt_tensor_numel(&v->spec);
    /* The built-in models' stream (dt_model_init_state): a variable's
     * values depend on neither the order nor the others, and a normal of
     * a built-in variable's name and stddev is the built-in's, bit for bit. */
    uint64_t state = dt_model_init_state(seed, v->spec.name);
    double fan_in, fan_out, stddev = v->stddev, limit = 0;
    fans(&v->spec, &fan_in, &fan_out);
    int truncated = 0, uniform = 0;
    switch (v->init) {
    case DTRAIN_INIT_GIVEN: memcpy(out, v->values, (size_t)n * sizeof *out); return;
    case DTRAIN_INIT_ZEROS:
    case DTRAIN_INIT_CONSTANT:
        for (int64_t i = 0; i < n; i++)
            out[i] = v->init == DTRAIN_INIT_ZEROS ? 0.0f : (float)v->value;
        return;
    case DTRAIN_INIT_NORMAL: break;
    case DTRAIN_INIT_TRUNCATED_NORMAL: truncated = 1; break;
    case DTRAIN_INIT_UNIFORM: uniform = 1; break;
    /* Keras's truncated normals divide by .87962566103423978, the stddev
     * of a standard normal cut at 2, so the values keep the asked one. */
    case DTRAIN_INIT_GLOROT_NORMAL:
        stddev = sqrt(2.0 / (fan_in + fan_out)) / .87962566103423978;
        truncated = 1;
        break;
    case DTRAIN_INIT_HE_NORMAL:
        stddev = sqrt(2.0 / fan_in) / .87962566103423978;
        truncated = 1;
        break;
    case DTRAIN_INIT_GLOROT_UNIFORM: limit = sqrt(6.0 / (fan_in + fan_out)); break;
    case DTRAIN_INIT_HE_UNIFORM: limit = sqrt(6.0 / fan_in); break;
    }
    if (limit > 0) {
        for (int64_t i = 0; i < n; i++)
            out[i] = (float)(-limit + 2 * limit * uniform01(&state));
        return;
    }
    if (uniform) {
        for (int64_t i = 0; i < n; i++)
            out[i] = (float)(v->low + (v->high - v->low) * uniform01(&state));
        return;
    }
    if (!truncated) {
        dt_data_normals(&state, out, n, stddev);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        double z = dt_data_normal(&state);
        while (fabs(z) > 2.0)
            z = dt_data_normal(&state);
        out[i] = (float)(stddev * z);
    }
}

int dtrain_model_initial_values(dtrain_model *m, int i, uint64_t seed, float *out) {
    dt_err *err = dt_api_begin(m);
    if (i < 0 || i >= m->count)
        return dt_err_set(err, DT_EINVAL, "model: no variable %d (it has %d)", i, m->count);
    if (m->vars[i].init == DTRAIN_INIT_GIVEN)
        return dt_err_set(err, DT_EINVAL, "model: \"%s\": its initial values are the program's",
                          m->vars[i].spec.name);
    if (!out) return dt_err_set(err, DT_EINVAL, "model: no buffer");
    dt_api_initial_values(&m->vars[i], seed, out);
    return 0;
}

/* "linear: w F32 (1, 1), b F32 (1)" for the checkpoint and the ps tasks'
 * identity of the job, cut to cap - 1 bytes. */
void dt_api_describe(const dtrain_model *m, char *buf, size_t cap) {
    size_t off = (size_t)snprintf(buf, cap, "program model:");
    for (int i = 0; i < m->count && off < cap; i++) {
        char layout[96];
        dt_tensor_layout_text(&m->vars[i].spec, layout, sizeof layout);
        int n =
            snprintf(buf + off, cap - off, "%s %s %s", i ? "," : "", m->vars[i].spec.name, layout);
        if (n < 0) break;
        off += (size_t)n;
    }
    for (int i = 0; i < m->num_tables && off < cap; i++) {
        int n = snprintf(buf + off, cap - off, "; table %s (%lld, %d)", m->tables[i].name,
                         (long long)m->tables[i].rows, m->tables[i].dim);
        if (n < 0) break;
        off += (size_t)n;
    }
}
