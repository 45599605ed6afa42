"""jupyter console, non-interactively: code on stdin with --simple-prompt (plain input()
reads a pipe fine; no pty needed). At EOF it asks "Do you really want to exit", reads EOF
again and leaves."""

import json
import os
import queue
import signal
import subprocess
import time
import uuid

import pytest
from jupyter_client import BlockingKernelClient
from jupyter_client.connect import write_connection_file

from .itest_helpers import (close_client, collect_iopub, kennel_kernelspec, run, shell_reply, squat,
                           wait_for)
from .kenneld_proc import KENNEL, PYTHON, pid_alive

CODE = "x = 6 * 7\nprint('printed', x + 1)\nx\n1 / 0\nx - 2\n"


def _console(args, env_dir, input_text, timeout=20):
    env = dict(os.environ,
               JUPYTER_RUNTIME_DIR=str(env_dir / "runtime"),
               JUPYTER_CONFIG_DIR=str(env_dir / "config"),
               IPYTHONDIR=str(env_dir / "ipython"))
    # Output to a file, not a pipe: a kernelspec launcher inherits it and outlives a console
    # killed here (until the fixture ends its session), so a pipe would not reach EOF.
    out_path = env_dir / "console.out"
    with open(out_path, "w") as out_file:
        proc = subprocess.Popen([PYTHON, "-m", "jupyter_console", *args, "--simple-prompt"],
                                stdin=subprocess.PIPE, stdout=out_file,
                                stderr=subprocess.STDOUT, text=True, env=env)
    try:
        proc.communicate(input_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        pytest.fail(f"jupyter console did not finish in {timeout} s:\n{out_path.read_text()}")
    return proc.returncode, out_path.read_text()


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


def test_console_survives_a_kernel_that_dies(kenneld, tmp_path):
    """jupyter_console reads the next prompt from the execute_reply's execution_count
    (`int(content["execution_count"] + 1)`): kenneld's own reply for a dead kernel once had
    null there, and the console died of a TypeError."""
    conn = kenneld.create("dies")["connection_file"]
    rc, out = _console(["--existing", conn], tmp_path, "import os; os._exit(0)\n6 * 7\n")
    assert rc == 0, out
    assert "KernelDied" in out
    assert "TypeError" not in out
    assert ": 42" in out  # the console went on to the next cell, in the new kernel


# On the module's kenneld, whose pool has kernels ready: the hardest case for the race that
# the next test pins down (a warm kernel answers the first cell at once).
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


def _launch(kenneld, tmp_path, env=None, **popen):
    """`kennel kernel -f` on a connection file written as Jupyter's KernelManager writes one
    (free ports, a key): (a client of it, no channel started yet; the launcher). env: more
    environment for the launcher."""
    conn_file = str(tmp_path / "kernel-launched.json")
    write_connection_file(conn_file, ip="127.0.0.1", key=str(uuid.uuid4()).encode())
    launcher = subprocess.Popen([str(KENNEL), "--state-dir", str(kenneld.state_dir), "kernel",
                                 "-f", conn_file], stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, **popen)
    kc = BlockingKernelClient(connection_file=conn_file)
    kc.load_connection_file()
    return kc, launcher


def _stop(kc, launcher):
    close_client(kc)
    launcher.terminate()  # it ends its session
    assert launcher.wait(10) == 0


# jupyter console's hang, made deterministic. A kernelspec client connects before
# `kennel kernel -f` has made the session, and each of its sockets joins at its own libzmq
# reconnect (every 100-200 ms), so shell can join first and iopub some time later. console
# (6.4) waits for the kernel_info reply on shell, runs its first cell, then waits for that
# cell's idle status on iopub for ever. Here shell joins once the session's kernel is ready
# and iopub two seconds later: until iopub listens, the session must not answer shell, or the
# cell's busy/idle go to no one.
def test_launched_session_answers_shell_once_its_iopub_listens(kenneld, tmp_path):
    kc, launcher = _launch(kenneld, tmp_path)
    try:
        deadline = time.monotonic() + 15
        while [s["state"] for s in kenneld.sessions()] != ["idle"]:  # the kernel is ready
            assert launcher.poll() is None and time.monotonic() < deadline, kenneld.log()
            time.sleep(0.05)
        kc.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
        msg_id = kc.execute("x = 6 * 7")
        try:  # time for the cell to run, had it not to wait for iopub
            reply = shell_reply(kc, msg_id, timeout=2)
        except AssertionError:
            reply = None
        kc.iopub_channel.start()
        states = [m["content"]["execution_state"] for m in collect_iopub(kc, msg_id)
                  if m["msg_type"] == "status"]
        assert states == ["busy", "idle"]
        assert (reply or shell_reply(kc, msg_id))["content"]["status"] == "ok"
    finally:
        _stop(kc, launcher)


# The wait has a bound: a client that never subscribes to iopub is served 10 s after the
# session was made (LAUNCHED_IOPUB_WAIT_MS).
@pytest.mark.timeout_s(45)
def test_launched_session_serves_a_client_without_iopub_after_10_s(kenneld, tmp_path):
    kc, launcher = _launch(kenneld, tmp_path)
    try:
        kc.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
        sent = time.monotonic()  # before the session is made, as Jupyter's clients connect
        msg_id = kc.kernel_info()
        reply = shell_reply(kc, msg_id, timeout=30)
        waited = time.monotonic() - sent
        assert reply["content"]["status"] == "ok"
        assert 9 < waited < 30, waited
    finally:
        _stop(kc, launcher)


def _interrupted(kc, interrupt):
    """Run a long cell, call interrupt() once it runs; the cell's reply content."""
    msg_id = kc.execute("import time\nfor _ in range(600): time.sleep(0.05)")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = kc.get_iopub_msg(timeout=10)
        if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "execute_input":
            break
    time.sleep(0.3)
    interrupt()
    return shell_reply(kc, msg_id, timeout=10)["content"]


def test_a_front_ends_interrupt_reaches_the_cell_not_the_session(kenneld, tmp_path,
                                                                  monkeypatch):
    """A front end's "interrupt kernel" through the kennel kernelspec stops the running cell
    with KeyboardInterrupt, and the session and its state live on: as an interrupt_request
    (the kernelspec's interrupt_mode is "message"), and as a SIGINT to the launcher (what a
    kernelspec without interrupt_mode gets; it used to end the session). A launcher killed
    outright (shutdown_kernel(now=True) kills its process group) takes its session along."""
    from jupyter_client.manager import KernelManager

    kennel_kernelspec(kenneld, tmp_path, monkeypatch)
    km = KernelManager(kernel_name="kennel")
    assert km.kernel_spec.interrupt_mode == "message"
    km.start_kernel()
    try:
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=30)
        assert shell_reply(kc, kc.execute("kept = 7"))["content"]["status"] == "ok"
        for interrupt in (km.interrupt_kernel, lambda: km.signal_kernel(signal.SIGINT)):
            reply = _interrupted(kc, interrupt)
            assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt", reply
            assert km.is_alive()
        after = kc.execute("kept * 6")
        assert shell_reply(kc, after)["content"]["status"] == "ok"
        results = [m for m in collect_iopub(kc, after) if m["msg_type"] == "execute_result"]
        assert results[0]["content"]["data"]["text/plain"] == "42"
        assert len(kenneld.sessions()) == 1
        close_client(kc)
    finally:
        km.shutdown_kernel(now=True)
    wait_for(lambda: kenneld.sessions() == [], timeout=10, what="the session ended")
    assert "its launcher is gone; ending it" in kenneld.log(tail=None)


def test_a_front_ends_restart_is_answered_restart_true_and_leaves_a_fresh_kernel(
        kenneld, tmp_path, monkeypatch):
    """A front end's "restart kernel" through the kennel kernelspec: jupyter_client's
    KernelManager sends shutdown_request {restart: true}, waits for the launcher to exit and
    starts another. The reply (also on iopub, which Notebook's server replays to the page)
    must say restart: true: Notebook read false as the kernel's death and shut the new kernel
    down ("Dead kernel"). The new kernel has a fresh namespace, and the next cell runs."""
    from jupyter_client.manager import KernelManager

    kennel_kernelspec(kenneld, tmp_path, monkeypatch)
    km = KernelManager(kernel_name="kennel")
    km.start_kernel()
    try:
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=30)
        assert run(kc, "kept = 7").content["status"] == "ok"
        first = kenneld.sessions()
        km.restart_kernel(now=False)
        replies = []
        deadline = time.monotonic() + 10
        while not replies and time.monotonic() < deadline:
            try:
                m = kc.get_iopub_msg(timeout=0.5)
            except queue.Empty:
                continue
            if m["msg_type"] == "shutdown_reply":
                replies.append(m["content"])
        assert replies == [{"status": "ok", "restart": True}], replies
        kc.wait_for_ready(timeout=30)
        assert run(kc, "'kept' in dir()", timeout=20).result == "False"
        assert run(kc, "6 * 7").result == "42"
        now = kenneld.sessions()
        assert len(now) == 1 and now[0]["id"] != first[0]["id"]  # the next launcher's
        close_client(kc)
    finally:
        km.shutdown_kernel(now=True)
    wait_for(lambda: kenneld.sessions() == [], timeout=10, what="the session ended")


FRONT_END = """
import sys, time
from jupyter_client.manager import KernelManager
km = KernelManager(kernel_name="kennel")
km.start_kernel()
kc = km.client()
kc.start_channels()
kc.wait_for_ready(timeout=30)
print(km.provisioner.process.pid, flush=True)
time.sleep(60)
"""


def test_a_launcher_whose_front_end_died_ends_its_session(kenneld, tmp_path, monkeypatch):
    """The front end that started the launcher is killed (no shutdown_request, no signal to
    the launcher): the launcher notices it was orphaned, ends the session and exits."""
    kennel_kernelspec(kenneld, tmp_path, monkeypatch)
    front = subprocess.Popen([PYTHON, "-c", FRONT_END], stdout=subprocess.PIPE, text=True)
    try:
        launcher = int(front.stdout.readline())
        assert len(kenneld.sessions()) == 1
        front.kill()  # a process this test started
        front.wait(10)
        wait_for(lambda: kenneld.sessions() == [], timeout=10, what="the session ended")
        wait_for(lambda: not pid_alive(launcher), timeout=10, what="the launcher gone")
    finally:
        front.kill()
        front.wait(10)


def _read_iopub(kc):
    """What a front end does all the while: read iopub (nothing is expected). True."""
    try:
        kc.get_iopub_msg(timeout=0.1)
    except queue.Empty:
        pass
    return True


def _wait_idle(kenneld, launcher):
    wait_for(lambda: launcher.poll() is not None or
             [s["state"] for s in kenneld.sessions()] == ["idle"], timeout=20,
             what="the launched session's kernel ready")
    assert launcher.poll() is None, kenneld.log()


@pytest.mark.own_kenneld
@pytest.mark.timeout_s(90)
def test_a_launched_session_outlives_a_kenneld_restart_and_ends_with_its_launcher(kenneld,
                                                                                  tmp_path):
    """kenneld stops and a new one starts on the same state directory: the launcher waits for
    it, the front end's client carries on with the session's state on the same ports, and the
    new kenneld watches the launcher again (it used to forget it: the session outlived it)."""
    kc, launcher = _launch(kenneld, tmp_path)
    second = None
    try:
        _wait_idle(kenneld, launcher)
        kc.start_channels()
        assert run(kc, "kept = 6 * 7").reply["content"]["status"] == "ok"
        kenneld.stop()
        assert kenneld.proc.returncode == 0
        time.sleep(0.5)  # two of the launcher's polls find no kenneld
        assert launcher.poll() is None
        second = kenneld.successor()
        second.start()
        # A front end reads iopub all the while (console's loop, JupyterLab's server): reading
        # is what has libzmq send the subscription again, on the new connection, and the
        # restored session serves shell once a client is subscribed.
        wait_for(lambda: _read_iopub(kc) and "a client is on iopub" in second.log(tail=None),
                 timeout=10, what="the client's subscription on the new kenneld")
        assert run(kc, "kept", timeout=30).result == "42"
        assert launcher.poll() is None
        launcher.kill()  # a process this test started
        launcher.wait(10)
        wait_for(lambda: second.sessions() == [], timeout=10, what="the session ended")
        assert "its launcher is gone; ending it" in second.log(tail=None)
    finally:
        close_client(kc)
        launcher.kill()
        launcher.wait(10)
        if second:
            second.stop()


@pytest.mark.own_kenneld
@pytest.mark.timeout_s(60)
def test_a_launched_session_whose_launcher_died_with_kenneld_down_is_not_restored(kenneld,
                                                                                  tmp_path):
    kc, launcher = _launch(kenneld, tmp_path)
    second = None
    try:
        _wait_idle(kenneld, launcher)
        (session,) = kenneld.sessions()
        session_dir = os.path.join(kenneld.state_dir, "sessions", session["id"])
        assert os.path.isdir(session_dir)
        kenneld.stop()
        launcher.kill()  # while no kenneld runs
        launcher.wait(10)
        second = kenneld.successor()
        second.start()
        assert second.sessions() == []
        assert not os.path.exists(session_dir)
        assert "ended while no kenneld ran; removing it" in second.log(tail=None)
    finally:
        launcher.kill()
        launcher.wait(10)
        if second:
            second.stop()


@pytest.mark.own_kenneld
@pytest.mark.timeout_s(60)
def test_a_launched_session_whose_port_was_taken_is_kept_not_moved(kenneld, tmp_path):
    """A session kenneld made on its own moves to new ports when one was taken while no
    kenneld ran; a front end's ports are its connection file's, so a launched session is
    kept, not served (and its directory with it), never moved where its front end would not
    look."""
    kc, launcher = _launch(kenneld, tmp_path)
    second = squatter = None
    try:
        _wait_idle(kenneld, launcher)
        (session,) = kenneld.sessions()
        session_dir = os.path.join(kenneld.state_dir, "sessions", session["id"])
        kenneld.stop()
        squatter = squat(kc.shell_port)
        second = kenneld.successor()
        second.start()
        assert second.sessions() == []
        log = second.log(tail=None)
        assert "kept, not served" in log and "new ports" not in log, log
        with open(os.path.join(session_dir, "connection.json")) as f:
            assert json.load(f)["shell_port"] == kc.shell_port
    finally:
        if squatter:
            squatter.close()
        close_client(kc)
        launcher.kill()
        launcher.wait(10)
        if second:
            second.stop()


@pytest.mark.own_kenneld
def test_a_launcher_gives_up_on_a_kenneld_that_does_not_come_back(kenneld, tmp_path):
    """The wait has a bound: KENNEL_LAUNCHER_WAIT seconds (30 by default), then the launcher
    exits 1 saying so, and the front end sees its kernel die."""
    kc, launcher = _launch(kenneld, tmp_path, env={"KENNEL_LAUNCHER_WAIT": "1"},
                           stderr=subprocess.PIPE, text=True)
    try:
        _wait_idle(kenneld, launcher)
        kenneld.stop()
        stopped = time.monotonic()
        assert launcher.wait(15) == 1
        assert time.monotonic() - stopped < 10  # (its clock may start while kenneld stops)
        err = launcher.stderr.read()
        assert "waiting up to 1 s for kenneld to come back" in err, err
        assert "no kenneld for 1 s" in err and "given up" in err, err
    finally:
        launcher.kill()
        launcher.wait(10)


@pytest.mark.own_kenneld
def test_a_launcher_learns_of_its_sessions_end_without_polling_the_manager(kenneld,
                                                                            tmp_path):
    """The launcher watches the session's directory (inotify) rather than ask the manager
    every 200 ms: at most one info_request in 2.5 s (it asks every 5 s as a backstop), and
    an end_request from elsewhere has it exit before its next question."""
    kc, launcher = _launch(kenneld, tmp_path)
    try:
        _wait_idle(kenneld, launcher)
        time.sleep(0.5)  # past its first question
        before = kenneld.log(tail=None).count("manager: <- info_request")
        time.sleep(2.5)
        asked = kenneld.log(tail=None).count("manager: <- info_request") - before
        assert asked <= 1, f"{asked} info_requests in 2.5 s"
        (session,) = kenneld.sessions()
        kenneld.ok("end_request", {"session": session["id"]})
        ended = time.monotonic()
        assert launcher.wait(10) == 0
        assert time.monotonic() - ended < 3  # before its next question, 5 s after the last
    finally:
        launcher.kill()
        launcher.wait(10)


@pytest.mark.own_kenneld
def test_a_launcher_gives_up_on_a_kenneld_that_runs_but_does_not_answer(kenneld, tmp_path):
    """kenneld's pid is alive but it answers nothing (stopped here with SIGSTOP; hung, in
    life): the launcher's bound holds all the same."""
    # 3 s: longer than one unanswered question (2 s), so only a clock that keeps running
    # across questions reaches it.
    kc, launcher = _launch(kenneld, tmp_path, env={"KENNEL_LAUNCHER_WAIT": "3"},
                           stderr=subprocess.PIPE, text=True)
    try:
        _wait_idle(kenneld, launcher)
        os.kill(kenneld.proc.pid, signal.SIGSTOP)  # a process this test's fixture started
        try:
            assert launcher.wait(25) == 1
        finally:
            os.kill(kenneld.proc.pid, signal.SIGCONT)
        assert "given up" in launcher.stderr.read()
        # kenneld, running again, sees its launcher gone and ends the session.
        wait_for(lambda: kenneld.sessions() == [], timeout=10, what="the session ended")
    finally:
        launcher.kill()
        launcher.wait(10)
