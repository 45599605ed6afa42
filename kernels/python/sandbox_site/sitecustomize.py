"""sitecustomize for the Python processes a kernel starts in its sandbox (joblib's and
concurrent.futures' workers, `!python3 script.py`): the kernel puts this directory on their
PYTHONPATH (the kernel itself runs with -I and does the same in kennel_comm).

The sandbox's /proc shows only the session's processes: no /proc/stat, where psutil reads
the boot time that psutil.Process() needs (so joblib's default backend, loky, whose workers
measure their memory with psutil, lost every worker). Here the boot time comes from the
clocks instead (CLOCK_REALTIME - CLOCK_BOOTTIME, what /proc/stat's btime says), and the
traceback psutil prints at import without /proc/stat is dropped. Then Debian's own
sitecustomize runs, which this one shadows.
"""

import contextlib
import importlib.util
import io
import os
import sys
import time


def _boot_time():
    return time.clock_gettime(time.CLOCK_REALTIME) - time.clock_gettime(time.CLOCK_BOOTTIME)


def _patch(module):
    def boot_time():
        module.BOOT_TIME = _boot_time()
        return module.BOOT_TIME

    module.boot_time = boot_time


class _Loader:
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        real, sys.stderr = sys.stderr, io.StringIO()
        try:
            self._loader.exec_module(module)
        finally:
            text, sys.stderr = sys.stderr.getvalue(), real
            if text and "/proc/stat" not in text:
                real.write(text)
        _patch(module)


class _Finder:
    def find_spec(self, fullname, path=None, target=None):
        if fullname != "psutil._pslinux":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


if not os.path.exists("/proc/stat"):
    sys.meta_path.insert(0, _Finder())

with contextlib.suppress(Exception):
    _debian = os.path.join(os.path.dirname(os.__file__), "sitecustomize.py")
    if os.path.exists(_debian):
        with open(_debian) as f:
            exec(compile(f.read(), _debian, "exec"), {"__name__": "sitecustomize"})
