/*
 * auth: identity names, token files and constant-time token comparison.
 *
 * Invariant: a loaded dt_auth_tokens holds either n >= 1 identity entries
 * or exactly one shared token; tokens are 1..DT_AUTH_TOKEN_MAX-1 printable
 * bytes without spaces. Immutable after load, so threads may share it.
 */
#include "auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

typedef struct {
    char identity[DT_PEER_NAME_MAX];
    char token[DT_AUTH_TOKEN_MAX];
    size_t token_len;
} entry;

struct dt_auth_tokens {
    int shared;
    int n;
    entry *entries; /* (n) */
};

static int parse_index(const char *text, int *out) {
    if (*text < '0' || *text > '9') return -1;
    long v = 0;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
        if (v > 1000000) return -1;
    }
    *out = (int)v;
    return 0;
}

int dt_auth_parse_identity(const char *text, dt_rpc_peer *out) {
    memset(out, 0, sizeof *out);
    out->task = -1;
    int task = -1;
    if (strcmp(text, "chief") == 0) {
        out->role = DT_PEER_CHIEF;
        task = 0;
    } else if (strcmp(text, "tool") == 0) {
        out->role = DT_PEER_TOOL;
    } else if (strncmp(text, "worker:", 7) == 0 && parse_index(text + 7, &task) == 0) {
        out->role = DT_PEER_WORKER;
    } else if (strncmp(text, "ps:", 3) == 0 && parse_index(text + 3, &task) == 0) {
        out->role = DT_PEER_PS;
    } else {
        return -1;
    }
    out->task = task;
    snprintf(out->name, sizeof out->name, "%s", text);
    return 0;
}

void dt_auth_identity_of(int is_ps, int task, char *out, size_t cap) {
    if (is_ps)
        snprintf(out, cap, "ps:%d", task);
    else if (task < 0)
        snprintf(out, cap, "tool");
    else if (task == 0)
        snprintf(out, cap, "chief");
    else
        snprintf(out, cap, "worker:%d", task);
}

int dt_auth_equal(const char *a, size_t a_len, const char *b, size_t b_len) {
    if (a_len >= DT_AUTH_TOKEN_MAX || b_len >= DT_AUTH_TOKEN_MAX) return 0;
    /* Walk the whole bound whatever the lengths, so the time tells nothing
     * about where the first difference is or how long the secret is. */
    volatile unsigned char diff = (unsigned char)(a_len != b_len);
    for (size_t i = 0; i < DT_AUTH_TOKEN_MAX; i++) {
        unsigned char x = i < a_len ? (unsigned char)a[i] : 0;
        unsigned char y = i < b_len ? (unsigned char)b[i] : 0;
        diff |= (unsigned char)(x ^ y);
    }
    return diff == 0;
}

static int valid_token(const char *t, size_t len) {
    if (len == 0 || len >= DT_AUTH_TOKEN_MAX) return 0;
    for (size_t i = 0; i < len; i++)
        if (t[i] <= ' ' || t[i] > '~') return 0;
    return 1;
}

/* Splits a trimmed line into up to 3 space-separated words; returns the count. */
static int split_words(char *line, char **words) {
    int n = 0;
    char *p = line;
    while (*p) {
        while (*p == ' ' || *p == '\t')
            *p++ = '\0';
        if (!*p) break;
        if (n == 3) return 4;
        words[n++] = p;
        while (*p && *p != ' ' && *p != '\t')
            p++;
    }
    return n;
}

int dt_auth_tokens_load(const char *path, dt_auth_tokens **out, dt_err *err) {
    *out = NULL;
    int rc = 0;
    FILE *f = fopen(path, "r");
    if (!f) return dt_err_set(err, DT_EIO, "%s: cannot open token file: %s", path, strerror(errno));
    dt_auth_tokens *t = dt_calloc(1, sizeof *t);
    if (t) t->entries = dt_calloc(DT_AUTH_MAX_ENTRIES, sizeof *t->entries);
    if (!t || !t->entries) {
        rc = dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    char line[1024];
    int lineno = 0, bare = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            rc = dt_err_set(err, DT_EINVAL, "%s:%d: line too long", path, lineno);
            goto fail;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        line[strcspn(line, "\r\n")] = '\0';
        char *words[3];
        int n = split_words(line, words);
        if (n == 0) continue;
        if (n > 2) {
            rc = dt_err_set(err, DT_EINVAL, "%s:%d: expected \"IDENTITY TOKEN\" or one token", path,
                            lineno);
            goto fail;
        }
        const char *token = words[n - 1];
        size_t token_len = strlen(token);
        if (!valid_token(token, token_len)) {
            rc = dt_err_set(err, DT_EINVAL,
                            "%s:%d: a token is 1..%d printable characters without spaces", path,
                            lineno, DT_AUTH_TOKEN_MAX - 1);
            goto fail;
        }
        dt_rpc_peer peer;
        if (n == 2 && dt_auth_parse_identity(words[0], &peer) < 0) {
            rc = dt_err_set(err, DT_EINVAL,
                            "%s:%d: \"%.40s\" is not an identity (chief, worker:N, ps:N, tool)",
                            path, lineno, words[0]);
            goto fail;
        }
        if (n == 1) bare++;
        if ((n == 1 && t->n > 0) || (n == 2 && bare)) {
            rc = dt_err_set(err, DT_EINVAL, "%s:%d: a shared token must be the file's only entry",
                            path, lineno);
            goto fail;
        }
        for (int i = 0; n == 2 && i < t->n; i++)
            if (strcmp(t->entries[i].identity, words[0]) == 0) {
                rc = dt_err_set(err, DT_EINVAL, "%s:%d: identity %s listed twice", path, lineno,
                                words[0]);
                goto fail;
            }
        if (t->n == DT_AUTH_MAX_ENTRIES) {
            rc = dt_err_set(err, DT_EINVAL, "%s:%d: more than %d entries", path, lineno,
                            DT_AUTH_MAX_ENTRIES);
            goto fail;
        }
        entry *e = &t->entries[t->n++];
        snprintf(e->identity, sizeof e->identity, "%s", n == 2 ? words[0] : "");
        memcpy(e->token, token, token_len);
        e->token_len = token_len;
    }
    if (ferror(f)) {
        rc = dt_err_set(err, DT_EIO, "%s: read failed", path);
        goto fail;
    }
    if (t->n == 0) {
        rc = dt_err_set(err, DT_EINVAL, "%s: no token in the file", path);
        goto fail;
    }
    t->shared = bare == 1;
    fclose(f);
    *out = t;
    return 0;
fail:
    fclose(f);
    dt_auth_tokens_free(t);
    return rc;
}

void dt_auth_tokens_free(dt_auth_tokens *t) {
    if (!t) return;
    if (t->entries) {
        volatile unsigned char *p = (volatile unsigned char *)t->entries;
        for (size_t i = 0; i < DT_AUTH_MAX_ENTRIES * sizeof *t->entries; i++)
            p[i] = 0;
    }
    free(t->entries);
    free(t);
}

const char *dt_auth_tokens_for(const dt_auth_tokens *t, const char *identity) {
    if (t->shared) return t->entries[0].token;
    for (int i = 0; i < t->n; i++)
        if (identity && strcmp(t->entries[i].identity, identity) == 0) return t->entries[i].token;
    return NULL;
}

int dt_auth_tokens_check(const dt_auth_tokens *t, const char *token, size_t len,
                         const char *claimed, dt_rpc_peer *peer) {
    int found = -1;
    for (int i = 0; i < t->n; i++) /* no early exit: every entry costs the same */
        if (dt_auth_equal(t->entries[i].token, t->entries[i].token_len, token, len) && found < 0)
            found = i;
    if (found < 0) return DT_AUTH_WRONG_TOKEN;
    const char *name = t->shared ? claimed : t->entries[found].identity;
    if (!name || !name[0]) return DT_AUTH_NO_IDENTITY;
    if (dt_auth_parse_identity(name, peer) < 0) return DT_AUTH_BAD_IDENTITY;
    peer->authenticated = 1;
    return 0;
}
