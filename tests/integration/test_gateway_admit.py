"""kennel-gateway in front of a kenneld that does not admit the gateway's user: the REST
calls work (the manager answers), but every session socket cuts the gateway, so a kernel's
WebSocket would wait forever. After --answer-timeout the gateway closes it with a reason
that names the fix, and logs it."""
import os
import time

import pytest
import websocket

from .gateway_proc import Gateway, free_port

MGR = f"tcp://127.0.0.1:{free_port()}"
pytestmark = pytest.mark.parametrize("kenneld", [["--manager", MGR]], indirect=True)


def test_a_kernel_kenneld_never_answers_is_closed_with_the_reason(kenneld, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the gateway serves as another user only when started as root")
    gw = Gateway(kenneld, tmp_path, ["--answer-timeout", "2"])
    try:
        status, k = gw.request("POST", "/api/kernels", {"name": "python3"})
        assert status == 201, k
        ch = gw.connect(k["id"])
        ch.ws.settimeout(15)
        t0 = time.monotonic()
        code = reason = None
        while code is None:
            frame = ch.ws.recv_frame()  # nothing but the close: kenneld never answers
            assert frame.opcode == websocket.ABNF.OPCODE_CLOSE, frame
            code = int.from_bytes(frame.data[:2], "big")
            reason = frame.data[2:].decode()
        assert code == 1011 and "--admit-user" in reason, (code, reason)
        assert 1.5 < time.monotonic() - t0 < 12
        assert "start it with --admit-user nobody" in gw.log(), gw.log()
        assert gw.alive()
    finally:
        gw.stop()
