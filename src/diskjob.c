/*  diskjob: the run function touches only the job; its done callback, on the loop, either
 *  tells the owner or, abandoned, undoes the job. */
#include "diskjob.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "disk.h"
#include "log.h"
#include "statedir.h"
#include "util.h"

struct diskjob {
    diskjob_done_fn *done;   /* NULL once abandoned */
    void *owner;
    int keep;                /* abandoned by a session kept for the next kenneld */
    atomic_int cancelled;    /* abandoned before it ran: the worker skips it */
    char dir[PATH_MAX];
    char workspace[PATH_MAX + 16];
    unsigned long long bytes;
    uid_t uid;
    gid_t gid;
    diskjob_result_t result;
};

/*  On the worker thread: touches nothing but the job. */
static void s_disk_run(void *arg)
{
    diskjob_t *j = arg;
    diskjob_result_t *r = &j->result;
    if (atomic_load(&j->cancelled)) {
        r->rc = -1;
        r->err = ECANCELED;
        r->step = "cancelled";
        return;
    }
    char image[PATH_MAX + 32];
    snprintf(image, sizeof image, "%s/workspace.img", j->dir);
    long long t0 = util_now_ms();
    /* A job's workspace was never mounted: an image there is a failed try's. */
    (void)unlink(image);
    r->rc = disk_create(image, j->bytes, &r->step) < 0 ||
                    disk_mount(image, j->workspace, 1, j->uid, j->gid, &r->step) < 0
                ? -1
                : 0;
    r->err = r->rc < 0 ? errno : 0;
    r->ms = util_now_ms() - t0;
}

static void s_disk_done(void *arg)
{
    diskjob_t *j = arg;
    if (j->done) {
        j->done(j->owner, &j->result);
    } else {
        /* Abandoned: nothing runs on the image; a session kept for the next kenneld keeps
         * its directory (that kenneld mounts the image again). */
        if (j->result.rc == 0 && disk_unmount(j->workspace, !j->keep) < 0)
            PLOG_W("umount(%s)", j->workspace);
        if (!j->keep && statedir_remove_tree(j->dir) < 0)
            PLOG_W("remove %s", j->dir);
    }
    free(j);
}

diskjob_t *diskjob_submit(worker_t *worker, const char *dir, const char *workspace,
                          unsigned long long bytes, uid_t uid, gid_t gid, diskjob_done_fn *done,
                          void *owner)
{
    diskjob_t *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->done = done;
    j->owner = owner;
    snprintf(j->dir, sizeof j->dir, "%s", dir);
    snprintf(j->workspace, sizeof j->workspace, "%s", workspace);
    j->bytes = bytes;
    j->uid = uid;
    j->gid = gid;
    if (worker_submit(worker, s_disk_run, s_disk_done, j) < 0) {
        int saved = errno;
        free(j);
        errno = saved;
        return NULL;
    }
    return j;
}

int diskjob_check(unsigned long long bytes, int disk_ok, const char *disk_desc, char *why,
                  size_t why_len)
{
    if (!bytes || disk_ok)
        return 0;
    snprintf(why, why_len,
             "the session's workspace cap (disk %llu MiB) cannot be enforced here (%s); "
             "create it with disk 0, or start kenneld with --disk 0, to run without one",
             bytes >> 20, disk_desc);
    return -1;
}

void diskjob_abandon(diskjob_t *j, int keep)
{
    j->done = NULL;
    j->owner = NULL;
    j->keep = keep;
    atomic_store(&j->cancelled, 1);
}
