"""A real kenneld for the integration tests: start it, talk to its manager socket, run
bin/kennel against it, stop it, and find processes it may have left behind."""

import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import kennel_shared
import zmq
from jupyter_client.session import Session

ROOT = Path(__file__).resolve().parents[2]
KENNELD = ROOT / "bin" / "kenneld"
KENNEL = ROOT / "bin" / "kennel"
PYTHON = "/usr/bin/python3"
CALL_TIMEOUT_S = 10
START_TIMEOUT_S = 10
STOP_TIMEOUT_S = 10


def _stat(pid):
    """(state, ppid, starttime) from /proc/PID/stat, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1]), int(fields[19])


def pid_alive(pid, starttime=None):
    st = _stat(pid)
    return st is not None and st[0] != "Z" and (starttime is None or st[2] == starttime)


def descendants(root_pid):
    """{pid: starttime} of every live process below root_pid."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(entry)
            if st and st[0] != "Z":
                children.setdefault(st[1], []).append((int(entry), st[2]))
    found, todo = {}, [root_pid]
    while todo:
        for pid, start in children.get(todo.pop(), []):
            found[pid] = start
            todo.append(pid)
    return found


def end_process(proc, grace_s=10):
    """End a process a test started, and what it started: SIGTERM, SIGKILL after grace_s,
    then SIGKILL to whatever was below it just before that is still alive."""
    below = descendants(proc.pid)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    for pid, start in below.items():
        if pid_alive(pid, start):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def children(pid):
    """The pids of pid's children (its main thread's: kenneld's kernels are)."""
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def session_processes(kenneld_pid, zygote_pid, named):
    """{pid: starttime} of what runs below kenneld for its sessions: everything but the
    zygote, the pool's kernels (kenneld's children that named, a set of (pid, starttime) that
    manager replies gave as kernel_pid, does not hold) and what runs below those."""
    tree = descendants(kenneld_pid)
    kept = set()
    for child in children(kenneld_pid):
        if child == zygote_pid or (child, tree.get(child)) not in named:
            kept |= {child} | set(descendants(child))
    return {pid: start for pid, start in tree.items() if pid not in kept}


def processes_in(*directories):
    """Live processes whose working directory or command line is inside one of the
    directories: an unsandboxed kernel runs in STATE/sessions/ID/workspace, kennel-init gets
    it as --workspace, a kennel launcher as --state-dir. (One pass over /proc for all of
    them: a shared kenneld's teardown asks about every session's directory, every 10 ms.)"""
    found = []
    prefixes = tuple(str(d).rstrip("/") + "/" for d in directories)
    if not prefixes:
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid() or not pid_alive(entry):
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd") + "/"
        except OSError:
            cwd = ""
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
        except OSError:
            args = []
        if cwd.startswith(prefixes) or any((a + "/").startswith(prefixes) for a in args):
            found.append(int(entry))
    return found


class ManagerError(AssertionError):
    pass


class Kenneld:
    def __init__(self, state_dir, transport, log_path, args=()):
        self.state_dir = Path(state_dir)
        self.transport = transport
        self.args = list(args)
        self.log_path = log_path
        self.log_from = 0  # where log() starts reading (handed_to_test)
        self.turns = 0  # tests it was handed to, when shared
        self.proc = None
        self.kernels = set()  # every kernel_pid a manager reply named: {(pid, starttime)}
        self.tree = {}  # kenneld's descendants just before it was stopped: {pid: starttime}
        self._ctx = zmq.Context()
        self._sock = None
        self._session = None

    def successor(self, args=()):
        """The next kenneld on this one's state directory and transport (not started yet), its
        log beside this one's: what a restart starts."""
        return Kenneld(self.state_dir, self.transport, str(self.state_dir) + "-2.log", args)

    @property
    def kernel_pids(self):
        return {pid for pid, _ in self.kernels}

    @property
    def info_path(self):
        return self.state_dir / "kenneld.json"

    starts = 0  # kennelds started by this process (KENNEL_CPU_LOG prints them per file)

    def start(self):
        Kenneld.starts += 1
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [str(KENNELD), "--state-dir", str(self.state_dir), "--transport", self.transport,
             "--log-level", "debug", *kennel_shared.preload_args(self.args)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.info_path.exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"kenneld exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"kenneld.json did not appear:\n{self.log()}")
            time.sleep(0.02)
        self.info = json.loads(self.info_path.read_text())
        mgr = self.info["manager"]
        self._session = Session(key=mgr["key"].encode(), signature_scheme=mgr["signature_scheme"],
                                username="itest")
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.linger = 0
        if mgr.get("curve_publickey"):  # kenneld --curve: its manager admits this pair only
            self._sock.curve_serverkey = mgr["curve_publickey"].encode()
            self._sock.curve_publickey = mgr["curve_publickey"].encode()
            self._sock.curve_secretkey = mgr["curve_secretkey"].encode()
        self._sock.connect(mgr["endpoint"])

    def log(self, tail=4000):
        """The log's last `tail` characters (for failure messages), or all of it (None: for
        what must be found in it, which debug lines of polling may have pushed far back).
        A shared kenneld's log starts where the test's turn began (handed_to_test)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_from)
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return text if tail is None else text[-tail:]

    def handed_to_test(self):
        """A shared kenneld, handed to its next test: what that test finds in the log is what
        happened in its turn, never an earlier test's line (the first test also sees the
        start)."""
        if self.turns:
            try:
                self.log_from = os.path.getsize(self.log_path)
            except OSError:
                pass
        self.turns += 1

    # -- manager API -----------------------------------------------------------------

    def request(self, msg_type, content=None, timeout=CALL_TIMEOUT_S):
        """Send one manager request; return the whole reply message (verified)."""
        sent = self._session.send(self._sock, msg_type, content if content is not None else {})
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._sock.poll(int(left * 1000)):
                raise AssertionError(f"no {msg_type} reply from kenneld in {timeout} s")
            frames = self._sock.recv_multipart()
            _, frames = self._session.feed_identities(frames)
            reply = self._session.deserialize(frames)  # checks the signature
            if reply["parent_header"].get("msg_id") == sent["header"]["msg_id"]:
                break
        sessions = reply["content"].get("sessions")
        for s in [reply["content"].get("session")] + (sessions if isinstance(sessions, list) else []):
            if isinstance(s, dict) and s.get("kernel_pid"):
                # With its start time, and only while it is kenneld's child (kernels are):
                # pids are reused, and a kernel that is gone is no kernel to check or kill.
                st = _stat(s["kernel_pid"])
                if st and st[1] == self.proc.pid:
                    self.kernels.add((s["kernel_pid"], st[2]))
        return reply

    def call(self, msg_type, content=None):
        """The reply's content."""
        return self.request(msg_type, content)["content"]

    def ok(self, msg_type, content=None):
        """The reply's content, which must have status ok."""
        reply = self.call(msg_type, content)
        if reply.get("status") != "ok":
            raise ManagerError(f"{msg_type}: {reply}")
        return reply

    def create(self, name=None, **extra):
        content = dict(extra)
        if name is not None:
            content["name"] = name
        return self.ok("create_request", content)["session"]

    def sessions(self):
        return self.ok("list_request")["sessions"]

    # -- CLI -----------------------------------------------------------------------------

    def cli(self, *args, input=None, timeout=20, cwd=None):
        return run_kennel("--state-dir", str(self.state_dir), *args, input=input, timeout=timeout,
                          cwd=cwd)

    # -- shutdown ------------------------------------------------------------------------

    def stop(self):
        if self._sock is not None:
            self._sock.close(linger=0)
        self._ctx.term()
        if self.proc is None or self.proc.poll() is not None:
            return
        # Everything kenneld started, to check after it is gone (see survivors()).
        self.tree = descendants(self.proc.pid)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError(f"kenneld ignored SIGTERM for {STOP_TIMEOUT_S} s")

    def survivors(self):
        """Processes kenneld started that are still alive (after stop())."""
        left = {pid for pid, start in self.kernels if pid_alive(pid, start)}
        left |= {pid for pid, start in self.tree.items() if pid_alive(pid, start)}
        left |= set(processes_in(self.state_dir))
        return sorted(left)


def run_kennel(*args, input=None, timeout=20, env=None, cwd=None):
    return subprocess.run([str(KENNEL), *args], input=input, capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)


def new_kenneld(transport="tcp", args=()):
    """(root, Kenneld) on a fresh state directory ROOT/state; call start() on it."""
    # A short path: ipc socket paths (STATE/sessions/<uuid>/k-N) must fit in 107 bytes.
    root = tempfile.mkdtemp(prefix="kn-", dir="/tmp")
    k = Kenneld(os.path.join(root, "state"), transport, os.path.join(root, "kenneld.log"), args)
    return root, k
