"""Drives the real kennel kernel over a socketpair, speaking protocol/kernel-pipe.md.

KernelProcess plays kenneld's part: it starts kennel_kernel.py with its end of the pipe
on fd 3, builds request headers, and collects what the kernel sends back. Every read
has a timeout, and the `kernel` fixture kills the process even when a test fails.
"""

import datetime
import json
import os
import socket
import struct
import subprocess
import uuid
from pathlib import Path


PYTHON = "/usr/bin/python3"
KERNEL = Path(__file__).resolve().parents[2] / "kernels" / "python" / "kennel_kernel.py"
READ_TIMEOUT_S = 10
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


class KernelProcess:
    def __init__(self, workdir):
        self.sock, child = socket.socketpair()
        self.sock.settimeout(READ_TIMEOUT_S)
        child_fd = child.fileno()
        # kenneld hands the kernel its end as fd 3; dup2 in the child does the same.
        self.proc = subprocess.Popen(
            [PYTHON, "-I", str(KERNEL), "--pipe-fd", "3"],
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin", "HOME": str(workdir), "LANG": "C.UTF-8"},
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
