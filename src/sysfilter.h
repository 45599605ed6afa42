/*  sysfilter: the seccomp policy every kernel runs under, as one commented table
 *  (libseccomp). Default allow, with a denylist of what a Python kernel never needs and an
 *  escaped one would want: other sockets than AF_UNIX, tracing, mounts, namespaces, BPF,
 *  keyrings, perf, userfaultfd, kexec, modules, reboot, swap, accounting, clock setting,
 *  TIOCSTI. x32 and foreign-architecture syscalls kill the process. */
#ifndef KENNEL_SYSFILTER_H
#define KENNEL_SYSFILTER_H

/*  Load the filter into the calling thread (inherited by its children and across execve).
 *  Requires no_new_privs or CAP_SYS_ADMIN. 0, or -1 with errno. */
int sysfilter_apply(void);

/*  Compile the filter now, once, for every later sysfilter_apply in this process and its
 *  forks: those then only load it (one syscall, no allocation). A zygote calls it before it
 *  forks sessions, whose malloc calls would otherwise write to (and so copy) pages of the
 *  zygote's heap. 0, or -1 with errno. */
int sysfilter_prepare(void);

#endif
