"""Debian's Notebook 6.4 run with --gateway-url pointed at kennel-gateway: Notebook's own REST
API starts a kernel and its own WebSocket runs cells (state kept, a PNG arrives, interrupt and
restart work), then a headless Chromium opens a notebook through that server and finds a
plot's image in the page. Notebook's server, Chromium and node are this test's own, on
127.0.0.1, and are ended by pid whatever happens."""

import json
import time
import urllib.request
import uuid

import nbformat
import pytest
import websocket

from .gateway_proc import TOKEN_A, Gateway, free_port, result_text
from .test_notebook_browser import _drive, start_notebook

MGR = f"tcp://127.0.0.1:{free_port()}"
pytestmark = [pytest.mark.parametrize("kenneld", [["--manager", MGR, "--admit-user", "nobody"]], indirect=True),
              pytest.mark.default_preload]  # its cells draw figures
SERVER_START_S = 30
REPLY_TIMEOUT_S = 30


@pytest.fixture
def gw(kenneld, tmp_path):
    d = tmp_path / "gateway"
    d.mkdir()
    g = Gateway(kenneld, d)
    try:
        yield g
        assert g.alive(), f"kennel-gateway died:\n{g.log()}"
    finally:
        g.stop()


@pytest.fixture
def server(gw, tmp_path, monkeypatch):
    """Notebook's server with --gateway-url at the gateway, as tenant alice."""
    with start_notebook(tmp_path, monkeypatch,
                        [f"--gateway-url=http://127.0.0.1:{gw.port}",
                         f"--GatewayClient.auth_token={TOKEN_A}"],
                        start_s=SERVER_START_S) as s:
        yield s


class NotebookChannels:
    """Notebook's own WebSocket to a kernel (which it relays to the gateway)."""

    def __init__(self, server, kernel_id):
        self.session = str(uuid.uuid4())
        self.ws = websocket.create_connection(
            f"ws://127.0.0.1:{server.port}/api/kernels/{kernel_id}/channels"
            f"?session_id={self.session}&token={server.token}", timeout=REPLY_TIMEOUT_S)

    def run(self, code, timeout=REPLY_TIMEOUT_S):
        msg_id = self.send(code)
        return self.collect(msg_id, timeout)

    def send(self, code):
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "session": self.session,
                       "username": "test", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
        return msg_id

    def collect(self, msg_id, timeout=REPLY_TIMEOUT_S, until=None):
        deadline = time.monotonic() + timeout
        reply, iopub, idle = None, [], False
        while reply is None or not idle:
            left = deadline - time.monotonic()
            assert left > 0, f"no reply and idle for {msg_id}: {reply} {iopub}"
            self.ws.settimeout(left)
            m = json.loads(self.ws.recv())
            if m.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if m["channel"] == "shell":
                reply = m
            elif m["channel"] == "iopub":
                iopub.append(m)
                if until and until(m):
                    return None, iopub
                if m["header"]["msg_type"] == "status" and \
                        m["content"]["execution_state"] == "idle":
                    idle = True
        return reply, iopub


@pytest.mark.timeout_s(120)
def test_notebook_with_gateway_url_runs_cells(kenneld, gw, server):
    status, specs = server.request("GET", "api/kernelspecs")
    assert status == 200 and "python3" in specs["kernelspecs"], specs
    # the kernel's logo, which Notebook fetches from the gateway for its pages
    with urllib.request.urlopen(server.url("kernelspecs/python3/logo-64x64.png"), timeout=30) as r:
        assert r.status == 200 and r.read().startswith(b"\x89PNG\r\n\x1a\n")
    status, k = server.request("POST", "api/kernels", {"name": "python3"})
    assert status == 201, (status, k, server.log())
    # Notebook's kernel is the gateway's, a kennel session of tenant alice.
    listed = gw.request("GET", "/api/kernels")[1]
    assert [m["id"] for m in listed] == [k["id"]]
    assert any(s["name"].startswith("alice.") for s in kenneld.sessions())
    ch = NotebookChannels(server, k["id"])
    ch.run("kept = 6 * 7")
    assert result_text(ch.run("kept")[1]) == "42"
    _, iopub = ch.run("import matplotlib.pyplot as plt\n"
                      "plt.plot([1, 3, 2])\nplt.show()")
    pngs = [m for m in iopub if m["header"]["msg_type"] == "display_data"
            and "image/png" in m["content"]["data"]]
    assert pngs and pngs[0]["content"]["data"]["image/png"].startswith("iVBORw0KGgo")
    # interrupt, through Notebook's REST API
    ch.run("import time")
    msg_id = ch.send("print('sleeping', flush=True)\ntime.sleep(60)")
    ch.collect(msg_id, until=lambda m: m["header"]["msg_type"] == "stream")
    assert server.request("POST", f"api/kernels/{k['id']}/interrupt")[0] == 204
    reply, _ = ch.collect(msg_id)
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    # restart, through Notebook's REST API: the state is gone
    status, _ = server.request("POST", f"api/kernels/{k['id']}/restart")
    assert status == 200, server.log()
    reply, _ = ch.run("kept")
    assert reply["content"]["ename"] == "NameError"
    assert server.request("DELETE", f"api/kernels/{k['id']}")[0] == 204
    assert gw.request("GET", "/api/kernels")[1] == []


@pytest.mark.timeout_s(90)
def test_notebook_page_through_gateway_shows_a_plot(kenneld, gw, server, tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("")], metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nbformat.write(nb, str(server.root / "plot.ipynb"))
    steps = [
        {"run": "kept = 6 * 7; kept"},
        {"run": "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"},
        {"read": ".output_png img"},
        {"run": "kept"},
    ]
    reports = _drive(server.url("notebooks/plot.ipynb"), steps, tmp_path, server)
    ran = [r["output"] for r in reports if "run" in r]
    assert ran[0] == "42" and ran[2] == "42", reports
    assert any(s["name"].startswith("alice.") for s in kenneld.sessions())
