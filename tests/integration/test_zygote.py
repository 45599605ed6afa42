"""The zygote spawner and the warm pool (kenneld --spawner zygote, the default).

Kernels are forks of one warm Python that imported the kernel runtime and the preload list;
a pool of sealed kernels waits for new sessions. These tests pin what that must not change:
every kernel draws its own random numbers, a dead zygote or pooled kernel is replaced, a
session that asks for other walls still gets them, and memory is reported per session.
The rest of the integration suite runs under both spawners (see the Makefile's check).
"""

import json
import os
import signal

import pytest

from .itest_helpers import run, wait_for
from .kenneld_proc import pid_alive

ZYGOTE = ["--spawner", "zygote"]

DRAW = ("import random, os, numpy\n"
        "import json as _j\n"
        "print(_j.dumps([random.random(), random.getrandbits(64), float(numpy.random.rand()),\n"
        "               int(numpy.random.default_rng().integers(1 << 62)), os.urandom(8).hex()]))")


def _stats(kenneld):
    return kenneld.ok("stats_request")


def _pool_ready(kenneld, n):
    wait_for(lambda: _stats(kenneld)["spawner"]["pool_ready"] >= n, timeout=30,
             what=f"{n} pooled kernels")


def _draws(cell):
    assert cell.content["status"] == "ok", cell.content
    return json.loads(cell.stream("stdout"))


@pytest.mark.timeout_s(60)
def test_sessions_forked_from_one_zygote_draw_different_random_numbers(start_kenneld, connect):
    """random, numpy's global RandomState, default_rng and os.urandom all differ between
    sessions: no stream is inherited from the zygote. Both ways a kernel is made are covered:
    handed over from the pool, and forked on demand (--pool 0)."""
    for pool in ("2", "0"):
        kenneld = start_kenneld(args=ZYGOTE + ["--pool", pool])
        if pool != "0":
            _pool_ready(kenneld, 2)
        draws = []
        for name in ("one", "two", "three"):
            kc = connect(kenneld.create(name)["connection_file"])
            draws.append(_draws(run(kc, DRAW, timeout=30)))
        assert _stats(kenneld)["spawner"]["zygote_pid"] > 0
        for i in range(len(draws[0])):
            column = [d[i] for d in draws]
            assert len(set(column)) == len(column), (pool, i, draws)


@pytest.mark.timeout_s(60)
def test_pool_hands_over_kernels_and_refills(start_kenneld, connect):
    kenneld = start_kenneld(args=ZYGOTE + ["--pool", "2"])
    _pool_ready(kenneld, 2)
    stats = _stats(kenneld)["spawner"]
    assert stats["kind"] == "zygote" and stats["pool"] == 2 and stats["zygote_ready"] is True
    info = kenneld.create("a")
    kc = connect(info["connection_file"])
    assert run(kc, "6 * 7").result == "42"
    _pool_ready(kenneld, 2)  # refilled in the background
    # Walls other than the pool's: forked on demand, and the walls are the asked ones.
    other = kenneld.create("small", limits={"memory": 256 << 20, "tmp": 8 << 20})
    kc2 = connect(other["connection_file"])
    cell = run(kc2, "import resource, os\n"
                    "st = os.statvfs('/tmp')\n"
                    "print(resource.getrlimit(resource.RLIMIT_AS)[0], st.f_blocks * st.f_frsize)")
    assert cell.stream("stdout").split() == [str(256 << 20), str(8 << 20)], cell.stream("stdout")
    assert other["limits"]["memory"] == 256 << 20


@pytest.mark.timeout_s(90)
def test_a_dead_zygote_and_a_dead_pooled_kernel_are_replaced(start_kenneld, connect):
    kenneld = start_kenneld(args=ZYGOTE + ["--pool", "1"])
    _pool_ready(kenneld, 1)
    kc = connect(kenneld.create("before")["connection_file"])
    run(kc, "x = 1")
    zygote = _stats(kenneld)["spawner"]["zygote_pid"]
    os.kill(zygote, signal.SIGKILL)  # a process our kenneld started
    # Noticed at once; the pool may start the next zygote as soon (its pid is then new).
    wait_for(lambda: _stats(kenneld)["spawner"]["zygote_pid"] != zygote, timeout=10,
             what="kenneld to notice")
    # The session made before lives on: kernels are kenneld's children, not the zygote's.
    assert run(kc, "x + 1").result == "2"
    kc2 = connect(kenneld.create("after")["connection_file"])  # from the pool
    assert run(kc2, "1 + 1").result == "2"
    kc3 = connect(kenneld.create("fresh", limits={"pids": 100})["connection_file"])  # forked
    assert run(kc3, "2 + 2").result == "4"
    assert _stats(kenneld)["spawner"]["zygote_pid"] not in (0, zygote)
    # A pooled kernel that dies while it waits is replaced too.
    _pool_ready(kenneld, 1)
    before = {s["kernel_pid"] for s in kenneld.sessions()}
    zygote = _stats(kenneld)["spawner"]["zygote_pid"]
    pooled = [p for p in _kenneld_children(kenneld) if p not in before and p != zygote]
    assert len(pooled) == 1, pooled
    os.kill(pooled[0], signal.SIGKILL)
    wait_for(lambda: pooled[0] not in _kenneld_children(kenneld)
             and _stats(kenneld)["spawner"]["pool_ready"] == 1, timeout=30,
             what="the pooled kernel replaced")
    assert "pool: a kernel was lost" in kenneld.log()


def _kenneld_children(kenneld):
    """kenneld's live children. Not zombies: a kernel the zygote was cloning when it was
    killed ends unreaped (README, "Not yet")."""
    with open(f"/proc/{kenneld.proc.pid}/task/{kenneld.proc.pid}/children") as f:
        return [int(p) for p in f.read().split() if pid_alive(int(p))]


def test_preload_failures_are_reported_and_harmless(start_kenneld, connect):
    kenneld = start_kenneld(args=ZYGOTE + ["--pool", "0", "--preload", "json,no_such_module_kn"])
    kc = connect(kenneld.create()["connection_file"])
    assert run(kc, "import sys; 'json' in sys.modules").result == "True"
    assert _stats(kenneld)["spawner"]["preload"] == "json,no_such_module_kn"
    wait_for(lambda: "could not preload no_such_module_kn" in kenneld.log(), timeout=10,
             what="the preload failure logged")


def test_session_memory_is_reported_per_session(kenneld, session):
    run(session, "import numpy; a = numpy.ones(4 << 20, dtype='u1')")
    info = kenneld.ok("info_request", {"session": session.session_info["id"]})["session"]
    assert 0 < info["uss_bytes"] <= info["pss_bytes"], info
    assert info["uss_bytes"] >= 4 << 20, info  # the array's pages are the session's own
    listing = kenneld.cli("ls")
    assert "PSS" in listing.stdout and "USS" in listing.stdout, listing.stdout


def test_no_host_path_in_what_a_kernel_can_read_of_itself(kenneld, session):
    """A forked kernel's command line and initial environment are the zygote's: neither may
    name a host path (the repository, the state directory)."""
    repo = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
    cell = run(session, "import os\n"
                        "blobs = {}\n"
                        "for p in os.listdir('/proc'):\n"
                        "    if p.isdigit() or p == 'self':\n"
                        "        for f in ('cmdline', 'environ'):\n"
                        "            try:\n"
                        "                blobs[p + '/' + f] = open(f'/proc/{p}/{f}', 'rb').read().decode(errors='replace')\n"
                        "            except OSError:\n"
                        "                pass\n"
                        "import json; print(json.dumps(blobs))")
    blobs = json.loads(cell.stream("stdout"))
    assert blobs, cell.content
    for where, text in blobs.items():
        assert repo not in text and str(kenneld.state_dir) not in text, (where, text)


def test_descriptors_the_preload_left_open_are_dev_null_in_kernels(kenneld, session):
    """IPython keeps /dev/null open from import time; the seal closes that fd in every kernel.
    Left so, the stale object would write into (and at exit close) whatever file the kernel
    opened next under that number: the kernel points it at its own /dev/null instead."""
    cell = run(session, "import os, IPython.utils.io as iu\n"
                        "f = open('mine.txt', 'w')\n"
                        "iu.devnull.write('stale'); iu.devnull.flush()\n"
                        "f.write('mine'); f.close()\n"
                        "print(os.readlink(f'/proc/self/fd/{iu.devnull.fileno()}'), open('mine.txt').read())")
    assert cell.stream("stdout").split() == ["/dev/null", "mine"], cell.content
