/*
 * checkpoint: safetensors checkpoints and the log dir's "checkpoint" state
 * file.
 *
 * File layout (all offsets in bytes):
 *   [0, 8)          N, the header length, little-endian u64
 *   [8, 8 + N)      JSON header, space-padded so the data starts on 8 bytes
 *   [8 + N, size)   the data section: every tensor's bytes, back to back, in
 *                   the order they were saved
 *
 * Invariants enforced on load (parse, don't trust): N <= 100 MB and fits the
 * file; the header is UTF-8 JSON; every tensor has a known dtype, a shape of
 * 0..4 positive integers and data_offsets [begin, end) with end - begin ==
 * dtype size * numel; sorted by begin, the tensors tile the data section
 * exactly (no overlap, no gap, nothing after the last); global_step is a
 * decimal int64 >= 0; the data's CRC-32C matches "crc32c" when present. A
 * file whose "format" is dtrain's must carry global_step and crc32c; files
 * written by other tools may omit them (global_step then reads as 0). Every
 * allocation is proportional to the file's size, so a hostile header cannot
 * make the loader allocate for data the file does not hold.
 *
 * Durability: a file is written to "<path>.tmp.<pid>", fsynced, renamed over
 * path, and the directory fsynced; on any failure the temporary is removed
 * and path keeps its old content. In a log dir the new checkpoint is durable
 * before the state file names it, and old checkpoints are deleted only after
 * the state file that drops them is durable. A crash at any point leaves a
 * loadable checkpoint behind (possibly an unlisted one, which restore finds
 * by scanning), and at worst files the state file no longer lists, which
 * the next save ranks by step with the rest (retention, checkpoint.h).
 *
 * Threading: no globals of its own; calls on different paths may run
 * concurrently (cJSON records its last parse error position in a global of
 * its own, which concurrent loads may both write; nothing here reads it).
 * Two savers in the same log dir are not supported (the state file update
 * is read-modify-write); dtrain has one saver, the chief.
 */
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "crc32c.h"
#include "jsonpos.h"
#include "log.h"

/* The data section is copied verbatim to and from memory, and tensor.h
 * keeps host order, which safetensors fixes as little-endian. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c assumes a little-endian host"
#endif

#define FORMAT_V1 "dtrain.checkpoint.v1"
#define HEADER_MAX ((uint64_t)100 * 1000 * 1000) /* safetensors' own limit */
#define STATE_FILE "checkpoint"
#define STATE_MAX (1 << 20)              /* a state file for ~20k checkpoints */
#define NAME_CAP 256                     /* a file name in the log dir, with its NUL */
#define JOIN_CAP 4096                    /* "<log_dir>/<name>" */
#define INT_EXACT_MAX 9007199254740992.0 /* 2^53: JSON numbers are doubles */
#define DIM_MAX ((int64_t)1 << 40)       /* as dt_tensor_check_spec */

/* ---- small I/O helpers ---------------------------------------------------- */

/* Writes all of buf; -1 with errno set on failure. */
static int write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO; /* a regular file never writes 0; don't spin */
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Reads up to len bytes, stopping early only at end of file. Returns the
 * count read, or -1 with errno set. */
static ssize_t read_full(int fd, void *buf, size_t len) {
    char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, p + got, len - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* fsyncs the directory holding path, so a rename in it is durable. */
static int fsync_parent(const char *path, dt_err *err) {
    char dir[JOIN_CAP];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        strcpy(dir, ".");
    } else if (slash == path) {
        strcpy(dir, "/");
    } else {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dir) return dt_err_set(err, DT_EINVAL, "%s: directory name too long", path);
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return dt_err_set(err, DT_EIO, "%s: open directory: %s", dir, strerror(errno));
    int rc = 0;
    if (fsync(fd) != 0)
        rc = dt_err_set(err, DT_EIO, "%s: fsync directory: %s", dir, strerror(errno));
    close(fd);
    return rc;
}

typedef int (*emit_fn)(int fd, const void *ctx, const char *tmp, dt_err *err);

/* Writes path atomically: emit into "<path>.tmp.<pid>", fsync, close,
 * rename over path, fsync the directory. On failure the temporary is gone
 * and path is untouched (unless only the final directory fsync failed). */
static int write_atomic(const char *path, emit_fn emit, const void *ctx, dt_err *err) {
    char tmp[JOIN_CAP];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof tmp)
        return dt_err_set(err, DT_EINVAL, "%s: path too long", path);
    int rc = 0, created = 0;
    /* No O_EXCL: a stale temporary can only be ours from an earlier process
     * with the same pid, which crashed; overwrite it. */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = dt_err_set(err, DT_EIO, "%s: create: %s", tmp, strerror(errno));
        goto fail;
    }
    created = 1;
    if ((rc = emit(fd, ctx, tmp, err)) < 0) goto fail;
    if (fsync(fd) != 0) {
        rc = dt_err_set(err, DT_EIO, "%s: fsync: %s", tmp, strerror(errno));
        goto fail;
    }
    int closed = close(fd);
    fd = -1;
    if (closed != 0) {
        rc = dt_err_set(err, DT_EIO, "%s: close: %s", tmp, strerror(errno));
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        rc = dt_err_set(err, DT_EIO, "%s: rename to %s: %s", tmp, path, strerror(errno));
        goto fail;
    }
    created = 0;
    if ((rc = fsync_parent(path, err)) < 0) goto fail;
    return 0;
fail:
    if (fd >= 0) close(fd);
    if (created) unlink(tmp);
    return rc;
}

/* ---- parsing helpers ------------------------------------------------------ */

/* Index of the first byte that is not well-formed UTF-8 (overlongs,
 * surrogates and code points above U+10FFFF are ill-formed), or n. */
static size_t utf8_bad_at(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0)
            len = 2, cp = c & 0x1F, min = 0x80;
        else if ((c & 0xF0) == 0xE0)
            len = 3, cp = c & 0x0F, min = 0x800;
        else if ((c & 0xF8) == 0xF0)
            len = 4, cp = c & 0x07, min = 0x10000;
        else
            return i;
        if (len > n - i) return i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += len;
    }
    return n;
}

/* Parses a plain decimal ("0", "1200"; no sign, space or exponent) no
 * larger than max. Returns 0 or -1. */
static int parse_decimal(const char *s, uint64_t max, uint64_t *out) {
    if (!*s) return -1;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        unsigned d = (unsigned)(*s - '0');
        if (v > (max - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* A JSON number that is a whole number in [0, 2^53]. */
static int json_uint(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item)) return -1;
    double d = item->valuedouble;
    if (!(d >= 0 && d <= INT_EXACT_MAX)) return -1;
    uint64_t v = (uint64_t)d;
    if ((double)v != d) return -1;
    *out = v;
    return 0;
}

/* Sets err to DT_ECORRUPT "path: <formatted>". */
static int corrupt(dt_err *err, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int corrupt(dt_err *err, const char *path, const char *fmt, ...) {
    char what[DT_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return dt_err_set(err, DT_ECORRUPT, "%s: %s", path, what);
}

/* ---- header parsing ------------------------------------------------------- */

typedef struct {
    const char *name; /* borrowed from the parsed JSON */
    int dtype;
    int ndim;
    int64_t shape[DT_TENSOR_MAX_DIMS];
    uint64_t begin, end; /* [begin, end) within the data section */
} entry;

typedef struct {
    dt_ckpt_meta meta;
    int has_step, has_crc;
    uint32_t crc;
    const char *job;           /* the "job" value, borrowed from the parsed header */
    const char *feature_names; /* the "feature_names" value, borrowed */
} header_meta;

static int by_name(const void *a, const void *b) {
    return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

static int by_begin(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static void shape_str(const entry *e, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s [", dt_dtype_name(e->dtype));
    for (int d = 0; d < e->ndim && n > 0 && (size_t)n < cap; d++)
        n += snprintf(buf + n, cap - (size_t)n, "%s%lld", d ? ", " : "", (long long)e->shape[d]);
    if (n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, "]");
}

/* 1 when text is a JSON object in valid UTF-8 (an escape in the header can
 * decode to bytes that are not), as dt_ckpt_save wants it; 0 when it is
 * not; DT_ENOMEM when cJSON ran out of memory on text that is JSON (so a
 * good checkpoint is never judged corrupt for want of memory). */
static int job_text_ok(const char *text) {
    size_t n = strlen(text);
    if (utf8_bad_at((const unsigned char *)text, n) < n) return 0;
    cJSON *job = cJSON_Parse(text);
    if (!job) return dt_json_valid(text) ? DT_ENOMEM : 0;
    int is_object = cJSON_IsObject(job);
    cJSON_Delete(job);
    return is_object;
}

static int parse_meta(const char *path, const cJSON *obj, header_meta *hm, dt_err *err) {
    if (!cJSON_IsObject(obj)) return corrupt(err, path, "header: __metadata__ is not an object");
    const char *format = NULL;
    for (const cJSON *kv = obj->child; kv; kv = kv->next) {
        if (!cJSON_IsString(kv))
            return corrupt(err, path, "header: __metadata__ \"%s\" is not a string", kv->string);
        const char *v = kv->valuestring;
        uint64_t u;
        if (strcmp(kv->string, "global_step") == 0) {
            if (parse_decimal(v, INT64_MAX, &u) < 0)
                return corrupt(
                    err, path,
                    "header: __metadata__ global_step \"%.40s\" is not a decimal int64 >= 0", v);
            hm->meta.global_step = (int64_t)u;
            hm->has_step = 1;
        } else if (strcmp(kv->string, "max_steps") == 0) {
            if (parse_decimal(v, INT64_MAX, &u) < 0)
                return corrupt(
                    err, path,
                    "header: __metadata__ max_steps \"%.40s\" is not a decimal int64 >= 0", v);
            hm->meta.max_steps = (int64_t)u;
        } else if (strcmp(kv->string, "crc32c") == 0) {
            if (parse_decimal(v, UINT32_MAX, &u) < 0)
                return corrupt(err, path,
                               "header: __metadata__ crc32c \"%.40s\" is not a decimal u32", v);
            hm->crc = (uint32_t)u;
            hm->has_crc = 1;
        } else if (strcmp(kv->string, "model") == 0) {
            if (strlen(v) >= sizeof hm->meta.model)
                return corrupt(err, path, "header: __metadata__ model is longer than %d bytes",
                               DT_CKPT_MODEL_MAX - 1);
            snprintf(hm->meta.model, sizeof hm->meta.model, "%s", v);
        } else if (strcmp(kv->string, "format") == 0) {
            format = v;
        } else if (strcmp(kv->string, "job") == 0) {
            int ok = job_text_ok(v);
            if (ok == DT_ENOMEM)
                return dt_err_set(err, DT_ENOMEM, "%s: header: out of memory parsing the job",
                                  path);
            if (!ok) return corrupt(err, path, "header: __metadata__ job is not a JSON object");
            hm->job = v;
        } else if (strcmp(kv->string, "feature_names") == 0) {
            if (utf8_bad_at((const unsigned char *)v, strlen(v)) < strlen(v))
                return corrupt(err, path, "header: __metadata__ feature_names is not UTF-8");
            hm->feature_names = v;
        }
        /* Other keys belong to other tools; they are kept out of our way. */
    }
    if (format && strncmp(format, "dtrain.", 7) == 0) {
        if (strcmp(format, FORMAT_V1) != 0)
            return corrupt(err, path, "header: unsupported format \"%.40s\" (this build reads %s)",
                           format, FORMAT_V1);
        /* dtrain always writes these; their absence means the header was
         * damaged, not that another tool wrote it. */
        if (!hm->has_step) return corrupt(err, path, "header: __metadata__ has no global_step");
        if (!hm->has_crc) return corrupt(err, path, "header: __metadata__ has no crc32c");
    }
    return 0;
}

static int parse_entry(const char *path, const cJSON *item, uint64_t data_size, entry *e,
                       dt_err *err) {
    const char *name = item->string;
    size_t name_len = strlen(name);
    if (name_len == 0) return corrupt(err, path, "header: tensor with an empty name");
    if (name_len >= DT_TENSOR_NAME_MAX)
        return corrupt(err, path, "header: tensor \"%.40s...\": name longer than %d bytes", name,
                       DT_TENSOR_NAME_MAX - 1);
    e->name = name;
    if (!cJSON_IsObject(item))
        return corrupt(err, path, "header: tensor \"%s\": entry is not an object", name);

    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    if (!cJSON_IsString(dtype))
        return corrupt(err, path, "header: tensor \"%s\": missing or non-string \"dtype\"", name);
    e->dtype = dt_dtype_from_name(dtype->valuestring);
    if (e->dtype == DT_DTYPE_INVALID)
        return corrupt(
            err, path,
            "header: tensor \"%s\": unknown dtype \"%.16s\" (dtrain reads F32, F64, I32, I64)",
            name, dtype->valuestring);

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    if (!cJSON_IsArray(shape))
        return corrupt(err, path, "header: tensor \"%s\": missing or non-array \"shape\"", name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > DT_TENSOR_MAX_DIMS)
        return corrupt(err, path, "header: tensor \"%s\": shape has %d dimensions (at most %d)",
                       name, ndim, DT_TENSOR_MAX_DIMS);
    e->ndim = ndim;
    uint64_t bytes = dt_dtype_size(e->dtype);
    int d = 0;
    for (const cJSON *dim = shape->child; dim; dim = dim->next, d++) {
        uint64_t v;
        if (json_uint(dim, &v) < 0)
            return corrupt(err, path,
                           "header: tensor \"%s\": shape[%d] is not a non-negative integer", name,
                           d);
        if (v == 0)
            return corrupt(
                err, path,
                "header: tensor \"%s\": shape[%d] is 0 (dtrain needs every dimension >= 1)", name,
                d);
        if (v > (uint64_t)DIM_MAX / bytes)
            return corrupt(err, path, "header: tensor \"%s\": larger than 2^40 bytes", name);
        e->shape[d] = (int64_t)v;
        bytes *= v;
    }

    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        json_uint(offs->child, &e->begin) < 0 || json_uint(offs->child->next, &e->end) < 0)
        return corrupt(
            err, path,
            "header: tensor \"%s\": \"data_offsets\" is not [begin, end] of non-negative integers",
            name);
    if (e->begin > e->end)
        return corrupt(err, path,
                       "header: tensor \"%s\": data_offsets [%llu, %llu] end before they begin",
                       name, (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > data_size)
        return corrupt(err, path,
                       "header: tensor \"%s\": data_offsets [%llu, %llu] run past the %llu-byte "
                       "data section (truncated?)",
                       name, (unsigned long long)e->begin, (unsigned long long)e->end,
                       (unsigned long long)data_size);
    if (e->end - e->begin != bytes) {
        char s[96];
        shape_str(e, s, sizeof s);
        return corrupt(
            err, path,
            "header: tensor \"%s\": data_offsets [%llu, %llu] hold %llu bytes but %s needs %llu",
            name, (unsigned long long)e->begin, (unsigned long long)e->end,
            (unsigned long long)(e->end - e->begin), s, (unsigned long long)bytes);
    }
    return 0;
}

/* Parses and validates the header; on success *entries_out (owned by the
 * caller, names borrowed from *root_out) lists the tensors in data order. */
static int parse_header(const char *path, const char *header, size_t len, uint64_t data_size,
                        cJSON **root_out, entry **entries_out, int *count_out, header_meta *hm,
                        dt_err *err) {
    int rc = 0;
    entry *entries = NULL;
    cJSON *root = NULL;

    size_t bad = utf8_bad_at((const unsigned char *)header, len);
    if (bad < len) {
        rc = corrupt(err, path, "header: byte %zu is not valid UTF-8", bad);
        goto fail;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)header[i];
        /* JSON allows raw control bytes nowhere but as whitespace. */
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
            rc = corrupt(err, path, "header: control byte 0x%02x at byte %zu", c, i);
            goto fail;
        }
    }
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(header, len, &end, 0);
    if (!root && dt_json_valid(header)) { /* the text is JSON: memory ran out */
        rc = dt_err_set(err, DT_ENOMEM, "%s: header: out of memory parsing its JSON", path);
        goto fail;
    }
    if (!root) {
        rc = corrupt(err, path, "header: not valid JSON (error near byte %td of %zu)",
                     end ? end - header : (ptrdiff_t)0, len);
        goto fail;
    }
    for (const char *p = end; p < header + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            rc = corrupt(
                err, path,
                "header: unexpected byte at %td after the JSON (only space padding may follow)",
                p - header);
            goto fail;
        }
    if (!cJSON_IsObject(root)) {
        rc = corrupt(err, path, "header: not a JSON object");
        goto fail;
    }

    int count = 0, seen_meta = 0;
    for (const cJSON *item = root->child; item; item = item->next) {
        if (strcmp(item->string, "__metadata__") != 0) {
            count++;
            continue;
        }
        if (seen_meta++) {
            rc = corrupt(err, path, "header: __metadata__ appears twice");
            goto fail;
        }
        if ((rc = parse_meta(path, item, hm, err)) < 0) goto fail;
    }
    entries = dt_calloc(count ? (size_t)count : 1, sizeof *entries);
    if (!entries) {
        rc = dt_err_set(err, DT_ENOMEM, "%s: out of memory for %d tensor entries", path, count);
        goto fail;
    }
    int i = 0;
    for (const cJSON *item = root->child; item; item = item->next) {
        if (strcmp(item->string, "__metadata__") == 0) continue;
        if ((rc = parse_entry(path, item, data_size, &entries[i++], err)) < 0) goto fail;
    }

    qsort(entries, (size_t)count, sizeof *entries, by_name);
    for (i = 1; i < count; i++)
        if (strcmp(entries[i - 1].name, entries[i].name) == 0) {
            rc = corrupt(err, path, "header: tensor \"%s\" appears twice", entries[i].name);
            goto fail;
        }
    /* Sorted by where their bytes begin, the tensors must tile the data
     * section: each starts where the previous ended. Sizes are >= 1 byte, so
     * the order is total. */
    qsort(entries, (size_t)count, sizeof *entries, by_begin);
    uint64_t expect = 0;
    for (i = 0; i < count; i++) {
        const entry *e = &entries[i];
        if (e->begin < expect) {
            rc =
                corrupt(err, path, "header: tensors \"%s\" and \"%s\" overlap (bytes [%llu, %llu))",
                        entries[i - 1].name, e->name, (unsigned long long)e->begin,
                        (unsigned long long)(expect < e->end ? expect : e->end));
            goto fail;
        }
        if (e->begin > expect) {
            rc = corrupt(err, path,
                         "header: gap in the data section: bytes [%llu, %llu) belong to no tensor",
                         (unsigned long long)expect, (unsigned long long)e->begin);
            goto fail;
        }
        expect = e->end;
    }
    if (expect != data_size) {
        rc = corrupt(err, path,
                     "header: the data section has %llu bytes after the last tensor (tensors cover "
                     "%llu of %llu)",
                     (unsigned long long)(data_size - expect), (unsigned long long)expect,
                     (unsigned long long)data_size);
        goto fail;
    }
    *root_out = root;
    *entries_out = entries;
    *count_out = count;
    return 0;
fail:
    free(entries);
    cJSON_Delete(root);
    return rc;
}

/* ---- load ----------------------------------------------------------------- */

void dt_ckpt_meta_deinit(dt_ckpt_meta *meta) {
    if (!meta) return;
    free(meta->job);
    free(meta->feature_names);
    meta->job = meta->feature_names = NULL;
}

int dt_ckpt_load(const char *path, dt_tensors *out, dt_ckpt_meta *meta, dt_err *err) {
    DT_ASSERT(path && out);
    memset(out, 0, sizeof *out);
    int rc = 0;
    char *header = NULL;
    cJSON *root = NULL;
    entry *entries = NULL;
    dt_tensor *specs = NULL;
    dt_tensors ts = {0};
    header_meta hm;
    memset(&hm, 0, sizeof hm);

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = dt_err_set(err, errno == ENOENT ? DT_ENOTFOUND : DT_EIO, "%s: open: %s", path,
                        strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = dt_err_set(err, DT_EIO, "%s: stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = corrupt(err, path, "not a regular file");
        goto fail;
    }
    uint64_t file_size = (uint64_t)st.st_size;
    if (file_size < 8) {
        rc = corrupt(err, path,
                     "file is %llu bytes, too short for the 8-byte header length (truncated?)",
                     (unsigned long long)file_size);
        goto fail;
    }
    unsigned char len_bytes[8];
    ssize_t got = read_full(fd, len_bytes, sizeof len_bytes);
    if (got < 0) {
        rc = dt_err_set(err, DT_EIO, "%s: read: %s", path, strerror(errno));
        goto fail;
    }
    if (got != 8) {
        rc = corrupt(err, path, "file shrank while being read");
        goto fail;
    }
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--)
        header_len = header_len << 8 | len_bytes[i];
    if (header_len > HEADER_MAX) {
        rc = corrupt(err, path, "header length %llu exceeds the 100 MB limit",
                     (unsigned long long)header_len);
        goto fail;
    }
    if (header_len > file_size - 8) {
        rc = corrupt(err, path, "header length %llu exceeds the %llu bytes after it (truncated?)",
                     (unsigned long long)header_len, (unsigned long long)(file_size - 8));
        goto fail;
    }
    uint64_t data_size = file_size - 8 - header_len;

    header = dt_malloc((size_t)header_len + 1);
    if (!header) {
        rc = dt_err_set(err, DT_ENOMEM, "%s: out of memory for a %llu-byte header", path,
                        (unsigned long long)header_len);
        goto fail;
    }
    got = read_full(fd, header, (size_t)header_len);
    if (got < 0) {
        rc = dt_err_set(err, DT_EIO, "%s: read: %s", path, strerror(errno));
        goto fail;
    }
    if ((uint64_t)got != header_len) {
        rc = corrupt(err, path, "file shrank while being read");
        goto fail;
    }
    header[header_len] = '\0';

    int count = 0;
    if ((rc = parse_header(path, header, (size_t)header_len, data_size, &root, &entries, &count,
                           &hm, err)) < 0)
        goto fail;

    specs = dt_calloc(count ? (size_t)count : 1, sizeof *specs);
    if (!specs) {
        rc = dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    for (int i = 0; i < count; i++) {
        snprintf(specs[i].name, sizeof specs[i].name, "%s", entries[i].name);
        specs[i].dtype = entries[i].dtype;
        specs[i].ndim = entries[i].ndim;
        memcpy(specs[i].shape, entries[i].shape, sizeof specs[i].shape);
    }
    /* The header checks above match dt_tensor_check_spec's, so only memory
     * can fail here; anything else would still be the file's fault. */
    dt_err init_err;
    dt_err_clear(&init_err);
    if ((rc = dt_tensors_init(&ts, specs, count, &init_err)) < 0) {
        if (rc == DT_ENOMEM)
            rc = dt_err_set(err, DT_ENOMEM, "%s: %s", path, init_err.msg);
        else
            rc = corrupt(err, path, "header: %s", init_err.msg);
        goto fail;
    }

    /* The data section is read straight into the slab, tensor by tensor in
     * file order, checksumming on the way. */
    uint32_t crc = 0;
    for (int i = 0; i < ts.count; i++) {
        dt_tensor *t = &ts.items[i];
        got = read_full(fd, t->data, t->nbytes);
        if (got < 0) {
            rc = dt_err_set(err, DT_EIO, "%s: read tensor \"%s\": %s", path, t->name,
                            strerror(errno));
            goto fail;
        }
        if ((size_t)got != t->nbytes) {
            rc = corrupt(err, path, "file shrank while reading tensor \"%s\"", t->name);
            goto fail;
        }
        crc = dt_crc32c_extend(crc, t->data, t->nbytes);
    }
    if (hm.has_crc && crc != hm.crc) {
        rc = corrupt(err, path, "crc32c mismatch: header says %u, data has %u (data damaged)",
                     (unsigned)hm.crc, (unsigned)crc);
        goto fail;
    }

    if (meta) {
        /* meta is written only on success: the copies are made first. */
        char *job = NULL, *names = NULL;
        if ((hm.job && !(job = dt_strdup(hm.job))) ||
            (hm.feature_names && !(names = dt_strdup(hm.feature_names)))) {
            free(job);
            rc = dt_err_set(err, DT_ENOMEM, "%s: out of memory for the job config", path);
            goto fail;
        }
        *meta = hm.meta;
        meta->job = job;
        meta->feature_names = names;
    }
    *out = ts;
    free(specs);
    free(entries);
    cJSON_Delete(root);
    free(header);
    close(fd);
    return 0;
fail:
    dt_tensors_deinit(&ts);
    free(specs);
    free(entries);
    cJSON_Delete(root);
    free(header);
    if (fd >= 0) close(fd);
    return rc;
}

/* ---- save ----------------------------------------------------------------- */

typedef struct {
    const dt_tensors *ts;
    const char *json;
    size_t json_len;
    size_t header_len; /* json_len padded to a multiple of 8 */
} ckpt_emit;

static int emit_ckpt(int fd, const void *ctx, const char *tmp, dt_err *err) {
    const ckpt_emit *ce = ctx;
    unsigned char prefix[8 + 8];
    for (int i = 0; i < 8; i++)
        prefix[i] = (unsigned char)((uint64_t)ce->header_len >> (8 * i));
    if (write_all(fd, prefix, 8) < 0 || write_all(fd, ce->json, ce->json_len) < 0) goto io;
    memset(prefix, ' ', sizeof prefix);
    if (write_all(fd, prefix, ce->header_len - ce->json_len) < 0) goto io;
    for (int i = 0; i < ce->ts->count; i++) {
        const dt_tensor *t = &ce->ts->items[i];
        if (write_all(fd, t->data, t->nbytes) < 0) goto io;
    }
    return 0;
io:
    return dt_err_set(err, DT_EIO, "%s: write: %s", tmp, strerror(errno));
}

/* Appends item to a JSON array or object, freeing it if that fails. */
static int add_item(cJSON *parent, const char *key, cJSON *item) {
    cJSON_bool ok = item && (key ? cJSON_AddItemToObject(parent, key, item)
                                 : cJSON_AddItemToArray(parent, item));
    if (!ok) cJSON_Delete(item);
    return ok ? 0 : -1;
}

static int add_uint(cJSON *array, uint64_t v) {
    /* Raw text, not a double: keeps every integer exact and never prints an
     * exponent, which strict safetensors readers reject. */
    char buf[24];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    return add_item(array, NULL, cJSON_CreateRaw(buf));
}

/* The header JSON for ts and meta (malloc'd), or NULL when out of memory. */
static char *build_header(const dt_tensors *ts, const dt_ckpt_meta *meta, uint32_t crc) {
    char *json = NULL;
    char buf[32];
    cJSON *root = cJSON_CreateObject();
    /* add_item frees the child when the parent is NULL too. */
    if (add_item(root, "__metadata__", cJSON_CreateObject()) < 0) goto done;
    cJSON *md = root->child;
    snprintf(buf, sizeof buf, "%lld", (long long)meta->global_step);
    if (add_item(md, "global_step", cJSON_CreateString(buf)) < 0 ||
        add_item(md, "model", cJSON_CreateString(meta->model)) < 0)
        goto done;
    snprintf(buf, sizeof buf, "%lld", (long long)meta->max_steps);
    if (meta->max_steps > 0 && add_item(md, "max_steps", cJSON_CreateString(buf)) < 0) goto done;
    if (meta->job && add_item(md, "job", cJSON_CreateString(meta->job)) < 0) goto done;
    if (meta->feature_names &&
        add_item(md, "feature_names", cJSON_CreateString(meta->feature_names)) < 0)
        goto done;
    snprintf(buf, sizeof buf, "%u", (unsigned)crc);
    if (add_item(md, "crc32c", cJSON_CreateString(buf)) < 0 ||
        add_item(md, "format", cJSON_CreateString(FORMAT_V1)) < 0)
        goto done;
    uint64_t off = 0;
    for (int i = 0; i < ts->count; i++) {
        const dt_tensor *t = &ts->items[i];
        cJSON *obj = cJSON_CreateObject();
        if (add_item(root, t->name, obj) < 0) goto done;
        if (add_item(obj, "dtype", cJSON_CreateString(dt_dtype_name(t->dtype))) < 0) goto done;
        /* Made only once it can be handed to obj at once: add_item owns it. */
        cJSON *shape = cJSON_CreateArray();
        if (add_item(obj, "shape", shape) < 0) goto done;
        for (int d = 0; d < t->ndim; d++)
            if (add_uint(shape, (uint64_t)t->shape[d]) < 0) goto done;
        cJSON *offs = cJSON_CreateArray();
        if (add_item(obj, "data_offsets", offs) < 0 || add_uint(offs, off) < 0 ||
            add_uint(offs, off + t->nbytes) < 0)
            goto done;
        off += t->nbytes;
    }
    json = cJSON_PrintUnformatted(root);
done:
    cJSON_Delete(root);
    return json;
}

static int by_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* What a caller hands in is checked as strictly as what a file holds: the
 * saved file must pass dt_ckpt_load. */
static int check_save_args(const char *path, const dt_tensors *ts, const dt_ckpt_meta *meta,
                           dt_err *err) {
    if (meta->global_step < 0)
        return dt_err_set(err, DT_EINVAL, "%s: save: global_step %lld is negative", path,
                          (long long)meta->global_step);
    size_t model_len = strnlen(meta->model, sizeof meta->model);
    if (model_len == sizeof meta->model)
        return dt_err_set(err, DT_EINVAL, "%s: save: model is not NUL-terminated", path);
    if (utf8_bad_at((const unsigned char *)meta->model, model_len) < model_len)
        return dt_err_set(err, DT_EINVAL, "%s: save: model is not valid UTF-8", path);
    if (meta->job) {
        int ok = job_text_ok(meta->job);
        if (ok == DT_ENOMEM)
            return dt_err_set(err, DT_ENOMEM, "%s: save: out of memory parsing the job", path);
        if (!ok)
            return dt_err_set(err, DT_EINVAL, "%s: save: job is not a JSON object in UTF-8", path);
    }
    if (meta->feature_names &&
        utf8_bad_at((const unsigned char *)meta->feature_names, strlen(meta->feature_names)) <
            strlen(meta->feature_names))
        return dt_err_set(err, DT_EINVAL, "%s: save: feature_names is not UTF-8", path);
    if (ts->count < 0) return dt_err_set(err, DT_EINVAL, "%s: save: negative tensor count", path);
    for (int i = 0; i < ts->count; i++) {
        const dt_tensor *t = &ts->items[i];
        dt_tensor spec = *t;
        dt_err spec_err;
        dt_err_clear(&spec_err);
        if (dt_tensor_check_spec(&spec, &spec_err) < 0)
            return dt_err_set(err, DT_EINVAL, "%s: save: %s", path, spec_err.msg);
        if (spec.nbytes != t->nbytes || !t->data)
            return dt_err_set(err, DT_EINVAL, "%s: save: tensor %s: %s", path, t->name,
                              t->data ? "nbytes does not match its shape" : "no data");
        size_t len = strlen(t->name);
        if (strcmp(t->name, "__metadata__") == 0 ||
            utf8_bad_at((const unsigned char *)t->name, len) < len)
            return dt_err_set(err, DT_EINVAL, "%s: save: tensor name \"%s\" cannot be saved", path,
                              t->name);
    }
    return 0;
}

int dt_ckpt_save(const char *path, const dt_tensors *ts, const dt_ckpt_meta *meta, dt_err *err) {
    DT_ASSERT(path && ts && meta);
    int rc;
    const char **names = NULL;
    char *json = NULL;
    if ((rc = check_save_args(path, ts, meta, err)) < 0) return rc;

    names = dt_malloc((ts->count ? (size_t)ts->count : 1) * sizeof *names);
    if (!names) {
        rc = dt_err_set(err, DT_ENOMEM, "%s: save: out of memory", path);
        goto fail;
    }
    for (int i = 0; i < ts->count; i++)
        names[i] = ts->items[i].name;
    qsort(names, (size_t)ts->count, sizeof *names, by_str);
    for (int i = 1; i < ts->count; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            rc = dt_err_set(err, DT_EINVAL, "%s: save: tensor %s appears twice", path, names[i]);
            goto fail;
        }

    /* The checksum goes in the header, ahead of the data: one extra read
     * pass over the tensors, no copy of them. */
    uint32_t crc = 0;
    for (int i = 0; i < ts->count; i++)
        crc = dt_crc32c_extend(crc, ts->items[i].data, ts->items[i].nbytes);
    json = build_header(ts, meta, crc);
    if (!json) {
        rc = dt_err_set(err, DT_ENOMEM, "%s: save: out of memory building the header", path);
        goto fail;
    }
    ckpt_emit ce = {.ts = ts, .json = json, .json_len = strlen(json)};
    ce.header_len = (ce.json_len + 7) / 8 * 8;
    rc = write_atomic(path, emit_ckpt, &ce, err);
fail:
    cJSON_free(json);
    free(names);
    return rc;
}

/* ---- the log dir and its state file --------------------------------------- */

typedef struct {
    char latest[NAME_CAP]; /* model_checkpoint_path; "" when absent */
    int count, cap;
    char (*all)[NAME_CAP]; /* (count) all_model_checkpoint_paths, oldest first */
} ckpt_state;

static void state_free(ckpt_state *st) {
    free(st->all);
    memset(st, 0, sizeof *st);
}

static int state_push(ckpt_state *st, const char *name) {
    if (st->count == st->cap) {
        int cap = st->cap ? st->cap * 2 : 16;
        void *p = dt_realloc(st->all, (size_t)cap * sizeof *st->all);
        if (!p) return -1;
        st->all = p;
        st->cap = cap;
    }
    snprintf(st->all[st->count++], NAME_CAP, "%s", name);
    return 0;
}

static int join(char *buf, size_t cap, const char *dir, const char *name, dt_err *err) {
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap)
        return dt_err_set(err, DT_EINVAL, "%s: path of %s is too long", dir, name);
    return 0;
}

/* Step of "model.ckpt-<step>.safetensors" with the step written as a save
 * writes it (no leading zero, so one step has one name), or -1 for any
 * other name: those are not dtrain checkpoints, and retention never
 * deletes them. */
static int64_t ckpt_step(const char *name) {
    static const char prefix[] = "model.ckpt-", suffix[] = ".safetensors";
    size_t len = strlen(name), pl = sizeof prefix - 1, sl = sizeof suffix - 1;
    if (len <= pl + sl || strncmp(name, prefix, pl) != 0 || strcmp(name + len - sl, suffix) != 0)
        return -1;
    char digits[24];
    size_t nd = len - pl - sl;
    if (nd >= sizeof digits || (nd > 1 && name[pl] == '0')) return -1;
    memcpy(digits, name + pl, nd);
    digits[nd] = '\0';
    uint64_t v;
    if (parse_decimal(digits, INT64_MAX, &v) < 0) return -1;
    return (int64_t)v;
}

typedef struct {
    int64_t step;
    char name[NAME_CAP];
} found_ckpt;

static int by_step(const void *a, const void *b) {
    const found_ckpt *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Fills st with the dir's checkpoints, by step, oldest first: the regular
 * files named model.ckpt-<step>.safetensors (a directory or a symlink of
 * that name is someone else's). A missing dir holds none. */
static int state_scan(const char *log_dir, ckpt_state *st, dt_err *err) {
    memset(st, 0, sizeof *st);
    DIR *dir = opendir(log_dir);
    if (!dir) {
        if (errno == ENOENT) return 0;
        return dt_err_set(err, DT_EIO, "%s: open directory: %s", log_dir, strerror(errno));
    }
    int rc = 0, count = 0, cap = 0;
    found_ckpt *found = NULL;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(dir);
        if (!de) {
            if (errno)
                rc = dt_err_set(err, DT_EIO, "%s: read directory: %s", log_dir, strerror(errno));
            break;
        }
        int64_t step = ckpt_step(de->d_name);
        if (step < 0 || strlen(de->d_name) >= NAME_CAP) continue;
        char path[JOIN_CAP];
        struct stat sb;
        if (join(path, sizeof path, log_dir, de->d_name, NULL) < 0 || lstat(path, &sb) != 0 ||
            !S_ISREG(sb.st_mode))
            continue;
        if (count == cap) {
            cap = cap ? cap * 2 : 16;
            void *p = dt_realloc(found, (size_t)cap * sizeof *found);
            if (!p) {
                rc = dt_err_set(err, DT_ENOMEM, "%s: out of memory listing checkpoints", log_dir);
                break;
            }
            found = p;
        }
        found[count].step = step;
        snprintf(found[count].name, sizeof found[count].name, "%s", de->d_name);
        count++;
    }
    closedir(dir);
    if (rc == 0 && count > 0) {
        qsort(found, (size_t)count, sizeof *found, by_step);
        for (int i = 0; i < count && rc == 0; i++)
            if (state_push(st, found[i].name) < 0)
                rc = dt_err_set(err, DT_ENOMEM, "%s: out of memory listing checkpoints", log_dir);
        if (rc == 0) snprintf(st->latest, sizeof st->latest, "%s", found[count - 1].name);
    }
    free(found);
    if (rc < 0) state_free(st);
    return rc;
}

/* Parses one line 'key: "value"' (spaces around allowed). Returns 0 and
 * fills key/value, 1 for a blank or comment line, or -1 with why set. */
static int parse_state_line(char *line, const char **key, const char **value, const char **why) {
    char *p = line;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '\0' || *p == '#') return 1;
    *key = p;
    while ((*p >= 'a' && *p <= 'z') || *p == '_')
        p++;
    if (p == *key) return *why = "expected a key such as model_checkpoint_path", -1;
    char *key_end = p;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p != ':') return *why = "expected ':' after the key", -1;
    *key_end = '\0';
    p++;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p != '"') return *why = "expected a quoted value", -1;
    *value = ++p;
    while (*p && *p != '"') {
        if (*p == '\\') return *why = "escapes in the value are not supported", -1;
        if ((unsigned char)*p < 0x20) return *why = "control character in the value", -1;
        p++;
    }
    if (*p != '"') return *why = "unterminated quoted value", -1;
    *p++ = '\0';
    while (*p == ' ' || *p == '\t' || *p == '\r')
        p++;
    if (*p != '\0') return *why = "unexpected text after the value", -1;
    return 0;
}

/* Reads "<log_dir>/checkpoint". DT_ENOTFOUND when absent, DT_ECORRUPT
 * naming the line when malformed. */
static int state_load(const char *log_dir, ckpt_state *st, dt_err *err) {
    memset(st, 0, sizeof *st);
    char path[JOIN_CAP];
    int rc = join(path, sizeof path, log_dir, STATE_FILE, err);
    if (rc < 0) return rc;
    char *text = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = dt_err_set(err, errno == ENOENT ? DT_ENOTFOUND : DT_EIO, "%s: open: %s", path,
                        strerror(errno));
        goto fail;
    }
    text = dt_malloc(STATE_MAX + 1);
    if (!text) {
        rc = dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    ssize_t got = read_full(fd, text, STATE_MAX + 1);
    if (got < 0) {
        rc = dt_err_set(err, DT_EIO, "%s: read: %s", path, strerror(errno));
        goto fail;
    }
    if (got > STATE_MAX) {
        rc = corrupt(err, path, "larger than %d bytes", STATE_MAX);
        goto fail;
    }
    if (memchr(text, '\0', (size_t)got)) {
        rc = corrupt(err, path, "contains a NUL byte");
        goto fail;
    }
    text[got] = '\0';

    int line_no = 0;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        line_no++;
        const char *key = NULL, *value = NULL, *why = NULL;
        int r = parse_state_line(line, &key, &value, &why);
        if (r < 0) {
            rc = dt_err_set(err, DT_ECORRUPT, "%s:%d: %s", path, line_no, why);
            goto fail;
        }
        if (r == 0) {
            /* Entries are file names in the log dir; anything else could
             * point deletion or loading outside it. */
            size_t vlen = strlen(value);
            if (vlen == 0 || vlen >= NAME_CAP || strchr(value, '/') || strcmp(value, ".") == 0 ||
                strcmp(value, "..") == 0) {
                rc = dt_err_set(err, DT_ECORRUPT,
                                "%s:%d: \"%.60s\" is not a file name in the log dir", path, line_no,
                                value);
                goto fail;
            }
            if (strcmp(key, "model_checkpoint_path") == 0) {
                if (st->latest[0]) {
                    rc = dt_err_set(err, DT_ECORRUPT, "%s:%d: model_checkpoint_path given twice",
                                    path, line_no);
                    goto fail;
                }
                snprintf(st->latest, sizeof st->latest, "%s", value);
            } else if (strcmp(key, "all_model_checkpoint_paths") == 0) {
                if (state_push(st, value) < 0) {
                    rc = dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
                    goto fail;
                }
            } else {
                rc = dt_err_set(err, DT_ECORRUPT, "%s:%d: unknown key \"%s\"", path, line_no, key);
                goto fail;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    close(fd);
    return 0;
fail:
    free(text);
    if (fd >= 0) close(fd);
    state_free(st);
    return rc;
}

static int emit_state(int fd, const void *ctx, const char *tmp, dt_err *err) {
    const ckpt_state *st = ctx;
    char line[NAME_CAP + 64];
    int n = snprintf(line, sizeof line, "model_checkpoint_path: \"%s\"\n", st->latest);
    if (write_all(fd, line, (size_t)n) < 0) goto io;
    for (int i = 0; i < st->count; i++) {
        n = snprintf(line, sizeof line, "all_model_checkpoint_paths: \"%s\"\n", st->all[i]);
        if (write_all(fd, line, (size_t)n) < 0) goto io;
    }
    return 0;
io:
    return dt_err_set(err, DT_EIO, "%s: write: %s", tmp, strerror(errno));
}

/* mkdir -p: creates dir and any missing parents. */
static int mkdir_p(const char *dir, dt_err *err) {
    char buf[JOIN_CAP];
    size_t len = strlen(dir);
    if (len == 0) return dt_err_set(err, DT_EINVAL, "log dir: empty path");
    if (len >= sizeof buf) return dt_err_set(err, DT_EINVAL, "%s: path too long", dir);
    memcpy(buf, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        if (buf[i - 1] == '/') continue; /* "a//b" */
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return dt_err_set(err, DT_EIO, "%s: mkdir %s: %s", dir, buf, strerror(errno));
        buf[i] = saved;
    }
    struct stat st;
    if (stat(dir, &st) != 0) return dt_err_set(err, DT_EIO, "%s: stat: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return dt_err_set(err, DT_EIO, "%s: not a directory", dir);
    return 0;
}

/* ---- retention ------------------------------------------------------------ */

/* Test-only fault injection (checkpoint.h): with DT_TEST_CKPT_KILL set to
 * point, the process SIGKILLs itself here, leaving the dir as a crash at
 * this moment would. Unset, as in every real run, it is one getenv. */
static void crash_point(const char *point) {
    const char *want = getenv("DT_TEST_CKPT_KILL");
    if (want && strcmp(want, point) == 0) raise(SIGKILL);
}

/* The new list is built from the files present, not from the old state
 * file; that is read only to say so when it was unreadable. */
static void warn_bad_state(const char *log_dir) {
    ckpt_state old;
    dt_err state_err;
    dt_err_clear(&state_err);
    int rc = state_load(log_dir, &old, &state_err);
    if (rc == 0)
        state_free(&old);
    else if (rc != DT_ENOTFOUND)
        dt_log(DT_LOG_WARN, "checkpoint: %s; writing a new one from the checkpoint files present",
               state_err.msg);
}

/* Makes the dir hold this run's history up to anchor, a checkpoint in it
 * that is durable (just saved, or just restored). The state file names
 * anchor as latest and lists the newest max_to_keep (<= 0: all) of the
 * checkpoints present whose step is at most anchor's, by step. The list is
 * rebuilt from the files every time: a file an old list lost (a chief killed
 * between its state update and its deletions) is ranked by its step like any
 * other, never kept as if it were new. Only once that state file is durable
 * are the checkpoints it leaves out deleted: the older ones beyond
 * max_to_keep and, with drop_futures, those above anchor's step. Those are
 * stale futures: written by an earlier incarnation that got further than the
 * checkpoint this run restored (one skipped as corrupt, or rolled back from
 * by editing the state file); kept, they would outrank every new save. Files
 * that are not checkpoints (state_scan's) are never deleted. On failure
 * nothing is deleted and the old state file stands. */
static int retain(const char *log_dir, const char *anchor, int max_to_keep, int drop_futures,
                  dt_err *err) {
    int64_t top = ckpt_step(anchor);
    DT_ASSERT(top >= 0);
    char state_path[JOIN_CAP];
    ckpt_state present;
    int rc = join(state_path, sizeof state_path, log_dir, STATE_FILE, err);
    if (rc < 0) return rc;
    if ((rc = state_scan(log_dir, &present, err)) < 0) return rc;
    /* present is by step: the history is its prefix up to anchor. */
    int end = 0;
    while (end < present.count && ckpt_step(present.all[end]) <= top)
        end++;
    if (end == 0 || strcmp(present.all[end - 1], anchor) != 0) {
        rc = dt_err_set(err, DT_EIO,
                        "%s/%s: gone, or not a regular file, before the state file "
                        "could name it",
                        log_dir, anchor);
        goto fail;
    }
    int begin = max_to_keep > 0 && end > max_to_keep ? end - max_to_keep : 0;
    ckpt_state kept = present; /* a view: no list of its own */
    snprintf(kept.latest, sizeof kept.latest, "%s", anchor);
    kept.all += begin;
    kept.count = end - begin;
    if ((rc = write_atomic(state_path, emit_state, &kept, err)) < 0) goto fail;

    int futures = drop_futures ? present.count - end : 0;
    if (begin > 0 || futures > 0) crash_point("before_delete");
    for (int i = 0; i < present.count; i++) {
        int future = i >= end;
        if ((i >= begin && !future) || (future && !drop_futures)) continue;
        char old[JOIN_CAP];
        if (join(old, sizeof old, log_dir, present.all[i], NULL) < 0) continue;
        if (future)
            dt_log(DT_LOG_INFO,
                   "checkpoint: deleting %s: a stale future, written before this run went back "
                   "to an earlier step (%s is now the latest)",
                   old, anchor);
        if (unlink(old) != 0 && errno != ENOENT)
            dt_log(DT_LOG_WARN, "checkpoint: %s: cannot delete old checkpoint: %s", old,
                   strerror(errno));
    }
    rc = 0;
fail:
    state_free(&present);
    return rc;
}

int dt_ckpt_save_in_dir(const char *log_dir, const dt_tensors *ts, const dt_ckpt_meta *meta,
                        int max_to_keep, char *path_out, size_t path_cap, dt_err *err) {
    DT_ASSERT(log_dir && ts && meta);
    char name[NAME_CAP], path[JOIN_CAP];
    int rc;
    if (meta->global_step < 0)
        return dt_err_set(err, DT_EINVAL, "%s: save: global_step %lld is negative", log_dir,
                          (long long)meta->global_step);
    snprintf(name, sizeof name, "model.ckpt-%lld.safetensors", (long long)meta->global_step);
    if ((rc = join(path, sizeof path, log_dir, name, err)) < 0) return rc;
    if (path_out && strlen(path) >= path_cap)
        return dt_err_set(err, DT_EINVAL, "%s: path_out holds %zu bytes, the path needs %zu", path,
                          path_cap, strlen(path) + 1);
    if ((rc = mkdir_p(log_dir, err)) < 0) return rc;
    /* A file of this step already there (listed, or left by a save cut
     * short) is replaced by the rename: it is this save's from then on and
     * stays even if the state file cannot be written. */
    struct stat sb;
    int existed = lstat(path, &sb) == 0;
    if ((rc = dt_ckpt_save(path, ts, meta, err)) < 0) return rc;
    crash_point("before_state");
    warn_bad_state(log_dir);
    if ((rc = retain(log_dir, name, max_to_keep, 1, err)) < 0) {
        /* The old state file stands; a new checkpoint it does not list
         * would be invisible to tools that read it, and it holds space the
         * disk lacks. The caller retries the whole save. */
        if (!existed && unlink(path) != 0 && errno != ENOENT)
            dt_log(DT_LOG_WARN, "checkpoint: %s: cannot remove after the state file failed: %s",
                   path, strerror(errno));
        return rc;
    }
    if (path_out) snprintf(path_out, path_cap, "%s", path);
    return 0;
}

int dt_ckpt_retain(const char *log_dir, int max_to_keep, dt_err *err) {
    DT_ASSERT(log_dir);
    dt_tensors ts;
    char path[JOIN_CAP];
    int rc = dt_ckpt_restore_latest(log_dir, &ts, NULL, path, sizeof path, err);
    if (rc <= 0) return rc;
    dt_tensors_deinit(&ts);
    const char *name = strrchr(path, '/') + 1; /* restore joins "<log_dir>/<name>" */
    /* A file the state file names by another name anchors nothing: there
     * is no step to rank the others against. */
    if (ckpt_step(name) < 0) return 0;
    /* No newer checkpoint was saved: files above the one restore picked
     * (corrupt ones it skipped) stay, as restore keeps them. */
    rc = retain(log_dir, name, max_to_keep, 0, err);
    return rc < 0 ? rc : 1;
}

int64_t dt_ckpt_latest_step(const char *log_dir) {
    ckpt_state st;
    int64_t step = -1;
    if (state_load(log_dir, &st, NULL) == 0) {
        char path[JOIN_CAP];
        struct stat sb;
        if (st.latest[0] && join(path, sizeof path, log_dir, st.latest, NULL) == 0 &&
            stat(path, &sb) == 0)
            step = ckpt_step(st.latest);
        state_free(&st);
        if (step >= 0) return step;
    }
    if (state_scan(log_dir, &st, NULL) < 0) return -1;
    if (st.latest[0]) step = ckpt_step(st.latest);
    state_free(&st);
    return step;
}

/* 1 when log_dir/name was modified no earlier than the state file (or
 * there is no state file). */
static int written_after_state(const char *log_dir, const char *name) {
    char state[JOIN_CAP], path[JOIN_CAP];
    struct stat ss, cs;
    if (join(state, sizeof state, log_dir, STATE_FILE, NULL) < 0 ||
        join(path, sizeof path, log_dir, name, NULL) < 0 || stat(path, &cs) != 0)
        return 0;
    if (stat(state, &ss) != 0) return 1;
    return cs.st_mtim.tv_sec > ss.st_mtim.tv_sec ||
           (cs.st_mtim.tv_sec == ss.st_mtim.tv_sec && cs.st_mtim.tv_nsec >= ss.st_mtim.tv_nsec);
}

int dt_ckpt_restore_latest(const char *log_dir, dt_tensors *out, dt_ckpt_meta *meta, char *path_out,
                           size_t path_cap, dt_err *err) {
    DT_ASSERT(log_dir && out);
    memset(out, 0, sizeof *out);
    ckpt_state st, disk;
    memset(&disk, 0, sizeof disk);
    const char **candidates = NULL;
    dt_err state_err;
    dt_err_clear(&state_err);
    int rc = state_load(log_dir, &st, &state_err);
    if (rc == DT_ENOTFOUND || (rc == 0 && !st.latest[0] && st.count == 0)) {
        /* No state file (or an empty one): a crash between a checkpoint's
         * rename and the state update must not lose it, so take the files
         * on disk, highest step first. */
        state_free(&st);
        if ((rc = state_scan(log_dir, &st, err)) < 0) return rc;
        if (st.count == 0) return 0;
        dt_log(DT_LOG_WARN, "checkpoint: %s has no state file; taking the highest step, %s",
               log_dir, st.latest);
    } else if (rc < 0) {
        state_free(&st); /* already empty; keeps ownership obvious */
        return dt_err_set(err, rc, "%s", state_err.msg);
    }

    /* A save writes its checkpoint (fsynced, renamed into place) before it
     * names it in the state file; a kill between the two leaves a complete
     * checkpoint newer than the state file's latest, and written after the
     * state file. It is the job's last durable work, so it comes first
     * (newest first), then model_checkpoint_path, then the list from its
     * end. One older than the state file is not: the file was edited after
     * it (an operator rolling back), and the state file is obeyed. */
    if ((rc = state_scan(log_dir, &disk, err)) < 0) goto fail;
    candidates = dt_malloc(((size_t)st.count + (size_t)disk.count + 1) * sizeof *candidates);
    if (!candidates) {
        rc = dt_err_set(err, DT_ENOMEM, "%s: restore: out of memory", log_dir);
        goto fail;
    }
    int n = 0;
    int64_t listed = st.latest[0] ? ckpt_step(st.latest) : -1;
    for (int i = disk.count - 1; i >= 0 && ckpt_step(disk.all[i]) > listed; i--) {
        if (!written_after_state(log_dir, disk.all[i])) continue;
        if (n == 0)
            dt_log(DT_LOG_WARN,
                   "checkpoint: %s/%s is newer than the state file's latest (%s): a save was cut "
                   "short before naming it; taking it",
                   log_dir, disk.all[i], st.latest[0] ? st.latest : "none");
        candidates[n++] = disk.all[i];
    }
    if (st.latest[0]) candidates[n++] = st.latest;
    for (int i = st.count - 1; i >= 0; i--)
        if (strcmp(st.all[i], st.latest) != 0) candidates[n++] = st.all[i];

    int corrupt_seen = 0;
    char last_msg[DT_ERR_MSG_MAX] = "";
    for (int i = 0; i < n; i++) {
        char path[JOIN_CAP];
        if ((rc = join(path, sizeof path, log_dir, candidates[i], err)) < 0) goto fail;
        if (path_out && strlen(path) >= path_cap) {
            rc = dt_err_set(err, DT_EINVAL, "%s: path_out holds %zu bytes, the path needs %zu",
                            path, path_cap, strlen(path) + 1);
            goto fail;
        }
        dt_err load_err;
        dt_err_clear(&load_err);
        int lrc = dt_ckpt_load(path, out, meta, &load_err);
        if (lrc == 0) {
            if (path_out) snprintf(path_out, path_cap, "%s", path);
            rc = 1;
            goto fail; /* success shares the cleanup */
        }
        if (lrc != DT_ECORRUPT && lrc != DT_ENOTFOUND) {
            rc = dt_err_set(err, lrc, "%s", load_err.msg);
            goto fail;
        }
        /* Keep the bad file as evidence; just move on to an older one. */
        corrupt_seen |= lrc == DT_ECORRUPT;
        snprintf(last_msg, sizeof last_msg, "%s", load_err.msg);
        dt_log(DT_LOG_WARN, "checkpoint: skipping %s: %s", path, load_err.msg);
    }
    rc = dt_err_set(err, corrupt_seen ? DT_ECORRUPT : DT_ENOTFOUND,
                    "%s: restore: none of the %d checkpoints loads (the oldest: %s)", log_dir, n,
                    last_msg);
fail:
    free(candidates);
    state_free(&disk);
    state_free(&st);
    return rc;
}

/* ---- log-dir lock ------------------------------------------------------ */

/* 1 for "<name>.tmp.<pid>" where name is the state file's or a
 * checkpoint's: the temporaries write_atomic makes in a log dir. Anything
 * else with ".tmp." in its name is not ours to remove. */
static int is_our_temp(const char *file) {
    const char *t = strstr(file, ".tmp.");
    uint64_t pid;
    char base[NAME_CAP];
    if (!t || (size_t)(t - file) >= sizeof base || parse_decimal(t + 5, INT64_MAX, &pid) < 0)
        return 0;
    memcpy(base, file, (size_t)(t - file));
    base[t - file] = '\0';
    return strcmp(base, STATE_FILE) == 0 || ckpt_step(base) >= 0;
}

/* Removes the temporaries of a writer that died mid-save. Only safe while
 * holding the log-dir lock (no live writer can own one). */
static void remove_stale_temps(const char *log_dir) {
    DIR *d = opendir(log_dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!is_our_temp(e->d_name)) continue;
        char path[JOIN_CAP];
        snprintf(path, sizeof path, "%s/%s", log_dir, e->d_name);
        if (unlink(path) == 0) dt_log(DT_LOG_INFO, "checkpoint: removed stale %s", path);
    }
    closedir(d);
}

int dt_ckpt_lock_dir(const char *log_dir, int *fd_out, dt_err *err) {
    *fd_out = -1;
    int rc = mkdir_p(log_dir, err);
    if (rc < 0) return rc;
    char path[JOIN_CAP];
    snprintf(path, sizeof path, "%s/dtrain.lock", log_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return dt_err_set(err, DT_EIO, "%s: cannot open: %s", path, strerror(errno));
    /* flock, not fcntl: it belongs to this open file, so even a second
     * lock attempt from the same process is refused. */
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int saved = errno;
        char holder[32] = "";
        ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        close(fd);
        if (saved == EWOULDBLOCK)
            return dt_err_set(err, DT_EEXIST,
                              "%s: locked by another chief (pid %s); two chiefs must not share a "
                              "log dir",
                              log_dir, holder[0] ? holder : "?");
        return dt_err_set(err, DT_EIO, "%s: cannot lock: %s", path, strerror(saved));
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    /* The pid only helps a person name the holder; the flock is the lock.
     * A full disk must not stop a chief from locking its log dir. */
    if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)len, 0) != len)
        dt_log(DT_LOG_WARN, "%s: cannot write the owner's pid: %s", path, strerror(errno));
    remove_stale_temps(log_dir);
    *fd_out = fd;
    return 0;
}

void dt_ckpt_unlock_dir(int fd) {
    if (fd >= 0) close(fd); /* closing releases the lock */
}
