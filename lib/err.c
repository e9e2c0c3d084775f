/*
 * err: first-error-wins error records. No allocation, so it works when memory
 * is exhausted; messages are truncated to DT_ERR_MSG_MAX.
 */
#include "err.h"

#include <stdarg.h>
#include <string.h>

void dt_err_clear(dt_err *err) {
    if (!err) return;
    err->code = DT_OK;
    err->msg[0] = '\0';
}

int(dt_err_set)(dt_err *err, int code, const char *fmt, ...) {
    DT_ASSERT(code < 0);
    if (!err || err->code != DT_OK) return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->code = code;
    return code;
}

int(dt_err_wrap)(dt_err *err, int code, const char *fmt, ...) {
    if (!err) return code;
    if (err->code == DT_OK) err->code = code;
    char prefix[DT_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* msg = prefix + ": " + msg, truncated to fit. */
    size_t plen = strlen(prefix), mlen = strlen(err->msg);
    if (plen + 2 >= sizeof err->msg) plen = sizeof err->msg - 3;
    if (plen + 2 + mlen >= sizeof err->msg) mlen = sizeof err->msg - 3 - plen;
    memmove(err->msg + plen + 2, err->msg, mlen);
    memcpy(err->msg, prefix, plen);
    memcpy(err->msg + plen, ": ", 2);
    err->msg[plen + 2 + mlen] = '\0';
    return err->code;
}

const char *dt_err_name(int code) {
    switch (code) {
    case DT_OK: return "ok";
    case DT_EINVAL: return "invalid argument";
    case DT_ENOTFOUND: return "not found";
    case DT_EIO: return "i/o error";
    case DT_EUNAVAILABLE: return "unavailable";
    case DT_EDEADLINE: return "deadline exceeded";
    case DT_EPRECOND: return "failed precondition";
    case DT_ECORRUPT: return "corrupt data";
    case DT_ENOMEM: return "out of memory";
    case DT_EEXIST: return "already exists";
    case DT_ECANCELLED: return "cancelled";
    case DT_EINTERNAL: return "internal error";
    case DT_ESTORAGE: return "storage unwritable";
    case DT_EPERM: return "permission denied";
    case DT_ECONFIG: return "config does not fit the data";
    case DT_EABORTED: return "job failed";
    default: return "unknown error";
    }
}
