/*  _kennel_zygote: the zygote's C part, a CPython extension: spawn() and merge_pages().
 *
 *  spawn() turns the warm zygote into one sandboxed session, in three processes' worth of
 *  steps:
 *    zygote   sandbox_clone (as_sibling): the child is kenneld's child, so kenneld reaps it
 *             through its pidfd; we write its id maps, move it into its cgroups, and return
 *             its pid.
 *    init     the child, pid 1 of the session: the kernel pipe onto fd 3, its own session and
 *             process group, sandbox_enter, sandbox_seal, then it forks the kernel and execs
 *             `kennel-init --reap` (through an fd the zygote opened), which reaps until the
 *             kernel exits. It never returns to Python.
 *    kernel   init's child: default signals, Python's after-fork bookkeeping, and spawn()
 *             returns 0 — the Python code that called it becomes the session's kernel.
 *  The zygote is single-threaded (kennel_zygote.py checks), which a new user namespace needs.
 *  The GIL is held throughout, as os.fork() holds it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "reaper.h"
#include "sandbox.h"
#include "sysfilter.h"

#define MAX_CGROUPS 8

#ifndef PR_SET_MEMORY_MERGE
#define PR_SET_MEMORY_MERGE 67 /* Linux 6.4 */
#endif

#define INIT_FD 4 /* kennel-init in the session's init, kept through the seal */

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/*  The page hint. A page fault costs ~20 us on this VM kind (notes in README, "Spawning"),
 *  and a forked kernel takes ~1450 of them by its hello, nearly the same pages in every
 *  kernel: the zygote's pages its reference counts write to. One kernel reports them
 *  (report_pages, before its hello: no user code has run), as runs of (address, bytes); each
 *  later kernel asks for all of them at once right after its fork (MADV_POPULATE_WRITE,
 *  ~6 us a page). A page in the hint that a kernel would not have written costs it 4 KiB. */
#define HINT_MAX_RUNS 3072  /* 48 KiB of runs: one write into an empty pipe */
#define HINT_MAX_PAGES 4096 /* 16 MiB: a kernel copies ~6 MiB by its hello */
#define PAGE 4096u

static size_t s_populated; /* pages the hint asked for in this kernel */

/*  Ask for the hint's pages, now. A run outside this process's mappings fails, harmlessly.
 *  hint: n runs of (address, bytes), read where the zygote keeps them (read, not copied). */
static void s_populate(const char *hint, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t run[2];
        memcpy(run, hint + i * sizeof run, sizeof run);
        if (madvise((void *)(uintptr_t)run[0], (size_t)run[1], MADV_POPULATE_WRITE) == 0)
            s_populated += (size_t)(run[1] / PAGE);
    }
}

/*  The pages this process holds alone (present and exclusively mapped, from /proc/self/pagemap)
 *  as runs of (address, bytes), at most HINT_MAX_RUNS of them and HINT_MAX_PAGES pages in
 *  all, into runs (2 words a run). The vDSO and its kin are left out. Returns the number of
 *  runs, or -1 with errno. */
static long s_private_runs(uint64_t *runs)
{
    FILE *maps = fopen("/proc/self/maps", "re");
    if (!maps)
        return -1;
    int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (pagemap < 0) {
        int e = errno;
        fclose(maps);
        errno = e;
        return -1;
    }
    long n = 0;
    size_t pages = 0;
    char line[512];
    uint64_t entries[512];
    while (fgets(line, sizeof line, maps) && pages < HINT_MAX_PAGES) {
        uint64_t lo, hi;
        char name[16] = "";
        if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %*s %*s %*s %*s %15s", &lo, &hi, name) < 2)
            continue;
        if (strncmp(name, "[v", 2) == 0) /* [vdso], [vvar], [vsyscall] */
            continue;
        for (uint64_t at = lo; at < hi && pages < HINT_MAX_PAGES;) {
            size_t want = (size_t)((hi - at) / PAGE);
            if (want > sizeof entries / sizeof entries[0])
                want = sizeof entries / sizeof entries[0];
            ssize_t got = pread(pagemap, entries, want * sizeof entries[0], (off_t)(at / PAGE * 8));
            if (got <= 0)
                break;
            for (size_t i = 0; i < (size_t)got / 8 && pages < HINT_MAX_PAGES; i++, at += PAGE) {
                if (!(entries[i] >> 63 & 1) || !(entries[i] >> 56 & 1))
                    continue; /* not present, or shared */
                if (n > 0 && runs[2 * n - 2] + runs[2 * n - 1] == at) {
                    runs[2 * n - 1] += PAGE;
                } else if (n < HINT_MAX_RUNS) {
                    runs[2 * n] = at;
                    runs[2 * n + 1] = PAGE;
                    n++;
                } else {
                    continue;
                }
                pages++;
            }
        }
    }
    fclose(maps);
    close(pagemap);
    return n;
}

/*  The session's init. Returns only in the kernel. */
static void s_session_init(const sandbox_cfg_t *cfg, int lifeline, int pipe_fd, int init_fd,
                           int learn_fd, const char *hint, size_t hint_runs,
                           const char *failed, int failed_errno)
{
    /* The pipe goes onto fd 3 and kennel-init onto fd 4: move the lifeline and the learning
     * kernel's pipe above both. */
    if (lifeline <= INIT_FD)
        lifeline = fcntl(lifeline, F_DUPFD_CLOEXEC, INIT_FD + 1);
    if (learn_fd >= 0 && learn_fd <= INIT_FD)
        learn_fd = fcntl(learn_fd, F_DUPFD_CLOEXEC, INIT_FD + 1);
    /* The pipe first, so that kenneld hears of any failure. */
    if (pipe_fd != REAPER_PIPE_FD && dup2(pipe_fd, REAPER_PIPE_FD) < 0)
        _exit(126);
    if (failed)
        reaper_fatal(failed, failed_errno);
    const char *step = NULL;
    if (setsid() < 0)
        reaper_fatal("setsid", errno);
    if (dup3(init_fd, INIT_FD, O_CLOEXEC) < 0)
        reaper_fatal("keep kennel-init", errno);
    int keep[] = {INIT_FD, learn_fd};
    if (sandbox_enter(cfg, lifeline, &step) < 0 || sandbox_seal_keep(keep, 2, &step) < 0)
        reaper_fatal(step, errno);
    pid_t kernel = reaper_fork_kernel();
    if (kernel == 0) {
        s_populate(hint, hint_runs);
        close(INIT_FD);
        /* Dumpable, as an exec'd kernel is: its own /proc entries belong to it. */
        if (prctl(PR_SET_DUMPABLE, 1) < 0)
            reaper_fatal("PR_SET_DUMPABLE", errno);
        return;
    }
    /* Become the small kennel-init, dropping this copy of the zygote's memory (megabytes of
     * page tables and copied pages per session); if that fails, reap from here. */
    char pid[24];
    snprintf(pid, sizeof pid, "%d", (int)kernel);
    char *argv[] = {"kennel-init", "--reap", pid, NULL};
    char *envp[] = {NULL};
    if (learn_fd >= 0)
        close(learn_fd); /* the kernel's EOF is what the zygote waits for */
    syscall(SYS_execveat, INIT_FD, "", argv, envp, AT_EMPTY_PATH);
    _exit(reaper_run(kernel));
}

static PyObject *s_spawn(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *kwlist[] = {"pipe_fd", "workspace_fd", "init_fd", "kernel_dir", "lifeline",
                             "cgroup_fds", "uid", "gid", "tmp", "as_bytes", "fsize", "nproc",
                             "nofile", "learn_fd", "hint", NULL};
    int pipe_fd, workspace_fd, init_fd, lifeline, learn_fd = -1;
    const char *hint = NULL;
    Py_ssize_t hint_len = 0;
    const char *kernel_dir;
    PyObject *cgroups;
    unsigned int uid, gid;
    unsigned long long tmp, as_bytes, fsize;
    unsigned long nproc, nofile;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iiisiO!IIKKKkk|iy#", kwlist, &pipe_fd,
                                     &workspace_fd, &init_fd, &kernel_dir, &lifeline, &PyList_Type,
                                     &cgroups, &uid, &gid, &tmp, &as_bytes, &fsize, &nproc,
                                     &nofile, &learn_fd, &hint, &hint_len))
        return NULL;
    if (hint_len % (Py_ssize_t)(2 * sizeof(uint64_t)) ||
        hint_len > (Py_ssize_t)(HINT_MAX_RUNS * 2 * sizeof(uint64_t)))
        return PyErr_Format(PyExc_ValueError, "a hint is at most %d runs of two 64-bit words",
                            HINT_MAX_RUNS);
    size_t hint_runs = (size_t)hint_len / (2 * sizeof(uint64_t));
    int cgroup_fds[MAX_CGROUPS + 1];
    Py_ssize_t n = PyList_Size(cgroups);
    if (n > MAX_CGROUPS)
        return PyErr_Format(PyExc_ValueError, "at most %d cgroups", MAX_CGROUPS);
    for (Py_ssize_t i = 0; i < n; i++) {
        cgroup_fds[i] = (int)PyLong_AsLong(PyList_GET_ITEM(cgroups, i));
        if (PyErr_Occurred())
            return NULL;
    }
    cgroup_fds[n] = -1;
    if (uid == 0 || gid == 0)
        return PyErr_Format(PyExc_ValueError, "a kernel never runs as host root");
    sandbox_cfg_t cfg = {
        .workspace = NULL, .workspace_fd = workspace_fd, .kernel_dir = kernel_dir,
        .host_uid = (uid_t)uid, .host_gid = (gid_t)gid, .tmp_bytes = tmp, .as_bytes = as_bytes,
        .fsize_bytes = fsize, .nproc = nproc, .nofile = nofile,
    };
    sandbox_clone_opts_t opts = {.as_sibling = 1, .lifeline = lifeline, .cgroup_fds = cgroup_fds};
    const char *step = NULL;
    int life = -1;
    pid_t zygote = getpid();
    PyOS_BeforeFork();
    pid_t pid = sandbox_clone(&cfg, &opts, &life, &step);
    int saved = errno;
    if (getpid() == zygote) {
        PyOS_AfterFork_Parent();
        if (pid < 0) {
            PyObject *exc = Py_BuildValue("(is)", saved, step);
            if (exc) {
                PyErr_SetObject(PyExc_OSError, exc);
                Py_DECREF(exc);
            }
            return NULL;
        }
        return PyLong_FromLong((long)pid);
    }
    /* The session's init: pid < 0 means a setup step failed, which it reports. */
    s_session_init(&cfg, life, pipe_fd, init_fd, learn_fd, hint, hint_runs, pid < 0 ? step : NULL,
                   saved);
    PyOS_AfterFork_Child();
    return PyLong_FromLong(0);
}

/*  merge_pages(): every page of this process and of its forks, now and later, may be merged by
 *  KSM with an identical one (--merge-pages). Kernels forked from one zygote copy the same
 *  pages and touch them alike (reference counts), so most of what an idle one owns is
 *  identical to another's, or to the zygote's. */
static PyObject *s_merge_pages(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    if (prctl(PR_SET_MEMORY_MERGE, 1, 0, 0, 0) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

/*  report_pages(fd): write this kernel's private pages to fd as a hint (runs of two native
 *  64-bit words), close fd; the number of pages. Called by the learning kernel before its
 *  hello: what it reports is the zygote's own code's doing, never a user's. */
static PyObject *s_report_pages(PyObject *self, PyObject *arg)
{
    (void)self;
    int fd = (int)PyLong_AsLong(arg);
    if (fd < 0 && PyErr_Occurred())
        return NULL;
    static uint64_t runs[HINT_MAX_RUNS * 2];
    long n = s_private_runs(runs);
    int e = errno;
    size_t pages = 0;
    if (n > 0) {
        const char *at = (const char *)runs;
        size_t left = (size_t)n * 2 * sizeof runs[0];
        while (left) {
            ssize_t w = write(fd, at, left);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                n = -1;
                e = errno;
                break;
            }
            at += w;
            left -= (size_t)w;
        }
        for (long i = 0; n > 0 && i < n; i++)
            pages += (size_t)(runs[2 * i + 1] / PAGE);
    }
    close(fd);
    if (n < 0) {
        errno = e;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromSize_t(pages);
}

/*  populated(): how many pages this kernel's hint asked for right after its fork. */
static PyObject *s_populated_count(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyLong_FromSize_t(s_populated);
}

static PyMethodDef s_methods[] = {
    {"report_pages", s_report_pages, METH_O,
     "report_pages(fd) -> pages: write this process's private pages to fd as a hint, close fd"},
    {"populated", s_populated_count, METH_NOARGS,
     "populated() -> pages this kernel's hint asked for after its fork"},
    {"merge_pages", s_merge_pages, METH_NOARGS,
     "merge_pages(): offer this process's pages, and its forks', to KSM"},
    {"spawn", (PyCFunction)(void (*)(void))s_spawn, METH_VARARGS | METH_KEYWORDS,
     "spawn(pipe_fd, workspace_fd, init_fd, kernel_dir, lifeline, cgroup_fds, uid, gid, tmp, as_bytes, "
     "fsize, nproc, nofile, learn_fd=-1, hint=b'') -> pid in the zygote, 0 in the new session's "
     "kernel. learn_fd: the kernel reports its pages there (report_pages); hint: pages a "
     "kernel asks for right after its fork, runs of (address, bytes) as two native 64-bit words"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef s_module = {
    PyModuleDef_HEAD_INIT, "_kennel_zygote", "kennel's zygote: sandboxed sessions by fork", -1,
    s_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kennel_zygote(void)
{
    /* The seccomp filter is compiled here, once: compiled in each session's init, libseccomp's
     * allocations wrote to some 2.5 MiB of the zygote's heap, copied into every session. */
    if (sysfilter_prepare() < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyModule_Create(&s_module);
}
