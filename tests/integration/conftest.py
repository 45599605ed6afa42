"""Fixtures for the integration tests: a real bin/kenneld per test, driven by real clients.

- `kenneld`: starts bin/kenneld (kenneld_proc.Kenneld) on a fresh state directory and waits
  for STATE/kenneld.json; `call()` speaks the manager API, `cli()` runs bin/kennel.
  Parametrize it indirectly with "ipc" for ipc:// session channels, or with a list of extra
  kenneld arguments. `start_kenneld` starts more, or with arguments known only at run time.
  Teardown (also after a failed test) sends SIGTERM and asserts that kenneld exited 0 within
  10 s, removed kenneld.json, and left nothing running: no process that was below kenneld
  just before the SIGTERM, no kernel_pid any manager reply named, and no process whose
  working directory or command line is in the state directory.
- `session`: one session created through the manager, as a ready BlockingKernelClient
  (`.session_info` is the create_reply's INFO). Ready means itest_helpers.wait_ready(),
  a faster equivalent of kc.wait_for_ready(timeout=10), which test_wait_for_ready uses.
- `connect`: a factory for more BlockingKernelClients, all stopped at teardown.
- Every test runs under a SIGALRM deadline (TEST_TIMEOUT_S, or @pytest.mark.timeout_s(N)),
  and every blocking call has its own timeout.
"""

import os
import shutil
import signal
import time

import pytest

from .itest_helpers import make_client
from .kenneld_proc import new_kenneld

TEST_TIMEOUT_S = 30


def pytest_configure(config):
    config.addinivalue_line("markers", "timeout_s(n): per-test deadline in seconds")


class DeadlineExceeded(Exception):
    pass


@pytest.fixture(autouse=True)
def _deadline(request):
    marker = request.node.get_closest_marker("timeout_s")
    seconds = marker.args[0] if marker else TEST_TIMEOUT_S

    def expired(signum, frame):
        raise DeadlineExceeded(f"test exceeded its {seconds} s deadline")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _kill_leftovers(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _stop_and_check(k):
    """SIGTERM kenneld, then assert that it exited cleanly and left nothing behind."""
    k.stop()
    log = k.log()
    assert k.proc.returncode == 0, f"kenneld exit status {k.proc.returncode}:\n{log}"
    assert not k.info_path.exists(), "kenneld.json was not removed"
    deadline = time.monotonic() + 2  # SIGKILLed kernels may take a moment to vanish
    while k.survivors() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not k.survivors(), f"processes survived kenneld: {k.survivors()}\n{log}"


@pytest.fixture
def start_kenneld():
    """start_kenneld(transport="tcp", args=()) -> a started Kenneld, checked and reaped at
    teardown (also when the test failed)."""
    started = []

    def _start(transport="tcp", args=()):
        root, k = new_kenneld(transport, args)
        started.append((root, k))
        k.start()
        return k

    yield _start
    try:
        for _, k in started:
            _stop_and_check(k)
    finally:
        for root, k in started:
            if k.proc is not None and k.proc.poll() is None:
                k.proc.kill()
                k.proc.wait(5)
            _kill_leftovers(k.survivors())
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def kenneld(request, start_kenneld):
    """Parametrize indirectly with "tcp", "ipc" or a list of extra kenneld arguments."""
    param = getattr(request, "param", "tcp")
    transport, args = (param, []) if isinstance(param, str) else ("tcp", param)
    return start_kenneld(transport, args)


@pytest.fixture
def connect():
    """connect(connection_file) -> a ready BlockingKernelClient, stopped at teardown."""
    clients = []

    def _connect(connection_file, ready=True):
        kc = make_client(connection_file, ready)
        clients.append(kc)
        return kc

    yield _connect
    for kc in clients:
        kc.stop_channels()


@pytest.fixture
def session(kenneld, connect):
    info = kenneld.create()
    kc = connect(info["connection_file"])
    kc.session_info = info
    return kc
