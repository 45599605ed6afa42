"""jupyter console, non-interactively: code on stdin with --simple-prompt (plain input()
reads a pipe fine; no pty needed). At EOF it asks "Do you really want to exit", reads EOF
again and leaves."""

import os
import subprocess

import pytest

from .kenneld_proc import PYTHON

CODE = "x = 6 * 7\nprint('printed', x + 1)\nx\n1 / 0\nx - 2\n"


def _console(args, env_dir, input_text, timeout=20):
    env = dict(os.environ,
               JUPYTER_RUNTIME_DIR=str(env_dir / "runtime"),
               JUPYTER_CONFIG_DIR=str(env_dir / "config"),
               IPYTHONDIR=str(env_dir / "ipython"))
    proc = subprocess.Popen([PYTHON, "-m", "jupyter_console", *args, "--simple-prompt"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    try:
        out, _ = proc.communicate(input_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate(timeout=5)
        pytest.fail(f"jupyter console did not finish in {timeout} s:\n{out}")
    return proc.returncode, out


def _check_output(out):
    assert "kennel 0.1, an IPython kernel" in out  # the banner from kernel_info
    assert "printed 43" in out
    assert "Out[3]: 42" in out
    assert "ZeroDivisionError" in out
    assert "Out[5]: 40" in out  # the error did not end the session


def test_console_existing(kenneld, tmp_path):
    conn = kenneld.create("console")["connection_file"]
    rc, out = _console(["--existing", conn], tmp_path, CODE)
    assert rc == 0, out
    _check_output(out)
    assert "keeping kernel alive" in out
    # The session outlives the console, with its state.
    r = kenneld.cli("exec", "console", "x")
    assert r.stdout == "42\n"


# A kenneld of its own: jupyter console connects to the ports of its connection file before
# `kennel kernel -f` has made the session, so its iopub socket joins only when libzmq next
# reconnects; console (6.4) waits for the kernel_info reply but not for iopub (nbclient's
# wait_for_ready does), then for the first cell's idle status on iopub. A warm pool answers
# that cell before the reconnect, and console waits for ever; a fresh kenneld's first kernel
# starts later than that.
@pytest.mark.own_kenneld
def test_console_launches_kennel_kernelspec(kenneld, tmp_path, monkeypatch):
    prefix = tmp_path / "prefix"
    r = kenneld.cli("kernelspec", "install", "--prefix", str(prefix))
    assert r.returncode == 0, r.stderr
    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    rc, out = _console(["--kernel", "kennel"], tmp_path, CODE)
    assert rc == 0, out
    _check_output(out)
    assert "Shutting down kernel" in out
    assert kenneld.sessions() == []  # the console shut the launched session down
