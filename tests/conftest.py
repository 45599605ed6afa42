"""Shared by every Python suite: being here puts tests/ on sys.path (pytest inserts a
conftest's directory), so that the integration and hostile suites import kennel_shared."""
import os
import resource
import sys
import time

import pytest


# A test process holds many clients at once (a load test's hundreds of sockets; every
# jupyter_client client's own ZeroMQ context until it is closed), and a worker runs a few
# hundred tests: take the descriptors the hard limit allows, as kenneld itself does at start
# (kenneld.c), rather than fail on a 1024 soft limit with "Too many open files".
_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if _soft != resource.RLIM_INFINITY and (_hard == resource.RLIM_INFINITY or _soft < _hard):
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (_hard, _hard))
    except (ValueError, OSError):
        pass  # an infinite hard limit Linux will not grant as a soft one: keep the soft one


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "quiet: compares wall times (a bystander's round trip against a stall, a deadline's "
        "margin): `make check` runs these alone, after the parallel phase, so that the other "
        "tests' load is not what they measure")
    config.addinivalue_line(
        "markers",
        "spawner: starts, kills, restarts, evicts, revives or seals kernels, or mounts their "
        "workspaces: `make check` runs these once more with KENNEL_SPAWNER=exec (cold "
        "starts); the rest speak the same protocol to the same kernel code either way")
    config.addinivalue_line(
        "markers",
        "spread: the module's tests share nothing (a kernel each, no module-wide kenneld): "
        "under pytest-xdist they go to whichever worker is free, not all to one")
    global _CPU_LOG
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        _CPU_LOG = None


# KENNEL_CPU_LOG=FILE: append one line per test file, "CPU-SECONDS WALL-SECONDS STARTS FILE":
# the CPU this pytest process and the children it reaped (kenneld and what it reaped:
# kernels, the zygote) spent on that file, and how many kennelds it started. `make check`
# runs on two cores, so CPU is what bounds it. (pytest-xdist's controller writes nothing.)
_CPU_LOG = os.environ.get("KENNEL_CPU_LOG")
_last = {}


def _cpu_now():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime, time.monotonic()


def _starts():
    return sum(m.Kenneld.starts for name, m in list(sys.modules.items())
               if name.rsplit(".", 1)[-1] in ("kenneld_proc", "kennel_hostile"))


def pytest_runtest_logstart(nodeid, location):
    if _CPU_LOG:
        path = nodeid.split("::")[0]
        if _last.get("file") != path:
            _flush()
            _last.update(file=path, at=_cpu_now(), starts=_starts())


def _flush():
    if _last.get("file"):
        cpu, wall = _cpu_now()
        cpu0, wall0 = _last["at"]
        with open(_CPU_LOG, "a") as f:
            starts = _starts() - _last["starts"]
            f.write(f"{cpu - cpu0:7.1f} {wall - wall0:7.1f} {starts:4d} {_last['file']}\n")
        _last.clear()


def pytest_sessionfinish(session, exitstatus):
    if _CPU_LOG:
        _flush()


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the group marks
def pytest_collection_modifyitems(config, items):
    """`make check` runs pytest-xdist with --dist loadgroup: a module's tests share its
    kenneld (and their module-scoped fixtures), so each module is one group, on one worker;
    a module marked `spread` shares nothing, and its tests are handed out one by one (the
    kernel tests, a kernel each, were otherwise one worker's 3.5 minutes)."""
    for item in items:
        if not item.get_closest_marker("spread") and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
