"""CURVE (issue #28, JEP 145): a session whose sockets are CURVE servers admits only clients
holding its key pair, from its connection file; HMAC stays on top. Clients: Debian's
jupyter_client 7.4 through clients/kennel_curve.py, raw pyzmq, and the kennel CLI."""
import json
import os
import stat
import subprocess
import sys
import time
import uuid

import pytest
import zmq
from jupyter_client import BlockingKernelClient
from jupyter_client.connect import write_connection_file
from jupyter_client.session import Session

from .itest_helpers import close_client, wait_ready
from .kenneld_proc import KENNEL

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients"))
import kennel_curve  # noqa: E402


def _load(path):
    with open(path) as f:
        return json.load(f)


def _curve_client(path):
    kc = kennel_curve.client(path)
    try:
        wait_ready(kc)
    except BaseException:
        close_client(kc)
        raise
    return kc


def _reply(session, sock, msg, timeout):
    """The reply to msg on sock, or None within timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not sock.poll(max(1, int((deadline - time.monotonic()) * 1000))):
            return None
        _, frames = session.feed_identities(sock.recv_multipart())
        r = session.deserialize(frames)
        if r["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
            return r
    return None


def _shell(ctx, conn, keys):
    """A DEALER to conn's shell; keys: None (no CURVE), or (server, public, secret)."""
    s = ctx.socket(zmq.DEALER)
    s.linger = 0
    s.sndtimeo = 1000  # a refused handshake may leave no peer to queue on: no endless send
    if keys:
        s.curve_serverkey, s.curve_publickey, s.curve_secretkey = keys
    s.connect(f"tcp://{conn['ip']}:{conn['shell_port']}")
    return s


def _output(kc, code):
    """Run code on kc; its stream text."""
    out = []
    r = kc.execute_interactive(code, timeout=20,
                               output_hook=lambda m: out.append(m["content"].get("text", "")))
    assert r["content"]["status"] == "ok", r["content"]
    return "".join(out)


def test_a_curve_session_admits_only_its_key_pair(kenneld, tmp_path):
    """kennel new --curve: the connection file (0600) carries the pair as JEP 145 has it
    (the public key is the secret key's); jupyter_client with the pair runs cells. Without
    CURVE, or with the right server key but a pair of its own, a client gets no reply and
    no output, and is counted; the session's client, and a session without CURVE on the same
    kenneld, go on."""
    r = kenneld.cli("new", "--name", "sealed", "--curve")
    assert r.returncode == 0, r.stderr
    path = r.stdout.strip()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    conn = _load(path)
    assert zmq.curve_public(conn["curve_secretkey"].encode()) == conn["curve_publickey"].encode()
    assert conn["key"] and conn["signature_scheme"] == "hmac-sha256"  # HMAC stays on top
    plain_path = kenneld.create("open")["connection_file"]
    assert "curve_publickey" not in _load(plain_path)

    kc = _curve_client(path)
    ctx = zmq.Context()
    socks = []
    try:
        assert "42" in _output(kc, "print(6 * 7)")
        session = Session(key=conn["key"].encode(), signature_scheme="hmac-sha256")
        server = conn["curve_publickey"].encode()
        own_pub, own_sec = zmq.curve_keypair()
        for keys in (None, (server, own_pub, own_sec)):
            s = _shell(ctx, conn, keys)
            socks.append(s)
            try:
                msg = session.send(s, "kernel_info_request", {})
            except zmq.Again:
                continue  # refused before the send: nothing can come back either
            assert _reply(session, s, msg, 2) is None, f"a client with keys {keys} got a reply"
        # iopub: a subscriber with a pair of its own reads nothing of the session's output.
        sub = ctx.socket(zmq.SUB)
        sub.linger = 0
        sub.curve_serverkey, sub.curve_publickey, sub.curve_secretkey = server, own_pub, own_sec
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(f"tcp://{conn['ip']}:{conn['iopub_port']}")
        socks.append(sub)
        time.sleep(0.5)
        assert "secret" in _output(kc, "print('secret')")
        assert not sub.poll(1000), "a subscriber without the session's pair read its output"
        info = kenneld.ok("info_request", {"session": "sealed"})["session"]
        assert info["curve"] is True and info["clients_denied"] >= 2, info
        # The heartbeat takes any pair that knows the server key (upstream's makes its own).
        hb = ctx.socket(zmq.REQ)
        hb.linger = 0
        hb.curve_serverkey, hb.curve_publickey, hb.curve_secretkey = server, own_pub, own_sec
        hb.connect(f"tcp://{conn['ip']}:{conn['hb_port']}")
        socks.append(hb)
        hb.send(b"ping")
        assert hb.poll(5000) and hb.recv() == b"ping"
        assert "7" in _output(kc, "print(3 + 4)")
        # A session without CURVE is reached as ever.
        open_kc = BlockingKernelClient()
        open_kc.load_connection_file(plain_path)
        open_kc.start_channels()
        try:
            wait_ready(open_kc)
        finally:
            close_client(open_kc)
        assert kenneld.ok("info_request", {"session": "open"})["session"]["curve"] is False
    finally:
        for s in socks:
            s.close()
        ctx.term()
        close_client(kc)


def test_rekey_refuses_the_old_keys(kenneld):
    """kennel rekey: new keys in the connection file (still 0600); the client on the old
    ones is cut and cannot get back in; a client on the new ones runs cells, in the same
    namespace."""
    path = kenneld.create("rekeyed", curve=True)["connection_file"]
    old = _load(path)
    kc = _curve_client(path)
    try:
        _output(kc, "kept = 'still here'")
        r = kenneld.cli("rekey", "rekeyed")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == path
        new = _load(path)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert new["curve_publickey"] != old["curve_publickey"]
        assert {k: v for k, v in new.items() if not k.startswith("curve_")} == \
            {k: v for k, v in old.items() if not k.startswith("curve_")}
        msg_id = kc.kernel_info()
        with pytest.raises(Exception):
            kc.get_shell_msg(timeout=3)  # (queue.Empty) the old keys are cut and refused
        assert msg_id
        fresh = _curve_client(path)
        try:
            assert "still here" in _output(fresh, "print(kept)")
        finally:
            close_client(fresh)
        r = kenneld.cli("rekey", kenneld.create("plain")["id"])
        assert r.returncode != 0 and "CURVE" in r.stderr
    finally:
        close_client(kc)


@pytest.mark.parametrize("kenneld", [["--curve"]], indirect=True)
def test_kenneld_curve_seals_every_session_and_the_manager(kenneld, tmp_path):
    """kenneld --curve: every session is CURVE, the manager admits only kenneld.json's pair
    (a client without it gets no reply), and the kennel CLI, which reads both files, works."""
    mgr = kenneld.info["manager"]
    assert mgr["curve_publickey"] and mgr["curve_secretkey"]
    assert stat.S_IMODE(os.stat(kenneld.info_path).st_mode) == 0o600
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.linger = 0
    s.connect(mgr["endpoint"])
    try:
        session = Session(key=mgr["key"].encode(), signature_scheme="hmac-sha256")
        msg = session.send(s, "list_request", {})
        assert _reply(session, s, msg, 2) is None, "a manager client without CURVE got a reply"
    finally:
        s.close()
        ctx.term()
    r = kenneld.cli("exec", "cli", "print(2 ** 10)")
    assert r.returncode == 0, r.stderr
    assert "1024" in r.stdout
    info = kenneld.ok("info_request", {"session": "cli"})["session"]
    assert info["curve"] is True
    assert "curve_secretkey" in _load(info["connection_file"])


@pytest.mark.parametrize("kenneld", [["--curve"]], indirect=True)
def test_kernelspec_launcher_applies_the_front_ends_keys(kenneld, tmp_path):
    """A front end with transport_encryption (JEP 145) writes its own pair into the
    connection file; `kennel kernel -f` has kenneld bind the session's sockets with it. The
    kernelspec says it can. Under --curve a connection file without keys is refused, naming
    CURVE."""
    prefix = tmp_path / "prefix"
    assert kenneld.cli("kernelspec", "install", "--prefix", str(prefix)).returncode == 0
    spec = _load(prefix / "share" / "jupyter" / "kernels" / "kennel" / "kernel.json")
    assert spec["metadata"]["supported_encryption"] == ["curve"]

    conn_file = str(tmp_path / "kernel-curve.json")
    write_connection_file(conn_file, ip="127.0.0.1", key=str(uuid.uuid4()).encode())
    pub, sec = zmq.curve_keypair()
    conn = _load(conn_file)
    conn.update(curve_publickey=pub.decode(), curve_secretkey=sec.decode())
    with open(conn_file, "w") as f:
        json.dump(conn, f)
    launcher = subprocess.Popen([str(KENNEL), "--state-dir", str(kenneld.state_dir), "kernel",
                                 "-f", conn_file], stdin=subprocess.DEVNULL)
    try:
        kc = _curve_client(conn_file)
        try:
            assert "launched" in _output(kc, "print('launched')")
        finally:
            close_client(kc)
    finally:
        launcher.terminate()
        assert launcher.wait(10) == 0

    bare = str(tmp_path / "kernel-bare.json")
    write_connection_file(bare, ip="127.0.0.1", key=str(uuid.uuid4()).encode())
    r = subprocess.run([str(KENNEL), "--state-dir", str(kenneld.state_dir), "kernel", "-f", bare],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=20)
    assert r.returncode != 0 and "CURVE" in r.stderr, r.stderr


@pytest.mark.own_kenneld
def test_a_curve_session_keeps_its_keys_across_a_restart(kenneld):
    """A CURVE session restored by the next kenneld binds with the keys of its connection
    file (rekeyed ones included): the same file still works, and the namespace is back."""
    info = kenneld.create("durable", curve=True)
    assert kenneld.cli("rekey", "durable").returncode == 0
    keys = _load(info["connection_file"])["curve_publickey"]
    kc = _curve_client(info["connection_file"])
    try:
        _output(kc, "kept = 'across restarts'")
    finally:
        close_client(kc)
    kenneld.stop()
    assert kenneld.proc.returncode == 0
    second = kenneld.successor()
    second.start()
    try:
        back = second.ok("info_request", {"session": "durable"})["session"]
        assert back["curve"] is True, back
        assert _load(info["connection_file"])["curve_publickey"] == keys
        kc2 = _curve_client(info["connection_file"])
        try:
            assert "across restarts" in _output(kc2, "print(kept)")
        finally:
            close_client(kc2)
    finally:
        second.stop()
