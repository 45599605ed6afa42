"""Tenants (kenneld --tenants): users the test makes, each a tenant or no one, use one
kenneld through the tenant manager socket. A tenant lists, reads, attaches to, copies files
of and ends only its own sessions; another's read as no session at all; an operator (root)
sees all; each quota is hit and named; an unknown uid gets no answer; a bad tenants file
stops kenneld at start, saying why."""
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest
import zmq
from jupyter_client.session import Session

from kennel_hostile import ROOT, Client, Kenneld, assert_healthy, stop_checked
from test_gate import _what_it_got

KENNEL = os.path.join(ROOT, "bin", "kennel")
KENNELD = os.path.join(ROOT, "bin", "kenneld")
ALICE, BOB, STRANGER = "kn-tenant-a", "kn-tenant-b", "kn-tenant-x"


def _userdel(name):
    subprocess.run(["userdel", name], capture_output=True)
    subprocess.run(["groupdel", name], capture_output=True)  # if userdel left it


def _useradd(name):
    _userdel(name)  # one a killed run left
    subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--shell",
                    "/usr/sbin/nologin", name], check=True, capture_output=True)


@pytest.fixture(scope="module")
def users():
    for u in (ALICE, BOB, STRANGER):
        _useradd(u)
    try:
        yield
    finally:
        for u in (ALICE, BOB, STRANGER):
            _userdel(u)


def _tenants_file(root, text, mode=0o600):
    path = os.path.join(root, "tenants")
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


@pytest.fixture(scope="module")
def kenneld(users):
    root = tempfile.mkdtemp(prefix="kn-t-", dir="/tmp")
    os.chmod(root, 0o711)  # mkdtemp's 0700 would keep the tenants' users out of it all
    path = _tenants_file(root, f"# two teams\ntenant alice uids={ALICE} sessions=2\n"
                               f"tenant bob uids={BOB} memory=1536M cpu=1.5\n")
    k = Kenneld(f"{root}/state", "--tenants", path, "--pool", "0")
    try:
        yield k
    finally:
        try:
            stop_checked(k)
        finally:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def _clean(kenneld):
    yield
    for s in kenneld.call("list_request")["sessions"]:
        assert kenneld.call("end_request", {"session": s["id"]})["status"] == "ok"


def kennel(user, *args, timeout=60):
    """The kennel CLI run as user on the test's kenneld: (returncode, stdout, stderr)."""
    p = subprocess.run(["runuser", "-u", user, "--", KENNEL, "--state-dir", _STATE[0], *args],
                       capture_output=True, text=True, timeout=timeout, cwd="/")
    return p.returncode, p.stdout, p.stderr


_STATE = [None]


@pytest.fixture(autouse=True)
def _state(kenneld):
    _STATE[0] = kenneld.state_dir


def _ready(kenneld, name):
    deadline = time.monotonic() + 60
    while kenneld.call("info_request", {"session": name})["session"]["state"] != "idle":
        assert time.monotonic() < deadline, "the session never became idle"
        time.sleep(0.1)


def test_a_tenant_sees_and_ends_only_its_own_sessions(kenneld):
    """alice's `kennel new --name work` is alice.work, hers; bob can neither list, read,
    copy files of nor end it (each answered as for no session at all), and makes his own
    "work" beside it. root, an operator, sees both with their tenants."""
    rc, out, err = kennel(ALICE, "new", "--name", "work")
    assert rc == 0, err
    rc, out, err = kennel(BOB, "new", "--name", "work")
    assert rc == 0, err
    listed = {s["name"]: s.get("tenant") for s in kenneld.call("list_request")["sessions"]}
    assert listed == {"alice.work": "alice", "bob.work": "bob"}, listed
    rc, out, err = kennel(ALICE, "ls")
    assert rc == 0 and "alice.work" in out and "bob.work" not in out, (out, err)
    alice_id = kenneld.call("info_request", {"session": "alice.work"})["session"]["id"]
    rc, out, err = kennel(ALICE, "info", "work")
    assert rc == 0 and json.loads(out)["id"] == alice_id, (out, err)
    _ready(kenneld, "alice.work")
    rc, _, err = kennel(ALICE, "exec", "work", "open('note.txt', 'w').write('alice only')")
    assert rc == 0, err
    for name in ("alice.work", alice_id):
        for cmd in (["info", name], ["rm", name], ["files", name], ["get", name, "note.txt",
                                                                     "/dev/null"]):
            rc, out, err = kennel(BOB, *cmd)
            assert rc != 0 and "no session has that id or name" in out + err, (cmd, out, err)
            assert "alice only" not in out + err
    rc, out, err = kennel(BOB, "info", "work")  # his own, by the same short name
    assert rc == 0 and json.loads(out)["name"] == "bob.work", (out, err)
    rc, out, err = kennel(ALICE, "files", "work")
    assert rc == 0 and "note.txt" in out, (out, err)
    rc, out, err = kennel(ALICE, "rm", "work")
    assert rc == 0, err
    assert [s["name"] for s in kenneld.call("list_request")["sessions"]] == ["bob.work"]
    # What an operator (kennel-gateway, say) makes under alice's prefix is alice's.
    r = kenneld.call("create_request", {"name": "alice.ops"})
    assert r["status"] == "ok" and r["session"]["tenant"] == "alice", r
    rc, out, err = kennel(ALICE, "ls")
    assert rc == 0 and "alice.ops" in out and "bob.work" not in out, (out, err)
    rc, out, err = kennel("root", "ls")  # the operator: every session, with its tenant
    assert rc == 0 and "TENANT" in out and "alice.ops" in out and "bob.work" in out, out


def test_a_tenant_naming_another_s_session_is_told_so_not_given_one(kenneld):
    """bob saying alice's session, by her prefixed name or by its id, where a command would
    make a session (`kennel exec`, `new`), is refused: it once made bob.alice.work and a
    session of bob's "named" alice's id, and ran his cell there."""
    rc, _, err = kennel(ALICE, "new", "--name", "work")
    assert rc == 0, err
    alice_id = kenneld.call("info_request", {"session": "alice.work"})["session"]["id"]
    for name, said in (("alice.work", "starts with another tenant's name"),
                       (alice_id, "session id's shape")):
        for cmd in (["exec", name, "1"], ["new", "--name", name]):
            rc, out, err = kennel(BOB, *cmd)
            assert rc != 0 and said in out + err, (cmd, out, err)
    assert [s["name"] for s in kenneld.call("list_request")["sessions"]] == ["alice.work"]
    # His own names with dots are his: bob.x.y, and "x.y" is bob.x.y.
    rc, out, err = kennel(BOB, "new", "--name", "x.y")
    assert rc == 0, err
    assert kenneld.call("info_request", {"session": "bob.x.y"})["session"]["tenant"] == "bob"


def test_connection_files_and_sockets_are_the_tenants_alone(kenneld):
    """alice reads her session's connection file and her client gets its output; bob can
    read neither the file nor, holding a copy of it, anything off the sockets."""
    rc, out, err = kennel(ALICE, "new", "--name", "nb")
    assert rc == 0, err
    info = kenneld.call("info_request", {"session": "alice.nb"})["session"]
    path = info["connection_file"]
    st = os.stat(path)
    assert st.st_mode & 0o777 == 0o640 and st.st_uid == 0, oct(st.st_mode)
    assert subprocess.run(["runuser", "-u", ALICE, "--", "cat", path],
                          capture_output=True).returncode == 0
    p = subprocess.run(["runuser", "-u", BOB, "--", "cat", path], capture_output=True, text=True)
    assert p.returncode != 0 and "Permission denied" in p.stderr, p
    for other in (BOB, STRANGER):
        p = subprocess.run(["runuser", "-u", other, "--", "ls", os.path.dirname(path)],
                           capture_output=True, text=True)
        assert p.returncode != 0, p
    # Nothing else of kenneld's is theirs, alice's included: the state directory is entered,
    # not listed; the session's record, the run records, kenneld.json stay root's.
    state = kenneld.state_dir
    for what in (["ls", state], ["ls", f"{state}/sessions"], ["ls", f"{state}/runs"],
                 ["cat", f"{os.path.dirname(path)}/meta.json"], ["cat", f"{state}/kenneld.json"]):
        p = subprocess.run(["runuser", "-u", ALICE, "--", *what], capture_output=True, text=True)
        assert p.returncode != 0, (what, p.stdout)
    with open(path) as f:
        conn = json.load(f)
    _ready(kenneld, "alice.nb")
    c = Client(kenneld.ctx, conn)
    try:
        assert c.request("shell", "kernel_info_request", timeout=20) is not None
        got = {u: _what_it_got(c, u, "print('alice\\'s secret')") for u in (ALICE, BOB)}
        assert got[ALICE]["iopub"] > 0 and got[ALICE]["shell"] > 0, got
        assert got[BOB] == {"iopub": 0, "shell": 0}, got
        assert_healthy(c, kenneld, "1 + 1")
    finally:
        c.close()


def test_each_quota_is_hit_and_named(kenneld):
    """alice: 2 sessions; bob: 1536 MiB of memory limits and 1.5 CPUs. Each refusal names
    the quota and the numbers; what was refused was not made."""
    for n in ("a", "b"):
        rc, _, err = kennel(ALICE, "new", "--name", n)
        assert rc == 0, err
    rc, out, err = kennel(ALICE, "new", "--name", "c")
    assert rc != 0 and "QuotaExceeded" in out + err, (out, err)
    assert "tenant alice's sessions quota is 2: it has 2 live" in out + err, (out, err)
    # The same session again is no new session: asked for by name, it is found.
    rc, _, err = kennel(ALICE, "new", "--name", "a")
    assert rc == 0, err
    rc, _, err = kennel(BOB, "new", "--name", "one", "--memory", "1G", "--cpu", "0.5")
    assert rc == 0, err
    rc, out, err = kennel(BOB, "new", "--name", "two", "--memory", "1G", "--cpu", "0.5")
    assert rc != 0 and "tenant bob's memory quota is 1536 MiB: its sessions have 1024 MiB, " \
                       "this one asks for 1024 MiB" in out + err, (out, err)
    rc, out, err = kennel(BOB, "new", "--name", "two", "--memory", "512M", "--cpu", "1.5")
    assert rc != 0 and "tenant bob's cpu quota is 1.5 CPUs: its sessions have 0.5, this one " \
                       "asks for 1.5" in out + err, (out, err)
    rc, _, err = kennel(BOB, "new", "--name", "two", "--memory", "512M", "--cpu", "1")
    assert rc == 0, err
    names = sorted(s["name"] for s in kenneld.call("list_request")["sessions"])
    assert names == ["alice.a", "alice.b", "bob.one", "bob.two"], names
    # An operator's session named for a tenant is that tenant's, within its quotas (how
    # kennel-gateway's TENANT.NAME kernels land in kenneld's tenants).
    r = kenneld.call("create_request", {"name": "alice.third"})
    assert r["status"] == "error" and r["ename"] == "QuotaExceeded", r
    rc, out, err = kennel(BOB, "stats")
    assert rc == 0, err
    assert "quotas" in out and '"sessions": 2' in out.replace(" 2,", " 2"), out


def test_a_tenant_forks_only_its_own_sessions_within_its_quota(kenneld):
    """A fork is its source's tenant's new session: alice's `kennel fork work w2` is
    alice.w2, with work's state, and counts against her sessions quota; bob cannot fork
    alice's session (answered as for no session)."""
    rc, _, err = kennel(ALICE, "new", "--name", "work")
    assert rc == 0, err
    _ready(kenneld, "alice.work")
    rc, _, err = kennel(ALICE, "exec", "work", "x = 41")
    assert rc == 0, err
    for cmd in (["new", "--name", "n" * 125], ["fork", "work", "f" * 125]):  # alice. + 125
        rc, out, err = kennel(ALICE, *cmd)
        assert rc != 0 and "with the tenant's prefix, must be at most 128" in out + err, \
            (cmd, out, err)
    rc, out, err = kennel(BOB, "fork", "alice.work", "mine")
    assert rc != 0 and "no session has that id or name" in out + err, (out, err)
    rc, out, err = kennel(ALICE, "fork", "work", "w2")
    assert rc == 0, err
    info = kenneld.call("info_request", {"session": "alice.w2"})["session"]
    assert info["tenant"] == "alice", info
    _ready(kenneld, "alice.w2")
    rc, out, err = kennel(ALICE, "exec", "w2", "print(x + 1)")
    assert rc == 0 and "42" in out, (out, err)
    rc, out, err = kennel(ALICE, "fork", "work", "w3")  # a third: past sessions=2
    assert rc != 0 and "tenant alice's sessions quota is 2: it has 2 live" in out + err, \
        (out, err)
    assert "alice.w3" not in [s["name"] for s in kenneld.call("list_request")["sessions"]]


def test_an_unknown_user_gets_no_answer(kenneld):
    """A user the tenants file does not name is refused by the gate before a frame of its
    is read: the same signed request that alice gets answered gets nothing."""
    with open(os.path.join(kenneld.state_dir, "tenants.json")) as f:
        info = json.load(f)["manager"]
    probe = r"""
import json, os, sys, zmq
from jupyter_client.session import Session
m = json.loads(sys.argv[1])
ctx = zmq.Context(); s = ctx.socket(zmq.DEALER); s.linger = 0; s.connect(m["endpoint"])
s.sndtimeo = 3000  # a refused peer's DEALER may have no pipe left to queue on: send blocks
try:
    Session(key=m["key"].encode(), signature_scheme="hmac-sha256").send(s, "list_request", {})
    print("answered" if s.poll(3000) else "nothing", flush=True)
except zmq.Again:
    print("nothing", flush=True)
os._exit(0)  # no wait in the context's teardown for a socket libzmq still retries
"""
    got = {}
    for u in (ALICE, STRANGER, "nobody"):
        p = subprocess.run(["runuser", "-u", u, "--", "/usr/bin/python3", "-c", probe,
                            json.dumps(info)], capture_output=True, text=True, timeout=30, cwd="/")
        got[u] = p.stdout.strip()
    assert got == {ALICE: "answered", STRANGER: "nothing", "nobody": "nothing"}, got
    # Nor does the operators' socket let them in: kenneld.json is root's alone.
    p = subprocess.run(["runuser", "-u", STRANGER, "--", "cat",
                        os.path.join(kenneld.state_dir, "kenneld.json")], capture_output=True)
    assert p.returncode != 0
    # The CLI says what is wrong: no answer, and why that may be (not "is it running?"),
    # after $KENNEL_CALL_TIMEOUT seconds.
    p = subprocess.run(["runuser", "-u", STRANGER, "--", "env", "KENNEL_CALL_TIMEOUT=2", KENNEL,
                        "--state-dir", _STATE[0], "ls"], capture_output=True, text=True,
                       timeout=30, cwd="/")
    assert p.returncode != 0 and "tenants file does not name" in p.stderr, p


@pytest.mark.parametrize("text, mode, said", [
    ("tenant alice uids=no-such-user-xyz\n", 0o600, "line 1: uids: no such user"),
    ("tenant alice uids=1001\nbogus\n", 0o600, "line 2"),
    ("tenant alice uids=1001 sessions=two\n", 0o600, "sessions must be a number"),
    ("tenant alice uids=1001\n", 0o644, "mode 0600 or 0640 (it is owned by uid 0, mode 0644)"),
])
def test_a_bad_tenants_file_stops_kenneld_at_start(text, mode, said):
    root = tempfile.mkdtemp(prefix="kn-t-", dir="/tmp")
    try:
        path = _tenants_file(root, text, mode)
        p = subprocess.run([KENNELD, "--state-dir", f"{root}/state", "--tenants", path],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2, p
        assert said in p.stderr and path in p.stderr, p.stderr
        assert not os.path.exists(f"{root}/state/kenneld.json")
    finally:
        shutil.rmtree(root, ignore_errors=True)


class _Caller:
    """A manager client of the tenant manager on tcp, with a CURVE pair of its own (None:
    no CURVE at all)."""

    def __init__(self, ctx, info, pair):
        self.s = ctx.socket(zmq.DEALER)
        self.s.linger = 0
        # A refused handshake can leave the DEALER with no peer, where a send would wait for
        # ever (a CI run hung here): a send that cannot go is "nothing came".
        self.s.sndtimeo = 1000
        if pair:
            self.s.curve_serverkey = info["curve_serverkey"].encode()
            self.s.curve_publickey, self.s.curve_secretkey = pair
        self.s.connect(info["endpoint"])
        self.session = Session(key=info["key"].encode(), signature_scheme="hmac-sha256")

    def call(self, msg_type, content=None, timeout=3):
        """The reply's content, or None when nothing came."""
        try:
            sent = self.session.send(self.s, msg_type, content or {})
        except zmq.Again:
            return None
        deadline = time.monotonic() + timeout
        while self.s.poll(max(1, int((deadline - time.monotonic()) * 1000))):
            _, msg = self.session.feed_identities(self.s.recv_multipart())
            msg = self.session.deserialize(msg)
            if msg["parent_header"].get("msg_id") == sent["header"]["msg_id"]:
                return msg["content"]
        return None


def test_on_tcp_a_caller_is_its_curve_key(users):
    """kenneld --curve --tenant-manager tcp://…: alice's key is alice (her own sessions
    only), an operator key sees all, and a wrong key, a forged one and a client without
    CURVE get nothing, while alice's and the operator's connections are answered all
    along; once revoked (gone from the file, kenneld restarted), alice's key gets nothing."""
    alice, admin, wrong = (zmq.curve_keypair() for _ in range(3))
    root = tempfile.mkdtemp(prefix="kn-t-", dir="/tmp")
    path = _tenants_file(root, f"tenant alice keys={alice[0].decode()} sessions=1\n"
                               f"operator keys={admin[0].decode()}\n")
    k = Kenneld(f"{root}/state", "--curve", "--tenants", path, "--tenant-manager",
                "tcp://127.0.0.1:*", "--pool", "0")
    ctx = zmq.Context()
    try:
        with open(os.path.join(k.state_dir, "tenants.json")) as f:
            info = json.load(f)["manager"]
        assert info["endpoint"].startswith("tcp://127.0.0.1:") and info["curve_serverkey"]
        assert os.stat(os.path.join(k.state_dir, "tenants.json")).st_mode & 0o777 == 0o644
        assert k.call("create_request", {"name": "ops"})["status"] == "ok"
        a, op = _Caller(ctx, info, alice), _Caller(ctx, info, admin)
        r = a.call("create_request", {"name": "w"}, timeout=60)
        assert r and r["status"] == "ok" and r["session"]["name"] == "alice.w", r
        assert r["session"]["tenant"] == "alice"
        r = a.call("create_request", {"name": "x"})
        assert r["ename"] == "QuotaExceeded", r
        assert [s["name"] for s in a.call("list_request")["sessions"]] == ["alice.w"]
        assert a.call("info_request", {"session": "ops"})["ename"] == "NoSuchSession"
        names = sorted(s["name"] for s in op.call("list_request")["sessions"])
        assert names == ["alice.w", "ops"], names
        for pair in (wrong, None):
            c = _Caller(ctx, info, pair)
            assert c.call("list_request", timeout=2) is None
            c.s.close()
        # A pair whose public key is alice's but whose secret is not cannot even finish the
        # handshake (CURVE proves the secret): nothing.
        forged = _Caller(ctx, info, (alice[0], wrong[1]))
        assert forged.call("list_request", timeout=2) is None
        forged.s.close()
        assert [s["name"] for s in a.call("list_request")["sessions"]] == ["alice.w"]
        assert len(op.call("list_request")["sessions"]) == 2
        assert op.call("end_request", {"session": "alice.w"})["status"] == "ok"
        a.s.close()
        op.s.close()
        # Revoked: alice's key dropped from the file (read at start): after a restart it gets
        # nothing, and the operator's is answered as before.
        old, k = k, None
        stop_checked(old)
        path = _tenants_file(root, f"tenant alice keys={wrong[0].decode()}\n"
                                   f"operator keys={admin[0].decode()}\n")
        k = Kenneld(f"{root}/state", "--curve", "--tenants", path, "--tenant-manager",
                    "tcp://127.0.0.1:*", "--pool", "0")
        with open(os.path.join(k.state_dir, "tenants.json")) as f:
            info = json.load(f)["manager"]
        a, op = _Caller(ctx, info, alice), _Caller(ctx, info, admin)
        assert a.call("list_request", timeout=2) is None
        assert [s["name"] for s in op.call("list_request")["sessions"]] == ["ops"]
        a.s.close()
        op.s.close()
    finally:
        ctx.destroy(linger=0)
        _end_and_remove(k, root)


def test_a_tenants_session_stays_its_own_across_a_restart_and_on_ipc(users):
    """With --transport ipc: alice's session's socket files are her group's (0660) and her
    client gets its replies, bob's gets nothing. kenneld restarts: the session comes back
    alice's, for her and not for bob. A tenant may not name ipc paths for kenneld (root) to
    bind."""
    root = tempfile.mkdtemp(prefix="kn-t-", dir="/tmp")
    os.chmod(root, 0o711)
    path = _tenants_file(root, f"tenant alice uids={ALICE}\ntenant bob uids={BOB}\n")
    args = ("--tenants", path, "--transport", "ipc", "--pool", "0")
    k = Kenneld(f"{root}/state", *args)
    _STATE[0] = k.state_dir
    try:
        rc, _, err = kennel(ALICE, "exec", "r", "x = 41")
        assert rc == 0, err
        info = k.call("info_request", {"session": "alice.r"})["session"]
        with open(info["connection_file"]) as f:
            conn = json.load(f)
        assert conn["transport"] == "ipc"
        gid = pwd_gid(ALICE)
        for name in ("shell", "iopub"):
            st = os.stat(f"{conn['ip']}-{conn[name + '_port']}")
            assert st.st_mode & 0o777 == 0o660 and st.st_gid == gid, (name, oct(st.st_mode))
        got = {}
        for u in (ALICE, BOB):
            p = subprocess.run(["runuser", "-u", u, "--", "/usr/bin/python3", "-c",
                                _IPC_PROBE, json.dumps(conn)], capture_output=True, text=True,
                               timeout=30, cwd="/")
            got[u] = p.stdout.strip()
        assert got == {ALICE: "answered", BOB: "nothing"}, got
        with open(os.path.join(k.state_dir, "tenants.json")) as f:
            tinfo = json.load(f)["manager"]
        p = subprocess.run(["runuser", "-u", ALICE, "--", "/usr/bin/python3", "-c", _CREATE_IPC,
                            json.dumps(tinfo), root], capture_output=True, text=True, timeout=30,
                           cwd="/")
        r = json.loads(p.stdout)
        assert r["ename"] == "BadRequest" and "must be tcp" in r["evalue"], r
        old, k = k, None
        stop_checked(old)  # saves the session's state; the next kenneld brings it back
        k = Kenneld(f"{root}/state", *args)
        info = k.call("info_request", {"session": "alice.r"})["session"]
        assert info["tenant"] == "alice", info
        rc, out, err = kennel(ALICE, "exec", "r", "print(x + 1)")
        assert rc == 0 and "42" in out, (out, err)
        rc, out, err = kennel(BOB, "info", "alice.r")
        assert rc != 0 and "no session has that id or name" in out + err, (out, err)
    finally:
        _end_and_remove(k, root)


def _end_and_remove(k, root):
    """A test's own kenneld (None: it did not start): its sessions ended, stopped and
    checked; its root removed whatever happened."""
    try:
        if k:
            for s in k.call("list_request")["sessions"]:
                k.call("end_request", {"session": s["id"]})
            stop_checked(k)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def pwd_gid(user):
    import pwd
    return pwd.getpwnam(user).pw_gid


_IPC_PROBE = r"""
import json, os, sys, zmq
from jupyter_client.session import Session
c = json.loads(sys.argv[1])
ctx = zmq.Context(); s = ctx.socket(zmq.DEALER); s.linger = 0
s.connect(f"ipc://{c['ip']}-{c['shell_port']}")
s.sndtimeo = 5000  # as in the manager probe: a refused peer may have no pipe to queue on
try:
    Session(key=c["key"].encode(), signature_scheme="hmac-sha256").send(s, "kernel_info_request", {})
    print("answered" if s.poll(5000) else "nothing", flush=True)
except zmq.Again:
    print("nothing", flush=True)
os._exit(0)
"""

_CREATE_IPC = r"""
import json, os, sys, zmq
from jupyter_client.session import Session
m = json.loads(sys.argv[1])
ctx = zmq.Context(); s = ctx.socket(zmq.DEALER); s.linger = 0; s.connect(m["endpoint"])
ses = Session(key=m["key"].encode(), signature_scheme="hmac-sha256")
conn = {"transport": "ipc", "ip": sys.argv[2] + "/planted", "key": "k", "shell_port": 1,
        "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5,
        "signature_scheme": "hmac-sha256"}
ses.send(s, "create_request", {"name": "planted", "connection": conn})
assert s.poll(10000)
_, msg = ses.feed_identities(s.recv_multipart())
print(json.dumps(ses.deserialize(msg)["content"]), flush=True)
os._exit(0)
"""


def test_tenants_need_a_root_kenneld():
    """Unprivileged, every kernel would run as kenneld's one uid: tenants' kernels could
    reach each other. kenneld refuses to start, saying so."""
    root = tempfile.mkdtemp(prefix="kn-t-", dir="/tmp")
    os.chmod(root, 0o711)
    try:
        path = _tenants_file(root, "tenant alice uids=1001\n")
        p = subprocess.run(["runuser", "-u", "nobody", "--", KENNELD, "--state-dir",
                            f"{root}/state", "--tenants", path], capture_output=True, text=True,
                           timeout=30, cwd="/")
        assert p.returncode == 2 and "--tenants needs kenneld to run as root" in p.stderr, p
    finally:
        shutil.rmtree(root, ignore_errors=True)
