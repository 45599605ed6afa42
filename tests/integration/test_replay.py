"""Replay: kenneld's journal gives a client that lost a cell's iopub messages (it
reconnected, or came late) every one of them again, in order, with a kennel_replay_request
on control; `kennel exec --attach` shows a running cell from its start. Debian's
jupyter_client and the kennel CLI against a real kenneld."""

import subprocess
import time

from .itest_helpers import (close_client, collect_iopub, control_reply, make_client, run,
                            shell_reply, wait_iopub)
from .kenneld_proc import KENNEL

TICKS = ("import time\n"
         "for i in range(8):\n"
         "    print('tick', i, flush=True)\n"
         "    time.sleep(0.25)\n"
         "'done'")


def _replay(kc, cell=None):
    content = {} if cell is None else {"cell": cell}
    msg = kc.session.msg("kennel_replay_request", content)
    kc.control_channel.send(msg)
    return control_reply(kc, msg["header"]["msg_id"])


def test_a_client_that_comes_back_mid_cell_gets_every_output_once_in_order(kenneld, connect):
    info = kenneld.create("replayed")
    first = connect(info["connection_file"])
    msg_id = first.execute(TICKS)
    time.sleep(1)  # a few ticks went to the first client only
    close_client(first)  # it goes away mid-cell
    again = make_client(info["connection_file"])  # and comes back, subscribed from now on
    try:
        reply = _replay(again, msg_id)
        assert reply["msg_type"] == "kennel_replay_reply"
        content = reply["content"]
        assert content["status"] == "ok" and content["cell"] == msg_id
        assert content["ended"] is False and content["lost"] == 0
        seen, outputs = set(), []
        for m in content["messages"] + collect_iopub(again, msg_id, timeout=15):
            if m["header"]["msg_id"] in seen:
                continue
            seen.add(m["header"]["msg_id"])
            outputs.append(m)
        text = "".join(m["content"]["text"] for m in outputs if m["header"]["msg_type"] == "stream")
        assert text == "".join(f"tick {i}\n" for i in range(8))
        types = [m["header"]["msg_type"] for m in outputs]
        assert types[0] == "status" and types[1] == "execute_input"
        assert types.count("execute_result") == 1
        idles = [m for m in outputs if m["header"]["msg_type"] == "status"
                 and m["content"]["execution_state"] == "idle"]
        assert len(idles) == 1 and outputs[-1] is idles[0]
        # Once ended, the replay is whole and says so; no cell named: the latest.
        done = _replay(again)["content"]
        assert done["cell"] == msg_id and done["ended"] is True
        assert [m["header"]["msg_id"] for m in done["messages"]] == \
            [m["header"]["msg_id"] for m in outputs]
        assert _replay(again, "no-such-cell")["content"]["ename"] == "NoSuchCell"
    finally:
        close_client(again)


def test_a_replay_is_answered_while_the_kernel_is_busy(kenneld, connect):
    kc = connect(kenneld.create("busy-replay")["connection_file"])
    run(kc, "print('before')")
    msg_id = kc.execute("import time\ntime.sleep(3)")
    # Shell and control keep no order between them: the replay asked at once was once read
    # first, and named the cell before. The cell has begun once its input is published.
    wait_iopub(kc, msg_id, "execute_input")
    t = time.monotonic()
    content = _replay(kc)["content"]
    assert time.monotonic() - t < 1.5
    assert content["cell"] == msg_id and content["ended"] is False
    shell_reply(kc, msg_id, timeout=10)


def test_kennel_exec_attach_shows_a_running_cell_from_its_start(kenneld, connect):
    kc = connect(kenneld.create("attached")["connection_file"])
    msg_id = kc.execute(TICKS)
    time.sleep(1)
    r = subprocess.run([str(KENNEL), "--state-dir", str(kenneld.state_dir), "exec", "--attach",
                        "attached"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "".join(f"tick {i}\n" for i in range(8)) + "'done'\n"
    assert shell_reply(kc, msg_id)["content"]["status"] == "ok"
    # Attached to a cell that failed: its error, and exit status 1.
    run(kc, "1 / 0")
    r = subprocess.run([str(KENNEL), "--state-dir", str(kenneld.state_dir), "exec", "--attach",
                        "attached"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 1 and "ZeroDivisionError" in r.stderr
    # A session with no cell yet.
    kenneld.create("fresh")
    r = subprocess.run([str(KENNEL), "--state-dir", str(kenneld.state_dir), "exec", "--attach",
                        "fresh"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 1 and "no cell to attach to" in r.stderr
