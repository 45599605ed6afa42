"""kennel-gateway across a kenneld restart: the new kenneld has a new manager key, which the
gateway reads from kenneld.json (through its root monitor) within a second; it reconnects,
and a session the new kenneld restored is served again — also when one of its ports was
taken meanwhile and the new kenneld moved it (the gateway kept dialling the old ports)."""

import json

import pytest

from .gateway_proc import Gateway, free_port, result_text
from .itest_helpers import squat, wait_for

MGR = f"tcp://127.0.0.1:{free_port()}"
pytestmark = pytest.mark.parametrize("kenneld", [["--manager", MGR, "--admit-user", "nobody"]], indirect=True)


@pytest.mark.own_kenneld
@pytest.mark.timeout_s(120)
def test_gateway_follows_a_kenneld_restart(kenneld, tmp_path):
    gw = Gateway(kenneld, tmp_path)
    try:
        k = gw.start_kernel("kept")
        ch = gw.connect(k["id"])
        ch.run("kept = 'still here'")
        conn_file = kenneld.ok("info_request", {"session": k["id"]})["session"]["connection_file"]
        kenneld.stop()
        assert kenneld.proc.returncode == 0
        with open(conn_file) as f:
            shell_port = json.load(f)["shell_port"]
        squatter = squat(shell_port)
        second = kenneld.successor(["--manager", MGR, "--admit-user", "nobody"])
        second.start()
        try:
            with open(conn_file) as f:
                assert json.load(f)["shell_port"] != shell_port, second.log()
            # No call needed: within a second the gateway sees kenneld.json name a new
            # manager key, reconnects and follows the session to its new ports.
            wait_for(lambda: "its shell_port moved" in gw.log_path.read_text(errors="replace"),
                     timeout=10, what="the gateway following the moved session")
            # The WebSocket opened before the restart serves the next cell (it went to the
            # old port, unanswered, for as long as no REST call timed out) ...
            assert result_text(ch.run("kept", timeout=30)[1]) == "'still here'"
            ch.close()
            # ... and the first REST call after the restart is answered (it waited 10 s for
            # a reply signed with the old key, then said 504).
            status, listed = gw.request("GET", "/api/kernels")
            assert status == 200 and [m["id"] for m in listed] == [k["id"]], (status, gw.log())
            ch = gw.connect(k["id"])
            assert result_text(ch.run("kept", timeout=30)[1]) == "'still here'"
            ch.close()
            assert gw.alive()
        finally:
            squatter.close()
            second.stop()
    finally:
        gw.stop()
