/*
 * fileio: atomic file replacement, mkdir -p, full reads and writes (see
 * fileio.h). Every write, fsync, close and rename is checked; a failure
 * names the file and the step.
 */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATH_CAP 4096 /* a path, or its temporary's name, with the NUL */

int dt_fileio_write_all(int fd, const void *buf, size_t len) {
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

ssize_t dt_fileio_read_full(int fd, void *buf, size_t len) {
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
    char dir[PATH_CAP];
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

int dt_fileio_write_atomic(const char *path, dt_fileio_emit emit, const void *ctx, dt_err *err) {
    char tmp[PATH_CAP];
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

int dt_fileio_mkdir_p(const char *dir, dt_err *err) {
    char buf[PATH_CAP];
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
