"""Fixtures for the integration tests: a real bin/kenneld, driven by real clients.

- `kenneld`: a running bin/kenneld (kenneld_proc.Kenneld); `call()` speaks the manager API,
  `cli()` runs bin/kennel. Parametrize it indirectly with "ipc" for ipc:// session channels,
  or with a list of extra kenneld arguments.
  By default the tests a pytest process runs share one kenneld per configuration (transport,
  arguments and preload), across modules, the few most recently used kept
  (kennel_shared.SharedKennelds): starting one costs its zygote's warm-up and its pool,
  over a second of CPU. A shared kenneld is
  handed to each test with no session, and taken back at its teardown (also after a failed
  test): every session is ended, every process of theirs must be gone within 5 s (the
  kernel_pids manager replies named, and everything below kenneld but its zygote and its
  pool), and kenneld must still run. A kenneld that fails that check is retired, and the
  next test gets a fresh one. One that makes room, and each at the end of the run, is
  stopped and checked as below.
  Mark a test @pytest.mark.own_kenneld when it needs a kenneld of its own: it stops or
  restarts kenneld, reads its log or counters, or depends on its state at start.
  KENNEL_TEST_OWN_KENNELD=1 gives every test its own (slower; it pins a leftover that a
  final check found on the test that left it).
- `start_kenneld` starts more, or with arguments known only at run time; they, and every
  own kenneld, are the test's own. Their teardown (also after a failed test) sends SIGTERM
  and asserts that kenneld exited 0 within 10 s, removed kenneld.json, and left nothing
  running: no process that was below kenneld just before the SIGTERM, no kernel_pid any
  manager reply named, and no process whose working directory or command line is in the
  state directory.
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
import kennel_shared
from kennel_shared import SharedKennelds

from .itest_helpers import close_client, make_client
from .kenneld_proc import new_kenneld, pid_alive, processes_in, session_processes

TEST_TIMEOUT_S = 30
RELEASE_TIMEOUT_S = 5
OWN_KENNELD = os.environ.get("KENNEL_TEST_OWN_KENNELD", "") not in ("", "0")


def pytest_configure(config):
    config.addinivalue_line("markers", "timeout_s(n): per-test deadline in seconds")
    config.addinivalue_line("markers", "own_kenneld: the test's kenneld is its own, not shared")
    kennel_shared.register_preload_marker(config)


def pytest_runtest_setup(item):
    kennel_shared.mark_preload(item)  # before the test's fixtures start a kenneld


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


def _reap(root, k):
    """Whatever happened: kenneld and everything it left are killed, its directory removed."""
    if k.proc is not None and k.proc.poll() is None:
        k.proc.kill()
        k.proc.wait(5)
    _kill_leftovers(k.survivors())
    shutil.rmtree(root, ignore_errors=True)


def _start(transport, args):
    root, k = new_kenneld(transport, args)
    try:
        k.start()
    except BaseException:
        _reap(root, k)
        raise
    return root, k


@pytest.fixture
def start_kenneld():
    """start_kenneld(transport="tcp", args=()) -> a started Kenneld, checked and reaped at
    teardown (also when the test failed)."""
    started = []

    def _start_one(transport="tcp", args=()):
        root, k = new_kenneld(transport, args)
        started.append((root, k))
        k.start()
        return k

    yield _start_one
    try:
        for _, k in started:
            _stop_and_check(k)
    finally:
        for root, k in started:
            _reap(root, k)


def _release(k, named_before):
    """End every session a test left on a shared kenneld; assert that kenneld still runs and
    that nothing of those sessions outlives them. named_before: k.kernels when the test
    began (kernels of earlier tests, whose pids may since name other processes)."""
    assert k.proc.poll() is None, \
        f"kenneld exited with {k.proc.returncode} during the test:\n{k.log()}"
    sessions = k.sessions()  # (which adds their kernels to k.kernels)
    spawner = k.ok("stats_request")["spawner"]
    # Everything below kenneld must go with the sessions, but for the zygote and the pool:
    # kenneld's children no manager reply named as a kernel during the test (and what runs
    # below them).
    doomed = session_processes(k.proc.pid, spawner.get("zygote_pid"), k.kernels - named_before)
    dirs = [os.path.dirname(s["connection_file"]) for s in sessions]
    for s in sessions:
        reply = k.call("end_request", {"session": s["id"]})
        assert reply["status"] == "ok" or reply.get("ename") == "NoSuchSession", reply

    def survivors():
        left = {pid for pid, start in doomed.items() if pid_alive(pid, start)}
        return sorted(left | set(processes_in(*dirs)))

    def dirs_left():
        # A session ended while its workspace image was still being made loses its
        # directory once the image is done (on kenneld's worker thread): soon, not at once.
        return [d for d in dirs if os.path.exists(d)]

    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    while (survivors() or dirs_left()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not survivors(), \
        f"processes outlived their ended sessions: {survivors()}\n{k.log()}"
    assert k.sessions() == [], k.sessions()
    assert dirs_left() == [], "session directories left"


@pytest.fixture(scope="session")
def _shared_kennelds():
    # A key holds the preload too (kennel_shared.LIGHT, set per test from its mark): a test
    # marked default_preload never gets a kenneld another test started light, or the reverse.
    shared = SharedKennelds(lambda key: _start(key[0], key[1]), _stop_and_check, _reap)
    yield shared
    shared.stop_all()


@pytest.fixture
def kenneld(request, start_kenneld, _shared_kennelds):
    """Parametrize indirectly with "tcp", "ipc" or a list of extra kenneld arguments."""
    param = getattr(request, "param", "tcp")
    transport, args = (param, []) if isinstance(param, str) else ("tcp", param)
    if request.node.get_closest_marker("own_kenneld") or OWN_KENNELD:
        yield start_kenneld(transport, args)
        return
    k = _shared_kennelds.get((transport, tuple(args), kennel_shared.LIGHT))
    k.handed_to_test()
    named_before = set(k.kernels)
    yield k
    try:
        _release(k, named_before)
    except BaseException:
        _shared_kennelds.retire(k)
        raise


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
        close_client(kc)


@pytest.fixture
def session(kenneld, connect):
    info = kenneld.create()
    kc = connect(info["connection_file"])
    kc.session_info = info
    return kc
