"""Helpers of the hostile tests: a real kenneld with a manager client, raw ZeroMQ clients of a
session, and a health check that a session still answers afterwards."""
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import kennel_shared
import zmq
from jupyter_client.session import Session

# The process helpers the integration suite uses (a plain module there: no package import).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from kenneld_proc import _stat, session_processes  # noqa: E402
from kenneld_proc import pid_alive as alive  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KENNELD = os.path.join(ROOT, "bin", "kenneld")


class Kenneld:
    starts = 0  # kennelds started by this process (KENNEL_CPU_LOG prints them per file)

    def __init__(self, state_dir, *args, prefix=(), env=None, binary=KENNELD):
        """prefix: a command kenneld runs under (e.g. setpriv, to run it as another user);
        binary: the kenneld to run (kennel-init must be beside it)."""
        Kenneld.starts += 1
        self.state_dir = state_dir
        self.args = args
        self.log_path = os.path.join(os.path.dirname(state_dir), "kenneld.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([*prefix, binary, "--state-dir", state_dir,
                                      *kennel_shared.preload_args(args)],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        info_path = os.path.join(state_dir, "kenneld.json")
        deadline = time.monotonic() + 10
        try:
            while not os.path.exists(info_path):
                assert self.proc.poll() is None, "kenneld exited at start"
                assert time.monotonic() < deadline, "kenneld did not write kenneld.json"
                time.sleep(0.02)
        except BaseException:
            self.proc.kill()
            self.proc.wait()
            self.log.close()
            raise
        with open(info_path) as f:
            info = json.load(f)["manager"]
        self.ctx = zmq.Context()
        self.mgr = self.ctx.socket(zmq.DEALER)
        self.mgr.linger = 0
        if info.get("curve_publickey"):  # kenneld --curve: its manager admits this pair only
            self.mgr.curve_serverkey = info["curve_publickey"].encode()
            self.mgr.curve_publickey = info["curve_publickey"].encode()
            self.mgr.curve_secretkey = info["curve_secretkey"].encode()
        self.mgr.connect(info["endpoint"])
        self.mgr_session = Session(key=info["key"].encode(), signature_scheme="hmac-sha256")
        self.kernels = set()  # every kernel_pid a manager reply named: {(pid, starttime)}

    @property
    def kernel_pids(self):
        return {pid for pid, _ in self.kernels}

    def call(self, msg_type, content=None, timeout=10):
        """The reply's content."""
        return self.request(msg_type, content, timeout)["content"]

    def request(self, msg_type, content=None, timeout=10):
        """The whole reply message."""
        sent = self.mgr_session.send(self.mgr, msg_type, content or {})
        deadline = time.monotonic() + timeout
        while True:  # (a reply to an earlier request that timed out is skipped)
            left = deadline - time.monotonic()
            if left <= 0 or not self.mgr.poll(max(1, int(left * 1000))):
                raise TimeoutError(msg_type)
            _, msg = self.mgr_session.feed_identities(self.mgr.recv_multipart())
            msg = self.mgr_session.deserialize(msg)
            if msg["parent_header"].get("msg_id") == sent["header"]["msg_id"]:
                break
        reply = msg["content"]
        sessions = reply.get("sessions")
        for s in [reply.get("session")] + (sessions if isinstance(sessions, list) else []):
            if s and s.get("kernel_pid"):
                # With its start time, and only while it is kenneld's child (kernels are):
                # pids are reused, and a kernel that is gone is no kernel to check or kill.
                st = _stat(s["kernel_pid"])
                if st and st[1] == self.proc.pid:
                    self.kernels.add((s["kernel_pid"], st[2]))
        return msg

    def stop(self):
        self.mgr.close()
        self.ctx.term()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


class Client:
    """Raw sockets to one session, plus a Session for signing with its key."""

    def __init__(self, ctx, conn):
        self.conn = conn
        self.session = Session(key=conn["key"].encode(), signature_scheme="hmac-sha256")
        self.sockets = {}
        for name, kind in (("shell", zmq.DEALER), ("control", zmq.DEALER),
                           ("stdin", zmq.DEALER), ("hb", zmq.REQ), ("iopub", zmq.SUB)):
            s = ctx.socket(kind)
            s.linger = 0
            if kind == zmq.SUB:
                s.setsockopt(zmq.SUBSCRIBE, b"")
            else:
                s.setsockopt(zmq.IDENTITY, self.session.bsession)
            s.connect(f"tcp://{conn['ip']}:{conn[name + '_port']}")
            self.sockets[name] = s

    def request(self, channel, msg_type, content=None, timeout=10):
        """Send and wait for the reply with this parent; returns it, or None on timeout."""
        msg = self.session.send(self.sockets[channel], msg_type, content or {})
        return self.reply_to(channel, msg["header"]["msg_id"], timeout)

    def reply_to(self, channel, msg_id, timeout=10):
        deadline = time.monotonic() + timeout
        sock = self.sockets[channel]
        while time.monotonic() < deadline:
            if not sock.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                return None
            _, frames = self.session.feed_identities(sock.recv_multipart())
            reply = self.session.deserialize(frames)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply
        return None

    def execute(self, code, timeout=20):
        return self.request("shell", "execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True}, timeout)

    def close(self):
        for s in self.sockets.values():
            s.close()


def stop_checked(k):
    """Stop kenneld; kill any kernel it left; assert it exited 0 and left none."""
    rc = k.stop()
    leftovers = [pid for pid, start in k.kernels if alive(pid, start)]
    for pid in leftovers:
        os.kill(pid, signal.SIGKILL)
    assert rc == 0, f"kenneld exited with {rc}"
    assert not leftovers, f"kernels left running: {leftovers}"


RELEASE_TIMEOUT_S = 5


def release_checked(k, kernels_before):
    """Take a shared kenneld back from a test: end every session the test left, and assert
    that kenneld still runs and nothing of those sessions outlives them (within 5 s): no
    kernel a manager reply named during the test, nor anything below kenneld but its zygote
    and its pool (the children of kenneld no reply named). kernels_before: k.kernels when
    the test began."""
    assert k.proc.poll() is None, f"kenneld exited with {k.proc.returncode} during the test"
    sessions = k.call("list_request")["sessions"]  # (which adds their kernels to k.kernels)
    stats = k.call("stats_request")
    zygote = stats.get("spawner", {}).get("zygote_pid")
    doomed = session_processes(k.proc.pid, zygote, k.kernels - kernels_before)
    for s in sessions:
        reply = k.call("end_request", {"session": s["id"]})
        assert reply["status"] == "ok" or reply.get("ename") == "NoSuchSession", reply

    def survivors():
        return sorted(pid for pid, start in doomed.items() if alive(pid, start))

    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    while survivors() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not survivors(), f"processes outlived their ended sessions: {survivors()}"
    assert k.call("list_request")["sessions"] == []


def assert_healthy(client, kenneld, value_code="kennel_marker"):
    """The session answers kernel_info fast and still has its state."""
    t = time.monotonic()
    reply = client.request("control", "kernel_info_request", timeout=5)
    assert reply is not None and reply["content"]["status"] == "ok"
    assert time.monotonic() - t < 1.0
    assert kenneld.proc.poll() is None, "kenneld died"
    r = client.execute(value_code)
    assert r is not None and r["content"]["status"] == "ok", r and r["content"]


def fresh_id():
    return uuid.uuid4().hex
