"""Small helpers over jupyter_client's BlockingKernelClient; every wait has a timeout."""

import queue
import socket
import struct
import time

import pytest
from jupyter_client import BlockingKernelClient

REPLY_TIMEOUT_S = 10
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Cell:
    """What one execute_request produced: its reply and its iopub messages (busy..idle)."""

    def __init__(self, msg_id, reply, iopub):
        self.msg_id = msg_id
        self.reply = reply
        self.content = reply["content"]
        self.iopub = iopub

    @property
    def types(self):
        return [m["msg_type"] for m in self.iopub]

    @property
    def outputs(self):
        return [m for m in self.iopub if m["msg_type"] not in ("status", "execute_input")]

    def streams(self):
        """[(name, text)] with adjacent chunks of one stream joined."""
        runs = []
        for m in self.iopub:
            if m["msg_type"] != "stream":
                continue
            name, text = m["content"]["name"], m["content"]["text"]
            if runs and runs[-1][0] == name:
                runs[-1] = (name, runs[-1][1] + text)
            else:
                runs.append((name, text))
        return runs

    def stream(self, name):
        return "".join(t for n, t in self.streams() if n == name)

    def of_type(self, msg_type):
        return [m for m in self.iopub if m["msg_type"] == msg_type]

    @property
    def result(self):
        """text/plain of the single execute_result, or None."""
        results = self.of_type("execute_result")
        assert len(results) <= 1, results
        return results[0]["content"]["data"]["text/plain"] if results else None


def _get(getter, deadline, what):
    left = deadline - time.monotonic()
    if left <= 0:
        raise AssertionError(f"timed out waiting for {what}")
    try:
        return getter(timeout=left)
    except queue.Empty:
        raise AssertionError(f"timed out waiting for {what}") from None


def collect_iopub(kc, msg_id, timeout=REPLY_TIMEOUT_S):
    """iopub messages whose parent is msg_id, up to and including its status idle."""
    deadline = time.monotonic() + timeout
    msgs = []
    while True:
        m = _get(kc.get_iopub_msg, deadline, f"iopub idle for {msg_id}")
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        msgs.append(m)
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            return msgs


def _reply(getter, channel, msg_id, timeout):
    deadline = time.monotonic() + timeout
    while True:
        m = _get(getter, deadline, f"{channel} reply to {msg_id}")
        if m["parent_header"].get("msg_id") == msg_id:
            return m


def shell_reply(kc, msg_id, timeout=REPLY_TIMEOUT_S):
    return _reply(kc.get_shell_msg, "shell", msg_id, timeout)


def control_reply(kc, msg_id, timeout=REPLY_TIMEOUT_S):
    return _reply(kc.get_control_msg, "control", msg_id, timeout)


def send_control(kc, msg_type, content=None):
    msg = kc.session.msg(msg_type, content or {})
    kc.control_channel.send(msg)
    return msg["header"]["msg_id"]


def control(kc, msg_type, content=None, timeout=REPLY_TIMEOUT_S):
    """Send a control request and return its reply."""
    return control_reply(kc, send_control(kc, msg_type, content), timeout)


def finish(kc, msg_id, timeout=REPLY_TIMEOUT_S):
    """The Cell for an execute_request already sent."""
    reply = shell_reply(kc, msg_id, timeout)
    iopub = collect_iopub(kc, msg_id, timeout)
    return Cell(msg_id, reply, iopub)


def run(kc, code, timeout=REPLY_TIMEOUT_S, **kwargs):
    """Execute code and return its Cell."""
    return finish(kc, kc.execute(code, **kwargs), timeout)


def shell_request(kc, method, *args, timeout=REPLY_TIMEOUT_S, **kwargs):
    """Call kc.<method> (complete, inspect, ...) and return the reply content."""
    msg_id = getattr(kc, method)(*args, **kwargs)
    return shell_reply(kc, msg_id, timeout)["content"]


def wait_for(predicate, timeout=REPLY_TIMEOUT_S, what="condition", interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def wait_iopub(kc, msg_id, msg_type, timeout=REPLY_TIMEOUT_S):
    """Skip iopub messages until one of msg_type with parent msg_id; return it."""
    deadline = time.monotonic() + timeout
    while True:
        m = _get(kc.get_iopub_msg, deadline, f"{msg_type} for {msg_id}")
        if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == msg_type:
            return m


def wait_ready(kc, timeout=REPLY_TIMEOUT_S):
    """What kc.wait_for_ready() checks, without its fixed 0.2-0.4 s of heartbeat polling and
    iopub flushing (a quarter of the suite's run time over ~70 clients): send kernel_info
    until its status shows up on iopub, which proves the SUB socket has joined. Returns the
    kernel_info_reply."""
    deadline = time.monotonic() + timeout
    while True:
        msg_id = kc.kernel_info()
        reply = shell_reply(kc, msg_id, max(deadline - time.monotonic(), 0.01))
        try:
            wait_iopub(kc, msg_id, "status", min(0.25, max(deadline - time.monotonic(), 0.01)))
            return reply
        except AssertionError:
            if time.monotonic() > deadline:
                raise


def kennel_kernelspec(kenneld, tmp_path, monkeypatch):
    """Installs the kennel kernelspec (for kenneld) under tmp_path, where this test's Jupyter
    front ends look for kernelspecs (JUPYTER_PATH) and write connection files."""
    prefix = tmp_path / "prefix"
    assert kenneld.cli("kernelspec", "install", "--prefix", str(prefix)).returncode == 0
    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))


def close_client(kc):
    """Stops kc's channels and ends the ZeroMQ context it made for itself. jupyter_client ends
    that context only when the client is garbage-collected, and a client sits in reference
    cycles: a worker running hundreds of tests would hold each one's I/O thread and sockets
    (about five descriptors) until a collection, and has run out of descriptors that way."""
    kc.stop_channels()
    if kc._created_context and not kc.context.closed:
        kc.context.destroy(linger=0)


def make_client(connection_file, ready=True):
    """A BlockingKernelClient on connection_file, its channels started; ready: wait_ready()."""
    kc = BlockingKernelClient()
    kc.load_connection_file(str(connection_file))
    kc.start_channels()
    if ready:
        try:
            wait_ready(kc)
        except BaseException:
            close_client(kc)
            raise
    return kc


def png_size(data):
    """(width, height) of PNG bytes, after checking the signature and the IHDR chunk."""
    assert data[:8] == PNG_SIGNATURE, data[:16]
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13, (length, kind)
    return struct.unpack(">II", data[16:24])


def skip_without_disk_caps(kenneld):
    """Skip the test where kenneld cannot cap workspaces (not root, no loop devices)."""
    if not kenneld.ok("stats_request")["sandbox"]["disk"]["caps"]:
        pytest.skip("no workspace caps on this machine")


def squat(port):
    """A socket listening on 127.0.0.1:port, as another program that took a session's port
    while no kenneld ran would hold it (SO_REUSEADDR: the port may still be in TIME_WAIT).
    The caller closes it."""
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
    except BaseException:
        s.close()
        raise
    return s
