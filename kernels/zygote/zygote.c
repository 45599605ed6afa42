/*  _kennel_zygote: the zygote's C part, a CPython extension: spawn(), serve() (the zygote's
 *  request loop, spawning), report_pages() and populated() (the page hint), merge_pages(),
 *  huge_arenas() (the zygote's Python objects in huge pages while it imports).
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
#include <malloc.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <jansson.h>

#include "reaper.h"
#include "sandbox.h"
#include "sysfilter.h"
#include "util.h"

#define MAX_CGROUPS 8

#ifndef PR_SET_MEMORY_MERGE
#define PR_SET_MEMORY_MERGE 67 /* Linux 6.4 */
#endif

#define INIT_FD 4 /* kennel-init in the session's init, kept through the seal */

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/*  The page hint. A copy-on-write fault costs ~25 us on this VM kind (docs/spawning.md,
 *  "The zygote"), and a forked kernel takes ~1450 of them by its hello, nearly the same pages in
 *  every kernel: the zygote's pages its reference counts write to. Two kernels report theirs
 *  (report_pages, before their hello), as runs of (address, bytes); the zygote keeps what
 *  both wrote (kennel_zygote.py), and each later kernel asks for all of it at once right
 *  after its fork (MADV_POPULATE_WRITE, ~6 us a page). A page in the hint that a kernel
 *  would not have written costs it 4 KiB. */
#define HINT_MAX_RUNS 3072  /* 48 KiB of runs: one write into an empty pipe */
#define HINT_MAX_PAGES 4096 /* 16 MiB: a kernel copies ~6 MiB by its hello */
#define PAGE 4096u

static size_t s_populated; /* pages the hint asked for in this kernel */

/*  How many runs a hint of len bytes holds, or -1 (with a ValueError) if it is no hint. */
static Py_ssize_t s_hint_runs(Py_ssize_t len)
{
    Py_ssize_t run = (Py_ssize_t)(2 * sizeof(uint64_t));
    if (len % run || len > HINT_MAX_RUNS * run) {
        PyErr_Format(PyExc_ValueError, "a hint is at most %d runs of two 64-bit words",
                     HINT_MAX_RUNS);
        return -1;
    }
    return len / run;
}

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
 *  in its private writable mappings — the only pages MADV_POPULATE_WRITE can ask for — as
 *  runs of (address, bytes) that never cross from one mapping into the next, at most
 *  HINT_MAX_RUNS of them and HINT_MAX_PAGES pages in all, into runs (2 words a run). Returns
 *  the number of runs, or -1 with errno. */
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
    char *line = NULL;
    size_t cap = 0;
    uint64_t entries[512];
    while (getline(&line, &cap, maps) > 0 && pages < HINT_MAX_PAGES && n < HINT_MAX_RUNS) {
        uint64_t lo, hi;
        char perms[8] = "";
        if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s", &lo, &hi, perms) < 3 ||
            perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p')
            continue; /* populating for writing needs a private writable mapping */
        int fresh = 1; /* a run never continues from the previous mapping */
        for (uint64_t at = lo; at < hi && pages < HINT_MAX_PAGES;) {
            size_t want = (size_t)((hi - at) / PAGE);
            if (want > sizeof entries / sizeof entries[0])
                want = sizeof entries / sizeof entries[0];
            ssize_t got = pread(pagemap, entries, want * sizeof entries[0], (off_t)(at / PAGE * 8));
            if (got <= 0)
                break;
            for (size_t i = 0; i < (size_t)got / 8 && pages < HINT_MAX_PAGES; i++, at += PAGE) {
                if (!(entries[i] >> 63 & 1) || !(entries[i] >> 56 & 1)) {
                    fresh = 1;
                    continue; /* not present, or shared */
                }
                if (!fresh) {
                    runs[2 * n - 1] += PAGE;
                } else if (n < HINT_MAX_RUNS) {
                    runs[2 * n] = at;
                    runs[2 * n + 1] = PAGE;
                    n++;
                    fresh = 0;
                } else {
                    break; /* as many runs as a hint holds */
                }
                pages++;
            }
            if (n >= HINT_MAX_RUNS && fresh)
                break;
        }
    }
    free(line);
    fclose(maps);
    close(pagemap);
    return n;
}

/*  The session's init. Returns only in the kernel. */
static void s_session_init(const sandbox_cfg_t *cfg, int lifeline, int pipe_fd, int init_fd,
                           int learn_fd, const char *hint, size_t hint_runs,
                           const char *failed, int failed_errno)
{
    /* The pipe goes onto fd 3 and kennel-init onto fd 4: move the lifeline above both. The
     * learning kernel's pipe is above them already (kennel_zygote.py makes it so): the
     * kernel's Python writes to it by its number. */
    if (lifeline <= INIT_FD)
        lifeline = fcntl(lifeline, F_DUPFD_CLOEXEC, INIT_FD + 1);
    if (learn_fd >= 0 && learn_fd <= INIT_FD)
        failed = "the learner's fd is below 5", failed_errno = EBADF;
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
        /* One malloc arena. glibc gives each new thread its own, a 64 MiB reservation of
         * address space (128 MiB while it is made), and RLIMIT_AS (--memory) counts it:
         * under some limits (298-304M, 370M, when RLIMIT_AS also counted the zygote's
         * mappings) its helper threads' arenas took the room the next thread's stack
         * needed, and it died before its hello ("can't start new thread"). Python's
         * allocations are serialised by the GIL anyway. */
        mallopt(M_ARENA_MAX, 1);
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

/*  kenneld's --site and --data, bound read-only into every session (set_binds, once). */
static sandbox_bind_t s_binds[SANDBOX_MAX_BINDS];
static size_t s_nbinds;

/*  set_binds([(host, inside), ...]): the directories every later session gets read-only. */
static PyObject *s_set_binds(PyObject *self, PyObject *list)
{
    (void)self;
    if (!PyList_Check(list) || PyList_GET_SIZE(list) > SANDBOX_MAX_BINDS)
        return PyErr_Format(PyExc_ValueError, "a list of at most %d (host, inside) pairs",
                            SANDBOX_MAX_BINDS);
    if (s_nbinds)
        return PyErr_Format(PyExc_RuntimeError, "the binds are set once");
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        const char *host, *inside;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(list, i), "ss", &host, &inside))
            return NULL;
        if (host[0] != '/' || inside[0] != '/')
            return PyErr_Format(PyExc_ValueError, "bind paths are absolute");
        s_binds[i].host = strdup(host);
        s_binds[i].inside = strdup(inside);
        if (!s_binds[i].host || !s_binds[i].inside)
            return PyErr_NoMemory();
    }
    s_nbinds = (size_t)PyList_GET_SIZE(list);
    Py_RETURN_NONE;
}

/*  One spawn request, as numbers and fds. */
typedef struct {
    int pipe_fd, workspace_fd, init_fd, lifeline;
    const char *kernel_dir;
    int cgroup_fds[MAX_CGROUPS + 1]; /* ends in -1 */
    unsigned int uid, gid;
    unsigned long long tmp, as_bytes, fsize;
    unsigned long nproc, nofile;
} spawn_req_t;

/*  The zygote's address space now, in bytes (/proc/self/statm's first field); 0 if unread.
 *  A kernel inherits it all: the preloaded runtime, shared with every other kernel until
 *  written. A kernel's RLIMIT_AS is --memory on top of it, so that what a session may map
 *  of its own is its limit whatever the preload maps (~270 MiB with the default one; a
 *  limit under that would leave a kernel no room at all). The cgroup's memory limit, which
 *  counts the pages a kernel copies or makes, is --memory itself. */
static unsigned long long s_inherited_bytes(void)
{
    long long size, resident;
    return util_statm(0, &size, &resident) == 0 ? (unsigned long long)size : 0;
}

/*  Clone one session for r. In the zygote: its pid, or -1 with *err and *step. In the new
 *  session's kernel: 0, with Python's after-fork work done. */
static pid_t s_clone_session(const spawn_req_t *r, int learn_fd, const char *hint,
                             size_t hint_runs, int *err, const char **step)
{
    sandbox_cfg_t cfg = {
        .workspace = NULL, .workspace_fd = r->workspace_fd, .kernel_dir = r->kernel_dir,
        .host_uid = (uid_t)r->uid, .host_gid = (gid_t)r->gid, .tmp_bytes = r->tmp,
        .as_bytes = r->as_bytes ? r->as_bytes + s_inherited_bytes() : 0,
        .fsize_bytes = r->fsize, .nproc = r->nproc,
        .nofile = r->nofile, .binds = s_binds, .nbinds = s_nbinds,
    };
    sandbox_clone_opts_t opts = {.as_sibling = 1, .lifeline = r->lifeline,
                                 .cgroup_fds = r->cgroup_fds};
    int life = -1;
    pid_t zygote = getpid();
    PyOS_BeforeFork();
    pid_t pid = sandbox_clone(&cfg, &opts, &life, step);
    *err = errno;
    if (getpid() == zygote) {
        PyOS_AfterFork_Parent();
        return pid;
    }
    /* The session's init: pid < 0 means a setup step failed, which it reports. */
    s_session_init(&cfg, life, r->pipe_fd, r->init_fd, learn_fd, hint, hint_runs,
                   pid < 0 ? *step : NULL, *err);
    PyOS_AfterFork_Child();
    return 0;
}

static PyObject *s_spawn(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *kwlist[] = {"pipe_fd", "workspace_fd", "init_fd", "kernel_dir", "lifeline",
                             "cgroup_fds", "uid", "gid", "tmp", "as_bytes", "fsize", "nproc",
                             "nofile", "learn_fd", "hint", NULL};
    spawn_req_t r;
    int learn_fd = -1;
    const char *hint = NULL;
    Py_ssize_t hint_len = 0;
    PyObject *cgroups;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iiisiO!IIKKKkk|iy#", kwlist, &r.pipe_fd,
                                     &r.workspace_fd, &r.init_fd, &r.kernel_dir, &r.lifeline,
                                     &PyList_Type, &cgroups, &r.uid, &r.gid, &r.tmp, &r.as_bytes,
                                     &r.fsize, &r.nproc, &r.nofile, &learn_fd, &hint, &hint_len))
        return NULL;
    Py_ssize_t hint_runs = s_hint_runs(hint_len);
    if (hint_runs < 0)
        return NULL;
    Py_ssize_t n = PyList_Size(cgroups);
    if (n > MAX_CGROUPS)
        return PyErr_Format(PyExc_ValueError, "at most %d cgroups", MAX_CGROUPS);
    for (Py_ssize_t i = 0; i < n; i++) {
        r.cgroup_fds[i] = (int)PyLong_AsLong(PyList_GET_ITEM(cgroups, i));
        if (PyErr_Occurred())
            return NULL;
    }
    r.cgroup_fds[n] = -1;
    if (r.uid == 0 || r.gid == 0)
        return PyErr_Format(PyExc_ValueError, "a kernel never runs as host root");
    int err = 0;
    const char *step = NULL;
    pid_t pid = s_clone_session(&r, learn_fd, hint, (size_t)hint_runs, &err, &step);
    if (pid < 0) {
        PyObject *exc = Py_BuildValue("(is)", err, step);
        if (exc) {
            PyErr_SetObject(PyExc_OSError, exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    return PyLong_FromLong((long)pid);
}

/*  serve()'s part: the numbers of a spawn request the C loop can serve itself (op "spawn",
 *  the environment's paths the ones the zygote prepared, every number a JSON integer in
 *  range, uid and gid not root); 0 if so, -1 to hand the request to Python. */
static int s_parse_spawn(json_t *req, const char *home, const char *ipython_dir, spawn_req_t *r)
{
    const char *op = json_string_value(json_object_get(req, "op"));
    json_t *env = json_object_get(req, "env");
    const char *h = json_string_value(json_object_get(env, "HOME"));
    const char *d = json_string_value(json_object_get(env, "IPYTHONDIR"));
    if (!op || strcmp(op, "spawn") != 0 || !h || !d || strcmp(h, home) != 0 ||
        strcmp(d, ipython_dir) != 0)
        return -1;
    static const char *const names[] = {"uid", "gid", "tmp", "as", "fsize", "nproc", "nofile"};
    json_int_t v[7];
    for (size_t i = 0; i < 7; i++) {
        json_t *j = json_object_get(req, names[i]);
        if (!json_is_integer(j) || json_integer_value(j) < 0)
            return -1;
        v[i] = json_integer_value(j);
    }
    if (v[0] == 0 || v[0] > (json_int_t)UINT32_MAX || v[1] == 0 || v[1] > (json_int_t)UINT32_MAX)
        return -1;
    r->uid = (unsigned int)v[0];
    r->gid = (unsigned int)v[1];
    r->tmp = (unsigned long long)v[2];
    r->as_bytes = (unsigned long long)v[3];
    r->fsize = (unsigned long long)v[4];
    r->nproc = (unsigned long)v[5];
    r->nofile = (unsigned long)v[6];
    return 0;
}

/*  jansson's allocations while serve() runs: a bump arena reset for each request, so that
 *  parsing a request and writing its reply touch the same two or three pages every round
 *  rather than free chunks scattered over the zygote's heap (each a copy-on-write fault:
 *  ~3 ms a round with malloc). What does not fit goes to malloc. */
static _Alignas(max_align_t) char s_arena[32768];
static size_t s_arena_used;

static void *s_arena_malloc(size_t size)
{
    size = (size + 15) & ~(size_t)15;
    if (size <= sizeof s_arena - s_arena_used) {
        void *p = s_arena + s_arena_used;
        s_arena_used += size;
        return p;
    }
    return malloc(size);
}

static void s_arena_free(void *p)
{
    if (p && ((char *)p < s_arena || (char *)p >= s_arena + sizeof s_arena))
        free(p);
}

/*  The reply to a spawn request, sent on ctl. */
static int s_reply(int ctl, json_t *ticket, pid_t pid, long hint_pages, int err, const char *step)
{
    char what[300];
    json_t *reply;
    if (pid > 0) {
        reply = json_pack("{s:s, s:I, s:I, s:s}", "op", "spawned", "pid", (json_int_t)pid,
                          "hint_pages", (json_int_t)hint_pages, "loop", "c");
    } else {
        snprintf(what, sizeof what, "[Errno %d] %s", err, step ? step : "spawn");
        reply = json_pack("{s:s, s:s}", "op", "error", "error", what);
    }
    if (!reply)
        return -1;
    json_object_set(reply, "ticket", ticket ? ticket : json_null());
    char *text = json_dumps(reply, JSON_COMPACT);
    json_decref(reply);
    if (!text)
        return -1;
    ssize_t sent;
    do
        sent = send(ctl, text, strlen(text), 0);
    while (sent < 0 && errno == EINTR);
    s_arena_free(text);
    return sent < 0 ? -1 : 0;
}

#define SERVE_MAX_MESSAGE 65536 /* kennel_zygote.MAX_MESSAGE */
#define SERVE_MAX_FDS 16        /* kennel_zygote.MAX_FDS */

/*  Every kernel is a copy of the zygote's memory: a request served (its bytes, and what
 *  jansson made of them in the arena) is zeroed before the next one is read, so that a kernel
 *  finds its own request there and no earlier session's (host uid, limits, ticket). The same
 *  pages are written each round anyway: no more copy-on-write faults. */
static void s_forget(char *buf, size_t n)
{
    explicit_bzero(buf, n);
    explicit_bzero(s_arena, s_arena_used);
    s_arena_used = 0;
}

/*  serve(ctl, lifeline, init_fd, kernel_dir, hint, hint_pages, home, ipython_dir): the
 *  zygote's loop once the page hint is settled and the kernel paths prepared. Each round
 *  writes to a page of the zygote, and each such page was shared again with the last session
 *  cloned: a copy-on-write fault apiece, ~65 us here. Python's loop wrote to ~240 of them a
 *  round (every object it touched, its code objects' counters); this one to a few. Returns
 *    ("eof", None, None)    kenneld closed the socket;
 *    ("python", msg, fds)   a request it does not serve itself (any other op, paths that
 *                           changed, a number out of range, too few fds): Python's loop does;
 *    ("kernel", msg, None)  in a new session's kernel, with the request that made it. */
static PyObject *s_serve_loop(PyObject *args)
{
    spawn_req_t r;
    int ctl;
    const char *hint, *home, *ipython_dir;
    Py_ssize_t hint_len;
    long hint_pages;
    if (!PyArg_ParseTuple(args, "iiisy#lss", &ctl, &r.lifeline, &r.init_fd, &r.kernel_dir, &hint,
                          &hint_len, &hint_pages, &home, &ipython_dir))
        return NULL;
    Py_ssize_t hint_runs = s_hint_runs(hint_len);
    if (hint_runs < 0)
        return NULL;
    static char buf[SERVE_MAX_MESSAGE];
    union {
        char space[CMSG_SPACE(SERVE_MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } control;
    for (;;) {
        s_arena_used = 0;
        struct iovec iov = {buf, sizeof buf};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space,
                            .msg_controllen = sizeof control.space};
        ssize_t n = recvmsg(ctl, &mh, 0);
        if (n < 0 && errno == EINTR) {
            if (PyErr_CheckSignals() < 0)
                return NULL;
            continue;
        }
        if (n < 0)
            return PyErr_SetFromErrno(PyExc_OSError);
        int fds[SERVE_MAX_FDS];
        size_t nfds = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k && nfds < SERVE_MAX_FDS; i++)
                memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        }
        if (n == 0) {
            for (size_t i = 0; i < nfds; i++)
                close(fds[i]);
            return Py_BuildValue("(sOO)", "eof", Py_None, Py_None);
        }
        json_t *req = (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ? NULL
                                                                : json_loadb(buf, (size_t)n, 0, NULL);
        int ours = req && nfds >= 2 && nfds - 2 <= MAX_CGROUPS &&
                   s_parse_spawn(req, home, ipython_dir, &r) == 0;
        if (!ours) {
            json_decref(req);
            PyObject *list = PyList_New((Py_ssize_t)nfds);
            for (size_t i = 0; list && i < nfds; i++) {
                PyObject *fd = PyLong_FromLong(fds[i]);
                if (!fd)
                    Py_CLEAR(list);
                else
                    PyList_SET_ITEM(list, (Py_ssize_t)i, fd);
            }
            if (!list) {
                for (size_t i = 0; i < nfds; i++)
                    close(fds[i]);
                return NULL;
            }
            PyObject *out = Py_BuildValue("(sy#N)", "python", buf, (Py_ssize_t)n, list);
            s_forget(buf, (size_t)n);
            return out;
        }
        r.pipe_fd = fds[0];
        r.workspace_fd = fds[1];
        for (size_t i = 2; i < nfds; i++)
            r.cgroup_fds[i - 2] = fds[i];
        r.cgroup_fds[nfds - 2] = -1;
        int err = 0;
        const char *step = NULL;
        pid_t pid = s_clone_session(&r, -1, hint, (size_t)hint_runs, &err, &step);
        if (pid == 0) {
            json_decref(req);
            return Py_BuildValue("(sy#O)", "kernel", buf, (Py_ssize_t)n, Py_None);
        }
        for (size_t i = 0; i < nfds; i++)
            close(fds[i]);
        int sent = s_reply(ctl, json_object_get(req, "ticket"), pid, hint_pages, err, step);
        json_decref(req);
        s_forget(buf, (size_t)n);
        if (sent < 0)
            return PyErr_SetFromErrno(PyExc_OSError);
    }
}

static PyObject *s_serve(PyObject *self, PyObject *args)
{
    (void)self;
    json_malloc_t was_malloc;
    json_free_t was_free;
    json_get_alloc_funcs(&was_malloc, &was_free);
    json_set_alloc_funcs(s_arena_malloc, s_arena_free);
    PyObject *out = s_serve_loop(args);
    json_set_alloc_funcs(was_malloc, was_free); /* in the kernel too */
    return out;
}

/*  huge_arenas(on): the zygote's Python objects in transparent huge pages. pymalloc takes
 *  its memory in arenas of 1 MiB, each mmap'd alone and faulted in a page at a time: ~10,000
 *  first writes for the zygote's imports, at ~25 us each on this VM kind, about 40% of its
 *  start. On, arenas are carved out of 2 MiB-aligned chunks marked MADV_HUGEPAGE, each huge
 *  page faulted in whole at its first write (where the host's THP setting is `madvise` or
 *  `always`; with `never`, as before). Off, before the first fork: the rest of the last chunk
 *  is unmapped, so a kernel's address space (RLIMIT_AS counts it) holds no reserve, the
 *  chunks are marked MADV_NOHUGEPAGE (khugepaged then never makes a kernel's copies there
 *  huge pages of its own; the zygote's stay), and arenas are mmap'd alone again: a kernel's
 *  own in a huge page would cost each session 2 MiB of memory of its own. A kernel's write
 *  to a huge page it shares with the zygote copies one 4 KiB page, as before (the kernel
 *  splits the mapping). Arenas are unmapped when freed, wherever they came from (the
 *  default allocator's are mmap'd too). */
#define HUGE_PAGE ((size_t)2 << 20)
#define ARENA_CHUNK ((size_t)8 << 20)
static char *s_chunk_start, *s_chunk_next, *s_chunk_end;
static int s_huge;
/* The used part of each chunk, marked MADV_NOHUGEPAGE when huge_arenas goes off, so that
 * khugepaged never collapses a kernel's copies in them into huge pages of its own. */
static struct {
    char *start;
    size_t len;
} s_used[64];
static size_t s_nused;

static void s_chunk_trim(void)
{
    if (s_chunk_next && s_chunk_end > s_chunk_next)
        munmap(s_chunk_next, (size_t)(s_chunk_end - s_chunk_next));
    if (s_chunk_start && s_chunk_next > s_chunk_start && s_nused < sizeof s_used / sizeof s_used[0]) {
        s_used[s_nused].start = s_chunk_start;
        s_used[s_nused++].len = (size_t)(s_chunk_next - s_chunk_start);
    }
    s_chunk_start = s_chunk_next = s_chunk_end = NULL;
}

static void *s_py_arena_alloc(void *ctx, size_t size)
{
    (void)ctx;
    if (s_huge && (size_t)(s_chunk_end - s_chunk_next) < size) {
        size_t want = size > ARENA_CHUNK ? (size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1) : ARENA_CHUNK;
        char *raw = mmap(NULL, want + HUGE_PAGE, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw != MAP_FAILED) {
            char *start = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
            char *end = start + want;
            if (start > raw)
                munmap(raw, (size_t)(start - raw));
            if (raw + want + HUGE_PAGE > end)
                munmap(end, (size_t)(raw + want + HUGE_PAGE - end));
            (void)madvise(start, want, MADV_HUGEPAGE);
            s_chunk_trim();
            s_chunk_start = s_chunk_next = start;
            s_chunk_end = end;
        }
    }
    if (s_huge && (size_t)(s_chunk_end - s_chunk_next) >= size) {
        void *p = s_chunk_next;
        s_chunk_next += size;
        return p;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void s_py_arena_free(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    munmap(ptr, size);
}

static PyObject *s_huge_arenas(PyObject *self, PyObject *arg)
{
    (void)self;
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    static PyObjectArenaAllocator alloc = {NULL, s_py_arena_alloc, s_py_arena_free};
    PyObject_SetArenaAllocator(&alloc);
    s_huge = on;
    if (!on) {
        s_chunk_trim();
        for (size_t i = 0; i < s_nused; i++)
            (void)madvise(s_used[i].start, s_used[i].len, MADV_NOHUGEPAGE);
        s_nused = 0;
    }
    Py_RETURN_NONE;
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
    /* Mapped here and unmapped after, so that the report does not count its own pages
     * (the zygote, which has no such mapping, would clip them anyway). */
    size_t size = HINT_MAX_RUNS * 2 * sizeof(uint64_t);
    uint64_t *runs = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    long n = runs == MAP_FAILED ? -1 : s_private_runs(runs);
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
                e = w < 0 ? errno : EIO;
                n = -1;
                break;
            }
            at += w;
            left -= (size_t)w;
        }
        for (long i = 0; i < n; i++)
            pages += (size_t)(runs[2 * i + 1] / PAGE);
    }
    if (runs != MAP_FAILED)
        munmap(runs, size);
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
    {"huge_arenas", s_huge_arenas, METH_O,
     "huge_arenas(on): Python's arenas in transparent huge pages (on), or each mmap'd alone; "
     "off before the first fork"},
    {"merge_pages", s_merge_pages, METH_NOARGS,
     "merge_pages(): offer this process's pages, and its forks', to KSM"},
    {"serve", s_serve, METH_VARARGS,
     "serve(ctl, lifeline, init_fd, kernel_dir, hint, hint_pages, home, ipython_dir) -> "
     "(kind, msg, fds): the zygote's loop in C; see zygote.c"},
    {"set_binds", s_set_binds, METH_O,
     "set_binds([(host, inside), ...]): directories bound read-only into every later session "
     "(kenneld --site and --data); once"},
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
