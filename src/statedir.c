/*  statedir: files other processes read (the CLI, Jupyter clients) must never be seen half
 *  written, hence temporary file + rename (+ fsync, for what must survive the host). */
#include "statedir.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

int statedir_default(char *out, size_t out_len)
{
    const char *env = getenv("KENNEL_STATE_DIR");
    const char *home = getenv("HOME");
    int n;
    if (env && *env)
        n = snprintf(out, out_len, "%s", env);
    else if (home && *home)
        n = snprintf(out, out_len, "%s/.local/state/kennel", home);
    else {
        errno = ENOENT;
        return -1;
    }
    if (n < 0 || (size_t)n >= out_len) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

long statedir_kenneld_pid(const char *dir)
{
    char path[4096 + 16];
    snprintf(path, sizeof path, "%s/kenneld.json", dir);
    char *text = util_read_file(path, 65536, NULL);
    if (!text && errno == EACCES) { /* a tenant's user: kenneld --tenants writes it one */
        snprintf(path, sizeof path, "%s/tenants.json", dir);
        text = util_read_file(path, 65536, NULL);
    }
    if (!text)
        return 0;
    json_t *info = json_loads(text, 0, NULL);
    free(text);
    json_int_t pid = json_integer_value(json_object_get(info, "pid"));
    json_int_t start = json_integer_value(json_object_get(info, "start"));
    json_decref(info);
    if (pid <= 0)
        return 0;
    snprintf(path, sizeof path, "/proc/%lld/comm", (long long)pid);
    char *comm = util_read_file(path, 64, NULL);
    int alive = comm && strncmp(comm, "kenneld", 7) == 0;
    free(comm);
    /* A kenneld that crashed leaves its file; its pid may be another kenneld's since. */
    unsigned long long ticks;
    if (alive && start > 0 && util_start_time((pid_t)pid, &ticks) == 0 &&
        ticks != (unsigned long long)start)
        alive = 0;
    return alive ? (long)pid : 0;
}

static int s_mkdirs(const char *path, mode_t mode)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
        return -1;
    return chmod(buf, mode);
}

int statedir_prepare(const char *dir)
{
    char path[4096];
    if (s_mkdirs(dir, 0700) < 0)
        return -1;
    static const char *const subdirs[] = {"sessions", "trash"};
    for (size_t i = 0; i < sizeof subdirs / sizeof subdirs[0]; i++) {
        if (snprintf(path, sizeof path, "%s/%s", dir, subdirs[i]) >= (int)sizeof path) {
            errno = ENAMETOOLONG;
            return -1;
        }
        if (s_mkdirs(path, 0700) < 0)
            return -1;
    }
    return 0;
}

int statedir_session_create(const char *dir, const char *id, char *out, size_t out_len)
{
    char ws[4096];
    int n = snprintf(out, out_len, "%s/sessions/%s", dir, id);
    if (n < 0 || (size_t)n >= out_len || snprintf(ws, sizeof ws, "%s/workspace", out) >= (int)sizeof ws) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (mkdir(out, 0700) < 0 && errno != EEXIST)
        return -1;
    if (mkdir(ws, 0700) < 0 && errno != EEXIST)
        return -1;
    return 0;
}

int statedir_write_with(const char *path, statedir_fill_fn *fill, void *arg,
                        statedir_sync_t sync)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -1;
    int rc = fill(fd, arg) == 0 && (sync != STATEDIR_DURABLE || fsync(fd) == 0) ? 0 : -1;
    int saved = errno;
    close(fd);
    if (rc == 0 && rename(tmp, path) < 0) {
        saved = errno;
        rc = -1;
    }
    if (rc < 0)
        unlink(tmp);
    errno = saved;
    return rc;
}

typedef struct {
    const void *data;
    size_t len;
} bytes_t;

static int s_fill_bytes(int fd, void *arg)
{
    const bytes_t *b = arg;
    return util_write_all(fd, b->data, b->len);
}

int statedir_write_file(const char *path, const void *data, size_t len, statedir_sync_t sync)
{
    bytes_t b = {data, len};
    return statedir_write_with(path, s_fill_bytes, &b, sync);
}

int statedir_write_json(const char *path, const json_t *obj, statedir_sync_t sync)
{
    char *text = json_dumps(obj, JSON_INDENT(1) | JSON_SORT_KEYS);
    if (!text) {
        errno = ENOMEM;
        return -1;
    }
    size_t len = strlen(text);
    text[len] = '\n'; /* json_dumps leaves room for the NUL this overwrites */
    int rc = statedir_write_file(path, text, len + 1, sync);
    int saved = errno;
    free(text);
    errno = saved;
    return rc;
}

/*  Directories one removal holds open at most: a deeper one is moved up to the tree's top
 *  and removed by the next pass, so no depth a session can make leaves anything behind. */
#define REMOVE_DEPTH 64
/*  Passes at most (each one takes REMOVE_DEPTH levels off the deepest branch). */
#define REMOVE_PASSES 100000

typedef struct {
    int top;                  /* the tree's top directory */
    unsigned long moved;      /* directories moved up to it in this pass */
    unsigned long serial;     /* their names there */
    const atomic_int *stop;   /* set: give up (ECANCELED) */
} remover_t;

/*  Rename `name` (in fdir) to `base` in tdir, or to `base.N` for the first N from *serial on
 *  that nothing there has (base alone while *serial is 0); never over an entry. The name
 *  taken goes into to. 0, or -1 with errno. */
static int s_rename_fresh(int fdir, const char *name, int tdir, const char *base,
                          unsigned long *serial, char *to, size_t to_len)
{
    for (int tries = 0; tries < 100; tries++, (*serial)++) {
        int n = *serial ? snprintf(to, to_len, "%s.%lu", base, *serial)
                        : snprintf(to, to_len, "%s", base);
        if (n < 0 || (size_t)n >= to_len) {
            errno = ENAMETOOLONG;
            return -1;
        }
        if (renameat2(fdir, name, tdir, to, RENAME_NOREPLACE) == 0) {
            (*serial)++;
            return 0;
        }
        if (errno != EEXIST)
            return -1;
    }
    return -1;
}

/*  Move the directory `name` in dfd up to the tree's top, as .kennel-deep[.N]. */
static int s_move_up(remover_t *r, int dfd, const char *name)
{
    char to[64];
    if (s_rename_fresh(dfd, name, r->top, ".kennel-deep", &r->serial, to, sizeof to) < 0)
        return -1;
    r->moved++;
    return 0;
}

/*  Remove everything in the directory open as dfd, never following a symlink and never
 *  leaving the tree: every step is relative to a directory fd opened with O_NOFOLLOW, so a
 *  kernel that renames or swaps entries while this runs cannot point it at host files. A
 *  directory that denies us writing or listing (an unprivileged kenneld's own uid made it
 *  0500 or 0) is given 0700 first; fchmodat never follows a symlink with that flag. */
static int s_remove_at(remover_t *r, int dfd, int depth)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (r->stop && atomic_load(r->stop)) {
            closedir(d);
            errno = ECANCELED;
            return -1;
        }
        const char *name = e->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            continue;
        if (unlinkat(dirfd(d), name, 0) == 0 || errno == ENOENT)
            continue;
        if (errno == EACCES && fchmod(dirfd(d), 0700) == 0 &&
            (unlinkat(dirfd(d), name, 0) == 0 || errno == ENOENT))
            continue;
        if (errno != EISDIR && errno != EPERM) {
            rc = -1;
            continue;
        }
        if (depth >= REMOVE_DEPTH) {
            if (s_move_up(r, dirfd(d), name) < 0)
                rc = -1;
            continue;
        }
        int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
        int sub = openat(dirfd(d), name, flags);
        if (sub < 0 && errno == EACCES &&
            fchmodat(dirfd(d), name, 0700, AT_SYMLINK_NOFOLLOW) == 0)
            sub = openat(dirfd(d), name, flags);
        if (sub < 0 || s_remove_at(r, sub, depth + 1) < 0 ||
            (unlinkat(dirfd(d), name, AT_REMOVEDIR) < 0 && errno != ENOENT))
            rc = -1;
    }
    closedir(d);
    return rc;
}

int statedir_remove_tree_until(const char *path, const atomic_int *stop)
{
    remover_t r = {.stop = stop};
    r.top = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (r.top < 0)
        return errno == ENOENT ? 0 : -1;
    int rc = 0;
    for (int pass = 0; pass < REMOVE_PASSES; pass++) {
        int dfd = openat(r.top, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* from its start */
        r.moved = 0;
        rc = dfd < 0 ? -1 : s_remove_at(&r, dfd, 0);
        if (!r.moved || (stop && atomic_load(stop)))
            break; /* what was moved up may have come after readdir's end: another pass */
    }
    if (stop && atomic_load(stop)) {
        rc = -1;
        errno = ECANCELED;
    }
    int saved = errno;
    close(r.top);
    if (rc == 0 && rmdir(path) < 0 && errno != ENOENT) {
        saved = errno;
        rc = -1;
    }
    errno = saved;
    return rc;
}

int statedir_remove_tree(const char *path)
{
    return statedir_remove_tree_until(path, NULL);
}

int statedir_trash(const char *state_dir, const char *dir, char *out, size_t out_len)
{
    const char *name = strrchr(dir, '/');
    char base[PATH_MAX];
    unsigned long serial = 0;
    if (snprintf(base, sizeof base, "%s/trash/%s", state_dir, name ? name + 1 : dir) >=
        (int)sizeof base) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return s_rename_fresh(AT_FDCWD, dir, AT_FDCWD, base, &serial, out, out_len);
}
