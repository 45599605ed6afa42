"""kennel-gateway across a kenneld restart: the new kenneld has a new manager key, so the
gateway's first calls go unanswered; it then reads kenneld.json again (through its root
monitor) and serves, and a session the new kenneld restored is served again."""

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
        kenneld.stop()
        assert kenneld.proc.returncode == 0
        second = kenneld.successor(["--manager", MGR, "--admit-user", "nobody"])
        second.start()
        try:
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
        finally:
            second.stop()
    finally:
        gw.stop()
