/*
 * err: the one error convention of dtrain.
 *
 * Fallible functions return 0 on success or a negative dt_err_code, and take a
 * `dt_err *err` as their last argument, which may be NULL. The first error set
 * wins: later dt_err_set calls on an already-failed dt_err are ignored, so the
 * root cause survives the unwinding of a call chain. Messages read
 * "object: step: reason".
 */
#ifndef DT_ERR_H
#define DT_ERR_H

#include <stdio.h>
#include <stdlib.h>

typedef enum {
    DT_OK = 0,
    DT_EINVAL = -1,       /* bad argument, file content, flag or payload */
    DT_ENOTFOUND = -2,    /* a named thing (file, variable) does not exist */
    DT_EIO = -3,          /* read/write/fsync/rename failed */
    DT_EUNAVAILABLE = -4, /* peer unreachable; retryable */
    DT_EDEADLINE = -5,    /* deadline exceeded; retryable */
    DT_EPRECOND = -6,     /* state does not allow the call (not ready, done) */
    DT_ECORRUPT = -7,     /* a file or message fails its integrity checks */
    DT_ENOMEM = -8,       /* allocation failed */
    DT_EEXIST = -9,       /* already exists (variables already created, lock held) */
    DT_ECANCELLED = -10,  /* stopped by a signal or shutdown */
    DT_EINTERNAL = -11,   /* a bug or an unexpected library failure */
    DT_ESTORAGE = -12,    /* storage stayed unwritable (disk full) past a bound; retryable */
    DT_EPERM = -13,       /* the caller may not do that (another task's index, role) */
    DT_ECONFIG = -14,     /* the job config does not fit the data (a label column the file
                             lacks, another feature count): fix the config, not the data */
    DT_EABORTED = -15,    /* the job failed (the chief failed permanently and said so):
                             nothing for this task to retry */
} dt_err_code;

#define DT_ERR_MSG_MAX 512

typedef struct {
    int code;                 /* DT_OK or a dt_err_code */
    char msg[DT_ERR_MSG_MAX]; /* "object: step: reason"; empty when code is DT_OK */
} dt_err;

/* Resets err to DT_OK. NULL is allowed. */
void dt_err_clear(dt_err *err);

/* Records the first error in err (NULL allowed) and returns code, so a caller
 * can write `return dt_err_set(err, DT_EINVAL, "...")`. */
int dt_err_set(dt_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an existing message, to add context while unwinding.
 * Returns err->code (or code when err is NULL). */
int dt_err_wrap(dt_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#ifdef __clang_analyzer__
/* The static analyzer cannot see across files that these return `code`:
 * shown it, it follows each `return dt_err_set(...)` as the failure it is
 * instead of as a path that goes on with half-made state. */
#define dt_err_set(err, code, ...) (dt_err_set((err), (code), __VA_ARGS__), (code))
#define dt_err_wrap(err, code, ...) (dt_err_wrap((err), (code), __VA_ARGS__), (code))
#endif

/* A short stable name for a code ("invalid argument", "unavailable", ...). */
const char *dt_err_name(int code);

/* Bugs, not bad input: abort with file:line. Active in every build. */
#define DT_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define DT_WARN_UNUSED __attribute__((warn_unused_result))

#endif
