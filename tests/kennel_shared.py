"""SharedKennelds: how the integration and hostile suites share kennelds between tests
(starting one costs its zygote's warm-up and its pool, over a second of CPU). A pytest process
(an xdist worker) keeps a few for the whole run, across modules: the most recently used
SHARED_MAX of each suite; a test takes the one of its configuration or starts it. Each suite
has its own Kenneld class and checks; it hands them in as three functions:

- start(key) -> (root, kenneld): a started kenneld for that configuration, in root;
- stop_checked(kenneld): SIGTERM, then assert that it exited cleanly and left nothing running;
- reap(root, kenneld): whatever happened, kill what is left of it and remove root.

And the preload the tests' kennelds start with (`preload_args`); and, for a test that
kills a kenneld (SIGKILL) and starts no other on its state directory, remove_cgroups_left:
such a kenneld had no moment to remove its control groups, and `make check` fails on any
left behind.
"""

import glob
import os
import signal
import time

# kenneld's default preload (numpy, pandas, matplotlib and a first figure drawn) costs its
# zygote ~2.4 s of CPU at start; numpy alone ~1.1 s. `make check` starts some 200 kennelds
# on two cores, so the tests' kennelds preload numpy only, unless the test's module is
# marked `default_preload` (those that plot, or compare kennel with ipykernel, or test the
# preload itself) or the test passes its own --preload. The conftests set LIGHT per test
# from that marker, before its fixtures start anything.
LIGHT_PRELOAD = ("--preload", "numpy")
LIGHT = True


def preload_args(args):
    """The arguments a test's kenneld starts with: args, after the light preload when the
    test takes it (a --preload in args wins: kenneld takes an option's last value)."""
    return [*LIGHT_PRELOAD, *args] if LIGHT else list(args)


def mark_preload(item):
    """pytest_runtest_setup's part: LIGHT for this test, from its default_preload marker
    (a light_preload mark on the test itself wins over its module's default_preload)."""
    global LIGHT
    LIGHT = (item.get_closest_marker("light_preload") is not None
             or item.get_closest_marker("default_preload") is None)


def register_preload_marker(config):
    config.addinivalue_line(
        "markers", "default_preload: this module's kennelds preload what kenneld's default "
        "does (numpy, pandas, matplotlib) rather than numpy only")
    config.addinivalue_line(
        "markers", "light_preload: in a module marked default_preload, this test's kennelds "
        "preload numpy only (what it tests does not depend on the preload)")


# Most modules' tests take the default configuration, and a module's own (--idle 1, a
# small --max-output) is seldom another's: a few cover nearly every reuse, and a kenneld kept
# idle costs memory (its zygote and pool, ~150 MiB), no CPU.
SHARED_MAX = 4


class SharedKennelds:
    """One kenneld per configuration key, for the tests a pytest process runs: at most
    SHARED_MAX at once, the least recently used stopped (and checked) to make room."""

    def __init__(self, start, stop_checked, reap):
        self._start, self._stop_checked, self._reap = start, stop_checked, reap
        self.running = {}  # key -> (root, kenneld), the most recently used last

    def get(self, key):
        if key in self.running:
            self.running[key] = self.running.pop(key)
        else:
            while len(self.running) >= SHARED_MAX:
                oldest = next(iter(self.running))
                self._stop_one(oldest)
            self.running[key] = self._start(key)
        return self.running[key][1]

    def _stop_one(self, key):
        root, k = self.running.pop(key)
        try:
            self._stop_checked(k)
        finally:
            self._reap(root, k)

    def retire(self, k):
        """A kenneld that failed a test's release check: stopped and reaped; the next test
        with its configuration gets a fresh one."""
        for key, (root, kk) in list(self.running.items()):
            if kk is k:
                del self.running[key]
                try:
                    self._stop_checked(k)
                except Exception:
                    pass  # the test failed already; reap kills what is left
                finally:
                    self._reap(root, k)

    def stop_all(self):
        """At the end of the run: each stopped and checked (the first failure is raised),
        and all reaped."""
        try:
            for _, k in self.running.values():
                self._stop_checked(k)
        finally:
            for root, k in self.running.values():
                self._reap(root, k)
            self.running.clear()


def cgroup_prefix(state_dir):
    """What the name of every control group a kenneld of state_dir makes starts with (its
    stats' sandbox.cgroups): kennel-, 12 hex digits of the FNV-1a hash of the directory's
    real path, and -."""
    h = 0xcbf29ce484222325
    for b in os.path.realpath(state_dir).encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"kennel-{h & 0xFFFFFFFFFFFF:012x}-"


def kenneld_groups(kenneld_cgroup_lines, pattern):
    """{controller: [host paths]} of the groups named like pattern (a glob) in kenneld's v1
    memory, pids and cpu groups, given the lines of kenneld's /proc/PID/cgroup (its
    sessions' and pooled kernels' groups sit under kenneld's, named kennel-TAG-ID, TAG its
    state directory's: stats' sandbox.cgroups)."""
    out = {}
    for line in kenneld_cgroup_lines:
        _, ctrls, path = line.split(":", 2)
        for c in ctrls.split(","):
            if c in ("memory", "pids", "cpu"):
                for base in (c, "cpu,cpuacct", "cpuacct,cpu"):
                    d = f"/sys/fs/cgroup/{base}{path.rstrip('/')}"
                    if os.path.isdir(d):
                        out[c] = sorted(glob.glob(os.path.join(glob.escape(d), pattern)))
                        break
    return out


def remove_cgroups_left(state_dir):
    """After a test killed a kenneld (SIGKILL) and starts no other on state_dir, which would
    remove them: kill what is left in the v1 memory, pids and cpu groups it made (below this
    process's own, where it made them), and remove the groups. `make check` fails on a group
    left behind."""
    with open("/proc/self/cgroup") as f:
        found = kenneld_groups(f.read().splitlines(), glob.escape(cgroup_prefix(state_dir)) + "*")
    groups = [d for paths in found.values() for d in paths]
    deadline = time.monotonic() + 5
    while groups and time.monotonic() < deadline:
        for d in groups:
            try:
                with open(os.path.join(d, "cgroup.procs")) as f:
                    for pid in f.read().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError:
                continue
        groups = [d for d in groups if os.path.isdir(d)]
        if groups:
            time.sleep(0.02)
    return groups
