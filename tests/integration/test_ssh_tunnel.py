"""Debian's jupyter_client (no CURVE) reaching a session from another machine: through an SSH
tunnel, as docs/security.md tells (issue #28). A real OpenSSH server of the test's own on a
loopback port, a real `ssh -L` forwarding the session's five ports, and Debian's
BlockingKernelClient on a copy of the connection file naming the tunnel's ends. The far end
of the tunnel is sshd's forwarding process, logged in as root: the gate's owner check admits
it, as it would kenneld's own user."""

import json
import os
import socket
import subprocess
import time

import pytest

from .gateway_proc import free_port
from .itest_helpers import run
from .kenneld_proc import end_process

SSHD = "/usr/sbin/sshd"
SSH = "/usr/bin/ssh"
PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")


def _listening(port):
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait_listening(ports, proc, what, timeout=20):
    deadline = time.monotonic() + timeout
    while not all(_listening(p) for p in ports):
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} does not listen on {ports} after {timeout} s")
        time.sleep(0.05)


@pytest.fixture
def sshd(tmp_path):
    """An OpenSSH server on a loopback port, admitting one key of the test's own for root:
    (port, the client's key file, a known_hosts file naming the server's key)."""
    assert os.access(SSHD, os.X_OK), "openssh-server is missing: run scripts/install-deps.sh"
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    keys = tmp_path / "ssh"
    keys.mkdir(mode=0o700)
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)],
                       check=True, timeout=20)
    (keys / "authorized_keys").write_text((keys / "client.pub").read_text())
    port = free_port()
    (keys / "known_hosts").write_text(f"[127.0.0.1]:{port} {(keys / 'host.pub').read_text()}")
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", "/dev/null", "-o", "ListenAddress=127.0.0.1", "-o",
         f"Port={port}", "-o", f"HostKey={keys / 'host'}", "-o",
         f"AuthorizedKeysFile={keys / 'authorized_keys'}", "-o", "PidFile=none", "-o",
         "UsePAM=no", "-o", "PermitRootLogin=prohibit-password", "-o",
         "PasswordAuthentication=no", "-o", "KbdInteractiveAuthentication=no", "-o",
         "AllowTcpForwarding=local", "-o", "StrictModes=no"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_listening([port], proc, "sshd")
        yield port, keys / "client", keys / "known_hosts"
    finally:
        end_process(proc, grace_s=5)


@pytest.mark.timeout_s(90)
def test_debians_jupyter_client_runs_cells_through_an_ssh_tunnel(kenneld, connect, sshd,
                                                                 tmp_path):
    port, key, known_hosts = sshd
    info = kenneld.create("far")
    with open(info["connection_file"]) as f:
        conn = json.load(f)
    assert not conn.get("curve_publickey"), "a session without CURVE, for Debian's client"
    local = {name: free_port() for name in PORTS}
    forwards = []
    for name in PORTS:
        forwards += ["-L", f"127.0.0.1:{local[name]}:127.0.0.1:{conn[name]}"]
    tunnel = subprocess.Popen(
        [SSH, "-N", "-i", str(key), "-p", str(port), "-o", f"UserKnownHostsFile={known_hosts}",
         "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o",
         "ExitOnForwardFailure=yes", "-F", "/dev/null", *forwards, "root@127.0.0.1"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_listening(local.values(), tunnel, "ssh -L")
        far = dict(conn, **local)  # the copy a client on another machine would use
        far_file = tmp_path / "kernel.json"
        far_file.write_text(json.dumps(far))
        kc = connect(str(far_file))  # Debian's BlockingKernelClient, ready (heartbeat too)
        cell = run(kc, "x = 6 * 7\nprint('through', 'ssh')\nx")
        assert cell.content["status"] == "ok", cell.content
        assert cell.result == "42" and cell.stream("stdout") == "through ssh\n", cell
        assert run(kc, "x + 1").result == "43"  # the session's state, across the tunnel
    finally:
        end_process(tunnel, grace_s=5)
