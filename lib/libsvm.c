/*
 * libsvm: the libsvm row tokenizer both readers share, and the readers'
 * number rule. See libsvm.h. The messages here are the ones the readers'
 * tests pin ("label 2 is not a class of 0..1 (or -1)", "feature index 0
 * is out of range 1..4", ...).
 */
#include "libsvm.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dt_libsvm_number(const char *s, double *out) {
    if (!*s) return DT_NUM_EMPTY;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end) return DT_NUM_BAD;
    if (!isfinite(v)) return DT_NUM_NONFINITE; /* "nan", "inf", and overflow such as 1e999 */
    if (fabs(v) > FLT_MAX) return DT_NUM_RANGE;
    *out = v;
    return DT_NUM_OK;
}

const char *dt_libsvm_number_problem(int status) {
    switch (status) {
    case DT_NUM_EMPTY: return "empty field";
    case DT_NUM_BAD: return "not a number";
    case DT_NUM_NONFINITE: return "not a finite number";
    case DT_NUM_RANGE: return "out of float range";
    default: return "ok";
    }
}

int dt_libsvm_check_label(int classes, int signed_labels, double v, float *out, char *why,
                          size_t cap) {
    if (classes <= 0) {
        *out = (float)v;
        return 0;
    }
    if (signed_labels && v == -1.0) v = 0; /* svmlight's negative class */
    /* A number that is no class index is a label of another task (a
     * regression target, svmlight's -1 for a multi-class model): the
     * config does not fit the data, as for a class past "classes". */
    if (v != floor(v)) {
        snprintf(why, cap,
                 "label %g is not a whole number (a class index 0..%d is wanted; a regression "
                 "target wants \"model\": \"linear\")",
                 v, classes - 1);
        return DT_LIBSVM_MISFIT;
    }
    const char *alt = signed_labels ? " (or -1)" : "";
    if (v < 0) {
        snprintf(why, cap, "label %g is not a class of 0..%d%s", v, classes - 1, alt);
        return DT_LIBSVM_MISFIT;
    }
    if (v >= classes) {
        snprintf(why, cap, "label %g is not a class of 0..%d%s: \"classes\" is %d", v, classes - 1,
                 alt, classes);
        return DT_LIBSVM_MISFIT;
    }
    *out = (float)v;
    return 0;
}

/* A whole field of decimal digits with an optional sign that fits int64. */
static int parse_index(const char *s, int64_t *out) {
    const char *d = (*s == '-' || *s == '+') ? s + 1 : s;
    if (!isdigit((unsigned char)*d)) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end || errno) return -1;
    *out = v;
    return 0;
}

void dt_libsvm_row_begin(dt_libsvm_row *r, char *line, const dt_libsvm_rules *rules) {
    memset(r, 0, sizeof *r);
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    r->rules = rules;
    r->first = line;
}

static char *next_token(dt_libsvm_row *r) {
    char *tok = strtok_r(r->first, " \t", &r->save);
    r->first = NULL;
    if (tok) r->ntok++;
    return tok;
}

/* The label token: a number (no index:value pair where the label belongs),
 * then the class rule. */
static int take_label(const dt_libsvm_rules *rules, const char *tok, float *label, char *why,
                      size_t cap) {
    if (strchr(tok, ':')) {
        snprintf(why, cap, "no label: the row starts with \"%.40s\", not a label", tok);
        return -1;
    }
    double v;
    int status = dt_libsvm_number(tok, &v);
    if (status != DT_NUM_OK) {
        snprintf(why, cap, "label: %s: \"%.40s\"", dt_libsvm_number_problem(status), tok);
        return -1;
    }
    return dt_libsvm_check_label(rules->classes, rules->signed_labels, v, label, why, cap);
}

int dt_libsvm_row_next(dt_libsvm_row *r, int64_t *index, const char **value, float *label,
                       char *why, size_t cap) {
    const dt_libsvm_rules *rules = r->rules;
    char *tok = next_token(r);
    if (!tok) return 0;
    if (r->ntok == 1 && rules->labeled) {
        int rc = take_label(rules, tok, label, why, cap);
        return rc < 0 ? rc : 2;
    }
    /* The token a qid may take: the one after the label, or the first. */
    if (r->ntok == (rules->labeled ? 2 : 1) && strncmp(tok, "qid:", 4) == 0) {
        int64_t qid;
        if (parse_index(tok + 4, &qid) < 0) {
            snprintf(why, cap, "bad query id \"%.40s\"", tok);
            return -1;
        }
        tok = next_token(r);
        if (!tok) return 0;
    }
    char *colon = strchr(tok, ':');
    if (!colon) {
        snprintf(why, cap, "\"%.40s\" is not index:value%s", tok,
                 r->ntok == 1 ? " (a label? the file is read without labels)" : "");
        return -1;
    }
    *colon = '\0';
    int64_t idx;
    if (parse_index(tok, &idx) < 0) {
        snprintf(why, cap, "feature index \"%.40s\" is not an integer", tok);
        return -1;
    }
    const int64_t F = rules->max_index;
    if (idx < 1 || (idx > F && !rules->features)) {
        snprintf(why, cap, "feature index %lld is out of range 1..%lld", (long long)idx,
                 (long long)F);
        return -1;
    }
    if (idx > F) {
        snprintf(why, cap, "feature index %lld is out of range 1..%lld: \"features\" is %lld",
                 (long long)idx, (long long)F, (long long)rules->features);
        return DT_LIBSVM_MISFIT;
    }
    if (idx <= r->prev) {
        snprintf(why, cap, "feature index %lld after %lld: indices must increase", (long long)idx,
                 (long long)r->prev);
        return -1;
    }
    r->prev = idx;
    *index = idx;
    *value = colon + 1;
    return 1;
}
