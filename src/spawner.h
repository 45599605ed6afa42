/*  spawner: starts kernel processes and owns their pidfds. Knows no Jupyter: a kernel is a
 *  command, a working directory, an environment and one socketpair end at fd 3.
 *  This is the plain fork+exec spawner; the zygote and the sandbox come in behind the same
 *  calls. kenneld is multithreaded (libzmq), so the child runs only async-signal-safe calls
 *  between fork and exec: everything it needs is prepared before fork. */
#ifndef KENNEL_SPAWNER_H
#define KENNEL_SPAWNER_H

#include <sys/types.h>

#include <jansson.h>

#include "sandbox.h"

#define SPAWNER_PIPE_FD 3

typedef struct {
    pid_t pid;
    int pidfd;     /* readable when the process has exited; owned */
    int pipe_fd;   /* kenneld's end of the kernel pipe, non-blocking, CLOEXEC; owned */
    int reaped;    /* 1 once spawner_reap collected it */
    int init_status; /* it is a session's init: exit status 128+N means its kernel died of
                      * signal N, and spawner_reap says so */
} spawner_proc_t;

/*  Start argv[0] (an absolute path) with argv, envp (NULL-terminated), cwd, in the cgroups
 *  whose cgroup.procs files are listed (NULL-terminated, or NULL for none), stdin on
 *  /dev/null, stdout/stderr inherited, the pipe at fd 3, a new session (its own process
 *  group), default signal dispositions and mask, and SIGKILL if kenneld dies.
 *  0 and *out filled, or -1 with errno. */
int spawner_spawn(char *const argv[], char *const envp[], const char *cwd,
                  char *const cgroup_procs[], spawner_proc_t *out);
/*  The pids of the children of kenneld's main thread (the loop's, which starts the zygote;
 *  the zygote's clones are its children too), at most max, into pids: how many, or -1 with
 *  errno. Helpers another thread runs (the worker's mke2fs) are not among them. */
int spawner_children(pid_t *pids, size_t max);
/*  A pidfd for any process (not necessarily ours), readable once it has exited. -1 with errno
 *  (ESRCH: it is gone already; anything else, such as EMFILE, says nothing about it). start,
 *  unless NULL, is the process's start time (clock ticks after boot): 0 asks for it to be
 *  filled in; any other value must match, or the pid names some later process: ESRCH. */
int spawner_watch(pid_t pid, unsigned long long *start);
/*  Take over child pid of ours that nothing holds yet (a kernel a dead zygote never named):
 *  *out gets its pid and a pidfd, no pipe. 0, or -1 with errno. */
int spawner_adopt(pid_t pid, spawner_proc_t *out);
/*  Send sig to the process group while the process is not reaped. 0, or -1 with errno. */
int spawner_signal(spawner_proc_t *proc, int sig);
/*  Collect the exit status without blocking: 1 and a description ("exited with status 1",
 *  "killed by signal 9 (SIGKILL)") in how when it has exited, 0 when still running, -1 on
 *  error. */
int spawner_reap(spawner_proc_t *proc, char *how, size_t how_len);
/*  Close the process's fds. Does not signal or wait; call after reaping. */
void spawner_release(spawner_proc_t *proc);
/*  The resident set size of pid in bytes, or 0 when unknown. */
long long spawner_rss_bytes(pid_t pid);
/*  The memory of pid and all its descendants (at most 256 processes), from smaps_rollup:
 *  proportional set size (shared pages divided among their sharers, so sessions forked from
 *  one zygote each count a share) and unique set size (pages only they hold). Bytes; 0 when
 *  unknown. */
void spawner_tree_memory(pid_t pid, long long *pss, long long *uss);

/*  The zygote (kernels/python/kennel_zygote.py): a warm Python that forks sandboxed kernels.
 *  kenneld talks to it over a SOCK_SEQPACKET socketpair; each request carries only numbers and
 *  descriptors, never a path or a key. The kernels it makes are kenneld's children
 *  (CLONE_PARENT), reaped like any other through their pidfds. */
#define SPAWNER_MAX_FDS 8

typedef struct spawner_zygote spawner_zygote_t;

typedef struct {
    const char *python;
    const char *const *path;    /* sys.path entries: the kernel runtime, the C part; NULL-ended */
    const char *kernel_dir;     /* the runtime, bound read-only into every sandbox */
    const char *preload;        /* modules to import once, comma-separated */
    char *const *envp;          /* the zygote's exec environment, which every kernel can read
                                 * (/proc/self/environ): no host paths */
    const char *cache_dir;      /* MPLCONFIGDIR and IPYTHONDIR (its ipython/) of the zygote,
                                 * set after exec, so no kernel sees the path */
    int lifeline;               /* a pipe read end that hangs up when kenneld dies */
    int init_fd;                /* kennel-init (O_PATH), which each session's init execs */
    int merge_pages;            /* mark the zygote's memory, and so its kernels', for KSM */
    const sandbox_bind_t *binds; /* --site and --data: [host, inside] pairs in its config */
    size_t nbinds;
} spawner_zygote_cfg_t;

/*  Start a zygote. It imports the runtime and the preload list in the background; requests
 *  sent meanwhile are answered once it is ready. NULL with errno on failure. */
spawner_zygote_t *spawner_zygote_new(const spawner_zygote_cfg_t *cfg);
/*  Kill and reap it; sessions it made live on (they are kenneld's children). */
void spawner_zygote_destroy(spawner_zygote_t **self_p);
/*  Its control socket: readable when it has something to say unasked (ready, or gone). */
int spawner_zygote_fd(const spawner_zygote_t *self);
pid_t spawner_zygote_pid(const spawner_zygote_t *self);
/*  Pages each kernel asks for right after its fork (the zygote's page hint; 0 until one
 *  kernel has reported them). */
long spawner_zygote_hint_pages(const spawner_zygote_t *self);
int spawner_zygote_ready(const spawner_zygote_t *self);
/*  Read what it said unasked, without blocking: 1 when it just became ready, 0 otherwise, -1
 *  when it is gone (why filled; destroy it and make another). */
int spawner_zygote_poll(spawner_zygote_t *self, char *why, size_t why_len);
/*  Ask for a sandboxed kernel without waiting: out gets its pipe now (pid and pidfd come with
 *  spawner_zygote_take), *ticket names the answer. request: the spawn op's fields (uid, gid,
 *  tmp, as, fsize, nproc, nofile, env; "op" and "ticket" are added); fds: the workspace (a
 *  detached mount, open_tree) and the session's cgroup.procs files, ending in -1 (the caller
 *  keeps and closes them). 0, or -1 with why. */
int spawner_zygote_send(spawner_zygote_t *self, json_t *request, const int fds[],
                        spawner_proc_t *out, unsigned long *ticket, char *why, size_t why_len);
/*  The answer to ticket, if spawner_zygote_poll has read it: 1 and out's pid,
 *  pidfd and init_status filled; 0 when it has not come yet; -1 with why when the spawn
 *  failed, SPAWNER_ZYGOTE_GONE (< 0) with why when the zygote died before answering (no
 *  kernel of this ticket runs; out's pipe is still the caller's to release, either way). */
#define SPAWNER_ZYGOTE_GONE (-2)
int spawner_zygote_take(spawner_zygote_t *self, unsigned long ticket, spawner_proc_t *out,
                        char *why, size_t why_len);
/*  1 when it has exited or failed a request for good (destroy it), without reading what it
 *  said. */
int spawner_zygote_gone(const spawner_zygote_t *self);
/*  1 when it owes answers and has given none for limit_ms (hung: destroy it). */
int spawner_zygote_stalled(const spawner_zygote_t *self, long long limit_ms);

#endif
