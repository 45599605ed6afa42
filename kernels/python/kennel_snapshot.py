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


# In-memory files hold no OS resource and pickle as their contents.
_MEMORY_FILES = (io.StringIO, io.BytesIO)


class _Pickler(_pickler.Pickler if _pickler is not pickle else pickle._Pickler):
    """dill's pickler (plain pickle's without dill), which refuses a file object: dill would
    reopen it on restore, and a file open for writing would be emptied. Every value that
    holds one is refused with it."""

    def reducer_override(self, obj):
        if isinstance(obj, io.IOBase) and not isinstance(obj, _MEMORY_FILES):
            raise pickle.PicklingError(f"{type(obj).__name__}: a file is not kept")
        return NotImplemented


def _dumps(obj):
    file = io.BytesIO()
    dill_options = {} if _pickler is pickle else {"recurse": True}
    _Pickler(file, pickle.HIGHEST_PROTOCOL, **dill_options).dump(obj)
    return file.getvalue()


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
        if _picklable(value):
            values[name] = value
        else:
            unsaved.append(name)
    outputs = {}
    for line, value in history["outputs"].items():
        if _picklable(value):
            outputs[line] = value
        else:
            unsaved.append(f"Out[{line}]")
    try:
        # Together, so that objects shared between names (and outputs) stay shared.
        payload = {"together": _dumps({"ns": values, "outputs": outputs})}
    except _STOPPED:
        raise
    except BaseException:
        payload = {"each": {name: _dumps(v) for name, v in values.items()},
                   "outputs_each": {line: _dumps(v) for line, v in outputs.items()}}
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


def _picklable(value):
    try:
        _dumps(value)
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
    loads = _pickler.loads
    if "together" in snapshot:
        try:
            together = loads(snapshot["together"])
        except BaseException:  # a deadline too: one blob, all or nothing
            return snapshot["execution_count"], sorted(failed + ["(all saved values)"]), history
        if snapshot["format"] == 1:
            together = {"ns": together, "outputs": {}}
        ns.update(together["ns"])
        history["outputs"] = together["outputs"]
    else:
        for name, blob in snapshot["each"].items():
            try:
                ns[name] = loads(blob)
            except _STOPPED:
                raise
            except BaseException:
                failed.append(name)
        for line, blob in snapshot.get("outputs_each", {}).items():
            try:
                history["outputs"][line] = loads(blob)
            except _STOPPED:
                raise
            except BaseException:
                failed.append(f"Out[{line}]")
    return snapshot["execution_count"], sorted(failed), history
