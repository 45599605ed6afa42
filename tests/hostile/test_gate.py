"""What gets into a session's sockets at all: kenneld's ZAP handler (the gate, src/gate.c)
decides every handshake. --max-clients: each socket admits that many connections."""
import concurrent.futures
import json
import os
import pwd
import socket
import struct
import subprocess
import sys
import time

import pytest
import zmq

from kennel_hostile import Client, assert_healthy

MAX_CLIENTS_4 = ("--max-clients", "4")


def _joined(sock, endpoint, wait):
    """Connect sock; wait: until its handshake is over (admitted), or fail. The gate counts
    connections still in their handshake, so of peers that connect at once any may be the
    one past --max-clients: the test's are let in one by one."""
    mon = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED) if wait else None
    sock.connect(endpoint)
    if mon is not None:
        try:
            assert mon.poll(20000), f"{endpoint}: no handshake within 20 s"
        finally:
            sock.disable_monitor()
            mon.close(0)
    return sock


def _dealer(kenneld, client, wait=True):
    s = kenneld.ctx.socket(zmq.DEALER)
    s.linger = 0
    return _joined(s, f"tcp://{client.conn['ip']}:{client.conn['shell_port']}", wait)


def _kernel_info(client, sock, timeout):
    """Send kernel_info_request on sock (a DEALER to shell); its reply, or None."""
    msg = client.session.send(sock, "kernel_info_request", {})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not sock.poll(max(1, int((deadline - time.monotonic()) * 1000))):
            return None
        _, frames = client.session.feed_identities(sock.recv_multipart())
        reply = client.session.deserialize(frames)
        if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
            return reply
    return None


def _subscriber(kenneld, client, wait=True):
    s = kenneld.ctx.socket(zmq.SUB)
    s.linger = 0
    s.setsockopt(zmq.SUBSCRIBE, b"")
    return _joined(s, f"tcp://{client.conn['ip']}:{client.conn['iopub_port']}", wait)


def _streams(client, sock, text, timeout):
    """Whether sock (a SUB of iopub) gets a stream message carrying text within timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not sock.poll(max(1, int((deadline - time.monotonic()) * 1000))):
            return False
        _, frames = client.session.feed_identities(sock.recv_multipart())
        m = client.session.deserialize(frames)
        if m["header"]["msg_type"] == "stream" and text in m["content"]["text"]:
            return True
    return False


@pytest.mark.parametrize("kenneld", [MAX_CLIENTS_4], indirect=True)
def test_a_socket_past_max_clients_refuses_the_next_connection(kenneld, client):
    """client holds one connection on each socket; three more on shell and iopub fill them.
    The fifth on each gets nothing: no reply, no output. The session's clients still get
    theirs, another session's clients are not counted against it, and once a place is free
    a new client gets in."""
    reply = kenneld.call("create_request", {"name": "bystander"})
    assert reply["status"] == "ok", reply
    with open(reply["session"]["connection_file"]) as f:
        bystander = Client(kenneld.ctx, json.load(f))
    socks = []
    try:
        shells = [_dealer(kenneld, client) for _ in range(3)]
        subs = [_subscriber(kenneld, client) for _ in range(3)]
        socks += shells + subs
        for s in shells:
            assert _kernel_info(client, s, 20) is not None, "a client within the cap got no reply"
        late_shell = _dealer(kenneld, client, wait=False)
        late_sub = _subscriber(kenneld, client, wait=False)
        socks += [late_shell, late_sub]
        client.session.send(late_shell, "kernel_info_request", {})
        time.sleep(1)  # the subscriptions are recorded
        r = client.execute("print('within the cap')")
        assert r is not None and r["content"]["status"] == "ok", r
        assert _streams(client, subs[0], "within the cap", 10), "a subscriber within the cap"
        assert not _streams(client, late_sub, "within the cap", 2), \
            "a subscriber past --max-clients read the session's output"
        assert not late_shell.poll(2000), "a client past --max-clients got a reply"
        info = kenneld.call("info_request", {"session": "victim"})["session"]
        assert info["clients_refused"] >= 2, info
        assert info["connections"]["shell"] >= 4 and info["connections"]["iopub"] >= 4, info
        assert_healthy(client, kenneld, "1 + 1")
        # Another session's sockets count their own clients.
        assert bystander.request("shell", "kernel_info_request", timeout=10) is not None
        by_info = kenneld.call("info_request", {"session": "bystander"})["session"]
        assert by_info["clients_refused"] == 0, by_info
        # A place frees, and the next client gets in. (The refused one does not retry:
        # libzmq ends a socket's connection for good once the handshake is refused.)
        shells[0].close()
        socks.remove(shells[0])
        deadline = time.monotonic() + 20
        got = None
        while got is None and time.monotonic() < deadline:
            s = _dealer(kenneld, client, wait=False)
            socks.append(s)
            got = _kernel_info(client, s, 2)
        assert got is not None, "no client got in once a place was free"
        assert kenneld.call("stats_request")["limits"]["max_clients"] == 4
    finally:
        for s in socks:
            s.close()
        bystander.close()


# Run as another user: subscribe to iopub and ask shell for kernel_info, with the session's
# key (as if it had leaked); print what came, as JSON, after `wait` seconds.
_INTRUDER = r"""
import json, sys, time, zmq
from jupyter_client.session import Session
conn = json.loads(sys.argv[1])
def ep(name):
    if conn["transport"] == "ipc":
        return f"ipc://{conn['ip']}-{conn[name + '_port']}"
    return f"tcp://{conn['ip']}:{conn[name + '_port']}"
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB); sub.linger = 0; sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(ep("iopub"))
shell = ctx.socket(zmq.DEALER); shell.linger = 0
shell.connect(ep("shell"))
session = Session(key=conn["key"].encode(), signature_scheme="hmac-sha256")
got = {"iopub": 0, "shell": 0}
poller = zmq.Poller(); poller.register(sub, zmq.POLLIN); poller.register(shell, zmq.POLLIN)
def take(until):
    while time.monotonic() < until:
        for s, _ in poller.poll(100):
            s.recv_multipart()
            got["iopub" if s is sub else "shell"] += 1
start = time.monotonic()
take(start + 0.5)  # the subscription joins (or is refused) before the request's status
shell.sndtimeo = 0  # refused, the DEALER has no peer left to queue for: a send would block
try:
    session.send(shell, "kernel_info_request", {})
except zmq.Again:
    pass
print("ready", flush=True)
take(start + float(sys.argv[2]))
print(json.dumps(got), flush=True)
"""


def test_another_user_can_neither_subscribe_nor_connect(kenneld, client):
    """Without CURVE, a session's sockets admit only kenneld's user and root: a process of
    another user (nobody), even holding the HMAC key, reads nothing on iopub and gets no
    reply on shell, while the owner's client runs a cell that prints. The same program as
    root gets both (so the test can fail)."""
    results = {as_nobody: _what_it_got(client, "nobody" if as_nobody else None,
                                       "print('the owner\\'s secret')")
               for as_nobody in (True, False)}
    assert results[True] == {"iopub": 0, "shell": 0}, results
    assert results[False]["iopub"] > 0 and results[False]["shell"] > 0, results
    # And kenneld says why, once, so that a gateway run as a user not admitted is not a mystery.
    with open(kenneld.log_path, errors="replace") as f:
        said = f.read()
    nobody = pwd.getpwnam("nobody").pw_uid
    assert said.count(f"connections of uid {nobody} to sessions are cut") == 1, said[-2000:]
    info = kenneld.call("info_request", {"session": "victim"})["session"]
    assert info["clients_denied"] >= 2, info
    assert_healthy(client, kenneld, "1 + 1")


@pytest.mark.parametrize("kenneld", [("--admit-user", "nobody")], indirect=True)
def test_an_admitted_user_gets_in_and_another_does_not(kenneld, client):
    """kenneld --admit-user nobody (kennel-gateway's unprivileged user) lets nobody's
    connections in, as the owner's; a third user (the test's own, made for it) stays out."""
    other = "kennel-gate-test"
    made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                           "/usr/sbin/nologin", other], capture_output=True).returncode == 0
    try:
        got = {user: _what_it_got(client, user, "print('for the admitted')")
               for user in ("nobody", other)}
        assert got["nobody"]["iopub"] > 0 and got["nobody"]["shell"] > 0, got
        assert got[other] == {"iopub": 0, "shell": 0}, got
    finally:
        if made:
            subprocess.run(["userdel", other], capture_output=True)
    assert_healthy(client, kenneld, "1 + 1")


def _intruder(conn, user, seconds):
    """_INTRUDER run as user (None: as the test, root) on the session conn names."""
    prefix = ["runuser", "-u", user, "--"] if user else []
    return subprocess.Popen([*prefix, "/usr/bin/python3", "-c", _INTRUDER, json.dumps(conn),
                             str(seconds)], stdout=subprocess.PIPE, text=True, cwd="/")


def _what_it_got(client, user, code):
    """What _INTRUDER, run as user for 4 s, got of the session while client ran code:
    {"iopub": n, "shell": n}."""
    p = _intruder(client.conn, user, 4)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(1)  # its sockets have had their chance to join
        r = client.execute(code)
        assert r is not None and r["content"]["status"] == "ok", r
        out, _ = p.communicate(timeout=20)
        return json.loads(out.strip().splitlines()[-1])
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.parametrize("kenneld", [("--transport", "ipc")], indirect=True)
def test_ipc_sockets_admit_only_the_owner_even_when_their_files_are_open(kenneld):
    """On ipc the 0700 state directory and the sockets' modes keep other users out; the
    gate checks the peer's uid too (SO_PEERCRED), so loosening those modes lets no one in.
    Here they are opened to everyone: nobody connects and gets nothing, while root's
    identical client, at the same time, gets its reply and the status messages."""
    reply = kenneld.call("create_request", {"name": "victim"})
    assert reply["status"] == "ok", reply
    path = reply["session"]["connection_file"]
    with open(path) as f:
        conn = json.load(f)
    assert conn["transport"] == "ipc"
    deadline = time.monotonic() + 60  # its kernel is up: kernel_info is answered at once
    while kenneld.call("info_request", {"session": "victim"})["session"]["state"] != "idle":
        assert time.monotonic() < deadline, "the session never became idle"
        time.sleep(0.1)
    d = os.path.dirname(path)
    top = os.path.dirname(os.path.dirname(kenneld.state_dir))  # above the test's own directory
    while d != top:  # the session's directory up to the test's (mkdtemp's 0700)
        os.chmod(d, 0o711)
        d = os.path.dirname(d)
    for name in ("shell", "iopub", "stdin", "control", "hb"):
        os.chmod(f"{conn['ip']}-{conn[name + '_port']}", 0o777)
    procs = []
    try:
        nobody = _intruder(conn, "nobody", 8)
        procs.append(nobody)
        assert nobody.stdout.readline().strip() == "ready"
        time.sleep(1)
        root = _intruder(conn, None, 5)
        procs.append(root)
        assert root.stdout.readline().strip() == "ready"
        got = {}
        for who, p in (("root", root), ("nobody", nobody)):
            out, _ = p.communicate(timeout=20)
            got[who] = json.loads(out.strip().splitlines()[-1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert got["nobody"] == {"iopub": 0, "shell": 0}, got
    assert got["root"]["iopub"] > 0 and got["root"]["shell"] > 0, got
    info = kenneld.call("info_request", {"session": "victim"})["session"]
    assert info["clients_denied"] >= 2, info


def _peak_rss_from_now(pid):
    """Start pid's peak RSS again from its current RSS (clear_refs 5); returns it (bytes)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
    return _peak_rss(pid)


def _peak_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("VmHWM:"))


def _greeting(mechanism):
    return (b"\xff" + b"\0" * 8 + b"\x7f" + bytes([3, 0]) + mechanism.ljust(20, b"\0")
            + b"\0" * 32)


def _frame(body_len, command=False, more=False):
    """A ZMTP frame's header for a body of body_len bytes (the body follows)."""
    flags = (0x04 if command else 0) | (0x01 if more else 0)
    return bytes([flags | 0x02]) + struct.pack(">Q", body_len)


def _flood_one(addr, kind, budget):
    """One unauthenticated peer: connect to addr and send, as kind says, up to budget bytes.
    How many bytes went before kenneld hung up (or the budget ran out)."""
    sent = 0
    try:
        s = socket.create_connection(addr, timeout=10)
    except OSError:
        return 0
    try:
        if kind == "garbage":
            chunk = os.urandom(64 << 10)
            while sent < budget:
                s.sendall(chunk)
                sent += len(chunk)
            return sent
        s.sendall(_greeting(b"NULL" if kind == "null" else b"CURVE"))
        got = b""
        while len(got) < 64:  # libzmq drops a peer that sends on before its greeting is read
            more = s.recv(64 - len(got))
            if not more:
                return sent
            got += more
        if kind == "null":  # as a DEALER would, then one message of endless frames
            s.sendall(bytes([0x04, 27]) + b"\x05READY\x0bSocket-Type" + struct.pack(">I", 6)
                      + b"DEALER")
            header = _frame(64 << 10, more=True)
        else:  # a HELLO command as large as kenneld takes a frame
            header = _frame(budget - 9, command=True)
            s.sendall(header)
            header = b""
        chunk = header + b"\0" * (64 << 10)
        while sent < budget:
            s.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass
    finally:
        s.close()
    return sent


@pytest.mark.parametrize("kenneld", [("--curve", "--max-message", "8M", "--max-clients", "8")],
                         indirect=True)
def test_nothing_before_authentication(kenneld):
    """With CURVE, a peer without the session's keys gets nothing in: garbage and a NULL
    greeting are dropped at once, the message of endless frames that made kenneld hold 2 GiB
    without CURVE (test_a_message_that_never_ends_is_cut_at_max_memory) never starts, and a
    CURVE HELLO as large as a frame may be (--max-message) is held only while it comes.
    kenneld's peak RSS stays within what --max-clients connections of one frame each can
    hold, the session's own client and another session's client keep their connections and
    their answers."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "clients"))
    import kennel_curve
    clients, paths = {}, {}
    try:
        for name in ("victim", "bystander"):
            reply = kenneld.call("create_request", {"name": name})
            assert reply["status"] == "ok", reply
            path = paths[name] = reply["session"]["connection_file"]
            kc = kennel_curve.client(path)
            clients[name] = kc
            kc.wait_for_ready(timeout=20)
        conn = kennel_curve.load(paths["victim"])
        before = {n: kenneld.call("info_request", {"session": n})["session"]["connections"]
                  for n in clients}
        pid = kenneld.proc.pid
        base = _peak_rss_from_now(pid)
        ports = [conn[f"{c}_port"] for c in ("shell", "control", "stdin", "iopub", "hb")]
        sent = {}
        for kind, budget in (("garbage", 4 << 20), ("null", 256 << 20), ("curve", 8 << 20)):
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                jobs = [pool.submit(_flood_one, (conn["ip"], p), kind, budget)
                        for p in ports for _ in range(4)]
                sent[kind] = [j.result(timeout=120) for j in jobs]
        grown = _peak_rss(pid) - base
        # An endless message needs a finished handshake: not one got a few MiB in.
        assert max(sent["null"]) < 16 << 20, sent["null"]
        # One frame of at most --max-message per connection, 4 connections on each of the
        # three sockets that take frames that large: 96 MiB, and libzmq's own slack.
        assert grown < (3 * 4 * 8 << 20) + (64 << 20), f"peak RSS grew by {grown >> 20} MiB"
        for name, kc in clients.items():
            r = kc.execute_interactive("print('still here')", timeout=20)
            assert r["content"]["status"] == "ok", r["content"]
        after = {n: kenneld.call("info_request", {"session": n})["session"]["connections"]
                 for n in clients}
        # Nobody's client was cut or reconnected. (Not the heartbeat: jupyter_client makes
        # its heartbeat socket anew whenever a beat is late, which a loaded machine does.)
        for conns in (before, after):
            for c in conns.values():
                c.pop("hb")
        assert after == before, (before, after)
        with open(kenneld.log_path, "rb") as f:
            assert b"past --max-memory" not in f.read()
    finally:
        for kc in clients.values():
            kc.stop_channels()


@pytest.mark.parametrize("kenneld", [("--curve", "--max-clients", "2")], indirect=True)
def test_a_curve_sessions_sockets_past_max_clients_refuse_too(kenneld):
    """On a CURVE session the gate counts only when the connections admitted since its last
    count could have reached --max-clients (a count walks the kernel's table): the third
    client of shell, holding the keys, is refused all the same, and the first still runs
    cells."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "clients"))
    import kennel_curve
    reply = kenneld.call("create_request", {"name": "victim"})
    assert reply["status"] == "ok", reply
    path = reply["session"]["connection_file"]
    conn = kennel_curve.load(path)
    kc = kennel_curve.client(path)
    socks = []
    try:
        kc.wait_for_ready(timeout=20)
        session = kc.session
        for expect in (True, False):
            s = kennel_curve.curve_socket(kenneld.ctx, zmq.DEALER, conn, "shell")
            socks.append(s)
            msg = session.send(s, "kernel_info_request", {})
            got = s.poll(5000 if expect else 2000)
            assert bool(got) == expect, f"client {len(socks) + 1} of shell: reply {bool(got)}"
            if got:
                _, frames = session.feed_identities(s.recv_multipart())
                assert session.deserialize(frames)["parent_header"]["msg_id"] == \
                    msg["header"]["msg_id"]
        info = kenneld.call("info_request", {"session": "victim"})["session"]
        assert info["clients_refused"] >= 1 and info["curve"], info
        r = kc.execute_interactive("print('still here')", timeout=20)
        assert r["content"]["status"] == "ok", r["content"]
    finally:
        for s in socks:
            s.close()
        kc.stop_channels()
