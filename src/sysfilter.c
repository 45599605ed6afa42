/*  sysfilter: a denylist over a default-allow filter. An allowlist is tighter, but Python,
 *  numpy and subprocess touch ~240 syscalls and a missing one breaks users in ways that are
 *  hard to see; the namespaces, the empty network namespace and the dropped capabilities are
 *  the other walls. Denied calls fail with EPERM (so Python raises PermissionError, which
 *  tests and users can see) except clone3, which must say ENOSYS so that glibc falls back to
 *  clone(), whose flags this filter can inspect (clone3 keeps them in memory it cannot read). */
#include "sysfilter.h"

#include <errno.h>
#include <linux/sched.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <seccomp.h>

#define DENY SCMP_ACT_ERRNO(EPERM)

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
    /* TIOCSTI / TIOCLINUX push input into a terminal: compared on 32 bits, as the kernel does. */
    if ((rc = seccomp_rule_add(ctx, DENY, SCMP_SYS(ioctl), 1,
                               SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, TIOCSTI))) < 0)
        return rc;
    if ((rc = seccomp_rule_add(ctx, DENY, SCMP_SYS(ioctl), 1,
                               SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, TIOCLINUX))) < 0)
        return rc;
    return 0;
}

int sysfilter_apply(void)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx) {
        errno = ENOMEM;
        return -1;
    }
    /* Syscalls of other architectures (x32, i386 on x86_64) kill the process. */
    int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (rc == 0)
        rc = s_build(ctx);
    if (rc == 0)
        rc = seccomp_load(ctx);
    seccomp_release(ctx);
    if (rc < 0) {
        errno = -rc;
        return -1;
    }
    return 0;
}
