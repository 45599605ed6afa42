/*  Unit tests of statedir's removal and trash: a tree of any depth goes whole (deeper than the
 *  directories one removal holds open), symlinks are removed and never followed, directories
 *  that deny their owner writing or listing go too (as an unprivileged kenneld meets them),
 *  a stop flag ends a removal, and the trash takes a directory under a name of its own. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness.h"
#include "statedir.h"

#define DEEP 200 /* levels: over three times the removal's 64, so several passes */

static char s_root[64];

static int s_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

static int s_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/*  DEEP nested directories "d" under top, a file at every 50th level; 0 or -1. */
static int s_make_deep(const char *top)
{
    if (mkdir(top, 0700) < 0)
        return -1;
    int dfd = open(top, O_RDONLY | O_DIRECTORY);
    for (int i = 0; i < DEEP && dfd >= 0; i++) {
        if (i % 50 == 0) {
            int f = openat(dfd, "blob", O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (f < 0 || write(f, "x", 1) != 1) {
                close(dfd);
                return -1;
            }
            close(f);
        }
        int sub = mkdirat(dfd, "d", 0700) == 0 ? openat(dfd, "d", O_RDONLY | O_DIRECTORY) : -1;
        close(dfd);
        dfd = sub;
    }
    if (dfd < 0)
        return -1;
    close(dfd);
    return 0;
}

TEST(a_tree_deeper_than_the_removal_holds_goes_whole)
{
    char top[128];
    snprintf(top, sizeof top, "%s/deep", s_root);
    CHECK_EQ_INT(s_make_deep(top), 0);
    CHECK_EQ_INT(statedir_remove_tree(top), 0);
    CHECK(!s_exists(top));
}

TEST(symlinks_are_removed_never_followed)
{
    char top[128], outside[128], path[256];
    snprintf(top, sizeof top, "%s/links", s_root);
    snprintf(outside, sizeof outside, "%s/outside", s_root);
    CHECK_EQ_INT(mkdir(top, 0700), 0);
    CHECK_EQ_INT(mkdir(outside, 0700), 0);
    snprintf(path, sizeof path, "%s/keep", outside);
    CHECK_EQ_INT(s_write(path, "host file"), 0);
    snprintf(path, sizeof path, "%s/to-dir", top);
    CHECK_EQ_INT(symlink(outside, path), 0);
    snprintf(path, sizeof path, "%s/to-file", top);
    char target[256];
    snprintf(target, sizeof target, "%s/keep", outside);
    CHECK_EQ_INT(symlink(target, path), 0);
    CHECK_EQ_INT(statedir_remove_tree(top), 0);
    CHECK(!s_exists(top));
    CHECK(s_exists(target));
}

/*  Own every entry under path (lchown: links themselves). */
static void s_chown_tree(const char *path, uid_t uid)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "chown -R -h %u:%u '%s'", (unsigned)uid, (unsigned)uid, path);
    CHECK_EQ_INT(system(cmd), 0);
}

TEST(directories_that_deny_their_owner_go_too)
{
    /* What an unprivileged kenneld meets: a kernel (its own uid) made directories 0500 and 0
     * before its session ended. Root ignores modes, so the removal runs as another uid. */
    const uid_t uid = 64123;
    char parent[128], top[192], path[256];
    snprintf(parent, sizeof parent, "%s/unpriv", s_root);
    snprintf(top, sizeof top, "%s/session", parent);
    CHECK_EQ_INT(mkdir(parent, 0700), 0);
    CHECK_EQ_INT(mkdir(top, 0700), 0);
    snprintf(path, sizeof path, "%s/readonly", top);
    CHECK_EQ_INT(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/readonly/file", top);
    CHECK_EQ_INT(s_write(path, "x"), 0);
    snprintf(path, sizeof path, "%s/closed", top);
    CHECK_EQ_INT(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/closed/inner", top);
    CHECK_EQ_INT(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/closed/inner/file", top);
    CHECK_EQ_INT(s_write(path, "x"), 0);
    s_chown_tree(parent, uid);
    snprintf(path, sizeof path, "%s/readonly", top);
    CHECK_EQ_INT(chmod(path, 0500), 0);
    snprintf(path, sizeof path, "%s/closed", top);
    CHECK_EQ_INT(chmod(path, 0), 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0)
            _exit(2);
        _exit(statedir_remove_tree(top) == 0 ? 0 : 1);
    }
    CHECK_EQ_INT(harness_exit_status(pid), 0);
    CHECK(!s_exists(top));
}

TEST(a_stop_flag_ends_a_removal)
{
    char top[128];
    snprintf(top, sizeof top, "%s/stopped", s_root);
    CHECK_EQ_INT(s_make_deep(top), 0);
    atomic_int stop = 1;
    errno = 0;
    CHECK_EQ_INT(statedir_remove_tree_until(top, &stop), -1);
    CHECK_EQ_INT(errno, ECANCELED);
    CHECK(s_exists(top));
    atomic_store(&stop, 0);
    CHECK_EQ_INT(statedir_remove_tree_until(top, &stop), 0);
    CHECK(!s_exists(top));
}

TEST(the_trash_takes_a_directory_under_a_name_of_its_own)
{
    char state[128], dir[192], out[256], path[300];
    snprintf(state, sizeof state, "%s/state", s_root);
    CHECK_EQ_INT(statedir_prepare(state), 0);
    snprintf(dir, sizeof dir, "%s/sessions/abc", state);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_INT(mkdir(dir, 0700), 0);
        snprintf(path, sizeof path, "%s/file", dir);
        CHECK_EQ_INT(s_write(path, i ? "second" : "first"), 0);
        CHECK_EQ_INT(statedir_trash(state, dir, out, sizeof out), 0);
        CHECK(!s_exists(dir));
        snprintf(path, sizeof path, i ? "%s/trash/abc.1" : "%s/trash/abc", state);
        CHECK_STR(out, path);
        CHECK(s_exists(out));
    }
    errno = 0;
    CHECK_EQ_INT(statedir_trash(state, dir, out, sizeof out), -1);
    CHECK_EQ_INT(errno, ENOENT);
    CHECK_EQ_INT(statedir_remove_tree(state), 0);
}

int main(void)
{
    snprintf(s_root, sizeof s_root, "/tmp/kennel-test-statedir-XXXXXX");
    if (!mkdtemp(s_root)) {
        perror("mkdtemp");
        return 1;
    }
    chmod(s_root, 0755); /* the unprivileged removal's parent lies below */
    RUN(a_tree_deeper_than_the_removal_holds_goes_whole);
    RUN(symlinks_are_removed_never_followed);
    RUN(directories_that_deny_their_owner_go_too);
    RUN(a_stop_flag_ends_a_removal);
    RUN(the_trash_takes_a_directory_under_a_name_of_its_own);
    statedir_remove_tree(s_root);
    return harness_done();
}
