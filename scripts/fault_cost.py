"""How fast this host is at what `make check` mostly does: writing to fresh memory (a page
fault each 4 KiB page) and forking. Prints one line for scripts/check.sh's log.

Why: the same commit's `make check` took 10-11 minutes on one machine of this kind and 5 on
another; the difference was the cost of a first write to a page (~25 us there, ~1.3 us here),
and the suite's processes take some 11 million such faults. The line lets a reader of a
check log tell a slow host from a slow change."""
import mmap
import os
import time

SIZE = 64 << 20
PAGE = mmap.PAGESIZE


def fault_us():
    m = mmap.mmap(-1, SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        m.madvise(mmap.MADV_NOHUGEPAGE)  # 4 KiB pages, as most of the suite's memory is
    t = time.perf_counter()
    for at in range(0, SIZE, PAGE):
        m[at] = 1
    spent = time.perf_counter() - t
    m.close()
    return spent / (SIZE // PAGE) * 1e6


def fork_ms(n=10):
    t = time.perf_counter()
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    return (time.perf_counter() - t) / n * 1e3


if __name__ == "__main__":
    print(f"== this host: a first write to a 4 KiB page {min(fault_us() for _ in range(3)):.1f} us "
          f"(~1.3 us where make check takes ~5 minutes, ~25 us where it takes ~10); "
          f"a fork and exit of this process {fork_ms():.2f} ms")
