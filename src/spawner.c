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
#include <limits.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "log.h"
#include "util.h"

/* Bytes a kernel pipe holds in flight each way (the socket's own default is ~200 KiB): a
 * snapshot of tens of MB crossed it in as many hand-offs between the two processes, each a
 * wake-up that on a loaded machine waited for a time slice (seconds for 50 MB). */
#define KERNEL_PIPE_BUFFER (4 << 20)

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

static int s_pidfd_open(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

int spawner_watch(pid_t pid, unsigned long long *start)
{
    if (pid <= 0) {
        errno = ESRCH;
        return -1;
    }
    int fd = s_pidfd_open(pid); /* a pidfd is always close-on-exec */
    if (fd < 0 || !start)
        return fd;
    /* The pidfd names the process that had pid when it was opened; the time read after it
     * is that process's if the pidfd then shows it still running (it held the pid all the
     * while), and of no use otherwise (it is gone: ESRCH all the same). Any other failure
     * keeps its errno: it says nothing about the process. */
    unsigned long long ticks;
    int err = 0;
    if (util_start_time(pid, &ticks) < 0) {
        err = errno == ENOENT ? ESRCH : errno;
    } else {
        struct pollfd pfd = {fd, POLLIN, 0};
        int ready = poll(&pfd, 1, 0);
        err = ready < 0 ? errno : ready > 0 || (*start && ticks != *start) ? ESRCH : 0;
    }
    if (err) {
        close(fd);
        errno = err;
        return -1;
    }
    *start = ticks;
    return fd;
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

/*  spawner_spawn with the pipe of the given socket type. */
static int s_spawn(int sock_type, char *const argv[], char *const envp[], const char *cwd,
                   char *const cgroup_procs[], spawner_proc_t *out)
{
    int sv[2] = {-1, -1}, status[2] = {-1, -1}, null_fd = -1;
    memset(out, 0, sizeof *out);
    out->pidfd = out->pipe_fd = -1;
    if (socketpair(AF_UNIX, sock_type | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    util_socket_buffers(sv[0], KERNEL_PIPE_BUFFER);
    util_socket_buffers(sv[1], KERNEL_PIPE_BUFFER);
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

int spawner_spawn(char *const argv[], char *const envp[], const char *cwd,
                  char *const cgroup_procs[], spawner_proc_t *out)
{
    return s_spawn(SOCK_STREAM, argv, envp, cwd, cgroup_procs, out);
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
    if (info.si_code == CLD_EXITED && proc->init_status && info.si_status > 128 &&
        info.si_status < 128 + NSIG) {
        /* A session's init cannot die of its kernel's signal; it exits with 128+N. */
        info.si_code = CLD_KILLED;
        info.si_status -= 128;
    }
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
    long long size, resident;
    return util_statm(pid, &size, &resident) == 0 ? resident : 0;
}

/*  Add one process's smaps_rollup Pss and Private_* (kB) to *pss and *uss (bytes). */
static void s_add_rollup(pid_t pid, long long *pss, long long *uss)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/smaps_rollup", (int)pid);
    char *text = util_read_file(path, 8192, NULL);
    for (char *line = text; line && *line;) {
        long long kb;
        if (sscanf(line, "Pss: %lld kB", &kb) == 1)
            *pss += kb << 10;
        else if (sscanf(line, "Private_Clean: %lld kB", &kb) == 1 ||
                 sscanf(line, "Private_Dirty: %lld kB", &kb) == 1)
            *uss += kb << 10;
        char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : NULL;
    }
    free(text);
}

void spawner_tree_memory(pid_t pid, long long *pss, long long *uss)
{
    *pss = *uss = 0;
    pid_t todo[256];
    size_t n = 0, done = 0;
    todo[n++] = pid;
    while (done < n) {
        pid_t p = todo[done++];
        s_add_rollup(p, pss, uss);
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)p, (int)p);
        char *kids = util_read_file(path, 8192, NULL);
        for (char *t = kids, *end; t && *t && n < sizeof todo / sizeof todo[0]; t = end) {
            long k = strtol(t, &end, 10);
            if (end == t)
                break;
            if (k > 0)
                todo[n++] = (pid_t)k;
        }
        free(kids);
    }
}

/* ---- the zygote ---------------------------------------------------------------------------- */

#define ZYGOTE_DONE_MAX 64

/*  An answer that came while we waited for another. */
typedef struct {
    unsigned long ticket;
    long pid;              /* > 1, or 0 with why */
    char why[200];
} zygote_done_t;

struct spawner_zygote {
    spawner_proc_t proc;   /* pipe_fd: the control socket (SOCK_SEQPACKET) */
    int ready;
    int dead;
    unsigned long next_ticket;
    zygote_done_t done[ZYGOTE_DONE_MAX];
    size_t ndone;
    size_t pending;          /* requests sent and not answered */
    long long progress_ms;   /* when it last answered (or was asked, with none pending) */
    long hint_pages;         /* the page hint's size, from its latest answer (0: not learned) */
};

/*  The zygote's first lines, run by `python3 -I -c`: read the configuration, find the kernel
 *  runtime, hand over to kennel_zygote. No path appears on its command line, which every
 *  kernel (a fork of it) can read in /proc. */
static const char s_boot[] =
    "import json,socket,sys\n"
    "s=socket.socket(fileno=3)\n"
    "m,f,_,_=socket.recv_fds(s,65536,4)\n"
    "c=json.loads(m)\n"
    "sys.path[:0]=c['path']\n"
    "import kennel_zygote\n"
    "kennel_zygote.main(s,c,f)\n";

_Static_assert(SPAWNER_MAX_FDS <= UTIL_MAX_SEND_FDS, "util_send_fds takes them all");

/*  Send one datagram with fds (ending in -1) attached. 0, or -1 with errno. */
static int s_send_fds(int sock, const char *text, const int fds[])
{
    size_t nfds = 0;
    while (fds && fds[nfds] >= 0)
        nfds++;
    if (nfds > SPAWNER_MAX_FDS) {
        errno = E2BIG;
        return -1;
    }
    return util_send_fds(sock, text, strlen(text), fds, nfds, 0);
}

spawner_zygote_t *spawner_zygote_new(const spawner_zygote_cfg_t *cfg)
{
    spawner_zygote_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    char *argv[] = {(char *)cfg->python, "-I", "-c", (char *)s_boot, NULL};
    if (s_spawn(SOCK_SEQPACKET, argv, cfg->envp, "/", NULL, &self->proc) < 0) {
        free(self);
        return NULL;
    }
    json_t *path = json_array();
    for (size_t i = 0; cfg->path[i]; i++)
        json_array_append_new(path, json_string(cfg->path[i]));
    json_t *preload = json_array();
    char *list = strdup(cfg->preload ? cfg->preload : "");
    for (char *save = NULL, *name = list ? strtok_r(list, ",", &save) : NULL; name;
         name = strtok_r(NULL, ",", &save))
        json_array_append_new(preload, json_string(name));
    free(list);
    char ipython[PATH_MAX + 16];
    snprintf(ipython, sizeof ipython, "%s/ipython", cfg->cache_dir);
    json_t *binds = json_array();
    for (size_t i = 0; i < cfg->nbinds; i++)
        json_array_append_new(binds, json_pack("[s, s]", cfg->binds[i].host, cfg->binds[i].inside));
    json_t *conf = json_pack("{s:s, s:o, s:s, s:o, s:{s:s, s:s}, s:b, s:o}", "op", "config",
                             "path", path, "kernel_dir", cfg->kernel_dir, "preload", preload,
                             "env", "MPLCONFIGDIR", cfg->cache_dir, "IPYTHONDIR", ipython,
                             "merge_pages", cfg->merge_pages, "binds", binds);
    char *text = conf ? json_dumps(conf, JSON_COMPACT) : NULL;
    json_decref(conf);
    int fds[] = {cfg->lifeline, cfg->init_fd, -1};
    int rc = text ? s_send_fds(self->proc.pipe_fd, text, fds) : -1;
    free(text);
    if (rc < 0) {
        int saved = errno;
        spawner_zygote_destroy(&self);
        errno = saved;
        return NULL;
    }
    return self;
}

void spawner_zygote_destroy(spawner_zygote_t **self_p)
{
    spawner_zygote_t *self = *self_p;
    if (!self)
        return;
    if (!self->proc.reaped) {
        (void)syscall(SYS_pidfd_send_signal, self->proc.pidfd, SIGKILL, NULL, 0);
        siginfo_t info;
        (void)waitid((idtype_t)P_PIDFD, (id_t)self->proc.pidfd, &info, WEXITED);
    }
    spawner_release(&self->proc);
    free(self);
    *self_p = NULL;
}

int spawner_zygote_fd(const spawner_zygote_t *self)
{
    return self->proc.pipe_fd;
}

long spawner_zygote_hint_pages(const spawner_zygote_t *self)
{
    return self->hint_pages;
}

pid_t spawner_zygote_pid(const spawner_zygote_t *self)
{
    return self->proc.pid;
}

int spawner_zygote_ready(const spawner_zygote_t *self)
{
    return self->ready && !self->dead;
}

/*  Receive one message from the zygote, waiting at most timeout_ms (0: not at all), with fds
 *  refused. New reference, or NULL: errno EAGAIN (nothing yet), or why filled (it died or
 *  spoke nonsense: self->dead). */
static json_t *s_zygote_recv(spawner_zygote_t *self, int timeout_ms, char *why, size_t why_len)
{
    if (self->dead) {
        snprintf(why, why_len, "the zygote is gone");
        errno = EPIPE;
        return NULL;
    }
    struct pollfd pfd = {self->proc.pipe_fd, POLLIN, 0};
    int p;
    do
        p = poll(&pfd, 1, timeout_ms);
    while (p < 0 && errno == EINTR);
    if (p == 0) {
        errno = EAGAIN;
        return NULL;
    }
    static char buf[65536]; /* the zygote's datagrams are at most this (kennel_zygote.py) */
    ssize_t n = p < 0 ? -1 : recv(self->proc.pipe_fd, buf, sizeof buf - 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        errno = EAGAIN;
        return NULL;
    }
    json_t *msg = n > 0 ? json_loadb(buf, (size_t)n, 0, NULL) : NULL;
    const char *op = json_string_value(json_object_get(msg, "op"));
    if (!op || (strcmp(op, "error") == 0 && !self->ready)) {
        const char *err = json_string_value(json_object_get(msg, "error"));
        snprintf(why, why_len, "the zygote %s", n == 0 ? "exited" : n < 0 ? strerror(errno) : err ? err : "spoke nonsense");
        json_decref(msg);
        self->dead = 1;
        errno = EPIPE;
        return NULL;
    }
    if (strcmp(op, "ready") == 0) {
        self->ready = 1;
        json_t *failed = json_object_get(msg, "failed");
        const char *name;
        json_t *v;
        json_object_foreach(failed, name, v)
            LOG_W("zygote: could not preload %s: %s", name, json_string_value(v));
        json_object_foreach(json_object_get(msg, "stale_fds"), name, v)
            LOG_D("zygote: fd %s (%s) stays open after the preload: /dev/null in kernels", name,
                  json_string_value(v));
        LOG_I("zygote ready (pid %d) in %lld ms", (int)self->proc.pid,
              (long long)json_integer_value(json_object_get(msg, "ms")));
        const char *merge = json_string_value(json_object_get(msg, "merge_pages"));
        if (merge)
            LOG_W("zygote: --merge-pages: %s", merge);
    }
    return msg;
}

/*  Keep an answer for spawner_zygote_take. */
static void s_zygote_keep(spawner_zygote_t *self, json_t *msg)
{
    const char *op = json_string_value(json_object_get(msg, "op"));
    if (strcmp(op, "ready") == 0)
        return;
    if (self->pending)
        self->pending--;
    self->progress_ms = util_now_ms();
    if (self->ndone == ZYGOTE_DONE_MAX) { /* nobody asks for the oldest any more */
        memmove(self->done, self->done + 1, sizeof self->done[0] * (ZYGOTE_DONE_MAX - 1));
        self->ndone--;
    }
    zygote_done_t *d = &self->done[self->ndone++];
    d->ticket = (unsigned long)json_integer_value(json_object_get(msg, "ticket"));
    json_int_t pid = json_integer_value(json_object_get(msg, "pid"));
    const char *err = json_string_value(json_object_get(msg, "error"));
    d->pid = strcmp(op, "spawned") == 0 && pid > 1 ? (long)pid : 0;
    json_int_t hint = json_integer_value(json_object_get(msg, "hint_pages"));
    if (d->pid && hint != self->hint_pages) {
        LOG_I("zygote: the page hint has %lld pages, asked for by each kernel at its fork",
              (long long)hint);
        self->hint_pages = (long)hint;
    }
    snprintf(d->why, sizeof d->why, "%s", d->pid ? "" : err ? err : "the zygote spoke nonsense");
}

int spawner_zygote_poll(spawner_zygote_t *self, char *why, size_t why_len)
{
    int was_ready = self->ready;
    json_t *msg;
    while ((msg = s_zygote_recv(self, 0, why, why_len))) {
        s_zygote_keep(self, msg);
        json_decref(msg);
    }
    if (self->dead)
        return -1;
    return self->ready && !was_ready ? 1 : 0;
}

int spawner_zygote_send(spawner_zygote_t *self, json_t *request, const int fds[],
                        spawner_proc_t *out, unsigned long *ticket, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    out->pidfd = out->pipe_fd = -1;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        snprintf(why, why_len, "socketpair: %s", strerror(errno));
        return -1;
    }
    util_socket_buffers(sv[0], KERNEL_PIPE_BUFFER);
    util_socket_buffers(sv[1], KERNEL_PIPE_BUFFER);
    if (util_set_nonblock(sv[0], 1) < 0) {
        snprintf(why, why_len, "socketpair: %s", strerror(errno));
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    int all[SPAWNER_MAX_FDS + 1];
    size_t n = 0;
    all[n++] = sv[1];
    for (size_t i = 0; fds[i] >= 0 && n < SPAWNER_MAX_FDS; i++)
        all[n++] = fds[i];
    all[n] = -1;
    unsigned long t = self->next_ticket + 1;
    json_object_set_new(request, "op", json_string("spawn"));
    json_object_set_new(request, "ticket", json_integer((json_int_t)t));
    char *text = json_dumps(request, JSON_COMPACT);
    int rc = text && !self->dead ? s_send_fds(self->proc.pipe_fd, text, all) : -1;
    free(text);
    close(sv[1]);
    if (rc < 0) {
        snprintf(why, why_len, "cannot reach the zygote: %s",
                 self->dead ? "it is gone" : strerror(errno));
        self->dead = 1;
        close(sv[0]);
        return -1;
    }
    self->next_ticket = t;
    *ticket = t;
    if (!self->pending++)
        self->progress_ms = util_now_ms();
    out->pipe_fd = sv[0];
    return 0;
}

int spawner_zygote_gone(const spawner_zygote_t *self)
{
    struct pollfd pfd = {self->proc.pidfd, POLLIN, 0};
    return self->dead || poll(&pfd, 1, 0) > 0;
}

int spawner_zygote_stalled(const spawner_zygote_t *self, long long limit_ms)
{
    return self->pending && util_now_ms() - self->progress_ms > limit_ms;
}

int spawner_children(pid_t *pids, size_t max)
{
    /* The main thread's children only: a process is listed under the thread that made it,
     * and a helper another thread runs (the worker's mke2fs) is that thread's business. */
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
    char *text = util_read_file(path, 1 << 20, NULL);
    if (!text)
        return -1;
    size_t n = 0;
    for (char *t = strtok(text, " \n"); t && n < max; t = strtok(NULL, " \n"))
        pids[n++] = (pid_t)atoi(t);
    free(text);
    return (int)n;
}

int spawner_adopt(pid_t pid, spawner_proc_t *out)
{
    memset(out, 0, sizeof *out);
    out->pipe_fd = -1;
    out->pid = pid;
    out->pidfd = s_pidfd_open(pid);
    return out->pidfd < 0 ? -1 : 0;
}

int spawner_zygote_take(spawner_zygote_t *self, unsigned long ticket, spawner_proc_t *out,
                        char *why, size_t why_len)
{
    for (size_t i = 0; i < self->ndone; i++) {
        if (self->done[i].ticket != ticket)
            continue;
        zygote_done_t d = self->done[i];
        memmove(self->done + i, self->done + i + 1, sizeof d * (self->ndone - i - 1));
        self->ndone--;
        if (!d.pid) {
            snprintf(why, why_len, "%s", d.why);
            return -1;
        }
        /* Our child (CLONE_PARENT): nobody else can reap it, so its pid cannot be reused
         * before we have its pidfd. */
        out->pid = (pid_t)d.pid;
        out->pidfd = s_pidfd_open(out->pid);
        out->init_status = 1;
        if (out->pidfd < 0) {
            snprintf(why, why_len, "pidfd of the new kernel: %s", strerror(errno));
            kill(out->pid, SIGKILL);
            (void)waitpid(out->pid, NULL, 0);
            return -1;
        }
        return 1;
    }
    if (self->dead) {
        snprintf(why, why_len, "the zygote is gone");
        return SPAWNER_ZYGOTE_GONE;
    }
    return 0;
}
