"""kennel_snapshot: a session's user namespace to bytes and back, for idle eviction.

save() pickles every name it can with dill (so functions, lambdas and classes defined in
cells survive; plain pickle when dill is missing), notes modules by name to import again,
and lists the names it could not keep (generators, sockets, open files…). It keeps the
session's history too: every cell's input and the outputs that pickle (`Out[N]`). IPython's
own names (`_`, `_i3`, `_3`, `In`, …) are not saved as names: they are made again from the
history. restore() loads a snapshot into a namespace and lists the names that failed.
kenneld stores the bytes without looking at them, out of the kernel's reach.
"""

import importlib
import io
import pickle
import re
import types

from kennel_deadline import CellTimeout

try:
    import dill as _pickler
except ImportError:  # the kernel still works; fewer objects survive an eviction
    _pickler = pickle

FORMAT = 2  # 1: no history; still read
# IPython's own names for its caches, made again from the history on restore: these, and
# `_iN` / `_N` for lines the history holds (a user's `_7` with no Out[7] is the user's).
_IPYTHON_NAMES = {"_", "__", "___", "_i", "_ii", "_iii", "_ih", "_oh", "_dh"}
_CACHE_LINE = re.compile(r"_(i?)(\d+)")
_NS_ID = "ns"  # the persistent id of the namespace itself


# In-memory files hold no OS resource and pickle as their contents.
_MEMORY_FILES = (io.StringIO, io.BytesIO)


class _Pickler(_pickler.Pickler if _pickler is not pickle else pickle._Pickler):
    """dill's pickler (plain pickle's without dill) for values of the namespace ns. Unlike a
    plain dill pickler:

    - ns itself is a persistent id, not a copy. A function defined in a cell has ns as its
      __globals__ (the shell's user_ns, which is __main__'s dict: dill then refers to it
      rather than copying what the function uses, as recurse=True did); restored, it is
      bound to the namespace it is restored into, and sees and sets the names there.
    - A file object is refused (dill would reopen it on restore, and a file opened for
      writing would be emptied), and with it every value that holds one."""

    def __init__(self, file, ns):
        dill_options = {} if _pickler is pickle else {"recurse": False}
        super().__init__(file, pickle.HIGHEST_PROTOCOL, **dill_options)
        self._ns = ns

    def persistent_id(self, obj):
        return _NS_ID if obj is self._ns else None

    def reducer_override(self, obj):
        if isinstance(obj, io.IOBase) and not isinstance(obj, _MEMORY_FILES):
            raise pickle.PicklingError(f"{type(obj).__name__}: a file is not kept")
        return NotImplemented


class _Unpickler(_pickler.Unpickler):
    """dill's unpickler (or pickle's), ns as the persistent id's namespace."""

    def __init__(self, file, ns):
        super().__init__(file, **({} if _pickler is pickle else {"ignore": True}))
        self._ns = ns

    def persistent_load(self, pid):
        if pid != _NS_ID:
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        return self._ns


def _dumps(obj, ns):
    file = io.BytesIO()
    _Pickler(file, ns).dump(obj)
    return file.getvalue()


def _loads(blob, ns):
    return _Unpickler(io.BytesIO(blob), ns).load()


def save(ns, skip, execution_count, history=None):
    """Return (snapshot bytes, names that could not be saved). history: {"inputs": [(line,
    parsed, raw)], "outputs": {line: value}, "reprs": {line: text}, "unders": names among
    `_`, `__`, `___` that hold the user's own values, saved as names}, or None."""
    modules, values, unsaved = {}, {}, []
    history = history or {"inputs": [], "outputs": {}, "reprs": {}, "unders": []}
    unders = set(history.get("unders", ()))  # `_`, `__`, `___` the user assigned
    lines = ({line for line, _, _ in history["inputs"]}, set(history["outputs"]))
    for name, value in list(ns.items()):
        if name not in unders and (name in skip or _is_ipythons(name, lines)):
            continue
        if isinstance(value, types.ModuleType):
            modules[name] = value.__name__
            continue
        if _picklable(value, ns):
            values[name] = value
        else:
            unsaved.append(name)
    outputs = {}
    for line, value in history["outputs"].items():
        if _picklable(value, ns):
            outputs[line] = value
        else:
            unsaved.append(f"Out[{line}]")
    try:
        # Together, so that objects shared between names (and outputs) stay shared.
        payload = {"together": _dumps({"ns": values, "outputs": outputs}, ns)}
    except _STOPPED:
        raise
    except BaseException:
        payload = {"each": {name: _dumps(v, ns) for name, v in values.items()},
                   "outputs_each": {line: _dumps(v, ns) for line, v in outputs.items()}}
    snapshot = {"format": FORMAT, "modules": modules, "execution_count": execution_count,
                "inputs": list(history["inputs"]), "reprs": dict(history["reprs"]),
                "unders": sorted(unders & set(values)), **payload}
    return pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL), sorted(unsaved)


def _is_ipythons(name, lines):
    """Whether name is one IPython makes for its caches. lines: (input lines, output lines)."""
    if name in _IPYTHON_NAMES:
        return True
    m = _CACHE_LINE.fullmatch(name)
    return bool(m) and int(m.group(2)) in lines[0 if m.group(1) else 1]


def _picklable(value, ns):
    try:
        _dumps(value, ns)
        return True
    except _STOPPED:
        raise
    except BaseException:  # anything else a pickler raises (SystemExit too): not this one
        return False


# kenneld's deadline for the save (CellTimeout) or an interrupt: the whole save stops, and
# the kernel is kept as it is, not evicted.
_STOPPED = (CellTimeout, KeyboardInterrupt)


def restore(data, ns):
    """Load a snapshot into ns. Return (execution_count, names that failed to load, history
    as save() takes it)."""
    snapshot = pickle.loads(data)
    if snapshot.get("format") not in (1, FORMAT):
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
    if "together" in snapshot:
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
