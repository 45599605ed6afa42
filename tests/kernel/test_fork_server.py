"""The fork server (kernel_fork_server.py) the other kernel tests get their kernels from: a
forked kernel starts as a cold one would, and its exit and signals are Popen's."""
import json
import os
import signal
import socket
import subprocess

import pytest

from kernel_pipe_client import ForkedProcess, ForkServer, KernelProcess, kernel_env, streams

pytestmark = pytest.mark.spread  # nothing shared but this process's fork server

# The first cell: sys.modules before the cell imports anything, then what Popen and the
# interpreter's start make of a process, as the kernel found it. Handlers are named
# without their addresses.
FACTS = """import sys
modules = sorted(sys.modules)
import json, multiprocessing.process, os, re, resource, signal, site

def target(fd):
    try:
        return re.sub(r"\\[\\d+\\]$", "[]", os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None

handlers = {}
for signum in range(1, signal.NSIG):
    try:
        handlers[signum] = re.sub(r" at 0x[0-9a-f]+", "", repr(signal.getsignal(signum)))
    except (OSError, ValueError):
        pass
with open("/proc/self/status") as f:
    status = [line for line in f if line.split(":")[0] in ("SigBlk", "SigIgn", "SigCgt", "Threads")]
umask = os.umask(0)
os.umask(umask)
fds = {name: target(name) for name in os.listdir("/proc/self/fd")}
print(json.dumps({
    "modules": modules, "fds": {fd: t for fd, t in fds.items() if t is not None},
    "argv": sys.argv, "orig_argv": sys.orig_argv, "executable": sys.executable,
    "flags": list(sys.flags), "path": sys.path, "cwd": os.getcwd(), "env": dict(os.environ),
    "pgid": os.getpgid(0), "sid": os.getsid(0), "umask": umask, "handlers": handlers,
    "status": status, "nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
    "user_site": site.USER_SITE, "mp_dir": multiprocessing.process.ORIGINAL_DIR,
    "mp_main": getattr(sys.modules["__mp_main__"], "__file__", None),
    "stdio_line_buffering": [sys.__stdout__.line_buffering, sys.__stderr__.line_buffering],
}))
"""


def _facts(kernel, workdir):
    reply, iopub = kernel.execute(FACTS)
    assert reply["status"] == "ok", reply
    return json.loads(streams(iopub, "stdout").replace(str(workdir), "WORKDIR"))


def _inheritable_fds():
    """This process's fds a cold kernel inherits besides 0-3 (it is started with
    close_fds=False, so that its pipe can be put on 3)."""
    fds = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if int(name) > 3 and os.get_inheritable(int(name)):
                fds.add(name)
        except OSError:
            pass  # the listing's own
    return fds


def _forked(workdir):
    k = KernelProcess(workdir, cold=False)
    if not isinstance(k.proc, ForkedProcess):
        k.kill()
        pytest.skip("no fork server here: kernels start cold")
    return k


def test_a_forked_kernel_starts_as_a_cold_one(tmp_path):
    (tmp_path / "cold").mkdir()
    (tmp_path / "forked").mkdir()
    inherited = _inheritable_fds()
    cold = KernelProcess(tmp_path / "cold", cold=True)
    forked = None
    try:
        forked = _forked(tmp_path / "forked")
        cold_facts = _facts(cold, tmp_path / "cold")
        forked_facts = _facts(forked, tmp_path / "forked")
    finally:
        cold.kill()
        if forked is not None:
            forked.kill()
    for fd in inherited:
        cold_facts["fds"].pop(fd, None)
    assert "prompt_toolkit" not in forked_facts["modules"]
    assert forked_facts["pgid"] == os.getpgid(0)  # Popen's default: pytest's group
    for key in cold_facts:
        assert forked_facts[key] == cold_facts[key], key
    assert forked_facts == cold_facts


def test_forked_kernels_draw_their_own_random_numbers(tmp_path):
    """One server's kernels share its memory, not its random state (the hash seed, fixed
    at the interpreter's start, they do share)."""
    code = ("import multiprocessing.process, random\n"
            "print(random.getrandbits(64), bytes(multiprocessing.process.current_process()"
            ".authkey).hex())")
    draws = []
    for _ in range(2):
        k = _forked(tmp_path)
        try:
            reply, iopub = k.execute(code)
            assert reply["status"] == "ok", reply
            draws.append(streams(iopub, "stdout").split())
        finally:
            k.kill()
    assert draws[0][0] != draws[1][0] and draws[0][1] != draws[1][1], draws


def test_a_forked_kernels_exit_is_reported_once_it_is_reaped(tmp_path):
    k = _forked(tmp_path)
    try:
        assert k.proc.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            k.proc.wait(timeout=0.1)
        k.proc.send_signal(signal.SIGTERM)
        assert k.wait() == -signal.SIGTERM
        assert k.proc.returncode == -signal.SIGTERM and k.proc.poll() == -signal.SIGTERM
        assert not os.path.exists(f"/proc/{k.proc.pid}")  # reaped: no zombie left
        k.proc.send_signal(signal.SIGKILL)  # a no-op now, as Popen's
    finally:
        k.kill()


def test_the_fork_server_exits_with_its_control_socket_and_takes_its_kernels(tmp_path):
    """What happens when pytest is killed: its end of the control socket closes."""
    try:
        server = ForkServer()
    except OSError as e:
        pytest.skip(f"no fork server here: {e}")
    mine, theirs = socket.socketpair()
    try:
        proc = server.spawn(["--pipe-fd", "3"], tmp_path, kernel_env(tmp_path), theirs.fileno())
        theirs.close()
        assert proc.poll() is None
        server.control.close()
        assert server.proc.wait(timeout=10) == 0
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        server.close()
        mine.close()
        theirs.close()
