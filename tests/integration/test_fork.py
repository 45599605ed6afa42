"""kennel fork / fork_request: a new session with a copy of another's namespace and workspace
files, which then goes its own way. Real kenneld, real jupyter_client."""

import json
import os
import time

import pytest

from .itest_helpers import run, wait_for

GRACE = ["--grace", "1"]


def _fork(kenneld, src, name, **extra):
    return kenneld.call("fork_request", {"session": src, "name": name, **extra})


def _state(kenneld, name):
    return kenneld.ok("info_request", {"session": name})["session"]["state"]


def test_fork_copies_the_namespace_and_the_files_then_both_go_their_own_way(kenneld, connect):
    src = kenneld.create("src")
    kc = connect(src["connection_file"])
    run(kc, "import numpy as np, pandas as pd, os\n"
            "x = 7\narr = np.arange(1000)\n"
            "df = pd.DataFrame({'a': range(100), 'b': [str(i) for i in range(100)]})\n"
            "def double(v): return 2 * v\n"
            "os.makedirs('sub/deeper', exist_ok=True)\n"
            "open('sub/deeper/f.txt', 'w').write('from src')\n"
            "os.symlink('sub/deeper/f.txt', 'link')\n"
            "os.chmod('sub/deeper/f.txt', 0o640)", timeout=20)
    pid = kenneld.ok("info_request", {"session": "src"})["session"]["kernel_pid"]
    reply = _fork(kenneld, "src", "dst")
    assert reply["status"] == "ok", reply
    dst = reply["session"]
    assert reply["not_copied"] == []
    assert dst["name"] == "dst" and dst["id"] != src["id"]
    # Its own sockets and key.
    assert dst["connection_file"] != src["connection_file"]
    with open(src["connection_file"]) as a, open(dst["connection_file"]) as b:
        ca, cb = json.load(a), json.load(b)
    assert ca["key"] != cb["key"] and ca["shell_port"] != cb["shell_port"]
    kd = connect(dst["connection_file"])
    cell = run(kd, "(x, int(arr.sum()), df.shape, int(df.a.sum()), df.b[99], double(4), "
                   "open('link').read(), oct(os.stat('sub/deeper/f.txt').st_mode & 0o777), "
                   "os.readlink('link'))", timeout=20)
    assert cell.result == ("(7, 499500, (100, 2), 4950, '99', 8, 'from src', '0o640', "
                           "'sub/deeper/f.txt')"), cell.content
    assert cell.stream("stderr") == ""  # nothing was lost: no notice
    # The two diverge: names and files changed in one are not seen in the other.
    run(kd, "x = 8\narr[0] = 100\ndf.loc[0, 'a'] = 1000\n"
            "open('sub/deeper/f.txt', 'w').write('from dst')\nopen('only-dst', 'w').close()")
    run(kc, "y = 1\nopen('only-src', 'w').close()")
    assert run(kc, "(x, int(arr[0]), int(df.a[0]), open('sub/deeper/f.txt').read(), "
                   "os.path.exists('only-dst'))").result == "(7, 0, 0, 'from src', False)"
    assert run(kd, "(x, int(arr[0]), int(df.a[0]), open('sub/deeper/f.txt').read(), "
                   "os.path.exists('only-src'), 'y' in dir())").result == \
        "(8, 100, 1000, 'from dst', False, False)"
    # The source's kernel served on: it was never evicted or restarted.
    info = kenneld.ok("info_request", {"session": "src"})["session"]
    assert info["restarts"] == 0 and info["kernel_pid"] == pid
    # The fork goes on counting cells from the source's.
    assert run(kd, "1").content["execution_count"] > 1


def test_what_cannot_be_copied_is_reported_and_told_to_the_first_cell(kenneld, connect):
    kc = connect(kenneld.create("holder")["connection_file"])
    run(kc, "import socket, os\nsock = socket.socket(socket.AF_UNIX)\n"
            "gen = (i for i in range(3))\nkept = 'yes'\nos.mkfifo('pipe')")
    reply = _fork(kenneld, "holder", "holder-fork")
    assert reply["status"] == "ok", reply
    lost = reply["not_copied"]
    assert "gen" in lost and "sock" in lost, lost
    assert "(file pipe: a FIFO)" in lost, lost
    assert "kept" not in lost
    kd = connect(reply["session"]["connection_file"])
    cell = run(kd, "kept", timeout=20)
    assert cell.result == "'yes'"
    notice = cell.stream("stderr")
    assert "forked from holder" in notice and "gen" in notice and "sock" in notice
    assert "pipe" in notice
    # Told once, and the names really are not there.
    again = run(kd, "('gen' in dir(), 'sock' in dir(), __import__('os').path.exists('pipe'))")
    assert again.result == "(False, False, False)" and again.stream("stderr") == ""
    # The source still has them.
    assert run(kc, "(type(gen).__name__, sock.family.name)").result == "('generator', 'AF_UNIX')"


def test_fork_refusals(kenneld, connect):
    kc = connect(kenneld.create("a")["connection_file"])
    kenneld.create("b")
    r = _fork(kenneld, "a", "b")
    assert r["status"] == "error" and r["ename"] == "SessionExists", r
    r = _fork(kenneld, "missing", "c")
    assert r["status"] == "error" and r["ename"] == "NoSuchSession", r
    for bad in ("", "-x", "a b", "x" * 129):
        r = _fork(kenneld, "a", bad)
        assert r["status"] == "error" and r["ename"] == "BadRequest", (bad, r)
    r = _fork(kenneld, "a", "c", limits={"memory": 1})
    assert r["status"] == "error" and r["ename"] == "BadRequest", r
    r = kenneld.call("fork_request", {"name": "c"})
    assert r["status"] == "error" and r["ename"] == "BadRequest", r
    # None of these made a session, and "a" serves on.
    assert sorted(s["name"] for s in kenneld.sessions()) == ["a", "b"]
    assert run(kc, "1 + 1").result == "2"


def test_a_busy_session_is_refused_and_forks_once_idle(kenneld, connect):
    kc = connect(kenneld.create("busy")["connection_file"])
    run(kc, "n = 1")
    msg_id = kc.execute("import time\ntime.sleep(3)\nn = 2")
    wait_for(lambda: _state(kenneld, "busy") == "busy", what="the cell to run")
    r = _fork(kenneld, "busy", "busy-fork")
    assert r["status"] == "error" and r["ename"] == "SessionBusy", r
    assert "busy" in r["evalue"] and "idle" in r["evalue"]
    assert "busy-fork" not in [s["name"] for s in kenneld.sessions()]
    wait_for(lambda: _state(kenneld, "busy") == "idle", timeout=10, what="the cell's end")
    r = _fork(kenneld, "busy", "busy-fork")
    assert r["status"] == "ok", r
    kd = connect(r["session"]["connection_file"])
    assert run(kd, "n", timeout=20).result == "2"
    del msg_id


@pytest.mark.parametrize("kenneld", [["--idle", "1"]], indirect=True)
def test_an_evicted_session_forks_from_its_snapshot(kenneld, connect):
    kc = connect(kenneld.create("asleep")["connection_file"])
    run(kc, "import numpy as np\nv = np.arange(10)\ngen = (i for i in range(2))\n"
            "open('w.txt', 'w').write('kept')")
    wait_for(lambda: _state(kenneld, "asleep") == "evicted", timeout=10, what="eviction")
    r = _fork(kenneld, "asleep", "awake", limits={"idle": 0})
    assert r["status"] == "ok", r
    # The names its eviction lost are lost to the fork too, and said so.
    assert r["not_copied"] == ["gen"]
    # Forking left the source evicted, its snapshot where it was.
    assert _state(kenneld, "asleep") == "evicted"
    kd = connect(r["session"]["connection_file"])
    cell = run(kd, "(int(v.sum()), open('w.txt').read())", timeout=20)
    assert cell.result == "(45, 'kept')"
    assert "forked from asleep" in cell.stream("stderr")
    # The source still revives with its own state.
    assert run(kc, "int(v.sum())", timeout=20).result == "45"


def test_limits_default_to_the_sources_and_can_be_given(kenneld, connect):
    src = kenneld.create("lim", limits={"timeout": 5, "pids": 100, "budget_cells": 50})
    connect(src["connection_file"])
    same = _fork(kenneld, "lim", "lim-same")
    assert same["status"] == "ok", same
    assert same["session"]["limits"] == src["limits"]
    other = _fork(kenneld, "lim", "lim-other", limits={"timeout": 9})
    assert other["status"] == "ok", other
    assert other["session"]["limits"]["timeout"] == 9
    assert other["session"]["limits"]["pids"] == 100
    # Budgets are limits: the fork's spend starts at nothing.
    assert other["session"]["budgets"]["cells"]["spent"] == 0


@pytest.mark.parametrize("kenneld", [["--max-sessions", "2"]], indirect=True)
def test_a_fork_past_max_sessions_is_refused(kenneld, connect):
    connect(kenneld.create("one")["connection_file"])
    assert _fork(kenneld, "one", "two")["status"] == "ok"
    r = _fork(kenneld, "one", "three")
    assert r["status"] == "error" and r["ename"] == "TooManySessions", r


@pytest.mark.parametrize("kenneld", [GRACE], indirect=True)
def test_the_save_for_a_fork_has_the_sources_deadline_and_keeps_the_source(kenneld, connect):
    # Pickling runs user code: a __reduce__ that never returns stops at the session's
    # deadline; the fork is refused and the source keeps its kernel and names.
    src = kenneld.create("stuck", limits={"timeout": 2})
    kc = connect(src["connection_file"])
    run(kc, "import time\nclass Stuck:\n    def __reduce__(self):\n        time.sleep(3600)\n"
            "s = Stuck()\nkept = 42")
    pid = kenneld.ok("info_request", {"session": "stuck"})["session"]["kernel_pid"]
    t = time.monotonic()
    r = _fork(kenneld, "stuck", "stuck-fork")
    took = time.monotonic() - t
    assert r["status"] == "error" and r["ename"] == "ForkFailed", r
    assert "CellTimeout" in r["evalue"], r
    assert 2 <= took < 6, took
    assert "stuck-fork" not in [s["name"] for s in kenneld.sessions()]
    assert run(kc, "(kept, type(s).__name__)", timeout=20).result == "(42, 'Stuck')"
    info = kenneld.ok("info_request", {"session": "stuck"})["session"]
    assert info["kernel_pid"] == pid and info["state"] == "idle"


def test_state_too_large_for_a_frame_is_refused_and_the_source_kept(kenneld, connect):
    """A fork's state comes through the kernel's pipe (an eviction's goes to a file), whose
    frames stop at 64 MiB: past that the fork is refused, and the source keeps all."""
    kc = connect(kenneld.create("huge")["connection_file"])
    run(kc, "big = bytes(70 << 20)\nkept = 1", timeout=20)
    r = _fork(kenneld, "huge", "huge-fork")
    assert r["status"] == "error" and r["ename"] == "ForkFailed", r
    assert "TooLarge" in r["evalue"], r
    assert run(kc, "(kept, len(big))", timeout=20).result == f"(1, {70 << 20})"


def test_the_cli(kenneld, connect):
    kc = connect(kenneld.create("cli-src")["connection_file"])
    run(kc, "v = 3\ngen = (i for i in range(2))")
    r = kenneld.cli("fork", "cli-src", "cli-dst", "--timeout", "4")
    assert r.returncode == 0, r.stderr
    conn = r.stdout.strip()
    assert os.path.exists(conn) and conn.endswith("connection.json")
    assert r.stderr == "kennel: not copied: gen\n"
    info = kenneld.ok("info_request", {"session": "cli-dst"})["session"]
    assert info["connection_file"] == conn and info["limits"]["timeout"] == 4
    assert run(connect(conn), "v", timeout=20).result == "3"
    r = kenneld.cli("fork", "cli-src", "cli-dst")
    assert r.returncode == 1 and "SessionExists" in r.stderr
    r = kenneld.cli("fork", "nope", "x")
    assert r.returncode == 1 and "NoSuchSession" in r.stderr
    for args in (["fork"], ["fork", "cli-src"], ["fork", "cli-src", "x", "--name", "y"],
                 ["fork", "cli-src", "x", "extra"]):
        r = kenneld.cli(*args)
        assert r.returncode == 2, (args, r.stderr)
    assert "fork SRC DST" in kenneld.cli("--help").stdout


def test_the_workspace_copy_stops_at_64_levels_and_lists_at_most_50_entries(kenneld, connect):
    kc = connect(kenneld.create("deep")["connection_file"])
    run(kc, "import os\nos.makedirs('/'.join(['d'] * 70))\n"
            "open('/'.join(['d'] * 64) + '/kept', 'w').write('k')")
    r = _fork(kenneld, "deep", "deep-fork")
    assert r["status"] == "ok", r
    path = "/".join(["d"] * 64)
    assert r["not_copied"] == [f"(file {path}/d: too deep)"], r["not_copied"]
    kd = connect(r["session"]["connection_file"])
    cell = run(kd, f"(open('{path}/kept').read(), os.path.exists('{path}/d'))", timeout=20)
    assert cell.result == "('k', False)", cell.content
    # 61 entries not copied: 50 are listed.
    run(kc, "os.makedirs('fifos')\nfor i in range(60): os.mkfifo(f'fifos/p{i:02}')")
    r = _fork(kenneld, "deep", "deep-fork2")
    assert r["status"] == "ok", r
    assert len(r["not_copied"]) == 50, r["not_copied"]
    kd2 = connect(r["session"]["connection_file"])
    assert run(kd2, "len(os.listdir('fifos'))", timeout=20).result == "0"
