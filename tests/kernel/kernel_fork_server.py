"""kernel_fork_server: the kernel tests' kernels, forked from a Python that has imported
what every cold kernel imports before its first cell.

A cold `python3 -I kennel_kernel.py --pipe-fd 3` costs ~0.5 s of CPU by the end of its first
cell, half of it importing IPython (in kennel_kernel.serve(), just after the hello), and the
kernel tests start ~120 of them. kernel_pipe_client starts this server once per pytest
process:

    /usr/bin/python3 -I kernel_fork_server.py KERNEL CONTROL_FD

with the environment a kernel gets (its own HOME), so that -I and what the interpreter
derives at start are a cold kernel's. It makes the imports a cold kernel makes before its
first cell (kennel_kernel.py's own, and kennel_runtime and kennel_server, which serve()
imports) and no others: the modules a forked kernel finds in sys.modules at its first cell
are a cold kernel's (test_fork_server.py checks that, with fds, signals and the rest). For
each request it forks, and the child becomes what Popen would have made of
`python3 -I KERNEL ARGS` (fds 0-3, cwd, environment, argv, signals) and runs KERNEL as
__main__: the kernel's main(), its shell, its hello, all as in a cold start. What cannot
be made again after the interpreter's start stays the server's: sys.flags (the same -I),
and the hash seed, which is one for all the kernels of one server.

Messages (JSON, one per datagram; both sockets are AF_UNIX SOCK_SEQPACKET socketpairs):
  server -> client, control socket  {"ready": PID} once the imports are done
  client -> server, control socket  {"args": [...], "cwd": D, "env": {...}}
                                    + [kernel's pipe end, status socket, stdout, stderr]
  server -> client, status socket   {"pid": P} or {"error": "..."}; then, once the kernel
                                    is reaped, {"exit": STATUS} (the raw wait status)
  client -> server, status socket   {"signal": N}, answered {"signaled": true} once sent,
                                    or {"signaled": false} if the kernel was reaped before
                                    (with "error": "..." if the signal could not be sent)
The server exits when the control socket closes (pytest exited, or was killed), after it
killed and reaped the kernels it still had.

This file runs only in the server and its kernels, so it imports nothing a cold kernel
does not have imported by its first cell.
"""

import fcntl
import json
import os
import select
import signal
import socket
import sys

MAX_MESSAGE = 1 << 16
# A cold kernel makes its imports with fds 0-5 taken: its pipe is 3 and start() has made
# its InterruptGate's pipe, 4 and 5. The server holds the same numbers while it imports, so
# that what the imports keep open (IPython's /dev/null) gets the fd it has in a cold
# kernel, clear of the four a kernel is given and of those it makes after the fork.
_FREE_FROM_AT_IMPORT = 6
_CONTROL_FD_FROM = 64  # out of the way of the numbers above
# As the interpreter left them at start, which is how a cold kernel finds them.
_START_HANDLERS = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)}
_START_MASK = signal.pthread_sigmask(signal.SIG_BLOCK, [])


def _open_fds():
    fds = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(name))
        except OSError:
            continue  # the listing's own, closed by now
        fds.add(int(name))
    return fds


def _import_kernel_modules(kernel):
    """Import what a cold kernel has imported by its first cell; return the fds the imports
    left open (every kernel keeps them: they belong to its modules)."""
    held = []
    while (fd := os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)) < _FREE_FROM_AT_IMPORT:
        held.append(fd)
    os.close(fd)
    before = _open_fds()
    kernel_dir = os.path.dirname(kernel)
    # As kennel_kernel.py puts its directory first; serve() takes it off again.
    sys.path.insert(0, kernel_dir)
    import kennel_pipe  # noqa: F401  (kennel_kernel.py's own import)
    import kennel_runtime  # noqa: F401  (these two: serve()'s)
    import kennel_server  # noqa: F401

    sys.path.remove(kernel_dir)
    kept = _open_fds() - before
    for fd in held:
        os.close(fd)
    return kept


def _send(sock, obj):
    try:
        sock.send(json.dumps(obj).encode())
    except OSError:
        pass  # the client is gone: nobody is left to tell


class _Kernel:
    def __init__(self, pid, pidfd, status):
        self.pid = pid
        self.pidfd = pidfd  # None once reaped
        self.status = status  # the status socket; None once the client closed it


class Server:
    def __init__(self, control):
        self.control = control
        self.poller = select.poll()
        self.poller.register(control, select.POLLIN)
        self.by_fd = {}  # pidfd or status socket fd -> _Kernel

    def serve(self):
        """Serve spawn requests until the control socket closes. Returns None in the server,
        and (request, [pipe, stdout, stderr]) in each kernel it forks."""
        while True:
            for fd, _ in self.poller.poll():
                if fd == self.control.fileno():
                    msg, fds, _flags, _addr = socket.recv_fds(self.control, MAX_MESSAGE, 4)
                    if not msg:
                        self._kill_all()
                        return None
                    child = self._spawn(msg, fds)
                    if child is not None:
                        return child
                elif fd in self.by_fd:
                    k = self.by_fd[fd]
                    if fd == k.pidfd:
                        self._reap(k)
                    else:
                        self._answer(k)

    def _spawn(self, msg, fds):
        if len(fds) != 4:
            for fd in fds:
                os.close(fd)
            return None
        pipe, status_fd, out, err = fds
        status = socket.socket(fileno=status_fd)
        try:
            req = json.loads(msg)
            pid = os.fork()
        except (ValueError, OSError) as e:
            _send(status, {"error": f"{type(e).__name__}: {e}"})
            status.close()
            for fd in (pipe, out, err):
                os.close(fd)
            return None
        if pid == 0:
            status.close()
            self._close_in_kernel()
            return req, [pipe, out, err]
        for fd in (pipe, out, err):
            os.close(fd)
        k = _Kernel(pid, os.pidfd_open(pid), status)
        for fd in (k.pidfd, status.fileno()):
            self.by_fd[fd] = k
            self.poller.register(fd, select.POLLIN)
        _send(status, {"pid": pid})
        return None

    def _reap(self, k):
        _, wait_status = os.waitpid(k.pid, 0)
        self._forget_fd(k.pidfd)
        os.close(k.pidfd)
        k.pidfd = None
        if k.status is not None:
            _send(k.status, {"exit": wait_status})

    def _answer(self, k):
        try:
            msg = k.status.recv(MAX_MESSAGE)
        except OSError:
            msg = b""
        if not msg:  # the client is done with this kernel (it is reaped whenever it exits)
            self._forget_fd(k.status.fileno())
            k.status.close()
            k.status = None
            return
        try:
            signum = int(json.loads(msg)["signal"])
        except (ValueError, KeyError, TypeError):
            return
        if k.pidfd is None:
            _send(k.status, {"signaled": False})
            return
        try:
            # A pidfd names this process, never one that took its pid after it was reaped.
            signal.pidfd_send_signal(k.pidfd, signum)
        except OSError as e:
            _send(k.status, {"signaled": False, "error": str(e)})
            return
        _send(k.status, {"signaled": True})

    def _forget_fd(self, fd):
        self.poller.unregister(fd)
        del self.by_fd[fd]

    def _kill_all(self):
        for k in set(self.by_fd.values()):
            if k.pidfd is not None:
                signal.pidfd_send_signal(k.pidfd, signal.SIGKILL)
                self._reap(k)

    def _close_in_kernel(self):
        """The server's sockets, closed by their objects, which would otherwise close
        whatever fd later took their numbers once they were collected."""
        self.control.close()
        for fd, k in self.by_fd.items():
            if fd == k.pidfd:
                os.close(fd)
            else:
                k.status.close()
        self.by_fd.clear()


def _close_fds_from(low, keep):
    for fd in _open_fds():
        if fd >= low and fd not in keep:
            os.close(fd)


def _renew_process_state():
    """What the interpreter or a module derived at import from the process (its HOME, its
    cwd, a random key), made again as a cold kernel's would be."""
    import random  # (all three are in sys.modules already)
    import multiprocessing.process
    import site

    random.seed()  # (random's at-fork hook did already; this does not rely on it)
    process = multiprocessing.process
    process.current_process().authkey = os.urandom(32)
    process.ORIGINAL_DIR = os.path.abspath(os.getcwd())
    # site computed these at the interpreter's start, from the server's HOME.
    site.USER_BASE = site.USER_SITE = None
    site.getusersitepackages()


def _become_kernel(kernel, req, fds, kept):
    """Turn this forked child into `python3 -I KERNEL ARGS` started by Popen, and run
    KERNEL as __main__."""
    pipe, out, err = fds
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.dup2(pipe, 3)  # after 1 and 2: out or err may be 3
    for fd in {pipe, out, err} - {0, 1, 2, 3}:
        os.close(fd)
    _close_fds_from(4, kept)
    for signum, handler in _START_HANDLERS.items():
        signal.signal(signum, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, _START_MASK)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    _renew_process_state()
    args = [kernel] + list(req["args"])
    sys.argv = args
    sys.orig_argv = sys.orig_argv[:2] + args  # this interpreter's path and -I
    with open(kernel, "rb") as f:
        code = compile(f.read(), kernel, "exec")
    server_main = sys.modules["__main__"]
    main = type(sys)("__main__")
    main.__file__ = kernel
    main.__cached__ = None
    main.__loader__ = type(server_main.__loader__)("__main__", kernel)
    main.__builtins__ = server_main.__builtins__
    for name, module in list(sys.modules.items()):
        if module is server_main:  # __main__, and multiprocessing's __mp_main__
            sys.modules[name] = main
    try:
        exec(code, vars(main))
    except Exception as e:
        # What the interpreter does with an exception the script left, without this
        # file's frame.
        sys.excepthook(type(e), e, e.__traceback__.tb_next)
        sys.exit(1)


def main(kernel, control_fd):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C is pytest's to handle; it closes us
    moved = fcntl.fcntl(control_fd, fcntl.F_DUPFD_CLOEXEC, _CONTROL_FD_FROM)
    os.close(control_fd)
    control = socket.socket(fileno=moved)
    kept = _import_kernel_modules(kernel)
    _send(control, {"ready": os.getpid()})
    child = Server(control).serve()
    if child is not None:
        _become_kernel(kernel, *child, kept)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
