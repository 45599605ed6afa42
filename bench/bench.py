"""bench: kennel against ipykernel (Debian's, through jupyter_client), side by side in one run.

Machines are shared and noisy, so every measurement runs both in the same invocation (where it
makes sense, interleaved round by round) and reports medians, p99 and ratios (ipykernel /
kennel, and kennel / ipykernel for throughput: above 1 means kennel is better). Prints a table; writes every number, the
N's and the machine to bench/results.json. Run it with `make bench` (/usr/bin/python3).

Measurements
  1. new session -> first `1+1` result, through jupyter_client. kennel: create_request, a
     BlockingKernelClient connects and sends execute at once (no wait_for_ready: it adds
     ~0.4 s of its own), until the execute_reply. Three kennel spawners: the warm pool
     (`--pool 2`, the default: we wait for stats pool_ready == 2 and for kenneld's process tree
     to go quiet before each create), `--pool 0` (a fork of the zygote on demand) and
     `--spawner exec` (a cold Python). ipykernel: KernelManager.start_kernel + execute.
  2. new session -> first matplotlib PNG: same, with the cell `import matplotlib.pyplot as plt;
     plt.plot([1,2,3]); plt.show()`, until a display_data with image/png on iopub (kennel:
     default spawner and pool). Its floor: in the same session (and the same ipykernel), the
     plot cell run WARM_PLOTS more times back to back; the last one's time to its PNG and reply
     is what matplotlib's inline path costs in a warm kernel of this machine.
  3. warm `1+1` round trip (execute_reply and status idle both received), p50 and p99, with a
     lean client (raw pyzmq DEALER + SUB, one zmq.Poller, jupyter_client's Session signs);
     and its floor: a bare DEALER/ROUTER round trip (300 B) to an echo process, in the same
     client. The client's own CPU time per trip is reported too. Then the same round trip
     with a ~200-line cell of plain Python (LONG_CELL), BENCH_TRIPS / 5 per kernel.
  4. idle session memory after a cell importing numpy, pandas, matplotlib.pyplot: kennel PSS and
     USS of the session (info_request: its whole process tree), ipykernel PSS and USS of the
     kernel process. Then BENCH_IDLE_N idle kennel sessions (the same cell run in each): the
     sum of their PSS plus the zygote's (and, separately, kenneld's own); BENCH_IPY_IDLE_N
     ipykernels measured alike and extrapolated to BENCH_IDLE_N (per-kernel mean x N).
  5. BENCH_CONC sessions executing at once, each looping `1+1` (one request in flight each) for
     BENCH_CONC_SECONDS, all driven from this one process (raw sockets, one Poller): total
     executes/s and latency p50/p99. ipykernel with BENCH_IPY_CONC kernels.
  6. kenneld's warm round trip p50/p99 with BENCH_MANY idle sessions alive against the same with
     one (kenneld --idle 0 --pool 0, so none is evicted and none is pooled). Measurements 4, 5
     and 6 share that kenneld: one probe session first, then it grows to BENCH_IDLE_N, then to
     BENCH_MANY (creation is bounded by BENCH_CREATE_TIMEOUT and stops early if the machine's
     MemAvailable falls under 3 GiB: the reached count is reported). (kenneld sizes czmq's
     socket cap from --max-sessions itself.)
  7. the sandbox's spawn cost (issue #3): create -> first result with `--spawner exec`,
     sandboxed against `--insecure-no-sandbox`, in consecutive pairs; median and p99 of the
     per-pair difference. That difference is small against a noisy ~0.5 s cold start, so the
     sandbox's setup is also timed alone: bin/kennel-init running /usr/bin/true against
     /usr/bin/true (BENCH_SANDBOX_N pairs).
  8. a burst (issue #6: "20 sessions created at once all answer within 0.5 s"): BENCH_BURST
     create_requests sent at once to a default kenneld, each session executes `1+1` as soon as
     it exists; time until the last answer. Those sessions ended, and the pool grown to the
     burst (issue #27: the pool grows with demand) and refilled, a second burst on the same
     kenneld, and what the grown pool's waiting kernels hold (USS, PSS). Then the same
     against `kenneld --pool BENCH_BURST` (a pool as large as the burst). ipykernel: BENCH_IPY_BURST kernels started at once.
  9. `kennel mcp` (issue #25: "run_python('1+1') answered <= 5 ms p50 once the session is
     warm"): `kennel mcp --session mcp` on a default kenneld, driven by raw JSON-RPC lines on
     its stdin and stdout (a lean client: what an MCP SDK adds is the SDK's), initialized and
     warmed by 50 calls; then BENCH_MCP_TRIPS tools/call run_python('1+1'), each timed from
     its line written to its answer read. In halves, alternating with the same number of
     round trips of the lean Jupyter client of measurement 3 on the same session: kennel
     mcp's share is its p50 minus that client's.
  10. the runtime (issue #29; BENCH_ONLY=runtime): each package of docs/runtime.md's list,
     imported in a plain /usr/bin/python3 -I after numpy, pandas and matplotlib (its ms, and
     the RSS it adds: what preloading it adds to the zygote), and in a new session of the
     default kenneld (the cell's ms, and the PSS it adds to the session against a `pass`
     session's). Then two kennelds side by side, the default preload and the same without
     sklearn and seaborn: the zygote's PSS/RSS, a new session's first `1+1`, a new session's
     `import sklearn, seaborn`, an idle session's PSS after IMPORT_CELL, and what an idle
     session costs in a fleet (BENCH_RUNTIME_FLEET sessions that ran IMPORT_CELL: their PSS
     and the zygote's, over their number); ipykernel's `import sklearn, seaborn` in a new
     kernel beside them.
  11. kennel-gateway (issue #25): a warm `1+1` round trip over its WebSocket (JSON frames,
     websocket-client, until the execute_reply and status idle) against Debian's Notebook
     server serving Debian's ipykernel over its own WebSocket, the same client; the gateway's
     added latency: its p50 minus the lean Jupyter client's of measurement 3 on the same
     session, in interleaved halves; and the gateway's memory (PSS of its serving process)
     with BENCH_GW_IDLE_WS idle WebSockets open against none.
  12. CURVE (issue #28; BENCH_ONLY=curve): warm `1+1` round trips of a CURVE session against
     one without, on one kenneld, in interleaved halves; and handshakes (connect to the first
     answer) of each, beside a bare pyzmq ROUTER with and without CURVE for the floor.

  13. the Python SDK (issue #29; BENCH_ONLY=sdk): kennel_client's Session.run('1+1') on a
     warm session of a default kenneld, BENCH_SDK_TRIPS calls timed from the call to its
     return (an Execution built: reply and idle received), in halves alternating with the
     lean Jupyter client of measurement 3 on the same session: the SDK's share is its p50
     minus that client's.

  14. fork (issue #29 item 4; BENCH_ONLY=fork): a session holding a 50 MiB pandas DataFrame
     (FORK_DF_CELL) on a default kenneld, forked BENCH_FORKS times (each fork ended before the
     next, the pool refilled and the process tree quiet): the fork_request's reply (what
     `kennel fork` waits for: the source pickles its namespace, the fork is made and its
     workspace copied), and the fork's first cell (`len(df)`, sent by a new client the
     moment the reply comes) answered, from the request: the time until the fork is usable,
     which includes its kernel loading the state. Then the same source evicted (--idle 1):
     a fork of it from its snapshot on disk, and beside it the source's own revival (its next
     cell answered, the snapshot loaded by a new kernel), BENCH_FORKS // 2 of each.

Environment knobs (defaults in brackets; BENCH_QUICK=1 shrinks every N to a smoke-test size):
  BENCH_QUICK           1: tiny N's everywhere, for a smoke run (~1 min)                [0]
  BENCH_ONLY            sections: starts, png, rtt, fleet, burst, flood, mcp, runtime,
                        gateway, curve, sdk, cluster, rtt_cost, fork                    [all]
  BENCH_FORKS           forks of the 50 MiB session (measurement 14)                    [10]
  BENCH_STARTS          kennel starts per spawner (measurements 1 and 7)                [20]
  BENCH_IPY_STARTS      ipykernel starts                                                [8]
  BENCH_PLOTS           kennel new session -> first PNG                                 [10]
  BENCH_IPY_PLOTS       ipykernel new kernel -> first PNG                               [5]
  BENCH_TRIPS           warm round trips per series                                     [500]
  BENCH_IDLE_N          idle kennel sessions for the total PSS                          [200]
  BENCH_IPY_IDLE_N      idle ipykernels measured (then extrapolated to BENCH_IDLE_N)    [10]
  BENCH_CONC            kennel sessions executing at once                               [50]
  BENCH_IPY_CONC        ipykernels executing at once                                    [10]
  BENCH_CONC_SECONDS    how long the concurrent loop runs                               [5]
  BENCH_MANY            idle kennel sessions for the latency-vs-sessions check          [500]
  BENCH_CREATE_TIMEOUT  seconds allowed for growing to BENCH_MANY sessions              [420]
  BENCH_BURST           kennel sessions created at once                                 [20]
  BENCH_IPY_BURST       ipykernels started at once                                      [10]
  BENCH_MCP_TRIPS       run_python('1+1') calls through kennel mcp (measurement 9)      [500]
  BENCH_RUNTIME_N       sessions per package, and per preload, in measurement 10        [3]
  BENCH_RUNTIME_STARTS  new sessions per preload in measurement 10                      [10]
  BENCH_RUNTIME_PACKAGES  0: measurement 10 without its per-package part                [1]
  BENCH_GW_TRIPS        warm 1+1 round trips over each WebSocket (measurement 11)       [500]
  BENCH_GW_IDLE_WS      idle WebSockets held open on kennel-gateway (measurement 11)    [1000]
  BENCH_CURVE_TRIPS     warm round trips per session, with and without CURVE (12)       [500]
  BENCH_HANDSHAKES      handshakes timed per kind (12)                                  [200]
  BENCH_SANDBOX_N       kennel-init -- /usr/bin/true against /usr/bin/true (part of 7)  [50]
  BENCH_OUT             where the JSON goes                                  [bench/results.json]

Every wait has a deadline; every kenneld and ipykernel started here is stopped (SIGTERM, then
SIGKILL of what it left, by pid) and every state directory under /tmp removed, also on failure
or Ctrl-C. p99 is the nearest-rank percentile: with fewer than 100 samples it is the maximum.
"""

import gc
import glob
import json
import re
import math
import os
import platform
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import zmq
from jupyter_client import BlockingKernelClient, KernelManager
from jupyter_client.session import Session

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KENNELD = os.path.join(ROOT, "bin", "kenneld")
KENNEL = os.path.join(ROOT, "bin", "kennel")
PY = "/usr/bin/python3"
QUICK = os.environ.get("BENCH_QUICK", "0") not in ("", "0")
DELIM = b"<IDS|MSG>"
MiB = 1 << 20

ONE_PLUS_ONE = "1+1"
PLOT_CELL = "import matplotlib.pyplot as plt; plt.plot([1,2,3]); plt.show()"
WARM_PLOTS = 2  # after a session's first PNG, its plot cell again: the floor row times the last
IMPORT_CELL = "import numpy, pandas, matplotlib.pyplot"


def _long_cell(parts=12):
    """A cell as an agent writes one: ~180 lines of plain Python (functions, loops,
    comprehensions, f-strings with conversions, '%' formatting, '!=') ending in an
    expression; ~2 ms of its own work here."""
    lines = ["import collections, math, statistics", "results = {}"]
    for i in range(parts):
        lines += [
            f"def step_{i}(rows, scale={i + 1}):",
            f"    \"\"\"Part {i} of the pipeline: filter, scale, summarise.\"\"\"",
            "    kept = [r for r in rows if r['v'] != 0 and r['k'] % 3 != 1]",
            "    total = 0.0",
            "    for r in kept:",
            "        total += math.sqrt(abs(r['v'])) * scale",
            "    counts = collections.Counter(r['k'] % 5 for r in kept)",
            "    label = 'part-%02d' % scale",
            "    return {'label': label, 'n': len(kept), 'total': round(total, 3),",
            "            'top': counts.most_common(2)}",
            "",
            f"rows_{i} = [{{'k': k, 'v': (k * {i + 7}) % 11 - 5}} for k in range(40)]",
            f"out_{i} = step_{i}(rows_{i})",
            f"if out_{i}['n'] != 0:",
            f"    results[out_{i}['label']] = out_{i}",
            "else:",
            f"    print(f'empty part {{out_{i}!r}}')",
        ]
    lines += ["summary = statistics.mean(r['total'] for r in results.values())",
              "len(results), round(summary, 3)"]
    return "\n".join(lines)


LONG_CELL = _long_cell()

SECTIONS = ("starts", "png", "rtt", "fleet", "burst", "flood", "mcp", "runtime", "gateway",
            "curve", "sdk", "cluster", "rtt_cost", "fork", "evict")


def knob(name, default, quick):
    value = int(os.environ.get(name, quick if QUICK else default))
    if value < 1:
        sys.exit(f"bench: {name} must be at least 1")
    return value


N = {
    "starts": knob("BENCH_STARTS", 20, 2),
    "ipy_starts": knob("BENCH_IPY_STARTS", 8, 1),
    "plots": knob("BENCH_PLOTS", 10, 1),
    "ipy_plots": knob("BENCH_IPY_PLOTS", 5, 1),
    "trips": knob("BENCH_TRIPS", 500, 40),
    "idle_n": knob("BENCH_IDLE_N", 200, 3),
    "ipy_idle_n": knob("BENCH_IPY_IDLE_N", 10, 2),
    "conc": knob("BENCH_CONC", 50, 3),
    "ipy_conc": knob("BENCH_IPY_CONC", 10, 2),
    "conc_seconds": knob("BENCH_CONC_SECONDS", 5, 1),
    "many": knob("BENCH_MANY", 500, 5),
    "create_timeout": knob("BENCH_CREATE_TIMEOUT", 420, 60),
    "gw_trips": knob("BENCH_GW_TRIPS", 500, 40),
    "gw_idle_ws": knob("BENCH_GW_IDLE_WS", 1000, 20),
    "burst": knob("BENCH_BURST", 20, 3),
    "sandbox_n": knob("BENCH_SANDBOX_N", 50, 5),
    "ipy_burst": knob("BENCH_IPY_BURST", 10, 2),
    "flood_trips": knob("BENCH_FLOOD_TRIPS", 200, 20),
    "mcp_trips": knob("BENCH_MCP_TRIPS", 500, 40),
    "sdk_trips": knob("BENCH_SDK_TRIPS", 500, 40),
    "cost_trips": knob("BENCH_COST_TRIPS", 200, 20),
    "runtime_n": knob("BENCH_RUNTIME_N", 3, 1),
    "runtime_starts": knob("BENCH_RUNTIME_STARTS", 10, 2),
    "runtime_fleet": knob("BENCH_RUNTIME_FLEET", 100, 4),
    "curve_trips": knob("BENCH_CURVE_TRIPS", 500, 40),
    "handshakes": knob("BENCH_HANDSHAKES", 200, 20),
    "cluster_starts": knob("BENCH_CLUSTER_STARTS", 10, 2),
    "cluster_creates": knob("BENCH_CLUSTER_CREATES", 60, 10),
    "forks": knob("BENCH_FORKS", 10, 2),
    "evictions": knob("BENCH_EVICTIONS", 6, 2),
}
# The packages of issue #29's runtime (docs/runtime.md), as a cell imports them.
AGENT_IMPORTS = ("scipy", "sklearn", "seaborn", "statsmodels.api", "sympy", "networkx",
                 "openpyxl", "xlrd", "docx", "pypdf", "reportlab", "bs4", "lxml.etree",
                 "tabulate", "PIL.Image", "imageio", "skimage", "h5py", "xarray", "plotly",
                 "nltk", "joblib", "jinja2", "requests", "dateutil", "pytz", "yaml")
# kenneld's default --preload (src/config.c), and the one before sklearn and seaborn joined it.
DEFAULT_PRELOAD = "numpy,pandas,matplotlib.pyplot,matplotlib_inline.backend_inline,sklearn,seaborn"
EARLIER_PRELOAD = "numpy,pandas,matplotlib.pyplot,matplotlib_inline.backend_inline"
AGENT_CELL = "import sklearn, seaborn"
ONLY = [s for s in os.environ.get("BENCH_ONLY", ",".join(SECTIONS)).split(",") if s]
OUT = os.environ.get("BENCH_OUT", os.path.join(ROOT, "bench", "results.json"))
MIN_MEM_AVAILABLE = 3 << 30  # stop growing the fleet below this (the machine is shared)

CALL_TIMEOUT = 30  # a manager request
EXEC_TIMEOUT = 60  # a cell's reply
LIVE = []  # everything started here that must be stopped: Kenneld, IPy, Echo


class BenchError(Exception):
    pass


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def ms_since(t):
    return (time.perf_counter() - t) * 1000


# ---- statistics --------------------------------------------------------------------------------

def pct(xs, q):
    """Nearest-rank percentile."""
    s = sorted(xs)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def summary(xs, keep=True):
    if not xs:
        return {"n": 0}
    out = {"n": len(xs), "median": statistics.median(xs), "p99": pct(xs, 99),
           "mean": statistics.fmean(xs), "min": min(xs), "max": max(xs)}
    if keep:
        out["samples"] = [round(x, 4) for x in xs]
    return out


# ---- processes and memory ----------------------------------------------------------------------

def _stat(pid):
    """(state, ppid, cpu ticks, starttime) of a process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[19])


def process_table():
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(entry)
            if st and st[0] != "Z":
                table[int(entry)] = st
    return table


def descendants(root_pid, table=None):
    """{pid: (state, ppid, ticks, starttime)} of every live process below root_pid."""
    table = table if table is not None else process_table()
    children = {}
    for pid, st in table.items():
        children.setdefault(st[1], []).append(pid)
    found, todo = {}, [root_pid]
    while todo:
        for pid in children.get(todo.pop(), []):
            found[pid] = table[pid]
            todo.append(pid)
    return found


def settle(roots, quiet_s=0.2, timeout=5):
    """Wait until the process trees below `roots` (and the roots) use no CPU for quiet_s: a
    refilled pool or an ended session finishing in the background must not be measured.
    Returns (seconds waited, CPU ms the trees used meanwhile)."""
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")

    def ticks():
        """{(pid, starttime): CPU ticks} of the trees."""
        table = process_table()
        out = {}
        for r in roots:
            for pid, st in [(r, table.get(r)), *descendants(r, table).items()]:
                if st:
                    out[(pid, st[3])] = st[2]
        return out

    t0 = time.monotonic()
    first = last = ticks()
    quiet_since = time.monotonic()
    while time.monotonic() - t0 < timeout:
        time.sleep(0.05)
        now = ticks()
        if now != last:  # a process used CPU, started or ended
            last, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            break
    # CPU used meanwhile by the processes alive at the end (what one that ended used is lost).
    used = sum(t - first.get(key, 0) for key, t in last.items())
    return time.monotonic() - t0, used * tick_ms


def smaps(pid):
    """{"pss", "uss", "rss"} bytes of one process (smaps_rollup), or None if it is gone."""
    out = {"pss": 0, "uss": 0, "rss": 0}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key == "Pss":
                    out["pss"] += int(rest.split()[0]) * 1024
                elif key in ("Private_Clean", "Private_Dirty"):
                    out["uss"] += int(rest.split()[0]) * 1024
                elif key == "Rss":
                    out["rss"] += int(rest.split()[0]) * 1024
    except OSError:
        return None
    return out


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def kill_tree(recorded):
    """SIGKILL processes recorded as {pid: stat}, only if still the same process."""
    for pid, st in recorded.items():
        now = _stat(pid)
        if now and now[3] == st[3] and now[0] != "Z":
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# ---- a lean Jupyter client: raw pyzmq sockets, Session only for signing -------------------------

def _url(conn, port):
    if conn.get("transport", "tcp") == "ipc":
        return f"ipc://{conn['ip']}-{conn[port]}"
    return f"tcp://{conn['ip']}:{conn[port]}"


def _curve_keys(sock, conn):
    """A CURVE session's (JEP 145) key pair on sock, as its clients hold it."""
    if conn.get("curve_publickey"):
        sock.curve_serverkey = sock.curve_publickey = conn["curve_publickey"].encode()
        sock.curve_secretkey = conn["curve_secretkey"].encode()


def _headers(frames):
    """header, parent_header, metadata, content (bytes) of a received message."""
    i = frames.index(DELIM)
    return frames[i + 2:i + 6]


class Raw:
    """One kernel's shell (DEALER) and iopub (SUB). Tracks one request in flight: done once
    its execute_reply and its status idle have both arrived. Received messages are not
    verified (the bench trusts its own kernels) and only the fields needed are parsed."""

    def __init__(self, ctx, conn, iopub=True):
        key = conn["key"]
        self.session = Session(key=key.encode() if isinstance(key, str) else key,
                               signature_scheme=conn.get("signature_scheme", "hmac-sha256"),
                               username="bench")
        self.shell = ctx.socket(zmq.DEALER)
        self.shell.linger = 0
        _curve_keys(self.shell, conn)
        self.shell.connect(_url(conn, "shell_port"))
        self.iopub = None
        if iopub:
            self.iopub = ctx.socket(zmq.SUB)
            self.iopub.linger = 0
            _curve_keys(self.iopub, conn)
            self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
            self.iopub.connect(_url(conn, "iopub_port"))
        self.pending = None
        self.got_reply = self.got_idle = False
        self.t0 = 0.0
        self.errors = 0
        self.poller = zmq.Poller()  # this client's own, for one-at-a-time round trips
        self.poller.register(self.shell, zmq.POLLIN)
        self.owner = {self.shell: self.on_shell}
        if self.iopub is not None:
            self.poller.register(self.iopub, zmq.POLLIN)
            self.owner[self.iopub] = self.on_iopub

    def send(self, code=ONE_PLUS_ONE):
        msg = self.session.msg("execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True})
        self.pending = msg["header"]["msg_id"]
        self.got_reply = self.got_idle = False
        self.t0 = time.perf_counter()
        self.session.send(self.shell, msg)

    def on_shell(self, frames):
        h = _headers(frames)
        if json.loads(h[1]).get("msg_id") == self.pending:
            self.got_reply = True
            if json.loads(h[3]).get("status") != "ok":
                self.errors += 1

    def on_iopub(self, frames):
        h = _headers(frames)
        if (b"status" in h[0] and json.loads(h[0]).get("msg_type") == "status"
                and json.loads(h[1]).get("msg_id") == self.pending
                and json.loads(h[3]).get("execution_state") == "idle"):
            self.got_idle = True

    @property
    def done(self):
        return self.got_reply and (self.got_idle or self.iopub is None)

    def close(self):
        self.shell.close(0)
        if self.iopub is not None:
            self.iopub.close(0)


def _drain(sock, handler):
    while True:
        try:
            frames = sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return
        handler(frames)


def wait_done(clients, timeout, need_idle=True):
    """Poll until every client's request is done (or only replied, need_idle=False)."""
    if len(clients) == 1:
        return _wait_one(clients[0], timeout, need_idle)
    poller = zmq.Poller()
    owner = {}
    for c in clients:
        for sock, handler in c.owner.items():
            poller.register(sock, zmq.POLLIN)
            owner[sock] = (c, handler)
    deadline = time.monotonic() + timeout

    def finished(c):
        return c.done if need_idle else c.got_reply

    while not all(finished(c) for c in clients):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        for sock, _ in poller.poll(max(1, int(left * 1000))):
            c, handler = owner[sock]
            _drain(sock, handler)
    return True


def _wait_one(c, timeout, need_idle):
    """wait_done for one client, on its own poller: the round trip's hot loop."""
    deadline = time.monotonic() + timeout
    owner = c.owner
    while not (c.done if need_idle else c.got_reply):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        for sock, _ in c.poller.poll(max(1, int(left * 1000))):
            _drain(sock, owner[sock])
    return True


def prime(c, timeout=30):
    """Until a `1+1` round trip completes with its idle status: the SUB socket is subscribed
    from then on (a SUB misses what is published before its subscription arrives)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        c.send()
        if not wait_done([c], EXEC_TIMEOUT, need_idle=False):
            raise BenchError("no execute_reply while priming a client")
        if wait_done([c], 1.0):
            return
    raise BenchError(f"iopub never delivered an idle status in {timeout} s")


def round_trips(c, n, warmup=50, code=ONE_PLUS_ONE):
    """n warm round trips of code (`1+1`) on one primed client: (latencies ms, client CPU ms
    per trip)."""
    for _ in range(warmup):
        c.send(code)
        if not wait_done([c], EXEC_TIMEOUT):
            raise BenchError("warm-up round trip timed out")
    times = []
    gc.collect()
    gc.disable()
    try:
        cpu0 = time.process_time()
        for _ in range(n):
            c.send(code)
            if not wait_done([c], EXEC_TIMEOUT):
                raise BenchError("round trip timed out")
            times.append(ms_since(c.t0))
        cpu = (time.process_time() - cpu0) * 1000 / n
    finally:
        gc.enable()
    if c.errors:
        raise BenchError(f"{c.errors} execute_replies were not ok")
    return times, cpu


def run_concurrent(clients, seconds):
    """Every client loops `1+1`, one request in flight each, for `seconds`. Returns
    (completed, elapsed s, latencies ms, client CPU share of one core)."""
    poller = zmq.Poller()
    owner = {}
    for c in clients:
        poller.register(c.shell, zmq.POLLIN)
        poller.register(c.iopub, zmq.POLLIN)
        owner[c.shell] = (c, c.on_shell)
        owner[c.iopub] = (c, c.on_iopub)
    lat = []
    gc.collect()
    gc.disable()
    try:
        cpu0 = time.process_time()
        t_start = time.perf_counter()
        t_end = t_start + seconds
        for c in clients:
            c.send()
        last_progress = time.monotonic()
        while True:
            now = time.perf_counter()
            if now >= t_end:
                break
            events = poller.poll(max(1, int((t_end - now) * 1000)))
            for sock, _ in events:
                c, handler = owner[sock]
                _drain(sock, handler)
                if c.pending is not None and c.done:
                    lat.append(ms_since(c.t0))
                    last_progress = time.monotonic()
                    c.pending = None
                    if time.perf_counter() < t_end:
                        c.send()
            if time.monotonic() - last_progress > EXEC_TIMEOUT:
                raise BenchError("concurrent loop: no progress for a minute")
        elapsed = time.perf_counter() - t_start
        cpu_share = (time.process_time() - cpu0) / elapsed
    finally:
        gc.enable()
    # Let what is in flight finish (not counted), so the next measurement starts clean.
    wait_done([c for c in clients if c.pending is not None], EXEC_TIMEOUT)
    errors = sum(c.errors for c in clients)
    if errors:
        raise BenchError(f"concurrent loop: {errors} execute_replies were not ok")
    return len(lat), elapsed, lat, cpu_share


def exec_all(ctx, conns, code, timeout=EXEC_TIMEOUT):
    """Run `code` once in each kernel (shell only, all at once); True if every reply came."""
    clients = [Raw(ctx, conn, iopub=False) for conn in conns]
    try:
        for c in clients:
            c.send(code)
        ok = wait_done(clients, timeout, need_idle=False)
        if sum(c.errors for c in clients):
            raise BenchError(f"{code!r} failed in a kernel")
        return ok
    finally:
        for c in clients:
            c.close()


# ---- kenneld -----------------------------------------------------------------------------------

_UID_SLOT = [0]


def _uid_base():
    """Host uids of our own for this run's kernels, away from kenneld's default range (other
    kennelds may run on this machine at the same time)."""
    _UID_SLOT[0] += 1
    return 1950000000 + (os.getpid() % 4000) * 12000 + _UID_SLOT[0] * 1000


class Kenneld:
    def __init__(self, label, args=(), env=None, wrap=()):
        self.label = label
        self.args = list(args)
        self.root = tempfile.mkdtemp(prefix="kb-", dir="/tmp")  # short: ipc paths are bounded
        self.state = os.path.join(self.root, "s")
        self.log_path = os.path.join(self.root, "kenneld.log")
        self.proc = None
        self.sock = None
        self.ctx = zmq.Context()
        self.info_cache = None
        LIVE.append(self)
        with open(self.log_path, "wb") as logf:
            self.proc = subprocess.Popen(
                [*wrap, KENNELD, "--state-dir", self.state, "--log-level", "warn",
                 "--uid-base", str(_uid_base()), *self.args],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                env=dict(os.environ, **(env or {})))

    def wait_started(self, timeout=60):
        path = os.path.join(self.state, "kenneld.json")
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if self.proc.poll() is not None:
                raise BenchError(f"kenneld {self.label} exited {self.proc.returncode}:\n"
                                 f"{self.log_tail()}")
            if time.monotonic() > deadline:
                raise BenchError(f"kenneld {self.label}: no kenneld.json in {timeout} s")
            time.sleep(0.02)
        with open(path) as f:
            mgr = json.load(f)["manager"]
        self.session = Session(key=mgr["key"].encode(), signature_scheme="hmac-sha256",
                               username="bench")
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(mgr["endpoint"])
        return self

    def log_tail(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def call_many(self, requests, timeout=CALL_TIMEOUT):
        """Send every (msg_type, content) at once; their reply contents, in order."""
        ids = []
        for msg_type, content in requests:
            ids.append(self.session.send(self.sock, msg_type, content)["header"]["msg_id"])
        replies = {}
        deadline = time.monotonic() + timeout
        while len(replies) < len(ids):
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"kenneld {self.label}: no {requests[0][0]} reply in {timeout} s"
                                 f" ({len(replies)} of {len(ids)} answered); its log ends:\n"
                                 f"{self.log_tail()[-1500:]}")
            if not self.sock.poll(int(min(left, 1) * 1000)):
                if self.proc.poll() is not None:
                    raise BenchError(f"kenneld {self.label} died (status {self.proc.returncode})"
                                     f" waiting for a {requests[0][0]} reply; its log ends:\n"
                                     f"{self.log_tail()[-600:]}")
                continue
            _, frames = self.session.feed_identities(self.sock.recv_multipart())
            msg = self.session.deserialize(frames)
            replies[msg["parent_header"].get("msg_id")] = msg["content"]
        return [replies[i] for i in ids]

    def call(self, msg_type, content=None, timeout=CALL_TIMEOUT):
        reply = self.call_many([(msg_type, content or {})], timeout)[0]
        if reply.get("status") != "ok":
            raise BenchError(f"kenneld {self.label}: {msg_type}: {reply}")
        return reply

    def stats(self):
        return self.call("stats_request")

    def create(self, name):
        return self.call("create_request", {"name": name})["session"]

    def end(self, name):
        self.call("end_request", {"session": name})

    def info(self, name):
        return self.call("info_request", {"session": name})["session"]

    def wait_pool(self, timeout=60):
        """Until every pooled kernel is ready (stats spawner.pool_ready == pool)."""
        deadline = time.monotonic() + timeout
        while True:
            sp = self.stats()["spawner"]
            if sp.get("kind") != "zygote" or sp.get("pool_ready", 0) >= sp.get("pool", 0):
                return
            if time.monotonic() > deadline:
                raise BenchError(f"kenneld {self.label}: pool not ready in {timeout} s: {sp}")
            time.sleep(0.01)

    def stop(self):
        if self.sock is not None:
            self.sock.close(0)
            self.sock = None
        self.ctx.term()
        if self.proc is not None and self.proc.poll() is None:
            tree = descendants(self.proc.pid)
            self.proc.send_signal(signal.SIGTERM)  # idle sessions save their state: <= 5 s
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            kill_tree(tree)
        shutil.rmtree(self.root, ignore_errors=True)


def conn_of(info):
    with open(info["connection_file"]) as f:
        return json.load(f)


def start_kennelds(specs, env=None):
    """Start several kennelds at once (their zygotes warm up in parallel)."""
    ks = [Kenneld(label, args, env) for label, args in specs]
    for k in ks:
        k.wait_started()
    return ks


# ---- ipykernel ---------------------------------------------------------------------------------

class IPy:
    """A Debian ipykernel of /usr/bin/python3, started by jupyter_client's KernelManager."""

    def __init__(self):
        self.km = KernelManager(kernel_cmd=[PY, "-m", "ipykernel_launcher", "-f",
                                            "{connection_file}"])
        self.pid = None
        self.stat = None
        LIVE.append(self)

    def start(self):
        self.km.start_kernel()
        self.pid = self.km.provisioner.process.pid
        self.stat = _stat(self.pid)
        return self

    def conn(self):
        return self.km.get_connection_info()

    def ready(self, timeout):
        """True once the kernel answers kernel_info; False if it died first or timed out."""
        kc = self.km.client()
        kc.start_channels(hb=False)  # see client_of
        try:
            kc.wait_for_ready(timeout=timeout)
            return True
        except (RuntimeError, TimeoutError):
            return False
        finally:
            kc.stop_channels()

    def stop(self):
        if self in LIVE:
            LIVE.remove(self)
        try:
            if self.km.has_kernel:
                self.km.shutdown_kernel(now=True)
        finally:
            if self.pid and self.stat:
                kill_tree({self.pid: self.stat})


def ipys_ready(count, attempts=3, timeout=120):
    """count ipykernels, started at once, each answering. jupyter_client picks a kernel's
    ports by binding and releasing them; another process can take one before the kernel
    binds it, and the kernel then dies with EADDRINUSE: such a kernel is started again."""
    ipys = [IPy().start() for _ in range(count)]
    for i in range(count):
        for _ in range(attempts):
            if ipys[i].ready(timeout):
                break
            log("  an ipykernel did not come up (a port taken meanwhile?); starting another")
            stop(ipys[i])
            ipys[i] = IPy().start()
        else:
            raise BenchError(f"an ipykernel did not come up in {attempts} attempts")
    return ipys


def stop(obj):
    try:
        obj.stop()
    finally:
        if obj in LIVE:
            LIVE.remove(obj)


class Echo:
    """The round trip's floors, in a process of their own. "echo": a bare ZeroMQ ROUTER that
    sends every message back. "kernel": a fake kernel on a ROUTER (shell) and a PUB (iopub)
    that answers an execute_request at once with what a kernel sends -- status busy,
    execute_input, execute_result, the execute_reply, status idle -- pre-serialized, unsigned,
    the request's header as parent: the same client, the same messages, no kernel work."""

    CODE = r"""
import sys, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.ROUTER)
port = s.bind_to_random_port('tcp://127.0.0.1')
if sys.argv[1] == 'echo':
    print(port, flush=True)
    while True:
        m = s.recv_multipart()
        if m[-1] == b'quit':
            break
        s.send_multipart(m)
    sys.exit(0)
pub = ctx.socket(zmq.PUB)
print(port, pub.bind_to_random_port('tcp://127.0.0.1'), flush=True)
def hdr(t):
    return ('{"msg_id": "x", "msg_type": "%s", "session": "s", "username": "u", '
            '"date": "2026-01-01T00:00:00.000000Z", "version": "5.3"}' % t).encode()
IOPUB = [(b'status', hdr('status'), b'{"execution_state": "busy"}'),
         (b'execute_input', hdr('execute_input'), b'{"code": "1+1", "execution_count": 1}'),
         (b'execute_result', hdr('execute_result'),
          b'{"data": {"text/plain": "2"}, "metadata": {}, "execution_count": 1}')]
IDLE = (b'status', hdr('status'), b'{"execution_state": "idle"}')
REPLY = (hdr('execute_reply'), b'{"status": "ok", "execution_count": 1, "user_expressions": {}}')
while True:
    m = s.recv_multipart()
    i = m.index(b'<IDS|MSG>')
    if m[-1] == b'quit':
        break
    parent = m[i + 2]
    for topic, h, c in IOPUB:
        pub.send_multipart([topic, b'<IDS|MSG>', b'', h, parent, b'{}', c])
    s.send_multipart(m[:i] + [b'<IDS|MSG>', b'', REPLY[0], parent, b'{}', REPLY[1]])
    pub.send_multipart([IDLE[0], b'<IDS|MSG>', b'', IDLE[1], parent, b'{}', IDLE[2]])
"""

    def __init__(self, mode="echo"):
        self.proc = subprocess.Popen([PY, "-c", self.CODE, mode], stdout=subprocess.PIPE,
                                     text=True)
        LIVE.append(self)
        ports = [int(x) for x in self.proc.stdout.readline().split()]
        self.port = ports[0]
        self.conn = {"transport": "tcp", "ip": "127.0.0.1", "shell_port": ports[0],
                     "iopub_port": ports[-1], "key": "floor"}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def zmq_floor(n, size=300):
    echo = Echo()
    ctx = zmq.Context()
    try:
        s = ctx.socket(zmq.DEALER)
        s.linger = 0
        s.connect(f"tcp://127.0.0.1:{echo.port}")
        poller = zmq.Poller()
        poller.register(s, zmq.POLLIN)
        payload = b"x" * size
        times = []
        gc.collect()
        gc.disable()
        try:
            for i in range(n + 50):
                if i == 50:
                    cpu0 = time.process_time()
                t = time.perf_counter()
                s.send(payload)
                if not poller.poll(10000):
                    raise BenchError("echo did not answer")
                s.recv()
                if i >= 50:
                    times.append(ms_since(t))
            cpu = (time.process_time() - cpu0) * 1000 / n
        finally:
            gc.enable()
        s.send(b"quit")
        s.close(0)
        return times, cpu
    finally:
        ctx.term()
        stop(echo)


def fake_kernel_trips(n):
    fake = Echo("kernel")
    ctx = zmq.Context()
    c = None
    try:
        c = Raw(ctx, fake.conn)
        prime(c)
        return round_trips(c, n)
    finally:
        if c is not None:
            c.shell.send_multipart([b"<IDS|MSG>", b"quit"])
            c.close()
        ctx.term()
        stop(fake)


# ---- 1 and 7: new session -> first result --------------------------------------------------------

def first_reply(kc, msg_id, timeout=EXEC_TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise BenchError("no execute_reply")
        m = kc.get_shell_msg(timeout=left)
        if m["parent_header"].get("msg_id") == msg_id:
            if m["content"]["status"] != "ok":
                raise BenchError(f"first cell failed: {m['content']}")
            return


def first_png(kc, msg_id, timeout=EXEC_TIMEOUT):
    """Until a display_data with image/png of this request arrives on iopub; its size."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise BenchError("no image/png on iopub")
        m = kc.get_iopub_msg(timeout=left)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        if m["msg_type"] == "display_data" and "image/png" in m["content"].get("data", {}):
            return len(m["content"]["data"]["image/png"])
        if m["msg_type"] == "error":
            raise BenchError(f"plot cell failed: {m['content'].get('evalue')}")


def client_of(connection_file):
    kc = BlockingKernelClient(connection_file=connection_file)
    kc.load_connection_file()
    # No heartbeat channel (kennel's and ipykernel's clients alike): jupyter_client 7.4's
    # makes its socket in a thread of its own, after stop_channels when that comes first, and
    # never closes it; a few hundred starts filled the shared context (1023 sockets) and the
    # next client failed with "Too many open files".
    kc.start_channels(hb=False)
    return kc


def warm_plots(kc, code, after):
    """After a session's first plot: its plot cell run `after` more times, back to back, each
    until its PNG and reply; the last one's ms (matplotlib's own cost in a warm kernel)."""
    ms = None
    for _ in range(after):
        t = time.perf_counter()
        msg_id = kc.execute(code)
        first_png(kc, msg_id)
        first_reply(kc, msg_id)
        ms = ms_since(t)
    return ms


def kennel_start(k, name, code=ONE_PLUS_ONE, png=False, warm_after=0):
    """create_request -> jupyter_client connects and executes at once -> reply (or PNG).
    Returns (total ms, create_request ms, png bytes or None, warm_plots' ms or None)."""
    t = time.perf_counter()
    info = k.create(name)
    t_create = ms_since(t)
    kc = client_of(info["connection_file"])
    try:
        msg_id = kc.execute(code)
        size = first_png(kc, msg_id) if png else first_reply(kc, msg_id)
        total = ms_since(t)
        if warm_after:
            first_reply(kc, msg_id)
        warm = warm_plots(kc, code, warm_after)
    finally:
        kc.stop_channels()
    k.end(name)
    return total, t_create, size, warm


def ipy_start(code=ONE_PLUS_ONE, png=False, warm_after=0):
    """KernelManager.start_kernel -> client -> execute at once -> reply (or PNG).
    (ms, size, warm_plots' ms or None)"""
    t = time.perf_counter()
    ipy = IPy().start()
    try:
        kc = ipy.km.client()
        kc.start_channels(hb=False)  # see client_of
        try:
            msg_id = kc.execute(code)
            size = first_png(kc, msg_id) if png else first_reply(kc, msg_id)
            total = ms_since(t)
            if warm_after:
                first_reply(kc, msg_id)
            warm = warm_plots(kc, code, warm_after)
        finally:
            kc.stop_channels()
    finally:
        stop(ipy)
    return total, size, warm


def spread(n_small, n_big):
    """The rounds (of n_big) on which the n_small series takes its turn, evenly spread."""
    return {min(n_big - 1, int(i * n_big / n_small)) for i in range(n_small)}


def bench_starts(res):
    """Measurements 1 and 7, interleaved round by round so load drifts hit every series."""
    log("starts: kenneld pool 2, pool 0, exec, exec --insecure-no-sandbox")
    ks = start_kennelds([("pool", []), ("pool0", ["--pool", "0"]),
                         ("exec", ["--spawner", "exec"]),
                         ("exec_insecure", ["--spawner", "exec", "--insecure-no-sandbox"])])
    try:
        roots = [k.proc.pid for k in ks]
        series = {k.label: {"total": [], "create": []} for k in ks}
        pool_settle_cpu, ipy = [], []
        ipy_rounds = spread(N["ipy_starts"], N["starts"])
        # One untimed start each: page cache, ipykernel's IPYTHONDIR.
        for k in ks:
            k.wait_pool()
            kennel_start(k, "warmup")
        ipy_start()
        for r in range(N["starts"]):
            for k in ks:
                k.wait_pool()
                settle(roots)
                total, create, _, _ = kennel_start(k, f"r{r}")
                series[k.label]["total"].append(total)
                series[k.label]["create"].append(create)
                if k.label == "pool":
                    # The refill: CPU the pool's tree still burns once pool_ready is back.
                    k.wait_pool()
                    _, cpu = settle([k.proc.pid])
                    pool_settle_cpu.append(cpu)
            if r in ipy_rounds:
                settle(roots)
                ipy.append(ipy_start()[0])
            log(f"  round {r + 1}/{N['starts']}: " + ", ".join(
                f"{lbl} {s['total'][-1]:.0f}" for lbl, s in series.items())
                + (f", ipykernel {ipy[-1]:.0f}" if r in ipy_rounds else "") + " ms")
        stats = ks[0].stats()
    finally:
        for k in ks:
            stop(k)
    out = {}
    for label, s in series.items():
        out[f"kennel_{label}"] = dict(summary(s["total"]), create_request_ms=summary(s["create"]))
    out["kennel_pool"]["refill_cpu_ms_after_pool_ready"] = dict(
        summary(pool_settle_cpu),
        what="CPU kenneld's tree used after stats said pool_ready == pool again, until quiet: "
             "work a pooled kernel still does after it counts as ready")
    out["ipykernel"] = summary(ipy)
    res["start_first_result_ms"] = out
    diffs = [a - b for a, b in zip(series["exec"]["total"], series["exec_insecure"]["total"])]
    setup = sandbox_setup_cost(N["sandbox_n"])
    setup_diffs = [a - b for a, b in zip(setup["sandboxed"], setup["plain"])]
    res["sandbox_spawn_cost_ms"] = {
        "what": "create -> first 1+1 with --spawner exec, sandboxed minus --insecure-no-sandbox,"
                " per consecutive pair",
        "difference": summary(diffs), "sandboxed": summary(series["exec"]["total"], False),
        "insecure": summary(series["exec_insecure"]["total"], False),
        "sandbox_layers": stats["sandbox"]["layers"],
        "setup_alone": {
            "what": "kennel-init -- /usr/bin/true minus /usr/bin/true, per consecutive pair: "
                    "namespaces, new root, rlimits, seccomp, init (no cgroups, no Python)",
            "difference": summary(setup_diffs), "sandboxed": summary(setup["sandboxed"], False),
            "plain": summary(setup["plain"], False)}}


def sandbox_setup_cost(n):
    """The sandbox's own cost, without Python or kenneld: kennel-init (namespaces, the new
    root, rlimits, seccomp, its init and reaper; kenneld's cgroups are not part of it) running
    /usr/bin/true, against /usr/bin/true run directly; interleaved. Times in ms."""
    init = os.path.join(ROOT, "bin", "kennel-init")
    root = tempfile.mkdtemp(prefix="kb-init-", dir="/tmp")
    try:
        ws = os.path.join(root, "workspace")
        os.mkdir(ws)
        uid = _uid_base()
        os.chown(ws, uid, uid)
        sandboxed = [init, "--workspace", ws, "--kernel-dir", os.path.join(ROOT, "kernels", "python"),
                     "--uid", str(uid), "--gid", str(uid), "--", "/usr/bin/true"]
        plain = ["/usr/bin/true"]
        times = {"sandboxed": [], "plain": []}
        for i in range(n + 3):
            for label, cmd in (("sandboxed", sandboxed), ("plain", plain)):
                t = time.perf_counter()
                p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
                took = ms_since(t)
                if p.returncode != 0:
                    raise BenchError(f"{cmd[0]} exited {p.returncode}: {p.stderr[-300:]!r}")
                if i >= 3:
                    times[label].append(took)
        return times
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---- 2: new session -> first PNG ---------------------------------------------------------------

def bench_png(res):
    log("png: kenneld (default: zygote, pool 2) against ipykernel")
    (k,) = start_kennelds([("png", [])])
    try:
        roots = [k.proc.pid]
        kennel, create, ipy, sizes = [], [], [], {}
        warm = {"kennel": [], "ipykernel": []}
        k.wait_pool()
        kennel_start(k, "warmup", PLOT_CELL, png=True)
        ipy_start(PLOT_CELL, png=True)
        ipy_rounds = spread(N["ipy_plots"], N["plots"])
        for r in range(N["plots"]):
            k.wait_pool()
            settle(roots)
            total, c, sizes["kennel"], w = kennel_start(k, f"p{r}", PLOT_CELL, png=True,
                                                         warm_after=WARM_PLOTS)
            kennel.append(total)
            warm["kennel"].append(w)
            create.append(c)
            if r in ipy_rounds:
                settle(roots)
                t, sizes["ipykernel"], w = ipy_start(PLOT_CELL, png=True,
                                                     warm_after=WARM_PLOTS)
                ipy.append(t)
                warm["ipykernel"].append(w)
            log(f"  round {r + 1}/{N['plots']}: kennel {kennel[-1]:.0f} ms"
                + (f", ipykernel {ipy[-1]:.0f} ms" if r in ipy_rounds else ""))
    finally:
        stop(k)
    res["first_png_ms"] = {"cell": PLOT_CELL,
                           "kennel": dict(summary(kennel), create_request_ms=summary(create)),
                           "ipykernel": summary(ipy), "png_base64_bytes": sizes,
                           "warm_plot": {"after": WARM_PLOTS,
                                         **{key: summary(v) for key, v in warm.items()}}}


# ---- 3: warm round trip ------------------------------------------------------------------------

def bench_rtt(res):
    log("rtt: warm 1+1 round trips, kennel (default kenneld) and ipykernel, and the floor")
    (k,) = start_kennelds([("rtt", [])])
    ctx = zmq.Context()
    clients = []
    ipy = None
    try:
        k.wait_pool()
        kc = Raw(ctx, conn_of(k.create("rtt")))
        clients.append(kc)
        ipy = IPy().start()
        ic = Raw(ctx, ipy.conn())
        clients.append(ic)
        prime(kc)
        prime(ic)
        # Two halves each, alternating, so a load change hits both.
        half = max(1, N["trips"] // 2)
        lat = {"kennel": [], "ipykernel": [], "zmq_floor": [], "fake_kernel": [],
               "long_kennel": [], "long_ipykernel": []}
        cpu = {"kennel": [], "ipykernel": [], "zmq_floor": [], "fake_kernel": []}
        for _ in range(2):
            for label, c in (("kennel", kc), ("ipykernel", ic)):
                times, per = round_trips(c, half)
                lat[label] += times
                cpu[label].append(per)
            times, per = zmq_floor(half)
            lat["zmq_floor"] += times
            cpu["zmq_floor"].append(per)
            times, per = fake_kernel_trips(half)
            lat["fake_kernel"] += times
            cpu["fake_kernel"].append(per)
        # A long cell: what IPython does per line of a cell, not per message.
        long_half = max(1, N["trips"] // 10)
        for _ in range(2):
            for label, c in (("kennel", kc), ("ipykernel", ic)):
                times, _ = round_trips(c, long_half, warmup=10, code=LONG_CELL)
                lat["long_" + label] += times
    finally:
        for c in clients:
            c.close()
        ctx.term()
        stop(k)
        if ipy is not None:
            stop(ipy)
    res["warm_rtt_ms"] = {
        "what": "execute 1+1 until execute_reply and status idle both arrived; lean client",
        "kennel": summary(lat["kennel"]), "ipykernel": summary(lat["ipykernel"]),
        "zmq_floor": dict(summary(lat["zmq_floor"]),
                          what="bare DEALER/ROUTER round trip, 300 B, tcp, to an echo process"),
        "fake_kernel": dict(summary(lat["fake_kernel"]),
                            what="the same client and messages against a fake kernel that "
                                 "answers at once (see Echo): the client's and ZeroMQ's share"),
        "long_cell": {"what": f"the same, a {len(LONG_CELL.splitlines())}-line cell of plain "
                              "Python (bench.py's LONG_CELL), ~2.5 ms of its own work",
                      "kennel": summary(lat["long_kennel"]),
                      "ipykernel": summary(lat["long_ipykernel"])},
        "client_cpu_ms_per_trip": {lbl: statistics.fmean(v) for lbl, v in cpu.items()},
        "client_cpu_note": "this process's CPU time (its Python and libzmq's I/O thread) per "
                           "trip: a kernel's trip is 1 shell + 4 iopub messages in, 1 out"}


# ---- rtt_cost: where a warm round trip's work goes (issue #27) ---------------------------------

def _build_tool(name, libs, shared=False, suffix=""):
    """Compile bench/<name>.c (with libs: flags and any further sources) into this run's
    own directory; its path."""
    out = os.path.join(tempfile.gettempdir(), f"kb-{os.getpid()}-{name}{suffix}"
                       + (".so" if shared else ""))
    cmd = ["cc", "-O2", "-Wall", "-o", out, os.path.join(ROOT, "bench", name + ".c"), *libs]
    if shared:
        cmd[1:1] = ["-shared", "-fPIC"]
    subprocess.run(cmd, check=True)
    return out


def _threads_cpu_ns(pid):
    """CPU time (ns, /proc schedstat) of pid's own threads: no child processes."""
    total = 0
    for task in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(task) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def _tree_cpu_ns(root_pid):
    """CPU time (ns, /proc schedstat: every thread) of root_pid and all its descendants."""
    return sum(_threads_cpu_ns(pid) for pid in [root_pid, *descendants(root_pid)])


def _strace_calls(pids, run, idle=True):
    """System calls made by pids (every thread: strace -f) while run() runs: {pid: (total,
    {name: calls})}. With idle, less those an idle spell as long makes (kenneld's timers: its
    sweep of readers every 100 ms), which strace's slowing of run() would count many times
    over (95 a cell against 78 counted by perf's tracepoints, which do not slow it)."""
    out = {}
    procs = []
    for pid in pids:
        path = os.path.join(tempfile.gettempdir(), f"kb-strace-{os.getpid()}-{pid}")
        procs.append((pid, path, subprocess.Popen(
            ["strace", "-c", "-f", "-q", "-o", path, "-p", str(pid)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
    time.sleep(1.0)  # attached to every thread
    t0 = time.perf_counter()
    try:
        run()
    finally:
        spell = time.perf_counter() - t0
        for pid, path, p in procs:
            p.send_signal(signal.SIGINT)
            p.wait(30)
            calls = {}
            with open(path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 5 and parts[-1] != "total" and parts[0][0].isdigit():
                        calls[parts[-1]] = int(parts[3])
            os.unlink(path)
            out[pid] = (sum(calls.values()), calls)
    if idle:
        base = _strace_calls(pids, lambda: time.sleep(spell), idle=False)
        for pid, (_, calls) in out.items():
            left = {k: max(0, v - base[pid][1].get(k, 0)) for k, v in calls.items()}
            out[pid] = (sum(left.values()), left)
    return out


def _kernel_python(kernel_pid):
    """The kernel's Python process: the child of the session's init (kernel_pid)."""
    kids = [p for p, st in descendants(kernel_pid).items() if st[1] == kernel_pid]
    return kids[0] if kids else kernel_pid


def _tool_ms(argv):
    """Run one of the bench's C tools, which prints a time in ms per line: those times."""
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=True).stdout
    return [float(x) for x in out.split()]


def _cclient_trips(conn, warmup, n):
    """n warm round trips of the C client (bench/cclient.c): latencies in ms."""
    return _tool_ms([CCLIENT[0], _url(conn, "shell_port"), _url(conn, "iopub_port"),
                     conn["key"], str(warmup), str(n)])


def _hmac_instructions(dump):
    """Instructions a callgrind dump spent in kenneld's HMACs (signing and checking, inclusive):
    valgrind does not emulate the CPU's SHA instructions, so libcrypto's SHA-256 runs its
    plain x86 code there, several times the instructions it takes on the CPU."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", dump],
                         capture_output=True, text=True, timeout=120).stdout
    total = 0
    for line in out.splitlines():
        if re.search(r"hmac\.c:hmac_(sign|check_feed|check_end) \[", line):  # (once each)
            total += int(line.split()[0].replace(",", ""))
    return total


CCLIENT = [None]
COST_BASELINE_K = 1107  # kenneld's instructions per warm 1+1 at 93718ff, before issue #27


def bench_rtt_cost(res):
    n = N["cost_trips"]
    log(f"rtt_cost: per warm `1+1`, over {n} round trips: kenneld's instructions (callgrind), "
        "kenneld's and the kernel's system calls (strace) and CPU; the C client's round trip")
    CCLIENT[0] = _build_tool("cclient", ["-lzmq", "-lsodium"])
    shim = _build_tool("pidfd_shim", ["-lpthread"], shared=True)
    out = {}
    (k,) = start_kennelds([("rtt_cost", [])])
    ctx = zmq.Context()
    c = None
    try:
        k.wait_pool(300)
        info = k.create("cost")
        conn = conn_of(info)
        c = Raw(ctx, conn)
        prime(c)
        round_trips(c, 1, warmup=50)
        kpy = _kernel_python(info["kernel_pid"])
        # The pool refills after the create (a fork and a kernel's warm-up): not in the count.
        k.wait_pool(300)
        # CPU from schedstat: kenneld's own threads (not its zygote and pool) and the
        # kernel's Python.
        kd0, kp0 = _threads_cpu_ns(k.proc.pid), _tree_cpu_ns(kpy)
        half = max(1, n // 2)
        times = round_trips(c, n, warmup=0)[0]
        kd1, kp1 = _threads_cpu_ns(k.proc.pid), _tree_cpu_ns(kpy)
        out["kenneld_cpu_ms"] = (kd1 - kd0) / 1e6 / n
        out["kernel_cpu_ms"] = (kp1 - kp0) / 1e6 / n
        out["lean_python_client"] = summary(times)
        counts = _strace_calls([k.proc.pid, kpy], lambda: round_trips(c, n, warmup=0))
        total, calls = counts[k.proc.pid]
        out["kenneld_syscalls"] = total / n
        out["kenneld_syscalls_by_name"] = {name: v / n for name, v in
                                           sorted(calls.items(), key=lambda x: -x[1])[:12]}
        total, calls = counts[kpy]
        out["kernel_syscalls"] = total / n
        out["kernel_syscalls_by_name"] = {name: v / n for name, v in
                                          sorted(calls.items(), key=lambda x: -x[1])[:12]}
        # The C client and the lean Python client, in alternating halves.
        lat = {"c": [], "python": []}
        for _ in range(2):
            lat["c"] += _cclient_trips(conn, 50, half)
            lat["python"] += round_trips(c, half)[0]
        out["c_client"] = summary(lat["c"])
        out["python_client"] = summary(lat["python"])
    finally:
        if c is not None:
            c.close()
        ctx.term()
        stop(k)
    # Instructions: kenneld under callgrind (valgrind 3.19 lacks pidfd_open: the shim stands in
    # for it; and open_tree: so no sandbox, which changes nothing of a warm cell's path in
    # kenneld). Counters zeroed after the warm-up, dumped after n round trips; all threads.
    cg_dir = tempfile.mkdtemp(prefix="kb-cg-", dir="/tmp")
    k = Kenneld("callgrind", ["--insecure-no-sandbox", "--pool", "1"],
                env={"LD_PRELOAD": shim},
                wrap=["valgrind", "--tool=callgrind", "-q",
                      f"--callgrind-out-file={cg_dir}/cg.%p"])
    ctx = zmq.Context()
    c = None
    try:
        k.wait_started(300)
        k.wait_pool(300)
        c = Raw(ctx, conn_of(k.create("cost")))
        prime(c)
        round_trips(c, 1, warmup=50)
        subprocess.run(["callgrind_control", "-z", str(k.proc.pid)], check=True,
                       capture_output=True)
        round_trips(c, n, warmup=0)
        subprocess.run(["callgrind_control", "-d", str(k.proc.pid)], check=True,
                       capture_output=True)
        dumps = glob.glob(os.path.join(cg_dir, "cg.*.1"))
        with open(dumps[0]) as f:
            total = next(int(line.split()[1]) for line in f if line.startswith("totals:"))
        out["kenneld_instructions"] = total / n
        out["kenneld_hmac_instructions"] = _hmac_instructions(dumps[0]) / n
    finally:
        if c is not None:
            c.close()
        ctx.term()
        stop(k)
        shutil.rmtree(cg_dir, ignore_errors=True)
    for path in (CCLIENT[0], shim):
        os.unlink(path)
    out["n"] = n
    res["rtt_cost"] = out
    log(f"  kenneld: {out['kenneld_instructions'] / 1e3:.0f} k instructions, "
        f"{out['kenneld_syscalls']:.1f} system calls, {out['kenneld_cpu_ms']:.3f} ms CPU a cell; "
        f"kernel: {out['kernel_cpu_ms']:.3f} ms CPU, {out['kernel_syscalls']:.1f} system calls; "
        f"C client p50 {out['c_client']['median']:.3f} ms, Python {out['python_client']['median']:.3f} ms")


# ---- floods: a neighbour's round trip while another session floods its iopub -------------------

FLOODS = {
    "tiny": "from IPython.display import clear_output\nfor i in range(150000): clear_output()",
    "lines": "for i in range(150000): print(i, flush=True)",
}


READER = """
import sys, zmq
sub = zmq.Context().socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(sys.argv[1])
print("ready", flush=True)
while True:
    sub.recv_multipart()
"""


def bench_flood(res):
    log("flood: a neighbour's warm 1+1 while another session floods (tiny messages, lines), "
        "its client lagging or reading")
    (k,) = start_kennelds([("flood", [])])
    ctx = zmq.Context()
    clients = []
    lat = {"quiet": []}
    reader = None
    try:
        k.wait_pool()
        nb = Raw(ctx, conn_of(k.create("neighbour")))
        clients.append(nb)
        prime(nb)
        # lagging: the flooder's client is subscribed and does not read while the neighbour
        # is timed; reading: its only subscriber is a process of its own that reads as fast
        # as it can, so kenneld sends (and signs) all it may.
        fl = {"lagging": Raw(ctx, conn_of(k.create("flooder-lagging")))}
        conn = conn_of(k.create("flooder-reading"))
        fl["reading"] = Raw(ctx, conn, iopub=False)
        clients += fl.values()
        prime(fl["lagging"])
        reader = subprocess.Popen([sys.executable, "-c", READER, _url(conn, "iopub_port")],
                                  stdout=subprocess.PIPE, text=True)
        reader.stdout.readline()
        time.sleep(0.5)  # its subscription is in
        half = max(1, N["flood_trips"] // 2)
        for _ in range(2):
            times, _ = round_trips(nb, half, warmup=10)
            lat["quiet"] += times
            for name, code in FLOODS.items():
                for client, c in fl.items():
                    c.send(code)
                    times, _ = round_trips(nb, half, warmup=0)
                    lat.setdefault(f"{name}_{client}", []).extend(times)
                    if not wait_done([c], 300):
                        raise BenchError(f"the {name} flood never ended")
    finally:
        if reader is not None:
            reader.kill()
            reader.wait()
        for c in clients:
            c.close()
        ctx.term()
        stop(k)
    quiet = summary(lat["quiet"])
    res["flood_rtt_ms"] = {
        "what": "a neighbour session's warm 1+1 round trip (lean client), quiet and while "
                "another session's cell floods iopub, its client lagging (subscribed, not "
                "reading) or reading as fast as it can (a process of its own): "
                + "; ".join(f"{n}: {c!r}" for n, c in FLOODS.items()),
        "quiet": quiet,
        **{key: dict(summary(v), vs_quiet=round(statistics.median(v) / quiet["median"], 2))
           for key, v in lat.items() if key != "quiet"},
    }


# ---- 4, 5, 6: memory, concurrency, many sessions ----------------------------------------------

def grow(k, names, created, deadline, ctx, batch=10):
    """Create sessions `names` not yet in `created` and run IMPORT_CELL in each, `batch` at a
    time. Stops at the deadline or when the machine runs short of memory. Returns why it
    stopped early, or None."""
    todo = [n for n in names if n not in created]
    for i in range(0, len(todo), batch):
        if time.monotonic() > deadline:
            return "BENCH_CREATE_TIMEOUT reached"
        if mem_available() < MIN_MEM_AVAILABLE:
            return f"MemAvailable under {MIN_MEM_AVAILABLE >> 30} GiB"
        chunk = todo[i:i + batch]
        replies = k.call_many([("create_request", {"name": n}) for n in chunk], timeout=120)
        infos = []
        for n, rep in zip(chunk, replies):
            if rep.get("status") != "ok":
                return f"create_request failed at {len(created)} sessions: {rep.get('evalue')}"
            created[n] = rep["session"]
            infos.append(rep["session"])
        if not exec_all(ctx, [conn_of(s) for s in infos], IMPORT_CELL, timeout=120):
            return f"a new session did not answer within 120 s (at {len(created)} sessions)"
        if len(created) % 50 < batch:
            log(f"  {len(created)} sessions")
    return None


def session_mem(k, names):
    out = []
    for n in names:
        s = k.info(n)
        out.append({"pss": s["pss_bytes"], "uss": s["uss_bytes"], "cgroup": s["memory_bytes"]})
    return out


def bench_fleet(res):
    log(f"fleet: kenneld --pool 0 --idle 0 --max-sessions {N['many'] + 8}: one session, then "
        f"{N['idle_n']}, then {N['many']}")
    ctx = zmq.Context()
    clients = []
    fleet = {}
    k = None
    env = {}  # kenneld sizes czmq's socket cap from --max-sessions itself
    try:
        (k,) = start_kennelds([("fleet", ["--pool", "0", "--idle", "0",
                                          "--max-sessions", str(N["many"] + 8)])], env)
        created = {}
        deadline = time.monotonic() + N["create_timeout"]
        # One session: its memory after the imports, and the round trip with one alive.
        probe = k.create("probe")
        created["probe"] = probe
        pc = Raw(ctx, conn_of(probe))
        clients.append(pc)
        pc.send(IMPORT_CELL)
        if not wait_done([pc], EXEC_TIMEOUT):
            raise BenchError("the probe session did not run the imports")
        time.sleep(1)
        single = fleet["single"] = session_mem(k, ["probe"])[0]
        prime(pc)
        rtt_one, _ = round_trips(pc, N["trips"])
        log(f"  1 session: pss {single['pss'] / MiB:.1f} MiB, uss {single['uss'] / MiB:.1f} MiB,"
            f" rtt p50 {statistics.median(rtt_one):.2f} ms")

        # N idle sessions: total PSS.
        t = time.monotonic()
        stopped = grow(k, ["probe"] + [f"i{i}" for i in range(N["idle_n"] - 1)], created,
                       deadline, ctx)
        grow_s = time.monotonic() - t
        time.sleep(2)
        idle_names = list(created)[:N["idle_n"]]
        mems = session_mem(k, idle_names)
        zygote_pid = k.stats()["spawner"]["zygote_pid"]
        zygote = smaps(zygote_pid) if zygote_pid else None
        kenneld_mem = smaps(k.proc.pid)
        total = sum(m["pss"] for m in mems) + (zygote["pss"] if zygote else 0)
        fleet["idle"] = {
            "n": len(mems), "stopped_early": stopped, "create_and_import_s": grow_s,
            "sessions_pss_bytes": sum(m["pss"] for m in mems),
            "zygote_pss_bytes": zygote["pss"] if zygote else None,
            "total_pss_bytes": total, "kenneld_pss_bytes": kenneld_mem["pss"],
            "per_session_pss": summary([m["pss"] for m in mems], False),
            "per_session_uss": summary([m["uss"] for m in mems], False),
            "per_session_cgroup": summary([m["cgroup"] for m in mems], False)}
        log(f"  {len(mems)} idle sessions: {total / MiB:.0f} MiB PSS with the zygote")

        # Concurrency: BENCH_CONC of them (not the probe) loop 1+1; the others stay idle.
        if len(created) < N["conc"] + 1:
            stopped = grow(k, [f"c{i}" for i in range(N["conc"] + 1 - len(created))], created,
                           deadline, ctx) or stopped
        conc_names = [n for n in created if n != "probe"][:N["conc"]]
        cc = [Raw(ctx, conn_of(created[n])) for n in conc_names]
        clients += cc
        for c in cc:
            prime(c)
        done, elapsed, lat, cpu_share = run_concurrent(cc, N["conc_seconds"])
        fleet["concurrent"] = {"sessions": len(cc), "executes": done, "seconds": elapsed,
                               "executes_per_s": done / elapsed,
                               "latency_ms": summary(lat, False), "client_cpu_share": cpu_share,
                               "other_idle_sessions": len(created) - len(cc)}
        log(f"  {len(cc)} sessions at once: {done / elapsed:.0f} executes/s, "
            f"p99 {pct(lat, 99):.1f} ms (client used {cpu_share * 100:.0f}% of a core)")
        for c in cc:
            c.close()
            clients.remove(c)

        # Many: grow to BENCH_MANY, then the probe's round trip again.
        t = time.monotonic()
        try:
            stopped = grow(k, [f"m{i}" for i in range(N["many"] - len(created))], created,
                           deadline, ctx) or stopped
        except BenchError as e:
            fleet["many"] = {"error": str(e), "sessions_reached": len(created),
                             "rtt_one_ms": summary(rtt_one)}
            raise
        many_s = time.monotonic() - t
        time.sleep(2)
        prime(pc)
        rtt_many, _ = round_trips(pc, N["trips"])
        alive = k.stats()["sessions"]
        total_many = sum(smaps_tree_pss(k.proc.pid).values())
        fleet["many"] = {
            "sessions": alive, "asked": N["many"], "stopped_early": stopped,
            "grow_s": many_s, "rtt_one_ms": summary(rtt_one), "rtt_many_ms": summary(rtt_many),
            "p50_ratio": statistics.median(rtt_many) / statistics.median(rtt_one),
            "p99_ratio": pct(rtt_many, 99) / pct(rtt_one, 99),
            "kenneld_tree_pss_bytes": total_many}
        log(f"  {alive} sessions: rtt p50 {statistics.median(rtt_many):.2f} ms "
            f"(one: {statistics.median(rtt_one):.2f} ms)")
        fleet["single"] = single
    except BenchError as e:
        fleet.setdefault("error", str(e))
        log(f"  fleet (kennel) failed: {e}")
    finally:
        for c in clients:
            c.close()
        if k is not None:
            log("  stopping the fleet's kenneld")
            stop(k)
        ctx.term()

    # ipykernel: one kernel's memory after the imports, N idle kernels, then concurrency.
    log(f"fleet: {max(N['ipy_idle_n'], N['ipy_conc'])} ipykernels")
    ctx = zmq.Context()
    ipys, clients = [], []
    try:
        # A lone kernel first, as kennel's probe session was alone (with its zygote).
        ipys += ipys_ready(1)
        if not exec_all(ctx, [ipys[0].conn()], IMPORT_CELL, timeout=120):
            raise BenchError("the ipykernel did not run the imports")
        time.sleep(1)
        ipy_single = smaps(ipys[0].pid)
        ipys += ipys_ready(N["ipy_idle_n"] - 1)
        if not exec_all(ctx, [i.conn() for i in ipys[1:]], IMPORT_CELL, timeout=180):
            raise BenchError("ipykernels did not run the imports")
        time.sleep(2)
        mems = [smaps(i.pid) for i in ipys]
        per_pss = statistics.fmean(m["pss"] for m in mems)
        ipy_idle = {"n": len(mems), "per_kernel_pss": summary([m["pss"] for m in mems], False),
                    "per_kernel_uss": summary([m["uss"] for m in mems], False),
                    "total_pss_bytes": sum(m["pss"] for m in mems),
                    "extrapolated_to": N["idle_n"],
                    "extrapolated_total_pss_bytes": per_pss * N["idle_n"]}
        ipys += ipys_ready(max(0, N["ipy_conc"] - len(ipys)))
        cc = [Raw(ctx, i.conn()) for i in ipys[:N["ipy_conc"]]]
        clients += cc
        for c in cc:
            prime(c)
        done, elapsed, lat, cpu_share = run_concurrent(cc, N["conc_seconds"])
        ipy_conc = {"kernels": len(cc), "executes": done, "seconds": elapsed,
                    "executes_per_s": done / elapsed, "latency_ms": summary(lat, False),
                    "client_cpu_share": cpu_share}
        log(f"  {len(cc)} ipykernels at once: {done / elapsed:.0f} executes/s, "
            f"p99 {pct(lat, 99):.1f} ms")
    finally:
        for c in clients:
            c.close()
        ctx.term()
        for i in ipys:
            stop(i)
    res["fleet_kenneld_env"] = fleet.get("kenneld_env", {})
    if "single" in fleet or "idle" in fleet:
        res["idle_memory_bytes"] = {
            "what": f"after `{IMPORT_CELL}`, idle 1 s+; kennel: the session's process tree "
                    "(info_request), ipykernel: the kernel process (smaps_rollup)",
            "kennel": fleet.get("single"), "ipykernel": ipy_single}
    if "idle" in fleet:
        res["fleet_memory"] = {"kennel": fleet["idle"], "ipykernel": ipy_idle}
    if "concurrent" in fleet:
        res["concurrent"] = {"kennel": fleet["concurrent"], "ipykernel": ipy_conc}
    if "many" in fleet:
        res["many_sessions"] = fleet["many"]
    if "error" in fleet:
        raise BenchError(f"kennel's fleet: {fleet['error']}")


def smaps_tree_pss(root):
    out = {}
    for pid in [root, *descendants(root)]:
        m = smaps(pid)
        if m:
            out[pid] = m["pss"]
    return out


# ---- 8: a burst of new sessions ----------------------------------------------------------------

def _burst_once(ctx, k, names):
    """create_requests for names at once to kenneld k, each session executing 1+1 as soon as
    its create reply comes: (answered ms, create replied ms), from the first send."""
    t = time.perf_counter()
    for n in names:
        k.session.send(k.sock, "create_request", {"name": n})
    answered, created, clients = [], [], []
    poller = zmq.Poller()
    poller.register(k.sock, zmq.POLLIN)
    owner = {}
    deadline = time.monotonic() + 120
    try:
        while len(answered) < len(names):
            if time.monotonic() > deadline:
                raise BenchError("burst: not every session answered in 120 s")
            for sock, _ in poller.poll(1000):
                if sock is k.sock:
                    _, frames = k.session.feed_identities(k.sock.recv_multipart())
                    msg = k.session.deserialize(frames)
                    created.append(ms_since(t))
                    if msg["content"].get("status") != "ok":
                        raise BenchError(f"burst: create failed: {msg['content']}")
                    c = Raw(ctx, conn_of(msg["content"]["session"]), iopub=False)
                    clients.append(c)
                    owner[c.shell] = c
                    poller.register(c.shell, zmq.POLLIN)
                    c.send()
                else:
                    c = owner[sock]
                    _drain(sock, c.on_shell)
                    if c.got_reply and c.pending is not None:
                        answered.append(ms_since(t))
                        c.pending = None
    finally:
        for c in clients:
            c.close()
    return answered, created


def _kennel_burst(ctx, label, args, again=False):
    """BENCH_BURST create_requests at once to a kenneld started with args; the timings. again:
    end them, wait until the pool has grown to the burst and refilled, and time a second
    burst (and what the grown pool's waiting kernels hold)."""
    (k,) = start_kennelds([(label, ["--max-sessions", str(N["burst"] + 8), *args])])
    try:
        k.wait_pool()
        settle([k.proc.pid])
        names = [f"b{i}" for i in range(N["burst"])]
        answered, created = _burst_once(ctx, k, names)
        out = {"sessions": len(names), "kenneld_args": args, "all_answered_ms": max(answered),
               "answered_ms": summary(answered), "create_replied_ms": summary(created),
               "from_pool": k.stats()["spawner"]["pool"]}
        log(f"  kennel{' ' + ' '.join(args) if args else ''}: all {len(names)} answered after "
            f"{out['all_answered_ms']:.0f} ms (create replies from {min(created):.0f} to "
            f"{max(created):.0f} ms)")
        if again:
            for n in names:
                k.call("end_request", {"session": n})
            sp = k.stats()["spawner"]
            deadline = time.monotonic() + 120
            while sp["pool_ready"] < sp["pool_target"] and time.monotonic() < deadline:
                time.sleep(0.05)
                sp = k.stats()["spawner"]
            settle([k.proc.pid])
            zygote = sp["zygote_pid"]
            # A waiting kernel is kenneld's child (its kennel-init) and what runs below it.
            table = process_table()
            waiting = [p for p, st in descendants(k.proc.pid, table).items()
                       if st[1] == k.proc.pid and p != zygote]
            mems = [[m for m in map(smaps, [p, *descendants(p, table)]) if m] for p in waiting]
            pss = [sum(m["pss"] for m in ms) for ms in mems]
            uss = [sum(m["uss"] for m in ms) for ms in mems]
            answered, created = _burst_once(ctx, k, [f"a{i}" for i in range(N["burst"])])
            out["again"] = {"pool_target": sp["pool_target"], "pool_ready": sp["pool_ready"],
                            "waiting_kernels": len(pss), "waiting_pss_mib": sum(pss) / MiB,
                            "waiting_uss_mib": sum(uss) / MiB,
                            "all_answered_ms": max(answered), "answered_ms": summary(answered)}
            log(f"  kennel, the next burst: the pool grew to {sp['pool_target']} "
                f"({len(pss)} waiting kernels, {sum(uss) / MiB:.0f} MiB USS and "
                f"{sum(pss) / MiB:.0f} MiB PSS in all): all "
                f"{len(answered)} answered after {max(answered):.0f} ms")
    finally:
        stop(k)
    return out


def bench_burst(res):
    log(f"burst: {N['burst']} kennel sessions created at once (default pool, then a pool of "
        f"{N['burst']}), {N['ipy_burst']} ipykernels")
    ctx = zmq.Context()
    try:
        kennel = _kennel_burst(ctx, "burst", [], again=True)
        pooled = _kennel_burst(ctx, "burst-pool", ["--pool", str(N["burst"])])
    finally:
        ctx.term()
    ctx = zmq.Context()
    ipys, clients = [], []
    try:
        t = time.perf_counter()
        for _ in range(N["ipy_burst"]):
            ipys.append(IPy().start())
        clients = [Raw(ctx, i.conn(), iopub=False) for i in ipys]
        for c in clients:
            c.send()
        answered = []
        poller = zmq.Poller()
        owner = {}
        for c in clients:
            poller.register(c.shell, zmq.POLLIN)
            owner[c.shell] = c
        deadline = time.monotonic() + 180
        while len(answered) < len(clients):
            if time.monotonic() > deadline:
                raise BenchError("burst: not every ipykernel answered in 180 s")
            for sock, _ in poller.poll(1000):
                c = owner[sock]
                _drain(sock, c.on_shell)
                if c.got_reply and c.pending is not None:
                    answered.append(ms_since(t))
                    c.pending = None
        ipy = {"kernels": len(clients), "all_answered_ms": max(answered),
               "answered_ms": summary(answered)}
    finally:
        for c in clients:
            c.close()
        ctx.term()
        for i in ipys:
            stop(i)
    log(f"  ipykernel: all {len(ipys)} answered after {ipy['all_answered_ms']:.0f} ms")
    res["burst"] = {"what": "sessions asked for at once, each executing 1+1 as soon as it "
                            "exists (jupyter's 20-at-once target); kennel.again: the next "
                            "burst, once the default pool has grown to the last one; "
                            "kennel_pooled: kenneld --pool N, a pool as large as the burst",
                    "kennel": kennel, "kennel_pooled": pooled, "ipykernel": ipy}


# ---- 9: kennel mcp -------------------------------------------------------------------------------

class Mcp:
    """`kennel mcp --session NAME` on kenneld k, driven by raw JSON-RPC lines."""

    def __init__(self, k, session):
        self.buf = b""
        self.next_id = 0
        LIVE.append(self)
        with open(os.path.join(k.root, "mcp.log"), "wb") as logf:
            self.proc = subprocess.Popen([KENNEL, "--state-dir", k.state, "mcp", "--session",
                                          session], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=logf)

    def call(self, method, params, timeout=EXEC_TIMEOUT):
        """One request, its answer's result (an error raises)."""
        self.next_id += 1
        line = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                           "params": params}).encode() + b"\n"
        os.write(self.proc.stdin.fileno(), line)
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"kennel mcp: no answer to {method} in {timeout} s")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise BenchError(f"kennel mcp exited ({self.proc.wait(5)})")
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        msg = json.loads(line)
        if msg.get("id") != self.next_id or "result" not in msg:
            raise BenchError(f"kennel mcp: {method}: {msg}")
        return msg["result"]

    def run(self, code):
        r = self.call("tools/call", {"name": "run_python", "arguments": {"code": code}})
        if r.get("isError"):
            raise BenchError(f"kennel mcp: run_python({code!r}) failed: {r}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()  # its end of input: it exits
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def mcp_trips(m, n):
    times = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(n):
            t = time.perf_counter()
            m.run(ONE_PLUS_ONE)
            times.append(ms_since(t))
    finally:
        gc.enable()
    return times


def bench_mcp(res):
    log(f"mcp: {N['mcp_trips']} run_python('1+1') calls through kennel mcp, warm, against a "
        "direct client of the same session")
    (k,) = start_kennelds([("mcp", [])])
    ctx = zmq.Context()
    m, kc = None, None
    try:
        k.wait_pool()
        m = Mcp(k, "mcp")
        m.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "bench", "version": "0"}})
        t = time.perf_counter()
        m.run(ONE_PLUS_ONE)  # the session is made here
        first = ms_since(t)
        for _ in range(50):
            m.run(ONE_PLUS_ONE)
        kc = Raw(ctx, conn_of(k.create("mcp")))  # the same session, found by name
        prime(kc)
        half = max(1, N["mcp_trips"] // 2)
        lat = {"mcp": [], "direct": []}
        for _ in range(2):
            lat["mcp"] += mcp_trips(m, half)
            lat["direct"] += round_trips(kc, half, warmup=10)[0]
    finally:
        if kc is not None:
            kc.close()
        ctx.term()
        if m is not None:
            stop(m)
        stop(k)
    res["mcp_ms"] = {"what": "tools/call run_python('1+1') through kennel mcp over stdio, raw "
                             "JSON-RPC lines, from the request written to its answer read",
                     "first_call_ms": first, "kennel_mcp": summary(lat["mcp"]),
                     "direct": dict(summary(lat["direct"]),
                                    what="the lean Jupyter client's 1+1 round trip on the same "
                                         "session, interleaved")}
    log(f"  kennel mcp p50 {statistics.median(lat['mcp']):.2f} ms, direct "
        f"{statistics.median(lat['direct']):.2f} ms")


# ---- kennel-gateway ------------------------------------------------------------------------------

GATEWAY = os.path.join(ROOT, "bin", "kennel-gateway")
GW_TOKEN = "bench-" + "t" * 26


def _free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def _wait_http(url, proc, what, timeout=60):
    import urllib.request
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise BenchError(f"{what} exited {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError as e:
            if getattr(e, "code", None) in (401, 403):
                return
            if time.monotonic() > deadline:
                raise BenchError(f"{what} did not answer in {timeout} s")
            time.sleep(0.1)


class Proc:
    """A process started here (kennel-gateway, Notebook's server), ended by pid."""

    def __init__(self, cmd, log_path, env=None):
        self.log_path = log_path
        with open(log_path, "wb") as logf:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf,
                                         stderr=subprocess.STDOUT, env=env)
        LIVE.append(self)

    def stop(self):
        if self in LIVE:
            LIVE.remove(self)
        tree = descendants(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        kill_tree(tree)


class WsClient:
    """A lean Jupyter client over one WebSocket (Jupyter Server's JSON frames)."""

    def __init__(self, url, headers=()):
        import websocket
        self.ws = websocket.create_connection(url, timeout=EXEC_TIMEOUT, header=list(headers))
        self.session = os.urandom(16).hex()
        self.n = 0
        self.cpu_ms = []  # the client's own CPU per trip, per series

    def trip(self, code=ONE_PLUS_ONE):
        self.n += 1
        msg_id = f"{self.session}-{self.n}"
        msg = json.dumps({"header": {"msg_id": msg_id, "msg_type": "execute_request",
                                     "session": self.session, "username": "bench",
                                     "version": "5.3", "date": "2026-01-01T00:00:00Z"},
                          "parent_header": {}, "metadata": {}, "channel": "shell",
                          "buffers": [], "content": {"code": code, "silent": False,
                                                     "store_history": True,
                                                     "user_expressions": {},
                                                     "allow_stdin": False}})
        t = time.perf_counter()
        self.ws.send(msg)
        reply = idle = False
        while not (reply and idle):
            m = json.loads(self.ws.recv())
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            if m["channel"] == "shell":
                reply = True
                if m["content"].get("status") != "ok":
                    raise BenchError(f"execute over the WebSocket: {m['content']}")
            elif m["header"]["msg_type"] == "status" and \
                    m["content"]["execution_state"] == "idle":
                idle = True
        return ms_since(t)

    def trips(self, n, warmup=0):
        for _ in range(warmup):
            self.trip()
        gc.collect()
        gc.disable()
        try:
            cpu0 = time.process_time()
            out = [self.trip() for _ in range(n)]
            self.cpu_ms.append((time.process_time() - cpu0) * 1000 / max(n, 1))
            return out
        finally:
            gc.enable()

    def close(self):
        self.ws.close()


def _post_json(url, body, headers=None):
    import urllib.request
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers=dict(headers or {}, **{"Content-Type": "application/json"}))
    with urllib.request.urlopen(req, timeout=CALL_TIMEOUT) as r:
        return json.loads(r.read())


def _serving_pid(gw):
    """The process that serves: the gateway's child when it dropped privileges, else itself."""
    try:
        with open(f"/proc/{gw.proc.pid}/task/{gw.proc.pid}/children") as f:
            kids = [int(p) for p in f.read().split()]
    except OSError:
        kids = []
    return kids[0] if kids else gw.proc.pid


def bench_gateway(res):
    import websocket
    n = N["gw_trips"]
    log(f"gateway: {n} warm 1+1 round trips over kennel-gateway's WebSocket, over Notebook's "
        f"(ipykernel), and direct; {N['gw_idle_ws']} idle WebSockets")
    mgr_port, gw_port, nb_port = _free_port(), _free_port(), _free_port()
    (k,) = start_kennelds([("gateway", ["--manager", f"tcp://127.0.0.1:{mgr_port}", "--admit-user", "nobody"])])
    ctx = zmq.Context()
    clients = []
    try:
        k.wait_pool()
        tokens = os.path.join(k.root, "tokens")
        with open(tokens, "w") as f:
            f.write(f"{GW_TOKEN} bench\n")
        os.chmod(tokens, 0o600)
        gw = Proc([GATEWAY, "--state-dir", k.state, "--listen", f"127.0.0.1:{gw_port}",
                   "--tokens", tokens, "--max-conns", str(N["gw_idle_ws"] + 10),
                   "--log-level", "warn"], os.path.join(k.root, "gateway.log"))
        _wait_http(f"http://127.0.0.1:{gw_port}/api", gw.proc, "kennel-gateway")
        auth = {"Authorization": f"token {GW_TOKEN}"}
        model = _post_json(f"http://127.0.0.1:{gw_port}/api/kernels",
                           {"name": "python3", "env": {"KERNEL_SESSION_NAME": "rtt"}}, auth)
        wsc = WsClient(f"ws://127.0.0.1:{gw_port}/api/kernels/{model['id']}/channels",
                       [f"Authorization: token {GW_TOKEN}"])
        clients.append(wsc)
        kc = Raw(ctx, conn_of(k.info("bench.rtt")))
        prime(kc)
        wsc.trips(0, warmup=50)
        half = max(1, n // 2)
        lat = {"gateway": [], "direct": []}
        direct_cpu = []
        for _ in range(2):
            lat["gateway"] += wsc.trips(half)
            t, cpu = round_trips(kc, half, warmup=10)
            lat["direct"] += t
            direct_cpu.append(cpu)
        kc.close()
        # The same with two C clients of equal cost (bench/wsclient.c over the gateway,
        # bench/cclient.c straight to kenneld), in alternating halves: the difference is the
        # gateway's alone, not also the Python WebSocket client's parsing.
        CCLIENT[0] = CCLIENT[0] or _build_tool("cclient", ["-lzmq", "-lsodium"])
        wsc_c = _build_tool("wsclient", [])
        conn = conn_of(k.info("bench.rtt"))
        fifth = max(1, n // 5)  # (five rounds each: a slow stretch of the machine falls on both)
        for _ in range(5):
            lat.setdefault("gateway_c", []).extend(_tool_ms(
                [wsc_c, "127.0.0.1", str(gw_port), f"/api/kernels/{model['id']}/channels",
                 GW_TOKEN, "30", str(fifth)]))
            lat.setdefault("direct_c", []).extend(_cclient_trips(conn, 30, fifth))
        os.unlink(wsc_c)

        # Notebook's server with its default kernel, Debian's ipykernel.
        nb_token = os.urandom(16).hex()
        nb_dir = os.path.join(k.root, "nb")
        os.makedirs(nb_dir)
        env = dict(os.environ, JUPYTER_CONFIG_DIR=os.path.join(nb_dir, "config"),
                   JUPYTER_DATA_DIR=os.path.join(nb_dir, "data"))
        nb = Proc([PY, "-m", "notebook", "--no-browser", "--allow-root", "--ip=127.0.0.1",
                   f"--port={nb_port}", "--port-retries=0", f"--NotebookApp.token={nb_token}",
                   f"--notebook-dir={nb_dir}"], os.path.join(k.root, "notebook.log"), env)
        _wait_http(f"http://127.0.0.1:{nb_port}/api/status?token={nb_token}", nb.proc,
                   "notebook")
        nbk = _post_json(f"http://127.0.0.1:{nb_port}/api/kernels?token={nb_token}",
                         {"name": "python3"})
        nbc = WsClient(f"ws://127.0.0.1:{nb_port}/api/kernels/{nbk['id']}/channels"
                       f"?token={nb_token}")
        clients.append(nbc)
        nbc.trips(0, warmup=50)
        lat["notebook"] = nbc.trips(n)
        nbc.close()
        stop(nb)

        # Memory of idle WebSockets: the serving process's PSS before and after.
        pid = _serving_pid(gw)
        time.sleep(0.5)
        before = smaps(pid)
        idle = []
        for _ in range(N["gw_idle_ws"]):
            idle.append(websocket.create_connection(
                f"ws://127.0.0.1:{gw_port}/api/kernels/{model['id']}/channels",
                timeout=EXEC_TIMEOUT, header=[f"Authorization: token {GW_TOKEN}"]))
        clients.extend(idle)
        time.sleep(1.0)
        after = smaps(pid)
        if gw.proc.poll() is not None or before is None or after is None:
            raise BenchError("kennel-gateway went away while WebSockets were opened")
        mem = {"websockets": len(idle), "pss_before_bytes": before["pss"],
               "pss_after_bytes": after["pss"], "added_bytes": after["pss"] - before["pss"],
               "rss_after_bytes": after["rss"]}
    finally:
        for c in clients:
            try:
                c.close()
            except Exception:
                pass
        ctx.term()
        for obj in [o for o in list(LIVE) if isinstance(o, Proc)]:
            stop(obj)
        stop(k)
    g50, d50 = statistics.median(lat["gateway"]), statistics.median(lat["direct"])
    res["gateway"] = {"what": "warm 1+1 round trip over a WebSocket (JSON frames, "
                              "websocket-client), until execute_reply and status idle",
                      "kennel_gateway": summary(lat["gateway"]),
                      "notebook_ipykernel": summary(lat["notebook"]),
                      "direct": dict(summary(lat["direct"]),
                                     what="the lean ZeroMQ client on the same session, "
                                          "interleaved"),
                      "added_p50_ms": g50 - d50, "idle_websockets": mem,
                      "c_clients": {
                          "gateway": summary(lat["gateway_c"]),
                          "direct": summary(lat["direct_c"]),
                          "added_p50_ms": statistics.median(lat["gateway_c"])
                          - statistics.median(lat["direct_c"]),
                          "what": "bench/wsclient.c over the gateway against bench/cclient.c "
                                  "straight to kenneld, on the same session, in five "
                                  "alternating rounds: what the gateway adds, the clients' "
                                  "costs equal"},
                      "client_cpu_ms_per_trip": {
                          "websocket": statistics.mean(wsc.cpu_ms),
                          "direct": statistics.mean(direct_cpu),
                          "what": "each client's own CPU time per trip (Python: the WebSocket "
                                  "client parses all five messages whole, the direct one only "
                                  "the fields it needs); part of the added p50 is this"}}
    log(f"  client CPU per trip: WebSocket {statistics.mean(wsc.cpu_ms):.2f} ms, direct "
        f"{statistics.mean(direct_cpu):.2f} ms")
    cc = res["gateway"]["c_clients"]
    log(f"  C clients: gateway p50 {cc['gateway']['median']:.3f} ms, direct "
        f"{cc['direct']['median']:.3f} ms: the gateway adds {cc['added_p50_ms']:.3f} ms")
    log(f"  gateway p50 {g50:.2f} ms, direct {d50:.2f} ms, notebook "
        f"{statistics.median(lat['notebook']):.2f} ms; {mem['websockets']} idle WebSockets: "
        f"+{mem['added_bytes'] / MiB:.1f} MiB")


def bench_sdk(res):
    log(f"sdk: {N['sdk_trips']} Session.run('1+1') calls through kennel_client, warm, against "
        "a direct client of the same session")
    sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
    from kennel_client import Session as SdkSession
    (k,) = start_kennelds([("sdk", [])])
    ctx = zmq.Context()
    s, kc = None, None
    try:
        k.wait_pool()
        s = SdkSession("sdk", state_dir=k.state)
        for _ in range(50):
            s.run(ONE_PLUS_ONE)
        kc = Raw(ctx, conn_of(k.create("sdk")))  # the same session, found by name
        prime(kc)
        half = max(1, N["sdk_trips"] // 2)
        lat = {"sdk": [], "direct": []}
        for _ in range(2):
            gc.collect()
            gc.disable()
            try:
                for _ in range(half):
                    t = time.perf_counter()
                    s.run(ONE_PLUS_ONE)
                    lat["sdk"].append(ms_since(t))
            finally:
                gc.enable()
            lat["direct"] += round_trips(kc, half, warmup=10)[0]
    finally:
        if kc is not None:
            kc.close()
        ctx.term()
        if s is not None:
            s.detach()
        stop(k)
    res["sdk_ms"] = {"what": "kennel_client Session.run('1+1') on a warm session, from the call "
                             "to its Execution",
                     "kennel_sdk": summary(lat["sdk"]),
                     "direct": dict(summary(lat["direct"]),
                                    what="the lean Jupyter client's 1+1 round trip on the same "
                                         "session, interleaved")}
    log(f"  Session.run p50 {statistics.median(lat['sdk']):.2f} ms, direct "
        f"{statistics.median(lat['direct']):.2f} ms")


# A 50 MiB DataFrame: 10 float64 columns of 655,360 rows.
FORK_DF_CELL = ("import numpy as np, pandas as pd\n"
                "df = pd.DataFrame({f'c{i}': np.random.rand(655360) for i in range(10)})\n"
                "assert df.memory_usage(index=False).sum() == 50 << 20")
FORK_CHECK_CELL = "assert len(df) == 655360"


def _fork_once(k, ctx, src, name):
    """fork_request of src as name, then its first cell from a new client: (reply ms, first
    cell answered ms), both from the request. The fork is ended after."""
    t = time.perf_counter()
    info = k.call("fork_request", {"session": src, "name": name}, timeout=EXEC_TIMEOUT)["session"]
    t_reply = ms_since(t)
    c = Raw(ctx, conn_of(info), iopub=False)
    try:
        c.send(FORK_CHECK_CELL)
        if not wait_done([c], EXEC_TIMEOUT, need_idle=False) or c.errors:
            raise BenchError(f"the fork's first cell failed or timed out ({c.errors} errors)")
        t_cell = ms_since(t)
    finally:
        c.close()
    k.end(name)
    return t_reply, t_cell


def _evicted(k, name, timeout=60):
    deadline = time.monotonic() + timeout
    while k.info(name)["state"] != "evicted":
        if time.monotonic() > deadline:
            raise BenchError(f"{name} was not evicted in {timeout} s")
        time.sleep(0.05)


# Issue #27's session: a 50 MiB DataFrame and a 50 MiB array (the kernel writes its
# snapshot into a file of kenneld's, so no 64 MiB pipe frame bounds it).
EVICT_BIG_CELL = ("import numpy as np, pandas as pd\n"
                  "df = pd.DataFrame({f'c{i}': np.random.rand(655360) for i in range(10)})\n"
                  "arr = np.random.rand(50 << 17)\n"
                  "assert df.memory_usage(index=False).sum() == arr.nbytes == 50 << 20")
_LOG_TIME = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) ")


def _log_ms(line):
    """A kenneld log line's time of day, in ms."""
    m = _LOG_TIME.match(line)
    h, mi, sec, ms = (int(x) for x in m.groups())
    return ((h * 60 + mi) * 60 + sec) * 1000 + ms


def _eviction_ms(k, sid):
    """How long session sid's last eviction took, by kenneld's own log: from `saving its
    state` to `evicted` (the snapshot on disk and the kernel gone)."""
    with open(k.log_path, errors="replace") as f:
        lines = [ln for ln in f if f"session={sid}:" in ln]
    start = [ln for ln in lines if "saving its state" in ln and "fork" not in ln]
    end = [ln for ln in lines if ln.rstrip().endswith(": evicted")]
    if not start or not end:
        raise BenchError(f"no eviction of {sid} in kenneld's log")
    return (_log_ms(end[-1]) - _log_ms(start[-1])) % (24 * 3600 * 1000)


def bench_evict(res):
    """Issue #27 item 5: a session holding a 50 MiB DataFrame and a 50 MiB numpy array
    (EVICT_BIG_CELL), beside one whose namespace is empty, each evicted after 1 s idle and revived by its
    next cell, over and over: the eviction's time (kenneld's log) and the revival to the
    first answer (the client's)."""
    n = N["evictions"]
    log(f"evict: {n} evictions and revivals of a session holding 100 MiB (a DataFrame and an "
        "array) and of one holding nothing")
    (k,) = start_kennelds([("evict", ["--log-level", "info"])])  # its eviction lines
    ctx = zmq.Context()
    clients = []
    out = {}
    try:
        k.wait_pool()
        for label, cell, check in (("empty", "x = 1", "x"),
                                   ("big", EVICT_BIG_CELL, "len(df) + len(arr)")):
            info = k.call("create_request", {"name": label, "limits": {"idle": 1}})["session"]
            c = Raw(ctx, conn_of(info), iopub=False)
            clients.append(c)
            c.send(cell)
            if not wait_done([c], EXEC_TIMEOUT, need_idle=False) or c.errors:
                raise BenchError(f"the {label} session's first cell failed")
            ev, rv = [], []
            for _ in range(n):
                _evicted(k, label)
                ev.append(_eviction_ms(k, info["id"]))
                settle([k.proc.pid], timeout=3)
                c.send(check)  # the revival
                if not wait_done([c], EXEC_TIMEOUT, need_idle=False) or c.errors:
                    raise BenchError(f"the {label} session's revival failed")
                rv.append(ms_since(c.t0))
            out[label] = {"evict": summary(ev), "revive": summary(rv)}
    finally:
        for c in clients:
            c.close()
        ctx.term()
        stop(k)
    res["evict_ms"] = dict(out, what="eviction (kenneld's log: saving -> evicted) and revival "
                                     "(the next cell sent -> its reply), after 1 s idle each")


def bench_fork(res):
    n = N["forks"]
    log(f"fork: {n} forks of a session holding a 50 MiB DataFrame; then {max(1, n // 2)} of it "
        "evicted, beside its revivals")
    (k,) = start_kennelds([("fork", [])])
    ctx = zmq.Context()
    c = None
    lat = {k_: [] for k_ in ("reply", "first_cell", "evicted_reply", "evicted_first_cell",
                             "revival")}
    try:
        k.wait_pool()
        src = k.create("src")
        c = Raw(ctx, conn_of(src), iopub=False)
        c.send(FORK_DF_CELL)
        if not wait_done([c], EXEC_TIMEOUT, need_idle=False) or c.errors:
            raise BenchError("the 50 MiB DataFrame cell failed")
        for i in range(n):
            k.wait_pool()
            settle([k.proc.pid], timeout=3)
            r, f = _fork_once(k, ctx, "src", f"fork{i}")
            lat["reply"].append(r)
            lat["first_cell"].append(f)
        # The same state in a session evicted after 1 s idle.
        k.end("src")
        c.close()
        esrc = k.call("create_request", {"name": "esrc", "limits": {"idle": 1}})["session"]
        c = Raw(ctx, conn_of(esrc), iopub=False)
        c.send(FORK_DF_CELL)
        if not wait_done([c], EXEC_TIMEOUT, need_idle=False) or c.errors:
            raise BenchError("the 50 MiB DataFrame cell failed")
        for i in range(max(1, n // 2)):
            _evicted(k, "esrc")
            k.wait_pool()
            settle([k.proc.pid], timeout=3)
            r, f = _fork_once(k, ctx, "esrc", f"efork{i}")
            lat["evicted_reply"].append(r)
            lat["evicted_first_cell"].append(f)
            k.wait_pool()
            settle([k.proc.pid], timeout=3)
            c.send(FORK_CHECK_CELL)  # the source's revival
            if not wait_done([c], EXEC_TIMEOUT, need_idle=False) or c.errors:
                raise BenchError("the source's revival failed")
            lat["revival"].append(ms_since(c.t0))
    finally:
        if c is not None:
            c.close()
        ctx.term()
        stop(k)
    res["fork_ms"] = {
        "what": "fork of a session holding a 50 MiB DataFrame (FORK_DF_CELL)",
        "reply": dict(summary(lat["reply"]), what="fork_request -> its reply (kennel fork)"),
        "first_cell": dict(summary(lat["first_cell"]),
                           what="fork_request -> the fork's first cell answered"),
        "evicted_reply": dict(summary(lat["evicted_reply"]),
                              what="the same source evicted: fork_request -> its reply"),
        "evicted_first_cell": dict(summary(lat["evicted_first_cell"]),
                                   what="the same source evicted: -> the fork's first cell"),
        "revival": dict(summary(lat["revival"]),
                        what="the evicted source's own next cell answered (its revival)"),
    }
    log(f"  fork reply p50 {statistics.median(lat['reply']):.0f} ms, usable (first cell) p50 "
        f"{statistics.median(lat['first_cell']):.0f} ms; of the evicted source "
        f"{statistics.median(lat['evicted_first_cell']):.0f} ms; its revival "
        f"{statistics.median(lat['revival']):.0f} ms")


# ---- report ------------------------------------------------------------------------------------

def _rss_added(module):
    """RSS a plain /usr/bin/python3 -I gains importing module after numpy, pandas and
    matplotlib (what preloading it adds to the zygote), and the import's ms."""
    code = ("import time, numpy, pandas, matplotlib.pyplot, matplotlib_inline.backend_inline\n"
            "def rss():\n"
            "    with open('/proc/self/statm') as f: return int(f.read().split()[1]) * 4096\n"
            f"a = rss(); t = time.perf_counter(); import {module}\n"
            "print((time.perf_counter() - t) * 1000, rss() - a)")
    out = subprocess.run([PY, "-I", "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1",
                              "MPLBACKEND": "Agg"})
    if out.returncode != 0:
        raise BenchError(f"import {module} failed: {out.stderr[-300:]}")
    ms, added = out.stdout.split()
    return float(ms), int(added)


def _timed_cell(k, name, code):
    """A new session: (ms of code's cell alone, the session's PSS and USS after it, bytes)."""
    k.create(name)
    kc = client_of(k.info(name)["connection_file"])
    try:
        first_reply(kc, kc.execute("pass"))
        t = time.perf_counter()
        msg_id = kc.execute(code)
        first_reply(kc, msg_id)  # (raises BenchError if the cell failed)
        ms = ms_since(t)
    finally:
        kc.stop_channels()
    time.sleep(0.3)
    info = k.info(name)
    k.end(name)
    return ms, info["pss_bytes"], info["uss_bytes"]


def bench_runtime(res):
    """Issue #29's runtime: what each package costs, and what preloading the two the issue's
    target names (sklearn, seaborn; in kenneld's default preload) costs and saves."""
    log("runtime: per package, in a plain python3 after numpy, pandas and matplotlib, and in "
        "sessions of the default kenneld")
    per = {}
    packages = os.environ.get("BENCH_RUNTIME_PACKAGES", "1") not in ("", "0")
    for m in AGENT_IMPORTS if packages else ():
        ms, added = _rss_added(m)
        per[m] = {"plain_import_ms": round(ms, 1), "zygote_rss_added_mib": round(added / MiB, 1)}
    labels = [("default", ["--preload", DEFAULT_PRELOAD]),
              ("without_sklearn_seaborn", ["--preload", EARLIER_PRELOAD])]
    ks = start_kennelds(labels)
    out = {"packages": per}
    ctx = zmq.Context()
    try:
        k = ks[0]
        k.wait_pool()
        base = [_timed_cell(k, f"base{i}", "pass")[1] for i in range(N["runtime_n"])]
        base_pss = statistics.median(base)
        for m in AGENT_IMPORTS if packages else ():
            runs = []
            for i in range(N["runtime_n"]):
                k.wait_pool()
                runs.append(_timed_cell(k, f"p{i}", f"import {m}"))
            per[m]["session_import_ms"] = round(statistics.median(r[0] for r in runs), 1)
            per[m]["session_pss_added_mib"] = round(
                (statistics.median(r[1] for r in runs) - base_pss) / MiB, 1)
            log(f"  {m}: {per[m]}")
        for k in ks:
            k.wait_pool()
            zpid = k.stats()["spawner"]["zygote_pid"]
            z = smaps(zpid)
            starts, agent, idle = [], [], []
            for i in range(N["runtime_starts"]):
                k.wait_pool()
                settle([kk.proc.pid for kk in ks])
                starts.append(kennel_start(k, f"s{i}")[0])
                k.wait_pool()
                settle([kk.proc.pid for kk in ks])
                agent.append(kennel_start(k, f"a{i}", code=AGENT_CELL)[0])
            for i in range(N["runtime_n"]):
                k.wait_pool()
                idle.append(_timed_cell(k, f"i{i}", IMPORT_CELL))
            # What an idle session costs a host in a fleet: N sessions that ran the import
            # cell, their PSS summed with the zygote's, over N. (One session's PSS above holds
            # its share of the zygote's pages among a handful of processes; here among N.)
            fleet = {}
            stopped = grow(k, [f"f{i}" for i in range(N["runtime_fleet"])], fleet,
                           time.monotonic() + N["create_timeout"], ctx)
            if stopped:
                raise BenchError(f"runtime {k.label}'s fleet: {stopped}")
            fleet_pss = sum(m["pss"] for m in session_mem(k, list(fleet))) + smaps(zpid)["pss"]
            out[k.label] = {
                "zygote_pss_mib": round(z["pss"] / MiB, 1), "zygote_rss_mib": round(z["rss"] / MiB, 1),
                "new_session_first_1plus1_ms": summary(starts),
                "new_session_import_sklearn_seaborn_ms": summary(agent),
                "idle_session_pss_mib_after_import_cell": round(
                    statistics.median(i[1] for i in idle) / MiB, 1),
                "idle_session_uss_mib_after_import_cell": round(
                    statistics.median(i[2] for i in idle) / MiB, 1),
                "fleet_sessions": len(fleet),
                "fleet_mib_per_idle_session": round(fleet_pss / len(fleet) / MiB, 2)}
            log(f"  {k.label}: {out[k.label]}")
    finally:
        for k in ks:
            stop(k)
        ctx.term()
    ipy = [ipy_start(code=AGENT_CELL)[0] for _ in range(min(N["ipy_starts"], 3))]
    out["ipykernel_new_session_import_sklearn_seaborn_ms"] = summary(ipy)
    res["runtime"] = out


def machine_info():
    def run(*cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    cpu = None
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    import ipykernel
    import jupyter_client
    return {"nproc": int(run("nproc") or os.cpu_count()), "cpu": cpu,
            "mem_total_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
            "kernel": platform.release(), "python": platform.python_version(),
            "os": run("sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "loadavg_start": list(os.getloadavg()),
            "ipykernel": ipykernel.__version__, "jupyter_client": jupyter_client.__version__,
            "pyzmq": zmq.__version__, "libzmq": zmq.zmq_version(),
            "kennel_commit": run("git", "-C", ROOT, "rev-parse", "--short", "HEAD")}


def fmt_ms(x):
    return f"{x:.2f} ms" if x < 10 else f"{x:.0f} ms"


def fmt_mib(x):
    return f"{x / MiB:.1f} MiB" if x < 100 * MiB else f"{x / MiB:.0f} MiB"


def ratio(ipy, kennel):
    """How many times better kennel is: ipykernel / kennel for times and sizes (for
    throughput the caller swaps the arguments)."""
    return f"{ipy / kennel:.1f}x" if kennel else "-"


# ---- 10: CURVE ----------------------------------------------------------------------------------

def handshake_times(ctx, conn, n):
    """n fresh connections to conn's shell, each timed from its connect() to libzmq's
    HANDSHAKE_SUCCEEDED event (ZAP answered included): ms."""
    times = []
    for _ in range(n):
        s = ctx.socket(zmq.DEALER)
        s.linger = 0
        _curve_keys(s, conn)
        mon = s.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        t0 = time.perf_counter()
        s.connect(_url(conn, "shell_port"))
        if not mon.poll(EXEC_TIMEOUT * 1000):
            raise BenchError("a handshake did not finish")
        times.append(ms_since(t0))
        s.disable_monitor()
        mon.close(0)
        s.close(0)
    return times


class _Closer:
    """A bare socket in a list of clients to close."""

    def __init__(self, sock):
        self.sock = sock

    def close(self):
        self.sock.close(0)


def _chandshakes(tool, url, n, keys=None):
    """n handshakes of the C timer (bench/chandshake.c) against url: ms each."""
    return _tool_ms([tool, "connect", url, str(n), *(keys or [])])


def _bare_server(tool, secret, client_public=None):
    """A bare CURVE ROUTER in a process of its own (bench/chandshake.c serve), with a ZAP
    handler admitting client_public when given: (process, its URL)."""
    p = subprocess.Popen([tool, "serve", secret, *([client_public] if client_public else [])],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    port = p.stdout.readline().strip()
    if not port.isdigit():
        p.kill()
        raise BenchError("chandshake serve did not start")
    return p, f"tcp://127.0.0.1:{port}"


def bench_curve(res):
    log("curve: warm 1+1 round trips and handshakes, a CURVE session against one without")
    tool = _build_tool("chandshake", ["-lzmq", "-lpthread"])
    # The same timer with kenneld's securemem linked in, as the kennel CLI has it: a client
    # whose libzmq keeps its handshake keys off libsodium's guarded heap.
    src = os.path.join(ROOT, "src")
    kn_tool = _build_tool("chandshake", ["-D_GNU_SOURCE", os.path.join(src, "securemem.c"),
                                         "-I" + src, "-lzmq", "-lsodium", "-lpthread"],
                          suffix="-securemem")
    (k,) = start_kennelds([("curve", [])])
    ctx = zmq.Context()
    clients = []
    servers = []
    try:
        k.wait_pool()
        conns = {"plain": conn_of(k.create("plain")),
                 "curve": conn_of(k.call("create_request", {"name": "sealed", "curve": True})
                                  ["session"])}
        if not conns["curve"].get("curve_publickey"):
            raise BenchError("the CURVE session's connection file has no keys")
        raw = {label: Raw(ctx, c) for label, c in conns.items()}
        clients += raw.values()
        for c in raw.values():
            prime(c)
        cc = conns["curve"]
        ckeys = [cc["curve_publickey"], cc["curve_publickey"], cc["curve_secretkey"]]  # JEP 145
        # The floors, each a process of its own as kenneld is: a bare CURVE ROUTER (CURVE's
        # own cost here), and one whose ZAP handler admits the one key (what checking the
        # client's key costs at the least). The client's keys are the session's.
        pub, sec = zmq.curve_keypair()
        floors = {"bare": _bare_server(tool, sec.decode()),
                  "bare_zap": _bare_server(tool, sec.decode(), ckeys[1])}
        servers += [p for p, _ in floors.values()]
        fkeys = [pub.decode(), ckeys[1], ckeys[2]]
        half = max(1, N["curve_trips"] // 2)
        lat = {"plain": [], "curve": []}
        hs = {"plain": [], "curve": [], "c_curve": [], "c_curve_securemem": [], "c_bare": [],
              "c_bare_zap": []}
        hs_half = max(1, N["handshakes"] // 2)
        for _ in range(2):  # halves, alternating, so a load change hits both
            for label in ("plain", "curve"):
                times, _ = round_trips(raw[label], half)
                lat[label] += times
                hs[label] += handshake_times(ctx, conns[label], hs_half)
            hs["c_curve"] += _chandshakes(tool, _url(cc, "shell_port"), hs_half, ckeys)
            hs["c_curve_securemem"] += _chandshakes(kn_tool, _url(cc, "shell_port"), hs_half,
                                                    ckeys)
            for label, (_, url) in floors.items():
                hs["c_" + label] += _chandshakes(tool, url, hs_half, fkeys)
    finally:
        for c in clients:
            c.close()
        for p in servers:
            p.stdin.close()
            p.wait(10)
        ctx.term()
        stop(k)
    res["curve_ms"] = {
        "what": "warm execute 1+1 (execute_reply and idle; lean client) and connect-to-"
                "HANDSHAKE_SUCCEEDED on shell, in one kenneld: a session with CURVE "
                "(kennel new --curve) against one without (NULL, through the same ZAP gate); "
                "and handshakes by a C client against kenneld and against bare CURVE "
                "servers in processes of their own",
        "rtt_plain": summary(lat["plain"]), "rtt_curve": summary(lat["curve"]),
        "rtt_ratio_p50": statistics.median(lat["curve"]) / statistics.median(lat["plain"]),
        "handshake_plain": summary(hs["plain"]), "handshake_curve": summary(hs["curve"]),
        "handshake_c_curve": dict(summary(hs["c_curve"]),
                                  what="a C client (bench/chandshake.c), a CURVE session"),
        "handshake_c_curve_securemem": dict(summary(hs["c_curve_securemem"]),
                                            what="the same C client with securemem linked "
                                                 "in (as the kennel CLI), a CURVE session"),
        "handshake_c_bare": dict(summary(hs["c_bare"]),
                                 what="a C client, a bare CURVE ROUTER, no ZAP"),
        "handshake_c_bare_zap": dict(summary(hs["c_bare_zap"]),
                                     what="a C client, a bare CURVE ROUTER whose ZAP thread "
                                          "admits one key"),
    }


def table(res):
    """[(label, kennel, ipykernel, ratio)] of what was measured."""
    rows = []
    s = res.get("start_first_result_ms")
    if s:
        ipy = s["ipykernel"]
        for key, what in (("kennel_pool", "warm pool"), ("kennel_pool0", "zygote fork, --pool 0"),
                          ("kennel_exec", "cold, --spawner exec")):
            k = s[key]
            rows.append((f"new session -> first `1+1`, {what}: median", fmt_ms(k["median"]),
                         fmt_ms(ipy["median"]), ratio(ipy["median"], k["median"])))
            rows.append((f"new session -> first `1+1`, {what}: p99", fmt_ms(k["p99"]),
                         fmt_ms(ipy["p99"]), ratio(ipy["p99"], k["p99"])))
    p = res.get("first_png_ms")
    if p:
        for q in ("median", "p99"):
            rows.append((f"new session -> first matplotlib PNG: {q}", fmt_ms(p["kennel"][q]),
                         fmt_ms(p["ipykernel"][q]), ratio(p["ipykernel"][q], p["kennel"][q])))
        w = p.get("warm_plot")
        if w:
            rows.append((f"  floor: the same cell in the same session, its plot number "
                         f"{w['after'] + 1} (matplotlib's own work): median",
                         fmt_ms(w["kennel"]["median"]), fmt_ms(w["ipykernel"]["median"]), ""))
    r = res.get("warm_rtt_ms")
    if r:
        for q, lbl in (("median", "p50"), ("p99", "p99")):
            rows.append((f"warm `1+1` round trip, reply + idle: {lbl}", fmt_ms(r["kennel"][q]),
                         fmt_ms(r["ipykernel"][q]), ratio(r["ipykernel"][q], r["kennel"][q])))
        cpu = r["client_cpu_ms_per_trip"]
        rows.append(("  floor: bare ZeroMQ round trip (300 B), same client: p50 / p99",
                     f"{r['zmq_floor']['median']:.2f} / {r['zmq_floor']['p99']:.2f} ms", "", ""))
        rows.append(("  floor: same client and messages, fake kernel answering at once: "
                     "p50 / p99",
                     f"{r['fake_kernel']['median']:.2f} / {r['fake_kernel']['p99']:.2f} ms", "",
                     ""))
        rows.append(("  kennel's own share: its p50 minus the fake kernel's",
                     fmt_ms(r["kennel"]["median"] - r["fake_kernel"]["median"]), "", ""))
        rows.append(("  client's own CPU per round trip (fake kernel: "
                     f"{cpu['fake_kernel']:.2f} ms)", f"{cpu['kennel']:.2f} ms",
                     f"{cpu['ipykernel']:.2f} ms", ""))
        lc = r.get("long_cell")
        if lc:
            lines = len(LONG_CELL.splitlines())
            for q, lbl in (("median", "p50"), ("p99", "p99")):
                rows.append((f"warm round trip of a {lines}-line cell: {lbl}",
                             fmt_ms(lc["kennel"][q]), fmt_ms(lc["ipykernel"][q]),
                             ratio(lc["ipykernel"][q], lc["kennel"][q])))
    m = res.get("idle_memory_bytes")
    if m:
        for q in ("pss", "uss"):
            rows.append((f"idle session after numpy+pandas+pyplot imports, alone: {q.upper()}",
                         fmt_mib(m["kennel"][q]), fmt_mib(m["ipykernel"][q]),
                         ratio(m["ipykernel"][q], m["kennel"][q])))
    f = res.get("fleet_memory")
    if f:
        kf, ipf = f["kennel"], f["ipykernel"]
        for q in ("pss", "uss"):
            k_, i_ = kf[f"per_session_{q}"]["mean"], ipf[f"per_kernel_{q}"]["mean"]
            rows.append((f"  same, mean per session with {kf['n']} (ipykernel {ipf['n']}) "
                         f"alive: {q.upper()}", fmt_mib(k_), fmt_mib(i_), ratio(i_, k_)))
        rows.append((f"{kf['n']} idle sessions, total PSS (kennel: + zygote; ipykernel: "
                     f"{ipf['n']} measured, x{ipf['extrapolated_to'] / ipf['n']:g})",
                     fmt_mib(kf["total_pss_bytes"]), fmt_mib(ipf["extrapolated_total_pss_bytes"]),
                     ratio(ipf["extrapolated_total_pss_bytes"], kf["total_pss_bytes"])))
        rows.append(("  kenneld's own PSS with them (not in the total)",
                     fmt_mib(kf["kenneld_pss_bytes"]), "", ""))
    c = res.get("concurrent")
    if c:
        kc, ic = c["kennel"], c["ipykernel"]
        rows.append((f"sessions executing at once (kennel {kc['sessions']}, ipykernel "
                     f"{ic['kernels']}): executes/s", f"{kc['executes_per_s']:.0f}/s",
                     f"{ic['executes_per_s']:.0f}/s",
                     ratio(kc["executes_per_s"], ic["executes_per_s"])))
        rows.append(("  same: latency p99", fmt_ms(kc["latency_ms"]["p99"]),
                     fmt_ms(ic["latency_ms"]["p99"]),
                     ratio(ic["latency_ms"]["p99"], kc["latency_ms"]["p99"])))
    many = res.get("many_sessions")
    if many and "error" not in many:
        rows.append((f"warm round trip p50 with {many['sessions']} idle sessions / with one",
                     f"{many['rtt_many_ms']['median']:.2f} / {many['rtt_one_ms']['median']:.2f} ms"
                     f" = {many['p50_ratio']:.2f}x", "", ""))
    sb = res.get("sandbox_spawn_cost_ms")
    if sb:
        d = sb["difference"]
        rows.append(("sandbox spawn cost (exec, sandboxed - insecure): median / p99",
                     f"{d['median']:.0f} / {d['p99']:.0f} ms", "", ""))
        a = sb["setup_alone"]["difference"]
        rows.append(("  the sandbox's setup alone (kennel-init -- true, minus true): median / p99",
                     f"{a['median']:.1f} / {a['p99']:.1f} ms", "", ""))
    mc = res.get("mcp_ms")
    if mc:
        km, d = mc["kennel_mcp"], mc["direct"]
        rows.append(("`kennel mcp`: run_python('1+1') answered, warm: p50 / p99",
                     f"{km['median']:.2f} / {km['p99']:.2f} ms", "", ""))
        rows.append(("  same session, a direct Jupyter client's round trip: p50 / p99",
                     f"{d['median']:.2f} / {d['p99']:.2f} ms", "", ""))
        rows.append(("  kennel mcp's share: its p50 minus the direct client's",
                     fmt_ms(km["median"] - d["median"]), "", ""))
    gw = res.get("gateway")
    if gw:
        g, nb, d = gw["kennel_gateway"], gw["notebook_ipykernel"], gw["direct"]
        for q in ("median", "p99"):
            rows.append((f"warm `1+1` over a WebSocket: kennel-gateway vs Notebook (ipykernel): {q}",
                         fmt_ms(g[q]), fmt_ms(nb[q]), ratio(nb[q], g[q])))
        rows.append(("  the gateway's added p50 over kennel's ZeroMQ round trip, Python clients "
                     f"({d['median']:.2f} ms direct)", fmt_ms(gw["added_p50_ms"]), "", ""))
        cc = gw["c_clients"]
        rows.append(("  the same, C clients (bench/wsclient.c against bench/cclient.c: "
                     f"{cc['gateway']['median']:.2f} against {cc['direct']['median']:.2f} ms)",
                     fmt_ms(cc["added_p50_ms"]), "", ""))
        m = gw["idle_websockets"]
        rows.append((f"  {m['websockets']} idle WebSockets: the gateway's added PSS",
                     fmt_mib(m["added_bytes"]), "", ""))
    rc = res.get("rtt_cost")
    if rc:
        rows.append(("warm `1+1`, the C client (bench/cclient.c): p50 / p99",
                     f"{rc['c_client']['median']:.2f} / {rc['c_client']['p99']:.2f} ms", "", ""))
        rows.append(("  same session, the lean Python client, alternating: p50 / p99",
                     f"{rc['python_client']['median']:.2f} / {rc['python_client']['p99']:.2f} ms",
                     "", ""))
        rows.append(("kenneld's instructions per warm `1+1` (callgrind, all threads)",
                     f"{rc['kenneld_instructions'] / 1e3:.0f} k", "", ""))
        if rc.get("kenneld_hmac_instructions"):
            rows.append(("  of them, the six messages' HMAC-SHA256 (valgrind runs SHA-256 "
                         "without the CPU's SHA instructions)",
                         f"{rc['kenneld_hmac_instructions'] / 1e3:.0f} k", "", ""))
        rows.append(("  kenneld's system calls per warm `1+1` (strace -f) / CPU",
                     f"{rc['kenneld_syscalls']:.1f} / {rc['kenneld_cpu_ms']:.3f} ms", "", ""))
        rows.append(("  the kernel's system calls per warm `1+1` / CPU",
                     f"{rc['kernel_syscalls']:.1f} / {rc['kernel_cpu_ms']:.3f} ms", "", ""))
    sd = res.get("sdk_ms")
    if sd:
        ks, d = sd["kennel_sdk"], sd["direct"]
        rows.append(("Python SDK: Session.run('1+1'), warm: p50 / p99",
                     f"{ks['median']:.2f} / {ks['p99']:.2f} ms", "", ""))
        rows.append(("  same session, a direct Jupyter client's round trip: p50 / p99",
                     f"{d['median']:.2f} / {d['p99']:.2f} ms", "", ""))
        rows.append(("  the SDK's share: its p50 minus the direct client's",
                     fmt_ms(ks["median"] - d["median"]), "", ""))
    fk = res.get("fork_ms")
    if fk:
        for key, what in (("reply", "`kennel fork` (the reply)"),
                          ("first_cell", "fork -> its first cell answered"),
                          ("evicted_reply", "`kennel fork` of it evicted (the reply)"),
                          ("evicted_first_cell", "fork of it evicted -> its first cell"),
                          ("revival", "its own revival after eviction -> its cell answered")):
            rows.append((f"50 MiB DataFrame session: {what}: p50 / p99",
                         f"{fk[key]['median']:.0f} / {fk[key]['p99']:.0f} ms", "", ""))
    ev = res.get("evict_ms")
    if ev:
        for label, what in (("empty", "an empty namespace"),
                            ("big", "a 50 MiB DataFrame and a 50 MiB array")):
            for key, verb in (("evict", "evicted (saved, kernel gone)"),
                              ("revive", "revived to its first answer")):
                r = ev[label][key]
                rows.append((f"session holding {what}: {verb}: p50 / p99",
                             f"{r['median']:.0f} / {r['p99']:.0f} ms", "", ""))
    b = res.get("burst")
    if b:
        rows.append((f"burst: kennel {b['kennel']['sessions']} / ipykernel "
                     f"{b['ipykernel']['kernels']} at once, all answered",
                     fmt_ms(b["kennel"]["all_answered_ms"]),
                     fmt_ms(b["ipykernel"]["all_answered_ms"]), ""))
        ag = b["kennel"].get("again")
        if ag:
            rows.append((f"  the next burst, the default pool grown to {ag['pool_target']} "
                         f"({ag['waiting_uss_mib']:.0f} MiB USS waiting)",
                         fmt_ms(ag["all_answered_ms"]), "", ""))
        if "kennel_pooled" in b:
            rows.append((f"  the same with kenneld --pool {b['kennel_pooled']['sessions']}",
                         fmt_ms(b["kennel_pooled"]["all_answered_ms"]), "", ""))
    f = res.get("flood_rtt_ms")
    if f:
        rows.append(("a neighbour's warm 1+1 p50, quiet", fmt_ms(f["quiet"]["median"]), "", ""))
        for name, what in (("tiny", "clear_output"), ("lines", "print(flush=True)")):
            for client in ("lagging", "reading"):
                r = f[f"{name}_{client}"]
                rows.append((f"  while another session floods {what}, its client {client}",
                             f"{fmt_ms(r['median'])} ({r['vs_quiet']:.1f}x quiet)", "", ""))
    rt = res.get("runtime")
    if rt:
        ipy = rt["ipykernel_new_session_import_sklearn_seaborn_ms"]["median"]
        for key, what in (("default", "default preload"),
                          ("without_sklearn_seaborn", "the preload without sklearn, seaborn")):
            k = rt[key]["new_session_import_sklearn_seaborn_ms"]["median"]
            rows.append((f"new session -> `import sklearn, seaborn`, {what}: median",
                         fmt_ms(k), fmt_ms(ipy), ratio(ipy, k)))
    cv = res.get("curve_ms")
    if cv:
        for q, lbl in (("median", "p50"), ("p99", "p99")):
            rows.append((f"warm `1+1` with CURVE (without: {fmt_ms(cv['rtt_plain'][q])}): {lbl}",
                         fmt_ms(cv["rtt_curve"][q]), "", ""))
            rows.append((f"a CURVE handshake, pyzmq client, connect to ready (NULL: "
                         f"{fmt_ms(cv['handshake_plain'][q])}): {lbl}",
                         fmt_ms(cv["handshake_curve"][q]), "", ""))
            rows.append((f"a CURVE handshake, C client (floors, processes of their own: a "
                         f"bare CURVE ROUTER {fmt_ms(cv['handshake_c_bare'][q])}, with a ZAP "
                         f"thread {fmt_ms(cv['handshake_c_bare_zap'][q])}): {lbl}",
                         fmt_ms(cv["handshake_c_curve"][q]), "", ""))
            rows.append((f"a CURVE handshake, the same C client with kennel's securemem (as "
                         f"the kennel CLI): {lbl}",
                         fmt_ms(cv["handshake_c_curve_securemem"][q]), "", ""))
    return rows


CLUSTER_CLIENTS = 3  # long-lived clients making the cluster's sessions (`kennel new --count`)


def bench_cluster(res):
    """Issue #26: three nodes in network namespaces (tests/integration/cluster_net.py, the
    fixture test_cluster uses), the CLI in the root namespace, against one kenneld --curve."""
    if os.geteuid() != 0:
        raise BenchError("the cluster section needs root (network namespaces)")
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
    sys.path.insert(0, os.path.join(ROOT, "tests"))  # cluster_net imports kennel_shared
    from cluster_net import ClusterNet, run_cell
    from concurrent.futures import ThreadPoolExecutor
    log(f"cluster: new -> first result ({N['cluster_starts']} each), dead-node detection and "
        f"revival, {N['cluster_creates']} creates by {CLUSTER_CLIENTS} clients and as many by a "
        "process each, Redis bytes per session")
    tmp = tempfile.mkdtemp(prefix="kb-cluster-", dir="/tmp")
    net = None
    out = {}
    try:
        net = ClusterNet(tmp)

        def first(args, env=None):
            t = time.monotonic()
            r = subprocess.run([KENNEL, *args], capture_output=True, text=True, timeout=60,
                               env=env)
            if r.returncode != 0:
                raise BenchError(f"kennel {args}: {r.stderr}")
            o, st = run_cell(r.stdout.strip(), "1+1", timeout=EXEC_TIMEOUT, iopub=False)
            if st != "ok":
                raise BenchError(f"first cell: {st}")
            return ms_since(t)

        # single node: one kenneld --curve in the root namespace, the same options
        single = os.path.join(tmp, "single")
        proc = subprocess.Popen([KENNELD, "--state-dir", single, "--curve", "--disk", "0",
                                 "--pool", "0"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while not os.path.exists(os.path.join(single, "kenneld.json")):
                if time.monotonic() > deadline:
                    raise BenchError("the single kenneld did not start")
                time.sleep(0.1)
            one = [first(["--state-dir", single, "new", "--name", f"one{i}", "--curve"])
                   for i in range(N["cluster_starts"])]
        finally:
            proc.terminate()
            proc.wait(20)
        env = net.env()
        many = [first(["--state-dir", str(net.client_state), "new", "--name", f"c{i}"], env)
                for i in range(N["cluster_starts"])]
        out["first_result_ms"] = {"single": summary(one), "cluster": summary(many)}

        # Creates/s, two ways, each over n sessions: CLUSTER_CLIENTS long-lived clients
        # (`kennel new --count`: one process making its share one after another, as a service
        # making sessions for its users would), then a `kennel new` process a session (8 at a
        # time: each pays its start, ~3 ms of dynamic linking, its keys and connections, ~6.5
        # ms of CPU here). Beside the first, the whole machine's CPU per create (/proc/stat,
        # the burst and the 1.5 s after, when the kernels it started finish starting): what
        # bounds a rate sustained for longer than a burst.
        # Redis bytes per session: the catalog's growth over the second n. Redis's used_memory
        # also moves by fixed amounts that no session causes (its first keys' allocator
        # classes, the script cache, the creating clients' buffers: 29 KB over the first 30
        # creates in one run, read as 980 B a session), so the figure is the growth over the
        # later creates: what one more session costs. The first n's figure and one entry's
        # MEMORY USAGE are printed beside it.
        key_bytes = int(net.redis("MEMORY", "USAGE", "kennel:s:c0").strip() or 0)
        n = N["cluster_creates"]

        def used():
            time.sleep(1.5)  # past a fencing round (1 s): its buffers are not the catalog's
            return int(re.search(r"used_memory:(\d+)", net.redis("INFO", "memory")).group(1))

        def busy_s():
            v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
            return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait

        def make_many(j):
            per = n // CLUSTER_CLIENTS + (j < n % CLUSTER_CLIENTS)
            r = net.kennel("new", "--name", f"m{j}", "--count", str(per), timeout=120)
            return len(r.stdout.split())

        def make(i):
            r = net.kennel("new", "--name", f"p{i}")
            return r.returncode == 0

        mem = [used()]
        cpu0, t = busy_s(), time.monotonic()
        with ThreadPoolExecutor(CLUSTER_CLIENTS) as ex:
            made_many = sum(ex.map(make_many, range(CLUSTER_CLIENTS)))
        took_many = time.monotonic() - t
        mem.append(used())  # (its 1.5 s: the kernels started finish starting)
        out["creates_cpu_ms"] = round((busy_s() - cpu0) * 1000 / max(made_many, 1), 1)
        out["cpus"] = os.cpu_count()
        t = time.monotonic()
        with ThreadPoolExecutor(8) as ex:
            made = sum(ex.map(make, range(n)))
        took = time.monotonic() - t
        mem.append(used())
        out["creates_per_s"] = round(made_many / took_many, 1)
        out["creates_clients"] = CLUSTER_CLIENTS
        out["creates_ok"] = made_many
        out["creates_per_s_process_each"] = round(made / took, 1)
        out["creates_ok_process_each"] = made
        out["redis_bytes_per_session"] = round((mem[2] - mem[1]) / max(made, 1))
        out["redis_bytes_per_session_first_half"] = round((mem[1] - mem[0]) / max(made_many, 1))
        out["redis_key_bytes"] = key_bytes

        # a dead node: detection (its record lapses), then a checkpointed session answering
        victim = next(nd for nd in net.nodes if nd.name == net.where("c0"))
        c0 = json.loads(net.kennel("info", "c0").stdout or "{}")
        snap = net.shared / "nodes" / victim.name / "sessions" / c0.get("id", "?") / "snapshot"
        deadline = time.monotonic() + 30
        while not snap.exists():  # its checkpoint (the kernel keeps running)
            if time.monotonic() > deadline:
                raise BenchError("c0 was not checkpointed")
            time.sleep(0.2)
        victim.kill9()
        t = time.monotonic()
        while victim.name in net.live_nodes():
            if time.monotonic() - t > 30:
                raise BenchError("the dead node was not detected")
            time.sleep(0.05)
        detect = ms_since(t)
        t = time.monotonic()
        r = net.kennel("exec", "c0", "print(1+1)")
        if r.returncode != 0:
            raise BenchError(f"revival: {r.stderr}")
        out["dead_detect_ms"] = detect
        out["revive_after_detect_ms"] = ms_since(t)
    finally:
        if net:
            net.close()
        shutil.rmtree(tmp, ignore_errors=True)
    res["cluster"] = out
    log(f"cluster: {json.dumps(out)}")


def targets(res):
    """The issues' targets (#6's; #30's for the flood, #25's for kennel mcp, #28's for
    CURVE) against what was measured: [(target, measured, met)]."""
    out = []
    cl = res.get("cluster")
    if cl:
        ratio_ = cl["first_result_ms"]["cluster"]["median"] / cl["first_result_ms"]["single"]["median"]
        out.append(("cluster: new -> first result p50 <= 1.5x single node (issue #26)",
                    f"{ratio_:.2f}x", ratio_ <= 1.5))
        out.append(("cluster: dead node detected <= 5 s", fmt_ms(cl["dead_detect_ms"]),
                    cl["dead_detect_ms"] <= 5000))
        out.append(("cluster: answering elsewhere <= 2 s after detection",
                    fmt_ms(cl["revive_after_detect_ms"]), cl["revive_after_detect_ms"] <= 2000))
        out.append((f"cluster: >= 200 creates/s across 3 nodes ({cl['creates_clients']} clients "
                    f"of `kennel new --count`; a `kennel new` process each: "
                    f"{cl['creates_per_s_process_each']}/s)", f"{cl['creates_per_s']}/s",
                    cl["creates_per_s"] >= 200))
        cpu = cl["creates_cpu_ms"]
        rate = cl["cpus"] * 1000 / cpu
        out.append((f"  the same sustained: {cl['cpus']} CPUs over {cpu} ms of CPU a create "
                    "(client, node, the kernel's start)", f"{rate:.0f}/s", rate >= 200))
        out.append(("cluster: <= 300 bytes of Redis memory per session",
                    f"{cl['redis_bytes_per_session']} B", cl["redis_bytes_per_session"] <= 300))
    cv = res.get("curve_ms")
    if cv:
        ratio_ = cv["rtt_ratio_p50"]
        out.append(("warm round trip with CURVE <= 1.2x without (p50; issue #28)",
                    f"{ratio_:.2f}x", ratio_ <= 1.2))
        h = cv["handshake_curve"]["median"]
        out.append(("a CURVE handshake <= 2 ms (p50; issue #28): a stock libzmq client (pyzmq)",
                    fmt_ms(h), h <= 2))
        h = cv["handshake_c_curve_securemem"]["median"]
        out.append(("  the same: kennel's own client path (C, securemem, as the kennel CLI)",
                    fmt_ms(h), h <= 2))
    s = res.get("start_first_result_ms")
    if s:
        k, i = s["kennel_pool"]["median"], s["ipykernel"]["median"]
        out.append(("new session -> first 1+1: median <= 15 ms", fmt_ms(k), k <= 15))
        out.append((">= 60x faster than ipykernel", f"{i / k:.1f}x", i / k >= 60))
    p = res.get("first_png_ms")
    if p:
        out.append(("new session -> first PNG: median <= 60 ms", fmt_ms(p["kennel"]["median"]),
                    p["kennel"]["median"] <= 60))
        floor = p["warm_plot"]["kennel"]["median"]
        x = p["kennel"]["median"] / floor
        out.append((f"  the same <= 1.2x the plot cell in a warm kernel ({fmt_ms(floor)}; "
                    "issue #27)", f"{x:.2f}x", x <= 1.2))
    r = res.get("warm_rtt_ms")
    if r:
        k50, k99, i50 = r["kennel"]["median"], r["kennel"]["p99"], r["ipykernel"]["median"]
        out.append(("warm round trip: median <= 0.5 ms", fmt_ms(k50), k50 <= 0.5))
        out.append(("warm round trip: p99 <= 1.5 ms", fmt_ms(k99), k99 <= 1.5))
        out.append(("warm round trip >= 10x faster than ipykernel", f"{i50 / k50:.1f}x",
                    i50 / k50 >= 10))
    f = res.get("fleet_memory")
    if f:
        pss = f["kennel"]["per_session_pss"]["mean"]
        out.append((f"idle session PSS <= 4 MiB, imports done (mean of {f['kennel']['n']} alive)",
                    fmt_mib(pss), pss <= 4 * MiB))
        n, tot = f["kennel"]["n"], f["kennel"]["total_pss_bytes"]
        note = "" if n >= 200 else f" (only {n} measured)"
        out.append((f"200 idle sessions under 1 GiB in total{note}", fmt_mib(tot),
                    tot < 1 << 30 and n >= 200))
    b = res.get("burst")
    if b:
        kb = b["kennel"]
        note = "" if kb["sessions"] >= 20 else f" (only {kb['sessions']} created)"
        out.append((f"20 sessions created at once all answer within 0.5 s{note}",
                    fmt_ms(kb["all_answered_ms"]), kb["all_answered_ms"] <= 500
                    and kb["sessions"] >= 20))
        ag = kb.get("again")
        if ag:
            out.append((f"  the next such burst with default settings (the pool grown to "
                        f"{ag['pool_target']}) within 0.3 s (issue #27)",
                        fmt_ms(ag["all_answered_ms"]), ag["all_answered_ms"] <= 300
                        and kb["sessions"] >= 20))
        kp = b.get("kennel_pooled")
        if kp:
            out.append((f"  the same with --pool {kp['sessions']} (a pool as large as the burst)",
                        fmt_ms(kp["all_answered_ms"]), kp["all_answered_ms"] <= 500
                        and kp["sessions"] >= 20))
    mc = res.get("mcp_ms")
    if mc:
        p50 = mc["kennel_mcp"]["median"]
        out.append(("kennel mcp: run_python('1+1') answered <= 5 ms p50 once warm (issue #25)",
                    fmt_ms(p50), p50 <= 5))
    gw = res.get("gateway")
    if gw:
        g, nb = gw["kennel_gateway"]["median"], gw["notebook_ipykernel"]["median"]
        out.append(("gateway WebSocket 1+1 >= 5x faster than Notebook's (ipykernel) at p50",
                    f"{nb / g:.1f}x", nb / g >= 5))
        added = gw["c_clients"]["added_p50_ms"]
        out.append(("the gateway adds <= 0.3 ms p50 to kennel's ZeroMQ round trip (C clients)",
                    fmt_ms(added), added <= 0.3))
        m = gw["idle_websockets"]
        out.append((f"{m['websockets']} idle WebSockets cost the gateway <= 50 MiB",
                    fmt_mib(m["added_bytes"]), m["added_bytes"] <= 50 * MiB))
    many = res.get("many_sessions")
    if many and "error" not in many:
        note = "" if many["sessions"] >= 500 else f" (only {many['sessions']} sessions)"
        out.append((f"rtt with 500 idle sessions within 1.5x of one{note}",
                    f"{many['p50_ratio']:.2f}x", many["p50_ratio"] <= 1.5
                    and many["sessions"] >= 500))
    fl = res.get("flood_rtt_ms")
    if fl:  # issue #30
        worst = max(fl["tiny_lagging"]["vs_quiet"], fl["tiny_reading"]["vs_quiet"])
        out.append(("a neighbour's p50 during a tiny-message flood within 3x of quiet",
                    f"{worst:.1f}x", worst <= 3))
    rt = res.get("runtime")
    rc = res.get("rtt_cost")
    if rc:
        ins = rc["kenneld_instructions"]
        out.append((f"kenneld's instructions per warm 1+1 <= 1/3 of {COST_BASELINE_K} k "
                    "(issue #27)", f"{ins / 1e3:.0f} k", ins <= COST_BASELINE_K * 1e3 / 3))
    r = res.get("warm_rtt_ms")
    if r:
        x = r["ipykernel"]["median"] / r["kennel"]["median"]
        out.append(("warm round trip >= 8x faster than ipykernel at p50 (issue #27)",
                    f"{x:.1f}x", x >= 8))
    sd = res.get("sdk_ms")
    if sd:
        p50 = sd["kennel_sdk"]["median"]
        out.append(("Python SDK: Session.run('1+1') warm p50 <= 1.5 ms (issue #29)",
                    fmt_ms(p50), p50 <= 1.5))
    ev = res.get("evict_ms")
    if ev:
        for key, what in (("evict", "evicted"), ("revive", "revived to its first answer")):
            p50 = ev["big"][key]["median"]
            out.append((f"a session holding a 50 MiB DataFrame and a 50 MiB array {what}: "
                        "p50 <= 150 ms (issue #27)", fmt_ms(p50), p50 <= 150))
    fk = res.get("fork_ms")
    if fk:
        p50 = fk["first_cell"]["median"]
        out.append(("`kennel fork` of a 50 MiB DataFrame session, until the fork answers a "
                    "cell: p50 <= 300 ms (issue #29)", fmt_ms(p50), p50 <= 300))
    if rt:  # issue #29, with the default preload (docs/runtime.md says why)
        k = rt["default"]["new_session_import_sklearn_seaborn_ms"]["median"]
        i = rt["ipykernel_new_session_import_sklearn_seaborn_ms"]["median"]
        out.append(("`import sklearn, seaborn` in a new session: median <= 150 ms", fmt_ms(k),
                    k <= 150))
        out.append(("... >= 5x faster than ipykernel", f"{i / k:.1f}x", i / k >= 5))
        now = rt["default"]["fleet_mib_per_idle_session"]
        before = rt["without_sklearn_seaborn"]["fleet_mib_per_idle_session"]
        out.append((f"an idle session's memory in a fleet of {rt['default']['fleet_sessions']} "
                    "within 10% of the preload without sklearn, seaborn (issue #29)",
                    f"{now:.2f} MiB vs {before:.2f} ({(now / before - 1) * 100:+.1f}%)",
                    now <= before * 1.1))
    return out


def print_report(res, machine):
    rows = table(res)
    print()
    print(f"kennel {machine['kennel_commit']} vs ipykernel {machine['ipykernel']} -- "
          f"{machine['nproc']} CPUs ({machine['cpu']}), Linux {machine['kernel']}, "
          f"Python {machine['python']}, {machine['date']}, load average "
          f"{machine['loadavg_start'][0]:.2f} at start, {machine['loadavg_end'][0]:.2f} at end")
    print()
    print("| | kennel | ipykernel | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()
    print("ratio: how many times better kennel is (ipykernel / kennel; for executes/s kennel /"
          " ipykernel). p99 of fewer than 100 samples is the maximum.")
    for name, err in res.get("errors", {}).items():
        print(f"\nsection {name} FAILED: {err}")
    t = targets(res)
    if t:
        print()
        print("| target | measured | met |")
        print("| --- | ---: | :---: |")
        for what, value, met in t:
            print(f"| {what} | {value} | {'yes' if met else 'no'} |")


def main():
    unknown = [s for s in ONLY if s not in SECTIONS]
    if unknown:
        sys.exit(f"bench: unknown BENCH_ONLY section(s) {unknown}; known: {SECTIONS}")
    if not os.access(KENNELD, os.X_OK):
        sys.exit(f"bench: {KENNELD} is missing: run `make` first")
    tmp = tempfile.mkdtemp(prefix="kb-jupyter-", dir="/tmp")
    # ipykernel's connection files and IPython profile in a directory of this run's own.
    os.environ["JUPYTER_RUNTIME_DIR"] = os.path.join(tmp, "runtime")
    os.environ["IPYTHONDIR"] = os.path.join(tmp, "ipython")

    def on_signal(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    # ipykernel's debugger (debugpy) warns about frozen modules on every start: noise here.
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    machine = machine_info()
    log(f"bench: sections {','.join(ONLY)}; N = {json.dumps(N)}"
        + (" (BENCH_QUICK)" if QUICK else ""))
    res = {}
    t0 = time.monotonic()
    try:
        steps = {"starts": bench_starts, "png": bench_png, "rtt": bench_rtt,
                 "fleet": bench_fleet, "burst": bench_burst, "flood": bench_flood,
                 "mcp": bench_mcp, "runtime": bench_runtime, "gateway": bench_gateway,
                 "curve": bench_curve, "sdk": bench_sdk, "cluster": bench_cluster,
                 "rtt_cost": bench_rtt_cost, "fork": bench_fork, "evict": bench_evict}
        for name in SECTIONS:
            if name in ONLY:
                machine.setdefault("loadavg_by_section", {})[name] = list(os.getloadavg())
                try:
                    steps[name](res)
                except BenchError as e:
                    log(f"{name}: FAILED: {e}")
                    res.setdefault("errors", {})[name] = str(e)
    finally:
        for obj in reversed(list(LIVE)):
            try:
                stop(obj)
            except Exception as e:  # keep stopping the others
                print(f"bench: stopping {obj}: {e}", file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
    machine["loadavg_end"] = list(os.getloadavg())
    machine["runtime_s"] = round(time.monotonic() - t0, 1)
    print_report(res, machine)
    with open(OUT, "w") as f:
        json.dump({"machine": machine, "n": N, "quick": QUICK, "sections": ONLY,
                   "results": res, "table": table(res),
                   "targets": [{"target": a, "measured": b, "met": c} for a, b, c in targets(res)]},
                  f, indent=1)
    print(f"\nwrote {OUT} ({machine['runtime_s']:.0f} s)")
    if res.get("errors"):
        sys.exit(1)


if __name__ == "__main__":
    main()
