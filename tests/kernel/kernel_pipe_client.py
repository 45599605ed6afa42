"""Drives the real kennel kernel over a socketpair, speaking protocol/kernel-pipe.md.

KernelProcess plays kenneld's part: it starts kennel_kernel.py with its end of the pipe
on fd 3, builds request headers, and collects what the kernel sends back. Every read
has a timeout, and the `kernel` fixture kills the process even when a test fails.

The kernel is forked from this pytest process's fork server (kernel_fork_server.py), which
has made the imports a cold kernel makes before its first cell (~0.25 s of CPU a kernel);
the kernel then runs kennel_kernel.py as `python3 -I kennel_kernel.py --pipe-fd 3` would.
KENNEL_KERNEL_COLD=1 starts each one cold instead, as does a server that failed to start.
"""

import atexit
import datetime
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import uuid
import warnings
from pathlib import Path


PYTHON = "/usr/bin/python3"
KERNEL = Path(__file__).resolve().parents[2] / "kernels" / "python" / "kennel_kernel.py"
FORK_SERVER = Path(__file__).resolve().with_name("kernel_fork_server.py")
READ_TIMEOUT_S = 10
SERVER_START_TIMEOUT_S = 60  # its imports, on a loaded machine
MAX_MESSAGE = 1 << 16
SESSION = uuid.uuid4().hex

_U32 = struct.Struct(">I")


def encode_frame(parts):
    body = _U32.pack(len(parts)) + b"".join(_U32.pack(len(p)) + p for p in parts)
    return _U32.pack(len(body)) + body


def jdump(obj):
    return json.dumps(obj).encode()


def make_header(msg_type):
    return {
        "msg_id": uuid.uuid4().hex,
        "msg_type": msg_type,
        "session": SESSION,
        "username": "test",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "version": "5.3",
    }


def kernel_env(workdir):
    return {"PATH": "/usr/bin:/bin", "HOME": str(workdir), "LANG": "C.UTF-8"}


class ForkedProcess:
    """What a test uses of Popen (pid, returncode, poll, wait, send_signal, kill,
    terminate) for a kernel the fork server forked. The server is its parent: it reaps it
    and sends its exit status on this kernel's status socket, and it sends the signals."""

    def __init__(self, status, args):
        self.args = args
        self.returncode = None
        self._status = status
        reply = self._recv(READ_TIMEOUT_S)
        if reply is None or "pid" not in reply:
            status.close()
            raise OSError(f"the fork server did not fork a kernel: {reply}")
        self.pid = reply["pid"]

    def _recv(self, timeout):
        """The next message from the server, or None if none came within timeout."""
        data = b""
        if self._status.fileno() >= 0:  # (closed: the server is gone)
            self._status.settimeout(timeout)
            try:
                data = self._status.recv(MAX_MESSAGE)
            except (BlockingIOError, TimeoutError):
                return None
        if not data:
            self._status.close()
            raise ChildProcessError(f"the fork server exited before kernel {self.args} did")
        msg = json.loads(data)
        if "exit" in msg:
            self.returncode = os.waitstatus_to_exitcode(msg["exit"])
            self._status.close()  # nothing more to learn or to ask
        return msg

    def poll(self):
        while self.returncode is None and self._recv(0) is not None:
            pass
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._recv(left)
        return self.returncode

    def send_signal(self, sig):
        if self.poll() is not None:
            return  # as Popen: never a signal to a pid that may be another process's now
        self._status.send(json.dumps({"signal": int(sig)}).encode())
        while self.returncode is None:
            msg = self._recv(READ_TIMEOUT_S)
            if msg is None:
                raise TimeoutError(f"the fork server did not answer a signal for {self.args}")
            if "error" in msg:
                raise OSError(msg["error"])
            if "signaled" in msg:
                return

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """This pytest process's kernel_fork_server.py, started on first use. It exits when
    its control socket closes: at this process's exit, or when it is killed."""

    def __init__(self):
        self._home = tempfile.mkdtemp(prefix="kennel-fork-server-")
        control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [PYTHON, "-I", str(FORK_SERVER), str(KERNEL), str(theirs.fileno())],
                cwd=self._home, stdin=subprocess.DEVNULL, env=kernel_env(self._home),
                pass_fds=[theirs.fileno()])
        except OSError:
            control.close()
            shutil.rmtree(self._home, ignore_errors=True)
            raise
        finally:
            theirs.close()
        self.control = control
        self._owner = os.getpid()
        atexit.register(self.close)
        control.settimeout(SERVER_START_TIMEOUT_S)
        try:
            ready = control.recv(MAX_MESSAGE)
        except TimeoutError:
            ready = b""
        if not ready:
            self.close()
            raise OSError(f"the fork server did not start (exit status {self.proc.returncode})")

    def spawn(self, args, cwd, env, pipe_fd):
        """`python3 -I KERNEL ARGS`, forked: a ForkedProcess. Its fd 3 is pipe_fd, its stdout
        and stderr this process's, its stdin /dev/null (the server's)."""
        status, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        request = {"args": args, "cwd": str(cwd), "env": env}
        try:
            socket.send_fds(self.control, [json.dumps(request).encode()],
                            [pipe_fd, theirs.fileno(), 1, 2])
        except OSError:
            status.close()
            raise
        finally:
            theirs.close()
        return ForkedProcess(status, [PYTHON, "-I", str(KERNEL), *args])

    def close(self):
        if os.getpid() != self._owner:
            return  # a test's fork of this process: the server is its parent's
        self.control.close()
        if self.proc.returncode is None:
            try:
                self.proc.wait(timeout=READ_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self._home, ignore_errors=True)


_fork_server = None  # the ForkServer, once started; False if it could not be


def fork_server():
    """This process's ForkServer, started now if need be; None if it cannot be (a warning
    says why once, and kernels start cold)."""
    global _fork_server
    if _fork_server is None:
        try:
            _fork_server = ForkServer()
        except OSError as e:
            warnings.warn(f"kernels start cold: {e}")
            _fork_server = False
    elif _fork_server and _fork_server.proc.poll() is not None:
        warnings.warn("kernels start cold from now on: the fork server exited with status "
                      f"{_fork_server.proc.returncode}")
        _fork_server.close()
        _fork_server = False
    return _fork_server or None


class KernelProcess:
    def __init__(self, workdir, cold=None):
        """cold: start the kernel cold (True) or forked (False); None: forked unless
        KENNEL_KERNEL_COLD=1."""
        self.sock, child = socket.socketpair()
        self.sock.settimeout(READ_TIMEOUT_S)
        if cold is None:
            cold = os.environ.get("KENNEL_KERNEL_COLD") == "1"
        server = None if cold else fork_server()
        args = ["--pipe-fd", "3"]
        self.proc = None
        if server is not None:
            try:
                self.proc = server.spawn(args, workdir, kernel_env(workdir), child.fileno())
            except OSError as e:
                warnings.warn(f"this kernel starts cold: {e}")
        if self.proc is None:
            child_fd = child.fileno()
            # kenneld hands the kernel its end as fd 3; dup2 in the child does the same.
            self.proc = subprocess.Popen(
                [PYTHON, "-I", str(KERNEL), *args],
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                env=kernel_env(workdir),
                close_fds=False,
                preexec_fn=lambda: os.dup2(child_fd, 3),
            )
        child.close()
        self._buf = b""
        self.reply_metadata = None
        self.logs = []  # the text of each log frame (the kernel's diagnostics), in order
        self.buffers = []  # (msg_type, [bytes]) of each iopub message that had buffers
        self.iopub_metadata = []  # (msg_type, metadata) of each that had metadata
        op, parts = self.recv_frame()
        assert op["op"] == "hello", op
        self.hello_op, self.hello = op, json.loads(parts[0])

    # -- framing ---------------------------------------------------------------

    def _read_exact(self, n):
        while len(self._buf) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise EOFError("kernel closed the pipe")
            self._buf += chunk
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def recv_frame(self):
        """Return (op header, [remaining parts as bytes])."""
        (size,) = _U32.unpack(self._read_exact(4))
        body = self._read_exact(size)
        (nparts,) = _U32.unpack_from(body, 0)
        parts, pos = [], 4
        for _ in range(nparts):
            (plen,) = _U32.unpack_from(body, pos)
            parts.append(body[pos + 4:pos + 4 + plen])
            pos += 4 + plen
        assert pos == len(body), "parts do not fill the body"
        return json.loads(parts[0]), parts[1:]

    def send_frame(self, parts):
        self.sock.sendall(encode_frame(parts))

    # -- messages --------------------------------------------------------------

    def send_request(self, msg_type, content, channel="shell", buffers=()):
        header = make_header(msg_type)
        self.send_frame([jdump({"op": "request", "channel": channel}), jdump(header),
                         jdump({}), jdump({}), jdump(content), *buffers])
        return header["msg_id"]

    def collect(self, msg_id, on_stdin=None):
        """Read until the reply to msg_id; return (reply op, reply content, iopub).

        iopub is the list of (msg_type, content) published meanwhile, in order; the binary
        buffers of each are appended to self.buffers, as (msg_type, [bytes]).
        on_stdin(content) is called for each input_request. The reply's metadata is
        kept in self.reply_metadata. For a comm message, which has no reply, the
        reply op is the kernel's `done` and the content None.
        """
        iopub = []
        while True:
            op, parts = self.recv_frame()
            if op["op"] == "iopub":
                metadata = json.loads(parts[0])
                if metadata:  # only comm messages carry any
                    assert op["msg_type"].startswith("comm_"), (op, metadata)
                    self.iopub_metadata.append((op["msg_type"], metadata))
                iopub.append((op["msg_type"], json.loads(parts[1])))
                if parts[2:]:
                    self.buffers.append((op["msg_type"], parts[2:]))
            elif op["op"] == "done":
                assert op["parent_msg_id"] == msg_id, (op, msg_id)
                return op, None, iopub
            elif op["op"] == "log":
                self.logs.append(op["text"])
            elif op["op"] == "stdin":
                assert op["msg_type"] == "input_request"
                assert on_stdin is not None, "unexpected input_request"
                on_stdin(json.loads(parts[1]))
            elif op["op"] == "reply":
                assert op["parent_msg_id"] == msg_id, (op, msg_id)
                self.reply_metadata = json.loads(parts[0])
                if op["msg_type"] != "execute_reply":  # only that one carries metrics
                    assert self.reply_metadata == {}
                return op, json.loads(parts[1]), iopub
            else:
                raise AssertionError(f"unexpected op {op}")

    def request(self, msg_type, content):
        op, reply, _ = self.collect(self.send_request(msg_type, content))
        assert op["msg_type"] == msg_type.replace("_request", "_reply")
        return reply

    def execute(self, code, on_stdin=None, **fields):
        content = {"code": code, "silent": False, "store_history": True,
                   "user_expressions": {}, "allow_stdin": on_stdin is not None,
                   "stop_on_error": True}
        content.update(fields)
        msg_id = self.send_request("execute_request", content)
        op, reply, iopub = self.collect(msg_id, on_stdin)
        assert op["msg_type"] == "execute_reply"
        return reply, iopub

    def comm(self, msg_type, content, buffers=()):
        """Send a comm message (comm_open, comm_msg, comm_close) and read until the kernel
        is done with it; what it published meanwhile, as (msg_type, content)."""
        op, _, iopub = self.collect(self.send_request(msg_type, content, buffers=buffers))
        assert op["op"] == "done", op
        return iopub

    def reply_input(self, value):
        self.send_request("input_reply", {"value": value}, channel="stdin")

    def wait(self, timeout=READ_TIMEOUT_S):
        return self.proc.wait(timeout=timeout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.sock.close()


def streams(iopub, name=None):
    """All stream text in iopub (of one stream if name is given), joined."""
    return "".join(c["text"] for t, c in iopub
                   if t == "stream" and (name is None or c["name"] == name))
