"""Hostile input on every socket kenneld serves: garbage, forged and replayed messages,
truncated and oversized ones, floods, and a kernel that writes garbage into its own pipe.
Each test ends by checking that the session still answers and kept its state."""
import contextlib
import ctypes
import ctypes.util
import hashlib
import hmac
import json
import os
import socket
import struct
import threading
import time

import pytest
import zmq
from jupyter_client.session import Session

from kennel_hostile import Client, assert_healthy
from large_result import MAKE_LARGE_RESULT, WRITE_LARGE_RESULT


def _set_marker(client):
    r = client.execute("kennel_marker = 1")
    assert r["content"]["status"] == "ok"


def test_garbage_frames_on_every_socket(kenneld, client):
    _set_marker(client)
    junk = [[b""], [b"\xff" * 64], [os.urandom(512) for _ in range(8)],
            [b"<IDS|MSG>"], [b"<IDS|MSG>", b"sig", b"{", b"}", b"[", b"]"],
            [b"x"] * 200]
    for name in ("shell", "control", "stdin"):
        for frames in junk:
            client.sockets[name].send_multipart(frames)
    # The heartbeat echoes whatever it gets; garbage included.
    client.sockets["hb"].send(b"\x00garbage")
    assert client.sockets["hb"].poll(5000)
    assert client.sockets["hb"].recv() == b"\x00garbage"
    assert_healthy(client, kenneld)


def test_a_message_of_countless_frames_is_dropped_as_it_is_read(kenneld, client):
    """No key needed: 500,000 empty frames in one message to shell, control and the manager.
    kenneld reads past its frame limit without keeping the frames; it once held them all
    (~460 bytes apiece) before counting."""
    _set_marker(client)
    pid = kenneld.proc.pid
    before = _peak_rss_from_now(pid)
    frames = [b""] * 500_000
    for sock in (client.sockets["shell"], client.sockets["control"], kenneld.mgr):
        sock.send_multipart(frames)
    assert_healthy(client, kenneld)
    assert kenneld.call("list_request")["status"] == "ok"
    grown = _peak_rss(pid) - before
    assert grown < 96 << 20, f"kenneld's peak RSS grew by {grown >> 20} MiB"


def test_wrong_key_is_ignored(kenneld, client):
    _set_marker(client)
    forger = Session(key=b"not-the-key", signature_scheme="hmac-sha256")
    msg = forger.send(client.sockets["shell"], "execute_request",
                      {"code": "kennel_marker = 'pwned'", "silent": False})
    assert client.reply_to("shell", msg["header"]["msg_id"], timeout=1) is None
    unsigned = Session(key=b"", signature_scheme="hmac-sha256")
    msg = unsigned.send(client.sockets["shell"], "execute_request", {"code": "kennel_marker = 2"})
    assert client.reply_to("shell", msg["header"]["msg_id"], timeout=1) is None
    assert_healthy(client, kenneld)
    r = client.execute("assert kennel_marker == 1")
    assert r["content"]["status"] == "ok", r["content"]


def test_a_header_over_64_KiB_is_refused(kenneld, client):
    """A request's header is the parent header of every message the request makes, so kenneld
    copies and signs it once per status, line of output and reply: a signed request with a
    60 MiB header would have cost the loop a copy and an HMAC of 60 MiB per line its cell
    printed. Jupyter's headers are under 1 KiB; past 64 KiB a request is dropped."""
    _set_marker(client)
    content = {"code": "kennel_marker += 1", "silent": False, "store_history": True,
               "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}
    for pad, answered in ((60 << 10, True), (65 << 10, False)):
        msg = client.session.msg("execute_request", content)
        msg["header"]["pad"] = "p" * pad
        client.sockets["shell"].send_multipart(client.session.serialize(msg))
        r = client.reply_to("shell", msg["header"]["msg_id"], timeout=5 if answered else 1)
        assert (r is not None) == answered, (pad, r)
    assert_healthy(client, kenneld)
    r = client.execute("assert kennel_marker == 2, kennel_marker")
    assert r["content"]["status"] == "ok", r["content"]


def test_replayed_message_runs_once(kenneld, client):
    _set_marker(client)
    msg = client.session.msg("execute_request", {"code": "kennel_marker += 1", "silent": False,
                                                 "store_history": True, "user_expressions": {},
                                                 "allow_stdin": False, "stop_on_error": True})
    frames = client.session.serialize(msg)
    client.sockets["shell"].send_multipart(frames)
    assert client.reply_to("shell", msg["header"]["msg_id"]) is not None
    client.sockets["shell"].send_multipart(frames)  # byte-for-byte replay
    assert client.reply_to("shell", msg["header"]["msg_id"], timeout=1) is None
    r = client.execute("assert kennel_marker == 2, kennel_marker")
    assert r["content"]["status"] == "ok", r["content"]


def test_truncated_and_non_object_messages(kenneld, client):
    _set_marker(client)
    msg = client.session.msg("execute_request", {"code": "kennel_marker = 'truncated'"})
    frames = client.session.serialize(msg)
    client.sockets["shell"].send_multipart(frames[:-1])          # content missing
    client.sockets["shell"].send_multipart(frames[:3])
    # Correctly signed, but the content is a JSON array: refused after the signature check.
    parts = [client.session.pack(msg["header"]), b"{}", b"{}", b"[1]"]
    bad = [b"<IDS|MSG>", client.session.sign(parts), *parts]
    client.sockets["shell"].send_multipart(bad)
    assert client.reply_to("shell", msg["header"]["msg_id"], timeout=1) is None
    assert_healthy(client, kenneld)
    r = client.execute("assert kennel_marker == 1")
    assert r["content"]["status"] == "ok"


@pytest.mark.parametrize("kenneld", [("--max-message", "1M")], indirect=True)
def test_oversized_message_dropped(kenneld, client):
    _set_marker(client)
    big = "x" * (2 << 20)
    msg = client.session.send(client.sockets["shell"], "execute_request", {"code": f"s = '{big}'"})
    assert client.reply_to("shell", msg["header"]["msg_id"], timeout=2) is None
    # libzmq disconnected that peer; a new client of the same session is served.
    c2 = Client(kenneld.ctx, client.conn)
    try:
        assert_healthy(c2, kenneld)
        # Just under the limit is fine.
        r = c2.execute("s = '" + "y" * (900 << 10) + "'; len(s)")
        assert r["content"]["status"] == "ok"
    finally:
        c2.close()


def test_unknown_and_misrouted_types_ignored(kenneld, client):
    _set_marker(client)
    for channel, msg_type in (("shell", "status"), ("control", "execute_request"),
                              ("shell", "interrupt_request"), ("stdin", "input_reply")):
        msg = client.session.send(client.sockets[channel], msg_type, {"code": "kennel_marker = 9"})
        assert client.reply_to(channel, msg["header"]["msg_id"], timeout=0.5) is None, msg_type
    # A request of a type kennel does not serve gets an error reply, not silence (a client
    # would wait for its timeout).
    for channel, msg_type in (("shell", "frobnicate_request"), ("control", "usage_request"),
                              ("control", "debug_request")):
        msg = client.session.send(client.sockets[channel], msg_type, {"code": "kennel_marker = 9"})
        reply = client.reply_to(channel, msg["header"]["msg_id"], timeout=5)
        assert reply["msg_type"] == msg_type.replace("_request", "_reply")
        assert reply["content"]["ename"] == "UnknownMessageType", reply["content"]
    assert_healthy(client, kenneld)
    r = client.execute("assert kennel_marker == 1")
    assert r["content"]["status"] == "ok"


@pytest.mark.parametrize("kenneld", [("--max-queued", "4")], indirect=True)
def test_request_flood_hits_queue_limit(kenneld, client):
    _set_marker(client)
    first = client.session.send(client.sockets["shell"], "execute_request",
                                {"code": "import time; time.sleep(1)", "silent": False})
    time.sleep(0.6)  # the refusals come late in the first cell
    ids = [client.session.send(client.sockets["shell"], "execute_request",
                               {"code": "kennel_marker += 1", "silent": False})["header"]["msg_id"]
           for _ in range(12)]
    replies, metadata = {}, {}
    deadline = time.monotonic() + 20
    while len(replies) < 13 and time.monotonic() < deadline:
        if client.sockets["shell"].poll(1000):
            _, frames = client.session.feed_identities(client.sockets["shell"].recv_multipart())
            m = client.session.deserialize(frames)
            replies[m["parent_header"]["msg_id"]] = m["content"]
            metadata[m["parent_header"]["msg_id"]] = m["metadata"]
    assert replies[first["header"]["msg_id"]]["status"] == "ok"
    # The refusals, made while the first cell ran, left its clock alone.
    assert metadata[first["header"]["msg_id"]]["metrics"]["wall_ms"] >= 900
    statuses = [replies[i]["status"] for i in ids]
    refused = [replies[i] for i in ids if replies[i]["status"] == "error"]
    assert statuses.count("ok") == 4, statuses
    assert len(refused) == 8 and all(r["ename"] == "QueueFull" for r in refused)
    r = client.execute("assert kennel_marker == 5, kennel_marker")
    assert r["content"]["status"] == "ok", r["content"]


@pytest.mark.quiet
def test_garbage_flood_does_not_starve_others(kenneld, client):
    _set_marker(client)
    other = kenneld.call("create_request", {"name": "bystander"})
    with open(other["session"]["connection_file"]) as f:
        c2 = Client(kenneld.ctx, json.load(f))
    try:
        assert c2.request("shell", "kernel_info_request", timeout=20) is not None
        flood = kenneld.ctx.socket(zmq.DEALER)
        flood.linger = 0
        flood.sndhwm = 0
        flood.connect(f"tcp://127.0.0.1:{client.conn['shell_port']}")
        for _ in range(20000):
            flood.send_multipart([b"<IDS|MSG>", b"0" * 64, b"{}", b"{}", b"{}", b"{}"])
        t = time.monotonic()
        assert c2.request("control", "kernel_info_request", timeout=5) is not None
        assert time.monotonic() - t < 1.0
        flood.close()
        assert_healthy(client, kenneld)
    finally:
        c2.close()


def _flood_unsigned(kenneld, conn, stop):
    """Send 60 MiB messages with a wrong signature (no key needed) to conn's shell as fast as
    kenneld takes them, until stop is set."""
    sock = kenneld.ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.sndhwm = 2
    sock.connect(f"tcp://{conn['ip']}:{conn['shell_port']}")
    junk = [b"<IDS|MSG>", b"0" * 64, b"{}", b"{}", b"{}", b"x" * (60 << 20)]
    try:
        while not stop.is_set():
            if sock.poll(100, zmq.POLLOUT):
                sock.send_multipart(junk, copy=False)
    finally:
        sock.close()


def _bystander_cells(bystander, seconds):
    """Run cells in bystander, one after another, for that many seconds: their round trips."""
    rtts = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.monotonic()
        r = bystander.execute("x += 1")
        assert r is not None and r["content"]["status"] == "ok", r and r["content"]
        rtts.append(time.monotonic() - t)
    return rtts


def _hmac_seconds(nbytes):
    """How long libsodium, kenneld's HMAC, takes over nbytes here and now."""
    sodium = ctypes.CDLL(ctypes.util.find_library("sodium"))
    data, key, mac = (ctypes.create_string_buffer(n) for n in (nbytes, 32, 32))
    t = time.perf_counter()
    sodium.crypto_auth_hmacsha256(mac, data, ctypes.c_ulonglong(nbytes), key)
    return time.perf_counter() - t


@pytest.mark.quiet
def test_large_unsigned_messages_hold_up_no_other_session(kenneld, client):
    """No key needed: a message of up to --max-message (64 MiB) costs kenneld the HMAC of its
    JSON parts before its signature is found wrong, 0.1-0.5 s for 60 MiB on this VM. Checked
    whole on kenneld's loop, each held up every other session as long: a bystander's cells
    waited about three times that long under a flood of them. The hash is taken 256 KiB a
    turn, between the other sessions' messages."""
    _set_marker(client)
    other = kenneld.call("create_request", {"name": "bystander"})
    with open(other["session"]["connection_file"]) as f:
        bystander = Client(kenneld.ctx, json.load(f))
    stop = threading.Event()
    flooders = [threading.Thread(target=_flood_unsigned, args=(kenneld, client.conn, stop))
                for _ in range(2)]
    try:
        assert bystander.execute("x = 1") is not None
        stall = min(_hmac_seconds(60 << 20) for _ in range(3))
        assert stall > 0.03, f"an HMAC of 60 MiB takes {stall:.3f} s: the test tests nothing"
        for t in flooders:
            t.start()
        time.sleep(1)  # the flood is under way
        rtts = _bystander_cells(bystander, 3)
    finally:
        stop.set()
        for t in flooders:
            t.join(30)
        bystander.close()
    rtts.sort()
    median = rtts[len(rtts) // 2]
    # Checked whole, a cell of the bystander's waited for three such hashes (~0.5 s); in
    # slices, what it waits for is mostly the CPU the flood takes (its copies and page
    # faults in libzmq's I/O thread and the sender): 40-70 ms here.
    assert median < stall, \
        f"the bystander's cells took {median * 1000:.0f} ms (median of {len(rtts)}) under the " \
        f"flood; one HMAC of its messages takes {stall * 1000:.0f} ms"
    assert_healthy(client, kenneld)


class _SignedFlood:
    """Signed kernel_info_requests of 60 MiB (kenneld answers them itself: no kernel runs),
    sent to a session's shell by run() as fast as kenneld takes them, until stop is set;
    `answered` counts the replies. Their content takes turns between three shapes: one 60
    MiB string of ASCII, one of two-byte characters, and 12 million members
    (`{"":0,"":0,…}`), far past the bound on values, so refused unanswered. Each message
    differs in the last digits of its content, so that the replay guard lets it through:
    each shape has its buffer, made here, beforehand, and written again once libzmq is done
    sending what it held, and the HMAC of everything ahead of those digits is taken once
    per shape and copied. So no step of the flood holds this process's GIL for long: a 60
    MiB concatenation per message did, and slowed the bystander's client, in this same
    process, more than kenneld did."""

    def __init__(self, kenneld, client):
        self.sock = kenneld.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.sndhwm = 2
        conn = client.conn
        self.sock.connect(f"tcp://{conn['ip']}:{conn['shell_port']}")
        session = client.session
        self.head = [session.pack(session.msg_header("kernel_info_request")), b"{}", b"{}"]
        shapes = [(b'{"pad":"', (b"x", 60 << 20), b'","n":"'),
                  (b'{"pad":"', ("\u00e9".encode(), 30 << 20), b'","n":"'),
                  (b"{", (b'"":0,', (60 << 20) // 5), b'"n":"')]
        tail = b'000000000000"}'
        self.signers, self.buffers = [], []
        for pieces in shapes:
            buf = huge_buffer(*pieces, tail)
            signer = hmac.new(conn["key"].encode(), digestmod=hashlib.sha256)
            for part in self.head:
                signer.update(part)
            signer.update(memoryview(buf)[:len(buf) - len(tail)])
            self.signers.append(signer)
            self.buffers.append(buf)
        self.stop = threading.Event()
        self.answered = 0

    def run(self):
        sock, trackers, n = self.sock, [None] * len(self.buffers), 0
        try:
            while not self.stop.is_set():
                while sock.poll(0):
                    sock.recv_multipart()
                    self.answered += 1
                i = n % len(self.buffers)
                if not sock.poll(100, zmq.POLLOUT) or \
                        (trackers[i] is not None and not trackers[i].done):
                    time.sleep(0.01)
                    continue
                n += 1
                tail = b'%012d"}' % n
                self.buffers[i][-len(tail):] = tail
                sig = self.signers[i].copy()
                sig.update(tail)
                trackers[i] = sock.send_multipart(
                    [b"<IDS|MSG>", sig.hexdigest().encode(), *self.head, self.buffers[i]],
                    copy=False, track=True)
        finally:
            sock.close()


@contextlib.contextmanager
def _flood_beside(kenneld, client, bystander_name):
    """A bystander session's raw client, and a _SignedFlood on client's session, whose
    thread the caller starts (start()); the flood is stopped and the bystander closed on the
    way out."""
    other = kenneld.call("create_request", {"name": bystander_name})
    with open(other["session"]["connection_file"]) as f:
        bystander = Client(kenneld.ctx, json.load(f))
    flood = _SignedFlood(kenneld, client)
    flooder = threading.Thread(target=flood.run)
    try:
        yield bystander, flood, flooder.start
    finally:
        flood.stop.set()
        if flooder.is_alive():
            flooder.join(30)
        else:
            flood.sock.close()
        bystander.close()


def huge_buffer(*pieces):
    """One bytearray of the pieces (bytes, or (pattern, count): the pattern count times),
    each page written once. A first write to a page costs ~25 us on this VM kind, nearly all
    of the work: the three 60 MiB shapes the flood sends, made by concatenation (each piece,
    each sum and the last copy a new 60 MiB), took this process 7 s before the test began."""
    size = sum(len(p) if isinstance(p, bytes) else len(p[0]) * p[1] for p in pieces)
    buf, at = bytearray(size), 0
    for p in pieces:
        if isinstance(p, bytes):
            buf[at:at + len(p)] = p
            at += len(p)
            continue
        pattern, count = p
        chunk = memoryview(pattern * max(1, (1 << 20) // len(pattern)))
        end = at + len(pattern) * count
        while at < end:
            n = min(end - at, len(chunk))
            buf[at:at + n] = chunk[:n]
            at += n
    return buf


def _jansson_seconds(nbytes):
    """How long jansson, kenneld's JSON parser, takes here and now to parse an object holding
    one string of nbytes."""
    jansson = ctypes.CDLL(ctypes.util.find_library("jansson"))
    jansson.json_loadb.restype = ctypes.c_void_p
    jansson.json_loadb.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                                   ctypes.c_void_p]
    jansson.json_delete.argtypes = [ctypes.c_void_p]
    text = huge_buffer(b'{"pad":"', (b"x", nbytes), b'"}')
    t = time.perf_counter()
    obj = jansson.json_loadb(ctypes.addressof(ctypes.c_char.from_buffer(text)), len(text), 0,
                             None)
    took = time.perf_counter() - t
    assert obj, "jansson refused the test's JSON"
    jansson.json_delete(obj)
    return took


@pytest.mark.quiet
def test_large_signed_messages_hold_up_no_other_session(kenneld, client):
    """With the key: every JSON part of a signed message, up to --max-message, was parsed
    whole on kenneld's loop, and jansson takes ~1.7 s for a 60 MiB string on this VM: a
    session's own client held up every other session that long per message. kenneld now
    parses a part over 64 KiB shallowly (its members with short keys and values) and passes
    the rest on as checked bytes; what is left on the loop per message is jvalid's one pass,
    ~7 ms for 60 MiB of ASCII, ~13 ms for 60 MiB of two-byte characters once their UTF-8 has
    been checked in slices (~135 ms when checked whole). A part of millions of members is refused as soon as they are
    more than the bound on values allows (the first shallow parse listed every one it left
    out first: 1.2-2.3 s and 200 MiB for such a message)."""
    _set_marker(client)
    log_from = os.path.getsize(kenneld.log_path)
    with _flood_beside(kenneld, client, "bystander-signed") as (bystander, flood, start):
        assert bystander.execute("x = 1") is not None
        parse = min(_jansson_seconds(60 << 20) for _ in range(2))
        assert parse > 0.2, f"jansson parses 60 MiB in {parse:.3f} s: the test tests nothing"
        start()
        time.sleep(1)  # the flood is under way
        rtts = _bystander_cells(bystander, 4)
    # Parsed whole, a message held the loop the whole parse, and the bystander's cell that
    # came meanwhile waited for it (its longest cell: 0.9-1.7 s); now 20-60 ms.
    assert max(rtts) < parse / 2, \
        f"a bystander's cell took {max(rtts) * 1000:.0f} ms under the flood (median " \
        f"{sorted(rtts)[len(rtts) // 2] * 1000:.0f} ms of {len(rtts)}); jansson parses one of " \
        f"its messages in {parse * 1000:.0f} ms"
    assert flood.answered >= 2, f"kenneld answered {flood.answered} of the flood's messages"
    # The flood's backlog in libzmq (up to a thousand of its requests a connection) may pass
    # --max-memory: the guard then cuts the clients of the session whose clients sent the
    # most, not every session's (it once cut the bystander's too, whose cell was lost).
    with open(kenneld.log_path, "rb") as f:
        assert b"cut all" not in f.read()[log_from:], "the guard cut every session's clients"
    r = client.request("shell", "kernel_info_request", {})
    assert r is not None and r["content"]["status"] == "ok"
    assert_healthy(client, kenneld)


def _large_results(kenneld, conn, stop, answered):
    """Cells in the session of conn, one after another until stop is set, each with a result
    of 60 MB (tests/large_result.py). Only shell is read (iopub's output, unread, is dropped
    by libzmq)."""
    session = Session(key=conn["key"].encode(), signature_scheme="hmac-sha256")
    sock = kenneld.ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.setsockopt(zmq.IDENTITY, session.bsession)
    sock.connect(f"tcp://{conn['ip']}:{conn['shell_port']}")
    code = MAKE_LARGE_RESULT
    try:
        while not stop.is_set():
            session.send(sock, "execute_request", {
                "code": code, "silent": False, "store_history": False, "user_expressions": {},
                "allow_stdin": False, "stop_on_error": True})
            code = WRITE_LARGE_RESULT
            if sock.poll(30000):
                _, frames = session.feed_identities(sock.recv_multipart())
                reply = session.deserialize(frames)
                assert reply["content"]["status"] == "ok", reply["content"]
                answered[0] += 1
    finally:
        sock.close()


@pytest.mark.quiet
def test_a_kernels_large_results_hold_up_no_other_session(kenneld, client):
    """A cell whose result is 60 MB of text: kenneld reads it from the kernel's pipe in
    slices, checks its JSON in one pass (~7 ms) and passes it on, signed. It signed it on its
    loop, ~150 ms of HMAC here, and every other session waited that long for each such
    result. Messages of 256 KiB or more are signed on a thread of their own; the session's
    messages after one wait for it, and its kernel's pipe is not read meanwhile."""
    _set_marker(client)
    names = ("bystander-results", "large-results")
    conns = []
    for name in names:
        created = kenneld.call("create_request", {"name": name})
        assert created["status"] == "ok", created
        with open(created["session"]["connection_file"]) as f:
            conns.append(json.load(f))
    bystander = Client(kenneld.ctx, conns[0])
    stop, answered = threading.Event(), [0]
    attacker = threading.Thread(target=_large_results, args=(kenneld, conns[1], stop, answered))
    try:
        assert bystander.execute("x = 1") is not None
        stall = min(_hmac_seconds(60 << 20) for _ in range(3))
        assert stall > 0.06, f"an HMAC of 60 MiB takes {stall:.3f} s: the test tests nothing"
        attacker.start()
        deadline = time.monotonic() + 30
        while answered[0] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)  # the results are under way
        rtts = _bystander_cells(bystander, 4)
        made = answered[0]
    finally:
        stop.set()
        attacker.join(60)
        bystander.close()
    assert made >= 3, f"only {made} cells with a large result ran"
    # Signed on the loop, a bystander's cell that came during a signing waited for all of it:
    # its longest cell took 180-270 ms here (the HMAC alone: 160-210 ms), and the loop was
    # held for a signing a good part of the time (each result's), so many of the bystander's
    # cells waited; now ~20 ms. (Not half the HMAC: the thread signing takes one
    # of 2 cores from the others meanwhile.) At most two cells past the bound, not none: of
    # ~1000 cells one once took 134 ms in `make check`, a scheduling hiccup on two cores;
    # signing on the loop would hold up a share of them (each result's signing, ~1 s apart),
    # some tens of cells.
    slow = sorted(t for t in rtts if t >= stall * 3 / 4)
    assert len(slow) <= 2, \
        f"{len(slow)} of a bystander's {len(rtts)} cells took {stall * 3 / 4 * 1000:.0f} ms or " \
        f"more beside cells with 60 MB results (the longest {slow[-1] * 1000:.0f} ms, median " \
        f"{sorted(rtts)[len(rtts) // 2] * 1000:.0f} ms); one HMAC of such a result takes " \
        f"{stall * 1000:.0f} ms"
    for name in names:
        assert kenneld.call("end_request", {"session": name})["status"] == "ok"
    assert_healthy(client, kenneld)


def _frame(*parts):
    body = struct.pack(">I", len(parts)) + b"".join(struct.pack(">I", len(p)) + p for p in parts)
    return struct.pack(">I", len(body)) + body


@pytest.mark.parametrize("payload", [
    b"\xff" * 64,                                     # garbage
    struct.pack(">I", 0xFFFFFFF0),                    # a 4 GiB frame announced
    _frame(b'{"op":"iopub","msg_type":"status"}', b"{}", b'{"execution_state":"idle"}'),
    _frame(b'{"op":"reply","msg_type":"execute_reply","parent_msg_id":"forged"}', b"{}", b"{}"),
    _frame(b'{"op":"iopub","msg_type":"stream"}', b"{}", b"[not json"),
    _frame(b'{"op":"iopub","msg_type":"stream"}', b"{}", b'{"name":"stdout","text":"x","n":0\x00}'),
    _frame(b'{"op":"iopub","msg_type":"stream"}', b"{}", b'{"name":"stdout","text":"\xed\xa0\x80"}'),
    # An op header is parsed whole, so it is bounded (256 KiB): jansson takes ~28 ns a byte.
    _frame(b'{"op":"log","text":"' + b"x" * (1 << 20) + b'"}'),
], ids=["garbage", "huge-length", "status-from-kernel", "forged-reply", "bad-json", "nul-then-junk",
        "bad-utf8", "huge-op-header"])
def test_kernel_writing_garbage_into_its_pipe(kenneld, client, payload):
    """User code can write to the kernel's pipe: kenneld must treat it as hostile, kill that
    kernel, answer the cell with an error, restart, and keep serving."""
    _set_marker(client)
    code = f"import os; os.write(3, {payload!r}); import time; time.sleep(5)"
    t = time.monotonic()
    r = client.execute(code, timeout=15)
    assert r is not None, "no reply after the kernel broke protocol"
    assert r["content"]["status"] == "error"
    assert r["content"]["ename"] == "KernelDied"
    assert "broke the kernel pipe's protocol" in r["content"]["evalue"], r["content"]["evalue"]
    assert time.monotonic() - t < 4
    assert_healthy(client, kenneld, value_code="1 + 1")
    info = kenneld.call("info_request", {"session": "victim"})["session"]
    assert info["restarts"] == 1


@pytest.mark.parametrize("code", [
    "os.dup2(os.open('/dev/null', os.O_WRONLY), 3)",
    "os.close(3)",
], ids=["dup2", "close"])
def test_kernel_replacing_or_closing_its_pipe(kenneld, client, code):
    """A kernel whose fd 3 is no longer its pipe exits at its next frame (here, the print's
    output), rather than send the session's frames to another file and leave kenneld
    waiting until the cell's deadline."""
    _set_marker(client)
    t = time.monotonic()
    r = client.execute(f"import os, time; {code}; print('gone'); time.sleep(30)", timeout=15)
    assert r is not None, "no reply after the kernel dropped its pipe"
    assert r["content"]["ename"] == "KernelDied"
    assert "exited with status 1" in r["content"]["evalue"], r["content"]["evalue"]
    assert time.monotonic() - t < 5
    assert_healthy(client, kenneld, value_code="1 + 1")
    assert kenneld.call("info_request", {"session": "victim"})["session"]["restarts"] == 1


def _peak_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("VmHWM:"))


def _peak_rss_from_now(pid):
    """Start pid's peak RSS again from its current RSS (clear_refs 5); returns it."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
    return _peak_rss(pid)


def test_dense_json_output_costs_kenneld_its_size_not_sixty_times_it(kenneld, client):
    """A cell's output is passed on as the kernel's bytes: 8 MiB of `[{},{},...]` once took
    kenneld ~500 MiB, parsed into objects it never reads."""
    _set_marker(client)
    pid = kenneld.proc.pid
    before = _peak_rss_from_now(pid)
    r = client.execute("from IPython.display import display\n"
                       "display({'application/json': {'x': [{}] * 2_000_000}}, raw=True)",
                       timeout=60)
    assert r["content"]["status"] == "ok", r["content"]
    grown = _peak_rss(pid) - before
    assert grown < 96 << 20, f"kenneld's peak RSS grew by {grown >> 20} MiB"
    assert_healthy(client, kenneld, value_code="1 + 1")


def _drain_until_idle(sock, session, msg_id, timeout=30):
    """Read iopub until the idle status of msg_id; returns the stream bytes read on the way."""
    deadline = time.monotonic() + timeout
    streamed = 0
    while time.monotonic() < deadline:
        if not sock.poll(1000):
            continue
        _, frames = session.feed_identities(sock.recv_multipart())
        msg = session.deserialize(frames)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            streamed += len(msg["content"]["text"])
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return streamed
    raise AssertionError(f"no idle status for {msg_id} on iopub")


def _lazy_peer(kenneld, client, channel):
    """A socket on the session's iopub (subscribed to all) or shell that never reads, and
    holds little itself: what it is sent stays in kenneld."""
    lazy = kenneld.ctx.socket(zmq.SUB if channel == "iopub" else zmq.DEALER)
    lazy.linger = 0
    lazy.rcvhwm = 1
    lazy.rcvbuf = 4096
    if channel == "iopub":
        lazy.setsockopt(zmq.SUBSCRIBE, b"")
    lazy.connect(client.sockets[channel].getsockopt_string(zmq.LAST_ENDPOINT))
    return lazy


UNREAD_4M = ("--max-unread", "4M", "--max-output", "256M")


@pytest.mark.parametrize("kenneld", [UNREAD_4M], indirect=True)
def test_iopub_a_subscriber_does_not_read_holds_its_bound_in_bytes(kenneld, client):
    """libzmq bounds a PUB's queue in messages (10,000 here): a subscriber that stopped
    reading made kenneld hold all its session printed, 96 MiB for this cell and gigabytes
    for a few more. kenneld counts the bytes and drops output past --max-unread; status
    messages still go out, and the session and its readers recover."""
    _set_marker(client)
    lazy = _lazy_peer(kenneld, client, "iopub")
    pid = kenneld.proc.pid
    try:
        time.sleep(0.5)  # the subscription is recorded
        before = _peak_rss_from_now(pid)
        flood = client.session.send(client.sockets["shell"], "execute_request", {
            "code": "for _ in range(96):\n    print('x' * ((1 << 20) - 1))",
            "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True})["header"]["msg_id"]
        reply = client.reply_to("shell", flood, timeout=60)
        assert reply is not None and reply["content"]["status"] == "ok", reply
        grown = _peak_rss(pid) - before
        info = kenneld.call("info_request", {"session": "victim"})["session"]
        assert grown < 40 << 20, f"kenneld's peak RSS grew by {grown >> 20} MiB"
        assert info["unread_dropped"] > 0, info
        assert info["unread_bytes"] <= (4 << 20) + (1 << 20), info
        # The reading client gets what was not dropped, and the cell's idle status.
        streamed = _drain_until_idle(client.sockets["iopub"], client.session, flood)
        assert 0 < streamed < 96 << 20, streamed
    finally:
        lazy.close()
    # With the lagging subscriber gone, what it had not read is freed (once iopub is used
    # again: here, by a request's busy and idle), and output flows whole again.
    deadline = time.monotonic() + 10
    while True:
        assert client.request("control", "kernel_info_request") is not None
        held = kenneld.call("info_request", {"session": "victim"})["session"]["unread_bytes"]
        if held < 1 << 20:
            break
        assert time.monotonic() < deadline, f"iopub still holds {held} bytes"
        time.sleep(0.05)
    after = client.session.send(client.sockets["shell"], "execute_request", {
        "code": "print('y' * (3 << 20))", "silent": False, "store_history": True,
        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})["header"]["msg_id"]
    assert _drain_until_idle(client.sockets["iopub"], client.session, after) == (3 << 20) + 1
    assert_healthy(client, kenneld)


def _zmtp_frame(body, command=False, more=False):
    flags = (0x04 if command else 0) | (0x01 if more else 0)
    if len(body) > 255:
        return bytes([flags | 0x02]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


def _zmtp_greet(sock, socket_type):
    """Speak ZMTP 3.0's greeting and READY on a connected socket, as a peer of socket_type."""
    sock.sendall(b"\xff" + b"\0" * 8 + b"\x7f" + bytes([3, 0]) + b"NULL".ljust(20, b"\0")
                 + b"\0" * 32)
    greeting = b""
    while len(greeting) < 64:  # libzmq drops a peer that sends on before it is read
        got = sock.recv(64 - len(greeting))
        if not got:
            raise ConnectionResetError("no greeting")
        greeting += got
    sock.sendall(_zmtp_frame(b"\x05READY\x0bSocket-Type" + struct.pack(">I", len(socket_type))
                             + socket_type, command=True))


def _subscribe_while_printing(kenneld, client, topics, seconds=2.0):
    """Subscribe to the session's iopub (no key needed), as a ZMTP 3.0 SUB spoken by hand:
    libzmq's own SUB keeps what it subscribes to in a trie it frees recursively, and a topic
    of megabytes overflows the stack of the process that closes it. Meanwhile the session
    prints (a publish makes libzmq take in what came). The growth of kenneld's peak RSS, and
    whether kenneld hung up on the subscriber."""
    pid = kenneld.proc.pid
    before = _peak_rss_from_now(pid)
    sub = socket.create_connection((client.conn["ip"], client.conn["iopub_port"]), timeout=5)
    done, closing, hung_up = threading.Event(), threading.Event(), []

    def send():
        try:
            _zmtp_greet(sub, b"SUB")
            for topic in topics:
                sub.sendall(_zmtp_frame(b"\x01" + topic))
            # All sent: does kenneld hang up (what it publishes is read and dropped)?
            while sub.recv(65536):
                pass
            raise ConnectionResetError("kenneld hung up")
        except (ConnectionResetError, BrokenPipeError):
            if not closing.is_set():  # kenneld's doing, not the shutdown below
                hung_up.append(True)
        except OSError:  # a timeout, or the shutdown below
            pass
        finally:
            done.set()

    sender = threading.Thread(target=send)
    sender.start()
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not done.is_set():
            r = client.execute("for i in range(50): print(i, flush=True)")
            assert r is not None and r["content"]["status"] == "ok", r and r["content"]
    finally:
        closing.set()
        try:
            sub.shutdown(socket.SHUT_RDWR)  # a sender still blocked on a full pipe stops
        except OSError:
            pass  # kenneld hung up first
        sender.join(10)
        sub.close()
    return _peak_rss(pid) - before, bool(hung_up)


def _iopub_flows_again(client):
    """The client's own iopub gets a cell's output again (its SUB reconnects on its own after
    a cut, within a second or so)."""
    deadline = time.monotonic() + 10
    while True:
        msg_id = client.session.send(client.sockets["shell"], "execute_request", {
            "code": "print('back')", "silent": False, "store_history": True,
            "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})["header"]["msg_id"]
        try:
            if _drain_until_idle(client.sockets["iopub"], client.session, msg_id, timeout=1) == 5:
                return
        except AssertionError:
            pass  # its idle went out while the client was reconnecting
        assert time.monotonic() < deadline, "the client's iopub never got output again"


def test_large_subscriptions_to_iopub_are_refused(kenneld, client):
    """No key needed: iopub takes subscriptions from anyone who can connect. libzmq queued up
    to a thousand per connection of up to --max-message (64 MiB) each, then kept each topic
    in a trie of ~30 bytes per byte: four of 8 MiB cost kenneld ~1 GiB. A subscription is at
    most 1 KiB (a larger one drops its connection); Jupyter's clients send 1 byte."""
    _set_marker(client)
    grown, cut = _subscribe_while_printing(kenneld, client,
                                           [b"%d" % i + b"t" * (8 << 20) for i in range(4)])
    assert cut, "kenneld took four subscriptions of 8 MiB"
    assert grown < 64 << 20, f"kenneld's peak RSS grew by {grown >> 20} MiB"
    _iopub_flows_again(client)
    assert_healthy(client, kenneld)


def test_many_subscriptions_to_iopub_are_cut(kenneld, client):
    """No key needed: 20,000 distinct topics of 1000 bytes (20 MB sent) cost kenneld 300-600
    MiB, libzmq's trie keeping each for as long as its subscriber stayed. Past 16 KiB of new
    topics every connection to the session's iopub is cut (libzmq forgets their topics);
    clients reconnect and subscribe again, the session's own client too."""
    _set_marker(client)
    grown, cut = _subscribe_while_printing(kenneld, client,
                                           [b"%05d" % i + b"t" * 995 for i in range(20000)])
    assert cut, "kenneld took 20,000 subscriptions of 1000 bytes"
    assert grown < 64 << 20, f"kenneld's peak RSS grew by {grown >> 20} MiB"
    _iopub_flows_again(client)
    assert_healthy(client, kenneld)


MEMORY_256M = ("--max-memory", "256M")


@pytest.mark.parametrize("kenneld", [MEMORY_256M], indirect=True)
def test_a_message_that_never_ends_is_cut_at_max_memory(kenneld, client):
    """No key needed: libzmq holds a message it receives until its last frame has come, and
    nothing bounds how many frames it has (each is at most --max-message): a peer that never
    sends the last one made kenneld hold all it sent, 2 GiB here. Past --max-memory of heap
    in use kenneld cuts every client connection of every session (libzmq frees what it held
    of them); clients reconnect, the session's own client too."""
    _set_marker(client)
    pid = kenneld.proc.pid
    before = _peak_rss_from_now(pid)
    peer = socket.create_connection((client.conn["ip"], client.conn["shell_port"]), timeout=10)
    frame = _zmtp_frame(b"x" * (64 << 10), more=True)
    sent, hung_up = 0, False
    try:
        _zmtp_greet(peer, b"DEALER")
        while sent < 2 << 30:  # 2 GiB of one message's frames, the last never sent
            peer.sendall(frame)
            sent += len(frame)
    except (ConnectionResetError, BrokenPipeError):
        hung_up = True
    finally:
        peer.close()
    grown = _peak_rss(pid) - before
    assert hung_up, f"kenneld took {sent >> 20} MiB of one message's frames"
    assert grown < 1 << 30, f"kenneld's peak RSS grew by {grown >> 20} MiB"
    assert_healthy(client, kenneld)


MEMORY_64M = ("--max-memory", "64M", "--max-unread", "128M", "--max-output", "256M")


def _open(sock):
    """Whether a connected TCP socket is still open: no EOF and no reset is waiting."""
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


@pytest.mark.quiet
@pytest.mark.own_kenneld
@pytest.mark.parametrize("kenneld", [MEMORY_64M], indirect=True)
def test_past_max_memory_only_the_session_holding_it_loses_its_clients(kenneld, client):
    """What kenneld holds for clients that do not read is counted per session: past
    --max-memory, the clients of the session holding it are cut, not every session's (50
    non-reading clients of one session once cost both sessions' 48 clients their
    connections)."""
    _set_marker(client)
    reply = kenneld.call("create_request", {"name": "bystander"})
    with open(reply["session"]["connection_file"]) as f:
        conn = json.load(f)
    bystander = Client(kenneld.ctx, conn)
    raw = {}
    try:
        assert bystander.request("shell", "kernel_info_request", timeout=20) is not None
        for name, c in (("victim", client.conn), ("bystander", conn)):
            raw[name] = socket.create_connection((c["ip"], c["shell_port"]), timeout=10)
            _zmtp_greet(raw[name], b"DEALER")
        lazy = _lazy_peer(kenneld, client, "iopub")
        time.sleep(0.5)  # the subscription is recorded
        client.session.send(client.sockets["shell"], "execute_request", {
            "code": "for _ in range(100):\n    print('x' * ((1 << 20) - 1))",
            "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True})
        deadline = time.monotonic() + 30
        while _open(raw["victim"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        lazy.close()
        assert not _open(raw["victim"]), "the session holding the memory kept its clients"
        assert _open(raw["bystander"]), "a session holding nothing lost its clients"
        with open(kenneld.log_path, "rb") as f:
            assert b"sessions holding the most of it" in f.read()
        t = time.monotonic()
        assert bystander.request("control", "kernel_info_request", timeout=5) is not None
        assert time.monotonic() - t < 1.0
        assert_healthy(client, kenneld)
    finally:
        for sock in raw.values():
            sock.close()
        bystander.close()


@pytest.mark.quiet
@pytest.mark.own_kenneld
@pytest.mark.parametrize("kenneld", [("--max-memory", "128M")], indirect=True)
def test_past_max_memory_a_flood_of_requests_costs_only_its_own_session_its_clients(kenneld,
                                                                                      client):
    """What libzmq takes in, kenneld cannot count; but it counts what each session's
    clients sent. A keyed flood of 60 MiB requests past --max-memory cuts the flooding
    session's clients, not every session's (it cut the bystander's too, and lost its cell)."""
    _set_marker(client)
    log_from = os.path.getsize(kenneld.log_path)
    with _flood_beside(kenneld, client, "bystander-guard") as (bystander, flood, start):
        assert bystander.execute("x = 1") is not None
        start()
        deadline = time.monotonic() + 20
        cut = b""
        while b"sent the most" not in cut and time.monotonic() < deadline:
            r = bystander.execute("x += 1", timeout=10)
            assert r is not None and r["content"]["status"] == "ok", r and r["content"]
            with open(kenneld.log_path, "rb") as f:
                cut = f.read()[log_from:]
        flood.stop.set()
        assert b"whose clients sent the most" in cut, "the guard never fired"
        assert b"cut all" not in cut
        assert bystander.execute("x += 1", timeout=10) is not None  # its clients were kept
    # (Whether the flooding session's own client, cut, is served again soon is not asked
    # here: in one run of two it was not within 20 s; docs/not-yet.md.)


@pytest.mark.parametrize("kenneld", [UNREAD_4M], indirect=True)
def test_replies_a_client_does_not_read_hold_their_bound_in_bytes(kenneld, client):
    """The same for shell: libzmq keeps 1000 replies for each client that does not read
    them, and an execute_reply's user_expressions can be large (64 of 1 MiB cost kenneld 64
    MiB). kenneld counts what it holds for each client and drops that client's replies past
    --max-unread (see test_one_client_not_reading_replies_never_starves_another)."""
    _set_marker(client)
    lazy = _lazy_peer(kenneld, client, "shell")
    pid = kenneld.proc.pid
    try:
        before = _peak_rss_from_now(pid)
        cells = kenneld.call("info_request", {"session": "victim"})["session"]["cells"]
        for _ in range(64):
            client.session.send(lazy, "execute_request", {
                "code": "", "silent": True, "store_history": False, "allow_stdin": False,
                "user_expressions": {"big": "'x' * (1 << 20)"}, "stop_on_error": False})
        deadline = time.monotonic() + 60

        def finished():
            # All 64 ran (the lazy socket's connection and handshake come first: an idle
            # session seen before they did once passed for "done"), and nothing waits.
            s = kenneld.call("info_request", {"session": "victim"})["session"]
            return s["cells"] >= cells + 64 and not s["queued"] and s["state"] == "idle"

        while not finished():
            assert time.monotonic() < deadline, "the 64 requests did not finish"
            time.sleep(0.1)
        grown = _peak_rss(pid) - before
        info = kenneld.call("info_request", {"session": "victim"})["session"]
        assert grown < 40 << 20, f"kenneld's peak RSS grew by {grown >> 20} MiB"
        assert info["unread_dropped"] > 0 and info["unread_bytes"] <= 5 << 20, info
    finally:
        lazy.close()
    assert_healthy(client, kenneld)


@pytest.mark.parametrize("kenneld", [UNREAD_4M], indirect=True)
def test_one_client_not_reading_replies_never_starves_another(kenneld, client):
    """A bound on what shell holds in all (past it, replies dropped) made a client that
    stopped reading cost every other client its replies: their cells ran, and they waited
    for ever. Replies are bounded per client instead."""
    _set_marker(client)
    lazy = _lazy_peer(kenneld, client, "shell")
    try:
        # 24 MiB of replies (the TCP buffers take a few), then ever smaller ones: a bound
        # for the whole socket up to ~20 MiB would be full to its last 2 KiB.
        for size in [1 << 20] * 24 + [1 << k for k in range(19, 9, -1)]:
            client.session.send(lazy, "execute_request", {
                "code": "", "silent": True, "store_history": False, "allow_stdin": False,
                "user_expressions": {"big": f"'x' * {size}"}, "stop_on_error": False})
        for i in range(5):
            r = client.execute(f"{i} + 1", timeout=30)
            assert r is not None and r["content"]["status"] == "ok", (i, r and r["content"])
    finally:
        lazy.close()
    assert_healthy(client, kenneld)


def test_info_is_answered_while_the_loop_is_slow(kenneld, client):
    """A turn of kenneld's loop can be slow: here two other sessions' shells are flooded with 60
    MiB messages whose signature fails, a tenth of a second of HMAC or more apiece (no key
    needed). An info
    request waits for its memory measure, off the loop; its retry once checked the measure's
    age, found it stale after such a turn, measured again, and so for ever: neither it nor
    any manager request after it was answered. (Seen with a 150 ms delay put in the retry,
    and with such a flood on a review's run; this flood does not always hit the window, and
    since a signature is hashed a slice per turn it slows a turn far less: this test now
    only shows that info is answered under such a flood, not that the retry's fix holds.)"""
    _set_marker(client)
    conns = []
    for name in ("flooded", "flooded-too"):
        flooded = kenneld.call("create_request", {"name": name})
        assert flooded["status"] == "ok", flooded
        with open(flooded["session"]["connection_file"]) as f:
            conns.append(json.load(f))
    stop = threading.Event()
    flooders = [threading.Thread(target=_flood_unsigned, args=(kenneld, c, stop))
                for c in conns * 2]
    for t in flooders:
        t.start()
    try:
        time.sleep(1)  # the flood is under way
        info = kenneld.call("info_request", {"session": "victim"}, timeout=30)
        assert info["status"] == "ok" and info["session"]["pss_bytes"] > 0, info
        assert kenneld.call("stats_request", timeout=30)["status"] == "ok"
    finally:
        stop.set()
        for t in flooders:
            t.join(30)
    assert_healthy(client, kenneld)


def test_a_nul_inside_msg_type_is_dropped(kenneld, client):
    """kenneld (C) and the kernel (Python) would read "execute_request\\0" differently: the
    session was left busy for good. Such a message is dropped like any malformed one."""
    _set_marker(client)
    header = client.session.msg_header("execute_request\x00")
    client.session.send(client.sockets["shell"], "execute_request",
                        {"code": "kennel_marker = 99", "silent": False}, header=header)
    assert_healthy(client, kenneld, value_code="assert kennel_marker == 1, kennel_marker")


def test_manager_abuse(kenneld):
    forger = Session(key=b"wrong", signature_scheme="hmac-sha256")
    forger.send(kenneld.mgr, "create_request", {"name": "forged"})
    kenneld.mgr.send_multipart([b"garbage"])
    for content, ename in (({"name": "../etc"}, "BadRequest"), ({"name": ""}, "BadRequest"),
                           ({"name": "x" * 500}, "BadRequest"), ({"name": 5}, "BadRequest"),
                           ({"name": "a\u0000b"}, "BadRequest"),
                           ({"connection": "tcp://1.2.3.4"}, "BadRequest"),
                           ({"connection": {"transport": "tcp", "ip": "0.0.0.0", "key": "k",
                                            "shell_port": 1, "iopub_port": 2, "stdin_port": 3,
                                            "control_port": 4, "hb_port": 5}}, "BadRequest"),
                           ({"connection": {"transport": "tcp", "ip": "127.0.0.1", "key": "",
                                            "shell_port": 1, "iopub_port": 2, "stdin_port": 3,
                                            "control_port": 4, "hb_port": 5}}, "BadRequest"),
                           # a key cut short at its NUL would be one byte
                           ({"connection": {"transport": "tcp", "ip": "127.0.0.1",
                                            "key": "a\u0000" + "f" * 64,
                                            "shell_port": 1, "iopub_port": 2, "stdin_port": 3,
                                            "control_port": 4, "hb_port": 5}}, "BadRequest")):
        r = kenneld.call("create_request", content)
        assert r["status"] == "error" and r["ename"] == ename, (content, r)
    assert kenneld.call("info_request", {"session": "nope"})["ename"] == "NoSuchSession"
    assert kenneld.call("end_request", {"session": ""})["ename"] == "BadRequest"
    assert kenneld.call("end_request", {"session": "a\u0000b"})["ename"] == "BadRequest"
    assert kenneld.call("frobnicate_request", {})["ename"] == "BadRequest"
    # Every message gets one reply, whatever its type (these once got none).
    for msg_type in ("frobnicate", "create_reply", "x" * 200 + "_request"):
        r = kenneld.request(msg_type, {})
        assert r["msg_type"] == "error_reply" and r["content"]["ename"] == "BadRequest", r
    assert kenneld.call("list_request")["sessions"] == []  # the forged create did nothing


def _pooled_kernel_ready(kenneld, pooled):
    """With pooled, wait (60 s at most: the pool fills at the smallest CPU share, slow on a
    loaded machine) until the pool holds a kernel, so that the next create_request takes it;
    without, there is no pool."""
    if not pooled:
        assert kenneld.call("stats_request")["spawner"].get("pool_ready", 0) == 0
        return
    deadline = time.monotonic() + 60
    while kenneld.call("stats_request")["spawner"].get("pool_ready", 0) < 1:
        assert time.monotonic() < deadline, "the pool made no kernel in 60 s"
        time.sleep(0.05)


@pytest.mark.parametrize("kenneld, pooled", [(("--pool", "0"), False), (("--pool", "1"), True)],
                         indirect=["kenneld"], ids=["fresh", "pooled"])
def test_ipc_endpoints_a_client_names_must_be_free(kenneld, pooled, tmp_path):
    """kenneld binds as root, and libzmq removes what is at an ipc path first: a client
    (with the manager's key) once made it replace any file, or take over a live session's
    endpoints. The same whether the session is made afresh or on a pooled kernel (a pooled
    kernel's session once took the client's paths unchecked, as a restored session's own)."""
    def conn(ip):
        return {"transport": "ipc", "ip": ip, "key": "k" * 16, "signature_scheme": "hmac-sha256",
                "shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4,
                "hb_port": 5}

    victim = tmp_path / "important-3"
    victim.write_text("keep me")
    for content, ename in (({"connection": conn("relative/k")}, "BadRequest"),
                           ({"connection": conn(str(tmp_path / "important"))}, "BadRequest")):
        _pooled_kernel_ready(kenneld, pooled)
        r = kenneld.call("create_request", content)
        assert r["status"] == "error" and r["ename"] == ename, (content, r)
    assert victim.read_text() == "keep me"
    _pooled_kernel_ready(kenneld, pooled)
    first = kenneld.call("create_request", {"name": "ipc-a", "connection": conn(str(tmp_path / "s"))})
    assert first["status"] == "ok", first
    _pooled_kernel_ready(kenneld, pooled)
    r = kenneld.call("create_request", {"name": "ipc-b", "connection": conn(str(tmp_path / "s"))})
    assert r["status"] == "error" and r["ename"] == "AddressInUse", r
    assert (tmp_path / "s-1").exists()
    kenneld.call("end_request", {"session": "ipc-a"})
    # Its socket files go with it (libzmq leaves them): the path is free again.
    deadline = time.monotonic() + 5
    while any((tmp_path / f"s-{i}").exists() for i in range(1, 6)):
        assert time.monotonic() < deadline, sorted(os.listdir(tmp_path))
        time.sleep(0.05)
    assert victim.read_text() == "keep me"


def _file_and_slow_reader(kenneld, name, size):
    """A session `name` whose workspace holds a file `m` of size bytes, and a manager client
    whose side backs up at once (a receive queue of one): what it has not read waits in
    kenneld."""
    assert kenneld.call("create_request", {"name": name})["status"] == "ok"
    kenneld.mgr_session.send(kenneld.mgr, "file_put_request", {"session": name, "path": "m"},
                             buffers=[b"\1" * size])
    assert kenneld.call("file_list_request", {"session": name})["files"], "the put failed"
    slow = kenneld.ctx.socket(zmq.DEALER)
    slow.linger = 0
    slow.rcvhwm = 1
    slow.connect(kenneld.mgr.getsockopt_string(zmq.LAST_ENDPOINT))
    return slow


def test_manager_replies_a_client_does_not_read_are_bounded(kenneld):
    """libzmq's default queue held 1000 replies per client: 32 GB of file_get replies for one
    that never reads. kenneld keeps 8 in libzmq's pipe and at most 8 MiB (or 256 replies)
    more of its own (the next test); the rest are dropped."""
    lazy = _file_and_slow_reader(kenneld, "unread", 1 << 20)
    try:
        for _ in range(40):
            kenneld.mgr_session.send(lazy, "file_get_request", {"session": "unread", "path": "m"})
        time.sleep(1)  # kenneld answers all 40 meanwhile
        got = 0
        while lazy.poll(1000):
            lazy.recv_multipart()
            got += 1
        assert 1 <= got < 40, got
    finally:
        lazy.close()
    assert kenneld.call("info_request", {"session": "unread"})["status"] == "ok"


def test_a_client_that_pipelines_many_requests_gets_every_reply(kenneld):
    """A client may send many manager requests before it reads: kenneld's ROUTER dropped,
    without a word, every reply past its pipe's 8 when the client was slower to take them
    than kenneld to make them (a bench's batch of 10 creates lost one). Now kenneld holds them
    (256 replies or 8 MiB a client) and sends them as the client reads."""
    slow = _file_and_slow_reader(kenneld, "piped", 64 << 10)
    try:
        sent = [kenneld.mgr_session.send(slow, "file_get_request",
                                         {"session": "piped", "path": "m"})["header"]["msg_id"]
                for _ in range(100)]  # 6.4 MiB of replies: far past the pipe and the buffers
        time.sleep(1)  # kenneld answers all 100 meanwhile
        got = []
        while len(got) < len(sent) and slow.poll(3000):
            _, frames = kenneld.mgr_session.feed_identities(slow.recv_multipart())
            msg = kenneld.mgr_session.deserialize(frames)
            assert msg["content"]["status"] == "ok", msg["content"]
            got.append(msg["parent_header"]["msg_id"])
        assert got == sent, (len(got), len(sent))  # every one, in order
    finally:
        slow.close()
    assert kenneld.call("info_request", {"session": "piped"})["status"] == "ok"


@pytest.mark.own_kenneld  # a fresh one: no session directory yet, not even a pooled kernel's
def test_port_already_in_use(kenneld):
    busy = zmq.Context.instance().socket(zmq.ROUTER)
    port = busy.bind_to_random_port("tcp://127.0.0.1")
    try:
        conn = {"transport": "tcp", "ip": "127.0.0.1", "key": "k", "signature_scheme": "hmac-sha256",
                "shell_port": port, "iopub_port": port + 1, "stdin_port": port + 2,
                "control_port": port + 3, "hb_port": port + 4}
        r = kenneld.call("create_request", {"connection": conn})
        assert r["status"] == "error" and r["ename"] == "AddressInUse", r
        assert kenneld.call("list_request")["sessions"] == []
        assert os.listdir(os.path.join(kenneld.state_dir, "sessions")) == []
    finally:
        busy.close(0)


@pytest.mark.parametrize("kenneld", [("--max-sessions", "2")], indirect=True)
def test_session_limit(kenneld):
    assert kenneld.call("create_request", {"name": "a"})["status"] == "ok"
    assert kenneld.call("create_request", {"name": "b"})["status"] == "ok"
    r = kenneld.call("create_request", {"name": "c"})
    assert r["status"] == "error" and r["ename"] == "TooManySessions"
    # Finding an existing name is not a new session.
    assert kenneld.call("create_request", {"name": "a"})["created"] is False
    assert kenneld.call("end_request", {"session": "b"})["status"] == "ok"
    assert kenneld.call("create_request", {"name": "c"})["status"] == "ok"


def test_sandbox_failure_reaches_the_client_with_its_step(kenneld, client):
    """The sandbox fails closed: when a kernel cannot be sealed, no user code runs and the
    client's reply names the step and errno; kenneld serves on."""
    info = kenneld.call("info_request", {"session": "victim"})["session"]
    workspace = os.path.join(os.path.dirname(info["connection_file"]), "workspace")
    os.rename(workspace, workspace + ".gone")  # the next kernel cannot bind it
    try:
        r = client.request("control", "shutdown_request", {"restart": True})
        assert r["content"]["restart"] is True
        # The restart has failed before the request comes (it waited for ever so, while
        # one that came first was answered).
        deadline = time.monotonic() + 20
        while kenneld.call("info_request", {"session": "victim"})["session"]["state"] != "dead":
            assert time.monotonic() < deadline, "the restart did not fail"
            time.sleep(0.05)
        reply = client.execute("print('ran')", timeout=20)
        assert reply is not None, "no reply from a session whose kernel cannot start"
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KernelStartFailed"
        assert "sandbox: open workspace: No such file or directory" in reply["content"]["evalue"]
    finally:
        os.rename(workspace + ".gone", workspace)
    # Put right, the next request starts a kernel again.
    assert_healthy(client, kenneld, value_code="1 + 1")
