"""kennel_ipython: `import IPython` without its terminal, until something uses the terminal.

IPython's package __init__ runs `from .terminal.embed import embed`, which imports the
terminal shell, prompt_toolkit and, through the terminal's debugger, IPython's completer and
jedi: 0.48 s of the 0.74 s of CPU that importing kennel's kernel runtime took here, paid by
every zygote and by every cold kernel (`--spawner exec`), for a terminal a kernel never
shows. import_ipython() imports IPython with a stand-in for IPython.terminal.embed in
sys.modules, then takes `embed` off the package again and lets the package's module
__getattr__ (PEP 562) import the real one when `IPython.embed` is first asked for: the user
then gets the real function, called from their own frame as embed() expects. Any name asked
of the stand-in itself (`from IPython.terminal.embed import InteractiveShellEmbed`) imports
the real module, which replaces it from then on. Nothing else of IPython changes; what the
kernel's shell needs (IPython.core) is imported as before.
"""
import importlib
import importlib.machinery
import sys
import types

_NAME = "IPython.terminal.embed"


def _real():
    """The real IPython.terminal.embed, imported now if the stand-in is still in place."""
    module = sys.modules.get(_NAME)
    if isinstance(module, _Deferred):
        del sys.modules[_NAME]
        module = importlib.import_module(_NAME)  # (sets IPython.terminal.embed too)
    return module


class _Deferred(types.ModuleType):
    def __getattr__(self, name):
        # The import system asks a module for __path__, __spec__ and the like: answering
        # those would import the terminal at `import IPython`, which is what this avoids.
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(_real(), name)


def _package_getattr(name):
    """IPython's module __getattr__: `embed`, imported when first asked for."""
    if name == "embed":
        real = _real().embed
        sys.modules["IPython"].embed = real  # asked once
        return real
    raise AttributeError(f"module 'IPython' has no attribute {name!r}")


def is_stand_in(obj):
    """Whether obj is the stand-in for IPython.terminal.embed (a snapshot keeps it by its
    name, as the module it stands for: after a revival the name gives the real module)."""
    return isinstance(obj, _Deferred)


def _placeholder(*args, **kwargs):
    """What IPython's __init__ binds as `embed` while the stand-in is in place; replaced by
    the package's __getattr__ before anyone can call it."""
    return _package_getattr("embed")(*args, **kwargs)


def import_ipython():
    """Import IPython, its terminal deferred (unless IPython is imported already)."""
    if "IPython" in sys.modules or _NAME in sys.modules:
        return sys.modules.get("IPython") or importlib.import_module("IPython")
    stand_in = _Deferred(_NAME, "IPython.terminal.embed, imported when first used")
    stand_in.embed = _placeholder
    sys.modules[_NAME] = stand_in
    try:
        import IPython
    except BaseException:
        sys.modules.pop(_NAME, None)
        raise
    # The stand-in's own `embed` goes: from now on `from IPython.terminal.embed import
    # embed` asks __getattr__, which gives the real function (called from the user's frame).
    del stand_in.embed
    if vars(IPython).get("embed") is _placeholder:
        del IPython.embed
        IPython.__getattr__ = _package_getattr
        IPython.__dir__ = lambda: sorted({*vars(IPython), "embed"})
    # IPython.terminal itself (an empty __init__), which IPython's own import no longer
    # reaches, with the stand-in as its `embed` until the real one replaces it; and the
    # stand-in's __file__, found without importing it.
    terminal = importlib.import_module("IPython.terminal")
    if sys.modules.get(_NAME) is stand_in:
        terminal.embed = stand_in
        spec = importlib.machinery.PathFinder.find_spec(_NAME, terminal.__path__)
        if spec is not None and spec.origin:
            stand_in.__file__ = spec.origin
    return IPython
