/*  snapstore: evicted sessions' snapshots, each a file in its session's directory, out of the
 *  kernel's reach. A store is written (or copied from the file a kernel wrote) and fsynced
 *  on the worker it is given, kenneld's snapshot thread (tens of ms for even a small one on
 *  this VM's disk, which on the loop stalled every session). While a job of a
 *  session's is on the worker, every later step on the same file goes there too (a drop,
 *  the directory's removal when the session ends: snapstore_busy), so that they keep their
 *  order. A store answers its session only if no store or drop of it came after. Knows a
 *  session only by its id and directory; counts a snapshot against the session's disk cap. */
#ifndef KENNEL_SNAPSTORE_H
#define KENNEL_SNAPSTORE_H

#include <stddef.h>

#include "worker.h"

typedef struct {
    /* 1 while the session with this id is live (a job outlives an ended session). */
    int (*live)(void *ctx, const char *id);
    /* A live session's last store is written (why NULL), or could not be (why). */
    void (*stored)(void *ctx, const char *id, const char *why);
} snapstore_ops_t;

typedef struct snapstore snapstore_t;

/*  A store whose jobs run on worker, loading snapshots of at most max_bytes. Destroy the
 *  worker before the store: its jobs' done callbacks use the store. NULL with errno. */
snapstore_t *snapstore_new(worker_t *worker, size_t max_bytes, const snapstore_ops_t *ops,
                           void *ctx);
/*  Free. Destroy the worker first. No-op on NULL. */
void snapstore_destroy(snapstore_t **self_p);
/*  Queue the writing of session id's snapshot (data is copied) into dir. With cap_bytes (the
 *  session's disk cap; 0: none), the snapshot and dir's workspace image must fit in it
 *  together. 0: ops->stored answers later; or -1 and *why (static) at once. */
int snapstore_store(snapstore_t *self, const char *id, const char *dir, const void *data,
                    size_t len, unsigned long long cap_bytes, const char **why);
/*  0 when a snapshot of len bytes fits in cap_bytes (the session's disk cap; 0: none) beside
 *  dir's workspace image; else -1 and *why (static). */
int snapstore_fits(const char *dir, size_t len, unsigned long long cap_bytes, const char **why);
/*  A new file without a name in dir (O_TMPFILE, read-write, close-on-exec): the descriptor,
 *  or -1 with errno (a file system without O_TMPFILE). It holds no blocks once closed unless
 *  it was given a name. */
int snapstore_file(const char *dir);
/*  Queue the keeping of the first len bytes of the file fd (one a kernel wrote, and may
 *  still hold) as session id's snapshot in dir: copied (copy_file_range, or sendfile from
 *  another file system) into a file only kenneld holds, synced and renamed over the old
 *  one; ops->stored answers then, and fd's file is emptied after, by a job of its own (the
 *  session stays busy until it is done). fd is taken (closed either way). 0: ops->stored
 *  answers later; or -1 and *why (static) at once. */
int snapstore_store_fd(snapstore_t *self, const char *id, const char *dir, int fd, size_t len,
                       const char **why);
/*  Read dir's snapshot: 0 and *data (the caller frees it), or -1 with errno. */
int snapstore_load(snapstore_t *self, const char *dir, void **data, size_t *len);
/*  Open dir's snapshot to read (close-on-exec; the caller closes it), if it is a regular file
 *  (of any size: a kernel maps it): the descriptor, or -1 with errno. A snapshot is always
 *  replaced whole (a new file renamed over it), never rewritten in place, so a reader that
 *  mapped it keeps what it mapped. */
int snapstore_open(const char *dir);
/*  Delete session id's snapshot in dir; a store still on the worker answers no one. */
void snapstore_drop(snapstore_t *self, const char *id, const char *dir);
/*  Close fd on the worker: a snapshot's file a kernel mapped (a revival's, a fork's seed),
 *  once that kernel is gone, or a kernel's save file. This may be its last reference, and
 *  the close then frees its page cache and blocks (~22 ms per 100 MB here), kept off the
 *  loop and out of the kernel's exit. fd is taken (closed at once if the job cannot be
 *  queued); -1 is none. */
void snapstore_release(snapstore_t *self, const char *id, int fd);
/*  1 while a job of session id's is on the worker: its directory must be removed there,
 *  after it (sweeper_remove's `behind`). */
int snapstore_busy(const snapstore_t *self, const char *id);

#endif
