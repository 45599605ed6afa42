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
#include <signal.h>
#include <string.h>
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

/*  The session's init. Returns only in the kernel. */
static void s_session_init(const sandbox_cfg_t *cfg, int lifeline, int pipe_fd, int init_fd,
                           const char *failed, int failed_errno)
{
    /* The pipe goes onto fd 3 and kennel-init onto fd 4: move the lifeline above both. */
    if (lifeline <= INIT_FD)
        lifeline = fcntl(lifeline, F_DUPFD_CLOEXEC, INIT_FD + 1);
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
    if (sandbox_enter(cfg, lifeline, &step) < 0 || sandbox_seal_keep(INIT_FD, &step) < 0)
        reaper_fatal(step, errno);
    pid_t kernel = reaper_fork_kernel();
    if (kernel == 0) {
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
    syscall(SYS_execveat, INIT_FD, "", argv, envp, AT_EMPTY_PATH);
    _exit(reaper_run(kernel));
}

static PyObject *s_spawn(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *kwlist[] = {"pipe_fd", "workspace_fd", "init_fd", "kernel_dir", "lifeline",
                             "cgroup_fds", "uid", "gid", "tmp", "as_bytes", "fsize", "nproc",
                             "nofile", NULL};
    int pipe_fd, workspace_fd, init_fd, lifeline;
    const char *kernel_dir;
    PyObject *cgroups;
    unsigned int uid, gid;
    unsigned long long tmp, as_bytes, fsize;
    unsigned long nproc, nofile;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iiisiO!IIKKKkk", kwlist, &pipe_fd,
                                     &workspace_fd, &init_fd, &kernel_dir, &lifeline, &PyList_Type,
                                     &cgroups,
                                     &uid, &gid, &tmp, &as_bytes, &fsize, &nproc, &nofile))
        return NULL;
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
    s_session_init(&cfg, life, pipe_fd, init_fd, pid < 0 ? step : NULL, saved);
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

static PyMethodDef s_methods[] = {
    {"merge_pages", s_merge_pages, METH_NOARGS,
     "merge_pages(): offer this process's pages, and its forks', to KSM"},
    {"spawn", (PyCFunction)(void (*)(void))s_spawn, METH_VARARGS | METH_KEYWORDS,
     "spawn(pipe_fd, workspace_fd, init_fd, kernel_dir, lifeline, cgroup_fds, uid, gid, tmp, as_bytes, "
     "fsize, nproc, nofile) -> pid in the zygote, 0 in the new session's kernel"},
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
