/*  sysfilter: a denylist over a default-allow filter. An allowlist is tighter, but Python,
 *  numpy and subprocess touch ~240 syscalls and a missing one breaks users in ways that are
 *  hard to see; the namespaces, the empty network namespace and the dropped capabilities are
 *  the other walls. Denied calls fail with EPERM (so Python raises PermissionError, which
 *  tests and users can see) except clone3, which must say ENOSYS so that glibc falls back to
 *  clone(), whose flags this filter can inspect (clone3 keeps them in memory it cannot read). */
#include "sysfilter.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <seccomp.h>

#define DENY SCMP_ACT_ERRNO(EPERM)

/*  Calls that do nothing and succeed: sync() and syncfs() flush every dirty page of a whole
 *  host filesystem (the read-only root's is the host's own), which one session could make
 *  every other process wait on. A session's own files still reach the disk with fsync. */
static const char *const s_no_ops[] = {"sync", "syncfs"};

/*  Calls refused outright. */
static const char *const s_denied[] = {
    /* tracing and other processes' memory */
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    /* filesystems and mounts (the root is built before this filter loads) */
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "name_to_handle_at", "open_by_handle_at",
    "quotactl", "quotactl_fd",
    /* namespaces: a nested user namespace would hand out capabilities again */
    "unshare", "setns",
    /* kernel attack surface a kernel has no use for */
    "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "reboot", "swapon", "swapoff", "acct", "syslog", "vhangup", "lookup_dcookie",
    "fanotify_init", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "modify_ldt", "memfd_secret",
    /* clocks and host identity */
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname",
    "setdomainname", "iopl", "ioperm", "personality", "uselib", "nfsservctl",
};

static int s_build(scmp_filter_ctx ctx)
{
    int rc;
    for (size_t i = 0; i < sizeof s_denied / sizeof s_denied[0]; i++) {
        int nr = seccomp_syscall_resolve_name(s_denied[i]);
        if (nr == __NR_SCMP_ERROR)
            continue; /* not on this architecture */
        if ((rc = seccomp_rule_add(ctx, DENY, nr, 0)) < 0)
            return rc;
    }
    for (size_t i = 0; i < sizeof s_no_ops / sizeof s_no_ops[0]; i++) {
        int nr = seccomp_syscall_resolve_name(s_no_ops[i]);
        if (nr != __NR_SCMP_ERROR && (rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(0), nr, 0)) < 0)
            return rc;
    }
    /* Sockets: AF_UNIX only (socketpair for multiprocessing, local pipes). No TCP, UDP, raw,
     * packet or netlink sockets, even inside the empty network namespace. */
    if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                               SCMP_A0(SCMP_CMP_NE, AF_UNIX))) < 0)
        return rc;
    if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socketpair), 1,
                               SCMP_A0(SCMP_CMP_NE, AF_UNIX))) < 0)
        return rc;
    /* clone: no new namespaces (its flags are in a register, so the filter can see them). */
    static const unsigned long ns_flags[] = {CLONE_NEWNS,  CLONE_NEWUSER, CLONE_NEWPID,
                                             CLONE_NEWNET, CLONE_NEWIPC,  CLONE_NEWUTS,
                                             CLONE_NEWCGROUP};
    for (size_t i = 0; i < sizeof ns_flags / sizeof ns_flags[0]; i++)
        if ((rc = seccomp_rule_add(ctx, DENY, SCMP_SYS(clone), 1,
                                   SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]))) < 0)
            return rc;
    if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0)) < 0)
        return rc;
    /* fallocate: only its plain mode, which RLIMIT_FSIZE bounds. FALLOC_FL_KEEP_SIZE
     * allocates blocks past a file's end that neither the limit nor its size sees: through
     * the save file kenneld gives a kernel (broker.c), they would be blocks of kenneld's
     * disk. glibc's posix_fallocate uses the plain mode. */
    if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EOPNOTSUPP), SCMP_SYS(fallocate), 1,
                               SCMP_A1(SCMP_CMP_NE, 0))) < 0)
        return rc;
    /* ...and the XFS-era ioctls that reach the same allocation (FS_IOC_RESVSP, _UNRESVSP,
     * their 64-bit twins, ZERO_RANGE): compared on 32 bits, as TIOCSTI below. */
    static const unsigned long reserve_ioctls[] = {0x40305828, 0x40305829, 0x4030582a,
                                                   0x4030582b, 0x40305839};
    for (size_t i = 0; i < sizeof reserve_ioctls / sizeof reserve_ioctls[0]; i++)
        if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EOPNOTSUPP), SCMP_SYS(ioctl), 1,
                                   SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu,
                                           reserve_ioctls[i]))) < 0)
            return rc;
    /* TIOCSTI / TIOCLINUX push input into a terminal: compared on 32 bits, as the kernel does. */
    if ((rc = seccomp_rule_add(ctx, DENY, SCMP_SYS(ioctl), 1,
                               SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, TIOCSTI))) < 0)
        return rc;
    if ((rc = seccomp_rule_add(ctx, DENY, SCMP_SYS(ioctl), 1,
                               SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, TIOCLINUX))) < 0)
        return rc;
    return 0;
}

/*  A filter context with the whole policy, or NULL (errno set). */
static scmp_filter_ctx s_policy(void)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx) {
        errno = ENOMEM;
        return NULL;
    }
    /* Syscalls of other architectures (x32, i386 on x86_64) kill the process. */
    int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (rc == 0)
        rc = s_build(ctx);
    if (rc < 0) {
        seccomp_release(ctx);
        errno = -rc;
        return NULL;
    }
    return ctx;
}

/*  The program sysfilter_prepare compiled: the policy is fixed, so one copy serves every
 *  process forked after it. */
#define MAX_INSNS 4096
static struct sock_filter s_prog[MAX_INSNS];
static unsigned short s_prog_len;

int sysfilter_prepare(void)
{
    if (s_prog_len)
        return 0;
    scmp_filter_ctx ctx = s_policy();
    if (!ctx)
        return -1;
    /* libseccomp 2.5 exports only to an fd (seccomp_export_bpf_mem is 2.6's). */
    int fd = (int)syscall(SYS_memfd_create, "sysfilter", MFD_CLOEXEC);
    int rc = fd < 0 ? -errno : seccomp_export_bpf(ctx, fd);
    seccomp_release(ctx);
    if (rc < 0) {
        if (fd >= 0)
            close(fd);
        errno = -rc;
        return -1;
    }
    ssize_t n = pread(fd, s_prog, sizeof s_prog, 0);
    off_t size = lseek(fd, 0, SEEK_END);
    int saved = errno;
    close(fd);
    if (n < 0 || size < 0) {
        errno = saved;
        return -1;
    }
    if (n != size || n == 0 || n % (ssize_t)sizeof s_prog[0]) {
        errno = E2BIG;
        return -1;
    }
    s_prog_len = (unsigned short)(n / (ssize_t)sizeof s_prog[0]);
    return 0;
}

int sysfilter_apply(void)
{
    if (s_prog_len) {
        /* What seccomp_load does with this context's attributes (no flags; no_new_privs is
         * the caller's), minus the compiling and its allocations. */
        struct sock_fprog prog = {.len = s_prog_len, .filter = s_prog};
        return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
    }
    scmp_filter_ctx ctx = s_policy();
    if (!ctx)
        return -1;
    int rc = seccomp_load(ctx);
    seccomp_release(ctx);
    if (rc < 0) {
        errno = -rc;
        return -1;
    }
    return 0;
}
