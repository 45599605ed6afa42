"""kennel_server: serves kenneld's shell requests, one at a time, with a KennelShell.

Handles execute, complete, inspect, is_complete, history and comm_info requests and
answers every other *_request with an error reply, so kenneld's queue never stalls. Comm
messages (comm_open, comm_msg, comm_close) go to the comm manager (kennel_comm), and each is
answered with a `done` frame instead of a reply: kenneld publishes idle then. kenneld
answers kernel_info, interrupt and shutdown itself and publishes status, so none of that is
here. The execute_reply's
metadata carries the cell's metrics (CPU time and peak memory) and the workspace files the
cell created, changed or deleted (kennel_files).
"""

import asyncio
import mmap
import os
import resource
import sys
import threading

import kennel_ipython

kennel_ipython.import_ipython()  # before IPython's first import: its terminal deferred
from IPython.core.async_helpers import get_asyncio_loop  # noqa: E402
from IPython.utils.tokenutil import line_at_cursor, token_at_cursor  # noqa: E402

from kennel_deadline import CellTimeout
import kennel_files
import kennel_runtime
import kennel_snapshot
from kennel_comm import COMM_TYPES, KernelShim
from kennel_io import FdCapture, Stdin, StreamBuffer, StreamWriter
from kennel_pipe import MAX_FRAME_BYTES, FrameError, decode_object, encode_part
from kennel_shell import KennelShell, safe_str

# The names an op header lists (`saved`' unsaved, `restored`' failed): kenneld keeps as many,
# each of at most as many UTF-8 bytes (HISTORY_MAX_NAMES, HISTORY_MAX_NAME in src/session.c),
# and refuses an op header over 256 KiB (OP_MAX_BYTES) rather than parse it.
MAX_NAMES = 256
MAX_NAME_BYTES = 256
MAX_SNAPSHOT_BYTES = MAX_FRAME_BYTES - (1 << 20)  # a snapshot and its saved frame's op header


class _SessionLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """One event loop per session: in the main thread, asyncio's current loop is the one
    `await` in a cell runs (IPython's), made when first asked for, unless user code set
    another. So a task one cell makes can be awaited by a later cell, also after
    asyncio.run() in a cell (which leaves no loop set). Other threads: asyncio's own rules."""

    def __init__(self):
        super().__init__()
        self._set_in_main = None

    def set_event_loop(self, loop):
        super().set_event_loop(loop)
        if threading.current_thread() is threading.main_thread():
            self._set_in_main = loop

    def get_event_loop(self):
        if threading.current_thread() is threading.main_thread() and self._set_in_main is None:
            return get_asyncio_loop()
        return super().get_event_loop()


# Set at import, in the zygote: every kernel inherits it, rather than each writing to the
# zygote's pages to set its own (no loop exists until one is asked for).
asyncio.set_event_loop_policy(_SessionLoopPolicy())


def enable_inline_figures():
    """A zygote imports the inline backend before any shell exists, so the backend's
    import-time hook (figures shown at the end of each cell) found none: run it once the
    shell is made. A no-op where matplotlib is not imported yet: then the hook runs itself."""
    inline = sys.modules.get("matplotlib_inline.backend_inline")
    if inline is not None:
        inline._enable_matplotlib_integration()


class Kernel:
    def __init__(self, pipe, gate):
        self._pipe = pipe
        self._gate = gate
        self._pid = os.getpid()
        self._workspace = os.getcwd()  # kenneld starts the kernel in the workspace
        self._files = None  # kennel_files.Tracker of the workspace, from the first cell on
        self._reply_metadata = {}  # of the request being served; handlers may add to it
        # _execute arms the gate around the cell; a SIGINT or SIGUSR2 landing in its own
        # lines, just before or after the cell, is dropped rather than raised into the
        # request loop.
        gate.protect(Kernel._execute.__code__)
        gate.protect(Kernel._comm.__code__)
        gate.protect(Kernel._save.__code__)
        gate.protect(Kernel._restore.__code__)
        # The shell is created before fds 1 and 2 are captured, so that what IPython
        # prints while starting (an unwritable home, say) goes to kenneld's log.
        fresh = not KennelShell.initialized()  # else a zygote made it, and did what follows
        self._shell = KennelShell.create(self.publish)
        if fresh:
            enable_inline_figures()
        self._streams = StreamBuffer(self._publish_stream, gate)
        FdCapture(self._streams)
        sys.stdout = StreamWriter("stdout", 1, self._streams)
        sys.stderr = StreamWriter("stderr", 2, self._streams)
        self._stdin = Stdin(pipe, self._streams)
        # get_ipython().kernel, with the comm manager. Cheap: ipykernel is not imported.
        self._comms = KernelShim(self._shell, self.send_iopub, pipe.diag)
        self._shell.kernel = self._comms
        self._lost_comms = []  # a revived kernel's predecessor's, closed at the first request
        self._handlers = {
            "execute_request": self._execute,
            "complete_request": self._complete,
            "inspect_request": self._inspect,
            "is_complete_request": self._is_complete,
            "history_request": self._history,
            "comm_info_request": self._comm_info,
        }

    def warm_up(self):
        """A throwaway cell through the whole execute path before the first request, its
        messages dropped; see KennelShell.warm_up."""
        pipe, self._pipe = self._pipe, _Muted(self._pipe)
        try:
            self._shell.warm_up(lambda code, store_history: self._execute(
                {"code": code, "store_history": store_history}))
        finally:
            self._pipe = pipe

    def serve(self):
        while True:
            op, parts = self._pipe.recv()
            if op["op"] == "save":
                self._save(to_file=op.get("fd") is True)
                continue
            if op["op"] == "restore" and parts:
                self._restore(parts[0])
                continue
            if op["op"] == "restore" and op.get("fd") is True:
                self._restore_mapped()
                continue
            channel = op.get("channel") if op["op"] == "request" else None
            if channel == "shell":
                self._serve_shell(parts)
            elif channel != "stdin":  # stdin: an input_reply that came after an interrupt
                self._pipe.diag(f"ignoring {op['op']!r} frame for channel {channel!r}")

    def _save(self, to_file=False):
        """Idle eviction: the namespace as a snapshot for kenneld to keep. Pickling runs user
        code (__reduce__): the gate is armed, so that kenneld's deadline for it (SIGUSR2)
        stops it with CellTimeout, and the kernel stays.

        to_file: kenneld has a file for it. The kernel says the snapshot's size
        (save_ready), gets the file (or a refusal: over the session's disk cap) and writes
        the snapshot there, its arrays from where they are; `saved` then carries no bytes.
        No frame bounds a snapshot then; the session's disk cap (and this process's
        RLIMIT_FSIZE, the same cap) does."""
        shell = self._shell
        max_bytes = sys.maxsize if to_file else MAX_SNAPSHOT_BYTES
        comms = self._comms.open_comms()
        self._gate.arm()
        try:
            history = shell.history_snapshot()
            try:
                data, unsaved = kennel_snapshot.save(shell.user_ns, shell.user_ns_hidden,
                                                     shell.execution_count, history,
                                                     max_bytes, comms)
            except kennel_snapshot.TooLarge:
                if not history["outputs"]:
                    raise
                # Too large for a frame: the namespace without the outputs (large results
                # shown once and bound to no name, most likely), rather than no eviction.
                lost = [f"Out[{line}]" for line in history["outputs"]]
                history["outputs"] = {}
                data, unsaved = kennel_snapshot.save(shell.user_ns, shell.user_ns_hidden,
                                                     shell.execution_count, history,
                                                     max_bytes, comms)
                unsaved = sorted(set(unsaved) | set(lost))
            error = None
        except BaseException as e:  # short of memory, the pickler broke, stopped: keep it all
            error = f"{type(e).__name__}: {e}"[:500]
        self._gate.disarm()
        try:
            if error is None and to_file:
                self._pipe.send({"op": "save_ready", "bytes": data.nbytes})
                fd = self._pipe.recv_fd()
                try:
                    self._pipe.write_file(fd, data)
                finally:
                    os.close(fd)
                self._pipe.send({"op": "saved", "unsaved": _some(unsaved),
                                 "bytes": data.nbytes})
                return
            if error is None:
                self._pipe.send({"op": "saved", "unsaved": _some(unsaved)}, data)
                return
        except (FrameError, MemoryError, OSError) as e:
            # too large for a frame or for memory, no file, or the disk cap: keep it all
            error = f"{type(e).__name__}: {e}"[:500]
        self._pipe.send({"op": "saved", "error": error})

    def _restore_mapped(self):
        """A revival whose snapshot kenneld passes as its file: mapped copy-on-write, so
        that its large arrays are views of pages the page cache already holds (what it
        costs to copy them into fresh memory is most of a revival on this VM kind). kenneld
        replaces a snapshot by renaming a new file over it, so the mapping never changes
        under the arrays; they keep it, and the file's blocks, while they live."""
        self._pipe.send({"op": "restore_ready"})
        try:
            fd = self._pipe.recv_fd()
            try:
                data = memoryview(mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE,
                                            prot=mmap.PROT_READ | mmap.PROT_WRITE))
            finally:
                os.close(fd)
        except (OSError, ValueError) as e:
            self._pipe.send({"op": "restored",
                             "failed": [f"(the whole snapshot: {type(e).__name__})"]})
            return
        self._restore(data)

    def _restore(self, data):
        """A revived session: load the snapshot before any request, under kenneld's deadline
        as _save is."""
        shell = self._shell
        self._gate.arm()
        try:
            shell.execution_count, failed, history = kennel_snapshot.restore(data, shell.user_ns)
            shell.restore_history(history)
            self._lost_comms = history.get("comms", [])
        except BaseException as e:  # SystemExit from a __setstate__ too
            failed = [f"(the whole snapshot: {type(e).__name__})"]
        self._gate.disarm()
        self._pipe.send({"op": "restored", "failed": _some(failed)})

    def publish(self, msg_type, content):
        """Send one iopub message after all stream output written before it.

        A cell's execute_result is held for its reply, which follows it once IPython's
        post-execute hooks have run: one write to kenneld instead of two (the pipe's send;
        anything sent first, a hook's figure or a stream, sends it first). Not when IPython
        shows more than the last statement: code runs after it, and its Out must not wait
        for that code."""
        hold = (msg_type == "execute_result"
                and self._shell.ast_node_interactivity in ("last_expr", "last_expr_or_assign"))
        try:
            self.send_iopub(msg_type, content, hold=hold)
        except FrameError as e:
            self._publish_stream("stderr", f"[kennel: {msg_type} not sent: {e}]\n")

    def send_iopub(self, msg_type, content, metadata=None, buffers=(), hold=False):
        """Send one iopub message, with its binary buffers, after all stream output written
        before it; from any thread. Raises FrameError when it cannot be sent (content that
        is not JSON, more than 61 buffers, past 64 MiB)."""
        op = {"op": "iopub", "msg_type": msg_type}
        count = content.get("execution_count") if msg_type == "execute_input" else None
        if type(count) is int:
            # kenneld keeps the count from the op header, and passes the content on unparsed.
            op["execution_count"] = count
        with self._streams.flushed():
            self._pipe.send(op, metadata or {}, content, *buffers, hold=hold)

    def _publish_stream(self, name, text):
        self._pipe.send({"op": "iopub", "msg_type": "stream"}, {}, {"name": name, "text": text})

    def _serve_shell(self, parts):
        if len(parts) < 4:
            self._pipe.fatal(f"shell request with {len(parts)} parts after the op header")
        try:
            header = decode_object(parts[0])
            msg_type, msg_id = header["msg_type"], header["msg_id"]
            if not isinstance(msg_type, str) or not isinstance(msg_id, str):
                raise ValueError("msg_type and msg_id must be strings")
        except (ValueError, KeyError) as e:
            # Without a msg_id there is no way to reply, and kenneld would wait forever.
            self._pipe.fatal(f"shell request with a bad header: {e!r}")
        if self._lost_comms:
            lost, self._lost_comms = self._lost_comms, []
            self._comms.close_lost(lost)
        if msg_type in COMM_TYPES:
            self._comm(header, parts)
            return
        if not msg_type.endswith("_request"):
            self._pipe.diag(f"ignoring shell message {msg_type!r}")
            return
        handler = self._handlers.get(msg_type)
        self._reply_metadata = {}
        try:
            content = decode_object(parts[3])
            self._comms.set_parent({"header": header, "content": content})
            if handler is None:
                reply = _error("UnknownMessageType", f"{msg_type} is not supported")
            else:
                reply = handler(content)
        except Exception as e:  # a bad request or a kernel bug: still exactly one reply
            reply = _error(type(e).__name__, str(e))
        self._reply(msg_type[:-len("_request")] + "_reply", msg_id, reply, self._reply_metadata)

    def _reply(self, msg_type, msg_id, content, metadata):
        # The status in the op header too: kenneld reads it there, and passes the content
        # on unparsed.
        op = {"op": "reply", "msg_type": msg_type, "parent_msg_id": msg_id,
              "status": content.get("status")}
        if content.get("status") == "error" and isinstance(content.get("ename"), str):
            op["ename"] = content["ename"][:128]  # for kenneld's run record
        with self._streams.flushed():
            try:
                self._pipe.send(op, metadata, content)
            except FrameError as e:
                self._pipe.send(dict(op, status="error"), metadata, _error("FrameError", str(e)))

    def _comm(self, header, parts):
        """One comm message from the front end, to the comm manager, then `done`, which
        kenneld waits for as it waits for a reply. Handlers run user code (a widget's
        observers): under the gate, as a cell, so that an interrupt or the deadline stops
        them."""
        try:
            msg = {"header": header, "msg_id": header["msg_id"],
                   "msg_type": header["msg_type"], "parent_header": decode_object(parts[1]),
                   "metadata": decode_object(parts[2]), "content": decode_object(parts[3]),
                   "buffers": [memoryview(b) for b in parts[4:]]}
        except ValueError as e:
            msg = None
            self._pipe.diag(f"ignoring a malformed {header['msg_type']}: {e}"[:300])
        if msg is not None:
            self._comms.set_parent(msg)
            stopped = None
            self._gate.arm()
            try:
                self._comms.dispatch(msg)
            except (KeyboardInterrupt, CellTimeout) as e:
                stopped = e
            except Exception as e:  # KeyError for a message without comm_id, say
                self._pipe.diag(f"{header['msg_type']} failed: {type(e).__name__}: {e}"[:300])
            finally:
                self._gate.disarm()
            if os.getpid() != self._pid:
                os._exit(0)  # a child forked in a handler must not serve the session
            if stopped is not None:
                self._shell.showtraceback((type(stopped), stopped, stopped.__traceback__))
        with self._streams.flushed():
            self._pipe.send({"op": "done", "parent_msg_id": header["msg_id"]})

    def _execute(self, content):
        code = content["code"]
        if not isinstance(code, str):
            raise TypeError("code must be a string")
        silent = bool(content.get("silent", False))
        store_history = bool(content.get("store_history", True)) and not silent
        expressions = content.get("user_expressions") or {}
        shell = self._shell
        if not silent:
            self.publish("execute_input", {"code": code,
                                           "execution_count": shell.execution_count})
        shell.last_traceback = None
        payloads = shell.payload_manager
        # Cleared only when not empty, before the cell and after it: each clear is a trait
        # set, with its validation and observers (~2 us), and the list is nearly always empty.
        if payloads.read_payload():
            payloads.clear_payload()
        interrupt = None
        files_before = self._files_snapshot()
        start = _Usage()
        with self._stdin.serving(bool(content.get("allow_stdin", False))):
            self._gate.arm()
            try:
                result = shell.run_cell(code, store_history=store_history, silent=silent)
                values = shell.user_expressions(expressions) if result.success else {}
            except (KeyboardInterrupt, CellTimeout) as e:
                # Stopped inside IPython's own bookkeeping rather than in user code.
                interrupt = e
            finally:
                self._gate.disarm()
        if os.getpid() != self._pid:
            os._exit(0)  # a child forked in the cell must not serve the session
        end = _Usage()
        self._reply_metadata["runtime_digest"] = kennel_runtime.digest()
        self._reply_metadata["metrics"] = {
            "cpu_ms": (end.cpu_s - start.cpu_s) * 1000,
            "peak_memory_bytes": end.maxrss_bytes,
        }
        files_after = self._files_snapshot()
        if files_before is not None and files_after is not None:
            self._reply_metadata.update(kennel_files.changes(files_before[0], *files_after))
        payload = payloads.read_payload()
        if payload:
            payloads.clear_payload()
        reply = {
            "status": "ok",
            "execution_count": shell.execution_count - 1,
            "user_expressions": {},
            "payload": payload or [],  # not the list the manager still holds, if empty
        }
        if interrupt is not None:
            shell.showtraceback((type(interrupt), interrupt, interrupt.__traceback__))
            error = interrupt
        else:
            error = result.error_before_exec or result.error_in_exec
            reply["user_expressions"] = values
        if error is not None:
            reply.update(_error(type(error).__name__, safe_str(error)))
            reply["traceback"] = shell.last_traceback or []
        return reply

    def _files_snapshot(self):
        """(snapshot, paths that may differ from the previous one or None), or None. The cell
        may have broken what the walk uses (os.scandir replaced, say): the reply then goes
        without the list of files rather than fail."""
        try:
            if self._files is None:
                self._files = kennel_files.Tracker(self._workspace)
            return self._files.snapshot()
        except Exception as e:
            self._pipe.diag(f"workspace snapshot failed: {type(e).__name__}: {e}"[:300])
            if self._files is not None:
                self._files.close()
                self._files = None
            return None

    def _complete(self, content):
        code = content["code"]
        cursor_pos = _cursor(code, content.get("cursor_pos"))
        # IPython's non-jedi completer works on one line.
        line, line_start = line_at_cursor(code, cursor_pos)
        text, matches = self._shell.complete("", line, cursor_pos - line_start)
        return {
            "status": "ok",
            "matches": matches,
            "cursor_start": cursor_pos - len(text),
            "cursor_end": cursor_pos,
            "metadata": {},
        }

    def _inspect(self, content):
        code = content["code"]
        cursor_pos = _cursor(code, content.get("cursor_pos"))
        name = token_at_cursor(code, cursor_pos)
        try:
            data = self._shell.object_inspect_mime(
                name, detail_level=content.get("detail_level", 0))
        except KeyError:
            return {"status": "ok", "found": False, "data": {}, "metadata": {}}
        # IPython's text/html here is the plain text in a <pre>; clients render the
        # ANSI-coloured text/plain better.
        data.pop("text/html", None)
        return {"status": "ok", "found": True, "data": data, "metadata": {}}

    def _is_complete(self, content):
        status, indent = self._shell.input_transformer_manager.check_complete(content["code"])
        reply = {"status": status}
        if status == "incomplete":
            reply["indent"] = " " * (indent or 0)
        return reply

    def _history(self, content):
        history = self._shell.history_manager
        kind = content.get("hist_access_type")
        raw = content.get("raw", True)
        output = content.get("output", False)
        if kind == "tail":
            entries = history.get_tail(content.get("n", 10), raw=raw, output=output,
                                       include_latest=True)
        elif kind == "range":
            entries = history.get_range(content.get("session", 0), content.get("start", 1),
                                        content.get("stop"), raw=raw, output=output)
        elif kind == "search":
            entries = history.search(content.get("pattern", "*"), raw=raw, output=output,
                                     n=content.get("n"), unique=content.get("unique", False))
        else:
            raise ValueError(f"unknown hist_access_type {kind!r}")
        return {"status": "ok", "history": list(entries)}

    def _comm_info(self, content):
        target_name = content.get("target_name")
        return {"status": "ok", "comms": self._comms.comm_info(
            target_name if isinstance(target_name, str) else None)}


class _Muted:
    """A pipe that drops what is sent and passes the rest (diagnostics) on."""

    def __init__(self, pipe):
        self._real = pipe

    def send(self, op, *parts, hold=False):
        pass

    def __getattr__(self, name):
        return getattr(self._real, name)


class _Usage:
    """Resource use of the kernel so far: CPU seconds of the process and of its
    waited-for children (user + system), and the process's peak RSS."""

    def __init__(self):
        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu_s = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
        self.maxrss_bytes = own.ru_maxrss * 1024  # Linux reports KiB


def _some(names):
    """As many of names as kenneld keeps (MAX_NAMES), each of at most MAX_NAME_BYTES as the
    pipe writes it (control characters as six-byte escapes)."""
    return [n for n in names if len(encode_part(n)) <= MAX_NAME_BYTES + 2][:MAX_NAMES]


def _cursor(code, pos):
    """A request's cursor_pos within code: the end when absent, clamped when out of range
    (a client's off-by-some must not echo a negative cursor_start back)."""
    if pos is None:
        return len(code)
    if not isinstance(pos, int) or isinstance(pos, bool):
        raise TypeError("cursor_pos must be an integer")
    return min(max(pos, 0), len(code))


def _error(ename, evalue):
    return {"status": "error", "ename": ename, "evalue": evalue, "traceback": []}
