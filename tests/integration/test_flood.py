"""Floods of output: a cell that prints (or clears) faster than a Python client reads keeps
its end (error, idle) within seconds of its deadline, loses no text on the way, is cut at
its message cap with a notice, and leaves a neighbour session answering. Driven by Debian's
jupyter_client against a real kenneld."""

import queue
import threading
import time

import pytest

from .itest_helpers import collect_iopub, run, shell_reply

pytestmark = pytest.mark.quiet  # each test measures how soon output arrives

DEADLINE_S = 3


def _front_end_area(msgs):
    """The text a front end's output area shows after msgs (stream and clear_output, as
    Notebook applies them: clear_output(wait=True) clears when the next output comes)."""
    area, pending_clear = "", False
    for m in msgs:
        if m["msg_type"] == "clear_output":
            if m["content"].get("wait"):
                pending_clear = True
            else:
                area, pending_clear = "", False
        elif m["msg_type"] == "stream":
            if pending_clear:
                area, pending_clear = "", False
            area += m["content"]["text"]
    return area


def _numbers(text):
    return [int(line) for line in text.splitlines() if line.isdigit()]


@pytest.mark.timeout_s(60)
def test_a_flood_under_a_deadline_ends_with_its_error_and_idle_and_loses_no_line(kenneld, connect):
    # Before kenneld counted and merged iopub's messages, libzmq dropped what passed its
    # high-water mark for a client that lagged: the cell's error and idle among them, and
    # the client (every front end waits for idle) hung.
    kc = connect(kenneld.create("flood", limits={"timeout": DEADLINE_S})["connection_file"])
    sent = time.monotonic()
    msg_id = kc.execute("for i in range(10**7): print(i, flush=True)")
    iopub = collect_iopub(kc, msg_id, timeout=DEADLINE_S + 30)
    ended = time.monotonic() - sent
    types = [m["msg_type"] for m in iopub]
    assert types[-1] == "status" and "error" in types
    error = iopub[types.index("error")]["content"]
    assert error["ename"] == "CellTimeout"
    assert ended < DEADLINE_S + 5, f"idle came {ended:.1f} s after the cell was sent"
    printed = _numbers("".join(m["content"]["text"] for m in iopub
                               if m["msg_type"] == "stream" and m["content"]["name"] == "stdout"))
    assert len(printed) > 1000
    assert printed == list(range(len(printed))), "lines were lost or reordered"
    # Merged: far fewer messages than lines.
    assert types.count("stream") < len(printed) / 2
    reply = shell_reply(kc, msg_id)
    assert reply["metadata"]["outcome"] == "timeout"
    assert run(kc, "'after'").result == "'after'"


@pytest.mark.timeout_s(60)
@pytest.mark.parametrize("kenneld", [["--max-output-msgs", "20000"]], indirect=True)
def test_a_flood_without_a_deadline_is_cut_at_the_message_cap_with_a_notice(kenneld, connect):
    kc = connect(kenneld.create("chatty")["connection_file"])
    msg_id = kc.execute("for i in range(60000): print(i, flush=True)\n'done'")
    iopub = collect_iopub(kc, msg_id, timeout=50)
    out = "".join(m["content"]["text"] for m in iopub
                  if m["msg_type"] == "stream" and m["content"]["name"] == "stdout")
    err = "".join(m["content"]["text"] for m in iopub
                  if m["msg_type"] == "stream" and m["content"]["name"] == "stderr")
    printed = _numbers(out)
    # The cap counts the kernel's messages (one a print), whatever kenneld merged of them.
    assert 19000 <= len(printed) <= 20000 and printed == list(range(len(printed)))
    assert "limit of 20000 messages" in err
    assert [m["content"]["data"]["text/plain"] for m in iopub
            if m["msg_type"] == "execute_result"] == ["'done'"]
    assert shell_reply(kc, msg_id)["metadata"]["outcome"] == "output_truncated"
    # A kernel past its cap is read every 20 ms while it sends; once the cell is over, its
    # session is idle like any other (it once woke kenneld every 20 ms until the next cell).
    woken = _wakeups(kenneld.proc.pid, seconds=3)
    assert woken < 75, f"kenneld's loop woke {woken} times in 3 s beside an idle session"
    assert run(kc, "print('fresh budget')").stream("stdout") == "fresh budget\n"


def _wakeups(pid, seconds):
    """How often kenneld's main thread (its loop) was woken within seconds: its voluntary
    context switches. Idle, the loop wakes for its own timers: ~10 a second."""
    def switches():
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f
                        if line.startswith("voluntary_ctxt_switches"))
    before = switches()
    time.sleep(seconds)
    return switches() - before


@pytest.mark.timeout_s(60)
def test_merged_progress_output_shows_what_the_unmerged_output_shows(kenneld, connect):
    # A progress display: clear, then print, thousands of times. Merged while the client
    # lags, what the output area shows at the end is still the last line.
    kc = connect(kenneld.create("progress")["connection_file"])
    code = ("from IPython.display import clear_output\n"
            "for i in range(30000):\n"
            "    clear_output(wait=True)\n"
            "    print(f'step {i}', flush=True)\n"
            "print('done')")
    iopub = collect_iopub(kc, kc.execute(code), timeout=50)
    assert _front_end_area(iopub) == "step 29999\ndone\n"
    assert len(iopub) < 30000  # merged: of 60,000 outputs


@pytest.mark.timeout_s(60)
def test_a_neighbour_keeps_answering_through_floods_of_tiny_messages(kenneld, connect):
    flooder = connect(kenneld.create("tiny")["connection_file"])
    other = connect(kenneld.create("calm")["connection_file"])
    code = ("from IPython.display import clear_output\n"
            "for i in range(200000): clear_output()")
    msg_id = flooder.execute(code)
    done = threading.Event()
    flood_iopub = []

    def drain():  # what came is kept for the failure's message, whatever comes
        deadline = time.monotonic() + 50
        while time.monotonic() < deadline:
            try:
                m = flooder.get_iopub_msg(timeout=1)
            except queue.Empty:
                continue
            if m["parent_header"].get("msg_id") == msg_id:
                flood_iopub.append(m)
                if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    done.set()
                    return

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    answered = 0
    while not done.is_set() and answered < 100:
        assert run(other, "1+1", timeout=5).result == "2"
        answered += 1
    reader.join(55)
    assert done.is_set(), (f"the flooding cell never ended ({len(flood_iopub)} iopub messages "
                           f"in 50 s, the last {flood_iopub[-1:]}); kenneld's log:\n"
                           f"{kenneld.log()}")
    assert answered >= 3
    assert flood_iopub[-1]["content"]["execution_state"] == "idle"
    assert shell_reply(flooder, msg_id)["metadata"]["outcome"] == "output_truncated"
