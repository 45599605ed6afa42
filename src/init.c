/*  kennel-init: what kenneld starts for a sandboxed kernel. It is exec'd, so it is
 *  single-threaded (a fork of the multithreaded kenneld could not enter a user namespace).
 *    launcher  (root, outside): sandbox_clone, then waits for the session's init and exits as
 *              it did, so kenneld's pidfd of the launcher tracks the whole session.
 *    init      (pid 1 of the session's pid namespace): sandbox_enter, sandbox_seal, then forks
 *              the kernel and reaps every orphan of user code until the kernel exits.
 *    kernel    exec's Python with the environment kenneld gave.
 *  A failed step is reported to kenneld as a `fatal` frame on the kernel pipe (fd 3), naming
 *  the step and errno, and no user code runs.
 *  usage: kennel-init --workspace D [--kernel-dir D] [--uid N] [--gid N] [--tmp B] [--as B]
 *                     [--fsize B] [--nproc N] [--nofile N] -- PROGRAM ARGS… */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "kpipe.h"
#include "sandbox.h"
#include "util.h"

#define PIPE_FD 3

extern char **environ;

/*  Under `make asan`: LeakSanitizer cannot work inside the sandbox (it needs ptrace and the
 *  host's /proc), and kennel-init's few allocations live until exec or exit anyway. Ignored
 *  by builds without AddressSanitizer. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "detect_leaks=0";
}

/*  Tell kenneld why the kernel cannot start, then exit. */
static void s_fatal(const char *step, int err)
{
    char msg[256];
    snprintf(msg, sizeof msg, "sandbox: %s: %s", step, strerror(err));
    json_t *op = json_pack("{s:s, s:s}", "op", "fatal", "error", msg);
    char *text = op ? json_dumps(op, JSON_COMPACT) : NULL;
    kpipe_iov_t part = {text, text ? strlen(text) : 0};
    uint8_t *frame;
    size_t len;
    if (text && kpipe_encode(&part, 1, 4096, &frame, &len) == 0) {
        (void)util_write_all(PIPE_FD, frame, len);
        free(frame);
    }
    fprintf(stderr, "kennel-init: %s\n", msg);
    _exit(126);
}

static void s_signals(void (*handler)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    /* SIGINT (interrupt) and SIGUSR2 (deadline) go to the whole group for the kernel; the
     * launcher and init must outlive them. */
    static const int sigs[] = {SIGINT,  SIGUSR1, SIGUSR2, SIGTERM, SIGHUP,
                               SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
}

/*  pid 1: reap everything; when the kernel exits, exit with its status (128+N for a signal).
 *  The pid namespace dies with us, taking any leftover process of user code along. */
static int s_init(pid_t kernel)
{
    for (;;) {
        int st;
        pid_t pid = wait(&st);
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid < 0)
            return 125;
        if (pid == kernel)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
}

static unsigned long long s_num(const char *text)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || *end || end == text) {
        fprintf(stderr, "kennel-init: bad number %s\n", text);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    sandbox_cfg_t cfg = {.tmp_bytes = 64ull << 20, .nproc = 256, .nofile = 1024};
    int i = 1;
    for (; i + 1 < argc && strcmp(argv[i], "--") != 0; i += 2) {
        const char *opt = argv[i], *val = argv[i + 1];
        if (strcmp(opt, "--workspace") == 0) cfg.workspace = val;
        else if (strcmp(opt, "--kernel-dir") == 0) cfg.kernel_dir = val;
        else if (strcmp(opt, "--uid") == 0) cfg.host_uid = (uid_t)s_num(val);
        else if (strcmp(opt, "--gid") == 0) cfg.host_gid = (gid_t)s_num(val);
        else if (strcmp(opt, "--tmp") == 0) cfg.tmp_bytes = s_num(val);
        else if (strcmp(opt, "--as") == 0) cfg.as_bytes = s_num(val);
        else if (strcmp(opt, "--fsize") == 0) cfg.fsize_bytes = s_num(val);
        else if (strcmp(opt, "--nproc") == 0) cfg.nproc = (unsigned long)s_num(val);
        else if (strcmp(opt, "--nofile") == 0) cfg.nofile = (unsigned long)s_num(val);
        else {
            fprintf(stderr, "kennel-init: unknown option %s\n", opt);
            return 2;
        }
    }
    if (i >= argc || strcmp(argv[i], "--") != 0 || i + 1 >= argc || !cfg.workspace || !cfg.kernel_dir || !cfg.host_uid || !cfg.host_gid) {
        fprintf(stderr, "kennel-init: usage: kennel-init --workspace D --kernel-dir D --uid N --gid N [limits] -- PROGRAM ARGS\n");
        return 2;
    }
    char **program = argv + i + 1;

    const char *step = NULL;
    int lifeline = -1;
    pid_t child = sandbox_clone(&cfg, &lifeline, &step);
    if (child < 0)
        s_fatal(step, errno);
    if (child > 0) {
        /* The launcher: ignore what kenneld sends the group to interrupt a cell. */
        s_signals(SIG_IGN);
        int st;
        while (waitpid(child, &st, 0) < 0 && errno == EINTR)
            ;
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (code > 128 && code < 128 + NSIG) {
            /* The kernel died of a signal: die of it too, so kenneld reports it as such. */
            signal(code - 128, SIG_DFL);
            raise(code - 128);
        }
        return code;
    }
    /* The session's init, pid 1 of the new pid namespace. */
    if (sandbox_enter(&cfg, lifeline, &step) < 0 || sandbox_seal(&step) < 0)
        s_fatal(step, errno);
    s_signals(SIG_IGN);
    pid_t kernel = fork();
    if (kernel < 0)
        s_fatal("fork kernel", errno);
    if (kernel == 0) {
        s_signals(SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execve(program[0], program, environ);
        s_fatal("exec kernel", errno);
    }
    return s_init(kernel);
}
