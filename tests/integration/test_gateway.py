"""kennel-gateway at the protocol level, driven by clients nobody here wrote: urllib for its
REST API and Debian's python3-websocket for its WebSockets (Jupyter Server's JSON frames and
the v1.kernel.websocket.jupyter.org subprotocol), in front of a real kenneld whose manager
is on tcp (the gateway drops to nobody and cannot enter the 0700 state directory)."""

import json
import os
import socket
import subprocess
import time
import uuid

import pytest
import websocket

from .gateway_proc import (GATEWAY, TOKEN_A, TOKEN_B, Gateway, free_port, result_text,
                           stream_text, write_tokens)

MGR = f"tcp://127.0.0.1:{free_port()}"
pytestmark = pytest.mark.parametrize("kenneld", [["--manager", MGR, "--admit-user", "nobody"]], indirect=True)


@pytest.fixture
def gateway(kenneld, tmp_path):
    """A kennel-gateway with two tenants (alice: TOKEN_A, bob: TOKEN_B); at teardown it must
    still be running (no input in a test may end it), then it is ended by pid."""
    started = []

    def start(args=(), **kw):
        d = tmp_path / f"gateway-{len(started)}"
        d.mkdir()
        gw = Gateway(kenneld, d, args, **kw)
        started.append(gw)
        return gw

    yield start
    try:
        for gw in started:
            assert gw.alive(), f"kennel-gateway died:\n{gw.log()}"
    finally:
        for gw in started:
            gw.stop()


@pytest.fixture
def gw(gateway):
    return gateway()


def _closed_with(ch, timeout=10):
    """(code, reason) of the close frame the gateway sends."""
    ch.ws.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            frame = ch.ws.recv_frame()
        except (websocket.WebSocketConnectionClosedException, ConnectionError):
            return None, None
        if frame.opcode == websocket.ABNF.OPCODE_CLOSE:
            data = frame.data
            code = int.from_bytes(data[:2], "big") if len(data) >= 2 else None
            return code, data[2:].decode(errors="replace")
    raise AssertionError("the WebSocket was not closed")


def _refused_upgrade(gw, kernel_id, **kw):
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        gw.connect(kernel_id, **kw)
    return e.value.status_code


def test_token_refused(gw):
    assert gw.request("GET", "/api/kernels", token=None)[0] == 401
    assert gw.request("GET", "/api/kernels", token="x" * 32)[0] == 403
    assert gw.request("GET", "/metrics", token=None)[0] == 401
    status, body = gw.request("GET", "/api/kernelspecs", token=None)
    assert status == 401 and "kernelspecs" not in str(body)
    # ?token= as Jupyter Server takes it
    status, specs = gw.request("GET", f"/api/kernelspecs?token={TOKEN_A}", token=None)
    assert status == 200 and {"kennel", "python3"} <= set(specs["kernelspecs"])
    k = gw.start_kernel()
    assert _refused_upgrade(gw, k["id"], token=None) == 401
    assert _refused_upgrade(gw, k["id"], token="y" * 32) == 403


def test_tokens_file_must_be_private(kenneld, tmp_path):
    tokens = write_tokens(tmp_path / "tokens", mode=0o644)
    r = subprocess.run([str(GATEWAY), "--state-dir", str(kenneld.state_dir), "--listen",
                        f"127.0.0.1:{free_port()}", "--tokens", str(tokens)],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode != 0 and "0600" in r.stderr
    write_tokens(tokens, "short alice\n")
    r = subprocess.run([str(GATEWAY), "--state-dir", str(kenneld.state_dir), "--listen",
                        f"127.0.0.1:{free_port()}", "--tokens", str(tokens)],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode != 0 and "line 1" in r.stderr
    # A certificate without its key (or the other way round) is named, not just refused.
    r = subprocess.run([str(GATEWAY), "--state-dir", str(kenneld.state_dir), "--listen",
                        f"127.0.0.1:{free_port()}", "--tokens", str(tokens),
                        "--cert", str(tmp_path / "cert.pem")],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "--cert and --key go together" in r.stderr, r.stderr


def test_serves_unprivileged(gw):
    """Started as root, what parses HTTP runs as nobody with no_new_privs, its whole
    filesystem an empty directory already removed."""
    if os.geteuid() != 0:
        pytest.skip("the gateway drops privileges only when started as root")
    # A served request first: the port listens from before the drop (connections wait in
    # its backlog, unread, until the child serves, which it does only once it has dropped).
    assert gw.request("GET", "/api")[0] == 200
    with open(f"/proc/{gw.proc.pid}/task/{gw.proc.pid}/children") as f:
        kids = [int(p) for p in f.read().split()]
    assert len(kids) == 1
    status = open(f"/proc/{kids[0]}/status").read()
    uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
    assert set(uids) == {"65534"}, status
    assert "NoNewPrivs:\t1" in status
    root = os.readlink(f"/proc/{kids[0]}/root")
    assert os.path.basename(root).startswith("kennel-gateway-root-") and \
        root.endswith(" (deleted)"), root
    assert os.listdir(f"/proc/{kids[0]}/root") == []
    assert not os.path.exists(root.removesuffix(" (deleted)"))


def test_rest_lifecycle_and_names(gw):
    status, specs = gw.request("GET", "/api/kernelspecs")
    assert status == 200 and specs["default"] == "kennel"
    assert gw.request("GET", "/api/kernelspecs/python3")[0] == 200
    assert gw.request("GET", "/api/kernelspecs/R")[0] == 404
    k = gw.start_kernel("work")
    uuid.UUID(k["id"])
    assert k["name"] == "python3" and k["kennel"]["session"] == "work"
    # The same name is the same kernel: a client comes back to its session.
    assert gw.start_kernel("work")["id"] == k["id"]
    other = gw.start_kernel()
    assert other["id"] != k["id"]
    # A POST that made a kernel names it, as Jupyter Server does; other answers do not.
    assert gw.last_headers["Location"] == f"/api/kernels/{other['id']}"
    status, listed = gw.request("GET", "/api/kernels")
    assert status == 200 and {k["id"], other["id"]} <= {m["id"] for m in listed}
    assert "Location" not in gw.last_headers
    status, got = gw.request("GET", f"/api/kernels/{k['id']}")
    assert status == 200 and got["id"] == k["id"]
    assert gw.request("POST", "/api/kernels", {"name": "R"})[0] == 404
    assert gw.request("POST", "/api/kernels", {"env": {"KERNEL_SESSION_NAME": "../x"}})[0] == 400
    assert gw.request("GET", "/api/kernels/not-a-uuid")[0] == 404
    assert gw.request("DELETE", f"/api/kernels/{k['id']}")[0] == 204
    # A 204 carries no content headers (RFC 9110: no Content-Length in a 204).
    assert "Content-Length" not in gw.last_headers and "Content-Type" not in gw.last_headers
    assert gw.request("GET", f"/api/kernels/{k['id']}")[0] == 404
    status, sessions = gw.request("GET", "/api/sessions")
    assert status == 200 and [s["kernel"]["id"] for s in sessions] == [other["id"]]


def test_websocket_runs_cells_keeping_state(gw):
    k = gw.start_kernel()
    ch = gw.connect(k["id"])
    reply, iopub = ch.run("x = 41\nprint('hello')")
    assert reply["content"]["status"] == "ok" and stream_text(iopub) == "hello\n"
    reply, iopub = ch.run("x + 1")
    assert result_text(iopub) == "42"
    states = [m["content"]["execution_state"] for m in iopub
              if m["header"]["msg_type"] == "status"]
    assert states == ["busy", "idle"]
    ch.close()


def test_binary_subprotocol(gw):
    k = gw.start_kernel()
    ch = gw.connect(k["id"], v1=True)
    assert ch.ws.getsubprotocol() == "v1.kernel.websocket.jupyter.org"
    reply, iopub = ch.run("y = 6 * 7\ny")
    assert reply["content"]["status"] == "ok" and result_text(iopub) == "42"
    assert all(m["channel"] in ("shell", "iopub") for m in iopub + [reply])
    ch.close()


def test_bad_frames_close_that_websocket_only(gw):
    k = gw.start_kernel()
    good = gw.connect(k["id"])
    cases = [
        (lambda ch: ch.ws.send("{not json"), 1007, "malformed JSON"),
        (lambda ch: ch.ws.send(json.dumps({**ch.message("execute_request", {}), "channel": "nope"})),
         1008, "unknown channel"),
        (lambda ch: ch.ws.send(json.dumps({**ch.message("execute_request", {}), "channel": "iopub"})),
         1008, "unknown channel"),
        (lambda ch: ch.ws.send(json.dumps({"channel": "shell", "header": {"msg_type": "x"}})),
         1007, "bad header"),
        (lambda ch: ch.ws.send_binary(b"\x01\x00\x00\x00\xff\xff\xff\xff"), 1007, "malformed frame"),
        (lambda ch: ch.ws.send("[1, 2]"), 1007, "malformed JSON"),
    ]
    for send, code, reason in cases:
        bad = gw.connect(k["id"])
        send(bad)
        assert _closed_with(bad) == (code, reason)
    v1 = gw.connect(k["id"], v1=True)
    v1.ws.send_binary(b"\x07" + b"\x00" * 7 + b"\x00" * 8)
    assert _closed_with(v1) == (1007, "malformed frame")
    reply, iopub = good.run("1 + 1")
    assert result_text(iopub) == "2"
    assert gw.request("GET", "/api")[0] == 200


def test_reconnect_mid_cell_replays_once(gw):
    k = gw.start_kernel()
    sid = str(uuid.uuid4())
    ch = gw.connect(k["id"], session_id=sid)
    ch.run("import time")
    # The pause after "0" is the client's time to go: what the gateway wrote to the old
    # WebSocket before it closed is delivered as far as the gateway can know.
    code = ("print(0, flush=True)\ntime.sleep(1.5)\n"
            "for i in range(1, 12):\n    print(i, flush=True)\n    time.sleep(0.05)\n'done'")
    msg_id = ch.execute(code)
    seen = []
    while not any(m["header"]["msg_type"] == "stream" for m in seen):
        m = ch.recv()
        if m["parent_header"].get("msg_id") == msg_id:
            seen.append(m)
    ch.close()  # the client goes away while the cell runs
    time.sleep(3.0)  # and the cell goes on printing, and ends, while it is gone
    ch2 = gw.connect(k["id"], session_id=sid)
    reply, rest = ch2.collect(msg_id)
    got = seen + rest
    assert reply["content"]["status"] == "ok"
    assert stream_text(got) == "".join(f"{i}\n" for i in range(12))
    idles = [m for m in got if m["header"]["msg_type"] == "status"
             and m["content"]["execution_state"] == "idle"]
    assert len(idles) == 1
    assert result_text(got) == "'done'"
    ids = [m["header"]["msg_id"] for m in got]
    assert len(ids) == len(set(ids))
    # Nothing more is replayed: the next cell's messages are its own.
    reply, iopub = ch2.run("2 + 2")
    assert result_text(iopub) == "4"
    ch2.close()


def test_tenants_are_apart(gw):
    a = gw.start_kernel("mine", token=TOKEN_A)
    b = gw.start_kernel("mine", token=TOKEN_B)
    assert a["id"] != b["id"]
    listed = gw.request("GET", "/api/kernels", token=TOKEN_B)[1]
    assert [m["id"] for m in listed] == [b["id"]]
    assert gw.request("GET", f"/api/kernels/{a['id']}", token=TOKEN_B)[0] == 404
    assert gw.request("POST", f"/api/kernels/{a['id']}/interrupt", {}, token=TOKEN_B)[0] == 404
    assert gw.request("POST", f"/api/kernels/{a['id']}/restart", {}, token=TOKEN_B)[0] == 404
    assert gw.request("DELETE", f"/api/kernels/{a['id']}", token=TOKEN_B)[0] == 404
    ch = gw.connect(a["id"], token=TOKEN_B)
    assert _closed_with(ch) == (1008, "no such kernel")
    # alice's kernel is untouched, and alice may attach to it
    mine = gw.connect(a["id"], token=TOKEN_A)
    assert result_text(mine.run("3 * 3")[1]) == "9"
    # once alice is attached, bob still cannot
    ch = gw.connect(a["id"], token=TOKEN_B)
    assert _closed_with(ch) == (1008, "no such kernel")


def test_interrupt_and_restart(gw):
    k = gw.start_kernel()
    ch = gw.connect(k["id"])
    ch.run("import time\nz = 5")
    msg_id = ch.execute("print('sleeping', flush=True)\ntime.sleep(60)")
    deadline = time.monotonic() + 20
    while True:  # wait until the cell's own code runs (execute_input comes before that)
        m = ch.recv()
        if m["parent_header"].get("msg_id") == msg_id and m["header"]["msg_type"] == "stream":
            break
        assert time.monotonic() < deadline
    assert gw.request("POST", f"/api/kernels/{k['id']}/interrupt", {})[0] == 204
    reply, _ = ch.collect(msg_id)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    assert result_text(ch.run("z")[1]) == "5"
    status, model = gw.request("POST", f"/api/kernels/{k['id']}/restart", {})
    assert status == 200 and model["id"] == k["id"]
    assert None not in model["kennel"].values(), model  # what it does not know, it leaves out
    reply, _ = ch.run("z")
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "NameError"


def test_metrics(gw):
    k = gw.start_kernel()
    ch = gw.connect(k["id"])
    ch.run("1")
    ch.run("1/0")
    status, text = gw.request("GET", "/metrics")
    assert status == 200
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert int(lines['kennel_gateway_cells_total{outcome="ok"}']) >= 1
    assert int(lines['kennel_gateway_cells_total{outcome="error"}']) >= 1
    assert int(lines["kennel_gateway_execute_roundtrip_seconds_count"]) >= 2
    assert int(lines['kennel_gateway_sessions{state="idle"}']) + \
        int(lines['kennel_gateway_sessions{state="busy"}']) >= 1
    assert int(lines["kennel_gateway_websockets"]) == 1


# -- limits: each one hit ----------------------------------------------------------------

def test_limit_frame_size(gateway):
    gw = gateway(["--max-frame", "4096"])
    k = gw.start_kernel()
    ch = gw.connect(k["id"])
    ch.execute("x = '" + "a" * 8000 + "'")
    assert _closed_with(ch)[0] == 1009
    assert result_text(gw.connect(k["id"]).run("'ok'")[1]) == "'ok'"


def test_limit_connections_per_tenant(gateway):
    gw = gateway(["--max-conns", "2"])
    k = gw.start_kernel()
    first, second = gw.connect(k["id"]), gw.connect(k["id"])
    assert _refused_upgrade(gw, k["id"]) == 429
    kb = gw.start_kernel(token=TOKEN_B)
    gw.connect(kb["id"], token=TOKEN_B).close()  # another tenant is not counted against it
    first.close()
    deadline = time.monotonic() + 10
    while True:  # the slot comes back once the gateway has seen the close
        try:
            third = gw.connect(k["id"])
            break
        except websocket.WebSocketBadStatusException:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert result_text(third.run("5")[1]) == "5"
    second.close()


def test_limit_header_size(gateway):
    gw = gateway(["--max-header", "2048"])
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(b"GET /api HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 4096 + b"\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    assert not data.startswith(b"HTTP/1.1 200")
    assert gw.request("GET", "/api")[0] == 200


def test_limit_body_size(gw):
    status, _ = gw.request("POST", "/api/kernels", {"name": "kennel", "pad": "p" * 70000})
    assert status == 413


def test_limit_slow_request(gateway):
    gw = gateway(["--request-timeout", "1"])
    with socket.create_connection(("127.0.0.1", gw.port), timeout=15) as s:
        s.sendall(b"GET /api HTTP/1.1\r\nHost: x\r\n")  # and never the end of the headers
        t0 = time.monotonic()
        assert s.recv(4096) == b""  # the gateway hangs up
        assert time.monotonic() - t0 < 14
    assert gw.request("GET", "/api")[0] == 200


def test_limit_idle_websocket(gateway):
    # 3 s: a new kernel's first cell under the parallel suite's load took over 1 s, which
    # closed the WebSocket during the run rather than after it.
    gw = gateway(["--idle", "3"])
    k = gw.start_kernel()
    ch = gw.connect(k["id"])
    ch.run("1")
    code, _ = _closed_with(ch, timeout=15)  # closed with no traffic, not by the test
    assert gw.request("GET", "/api")[0] == 200


def test_cors_closed_unless_configured(gateway):
    gw = gateway()
    assert gw.request("GET", "/api", headers={"Origin": "https://evil.example"})[0] == 403
    assert gw.request("OPTIONS", "/api/kernels", token=None)[0] == 403
    gw2 = gateway(["--cors-origin", "https://lab.example"])
    assert gw2.request("GET", "/api", headers={"Origin": "https://lab.example"})[0] == 200
    assert gw2.request("GET", "/api", headers={"Origin": "https://evil.example"})[0] == 403


def test_tls(gateway, tmp_path):
    """https and wss with a self-signed pair, trusted by the client as its CA; a client that
    does not trust it is refused."""
    import ssl
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    os.chmod(key, 0o600)
    gw = gateway(cert=cert, key=key)
    ctx = ssl.create_default_context(cafile=str(cert))
    status, api = gw.request("GET", "/api", context=ctx)
    assert status == 200 and "version" in api
    with pytest.raises(OSError):
        gw.request("GET", "/api", context=ssl.create_default_context())
    status, k = gw.request("POST", "/api/kernels", {"name": "kennel"}, context=ctx)
    assert status == 201
    ch = gw.connect(k["id"], sslopt={"ca_certs": str(cert)})
    assert result_text(ch.run("'over tls'")[1]) == "'over tls'"
    ch.close()
    # plain http on the TLS port is not served
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(b"GET /api HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(10)
        try:
            data = s.recv(100)
        except ConnectionResetError:
            data = b""
        assert not data.startswith(b"HTTP/1.1 200")


def _drop_mid_cell(gw, k, sid, code):
    """Run code, go away at its first stream output, and come back after it ended."""
    ch = gw.connect(k["id"], session_id=sid)
    ch.run("import time")
    msg_id = ch.execute(code)
    while True:
        m = ch.recv()
        if m["parent_header"].get("msg_id") == msg_id and m["header"]["msg_type"] == "stream":
            break
    ch.close()
    return msg_id


def _metric(gw, name):
    text = gw.request("GET", "/metrics")[1]
    return int(next(line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(name)))


def test_limit_replay_age(gateway):
    gw = gateway(["--replay-seconds", "1"])
    k = gw.start_kernel()
    sid = str(uuid.uuid4())
    msg_id = _drop_mid_cell(gw, k, sid, "print(0, flush=True)\ntime.sleep(1.0)\nprint(1)")
    time.sleep(4)  # past the buffer's age: it is dropped
    ch = gw.connect(k["id"], session_id=sid)
    ch.ws.settimeout(2)
    got = []
    with pytest.raises(websocket.WebSocketTimeoutException):
        while True:
            got.append(ch.recv(timeout=2))
    assert not [m for m in got if m["parent_header"].get("msg_id") == msg_id]
    assert _metric(gw, "kennel_gateway_replay_dropped_total") >= 1


def test_limit_replay_bytes(gateway):
    gw = gateway(["--replay-bytes", "3000"])
    k = gw.start_kernel()
    sid = str(uuid.uuid4())
    code = ("print(0, flush=True)\ntime.sleep(1.0)\n"
            "for i in range(1, 40):\n    print(str(i) * 50, flush=True)\n    time.sleep(0.02)")
    msg_id = _drop_mid_cell(gw, k, sid, code)
    time.sleep(3.5)
    ch = gw.connect(k["id"], session_id=sid)
    reply, rest = ch.collect(msg_id)  # the newest are kept: the reply and the idle come
    texts = stream_text(rest).split()
    assert texts and texts[-1] == "39" * 50
    assert "1" * 50 not in texts  # the oldest went
    assert _metric(gw, "kennel_gateway_replay_dropped_total") >= 1



@pytest.mark.timeout_s(120)
def test_limit_slow_websocket(gateway):
    """A WebSocket that reads nothing while its kernel writes is dropped once more than
    --max-pending bytes wait for it (hung up on, as it takes no close frame either); what
    waits for it stays bounded meanwhile, and the reading client goes on."""
    # A reading client has a cell's burst (8 MB here) waiting at times: the bound is above
    # that, and what the non-reader is sent (40 MB) is above the bound and the sockets'
    # buffers.
    gw = gateway(["--max-pending", str(16 << 20)])
    k = gw.start_kernel()
    slow = gw.connect(k["id"])
    slow.ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    fast = gw.connect(k["id"])
    for _ in range(5):
        reply, _ = fast.run("for _ in range(8):\n    print('x' * 1000000)", timeout=60)
        assert reply["content"]["status"] == "ok"
    assert _metric(gw, 'kennel_gateway_queue_length{queue="websocket_bytes"}') <= (17 << 20)
    deadline = time.monotonic() + 30
    while _metric(gw, "kennel_gateway_websockets ") != 1:
        assert time.monotonic() < deadline, "the slow WebSocket was not dropped"
        time.sleep(0.5)
    assert result_text(fast.run("'still served'")[1]) == "'still served'"
    slow.ws.close()


# -- Jupyter sessions: /api/sessions as Jupyter Server's REST API has them ---------------

def _session_body(path, type_="notebook", name=None, kernel=None):
    """A POST /api/sessions body shaped as JupyterLab's services send it."""
    return {"path": path, "type": type_, "name": name if name is not None else path,
            "kernel": kernel if kernel is not None else {"name": "python3"}}


def _check_session_model(s):
    assert set(s) >= {"id", "path", "name", "type", "kernel"}
    uuid.UUID(s["id"])
    assert set(s["kernel"]) >= {"id", "name", "last_activity", "execution_state", "connections"}


def test_sessions_lifecycle(gw):
    status, s = gw.request("POST", "/api/sessions", _session_body("work/Untitled 1.ipynb"))
    assert status == 201, s
    _check_session_model(s)
    assert s["path"] == "work/Untitled 1.ipynb" and s["type"] == "notebook"
    assert s["kernel"]["name"] == "python3"
    assert gw.last_headers["Location"] == f"/api/sessions/{s['id']}"
    # The same path is the same session and the same kernel.
    status, again = gw.request("POST", "/api/sessions", _session_body("work/Untitled 1.ipynb"))
    assert status == 201 and again["id"] == s["id"] and again["kernel"]["id"] == s["kernel"]["id"]
    # The kernel is a kennel session named after the path, and runs cells.
    kernel = gw.request("GET", f"/api/kernels/{s['kernel']['id']}")[1]
    assert kernel["kennel"]["session"].startswith("work_Untitled_1.ipynb-")
    ch = gw.connect(s["kernel"]["id"])
    ch.run("v = 7")
    # A path that is a session name is that session: KERNEL_SESSION_NAME=plain's too.
    plain = gw.request("POST", "/api/sessions", _session_body("plain"))[1]
    assert gw.start_kernel("plain")["id"] == plain["kernel"]["id"]
    status, got = gw.request("GET", f"/api/sessions/{s['id']}")
    assert status == 200 and got == {**s, "kernel": {**got["kernel"]}} and got["kernel"]["connections"] == 1
    listed = gw.request("GET", "/api/sessions")[1]
    assert {x["id"] for x in listed} == {s["id"], plain["id"]}
    # PATCH: a new path and name keep the kernel (and its state).
    status, moved = gw.request("PATCH", f"/api/sessions/{s['id']}",
                               {"path": "work/renamed.ipynb", "name": "renamed.ipynb"})
    assert status == 200, moved
    assert moved["path"] == "work/renamed.ipynb" and moved["name"] == "renamed.ipynb"
    assert moved["kernel"]["id"] == s["kernel"]["id"] and moved["type"] == "notebook"
    assert result_text(ch.run("v")[1]) == "7"
    # the old path is no session now; the new one is this one
    assert gw.request("POST", "/api/sessions", _session_body("work/renamed.ipynb"))[1]["id"] == s["id"]
    # PATCH kernel.id: the session moves to that kernel, and its old kernel is ended.
    other = gw.start_kernel("other")
    status, swapped = gw.request("PATCH", f"/api/sessions/{s['id']}", {"kernel": {"id": other["id"]}})
    assert status == 200 and swapped["kernel"]["id"] == other["id"]
    assert _closed_with(ch)[0] == 1001  # "kernel ended"
    assert gw.request("GET", f"/api/kernels/{s['kernel']['id']}")[0] == 404
    # PATCH kernel.name: a fresh kernel, the one before ended.
    status, fresh = gw.request("PATCH", f"/api/sessions/{s['id']}", {"kernel": {"name": "kennel"}})
    assert status == 200 and fresh["kernel"]["id"] not in (other["id"], s["kernel"]["id"])
    assert fresh["kernel"]["name"] == "kennel"
    assert gw.request("GET", f"/api/kernels/{other['id']}")[0] == 404
    # DELETE ends the kernel.
    assert gw.request("DELETE", f"/api/sessions/{s['id']}")[0] == 204
    assert gw.request("GET", f"/api/sessions/{s['id']}")[0] == 404
    assert gw.request("GET", f"/api/kernels/{fresh['kernel']['id']}")[0] == 404
    assert [x["id"] for x in gw.request("GET", "/api/sessions")[1]] == [plain["id"]]


def test_sessions_on_a_given_kernel(gw):
    k = gw.start_kernel("given")
    status, s = gw.request("POST", "/api/sessions",
                           _session_body("a.py", type_="file", kernel={"id": k["id"]}))
    assert status == 201 and s["kernel"]["id"] == k["id"] and s["type"] == "file"
    # A kernel ended under a session (DELETE /api/kernels) takes the session with it; the
    # path's next POST makes a new one.
    assert gw.request("DELETE", f"/api/kernels/{k['id']}")[0] == 204
    assert gw.request("GET", f"/api/sessions/{s['id']}")[0] == 404
    status, s2 = gw.request("POST", "/api/sessions", _session_body("a.py", type_="file"))
    assert status == 201 and s2["id"] != s["id"] and s2["kernel"]["id"] != k["id"]
    # A kernel made with POST /api/kernels is listed as a session of its own, and may be
    # read, patched and deleted as one.
    bare = gw.start_kernel("bare")
    listed = gw.request("GET", "/api/sessions")[1]
    mine = [x for x in listed if x["kernel"]["id"] == bare["id"]]
    assert len(mine) == 1 and mine[0]["id"] == bare["id"] and mine[0]["path"] == "bare"
    assert gw.request("GET", f"/api/sessions/{bare['id']}")[1]["path"] == "bare"
    status, p = gw.request("PATCH", f"/api/sessions/{bare['id']}", {"path": "bare.ipynb"})
    assert status == 200 and p["id"] == bare["id"] and p["path"] == "bare.ipynb"
    assert p["kernel"]["id"] == bare["id"]
    assert gw.request("DELETE", f"/api/sessions/{bare['id']}")[0] == 204
    assert gw.request("GET", f"/api/kernels/{bare['id']}")[0] == 404


def test_sessions_bad_input(gw):
    s = gw.request("POST", "/api/sessions", _session_body("mine.ipynb"))[1]
    nobody = str(uuid.uuid4())
    cases = [
        ("POST", "/api/sessions", None, 400),
        ("POST", "/api/sessions", [1, 2], 400),
        ("POST", "/api/sessions", {"type": "notebook"}, 400),              # no path
        ("POST", "/api/sessions", {"path": "x"}, 400),                     # no type
        ("POST", "/api/sessions", {"path": 5, "type": "notebook"}, 400),
        ("POST", "/api/sessions", {"path": "x", "type": ["notebook"]}, 400),
        ("POST", "/api/sessions", {"path": "x", "type": "t", "name": {}}, 400),
        ("POST", "/api/sessions", {"path": "x", "type": "t", "kernel": "python3"}, 400),
        ("POST", "/api/sessions", {"path": "x", "type": "t", "kernel": {"id": 3}}, 400),
        ("POST", "/api/sessions", {"path": "x", "type": "t", "kernel": {"id": "nope"}}, 400),
        ("POST", "/api/sessions", {"path": "x", "type": "t", "kernel": {"id": nobody}}, 400),
        ("POST", "/api/sessions", {"path": "x", "type": "t", "kernel": {"name": "R"}}, 501),
        ("POST", "/api/sessions", {"path": "x" * 4097, "type": "t"}, 400),
        ("GET", f"/api/sessions/{nobody}", None, 404),
        ("GET", "/api/sessions/not-a-uuid", None, 404),
        ("DELETE", f"/api/sessions/{nobody}", None, 404),
        ("PATCH", f"/api/sessions/{nobody}", {"path": "y"}, 404),
        ("PATCH", f"/api/sessions/{s['id']}", None, 400),
        ("PATCH", f"/api/sessions/{s['id']}", {"path": 1}, 400),
        ("PATCH", f"/api/sessions/{s['id']}", {"kernel": {"id": nobody}}, 400),
        ("PUT", f"/api/sessions/{s['id']}", {"path": "y"}, 405),
    ]
    for method, path, body, want in cases:
        if body is None and method in ("POST", "PATCH"):
            raw = gw.raw_request(method, path, b"{not json")
            status, got = raw
        else:
            status, got = gw.request(method, path, body)
        assert status == want, (method, path, body, status, got)
        assert isinstance(got, dict) and got.get("message"), (method, path, got)
    # nothing of it changed the session
    assert gw.request("GET", f"/api/sessions/{s['id']}")[1]["path"] == "mine.ipynb"


def test_sessions_tenants_apart(gw):
    a = gw.request("POST", "/api/sessions", _session_body("same.ipynb"), token=TOKEN_A)[1]
    b = gw.request("POST", "/api/sessions", _session_body("same.ipynb"), token=TOKEN_B)[1]
    assert a["id"] != b["id"] and a["kernel"]["id"] != b["kernel"]["id"]
    assert [x["id"] for x in gw.request("GET", "/api/sessions", token=TOKEN_B)[1]] == [b["id"]]
    for method, body in (("GET", None), ("DELETE", None), ("PATCH", {"path": "stolen"})):
        status, got = gw.request(method, f"/api/sessions/{a['id']}", body, token=TOKEN_B)
        assert status == 404 and got["message"], (method, status, got)
    # nor may bob put his session on alice's kernel, or alice's on his
    status, _ = gw.request("POST", "/api/sessions",
                           _session_body("x.ipynb", kernel={"id": a["kernel"]["id"]}), token=TOKEN_B)
    assert status == 400
    status, _ = gw.request("PATCH", f"/api/sessions/{b['id']}",
                           {"kernel": {"id": a["kernel"]["id"]}}, token=TOKEN_B)
    assert status == 400
    got = gw.request("GET", f"/api/sessions/{a['id']}", token=TOKEN_A)[1]
    assert got["path"] == "same.ipynb" and got["kernel"]["id"] == a["kernel"]["id"]


def test_limit_sessions_per_tenant(gw):
    """At most 256 Jupyter sessions per tenant (each on the same kernel here: the limit is the
    gateway's table, not kenneld's)."""
    k = gw.start_kernel("shared")
    for i in range(256):
        status, _ = gw.request("POST", "/api/sessions",
                               _session_body(f"n{i}.ipynb", kernel={"id": k["id"]}))
        assert status == 201, (i, status)
    status, got = gw.request("POST", "/api/sessions",
                             _session_body("one-more.ipynb", kernel={"id": k["id"]}))
    assert status == 503 and "too many sessions" in got["message"]
    # an existing path is still answered, and another tenant is not counted against it
    assert gw.request("POST", "/api/sessions", _session_body("n3.ipynb"))[0] == 201
    assert gw.request("POST", "/api/sessions", _session_body("n3.ipynb"), token=TOKEN_B)[0] == 201
    assert len(gw.request("GET", "/api/sessions")[1]) == 256


# -- kernel-spec resources ---------------------------------------------------------------

def _get_bytes(gw, path, token=TOKEN_A):
    """(status, content type, body bytes) of a GET."""
    import urllib.error
    import urllib.request
    req = urllib.request.Request(gw.url(path))
    if token:
        req.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.headers.get("content-type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("content-type", ""), e.read()


def test_kernelspec_resources(gw):
    from .kenneld_proc import ROOT
    specs = gw.request("GET", "/api/kernelspecs")[1]["kernelspecs"]
    for name in ("kennel", "python3"):
        res = specs[name]["resources"]
        assert res == gw.request("GET", f"/api/kernelspecs/{name}")[1]["resources"]
        assert res["logo-64x64"] == f"/kernelspecs/{name}/logo-64x64.png"
        assert res["logo-32x32"] == f"/kernelspecs/{name}/logo-32x32.png"
        for key, url in res.items():
            status, ctype, body = _get_bytes(gw, url)
            fname = url.rsplit("/", 1)[1]
            assert status == 200 and body == (ROOT / "kernels" / "kernelspec" / fname).read_bytes()
            if fname.endswith(".png"):
                assert ctype == "image/png" and body.startswith(b"\x89PNG\r\n\x1a\n")
    assert _get_bytes(gw, "/kernelspecs/kennel/logo-64x64.png", token=None)[0] == 401
    for path in ("/kernelspecs/kennel/kernel.json", "/kernelspecs/R/logo-64x64.png",
                 "/kernelspecs/kennel/..%2f..%2fkernels%2fkernelspec%2flogo-64x64.png",
                 "/kernelspecs/kennel/sub/logo-64x64.png", "/kernelspecs/kennel/"):
        status, ctype, body = _get_bytes(gw, path)
        assert status == 404 and json.loads(body)["message"], (path, status)
