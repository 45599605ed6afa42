"""bin/kennel against a real kenneld."""

import json
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .itest_helpers import png_size, shell_reply
from .kenneld_proc import KENNEL, run_kennel

pytestmark = pytest.mark.default_preload  # its cells draw figures and make DataFrames

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


def test_new_count_makes_that_many_sessions_a_file_a_line(kenneld):
    r = kenneld.cli("new", "--name", "lab", "--count", "3", "--memory", "300M")
    assert r.returncode == 0, r.stderr
    files = r.stdout.split()
    assert len(files) == 3 and len(set(files)) == 3
    for f in files:
        assert json.loads(Path(f).read_text())["key"]
    rows = _names(kenneld.cli("ls").stdout)
    assert {"lab-1", "lab-2", "lab-3"} <= set(rows)
    info = json.loads(kenneld.cli("info", "lab-2").stdout)
    assert info["limits"]["memory"] == 300 << 20  # each with the options given
    out = kenneld.cli("exec", "lab-3", "40 + 2")
    assert out.returncode == 0 and out.stdout.strip() == "42", out
    # Again: the same three, found by name, not three more.
    again = kenneld.cli("new", "--name", "lab", "--count", "3")
    assert again.returncode == 0 and again.stdout.split() == files
    for bad in ("0", "1001", "two", "", "3x"):
        r = kenneld.cli("new", "--count", bad)
        assert r.returncode == 2 and "bad value for --count" in r.stderr, (bad, r)
    r = kenneld.cli("fork", "lab-1", "lab-copy", "--count", "2")
    assert r.returncode == 2 and "fork takes no --count" in r.stderr
    assert "lab-copy" not in _names(kenneld.cli("ls").stdout)


@pytest.mark.parametrize("kenneld", [["--max-sessions", "2"]], indirect=True)
def test_new_count_stops_at_the_first_session_refused(kenneld):
    """The files of the sessions made are printed; the first refusal is said and ends it."""
    r = kenneld.cli("new", "--name", "full", "--count", "4")
    assert r.returncode == 1
    assert len(r.stdout.split()) == 2, r.stdout
    assert r.stderr.count("kennel:") == 1 and "session" in r.stderr.lower(), r.stderr
    assert set(_names(kenneld.cli("ls").stdout)) == {"full-1", "full-2"}


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


def test_ls_columns_stay_aligned_with_long_names(kenneld):
    """NAME is as wide as the longest name: every row's ID starts under the header's."""
    for name in ("a", "a-name-well-past-twenty-characters.and-some"):
        kenneld.create(name)
    lines = kenneld.cli("ls").stdout.splitlines()
    at = lines[0].index(" ID ") + 1
    ids = {s["name"]: s["id"][:8] for s in kenneld.sessions()}
    for line in lines[1:]:
        name = line.split()[0]
        assert line[at:at + 8] == ids[name], (line, lines[0])


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


def test_exec_finds_a_session_by_its_id_and_makes_none_of_that_shape(kenneld):
    """A session made without a name is named after its id: `kennel exec ID` reaches it (a
    create by id finds the session, as by name). An id no session has is an error, not a new
    session named like an id."""
    made = kenneld.cli("new")
    assert made.returncode == 0, made.stderr
    (only,) = kenneld.sessions()
    r = kenneld.cli("exec", only["id"], "6 * 7")
    assert r.returncode == 0 and r.stdout.strip() == "42", (r.stdout, r.stderr)
    ghost = "0123abcd-0000-4000-8000-00000000beef"
    for args in (["exec", ghost, "1"], ["new", "--name", ghost]):
        r = kenneld.cli(*args)
        assert r.returncode != 0 and "no session has that id" in r.stderr, (args, r.stderr)
    assert [s["id"] for s in kenneld.sessions()] == [only["id"]]


def test_exec_error_exits_1(kenneld):
    r = kenneld.cli("exec", "bad", "print('before')\n1 / 0")
    assert r.returncode == 1
    assert r.stdout == "before\n"
    assert "ZeroDivisionError" in r.stderr


def test_exec_prints_kenneld_errors_once(kenneld):
    """kenneld's own error (KernelDied) comes as an iopub error and an error reply, which
    may arrive first: it was printed twice, from each. Several runs, as the order varies."""
    for i in range(3):
        r = kenneld.cli("exec", "exd", "import os; os._exit(1)")
        assert r.returncode == 1
        assert r.stderr.count("KernelDied") == 1, (i, r.stderr)


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
    assert lines[2:] == ["   n", "0  7", f"{out}/out-2.html"]  # another output, another N
    assert (out / "out-1.svg").read_text() == svg
    assert "<table" in (out / "out-2.html").read_text()
    # One output's formats share their N (the lowest at which none is taken): QA found one
    # figure saved as out-4.png, out-1.svg and out-1.pdf.
    r = kenneld.cli("exec", "--out", str(out), "art",
                    PLOT.replace("set_matplotlib_formats('png'", "set_matplotlib_formats('png', 'svg'"),
                    timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1:] == [f"{out}/out-3.png", f"{out}/out-3.svg"], r.stdout


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


def test_exec_out_makes_missing_parents_and_fails_when_it_cannot_save(kenneld, tmp_path):
    nested = tmp_path / "a" / "b" / "c"
    r = kenneld.cli("exec", "art", PLOT, "--out", str(nested), timeout=30)
    assert r.returncode == 0, r.stderr
    assert png_size((nested / "out-1.png").read_bytes()) == (120, 80)
    # A figure that cannot be saved is no success (it once exited 0, the figure lost).
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    r = kenneld.cli("exec", "art", PLOT, "--out", str(blocker), timeout=30)
    assert r.returncode == 1 and "not saved" in r.stderr, (r.returncode, r.stderr)


def _kennel_bytes(kenneld, *args, input=b""):
    return subprocess.run([str(KENNEL), "--state-dir", str(kenneld.state_dir), *args],
                          input=input, capture_output=True, timeout=30)


def test_new_and_exec_refuse_what_they_cannot_send(kenneld):
    """Each of these once went on silently: a session with default limits or no name, code
    cut at a NUL, or nothing at all."""
    for args in (["new", "stray"], ["new", "--memory", "inf"], ["new", "--timeout", "nan"],
                 ["new", "--pids", "10abc"], ["new", "--name", b"a\xff"]):
        r = _kennel_bytes(kenneld, *args)
        assert r.returncode == 2 and r.stderr, (args, r)
    assert kenneld.sessions() == []
    r = _kennel_bytes(kenneld, "exec", "nul", "-", input=b"print(1)\n\0print(2)\n")
    assert r.returncode == 2 and b"NUL" in r.stderr, r
    r = _kennel_bytes(kenneld, "exec", "nul", b"print('\xff')")
    assert r.returncode == 2 and b"UTF-8" in r.stderr, r
    r = _kennel_bytes(kenneld, "info", b"a\xff")
    assert r.returncode != 0 and b"UTF-8" in r.stderr, r


@pytest.mark.parametrize("kenneld", [["--max-message", "2M", "--max-file", "2M"]], indirect=True)
def test_exec_and_put_over_kennelds_limits_fail_at_once(kenneld, tmp_path):
    """libzmq drops a message over the limit without a word: exec waited for ever, and put
    for 30 s before blaming kenneld."""
    r = kenneld.cli("exec", "big", "-", input="x = 1\n" + "#" * (3 << 20) + "\n", timeout=15)
    assert r.returncode == 1 and "RequestTooLarge" in r.stderr, (r.returncode, r.stderr)
    big = tmp_path / "big.bin"
    big.write_bytes(b"\0" * (5 << 20))
    r = kenneld.cli("put", "big", str(big), timeout=15)
    assert r.returncode == 1 and "TooLarge" in r.stderr and "--max-file" in r.stderr, r.stderr


def test_exec_says_why_its_cell_was_not_run(kenneld, connect):
    """A cell aborted behind another client's failing one exited 1 with nothing printed."""
    kc = connect(kenneld.create("shared")["connection_file"])
    kc.execute("import time\ntime.sleep(1.5)\n1/0")
    r = kenneld.cli("exec", "shared", "print('never')", timeout=20)
    assert r.returncode == 1 and "not run" in r.stderr and "never" not in r.stdout, r


def test_kernelspec_records_an_absolute_state_dir(tmp_path):
    r = run_kennel("--state-dir", "relstate", "kernelspec", "install", "--prefix",
                   str(tmp_path / "prefix"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    spec = json.loads(next((tmp_path / "prefix").rglob("kernel.json")).read_text())
    assert str(tmp_path / "relstate") in spec["argv"], spec["argv"]


def test_kernelspec_ships_the_logos_front_ends_show(tmp_path, monkeypatch):
    from jupyter_client.kernelspec import KernelSpecManager

    r = run_kennel("kernelspec", "install", "--prefix", str(tmp_path / "prefix"))
    assert r.returncode == 0, r.stderr
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "prefix" / "share" / "jupyter"))
    resources = Path(KernelSpecManager().get_all_specs()["kennel"]["resource_dir"])
    for size in (32, 64):
        png = (resources / f"logo-{size}x{size}.png").read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        assert png_size(png) == (size, size)
    assert "<svg" in (resources / "logo-svg.svg").read_text()


def test_ctrl_c_interrupts_only_execs_own_cell(kenneld, connect):
    """Ctrl-C while `kennel exec`'s cell still waits behind another client's: that cell was
    the one interrupted."""
    kc = connect(kenneld.create("polite")["connection_file"])
    theirs = kc.execute("import time\ntime.sleep(3)\n'theirs done'")
    proc = subprocess.Popen([str(KENNEL), "--state-dir", str(kenneld.state_dir), "exec", "polite",
                             "print('mine')"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reply = shell_reply(kc, theirs, timeout=10)
    assert reply["content"]["status"] == "ok", reply["content"]
