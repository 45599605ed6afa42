"""kennel_io: a cell's standard streams.

sys.stdout and sys.stderr become StreamWriters over one ordered StreamBuffer, and fds 1 and
2 become pipes that FdCapture drains into the same buffer, so Python-level output and
fd-level output (os.write, C libraries, child processes) both reach the client as
`stream` messages, in order. A background thread flushes pending text every 50 ms.
Stdin replaces input() and getpass() during a cell with requests to the client.

It does not decide where messages go: the kernel hands in a publish function.
"""

import builtins
import codecs
import contextlib
import getpass
import io
import os
import select
import threading

from IPython.core.error import StdinNotImplementedError

from kennel_pipe import decode_object, start_helper_thread

FLUSH_INTERVAL_S = 0.05
MAX_STREAM_CHARS = 64 * 1024  # one stream message at most; longer text is split


class StreamBuffer:
    """Pending stdout/stderr text in arrival order, sent as stream messages.

    publish(name, text) sends one stream message; it is called with the flush lock
    held, so flushes from different threads never overtake one another.
    """

    def __init__(self, publish, gate):
        self._publish = publish
        self._gate = gate
        self._in_child = False  # set in a forked child: no flush thread, no pipe there
        self._drain = None  # moves fd-level output in (FdCapture.drain)
        self._init_locks()
        self._pending = []  # [name, [text, ...]] runs; adjacent runs differ in name
        self._chars = 0
        os.register_at_fork(after_in_child=self._after_fork)
        start_helper_thread(self._flush_loop, "kennel-flush")

    def _init_locks(self):
        self._lock = threading.Lock()  # guards _pending and _chars
        self._flush_lock = threading.Lock()  # held from taking pending text to sending it
        self._dirty = threading.Event()  # there is pending text
        self._full = threading.Event()  # there is enough pending text to flush now

    def set_drain(self, drain):
        self._drain = drain

    def write_ordered(self, name, text):
        """Add text written by Python code after taking in fd-level output written
        before it: print(); os.write(1, ...); print() keeps its order."""
        # Shielded: a KeyboardInterrupt or CellTimeout inside the locking code of
        # threading (Event.set is pure Python) could leave a lock held and hang every
        # later write.
        with self._gate.shielded():
            if self._drain is not None and not self._in_child:
                self._drain()
            self.write(name, text)

    def write(self, name, text):
        if not text:
            return
        if self._in_child:
            # Write through the inherited fd, which the kernel process captures.
            os.write(1 if name == "stdout" else 2, text.encode("utf-8", "replace"))
            return
        with self._lock:
            if self._pending and self._pending[-1][0] == name:
                self._pending[-1][1].append(text)
            else:
                self._pending.append([name, [text]])
            self._chars += len(text)
            if not self._dirty.is_set():  # Event.set() takes a lock even when set
                self._dirty.set()
            if self._chars >= MAX_STREAM_CHARS:
                self._full.set()

    def flush(self):
        with self.flushed():
            pass

    @contextlib.contextmanager
    def flushed(self):
        """Send all pending text, then run the block before any newer text is sent.

        Publishing a display or a reply inside the block keeps it after every byte of
        output written before it, fd-level output included.
        """
        if self._in_child:
            yield
            return
        with self._gate.shielded(), self._flush_lock:
            if self._drain is not None:
                self._drain()
            with self._lock:
                runs, self._pending, self._chars = self._pending, [], 0
                self._dirty.clear()
                self._full.clear()
            for name, texts in runs:
                text = "".join(texts)
                for start in range(0, len(text), MAX_STREAM_CHARS):
                    self._publish(name, text[start:start + MAX_STREAM_CHARS])
            yield

    def _flush_loop(self):
        while True:
            self._dirty.wait()
            # Let a burst of writes gather into one message, unless there is a lot.
            self._full.wait(FLUSH_INTERVAL_S)
            self.flush()

    def _after_fork(self):
        # The parent sends what was pending at the fork, and the locks may have been held
        # by threads that do not exist in the child.
        self._init_locks()
        self._pending, self._chars = [], 0
        self._in_child = True


class StreamWriter(io.TextIOBase):
    """sys.stdout or sys.stderr for user code."""

    encoding = "utf-8"
    errors = "strict"

    def __init__(self, name, fd, buffer):
        super().__init__()
        self.name = name
        self._fd = fd
        self._buffer = buffer

    def writable(self):
        return True

    def isatty(self):
        return False

    def fileno(self):
        # Writes to the fd are captured as well (FdCapture), so code that wants a real
        # descriptor (faulthandler, subprocess) still ends up in the same stream.
        return self._fd

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        self._buffer.write_ordered(self.name, s)
        return len(s)

    def flush(self):
        self._buffer.flush()


class FdCapture:
    """Points fds 1 and 2 at pipes and forwards their bytes into a StreamBuffer.

    The pipes' write ends stay on fds 1 and 2 (inheritable), so child processes write
    there too. A reader thread forwards bytes as they come. The buffer also drains the
    pipes before each Python-level write and each flush, so output keeps the order in
    which the cell produced it, and comes before any display or reply that follows it.
    """

    def __init__(self, buffer):
        self._buffer = buffer
        self._lock = threading.Lock()  # one drain at a time: the decoders are stateful
        self._readers = {}  # read fd -> (stream name, incremental UTF-8 decoder)
        self._ready = select.poll()  # only used under _lock
        for fd, name in ((1, "stdout"), (2, "stderr")):
            r, w = os.pipe()
            os.dup2(w, fd)
            os.close(w)
            os.set_blocking(r, False)
            self._readers[r] = (name, codecs.getincrementaldecoder("utf-8")("replace"))
            self._ready.register(r, select.POLLIN)
        buffer.set_drain(self.drain)
        start_helper_thread(self._read_loop, "kennel-fd-reader")

    def drain(self):
        """Move what is in the pipes now into the buffer (one poll() if nothing is)."""
        with self._lock:
            for r, _ in self._ready.poll(0):
                name, decoder = self._readers[r]
                while True:
                    try:
                        data = os.read(r, 1 << 16)
                    except BlockingIOError:
                        break
                    if not data:  # every copy of the fd was closed: nothing more can come
                        self._ready.unregister(r)
                        del self._readers[r]
                        os.close(r)
                        break
                    self._buffer.write(name, decoder.decode(data))

    def _read_loop(self):
        while self._readers:
            try:
                select.select(list(self._readers), [], [])
            except OSError:  # a pipe closed by drain() in another thread
                continue
            self.drain()


class Stdin:
    """input() and getpass.getpass() for cells, answered by the client.

    Only the main thread may ask: it is the only reader of the pipe.
    """

    def __init__(self, pipe, buffer):
        self._pipe = pipe
        self._buffer = buffer
        self._allowed = False

    @contextlib.contextmanager
    def serving(self, allowed):
        """Install input() and getpass() for one cell; allowed is its allow_stdin."""
        saved = builtins.input, getpass.getpass
        self._allowed = allowed
        builtins.input, getpass.getpass = self._input, self._getpass
        try:
            yield
        finally:
            builtins.input, getpass.getpass = saved
            self._allowed = False

    def _input(self, prompt=""):
        return self._ask(str(prompt), password=False)

    def _getpass(self, prompt="Password: ", stream=None):
        return self._ask(str(prompt), password=True)

    def _ask(self, prompt, password):
        if not self._allowed:
            raise StdinNotImplementedError(
                "input() was called, but this client does not support input requests")
        if threading.current_thread() is not threading.main_thread():
            raise StdinNotImplementedError("input() is only supported in the main thread")
        self._buffer.flush()  # the prompt must come after what the cell printed
        self._pipe.send({"op": "stdin", "msg_type": "input_request"},
                        {}, {"prompt": prompt, "password": password})
        while True:
            op, parts = self._pipe.recv()
            if op.get("op") != "request" or op.get("channel") != "stdin" or len(parts) < 4:
                self._pipe.diag(f"ignoring {op.get('op')!r} frame while waiting for input")
                continue
            try:
                header, content = decode_object(parts[0]), decode_object(parts[3])
            except ValueError as e:
                self._pipe.diag(f"ignoring malformed stdin message: {e}")
                continue
            if header.get("msg_type") == "input_reply":
                return str(content.get("value", ""))

