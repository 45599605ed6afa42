"""kennel_comm: Jupyter comms in the kernel, and the kernel object libraries look for.

`get_ipython().kernel` is a KernelShim: the few things of ipykernel's kernel that comm
users reach for (comm_manager, session.send to iopub_socket, get_parent, shell), each send
going out through kennel's pipe as an iopub comm_open, comm_msg or comm_close. The comm
manager is python3-comm's CommManager, and comm.create_comm and comm.get_comm_manager are
kennel's, so libraries written for the comm package work as under ipykernel.

ipykernel 6.17's own Comm, which ipywidgets 6 and matplotlib's nbagg build on, accepts only
an instance of ipykernel's Kernel. One (IPyKernel below, sharing the shim's manager and
session) is made when ipykernel.kernelbase is first imported, never before: ipykernel pulls
in zmq, tornado and jupyter_client (~120 ms, ~100 modules), which a kernel that shows no
widget should not pay for. Nothing here imports ipywidgets.

Two fixes where Debian bookworm's packages meet kennel, each made when its module is
imported (_AfterImport): psutil (which ipykernel imports) prints a traceback at import where
/proc/stat is missing, as in the sandbox's /proc, and it is kept from the cell's stderr;
tqdm 4.64's notebook bar sets its colour through a `style` that ipywidgets 6's progress bar
lacks, and failed with AttributeError (under ipykernel too): without `style` the bar keeps
its default colour.

Does no I/O of its own: the kernel hands in send(msg_type, content, metadata, buffers), and
kennel_server dispatches the comm messages kenneld forwards (dispatch()).
"""

import contextlib
import importlib.util
import io
import logging
import os
import sys
import time

try:
    import comm
    from comm.base_comm import BaseComm, CommManager
except ImportError:  # the kernel still works; comm_open is closed again, as for no target
    comm = None
    BaseComm = CommManager = object

COMM_TYPES = frozenset({"comm_open", "comm_msg", "comm_close"})
# What the shim's session.send may publish: a kernel may publish only the iopub types of
# protocol/messages.def (other than status), and kenneld kills a kernel that sends another.
_IOPUB_TYPES = COMM_TYPES | {"stream", "display_data", "update_display_data", "clear_output",
                             "execute_result", "error"}
IOPUB = "iopub"  # the shim's iopub_socket: only the session's send() knows it

_kernel = None  # the process's KernelShim, once the kernel made one


class KernelShim:
    """What `get_ipython().kernel` is in kennel. send(msg_type, content, metadata, buffers)
    publishes one iopub message after the output written before it, and raises ValueError
    (kennel_pipe.FrameError) for what cannot be sent."""

    def __init__(self, shell, send, log):
        global _kernel
        self.shell = shell
        self.send = send
        self.log = log
        self.session = _Session(send)
        self.iopub_socket = IOPUB
        self.comm_manager = CommManager() if comm is not None else None
        self._parent = {}
        _kernel = self
        if comm is not None:
            comm.create_comm = create_comm
            comm.get_comm_manager = get_comm_manager
            # Comm errors (no such target, an exception in a handler) go to kenneld's log,
            # as ipykernel's go to its own log rather than to the front end.
            logger = logging.getLogger("Comm")
            logger.addHandler(_LogHandler(log))
            logger.propagate = False
        hooks = {"ipykernel.kernelbase": (None, _make_ipykernel),
                 "psutil._pslinux": (_without_proc_stat_traceback, _boot_time_from_clocks),
                 "tqdm.notebook": (None, _tqdm_without_style)}
        for name, (_, then) in list(hooks.items()):
            if name in sys.modules:
                del hooks[name]
                if then is not None:
                    then(sys.modules[name])
        sys.meta_path.insert(0, _AfterImport(hooks))

    def set_parent(self, msg):
        """The request being served: {header, parent_header, metadata, content}."""
        self._parent = msg

    def get_parent(self, channel="shell"):
        return self._parent if channel == "shell" else {}

    @property
    def _parent_header(self):
        # ipywidgets' Output widget reads this (ipykernel < 6's name for get_parent()).
        return self._parent

    def __reduce__(self):
        raise TypeError("the kernel object is not kept across an eviction")

    # -- comm messages from the front end (kenneld forwards them one at a time) ----------

    def dispatch(self, msg):
        """Hand one comm_open, comm_msg or comm_close to the comm manager, as ipykernel does
        (its handlers catch and log a handler's Exception; a KeyboardInterrupt or CellTimeout
        reaches the caller)."""
        manager = self.comm_manager
        msg_type = msg["header"]["msg_type"]
        if manager is not None:
            getattr(manager, msg_type)(None, None, msg)
        elif msg_type == "comm_open":  # no comm package: as a kernel without the target
            self.send("comm_close", {"comm_id": msg["content"].get("comm_id", ""), "data": {}})

    def comm_info(self, target_name=None):
        """comm_info_reply's comms: the open comms, of target_name if given."""
        comms = self.comm_manager.comms if self.comm_manager is not None else {}
        return {comm_id: {"target_name": c.target_name} for comm_id, c in list(comms.items())
                if target_name is None or c.target_name == target_name}

    def open_comms(self):
        """[(comm_id, target_name)] of the open comms: what an eviction's snapshot keeps, so
        that the revived kernel can tell the front end they are gone."""
        return [(comm_id, info["target_name"]) for comm_id, info in self.comm_info().items()]

    def close_lost(self, comms):
        """A revived kernel: comm_close for each comm its predecessor had open, which no
        object here answers any more (the front end's widgets close)."""
        for comm_id, _target in comms:
            self.send("comm_close", {"comm_id": comm_id, "data": {}})


class _Session:
    """kernel.session: send() as jupyter_client's Session has it, for iopub only. The parent,
    identities and header are kenneld's to write, so those arguments are ignored."""

    def __init__(self, send):
        self._send = send

    def send(self, stream, msg_or_type, content=None, parent=None, ident=None, buffers=None,
             track=False, header=None, metadata=None):
        if isinstance(msg_or_type, dict):
            msg_type = msg_or_type["header"]["msg_type"]
            content = msg_or_type.get("content", content)
            metadata = msg_or_type.get("metadata", metadata)
        else:
            msg_type = msg_or_type
        if stream is not IOPUB or msg_type not in _IOPUB_TYPES:
            raise ValueError(f"kennel's kernel sends only comm and output messages on iopub, "
                             f"not {msg_type!r}")
        content = {} if content is None else content
        self._send(msg_type, content, metadata or {}, buffers or ())
        return {"header": {"msg_type": msg_type}, "content": content,
                "metadata": metadata or {}, "buffers": buffers or []}


class KennelComm(BaseComm):
    """A comm of the comm package, published through the kernel's pipe."""

    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        content = dict(data={} if data is None else data, comm_id=self.comm_id, **keys)
        _kernel.send(msg_type, content, metadata or {}, buffers or ())

    def __reduce__(self):
        raise TypeError("a comm is not kept across an eviction")


def create_comm(*args, **kwargs):
    """comm.create_comm: ipykernel's Comm where ipykernel's is loaded (ipywidgets 6 accepts
    no other for a widget the front end opens), else kennel's."""
    ipykernel_comm = sys.modules.get("ipykernel.comm")
    if ipykernel_comm is not None and IPyKernel is not None:
        return ipykernel_comm.Comm(*args, **kwargs)
    return KennelComm(*args, **kwargs)


def get_comm_manager():
    return _kernel.comm_manager


IPyKernel = None  # the class, once ipykernel.kernelbase is imported


def _make_ipykernel(kernelbase):
    """ipykernel's Kernel.instance(), made of the shim: what ipykernel.comm.Comm takes for
    its kernel (an instance of ipykernel's Kernel, by traitlets' check)."""
    global IPyKernel
    from traitlets import Any

    shim = _kernel

    class _IPyKernel(kernelbase.Kernel):
        """ipykernel's Kernel as far as its Comm uses it: comm_manager, session,
        iopub_socket, get_parent and shell are the shim's. It serves no socket."""

        session = Any()  # the shim's, not a jupyter_client Session
        implementation = "kennel"
        implementation_version = ""
        banner = ""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.session = shim.session
            self.iopub_socket = shim.iopub_socket
            self.comm_manager = shim.comm_manager
            self.shell = shim.shell

        def get_parent(self, channel="shell"):
            return shim.get_parent(channel)

        @property
        def _parent_header(self):
            return shim.get_parent()

        def __reduce__(self):
            raise TypeError("the kernel object is not kept across an eviction")

    IPyKernel = _IPyKernel
    _IPyKernel.instance()  # also ipykernel.kernelbase.Kernel's instance()


def _boot_time_from_clocks(pslinux):
    """psutil reads the boot time, which psutil.Process() needs, from /proc/stat, which the
    sandbox's /proc does not show: the clocks say it instead (what btime there would say).
    Processes the kernel starts get the same from sandbox_site/sitecustomize.py."""
    if os.path.exists("/proc/stat"):
        return

    def boot_time():
        pslinux.BOOT_TIME = (time.clock_gettime(time.CLOCK_REALTIME)
                             - time.clock_gettime(time.CLOCK_BOOTTIME))
        return pslinux.BOOT_TIME

    pslinux.boot_time = boot_time


def _tqdm_without_style(module):
    """tqdm.notebook's bar colour, which needs ipywidgets 7's `style`: without it, a colour
    asked for is not shown (tqdm 4.64 set it unconditionally, and so failed on ipywidgets 6)."""
    progress = getattr(module, "IProgress", None)
    if progress is None or progress.class_traits().get("style") is not None:
        return
    module.tqdm_notebook.colour = property(lambda self: None, lambda self, value: None)


@contextlib.contextmanager
def _without_proc_stat_traceback():
    """psutil prints a traceback when it cannot read /proc/stat at import (the sandbox's
    /proc has none), then goes on without it. That traceback is dropped; anything else
    written to sys.stderr meanwhile (by another thread) is written on."""
    real = sys.stderr
    sys.stderr = caught = io.StringIO()
    try:
        yield
    finally:
        sys.stderr = real
        text = caught.getvalue()
        if text and "/proc/stat" not in text:
            real.write(text)


class _AfterImport:
    """For the modules of hooks, {name: (around, then)}: runs a module's import inside the
    context manager around() and calls then(module) after it, each once; by wrapping the
    loader that the other finders find. Leaves sys.meta_path once every hook has run."""

    def __init__(self, hooks):
        self._hooks = hooks

    def find_spec(self, fullname, path=None, target=None):
        hook = self._hooks.pop(fullname, None)
        if hook is None:
            return None
        if not self._hooks and self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _HookedLoader(spec.loader, *hook)
        return spec


class _HookedLoader:
    def __init__(self, loader, around, then):
        self._loader = loader
        self._around = around or contextlib.nullcontext
        self._then = then

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader = module.__loader__ = self._loader
        with self._around():
            self._loader.exec_module(module)
        if self._then is None:
            return
        try:
            self._then(module)
        except Exception as e:  # the user's import goes on (without the fix)
            if _kernel is not None:
                _kernel.log(f"after importing {module.__name__}: {type(e).__name__}: {e}")


class _LogHandler(logging.Handler):
    def __init__(self, log):
        super().__init__(logging.WARNING)
        self._log = log

    def emit(self, record):
        try:
            self._log(self.format(record))
        except Exception:
            pass
