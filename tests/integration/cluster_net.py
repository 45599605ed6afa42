"""A kennel cluster on one machine for the tests (docs/cluster.md): Debian's redis-server and
three kenneld nodes, each in a network namespace the test makes (a veth pair on a bridge it
made, private 10.x addresses), own state directories, one shared directory. The client (bin/kennel)
runs in the root namespace and reaches them over the bridge. Everything is removed on close(),
even after a failure: processes by pid, then namespaces, veths and the bridge by name."""

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import zmq
from jupyter_client.session import Session
from kennel_shared import remove_cgroups_left

try:
    from .kenneld_proc import KENNEL, KENNELD, end_process
except ImportError:  # bench/bench.py imports this file by path
    from kenneld_proc import KENNEL, KENNELD, end_process

REDIS = "/usr/bin/redis-server"
START_TIMEOUT_S = 20


def sh(*args, check=True):
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=20)


def _free_subnet():
    used = sh("ip", "-4", "-o", "addr").stdout
    for _ in range(50):
        n = random.randint(100, 250)
        if f" 10.{n}." not in used:
            return f"10.{n}.77"
    raise RuntimeError("no free 10.N.77.0/24 for the test's bridge")


class Node:
    def __init__(self, net, name, ns, addr):
        self.net, self.name, self.ns, self.addr = net, name, ns, addr
        self.state = net.root / f"state-{name}"
        self.log_path = net.root / f"{name}.log"
        self.proc = None

    def start(self, *extra):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, str(KENNELD), "--state-dir", str(self.state),
             "--cluster", self.net.url, "--node", self.name, "--advertise", self.addr,
             "--shared", str(self.net.shared), "--disk", "0", "--pool", "0",
             # The cells here import no scientific package: a zygote preloading them would
             # cost each of the 18 nodes these tests start ~1.5 s of CPU.
             "--preload", "",
             "--checkpoint", str(self.net.checkpoint), "--log-level", "debug", *extra],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def kill9(self):
        """kill -9 of kenneld (ip netns exec execs it: the same pid); its kernels die with
        it or are ended by close()."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self):
        if self.proc:
            end_process(self.proc)
            self.proc = None

    def log(self, tail=3000):
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def link(self, up):
        sh("ip", "link", "set", self.net.veth_root(self), "up" if up else "down")


class ClusterNet:
    def __init__(self, root, nodes=3, checkpoint=2):
        self.root = Path(root)
        self.shared = self.root / "shared"
        self.shared.mkdir(parents=True)
        self.client_state = self.root / "client"
        self.checkpoint = checkpoint
        self.tag = "%04x" % random.randrange(0x10000)
        self.bridge = f"kcb{self.tag}"
        self.subnet = _free_subnet()
        self.gw = f"{self.subnet}.1"
        self.namespaces = []
        self.veths = []
        self.redis_proc = None
        self.redis_addr = f"{self.subnet}.2"
        self.redis_port = random.randint(20000, 40000)
        self.url = f"redis://{self.redis_addr}:{self.redis_port}"
        self.nodes = []
        self.net_ready = False
        try:
            self._make_net(nodes)
            self.start_redis()
            for n in self.nodes:
                n.start()
            self.wait_nodes(len(self.nodes))
        except BaseException:
            self.close()
            raise

    # ---- the network ----
    def veth_root(self, node_or_ns):
        ns = node_or_ns if isinstance(node_or_ns, str) else node_or_ns.ns
        return f"kv{self.tag}{ns[-1]}"

    def _ns(self, suffix, addr):
        ns = f"kcn{self.tag}{suffix}"
        sh("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        outer, inner = self.veth_root(ns), f"ki{self.tag}{suffix}"
        sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        self.veths.append(outer)
        sh("ip", "link", "set", outer, "master", self.bridge)
        sh("ip", "link", "set", outer, "up")
        sh("ip", "link", "set", inner, "netns", ns)
        sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", inner)
        sh("ip", "-n", ns, "link", "set", inner, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        return ns

    def _make_net(self, nodes):
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        self.net_ready = True
        sh("ip", "addr", "add", f"{self.gw}/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        self.redis_ns = self._ns("r", self.redis_addr)
        for i in range(1, nodes + 1):
            addr = f"{self.subnet}.{10 + i}"
            self.nodes.append(Node(self, f"n{i}", self._ns(str(i), addr), addr))

    # ---- Redis ----
    def start_redis(self):
        log = open(self.root / "redis.log", "ab")
        self.redis_proc = subprocess.Popen(
            ["ip", "netns", "exec", self.redis_ns, REDIS, "--bind", self.redis_addr, "--port",
             str(self.redis_port), "--save", "", "--appendonly", "no", "--protected-mode", "no",
             "--dir", str(self.root)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.redis("PING", check=False).strip() == "PONG":
                return
            time.sleep(0.1)
        raise AssertionError("redis-server did not start")

    def stop_redis(self):
        if self.redis_proc:
            os.kill(self.redis_proc.pid, signal.SIGKILL)
            self.redis_proc.wait(10)
            self.redis_proc = None

    def redis(self, *args, check=True):
        r = subprocess.run(["redis-cli", "-h", self.redis_addr, "-p", str(self.redis_port),
                            *args], capture_output=True, text=True, timeout=10)
        if check:
            assert r.returncode == 0, r.stderr
        return r.stdout

    def live_nodes(self):
        out = self.redis("KEYS", "kennel:node:*", check=False)
        return sorted(k.split(":")[-1] for k in out.split())

    def wait_nodes(self, n, timeout=START_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.live_nodes()) >= n:
                return
            for node in self.nodes:
                if node.proc and node.proc.poll() is not None:
                    raise AssertionError(f"{node.name} exited:\n{node.log()}")
            time.sleep(0.2)
        raise AssertionError(f"only {self.live_nodes()} joined:\n" +
                             "\n".join(n.log() for n in self.nodes))

    def node(self, name):
        return next(n for n in self.nodes if n.name == name)

    # ---- the client ----
    @property
    def key_file(self):
        return self.shared / "cluster-key.json"

    def env(self):
        env = dict(os.environ)
        env["KENNEL_CLUSTER"] = self.url
        env["KENNEL_CLUSTER_KEY"] = str(self.key_file)
        return env

    def kennel(self, *args, input=None, timeout=40, ns=None):
        cmd = [str(KENNEL), "--state-dir", str(self.client_state), *args]
        if ns:
            cmd = ["ip", "netns", "exec", ns, *cmd]
        return subprocess.run(cmd, input=input, capture_output=True, text=True,
                              timeout=timeout, env=self.env())

    def where(self, name):
        """The node the catalog names for a session."""
        return self.redis("HGET", f"kennel:s:{name}", "node").strip()

    def manager_call(self, node, msg_type, content):
        """One request to a node's manager, asked directly (not through the catalog)."""
        rec = json.loads(self.redis("GET", f"kennel:node:{node.name}"))
        keys = json.loads(self.key_file.read_text())
        ctx = zmq.Context.instance()
        s = ctx.socket(zmq.DEALER)
        s.linger = 0
        s.curve_serverkey = keys["curve_publickey"].encode()
        s.curve_publickey = keys["curve_publickey"].encode()
        s.curve_secretkey = keys["curve_secretkey"].encode()
        s.connect(rec["manager"])
        sess = Session(key=keys["key"].encode(), signature_scheme="hmac-sha256")
        try:
            sess.send(s, msg_type, content)
            assert s.poll(10000), "the node's manager did not answer"
            _, msg = sess.recv(s)
            return msg["content"]
        finally:
            s.close()

    def node_sessions(self, node):
        """The names a node's manager lists."""
        return [x["name"] for x in self.manager_call(node, "list_request", {})["sessions"]]

    def close(self):
        for n in self.nodes:
            try:
                n.stop()
            except Exception:
                pass
            remove_cgroups_left(n.state)  # a node killed with -9 (kill9) had no moment to
        if self.redis_proc:
            end_process(self.redis_proc)
        # Anything still running with this cluster's directory on its command line is ours
        # (a kenneld whose SIGKILL was pending behind a slow system call): by pid, bounded.
        mine = str(self.root) + "/"
        for _ in range(20):
            left = []
            for entry in os.listdir("/proc"):
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        args = f.read().decode(errors="replace")
                except (OSError, ValueError):
                    continue
                if entry.isdigit() and int(entry) != os.getpid() and mine in args:
                    left.append(int(entry))
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)
        for v in self.veths:
            sh("ip", "link", "del", v, check=False)
        for ns in self.namespaces:
            sh("ip", "netns", "del", ns, check=False)
        if self.net_ready:
            sh("ip", "link", "del", self.bridge, check=False)


def run_cell(conn_path, code, timeout=20, iopub=True):
    """Run code on a session straight from its connection file (CURVE, as JEP 145 has it):
    no catalog, no manager. (stdout text, status). iopub=False: the reply alone (the
    bench's timing: no wait for a SUB to join)."""
    conn = json.loads(Path(conn_path).read_text())
    ctx = zmq.Context.instance()
    sess = Session(key=conn["key"].encode(), signature_scheme="hmac-sha256")
    socks = []

    def sock(kind, port):
        s = ctx.socket(kind)
        s.linger = 0
        s.curve_serverkey = conn["curve_publickey"].encode()
        s.curve_publickey = conn["curve_publickey"].encode()
        s.curve_secretkey = conn["curve_secretkey"].encode()
        s.connect(f"tcp://{conn['ip']}:{conn[port]}")
        socks.append(s)
        return s

    try:
        shell = sock(zmq.DEALER, "shell_port")
        if not iopub:
            msg = sess.send(shell, "execute_request", {"code": code, "silent": False})
            if not shell.poll(timeout * 1000):
                return "", None
            _, rep = sess.recv(shell)
            return "", rep["content"]["status"]
        iopub = sock(zmq.SUB, "iopub_port")
        iopub.setsockopt(zmq.SUBSCRIBE, b"")
        time.sleep(0.3)  # the SUB's join is asynchronous
        msg = sess.send(shell, "execute_request", {"code": code, "silent": False})
        out, status = [], None
        deadline = time.monotonic() + timeout
        while status is None and time.monotonic() < deadline:
            if shell.poll(100):
                _, rep = sess.recv(shell)
                if rep["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                    status = rep["content"]["status"]
            while iopub.poll(0):
                _, m = sess.recv(iopub)
                if m["msg_type"] == "stream":
                    out.append(m["content"]["text"])
        time.sleep(0.2)
        while iopub.poll(0):
            _, m = sess.recv(iopub)
            if m["msg_type"] == "stream":
                out.append(m["content"]["text"])
        return "".join(out), status
    finally:
        for s in socks:
            s.close()
