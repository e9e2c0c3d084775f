/*
 * safetensors: dtrain's checkpoint file (see safetensors.h).
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
 * A load reads the header, parses and checks it, lays out the tensors it
 * describes in one slab, then reads the data section straight into that
 * slab, checksumming on the way. A save checks what it is given as strictly
 * as a load checks a file, then writes the file atomically (fileio.h).
 *
 * Threading: no globals of its own; calls on different paths may run
 * concurrently (cJSON records its last parse error position in a global of
 * its own, which concurrent loads may both write; nothing here reads it).
 */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "crc32c.h"
#include "fileio.h"
#include "jsonpos.h"
#include "text.h"

/* The data section is copied verbatim to and from memory, and tensor.h
 * keeps host order, which safetensors fixes as little-endian. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

#define FORMAT_V1 "dtrain.checkpoint.v1"
#define HEADER_MAX ((uint64_t)100 * 1000 * 1000) /* safetensors' own limit */
#define INT_EXACT_MAX 9007199254740992.0         /* 2^53: JSON numbers are doubles */
#define DIM_MAX ((int64_t)1 << 40)               /* as dt_tensor_check_spec */

/* ---- parsing helpers ------------------------------------------------------ */

/* Index of the first byte of s[0..n) that is not well-formed UTF-8, or n. */
static size_t utf8_bad_at(const char *s, size_t n) {
    return dt_text_utf8_prefix((const unsigned char *)s, n);
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
    dt_safetensors_meta meta;
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
 * decode to bytes that are not), as dt_safetensors_save wants it; 0 when it is
 * not; DT_ENOMEM when cJSON ran out of memory on text that is JSON (so a
 * good checkpoint is never judged corrupt for want of memory). */
static int job_text_ok(const char *text) {
    size_t n = strlen(text);
    if (utf8_bad_at(text, n) < n) return 0;
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
            if (dt_text_parse_decimal(v, INT64_MAX, &u) < 0)
                return corrupt(
                    err, path,
                    "header: __metadata__ global_step \"%.40s\" is not a decimal int64 >= 0", v);
            hm->meta.global_step = (int64_t)u;
            hm->has_step = 1;
        } else if (strcmp(kv->string, "max_steps") == 0) {
            if (dt_text_parse_decimal(v, INT64_MAX, &u) < 0)
                return corrupt(
                    err, path,
                    "header: __metadata__ max_steps \"%.40s\" is not a decimal int64 >= 0", v);
            hm->meta.max_steps = (int64_t)u;
        } else if (strcmp(kv->string, "crc32c") == 0) {
            if (dt_text_parse_decimal(v, UINT32_MAX, &u) < 0)
                return corrupt(err, path,
                               "header: __metadata__ crc32c \"%.40s\" is not a decimal u32", v);
            hm->crc = (uint32_t)u;
            hm->has_crc = 1;
        } else if (strcmp(kv->string, "model") == 0) {
            if (strlen(v) >= sizeof hm->meta.model)
                return corrupt(err, path, "header: __metadata__ model is longer than %d bytes",
                               DT_SAFETENSORS_MODEL_MAX - 1);
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
        } else if (strcmp(kv->string, "job_id") == 0) {
            if (!dt_safetensors_job_id_ok(v))
                return corrupt(err, path,
                               "header: __metadata__ job_id \"%.40s\" is not 32 lowercase hex "
                               "digits",
                               v);
            snprintf(hm->meta.job_id, sizeof hm->meta.job_id, "%s", v);
        } else if (strcmp(kv->string, "stopped_early") == 0) {
            if (strcmp(v, "true") != 0)
                return corrupt(err, path,
                               "header: __metadata__ stopped_early \"%.40s\" is not "
                               "\"true\"",
                               v);
            hm->meta.stopped_early = 1;
        } else if (strcmp(kv->string, "evals_without_gain") == 0) {
            if (dt_text_parse_decimal(v, INT_MAX, &u) < 0)
                return corrupt(err, path,
                               "header: __metadata__ evals_without_gain \"%.40s\" is not a "
                               "decimal int >= 0",
                               v);
            hm->meta.evals_without_gain = (int)u;
        } else if (strcmp(kv->string, "eval_loss") == 0) {
            char *end = NULL;
            errno = 0;
            double x = strtod(v, &end);
            if (!*v || *end || errno || !isfinite(x))
                return corrupt(err, path,
                               "header: __metadata__ eval_loss \"%.40s\" is not a "
                               "finite number",
                               v);
            hm->meta.eval_loss = x;
            hm->meta.has_eval_loss = 1;
        } else if (strcmp(kv->string, "feature_names") == 0) {
            if (utf8_bad_at(v, strlen(v)) < strlen(v))
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

/* Checks the header's text and parses it: valid UTF-8, no raw control
 * bytes, one JSON object followed by nothing but space padding. On success
 * *root_out is the parsed object (the caller deletes it). */
static int parse_header_text(const char *path, const char *header, size_t len, cJSON **root_out,
                             dt_err *err) {
    size_t bad = utf8_bad_at(header, len);
    if (bad < len) return corrupt(err, path, "header: byte %zu is not valid UTF-8", bad);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)header[i];
        /* JSON allows raw control bytes nowhere but as whitespace. */
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
            return corrupt(err, path, "header: control byte 0x%02x at byte %zu", c, i);
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(header, len, &end, 0);
    if (!root && dt_json_valid(header)) /* the text is JSON: memory ran out */
        return dt_err_set(err, DT_ENOMEM, "%s: header: out of memory parsing its JSON", path);
    if (!root)
        return corrupt(err, path, "header: not valid JSON (error near byte %td of %zu)",
                       end ? end - header : (ptrdiff_t)0, len);
    int rc = 0;
    for (const char *p = end; p < header + len && rc == 0; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            rc = corrupt(
                err, path,
                "header: unexpected byte at %td after the JSON (only space padding may follow)",
                p - header);
    if (rc == 0 && !cJSON_IsObject(root)) rc = corrupt(err, path, "header: not a JSON object");
    if (rc < 0) {
        cJSON_Delete(root);
        return rc;
    }
    *root_out = root;
    return 0;
}

/* Sorted by where their bytes begin (as entries are on return), the
 * tensors must tile the data section: no name twice, each tensor starting
 * where the previous ended, the last ending where the section does. */
static int check_tiling(const char *path, entry *entries, int count, uint64_t data_size,
                        dt_err *err) {
    qsort(entries, (size_t)count, sizeof *entries, by_name);
    for (int i = 1; i < count; i++)
        if (strcmp(entries[i - 1].name, entries[i].name) == 0)
            return corrupt(err, path, "header: tensor \"%s\" appears twice", entries[i].name);
    /* Sizes are >= 1 byte, so the order by begin is total. */
    qsort(entries, (size_t)count, sizeof *entries, by_begin);
    uint64_t expect = 0;
    for (int i = 0; i < count; i++) {
        const entry *e = &entries[i];
        if (e->begin < expect)
            return corrupt(err, path,
                           "header: tensors \"%s\" and \"%s\" overlap (bytes [%llu, %llu))",
                           entries[i - 1].name, e->name, (unsigned long long)e->begin,
                           (unsigned long long)(expect < e->end ? expect : e->end));
        if (e->begin > expect)
            return corrupt(
                err, path,
                "header: gap in the data section: bytes [%llu, %llu) belong to no tensor",
                (unsigned long long)expect, (unsigned long long)e->begin);
        expect = e->end;
    }
    if (expect != data_size)
        return corrupt(err, path,
                       "header: the data section has %llu bytes after the last tensor (tensors "
                       "cover %llu of %llu)",
                       (unsigned long long)(data_size - expect), (unsigned long long)expect,
                       (unsigned long long)data_size);
    return 0;
}

/* Parses and validates the header; on success *entries_out (owned by the
 * caller, names borrowed from *root_out) lists the tensors in data order. */
static int parse_header(const char *path, const char *header, size_t len, uint64_t data_size,
                        cJSON **root_out, entry **entries_out, int *count_out, header_meta *hm,
                        dt_err *err) {
    entry *entries = NULL;
    cJSON *root = NULL;
    int rc = parse_header_text(path, header, len, &root, err);
    if (rc < 0) return rc;
    DT_ASSERT(root); /* set whenever it returns 0 */

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
    if ((rc = check_tiling(path, entries, count, data_size, err)) < 0) goto fail;
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

/* Reads the header length and the header of the open file fd: *header_out
 * (malloc'd, NUL-terminated, *len_out bytes before the NUL) and the size of
 * the data section after it. */
static int read_header(int fd, const char *path, char **header_out, size_t *len_out,
                       uint64_t *data_size, dt_err *err) {
    struct stat st;
    if (fstat(fd, &st) != 0) return dt_err_set(err, DT_EIO, "%s: stat: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return corrupt(err, path, "not a regular file");
    uint64_t file_size = (uint64_t)st.st_size;
    if (file_size < 8)
        return corrupt(err, path,
                       "file is %llu bytes, too short for the 8-byte header length (truncated?)",
                       (unsigned long long)file_size);
    unsigned char len_bytes[8];
    ssize_t got = dt_fileio_read_full(fd, len_bytes, sizeof len_bytes);
    if (got < 0) return dt_err_set(err, DT_EIO, "%s: read: %s", path, strerror(errno));
    if (got != 8) return corrupt(err, path, "file shrank while being read");
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--)
        header_len = header_len << 8 | len_bytes[i];
    if (header_len > HEADER_MAX)
        return corrupt(err, path, "header length %llu exceeds the 100 MB limit",
                       (unsigned long long)header_len);
    if (header_len > file_size - 8)
        return corrupt(err, path, "header length %llu exceeds the %llu bytes after it (truncated?)",
                       (unsigned long long)header_len, (unsigned long long)(file_size - 8));

    char *header = dt_malloc((size_t)header_len + 1);
    if (!header)
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory for a %llu-byte header", path,
                          (unsigned long long)header_len);
    got = dt_fileio_read_full(fd, header, (size_t)header_len);
    if (got < 0 || (uint64_t)got != header_len) {
        int rc = got < 0 ? dt_err_set(err, DT_EIO, "%s: read: %s", path, strerror(errno))
                         : corrupt(err, path, "file shrank while being read");
        free(header);
        return rc;
    }
    header[header_len] = '\0';
    *header_out = header;
    *len_out = (size_t)header_len;
    *data_size = file_size - 8 - header_len;
    return 0;
}

/* Lays out the tensors the entries describe, in their order, in a new set
 * *ts with a zeroed slab. */
static int make_tensors(const char *path, const entry *entries, int count, dt_tensors *ts,
                        dt_err *err) {
    dt_tensor *specs = dt_calloc(count ? (size_t)count : 1, sizeof *specs);
    if (!specs) return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
    for (int i = 0; i < count; i++) {
        snprintf(specs[i].name, sizeof specs[i].name, "%s", entries[i].name);
        specs[i].dtype = entries[i].dtype;
        specs[i].ndim = entries[i].ndim;
        memcpy(specs[i].shape, entries[i].shape, sizeof specs[i].shape);
    }
    /* The header checks match dt_tensor_check_spec's, so only memory can
     * fail here; anything else would still be the file's fault. */
    dt_err init_err;
    dt_err_clear(&init_err);
    int rc = dt_tensors_init(ts, specs, count, &init_err);
    if (rc == DT_ENOMEM)
        rc = dt_err_set(err, DT_ENOMEM, "%s: %s", path, init_err.msg);
    else if (rc < 0)
        rc = corrupt(err, path, "header: %s", init_err.msg);
    free(specs);
    return rc;
}

/* Reads the data section from fd straight into ts's slab, tensor by tensor
 * in file order, and checks its CRC-32C against the header's when it has
 * one. */
static int read_data(int fd, const char *path, dt_tensors *ts, const header_meta *hm, dt_err *err) {
    uint32_t crc = 0;
    for (int i = 0; i < ts->count; i++) {
        dt_tensor *t = &ts->items[i];
        ssize_t got = dt_fileio_read_full(fd, t->data, t->nbytes);
        if (got < 0)
            return dt_err_set(err, DT_EIO, "%s: read tensor \"%s\": %s", path, t->name,
                              strerror(errno));
        if ((size_t)got != t->nbytes)
            return corrupt(err, path, "file shrank while reading tensor \"%s\"", t->name);
        crc = dt_crc32c_extend(crc, t->data, t->nbytes);
    }
    if (hm->has_crc && crc != hm->crc)
        return corrupt(err, path, "crc32c mismatch: header says %u, data has %u (data damaged)",
                       (unsigned)hm->crc, (unsigned)crc);
    return 0;
}

/* Fills *meta from the parsed header, with its own copies of the strings
 * borrowed from it; *meta is written only once every copy is made. */
static int copy_meta(const char *path, const header_meta *hm, dt_safetensors_meta *meta,
                     dt_err *err) {
    char *job = NULL, *names = NULL;
    if ((hm->job && !(job = dt_strdup(hm->job))) ||
        (hm->feature_names && !(names = dt_strdup(hm->feature_names)))) {
        free(job);
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory for the job config", path);
    }
    *meta = hm->meta;
    meta->job = job;
    meta->feature_names = names;
    return 0;
}

void dt_safetensors_meta_deinit(dt_safetensors_meta *meta) {
    if (!meta) return;
    free(meta->job);
    free(meta->feature_names);
    meta->job = meta->feature_names = NULL;
}

int dt_safetensors_load(const char *path, dt_tensors *out, dt_safetensors_meta *meta, dt_err *err) {
    DT_ASSERT(path && out);
    memset(out, 0, sizeof *out);
    int rc = 0, count = 0;
    char *header = NULL;
    size_t header_len = 0;
    uint64_t data_size = 0;
    cJSON *root = NULL;
    entry *entries = NULL;
    dt_tensors ts = {0};
    header_meta hm;
    memset(&hm, 0, sizeof hm);

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = dt_err_set(err, errno == ENOENT ? DT_ENOTFOUND : DT_EIO, "%s: open: %s", path,
                        strerror(errno));
        goto fail;
    }
    if ((rc = read_header(fd, path, &header, &header_len, &data_size, err)) < 0 ||
        (rc = parse_header(path, header, header_len, data_size, &root, &entries, &count, &hm,
                           err)) < 0 ||
        (rc = make_tensors(path, entries, count, &ts, err)) < 0 ||
        (rc = read_data(fd, path, &ts, &hm, err)) < 0 ||
        (meta && (rc = copy_meta(path, &hm, meta, err)) < 0))
        goto fail;
    *out = ts;
    memset(&ts, 0, sizeof ts); /* handed to the caller */
fail:
    dt_tensors_deinit(&ts);
    free(entries);
    cJSON_Delete(root);
    free(header);
    if (fd >= 0) close(fd);
    return rc;
}

int dt_safetensors_load_meta(const char *path, dt_safetensors_meta *meta, dt_err *err) {
    DT_ASSERT(path && meta);
    int rc = 0, count = 0;
    char *header = NULL;
    size_t header_len = 0;
    uint64_t data_size = 0;
    cJSON *root = NULL;
    entry *entries = NULL;
    header_meta hm;
    memset(&hm, 0, sizeof hm);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = dt_err_set(err, errno == ENOENT ? DT_ENOTFOUND : DT_EIO, "%s: open: %s", path,
                        strerror(errno));
        goto fail;
    }
    if ((rc = read_header(fd, path, &header, &header_len, &data_size, err)) < 0 ||
        (rc = parse_header(path, header, header_len, data_size, &root, &entries, &count, &hm,
                           err)) < 0)
        goto fail;
    rc = copy_meta(path, &hm, meta, err);
fail:
    free(entries);
    cJSON_Delete(root);
    free(header);
    if (fd >= 0) close(fd);
    return rc;
}

int dt_safetensors_job_id_ok(const char *text) {
    size_t n = 0;
    for (; text[n]; n++)
        if (!((text[n] >= '0' && text[n] <= '9') || (text[n] >= 'a' && text[n] <= 'f'))) return 0;
    return n == DT_SAFETENSORS_JOB_ID_MAX - 1;
}

/* ---- save ----------------------------------------------------------------- */

#define COPY_BUF (1 << 20) /* bytes a part's file is copied by */
#define ROWS_DIR_MAX 4096  /* a rows writer's directory, with its file names */

typedef struct {
    const dt_tensors *ts; /* every tensor of the file, in file order */
    int in_memory;        /* ts->items[0, in_memory) have their data */
    const int *part_fds;  /* the others are in these files, from offset 0 */
    unsigned char *buf;   /* COPY_BUF bytes to copy them by */
    const char *json;
    size_t json_len;
    size_t header_len; /* json_len padded to a multiple of 8 */
} file_emit;

/* Copies nbytes from the start of fd to out. -1 with errno set, EIO for a
 * file shorter than nbytes. */
static int copy_part(int fd, size_t nbytes, unsigned char *buf, int out) {
    for (off_t at = 0; nbytes > 0;) {
        size_t want = nbytes < COPY_BUF ? nbytes : COPY_BUF;
        ssize_t got = pread(fd, buf, want, at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            if (got == 0) errno = EIO;
            return -1;
        }
        if (dt_fileio_write_all(out, buf, (size_t)got) < 0) return -1;
        at += got;
        nbytes -= (size_t)got;
    }
    return 0;
}

static int emit_file(int fd, const void *ctx, const char *tmp, dt_err *err) {
    const file_emit *ce = ctx;
    unsigned char prefix[8 + 8];
    for (int i = 0; i < 8; i++)
        prefix[i] = (unsigned char)((uint64_t)ce->header_len >> (8 * i));
    if (dt_fileio_write_all(fd, prefix, 8) < 0 ||
        dt_fileio_write_all(fd, ce->json, ce->json_len) < 0)
        goto io;
    memset(prefix, ' ', sizeof prefix);
    if (dt_fileio_write_all(fd, prefix, ce->header_len - ce->json_len) < 0) goto io;
    for (int i = 0; i < ce->ts->count; i++) {
        const dt_tensor *t = &ce->ts->items[i];
        if (i < ce->in_memory
                ? dt_fileio_write_all(fd, t->data, t->nbytes) < 0
                : copy_part(ce->part_fds[i - ce->in_memory], t->nbytes, ce->buf, fd) < 0)
            goto io;
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
static char *build_header(const dt_tensors *ts, const dt_safetensors_meta *meta, uint32_t crc) {
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
    if (meta->job_id[0] && add_item(md, "job_id", cJSON_CreateString(meta->job_id)) < 0) goto done;
    snprintf(buf, sizeof buf, "%.17g", meta->eval_loss);
    if (meta->has_eval_loss && add_item(md, "eval_loss", cJSON_CreateString(buf)) < 0) goto done;
    if (meta->stopped_early && add_item(md, "stopped_early", cJSON_CreateString("true")) < 0)
        goto done;
    snprintf(buf, sizeof buf, "%d", meta->evals_without_gain);
    if (meta->evals_without_gain > 0 &&
        add_item(md, "evals_without_gain", cJSON_CreateString(buf)) < 0)
        goto done;
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
 * saved file must pass dt_safetensors_load. Tensors from in_memory on are
 * streamed parts: no data in memory. */
static int check_save_args(const char *path, const dt_tensors *ts, int in_memory,
                           const dt_safetensors_meta *meta, dt_err *err) {
    if (meta->global_step < 0)
        return dt_err_set(err, DT_EINVAL, "%s: save: global_step %lld is negative", path,
                          (long long)meta->global_step);
    size_t model_len = strnlen(meta->model, sizeof meta->model);
    if (model_len == sizeof meta->model)
        return dt_err_set(err, DT_EINVAL, "%s: save: model is not NUL-terminated", path);
    if (utf8_bad_at(meta->model, model_len) < model_len)
        return dt_err_set(err, DT_EINVAL, "%s: save: model is not valid UTF-8", path);
    if (meta->job) {
        int ok = job_text_ok(meta->job);
        if (ok == DT_ENOMEM)
            return dt_err_set(err, DT_ENOMEM, "%s: save: out of memory parsing the job", path);
        if (!ok)
            return dt_err_set(err, DT_EINVAL, "%s: save: job is not a JSON object in UTF-8", path);
    }
    if (meta->feature_names &&
        utf8_bad_at(meta->feature_names, strlen(meta->feature_names)) < strlen(meta->feature_names))
        return dt_err_set(err, DT_EINVAL, "%s: save: feature_names is not UTF-8", path);
    if (strnlen(meta->job_id, sizeof meta->job_id) == sizeof meta->job_id ||
        (meta->job_id[0] && !dt_safetensors_job_id_ok(meta->job_id)))
        return dt_err_set(err, DT_EINVAL, "%s: save: job_id is not 32 lowercase hex digits", path);
    if (meta->has_eval_loss && !isfinite(meta->eval_loss))
        return dt_err_set(err, DT_EINVAL, "%s: save: eval_loss %g is not finite", path,
                          meta->eval_loss);
    if (ts->count < 0) return dt_err_set(err, DT_EINVAL, "%s: save: negative tensor count", path);
    for (int i = 0; i < ts->count; i++) {
        const dt_tensor *t = &ts->items[i];
        dt_tensor spec = *t;
        dt_err spec_err;
        dt_err_clear(&spec_err);
        if (dt_tensor_check_spec(&spec, &spec_err) < 0)
            return dt_err_set(err, DT_EINVAL, "%s: save: %s", path, spec_err.msg);
        if (spec.nbytes != t->nbytes || (i < in_memory && !t->data))
            return dt_err_set(err, DT_EINVAL, "%s: save: tensor %s: %s", path, t->name,
                              t->data ? "nbytes does not match its shape" : "no data");
        size_t len = strlen(t->name);
        if (strcmp(t->name, "__metadata__") == 0 || utf8_bad_at(t->name, len) < len)
            return dt_err_set(err, DT_EINVAL, "%s: save: tensor name \"%s\" cannot be saved", path,
                              t->name);
    }
    return 0;
}

/* Writes ts: its first in_memory tensors from memory, the others from
 * part_fds (copied by buf), with crc the data section's CRC-32C. */
static int save_set(const char *path, const dt_tensors *ts, int in_memory, const int *part_fds,
                    unsigned char *buf, uint32_t crc, const dt_safetensors_meta *meta,
                    dt_err *err) {
    int rc;
    const char **names = NULL;
    char *json = NULL;
    if ((rc = check_save_args(path, ts, in_memory, meta, err)) < 0) return rc;

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

    json = build_header(ts, meta, crc);
    if (!json) {
        rc = dt_err_set(err, DT_ENOMEM, "%s: save: out of memory building the header", path);
        goto fail;
    }
    file_emit ce = {.ts = ts,
                    .in_memory = in_memory,
                    .part_fds = part_fds,
                    .buf = buf,
                    .json = json,
                    .json_len = strlen(json)};
    ce.header_len = (ce.json_len + 7) / 8 * 8;
    rc = dt_fileio_write_atomic(path, emit_file, &ce, err);
fail:
    cJSON_free(json);
    free(names);
    return rc;
}

/* The CRC-32C of ts's first n tensors, as they lie in the data section. */
static uint32_t crc_in_memory(const dt_tensors *ts, int n) {
    uint32_t crc = 0;
    for (int i = 0; i < n; i++)
        crc = dt_crc32c_extend(crc, ts->items[i].data, ts->items[i].nbytes);
    return crc;
}

int dt_safetensors_save(const char *path, const dt_tensors *ts, const dt_safetensors_meta *meta,
                        dt_err *err) {
    DT_ASSERT(path && ts && meta);
    /* The checksum goes in the header, ahead of the data: one extra read
     * pass over the tensors, no copy of them. check_save_args has not run
     * yet, so only tensors with data are summed (a set without is refused). */
    int with_data = 0;
    while (with_data < ts->count && ts->items[with_data].data)
        with_data++;
    return save_set(path, ts, ts->count, NULL, NULL, crc_in_memory(ts, with_data), meta, err);
}

/* ---- rows streamed to a save ---------------------------------------------- */

struct dt_safetensors_rows {
    int nparts;
    dt_tensor specs[DT_SAFETENSORS_MAX_ROW_PARTS]; /* shape[0] = rows */
    size_t row_bytes[DT_SAFETENSORS_MAX_ROW_PARTS];
    int fds[DT_SAFETENSORS_MAX_ROW_PARTS]; /* unlinked files; -1 when not open */
    uint32_t crcs[DT_SAFETENSORS_MAX_ROW_PARTS];
    int64_t rows;
    int broken; /* an append failed midway: the files disagree */
    char dir[ROWS_DIR_MAX];
};

void dt_safetensors_rows_free(dt_safetensors_rows *r) {
    if (!r) return;
    for (int i = 0; i < r->nparts; i++)
        if (r->fds[i] >= 0) close(r->fds[i]);
    free(r);
}

int dt_safetensors_rows_new(const char *dir, const dt_tensor *specs, int nparts,
                            dt_safetensors_rows **out, dt_err *err) {
    *out = NULL;
    if (nparts < 1 || nparts > DT_SAFETENSORS_MAX_ROW_PARTS)
        return dt_err_set(err, DT_EINVAL, "%s: checkpoint rows: %d parts (1 to %d)", dir, nparts,
                          DT_SAFETENSORS_MAX_ROW_PARTS);
    if (strlen(dir) + 16 > ROWS_DIR_MAX)
        return dt_err_set(err, DT_EINVAL, "%s: checkpoint rows: path too long", dir);
    dt_safetensors_rows *r = dt_calloc(1, sizeof *r);
    if (!r) return dt_err_set(err, DT_ENOMEM, "%s: checkpoint rows: out of memory", dir);
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    int rc = 0;
    for (int i = 0; i < nparts; i++) {
        r->fds[i] = -1;
        r->nparts = i + 1;
        r->specs[i] = specs[i];
        r->specs[i].shape[0] = 1; /* one row's bytes, checked as any tensor */
        r->specs[i].data = NULL;
        dt_err spec_err;
        dt_err_clear(&spec_err);
        if (specs[i].ndim < 1 || dt_tensor_check_spec(&r->specs[i], &spec_err) < 0) {
            rc = dt_err_set(err, DT_EINVAL, "%s: checkpoint rows: part %d: %s", dir, i,
                            specs[i].ndim < 1 ? "a scalar has no rows" : spec_err.msg);
            goto fail;
        }
        r->row_bytes[i] = r->specs[i].nbytes;
        char path[ROWS_DIR_MAX];
        snprintf(path, sizeof path, "%s/.rows.XXXXXX", dir);
        r->fds[i] = mkstemp(path);
        if (r->fds[i] < 0 || unlink(path) != 0) {
            rc = dt_err_set(err, DT_EIO, "%s: checkpoint rows: temporary file: %s", dir,
                            strerror(errno));
            goto fail;
        }
    }
    *out = r;
    return 0;
fail:
    dt_safetensors_rows_free(r);
    return rc;
}

int dt_safetensors_rows_append(dt_safetensors_rows *r, int64_t n, const void *const *parts,
                               dt_err *err) {
    if (r->broken) return dt_err_set(err, DT_EIO, "%s: checkpoint rows: an append failed", r->dir);
    int64_t total;
    if (n < 0 || __builtin_add_overflow(r->rows, n, &total) || total > DIM_MAX)
        return dt_err_set(err, DT_EINVAL, "%s: checkpoint rows: %lld more rows after %lld", r->dir,
                          (long long)n, (long long)r->rows);
    for (int i = 0; i < r->nparts; i++) {
        size_t bytes;
        if (__builtin_mul_overflow((size_t)n, r->row_bytes[i], &bytes)) {
            r->broken = 1;
            return dt_err_set(err, DT_EINVAL, "%s: checkpoint rows: %lld rows of %s overflow",
                              r->dir, (long long)n, r->specs[i].name);
        }
        if (dt_fileio_write_all(r->fds[i], parts[i], bytes) < 0) {
            r->broken = 1;
            return dt_err_set(err, DT_EIO, "%s: checkpoint rows: write: %s", r->dir,
                              strerror(errno));
        }
        r->crcs[i] = dt_crc32c_extend(r->crcs[i], parts[i], bytes);
    }
    r->rows = total;
    return 0;
}

int64_t dt_safetensors_rows_count(const dt_safetensors_rows *r) {
    return r->rows;
}

int dt_safetensors_save_rows(const char *path, const dt_tensors *ts, dt_safetensors_rows *const *rs,
                             int nrs, const dt_safetensors_meta *meta, dt_err *err) {
    DT_ASSERT(path && ts && meta && nrs >= 0 && (rs || nrs == 0));
    if (nrs > DT_SAFETENSORS_MAX_ROW_SETS)
        return dt_err_set(err, DT_EINVAL, "%s: save: %d sets of rows (at most %d)", path, nrs,
                          DT_SAFETENSORS_MAX_ROW_SETS);
    /* No rows: no parts, as a table with no row saves as no tensor. */
    int nparts = 0;
    for (int k = 0; k < nrs; k++) {
        if (rs[k]->broken)
            return dt_err_set(err, DT_EIO, "%s: save: an append of rows failed", path);
        if (rs[k]->rows > 0) nparts += rs[k]->nparts;
    }
    if (ts->count < 0 || ts->count > INT32_MAX - nparts)
        return dt_err_set(err, DT_EINVAL, "%s: save: %d tensors", path, ts->count);
    dt_tensors all = {.count = ts->count + nparts};
    int fds[DT_SAFETENSORS_MAX_ROW_SETS * DT_SAFETENSORS_MAX_ROW_PARTS];
    unsigned char *buf = NULL;
    int rc = 0;
    all.items = dt_malloc(((size_t)all.count + 1) * sizeof *all.items);
    buf = dt_malloc(COPY_BUF);
    if (!all.items || !buf) {
        rc = dt_err_set(err, DT_ENOMEM, "%s: save: out of memory", path);
        goto fail;
    }
    if (ts->count) memcpy(all.items, ts->items, (size_t)ts->count * sizeof *all.items);
    /* The data section's CRC: the tensors in memory, then each part's. */
    int with_data = 0;
    while (with_data < ts->count && ts->items[with_data].data)
        with_data++;
    uint32_t crc = crc_in_memory(ts, with_data);
    int at = 0;
    for (int k = 0; k < nrs; k++) {
        const dt_safetensors_rows *r = rs[k];
        for (int i = 0; r->rows > 0 && i < r->nparts; i++, at++) {
            dt_tensor *t = &all.items[ts->count + at];
            *t = r->specs[i];
            t->shape[0] = r->rows;
            if (__builtin_mul_overflow((size_t)r->rows, r->row_bytes[i], &t->nbytes)) {
                rc = dt_err_set(err, DT_EINVAL, "%s: save: %lld rows of %s overflow", path,
                                (long long)r->rows, t->name);
                goto fail;
            }
            crc = dt_crc32c_combine(crc, r->crcs[i], t->nbytes);
            fds[at] = r->fds[i];
        }
    }
    rc = save_set(path, &all, ts->count, fds, buf, crc, meta, err);
fail:
    free(all.items);
    free(buf);
    return rc;
}
