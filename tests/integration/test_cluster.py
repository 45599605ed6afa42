"""kennel on many machines (docs/cluster.md), for real: Debian's redis-server and three
kenneld nodes, each in a network namespace of the test's own, and the kennel CLI in the root
namespace (cluster_net.py). Needs root (network namespaces)."""

import json
import os
import subprocess
import time

import pytest

from .cluster_net import ClusterNet, run_cell
from .kenneld_proc import KENNEL

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


@pytest.fixture
def net(tmp_path):
    c = ClusterNet(tmp_path)
    try:
        yield c
    finally:
        c.close()


def _new(net, name, ns=None):
    r = net.kennel("new", "--name", name, ns=ns)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def _exec(net, name, code, ns=None, timeout=40):
    r = net.kennel("exec", name, code, ns=ns, timeout=timeout)
    assert r.returncode == 0, (r.stdout, r.stderr)
    return r.stdout


def _wait_checkpoint(net, name, node, since, timeout=20):
    """The session's checkpoint (its snapshot, in the shared directory) is written after
    `since` (time.time()), and its kernel still runs."""
    info = json.loads(net.kennel("info", name).stdout)
    snap = net.shared / "nodes" / node.name / "sessions" / info["id"] / "snapshot"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if snap.exists() and snap.stat().st_mtime >= since - 1:
            info = json.loads(net.kennel("info", name).stdout)
            assert info["state"] == "idle", info  # a checkpoint keeps the kernel
            return
        time.sleep(0.3)
    raise AssertionError(f"{name} was not checkpointed:\n{node.log()}")


def test_spread_resolve_and_connection_files(net):
    names = [f"spread-{i}" for i in range(1, 9)]
    # One process places all eight (`new --count`), each on the better of two live nodes.
    r = net.kennel("new", "--name", "spread", "--count", "8")
    assert r.returncode == 0, r.stderr
    files = dict(zip(names, r.stdout.split()))
    assert len(files) == 8 and len(set(files.values())) == 8
    where = {n: net.where(n) for n in names}
    assert len(set(where.values())) >= 2, where
    addrs = {n.name: n.addr for n in net.nodes}
    for n in names:
        # The client talks to the node directly: the file's ip is the node's --advertise.
        conn = json.loads(open(files[n]).read())
        assert conn["ip"] == addrs[where[n]]
        out, status = run_cell(files[n], "print(6*7)")
        assert (out, status) == ("42\n", "ok")
    ls = net.kennel("ls")
    assert ls.returncode == 0, ls.stderr
    for n in names:
        line = next(l for l in ls.stdout.splitlines() if l.split()[0] == n)
        assert line.split()[1] == where[n]
    # Every name resolves from every node (the CLI run inside each node's namespace).
    for node in net.nodes:
        for n in names[:3]:
            r = net.kennel("info", n, ns=node.ns)
            assert r.returncode == 0, r.stderr
            info = json.loads(r.stdout)
            assert info["name"] == n and info["node"] == where[n]
    # ... and from every node's manager: its own sessions' info, a Redirect for the others'
    for node in net.nodes:
        for n in names:
            r = net.manager_call(node, "info_request", {"session": n})
            if where[n] == node.name:
                assert r["status"] == "ok" and r["session"]["name"] == n
            else:
                assert (r["ename"], r["node"]) == ("Redirect", where[n]), r
                assert r["manager"].startswith(f"tcp://{addrs[where[n]]}:")
    r = net.manager_call(net.nodes[0], "info_request", {"session": "nowhere"})
    assert r["ename"] == "NoSuchSession"
    # files, put and get go to the session's node
    src = net.root / "in.txt"
    src.write_text("hello cluster\n")
    assert net.kennel("put", names[0], str(src), "a.txt").returncode == 0
    assert "a.txt" in net.kennel("files", names[0]).stdout
    r = net.kennel("get", names[0], "a.txt", "-")
    assert r.stdout == "hello cluster\n"
    # rm ends it on its node and takes it out of the catalog
    assert net.kennel("rm", names[1]).returncode == 0
    assert net.redis("EXISTS", f"kennel:s:{names[1]}").strip() == "0"
    # A name released while its node's heartbeat still lists it (as rm's release can race
    # one) is never written back, and the node drops its copy.
    assert net.redis("DEL", f"kennel:s:{names[2]}").strip() == "1"
    time.sleep(2.5)  # (more than two heartbeats)
    assert net.redis("EXISTS", f"kennel:s:{names[2]}").strip() == "0"
    assert net.redis("EXISTS", f"kennel:s:{names[1]}").strip() == "0"
    r = net.kennel("info", names[1])
    assert r.returncode != 0 and "NoSuchSession" in r.stderr


def test_kill9_node_revives_elsewhere_with_checkpoint(net):
    # Sessions on every node first: the victim's uid slot is taken where it moves, so its
    # workspace files are given to a free slot's ids there.
    for i in range(5):
        _new(net, f"filler{i}")
    _new(net, "victim")
    t = time.time()
    _exec(net, "victim", "x = 41")
    (net.root / "big.txt").write_text("data\n")
    assert net.kennel("put", "victim", str(net.root / "big.txt")).returncode == 0
    home = net.node(net.where("victim"))
    _wait_checkpoint(net, "victim", home, t)
    # A cell after the checkpoint, still running at the kill: what a kill loses.
    running = subprocess.Popen(
        [str(KENNEL), "--state-dir", str(net.client_state), "exec", "victim",
         "x = 1000\nimport time\ntime.sleep(60)"],
        env=net.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        home.kill9()
    finally:
        running.kill()
        running.wait(10)
    t0 = time.monotonic()
    # The first request after the kill: answered on another node within 15 s.
    deadline = t0 + 15
    while True:
        r = net.kennel("exec", "victim", "print(x + 1); print(open('big.txt').read())",
                       timeout=15)
        if r.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    took = time.monotonic() - t0
    assert r.returncode == 0, (r.stderr, [n.log() for n in net.nodes])
    assert r.stdout.split() == ["42", "data"]
    assert took < 15
    assert net.where("victim") != home.name
    assert "moved from node" in r.stderr
    # The first cell was told the time its state is from.
    assert f"moved from node {home.name} to node" in r.stderr
    assert "its state is from its checkpoint of 20" in r.stderr
    r = net.kennel("exec", "victim", "print(x)")
    assert "checkpoint of" not in r.stderr


def test_partitioned_node_does_not_serve_moved_session(net):
    _new(net, "part")
    t = time.time()
    _exec(net, "part", "y = 'before'")
    home = net.node(net.where("part"))
    _wait_checkpoint(net, "part", home, t)
    home.link(False)
    try:
        net.wait_nodes(0)  # no-op bound; the heartbeat expires in <= 4 s
        deadline = time.monotonic() + 10
        while home.name in net.live_nodes() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert home.name not in net.live_nodes()
        out = _exec(net, "part", "print(y)")
        assert out.strip() == "before"
        new_home = net.where("part")
        assert new_home != home.name
    finally:
        home.link(True)
    deadline = time.monotonic() + 10
    while home.name not in net.live_nodes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert home.name in net.live_nodes(), home.log()
    # Back: it fenced its stale copy off, and never lists (serves) it again.
    deadline = time.monotonic() + 10
    while "part" in net.node_sessions(home) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert "part" not in net.node_sessions(home), home.log()
    assert "stale copy is dropped" in home.log(20000)
    assert _exec(net, "part", "print(y)").strip() == "before"
    assert net.where("part") == new_home


def test_drain_moves_sessions_with_state(net):
    names = [f"dr{i}" for i in range(4)]
    for n in names:
        _new(net, n)
        _exec(net, n, f"v = '{n}'")
    target = net.where(names[0])
    on_target = [n for n in names if net.where(n) == target]
    r = net.kennel("drain", target, timeout=90)
    assert r.returncode == 0, (r.stderr, net.node(target).log())
    assert net.node_sessions(net.node(target)) == []
    for n in on_target:
        assert _exec(net, n, "print(v)").strip() == n
        assert net.where(n) != target
    # Nothing new is placed on a drained node; undrain places there again.
    for i in range(6):
        _new(net, f"after{i}")
        assert net.where(f"after{i}") != target
    assert net.kennel("undrain", target).returncode == 0
    assert net.redis("EXISTS", f"kennel:drain:{target}").strip() == "0"


def test_redis_restart_and_unreachable(net):
    f = _new(net, "keep")
    _exec(net, "keep", "z = 7")
    home = net.where("keep")
    net.stop_redis()
    # Unreachable: kennel new fails at once, with a clear error.
    t0 = time.monotonic()
    r = net.kennel("new", "--name", "nope")
    assert r.returncode != 0 and "cannot reach the cluster's Redis" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 5
    # Existing sessions keep serving (straight from their connection file).
    out, status = run_cell(f, "print(z * 6)")
    assert (out, status) == ("42\n", "ok")
    # Redis back, empty (no persistence): nodes rejoin by themselves and write their
    # sessions back into the catalog; none is lost.
    net.start_redis()
    net.wait_nodes(3, timeout=10)
    deadline = time.monotonic() + 10
    while net.where("keep") != home and time.monotonic() < deadline:
        time.sleep(0.2)
    assert net.where("keep") == home
    assert _exec(net, "keep", "print(z)").strip() == "7"
    assert _new(net, "later")


def test_garbage_in_catalog_is_an_error_not_a_crash(net):
    net.redis("SET", "kennel:s:junk1", "not a hash")
    net.redis("HSET", "kennel:s:junk2", "node", "../../etc", "gen", "abc")
    net.redis("SADD", "kennel:nodes", "evil", "../x")
    net.redis("SET", "kennel:node:evil", "{not json")
    net.redis("SET", "kennel:node:../x", '{"node":"../x","manager":"tcp://1.2.3.4:1"}')
    r = net.kennel("info", "junk2")
    assert r.returncode == 1 and "malformed" in r.stderr, r.stderr
    r = net.kennel("ls")
    assert r.returncode == 0 and "malformed node record" in r.stderr
    # A garbage entry is repaired by the next new, not trusted.
    for junk in ("junk1", "junk2"):
        _new(net, junk)
        assert net.where(junk) in {n.name for n in net.nodes}
        assert _exec(net, junk, "print(1)").strip() == "1"
    for n in net.nodes:
        assert n.proc.poll() is None, n.log()
