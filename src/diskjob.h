/*  diskjob: a fresh workspace image made and mounted off the loop, on a worker, for a new
 *  session or a pooled kernel: a template copy, a loop device, an ext4 mount (20-90 ms,
 *  mostly waiting on I/O and kernel locks, which on the loop stalled every session). Its
 *  owner may go before it is done (the session ended, the pool was emptied): it then abandons
 *  the job, which undoes what it made once it is done. Decides nothing about who gets an
 *  image (the broker and the pool do); the images themselves are disk.h's. */
#ifndef KENNEL_DISKJOB_H
#define KENNEL_DISKJOB_H

#include <stddef.h>
#include <sys/types.h>

#include "worker.h"

typedef struct diskjob diskjob_t;

/*  What a job came to: rc 0, or -1 with errno err at step; ms it took. */
typedef struct {
    int rc, err;
    const char *step;
    long long ms;
} diskjob_result_t;

/*  On the loop, once the job is done, unless it was abandoned. The job is freed after it. */
typedef void(diskjob_done_fn)(void *owner, const diskjob_result_t *result);

/*  Queue the making of an image of `bytes` as dir/workspace.img, mounted on workspace for
 *  uid:gid; done(owner, ...) is called when it is done. NULL with errno. */
diskjob_t *diskjob_submit(worker_t *worker, const char *dir, const char *workspace,
                          unsigned long long bytes, uid_t uid, gid_t gid, diskjob_done_fn *done,
                          void *owner);
/*  Whether a workspace cap of bytes (0: none) can be enforced here (disk_ok: kenneld's start-up
 *  probe made an image; disk_desc: what it found). 0, or -1 with the refusal in why: a cap is
 *  refused, never ignored. */
int diskjob_check(unsigned long long bytes, int disk_ok, const char *disk_desc, char *why,
                  size_t why_len);
/*  The owner goes first: a job not yet run is skipped; done is not called; the job unmounts
 *  what it made and, unless keep, removes dir (the owner must not: the worker may still be
 *  writing there). */
void diskjob_abandon(diskjob_t *job, int keep);

#endif
