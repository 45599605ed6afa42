/*  spawner: starts kernel processes and owns their pidfds. Knows no Jupyter: a kernel is a
 *  command, a working directory, an environment and one socketpair end at fd 3.
 *  This is the plain fork+exec spawner; the zygote and the sandbox come in behind the same
 *  calls. kenneld is multithreaded (libzmq), so the child runs only async-signal-safe calls
 *  between fork and exec: everything it needs is prepared before fork. */
#ifndef KENNEL_SPAWNER_H
#define KENNEL_SPAWNER_H

#include <sys/types.h>

#define SPAWNER_PIPE_FD 3

typedef struct {
    pid_t pid;
    int pidfd;     /* readable when the process has exited; owned */
    int pipe_fd;   /* kenneld's end of the kernel pipe, non-blocking, CLOEXEC; owned */
    int reaped;    /* 1 once spawner_reap collected it */
} spawner_proc_t;

/*  Start argv[0] (an absolute path) with argv, envp (NULL-terminated), cwd, in the cgroups
 *  whose cgroup.procs files are listed (NULL-terminated, or NULL for none), stdin on
 *  /dev/null, stdout/stderr inherited, the pipe at fd 3, a new session (its own process
 *  group), default signal dispositions and mask, and SIGKILL if kenneld dies.
 *  0 and *out filled, or -1 with errno. */
int spawner_spawn(char *const argv[], char *const envp[], const char *cwd,
                  char *const cgroup_procs[], spawner_proc_t *out);
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

#endif
