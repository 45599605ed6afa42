"""Fixtures for the hostile tests: a real kenneld (parametrize with extra arguments) that
must exit cleanly leaving no kernel behind, and a ready session named victim.

The tests a pytest process runs share one kenneld per argument list and preload, across
modules, the few most recently used kept (kennel_shared.SharedKennelds; starting one costs
its zygote's warm-up and its pool, over a second of CPU): each test gets it with no session,
and at its teardown (also after a failed test) every session is ended and
kennel_hostile.release_checked asserts that kenneld still runs and nothing of those sessions
outlived them; a kenneld that fails that is retired (stopped, what it left killed), and the
next test gets a fresh one. One that makes room, and each at the end of the run, is stopped:
it must exit 0 and leave no kernel running (stop_checked). Mark a test
@pytest.mark.own_kenneld when it needs a kenneld of its own (on its tmp_path), e.g. when it
depends on kenneld's state at start. KENNEL_TEST_OWN_KENNELD=1 gives every test its own
(slower; it pins a failed final check on the test that caused it)."""
import json
import os
import shutil
import tempfile

import pytest
import kennel_shared
from kennel_shared import SharedKennelds

from kennel_hostile import Client, Kenneld, release_checked, stop_checked


OWN_KENNELD = os.environ.get("KENNEL_TEST_OWN_KENNELD", "") not in ("", "0")


def pytest_configure(config):
    config.addinivalue_line("markers", "own_kenneld: the test's kenneld is its own, not shared")
    kennel_shared.register_preload_marker(config)


def pytest_runtest_setup(item):
    kennel_shared.mark_preload(item)  # before the test's fixtures start a kenneld


def _reap(root, k):
    """Whatever happened: kenneld and the kernels it left are killed, its directory removed."""
    try:
        if k.proc.poll() is None:
            k.proc.kill()
            k.proc.wait(5)
        stop_checked(k)  # kills the kernels it left
    except Exception:
        pass  # already failing: this only cleans up
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _start(args):
    root = tempfile.mkdtemp(prefix="kn-h-", dir="/tmp")
    try:
        return root, Kenneld(f"{root}/state", *args)  # started by its constructor
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


@pytest.fixture(scope="session")
def _shared_kennelds():
    # A key holds the preload too (kennel_shared.LIGHT, set per test from its mark).
    shared = SharedKennelds(lambda key: _start(key[0]), stop_checked, _reap)
    yield shared
    shared.stop_all()


@pytest.fixture
def kenneld(tmp_path, request, _shared_kennelds):
    args = tuple(getattr(request, "param", ()))
    if request.node.get_closest_marker("own_kenneld") or OWN_KENNELD:
        k = Kenneld(str(tmp_path / "state"), *args)
        try:
            yield k
        finally:
            stop_checked(k)
        return
    k = _shared_kennelds.get((args, kennel_shared.LIGHT))
    before = set(k.kernels)
    yield k
    try:
        release_checked(k, before)
    except BaseException:
        _shared_kennelds.retire(k)
        raise


@pytest.fixture
def client(kenneld):
    """A connected raw client of a fresh, ready session."""
    reply = kenneld.call("create_request", {"name": "victim"})
    assert reply["status"] == "ok", reply
    with open(reply["session"]["connection_file"]) as f:
        conn = json.load(f)
    c = Client(kenneld.ctx, conn)
    assert c.request("shell", "kernel_info_request", timeout=20) is not None
    try:
        yield c
    finally:
        c.close()
