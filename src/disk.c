/*  disk: why an ext4 image on a loop device. The cap has to hold against a kernel that
 *  writes as fast as it can, from many processes, through files, directories and inodes
 *  alike; a filesystem of its own gives exactly ENOSPC at the size, needs nothing of the
 *  host's filesystem (project quotas need ext4 or xfs mounted with prjquota), survives
 *  eviction and restarts as a plain file, and hides the host path of the workspace from
 *  the kernel's mountinfo. The image is sparse, so a session uses host disk only for what
 *  it writes; `discard` punches freed blocks back out of it.
 *  mke2fs and e2fsck are run with posix_spawn: kenneld is multithreaded, and they take
 *  milliseconds on an empty or clean image. Even so, that is kenneld's loop held for every
 *  new session: mke2fs runs once per size, into a template that new images are copied from. */
#include "disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/param.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#define MKE2FS "/usr/sbin/mke2fs"
#define E2FSCK "/usr/sbin/e2fsck"
#define BYTES_PER_INODE "32768" /* 32768 inodes a GiB: 8 MiB of inode tables, 0.8% */
#define MOUNT_OPTS "discard,errors=remount-ro"

extern char **environ;

/*  Run an e2fsprogs program: stdin and stdout on /dev/null, stderr into a pipe of which the
 *  first line is logged on failure. Returns its exit status (128+N for a signal), or -1 with
 *  errno when it could not be run. */
static int s_run(char *const argv[])
{
    int err_pipe[2];
    if (pipe2(err_pipe, O_CLOEXEC) < 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
    /* kenneld blocks its stop signals and ignores SIGPIPE; the tools get the defaults. */
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(err_pipe[1]);
    if (rc != 0) {
        close(err_pipe[0]);
        errno = rc;
        return -1;
    }
    char text[512];
    size_t len = 0;
    ssize_t n;
    while ((n = read(err_pipe[0], text + len, sizeof text - 1 - len)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        len += (size_t)n;
        if (len == sizeof text - 1) {
            char sink[512]; /* drain the rest so the tool never blocks on a full pipe */
            while ((n = read(err_pipe[0], sink, sizeof sink)) > 0 || (n < 0 && errno == EINTR))
                ;
            break;
        }
    }
    close(err_pipe[0]);
    text[len] = '\0';
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (code != 0 && len) {
        char line[256];
        text[strcspn(text, "\n")] = '\0';
        LOG_W("%s: exit %d: %s", argv[0], code, log_sanitize(line, sizeof line, text, strlen(text)));
    }
    return code;
}

int disk_private_mounts(void)
{
    if (unshare(CLONE_NEWNS) < 0)
        return -1;
    /* A slave: the host's later mounts still reach us, ours never reach the host. (Source
     * and type are ignored for a propagation change; "none" rather than NULL keeps
     * valgrind quiet.) */
    return mount("none", "/", "none", MS_REC | MS_SLAVE, NULL);
}

/*  Format a new sparse file of bytes at image (must not exist). 0, or -1 with errno and *step
 *  (the file is removed). */
static int s_mkfs(const char *image, unsigned long long bytes, const char **step)
{
    int fd = open(image, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        *step = "create the workspace image";
        return -1;
    }
    int rc = ftruncate(fd, (off_t)bytes);
    int saved = errno;
    close(fd);
    if (rc < 0) {
        unlink(image);
        errno = saved;
        *step = "size the workspace image";
        return -1;
    }
    /* No journal (a kernel's scratch space needs no crash consistency, and a journal costs
     * its size), no blocks reserved for root, no room for online growth; 4 KiB blocks to
     * match the loop device's. The file is all zeros, so nothing is zeroed again. */
    char *argv[] = {MKE2FS, "-q", "-F", "-t", "ext4", "-b", "4096", "-m", "0", "-i", BYTES_PER_INODE,
                    "-O", "^has_journal,^resize_inode", "-E", "assume_storage_prezeroed=1",
                    (char *)image, NULL};
    int code = s_run(argv);
    if (code != 0) {
        saved = code < 0 ? errno : EIO;
        unlink(image);
        errno = saved;
        *step = "mke2fs";
        return -1;
    }
    return 0;
}

/* ---- templates ------------------------------------------------------------------------- */

#define TEMPLATES_MAX 8 /* sizes kept; a session asking for a ninth size gets mke2fs */

static char s_templates[PATH_MAX];           /* the directory; empty: no templates */
static unsigned long long s_sizes[TEMPLATES_MAX]; /* sizes made there so far; 0: free */

int disk_templates(const char *dir)
{
    if (strlen(dir) >= sizeof s_templates - 32) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return -1;
    /* Whatever an earlier kenneld left may come from another mke2fs: made again on use. */
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.')
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    snprintf(s_templates, sizeof s_templates, "%s", dir);
    memset(s_sizes, 0, sizeof s_sizes);
    return 0;
}

/*  Copy the data of in (its holes stay holes) into out, which has in's size. 0, or -1. */
static int s_copy_sparse(int in, int out)
{
    off_t end = lseek(in, 0, SEEK_END), pos = 0;
    if (end < 0)
        return -1;
    static char buf[1 << 16];
    while (pos < end) {
        off_t data = lseek(in, pos, SEEK_DATA);
        if (data < 0)
            return errno == ENXIO ? 0 : -1; /* no data after pos */
        off_t hole = lseek(in, data, SEEK_HOLE);
        if (hole < 0)
            return -1;
        loff_t from = data, to = data;
        while (from < hole) {
            ssize_t n = copy_file_range(in, &from, out, &to, (size_t)(hole - from), 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
                          errno == EOPNOTSUPP)) {
                /* A filesystem that cannot copy in the kernel: by hand. */
                ssize_t r = pread(in, buf, MIN(sizeof buf, (size_t)(hole - from)), from);
                if (r <= 0 || pwrite(out, buf, (size_t)r, to) != r)
                    return -1;
                from += r;
                to += r;
                continue;
            }
            if (n <= 0) {
                if (n == 0)
                    errno = EIO;
                return -1;
            }
        }
        pos = hole;
    }
    return 0;
}

/*  The template for bytes, made on first use: its path in path, or -1 (no room for another
 *  size, or mke2fs failed: the caller runs mke2fs itself). */
static int s_template(unsigned long long bytes, char *path, size_t path_len)
{
    if (!s_templates[0])
        return -1;
    int slot = -1;
    for (int i = 0; i < TEMPLATES_MAX; i++) {
        if (s_sizes[i] == bytes) {
            snprintf(path, path_len, "%s/%llu.img", s_templates, bytes);
            return 0;
        }
        if (!s_sizes[i] && slot < 0)
            slot = i;
    }
    if (slot < 0)
        return -1;
    snprintf(path, path_len, "%s/%llu.img", s_templates, bytes);
    unlink(path);
    const char *step;
    if (s_mkfs(path, bytes, &step) < 0) {
        PLOG_W("disk: cannot make the template for %llu MiB images (%s)", bytes >> 20, step);
        return -1;
    }
    s_sizes[slot] = bytes;
    return 0;
}

int disk_create(const char *image, unsigned long long bytes, const char **step)
{
    char tpl[PATH_MAX + 48];
    if (s_template(bytes, tpl, sizeof tpl) < 0)
        return s_mkfs(image, bytes, step);
    int in = open(tpl, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0) {
        /* Removed under us (a state directory cleaned by hand): made again next time. */
        PLOG_W("disk: template %s", tpl);
        for (int i = 0; i < TEMPLATES_MAX; i++)
            if (s_sizes[i] == bytes)
                s_sizes[i] = 0;
        return s_mkfs(image, bytes, step);
    }
    int out = open(image, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0) {
        close(in);
        *step = "create the workspace image";
        return -1;
    }
    int rc = ftruncate(out, (off_t)bytes);
    *step = rc < 0 ? "size the workspace image" : "copy the workspace image template";
    if (rc == 0)
        rc = s_copy_sparse(in, out);
    int saved = errno;
    close(in);
    close(out);
    if (rc < 0) {
        unlink(image);
        errno = saved;
        return -1;
    }
    return 0;
}

/*  Attach image_fd to a free loop device that clears itself when its last user closes it.
 *  Returns the device's fd (its path in dev), or -1 with errno. */
static int s_loop_attach(int image_fd, char *dev, size_t dev_len)
{
    int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0)
        return -1;
    int fd = -1;
    /* Another process may take the device we were offered before we configure it (EBUSY):
     * ask again. */
    for (int tries = 0; tries < 16 && fd < 0; tries++) {
        int n = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (n < 0)
            break;
        snprintf(dev, dev_len, "/dev/loop%d", n);
        fd = open(dev, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            break;
        struct loop_config lc;
        memset(&lc, 0, sizeof lc);
        lc.fd = (unsigned)image_fd;
        lc.block_size = 4096;
        lc.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO;
        int rc = ioctl(fd, LOOP_CONFIGURE, &lc);
        if (rc < 0 && errno == EINVAL) {
            /* Direct I/O (no second copy of the pages in the host's cache) needs the backing
             * filesystem's support; without it, buffered. */
            lc.info.lo_flags = LO_FLAGS_AUTOCLEAR;
            rc = ioctl(fd, LOOP_CONFIGURE, &lc);
        }
        if (rc < 0 && (errno == ENOTTY || errno == EINVAL)) {
            /* Kernels before 5.8: attach, then set the flags. */
            struct loop_info64 info;
            memset(&info, 0, sizeof info);
            info.lo_flags = LO_FLAGS_AUTOCLEAR;
            rc = ioctl(fd, LOOP_SET_FD, image_fd);
            if (rc == 0 && ioctl(fd, LOOP_SET_STATUS64, &info) < 0) {
                int saved = errno;
                ioctl(fd, LOOP_CLR_FD, 0);
                errno = saved;
                rc = -1;
            }
        }
        if (rc < 0) {
            int saved = errno;
            close(fd);
            fd = -1;
            errno = saved;
            if (saved != EBUSY)
                break;
        }
    }
    int saved = errno;
    close(ctl);
    errno = saved;
    return fd;
}

int disk_is_mounted(const char *dir)
{
    char parent[PATH_MAX + 4];
    struct stat a, b;
    snprintf(parent, sizeof parent, "%s/..", dir);
    return lstat(dir, &a) == 0 && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

int disk_mount(const char *image, const char *dir, int fresh, uid_t uid, gid_t gid,
               const char **step)
{
    /* Left by a kenneld that died without a mount namespace of its own: off first, so the
     * check below never runs on a mounted filesystem. */
    if (disk_is_mounted(dir) && umount2(dir, UMOUNT_NOFOLLOW) < 0) {
        *step = "unmount the old workspace mount";
        return -1;
    }
    if (!fresh) {
        /* Preen: fixes what a kenneld that died mid-write left; instant on a clean image. */
        char *argv[] = {E2FSCK, "-p", (char *)image, NULL};
        int code = s_run(argv);
        if (code < 0 || code >= 4) {
            errno = code < 0 ? errno : EIO;
            *step = "e2fsck";
            return -1;
        }
    }
    int image_fd = open(image, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (image_fd < 0) {
        *step = "open the workspace image";
        return -1;
    }
    struct stat st;
    if (fstat(image_fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(image_fd);
        errno = EINVAL;
        *step = "open the workspace image";
        return -1;
    }
    char dev[64];
    int loop_fd = s_loop_attach(image_fd, dev, sizeof dev);
    int saved = errno;
    close(image_fd);
    if (loop_fd < 0) {
        errno = saved;
        *step = "attach a loop device";
        return -1;
    }
    int rc = mount(dev, dir, "ext4", MS_NOSUID | MS_NODEV, MOUNT_OPTS);
    saved = errno;
    /* The mount holds the device now; this close makes the mount its last user, so the
     * device is cleared when the mount goes (or at once, if the mount failed). */
    close(loop_fd);
    if (rc < 0) {
        errno = saved;
        *step = "mount the workspace image";
        return -1;
    }
    if (fresh) {
        /* The kernel's uid could not remove mke2fs's root-owned lost+found, and `kennel files`
         * would list it; the root is 0700 like an unmounted workspace. */
        char lf[PATH_MAX + 16];
        snprintf(lf, sizeof lf, "%s/lost+found", dir);
        if ((rmdir(lf) < 0 && errno != ENOENT) || chown(dir, uid, gid) < 0 ||
            chmod(dir, 0700) < 0) {
            saved = errno;
            umount2(dir, MNT_DETACH);
            errno = saved;
            *step = "prepare the workspace image";
            return -1;
        }
    }
    return 0;
}

int disk_unmount(const char *dir, int lazy)
{
    if (umount2(dir, UMOUNT_NOFOLLOW | (lazy ? MNT_DETACH : 0)) == 0)
        return 0;
    if (errno == EINVAL || errno == ENOENT)
        return 0; /* nothing mounted there */
    if (errno == EBUSY && !lazy) {
        PLOG_W("umount(%s); detaching it instead", dir);
        return umount2(dir, UMOUNT_NOFOLLOW | MNT_DETACH);
    }
    return -1;
}

int disk_probe(const char *dir, char *desc, size_t desc_len)
{
    if (geteuid() != 0) {
        snprintf(desc, desc_len, "kenneld is not root: loop devices and ext4 mounts need root");
        return -1;
    }
    char image[PATH_MAX + 32], mnt[PATH_MAX + 32];
    snprintf(image, sizeof image, "%s/disk-probe.img", dir);
    snprintf(mnt, sizeof mnt, "%s/disk-probe", dir);
    disk_unmount(mnt, 1);
    unlink(image);
    if (mkdir(mnt, 0700) < 0 && errno != EEXIST) {
        snprintf(desc, desc_len, "mkdir(%s): %s", mnt, strerror(errno));
        return -1;
    }
    const char *step = NULL;
    long long t0 = util_now_ms();
    int rc = disk_create(image, DISK_MIN_BYTES, &step);
    long long t1 = util_now_ms();
    if (rc == 0)
        rc = disk_mount(image, mnt, 1, getuid(), getgid(), &step);
    long long t2 = util_now_ms();
    int saved = errno;
    struct statvfs sv;
    if (rc == 0 && (statvfs(mnt, &sv) < 0 || sv.f_blocks * sv.f_frsize > DISK_MIN_BYTES)) {
        step = "check the size of the mounted image";
        saved = EINVAL;
        rc = -1;
    }
    if (rc == 0 && disk_unmount(mnt, 0) < 0) {
        step = "unmount";
        saved = errno;
        rc = -1;
    }
    long long t3 = util_now_ms();
    disk_unmount(mnt, 1);
    unlink(image);
    rmdir(mnt);
    if (rc < 0) {
        snprintf(desc, desc_len, "%s: %s", step, strerror(saved));
        return -1;
    }
    snprintf(desc, desc_len,
             "an ext4 image per session, loop-mounted (probe: mke2fs %lld ms, mount %lld ms, "
             "unmount %lld ms)",
             t1 - t0, t2 - t1, t3 - t2);
    return 0;
}
