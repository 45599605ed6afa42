/*  snapstore: the jobs of each session are counted in a table by id, with a generation that
 *  each store and drop bumps; an entry lives only while its session has jobs on the worker. */
#include "snapstore.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/sendfile.h>
#include <sys/stat.h>

#include <czmq.h>

#include "log.h"
#include "statedir.h"
#include "util.h"

struct snapstore {
    worker_t *worker;
    size_t max_bytes;
    snapstore_ops_t ops;
    void *ctx;
    zhashx_t *pending;       /* id -> pending_t: sessions with jobs on the worker */
};

typedef struct {
    int jobs;                /* this session's jobs on the worker */
    unsigned gen;            /* bumped by each store and drop: a store answers if still last */
} pending_t;

typedef enum { SNAP_STORE, SNAP_COPY, SNAP_EMPTY, SNAP_CLOSE, SNAP_DROP } snap_kind_t;

typedef struct {
    snapstore_t *store;
    snap_kind_t kind;
    char id[40];       /* whose: found again by id when done (it may have ended) */
    unsigned gen;      /* its pending gen when submitted */
    char path[PATH_MAX + 16]; /* the snapshot */
    void *data;        /* SNAP_STORE: a copy of the snapshot */
    size_t len;
    int fd;            /* SNAP_COPY: the file a kernel wrote it into (snapstore_file);
                        * SNAP_EMPTY: that file again, to empty once the copy is answered;
                        * SNAP_CLOSE: a file a gone kernel mapped, to let go of */
    int rc, err;
} snap_job_t;

static void s_snapshot_path(const char *dir, char *out, size_t len)
{
    snprintf(out, len, "%s/snapshot", dir);
}

static void s_pending_free(void **item)
{
    free(*item);
    *item = NULL;
}

snapstore_t *snapstore_new(worker_t *worker, size_t max_bytes, const snapstore_ops_t *ops,
                           void *ctx)
{
    snapstore_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->worker = worker;
    self->max_bytes = max_bytes;
    self->ops = *ops;
    self->ctx = ctx;
    self->pending = zhashx_new();
    if (!self->pending) {
        free(self);
        errno = ENOMEM;
        return NULL;
    }
    zhashx_set_destructor(self->pending, s_pending_free);
    return self;
}

void snapstore_destroy(snapstore_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zhashx_destroy(&(*self_p)->pending);
    free(*self_p);
    *self_p = NULL;
}

/*  A copy goes in chunks of this size, each one's writeback started as soon as it is written
 *  (sync_file_range), so that the disk writes the copy while it runs and the fsync after it
 *  waits only for the last chunk: 100 MB took ~48 ms to fsync once copied, here. */
#define COPY_CHUNK_BYTES ((size_t)8 << 20)

/*  Copy count bytes of src at *in to dst at *out, in the kernel where it can: copy_file_range
 *  (no copy at all on a file system that shares extents), else sendfile (one copy, page
 *  cache to page cache: the state directory and a workspace image are two file systems,
 *  EXDEV), else by hand. *mode remembers what worked: 0, 1 or 2. The bytes copied (> 0), or
 *  -1 with errno (EIO: src ends before count). */
static ssize_t s_copy_some(int src, loff_t *in, int dst, loff_t *out, size_t count, int *mode)
{
    for (;;) {
        ssize_t n;
        if (*mode == 0) {
            n = copy_file_range(src, in, dst, out, count, 0);
        } else if (*mode == 1) {
            n = sendfile(dst, src, in, count); /* writes at dst's position: kept at *out */
            if (n > 0)
                *out += n;
        } else {
            char buf[1 << 16];
            n = pread(src, buf, count < sizeof buf ? count : sizeof buf, *in);
            ssize_t w = n > 0 ? pwrite(dst, buf, (size_t)n, *out) : n;
            if (w != n) {
                if (w >= 0)
                    errno = EIO; /* a short write */
                return -1;
            }
            if (n > 0) {
                *in += n;
                *out += n;
            }
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && *mode < 2 &&
            (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP || errno == ENOSYS)) {
            (*mode)++;
            if (*mode == 1 && lseek(dst, *out, SEEK_SET) < 0)
                return -1;
            continue;
        }
        if (n == 0)
            errno = EIO; /* the file holds less than it was said to */
        return n > 0 ? n : -1;
    }
}

/*  Copy the first len bytes of src to dst (both from their start), starting each chunk's
 *  writeback once it is copied. 0, or -1 with errno (EIO: src holds fewer). */
static int s_copy(int src, int dst, size_t len)
{
    loff_t in = 0, out = 0, flushed = 0;
    int mode = 0;
    while ((size_t)in < len) {
        size_t want = len - (size_t)in < COPY_CHUNK_BYTES ? len - (size_t)in : COPY_CHUNK_BYTES;
        ssize_t n = s_copy_some(src, &in, dst, &out, want, &mode);
        if (n < 0)
            return -1;
        if ((size_t)(out - flushed) >= COPY_CHUNK_BYTES || (size_t)in == len) {
            /* Only a head start for the fsync that follows, which reports any failure. */
            (void)sync_file_range(dst, flushed, out - flushed, SYNC_FILE_RANGE_WRITE);
            flushed = out;
        }
    }
    return 0;
}

typedef struct {
    int src;
    size_t len;
} copy_t;

static int s_fill_copy(int fd, void *arg)
{
    const copy_t *c = arg;
    return s_copy(c->src, fd, c->len);
}

/*  On the worker thread: touches nothing but the job. */
static void s_snap_run(void *arg)
{
    snap_job_t *j = arg;
    if (j->kind == SNAP_STORE)
        j->rc = statedir_write_file(j->path, j->data, j->len, STATEDIR_DURABLE);
    else if (j->kind == SNAP_COPY) {
        /* kenneld's own copy of what the kernel wrote (into a named temporary file, as a
         * store writes: the state directory may be on NFS, which has no O_TMPFILE): the
         * kernel may still hold the file it was given, and must not reach the snapshot
         * through it. That file is emptied after the answer (SNAP_EMPTY). */
        copy_t c = {j->fd, j->len};
        j->rc = statedir_write_with(j->path, s_fill_copy, &c, STATEDIR_DURABLE);
    } else if (j->kind == SNAP_EMPTY) {
        /* The kernel's file, emptied, its blocks freed (tens of ms for 100 MB, the image
         * being mounted with discard): a job of its own after the copy's, so that the copy
         * is answered (and an evicted kernel killed) first. */
        (void)!ftruncate(j->fd, 0);
        j->rc = 0;
    } else if (j->kind == SNAP_CLOSE) {
        j->rc = 0; /* the close below: maybe the file's last reference */
    } else {
        j->rc = unlink(j->path) < 0 && errno != ENOENT ? -1 : 0;
    }
    j->err = j->rc < 0 ? errno : 0;
    free(j->data);
    j->data = NULL;
    if (j->fd >= 0)
        close(j->fd);
    j->fd = -1;
}

static void s_snap_done(void *arg)
{
    snap_job_t *j = arg;
    snapstore_t *self = j->store;
    pending_t *p = zhashx_lookup(self->pending, j->id);
    int live = self->ops.live(self->ctx, j->id);
    /* A session ended meanwhile took its directory to the trash: nothing to say. */
    if (j->rc < 0 && (live || j->err != ENOENT))
        LOG_W("session=%s: %s %s: %s", j->id, j->kind == SNAP_DROP ? "unlink" : "write",
              j->path, strerror(j->err));
    int last = p && j->gen == p->gen;
    if (p && --p->jobs == 0)
        zhashx_delete(self->pending, j->id);
    if (live && (j->kind == SNAP_STORE || j->kind == SNAP_COPY) && last) {
        char why[160];
        snprintf(why, sizeof why, "writing it: %s", strerror(j->err));
        self->ops.stored(self->ctx, j->id, j->rc < 0 ? why : NULL);
    }
    free(j);
}

/*  Queue a store (data is copied), a copy, an emptying or a close (fd is taken, closed either
 *  way) or a drop of id's snapshot. Only a store and a copy answer, and only the last one
 *  submitted (each bumps the generation, as a drop does). 0, or -1 with errno. */
static int s_snap_submit(snapstore_t *self, snap_kind_t kind, const char *id, const char *dir,
                         const void *data, size_t len, int fd)
{
    snap_job_t *j = calloc(1, sizeof *j);
    if (!j) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    j->store = self;
    j->kind = kind;
    j->fd = fd;
    snprintf(j->id, sizeof j->id, "%s", id);
    s_snapshot_path(dir, j->path, sizeof j->path);
    j->len = len;
    if (kind == SNAP_STORE) {
        j->data = malloc(len ? len : 1);
        if (!j->data) {
            free(j);
            errno = ENOMEM;
            return -1;
        }
        memcpy(j->data, data, len);
        j->len = len;
    }
    pending_t *p = zhashx_lookup(self->pending, id);
    if (!p && (!(p = calloc(1, sizeof *p)) || zhashx_insert(self->pending, id, p) < 0)) {
        free(p);
        free(j->data);
        if (fd >= 0)
            close(fd);
        free(j);
        errno = ENOMEM;
        return -1;
    }
    j->gen = kind == SNAP_EMPTY || kind == SNAP_CLOSE ? p->gen : ++p->gen;
    if (worker_submit(self->worker, s_snap_run, s_snap_done, j) < 0) {
        int saved = errno;
        if (p->jobs == 0)
            zhashx_delete(self->pending, id);
        free(j->data);
        if (fd >= 0)
            close(fd);
        free(j);
        errno = saved;
        return -1;
    }
    p->jobs++;
    return 0;
}

int snapstore_fits(const char *dir, size_t len, unsigned long long cap_bytes, const char **why)
{
    static char reason[200];
    /* A snapshot counts against the session's --disk, with what its workspace image holds. */
    if (cap_bytes) {
        char image[PATH_MAX + 32];
        snprintf(image, sizeof image, "%s/workspace.img", dir);
        struct stat st;
        unsigned long long used =
            stat(image, &st) == 0 ? (unsigned long long)st.st_blocks * 512 : 0;
        if (used + len > cap_bytes) {
            snprintf(reason, sizeof reason,
                     "the snapshot's %zu bytes and the workspace's %llu are over the session's "
                     "disk cap of %llu",
                     len, used, cap_bytes);
            *why = reason;
            return -1;
        }
    }
    return 0;
}

int snapstore_store(snapstore_t *self, const char *id, const char *dir, const void *data,
                    size_t len, unsigned long long cap_bytes, const char **why)
{
    static char reason[200];
    if (snapstore_fits(dir, len, cap_bytes, why) < 0)
        return -1;
    if (s_snap_submit(self, SNAP_STORE, id, dir, data, len, -1) < 0) {
        snprintf(reason, sizeof reason, "cannot queue its write: %s", strerror(errno));
        *why = reason;
        return -1;
    }
    return 0;
}

int snapstore_file(const char *dir)
{
    return open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
}

int snapstore_store_fd(snapstore_t *self, const char *id, const char *dir, int fd, size_t len,
                       const char **why)
{
    static char reason[200];
    /* The file is emptied by a job of its own, queued behind the copy (the session stays
     * busy, snapstore_busy, until it is done). */
    int empty = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (s_snap_submit(self, SNAP_COPY, id, dir, NULL, len, fd) < 0) {
        snprintf(reason, sizeof reason, "cannot queue its write: %s", strerror(errno));
        *why = reason;
        if (empty >= 0)
            close(empty);
        return -1;
    }
    /* Out of memory or stopping: the file keeps its blocks until the kernel's next save or
     * its end let go of it (s_op_snapshot_file, s_kernel_gone in broker.c), within its
     * image. */
    if (empty < 0 || s_snap_submit(self, SNAP_EMPTY, id, dir, NULL, 0, empty) < 0)
        LOG_W("session=%s: cannot queue the emptying of its save file", id);
    return 0;
}

int snapstore_load(snapstore_t *self, const char *dir, void **data, size_t *len)
{
    char path[PATH_MAX + 16];
    s_snapshot_path(dir, path, sizeof path);
    *data = util_read_file(path, self->max_bytes, len);
    return *data ? 0 : -1;
}

int snapstore_open(const char *dir)
{
    char path[PATH_MAX + 16];
    s_snapshot_path(dir, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
        close(fd);
        errno = EFBIG;
        return -1;
    }
    return fd;
}

void snapstore_drop(snapstore_t *self, const char *id, const char *dir)
{
    pending_t *p = zhashx_lookup(self->pending, id);
    if (p) {
        p->gen++; /* a store still on the worker answers no one */
        if (s_snap_submit(self, SNAP_DROP, id, dir, NULL, 0, -1) == 0)
            return;
    }
    char path[PATH_MAX + 16];
    s_snapshot_path(dir, path, sizeof path);
    if (unlink(path) < 0 && errno != ENOENT)
        PLOG_W("unlink(%s)", path);
}

void snapstore_release(snapstore_t *self, const char *id, int fd)
{
    if (fd >= 0 && s_snap_submit(self, SNAP_CLOSE, id, "", NULL, 0, fd) < 0)
        PLOG_W("session=%s: cannot queue the close of its kernel's snapshot file", id);
}

int snapstore_busy(const snapstore_t *self, const char *id)
{
    return zhashx_lookup(self->pending, id) != NULL;
}
