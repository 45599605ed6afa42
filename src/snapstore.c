/*  snapstore: the jobs of each session are counted in a table by id, with a generation that
 *  each store and drop bumps; an entry lives only while its session has jobs on the worker.
 *  A copy that follows a kernel's write (snapstore_follow) is a follow_t in a second table by
 *  id, from the kernel's save_ready until its saved (snapstore_store_fd) or the save's end
 *  (snapstore_unfollow), and then the job's that finishes or discards it. */
#include "snapstore.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <linux/falloc.h>
#include <linux/magic.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>

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
    zhashx_t *follows;       /* id -> follow_t: copies following a kernel's write, until its
                              * saved or the save's end (not owned: see follow_t.refs) */
};

/*  A copy of the file a kernel is writing its snapshot into, made as it writes (in order,
 *  from its start, as kennel_pipe.write_file does), so that only its tail is left to copy
 *  once it says saved. Every range copied is punched out of the kernel's file at once
 *  (FALLOC_FL_PUNCH_HOLE, which the kernel's seccomp filter refuses it): a byte the kernel
 *  writes there afterwards (a kernel that writes again what it wrote) is data in a hole,
 *  which the finish sees (SEEK_DATA) and refuses; so what is kept is what the file held
 *  when the kernel said saved, the copied part being what it held before it was punched (a
 *  write between a chunk's copy and its punch, a few ms, goes with the punch: the file
 *  never holds it at saved either). The worker's fields are touched by one job at a time
 *  (the follow, then its finish or discard), the loop's only on the loop; stop is both's,
 *  under lock. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;     /* the follow job's wait: stop was set */
    int stop;                /* the follow job returns: saved, the save is over, or another
                              * job waits for the worker */
    int refs;                /* loop: the table's hold and the jobs' that use it */
    int following;           /* loop: its follow job is not done */
    int src;                 /* the kernel's file (a duplicate) */
    int dst;                 /* worker: the copy, named tmp, once made; -1 */
    char tmp[PATH_MAX + 32];
    size_t len;              /* what the kernel announced */
    loff_t align;            /* what a punch may start and end at: a block and a page */
    loff_t copied;           /* worker: src's [0, copied) is in dst and punched out of src */
    int mode;                /* worker: s_copy_some's */
    int err;                 /* worker: why the follow stopped early (errno), for the log */
} follow_t;

typedef struct {
    int jobs;                /* this session's jobs on the worker */
    unsigned gen;            /* bumped by each store and drop: a store answers if still last */
} pending_t;

typedef enum {
    SNAP_STORE,
    SNAP_COPY,
    SNAP_EMPTY,
    SNAP_CLOSE,
    SNAP_DROP,
    SNAP_FOLLOW,
    SNAP_DISCARD
} snap_kind_t;

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
    follow_t *follow;  /* SNAP_FOLLOW: the copy to make; SNAP_COPY: the copy to finish, or
                        * NULL; SNAP_DISCARD: the copy to let go of (a reference of each) */
    const char *why;   /* a failed copy's reason, when errno does not say it (static) */
    int rc, err;
} snap_job_t;

static void s_follow_put(follow_t *f);

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
    self->follows = zhashx_new();
    if (!self->follows) {
        zhashx_destroy(&self->pending);
        free(self);
        errno = ENOMEM;
        return NULL;
    }
    return self;
}

void snapstore_destroy(snapstore_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zhashx_destroy(&(*self_p)->pending);
    /* Follows still in the table (their save neither saved nor ended): their jobs are done,
     * the worker being destroyed first. */
    for (follow_t *f = zhashx_first((*self_p)->follows); f; f = zhashx_next((*self_p)->follows))
        s_follow_put(f);
    zhashx_destroy(&(*self_p)->follows);
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

/*  Copy src's bytes [from, to) to the same offsets of dst, starting each chunk's writeback
 *  once it is copied. *mode is s_copy_some's. 0, or -1 with errno (EIO: src ends before). */
static int s_copy_range(int src, int dst, loff_t from, loff_t to, int *mode)
{
    loff_t in = from, out = from, flushed = from;
    if (*mode == 1 && lseek(dst, from, SEEK_SET) < 0) /* sendfile writes at dst's position */
        return -1;
    while (in < to) {
        size_t want = (size_t)(to - in) < COPY_CHUNK_BYTES ? (size_t)(to - in) : COPY_CHUNK_BYTES;
        ssize_t n = s_copy_some(src, &in, dst, &out, want, mode);
        if (n < 0)
            return -1;
        if ((size_t)(out - flushed) >= COPY_CHUNK_BYTES || in == to) {
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
    int mode = 0;
    return s_copy_range(c->src, fd, 0, (loff_t)c->len, &mode);
}

/*  A follow's copy waits at most this long between two looks at how far the kernel wrote:
 *  a kernel writes ~3 MB in that time here. */
#define FOLLOW_POLL_MS 2
/*  A follow holds the worker this long at most (one syscall past it, at worst a punch
 *  waiting for one of the kernel's writes): a kernel that writes slowly, or never says
 *  saved, has the rest of its copy made after its saved, or none. A follow also returns as
 *  soon as another job waits for the worker (s_snap_submit). */
#define FOLLOW_MAX_MS 1000

static void s_follow_stop(follow_t *f)
{
    pthread_mutex_lock(&f->lock);
    f->stop = 1;
    pthread_cond_signal(&f->wake);
    pthread_mutex_unlock(&f->lock);
}

/*  1 once the follow is to stop, after waiting up to wait_ms for it. */
static int s_follow_stopped(follow_t *f, int wait_ms)
{
    pthread_mutex_lock(&f->lock);
    if (!f->stop && wait_ms > 0) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += (long)wait_ms * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        (void)pthread_cond_timedwait(&f->wake, &f->lock, &until);
    }
    int stop = f->stop;
    pthread_mutex_unlock(&f->lock);
    return stop;
}

/*  On the worker: the copy's file, made (as a store makes its own: named, for a state
 *  directory on NFS, which has no O_TMPFILE) unless it was. 0, or -1 with errno. */
static int s_follow_open(follow_t *f)
{
    if (f->dst < 0)
        f->dst = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    return f->dst < 0 ? -1 : 0;
}

/*  On the worker: close and remove the copy (it is not the snapshot), and the kernel's file's
 *  duplicate. */
static void s_follow_discard(follow_t *f)
{
    if (f->dst >= 0) {
        close(f->dst);
        unlink(f->tmp);
    }
    f->dst = -1;
    if (f->src >= 0)
        close(f->src);
    f->src = -1;
}

/*  On the worker (SNAP_FOLLOW): copy what the kernel has written, a chunk at a time, each
 *  punched out of its file once copied, while it writes; return when it is all copied (but
 *  for a last partial block), when told (stop), or after FOLLOW_MAX_MS. Waits, between
 *  looks at the file's size, on the stop word. */
static void s_follow_run(follow_t *f)
{
    if (s_follow_open(f) < 0) {
        f->err = errno;
        return;
    }
    long long until_ms = util_now_ms() + FOLLOW_MAX_MS;
    loff_t last = (loff_t)f->len & ~(f->align - 1);
    while (f->copied < last && !s_follow_stopped(f, 0) && util_now_ms() < until_ms) {
        struct stat st;
        if (fstat(f->src, &st) < 0) {
            f->err = errno;
            return;
        }
        /* What lies below the file's size is written (a write extends the size as it
         * copies each page), and a kernel that writes in order writes it no more. */
        loff_t have = st.st_size < last ? st.st_size & ~(f->align - 1) : last;
        if (have <= f->copied) {
            (void)s_follow_stopped(f, FOLLOW_POLL_MS);
            continue;
        }
        loff_t to = have - f->copied > (loff_t)COPY_CHUNK_BYTES
                        ? f->copied + (loff_t)COPY_CHUNK_BYTES
                        : have;
        /* A failure leaves copied where it was: the finish copies that range again. */
        if (s_copy_range(f->src, f->dst, f->copied, to, &f->mode) < 0 ||
            fallocate(f->src, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, f->copied,
                      to - f->copied) < 0) {
            f->err = errno;
            return;
        }
        f->copied = to;
    }
}

/*  On the worker (SNAP_COPY of a follow): the kernel said saved, and its file held len bytes
 *  then. The tail that the follow did not copy is copied (at most len bytes in all, whatever
 *  the file holds by now); the part it did copy must still be a hole in the kernel's file,
 *  or the kernel wrote there again after it was copied, and the save is refused (what is
 *  kept must be what the file held). Then synced and renamed over the old snapshot, as a
 *  store. 0, or -1 with errno (and *why when errno cannot say it). */
static int s_follow_finish(follow_t *f, const char *path, const char **why)
{
    if (s_follow_open(f) < 0 ||
        s_copy_range(f->src, f->dst, f->copied, (loff_t)f->len, &f->mode) < 0)
        return -1;
    if (f->copied > 0) {
        off_t data = lseek(f->src, 0, SEEK_DATA);
        if (data < 0 && errno != ENXIO) /* ENXIO: no data at all, the whole file copied */
            return -1;
        if (data >= 0 && data < f->copied) {
            *why = "the kernel wrote again into its file where kenneld had copied it from";
            errno = EINVAL;
            return -1;
        }
    }
    if (fsync(f->dst) < 0)
        return -1;
    int rc = close(f->dst);
    f->dst = -1;
    if (rc < 0 || rename(f->tmp, path) < 0) {
        int saved = errno;
        unlink(f->tmp);
        errno = saved;
        return -1;
    }
    return 0;
}

/*  On the worker thread: touches nothing but the job. */
static void s_snap_run(void *arg)
{
    snap_job_t *j = arg;
    if (j->kind == SNAP_STORE)
        j->rc = statedir_write_file(j->path, j->data, j->len, STATEDIR_DURABLE);
    else if (j->kind == SNAP_COPY && j->follow) {
        /* The rest of the copy a follow began (snapstore_follow). */
        j->rc = s_follow_finish(j->follow, j->path, &j->why);
        j->err = errno;
        s_follow_discard(j->follow); /* what is left: the kernel's file, a failed copy */
        errno = j->err;
    } else if (j->kind == SNAP_COPY) {
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
    } else if (j->kind == SNAP_FOLLOW) {
        s_follow_run(j->follow);
        j->rc = 0; /* how far it got is the finish's business */
    } else if (j->kind == SNAP_DISCARD) {
        s_follow_discard(j->follow); /* unlinking the copy may free 100 MB: tens of ms */
        j->rc = 0;
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

/*  On the loop: let go of a reference to f; the last one frees it (and whatever of it no job
 *  closed: only when a job could not be queued). */
static void s_follow_put(follow_t *f)
{
    if (!f || --f->refs > 0)
        return;
    s_follow_discard(f);
    pthread_cond_destroy(&f->wake);
    pthread_mutex_destroy(&f->lock);
    free(f);
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
              j->path, j->why ? j->why : strerror(j->err));
    if (j->kind == SNAP_FOLLOW) {
        j->follow->following = 0;
        LOG_D("session=%s: copied %lld of its snapshot's %zu bytes as the kernel wrote them%s%s",
              j->id, (long long)j->follow->copied, j->follow->len,
              j->follow->err ? ": " : "", j->follow->err ? strerror(j->follow->err) : "");
    }
    s_follow_put(j->follow);
    int last = p && j->gen == p->gen;
    if (p && --p->jobs == 0)
        zhashx_delete(self->pending, j->id);
    if (live && (j->kind == SNAP_STORE || j->kind == SNAP_COPY) && last) {
        char why[160];
        snprintf(why, sizeof why, "writing it: %s", j->why ? j->why : strerror(j->err));
        self->ops.stored(self->ctx, j->id, j->rc < 0 ? why : NULL);
    }
    free(j);
}

/*  Queue a store (data is copied), a copy, an emptying or a close (fd is taken, closed either
 *  way), a drop of id's snapshot, or a follow's job (follow: a reference, taken either way).
 *  Only a store and a copy answer, and only the last one submitted (each bumps the
 *  generation, as a drop does). A follow running or queued returns: it yields the worker to
 *  every job behind it. 0, or -1 with errno. */
static int s_snap_submit(snapstore_t *self, snap_kind_t kind, const char *id, const char *dir,
                         const void *data, size_t len, int fd, follow_t *follow)
{
    snap_job_t *j = calloc(1, sizeof *j);
    if (!j) {
        if (fd >= 0)
            close(fd);
        s_follow_put(follow);
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
        s_follow_put(follow);
        free(j);
        errno = ENOMEM;
        return -1;
    }
    j->follow = follow;
    j->gen = kind == SNAP_EMPTY || kind == SNAP_CLOSE || kind == SNAP_FOLLOW ||
                     kind == SNAP_DISCARD
                 ? p->gen
                 : ++p->gen;
    for (follow_t *f = zhashx_first(self->follows); f; f = zhashx_next(self->follows))
        if (f->following && f != follow)
            s_follow_stop(f);
    if (worker_submit(self->worker, s_snap_run, s_snap_done, j) < 0) {
        int saved = errno;
        if (p->jobs == 0)
            zhashx_delete(self->pending, id);
        free(j->data);
        if (fd >= 0)
            close(fd);
        s_follow_put(follow);
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
    if (s_snap_submit(self, SNAP_STORE, id, dir, data, len, -1, NULL) < 0) {
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

/*  Take id's follow out of the table (its reference is the caller's), stopped. */
static follow_t *s_follow_detach(snapstore_t *self, const char *id)
{
    follow_t *f = zhashx_lookup(self->follows, id);
    if (f) {
        zhashx_delete(self->follows, id);
        s_follow_stop(f);
    }
    return f;
}

/*  1 for a file system whose punched ranges read back as holes (SEEK_DATA), which the
 *  finish's check needs: one whose lseek does not know holes calls the whole file data, and
 *  would refuse every followed save. Others (NFS, FUSE, overlayfs) are copied after saved. */
static int s_fs_shows_holes(int fd)
{
    struct statfs fs;
    if (fstatfs(fd, &fs) < 0)
        return 0;
    return fs.f_type == EXT4_SUPER_MAGIC || fs.f_type == XFS_SUPER_MAGIC ||
           fs.f_type == BTRFS_SUPER_MAGIC || fs.f_type == TMPFS_MAGIC;
}

int snapstore_follow(snapstore_t *self, const char *id, const char *dir, int fd, size_t len)
{
    snapstore_unfollow(self, id);
    struct stat st;
    if (!s_fs_shows_holes(fd) || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return -1;
    follow_t *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    f->src = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (f->src < 0 || zhashx_insert(self->follows, id, f) < 0) {
        if (f->src >= 0)
            close(f->src);
        free(f);
        return -1;
    }
    pthread_mutex_init(&f->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&f->wake, &attr);
    pthread_condattr_destroy(&attr);
    f->refs = 2; /* the table's and the follow job's */
    f->following = 1;
    f->dst = -1;
    f->len = len;
    /* A punch that starts or ends inside a block zeroes part of it (data again): ranges are
     * whole blocks and whole pages. */
    long page = sysconf(_SC_PAGESIZE);
    f->align = st.st_blksize > page ? st.st_blksize : page;
    snprintf(f->tmp, sizeof f->tmp, "%s/snapshot.follow.%d", dir, (int)getpid());
    if (s_snap_submit(self, SNAP_FOLLOW, id, dir, NULL, 0, -1, f) < 0) {
        s_follow_put(s_follow_detach(self, id));
        return -1;
    }
    return 0;
}

void snapstore_unfollow(snapstore_t *self, const char *id)
{
    follow_t *f = s_follow_detach(self, id);
    if (f && s_snap_submit(self, SNAP_DISCARD, id, "", NULL, 0, -1, f) < 0)
        LOG_W("session=%s: cannot queue the removal of its snapshot's partial copy", id);
}

int snapstore_store_fd(snapstore_t *self, const char *id, const char *dir, int fd, size_t len,
                       const char **why)
{
    static char reason[200];
    /* A copy under way since the kernel began to write is finished, not begun again. */
    follow_t *f = s_follow_detach(self, id);
    if (f && f->len != len) {
        if (s_snap_submit(self, SNAP_DISCARD, id, "", NULL, 0, -1, f) < 0)
            LOG_W("session=%s: cannot queue the removal of its snapshot's partial copy", id);
        f = NULL;
    }
    /* The file is emptied by a job of its own, queued behind the copy: the session stays
     * busy (snapstore_busy) until it is done, so that no save reuses the file before. */
    int empty = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (s_snap_submit(self, SNAP_COPY, id, dir, NULL, len, fd, f) < 0) {
        snprintf(reason, sizeof reason, "cannot queue its write: %s", strerror(errno));
        *why = reason;
        if (empty >= 0)
            close(empty);
        return -1;
    }
    /* Out of memory or stopping: the file keeps its blocks until the kernel's next save or
     * its end (s_op_snapshot_file and s_kernel_gone in broker.c empty it), within its image. */
    if (empty < 0 || s_snap_submit(self, SNAP_EMPTY, id, dir, NULL, 0, empty, NULL) < 0)
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
        if (s_snap_submit(self, SNAP_DROP, id, dir, NULL, 0, -1, NULL) == 0)
            return;
    }
    char path[PATH_MAX + 16];
    s_snapshot_path(dir, path, sizeof path);
    if (unlink(path) < 0 && errno != ENOENT)
        PLOG_W("unlink(%s)", path);
}

void snapstore_release(snapstore_t *self, const char *id, int fd)
{
    if (fd >= 0 && s_snap_submit(self, SNAP_CLOSE, id, "", NULL, 0, fd, NULL) < 0)
        PLOG_W("session=%s: cannot queue the close of its kernel's snapshot file", id);
}

int snapstore_busy(const snapstore_t *self, const char *id)
{
    return zhashx_lookup(self->pending, id) != NULL || zhashx_lookup(self->follows, id) != NULL;
}
