"""Fixtures for the hostile tests: a real kenneld (parametrize with extra arguments) that
must exit cleanly leaving no kernel behind, and a ready session named victim."""
import json
import os
import signal

import pytest

from kennel_hostile import Client, Kenneld, alive


@pytest.fixture
def kenneld(tmp_path, request):
    args = getattr(request, "param", ())
    k = Kenneld(str(tmp_path / "state"), *args)
    try:
        yield k
    finally:
        rc = k.stop()
        leftovers = [pid for pid in k.kernel_pids if alive(pid)]
        for pid in leftovers:
            os.kill(pid, signal.SIGKILL)
        assert rc == 0, f"kenneld exited with {rc}"
        assert not leftovers, f"kernels left running: {leftovers}"


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
