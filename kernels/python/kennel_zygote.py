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
                      "env": {"MPLCONFIGDIR": D, "IPYTHONDIR": D/ipython}, "merge_pages": B}
                     + [lifeline, kennel-init]   (first; the lifeline hangs up when kenneld
                     dies; each session's init execs kennel-init once it forked its kernel)
  zygote -> kenneld  {"op": "ready", "preloaded": [...], "failed": {module: error},
                      "stale_fds": {fd: what}, "ms": N[, "merge_pages": what came of it]}
  kenneld -> zygote  {"op": "spawn", "ticket": T, "uid": U, "gid": G, "tmp": B, "as": B, "fsize": B,
                      "nproc": N, "nofile": N, "env": {...}}
                     + [pipe, workspace, cgroup.procs...]
  zygote -> kenneld  {"op": "spawned", "pid": P, "ticket": T} or
                     {"op": "error", "error": "...", "ticket": T}   (T from the request)
"""

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


def _become_kernel(ctl, cfg, req, stale):
    """In the new kernel: serve the session, then exit. Never returns to the zygote's loop,
    whatever happens (an exception here must not reach main's handlers)."""
    code = 1
    try:
        ctl.detach()  # sandbox_seal closed its fd: the object must not close a reused number
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        for fd in stale:
            if fd != null:
                os.dup2(null, fd, inheritable=False)
        if null not in stale:
            os.close(null)
        os.environ.clear()
        os.environ.update(req["env"])
        _reseed()
        pipe, gate = kennel_kernel.start(3, hello=False)
        kennel_kernel.serve(pipe, gate, cfg["path"], hello=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        os._exit(code)


def _spawn(ctl, cfg, lifeline, init_fd, stale, req, fds):
    import _kennel_zygote
    from kennel_shell import KennelShell

    if len(fds) < 2:
        raise ValueError("a spawn request carries the pipe and the workspace")
    # Here, before the fork, so that every kernel shares what it sets.
    KennelShell.instance().prepare_kernel_paths(req["env"])
    pid = _kennel_zygote.spawn(
        pipe_fd=fds[0], workspace_fd=fds[1], init_fd=init_fd, kernel_dir=cfg["kernel_dir"],
        lifeline=lifeline,
        cgroup_fds=list(fds[2:]), uid=int(req["uid"]), gid=int(req["gid"]),
        tmp=int(req["tmp"]), as_bytes=int(req["as"]), fsize=int(req["fsize"]),
        nproc=int(req["nproc"]), nofile=int(req["nofile"]))
    if pid == 0:
        _become_kernel(ctl, cfg, req, stale)
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
    while True:
        msg, fds, _flags, _addr = socket.recv_fds(ctl, MAX_MESSAGE, MAX_FDS)
        if not msg:
            return  # kenneld closed the socket
        req = None
        try:
            req = json.loads(msg)
            if req.get("op") != "spawn":
                raise ValueError(f"unknown op {req.get('op')!r}")
            reply = {"op": "spawned", "pid": _spawn(ctl, cfg, lifeline, init_fd, stale, req, fds)}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            reply = {"op": "error", "error": str(e)[:300]}
        reply["ticket"] = req.get("ticket") if isinstance(req, dict) else None
        for fd in fds:
            os.close(fd)
        _send(ctl, reply)
