"""What kennel-gateway's serving process spends per warm `1+1` over its WebSocket, in counts
that do not depend on the machine's load: instructions (callgrind, counters zeroed after the
warm-up) and system calls (strace -c -f, attached after the warm-up), per cell; and the
wall-clock p50 of the same trips beside a direct ZeroMQ client of the same session, which
does depend on load. Usage:

  /usr/bin/python3 bench/gateway_cost.py [GATEWAY_BINARY]     (BENCH_COST_TRIPS: 200)

It uses bench.py's kenneld, gateway and clients; everything it starts is ended by pid."""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as B  # noqa: E402


def _gateway(k, binary, wrap=()):
    port = B._free_port()
    tokens = os.path.join(k.root, "tokens")
    with open(tokens, "w") as f:
        f.write(f"{B.GW_TOKEN} bench\n")
    os.chmod(tokens, 0o600)
    gw = B.Proc([*wrap, binary, "--state-dir", k.state, "--listen", f"127.0.0.1:{port}",
                 "--tokens", tokens, "--log-level", "warn"],
                os.path.join(k.root, f"gateway-{port}.log"))
    B._wait_http(f"http://127.0.0.1:{port}/api", gw.proc, "kennel-gateway", timeout=120)
    auth = {"Authorization": f"token {B.GW_TOKEN}"}
    model = B._post_json(f"http://127.0.0.1:{port}/api/kernels",
                         {"name": "python3", "env": {"KERNEL_SESSION_NAME": "cost"}}, auth)
    ws = B.WsClient(f"ws://127.0.0.1:{port}/api/kernels/{model['id']}/channels",
                    [f"Authorization: token {B.GW_TOKEN}"])
    return gw, ws


def _serving_pid(gw):
    """The serving child (the gateway drops privileges when started as root); under valgrind
    the child is valgrind's too."""
    import time
    for _ in range(100):
        pid = B._serving_pid(gw)
        if pid != gw.proc.pid or os.geteuid() != 0:
            return pid
        time.sleep(0.1)
    return gw.proc.pid


def _callgrind_total(k, binary, trips):
    """Instructions of the serving child of a gateway under callgrind, from its start to its
    end, having served a warm-up of 30 trips and then trips more."""
    import time
    cg_dir = tempfile.mkdtemp(prefix="kb-gwcg-", dir="/tmp")
    os.chmod(cg_dir, 0o1777)  # the serving child writes its dump as --user (nobody)
    gw, ws = _gateway(k, binary, ["valgrind", "--tool=callgrind", "-q",
                                  f"--callgrind-out-file={cg_dir}/cg.%p"])
    try:
        ws.trips(0, warmup=30)
        pid = _serving_pid(gw)
        ws.trips(trips)
    finally:
        ws.close()
        time.sleep(1)  # the close is done with before the end
        B.stop(gw)
    try:
        with open(os.path.join(cg_dir, f"cg.{pid}")) as f:
            total = next(int(line.split()[1]) for line in f if line.startswith("totals:"))
        keep = os.environ.get("GWCOST_KEEP")
        if keep and trips:
            shutil.copy(os.path.join(cg_dir, f"cg.{pid}"), keep)
        return total
    finally:
        shutil.rmtree(cg_dir, ignore_errors=True)


def main():
    binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else B.GATEWAY)
    n = B.N["cost_trips"]
    out = {"gateway": binary, "n": n}
    (k,) = B.start_kennelds([("gwcost", ["--manager", f"tcp://127.0.0.1:{B._free_port()}",
                                          "--admit-user", "nobody"])])
    ctx = B.zmq.Context()
    try:
        k.wait_pool(300)
        # Wall clock and system calls.
        gw, ws = _gateway(k, binary)
        try:
            kc = B.Raw(ctx, B.conn_of(k.info("bench.cost")))
            B.prime(kc)
            ws.trips(0, warmup=50)
            lat = {"gateway": [], "direct": []}
            for _ in range(2):
                lat["gateway"] += ws.trips(n // 2)
                lat["direct"] += B.round_trips(kc, n // 2, warmup=10)[0]
            kc.close()
            out["p50_ms"] = statistics.median(lat["gateway"])
            out["direct_p50_ms"] = statistics.median(lat["direct"])
            out["added_p50_ms"] = out["p50_ms"] - out["direct_p50_ms"]
            pid = _serving_pid(gw)
            cpu0 = B._tree_cpu_ns(pid)
            ws.trips(n)
            out["cpu_us"] = (B._tree_cpu_ns(pid) - cpu0) / 1e3 / n
            total, calls = B._strace_calls([pid], lambda: ws.trips(n))[pid]
            out["syscalls"] = total / n
            out["syscalls_by_name"] = {c: round(v / n, 2) for c, v in
                                       sorted(calls.items(), key=lambda x: -x[1])[:14]}
        finally:
            ws.close()
            B.stop(gw)
        # Instructions: callgrind_control cannot reach the serving child once it dropped
        # privileges, so two runs, of 0 and of n trips after the same warm-up, each dumped
        # when the child exits; the difference over n is a trip's.
        totals = [_callgrind_total(k, binary, t) for t in (0, n)]
        out["instructions"] = (totals[1] - totals[0]) / n
    finally:
        ctx.term()
        B.stop(k)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
