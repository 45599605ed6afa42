/*  pidfd_shim: an LD_PRELOAD library for running kenneld under valgrind 3.19 (Debian 12's),
 *  which does not know pidfd_open, pidfd_send_signal or waitid(P_PIDFD). Used only by the
 *  bench's rtt_cost section to count kenneld's instructions with callgrind; never linked
 *  into kennel. A "pidfd" here is one end of a socketpair that a small thread makes readable
 *  when the child has exited (it looks every 200 ms, with WNOWAIT, so kenneld still reaps). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif
#define MAX_FD 65536

static pid_t s_pid_of[MAX_FD]; /* pidfd -> pid */

struct watch {
    pid_t pid;
    int fd;
};

static void *s_watch(void *arg)
{
    struct watch w = *(struct watch *)arg;
    free(arg);
    for (;;) {
        siginfo_t info = {0};
        int rc = waitid(P_PID, (id_t)w.pid, &info, WEXITED | WNOHANG | WNOWAIT);
        if ((rc == 0 && info.si_pid != 0) || (rc < 0 && errno == ECHILD))
            break;
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    (void)send(w.fd, "x", 1, MSG_NOSIGNAL);
    close(w.fd);
    return NULL;
}

static long s_raw(long n, long a, long b, long c, long d, long e, long f)
{
    long rc;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(rc)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    if (rc < 0 && rc > -4096) {
        errno = (int)-rc;
        return -1;
    }
    return rc;
}

long syscall(long n, ...)
{
    va_list ap;
    va_start(ap, n);
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    if (n == SYS_pidfd_open) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
            return -1;
        if (sv[0] >= MAX_FD) {
            close(sv[0]);
            close(sv[1]);
            errno = EMFILE;
            return -1;
        }
        s_pid_of[sv[0]] = (pid_t)a;
        struct watch *w = malloc(sizeof *w);
        pthread_t t;
        pthread_attr_t attr;
        if (!w)
            goto fail;
        w->pid = (pid_t)a;
        w->fd = sv[1];
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, s_watch, w);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            free(w);
            goto fail;
        }
        return sv[0];
    fail:
        close(sv[0]);
        close(sv[1]);
        errno = ENOMEM;
        return -1;
    }
    if (n == SYS_pidfd_send_signal) {
        if (a < 0 || a >= MAX_FD || s_pid_of[a] == 0) {
            errno = EBADF;
            return -1;
        }
        return kill(s_pid_of[a], (int)b);
    }
    return s_raw(n, a, b, c, d, e, f);
}

int waitid(idtype_t type, id_t id, siginfo_t *info, int options)
{
    if ((int)type == P_PIDFD) {
        if (id >= MAX_FD || s_pid_of[id] == 0) {
            errno = EBADF;
            return -1;
        }
        type = P_PID;
        id = (id_t)s_pid_of[id];
    }
    return (int)s_raw(SYS_waitid, (long)type, (long)id, (long)info, (long)options, 0, 0);
}
