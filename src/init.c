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
 *                     [--fsize B] [--nproc N] [--nofile N] -- PROGRAM ARGS…
 *         kennel-init --reap PID
 *  The second form is what a zygote's session init execs, already sealed, once it has forked
 *  the kernel (PID): it only reaps, and its exec drops the copy of the zygote's memory. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reaper.h"
#include "sandbox.h"
#include "util.h"

extern char **environ;

/*  Under `make asan`: LeakSanitizer cannot work inside the sandbox (it needs ptrace and the
 *  host's /proc), and kennel-init's few allocations live until exec or exit anyway. Ignored
 *  by builds without AddressSanitizer. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "detect_leaks=0";
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
    if (argc == 3 && strcmp(argv[1], "--reap") == 0) {
        /* Not dumpable: the kernel may not read where this binary lives on the host. */
        if (prctl(PR_SET_DUMPABLE, 0) < 0)
            return 125;
        reaper_signals(SIG_IGN);
        return reaper_run((pid_t)s_num(argv[2]));
    }
    sandbox_cfg_t cfg = {.workspace_fd = -1, .tmp_bytes = 64ull << 20, .nproc = 256, .nofile = 1024};
    static sandbox_bind_t binds[SANDBOX_MAX_BINDS];
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
        else if (strcmp(opt, "--ro-bind") == 0 && cfg.nbinds < SANDBOX_MAX_BINDS) {
            /* INSIDE=HOST: kenneld's --site or --data (INSIDE has no '='). */
            char *eq = strchr(val, '=');
            if (!eq || val[0] != '/' || eq[1] != '/') {
                fprintf(stderr, "kennel-init: --ro-bind takes INSIDE=HOST\n");
                return 2;
            }
            *eq = '\0';
            binds[cfg.nbinds].inside = val;
            binds[cfg.nbinds++].host = eq + 1;
            cfg.binds = binds;
        } else {
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
    sandbox_clone_opts_t opts = {.as_sibling = 0, .lifeline = -1, .cgroup_fds = NULL};
    pid_t child = sandbox_clone(&cfg, &opts, &lifeline, &step);
    if (child < 0) /* no child, or we are the child and a setup step failed */
        reaper_fatal(step, errno);
    if (child > 0) {
        /* The launcher: ignore what kenneld sends the group to interrupt a cell. */
        reaper_signals(SIG_IGN);
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
        reaper_fatal(step, errno);
    pid_t kernel = reaper_fork_kernel();
    if (kernel == 0) {
        execve(program[0], program, environ);
        reaper_fatal("exec kernel", errno);
    }
    return reaper_run(kernel);
}
