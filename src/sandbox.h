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
#define SANDBOX_SITE_DIR "/opt/site"    /* kenneld --site: an extra site-packages */
#define SANDBOX_DATA_DIR "/data"        /* kenneld --data NAME=DIR: /data/NAME */
#define SANDBOX_MAX_BINDS 17            /* --site and 16 datasets */

/*  A host directory bound read-only into every kernel. inside is an absolute path under
 *  /opt or /data, one level below it (SANDBOX_SITE_DIR, SANDBOX_DATA_DIR "/NAME"). */
typedef struct {
    const char *host;
    const char *inside;
} sandbox_bind_t;

typedef struct {
    const char *workspace;          /* host directory bound read-write at /workspace */
    int workspace_fd;               /* or a detached copy of its mount (open_tree with
                                     * OPEN_TREE_CLONE; the zygote's way); -1: open workspace */
    const char *kernel_dir;         /* host directory bound read-only at /opt/kennel */
    const sandbox_bind_t *binds;    /* more host directories bound read-only */
    size_t nbinds;                  /* at most SANDBOX_MAX_BINDS */
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

/*  How sandbox_clone makes its child. */
typedef struct {
    int as_sibling;             /* CLONE_PARENT: the child is our parent's child (the zygote's
                                 * sessions are kenneld's children, reaped through its pidfds) */
    int lifeline;               /* a pipe read end that hangs up when the session's owner dies;
                                 * -1: make one, whose write end this process holds */
    const int *cgroup_fds;      /* open cgroup.procs files the child is moved into before it
                                 * runs, ending with -1; NULL: it stays in ours */
} sandbox_clone_opts_t;

/*  Fork a child into new namespaces, map its ids and move it into its cgroups. Returns the
 *  child's pid in the caller, or -1 with errno and *step when there is no child. In the child
 *  it returns 0 once it is set up and in a cgroup namespace rooted at its cgroup, or -1 with
 *  errno and *step when a step failed (the caller's setup steps too: the child reports them,
 *  because with as_sibling the caller is not its parent). In the child, *lifeline is the pipe
 *  end that reports the owner's death (for sandbox_enter). */
pid_t sandbox_clone(const sandbox_cfg_t *cfg, const sandbox_clone_opts_t *opts, int *lifeline,
                    const char **step);
/*  In the child of sandbox_clone: build and enter the new root. 0, or -1 with errno and *step. */
int sandbox_enter(const sandbox_cfg_t *cfg, int lifeline, const char **step);
/*  Close fds above 3, drop every capability, set no_new_privs, load the seccomp filter.
 *  0, or -1 with errno and *step. */
int sandbox_seal(const char **step);
/*  The same, keeping the fds in keep[0..n) (those >= 4; n <= SANDBOX_MAX_KEEP) open: the
 *  zygote's session init execs kennel-init through one once the kernel is forked. */
#define SANDBOX_MAX_KEEP 4
int sandbox_seal_keep(const int *keep, size_t n, const char **step);

#endif
