"""clients/python/kennel_client against a real kenneld: cells, files, attach, close, errors."""

import sys

import pytest

from .itest_helpers import png_size
from .kenneld_proc import ROOT

sys.path.insert(0, str(ROOT / "clients" / "python"))
from kennel_client import KennelError, Output, Session, strip_ansi  # noqa: E402

pytestmark = pytest.mark.default_preload  # its cells draw figures


@pytest.fixture
def sdk(kenneld):
    """sdk(name=None, **kw) -> a Session on the test's kenneld; every one is let go at
    teardown (the kenneld fixture ends what sessions are left)."""
    made = []

    def _make(name=None, **kw):
        s = Session(name, state_dir=str(kenneld.state_dir), **kw)
        made.append(s)
        return s

    yield _make
    for s in made:
        s.detach()


def test_state_is_kept_between_runs_and_streams_split(sdk):
    s = sdk()
    assert s.created
    first = s.run("x = 41\nimport sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert first.outcome == "ok" and first.error is None
    assert first.stdout == "out\n" and first.stderr == "err\n"
    ex = s.run("x + 1")
    assert ex.ok and ex.text == "42" and ex.results == [{"text/plain": "42"}]
    assert ex.stdout == "" and ex.stderr == ""
    assert ex.metrics["wall_ms"] >= 0 and "cpu_ms" in ex.metrics
    assert ex.runtime_digest.startswith("sha256:")
    assert ex.execution_count == first.execution_count + 1


def test_a_matplotlib_figure_is_png_bytes(sdk):
    s = sdk()
    ex = s.run("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()", timeout=30)
    assert ex.ok, ex.error
    assert len(ex.images) == 1
    width, height = png_size(ex.images[0])
    assert width > 100 and height > 100
    assert "image/png" in ex.results[0]


def test_an_error_is_an_execution_with_a_clean_traceback(sdk):
    s = sdk()
    seen = []
    ex = s.run("def f():\n    return 1 / 0\nf()", on_output=seen.append)
    assert [(o.kind, o.text) for o in seen] == [("error", ex.error.traceback)]
    assert ex.outcome == "error" and not ex.ok
    assert ex.error.name == "ZeroDivisionError" and ex.error.value == "division by zero"
    assert "\x1b" not in ex.error.traceback
    assert "return 1 / 0" in ex.error.traceback
    assert ex.error.traceback.rstrip().endswith("ZeroDivisionError: division by zero")
    assert s.run("'still here'").text == "'still here'"  # the session goes on


def test_strip_ansi_takes_colours_and_controls_only():
    assert strip_ansi("\x1b[0;31mZeroDivisionError\x1b[0m: x\tok\n") == "ZeroDivisionError: x\tok\n"
    assert strip_ansi("a\x1b]0;title\x07b\x07c") == "abc"


def test_a_cell_past_its_timeout_has_outcome_timeout(sdk):
    s = sdk()
    s.run("y = 1")
    ex = s.run("import time\ntime.sleep(30)", timeout=1)
    assert ex.outcome == "timeout", ex
    assert ex.error is not None and ex.error.name == "CellTimeout"
    after = s.run("1 + 1")
    assert after.ok and after.text == "2"


def test_put_get_files_round_trip(sdk):
    s = sdk()
    data = bytes(range(256)) * 10
    assert s.put("in/data.bin", data) == len(data)
    s.put("note.txt", "héllo")
    assert s.get("in/data.bin") == data
    assert s.get("note.txt") == "héllo".encode()
    assert [(f.path, f.size) for f in s.files()] == [("in/data.bin", 2560), ("note.txt", 6)]
    ex = s.run("open('out.txt', 'w').write(open('note.txt').read().upper())")
    assert [(f.path, f.size) for f in ex.files] == [("out.txt", 6)]
    assert s.get("out.txt") == "HÉLLO".encode()


def test_a_second_session_attaches_by_name(sdk, kenneld):
    a = sdk("shared")
    a.run("secret = 7")
    b = sdk("shared")
    assert not b.created and b.id == a.id
    assert b.run("secret * 6").text == "42"
    c = sdk("shared", create=False)
    assert c.id == a.id
    b.detach()  # leaves it running
    assert [s["name"] for s in kenneld.sessions()] == ["shared"]
    assert a.run("secret").text == "7"


def test_on_output_sees_each_output_in_order_as_it_arrives(sdk):
    s = sdk()
    seen = []
    code = ("import sys, time\n"
            "print('one', flush=True)\n"
            "time.sleep(0.2)\n"
            "print('two', file=sys.stderr, flush=True)\n"
            "time.sleep(0.2)\n"
            "from IPython.display import display\n"
            "display({'a': 1}, raw=True)\n"
            "time.sleep(0.2)\n"
            "print('three', flush=True)\n"
            "'done'")
    ex = s.run(code, on_output=seen.append)
    assert ex.ok, ex.error
    assert [o.kind for o in seen] == ["stdout", "stderr", "display", "stdout", "result"]
    assert [o.text for o in seen[:2]] == ["one\n", "two\n"]
    assert seen[2].data == {"a": 1} and seen[4].data["text/plain"] == "'done'"
    assert isinstance(seen[0], Output)
    assert ex.stdout == "one\nthree\n" and ex.stderr == "two\n"


def test_close_ends_the_session_and_a_context_manager_closes_what_it_made(sdk, kenneld):
    s = sdk("gone")
    s.close()
    assert kenneld.sessions() == []
    with pytest.raises(KennelError) as e:
        s.run("1")
    assert e.value.ename == "Closed"
    with Session("ctx", state_dir=str(kenneld.state_dir)) as t:
        t.run("1")
        assert [x["name"] for x in kenneld.sessions()] == ["ctx"]
    assert kenneld.sessions() == []
    kenneld.create("theirs")
    with Session("theirs", state_dir=str(kenneld.state_dir)) as u:
        assert not u.created
    assert [x["name"] for x in kenneld.sessions()] == ["theirs"]  # attached: left running


def test_bad_input_is_a_kennel_error_with_the_managers_ename(sdk, kenneld, tmp_path):
    with pytest.raises(KennelError) as e:
        Session("nobody", state_dir=str(kenneld.state_dir), create=False)
    assert e.value.ename == "NoSuchSession"
    s = sdk()
    for bad in ("../escape", "/etc/passwd"):
        with pytest.raises(KennelError) as e:
            s.put(bad, b"x")
        assert e.value.ename == "BadPath", bad
    with pytest.raises(KennelError) as e:
        s.get("missing.txt")
    assert e.value.ename == "NoSuchFile"
    with pytest.raises(KennelError) as e:
        sdk("bad name!")
    assert e.value.ename == "BadRequest"
    kenneld.ok("end_request", {"session": s.id})  # ended under it
    with pytest.raises(KennelError) as e:
        s.put("x.txt", b"x")
    assert e.value.ename == "NoSuchSession"
    with pytest.raises(KennelError) as e:
        Session(state_dir=str(tmp_path))
    assert e.value.ename == "NoKenneld"


def test_fork_is_a_new_session_with_the_namespace_and_files_that_diverges(sdk):
    s = sdk("sdk-src")
    s.run("import numpy as np\nx = 5\narr = np.arange(4)\ngen = (i for i in range(2))")
    s.put("data.txt", "orig")
    with s.fork("sdk-dst") as f:
        assert isinstance(f, Session) and f.created and f.name == "sdk-dst" and f.id != s.id
        assert f.not_copied == ["gen"]
        ex = f.run("(x, int(arr.sum()))")
        assert ex.text == "(5, 6)", ex.error
        assert "forked from sdk-src" in ex.stderr and "gen" in ex.stderr
        f.run("x = 6")
        f.put("data.txt", "fork's")
        assert s.run("x").text == "5" and s.get("data.txt") == b"orig"
        assert f.get("data.txt") == b"fork's"
        # Limits: the source's unless given.
        assert f.info()["limits"]["timeout"] == s.info()["limits"]["timeout"]
        with pytest.raises(KennelError) as e:
            s.fork("sdk-dst")
        assert e.value.ename == "SessionExists"
    # The context manager ended the fork, not the source.
    with pytest.raises(KennelError) as e:
        Session("sdk-dst", state_dir=s.state_dir, create=False)
    assert e.value.ename == "NoSuchSession"
    assert s.run("x").text == "5"
    with s.fork("sdk-dst2", timeout=7) as g:
        assert g.info()["limits"]["timeout"] == 7


def test_restart_clears_the_namespace_and_keeps_the_workspace(sdk):
    s = sdk()
    s.run("z = 1")
    s.put("kept.txt", "k")
    s.restart()
    ex = s.run("z")
    assert ex.error is not None and ex.error.name == "NameError"
    assert s.get("kept.txt") == b"k"
