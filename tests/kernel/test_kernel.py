"""Tests of the Python kernel (kernels/python) through its pipe, with no kenneld.

Run with: /usr/bin/python3 -m pytest -q tests/kernel
"""

import ast
import collections
import contextlib
import json
import os
import random
import re
import signal
import socket
import sys
import threading
import time

import pytest

from kernel_pipe_client import KERNEL, KernelProcess, jdump, make_header, streams

pytestmark = pytest.mark.spread  # a kernel per test, nothing shared


def types(iopub):
    return [t for t, _ in iopub]


def only(iopub, msg_type):
    found = [c for t, c in iopub if t == msg_type]
    assert len(found) == 1, iopub
    return found[0]


# -- start and exit ------------------------------------------------------------


def test_hello(kernel):
    assert kernel.hello_op["pid"] == kernel.proc.pid
    info = kernel.hello
    assert "status" not in info
    assert info["protocol_version"] == "5.3"
    assert info["implementation"] == "kennel"
    assert info["implementation_version"] == "0.1"
    assert info["language_info"]["name"] == "python"
    assert info["language_info"]["pygments_lexer"] == "ipython3"
    assert info["language_info"]["codemirror_mode"] == {"name": "ipython", "version": 3}
    assert info["debugger"] is False and info["help_links"] == []


def test_eof_exits_0(kernel):
    kernel.execute("x = 1")
    kernel.sock.close()
    assert kernel.wait() == 0


def test_eof_during_a_cell_exits_0(kernel):
    kernel.send_request("execute_request", {"code": "while True: pass", "silent": False,
                                            "store_history": True, "user_expressions": {},
                                            "allow_stdin": False})
    kernel.recv_frame()  # execute_input: the cell has started
    kernel.sock.close()
    assert kernel.wait(timeout=5) == 0


def test_exit_op_exits_0(kernel):
    kernel.send_frame([jdump({"op": "exit"})])
    assert kernel.wait() == 0


def test_malformed_frame_exits_1(kernel):
    kernel.sock.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00")  # a body with zero parts
    assert kernel.wait() == 1


# -- execute ---------------------------------------------------------------------


def test_state_across_executes(kernel):
    reply, iopub = kernel.execute("a = 6")
    assert reply == {"status": "ok", "execution_count": 1, "user_expressions": {},
                     "payload": []}
    assert iopub == [("execute_input", {"code": "a = 6", "execution_count": 1})]
    reply, iopub = kernel.execute("a * 7")
    assert reply["execution_count"] == 2
    assert types(iopub) == ["execute_input", "execute_result"]
    assert iopub[1][1] == {"execution_count": 2, "data": {"text/plain": "42"},
                           "metadata": {}}


def test_builtin_results_match_ipython_formatting(kernel):
    """KennelDisplayFormatter's shortcut for builtin values gives what IPython's own
    DisplayFormatter gives, printers registered for a type (or its base) included."""
    values = "[2, 2.5, True, 'a', b'b', [1, (2, 3)], {'k': {1}}, frozenset(), range(3), None, 1j]"
    reply, iopub = kernel.execute(
        "from IPython.core.formatters import DisplayFormatter as _DF\n"
        "_ip, _ref = get_ipython(), _DF()\n"
        "_ref.formatters['text/plain'] = _ip.display_formatter.formatters['text/plain']\n"
        f"_same = [_ip.display_formatter.format(v) == _ref.format(v) for v in {values}]\n"
        "_html = _ip.display_formatter.formatters['text/html']\n"
        "_html.for_type(int, lambda n: f'<i>{n}</i>')\n"
        "_same, _ip.display_formatter.format(True)")
    assert reply["status"] == "ok", reply
    same, bool_bundle = eval(only(iopub, "execute_result")["data"]["text/plain"])
    assert same == [True] * 11
    # A printer for int reaches a bool (a subclass) as in IPython: the shortcut stands aside.
    assert bool_bundle == ({"text/plain": "True", "text/html": "<i>True</i>"}, {})
    _, iopub = kernel.execute("7")
    assert only(iopub, "execute_result")["data"] == {"text/plain": "7", "text/html": "<i>7</i>"}
    _, iopub = kernel.execute("_html.pop(int); 7")
    assert only(iopub, "execute_result")["data"] == {"text/plain": "7"}
    # A printer for one object (IPython's singleton_printers, by id), and a formatter class
    # of the user's (it may answer for anything): both are asked, as IPython would.
    _, iopub = kernel.execute("_html.singleton_printers[id(None)] = lambda o: '<b>none</b>'\n"
                              "_ip.display_formatter.format(None)")
    assert eval(only(iopub, "execute_result")["data"]["text/plain"]) == (
        {"text/plain": "None", "text/html": "<b>none</b>"}, {})
    _, iopub = kernel.execute(
        "from IPython.core.formatters import BaseFormatter as _BF\n"
        "class _Any(_BF):\n"
        "    format_type = 'text/x-any'\n"
        "    def __call__(self, obj): return 'any'\n"
        "_ip.display_formatter.formatters['text/x-any'] = _Any(parent=_ip.display_formatter)\n"
        "8")
    assert only(iopub, "execute_result")["data"] == {"text/plain": "8", "text/x-any": "any"}


def test_user_namespace_is_clean(kernel):
    _, iopub = kernel.execute("sorted(k for k in globals() if not k.startswith('_'))")
    names = eval(only(iopub, "execute_result")["data"]["text/plain"])
    assert set(names) <= {"In", "Out", "exit", "quit", "get_ipython", "CellTimeout"}


def test_a_warm_up_cell_that_fails_leaves_nothing_behind(kernel):
    """KennelShell.warm_up undoes a throwaway cell whole, an error's traces too: %tb and
    %debug must not find one, nor the history the cell, nor the count its number. (The
    zygote's warm-up cells do not fail; this is the one way to make one fail.)"""
    reply, iopub = kernel.execute(
        "import sys\n"
        "ip = get_ipython()\n"
        "before = (ip.execution_count, len(In), sorted(Out), hasattr(sys, 'last_value'))\n"
        "ip.warm_up(code='1 / 0')\n"
        "print(before == (ip.execution_count, len(In), sorted(Out), hasattr(sys, 'last_value')))")
    assert reply["status"] == "ok" and streams(iopub) == "True\n", (reply, iopub)
    reply, iopub = kernel.execute("print('after')")
    assert reply["execution_count"] == 2, reply
    reply, iopub = kernel.execute("import sys; print(hasattr(sys, 'last_value'))")
    assert streams(iopub) == "False\n", iopub


def test_stream_order_with_displays(kernel):
    code = (
        "import sys\n"
        "print('one')\n"
        "display({'text/plain': 'D1'}, raw=True)\n"
        "print('two', file=sys.stderr)\n"
        "print('three')\n"
        "display({'text/html': '<b>D2</b>', 'text/plain': 'D2'}, raw=True)\n"
        "print('four')\n"
    )
    reply, iopub = kernel.execute(code)
    assert reply["status"] == "ok"
    got = [(t, c.get("name"), c.get("text") or c["data"]["text/plain"]) for t, c in iopub[1:]]
    assert got == [
        ("stream", "stdout", "one\n"),
        ("display_data", None, "D1"),
        ("stream", "stderr", "two\n"),
        ("stream", "stdout", "three\n"),
        ("display_data", None, "D2"),
        ("stream", "stdout", "four\n"),
    ]


def test_fd_level_output(kernel):
    code = (
        "import os, subprocess\n"
        "print('py1')\n"
        "os.write(1, b'fd1\\n')\n"
        "subprocess.run(['echo', 'child'])\n"
        "print('py2')\n"
        "os.write(2, b'fd-err\\n')\n"
        "subprocess.run('echo child-err >&2', shell=True)\n"
    )
    reply, iopub = kernel.execute(code)
    assert reply["status"] == "ok"
    assert streams(iopub, "stdout") == "py1\nfd1\nchild\npy2\n"
    assert streams(iopub, "stderr") == "fd-err\nchild-err\n"


def test_forked_child_output(kernel):
    code = (
        "import multiprocessing as mp\n"
        "p = mp.get_context('fork').Process(target=print, args=('from child',))\n"
        "p.start(); p.join()\n"
        "print('exit', p.exitcode)\n"
    )
    reply, iopub = kernel.execute(code)
    assert reply["status"] == "ok"
    assert streams(iopub, "stdout") == "from child\nexit 0\n"


def test_periodic_flush_and_split(kernel):
    code = (
        "import time\n"
        "for i in range(3):\n"
        "    print(i)\n"
        "    time.sleep(0.2)\n"
        "print('x' * 200000)\n"
    )
    reply, iopub = kernel.execute(code)
    assert reply["status"] == "ok"
    texts = [c["text"] for t, c in iopub if t == "stream"]
    assert texts[:3] == ["0\n", "1\n", "2\n"]  # sent while the cell was still running
    assert "".join(texts[3:]) == "x" * 200000 + "\n"
    assert all(len(t) <= 64 * 1024 for t in texts)


def test_error(kernel):
    kernel.execute("def f():\n    return 1 / 0")
    reply, iopub = kernel.execute("f()")
    assert reply["status"] == "error"
    assert reply["ename"] == "ZeroDivisionError"
    assert reply["evalue"] == "division by zero"
    assert reply["execution_count"] == 2
    err = only(iopub, "error")
    assert err["ename"] == "ZeroDivisionError" and err["traceback"] == reply["traceback"]
    plain = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(err["traceback"]))
    assert "In [1], line 2" in plain and "return 1 / 0" in plain
    reply, iopub = kernel.execute("1 +")
    assert reply["status"] == "error" and reply["ename"] == "SyntaxError"
    assert only(iopub, "error")["ename"] == "SyntaxError"


def test_silent(kernel):
    kernel.execute("a = 1")
    reply, iopub = kernel.execute("print('hi'); a + 1", silent=True)
    assert reply["status"] == "ok"
    assert iopub == [("stream", {"name": "stdout", "text": "hi\n"})]
    reply, iopub = kernel.execute("a")
    assert reply["execution_count"] == 2
    assert only(iopub, "execute_input")["execution_count"] == 2


def test_user_expressions(kernel):
    reply, _ = kernel.execute("a = 5", user_expressions={"double": "a * 2", "bad": "nope"})
    assert reply["user_expressions"]["double"] == {
        "status": "ok", "data": {"text/plain": "10"}, "metadata": {}}
    assert reply["user_expressions"]["bad"]["status"] == "error"
    assert reply["user_expressions"]["bad"]["ename"] == "NameError"


def test_display_id_update(kernel):
    code = "h = display('one', display_id='d1')\nh.update('two')\n"
    reply, iopub = kernel.execute(code)
    assert reply["status"] == "ok"
    shown = only(iopub, "display_data")
    assert shown["transient"] == {"display_id": "d1"}
    assert shown["data"]["text/plain"] == "'one'"
    updated = only(iopub, "update_display_data")
    assert updated["transient"] == {"display_id": "d1"}
    assert updated["data"]["text/plain"] == "'two'"
    _, iopub = kernel.execute("from IPython.display import clear_output\nclear_output(wait=True)")
    assert only(iopub, "clear_output") == {"wait": True}


def test_matplotlib_inline(kernel):
    reply, iopub = kernel.execute("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]);")
    assert reply["status"] == "ok"
    png = only(iopub, "display_data")["data"]["image/png"]
    assert png.startswith("iVBORw0KGgo")  # base64 of the PNG signature


def test_ipythons_terminal_is_imported_only_when_asked_for(kernel):
    """A kernel imports IPython without its terminal (kennel_ipython: ~0.1 s of CPU and
    ~5 MiB a cold start); IPython.embed and the terminal's module are the real ones once a
    user asks for them, and IPython's other names are as before."""
    reply, iopub = kernel.execute(
        "import sys\n"
        "before = sorted(m for m in ('prompt_toolkit', 'IPython.terminal.interactiveshell')\n"
        "                if m in sys.modules)\n"
        "import IPython\n"
        "from IPython import embed\n"
        "from IPython.terminal.embed import InteractiveShellEmbed\n"
        "import IPython.terminal.embed as tmod\n"
        "print(before, embed.__module__, embed is IPython.embed, tmod.embed is embed,\n"
        "      InteractiveShellEmbed.__module__, 'prompt_toolkit' in sys.modules,\n"
        "      type(IPython.get_ipython()).__name__, IPython.version_info >= (8,))")
    assert reply["status"] == "ok", reply
    assert streams(iopub, "stdout") == ("[] IPython.terminal.embed True True "
                                        "IPython.terminal.embed True KennelShell True\n")
    reply, _ = kernel.execute("IPython.no_such_name")
    assert reply["ename"] == "AttributeError"
    assert reply["evalue"] == "module 'IPython' has no attribute 'no_such_name'"


def test_ipythons_deferred_terminal_module_is_the_real_one_when_held_and_revived(kernel,
                                                                                tmp_path):
    """The stand-in for IPython.terminal.embed, held under a name before anything asked for
    the real module: it answers for the real one, `from … import embed` gives the real
    function, IPython.terminal is there, and a snapshot keeps the name as that module."""
    reply, iopub = kernel.execute(
        "import sys, IPython, IPython.terminal.embed as early\n"
        "print('prompt_toolkit' in sys.modules, 'embed' in dir(IPython),\n"
        "      early.__file__.endswith('embed.py'), IPython.terminal.embed is early)\n"
        "from IPython.terminal.embed import embed\n"
        "print(embed.__module__, embed is IPython.embed, early.InteractiveShellEmbed.__name__)")
    assert reply["status"] == "ok", reply
    assert streams(iopub, "stdout") == ("False True True True\n"
                                        "IPython.terminal.embed True InteractiveShellEmbed\n")
    op, parts = _save(kernel)
    assert "early" not in op["unsaved"], op
    fresh, op = _revive(kernel, tmp_path, parts)
    try:
        assert op["failed"] == [], op
        reply, iopub = fresh.execute("print(early.InteractiveShellEmbed is sys.modules["
                                     "'IPython.terminal.embed'].InteractiveShellEmbed, "
                                     "early.InteractiveShellEmbed.__name__)")
        assert reply["status"] == "ok", reply
        assert streams(iopub, "stdout") == "True InteractiveShellEmbed\n"
    finally:
        fresh.kill()


# -- stdin -----------------------------------------------------------------------


def test_input_round_trip(kernel):
    requests = []

    def answer(content):
        requests.append(content)
        kernel.reply_input("secret" if content["password"] else "bob")

    code = "import getpass\nprint('before')\nname = input('name? ')\npw = getpass.getpass()"
    reply, iopub = kernel.execute(code, on_stdin=answer)
    assert reply["status"] == "ok", reply
    assert requests == [{"prompt": "name? ", "password": False},
                        {"prompt": "Password: ", "password": True}]
    assert streams(iopub) == "before\n"
    reply, _ = kernel.execute("", user_expressions={"v": "(name, pw)"})
    assert reply["user_expressions"]["v"]["data"]["text/plain"] == "('bob', 'secret')"


def test_input_not_allowed(kernel):
    reply, iopub = kernel.execute("input('x')", allow_stdin=False)
    assert reply["status"] == "error"
    assert reply["ename"] == "StdinNotImplementedError"
    assert only(iopub, "error")["ename"] == "StdinNotImplementedError"


# -- interrupt -------------------------------------------------------------------


def wait_for_stream(kernel, text):
    while True:
        op, parts = kernel.recv_frame()
        assert op["op"] == "iopub", op
        content = json.loads(parts[1])
        if op["msg_type"] == "stream" and text in content["text"]:
            return


def test_sigint_interrupts_cell(kernel):
    kernel.execute("kept = 41")
    msg_id = kernel.send_request("execute_request", {
        "code": "import time\nprint('sleeping', flush=True)\ntime.sleep(10)",
        "silent": False, "store_history": True, "user_expressions": {},
        "allow_stdin": False})
    wait_for_stream(kernel, "sleeping")
    started = time.monotonic()
    kernel.proc.send_signal(signal.SIGINT)
    _, reply, iopub = kernel.collect(msg_id)
    assert time.monotonic() - started < 5
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
    traceback = only(iopub, "error")["traceback"]
    plain = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(traceback))
    assert "time.sleep(10)" in plain and "kennel" not in plain  # no handler frame
    _, iopub = kernel.execute("kept + 1")
    assert only(iopub, "execute_result")["data"]["text/plain"] == "42"


# kenneld stops a cell with SIGINT (interrupt_request) or SIGUSR2 (past its deadline).
STOPS = [(signal.SIGINT, "KeyboardInterrupt"), (signal.SIGUSR2, "CellTimeout")]


@pytest.mark.parametrize("signum, ename", STOPS)
def test_signal_stops_input(kernel, signum, ename):
    msg_id = kernel.send_request("execute_request", {
        "code": "input('?')", "silent": False, "store_history": True,
        "user_expressions": {}, "allow_stdin": True})
    # (the count in the op header too: kenneld reads it there, the content unparsed)
    op, parts = kernel.recv_frame()
    assert op == {"op": "iopub", "msg_type": "execute_input",
                  "execution_count": json.loads(parts[1])["execution_count"]}
    assert kernel.recv_frame()[0] == {"op": "stdin", "msg_type": "input_request"}
    kernel.proc.send_signal(signum)
    _, reply, _ = kernel.collect(msg_id)
    assert reply["ename"] == ename
    kernel.reply_input("too late")  # a stale reply must be ignored
    reply, _ = kernel.execute("1")
    assert reply["status"] == "ok"


@pytest.mark.parametrize("signum", [s for s, _ in STOPS])
def test_signal_while_idle_is_harmless(kernel, signum):
    kernel.proc.send_signal(signum)  # very likely still starting up
    kernel.execute("x = 1")
    for _ in range(3):
        kernel.proc.send_signal(signum)
        time.sleep(0.05)
    assert kernel.proc.poll() is None
    _, iopub = kernel.execute("x")
    assert only(iopub, "execute_result")["data"]["text/plain"] == "1"


# -- deadline --------------------------------------------------------------------


def start_sleeping_cell(kernel, code, announce=True):
    """Send code, which prints 'sleeping' before it sleeps; return once it printed. With
    announce=False the code prints it itself (inside its try, so that a signal sent the
    moment 'sleeping' arrives cannot land before the try starts)."""
    prefix = "import time\nprint('sleeping', flush=True)\n" if announce else "import time\n"
    msg_id = kernel.send_request("execute_request", {
        "code": prefix + code,
        "silent": False, "store_history": True, "user_expressions": {},
        "allow_stdin": False})
    wait_for_stream(kernel, "sleeping")
    return msg_id


def test_sigusr2_ends_cell_past_deadline(kernel):
    kernel.execute("kept = 41")
    # One statement: IPython compiles and runs a cell's statements one by one, and a signal
    # sent once 'sleeping' came could land while it compiled the next (a loaded CI run).
    msg_id = start_sleeping_cell(kernel, "(print('sleeping', flush=True), time.sleep(10))",
                                 announce=False)
    started = time.monotonic()
    kernel.proc.send_signal(signal.SIGUSR2)
    _, reply, iopub = kernel.collect(msg_id)
    assert time.monotonic() - started < 2
    assert reply["status"] == "error" and reply["ename"] == "CellTimeout"
    assert reply["evalue"] == "the cell ran past its deadline"
    error = only(iopub, "error")
    assert error["ename"] == "CellTimeout" and error["traceback"] == reply["traceback"]
    plain = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error["traceback"]))
    assert "time.sleep(10)" in plain and "kennel" not in plain  # no handler frame
    assert kernel.reply_metadata["metrics"]["cpu_ms"] >= 0
    _, iopub = kernel.execute("kept + 1")
    assert only(iopub, "execute_result")["data"]["text/plain"] == "42"


def test_cell_timeout_is_a_timeout_error(kernel):
    msg_id = start_sleeping_cell(kernel, (
        "try:\n"
        "    print('sleeping', flush=True)\n"
        "    time.sleep(10)\n"
        "except TimeoutError as e:\n"
        "    caught = type(e).__name__\n"), announce=False)
    kernel.proc.send_signal(signal.SIGUSR2)
    _, reply, _ = kernel.collect(msg_id)
    assert reply["status"] == "ok"
    _, iopub = kernel.execute("caught")
    assert only(iopub, "execute_result")["data"]["text/plain"] == "'CellTimeout'"


def test_except_cell_timeout_in_a_cell(kernel):
    msg_id = start_sleeping_cell(kernel, (
        "try:\n"
        "    print('sleeping', flush=True)\n"
        "    time.sleep(10)\n"
        "except CellTimeout as e:\n"
        "    print('caught:', e)\n"), announce=False)
    kernel.proc.send_signal(signal.SIGUSR2)
    _, reply, iopub = kernel.collect(msg_id)
    assert reply["status"] == "ok"
    assert streams(iopub, "stdout") == "caught: the cell ran past its deadline\n"
    # The name is hidden from %who, and %reset puts it back.
    _, iopub = kernel.execute("%who")
    assert "CellTimeout" not in streams(iopub)
    kernel.execute("%reset -f")
    reply, _ = kernel.execute("assert issubclass(CellTimeout, TimeoutError)")
    assert reply["status"] == "ok"


def test_sigusr2_stops_a_child_process_cell(kernel):
    # The group signal reaches the cell's child too; the kernel must survive it.
    msg_id = start_sleeping_cell(kernel, "import subprocess\nsubprocess.run(['sleep', '10'])")
    kernel.proc.send_signal(signal.SIGUSR2)
    _, reply, _ = kernel.collect(msg_id)
    assert reply["ename"] == "CellTimeout"
    reply, _ = kernel.execute("1")
    assert reply["status"] == "ok"


def _blocked_signals(pid, tid):
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigBlk:"))
    return {signum for signum in (signal.SIGINT, signal.SIGUSR2) if mask >> (signum - 1) & 1}


def test_only_the_main_thread_takes_the_cell_signals(kernel):
    # kenneld's signals go to the process, and Linux gives them to any thread that does
    # not block them: one of the kernel's helper threads taking a deadline while the
    # main thread blocked every signal (subprocess.run's vfork) left a cell waiting in
    # waitpid deaf to it.
    kernel.execute("1")  # the stream threads start with the shell, after the hello
    pid = kernel.proc.pid
    threads = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    assert len(threads) == 5, threads  # main, hangup watcher, relay, flusher, fd reader
    assert _blocked_signals(pid, pid) == set()
    for tid in threads:
        if tid != pid:
            assert _blocked_signals(pid, tid) == {signal.SIGINT, signal.SIGUSR2}, tid


def test_a_deadline_another_thread_took_still_wakes_the_cell(kernel):
    # The main thread blocks SIGUSR2, as subprocess does around its vfork, so Linux hands
    # the signal to the cell's own thread; the main thread's sleep must end all the same.
    msg_id = start_sleeping_cell(kernel, (
        "import signal, threading\n"
        "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})\n"
        "try:\n"
        "    print('sleeping', flush=True)\n"
        "    time.sleep(10)\n"
        "finally:\n"
        "    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})\n"), announce=False)
    started = time.monotonic()
    kernel.proc.send_signal(signal.SIGUSR2)
    _, reply, _ = kernel.collect(msg_id)
    assert reply["ename"] == "CellTimeout"
    assert time.monotonic() - started < 2
    reply, _ = kernel.execute("1")
    assert reply["status"] == "ok"


def test_a_storm_of_interrupts_never_escapes_the_kernel(kernel):
    """SIGINTs landing anywhere, a cell's start and end included, are raised in the cell or
    dropped, never out of the kernel's own code (an arm() that let one out killed the
    kernel within a few hundred cells of such a storm)."""
    stop = threading.Event()
    rng = random.Random(12)

    def storm():
        while not stop.is_set():
            kernel.proc.send_signal(signal.SIGINT)
            time.sleep(rng.uniform(0, 0.002))

    stormer = threading.Thread(target=storm)
    stormer.start()
    outcomes = collections.Counter()
    odd = []  # the error replies other than KeyboardInterrupt, whole: what to look into
    try:
        for _ in range(20):
            ids = [kernel.send_request("execute_request", {
                "code": "pass", "silent": False, "store_history": False,
                "user_expressions": {}, "allow_stdin": False, "stop_on_error": False})
                for _ in range(50)]
            for msg_id in ids:
                _, reply, _ = kernel.collect(msg_id)
                outcome = reply.get("ename", reply["status"])
                outcomes[outcome] += 1
                if outcome not in ("ok", "KeyboardInterrupt"):
                    odd.append((reply.get("evalue"), reply.get("traceback")))
    finally:
        stop.set()
        stormer.join()
    assert kernel.proc.poll() is None, (outcomes, odd, kernel.logs)
    # A SystemError came back in about 1 of 30,000 cells, "<class 'KeyboardInterrupt'>
    # returned a result with an exception set", while the gate's handler made its exception
    # (docs/not-yet.md); any outcome but these two comes with its whole reply.
    assert set(outcomes) <= {"ok", "KeyboardInterrupt"}, (outcomes, odd, kernel.logs)
    reply, _ = kernel.execute("1")
    assert reply["status"] == "ok"


# -- the gate, in this process -----------------------------------------------------


@pytest.fixture
def gate(monkeypatch):
    monkeypatch.syspath_prepend(str(KERNEL.parent))
    from kennel_pipe import InterruptGate

    saved = {signum: signal.getsignal(signum) for signum, _ in STOPS}
    gate = InterruptGate()
    gate.install()
    try:
        yield gate
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def test_a_signal_while_arm_claims_the_wakeup_fd_stays_in_arm(gate):
    """arm() takes the relay's wakeup fd back in a frame of its own: a signal handled at that
    frame's start or end must not escape arm() (it would kill the kernel, or fail a cell
    that never ran, outside the cell's try)."""
    from kennel_pipe import InterruptGate

    r, w = os.pipe()
    os.set_blocking(w, False)
    gate._wakeup = w

    def tracer(frame, event, arg):
        if frame.f_code is InterruptGate._claim_wakeup_fd.__code__:
            gate._on_signal(signal.SIGINT, frame)  # as if SIGINT landed just here
            return tracer
        return None

    sys.settrace(tracer)
    try:
        gate.arm()
    except KeyboardInterrupt:
        pytest.fail("the SIGINT escaped arm()")
    finally:
        sys.settrace(None)
        signal.set_wakeup_fd(-1)
        os.close(r)
        os.close(w)
    gate.disarm()


def test_gate_raises_only_while_armed(gate):
    from kennel_deadline import CellTimeout

    signal.raise_signal(signal.SIGUSR2)  # ignored: no cell runs
    gate.arm()
    with pytest.raises(CellTimeout, match="the cell ran past its deadline"):
        signal.raise_signal(signal.SIGUSR2)
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    gate.disarm()
    signal.raise_signal(signal.SIGINT)


def test_gate_defers_signals_in_a_shielded_section(gate):
    from kennel_deadline import CellTimeout

    gate.arm()
    with pytest.raises(KeyboardInterrupt):
        with gate.shielded():
            signal.raise_signal(signal.SIGINT)
            finished = True
    assert finished
    with pytest.raises(CellTimeout):  # a deadline outranks an interrupt
        with gate.shielded():
            signal.raise_signal(signal.SIGUSR2)
            signal.raise_signal(signal.SIGINT)
    with gate.shielded():
        signal.raise_signal(signal.SIGUSR2)
        gate.disarm()  # the cell ended before the section did: dropped


# -- metrics ---------------------------------------------------------------------


def test_execute_reply_metrics(kernel):
    reply, _ = kernel.execute("sum(range(10**7))")
    assert reply["status"] == "ok"
    metrics = kernel.reply_metadata["metrics"]
    assert isinstance(metrics["cpu_ms"], float) and metrics["cpu_ms"] > 20
    assert isinstance(metrics["peak_memory_bytes"], int)
    assert metrics["peak_memory_bytes"] > 10 << 20
    # CPU time, not wall time: sleeping costs next to nothing.
    kernel.execute("import time\ntime.sleep(0.5)")
    assert kernel.reply_metadata["metrics"]["cpu_ms"] < 250
    # A child's CPU time counts once the cell waited for it.
    kernel.execute("import subprocess, sys\n"
                   "subprocess.run([sys.executable, '-c', 'sum(range(10**7))'])")
    assert kernel.reply_metadata["metrics"]["cpu_ms"] > 20
    # Failed cells have metrics too; other replies carry no metadata.
    reply, _ = kernel.execute("1 / 0")
    assert reply["status"] == "error" and "metrics" in kernel.reply_metadata
    kernel.request("is_complete_request", {"code": "x"})
    assert kernel.reply_metadata == {}


# -- other shell requests --------------------------------------------------------


def test_complete(kernel):
    kernel.execute("import os\nsome_long_name = 1")
    code = "x = 1\nos.pa"
    reply = kernel.request("complete_request", {"code": code, "cursor_pos": len(code)})
    assert reply["status"] == "ok" and reply["metadata"] == {}
    assert "os.path" in reply["matches"]
    assert reply["cursor_start"] == len(code) - len("os.pa")
    assert reply["cursor_end"] == len(code)
    reply = kernel.request("complete_request", {"code": "some_lo", "cursor_pos": 7})
    assert reply["matches"] == ["some_long_name"] and reply["cursor_start"] == 0


def test_a_cursor_out_of_range_is_clamped(kernel):
    """A cursor_pos before the start or past the end answered every name, and echoed a
    negative cursor_start; it now means the start or the end of the code."""
    kernel.execute("some_long_name = 1")
    past = kernel.request("complete_request", {"code": "some_lo", "cursor_pos": 50})
    assert past["matches"] == ["some_long_name"], past
    assert (past["cursor_start"], past["cursor_end"]) == (0, 7)
    before = kernel.request("complete_request", {"code": "some_lo", "cursor_pos": -5})
    assert before["cursor_start"] == before["cursor_end"] == 0, before
    bad = kernel.request("complete_request", {"code": "some_lo", "cursor_pos": "3"})
    assert bad["status"] == "error" and bad["ename"] == "TypeError", bad
    found = kernel.request("inspect_request", {"code": "some_long_name", "cursor_pos": 99,
                                               "detail_level": 0})
    assert found["found"] is True, found


def test_inspect(kernel):
    kernel.execute("def documented():\n    'Does a documented thing.'")
    reply = kernel.request("inspect_request",
                           {"code": "documented()", "cursor_pos": 3, "detail_level": 0})
    assert reply["status"] == "ok" and reply["found"] is True
    assert "Does a documented thing." in reply["data"]["text/plain"]
    reply = kernel.request("inspect_request", {"code": "nothing_here", "cursor_pos": 2,
                                               "detail_level": 0})
    assert reply == {"status": "ok", "found": False, "data": {}, "metadata": {}}


def test_is_complete(kernel):
    def check(code):
        return kernel.request("is_complete_request", {"code": code})

    assert check("x = 1") == {"status": "complete"}
    assert check("for i in range(3):") == {"status": "incomplete", "indent": "    "}
    assert check("x = )")["status"] == "invalid"


def test_history(kernel):
    kernel.execute("a = 1")
    kernel.execute("a + 1")
    kernel.execute("a + 2", store_history=False)
    reply = kernel.request("history_request", {"hist_access_type": "tail", "n": 2,
                                               "raw": True, "output": False})
    assert reply["status"] == "ok"
    assert [entry[1:] for entry in reply["history"]] == [[1, "a = 1"], [2, "a + 1"]]
    reply = kernel.request("history_request", {"hist_access_type": "range", "session": 0,
                                               "start": 1, "stop": 3, "raw": True,
                                               "output": True})
    assert reply["history"] == [[0, 1, ["a = 1", None]], [0, 2, ["a + 1", "2"]]]
    reply = kernel.request("history_request", {"hist_access_type": "search",
                                               "pattern": "a +*", "raw": True,
                                               "output": False, "n": 10})
    assert [entry[2] for entry in reply["history"]] == ["a + 1"]


def test_comm_info_and_comm_messages(kernel):
    assert kernel.request("comm_info_request", {}) == {"status": "ok", "comms": {}}
    # comm_open gets no reply but a `done` (test_comms.py has the rest); for a target
    # nobody registered, the comm is closed again, as ipykernel does.
    iopub = kernel.comm("comm_open", {"comm_id": "c1", "target_name": "t", "data": {}})
    assert iopub == [("comm_close", {"data": {}, "comm_id": "c1"})]
    reply, _ = kernel.execute("1")
    assert reply["status"] == "ok"


def test_exit_asks_the_client_to_leave_and_keep_kernel_keeps_the_session(kernel):
    reply, _ = kernel.execute("exit()")
    assert reply["payload"] == [{"source": "ask_exit", "keepkernel": False}]
    reply, _ = kernel.execute("exit(keep_kernel=True)")
    assert reply["payload"] == [{"source": "ask_exit", "keepkernel": True}]
    reply, _ = kernel.execute("quit")
    assert reply["payload"] == [{"source": "ask_exit", "keepkernel": False}]
    reply, _ = kernel.execute("1")
    assert reply["payload"] == []


def test_a_payload_written_between_cells_is_dropped(kernel):
    """As in IPython's kernel: a cell's reply carries the payloads written while it ran,
    not one a thread wrote after the previous cell's reply."""
    reply, _ = kernel.execute("import threading, time\n"
                              "_t = threading.Timer(0.1, get_ipython().set_next_input, ['x'])\n"
                              "_t.start()")
    assert reply["payload"] == []
    time.sleep(0.3)
    reply, _ = kernel.execute("_t.is_alive()")
    assert reply["payload"] == []
    reply, _ = kernel.execute("get_ipython().set_next_input('y')")
    assert reply["payload"] == [{"source": "set_next_input", "text": "y", "replace": False}]


def test_unknown_request(kernel):
    reply = kernel.request("frobnicate_request", {})
    assert reply["status"] == "error" and reply["ename"] == "UnknownMessageType"
    # A shell message that is not a request is dropped without a reply.
    kernel.send_request("frobnicate", {})
    reply, _ = kernel.execute("2")
    assert reply["status"] == "ok"
    # Said in kenneld's log, through the pipe: the kernel holds no fd of kenneld's stderr.
    assert kernel.logs == ["ignoring shell message 'frobnicate'"]


def test_bad_content_still_replies(kernel):
    header = make_header("execute_request")
    kernel.send_frame([jdump({"op": "request", "channel": "shell"}), jdump(header),
                       jdump({}), jdump({}), b"[not an object"])
    op, reply, _ = kernel.collect(header["msg_id"])
    assert op["msg_type"] == "execute_reply" and reply["status"] == "error"


# -- idle eviction: save and restore ---------------------------------------------------

def _save(kernel):
    kernel.send_frame([jdump({"op": "save"})])
    op, parts = kernel.recv_frame()
    assert op["op"] == "saved", op
    return op, parts


def test_a_save_names_at_most_what_kenneld_keeps(kernel):
    """kenneld parses an op header whole, so it refuses one over 256 KiB as a protocol
    violation: 2000 unsaved names of 200 characters would have made the save one, and lost
    the session. The kernel names the first 256 (as many as kenneld keeps) and leaves out
    any name over 256 bytes as the pipe writes it (kenneld keeps none over 256 UTF-8 bytes;
    a control character is written in six)."""
    reply, _ = kernel.execute(
        "for i in range(2000):\n"
        "    globals()[f'g{i:04d}_' + 'x' * 195] = (j for j in range(1))\n"
        "globals()['a' * 300] = (j for j in range(1))\n"
        "for i in range(300):\n"  # each escaped in six bytes: 1500 in all
        "    globals()[chr(1) * 250 + f'{i:05d}'] = (j for j in range(1))\n"
        "kept = 1")
    assert reply["status"] == "ok"
    op, parts = _save(kernel)
    assert len(op["unsaved"]) == 256, len(op["unsaved"])
    assert op["unsaved"][0].startswith("g0000_") and op["unsaved"][-1].startswith("g0255_")
    assert len(json.dumps(op, ensure_ascii=False).encode()) < 256 << 10
    assert parts and parts[0]


def _save_to_file(kernel, path):
    """A save into the file at path, as kenneld asks for one where it can make the file:
    (save_ready's op, saved's op, saved's parts)."""
    kernel.send_frame([jdump({"op": "save", "fd": True})])
    ready, _ = kernel.recv_frame()
    assert ready["op"] == "save_ready" and ready["bytes"] > 0, ready
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        socket.send_fds(kernel.sock, [b"F"], [fd])
    finally:
        os.close(fd)
    op, parts = kernel.recv_frame()
    return ready, op, parts


def test_a_save_to_a_file_has_no_frame_limit_and_comes_back_mapped(kernel, tmp_path):
    """With a file to write, the snapshot does not go through the pipe: an 80 MiB array and
    a 70 MB result shown once (past the pipe's 64 MiB frame) are kept, the file holds
    exactly what save_ready announced, and a revival that maps it has them all."""
    reply, _ = kernel.execute(
        "import numpy as np\narr = np.arange(10 << 20, dtype=np.float64)\nkept = 1\n"
        "class Big:\n    def __init__(self):\n        self.data = bytes(70 << 20)\n"
        "    def __repr__(self):\n        return 'Big()'")
    assert reply["status"] == "ok", reply
    assert kernel.execute("Big()")[0]["status"] == "ok"
    snap = tmp_path / "snapshot"
    ready, op, parts = _save_to_file(kernel, snap)
    assert op == {"op": "saved", "unsaved": [], "bytes": ready["bytes"]}, op
    assert parts == []
    assert os.path.getsize(snap) == ready["bytes"] > (80 << 20) + (70 << 20)
    fresh = KernelProcess(tmp_path)
    try:
        fresh.send_frame([jdump({"op": "restore", "fd": True})])
        op, _ = fresh.recv_frame()
        assert op == {"op": "restore_ready"}, op
        fd = os.open(snap, os.O_RDONLY | os.O_CLOEXEC)
        try:
            socket.send_fds(fresh.sock, [b"F"], [fd])
        finally:
            os.close(fd)
        op, _ = fresh.recv_frame()
        assert op == {"op": "restored", "failed": []}, op
        reply, iopub = fresh.execute("(kept, float(arr[-1]), 2 in Out, len(Out[2].data))")
        assert reply["status"] == "ok", reply
        assert only(iopub, "execute_result")["data"]["text/plain"] == \
            f"(1, {float((10 << 20) - 1)}, True, {70 << 20})"
    finally:
        fresh.kill()


def test_a_refused_file_fails_the_save_and_the_kernel_serves_on(kernel):
    """kenneld refuses the file (a snapshot over the session's disk cap) with the byte
    alone: the kernel reports its save failed, keeps everything, and serves on."""
    assert kernel.execute("kept = 41")[0]["status"] == "ok"
    kernel.send_frame([jdump({"op": "save", "fd": True})])
    ready, _ = kernel.recv_frame()
    assert ready["op"] == "save_ready", ready
    kernel.sock.sendall(b"N")
    op, parts = kernel.recv_frame()
    assert op["op"] == "saved" and "OSError" in op["error"] and parts == [], op
    reply, iopub = kernel.execute("kept + 1")
    assert only(iopub, "execute_result")["data"]["text/plain"] == "42"


def test_outputs_too_large_for_a_frame_are_left_out_of_a_save_through_the_pipe(kernel,
                                                                               tmp_path):
    """Where kenneld has no file for a save (a file system without O_TMPFILE), the snapshot
    comes through the pipe, whose frames stop at 64 MiB: a 70 MB result shown once and bound
    to no name is left out, rather than the session never being evicted."""
    reply, _ = kernel.execute(
        "kept = 1\nclass Big:\n    def __init__(self):\n        self.data = bytes(70 << 20)\n"
        "    def __repr__(self):\n        return 'Big()'")
    assert reply["status"] == "ok", reply
    assert kernel.execute("Big()")[0]["status"] == "ok"
    op, parts = _save(kernel)
    assert op["unsaved"] == ["Out[2]"], op
    fresh, op = _revive(kernel, tmp_path, parts)
    try:
        reply, iopub = fresh.execute("(kept, 2 in Out, In[2])")
        assert only(iopub, "execute_result")["data"]["text/plain"] == "(1, False, 'Big()')"
    finally:
        fresh.kill()


def test_save_and_restore_into_a_new_kernel(kernel, tmp_path):
    reply, _ = kernel.execute(
        "import math\nimport numpy as np\ndef twice(x): return 2 * x\n"
        "class Point:\n    def __init__(self, x): self.x = x\n"
        "p = Point(3); arr = np.arange(4); shared = [1]; alias = shared\n"
        "gen = (i for i in range(3)); total = 41")
    assert reply["status"] == "ok"
    op, parts = _save(kernel)
    assert op["unsaved"] == ["gen"]
    assert len(parts) == 1 and parts[0]
    # A fresh kernel, as kenneld starts on revival, gets the snapshot before any request.
    fresh = KernelProcess(tmp_path)
    try:
        fresh.send_frame([jdump({"op": "restore"}), parts[0]])
        op, _ = fresh.recv_frame()
        assert op == {"op": "restored", "failed": []}
        reply, iopub = fresh.execute(
            "(total + 1, twice(p.x), int(arr.sum()), shared is alias, math.pi > 3, 'gen' in dir())")
        assert reply["status"] == "ok"
        assert only(iopub, "execute_result")["data"]["text/plain"] == "(42, 6, 6, True, True, False)"
        # Numbering goes on from where the evicted kernel was.
        assert reply["execution_count"] == 2  # one cell ran before the eviction
    finally:
        fresh.kill()


def _revive(kernel, tmp_path, parts):
    """A fresh kernel restored from the snapshot parts of _save(kernel)."""
    fresh = KernelProcess(tmp_path)
    fresh.send_frame([jdump({"op": "restore"}), parts[0]])
    op, _ = fresh.recv_frame()
    assert op["op"] == "restored", op
    return fresh, op


def test_underscore_names_across_a_snapshot(kernel, tmp_path):
    # The user's own `_` names are kept; IPython's are made again from the history: `_7` is
    # the user's when there is no Out[7], and `__`, `___` stay IPython's (2 and '', as before
    # the save) when only `_` was assigned.
    for code in ("1 + 1", "10", "_ = 'mine'", "_7 = 'seven'\n____ = 4\n_iiii = 5\n_ok = 6"):
        assert kernel.execute(code)[0]["status"] == "ok"
    op, parts = _save(kernel)
    fresh, op = _revive(kernel, tmp_path, parts)
    try:
        reply, iopub = fresh.execute("(_, __, ___, _7, ____, _iiii, _ok, _1, _2, _i2)")
        assert reply["status"] == "ok", reply
        assert only(iopub, "execute_result")["data"]["text/plain"] == \
            "('mine', 2, '', 'seven', 4, 5, 6, 2, 10, '10')"
    finally:
        fresh.kill()


def test_an_object_whose_pickling_exits_is_left_out(kernel):
    # SystemExit from a __reduce__ is a pickling failure like any other: the kernel stays.
    code = ("class Bye:\n    def __reduce__(self):\n        raise SystemExit(3)\n"
            "b = Bye()\nkept = 1")
    assert kernel.execute(code)[0]["status"] == "ok"
    op, parts = _save(kernel)
    assert op["unsaved"] == ["b"]
    assert kernel.execute("kept")[0]["status"] == "ok"


def test_a_reply_too_large_for_a_frame_says_error_in_its_op(kernel):
    # kenneld reads a reply's status from its op header: the fallback error reply must say
    # "error" there too, or the failed cell counts as ok and stop_on_error aborts nothing.
    assert kernel.execute("big = 'a' * (70 << 20)")[0]["status"] == "ok"
    op, reply, _ = kernel.collect(kernel.send_request("execute_request", {
        "code": "1", "silent": False, "store_history": True, "user_expressions": {"v": "big"},
        "allow_stdin": False, "stop_on_error": True}))
    assert reply["status"] == "error" and reply["ename"] == "FrameError"
    assert op["status"] == "error"


def test_save_of_an_empty_namespace(kernel):
    op, parts = _save(kernel)
    assert op["unsaved"] == [] and parts[0]


def test_restore_of_garbage_reports_it(kernel):
    kernel.send_frame([jdump({"op": "restore"}), b"not a snapshot"])
    op, _ = kernel.recv_frame()
    assert op["op"] == "restored" and op["failed"] and "snapshot" in op["failed"][0]
    reply, _ = kernel.execute("1 + 1")
    assert reply["status"] == "ok"


def _result(fresh, code):
    reply, iopub = fresh.execute(code)
    assert reply["status"] == "ok", reply
    return only(iopub, "execute_result")["data"]["text/plain"]


@contextlib.contextmanager
def _evicted(kernel, tmp_path, code, unsaved=(), failed=(), meanwhile=None):
    """Run code, save the namespace (unsaved: the names it could not keep), call meanwhile(),
    and yield a fresh kernel with it restored (failed: the names that did not load)."""
    assert kernel.execute(code)[0]["status"] == "ok"
    op, parts = _save(kernel)
    assert op["unsaved"] == list(unsaved)
    if meanwhile:
        meanwhile()
    fresh, op = _revive(kernel, tmp_path, parts)
    try:
        assert op["failed"] == list(failed)
        yield fresh
    finally:
        fresh.kill()


def test_an_open_file_is_listed_as_lost_and_its_file_left_as_it_was(kernel, tmp_path):
    # dill pickled an open file and reopened it on restore in its mode: one open for writing came
    # back emptied. Files, and values that hold one, are now not kept; in-memory ones are.
    code = ("import io\nfh = open('log.txt', 'w')\nfh.write('important data\\n')\nfh.flush()\n"
            "held = {'out': open('held.txt', 'w'), 'n': 1}\nheld['out'].write('kept\\n')\n"
            "held['out'].flush()\nmemory = io.StringIO('in memory')")
    with _evicted(kernel, tmp_path, code, unsaved=["fh", "held"]) as fresh:
        assert _result(fresh, "(open('log.txt').read(), open('held.txt').read(), "
                              "memory.getvalue(), 'fh' in dir())") == \
            "('important data\\n', 'kept\\n', 'in memory', False)"


def test_the_working_directory_environment_path_and_generators_come_back(kernel, tmp_path):
    """A notebook's %cd, os.environ, sys.path and seeded global generators were reset by an
    eviction, and nothing said so (QA). They come back, before the values (which may need
    them to load)."""
    import numpy
    (tmp_path / "sub").mkdir()
    code = ("import os, sys, random, numpy as np\nos.chdir('sub')\nos.environ['MYVAR'] = 'set'\n"
            "sys.path.insert(0, '/opt/mine')\nrandom.seed(5); np.random.seed(7)\n"
            "random.random(); np.random.random()")
    random.seed(5), random.random()
    numpy.random.seed(7), numpy.random.random()
    expected = (str(tmp_path / "sub"), "set", "/opt/mine", random.random(),
                float(numpy.random.random()))
    with _evicted(kernel, tmp_path, code) as fresh:
        assert ast.literal_eval(_result(fresh, "(os.getcwd(), os.environ.get('MYVAR'), "
                                               "sys.path[0], random.random(), "
                                               "float(np.random.random()))")) == expected


def test_a_working_directory_gone_meanwhile_is_named(kernel, tmp_path):
    (tmp_path / "gone").mkdir()
    with _evicted(kernel, tmp_path, "import os\nos.chdir('gone')",
                  meanwhile=lambda: (tmp_path / "gone").rmdir(),
                  failed=[f"(working directory {tmp_path / 'gone'}: No such file or directory)"]) \
            as fresh:
        assert _result(fresh, "os.getcwd()") == repr(str(tmp_path))


def test_restored_functions_use_the_namespace_they_are_restored_into(kernel, tmp_path):
    # Pickled with recurse=True, each function came back with a private copy of the globals
    # it used: it saw none of the later cells' assignments, and `global` changed the copy.
    code = ("x = 1\ncounter = 0\ndef f(): return x\n"
            "def bump():\n    global counter\n    counter += 1\n"
            "class K:\n    def get(self): return x\n"
            "g = lambda: x\nbox = {'f': f}\n"
            "def outer():\n    y = 10\n    def inner(): return x + y\n    return inner\n"
            "h = outer()")
    with _evicted(kernel, tmp_path, code) as fresh:
        assert _result(fresh, "x = 2\nbump()\n(f(), counter, K().get(), g(), box['f'](), h(), "
                              "box['f'] is f, f.__globals__ is globals(), "
                              "K.get.__globals__ is globals())") == \
            "(2, 1, 2, 2, 2, 12, True, True, True)"


def test_a_value_that_fails_to_load_loses_only_itself_and_what_shares_with_it(kernel, tmp_path):
    # All values were one pickle: one __setstate__ that raised lost every name. Conn is
    # bound to no name, so the failing part is where its class is first pickled: that class
    # stays whole for `other`, another instance of it.
    code = ("class Conn:\n    def __init__(self, path): self.path = path\n"
            "    def __getstate__(self): return {'path': self.path}\n"
            "    def __setstate__(self, state):\n        self.path = state['path']\n"
            "        self.cfg = open(self.path).read()\n"
            "open('cfg.txt', 'w').write('cfg')\nopen('other.txt', 'w').write('other')\n"
            "conn = Conn('cfg.txt')\nother = Conn('other.txt')\ndel Conn\n"
            "results = [1, 2]\nalias = results\nholder = [conn]\n"
            "def twice(v): return 2 * v\nmodel = {'w': 3}\nresults")
    with _evicted(kernel, tmp_path, code, failed=["conn", "holder"],
                  meanwhile=(tmp_path / "cfg.txt").unlink) as fresh:
        assert _result(fresh, "(results, alias is results, Out[1] is results, twice(2), model, "
                              "other.cfg, type(other).__name__, 'conn' in dir(), "
                              "'holder' in dir())") == \
            "([1, 2], True, True, 4, {'w': 3}, 'other', 'Conn', False, False)"


def test_user_values_under_the_shells_names_are_kept(kernel, tmp_path):
    # Names the shell hides (exit, CellTimeout, get_ipython, In…) were skipped whatever they
    # held; now only while they hold the shell's own value.
    code = "exit = 'mine'\nCellTimeout = 3"
    with _evicted(kernel, tmp_path, code) as fresh:
        assert _result(fresh, "(exit, CellTimeout, type(get_ipython()).__name__, "
                              "callable(quit), In[1])") == \
            "('mine', 3, 'KennelShell', True, \"exit = 'mine'\\nCellTimeout = 3\")"


def test_a_module_not_imported_under_its_name_is_kept_as_a_value(kernel, tmp_path):
    # A module was restored by importing its __name__: this one came back as the real json.
    code = ("import types, json as j\nfake = types.ModuleType('json')\nfake.x = 1\n"
            "odd = types.ModuleType('odd')\nodd.gen = (i for i in ())")
    with _evicted(kernel, tmp_path, code, unsaved=["odd"]) as fresh:
        assert _result(fresh, "(fake.x, hasattr(fake, 'dumps'), fake is j, j.dumps([1]), "
                              "type(fake) is types.ModuleType, 'odd' in dir())") == \
            "(1, False, False, '[1]', True, False)"


def test_a_save_out_of_memory_keeps_the_kernel_rather_than_lose_the_value(kernel):
    # Pickling copies a large array: under the session's memory limit the copy raised
    # MemoryError, which counted as "cannot be pickled": the array was dropped, listed as
    # lost, and the session evicted all the same. A save short of memory now saves nothing,
    # and the kernel stays with its values (kenneld: "state not saved; not evicting").
    # (The save now writes an array's bytes once, into a buffer mapped for the snapshot: here
    # there is no room left to map it.)
    code = ("import resource, numpy as np\n"
            "big = np.ones(5_000_000)\nsmall = 1\n"
            "vm = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()\n"
            "resource.setrlimit(resource.RLIMIT_AS, (vm + (16 << 20), resource.RLIM_INFINITY))")
    assert kernel.execute(code)[0]["status"] == "ok"
    op, parts = _save(kernel)
    assert "MemoryError" in op.get("error", ""), op
    assert not parts
    reply, iopub = kernel.execute("int(big.sum())")
    assert reply["status"] == "ok"
    assert only(iopub, "execute_result")["data"]["text/plain"] == "5000000"


def test_a_save_past_the_picklers_depth_keeps_the_kernel(kernel):
    # RecursionError is the pickler's limit, not the value's: the value was lost for it.
    code = "deep = []\nfor _ in range(5000):\n    deep = [deep]\nkept = 1"
    assert kernel.execute(code)[0]["status"] == "ok"
    op, parts = _save(kernel)
    assert "RecursionError" in op.get("error", ""), op
    assert kernel.execute("deep[0][0]")[0]["status"] == "ok"


def test_a_name_that_cannot_be_saved_takes_no_unrelated_name_with_it(kernel, tmp_path):
    # After the generator's dump failed, the next dump's PROTO opcode went into the failed
    # dump's unfinished frame and was dropped: that part (the figure) loaded under protocol
    # 0, failed on a dotted name, and took the later parts with it.
    code = ("import matplotlib.pyplot as plt\ngen = (i for i in range(3))\n"
            "fig, ax = plt.subplots()\nplt.close(fig)\nclass C: pass\nc = C()")
    with _evicted(kernel, tmp_path, code, unsaved=["gen"]) as fresh:
        assert _result(fresh, "(type(fig).__name__, ax.figure is fig, type(c) is C)") == \
            "('Figure', True, True)"


def test_a_value_that_fails_to_load_early_loses_no_unrelated_later_name(kernel, tmp_path):
    # `bad` fails to load before it made OrderedDict; `od` referred to that class (and its
    # module's name) from bad's part rather than write them again, and was lost with it.
    code = ("import collections\nclass Boom:\n    def __init__(self): self.x = 1\n"
            "    def __setstate__(self, state):\n        raise ValueError('no')\n"
            "bad = [Boom(), collections.OrderedDict()]\nod = collections.OrderedDict(a=1)")
    with _evicted(kernel, tmp_path, code, failed=["bad"]) as fresh:
        assert _result(fresh, "(od, 'bad' in dir())") == "(OrderedDict([('a', 1)]), False)"


def test_the_kinds_of_class_and_function_cells_define_survive(kernel, tmp_path):
    # They were lost when a name that cannot be kept (gen) came before them: see
    # test_a_name_that_cannot_be_saved_takes_no_unrelated_name_with_it.
    code = ("import asyncio, dataclasses\ngen = (i for i in range(3))\n"
            "@dataclasses.dataclass(frozen=True)\nclass Frozen:\n    x: int\n"
            "frozen = Frozen(1)\nclass Slots:\n    __slots__ = ('a',)\n"
            "    def __init__(self): self.a = 2\nslots = Slots()\n"
            "async def coro(): return 3\nprop = property(lambda self: 4)\n"
            "class WithProp:\n    p = prop")
    with _evicted(kernel, tmp_path, code, unsaved=["gen"]) as fresh:
        assert _result(fresh, "(frozen, slots.a, asyncio.run(coro()), WithProp().p, "
                              "frozen == Frozen(1))") == "(Frozen(x=1), 2, 3, 4, True)"


def test_processes_and_pending_futures_are_listed_as_lost(kernel, tmp_path):
    # A Popen came back with the process it stood for killed with the sandbox: poll() and
    # wait() read ECHILD as success and said 0. A pending future would never complete.
    code = ("import subprocess, concurrent.futures, time\n"
            "p = subprocess.Popen(['sleep', '30'], stdout=subprocess.DEVNULL,\n"
            "                     stderr=subprocess.DEVNULL)\njobs = {'p': p}\n"
            "pool = concurrent.futures.ThreadPoolExecutor(2)\n"
            "pending = pool.submit(time.sleep, 30)\ndone = pool.submit(int, '7')\n"
            "done.result()\ndel pool")
    with _evicted(kernel, tmp_path, code, unsaved=["jobs", "p", "pending"]) as fresh:
        assert _result(fresh, "(done.result(), 'p' in dir())") == "(7, False)"
    kernel.execute("p.kill(); pending.cancel()")


def test_what_was_written_to_open_files_reaches_them_before_eviction(kernel, tmp_path):
    # A file object is not kept, but what was written to it sat in its buffer and was lost
    # with the kernel: the file stayed empty.
    code = ("fh = open('a.txt', 'w')\nfh.write('hi')\nheld = {'f': open('b.bin', 'wb')}\n"
            "held['f'].write(b'bytes')\nreader = open('a.txt')")
    assert kernel.execute(code)[0]["status"] == "ok"
    op, parts = _save(kernel)
    assert op["unsaved"] == ["fh", "held", "reader"]
    assert (tmp_path / "a.txt").read_text() == "hi"
    assert (tmp_path / "b.bin").read_bytes() == b"bytes"


def test_snapshots_of_earlier_formats_still_load():
    # FORMAT 1 (no history), 2 (one pickle of everything, or one per name) and 3, as kenneld
    # may hold them from before an upgrade.
    import pickle
    import sys
    import dill
    sys.path.insert(0, str(KERNEL.parent))
    import kennel_snapshot

    def old(obj):
        return dill.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL, recurse=True)

    shared = [1]
    v2 = {"format": 2, "modules": {"m": "math"}, "execution_count": 3,
          "inputs": [(1, "shared", "shared")], "reprs": {1: "[1]"}, "unders": [],
          "together": old({"ns": {"shared": shared, "alias": shared}, "outputs": {1: shared}})}
    ns = {}
    count, failed, history = kennel_snapshot.restore(pickle.dumps(v2), ns)
    assert (count, failed) == (3, [])
    assert ns["alias"] is ns["shared"] is history["outputs"][1] and ns["m"].pi > 3
    v2_each = {**v2, "each": {"a": old(5), "b": b"not a pickle"}, "outputs_each": {}}
    del v2_each["together"]
    ns = {}
    count, failed, _ = kennel_snapshot.restore(pickle.dumps(v2_each), ns)
    assert failed == ["b"] and ns["a"] == 5
    data, _ = kennel_snapshot.save({"shared": shared, "alias": shared}, {}, 4)
    v3, values = kennel_snapshot._read(b"".join(data))  # FORMAT 3: the values in the pickle
    ns = {}
    count, failed, _ = kennel_snapshot.restore(pickle.dumps({**v3, "format": 3,
                                                             "values": values}), ns)
    assert (count, failed, ns["shared"] is ns["alias"]) == (4, [], True)
    v1 = {"format": 1, "modules": {}, "execution_count": 2, "together": old({"y": 2})}
    ns = {}
    count, failed, history = kennel_snapshot.restore(pickle.dumps(v1), ns)
    assert (count, failed, ns, history["inputs"]) == (2, [], {"y": 2}, [])


def _snapshot_module():
    import sys
    sys.path.insert(0, str(KERNEL.parent))
    import kennel_snapshot
    return kennel_snapshot


def test_large_arrays_are_kept_out_of_band_and_restored_as_views_with_their_flags():
    # FORMAT 5: a large plain array's bytes are written from the array itself and, restored
    # from a writable buffer (the pipe's), the array is a view of it: no copy either way.
    import mmap
    import numpy as np
    ks = _snapshot_module()
    c = np.arange(100_000, dtype=np.float64)
    f = np.asfortranarray(np.arange(60_000, dtype=np.int32).reshape(300, 200))
    ro = np.arange(50_000, dtype=np.int16)
    ro.setflags(write=False)
    ns = {"c": c, "f": f, "ro": ro, "alias": c, "small": np.arange(3)}
    data, unsaved = ks.save(ns, {}, 7)
    assert unsaved == []
    pieces = list(data)
    assert any(np.shares_memory(np.frombuffer(p, dtype=np.uint8), c) for p in pieces
               if isinstance(p, memoryview) and len(p)), "c's bytes were copied, not written from c"
    joined = b"".join(data)
    assert len(joined) == data.nbytes
    buf = mmap.mmap(-1, len(joined))  # as the pipe's large buffer: writable
    buf[:] = joined
    out = {}
    count, failed, _ = ks.restore(memoryview(buf), out)
    assert (count, failed) == (7, [])
    assert np.array_equal(out["c"], c) and np.array_equal(out["f"], f)
    assert np.array_equal(out["ro"], ro) and out["alias"] is out["c"]
    assert out["f"].flags.f_contiguous and out["f"].shape == (300, 200)
    assert out["c"].flags.writeable and not out["ro"].flags.writeable
    assert np.shares_memory(out["c"], np.frombuffer(buf, dtype=np.uint8))
    assert out["c"].ctypes.data % 64 == 0  # aligned in the snapshot
    out["c"][0] = 42.0  # a view, and writable
    assert out["c"][0] == 42.0
    # From read-only bytes (a small frame), each array gets its own writable copy.
    out = {}
    assert ks.restore(joined, out)[1] == []
    assert out["c"].flags.writeable and np.array_equal(out["c"], c)
    assert not np.shares_memory(out["c"], out["f"])


def test_a_part_that_fails_after_its_array_leaves_the_next_parts_arrays_right():
    import io
    import numpy as np
    ks = _snapshot_module()
    a = np.full(20_000, 1.0)
    b = [np.full(20_000, 2.0), io.FileIO("/dev/null")]  # pickles its array, then fails
    c = np.full(20_000, 3.0)
    data, unsaved = ks.save({"a": a, "b": b, "c": c}, {}, 1)
    assert unsaved == ["b"]
    out = {}
    assert ks.restore(b"".join(data), out)[1] == []
    assert out["a"][0] == 1.0 and out["c"][0] == 3.0 and "b" not in out
    b[1].close()


def test_arrays_count_against_a_snapshots_bound():
    import numpy as np
    ks = _snapshot_module()
    try:
        ks.save({"big": np.zeros(1 << 20)}, {}, 1, max_bytes=4 << 20)  # 8 MiB of array
    except ks.TooLarge:
        pass
    else:
        raise AssertionError("an 8 MiB array fit a 4 MiB bound")


def test_a_format_4_snapshot_with_an_inline_array_still_loads():
    import pickle
    import numpy as np
    ks = _snapshot_module()
    arr = np.arange(20_000, dtype=np.float64)

    class Inline:  # how format 4 wrote a large array: its bytes inline, in a bytearray
        def __reduce__(self):
            return ks._array_from, (bytearray(arr.tobytes()), arr.dtype, arr.shape, "C", True)

    stream = pickle.dumps(Inline(), protocol=5)
    snapshot = {"format": 4, "modules": {}, "execution_count": 2, "inputs": [], "reprs": {},
                "unders": [], "parts": [(("ns", "arr"), 0, 0)], "comms": []}
    data = stream + pickle.dumps(snapshot) + ks._END.pack(len(stream), ks._END_TAG)
    out = {}
    assert ks.restore(data, out)[:2] == (2, [])
    assert np.array_equal(out["arr"], arr) and out["arr"].flags.writeable


def test_a_restore_frame_as_kenneld_sends_it_gives_aligned_private_views():
    # The frame as kenneld writes it (its op padded to put the snapshot 64 bytes into the
    # body), read into the pipe's large buffer as the kernel reads it: the arrays are
    # aligned views of that buffer, and a process the kernel forks gets its own copy.
    import os
    import numpy as np
    ks = _snapshot_module()
    import kennel_pipe as kp
    arr = np.arange(1_000_000, dtype=np.float64)
    t = np.arange(20_000).astype("M8[s]")  # datetime64: no buffer protocol of its own
    data, unsaved = ks.save({"arr": arr, "t": t}, {}, 3)
    assert unsaved == []
    op = b'{"op":"restore"}' + b" " * 36
    frame = b"".join(kp._frame_chunks([op, kp.encode_part(data)]))
    body = kp.large_buffer(len(frame) - 4)
    body[:] = frame[4:]
    parts = kp.decode_body(memoryview(body))
    out = {}
    assert ks.restore(parts[1], out)[:2] == (3, [])
    assert np.array_equal(out["arr"], arr) and np.array_equal(out["t"], t)
    assert out["arr"].flags.aligned and out["arr"].ctypes.data % 64 == 0
    assert np.shares_memory(out["arr"], np.frombuffer(body, dtype=np.uint8))
    pid = os.fork()
    if pid == 0:
        out["arr"][0] = -1.0
        os._exit(0)
    os.waitpid(pid, 0)
    assert out["arr"][0] == 0.0, "a forked child's write showed in the kernel's array"
    # Misplaced (an op not padded), the arrays are copies, aligned all the same.
    frame = b"".join(kp._frame_chunks([b'{"op":"restore"}', kp.encode_part(data)]))
    body = kp.large_buffer(len(frame) - 4)
    body[:] = frame[4:]
    out = {}
    assert ks.restore(kp.decode_body(memoryview(body))[1], out)[1] == []
    assert out["arr"].flags.aligned and np.array_equal(out["arr"], arr)
    assert not np.shares_memory(out["arr"], np.frombuffer(body, dtype=np.uint8))


def test_parts_encode_as_strict_compact_utf8_json():
    """encode_part, with its one shared encoder: what Jupyter's own serializer accepts beyond
    JSON (bytes as base64, dates, numpy numbers) converted, what no JSON holds refused."""
    import datetime
    import threading
    import numpy as np
    _snapshot_module()  # puts the kernel's modules on sys.path
    import kennel_pipe as kp
    assert kp.encode_part({}) == b"{}"
    assert kp.encode_part({"a": [1, 2.5, None, True], "é": "\ud800x"}) == (
        '{"a":[1,2.5,null,true],"é":"?x"}'.encode())
    assert kp.encode_part({"png": b"\x89PNG", "n": np.int64(3), "f": np.float32(0.5),
                           "d": datetime.date(2024, 1, 2)}) == (
        b'{"png":"iVBORw==","n":3,"f":0.5,"d":"2024-01-02"}')
    assert kp.encode_part(b"raw") == b"raw"
    loop = {}
    loop["me"] = loop
    for bad in ({"x": float("nan")}, {"x": float("inf")}, {"x": object()}, loop, {1j: 1}):
        with pytest.raises(kp.FrameError):
            kp.encode_part(bad)
    assert kp.encode_part({"after": "failures"}) == b'{"after":"failures"}'
    # Threads share the encoder (the flush thread, user threads' displays).
    big = {"k": [{"i": i, "s": "x" * 50} for i in range(300)]}
    expected = json.dumps(big, separators=(",", ":")).encode()
    results = []

    def encode_many():
        results.extend(kp.encode_part(big) == expected for _ in range(200))

    threads = [threading.Thread(target=encode_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 800
