"""kennel_snapshot: a session's user namespace to bytes and back, for idle eviction.

save() pickles every name it can with dill (so functions, lambdas and classes defined in
cells survive; plain pickle when dill is missing), notes modules by name to import again,
and lists the names it could not keep (generators, sockets, open files…). restore() loads
a snapshot into a namespace and lists the names that failed. kenneld stores the bytes
without looking at them, out of the kernel's reach.
"""

import importlib
import pickle
import types

try:
    import dill as _pickler
except ImportError:  # the kernel still works; fewer objects survive an eviction
    _pickler = pickle

FORMAT = 1


def _dumps(obj):
    if _pickler is pickle:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _pickler.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL, recurse=True)


def save(ns, skip, execution_count):
    """Return (snapshot bytes, names that could not be saved)."""
    modules, values, unsaved = {}, {}, []
    for name, value in list(ns.items()):
        if name.startswith("_") or name in skip:
            continue  # IPython's own names and its output cache
        if isinstance(value, types.ModuleType):
            modules[name] = value.__name__
            continue
        try:
            _dumps(value)
        except Exception:  # anything a pickler raises means "cannot keep this one"
            unsaved.append(name)
            continue
        values[name] = value
    try:
        # Together, so that objects shared between names stay shared.
        payload = {"together": _dumps(values)}
    except Exception:
        payload = {"each": {name: _dumps(v) for name, v in values.items()}}
    snapshot = {"format": FORMAT, "modules": modules, "execution_count": execution_count,
                **payload}
    return pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL), sorted(unsaved)


def restore(data, ns):
    """Load a snapshot into ns. Return (execution_count, names that failed to load)."""
    snapshot = pickle.loads(data)
    if snapshot.get("format") != FORMAT:
        raise ValueError(f"snapshot format {snapshot.get('format')!r} is not {FORMAT}")
    failed = []
    for name, module in snapshot["modules"].items():
        try:
            ns[name] = importlib.import_module(module)
        except Exception:
            failed.append(name)
    loads = _pickler.loads
    if "together" in snapshot:
        try:
            ns.update(loads(snapshot["together"]))
        except Exception:
            return snapshot["execution_count"], sorted(failed + ["(all saved values)"])
    else:
        for name, blob in snapshot["each"].items():
            try:
                ns[name] = loads(blob)
            except Exception:
                failed.append(name)
    return snapshot["execution_count"], sorted(failed)
