"""kennel-gateway in front of a kenneld whose kernels start cold (--spawner exec): a WebSocket
that opens on a kernel still starting has its messages held until the kernel answers, at
most 64 of them; past that it is closed, and the gateway and the kernel serve on."""

import time

import pytest

from .gateway_proc import Gateway, free_port

MGR = f"tcp://127.0.0.1:{free_port()}"
pytestmark = pytest.mark.parametrize(
    "kenneld", [["--manager", MGR, "--admit-user", "nobody", "--spawner", "exec"]], indirect=True)


@pytest.fixture
def gw(kenneld, tmp_path):
    g = Gateway(kenneld, tmp_path, ())
    try:
        yield g
    finally:
        alive = g.alive()
        g.stop()
        assert alive, f"kennel-gateway died:\n{g.log()}"


def _kernel_info_burst(ch, n):
    ids = [ch.send("kernel_info_request", {}) for _ in range(n)]
    return ids


def test_messages_before_a_cold_kernel_is_ready_are_held_then_answered(gw):
    k = gw.start_kernel()
    ch = gw.connect(k["id"])
    ids = set(_kernel_info_burst(ch, 64))
    answered = set()
    deadline = time.monotonic() + 60
    while answered != ids and time.monotonic() < deadline:
        m = ch.recv(timeout=60)
        if m["header"]["msg_type"] == "kernel_info_reply":
            answered.add(m["parent_header"]["msg_id"])
    assert answered == ids, f"{len(answered)} of 64 held requests answered"
    ch.close()


def test_past_64_messages_before_ready_the_websocket_is_closed_and_the_kernel_serves_on(gw):
    from .test_gateway import _closed_with
    k = gw.start_kernel()
    ch = gw.connect(k["id"])
    _kernel_info_burst(ch, 65)
    code, reason = _closed_with(ch, timeout=60)
    assert (code, reason) == (1008, "too many messages before ready"), (code, reason)
    # The kernel, and a WebSocket that waits its turn, are unharmed.
    again = gw.connect(k["id"])
    reply, _ = again.run("6 * 7")
    assert reply["content"]["status"] == "ok", reply
    again.close()
