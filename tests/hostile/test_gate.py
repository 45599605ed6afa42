"""What gets into a session's sockets at all: kenneld's ZAP handler (the gate, src/gate.c)
decides every handshake. --max-clients: each socket admits that many connections."""
import json
import time

import pytest
import zmq

from kennel_hostile import Client, assert_healthy

MAX_CLIENTS_4 = ("--max-clients", "4")


def _dealer(kenneld, client):
    s = kenneld.ctx.socket(zmq.DEALER)
    s.linger = 0
    s.connect(f"tcp://{client.conn['ip']}:{client.conn['shell_port']}")
    return s


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


def _subscriber(kenneld, client):
    s = kenneld.ctx.socket(zmq.SUB)
    s.linger = 0
    s.setsockopt(zmq.SUBSCRIBE, b"")
    s.connect(f"tcp://{client.conn['ip']}:{client.conn['iopub_port']}")
    return s


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
        late_shell = _dealer(kenneld, client)
        late_sub = _subscriber(kenneld, client)
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
            s = _dealer(kenneld, client)
            socks.append(s)
            got = _kernel_info(client, s, 2)
        assert got is not None, "no client got in once a place was free"
        assert kenneld.call("stats_request")["limits"]["max_clients"] == 4
    finally:
        for s in socks:
            s.close()
        bystander.close()
