/*  reaper: what a session's pid 1 does, whichever spawner made it (kennel-init for `--spawner
 *  exec`, a fork of the zygote for `--spawner zygote`): report a failed sandbox step to kenneld,
 *  outlive the signals meant for the kernel, and reap every orphan of user code until the
 *  kernel exits. Runs only inside a session, single-threaded. */
#ifndef KENNEL_REAPER_H
#define KENNEL_REAPER_H

#include <sys/types.h>

#define REAPER_PIPE_FD 3        /* the kernel pipe, as the kernel will have it */

/*  Tell kenneld on the kernel pipe why the kernel cannot start (a `fatal` frame naming the step
 *  and errno), say it on stderr too, and _exit(126). */
_Noreturn void reaper_fatal(const char *step, int err);
/*  Ignore the signals kenneld sends the session's process group for the kernel (SIGINT to
 *  interrupt, SIGUSR2 at a deadline, …) with handler SIG_IGN, or restore them with SIG_DFL. */
void reaper_signals(void (*handler)(int));
/*  Reap every child until `kernel` exits; returns its exit status, 128+N for signal N. An
 *  interrupt (SIGINT) or deadline (SIGUSR2) this process gets meanwhile is passed on to the
 *  kernel's process group if the kernel left the session's. */
int reaper_run(pid_t kernel);
/*  Fork the kernel: from now on this process (the init) ignores the signals meant for the
 *  kernel, and the kernel starts with default dispositions and an empty mask. Returns as
 *  fork() does; a failed fork is fatal (reaper_fatal). */
pid_t reaper_fork_kernel(void);

#endif
