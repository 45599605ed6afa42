"""kennel_kernel: entry point of kennel's Python kernel.

With `--spawner exec`, kenneld runs `/usr/bin/python3 -I kennel_kernel.py --pipe-fd 3` in
the session's workspace; with the zygote (kennel_zygote.py), a forked child calls start()
and serve() itself. This file only orders the start: hello to kenneld first, then the
~0.4 s (of CPU, here) import of IPython without its terminal (kennel_ipython; already done
in a zygote), then serving requests (kennel_server). The kernel never touches
ZeroMQ, keys or client identities: the pipe to kenneld is its only channel.
"""

import os
import sys

# -I leaves this script's directory off sys.path; it is removed again once the kernel's
# modules are imported, so that user code does not see it.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

from kennel_pipe import InterruptGate, Pipe  # noqa: E402

VERSION = "0.1"


def kernel_info():
    """The kernel_info_reply content, without status (kenneld adds it). runtime_digest: the
    digest of the installed packages and the Python build (kennel_runtime)."""
    import kennel_runtime

    return {
        "protocol_version": "5.3",
        "implementation": "kennel",
        "implementation_version": VERSION,
        "language_info": {
            "name": "python",
            "version": "%d.%d.%d" % sys.version_info[:3],
            "mimetype": "text/x-python",
            "file_extension": ".py",
            "pygments_lexer": "ipython3",
            "codemirror_mode": {"name": "ipython", "version": 3},
            "nbconvert_exporter": "python",
        },
        "banner": f"Python {sys.version}\nkennel {VERSION}, an IPython kernel\n",
        "help_links": [],
        "debugger": False,
        "runtime_digest": kennel_runtime.digest(),
    }


def parse_args(argv):
    # One option; argparse would cost more import time than the rest of the start.
    if len(argv) != 2 or argv[0] != "--pipe-fd" or not argv[1].isdigit():
        sys.exit("usage: kennel_kernel.py --pipe-fd N")
    return int(argv[1])


def start(pipe_fd, hello=True):
    """Open the pipe to kenneld and, unless hello is False (serve() says it then), say hello.
    Returns (pipe, gate) for serve()."""
    # fds 0-2 must be open, or the pipes the kernel makes later could land on them.
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # takes the lowest free fd: this one
    gate = InterruptGate()
    gate.install()  # from here on a SIGINT or SIGUSR2 between cells is harmless
    gate.relay_to_main_thread()
    pipe = Pipe(pipe_fd, gate)
    if hello:
        _hello(pipe)
    return pipe, gate


def _hello(pipe):
    pipe.send({"op": "hello", "pid": os.getpid()}, kernel_info())


# Where the sandbox mounts the kernel runtime (SANDBOX_KERNEL_DIR in src/sandbox.h). A cold
# kernel runs from there; one forked from the zygote keeps the host path in _HERE, which
# its sandbox does not show.
_SANDBOX_RUNTIME = "/opt/kennel"


def _runtime_file(name):
    """The path of one of the kernel runtime's files as this process sees it, or None."""
    for d in (_HERE, _SANDBOX_RUNTIME):
        path = os.path.join(d, name)
        if os.path.exists(path):
            return path
    return None


def _children_not_isolated():
    """multiprocessing and loky start helper Pythons (loky's resource tracker, spawn and
    forkserver children) with this interpreter's flags: -I, which would ignore PYTHONPATH and
    so sandbox_site. They get -s instead (no user site): -I keeps what the workspace holds
    out of the kernel's own start, and these are processes of the user's code anyway."""
    import multiprocessing.util
    import subprocess

    flags = subprocess._args_from_interpreter_flags

    def without_isolation():
        return ["-s" if a == "-I" else a for a in flags()]

    subprocess._args_from_interpreter_flags = without_isolation
    multiprocessing.util._args_from_interpreter_flags = without_isolation


def serve(pipe, gate, runtime_dirs, hello=False, before_hello=None):
    """Serve kenneld's requests until it hangs up. runtime_dirs: the kernel runtime's entries
    on sys.path, taken off it so that user code does not see them. hello: say hello here,
    once the kernel is built and has run a throwaway cell (a kernel forked from the zygote:
    kenneld counts it ready, in its pool, only when its first cell will be fast).
    before_hello: called just before that hello (the zygote's page-hint learner)."""
    # Figures show inline at the end of a cell, as in Jupyter, unless the user chose a
    # backend; setting the variable costs nothing until matplotlib is imported. matplotlib
    # runs fc-list for fonts, which needs a configuration the sandbox's /etc lacks.
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    fonts_conf = _runtime_file("fonts.conf")
    if fonts_conf:
        os.environ.setdefault("FONTCONFIG_FILE", fonts_conf)
    # `!cmd` and `x = !cmd` run under $SHELL, as in ipykernel, whose users have bash there:
    # brace expansion, [[ ]], `source` and pipefail in notebooks expect it (kenneld's
    # environment allowlist has no SHELL).
    if os.path.exists("/bin/bash"):
        os.environ.setdefault("SHELL", "/bin/bash")
    # Python processes the kernel starts (joblib's workers, say) run sandbox_site's
    # sitecustomize, which mends psutil without /proc/stat; the kernel runs with -I.
    site_fixes = _runtime_file("sandbox_site")
    if site_fixes and not os.path.exists("/proc/stat"):
        os.environ.setdefault("PYTHONPATH", site_fixes)
        _children_not_isolated()
    # Requests kenneld sends from now on wait in the socket until serve() reads them.
    import kennel_runtime
    import kennel_server

    kennel_runtime.add_site()

    for d in runtime_dirs:
        while d in sys.path:
            sys.path.remove(d)
    sys.argv = [""]  # as in Python's own REPL; the kernel's arguments are not the user's
    kernel = kennel_server.Kernel(pipe, gate)
    if hello:
        kernel.warm_up()
        if before_hello:
            before_hello()
        _hello(pipe)
    # Cells import modules from the working directory (the workspace); the kernel's own code
    # above, its warm-up cell and the page report included, never does.
    sys.path.insert(0, "")
    try:
        kernel.serve()
    except Exception:
        import traceback

        pipe.fatal("internal error:\n" + traceback.format_exc())


def main(argv):
    pipe, gate = start(parse_args(argv))
    serve(pipe, gate, [_HERE])


if __name__ == "__main__":
    main(sys.argv[1:])
