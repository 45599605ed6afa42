"""kennel_shell: IPython's InteractiveShell, sending what it shows as Jupyter messages.

KennelShell turns results, rich displays, tracebacks and pager text into execute_result,
display_data, update_display_data, clear_output, error and payloads, through a publish
function the kernel provides. It keeps history in memory only and completes without jedi.
It adds no magics and no GUI event loops (%gui and %matplotlib <gui> fail; inline works).
The user namespace starts with CellTimeout, the exception of a cell past its deadline.
The kernel sets the shell's `kernel` (kennel_comm.KernelShim), which libraries look for.
"""

import linecache
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from IPython.core import page, payloadpage
from IPython.core.displayhook import DisplayHook
from IPython.core.displaypub import DisplayPublisher
from IPython.core.autocall import ZMQExitAutocall
from IPython.core.error import UsageError
from IPython.core.formatters import DisplayFormatter, PlainTextFormatter
from IPython.core.inputtransformer2 import (EscapedCommand, HelpEnd, MagicAssign, SystemAssign,
                                            TransformerManager)
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.profiledir import ProfileDir
from IPython.lib.pretty import _repr_pprint
from IPython.paths import get_ipython_dir
from IPython.utils.path import get_home_dir
from pickleshare import PickleShareDB
from traitlets import Any, Instance, Type, default
from traitlets.config import Config

import kennel_runtime
from kennel_deadline import CellTimeout

SIGINT_GRACE_S = 1.0  # an interrupted `!cmd` has this long to exit on SIGINT


def _signal_group(proc, signum):
    """Signal the process group proc leads (its own: start_new_session), if it still has
    members."""
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        pass


class KennelDisplayPublisher(DisplayPublisher):
    """display() and clear_output() as iopub messages."""

    def publish(self, data, metadata=None, source=None, *, transient=None, update=False,
                **kwargs):
        self._validate_data(data, metadata)
        self.shell.publish("update_display_data" if update else "display_data", {
            "data": data,
            "metadata": metadata or {},
            "transient": transient or {},
        })

    def clear_output(self, wait=False):
        self.shell.publish("clear_output", {"wait": bool(wait)})


class KennelDisplayHook(DisplayHook):
    """The value of a cell's last expression as execute_result.

    The base class writes an "Out[n]:" prompt and the text to sys.stdout; the client
    draws its own prompt, so only the message is sent.
    """

    def write_output_prompt(self):
        pass

    def write_format_data(self, format_dict, md_dict=None):
        self.shell.publish("execute_result", {
            "execution_count": self.prompt_count,
            "data": format_dict,
            "metadata": md_dict or {},
        })

    def finish_displayhook(self):
        pass

    def quiet(self):
        # IPython tokenizes the whole cell, in pure Python, to see whether it ends in ';':
        # ~3 ms for a 180-line cell. With no ';' in its text it cannot. (IPython reads the
        # last cell stored in history, so after an unterminated one and a cell run with
        # store_history=False, its tokenize raises where this says False: not kept.)
        try:
            cell = self.shell.history_manager.input_hist_parsed[-1]
        except IndexError:
            return False
        if isinstance(cell, str) and ";" not in cell:
            return False
        return super().quiet()


# IPython's own token transformers, in its order, and what each looks for:
#   MagicAssign     `a = %magic`: an assignment's '=' token, then a '%' token;
#   SystemAssign    `a = !cmd`: an assignment's '=' token, then '!' (after blanks);
#   EscapedCommand  one of '!?%,;/' as the first token of a logical line, which tokenize
#                   finds at a physical line's first non-blank character;
#   HelpEnd         `obj?`: '?' as the last token of a logical line, so at a physical line's
#                   end (a comment after it hides it).
_TOKEN_TRANSFORMERS = [MagicAssign, SystemAssign, EscapedCommand, HelpEnd]
_ESCAPES = frozenset("!?%,;/")
# (After a line continuation, '%' or '!' starts a physical line: the line check finds it.)
_ASSIGNED_ESCAPE = re.compile(r"=\s*[%!]")


def _may_transform(lines):
    """False only if no token transformer of IPython's can find anything in lines (it may
    say True for a cell none would change: '=%' in a string, say)."""
    text = "".join(lines)
    if _ESCAPES.isdisjoint(text):
        return False
    if _ASSIGNED_ESCAPE.search(text):
        return True
    # Lines as IPython splits them (and more, where a line holds line breaks), with every
    # character tokenize counts as blank, and more, stripped.
    return any(line.lstrip()[:1] in _ESCAPES or line.rstrip().endswith("?")
               for line in text.splitlines())


class KennelTransformerManager(TransformerManager):
    """IPython's, without its token passes over a cell none of them can change. IPython
    tokenizes the whole cell, in pure Python, at least once per cell to look for its special
    syntax (%magic, !shell, obj?, a = %magic, ...): ~3.5 ms for a 180-line cell. A cell with
    none of the characters that syntax needs skips it; any other goes through IPython's own
    passes, as does every cell once a transformer is added or removed. Only transform_cell
    skips: check_complete (is_complete_request) is IPython's own throughout.

    One difference: a cell whose indentation tokenize rejects (a dedent to no enclosing
    level) makes IPython's transform raise IndentationError "in <tokenize>"; here it reaches
    the compiler, which rejects it too, at the cell's own line."""

    _skip_ok = False  # set while transform_cell runs

    def transform_cell(self, cell):
        self._skip_ok = True
        try:
            return super().transform_cell(cell)
        finally:
            self._skip_ok = False

    def do_token_transforms(self, lines):
        if (self._skip_ok and self.token_transformers == _TOKEN_TRANSFORMERS
                and not _may_transform(lines)):
            return lines
        return super().do_token_transforms(lines)


# Builtin types that only the text/plain formatter can show: they have no _repr_*_ methods,
# and no attribute can be added to them.
_PLAIN_TYPES = frozenset({int, float, complex, bool, str, bytes, list, tuple, dict, set,
                          frozenset, range, type(None)})
# Each one's MRO, and the (module, name) keys under which a deferred printer would find it:
# fixed, as builtin types cannot be changed.
_PLAIN_MROS = {t: (t.__mro__, [(c.__module__, c.__name__) for c in t.__mro__])
               for t in _PLAIN_TYPES}


def _trait(obj, name):
    """A trait's value, as its descriptor would return it: traitlets keeps it in
    _trait_values once read or set (~0.05 us here, ~0.4 us through the descriptor; reading
    runs no validation or observer)."""
    try:
        return obj._trait_values[name]
    except KeyError:
        return getattr(obj, name)  # never read yet: made from its default, as IPython would


class KennelDisplayFormatter(DisplayFormatter):
    """IPython's, with a fast path for a value of a builtin type (a cell ending in `1 + 1`):
    its text/plain only, as IPython would compute, unless some formatter has a printer
    registered for the type. IPython asks each of its twelve formatters in turn, each call
    through a decorator that binds its arguments with inspect: 80 us for an int here, most of
    a warm round trip's time in IPython. Where that text is repr(obj) (an int, a str) it is
    computed here too (_repr_text): 3.5 us for the whole format() against 15 us."""

    def format(self, obj, include=None, exclude=None):
        if type(obj) in _PLAIN_TYPES and not include and not exclude and self._plain_only(obj):
            plain = _trait(self, "formatters")["text/plain"]
            data = _repr_text(plain, obj)
            if data is None:
                data = plain(obj)
            return ({} if data is None else {"text/plain": data}), {}
        return super().format(obj, include, exclude)

    def _plain_only(self, obj):
        mro, keys = _PLAIN_MROS[type(obj)]  # (bool, int, object), say
        others = [_trait(self, "ipython_display_formatter"), _trait(self, "mimebundle_formatter")]
        formatters = _trait(self, "formatters")
        others += [f for t, f in formatters.items() if t != "text/plain"]
        for f in others:
            if type(f).__module__ != "IPython.core.formatters":
                return False  # a formatter of the user's, which may show anything: ask it
            try:  # (_trait, inline: 33 reads a cell)
                values = f._trait_values
                singles = values["singleton_printers"]
                types, deferred = values["type_printers"], values["deferred_printers"]
            except KeyError:
                singles, types, deferred = (f.singleton_printers, f.type_printers,
                                            f.deferred_printers)
            if (id(obj) in singles or not types.keys().isdisjoint(mro)
                    or (deferred and not deferred.keys().isdisjoint(keys))):
                return False
        return "text/plain" in formatters


def _repr_text(plain, obj):
    """What IPython's PlainTextFormatter returns for obj when that is repr(obj), or None.

    It is, when the printer IPython's pretty-printer would pick for obj (a singleton's, or
    its type's: the first class of a builtin type's MRO) is pretty's own _repr_pprint, as
    for int, str, bytes, range, True and None unless the user registered another: that
    printer writes repr(obj) line by line, so one line of it as it is. (Each of its
    formatter's calls binds its arguments with inspect and builds a printer: ~8 us.) None
    when repr raises (an int past sys.get_int_max_str_digits): IPython's call shows that."""
    if type(plain) is not PlainTextFormatter:
        return None
    printer = _trait(plain, "singleton_printers").get(id(obj))
    if printer is None:
        printer = _trait(plain, "type_printers").get(type(obj))
    if printer is not _repr_pprint:
        return None
    try:
        text = repr(obj)
    except Exception:
        return None
    # Every character str.splitlines() breaks at is unprintable: one line.
    return text if text and text.isprintable() else None


class KennelShell(InteractiveShell):
    displayhook_class = Type(KennelDisplayHook)
    display_pub_class = Type(KennelDisplayPublisher)
    input_transformer_manager = Instance(KennelTransformerManager, ())

    # publish(msg_type, content): send one iopub message, after pending stream output.
    publish = Any()

    # The traceback of the last error shown, for the execute_reply (None if none).
    last_traceback = Any()

    def system(self, cmd):
        """`!cmd` (and %pip, %conda): cmd through the shell, its output on fds 1 and 2,
        which the kernel captures in order with the cell's own. IPython's default runs it
        under a pty, and the sandbox has none. Sets `_exit_code` as IPython does (-N for
        signal N). An interrupt stops the command, not the cell: SIGINT to the command's
        process group, SIGKILL to what is left of it after SIGINT_GRACE_S, then "^C" on
        stderr; the cell goes on, as in ipykernel. A deadline (or any other exception)
        kills the group at once and ends the cell. A command left running in the
        background (`!server &`) outlives the cell."""
        cmd = self.var_expand(cmd, depth=1)
        proc = subprocess.Popen(cmd, shell=True, start_new_session=True,
                                executable=os.environ.get("SHELL") or "/bin/sh")
        code = None
        try:
            try:
                code = proc.wait()
            except KeyboardInterrupt:
                _signal_group(proc, signal.SIGINT)
                try:
                    proc.wait(SIGINT_GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            # Unless the command ended by itself, nothing of it outlives this call: also
            # when a second interrupt or the deadline lands in the grace above.
            if code is None:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        if code is None:
            print("^C", file=sys.stderr)
            code = -signal.SIGINT
        self.user_ns["_exit_code"] = -(code - 128) if code > 128 else code

    def init_display_formatter(self):
        self.display_formatter = KennelDisplayFormatter(parent=self)
        self.configurables.append(self.display_formatter)

    @classmethod
    def create(cls, publish):
        """The process-wide shell (get_ipython() returns it). A zygote makes it once, before
        it forks (publish None), so that its ~9 MiB are shared by every kernel; a kernel
        forked from it takes it over with its own publish and paths."""
        if cls.initialized():
            shell = cls.instance()
            shell.publish = publish
            if not shell._settle_as_prepared():
                shell._settle_after_fork()
            return shell
        config = Config()
        # A kernel's history lives as long as its process; a sqlite file in the profile
        # would be shared by every session of the same user.
        config.HistoryManager.hist_file = ":memory:"
        config.HistoryManager.db_log_output = True  # so history_request can return outputs
        # jedi costs hundreds of milliseconds on the first completion.
        config.IPCompleter.use_jedi = False
        return cls.instance(config=config, publish=publish)

    # (home, ipython_dir, [(directory, mode)]) that prepare_kernel_paths set, or None.
    _prepared = None

    def prepare_kernel_paths(self, env):
        """In a zygote, before it forks a kernel that will start with env, in its workspace
        (its HOME): set what _settle_after_fork would learn in that kernel, now, without
        making any directory here (the paths are the sandbox's). Kernels then share these
        objects instead of each building its own: the traitlets machinery a ProfileDir runs
        touches, and so copies, ~0.7 MiB of the zygote's pages per kernel. Done again only
        when the paths change; the kernel checks the guess (_settle_as_prepared)."""
        home, ipython_dir = env.get("HOME"), env.get("IPYTHONDIR")
        if not (home and ipython_dir and os.path.isabs(home) and os.path.isabs(ipython_dir)):
            self._prepared = None
            return
        home, ipython_dir = os.path.normpath(home), os.path.normpath(ipython_dir)
        if self._prepared is not None and self._prepared[:2] == (home, ipython_dir):
            return
        location = os.path.join(ipython_dir, "profile_default")
        profile_dir = ProfileDir()  # no location yet, so no directory made here
        subdirs = {"security_dir": 0o700, "log_dir": 0o777, "pid_dir": 0o700,
                   "startup_dir": 0o777}
        # Set as ProfileDir's observers would, minus their mkdir calls; the kernel makes
        # the directories. (_trait_values: traitlets' store, written without notifying.)
        profile_dir._trait_values.update(location=location, _location_isset=True, **{
            name: os.path.join(location, getattr(profile_dir, name + "_name")) for name in subdirs},
            static_dir=os.path.join(location, "static"))
        db = PickleShareDB.__new__(PickleShareDB)  # its __init__ would make the directory
        db.root, db.cache = Path(location, "db"), {}
        self.home_dir = home
        self.init_logger()
        self.starting_dir = home
        self.history_manager.dir_hist[:] = [home]
        self._trait_values.update(ipython_dir=ipython_dir, profile_dir=profile_dir)
        self.db = db
        dirs = [(ipython_dir, 0o777), (location, 0o777)]
        dirs += [(getattr(profile_dir, name), mode) for name, mode in subdirs.items()]
        self._prepared = (home, ipython_dir, dirs + [(str(db.root), 0o777)])

    def _settle_as_prepared(self):
        """In a kernel: True if prepare_kernel_paths guessed its paths right and their
        directories now exist; False if _settle_after_fork must work them out."""
        prepared = self._prepared
        if prepared is None:
            return False
        home, ipython_dir, dirs = prepared
        env = os.environ
        if (os.path.normpath(env.get("HOME", "")) != home or os.getcwd() != home
                or os.path.normpath(env.get("IPYTHONDIR", "")) != ipython_dir):
            return False
        try:
            for path, mode in dirs:
                try:
                    os.mkdir(path, mode)
                except FileExistsError:
                    pass
        except OSError:
            return False  # unwritable, say: IPython's own way picks another directory
        return True

    def _settle_after_fork(self):
        """What the shell learnt from the zygote's process, learnt again in the kernel's: its
        home, working directory and IPython directory (IPYTHONDIR), now inside the sandbox."""
        self.home_dir = get_home_dir()
        self.init_logger()
        self.starting_dir = os.getcwd()
        self.history_manager.dir_hist[:] = [os.getcwd()]
        self.ipython_dir = get_ipython_dir()
        self.profile_dir = ProfileDir.create_profile_dir_by_name(self.ipython_dir, "default")
        self.db = PickleShareDB(os.path.join(self.profile_dir.location, "db"))

    def history_snapshot(self):
        """The session's history as kennel_snapshot keeps it across an eviction: each stored
        cell's input by its number (parsed and raw), the outputs (Out) and their reprs."""
        hm = self.history_manager
        parsed = hm.get_range(session=0, start=1, raw=False)
        raw = hm.get_range(session=0, start=1, raw=True)
        inputs = [(line, p, r) for (_, line, p), (_, _, r) in zip(parsed, raw)]
        dh = self.displayhook
        # `_` and co. assigned by the user (IPython then stops updating them) are theirs.
        unders = [n for n in ("_", "__", "___")
                  if n in self.user_ns and self.user_ns[n] is not getattr(dh, n)]
        return {"inputs": inputs, "outputs": dict(hm.output_hist),
                "reprs": dict(hm.output_hist_reprs), "unders": unders}

    def restore_history(self, history):
        """Make the history of history_snapshot() this shell's, with IPython's names for it:
        In, `_i`, `_iN`, Out, `_N`, and `_`, `__`, `___` for the last three outputs."""
        hm = self.history_manager
        for line, parsed, raw in history["inputs"]:
            hm.store_inputs(line, parsed, raw)
        hm.output_hist_reprs.update(history["reprs"])
        dh = self.displayhook
        for line in sorted(history["outputs"]):
            value = history["outputs"][line]
            hm.output_hist[line] = value  # Out and _oh are this dict
            self.user_ns[f"_{line}"] = value
            dh.___, dh.__, dh._ = dh.__, dh._, value
        # Those the user assigned came back with the namespace; IPython's are its own.
        self.push({n: getattr(dh, n) for n in ("_", "__", "___")
                   if n not in history.get("unders", ())}, interactive=False)

    def warm_up(self, run_cell=None, code=None):
        """Run one throwaway cell (code, by default `1 + 1`; it must bind no name), with
        history as a user's cell has it, then forget it: the namespace, the result cache,
        In/Out, the history and the execution count are as before. run_cell(code,
        store_history) runs it, by default the shell's own run_cell with its output
        discarded; the kernel passes its whole execute path.

        IPython makes much of its machinery on first use (the twelve display formatters, for
        one), and a forked kernel pays for every zygote page its first cell writes: both
        costs land here, before the session's first request rather than inside it. The
        history's path (In, _i1, Out, _1, the history caches) is part of a user's first
        cell, so it runs here too: ~1.5 ms of a pooled session's first cell."""
        code = code or _WARM_UP_CELL
        before = _ShellState(self)
        try:
            if run_cell is None:
                publish, self.publish = self.publish, _discard
                try:
                    self.run_cell(code, store_history=True)
                finally:
                    self.publish = publish
            else:
                run_cell(code, True)
        finally:
            before.restore()

    def should_run_async(self, raw_cell, *, transformed_cell=None,
                         preprocessing_exc_tuple=None):
        # IPython compiles the whole cell once more to see whether it awaits at top level.
        # Without the words await and async it cannot (a look-alike in other letters is a
        # name, not the keyword). That extra compile's warnings (a SyntaxWarning printed
        # twice) and its ValueError for a NUL in the cell (raised out of run_cell) are gone
        # for such cells; the real compile reports both as before.
        cell = transformed_cell
        if isinstance(cell, str) and "await" not in cell and "async" not in cell:
            return False
        return super().should_run_async(raw_cell, transformed_cell=transformed_cell,
                                        preprocessing_exc_tuple=preprocessing_exc_tuple)

    def init_user_ns(self):
        # Also run by %reset. Hidden like In and Out: %who does not list it.
        super().init_user_ns()
        self.push({"CellTimeout": CellTimeout}, interactive=False)

    def init_hooks(self):
        super().init_hooks()
        # obj? and %page go to the client's pager as a payload, not to a terminal pager.
        self.set_hook("show_in_pager", page.as_hook(payloadpage.page), 99)

    def _get_exc_info(self, exc_tuple=None):
        etype, value, tb = super()._get_exc_info(exc_tuple)
        if isinstance(value, ModuleNotFoundError):
            _hint_missing(value)
        return etype, value, _without_kennel_frames(tb)

    def _showtraceback(self, etype, evalue, stb):
        self.last_traceback = stb
        self.publish("error", {
            "ename": etype.__name__,
            "evalue": safe_str(evalue),
            "traceback": stb,
        })

    def enable_gui(self, gui=None):
        # %matplotlib inline calls this with "inline", which needs no event loop. There
        # is no display for a GUI toolkit to draw on, so any other choice is refused.
        if gui not in (None, "inline"):
            raise UsageError(f"kennel has no GUI event loop; {gui!r} is not supported")

    def set_next_input(self, text, replace=False):
        self.payload_manager.write_payload(
            {"source": "set_next_input", "text": text, "replace": replace})

    # exit(keep_kernel=True), as in ipykernel: the client leaves, the session stays.
    keepkernel_on_exit = False

    @default("exiter")
    def _exiter_default(self):
        return ZMQExitAutocall(self)

    def ask_exit(self):
        # exit() tells the client to leave (and, as with ipykernel, to shut the session
        # down unless keep_kernel). The process does not exit by itself: kenneld owns the
        # session's life.
        self.payload_manager.write_payload({"source": "ask_exit",
                                            "keepkernel": bool(self.keepkernel_on_exit)})
        self.keepkernel_on_exit = False


_WARM_UP_CELL = "1 + 1"


class _ShellState:
    """What a cell with history changes in a shell, kept so that restore() undoes one:
    user_ns and user_ns_hidden (_, _i, _i1, _1, ...), the execution count, In (the history's
    input lists), Out and its reprs, the history's caches waiting for its database and its
    _i/_ii/_iii chain, the displayhook's _, __, ___, the last execution's outcome, the cells
    the compiler cached (for tracebacks and linecache), the last line prefiltered,
    sys.stdout's softspace and an error's sys.last_type/value/traceback."""

    _HISTORY_ATTRS = ("_i00", "_i", "_ii", "_iii")
    _HOOK_ATTRS = ("_", "__", "___")
    _SYS_ATTRS = ("last_type", "last_value", "last_traceback")
    _ABSENT = object()

    def __init__(self, shell):
        hm = shell.history_manager
        self._shell = shell
        self._ns = dict(shell.user_ns)
        self._hidden = dict(shell.user_ns_hidden)
        self._count = shell.execution_count
        self._inputs = (len(hm.input_hist_parsed), len(hm.input_hist_raw))
        self._caches = (list(hm.db_input_cache), list(hm.db_output_cache))
        self._outputs = (dict(hm.output_hist), dict(hm.output_hist_reprs))
        self._save_flag = hm.save_flag.is_set()
        self._hm_attrs = [getattr(hm, a) for a in self._HISTORY_ATTRS]
        self._hook_attrs = [getattr(shell.displayhook, a) for a in self._HOOK_ATTRS]
        self._last = (shell.last_execution_succeeded, shell.last_execution_result)
        self._compiled = set(shell.compile._filename_map)
        self._line = getattr(shell, "_last_input_line", self._ABSENT)
        self._stdout = sys.stdout
        self._softspace = getattr(sys.stdout, "softspace", self._ABSENT)
        self._sys = [getattr(sys, a, self._ABSENT) for a in self._SYS_ATTRS]

    def restore(self):
        shell = self._shell
        hm = shell.history_manager
        for ns, saved in ((shell.user_ns, self._ns), (shell.user_ns_hidden, self._hidden)):
            ns.clear()  # the same dicts: In, Out and the shell's frames refer to them
            ns.update(saved)
        shell.execution_count = self._count
        del hm.input_hist_parsed[self._inputs[0]:]
        del hm.input_hist_raw[self._inputs[1]:]
        with hm.db_input_cache_lock:
            hm.db_input_cache[:] = self._caches[0]
        with hm.db_output_cache_lock:
            hm.db_output_cache[:] = self._caches[1]
        for now, saved in zip((hm.output_hist, hm.output_hist_reprs), self._outputs):
            now.clear()
            now.update(saved)
        if not self._save_flag:
            hm.save_flag.clear()
        for attr, value in zip(self._HISTORY_ATTRS, self._hm_attrs):
            setattr(hm, attr, value)
        for attr, value in zip(self._HOOK_ATTRS, self._hook_attrs):
            setattr(shell.displayhook, attr, value)
        shell.last_execution_succeeded, shell.last_execution_result = self._last
        for name in set(shell.compile._filename_map) - self._compiled:
            del shell.compile._filename_map[name]
            linecache.cache.pop(name, None)
            getattr(linecache, "_ipython_cache", {}).pop(name, None)
        self._set(shell, "_last_input_line", self._line)
        if sys.stdout is self._stdout:
            self._set(sys.stdout, "softspace", self._softspace)
        for attr, value in zip(self._SYS_ATTRS, self._sys):
            self._set(sys, attr, value)

    @classmethod
    def _set(cls, obj, attr, value):
        try:
            if value is not cls._ABSENT:
                setattr(obj, attr, value)
            elif hasattr(obj, attr):
                delattr(obj, attr)
        except (AttributeError, TypeError):
            pass  # an object that takes no attributes (a stream, say) never had one set


def _hint_missing(error):
    """Say in a ModuleNotFoundError's message what the runtime has instead, where something
    is close (kennel_runtime.hint): the traceback and the reply's evalue both show it."""
    if getattr(error, "_kennel_hinted", False) or not isinstance(error.msg, str):
        return
    error._kennel_hinted = True
    try:
        said = kennel_runtime.hint(error.name)
    except Exception:
        return  # a hint is a courtesy: never a second error
    if said:
        error.msg = f"{error.msg} (kennel: {said})"


def _discard(msg_type, content):
    pass


def _without_kennel_frames(tb):
    """Cut a traceback at the first kennel frame that user code reached.

    A KeyboardInterrupt or CellTimeout is raised by kennel's signal handler or where a
    shielded write ends, and sys.stdout.write(b"") fails inside kennel_io: the user wants
    to see the line of the cell, as when C code raises, not kennel's internals.
    """
    entry, in_user_code = tb, False
    while entry is not None:
        in_user_code = in_user_code or not _is_kennel(entry.tb_frame)
        following = entry.tb_next
        if in_user_code and following is not None and _is_kennel(following.tb_frame):
            entry.tb_next = None
            break
        entry = following
    return tb


def _is_kennel(frame):
    return os.path.dirname(frame.f_code.co_filename) == _KENNEL_DIR


_KENNEL_DIR = os.path.dirname(os.path.abspath(__file__))


def safe_str(value):
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__} object>"
