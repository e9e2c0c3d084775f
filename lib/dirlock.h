/*
 * dirlock: one owner per directory, for the chief's log dir.
 *
 * The lock is a flock on <dir>/dtrain.lock, a file that holds the owner's
 * pid for a person to read. flock belongs to the open file, so even a
 * second attempt from the same process is refused, and it dies with the
 * process: a killed chief never leaves the lock stale. The file stays
 * behind; the next owner takes it over.
 *
 * Threading: no state; a lock is held by whoever holds its descriptor.
 */
#ifndef DT_DIRLOCK_H
#define DT_DIRLOCK_H

#include "err.h"

/* Locks dir, creating it (and its parents) when missing. *fd_out is the
 * lock's descriptor (-1 on failure), which dt_dirlock_release gives back.
 * DT_EEXIST when another open file holds the lock, naming dir and the pid
 * the holder wrote; DT_EINVAL for a path too long; DT_EIO when dir cannot be
 * made or the lock file opened or locked. A pid that cannot be written (a
 * full disk) is only logged: the flock is the lock. */
int dt_dirlock_acquire(const char *dir, int *fd_out, dt_err *err) DT_WARN_UNUSED;

/* Releases the lock; -1 is a no-op. */
void dt_dirlock_release(int fd);

#endif
