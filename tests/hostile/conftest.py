"""Fixtures for the hostile tests: a real kenneld (parametrize with extra arguments) that
must exit cleanly leaving no kernel behind, and a ready session named victim."""
import json

import pytest

from kennel_hostile import Client, Kenneld, stop_checked


@pytest.fixture
def kenneld(tmp_path, request):
    args = getattr(request, "param", ())
    k = Kenneld(str(tmp_path / "state"), *args)
    try:
        yield k
    finally:
        stop_checked(k)


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
