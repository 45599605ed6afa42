"""bench: kennel against ipykernel, in the same run, on this machine. Ratios matter more
than absolute numbers: machines are shared and noisy.

  new session -> first `1+1` result   kennel: create_request + connect + execute
                                      ipykernel: KernelManager.start_kernel + connect + execute
  warm `1+1` round trip               execute_reply and status idle both received
  idle session memory                 kennel: the session's cgroup; ipykernel: kernel PSS

Prints a table and writes bench/results.json. Run with `make bench` (uses /usr/bin/python3).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from jupyter_client import KernelManager
from jupyter_client.session import Session
import zmq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STARTS = int(os.environ.get("BENCH_STARTS", "8"))
TRIPS = int(os.environ.get("BENCH_TRIPS", "300"))


def first_result(kc, timeout=60):
    """Send 1+1 right away and wait for its reply (no wait_for_ready: see notes/baselines)."""
    msg_id = kc.execute("1+1")
    deadline = time.monotonic() + timeout
    while True:
        m = kc.get_shell_msg(timeout=max(0.01, deadline - time.monotonic()))
        if m["parent_header"].get("msg_id") == msg_id:
            return


def round_trip(kc):
    msg_id = kc.execute("1+1")
    got_reply = got_idle = False
    while not (got_reply and got_idle):
        if not got_reply:
            got_reply = kc.get_shell_msg(timeout=10)["parent_header"].get("msg_id") == msg_id
        m = kc.get_iopub_msg(timeout=10)
        if (m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status"
                and m["content"]["execution_state"] == "idle"):
            got_idle = True


def warm_trips(kc):
    kc.wait_for_ready(timeout=30)  # iopub subscribed: no idle status is missed from here
    for _ in range(20):
        round_trip(kc)
    times = []
    for _ in range(TRIPS):
        t = time.perf_counter()
        round_trip(kc)
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


def pss_bytes(pid):
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                total += int(line.split()[1]) * 1024
    return total


class Kennel:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="kb-", dir="/tmp")
        self.proc = subprocess.Popen([os.path.join(ROOT, "bin", "kenneld"), "--state-dir",
                                      self.dir, "--log-level", "warn"])
        info_path = os.path.join(self.dir, "kenneld.json")
        while not os.path.exists(info_path):
            time.sleep(0.01)
        mgr = json.load(open(info_path))["manager"]
        self.session = Session(key=mgr["key"].encode(), signature_scheme="hmac-sha256")
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.connect(mgr["endpoint"])

    def call(self, msg_type, content):
        self.session.send(self.sock, msg_type, content)
        _, frames = self.session.feed_identities(self.sock.recv_multipart())
        return self.session.deserialize(frames)["content"]

    def client(self, connection_file):
        from jupyter_client import BlockingKernelClient
        kc = BlockingKernelClient(connection_file=connection_file)
        kc.load_connection_file()
        kc.start_channels()
        return kc

    def stop(self):
        self.sock.close(0)
        self.ctx.term()
        self.proc.terminate()
        self.proc.wait(30)


def bench_kennel():
    k = Kennel()
    try:
        starts = []
        for i in range(STARTS):
            t = time.perf_counter()
            info = k.call("create_request", {"name": f"s{i}"})["session"]
            kc = k.client(info["connection_file"])
            first_result(kc)
            starts.append((time.perf_counter() - t) * 1000)
            kc.stop_channels()
            k.call("end_request", {"session": f"s{i}"})
        info = k.call("create_request", {"name": "warm"})["session"]
        kc = k.client(info["connection_file"])
        first_result(kc)
        p50, p99 = warm_trips(kc)
        time.sleep(1)
        mem = k.call("info_request", {"session": "warm"})["session"]["memory_bytes"]
        kc.stop_channels()
        return {"start_ms": statistics.median(starts), "rtt_p50_ms": p50, "rtt_p99_ms": p99,
                "idle_memory_bytes": mem}
    finally:
        k.stop()


def start_ipykernel():
    """An ipykernel of this interpreter and a client that got its first result."""
    km = KernelManager(kernel_cmd=[sys.executable, "-m", "ipykernel_launcher", "-f",
                                   "{connection_file}"])
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    first_result(kc)
    return km, kc


def bench_ipykernel():
    starts = []
    for _ in range(STARTS):
        t = time.perf_counter()
        km, kc = start_ipykernel()
        starts.append((time.perf_counter() - t) * 1000)
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    km, kc = start_ipykernel()
    p50, p99 = warm_trips(kc)
    time.sleep(1)
    mem = pss_bytes(km.provisioner.process.pid)
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    return {"start_ms": statistics.median(starts), "rtt_p50_ms": p50, "rtt_p99_ms": p99,
            "idle_memory_bytes": mem}


def main():
    kennel, ipk = bench_kennel(), bench_ipykernel()
    rows = [("new session -> first 1+1 (median)", "start_ms", "ms"),
            ("warm 1+1 round trip p50", "rtt_p50_ms", "ms"),
            ("warm 1+1 round trip p99", "rtt_p99_ms", "ms"),
            ("idle session memory", "idle_memory_bytes", "MiB")]
    print(f"{'':38} {'kennel':>10} {'ipykernel':>10} {'ratio':>8}")
    for label, key, unit in rows:
        a, b = kennel[key], ipk[key]
        scale = 1 / 1048576 if unit == "MiB" else 1
        print(f"{label:38} {a * scale:7.1f}{unit:>3} {b * scale:7.1f}{unit:>3} {b / a:7.2f}x")
    print("(ratio: ipykernel / kennel; above 1 means kennel is faster or smaller. kennel's memory"
          " is its whole sandboxed session's cgroup, ipykernel's the kernel's PSS.)")
    out = os.path.join(ROOT, "bench", "results.json")
    with open(out, "w") as f:
        json.dump({"kennel": kennel, "ipykernel": ipk, "starts": STARTS, "trips": TRIPS,
                   "date": time.strftime("%Y-%m-%d")}, f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
