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

typedef enum { SNAP_STORE, SNAP_COPY, SNAP_DROP } snap_kind_t;

typedef struct {
    snapstore_t *store;
    snap_kind_t kind;
    char id[40];       /* whose: found again by id when done (it may have ended) */
    unsigned gen;      /* its pending gen when submitted */
    char path[PATH_MAX + 16]; /* the snapshot */
    void *data;        /* SNAP_STORE: a copy of the snapshot */
    size_t len;
    int fd;            /* SNAP_COPY: the file a kernel wrote it into (snapstore_file) */
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

/*  Copy the first len bytes of src to dst (both from their start). 0, or -1 with errno (EIO:
 *  src holds fewer). */
static int s_copy(int src, int dst, size_t len)
{
    loff_t in = 0, out = 0;
    int by_hand = 0; /* copy_file_range cannot here (EXDEV, EINVAL, EOPNOTSUPP, ENOSYS) */
    while ((size_t)in < len) {
        ssize_t n;
        if (!by_hand) {
            n = copy_file_range(src, &in, dst, &out, len - (size_t)in, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP ||
                          errno == ENOSYS)) {
                by_hand = 1;
                continue;
            }
        } else {
            char buf[1 << 16];
            size_t want = len - (size_t)in < sizeof buf ? len - (size_t)in : sizeof buf;
            n = pread(src, buf, want, in);
            ssize_t w = n > 0 ? pwrite(dst, buf, (size_t)n, out) : n;
            if (w != n) {
                if (w >= 0)
                    errno = EIO; /* a short write */
                n = -1;
            }
            if (n > 0) {
                in += n;
                out += n;
            }
        }
        if (n <= 0) {
            if (n == 0)
                errno = EIO; /* the file holds less than it was said to */
            return -1;
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
         * through it. Then that file is emptied, its blocks freed. */
        copy_t c = {j->fd, j->len};
        j->rc = statedir_write_with(j->path, s_fill_copy, &c, STATEDIR_DURABLE);
        int saved = errno;
        (void)!ftruncate(j->fd, 0);
        errno = saved;
    }
    else
        j->rc = unlink(j->path) < 0 && errno != ENOENT ? -1 : 0;
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
    if (live && j->kind != SNAP_DROP && last) {
        char why[160];
        snprintf(why, sizeof why, "writing it: %s", strerror(j->err));
        self->ops.stored(self->ctx, j->id, j->rc < 0 ? why : NULL);
    }
    free(j);
}

/*  Queue a store (data is copied), a link (fd is taken, closed either way) or a drop of id's
 *  snapshot. 0, or -1 with errno. */
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
    j->gen = ++p->gen;
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
    if (s_snap_submit(self, SNAP_COPY, id, dir, NULL, len, fd) < 0) {
        snprintf(reason, sizeof reason, "cannot queue its write: %s", strerror(errno));
        *why = reason;
        return -1;
    }
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

int snapstore_busy(const snapstore_t *self, const char *id)
{
    return zhashx_lookup(self->pending, id) != NULL;
}
