"""A real bin/kennel-gateway for the integration tests, in front of a test's kenneld, and the
small clients the tests drive it with: urllib for REST, Debian's python3-websocket
(websocket-client) for the WebSockets. Every wait is bounded; the gateway is ended by pid."""

import json
import os
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import websocket

from .kenneld_proc import ROOT, end_process

GATEWAY = ROOT / "bin" / "kennel-gateway"
START_TIMEOUT_S = 30
REPLY_TIMEOUT_S = 20
V1 = "v1.kernel.websocket.jupyter.org"

TOKEN_A = "tok-alice-" + "a" * 22
TOKEN_B = "tok-bob-" + "b" * 24


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_tokens(path, text=None, mode=0o600):
    path.write_text(text if text is not None else f"{TOKEN_A} alice\n{TOKEN_B} bob\n")
    os.chmod(path, mode)
    return path


class Gateway:
    def __init__(self, kenneld, tmp_path, args=(), cert=None, key=None):
        self.port = free_port()
        self.tokens = write_tokens(tmp_path / "tokens")
        self.log_path = tmp_path / "gateway.log"
        self.scheme = "https" if cert else "http"
        cmd = [str(GATEWAY), "--state-dir", str(kenneld.state_dir), "--listen",
               f"127.0.0.1:{self.port}", "--tokens", str(self.tokens), "--log-level", "debug",
               *args]
        if cert:
            cmd += ["--cert", str(cert), "--key", str(key)]
        if os.environ.get("KENNEL_TEST_GATEWAY_VALGRIND"):  # a debugging aid, off by default
            cmd = ["valgrind", "-q", "--leak-check=full", "--errors-for-leak-kinds=definite",
                   f"--log-file={tmp_path}/valgrind-%p.log"] + cmd
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                assert self.proc.poll() is None, \
                    f"kennel-gateway exited with {self.proc.returncode}:\n{self.log()}"
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                        break
                except OSError:
                    assert time.monotonic() < deadline, \
                        f"kennel-gateway did not listen:\n{self.log()}"
                    time.sleep(0.05)
        except BaseException:
            self.stop()  # it is not handed to the test: end it here
            raise

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        end_process(self.proc, 10)

    # -- REST -----------------------------------------------------------------------------

    def url(self, path):
        return f"{self.scheme}://127.0.0.1:{self.port}{path}"

    def request(self, method, path, body=None, token=TOKEN_A, headers=None, context=None):
        """(status, parsed JSON or text) of one request."""
        data = json.dumps(body).encode() if body is not None else None
        return self.raw_request(method, path, data, token, headers, context)

    def raw_request(self, method, path, data, token=TOKEN_A, headers=None, context=None):
        """request() with the body's bytes as they are (None: no body). The response's
        headers are left in self.last_headers."""
        req = urllib.request.Request(self.url(path), data=data, method=method)
        if token:
            req.add_header("Authorization", f"token {token}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=REPLY_TIMEOUT_S, context=context) as r:
                status, raw, self.last_headers = r.status, r.read(), r.headers
        except urllib.error.HTTPError as e:
            status, raw, self.last_headers = e.code, e.read(), e.headers
        ctype = self.last_headers.get("content-type", "")
        if "json" in ctype and raw:
            return status, json.loads(raw)
        return status, raw.decode(errors="replace")

    def start_kernel(self, name=None, token=TOKEN_A, spec="python3"):
        body = {"name": spec}
        if name:
            body["env"] = {"KERNEL_SESSION_NAME": name}
        status, model = self.request("POST", "/api/kernels", body, token=token)
        assert status == 201, (status, model)
        return model

    # -- WebSockets -----------------------------------------------------------------------

    def ws_url(self, kernel_id, session_id=None, token=None):
        scheme = "wss" if self.scheme == "https" else "ws"
        q = []
        if session_id:
            q.append(f"session_id={session_id}")
        if token:
            q.append(f"token={token}")
        return f"{scheme}://127.0.0.1:{self.port}/api/kernels/{kernel_id}/channels" + \
            ("?" + "&".join(q) if q else "")

    def connect(self, kernel_id, session_id=None, token=TOKEN_A, v1=False, sslopt=None):
        ws = websocket.create_connection(
            self.ws_url(kernel_id, session_id), timeout=REPLY_TIMEOUT_S,
            header=[f"Authorization: token {token}"] if token else [],
            subprotocols=[V1] if v1 else None, sslopt=sslopt)
        return Channels(ws, session_id or str(uuid.uuid4()), v1)


def v1_encode(channel, msg, buffers=()):
    parts = [channel.encode()] + [json.dumps(msg.get(k, {})).encode() for k in
                                  ("header", "parent_header", "metadata", "content")] + list(buffers)
    n = len(parts) + 1
    offsets = [8 * (n + 1)]
    for p in parts:
        offsets.append(offsets[-1] + len(p))
    return struct.pack(f"<{n + 1}Q", n, *offsets) + b"".join(parts)


def v1_decode(data):
    n = struct.unpack_from("<Q", data)[0]
    offsets = struct.unpack_from(f"<{n}Q", data, 8)
    parts = [data[offsets[i]:offsets[i + 1]] for i in range(n - 1)]
    msg = {k: json.loads(parts[i + 1]) for i, k in
           enumerate(("header", "parent_header", "metadata", "content"))}
    msg["channel"] = parts[0].decode()
    msg["buffers"] = parts[5:]
    return msg


class Channels:
    """One WebSocket to a kernel, speaking Jupyter Server's JSON frames or the v1 binary
    subprotocol."""

    def __init__(self, ws, session_id, v1):
        self.ws, self.session_id, self.v1 = ws, session_id, v1

    def message(self, msg_type, content, channel="shell"):
        return {"header": {"msg_id": uuid.uuid4().hex, "msg_type": msg_type,
                           "session": self.session_id, "username": "test", "version": "5.3",
                           "date": "2026-01-01T00:00:00.000000Z"},
                "parent_header": {}, "metadata": {}, "content": content, "channel": channel,
                "buffers": []}

    def send(self, msg_type, content, channel="shell"):
        msg = self.message(msg_type, content, channel)
        if self.v1:
            self.ws.send_binary(v1_encode(channel, msg))
        else:
            self.ws.send(json.dumps(msg))
        return msg["header"]["msg_id"]

    def execute(self, code):
        return self.send("execute_request", {"code": code, "silent": False,
                                             "store_history": True, "user_expressions": {},
                                             "allow_stdin": False, "stop_on_error": True})

    def recv(self, timeout=REPLY_TIMEOUT_S):
        self.ws.settimeout(timeout)
        op, data = self.ws.recv_data()
        if op == websocket.ABNF.OPCODE_BINARY:
            assert self.v1, "a binary frame on a JSON WebSocket"
            return v1_decode(data)
        return json.loads(data)

    def run(self, code, timeout=REPLY_TIMEOUT_S):
        """(reply, [iopub messages of the cell]) once the reply and the idle have come."""
        msg_id = self.execute(code)
        return self.collect(msg_id, timeout)

    def collect(self, msg_id, timeout=REPLY_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        reply, iopub, idle = None, [], False
        while reply is None or not idle:
            left = deadline - time.monotonic()
            assert left > 0, f"no reply and idle for {msg_id}: {reply} {iopub}"
            m = self.recv(left)
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            if m["channel"] == "shell":
                reply = m
            elif m["channel"] == "iopub":
                iopub.append(m)
                if m["header"]["msg_type"] == "status" and \
                        m["content"]["execution_state"] == "idle":
                    idle = True
        return reply, iopub

    def close(self):
        self.ws.close()


def stream_text(iopub):
    return "".join(m["content"]["text"] for m in iopub if m["header"]["msg_type"] == "stream")


def result_text(iopub):
    for m in iopub:
        if m["header"]["msg_type"] == "execute_result":
            return m["content"]["data"]["text/plain"]
    return None
