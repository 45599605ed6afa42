/*  sandbox: the walls around a kernel. Runs only in a single-threaded process (kennel-init,
 *  exec'd by kenneld), never in a fork of the multithreaded kenneld.
 *    sandbox_clone   in the launcher: new user, pid, net, mount, ipc, uts and cgroup
 *                    namespaces for a child; the launcher writes the child's id maps.
 *    sandbox_enter   in that child: unprivileged ids, a new root (read-only system dirs, a
 *                    fresh /proc, a small /dev, tmpfs /tmp, the workspace), rlimits.
 *    sandbox_seal    last: every fd but 0-3 closed, capabilities dropped, no_new_privs,
 *                    the seccomp filter.
 *  Every step is checked; on failure the caller gets the step's name and errno and must not
 *  run user code. */
#ifndef KENNEL_SANDBOX_H
#define KENNEL_SANDBOX_H

#include <sys/types.h>

#define SANDBOX_UID 1000            /* the kernel's uid and gid inside */
#define SANDBOX_WORKSPACE "/workspace"
#define SANDBOX_KERNEL_DIR "/opt/kennel"

typedef struct {
    const char *workspace;          /* host directory bound read-write at /workspace */
    const char *kernel_dir;         /* host directory bound read-only at /opt/kennel */
    uid_t host_uid;                 /* unprivileged host ids the inside ids map to */
    gid_t host_gid;
    unsigned long long tmp_bytes;   /* size of /tmp and of /dev/shm */
    unsigned long long as_bytes;    /* RLIMIT_AS; 0 leaves it unlimited */
    unsigned long long fsize_bytes; /* RLIMIT_FSIZE; 0 leaves it unlimited */
    unsigned long nproc;            /* RLIMIT_NPROC (per user namespace) */
    unsigned long nofile;           /* RLIMIT_NOFILE */
} sandbox_cfg_t;

/*  The new root is built on a tmpfs mounted over /tmp in the child's mount namespace. */
#define SANDBOX_NEWROOT "/tmp"

/*  Fork a child into new namespaces and map its ids. Returns the child's pid in the caller and
 *  0 in the child (once its maps are written), or -1 with errno and *step set. In the child,
 *  *lifeline is a pipe end that reports the launcher's death (for sandbox_enter). */
pid_t sandbox_clone(const sandbox_cfg_t *cfg, int *lifeline, const char **step);
/*  In the child of sandbox_clone: build and enter the new root. 0, or -1 with errno and *step. */
int sandbox_enter(const sandbox_cfg_t *cfg, int lifeline, const char **step);
/*  Close fds above 3, drop every capability, set no_new_privs, load the seccomp filter.
 *  0, or -1 with errno and *step. */
int sandbox_seal(const char **step);

#endif
