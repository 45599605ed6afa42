"""kennel_pipe: the kernel's end of the kenneld socketpair (protocol/kernel-pipe.md).

Pipe reads and writes length-prefixed frames whose parts are JSON objects (or raw
buffers); InterruptGate decides what SIGINT and SIGUSR2 do, so that an interrupt or a
deadline can never tear a frame in half or drop one. Knows nothing about Jupyter message
types.

The pipe ends the process itself: exit 0 when kenneld is gone (even in the middle of a
cell) or says exit, exit 1 on a malformed frame. Nothing else is worth doing then, and
the reader may be deep inside user code (waiting in input()) when it happens.
"""

import binascii
import json
import mmap
import os
import select
import signal
import socket
import struct
import threading

from kennel_deadline import CellTimeout

MAX_FRAME_BYTES = 64 << 20  # the largest frame a kernel sends (KERNEL_SEND_MAX in kpipe.h)
MAX_RECV_BYTES = (1 << 30) + (1 << 20)  # from kenneld: --max-message (at most 1 GiB), framed
MAX_PARTS = 64
MAX_LOG_CHARS = 1000  # of a diagnostic line; kenneld keeps fewer
_U32 = struct.Struct(">I")
# A frame this large (a snapshot) is written from its parts as they are and read straight
# into a buffer of its size on huge pages, not joined and copied: on this kind of VM each
# 4 KiB page of a fresh buffer costs a fault, and a 50 MB snapshot copied five times over
# cost seconds.
LARGE_FRAME_BYTES = 4 << 20


def large_buffer(size):
    """A zeroed, writable buffer of size bytes (a private anonymous mmap, asking for
    transparent huge pages: a hint, ignored where not taken). Private: a restored
    snapshot's arrays are views of it for the session's life, and a process the kernel
    forks must get its own copy of them, not share the parent's (Python's mmap is shared
    unless told)."""
    m = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE)
    try:
        m.madvise(mmap.MADV_HUGEPAGE)
    except (AttributeError, OSError):
        pass
    return m


class FrameError(ValueError):
    """A frame we were asked to send cannot be sent (too large, not JSON-able)."""


class InterruptGate:
    """What SIGINT and SIGUSR2 do in this process.

    kenneld interrupts a cell by sending SIGINT to the kernel, and ends a cell that ran
    past its deadline by sending SIGUSR2. The gate turns each into an exception raised in
    the cell: KeyboardInterrupt and CellTimeout (see SIGNALS). Python runs the handler in
    the main thread, between bytecodes, wherever that thread happens to be, so the handler
    raises only where that is safe:

    - while no cell runs (not armed) the signal is ignored: an interrupt at the prompt,
      or one that arrives just after its cell ended, does nothing;
    - while a cell runs, it is raised into the cell, except when the main thread is in a
      shielded section (a frame write, a frame read, a stream flush) or in protected code
      (the gate's own arm() and disarm(), and the kernel's lines that start and end a
      cell, registered with protect()). A signal arriving in a shielded section is raised
      when the section ends; one arriving in protected code is dropped, because the cell
      has not started or has finished.

    When both signals arrive within one shielded section, CellTimeout is raised: a
    deadline outranks an interrupt.
    """

    SIGNALS = {signal.SIGINT: KeyboardInterrupt, signal.SIGUSR2: CellTimeout}
    POKE = signal.SIGURG  # ignored by default: harmless should user code drop our handler

    def __init__(self):
        self._armed = False
        self._depth = 0  # nesting of shielded sections in the main thread
        self._pending = None  # the exception of a signal that came in a shielded section
        self._ready = {}  # each signal's exception for the armed cell, made by arm()
        self._protected = {InterruptGate.arm.__code__, InterruptGate.disarm.__code__,
                           InterruptGate._claim_wakeup_fd.__code__}
        self._wakeup = -1  # the write end of the relay's pipe (relay_to_main_thread)

    def install(self):
        for signum in self.SIGNALS:
            signal.signal(signum, self._on_signal)

    def relay_to_main_thread(self):
        """Wake the main thread for the gate's signals, whichever thread took them.

        Linux gives a process's signal to any thread that does not block it: a thread of
        the user's when the main thread blocks every signal for a moment (subprocess does,
        around its vfork). Python's C-level handler then runs in that thread; it marks the
        signal and writes its number to the wakeup fd, but the main thread, already waiting
        in a system call (subprocess.run's waitpid, time.sleep), would see the mark only
        when its wait ended. A helper thread reads the wakeup fd and pokes the main thread
        with POKE, whose handler does nothing: the poke ends the main thread's wait, and
        Python runs the marked handlers before it retries (PEP 475). A poke of a main thread
        that took the signal itself does nothing more.
        """
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._wakeup = w
        signal.signal(self.POKE, _ignore_poke)
        self._claim_wakeup_fd()
        main = threading.main_thread().ident
        relayed = frozenset(self.SIGNALS)

        def relay():
            while True:
                try:
                    data = os.read(r, 512)
                except OSError:
                    return  # user code closed it: no relay from now on
                if not data:
                    return
                if not relayed.isdisjoint(data):
                    signal.pthread_kill(main, self.POKE)

        start_helper_thread(relay, "kennel-signal-relay")
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self):
        # A forked child has no relay thread, and its signals must not poke the parent.
        old = signal.set_wakeup_fd(-1)
        if old not in (-1, self._wakeup):
            signal.set_wakeup_fd(old)  # user code's, not ours
        self._wakeup = -1

    def _claim_wakeup_fd(self):
        # Take the wakeup fd unless user code holds it (asyncio's signal handlers do, and
        # give back -1 when done; arm() takes it back then).
        try:
            old = signal.set_wakeup_fd(self._wakeup, warn_on_full_buffer=False)
        except (ValueError, OSError):  # user code closed our fd, or reused its number
            self._wakeup = -1
            return
        if old not in (-1, self._wakeup):
            signal.set_wakeup_fd(old)

    def protect(self, code):
        """Never raise while the innermost frame runs this code object."""
        self._protected.add(code)

    def arm(self):
        # The claim first: a signal in its frame must find the gate not yet armed.
        if self._wakeup >= 0:
            self._claim_wakeup_fd()
        self._pending = None
        # The exceptions are made here, not by `raise KeyboardInterrupt` in the handler: that
        # calls the class there (and allocates, which may collect garbage and run finalizers),
        # and under a storm of interrupts such a call came back now and then as "SystemError:
        # <class 'KeyboardInterrupt'> returned a result with an exception set". The handler
        # makes no call: it raises this cell's instance, again for each signal of the cell.
        self._ready = {signum: cls() for signum, cls in self.SIGNALS.items()}
        self._armed = True

    def disarm(self):
        self._armed = False

    def shielded(self):
        """Context manager: defer signals until the block ends (main thread only)."""
        return _Shield(self)

    def _on_signal(self, signum, frame):
        if not self._armed:
            return
        exc = self.SIGNALS[signum]
        if self._depth:
            if self._pending is not CellTimeout:
                self._pending = exc
            return
        # A second signal can run its handler as this one (or a poke's) starts, with that
        # handler's frame as the interrupted one: judge the frame that both interrupted.
        while frame is not None and frame.f_code in _HANDLER_CODES:
            frame = frame.f_back
        if frame is not None and frame.f_code in self._protected:
            return
        ready = self._ready[signum]
        # Raised again in the same cell, it must not carry the last raise's frames along
        # (attribute stores, not calls).
        ready.__traceback__ = None
        ready.__context__ = None
        raise ready


def _ignore_poke(signum, frame):
    pass  # InterruptGate.POKE only breaks the main thread out of a system call


_HANDLER_CODES = (InterruptGate._on_signal.__code__, _ignore_poke.__code__)


def start_helper_thread(target, name):
    """Start one of the kernel's own daemon threads, with SIGINT and SIGUSR2 blocked.

    kenneld's signals are sent to the process, and Linux hands such a signal to any of its
    threads that does not block it. Taken by a helper thread while the main thread blocks
    every signal (subprocess does, around its vfork), it ran Python's C-level handler
    there, which does not wake the main thread: a cell then waiting in a system call
    (subprocess.run's waitpid) missed its interrupt or deadline until the wait ended.
    Threads the user starts are covered by InterruptGate.relay_to_main_thread. A new
    thread inherits the signal mask of the thread that starts it.
    """
    saved = signal.pthread_sigmask(signal.SIG_BLOCK, InterruptGate.SIGNALS)
    try:
        threading.Thread(target=target, name=name, daemon=True).start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, saved)


class _Shield:
    """One shielded section of an InterruptGate (see InterruptGate.shielded)."""

    def __init__(self, gate):
        self._gate = gate
        # Only the main thread runs signal handlers, so only it needs shielding. A
        # forked child's main thread is the one that forked, hence the late lookup.
        self._is_main = threading.get_ident() == threading.main_thread().ident

    def __enter__(self):
        if self._is_main:
            self._gate._depth += 1

    def __exit__(self, exc_type, exc, tb):
        if not self._is_main:
            return False
        gate = self._gate
        gate._depth -= 1
        if gate._depth == 0 and gate._pending is not None and exc_type is None:
            pending, gate._pending = gate._pending, None
            if gate._armed:
                raise pending
        return False


def _json_default(obj):
    # The types Jupyter's own session serializer accepts beyond plain JSON: binary data
    # (an image a formatter returned as bytes) travels base64-encoded, dates as ISO 8601,
    # and numbers from numpy and friends as plain numbers.
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return binascii.b2a_base64(obj, newline=False).decode("ascii")
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    if hasattr(obj, "__index__"):
        return obj.__index__()
    if hasattr(obj, "__float__"):
        return float(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


# One encoder for every part: json.dumps with any option builds a new JSONEncoder per call,
# ~1 us of the ~9 parts a cell sends. encode() keeps no state between calls (each makes its
# own circular-reference markers), so threads share it.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"),
                            default=_json_default)


class Chunks(tuple):
    """One part given as the byte strings (memoryviews) that make it, in order: written to
    the pipe from where they are, never joined (a snapshot's arrays, each in its own
    memory)."""

    @property
    def nbytes(self):
        return sum(memoryview(c).nbytes for c in self)


def encode_part(obj):
    """Encode one part: bytes as they are (Chunks too: their pieces as bytes-like views),
    anything else as strict UTF-8 JSON.

    NaN and infinities are refused (they are not JSON), and lone surrogates, which
    Python strings may hold but UTF-8 cannot, become '?'.
    """
    if isinstance(obj, Chunks):
        return Chunks(memoryview(c).cast("B") for c in obj)
    if isinstance(obj, memoryview) and obj.c_contiguous:
        return obj.cast("B")  # not copied: encode_frame copies it once, into the frame
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj)
    if type(obj) is dict and not obj:
        return b"{}"  # most metadata parts
    try:
        text = _ENCODER.encode(obj)
    except (TypeError, ValueError) as e:
        raise FrameError(str(e)) from None
    return text.encode("utf-8", "replace")


def encode_frame(parts):
    """Return the bytes of one frame holding the given encoded parts."""
    return b"".join(_frame_chunks(parts))


def _frame_chunks(parts):
    """The byte strings that, written in order, make one frame of the encoded parts."""
    if not 1 <= len(parts) <= MAX_PARTS:
        raise FrameError(f"{len(parts)} parts")
    sizes = [p.nbytes if isinstance(p, Chunks) else len(p) for p in parts]
    body_len = 4 + sum(4 + n for n in sizes)
    if body_len > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {body_len} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
    chunks = [_U32.pack(body_len), _U32.pack(len(parts))]
    for p, n in zip(parts, sizes):
        chunks.append(_U32.pack(n))
        if isinstance(p, Chunks):
            chunks.extend(p)
        else:
            chunks.append(p)
    return chunks


def decode_body(body):
    """Split a frame body into its parts; raise ValueError if it breaks the framing."""
    if len(body) < 4:
        raise ValueError("body shorter than its part count")
    (nparts,) = _U32.unpack_from(body, 0)
    if not 1 <= nparts <= MAX_PARTS:
        raise ValueError(f"part count {nparts} out of range")
    parts, pos = [], 4
    for _ in range(nparts):
        if pos + 4 > len(body):
            raise ValueError("truncated part length")
        (plen,) = _U32.unpack_from(body, pos)
        pos += 4
        if plen > len(body) - pos:
            raise ValueError("part overruns the body")
        parts.append(body[pos:pos + plen])
        pos += plen
    if pos != len(body):
        raise ValueError("parts do not fill the body")
    return parts


def decode_object(data):
    """Parse one part as a JSON object; raise ValueError otherwise."""
    obj = json.loads(data)  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


class Pipe:
    """The kernel's end of the socketpair. send() may be called from any thread;
    recv() only from the main thread."""

    def __init__(self, fd, gate):
        self._fd = fd
        self._gate = gate
        self._wlock = threading.Lock()  # frames from different threads must not interleave
        self._held = None  # an encoded frame kept back to go out with the next (send's hold)
        self._rbuf = bytearray()
        self._large = None  # a large frame's body being read straight into its buffer
        self._large_have = 0
        os.set_blocking(fd, True)
        st = os.fstat(fd)
        self._ident = (st.st_dev, st.st_ino)
        # User code's subprocesses must not hold (or write to) kenneld's pipe.
        os.set_inheritable(fd, False)
        os.register_at_fork(after_in_child=self._after_fork)
        start_helper_thread(self._watch_hangup, "kennel-hangup")

    def send(self, op, *parts, hold=False):
        """Send op (a dict) and parts (dicts, or bytes for buffers) as one frame.

        hold: keep the frame back and write it with the next one, in one write(): each
        write wakes kenneld and costs this VM ~45 us. Only for a frame that the next one
        follows at once (a cell's execute_result, then its reply); whatever comes first --
        another frame from any thread, recv() -- sends it, so the order stays and nothing
        waits for a request.

        Raises FrameError if they cannot form a valid frame; nothing is sent then.
        """
        if self._fd < 0:
            raise OSError("the kernel pipe belongs to the kernel process, not a forked child")
        chunks = _frame_chunks([encode_part(op)] + [encode_part(p) for p in parts])
        if sum(len(c) for c in chunks) < LARGE_FRAME_BYTES:
            views = [memoryview(b"".join(chunks))]
        else:  # written from where the parts are (a snapshot), not joined first
            views = [memoryview(c).cast("B") for c in chunks if len(c)]
        with self._gate.shielded(), self._wlock:
            self._check()
            if self._held is not None:
                views.insert(0, memoryview(self._held))
                self._held = None
            if hold and len(views) == 1:  # (a large frame, or one after a held one, goes now)
                self._held = views[0].obj  # the joined frame's bytes
                return
            self._write(views)

    def flush(self):
        """Write a held frame now (see send)."""
        if self._held is None or self._fd < 0:
            return
        with self._gate.shielded(), self._wlock:
            if self._held is not None:
                frame, self._held = self._held, None
                self._write([memoryview(frame)])

    def _write(self, views):
        """Write views (memoryviews of bytes) in order, all of them."""
        while views:
            try:
                n = os.writev(self._fd, views[:64])
            except (BrokenPipeError, ConnectionResetError):
                os._exit(0)  # kenneld closed its end: the session is over
            while n and n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            if n:
                views[0] = views[0][n:]

    def recv(self):
        """Return (op, parts) for the next frame other than {"op":"exit"}.

        op is the parsed op header; parts are the remaining parts as bytes. Blocks until a
        frame is complete; a SIGINT or SIGUSR2 while blocked may raise KeyboardInterrupt
        or CellTimeout (see InterruptGate) without losing any data.
        """
        self.flush()  # nothing held while waiting for a request
        while True:
            frame = self._next_frame()
            if frame is None:
                self._fill()
                continue
            try:
                parts = decode_body(frame)
                op = decode_object(bytes(parts[0]))
                if not isinstance(op.get("op"), str):
                    raise ValueError('op header has no string "op"')
            except ValueError as e:
                self.fatal(f"malformed frame from kenneld: {e}")
            if op["op"] == "exit":
                os._exit(0)
            if isinstance(frame, memoryview) and op["op"] != "restore":
                # A large frame's parts are views of its buffer; only a snapshot is read as
                # one (kennel_snapshot.restore takes any bytes-like), the others as bytes.
                parts = [bytes(p) for p in parts]
            return op, parts[1:]

    def _next_frame(self):
        if self._large is not None:
            if self._large_have < len(self._large):
                return None
            body, self._large = memoryview(self._large), None
            return body
        buf = self._rbuf
        if len(buf) < 4:
            return None
        (size,) = _U32.unpack_from(buf, 0)
        if size > MAX_RECV_BYTES:
            self.fatal(f"malformed frame from kenneld: length {size} over the limit")
        if len(buf) < 4 + size and size >= LARGE_FRAME_BYTES:
            # The rest of this frame is read straight into a buffer of its own (_fill).
            self._large = large_buffer(size)
            have = min(len(buf) - 4, size)
            self._large[:have] = buf[4:4 + have]
            self._large_have = have
            del buf[:4 + have]
            return None
        if len(buf) < 4 + size:
            return None
        body = bytes(buf[4:4 + size])
        del buf[:4 + size]
        return body

    def _fill(self):
        # Wait outside the shield, so that a blocked input() can be interrupted, but read
        # inside it: an exception from a signal between os.read() returning and the bytes
        # reaching the buffer would lose part of a frame.
        self._check()
        select.select([self._fd], [], [])
        with self._gate.shielded():
            self._check()
            if self._large is not None:
                n = os.readv(self._fd, [memoryview(self._large)[self._large_have:]])
                if not n:
                    os._exit(0)
                self._large_have += n
                return
            data = os.read(self._fd, 1 << 16)
            if not data:
                os._exit(0)  # EOF: kenneld is done with this kernel
            self._rbuf += data

    def write_file(self, fd, chunks):
        """Write chunks (a Chunks, or bytes) to the file fd from its start, all of them, each
        from where it is; shielded as the pipe's own writes are. Raises OSError (EFBIG past
        RLIMIT_FSIZE, ENOSPC)."""
        views = [memoryview(c).cast("B") for c in
                 (chunks if isinstance(chunks, Chunks) else (chunks,))]
        views = [v for v in views if v.nbytes]
        offset = 0
        with self._gate.shielded():
            while views:
                n = os.pwritev(fd, views[:64], offset)
                if n <= 0:
                    raise OSError(f"no progress writing the snapshot at byte {offset}")
                offset += n
                while n and n >= views[0].nbytes:
                    n -= views[0].nbytes
                    views.pop(0)
                if n:
                    views[0] = views[0][n:]

    def recv_fd(self):
        """The descriptor kenneld passes next (SCM_RIGHTS, with one byte, outside the
        framing), once this kernel asked for it: nothing else is on its way then. Its file
        is the caller's to close. Raises OSError when none came."""
        if self._rbuf or self._large is not None:
            self.fatal("a descriptor asked for with frames still unread")
        with self._gate.shielded():
            self._check()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, os.dup(self._fd))
            try:
                data, fds, _, _ = socket.recv_fds(sock, 1, 1, socket.MSG_CMSG_CLOEXEC)
            finally:
                sock.close()  # the duplicate only
        if not data:
            os._exit(0)  # EOF: kenneld is done with this kernel
        if data != b"F" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise OSError(f"kenneld sent {data!r} and {len(fds)} descriptors, not one file")
        return fds[0]

    def _check(self):
        # User code can close the pipe's fd or put another file on its number (os.dup2(x,
        # 3)); the hangup watcher's poll() keeps the socket itself open, so kenneld would
        # see no end and wait on a kernel whose frames went elsewhere. Such a kernel exits.
        try:
            st = os.fstat(self._fd)
        except OSError:
            os._exit(1)
        if (st.st_dev, st.st_ino) != self._ident:
            os._exit(1)

    def _watch_hangup(self):
        # recv() sees EOF only between cells; a cell that never ends would outlive
        # kenneld. POLLRDHUP reports the peer's close without consuming any data.
        hangup = select.poll()
        hangup.register(self._fd, select.POLLRDHUP)
        hangup.poll()
        os._exit(0)

    def diag(self, message):
        """One line of kernel diagnostics for kenneld's log (a `log` frame: kenneld prefixes
        the session, keeps 400 characters and at most 20 lines a minute). The kernel holds
        no descriptor of kenneld's own stderr: user code could write anything there."""
        try:
            self.send({"op": "log", "text": str(message)[:MAX_LOG_CHARS]})
        except (OSError, FrameError):
            pass  # a forked child's, or a pipe already gone

    def fatal(self, message):
        self.diag(message)
        os._exit(1)

    def _after_fork(self):
        # A forked child (multiprocessing, os.fork in a cell) must never write frames:
        # they would interleave with the kernel's. Its output reaches the client through
        # the inherited fd 1 and 2 instead (see kennel_io).
        self._held = None  # the parent's to send
        os.close(self._fd)
        self._fd = -1
