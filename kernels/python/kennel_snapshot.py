"""kennel_snapshot: a session's user namespace to bytes and back, for idle eviction.

save() pickles every name it can with dill (so functions, lambdas and classes defined in
cells survive; plain pickle when dill is missing), notes modules by name to import again
(those that are what sys.modules holds under their name; others are values like any other),
and lists the names it could not keep (generators, sockets, open files, processes…); it
stops, saving nothing, when it runs short of memory or depth or would pass a size. It keeps
the session's history too: every cell's input and the outputs that pickle (`Out[N]`). IPython's
own names (`_`, `_i3`, `_3`, `In`, `exit`, …) are not saved as names while they hold
IPython's values: they are made again from the history, or by the new shell. restore() loads
a snapshot into a namespace and lists the names that failed; one that fails takes with it
only the names that share objects with it. kenneld stores the bytes without looking at
them, out of the kernel's reach.
"""

import concurrent.futures
import errno
import importlib
import io
import itertools
import mmap
import os
import pickle
import random
import re
import stat
import struct
import subprocess
import sys
import threading
import types
from collections import OrderedDict

import kennel_ipython
from kennel_deadline import CellTimeout
from kennel_pipe import Chunks

try:
    import dill as _pickler
except ImportError:  # the kernel still works; fewer objects survive an eviction
    _pickler = pickle

# 1: no history; 2: one pickle of all values ("together"), or one per name ("each"); both
# still read. 3: one stream of pickles, one per name and output, sharing one memo ("parts"),
# in the one pickle of the snapshot; still read. 4: that stream first, the snapshot's pickle
# (without it) after it, then _END: the stream, most of a large snapshot, is copied neither
# into the snapshot's pickle on save nor out of it on restore. 5: large plain arrays'
# bytes out of band (pickle protocol 5's NEXT_BUFFER): after the stream, each at a 64-byte
# boundary, listed in the snapshot's pickle; saved, they are written from the arrays
# themselves; restored, the arrays are views of the snapshot's buffer. Each costs a copy
# into fresh memory otherwise, ~0.3 s per 50 MB on this VM kind.
FORMAT = 5
_BUFFER_ALIGN = 64
_END = struct.Struct(">Q8s")  # where the snapshot's pickle starts; a tag no pickle ends with
_END_TAG = b"kennel4\n"
# IPython's own names for its caches, made again from the history on restore: these, and
# `_iN` / `_N` for lines the history holds (a user's `_7` with no Out[7] is the user's).
_IPYTHON_NAMES = {"_", "__", "___", "_i", "_ii", "_iii", "_ih", "_oh", "_dh"}
_CACHE_LINE = re.compile(r"_(i?)(\d+)")
_NS_ID = "ns"  # the persistent id of the namespace itself
# In-memory files hold no OS resource and pickle as their contents.
_MEMORY_FILES = (io.StringIO, io.BytesIO)
_RLOCK = type(threading.RLock())


class TooLarge(Exception):
    """The snapshot would pass save()'s max_bytes."""


# A snapshot is written into an anonymous mapping of its bound on huge pages (only what is
# written is ever allocated): into a BytesIO, which grows in 4 KiB pages, a 50 MB one took a
# page fault each, half a second on this kind of VM.
_MAPPED_MAX = 1 << 32


class _BoundedFile:
    """A file that refuses a write past max_bytes before it copies it: a value too large to
    keep stops the save rather than be copied whole first (a large array is written in one
    write). What the pickler needs of a file: write, tell, seek, truncate; getbuffer() gives
    what was written, without a copy."""

    def __init__(self, max_bytes):
        self._max_bytes = max_bytes
        self._io = io.BytesIO() if max_bytes > _MAPPED_MAX else None
        self._map = None
        self._pos = self._end = 0
        self.reserved = 0  # bytes of out-of-band buffers (reserve)

    def write(self, data):
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B") if view.c_contiguous else memoryview(view.tobytes())
        if self.tell() + self.reserved + view.nbytes > self._max_bytes:
            raise TooLarge(f"the snapshot would pass {self._max_bytes} bytes")
        if self._io is not None:
            return self._io.write(view)
        if self._map is None:
            try:
                self._map = mmap.mmap(-1, max(self._max_bytes, 1), flags=mmap.MAP_PRIVATE)
            except OSError as e:  # (RLIMIT_AS): short of memory, as a copy would be
                if e.errno != errno.ENOMEM:
                    raise
                raise MemoryError("no room for the snapshot's buffer") from None
            try:
                self._map.madvise(mmap.MADV_HUGEPAGE)
            except (AttributeError, OSError):
                pass
        self._map[self._pos:self._pos + view.nbytes] = view
        self._pos += view.nbytes
        self._end = max(self._end, self._pos)
        return view.nbytes

    def reserve(self, nbytes):
        """Count nbytes more (an array's, kept out of band) against max_bytes."""
        if self.tell() + self.reserved + nbytes > self._max_bytes:
            raise TooLarge(f"the snapshot would pass {self._max_bytes} bytes")
        self.reserved += nbytes

    def tell(self):
        return self._io.tell() if self._io is not None else self._pos

    def seek(self, pos):
        if self._io is not None:
            return self._io.seek(pos)
        self._pos = pos
        return pos

    def truncate(self):
        if self._io is not None:
            return self._io.truncate()
        self._end = self._pos
        return self._pos

    def getbuffer(self):
        if self._io is not None:
            return self._io.getbuffer()
        if self._map is None:
            return memoryview(b"")
        return memoryview(self._map)[:self._end]


class _ViewReader:
    """A read-only file over a bytes-like snapshot (a view of the pipe's buffer), without
    the copy io.BytesIO makes of anything but bytes."""

    def __init__(self, data):
        self._view = memoryview(data).cast("B")
        self._pos = 0

    def read(self, n=-1):
        end = len(self._view) if n is None or n < 0 else min(self._pos + n, len(self._view))
        out = self._view[self._pos:end].tobytes()
        self._pos = end
        return out

    def readinto(self, buf):
        target = memoryview(buf).cast("B")
        n = min(len(target), len(self._view) - self._pos)
        target[:n] = self._view[self._pos:self._pos + n]
        self._pos += n
        return n

    def readline(self):
        end, chunk = self._pos, 1 << 12
        while end < len(self._view):
            i = self._view[end:end + chunk].tobytes().find(b"\n")
            if i >= 0:
                return self.read(end + i + 1 - self._pos)
            end += chunk
        return self.read()

    def seek(self, pos):
        self._pos = pos
        return pos

    def tell(self):
        return self._pos


class _Pickler(_pickler.Pickler if _pickler is not pickle else pickle._Pickler):
    """Pickles values of the namespace ns, one dump() per name into one stream: the memo is
    shared, so an object that several names (or outputs) hold is written once and stays
    shared. Unlike a plain dill pickler:

    - ns itself is a persistent id, not a copy. A function defined in a cell has ns as its
      __globals__ (the shell's user_ns, which is __main__'s dict: dill then refers to it
      rather than copying what the function uses); restored, it is bound to the namespace
      it is restored into, and sees and sets the names there.
    - A file object is refused (dill would reopen it on restore, and a file opened for
      writing would be emptied), and with it every value that holds one.
    - So is what stands for a process or for work under way, which pickles but comes back
      lying: a Popen (its process was killed with the kernel: poll() and wait() would read
      ECHILD as an exit status of 0), a psutil.Process, a future not done (it would never be).
    - An RLock comes back unlocked, or is refused when a thread holds it (that thread will
      not be there). dill 0.3.6 brought every RLock back held by no one: the first acquire,
      a done future's result() say, waited for ever.
    - A module that is not the one imported under its name (types.ModuleType("json"), say)
      is pickled as a new module with its attributes, not as the import of that name."""

    def __init__(self, file, ns):
        dill_options = {} if _pickler is pickle else {"recurse": False}
        super().__init__(file, 5, **dill_options)
        self._ns = ns
        self._file = file
        self.buffers = []  # the large arrays' bytes, out of band, in NEXT_BUFFER's order

    def persistent_id(self, obj):
        return _NS_ID if obj is self._ns else None

    def reducer_override(self, obj):
        if isinstance(obj, io.IOBase) and not isinstance(obj, _MEMORY_FILES):
            _flush(obj)
            raise pickle.PicklingError(f"{type(obj).__name__}: a file is not kept")
        if _is_process(obj) or isinstance(obj, concurrent.futures.Future) and not obj.done():
            raise pickle.PicklingError(f"{type(obj).__name__}: a process or work under way")
        if isinstance(obj, _RLOCK):
            if obj._is_owned() or not obj.acquire(blocking=False):
                raise pickle.PicklingError("RLock: held by a thread")
            obj.release()
            return _RLOCK, ()
        if isinstance(obj, types.ModuleType) and not _by_name(obj):
            state = dict(obj.__dict__)
            state.pop("__builtins__", None)
            return _new_module, (obj.__name__,), state
        numpy = sys.modules.get("numpy")
        if (numpy is not None and type(obj) is numpy.ndarray and obj.nbytes >= _RAW_ARRAY_MIN
                and not obj.dtype.hasobject and obj.itemsize
                and (obj.flags.c_contiguous or obj.flags.f_contiguous)):
            # A large plain array's bytes go into the snapshot as they are, in one write:
            # dill's way (ndarray.__reduce__) copies them into a bytes object first.
            order = "C" if obj.flags.c_contiguous else "F"
            raw = _RawBytes(obj if order == "C" else obj.T)
            return _array_from, (raw, obj.dtype, obj.shape, order, bool(obj.flags.writeable))
        return NotImplemented

    def save(self, obj, save_persistent_id=True):
        if type(obj) is _RawBytes:  # an array's bytes, out of band (protocol 5)
            self._file.reserve(obj.view.nbytes)
            self.write(pickle.NEXT_BUFFER)
            self.buffers.append(obj.view)
            return
        super().save(obj, save_persistent_id)

    def rollback(self, memo_len):
        """Forget what a failed dump() memoized (its bytes are the caller's to drop), so that
        later dumps write those objects again rather than refer to them."""
        self.memo = {k: v for k, v in self.memo.items() if v[0] < memo_len}
        # The failed dump's frame was never ended: left as it is, the next dump() would write
        # its PROTO opcode into that frame, which start_framing() then drops. That part would
        # load under protocol 0, where a dotted name (`Figure.delaxes`) is not found.
        self.framer.current_frame = None
        if hasattr(self, "_postproc"):  # dill's stack of objects being built
            self._postproc = OrderedDict()

    def unshare(self, memo_len):
        """Make later dumps write again, rather than refer to, what the last one memoized
        (from memo_len on) that is the same value wherever it is written: strings, numbers,
        and what is found by name (imported classes, functions and modules). A part whose
        load fails partway has not made what it would have made after that point: a later
        part that referred to its `OrderedDict` would fail too, though it shares nothing
        with it. A forgotten entry keeps its index (under a key no id() is), since the next
        index is the memo's length, as it is for the unpickler."""
        memo = self.memo
        for key in list(itertools.islice(reversed(memo), len(memo) - memo_len)):
            index, obj = memo[key]
            if _is_named(obj):
                del memo[key]
                memo[-1 - index] = (index, None)


def _new_module(name):
    return types.ModuleType(name)


def _by_name(module):
    """Whether a module is kept as the import of its name: the one imported under it, or
    kennel_ipython's stand-in for IPython's terminal (which that name gives back, the real
    module once something has asked for it)."""
    return sys.modules.get(module.__name__) is module or kennel_ipython.is_stand_in(module)


# Plain numpy arrays of this many bytes and more are pickled as their raw bytes.
_RAW_ARRAY_MIN = 64 << 10


class _RawBytes:
    """A C-contiguous array's bytes, for _Pickler.save to write as they are."""

    __slots__ = ("view",)

    def __init__(self, array):
        # Through a uint8 view: the buffer protocol refuses datetime64 and timedelta64
        # ("cannot include dtype 'M' in a buffer"), and every such array of 64 KiB and
        # more (a DataFrame's date column) was lost at eviction. C-contiguous: no copy.
        self.view = memoryview(array.reshape(-1).view("u1"))


def _array_from(buf, dtype, shape, order, writeable=True):
    """The array _Pickler.reducer_override saved: a view of buf (format 5: of the snapshot's
    own buffer, which it keeps alive; 4: a bytearray of its own)."""
    import numpy
    array = numpy.frombuffer(buf, dtype=dtype).reshape(shape, order=order)
    if not writeable:
        array.setflags(write=False)
    return array


def _flush(file):
    """Write out what the user wrote to a file and is still in its buffer, which the end of
    the kernel would lose: the file is not kept, but left as the user left it. Only a
    regular file (a pipe's reader may never read, and the flush would wait); best effort."""
    try:
        if not file.closed and file.writable() and stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            file.flush()
    except _STOPPED:
        raise
    except Exception:  # a detached or broken file: nothing to write out
        pass


def _is_process(obj):
    if isinstance(obj, subprocess.Popen):
        return True
    psutil = sys.modules.get("psutil")  # only if the user imported it
    return psutil is not None and isinstance(obj, psutil.Process)


def _is_named(obj):
    """Whether obj is written the same wherever it is written: an atom, or a module, class
    or function found by its name (as dill decides in _locate_function; what it does not
    find it writes by value, and a copy of that would be another class)."""
    if isinstance(obj, (str, bytes, int, float, complex)):
        return True
    if isinstance(obj, types.ModuleType):
        return _by_name(obj)
    if not isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
        return False
    found = sys.modules.get(getattr(obj, "__module__", None) or "__main__")
    if found is None or found.__name__ == "__main__":
        return False
    for name in getattr(obj, "__qualname__", obj.__name__).split("."):
        found = getattr(found, name, None)
    return found is obj


class _Unpickler(_pickler.Unpickler):
    """The C unpickler (dill's when there is dill), ns as the persistent id's namespace. Its
    memo outlives each load(), so the parts of one stream share objects as they did."""

    def __init__(self, file, ns, buffers=None):
        super().__init__(file, buffers=buffers,
                         **({} if _pickler is pickle else {"ignore": True}))
        self._ns = ns

    def persistent_load(self, pid):
        return _persistent_load(self._ns, pid)


class _SlowUnpickler(pickle._Unpickler):
    """The pure-Python unpickler, whose memo is a dict that can be changed (the C one's
    cannot be set): it takes over after a part failed, without the objects that part may
    have left half made. MEMOIZE files an object at the memo's length, which is shorter by
    what was taken out: here it is filed at its index in the whole stream, counted from
    the index the part starts at (start())."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, file, ns, memo, buffers):
        super().__init__(file, buffers=buffers)
        self.memo = memo
        self._ns = ns
        self._names = _Unpickler(io.BytesIO(), ns)  # finds classes as dill's unpickler does
        self._memo_next = 0

    def start(self, memo_len):
        self._memo_next = memo_len

    def _load_memoize(self):
        self.memo[self._memo_next] = self.stack[-1]
        self._memo_next += 1

    dispatch[pickle.MEMOIZE[0]] = _load_memoize

    def persistent_load(self, pid):
        return _persistent_load(self._ns, pid)

    def find_class(self, module, name):
        return self._names.find_class(module, name)


def _persistent_load(ns, pid):
    if pid != _NS_ID:
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
    return ns


def save(ns, skip, execution_count, history=None, max_bytes=sys.maxsize, comms=()):
    """Return (the snapshot as Chunks: the byte strings that make it, in order, the large
    arrays' bytes among them where they are; names that could not be saved). Raises
    TooLarge past max_bytes, what _is_short_of_resources() names, and _STOPPED: nothing is
    saved then. skip: IPython's hidden names
    and the values it put there (user_ns_hidden): a name is skipped while it holds that very
    value. history: {"inputs": [(line, parsed, raw)], "outputs": {line: value}, "reprs":
    {line: text}, "unders": names among `_`, `__`, `___` that hold the user's own values,
    saved as names}, or None. comms: [(comm_id, target_name)] of the comms open now, which
    restore() gives back for the revived kernel to close. Functions keep ns as their globals
    only when ns is __main__'s dict, as the shell's user_ns is (see _Pickler)."""
    history = history or {"inputs": [], "outputs": {}, "reprs": {}, "unders": []}
    unders = set(history.get("unders", ()))  # `_`, `__`, `___` the user assigned
    lines = ({line for line, _, _ in history["inputs"]}, set(history["outputs"]))
    modules, items = {}, []
    for name, value in list(ns.items()):
        if name not in unders and (_is_shells(name, value, skip) or _is_ipythons(name, lines)):
            continue
        if isinstance(value, types.ModuleType) and _by_name(value):
            modules[name] = value.__name__
            continue
        items.append((("ns", name), value))
    items += [(("out", line), value) for line, value in history["outputs"].items()]
    file = _BoundedFile(max_bytes)
    parts, failed, buffers = _dump_parts(items, ns, file)
    unsaved = [name if kind == "ns" else f"Out[{name}]" for kind, name in failed]
    saved = {name for (kind, name), *_ in parts if kind == "ns"}
    snapshot = {"format": FORMAT, "modules": modules, "execution_count": execution_count,
                "inputs": list(history["inputs"]), "reprs": dict(history["reprs"]),
                "unders": sorted(unders & saved), "parts": parts, "process": _process_state(),
                "comms": [[str(i), str(t)] for i, t in comms]}
    # The layout: the stream; each buffer at a 64-byte boundary (numpy's arrays want their
    # items aligned); the snapshot's pickle; _END.
    chunks, offset, where = [file.getbuffer()], file.tell(), []
    for view in buffers:
        pad = -offset % _BUFFER_ALIGN
        if pad:
            chunks.append(bytes(pad))
        offset += pad
        where.append((offset, view.nbytes))
        chunks.append(view)
        offset += view.nbytes
    snapshot["buffers"] = where
    tail = pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL) + _END.pack(offset, _END_TAG)
    if offset + len(tail) > max_bytes:
        raise TooLarge(f"the snapshot would pass {max_bytes} bytes")
    chunks.append(tail)
    return Chunks(chunks), sorted(unsaved)


def _process_state():
    """What a notebook sets outside its namespace and expects to find after a pause: the
    working directory (`%cd`), the environment, sys.path, and the global random generators'
    states (a seeded experiment goes on where it was). All plain data."""
    state = {"cwd": os.getcwd(), "environ": dict(os.environ), "sys_path": list(sys.path),
             "random": random.getstate()}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        state["numpy_random"] = numpy.random.get_state()
    return state


def _restore_process_state(state):
    """Set what _process_state() saved again; what cannot be is returned, for the notice.
    Environment variables the user deleted come back with the kernel's own values."""
    failed = []
    try:
        os.chdir(state["cwd"])
    except OSError as e:  # a directory in /tmp, which the new kernel does not have
        failed.append(f"(working directory {state['cwd']}: {os.strerror(e.errno)})")
    os.environ.update(state["environ"])
    sys.path[:] = state["sys_path"]
    random.setstate(state["random"])
    numpy = sys.modules.get("numpy")
    if numpy is not None and "numpy_random" in state:
        numpy.random.set_state(state["numpy_random"])
    return failed


def _is_shells(name, value, skip):
    """Whether name holds what the shell put there (exit, get_ipython, In, CellTimeout…)
    rather than a value of the user's under the same name."""
    return name in skip and skip[name] is value


def _is_ipythons(name, lines):
    """Whether name is one IPython makes for its caches. lines: (input lines, output lines)."""
    if name in _IPYTHON_NAMES:
        return True
    m = _CACHE_LINE.fullmatch(name)
    return bool(m) and int(m.group(2)) in lines[0 if m.group(1) else 1]


def _dump_parts(items, ns, file):
    """Pickle [(key, value)] one part each into one stream, written to file (empty). Return
    ([(key, offset, memo index where the part's objects start, index of its first
    out-of-band buffer)], keys that failed, the out-of-band buffers)."""
    pickler = _Pickler(file, ns)
    parts, failed = [], []
    for key, value in items:
        offset, memo_len = file.tell(), len(pickler.memo)
        buffers, reserved = len(pickler.buffers), file.reserved
        try:
            pickler.dump(value)
        except _STOPPED:
            raise
        except BaseException as e:  # anything else a pickler raises (SystemExit too)...
            if isinstance(e, TooLarge) or _is_short_of_resources(e):  # ...is about this
                raise  # value, unless it is one of these
            file.seek(offset)
            file.truncate()
            del pickler.buffers[buffers:]
            file.reserved = reserved
            pickler.rollback(memo_len)
            failed.append(key)
            continue
        pickler.unshare(memo_len)
        parts.append((key, offset, memo_len, buffers))
    return parts, failed, pickler.buffers


# kenneld's deadline for the save (CellTimeout) or an interrupt: the whole save stops, and
# the kernel is kept as it is, not evicted.
_STOPPED = (CellTimeout, KeyboardInterrupt)
# Errors from an OSError that say the machine is short of something, not that the value
# cannot be saved.
_SHORT_ERRNOS = {errno.ENOMEM, errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE}


def _is_short_of_resources(e):
    """Whether an error of a dump says the save, not the value, failed: memory (a large
    array is copied to be pickled), the pickler's depth (RecursionError: dill recurses in
    Python for each level of a nested value), or an OSError of the kind in _SHORT_ERRNOS.
    The whole save stops then, and the kernel is kept with all its values rather than
    evicted without this one; it tries again after the next idle period."""
    return isinstance(e, (MemoryError, RecursionError)) or \
        isinstance(e, OSError) and e.errno in _SHORT_ERRNOS


def _address(view):
    """Where a writable buffer's bytes start."""
    import ctypes
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


class _Buffers:
    """The out-of-band buffers of a snapshot, for the unpickler's NEXT_BUFFER: views of the
    snapshot's bytes where they can be written to (its buffer from the pipe), else copies
    (bytes are read-only, and a restored array must be as writable as it was). Each part
    starts at its own first buffer (at()): a part that failed part-way leaves the next one
    where it begins."""

    def __init__(self, data, where):
        view = memoryview(data).cast("B") if where else None
        self._data = data
        self._where = list(where)
        self._views = [view[o:o + n] for o, n in where]
        self._writable = view is not None and not view.readonly
        self._next = 0
        self._base = _address(view) if self._writable else None

    def at(self, index):
        self._next = index

    def __iter__(self):
        return self

    def __next__(self):
        if self._next >= len(self._views):
            raise pickle.UnpicklingError("a snapshot's stream asks for more buffers than it has")
        offset = self._where[self._next][0]
        view = self._views[self._next]
        self._next += 1
        # A view only where its items are aligned (the buffer's start is a page, and kenneld
        # puts the snapshot on a 64-byte boundary of it): numpy computes slowly on
        # misaligned arrays and calls them unaligned. Else a copy (malloc aligns it).
        if self._writable and (self._base + offset) % _BUFFER_ALIGN == 0:
            return view
        return bytearray(view)

    def release_unused(self):
        """Give back the buffer's pages no array is a view of (the stream's, the pickle's):
        the arrays keep the whole buffer alive, which would hold all of a revived kernel's
        snapshot for the session's life."""
        buf = self._data.obj if isinstance(self._data, memoryview) else self._data
        if not self._writable or not isinstance(buf, mmap.mmap):
            return
        page, kept, start = mmap.PAGESIZE, [], 0
        for offset, n in sorted(self._where):
            if (self._base + offset) % _BUFFER_ALIGN == 0:
                kept.append((offset, offset + n))
        for lo, hi in kept + [(len(buf), len(buf))]:
            first = -(-start // page) * page  # whole pages strictly between the arrays
            last = lo // page * page
            if last > first:
                try:
                    buf.madvise(mmap.MADV_DONTNEED, first, last - first)
                except (OSError, ValueError, AttributeError):
                    return
            start = max(start, hi)


def _load_parts(data, parts, ns, buffers):
    """Load _dump_parts' stream. Return ({key: value}, keys that failed). A part that fails
    takes out of the memo the objects it made that may be half made, so that a later part
    that refers to one of them fails too rather than get it so; the other parts load."""
    file = io.BytesIO(data) if isinstance(data, bytes) else _ViewReader(data)
    unpickler = _Unpickler(file, ns, buffers)
    values, failed = {}, []
    for key, offset, memo_len, *first in parts:  # (format 4: no buffers)
        file.seek(offset)
        buffers.at(first[0] if first else 0)
        if isinstance(unpickler, _SlowUnpickler):
            unpickler.start(memo_len)
        try:
            values[key] = unpickler.load()
        except _STOPPED:
            raise
        except BaseException:  # a __setstate__ that raises SystemExit too
            failed.append(key)
            memo = unpickler.memo if isinstance(unpickler, _SlowUnpickler) else \
                unpickler.memo.copy()
            kept = {i: obj for i, obj in memo.items() if i < memo_len or _is_whole(obj)}
            unpickler = _SlowUnpickler(file, ns, kept, buffers)
    return values, failed


def _is_whole(obj):
    """Whether obj, made by a part that failed, is whole all the same: an atom, or a class,
    function or module, which are found by name or made from their parts in one call (kept,
    lest the failure of one instance of a class lose every later one). Containers and other
    objects are filled in after they are made, and may be half made."""
    if isinstance(obj, types.ModuleType):
        return _by_name(obj)
    return isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType, str, bytes,
                            int, float, complex, type(None)))


def restore(data, ns):
    """Load a snapshot into ns. Return (execution_count, names that failed to load, history
    as save() takes it, with "comms": the comms save() was given)."""
    snapshot, values = _read(data)
    if snapshot.get("format") not in (1, 2, 3, 4, FORMAT):
        raise ValueError(f"snapshot format {snapshot.get('format')!r} is not {FORMAT}")
    # First: modules and values may be found through the user's sys.path and working directory.
    failed = _restore_process_state(snapshot["process"]) if "process" in snapshot else []
    for name, module in snapshot["modules"].items():
        try:
            ns[name] = importlib.import_module(module)
        except _STOPPED:  # the deadline: the restore stops here
            raise
        except BaseException:  # a module that raises SystemExit at import too
            failed.append(name)
    history = {"inputs": snapshot.get("inputs", []), "outputs": {},
               "reprs": snapshot.get("reprs", {}), "unders": snapshot.get("unders", []),
               "comms": [tuple(c) for c in snapshot.get("comms", [])]}
    if "parts" in snapshot:
        buffers = _Buffers(values, snapshot.get("buffers", ()))
        try:
            values, lost = _load_parts(values, snapshot["parts"], ns, buffers)
            buffers.release_unused()
        except _STOPPED:  # the deadline: none of the values, as they may refer to each other
            return snapshot["execution_count"], sorted(failed + ["(all saved values)"]), history
        ns.update({name: v for (kind, name), v in values.items() if kind == "ns"})
        history["outputs"] = {line: v for (kind, line), v in values.items() if kind == "out"}
        failed += [name if kind == "ns" else f"Out[{name}]" for kind, name in lost]
    elif "together" in snapshot:
        try:
            together = _loads(snapshot["together"], ns)
        except BaseException:  # a deadline too: one blob, all or nothing
            return snapshot["execution_count"], sorted(failed + ["(all saved values)"]), history
        if snapshot["format"] == 1:
            together = {"ns": together, "outputs": {}}
        ns.update(together["ns"])
        history["outputs"] = together["outputs"]
    else:
        for name, blob in snapshot["each"].items():
            try:
                ns[name] = _loads(blob, ns)
            except _STOPPED:
                raise
            except BaseException:
                failed.append(name)
        for line, blob in snapshot.get("outputs_each", {}).items():
            try:
                history["outputs"][line] = _loads(blob, ns)
            except _STOPPED:
                raise
            except BaseException:
                failed.append(f"Out[{line}]")
    return snapshot["execution_count"], sorted(failed), history


def _read(data):
    """(the snapshot's pickle, loaded; the bytes its parts' offsets count in)."""
    if isinstance(data, Chunks):  # as save() made it (a test's round trip)
        data = b"".join(data)
    if data[-len(_END_TAG):] == _END_TAG:
        start, _ = _END.unpack_from(data, len(data) - _END.size)
        return pickle.loads(memoryview(data)[start:len(data) - _END.size]), data
    snapshot = pickle.loads(data)
    return snapshot, snapshot.get("values")


def _loads(blob, ns):
    return _Unpickler(io.BytesIO(blob), ns).load()
