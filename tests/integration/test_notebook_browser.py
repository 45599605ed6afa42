"""Debian's Notebook 6.4 in a headless Chromium, driven through its UI by tests/browser/
(playwright-core, run with node), on a notebook whose kernel is the kennel kernelspec: what a
notebook user meets. Notebook's server, Chromium and node are this test's own, on 127.0.0.1,
and are ended by pid whatever happens."""

import contextlib
import json
import secrets
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest

from .itest_helpers import kennel_kernelspec
from .kenneld_proc import PYTHON, ROOT, end_process

BROWSER = ROOT / "tests" / "browser"
CHROMIUM = Path("/usr/bin/chromium")  # tests/browser/notebook.mjs launches it
SERVER_START_S = 20
NODE_TIMEOUT_S = 45
END_GRACE_S = 10


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _end(proc):
    """End a process this test started, and what it started (kenneld_proc.end_process)."""
    end_process(proc, END_GRACE_S)


class NotebookServer:
    def __init__(self, proc, port, token, root, log_path):
        self.proc, self.port, self.token, self.root, self.log_path = \
            proc, port, token, root, log_path

    def url(self, path):
        return f"http://127.0.0.1:{self.port}/{path}?token={self.token}"

    def log(self):
        return self.log_path.read_text(errors="replace")[-4000:]

    def request(self, method, path, body=None, timeout=30):
        """(status, JSON body or None) of a call to the server's REST API; an error's status
        and text."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url(path), data=data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")


@contextlib.contextmanager
def start_notebook(tmp_path, monkeypatch, args=(), start_s=SERVER_START_S):
    """Notebook's server on 127.0.0.1 with a token and args, its Jupyter directories under
    tmp_path, notebooks in tmp_path/notebooks; answering within start_s, and ended by pid
    (with what it started) at the end."""
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    root = tmp_path / "notebooks"
    root.mkdir()
    token = secrets.token_hex(16)
    log_path = tmp_path / "notebook.log"

    def launch():
        port = _free_port()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [PYTHON, "-m", "notebook", "--no-browser", "--allow-root", "--ip=127.0.0.1",
                 f"--port={port}", "--port-retries=0", f"--NotebookApp.token={token}",
                 f"--notebook-dir={root}", *args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        return NotebookServer(proc, port, token, root, log_path)

    server = launch()
    proc = server.proc
    try:
        deadline = time.monotonic() + start_s
        launches = 1
        while True:
            if proc.poll() is not None and "is already in use" in server.log() and launches < 3:
                # The free port was taken by another test between its pick and the
                # server's bind (make check runs three workers): another port.
                server = launch()
                proc = server.proc
                launches += 1
                continue
            assert proc.poll() is None, f"notebook exited with {proc.returncode}:\n{server.log()}"
            try:
                with urllib.request.urlopen(server.url("api/status"), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, \
                    f"notebook did not answer in {start_s} s:\n{server.log()}"
                time.sleep(0.1)
        yield server
    finally:
        _end(proc)  # it shuts its kernels down: their launchers end their sessions


@pytest.fixture
def notebook_server(kenneld, tmp_path, monkeypatch):
    """Notebook's server on 127.0.0.1 with a token, its Jupyter directories under tmp_path,
    where the kennel kernelspec (for this test's kenneld) is installed; notebooks in
    tmp_path/notebooks."""
    kennel_kernelspec(kenneld, tmp_path, monkeypatch)
    with start_notebook(tmp_path, monkeypatch) as server:
        yield server


def _notebook_file(server, name):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("")], metadata={
        "kernelspec": {"name": "kennel", "display_name": "Python 3 (kennel)",
                       "language": "python"}})
    nbformat.write(nb, str(server.root / name))
    return server.url(f"notebooks/{name}")


def _drive(url, steps, tmp_path, server):
    """Run steps (see tests/browser/steps.mjs) on the page at url in a fresh Chromium; the
    report of each step, in order. Fails at the first step that failed."""
    needed = [CHROMIUM, BROWSER / "node_modules" / "playwright-core"]
    if not shutil.which("node") or not all(p.exists() for p in needed):
        pytest.fail(f"node, {needed[0]} or {needed[1]} is missing: run scripts/install-deps.sh")
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    shot = tmp_path / "failure.png"
    node = subprocess.Popen(["node", str(BROWSER / "steps.mjs"), url, str(profile), str(shot)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = node.communicate(json.dumps(steps), timeout=NODE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the browser's steps did not finish in {NODE_TIMEOUT_S} s")
    finally:
        _end(node)  # and Chromium below it
        shutil.rmtree(profile, ignore_errors=True)
    reports = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    failed = [r for r in reports if "error" in r]
    if failed or node.returncode != 0:
        f = failed[0] if failed else {}
        step = steps[f["step"]] if isinstance(f.get("step"), int) else f.get("step")
        pytest.fail(f"step {f.get('step')} {step} failed: {f.get('error')}\n"
                    f"dialogs on screen: {f.get('dialogs')}; screenshot: {f.get('screenshot')}\n"
                    f"node exit {node.returncode}, stderr:\n{err[-2000:]}\n"
                    f"notebook's log:\n{server.log()}")
    return reports[1:]  # after "open"


RESTART_STEPS = [
    {"run": "kept = 6 * 7; kept"},
    {"toolbar": "jupyter-notebook:confirm-restart-kernel"},
    {"dialog": "Restart kernel?", "button": "Restart"},
    {"idle": True},
    {"run": "'kept' in dir()"},
    {"run": "kept = 'again'; print('printed', kept)"},
    {"menu": ["Kernel", "Restart & Clear Output"]},
    {"dialog": "Restart kernel and clear all output?", "button": "Restart and Clear All Outputs"},
    {"idle": True},
    {"outputs": True},
    {"run": "'kept' in dir()"},
    {"run": "print(6 * 7)"},
    {"idle": True},
]


@pytest.mark.timeout_s(60)
def test_notebook_restarts_a_kennel_kernel_from_the_toolbar_and_the_kernel_menu(
        kenneld, notebook_server, tmp_path):
    """Notebook's toolbar Restart (with its confirmation), then Kernel > Restart & Clear
    Output: no dialog but the confirmations (Notebook read a launched session's shutdown_reply
    {restart: false} as the kernel's death: "Dead kernel", and no kernel), each restart leaves
    a fresh namespace, and the next cell runs and shows its output."""
    url = _notebook_file(notebook_server, "restart.ipynb")
    reports = _drive(url, RESTART_STEPS, tmp_path, notebook_server)
    ran = [r["output"] for r in reports if "run" in r]
    assert ran == ["42", "False", "printed again", "False", "42"], reports
    (cleared,) = [r["outputs"] for r in reports if "outputs" in r]
    assert not any(cleared), f"outputs left after Restart & Clear Output: {cleared}"
    assert len(kenneld.sessions()) == 1  # the third launcher's; the others ended
