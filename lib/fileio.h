/*
 * fileio: files replaced whole so that a crash leaves the old content or the
 * new, never a mix; mkdir -p; the read and write loops that retry on EINTR
 * and short counts.
 *
 * dt_fileio_write_atomic writes "<path>.tmp.<pid>", fsyncs it, renames it
 * over path and fsyncs the directory, so the rename itself is durable. A
 * process killed in between leaves that temporary behind; whoever owns the
 * directory removes it (the checkpoint module does, under the log dir's
 * lock).
 *
 * Threading: no state; calls on different paths may run concurrently.
 */
#ifndef DT_FILEIO_H
#define DT_FILEIO_H

#include <stddef.h>
#include <sys/types.h>

#include "err.h"

/* The longest path a config field, a log dir or a file name may hold. */
#define DT_PATH_MAX 1024

/* Writes all len bytes of buf to fd. 0, or -1 with errno set (EIO for a
 * write that wrote nothing). */
int dt_fileio_write_all(int fd, const void *buf, size_t len) DT_WARN_UNUSED;

/* Reads up to len bytes, stopping early only at the end of the file.
 * Returns the count read, or -1 with errno set. */
ssize_t dt_fileio_read_full(int fd, void *buf, size_t len) DT_WARN_UNUSED;

/* Writes a file's content to fd, the temporary file named tmp (for
 * messages). 0, or a negative code with err set. */
typedef int (*dt_fileio_emit)(int fd, const void *ctx, const char *tmp, dt_err *err);

/* Replaces path atomically with what emit writes (ctx is emit's): emit into
 * "<path>.tmp.<pid>", fsync, close, rename over path, fsync the directory.
 * A stale temporary of the same name (a dead process with this pid) is
 * overwritten. On failure the temporary is gone and path is untouched,
 * unless only the final directory fsync failed. DT_EINVAL for a path too
 * long; DT_EIO naming the step and errno; emit's own errors. */
int dt_fileio_write_atomic(const char *path, dt_fileio_emit emit, const void *ctx,
                           dt_err *err) DT_WARN_UNUSED;

/* mkdir -p: creates dir (mode 0755) and any missing parents; an existing
 * directory is fine. DT_EINVAL for an empty or too long path ("log dir:
 * empty path": the log dir is what callers create); DT_EIO when a mkdir
 * fails or dir is not a directory. */
int dt_fileio_mkdir_p(const char *dir, dt_err *err) DT_WARN_UNUSED;

#endif
