"""bin/kennel against a real kenneld."""

import json
import select
import subprocess
from pathlib import Path

import pytest

from .itest_helpers import png_size
from .kenneld_proc import KENNEL, run_kennel

EXEC_NOTICE_S = 6  # how long `kennel exec` may take to notice that its session is gone
STALE_NOTICE_S = 3  # how long kennel may take to notice that kenneld is gone


def _names(ls_output):
    lines = ls_output.splitlines()
    assert lines[0].split() == ["NAME", "ID", "STATE", "IDLE", "CELLS", "PID", "MEM", "PSS",
                                 "USS", "LAST"]
    return {line.split()[0]: line.split() for line in lines[1:]}


def test_new_prints_connection_file(kenneld):
    r = kenneld.cli("new", "--name", "web")
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip())
    conn = json.loads(path.read_text())
    assert conn["signature_scheme"] == "hmac-sha256"
    assert conn["key"]
    again = kenneld.cli("new", "--name", "web")
    assert again.returncode == 0
    assert again.stdout.strip() == str(path)
    unnamed = kenneld.cli("new")
    assert unnamed.returncode == 0
    assert Path(unnamed.stdout.strip()).is_file()
    assert unnamed.stdout.strip() != str(path)
    assert len(kenneld.sessions()) == 2


def test_ls_info_rm(kenneld):
    kenneld.create("alpha")
    kenneld.create("beta")
    assert kenneld.cli("exec", "alpha", "1").returncode == 0
    r = kenneld.cli("ls")
    assert r.returncode == 0, r.stderr
    rows = _names(r.stdout)
    assert set(rows) == {"alpha", "beta"}
    assert rows["alpha"][4] == "1"  # CELLS
    info = kenneld.cli("info", "alpha")
    assert info.returncode == 0
    data = json.loads(info.stdout)
    assert data["name"] == "alpha" and data["cells"] == 1
    assert kenneld.cli("rm", "alpha").returncode == 0
    assert set(_names(kenneld.cli("ls").stdout)) == {"beta"}
    missing = kenneld.cli("info", "alpha")
    assert missing.returncode == 1
    assert "NoSuchSession" in missing.stderr
    assert kenneld.cli("rm", "alpha").returncode == 1


def test_exec_prints_streams_and_result(kenneld):
    r = kenneld.cli("exec", "calc", "x = 20\nprint('hi')\nx + 1")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "hi\n21\n"
    again = kenneld.cli("exec", "calc", "x")
    assert again.stdout == "20\n"


def test_exec_shows_an_output_of_many_json_values(kenneld):
    # kenneld passes a kernel's outputs on unparsed, whatever their number of values (a
    # plotly figure's arrays); the CLI reads them all.
    r = kenneld.cli("exec", "dense", "from IPython.display import display\n"
                    "display({'application/json': {'x': [0] * 200_000}, 'text/plain': 'dense'},"
                    " raw=True)")
    assert r.returncode == 0, r.stderr
    assert "dense" in r.stdout


def test_exec_creates_the_session(kenneld):
    assert kenneld.sessions() == []
    assert kenneld.cli("exec", "fresh", "pass").returncode == 0
    assert [s["name"] for s in kenneld.sessions()] == ["fresh"]


def test_exec_error_exits_1(kenneld):
    r = kenneld.cli("exec", "bad", "print('before')\n1 / 0")
    assert r.returncode == 1
    assert r.stdout == "before\n"
    assert "ZeroDivisionError" in r.stderr


def test_exec_reads_stdin(kenneld):
    r = kenneld.cli("exec", "piped", "-", input="import sys\nprint('from stdin', file=sys.stderr)\n"
                                                "sum(range(5))\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "10\n"
    assert r.stderr == "from stdin\n"


def test_exec_when_session_ends_mid_cell(kenneld):
    """The session is ended while `kennel exec` waits for its cell: exec must not hang."""
    assert kenneld.cli("exec", "doomed", "pass").returncode == 0
    proc = subprocess.Popen(
        [str(KENNEL), "--state-dir", str(kenneld.state_dir), "exec", "doomed",
         "import time\nprint('started', flush=True)\ntime.sleep(30)"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        assert ready and proc.stdout.readline() == "started\n"
        assert kenneld.cli("rm", "doomed").returncode == 0
        try:
            rc = proc.wait(EXEC_NOTICE_S)
        except subprocess.TimeoutExpired:
            rc = None
        assert rc is not None, f"kennel exec still waits {EXEC_NOTICE_S} s after its session ended"
        assert rc != 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=5)


@pytest.mark.parametrize("args", [["ls"], ["new"], ["info", "x"], ["rm", "x"], ["exec", "x", "1"]])
def test_not_running(tmp_path, args):
    state = tmp_path / "state"
    state.mkdir()
    r = run_kennel("--state-dir", str(state), *args, timeout=10)
    assert r.returncode != 0
    assert "not running" in r.stderr
    assert r.stdout == ""


def test_not_running_stale_kenneld_json(tmp_path):
    """kenneld died without cleaning up (SIGKILL, crash): kenneld.json names a dead pid and
    a socket nobody serves. kennel should say so at once, not wait 30 s for a reply."""
    state = tmp_path / "state"
    state.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (state / "kenneld.json").write_text(json.dumps({
        "manager": {"endpoint": f"ipc://{state}/manager", "key": "stale",
                    "signature_scheme": "hmac-sha256"},
        "pid": dead.pid, "version": "0.1"}))
    try:
        r = run_kennel("--state-dir", str(state), "ls", timeout=STALE_NOTICE_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"kennel ls still waits after {STALE_NOTICE_S} s for a kenneld that is gone")
    assert r.returncode != 0
    assert "not running" in r.stderr


def test_stale_kenneld_json_naming_another_live_kenneld(kenneld, tmp_path):
    """A kenneld.json left by a crash whose pid now belongs to another kenneld (of another
    state directory): the start time it records tells them apart, so kennel says "not
    running" at once instead of waiting on a socket nobody serves, and a launcher would not
    take it for its kenneld."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "kenneld.json").write_text(json.dumps({
        "manager": {"endpoint": f"ipc://{state}/manager", "key": "stale",
                    "signature_scheme": "hmac-sha256"},
        "pid": kenneld.proc.pid, "start": 1, "version": "0.1"}))
    try:
        r = run_kennel("--state-dir", str(state), "ls", timeout=STALE_NOTICE_S)
    except subprocess.TimeoutExpired:
        pytest.fail("kennel ls took another state directory's kenneld for this one's")
    assert r.returncode != 0
    assert "not running" in r.stderr


def test_usage_errors():
    r = run_kennel("bogus", timeout=10)
    assert r.returncode == 2
    assert "usage: kennel" in r.stderr
    help_ = run_kennel("--help", timeout=10)
    assert help_.returncode == 0
    assert "exec N CODE" in help_.stdout


PLOT = ("import matplotlib.pyplot as plt\n"
        "from matplotlib_inline.backend_inline import set_matplotlib_formats\n"
        "set_matplotlib_formats('png', bbox_inches=None)\n"
        "plt.figure(figsize=(3, 2), dpi=40); plt.plot([1, 2]);")


def test_exec_out_saves_images_and_html(kenneld, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "out-1.png").write_bytes(b"mine")  # never overwritten
    r = kenneld.cli("exec", "art", PLOT, "--out", str(out), timeout=30)
    assert r.returncode == 0, r.stderr
    saved = out / "out-2.png"
    assert r.stdout == f"<Figure size 120x80 with 1 Axes>\n{saved}\n"
    assert png_size(saved.read_bytes()) == (120, 80)
    assert (out / "out-1.png").read_bytes() == b"mine"
    svg = '<svg xmlns="http://www.w3.org/2000/svg" width="2" height="2"></svg>'
    r = kenneld.cli("exec", "--out", str(out), "art",
                    "import pandas as pd\n"
                    f"class S:\n    def _repr_svg_(self): return {svg!r}\n"
                    "display(S())\n"
                    "pd.DataFrame({'n': [7]})", timeout=30)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("<__main__.S at ") and lines[1] == f"{out}/out-1.svg"
    assert lines[2:] == ["   n", "0  7", f"{out}/out-1.html"]
    assert (out / "out-1.svg").read_text() == svg
    assert "<table" in (out / "out-1.html").read_text()


def test_exec_out_defaults_to_the_current_directory(kenneld, tmp_path):
    r = kenneld.cli("exec", "art", PLOT + "\nprint('text stays text')", cwd=tmp_path, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "text stays text\n<Figure size 120x80 with 1 Axes>\nout-1.png\n"
    assert png_size((tmp_path / "out-1.png").read_bytes()) == (120, 80)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out-1.png"]
    # Plain results write no file, and code may start with '-'.
    r = kenneld.cli("exec", "art", "-1", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "-1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out-1.png"]
