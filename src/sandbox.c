/*  sandbox: the order of the steps is the security argument.
 *  1. The launcher (single-threaded) drops supplementary groups when it is root (it cannot
 *     otherwise), then clones the child into all new namespaces at once, so the child never
 *     exists half-isolated.
 *  2. The launcher, outside, writes the child's maps: only SANDBOX_UID is mapped, to an
 *     unprivileged host id of the session (an unprivileged launcher: its own). Root inside maps to nothing, so nothing the kernel
 *     does can act as a host id it does not own. setgroups is denied first.
 *  3. The child switches to SANDBOX_UID keeping its capabilities (in its own user namespace
 *     only), because files it creates must belong to a mapped id (EOVERFLOW otherwise).
 *  4. It builds the new root on a tmpfs, mounts /proc while the old root is still visible
 *     (the kernel refuses a new proc mount afterwards), pivots, detaches the old root and
 *     makes the new root read-only.
 *  5. sandbox_seal drops every capability and sets no_new_privs before loading seccomp, so
 *     nothing after it can gain a privilege back, then the kernel is exec'd. */
#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <limits.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <grp.h>

#include "sysfilter.h"
#include "util.h"


#define STEP(name, expr)                                                                   \
    do {                                                                                   \
        if ((expr) < 0) {                                                                  \
            *step = (name);                                                                \
            return -1;                                                                     \
        }                                                                                  \
    } while (0)

/*  Write text to path opened with flags (and mode, when creating). 0, or -1 with errno. */
static int s_write_text(const char *path, const char *text, int flags, mode_t mode)
{
    int fd = open(path, flags | O_WRONLY | O_CLOEXEC, mode);
    if (fd < 0)
        return -1;
    int rc = util_write_all(fd, text, strlen(text));
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

/*  What the parent tells the child once it has set it up. */
typedef struct {
    int err;         /* 0, or the errno of the step that failed */
    char step[48];
} sandbox_setup_t;

/*  Write the decimal pid into an open cgroup.procs file. 0, or -1 with errno. */
static int s_join_cgroup(int fd, pid_t pid)
{
    char text[24];
    int n = snprintf(text, sizeof text, "%d", (int)pid);
    return pwrite(fd, text, (size_t)n, 0) == n ? 0 : -1;
}

/*  The parent's half: the child's maps (setgroups denied first), then its cgroups. */
static int s_setup_child(pid_t pid, const sandbox_cfg_t *cfg, const sandbox_clone_opts_t *opts,
                         const char **step)
{
    char path[64], map[64];
    snprintf(path, sizeof path, "/proc/%d/setgroups", (int)pid);
    STEP("write setgroups", s_write_text(path, "deny", 0, 0));
    snprintf(map, sizeof map, "%d %u 1\n", SANDBOX_UID, (unsigned)cfg->host_uid);
    snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
    STEP("write uid_map", s_write_text(path, map, 0, 0));
    snprintf(map, sizeof map, "%d %u 1\n", SANDBOX_UID, (unsigned)cfg->host_gid);
    snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
    STEP("write gid_map", s_write_text(path, map, 0, 0));
    for (size_t i = 0; opts->cgroup_fds && opts->cgroup_fds[i] >= 0; i++)
        STEP("join cgroup", s_join_cgroup(opts->cgroup_fds[i], pid));
    return 0;
}

pid_t sandbox_clone(const sandbox_cfg_t *cfg, const sandbox_clone_opts_t *opts, int *lifeline,
                    const char **step)
{
    int sync[2], life[2] = {opts->lifeline, -1};
    /* Root drops its supplementary groups. An unprivileged launcher cannot, nor can its
     * child (setgroups is denied in its user namespace): kenneld reports it as a lost wall. */
    if (geteuid() == 0)
        STEP("setgroups", setgroups(0, NULL));
    STEP("pipe", pipe2(sync, O_CLOEXEC));
    /* Without a lifeline from the owner, we are the owner: we hold the write end until we
     * die, and the child sees the hang-up. */
    if (opts->lifeline < 0 && pipe2(life, O_CLOEXEC) < 0) {
        *step = "pipe";
        close(sync[0]);
        close(sync[1]);
        return -1;
    }
    /* No CLONE_NEWCGROUP yet: the child enters a cgroup namespace once it is in its own
     * cgroups, so that its view is rooted there. */
    unsigned long flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWNS |
                          CLONE_NEWIPC | CLONE_NEWUTS | (opts->as_sibling ? CLONE_PARENT : 0);
    /* A fork-like clone: the child continues on a copy of our stack. */
    pid_t pid = (pid_t)syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, NULL, 0);
    if (pid < 0) {
        *step = "clone(namespaces)";
        int saved = errno;
        close(sync[0]);
        close(sync[1]);
        if (opts->lifeline < 0) {
            close(life[0]);
            close(life[1]);
        }
        errno = saved;
        return -1;
    }
    if (pid == 0) {
        /* Wait until the parent has set us up: it sends how that went. */
        close(sync[1]);
        if (life[1] >= 0)
            close(life[1]);
        *lifeline = life[0];
        static sandbox_setup_t got;
        ssize_t n;
        do
            n = read(sync[0], &got, sizeof got);
        while (n < 0 && errno == EINTR);
        close(sync[0]);
        if (n != (ssize_t)sizeof got || got.err) {
            got.step[sizeof got.step - 1] = '\0';
            *step = n == (ssize_t)sizeof got ? got.step : "id maps";
            errno = n == (ssize_t)sizeof got ? got.err : EPERM;
            return -1;
        }
        STEP("unshare(cgroup namespace)", unshare(CLONE_NEWCGROUP));
        return 0;
    }
    close(sync[0]);
    if (opts->lifeline < 0)
        close(life[0]);
    /* A failed setup is the child's to report (the caller may not be its parent). */
    sandbox_setup_t done = {0, ""};
    const char *failed = NULL;
    if (s_setup_child(pid, cfg, opts, &failed) < 0) {
        done.err = errno;
        snprintf(done.step, sizeof done.step, "%s", failed);
    }
    (void)!write(sync[1], &done, sizeof done);
    close(sync[1]);
    return pid;
}

/*  Set effective, permitted and inheritable capability sets to all or nothing. */
static int s_capset(int all)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, all ? 0xff : 0, sizeof data);
    if (!all)
        return (int)syscall(SYS_capset, &hdr, data);
    data[0].inheritable = data[1].inheritable = 0;
    return (int)syscall(SYS_capset, &hdr, data);
}

/*  Mount flags a bind must keep when remounted in a user namespace (they are locked). */
static unsigned long s_locked_flags(const char *path)
{
    struct statvfs sv;
    unsigned long flags = 0;
    if (statvfs(path, &sv) < 0)
        return 0;
    if (sv.f_flag & ST_NOSUID) flags |= MS_NOSUID;
    if (sv.f_flag & ST_NODEV) flags |= MS_NODEV;
    if (sv.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
    if (sv.f_flag & ST_NOATIME) flags |= MS_NOATIME;
    if (sv.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
    if (sv.f_flag & ST_RELATIME) flags |= MS_RELATIME;
    return flags;
}

/*  Bind src at dst (created as a dir or an empty file to match), then remount with flags. */
static int s_bind(const char *src, const char *dst, unsigned long flags)
{
    struct stat st;
    if (stat(src, &st) < 0)
        return -1;
    if (S_ISDIR(st.st_mode)) {
        if (mkdir(dst, 0755) < 0 && errno != EEXIST)
            return -1;
    } else {
        int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            return -1;
        close(fd);
    }
    if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
        return -1;
    return mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | flags | s_locked_flags(src), NULL);
}

#define RO (MS_RDONLY | MS_NOSUID | MS_NODEV)

/*  /etc gets only what Python, numpy (BLAS via alternatives) and matplotlib read. */
static const char *const s_etc_files[] = {
    "/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime", "/etc/matplotlibrc",
    "/etc/python3",     "/etc/python3.11",   "/etc/mime.types",
};

/*  The new root's path for rel, into out (PATH_MAX). */
static const char *s_in(char *out, const sandbox_cfg_t *cfg, const char *rel)
{
    (void)cfg;
    snprintf(out, PATH_MAX, SANDBOX_NEWROOT "%s", rel);
    return out;
}

/*  The magic-link path of an fd, usable as a bind source. */
static const char *s_fd_path(char *out, int fd)
{
    snprintf(out, 32, "/proc/self/fd/%d", fd);
    return out;
}

static int s_build_root(const sandbox_cfg_t *cfg, int workspace_fd, int kernel_fd,
                        const int *bind_fds, const char **step)
{
    char opts[128], path[PATH_MAX], rel[64], src[32];
    STEP("make mounts private", mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL));
    STEP("mount root tmpfs", mount("tmpfs", SANDBOX_NEWROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m,nr_inodes=4096"));
    STEP("bind /usr", s_bind("/usr", s_in(path, cfg, "/usr"), RO));
    /* Merged /usr: /bin, /lib… are symlinks into it; mirror what the host has. */
    static const char *const top[] = {"bin", "sbin", "lib", "lib32", "lib64", "libx32"};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) {
        char host[32], target[64];
        snprintf(host, sizeof host, "/%s", top[i]);
        ssize_t n = readlink(host, target, sizeof target - 1);
        snprintf(rel, sizeof rel, "/%s", top[i]);
        s_in(path, cfg, rel);
        if (n > 0) {
            target[n] = '\0';
            STEP("symlink system dir", symlink(target, path));
        } else if (access(host, F_OK) == 0) {
            STEP("bind system dir", s_bind(host, path, RO));
        }
    }
    STEP("mkdir /etc", mkdir(s_in(path, cfg, "/etc"), 0755));
    for (size_t i = 0; i < sizeof s_etc_files / sizeof s_etc_files[0]; i++) {
        s_in(path, cfg, s_etc_files[i]);
        if (access(s_etc_files[i], F_OK) == 0)
            STEP("bind /etc file", s_bind(s_etc_files[i], path, RO));
    }
    char passwd[128], group[64];
    snprintf(passwd, sizeof passwd, "kernel:x:%d:%d:kennel kernel:%s:/bin/sh\n", SANDBOX_UID,
             SANDBOX_UID, SANDBOX_WORKSPACE);
    snprintf(group, sizeof group, "kernel:x:%d:\n", SANDBOX_UID);
    const int create = O_CREAT | O_EXCL | O_NOFOLLOW;
    STEP("write /etc/passwd", s_write_text(s_in(path, cfg, "/etc/passwd"), passwd, create, 0644));
    STEP("write /etc/group", s_write_text(s_in(path, cfg, "/etc/group"), group, create, 0644));
    STEP("write /etc/hostname",
         s_write_text(s_in(path, cfg, "/etc/hostname"), "kennel\n", create, 0644));

    /* /proc of the new pid namespace, before the old root goes: hidepid and subset=pid hide
     * /proc/sys, /proc/kcore and friends. */
    STEP("mkdir /proc", mkdir(s_in(path, cfg, "/proc"), 0555));
    STEP("mount /proc", mount("proc", s_in(path, cfg, "/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                              "hidepid=invisible,subset=pid"));

    /* A small /dev: no disks, no tty, no kmsg, no mem. */
    STEP("mkdir /dev", mkdir(s_in(path, cfg, "/dev"), 0755));
    STEP("mount /dev", mount("tmpfs", s_in(path, cfg, "/dev"), "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k"));
    static const char *const devs[] = {"null", "zero", "full", "random", "urandom"};
    for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++) {
        char host[32];
        snprintf(host, sizeof host, "/dev/%s", devs[i]);
        snprintf(rel, sizeof rel, "/dev/%s", devs[i]);
        s_in(path, cfg, rel);
        STEP("bind device", s_bind(host, path, MS_NOSUID | MS_NOEXEC));
    }
    static const char *const links[][2] = {{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
                                           {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}};
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        snprintf(rel, sizeof rel, "/dev/%s", links[i][1]);
        s_in(path, cfg, rel);
        STEP("symlink /dev entry", symlink(links[i][0], path));
    }
    snprintf(opts, sizeof opts, "mode=1777,size=%llu,nr_inodes=16384", cfg->tmp_bytes);
    STEP("mkdir /dev/shm", mkdir(s_in(path, cfg, "/dev/shm"), 01777));
    STEP("mount /dev/shm", mount("tmpfs", s_in(path, cfg, "/dev/shm"), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts));
    STEP("mkdir /tmp", mkdir(s_in(path, cfg, "/tmp"), 01777));
    STEP("mount /tmp", mount("tmpfs", s_in(path, cfg, "/tmp"), "tmpfs", MS_NOSUID | MS_NODEV, opts));

    s_in(path, cfg, SANDBOX_WORKSPACE);
    if (cfg->workspace_fd >= 0) {
        /* A detached copy of the workspace's mount, made by kenneld (open_tree): an fd of the
         * host's mount namespace could not be a bind source here. */
        STEP("mkdir workspace", mkdir(path, 0755));
        STEP("attach workspace", move_mount(workspace_fd, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH));
        STEP("remount workspace", mount(NULL, path, NULL, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | s_locked_flags(path), NULL));
    } else {
        STEP("bind workspace", s_bind(s_fd_path(src, workspace_fd), path, MS_NOSUID | MS_NODEV));
    }
    STEP("mkdir /opt", mkdir(s_in(path, cfg, "/opt"), 0755));
    STEP("bind kernel runtime", s_bind(s_fd_path(src, kernel_fd), s_in(path, cfg, SANDBOX_KERNEL_DIR), RO));
    /* The operator's site-packages and datasets: read-only, like the system directories.
     * Mounts below a bound directory stay as the host has them (the bind is recursive, the
     * read-only remount is not); kenneld --help says so. */
    for (size_t i = 0; i < cfg->nbinds; i++) {
        /* /data itself, read-only with the root, once a dataset goes under it. */
        if (strncmp(cfg->binds[i].inside, SANDBOX_DATA_DIR "/", sizeof SANDBOX_DATA_DIR) == 0 &&
            mkdir(s_in(path, cfg, SANDBOX_DATA_DIR), 0755) < 0 && errno != EEXIST) {
            *step = "mkdir /data";
            return -1;
        }
        STEP("bind --site or --data", s_bind(s_fd_path(src, bind_fds[i]), s_in(path, cfg, cfg->binds[i].inside), RO));
    }

    STEP("chdir new root", chdir(SANDBOX_NEWROOT));
    STEP("pivot_root", (int)syscall(SYS_pivot_root, ".", "."));
    STEP("detach old root", umount2(".", MNT_DETACH));
    STEP("chdir /", chdir("/"));
    STEP("remount root read-only", mount(NULL, "/", NULL, MS_BIND | MS_REMOUNT | RO, NULL));
    return 0;
}

int sandbox_enter(const sandbox_cfg_t *cfg, int lifeline, const char **step)
{
    /* Open the workspace and the kernel runtime while our fsuid is still the host's root: the
     * state directory may be 0700 root's, which uid SANDBOX_UID could not traverse. Opened here,
     * in our own mount namespace, they can be bind sources (a mount of another namespace
     * cannot). The mounts come later, from /proc/self/fd. */
    int workspace_fd = cfg->workspace_fd >= 0
                           ? fcntl(cfg->workspace_fd, F_DUPFD_CLOEXEC, 0)
                           : open(cfg->workspace, O_PATH | O_DIRECTORY | O_CLOEXEC);
    STEP("open workspace", workspace_fd);
    int kernel_fd = open(cfg->kernel_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    STEP("open kernel runtime", kernel_fd);
    /* --site and --data directories, opened now for the same reason (a step that fails ends
     * this child, and these fds with it). */
    int bind_fds[SANDBOX_MAX_BINDS];
    if (cfg->nbinds > SANDBOX_MAX_BINDS) {
        *step = "open --site or --data";
        errno = E2BIG;
        return -1;
    }
    for (size_t i = 0; i < cfg->nbinds; i++)
        STEP("open --site or --data", bind_fds[i] = open(cfg->binds[i].host, O_PATH | O_DIRECTORY | O_CLOEXEC));
    STEP("PR_SET_KEEPCAPS", prctl(PR_SET_KEEPCAPS, 1));
    STEP("setresgid", setresgid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID));
    STEP("setresuid", setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID));
    /* The uid change cleared the effective set; take it back (inside this namespace only). */
    STEP("capset", s_capset(1));
    /* Die with the launcher (and so with kenneld). Set only now: every credential change
     * above clears it. The launcher may have died before it was set, so look once more. */
    STEP("PR_SET_PDEATHSIG", prctl(PR_SET_PDEATHSIG, SIGKILL));
    struct pollfd pfd = {lifeline, POLLIN, 0};
    if (poll(&pfd, 1, 0) != 0) {
        *step = "launcher alive";
        errno = ESRCH;
        return -1;
    }
    close(lifeline);
    STEP("sethostname", sethostname("kennel", 6));
    int rc = s_build_root(cfg, workspace_fd, kernel_fd, bind_fds, step);
    int saved = errno;
    close(workspace_fd);
    close(kernel_fd);
    for (size_t i = 0; i < cfg->nbinds; i++)
        close(bind_fds[i]);
    errno = saved;
    if (rc < 0)
        return -1;
    struct {
        int resource;
        unsigned long long value;
        const char *name;
    } limits[] = {
        {RLIMIT_AS, cfg->as_bytes, "setrlimit(AS)"},
        {RLIMIT_FSIZE, cfg->fsize_bytes, "setrlimit(FSIZE)"},
        {RLIMIT_NPROC, cfg->nproc, "setrlimit(NPROC)"},
        {RLIMIT_NOFILE, cfg->nofile, "setrlimit(NOFILE)"},
        {RLIMIT_CORE, 0, "setrlimit(CORE)"},
    };
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        if (!limits[i].value && limits[i].resource != RLIMIT_CORE)
            continue;
        struct rlimit rl = {limits[i].value, limits[i].value};
        STEP(limits[i].name, setrlimit(limits[i].resource, &rl));
    }
    STEP("chdir workspace", chdir(SANDBOX_WORKSPACE));
    return 0;
}

int sandbox_seal(const char **step)
{
    return sandbox_seal_keep(NULL, 0, step);
}

int sandbox_seal_keep(const int *keep, size_t n, const char **step)
{
    if (n > SANDBOX_MAX_KEEP) {
        errno = EINVAL;
        *step = "close fds";
        return -1;
    }
    int kept[SANDBOX_MAX_KEEP];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (keep[i] < 4)
            continue;
        size_t j = k++;
        for (; j > 0 && kept[j - 1] > keep[i]; j--) /* insertion: ascending */
            kept[j] = kept[j - 1];
        kept[j] = keep[i];
    }
    unsigned from = 4;
    for (size_t i = 0; i < k; i++) {
        if ((unsigned)kept[i] > from)
            STEP("close fds", (int)syscall(SYS_close_range, from, (unsigned)kept[i] - 1, 0));
        if ((unsigned)kept[i] >= from)
            from = (unsigned)kept[i] + 1;
    }
    STEP("close fds", (int)syscall(SYS_close_range, from, ~0U, 0));
    for (int cap = 0; cap <= CAP_LAST_CAP; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL) {
            *step = "drop bounding capabilities";
            return -1;
        }
    STEP("clear ambient capabilities", prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0));
    STEP("PR_SET_KEEPCAPS off", prctl(PR_SET_KEEPCAPS, 0));
    STEP("drop capabilities", s_capset(0));
    STEP("PR_SET_NO_NEW_PRIVS", prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
    STEP("seccomp", sysfilter_apply());
    return 0;
}
