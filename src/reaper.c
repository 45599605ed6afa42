/*  reaper: a session's pid 1. The pid namespace dies with it, taking along whatever user code
 *  left running. */
#include "reaper.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "kpipe.h"
#include "util.h"

void reaper_fatal(const char *step, int err)
{
    char msg[256];
    snprintf(msg, sizeof msg, "sandbox: %s: %s", step, strerror(err));
    json_t *op = json_pack("{s:s, s:s}", "op", "fatal", "error", msg);
    char *text = op ? json_dumps(op, JSON_COMPACT) : NULL;
    kpipe_iov_t part = {text, text ? strlen(text) : 0};
    uint8_t *frame;
    size_t len;
    if (text && kpipe_encode(&part, 1, 4096, &frame, &len) == 0) {
        (void)util_write_all(REAPER_PIPE_FD, frame, len);
        free(frame);
    }
    fprintf(stderr, "kennel-init: %s\n", msg);
    _exit(126);
}

void reaper_signals(void (*handler)(int))
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

pid_t reaper_fork_kernel(void)
{
    reaper_signals(SIG_IGN);
    pid_t kernel = fork();
    if (kernel < 0)
        reaper_fatal("fork kernel", errno);
    if (kernel == 0) {
        reaper_signals(SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
    }
    return kernel;
}

static volatile pid_t s_kernel;

/*  An interrupt or a deadline reached this init: kenneld signals the session's process group,
 *  and the kernel has it too, unless it left that group (os.setsid(), os.setpgrp()). Then the
 *  kernel's own group gets it from here: once, whichever group the kernel is in. */
static void s_forward(int sig)
{
    int saved = errno;
    pid_t group = getpgid(s_kernel);
    if (group > 0 && group != getpgrp())
        kill(-group, sig);
    errno = saved;
}

int reaper_run(pid_t kernel)
{
    s_kernel = kernel;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_forward;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
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
