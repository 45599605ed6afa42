/*  statedir: files other processes read (the CLI, Jupyter clients) must never be seen half
 *  written, hence temporary file + fsync + rename. */
#include "statedir.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
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
    if (snprintf(path, sizeof path, "%s/sessions", dir) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return s_mkdirs(path, 0700);
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

int statedir_write_file(const char *path, const void *data, size_t len)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -1;
    int rc = util_write_all(fd, data, len) == 0 && fsync(fd) == 0 ? 0 : -1;
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

int statedir_write_json(const char *path, const json_t *obj)
{
    char *text = json_dumps(obj, JSON_INDENT(1) | JSON_SORT_KEYS);
    if (!text) {
        errno = ENOMEM;
        return -1;
    }
    size_t len = strlen(text);
    text[len] = '\n'; /* json_dumps leaves room for the NUL this overwrites */
    int rc = statedir_write_file(path, text, len + 1);
    int saved = errno;
    free(text);
    errno = saved;
    return rc;
}

static int s_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

int statedir_remove_tree(const char *path)
{
    return nftw(path, s_remove_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}
