"""kennel-gateway across a kenneld restart: the new kenneld has a new manager key, so the
gateway's first calls go unanswered; it then reads kenneld.json again (through its root
monitor) and serves, and a session the new kenneld restored is served again — also when one
of its ports was taken meanwhile and the new kenneld moved it (the gateway kept dialling the
old ports)."""

import json
import socket
import time

import pytest

from .gateway_proc import Gateway, free_port, result_text

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
        ch.close()
        conn_file = kenneld.ok("info_request", {"session": k["id"]})["session"]["connection_file"]
        kenneld.stop()
        assert kenneld.proc.returncode == 0
        with open(conn_file) as f:
            shell_port = json.load(f)["shell_port"]
        squatter = socket.socket()
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", shell_port))
        squatter.listen()
        second = kenneld.successor(["--manager", MGR, "--admit-user", "nobody"])
        second.start()
        try:
            with open(conn_file) as f:
                assert json.load(f)["shell_port"] != shell_port, second.log()
            deadline = time.monotonic() + 60
            while True:
                status, listed = gw.request("GET", "/api/kernels")
                if status == 200:
                    break
                assert status in (503, 504), (status, listed, gw.log())
                assert time.monotonic() < deadline, gw.log()
                time.sleep(0.5)
            assert [m["id"] for m in listed] == [k["id"]]
            ch = gw.connect(k["id"])
            assert result_text(ch.run("kept", timeout=30)[1]) == "'still here'"
            ch.close()
            assert gw.alive()
            assert "its shell_port moved" in gw.log_path.read_text(errors="replace")
        finally:
            squatter.close()
            second.stop()
    finally:
        gw.stop()
