"""`kennel exec` on a terminal: a kernel's text is untrusted, so escape sequences other than
colours, and control characters other than \\n \\t \\r, arrive shown (\\x1b, \\x07, \\x9b), not
run. Through a pipe the bytes are exact. Each of stdout and stderr is judged on its own."""

import os
import select
import subprocess
import time
import tty

from .kenneld_proc import KENNEL

READ_TIMEOUT_S = 20

# The security review's repro, a clear-screen, a lone BEL, a C1 CSI (U+009B), colours and
# UTF-8 that must pass; then an OSC split over two messages; a result whose text/plain holds
# an escape; a traceback whose message holds one.
CELL = r'''
import sys, time
print("A\x1b]0;TITLE\x07B\x1b[31mRED\x1b[0m|\x1b[2J|ding\x07|c1\x9b2J|h\u00e9llo \u20ac|50%\r")
print("\x1b", end="", flush=True); time.sleep(0.1); print("]0;T\x07")
print("e\x1b]52;c;ZXZpbA==\x07", file=sys.stderr, flush=True)
class R:
    def __repr__(self):
        return "res\x1b[H"
display(R())
raise ValueError("bad\x1b]0;EVIL\x07")
'''

RAW_OUT = ("A\x1b]0;TITLE\x07B\x1b[31mRED\x1b[0m|\x1b[2J|ding\x07|c1\x9b2J|h\u00e9llo \u20ac"
           "|50%\r\n\x1b]0;T\x07\nres\x1b[H\n").encode()
SAFE_OUT = ("A\\x1b]0;TITLE\\x07B\x1b[31mRED\x1b[0m|\\x1b[2J|ding\\x07|c1\\x9b2J|h\u00e9llo \u20ac"
            "|50%\r\n\\x1b]0;T\\x07\nres\\x1b[H\n").encode()


def _assert_only_safe(text):
    """No control character but \\n, \\r and \\t, and no ESC but an SGR colour's."""
    assert b"\xc2\x9b" not in text, text
    rest = text
    while rest:
        c = rest[0]
        if c == 0x1b:
            end = rest.index(b"m")
            assert rest[1:2] == b"[" and all(p in b"0123456789;:" for p in rest[2:end]), text
            rest = rest[end:]
        else:
            assert c >= 0x20 and c != 0x7f or c in b"\n\r\t", text
        rest = rest[1:]


def _read_until_closed(fds, proc):
    """Everything written to the terminals whose master ends are fds, until kennel exits and
    closed them (a master reads EIO then), within READ_TIMEOUT_S."""
    got = {fd: b"" for fd in fds}
    open_fds = set(fds)
    deadline = time.monotonic() + READ_TIMEOUT_S
    while open_fds and time.monotonic() < deadline:
        ready, _, _ = select.select(list(open_fds), [], [], 0.5)
        for fd in ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: no slave end is open any more
                data = b""
            if data:
                got[fd] += data
            else:
                open_fds.discard(fd)
    assert not open_fds, f"kennel exec wrote until the timeout: {got}"
    proc.wait(5)
    return [got[fd] for fd in fds]


def _kennel(kenneld, out_tty, err_tty, *args):
    """(returncode, stdout bytes, stderr bytes) of bin/kennel ARGS, each of its stdout and
    stderr a pseudo-terminal of its own (in raw mode: bytes as written, no \\n to \\r\\n) or
    a pipe."""
    masters, slaves, streams = [], [], []
    for is_tty in (out_tty, err_tty):
        if is_tty:
            master, slave = os.openpty()
            tty.setraw(slave)
            masters.append(master)
            slaves.append(slave)
            streams.append(slave)
        else:
            streams.append(subprocess.PIPE)
    proc = None
    try:
        proc = subprocess.Popen([str(KENNEL), "--state-dir", str(kenneld.state_dir), *args],
                                stdin=subprocess.DEVNULL, stdout=streams[0], stderr=streams[1])
        for slave in slaves:
            os.close(slave)  # so that the masters read EIO once kennel has exited
        slaves = []
        # The outputs are small: a pipe beside a terminal holds what kennel wrote to it
        # until the terminal has been read to its end.
        read = _read_until_closed(masters, proc) if masters else []
        piped = proc.communicate(timeout=READ_TIMEOUT_S)
        out = read.pop(0) if out_tty else piped[0]
        err = read.pop(0) if err_tty else piped[1]
        return proc.returncode, out, err
    finally:
        for fd in masters + slaves:
            os.close(fd)
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_exec_on_a_terminal_shows_escapes_and_keeps_colours(kenneld):
    rc, out, err = _kennel(kenneld, True, True, "exec", "esc", CELL)
    assert rc == 1, (out, err)
    assert out == SAFE_OUT
    assert err.startswith(b"e\\x1b]52;c;ZXZpbA==\\x07\n"), err
    assert err.endswith(b": bad\\x1b]0;EVIL\\x07\n"), err
    _assert_only_safe(out)
    _assert_only_safe(err)


def test_exec_through_pipes_is_byte_exact(kenneld):
    rc, out, err = _kennel(kenneld, False, False, "exec", "esc", CELL)
    assert rc == 1, (out, err)
    assert out == RAW_OUT
    assert err.startswith(b"e\x1b]52;c;ZXZpbA==\x07\n"), err
    assert err.endswith(b": bad\x1b]0;EVIL\x07\n"), err


def test_exec_judges_stdout_and_stderr_each_on_its_own(kenneld):
    rc, out, err = _kennel(kenneld, True, False, "exec", "esc", CELL)
    assert rc == 1, (out, err)
    assert out == SAFE_OUT
    assert err.startswith(b"e\x1b]52;c;ZXZpbA==\x07\n"), err
    rc, out, err = _kennel(kenneld, False, True, "exec", "esc", CELL)
    assert out == RAW_OUT
    assert err.startswith(b"e\\x1b]52;c;ZXZpbA==\\x07\n"), err


def test_files_on_a_terminal_shows_escapes_in_names(kenneld):
    """The names of a workspace's files are the cell's to choose."""
    rc, out, err = _kennel(kenneld, False, False, "exec", "ws",
                           "open('f\\x1b]0;T\\x07', 'w').close()")
    assert rc == 0, (out, err)
    rc, out, err = _kennel(kenneld, True, False, "files", "ws")
    assert rc == 0, (out, err)
    assert out.split() == [b"0", b"f\\x1b]0;T\\x07"], out
    rc, out, err = _kennel(kenneld, False, False, "files", "ws")
    assert out.split() == [b"0", b"f\x1b]0;T\x07"], out
