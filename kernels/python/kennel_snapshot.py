"""kennel_snapshot: a session's user namespace to bytes and back, for idle eviction.

save() pickles every name it can with dill (so functions, lambdas and classes defined in
cells survive; plain pickle when dill is missing), notes modules by name to import again
(those that are what sys.modules holds under their name; others are values like any other),
and lists the names it could not keep (generators, sockets, open files…). It keeps the
session's history too: every cell's input and the outputs that pickle (`Out[N]`). IPython's
own names (`_`, `_i3`, `_3`, `In`, `exit`, …) are not saved as names while they hold
IPython's values: they are made again from the history, or by the new shell. restore() loads
a snapshot into a namespace and lists the names that failed; one that fails takes with it
only the names that share objects with it. kenneld stores the bytes without looking at
them, out of the kernel's reach.
"""

import importlib
import io
import pickle
import re
import sys
import types
from collections import OrderedDict

from kennel_deadline import CellTimeout

try:
    import dill as _pickler
except ImportError:  # the kernel still works; fewer objects survive an eviction
    _pickler = pickle

# 1: no history; 2: one pickle of all values ("together"), or one per name ("each"); both
# still read. 3: one stream of pickles, one per name and output, sharing one memo ("parts").
FORMAT = 3
# IPython's own names for its caches, made again from the history on restore: these, and
# `_iN` / `_N` for lines the history holds (a user's `_7` with no Out[7] is the user's).
_IPYTHON_NAMES = {"_", "__", "___", "_i", "_ii", "_iii", "_ih", "_oh", "_dh"}
_CACHE_LINE = re.compile(r"_(i?)(\d+)")
_NS_ID = "ns"  # the persistent id of the namespace itself
# In-memory files hold no OS resource and pickle as their contents.
_MEMORY_FILES = (io.StringIO, io.BytesIO)


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
    - A module that is not the one imported under its name (types.ModuleType("json"), say)
      is pickled as a new module with its attributes, not as the import of that name."""

    def __init__(self, file, ns):
        dill_options = {} if _pickler is pickle else {"recurse": False}
        super().__init__(file, pickle.HIGHEST_PROTOCOL, **dill_options)
        self._ns = ns

    def persistent_id(self, obj):
        return _NS_ID if obj is self._ns else None

    def reducer_override(self, obj):
        if isinstance(obj, io.IOBase) and not isinstance(obj, _MEMORY_FILES):
            raise pickle.PicklingError(f"{type(obj).__name__}: a file is not kept")
        if isinstance(obj, types.ModuleType) and sys.modules.get(obj.__name__) is not obj:
            state = dict(obj.__dict__)
            state.pop("__builtins__", None)
            return _new_module, (obj.__name__,), state
        return NotImplemented

    def rollback(self, memo_len):
        """Forget what a failed dump() memoized (its bytes are the caller's to drop), so that
        later dumps write those objects again rather than refer to them."""
        self.memo = {k: v for k, v in self.memo.items() if v[0] < memo_len}
        if hasattr(self, "_postproc"):  # dill's stack of objects being built
            self._postproc = OrderedDict()


def _new_module(name):
    return types.ModuleType(name)


class _Unpickler(_pickler.Unpickler):
    """The C unpickler (dill's when there is dill), ns as the persistent id's namespace. Its
    memo outlives each load(), so the parts of one stream share objects as they did."""

    def __init__(self, file, ns):
        super().__init__(file, **({} if _pickler is pickle else {"ignore": True}))
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

    def __init__(self, file, ns, memo):
        super().__init__(file)
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


def save(ns, skip, execution_count, history=None):
    """Return (snapshot bytes, names that could not be saved). skip: IPython's hidden names
    and the values it put there (user_ns_hidden): a name is skipped while it holds that very
    value. history: {"inputs": [(line, parsed, raw)], "outputs": {line: value}, "reprs":
    {line: text}, "unders": names among `_`, `__`, `___` that hold the user's own values,
    saved as names}, or None. Functions keep ns as their globals only when ns is __main__'s
    dict, as the shell's user_ns is (see _Pickler)."""
    history = history or {"inputs": [], "outputs": {}, "reprs": {}, "unders": []}
    unders = set(history.get("unders", ()))  # `_`, `__`, `___` the user assigned
    lines = ({line for line, _, _ in history["inputs"]}, set(history["outputs"]))
    modules, items = {}, []
    for name, value in list(ns.items()):
        if name not in unders and (_is_shells(name, value, skip) or _is_ipythons(name, lines)):
            continue
        if isinstance(value, types.ModuleType) and sys.modules.get(value.__name__) is value:
            modules[name] = value.__name__
            continue
        items.append((("ns", name), value))
    items += [(("out", line), value) for line, value in history["outputs"].items()]
    data, parts, failed = _dump_parts(items, ns)
    unsaved = [name if kind == "ns" else f"Out[{name}]" for kind, name in failed]
    saved = {name for (kind, name), _, _ in parts if kind == "ns"}
    snapshot = {"format": FORMAT, "modules": modules, "execution_count": execution_count,
                "inputs": list(history["inputs"]), "reprs": dict(history["reprs"]),
                "unders": sorted(unders & saved), "values": data, "parts": parts}
    return pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL), sorted(unsaved)


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


def _dump_parts(items, ns):
    """Pickle [(key, value)] one part each into one stream. Return (the stream's bytes,
    [(key, offset, memo index where the part's objects start)], keys that failed)."""
    file = io.BytesIO()
    pickler = _Pickler(file, ns)
    parts, failed = [], []
    for key, value in items:
        offset, memo_len = file.tell(), len(pickler.memo)
        try:
            pickler.dump(value)
        except _STOPPED:
            raise
        except BaseException:  # anything else a pickler raises (SystemExit too): not this one
            file.seek(offset)
            file.truncate()
            pickler.rollback(memo_len)
            failed.append(key)
            continue
        parts.append((key, offset, memo_len))
    return file.getvalue(), parts, failed


# kenneld's deadline for the save (CellTimeout) or an interrupt: the whole save stops, and
# the kernel is kept as it is, not evicted.
_STOPPED = (CellTimeout, KeyboardInterrupt)


def _load_parts(data, parts, ns):
    """Load _dump_parts' stream. Return ({key: value}, keys that failed). A part that fails
    takes out of the memo the objects it made that may be half made, so that a later part
    that refers to one of them fails too rather than get it so; the other parts load."""
    file = io.BytesIO(data)
    unpickler = _Unpickler(file, ns)
    values, failed = {}, []
    for key, offset, memo_len in parts:
        file.seek(offset)
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
            unpickler = _SlowUnpickler(file, ns, kept)
    return values, failed


def _is_whole(obj):
    """Whether obj, made by a part that failed, is whole all the same: an atom, or a class,
    function or module, which are found by name or made from their parts in one call (kept,
    lest the failure of one instance of a class lose every later one). Containers and other
    objects are filled in after they are made, and may be half made."""
    if isinstance(obj, types.ModuleType):
        return sys.modules.get(obj.__name__) is obj
    return isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType, str, bytes,
                            int, float, complex, type(None)))


def restore(data, ns):
    """Load a snapshot into ns. Return (execution_count, names that failed to load, history
    as save() takes it)."""
    snapshot = pickle.loads(data)
    if snapshot.get("format") not in (1, 2, FORMAT):
        raise ValueError(f"snapshot format {snapshot.get('format')!r} is not {FORMAT}")
    failed = []
    for name, module in snapshot["modules"].items():
        try:
            ns[name] = importlib.import_module(module)
        except _STOPPED:  # the deadline: the restore stops here
            raise
        except BaseException:  # a module that raises SystemExit at import too
            failed.append(name)
    history = {"inputs": snapshot.get("inputs", []), "outputs": {},
               "reprs": snapshot.get("reprs", {}), "unders": snapshot.get("unders", [])}
    if "parts" in snapshot:
        try:
            values, lost = _load_parts(snapshot["values"], snapshot["parts"], ns)
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


def _loads(blob, ns):
    return _Unpickler(io.BytesIO(blob), ns).load()
