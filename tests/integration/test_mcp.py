"""`kennel mcp` against a real kenneld, driven by the official MCP TypeScript SDK's Client
over its StdioClientTransport (tests/mcp/calls.mjs, run with node), as an agent framework
drives it; and, for what the SDK never sends (malformed lines, a line past the bound), by raw
JSON lines. node and kennel mcp are this test's own and are ended by pid whatever happens."""

import base64
import json
import os
import select
import shutil
import subprocess
import time

import pytest

from .itest_helpers import PNG_SIGNATURE
from .kenneld_proc import KENNEL, ROOT, end_process

pytestmark = pytest.mark.default_preload  # its cells draw figures

CALLS = ROOT / "tests" / "mcp" / "calls.mjs"
SDK = ROOT / "tests" / "mcp" / "node_modules" / "@modelcontextprotocol" / "sdk"
NODE_TIMEOUT_S = 60
LINE_TIMEOUT_S = 30
PLOT = ("import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3]); plt.savefig('fig.png'); plt.show()")
BLOB = bytes(range(256)) * 3  # neither text nor an image: an embedded resource


def _sdk_calls(kenneld, session, steps, extra=()):
    """Run steps with the SDK's client against `kennel mcp --session session`; the reports:
    (initialize's, [each step's], kennel mcp's stderr)."""
    if not shutil.which("node") or not SDK.exists():
        pytest.fail(f"node or {SDK} is missing: run scripts/install-deps.sh")
    node = subprocess.Popen(["node", str(CALLS), str(KENNEL), str(kenneld.state_dir), session,
                             *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=str(CALLS.parent))
    try:
        out, err = node.communicate(json.dumps(steps), timeout=NODE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the SDK's calls did not finish in {NODE_TIMEOUT_S} s")
    finally:
        end_process(node)  # and kennel mcp below it
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    fatal = [r for r in lines if "fatal" in r]
    assert not fatal and node.returncode == 0, \
        f"node exit {node.returncode}: {fatal}\n{err[-2000:]}\n{lines[-1:]}\n{kenneld.log()}"
    reports = [r for r in lines if "step" in r]
    assert len(reports) == len(steps), (reports, err)
    return lines[0], reports, lines[-1]["stderr"]


def _text(report):
    """The text blocks of a tool result, joined."""
    return "".join(b["text"] for b in report["content"] if b["type"] == "text")


@pytest.mark.timeout_s(90)
def test_sdk_client_runs_cells_files_and_restart(kenneld):
    """The SDK's client: initialize, tools/list, state kept across calls, a plot's PNG as
    image content, an error cell as a result with isError and a traceback without colour
    codes, a timeout, a cancelled call that interrupts its cell, a file round trip (text, PNG
    and a blob), a restart, and the session made with kennel new's limits."""
    steps = [
        {"list": True},
        {"ping": True},
        {"call": "run_python", "arguments": {"code": "x = 41\nprint('set')"}},
        {"call": "run_python", "arguments": {"code": "import sys; print('err', file=sys.stderr)"
                                             "\nx + 1"}},
        {"call": "run_python", "arguments": {"code": PLOT}},
        {"call": "run_python", "arguments": {"code": "def f():\n    1/0\nf()"}},
        {"call": "run_python", "arguments": {"code": "import time; time.sleep(60)",
                                             "timeout": 1}},
        # the SDK gives up after 1.5 s and sends notifications/cancelled: the cell is
        # interrupted, and the next call does not wait for its 60 s
        {"call": "run_python", "arguments": {"code": "import time; time.sleep(60)"},
         "timeout_ms": 1500},
        {"call": "run_python", "arguments": {"code": "'after'"}},
        {"call": "no_such_tool", "arguments": {}},
        {"call": "upload_file", "arguments": {"path": "in/notes.txt", "content": "h\u00e9llo\n"}},
        {"call": "upload_file", "arguments": {"path": "blob.bin", "encoding": "base64",
                                              "content": base64.b64encode(BLOB).decode()}},
        {"call": "list_files", "arguments": {}},
        {"call": "download_file", "arguments": {"path": "in/notes.txt"}},
        {"call": "download_file", "arguments": {"path": "fig.png"}},
        {"call": "download_file", "arguments": {"path": "blob.bin"}},
        {"call": "download_file", "arguments": {"path": "missing.txt"}},
        {"call": "run_python", "arguments": {"code": "open('in/notes.txt').read()"}},
        {"call": "restart", "arguments": {}},
        {"call": "run_python", "arguments": {"code": "x"}},
        {"call": "list_files", "arguments": {}},
    ]
    init, r, stderr = _sdk_calls(kenneld, "mcp-sdk", steps, ["--timeout", "20"])
    assert init["server"]["name"] == "kennel"
    assert init["capabilities"]["tools"] is not None
    assert "mcp-sdk" in init["instructions"]

    tools = {t["name"]: t for t in r[0]["tools"]}
    assert set(tools) == {"run_python", "upload_file", "download_file", "list_files", "restart"}
    assert tools["run_python"]["inputSchema"]["required"] == ["code"]
    assert "outputSchema" in tools["run_python"]
    assert r[1]["ping"] == {}

    assert not r[2]["isError"] and _text(r[2]).startswith("set\n"), r[2]
    assert r[2]["structuredContent"]["outcome"] == "ok"
    assert not r[3]["isError"] and _text(r[3]).startswith("err\n42\n"), r[3]

    plot = r[4]
    assert not plot["isError"], plot
    (image,) = [b for b in plot["content"] if b["type"] == "image"]
    assert image["mimeType"] == "image/png"
    assert bytes.fromhex(image["head"]) == PNG_SIGNATURE and image["bytes"] > 1000
    sc = plot["structuredContent"]
    assert sc["images"] == 1 and sc["outcome"] == "ok"
    assert {"name": "fig.png", "size": sc["files"][0]["size"]} in sc["files"]
    assert sc["metrics"]["wall_ms"] >= 0

    err = r[5]
    assert err["isError"] and "error" not in err, err
    assert "ZeroDivisionError" in _text(err) and "1/0" in _text(err)
    assert "\x1b" not in _text(err), _text(err)
    assert err["structuredContent"]["outcome"] == "error"

    timeout = r[6]
    assert timeout["isError"] and timeout["structuredContent"]["outcome"] == "timeout", timeout
    assert "CellTimeout" in _text(timeout)
    assert timeout["ms"] < 10000

    assert r[7]["error"]["code"] == -32001, r[7]  # the SDK's own RequestTimeout
    after = r[8]
    assert not after["isError"] and _text(after).startswith("'after'"), after
    assert after["ms"] < 15000, "the cancelled cell was not interrupted"

    assert r[9]["error"]["code"] == -32602 and "no_such_tool" in r[9]["error"]["message"]

    assert not r[10]["isError"] and not r[11]["isError"], (r[10], r[11])
    listed = {f["path"]: f for f in r[12]["structuredContent"]["files"]}
    assert listed["in/notes.txt"]["size"] == len("h\u00e9llo\n".encode())
    assert listed["blob.bin"]["size"] == len(BLOB) and "fig.png" in listed
    assert r[13]["content"] == [{"type": "text", "text": "h\u00e9llo\n"}]
    (png,) = r[14]["content"]
    assert png["type"] == "image" and png["mimeType"] == "image/png"
    assert bytes.fromhex(png["head"]) == PNG_SIGNATURE and png["bytes"] == listed["fig.png"]["size"]
    (blob,) = r[15]["content"]
    assert blob["type"] == "resource" and blob["bytes"] == len(BLOB)
    assert blob["head"] == BLOB[:8].hex()
    assert blob["resource"] == {"uri": "kennel://mcp-sdk/blob.bin",
                                "mimeType": "application/octet-stream"}
    assert r[16]["isError"] and "NoSuchFile" in _text(r[16]), r[16]
    assert "h\u00e9llo" in _text(r[17])  # the cell sees the uploaded file

    assert not r[18]["isError"] and "fresh namespace" in _text(r[18])
    fresh = r[19]
    assert fresh["isError"] and "NameError" in _text(fresh), fresh
    assert fresh["structuredContent"]["execution_count"] == 1
    assert {f["path"] for f in r[20]["structuredContent"]["files"]} == set(listed)

    (info,) = [s for s in kenneld.sessions() if s["name"] == "mcp-sdk"]
    assert info["limits"]["timeout"] == 20
    assert "kennel mcp: made session mcp-sdk" in stderr


class RawMcp:
    """`kennel mcp` driven by raw JSON lines: every read bounded, every stdout line checked to
    be one JSON-RPC message."""

    def __init__(self, kenneld, session, *extra, state_dir=None):
        self.proc = subprocess.Popen(
            [str(KENNEL), "--state-dir", str(state_dir or kenneld.state_dir), "mcp",
             "--session", session, *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.buf = b""

    def write(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, msg):
        self.write(json.dumps(msg).encode() + b"\n")

    def read(self, timeout=LINE_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            assert left > 0, f"no line from kennel mcp in {timeout} s; stderr: {self.stderr()}"
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
                assert chunk, f"kennel mcp closed stdout; stderr: {self.stderr()}"
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        msg = json.loads(line)
        assert msg["jsonrpc"] == "2.0" and ("result" in msg or "error" in msg), msg
        return msg

    def call(self, id_, method, params=None):
        self.send({"jsonrpc": "2.0", "id": id_, "method": method,
                   **({"params": params} if params is not None else {})})
        return self.read()

    def initialize(self):
        r = self.call(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                        "clientInfo": {"name": "raw", "version": "0"}})
        assert r["result"]["protocolVersion"] == "2025-06-18", r
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def stderr(self):
        if self.proc.poll() is None:
            return "(still running)"
        return self.proc.stderr.read().decode(errors="replace")[-2000:]

    def close(self):
        """Close stdin: kennel mcp ends by itself (exit 0), else it is killed."""
        try:
            self.proc.stdin.close()
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            return None
        finally:
            end_process(self.proc)


@pytest.fixture
def raw_mcp():
    started = []

    def _start(*args, **kw):
        m = RawMcp(*args, **kw)
        started.append(m)
        return m

    yield _start
    for m in started:
        end_process(m.proc)


def test_malformed_lines_get_json_rpc_errors_and_the_server_goes_on(kenneld, raw_mcp):
    """A line that is not JSON: -32700; an unknown method: -32601; bad params: -32602; a line
    past --max-request, in many writes: -32600 with its id, the line never kept; then a
    healthy call still runs."""
    m = raw_mcp(kenneld, "mcp-raw", "--max-request", "4096")
    m.initialize()
    m.write(b"{not json\n")
    r = m.read()
    assert r["error"]["code"] == -32700 and r["id"] is None
    assert m.call(1, "resources/list")["error"]["code"] == -32601
    r = m.call(2, "tools/call", {"name": "run_python", "arguments": {"code": 5}})
    assert r["error"]["code"] == -32602 and r["id"] == 2
    big = json.dumps({"jsonrpc": "2.0", "method": "tools/call", "params": {
        "name": "upload_file", "arguments": {"path": "big.txt", "content": "x" * 100000}},
        "id": 3}).encode()
    for i in range(0, len(big), 8192):
        m.write(big[i:i + 8192])
    m.write(b"\n")
    r = m.read()
    assert r["id"] == 3 and r["error"]["code"] == -32600, r
    assert r["error"]["data"] == {"bytes": len(big), "max_request": 4096}
    r = m.call(4, "tools/call", {"name": "run_python", "arguments": {"code": "6 * 7"}})
    assert r["result"]["isError"] is False
    assert r["result"]["content"][0]["text"] == "42\n"
    r = m.call(5, "tools/call", {"name": "list_files"})
    assert "big.txt" not in {f["path"] for f in r["result"]["structuredContent"]["files"]}
    assert m.close() == 0, m.stderr()


def test_answers_come_before_the_end_of_a_piped_input(kenneld, raw_mcp):
    """Requests written at once and stdin closed at once (`kennel mcp < requests`): every
    call is answered, the running cell waited for, then kennel mcp exits 0."""
    m = raw_mcp(kenneld, "mcp-pipe")
    lines = [{"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {}}}]
    lines += [{"jsonrpc": "2.0", "id": i, "method": "tools/call",
               "params": {"name": "run_python",
                          "arguments": {"code": f"import time; time.sleep(0.2); {i} * 2"}}}
              for i in (1, 2)]
    m.write(b"".join(json.dumps(x).encode() + b"\n" for x in lines))
    m.proc.stdin.close()
    answers = {m.read()["id"]: None for _ in lines}
    assert set(answers) == {0, 1, 2}
    assert m.proc.wait(10) == 0


def test_without_kenneld_a_call_is_an_error_result(tmp_path, raw_mcp):
    """No kenneld for the state directory: initialize and tools/list still work, and a call
    says why it failed as a tool result with isError, not a protocol error."""
    m = raw_mcp(None, "mcp-none", state_dir=tmp_path / "no-kenneld")
    m.initialize()
    assert len(m.call(1, "tools/list")["result"]["tools"]) == 5
    r = m.call(2, "tools/call", {"name": "run_python", "arguments": {"code": "1"}})
    assert r["result"]["isError"] is True
    assert "kenneld is not running" in r["result"]["content"][0]["text"]
    assert m.close() == 0


def test_mcp_needs_a_session_name():
    r = subprocess.run([str(KENNEL), "mcp"], capture_output=True, text=True, timeout=10,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "--session" in r.stderr and r.stdout == ""
