"""A kennel session from Python: create or attach through kenneld's manager socket, run
cells on the session's shell and iopub sockets, move files through the manager's workspace
file API. See docs/sdk.md, protocol/manager.md and protocol/jupyter.md."""

from __future__ import annotations

import base64
import hmac
import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union

import zmq
from jupyter_client.session import Session as _WireSession

#: How long a manager request may take before KennelError("NoReply").
MANAGER_TIMEOUT_S = 30.0
#: How long a new or attached session may take to answer its first kernel_info.
READY_TIMEOUT_S = 30.0
#: What a cell's reply may take past its deadline: kenneld kills and restarts the kernel.
DEADLINE_GRACE_S = 30.0

# Terminal escapes, as kennel's MCP server strips them (src/mcp.c s_strip): CSI sequences,
# OSC/DCS/SOS/PM/APC strings up to BEL or ESC \, other two-byte escapes, and C0 controls
# other than tab, newline and carriage return.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]?|[\]PX^_].*?(?:\x07|\x1b\\|$)|[ -/]*[0-~]?)"
                   r"|[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f]", re.S)


def strip_ansi(text: str) -> str:
    """text without colour codes, cursor moves and other control characters."""
    return _ANSI.sub("", text)


def default_state_dir() -> str:
    """kenneld's state directory as the kennel CLI finds it: $KENNEL_STATE_DIR, else
    ~/.local/state/kennel."""
    env = os.environ.get("KENNEL_STATE_DIR")
    return env if env else os.path.join(os.path.expanduser("~"), ".local", "state", "kennel")


class KennelError(Exception):
    """A request kenneld refused or did not answer. `ename` is the manager's error name
    (NoSuchSession, BadRequest, BadPath, NoSuchFile, TooLarge, TooManySessions, …) or one
    of the SDK's own: NoKenneld (no kenneld.json), NoReply (a wait ran out), Closed (the
    Session was closed or detached)."""

    def __init__(self, ename: str, evalue: str = ""):
        super().__init__(f"{ename}: {evalue}" if evalue else ename)
        self.ename = ename
        self.evalue = evalue


@dataclass
class File:
    """A workspace file: from `Session.files()` (with mtime), or one a cell created or
    changed (`Execution.files`)."""
    path: str
    size: int
    mtime: Optional[float] = None


@dataclass
class Error:
    """A cell's exception. `traceback` is one string, colour codes stripped."""
    name: str
    value: str
    traceback: str


@dataclass
class Output:
    """One piece of output, as `on_output` receives it while the cell runs. kind is
    "stdout", "stderr", "result" (execute_result), "display" (display_data) or "error";
    text is the stream's text (or the error's clean traceback), data the MIME bundle."""
    kind: str
    text: str = ""
    data: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Execution:
    """Everything one cell produced.

    outcome is kennel's (protocol/jupyter.md): "ok", "error", "timeout", "interrupted",
    "memory", "crashed", "killed", "output_truncated" or "aborted". A failed cell has
    `error`; it is not raised. metrics holds wall_ms, cpu_ms and peak_memory_bytes (cpu and
    memory absent when the kernel died); files are those the cell created or changed."""
    code: str
    outcome: str = ""
    stdout: str = ""
    stderr: str = ""
    results: List[Dict[str, Any]] = field(default_factory=list)
    images: List[bytes] = field(default_factory=list)
    error: Optional[Error] = None
    metrics: Dict[str, Any] = field(default_factory=dict)
    files: List[File] = field(default_factory=list)
    files_deleted: List[str] = field(default_factory=list)
    runtime_digest: Optional[str] = None
    execution_count: Optional[int] = None

    @property
    def ok(self) -> bool:
        """True when the cell ran to its end without an exception."""
        return self.outcome == "ok"

    @property
    def text(self) -> Optional[str]:
        """The text/plain of the cell's value (its execute_result), if it had one."""
        return self._value_text

    _value_text: Optional[str] = field(default=None, repr=False)


class Session:
    """One kennel session.

    Session(name=None, state_dir=None, create=True, **limits): asks kenneld (found through
    STATE/kenneld.json) for the session called `name`, making it if there is none (with
    the given limits: memory, pids, cpu, tmp, disk, timeout, idle, as in protocol/manager.md);
    `create=False` only attaches, and a missing session is KennelError("NoSuchSession").
    `created` says whether this Session made it. Not thread-safe: one thread at a time.

    As a context manager it ends the session on exit if it made it, and detaches from one
    it attached to."""

    def __init__(self, name: Optional[str] = None, state_dir: Optional[str] = None,
                 create: bool = True, **limits: Union[int, float]):
        self.state_dir = state_dir or default_state_dir()
        try:
            with open(os.path.join(self.state_dir, "kenneld.json")) as f:
                mgr = json.load(f)["manager"]
        except (OSError, ValueError, KeyError) as e:
            raise KennelError("NoKenneld", f"no running kenneld in {self.state_dir}: {e}") from None
        self._ctx = zmq.Context()
        self._mgr_wire = _WireSession(key=mgr["key"].encode(),
                                      signature_scheme=mgr["signature_scheme"], username="sdk")
        self._mgr = self._socket(zmq.DEALER, mgr["endpoint"])
        self._closed = False
        try:
            if create:
                content: Dict[str, Any] = {}
                if name is not None:
                    content["name"] = name
                if limits:
                    content["limits"] = limits
                reply = self._manager("create_request", content)
                self.created: bool = bool(reply.get("created"))
            else:
                if name is None:
                    raise KennelError("BadRequest", "create=False needs a session name")
                reply = self._manager("info_request", {"session": name})
                self.created = False
            info = reply["session"]
            self.not_copied: List[str] = []  # a fork's: what fork() could not copy
            # The session's own deadline, read once: run() bounds its wait by it.
            self._timeout = float((info.get("limits") or {}).get("timeout") or 0)
            self.id: str = info["id"]
            self.name: str = info["name"]
            with open(info["connection_file"]) as f:
                conn = json.load(f)
            self._wire = _WireSession(key=conn["key"].encode(),
                                      signature_scheme=conn["signature_scheme"], username="sdk")

            def endpoint(port: str) -> str:
                sep = "-" if conn["transport"] == "ipc" else ":"
                return f"{conn['transport']}://{conn['ip']}{sep}{conn[port]}"

            self._shell = self._socket(zmq.DEALER, endpoint("shell_port"))
            self._control = self._socket(zmq.DEALER, endpoint("control_port"))
            self._iopub = self._socket(zmq.SUB, endpoint("iopub_port"))
            self._iopub.setsockopt(zmq.SUBSCRIBE, b"")
            self._wait_ready(READY_TIMEOUT_S)
        except BaseException:
            self._teardown()
            raise

    # -- plumbing --------------------------------------------------------------------------

    def _socket(self, kind: int, endpoint: str) -> zmq.Socket:
        sock = self._ctx.socket(kind)
        sock.linger = 0
        sock.connect(endpoint)
        return sock

    def _teardown(self) -> None:
        self._closed = True
        self._ctx.destroy(linger=0)

    def _check_open(self) -> None:
        if self._closed:
            raise KennelError("Closed", "this Session was closed or detached")

    def _recv(self, sock: zmq.Socket, wire: _WireSession) -> Dict[str, Any]:
        """One message, its signature checked. Parsed with json alone: jupyter_client's
        deserialize also turns every date string into a datetime, which costs more than
        the rest of a 1+1 round trip's client side."""
        frames = sock.recv_multipart(copy=True)
        try:
            i = frames.index(b"<IDS|MSG>")
        except ValueError:
            raise KennelError("BadMessage", "a message without its <IDS|MSG> delimiter") from None
        sig, parts = frames[i + 1], frames[i + 2:i + 6]
        if len(parts) < 4 or (wire.auth is not None and
                              not hmac.compare_digest(sig, wire.sign(parts))):
            raise KennelError("BadMessage", "a message with a bad signature")
        header, parent, metadata, content = (json.loads(p) for p in parts)
        return {"header": header, "msg_type": header.get("msg_type"), "parent_header": parent,
                "metadata": metadata, "content": content, "buffers": frames[i + 6:]}

    def _request(self, sock: zmq.Socket, wire: _WireSession, msg_type: str,
                 content: Dict[str, Any], timeout: float,
                 buffers: Optional[List[bytes]] = None,
                 metadata: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """Send one request on a DEALER and return its reply (the whole message)."""
        sent = wire.send(sock, msg_type, content, buffers=buffers, metadata=metadata)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sock.poll(int(left * 1000) + 1):
                raise KennelError("NoReply", f"no {msg_type} reply in {timeout:g} s")
            reply = self._recv(sock, wire)
            if reply["parent_header"].get("msg_id") == sent["header"]["msg_id"]:
                return reply

    def _manager(self, msg_type: str, content: Dict[str, Any],
                 buffers: Optional[List[bytes]] = None) -> Dict[str, Any]:
        """A manager request's reply content (its buffers under "_buffers"); a refusal is
        KennelError with the manager's ename."""
        reply = self._request(self._mgr, self._mgr_wire, msg_type, content, MANAGER_TIMEOUT_S,
                              buffers=buffers)
        c = reply["content"]
        if c.get("status") != "ok":
            raise KennelError(c.get("ename", "Error"), c.get("evalue", ""))
        c["_buffers"] = reply.get("buffers") or []
        return c

    def _wait_ready(self, timeout: float) -> None:
        """kernel_info until its status shows on iopub: the SUB socket has joined, so no
        output of the next cell is lost."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise KennelError("NoReply", f"session {self.name} not ready in {timeout:g} s")
            sent = self._wire.send(self._shell, "kernel_info_request", {})
            mid = sent["header"]["msg_id"]
            seen_status = got_reply = False
            until = time.monotonic() + min(max(left, 0.01), 0.5)
            while not (seen_status and got_reply):
                wait = until - time.monotonic()
                if wait <= 0:
                    break
                ready = zmq.select([self._shell, self._iopub], [], [], wait)[0]
                if self._iopub in ready:
                    m = self._recv(self._iopub, self._wire)
                    if m["parent_header"].get("msg_id") == mid and m["msg_type"] == "status":
                        seen_status = True
                if self._shell in ready:
                    m = self._recv(self._shell, self._wire)
                    if m["parent_header"].get("msg_id") == mid:
                        got_reply = True
            if seen_status and got_reply:
                return

    # -- cells -----------------------------------------------------------------------------

    def run(self, code: str, timeout: Optional[float] = None,
            on_output: Optional[Callable[[Output], None]] = None) -> Execution:
        """Run one cell and return its Execution. A failed cell is an Execution with `error`;
        a cell past its deadline (timeout seconds, else the session's) has outcome
        "timeout", and its kernel was restarted by kenneld (its state is gone). on_output
        gets each stream, display, result and error as it arrives. Raises KennelError only
        when no reply comes (NoReply) or the Session is closed."""
        self._check_open()
        metadata = {"kennel": {"timeout": timeout}} if timeout is not None else {}
        content = {"code": code, "silent": False, "store_history": True,
                   "user_expressions": {}, "allow_stdin": False, "stop_on_error": False}
        sent = self._wire.send(self._shell, "execute_request", content, metadata=metadata)
        mid = sent["header"]["msg_id"]
        ex = Execution(code=code)
        limit = timeout if timeout is not None else self._timeout
        deadline = None if not limit else time.monotonic() + limit + DEADLINE_GRACE_S
        reply: Optional[Dict[str, Any]] = None
        idle = False
        poller = zmq.Poller()
        poller.register(self._shell, zmq.POLLIN)
        poller.register(self._iopub, zmq.POLLIN)
        while reply is None or not idle:
            wait = None
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KennelError("NoReply",
                                      f"no execute_reply in {limit + DEADLINE_GRACE_S:g} s")
                wait = int(left * 1000) + 1
            if reply is not None and not idle:
                # The reply is in; the idle that closes the cell's output follows at once,
                # unless it was dropped (a slow client past --max-unread): don't hang on it.
                wait = 2000 if wait is None else min(wait, 2000)
            events = dict(poller.poll(wait))
            if not events:
                if reply is not None:
                    break
                continue
            if self._iopub in events:
                m = self._recv(self._iopub, self._wire)
                if m["parent_header"].get("msg_id") == mid:
                    if m["msg_type"] == "status" and m["content"].get("execution_state") == "idle":
                        idle = True
                    else:
                        self._on_iopub(ex, m, on_output)
            if self._shell in events:
                m = self._recv(self._shell, self._wire)
                if m["parent_header"].get("msg_id") == mid:
                    reply = m
        assert reply is not None
        c, md = reply["content"], reply.get("metadata") or {}
        ex.outcome = md.get("outcome") or ("ok" if c.get("status") == "ok" else "error")
        ex.metrics = md.get("metrics") or {}
        ex.files = [File(f["name"], f.get("size", 0)) for f in md.get("files") or []]
        ex.files_deleted = list(md.get("files_deleted") or [])
        ex.runtime_digest = md.get("runtime_digest")
        ex.execution_count = c.get("execution_count")
        if c.get("status") != "ok" and ex.error is None:
            ex.error = Error(c.get("ename", ""), c.get("evalue", ""),
                             strip_ansi("\n".join(c.get("traceback") or [])))
        return ex

    def _on_iopub(self, ex: Execution, m: Dict[str, Any],
                  on_output: Optional[Callable[[Output], None]]) -> None:
        t, c = m["msg_type"], m["content"]
        out: Optional[Output] = None
        if t == "stream":
            text = c.get("text", "")
            if c.get("name") == "stderr":
                ex.stderr += text
                out = Output("stderr", text)
            else:
                ex.stdout += text
                out = Output("stdout", text)
        elif t in ("execute_result", "display_data"):
            data = c.get("data") or {}
            ex.results.append(data)
            png = data.get("image/png")
            if isinstance(png, str):
                ex.images.append(base64.b64decode(png))
            if t == "execute_result":
                ex._value_text = data.get("text/plain")
            out = Output("result" if t == "execute_result" else "display", data=data)
        elif t == "error":
            ex.error = Error(c.get("ename", ""), c.get("evalue", ""),
                             strip_ansi("\n".join(c.get("traceback") or [])))
            out = Output("error", ex.error.traceback)
        if out is not None and on_output is not None:
            on_output(out)

    def restart(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Restart the session's kernel: its namespace is gone, its workspace kept."""
        self._check_open()
        r = self._request(self._control, self._wire, "shutdown_request", {"restart": True},
                          timeout)
        if r["content"].get("status") != "ok":
            raise KennelError(r["content"].get("ename", "RestartFailed"),
                              r["content"].get("evalue", ""))
        self._wait_ready(timeout)

    # -- the manager -----------------------------------------------------------------------

    def info(self) -> Dict[str, Any]:
        """The session's INFO (protocol/manager.md): state, cells, memory, limits, …"""
        self._check_open()
        return self._manager("info_request", {"session": self.id})["session"]

    def put(self, path: str, data: Union[bytes, str]) -> int:
        """Write data (str as UTF-8) to path in the session's workspace, making missing
        directories. Returns the size written."""
        self._check_open()
        if isinstance(data, str):
            data = data.encode()
        r = self._manager("file_put_request", {"session": self.id, "path": path},
                          buffers=[bytes(data)])
        return int(r.get("size", len(data)))

    def get(self, path: str) -> bytes:
        """The bytes of path in the session's workspace."""
        self._check_open()
        r = self._manager("file_get_request", {"session": self.id, "path": path})
        return bytes(r["_buffers"][0]) if r["_buffers"] else b""

    def files(self) -> List[File]:
        """The workspace's regular files, sorted by path."""
        self._check_open()
        r = self._manager("file_list_request", {"session": self.id})
        return sorted((File(f["path"], f["size"], f.get("mtime")) for f in r["files"]),
                      key=lambda f: f.path)

    def fork(self, name: str, **limits: Union[int, float]) -> "Session":
        """A new session called `name` holding a copy of this one's namespace and workspace
        files (kenneld's fork_request; this session's kernel pickles its state and serves
        on). Its limits are this session's, but for those given (as Session's). The fork
        is the caller's (`created` is True: as a context manager it ends on exit);
        `not_copied` lists the names and files that could not be copied, which its first
        cell is also told on stderr. KennelError: "SessionExists" (the name is taken),
        "SessionBusy" (a cell runs or waits here), "ForkFailed" (the state could not be
        saved), or create's errors."""
        self._check_open()
        content: Dict[str, Any] = {"session": self.id, "name": name}
        if limits:
            content["limits"] = limits
        reply = self._manager("fork_request", content)
        fork = Session(reply["session"]["id"], state_dir=self.state_dir, create=False)
        fork.created = True
        fork.not_copied = list(reply.get("not_copied") or [])
        return fork

    def close(self) -> None:
        """End the session (its kernel stops and its workspace is removed) and let go of it.
        A session someone else already ended is no error."""
        if self._closed:
            return
        try:
            self._manager("end_request", {"session": self.id})
        except KennelError as e:
            if e.ename != "NoSuchSession":
                raise
        finally:
            self._teardown()

    def detach(self) -> None:
        """Let go of the session and leave it running (attach again by name)."""
        if not self._closed:
            self._teardown()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.created:
            self.close()
        else:
            self.detach()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<kennel_client.Session {self.name} ({self.id}) {state}>"
