/*  wsfile: see the header. The walk never trusts a name twice: each component is opened
 *  relative to the fd of its parent, with O_NOFOLLOW, so a concurrent rename cannot redirect
 *  a later step. */
#include "wsfile.h"
#include "jvalid.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <sodium.h>

#include "util.h"

#define MAX_PATH_LEN 1024
#define MAX_DEPTH 64
#define PUT_TRIES 8 /* random temporary names tried by a put */

/*  Check path and split it into components (in place, in buf). Returns the count or -1. */
static int s_split(const char *path, char *buf, char **parts)
{
    size_t len = strlen(path);
    if (len == 0 || len > MAX_PATH_LEN || path[0] == '/')
        return -1;
    memcpy(buf, path, len + 1);
    int n = 0;
    for (char *save, *t = strtok_r(buf, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
        if (strcmp(t, ".") == 0 || strcmp(t, "..") == 0 || n == MAX_DEPTH)
            return -1;
        parts[n++] = t;
    }
    return n > 0 ? n : -1;
}

static int s_code(void)
{
    return errno == ELOOP || errno == ENOTDIR ? WSFILE_ELINK
         : errno == ENOENT                    ? WSFILE_ENOENT
                                              : WSFILE_EIO;
}

/*  Open the directory holding the last component; create missing ones when uid is not -1.
 *  Returns the fd (caller closes) or a negative code; *name is the last component. */
static int s_parent(const char *workspace, const char *path, char *buf, const char **name,
                    uid_t uid, gid_t gid)
{
    char *parts[MAX_DEPTH];
    int n = s_split(path, buf, parts);
    if (n < 0)
        return WSFILE_EPATH;
    int dfd = open(workspace, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return WSFILE_EIO;
    for (int i = 0; i < n - 1; i++) {
        if (uid != (uid_t)-1 && mkdirat(dfd, parts[i], 0700) == 0 &&
            fchownat(dfd, parts[i], uid, gid, AT_SYMLINK_NOFOLLOW) < 0) {
            close(dfd);
            return WSFILE_EIO;
        }
        int next = openat(dfd, parts[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int code = next < 0 ? s_code() : 0;
        close(dfd);
        if (next < 0)
            return code;
        dfd = next;
    }
    *name = parts[n - 1];
    return dfd;
}

int wsfile_put(const char *workspace, const char *path, const void *data, size_t len, uid_t uid,
               gid_t gid)
{
    char buf[MAX_PATH_LEN + 1];
    const char *name;
    int dfd = s_parent(workspace, path, buf, &name, uid, gid);
    if (dfd < 0)
        return dfd;
    /* A temporary name, then rename: readers never see half a file, and O_EXCL|O_NOFOLLOW
     * means we never write through something the kernel planted. The name is random (a
     * fixed one, planted by a cell, made every put fail), and a taken one is tried again. */
    char tmp[64];
    int fd = -1;
    for (int tries = 0; tries < PUT_TRIES && fd < 0; tries++) {
        unsigned char r[8];
        char hex[2 * sizeof r + 1];
        randombytes_buf(r, sizeof r);
        util_hex(hex, r, sizeof r);
        snprintf(tmp, sizeof tmp, ".kennel-put-%s", hex);
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    int rc = fd < 0 ? s_code() : 0;
    if (fd >= 0) {
        if (util_write_all(fd, data, len) < 0 || fchown(fd, uid, gid) < 0 ||
            renameat(dfd, tmp, dfd, name) < 0) {
            rc = errno == EISDIR ? WSFILE_ENOTREG : WSFILE_EIO;
            unlinkat(dfd, tmp, 0);
        }
        close(fd);
    }
    close(dfd);
    return rc;
}

int wsfile_get(const char *workspace, const char *path, size_t max, void **data, size_t *len)
{
    char buf[MAX_PATH_LEN + 1];
    const char *name;
    *data = NULL;
    int dfd = s_parent(workspace, path, buf, &name, (uid_t)-1, (gid_t)-1);
    if (dfd < 0)
        return dfd;
    /* O_NONBLOCK: opening a FIFO the kernel made must not block kenneld. */
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    int rc = fd < 0 ? s_code() : 0;
    close(dfd);
    if (fd < 0)
        return rc;
    struct stat st;
    if (fstat(fd, &st) < 0)
        rc = WSFILE_EIO;
    else if (!S_ISREG(st.st_mode))
        rc = WSFILE_ENOTREG;
    else if ((size_t)st.st_size > max)
        rc = WSFILE_ETOOBIG;
    else {
        char *out = malloc((size_t)st.st_size + 1);
        size_t got = 0;
        while (out && got < (size_t)st.st_size) {
            ssize_t r = read(fd, out + got, (size_t)st.st_size - got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        if (!out) {
            rc = WSFILE_EIO;
        } else {
            *data = out;
            *len = got; /* a file the kernel shrank meanwhile reads short; never over */
        }
    }
    close(fd);
    return rc;
}

int wsfile_delete(const char *workspace, const char *path)
{
    char buf[MAX_PATH_LEN + 1];
    const char *name;
    int dfd = s_parent(workspace, path, buf, &name, (uid_t)-1, (gid_t)-1);
    if (dfd < 0)
        return dfd;
    int rc = 0;
    if (unlinkat(dfd, name, 0) < 0 && (errno != EISDIR || unlinkat(dfd, name, AT_REMOVEDIR) < 0))
        rc = s_code();
    close(dfd);
    return rc;
}

/*  A list entry for a regular file. A name that is not UTF-8 cannot be a JSON string: it is
 *  listed with each byte that is no UTF-8 written as \xNN (as Python's backslashreplace) and
 *  "utf8": false, a name to see, not to ask for. */
static json_t *s_entry(const char *path, const struct stat *st)
{
    size_t len = strlen(path), n;
    const char *shown = path;
    char escaped[4 * (MAX_PATH_LEN + 256) + 1];
    size_t o = 0;
    for (size_t i = 0; i < len; i += n) {
        n = jvalid_utf8(path + i, len - i);
        if (n == 0 && shown == path) {
            memcpy(escaped, path, i);
            o = i, shown = escaped;
        }
        if (shown == path)
            continue;
        if (n == 0) {
            o += (size_t)snprintf(escaped + o, sizeof escaped - o, "\\x%02x",
                                  (unsigned char)path[i]);
            n = 1;
        } else {
            memcpy(escaped + o, path + i, n);
            o += n;
        }
    }
    escaped[o] = '\0';
    json_t *e = json_pack("{s:s, s:I, s:I}", "path", shown, "size", (json_int_t)st->st_size,
                          "mtime", (json_int_t)st->st_mtime);
    if (e && shown != path)
        json_object_set_new(e, "utf8", json_false());
    return e;
}

typedef struct {
    json_t *out;
    size_t seen, max; /* directory entries looked at, and the bound on them */
    int truncated;
} walk_t;

static void s_list(walk_t *w, int dfd, const char *prefix, int depth)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        /* Every entry counts, directories too: 30,000 empty ones once took 0.6 s. */
        if (w->seen >= w->max) {
            w->truncated = 1;
            break;
        }
        w->seen++;
        char path[MAX_PATH_LEN + 256];
        if (snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "/" : "", e->d_name) > MAX_PATH_LEN)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISREG(st.st_mode)) {
            json_array_append_new(w->out, s_entry(path, &st));
        } else if (S_ISDIR(st.st_mode) && depth < MAX_DEPTH) {
            int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                s_list(w, sub, path, depth + 1);
        } else if (S_ISDIR(st.st_mode)) {
            w->truncated = 1;
        }
    }
    closedir(d);
}

json_t *wsfile_list(const char *workspace, size_t max_entries, int *truncated)
{
    walk_t w = {json_array(), 0, max_entries, 0};
    int dfd = open(workspace, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd >= 0)
        s_list(&w, dfd, "", 0);
    *truncated = w.truncated;
    return w.out;
}

const char *wsfile_strerror(int code)
{
    switch (code) {
    case WSFILE_EPATH: return "the path must be relative to the workspace, without '..'";
    case WSFILE_ELINK: return "the path goes through a symlink or a non-directory; refused";
    case WSFILE_ENOENT: return "no such file in the workspace";
    case WSFILE_ENOTREG: return "not a regular file";
    case WSFILE_ETOOBIG: return "the file is over the size cap";
    default: return "the file operation failed";
    }
}

/* ---- copying a workspace (a fork) ------------------------------------------------------------ */

typedef struct {
    uid_t uid;
    gid_t gid;
    json_t *not_copied;
    size_t max_listed;
    long skipped;
    int as_root;   /* hand what is made to uid:gid (an unprivileged kenneld's are its own) */
} copy_t;

static void s_skip(copy_t *c, const char *prefix, const char *name, const char *why)
{
    c->skipped++;
    if (!c->not_copied || json_array_size(c->not_copied) >= c->max_listed)
        return;
    char line[MAX_PATH_LEN + 128];
    snprintf(line, sizeof line, "(file %s%s: %s)", prefix, name, why);
    json_array_append_new(c->not_copied, json_string(line));
}

/*  Copy a regular file's bytes, in kernel space. 0 or -1 with errno. */
static int s_copy_bytes(int in, int out, off_t size)
{
    while (size > 0) {
        ssize_t n = copy_file_range(in, NULL, out, NULL, (size_t)size, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP)) {
            char buf[65536];
            ssize_t r = read(in, buf, sizeof buf);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                return r < 0 ? -1 : 0;
            if (util_write_all(out, buf, (size_t)r) < 0)
                return -1;
            size -= r;
            continue;
        }
        if (n <= 0)
            return n < 0 ? -1 : 0; /* shorter than it said: it shrank meanwhile */
        size -= n;
    }
    return 0;
}

static void s_copy_dir(copy_t *c, int from, int to, const char *prefix, int depth);

/*  One entry of a directory being copied. */
static void s_copy_entry(copy_t *c, int from, int to, const char *prefix, const char *name,
                         int depth)
{
    struct stat st;
    if (fstatat(from, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        s_skip(c, prefix, name, strerror(errno));
        return;
    }
    mode_t mode = st.st_mode & 0777; /* never set-id bits, as root would make them */
    if (S_ISDIR(st.st_mode)) {
        if (depth >= MAX_DEPTH) {
            s_skip(c, prefix, name, "too deep");
            return;
        }
        if (mkdirat(to, name, 0700) < 0 && errno != EEXIST) {
            s_skip(c, prefix, name, strerror(errno));
            return;
        }
        int in = openat(from, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int out = openat(to, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (in < 0 || out < 0) {
            s_skip(c, prefix, name, strerror(errno));
        } else {
            char sub[MAX_PATH_LEN + 1];
            if (snprintf(sub, sizeof sub, "%s%s/", prefix, name) >= (int)sizeof sub)
                s_skip(c, prefix, name, "path too long");
            else
                s_copy_dir(c, in, out, sub, depth + 1);
            if ((c->as_root && fchown(out, c->uid, c->gid) < 0) || fchmod(out, mode) < 0)
                s_skip(c, prefix, name, strerror(errno));
        }
        if (in >= 0)
            close(in);
        if (out >= 0)
            close(out);
    } else if (S_ISREG(st.st_mode)) {
        /* O_NONBLOCK: a FIFO swapped in after the fstatat does not block kenneld; fstat
         * again on what was opened. */
        int in = openat(from, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct stat ist;
        if (in < 0 || fstat(in, &ist) < 0 || !S_ISREG(ist.st_mode)) {
            s_skip(c, prefix, name, in < 0 ? strerror(errno) : "not a regular file");
            if (in >= 0)
                close(in);
            return;
        }
        int out = openat(to, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (out < 0 || s_copy_bytes(in, out, ist.st_size) < 0 ||
            (c->as_root && fchown(out, c->uid, c->gid) < 0) ||
            fchmod(out, ist.st_mode & 0777) < 0) {
            int saved = errno;
            if (out >= 0)
                unlinkat(to, name, 0); /* no half file */
            s_skip(c, prefix, name, strerror(saved));
        } else {
            struct timespec times[2] = {ist.st_atim, ist.st_mtim};
            (void)futimens(out, times);
        }
        close(in);
        if (out >= 0)
            close(out);
    } else if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlinkat(from, name, target, sizeof target - 1);
        if (n < 0) {
            s_skip(c, prefix, name, strerror(errno));
            return;
        }
        target[n] = '\0';
        if (symlinkat(target, to, name) < 0 ||
            (c->as_root && fchownat(to, name, c->uid, c->gid, AT_SYMLINK_NOFOLLOW) < 0))
            s_skip(c, prefix, name, strerror(errno));
    } else {
        s_skip(c, prefix, name,
               S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket" : "a device");
    }
}

static void s_copy_dir(copy_t *c, int from, int to, const char *prefix, int depth)
{
    int fd = dup(from);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        s_skip(c, prefix, "", strerror(errno));
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        /* An image's own lost+found is fsck's, and the fork's image has one. */
        if (depth == 0 && strcmp(e->d_name, "lost+found") == 0)
            continue;
        s_copy_entry(c, from, to, prefix, e->d_name, depth);
    }
    closedir(d);
}

long wsfile_copy_tree(const char *from, const char *to, uid_t uid, gid_t gid,
                      json_t *not_copied, size_t max_listed)
{
    int in = open(from, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0)
        return -1;
    int out = open(to, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (out < 0) {
        int saved = errno;
        close(in);
        errno = saved;
        return -1;
    }
    copy_t c = {uid, gid, not_copied, max_listed, 0, geteuid() == 0};
    s_copy_dir(&c, in, out, "", 0);
    close(in);
    close(out);
    return c.skipped;
}
