"""kennel_zygote: a warm Python that becomes sandboxed kernels by forking.

kenneld starts one zygote, as root and outside any sandbox, with its control socket (a Unix
SOCK_SEQPACKET socketpair) on fd 3:

    /usr/bin/python3 -I -c BOOT

BOOT reads the first message, the zygote's configuration, puts the kernel runtime on
sys.path and calls main(). The zygote then imports the kernel runtime and the preload list
(numpy, pandas, matplotlib with the inline backend, … — configurable), freezes the garbage
collector's view of it all, says "ready", and serves spawn requests one at a time. For each
one _kennel_zygote.spawn() clones a session (see kernels/zygote/zygote.c); in the new kernel
it returns 0 and this module hands over to kennel_kernel, as a cold `kennel_kernel.py` would.

Nothing of a session reaches the zygote but numbers and file descriptors: a request carries
the kernel's host uid and limits, with the kernel pipe, a detached copy of the workspace's mount (open_tree)
and the session's cgroup.procs files attached (SCM_RIGHTS). No path, session id or key is
ever in its memory, so a kernel (a copy of that memory) finds none there.

Messages (JSON, one per datagram):
  kenneld -> zygote  {"op": "config", "path": [...], "kernel_dir": D, "preload": [...],
                      "env": {"MPLCONFIGDIR": D, "IPYTHONDIR": D/ipython}, "merge_pages": B,
                      "binds": [[host, inside], ...]}   (--site and --data, read-only)
                     + [lifeline, kennel-init]   (first; the lifeline hangs up when kenneld
                     dies; each session's init execs kennel-init once it forked its kernel)
  zygote -> kenneld  {"op": "ready", "preloaded": [...], "failed": {module: error},
                      "stale_fds": {fd: what}, "ms": N[, "merge_pages": what came of it]}
  kenneld -> zygote  {"op": "spawn", "ticket": T, "uid": U, "gid": G, "tmp": B, "as": B, "fsize": B,
                      "nproc": N, "nofile": N, "env": {...}}
                     + [pipe, workspace, cgroup.procs...]
  zygote -> kenneld  {"op": "spawned", "pid": P, "ticket": T, "hint_pages": N, "loop": L} or
                     {"op": "error", "error": "...", "ticket": T}   (T from the request)

The loop: once the page hint is settled (below) and a request's kernel paths (HOME,
IPYTHONDIR) were prepared, requests are served by a loop in C (zygote.c's serve), which
hands any other request back to this module's loop. Each round of a loop writes to pages
that the last fork shared again, ~65 us a page here; Python's loop wrote ~240 a round. L
says which loop served ("c" or "python"), for tests and diagnostics.

The page hint: a copy-on-write fault costs ~25 us on this VM kind and a kernel takes ~1450
by its hello, nearly the same pages in every kernel (the zygote's, written by reference
counts). Two kernels, the learners, each report their private pages before their hello
through a pipe the zygote gave them (no user code has run in them then); every later kernel
asks for the pages both reported at once, right after its fork (see kernels/zygote/zygote.c).
hint_pages: how many there are, 0 until learned.
"""

import array
import bisect
import fcntl
import gc
import importlib
import json
import os
import socket
import sys
import time

import kennel_kernel

MAX_MESSAGE = 65536
_WARM_UP_PLOT = ("__import__('matplotlib.pyplot').pyplot.plot([1, 2, 3]);"
                 " __import__('matplotlib.pyplot').pyplot.show()")
MAX_FDS = 16
_MT19937_WORDS = 624  # the state of numpy's legacy generator, in 32-bit words
_LEARNERS = 2  # kernels whose reports make the page hint
_LEARN_RETRIES = 2  # learners that may die before their hello before the zygote gives up
_HINT_MAX_RUNS = 3072  # zygote.c's HINT_MAX_RUNS
_HINT_MAX_PAGES = 4096  # zygote.c's HINT_MAX_PAGES
_HINT_MAX_BYTES = _HINT_MAX_RUNS * 16  # runs of two 64-bit words
_PAGE = 4096


class _PageHint:
    """The pages every kernel writes by its hello (see the top): those that two kernels, each
    forked without a hint, both reported. One kernel's report alone serves until the second
    comes; the intersection leaves out the few dozen pages one kernel writes and another
    does not (a hint that asks for those costs every kernel 4 KiB apiece). The two learners
    are the first two kernels forked, at once (with the default pool, the pool's first two),
    so that the hint is settled by the time the pool is ready."""

    def __init__(self):
        self.runs = b""  # (address, bytes) pairs, native 64-bit words, as spawn() takes them
        self.pages = 0
        self._reports = []  # each learner's pages, as sets of addresses
        self._learners = {}  # read end of a learning kernel's pipe -> what it wrote so far
        self._asked = 0

    def settled(self):
        """Learned, or given up: no learner to ask or to wait for any more."""
        return not self._learners and (len(self._reports) >= _LEARNERS
                                       or self._asked >= _LEARNERS + _LEARN_RETRIES)

    def learn_fd(self):
        """A write end for the next kernel to report on, or -1 (learned, being learned, or
        given up). That kernel is forked without the hint; the caller closes the fd once it
        is forked."""
        if (len(self._reports) + len(self._learners) >= _LEARNERS
                or self._asked >= _LEARNERS + _LEARN_RETRIES):
            return -1
        self._asked += 1
        r, w = os.pipe2(os.O_CLOEXEC)
        if w <= 4:  # the session's init puts its pipe on 3 and kennel-init on 4
            moved = fcntl.fcntl(w, fcntl.F_DUPFD_CLOEXEC, 5)
            os.close(w)
            w = moved
        os.set_blocking(r, False)
        self._learners[r] = b""
        return w

    def poll(self):
        """Take the reports of learners that are done (they closed their end)."""
        for r in list(self._learners):
            got = self._learners[r]
            try:
                while chunk := os.read(r, 65536):
                    got += chunk
                    if len(got) > _HINT_MAX_BYTES:
                        break
            except BlockingIOError:
                self._learners[r] = got
                continue  # still learning
            os.close(r)
            del self._learners[r]
            spans = _writable_spans()
            pages = (_pages_in_maps(got, spans)
                     if got and len(got) <= _HINT_MAX_BYTES and len(got) % 16 == 0 else None)
            if pages is None:
                continue  # it died before its hello, or spoke nonsense: ask another
            self._reports.append(pages)
            self.runs = _runs(set.intersection(*self._reports), spans)
            words = array.array("Q", self.runs)
            self.pages = sum(words[1::2]) // _PAGE


def _writable_spans():
    """This process's private writable mappings, sorted: what a kernel forked from here has
    at its fork that MADV_POPULATE_WRITE can ask for."""
    spans = []
    with open("/proc/self/maps") as f:
        for line in f:
            where, perms = line.split(None, 2)[:2]
            if perms.startswith("rw") and perms[3] == "p":
                lo, hi = where.split("-")
                spans.append((int(lo, 16), int(hi, 16)))
    spans.sort()
    return spans


def _pages_in_maps(runs, spans):
    """The pages of a learner's report inside spans (the learner's own later mappings,
    thread stacks say, are not there), or None if the report is not one report_pages writes:
    page-aligned runs, at most _HINT_MAX_PAGES pages in all."""
    starts = [lo for lo, _ in spans]
    words = array.array("Q", runs)
    if any(w % _PAGE for w in words) or sum(words[1::2]) > _HINT_MAX_PAGES * _PAGE:
        return None
    pages = set()
    for addr, size in zip(words[0::2], words[1::2]):
        for page in range(addr, addr + size, _PAGE):
            i = bisect.bisect_right(starts, page) - 1
            if i >= 0 and page < spans[i][1]:
                pages.add(page)
    return pages


def _runs(pages, spans):
    """Page addresses as runs of (address, bytes), the way spawn() takes a hint: a run never
    crosses from one mapping into the next (MADV_POPULATE_WRITE would stop at the border),
    and there are at most _HINT_MAX_RUNS runs of _HINT_MAX_PAGES pages in all."""
    starts = {lo for lo, _ in spans}
    out = array.array("Q")
    taken = 0
    for page in sorted(pages):
        if taken == _HINT_MAX_PAGES:
            break
        if out and out[-2] + out[-1] == page and page not in starts:
            out[-1] += _PAGE
        elif len(out) // 2 < _HINT_MAX_RUNS:
            out.extend((page, _PAGE))
        else:
            break
        taken += 1
    return out.tobytes()


def _threads():
    """How many threads this process has: the kernel's, not just Python's."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def _preload(modules):
    """Import what every kernel would; returns (preloaded, failed)."""
    done, failed = [], {}
    for name in modules:
        try:
            importlib.import_module(name)
            done.append(name)
        except Exception as e:  # a missing package is reported, not fatal
            failed[name] = f"{type(e).__name__}: {e}"[:200]
    return done, failed


def _open_fds(keep):
    """Descriptors the preload left open (IPython keeps /dev/null open, for one). Every
    kernel's seal closes them under the objects that hold them, so _become_kernel points
    each number at the sandbox's /dev/null: a stale holder then writes nowhere and closes
    nothing of the kernel's. (A font file drawn from here once crashed kernels so.)"""
    left = {}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in keep:
            continue
        try:
            left[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass  # the listing's own descriptor, closed by now
    return left


def _reseed():
    """No two kernels forked from one zygote may share a random stream."""
    import random

    random.seed()  # from os.urandom; random's own at-fork hook does it too
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        # The legacy global RandomState (default_rng() seeds itself): a whole MT19937 state
        # from os.urandom. seed() would derive one from 128 bits through SeedSequence, and
        # touch (so copy from the zygote) some 250 KiB more of numpy's objects doing it.
        key = numpy.frombuffer(os.urandom(_MT19937_WORDS * 4), dtype=numpy.uint32)
        numpy.random.set_state(("MT19937", key, _MT19937_WORDS))
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None:
        tempfile._name_sequence = None  # its names come from a Random made on first use
    process = sys.modules.get("multiprocessing.process")
    if process is not None:
        # The key multiprocessing's connections authenticate with, drawn at its import.
        process.current_process().authkey = os.urandom(32)


def _report_pages(learn_fd):
    """The learner's part, just before its hello."""
    import _kennel_zygote

    try:
        _kennel_zygote.report_pages(learn_fd)  # closes learn_fd
    except OSError:
        pass  # no hint from this one: the zygote asks the next kernel


def _tell_start_failed(e):
    """A kernel that fails before its hello says why in a `fatal` frame on its pipe (fd 3):
    kenneld logs it and tells the waiting clients (KernelStartFailed). Its stderr is
    /dev/null, where a traceback once went, and the failure read `exited with status 1`."""
    import traceback

    from kennel_pipe import encode_frame, encode_part

    where = traceback.extract_tb(e.__traceback__)[-3:]
    text = "kernel: %s: %s (at %s)" % (type(e).__name__, e, ", ".join(
        "%s:%d" % (os.path.basename(f.filename), f.lineno) for f in where))
    try:
        os.write(3, encode_frame([encode_part({"op": "fatal", "error": text[:400]})]))
    except Exception:
        pass  # no pipe to say it on


def _become_kernel(ctl, cfg, req, stale, learn_fd):
    """In the new kernel: serve the session, then exit. Never returns to the zygote's loop,
    whatever happens (an exception here must not reach main's handlers). req: the request,
    or its JSON text (from the C loop)."""
    code = 1
    try:
        if isinstance(req, bytes):
            req = json.loads(req)
        ctl.detach()  # sandbox_seal closed its fd: the object must not close a reused number
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        for fd in stale:
            if fd not in (null, learn_fd):
                os.dup2(null, fd, inheritable=False)
        if null not in stale:
            os.close(null)
        os.environ.clear()
        os.environ.update(req["env"])
        _reseed()
        pipe, gate = kennel_kernel.start(3, hello=False)
        before_hello = None
        if learn_fd >= 0:
            def before_hello():
                _report_pages(learn_fd)
        kennel_kernel.serve(pipe, gate, cfg["path"], hello=True, before_hello=before_hello)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException as e:
        _tell_start_failed(e)
    finally:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        os._exit(code)


def _spawn(ctl, cfg, lifeline, init_fd, stale, hint, req, fds):
    import _kennel_zygote
    from kennel_shell import KennelShell

    if len(fds) < 2:
        raise ValueError("a spawn request carries the pipe and the workspace")
    # Here, before the fork, so that every kernel shares what it sets.
    KennelShell.instance().prepare_kernel_paths(req["env"])
    hint.poll()
    learn_fd = hint.learn_fd()
    try:
        pid = _kennel_zygote.spawn(
            pipe_fd=fds[0], workspace_fd=fds[1], init_fd=init_fd, kernel_dir=cfg["kernel_dir"],
            lifeline=lifeline,
            cgroup_fds=list(fds[2:]), uid=int(req["uid"]), gid=int(req["gid"]),
            tmp=int(req["tmp"]), as_bytes=int(req["as"]), fsize=int(req["fsize"]),
            nproc=int(req["nproc"]), nofile=int(req["nofile"]), learn_fd=learn_fd,
            hint=b"" if learn_fd >= 0 else hint.runs)
        if pid == 0:
            _become_kernel(ctl, cfg, req, stale, learn_fd)
    finally:
        if learn_fd >= 0:  # (in the zygote: a kernel never returns from _become_kernel)
            os.close(learn_fd)  # the learner and its init hold their own
    return pid


def _send(ctl, obj):
    data = json.dumps(obj).encode()
    if len(data) >= MAX_MESSAGE:  # kenneld reads datagrams of at most this
        obj = {k: v for k, v in obj.items() if k not in ("failed", "stale_fds")}
        data = json.dumps(obj).encode()
    ctl.send(data)


def main(ctl, cfg, fds):
    if len(fds) != 2:
        sys.exit("kennel-zygote: the configuration carries the lifeline and kennel-init")
    lifeline, init_fd = fds
    t0 = time.monotonic()
    # Set here, not in the exec environment, which every kernel can read.
    os.environ.update(cfg.get("env", {}))
    import _kennel_zygote  # fails here, loudly, rather than at the first spawn

    # Its imports' objects in huge pages: ~10,000 fewer page faults (see zygote.c); off
    # again before the first fork.
    _kennel_zygote.huge_arenas(True)
    import kennel_runtime

    binds = [(host, inside) for host, inside in cfg.get("binds", [])]
    _kennel_zygote.set_binds(binds)
    # The runtime digest, once, here: every kernel inherits it. The site-packages kernels
    # see at kennel_runtime.SITE is the host's --site directory here.
    kennel_runtime.compute([h for h, inside in binds if inside == kennel_runtime.SITE])
    # The whole kernel runtime, IPython and all: a kernel cannot import from this host path
    # once it is in its sandbox.
    import kennel_server  # noqa: F401

    preloaded, failed = _preload(cfg.get("preload", []))
    # The IPython shell too: every kernel takes it over (KennelShell.create), so its objects
    # are shared rather than made again in each kernel.
    from kennel_shell import KennelShell

    shell = KennelShell.create(None)
    kennel_server.enable_inline_figures()
    # One throwaway cell makes, once and here, what every kernel's first cell would (IPython's
    # display formatters and the like); each kernel runs one more before its hello.
    shell.warm_up()
    if "matplotlib.pyplot" in sys.modules:
        # A first figure loads much of matplotlib's machinery (the Agg renderer, text layout,
        # the inline backend's path to a PNG): once here, shared, rather than in every
        # kernel's first plot. Its fonts are dropped again, so that no font file is open
        # when a kernel is forked (a kernel's seal closes such descriptors).
        shell.warm_up(code=_WARM_UP_PLOT)
        sys.modules["matplotlib.font_manager"]._get_font.cache_clear()
    gc.collect()
    gc.freeze()  # a kernel's collections never touch (and so never copy) the zygote's pages
    _kennel_zygote.huge_arenas(False)
    threads = _threads()
    if threads != 1:
        # A new user namespace needs a single-threaded caller (an OpenBLAS, say, starts
        # threads at import): every spawn would fail, so say it now.
        _send(ctl, {"op": "error", "error": f"the zygote runs {threads} threads after the "
                    "preload; a multithreaded process cannot enter a user namespace"})
        sys.exit(1)
    stale = _open_fds({0, 1, 2, ctl.fileno(), lifeline, init_fd})
    ready = {"op": "ready", "preloaded": preloaded, "failed": failed,
             "stale_fds": {str(fd): target for fd, target in stale.items()},
             "ms": round((time.monotonic() - t0) * 1000)}
    if cfg.get("merge_pages"):
        try:
            _kennel_zygote.merge_pages()  # inherited by every kernel forked from here
            ready["merge_pages"] = "pages are offered to KSM"
        except OSError as e:  # before Linux 6.4
            ready["merge_pages"] = f"not available here: {e}"
    _send(ctl, ready)
    hint = _PageHint()
    prepared = None  # (HOME, IPYTHONDIR) the shell is prepared for
    while True:
        if prepared and hint.settled():
            # The loop in C (see zygote.c's serve): back here only for what it does not serve.
            kind, msg, fds = _kennel_zygote.serve(ctl.fileno(), lifeline, init_fd,
                                                  cfg["kernel_dir"], hint.runs, hint.pages,
                                                  *prepared)
            if kind == "kernel":
                _become_kernel(ctl, cfg, msg, stale, -1)  # never returns
        else:
            msg, fds, _flags, _addr = socket.recv_fds(ctl, MAX_MESSAGE, MAX_FDS)
        if not msg:
            return  # kenneld closed the socket
        req = None
        try:
            req = json.loads(msg)
            if req.get("op") != "spawn":
                raise ValueError(f"unknown op {req.get('op')!r}")
            pid = _spawn(ctl, cfg, lifeline, init_fd, stale, hint, req, fds)
            reply = {"op": "spawned", "pid": pid, "hint_pages": hint.pages, "loop": "python"}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            reply = {"op": "error", "error": str(e)[:300]}
        # The C loop serves requests for the paths the shell holds prepared now (whether or
        # not this request's spawn went through), and hands back any other.
        paths = (shell._prepared or (None, None))[:2]
        prepared = paths if all(isinstance(p, str) and "\0" not in p for p in paths) else None
        reply["ticket"] = req.get("ticket") if isinstance(req, dict) else None
        for fd in fds:
            os.close(fd)
        _send(ctl, reply)
