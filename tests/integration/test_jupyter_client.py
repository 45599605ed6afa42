"""kenneld sessions driven by jupyter_client's BlockingKernelClient."""

import base64
import hashlib
import json
import queue
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import zmq

from .kenneld_proc import KENNELD, descendants, pid_alive
from large_result import MAKE_LARGE_RESULT, RESULT_BYTES, WRITE_LARGE_RESULT
from .itest_helpers import (close_client, collect_iopub, control, control_reply, finish, run, send_control,
                           shell_reply, shell_request, wait_for, wait_iopub, wait_ready)

pytestmark = pytest.mark.default_preload  # Jupyter's client against kennel as it runs by default

# ---- kernel_info -------------------------------------------------------------------------


def _check_kernel_info(reply, msg_id):
    assert reply["msg_type"] == "kernel_info_reply"
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["header"]["version"] == "5.3"
    c = reply["content"]
    assert c["status"] == "ok"
    assert c["protocol_version"] == "5.3"
    assert c["implementation"] == "kennel"
    assert c["language_info"]["name"] == "python"
    assert c["language_info"]["file_extension"] == ".py"


def test_kernel_info_on_shell(session):
    msg_id = session.kernel_info()
    _check_kernel_info(shell_reply(session, msg_id), msg_id)
    # Answered between busy and idle, like ipykernel.
    states = [m["content"]["execution_state"] for m in collect_iopub(session, msg_id)]
    assert states == ["busy", "idle"]


def test_kernel_info_on_control(session):
    msg_id = send_control(session, "kernel_info_request")
    _check_kernel_info(control_reply(session, msg_id), msg_id)


# ---- execution ---------------------------------------------------------------------------


@pytest.mark.parametrize("kenneld", ["tcp", "ipc"], indirect=True)
def test_state_across_cells(kenneld, session):
    conn = json.loads(Path(session.session_info["connection_file"]).read_text())
    assert conn["transport"] == kenneld.transport
    assert run(session, "x = 40").content["status"] == "ok"
    assert run(session, "def f(y):\n    return x + y").content["status"] == "ok"
    cell = run(session, "f(2)")
    assert cell.content["status"] == "ok"
    assert cell.result == "42"


def test_streams_and_result_in_order(session):
    code = ("import os, sys\n"
            "print('out1')\n"
            "print('err1', file=sys.stderr)\n"
            "os.write(1, b'fd-out\\n')\n"
            "print('out2')\n"
            "6 * 7")
    cell = run(session, code)
    assert cell.content["status"] == "ok"
    assert cell.streams() == [("stdout", "out1\n"), ("stderr", "err1\n"),
                              ("stdout", "fd-out\nout2\n")]
    # The result comes after every stream message.
    assert cell.outputs[-1]["msg_type"] == "execute_result"
    assert cell.result == "42"
    assert cell.outputs[-1]["content"]["execution_count"] == cell.content["execution_count"]


def test_iopub_order_and_parent(session):
    cell = run(session, "print('hi')\n1 + 1")
    assert cell.types == ["status", "execute_input", "stream", "execute_result", "status"]
    assert [m["content"]["execution_state"] for m in cell.of_type("status")] == ["busy", "idle"]
    assert all(m["parent_header"]["msg_id"] == cell.msg_id for m in cell.iopub)
    assert cell.of_type("execute_input")[0]["content"]["code"] == "print('hi')\n1 + 1"
    assert cell.reply["msg_type"] == "execute_reply"
    assert cell.reply["parent_header"]["msg_id"] == cell.msg_id


def test_execution_count_increments(session):
    first = run(session, "1")
    second = run(session, "2")
    n = first.content["execution_count"]
    assert n >= 1
    assert second.content["execution_count"] == n + 1
    assert second.of_type("execute_input")[0]["content"]["execution_count"] == n + 1
    assert second.of_type("execute_result")[0]["content"]["execution_count"] == n + 1


def test_silent(session):
    n = run(session, "v = 5").content["execution_count"]
    cell = run(session, "v = v * 2\nprint('quiet')\nv", silent=True)
    assert cell.content["status"] == "ok"
    assert "execute_input" not in cell.types
    assert "execute_result" not in cell.types
    assert run(session, "v").result == "10"  # the silent cell ran
    assert run(session, "0").content["execution_count"] == n + 2  # it did not count


def test_store_history_false(session):
    n = run(session, "a_hist = 1").content["execution_count"]
    hidden = run(session, "b_hidden = 2", store_history=False)
    assert hidden.content["status"] == "ok"
    assert run(session, "c_hist = 3").content["execution_count"] == n + 1
    reply = shell_request(session, "history", hist_access_type="tail", n=10)
    inputs = [entry[2] for entry in reply["history"]]
    assert "a_hist = 1" in inputs and "c_hist = 3" in inputs
    assert "b_hidden = 2" not in inputs
    assert run(session, "b_hidden").result == "2"


def test_user_expressions(session):
    cell = run(session, "x = 3", user_expressions={"sq": "x * x", "bad": "1 / 0"})
    ue = cell.content["user_expressions"]
    assert ue["sq"]["status"] == "ok"
    assert ue["sq"]["data"]["text/plain"] == "9"
    assert ue["bad"]["status"] == "error"
    assert ue["bad"]["ename"] == "ZeroDivisionError"


def test_a_reply_of_many_values_is_passed_on(session):
    # kenneld reads a reply's status from the kernel's op header and passes the content on:
    # 12,000 user_expressions make a reply of ~120,000 JSON values, past what kenneld parses.
    exprs = {f"e{i}": "1" for i in range(12_000)}
    msg_id = session.execute("x = 1", user_expressions=exprs)
    reply = shell_reply(session, msg_id, timeout=30)
    assert reply["content"]["status"] == "ok", reply["content"].get("ename")
    assert len(reply["content"]["user_expressions"]) == 12_000
    assert reply["metadata"]["outcome"] == "ok"
    assert run(session, "x").result == "1"


def test_error_reply_and_iopub_error(session):
    cell = run(session, "1 / 0")
    c = cell.content
    assert c["status"] == "error"
    assert c["ename"] == "ZeroDivisionError"
    assert c["evalue"] == "division by zero"
    assert isinstance(c["traceback"], list) and c["traceback"]
    errors = cell.of_type("error")
    assert len(errors) == 1
    assert errors[0]["content"]["ename"] == "ZeroDivisionError"
    assert errors[0]["content"]["evalue"] == "division by zero"
    assert cell.types[-1] == "status"


def test_stop_on_error_aborts_queued_executes(session):
    first = session.execute("import time\ntime.sleep(0.5)\nraise ValueError('boom')")
    second = session.execute("after_1 = 1")
    third = session.execute("after_2 = 2")
    assert shell_reply(session, first)["content"]["ename"] == "ValueError"
    aborted = shell_reply(session, second)
    assert aborted["content"]["status"] == "aborted"
    # The outcome is in every execute_reply's metadata (protocol/jupyter.md); an aborted
    # cell never ran.
    assert aborted["metadata"]["outcome"] == "aborted"
    assert aborted["metadata"]["metrics"]["wall_ms"] == 0
    assert shell_reply(session, third)["content"]["status"] == "aborted"
    assert run(session, "'after_1' in dir() or 'after_2' in dir()").result == "False"


def test_stop_on_error_false_keeps_running(session):
    first = session.execute("import time\ntime.sleep(0.5)\nraise ValueError('boom')",
                            stop_on_error=False)
    second = session.execute("after = 1")
    assert shell_reply(session, first)["content"]["status"] == "error"
    assert shell_reply(session, second)["content"]["status"] == "ok"
    assert run(session, "after").result == "1"


def test_display_html(session):
    code = ("class H:\n"
            "    def _repr_html_(self):\n"
            "        return '<b>bold</b>'\n"
            "    def __repr__(self):\n"
            "        return 'H()'\n"
            "display(H())")
    cell = run(session, code)
    assert cell.content["status"] == "ok"
    displays = cell.of_type("display_data")
    assert len(displays) == 1
    assert displays[0]["content"]["data"] == {"text/html": "<b>bold</b>", "text/plain": "H()"}


def test_matplotlib_png_byte_exact(session):
    code = ("import hashlib, io\n"
            "import matplotlib.pyplot as plt\n"
            "from IPython.display import Image, display\n"
            "fig, ax = plt.subplots()\n"
            "ax.plot([1, 3, 2])\n"
            "buf = io.BytesIO()\n"
            "fig.savefig(buf, format='png')\n"
            "plt.close(fig)\n"
            "display(Image(data=buf.getvalue()))\n"
            "hashlib.sha256(buf.getvalue()).hexdigest()")
    cell = run(session, code, timeout=20)
    assert cell.content["status"] == "ok", cell.content
    png = base64.b64decode(cell.of_type("display_data")[0]["content"]["data"]["image/png"])
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert repr(hashlib.sha256(png).hexdigest()) == cell.result


def test_matplotlib_inline_figure(session):
    cell = run(session, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3]);", timeout=20)
    assert cell.content["status"] == "ok", cell.content
    displays = cell.of_type("display_data")
    assert len(displays) == 1
    png = base64.b64decode(displays[0]["content"]["data"]["image/png"])
    assert png.startswith(b"\x89PNG\r\n\x1a\n")


def test_unicode_and_large_output(session):
    cell = run(session, "print('h\\u00e9llo \\u2603')\nprint('x' * 200000)")
    assert cell.content["status"] == "ok"
    assert cell.streams() == [("stdout", "h\u00e9llo \u2603\n" + "x" * 200000 + "\n")]


def test_large_outputs_keep_their_place_among_the_others(session):
    # kenneld signs a message of 256 KiB or more on a thread of its own, and what the session
    # sends after it waits for it: small output, the idle status and the reply all come after.
    code = ("import sys\nfrom IPython.display import display, HTML\n"
            "for i in range(3):\n"
            "    print('small', i); sys.stdout.flush()\n"
            "    print(str(i) * 300000); sys.stdout.flush()\n"
            "display(HTML('<b>' + 'y' * 400000 + '</b>'))\n"
            "print('last'); sys.stdout.flush()\n"
            "'z' * 2000000")
    cell = run(session, code)
    assert cell.content["status"] == "ok"
    seen = []  # message types in order, adjacent streams joined into one
    for m in cell.iopub:
        kind = m["msg_type"]
        if kind == "stream" and seen and seen[-1][0] == "stream":
            seen[-1] = ("stream", seen[-1][1] + m["content"]["text"])
        elif kind == "stream":
            seen.append(("stream", m["content"]["text"]))
        elif kind == "status":
            seen.append((kind, m["content"]["execution_state"]))
        else:
            seen.append((kind, None))
    streamed = "".join(f"small {i}\n" + str(i) * 300000 + "\n" for i in range(3))
    assert [k for k, _ in seen] == ["status", "execute_input", "stream", "display_data",
                                    "stream", "execute_result", "status"], [k for k, _ in seen]
    assert seen[2][1] == streamed and seen[4][1] == "last\n"
    assert seen[0][1] == "busy" and seen[-1][1] == "idle"
    assert cell.of_type("display_data")[0]["content"]["data"]["text/html"] == \
        "<b>" + "y" * 400000 + "</b>"
    assert cell.result == repr("z" * 2000000)


def test_a_kernel_dying_after_a_large_result_is_told_after_it(session):
    # The dead kernel's pipe is read whole at once, while its last result is still being
    # signed: the error reply and the idle status that say it died wait for that result.
    run(session, MAKE_LARGE_RESULT)
    cell = run(session, WRITE_LARGE_RESULT + "os._exit(1)\n", timeout=60)
    assert cell.content["status"] == "error" and cell.content["ename"] == "KernelDied", \
        cell.content
    assert [t for t in cell.types if t != "stream"] == [
        "status", "execute_input", "execute_result", "error", "status"], cell.types
    assert len(cell.result) == RESULT_BYTES


def test_comm_open_is_closed_again_and_session_goes_on(session):
    # A target nobody registered: like ipykernel, the kernel closes the comm again at once
    # (comm_close on iopub), and no shell reply comes (test_comms.py has the rest).
    msg = session.session.msg("comm_open", {"comm_id": "c1", "target_name": "nobody", "data": {}})
    session.shell_channel.send(msg)
    msgs = collect_iopub(session, msg["header"]["msg_id"])
    assert [m["msg_type"] for m in msgs] == ["status", "comm_close", "status"]
    assert msgs[1]["content"] == {"comm_id": "c1", "data": {}}
    assert run(session, "'alive'").result == "'alive'"
    assert shell_request(session, "comm_info") == {"status": "ok", "comms": {}}


def test_output_after_a_cell_stays_the_cells_across_comm_messages(session):
    cell = run(session, "import threading, time\n"
                        "threading.Thread(target=lambda: (time.sleep(0.5), print('late'))).start()")
    session.shell_channel.send(session.session.msg("comm_msg", {"comm_id": "c1", "data": {}}))
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        m = session.get_iopub_msg(timeout=5)
        if m["msg_type"] == "stream" and "late" in m["content"]["text"]:
            assert m["parent_header"]["msg_id"] == cell.msg_id
            return
    raise AssertionError("the thread's output never came")


@pytest.mark.light_preload  # its own configuration; the preload is not its subject
@pytest.mark.parametrize("kenneld", [["--max-message", "1M"]], indirect=True)
def test_comm_messages_queued_behind_a_cell_do_not_hurt_the_kernel(kenneld, connect):
    # They wait in kenneld's queue and reach the kernel one at a time, each after the kernel
    # is done with the one before: a burst of large ones once filled the kernel's pipe, and
    # kenneld took the kernel for one that had stopped reading.
    kc = connect(kenneld.create("comms")["connection_file"])
    run(kc, "x = 42")
    msg_id = kc.execute("import time; time.sleep(1)")
    for i in range(8):
        kc.shell_channel.send(kc.session.msg("comm_msg", {"comm_id": "c1",
                                                           "data": {"blob": "y" * 900_000}}))
    assert finish(kc, msg_id).content["status"] == "ok"
    assert run(kc, "x").result == "42"
    assert kenneld.ok("info_request", {"session": "comms"})["session"]["restarts"] == 0


def test_a_request_with_more_buffers_than_the_pipe_carries_is_refused(session):
    # The wire takes 64 buffers, a frame to the kernel 59 of them: the request is refused
    # whole (it used to lose its last buffers without a word).
    msg = session.session.msg("execute_request", {"code": "1", "silent": False,
                                                  "store_history": True, "user_expressions": {},
                                                  "allow_stdin": False, "stop_on_error": True})
    session.shell_channel.socket.send_multipart(session.session.serialize(msg) + [b"b"] * 60)
    reply = shell_reply(session, msg["header"]["msg_id"])
    assert reply["content"]["ename"] == "RequestTooLarge", reply["content"]
    assert run(session, "'alive'").result == "'alive'"


@pytest.mark.light_preload  # its own configuration; the preload is not its subject
@pytest.mark.parametrize("kenneld", [["--max-message", "64K"]], indirect=True)
def test_a_request_at_the_size_limit_is_served(kenneld, connect):
    # A request within --max-message always fits in a frame to the kernel (op header and
    # part lengths included); it once made the session hold every later request.
    kc = connect(kenneld.create("edge")["connection_file"])
    buffers = [b"b"] * 20

    def request(pad):
        msg = kc.session.msg("execute_request", {
            "code": "n = len('" + "z" * pad + "')", "silent": False, "store_history": True,
            "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
        frames = kc.session.serialize(msg) + buffers
        # As kenneld counts it: every frame, the DEALER's identity (the session id) too.
        return msg, frames, len(kc.session.bsession) + sum(len(f) for f in frames)

    _, _, size = request(60_000)
    pad = 60_000 + (64 * 1024 - size)
    msg, frames, size = request(pad)
    assert size == 64 * 1024
    kc.shell_channel.socket.send_multipart(frames)
    reply = shell_reply(kc, msg["header"]["msg_id"])
    assert reply["content"]["status"] == "ok", reply["content"]
    assert run(kc, "n").result == str(pad)


def test_two_clients_share_a_session(session, connect):
    other = connect(session.session_info["connection_file"])
    cell = run(session, "print('shared')")
    # The other client sees the same iopub traffic, but not the shell reply.
    seen = collect_iopub(other, cell.msg_id)
    assert [m["msg_type"] for m in seen] == cell.types
    replies = []
    while True:
        try:
            replies.append(other.get_shell_msg(timeout=0.5))
        except queue.Empty:
            break
    assert not [m for m in replies if m["parent_header"].get("msg_id") == cell.msg_id]
    assert run(other, "'from other'").content["execution_count"] == \
        cell.content["execution_count"] + 1


# ---- other shell requests ----------------------------------------------------------------


def test_complete(session):
    run(session, "my_long_variable = 1")
    reply = shell_request(session, "complete", "x = my_long_v")
    assert reply["status"] == "ok"
    assert "my_long_variable" in reply["matches"]
    assert (reply["cursor_start"], reply["cursor_end"]) == (4, 13)


def test_inspect(session):
    reply = shell_request(session, "inspect", "len", 3)
    assert reply["status"] == "ok"
    assert reply["found"] is True
    assert "Return the number of items" in reply["data"]["text/plain"]
    missing = shell_request(session, "inspect", "no_such_name_here", 5)
    assert missing["status"] == "ok"
    assert missing["found"] is False


@pytest.mark.parametrize("code, status", [
    ("x = 1", "complete"),
    ("for i in range(3):", "incomplete"),
    ("x = )", "invalid"),
])
def test_is_complete(session, code, status):
    reply = shell_request(session, "is_complete", code)
    assert reply["status"] == status
    if status == "incomplete":
        assert reply["indent"] == "    "


def test_history_tail(session):
    for code in ("h1 = 1", "h2 = 2", "h3 = 3"):
        run(session, code)
    reply = shell_request(session, "history", hist_access_type="tail", n=2)
    assert reply["status"] == "ok"
    assert [entry[2] for entry in reply["history"]] == ["h2 = 2", "h3 = 3"]


def test_comm_info(session):
    reply = shell_request(session, "comm_info")
    assert reply == {"status": "ok", "comms": {}}


# ---- stdin -------------------------------------------------------------------------------


def test_input_over_stdin(session):
    msg_id = session.execute("name = input('Your name: ')\nprint('hello', name)",
                             allow_stdin=True)
    req = session.get_stdin_msg(timeout=10)
    assert req["msg_type"] == "input_request"
    assert req["parent_header"]["msg_id"] == msg_id
    assert req["content"] == {"prompt": "Your name: ", "password": False}
    session.input("kennel")
    cell = finish(session, msg_id)
    assert cell.content["status"] == "ok"
    assert cell.stream("stdout") == "hello kennel\n"
    assert run(session, "name").result == "'kennel'"


def test_a_prompt_waits_for_a_stdin_socket_that_joins_late(kenneld):
    """A front end's sockets join one by one, and under load a kernel may ask for input before
    the client's stdin has: the ROUTER dropped the input_request, and the cell waited for an
    answer until its deadline. kenneld keeps it and sends it once the client is there; a
    prompt whose cell ended meanwhile is forgotten, not shown late."""
    from jupyter_client import BlockingKernelClient
    info = kenneld.create("late-stdin")
    kc = BlockingKernelClient()
    kc.load_connection_file(info["connection_file"])
    kc.start_channels(shell=True, iopub=True, stdin=False, hb=False)
    kc2 = None
    try:
        wait_ready(kc)
        held = lambda: kenneld.log(None).count("stdin: the client has not joined")
        msg_id = kc.execute("name = input('Your name: ')\nprint('hello', name)",
                            allow_stdin=True)
        wait_for(lambda: held() == 1, what="kenneld holding the prompt")
        kc.stdin_channel.start()
        req = kc.get_stdin_msg(timeout=10)
        assert req["msg_type"] == "input_request" and req["parent_header"]["msg_id"] == msg_id
        kc.input("late")
        cell = finish(kc, msg_id)
        assert cell.content["status"] == "ok" and cell.stream("stdout") == "hello late\n"
        # A prompt held when its cell is interrupted goes nowhere. (A second client, whose
        # stdin has never joined: closing the first one's raced kenneld's socket learning of
        # it, and a prompt sent meanwhile went to the closing socket, not held.)
        kc2 = BlockingKernelClient()
        kc2.load_connection_file(info["connection_file"])
        kc2.start_channels(shell=True, iopub=True, stdin=False, hb=False)
        wait_ready(kc2)
        msg_id = kc2.execute("input('again? ')", allow_stdin=True)
        wait_for(lambda: held() == 2, what="kenneld holding the second prompt")
        assert control(kc2, "interrupt_request")["content"]["status"] == "ok"
        assert finish(kc2, msg_id).content["ename"] == "KeyboardInterrupt"
        kc2.stdin_channel.start()  # with the client's identity, the prompt's address
        with pytest.raises(queue.Empty):
            kc2.get_stdin_msg(timeout=0.5)
        assert run(kc2, "name").result == "'late'"
    finally:
        close_client(kc)
        if kc2 is not None:
            close_client(kc2)


def test_input_without_allow_stdin_fails(session):
    cell = run(session, "input('? ')", allow_stdin=False)
    assert cell.content["status"] == "error"
    assert cell.content["ename"] == "StdinNotImplementedError"


def test_a_task_made_in_one_cell_is_awaited_in_another(session):
    run(session, "import asyncio\nasync def job(x):\n    await asyncio.sleep(0.05)\n    return x")
    assert run(session, "t = asyncio.ensure_future(job(7))").content["status"] == "ok"
    assert run(session, "await t").result == "7"
    # asyncio.run() leaves no current loop behind it; the next cells still share one.
    assert run(session, "asyncio.run(job(8))").result == "8"
    run(session, "loop = asyncio.get_event_loop()\nt = loop.create_task(job(9))")
    assert run(session, "await t").result == "9"
    assert run(session, "asyncio.get_event_loop() is loop").result == "True"
    # A loop user code sets is asyncio's current one until it unsets it.
    run(session, "mine = asyncio.new_event_loop()\nasyncio.set_event_loop(mine)")
    assert run(session, "asyncio.get_event_loop() is mine").result == "True"
    run(session, "asyncio.set_event_loop(None)")
    assert run(session, "asyncio.get_event_loop() is loop").result == "True"


# ---- shell escapes ------------------------------------------------------------------------


def test_shell_escape_runs_without_a_pty(session):
    # IPython's own `!` needs a pty, which the sandbox has none of.
    cell = run(session, "n = 5\nprint('before')\n!echo {n} $n; echo err >&2\nprint('after')")
    assert cell.content["status"] == "ok", cell.content
    assert cell.stream("stdout") == "before\n5 5\nafter\n"
    assert cell.stream("stderr") == "err\n"
    assert run(session, "!exit 3\n_exit_code").result == "3"
    assert run(session, "!kill -9 $$\n_exit_code").result == "-9"
    assert run(session, "files = !echo a; echo b\nfiles").result == "['a', 'b']"


def test_shell_escapes_run_under_bash_as_in_ipykernel(session):
    """ipykernel's users have bash as $SHELL; notebooks' `!` lines use its brace expansion
    and [[ ]]. Under /bin/sh (dash) they printed `{1..3}` and failed with the cell ok."""
    cell = run(session, "!echo {1..3}; [[ 1 == 1 ]] && echo yes")
    assert cell.stream("stdout") == "1 2 3\nyes\n", cell.stream("stderr")
    assert run(session, "x = !echo {a,b}\nx").result == "['a b']"
    assert run(session, "import os; os.environ['SHELL']").result == "'/bin/bash'"


def _running_command(kenneld, session, command):
    """Execute `!command` then `print('after')`; once its sleep runs: (msg_id, kernel pid)."""
    msg_id = session.execute(f"!{command}\nprint('after')")
    wait_iopub(session, msg_id, "execute_input")
    pid = kenneld.ok("info_request", {"session": session.session_info["id"]})["session"]["kernel_pid"]
    wait_for(lambda: any(_comm(p) == "sleep" for p in descendants(pid)), what="the command's sleep")
    return msg_id, pid


def test_interrupting_a_shell_escape_stops_the_command_not_the_cell(kenneld, session):
    msg_id, pid = _running_command(kenneld, session, "sh -c 'sleep 30; echo never'")
    started = time.monotonic()
    assert control(session, "interrupt_request")["content"]["status"] == "ok"
    cell = finish(session, msg_id, timeout=5)
    assert time.monotonic() - started < 3
    assert cell.content["status"] == "ok", cell.content
    assert cell.stream("stdout") == "after\n"
    assert cell.stream("stderr") == "^C\n"
    assert run(session, "_exit_code").result == "-2"
    # The whole command is gone: the shell and the sleep it started.
    assert not [p for p in descendants(pid) if _comm(p) in ("sh", "sleep")]


def test_a_second_interrupt_in_the_grace_still_ends_the_command(kenneld, session):
    # The command ignores SIGINT, so the kernel waits its grace; a second interrupt there
    # once left the command running after the cell.
    msg_id, pid = _running_command(kenneld, session, "sh -c 'trap \"\" INT; sleep 30'")
    assert control(session, "interrupt_request")["content"]["status"] == "ok"
    time.sleep(0.3)
    assert control(session, "interrupt_request")["content"]["status"] == "ok"
    cell = finish(session, msg_id, timeout=5)
    assert cell.content["status"] == "error" and cell.content["ename"] == "KeyboardInterrupt"
    wait_for(lambda: not [p for p in descendants(pid) if _comm(p) in ("sh", "sleep")],
             timeout=3, what="the command to end")


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


# ---- interrupt, restart, shutdown --------------------------------------------------------


@pytest.mark.parametrize("kenneld", ["tcp", "ipc"], indirect=True)
def test_interrupt(kenneld, session):
    run(session, "kept = 'still here'")
    msg_id = session.execute("import time\ntime.sleep(30)")
    wait_iopub(session, msg_id, "execute_input")  # the cell runs in the kernel now
    time.sleep(0.2)
    started = time.monotonic()
    reply = control(session, "interrupt_request")
    assert reply["msg_type"] == "interrupt_reply"
    assert reply["content"]["status"] == "ok"
    done = shell_reply(session, msg_id, timeout=5)
    assert time.monotonic() - started < 5
    assert done["content"]["status"] == "error"
    assert done["content"]["ename"] == "KeyboardInterrupt"
    assert run(session, "kept").result == "'still here'"


def test_interrupt_while_idle_is_harmless(session):
    run(session, "kept = 1")
    assert control(session, "interrupt_request")["content"]["status"] == "ok"
    cell = run(session, "kept + 1")
    assert cell.content["status"] == "ok"
    assert cell.result == "2"


# Counts the SIGINTs that reach the kernel process: the wakeup fd gets one byte per
# delivery, even when Python runs the handler once for several. Waits for the first
# (at most 5 s), then 50 ms more for a second one.
_COUNT_SIGINTS = """\
import os, select, signal, time
r, w = os.pipe()
os.set_blocking(w, False)
old = signal.signal(signal.SIGINT, lambda s, f: None)
old_fd = signal.set_wakeup_fd(w)
print('waiting', flush=True)
select.select([r], [], [], 5)
time.sleep(0.05)
signal.set_wakeup_fd(old_fd)
signal.signal(signal.SIGINT, old)
os.set_blocking(r, False)
try:
    n = len(os.read(r, 64))
except BlockingIOError:
    n = 0
os.close(r)
os.close(w)
n"""


@pytest.mark.parametrize("kenneld", [[], ["--insecure-no-sandbox"]], indirect=True,
                         ids=["sandbox", "no-sandbox"])
def test_interrupt_sends_one_sigint(kenneld, session):
    """One interrupt_request must deliver SIGINT once, or `except KeyboardInterrupt:`
    cleanup code gets interrupted by the same request. The double delivery is a race, so
    try up to 20 times (each takes ~0.1 s)."""
    counts = []
    for _ in range(20):
        msg_id = session.execute(_COUNT_SIGINTS)
        wait_iopub(session, msg_id, "stream")
        control(session, "interrupt_request")
        counts.append(finish(session, msg_id).result)
        if counts[-1] != "1":
            break
    assert set(counts) == {"1"}, f"SIGINTs delivered per interrupt_request: {counts}"


def test_restart_while_busy(kenneld, session):
    """The cells queued behind the running one were written for the namespace the restart
    throws away: they are aborted, as when the kernel dies (they once ran in the fresh
    kernel, against an empty namespace). A cell sent after the restart runs in the new one."""
    run(session, "old = 1")
    running = session.execute("import itertools\nsum(itertools.repeat(1, 10**11))")
    wait_iopub(session, running, "execute_input")
    queued = session.execute("print('old' in dir())")
    queued_lenient = session.execute("print('old' in dir())", stop_on_error=False)
    # Shell and control are two sockets: the restart must not overtake the queued cells.
    sid = session.session_info["id"]
    wait_for(lambda: kenneld.ok("info_request", {"session": sid})["session"]["queued"] == 2,
             timeout=10, what="the two cells to be queued")
    reply = control(session, "shutdown_request", {"restart": True})
    assert reply["content"] == {"status": "ok", "restart": True}
    after = session.execute("'old' in dir()")
    # The queued ones are answered with the restart, before the old kernel is gone.
    for msg_id in (queued, queued_lenient):
        cell = finish(session, msg_id)
        assert cell.content["status"] == "aborted"
        assert cell.reply["metadata"]["outcome"] == "aborted"
        assert cell.stream("stdout") == ""
    first = finish(session, running)
    assert first.content["status"] == "error"
    assert first.content["ename"] == "KernelRestarted"
    third = finish(session, after)
    assert third.content["status"] == "ok"
    assert third.result == "False"


@pytest.mark.parametrize("kenneld", [[], ["--insecure-no-sandbox"]], indirect=True,
                         ids=["sandbox", "no-sandbox"])
def test_restart_flag_is_read_as_python_reads_it(kenneld, session):
    # ipykernel reads `restart` with bool(): 1 restarts, it does not end the session.
    run(session, "gone = 1")
    reply = control(session, "shutdown_request", {"restart": 1})
    assert reply["content"] == {"status": "ok", "restart": True}
    assert session.session_info["id"] in [s["id"] for s in kenneld.sessions()]
    assert run(session, "'gone' in dir()").result == "False"


def test_restart_gives_fresh_namespace(kenneld, session):
    """After the shutdown_reply (restart: true), the next request must reach the new kernel.
    The old one holds 300 MB, as a working session might, so it takes a few ms to die;
    three rounds, since how long it takes varies."""
    sid = session.session_info["id"]
    for round_ in range(3):
        run(session, "old = b'x' * (300 << 20)")
        before = kenneld.ok("info_request", {"session": sid})["session"]
        reply = control(session, "shutdown_request", {"restart": True})
        assert reply["content"] == {"status": "ok", "restart": True}
        cell = run(session, "old is None")  # NameError, unless the old namespace survived
        assert cell.content["status"] == "error"
        assert (round_, cell.content["ename"]) == (round_, "NameError")
        after = kenneld.ok("info_request", {"session": sid})["session"]
        assert after["restarts"] == before["restarts"] + 1
        assert after["kernel_pid"] not in (0, before["kernel_pid"])
        wait_for(lambda: not pid_alive(before["kernel_pid"]), what="the old kernel to exit")


def test_shutdown_ends_session(kenneld, session):
    sid = session.session_info["id"]
    session_dir = Path(session.session_info["connection_file"]).parent
    pid = kenneld.ok("info_request", {"session": sid})["session"]["kernel_pid"]
    reply = control(session, "shutdown_request", {"restart": False})
    assert reply["content"] == {"status": "ok", "restart": False}
    assert sid not in [s["id"] for s in kenneld.sessions()]
    assert not session_dir.exists()
    assert kenneld.call("info_request", {"session": sid})["ename"] == "NoSuchSession"
    wait_for(lambda: not pid_alive(pid), what="the kernel to exit")


# ---- kernel crash ------------------------------------------------------------------------


def test_kernel_crash_fails_cell_and_restarts(kenneld, session):
    sid = session.session_info["id"]
    run(session, "lost = 1")
    started = time.monotonic()
    cell = run(session, "import os\nos._exit(3)", timeout=10)
    assert time.monotonic() - started < 10
    assert cell.content["status"] == "error"
    assert cell.content["ename"] == "KernelDied"
    assert cell.of_type("error")[0]["content"]["ename"] == "KernelDied"
    after = run(session, "'lost' in dir(), 6 * 7")
    assert after.content["status"] == "ok"
    assert after.result == "(False, 42)"
    info = kenneld.ok("info_request", {"session": sid})["session"]
    assert info["restarts"] == 1
    assert info["state"] == "idle"


def test_a_dead_kernels_reply_carries_its_cells_execution_count(session):
    """The spec's execute_reply has an integer execution_count, the one the cell was
    announced with (jupyter_console crashed on kenneld's null)."""
    run(session, "1")
    cell = run(session, "import os\nos._exit(0)", timeout=10)
    assert cell.content["ename"] == "KernelDied"
    announced = cell.of_type("execute_input")[0]["content"]["execution_count"]
    assert announced == 2
    assert cell.content["execution_count"] == announced


def test_kernel_crash_with_queued_request(session):
    """A crash fails its cell like any error: stop_on_error aborts what was queued behind it,
    and without stop_on_error the queued cell runs on the new kernel."""
    crashing = session.execute("import os, time\ntime.sleep(0.3)\nos._exit(1)")
    queued = session.execute("print('after crash')")
    assert finish(session, crashing).content["ename"] == "KernelDied"
    assert finish(session, queued).content["status"] == "aborted"
    crashing = session.execute("import os, time\ntime.sleep(0.3)\nos._exit(1)", stop_on_error=False)
    queued = session.execute("print('after crash')")
    assert finish(session, crashing).content["ename"] == "KernelDied"
    after = finish(session, queued)
    assert after.content["status"] == "ok"
    assert after.stream("stdout") == "after crash\n"


def test_wait_for_ready_and_heartbeat(session, connect):
    kc = connect(session.session_info["connection_file"], ready=False)
    kc.wait_for_ready(timeout=10)  # jupyter_client's own check: heartbeat, then kernel_info
    assert kc.is_alive()
    assert run(kc, "'ready'").result == "'ready'"


def _endpoint(session, channel):
    conn = json.loads(Path(session.session_info["connection_file"]).read_text())
    if conn["transport"] == "ipc":
        return f"ipc://{conn['ip']}-{conn[channel + '_port']}"
    return f"tcp://{conn['ip']}:{conn[channel + '_port']}"


def test_the_heartbeat_echoes_pings_and_refuses_anything_larger(session):
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.REQ)
    sock.linger = 0
    sock.rcvtimeo = 2000
    try:
        sock.connect(_endpoint(session, "hb"))
        sock.send(b"ping")
        assert sock.recv() == b"ping"
        # Past 1 KiB a ping is refused (its connection dropped): an echo of --max-message
        # bytes a time, a thousand queued, was the memory of anyone who could connect.
        sock.send(b"x" * 2048)
        with pytest.raises(zmq.Again):
            sock.recv()
    finally:
        sock.close()
    assert run(session, "'alive'").result == "'alive'"


def test_a_second_connection_with_a_clients_identity_gets_nothing(session):
    # The identity is the client's session id, which anyone can read off iopub: without
    # router handover (as in ipykernel) the newcomer is ignored, and the reply goes to the
    # client that asked.
    msg_id = session.execute("import time\ntime.sleep(0.5)\n7")
    ctx = zmq.Context.instance()
    intruder = ctx.socket(zmq.DEALER)
    intruder.linger = 0
    intruder.setsockopt(zmq.IDENTITY, session.session.bsession)
    try:
        intruder.connect(_endpoint(session, "shell"))
        reply = shell_reply(session, msg_id)
        assert reply["content"]["status"] == "ok"
        assert not intruder.poll(500), "the intruder got the client's reply"
    finally:
        intruder.close()


def _host_pids(kernel_pid, argv):
    """Host pids of the processes below kernel_pid whose command line is argv."""
    found = []
    for pid in descendants(kernel_pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().split(b"\0")[:-1] == [a.encode() for a in argv]:
                    found.append(pid)
        except OSError:
            pass
    return found


def test_end_kills_kernel_children(kenneld, session):
    run(session, "import subprocess\np = subprocess.Popen(['sleep', '60'])")
    kernel_pid = kenneld.ok("info_request", {"session": session.session_info["id"]})[
        "session"]["kernel_pid"]
    (child,) = wait_for(lambda: _host_pids(kernel_pid, ["sleep", "60"]), what="sleep to start")
    assert kenneld.call("end_request", {"session": session.session_info["id"]})["status"] == "ok"
    wait_for(lambda: not pid_alive(child), what="the kernel's child to be killed")


@pytest.mark.own_kenneld
def test_kenneld_stops_with_busy_kernel(kenneld, session):
    """The fixture's teardown (kenneld's stop) checks that the busy kernel and its child are
    gone."""
    msg_id = session.execute("import subprocess, time\n"
                             "subprocess.Popen(['sleep', '60'])\ntime.sleep(30)")
    wait_iopub(session, msg_id, "execute_input")
    kenneld.sessions()  # records kernel_pid for the teardown check


# ---- several sessions --------------------------------------------------------------------


def test_two_sessions_are_isolated(kenneld, connect):
    a = connect(kenneld.create("a")["connection_file"])
    b = connect(kenneld.create("b")["connection_file"])
    assert run(a, "only_in_a = 1").content["status"] == "ok"
    cell = run(b, "only_in_a")
    assert cell.content["status"] == "error"
    assert cell.content["ename"] == "NameError"
    # Everything B's iopub carries while A prints: nothing of A's.
    a_cell = run(a, "print('A-MARKER')\ndisplay('A-MARKER')\n'A-MARKER'")
    assert "A-MARKER" in a_cell.stream("stdout")
    b_cell = run(b, "print('B-done')")
    seen = list(b_cell.iopub)
    while True:
        try:
            seen.append(b.get_iopub_msg(timeout=0.3))
        except queue.Empty:
            break
    assert b_cell.stream("stdout") == "B-done\n"
    assert not [m for m in seen if "A-MARKER" in json.dumps(m, default=str)]
    a_sessions = {m["header"]["session"] for m in a_cell.iopub}
    assert a_sessions.isdisjoint(m["header"]["session"] for m in seen)


def test_reattach_by_name(kenneld, connect):
    first = kenneld.ok("create_request", {"name": "x"})
    assert first["created"] is True
    kc1 = connect(first["session"]["connection_file"])
    run(kc1, "remembered = 'yes'")
    close_client(kc1)
    second = kenneld.ok("create_request", {"name": "x"})
    assert second["created"] is False
    assert second["session"]["id"] == first["session"]["id"]
    assert second["session"]["connection_file"] == first["session"]["connection_file"]
    kc2 = connect(second["session"]["connection_file"])
    assert run(kc2, "remembered").result == "'yes'"


# ---- manager API -------------------------------------------------------------------------


def test_manager_reply_envelope(kenneld):
    assert kenneld.info_path.stat().st_mode & 0o777 == 0o600
    assert kenneld.info["pid"] == kenneld.proc.pid
    reply = kenneld.request("list_request", {})
    assert reply["msg_type"] == "list_reply"
    assert reply["content"] == {"status": "ok", "sessions": []}


def test_manager_create_info_list_end(kenneld):
    created = kenneld.ok("create_request", {"name": "work", "colour": "blue"})  # unknown: ignored
    assert created["created"] is True
    s = created["session"]
    assert s["name"] == "work"
    assert s["state"] in ("starting", "idle")
    assert Path(s["connection_file"]).is_file()
    # 0 while the zygote has not yet said which pid the new kernel has
    pid = wait_for(lambda: kenneld.ok("info_request", {"session": "work"})["session"]["kernel_pid"],
                   what="the kernel's pid")
    assert pid > 0 and s["kernel_pid"] in (0, pid)
    unnamed = kenneld.create()
    assert unnamed["name"] == unnamed["id"]
    assert [x["id"] for x in kenneld.sessions()] == [s["id"], unnamed["id"]]  # oldest first
    by_name = kenneld.ok("info_request", {"session": "work"})["session"]
    by_id = kenneld.ok("info_request", {"session": s["id"]})["session"]
    assert by_name["id"] == by_id["id"] == s["id"]
    assert kenneld.call("end_request", {"session": "work"}) == {"status": "ok"}
    assert not Path(s["connection_file"]).parent.exists()
    assert [x["id"] for x in kenneld.sessions()] == [unnamed["id"]]
    wait_for(lambda: not pid_alive(pid), what="the ended kernel to exit")


def test_manager_counts_cells(kenneld, connect):
    s = kenneld.create("counted")
    kc = connect(s["connection_file"])
    run(kc, "1")
    run(kc, "2")
    info = kenneld.ok("info_request", {"session": "counted"})["session"]
    assert info["cells"] == 2
    assert info["queued"] == 0
    assert info["memory_bytes"] > 0


@pytest.mark.parametrize("msg_type", ["info_request", "end_request"])
def test_manager_no_such_session(kenneld, msg_type):
    reply = kenneld.call(msg_type, {"session": "nobody"})
    assert reply["status"] == "error"
    assert reply["ename"] == "NoSuchSession"
    assert reply["evalue"]


@pytest.mark.parametrize("content", [
    {"name": "../x"}, {"name": ""}, {"name": "a/b"}, {"name": "x" * 129}, {"name": 7},
    {"name": "ok", "connection": "tcp"}, {"name": "."}, {"name": ".."}, {"name": "-x"},
    {"name": "_x"},
])
def test_manager_bad_create(kenneld, content):
    reply = kenneld.call("create_request", content)
    assert reply["status"] == "error"
    assert reply["ename"] == "BadRequest"
    assert kenneld.sessions() == []


@pytest.mark.parametrize("msg_type, content", [
    ("info_request", {}), ("end_request", {"session": ""}), ("frobnicate_request", {}),
])
def test_manager_bad_request(kenneld, msg_type, content):
    reply = kenneld.request(msg_type, content)
    assert reply["msg_type"] == msg_type.replace("_request", "_reply")
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "BadRequest"


@pytest.mark.light_preload  # its own configuration; the preload is not its subject
@pytest.mark.parametrize("kenneld", [["--max-sessions", "1"]], indirect=True)
def test_manager_too_many_sessions(kenneld):
    kenneld.create("one")
    reply = kenneld.call("create_request", {"name": "two"})
    assert reply["status"] == "error"
    assert reply["ename"] == "TooManySessions"
    assert kenneld.ok("create_request", {"name": "one"})["created"] is False


@pytest.fixture
def exiting_kernel_dir():
    """A --kernel-dir whose kennel_kernel.py exits before its hello. World-readable: a
    sandboxed kernel runs as another uid."""
    d = Path(tempfile.mkdtemp(prefix="kn-kdir-", dir="/tmp"))
    (d / "kennel_kernel.py").write_text("import sys\nsys.exit(3)\n")
    d.chmod(0o755)
    (d / "kennel_kernel.py").chmod(0o644)
    yield d
    shutil.rmtree(d)


@pytest.mark.light_preload  # its own configuration; the preload is not its subject
def test_zygote_that_cannot_start(start_kenneld, exiting_kernel_dir, connect):
    """No zygote runtime in --kernel-dir: requests fail with an error naming the zygote (kenneld
    never waits for it, so the create itself succeeds), a new zygote is tried on the next
    request, and kenneld serves on."""
    kenneld = start_kenneld(args=["--kernel-dir", str(exiting_kernel_dir), "--spawner", "zygote"])
    kc = connect(kenneld.create("broken")["connection_file"], ready=False)
    for _ in range(2):
        reply = shell_reply(kc, kc.execute("1 + 1"))["content"]
        assert reply["status"] == "error" and reply["ename"] == "KernelStartFailed", reply
        assert "zygote" in reply["evalue"], reply
    assert kenneld.ok("stats_request")["sessions"] == 1
    assert "zygote" in kenneld.log(tail=None)


@pytest.mark.light_preload  # its own configuration; the preload is not its subject
def test_more_sessions_than_czmqs_default_socket_cap(start_kenneld):
    """210 sessions hold 1050 ZeroMQ sockets, past czmq's default cap of 1024 (kenneld once
    died on an assertion there): kenneld sizes the cap from --max-sessions. Kernels that are
    /bin/false keep it cheap; their sessions and sockets stay."""
    kenneld = start_kenneld(args=["--python", "/bin/false", "--spawner", "exec",
                                  "--insecure-no-sandbox", "--disk", "0", "--max-sessions", "220"])
    for i in range(210):
        kenneld.create(f"s{i}")
    assert kenneld.ok("stats_request")["sessions"] == 210
    assert kenneld.proc.poll() is None


def test_max_sessions_beyond_what_the_system_allows(tmp_path):
    """--max-sessions that would need more ZeroMQ sockets than the system allows: kenneld
    refuses to start, saying so, rather than failing later."""
    r = subprocess.run([str(KENNELD), "--state-dir", str(tmp_path / "state"),
                        "--max-sessions", "100000"], capture_output=True, text=True, timeout=20)
    assert r.returncode != 0
    assert "ZeroMQ sockets" in r.stderr and "--max-sessions 100000" in r.stderr, r.stderr


@pytest.mark.light_preload  # its own configuration; the preload is not its subject
def test_kernel_that_cannot_start(start_kenneld, exiting_kernel_dir, connect):
    """A cold kernel that exits before its hello: requests fail instead of hanging."""
    kenneld = start_kenneld(args=["--kernel-dir", str(exiting_kernel_dir), "--spawner", "exec"])
    kc = connect(kenneld.create("broken")["connection_file"], ready=False)
    reply = shell_reply(kc, kc.execute("1 + 1"))["content"]  # iopub may not be joined yet
    assert reply["status"] == "error"
    assert reply["ename"] == "KernelStartFailed"
    info = shell_request(kc, "kernel_info")
    assert info["status"] == "error"


@pytest.mark.light_preload  # its own configuration; the preload is not its subject
def test_wait_for_ready_on_a_kernel_that_cannot_start(start_kenneld, exiting_kernel_dir, connect):
    """jupyter_client's wait_for_ready reads protocol_version from the kernel_info_reply, an
    error one too: kenneld's for a kernel that cannot start once lacked it, and
    wait_for_ready died of a KeyError. Now it returns, and the cell tells why."""
    kenneld = start_kenneld(args=["--kernel-dir", str(exiting_kernel_dir), "--spawner", "exec"])
    kc = connect(kenneld.create("broken")["connection_file"], ready=False)
    kc.wait_for_ready(timeout=15)
    info = shell_request(kc, "kernel_info")
    assert info["status"] == "error" and info["ename"] == "KernelStartFailed", info
    assert info["protocol_version"] == "5.3"
    assert info["implementation"] == "kennel"
    assert isinstance(info["implementation_version"], str)
    assert isinstance(info["banner"], str)
    assert info["language_info"]["name"] == "python"
    reply = shell_reply(kc, kc.execute("1 + 1"))["content"]
    assert reply["ename"] == "KernelStartFailed", reply


@pytest.mark.parametrize("kenneld", ["tcp", "ipc"], indirect=True)
def test_cells_a_client_sent_before_it_closed_all_run(kenneld, connect):
    """A client may send its cells and close at once (a script's last executes, then
    stop_channels): every cell it sent runs, as in ipykernel. With libzmq taking in only four
    messages a connection ahead of kenneld, it stopped reading the connection, and when the
    client's hangup came meanwhile it dropped what the socket still held: of 50 cells, 5 to
    50 ran."""
    info = kenneld.create("sent-then-closed")
    conn = json.loads(Path(info["connection_file"]).read_text())
    kc = connect(info["connection_file"])
    run(kc, "c = 0")
    from jupyter_client.session import Session
    session = Session(key=conn["key"].encode(), signature_scheme=conn["signature_scheme"])
    url = (f"tcp://{conn['ip']}:{conn['shell_port']}" if conn["transport"] == "tcp"
           else f"ipc://{conn['ip']}-{conn['shell_port']}")
    total = 0
    for _ in range(4):
        ctx = zmq.Context()
        s = ctx.socket(zmq.DEALER)
        s.connect(url)
        for _ in range(50):
            session.send(s, "execute_request", {"code": "c += 1", "silent": False})
        total += 50
        s.close(linger=10000)  # all of it written first
        ctx.term()
        deadline = time.monotonic() + 20
        while (c := run(kc, "c").result) != str(total) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert c == str(total), f"of {total} cells sent, {c} ran"
