/*  spawner: fork+exec with a pidfd per child. pidfd_open right after fork is race-free: the
 *  child cannot be reaped (and its pid reused) until we wait for it, and we only ever wait
 *  through the pidfd. */
#include "spawner.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

static int s_pidfd_open(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

/*  In the child: only async-signal-safe calls. On failure, the errno goes up the status pipe
 *  and the child exits 127. */
static void s_child(int pipe_fd, int null_fd, int status_fd, const char *cwd, char *const argv[],
                    char *const envp[], char *const cgroup_procs[])
{
    int err;
    sigset_t none;
    sigemptyset(&none);
    /* kenneld blocks its shutdown signals for its signalfd and ignores SIGPIPE; a kernel must
     * start with defaults or interrupt never reaches Python. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        (void)sigaction(sig, &dfl, NULL);
    if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
        goto fail;
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || setsid() < 0)
        goto fail;
    if (dup2(null_fd, 0) < 0)
        goto fail;
    if (pipe_fd == SPAWNER_PIPE_FD) {
        if (fcntl(pipe_fd, F_SETFD, 0) < 0)
            goto fail;
    } else if (dup2(pipe_fd, SPAWNER_PIPE_FD) < 0) {
        goto fail;
    }
    if (chdir(cwd) < 0)
        goto fail;
    /* Join the session's cgroups before exec, so nothing the kernel starts escapes them. */
    for (size_t i = 0; cgroup_procs && cgroup_procs[i]; i++) {
        int fd = open(cgroup_procs[i], O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, "0", 1) != 1)
            goto fail;
        close(fd);
    }
    /* Every fd of kenneld is CLOEXEC already; marking the whole range makes that certain
     * (the status pipe must stay open until exec, so it is marked, not closed). */
    if (syscall(SYS_close_range, SPAWNER_PIPE_FD + 1, ~0U, CLOSE_RANGE_CLOEXEC) < 0 && errno != ENOSYS)
        goto fail;
    execve(argv[0], argv, envp);
fail:
    err = errno;
    (void)!write(status_fd, &err, sizeof err);
    _exit(127);
}

int spawner_spawn(char *const argv[], char *const envp[], const char *cwd,
                  char *const cgroup_procs[], spawner_proc_t *out)
{
    int sv[2] = {-1, -1}, status[2] = {-1, -1}, null_fd = -1;
    memset(out, 0, sizeof *out);
    out->pidfd = out->pipe_fd = -1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    if (pipe2(status, O_CLOEXEC) < 0)
        goto fail;
    null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0)
        goto fail;
    pid_t pid = fork();
    if (pid < 0)
        goto fail;
    if (pid == 0)
        s_child(sv[1], null_fd, status[1], cwd, argv, envp, cgroup_procs);
    close(status[1]);
    status[1] = -1;
    close(sv[1]);
    sv[1] = -1;
    close(null_fd);
    null_fd = -1;
    out->pid = pid;
    out->pidfd = s_pidfd_open(pid);
    /* The status pipe closes on exec (CLOEXEC) or carries the child's errno. */
    int child_err = 0;
    ssize_t n;
    do
        n = read(status[0], &child_err, sizeof child_err);
    while (n < 0 && errno == EINTR);
    close(status[0]);
    status[0] = -1;
    if (n == sizeof child_err || out->pidfd < 0) {
        int err = n == sizeof child_err ? child_err : errno;
        kill(pid, SIGKILL);
        if (out->pidfd >= 0)
            close(out->pidfd);
        (void)waitpid(pid, NULL, 0);
        close(sv[0]);
        errno = err;
        return -1;
    }
    out->pipe_fd = sv[0];
    if (util_set_nonblock(out->pipe_fd, 1) < 0) {
        int err = errno;
        spawner_signal(out, SIGKILL);
        (void)waitpid(pid, NULL, 0);
        spawner_release(out);
        errno = err;
        return -1;
    }
    return 0;
fail:;
    int err = errno;
    for (int i = 0; i < 2; i++) {
        if (sv[i] >= 0)
            close(sv[i]);
        if (status[i] >= 0)
            close(status[i]);
    }
    if (null_fd >= 0)
        close(null_fd);
    errno = err;
    return -1;
}

int spawner_signal(spawner_proc_t *proc, int sig)
{
    if (proc->reaped || proc->pid <= 0) {
        errno = ESRCH;
        return -1;
    }
    /* The group (children of the kernel too); it cannot be recycled while its leader is
     * unreaped. Only if the group is gone (the kernel left it) the pidfd reaches the kernel:
     * sending both would deliver a signal twice. */
    if (kill(-proc->pid, sig) == 0)
        return 0;
    if (errno == ESRCH && proc->pidfd >= 0)
        return (int)syscall(SYS_pidfd_send_signal, proc->pidfd, sig, NULL, 0);
    return -1;
}

int spawner_reap(spawner_proc_t *proc, char *how, size_t how_len)
{
    if (proc->reaped)
        return 1;
    siginfo_t info;
    memset(&info, 0, sizeof info);
    if (waitid((idtype_t)P_PIDFD, (id_t)proc->pidfd, &info, WEXITED | WNOHANG) < 0)
        return -1;
    if (info.si_pid == 0)
        return 0;
    proc->reaped = 1;
    if (info.si_code == CLD_EXITED)
        snprintf(how, how_len, "exited with status %d", info.si_status);
    else
        snprintf(how, how_len, "was killed by signal %d (SIG%s)%s", info.si_status,
                 sigabbrev_np(info.si_status) ? sigabbrev_np(info.si_status) : "?",
                 info.si_code == CLD_DUMPED ? ", core dumped" : "");
    return 1;
}

void spawner_release(spawner_proc_t *proc)
{
    if (proc->pidfd >= 0)
        close(proc->pidfd);
    if (proc->pipe_fd >= 0)
        close(proc->pipe_fd);
    proc->pidfd = proc->pipe_fd = -1;
}

long long spawner_rss_bytes(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
    char *text = util_read_file(path, 256, NULL);
    if (!text)
        return 0;
    long long size = 0, resident = 0;
    int ok = sscanf(text, "%lld %lld", &size, &resident) == 2;
    free(text);
    return ok ? resident * sysconf(_SC_PAGESIZE) : 0;
}
