/*
 * dirlock: a flock on <dir>/dtrain.lock (see dirlock.h).
 */
#include "dirlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "fileio.h"
#include "log.h"

#define LOCK_FILE "dtrain.lock"
#define PATH_CAP 4096

int dt_dirlock_acquire(const char *dir, int *fd_out, dt_err *err) {
    *fd_out = -1;
    int rc = dt_fileio_mkdir_p(dir, err);
    if (rc < 0) return rc;
    char path[PATH_CAP];
    int n = snprintf(path, sizeof path, "%s/" LOCK_FILE, dir);
    if (n < 0 || (size_t)n >= sizeof path)
        return dt_err_set(err, DT_EINVAL, "%s: path of " LOCK_FILE " is too long", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return dt_err_set(err, DT_EIO, "%s: cannot open: %s", path, strerror(errno));
    /* flock, not fcntl: it belongs to this open file, so even a second
     * lock attempt from the same process is refused. */
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int saved = errno;
        char holder[32] = "";
        ssize_t got = pread(fd, holder, sizeof holder - 1, 0);
        holder[got > 0 ? got : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        close(fd);
        if (saved == EWOULDBLOCK)
            return dt_err_set(err, DT_EEXIST,
                              "%s: locked by another chief (pid %s); two chiefs must not share a "
                              "log dir",
                              dir, holder[0] ? holder : "?");
        return dt_err_set(err, DT_EIO, "%s: cannot lock: %s", path, strerror(saved));
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    /* The pid only helps a person name the holder; the flock is the lock.
     * A full disk must not stop a chief from locking its log dir. */
    if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)len, 0) != len)
        dt_log(DT_LOG_WARN, "%s: cannot write the owner's pid: %s", path, strerror(errno));
    *fd_out = fd;
    return 0;
}

void dt_dirlock_release(int fd) {
    if (fd >= 0) close(fd); /* closing releases the lock */
}
