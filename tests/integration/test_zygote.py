"""The zygote spawner and the warm pool (kenneld --spawner zygote, the default).

Kernels are forks of one warm Python that imported the kernel runtime and the preload list;
a pool of sealed kernels waits for new sessions. These tests pin what that must not change:
every kernel draws its own random numbers, a dead zygote or pooled kernel is replaced, a
session that asks for other walls still gets them, and memory is reported per session.
The rest of the integration suite runs under both spawners (see the Makefile's check).
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from .itest_helpers import finish, run, shell_reply, wait_for
from .kenneld_proc import ROOT, children, pid_alive

# The zygote's machinery (the pool, its deaths, naming, page hints) is the same whatever it
# preloads: the tests take the light preload, and those about what the default preload
# gives a kernel are marked default_preload.

KERNEL_DIR = ROOT / "kernels" / "python"

ZYGOTE = ["--spawner", "zygote"]

DRAW = ("import random, os, numpy\n"
        "import json as _j\n"
        "print(_j.dumps([random.random(), random.getrandbits(64), float(numpy.random.rand()),\n"
        "               int(numpy.random.default_rng().integers(1 << 62)), os.urandom(8).hex(),\n"
        "               __import__('multiprocessing').current_process().authkey.hex()]))")


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
    """random, numpy's global RandomState, default_rng, os.urandom and multiprocessing's
    authentication key all differ between sessions: nothing is inherited from the zygote. Both ways a kernel is made are covered:
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


CENSUS = ("import sys, linecache\n"
          "ip = get_ipython(); hm = ip.history_manager\n"
          "caches = (list(hm.db_input_cache), list(hm.db_output_cache))  # get_tail empties them\n"
          "print(sorted(globals()), sorted(ip.user_ns_hidden), dict(Out), repr(_), repr(__),\n"
          "      repr(___), In, ip.execution_count, hm.get_tail(5), [_i, _ii, _iii],\n"
          "      list(hm.get_range(output=True)), hm.output_hist_reprs, caches,\n"
          "      ip.displayhook.___, ip.last_execution_succeeded,\n"
          "      getattr(ip.last_execution_result, 'result', None),\n"
          "      sorted(ip.compile._filename_map.items()),\n"
          "      sorted(k for k in linecache.cache if k.startswith('<ipython-input')),\n"
          "      getattr(ip, '_last_input_line', None), getattr(sys.stdout, 'softspace', None),\n"
          "      [hasattr(sys, a) for a in ('last_type', 'last_value', 'last_traceback')])")


@pytest.mark.default_preload
@pytest.mark.timeout_s(90)
def test_a_forked_kernels_first_cell_finds_what_a_cold_kernels_does(start_kenneld, connect):
    """The zygote and each forked kernel run a throwaway cell, with history, before the kernel
    says hello. It must leave nothing behind: names, result cache, In/Out, history (its lists
    and caches) and execution count are those of a cold kernel (--spawner exec), pooled or
    forked on demand, in the first cell and after a cell with a result."""
    seen = {}
    for label, args in (("cold", ["--spawner", "exec"]), ("pooled", ZYGOTE + ["--pool", "1"]),
                        ("forked", ZYGOTE + ["--pool", "0"])):
        kenneld = start_kenneld(args=args)
        if label == "pooled":
            _pool_ready(kenneld, 1)
        kc = connect(kenneld.create("census")["connection_file"])
        cell = run(kc, CENSUS, timeout=30)
        assert cell.content["status"] == "ok" and cell.content["execution_count"] == 1, cell.content
        # And after a cell with a result: Out, _2, _i2 and the history's caches.
        assert run(kc, "40 + 2").result == "42"
        later = run(kc, CENSUS)
        assert later.content["execution_count"] == 3, later.content
        seen[label] = cell.stream("stdout") + later.stream("stdout")
    assert seen["pooled"] == seen["cold"] and seen["forked"] == seen["cold"], seen


def _cpu_share(pid):
    """The cpu share of pid's cgroup (v1 cpu.shares, or v2 cpu.weight), or None."""
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if "cpu" in controllers.split(","):
                for mount in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
                    if os.path.exists(f"{mount}{path}/cpu.shares"):
                        with open(f"{mount}{path}/cpu.shares") as g:
                            return int(g.read())
            if controllers == "" and os.path.exists(f"/sys/fs/cgroup/unified{path}/cpu.weight"):
                with open(f"/sys/fs/cgroup/unified{path}/cpu.weight") as g:
                    return int(g.read())
    return None


@pytest.mark.timeout_s(60)
def test_pool_hands_over_kernels_and_refills(start_kenneld, connect):
    kenneld = start_kenneld(args=ZYGOTE + ["--pool", "2"])
    _pool_ready(kenneld, 2)
    stats = _stats(kenneld)["spawner"]
    assert stats["kind"] == "zygote" and stats["pool"] == 2 and stats["zygote_ready"] is True
    pooled = [p for p in _kenneld_children(kenneld) if p != stats["zygote_pid"]]
    assert len(pooled) == 2, pooled
    info = kenneld.create("a")
    kc = connect(info["connection_file"])
    assert run(kc, "6 * 7").result == "42"
    # A waiting kernel starts on CPU time nobody else wants; the claimed one gets its share.
    # (Without a cpu controller there are no shares to give: nothing to check then.)
    assert info["kernel_pid"] in pooled
    share = _cpu_share(info["kernel_pid"])
    if share is not None:
        assert share in (1024, 100), share
        waiting = [p for p in pooled if p != info["kernel_pid"]]
        assert [_cpu_share(p) for p in waiting] in ([2], [1]), waiting
    _pool_ready(kenneld, 2)  # refilled in the background
    # Walls other than the pool's: forked on demand, and the walls are the asked ones.
    other = kenneld.create("small", limits={"memory": 256 << 20, "tmp": 8 << 20})
    kc2 = connect(other["connection_file"])
    cell = run(kc2, "import resource, os\n"
                    "st = os.statvfs('/tmp')\n"
                    "vm = int(open('/proc/self/statm').read().split()[0]) * 4096\n"
                    "print(resource.getrlimit(resource.RLIMIT_AS)[0], vm, st.f_blocks * st.f_frsize)")
    limit, vm, tmp = map(int, cell.stream("stdout").split())
    # RLIMIT_AS: the memory limit on top of the zygote's mappings, which the kernel inherited
    # (its own address space now is those and what it made since).
    assert 256 << 20 < limit <= (256 << 20) + vm and tmp == 8 << 20, cell.stream("stdout")
    assert other["limits"]["memory"] == 256 << 20


@pytest.mark.timeout_s(120)
def test_the_pool_grows_to_a_burst_and_halves_back_once_it_is_over(start_kenneld, connect):
    """Sessions asked for within a second are the demand: the pool grows to it (up to
    --pool-max), so that the next burst like it is a hand-over each; --pool-linger seconds
    without such a burst, it halves back toward --pool, its waiting kernels ended."""
    kenneld = start_kenneld(args=ZYGOTE + ["--pool", "1", "--pool-max", "4", "--pool-linger", "8"])
    _pool_ready(kenneld, 1)
    spawner = _stats(kenneld)["spawner"]
    assert (spawner["pool"], spawner["pool_max"], spawner["pool_target"]) == (1, 4, 1), spawner
    # A burst of 6, sent at once: more than the pool holds, more than its max.
    sent = [kenneld._session.send(kenneld._sock, "create_request", {"name": f"b{i}"})
            for i in range(6)]
    replies = [kenneld.request("list_request")]  # (the creates' replies come first)
    created = kenneld.sessions()
    assert sorted(s["name"] for s in created) == [f"b{i}" for i in range(6)], (sent, created)
    assert _stats(kenneld)["spawner"]["pool_target"] == 4
    assert "grows to 4 kernels" in kenneld.log(tail=None)
    _pool_ready(kenneld, 4)  # filled in the background, up to the max
    wait_for(lambda: all(s["kernel_pid"] for s in kenneld.sessions()), what="the burst's kernels")
    sessions = {s["kernel_pid"] for s in kenneld.sessions()}
    zygote = _stats(kenneld)["spawner"]["zygote_pid"]
    pooled = [p for p in _kenneld_children(kenneld) if p not in sessions and p != zygote]
    assert len(pooled) == 4, pooled
    # The next burst of 4 takes them all: hand-overs, not forks.
    for i in range(4):
        kenneld.create(f"c{i}")
    assert pooled and set(pooled) <= {s["kernel_pid"] for s in kenneld.sessions()}, replies
    for s in kenneld.sessions():
        kenneld.ok("end_request", {"session": s["id"]})
    # 8 s without a burst: 4 -> 2; 8 s more: -> 1, the waiting kernels past it ended.
    wait_for(lambda: _stats(kenneld)["spawner"]["pool_target"] == 2, timeout=20,
             what="the pool to halve")
    wait_for(lambda: _stats(kenneld)["spawner"]["pool_target"] == 1, timeout=20,
             what="the pool back at --pool")
    zygote = _stats(kenneld)["spawner"]["zygote_pid"]
    wait_for(lambda: len([p for p in _kenneld_children(kenneld) if p != zygote]) == 1,
             timeout=20, what="one waiting kernel left")
    assert "no burst for 8 s: keeps 1 kernels (was 2)" in kenneld.log(tail=None)


def test_a_pool_max_below_the_pool_is_refused(tmp_path):
    r = subprocess.run([str(ROOT / "bin" / "kenneld"), "--state-dir", str(tmp_path / "s"),
                        "--pool", "3", "--pool-max", "2"], capture_output=True, text=True,
                       timeout=20)
    assert r.returncode != 0 and "--pool-max (2) must be at least --pool (3)" in r.stderr, r


@pytest.mark.timeout_s(90)
def test_a_dead_zygote_and_a_dead_pooled_kernel_are_replaced(start_kenneld, connect):
    # A pool that never grows: the test counts its kernels.
    kenneld = start_kenneld(args=ZYGOTE + ["--pool", "1", "--pool-max", "1"])
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
    assert "pool: a kernel was lost" in kenneld.log(tail=None)


@contextlib.contextmanager
def _zygote_held(kenneld, syscalls):
    """The zygote under strace, each of these system calls held back 30 s (its answers:
    sendto, sendmsg; its writes of a new kernel's uid map: write). Yields the zygote's pid
    and a function that kills it (a process our kenneld started) and waits until kenneld has
    killed and reaped what it cloned and never named."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("needs strace to hold the zygote's answer back")
    wait_for(lambda: _stats(kenneld)["spawner"]["zygote_ready"], timeout=30, what="the zygote")
    zygote = _stats(kenneld)["spawner"]["zygote_pid"]
    tracer = subprocess.Popen([strace, "-qq", "-o", "/dev/null", "-p", str(zygote),
                               "-e", f"trace={syscalls}",
                               "-e", f"inject={syscalls}:delay_enter=30000000"],
                              stderr=subprocess.DEVNULL)
    try:
        def traced():
            with open(f"/proc/{zygote}/status") as f:
                return any(line.startswith("TracerPid:") and line.split()[1] != "0"
                           for line in f)
        wait_for(traced, timeout=10, what="strace attached")

        def kill():
            strays = [p for p in _kenneld_children(kenneld) if p != zygote]
            os.kill(zygote, signal.SIGKILL)
            # A killed tracee is reported to its tracer first, then to kenneld: end strace
            # too (after the kill, or the zygote would go on and answer).
            tracer.kill()
            wait_for(lambda: not any(pid_alive(p) for p in strays)
                     and not set(strays) & set(_kenneld_children(kenneld, zombies=True)),
                     timeout=20, what="the unnamed kernel killed and reaped")
            assert "a kernel the zygote never named" in kenneld.log(tail=None)
        yield zygote, kill
    finally:
        tracer.kill()
        tracer.wait(10)


@pytest.mark.timeout_s(60)
def test_a_kernel_the_zygote_cloned_but_never_named_is_killed_and_asked_again(start_kenneld,
                                                                              connect):
    """The zygote dies between cloning a kernel and saying its pid: the kernel is kenneld's
    child (CLONE_PARENT) that nothing holds, killed and reaped; the session's kernel is asked
    of the next zygote, so the request waiting for it is served. The zygote is held before
    it writes the new kernel's uid map, so that kernel never says hello."""
    kenneld = start_kenneld(args=ZYGOTE + ["--pool", "0"])
    with _zygote_held(kenneld, "sendto,sendmsg,write") as (zygote, kill_zygote):
        kc = connect(kenneld.create("held")["connection_file"], ready=False)
        waiting = kc.execute("1 + 1")
        wait_for(lambda: [p for p in _kenneld_children(kenneld) if p != zygote], timeout=20,
                 what="the kernel cloned")
        assert kenneld.sessions()[0]["kernel_pid"] == 0  # not named: the answer is held
        kill_zygote()
        cell = finish(kc, waiting, timeout=30)
        assert cell.content["status"] == "ok" and cell.result == "2", cell.content
        assert _stats(kenneld)["spawner"]["zygote_pid"] not in (0, zygote)
        assert kenneld.ok("info_request", {"session": "held"})["session"]["restarts"] == 0
        assert "asking the next one" in kenneld.log(tail=None)


@pytest.mark.timeout_s(60)
def test_a_kernel_that_served_before_the_zygote_named_it_is_lost_as_a_crash(start_kenneld,
                                                                           connect):
    """Only the answer is held: the kernel says hello and serves a cell. The zygote's death
    then ends it like any crash (a restart, the session's state lost), and its successor is
    not taken for a second hello of the same kernel (a protocol violation)."""
    kenneld = start_kenneld(args=ZYGOTE + ["--pool", "0"])
    with _zygote_held(kenneld, "sendto,sendmsg") as (zygote, kill_zygote):
        kc = connect(kenneld.create("served")["connection_file"])
        assert run(kc, "x = 1\nx").result == "1"
        assert kenneld.sessions()[0]["kernel_pid"] == 0  # not named: the answer is held
        kill_zygote()
        assert run(kc, "x", timeout=30).content["ename"] == "NameError"
        assert kenneld.ok("info_request", {"session": "served"})["session"]["restarts"] == 1
        assert "unexpected hello" not in kenneld.log(tail=None)


_HINT_CELL = ("import _kennel_zygote, os, json\n"
              "print(json.dumps([_kennel_zygote.populated(), sorted(os.listdir('/proc/self/fd'))]))")


@pytest.mark.timeout_s(90)
def test_the_page_hint_is_learned_from_two_kernels_and_asked_for_by_the_next(start_kenneld,
                                                                             connect):
    """The first two kernels (forked on demand here, in order) report the pages they wrote by
    their hello, through a pipe each has until then; every later kernel asks for the pages
    both reported right after its fork. No kernel sees a descriptor of this: the learners'
    open fds are the others'."""
    kenneld = start_kenneld(args=ZYGOTE + ["--pool", "0"])
    seen = []
    for name in ("learner-1", "learner-2", "hinted-1", "hinted-2"):
        kc = connect(kenneld.create(name)["connection_file"])
        cell = run(kc, _HINT_CELL, timeout=30)
        assert cell.content["status"] == "ok", cell.content
        seen.append(json.loads(cell.stream("stdout")))
    hint = _stats(kenneld)["spawner"]["page_hint"]
    # A kernel writes ~1400 zygote pages by its hello here; the hint is at most 4096.
    assert 200 < hint <= 4096, hint
    populated = [p for p, _ in seen]
    assert populated[:2] == [0, 0], populated  # the learners are forked without a hint
    for p in populated[2:]:
        assert 0.9 * hint <= p <= hint, (populated, hint)
    fds = [f for _, f in seen]
    assert all(f == fds[0] for f in fds), fds
    assert f"the page hint has {hint} pages" in kenneld.log(tail=None)


_REPORT_CELL = """
import _kennel_zygote, array, mmap, os
def report(step):
    region = mmap.mmap(-1, 32 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # untouched
    for at in range(0, len(region), step):
        region[at] = 1  # every page written, or every other one
    r, w = os.pipe()
    pages = _kennel_zygote.report_pages(w)  # closes w
    with os.fdopen(r, "rb") as f:
        words = array.array("Q", f.read())
    assert sum(words[1::2]) == pages * 4096, (pages, sum(words[1::2]))
    region.close()
    return len(words) // 2, pages
print((report(4096), report(8192)))
"""


def test_a_page_report_stops_at_its_limits(kenneld, session):
    """The learners' report is at most 4096 pages in at most 3072 runs, however much a kernel
    holds alone (here a kernel's own code calls it after writing 32 MiB: all of it, then
    every other page, each page a run of its own)."""
    (dense_runs, dense_pages), (sparse_runs, sparse_pages) = eval(
        run(session, _REPORT_CELL, timeout=30).stream("stdout"))
    assert dense_pages == 4096 and dense_runs < 3072, (dense_runs, dense_pages)
    assert sparse_runs == 3072 and sparse_pages <= 4096, (sparse_runs, sparse_pages)


def _anon_huge_kib(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("AnonHugePages:"))


_OWN_ARENAS_CELL = ("def huge():\n"
                    "    with open('/proc/self/smaps_rollup') as f:\n"
                    "        return next(int(l.split()[1]) for l in f if l.startswith('AnonHugePages:'))\n"
                    "before = huge()\n"
                    "objects = [str(i) * 3 for i in range(400_000)]  # ~40 MiB of arenas\n"
                    "print(before, huge())")


@pytest.mark.timeout_s(60)
def test_the_zygote_s_objects_are_in_huge_pages_and_a_kernel_s_own_are_not(start_kenneld,
                                                                           connect):
    """The zygote's imports fill its arenas in transparent huge pages (~10,000 fewer page
    faults at its start: zygote.c's huge_arenas), where the host gives them on request
    (THP `madvise`); it stops before its first fork, so a kernel's own objects take 4 KiB
    pages (a huge page each would cost every session 2 MiB of its own). With THP `always`
    every process's memory is in huge pages anyway, and with `never` none is."""
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        if "[madvise]" not in f.read():
            pytest.skip("transparent huge pages are not `madvise` here: nothing to tell apart")
    kenneld = start_kenneld(args=ZYGOTE + ["--pool", "0"])
    wait_for(lambda: _stats(kenneld)["spawner"]["zygote_ready"], timeout=30, what="the zygote")
    zygote = _stats(kenneld)["spawner"]["zygote_pid"]
    # Before any fork: after one, the zygote's own writes to a page it shares split its huge
    # page again (one 4 KiB copy each).
    assert _anon_huge_kib(zygote) >= 8 << 10, "the zygote's arenas are not in huge pages"
    kc = connect(kenneld.create("own")["connection_file"])
    before, after = map(int, run(kc, _OWN_ARENAS_CELL, timeout=30).stream("stdout").split())
    assert after <= before, f"a kernel's own arenas took {after - before} KiB of huge pages"


def _kenneld_children(kenneld, zombies=False):
    """kenneld's children; without zombies unless asked (a kernel the zygote was cloning when
    it was killed is a zombie until kenneld's sweep has reaped it)."""
    return [p for p in children(kenneld.proc.pid) if zombies or pid_alive(p)]


def test_preload_failures_are_reported_and_harmless(start_kenneld, connect):
    kenneld = start_kenneld(args=ZYGOTE + ["--pool", "0", "--preload", "json,no_such_module_kn"])
    kc = connect(kenneld.create()["connection_file"])
    assert run(kc, "import sys; 'json' in sys.modules").result == "True"
    assert _stats(kenneld)["spawner"]["preload"] == "json,no_such_module_kn"
    wait_for(lambda: "could not preload no_such_module_kn" in kenneld.log(tail=None), timeout=10,
             what="the preload failure logged")


@pytest.mark.default_preload
@pytest.mark.timeout_s(60)
def test_memory_limits_near_the_zygotes_size_start(kenneld, connect):
    """A forked kernel inherits the zygote's mappings (~270 MiB with the default preload).
    RLIMIT_AS (--memory) counted them, and a 64 MiB malloc arena per helper thread, so under
    some limits the next thread's stack did not fit and every start failed ("exited with
    status 1"). Now a kernel's RLIMIT_AS is its limit on top of what it inherited (the
    zygote's size at the fork, less than the kernel's own by its first cell), and the
    smallest limit kenneld takes (256 MiB) leaves a session room of its own."""
    for mib in (256, 298, 304, 370):
        kc = connect(kenneld.create(f"m{mib}", limits={"memory": mib << 20})["connection_file"],
                     ready=False)
        cell = run(kc, "import resource, threading\n"
                       "t = threading.Thread(target=print)\nt.start(); t.join()\n"
                       "inherited = resource.getrlimit(resource.RLIMIT_AS)[0] - "
                       f"({mib} << 20)\n"
                       "now = int(open('/proc/self/statm').read().split()[0]) * 4096\n"
                       "x = bytearray(100 << 20)  # 100 MiB of its own, under any of these limits\n"
                       "(inherited > 150 << 20, inherited <= now)", timeout=20)
        assert (mib, cell.content["status"], cell.result) == (mib, "ok", "(True, True)"), \
            cell.content


@pytest.fixture
def failing_kernel_dir():
    """The kernel runtime, whose forked kernels fail before their hello."""
    d = Path(tempfile.mkdtemp(prefix="kn-kdir-", dir="/tmp"))
    shutil.copytree(KERNEL_DIR, d, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    src = (d / "kennel_kernel.py").read_text()
    marker = "def start(pipe_fd, hello=True):\n"
    assert marker in src
    (d / "kennel_kernel.py").write_text(src.replace(
        marker, marker + "    raise RuntimeError('refused by the test')\n"))
    for p in [d, *d.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    yield d
    shutil.rmtree(d)


def test_a_kernel_that_fails_before_its_hello_says_why(start_kenneld, failing_kernel_dir, connect):
    """Its stderr is /dev/null: the failure once read only "exited with status 1"."""
    kenneld = start_kenneld(args=ZYGOTE + ["--pool", "0", "--kernel-dir", str(failing_kernel_dir)])
    kc = connect(kenneld.create("fails")["connection_file"], ready=False)
    reply = shell_reply(kc, kc.execute("1"), timeout=20)["content"]
    assert reply["ename"] == "KernelStartFailed", reply
    assert "RuntimeError: refused by the test" in reply["evalue"], reply
    assert "RuntimeError: refused by the test" in kenneld.log(tail=None)


def test_session_memory_is_reported_per_session(kenneld, session):
    run(session, "import numpy; a = numpy.ones(4 << 20, dtype='u1')")
    info = kenneld.ok("info_request", {"session": session.session_info["id"]})["session"]
    assert 0 < info["uss_bytes"] <= info["pss_bytes"], info
    assert info["uss_bytes"] >= 4 << 20, info  # the array's pages are the session's own
    listing = kenneld.cli("ls")
    assert "PSS" in listing.stdout and "USS" in listing.stdout, listing.stdout
    # A listing shows a measure too (within its time budget, or the last one taken).
    listed = [s for s in kenneld.sessions() if s["id"] == info["id"]]
    assert listed and listed[0]["uss_bytes"] >= 4 << 20, listed
    # create_request's reply does not measure: it is on every new session's path.
    assert kenneld.create("new")["pss_bytes"] == 0


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


ENV_CELL = "import os, json; print(json.dumps(dict(os.environ)))"


@pytest.mark.parametrize("kenneld", [ZYGOTE + ["--pool", "1"], ["--spawner", "exec"]],
                         indirect=True)
def test_a_kernels_environment_is_its_own_whichever_spawner(kenneld, connect):
    """A kernel's environment is kenneld's short allowlist (plus the settings the kernel adds:
    two for matplotlib, SHELL for `!`, PYTHONPATH for the Pythons it starts: docs/runtime.md),
    nothing of kenneld's or of the zygote's own (the zygote imports with settings of its own),
    for pooled and on-demand kernels alike."""
    envs = []
    for name in ("first", "second", "third"):  # the pool's, then forked on demand
        kc = connect(kenneld.create(name)["connection_file"])
        envs.append(json.loads(run(kc, ENV_CELL, timeout=30).stream("stdout")))
    for env in envs:
        assert set(env) == {"PATH", "LANG", "HOME", "IPYTHONDIR", "MPLCONFIGDIR", "MPLBACKEND",
                            "FONTCONFIG_FILE", "SHELL", "PYTHONPATH"}, env
        assert env["HOME"] == "/workspace" and env["IPYTHONDIR"] == "/tmp/.ipython", env
        assert env["PYTHONPATH"] == "/opt/kennel/sandbox_site", env
    assert envs[0] == envs[1] == envs[2]


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


def test_ipython_paths_are_the_kernels_own(kenneld, session):
    """The zygote sets the shell's paths for its kernels before it forks them (so that they
    share those objects): every one must be what the kernel's own environment and working
    directory give, with its directories made in the kernel's sandbox, none the zygote's."""
    cell = run(session, "import os, json\n"
                        "ip = get_ipython(); pd = ip.profile_dir\n"
                        "ip.db['kn/x'] = 42\n"
                        "paths = [ip.home_dir, ip.starting_dir, ip.ipython_dir, pd.location,\n"
                        "         pd.security_dir, pd.log_dir, pd.pid_dir, pd.startup_dir,\n"
                        "         str(ip.db.root), ip.logger.home_dir] + ip.history_manager.dir_hist\n"
                        "print(json.dumps({'paths': paths, 'home': os.environ['HOME'],\n"
                        "    'ipdir': os.environ['IPYTHONDIR'], 'cwd': os.getcwd(),\n"
                        "    'dirs': all(os.path.isdir(p) for p in paths[2:9]),\n"
                        "    'db': ip.db['kn/x']}))")
    r = json.loads(cell.stream("stdout"))
    home, ipdir = r["home"], r["ipdir"]
    profile = os.path.join(ipdir, "profile_default")
    assert r["cwd"] == home
    assert r["paths"] == [home, home, ipdir, profile] + [
        os.path.join(profile, d) for d in ("security", "log", "pid", "startup", "db")] + [
        home, home], r
    assert r["dirs"] and r["db"] == 42, r


_MERGE_STATE = ("import ctypes\n"
                "print(ctypes.CDLL(None).prctl(68, 0, 0, 0, 0))")  # PR_GET_MEMORY_MERGE


@pytest.mark.timeout_s(60)
def test_merge_pages_is_opt_in_and_reaches_every_kernel(start_kenneld, connect):
    """--merge-pages marks the zygote's memory for KSM, and so that of every kernel forked
    from it (pooled or on demand); without it no kernel is marked."""
    plain = start_kenneld(args=ZYGOTE + ["--pool", "0"])
    kc = connect(plain.create("plain")["connection_file"])
    assert run(kc, _MERGE_STATE).stream("stdout").strip() in ("0", "-1")  # -1: before Linux 6.4
    kenneld = start_kenneld(args=ZYGOTE + ["--pool", "1", "--merge-pages"])
    _pool_ready(kenneld, 1)
    log = open(kenneld.log_path, errors="replace").read()
    if "--merge-pages: not available here" in log:
        pytest.skip("this Linux has no PR_SET_MEMORY_MERGE (6.4)")
    assert "--merge-pages: pages are offered to KSM" in log, log
    for name, extra in (("pooled", {}), ("forked", {"limits": {"pids": 100}})):
        kc = connect(kenneld.create(name, **extra)["connection_file"])
        assert run(kc, _MERGE_STATE).stream("stdout").strip() == "1", name
