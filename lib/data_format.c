/*
 * data_format: a data file's format guessed from its first bytes (rules in
 * data_format.h). It opens the file through zlib, which reads a plain file
 * as it is, so .gz and plain files are told the same way.
 */
#include "data_format.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "alloc.h"

#define SHOWN 40 /* bytes of the first line quoted in how */

const char *dt_data_format_name(dt_reader_format format) {
    switch (format) {
    case DT_READER_CSV: return "csv";
    case DT_READER_LIBSVM: return "libsvm";
    case DT_READER_IDX: return "idx";
    }
    return "?";
}

/* 1 when tok is index:value with a whole index (qid:N too). */
static int index_value(const char *tok, size_t n) {
    const char *colon = memchr(tok, ':', n);
    if (!colon || colon == tok || colon + 1 == tok + n) return 0;
    if ((size_t)(colon - tok) == 3 && strncmp(tok, "qid", 3) == 0) return 1;
    for (const char *p = tok; p < colon; p++)
        if (!isdigit((unsigned char)*p)) return 0;
    return 1;
}

/* The format line (len bytes, no newline) says, or -1. */
static int format_of_line(const char *line, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (line[i] == '\0' ||
            (iscntrl((unsigned char)line[i]) && line[i] != '\t' && line[i] != '\r'))
            return -1; /* binary: no text format */
    if (memchr(line, ',', len)) return DT_READER_CSV;
    int tokens = 0, pairs = 0, first_pair = 0;
    for (size_t i = 0; i < len;) {
        while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
            i++;
        size_t start = i;
        while (i < len && line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
            i++;
        if (i == start) break;
        int pair = index_value(line + start, i - start);
        if (tokens == 0) first_pair = pair;
        tokens++;
        pairs += pair;
    }
    /* "label i:v ..." or, without labels, "i:v ...". */
    if (tokens >= 2 && pairs == tokens - !first_pair) return DT_READER_LIBSVM;
    if (tokens == 1 && first_pair) return DT_READER_LIBSVM;
    return -1;
}

int dt_data_format_guess(const char *path, int *format, char *how, size_t cap, dt_err *err) {
    *format = -1;
    if (cap) how[0] = '\0';
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return dt_err_set(err, errno == ENOENT ? DT_ENOTFOUND : DT_EIO, "%s: open: %s", path,
                          errno ? strerror(errno) : "failed");
    char *buf = dt_malloc(DT_DATA_FORMAT_PEEK + 1);
    if (!buf) {
        gzclose_r(gz);
        return dt_err_set(err, DT_ENOMEM, "%s: no memory to look at the file", path);
    }
    int n = gzread(gz, buf, DT_DATA_FORMAT_PEEK);
    int rc = 0;
    if (n >= 0) buf[n] = '\0'; /* strspn below stops at the end */
    if (n < 0) {
        int errnum = Z_OK;
        rc = dt_err_set(err, DT_EIO, "%s: read: %s", path, gzerror(gz, &errnum));
        goto done;
    }
    const unsigned char *b = (const unsigned char *)buf;
    if (n >= 4 && b[0] == 0 && b[1] == 0 && b[2] == 8 && (b[3] == 3 || b[3] == 1)) {
        *format = DT_READER_IDX;
        snprintf(how, cap, "its first 4 bytes 00 00 08 %02x, an idx %s header", b[3],
                 b[3] == 3 ? "images" : "labels");
        goto done;
    }
    /* The first line that is neither blank nor a '#' comment. */
    for (int at = 0; at < n;) {
        const char *nl = memchr(buf + at, '\n', (size_t)(n - at));
        size_t len = nl ? (size_t)(nl - (buf + at)) : (size_t)(n - at);
        const char *line = buf + at;
        at += (int)len + 1;
        size_t lead = strspn(line, " \t\r");
        if (lead >= len || line[lead] == '#') continue;
        int f = format_of_line(line, len);
        if (f >= 0) {
            *format = f;
            snprintf(how, cap, "its first %s \"%.*s%s\"", f == DT_READER_CSV ? "line" : "row",
                     (int)(len < SHOWN ? len : SHOWN), line, len > SHOWN ? "..." : "");
        }
        break;
    }
done:
    free(buf);
    gzclose_r(gz);
    return rc;
}
