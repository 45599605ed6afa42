"""A cell's life and a session's: per-cell deadlines (a catchable CellTimeout, then a kill and
restart after the grace period), structured outcomes and metrics on every execute_reply,
kernel deaths, output caps, idle eviction with the namespace saved and revived, and sessions
that survive a kenneld restart. Real kenneld, real jupyter_client."""

import glob
import json
import os
import shutil
import statistics
import time

import pytest

from .itest_helpers import (close_client, control, finish, run, shell_reply, shell_request,
                           skip_without_disk_caps, squat, wait_for, wait_iopub, wait_ready)
from .kenneld_proc import new_kenneld
from large_result import MAKE_LARGE_RESULT, WRITE_LARGE_RESULT

GRACE = ["--grace", "1"]


def _meta(cell):
    return cell.reply["metadata"]


def _send_with_metadata(kc, code, metadata):
    msg = kc.session.msg("execute_request", {"code": code, "silent": False, "store_history": True,
                                             "user_expressions": {}, "allow_stdin": False,
                                             "stop_on_error": True}, metadata=metadata)
    kc.shell_channel.send(msg)
    return msg["header"]["msg_id"]


@pytest.mark.spawner
def test_outcome_and_metrics_of_a_plain_cell(session):
    cell = run(session, "sum(range(2_000_000))")
    md = _meta(cell)
    assert md["outcome"] == "ok"
    assert md["metrics"]["wall_ms"] >= 0
    assert md["metrics"]["cpu_ms"] > 0
    assert md["metrics"]["peak_memory_bytes"] > 10 << 20
    assert _meta(run(session, "1/0"))["outcome"] == "error"


@pytest.mark.quiet
@pytest.mark.parametrize("kenneld", [GRACE], indirect=True)
def test_deadline_raises_catchable_timeout_and_keeps_state(kenneld, connect):
    info = kenneld.create("limited", limits={"timeout": 2})
    kc = connect(info["connection_file"])
    run(kc, "kept = 42")
    t = time.monotonic()
    cell = run(kc, "while True: pass", timeout=10)
    took = time.monotonic() - t
    assert cell.content["status"] == "error" and cell.content["ename"] == "CellTimeout"
    assert _meta(cell)["outcome"] == "timeout"
    assert 2 <= took <= 3.5, took
    assert run(kc, "kept").result == "42"
    # (A `for` loop: CPython 3.11.2 lets an exception a signal handler raises at the jump of
    # a `while True` loop escape the loop's own try statement, in any Python program.)
    assert run(kc, "try:\n    for i in range(10**12): pass\nexcept TimeoutError:\n"
               "    caught = 'yes'\ncaught", timeout=10).result == "'yes'"
    info = kenneld.ok("info_request", {"session": "limited"})["session"]
    assert info["restarts"] == 0 and info["last_outcome"] == "timeout"


@pytest.mark.spawner
@pytest.mark.quiet
@pytest.mark.parametrize("kenneld", [GRACE], indirect=True)
def test_a_cell_that_ignores_its_deadline_is_killed_and_the_kernel_restarted(kenneld, connect):
    info = kenneld.create("stubborn", limits={"timeout": 1})
    kc = connect(info["connection_file"])
    run(kc, "kept = 42")
    t = time.monotonic()
    stubborn = kc.execute("for _ in range(10**9):\n    try:\n        for i in range(10**12): pass\n"
                          "    except BaseException:\n        pass")
    queued = kc.execute("1 + 1")
    cell = finish(kc, stubborn, timeout=10)
    assert time.monotonic() - t < 4
    assert cell.content["ename"] == "CellTimeout"
    assert "restarted" in cell.content["evalue"] and "state is lost" in cell.content["evalue"]
    assert _meta(cell)["outcome"] == "timeout"
    assert finish(kc, queued).content["status"] == "aborted"  # stop_on_error
    assert run(kc, "kept", timeout=15).content["ename"] == "NameError"
    assert kenneld.ok("info_request", {"session": "stubborn"})["session"]["restarts"] == 1


@pytest.mark.quiet
@pytest.mark.parametrize("kenneld", [GRACE], indirect=True)
def test_a_sleeping_child_does_not_outlast_the_deadline(kenneld, connect):
    info = kenneld.create("child", limits={"timeout": 1})
    kc = connect(info["connection_file"])
    run(kc, "pass")  # the kernel runs: a cold start (--spawner exec) is not the cell's time
    t = time.monotonic()
    cell = run(kc, "import subprocess\nsubprocess.run(['sleep', '30'])", timeout=10)
    assert time.monotonic() - t < 4
    assert cell.content["status"] == "error"
    assert _meta(cell)["outcome"] == "timeout"
    assert run(kc, "'alive'", timeout=15).result == "'alive'"


@pytest.mark.spawner
@pytest.mark.quiet  # a 1 s grace: under the parallel phase's load the kill came first once
@pytest.mark.parametrize("kenneld", [GRACE], indirect=True)
@pytest.mark.parametrize("leave", ["os.setsid()", "os.setpgrp()"])
def test_a_kernel_that_left_its_process_group_still_gets_deadlines_and_interrupts(
        kenneld, connect, leave):
    """kenneld signals the session's process group; a kernel out of it gets the signal from
    the session's init, and so a CellTimeout (state kept) rather than the kill."""
    info = kenneld.create("leaver", limits={"timeout": 2})
    kc = connect(info["connection_file"])
    run(kc, f"import os\n{leave}\nkept = 42\nos.getpgrp() == os.getpid()")
    cell = run(kc, "import time\ntime.sleep(30)", timeout=10)
    assert cell.content["ename"] == "CellTimeout", cell.content
    assert _meta(cell)["outcome"] == "timeout"
    assert "restarted" not in cell.content["evalue"]
    assert run(kc, "kept").result == "42"
    msg_id = kc.execute("time.sleep(30)")
    wait_iopub(kc, msg_id, "execute_input")
    time.sleep(0.2)
    assert control(kc, "interrupt_request")["content"]["status"] == "ok"
    assert shell_reply(kc, msg_id, timeout=5)["content"]["ename"] == "KeyboardInterrupt"
    assert run(kc, "kept").result == "42"
    assert kenneld.ok("info_request", {"session": "leaver"})["session"]["restarts"] == 0


@pytest.mark.quiet
@pytest.mark.parametrize("kenneld", [GRACE], indirect=True)
def test_a_deadline_another_thread_took_still_ends_the_cell_and_keeps_state(kenneld, connect):
    """The kernel's main thread blocks the deadline's signal (as subprocess does around its
    vfork), so Linux gives it to the cell's own thread: the main thread's wait must end with
    a CellTimeout, not the kill after the grace period."""
    info = kenneld.create("threads", limits={"timeout": 1})
    kc = connect(info["connection_file"])
    run(kc, "kept = 42")
    cell = run(kc, "import signal, threading, time\n"
                   "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
                   "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})\n"
                   "try:\n    time.sleep(30)\n"
                   "finally:\n    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})",
               timeout=10)
    assert cell.content["ename"] == "CellTimeout", cell.content
    assert "restarted" not in cell.content["evalue"]
    assert run(kc, "kept").result == "42"
    assert kenneld.ok("info_request", {"session": "threads"})["session"]["restarts"] == 0


@pytest.mark.spawner
@pytest.mark.quiet
@pytest.mark.parametrize("kenneld", [GRACE], indirect=True)
def test_a_deadline_reaches_the_process_group_not_a_process_in_its_own_session(kenneld, connect):
    """As docs/sessions.md ("A cell's deadline") says: a background process in the kernel's
    group ends at a later cell's deadline; one started in its own session lives on."""
    info = kenneld.create("background", limits={"timeout": 1})
    kc = connect(info["connection_file"])
    run(kc, "import subprocess\n"
            "grouped = subprocess.Popen(['sleep', '60'])\n"
            "own = subprocess.Popen(['sleep', '60'], start_new_session=True)")
    assert run(kc, "import time\ntime.sleep(30)", timeout=10).content["ename"] == "CellTimeout"
    assert run(kc, "grouped.wait(5), own.poll()").result == "(-12, None)"  # -SIGUSR2


@pytest.mark.quiet
def test_deadline_per_request_in_metadata(session):
    run(session, "pass")  # the kernel runs: a cold start (--spawner exec) is not the cell's time
    t = time.monotonic()
    msg_id = _send_with_metadata(session, "import time\ntime.sleep(20)", {"kennel": {"timeout": 1}})
    reply = shell_reply(session, msg_id, timeout=10)
    assert reply["content"]["ename"] == "CellTimeout"
    assert reply["metadata"]["outcome"] == "timeout"
    assert time.monotonic() - t < 3


def test_a_cell_s_own_timeout_of_zero_means_none_and_a_bad_one_is_refused(kenneld, connect):
    """Under a session's 1 s deadline, a cell may ask for none (0, as --timeout 0 says); a
    timeout that is not a number of seconds (negative, a string, true) was silently replaced
    by the session's, and is now refused without running, as a failed cell."""
    kc = connect(kenneld.create("own-timeout", limits={"timeout": 1})["connection_file"])
    run(kc, "pass")
    msg_id = _send_with_metadata(kc, "import time\ntime.sleep(1.5)\n'slept'", {"kennel": {"timeout": 0}})
    reply = shell_reply(kc, msg_id, timeout=10)
    assert reply["content"]["status"] == "ok", reply["content"]
    assert reply["metadata"]["outcome"] == "ok"
    for bad in (-1, "5", True, [5]):
        msg_id = _send_with_metadata(kc, "ran = True", {"kennel": {"timeout": bad}})
        reply = shell_reply(kc, msg_id, timeout=10)
        assert reply["content"]["status"] == "error", (bad, reply["content"])
        assert reply["content"]["ename"] == "BadRequest", (bad, reply["content"])
        assert isinstance(reply["content"]["execution_count"], int)
    assert run(kc, "'ran' in dir()").result == "False"
    msg_id = _send_with_metadata(kc, "1 + 1", {"kennel": {"timeout": None}})  # null: none given
    assert shell_reply(kc, msg_id, timeout=10)["content"]["status"] == "ok"


@pytest.mark.spawner
@pytest.mark.parametrize("code, outcome", [
    ("import os\nos._exit(3)", "crashed"),
    ("import ctypes\nctypes.string_at(0)", "crashed"),
])
def test_kernel_death_is_a_reply_with_its_outcome(session, code, outcome):
    run(session, "kept = 1")
    cell = run(session, code, timeout=15)
    assert cell.content["ename"] == "KernelDied"
    assert _meta(cell)["outcome"] == outcome
    assert run(session, "'kept' in dir()", timeout=15).result == "False"


@pytest.mark.parametrize("kenneld", [["--max-output", "100K"]], indirect=True)
def test_output_cap(kenneld, connect):
    kc = connect(kenneld.create("chatty")["connection_file"])
    cell = run(kc, "for i in range(2000): print('x' * 1000)\n'done'", timeout=20)
    out = cell.stream("stdout")
    assert 50_000 < len(out) <= 100_000
    assert "limit" in cell.stream("stderr")
    assert cell.result == "'done'"
    assert _meta(cell)["outcome"] == "output_truncated"
    assert _meta(run(kc, "print('fresh budget')"))["outcome"] == "ok"


def _iopub_of(kc, msg_id, seconds, until, after=0.5):
    """Every iopub message whose parent is msg_id, until until(messages so far) holds, and
    for `after` seconds more (what should not come would come then), or seconds in all."""
    out, deadline, done_at = [], time.monotonic() + seconds, None
    while time.monotonic() < (done_at or deadline):
        try:
            m = kc.get_iopub_msg(timeout=0.1)
        except Exception:  # queue.Empty
            continue
        if m["parent_header"].get("msg_id") == msg_id:
            out.append(m)
            if done_at is None and until(out):
                done_at = min(deadline, time.monotonic() + after)
    return out


def _bytes(msgs, msg_type):
    return sum(len(json.dumps(m["content"])) for m in msgs if m["msg_type"] == msg_type)


@pytest.mark.parametrize("kenneld", [["--max-output", "100K"]], indirect=True)
def test_output_cap_holds_for_results_clear_output_and_threads_after_the_cell(kenneld, connect):
    kc = connect(kenneld.create("sly")["connection_file"])
    # Many results in one cell: the first passes, the rest count against the cap.
    cell = run(kc, "import sys\nfor i in range(40): sys.displayhook('y' * 10000)", timeout=20)
    assert _bytes(cell.iopub, "execute_result") <= 120_000
    assert "limit" in cell.stream("stderr")
    assert _meta(cell)["outcome"] == "output_truncated"
    # clear_output is output too.
    cell = run(kc, "from IPython.display import clear_output\n"
                   "for i in range(20000): clear_output()", timeout=30)
    assert len(cell.of_type("clear_output")) < 10_000  # of 20,000: ~17 bytes apiece count
    assert "limit" in cell.stream("stderr")
    # A thread that goes on printing once its cell has ended shares that cell's budget.
    msg_id = kc.execute("import threading, time\n"
                        "def chatter():\n"
                        "    time.sleep(0.3)\n"
                        "    for i in range(1000): print('z' * 1000)\n"
                        "threading.Thread(target=chatter).start()")
    # Until the cap's notice (and the cell's idle) came: under load the thread takes its time.
    late = _iopub_of(kc, msg_id, 60, lambda ms: any(
        "limit" in m["content"].get("text", "") for m in ms if m["msg_type"] == "stream") and any(
        m["msg_type"] == "status" and m["content"]["execution_state"] == "idle" for m in ms))
    assert any(m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
               for m in late)
    printed = "".join(m["content"]["text"] for m in late
                      if m["msg_type"] == "stream" and m["content"]["name"] == "stdout")
    assert 50_000 < len(printed) <= 100_000
    assert any("limit" in m["content"].get("text", "") for m in late if m["msg_type"] == "stream")
    assert run(kc, "'still here'").result == "'still here'"


@pytest.mark.quiet
def test_output_flood_does_not_slow_other_sessions(kenneld, connect):
    flooder = connect(kenneld.create("flood")["connection_file"])
    other = connect(kenneld.create("calm")["connection_file"])
    msg_id = flooder.execute("chunk = 'y' * (1 << 20)\nfor i in range(30): print(chunk)")  # 3x the cap
    times = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(times) < 30:
        t = time.monotonic()
        assert control(other, "kernel_info_request", timeout=5)["content"]["status"] == "ok"
        times.append(time.monotonic() - t)
    cell = finish(flooder, msg_id, timeout=60)
    assert "limit" in cell.stream("stderr")
    assert statistics.median(times) < 0.1, times


@pytest.mark.spawner
@pytest.mark.parametrize("kenneld", [["--idle", "1"]], indirect=True)
def test_idle_eviction_saves_and_revives_the_namespace(kenneld, connect):
    info = kenneld.create("sleepy")
    kc = connect(info["connection_file"])
    run(kc, "import numpy as np, pandas as pd, socket\n"
            "x = 7\narr = np.arange(5)\ndf = pd.DataFrame({'a': [1, 2]})\n"
            "def double(v): return 2 * v\n"
            "gen = (i for i in range(3))\nsock = socket.socket(socket.AF_UNIX)", timeout=20)
    pid = kenneld.ok("info_request", {"session": "sleepy"})["session"]["kernel_pid"]
    evicted = wait_for(lambda: kenneld.ok("info_request", {"session": "sleepy"})["session"]
                       ["state"] == "evicted", timeout=10, what="eviction")
    assert evicted
    info = kenneld.ok("info_request", {"session": "sleepy"})["session"]
    assert info["kernel_pid"] == 0
    assert not os.path.exists(f"/proc/{pid}")
    snapshot = os.path.join(os.path.dirname(info["connection_file"]), "snapshot")
    assert os.path.exists(snapshot)
    cell = run(kc, "(x, int(arr.sum()), int(df.a.sum()), double(4))", timeout=20)
    assert cell.result == "(7, 10, 3, 8)"
    notice = cell.stream("stderr")
    assert "gen" in notice and "sock" in notice and "x" not in notice.split(":")[-1]
    assert run(kc, "'gen' in dir()").result == "False"
    assert not os.path.exists(snapshot)


@pytest.mark.spawner
@pytest.mark.parametrize("kenneld", [["--idle", "1"]], indirect=True)
def test_large_arrays_come_back_mapped_from_the_snapshot_file_and_stay_the_kernels(
        kenneld, connect):
    """A revival passes the snapshot's file, which the kernel maps: large arrays (a
    DataFrame's date column too) come back equal and writable, aligned, and private to
    the kernel: a process it forks writes into its own copy."""
    info = kenneld.create("mapped")
    kc = connect(info["connection_file"])
    run(kc, "import numpy as np, pandas as pd, os\n"
            "arr = np.arange(2_000_000, dtype=np.float64)\n"
            "df = pd.DataFrame({'t': pd.date_range('2026-01-01', periods=20_000, freq='s'),"
            " 'v': np.arange(20_000)})", timeout=20)
    wait_for(lambda: kenneld.ok("info_request", {"session": "mapped"})["session"]["state"]
             == "evicted", timeout=20, what="eviction")
    cell = run(kc, "pid = os.fork()\n"
                   "if pid == 0:\n    arr[0] = -1.0\n    os._exit(0)\n"
                   "os.waitpid(pid, 0)\n"
                   "(float(arr[0]), float(arr.sum()), arr.flags.writeable, arr.flags.aligned,"
                   " str(df.t.iloc[-1]), int(df.v.sum()))", timeout=30)
    assert cell.result == ("(0.0, 1999999000000.0, True, True, '2026-01-01 05:33:19', "
                           "199990000)"), (cell.result, cell.stream("stderr"))
    assert "(its file, mapped)" in kenneld.log(None)
    assert run(kc, "arr[1] = 5.0; float(arr[1])").result == "5.0"


def _deleted_snapshots_held(pid, session_dir):
    """The deleted snapshot files of session_dir that process pid holds open."""
    held = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target == os.path.join(session_dir, "snapshot") + " (deleted)":
            held.append(target)
    return held


@pytest.mark.parametrize("kenneld", [["--idle", "2"]], indirect=True)
def test_kenneld_holds_the_file_a_revived_kernel_maps_until_that_kernel_is_gone(
        kenneld, connect):
    """The snapshot a revived kernel maps is deleted once it is loaded; kenneld keeps it open
    while that kernel lives, so that the kernel's exit (which an eviction waits for) is not
    the file's last close, which frees its page cache and blocks (~22 ms per 100 MB), and
    lets go of it on its snapshot worker once the kernel is gone: nothing stays held."""
    info = kenneld.create("held")
    session_dir = os.path.dirname(info["connection_file"])
    kc = connect(info["connection_file"])
    run(kc, "import numpy as np\narr = np.arange(1_000_000, dtype=np.float64)", timeout=20)
    evicted = lambda: kenneld.ok("info_request", {"session": "held"})["session"]["state"] \
        == "evicted"
    wait_for(evicted, timeout=20, what="the eviction")
    assert run(kc, "float(arr.sum())", timeout=20).result == "499999500000.0"
    # Loaded, so dropped (on the snapshot worker, maybe a moment after), and held; well
    # within the 2 s of idleness that evict the kernel again.
    wait_for(lambda: len(_deleted_snapshots_held(kenneld.proc.pid, session_dir)) == 1,
             timeout=1.5, what="kenneld to hold the deleted snapshot the kernel maps")
    wait_for(evicted, timeout=20, what="the second eviction")
    wait_for(lambda: not _deleted_snapshots_held(kenneld.proc.pid, session_dir), timeout=10,
             what="kenneld to let go of the file the gone kernel mapped")
    assert run(kc, "float(arr.sum())", timeout=20).result == "499999500000.0"


@pytest.mark.parametrize("kenneld", [["--idle", "1"]], indirect=True)
def test_eviction_keeps_underscore_names_and_the_history(kenneld, connect):
    kc = connect(kenneld.create("history")["connection_file"])
    run(kc, "_cache = {'a': 1}")                                   # 1
    run(kc, "x = 6")                                               # 2
    assert run(kc, "x * 7").result == "42"                         # 3
    assert run(kc, "[x]").result == "[6]"                          # 4
    run(kc, "gen = (i for i in range(3))\ngen")                    # 5: an output that cannot be kept
    wait_for(lambda: kenneld.ok("info_request", {"session": "history"})["session"]["state"]
             == "evicted", timeout=10, what="eviction")
    # `_` and `__` are the last outputs kept (cell 5's could not be).
    cell = run(kc, "(_cache, In[3], Out[3], _3, _i3, _, __, get_ipython().execution_count)",
                timeout=20)
    assert cell.result == "({'a': 1}, 'x * 7', 42, 42, 'x * 7', [6], 42, 6)", cell.result
    notice = cell.stream("stderr")
    assert "Out[5]" in notice and "gen" in notice and "_cache" not in notice
    # `_` the user assigned is the user's, across an eviction too.
    run(kc, "_ = 'mine'")
    wait_for(lambda: kenneld.ok("info_request", {"session": "history"})["session"]["state"]
             == "evicted", timeout=10, what="a second eviction")
    assert run(kc, "10").result == "10"
    assert run(kc, "_", timeout=20).result == "'mine'"
    tail = shell_request(kc, "history", hist_access_type="range", session=0, start=1, stop=4,
                         raw=True, output=False)
    assert [h[1:] for h in tail["history"]] == [[1, "_cache = {'a': 1}"], [2, "x = 6"],
                                                [3, "x * 7"]]


@pytest.mark.parametrize("kenneld", [["--idle", "1"]], indirect=True)
def test_eviction_leaves_a_file_open_for_writing_as_it_was(kenneld, connect):
    # The open file object was pickled and reopened with mode 'w' on revival: emptied.
    kc = connect(kenneld.create("writer")["connection_file"])
    run(kc, "fh = open('log.txt', 'w')\nfh.write('important data\\n')\nfh.flush()")
    wait_for(lambda: kenneld.ok("info_request", {"session": "writer"})["session"]["state"]
             == "evicted", timeout=10, what="eviction")
    cell = run(kc, "open('log.txt').read()", timeout=20)
    assert cell.result == "'important data\\n'"
    assert "fh" in cell.stream("stderr")


@pytest.mark.parametrize("kenneld", [["--idle", "1", "--timeout", "2", *GRACE]], indirect=True)
def test_saving_state_has_a_deadline(kenneld, connect):
    # Pickling runs user code; one that never returns once left the session "saving" for
    # good. It gets a cell's deadline: the save stops there, and the kernel stays as it was,
    # not evicted (keeping it beats losing its state).
    kc = connect(kenneld.create("stuck")["connection_file"])
    run(kc, "import time\nclass Stuck:\n    def __reduce__(self):\n        time.sleep(3600)\n"
            "s = Stuck()\nkept = 42")
    pid = kenneld.ok("info_request", {"session": "stuck"})["session"]["kernel_pid"]
    wait_for(lambda: kenneld.ok("info_request", {"session": "stuck"})["session"]["state"]
             == "saving", timeout=10, what="the save to start")
    wait_for(lambda: kenneld.ok("info_request", {"session": "stuck"})["session"]["state"]
             == "idle", timeout=10, what="the save to be stopped")
    cell = run(kc, "(kept, type(s).__name__)", timeout=20)
    assert cell.result == "(42, 'Stuck')"
    assert kenneld.ok("info_request", {"session": "stuck"})["session"]["kernel_pid"] == pid


@pytest.mark.parametrize("kenneld", [["--idle", "1"]], indirect=True)
def test_a_session_past_a_frame_is_evicted_and_revived_whole(kenneld, connect):
    """The kernel writes its snapshot into a file kenneld gives it, not through the pipe
    (whose frames stop at 64 MiB): an 80 MiB array and a 70 MB result shown once and bound
    to no name are both kept, and nothing is reported lost."""
    info = kenneld.create("bigout")
    kc = connect(info["connection_file"])
    run(kc, "import numpy as np\narr = np.arange(10 << 20, dtype=np.float64)\nkept = 1\n"
            "class Big:\n    def __init__(self):\n        self.data = bytes(70 << 20)\n"
            "    def __repr__(self):\n        return 'Big()'", timeout=20)
    assert run(kc, "Big()").result == "Big()"
    wait_for(lambda: kenneld.ok("info_request", {"session": "bigout"})["session"]["state"]
             == "evicted", timeout=30, what="the eviction")
    snapshot = os.path.join(os.path.dirname(info["connection_file"]), "snapshot")
    assert os.path.getsize(snapshot) > (80 << 20) + (70 << 20)
    cell = run(kc, "(kept, float(arr[-1]), 2 in Out, In[2], len(Out[2].data))", timeout=30)
    assert cell.result == f"(1, {float((10 << 20) - 1)}, True, 'Big()', {70 << 20})", \
        (cell.result, cell.stream("stderr"))
    assert cell.stream("stderr") == ""


@pytest.mark.parametrize("kenneld", [["--idle", "1"]], indirect=True)
def test_a_snapshot_larger_than_the_memory_limit_is_refused_and_the_kernel_kept(kenneld,
                                                                              connect):
    """A snapshot is what the kernel held in memory, pickled: a kernel that says its snapshot
    is larger than its memory limit (its code changed to lie) is refused before it writes a
    byte, and keeps its state; the copy and the write's deadline stay bounded so."""
    kc = connect(kenneld.create("boast")["connection_file"])
    run(kc, "import kennel_pipe\nkept = 41\n_honest = kennel_pipe.Pipe.send\n"
            "def _boast(self, op, *parts, **kw):\n"
            "    if op.get('op') == 'save_ready':\n        op = dict(op, bytes=2 << 30)\n"
            "    return _honest(self, op, *parts, **kw)\n"
            "kennel_pipe.Pipe.send = _boast")
    wait_for(lambda: "more than the session's memory limit" in kenneld.log(None), timeout=10,
             what="the save to be refused")
    assert kenneld.ok("info_request", {"session": "boast"})["session"]["state"] != "evicted"
    assert run(kc, "kept + 1").result == "42"
    run(kc, "kennel_pipe.Pipe.send = _honest")
    wait_for(lambda: kenneld.ok("info_request", {"session": "boast"})["session"]["state"]
             == "evicted", timeout=10, what="the eviction")
    assert run(kc, "kept", timeout=20).result == "41"


@pytest.mark.parametrize("kenneld", [["--idle", "1"]], indirect=True)
def test_a_kernel_that_writes_other_than_it_announced_is_not_evicted(kenneld, connect):
    """The kernel says its snapshot's size before it gets the file; a kernel whose code was
    changed to write more than that (user code can reach the kernel's own) is not evicted
    on that file: it keeps its state and serves on, and evicts once it writes what it says."""
    kc = connect(kenneld.create("liar")["connection_file"])
    run(kc, "import os, kennel_pipe\nkept = 41\n_honest = kennel_pipe.Pipe.write_file\n"
            "def _more(self, fd, chunks):\n    _honest(self, fd, chunks)\n"
            "    os.pwrite(fd, b'more', os.fstat(fd).st_size)\n"
            "kennel_pipe.Pipe.write_file = _more")
    pid = kenneld.ok("info_request", {"session": "liar"})["session"]["kernel_pid"]
    wait_for(lambda: "bytes, not the" in kenneld.log(None), timeout=10,
             what="the save to be refused")
    session = kenneld.ok("info_request", {"session": "liar"})["session"]
    assert session["state"] != "evicted" and session["kernel_pid"] == pid
    assert run(kc, "kept + 1").result == "42"
    run(kc, "kennel_pipe.Pipe.write_file = _honest")
    wait_for(lambda: kenneld.ok("info_request", {"session": "liar"})["session"]["state"]
             == "evicted", timeout=10, what="the eviction")
    assert run(kc, "kept", timeout=20).result == "41"


@pytest.mark.parametrize("kenneld", [["--idle", "1", "--disk", "16M"]], indirect=True)
def test_a_snapshot_counts_against_the_disk_cap(kenneld, connect):
    """A session's snapshot and its workspace together stay within --disk: a snapshot that
    would pass it is not kept, and the kernel stays (its state is not lost)."""
    info = kenneld.create("snapcap")
    skip_without_disk_caps(kenneld)
    kc = connect(info["connection_file"])
    pid = kenneld.ok("info_request", {"session": "snapcap"})["session"]["kernel_pid"]
    run(kc, "import os\nopen('fill.bin', 'wb').write(os.urandom(10 << 20))\n"
            "blob = os.urandom(8 << 20)")
    wait_for(lambda: "over the session's disk cap" in kenneld.log(None), timeout=10,
             what="the save to be refused")
    session = kenneld.ok("info_request", {"session": "snapcap"})["session"]
    assert session["state"] == "idle" and session["kernel_pid"] == pid
    session_dir = os.path.dirname(info["connection_file"])
    assert not [f for f in os.listdir(session_dir) if f.startswith("snapshot")]
    # With room for it, the next idle period evicts, and the state comes back.
    # The kernel cannot write a file past the cap either (RLIMIT_FSIZE): a kernel that
    # announced a small snapshot and then wrote more would stop there.
    cap = 16 << 20
    assert run(kc, "import resource\nresource.getrlimit(resource.RLIMIT_FSIZE)").result == \
        f"({cap}, {cap})"
    run(kc, "os.remove('fill.bin')")
    wait_for(lambda: kenneld.ok("info_request", {"session": "snapcap"})["session"]["state"]
             == "evicted", timeout=10, what="the eviction")
    assert run(kc, "len(blob)", timeout=20).result == str(8 << 20)


@pytest.mark.spawner
@pytest.mark.own_kenneld
def test_kenneld_restart_brings_sessions_back(kenneld, connect):
    info = kenneld.create("durable")
    kc = connect(info["connection_file"])
    run(kc, "kept = 'across restarts'")
    close_client(kc)
    kenneld.stop()  # SIGTERM: every idle session saves its state
    assert kenneld.proc.returncode == 0
    assert os.path.exists(info["connection_file"])
    second = kenneld.successor()
    second.start()
    try:
        back = second.call("info_request", {"session": "durable"}).get("session")
        # Seen once under make check: the session was not served. Its log says why (a port
        # taken by the parallel test run in between is the suspect).
        assert back and back["id"] == info["id"] and back["state"] == "evicted", second.log()
        kc2 = connect(info["connection_file"])  # the same connection file still works
        assert run(kc2, "kept", timeout=20).result == "'across restarts'"
    finally:
        second.stop()
    assert second.proc.returncode == 0


@pytest.mark.own_kenneld
def test_a_session_idle_past_its_ttl_survives_kenneld_stopping(kenneld, connect):
    """--idle at least --ttl (a day each by default here): the save kenneld's stop asks for
    once armed the time to live at 1 ms and ended the session, directory and all, while
    kenneld waited for the other saves."""
    info = kenneld.create("longidle", limits={"idle": 86400})
    kc = connect(info["connection_file"])
    run(kc, "kept = 'still here'")
    close_client(kc)
    kenneld.stop()
    assert kenneld.proc.returncode == 0
    assert "ending it" not in kenneld.log(None)
    second = kenneld.successor()
    second.start()
    try:
        listed = {x["name"]: x["state"] for x in second.sessions()}
        assert listed.get("longidle") == "evicted", (listed, second.log())
        assert run(connect(info["connection_file"]), "kept", timeout=20).result == "'still here'"
    finally:
        second.stop()


TTL_S = 12  # room for a stop and a start on a machine busy with the other test run


@pytest.mark.own_kenneld
@pytest.mark.parametrize("kenneld", [["--ttl", str(TTL_S)]], indirect=True)
def test_a_restart_keeps_each_sessions_history_and_ttl_clock(kenneld, connect):
    """created, cells, restarts and the last outcome, the names the save could not keep (told
    to the first cell after the revival), and the time to live counted from the last use, not
    from the next kenneld's start."""
    info = kenneld.create("record")
    kc = connect(info["connection_file"])
    run(kc, "import os\nos._exit(3)")                                # restarts: 1
    run(kc, "x = 6\ngen = (i for i in range(3))")
    before = kenneld.ok("info_request", {"session": "record"})["session"]
    assert before["restarts"] == 1 and before["cells"] == 1, before  # the crash counts not
    close_client(kc)
    kenneld.stop()
    assert kenneld.proc.returncode == 0
    stopped = time.monotonic()
    time.sleep(3)
    second = kenneld.successor(["--ttl", str(TTL_S)])
    second.start()
    try:
        reply = second.call("info_request", {"session": "record"})
        assert reply["status"] == "ok", (
            f"{reply}: the next kenneld served {time.monotonic() - stopped:.1f} s after the stop "
            f"(the time to live is {TTL_S} s)\n{second.log()[-3000:]}")
        back = reply["session"]
        assert (back["created"], back["cells"], back["restarts"], back["last_outcome"]) == \
            (before["created"], 1, 1, "ok"), back  # kennel ls's LAST was empty after a restart
        # Evicted since the stop: its time to live ends TTL_S after its last use, whenever
        # this kenneld started.
        wait_for(lambda: "record" not in [x["name"] for x in second.sessions()],
                 timeout=TTL_S + 7, what="the time to live to end the session")
        assert time.monotonic() - stopped < TTL_S + 2.5
    finally:
        second.stop()


@pytest.mark.own_kenneld
@pytest.mark.parametrize("kenneld", [["--ttl", "5"]], indirect=True)
def test_sessions_in_use_when_kenneld_stops_count_the_stop_as_their_last_use(kenneld, connect):
    """A cell running longer than --ttl, and a session never evicted (idle 0) and unused
    longer than that: neither has a time to live running while its kernel lives, and the
    next kenneld must not end them at once."""
    busy = connect(kenneld.create("busy")["connection_file"])
    run(busy, "pass")
    msg_id = busy.execute("import time\ntime.sleep(60)")
    kept = connect(kenneld.create("kept", limits={"idle": 0})["connection_file"])
    run(kept, "v = 1")
    time.sleep(6)
    close_client(busy)
    close_client(kept)
    second = _restart(kenneld, ["--ttl", "5"])
    try:
        assert {x["name"]: x["state"] for x in second.sessions()} == \
            {"busy": "dead", "kept": "evicted"}
    finally:
        second.stop()


@pytest.mark.own_kenneld
def test_a_restart_keeps_the_names_a_save_lost(kenneld, connect):
    info = kenneld.create("lossy")
    run(connect(info["connection_file"]), "x = 6\ngen = (i for i in range(3))")
    second = _restart(kenneld)
    try:
        cell = run(connect(info["connection_file"]), "x", timeout=20)
        assert cell.result == "6"
        assert "gen" in cell.stream("stderr"), cell.stream("stderr")
        assert second.ok("info_request", {"session": "lossy"})["session"]["cells"] == 2
    finally:
        second.stop()


@pytest.mark.own_kenneld
def test_a_restart_tells_a_session_busy_at_the_stop_that_its_state_is_gone(kenneld, connect):
    """A session whose cell ran when kenneld stopped has no saved state; its first cell under
    the next kenneld once got a bare NameError. It is told, as after a lossy eviction; a
    session that was saved, or never ran a kernel, is told nothing."""
    busy = kenneld.create("busy")
    kc = connect(busy["connection_file"])
    run(kc, "x = 6")
    kc.execute("import time\ntime.sleep(60)")
    saved = kenneld.create("saved")
    run(connect(saved["connection_file"]), "y = 7")
    unused = kenneld.create("unused")
    wait_for(lambda: kenneld.ok("info_request", {"session": "busy"})["session"]["state"]
             == "busy", timeout=10, what="the cell to run")
    second = _restart(kenneld)

    def ready(info):
        """A client of the session, once its kernel answers: each of the three starts one,
        after the new kenneld's zygote, on a machine busy with the other test run."""
        kc = connect(info["connection_file"], ready=False)
        wait_ready(kc, timeout=40)
        return kc

    try:
        kc = ready(busy)
        cell = run(kc, "'x' in dir()", timeout=20)
        assert cell.result == "False"
        assert "kenneld stopped while this session's kernel ran" in cell.stream("stderr"), \
            cell.stream("stderr")
        again = run(kc, "1")
        assert again.stream("stderr") == "", "told once"
        kept = run(ready(saved), "y", timeout=20)
        assert kept.result == "7" and kept.stream("stderr") == "", kept.stream("stderr")
        fresh = run(ready(unused), "2", timeout=20)
        assert fresh.stream("stderr") == "", fresh.stream("stderr")
    finally:
        second.stop()


def _restart(kenneld, args=()):
    """Stop kenneld (checking it stopped cleanly) and start its successor with args."""
    kenneld.stop()
    assert kenneld.proc.returncode == 0
    second = kenneld.successor(args)
    second.start()
    return second


@pytest.mark.own_kenneld
@pytest.mark.timeout_s(60)  # two kennelds in turn, each stop a save
def test_a_taken_port_moves_a_restored_session_and_a_copied_directory_is_kept_aside(kenneld,
                                                                                  connect):
    """A port another program took while kenneld was down once made the next kenneld remove
    the session, workspace and saved state, then left it unserved until a later restart: it
    is served on new ports, its connection file rewritten. A copy of a session's directory
    took over the live session's mounted workspace: it is kept aside, not served."""
    info = kenneld.create("porty")
    session_dir = os.path.dirname(info["connection_file"])
    run(connect(info["connection_file"]), "open('mine.txt', 'w').write('precious')\nv = 1")
    kenneld.stop()
    assert kenneld.proc.returncode == 0
    shutil.copytree(session_dir, session_dir + "-copy", symlinks=True)
    with open(info["connection_file"]) as f:
        port = json.load(f)["control_port"]
    squatter = squat(port)
    second = kenneld.successor()
    try:
        second.start()
        sessions = second.ok("list_request")["sessions"]
        assert [s["id"] for s in sessions] == [info["id"]], second.log(None)
        assert "serving it on new ports" in second.log(None)
        with open(info["connection_file"]) as f:
            assert json.load(f)["control_port"] != port
        served = second.ok("info_request", {"session": "porty"})["session"]
        assert served["connection_file"] == info["connection_file"]
        cell = run(connect(info["connection_file"]), "open('mine.txt').read(), v", timeout=20)
        assert cell.result == "('precious', 1)"
        assert "meta.json names another session" in second.log(None)
        assert os.path.isdir(session_dir + "-copy")
    finally:
        squatter.close()
        second.stop()
        shutil.rmtree(session_dir + "-copy", ignore_errors=True)


@pytest.mark.own_kenneld
def test_a_restart_with_fewer_slots_keeps_each_sessions_uid(kenneld, connect):
    """Each session's workspace belongs to its uid slot; a kenneld with a smaller
    --max-sessions moved a session to another slot, whose uid could not enter its
    workspace any more (KernelStartFailed at every start)."""
    names = ["q1", "q2", "q3", "q4"]
    for name in names:
        kc = connect(kenneld.create(name)["connection_file"])
        run(kc, f"open('{name}.txt', 'w').write('{name}')")
    for name in names[:3]:
        kenneld.ok("end_request", {"session": name})
    second = _restart(kenneld, ["--max-sessions", "2", "--pool", "0"])
    try:
        kc = connect(second.ok("info_request", {"session": "q4"})["session"]["connection_file"])
        assert run(kc, "open('q4.txt').read()", timeout=20).result == "'q4'"
    finally:
        second.stop()


def test_idle_and_timeout_zero_mean_never(kenneld):
    """As kenneld's own --idle 0 and --timeout 0: a session may ask for no eviction and no
    deadline (both were refused)."""
    r = kenneld.cli("new", "--name", "forever", "--idle", "0", "--timeout", "0")
    assert r.returncode == 0, r.stderr
    limits = kenneld.ok("info_request", {"session": "forever"})["session"]["limits"]
    assert limits["idle"] == 0 and limits["timeout"] == 0, limits
    assert kenneld.cli("new", "--name", "bad", "--idle", "x").returncode != 0
    for limits in ({"memory": 0}, {"memory": 200 << 20}):  # no kernel starts under 256 MiB
        r = kenneld.call("create_request", {"name": "bad", "limits": limits})
        assert r["status"] == "error" and r["ename"] == "BadRequest", r
    # A fraction of a millisecond is a millisecond, not "none".
    tiny = kenneld.ok("create_request", {"name": "tiny", "limits": {"timeout": 1e-6}})
    assert tiny["session"]["limits"]["timeout"] == 0.001


def _loops_backed_by(directory):
    """Loop devices whose backing file is in directory (the workspace images of its sessions)."""
    found = []
    for f in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            with open(f) as fh:
                path = fh.read().strip()
        except OSError:
            continue
        if path.startswith(str(directory) + "/"):
            found.append(path)
    return found


@pytest.mark.spawner
@pytest.mark.own_kenneld
@pytest.mark.parametrize("kenneld", [["--idle", "1", "--disk", "32M"]], indirect=True)
def test_a_capped_workspace_survives_eviction_and_restart(kenneld, connect):
    """The workspace image stays mounted across eviction, is unmounted (its loop device freed)
    when kenneld stops, mounted again by the next kenneld, and removed with the session."""
    info = kenneld.create("disk")
    skip_without_disk_caps(kenneld)
    assert info["limits"]["disk"] == 32 << 20
    kc = connect(info["connection_file"])
    run(kc, "open('kept.txt', 'w').write('on disk')\nimport os\n"
            "s = os.statvfs('.')\nsize = s.f_blocks * s.f_frsize")
    assert int(run(kc, "size").result) <= 32 << 20
    # (pooled kernels waiting for new sessions have images of their own)
    assert len(_loops_backed_by(os.path.dirname(info["connection_file"]))) == 1
    wait_for(lambda: kenneld.ok("info_request", {"session": "disk"})["session"]["state"]
             == "evicted", timeout=10, what="eviction")
    assert run(kc, "open('kept.txt').read(), size", timeout=20).result.startswith("('on disk'")
    close_client(kc)
    kenneld.stop()
    assert kenneld.proc.returncode == 0
    assert _loops_backed_by(kenneld.state_dir) == [], "kenneld left its loop devices attached"
    second = kenneld.successor(["--disk", "32M"])
    second.start()
    try:
        kc2 = connect(info["connection_file"])
        assert run(kc2, "open('kept.txt').read()", timeout=20).result == "'on disk'"
        assert "kept.txt" in second.cli("files", "disk").stdout
        second.ok("end_request", {"session": "disk"})
        session_dir = os.path.dirname(info["connection_file"])
        # The directory goes by way of trash/, and the loop device is let go once the
        # kernel's mount namespace is gone, which Linux finishes a little later: look for it
        # there too (not in the whole state directory: the pool's kernels hold images).
        wait_for(lambda: not os.path.exists(session_dir) and not _loops_backed_by(session_dir)
                 and not _loops_backed_by(second.state_dir / "trash"), timeout=5,
                 what="the image's removal")
    finally:
        second.stop()
    assert second.proc.returncode == 0
    assert _loops_backed_by(kenneld.state_dir) == []


def _stop_all(root, *kennelds):
    """Stop whichever of kennelds still run, then remove their root."""
    for k in kennelds:
        if k and k.proc and k.proc.poll() is None:
            k.stop()
    shutil.rmtree(root, ignore_errors=True)


def test_a_crashed_kenneld_leaks_no_loop_device_and_loses_no_file(connect):
    """kill -9: the workspace mounts live in kenneld's own mount namespace, so they go with it
    and the loop devices clear themselves; the next kenneld checks the image and mounts it."""
    root, first = new_kenneld("tcp", ["--disk", "32M"])
    second = None
    try:
        first.start()
        info = first.create("crash")
        skip_without_disk_caps(first)
        kc = connect(info["connection_file"])
        run(kc, "import os\nwith open('kept.txt', 'w') as f:\n    f.write('written')\n"
                "    f.flush()\n    os.fsync(f.fileno())")
        close_client(kc)
        assert len(_loops_backed_by(os.path.dirname(info["connection_file"]))) == 1
        first.proc.kill()
        first.proc.wait(5)
        wait_for(lambda: not _loops_backed_by(first.state_dir), timeout=5,
                 what="the loop device of a killed kenneld to clear")
        first.info_path.unlink()  # stale: SIGKILL left it
        second = first.successor(["--disk", "32M"])
        second.start()
        kc2 = connect(info["connection_file"])
        assert run(kc2, "open('kept.txt').read()", timeout=20).result == "'written'"
    finally:
        _stop_all(root, first, second)
    assert second.proc.returncode == 0
    assert _loops_backed_by(first.state_dir) == []


def test_a_kept_session_without_its_image_gets_a_fresh_one(connect):
    """A session kept without a workspace image (kenneld stopped before the image was made,
    or making it failed) is restored, and its kernel gets a fresh image when it starts."""
    root, first = new_kenneld("tcp", ["--disk", "32M", "--pool", "0"])
    second = None
    try:
        first.start()
        info = first.create("imageless")
        skip_without_disk_caps(first)
        first.stop()
        os.unlink(os.path.join(os.path.dirname(info["connection_file"]), "workspace.img"))
        second = first.successor(["--disk", "32M", "--pool", "0"])
        second.start()
        assert [s["name"] for s in second.sessions()] == ["imageless"]
        kc = connect(info["connection_file"])
        cell = run(kc, "import os\nopen('new.txt', 'w').write('x')\nsorted(os.listdir('.'))",
                   timeout=30)
        assert cell.result == "['new.txt']", cell.content
        assert "new.txt" in second.cli("files", "imageless").stdout
        assert "no workspace image yet" in second.log(tail=None)
    finally:
        _stop_all(root, first, second)


def test_a_session_whose_files_were_cut_short_keeps_its_workspace(connect):
    """meta.json is written whole but not fsynced: after a host crash it may be empty. The
    next kenneld cannot serve that session, but never removes the workspace image (the
    user's files) with it; a session with nothing of the user's is removed."""
    root, first = new_kenneld("tcp", ["--disk", "32M", "--pool", "0"])
    second = None
    try:
        first.start()
        info = first.create("cut")
        skip_without_disk_caps(first)
        kc = connect(info["connection_file"])
        run(kc, "open('precious.txt', 'w').write('keep me')")
        close_client(kc)
        bare = first.create("bare", limits={"disk": 0})
        # Without an image the user's files are in workspace/ itself: they count too.
        files = first.create("files", limits={"disk": 0})
        run(connect(files["connection_file"]), "open('mine.txt', 'w').write('also')")
        first.stop()
        cut, gone, uncapped = (os.path.dirname(i["connection_file"]) for i in (info, bare, files))
        for d in (cut, gone, uncapped):
            open(os.path.join(d, "meta.json"), "w").close()  # what a crash can leave
            if os.path.exists(os.path.join(d, "snapshot")):
                os.remove(os.path.join(d, "snapshot"))
        second = first.successor(["--disk", "32M", "--pool", "0"])
        second.start()
        assert second.sessions() == []
        assert os.path.exists(os.path.join(cut, "workspace.img"))
        assert not os.path.exists(gone)
        assert os.path.exists(os.path.join(uncapped, "workspace", "mine.txt"))
        assert "kept, not served" in second.log(tail=None)
    finally:
        _stop_all(root, first, second)


def test_ending_a_busy_session_answers_its_clients(kenneld, connect):
    """`kennel rm` while a cell runs and another waits: both get an error reply (their
    client once waited for ever)."""
    kc = connect(kenneld.create("busyend")["connection_file"])
    running = kc.execute("import time\ntime.sleep(30)")
    queued = kc.execute("1")
    wait_for(lambda: kenneld.ok("info_request", {"session": "busyend"})["session"]["state"]
             == "busy", timeout=10, what="the cell to run")
    assert kenneld.cli("rm", "busyend").returncode == 0
    for msg_id in (running, queued):
        reply = shell_reply(kc, msg_id, timeout=5)
        assert reply["content"]["status"] == "error", reply["content"]
        assert reply["content"]["ename"] == "SessionEnded", reply["content"]


def test_ending_a_session_whose_large_result_is_being_signed_answers_its_client(kenneld,
                                                                                connect):
    """A message of 256 KiB or more is signed off kenneld's loop, and what the session sends
    after it waits for it: ended meanwhile, the session must still send its error replies
    before it is freed (they were once freed with it, and the client waited for ever)."""
    kc, running = _large_result_being_signed(kenneld, connect, "endsigning")
    assert kenneld.call("end_request", {"session": "endsigning"})["status"] == "ok"
    reply = shell_reply(kc, running, timeout=10)
    assert reply["content"]["ename"] == "SessionEnded", reply["content"]


def _large_result_being_signed(kenneld, connect, name):
    """A session whose running cell has just written a 60 MB result (its signing takes ~150
    ms) and sleeps: its client, and the cell's msg_id."""
    kc = connect(kenneld.create(name)["connection_file"])
    run(kc, MAKE_LARGE_RESULT, timeout=30)  # a cold kernel (KENNEL_SPAWNER=exec) under load
    running = kc.execute(WRITE_LARGE_RESULT + "open('written', 'w').close()\n"
                         "import time\ntime.sleep(30)")

    def written():
        files = kenneld.ok("file_list_request", {"session": name})["files"]
        return any(f["path"] == "written" for f in files)

    # The result is in kenneld once the cell has written it all.
    wait_for(written, timeout=20, what="the result to be written", interval=0.002)
    return kc, running


@pytest.mark.own_kenneld
def test_kenneld_stopping_answers_the_running_cell(kenneld, connect):
    """SIGTERM while a cell runs: its client gets an error reply, not silence."""
    kc = connect(kenneld.create("stopping")["connection_file"])
    msg_id = kc.execute("import time\ntime.sleep(30)")
    wait_for(lambda: kenneld.ok("info_request", {"session": "stopping"})["session"]["state"]
             == "busy", timeout=10, what="the cell to run")
    kenneld.stop()
    reply = shell_reply(kc, msg_id, timeout=5)
    assert reply["content"]["ename"] == "SessionEnded", reply["content"]
    assert "kenneld stopped" in reply["content"]["evalue"]


@pytest.mark.own_kenneld
def test_kenneld_stopping_while_a_large_result_is_signed_answers_the_cell(kenneld, connect):
    """The same while the cell's large result is being signed: the signing ends and the
    replies behind it go before the sessions are freed."""
    kc, running = _large_result_being_signed(kenneld, connect, "stopsigning")
    kenneld.stop()
    reply = shell_reply(kc, running, timeout=10)
    assert reply["content"]["ename"] == "SessionEnded", reply["content"]
